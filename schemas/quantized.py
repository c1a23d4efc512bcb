"""Quantized weights held exactly: the integers a source stores for a layer's W or R, with their scale and zero
point, never replaced by floats.

A ``QuantizedWeights`` describes one direction's W ``[G*H, I]`` or R ``[G*H, H]`` in the canonical layout
(``schemas.layer``; a format storing the transpose is transposed when read, the integers unchanged)::

    W[j, k] = (values[j, k] - zero_point[g]) * scale[g]

where ``g`` is the record's granularity: one pair for the whole tensor (``axis`` None), one per output row
(``axis`` 0: per channel, ``scale`` and ``zero_point`` of shape [G*H]) or one per block of ``block_size``
consecutive columns of a row (``axis`` 1, shape [G*H, K / block_size]). The difference ``values -
zero_point`` is exact in float32 for every width up to 16 bits, so ``dequantized`` rounds once, as
ONNX's ``DequantizeLinear`` and onnxruntime's kernels do: the float view every executor and float writer uses.

The scale is stored as the producer stores it, float32 or float16 (NNCF's compressed weights), and ``arithmetic``
says how the runtime computes the product (docs/conventions.md §3b, §9b)::

    float32:  W = f32((values - zero_point) * f32(scale))        one rounding, to float32
    float16:  W = f32(f16((values - zero_point) * f32(scale)))   rounded to float16, then widened (exactly)

``float32`` is what OpenVINO computes for NNCF's float16 decompression chain (Convert to f16, Subtract, Multiply by
an f16 scale, Convert to f32: it never rounds to float16 in between), ``float16`` what onnxruntime computes for a
``DequantizeLinear`` with a float16 scale (its output is float16) followed by a ``Cast`` to float. With a float16
scale and integers of at most 8 bits the product is exact in float32 (8 + 11 significant bits), so each form is
one rounding of the exact value, bit for bit what those runtimes compute.

Integers narrower than their container (4-bit values in int8/uint8) carry ``bits``; the writers pack them (two a
byte, the first in the low nibble, as ONNX's INT4/UINT4 and OpenVINO's i4/u4 do).

``dynamic_activations`` records a semantic of the source operator rather than of the weights: the name of the
run-time arithmetic (``RUN_TIME_SCHEMES``) by which it also quantizes its matrix products' float operands (X, h):
onnxruntime's ``DynamicQuantizeLSTM`` to uint8 per tensor (docs/conventions.md §9), LiteRT's hybrid kernels to
int8 per batch row at every step (§11), an arithmetic a float layer does not reproduce; '' for none.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

import numpy as np

from gatepack.schemas.schemes import LITERT_ASYMMETRIC, LITERT_SYMMETRIC, ORT_DYNAMIC

GRANULARITIES = ("per tensor", "per channel", "per block")
BLOCK_BYTES = 1 << 20  # the float32s computed at a time (a block of rows that stays in cache)
# The run-time arithmetic of an operator that quantizes its matrix products' float operands itself
# (``QuantizedWeights.dynamic_activations``): name -> what it does, in the findings' words.
RUN_TIME_SCHEMES = {
    ORT_DYNAMIC: "X and h quantized to uint8 at run time",
    LITERT_ASYMMETRIC: "X and h quantized to int8 per batch row at every step, asymmetric (LiteRT's hybrid kernels)",
    LITERT_SYMMETRIC: "X and h quantized to int8 per batch row at every step, symmetric (LiteRT's hybrid kernels)",
}
ARITHMETICS = ("float32", "float16")  # how the product is rounded (module docstring)
SCALE_TYPES = (np.float32, np.float16)


class QuantizationError(ValueError):
    """A quantized record that contradicts itself; the message names the field and the value."""


@dataclass(frozen=True, eq=False, repr=False)
class QuantizedWeights:
    """One direction's quantized W or R (module docstring): integers, scale, zero point and their granularity."""

    values: np.ndarray  # integers [rows, cols] (int8, uint8, int16, uint16), canonical layout
    scale: np.ndarray  # float32 or float16: [] per tensor, [rows] per channel, [rows, cols / block_size] per block
    zero_point: np.ndarray  # the values' dtype, the scale's shape
    axis: int | None = None  # None: per tensor; 0: per output row (channel); 1: per block along the row
    block_size: int | None = None  # axis 1 only
    bits: int = 8
    signed: bool = True
    dynamic_activations: str = ""  # the source's run-time quantization of X and h (RUN_TIME_SCHEMES; '': none)
    arithmetic: str = "float32"  # ARITHMETICS: the product rounded to float32, or to float16 then widened

    def __post_init__(self) -> None:
        self.validate()

    def __repr__(self) -> str:
        return f"QuantizedWeights({self.describe()}, {list(self.values.shape)})"

    @property
    def granularity(self) -> str:
        """'per tensor', 'per channel' or 'per block'."""
        return GRANULARITIES[0 if self.axis is None else self.axis + 1]

    def describe(self) -> str:
        """E.g. 'int8 per channel, symmetric' or 'uint4 per block of 32, zero point 0..15, float16 scale'."""
        kind = f"{'' if self.signed else 'u'}int{self.bits}"
        granularity = self.granularity + (f" of {self.block_size}" if self.block_size else "")
        zeros = np.unique(self.zero_point)
        zero = (
            "symmetric"
            if zeros.size == 1 and zeros[0] == 0
            else "zero point " + (str(int(zeros[0])) if zeros.size == 1 else f"{int(zeros.min())}..{int(zeros.max())}")
        )
        scale = "" if self.scale.dtype == np.float32 else ", float16 scale"
        rounded = "" if self.arithmetic == "float32" else ", float16 arithmetic"
        return f"{kind} {granularity}, {zero}{scale}{rounded}"

    @property
    def stored_bytes(self) -> int:
        """The bytes the integers take packed at ``bits`` a value, plus the scales and zero points as stored."""
        return -(-self.values.size * self.bits // 8) + self.scale.nbytes + -(-self.zero_point.size * self.bits // 8)

    def broadcast(self, array: np.ndarray, rows: slice = slice(None)) -> np.ndarray:
        """``array`` (the scale or zero point) spread over the values' shape (over ``rows`` of them)."""
        if self.axis is None:
            return array.reshape(1, 1)
        if self.axis == 0:
            return array[rows].reshape(-1, 1)
        assert self.block_size is not None  # (validated)
        return np.repeat(array[rows], self.block_size, axis=1)

    def dequantized(self, dtype: "np.dtype | type | str" = np.float32) -> np.ndarray:
        """``dequantize`` of the record's arrays, then cast to ``dtype``; computed a block of rows at a time into the
        result (no temporaries of the weight's size). The record remembers the float32 array it returns, so
        ``is_dequantization`` knows it without computing it again."""
        floats = np.empty(self.values.shape, np.float32)
        for rows in self._blocks():
            floats[rows] = self._dequantized_rows(rows)
        result = floats.astype(dtype, copy=False)
        if result is floats:
            object.__setattr__(self, "_view", weakref.ref(floats))
        return result

    def is_dequantization(self, floats: np.ndarray) -> bool:
        """Whether ``floats`` is exactly ``dequantized(floats.dtype)``: at once for the array ``dequantized``
        returned, else compared a block of rows at a time."""
        view = getattr(self, "_view", None)
        if view is not None and view() is floats:
            return True
        if floats.shape != self.values.shape:
            return False
        return all(
            np.array_equal(self._dequantized_rows(rows).astype(floats.dtype, copy=False), floats[rows])
            for rows in self._blocks()
        )

    def _dequantized_rows(self, rows: slice) -> np.ndarray:
        """``dequantize`` of the values' ``rows``."""
        spread = (self.broadcast(self.zero_point, rows), self.broadcast(self.scale, rows))
        return dequantize(self.values[rows], *spread, self.arithmetic)

    def _blocks(self) -> "list[slice]":
        """The values' rows in blocks of about ``BLOCK_BYTES`` float32s (none for an empty array)."""
        rows, cols = self.values.shape
        step = max(1, BLOCK_BYTES // max(4 * cols, 1))
        return [slice(start, start + step) for start in range(0, rows if cols else 0, step)]

    def with_values(self, values: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> "QuantizedWeights":
        """The same scheme on other arrays (rows reordered by a writer, e.g. gate blocks)."""
        return replace(self, values=values, scale=scale, zero_point=zero_point)

    def validate(self) -> None:
        """Types, shapes and ranges consistent, else QuantizationError naming the field."""
        values, scale, zero = self.values, self.scale, self.zero_point
        if self.dynamic_activations and self.dynamic_activations not in RUN_TIME_SCHEMES:
            raise QuantizationError(
                f"dynamic_activations {self.dynamic_activations!r} is not one of {list(RUN_TIME_SCHEMES)}"
            )
        if not isinstance(values, np.ndarray) or values.ndim != 2 or values.dtype.kind not in "iu":
            raise QuantizationError(f"values {getattr(values, 'dtype', values)!r} are not a 2-D integer array")
        if values.dtype.itemsize > 2:
            raise QuantizationError(f"values are {values.dtype}; quantized weights are at most 16 bits")
        if self.signed != (values.dtype.kind == "i"):
            raise QuantizationError(f"signed={self.signed} but the values are {values.dtype}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 8 * values.itemsize:
            raise QuantizationError(f"bits {self.bits!r} do not fit {values.dtype}")
        if not isinstance(scale, np.ndarray) or scale.dtype not in SCALE_TYPES:
            raise QuantizationError(
                f"scale is {getattr(scale, 'dtype', type(scale).__name__)}, expected float32 or float16"
            )
        if self.arithmetic not in ARITHMETICS:
            raise QuantizationError(f"arithmetic {self.arithmetic!r} is not one of {', '.join(ARITHMETICS)}")
        if not isinstance(zero, np.ndarray) or zero.dtype != values.dtype or zero.shape != scale.shape:
            raise QuantizationError(
                f"zero point {getattr(zero, 'dtype', None)} {list(getattr(zero, 'shape', ()))} must be "
                f"{values.dtype} {list(scale.shape)} (the values' type, the scale's shape)"
            )
        rows, cols = values.shape
        expected = {None: (), 0: (rows,)}
        if self.axis == 1:
            if not isinstance(self.block_size, int) or self.block_size < 1 or cols % self.block_size:
                raise QuantizationError(f"block_size {self.block_size!r} does not divide the {cols} columns")
            expected[1] = (rows, cols // self.block_size)
        elif self.block_size is not None:
            raise QuantizationError(f"block_size {self.block_size} needs axis 1, got axis {self.axis!r}")
        if self.axis not in expected:
            raise QuantizationError(f"axis {self.axis!r} is not None, 0 (per channel) or 1 (per block)")
        if scale.shape != expected[self.axis]:
            raise QuantizationError(f"scale has shape {list(scale.shape)}, expected {list(expected[self.axis])}")
        if not np.isfinite(scale).all():
            raise QuantizationError("scale holds a value that is not finite")
        low, high = (-(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1) if self.signed else (0, 2**self.bits - 1)
        info = np.iinfo(values.dtype)
        for label, array in (("values", values), ("zero point", zero)):
            if (low, high) == (info.min, info.max):
                continue  # every value of the type is in range: no pass over the integers (int8 at 8 bits)
            if array.size and (int(array.min()) < low or int(array.max()) > high):
                raise QuantizationError(f"{label} span {int(array.min())}..{int(array.max())}, beyond {self.bits} bits")


def dequantize(values: np.ndarray, zero_point: np.ndarray, scale: np.ndarray, arithmetic: str) -> np.ndarray:
    """``(values - zero_point) * scale`` in float32, the three broadcast together (one rounding; with ``arithmetic``
    float16 the product is rounded to float16 and widened back: module docstring)."""
    product = (values.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)
    return product.astype(np.float16).astype(np.float32) if arithmetic == "float16" else product


@dataclass(frozen=True, eq=False)
class FloatView:
    """The float view of ``record`` in ``dtype`` (``record.dequantized(dtype)``), not made yet: what a direction
    holds as its W or R when the weights were quantized from floats (``DirectionParams``), so that a writer of the
    integers never makes the float array it does not read. The array is made on the first read of W or R."""

    record: QuantizedWeights
    dtype: np.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.record.values.shape)

    @property
    def nbytes(self) -> int:
        """The bytes of the array it makes."""
        return self.record.values.size * np.dtype(self.dtype).itemsize

    def make(self) -> np.ndarray:
        return self.record.dequantized(self.dtype)


def compacted(
    values: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int | None = None, arithmetic: str = "float32"
) -> QuantizedWeights:
    """The record of one direction's integers [rows, cols] with their spread parameters: per tensor, per channel
    or per block along the row (the longest block dividing the row that holds them), whichever is exact. ``bits``:
    the integers' width (default: their container's); ``arithmetic``: as the record's."""
    width, signed = bits or 8 * values.itemsize, values.dtype.kind == "i"

    def record(scales: np.ndarray, zeros: np.ndarray, axis: int | None, block: int | None) -> QuantizedWeights:
        return QuantizedWeights(values, scales, zeros, axis, block, width, signed, arithmetic=arithmetic)

    if (scale == scale.flat[0]).all() and (zero == zero.flat[0]).all():
        return record(np.asarray(scale.flat[0]), np.asarray(zero.flat[0]), None, None)
    if (scale == scale[:, :1]).all() and (zero == zero[:, :1]).all():
        return record(np.ascontiguousarray(scale[:, 0]), np.ascontiguousarray(zero[:, 0]), 0, None)
    cols = values.shape[1]
    for block in (b for b in range(cols, 0, -1) if cols % b == 0):
        scales, zeros = (a.reshape(a.shape[0], cols // block, block) for a in (scale, zero))
        if (scales == scales[:, :, :1]).all() and (zeros == zeros[:, :, :1]).all():
            return record(np.ascontiguousarray(scales[:, :, 0]), np.ascontiguousarray(zeros[:, :, 0]), 1, block)
    raise AssertionError("a block of 1 always holds the parameters")


PALETTE_BITS = (1, 2, 3, 4, 6, 8)  # the index widths Core ML's constexpr_lut_to_dense takes (iOS18; iOS16 no 3)


@dataclass(frozen=True, eq=False, repr=False)
class PalettizedWeights:
    """One direction's W ``[G*H, I]`` or R ``[G*H, H]`` stored as a lookup table (palettized weights, Core ML's
    ``constexpr_lut_to_dense`` with one value an entry): ``bits``-bit indices into a palette of ``2**bits`` float
    values, one palette per group of rows and columns::

        W[j, k] = palette[j, k // (cols / col_groups), indices[j, k]]

    The palette is held per row (``[rows, col_groups, 2**bits]``: a group of rows sharing a palette repeats it), so
    that rows move with theirs (gate blocks reordered); ``grouped`` gives back the producer's table, one palette per
    group of consecutive rows. The float view is the palette's values themselves, no arithmetic: exact in the
    palette's dtype (float32 or float16, widened exactly)."""

    indices: np.ndarray  # uint8 [rows, cols], each < 2**bits
    palette: np.ndarray  # float32 or float16 [rows, col_groups, 2**bits]
    bits: int
    dynamic_activations: str = ""  # (none: the layer computes in float on the palette's values)

    def __post_init__(self) -> None:
        self.validate()

    def __repr__(self) -> str:
        return f"PalettizedWeights({self.describe()}, {list(self.indices.shape)})"

    @property
    def col_groups(self) -> int:
        return int(self.palette.shape[1])

    def describe(self) -> str:
        """E.g. '4-bit palette per tensor (16 entries)' or '4-bit palette per 8 rows x 2 column groups, float16'."""
        table = self.grouped()
        rows = self.indices.shape[0] // table.shape[0]
        where = (
            "per tensor"
            if table.shape[:2] == (1, 1)
            else f"per {rows} row(s)" + (f" x {self.col_groups} column groups" if self.col_groups > 1 else "")
        )
        kind = "" if self.palette.dtype == np.float32 else f", {self.palette.dtype} palette"
        return f"{self.bits}-bit palette {where} ({2**self.bits} entries){kind}"

    @property
    def stored_bytes(self) -> int:
        """The indices packed at ``bits`` a value, plus the palettes as the producer groups them."""
        return -(-self.indices.size * self.bits // 8) + self.grouped().nbytes

    def dequantized(self, dtype: "np.dtype | type | str" = np.float32) -> np.ndarray:
        """The dense weight: each index replaced by its palette's value (module docstring), in ``dtype``."""
        rows, cols = self.indices.shape
        column_group = np.repeat(np.arange(self.col_groups), cols // self.col_groups)[None, :]
        dense = self.palette[np.arange(rows)[:, None], column_group, self.indices]
        return dense.astype(dtype)

    def is_dequantization(self, floats: np.ndarray) -> bool:
        """Whether ``floats`` is exactly ``dequantized(floats.dtype)``."""
        return floats.shape == self.indices.shape and np.array_equal(self.dequantized(floats.dtype), floats)

    def rows(self, pick) -> "PalettizedWeights":
        """The same weight with ``pick`` (a function of an array's rows, e.g. a gate order) applied to its rows."""
        return replace(self, indices=pick(self.indices), palette=pick(self.palette))

    def grouped(self) -> np.ndarray:
        """The palettes as the producer holds them, ``[row_groups, col_groups, 2**bits]``: one per block of
        consecutive rows, the largest block (dividing the rows) over which every row holds the same palette."""
        rows = self.indices.shape[0]
        for block in (b for b in range(rows, 0, -1) if rows % b == 0):
            table = self.palette.reshape(rows // block, block, *self.palette.shape[1:])
            if (table == table[:, :1]).all():
                return np.ascontiguousarray(table[:, 0])
        raise AssertionError("a block of 1 row always holds its palette")

    def validate(self) -> None:
        """Types, shapes and ranges consistent, else QuantizationError naming the field."""
        indices, palette = self.indices, self.palette
        if not isinstance(indices, np.ndarray) or indices.ndim != 2 or indices.dtype != np.uint8:
            raise QuantizationError(f"indices {getattr(indices, 'dtype', indices)!r} are not a 2-D uint8 array")
        if self.bits not in PALETTE_BITS:
            raise QuantizationError(f"bits {self.bits!r} is not one of {PALETTE_BITS}")
        if not isinstance(palette, np.ndarray) or palette.dtype not in SCALE_TYPES or palette.ndim != 3:
            raise QuantizationError(f"palette {getattr(palette, 'dtype', palette)!r} is not a 3-D float32/16 array")
        rows, cols = indices.shape
        if palette.shape[0] != rows or palette.shape[2] != 2**self.bits or cols % max(palette.shape[1], 1):
            raise QuantizationError(
                f"palette has shape {list(palette.shape)}, expected [{rows}, column groups dividing {cols}, "
                f"{2**self.bits}]"
            )
        if indices.size and int(indices.max()) >= 2**self.bits:
            raise QuantizationError(f"indices reach {int(indices.max())}, beyond {self.bits} bits")
        if not np.isfinite(palette).all():
            raise QuantizationError("palette holds a value that is not finite")


def palettized(indices: np.ndarray, table: np.ndarray, bits: int) -> PalettizedWeights:
    """The record of [rows, cols] ``indices`` into ``table`` ``[row_groups, col_groups, 2**bits]`` (one palette per
    block of rows / columns, as Core ML's iOS18 ``lut`` holds them without its vector axis), each row given its
    group's palettes."""
    rows = indices.shape[0]
    if table.ndim != 3 or rows % table.shape[0]:
        raise QuantizationError(f"lookup table {list(table.shape)} does not group the {rows} rows")
    palette = np.ascontiguousarray(np.repeat(table, rows // table.shape[0], axis=0))
    return PalettizedWeights(np.ascontiguousarray(indices, np.uint8), palette, bits)

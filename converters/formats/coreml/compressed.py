"""Core ML: a recurrent weight stored compressed, as coremltools.optimize writes it (docs/conventions.md §5c), read
into ``schemas.quantized`` records and written from them.

**Read.** A weight that a ``constexpr_*`` op computes is its decompressed value (``mil_constexpr``), and, when the
op is ``constexpr_affine_dequantize`` or ``constexpr_blockwise_shift_scale`` on constant integers with integer zero
points and a float32 scale, the integers with their scale and zero point spread over the weight's shape
(``Spread``): the caller moves rows as the weight's layout asks (gate blocks, directions), then keeps the most compact
exact record (``schemas.quantized.compacted``), so any ``axis`` or block shape maps onto gatepack's rows. A
``constexpr_lut_to_dense`` computing a matrix with one value an entry (iOS16: one palette, the indices packed; iOS18:
a palette per group of rows and columns) is read into a lookup-table record (``schemas.quantized.PalettizedWeights``,
``Compressed.lut``): the indices and palettes exactly, which only a Core ML target holds (a native op's weights;
``unheld`` still says why no integer record holds it, for the other targets and for a loop's weights). Any other
form (a vector table, an fp16 scale, whose product the program rounds to fp16, a fractional zero point) has no
exact record: ``unheld`` says why, and the layer is read as the float values the program computes on, which a target
takes only with ``--dequantize`` (``quantization.compressed_source``).

**Write.** A record becomes one constexpr op: ``constexpr_affine_dequantize`` (iOS16/17: 8 bits, per tensor or per
output row, ``axis`` 0) or ``constexpr_blockwise_shift_scale`` (iOS18: 4 or 8 bits, per tensor, row or block of the
row; ``offset`` only when a zero point is not 0). coremltools stores the integers in the package's weight file. A
lookup-table record becomes ``constexpr_lut_to_dense`` (``emit_lut``): the iOS18 op with the indices as uint1..uint8
and ``lut`` [row groups, column groups, 2^bits, 1], or below iOS18, for one palette a tensor, the iOS16 op with the
indices packed least significant bit first, ``lut`` [2^bits] and ``shape``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gatepack.converters.formats.coreml.common import (
    AFFINE,
    BLOCKWISE,
    GROUPED_LUT_TARGET,
    LUT,
    TARGETS,
    _mil_types,
    _target_rank,
    _value,
    constexpr_op,
)
from gatepack.converters.formats.coreml.mil_constexpr import _along, _unpacked, decompressed, spread_blocks
from gatepack.schemas.quantized import PalettizedWeights, QuantizedWeights, compacted, palettized


@dataclass(frozen=True)
class Spread:
    """A compressed weight's integers with their scale (float32) and zero point (the integers' type) spread over
    them, and the integers' bit width (4 for int4 stored in int8)."""

    values: np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    bits: int

    def rows(self, pick) -> "Spread":
        """The same weight with ``pick`` (a function of a [rows, cols] array) applied to each array."""
        return Spread(pick(self.values), pick(self.scale), pick(self.zero), self.bits)

    def record(self) -> QuantizedWeights:
        """The most compact exact record of these integers (per tensor, per row, per block of the row)."""
        values, scale, zero = (np.ascontiguousarray(a) for a in (self.values, self.scale, self.zero))
        return compacted(values, scale, zero, self.bits)


@dataclass(frozen=True)
class Compressed:
    """A weight a constexpr op computes: its value as the program computes it, and its integers (``spread``) or why
    no exact record holds it (``unheld``); ``form`` names the op and the integers' type for the findings."""

    floats: np.ndarray
    spread: Spread | None
    form: str
    unheld: str | None
    lut: PalettizedWeights | None = None  # a lookup table's exact record (``unheld`` says why no integers hold it)


def read(var) -> Compressed | None:
    """The compressed weight ``var`` is, None when no constexpr op computes it."""
    op = getattr(var, "op", None)
    if op is None or not op.op_type.startswith("constexpr_"):
        return None
    floats, form = np.asarray(decompressed(op)), _form(op)
    unheld = _unheld(op)
    if unheld is not None:
        return Compressed(floats, None, form, unheld, _palette(op) if op.op_type == LUT else None)
    data = np.asarray(op.inputs["quantized_data" if op.op_type == AFFINE else "data"].val)
    scale, zero = _spread_parameters(op, data)
    bits = int(re.sub(r"\D", "", form.split("(")[-1]))
    return Compressed(floats, Spread(data, scale, zero.astype(data.dtype), bits), form, None)


def _unheld(op) -> str | None:
    """Why constexpr ``op``'s weight has no exact integer record (None: it has one)."""
    if op.op_type not in (AFFINE, BLOCKWISE):
        what = "a lookup table (palettized weights)" if op.op_type == LUT else "a form of no integers and scale"
        return f"{what}, which no quantized record holds"
    if any(v.val is None for v in op.inputs.values()):
        return "decompressed from another constexpr op's output (joint compression), which no quantized record holds"
    scale = np.asarray(op.inputs["scale"].val)
    if scale.dtype != np.float32:
        rounds = f"the program rounds the weight to {scale.dtype}"
        return f"a {scale.dtype} scale ({rounds}), which a float32 record does not reproduce"
    zero = op.inputs.get("zero_point") or op.inputs.get("offset")
    if zero is not None and not np.array_equal(np.asarray(zero.val), np.round(np.asarray(zero.val))):
        return "a fractional zero point, which no integer record holds"
    return None


def _palette(op) -> PalettizedWeights | None:
    """The lookup-table record of a ``constexpr_lut_to_dense`` computing a matrix with one value an entry from
    constant inputs; None for another form (a vector table, another rank, a table another constexpr op computes)."""
    if any(v.val is None for v in op.inputs.values()):
        return None
    lut = np.asarray(op.inputs["lut"].val)
    if lut.dtype not in (np.float32, np.float16):
        return None
    if "shape" in op.inputs:  # iOS16: one palette, the indices packed
        shape = [int(v) for v in np.asarray(op.inputs["shape"].val).reshape(-1)]
        bits = int(np.log2(lut.size))
        if len(shape) != 2:
            return None
        indices = _unpacked(op.inputs["indices"].val, bits, shape[0] * shape[1]).reshape(shape)
        return palettized(indices.astype(np.uint8), lut.reshape(1, 1, -1), bits)
    indices = np.asarray(op.inputs["indices"].val)
    if indices.ndim != 2 or lut.ndim != 4 or lut.shape[-1] != 1:
        return None
    return palettized(indices.astype(np.uint8), lut[..., 0], int(np.log2(lut.shape[-2])))


def _spread_parameters(op, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scale and zero point (0 where the op has none) of ``op`` spread over its integers ``data``."""
    scale = np.asarray(op.inputs["scale"].val)
    given = op.inputs.get("zero_point") or op.inputs.get("offset")
    if op.op_type == AFFINE:
        axis = int(op.inputs["axis"].val)
        zero = np.asarray(given.val)
        return (np.broadcast_to(_along(scale, data.ndim, axis), data.shape),
                np.broadcast_to(_along(zero, data.ndim, axis), data.shape))  # fmt: skip
    zeros = np.zeros(data.shape, data.dtype) if given is None else spread_blocks(np.asarray(given.val), data.shape)
    return spread_blocks(scale, data.shape), zeros


def _form(op) -> str:
    """E.g. 'constexpr_affine_dequantize (int8)' or 'constexpr_lut_to_dense (4-bit palette)'."""
    types = _mil_types()
    if op.op_type == LUT:
        lut = op.inputs["lut"]
        entries = int(np.prod(lut.shape)) if "shape" in op.inputs else lut.shape[-2]
        return f"{LUT} ({int(np.log2(entries))}-bit palette)"
    data = op.inputs.get("quantized_data", op.inputs.get("data"))
    return op.op_type if data is None else f"{op.op_type} ({types.builtin_to_string(data.dtype)})"


# ------------------------------------------------------------------------------------------------ writing


def emit(mb, record: QuantizedWeights, name: str, target: str):
    """``record`` ([rows, cols], rows in the op's order) as the constexpr op of ``target``, named ``name``; a float16
    scale (float32 arithmetic: NNCF's weights as OpenVINO computes them) widened to float32, exactly."""
    record = record.with_values(record.values, record.scale.astype(np.float32), record.zero_point)
    per_row = record.axis is not None
    if constexpr_op(target) == AFFINE:
        scale = record.scale if per_row else np.float32(record.scale)
        zero = record.zero_point if per_row else record.zero_point.reshape(()).astype(record.values.dtype)
        return mb.constexpr_affine_dequantize(
            quantized_data=record.values, zero_point=zero, scale=scale, axis=0, name=name
        )  # fmt: skip
    shape = record.scale.shape if record.axis == 1 else ((len(record.values), 1) if per_row else (1, 1))
    data = record.values
    if record.bits == 4:
        types = _mil_types()
        data = data.astype(types.np_int4_dtype if record.signed else types.np_uint4_dtype)
    offset = {} if not record.zero_point.any() else {"offset": record.zero_point.reshape(shape).astype(data.dtype)}
    return mb.constexpr_blockwise_shift_scale(data=data, scale=record.scale.reshape(shape), name=name, **offset)


INDEX_TYPES = {1: "uint1", 2: "uint2", 3: "uint3", 4: "uint4", 6: "uint6", 8: "uint8"}  # iOS18's IndicesT


def emit_lut(mb, record: PalettizedWeights, name: str, target: str):
    """``record`` ([rows, cols], rows in the op's order) as ``constexpr_lut_to_dense`` at ``target`` (module
    docstring), named ``name``: its indices and palettes as they are."""
    table = record.grouped()
    if _target_rank(target) >= TARGETS.index(GROUPED_LUT_TARGET):
        kind = INDEX_TYPES[record.bits]
        dtype = np.uint8 if kind == "uint8" else getattr(_mil_types(), f"np_{kind}_dtype")
        return mb.constexpr_lut_to_dense(indices=record.indices.astype(dtype), lut=table[..., None], name=name)
    stream = ((record.indices.reshape(-1, 1).astype(np.uint16) >> np.arange(record.bits)) & 1).astype(np.uint8)
    packed = np.packbits(stream.reshape(-1), bitorder="little")
    shape = np.array(record.indices.shape, np.uint32)
    return mb.constexpr_lut_to_dense(indices=packed, lut=table.reshape(-1), shape=shape, name=name)


def palette(found: Compressed | None, pick=lambda array: array) -> PalettizedWeights | None:
    """The lookup-table record of a compressed weight, ``pick`` (its rows in gatepack's order) applied to its rows;
    None for a constant or another form."""
    return None if found is None or found.lut is None else found.lut.rows(pick)


def weight(var) -> tuple[np.ndarray | None, Compressed | None]:
    """A weight's value: a constant's, or the decompressed value of the constexpr op computing it (also returned)."""
    found = read(var)
    return (found.floats, found) if found is not None else (_value(var), None)


def record(found: Compressed | None, pick=lambda array: array) -> QuantizedWeights | None:
    """The exact record of a compressed weight, ``pick`` (a function of a [rows, cols] array: its rows in gatepack's
    order) applied to its integers, scale and zero point; None for a constant or a form without one."""
    return None if found is None or found.spread is None else found.spread.rows(pick).record()


def unheld_forms(found: Sequence[Compressed | None], labels: Sequence[str], tables: bool = False) -> list[str]:
    """'W: constexpr_lut_to_dense (4-bit palette) is ...' for each compressed weight without an exact record (with
    ``tables``, a lookup table's record counts as one: the caller keeps it)."""
    return [
        f"{label} stored as {c.form}: {c.unheld}"
        for c, label in zip(found, labels)
        if c is not None and c.unheld is not None and not (tables and c.lut is not None)
    ]


def joined(found: Sequence[Compressed | None]) -> Compressed | None:
    """Weights stacked along their rows (a loop's gate blocks) as one compressed weight; None unless each has an
    exact record of the same integer type and width."""
    spreads = [c.spread for c in found if c is not None and c.spread is not None]
    if not found or len(spreads) != len(found) or len({(s.values.dtype, s.bits) for s in spreads}) != 1:
        return None
    values, scale, zero = (np.concatenate([getattr(s, key) for s in spreads]) for key in ("values", "scale", "zero"))
    floats = np.concatenate([c.floats for c in found if c is not None])
    return Compressed(floats, Spread(values, scale, zero, spreads[0].bits), found[0].form if found[0] else "", None)

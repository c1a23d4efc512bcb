"""OpenVINO: a sequence op's W or R as compressed weights, the form NNCF's ``compress_weights`` writes
(docs/conventions.md §3b)::

    Constant (i8 / u8 / i4 / u4) -> Convert (f32 | f16) [-> Subtract Convert(Constant zero point)]
        -> Multiply (scale) [-> Reshape (per group)] [-> Convert (f32)]

that is ``W = (q - zero_point) * scale``. Per group (NNCF's ``group_size``), the integers are
``[D, G*H, K / B, B]`` and the scale and zero point ``[D, G*H, K / B, 1]``, the product reshaped to ``[D, G*H, K]``.
4-bit constants hold two values a byte, the first in the low nibble.

The arithmetic is OpenVINO's, measured (CPU plugin at f32 inference precision, and OpenVINO's own constant
folding): a chain NNCF declares in float16 (an f16 scale, Convert to f16, the final Convert to f32) is computed in
float32 without rounding to float16 in between, so NNCF's weights are ``f32((q - z) * f32(s16))``: a record with a
float16 scale and float32 arithmetic (``schemas.quantized``), bit for bit. A float32 product followed by an
explicit ``Convert`` to f16 and back is rounded there: float16 arithmetic.

Written by gatepack in the record's own form: a float32 scale as a float32 chain; a float16 scale with float32
arithmetic as NNCF writes it (f16 chain, final Convert); float16 arithmetic as the float32 chain then Convert f16
-> Convert f32. Read back from any producer: the parameters broadcast over the integers, then per direction the most
compact exact record (``schemas.quantized.compacted``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gatepack.schemas.layer import stack_directions
from gatepack.schemas.quantized import QuantizedWeights, dequantize

INTEGER_TYPES = {"i8": np.int8, "u8": np.uint8, "i4": np.int8, "u4": np.uint8}  # element type -> held in
FOUR_BIT = {(np.dtype(np.int8), 4): "i4", (np.dtype(np.uint8), 4): "u4"}
FLOAT_TYPES = {"f32": np.float32, "f16": np.float16}


@dataclass(frozen=True)
class Spread:
    """A compressed weight's integers with their scale and zero point broadcast over them, [D, G*H, K]."""

    values: np.ndarray
    scale: np.ndarray  # as stored: float32 or float16
    zero: np.ndarray  # the integers' type
    bits: int
    arithmetic: str  # schemas.quantized.ARITHMETICS


@dataclass(frozen=True)
class Decompressed:
    """A compressed weight read from the graph: its float values as OpenVINO computes them and its spread record."""

    floats: np.ndarray  # float32, [D, G*H, K]
    spread: Spread | None


def emit(ops, records: list[QuantizedWeights], name: str):
    """The compressed weight [D, G*H, K] of ``records`` (one per direction, rows in the op's gate order), its last
    node named ``name`` (module docstring: the record's scale type and arithmetic decide the chain)."""
    first = records[0]
    values, scale, zero = _grouped(records)
    nncf = first.scale.dtype == np.float16 and first.arithmetic == "float32"
    steps_type = "f16" if nncf else "f32"
    element = FOUR_BIT.get((values.dtype, first.bits))
    steps = ops.convert(_named(_integers(ops, values, element), f"{name}/quantized"), steps_type)
    if zero.any():
        zero_node = _named(_integers(ops, zero, element), f"{name}/zero_point")
        steps = ops.subtract(steps, ops.convert(zero_node, steps_type))
    scale_node = _named(ops.constant(scale), f"{name}/scale")
    if scale.dtype == np.float16 and not nncf:
        scale_node = ops.convert(scale_node, "f32")
    node = ops.multiply(steps, scale_node)
    if first.axis == 1:
        node = ops.reshape(node, ops.constant(np.array([len(records), *first.values.shape], np.int64)), False)
    if nncf:
        node = ops.convert(node, "f32")
    elif first.arithmetic == "float16":
        node = ops.convert(ops.convert(node, "f16"), "f32")
    return _named(node, name)


def _grouped(records: list[QuantizedWeights]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The integers [D, G*H, K] with scale and zero point [D, G*H, 1]; per block the integers [D, G*H, K / B, B]
    with the parameters [D, G*H, K / B, 1] (NNCF's grouped form). The directions' integers are not copied when they
    are the consecutive rows of one array (``stack_directions``: as ``weight_quantization`` quantizes them)."""
    rows, cols = records[0].values.shape
    block = records[0].block_size if records[0].axis == 1 else None
    if block is not None:
        values = stack_directions([r.values for r in records]).reshape(len(records), rows, cols // block, block)
        scale, zero = (np.stack([getattr(r, f)[:, :, None] for r in records]) for f in ("scale", "zero_point"))
        return values, scale, zero
    spread = [
        [np.broadcast_to(getattr(r, f).reshape(-1, 1), (rows, 1)) for r in records] for f in ("scale", "zero_point")
    ]
    return stack_directions([r.values for r in records]), np.stack(spread[0]), np.stack(spread[1])


def _integers(ops, values: np.ndarray, element: str | None):
    """A Constant of ``values``, 4-bit (packed by OpenVINO, low nibble first) when ``element`` says so; an 8-bit one
    shares the array's memory (never changed after this) where OpenVINO can, instead of copying it."""
    if element is None:
        return ops.constant(values, shared_memory=bool(values.flags.writeable and values.flags.c_contiguous))
    import openvino as ov

    return ops.constant(values, dtype=getattr(ov.Type, element))


def _named(node, name: str):
    node.set_friendly_name(name)
    return node


def holdable(records: list[QuantizedWeights]) -> bool:
    """Whether ``emit`` writes these records exactly: 4- or 8-bit, per tensor, per channel or per block (one block
    size for every direction), static weights."""
    kinds = {(r.axis, r.block_size, r.scale.dtype, r.arithmetic, r.bits, r.values.dtype) for r in records}
    return (
        bool(records)
        and len(kinds) == 1
        and all(
            r.values.dtype.itemsize == 1 and r.bits in (4, 8) and not r.dynamic_activations and r.values.size
            for r in records
        )
    )


def read(node) -> Decompressed | None:
    """The compressed weight ``node`` computes (module docstring), None when it is no such subgraph."""
    arithmetic = "float32"
    if _is_convert(node, "f32"):
        node = node.input_value(0).get_node()
        if _is_convert(node, "f16") and node.get_input_element_type(0).get_type_name() == "f32":
            arithmetic, node = "float16", node.input_value(0).get_node()  # rounded to f16 explicitly
    elif node.get_output_element_type(0).get_type_name() != "f32":
        return None  # a float16 product feeding the op: no form held here
    shape = None
    if node.get_type_name() == "Reshape":
        shape, node = tuple(node.get_output_shape(0)), node.input_value(0).get_node()
    return _read_multiply(node, arithmetic, shape) if node.get_type_name() == "Multiply" else None


def _is_convert(node, element: str) -> bool:
    return node.get_type_name() == "Convert" and node.get_output_element_type(0).get_type_name() == element


def _read_multiply(node, arithmetic: str, shape: tuple[int, ...] | None) -> Decompressed | None:
    """``Multiply(steps, scale)``, either operand order, steps ``Convert(integers) [- Convert(zero point)]``,
    reshaped to ``shape`` when grouped."""
    for steps_at in (0, 1):
        parts = _steps(node.input_value(steps_at).get_node())
        scale = _constant_value(node.input_value(1 - steps_at).get_node())
        if parts is None or scale is None:
            continue
        values, zero, bits = parts
        try:
            full = [np.broadcast_to(a, values.shape) for a in (scale, zero)]
        except ValueError:
            return None
        if shape is not None:
            if int(np.prod(shape)) != values.size or len(shape) != values.ndim - 1:
                return None
            values, *full = (np.reshape(a, shape) for a in (values, *full))
        floats = dequantize(values, full[1], full[0], arithmetic)
        return Decompressed(floats, Spread(values, full[0], full[1], bits, arithmetic))
    return None


def _steps(node) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``Convert(integers)`` or ``Convert(integers) - Convert(zero point)``: integers, zero point (same type) and
    their width in bits; None for another form."""
    zero = None
    if node.get_type_name() == "Subtract":
        zero = _converted_integers(node.input_value(1).get_node())
        node = node.input_value(0).get_node()
        if zero is None:
            return None
    values = _converted_integers(node)
    if values is None or (zero is not None and (zero[0].dtype != values[0].dtype or zero[1:] != values[1:])):
        return None
    zero_value = zero[0] if zero is not None else np.zeros((), values[0].dtype)
    return values[0], zero_value, values[1]


def _converted_integers(node) -> tuple[np.ndarray, int, str] | None:
    """``Convert(Constant of 4- or 8-bit integers)`` to f32 or f16: the integers unpacked, their bits and the
    Convert's element type."""
    if node.get_type_name() != "Convert" or node.get_output_element_type(0).get_type_name() not in FLOAT_TYPES:
        return None
    source = node.input_value(0).get_node()
    element = source.get_output_element_type(0).get_type_name() if source.get_type_name() == "Constant" else None
    if element not in INTEGER_TYPES:
        return None
    data = np.array(source.get_data())
    if element in ("i4", "u4"):
        data = unpack_nibbles(data, tuple(source.get_output_shape(0)), signed=element == "i4")
    return (
        data.astype(INTEGER_TYPES[element]),
        4 if element in ("i4", "u4") else 8,
        node.get_output_element_type(0).get_type_name(),
    )


def unpack_nibbles(packed: np.ndarray, shape: tuple[int, ...], signed: bool) -> np.ndarray:
    """4-bit values stored two a byte, the first in the low nibble, as ``shape`` (sign-extended when ``signed``)."""
    data = packed.reshape(-1).view(np.uint8)
    nibbles = np.stack([data & 0xF, data >> 4], axis=1).reshape(-1)[: int(np.prod(shape))].astype(np.int8)
    return ((nibbles ^ 8) - 8 if signed else nibbles).reshape(shape)


def _constant_value(node) -> np.ndarray | None:
    """A float Constant's values as stored (float32 or float16), also when a Convert to f32 widens it."""
    if node.get_type_name() == "Convert" and _is_convert(node, "f32"):
        node = node.input_value(0).get_node()
    if node.get_type_name() != "Constant":
        return None
    data = np.array(node.get_data())
    return data if data.dtype in (np.float32, np.float16) else None

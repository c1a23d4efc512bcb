"""OpenVINO: a sequence op's W or R as compressed weights, the form NNCF's ``compress_weights`` writes
(docs/conventions.md §3b)::

    Constant (i8 / u8) -> Convert (f32 | f16) [-> Subtract Convert(Constant zero point)] -> Multiply (scale)
                       [-> Convert (f32)]

that is ``W = (q - zero_point) * scale``, computed in the Convert's type. The IR's ``.bin`` holds the integers.

Written by gatepack in float32 (the record's arithmetic: ``(q - zero_point)`` exact, one rounding in the
product, as ``schemas.quantized``): the integers [D, G*H, K], scale and zero point [D, G*H, 1] (one per output
row; a per-tensor record spread over its rows), the Subtract left out for a symmetric record. Read back from
any producer: the parameters broadcast over the integers, then per direction the most compact exact record
(``schemas.quantized.compacted``). NNCF computes in float16 (an f16 scale, a final Convert to f32): those
weights are read as their float values (computed in float16 as OpenVINO does), without a record, since a
float32 record would not reproduce the float16 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gatepack.schemas.quantized import QuantizedWeights

INTEGER_TYPES = (np.int8, np.uint8)
ARITHMETIC = {"f32": np.float32, "f16": np.float16}


@dataclass(frozen=True)
class Decompressed:
    """A compressed weight read from the graph: its float values as OpenVINO computes them, and, when that
    arithmetic is float32, the integers with their scale and zero point spread over them (else None)."""

    floats: np.ndarray  # float32, [D, G*H, K]
    spread: tuple[np.ndarray, np.ndarray, np.ndarray] | None  # (integers, scale float32, zero point) [D, G*H, K]


def emit(ops, records: list[QuantizedWeights], name: str):
    """The compressed weight [D, G*H, K] of ``records`` (one per direction, rows in the op's gate order), its last
    node named ``name``: Constant (integers) -> Convert(f32) [-> Subtract zero point] -> Multiply scale."""
    values = np.stack([r.values for r in records])
    scale = np.stack([np.broadcast_to(r.broadcast(r.scale), (r.values.shape[0], 1)) for r in records])
    zero = np.stack([np.broadcast_to(r.broadcast(r.zero_point), (r.values.shape[0], 1)) for r in records])
    steps = ops.convert(_named(ops.constant(values), f"{name}/quantized"), "f32")
    if zero.any():
        steps = ops.subtract(steps, ops.convert(_named(ops.constant(zero), f"{name}/zero_point"), "f32"))
    node = ops.multiply(steps, _named(ops.constant(scale.astype(np.float32)), f"{name}/scale"))
    return _named(node, name)


def _named(node, name: str):
    node.set_friendly_name(name)
    return node


def holdable(records: list[QuantizedWeights]) -> bool:
    """Whether ``emit`` writes these records exactly (8-bit, per tensor or per channel, static weights)."""
    return bool(records) and all(
        r.values.dtype in INTEGER_TYPES and r.axis in (None, 0) and not r.dynamic_activations for r in records
    )


def read(node) -> Decompressed | None:
    """The compressed weight ``node`` computes (module docstring), None when it is no such subgraph."""
    if node.get_type_name() == "Convert" and node.get_output_element_type(0).get_type_name() == "f32":
        inner = node.input_value(0).get_node()
        return _read_multiply(inner) if inner.get_type_name() == "Multiply" else None
    return _read_multiply(node) if node.get_type_name() == "Multiply" else None


def _read_multiply(node) -> Decompressed | None:
    """``Multiply(steps, scale)``, either operand order, steps ``Convert(integers) [- Convert(zero point)]``."""
    for steps_at in (0, 1):
        steps = node.input_value(steps_at).get_node()
        scale = _constant_value(node.input_value(1 - steps_at).get_node())
        parts = _steps(steps)
        if parts is None or scale is None:
            continue
        values, zero, arithmetic = parts
        if arithmetic is None or scale.dtype not in (np.float32, np.float16):
            return None
        try:
            full_scale, full_zero = (np.broadcast_to(a, values.shape) for a in (scale, zero))
        except ValueError:
            return None
        diff: np.ndarray = values.astype(arithmetic) - full_zero.astype(arithmetic)
        floats = (diff * full_scale.astype(arithmetic)).astype(np.float32)
        exact = arithmetic is np.float32 and scale.dtype == np.float32
        return Decompressed(floats, (values, full_scale.astype(np.float32), full_zero) if exact else None)
    return None


def _steps(node) -> tuple[np.ndarray, np.ndarray, type | None] | None:
    """``Convert(integers)`` or ``Convert(integers) - Convert(zero point)``: integers, zero point (same type) and
    the arithmetic's numpy type (None for one not held here)."""
    zero = None
    if node.get_type_name() == "Subtract":
        zero = _converted_integers(node.input_value(1).get_node())
        node = node.input_value(0).get_node()
        if zero is None:
            return None
    values = _converted_integers(node)
    if values is None or (zero is not None and (zero[0].dtype != values[0].dtype or zero[1] != values[1])):
        return None
    zero_value = zero[0] if zero is not None else np.zeros((), values[0].dtype)
    return values[0], zero_value, ARITHMETIC.get(values[1])


def _converted_integers(node) -> tuple[np.ndarray, str] | None:
    """``Convert(Constant of 8-bit integers)``: the integers and the Convert's element type ('f32', 'f16')."""
    if node.get_type_name() != "Convert":
        return None
    source = node.input_value(0).get_node()
    if source.get_type_name() != "Constant":
        return None
    data = np.array(source.get_data())
    if data.dtype not in INTEGER_TYPES:
        return None
    return data, node.get_output_element_type(0).get_type_name()


def _constant_value(node) -> np.ndarray | None:
    """A Constant's float values, or those of ``Convert(Constant)`` widened as the Convert says."""
    if node.get_type_name() == "Convert" and node.input_value(0).get_node().get_type_name() == "Constant":
        inner = np.array(node.input_value(0).get_node().get_data())
        target = ARITHMETIC.get(node.get_output_element_type(0).get_type_name())
        return None if target is None or inner.dtype.kind != "f" else inner.astype(target)
    if node.get_type_name() == "Constant":
        data = np.array(node.get_data())
        return data if data.dtype.kind == "f" else None
    return None

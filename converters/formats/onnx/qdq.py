"""ONNX: quantized recurrent weights as QDQ, ``DequantizeLinear`` feeding a GRU/RNN/LSTM's W or R, read into
and written from ``schemas.quantized`` records (docs/conventions.md §9b).

``DequantizeLinear(x, x_scale, x_zero_point; axis, block_size)`` computes ``y = (x - zero_point) * scale``
(scale and zero point broadcast: a scalar per tensor, a 1-D array along ``axis``, or, from opset 21, an array
of x's rank with ``block_size`` consecutive elements of ``axis`` sharing one). On a W [D, G*H, I] or
R [D, G*H, H] an ``axis`` of 1 is per output row (per channel), 0 per direction, 2 per input column; the
reader spreads the parameters over x, then keeps per direction the most compact granularity that holds
them exactly (per tensor, per channel, per block along the row). The float view is what the node computes
on: onnxruntime runs ``DequantizeLinear`` in float32 before the recurrent node, one rounding, so the float
layer is the source's arithmetic exactly.

Written back: per direction an integer initializer [1, G*H, K] with its scale and zero point (a scalar, or
[G*H] on axis 1), one ``DequantizeLinear`` each, concatenated along the directions for a bidirectional
layer; at opset 13 or later (per-axis ``DequantizeLinear``), per tensor and per channel. A per-block record
is not written as QDQ (it would need opset 21).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper

from gatepack.converters.formats.onnx.constants import ModelConstants
from gatepack.converters.formats.onnx.graph import ONNX_DOMAINS, Scope
from gatepack.schemas.quantized import QuantizationError, QuantizedWeights, compacted

OP_TYPE = "DequantizeLinear"
MINIMUM_OPSET = 13  # per-axis DequantizeLinear
INTEGER_TYPES = (np.int8, np.uint8, np.int16, np.uint16)


def dequantize_linear_weight(
    constants: ModelConstants, name: str, scope: Scope, layer: str, role: str
) -> tuple[np.ndarray, list[QuantizedWeights] | None] | None:
    """The value of tensor ``name`` when ``DequantizeLinear`` computes it from constant integers (one node, or a
    ``Concat`` of them along the directions), and for a W or R [D, G*H, K] its record per direction; None
    when no ``DequantizeLinear`` computes it, or in a form not held here (then it is folded as a constant)."""
    parts = _dequantize_nodes(name, scope)
    if parts is None:
        return None
    floats, records = [], []
    for node, owner in parts:
        decoded = _decoded(constants, node, owner, layer, role)
        if decoded is None:
            return None
        floats.append(decoded[0])
        records.append(decoded[1])
    value = np.concatenate(floats) if len(floats) > 1 else floats[0]
    held = None if any(r is None for r in records) else [q for r in records for q in r]  # type: ignore[union-attr]
    return value, held


def _dequantize_nodes(name: str, scope: Scope) -> list[tuple[onnx.NodeProto, Scope]] | None:
    """The ``DequantizeLinear`` nodes computing ``name``: itself, or each input of a ``Concat`` on axis 0."""
    found = scope.lookup(name)
    if found is None or not isinstance(found[1], onnx.NodeProto) or found[1].domain not in ONNX_DOMAINS:
        return None
    node, owner = found[1], found[2]
    if node.op_type == OP_TYPE:
        return [(node, owner)]
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), None)
    if node.op_type != "Concat" or axis != 0:
        return None
    parts = [_dequantize_nodes(part, owner) for part in node.input]
    return None if any(p is None or len(p) != 1 for p in parts) else [p[0] for p in parts]  # type: ignore[index]


def _decoded(
    constants: ModelConstants, node: onnx.NodeProto, owner: Scope, layer: str, role: str
) -> tuple[np.ndarray, list[QuantizedWeights] | None] | None:
    """One ``DequantizeLinear``'s float output, and its records per direction for a 3-D weight."""
    if len(node.input) < 2:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    values = constants.constant(node.input[0], owner, layer, f"{role} (the integers of its {OP_TYPE})")
    scale = constants.constant(node.input[1], owner, layer, f"{role} scale")
    zero = (
        constants.constant(node.input[2], owner, layer, f"{role} zero point")
        if len(node.input) > 2 and node.input[2]
        else np.zeros(scale.shape, values.dtype)
    )
    if values.dtype not in INTEGER_TYPES or scale.dtype != np.float32 or zero.dtype != values.dtype:
        return None  # another form (int32, 4-bit, float16 scales): folded as a float constant
    full_scale, full_zero = _spread(values.shape, scale, zero, int(attrs.get("axis", 1)), attrs.get("block_size"))
    if full_scale is None or full_zero is None:
        return None
    floats = (values.astype(np.float32) - full_zero.astype(np.float32)) * full_scale
    if values.ndim != 3:
        return floats, None
    try:
        return floats, [compacted(values[d], full_scale[d], full_zero[d]) for d in range(values.shape[0])]
    except QuantizationError:
        return floats, None


def _spread(
    shape: tuple[int, ...], scale: np.ndarray, zero: np.ndarray, axis: int, block: int | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Scale and zero point broadcast to the integers' ``shape`` as ``DequantizeLinear`` applies them."""
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis < len(shape):
        return None, None
    if scale.size == 1 and zero.size == 1 and not block:
        return np.broadcast_to(scale.reshape(()), shape), np.broadcast_to(zero.reshape(()), shape)
    if scale.ndim == 1 and not block and scale.shape == (shape[axis],) and zero.shape == scale.shape:
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return np.broadcast_to(scale.reshape(view), shape), np.broadcast_to(zero.reshape(view), shape)
    if (
        block
        and scale.ndim == len(shape)
        and zero.shape == scale.shape
        and -(-shape[axis] // block) == scale.shape[axis]
    ):
        spread = [np.repeat(a, block, axis=axis) for a in (scale, zero)]
        index = tuple(slice(0, n) for n in shape)
        return spread[0][index], spread[1][index]
    return None, None


def writable(records: list[QuantizedWeights], opset: int) -> bool:
    """Whether QDQ at ``opset`` holds these records exactly (per tensor or per channel, 8 or 16 bits)."""
    return opset >= MINIMUM_OPSET and all(r.axis in (None, 0) and not r.dynamic_activations for r in records)


def dequantize_nodes(
    name: str, records: list[QuantizedWeights], fresh: Callable[[str], str], constant: Callable[[str, np.ndarray], str]
) -> list[onnx.NodeProto]:
    """The nodes computing the float weight ``name`` [D, G*H, K] from ``records`` (one per direction): per
    direction the integers [1, G*H, K], their scale and zero point as initializers (``constant(name, value)``
    adds one and returns its name) and a ``DequantizeLinear`` (axis 1 per channel), then a ``Concat`` of the
    directions."""
    nodes, parts = [], []
    for d, record in enumerate(records):
        suffix = f"_d{d}" if len(records) > 1 else ""
        inputs = [
            constant(f"{name}_quantized{suffix}", record.values[None]),
            constant(f"{name}_scale{suffix}", record.scale),
            constant(f"{name}_zero_point{suffix}", record.zero_point),
        ]
        out = name if len(records) == 1 else fresh(f"{name}_dequantized{suffix}")
        node = helper.make_node(OP_TYPE, inputs, [out], name=fresh(f"{name}/{OP_TYPE}{suffix}"))
        if record.axis is not None:
            node.attribute.append(helper.make_attribute("axis", 1))
        nodes.append(node)
        parts.append(out)
    if len(parts) > 1:
        nodes.append(helper.make_node("Concat", parts, [name], name=fresh(f"{name}/Concat"), axis=0))
    return nodes

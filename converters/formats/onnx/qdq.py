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

Integers: 8- or 16-bit, and from opset 21 ``INT4``/``UINT4`` (two a byte, the first in the low nibble; read into
int8/uint8 records of ``bits`` 4). Also read: onnxruntime's ``com.microsoft::DequantizeLinear`` (its quantizer writes
it for 4- and 16-bit weights below opset 21; the same formula). A float16 scale makes the node's output float16,
rounded so (``arithmetic`` float16), then a ``Cast`` to float feeds the recurrent node; a float16 scale widened by a
``Cast`` to float before the node is float32 arithmetic.

Written back: per direction an integer initializer [1, G*H, K] with its scale and zero point (a scalar, [G*H] on
axis 1, or [1, G*H, K / block_size] on axis 2 with ``block_size``), one ``DequantizeLinear`` each, concatenated
along the directions for a bidirectional layer, at the lowest opset holding the records (``needed_opset``): 13
(per-axis), 19 (a float16 scale as the node's own: float16 arithmetic), 21 (4-bit integers, blocks). A float16
scale computed in float32 (NNCF's weights as OpenVINO computes them) is stored float16 and widened by a ``Cast``.
In a model whose opset lacks what a per-tensor or per-channel record needs (per-axis before 13, 4 bits before 21),
it is written with onnxruntime's contrib ``DequantizeLinear`` (from opset 10), as onnxruntime's quantizer does
(``uses_contrib``): the model then runs on onnxruntime only.
"""

from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

from gatepack.converters.formats.onnx.constants import ModelConstants
from gatepack.converters.formats.onnx.graph import ONNX_DOMAINS, Scope
from gatepack.schemas.quantized import QuantizationError, QuantizedWeights, compacted, dequantize

OP_TYPE = "DequantizeLinear"
MINIMUM_OPSET = 13  # per-axis DequantizeLinear
FLOAT16_SCALE_OPSET = 19  # a float16 scale (and output)
FOUR_BIT_OPSET = 21  # INT4/UINT4 integers, block_size
CONTRIB_FROM_OPSET = 10  # the first opset with DequantizeLinear: below what a record needs, onnxruntime's contrib one
DOMAINS = (*ONNX_DOMAINS, "com.microsoft")  # onnxruntime's contrib DequantizeLinear computes the same
INTEGER_TYPES = (np.int8, np.uint8, np.int16, np.uint16)
FOUR_BIT = {np.dtype(ml_dtypes.int4): np.int8, np.dtype(ml_dtypes.uint4): np.uint8}  # stored -> held in
PACKED = {np.dtype(np.int8): ml_dtypes.int4, np.dtype(np.uint8): ml_dtypes.uint4}  # held in -> stored
SCALE_TYPES = (np.float32, np.float16)


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
    """The ``DequantizeLinear`` nodes computing ``name``: itself, or each input of a ``Concat`` on axis 0, either
    possibly through a ``Cast`` to float (of a float16 output)."""
    found = _producer(name, scope, DOMAINS)
    if found is None:
        return None
    node, owner = found
    if node.op_type == "Cast" and _attribute(node, "to") == TensorProto.FLOAT:
        return _dequantize_nodes(node.input[0], owner)
    if node.op_type == OP_TYPE:
        return [(node, owner)]
    if node.op_type != "Concat" or _attribute(node, "axis") != 0 or node.domain not in ONNX_DOMAINS:
        return None
    parts = [_dequantize_nodes(part, owner) for part in node.input]
    return None if any(p is None or len(p) != 1 for p in parts) else [p[0] for p in parts]  # type: ignore[index]


def _producer(name: str, scope: Scope, domains: tuple[str, ...] = ONNX_DOMAINS) -> tuple[onnx.NodeProto, Scope] | None:
    """The node computing ``name`` (of one of ``domains``) and the scope it sits in; None for any other tensor."""
    found = scope.lookup(name)
    if found is None or not isinstance(found[1], onnx.NodeProto) or found[1].domain not in domains:
        return None
    return found[1], found[2]


def _attribute(node: onnx.NodeProto, name: str) -> object:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def _scale(constants: ModelConstants, name: str, owner: Scope, layer: str, role: str) -> tuple[np.ndarray, str]:
    """A ``DequantizeLinear``'s scale as stored and the arithmetic it makes: a float16 scale is float16 arithmetic,
    unless a ``Cast`` to float widens it first (float32 arithmetic on float16 values, stored float16)."""
    cast = _producer(name, owner)
    if cast is not None and cast[0].op_type == "Cast" and _attribute(cast[0], "to") == TensorProto.FLOAT:
        stored = constants.constant(cast[0].input[0], cast[1], layer, f"{role} scale")
        if stored.dtype == np.float16:
            return stored, "float32"
    scale = constants.constant(name, owner, layer, f"{role} scale")
    return scale, "float16" if scale.dtype == np.float16 else "float32"


def _decoded(
    constants: ModelConstants, node: onnx.NodeProto, owner: Scope, layer: str, role: str
) -> tuple[np.ndarray, list[QuantizedWeights] | None] | None:
    """One ``DequantizeLinear``'s float output, and its records per direction for a 3-D weight."""
    if len(node.input) < 2:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    values = constants.constant(node.input[0], owner, layer, f"{role} (the integers of its {OP_TYPE})")
    scale, arithmetic = _scale(constants, node.input[1], owner, layer, role)
    zero = (
        constants.constant(node.input[2], owner, layer, f"{role} zero point")
        if len(node.input) > 2 and node.input[2]
        else np.zeros(scale.shape, values.dtype)
    )
    bits = 4 if values.dtype in FOUR_BIT else None
    values, zero = (a.astype(FOUR_BIT[a.dtype]) if a.dtype in FOUR_BIT else a for a in (values, zero))
    if values.dtype not in INTEGER_TYPES or scale.dtype not in SCALE_TYPES or zero.dtype != values.dtype:
        return None  # another form (int32 integers, bfloat16 scales): folded as a float constant
    full_scale, full_zero = _spread(values.shape, scale, zero, int(attrs.get("axis", 1)), attrs.get("block_size"))
    if full_scale is None or full_zero is None:
        return None
    floats = dequantize(values, full_zero, full_scale, arithmetic)
    if values.ndim != 3:
        return floats, None
    try:
        spread = [(values[d], full_scale[d], full_zero[d]) for d in range(values.shape[0])]
        return floats, [compacted(*parts, bits, arithmetic) for parts in spread]
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


def needed_opset(record: QuantizedWeights) -> int | None:
    """The lowest opset whose ``DequantizeLinear`` computes ``record`` exactly (module docstring); None for a record
    QDQ does not hold (dynamic activations; float16 rounding of a float32 scale)."""
    if record.dynamic_activations or (record.arithmetic == "float16" and record.scale.dtype != np.float16):
        return None
    needs = [MINIMUM_OPSET]
    needs += [FLOAT16_SCALE_OPSET] if record.arithmetic == "float16" else []
    needs += [FOUR_BIT_OPSET] if record.bits == 4 or record.axis == 1 else []
    return max(needs)


def records_opset(records: list[QuantizedWeights]) -> int | None:
    """The lowest opset holding every record (None: one is never held)."""
    needed = [needed_opset(r) for r in records]
    return None if any(n is None for n in needed) else max(needed, default=MINIMUM_OPSET)  # type: ignore[type-var]


def writable(records: list[QuantizedWeights], opset: int) -> bool:
    """Whether QDQ at ``opset`` holds these records exactly (8, 16 or, from opset 21, 4 bits; per tensor, per
    channel or, from opset 21, per block; float32 or float16 scales), with ONNX's ``DequantizeLinear`` or, for 4-bit
    records below opset 21, onnxruntime's contrib one (``uses_contrib``)."""
    needed = records_opset(records)
    own = needed is not None and opset >= needed and all(r.bits in (4, 8, 16) for r in records)
    return own or uses_contrib(records, opset)


def uses_contrib(records: list[QuantizedWeights], opset: int) -> bool:
    """Whether the records are written with ``com.microsoft::DequantizeLinear``: per tensor or per channel, float32
    arithmetic, in a model whose opset (10 to 20: ``DequantizeLinear`` exists) lacks what they need (per-axis
    before 13, 4-bit before 21). onnxruntime's quantizer writes the same; the model runs on onnxruntime only."""
    needed = records_opset(records)
    return (
        CONTRIB_FROM_OPSET <= opset
        and needed is not None
        and opset < needed
        and all(r.axis != 1 and r.arithmetic == "float32" and r.bits in (4, 8, 16) for r in records)
    )


def dequantize_nodes(
    name: str,
    records: list[QuantizedWeights],
    fresh: Callable[[str], str],
    constant: Callable[[str, np.ndarray], str],
    opset: int = FOUR_BIT_OPSET,
) -> list[onnx.NodeProto]:
    """The nodes computing the float weight ``name`` [D, G*H, K] from ``records`` (one per direction): per
    direction the integers [1, G*H, K] (packed for 4 bits), their scale and zero point as initializers
    (``constant(name, value)`` adds one and returns its name) and a ``DequantizeLinear`` (axis 1 per channel, axis
    2 with ``block_size`` per block; onnxruntime's contrib one where ``uses_contrib`` at ``opset``), the float16
    forms' Casts (module docstring), then a ``Concat`` of the directions."""
    domain = "com.microsoft" if uses_contrib(records, opset) else ""
    nodes, parts = [], []
    for d, record in enumerate(records):
        suffix = f"_d{d}" if len(records) > 1 else ""
        stored = PACKED[record.values.dtype] if record.bits == 4 else record.values.dtype
        scale = record.scale[None] if record.axis == 1 else record.scale
        zero = (record.zero_point[None] if record.axis == 1 else record.zero_point).astype(stored)
        inputs = [
            constant(f"{name}_quantized{suffix}", record.values[None].astype(stored)),
            constant(f"{name}_scale{suffix}", scale),
            constant(f"{name}_zero_point{suffix}", zero),
        ]
        if record.scale.dtype == np.float16 and record.arithmetic == "float32":
            widened = fresh(f"{name}_scale{suffix}_float")
            nodes.append(helper.make_node("Cast", [inputs[1]], [widened], name=fresh(f"{widened}/Cast"), to=1))
            inputs[1] = widened
        out = name if len(records) == 1 else fresh(f"{name}_dequantized{suffix}")
        narrow = record.arithmetic == "float16"
        node = helper.make_node(
            OP_TYPE,
            inputs,
            [fresh(f"{out}_float16") if narrow else out],
            name=fresh(f"{name}/{OP_TYPE}{suffix}"),
            domain=domain,
        )
        if record.axis is not None:
            node.attribute.append(helper.make_attribute("axis", 1 if record.axis == 0 else 2))
        if record.axis == 1:
            node.attribute.append(helper.make_attribute("block_size", record.block_size))
        nodes.append(node)
        if narrow:
            nodes.append(helper.make_node("Cast", node.output, [out], name=fresh(f"{out}/Cast"), to=1))
        parts.append(out)
    if len(parts) > 1:
        nodes.append(helper.make_node("Concat", parts, [name], name=fresh(f"{name}/Concat"), axis=0))
    return nodes

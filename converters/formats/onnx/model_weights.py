"""ONNX: a whole model's other weights quantized as asked (``--quantize-weights-scope model``): the constant weight
input of every ``MatMul`` (B), ``Gemm`` (B), ``Conv`` (W) and ``Gather`` (the embedding table, data) of the main
graph, with the recurrent layers' scheme (``weight_quantization``), per output channel (or per block of the
reduction axis), symmetric:

    rows[c, k]  = the weight with its output-channel axis first, the other axes flattened (k)
    scale[c, g] = max_{k in g} |rows[c, k]| / (2^(b-1) - 1),   q = clip(round_half_even(rows / scale), ±(2^(b-1) - 1))

The output-channel axis (``axis``): MatMul B ``[K, N]`` 1; Gemm B 0 with ``transB``, else 1; Conv W
``[C_out, C_in / group, *kernel]`` 0; Gather data ``[rows, D]`` 0 (each embedding row its own scale). Blocks run
along the reduction axis of a matrix (MatMul/Gemm B's K, a Gather row's D); a Conv keeps one scale per output
channel (its reduction spans several axes, which one ``DequantizeLinear`` block does not).

Left float, each with its reason (``ScopedWeight.reason``): a weight computed at run time or held in a ``Constant``
node (a Gather of a tensor computed at run time is no lookup table and not counted), one fed as a graph input (a
user may override it), one not float32, one read by another node as well, a batched (rank > 2) MatMul B or a Gather
along another axis, and one under ``MIN_ELEMENTS`` elements (biases and norms are never among these inputs;
coremltools' linear quantizer skips weights under the same 2048 elements by default). Inside ``If``/``Loop`` bodies
nothing is touched.

Written (``quantize_in_place``) as QDQ: the integers (INT4 packed for 4 bits) with their scale as initializers and a
``DequantizeLinear`` computing the float weight under its own name, at the model's opset (opset 13 per axis, 21 for
4 bits or blocks; below 13, onnxruntime's contrib ``DequantizeLinear`` as its quantizer writes it, ``onnx.qdq``), or
(``as_floats``) the float view ``q * scale`` the artifact computes on, which is the twin the accuracy gate judges it
against. The ``axis`` attribute is spelled from the back (-1 for a MatMul B's columns): ONNX defines it as the same
axis, and onnxruntime's default session then computes the float view; its QDQ optimizer rewrites a
``DequantizeLinear`` with ``axis`` 1 (or blocks on ``axis`` 0) feeding a MatMul's B into ``MatMulNBits``, whose
prepacked kernel quantizes the MatMul's input to int8 at run time (docs/conventions.md §9c).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.formats.onnx.graph import ONNX_DOMAINS
from gatepack.converters.weight_quantization import quantize_rows

if TYPE_CHECKING:
    from gatepack.converters.weight_quantization import Scheme

MIN_ELEMENTS = 2048  # smaller weights stay float (coremltools' default weight_threshold for its linear quantizer)
WEIGHT_INPUT = {"MatMul": 1, "Gemm": 1, "Conv": 1, "Gather": 0}  # op -> the input that holds its weight
CONTRIB_BELOW = 13  # the first opset whose DequantizeLinear takes an axis
BLOCK_OPSET = 21  # INT4 integers and block_size


@dataclass(frozen=True)
class ScopedWeight:
    """One weight input of a MatMul/Gemm/Conv/Gather: its initializer ``name``, the ``op`` reading it, its
    ``shape``, the output-channel ``axis`` and the reduction axis blocks run along (``block_axis``, None: per
    channel); ``reason`` says why it stays float ('' when it is quantized)."""

    name: str
    op: str
    shape: tuple[int, ...]
    axis: int = 0
    block_axis: int | None = None
    reason: str = ""

    @property
    def channels(self) -> tuple[int, int]:
        """(output channels, elements a channel)."""
        return self.shape[self.axis], int(np.prod(self.shape)) // max(self.shape[self.axis], 1)


def weight_plan(proto: onnx.ModelProto, scheme: "Scheme") -> list[ScopedWeight]:
    """Every MatMul/Gemm/Conv/Gather weight input of ``proto``'s main graph, quantized or why not (module
    docstring), each initializer once."""
    graph = proto.graph
    initializers = {t.name: t for t in graph.initializer}
    inputs = {i.name for i in graph.input}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    constants = {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    plan: dict[str, ScopedWeight] = {}
    for node in graph.node:
        k = WEIGHT_INPUT.get(node.op_type)
        if k is None or node.domain not in ONNX_DOMAINS or len(node.input) <= k or node.input[k] in plan:
            continue
        name = node.input[k]
        if name not in initializers and node.op_type == "Gather":
            continue  # a Gather of a tensor computed at run time indexes activations: no lookup table
        if name not in initializers:
            where = "held in a Constant node" if name in constants else "computed at run time"
            plan[name] = ScopedWeight(name, node.op_type, (), reason=f"not an initializer: {where}")
            continue
        tensor = initializers[name]
        plan[name] = _planned(node, tensor, scheme, name in inputs, readers.get(name, []))
    return list(plan.values())


def _planned(node, tensor, scheme: "Scheme", fed: bool, readers: list) -> ScopedWeight:
    """The plan for one initializer read by ``node`` (its axes, or why it stays float)."""
    shape = tuple(int(d) for d in tensor.dims)
    axis, reduction, why = _axes(node, shape)
    size = int(np.prod(shape)) if shape else 1
    others = sorted({f"{r.op_type} {r.name or r.output[0]!r}" for r in readers if r is not node})
    reason = (
        "fed as a graph input (a user may override it)"
        if fed
        else f"stored as {onnx.TensorProto.DataType.Name(tensor.data_type).lower()}, not float32"
        if tensor.data_type != onnx.TensorProto.FLOAT
        else why
        or (f"also read by {', '.join(others[:3])}" if others else "")
        or (f"tiny: {size} < {MIN_ELEMENTS} elements" if size < MIN_ELEMENTS else "")
    )
    block = scheme.block_size
    if not reason and block is not None and reduction is not None and shape[reduction] % block:
        reason = f"--quantize-block-size {block} does not divide its {shape[reduction]} columns"
    return ScopedWeight(tensor.name, node.op_type, shape, axis, reduction if block else None, reason)


def _axes(node, shape: tuple[int, ...]) -> tuple[int, int | None, str]:
    """(output-channel axis, reduction axis blocks run along (None: none), why the weight stays float ('')) of
    ``node``'s weight of ``shape``."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        return 0, None, "" if len(shape) >= 3 else f"a rank-{len(shape)} kernel"
    if len(shape) != 2:
        return 0, None, f"a rank-{len(shape)} {'table' if node.op_type == 'Gather' else 'B'}, not a matrix"
    if node.op_type == "Gather":
        axis = int(attrs.get("axis", 0))
        return 0, 1, "" if axis in (0, -2) else f"gathered along axis {axis}, not its rows"
    if node.op_type == "Gemm" and attrs.get("transB", 0):
        return 0, 1, ""
    return 1, 0, ""


def quantized(floats: np.ndarray, weight: ScopedWeight, scheme: "Scheme") -> tuple[np.ndarray, np.ndarray]:
    """The integers (int8, the weight's shape) and the scale of ``weight`` (its float32 value ``floats``): per
    channel ``[C]``, per block the weight's shape with the reduction axis divided by the block size."""
    moved = np.moveaxis(floats, weight.axis, 0)
    record = quantize_rows(moved.reshape(moved.shape[0], -1), scheme.bits, scheme.block_size if weight.block_axis
                           is not None else None)  # fmt: skip
    values = np.moveaxis(record.values.reshape(moved.shape), 0, weight.axis)
    scale = record.scale if weight.block_axis is None else np.moveaxis(record.scale, 0, weight.axis)
    return values, scale


def float_view(values: np.ndarray, scale: np.ndarray, weight: ScopedWeight, block: int | None) -> np.ndarray:
    """``q * scale`` in float32, as ``DequantizeLinear`` (and every target's decompression) computes it."""
    if weight.block_axis is None:
        shape = [1] * values.ndim
        shape[weight.axis] = -1
        return values.astype(np.float32) * scale.reshape(shape)
    return values.astype(np.float32) * np.repeat(scale, int(block or 1), axis=weight.block_axis)


def opset_of(proto: onnx.ModelProto) -> int:
    """The model's ONNX opset."""
    return next((o.version for o in proto.opset_import if o.domain in ONNX_DOMAINS), 1)


def quantize_in_place(proto: onnx.ModelProto, scheme: "Scheme", as_floats: bool, base: Path) -> list[str]:
    """``proto``'s other weights quantized (``weight_plan``), in place: each as QDQ (module docstring), or as its
    float view (``as_floats``); external data is read from the directory ``base``. Returns the names of the
    initializers it added (embedded)."""
    graph = proto.graph
    opset = opset_of(proto)
    initializers = {t.name: t for t in graph.initializer}
    done = [w for w in weight_plan(proto, scheme) if not w.reason]
    dequantizers = []
    used = (
        {t.name for t in graph.initializer} | {n.name for n in graph.node} | {o for n in graph.node for o in n.output}
    )

    def fresh(name: str) -> str:
        chosen = next(f"{name}_{k}" if k else name for k in range(len(used) + 1) if (f"{name}_{k}" if k else name)
                      not in used)  # fmt: skip
        used.add(chosen)
        return chosen

    for weight in done:
        tensor = initializers[weight.name]
        values, scale = quantized(numpy_helper.to_array(tensor, str(base)).astype(np.float32), weight, scheme)
        graph.initializer.remove(tensor)
        if as_floats:
            view = float_view(values, scale, weight, scheme.block_size)
            graph.initializer.append(numpy_helper.from_array(view, weight.name))
            continue
        stored = values.astype(ml_dtypes.int4) if scheme.bits == 4 else values
        names = [fresh(f"{weight.name}_quantized"), fresh(f"{weight.name}_scale")]
        graph.initializer.extend([numpy_helper.from_array(stored, names[0]), numpy_helper.from_array(scale, names[1])])
        dequantizers.append(_dequantizer(names, weight, scheme, opset, fresh(f"{weight.name}/DequantizeLinear")))
    for k, node in enumerate(dequantizers):
        graph.node.insert(k, node)
    before = {t.name for t in initializers.values()} - {w.name for w in done}
    return [t.name for t in graph.initializer if t.name not in before]


def _dequantizer(inputs: list[str], weight: ScopedWeight, scheme: "Scheme", opset: int, name: str) -> onnx.NodeProto:
    """The ``DequantizeLinear`` computing ``weight`` from its integers and scale (``inputs``): onnxruntime's contrib
    one below the opset ONNX's takes them (13 per axis, 21 for 4 bits); the axis counted from the back (the same
    axis to ONNX: onnxruntime's QDQ fusion into MatMulNBits, which would quantize the MatMul's input at run time,
    matches only the positive spelling; module docstring), with ``block_size`` for blocks."""
    contrib = opset < CONTRIB_BELOW or (scheme.bits == 4 and opset < BLOCK_OPSET)
    node = helper.make_node(
        "DequantizeLinear", inputs, [weight.name], name=name, domain="com.microsoft" if contrib else ""
    )
    axis = weight.axis if weight.block_axis is None else weight.block_axis
    node.attribute.append(helper.make_attribute("axis", axis - len(weight.shape)))
    if weight.block_axis is not None:
        node.attribute.append(helper.make_attribute("block_size", int(scheme.block_size or 0)))
    return node


def unwritable(opset: int, scheme: "Scheme") -> str | None:
    """Why a model at ``opset`` cannot hold ``scheme``'s QDQ weights (None: it can): blocks need opset 21."""
    if scheme.block_size is not None and opset < BLOCK_OPSET:
        return f"per-block DequantizeLinear needs opset {BLOCK_OPSET}; the whole model keeps its opset {opset}"
    return None

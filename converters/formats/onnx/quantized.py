"""ONNX: onnxruntime's dynamically quantized LSTM, ``com.microsoft::DynamicQuantizeLSTM``, read with its integers
kept (``schemas.quantized``) and written back.

``onnxruntime.quantization.quantize_dynamic`` rewrites an ONNX ``LSTM`` node into this contrib operator
(docs/conventions.md §9). Its inputs are the LSTM's, numbered the same (X, W, R, B, sequence_lens,
initial_h, initial_c, P), followed by W_scale, W_zero_point, R_scale, R_zero_point; its attributes are
the LSTM's without ``layout``. What differs:

* W is int8 or uint8 of shape [D, I, 4H] and R [D, H, 4H]: **transposed** against ONNX's [D, 4H, I] and
  [D, 4H, H], gate blocks still i, o, f, c along the last axis;
* scale and zero point are [D] (one per direction) or [D, 4H] (one per output column, i.e. per row of
  ONNX's W); per column, onnxruntime's kernel subtracts one zero point per matrix (its first) and
  refuses zero points that differ (uint8) or are not zero (int8);
* at run time the kernel quantizes its GEMMs' left operands to uint8 with a scale and zero point from
  their range: X once over all steps, h at every step; it accumulates in int32 and rescales.

The reader keeps the integers per direction, transposed into the canonical [4H, K] (``QuantizedWeights`` with
``dynamic_activations``), and reads their float view ``W = (Wq - zero_point) * scale`` as an ``LSTM`` node
with the same attributes (every check of the float reader applies). ONNX writes the operator back
(``dynamic_lstm_node``); every other target computes in float what the source computes with 8-bit X and h:
``lossy``, only with ``--dequantize`` (``converters.quantization``). Verification runs the original node on
onnxruntime, its int8 weights re-encoded
exactly as uint8 (``q + 128`` with ``zero_point + 128``: the same dequantized values), because
onnxruntime's uint8 x int8 kernel saturates 16-bit pair sums on x86 CPUs without VNNI, which makes its
results depend on the CPU; the comparison uses the tolerance measured for the run-time quantization
(``converters.samples.TOLERANCES``).
"""

from __future__ import annotations

import copy
import mmap
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.errors import InputError, where
from gatepack.converters.fileio import open_regular
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.onnx.graph import Scope, external_file, isolated_record, walk_nodes
from gatepack.converters.samples import DYNAMIC_INT8
from gatepack.schemas.layer import QUANTIZED_ROLES, RecurrentLayer
from gatepack.schemas.quantized import ORT_DYNAMIC, QuantizedWeights

if TYPE_CHECKING:  # onnx.node imports what imports this module
    from gatepack.converters.formats.onnx.node import NodeReader

OP_TYPE = "DynamicQuantizeLSTM"
DOMAIN = "com.microsoft"
_ATTRIBUTES = {
    "hidden_size": onnx.AttributeProto.INT,
    "direction": onnx.AttributeProto.STRING,
    "activations": onnx.AttributeProto.STRINGS,
    "activation_alpha": onnx.AttributeProto.FLOATS,
    "activation_beta": onnx.AttributeProto.FLOATS,
    "clip": onnx.AttributeProto.FLOAT,
    "input_forget": onnx.AttributeProto.INT,
}
_QUANTIZATION_INPUTS = ((8, "W_scale"), (9, "W_zero_point"), (10, "R_scale"), (11, "R_zero_point"))


def is_quantized_lstm(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is onnxruntime's ``com.microsoft::DynamicQuantizeLSTM``."""
    return node.op_type == OP_TYPE and node.domain == DOMAIN


def is_quantized_layer(layer: RecurrentLayer) -> bool:
    """Whether ``layer`` was read from a ``DynamicQuantizeLSTM`` node."""
    return layer.provenance is not None and layer.provenance.op_type == OP_TYPE


def compute_dtype(layer: RecurrentLayer) -> str:
    """The verification tolerance class: ``DYNAMIC_INT8`` for a dequantized layer, else its dtype."""
    return DYNAMIC_INT8 if is_quantized_layer(layer) else layer.interface.dtype


def foreign_operators(nodes: Iterable[tuple], onnx_domains: tuple[str, ...]) -> str:
    """The reason a model without recurrent layers gives when it holds operators of other domains (``nodes``
    as ``walk_nodes`` yields them), e.g. onnxruntime's quantized contrib operators; '' when it holds none."""
    found = sorted({f"{node.domain}::{node.op_type}" for node, *_ in nodes if node.domain not in onnx_domains})
    if not found:
        return ""
    shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    return (
        f" (it holds {shown}: operators outside the ONNX standard, of which gatepack reads only "
        f"{DOMAIN}::{OP_TYPE}, with its integers kept)"
    )


def read_quantized_lstm(reader: NodeReader, node: onnx.NodeProto, scope: Scope, name: str) -> RecurrentLayer:
    """The LSTM layer of a ``DynamicQuantizeLSTM`` node: its integers kept per direction (``Wq``/``Rq``), their
    float view transposed into ONNX's layout and read by ``reader`` (the ONNX node reader) as an ``LSTM`` node with
    the node's attributes; its provenance runs the original node. Notes onnxruntime's saturating int8 kernel."""
    at = where(reader.path, name)
    _check_signature(node, at)
    inputs = list(node.input) + [""] * (12 - len(node.input))
    hidden = next((a.i for a in node.attribute if a.name == "hidden_size"), None)
    if hidden is None or hidden < 1:
        raise InputError(f"{at}{OP_TYPE} needs a positive hidden_size attribute (got {hidden})")
    stored = {role: reader.constants.constant(inputs[k], scope, name, role) for k, role in ((1, "W"), (2, "R"))}
    stored |= {role: reader.constants.constant(inputs[k], scope, name, role) for k, role in _QUANTIZATION_INPUTS}
    records = {role: _records(stored, role, hidden, at) for role in QUANTIZED_ROLES}
    if len(records["W"]) != len(records["R"]) or stored["R"].shape[1] != hidden:
        raise InputError(
            f"{at}R has shape {list(stored['R'].shape)}, expected [{len(records['W'])}, {hidden}, {4 * hidden}] "
            f"beside W {list(stored['W'].shape)}"
        )
    floats = {inputs[k]: np.stack([q.dequantized() for q in records[role]]) for k, role in ((1, "W"), (2, "R"))}
    proxy = helper.make_node("LSTM", inputs[:8], list(node.output), name=node.name, domain="")
    proxy.attribute.extend(node.attribute)
    shadowed = copy.copy(scope)  # the same names, W and R now float initializers in ONNX's layout
    shadowed.initializers = {
        **scope.initializers,
        **{k: numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in floats.items()},
    }
    layer = reader.read_node(proxy, shadowed, name)
    handle, provenance = isolated_record(layer), layer.provenance
    assert provenance is not None  # (isolated_record found its handle there)
    constants = {k: v for k, v in handle.constants.items() if k not in floats}  # B and P
    constants |= {inputs[k]: _exact_kernel(stored[role]) for k, role in ((1, "W"), (2, "R"), *_QUANTIZATION_INPUTS)}
    original = replace(handle, nodes=[node if n is proxy else n for n in handle.nodes], constants=constants)
    if _saturating(stored):
        reader.notes.setdefault(name, []).append(_saturation_note())
    directions = tuple(replace(p, Wq=records["W"][d], Rq=records["R"][d]) for d, p in enumerate(layer.directions))
    provenance = replace(provenance, op_type=OP_TYPE, op_version=1, inputs=tuple(node.input), handle=original)
    return replace(layer, directions=directions, provenance=provenance)


def dynamic_lstm_node(
    layer: RecurrentLayer,
    node_inputs: list[str],
    node_outputs: list[str],
    name: str,
    attrs: dict,
    prefix: dict[str, str],
    constant: Callable[[str, np.ndarray], str],
) -> onnx.NodeProto:
    """The ``DynamicQuantizeLSTM`` node of ``layer`` (its W and R records have ``dynamic_activations``):
    ``node_inputs`` the LSTM's eight (W and R left empty) and the ``attrs`` of its LSTM node; the integers written
    back in the operator's layout [D, K, 4H] (the records' transpose), scales and zero points [D] per tensor or
    [D, 4H] per column, each an initializer made by ``constant(name, value)`` under ``prefix[role]``."""
    inputs = list(node_inputs) + [""] * (8 - len(node_inputs))
    quantization = []
    for k, role in ((1, "W"), (2, "R")):
        records = [p.quantized(role) for p in layer.directions]
        assert all(r is not None for r in records)  # (quantized_form checked)
        inputs[k] = constant(prefix[role], np.stack([r.values.T for r in records]))  # type: ignore[union-attr]
        for part in ("scale", "zero_point"):
            value = np.stack([getattr(r, part) for r in records])
            quantization.append(constant(f"{prefix[role]}_{part}", value))
    kept = {k: v for k, v in attrs.items() if k in _ATTRIBUTES}
    return helper.make_node(OP_TYPE, inputs + quantization, node_outputs, name=name, domain=DOMAIN, **kept)


def contrib_opsets(nodes: Iterable[onnx.NodeProto], declared: Iterable[onnx.OperatorSetIdProto]) -> list:
    """The opset import ``nodes`` need for onnxruntime's contrib domain when ``declared`` lacks it ([] otherwise)."""
    if any(n.domain == DOMAIN for n in nodes) and not any(o.domain == DOMAIN for o in declared):
        return [helper.make_opsetid(DOMAIN, 1)]
    return []


def _check_signature(node: onnx.NodeProto, at: str) -> None:
    """Attributes of the operator's schema with their types, at most 12 inputs and 3 outputs, and the
    inputs onnxruntime requires (X, W, R and the four quantization parameters)."""
    for a in node.attribute:
        if a.name not in _ATTRIBUTES:
            raise InputError(f"{at}attribute {a.name!r} is not part of {DOMAIN}::{OP_TYPE}")
        if a.type != _ATTRIBUTES[a.name]:
            raise InputError(
                f"{at}attribute {a.name!r} is of type {onnx.AttributeProto.AttributeType.Name(a.type)}, {OP_TYPE} "
                f"takes {onnx.AttributeProto.AttributeType.Name(_ATTRIBUTES[a.name])}"
            )
    if len(node.input) > 12 or len(node.output) > 3:
        raise InputError(
            f"{at}{OP_TYPE} has {len(node.input)} inputs and {len(node.output)} outputs; it takes at most 12 and 3"
        )
    inputs = list(node.input) + [""] * (12 - len(node.input))
    missing = [role for k, role in ((0, "X"), (1, "W"), (2, "R"), *_QUANTIZATION_INPUTS) if not inputs[k]]
    if missing:
        raise InputError(f"{at}{OP_TYPE} needs inputs {', '.join(missing)} (onnxruntime requires them)")


def _records(stored: dict[str, np.ndarray], role: str, hidden: int, at: str) -> list[QuantizedWeights]:
    """Per direction, the integers of ``role`` W or R ([D, K, 4H], the operator's layout) transposed into the
    canonical [4H, K] with their scale and zero point: one per direction (per tensor) or per output column (per
    channel, axis 0), run-time activation quantization recorded. Shapes, dtypes and zero points as onnxruntime's
    kernel (``DynamicQuantizeLSTM::Compute``) accepts them, else InputError."""
    q, scale, zero = stored[role], stored[f"{role}_scale"], stored[f"{role}_zero_point"]
    if q.dtype not in (np.int8, np.uint8):
        raise InputError(f"{at}{role} is {q.dtype}; {OP_TYPE} takes int8 or uint8 weights")
    if q.ndim != 3 or q.shape[2] != 4 * hidden:
        raise InputError(
            f"{at}{role} has shape {list(q.shape)}, expected [num_directions, "
            f"{'input_size' if role == 'W' else hidden}, {4 * hidden}] for hidden_size={hidden}"
        )
    directions = q.shape[0]
    if zero.dtype != q.dtype or scale.dtype != np.float32:
        raise InputError(
            f"{at}{role}_zero_point is {zero.dtype} and {role}_scale {scale.dtype}; with {q.dtype} {role} they "
            f"must be {q.dtype} and float32"
        )
    for label, array in ((f"{role}_scale", scale), (f"{role}_zero_point", zero)):
        if array.shape not in ((directions,), (directions, 4 * hidden)):
            raise InputError(
                f"{at}{label} has shape {list(array.shape)}, expected [{directions}] (per direction) or "
                f"[{directions}, {4 * hidden}] (per output column)"
            )
    if scale.shape != zero.shape:
        raise InputError(f"{at}{role}_scale {list(scale.shape)} and {role}_zero_point {list(zero.shape)} differ")
    per_channel = scale.ndim == 2
    if per_channel and np.unique(zero).size > 1 or (per_channel and q.dtype == np.int8 and zero.any()):
        raise InputError(
            f"{at}{role}_zero_point per output column holds {sorted(set(zero.ravel().tolist()))[:4]}: onnxruntime "
            f"takes one zero point per matrix ({'zero for int8' if q.dtype == np.int8 else 'all equal'}) and refuses "
            "this node"
        )
    if not np.isfinite(scale).all():
        raise InputError(f"{at}{role}_scale holds a value that is not finite")
    return [
        QuantizedWeights(
            q[d].T,
            np.asarray(scale[d]),
            np.asarray(zero[d]),
            axis=0 if per_channel else None,
            bits=8,
            signed=q.dtype == np.int8,
            dynamic_activations=ORT_DYNAMIC,
        )
        for d in range(directions)
    ]


# the integer products onnxruntime computes with its uint8 x int8 kernel: operator -> the inputs holding the int8
# operand and its zero point (DynamicQuantizeLSTM: W, R and theirs; MatMulInteger, ConvInteger: B/w and its)
EXACT_KERNEL_INPUTS = {OP_TYPE: (1, 2, 9, 11), "MatMulInteger": (1, 3), "ConvInteger": (1, 3)}
INTEGER_PRODUCTS = ("MatMulInteger", "ConvInteger")
INT8 = onnx.TensorProto.INT8


def exact_kernel_source(path: Path) -> str | bytes:
    """What onnxruntime should load to run the model at ``path`` as its operators define it: the path
    itself, or, when a ``DynamicQuantizeLSTM`` has int8 weights, or a ``MatMulInteger``/``ConvInteger`` multiplies
    a run-time uint8 tensor by an int8 constant with an int8 zero point, the serialised model with those constants
    and zero points re-encoded as uint8 (``_exact_kernel``; external data read from regular files inside the model's
    directory, as the reader reads it)."""
    with open_regular(path) as file:
        if os.fstat(file.fileno()).st_size == 0:
            return str(path)
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if all(data.find(op.encode()) < 0 for op in EXACT_KERNEL_INPUTS):
                return str(path)
    proto = onnx.load_model(str(path), load_external_data=False)
    graphs = list({id(graph): graph for _, graph, _, _ in walk_nodes(proto.graph)}.values())  # with nodes
    tensors = {t.name: t for graph in graphs for t in graph.initializer}
    weights = [name for graph in graphs for node in graph.node for name in _int8_operands(node, graph, tensors)]
    int8 = [
        tensors[n] for n in dict.fromkeys(weights) if n in tensors and tensors[n].data_type == onnx.TensorProto.INT8
    ]
    if not int8:
        return str(path)
    for tensor in tensors.values():
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            external_file(tensor, path.parent)  # contained and regular before onnx opens it
    onnx.load_external_data_for_model(proto, str(path.parent))
    for tensor in int8:
        tensor.CopyFrom(numpy_helper.from_array(_exact_kernel(numpy_helper.to_array(tensor)), tensor.name))
    return proto.SerializeToString()


def _int8_operands(node: onnx.NodeProto, graph: onnx.GraphProto, tensors: dict) -> list[str]:
    """The constants of ``node`` to re-encode as uint8: a quantized LSTM's weights and zero points; an integer
    product's int8 constant operand and its int8 zero point when its other operand is a ``DynamicQuantizeLinear``'s
    uint8 output (another pairing would leave onnxruntime a kernel it lacks) and the zero point is given."""
    if is_quantized_lstm(node):
        return [name for k, name in enumerate(node.input) if k in EXACT_KERNEL_INPUTS[OP_TYPE] and name]
    if (
        node.op_type not in ("MatMulInteger", "ConvInteger")
        or node.domain not in ("", "ai.onnx")
        or len(node.input) < 4
    ):
        return []
    operand, zero_point = node.input[1], node.input[3]
    dynamic = any(n.op_type == "DynamicQuantizeLinear" and node.input[0] == n.output[0] for n in graph.node)
    int8 = all(name in tensors and tensors[name].data_type == INT8 for name in (operand, zero_point))
    return [operand, zero_point] if dynamic and int8 else []


def _exact_kernel(array: np.ndarray) -> np.ndarray:
    """An int8 weight or zero point re-encoded as uint8 (``+ 128``): the same ``q - zero_point``, which
    onnxruntime's uint8 x uint8 kernel computes without the 16-bit saturation of its uint8 x int8 kernel
    on x86 CPUs without VNNI. uint8 arrays are returned as they are."""
    if array.dtype != np.int8:
        return array
    return (array.astype(np.int16) + 128).astype(np.uint8)


def _saturating(stored: dict[str, np.ndarray]) -> bool:
    """Whether onnxruntime's own uint8 x int8 kernel may saturate on these weights (int8 beyond +-64)."""
    return stored["W"].dtype == np.int8 and max(np.abs(stored[r].astype(np.int16)).max() for r in "WR") > 64


def _saturation_note() -> Finding:
    return Finding(
        "kernel",
        Status.EXACT,
        f"{DOMAIN}::{OP_TYPE} with int8 weights beyond +-64 is run with its weights re-encoded exactly as uint8 "
        "(q + 128, zero point + 128: the same dequantized values)",
        warning="onnxruntime's own int8 kernel saturates 16-bit sums on x86 CPUs without VNNI, so the source's "
        "results depend on the CPU (0.3 off measured for torch-initialised layers, more for larger weights); "
        "gatepack runs and verifies the same node with its weights re-encoded exactly as uint8",
    )

"""ONNX writing: a model holding the layers alone (``build``), and the nodes that compute one layer
(``layer_nodes``: a recurrent node with Transposes for a batch-major interface, or elementary ops), shared with
the in-place rewrite of a whole model (``onnx.rewrite``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

import gatepack.converters.formats.onnx.described as onnx_described
import gatepack.converters.formats.onnx.elementary as onnx_elementary
import gatepack.converters.formats.onnx.qdq as onnx_qdq
import gatepack.converters.formats.onnx.quantized as onnx_quantized
from gatepack.converters.description import constant_in_layout
from gatepack.converters.errors import UsageError
from gatepack.converters.feature_findings import form_of
from gatepack.converters.formats.onnx.graph import DEFAULT_OPSET, PERM_IN, PERM_Y, PERM_YH, broadcast_state_nodes
from gatepack.converters.formats.onnx.registration import CAPABILITIES as ONNX_CAPABILITIES
from gatepack.converters.formats.onnx.registration import FOR_DIRECTML as ONNX_FOR_DIRECTML
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.schemas.layer import INPUT_ROLES, DirectionParams, RecurrentLayer, stack_directions
from gatepack.schemas.quantized import ORT_DYNAMIC

FOUR_BIT_TYPES = (onnx.TensorProto.INT4, onnx.TensorProto.UINT4)
FOUR_BIT_IR_VERSION = 10  # the IR version that has INT4/UINT4 (onnxruntime's contrib DequantizeLinear takes them)
WRITABLE_OPSETS = (7, 14, 19, 21)  # 19, 21: what QDQ of float16 scales, 4-bit integers and blocks needs
EXTERNAL_MINIMUM = 1 << 16  # with external data, an initializer of this many bytes or more goes there


@dataclass
class Stacked:
    """An initializer made of per-direction arrays stacked on a new first axis, materialised only
    when the model is built: in memory, or streamed part by part into an external data file."""

    name: str
    parts: list[np.ndarray]

    def embedded(self) -> onnx.TensorProto:
        return numpy_helper.from_array(stack_directions(self.parts), self.name)

    def external(self, data, location: str) -> onnx.TensorProto:
        return streamed(self.name, self.parts, [len(self.parts), *self.parts[0].shape], data, location)


def streamed(name: str, parts: list[np.ndarray], dims: list[int], data, location: str) -> onnx.TensorProto:
    """The initializer ``name`` of shape ``dims`` whose bytes are ``parts`` one after the other, written into the
    external data file ``data`` (named ``location``) at its current end, the next tensor aligned to 64 bytes."""
    dtype = parts[0].dtype
    tensor = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(dtype), dims=dims)
    offset = data.tell()
    for part in parts:
        data.write(np.ascontiguousarray(part, dtype=dtype.newbyteorder("<")).data.cast("B"))
    return located(tensor, offset, data, location)


def located(tensor: onnx.TensorProto, offset: int, data, location: str) -> onnx.TensorProto:
    """``tensor`` pointed at the bytes written into ``data`` from ``offset`` on, the file padded to 64 bytes."""
    length = data.tell() - offset
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
    data.write(b"\0" * (-data.tell() % 64))  # keep the next tensor aligned for memory-mapped readers
    return tensor


def build(
    model: Model,
    *,
    opset: int = DEFAULT_OPSET,
    layout_encoding: str = "transpose",
    external: tuple | None = None,
    runtime: str = "onnxruntime",
    quantized: bool = False,
    strategy: str = "auto",
) -> onnx.ModelProto:
    """The ONNX model of ``model``'s layers; ``external`` = (binary file, location) streams the
    weights into that file instead of the protobuf; ``quantized``: quantized weights kept as integers where ONNX
    holds them (``WriteForm.quantized_form``); ``strategy``: each layer's node, or elementary operators
    (``feature_findings.form_of``), those described in the model's metadata (``onnx.described``)."""
    if opset not in WRITABLE_OPSETS:
        raise UsageError(f"ONNX opset {opset} cannot be written", hint=f"choose one of {WRITABLE_OPSETS}")
    if layout_encoding not in ("transpose", "attribute"):
        raise UsageError(f"layout encoding {layout_encoding!r} is not 'transpose' or 'attribute'")
    if layout_encoding == "attribute" and opset < 14:
        raise UsageError(
            f"the layout attribute needs opset 14 or later (asked for opset {opset})",
            hint="use the transpose layout encoding",
        )
    model = with_separate_inputs(model)
    names = NameBook()
    nodes: list[onnx.NodeProto] = []
    stacked: list[Stacked | Plain] = []
    graph_inputs: list[onnx.ValueInfoProto] = []
    graph_outputs: list[onnx.ValueInfoProto] = []
    described: list[dict] = []
    form = WriteForm(layout_encoding, runtime, opset, quantized, strategy)
    for layer in model.layers:
        _emit_layer(layer, form, names, nodes, stacked, graph_inputs, graph_outputs, described)
    inits = [t.external(*external) if external else t.embedded() for t in stacked]
    opsets = [helper.make_opsetid("", opset)] + onnx_quantized.contrib_opsets(nodes, ())
    ir_version = helper.find_min_ir_version_for(opsets[:1])  # (the contrib domain has no IR version of its own)
    if any(t.data_type in FOUR_BIT_TYPES for t in inits):
        ir_version = max(ir_version, FOUR_BIT_IR_VERSION)
    if ir_version < 4:  # IR 3 wants every initializer declared as a graph input too
        graph_inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "gatepack", graph_inputs, graph_outputs, inits)
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="gatepack", ir_version=ir_version)
    onnx_described.store(proto, described)
    return proto


class NameBook:
    """Keeps every tensor name unique in the written graph (inputs can be shared, outputs cannot)."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.inputs: set[str] = set()

    def fresh(self, name: str) -> str:
        candidate, k = name, 1
        while candidate in self.used:
            k += 1
            candidate = f"{name}__{k}"
        self.used.add(candidate)
        return candidate

    def graph_input(self, name: str) -> tuple[str, bool]:
        """The name to use for a graph input, and whether it is new (shared inputs are declared once)."""
        if name in self.inputs:
            return name, False
        fresh = self.fresh(name)
        self.inputs.add(fresh)
        return fresh, True


def _emit_layer(
    layer: RecurrentLayer,
    form: "WriteForm",
    names: NameBook,
    nodes: list,
    inits: list,
    g_in: list,
    g_out: list,
    described: list[dict],
) -> None:
    """Declare ``layer``'s interface as graph inputs and outputs, and emit its nodes and weights (a layer written
    as elementary operators, always sequence-major inside Transposes, described in ``described``)."""
    if form.elementary(layer):
        form = replace(form, encoding="transpose")  # the layout attribute is the recurrent node's alone
    itf = layer.interface
    elem = helper.np_dtype_to_tensor_dtype(layer.dtype)
    d, h, i = layer.num_directions, layer.hidden_size, layer.input_size
    s, n = itf.seq_length, itf.batch_size
    batch_major = itf.layout == 1
    state = [n, d, h] if batch_major else [d, n, h]
    input_shapes = {
        "x": (elem, [n, s, i] if batch_major else [s, n, i]),
        "sequence_lens": (onnx.TensorProto.INT32, [n]),
        "initial_h": (elem, state),
        "initial_c": (elem, state),
    }
    inputs = {}
    for role, (elem_type, shape) in input_shapes.items():
        name = getattr(itf, role)
        if role in layer.constants:  # held by the layer: an initializer, in the node's own layout
            inputs[role] = names.fresh(name)
            node_layout = 1 if batch_major and form.encoding == "attribute" else 0
            value = constant_in_layout(layer, role, node_layout)
            if role != "sequence_lens" and layer.constants[role].shape[1] == 1 and n != 1:  # one state, any batch
                batch1 = names.fresh(f"{name}__batch1")
                axis = 0 if node_layout else 1
                nodes += broadcast_state_nodes(batch1, axis, inputs["x"], 0 if batch_major else 1, inputs[role])
                names.used |= {o for node in nodes[-6:] for o in node.output}
                inits.append(Stacked(batch1, list(value)))
            else:
                inits.append(Stacked(inputs[role], list(value)))
        elif name is not None:
            inputs[role], new = names.graph_input(name)
            if new:
                g_in.append(helper.make_tensor_value_info(inputs[role], elem_type, shape))
    outputs = {}
    for role, shape in (("y", [n, s, d, h] if batch_major else [s, d, n, h]), ("y_h", state), ("y_c", state)):
        if getattr(itf, role) is not None:
            outputs[role] = names.fresh(getattr(itf, role))
            g_out.append(helper.make_tensor_value_info(outputs[role], elem, shape))
    nodes += layer_nodes(
        layer, form, names, inits, inputs, outputs, in_node_layout=set(layer.constants), described=described
    )


@dataclass(frozen=True)
class WriteForm:
    """How a layer's nodes are written: the layout ``encoding`` (transpose, attribute), the ``runtime`` the
    model is for (onnxruntime, directml), the model's ``opset`` and the ``strategy`` asked for."""

    encoding: str = "transpose"
    runtime: str = "onnxruntime"
    opset: int = DEFAULT_OPSET
    quantized: bool = False  # a layer's quantized weights written as integers where ONNX holds them
    strategy: str = "auto"

    def quantized_form(self, layer: RecurrentLayer) -> str | None:
        """How ``layer``'s quantized weights are written: ``qdq`` (integer initializers + DequantizeLinear),
        ``dynamic`` (onnxruntime's DynamicQuantizeLSTM) or None (float weights)."""
        return quantized_form(layer, self.opset, self.runtime, self.encoding) if self.quantized else None

    def elementary(self, layer: RecurrentLayer) -> bool:
        """Whether ``layer`` is written as elementary operators: ONNX has no operator for its cell, ``--strategy
        decomposed`` asks for them, or its runtime would compute its node otherwise or is in doubt for it
        (``registration.FOR_DIRECTML``)."""
        caps = ONNX_FOR_DIRECTML if self.runtime == "directml" else ONNX_CAPABILITIES
        return not form_of(layer, caps, self.strategy).native


def quantized_form(layer: RecurrentLayer, opset: int, runtime: str, encoding: str) -> str | None:
    """``dynamic`` for an LSTM whose source quantizes X and h at run time (``DynamicQuantizeLSTM``: onnxruntime's
    CPU contrib operator, no layout attribute), ``qdq`` for weights ``DequantizeLinear`` holds at ``opset``
    (``onnx.qdq.writable``), None where ONNX written for ``runtime`` keeps float weights (DirectML's provider, a
    per-block record, an opset before 13)."""
    records = [r for p in layer.directions for r in (p.Wq, p.Rq) if r is not None]
    if not records or runtime != "onnxruntime":
        return None
    if any(r.dynamic_activations for r in records):
        if any(r.dynamic_activations != ORT_DYNAMIC for r in records):  # another runtime's arithmetic (LiteRT's)
            return None
        keeps_layout = layer.interface.layout == 0 or encoding == "transpose"
        return "dynamic" if layer.cell.spec.onnx_op == "LSTM" and keeps_layout else None
    if not onnx_qdq.writable(records, opset):
        return None
    return "qdq_contrib" if onnx_qdq.uses_contrib(records, opset) else "qdq"


def layer_nodes(
    layer: RecurrentLayer,
    form: WriteForm,
    names: "NameBook",
    inits: list,
    inputs: Mapping[str, str | None],
    outputs: Mapping[str, str | None],
    *,
    node_name: str | None = None,
    weight_names: dict[str, str] | None = None,
    in_node_layout: set[str] | frozenset[str] = frozenset(),
    described: list[dict] | None = None,
) -> list[onnx.NodeProto]:
    """The nodes computing ``layer`` from the tensors ``inputs`` names per interface role (x,
    sequence_lens, initial_h, initial_c; in the layer's layout) into those ``outputs`` names (y, y_h,
    y_c): one GRU/RNN/LSTM node with every attribute explicit (or, where ``form``'s runtime would compute
    that node otherwise, ``onnx.elementary``'s operators), inside Transposes for a batch-major layer
    under the ``transpose`` encoding. Its weights are appended to ``inits``, named ``weight_names`` (W, R,
    B, P) where those are free, else after the layer; the node is named ``node_name`` (default: the layer's
    name); the roles ``in_node_layout`` names are already in the node's own layout (constants written for
    it), never transposed. A layer written as elementary operators is described in ``described`` when given
    (``onnx.described``)."""
    wrap = layer.interface.layout == 1 and form.encoding == "transpose"
    nodes, node_in = _node_inputs(layer, names, inputs, in_node_layout, wrap)
    after, node_out = _node_outputs(layer, names, outputs, wrap)
    if form.elementary(layer):
        weights: dict[str, str] = {}
        prefix = f"{layer.name.replace('/', '.')}."

        def constant(name: str, value: np.ndarray) -> str:
            fresh = names.fresh(name)
            inits.append(Stacked(fresh, list(value)))
            weights[name.removeprefix(prefix)] = fresh
            return fresh

        nodes += onnx_elementary.elementary_nodes(layer, names.fresh, constant, node_in, node_out, form.opset)
        if described is not None:
            described.append(onnx_described.entry(layer, weights))
    else:
        nodes += _recurrent_node(layer, form, names, inits, node_in, node_out, node_name, weight_names or {})
    return nodes + after


def _node_inputs(
    layer: RecurrentLayer,
    names: "NameBook",
    inputs: Mapping[str, str | None],
    in_node_layout: set[str] | frozenset[str],
    wrap: bool,
) -> tuple[list[onnx.NodeProto], dict[str, str | None]]:
    """The tensors the layer's node reads per input role (None: not given), and the nodes making them: when
    ``wrap``ped (a batch-major layer, ``transpose`` encoding), X [N,S,I] -> [S,N,I] and each initial state
    [N,D,H] -> [D,N,H] not already in the node's layout (``in_node_layout``) go through a Transpose."""
    nodes: list[onnx.NodeProto] = []

    def transposed(name: str, suffix: str) -> str:
        out = names.fresh(f"{name}__{suffix}")
        nodes.append(
            helper.make_node("Transpose", [name], [out], perm=PERM_IN, name=names.fresh(f"{layer.name}/{suffix}"))
        )
        return out

    node_in = {role: inputs.get(role) or None for role in INPUT_ROLES}
    if wrap:
        node_in["x"] = transposed(_named(inputs, "x"), "seq_major")
        for role in ("initial_h", "initial_c"):
            if (given := node_in[role]) and role not in in_node_layout:
                node_in[role] = transposed(given, f"{role}_dir_major")
    return nodes, node_in


def _node_outputs(
    layer: RecurrentLayer, names: "NameBook", outputs: Mapping[str, str | None], wrap: bool
) -> tuple[list[onnx.NodeProto], dict[str, str | None]]:
    """The tensors the layer's node writes per output role (None: not asked), and the nodes after it: when
    ``wrap``ped, the node writes Y [S,D,N,H], Y_h and Y_c [D,N,H] into fresh tensors that Transposes turn into
    the asked batch-major Y [N,S,D,H], Y_h and Y_c [N,D,H]."""
    after: list[onnx.NodeProto] = []
    node_out: dict[str, str | None] = {}
    for key, perm in (("y", PERM_Y), ("y_h", PERM_YH), ("y_c", PERM_YH)):
        final = outputs.get(key)
        node_out[key] = final
        if final is not None and wrap:
            node_out[key] = inner = names.fresh(f"{final}__seq_major")
            after.append(
                helper.make_node(
                    "Transpose",
                    [inner],
                    [final],
                    perm=perm,
                    name=names.fresh(f"{layer.name}/{key}_batch_major"),
                )
            )
    return after, node_out


def _named(tensors: Mapping[str, str | None], role: str) -> str:
    """The name of a tensor every layer has (X)."""
    name = tensors[role]
    assert name, f"no {role} tensor named"
    return name


def _recurrent_node(
    layer: RecurrentLayer,
    form: WriteForm,
    names: "NameBook",
    inits: list,
    node_in: dict[str, str | None],
    node_out: dict[str, str | None],
    node_name: str | None,
    preferred: dict[str, str],
) -> list[onnx.NodeProto]:
    """The layer's own GRU/RNN/LSTM node on the tensors ``node_in``/``node_out`` name (already in its layout),
    after the nodes dequantizing its weights (QDQ), or onnxruntime's DynamicQuantizeLSTM (``form.quantized_form``)."""
    weight_prefix = layer.name.replace("/", ".")
    quantized = form.quantized_form(layer)
    prelude: list[onnx.NodeProto] = []

    def constant(name: str, value: np.ndarray) -> str:
        fresh = names.fresh(name)
        inits.append(Plain(fresh, value))
        return fresh

    def weight(role: str, parts: Callable[[DirectionParams], np.ndarray | None]) -> str:
        """The initializer of ``role``: its QDQ integers when held, else the floats ``parts`` takes from each
        direction (W and R read only then: weights quantized as asked have no float array until read)."""
        name = names.fresh(preferred.get(role, f"{weight_prefix}.{role}"))
        records = [p.quantized(role) for p in layer.directions]
        if quantized in ("qdq", "qdq_contrib") and all(r is not None for r in records):
            found = onnx_qdq.dequantize_nodes(name, records, names.fresh, constant, opset=form.opset)  # type: ignore[arg-type]
            prelude.extend(found)
        else:
            inits.append(Stacked(name, [a for a in map(parts, layer.directions) if a is not None]))
        return name

    # X W R B sequence_lens initial_h initial_c P, as the ONNX operators number their inputs
    node_inputs = [_named(node_in, "x"), "", "", "", node_in["sequence_lens"] or "", "", "", ""]
    if quantized != "dynamic":
        node_inputs[1:3] = [weight("W", lambda p: p.W), weight("R", lambda p: p.R)]
    if layer.has_bias or any(p.Wb.any() or p.Rb.any() for p in layer.directions):
        node_inputs[3] = weight("B", lambda p: np.concatenate([p.Wb, p.Rb]))
    node_inputs[5], node_inputs[6] = node_in["initial_h"] or "", node_in["initial_c"] or ""
    if layer.has_peepholes:
        node_inputs[7] = weight("P", lambda p: p.P)  # every direction's
    attrs = recurrent_attributes(layer)
    if layer.interface.layout == 1 and form.encoding == "attribute":
        attrs["layout"] = 1
    name = names.fresh(layer.name) if node_name is None else node_name
    node_outputs = [node_out.get(key) or "" for key in ("y", "y_h", "y_c")]
    while node_outputs and not node_outputs[-1]:
        node_outputs.pop()
    if quantized == "dynamic":
        prefix = {role: preferred.get(role, f"{weight_prefix}.{role}") for role in ("W", "R")}
        return [onnx_quantized.dynamic_lstm_node(layer, node_inputs, node_outputs, name, attrs, prefix, constant)]
    while node_inputs and not node_inputs[-1]:
        node_inputs.pop()
    return [*prelude, helper.make_node(layer.cell.op_name, node_inputs, node_outputs, name=name, **attrs)]


@dataclass
class Plain:
    """An initializer written as it is (integers, scales, zero points): with external data, one of at least
    ``EXTERNAL_MINIMUM`` bytes is streamed there like the float weights (a quantized weight's integers are a
    quarter of its floats, still too large for the protobuf), a smaller one embedded."""

    name: str
    value: np.ndarray

    def embedded(self) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(self.value), self.name)

    def external(self, data, location: str) -> onnx.TensorProto:
        value = np.asarray(self.value)
        if value.nbytes < EXTERNAL_MINIMUM or not value.ndim:
            return self.embedded()
        if helper.np_dtype_to_tensor_dtype(value.dtype) not in FOUR_BIT_TYPES:
            return streamed(self.name, [value], list(value.shape), data, location)
        tensor = self.embedded()  # 4-bit integers packed two a byte, as onnx stores them
        offset = data.tell()
        data.write(tensor.raw_data)
        tensor.ClearField("raw_data")
        return located(tensor, offset, data, location)


def recurrent_attributes(layer: RecurrentLayer) -> dict:
    """Every semantic attribute, explicit (never left to a runtime default)."""
    activations = [a for p in layer.directions for a in p.activations]
    attrs: dict = {
        "hidden_size": layer.hidden_size,
        "direction": layer.direction.value,
        "activations": [a.name for a in activations],
    }
    alphas = [a.alpha for a in activations if a.kind.takes_alpha]
    betas = [a.beta for a in activations if a.kind.takes_beta]
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    if layer.clip is not None:
        attrs["clip"] = layer.clip
    if layer.cell.spec.reset_placement:
        attrs["linear_before_reset"] = int(layer.linear_before_reset)
    if layer.cell.spec.input_forget:
        attrs["input_forget"] = int(layer.input_forget)
    return attrs

"""A whole ONNX model rewritten in place: each recurrent node (or lifted region) replaced by the nodes
``onnx.writer`` emits for its canonical layer, the dead constants dropped, external data relocated or
embedded. Written by the ONNX format and imported by the OpenVINO and Core ML whole-model paths."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

import gatepack.converters.formats.onnx.elementary as onnx_elementary
import gatepack.converters.formats.onnx.model_weights as model_weights
import gatepack.converters.formats.onnx.quantized as onnx_quantized
import gatepack.converters.quantization as quantization
from gatepack.converters.description import held_weight_name
from gatepack.converters.errors import InputError, UsageError
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.onnx.graph import (
    DEFAULT_OPSET,
    FORMAT,
    ONNX_DOMAINS,
    all_graphs,
    external_file,
    isolated_record,
    load_proto,
    walk_nodes,
)
from gatepack.converters.formats.onnx.lifting import Region, Replacement, node_inputs, replace_in_place
from gatepack.converters.formats.onnx.writer import (
    EXTERNAL_MINIMUM,
    FOUR_BIT_IR_VERSION,
    FOUR_BIT_TYPES,
    NameBook,
    Stacked,
    WriteForm,
    layer_nodes,
    located,
    recurrent_attributes,
)
from gatepack.converters.model import Model
from gatepack.converters.registry import keeps_whole
from gatepack.converters.weight_quantization import SCOPE_KEY
from gatepack.schemas.cells import cell_of_op
from gatepack.schemas.layer import INPUT_ROLES, OUTPUT_ROLES, RecurrentLayer, stack_directions, state_roles


def lifted_layers(model: Model) -> list[RecurrentLayer]:
    """The layers of an ONNX model lifted from Loops or unrolled cells."""
    return [
        lay for lay in model.layers if lay.provenance and lay.provenance.of(FORMAT) and lay.provenance.kind == "lifted"
    ]


def is_whole_model(model: Model) -> bool:
    """An ONNX model with operators around its recurrent layers: ONNX -> ONNX rewrites its layers in
    place and keeps everything else (unless the user asked for the layers alone; ``registry.keeps_whole``)."""
    return keeps_whole(model, FORMAT)


def in_place(
    model: Model,
    *,
    layout_encoding: str = "transpose",
    external: tuple | None = None,
    runtime: str = "onnxruntime",
    quantized: bool = False,
) -> onnx.ModelProto:
    """The source model, whole, with each recurrent layer rewritten where it is.

    A GRU/RNN node (with the Transposes gatepack absorbed around it) becomes ``layer_nodes``: every
    attribute explicit, the layout per ``layout_encoding``, the weights as new initializers of its own
    (sub)graph, reading and producing the same tensor names. A lifted Loop or unrolled chain becomes one
    node (``onnx.lifting.replace_in_place``). Every other node, initializer, input, output, name and the
    model's metadata stay as they were; weights and the constant nodes that computed them are removed
    when nothing else reads them. The model keeps its opset.

    ``external`` = (binary file, location): every tensor is written there, the new weights streamed
    from the layers' arrays and the source's external tensors copied in chunks; without it, the
    source's external tensors are embedded. ``runtime``: as ``write``'s. ``quantized``: a layer's quantized
    weights written as integers where ONNX holds them (``WriteForm.quantized_form``; the ONNX writer's), else as
    floats (what OpenVINO's and Core ML's readings of the model take). With ``--quantize-weights-scope model``
    (``meta[SCOPE_KEY]``) the other weights are quantized too (``model_weights``): as QDQ, or as their float view
    when the user asked for float weights (``quantization.ASKED``: the accuracy gate's twin)."""
    assert model.path is not None  # a whole model is rewritten from the file it was read from
    proto = load_proto(Path(model.path))
    opset = next((o.version for o in proto.opset_import if o.domain in ONNX_DOMAINS), DEFAULT_OPSET)
    if layout_encoding == "attribute" and opset < 14 and any(lay.interface.layout == 1 for lay in model.layers):
        raise UsageError(
            f"{model.path}: the layout attribute needs opset 14 or later; the whole model keeps its opset {opset}",
            hint="use the transpose layout encoding",
        )
    names = NameBook()
    names.used = _all_names(proto)
    located = {name: graph for _, graph, _, name in walk_nodes(proto.graph)}
    reads = _read_counts(proto)
    lifted, written = [], set()
    form = WriteForm(layout_encoding, runtime, opset, quantized)
    for layer in model.layers:
        provenance = layer.provenance
        assert provenance is not None  # every layer was read from the model
        if provenance.kind == "lifted":
            lifted.append(_lifted_replacement(layer, opset))
        else:
            written |= _rewrite_node(located[provenance.node], layer, form, names, reads, external)
    if lifted:
        replace_in_place(proto, lifted)
        written |= _lifted_with_integers(proto, model, form, external)
    scheme = model.meta.get(SCOPE_KEY)  # --quantize-weights-scope model: the other weights too
    if scheme is not None:
        as_floats = bool(model.meta.get(quantization.ASKED))
        added = model_weights.quantize_in_place(proto, scheme, as_floats, Path(model.path).parent)
        written |= _external(proto.graph, added, external) if external else set()
    new_nodes = (node for node, *_ in walk_nodes(proto.graph)) if quantized or scheme is not None else ()
    proto.opset_import.extend(onnx_quantized.contrib_opsets(new_nodes, proto.opset_import))
    graphs = [proto.graph, *(graph for _, graph, *_ in walk_nodes(proto.graph))]
    if any(t.data_type in FOUR_BIT_TYPES for graph in graphs for t in graph.initializer):
        proto.ir_version = max(proto.ir_version, FOUR_BIT_IR_VERSION)  # INT4/UINT4 initializers
    _relocate_external_data(proto, Path(model.path).parent, external, written)
    return proto


def _external(graph: onnx.GraphProto, names: list[str], external: tuple) -> set[str]:
    """The initializers ``names`` of ``graph`` (embedded, each of ``EXTERNAL_MINIMUM`` bytes or more) moved into the
    external data file (``external``: file, location), as the writer places them; returns the names moved."""
    data, location = external
    moved = set()
    for tensor in (t for t in graph.initializer if t.name in names and len(t.raw_data) >= EXTERNAL_MINIMUM):
        offset = data.tell()
        data.write(tensor.raw_data)
        tensor.ClearField("raw_data")
        located(tensor, offset, data, location)
        moved.add(tensor.name)
    return moved


def embed_external_data(proto: onnx.ModelProto, source_dir: Path) -> None:
    """Embed (in place) ``proto``'s external tensors, each read from a regular file inside ``source_dir``."""
    _relocate_external_data(proto, source_dir, None, set())


def _relocate_external_data(
    proto: onnx.ModelProto, source_dir: Path, external: tuple | None, written: set[str]
) -> None:
    """The source's external tensors that remain, copied into the new data file (``external``) in
    chunks, or embedded; each read from a regular file inside the source model's directory
    (``written``: the new weights, already in the new file)."""
    for tensor in (t for graph in all_graphs(proto) for t in graph.initializer):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if tensor.name in written:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        file = external_file(tensor, source_dir)
        offset, length = int(info.get("offset", 0)), int(info.get("length", file.stat().st_size))
        with open(file, "rb") as source:
            source.seek(offset)
            if external is None:
                raw = source.read(length)
                if len(raw) != length:
                    raise InputError(f"{file}: tensor {tensor.name!r} needs {length} bytes at offset {offset}")
                del tensor.external_data[:]
                tensor.data_location = onnx.TensorProto.DEFAULT
                tensor.raw_data = raw
                continue
            data, location = external
            start = data.tell()
            remaining = length
            while remaining:
                chunk = source.read(min(remaining, 1 << 24))
                if not chunk:
                    raise InputError(f"{file}: tensor {tensor.name!r} needs {length} bytes at offset {offset}")
                data.write(chunk)
                remaining -= len(chunk)
            data.write(b"\0" * (-data.tell() % 64))
        del tensor.external_data[:]
        for key, value in (("location", location), ("offset", str(start)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)


def _all_names(proto: onnx.ModelProto) -> set[str]:
    """Every tensor and node name of the model, subgraphs included (new names avoid them all)."""
    used: set[str] = set()
    for graph in all_graphs(proto):
        used |= {t.name for t in graph.initializer} | {i.name for i in graph.input} | {o.name for o in graph.output}
        used |= {v.name for v in graph.value_info}
        for node in graph.node:
            used |= set(node.output) | set(node.input) | {node.name}
    return used


def _read_counts(proto: onnx.ModelProto) -> Counter:
    """How many times each tensor name is read in the model: node inputs and graph outputs, subgraphs included."""
    reads: Counter = Counter()
    for graph in all_graphs(proto):
        reads.update(o.name for o in graph.output)
        for node in graph.node:
            reads.update(i for i in node.input if i)
    return reads


def _rewrite_node(
    graph: onnx.GraphProto,
    layer: RecurrentLayer,
    form: "WriteForm",
    names: NameBook,
    reads: Counter,
    external: tuple | None = None,
) -> set[str]:
    """Replace ``layer``'s node (and the Transposes the reader absorbed into it) in ``graph`` by
    ``layer_nodes`` at the node's place, under the node's own name; its weights keep their names
    when nothing else read them (they are replaced). ``reads``: the model's read counts, kept up to
    date. Return the new weights' names."""
    original = {tuple(n.output) for n in isolated_record(layer).nodes}
    position = next(
        k
        for k, n in enumerate(graph.node)
        if tuple(n.output) in original and (cell_of_op(n.op_type) or onnx_quantized.is_quantized_lstm(n))
    )
    node = graph.node[position]
    gone = [n for n in graph.node if tuple(n.output) in original]
    kept = [n for n in graph.node if tuple(n.output) not in original]
    earlier = {tuple(n.output) for n in graph.node[:position] if tuple(n.output) not in original}
    del graph.node[:]
    graph.node.extend(kept)
    itf = layer.interface
    interface_inputs = [n for n in (getattr(itf, role) for role in INPUT_ROLES) if n]  # the new nodes read these
    reads.update(interface_inputs)
    freed = _drop_dead_constants(graph, gone, reads)
    # the new nodes go where the node was: after the nodes that came before it and are still there (the
    # weights' constant cones among them may just have been dropped)
    before = sum(1 for n in graph.node if tuple(n.output) in earlier)
    names.used -= freed | {node.name}
    inputs = list(node.input) + [""] * 8
    weights = ((1, "W"), (2, "R"), (3, "B"), (7, "P"))
    weight_names = {role: inputs[k] for k, role in weights if inputs[k] in freed}
    inits: list[Stacked] = []
    new = layer_nodes(
        layer,
        form,
        names,
        inits,
        {role: getattr(itf, role) for role in INPUT_ROLES},
        {role: getattr(itf, role) for role in OUTPUT_ROLES},
        node_name=names.fresh(node.name) if node.name else "",
        weight_names=weight_names,
    )
    for k, new_node in enumerate(new):
        graph.node.insert(before + k, new_node)
    graph.initializer.extend(t.external(*external) if external else t.embedded() for t in inits)
    return {t.name for t in inits}


def _drop_dead_constants(graph: onnx.GraphProto, gone: list[onnx.NodeProto], reads: Counter) -> set[str]:
    """Remove from ``graph`` the initializers and constant-computing nodes that only the removed
    nodes ``gone`` read (W, R, B and their cones), and the value_info of tensors no longer there;
    ``reads`` (the model's read counts, the removed nodes' reads included) is brought up to date.
    Return the names no longer in use."""
    for node in gone:
        reads.subtract(i for i in node.input if i)
    producers = {out: node for node in graph.node for out in node.output if out}
    initializers = {t.name: t for t in graph.initializer}
    pending = [i for node in gone for i in node.input if i]
    dead_nodes: list[onnx.NodeProto] = []
    while pending:
        name = pending.pop()
        if reads[name] > 0:
            continue
        if name in initializers:
            graph.initializer.remove(initializers.pop(name))
            for declared in [i for i in graph.input if i.name == name]:  # IR 3 declares initializers as inputs
                graph.input.remove(declared)
        producer = producers.get(name)
        if producer is not None and all(reads[o] == 0 for o in producer.output if o) and producer not in dead_nodes:
            if not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in producer.attribute):
                dead_nodes.append(producer)
                for i in producer.input:
                    if i:
                        reads[i] -= 1
                        pending.append(i)
    for node in dead_nodes:
        graph.node.remove(node)
    present = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    present |= {t.name for t in graph.initializer} | {o.name for o in graph.output}
    for info in [v for v in graph.value_info if v.name not in present]:
        graph.value_info.remove(info)
    every = {n for node in gone + dead_nodes for n in [*node.input, *node.output, node.name]}
    return {n for n in every if n and n not in present and reads[n] <= 0}


def _lifted_with_integers(proto: onnx.ModelProto, model: Model, form: "WriteForm", external: tuple | None) -> set[str]:
    """Each lifted layer whose quantized weights ``form`` writes as integers, its node rewritten as a node layer's
    is (``_rewrite_node``: QDQ or ``DynamicQuantizeLSTM``): ``replace_in_place`` writes a lifted region as a node
    of float weights, which is read again here (named after the layer) and given the layer's records (a masked
    layer, written as a Loop of elementary operators, keeps float weights). Returns the new weights' names."""
    from gatepack.converters.formats.onnx.reader import reread

    held = [lay for lay in model.layers if _is_lifted(lay) and not lay.interface.mask and form.quantized_form(lay)]
    if not held:
        return set()
    assert model.path is not None  # (a whole model read from its file)
    again = {lay.name: lay for lay in reread(model.path, proto).layers}
    names, reads, written = NameBook(), _read_counts(proto), set()
    names.used = _all_names(proto)
    for layer in held:
        node = again[layer.name]
        records = replace(node, directions=layer.directions)
        written |= _rewrite_node(proto.graph, records, form, names, reads, external)
    return written


def _is_lifted(layer: RecurrentLayer) -> bool:
    return layer.provenance is not None and layer.provenance.kind == "lifted"


def _lifted_replacement(layer: RecurrentLayer, opset: int) -> tuple[Region, Replacement]:
    """What replaces a lifted layer's loop or unrolled steps (``replace_in_place``): its GRU/RNN/LSTM node, or for
    a layer with a per-step hold (which no such node has) ``onnx.elementary``'s Loop reading the source's mask."""
    region = isolated_record(layer).region
    assert region is not None  # (a lifted layer's)
    return region, _replacement(layer, region, opset)


def _replacement(layer: RecurrentLayer, region: Region, opset: int) -> Replacement:
    x0, w = node_inputs(region)

    def stack(key: str) -> np.ndarray:
        return stack_directions([getattr(p, key) for p in layer.directions])

    outputs = [f"{layer.name}:Y0", f"{layer.name}:Y_h0", f"{layer.name}:Y_c0"][: len(state_roles(layer.cell)) + 1]
    inputs = [x0, w, f"{layer.name}:R", "", region.sequence_lens or "", region.initial_h or "", region.initial_c or ""]
    if layer.interface.mask:
        return _held_replacement(layer, opset, inputs, outputs)
    weights = {w: stack("W"), f"{layer.name}:R": stack("R")}
    if layer.has_bias:
        weights[f"{layer.name}:B"] = np.concatenate([stack("Wb"), stack("Rb")], axis=1)
        inputs[3] = f"{layer.name}:B"
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node(layer.cell.onnx_op, inputs, outputs, name=layer.name, **recurrent_attributes(layer))
    return Replacement([node], weights, inputs, outputs)


def _held_replacement(layer: RecurrentLayer, opset: int, inputs: list[str], outputs: list[str]) -> Replacement:
    """A masked lifted layer as ``onnx.elementary``'s Loop (sequence-major, reading the source's own mask)."""
    weights: dict[str, np.ndarray] = {}
    counter = iter(range(1 << 30))
    base = layer.name.replace("/", ".")

    def fresh(name: str) -> str:
        return f"{layer.name}:held/{name}/{next(counter)}"

    def weight(name: str, value: np.ndarray) -> str:  # "<base>.d0.WT" -> "<layer>/held.d0.WT" (held_weight_name)
        key = held_weight_name(layer.name, name[len(base) + 1 :])
        weights[key] = np.asarray(value, layer.dtype)
        return key

    roles = {"x": inputs[0], "sequence_lens": None, "initial_h": inputs[5] or None, "initial_c": inputs[6] or None}
    named: dict[str, str | None] = dict(zip(OUTPUT_ROLES, outputs))
    nodes = onnx_elementary.elementary_nodes(
        layer, fresh, weight, {**roles, "mask": layer.interface.mask}, named, opset
    )
    return Replacement(nodes, weights, inputs, outputs)


def whole_model_finding(model: Model) -> Finding | None:
    """The report's ``model`` finding when ONNX -> ONNX keeps the whole model (None: layers only)."""
    if not is_whole_model(model):
        return None
    lifted = " (a lifted loop or unrolled chain becomes one node; the tensors the model reads from it are "
    lifted += "recomputed from its outputs)" if lifted_layers(model) else ""
    return Finding(
        "model",
        Status.EXACT,
        f"whole model in one artifact, opset {model.meta.get('opset')} kept: each recurrent layer is rewritten in "
        f"place{lifted if lifted_layers(model) else ''}; the model's {model.other_ops_text()} are kept as they are, "
        "with its inputs, outputs, names and metadata",
    )

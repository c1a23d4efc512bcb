"""ONNX models as protobuf: loading, external data, the walk of every (sub)graph (with each node's ``Scope``:
the names it sees), static shapes, and the handle that runs a layer's original nodes alone (``Isolated``).

Shared by the reader, the writer, the in-place rewrite and running (each in its own module), and by the
readers of other producers' ONNX (``onnx.quantized``); it imports none of them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import onnx
from onnx import helper

from gatepack.converters.errors import InputError
from gatepack.converters.fileio import contained_file, read_bytes
from gatepack.schemas.layer import PERM_SWAP_01, PERM_Y_TO_BATCH_MAJOR, RecurrentLayer

if TYPE_CHECKING:
    from gatepack.converters.formats.onnx.lifting import Region

FORMAT = "onnx"
DEFAULT_OPSET = 14
ONNX_DOMAINS = ("", "ai.onnx")

# Transposes between a batch-major interface and a layout-0 node.
PERM_IN = list(PERM_SWAP_01)  # X, initial_h: batch-major -> sequence-major
PERM_Y = list(PERM_Y_TO_BATCH_MAJOR)
PERM_YH = list(PERM_SWAP_01)


def load_proto(path: Path) -> onnx.ModelProto:
    """Load the model structure (external data stays on disk until a tensor is needed)."""
    data = read_bytes(path)
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as err:  # protobuf raises several types for corrupt input
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{path}: not a readable ONNX model ({detail})") from None
    if not proto.opset_import or not proto.HasField("graph"):
        raise InputError(f"{path}: not an ONNX model (no graph or no opset import)")
    return proto


def map_external(tensor: onnx.TensorProto, base_dir: Path) -> np.ndarray | None:
    """A little-endian numeric tensor stored as external data, memory-mapped (no copy:
    pages load as they are used); None where numpy_helper must decode it (other types, big-endian)."""
    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    if dtype.kind not in "fiub" or sys.byteorder != "little":
        return None
    file = external_file(tensor, base_dir)
    info = {e.key: e.value for e in tensor.external_data}
    try:
        offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else None
    except ValueError:
        raise InputError(
            f"{base_dir}: tensor {tensor.name!r}: external data offset/length "
            f"{info.get('offset')!r}/{info.get('length')!r} are not integers"
        ) from None
    count = 1
    for dim in tensor.dims:
        count *= int(dim)
    length = count * dtype.itemsize if length is None else length
    if (
        offset < 0
        or any(dim < 0 for dim in tensor.dims)
        or length != count * dtype.itemsize
        or offset + length > file.stat().st_size
    ):
        raise InputError(
            f"{file}: tensor {tensor.name!r} needs {count * dtype.itemsize} bytes at offset {offset}; the file has "
            f"{file.stat().st_size} (length {length})"
        )
    if count == 0:
        return np.zeros(tuple(tensor.dims), dtype)
    return np.memmap(
        file, dtype=dtype, mode="c", offset=offset, shape=tuple(tensor.dims)
    )  # copy-on-write: never writes the file


def external_file(tensor: onnx.TensorProto, base_dir: Path) -> Path:
    """The file holding a tensor's external data: a regular file inside the model's directory."""
    location = next((e.value for e in tensor.external_data if e.key == "location"), "")
    return contained_file(base_dir, location, f"{base_dir}: tensor {tensor.name!r}: external data location")


def check_external_data(proto: onnx.ModelProto, base_dir: Path) -> None:
    """InputError naming the first tensor (an initializer or a Constant node's value, in any graph) whose external
    data is not a regular file inside ``base_dir``: every one is checked when the model is read, not only those
    gatepack reads (a runtime would refuse the others, or read outside the model's folder)."""
    for graph in all_graphs(proto):
        tensors = list(graph.initializer) + [
            a.t for node in graph.node for a in node.attribute if a.type == onnx.AttributeProto.TENSOR
        ]
        for tensor in tensors:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                external_file(tensor, base_dir)


@dataclass
class Isolated:
    """What it takes to run one layer's original node(s) alone on onnxruntime."""

    nodes: list[onnx.NodeProto]
    constants: dict[str, np.ndarray]
    opset: int
    region: Region | None = None  # a lifted layer's
    blank: set[str] = field(default_factory=set)  # node inputs run as absent (a zero state computed from shapes)
    # node input -> the batch-1 state (node layout) it repeats along X's batch: run as that state broadcast
    broadcast: dict[str, np.ndarray] = field(default_factory=dict)


def isolated_record(layer: RecurrentLayer) -> Isolated:
    """The record the ONNX reader (``onnx.reader``) keeps of a layer it read (its ``Provenance.handle``): the
    node(s) the layer stands for, which a whole-model translation of the same file (Core ML) skips too."""
    handle = None if layer.provenance is None else layer.provenance.handle
    assert isinstance(handle, Isolated), f"layer {layer.name!r} was not read by the ONNX reader"
    return handle


def broadcast_state_nodes(
    state: str, state_batch_axis: int, x: str, x_batch_axis: int, out: str
) -> list[onnx.NodeProto]:
    """Nodes computing ``out``: the batch-1 ``state`` ([D, 1, H]; [1, D, H] with ``state_batch_axis`` 0)
    repeated to X's batch, read from axis ``x_batch_axis`` of X's shape: ``Expand(state, [1, N, 1])``."""
    one = helper.make_tensor(f"{out}__one", onnx.TensorProto.INT64, [1], [1])
    axis = helper.make_tensor(f"{out}__axis", onnx.TensorProto.INT64, [1], [x_batch_axis])
    dims = [f"{out}__one"] * 3
    dims[state_batch_axis] = f"{out}__n"
    return [
        helper.make_node("Constant", [], [f"{out}__one"], value=one),
        helper.make_node("Constant", [], [f"{out}__axis"], value=axis),
        helper.make_node("Shape", [x], [f"{out}__x_shape"]),
        helper.make_node("Gather", [f"{out}__x_shape", f"{out}__axis"], [f"{out}__n"], axis=0),
        helper.make_node("Concat", dims, [f"{out}__shape"], axis=0),
        helper.make_node("Expand", [state, f"{out}__shape"], [out]),
    ]


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor ``node`` reads, those its subgraphs (a Loop's body) read from outside included."""
    found = [name for name in node.input if name]
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            found += [name for inner in attribute.g.node for name in node_reads(inner)]
    return found


def cone(nodes: list[onnx.NodeProto], outputs: list[str]) -> list[onnx.NodeProto]:
    """The ``nodes`` that ``outputs`` depend on, in their order."""
    producers = {out: node for node in nodes for out in node.output if out}
    needed: set[int] = set()
    stack = list(outputs)
    while stack:
        node = producers.get(stack.pop())
        if node is not None and id(node) not in needed:
            needed.add(id(node))
            stack += node_reads(node)
    return [node for node in nodes if id(node) in needed]


def copy_node(node: onnx.NodeProto, renamed: dict[str, str]) -> onnx.NodeProto:
    """A copy of ``node`` whose inputs ``renamed`` names are renamed (to "" for an absent optional input)."""
    copied = onnx.NodeProto()
    copied.CopyFrom(node)
    copied.input[:] = [renamed.get(name, name) for name in node.input]
    return copied


def walk_nodes(
    graph: onnx.GraphProto, prefix: str = "", outer: onnx.GraphProto | None = None
) -> Iterator[tuple[onnx.NodeProto, onnx.GraphProto, onnx.GraphProto | None, str]]:
    """Every node of ``graph`` and of its subgraphs, depth first: (node, its graph, that graph's
    enclosing graph, a unique name: the node's name, or ``OpType_index``, under its subgraph path such
    as ``If_3/then_branch/``). Layers are named so; the in-place writer finds their nodes again so."""
    used: set[str] = set()
    for index, node in enumerate(graph.node):
        name = prefix + (node.name or f"{node.op_type}_{index}")
        while name in used:
            name += "_"
        used.add(name)
        yield node, graph, outer, name
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(attr.g, f"{name}/{attr.name}/", graph)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for k, sub in enumerate(attr.graphs):
                    yield from walk_nodes(sub, f"{name}/{attr.name}[{k}]/", graph)


class Scope:
    """Names visible in one graph: its initializers, inputs, and node outputs; then its parent's."""

    def __init__(self, graph: onnx.GraphProto, parent: "Scope | None", path: str) -> None:
        self.graph = graph
        self.parent = parent
        self.path = path
        self.initializers = {t.name: t for t in graph.initializer}
        self.inputs = {i.name for i in graph.input} - set(self.initializers)
        self.outputs = {o.name for o in graph.output}
        self.producers: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for out in node.output:
                if out:
                    self.producers[out] = node
            for inp in node.input:
                self.consumers.setdefault(inp, []).append(node)

    def lookup(self, name: str) -> tuple[str, onnx.TensorProto | onnx.NodeProto | None, "Scope"] | None:
        """(kind, what, its scope) of the tensor ``name``: ("initializer", TensorProto), ("node", its producer
        NodeProto) or ("input", None); None where no enclosing scope defines it."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.initializers:
                return "initializer", scope.initializers[name], scope
            if name in scope.producers:
                return "node", scope.producers[name], scope
            if name in scope.inputs:
                return "input", None, scope
            scope = scope.parent
        return None


def walk_scopes(graph: onnx.GraphProto) -> Iterator[tuple[onnx.NodeProto, Scope, str]]:
    """``walk_nodes`` with each node's ``Scope`` (its graph's names, then the enclosing graphs'): (node, scope,
    unique name)."""
    scopes: dict[int, Scope] = {}
    for node, owner, outer, name in walk_nodes(graph):
        scope = scopes.get(id(owner))
        if scope is None:
            scope = scopes[id(owner)] = Scope(owner, scopes[id(outer)] if outer is not None else None, name)
        yield node, scope, name


def value_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of every named value, after ONNX shape inference where it succeeds."""
    try:
        inferred = _infer_shapes_light(proto)
    except Exception:
        inferred = proto
    types: dict[str, onnx.TypeProto] = {}

    def visit(graph: onnx.GraphProto) -> None:
        for info in list(graph.input) + list(graph.output) + list(graph.value_info):
            types.setdefault(info.name, info.type)
        for node in graph.node:
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                    visit(sub)

    visit(inferred.graph)
    return types


def _infer_shapes_light(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference without copying the weights: it serialises the model it is given, and reads an
    initializer's type and shape, never its values, so large embedded initializers (an in-place rewrite holds them
    all: 277 MB for the benchmark's stack, 2.7 s) are left out for the call and put back after it. Where inference
    then fails, it runs on the model as it is."""
    large = [t for t in proto.graph.initializer if len(t.raw_data) > 1 << 16]
    values = [t.raw_data for t in large]
    try:
        for tensor in large:
            tensor.ClearField("raw_data")
        return onnx.shape_inference.infer_shapes(proto)
    except Exception:
        pass
    finally:
        for tensor, value in zip(large, values):
            tensor.raw_data = value
    return onnx.shape_inference.infer_shapes(proto)


def type_dims(tensor_type: onnx.TypeProto | None) -> list | None:
    if tensor_type is None or not tensor_type.HasField("tensor_type") or not tensor_type.tensor_type.HasField("shape"):
        return None
    out: list = []
    for dim in tensor_type.tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            out.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            out.append(dim.dim_param)
        else:
            out.append(None)
    return out


def all_graphs(proto: onnx.ModelProto) -> list[onnx.GraphProto]:
    """The main graph and every subgraph (If branches, Loop and Scan bodies), depth first."""
    return [proto.graph] + [
        sub
        for node, _, _, _ in walk_nodes(proto.graph)
        for a in node.attribute
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
    ]

"""ONNX: read every GRU, RNN and LSTM node of any model; write single-purpose layer models; run on onnxruntime.

ONNX is the canonical convention (see ``schemas.layer``), so reading is unpacking, not rearranging:

* ``W`` [D, G*H, I] and ``R`` [D, G*H, H], gate blocks z, r, h (GRU) or one block (RNN);
* ``B`` [D, 2*G*H] = [Wb_zrh, Rb_zrh] per direction (absent: zeros);
* layout 0: X [S,N,I], initial_h/Y_h [D,N,H], Y [S,D,N,H]; layout 1: X [N,S,I], initial_h/Y_h [N,D,H],
  Y [N,S,D,H]. onnxruntime rejects ``layout = 1`` and OpenVINO's importer ignores it, so gatepack
  writes a batch-major interface as Transpose nodes around a layout-0 node by default, and reads
  that pattern (from any exporter) back as one layout-1 layer.

Supported operator versions: GRU 1, 3, 7, 14, 22, RNN 1, 7, 14, 22 and LSTM 1, 7, 14, 22. Weights may be
initializers (embedded or external data), ``Constant`` nodes, or cones of operators over constants
(folded with ``onnx.reference``), and nodes may sit inside ``If``/``Loop``/``Scan`` subgraphs, where
they are named by their path (``If_0/then_branch/GRU_3``).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.description import constant_from_layout, constant_in_layout
from gatepack.converters.errors import (
    GatepackError,
    InputError,
    NoRecurrentLayerError,
    RefusedError,
    RuntimeFailure,
    UsageError,
    where,
)
from gatepack.converters.fileio import atomic_files, contained_file, read_bytes
from gatepack.converters.findings import Finding, Status, operator_list
from gatepack.converters.formats import directml as directml_ep
from gatepack.converters.formats import onnx_elementary, onnx_quantized
from gatepack.converters.formats.onnx_lifting import Region, node_inputs, perm_of, replace_in_place
from gatepack.converters.lifting import LiftRefused, Recurrence, candidates_from_constants, lift
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import FormatImplementation, runtime_name
from gatepack.schemas.activations import KINDS, DefaultsPolicy, canonical_name, resolve_activations
from gatepack.schemas.cells import cell_of_op
from gatepack.schemas.layer import (
    CONSTANT_ROLES,
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    PERM_Y_TO_BATCH_MAJOR,
    ROLE_LABELS,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    dim_text,
    stack_directions,
    state_roles,
)

FORMAT = "onnx"
DEFAULT_OPSET = 14
WRITABLE_OPSETS = (7, 14)
_NONDETERMINISTIC = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}
_ONNX_DOMAINS = ("", "ai.onnx")
_A = onnx.AttributeProto
# The type every attribute of GRU/RNN must have (the operator schemas); any other type is malformed
# (onnxruntime rejects the graph), never reinterpreted.
_ATTRIBUTE_TYPES = {
    "hidden_size": _A.INT,
    "direction": _A.STRING,
    "activations": _A.STRINGS,
    "activation_alpha": _A.FLOATS,
    "activation_beta": _A.FLOATS,
    "clip": _A.FLOAT,
    "linear_before_reset": _A.INT,
    "input_forget": _A.INT,
    "layout": _A.INT,
    "output_sequence": _A.INT,
}

# Transposes between a batch-major interface and a layout-0 node.
_PERM_IN = list(PERM_SWAP_01)  # X, initial_h: batch-major -> sequence-major
_PERM_Y = list(PERM_Y_TO_BATCH_MAJOR)
_PERM_YH = list(PERM_SWAP_01)


# ----------------------------------------------------------------------------------------- reading


def read(path: str | Path, *, defaults: DefaultsPolicy = DefaultsPolicy.ONNXRUNTIME) -> Model:
    """Read every GRU, RNN and LSTM node of the ONNX model at ``path`` into canonical layers."""
    path = Path(path)
    proto = load_proto(path)
    return _Reader(path, proto, DefaultsPolicy(defaults)).read()


def reread(path: str | Path, proto: onnx.ModelProto) -> Model:
    """Read the layers of ``proto``, a rewrite of the model at ``path`` held in memory (e.g. ``in_place``'s): the
    layers' handles hold ``proto``'s own nodes."""
    return _Reader(Path(path), proto, DefaultsPolicy.ONNXRUNTIME).read()


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


def _map_external(tensor: onnx.TensorProto, base_dir: Path) -> np.ndarray | None:
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


class _Scope:
    """Names visible in one graph: its initializers, inputs, and node outputs; then its parent's."""

    def __init__(self, graph: onnx.GraphProto, parent: "_Scope | None", path: str) -> None:
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

    def lookup(self, name: str) -> tuple[str, onnx.TensorProto | onnx.NodeProto | None, "_Scope"] | None:
        """(kind, what, its scope) of the tensor ``name``: ("initializer", TensorProto), ("node", its producer
        NodeProto) or ("input", None); None where no enclosing scope defines it."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.initializers:
                return "initializer", scope.initializers[name], scope
            if name in scope.producers:
                return "node", scope.producers[name], scope
            if name in scope.inputs:
                return "input", None, scope
            scope = scope.parent
        return None


@dataclass
class _Isolated:
    """What it takes to run one layer's original node(s) alone on onnxruntime."""

    nodes: list[onnx.NodeProto]
    constants: dict[str, np.ndarray]
    opset: int
    region: Region | None = None  # a lifted layer's
    blank: set[str] = field(default_factory=set)  # node inputs run as absent (a zero state computed from shapes)
    # node input -> the batch-1 state (node layout) it repeats along X's batch: run as that state broadcast
    broadcast: dict[str, np.ndarray] = field(default_factory=dict)


def isolated_record(layer: RecurrentLayer) -> _Isolated:
    """The record this module's reader keeps of a layer it read (its ``Provenance.handle``): the node(s) the
    layer stands for, which a whole-model translation of the same file (Core ML) skips too."""
    handle = None if layer.provenance is None else layer.provenance.handle
    assert isinstance(handle, _Isolated), f"layer {layer.name!r} was not read by the ONNX reader"
    return handle


class _Reader:
    def __init__(self, path: Path, proto: onnx.ModelProto, policy: DefaultsPolicy) -> None:
        self.path = path
        self.proto = proto
        self.policy = policy
        self.base_dir = str(path.parent)
        opset = next((o.version for o in proto.opset_import if o.domain in _ONNX_DOMAINS), None)
        if opset is None:
            raise InputError(f"{path}: the model imports no ai.onnx opset")
        self.opset = opset
        newest = onnx.defs.onnx_opset_version()
        if not 1 <= self.opset <= newest:
            raise InputError(
                f"{path}: ai.onnx opset {self.opset} is outside 1..{newest}, the opsets this onnx package defines"
            )
        self.types = _value_types(proto)
        self.layers: list[RecurrentLayer] = []
        self.notes: dict[str, list[Finding]] = {}
        self.skipped: list[tuple[str, str]] = []
        self.op_types: set[str] = set()
        self.external_data = False

    def read(self) -> Model:
        for node, scope, name in self._walk(self.proto.graph, None, ""):
            self.op_types.add(node.op_type)
            if node.domain not in _ONNX_DOMAINS:
                if onnx_quantized.is_quantized_lstm(node):
                    self.layers.append(onnx_quantized.read_quantized_lstm(self, node, scope, name))
                continue
            if cell_of_op(node.op_type) is not None:
                self.layers.append(self._read_node(node, scope, name))
        refused = self._lift()
        if not self.layers:
            if refused:
                raise NoRecurrentLayerError(f"{self.path}: no recurrent (GRU/RNN/LSTM) layer found: {refused[0][1]}")
            raise NoRecurrentLayerError(
                f"{self.path}: no recurrent (GRU/RNN/LSTM) layer found among its {self._census()}{self._why_none()}"
            )
        absorbed = {id(n) for layer in self.layers for n in isolated_record(layer).nodes}
        fed = {getattr(lay.interface, r) for lay in self.layers for r in ("x", *lay.fed_roles())}
        absorbed |= constant_feeders(self.proto.graph, absorbed, fed)
        other = [n.op_type for n in self.proto.graph.node if id(n) not in absorbed]
        meta = {"opset": self.opset, "other_ops": sorted(set(other)), "external_data": self.external_data}
        return Model(self.path, FORMAT, self.layers, self.notes, self.skipped, {**meta, "other_op_count": len(other)})

    def _lift(self) -> list[tuple[str, str]]:
        """Lift the main graph's Loops and unrolled cells into layers (``converters.lifting``), each
        proven on onnxruntime against the original nodes; return (name, reason) for those not lifted."""
        if not (self.op_types & {"Loop"} or (self.op_types & {"MatMul"} and self.op_types & {"Tanh", "Relu"})):
            return []
        from gatepack.converters.formats.onnx_lifting import Finder

        finder = Finder(self.proto, _Scope(self.proto.graph, None, ""), self._tensor, self.opset)
        alternatives, refused = finder.regions()
        for variants in alternatives:
            reasons = []
            for region in variants:
                try:
                    self.layers.append(self._lifted(finder, region))
                    break
                except LiftRefused as err:
                    reasons.append(str(err))
            else:
                refused.append((variants[0].name, reasons[0]))
        if self.layers:  # and what looks recurrent but neither became a layer nor was refused
            claimed = {id(n) for layer in self.layers for n in isolated_record(layer).nodes}
            refused += finder.unlifted(claimed, {name for name, _ in refused})
            self.skipped += refused
        return refused

    def _lifted(self, finder, region) -> RecurrentLayer:
        isolated = _Isolated(region.nodes + region.adapters, region.constants, self.opset, region)
        elem = self.types.get(region.x)
        dtype = helper.tensor_dtype_to_np_dtype(elem.tensor_type.elem_type) if elem is not None else np.float32
        itf = Interface(
            x=region.x,
            y=region.y,
            y_h=region.y_h,
            y_c=region.y_c,
            initial_h=region.initial_h,
            initial_c=region.initial_c,
            sequence_lens=region.sequence_lens,
            layout=region.layout,
            seq_length=region.seq_length,
            batch_size=region.batch_size,
            dtype=np.dtype(dtype).name,
        )
        label = f"{region.found} {region.name!r}"
        rec = Recurrence(
            name=region.name,
            found=f"{self.path}: {label}",
            direction=region.direction,
            interface=itf,
            input_size=region.input_size,
            hidden_size=region.hidden_size,
            candidates=candidates_from_constants(finder.weights(region), region.input_size, region.hidden_size),
            activations=region.activations,
            run_original=lambda feed: _run_isolated(isolated, itf, feed, label),
        )
        lifted = lift(rec)
        self.notes.setdefault(region.name, []).append(
            Finding(
                "lifted",
                Status.REPACKED,
                f"lifted from {region.found}: {lifted.description}; proven against onnxruntime running the original "
                f"nodes on random inputs ({lifted.tried} reading(s) tried). {_exposed_text(region)}",
            )
        )
        return replace(
            lifted.layer,
            provenance=Provenance(
                FORMAT, self.path, region.name, "lifted", region.kind, None, node_inputs(region), 0, isolated
            ),
        )

    def _census(self) -> str:
        """'12 operators of 3 types (Abs, MatMul, Relu)': the main graph's nodes, what a user finds there."""
        nodes = self.proto.graph.node
        kinds = sorted({node.op_type for node in nodes})
        if not nodes:
            return "0 operators (an empty graph)"
        operators = f"{len(nodes)} operator{'s' if len(nodes) != 1 else ''}"
        return f"{operators} of {len(kinds)} type{'s' if len(kinds) != 1 else ''} ({operator_list(kinds)})"

    def _why_none(self) -> str:
        if self.skipped:
            kinds = sorted({reason.split(" ")[0] for _, reason in self.skipped})
            return f" ({len(self.skipped)} {'/'.join(kinds)} node(s) found: {self.skipped[0][1]})"
        foreign = onnx_quantized.foreign_operators(walk_nodes(self.proto.graph), _ONNX_DOMAINS)
        if foreign:
            return foreign
        products = self.op_types & {"MatMul", "Gemm"}
        activations = sorted(self.op_types & {"Sigmoid", "Tanh", "Relu"})
        if not products or not activations:
            return ""
        found = f"{'/'.join(sorted(products))} and {'/'.join(activations)} nodes"
        if self.op_types & {"Loop", "Scan"}:
            return (
                f" (it holds a {'/'.join(sorted(self.op_types & {'Loop', 'Scan'}))} over {found}, but none that "
                "gatepack lifts: a GRU/RNN loop gathers one sequence and carries one state, as tf2onnx writes Keras "
                "layers)"
            )
        return (
            f" (it holds {found} but no chain of MatMuls by one shared weight that gatepack lifts into a GRU/RNN "
            "layer, as torch.onnx's dynamo exporter unrolls nn.RNN; an unrolled LSTM is not lifted)"
        )

    def _walk(self, graph: onnx.GraphProto, parent: _Scope | None, prefix: str) -> Iterator[tuple]:
        scopes: dict[int, _Scope] = {}
        for node, owner, outer, name in walk_nodes(graph, prefix):
            scope = scopes.get(id(owner))
            if scope is None:
                scope = scopes[id(owner)] = _Scope(owner, scopes[id(outer)] if outer is not None else parent, name)
            yield node, scope, name

    # -- constants

    def _tensor(self, tensor: onnx.TensorProto) -> np.ndarray:
        try:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                self.external_data = True
                mapped = _map_external(tensor, Path(self.base_dir))
                if mapped is not None:
                    return mapped
                external_file(tensor, Path(self.base_dir))  # contained and regular before onnx opens it
            return numpy_helper.to_array(tensor, base_dir=self.base_dir)
        except InputError:
            raise
        except Exception as err:
            raise InputError(
                f"{self.path}: tensor {tensor.name!r} cannot be loaded ({str(err).splitlines()[0]})"
            ) from None

    def constant(self, name: str, scope: _Scope, layer: str, role: str) -> np.ndarray:
        """The value of tensor ``name`` if it is a constant (folding any cone of operators)."""
        at = where(self.path, layer)
        found = scope.lookup(name)
        if found is None:
            raise InputError(f"{at}{role} {name!r} is not defined anywhere in the model")
        kind, obj, _ = found
        if isinstance(obj, onnx.TensorProto):  # an initializer
            return self._tensor(obj)
        if kind == "input":
            raise InputError(
                f"{at}{role} {name!r} is a graph input, not a constant",
                hint="gatepack needs constant weights; make them initializers",
            )
        nodes: list[onnx.NodeProto] = []
        inits: dict[str, np.ndarray] = {}
        self._collect_cone(name, scope, nodes, inits, set(), at, role)
        if len(nodes) == 1 and nodes[0].op_type == "Constant" and [a.name for a in nodes[0].attribute] == ["value"]:
            return self._tensor(nodes[0].attribute[0].t)
        return self._fold(nodes, inits, name, at, role)

    def _collect_cone(
        self,
        name: str,
        scope: _Scope,
        nodes: list,
        inits: dict,
        seen: set,
        at: str,
        role: str,
        shapes: dict | None = None,
    ) -> None:
        """The nodes computing ``name`` from constants, in execution order (iterative: a chain of
        thousands of nodes is no deeper than one). With ``shapes``, a ``Shape`` node of a graph input is a
        leaf too: its output -> (input name, start, end), recorded there."""
        stack: list[tuple[str, _Scope | onnx.NodeProto]] = [(name, scope)]  # a node: expanded, emitted now
        while stack:
            current, where_from = stack.pop()
            if isinstance(where_from, onnx.NodeProto):
                if not any(n is where_from for n in nodes):
                    nodes.append(where_from)
                continue
            if not current or current in seen:
                continue
            seen.add(current)
            found = where_from.lookup(current)
            if found is None:
                raise InputError(f"{at}{role} depends on {current!r}, which is not defined")
            _, node, owner = found
            if isinstance(node, onnx.TensorProto):  # an initializer
                inits[current] = self._tensor(node)
                continue
            if node is None:  # a graph input
                raise InputError(
                    f"{at}{role} depends on graph input {current!r}: it is not a constant",
                    hint="gatepack needs weights computable from constants alone",
                )
            if shapes is not None and node.op_type == "Shape" and node.domain in _ONNX_DOMAINS:
                source = owner.lookup(node.input[0])
                if source is not None and source[0] == "input":
                    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                    shapes[current] = (node.input[0], attrs.get("start", 0), attrs.get("end"))
                    continue
            if node.op_type in _NONDETERMINISTIC or node.domain not in _ONNX_DOMAINS:
                raise InputError(
                    f"{at}{role} depends on a {node.domain or 'ai.onnx'}::{node.op_type} node, which gatepack "
                    "cannot fold"
                )
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                raise InputError(
                    f"{at}{role} depends on control flow ({node.op_type} {node.name!r}), which gatepack cannot fold"
                )
            stack.append((current, node))  # emitted after its inputs
            stack.extend((inp, owner) for inp in reversed(node.input))

    def _state_from_shapes(
        self, name: str, scope: _Scope, layer: str, role: str, node_layout: int
    ) -> np.ndarray | None:
        """If tensor ``name`` (an initial state, in the node's layout) is computed from constants and the shapes of
        graph inputs alone, and for two different sizings of their symbolic dimensions it is one state of batch
        1 repeated along the batch (a learned state expanded to X's batch, or zeros sized like X, as exporters
        write them: ``Expand``/``ConstantOfShape``/``Tile`` of a shape taken from X), that batch-1 state, in the
        node's layout; else None (an input of the layer)."""
        nodes: list[onnx.NodeProto] = []
        inits: dict[str, np.ndarray] = {}
        shapes: dict[str, tuple] = {}
        try:
            self._collect_cone(name, scope, nodes, inits, set(), where(self.path, layer), role, shapes)
        except InputError:
            return None
        if not shapes:
            return None
        cone = [n for n in nodes if not (n.op_type == "Shape" and n.output[0] in shapes)]
        batch_axis = 0 if node_layout else 1
        found = None
        for trial in (2, 3):
            sized = dict(inits)
            for out, (source, start, end) in shapes.items():
                dims = _dims(self.types.get(source)) or []
                symbols = sorted({d for d in dims if not isinstance(d, int)}, key=str)
                full = [d if isinstance(d, int) else trial + 2 * symbols.index(d) for d in dims]
                sized[out] = np.array(full[start:end] if end is not None else full[start:], np.int64)
            try:
                value = self._fold(cone, sized, name, where(self.path, layer), role) if cone else sized[name]
            except InputError:
                return None
            if value.dtype.kind != "f" or value.ndim != 3:
                return None
            first = np.take(value, [0], axis=batch_axis)
            if not np.array_equal(value, np.broadcast_to(first, value.shape)):
                return None
            if found is not None and not np.array_equal(found, first):
                return None
            found = first
        return found

    def _fold(self, nodes: list, inits: dict, name: str, at: str, role: str) -> np.ndarray:
        from onnx.reference import ReferenceEvaluator

        graph = helper.make_graph(
            nodes,
            "fold",
            [],
            [onnx.ValueInfoProto(name=name)],
            [numpy_helper.from_array(v, k) for k, v in inits.items()],
        )
        model = helper.make_model(graph, opset_imports=list(self.proto.opset_import))
        try:
            (value,) = ReferenceEvaluator(model).run([name], {})
        except Exception as err:
            ops = ", ".join(sorted({n.op_type for n in nodes}))
            raise InputError(
                f"{at}{role} {name!r} could not be folded from constants ({ops}): {str(err).splitlines()[0]}"
            ) from None
        return np.asarray(value)

    # -- nodes

    def _read_node(self, node: onnx.NodeProto, scope: _Scope, name: str) -> RecurrentLayer:
        cell = cell_of_op(node.op_type)
        assert cell is not None  # (called for the recurrent ops only)
        at = where(self.path, name)
        version = onnx.defs.get_schema(node.op_type, self.opset).since_version
        for a in node.attribute:
            if a.name in _ATTRIBUTE_TYPES and a.type != _ATTRIBUTE_TYPES[a.name]:
                expected = _A.AttributeType.Name(_ATTRIBUTE_TYPES[a.name])
                raise InputError(
                    f"{at}attribute {a.name!r} is of type {_A.AttributeType.Name(a.type)}, {node.op_type} takes "
                    f"{expected}"
                )
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        allowed = {"hidden_size", "direction", "activations", "activation_alpha", "activation_beta", "clip"}
        spec = cell.spec
        allowed |= {"linear_before_reset"} if spec.reset_placement and version >= 3 else set()
        allowed |= {"input_forget"} if spec.input_forget else set()
        allowed |= {"layout"} if version >= 14 else set()
        allowed |= {"output_sequence"} if version < 7 else set()
        for key in attrs:
            if key not in allowed:
                raise InputError(f"{at}attribute {key!r} is not part of {node.op_type}-{version}")
        # X W R B sequence_lens, an initial state per state, then P (LSTM); Y and a final state per state.
        most_inputs, most_outputs = 5 + len(spec.states) + bool(spec.peepholes), 1 + len(spec.states)
        if len(node.input) > most_inputs or len(node.output) > most_outputs:
            raise InputError(
                f"{at}{node.op_type} has {len(node.input)} inputs and {len(node.output)} outputs; it takes at most "
                f"{most_inputs} and {most_outputs}"
            )
        inputs = list(node.input) + [""] * (8 - len(node.input))
        if not inputs[0] or not inputs[1] or not inputs[2]:
            raise InputError(f"{at}{node.op_type} needs inputs X, W and R; got {list(node.input)}")

        w = self.constant(inputs[1], scope, name, "W")
        r = self.constant(inputs[2], scope, name, "R")
        b = self.constant(inputs[3], scope, name, "B") if inputs[3] else None
        p = self.constant(inputs[7], scope, name, "P") if inputs[7] else None
        if "hidden_size" not in attrs:
            guess = f"; R has shape {list(r.shape)}, which suggests hidden_size={r.shape[-1]}" if r.ndim == 3 else ""
            raise InputError(f"{at}attribute hidden_size is missing (onnxruntime requires it){guess}")
        hidden = int(attrs["hidden_size"])
        direction_text = _text(attrs.get("direction", b"forward"))
        try:
            direction = Direction(direction_text)
        except ValueError:
            raise InputError(f"{at}direction {direction_text!r} is not forward, reverse or bidirectional") from None
        d, gh = direction.count, cell.gates * hidden
        if hidden < 1:
            raise InputError(f"{at}hidden_size {hidden} must be positive")
        if w.ndim != 3 or w.shape[:2] != (d, gh):
            raise InputError(
                f"{at}W has shape {list(w.shape)}, expected [{d}, {gh}, input_size] for hidden_size={hidden}, "
                f"direction={direction.value}"
            )
        if r.shape != (d, gh, hidden):
            raise InputError(
                f"{at}R has shape {list(r.shape)}, expected [{d}, {gh}, {hidden}] for hidden_size={hidden}"
            )
        if b is not None and b.shape != (d, 2 * gh):
            raise InputError(f"{at}B has shape {list(b.shape)}, expected [{d}, {2 * gh}] for hidden_size={hidden}")
        if p is not None and p.shape != (d, len(spec.peepholes) * hidden):
            raise InputError(
                f"{at}P has shape {list(p.shape)}, expected [{d}, {len(spec.peepholes) * hidden}] for "
                f"hidden_size={hidden}"
            )
        if w.dtype.name not in ("float16", "float32", "float64"):
            raise InputError(f"{at}W is {w.dtype}; recurrent weights are float16, float32 or float64")
        for label, array in (("R", r), ("B", b), ("P", p)):
            if array is not None and array.dtype != w.dtype:
                raise InputError(f"{at}{label} is {array.dtype} but W is {w.dtype}")

        notes: list[Finding] = []
        per_dir = self._activations(node, cell, direction, attrs, at, notes)
        clip = self._clip(cell, attrs, at, notes)
        layout = int(attrs.get("layout", 0))
        if layout not in (0, 1):
            raise InputError(f"{at}layout {layout} is not 0 or 1")
        lbr = bool(attrs.get("linear_before_reset", 0))
        input_forget = bool(attrs.get("input_forget", 0))
        if "output_sequence" in attrs:
            notes.append(
                Finding(
                    "outputs",
                    Status.EXACT,
                    f"output_sequence={attrs['output_sequence']} ({node.op_type}-{version}): Y is produced when it "
                    "is named",
                )
            )

        outputs = list(node.output) + ["", "", ""]
        weights = ((inputs[1], w), (inputs[2], r), (inputs[3], b), (inputs[7], p))
        isolated = _Isolated([node], {k: v for k, v in weights if k and v is not None}, self.opset)
        computed = self._computed_inputs(scope, inputs, layout, name)
        interface = self._interface(node, scope, inputs, outputs, layout, w, hidden, at, isolated, computed)
        constants = self._held_constants(scope, interface, layout, name, w.dtype, isolated, computed)
        zero_states = [r for r in ("initial_h", "initial_c") if getattr(interface, r) in isolated.blank]
        if zero_states:
            cleared: dict[str, Any] = dict.fromkeys(zero_states)  # no tensor (Any: replace checks each field's type)
            interface = replace(interface, **cleared)
            notes.append(
                Finding(
                    "initial state",
                    Status.EXACT,
                    f"{', '.join(ROLE_LABELS[r] for r in zero_states)}: zeros computed from the shape of the model's "
                    "input (checked for two sizes), which is no initial state",
                )
            )
        zeros = np.zeros(gh, dtype=w.dtype)
        directions = tuple(
            DirectionParams(
                W=w[k],
                R=r[k],
                Wb=b[k, :gh] if b is not None else zeros,
                Rb=b[k, gh:] if b is not None else zeros,
                activations=tuple(per_dir[k]),
                P=None if p is None else p[k],
            )
            for k in range(d)
        )
        try:
            layer = RecurrentLayer(
                name=name,
                cell=cell,
                input_size=int(w.shape[2]),
                hidden_size=hidden,
                direction=direction,
                directions=directions,
                interface=interface,
                linear_before_reset=lbr,
                input_forget=input_forget,
                clip=clip,
                has_bias=b is not None,
                constants=constants,
                provenance=Provenance(
                    FORMAT,
                    self.path,
                    name,
                    "node",
                    node.op_type,
                    version,
                    tuple(node.input),
                    layout,
                    isolated,
                    tuple((key, _decoded(value)) for key, value in sorted(attrs.items())),
                ),
            )
        except SpecError as err:
            raise InputError(f"{self.path}: {err}") from None
        if notes:
            self.notes[name] = notes
        return layer

    def _computed_inputs(self, scope: _Scope, inputs: list, node_layout: int, layer: str) -> dict[str, tuple]:
        """Per optional input (sequence_lens, initial_h, initial_c) the model computes rather than takes as a graph
        input, what folding it gives, once per node (the layout and the held constants both ask): ``(name,
        "constant", value)`` when constants alone compute it (an initializer, a ``Constant`` node, a cone of
        operators over them), for a state ``(name, "repeated", batch-1 state)`` when constants and the shapes of
        graph inputs compute one state repeated along X's batch (``_state_from_shapes``, in the node's layout),
        else ``(name, None, None)`` (computed from the model's inputs, or by control flow: an input of the layer)."""
        computed: dict[str, tuple] = {}
        for role, index in zip(CONSTANT_ROLES, (4, 5, 6)):
            name = inputs[index]
            if not name or (found := scope.lookup(name)) is None or found[0] == "input":
                continue
            try:
                computed[role] = (name, "constant", self.constant(name, scope, layer, ROLE_LABELS[role]))
            except InputError:
                state = None
                if role != "sequence_lens":
                    state = self._state_from_shapes(name, scope, layer, ROLE_LABELS[role], node_layout)
                computed[role] = (name, None if state is None else "repeated", state)
        return computed

    def _held_constants(
        self,
        scope: _Scope,
        itf: Interface,
        node_layout: int,
        layer: str,
        dtype: np.dtype,
        isolated: _Isolated,
        computed: dict[str, tuple],
    ) -> dict[str, np.ndarray]:
        """The optional inputs (sequence_lens, initial_h, initial_c) the model computes from constants alone
        (``computed``: from ``_computed_inputs``), in the canonical layout 0; each also becomes a constant of the
        isolated node, so running it alone never feeds a value in its place. An input computed from a graph input
        stays an input of the layer."""
        held: dict[str, np.ndarray] = {}
        for role in CONSTANT_ROLES:
            name = getattr(itf, role)
            folded_name, kind, value = computed.get(role, (None, None, None))
            if not name or name != folded_name or kind is None:
                continue  # absent, a graph input (or absorbed into one), or computed from the model's inputs
            if kind == "repeated":
                if not np.any(value):
                    isolated.blank.add(name)  # zeros sized like X: no initial state
                elif value.dtype == dtype:  # one state for every batch entry: held, batch 1
                    held[role] = constant_from_layout(value, role, node_layout)
                    isolated.broadcast[name] = value
                continue
            at = where(self.path, layer)
            if role == "sequence_lens":
                if value.dtype != np.int32 or value.ndim != 1:
                    raise InputError(
                        f"{at}sequence_lens {name!r} is {value.dtype} {list(value.shape)}, expected int32 [N]"
                    )
                held[role], isolated.constants[name] = value, value
                continue
            if value.dtype != dtype or value.ndim != 3:
                raise InputError(f"{at}{ROLE_LABELS[role]} {name!r} is {value.dtype} {list(value.shape)}; W is {dtype}")
            held[role] = constant_from_layout(value, role, node_layout)
            isolated.constants[name] = value
        return held

    def _activations(self, node, cell: Cell, direction: Direction, attrs: dict, at: str, notes: list) -> list[list]:
        per = cell.activation_count
        d = direction.count
        names = [_text(n) for n in attrs.get("activations", [])] or list(cell.default_activations) * d
        if cell is Cell.RNN and d == 1 and len(names) == 2:
            # onnxruntime keeps the first of two names for a one-direction RNN (an old default was [Tanh, Tanh]).
            if names[0].lower() != names[1].lower():
                notes.append(
                    Finding(
                        "activations",
                        Status.EXACT,
                        f"a {direction.value} RNN lists two activations {names}; onnxruntime uses the first, "
                        f"{names[0]!r}, and so does gatepack",
                        warning="second activation ignored",
                    )
                )
            names = names[:1]
        if len(names) != per * d:
            raise InputError(
                f"{at}activations lists {len(names)} names {names}, a {direction.value} {node.op_type} takes {per * d}"
            )
        canonical = []
        for given in names:
            known = canonical_name(given)
            if known is None:
                raise InputError(f"{at}unknown activation {given!r}", hint=f"known: {', '.join(KINDS)}")
            if known != given:
                runtime = "onnxruntime rejects it for RNN and " if cell is Cell.RNN else ""
                notes.append(
                    Finding(
                        "activations",
                        Status.EXACT,
                        f"activation {given!r} spelled {known!r} ({runtime}the onnxruntime DirectML provider "
                        "accepts only the exact spelling)",
                    )
                )
            canonical.append(known)
        alphas = [float(a) for a in attrs.get("activation_alpha", [])]
        betas = [float(b) for b in attrs.get("activation_beta", [])]
        try:
            resolved, filled = resolve_activations(canonical, alphas, betas, self.policy)
        except ValueError as err:
            raise InputError(f"{at}{err}") from None
        used_alpha = sum(KINDS[n].takes_alpha for n in canonical)
        used_beta = sum(KINDS[n].takes_beta for n in canonical)
        if len(alphas) > used_alpha or len(betas) > used_beta:
            notes.append(
                Finding(
                    "activations",
                    Status.EXACT,
                    f"{len(alphas) - used_alpha if len(alphas) > used_alpha else 0} activation_alpha and "
                    f"{max(len(betas) - used_beta, 0)} activation_beta value(s) are consumed by no activation and "
                    "ignored (as onnxruntime does)",
                    warning="unused activation parameters",
                )
            )
        for item in filled:
            if item.ambiguous:
                other = "has no default" if item.other_value is None else f"uses {item.other_value:g}"
                notes.append(
                    Finding(
                        "activation defaults",
                        Status.EXACT,
                        f"{item.activation} {item.parameter} is not set; gatepack uses {item.value:g} "
                        f"({self.policy.value} policy) and writes it explicitly, while the "
                        f"{'ONNX operator' if self.policy is DefaultsPolicy.ONNXRUNTIME else 'onnxruntime'} "
                        f"default {other}",
                        warning="the model relies on a default that runtimes disagree on",
                        alternative=(
                            "set the parameter explicitly, or choose the other policy with --activation-defaults"
                        ),
                    )
                )
            else:
                notes.append(
                    Finding(
                        "activation defaults",
                        Status.EXACT,
                        f"{item.activation} {item.parameter} is not set; every runtime uses {item.value:g}, "
                        "written explicitly",
                    )
                )
        return [resolved[k * per : (k + 1) * per] for k in range(d)]

    def _check_state_shape(
        self, scope: _Scope, name: str, label: str, layout: int, directions: int, hidden: int, at: str
    ) -> None:
        """An initial state whose known shape (declared, inferred or an initializer's) does not fit the node
        is refused: onnxruntime would refuse it at run time."""
        found = scope.lookup(name)
        initializer = found[1] if found is not None else None
        dims = list(initializer.dims) if isinstance(initializer, onnx.TensorProto) else _dims(self.types.get(name))
        if dims is None:
            return
        want = [None, directions, hidden] if layout else [directions, None, hidden]
        if len(dims) != 3 or any(isinstance(got, int) and w is not None and got != w for got, w in zip(dims, want)):
            expected = ", ".join("batch" if w is None else str(w) for w in want)
            raise InputError(
                f"{at}{label} {name!r} has shape {dims}, expected [{expected}] for hidden_size={hidden} "
                f"(layout {layout})"
            )

    def _clip(self, cell: Cell, attrs: dict, at: str, notes: list) -> float | None:
        if "clip" not in attrs:
            return None
        clip = float(attrs["clip"])
        if not cell.spec.zero_clip and not clip > 0:
            raise InputError(f"{at}clip {clip:g} must be greater than 0 for {cell.op_name} (onnxruntime refuses it)")
        if not np.isfinite(clip):
            raise InputError(f"{at}clip {clip} is not a finite number")
        if clip < 0:
            notes.append(
                Finding(
                    "clip",
                    Status.EXACT,
                    f"clip {clip:g} < 0 means no clip for RNN (onnxruntime); gatepack writes no clip",
                )
            )
            return None
        return clip

    def _interface(
        self,
        node,
        scope: _Scope,
        inputs: list,
        outputs: list,
        layout: int,
        w: np.ndarray,
        hidden: int,
        at: str,
        isolated: _Isolated,
        computed: dict[str, tuple],
    ) -> Interface:
        names = {
            "x": inputs[0],
            "sequence_lens": inputs[4] or None,
            "initial_h": inputs[5] or None,
            "initial_c": inputs[6] or None,
            "y": outputs[0] or None,
            "y_h": outputs[1] or None,
            "y_c": outputs[2] or None,
        }
        if not any(names[role] for role in OUTPUT_ROLES):
            raise InputError(f"{at}the node has no output")
        node_layout = layout
        outer: dict = {}  # what the absorbed Transposes rename (role -> the tensor outside them)
        if layout == 0:
            held = {  # states the node holds whatever the layout (constants, or repeated along X's batch)
                names[r] for r in ("initial_h", "initial_c") if r in computed and computed[r][1] is not None
            }
            absorbed = _absorbable_transposes(scope, node, names, held)
            if absorbed is not None:
                outer, isolated.nodes = absorbed
                names.update(outer)
                layout = 1
        x_dims = _dims(self.types.get(names["x"]))
        if x_dims is not None:
            if len(x_dims) != 3:
                raise InputError(f"{at}X {names['x']!r} has rank {len(x_dims)}, expected 3")
            if isinstance(x_dims[2], int) and x_dims[2] != w.shape[2]:
                raise InputError(f"{at}X {names['x']!r} has input size {x_dims[2]} but W has {w.shape[2]}")
        for role in ("initial_h", "initial_c"):
            if names[role]:
                own = layout if role in outer else node_layout  # a state the transposes do not wrap is the node's
                self._check_state_shape(scope, names[role], ROLE_LABELS[role], own, w.shape[0], hidden, at)
        seq, batch = (None, None) if x_dims is None else ((x_dims[1], x_dims[0]) if layout else (x_dims[0], x_dims[1]))
        try:
            return Interface(layout=layout, seq_length=seq, batch_size=batch, dtype=w.dtype.name, **names)
        except SpecError as err:  # e.g. a tensor name that is not valid UTF-8
            raise InputError(f"{at}{err}") from None


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


def copy_node(node: onnx.NodeProto, renamed: dict[str, str]) -> onnx.NodeProto:
    """A copy of ``node`` whose inputs ``renamed`` names are renamed (to "" for an absent optional input)."""
    copied = onnx.NodeProto()
    copied.CopyFrom(node)
    copied.input[:] = [renamed.get(name, name) for name in node.input]
    return copied


def constant_feeders(
    graph: onnx.GraphProto, absorbed: set[int], fed: set[str] | frozenset[str] = frozenset()
) -> set[int]:
    """The ids of ``graph``'s nodes that compute constants read only by the ``absorbed`` nodes (a layer's
    own): a ``Constant`` node holding a layer's weights or initial state, a cone of operators folding
    them, or one computing a zero state from X's shape (``Shape`` -> ``Expand``). They are part of the layer,
    not operators around it; a tensor the layers take as an input (``fed``) is never such a constant."""
    computed = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    constant_outputs: set[str] = set()
    for node in graph.node:  # nodes are in execution order
        holds_graph = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
        depends = node.op_type != "Shape" and any(name in computed for name in node.input if name)
        if holds_graph or depends or node.op_type in _NONDETERMINISTIC or node.domain not in _ONNX_DOMAINS:
            computed.update(node.output)
        else:
            constant_outputs.update(o for o in node.output if o)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in graph.output}
    found: set[int] = set()
    for node in reversed(graph.node):  # a node's readers come after it
        outputs = [o for o in node.output if o]
        if (
            outputs
            and id(node) not in absorbed
            and all(
                o in constant_outputs and o not in graph_outputs and o not in fed and readers.get(o) for o in outputs
            )
            and all(id(r) in absorbed or id(r) in found for o in outputs for r in readers[o])
        ):
            found.add(id(node))
    return found


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


def _exposed_text(region) -> str:
    """How the source's own tensors of a lifted layer relate to its canonical Y and Y_h."""
    parts = []
    for tensor, how in region.exposed.items():
        if how[0] == "Y_seq":
            order = "in processing order (reversed in time)" if how[1] else "in time order"
            parts.append(f"{tensor!r} is Y without its direction axis, {order}")
        elif how[0] in ("Y_h", "Y_c"):
            parts.append(f"{tensor!r} is {how[0]} without its direction axis")
        elif how[0] == "Y_kept":
            parts.append(f"{tensor!r} is Y without its direction axis within each row's length, Y_h after it")
        else:
            parts.append(f"{tensor!r} is Y at step {how[1]}")
    shown = "; ".join(parts[:4]) + (f"; and {len(parts) - 4} more" if len(parts) > 4 else "")
    return (
        f"The layer's outputs are canonical tensors {region.y!r} and {region.y_h!r} (with a direction axis); "
        f"in the source, {shown}."
    )


def _absorbable_transposes(
    scope: _Scope, node: onnx.NodeProto, names: dict, held: set[str] | frozenset[str] = frozenset()
) -> tuple[dict, list] | None:
    """If a layout-0 node is wrapped in batch-major Transposes from graph inputs to graph outputs
    (gatepack's own layout encoding, and common in exports), return the outer tensor names and the
    wrapped nodes in execution order (transposes in, the node, transposes out). A state in ``held`` (one
    the layer holds: a constant, or a state repeated along X's batch) needs no Transpose: it stays the
    node's own."""
    outer: dict = {}
    before: list[onnx.NodeProto] = []
    after: list[onnx.NodeProto] = []
    for key, perm in (("x", _PERM_IN), ("initial_h", _PERM_IN), ("initial_c", _PERM_IN)):
        if names[key] is None or names[key] in held:
            continue
        prod = scope.producers.get(names[key])
        if prod is None or prod.op_type != "Transpose" or perm_of(prod) != perm:
            return None
        if prod.input[0] not in scope.inputs or len(scope.consumers.get(names[key], [])) != 1:
            return None
        outer[key] = prod.input[0]
        before.append(prod)
    for key, perm in (("y", _PERM_Y), ("y_h", _PERM_YH), ("y_c", _PERM_YH)):
        if names[key] is None:
            continue
        users = scope.consumers.get(names[key], [])
        if len(users) != 1 or users[0].op_type != "Transpose" or perm_of(users[0]) != perm:
            return None
        if names[key] in scope.outputs or users[0].output[0] not in scope.outputs:
            return None
        outer[key] = users[0].output[0]
        after.append(users[0])
    if names["sequence_lens"] is not None and names["sequence_lens"] not in scope.inputs:
        return None
    return outer, before + [node] + after


def _decoded(value: object) -> object:
    """An attribute value with its strings (bytes in the protobuf) decoded; lists as tuples."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return tuple(_decoded(v) for v in value)
    return value


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _value_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
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


def _dims(tensor_type: onnx.TypeProto | None) -> list | None:
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


# ----------------------------------------------------------------------------------------- writing


EXTERNAL_THRESHOLD = 1 << 30  # weights above 1 GiB go to external data (protobuf stops at 2 GiB)


def write(
    model: Model,
    path: str | Path,
    *,
    opset: int | None = None,
    layout_encoding: str = "transpose",
    external_data: bool | None = None,
    runtime: str | None = None,
) -> None:
    """Write ``model``'s layers as one ONNX model: one node per layer, each with the source layer's
    interface (names, layout, optional inputs and outputs). Atomic: nothing is left on failure. An
    ONNX model with other operators around its layers is kept whole (``in_place``), in its own opset.

    ``layout_encoding`` for batch-major (layout 1) layers: ``transpose`` (default) wraps a layout-0
    node in Transposes, which every runtime runs; ``attribute`` writes ``layout=1`` (opset >= 14).
    ``external_data`` stores the weights in ``NAME.onnx.data`` beside the model, streamed from the
    layers' arrays without an in-memory copy of the model; by default when the source stored its
    weights so, or when they exceed 1 GiB (ONNX files stop at 2 GiB). ``runtime``: ``directml`` writes each
    layer in a form onnxruntime's DirectML provider computes as ONNX specifies (``for_runtime``).
    """
    path = Path(path)
    runtime = runtime_name(runtime)
    if runtime == "directml" and layout_encoding == "attribute":
        raise UsageError(
            "the layout attribute cannot be written for directml: onnxruntime's DirectML provider does not take "
            "layout=1",
            hint="leave out --onnx-layout (Transposes around a layout-0 node)",
        )
    _refuse_for_runtime(model, runtime, opset)
    if is_whole_model(model):
        if opset is not None and opset != model.meta.get("opset"):
            raise UsageError(
                f"{model.path}: a whole model keeps its opset {model.meta.get('opset')}; --opset {opset} applies to "
                "the recurrent layers written alone",
                hint="leave out --opset, or pass --layers-only",
            )
        _write_whole(model, path, layout_encoding, external_data, runtime)
        return
    opset = DEFAULT_OPSET if opset is None else opset
    if external_data is None:
        weight_bytes = sum(
            p.W.nbytes + p.R.nbytes + p.Wb.nbytes + p.Rb.nbytes for layer in model.layers for p in layer.directions
        )
        external_data = bool(model.meta.get("external_data")) or weight_bytes > EXTERNAL_THRESHOLD
    data_name = path.name + ".data"
    with atomic_files(path, (".onnx.data",) if path.suffix == ".onnx" else ()) as tmp:
        if external_data:
            _check_data_name(path)
            with open(tmp.parent / data_name, "wb") as data:
                proto = build(
                    model, opset=opset, layout_encoding=layout_encoding, external=(data, data_name), runtime=runtime
                )
        else:
            proto = build(model, opset=opset, layout_encoding=layout_encoding, runtime=runtime)
        onnx.save(proto, str(tmp))
        check_written(tmp, None)


def _refuse_for_runtime(model: Model, runtime: str, opset: int | None) -> None:
    """RefusedError for a layer that cannot be written safely for ``runtime`` (``check``'s unsupported findings
    for it), naming the layer, the reason and the alternative."""
    if runtime != "directml":
        return
    opset = model.meta.get("opset") if is_whole_model(model) else opset or DEFAULT_OPSET
    for layer in model.layers:
        refused = _directml_refusal(layer, opset)
        if refused is not None:
            raise RefusedError(
                f"{model.path or '(in-memory model)'}: layer {layer.name!r}: {refused.feature}: {refused.detail}",
                findings=[refused],
                hint=refused.alternative,
            )


def _directml_refusal(layer: RecurrentLayer, opset: int | None) -> Finding | None:
    """What cannot be made safe for onnxruntime's DirectML provider in ``layer`` at ``opset`` (None: nothing)."""
    if layer.dtype == np.float64:
        return Finding(
            "dtype",
            Status.UNSUPPORTED,
            "float64: onnxruntime's DirectML provider registers GRU/RNN/LSTM for float16 and float32 only (the node "
            "would run on another provider, and onnxruntime's CPU GRU/LSTM take no float64)",
            alternative="convert the model to float32 first, or leave out --for directml",
        )
    if opset is not None and opset < onnx_elementary.MINIMUM_OPSET and directml_ep.ep_mishandled(layer):
        return Finding(
            "cell",
            Status.UNSUPPORTED,
            f"its elementary form (needed: {'; '.join(directml_ep.ep_mishandled(layer))}) takes opset "
            f"{onnx_elementary.MINIMUM_OPSET} or later, and the model is written at opset {opset}",
            alternative=f"write it at opset {DEFAULT_OPSET} (--opset {DEFAULT_OPSET}, or --layers-only for a whole "
            "model), or leave out --for directml",
        )
    return None


def _check_data_name(path: Path) -> None:
    if path.suffix != ".onnx":
        raise UsageError(
            f"{path}: a model with external data must be named NAME.onnx (its data goes to NAME.onnx.data)"
        )


def _write_whole(
    model: Model, path: Path, layout_encoding: str, external_data: bool | None, runtime: str = "onnxruntime"
) -> None:
    """The whole model rewritten in place (``in_place``); its weights stay external data (streamed
    into ``NAME.onnx.data``) when the source kept them so, unless ``external_data`` says otherwise."""
    assert model.path is not None  # a whole model is rewritten from the file it was read from
    external = bool(model.meta.get("external_data")) if external_data is None else external_data
    if external:
        _check_data_name(path)
    with atomic_files(path, (".onnx.data",) if path.suffix == ".onnx" else ()) as tmp:
        if external:
            with open(tmp.parent / (path.name + ".data"), "wb") as data:
                proto = in_place(
                    model, layout_encoding=layout_encoding, external=(data, path.name + ".data"), runtime=runtime
                )
        else:
            proto = in_place(model, layout_encoding=layout_encoding, runtime=runtime)
        onnx.save(proto, str(tmp))
        check_written(tmp, Path(model.path))


def check_written(path: Path, source: Path | None) -> None:
    """``onnx.checker``'s full check (with strict shape inference) of the file just written, as a runtime
    would load it (only the structural check when the source model it was rewritten from fails the full one).
    A file gatepack wrote that fails it is a bug in gatepack (GatepackError, exit 1), unless the source fails
    it with the same complaint (its own defect, carried over unchanged)."""
    full = True
    if source is not None and _check_fails(source, full_check=True):
        full = False  # its own shape annotations fail strict inference: hold the rewrite to the structural check
    reason = _check_fails(path, full_check=full)
    if reason is None or (source is not None and reason == _check_fails(source, full_check=full)):
        return  # valid, or the source's own defect carried over unchanged (onnxruntime runs such models)
    raise GatepackError(f"the ONNX model gatepack wrote fails onnx.checker's {'full ' if full else ''}check: {reason}")


def _check_fails(path: Path, *, full_check: bool) -> str | None:
    """onnx.checker's complaint about the model at ``path``, in whole words (None: it passes)."""
    try:
        onnx.checker.check_model(str(path), full_check=full_check)
    except Exception as err:
        text = " ".join(str(err).split())
        return text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " ..."
    return None


def lifted_layers(model: Model) -> list[RecurrentLayer]:
    """The layers of an ONNX model lifted from Loops or unrolled cells."""
    return [
        lay for lay in model.layers if lay.provenance and lay.provenance.of(FORMAT) and lay.provenance.kind == "lifted"
    ]


def is_whole_model(model: Model) -> bool:
    """An ONNX model with operators around its recurrent layers: ONNX -> ONNX rewrites its layers in
    place and keeps everything else (unless the user asked for the layers alone)."""
    return model.format == FORMAT and model.keeps_whole and model.path is not None


def in_place(
    model: Model, *, layout_encoding: str = "transpose", external: tuple | None = None, runtime: str = "onnxruntime"
) -> onnx.ModelProto:
    """The source model, whole, with each recurrent layer rewritten where it is.

    A GRU/RNN node (with the Transposes gatepack absorbed around it) becomes ``layer_nodes``: every
    attribute explicit, the layout per ``layout_encoding``, the weights as new initializers of its own
    (sub)graph, reading and producing the same tensor names. A lifted Loop or unrolled chain becomes one
    node (``onnx_lifting.replace_in_place``). Every other node, initializer, input, output, name and the
    model's metadata stay as they were; weights and the constant nodes that computed them are removed
    when nothing else reads them. The model keeps its opset.

    ``external`` = (binary file, location): every tensor is written there, the new weights streamed
    from the layers' arrays and the source's external tensors copied in chunks; without it, the
    source's external tensors are embedded. ``runtime``: as ``write``'s."""
    assert model.path is not None  # a whole model is rewritten from the file it was read from
    proto = load_proto(Path(model.path))
    opset = next((o.version for o in proto.opset_import if o.domain in _ONNX_DOMAINS), DEFAULT_OPSET)
    if layout_encoding == "attribute" and opset < 14 and any(lay.interface.layout == 1 for lay in model.layers):
        raise UsageError(
            f"{model.path}: the layout attribute needs opset 14 or later; the whole model keeps its opset {opset}",
            hint="use the transpose layout encoding",
        )
    names = _NameBook()
    names.used = _all_names(proto)
    located = {name: graph for _, graph, _, name in walk_nodes(proto.graph)}
    reads = _read_counts(proto)
    lifted, written = [], set()
    for layer in model.layers:
        provenance = layer.provenance
        assert provenance is not None  # every layer was read from the model
        if provenance.kind == "lifted":
            lifted.append(_lifted_replacement(layer))
        else:
            graph = located[provenance.node]
            form = _Form(layout_encoding, runtime, opset)
            written |= _rewrite_node(graph, layer, form, names, reads, external)
    if lifted:
        replace_in_place(proto, lifted)
    _relocate_external_data(proto, Path(model.path).parent, external, written)
    return proto


def embed_external_data(proto: onnx.ModelProto, source_dir: Path) -> None:
    """Embed (in place) ``proto``'s external tensors, each read from a regular file inside ``source_dir``."""
    _relocate_external_data(proto, source_dir, None, set())


def _relocate_external_data(
    proto: onnx.ModelProto, source_dir: Path, external: tuple | None, written: set[str]
) -> None:
    """The source's external tensors that remain, copied into the new data file (``external``) in
    chunks, or embedded; each read from a regular file inside the source model's directory
    (``written``: the new weights, already in the new file)."""
    for tensor in (t for graph in _all_graphs(proto) for t in graph.initializer):
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


def _all_graphs(proto: onnx.ModelProto) -> list[onnx.GraphProto]:
    """The main graph and every subgraph (If branches, Loop and Scan bodies), depth first."""
    return [proto.graph] + [
        sub
        for node, _, _, _ in walk_nodes(proto.graph)
        for a in node.attribute
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
    ]


def _all_names(proto: onnx.ModelProto) -> set[str]:
    """Every tensor and node name of the model, subgraphs included (new names avoid them all)."""
    used: set[str] = set()
    for graph in _all_graphs(proto):
        used |= {t.name for t in graph.initializer} | {i.name for i in graph.input} | {o.name for o in graph.output}
        used |= {v.name for v in graph.value_info}
        for node in graph.node:
            used |= set(node.output) | set(node.input) | {node.name}
    return used


def _read_counts(proto: onnx.ModelProto) -> Counter:
    """How many times each tensor name is read in the model: node inputs and graph outputs, subgraphs included."""
    reads: Counter = Counter()
    for graph in _all_graphs(proto):
        reads.update(o.name for o in graph.output)
        for node in graph.node:
            reads.update(i for i in node.input if i)
    return reads


def _rewrite_node(
    graph: onnx.GraphProto,
    layer: RecurrentLayer,
    form: "_Form",
    names: _NameBook,
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
    inits: list[_Stacked] = []
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


def _lifted_replacement(layer: RecurrentLayer) -> tuple:
    """(region, node, weights) replacing a lifted layer's loop or unrolled steps (``replace_in_place``)."""
    region = isolated_record(layer).region
    assert region is not None  # (a lifted layer's)
    x0, w = node_inputs(region)

    def stack(key: str) -> np.ndarray:
        return stack_directions([getattr(p, key) for p in layer.directions])

    weights = {w: stack("W"), f"{layer.name}:R": stack("R")}
    inputs = [x0, w, f"{layer.name}:R", "", region.sequence_lens or "", region.initial_h or "", region.initial_c or ""]
    if layer.has_bias:
        weights[f"{layer.name}:B"] = np.concatenate([stack("Wb"), stack("Rb")], axis=1)
        inputs[3] = f"{layer.name}:B"
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node(
        layer.cell.spec.onnx_op,
        inputs,
        [f"{layer.name}:Y0", f"{layer.name}:Y_h0", f"{layer.name}:Y_c0"][: len(state_roles(layer.cell)) + 1],
        name=layer.name,
        **_attributes(layer),
    )
    return region, node, weights


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


@dataclass
class _Stacked:
    """An initializer made of per-direction arrays stacked on a new first axis, materialised only
    when the model is built: in memory, or streamed part by part into an external data file."""

    name: str
    parts: list[np.ndarray]

    def embedded(self) -> onnx.TensorProto:
        return numpy_helper.from_array(stack_directions(self.parts), self.name)

    def external(self, data, location: str) -> onnx.TensorProto:
        dtype = self.parts[0].dtype
        tensor = onnx.TensorProto(
            name=self.name,
            data_type=helper.np_dtype_to_tensor_dtype(dtype),
            dims=[len(self.parts), *self.parts[0].shape],
        )
        offset = data.tell()
        for part in self.parts:
            data.write(np.ascontiguousarray(part, dtype=dtype.newbyteorder("<")).data.cast("B"))
        length = data.tell() - offset
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
        pad = -data.tell() % 64  # keep the next tensor aligned for memory-mapped readers
        data.write(b"\0" * pad)
        return tensor


def build(
    model: Model,
    *,
    opset: int = DEFAULT_OPSET,
    layout_encoding: str = "transpose",
    external: tuple | None = None,
    runtime: str = "onnxruntime",
) -> onnx.ModelProto:
    """The ONNX model of ``model``'s layers; ``external`` = (binary file, location) streams the
    weights into that file instead of the protobuf."""
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
    names = _NameBook()
    nodes: list[onnx.NodeProto] = []
    stacked: list[_Stacked] = []
    graph_inputs: list[onnx.ValueInfoProto] = []
    graph_outputs: list[onnx.ValueInfoProto] = []
    for layer in model.layers:
        _emit_layer(layer, _Form(layout_encoding, runtime, opset), names, nodes, stacked, graph_inputs, graph_outputs)
    inits = [t.external(*external) if external else t.embedded() for t in stacked]
    opsets = [helper.make_opsetid("", opset)]
    ir_version = helper.find_min_ir_version_for(opsets)
    if ir_version < 4:  # IR 3 wants every initializer declared as a graph input too
        graph_inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "gatepack", graph_inputs, graph_outputs, inits)
    return helper.make_model(graph, opset_imports=opsets, producer_name="gatepack", ir_version=ir_version)


class _NameBook:
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
    layer: RecurrentLayer, form: "_Form", names: _NameBook, nodes: list, inits: list, g_in: list, g_out: list
) -> None:
    """Declare ``layer``'s interface as graph inputs and outputs, and emit its nodes and weights."""
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
                inits.append(_Stacked(batch1, list(value)))
            else:
                inits.append(_Stacked(inputs[role], list(value)))
        elif name is not None:
            inputs[role], new = names.graph_input(name)
            if new:
                g_in.append(helper.make_tensor_value_info(inputs[role], elem_type, shape))
    outputs = {}
    for role, shape in (("y", [n, s, d, h] if batch_major else [s, d, n, h]), ("y_h", state), ("y_c", state)):
        if getattr(itf, role) is not None:
            outputs[role] = names.fresh(getattr(itf, role))
            g_out.append(helper.make_tensor_value_info(outputs[role], elem, shape))
    nodes += layer_nodes(layer, form, names, inits, inputs, outputs, in_node_layout=set(layer.constants))


@dataclass(frozen=True)
class _Form:
    """How a layer's nodes are written: the layout ``encoding`` (transpose, attribute), the ``runtime`` the
    model is for (onnxruntime, directml) and the model's ``opset``."""

    encoding: str = "transpose"
    runtime: str = "onnxruntime"
    opset: int = DEFAULT_OPSET

    def elementary(self, layer: RecurrentLayer) -> bool:
        """Whether ``layer`` is written as elementary operators: its runtime would compute its node otherwise."""
        return self.runtime == "directml" and bool(directml_ep.ep_mishandled(layer))


def layer_nodes(
    layer: RecurrentLayer,
    form: _Form,
    names: "_NameBook",
    inits: list,
    inputs: Mapping[str, str | None],
    outputs: Mapping[str, str | None],
    *,
    node_name: str | None = None,
    weight_names: dict[str, str] | None = None,
    in_node_layout: set[str] | frozenset[str] = frozenset(),
) -> list[onnx.NodeProto]:
    """The nodes computing ``layer`` from the tensors ``inputs`` names per interface role (x,
    sequence_lens, initial_h, initial_c; in the layer's layout) into those ``outputs`` names (y, y_h,
    y_c): one GRU/RNN/LSTM node with every attribute explicit (or, where ``form``'s runtime would compute
    that node otherwise, ``onnx_elementary``'s operators), inside Transposes for a batch-major layer
    under the ``transpose`` encoding. Its weights are appended to ``inits``, named ``weight_names`` (W, R,
    B, P) where those are free, else after the layer; the node is named ``node_name`` (default: the layer's
    name); the roles ``in_node_layout`` names are already in the node's own layout (constants written for
    it), never transposed."""
    wrap = layer.interface.layout == 1 and form.encoding == "transpose"
    nodes: list[onnx.NodeProto] = []
    after: list[onnx.NodeProto] = []

    def transposed(name: str, perm: list, suffix: str) -> str:
        out = names.fresh(f"{name}__{suffix}")
        nodes.append(
            helper.make_node("Transpose", [name], [out], perm=perm, name=names.fresh(f"{layer.name}/{suffix}"))
        )
        return out

    node_in = {role: inputs.get(role) or None for role in INPUT_ROLES}
    if wrap:
        node_in["x"] = transposed(_named(inputs, "x"), _PERM_IN, "seq_major")
        for role in ("initial_h", "initial_c"):
            if (given := node_in[role]) and role not in in_node_layout:
                node_in[role] = transposed(given, _PERM_IN, f"{role}_dir_major")
    node_out: dict[str, str | None] = {}
    for key, perm in (("y", _PERM_Y), ("y_h", _PERM_YH), ("y_c", _PERM_YH)):
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
    if form.elementary(layer):

        def constant(name: str, value: np.ndarray) -> str:
            fresh = names.fresh(name)
            inits.append(_Stacked(fresh, list(value)))
            return fresh

        nodes += onnx_elementary.elementary_nodes(layer, names.fresh, constant, node_in, node_out, form.opset)
    else:
        nodes.append(_recurrent_node(layer, form, names, inits, node_in, node_out, node_name, weight_names or {}))
    return nodes + after


def _named(tensors: Mapping[str, str | None], role: str) -> str:
    """The name of a tensor every layer has (X)."""
    name = tensors[role]
    assert name, f"no {role} tensor named"
    return name


def _recurrent_node(
    layer: RecurrentLayer,
    form: _Form,
    names: "_NameBook",
    inits: list,
    node_in: dict[str, str | None],
    node_out: dict[str, str | None],
    node_name: str | None,
    preferred: dict[str, str],
) -> onnx.NodeProto:
    """The layer's own GRU/RNN/LSTM node on the tensors ``node_in``/``node_out`` name (already in its layout)."""
    weight_prefix = layer.name.replace("/", ".")

    def weight(role: str, parts: list[np.ndarray]) -> str:
        name = names.fresh(preferred.get(role, f"{weight_prefix}.{role}"))
        inits.append(_Stacked(name, parts))
        return name

    # X W R B sequence_lens initial_h initial_c P, as the ONNX operators number their inputs
    node_inputs = [_named(node_in, "x"), weight("W", [p.W for p in layer.directions])]
    node_inputs += [weight("R", [p.R for p in layer.directions]), "", node_in["sequence_lens"] or "", "", "", ""]
    if layer.has_bias or any(p.Wb.any() or p.Rb.any() for p in layer.directions):
        node_inputs[3] = weight("B", [np.concatenate([p.Wb, p.Rb]) for p in layer.directions])
    node_inputs[5], node_inputs[6] = node_in["initial_h"] or "", node_in["initial_c"] or ""
    if layer.has_peepholes:
        node_inputs[7] = weight("P", [p.P for p in layer.directions if p.P is not None])  # every direction's
    while node_inputs and not node_inputs[-1]:
        node_inputs.pop()
    node_outputs = [node_out.get(key) or "" for key in ("y", "y_h", "y_c")]
    while node_outputs and not node_outputs[-1]:
        node_outputs.pop()
    attrs = _attributes(layer)
    if layer.interface.layout == 1 and form.encoding == "attribute":
        attrs["layout"] = 1
    name = names.fresh(layer.name) if node_name is None else node_name
    return helper.make_node(layer.cell.op_name, node_inputs, node_outputs, name=name, **attrs)


def _attributes(layer: RecurrentLayer) -> dict:
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


# ---------------------------------------------------------------------------------------- findings


def check(
    layer: RecurrentLayer,
    *,
    opset: int | None = None,
    layout_encoding: str = "transpose",
    external_data: bool | None = None,
    runtime: str | None = None,
) -> list[Finding]:
    """Findings for writing ``layer`` as ONNX (every canonical layer is expressible); for ``runtime``
    ``directml``, in the form onnxruntime's DirectML provider computes as ONNX specifies."""
    op = layer.cell.op_name
    if runtime_name(runtime) == "directml":
        found = _directml_findings(layer, opset, check(layer, opset=opset, layout_encoding=layout_encoding))
        if layer.interface.layout == 1 and layout_encoding == "attribute":
            found = [f for f in found if f.feature != "layout"] + [
                Finding(
                    "layout",
                    Status.UNSUPPORTED,
                    "layout=1 attribute: onnxruntime's DirectML provider does not take it",
                    alternative="leave out --onnx-layout: Transposes around a layout-0 node",
                )
            ]
        return found
    found = [
        Finding("cell", Status.EXACT, f"{op} operator, opset {DEFAULT_OPSET if opset is None else opset}"),
        Finding("direction", Status.EXACT, layer.direction.value),
        Finding("activations", Status.EXACT, f"{layer.activation_summary()} (names and parameters written explicitly)"),
        Finding("bias", Status.EXACT, "B [D, 2*G*H] = [Wb, Rb]" if layer.has_bias else "no bias (zeros)"),
    ]
    if layer.cell.spec.reset_placement:
        found.append(Finding("linear_before_reset", Status.EXACT, str(int(layer.linear_before_reset))))
    if layer.has_peepholes:
        found.append(Finding("peepholes", Status.EXACT, "P [D, 3H] (i, o, f) kept"))
    if layer.input_forget:
        found.append(Finding("input_forget", Status.EXACT, "input_forget=1 (f = 1 - i)"))
    if layer.clip is not None:
        found.append(Finding("clip", Status.EXACT, f"clip={layer.clip:g}"))
    itf = layer.interface
    if itf.sequence_lens:
        found.append(Finding("sequence_lens", Status.EXACT, "sequence_lens input kept"))
    for role in ("initial_h", "initial_c"):
        if getattr(itf, role):
            found.append(Finding(role, Status.EXACT, f"{role} input kept"))
    if itf.layout == 1:
        if layout_encoding == "transpose":
            found.append(
                Finding(
                    "layout",
                    Status.REPACKED,
                    "batch-major interface kept with Transpose nodes around a layout-0 node (onnxruntime rejects "
                    "layout=1; OpenVINO's importer ignores it)",
                )
            )
        else:
            found.append(
                Finding(
                    "layout",
                    Status.EXACT,
                    "layout=1 attribute",
                    warning="onnxruntime rejects layout=1 and OpenVINO's ONNX importer ignores it",
                )
            )
    else:
        found.append(Finding("layout", Status.EXACT, "layout 0 (sequence-major)"))
    dtype_warning = (
        f"onnxruntime's CPU {op} does not run float64"
        if layer.cell in (Cell.GRU, Cell.LSTM) and layer.dtype == np.float64
        else None
    )
    found.append(Finding("dtype", Status.EXACT, layer.interface.dtype, warning=dtype_warning))
    found.append(Finding("shapes", Status.EXACT, f"S={dim_text(itf.seq_length)}, N={dim_text(itf.batch_size)}"))
    return found


def _directml_findings(layer: RecurrentLayer, opset: int | None, plain: list[Finding]) -> list[Finding]:
    """``plain`` (the onnxruntime findings) restated for onnxruntime's DirectML provider: each feature it would
    compute otherwise decomposed (``onnx_elementary``), what it takes as its own said so, a refusal for the rest."""
    by_feature = {f.feature: f for f in plain}
    reasons = directml_ep.ep_mishandled(layer)
    provider = "onnxruntime's DirectML provider"
    if reasons:
        cell = Finding(
            "cell",
            Status.DECOMPOSED,
            f"elementary ONNX operators (a Loop over time per direction: MatMul, Add, Mul, Where, Clip and the "
            f"activations' own operators) in place of the {layer.cell.op_name} node, which {provider} would compute "
            f"otherwise: {'; '.join(reasons)}",
        )
    else:
        cell = Finding(
            "cell",
            Status.EXACT,
            f"{by_feature['cell'].detail}, as {provider} maps it onto DML_OPERATOR_{layer.cell.op_name}: layout 0, "
            "activation names in its spelling, every alpha/beta written (its defaults differ from onnxruntime CPU's)",
        )
    by_feature["cell"] = cell
    names = {a.name for p in layer.directions for a in p.activations}
    if names & {"Affine", "Softplus"}:
        by_feature["activations"] = Finding(
            "activations",
            Status.DECOMPOSED,
            f"{layer.activation_summary()}: {', '.join(sorted(names & {'Affine', 'Softplus'}))} as elementary "
            f"operators ({provider} rejects Affine and leaves Softplus's Steepness at 0)",
        )
    if layer.clip is not None:
        by_feature["clip"] = (
            Finding("clip", Status.DECOMPOSED, f"clip={layer.clip:g} as a Clip of every gate's pre-activation")
            if reasons
            else Finding(
                "clip",
                Status.EXACT,
                f"clip={layer.clip:g}: {provider} passes it to DML_LSTM_OPERATOR_DESC's ClipThreshold",
            )
        )
    if layer.interface.sequence_lens:
        by_feature["sequence_lens"] = (
            Finding("sequence_lens", Status.DECOMPOSED, "sequence_lens as Where masks (onnxruntime's rule)")
            if reasons
            else Finding(
                "sequence_lens",
                Status.EXACT,
                f"sequence_lens input kept ({provider} passes it as DirectML's SequenceLengthsTensor)",
                warning=directml_ep.SEQUENCE_LENGTHS_NOTE,
            )
        )
    refused = _directml_refusal(layer, opset)
    if refused is not None:
        by_feature[refused.feature] = refused
    return list(by_feature.values())


# ----------------------------------------------------------------------------------------- running


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the ONNX file at ``path`` on onnxruntime (CPU); a DynamicQuantizeLSTM's int8 weights run as the
    equal uint8 ones (``onnx_quantized.exact_kernel_source``)."""
    return _run_session(_session(onnx_quantized.exact_kernel_source(Path(path)), str(path)), inputs, str(path))


def run_isolated(layer: RecurrentLayer, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the layer's original ONNX node(s) alone on onnxruntime, with its original weights."""
    isolated = layer.provenance.handle if layer.provenance and layer.provenance.of(FORMAT) else None
    if not isinstance(isolated, _Isolated):
        raise UsageError(f"layer {layer.name!r} was not read from ONNX")
    if isolated.opset < 7:
        raise RuntimeFailure(
            f"layer {layer.name!r}: onnxruntime has no kernel for opset {isolated.opset} recurrent operators",
            hint="use --engine numpy",
        )
    return _run_isolated(isolated, layer.interface, inputs, f"layer {layer.name!r}")


def _run_isolated(isolated: _Isolated, itf: Interface, inputs: dict[str, np.ndarray], label: str) -> dict:
    """Run original nodes alone on onnxruntime: the interface's inputs in, its Y, Y_h (and Y_c) out."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(itf.dtype))
    graph_inputs = [helper.make_tensor_value_info(itf.x, elem, None)]
    if itf.sequence_lens and itf.sequence_lens not in isolated.constants:
        graph_inputs.append(helper.make_tensor_value_info(itf.sequence_lens, onnx.TensorProto.INT32, None))
    for role in ("initial_h", "initial_c"):
        if getattr(itf, role) and getattr(itf, role) not in {**isolated.constants, **isolated.broadcast}:
            graph_inputs.append(helper.make_tensor_value_info(getattr(itf, role), elem, None))
    outputs = [
        helper.make_tensor_value_info(name, elem, None) for name in (getattr(itf, r) for r in OUTPUT_ROLES) if name
    ]
    # Large constants (the weights) are fed as inputs, straight from their arrays: serialising them
    # into the session's protobuf would copy them twice and dominate the run.
    fed = {k: np.ascontiguousarray(v) for k, v in isolated.constants.items() if v.nbytes >= _FEED_AS_INPUT}
    graph_inputs += [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in fed.items()
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in isolated.constants.items() if k not in fed]
    nodes = isolated.nodes
    if isolated.blank:  # inputs that are no inputs of the layer (zeros sized like X): absent, as ONNX allows
        nodes = [copy_node(n, {name: "" for name in isolated.blank}) for n in nodes]
    for name, state in isolated.broadcast.items():  # a learned state repeated along X's batch, as the model does
        inits.append(numpy_helper.from_array(state, f"{name}__batch1"))
        node = next(n for n in nodes if cell_of_op(n.op_type) and name in n.input)
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        batch_axis = 0 if layout else 1
        at = nodes.index(node)  # just before the node: its X may come from the Transposes before it
        nodes = (
            nodes[:at]
            + broadcast_state_nodes(f"{name}__batch1", batch_axis, node.input[0], batch_axis, name)
            + nodes[at:]
        )
    graph = helper.make_graph(nodes, "isolated", graph_inputs, outputs, inits)
    opsets = [helper.make_opsetid("", isolated.opset)]
    opsets += [helper.make_opsetid(d, 1) for d in sorted({n.domain for n in isolated.nodes} - set(_ONNX_DOMAINS))]
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets[:1]))
    return _run_session(_session(proto.SerializeToString(), label), {**inputs, **fed}, label)


_FEED_AS_INPUT = 1 << 16  # bytes


run_layer_native = run_isolated


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The model's inputs as (name, dtype, dims); a dim is an int, a symbol, or None."""
    proto = load_proto(Path(path))
    inits = {t.name for t in proto.graph.initializer}
    found = []
    for value in proto.graph.input:
        if value.name in inits:
            continue
        dims = _dims(value.type)
        if dims is None or not value.type.tensor_type.elem_type:
            raise InputError(
                f"{path}: input {value.name!r} has no declared element type and shape, so gatepack cannot draw "
                "inputs for it"
            )
        found.append((value.name, np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)), dims))
    return found


def graph_outputs(path: str | Path) -> list[tuple[str, np.dtype | None, list | None]]:
    """The model's outputs as (name, dtype, dims), each None where the model does not declare it."""
    found = []
    for value in load_proto(Path(path)).graph.output:
        elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
        found.append((value.name, np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None, _dims(value.type)))
    return found


def _run_session(session, inputs: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    wanted = [i.name for i in session.get_inputs()]
    missing = [name for name in wanted if name not in inputs]
    if missing:
        raise InputError(f"{label}: missing input(s) {missing}", hint=f"the model takes {wanted}")
    feed = {name: inputs[name] for name in wanted}
    try:
        results = session.run(None, feed)
    except Exception as err:
        raise RuntimeFailure(f"{label}: onnxruntime failed: {_ort_message(err)}", hint=_ort_hint(err)) from None
    return {out.name: value for out, value in zip(session.get_outputs(), results)}


def _ort_message(err: Exception) -> str:
    """onnxruntime's message without its status prefix, source paths and C++ signatures."""
    text = " ".join(str(err).split()).split(" : ")[-1]
    text = re.sub(r"/onnxruntime_src/\S+:\d+\s+(\S+\([^)]*\)\s+)?", "", text)
    text = re.sub(r"\S+( [=!<>]+ \S+)? was false\. ", "", text).strip()
    return text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " ..."  # whole words


def _session(source, label: str):
    from gatepack.converters.runtimes import onnxruntime

    ort = onnxruntime()

    options = ort.SessionOptions()
    options.log_severity_level = 4  # failures are reported by gatepack, once, on one line
    # Every session here runs once or twice and is dropped: repacking the weights into the GEMM's own
    # layout when the session is made (onnxruntime's default) would cost more than it saves; for a
    # stack of 4 bidirectional LSTMs (H = 1024, 369 MB) it took 0.46 s against 0.02 s, for runs
    # 0.05 s slower, and it holds a second copy of the weights.
    options.add_session_config_entry("session.disable_prepacking", "1")
    # For the same reason its worker threads do not spin between the runs waiting for more work (the
    # default): that spinning only pays off for back-to-back runs, and it holds the cores the run itself and
    # every other process need (a verification of a one-layer model took ~20 ms instead of ~1 ms on a busy
    # 2-core machine). The threads still share each run's work.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise RuntimeFailure(
            f"{label}: onnxruntime cannot load the model: {_ort_message(err)}", hint=_ort_hint(err)
        ) from None


def _ort_hint(err: Exception) -> str | None:
    if "layout == 1" in str(err):
        return "onnxruntime rejects layout=1; use --engine numpy, or write the model with the transpose layout encoding"
    return None


IMPLEMENTATION = FormatImplementation(
    whole_model_finding=whole_model_finding,
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    graph_inputs=graph_inputs,
    graph_outputs=graph_outputs,
    compute_dtype=onnx_quantized.compute_dtype,
)

"""ONNX reading: every GRU/RNN/LSTM node of a model (in any subgraph) into a canonical layer, with its
weights unpacked from initializers, ``Constant`` nodes or folded cones, its activations and its interface
(Transposes around a layout-0 node read as one batch-major layer); Loops and unrolled cells lifted
(``onnx_lifting``), each lift proven on onnxruntime against the original nodes (``onnx_running``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.description import constant_from_layout
from gatepack.converters.errors import InputError, NoRecurrentLayerError, where
from gatepack.converters.findings import Finding, Status, operator_list
from gatepack.converters.formats import onnx_quantized
from gatepack.converters.formats.onnx_graph import (
    FORMAT,
    ONNX_DOMAINS,
    PERM_IN,
    PERM_Y,
    PERM_YH,
    Isolated,
    external_file,
    isolated_record,
    load_proto,
    map_external,
    type_dims,
    value_types,
    walk_nodes,
)
from gatepack.converters.formats.onnx_lifting import node_inputs, perm_of
from gatepack.converters.formats.onnx_running import run_original_nodes
from gatepack.converters.lifting import LiftRefused, Recurrence, candidates_from_constants, lift
from gatepack.converters.model import Model
from gatepack.schemas.activations import KINDS, DefaultsPolicy, ResolvedDefault, canonical_name, resolve_activations
from gatepack.schemas.cells import cell_of_op
from gatepack.schemas.layer import (
    CONSTANT_ROLES,
    OUTPUT_ROLES,
    ROLE_LABELS,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
)

_NONDETERMINISTIC = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}

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


def read(path: str | Path, *, defaults: DefaultsPolicy = DefaultsPolicy.ONNXRUNTIME) -> Model:
    """Read every GRU, RNN and LSTM node of the ONNX model at ``path`` into canonical layers."""
    path = Path(path)
    proto = load_proto(path)
    return _Reader(path, proto, DefaultsPolicy(defaults)).read()


def reread(path: str | Path, proto: onnx.ModelProto) -> Model:
    """Read the layers of ``proto``, a rewrite of the model at ``path`` held in memory (e.g. ``in_place``'s): the
    layers' handles hold ``proto``'s own nodes."""
    return _Reader(Path(path), proto, DefaultsPolicy.ONNXRUNTIME).read()


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


class _Reader:
    def __init__(self, path: Path, proto: onnx.ModelProto, policy: DefaultsPolicy) -> None:
        self.path = path
        self.proto = proto
        self.policy = policy
        self.base_dir = str(path.parent)
        opset = next((o.version for o in proto.opset_import if o.domain in ONNX_DOMAINS), None)
        if opset is None:
            raise InputError(f"{path}: the model imports no ai.onnx opset")
        self.opset = opset
        newest = onnx.defs.onnx_opset_version()
        if not 1 <= self.opset <= newest:
            raise InputError(
                f"{path}: ai.onnx opset {self.opset} is outside 1..{newest}, the opsets this onnx package defines"
            )
        self.types = value_types(proto)
        self.layers: list[RecurrentLayer] = []
        self.notes: dict[str, list[Finding]] = {}
        self.skipped: list[tuple[str, str]] = []
        self.op_types: set[str] = set()
        self.external_data = False

    def read(self) -> Model:
        for node, scope, name in self._walk(self.proto.graph, None, ""):
            self.op_types.add(node.op_type)
            if node.domain not in ONNX_DOMAINS:
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
        isolated = Isolated(region.nodes + region.adapters, region.constants, self.opset, region)
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
            run_original=lambda feed: run_original_nodes(isolated, itf, feed, label),
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
        foreign = onnx_quantized.foreign_operators(walk_nodes(self.proto.graph), ONNX_DOMAINS)
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
                mapped = map_external(tensor, Path(self.base_dir))
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
            if shapes is not None and node.op_type == "Shape" and node.domain in ONNX_DOMAINS:
                source = owner.lookup(node.input[0])
                if source is not None and source[0] == "input":
                    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                    shapes[current] = (node.input[0], attrs.get("start", 0), attrs.get("end"))
                    continue
            if node.op_type in _NONDETERMINISTIC or node.domain not in ONNX_DOMAINS:
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
                dims = type_dims(self.types.get(source)) or []
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
        """One GRU/RNN/LSTM node as a layer: its attributes checked against its operator version, its weights
        and their shapes, its activations, clip and layout, then its interface and the inputs it holds."""
        cell = cell_of_op(node.op_type)
        assert cell is not None  # (called for the recurrent ops only)
        at = where(self.path, name)
        version = onnx.defs.get_schema(node.op_type, self.opset).since_version
        attrs = self._node_attributes(node, cell, version, at)
        inputs = list(node.input) + [""] * (8 - len(node.input))
        if not inputs[0] or not inputs[1] or not inputs[2]:
            raise InputError(f"{at}{node.op_type} needs inputs X, W and R; got {list(node.input)}")

        w = self.constant(inputs[1], scope, name, "W")
        r = self.constant(inputs[2], scope, name, "R")
        b = self.constant(inputs[3], scope, name, "B") if inputs[3] else None
        p = self.constant(inputs[7], scope, name, "P") if inputs[7] else None
        hidden, direction = _hidden_and_direction(attrs, r, at)
        _check_weights(cell, direction, hidden, w, r, b, p, at)

        notes: list[Finding] = []
        per_dir = self._activations(node, cell, direction, attrs, at, notes)
        clip = self._clip(cell, attrs, at, notes)
        layout = _layout(node, version, attrs, at, notes)
        weights = ((inputs[1], w), (inputs[2], r), (inputs[3], b), (inputs[7], p))
        isolated = Isolated([node], {k: v for k, v in weights if k and v is not None}, self.opset)
        computed = self._computed_inputs(scope, inputs, layout, name)
        outputs = list(node.output) + ["", "", ""]
        interface = self._interface(node, scope, inputs, outputs, layout, w, hidden, at, isolated, computed)
        constants = self._held_constants(scope, interface, layout, name, w.dtype, isolated, computed)
        interface = _without_zero_states(interface, isolated, notes)
        provenance = Provenance(
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
        )
        try:
            layer = RecurrentLayer(
                name=name,
                cell=cell,
                input_size=int(w.shape[2]),
                hidden_size=hidden,
                direction=direction,
                directions=_direction_params(cell.gates * hidden, w, r, b, p, per_dir),
                interface=interface,
                linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
                input_forget=bool(attrs.get("input_forget", 0)),
                clip=clip,
                has_bias=b is not None,
                constants=constants,
                provenance=provenance,
            )
        except SpecError as err:
            raise InputError(f"{self.path}: {err}") from None
        if notes:
            self.notes[name] = notes
        return layer

    @staticmethod
    def _node_attributes(node: onnx.NodeProto, cell: Cell, version: int, at: str) -> dict:
        """The node's attributes by name, each of the type its operator schema gives and part of this operator
        version; the node's inputs and outputs no more than the operator takes."""
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
        return attrs

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
        isolated: Isolated,
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
        """The activations of each direction, spelled canonically, with their alpha/beta (a default the
        runtimes disagree on filled by the reader's policy and noted)."""
        per = cell.activation_count
        d = direction.count
        canonical = _activation_names(node, cell, direction, attrs, at, notes)
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
        notes += map(self._default_note, filled)
        return [resolved[k * per : (k + 1) * per] for k in range(d)]

    def _default_note(self, item: ResolvedDefault) -> Finding:
        """The note for an activation parameter the model leaves unset, filled by the reader's policy."""
        if not item.ambiguous:
            return Finding(
                "activation defaults",
                Status.EXACT,
                f"{item.activation} {item.parameter} is not set; every runtime uses {item.value:g}, written explicitly",
            )
        other = "has no default" if item.other_value is None else f"uses {item.other_value:g}"
        return Finding(
            "activation defaults",
            Status.EXACT,
            f"{item.activation} {item.parameter} is not set; gatepack uses {item.value:g} "
            f"({self.policy.value} policy) and writes it explicitly, while the "
            f"{'ONNX operator' if self.policy is DefaultsPolicy.ONNXRUNTIME else 'onnxruntime'} "
            f"default {other}",
            warning="the model relies on a default that runtimes disagree on",
            alternative="set the parameter explicitly, or choose the other policy with --activation-defaults",
        )

    def _check_state_shape(
        self, scope: _Scope, name: str, label: str, layout: int, directions: int, hidden: int, at: str
    ) -> None:
        """An initial state whose known shape (declared, inferred or an initializer's) does not fit the node
        is refused: onnxruntime would refuse it at run time."""
        found = scope.lookup(name)
        initializer = found[1] if found is not None else None
        dims = list(initializer.dims) if isinstance(initializer, onnx.TensorProto) else type_dims(self.types.get(name))
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
        isolated: Isolated,
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
        x_dims = type_dims(self.types.get(names["x"]))
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


def _activation_names(
    node: onnx.NodeProto, cell: Cell, direction: Direction, attrs: dict, at: str, notes: list[Finding]
) -> list[str]:
    """The node's activation names (its cell's defaults when it lists none), as many as the cell takes per
    direction, in gatepack's canonical spelling (another spelling is noted: DirectML accepts only the exact one)."""
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
    return canonical


def _hidden_and_direction(attrs: dict, r: np.ndarray, at: str) -> tuple[int, Direction]:
    """The node's hidden_size (required: onnxruntime refuses a node without it) and direction."""
    if "hidden_size" not in attrs:
        guess = f"; R has shape {list(r.shape)}, which suggests hidden_size={r.shape[-1]}" if r.ndim == 3 else ""
        raise InputError(f"{at}attribute hidden_size is missing (onnxruntime requires it){guess}")
    hidden = int(attrs["hidden_size"])
    direction_text = _text(attrs.get("direction", b"forward"))
    try:
        direction = Direction(direction_text)
    except ValueError:
        raise InputError(f"{at}direction {direction_text!r} is not forward, reverse or bidirectional") from None
    return hidden, direction


def _check_weights(
    cell: Cell,
    direction: Direction,
    hidden: int,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None,
    p: np.ndarray | None,
    at: str,
) -> None:
    """W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] and P [D, peepholes*H], all of W's float type."""
    d, gh = direction.count, cell.gates * hidden
    if hidden < 1:
        raise InputError(f"{at}hidden_size {hidden} must be positive")
    if w.ndim != 3 or w.shape[:2] != (d, gh):
        raise InputError(
            f"{at}W has shape {list(w.shape)}, expected [{d}, {gh}, input_size] for hidden_size={hidden}, "
            f"direction={direction.value}"
        )
    if r.shape != (d, gh, hidden):
        raise InputError(f"{at}R has shape {list(r.shape)}, expected [{d}, {gh}, {hidden}] for hidden_size={hidden}")
    if b is not None and b.shape != (d, 2 * gh):
        raise InputError(f"{at}B has shape {list(b.shape)}, expected [{d}, {2 * gh}] for hidden_size={hidden}")
    peepholes = len(cell.spec.peepholes)
    if p is not None and p.shape != (d, peepholes * hidden):
        raise InputError(
            f"{at}P has shape {list(p.shape)}, expected [{d}, {peepholes * hidden}] for hidden_size={hidden}"
        )
    if w.dtype.name not in ("float16", "float32", "float64"):
        raise InputError(f"{at}W is {w.dtype}; recurrent weights are float16, float32 or float64")
    for label, array in (("R", r), ("B", b), ("P", p)):
        if array is not None and array.dtype != w.dtype:
            raise InputError(f"{at}{label} is {array.dtype} but W is {w.dtype}")


def _layout(node: onnx.NodeProto, version: int, attrs: dict, at: str, notes: list[Finding]) -> int:
    """The node's layout (0 or 1); an old version's output_sequence noted (Y is produced when named)."""
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise InputError(f"{at}layout {layout} is not 0 or 1")
    if "output_sequence" in attrs:
        notes.append(
            Finding(
                "outputs",
                Status.EXACT,
                f"output_sequence={attrs['output_sequence']} ({node.op_type}-{version}): Y is produced when it "
                "is named",
            )
        )
    return layout


def _without_zero_states(interface: Interface, isolated: Isolated, notes: list[Finding]) -> Interface:
    """The interface without the initial states the model computes as zeros from its input's shape."""
    zero_states = [r for r in ("initial_h", "initial_c") if getattr(interface, r) in isolated.blank]
    if not zero_states:
        return interface
    notes.append(
        Finding(
            "initial state",
            Status.EXACT,
            f"{', '.join(ROLE_LABELS[r] for r in zero_states)}: zeros computed from the shape of the model's "
            "input (checked for two sizes), which is no initial state",
        )
    )
    cleared: dict[str, Any] = dict.fromkeys(zero_states)  # no tensor (Any: replace checks each field's type)
    return replace(interface, **cleared)


def _direction_params(
    gh: int, w: np.ndarray, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None, per_dir: list[list]
) -> tuple[DirectionParams, ...]:
    """Per direction k: W[k], R[k], B[k] split into its input and recurrent halves (zeros without B), P[k]."""
    zeros = np.zeros(gh, dtype=w.dtype)
    return tuple(
        DirectionParams(
            W=w[k],
            R=r[k],
            Wb=b[k, :gh] if b is not None else zeros,
            Rb=b[k, gh:] if b is not None else zeros,
            activations=tuple(per_dir[k]),
            P=None if p is None else p[k],
        )
        for k in range(len(per_dir))
    )


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
        if holds_graph or depends or node.op_type in _NONDETERMINISTIC or node.domain not in ONNX_DOMAINS:
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
    for key, perm in (("x", PERM_IN), ("initial_h", PERM_IN), ("initial_c", PERM_IN)):
        if names[key] is None or names[key] in held:
            continue
        prod = scope.producers.get(names[key])
        if prod is None or prod.op_type != "Transpose" or perm_of(prod) != perm:
            return None
        if prod.input[0] not in scope.inputs or len(scope.consumers.get(names[key], [])) != 1:
            return None
        outer[key] = prod.input[0]
        before.append(prod)
    for key, perm in (("y", PERM_Y), ("y_h", PERM_YH), ("y_c", PERM_YH)):
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

"""The value of a tensor a recurrent node reads when constants compute it (its weights, or an initial state or
sequence_lens the model holds): an initializer (external data mapped, contained in the model's directory), a
``Constant`` node, or the cone of nodes computing it from constants alone, folded with onnx's reference
evaluator. A state computed from constants and the *shapes* of graph inputs (zeros or a learned state expanded
to X's batch, as exporters write them) is folded for two sizings of the symbolic dimensions and held when it is
one batch-1 state repeated along the batch. ``constant_feeders``: the nodes computing only a layer's constants,
part of the layer rather than operators around it.

(``onnx.folding`` is another pass: a whole model's constants and shapes folded for given input shapes.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.errors import InputError, where
from gatepack.converters.formats.onnx.graph import ONNX_DOMAINS, Scope, external_file, map_external, type_dims

NONDETERMINISTIC = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
}
"""Operators whose output is no constant, whatever their inputs."""


class ModelConstants:
    """The constants of one model (``proto``, read from ``path``; ``types``: its tensors' static types), read
    and folded on demand. ``external_data``: whether a tensor read so far is stored outside the model file."""

    def __init__(self, path: Path, proto: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> None:
        self.path = path
        self.proto = proto
        self.types = types
        self.base_dir = str(path.parent)
        self.external_data = False

    def tensor(self, tensor: onnx.TensorProto) -> np.ndarray:
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

    def constant(self, name: str, scope: Scope, layer: str, role: str) -> np.ndarray:
        """The value of tensor ``name`` if it is a constant (folding any cone of operators)."""
        at = where(self.path, layer)
        found = scope.lookup(name)
        if found is None:
            raise InputError(f"{at}{role} {name!r} is not defined anywhere in the model")
        kind, obj, _ = found
        if isinstance(obj, onnx.TensorProto):  # an initializer
            return self.tensor(obj)
        if kind == "input":
            raise InputError(
                f"{at}{role} {name!r} is a graph input, not a constant",
                hint="gatepack needs constant weights; make them initializers",
            )
        nodes: list[onnx.NodeProto] = []
        inits: dict[str, np.ndarray] = {}
        self._collect_cone(name, scope, nodes, inits, set(), at, role)
        if len(nodes) == 1 and nodes[0].op_type == "Constant" and [a.name for a in nodes[0].attribute] == ["value"]:
            return self.tensor(nodes[0].attribute[0].t)
        return self._fold(nodes, inits, name, at, role)

    def _collect_cone(
        self,
        name: str,
        scope: Scope,
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
        stack: list[tuple[str, Scope | onnx.NodeProto]] = [(name, scope)]  # a node: expanded, emitted now
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
                inits[current] = self.tensor(node)
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
            if node.op_type in NONDETERMINISTIC or node.domain not in ONNX_DOMAINS:
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

    def state_from_shapes(self, name: str, scope: Scope, layer: str, role: str, node_layout: int) -> np.ndarray | None:
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
        if holds_graph or depends or node.op_type in NONDETERMINISTIC or node.domain not in ONNX_DOMAINS:
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

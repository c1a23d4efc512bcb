"""Folding an ONNX model for given input shapes: everything that depends only on constants and static shapes.

``fold(proto, input_shapes)`` returns a new model in which

* the graph inputs' symbolic dimensions that ``input_shapes`` gives are fixed (a symbol shared by several
  inputs takes the same size in all of them);
* every node whose inputs are all constants (initializers, ``Constant`` nodes, values folded before it), and
  every ``Shape``/``Size`` of a tensor whose shape is fully static (ONNX shape inference with data
  propagation), is evaluated by ``onnx.reference`` on that one node and becomes a constant: an initializer of
  the main graph, a ``Constant`` node inside a subgraph (repeated until nothing more folds, shape inference
  re-run in between, so a ``Reshape`` to a folded shape makes the next ``Shape`` static);
* an ``If`` whose condition folds is replaced by its chosen branch: the branch's nodes move into the
  enclosing graph (their names renamed where they would clash), its outputs become the ``If``'s;
* Loop/Scan bodies and the ``If`` branches that stay are folded inside, outer-scope constants visible;
* nodes no graph output depends on any more are removed.

Nothing that depends on an input's values folds; random operators, foreign domains and control flow other
than a decided ``If`` never fold. A folded result larger than ``LARGE_ELEMENTS`` that is bigger than the
constants it was computed from (``ConstantOfShape``, ``Expand``, ``Tile``, ``Range`` ...) stays its node
unless everything reading it folds too (its value still feeds the folding). Inputs, outputs and their names,
the opset, the functions and the metadata are kept. Initializers stored as external data are not read (they
do not fold; the nodes reading them stay).
"""

from __future__ import annotations

import warnings
from collections import Counter, deque
from collections.abc import Iterator, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.errors import UsageError

ONNX_DOMAINS = ("", "ai.onnx")
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
LARGE_ELEMENTS = 1 << 20  # a folded tensor larger than this (and than its sources) stays computed
_MAX_ROUNDS = 10
_GRAPH_ATTRIBUTES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def fold(proto: onnx.ModelProto, input_shapes: dict[str, list[int]] | None = None) -> onnx.ModelProto:
    """A copy of ``proto`` with its graph inputs' symbolic dimensions fixed by ``input_shapes`` (input name ->
    dims; a given shape must have the declared rank and agree with its static dims, else UsageError) and
    everything computed from constants and static shapes alone folded (module docstring). ``proto`` is not
    changed."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    if input_shapes:
        fix_input_shapes(model.graph, input_shapes)
    declared = {v.name: v for graph in subgraphs_of(model.graph) for v in graph.value_info}
    for graph in subgraphs_of(model.graph):
        del graph.value_info[:]  # stale symbolic shapes would stop inference from refining them
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    for _ in range(_MAX_ROUNDS):
        folder = _Folder(opsets, _inferred_types(model), _name_counts_in([model.graph]))
        folder.fold_graph(model.graph, {}, main=True)
        if not folder.changed:
            break
    remove_dead_nodes(model.graph)
    return _with_value_info(model, declared)


def specialise(
    proto: onnx.ModelProto, values: Mapping[str, object], input_shapes: dict[str, list[int]] | None = None
) -> onnx.ModelProto:
    """A copy of ``proto`` in which each input ``values`` names (input name -> a number, a list or an array) is a
    constant of that value (an initializer of the input's declared type, no longer a graph input), then folded
    (``fold``: an ``If`` it decides is replaced by its branch). UsageError (one line) for an unknown input, a value
    of another shape than the declared one or one its type changes (16000.5 for an int64)."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in initializers}
    for name, given in values.items():
        if name not in inputs:
            raise UsageError(f"--input-value: the model has no input {name!r}", hint=f"its inputs: {list(inputs)}")
        declared = inputs[name]
        dtype = helper.tensor_dtype_to_np_dtype(declared.type.tensor_type.elem_type)
        value = np.asarray(given)
        dims = _dims_text(declared)
        if (
            value.dtype.kind not in "biuf"
            or value.ndim != len(dims)
            or any(isinstance(d, int) and d != v for d, v in zip(dims, value.shape))
        ):
            raise UsageError(f"--input-value: input {name!r} is declared {dims}, given {given!r}")
        typed = value.astype(dtype)
        if not np.array_equal(typed, value):
            raise UsageError(f"--input-value: {name}={given!r} is not a value of its type {dtype}")
        graph.input.remove(declared)
        graph.initializer.append(numpy_helper.from_array(typed, name))
    return fold(model, input_shapes)


def if_deciders(proto: onnx.ModelProto, condition: str | None = None) -> tuple[dict[str, int | None], bool]:
    """What the condition of an ``If`` (``condition``: its tensor name; None: every ``If`` of the model) is computed
    from (``deciders``)."""
    ifs = [n for graph in subgraphs_of(proto.graph) for n in graph.node if n.op_type == "If"]
    return deciders(proto, [n.input[0] for n in ifs if condition in (None, n.input[0])])


def deciders(proto: onnx.ModelProto, tensors: list[str]) -> tuple[dict[str, int | None], bool]:
    """What ``tensors`` are computed from: the graph inputs whose values they read, each with the constant scalar an
    ``Equal`` compares it with (None when none does), and whether they read a tensor's shape (``Shape``/``Size``:
    fixing the input shapes decides it)."""
    producers = {out: node for graph in subgraphs_of(proto.graph) for node in graph.node for out in node.output}
    constants = {t.name: numpy_helper.to_array(t) for graph in subgraphs_of(proto.graph) for t in graph.initializer}
    constants.update(
        (n.output[0], numpy_helper.to_array(n.attribute[0].t))
        for n in producers.values()
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    )
    inputs = {i.name for i in proto.graph.input} - set(constants)
    pending: list[tuple[str, int | None]] = [(name, None) for name in tensors]
    values: dict[str, int | None] = {}
    shapes, seen = False, set()
    while pending:
        name, compared = pending.pop()
        if name in seen or name in constants:
            continue
        seen.add(name)
        if name in inputs:
            values[name] = compared if values.get(name) is None else values[name]
            continue
        node = producers.get(name)
        if node is None or node.op_type in ("Shape", "Size"):
            shapes = shapes or node is not None
            continue
        scalars = [constants[i] for i in node.input if i in constants and constants[i].size == 1]
        if node.op_type == "Equal" and scalars and scalars[0].dtype.kind in "iu":
            compared = int(scalars[0].reshape(-1)[0])
        pending += [(i, compared) for i in node.input if i]
    return values, shapes


def specialisation_hint(proto: onnx.ModelProto, condition: str | None = None) -> str:
    """'fix input sr with --input-value sr=16000 (the value the model compares it with), ' where an ``If``'s
    condition (``if_deciders``) reads an input's value; '' otherwise."""
    values, _ = if_deciders(proto, condition)
    fixes = [f"{name}={value if value is not None else 'VALUE'}" for name, value in values.items()]
    if not fixes:
        return ""
    return (
        f"specialise the model with --input-value {' --input-value '.join(fixes)} (API: input_values=; the Ifs "
        "it decides become their branch, the artifact no longer takes it), "
    )


_INTEGER_TYPES = {
    onnx.TensorProto.INT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64,
}


def fixing_hint(proto: onnx.ModelProto, tensors: list[str]) -> str:
    """'fix input 'sr' with --input-value sr=VALUE (API: input_values=; what it computes folds, the artifact no
    longer takes it), ' where ``tensors`` (values a target cannot hold computed at run time) are computed from
    integer scalar graph inputs alone (``deciders``: no other input, no tensor's shape), which ``--input-value``
    makes constants; '' otherwise. VALUE is the constant an ``Equal`` compares the input with,
    where one does."""
    if not tensors:
        return ""
    values, shapes = deciders(proto, tensors)
    declared = {i.name: i.type.tensor_type for i in proto.graph.input}
    scalar = all(
        name in declared
        and declared[name].elem_type in _INTEGER_TYPES
        and all(d.HasField("dim_value") and d.dim_value == 1 for d in declared[name].shape.dim)
        for name in values
    )
    if not values or shapes or not scalar:
        return ""
    named = " and ".join(repr(name) for name in values)
    fixes = " ".join(
        f"--input-value {name}={value if value is not None else 'VALUE'}" for name, value in values.items()
    )
    return (
        f"fix input {named} with {fixes} (API: input_values=; what it computes folds, the artifact no longer takes "
        "it), or "
    )


# ------------------------------------------------------------------------------------------ input shapes


def _dims_text(value_info: onnx.ValueInfoProto) -> list:
    return [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in _dims(value_info)]


def _dims(value_info: onnx.ValueInfoProto):
    return value_info.type.tensor_type.shape.dim


def fix_input_shapes(graph: onnx.GraphProto, input_shapes: Mapping[str, list[int]]) -> None:
    """Set the given inputs' dimensions in ``graph`` (in place); each symbol they fix takes its size wherever
    it appears in the graph's inputs and outputs. UsageError (one line) for an unknown input, a size that is
    not an integer >= 1, a rank or static size other than the declared, or one symbol given two sizes."""
    initializers = {t.name for t in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in initializers}
    symbols: dict[str, int] = {}
    for name, given in input_shapes.items():
        if name not in inputs:
            raise UsageError(f"the model has no input {name!r}", hint=f"its inputs: {list(inputs)}")
        sizes = list(given)
        declared = inputs[name]
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in sizes):
            raise UsageError(f"input {name!r}: given shape {sizes} is not a list of sizes >= 1")
        if not declared.type.tensor_type.HasField("shape"):  # rank unknown: the given shape declares it
            declared.type.tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in sizes)
        dims = _dims(declared)
        if len(dims) != len(sizes) or any(d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, sizes)):
            raise UsageError(f"input {name!r} is declared {_dims_text(declared)}, given shape {sizes}")
        for dim, size in zip(dims, sizes):
            if dim.dim_param and symbols.setdefault(dim.dim_param, int(size)) != size:
                raise UsageError(
                    f"input {name!r}: dimension {dim.dim_param!r} is given as {size} and as {symbols[dim.dim_param]}"
                )
            dim.dim_value = int(size)  # clears dim_param
    for value_info in [*graph.input, *graph.output]:
        for dim in _dims(value_info):
            if dim.dim_param in symbols:
                dim.dim_value = symbols[dim.dim_param]


# ------------------------------------------------------------------------------------------ graphs and names


def node_subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held by ``node``'s attributes (If branches, Loop and Scan bodies)."""
    graphs: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def subgraphs_of(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in it, depth first."""
    yield graph
    for node in graph.node:
        for sub in node_subgraphs(node):
            yield from subgraphs_of(sub)


def _defined(graph: onnx.GraphProto) -> set[str]:
    """The tensor names ``graph`` itself defines: its inputs, initializers and node outputs."""
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    return names | {o for node in graph.node for o in node.output if o}


def _name_counts_in(graphs: list[onnx.GraphProto]) -> Counter:
    """How many of ``graphs`` and the graphs nested in them define each tensor name, and how many of their nodes
    bear each node name (a name moved out of a branch clashes when something else has it too)."""
    counts: Counter = Counter()
    for graph in (g for top in graphs for g in subgraphs_of(top)):
        counts.update(_defined(graph))
        counts.update(node.name for node in graph.node if node.name)
    return counts


def _inferred_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Tensor name -> type, from ONNX shape inference with data propagation (declared types where it fails)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # a model inference cannot take (e.g. over 2 GB): fold from the declared types alone
        inferred = model
    types: dict[str, onnx.TypeProto] = {}
    ambiguous: set[str] = set()
    for graph in subgraphs_of(inferred.graph):
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.name in types and types[value.name] != value.type:
                ambiguous.add(value.name)  # one name in several scopes: trust neither
            types[value.name] = value.type
    return {name: t for name, t in types.items() if name not in ambiguous}


def _static_shape(type_proto: onnx.TypeProto | None) -> tuple[int, ...] | None:
    if type_proto is None or not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    return tuple(d.dim_value for d in dims) if all(d.HasField("dim_value") for d in dims) else None


def _with_value_info(model: onnx.ModelProto, declared: dict[str, onnx.ValueInfoProto]) -> onnx.ModelProto:
    """``model`` with the value_info of shape inference on it (and the source's own for names it cannot type)."""
    try:
        result = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:
        result = model
    for graph in subgraphs_of(result.graph):
        typed = {v.name for v in [*graph.value_info, *graph.input, *graph.output]} | {t.name for t in graph.initializer}
        produced = {o for node in graph.node for o in node.output}
        graph.value_info.extend(declared[n] for n in sorted(produced - typed) if n in declared)
    return result


# ------------------------------------------------------------------------------------------ folding


class _Folder:
    """One folding pass over a model's graphs (``changed`` tells whether it folded anything)."""

    def __init__(self, opsets: dict[str, int], types: dict[str, onnx.TypeProto], names: Counter) -> None:
        self.opsets = opsets
        self.types = types
        self.names = names  # name -> how many definitions (tensors) or nodes (node names) bear it
        self.lazy: set[str] = set()  # known values that stay computed by their node (too large to store)
        self.changed = False

    def fold_graph(self, graph: onnx.GraphProto, outer: Mapping[str, np.ndarray], *, main: bool) -> None:
        """Fold ``graph``'s nodes in order, ``outer`` (the enclosing scopes' constants) visible."""
        inputs = {i.name for i in graph.input}
        defined = _defined(graph)
        known = {name: value for name, value in outer.items() if name not in defined}
        for tensor in graph.initializer:
            if tensor.name not in inputs and tensor.data_location != onnx.TensorProto.EXTERNAL:
                known[tensor.name] = numpy_helper.to_array(tensor)
                self.types[tensor.name] = _type_of(known[tensor.name])
        outputs = {o.name for o in graph.output}
        queue, kept = deque(graph.node), []
        while queue:
            node = queue.popleft()
            if node.op_type == "If" and node.domain in ONNX_DOMAINS and (decided := _decided(node, known)) is not None:
                queue.extendleft(reversed(self._inline(node, decided)))
                self.changed = True
                continue
            if node_subgraphs(node):
                for sub in node_subgraphs(node):
                    self.fold_graph(sub, known, main=False)
                kept.append(node)
                continue
            values = self._evaluate(node, known)
            if values is None:
                self._infer_outputs(node, known)
                kept.append(node)
                continue
            known.update(values)
            self.types.update((name, _type_of(value)) for name, value in values.items())
            kept.extend(self._folded(node, values, known, main and not outputs & set(values), graph))
        del graph.node[:]
        graph.node.extend(kept)

    def _folded(
        self, node: onnx.NodeProto, values: dict[str, np.ndarray], known: Mapping, as_initializer: bool, graph
    ) -> list[onnx.NodeProto]:
        """What replaces a folded node: nothing (its values become initializers of the main graph), Constant
        nodes (in a subgraph, or for a graph output), or the node itself (a Constant already, or a result too
        large to store)."""
        source_size = sum(known[name].size for name in node.input if name in known and name not in self.lazy)
        if any(v.size > max(LARGE_ELEMENTS, source_size) for v in values.values()):
            self.lazy.update(values)
            return [node]
        if node.op_type == "Constant" and not as_initializer:
            return [node]
        self.changed = True
        if as_initializer:
            graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in values.items())
            return []
        return [
            helper.make_node(
                "Constant", [], [name], name=self._fresh(f"{name}_folded"), value=numpy_helper.from_array(v)
            )
            for name, v in values.items()
        ]

    def _evaluate(self, node: onnx.NodeProto, known: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The node's outputs when they follow from constants and static shapes alone (else None)."""
        if node.domain not in ONNX_DOMAINS or node.op_type in NONDETERMINISTIC_OPS:
            return None
        results: list | None
        if node.op_type in ("Shape", "Size"):
            shape = (
                known[node.input[0]].shape if node.input[0] in known else _static_shape(self.types.get(node.input[0]))
            )
            if shape is None:
                return None
            results = [shape_value(node, shape)]
        elif all(name in known for name in node.input if name):
            results = evaluate_node(node, known, self.opsets)
        else:
            return None
        if results is None or len(results) != len(node.output):
            return None
        values = {name: np.asarray(v) for name, v in zip(node.output, results) if name}
        return values if all(self._agrees(name, v) for name, v in values.items()) else None

    def _infer_outputs(self, node: onnx.NodeProto, known: Mapping[str, np.ndarray]) -> None:
        """Static output shapes of a node that stays, from its inputs' types and small constant values (ONNX's
        inference of that one node), so that a ``Shape`` after it folds in this same pass."""
        inputs = [name for name in node.input if name]
        if node.domain not in ONNX_DOMAINS or not all(name in self.types for name in inputs):
            return
        data = {n: numpy_helper.from_array(known[n], n) for n in inputs if n in known and known[n].size <= 64}
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opsets.get("", 1), "")
            inferred = onnx.shape_inference.infer_node_outputs(schema, node, {n: self.types[n] for n in inputs}, data)
        except Exception:  # no schema, or inference refuses the node: its outputs stay as typed
            return
        for name, type_proto in inferred.items():
            if _static_shape(type_proto) is not None and _static_shape(self.types.get(name)) is None:
                self.types[name] = type_proto

    def _agrees(self, name: str, value: np.ndarray) -> bool:
        """The value has the type (and, where static, the shape) shape inference gives its tensor."""
        type_proto = self.types.get(name)
        if not isinstance(value, np.ndarray) or value.dtype == object:
            return False
        if type_proto is None or not type_proto.HasField("tensor_type"):
            return True
        elem = type_proto.tensor_type.elem_type
        if elem and helper.tensor_dtype_to_np_dtype(elem) != value.dtype:
            return False
        shape = _static_shape(type_proto)
        return shape is None or shape == value.shape

    def _fresh(self, name: str) -> str:
        candidate, k = name, 0
        while candidate in self.names:
            k += 1
            candidate = f"{name}_{k}"
        self.names[candidate] += 1
        return candidate

    def _inline(self, node: onnx.NodeProto, chosen: bool) -> list[onnx.NodeProto]:
        """The nodes that replace an ``If`` decided as ``chosen``: its branch's own, renamed where a name would
        clash (each branch output produced in the branch takes the If's output name), then Identity nodes for
        the outputs that are not (read from outside the branch, or one tensor for several outputs)."""
        branch = next(a.g for a in node.attribute if a.name == ("then_branch" if chosen else "else_branch"))
        self.names -= _name_counts_in(node_subgraphs(node))  # both branches leave; a name clashes if found elsewhere
        self.names.update(_name_counts_in([branch]))
        own = _defined(branch)
        out_names = [o.name for o in branch.output]
        renamed: dict[str, str] = {}
        for out, target in zip(out_names, node.output):
            if target and out in own and out_names.count(out) == 1:
                renamed[out] = target
        renamed.update((name, self._fresh(name)) for name in sorted(own - set(renamed)) if self.names[name] > 1)
        moved = [
            helper.make_node(
                "Constant", [], [renamed.get(t.name, t.name)], name=self._fresh(f"{node.name}_{t.name}"), value=t
            )
            for t in branch.initializer
        ]
        for inner in branch.node:
            copied = onnx.NodeProto()
            copied.CopyFrom(inner)
            copied.input[:] = [renamed.get(n, n) for n in inner.input]
            copied.output[:] = [renamed.get(n, n) for n in inner.output]
            if copied.name and self.names[copied.name] > 1:
                copied.name = self._fresh(copied.name)
            for sub in node_subgraphs(copied):
                _rename_free(sub, renamed)
            moved.append(copied)
        for out, target in zip(out_names, node.output):
            if target and renamed.get(out) != target:
                moved.append(helper.make_node("Identity", [renamed.get(out, out)], [target], name=self._fresh(target)))
        return moved


def _type_of(value: np.ndarray) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)


def _decided(node: onnx.NodeProto, known: Mapping[str, np.ndarray]) -> bool | None:
    """An If's condition when it is a folded constant of one element (else None)."""
    value = known.get(node.input[0]) if node.input else None
    return bool(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def evaluate_node(node: onnx.NodeProto, known: Mapping[str, np.ndarray], opsets: Mapping[str, int]) -> list | None:
    """``node``'s outputs from the values of its inputs (``known`` by name), by onnx's reference implementation;
    None where it cannot evaluate the node."""
    names = list(dict.fromkeys(name for name in node.input if name))
    graph = helper.make_graph(
        [node],
        "fold",
        [onnx.ValueInfoProto(name=n) for n in names],
        [onnx.ValueInfoProto(name=o) for o in node.output if o],
    )
    try:
        from onnx.reference import ReferenceEvaluator

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return list(ReferenceEvaluator(graph, opsets=dict(opsets)).run(None, {n: known[n] for n in names}))
    except Exception:  # an operator onnx.reference cannot evaluate here
        return None


def shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """``Shape`` (with its start/end, clamped as Python slices are) or ``Size`` of a tensor of ``shape``."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return np.array(shape, np.int64)[attrs.get("start", 0) : attrs.get("end")]


def _rename_free(graph: onnx.GraphProto, renamed: Mapping[str, str]) -> None:
    """Rename, in ``graph`` and the graphs nested in it, the outer-scope names it reads (never one it defines)."""
    free = {old: new for old, new in renamed.items() if old not in _defined(graph)}
    if not free:
        return
    for node in graph.node:
        node.input[:] = [free.get(n, n) for n in node.input]
        for sub in node_subgraphs(node):
            _rename_free(sub, free)
    for output in graph.output:
        output.name = free.get(output.name, output.name)


# ------------------------------------------------------------------------------------------ dead code


def remove_dead_nodes(graph: onnx.GraphProto) -> set[str]:
    """Remove (in place) ``graph``'s nodes and initializers that no graph output depends on, in its subgraphs
    too; the inputs stay, and an initializer that is also an input (a default) stays. Returns the names the
    graph reads from its enclosing scopes."""
    needed = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if not any(name in needed for name in node.output if name):
            continue
        kept.append(node)
        needed.update(name for name in node.input if name)
        for sub in node_subgraphs(node):
            needed |= remove_dead_nodes(sub)
    del graph.node[:]
    graph.node.extend(reversed(kept))
    inputs = {i.name for i in graph.input}
    live = [t for t in graph.initializer if t.name in needed or t.name in inputs]
    del graph.initializer[:]
    graph.initializer.extend(live)
    return needed - _defined(graph)

"""ONNX's whole-graph analyses (``GraphAnalyses``, the format's ``graph_analyses``): what verification, the streaming
checks and ``--input-value`` read from a model's graph, so that no shared module parses an ONNX graph itself.

* ``implied_sizes``: the sizes a graph implies its inputs' symbolic dimensions may need (a reflect pad ``p`` needs
  ``p + 1``, a kernel ``k`` at least ``k``), tried when the source fails at the default size;
* ``integer_draws``: how to draw each integer input so that the model takes it, from how the graph uses it;
* ``recurrent_wiring``: the (graph input, graph output) pairs a recurrent node's states wire through plumbing only;
* ``specialised``: inputs held as constants of given values, what they decide folded (``onnx.folding.specialise``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import onnx
from onnx import numpy_helper

from gatepack.converters.analyses import GraphAnalyses
from gatepack.converters.formats.onnx.folding import fold, specialise, subgraphs_of
from gatepack.converters.formats.onnx.graph import Scope, load_proto
from gatepack.converters.formats.onnx.lifting import Finder
from gatepack.converters.samples import MAX_DRAWN_SIZE

_IMPLYING_ATTRIBUTES = ("kernel_shape",)  # Conv, ConvTranspose, the poolings: an input at least a kernel long
_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Transpose", "Expand", "Flatten", "Slice"}
_ORDERINGS = {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"}
_RECURRENT = {"GRU": (5, 1), "RNN": (5, 1), "LSTM": (5, 1)}  # op -> (initial_h input, Y_h output) indices
_LSTM_CELL_STATE = (6, 2)  # LSTM: initial_c input, Y_c output
_PLUMBING = {"Slice", "Gather", "Split", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Concat", "Cast", "Identity"}


def implied_sizes(proto: onnx.ModelProto) -> list[int]:
    """The sizes an ONNX model's graph (every subgraph included) implies its inputs' symbolic dimensions may need:
    a reflect/edge ``Pad``'s pad ``p`` needs a dimension longer than ``p`` (``p + 1``), a convolution or pooling
    kernel ``k`` an input at least ``k`` long, a ``Reshape``'s constant target sizes, a ``Conv`` weight's kernel
    dimensions. Read from ``proto`` folded for its declared shapes (``onnx.folding.fold``: pads computed from
    constants become constants), so only what is constant counts. Sorted, each once, sizes >= 2."""
    try:
        proto = fold(proto)
    except Exception:  # noqa: BLE001 - a model the folder cannot take: its declared constants still count
        pass
    found: set[int] = set()
    for graph in subgraphs_of(proto.graph):
        constants = {t.name: t for t in graph.initializer}
        constants.update((n.output[0], a.t) for n in graph.node if n.op_type == "Constant" for a in n.attribute)
        for node in graph.node:
            values = [numpy_helper.to_array(constants[i]) for i in node.input[1:2] if i in constants]
            if node.op_type == "Pad" and values:
                found.update(int(p) + 1 for p in values[0].reshape(-1))
            elif node.op_type == "Reshape" and values:
                found.update(int(v) for v in values[0].reshape(-1))
            elif node.op_type in ("Conv", "ConvTranspose") and values:
                found.update(int(k) for k in values[0].shape[2:])
            found.update(int(k) for a in node.attribute if a.name in _IMPLYING_ATTRIBUTES for k in a.ints)
    return sorted(size for size in found if 2 <= size <= MAX_DRAWN_SIZE)


def _implied_sizes_at(path: Path) -> list[int]:
    return implied_sizes(load_proto(path))


def integer_draws(path: Path, dim_size: int) -> dict[str, tuple[int, int, str]]:
    """How to draw each integer input of an ONNX model so that the model takes it, from how the model uses it
    (followed through Cast/Unsqueeze/Slice/...): input -> (low, high, why), both ends included. Compared
    (``Equal``) with a constant scalar: that constant (a sample rate choosing an ``If`` branch); indices of a
    ``Gather`` from a constant table: its rows (an embedding); compared (``Less``/``Greater``...) with positions:
    lengths 1..``dim_size``. Inputs it says nothing about are drawn as zeros."""
    graph = load_proto(path).graph
    constants = {t.name: t for t in graph.initializer}
    constants.update(
        (n.output[0], n.attribute[0].t)
        for n in graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    )
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    integer = (2, 3, 4, 5, 6, 7, 12, 13)  # ONNX's integer element types (uint8 ... uint64)
    found: dict[str, tuple[int, int, str]] = {}
    for value in graph.input:
        if value.name in constants or value.type.tensor_type.elem_type not in integer:
            continue
        pending, seen = [value.name], set()
        while pending and value.name not in found:
            tensor = pending.pop(0)
            seen.add(tensor)
            for node in readers.get(tensor, []):
                other = [n for n in node.input if n != tensor]
                if node.op_type == "Equal" and other and other[0] in constants:
                    scalar = numpy_helper.to_array(constants[other[0]])
                    if scalar.size == 1 and scalar.dtype.kind in "iu":
                        v = int(scalar.reshape(-1)[0])
                        found[value.name] = (v, v, f"= {v} (a value the model compares it with)")
                        break
                if node.op_type == "Gather" and node.input[1] == tensor and node.input[0] in constants:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    rows = int(list(constants[node.input[0]].dims)[axis])
                    found[value.name] = (0, rows - 1, f"in 0..{rows - 1} (indices into a table of {rows} rows)")
                    break
                if node.op_type in _ORDERINGS:
                    found[value.name] = (1, dim_size, f"in 1..{dim_size} (lengths the model compares positions with)")
                    break
                if node.op_type in _PASS_THROUGH:
                    pending += [o for o in node.output if o and o not in seen]
    return found


def recurrent_wiring(path: Path) -> set[tuple[str, str]]:
    """(graph input, graph output) pairs an ONNX graph's recurrent nodes wire: a node's initial state reached
    from the input and its final state reaching the output, through state plumbing only."""
    proto = load_proto(path)
    graph = proto.graph
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in graph.output}

    def reach(tensor: str, onward) -> set[str]:  # the ends of the plumbing from ``tensor``, ``onward`` one hop
        found: set[str] = set()
        pending, seen = [tensor], set()
        while pending:
            name = pending.pop()
            if name not in seen:
                seen.add(name)
                pending += onward(name, found)
        return found

    def back(name: str, found: set[str]) -> list[str]:  # toward the graph inputs a tensor is computed from
        node = producer.get(name)
        if node is None:
            found.add(name)
            return []
        return [i for i in node.input[:1] if i] if node.op_type in _PLUMBING else []  # data, not shapes/indices

    def forward(name: str, found: set[str]) -> list[str]:  # toward the graph outputs a tensor reaches
        if name in graph_outputs:
            found.add(name)
        return [
            o
            for node in readers.get(name, [])
            if node.op_type in _PLUMBING and (node.input[0] == name or node.op_type == "Concat")
            for o in node.output
            if o
        ]

    pairs: set[tuple[str, str]] = set()
    for state_in, state_out in _state_tensors(proto, path):
        for i in reach(state_in, back):
            pairs.update((i, o) for o in reach(state_out, forward))
    return pairs


def _state_tensors(proto: onnx.ModelProto, path: Path) -> list[tuple[str, str]]:
    """(initial state, final state) tensors of the main graph's recurrent nodes (initial_h -> Y_h, an LSTM's
    initial_c -> Y_c) and of the single unrolled steps a per-frame export writes (``onnx.lifting.Finder``; the model
    read from ``path``, its external data beside it)."""
    found = []
    for node in proto.graph.node:
        if node.op_type not in _RECURRENT:
            continue
        slots = [_RECURRENT[node.op_type]] + ([_LSTM_CELL_STATE] if node.op_type == "LSTM" else [])
        for state_in, state_out in slots:
            if len(node.input) > state_in and node.input[state_in] and len(node.output) > state_out:
                if node.output[state_out]:
                    found.append((node.input[state_in], node.output[state_out]))
    if {n.op_type for n in proto.graph.node} >= {"MatMul", "Tanh"}:
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
        value_of = partial(numpy_helper.to_array, base_dir=str(path.parent))  # (external data beside the model)
        found += Finder(proto, Scope(proto.graph, None, ""), value_of, opset).step_states()
    return found


def specialised(path: Path, values: dict, input_shapes: dict | None = None) -> onnx.ModelProto:
    """The model at ``path`` with each input ``values`` names held as a constant of that value, its inputs'
    symbolic dimensions fixed by ``input_shapes`` (input name -> dims; None: none), and what they decide folded (an
    ``If`` replaced by its branch: ``onnx.folding.specialise``), in memory."""
    return specialise(load_proto(path), values, input_shapes)


def _weight_scope(model, scheme):
    """What ``--quantize-weights-scope model`` does to ``model``'s other weights (``model_weights.weight_plan`` on
    the graph the whole-model writers rewrite: the source, its lifted layers replaced), as a ``ScopeSummary``."""
    from gatepack.converters.formats.onnx.model_weights import opset_of, unwritable, weight_plan
    from gatepack.converters.formats.onnx.rewrite import in_place, lifted_layers
    from gatepack.converters.weight_quantization import ScopeSummary

    assert model.path is not None  # (a whole model read from its file)
    proto = in_place(model) if lifted_layers(model) else load_proto(Path(model.path))
    plan = weight_plan(proto, scheme)
    return ScopeSummary.of(
        [(w.name, w.op, w.channels, w.block_axis is not None) for w in plan if not w.reason],
        [(w.name, w.op, w.reason) for w in plan if w.reason],
        scheme,
        unwritable(opset_of(proto), scheme) or "",
    )


ANALYSES = GraphAnalyses(
    implied_sizes=_implied_sizes_at,
    integer_draws=integer_draws,
    recurrent_wiring=recurrent_wiring,
    specialise=specialised,
    weight_scope=_weight_scope,
)

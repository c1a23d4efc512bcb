"""A whole ONNX model as every target's translation reads it (``converters/operators``; which models a target
writes whole: ``registry.keeps_whole``): the source prepared for the walk (its layers, the nodes they stand for and
the constants only they read), and the summary of the nodes a target cannot hold."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from gatepack.converters.model import Model
from gatepack.converters.operators.translation import Translation, Untranslatable
from gatepack.converters.quantization import ASKED
from gatepack.converters.weight_quantization import SCOPE_KEY
from gatepack.schemas.layer import RecurrentLayer


class Prepared:
    """The source as it is translated: its proto, the layers in it, the ids of the nodes the layers stand for and of
    the constants only they read (``skip``: never translated on their own), and each layer's nodes (``members``: id ->
    layer; the layer is emitted at the first of them where its inputs are computed, at the last one at the latest)."""

    def __init__(self, proto, layers: list[RecurrentLayer]) -> None:
        from gatepack.converters.formats.onnx.constants import constant_feeders
        from gatepack.converters.formats.onnx.graph import isolated_record, walk_nodes

        self.proto = proto
        self.layers = layers
        # every node held here: protobuf's Python objects for them, and so their ids, last only while referenced
        self.nodes = [node for node, _, _, _ in walk_nodes(proto.graph)]
        by_outputs = {tuple(node.output): node for node in self.nodes}
        self.members: dict[int, RecurrentLayer] = {}
        self.last: dict[int, int] = {}  # id(layer) -> id of its last node in graph order
        for layer in layers:  # a node is known by its outputs (the reader's record may hold another copy)
            keys = (tuple(n.output) for n in isolated_record(layer).nodes)
            nodes = [by_outputs[key] for key in keys if key in by_outputs]
            self.members.update((id(n), layer) for n in nodes)
        for node in self.nodes:
            if id(node) in self.members:
                self.last[id(self.members[id(node)])] = id(node)
        self.skip: set[int] = set(self.members)
        if layers:
            fed = {getattr(lay.interface, r) for lay in layers for r in ("x", *lay.fed_roles())}
            self.skip |= constant_feeders(proto.graph, set(self.skip), fed)
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.emitted: set[int] = set()  # id(layer) of the layers written so far
        # --quantize-weights-scope model: the Scheme of the other weights (None: float), as their float view or not
        self.weight_scope: Any = None
        self.scope_as_floats = False

    @classmethod
    def of(cls, model: Model) -> "Prepared":
        """``model``'s source as read: its layers straight from the arrays the reader holds (the weights' external
        data memory-mapped, never copied into a proto). A model with lifted layers (Loops, unrolled cells) is
        rewritten in place first (each lifted region becomes one node and the adapters the rest of the graph reads)
        and read again, each layer keeping ``model``'s weight records (the rewrite holds quantized weights as their
        float view: a layer read from it would lose the integers ``--quantize-weights`` made); a loop that only
        that second reading lifts stays a Loop (the source's reading refused it)."""
        from gatepack.converters.formats.onnx.graph import load_proto
        from gatepack.converters.formats.onnx.reader import reread
        from gatepack.converters.formats.onnx.rewrite import in_place, lifted_layers

        assert model.path is not None  # (a whole model read from its file)
        if not lifted_layers(model):
            prepared = cls(load_proto(Path(model.path)), list(model.layers))
        else:
            unscoped = replace(model, meta={k: v for k, v in model.meta.items() if k != SCOPE_KEY})
            proto = in_place(unscoped)  # (the other weights are the translation's: ``weight_scope``)
            records = {lay.name: lay.directions for lay in model.layers}  # the rewrite holds their float view
            layers = [
                replace(lay, directions=records.get(lay.name, lay.directions))
                for lay in reread(model.path, proto).layers
            ]
            prepared = cls(
                proto, [lay for lay in layers if lay.provenance is not None and lay.provenance.kind != "lifted"]
            )
        prepared.weight_scope = model.meta.get(SCOPE_KEY)
        prepared.scope_as_floats = bool(model.meta.get(ASKED))
        return prepared

    def claimer(self, t: Translation, emit: Callable[[Any, RecurrentLayer], None]) -> Callable[[Any], bool]:
        """``translate_nodes``' ``claims`` for ``t``: True for a node a layer stands for (or a constant only layers
        read), never translated on its own; each layer emitted once (``emit(node, layer)``) at the first of its
        nodes where it is ``ready``."""

        def claims(node) -> bool:
            if id(node) not in self.skip:
                return False
            layer = self.members.get(id(node))
            if layer is not None and self.ready(layer, t.values, node):
                self.emitted.add(id(layer))
                emit(node, layer)
            return True

        return claims

    def ready(self, layer: RecurrentLayer, values: dict, node) -> bool:
        """Whether ``layer`` is emitted at its member ``node``: every input it takes is computed, or ``node`` is
        its last (emitting then names what is missing)."""
        if id(layer) in self.emitted:
            return False
        taken = [getattr(layer.interface, role) for role in ("x", *layer.fed_roles())]
        return all(name in values for name in taken) or self.last.get(id(layer)) == id(node)


def initializers(path: Path, prepared: Prepared) -> dict[str, np.ndarray]:
    """The main graph's initializers that a node translated on its own reads (in any subgraph) or that are graph
    outputs: the layers' weights are written from the layers' own arrays, never loaded again. External data is
    memory-mapped."""
    from onnx import numpy_helper

    from gatepack.converters.formats.onnx.graph import map_external

    graph = prepared.proto.graph
    read = {o.name for o in graph.output}
    read.update(i for node in prepared.nodes if id(node) not in prepared.skip for i in node.input)
    loaded = {}
    for tensor in graph.initializer:
        if tensor.name in read:
            external = tensor.data_location == tensor.EXTERNAL
            mapped = map_external(tensor, path.parent) if external else None
            loaded[tensor.name] = mapped if mapped is not None else numpy_helper.to_array(tensor, str(path.parent))
    return loaded


def file_key(model: Model) -> tuple:
    """What a whole model's translation depends on besides its layers: the file as it is now and the input shapes."""
    assert model.path is not None  # (a whole model read from its file)
    path = Path(model.path)
    stat = path.stat()
    shapes = model.meta.get("input_shapes") or {}
    return (
        str(path.resolve()),
        stat.st_mtime_ns,
        stat.st_size,
        tuple(sorted((k, tuple(v)) for k, v in shapes.items())),
    )


def fed_inputs(path: Path, graph, input_shapes: dict, io_types: Mapping[int, str], words: str, hint: str) -> list:
    """The graph inputs a user feeds (initializers apart), each of an element type in ``io_types``, else refused
    ("..., which <words>"); UsageError for an ``--input-shape`` naming no input."""
    from gatepack.converters.errors import RefusedError, UsageError

    unknown = set(input_shapes) - {i.name for i in graph.input}
    if unknown:
        raise UsageError(f"{path}: --input-shape names {sorted(unknown)}, which the model does not take")
    initialized = {i.name for i in graph.initializer}
    fed = [value for value in graph.input if value.name not in initialized]
    for value in fed:
        elem_type = value.type.tensor_type.elem_type
        if elem_type not in io_types:
            raise RefusedError(
                f"{path}: input {value.name!r} has ONNX element type {elem_type}, which {words}", hint=hint
            )
    return fed


def given_dims(path: Path, name: str, dims: list, input_shapes: dict) -> list:
    """Input ``name``'s dimensions (ints, or anything else for a symbolic one) with the user's ``--input-shape``
    in their place; UsageError when the given shape does not fit the declared one."""
    from gatepack.converters.errors import UsageError

    if name not in input_shapes:
        return dims
    given = list(input_shapes[name])
    if len(given) != len(dims) or any(isinstance(d, int) and d != g for d, g in zip(dims, given)):
        shown = [d if isinstance(d, int) else "?" for d in dims]
        raise UsageError(f"{path}: --input-shape {name}={given} does not fit its shape {shown}")
    return given


def symbol_sizes(fed: list, input_shapes: dict) -> dict[str, int]:
    """The size each named symbolic dimension takes from the inputs the user gave shapes (``--input-shape``): a
    symbol is one size wherever the model declares it."""
    sizes: dict[str, int] = {}
    for value in fed:
        given = input_shapes.get(value.name)
        if given is not None and len(given) == len(value.type.tensor_type.shape.dim):
            for d, size in zip(value.type.tensor_type.shape.dim, given):
                if d.dim_param:
                    sizes.setdefault(d.dim_param, int(size))
    return sizes


def untranslatable_summary(failures: list[Untranslatable], target_name: str) -> str:
    """'3 nodes <target> cannot hold: Einsum x2 (first: 'einsum_1': ...); Foo (first: ...)'."""
    counts = Counter(f.op_type for f in failures)
    first: dict[str, Untranslatable] = {}
    for f in failures:
        first.setdefault(f.op_type, f)
    parts = [
        f"{op}{f' x{n}' if n > 1 else ''} (first: {first[op].node_name!r}: {first[op].reason})"
        for op, n in counts.most_common()
    ]
    return f"{len(failures)} node{'s' if len(failures) != 1 else ''} {target_name} cannot hold: " + "; ".join(parts)

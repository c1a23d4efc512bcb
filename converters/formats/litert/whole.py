"""A whole ONNX model as one LiteRT subgraph of builtin operators: the recurrent layers by the LiteRT layer writer,
every other operator by the ONNX operator table (``onnx_ops``), every shape static.

The pipeline, as Core ML's (``formats/coreml/whole``), over the shared parts (``converters/operators``):

1. the source prepared (``operators.prepared.Prepared``: lifted layers rewritten in place and read again; each
   layer's nodes and the constants only it reads set apart);
2. each graph input a tensor of its static shape (a symbolic dimension fixed by ``--input-shape``, else refused:
   LiteRT's operators here are written for static shapes), int64 inputs as INT32;
3. the graph walked in order (``operators.translation.translate_nodes``): a layer's node written by the LiteRT
   layer writer (``writer._LayerWriter``, its inputs the tensors the graph holds; stateless: its states written
   before its ops on every invoke), every other node by its ``litert`` entry;
4. each graph output a tensor of the model's own name (a ``RESHAPE`` copy where the value is named otherwise);
   the operators nothing reads dropped (the transposes folded away).

A node no entry translates is refused for that node (``Untranslatable``), every such node named at once.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import numpy as np

from gatepack.converters.errors import RefusedError, UsageError
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.litert.common import FORMAT, Graph, Packed, schema
from gatepack.converters.formats.litert.strategy import form
from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, prune
from gatepack.converters.identity_cache import IdentityCache
from gatepack.converters.model import Model
from gatepack.converters.operators.prepared import (
    Prepared,
    fed_inputs,
    file_key,
    given_dims,
    initializers,
    symbol_sizes,
    untranslatable_summary,
)
from gatepack.converters.operators.translation import Untranslatable, translate_nodes
from gatepack.converters.operators.whole import WholeTarget, alternatives, inline_if, layer_inputs
from gatepack.converters.operators.whole import is_whole_model as _is_whole
from gatepack.converters.operators.whole import whole_model_finding as _finding
from gatepack.schemas.layer import OUTPUT_ROLES, RecurrentLayer, dim_text


def is_whole_model(model: Model) -> bool:
    """Whether LiteRT writes ``model`` whole (``operators.whole.is_whole_model``)."""
    return _is_whole(model, _TARGET)


# ONNX element types a LiteRT input or output carries here: float32, int64 (as INT32), int32, bool
_IO_TYPES = {1: "FLOAT32", 7: "INT32", 6: "INT32", 9: "BOOL"}
_INT64 = 7


def write_whole(model: Model, path: str | Path, *, strategy: str = "auto") -> None:
    """The whole ONNX ``model`` as one ``.tflite`` file at ``path`` (``translate_proto``)."""
    assert model.path is not None  # (a whole model read from its file)
    packed, _ = translate_proto(
        Prepared.of(model), Path(model.path), strategy=strategy, input_shapes=model.meta.get("input_shapes")
    )
    packed.write(path)


def translate_onnx(proto, base_dir: Path) -> bytes:
    """An ONNX model without recurrent layers as a LiteRT file's bytes (the operator table's tests translate one
    operator so). ``base_dir``: where its external data is."""
    return translate_proto(Prepared(proto, []), base_dir / "model.onnx")[0].tobytes()


def translate_proto(
    prepared: Prepared,
    path: Path,
    *,
    strategy: str = "auto",
    input_shapes: dict | None = None,
    finishing: Callable[[Graph, dict], None] | None = None,
    packing: bool = True,
) -> tuple[Packed, dict]:
    """The packed file (``Graph.packed``; ``packing`` False: nothing, the size checked alone) and gatepack's
    description of it (its layers, the operators around them); ``finishing`` changes the graph and description
    before they are packed (``stateful_whole``: states held in variables)."""
    from gatepack.converters.formats.litert.writer import METADATA_FORMAT
    from gatepack.converters.formats.onnx.folding import fixing_hint

    graph = prepared.proto.graph
    t = LiteRTTranslation(prepared.opset, g=Graph(schema()))
    t.values.update(initializers(path, prepared))
    changes = _bind_inputs(t, path, graph, input_shapes or {})
    described: list[dict] = []
    failures: list[Untranslatable] = []
    _translate_graph(t, graph, prepared, strategy, described, failures)
    if failures:
        raise RefusedError(
            f"{path}: {untranslatable_summary(failures, 'LiteRT')}",
            hint=fixing_hint(prepared.proto, [f.run_time for f in failures if f.run_time]) + alternatives("litert"),
        )
    _bind_outputs(t, graph)
    prune(t.g)
    other = [n.op_type for n in graph.node if id(n) not in prepared.skip]
    description = {
        "format": METADATA_FORMAT,
        "whole": True,
        "layers": described,
        "other_ops": sorted(set(other)),
        "other_op_count": len(other),
        "interface_changes": changes,
    }
    if finishing is not None:
        finishing(t.g, description)
    if not packing:
        t.g.check_size(path)
        return Packed(memoryview(b""), []), description
    return t.g.packed(description, path), description


def _translate_graph(
    t: LiteRTTranslation, graph, prepared: Prepared, strategy: str, described: list, failures: list
) -> None:
    """Translate ``graph``'s nodes in order into ``t`` (``operators.translation.translate_nodes``): a recurrent
    layer's nodes by the layer writer, an ``If`` decided at conversion time by its branch, every other node by
    the operator table; collect what cannot be translated in ``failures``."""
    import gatepack.converters.formats.litert.onnx_ops  # noqa: F401 - registers LiteRT's column of the table

    def layer(node, found: RecurrentLayer) -> None:
        _emit_layer(t, node, found, strategy, described, failures)

    def if_node(node) -> None:
        if not inline_if(t, node, lambda branch: _translate_graph(t, branch, prepared, strategy, described, failures)):
            _refuse_run_time_if(t, node, prepared)

    translate_nodes(t, graph.node, failures, claims=prepared.claimer(t, layer), special={"If": if_node})


def _refuse_run_time_if(t: LiteRTTranslation, node, prepared: Prepared) -> None:
    """An ``If`` decided at run time, refused with what decides it and how to fix it before."""
    from gatepack.converters.formats.onnx.folding import if_deciders, specialisation_hint

    _, shapes = if_deciders(prepared.proto, node.input[0])
    fixes = specialisation_hint(prepared.proto, node.input[0]) + (
        "fix the input shapes (--input-shape), " if shapes else ""
    )
    decided = f"; to decide it before, {fixes.strip(', ')}" if fixes else ""
    t.refuse(
        node,
        "its condition is computed at run time; gatepack's LiteRT translation writes an If whose condition is known "
        f"when converting{decided}",
    )


def _bind_inputs(t: LiteRTTranslation, path: Path, graph, input_shapes: dict) -> list[str]:
    """A graph input tensor per ONNX graph input (initializers apart), of its static shape (its symbolic
    dimensions fixed by ``--input-shape``, this input's or another's with the same symbol); what changes in the
    interface (int64 as INT32)."""
    changes = []
    words = "gatepack's LiteRT inputs do not carry"
    fed = fed_inputs(path, graph, input_shapes, _IO_TYPES, words, alternatives("litert"))
    sizes = symbol_sizes(fed, input_shapes)  # a symbol the user fixed in one input, fixed in every other
    for value in fed:
        tensor = value.type.tensor_type
        declared = [d.dim_value if d.dim_value > 0 else sizes.get(d.dim_param) for d in tensor.shape.dim]
        dims = given_dims(path, value.name, declared, input_shapes)
        if any(d is None for d in dims):
            symbolic = ", ".join("?" if d is None else str(d) for d in dims)
            raise RefusedError(
                f"{path}: input {value.name!r} [{symbolic}] has a symbolic dimension; gatepack writes whole LiteRT "
                "models with static shapes",
                hint=f"fix it with --input-shape {value.name}=d1,d2,..., or " + alternatives("litert"),
            )
        held = t.tensor(value.name, dims, _IO_TYPES[tensor.elem_type])
        t.g.graph.inputs.append(held.index)
        t.values[value.name] = held
        if tensor.elem_type == _INT64:
            changes.append(f"input {value.name!r}: int64 -> int32 (values must fit)")
    return changes


def _bind_outputs(t: LiteRTTranslation, graph) -> None:
    """Each ONNX graph output a graph output tensor of its name (a ``RESHAPE`` copy where the value is a constant,
    a graph input or a tensor named otherwise)."""
    inputs = set(t.g.graph.inputs)
    for out in graph.output:
        value = t.as_var(t.values[out.name])
        if t.g.graph.tensors[value.index].name != out.name or value.index in inputs:
            copy = t.tensor(out.name, value.shape, value.dtype)
            value = t.op("RESHAPE", [value, np.array(value.shape, np.int32)], copy)
        t.g.graph.outputs.append(value.index)


def _emit_layer(
    t: LiteRTTranslation, node, layer: RecurrentLayer, strategy: str, described: list, failures: list
) -> None:
    """``layer`` written by the LiteRT layer writer into ``t``'s graph, its inputs the tensors the graph holds (N
    and S from its X), its outputs the graph's values of its output names."""
    from gatepack.converters.formats.litert.writer import _LayerWriter

    itf = layer.interface
    try:
        taken = layer_inputs(t, node, layer, failures)
        if taken is None:
            return  # computed by a node that could not be translated: that node is named
        given = {name: t.as_var(value).index for name, value in taken.values()}
        x = t.as_var(t.values[itf.x])
        if len(x.shape) != 3:
            t.refuse(node, f"its X {itf.x!r} has rank {len(x.shape)}; a {node.op_type} takes 3")
        s, n = (x.shape[1], x.shape[0]) if itf.layout else (x.shape[0], x.shape[1])
        writer = _LayerWriter(t.g, layer, s, n, {}, given)
        entry = writer.write(form(layer, strategy).chosen)
    except Untranslatable as err:
        failures.append(err)
        return
    for role in OUTPUT_ROLES:
        name = getattr(itf, role)
        if name and role in writer.outputs:
            index = writer.outputs[role]
            t.values[name] = Tensor(index, tuple(t.g.shape_of(index)), "FLOAT32")
    described.append(entry)


def whole_model_finding(model: Model) -> Finding | None:
    """The report's ``model`` finding for a whole ONNX model written as one LiteRT file
    (``operators.whole.whole_model_finding``), from the same translation ``convert`` runs."""
    assert model.path is not None  # (a whole model read from its file)
    return _finding(model, _TARGET, file_key(model), model.layers)


_FOLDED = ("BatchNormalization",)  # the operators whose translation folds constants into fewer roundings


# the translations described lately: each lives while the layers it was made for do (``IdentityCache``), a few at most
_DESCRIBED: IdentityCache[dict | RefusedError | UsageError] = IdentityCache(size=4)


def _description(model: Model) -> dict:
    """gatepack's description of ``model`` translated (``translate_proto``, nothing packed), once per unchanged file,
    input shapes and layers; raises the translation's refusal."""
    assert model.path is not None  # (a whole model read from its file)
    key = file_key(model)
    found = _DESCRIBED.get(key, model.layers)
    if found is None:
        shapes = model.meta.get("input_shapes")
        try:
            found = translate_proto(Prepared.of(model), Path(model.path), input_shapes=shapes, packing=False)[1]
        except (RefusedError, UsageError) as err:
            found = err.with_traceback(None)  # (its frames would keep the translation's graph alive)
        _DESCRIBED.put(key, model.layers, found)
    if isinstance(found, Exception):  # a copy: raising the cached one would tie this call's frames (its model) to it
        raise copy.copy(found)
    return found


def _translated(model: Model) -> tuple[list[str], list[str]]:
    """What a translation of ``model`` changes in its interface and which folded operators it holds (raises the
    refusal)."""
    described = _description(model)
    return described["interface_changes"], [op for op in _FOLDED if op in described["other_ops"]]


def layer_shapes(model: Model, layer: RecurrentLayer) -> list[Finding]:
    """The ``shapes`` finding of ``layer`` inside the whole ``model``: it runs at the static S and N its X has in the
    translation (the model's input shapes, declared or given with ``--input-shape``), not at ``--seq-length`` /
    ``--batch-size`` or gatepack's defaults, which a whole model does not read; a ``model`` finding ``folded`` for a
    layer the translation did not write (an If decided by the shapes takes the other branch). Nothing where the
    layer's sizes are static already, or where the model does not translate (its ``model`` finding says why)."""
    itf = layer.interface
    try:
        entries = [e["interface"] for e in _description(model)["layers"] if e["name"] == layer.name]
    except (RefusedError, UsageError):
        return []
    given = "the input shapes given (--input-shape)" if model.meta.get("input_shapes") else "the model's input shapes"
    if not entries:  # the translation wrote no such layer: it sits in a branch of an If decided at conversion
        return [
            Finding(
                "model",
                Status.FOLDED,
                f"not written: the layer sits in a branch of an If that {given} decide at conversion, and the "
                "file holds the branch taken (its layers are verified with the model)",
            ),
            Finding("shapes", Status.EXACT, "none: the layer is not written"),
        ]
    if isinstance(itf.seq_length, int) and isinstance(itf.batch_size, int):
        return []
    symbolic = f"S={dim_text(itf.seq_length)}, N={dim_text(itf.batch_size)}"
    written = f"S={entries[0]['seq_length']}, N={entries[0]['batch_size']}"
    return [
        Finding(
            "shapes",
            Status.REPACKED,
            f"{symbolic} fixed to {written} by {given}: the whole model's shapes are static, the file runs at these "
            "sizes only",
        )
    ]


_TARGET = WholeTarget(
    FORMAT,
    _translated,
    artifact="one LiteRT file",
    language="LiteRT builtin operators",
    mask_words="which gatepack's LiteRT translation does not hold",
    folded_words="folded into MUL and ADD (one rounding more than ONNX's sequence)",
)


__all__ = ["is_whole_model", "layer_shapes", "translate_onnx", "whole_model_finding", "write_whole"]

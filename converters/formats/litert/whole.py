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

from pathlib import Path
from typing import Callable

import numpy as np

from gatepack.converters.errors import RefusedError, UsageError
from gatepack.converters.fileio import atomic_path
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.litert.common import FORMAT, Graph, schema
from gatepack.converters.formats.litert.strategy import form
from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, prune
from gatepack.converters.model import Model
from gatepack.converters.operators.prepared import (
    Prepared,
    fed_inputs,
    file_key,
    given_dims,
    initializers,
    untranslatable_summary,
)
from gatepack.converters.operators.translation import Untranslatable, translate_nodes
from gatepack.converters.registry import keeps_whole
from gatepack.schemas.layer import OUTPUT_ROLES, RecurrentLayer

ALTERNATIVES = (
    "pass --layers-only for the recurrent layers alone, or convert to onnx or openvino, which keep the whole model"
)


def is_whole_model(model: Model) -> bool:
    """An ONNX model with operators around its recurrent layers, written whole unless the user asked for the
    layers alone (``registry.keeps_whole``)."""
    return keeps_whole(model, FORMAT)


# ONNX element types a LiteRT input or output carries here: float32, int64 (as INT32), int32, bool
_IO_TYPES = {1: "FLOAT32", 7: "INT32", 6: "INT32", 9: "BOOL"}
_INT64 = 7


def write_whole(model: Model, path: str | Path, *, strategy: str = "auto") -> None:
    """The whole ONNX ``model`` as one ``.tflite`` file at ``path`` (``translate_proto``)."""
    assert model.path is not None  # (a whole model read from its file)
    data, _ = translate_proto(
        Prepared.of(model), Path(model.path), strategy=strategy, input_shapes=model.meta.get("input_shapes")
    )
    with atomic_path(Path(path)) as staged:
        staged.write_bytes(data)


def translate_onnx(proto, base_dir: Path) -> bytes:
    """An ONNX model without recurrent layers as a LiteRT file's bytes (the operator table's tests translate one
    operator so). ``base_dir``: where its external data is."""
    return bytes(translate_proto(Prepared(proto, []), base_dir / "model.onnx")[0])


def translate_proto(
    prepared: Prepared,
    path: Path,
    *,
    strategy: str = "auto",
    input_shapes: dict | None = None,
    finishing: Callable[[Graph, dict], None] | None = None,
    packing: bool = True,
) -> tuple[memoryview, dict]:
    """The file's bytes (``Graph.packed``; ``packing`` False: none, the size checked alone) and gatepack's
    description of it (its layers, the operators around them); ``finishing`` changes the graph and description
    before they are packed (``stateful_whole``: states held in variables)."""
    from gatepack.converters.formats.litert.writer import METADATA_FORMAT

    graph = prepared.proto.graph
    t = LiteRTTranslation(prepared.opset, g=Graph(schema()))
    t.values.update(initializers(path, prepared))
    changes = _bind_inputs(t, path, graph, input_shapes or {})
    described: list[dict] = []
    failures: list[Untranslatable] = []
    import gatepack.converters.formats.litert.onnx_ops  # noqa: F401 - registers LiteRT's column of the table

    def layer_node(node) -> bool:
        if id(node) not in prepared.skip:
            return False
        layer = prepared.members.get(id(node))
        if layer is not None and prepared.ready(layer, t.values, node):
            prepared.emitted.add(id(layer))
            _emit_layer(t, node, layer, strategy, described, failures)
        return True

    translate_nodes(t, graph.node, failures, claims=layer_node)
    if failures:
        raise RefusedError(f"{path}: {untranslatable_summary(failures, 'LiteRT')}", hint=ALTERNATIVES)
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
        return memoryview(b""), description
    return t.g.packed(description, path), description


def _bind_inputs(t: LiteRTTranslation, path: Path, graph, input_shapes: dict) -> list[str]:
    """A graph input tensor per ONNX graph input (initializers apart), of its static shape; what changes in the
    interface (int64 as INT32)."""
    changes = []
    words = "gatepack's LiteRT inputs do not carry"
    for value in fed_inputs(path, graph, input_shapes, _IO_TYPES, words, ALTERNATIVES):
        tensor = value.type.tensor_type
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor.shape.dim]
        dims = given_dims(path, value.name, declared, input_shapes)
        if any(d is None for d in dims):
            symbolic = ", ".join("?" if d is None else str(d) for d in dims)
            raise RefusedError(
                f"{path}: input {value.name!r} [{symbolic}] has a symbolic dimension; gatepack writes whole LiteRT "
                "models with static shapes",
                hint=f"fix it with --input-shape {value.name}=d1,d2,..., or " + ALTERNATIVES,
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
        given = {}
        for role in ("x", *layer.fed_roles()):
            name = getattr(itf, role)
            if name not in t.values:
                if failures:
                    return  # computed by a node that could not be translated: that node is named
                t.refuse(node, f"its {role} {name!r} is not computed before it")
            given[name] = t.as_var(t.values[name]).index
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
    """The report's ``model`` finding for a whole ONNX model written as one LiteRT file: from the same translation
    ``convert`` runs (its verdict kept per unchanged file and input shapes)."""
    if not is_whole_model(model):
        return None
    masked = [layer.name for layer in model.layers if layer.interface.mask]
    if masked:
        return Finding(
            "model",
            Status.UNSUPPORTED,
            f"whole model: layer {masked[0]!r} holds a per-step mask (Keras masking), which gatepack's LiteRT "
            "translation does not hold",
            alternative="convert the whole model to onnx or openvino, which hold it",
        )
    refusal, changes, folded = _verdict(model)
    if refusal is not None:
        return Finding("model", Status.UNSUPPORTED, refusal[0], alternative=refusal[1])
    whole = (
        f"whole model in one LiteRT file: gatepack translates the model's {model.other_ops_text()} to LiteRT builtin "
        "operators and writes every recurrent layer"
    )
    if folded:
        whole += f"; {', '.join(folded)} folded into MUL and ADD (one rounding more than ONNX's sequence)"
    if changes:
        return Finding("model", Status.REPACKED, f"{whole}; {'; '.join(changes)}")
    return Finding("model", Status.FOLDED if folded else Status.EXACT, whole)


_VERDICTS: dict[tuple, tuple[tuple[str, str] | None, list[str], list[str]]] = {}
_FOLDED = ("BatchNormalization",)  # the operators whose translation folds constants into fewer roundings


def _verdict(model: Model) -> tuple[tuple[str, str] | None, list[str], list[str]]:
    """Why the model does not translate and the way out (None: it translates), what changes in its interface and
    which folded operators it holds, asked once per unchanged file and input shapes."""
    assert model.path is not None  # (a whole model read from its file)
    path = Path(model.path)
    key = (*file_key(model), tuple(map(id, model.layers)))
    if key not in _VERDICTS:
        try:
            shapes = model.meta.get("input_shapes")
            _, described = translate_proto(Prepared.of(model), path, input_shapes=shapes, packing=False)
            folded = [op for op in _FOLDED if op in described["other_ops"]]
            _VERDICTS[key] = (None, described["interface_changes"], folded)
        except (RefusedError, UsageError) as err:
            _VERDICTS[key] = ((err.message.removeprefix(f"{path}: "), err.hint or ALTERNATIVES), [], [])
    return _VERDICTS[key]


__all__ = ["is_whole_model", "translate_onnx", "whole_model_finding", "write_whole"]

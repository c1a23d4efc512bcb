"""A whole ONNX model as one ML Program: the recurrent layers by the Core ML layer writer, every other operator by
the ONNX operator table (``onnx_ops``), shape arithmetic folded for the model's (or the user's) input shapes.

See ``translate`` for the pipeline. The package keeps the model's own input and output names (sanitised where
Core ML needs it; the metadata maps them back), its metadata, and gatepack's description of every layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Sequence

import numpy as np

import gatepack.converters.formats.coreml.scoped_weights as scoped_weights
from gatepack.converters.errors import RefusedError, UsageError
from gatepack.converters.findings import Finding
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    NEWEST_TARGET,
    STATE_TARGET,
    TARGETS,
    _ct,
    _quiet,
    check_sanitised_names,
    lowest_target,
    safe_name,
)
from gatepack.converters.formats.coreml.translate import MAX_RANK, MilTranslation, Narrow, Squeezed
from gatepack.converters.formats.coreml.writer import description_entry, emit_layer
from gatepack.converters.identity_cache import IdentityCache
from gatepack.converters.model import Model
from gatepack.converters.operators.prepared import Prepared as _Prepared
from gatepack.converters.operators.prepared import fed_inputs, given_dims, untranslatable_summary
from gatepack.converters.operators.prepared import file_key as _file_key
from gatepack.converters.operators.prepared import initializers as _initializers
from gatepack.converters.operators.translation import Untranslatable, translate_nodes
from gatepack.converters.operators.whole import WholeTarget, alternatives, branch_constants, inline_if, layer_inputs
from gatepack.converters.operators.whole import is_whole_model as _is_whole
from gatepack.converters.operators.whole import whole_model_finding as _finding
from gatepack.converters.weight_quantization import SCOPE_KEY
from gatepack.schemas.layer import OUTPUT_ROLES, RecurrentLayer

# ONNX element types (TensorProto.DataType) a package's inputs and outputs can carry, as MIL types' names
_IO_TYPES = {1: "fp32", 10: "fp16", 6: "int32", 7: "int32", 9: "int32", 11: "fp32"}  # int64, bool -> int32
# what an input or output whose type changes in the package becomes (float64 loses precision: lossy)
_IO_CHANGES = {
    7: "int64 -> int32 (values must fit)",
    9: "bool -> int32 (0 or 1; cast to bool inside the program)",
    11: "float64 -> float32",
}
_BOOL = 9  # a bool input is fed as int32 and cast to bool inside the program; a bool output leaves it as int32
# nodes never evaluated at conversion time though their inputs are constant (values that must differ per run)


def is_whole_model(model: Model) -> bool:
    """Whether Core ML writes ``model`` whole (``operators.whole.is_whole_model``)."""
    return _is_whole(model, _TARGET)


def build_whole(model: Model, *, strategy: str = "auto", target: str = NEWEST_TARGET, states: dict | None = None):
    """The whole model as a MIL ``Program`` and gatepack's description of it (names, layers, operators), its
    symbolic input dimensions fixed by the user's ``--input-shape``s (``model.meta["input_shapes"]``). The program
    the report's verdict built for the same file, layers, shapes, strategy and target is taken instead (once).
    ``states`` (state input -> state output): those pairs as Core ML states (``_state_inputs``)."""
    kept = _KEPT.pop(_build_key(model, strategy, target), model.layers)
    _KEPT.clear()
    if kept is not None and not states:
        return kept
    shapes = model.meta.get("input_shapes")
    assert model.path is not None  # (a whole model read from its file)
    return translate_proto(
        _Prepared.of(model), Path(model.path), strategy=strategy, target=target, input_shapes=shapes, states=states
    )


# the program the last verdict built (one at most), until build_whole takes it, another verdict replaces it or the
# layers it was built for are freed (``IdentityCache``: never found for other layers allocated where they were)
_KEPT: IdentityCache[tuple] = IdentityCache(size=1)


def _build_key(model: Model, strategy: str, target: str) -> tuple:
    """What a translation depends on besides the layers (the very objects, the cache's other half: a copy of the
    model made with ``dataclasses.replace`` shares them): the file as it is now, the input shapes, the strategy, the
    target and the weight quantization's scope."""
    return (*_file_key(model), strategy, target, model.meta.get(SCOPE_KEY))


def translate_onnx(proto, base_dir: Path, *, target: str = NEWEST_TARGET, input_shapes: dict | None = None):
    """An ONNX model without recurrent layers as a MIL ``Program`` and its description (the operator table's
    tests translate one operator so). ``base_dir``: where its external data is."""
    return translate_proto(_Prepared(proto, []), base_dir / "model.onnx", target=target, input_shapes=input_shapes)


def translate_proto(
    prepared: _Prepared,
    path: Path,
    *,
    strategy: str = "auto",
    target: str = NEWEST_TARGET,
    input_shapes: dict[str, list[int]] | None = None,
    states: dict[str, str] | None = None,
):
    ct = _ct()
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program

    graph = prepared.proto.graph
    names: dict[str, str] = {}
    scalars: list[str] = []
    changes: list[str] = []
    placeholders = _placeholders(path, graph, input_shapes or {}, names, scalars, changes)
    states = states or {}
    if states:
        _state_inputs(path, placeholders, names, states, target)
    changes += [
        f"output {o.name!r}: {_IO_CHANGES[o.type.tensor_type.elem_type]}"
        for o in graph.output
        if o.type.tensor_type.elem_type in _IO_CHANGES and o.type.tensor_type.elem_type != _BOOL
    ]
    t = MilTranslation(prepared.opset, mb=mb)
    described: list[dict] = []
    failures: list[Untranslatable] = []
    with Function(placeholders, opset_version=getattr(ct.target, target)) as function:
        t.values.update(_initializers(path, prepared))
        scoped_weights.bind(t, prepared, target)  # --quantize-weights-scope model: constexpr ops
        _bind_inputs(t, graph, function, names, scalars, states)
        _translate_graph(t, graph, prepared, strategy, target, described, failures)
        if failures:
            refuse_untranslatable(path, prepared.proto, failures, _symbolic_inputs(function))
        function.set_outputs(_program_outputs(t, path, graph, function, names, states, changes))
    check_sanitised_names(path, names)
    program = Program()
    program.add_function("main", function)
    other = [n.op_type for n in graph.node if id(n) not in prepared.skip]
    return program, {
        "whole": True,
        "layers": described,
        "names": names,
        "other_ops": sorted(set(other)),
        "other_op_count": len(other),
        "source_opset": prepared.opset,
        "scalar_inputs": scalars,
        "interface_changes": changes,
        **({"states": states} if states else {}),
    }


def _bind_inputs(t: MilTranslation, graph, function, names: dict, scalars: list, states: dict) -> None:
    """Each graph input's value in the program: a state read from its store and widened to fp32, a bool input (fed
    as int32 0/1) cast to bool, a scalar input (``[1]`` in the package) squeezed."""
    bools = {value.name for value in graph.input if value.type.tensor_type.elem_type == _BOOL}
    for onnx_name, mil_name in names.items():
        given = function.inputs[mil_name]
        if onnx_name in states:  # the state as stored (fp16), read and widened for the model's fp32 arithmetic
            given = t.mb.cast(x=t.mb.read_state(input=given), dtype="fp32")
        elif onnx_name in bools:
            given = t.mb.cast(x=given, dtype="bool")
        t.values[onnx_name] = t.mb.squeeze(x=given, axes=[0]) if onnx_name in scalars else given


def _program_outputs(t: MilTranslation, path: Path, graph, function, names: dict, states: dict, changes: list) -> list:
    """The program's outputs: an ``identity`` per graph output under its own (sanitised) name; a bool output cast to
    int32 (Core ML outputs carry no bools; noted in ``changes``); a state's new value stored back (fp16) instead."""
    from coremltools.converters.mil.mil import types

    outputs = []
    written_back = {output: state_input for state_input, output in states.items()}
    for out in graph.output:
        value = t.values[out.name]
        if out.name in written_back:  # the new state, stored back in fp16 for the next call
            state = function.inputs[names[written_back[out.name]]]
            t.mb.coreml_update_state(state=state, value=t.mb.cast(x=t.as_var(value), dtype="fp16"))
            continue
        names[out.name] = safe_name(out.name)
        if isinstance(value, Squeezed):
            raise RefusedError(
                f"{path}: output {out.name!r} has rank {len(value.shape)}; Core ML holds tensors of rank <= {MAX_RANK}",
                hint=alternatives("coreml"),
            )
        if isinstance(value, Narrow):
            value = value.var
            changes.append(f"output {out.name!r}: {t.values[out.name].dtype} -> int32 (the same values)")
        var = t.as_var(value)
        if types.is_bool(var.dtype):
            var = t.mb.cast(x=var, dtype="int32")
            changes.append(f"output {out.name!r}: bool -> int32 (0 or 1)")
        outputs.append(t.mb.identity(x=var, name=names[out.name]))
    return outputs


def carry_metadata(model: Model, metadata) -> None:
    """The source ONNX model's own metadata on the package's specification (``metadata``: its
    ``description.metadata``): its doc string as the description, its producer and metadata properties as
    user-defined metadata (gatepack's own key apart)."""
    from gatepack.converters.formats.onnx.graph import load_proto

    assert model.path is not None  # (a whole model read from its file)
    proto = load_proto(Path(model.path))
    metadata.shortDescription = proto.doc_string or f"{Path(model.path).name}, written whole by gatepack"
    if proto.producer_name:
        metadata.userDefined["source_producer"] = f"{proto.producer_name} {proto.producer_version}".strip()
    for prop in proto.metadata_props:
        if prop.key != "gatepack":
            metadata.userDefined[prop.key] = prop.value


def _placeholders(path: Path, graph, input_shapes: dict, names: dict, scalars: list, changes: list) -> dict:
    """A MIL placeholder per graph input (initializers apart), its symbolic dims flexible unless given. Core ML
    inputs have a rank: a scalar input is [1] in the package (listed in ``scalars``; run takes either). What
    changes in the interface is appended to ``changes``."""
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import get_new_symbol, types

    symbols: dict[str, object] = {}
    placeholders = {}
    for value in fed_inputs(
        path, graph, input_shapes, _IO_TYPES, "a Core ML input cannot carry", alternatives("coreml")
    ):
        tensor = value.type.tensor_type
        dims: list = []  # each a size or a MIL symbol
        for k, d in enumerate(tensor.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(symbols.setdefault(d.dim_param or f"{value.name}:{k}", get_new_symbol()))
        dims = given_dims(path, value.name, dims, input_shapes)
        names[value.name] = safe_name(value.name)
        dtype = getattr(types, _IO_TYPES[tensor.elem_type])
        placeholders[names[value.name]] = mb.placeholder(shape=tuple(dims) or (1,), dtype=dtype)  # no rank-0 inputs
        if not dims:
            scalars.append(value.name)
            changes.append(f"input {value.name!r}: a scalar, [1] in the package (run takes either)")
        if tensor.elem_type in _IO_CHANGES:
            changes.append(f"input {value.name!r}: {_IO_CHANGES[tensor.elem_type]}")
    return placeholders


def _state_inputs(path: Path, placeholders: dict, names: dict, states: dict[str, str], target: str) -> None:
    """Each state input's placeholder replaced by a Core ML state of the same shape, stored as fp16 (the one
    element type Core ML states hold, iOS 18 and later): the function reads it with ``read_state`` and writes the
    paired output into it with ``coreml_update_state``; the output is then no output of the package."""
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    if TARGETS.index(target) < TARGETS.index(STATE_TARGET):
        raise UsageError(
            f"{path}: Core ML states need --minimum-deployment-target {STATE_TARGET} (the target is {target})"
        )
    for state_input in states:
        mil_name = names.get(state_input)
        if mil_name is None:
            raise UsageError(f"{path}: the state pair {state_input}={states[state_input]} names no input of it")
        shape = placeholders[mil_name].sym_shape
        if not all(isinstance(d, int) for d in shape):
            raise UsageError(
                f"{path}: state {state_input} has a symbolic shape; a Core ML state needs a fixed one",
                hint=f"fix it with --input-shape {state_input}=...",
            )
        placeholders[mil_name] = mb.state_tensor_placeholder(shape=tuple(shape), dtype=types.fp16)


def _translate_graph(
    t: MilTranslation, graph, prepared: _Prepared, strategy: str, target: str, described: list, failures: list
) -> None:
    """Translate ``graph``'s nodes in order into ``t`` (``operators.translation.translate_nodes``): a recurrent
    layer's nodes by the layer writer, an ``If`` by ``_translate_if``, every other node by the operator table;
    collect what cannot be translated in ``failures``."""
    import gatepack.converters.formats.coreml.onnx_ops  # noqa: F401 - registers Core ML's column of the table

    def layer(node, found: RecurrentLayer) -> None:
        _emit_layer(t, node, found, strategy, target, described, failures)

    def if_node(node) -> None:
        _translate_if(t, node, prepared, strategy, target, described, failures)

    translate_nodes(t, graph.node, failures, claims=prepared.claimer(t, layer), special={"If": if_node})


def _translate_if(
    t: MilTranslation, node, prepared: _Prepared, strategy: str, target: str, described: list, failures: list
) -> None:
    """An ``If``: when its condition is known at conversion time, the chosen branch translated in place (it reads
    the outer graph's values; its outputs become the node's); else MIL's ``cond`` holding both branches."""
    if inline_if(t, node, lambda branch: _translate_graph(t, branch, prepared, strategy, target, described, failures)):
        return
    condition = t.value(node, 0)

    built: dict[str, list] = {}  # each branch's outputs as MIL typed them

    def block(branch, which: str):
        def translate() -> tuple:
            outer = dict(t.values)  # a block's values stay in the block
            t.values.update(branch_constants(branch))
            before = len(failures)
            _translate_graph(t, branch, prepared, strategy, target, described, failures)
            if len(failures) > before:  # cannot finish the block: end it with stand-ins, the refusal names why
                outputs = tuple(t.mb.const(val=np.zeros(1, np.float32)) for _ in branch.output)
                built.setdefault("failed", []).append(which)
            else:
                outputs = tuple(t.mb.identity(x=t.as_var(t.values[o.name])) for o in branch.output)
                built[which] = [tuple(v.shape) for v in outputs]
            t.values = outer
            return outputs

        return translate

    pred = condition if t.rank(condition) == 0 else t.mb.reshape(x=condition, shape=np.zeros(0, np.int32))
    try:
        then, other = block(t.attr(node, "then_branch"), "then"), block(t.attr(node, "else_branch"), "else")
        results = t.mb.cond(pred=pred, _true_fn=then, _false_fn=other)
    except Untranslatable:
        raise
    except Exception:  # noqa: BLE001 - coremltools' type checks: said in words below
        t.refuse(node, _cond_refusal(node, built, prepared.proto))
    results = results if isinstance(results, (list, tuple)) else [results]
    t.values.update(zip(node.output, results))


def _cond_refusal(node, built: dict[str, list], proto) -> str:
    """Why MIL's ``cond`` cannot hold an ``If`` decided at run time, in words: an output whose branches differ in
    rank (``cond`` types each output once: the ranks must agree, and a size that differs must be symbolic), or
    a branch MIL refuses; and what decides the condition (``onnx.folding.if_deciders``), which fixing folds."""
    from gatepack.converters.formats.onnx.folding import if_deciders, specialisation_hint

    def text(shape: tuple) -> str:
        return f"rank {len(shape)} [{', '.join(str(d) if isinstance(d, (int, np.integer)) else '?' for d in shape)}]"

    differing = [
        f"{name!r}: {text(a)} (then) and {text(b)} (else)"
        for name, a, b in zip(node.output, built.get("then", []), built.get("else", []))
        if len(a) != len(b) or any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))
    ]
    if built.get("failed"):
        why = f"a node of its {' and '.join(built['failed'])} branch cannot be held (named with it)"
    elif differing:
        why = (
            f"its branches give {'; '.join(differing)}; MIL's cond holds branches whose outputs agree in rank, sizes "
            "that differ being symbolic"
        )
    else:
        why = "MIL's cond refuses its branches' outputs"
    values, shapes = if_deciders(proto, node.input[0])
    decided = [f"the value of input {name!r}" for name in values] + (["input shapes"] if shapes else [])
    fixes = specialisation_hint(proto, node.input[0]) + ("fixing the input shapes (--input-shape) " if shapes else "")
    if decided:
        why += f"; its condition depends on {' and '.join(decided)}, known only at run time ({fixes.strip(', ')} "
        why += "decides it before)"
    return why


def _emit_layer(
    t: MilTranslation, node, layer: RecurrentLayer, strategy: str, target: str, described: list, failures: list
) -> None:
    itf = layer.interface
    try:
        taken = layer_inputs(t, node, layer, failures)
        if taken is None:
            return  # computed by a node that could not be translated: that node is named
        given = {}
        for role, (name, value) in taken.items():
            if isinstance(value, (Squeezed, Narrow)):
                t.refuse(node, f"its {role} {name!r} is held as {type(value).__name__} (rank > 5 or 8-bit)")
            given[role] = (
                t.as_var(value.astype(np.float32) if role != "sequence_lens" else value)
                if isinstance(value, np.ndarray)
                else value
            )
        if t.rank(given["x"]) != 3:  # (a branch of an If taken only for other shapes: the source fails there too)
            shape = ", ".join(str(d) if isinstance(d, (int, np.integer)) else "?" for d in t.shape(given["x"]))
            t.refuse(node, f"its X {itf.x!r} has rank {t.rank(given['x'])} [{shape}] here; a {node.op_type} takes 3")
        try:
            results, chosen = emit_layer(t.mb, layer, given, strategy, target)
        except Exception as err:  # coremltools' type inference, on what the checks above did not foresee
            raise Untranslatable(node, f"layer {layer.name!r}: {t.rejected(node)}") from err
    except Untranslatable as err:
        failures.append(err)
        return
    for role, value in zip(OUTPUT_ROLES, results):
        name = getattr(itf, role)
        if name:
            t.values[name] = value
    described.append(description_entry(layer, chosen, target))


def refusal_summary(failures: list[Untranslatable]) -> str:
    """'3 nodes Core ML cannot hold: Einsum x2 (first: 'einsum_1': ...); Foo (first: ...)'."""
    return untranslatable_summary(failures, "Core ML")


def refuse_untranslatable(path: Path, proto, failures: list[Untranslatable], symbolic: Sequence[str] = ()) -> NoReturn:
    """RefusedError naming what cannot be translated; where inputs have symbolic dimensions, fixing them (which folds
    the shape arithmetic and the Ifs decided by shapes) is the first way out; where a refused value is computed from
    integer scalar inputs alone (``onnx.folding.fixing_hint``), fixing their values is one."""
    from gatepack.converters.formats.onnx.folding import fixing_hint

    fix = fixing_hint(proto, [f.run_time for f in failures if f.run_time]) + (
        f"fix the symbolic input dimensions with --input-shape NAME=d1,d2,... ({'; '.join(symbolic)}), or "
        if symbolic
        else ""
    )
    raise RefusedError(
        f"{path}: {refusal_summary(failures)}",
        hint=fix + alternatives("coreml"),
    )


def _symbolic_inputs(function) -> list[str]:
    """'NAME [?, 512]' for each program input with a symbolic dimension."""
    return [
        f"{name} [{', '.join(str(d) if isinstance(d, int) else '?' for d in var.shape)}]"
        for name, var in function.inputs.items()
        if not all(isinstance(d, int) for d in var.shape)
    ]


def whole_model_finding(model: Model) -> Finding | None:
    """The report's ``model`` finding for a whole ONNX model written as one ML Program
    (``operators.whole.whole_model_finding``): from the same translation ``convert`` runs (its verdict kept per
    unchanged file and input shapes), so the report never calls exact a model with an operator the table cannot
    write."""
    return _finding(model, _TARGET, _file_key(model))


def _translated(model: Model) -> tuple[list[str], list[str]]:
    """What a translation of ``model`` for the lowest target its layers allow (what convert writes when no option
    is given) changes in its interface (raises the refusal); the program is kept for ``build_whole``."""
    assert model.path is not None  # (a whole model read from its file)
    with _quiet():
        target = lowest_target(model.layers)
        shapes = model.meta.get("input_shapes")
        built = translate_proto(_Prepared.of(model), Path(model.path), target=target, input_shapes=shapes)
    _KEPT.clear()
    _KEPT.put(_build_key(model, "auto", target), model.layers, built)
    return built[1]["interface_changes"], []


_MASK_WORDS = "which no MIL recurrent op has and gatepack's Core ML translation does not hold"
_TARGET = WholeTarget(FORMAT, _translated, artifact="one ML Program", language="MIL ops", mask_words=_MASK_WORDS)


__all__ = ["build_whole", "is_whole_model", "translate_onnx", "whole_model_finding"]

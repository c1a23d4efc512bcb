"""Reading ML Program packages without a Core ML runtime: the files, gatepack's metadata, and each
native gru/rnn/lstm op as a canonical layer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

import gatepack.converters.formats.coreml.compressed as compressed
from gatepack.converters.description import build_layer, constant_from_layout, parse
from gatepack.converters.errors import InputError, NoRecurrentLayerError
from gatepack.converters.findings import Finding
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    FP16_SOURCE,
    _named,
    _ops,
    safe_name,
)
from gatepack.converters.formats.coreml.lifting import (
    _lift_loops,
)
from gatepack.converters.formats.coreml.native_ops import (
    NATIVE_OPS,
    _op_directions,
    _read_op,
)
from gatepack.converters.formats.coreml.package import (
    _load_program,
)
from gatepack.converters.model import Model
from gatepack.schemas.layer import (
    DirectionParams,
    Provenance,
    RecurrentLayer,
)
from gatepack.schemas.quantized import QuantizedWeights

# ----------------------------------------------------------------------------------------- reading


def read(path: str | Path, **_options) -> Model:
    """Read the recurrent layers of an ML Program: gatepack's (from its metadata, checked against the
    program) or any program's native gru/rnn ops."""
    path = Path(path)
    function, meta = _load_program(path)
    ops = _ops(function)
    if meta is not None:
        layers, notes = [], {}
        for entry in meta.get("layers", []):
            layer, found = _read_described(
                path, entry, {op.name: op for op in ops}, {v.name: v for op in ops for v in op.outputs}
            )
            layers.append(layer)
            notes[layer.name] = found
        if not layers:
            raise NoRecurrentLayerError(f"{path}: its gatepack metadata lists no layer")
        precision = meta.get("precision", "fp32")
        if precision == "fp16":
            for found in notes.values():
                found.append(FP16_SOURCE)
        read_meta = {"gatepack": True, "names": meta.get("names", {}), "precision": precision}
        if meta.get("whole") is True:  # a whole model: verified end to end, its interface the model's own
            read_meta.update(
                other_ops=list(meta.get("other_ops") or ["(operators)"]),
                other_op_count=meta.get("other_op_count"),
                own_input_shapes=True,
                **({"states": meta["states"]} if meta.get("states") else {}),  # a stateful package's state pairs
            )
        return Model(path, FORMAT, layers, notes, meta=read_meta)
    layers, notes = [], {}
    for op in ops:
        if op.op_type in NATIVE_OPS:
            layer, found = _read_op(op, path)
            layers.append(layer)
            notes[layer.name] = found
    refused: list[tuple[str, str]] = []
    if not layers:
        layers, notes, refused = _lift_loops(path, function)
    if not layers:
        raise NoRecurrentLayerError(
            f"{path}: no gru, rnn or lstm op in the program"
            + (f", and its while_loop is not a GRU/RNN: {refused[0][1]}" if refused else ""),
        )
    # another producer's program: its inputs have the program's own shapes (an lstm op's states are
    # [N, D*H]), which run_numpy checks, not the layers' interface shapes
    meta = {**_other_ops(function, layers), "own_input_shapes": True}
    return Model(path, FORMAT, layers, notes, refused, meta)


def _other_ops(function, layers: list[RecurrentLayer]) -> dict:
    """The model meta naming the main function's operators that are not its layers (constants apart)."""
    lifted = {layer.name for layer in layers}
    other = [
        op.op_type
        for op in function.operations
        if op.op_type not in ("const", *NATIVE_OPS)
        and not op.op_type.startswith("constexpr_")  # a weight's decompression, part of its layer
        and not (op.op_type == "while_loop" and op.name in lifted)
    ]
    return {"other_ops": sorted(set(other)), "other_op_count": len(other)} if other else {}


def _read_described(
    path: Path, entry: dict, ops_by_name: dict, vars_by_name: dict
) -> tuple[RecurrentLayer, list[Finding]]:
    """A layer gatepack wrote: semantics from the metadata, weights from the program's named constants."""
    info = parse(path, entry)
    prefix = safe_name(info.name)
    found: list[Finding] = []
    directions = []
    for k, acts in enumerate(info.activations):
        if info.strategy == "native":
            op = _named(ops_by_name, f"{prefix}_{info.cell.value}_{k}")
            if op is None:
                raise InputError(
                    f"{path}: layer {info.name!r}: the metadata says native but the program has no op "
                    f"{prefix}_{info.cell.value}_{k}"
                )
            (params,), _, lbr, _, folded = _op_directions(op, info.cell, path, info.name)
            found += folded if k == 0 else []
            if [a.name for a in params.activations] != [a.name for a in acts] or lbr != info.linear_before_reset:
                raise InputError(
                    f"{path}: layer {info.name!r}: its metadata contradicts op {op.name!r} (activations or reset_after)"
                )
            directions.append(replace(params, activations=acts))
        else:

            def const(label: str) -> np.ndarray:
                value, found = compressed.weight(_named(vars_by_name, f"{prefix}_{label}{k}"))
                if value is None:
                    raise InputError(
                        f"{path}: layer {info.name!r}: the program has no constant {prefix}_{label}{k} that its "
                        "metadata describes"
                    )
                records[label] = compressed.record(found)
                return np.asarray(value, np.float32)  # fp16 packages: the fp16 values, widened exactly

            peephole = _named(vars_by_name, f"{prefix}_P{k}")
            rows = entry.get("weights") == "rows"  # W, R as the layer holds them (earlier packages: W^T, R^T)
            records: dict[str, QuantizedWeights | None] = {}
            directions.append(
                DirectionParams(
                    const("W") if rows else const("W").T,
                    const("R") if rows else const("R").T,
                    const("Wb"),
                    const("Rb"),
                    acts,
                    P=None if peephole is None else const("P"),
                    Wq=records["W"],
                    Rq=records["R"],
                )
            )
    constants = {}
    for role in info.constant_roles:
        var = _named(vars_by_name, f"{prefix}_{role}")
        if var is None or var.val is None:
            raise InputError(f"{path}: layer {info.name!r}: the program has no constant {prefix}_{role} (its {role})")
        value = np.asarray(var.val)
        constants[role] = constant_from_layout(value if role == "sequence_lens" else value.astype(np.float32), role, 0)
    provenance = Provenance(FORMAT, path, info.name, info.strategy)
    return build_layer(path, info, directions, provenance, constants), found

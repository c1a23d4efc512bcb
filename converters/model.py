"""A model as gatepack sees it: the recurrent layers read from one artifact, plus what was noticed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from gatepack.converters.errors import InputError
from gatepack.converters.findings import Finding, Status, operator_list
from gatepack.schemas.layer import INPUT_ROLES, OUTPUT_ROLES, ROLE_LABELS, RecurrentLayer


@dataclass(repr=False)
class Model:
    """The recurrent layers of one artifact.

    ``notes`` holds, per layer name, findings made while reading the source (e.g. an activation
    parameter the source left to a runtime default); they travel into every target's report.
    ``skipped`` lists recurrent nodes gatepack found but cannot read yet (e.g. LSTM), as
    ``(name, reason)``.
    """

    path: Path | None
    format: str
    layers: list[RecurrentLayer]
    notes: dict[str, list[Finding]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    files: tuple[Path, ...] = ()  # every file opened to read the artifact (resolved), set by ``load``

    def __repr__(self) -> str:
        cells: dict[str, int] = {}
        for layer in self.layers:
            kind = f"{layer.cell.op_name} {layer.direction.value}"
            cells[kind] = cells.get(kind, 0) + 1
        kinds = ", ".join(f"{n} {kind}" for kind, n in cells.items())
        names = ", ".join(layer.name for layer in self.layers[:3]) + (", ..." if len(self.layers) > 3 else "")
        other = self.meta.get("other_ops")
        around = f"; other operators: {', '.join(other[:6])}{', ...' if len(other) > 6 else ''}" if other else ""
        return f"Model({str(self.path)!r}, {self.format}, {len(self.layers)} layer(s): {kinds} [{names}]{around})"

    def notes_for(self, layer: RecurrentLayer) -> list[Finding]:
        return self.notes.get(layer.name, [])

    @property
    def other_ops(self) -> list[str]:
        """The types of the operators around the recurrent layers ([] when the artifact holds only layers)."""
        return list(self.meta.get("other_ops") or [])

    @property
    def layers_only(self) -> bool:
        """True when the user asked for the recurrent layers alone (``layers_only=True``, ``--layers-only``)."""
        return bool(self.meta.get("layers_only"))

    @property
    def keeps_whole(self) -> bool:
        """True when a target that can hold the operators around the layers should write them too."""
        return bool(self.other_ops) and not self.layers_only

    def other_ops_text(self) -> str:
        """'415 other operators of 24 types (Add, BatchNormalization, ...)' (the count when the reader knows it)."""
        ops = self.other_ops
        count = self.meta.get("other_op_count")
        kinds = f"{len(ops)} type{'s' if len(ops) != 1 else ''}"
        head = f"{count} other operator{'s' if count != 1 else ''}" if count else "other operators"
        head += f" of {kinds}"
        return f"{head} ({operator_list(ops)}){self._skipped_text()}"

    def _skipped_text(self) -> str:
        """', among them what looks recurrent but was not read as a layer ('a', 'b'; ...)' ('' if none)."""
        if not self.skipped:
            return ""
        names = ", ".join(repr(name) for name, _ in self.skipped[:4])
        more = f" and {len(self.skipped) - 4} more" if len(self.skipped) > 4 else ""
        return f", among them what looks recurrent but was not read as a layer ({names}{more}; inspect says why)"


def with_input_shapes(model: Model, shapes: dict) -> Model:
    """``model`` carrying the user's input shapes (input name -> dims, ``--input-shape``) for a target that fixes
    the whole model's symbolic dimensions with them (OpenVINO folds a model its ONNX frontend refuses as it is)."""
    return (
        replace(model, meta={**model.meta, "input_shapes": {k: list(v) for k, v in shapes.items()}})
        if shapes
        else model
    )


GraphTensor = tuple[str, Any, "list | None"]  # (name, NumPy dtype or None, dims or None) of a model's input or output


def graph_interface(model: Model) -> tuple[Sequence[GraphTensor], Sequence[GraphTensor]] | None:
    """The whole model's own inputs and outputs as (name, dtype, dims), read from its artifact by its format
    (None: an in-memory model, a format whose artifacts hold recurrent layers only, or inputs the artifact does
    not declare fully)."""
    import gatepack.converters.registry as registry

    if model.path is None:
        return None
    implementation = registry.reader(model.format)
    if implementation.graph_inputs is None or implementation.graph_outputs is None:
        return None
    try:
        return implementation.graph_inputs(model.path), implementation.graph_outputs(model.path)
    except InputError:
        return None


def as_layers_only(model: Model) -> Model:
    """``model`` marked to be written as its recurrent layers alone (the operators around them dropped), its
    layers' tensors named readably (``with_readable_names``)."""
    if not model.other_ops:
        return model
    return replace(with_readable_names(model), meta={**model.meta, "layers_only": True})


def readable_name(layer_name: str, role: str) -> str:
    """``GRU_153_Y_h``: the layer's name and the tensor's role in letters, digits and single underscores
    (``/emb_gru/GRU`` -> ``emb_gru_GRU_X``), not starting with a digit: a name every format keeps as it is
    (Core ML's rule is the strictest)."""
    text = re.sub(r"[^A-Za-z0-9]+", "_", layer_name).strip("_") + "_" + ROLE_LABELS[role]
    return text if re.match(r"[A-Za-z]", text) else "_" + text.lstrip("_")


def with_readable_names(model: Model) -> Model:
    """``model`` whose layer tensors that are not the whole model's own inputs or outputs (internal tensors such
    as ``onnx::GRU_473``, which mean nothing once the operators around the layers are gone) take readable names
    (``readable_name``): each layer's output and input its own, except an input another layer produces, which
    keeps the producer's name for it (the chain stays visible). The model's own inputs and outputs keep their
    names. Unchanged when the artifact's inputs and outputs cannot be listed (``graph_interface``)."""
    interface = graph_interface(model)
    if interface is None:
        return model
    own = {name for tensors in interface for name, _, _ in tensors}
    taken = set(own)  # every other name of the layers' tensors is replaced
    produced: dict[str, str] = {}
    names: list[dict[str, Any]] = [{} for _ in model.layers]  # per layer: interface field -> its new name
    for roles in (OUTPUT_ROLES, INPUT_ROLES):  # producers first: a chained input takes its producer's name
        for layer, renamed in zip(model.layers, names):
            for role in roles:
                name = getattr(layer.interface, role)
                if not name or name in own:
                    continue
                if roles is INPUT_ROLES and name in produced:
                    renamed[role] = produced[name]
                    continue
                renamed[role] = _fresh(readable_name(layer.name, role), taken)
                if roles is OUTPUT_ROLES:
                    produced[name] = renamed[role]
    if not any(names):
        return model
    layers = [replace(lay, interface=replace(lay.interface, **renamed)) for lay, renamed in zip(model.layers, names)]
    return replace(model, layers=layers)


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3`` ... the first not in ``taken`` (which then holds it)."""
    fresh, k = name, 1
    while fresh in taken:
        k += 1
        fresh = f"{name}_{k}"
    taken.add(fresh)
    return fresh


_INPUT_ROLES = {role: ROLE_LABELS[role] for role in INPUT_ROLES}
_OUTPUT_ROLES = {role: ROLE_LABELS[role] for role in OUTPUT_ROLES}


def chained_inputs(model: Model) -> dict[str, dict[str, tuple[str, str, str]]]:
    """Per layer name, its inputs that are another layer's output (a stack read from one artifact):
    interface field -> (tensor name, producing layer, its output role)."""
    produced = {
        getattr(layer.interface, key): (layer.name, role)
        for layer in model.layers
        for key, role in _OUTPUT_ROLES.items()
        if getattr(layer.interface, key)
    }
    found: dict[str, dict[str, tuple[str, str, str]]] = {}
    for layer in model.layers:
        for key in _INPUT_ROLES:
            name = getattr(layer.interface, key)
            if name in produced:
                found.setdefault(layer.name, {})[key] = (name, *produced[name])
    return found


def input_name_for(name: str) -> str:
    """The name a chained input takes in an artifact of side-by-side layers."""
    return f"{name}:input"


def with_separate_inputs(model: Model) -> Model:
    """``model`` with every chained input renamed ``input_name_for(name)``: writers of side-by-side
    layers then never declare an input and an output of one name."""
    chained = chained_inputs(model)
    if not chained:
        return model
    layers = []
    for layer in model.layers:
        if layer.name in chained:
            # interface field -> its new name (Any: replace() checks keyword values against every field's type)
            names: dict[str, Any] = {key: input_name_for(name) for key, (name, _, _) in chained[layer.name].items()}
            layer = replace(layer, interface=replace(layer.interface, **names))
        layers.append(layer)
    return replace(model, layers=layers)


def chained_input_finding(model: Model, layer: RecurrentLayer) -> Finding | None:
    """The report's note for a layer fed by another layer's output, written side by side."""
    chained = chained_inputs(model).get(layer.name)
    if not chained:
        return None
    parts = [
        f"{_INPUT_ROLES[key]} {name!r} is layer {source!r}'s {role}; the artifact takes it as input "
        f"{input_name_for(name)!r}"
        for key, (name, source, role) in chained.items()
    ]
    return Finding(
        "interface",
        Status.REPACKED,
        "; ".join(parts) + " (layers are written side by side: feed it that output, in this layer's layout)",
    )

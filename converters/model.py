"""A model as gatepack sees it: the recurrent layers read from one artifact, plus what was noticed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from gatepack.converters.findings import Finding, Status
from gatepack.schemas.layer import RecurrentLayer


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


_INPUT_ROLES = {"x": "X", "sequence_lens": "sequence_lens", "initial_h": "initial_h"}
_OUTPUT_ROLES = {"y": "Y", "y_h": "Y_h"}


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
    layers = [
        replace(
            layer,
            interface=replace(
                layer.interface, **{key: input_name_for(name) for key, (name, _, _) in chained[layer.name].items()}
            ),
        )
        if layer.name in chained
        else layer
        for layer in model.layers
    ]
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

"""A model as gatepack sees it: the recurrent layers read from one artifact, plus what was noticed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gatepack.converters.findings import Finding
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

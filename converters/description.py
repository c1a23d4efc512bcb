"""A layer's semantics and interface as JSON, stored inside artifacts whose graph alone cannot say
everything (OpenVINO rt_info, Core ML metadata); weights stay in the artifact's graph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from converters.errors import InputError
from schemas.activations import Activation
from schemas.layer import Cell, Direction, Interface, RecurrentLayer


def describe(layer: RecurrentLayer) -> dict:
    """The layer's semantics and interface, JSON-ready."""
    itf = layer.interface
    return {
        "cell": layer.cell.value,
        "direction": layer.direction.value,
        "hidden_size": layer.hidden_size,
        "input_size": layer.input_size,
        "linear_before_reset": layer.linear_before_reset,
        "clip": layer.clip,
        "has_bias": layer.has_bias,
        "activations": [[[a.name, a.alpha, a.beta] for a in p.activations] for p in layer.directions],
        "interface": {"x": itf.x, "y": itf.y, "y_h": itf.y_h, "sequence_lens": itf.sequence_lens, "initial_h": itf.initial_h, "layout": itf.layout, "seq_length": itf.seq_length, "batch_size": itf.batch_size, "dtype": itf.dtype},
    }


@dataclass
class Described:
    """A stored description, parsed: everything but the weights."""

    name: str
    strategy: str
    cell: Cell
    direction: Direction
    hidden_size: int
    input_size: int
    linear_before_reset: bool
    clip: float | None
    has_bias: bool
    activations: list[tuple[Activation, ...]]  # per direction
    interface: Interface

    @property
    def gates(self) -> int:
        return self.cell.gates


def parse(path: Path, entry: dict) -> Described:
    """Parse one stored description; a one-line InputError naming the file if it is inconsistent."""
    try:
        return Described(
            name=entry["name"],
            strategy=entry["strategy"],
            cell=Cell(entry["cell"]),
            direction=Direction(entry["direction"]),
            hidden_size=int(entry["hidden_size"]),
            input_size=int(entry["input_size"]),
            linear_before_reset=bool(entry["linear_before_reset"]),
            clip=entry["clip"],
            has_bias=bool(entry.get("has_bias", True)),
            activations=[tuple(Activation(a[0], a[1], a[2]) for a in per) for per in entry["activations"]],
            interface=Interface(**entry["interface"]),
        )
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise InputError(f"{path}: its gatepack description of a layer is inconsistent ({err})") from None


def build_layer(path: Path, info: Described, directions: list, extras: dict) -> RecurrentLayer:
    """The described layer with ``directions``' weights, read from the artifact's graph; the weights'
    shapes are checked against the description."""
    from schemas.layer import SpecError

    gh, i, h = info.gates * info.hidden_size, info.input_size, info.hidden_size
    if len(directions) != info.direction.count:
        raise InputError(f"{path}: layer {info.name!r}: {len(directions)} direction(s) of weights for a {info.direction.value} layer")
    for k, p in enumerate(directions):
        if p.W.shape != (gh, i) or p.R.shape != (gh, h):
            raise InputError(f"{path}: layer {info.name!r}: direction {k} weights {list(p.W.shape)}, {list(p.R.shape)} contradict its description (I={i}, H={h})")
    try:
        return RecurrentLayer(info.name, info.cell, i, h, info.direction, tuple(directions), info.interface, info.linear_before_reset, info.clip, info.has_bias, extras=extras)
    except SpecError as err:
        raise InputError(f"{path}: {err}") from None

"""A layer's semantics and interface as JSON, stored inside artifacts whose graph alone cannot say
everything (OpenVINO rt_info, Core ML metadata); weights stay in the artifact's graph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from gatepack.converters.errors import InputError
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import (
    CONSTANT_ROLES,
    PERM_SWAP_01,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
)


def describe(layer: RecurrentLayer) -> dict:
    """The layer's semantics and interface, JSON-ready."""
    itf = layer.interface
    described: dict[str, Any] = {
        "cell": layer.cell.value,
        "direction": layer.direction.value,
        "hidden_size": layer.hidden_size,
        "input_size": layer.input_size,
        "linear_before_reset": layer.linear_before_reset,
        "clip": layer.clip,
        "has_bias": layer.has_bias,
        "activations": [[[a.name, a.alpha, a.beta] for a in p.activations] for p in layer.directions],
        "interface": {
            "x": itf.x,
            "y": itf.y,
            "y_h": itf.y_h,
            "sequence_lens": itf.sequence_lens,
            "initial_h": itf.initial_h,
            "layout": itf.layout,
            "seq_length": itf.seq_length,
            "batch_size": itf.batch_size,
            "dtype": itf.dtype,
        },
    }
    if layer.constants:  # the inputs held as constants, stored in the artifact's graph under "LAYER/ROLE"
        described["constants"] = sorted(layer.constants)
    if layer.cell.spec.input_forget:  # LSTM: the coupling flag and the cell state's tensors
        described["input_forget"] = layer.input_forget
        described["interface"].update(initial_c=itf.initial_c, y_c=itf.y_c)
    if itf.mask:  # a per-step hold (Keras masking)
        described["interface"]["mask"] = itf.mask
    return described


def constant_in_layout(layer: RecurrentLayer, role: str, layout: int) -> np.ndarray:
    """The layer's constant ``role`` as a graph holds it in ``layout`` (states [N, D, H] in layout 1)."""
    value = layer.constants[role]
    return np.ascontiguousarray(value.transpose(PERM_SWAP_01)) if layout == 1 and value.ndim == 3 else value


def constant_from_layout(value: np.ndarray, role: str, layout: int) -> np.ndarray:
    """A constant ``role`` read from a graph in ``layout``, back in the canonical layout 0 (int32 lengths)."""
    if role == "sequence_lens":
        return np.asarray(value).reshape(-1).astype(np.int32)
    return np.ascontiguousarray(value.transpose(PERM_SWAP_01)) if layout == 1 else np.asarray(value)


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
    input_forget: bool
    activations: list[tuple[Activation, ...]]  # per direction
    interface: Interface
    constant_roles: tuple[str, ...] = ()  # the optional inputs the layer holds as constants

    @property
    def gates(self) -> int:
        return self.cell.gates


def typed_field(entry: dict, key: str, kinds: tuple[type, ...], default: object = KeyError) -> Any:
    """``entry[key]`` if it is one of ``kinds`` (a bool is not an int here); ValueError naming the field otherwise.
    (Typed ``Any``: its type is the one of ``kinds`` checked here at run time, which the caller names.)"""
    if key not in entry:
        if default is KeyError:
            raise ValueError(f"field {key!r} is missing")
        return default
    value = entry[key]
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ValueError(f"field {key!r} is {value!r}, not {' or '.join(k.__name__ for k in kinds)}")
    return value


def _activation(item: object) -> Activation:
    if not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], str):
        raise ValueError(f"activation {item!r} is not [name, alpha, beta]")
    for value in item[1:]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"activation {item!r}: its parameters must be numbers or null")
    return Activation(item[0], item[1], item[2])


def _constant_roles(entry: dict) -> tuple[str, ...]:
    roles = typed_field(entry, "constants", (list,), [])
    if not all(isinstance(r, str) and r in CONSTANT_ROLES for r in roles):
        raise ValueError(f"field 'constants' is {roles!r}, not a list of {CONSTANT_ROLES}")
    return tuple(roles)


# How a described layer is written: its format's sequence op, its elementary ops, or (a layer with a per-step
# hold, in a whole model) the elementary ONNX Loop gatepack wrote in place and a frontend converted ("held").
STRATEGIES = ("native", "decomposed", "held")


def held_weight_name(layer: str, weight: str) -> str:
    """The initializer name of a held layer's weight ``weight`` (``onnx.elementary``'s: ``d0.WT``, ``d0.Wb``,
    ``d0.R_<gates>T``, ``d0.Rb_<gates>``, ``d0.P``), which OpenVINO's ONNX frontend keeps as its constant's name."""
    return f"{layer}/held.{weight}"


def elementary_direction(
    info: Described, k: int, held: Iterable[str], const: Callable[[str], np.ndarray]
) -> DirectionParams:
    """Direction ``k`` of a layer written as ``onnx.elementary`` writes it, from the names of its weights ``held``
    (``WT`` and ``Wb`` whole, ``R_<gates>T`` and ``Rb_<gates>`` in blocks of gates, ``P`` for peepholes) and
    ``const(name)``, their values: W = WT^T, R = the R blocks' transposes stacked in ONNX gate order, Rb alike.
    A ValueError where the blocks are not the cell's gates, each once."""
    gates = info.cell.spec.gates
    names = set(held)
    blocks = sorted(
        (n[2:-1] for n in names if n.startswith("R_") and n.endswith("T")),
        key=lambda block: gates.index(block[0]) if block and block[0] in gates else len(gates),
    )
    if "".join(blocks) != "".join(gates):
        raise ValueError(f"{info.name!r}: the graph holds recurrent weight blocks {blocks}, not the gates {gates}")
    r = np.concatenate([const(f"R_{block}T").T for block in blocks])
    rb = np.concatenate([const(f"Rb_{block}") for block in blocks])
    p = const("P") if "P" in names else None
    return DirectionParams(const("WT").T.copy(), r, const("Wb"), rb, info.activations[k], p)


def parse(path: Path, entry: object) -> Described:
    """Parse one stored description, every field typed; a one-line InputError naming the file, the
    field and the value if it is malformed."""
    try:
        if not isinstance(entry, dict):
            raise ValueError(f"a layer entry is {type(entry).__name__}, not an object")
        activations = typed_field(entry, "activations", (list,))
        if not all(isinstance(per, list) for per in activations):
            raise ValueError("field 'activations' must hold one list per direction")
        interface = typed_field(entry, "interface", (dict,))
        if entry.get("strategy") not in STRATEGIES:
            raise ValueError(f"field 'strategy' is {entry.get('strategy')!r}, not one of {STRATEGIES}")
        return Described(
            name=typed_field(entry, "name", (str,)),
            strategy=typed_field(entry, "strategy", (str,)),
            cell=Cell(typed_field(entry, "cell", (str,))),
            direction=Direction(typed_field(entry, "direction", (str,))),
            hidden_size=typed_field(entry, "hidden_size", (int,)),
            input_size=typed_field(entry, "input_size", (int,)),
            linear_before_reset=typed_field(entry, "linear_before_reset", (bool,)),
            clip=typed_field(entry, "clip", (int, float, type(None))),
            has_bias=typed_field(entry, "has_bias", (bool,), True),
            input_forget=typed_field(entry, "input_forget", (bool,), False),
            activations=[tuple(_activation(a) for a in per) for per in activations],
            interface=Interface(**interface),
            constant_roles=_constant_roles(entry),
        )
    except (ValueError, TypeError) as err:
        raise InputError(
            f"{path}: its gatepack description of a layer is malformed ({' '.join(str(err).split())[:200]})"
        ) from None


def build_layer(
    path: Path, info: Described, directions: list, provenance: Provenance, constants: dict | None = None
) -> RecurrentLayer:
    """The described layer with ``directions``' weights and the ``constants`` it holds (role -> layout-0
    value), read from the artifact's graph; the weights' shapes are checked against the description."""
    from gatepack.schemas.layer import SpecError

    gh, i, h = info.gates * info.hidden_size, info.input_size, info.hidden_size
    if len(directions) != info.direction.count:
        raise InputError(
            f"{path}: layer {info.name!r}: {len(directions)} direction(s) of weights for a {info.direction.value} layer"
        )
    for k, p in enumerate(directions):
        if p.W.shape != (gh, i) or p.R.shape != (gh, h):
            raise InputError(
                f"{path}: layer {info.name!r}: direction {k} weights {list(p.W.shape)}, {list(p.R.shape)} "
                f"contradict its description (I={i}, H={h})"
            )
    try:
        return RecurrentLayer(
            info.name,
            info.cell,
            i,
            h,
            info.direction,
            tuple(directions),
            info.interface,
            info.linear_before_reset,
            info.clip,
            info.has_bias,
            info.input_forget,
            constants=constants or {},
            provenance=provenance,
        )
    except SpecError as err:
        raise InputError(f"{path}: {err}") from None

"""The dummy format's implementation: the canonical layers as one JSON file (``NAME.dummy``).

It holds every field and weight of a layer as it is (arrays as dtype, shape and values: a float16, float32 or
float64 value is a float64 in JSON, exactly), so it writes every cell and feature exactly; it has no runtime
of its own, so verification runs the layer read back from the file on gatepack's executor (and says so). Its
record is ``registration.py`` beside this file: the folder is the whole format (tests/sixth_format.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from gatepack.converters.errors import InputError
from gatepack.converters.fileio import atomic_path, read_json
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.dummy.registration import MAGIC, NAME
from gatepack.converters.model import Model
from gatepack.converters.registration import FormatImplementation
from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import Direction, DirectionParams, Interface, Provenance, RecurrentLayer


def _array(value: np.ndarray | None) -> dict | None:
    return (
        None
        if value is None
        else {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.ravel().tolist()}
    )


def _from_array(entry: dict | None) -> np.ndarray | None:
    return None if entry is None else np.array(entry["values"], entry["dtype"]).reshape(entry["shape"])


def _encode(layer: RecurrentLayer) -> dict:
    directions = [
        {
            **{key: _array(getattr(params, key)) for key in ("W", "R", "Wb", "Rb", "P")},
            "activations": [dataclasses.asdict(a) for a in params.activations],
        }
        for params in layer.directions
    ]
    fields = ("name", "input_size", "hidden_size", "linear_before_reset", "clip", "has_bias", "input_forget")
    return {
        **{key: getattr(layer, key) for key in fields},
        "cell": layer.cell.value,
        "direction": layer.direction.value,
        "interface": dataclasses.asdict(layer.interface),
        "directions": directions,
        "constants": {role: _array(value) for role, value in layer.constants.items()},
    }


def _decode(entry: dict, path: Path) -> RecurrentLayer:
    directions = tuple(
        DirectionParams(
            *(_from_array(d[key]) for key in ("W", "R", "Wb", "Rb")),
            tuple(Activation(**a) for a in d["activations"]),
            _from_array(d["P"]),
        )
        for d in entry["directions"]
    )
    return RecurrentLayer(
        entry["name"],
        Cell(entry["cell"]),
        entry["input_size"],
        entry["hidden_size"],
        Direction(entry["direction"]),
        directions,
        Interface(**entry["interface"]),
        linear_before_reset=entry["linear_before_reset"],
        clip=entry["clip"],
        has_bias=entry["has_bias"],
        input_forget=entry["input_forget"],
        constants={role: _from_array(value) for role, value in entry["constants"].items()},
        provenance=Provenance(NAME, path, entry["name"]),
    )


def write(model: Model, path: str | Path) -> None:
    document = {"format": MAGIC, "layers": [_encode(layer) for layer in model.layers]}
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(json.dumps(document, default=lambda scalar: scalar.item()))  # numpy scalars as Python's


def read(path: str | Path, **_options) -> Model:
    document = read_json(path)
    if not isinstance(document, dict) or document.get("format") != MAGIC:
        raise InputError(f"{path}: not a {MAGIC} file")
    return Model(Path(path), NAME, [_decode(entry, Path(path)) for entry in document["layers"]])


def check(layer: RecurrentLayer) -> list[Finding]:
    return [Finding("cell", Status.EXACT, f"{layer.cell.op_name}: every field and weight as it is, in JSON")]


IMPLEMENTATION = FormatImplementation(read=read, write=write, check=check)

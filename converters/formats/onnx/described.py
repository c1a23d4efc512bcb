"""gatepack's description of the layers it wrote as elementary operators (``onnx.elementary``'s Loops) into a model
of layers alone, and those layers read back from it.

A Loop of elementary operators says nothing of the cell it computes (an MGU, a GRU written with ``--strategy
decomposed``), so ``onnx.writer.build`` stores, for each layer it writes so, its description in the model's
metadata: the entry ``gatepack`` of ``metadata_props``, JSON ``{"format": "gatepack-onnx", "layers": [...]}``, each
layer ``description.describe`` with its name, its strategy (``decomposed``) and ``weights``: the initializer of each
weight the Loop reads, by ``onnx.elementary``'s name for it (``d0.WT``, ``d0.Wb``, ``d0.R_<gates>T``,
``d0.Rb_<gates>``, ``d0.P`` per direction). A layer written as its own GRU/RNN/LSTM node needs no entry (the node
says everything), so a model without such layers carries no metadata.

Reading: each entry becomes the described layer, its weights read from those initializers
(``description.elementary_direction``), its handle (``Isolated``) the nodes computing its outputs from its inputs,
so that running it alone runs the Loops as written.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
import onnx

from gatepack.converters.description import build_layer, constant_from_layout, describe, elementary_direction, parse
from gatepack.converters.errors import InputError
from gatepack.converters.formats.onnx.constants import ModelConstants
from gatepack.converters.formats.onnx.graph import FORMAT, Isolated, cone, node_reads
from gatepack.schemas.layer import OUTPUT_ROLES, Provenance, RecurrentLayer

METADATA_KEY = "gatepack"
METADATA_FORMAT = "gatepack-onnx"


def entry(layer: RecurrentLayer, weights: dict[str, str]) -> dict[str, Any]:
    """The description of ``layer`` written as elementary operators whose weights are the initializers ``weights``
    names (``onnx.elementary``'s name -> the initializer's)."""
    return {**describe(layer), "name": layer.name, "strategy": "decomposed", "weights": weights}


def store(proto: onnx.ModelProto, entries: list[dict[str, Any]]) -> None:
    """``entries`` in ``proto``'s metadata (nothing when there are none)."""
    if entries:
        text = json.dumps({"format": METADATA_FORMAT, "layers": entries}, sort_keys=True)
        onnx.helper.set_model_props(proto, {METADATA_KEY: text})


def described_layers(constants: ModelConstants, opset: int) -> list[RecurrentLayer]:
    """The layers ``constants``' model describes in its metadata ([]: none, or metadata not gatepack's)."""
    text = next((p.value for p in constants.proto.metadata_props if p.key == METADATA_KEY), None)
    if text is None:
        return []
    try:
        found = json.loads(text)
    except ValueError:
        raise InputError(f"{constants.path}: its gatepack metadata is not JSON") from None
    if (
        not isinstance(found, dict)
        or found.get("format") != METADATA_FORMAT
        or not isinstance(found.get("layers"), list)
    ):
        raise InputError(f"{constants.path}: its gatepack metadata is not a {METADATA_FORMAT} description")
    return [_described(constants, opset, item) for item in found["layers"]]


def _described(constants: ModelConstants, opset: int, item: object) -> RecurrentLayer:
    """One described layer: its weights from the initializers its entry names, its nodes the cone computing it."""
    path = constants.path
    info = parse(path, item)
    assert isinstance(item, dict)  # parse refused anything else
    weights = item.get("weights")
    if info.strategy != "decomposed" or not isinstance(weights, dict):
        raise InputError(f"{path}: layer {info.name!r}: its description names no elementary weights")
    initializers = {t.name: t for t in constants.proto.graph.initializer}

    def value(name: object) -> np.ndarray:
        if not isinstance(name, str) or name not in initializers:
            raise InputError(f"{path}: layer {info.name!r}: the initializer {name!r} its description names is missing")
        return constants.tensor(initializers[name])

    directions = []
    for k in range(info.direction.count):
        prefix = f"d{k}."
        held = {key[len(prefix) :]: name for key, name in weights.items() if key.startswith(prefix)}

        def named(label: str, own: dict[str, str] = held) -> np.ndarray:
            return value(own.get(label))

        try:
            directions.append(elementary_direction(info, k, held, named))
        except ValueError as err:
            raise InputError(f"{path}: {err}") from None
    itf = info.interface
    held_constants = {role: _held_constant(getattr(itf, role), role, value) for role in info.constant_roles}
    outputs = [getattr(itf, role) for role in OUTPUT_ROLES if getattr(itf, role)]
    nodes = cone(list(constants.proto.graph.node), outputs)
    read = {name for node in nodes for name in node_reads(node)}
    isolated = Isolated(nodes, {name: constants.tensor(t) for name, t in initializers.items() if name in read}, opset)
    provenance = Provenance(FORMAT, path, info.name, "decomposed", handle=isolated)
    return build_layer(path, info, directions, provenance, held_constants)


def _held_constant(name: str, role: str, value: Callable[[object], np.ndarray]) -> np.ndarray:
    """A constant input the layer holds, as ``onnx.writer`` writes it for an elementary layer: in layout 0, named as
    the input, or ``NAME__batch1`` where one state is repeated along the batch."""
    try:
        return constant_from_layout(value(name), role, 0)
    except InputError:
        return constant_from_layout(value(f"{name}__batch1"), role, 0)

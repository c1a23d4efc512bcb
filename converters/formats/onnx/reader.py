"""ONNX reading: every GRU/RNN/LSTM node of a model (in any subgraph) into a canonical layer, and the main
graph's Loops and unrolled cells lifted into layers. By role:

* ``onnx.graph``: the walk of every (sub)graph, each node with its ``Scope`` (the names it sees);
* ``onnx.node``: one GRU/RNN/LSTM node (attributes, weights, activations, clip, layout) as a layer, with its
  interface and held inputs from ``onnx.interface`` (Transposes around a layout-0 node read as one batch-major
  layer) and its constants from ``onnx.constants`` (initializers, ``Constant`` nodes, folded cones);
* ``onnx.quantized``: DynamicQuantizeLSTM, dequantized and read as an LSTM node;
* ``onnx.described``: the layers gatepack wrote as elementary operators, read by their description in the metadata;
* ``onnx.lifted``: Loops and unrolled cells lifted (``onnx.lifting`` finds them), each lift proven on onnxruntime
  against the original nodes (``onnx.running``); and why a model yields no layer.

This module holds the reading's entry: the model's opset checked, the nodes dispatched, the ``Model`` assembled
(its other operators: those around the layers, not the constants feeding them).
"""

from __future__ import annotations

from pathlib import Path

import onnx

import gatepack.converters.formats.onnx.quantized as onnx_quantized
from gatepack.converters.errors import InputError, NoRecurrentLayerError
from gatepack.converters.findings import Finding
from gatepack.converters.formats.onnx.constants import ModelConstants, constant_feeders
from gatepack.converters.formats.onnx.described import described_layers
from gatepack.converters.formats.onnx.graph import (
    FORMAT,
    ONNX_DOMAINS,
    check_external_data,
    isolated_record,
    load_proto,
    value_types,
    walk_scopes,
)
from gatepack.converters.formats.onnx.lifted import census, lift_regions, why_none
from gatepack.converters.formats.onnx.node import NodeReader
from gatepack.converters.model import Model
from gatepack.schemas.activations import DefaultsPolicy
from gatepack.schemas.cells import cell_of_op
from gatepack.schemas.layer import RecurrentLayer


def read(path: str | Path, *, defaults: DefaultsPolicy = DefaultsPolicy.ONNXRUNTIME) -> Model:
    """Read every GRU, RNN and LSTM node of the ONNX model at ``path`` into canonical layers."""
    path = Path(path)
    proto = load_proto(path)
    check_external_data(proto, path.parent)
    return _Reader(path, proto, DefaultsPolicy(defaults)).read()


def reread(path: str | Path, proto: onnx.ModelProto) -> Model:
    """Read the layers of ``proto``, a rewrite of the model at ``path`` held in memory (e.g. ``in_place``'s): the
    layers' handles hold ``proto``'s own nodes."""
    return _Reader(Path(path), proto, DefaultsPolicy.ONNXRUNTIME).read()


class _Reader:
    """One model's reading: its ai.onnx opset checked, its constants, nodes and lifts read into ``layers``."""

    def __init__(self, path: Path, proto: onnx.ModelProto, policy: DefaultsPolicy) -> None:
        self.path = path
        self.proto = proto
        opset = next((o.version for o in proto.opset_import if o.domain in ONNX_DOMAINS), None)
        if opset is None:
            raise InputError(f"{path}: the model imports no ai.onnx opset")
        self.opset = opset
        newest = onnx.defs.onnx_opset_version()
        if not 1 <= self.opset <= newest:
            raise InputError(
                f"{path}: ai.onnx opset {self.opset} is outside 1..{newest}, the opsets this onnx package defines"
            )
        self.constants = ModelConstants(path, proto, value_types(proto))
        self.layers: list[RecurrentLayer] = []
        self.notes: dict[str, list[Finding]] = {}
        self.nodes = NodeReader(self.constants, self.opset, policy, self.notes)
        self.skipped: list[tuple[str, str]] = []
        self.op_types: set[str] = set()

    def read(self) -> Model:
        described = described_layers(self.constants, self.opset)  # gatepack's own elementary layers
        self.layers += described
        for node, scope, name in walk_scopes(self.proto.graph):
            self.op_types.add(node.op_type)
            if node.domain not in ONNX_DOMAINS:
                if onnx_quantized.is_quantized_lstm(node):
                    self.layers.append(onnx_quantized.read_quantized_lstm(self.nodes, node, scope, name))
                continue
            if cell_of_op(node.op_type) is not None:
                self.layers.append(self.nodes.read_node(node, scope, name))
        refused = (
            []  # a model of layers alone gatepack wrote: its Loops are the described layers
            if described
            else lift_regions(self.constants, self.opset, self.op_types, self.layers, self.notes, self.skipped)
        )
        if not self.layers:
            if refused:
                raise NoRecurrentLayerError(f"{self.path}: no recurrent (GRU/RNN/LSTM) layer found: {refused[0][1]}")
            why = why_none(self.proto.graph, self.op_types, self.skipped)
            raise NoRecurrentLayerError(
                f"{self.path}: no recurrent (GRU/RNN/LSTM) layer found among its {census(self.proto.graph)}{why}"
            )
        absorbed = {id(n) for layer in self.layers for n in isolated_record(layer).nodes}
        fed = {getattr(lay.interface, r) for lay in self.layers for r in ("x", *lay.fed_roles())}
        absorbed |= constant_feeders(self.proto.graph, absorbed, fed)
        other = [n.op_type for n in self.proto.graph.node if id(n) not in absorbed]
        external = self.constants.external_data
        meta = {"opset": self.opset, "other_ops": sorted(set(other)), "external_data": external}
        return Model(self.path, FORMAT, self.layers, self.notes, self.skipped, {**meta, "other_op_count": len(other)})

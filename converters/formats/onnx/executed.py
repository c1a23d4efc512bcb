"""A whole ONNX model with its recurrent layers computed by gatepack's executor and every other node by onnxruntime.

This is the int8 twin of a whole model written for kernels that quantize X and h at run time (LiteRT's hybrid
ones, ``converters.hybrid``): no ONNX node computes that arithmetic, gatepack's executor does, and the operators
around the layers are the source's own. The graph is cut at the layers: in the order the graph computes them, each
layer's inputs are computed by the part of the graph they depend on (on onnxruntime, every value known so far fed
as an input), the layer runs on the executor with the records of ``model`` (which may differ from the file's: the
weights quantized as asked), and its outputs join the known values; the graph's outputs are computed last, from
everything known. A node that computes a known value is never run again, so a layer's own nodes never run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np
import onnx
from onnx import helper

from gatepack.converters.executor import run_model
from gatepack.converters.formats.onnx.graph import load_proto
from gatepack.converters.formats.onnx.running import open_model_proto

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.schemas.layer import RecurrentLayer


def open_executing_layers(model: "Model") -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """A runner of the whole model at ``model.path``: its recurrent layers (``model.layers``) on gatepack's
    executor, every other node on onnxruntime (module docstring), its graph outputs by name. Each part of the graph
    is made into a session once, for the many calls of a streaming comparison."""
    assert model.path is not None  # (a whole model is read from a file)
    proto, model = _with_lifted_layers_as_nodes(model)
    parts = _Parts(proto, str(model.path))
    layers = sorted(model.layers, key=lambda layer: _position(parts.proto.graph, layer))
    outputs = [o.name for o in parts.proto.graph.output]

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        known = dict(inputs)
        for layer in layers:
            known.update(parts.run(known, [n for n in _layer_inputs(layer) if n not in known]))
            known.update(run_model(replace(model, layers=[layer], meta={}), known))
        known.update(parts.run(known, [n for n in outputs if n not in known]))
        return {name: known[name] for name in outputs}

    return run


def _with_lifted_layers_as_nodes(model: "Model") -> tuple[onnx.ModelProto, "Model"]:
    """The graph to cut and ``model`` with interfaces that name its tensors. A lifted layer (a Loop, unrolled
    steps) has no node, and its interface names tensors only its adapters compute: the graph is then the source
    rewritten in place (``rewrite.in_place`` of the file read again, which knows the lifted regions: each becomes
    one node, with the adapters the rest of the graph reads), and each layer takes the interface of the node it
    became (its records stay those of ``model``)."""
    from gatepack.converters.formats.onnx.reader import read, reread
    from gatepack.converters.formats.onnx.rewrite import in_place
    from gatepack.converters.quantization import ASKED

    assert model.path is not None
    proto = load_proto(model.path)
    present = {i.name for i in proto.graph.input} | {t.name for t in proto.graph.initializer}
    present |= {name for node in proto.graph.node for name in node.output}
    if all(name in present for layer in model.layers for name in _layer_inputs(layer)):
        return proto, model
    source = read(model.path)  # (with the provenance of its lifted layers, which the twin's layers no longer hold)
    proto = in_place(replace(source, meta={**source.meta, ASKED: True}))  # (its layer nodes never run)
    rewritten = {layer.name: layer.interface for layer in reread(model.path, proto).layers}
    layers = [replace(layer, interface=rewritten.get(layer.name, layer.interface)) for layer in model.layers]
    return proto, replace(model, layers=layers)


def _layer_inputs(layer: "RecurrentLayer") -> list[str]:
    """The tensors ``layer`` takes from the graph: X, each input it does not hold as a constant, its mask."""
    itf = layer.interface
    names = [itf.x] + [getattr(itf, role) for role in layer.fed_roles()] + [itf.mask]
    return [name for name in names if name]


def _position(graph: onnx.GraphProto, layer: "RecurrentLayer") -> int:
    """Where the graph computes ``layer``: the first node that writes one of its outputs."""
    itf = layer.interface
    produced = {name for name in (itf.y, itf.y_h, itf.y_c) if name}
    return next((k for k, node in enumerate(graph.node) if produced & set(node.output)), len(graph.node))


def _consumed(node: onnx.NodeProto) -> set[str]:
    """Every name ``node`` reads, those its subgraphs (If, Loop, Scan) read from the outer scope included."""
    names = {name for name in node.input if name}
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            for inner in graph.node:
                names |= _consumed(inner)
    return names


class _Parts:
    """The parts of one graph that compute some values from others, each made into an onnxruntime session once."""

    def __init__(self, proto: onnx.ModelProto, label: str) -> None:
        self.proto, self.label = proto, label
        self.sessions: dict[tuple[frozenset, tuple[str, ...]], Callable[[dict], dict]] = {}

    def run(self, known: dict[str, np.ndarray], wanted: list[str]) -> dict[str, np.ndarray]:
        """``wanted`` computed on onnxruntime by the nodes they depend on that compute no value in ``known``, the
        known values they read fed as graph inputs."""
        if not wanted:
            return {}
        key = (frozenset(known), tuple(wanted))
        if key not in self.sessions:
            self.sessions[key] = open_model_proto(self._part(known, wanted).SerializeToString(), self.label)
        return self.sessions[key](known)

    def _part(self, known: dict[str, np.ndarray], wanted: list[str]) -> onnx.ModelProto:
        needed, kept = set(wanted), []
        for node in reversed(self.proto.graph.node):
            if needed & set(node.output):
                kept.append(node)
                needed |= {name for name in _consumed(node) if name not in known}
        fed = sorted({name for node in kept for name in _consumed(node) if name in known})
        graph = helper.make_graph(
            list(reversed(kept)),
            "part",
            [_value_info(name, known[name]) for name in fed],
            [onnx.ValueInfoProto(name=name) for name in wanted],
            initializer=list(self.proto.graph.initializer),
        )
        part = helper.make_model(graph, opset_imports=list(self.proto.opset_import), ir_version=self.proto.ir_version)
        part.functions.extend(self.proto.functions)
        return part


def _value_info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape))

"""The main graph's Loops and unrolled cells lifted into layers: ``onnx.lifting``'s ``Finder`` gives each
recurrence's readings (regions) to try in order, ``converters.lifting`` proves a reading on onnxruntime running the
original nodes (``onnx.running``), and the first proven becomes the layer (with a ``lifted`` finding saying how the
source's tensors relate to its canonical Y and Y_h). When no layer is found at all, ``census`` and ``why_none``
word what the graph holds and why none of it was read.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
from onnx import helper

import gatepack.converters.formats.onnx.quantized as onnx_quantized
from gatepack.converters.findings import Finding, Status, operator_list
from gatepack.converters.formats.onnx.constants import ModelConstants
from gatepack.converters.formats.onnx.graph import FORMAT, ONNX_DOMAINS, Isolated, Scope, isolated_record, walk_nodes
from gatepack.converters.formats.onnx.lifting import Finder, Region, node_inputs
from gatepack.converters.formats.onnx.running import run_original_nodes
from gatepack.converters.lifting import LiftRefused, Recurrence, candidates_from_constants, lift
from gatepack.schemas.layer import Interface, Provenance, RecurrentLayer


def lift_regions(
    constants: ModelConstants,
    opset: int,
    op_types: set[str],
    layers: list[RecurrentLayer],
    notes: dict[str, list[Finding]],
    skipped: list[tuple[str, str]],
) -> list[tuple[str, str]]:
    """Lift the main graph's Loops and unrolled cells (of a model whose nodes are of ``op_types``) into layers
    (``converters.lifting``), each proven on onnxruntime against the original nodes, appended to ``layers`` (the
    nodes read so far) with its finding in ``notes``; return (name, reason) for those not lifted (with, when any
    layer was found, what looks recurrent but neither became a layer nor was refused: then all added to
    ``skipped``)."""
    proto = constants.proto
    if not (op_types & {"Loop"} or (op_types & {"MatMul"} and op_types & {"Tanh", "Relu"})):
        return []
    finder = Finder(proto, Scope(proto.graph, None, ""), constants.tensor, opset)
    alternatives, refused = finder.regions()
    for variants in alternatives:
        reasons = []
        for region in variants:
            try:
                layers.append(_lifted(constants, opset, notes, finder, region))
                break
            except LiftRefused as err:
                reasons.append(str(err))
        else:
            refused.append((variants[0].name, reasons[0]))
    if layers:  # and what looks recurrent but neither became a layer nor was refused
        claimed = {id(n) for layer in layers for n in isolated_record(layer).nodes}
        refused += finder.unlifted(claimed, {name for name, _ in refused})
        skipped += refused
    return refused


def _lifted(
    constants: ModelConstants, opset: int, notes: dict[str, list[Finding]], finder: Finder, region: Region
) -> RecurrentLayer:
    """``region`` lifted into a layer, proven against onnxruntime running its original nodes."""
    isolated = Isolated(region.nodes + region.adapters, region.constants, opset, region)
    elem = constants.types.get(region.x)
    dtype = helper.tensor_dtype_to_np_dtype(elem.tensor_type.elem_type) if elem is not None else np.float32
    itf = Interface(
        x=region.x,
        y=region.y,
        y_h=region.y_h,
        y_c=region.y_c,
        initial_h=region.initial_h,
        initial_c=region.initial_c,
        sequence_lens=region.sequence_lens,
        mask=region.hold,
        layout=region.layout,
        seq_length=region.seq_length,
        batch_size=region.batch_size,
        dtype=np.dtype(dtype).name,
    )
    label = f"{region.found} {region.name!r}"
    rec = Recurrence(
        name=region.name,
        found=f"{constants.path}: {label}",
        direction=region.direction,
        interface=itf,
        input_size=region.input_size,
        hidden_size=region.hidden_size,
        candidates=candidates_from_constants(finder.weights(region), region.input_size, region.hidden_size),
        activations=region.activations,
        run_original=lambda feed: run_original_nodes(isolated, itf, feed, label),
        mask_form=finder.mask_form(region.hold) if region.hold else None,
    )
    lifted = lift(rec)
    notes.setdefault(region.name, []).append(
        Finding(
            "lifted",
            Status.REPACKED,
            f"lifted from {region.found}: {lifted.description}; proven against onnxruntime running the original "
            f"nodes on random inputs ({lifted.tried} reading(s) tried). {_exposed_text(region)}",
        )
    )
    return replace(
        lifted.layer,
        provenance=Provenance(
            FORMAT, constants.path, region.name, "lifted", region.kind, None, node_inputs(region), 0, isolated
        ),
    )


def _exposed_text(region: Region) -> str:
    """How the source's own tensors of a lifted layer relate to its canonical Y and Y_h."""
    parts = []
    for tensor, how in region.exposed.items():
        if how[0] == "Y_seq":
            order = "in processing order (reversed in time)" if how[1] else "in time order"
            parts.append(f"{tensor!r} is Y without its direction axis, {order}")
        elif how[0] in ("Y_h", "Y_c"):
            parts.append(f"{tensor!r} is {how[0]} without its direction axis")
        elif how[0] == "Y_kept":
            parts.append(f"{tensor!r} is Y without its direction axis within each row's length, Y_h after it")
        else:
            parts.append(f"{tensor!r} is Y at step {how[1]}")
    shown = "; ".join(parts[:4]) + (f"; and {len(parts) - 4} more" if len(parts) > 4 else "")
    canonical = " and ".join(repr(t) for t in (region.y, region.y_h, region.y_c) if t)
    return f"The layer's outputs are canonical tensors {canonical} (with a direction axis); in the source, {shown}."


def census(graph: onnx.GraphProto) -> str:
    """'12 operators of 3 types (Abs, MatMul, Relu)': the main graph's nodes, what a user finds there."""
    nodes = graph.node
    kinds = sorted({node.op_type for node in nodes})
    if not nodes:
        return "0 operators (an empty graph)"
    operators = f"{len(nodes)} operator{'s' if len(nodes) != 1 else ''}"
    return f"{operators} of {len(kinds)} type{'s' if len(kinds) != 1 else ''} ({operator_list(kinds)})"


def why_none(graph: onnx.GraphProto, op_types: set[str], skipped: list[tuple[str, str]]) -> str:
    """Why a model holding no GRU/RNN/LSTM node yielded no layer: what was refused, foreign operators, or the
    products and activations it holds that gatepack does not lift ("" when it holds none)."""
    if skipped:
        kinds = sorted({reason.split(" ")[0] for _, reason in skipped})
        return f" ({len(skipped)} {'/'.join(kinds)} node(s) found: {skipped[0][1]})"
    foreign = onnx_quantized.foreign_operators(walk_nodes(graph), ONNX_DOMAINS)
    if foreign:
        return foreign
    products = op_types & {"MatMul", "Gemm"}
    activations = sorted(op_types & {"Sigmoid", "Tanh", "Relu"})
    if not products or not activations:
        return ""
    found = f"{'/'.join(sorted(products))} and {'/'.join(activations)} nodes"
    if op_types & {"Loop", "Scan"}:
        return (
            f" (it holds a {'/'.join(sorted(op_types & {'Loop', 'Scan'}))} over {found}, but none that "
            "gatepack lifts: a GRU/RNN loop gathers one sequence and carries one state, as tf2onnx writes Keras "
            "layers)"
        )
    return (
        f" (it holds {found} but no chain of MatMuls by one shared weight that gatepack lifts into a GRU/RNN "
        "layer, as torch.onnx's dynamo exporter unrolls nn.RNN, and no single LSTM/GRU step whose state is a graph "
        "input, as a per-frame export writes one; an LSTM or GRU unrolled over several steps is not lifted)"
    )

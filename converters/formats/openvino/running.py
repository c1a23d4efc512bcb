"""OpenVINO IR on the CPU plugin: a whole IR reshaped to the static shapes it is fed, its inputs, and one
layer alone (gatepack's layer subgraph, another producer's sequence node with its constants, or a lifted loop)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gatepack.converters.errors import RuntimeFailure, UsageError
from gatepack.converters.formats.openvino.ir import FORMAT, SEQUENCE_OPS, all_ops, read_ir, run_model, sequence_inputs
from gatepack.converters.formats.openvino.lifting import STATE_INPUTS, LoopHandle, run_lifted
from gatepack.converters.formats.openvino.registration import openvino
from gatepack.schemas.layer import OUTPUT_ROLES, PERM_SWAP_01, ROLE_LABELS, RecurrentLayer, state_roles


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the IR at ``path`` on OpenVINO CPU (fp32 inference precision), reshaped to the static shapes it is
    fed: on dynamic shapes the CPU plugin ignores a sequence op's ``sequence_lengths`` (docs/conventions.md
    §3), so a packed sequence would run all S steps. A model that cannot be reshaped runs as it is."""
    return run_model(read_at_fed_shapes(path, inputs), inputs, str(path))


def read_at_fed_shapes(path: str | Path, inputs: dict[str, np.ndarray]):
    """The IR at ``path``, its dynamic inputs reshaped to the static shapes of ``inputs`` (``run_native``'s
    reason); as it is when its own Reshape constants fix a shape."""
    ov_model = read_ir(Path(path))
    dynamic = {
        p.output(0): tuple(np.shape(inputs[name]))
        for p in ov_model.get_parameters()
        if not p.get_partial_shape().is_static and (name := p.get_output_tensor(0).get_any_name()) in inputs
    }
    if dynamic:
        try:
            ov_model.reshape(dynamic)
        except Exception:  # a shape its own Reshape constants fix; run dynamic (verification compares anyway)
            ov_model = read_ir(Path(path))
    return ov_model


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The IR's inputs as (name, dtype, dims); a dynamic dim is None."""
    return [
        (
            p.get_output_tensor(0).get_any_name(),
            p.get_element_type().to_dtype(),
            [d.get_length() if d.is_static else None for d in p.get_partial_shape()],
        )
        for p in read_ir(Path(path)).get_parameters()
    ]


def graph_outputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The IR's outputs as (name, dtype, dims); a dynamic dim is None."""
    return [
        (
            out.get_any_name(),
            out.get_element_type().to_dtype(),
            [d.get_length() if d.is_static else None for d in out.get_partial_shape()],
        )
        for out in read_ir(Path(path)).outputs
    ]


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of an IR read from disk, on OpenVINO CPU: gatepack's layer subgraph as saved, or the
    sequence node with its constants (another producer's, or gatepack's native op inside a whole
    model, where its tensors are the model's own), fed and read in the layer's layout."""
    ov, ops = openvino()
    if layer.provenance is None or not layer.provenance.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from an OpenVINO IR")
    path, name, kind = layer.provenance.artifact, layer.provenance.node, layer.provenance.kind
    label = f"{path}: layer {name!r}"
    if kind == "lifted":
        handle = layer.provenance.handle
        assert isinstance(handle, LoopHandle)  # openvino.lifting's record of the loop
        return run_lifted(path, handle, layer.interface, feed, (ov, ops))
    ov_model = read_ir(path)
    itf = layer.interface
    inputs = {getattr(itf, role) for role in ("x", *layer.fed_roles())}
    params = [p for p in ov_model.get_parameters() if p.output(0).get_names() & inputs]
    outs = {getattr(itf, role) for role in OUTPUT_ROLES} - {None}
    results = [r for r in ov_model.get_results() if r.input_value(0).get_names() & outs]
    if kind != "node" and len(params) == len(inputs) and len(results) == len(outs):
        return run_model(ov.Model(results, params, "layer"), feed, label)
    if kind == "decomposed":
        raise RuntimeFailure(
            f"{label}: its decomposition is inside the model (its tensors are no inputs and outputs of the IR)"
        )
    op = next(
        (o for o in all_ops(ov_model) if o.get_friendly_name() == name and o.get_type_name() in SEQUENCE_OPS), None
    )
    if op is None:
        raise RuntimeFailure(f"{label}: the IR has no sequence op of that name")
    feed = dict(feed)
    return run_model(_node_alone(ops, layer, op, feed), feed, label)


def _node_alone(ops, layer: RecurrentLayer, op, feed: dict[str, np.ndarray]):
    """A model of the sequence node ``op`` alone, fed by new parameters named after the layer's
    interface (absent states: zeros; absent lengths: full) with static shapes (OpenVINO CPU honours
    sequence_lengths only then); X, states and outputs transposed to and from the layer's layout."""
    ov, _ = openvino()
    itf, name = layer.interface, op.get_friendly_name()
    batch_major = itf.layout == 1
    x = feed[itf.x]
    n, s = (x.shape[0], x.shape[1]) if batch_major else (x.shape[1], x.shape[0])
    d, h = layer.num_directions, layer.hidden_size
    index = sequence_inputs(layer.cell)
    names = {"x": itf.x}
    for role, _ in state_roles(layer.cell):
        names[role] = getattr(itf, role) or f"{name}/{STATE_INPUTS[role[-1]]}"
        held = layer.constant_state(role, n)  # a constant the layer holds, fed to the node alone as it is
        if held is not None:
            feed[names[role]] = held.transpose(PERM_SWAP_01) if batch_major else held
        feed.setdefault(names[role], np.zeros((n, d, h) if batch_major else (d, n, h), layer.dtype))
    names["sequence_lens"] = itf.sequence_lens or f"{name}/sequence_lengths"
    lens_type = op.get_input_element_type(index["sequence_lens"])
    if (held_lens := layer.constant("sequence_lens")) is not None:
        feed[names["sequence_lens"]] = held_lens
    feed[names["sequence_lens"]] = feed.get(names["sequence_lens"], np.full(n, s)).astype(lens_type.to_dtype())
    params = []
    for role, tensor in names.items():
        param = ops.parameter(list(feed[tensor].shape), op.get_input_element_type(index[role]), name=tensor)
        param.output(0).get_tensor().set_names({tensor})
        params.append(param)
        value = param if batch_major or role == "sequence_lens" else ops.transpose(param, [1, 0, 2])
        op.input(index[role]).replace_source_output(value.output(0))
    y = ops.transpose(op.output(0), [0, 2, 1, 3] if batch_major else [2, 1, 0, 3])  # [N,D,S,H] -> the layout
    finals = [
        op.output(k) if batch_major else ops.transpose(op.output(k), [1, 0, 2]).output(0)
        for k in range(1, op.get_output_size())
    ]
    results = []
    for role, out in zip(OUTPUT_ROLES, [y.output(0), *finals]):
        out.get_tensor().set_names({getattr(itf, role) or f"{name}/{ROLE_LABELS[role]}"})
        results.append(ops.result(out))
    return ov.Model(results, params, "layer")

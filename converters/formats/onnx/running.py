"""ONNX on onnxruntime: a model at a path, a layer's original nodes alone (the handle the reader keeps), its
graph inputs; onnxruntime's errors turned into gatepack's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

import gatepack.converters.formats.onnx.quantized as onnx_quantized
from gatepack.converters.errors import InputError, RuntimeFailure, UsageError
from gatepack.converters.formats.onnx.graph import (
    FORMAT,
    ONNX_DOMAINS,
    Isolated,
    broadcast_state_nodes,
    copy_node,
    load_proto,
    type_dims,
)
from gatepack.schemas.cells import cell_of_op
from gatepack.schemas.layer import OUTPUT_ROLES, Interface, RecurrentLayer


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the ONNX file at ``path`` on onnxruntime (CPU); a DynamicQuantizeLSTM's int8 weights run as the
    equal uint8 ones (``onnx.quantized.exact_kernel_source``)."""
    return _run_session(_session(onnx_quantized.exact_kernel_source(Path(path)), str(path)), inputs, str(path))


def open_model_proto(serialized: bytes, label: str) -> Callable[[dict], dict]:
    """A model held in memory (``serialized``), named ``label`` in errors, made into an onnxruntime (CPU) session
    once: a runner of it for many calls (the inputs it does not take are left out)."""
    session = _session(serialized, label)
    return lambda inputs: _run_session(session, inputs, label)


def open_session(path: str | Path) -> Callable[[dict], dict]:
    """``run_native`` with the onnxruntime session made once, for many calls in a row (streaming verification)."""
    label = str(path)
    session = _session(onnx_quantized.exact_kernel_source(Path(path)), label)
    return lambda inputs: _run_session(session, inputs, label)


def run_isolated(layer: RecurrentLayer, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the layer's original ONNX node(s) alone on onnxruntime, with its original weights."""
    isolated = layer.provenance.handle if layer.provenance and layer.provenance.of(FORMAT) else None
    if not isinstance(isolated, Isolated):
        raise UsageError(f"layer {layer.name!r} was not read from ONNX")
    if isolated.opset < 7:
        raise RuntimeFailure(
            f"layer {layer.name!r}: onnxruntime has no kernel for opset {isolated.opset} recurrent operators",
            hint="use --engine numpy",
        )
    return run_original_nodes(isolated, layer.interface, inputs, f"layer {layer.name!r}")


def run_original_nodes(isolated: Isolated, itf: Interface, inputs: dict[str, np.ndarray], label: str) -> dict:
    """Run original nodes alone on onnxruntime: the interface's inputs in, its Y, Y_h (and Y_c) out."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(itf.dtype))
    graph_inputs = [helper.make_tensor_value_info(itf.x, elem, None)]
    if itf.sequence_lens and itf.sequence_lens not in isolated.constants:
        graph_inputs.append(helper.make_tensor_value_info(itf.sequence_lens, onnx.TensorProto.INT32, None))
    # one tensor read as both initial states (tf2onnx's and torch.onnx's zero state of a stacked LSTM) is one input
    states = dict.fromkeys(getattr(itf, role) for role in ("initial_h", "initial_c") if getattr(itf, role))
    for name in states:
        if name not in {**isolated.constants, **isolated.broadcast}:
            graph_inputs.append(helper.make_tensor_value_info(name, elem, None))
    if itf.mask and itf.mask in inputs:  # a per-step hold: its own type (bool, or the numbers it was cast to)
        mask_type = helper.np_dtype_to_tensor_dtype(np.asarray(inputs[itf.mask]).dtype)
        graph_inputs.append(helper.make_tensor_value_info(itf.mask, mask_type, None))
    outputs = [
        helper.make_tensor_value_info(name, elem, None) for name in (getattr(itf, r) for r in OUTPUT_ROLES) if name
    ]
    # Large constants (the weights) are fed as inputs, straight from their arrays: serialising them
    # into the session's protobuf would copy them twice and dominate the run.
    fed = {k: np.ascontiguousarray(v) for k, v in isolated.constants.items() if v.nbytes >= _FEED_AS_INPUT}
    graph_inputs += [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in fed.items()
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in isolated.constants.items() if k not in fed]
    nodes = isolated.nodes
    if isolated.blank:  # inputs that are no inputs of the layer (zeros sized like X): absent, as ONNX allows
        nodes = [copy_node(n, {name: "" for name in isolated.blank}) for n in nodes]
    for name, state in isolated.broadcast.items():  # a learned state repeated along X's batch, as the model does
        inits.append(numpy_helper.from_array(state, f"{name}__batch1"))
        node = next(n for n in nodes if cell_of_op(n.op_type) and name in n.input)
        layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
        batch_axis = 0 if layout else 1
        at = nodes.index(node)  # just before the node: its X may come from the Transposes before it
        nodes = (
            nodes[:at]
            + broadcast_state_nodes(f"{name}__batch1", batch_axis, node.input[0], batch_axis, name)
            + nodes[at:]
        )
    graph = helper.make_graph(nodes, "isolated", graph_inputs, outputs, inits)
    opsets = [helper.make_opsetid("", isolated.opset)]
    opsets += [helper.make_opsetid(d, 1) for d in sorted({n.domain for n in isolated.nodes} - set(ONNX_DOMAINS))]
    proto = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets[:1]))
    return _run_session(_session(proto.SerializeToString(), label), {**inputs, **fed}, label)


_FEED_AS_INPUT = 1 << 16  # bytes
run_layer_native = run_isolated


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The model's inputs as (name, dtype, dims); a dim is an int, a symbol, or None."""
    proto = load_proto(Path(path))
    inits = {t.name for t in proto.graph.initializer}
    found = []
    for value in proto.graph.input:
        if value.name in inits:
            continue
        dims = type_dims(value.type)
        if dims is None or not value.type.tensor_type.elem_type:
            raise InputError(
                f"{path}: input {value.name!r} has no declared element type and shape, so gatepack cannot draw "
                "inputs for it"
            )
        found.append((value.name, np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)), dims))
    return found


def graph_outputs(path: str | Path) -> list[tuple[str, np.dtype | None, list | None]]:
    """The model's outputs as (name, dtype, dims), each None where the model does not declare it."""
    found = []
    for value in load_proto(Path(path)).graph.output:
        elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
        found.append(
            (value.name, np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None, type_dims(value.type))
        )
    return found


def _run_session(session, inputs: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    wanted = [i.name for i in session.get_inputs()]
    missing = [name for name in wanted if name not in inputs]
    if missing:
        raise InputError(f"{label}: missing input(s) {missing}", hint=f"the model takes {wanted}")
    feed = {name: inputs[name] for name in wanted}
    try:
        results = session.run(None, feed)
    except Exception as err:
        raise RuntimeFailure(f"{label}: onnxruntime failed: {_ort_message(err)}", hint=_ort_hint(err)) from None
    return {out.name: value for out, value in zip(session.get_outputs(), results)}


def _ort_message(err: Exception) -> str:
    """onnxruntime's message without its status prefix, source paths and C++ signatures."""
    text = " ".join(str(err).split()).split(" : ")[-1]
    text = re.sub(r"/onnxruntime_src/\S+:\d+\s+(\S+\([^)]*\)\s+)?", "", text)
    text = re.sub(r"\S+( [=!<>]+ \S+)? was false\. ", "", text).strip()
    return text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " ..."  # whole words


def _session(source, label: str):
    from gatepack.converters.formats.onnx.registration import onnxruntime

    ort = onnxruntime()

    options = ort.SessionOptions()
    options.log_severity_level = 4  # failures are reported by gatepack, once, on one line
    # Every session here runs once or twice and is dropped: repacking the weights into the GEMM's own
    # layout when the session is made (onnxruntime's default) would cost more than it saves; for a
    # stack of 4 bidirectional LSTMs (H = 1024, 369 MB) it took 0.46 s against 0.02 s, for runs
    # 0.05 s slower, and it holds a second copy of the weights.
    options.add_session_config_entry("session.disable_prepacking", "1")
    # For the same reason its worker threads do not spin between the runs waiting for more work (the
    # default): that spinning only pays off for back-to-back runs, and it holds the cores the run itself and
    # every other process need (a verification of a one-layer model took ~20 ms instead of ~1 ms on a busy
    # 2-core machine). The threads still share each run's work.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise RuntimeFailure(
            f"{label}: onnxruntime cannot load the model: {_ort_message(err)}", hint=_ort_hint(err)
        ) from None


def _ort_hint(err: Exception) -> str | None:
    if "layout == 1" in str(err):
        return "onnxruntime rejects layout=1; use --engine numpy, or write the model with the transpose layout encoding"
    return None

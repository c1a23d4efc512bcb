"""OpenVINO IR files and the CPU plugin: an IR read from disk (gatepack opens both files itself), compiled and
run; the sequence ops' conventions (gate order, input indices) and the ``rt_info`` keys gatepack writes.

The base of the OpenVINO modules: the reader, the lifting of loops, running and the writer import it; it
imports none of them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gatepack.converters.errors import InputError, RuntimeFailure
from gatepack.converters.fileio import contained_file, read_bytes
from gatepack.converters.findings import fp16_source
from gatepack.converters.formats.openvino.registration import CAPABILITIES as OPENVINO
from gatepack.converters.formats.openvino.registration import openvino
from gatepack.schemas.layer import Cell

FORMAT = "openvino"
RT_INFO_PATH = ["gatepack", "layers"]
RT_INFO_OTHER_OPS = ["gatepack", "other_ops"]  # whole-model IR: the ONNX operators besides the recurrent ones
SEQUENCE_OPS = {"GRUSequence": Cell.GRU, "RNNSequence": Cell.RNN, "LSTMSequence": Cell.LSTM}

# The sequence ops' gate order (ONNX's for GRU and RNN; LSTMSequence-5 has f, i, c, o) ...
OV_GATES = {cell: op.gates for cell, op in OPENVINO.ops.items()}

# ... and their inputs: X, an initial state per state, sequence_lengths, W, R, B.


def sequence_inputs(cell: Cell) -> dict[str, int]:
    """Input index of each of a sequence op's inputs: x, initial_h (initial_c), sequence_lens, W, R, B."""
    states = [f"initial_{s}" for s in cell.states]
    return {role: k for k, role in enumerate(["x", *states, "sequence_lens", "W", "R", "B"])}


FP16_SOURCE = fp16_source("weights", "the IR stores its weights as fp16 (compressed when it was saved)")

# f32: the CPU plugin defaults to bf16 where the CPU has it; LATENCY: gatepack runs single inferences (less to set up)
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def read_ir(path: Path):
    """The IR at ``path``. gatepack opens both files itself (regular files; the .bin beside the .xml,
    never through a link leading elsewhere) and hands OpenVINO their contents - the .bin memory-mapped
    copy-on-write - so OpenVINO opens no path, tries no other frontend and writes nothing."""
    ov, _ = openvino()
    path = Path(path)
    if path.suffix.lower() != ".xml" or not path.exists():
        raise InputError(f"{path}: no OpenVINO IR here (expected an existing NAME.xml with NAME.bin beside it)")
    xml = read_bytes(path)
    if b"<net" not in xml[:4096]:
        raise InputError(f"{path}: not an OpenVINO IR (no <net> element at its start)")
    bin_name = path.with_suffix(".bin").name
    if not os.path.lexists(path.with_suffix(".bin")):
        raise InputError(
            f"{path}: its weights file {bin_name} is missing", hint="an IR is the .xml and the .bin together"
        )
    weights_file = contained_file(path.parent, bin_name, f"{path}: weights file")
    size = weights_file.stat().st_size
    weights = np.memmap(weights_file, dtype=np.uint8, mode="c") if size else np.zeros(0, np.uint8)
    try:
        model = ov.Core().read_model(
            model=xml.decode("utf-8", "replace"), weights=ov.Tensor(weights, shared_memory=True)
        )
    except Exception as err:  # OpenVINO raises a bare RuntimeError with a multi-line message
        raise InputError(f"{path}: OpenVINO cannot read it ({ov_message(err)})") from None
    model.gatepack_weights = weights  # the model's constants point into this map: it lives as long as the model
    model.gatepack_named = _name_nameless_outputs(model)
    return model


def _name_nameless_outputs(model) -> list[str]:
    """Give every output without a tensor name (``ov.convert_model`` of a PyTorch module leaves them
    nameless) a stable name from the node producing it, ``<node>:<port>``, in memory only. Returns
    one note per output named."""
    taken = {name for port in model.outputs for name in port.get_names()}
    notes = []
    for index, port in enumerate(model.outputs):
        if port.get_names():
            continue
        source = port.get_node().input_value(0)  # the Result's input: the producing node's port
        name = f"{source.get_node().get_friendly_name()}:{source.get_index()}"
        while name in taken:
            name += "_"
        taken.add(name)
        port.get_tensor().set_names({name})
        notes.append(f"output {index} of the IR has no tensor name; gatepack calls it {name!r}")
    return notes


def ov_message(err: Exception) -> str:
    lines = [
        line.strip()
        for line in str(err).splitlines()
        if line.strip() and not line.strip().startswith(("Exception from", "Check "))
    ]
    return (" ".join(lines) or type(err).__name__)[:240]


def all_ops(ov_model) -> list:
    """Every op of a model, including those inside TensorIterator/Loop bodies and If branches."""
    found = []
    for op in ov_model.get_ordered_ops():
        found.append(op)
        if op.get_type_name() in ("TensorIterator", "Loop"):
            found += all_ops(op.get_function())
        elif op.get_type_name() == "If":
            found += all_ops(op.get_then_body()) + all_ops(op.get_else_body())
    return found


def _compiled(ov_model, label: str):
    ov, _ = openvino()
    try:
        return ov.Core().compile_model(ov_model, "CPU", COMPILE_CONFIG)
    except Exception as err:
        raise RuntimeFailure(f"{label}: OpenVINO CPU cannot compile it: {ov_message(err)}") from None


def run_model(ov_model, inputs: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    """Compile ``ov_model`` for CPU and infer. Inputs and outputs go by the model's own tensor
    names: a compiled model may add the names of tensors its frontend fused away."""
    wanted = [p.get_any_name() for p in ov_model.inputs]
    missing = [n for n in wanted if n not in inputs]
    if missing:
        raise InputError(f"{label}: missing input(s) {missing}", hint=f"the model takes {wanted}")
    compiled = _compiled(ov_model, label)
    try:
        # np.require keeps a scalar a scalar (np.ascontiguousarray makes it shape [1], which OpenVINO refuses)
        results = compiled([np.require(inputs[n], requirements="C") for n in wanted])
    except Exception as err:
        raise RuntimeFailure(f"{label}: OpenVINO CPU failed: {ov_message(err)}") from None
    return {out.get_any_name(): np.array(results[k]) for k, out in enumerate(ov_model.outputs)}

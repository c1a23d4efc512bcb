"""LiteRT: ``.tflite`` files read into canonical layers, without running anything.

gatepack's own files carry their layers' description (metadata ``gatepack``); their weights are read from the
sequence ops or, for the elementary form, from the constants the description names. Another producer's file
gives one layer per ``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN`` op, and one bidirectional layer per
``BIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN`` op (docs/conventions.md §11): per-gate tensors
into ONNX's i, o, f, c blocks, one bias per gate as Wb (Rb zero), peepholes cell_to_{i,f,o} into P (i, o, f),
CIFG (no input-gate tensors: i = 1 - f) as input_forget with ONNX's input gate = the forget gate negated,
the fused activation as g and h (gates Sigmoid), ``time_major`` as the layout; a state variable that is a
subgraph input is the layer's initial state, one with data a held (learned) initial state. INT8 weights (the
hybrid kernels', ``quantized``) are read into records, their float view the layer's W and R. What a canonical
layer cannot hold is refused naming the file, the op and the field: projection, layer norm, cell_clip (it
bounds the cell state, ONNX's clip the gates' inputs), weights partly INT8, other fused activations. A file
without such ops has its ``WHILE`` loops lifted (``loops``), or, holding none, is lifted whole as an unrolled
module (``unrolled``); what neither lifts is refused with the reason.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from gatepack.converters.description import build_layer, constant_from_layout, parse
from gatepack.converters.errors import InputError, NoRecurrentLayerError
from gatepack.converters.fileio import map_regular
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.litert.common import (
    FILE_IDENTIFIER,
    FORMAT,
    FUSED,
    HELD_KEY,
    LSTM_BIASES,
    LSTM_CELL_STATE,
    LSTM_INPUT_WEIGHTS,
    LSTM_LAYER_NORM,
    LSTM_OUTPUT_STATE,
    LSTM_PEEPHOLES,
    LSTM_PROJECTION,
    LSTM_RECURRENT_WEIGHTS,
    METADATA_KEY,
    schema,
)
from gatepack.converters.formats.litert.loops import lift_loops
from gatepack.converters.formats.litert.quantized import int8_record, negated, stacked
from gatepack.converters.formats.litert.registration import GATES
from gatepack.converters.formats.litert.unrolled import lift_unrolled
from gatepack.converters.lifting import LiftRefused
from gatepack.converters.model import Model
from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import Direction, DirectionParams, Interface, Provenance, RecurrentLayer, SpecError
from gatepack.schemas.quantized import QuantizationError, QuantizedWeights

SEQUENCE_OPS = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Cell.LSTM,
    "UNIDIRECTIONAL_SEQUENCE_RNN": Cell.RNN,
    "BIDIRECTIONAL_SEQUENCE_LSTM": Cell.LSTM,
    "BIDIRECTIONAL_SEQUENCE_RNN": Cell.RNN,
}
UNREAD_OPS = ("LSTM", "RNN")  # the single-step ops
# A bidirectional op's inputs, per direction, at the unidirectional op's positions (-1: none). LSTM: 0 X, 1-17 the
# forward weights (18-34 the backward ones), 35-38 the states fw h, fw c, bw h, bw c, 39-47 the auxiliary input;
# RNN: 0 X, 1-4 forward W, R, bias, state, 5-8 backward, 9-11 auxiliary (lite/kernels/bidirectional_sequence_*.cc).
_BIDIRECTIONAL = {
    Cell.LSTM: ([*range(18), 35, 36, -1, -1, -1, -1], [0, *range(18, 35), 37, 38, -1, -1, -1, -1]),
    Cell.RNN: ([0, 1, 2, 3, 4], [0, 5, 6, 7, 8]),
}
_AUXILIARY = {Cell.LSTM: 39, Cell.RNN: 9}
_OPTIONS = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptionsT",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptionsT",
    "BIDIRECTIONAL_SEQUENCE_LSTM": "BidirectionalSequenceLSTMOptionsT",
    "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptionsT",
}
# the inputs up to the last required one (a direction's inputs are checked at the unidirectional positions)
_LEAST_INPUTS = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": 20,
    "UNIDIRECTIONAL_SEQUENCE_RNN": 5,
    "BIDIRECTIONAL_SEQUENCE_LSTM": 20,
    "BIDIRECTIONAL_SEQUENCE_RNN": 5,
}


@dataclass(frozen=True)
class OpHandle:
    """Another producer's sequence op as its layer's provenance handle: its outputs (one, or forward and backward
    when a bidirectional op does not merge them), whether one output holds both directions on its last axis,
    and per final-state role its variable tensors, one per direction."""

    outputs: tuple[str, ...]
    merged: bool
    states: tuple[tuple[str, tuple[str, ...]], ...]


_NO_OUTPUTS = {"CALL_ONCE", "ASSIGN_VARIABLE"}  # operators that write no tensor (a resource variable's init, its write)
_NUMPY = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT32": np.int32}


def _place_offset_buffers(buffers: list, data: bytes | mmap.mmap, path: Path) -> None:
    """Each buffer stored after the FlatBuffer (its ``offset`` > 1: the offset form, docs/conventions.md §11) given
    its bytes as ``data``, a view of the file's: ``size`` bytes at that absolute offset. InputError when the range
    passes the file's end or the buffer holds data as well (as LiteRT's interpreter refuses them)."""
    for k, buffer in enumerate(buffers):
        offset, size = int(buffer.offset or 0), int(buffer.size or 0)
        if offset <= 1:
            continue
        if buffer.data is not None and len(buffer.data):
            raise InputError(f"{path}: buffer {k} holds data and an offset ({offset}) both")
        if offset + size > len(data):
            raise InputError(
                f"{path}: buffer {k} names bytes {offset:,} to {offset + size:,}, past the file's {len(data):,}"
            )
        buffer.data = np.frombuffer(data, np.uint8, size, offset)


def parsed(path: str | Path) -> "_File":
    """The file at ``path`` parsed (``_File``), once while it is unchanged (same inode, size and modification time):
    running the layers of a whole model alone asks for its parts one after another, and the schema's object API takes
    seconds on a file of many operators (ul-unas: 4 s a parse). The two files last asked for stay parsed."""
    status = os.stat(path)
    return _parsed(str(path), status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


@lru_cache(maxsize=2)
def _parsed(path: str, *identity: int) -> "_File":
    return _File(Path(path))  # (named as the caller named it: its messages name the path the user gave)


class _File:
    """A parsed file: its first subgraph, buffers and operator names."""

    def __init__(self, path: Path) -> None:
        self.path, self.s = path, schema()
        data = map_regular(path)  # the weights (views of it) read as they are used, never copied
        if data[4:8] != FILE_IDENTIFIER:
            raise InputError(f"{path}: not a LiteRT flatbuffer (no {FILE_IDENTIFIER.decode()} identifier at byte 4)")
        try:
            self.model = self.s.ModelT.InitFromPackedBuf(data, 0)
        except Exception as err:  # noqa: BLE001 (flatbuffers raises anything on a malformed buffer)
            raise InputError(f"{path}: a malformed LiteRT flatbuffer ({type(err).__name__}: {err})"[:240]) from None
        if not self.model.subgraphs:
            raise InputError(f"{path}: a LiteRT file without a subgraph")
        self.graph = self.model.subgraphs[0]
        self.tensors = self.graph.tensors or []
        self.model.buffers = self.model.buffers or []
        _place_offset_buffers(self.model.buffers, data, path)
        codes = {v: k for k, v in vars(self.s.BuiltinOperator).items() if not k.startswith("_")}
        self.op_names = [
            codes.get(max(c.builtinCode, c.deprecatedBuiltinCode), "CUSTOM") for c in self.model.operatorCodes or []
        ]
        self.names = [self.decoded(t.name, f"tensor {k}'s name") for k, t in enumerate(self.tensors)]
        self._check_references()

    def decoded(self, value: object, what: str) -> str:
        try:
            return value.decode() if isinstance(value, bytes) else str(value or "")
        except UnicodeDecodeError:
            raise InputError(f"{self.path}: {what} is not UTF-8") from None

    def _check_references(self) -> None:
        """Every index the first subgraph holds points at something: operator codes, tensors (-1: none), buffers."""
        tensors, buffers = len(self.tensors), len(self.model.buffers)
        for k, t in enumerate(self.tensors):
            if not 0 <= t.buffer < buffers:
                raise InputError(f"{self.path}: tensor {self.names[k]!r} names buffer {t.buffer} of {buffers}")
        graph = self.graph
        for label, indices in (("inputs", graph.inputs), ("outputs", graph.outputs)):
            if indices is not None and any(not 0 <= int(k) < tensors for k in indices):
                raise InputError(f"{self.path}: the subgraph's {label} name a tensor it does not hold")
        for n, op in enumerate(graph.operators or []):
            if not 0 <= op.opcodeIndex < len(self.op_names):
                raise InputError(f"{self.path}: operator {n} names operator code {op.opcodeIndex}")
            inputs, outputs = op.inputs if op.inputs is not None else [], op.outputs if op.outputs is not None else []
            silent = self.op_names[op.opcodeIndex] in _NO_OUTPUTS
            if not (len(outputs) or silent) or any(not -1 <= int(k) < tensors for k in (*inputs, *outputs)):
                raise InputError(f"{self.path}: operator {n} ({self.op_names[op.opcodeIndex]}) names a missing tensor")
            if len(outputs) and min(outputs) < 0:
                raise InputError(f"{self.path}: operator {n} ({self.op_names[op.opcodeIndex]}) names a missing tensor")

    def name(self, index: int) -> str:
        return self.names[index]

    def op_name(self, op: Any) -> str:
        return self.op_names[op.opcodeIndex]

    def array(self, index: int, where: str) -> np.ndarray | None:
        """The constant data of tensor ``index`` (None: no data), refusing a quantized or non-float tensor."""
        if index < 0:
            return None
        t = self.tensors[index]
        buffer = self.model.buffers[t.buffer] if t.buffer < len(self.model.buffers) else None
        if buffer is None or buffer.data is None or len(buffer.data) == 0:
            return None
        kind = next((k for k, v in vars(self.s.TensorType).items() if v == t.type), str(t.type))
        if kind not in _NUMPY:
            raise InputError(
                f"{self.path}: {where}: tensor {self.name(index)!r} is {kind} (quantized weights are not read: "
                "gatepack reads float tensors)"
            )
        raw = bytes(np.asarray(buffer.data, np.uint8))
        shape = [int(d) for d in (t.shape if t.shape is not None else [])]
        if len(shape) > 8 or any(d < 0 for d in shape) or np.prod(shape) * np.dtype(_NUMPY[kind]).itemsize != len(raw):
            raise InputError(
                f"{self.path}: {where}: tensor {self.name(index)!r} of shape {shape} holds {len(raw)} bytes of {kind}"
            )
        return np.frombuffer(raw, _NUMPY[kind]).reshape(shape)

    def weight(self, index: int, where: str, asymmetric: bool) -> tuple[np.ndarray | None, QuantizedWeights | None]:
        """A weight tensor's float values, and for an INT8 one (a hybrid kernel's) its record, the values its exact
        float view (``quantized.int8_record``; ``asymmetric``: the op's ``asymmetric_quantize_inputs``)."""
        if index < 0 or self.tensors[index].type != self.s.TensorType.INT8:
            return self.array(index, where), None
        t = self.tensors[index]
        raw = bytes(np.asarray(self.model.buffers[t.buffer].data, np.uint8))
        shape = [int(d) for d in (t.shape if t.shape is not None else [])]
        if len(shape) != 2 or int(np.prod(shape)) != len(raw):
            raise InputError(
                f"{self.path}: {where}: INT8 tensor {self.name(index)!r} of shape {shape} holds {len(raw)} bytes"
            )
        try:
            record = int8_record(t, np.frombuffer(raw, np.int8).reshape(shape), asymmetric)
        except (ValueError, QuantizationError) as err:
            raise InputError(f"{self.path}: {where}: INT8 tensor {self.name(index)!r}: {err}") from None
        return record.dequantized(), record

    def metadata(self) -> dict | None:
        for entry in self.model.metadata or []:
            name = self.decoded(entry.name, "a metadata entry's name")
            if name == METADATA_KEY:
                if not 0 <= entry.buffer < len(self.model.buffers) or self.model.buffers[entry.buffer].data is None:
                    raise InputError(f"{self.path}: its gatepack metadata names no buffer that holds it")
                raw = bytes(np.asarray(self.model.buffers[entry.buffer].data, np.uint8))
                try:
                    found = json.loads(raw)
                except ValueError:
                    raise InputError(f"{self.path}: its gatepack metadata is not JSON") from None
                return found if isinstance(found, dict) else None
        return None


def read(path: str | Path, **_options: Any) -> Model:
    path = Path(path)
    file = _File(path)
    described = file.metadata()
    if described is not None and described.get("layers"):
        entries = described.get("layers", [])
        layers = [_described_layer(file, entry) for entry in entries]
        stateful = {
            layer.name: [_held_note(entry["stateful"])] for layer, entry in zip(layers, entries) if "stateful" in entry
        }
        whole = {"other_ops": described["other_ops"]} if described.get("whole") and described.get("other_ops") else {}
        held = described.get(HELD_KEY)
        whole.update({"states": held} if described.get("whole") and isinstance(held, dict) and held else {})
        return Model(path, FORMAT, layers, notes=stateful, meta=whole)
    layers, skipped, notes = [], [], {}
    for op in file.graph.operators or []:
        kind = file.op_name(op)
        if kind in SEQUENCE_OPS:
            layer, found = _foreign_layer(file, op, SEQUENCE_OPS[kind])
            layers.append(layer)
            if found:
                notes[layer.name] = found
        elif kind in UNREAD_OPS:
            skipped.append((file.name(op.outputs[0]), f"{kind} is not read yet"))
    lifted, found_notes, refused = lift_loops(file)
    layers += lifted
    notes.update(found_notes)
    held_ops = {file.op_name(op) for op in file.graph.operators or []}
    if not layers and not refused and "WHILE" not in held_ops and "FULLY_CONNECTED" in held_ops:
        try:
            layer, finding = lift_unrolled(file)
            return Model(path, FORMAT, [layer], notes={layer.name: [finding]})
        except LiftRefused as err:
            refused.append(("main", str(err)))
    if not layers:
        held = sorted({file.op_name(op) for op in file.graph.operators or []})
        if refused:
            raise NoRecurrentLayerError(refused[0][1])
        raise NoRecurrentLayerError(
            f"{path}: no (UNI|BI)DIRECTIONAL_SEQUENCE_LSTM or _RNN operator and no WHILE loop (it holds "
            f"{', '.join(held[:8]) or 'none'})"
        )
    skipped += refused
    lifted_kinds = {"WHILE"} if lifted else set()
    others = sorted({file.op_name(op) for op in file.graph.operators or []} - set(SEQUENCE_OPS) - lifted_kinds)
    meta = {"other_ops": others} if others else {}
    return Model(path, FORMAT, layers, notes=notes, skipped=skipped, meta=meta)


def _held_note(held: object) -> Finding:
    """A stateful file's layer (``--stateful``): its ops hold states across invokes, which the layer read from it,
    stateless and starting every call from zeros, does not."""
    pairs = (
        ", ".join(f"{p[1]} -> {p[0]}" for p in held.values() if isinstance(p, list) and len(p) == 2)
        if isinstance(held, dict)
        else ""
    )
    return Finding(
        "state",
        Status.LOSSY,
        f"a stateful file: its sequence ops hold {pairs or 'their states'} across invoke(); the layer read from it "
        "starts every call from zero states",
        alternative="convert the stateless source instead",
    )


# ----------------------------------------------------------------------------------------- the ops


def _op_params(
    file: _File, op: Any, cell: Cell, where: str, inputs: list[int] | None = None
) -> tuple[DirectionParams, dict]:
    """One sequence op's weights in ONNX's convention (``inputs``: one direction's, at the unidirectional op's
    positions), and its options (fused activation, time_major, CIFG)."""
    inputs = [int(k) for k in (op.inputs if inputs is None else inputs)]
    options, kind = op.builtinOptions, file.op_name(op)
    if type(options).__name__ != _OPTIONS[kind] or len(inputs) < _LEAST_INPUTS[kind]:
        raise InputError(
            f"{file.path}: {where}: {len(inputs)} inputs and {type(options).__name__.removesuffix('T')}, where the op "
            f"takes at least {_LEAST_INPUTS[kind]} and {_OPTIONS[kind].removesuffix('T')}"
        )
    fused = next(
        (k for k, v in vars(file.s.ActivationFunctionType).items() if v == options.fusedActivationFunction), "?"
    )
    activation = next((name for name, value in FUSED.items() if value == fused), None)
    if activation is None:
        raise InputError(f"{file.path}: {where}: fused_activation_function {fused} has no ONNX activation here")
    asymmetric = bool(getattr(options, "asymmetricQuantizeInputs", False))
    if cell is Cell.RNN:
        (w, wq), (r, rq) = (file.weight(inputs[j], where, asymmetric) for j in (1, 2))
        b = file.array(inputs[3], where)
        if w is None or r is None or w.ndim != 2 or r.ndim != 2:
            raise InputError(f"{file.path}: {where}: its weights are not 2-D constant tensors")
        _refuse_mixed(file, where, {"input_weights": wq, "recurrent_weights": rq})
        h = w.shape[0]
        bias = np.zeros(h, np.float32) if b is None else b.astype(np.float32)
        acts = (Activation(activation),)
        params = DirectionParams(
            w.astype(np.float32), r.astype(np.float32), bias, np.zeros(h, np.float32), acts, Wq=wq, Rq=rq
        )
        return params, {"time_major": options.timeMajor, "has_bias": b is not None, "states": inputs[4:5]}
    return _lstm_params(file, inputs, options, activation, where)


def _refuse_mixed(file: _File, where: str, records: dict[str, QuantizedWeights | None]) -> None:
    """InputError when some of an op's weight tensors are INT8 and others float: a canonical layer quantizes W and
    R as a whole (the converter quantizes tensors of 1024 elements or more only, so a small one stays float)."""
    kinds = {name: record is not None for name, record in records.items()}
    if len(set(kinds.values())) > 1:
        floats = sorted(name for name, held in kinds.items() if not held)
        raise InputError(
            f"{file.path}: {where}: its weights are partly INT8 ({', '.join(floats[:3])} float): gatepack reads "
            "a layer's W and R quantized as a whole or not at all"
        )


def _lstm_params(file: _File, inputs: list[int], options: Any, activation: str, where: str) -> tuple:
    def present(index: int) -> bool:
        return index < len(inputs) and inputs[index] >= 0

    for label, indices in (("projection", LSTM_PROJECTION), ("layer norm", LSTM_LAYER_NORM)):
        if any(present(j) for j in indices):
            raise InputError(f"{file.path}: {where}: a {label} input, which ONNX's LSTM has no counterpart of")

    def get(index: int) -> np.ndarray | None:
        found = file.array(inputs[index], where) if present(index) else None
        return None if found is None else found.astype(np.float32)

    records: dict[str, QuantizedWeights | None] = {}

    def required(index: int, label: str) -> np.ndarray:
        found, records[label] = file.weight(inputs[index], where, options.asymmetricQuantizeInputs)
        if found is None or found.ndim != 2:
            raise InputError(f"{file.path}: {where}: its gate weights are not 2-D constant tensors")
        return found.astype(np.float32)

    cifg = not present(LSTM_INPUT_WEIGHTS["i"])
    gates = [g for g in GATES[Cell.LSTM] if not (cifg and g == "i")]  # the op's order; CIFG: no input gate
    w = {g: required(LSTM_INPUT_WEIGHTS[g], f"input_to_{g}") for g in gates}
    r = {g: required(LSTM_RECURRENT_WEIGHTS[g], f"recurrent_to_{g}") for g in gates}
    _refuse_mixed(file, where, records)
    b = {g: get(j) for g, j in LSTM_BIASES.items()}
    p = {g: get(j) for g, j in LSTM_PEEPHOLES.items()}
    h = _check_gate_shapes(
        file, where, w, r, {**{f"{g}_bias": v for g, v in b.items()}, **{f"cell_to_{g}": v for g, v in p.items()}}
    )
    zero = np.zeros(h, np.float32)
    if cifg:  # the kernel's i = 1 - f: ONNX's input gate is the forget gate negated, f = 1 - i
        w["i"], r["i"] = -w["f"], -r["f"]
        b["i"] = None if b["f"] is None else -b["f"]
        p["i"] = None if p["f"] is None else -p["f"]
        w["f"], r["f"], b["f"], p["f"] = np.zeros_like(w["f"]), np.zeros_like(r["f"]), None, None
    canonical, onnx_peepholes = Cell.LSTM.gate_names, Cell.LSTM.spec.peepholes
    has_peepholes = any(p[g] is not None for g in onnx_peepholes)
    peepholes = np.concatenate([zero if p[g] is None else p[g] for g in onnx_peepholes]) if has_peepholes else None
    wq, rq = (_gate_records(file, records, kind, cifg, where) for kind in ("input", "recurrent"))
    params = DirectionParams(
        np.concatenate([w[g] for g in canonical]) if wq is None else wq.dequantized(),
        np.concatenate([r[g] for g in canonical]) if rq is None else rq.dequantized(),
        np.concatenate([zero if b[g] is None else b[g] for g in canonical]),
        np.zeros(4 * h, np.float32),
        (Activation("Sigmoid"), Activation(activation), Activation(activation)),
        peepholes,
        wq,
        rq,
    )
    found = {
        "time_major": options.timeMajor,
        "has_bias": any(b[g] is not None for g in canonical),
        "input_forget": cifg,
        "cell_clip": float(options.cellClip or 0.0),
        "states": [inputs[LSTM_OUTPUT_STATE], inputs[LSTM_CELL_STATE]],
    }
    return params, found


def _check_gate_shapes(file: _File, where: str, w: dict, r: dict, vectors: dict[str, np.ndarray | None]) -> int:
    """H, once every per-gate tensor has its shape (input weights [H, I], recurrent [H, H], biases and peepholes
    [H]); InputError naming the first that has not."""
    h, i = w["f"].shape[0], w["f"].shape[-1]
    wanted: dict[str, tuple[np.ndarray | None, tuple[int, ...]]] = {
        **{f"input_to_{g}": (w[g], (h, i)) for g in w},
        **{f"recurrent_to_{g}": (r[g], (h, h)) for g in r},
        **{label: (value, (h,)) for label, value in vectors.items()},
    }
    for label, (value, shape) in wanted.items():
        if value is not None and value.shape != shape:
            raise InputError(f"{file.path}: {where}: {label} has shape {list(value.shape)}, expected {list(shape)}")
    return h


def _gate_records(
    file: _File, records: dict[str, QuantizedWeights | None], kind: str, cifg: bool, where: str
) -> QuantizedWeights | None:
    """The ``kind`` (input or recurrent) per-gate INT8 records as one canonical record [4H, K], gates i, o, f, c
    (CIFG: i the forget gate's integers negated, f zeros, as the float weights are read); None for float ones."""
    found = {g: records.get(f"{kind}_to_{g}") for g in GATES[Cell.LSTM]}
    if found["f"] is None:
        return None
    if cifg:
        forget = found["f"]
        found["i"] = negated(forget)
        if found["i"] is None:
            raise InputError(f"{file.path}: {where}: CIFG {kind}_to_forget holds -128, whose negation int8 has not")
        found["f"] = forget.with_values(np.zeros_like(forget.values), forget.scale, forget.zero_point)
    return stacked([found[g] for g in Cell.LSTM.gate_names])  # type: ignore[misc]


def _signature(tensor: Any) -> list:
    """A tensor's shape signature (-1: dynamic), else its shape ([] when it declares none)."""
    found = tensor.shapeSignature if tensor.shapeSignature is not None else tensor.shape
    return [] if found is None else list(found)


def _cell_clip_note(clip: float) -> Finding:
    """A producer's cell_clip (TensorFlow's converter writes 10 for every Keras LSTM): the canonical layer has no
    bound on the cell state, so it is read as absent, which is lossy where |c| exceeds it."""
    return Finding(
        "clip",
        Status.LOSSY,
        f"cell_clip {clip:g} bounds the cell state (ONNX's clip bounds the gates' inputs): read without it, equal "
        f"while every |c| stays within {clip:g}",
        alternative="pass --allow-lossy to accept (verification compares against the file as written)",
    )


def _directions(file: _File, op: Any, cell: Cell, where: str) -> list[tuple[DirectionParams, dict]]:
    """Each direction's weights and options: one for a unidirectional op, forward and backward for a bidirectional
    one (its auxiliary input refused: ONNX has none)."""
    inputs = [int(k) for k in op.inputs]
    if not file.op_name(op).startswith("BIDIRECTIONAL"):
        return [_op_params(file, op, cell, where)]
    auxiliary = _AUXILIARY[cell]
    if len(inputs) > auxiliary and inputs[auxiliary] >= 0:
        raise InputError(f"{file.path}: {where}: an auxiliary input, which ONNX's {cell.op_name} has no counterpart of")
    return [
        _op_params(file, op, cell, where, [inputs[k] if 0 <= k < len(inputs) else -1 for k in positions])
        for positions in _BIDIRECTIONAL[cell]
    ]


def _states(
    file: _File, per_direction: list[dict], hidden: int, where: str
) -> tuple[dict[str, str], dict[str, np.ndarray], dict[str, tuple[str, ...]]]:
    """The op's state variables as the layer's roles: a subgraph input is the initial state (one direction only:
    a canonical layer has one [D, N, H] input), one with data a held initial state, else the final state."""
    roles: dict[str, str] = {}
    constants: dict[str, np.ndarray] = {}
    finals: dict[str, tuple[str, ...]] = {}
    graph_inputs = [int(k) for k in (file.graph.inputs if file.graph.inputs is not None else [])]
    for j, state in enumerate(("h", "c")[: len(per_direction[0]["states"])]):
        indices = [found["states"][j] for found in per_direction]
        if any(k < 0 or not file.tensors[k].isVariable for k in indices):
            raise InputError(f"{file.path}: {where}: its {state} state input is not a variable tensor")
        _refuse_computed_states(file, indices, state, where)
        names = tuple(file.name(k) for k in indices)
        held = [file.array(k, where) for k in indices]
        if any(k in graph_inputs for k in indices):
            if len(indices) > 1:
                raise InputError(
                    f"{file.path}: {where}: one {state} state input per direction, where a canonical layer has one "
                    "[2, N, H] initial state"
                )
            roles[f"initial_{state}"] = names[0]
        elif any(v is not None for v in held):  # a learned initial state (the interpreter refuses such a variable)
            roles[f"initial_{state}"] = names[0]
            values = [np.zeros((1, hidden), np.float32) if v is None else v.astype(np.float32) for v in held]
            constants[f"initial_{state}"] = np.stack([v.reshape(-1, hidden) for v in values])
        else:
            roles[f"y_{state}"], finals[f"y_{state}"] = names[0], names
    return roles, constants, finals


def _refuse_computed_states(file: _File, indices: list[int], state: str, where: str) -> None:
    """InputError when an op other than FILL writes a state variable before the sequence op: an initial state
    computed in the graph (gatepack's files slice it from an input), which the layer read from the op alone
    would not have. A FILL writes the zeros a stateless file starts every invoke from (docs/conventions.md §11)."""
    for op in file.graph.operators or []:
        written = {int(k) for k in op.outputs}
        if written & set(indices) and file.op_name(op) != "FILL":
            raise InputError(
                f"{file.path}: {where}: its {state} state variable is written by a {file.op_name(op)} op before it "
                "runs (an initial state computed in the graph), which gatepack reads only from its own description"
            )


def _foreign_layer(file: _File, op: Any, cell: Cell) -> tuple[RecurrentLayer, list[Finding]]:
    """One sequence op of another producer as a layer, and what reading it noticed."""
    name = file.name(op.outputs[0])
    where = f"{file.op_name(op)} {name!r}"
    per = _directions(file, op, cell, where)
    params = [p for p, _ in per]
    found = [f for _, f in per]
    layout = 0 if found[0]["time_major"] else 1
    x_tensor = file.tensors[op.inputs[0]]
    x_shape = [int(d) for d in _signature(x_tensor)]
    if len(x_shape) != 3:
        raise InputError(f"{file.path}: {where}: its input {file.name(op.inputs[0])!r} has shape {x_shape}, not 3-D")
    s, n = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
    roles, constants, finals = _states(file, found, params[0].R.shape[1], where)
    try:
        itf = Interface(
            x=file.name(op.inputs[0]),
            y=name,
            y_h=roles.get("y_h"),
            initial_h=roles.get("initial_h"),
            initial_c=roles.get("initial_c"),
            y_c=roles.get("y_c"),
            layout=layout,
            seq_length=s if s >= 0 else None,
            batch_size=n if n >= 0 else None,
            dtype="float32",
        )
        merged = len(params) == 2 and bool(getattr(op.builtinOptions, "mergeOutputs", False))
        outputs = tuple(file.name(int(k)) for k in op.outputs[: 1 if merged else len(params)])
        handle = OpHandle(outputs, merged, tuple(finals.items()))
        layer = RecurrentLayer(
            name,
            cell,
            params[0].W.shape[1],
            params[0].R.shape[1],
            Direction.BIDIRECTIONAL if len(params) == 2 else Direction.FORWARD,
            tuple(params),
            itf,
            has_bias=any(f["has_bias"] for f in found),
            input_forget=bool(found[0].get("input_forget", False)),
            constants=constants,
            provenance=Provenance(
                FORMAT, file.path, name, "node", file.op_name(op), inputs=(itf.x,), layout=layout, handle=handle
            ),
        )
    except SpecError as err:
        raise InputError(f"{file.path}: {where}: {err}") from None
    clip = max(f.get("cell_clip", 0.0) for f in found)
    return layer, [_cell_clip_note(clip)] if clip else []


# ----------------------------------------------------------------------------------------- own files


def _described_layer(file: _File, entry: object) -> RecurrentLayer:
    info = parse(file.path, entry)
    assert isinstance(entry, dict)  # parse refused anything else
    weights = entry.get("weights")
    if not isinstance(weights, list) or len(weights) != info.direction.count:
        raise InputError(f"{file.path}: layer {info.name!r}: its description names no weights per direction")
    by_name = {file.name(k): k for k in range(len(file.tensors))}
    ops = {file.name(op.outputs[0]): op for op in file.graph.operators or []}
    directions = []
    for k, names in enumerate(weights):
        where = f"layer {info.name!r} direction {k}"
        if info.strategy == "native":
            output = names.get("op_output") if isinstance(names, dict) else None
            op = ops.get(output) if isinstance(output, str) else None
            if op is None:
                raise InputError(f"{file.path}: {where}: the sequence op its description names is missing")
            params, _ = _op_params(file, op, info.cell, where)
        else:
            params = _elementary_params(file, by_name, names, info.activations[k], where)
        directions.append(replace(params, activations=info.activations[k]))
    constants = {}
    for role in info.constant_roles:
        index = by_name.get(f"{info.name}/{role}")
        value = None if index is None else file.array(index, f"layer {info.name!r}")
        if value is None:  # the native form's zero state variable
            batch = info.interface.batch_size if isinstance(info.interface.batch_size, int) else 1
            value = np.zeros((info.direction.count, batch, info.hidden_size), np.float32)
        else:
            value = constant_from_layout(value, role, info.interface.layout)
        constants[role] = value
    provenance = Provenance(FORMAT, file.path, info.name, info.strategy)
    return build_layer(file.path, info, directions, provenance, constants)


def _elementary_params(file: _File, by_name: dict, names: object, activations: tuple, where: str) -> DirectionParams:
    if not isinstance(names, dict) or not all(isinstance(names.get(key), str) for key in ("W", "R", "Wb", "Rb")):
        raise InputError(f"{file.path}: {where}: its description does not name W, R, Wb and Rb")

    asymmetric = names.get("quantized_inputs") == "asymmetric"  # the hybrid FULLY_CONNECTEDs' arithmetic
    records: dict[str, QuantizedWeights | None] = {}

    def get(key: str) -> np.ndarray:
        index = by_name.get(names[key])
        value, records[key] = (None, None) if index is None else file.weight(index, where, asymmetric)
        if value is None:
            raise InputError(f"{file.path}: {where}: constant {names[key]!r} is missing")
        return value.astype(np.float32)

    w, r, wb, rb = (get(key) for key in ("W", "R", "Wb", "Rb"))
    _refuse_mixed(file, where, {"W": records["W"], "R": records["R"]})
    peepholes = get("P") if "P" in names else None
    return DirectionParams(w, r, wb, rb, activations, peepholes, records["W"], records["R"])

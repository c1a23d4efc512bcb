"""Another producer's native gru / rnn / lstm ops read as canonical layers (weights, directions, biases)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gatepack.converters.formats.coreml.compressed as compressed
from gatepack.converters.apple import (
    activation_of,
    onnx_peephole,
    onnx_weights,
    to_onnx,
)
from gatepack.converters.errors import InputError, where
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    FP16_SOURCE,
    _mil_types,
    _value,
)
from gatepack.converters.quantization import compressed_source
from gatepack.schemas.layer import (
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    state_roles,
)


def _op_weights(op, cell: Cell, path: Path, layer: str) -> tuple[dict, list[Finding]]:
    """A native gru/rnn op's constants back in ONNX order: W, R, Wb, Rb, lbr, activations, reverse."""
    at = where(path, layer)
    (w, w_found), (r, r_found) = (compressed.weight(op.inputs.get(key)) for key in ("weight_ih", "weight_hh"))
    if w is None or r is None or w.ndim != 2 or r.ndim != 2:
        raise InputError(f"{at}{op.op_type} op {op.name!r}: weight_ih/weight_hh are not constant matrices")
    h = r.shape[1]
    gh = cell.gates * h
    if w.shape[0] != gh or r.shape != (gh, h):
        raise InputError(
            f"{at}{op.op_type} op {op.name!r}: weight_ih {list(w.shape)} / weight_hh {list(r.shape)} do not fit "
            f"hidden size {h} ({gh} rows expected)"
        )
    bias, input_bias = _value(op.inputs.get("bias")), _value(op.inputs.get("input_bias"))
    for label, b in (("bias", bias), ("input_bias", input_bias)):
        if b is not None and b.shape != (gh,):
            raise InputError(f"{at}{op.op_type} op {op.name!r}: {label} has shape {list(b.shape)}, expected [{gh}]")
    reset_after = bool(_value(op.inputs.get("reset_after")) or False)
    found = []
    if not reset_after:
        if input_bias is not None and input_bias.any():
            raise InputError(
                f"{at}gru op {op.name!r}: input_bias is set but reset_after is false (Core ML ignores it there)"
            )
        found.append(
            Finding(
                "bias", Status.FOLDED, "Core ML stores Wb + Rb summed (reset-before); read back as Wb = sum, Rb = 0"
            )
        )
    acts = (
        [_value(op.inputs.get("recurrent_activation")) or "sigmoid", _value(op.inputs.get("activation")) or "tanh"]
        if cell is Cell.GRU
        else [_value(op.inputs.get("activation")) or "tanh"]
    )
    return {
        **onnx_weights(cell, w, r, bias, input_bias, reset_after),
        **_records(w_found, r_found, lambda array: to_onnx(array, cell), found),
        "lbr": reset_after,
        "activations": tuple(activation_of(a, at) for a in acts),
        "reverse": (_value(op.inputs.get("direction")) or "forward") == "reverse",
        "has_bias": bias is not None or input_bias is not None,
    }, found


def _records(w_found, r_found, pick, found: list[Finding], suffix: str = "") -> dict:
    """``Wq`` and ``Rq``, the exact records of weight_ih and weight_hh where constexpr ops compute them, or ``Wlut``
    and ``Rlut`` where lookup tables do (rows in ONNX's gate order by ``pick``); a note appended to ``found`` for a
    compressed form no record holds."""
    unheld = compressed.unheld_forms([w_found, r_found], [f"weight_ih{suffix}", f"weight_hh{suffix}"], tables=True)
    if unheld:
        found.append(compressed_source(unheld))
    return {
        "Wq": compressed.record(w_found, pick),
        "Rq": compressed.record(r_found, pick),
        "Wlut": compressed.palette(w_found, pick),
        "Rlut": compressed.palette(r_found, pick),
    }


NATIVE_OPS = {"gru": Cell.GRU, "rnn": Cell.RNN, "lstm": Cell.LSTM}


def _float32_weights(got: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """W, R, Wb and Rb of ``onnx_weights``'s result, as float32."""
    w, r, wb, rb = (np.asarray(got[key], np.float32) for key in ("W", "R", "Wb", "Rb"))
    return w, r, wb, rb


def _lstm_op_weights(op, path: Path) -> tuple[list[DirectionParams], Direction, bool, list[Finding]]:
    """A native lstm op's constants in ONNX order, per direction (``*_back`` for a bidirectional op's
    backward one): W, R (gates i, f, o, z -> i, o, f, c), the summed bias as Wb (Rb = 0), the peephole
    (i, f, o -> i, o, f); the three activations shared by both directions. Also the direction, whether a
    bias is given, and the bias note. A clip is refused: MIL's clips the cell state, ONNX's the
    pre-activations."""
    at = where(path, op.name)
    clip = _value(op.inputs.get("clip"))
    if clip is not None:
        raise InputError(
            f"{at}lstm op {op.name!r}: clip {float(clip):g} clips the cell state after each update "
            "(coremltools' reference); an ONNX LSTM's clip bounds the gates' inputs, so no layer computes it"
        )
    direction = str(_value(op.inputs.get("direction")) or "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise InputError(f"{at}lstm op {op.name!r}: direction {direction!r} is not forward, reverse or bidirectional")
    acts = tuple(
        activation_of(str(_value(op.inputs.get(key)) or default), at)
        for key, default in (("recurrent_activation", "sigmoid"), ("cell_activation", "tanh"), ("activation", "tanh"))
    )
    params: list[DirectionParams] = []
    notes: list[Finding] = []
    for suffix in ("", "_back") if direction == "bidirectional" else ("",):
        (w, w_found), (r, r_found) = (compressed.weight(op.inputs.get(k + suffix)) for k in ("weight_ih", "weight_hh"))
        if w is None or r is None or w.ndim != 2 or r.ndim != 2 or r.shape[0] != 4 * r.shape[1] or len(w) != len(r):
            shapes = [None if v is None else list(v.shape) for v in (w, r)]
            raise InputError(
                f"{at}lstm op {op.name!r}: weight_ih{suffix} / weight_hh{suffix} {shapes} are not constant "
                "[4H, I] / [4H, H] matrices"
            )
        h = r.shape[1]
        bias, peephole = _value(op.inputs.get("bias" + suffix)), _value(op.inputs.get("peephole" + suffix))
        for label, value, size in (("bias", bias, 4 * h), ("peephole", peephole, 3 * h)):
            if value is not None and value.shape != (size,):
                raise InputError(
                    f"{at}lstm op {op.name!r}: {label}{suffix} has shape {list(value.shape)}, expected [{size}]"
                )
        got = onnx_weights(Cell.LSTM, w, r, bias, None, False)
        params.append(
            DirectionParams(
                *_float32_weights(got),
                activations=acts,
                P=None if peephole is None else onnx_peephole(peephole),
                **_records(w_found, r_found, lambda array: to_onnx(array, Cell.LSTM), notes, suffix),
            )
        )
    has_bias = any(_value(op.inputs.get(key)) is not None for key in ("bias", "bias_back"))
    folded = [Finding("bias", Status.FOLDED, "Core ML stores Wb + Rb summed; read back as Wb = sum, Rb = 0")]
    return params, Direction(direction), has_bias, (folded if has_bias else []) + notes


# What reading a foreign op's direction does (status, detail).
READ_DIRECTIONS = {
    Direction.FORWARD: (Status.EXACT, "forward"),
    Direction.REVERSE: (
        Status.REPACKED,
        "reverse: Core ML returns a reverse op's sequence in processing order; read as ONNX's time-aligned Y",
    ),
    Direction.BIDIRECTIONAL: (
        Status.REPACKED,
        "bidirectional: one op with *_back weights, Y [S,N,2H] (both halves in input time) and states [N,2H] "
        "read as ONNX's [S,2,N,H] and [2,N,H]",
    ),
}


def _op_directions(
    op, cell: Cell, path: Path, layer: str
) -> tuple[list[DirectionParams], Direction, bool, bool, list[Finding]]:
    """A native gru, rnn or lstm op's directions in ONNX order, its direction, linear_before_reset,
    whether it has a bias, and the bias note."""
    if cell is Cell.LSTM:
        directions, direction, has_bias, found = _lstm_op_weights(op, path)
        return directions, direction, False, has_bias, found
    got, found = _op_weights(op, cell, path, layer)
    params = DirectionParams(
        *_float32_weights(got),
        activations=got["activations"][: cell.activation_count],
        **{key: got[key] for key in ("Wq", "Rq", "Wlut", "Rlut")},
    )
    direction = Direction.REVERSE if got["reverse"] else Direction.FORWARD
    return [params], direction, got["lbr"], got["has_bias"], found


def _read_op(op, path: Path) -> tuple[RecurrentLayer, list[Finding]]:
    """Another producer's native gru, rnn or lstm op as a layer (states [N, D*H] read as [D,N,H])."""
    cell = NATIVE_OPS[op.op_type]
    directions, direction, lbr, has_bias, found = _op_directions(op, cell, path, op.name)
    if op.inputs["weight_ih"].dtype == _mil_types().fp16:
        found.append(FP16_SOURCE)
    x_shape = op.inputs["x"].shape
    states = {role: op.inputs[role].name for role, _ in state_roles(cell)}
    finals = {role: out.name for (_, role), out in zip(state_roles(cell), op.outputs[1:])}
    itf = Interface(
        x=op.inputs["x"].name,
        y=op.outputs[0].name,
        layout=0,
        seq_length=x_shape[0] if isinstance(x_shape[0], int) else None,
        batch_size=x_shape[1] if isinstance(x_shape[1], int) else None,
        dtype="float32",
        **states,
        **finals,
    )
    found.append(Finding("direction", *READ_DIRECTIONS[direction]))
    try:
        layer = RecurrentLayer(
            op.name,
            cell,
            int(directions[0].W.shape[1]),
            int(directions[0].R.shape[1]),
            direction,
            tuple(directions),
            itf,
            lbr,
            None,
            has_bias,
            provenance=Provenance(FORMAT, path, op.name),
        )
    except SpecError as err:
        raise InputError(f"{path}: {err}") from None
    return layer, found

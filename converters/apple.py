"""What Core ML's MIL ``gru``/``rnn`` ops and ``BNNSGraph.Builder``'s ``gru``/``rnn`` calls share
(BNNSGraph executes ML Programs on the CPU; its Builder is a facade over the same ops, docs/conventions.md
§5): gate order, bias layout, activations and semantics (what each op takes, and the known runtime doubts:
``converters.capabilities``).

Per step, with gate blocks in Apple's order r, o, z (o, BNNS's "n", is the candidate)::

    r = RA(W_ir x + b_ir + W_hr h + b_hr)
    z = RA(W_iz x + b_iz + W_hz h + b_hz)
    o = A(W_io x + b_io + W_ho (r * h) + b_ho)          reset_after / applyResetGateAfterMatMul false
    o = A(W_io x + b_io + r * (W_ho h + b_ho))          ... true (ONNX linear_before_reset = 1)
    h = (1 - z) * o + z * h

* ONNX's z, r, h row blocks are permuted by ``to_apple``, Apple's back by ``to_onnx``, both derived from the
  family's gate table (``coreml.registration.GATES``: r, h, z; LSTM i, f, o, c; peepholes i, f, o);
* false is reset-*before*, whatever Apple's docs print (they show ``W_ho h * r + b_ho``; every
  executable source, coremltools' numpy reference tested against real Core ML and the NeuralNetwork
  GRU layer, computes ``W_ho (r * h)``); the two candidate biases are then additive, so one
  ``bias = Wb + Rb`` holds them (folded);
* true takes the hidden biases in ``bias`` and the input biases in ``input_bias`` / ``inputBias``;
* a reverse op returns its output sequence in *processing order* (coremltools' tests expect it so);
  ONNX aligns it to input time;
* activations are parameterless; no clip, no sequence lengths, no bidirectional mode.
"""

from __future__ import annotations

import numpy as np

from gatepack.converters.errors import InputError
from gatepack.converters.formats.coreml.registration import GATES, PEEPHOLES
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import Cell, RecurrentLayer, reorder_gates

# The ONNX activations the native ops compute exactly, and their Apple spelling (MIL strings).
NATIVE_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}
# What each parameterless Apple activation computes, as an ONNX activation (for reading back).
APPLE_ACTIVATIONS = {
    "sigmoid": Activation("Sigmoid"),
    "tanh": Activation("Tanh"),
    "relu": Activation("Relu"),
    "linear": Activation("Affine", 1.0, 0.0),
    "scaled_tanh": Activation("ScaledTanh", 1.0, 1.0),
    "hard_sigmoid": Activation("HardSigmoid", 0.2, 0.5),
    "sigmoid_hard": Activation("HardSigmoid", 0.2, 0.5),
}


def to_apple(array: np.ndarray, cell: Cell) -> np.ndarray:
    """``array``'s gate blocks (rows, or a bias's entries) from ONNX's order to the Apple family's
    (``coreml.registration.GATES``, the one statement of it)."""
    return reorder_gates(array, cell.gate_names, GATES[cell])


def to_onnx(array: np.ndarray, cell: Cell) -> np.ndarray:
    """``array``'s gate blocks from the Apple family's order back to ONNX's."""
    return reorder_gates(array, GATES[cell], cell.gate_names)


APPLE_TENSORS = ("weight_ih", "weight_hh", "bias", "input_bias")


def apple_tensor(layer: RecurrentLayer, k: int, key: str) -> np.ndarray | None:
    """One of direction ``k``'s tensors in Apple's layout (``APPLE_TENSORS``, MIL names), float32,
    gates permuted z,r,h -> r,o,z: ``weight_ih`` [G*H, I], ``weight_hh`` [G*H, H], ``bias`` (Wb + Rb;
    Rb with linear_before_reset) and ``input_bias`` (Wb, with linear_before_reset only); None where
    the layer has no such tensor."""
    p, cell = layer.directions[k], layer.cell
    lbr = cell.spec.reset_placement and layer.linear_before_reset
    if key == "weight_ih":
        out = to_apple(p.W, cell)
    elif key == "weight_hh":
        out = to_apple(p.R, cell)
    elif key == "bias" and (lbr or layer.has_bias):
        # float16 sources: sum in float32
        out = (
            to_apple(p.Rb.astype(np.float32), cell)
            if lbr
            else to_apple(p.Wb.astype(np.float32) + p.Rb.astype(np.float32), cell)
        )
    elif key == "input_bias" and lbr:
        out = to_apple(p.Wb, cell)
    else:
        return None
    return np.ascontiguousarray(out, dtype=np.float32)


def apple_weights(layer: RecurrentLayer, k: int) -> dict[str, np.ndarray]:
    """Every tensor of direction ``k`` that the layer has, by MIL name (see ``apple_tensor``)."""
    found = {key: apple_tensor(layer, k, key) for key in APPLE_TENSORS}
    return {key: value for key, value in found.items() if value is not None}


def apple_peephole(peephole: np.ndarray) -> np.ndarray:
    """ONNX's P [3H] (i, o, f) as MIL's ``peephole`` (i, f, o: ``coreml.registration.PEEPHOLES``), float32."""
    return np.ascontiguousarray(reorder_gates(np.asarray(peephole), Cell.LSTM.spec.peepholes, PEEPHOLES), np.float32)


def onnx_peephole(peephole: np.ndarray) -> np.ndarray:
    """MIL's ``peephole`` [3H] (i, f, o) as ONNX's P (i, o, f), float32."""
    return np.ascontiguousarray(reorder_gates(np.asarray(peephole), PEEPHOLES, Cell.LSTM.spec.peepholes), np.float32)


def onnx_weights(
    cell: Cell,
    weight_ih: np.ndarray,
    weight_hh: np.ndarray,
    bias: np.ndarray | None,
    input_bias: np.ndarray | None,
    reset_after: bool,
) -> dict[str, np.ndarray]:
    """The inverse of ``apple_weights``: W, R, Wb, Rb in ONNX's z, r, h order (shapes already
    checked by the caller). Without reset_after the summed bias reads back as Wb, with Rb = 0."""
    h = weight_hh.shape[1]
    zeros = np.zeros(cell.gates * h, np.float32)
    if reset_after:
        wb = to_onnx(input_bias, cell) if input_bias is not None else zeros
        rb = to_onnx(bias, cell) if bias is not None else zeros
    else:
        wb, rb = (to_onnx(bias, cell) if bias is not None else zeros), zeros
    return {"W": to_onnx(weight_ih, cell), "R": to_onnx(weight_hh, cell), "Wb": wb, "Rb": rb}


def activation_of(text: str, at: str) -> Activation:
    """The ONNX activation an Apple activation string computes; ``at`` names file and layer."""
    if text not in APPLE_ACTIVATIONS:
        raise InputError(
            f"{at}activation {text!r} is not one Apple's gru/rnn computes ({', '.join(sorted(APPLE_ACTIVATIONS))})"
        )
    return APPLE_ACTIVATIONS[text]


def recurrence(
    cell: Cell,
    x: np.ndarray,
    initial_h: np.ndarray,
    weight_ih: np.ndarray,
    weight_hh: np.ndarray,
    bias: np.ndarray | None,
    input_bias: np.ndarray | None,
    *,
    reverse: bool,
    activations: tuple[Activation, ...],
    reset_after: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """One Apple gru/rnn op on ``x`` [S,N,I] from ``initial_h`` [N,H]: the output sequence [S,N,H] in
    *processing order* (a reverse op's first row is the last time step) and the final state [N,H].

    ``activations`` are (recurrent, candidate) for GRU, (activation,) for RNN. The arithmetic runs on
    gatepack's shared recurrence kernel after mapping the gates back to ONNX's order; reset-before
    when ``reset_after`` is false."""
    from gatepack.converters.executor import CellOptions, run_recurrence

    w = onnx_weights(cell, weight_ih, weight_hh, bias, input_bias if reset_after else None, reset_after)
    y, y_h = run_recurrence(
        cell,
        [(w["W"], w["R"], w["Wb"], w["Rb"], activations)],
        reverse=[reverse],
        x=x,
        sequence_lens=None,
        initial_h=np.asarray(initial_h)[None],
        options=CellOptions(linear_before_reset=bool(reset_after)),
    )
    seq = y[:, 0]
    return (seq[::-1] if reverse else seq), y_h[0]


def lstm_recurrence(
    x: np.ndarray,
    initial_h: np.ndarray,
    initial_c: np.ndarray,
    weight_ih: np.ndarray,
    weight_hh: np.ndarray,
    bias: np.ndarray | None,
    *,
    reverse: bool,
    activations: tuple[Activation, ...],
    peephole: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Apple lstm op (gates i, f, o, z; one summed bias; MIL's optional peephole [3H] in the order
    i, f, o; no clip or coupling) on ``x`` [S,N,I] from ``initial_h`` and ``initial_c`` [N,H]: the output
    sequence [S,N,H] in processing order, and the final hidden and cell states [N,H]. ``activations``:
    (recurrent, cell, output), i.e. ONNX's (f, g, h)::

        i = RA(W_i x + R_i h + b_i + p_i * c)   f = RA(W_f x + R_f h + b_f + p_f * c)
        z = CA(W_z x + R_z h + b_z)             c' = f * c + i * z
        o = RA(W_o x + R_o h + b_o + p_o * c')  h' = o * A(c')

    (the output gate's peephole reads the updated cell, as in ONNX and coremltools' reference).
    """
    from gatepack.converters.executor import CellOptions, run_recurrence

    w = onnx_weights(Cell.LSTM, weight_ih, weight_hh, bias, None, False)
    y, y_h, y_c = run_recurrence(
        Cell.LSTM,
        [(w["W"], w["R"], w["Wb"], w["Rb"], activations)],
        reverse=[reverse],
        x=x,
        sequence_lens=None,
        initial_h=np.asarray(initial_h)[None],
        initial_c=np.asarray(initial_c)[None],
        options=CellOptions(peepholes=(None if peephole is None else onnx_peephole(peephole),)),
    )
    seq = y[:, 0]
    return (seq[::-1] if reverse else seq), y_h[0], y_c[0]

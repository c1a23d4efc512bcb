"""OpenVINO loops lifted into layers: a ``TensorIterator`` over an ``LSTMCell``/``GRUCell``/``RNNCell``
(the form OpenVINO's own transformations and older IRs use), built here with OpenVINO's Python API
from an ONNX node's weights and saved as an IR; and a loop that is no recurrence, refused.

The oracle is onnxruntime running the ONNX node the weights came from (built with ``onnx.helper``): the
lifted layer, converted to ONNX, must give its outputs, and read back with W and R bit-exact. The
gate-order transcription ONNX -> OpenVINO below is the test's own (OpenVINO's cell specification:
LSTM f, i, c, o; GRU z, r, h; GRU linear_before_reset: B [4H] = Wb_z+Rb_z, Wb_r+Rb_r, Wb_h, Rb_h).
ov.convert_model's Keras loops are covered by fixtures/producers (ov_keras_*).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from helpers import FIXTURES, Config, inputs, ort_reference, ort_run, weights

import gatepack.converters as gp

ONNX_TO_OV = {"LSTM": [2, 0, 3, 1], "GRU": [0, 1, 2], "RNN": [0]}  # OpenVINO block k = ONNX block ONNX_TO_OV[k]
CELL_OPS = {"LSTM": ops.lstm_cell, "GRU": ops.gru_cell, "RNN": ops.rnn_cell}


def _blocks(array: np.ndarray, cell: str) -> np.ndarray:
    parts = np.split(array, len(ONNX_TO_OV[cell]))
    return np.concatenate([parts[k] for k in ONNX_TO_OV[cell]])


def _tensor_iterator(cfg: Config, path) -> None:
    """An IR of one TensorIterator slicing X along time (axis 0 or 1 by the layout; from the last step
    for a reverse layer), its body one cell op with constant weights; initial states are model inputs
    when the config has them, else constant zeros."""
    w = weights(cfg)
    wx, rx = _blocks(w["W"][0], cfg.cell), _blocks(w["R"][0], cfg.cell)
    wb, rb = np.split(w["B"][0], 2)
    if cfg.cell == "GRU" and cfg.lbr:
        bias = np.concatenate([wb[: 2 * cfg.H] + rb[: 2 * cfg.H], wb[2 * cfg.H :], rb[2 * cfg.H :]])
    else:
        bias = _blocks(wb + rb, cfg.cell)
    axis, n, s = cfg.layout, cfg.N, cfg.S
    x = ops.parameter([n, s, cfg.I] if axis else [s, n, cfg.I], np.float32, name="x")
    params, states, body_states = [x], [], []
    for role in ("h", "c") if cfg.cell == "LSTM" else ("h",):
        if getattr(cfg, f"initial_{role}"):
            outer = ops.parameter([n, cfg.H], np.float32, name=f"{role}0")
            params.append(outer)
        else:
            outer = ops.constant(np.zeros((n, cfg.H), np.float32))
        states.append(outer)
        body_states.append(ops.parameter([n, cfg.H], np.float32))
    x_t = ops.parameter([n, 1, cfg.I] if axis else [1, n, cfg.I], np.float32)
    step = ops.squeeze(x_t, ops.constant(np.array([axis])))
    kwargs = {"linear_before_reset": bool(cfg.lbr)} if cfg.cell == "GRU" else {}
    if cfg.cell == "RNN":
        names = [a.lower() for a in cfg.activations or ["Tanh"]]
        kwargs.update(activations=names, activations_alpha=[], activations_beta=[])
    weights_ = [ops.constant(wx), ops.constant(rx), ops.constant(bias.astype(np.float32))]
    cell = CELL_OPS[cfg.cell](step, *body_states, *weights_, cfg.H, **kwargs)
    results = [ops.result(cell.output(k)) for k in range(len(body_states))]
    y_step = ops.result(ops.unsqueeze(cell.output(0), ops.constant(np.array([axis]))))
    body = ov.Model([*results, y_step], [x_t, *body_states])
    loop = ops.tensor_iterator()
    loop.set_body(body)
    reverse = cfg.direction == "reverse"
    start, stride, end = (-1, -1, 0) if reverse else (0, 1, -1)
    loop.set_sliced_input(x_t, x.output(0), start, stride, 1, end, axis)
    for inner, outer, result in zip(body_states, states, results):
        loop.set_merged_input(inner, outer.output(0), result.output(0))
    y = loop.get_concatenated_slices(y_step.output(0), start, stride, 1, end, axis)
    finals = [loop.get_iter_value(r.output(0), -1) for r in results]
    model = ov.Model([ops.result(y), *(ops.result(f) for f in finals)], params)
    ov.save_model(model, str(path), compress_to_fp16=False)


CASES = {
    "lstm_batch_major_states": Config(cell="LSTM", layout=1, initial_h=True, initial_c=True, S=5, N=2, I=3, H=4),
    "gru_lbr_reverse": Config(cell="GRU", lbr=1, direction="reverse", S=4, N=3, I=5, H=6),
    "gru_forward_h0": Config(cell="GRU", initial_h=True, S=3, N=2, I=4, H=5),
    "rnn_relu": Config(cell="RNN", activations=["Relu"], S=4, N=2, I=3, H=3),
}


@pytest.mark.parametrize("name", CASES)
def test_a_tensor_iterator_over_a_cell_op_is_lifted_and_converts_to_the_onnx_nodes_outputs(name, tmp_path):
    cfg = CASES[name]
    source = tmp_path / "ti.xml"
    _tensor_iterator(cfg, source)
    model = gp.load(source)
    (layer,) = model.layers
    assert layer.cell.value == cfg.cell.lower() and layer.direction.value == cfg.direction
    assert layer.interface.layout == cfg.layout
    assert (layer.interface.initial_h is not None) == cfg.initial_h
    lifted = next(f for f in model.notes_for(layer) if f.feature == "lifted")
    assert lifted.status.value == "repacked" and "TensorIterator" in lifted.detail
    w = weights(cfg)
    np.testing.assert_array_equal(layer.directions[0].W, w["W"][0])  # the gate blocks back in ONNX's order
    np.testing.assert_array_equal(layer.directions[0].R, w["R"][0])
    assert layer.directions[0].activations[0].name == (cfg.activations or ["Sigmoid"])[0]

    out = tmp_path / "out.onnx"
    result = gp.convert(source, out, layers_only=True)
    assert result.passed and result.verification.passed, result.to_text()
    feed0 = inputs(cfg)  # layout 0: X [S,N,I], states [1,N,H]
    (written,) = gp.load(out).layers  # the layers alone take readable names for the IR's internal tensors
    itf = written.interface
    feed = {itf.x: feed0["X"].transpose(1, 0, 2) if cfg.layout else feed0["X"]}
    for role in ("initial_h", "initial_c"):
        if getattr(itf, role):
            feed[getattr(itf, role)] = feed0[role].transpose(1, 0, 2) if cfg.layout else feed0[role]
    got = ort_run(out, feed)
    expected = ort_reference(cfg, feed0)
    for value, want in zip(got, expected):
        if cfg.layout:  # the converted artifact keeps the layer's batch-major layout
            value = value.transpose(1, 2, 0, 3) if value.ndim == 4 else value.transpose(1, 0, 2)
        np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-4)


def test_a_loop_that_is_no_recurrence_is_refused_with_what_was_tried(tmp_path):
    """ov.convert_model's Keras SimpleRNN loop with its step's Tanh made a Sin: no GRU/RNN/LSTM reading
    reproduces it, so inspect says so on one line and exits 3 (nothing lifted, nothing written)."""
    source = FIXTURES / "producers" / "ov_keras_simple_rnn"
    xml = source.with_suffix(".xml").read_text()
    assert xml.count('type="Tanh"') == 1
    shutil.copy(source.with_suffix(".xml"), tmp_path / "sin.xml")
    shutil.copy(source.with_suffix(".bin"), tmp_path / "sin.bin")
    assert len(gp.load(tmp_path / "sin.xml").layers) == 1  # lifted (and its proof cached for these files)
    (tmp_path / "sin.xml").write_text(xml.replace('type="Tanh"', 'type="Sin"'))  # the same path, changed
    with pytest.raises(gp.NoRecurrentLayerError, match="Loop .* none of .* readings") as err:
        gp.load(tmp_path / "sin.xml")
    assert "activations: no sigmoid/tanh/relu" in str(err.value)
    run = subprocess.run(
        [sys.executable, "-m", "gatepack", "inspect", str(tmp_path / "sin.xml")], capture_output=True, text=True
    )
    assert run.returncode == 3 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) <= 2 and "none of" in run.stderr

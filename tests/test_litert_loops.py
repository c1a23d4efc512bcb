"""Keras's ``WHILE`` loops in LiteRT files (fixtures/producers/litert) lifted into canonical layers
(converters/formats/litert/loops.py, docs/conventions.md §11).

The oracle is the framework: each fixture's truth holds Keras's own outputs for its inputs. The lifted layers
are composed here as the file composes its loops, independently of the reader (time-major X, a go_backwards or
backward layer on X reversed in time, a Bidirectional's backward Y reversed back and concatenated after the
forward one, Keras's outputs in order: the sequence or last step, then each direction's h and c), and run on
gatepack's executor and, written with ``--to onnx --layers-only``, on onnxruntime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gatepack as gp
from gatepack.converters.errors import InputError

LITERT = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "litert"
MANIFEST = json.loads((LITERT / "manifest.json").read_text())
# every loop the converter wrote in float32 (the fused Keras 2 LSTMs are read as ops: tests/test_litert.py)
LIFTED = {
    "litert_keras3_gru_reset_after": ("GRU", "reset after"),
    "litert_keras3_gru_reset_before": ("GRU", "reset before"),
    "litert_keras3_gru_dynamic_batch": ("GRU", "reset after"),
    "litert_keras3_lstm": ("LSTM", "gate order i, f, c, o"),
    "litert_keras3_lstm_last": ("LSTM", "gate order i, f, c, o"),
    "litert_keras3_lstm_go_backwards": ("LSTM", "gate order i, f, c, o"),
    "litert_keras3_lstm_bidirectional": ("LSTM", "gate order i, f, c, o"),
    "litert_keras3_lstm_nobias": ("LSTM", "no bias"),
    "litert_keras3_lstm_initial_state": ("LSTM", "gate order i, f, c, o"),
    "litert_keras3_lstm_hard_sigmoid": ("LSTM", "HardSigmoid(alpha=0.166667, beta=0.5)"),
    "litert_keras3_simple_rnn": ("RNN", "Tanh"),
    "litert_keras3_simple_rnn_relu": ("RNN", "Relu"),
    "litert_keras3_simple_rnn_bidirectional": ("RNN", "Tanh"),
    "litert_keras2_lstm_return_state": ("LSTM", "gate order i, f, c, o"),
    "litert_keras2_lstm_nobias": ("LSTM", "no bias"),
    "litert_keras2_lstm_hard_sigmoid": ("LSTM", "HardSigmoid(alpha=0.2, beta=0.5)"),
    "litert_keras2_simple_rnn_relu_bidirectional": ("RNN", "Relu"),
}
REFUSED = {
    "litert_keras3_lstm_stateful": "READ_VARIABLE op (a stateful layer's resource variable",
    "litert_keras2_lstm_stateful": "READ_VARIABLE op (a stateful layer's resource variable",
}
TARGETS = {
    "onnx": "onnx",
    "openvino": "xml",
    "coreml": "mlpackage",
    "directml": "directml",
    "bnns": "bnns",
    "litert": "tflite",
}


def _truth(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(LITERT / f"{name}.truth.npz"))


def _input(truth: dict[str, np.ndarray], key: str) -> np.ndarray | None:
    found = [k for k in truth if k.startswith(f"serving_default_{key}")]
    return truth[found[0]] if found else None


def _keras_outputs(name: str, layers: list, run) -> list[np.ndarray]:
    """Keras's outputs in order from the lifted layers, each run by ``run(layer, x [S,N,I], h0, c0)`` -> (Y [S,N,H]
    or None, h [N,H], c [N,H] or None)."""
    config, truth = MANIFEST[f"{name}.tflite"]["config"], _truth(name)
    x = _input(truth, "x").transpose(1, 0, 2)
    h0, c0 = _input(truth, "h0"), _input(truth, "c0")
    by_direction = {("backward" in layer.name): layer for layer in layers}
    assert len(by_direction) == len(layers) == (2 if config["bidirectional"] else 1)
    results = {}
    for backward, layer in by_direction.items():
        reverse = backward or config.get("go_backwards", False)
        y, h, c = run(layer, np.ascontiguousarray(x[::-1] if reverse else x), h0, c0)
        results[backward] = (None if y is None else (y[::-1] if backward else y).transpose(1, 0, 2), h, c)
    directions = [results[False]] + ([results[True]] if True in results else [])
    if config["return_sequences"]:
        first = np.concatenate([y for y, _, _ in directions], axis=-1)
    else:
        first = np.concatenate([h for _, h, _ in directions], axis=-1)
    states = [s for _, h, c in directions for s in (h, c) if s is not None] if config["return_state"] else []
    return [first, *states]


def _truth_outputs(name: str) -> list[np.ndarray]:
    truth = _truth(name)
    keys = sorted((k for k in truth if not k.startswith(("serving_default", "litert:"))), key=lambda k: k[-1])
    return [truth[k] for k in keys]


def _on_executor(layer, x, h0, c0):
    from gatepack.converters.executor import run_layer

    y, h, *c = run_layer(layer, x, None, None if h0 is None else h0[None], None if c0 is None else c0[None])
    return (None if layer.interface.y is None else y[:, 0]), h[0], (c[0][0] if c else None)


@pytest.mark.parametrize("name", sorted(LIFTED))
def test_every_keras_loop_is_lifted_and_gives_keras_s_outputs_on_the_executor(name):
    model = gp.load(LITERT / f"{name}.tflite")
    cell, words = LIFTED[name]
    for layer in model.layers:
        (finding,) = model.notes[layer.name]
        assert layer.cell.name == cell and finding.feature == "lifted" and words in finding.detail, finding.detail
    expected = _truth_outputs(name)
    actual = _keras_outputs(name, model.layers, _on_executor)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "name", ["litert_keras3_gru_reset_before", "litert_keras3_lstm_bidirectional", "litert_keras3_lstm_initial_state"]
)
def test_a_lifted_loop_written_as_onnx_gives_keras_s_outputs_on_onnxruntime(name, tmp_path):
    import onnxruntime as ort

    model = gp.load(LITERT / f"{name}.tflite")
    sessions = {}
    for k, layer in enumerate(model.layers):
        lone = gp.Model(model.path, model.format, [layer], notes=model.notes)
        result = gp.convert(lone, tmp_path / f"{k}.onnx", layers_only=True)
        assert result.verification.passed
        sessions[layer.name] = ort.InferenceSession(str(tmp_path / f"{k}.onnx"))

    def on_onnxruntime(layer, x, h0, c0):
        itf = layer.interface
        feed = {itf.x: x, **({itf.initial_h: h0[None], itf.initial_c: c0[None]} if itf.initial_h else {})}
        names = [n for n in (itf.y, itf.y_h, itf.y_c)]
        found = dict(zip([n for n in names if n], sessions[layer.name].run([n for n in names if n], feed)))
        y = found.get(itf.y)
        return (None if y is None else y[:, 0]), found[itf.y_h][0], (found[itf.y_c][0] if itf.y_c else None)

    for a, e in zip(_keras_outputs(name, model.layers, on_onnxruntime), _truth_outputs(name), strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("name", ["litert_keras3_gru_reset_after", "litert_keras3_lstm_go_backwards"])
def test_a_lifted_loop_converts_to_every_target_verified(name, target, tmp_path):
    result = gp.convert(LITERT / f"{name}.tflite", tmp_path / f"out.{TARGETS[target]}", to=target, layers_only=True)
    assert result.verification.passed and result.verification.outputs


def test_a_file_holding_other_operators_is_converted_only_with_layers_only(tmp_path):
    with pytest.raises(gp.GatepackError) as err:
        gp.convert(LITERT / "litert_keras3_lstm.tflite", tmp_path / "out.onnx")
    assert "TRANSPOSE" in str(err.value)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_loop_that_cannot_be_lifted_is_refused_naming_the_while_and_why(name):
    with pytest.raises(InputError) as err:
        gp.load(LITERT / f"{name}.tflite")
    assert "WHILE" in err.value.one_line() and REFUSED[name] in err.value.one_line()


# ---------------------------------------------------------------------------- litert-torch's unrolled steps

TORCH = {
    "litert_torch_gru": ("GRU", "gate order r, z, h; reset after the matmul"),
    "litert_torch_gru_nobias_h0": ("GRU", "gate order r, z, h; reset after the matmul"),
    "litert_torch_lstm": ("LSTM", "gate order i, f, c, o"),
    "litert_torch_lstm_nobias_h0": ("LSTM", "gate order i, f, c, o"),
    "litert_torch_rnn_tanh": ("RNN", "Tanh"),
    "litert_torch_rnn_relu_bidirectional": ("RNN", "Relu"),
}


def _torch_feed_and_truth(name: str) -> tuple[list, list[np.ndarray]]:
    """torch's inputs (x, h0, c0 as given) and outputs (Y [S, N, D*H], h_n, c_n) in order."""
    truth = _truth(name)
    ordered = sorted((k for k in truth if not k.startswith("litert:")), key=lambda k: (k.count("output"), k))
    inputs = [truth[k] for k in ordered if k.startswith("serving_default_args")]
    return inputs, [truth[k] for k in ordered if "output" in k]


def _as_torch(y: np.ndarray) -> np.ndarray:
    """Canonical Y [S, D, N, H] -> torch's [S, N, D*H]."""
    s, d, n, h = y.shape
    return y.transpose(0, 2, 1, 3).reshape(s, n, d * h)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_every_litert_torch_module_is_lifted_whole_and_gives_torch_s_outputs(name, tmp_path):
    import onnxruntime as ort

    from gatepack.converters.executor import run_layer

    model = gp.load(LITERT / f"{name}.tflite")
    (layer,) = model.layers
    (finding,) = model.notes[layer.name]
    cell, words = TORCH[name]
    assert layer.cell.name == cell and words in finding.detail and not model.other_ops, finding.detail
    assert layer.direction.count == (2 if "bidirectional" in name else 1)
    inputs, expected = _torch_feed_and_truth(name)
    y, *states = run_layer(layer, inputs[0], None, *inputs[1:])
    for a, e in zip([_as_torch(y), *states], expected, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)
    assert gp.convert(LITERT / f"{name}.tflite", tmp_path / "m.onnx").verification.passed
    itf = layer.interface
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    names = [n for n in (itf.y, itf.y_h, itf.y_c) if n]
    y, *states = session.run(names, dict(zip([n for n in (itf.x, itf.initial_h, itf.initial_c) if n], inputs)))
    for a, e in zip([_as_torch(y), *states], expected, strict=True):
        np.testing.assert_allclose(a, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("name", ["litert_torch_lstm_nobias_h0", "litert_torch_rnn_relu_bidirectional"])
def test_a_lifted_torch_module_converts_to_every_target_verified(name, target, tmp_path):
    result = gp.convert(LITERT / f"{name}.tflite", tmp_path / f"out.{TARGETS[target]}", to=target)
    assert result.verification.passed and result.verification.outputs


def test_keras_s_unrolled_layer_is_refused_naming_what_its_interface_is():
    """Keras's unroll=True writes the steps batch-major with a TRANSPOSE around them: not a torch module's
    interface, so it is refused (exit 3) rather than guessed."""
    with pytest.raises(InputError) as err:
        gp.load(LITERT / "litert_keras3_lstm_unroll.tflite")
    assert "no sequence op or WHILE loop" in err.value.one_line()
    assert "is not a recurrent module's" in err.value.one_line() and err.value.exit_code == 3


def test_a_loop_whose_step_is_no_cell_is_refused_after_every_reading_fails(tmp_path):
    """The proof, not the pattern, decides: the Keras 3 LSTM's cell-output TANH made a LOGISTIC still looks like an
    LSTM body (sigmoid and tanh both there) but no reading of its constants reproduces it."""
    import flatbuffers

    from gatepack.converters.formats.litert.common import FILE_IDENTIFIER, schema

    s = schema()
    model = s.ModelT.InitFromPackedBuf((LITERT / "litert_keras3_lstm.tflite").read_bytes(), 0)
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    body = model.subgraphs[2]
    tanh = [op for op in body.operators if codes[op.opcodeIndex] == s.BuiltinOperator.TANH]
    tanh[-1].opcodeIndex = codes.index(s.BuiltinOperator.LOGISTIC)  # h = o * sigmoid(c) instead of o * tanh(c)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    (tmp_path / "m.tflite").write_bytes(bytes(builder.Output()))
    with pytest.raises(InputError) as err:
        gp.load(tmp_path / "m.tflite")
    assert "WHILE 'functional_1/lstm_1/while'" in err.value.one_line() and "reproduces it" in err.value.one_line()

"""LiteRT's hybrid (dynamic-range) int8 recurrent layers: read with their integers, kept by LiteRT, dequantized
elsewhere only when asked, and written by ``--quantize-weights int8 --to litert`` (docs/conventions.md §10, §11;
converters/formats/litert/quantized.py).

The oracles are independent of gatepack's code: the flatbuffer's bytes parsed with the ``tflite`` package; LiteRT's
interpreter running the producer's file (TensorFlow's converter, its outputs stored in the fixtures' truth beside
Keras's); a NumPy transcription of the hybrid kernels written here from LiteRT's sources (kernel_utils.cc
``RnnBatchStep``, portable_tensor_utils.cc ``AsymmetricQuantizeFloats``); onnxruntime for the float source.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import Config, artifact_name, build_model

import gatepack as gp
from gatepack.cli import main
from gatepack.converters.executor import run_layer

pytest.importorskip("ai_edge_litert")
tflite = pytest.importorskip("tflite")

LITERT = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "litert"
INT8 = 9  # tflite.TensorType.INT8
# every dynamic-range file TensorFlow's converter wrote: fused hybrid LSTMs (Keras 2) and WHILE loops whose
# FULLY_CONNECTEDs are hybrid (Keras 3, and Keras 2's GRU)
HYBRID = sorted(p.stem for p in LITERT.glob("*_int8.tflite"))


def _tensors(path: Path) -> list:
    graph = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    return [graph.Subgraphs(0).Tensors(k) for k in range(graph.Subgraphs(0).TensorsLength())]


def _int8_weight_bytes(path: Path) -> dict[str, int]:
    """Per INT8 2-D tensor of the main subgraph: its integers' bytes plus 4 per scale."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    found = {}
    for t in _tensors(path):
        if t.Type() == INT8 and t.ShapeLength() == 2:
            found[t.Name().decode()] = model.Buffers(t.Buffer()).DataLength() + 4 * t.Quantization().ScaleLength()
    return found


def test_a_fused_hybrid_lstm_is_read_with_the_file_s_integers_and_scales_per_gate():
    """tf_keras's fused LSTM: each gate's INT8 [H, I] tensor (op inputs 1-8, gates i, f, c, o) is the canonical
    record's rows of that gate (ONNX order i, o, f, c), bit for bit, with the tensor's one scale on each row."""
    path = LITERT / "litert_keras2_lstm_int8.tflite"
    (layer,) = gp.load(path).layers
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    graph = model.Subgraphs(0)
    op = graph.Operators(0)
    h = layer.hidden_size
    blocks = {"i": 0, "o": 1, "f": 2, "c": 3}
    for role, first in (("W", 1), ("R", 5)):
        record = layer.directions[0].quantized(role)
        assert record is not None and record.dynamic_activations == "litert int8 asymmetric"
        for k, gate in enumerate("ifco"):
            tensor = graph.Tensors(op.Inputs(first + k))
            data = model.Buffers(tensor.Buffer()).DataAsNumpy().view(np.int8).reshape(h, -1)
            rows = slice(blocks[gate] * h, (blocks[gate] + 1) * h)
            np.testing.assert_array_equal(record.values[rows], data)
            assert (record.broadcast(record.scale)[rows] == tensor.Quantization().ScaleAsNumpy()[0]).all()
    assert "asymmetric (LiteRT's hybrid kernels)" in layer.quantization_summary()


def test_gatepack_s_executor_computes_the_hybrid_kernels_as_the_interpreter_did():
    """The layer read, on gatepack's executor (LiteRT's hybrid products: converters/hybrid.py), against the
    interpreter's outputs the producer's script stored (``litert:``): the same arithmetic, float32's rounding
    apart; its float view (records dropped) is only within the quantization noise of it, as of Keras's layer."""
    from gatepack.converters.quantization import floats_only

    path = LITERT / "litert_keras2_lstm_int8.tflite"
    (layer,) = gp.load(path).layers
    truth = dict(np.load(path.with_suffix(".truth.npz")))
    x = truth["serving_default_x:0"]
    interpreter, keras = truth["litert:StatefulPartitionedCall:0"], truth["StatefulPartitionedCall:0"]
    hybrid = run_layer(layer, x)[0][:, :, 0]
    floats = run_layer(floats_only(layer), x)[0][:, :, 0]
    assert np.abs(hybrid - interpreter).max() < 1e-6
    assert 1e-4 < np.abs(floats - interpreter).max() < 2e-2 and np.abs(floats - keras).max() < 2e-2


@pytest.mark.parametrize("name", HYBRID)
def test_every_hybrid_producer_file_written_back_to_litert_keeps_its_integers_and_its_outputs(name, tmp_path):
    """Read, written by gatepack (the sequence op's hybrid kernel where it takes the scales, else hybrid
    FULLY_CONNECTEDs) and run on the interpreter against the producer's file: the same arithmetic, so float32's
    rounding apart (measured 0 to 9e-8), and the weights INT8 in the artifact."""
    out = tmp_path / "out.tflite"
    result = gp.convert(LITERT / f"{name}.tflite", out, to="litert", layers_only=True, allow_lossy=True)
    assert result.verification.passed
    assert max(o.max_abs_error for o in result.verification.outputs) < 1e-6
    assert any(
        f.feature == "quantization" and f.status.value == "repacked" for fs in result.findings.values() for f in fs
    )
    assert _int8_weight_bytes(out)
    assert all(layer.is_quantized for layer in gp.load(out).layers)


def _cli(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_a_hybrid_source_goes_to_onnx_only_with_dequantize_through_the_accuracy_gate(tmp_path):
    """No ONNX operator computes LiteRT's per-row int8 activations: refused (exit 4) naming --dequantize; with it,
    float weights exact against the dequantized source and the distance to the hybrid source bounded by its own
    quantization noise."""
    source = LITERT / "litert_keras2_lstm_int8.tflite"
    refused = _cli("convert", source, tmp_path / "a.onnx", "--allow-lossy")
    assert (
        refused.exit_code == 4 and "--dequantize" in refused.output and "no operator that computes it" in refused.output
    )
    done = _cli("convert", source, tmp_path / "a.onnx", "--allow-lossy", "--dequantize", "--json")
    assert done.exit_code == 0, done.output
    outputs = json.loads(done.output)["verification"]["outputs"]
    twin = [o for o in outputs if o["output"].endswith("vs the dequantized source")]
    measured = [o for o in outputs if o["output"].endswith("vs the quantized source")]
    assert twin and measured and all(o["max_abs_error"] < 1e-5 for o in twin)
    assert all(1e-4 < o["max_abs_error"] <= o["atol"] for o in measured)


def test_an_onnxruntime_dynamic_lstm_is_not_held_by_litert(tmp_path):
    """DynamicQuantizeLSTM quantizes X and h per tensor to uint8, LiteRT's kernels per row to int8: another
    arithmetic, so LiteRT writes its weights as floats, only with --dequantize."""
    source = LITERT.parent / "ort_quantized" / "ort_lstm_qint8.onnx"
    refused = _cli("convert", source, tmp_path / "a.tflite", "--allow-lossy", "--layers-only")
    assert refused.exit_code == 4 and "--dequantize" in refused.output, refused.output
    assert "litert has no kernel that computes it" in refused.output


CASES = {  # quantized as asked: the sequence ops' hybrid kernels (one scale per gate), or hybrid FULLY_CONNECTEDs
    "lstm": (Config(cell="LSTM", I=32, H=32, seed=3), "UNIDIRECTIONAL_SEQUENCE_LSTM"),
    "rnn": (Config(cell="RNN", direction="bidirectional", I=32, H=32, seed=4), "UNIDIRECTIONAL_SEQUENCE_RNN"),
    "gru": (Config(cell="GRU", lbr=1, I=32, H=32, seed=5), "FULLY_CONNECTED"),
}


def _op_names(path: Path) -> list[str]:
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    codes = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    graph = model.Subgraphs(0)
    return [
        codes[max(model.OperatorCodes(graph.Operators(k).OpcodeIndex()).BuiltinCode(), 0)]
        for k in range(graph.OperatorsLength())
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_quantize_weights_int8_writes_litert_s_hybrid_kernels_judged_by_the_accuracy_gate(case, tmp_path):
    """``--quantize-weights int8 --to litert``: W and R stored INT8 (>= 3.5x smaller than the float file's same
    tensors), fed to the hybrid kernels (asymmetric inputs), stateless (two invokes, inputs set once, agree), and
    the artifact within the run-time quantization's tolerance of the int8 twin and within the gate of the float
    source."""
    cfg, op = CASES[case]
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "f.tflite", batch_size=cfg.N)
    result = gp.convert(tmp_path / "m.onnx", tmp_path / "q.tflite", batch_size=cfg.N, quantize_weights="int8")
    assert result.verification.passed, result.verification.outputs
    assert any("vs the float source" in o.output for o in result.verification.outputs)
    quantized, floats = _int8_weight_bytes(tmp_path / "q.tflite"), _tensor_bytes(tmp_path / "f.tflite")
    assert quantized and sum(floats[n] for n in quantized) >= 3.5 * sum(quantized.values())
    assert op in _op_names(tmp_path / "q.tflite")
    (layer,) = gp.load(tmp_path / "q.tflite").layers
    assert layer.directions[0].Wq is not None and "asymmetric" in layer.quantization_summary()
    _assert_stateless(tmp_path / "q.tflite", cfg)


def test_the_int8_finding_says_the_scales_the_file_stores(tmp_path):
    """A GRU quantized for LiteRT: the file (read by ai-edge-litert's interpreter) stores a float32 scale per row of
    each INT8 tensor, a gate block's H rows repeating one value (3 distinct in a tensor of the 3 gates, 1 in one of a
    single gate); the finding says so, and not 'one scale per gate matrix'."""
    from ai_edge_litert.interpreter import Interpreter

    cfg, _ = CASES["gru"]
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    result = gp.convert(tmp_path / "m.onnx", tmp_path / "q.tflite", batch_size=cfg.N, quantize_weights="int8")
    (found,) = [f for fs in result.findings.values() for f in fs if f.detail.startswith("W and R quantized as asked")]
    assert "int8 per gate block, symmetric" in found.detail and "per gate matrix" not in found.detail
    assert "a float32 scale per row, the H rows of a gate block repeating its one value: 3 distinct values" in (
        found.detail
    )
    stored = [
        (d["shape"], d["quantization_parameters"]["scales"])
        for d in Interpreter(model_path=str(tmp_path / "q.tflite")).get_tensor_details()
        if d["dtype"] == np.int8 and len(d["shape"]) == 2
    ]
    assert stored
    for shape, scales in stored:
        assert len(scales) == shape[0]  # one per row
        blocks = scales.reshape(-1, cfg.H)
        assert (blocks == blocks[:, :1]).all() and len(set(scales)) == shape[0] // cfg.H  # one value a gate block
    assert any(shape[0] == 3 * cfg.H for shape, _ in stored)


def _tensor_bytes(path: Path) -> dict[str, int]:
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    return {t.Name().decode(): model.Buffers(t.Buffer()).DataLength() for t in _tensors(path)}


def _assert_stateless(path: Path, cfg: Config) -> None:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], rng.uniform(-1, 1, d["shape"]).astype(np.float32))
    calls = []
    for _ in range(2):
        interpreter.invoke()
        calls.append([interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()])
    for first, second in zip(*calls):
        np.testing.assert_array_equal(first, second)


def _quantized_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LiteRT's AsymmetricQuantizeFloats per row of ``x`` [N, K]: int8 values, scale, zero point (the range
    widened to 0, the zero point from the nearer end, rounding half away from zero)."""
    values, scales, zeros = [], [], []
    for row in x.astype(np.float32):
        low32, high32 = min(np.float32(0), row.min()), max(np.float32(0), row.max())
        low, high = float(low32), float(high32)
        if low == high:
            values.append(np.zeros_like(row, np.int32))
            scales.append(np.float32(1))
            zeros.append(0)
            continue
        scale = float(np.float32(high32 - low32)) / 255.0  # float ends subtracted in float, divided in double
        from_min, from_max = -128 - low / scale, 127 - high / scale
        zero = from_min if abs(-128) + abs(low / scale) < abs(127) + abs(high / scale) else from_max
        zero = int(-128 if zero <= -128 else 127 if zero >= 127 else np.sign(zero) * np.floor(abs(zero) + 0.5))
        inverse = np.float32(1.0 / float(np.float32(scale)))
        scaled = np.float32(zero) + row * inverse
        values.append(np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -128, 127).astype(np.int32))
        scales.append(np.float32(scale))
        zeros.append(zero)
    return np.stack(values), np.array(scales, np.float32), np.array(zeros, np.int32)


def _hybrid_product(x: np.ndarray, q: np.ndarray, scale: np.float32) -> np.ndarray:
    """``x q^T`` as the hybrid kernel computes it: x quantized per row, int32 products minus the zero point times
    the row sums, each rescaled by (x's scale * the weight's scale) in float32; a zero x skipped."""
    if not x.any():
        return np.zeros((x.shape[0], q.shape[0]), np.float32)
    values, scales, zeros = _quantized_rows(x)
    dots = values @ q.astype(np.int32).T - zeros[:, None] * q.astype(np.int32).sum(axis=1)[None]
    return dots.astype(np.float32) * (scales * np.float32(scale))[:, None]


def test_the_written_hybrid_rnn_computes_the_documented_arithmetic(tmp_path):
    """gatepack's int8 UNIDIRECTIONAL_SEQUENCE_RNN on the interpreter against a NumPy transcription of LiteRT's
    RnnBatchStep: h_t = tanh((bias + x_t*W) + h_{t-1}*R), each product hybrid (``_hybrid_product``)."""
    cfg = Config(cell="RNN", I=32, H=32, S=6, N=3, seed=7)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "q.tflite", batch_size=cfg.N, quantize_weights="int8")
    (layer,) = gp.load(tmp_path / "q.tflite").layers
    p = layer.directions[0]
    w_scale, r_scale = np.float32(p.Wq.scale), np.float32(p.Rq.scale)
    x = np.random.default_rng(1).uniform(-1, 1, (cfg.S, cfg.N, cfg.I)).astype(np.float32)
    h = np.zeros((cfg.N, cfg.H), np.float32)
    expected = []
    for t in range(cfg.S):
        pre = (p.Wb + p.Rb).astype(np.float32)[None] + _hybrid_product(x[t], p.Wq.values, w_scale)
        h = np.tanh(pre + _hybrid_product(h, p.Rq.values, r_scale))
        expected.append(h)
    actual = gp.run(tmp_path / "q.tflite", {layer.interface.x: x})[layer.interface.y][:, 0]
    np.testing.assert_allclose(actual, np.stack(expected), atol=2e-6, rtol=0)


def test_a_row_whose_range_rounds_in_float32_is_quantized_as_the_interpreter_does(tmp_path):
    """A row of X spanning [-1.0, 0.99999994]: LiteRT subtracts the range's float ends in float32 (2.0, so -1.0 is
    -127.49999 steps: q = -127), where a float64 range (1.99999994: -127.50001, q = -128) moves the product by a
    quantization step (silero VAD v4's 66th call, 1.7e-3 in its second LSTM's c). The written int8 RNN on the
    interpreter against gatepack's executor of the same file's records, the twin of every int8 LiteRT artifact."""
    cfg = Config(cell="RNN", I=32, H=32, S=4, N=2, seed=11)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "q.tflite", batch_size=cfg.N, quantize_weights="int8")
    (layer,) = gp.load(tmp_path / "q.tflite").layers
    x = np.random.default_rng(2).uniform(-0.9, 0.9, (cfg.S, cfg.N, cfg.I)).astype(np.float32)
    x[..., 0], x[..., 1] = np.float32(-1.0), np.float32(0.99999994)
    x[..., 2:5] = np.float32(-1.0)
    values, _, zeros = _quantized_rows(x.reshape(-1, cfg.I))
    assert (values[:, 0] == -127).all() and (zeros == 0).all()  # (the transcription's float32 range)
    actual = gp.run(tmp_path / "q.tflite", {layer.interface.x: x})[layer.interface.y]
    np.testing.assert_allclose(run_layer(layer, x)[0], actual, atol=2e-6, rtol=0)


def test_a_stateful_int8_file_streams_within_the_gate_over_100_frames(tmp_path):
    """``--stateful --quantize-weights int8``: the hybrid LSTM holds its states across invokes; over 100 calls its
    outputs are the executor's hybrid chain (the int8 twin, each side feeding its own states back) at float
    tolerance, and within the quantization's own error of onnxruntime's float chain."""
    from test_litert_stateful import static_model

    cfg = Config(cell="LSTM", initial_h=True, initial_c=True, S=2, N=1, I=8, H=8, seed=61)
    onnx.save(static_model(cfg), tmp_path / "m.onnx")
    result = gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", stateful=True, frames=100, quantize_weights="int8")
    verification = result.verification
    assert verification.passed and verification.streaming.frames == 100
    twin = [o for o in verification.outputs if o.output.endswith("vs the int8 twin")]
    measured = [o for o in verification.outputs if o.output.endswith("vs the float source")]
    assert twin and all(o.max_abs_error < 1e-6 for o in twin)
    assert measured and all(0 < o.max_abs_error <= o.atol for o in measured)


# ------------------------------------------------------------------------- weight-only int8 (ai-edge-quantizer)

# Keras 3 loops through ai-edge-quantizer's weight_only_wi8_afp32: INT8 weights with a DEQUANTIZE in front (float
# activations), fixtures/producers/make_producers.py litert_aeq_weight_only
WEIGHT_ONLY = sorted(p.stem for p in LITERT.glob("*_aeq_wo8.tflite"))


def _body_int8_rows(path: Path) -> set[tuple[bytes, float]]:
    """Every row of every INT8 2-D tensor of the file's subgraphs, with its scale (parsed with ``tflite``)."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    rows = set()
    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        for k in range(graph.TensorsLength()):
            t = graph.Tensors(k)
            if t.Type() != INT8 or t.ShapeLength() != 2:
                continue
            values = model.Buffers(t.Buffer()).DataAsNumpy().view(np.int8).reshape(t.ShapeAsNumpy())
            scale = t.Quantization().ScaleAsNumpy()
            assert not t.Quantization().ZeroPointAsNumpy().any()
            rows |= {(row.tobytes(), float(scale[j if scale.size > 1 else 0])) for j, row in enumerate(values)}
    return rows


@pytest.mark.parametrize("name", WEIGHT_ONLY)
def test_a_weight_only_int8_loop_is_read_with_the_file_s_integers(name):
    """Each row of W and R: integers and scale of a row of the file's INT8 weights (symmetric, per row), float
    activations (no run-time arithmetic named)."""
    assert len(WEIGHT_ONLY) == 2
    (layer,) = gp.load(LITERT / f"{name}.tflite").layers
    assert layer.is_quantized and "int8 per channel, symmetric" in layer.quantization_summary()
    stored = _body_int8_rows(LITERT / f"{name}.tflite")
    for params in layer.directions:
        for role in ("W", "R"):
            record = params.quantized(role)
            assert record is not None and record.dynamic_activations == ""
            scales = record.broadcast(record.scale)[:, 0]
            assert {(row.tobytes(), float(s)) for row, s in zip(record.values, scales)} <= stored


@pytest.mark.parametrize("name", WEIGHT_ONLY)
def test_a_weight_only_int8_loop_converts_to_every_target(name, tmp_path):
    """ONNX, OpenVINO and Core ML keep the integers (``repacked``), the ONNX file on onnxruntime within float
    rounding of the interpreter's outputs on the producer's file (the truth); LiteRT (whose kernels would quantize X
    and h), DirectML and BNNS only with --dequantize."""
    import onnxruntime as ort

    source = LITERT / f"{name}.tflite"
    truth = dict(np.load(source.with_suffix(".truth.npz")))
    for target in ("onnx", "openvino", "coreml"):
        result = gp.convert(source, tmp_path / artifact_name(target, f"out_{target}"), to=target, layers_only=True)
        assert result.passed, result.to_text()
        (found,) = [f for fs in result.findings.values() for f in fs if f.feature == "quantization"]
        assert found.status.value == "repacked"
    written = tmp_path / artifact_name("onnx", "out_onnx")
    (layer,) = gp.load(written).layers
    session = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"])
    feed = {layer.interface.x: truth["serving_default_x:0"].transpose(1, 0, 2)}  # the loop's X is time-major
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    for role in ("y_h", "y_c"):
        name_ = getattr(layer.interface, role)
        if name_:
            np.testing.assert_allclose(got[name_][0], truth[f"litert:{name_}"], atol=1e-6)
    assert any(np.abs(truth[f"litert:{k}"] - truth[k]).max() > 1e-4 for k in truth if f"litert:{k}" in truth)
    for target in ("litert", "directml", "bnns"):
        with pytest.raises(gp.RefusedError, match="--dequantize"):
            gp.convert(source, tmp_path / artifact_name(target, f"refused_{target}"), to=target, layers_only=True)
        result = gp.convert(
            source, tmp_path / artifact_name(target, f"out_{target}"), to=target, layers_only=True, dequantize=True
        )
        assert result.passed, result.to_text()

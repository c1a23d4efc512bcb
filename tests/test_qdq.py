"""Quantized recurrent weights as ONNX QDQ (``DequantizeLinear`` feeding a GRU/RNN/LSTM's W and R), held exactly
as ``schemas.quantized`` records (docs/conventions.md §9b).

Oracles: the fixtures' stored integers, scales and zero points (read with onnx's numpy_helper, not gatepack),
onnxruntime's outputs committed with them (fixtures/producers/ort_qdq: ``quantize_static`` QDQ, and one
per-channel model built by hand), and onnxruntime running every artifact written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import artifact_name
from onnx import numpy_helper

import gatepack.converters as gp
from gatepack.converters import registry
from gatepack.converters.inspection import describe_json, describe_text
from gatepack.schemas.quantized import QuantizationError, QuantizedWeights

QDQ = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "ort_qdq"
MANIFEST = json.loads((QDQ / "manifest.json").read_text())
ARTIFACTS = sorted(MANIFEST)


def _stored(artifact: str) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    proto = onnx.load(str(QDQ / artifact))
    return proto.graph, {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _dequantizers(graph: onnx.GraphProto, role: str) -> list[onnx.NodeProto]:
    """The DequantizeLinear nodes computing the recurrent node's ``role`` input, one per direction or one."""
    (node,) = [n for n in graph.node if n.op_type in ("GRU", "RNN", "LSTM")]
    name = node.input[{"W": 1, "R": 2}[role]]
    producers = {o: n for n in graph.node for o in n.output}
    producer = producers[name]
    return [producers[i] for i in producer.input] if producer.op_type == "Concat" else [producer]


def _run(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})))


def test_the_manifest_lists_every_fixture_with_its_truth():
    assert {p.name for p in QDQ.glob("*.onnx")} == set(MANIFEST)
    for artifact in ARTIFACTS:
        graph, _ = _stored(artifact)
        assert _dequantizers(graph, "W") and all(n.op_type == "DequantizeLinear" for n in _dequantizers(graph, "W"))
        assert "X" in np.load(QDQ / artifact.replace(".onnx", ".truth.npz"))


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_the_records_hold_the_stored_integers_and_the_float_view_is_their_dequantization(artifact):
    """Per direction, W and R as integers [G*H, K] with the stored scale and zero point (scalar per tensor, one
    per row on axis 1), never replaced by floats; W = (q - zero_point) * scale exactly, transcribed here."""
    graph, inits = _stored(artifact)
    (layer,) = gp.load(QDQ / artifact).layers
    assert layer.is_quantized
    for role in ("W", "R"):
        nodes = _dequantizers(graph, role)
        for d, params in enumerate(layer.directions):
            node = nodes[d] if len(nodes) > 1 else nodes[0]
            q, scale, zero = (inits[name] for name in node.input)
            q = q[0] if len(nodes) > 1 else q[d]
            record = params.quantized(role)
            assert record is not None and record.values.dtype == q.dtype and record.bits == 8
            np.testing.assert_array_equal(record.values, q)
            if scale.ndim == 0:
                assert record.granularity == "per tensor" and record.scale == scale and record.zero_point == zero
                expected = (q.astype(np.float64) - float(zero)) * float(scale)
            else:
                assert record.granularity == "per channel"
                np.testing.assert_array_equal(record.scale, scale)
                expected = (q.astype(np.float64) - zero[:, None].astype(np.float64)) * scale[:, None].astype(np.float64)
            np.testing.assert_array_equal(getattr(params, role), expected.astype(np.float32))


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_onnx_writes_the_integers_back_as_qdq_and_gives_the_sources_outputs(artifact, tmp_path):
    """ONNX -> ONNX: the same integers behind DequantizeLinear, ``repacked``; onnxruntime runs the artifact to
    the committed truth (the source's own outputs), within float rounding."""
    out = tmp_path / "out.onnx"
    result = gp.convert(QDQ / artifact, out)
    assert result.passed, result.to_text()
    statuses = {f.feature: f.status.value for fs in result.findings.values() for f in fs}
    assert statuses["quantization"] == "repacked"
    assert max(o.max_abs_error for o in result.verification.outputs) < 1e-6
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    graph, inits = _stored(artifact)
    got = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    for role in ("W", "R"):
        stored = np.concatenate([inits[n.input[0]] for n in _dequantizers(graph, role)])  # [D, G*H, K]
        kept = np.concatenate([got[n.input[0]] for n in _dequantizers(written.graph, role)])
        assert kept.dtype == stored.dtype
        np.testing.assert_array_equal(kept, stored)
    truth = dict(np.load(QDQ / artifact.replace(".onnx", ".truth.npz")))
    for name, value in _run(out, truth).items():
        np.testing.assert_allclose(value, truth[name], atol=1e-6, rtol=0)


# ONNX, OpenVINO and Core ML (constexpr ops: tests/test_coreml_quantized.py) keep these integers; LiteRT's hybrid
# kernels would quantize X and h at run time, which the QDQ source does not
@pytest.mark.parametrize("target", [t for t in registry.writers() if t not in ("onnx", "openvino", "coreml")])
def test_other_targets_take_float_weights_only_when_asked(target, tmp_path):
    """A target without quantized weights refuses them, even with --allow-lossy, naming --dequantize; with it the
    float layer is written, ``repacked`` (the QDQ source computes in float on the dequantized weights: the same
    numbers, stored in float), and verified against onnxruntime running the QDQ source, exact against it."""
    artifact = QDQ / "qdq_gru_int8_per_channel.onnx"
    out = tmp_path / artifact_name(target, "out")
    with pytest.raises(gp.RefusedError, match="quantization: W int8 per channel") as err:
        gp.convert(artifact, out, to=target, allow_lossy=True)
    assert "--dequantize" in (err.value.hint or "") and not out.exists()
    result = gp.convert(artifact, out, to=target, dequantize=True)
    assert result.passed, result.to_text()
    found = {f.feature: f for fs in result.findings.values() for f in fs}
    assert found["quantization"].status.value == "repacked" and "--dequantize" in found["quantization"].detail
    assert "exactly the numbers the source computes on" in found["quantization"].detail
    measured = [o for o in result.verification.outputs if o.output.endswith("vs the quantized source")]
    assert measured and max(o.max_abs_error for o in measured) < 1e-5  # the source's arithmetic is the floats'


def test_openvino_keeps_the_integers_as_compressed_constants(tmp_path):
    """OpenVINO holds QDQ's per-channel int8 as NNCF's compressed form (i8 Constants in the IR), read back exactly and
    verified against onnxruntime running the QDQ source; with dequantize=True it writes float weights instead."""
    artifact = QDQ / "qdq_gru_int8_per_channel.onnx"
    result = gp.convert(artifact, tmp_path / "out.xml")
    assert result.passed, result.to_text()
    found = {f.feature: f for fs in result.findings.values() for f in fs}
    assert found["quantization"].status.value == "repacked"
    assert 'element_type="i8"' in (tmp_path / "out.xml").read_text()
    source, written = gp.load(artifact).layers[0], gp.load(tmp_path / "out.xml").layers[0]
    for a, b in zip(source.directions, written.directions):
        np.testing.assert_array_equal(a.Wq.values, b.Wq.values)
        np.testing.assert_array_equal(a.Rq.scale, b.Rq.scale)
    assert gp.convert(artifact, tmp_path / "floats.xml", dequantize=True).passed
    assert 'element_type="i8"' not in (tmp_path / "floats.xml").read_text()


@pytest.mark.parametrize("artifact", ["qdq_gru_qint8.onnx", "qdq_lstm_bidirectional_quint8.onnx"])
def test_openvino_refuses_a_whole_quantized_model_whose_sequence_op_it_cannot_compile(artifact, tmp_path):
    """A whole QDQ model (QuantizeLinear on X and Y: FakeQuantize ops, OpenVINO CPU's low-precision transformations)
    with a GRU or LSTM whose integers would be compressed constants: the CPU plugin takes those ops' W and R only as
    Constants, so the IR would not compile (exit 6 before); refused (exit 4) with the ways out, each of which
    converts: --dequantize (float W and R, error 0 against the dequantized source), --layers-only. An RNN's
    sequence op takes them (qdq_rnn_qint8 goes whole: test_openvino_keeps_...)."""
    path, out = QDQ / artifact, tmp_path / "whole.xml"
    with pytest.raises(gp.RefusedError, match="low-precision transformations") as refused:
        gp.convert(path, out, to="openvino")
    assert "--dequantize" in (refused.value.hint or "") and not out.exists()
    result = gp.convert(path, out, to="openvino", dequantize=True)
    assert result.passed and result.whole and result.verification.passed, result.to_text()
    truth = np.load(QDQ / artifact.replace(".onnx", ".truth.npz"))
    got = gp.run(out, {"X": truth["X"]})
    for name, value in got.items():  # onnxruntime's outputs of the QDQ source, Y quantized as it is
        np.testing.assert_allclose(value, truth[name], atol=1e-6)
    assert gp.convert(path, tmp_path / "layers.xml", to="openvino", layers_only=True).passed
    assert gp.convert(QDQ / "qdq_rnn_qint8.onnx", tmp_path / "rnn.xml", to="openvino").whole


def test_onnx_at_opset_7_cannot_hold_them(tmp_path):
    """Per-axis DequantizeLinear needs opset 13: at --opset 7 the weights are floats, only with --dequantize."""
    artifact = QDQ / "qdq_gru_int8_per_channel.onnx"
    with pytest.raises(gp.RefusedError, match="opset 7"):
        gp.convert(artifact, tmp_path / "o.onnx", opset=7)
    assert gp.convert(artifact, tmp_path / "o.onnx", opset=7, dequantize=True).passed
    assert not [n for n in onnx.load(str(tmp_path / "o.onnx")).graph.node if n.op_type == "DequantizeLinear"]


def test_the_report_and_inspect_say_a_layer_is_quantized():
    path = QDQ / "qdq_lstm_bidirectional_quint8.onnx"
    model = gp.load(path)
    shown = describe_text(model)
    assert "quantized weights" in shown and "quantized: W uint8 per tensor, zero point" in shown
    assert describe_json(model)["layers"][0]["quantization"]["W"] == {
        "bits": 8,
        "signed": False,
        "granularity": "per tensor",
        "block_size": None,
        "symmetric": False,
        "scale": "float32",
        "arithmetic": "float32",
        "dynamic_activations": "",
    }
    found = {
        t: {f.feature: f.status.value for f in r.findings}
        for t, r in gp.report(path, to=["onnx", "openvino"]).layers[0].targets.items()
    }
    assert found["onnx"]["quantization"] == "repacked" and found["openvino"]["quantization"] == "repacked"


def test_a_record_that_contradicts_itself_is_refused():
    values = np.zeros((4, 3), np.int8)
    with pytest.raises(QuantizationError, match="scale has shape"):
        QuantizedWeights(values, np.ones(3, np.float32), np.zeros(3, np.int8), axis=0)
    with pytest.raises(QuantizationError, match="beyond 4 bits"):
        QuantizedWeights(values + 9, np.array(1, np.float32), np.array(0, np.int8), bits=4)
    with pytest.raises(QuantizationError, match="signed=False"):
        QuantizedWeights(values, np.array(1, np.float32), np.array(0, np.int8), signed=False)


def test_save_refuses_float_weights_unless_asked(tmp_path):
    """``save`` (no verification) follows ``convert``: a target without quantized weights needs dequantize=True."""
    model = gp.load(QDQ / "qdq_gru_int8_per_channel.onnx")
    with pytest.raises(gp.RefusedError, match="quantization") as err:
        gp.save(model, tmp_path / "out_bnns", to="bnns")
    assert "--dequantize" in (err.value.hint or "") and not (tmp_path / "out_bnns").exists()
    gp.save(model, tmp_path / "out_bnns", to="bnns", dequantize=True)
    gp.save(model, tmp_path / "out.onnx")
    assert [n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node].count("DequantizeLinear") == 4

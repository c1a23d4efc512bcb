"""The accuracy gate of a quantized source written with float weights (``--dequantize``, converters/accuracy.py):
exact against the source's dequantized twin, measured against the quantized source and bounded by
``--max-error`` or the source's own quantization noise.

Oracles: onnxruntime running the quantized source (``DynamicQuantizeLSTM``) and an independently built float
twin (the node replaced by an ``LSTM`` with weights transcribed here from the stored integers).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import gatepack.converters as gp
from gatepack.converters.accuracy import Gate, verify_dequantized
from gatepack.converters.agreement import agreement
from gatepack.converters.formats import onnx as onnx_format
from gatepack.converters.model import Model
from gatepack.converters.samples import DYNAMIC_INT8, TOLERANCES
from gatepack.converters.verification import verify_models

SOURCE = (
    Path(__file__).resolve().parent.parent
    / "fixtures/producers/ort_quantized/ort_lstm_bidirectional_qint8_per_channel.onnx"
)


def _independent_twin(path: Path) -> onnx.ModelProto:
    """The source with its DynamicQuantizeLSTM replaced by an LSTM whose W and R are ``(q - zero) * scale``
    transposed to [D, 4H, K], transcribed here (per column: scale [D, 4H])."""
    proto = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    (k,) = [i for i, n in enumerate(proto.graph.node) if n.op_type == "DynamicQuantizeLSTM"]
    node = proto.graph.node[k]
    floats = []
    for q, s, z in ((1, 8, 9), (2, 10, 11)):
        quantized, scale, zero = (inits[node.input[j]] for j in (q, s, z))
        steps = quantized.astype(np.float64) - zero[:, None, :].astype(np.float64)
        floats.append((steps * scale[:, None, :]).astype(np.float32).transpose(0, 2, 1))
    names = [f"{node.input[1]}_float", f"{node.input[2]}_float"]
    proto.graph.initializer.extend(numpy_helper.from_array(np.ascontiguousarray(v), n) for v, n in zip(floats, names))
    lstm = helper.make_node("LSTM", [node.input[0], *names, *node.input[3:8]], list(node.output), name=node.name)
    lstm.attribute.extend(node.attribute)
    proto.graph.node.remove(node)
    proto.graph.node.insert(k, lstm)
    return proto


def test_the_noise_bound_is_the_distance_between_the_source_and_its_independent_twin(tmp_path):
    """Each 'vs the quantized source' bound is max |source - dequantized source| + 1e-5 + 1e-4 * max |twin| (float32's
    atol and rtol at the output's magnitude: what the exact part proves of |artifact - twin|), the twin built here."""
    result = gp.convert(SOURCE, tmp_path / "out.xml", dequantize=True)
    assert result.passed, result.to_text()
    twin = tmp_path / "twin.onnx"
    onnx.save(_independent_twin(SOURCE), str(twin))
    # the gate and this check draw the same inputs (seed 0)
    # the twin as the expected side: max_abs_error is max |source - twin|, largest_expected max |twin|
    noise = verify_models(gp.load(twin), gp.load(SOURCE), tolerance=None)
    own = {o.output: (o.max_abs_error, o.largest_expected) for o in noise.outputs}
    measured = {o.output.removesuffix(" vs the quantized source"): o for o in result.verification.outputs}
    for name, (error, largest) in own.items():
        assert 0.1 < largest < 10  # the LSTM's outputs and states
        assert measured[name].atol == pytest.approx(error + 1e-5 + 1e-4 * largest, rel=1e-6, abs=1e-7)
        assert measured[name].max_abs_error <= measured[name].atol


def test_max_error_bounds_the_measurement_and_a_failure_names_it(tmp_path):
    out = tmp_path / "out.xml"
    with pytest.raises(gp.VerificationError, match="vs the quantized source max abs error"):
        gp.convert(SOURCE, out, dequantize=True, max_error=1e-4)
    assert not out.exists()
    assert gp.convert(SOURCE, out, dequantize=True, max_error=0.05).passed
    with pytest.raises(gp.UsageError, match="--max-error bounds a quantized model"):
        gp.convert(SOURCE, tmp_path / "q.onnx", max_error=0.05)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gatepack",
            "convert",
            str(SOURCE),
            str(tmp_path / "o.xml"),
            "--dequantize",
            "--max-error",
            "0.00001",
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 5 and run.stderr.count("\n") == 1, run.stderr


def test_a_slightly_misread_artifact_passes_the_old_tolerance_and_fails_the_gate(tmp_path):
    """W scaled by 1.005 (a wrong scale): within the fixed dynamic-int8 tolerance of the quantized source, but not
    exact against the dequantized source, so the gate refuses it."""
    source = gp.load(SOURCE)
    (layer,) = source.layers
    wrong = tuple(replace(p, W=p.W * np.float32(1.005), Wq=None, Rq=None) for p in layer.directions)
    artifact = tmp_path / "wrong.onnx"
    onnx.save(
        onnx_format.build(Model(None, "onnx", [replace(layer, directions=wrong, provenance=None)])), str(artifact)
    )
    written = gp.load(artifact)
    old = verify_models(source, written)
    atol, _ = TOLERANCES[DYNAMIC_INT8]
    assert old.passed and all(o.atol == atol for o in old.outputs)
    gated = verify_dequantized(source, written, artifact, Gate())
    assert not gated.passed
    failed = [o.output for o in gated.outputs if not o.passed]
    assert any(name.endswith("vs the dequantized source") for name in failed), gated.to_text()


def test_agreement_counts_decisions_as_a_user_makes_them():
    """Probabilities: threshold 0.5; logits: 0; argmax over the last axis; mean absolute error."""
    expected = np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1]])
    found = agreement(np.array([[0.1, 0.4, 0.5], [0.6, 0.3, 0.1]]), expected)
    assert found is not None and found.threshold_at == 0.5
    assert (
        found.argmax == 0.5 and found.threshold == pytest.approx(5 / 6) and found.mean_abs_error == pytest.approx(0.1)
    )
    logits = agreement(np.array([[-1.0, 2.0]]), np.array([[1.0, 2.0]]))
    assert logits is not None and logits.threshold_at == 0.0 and logits.threshold == 0.5 and logits.argmax == 1.0
    assert agreement(np.zeros(3), np.zeros(4)) is None


def test_the_measurement_is_printed(tmp_path):
    result = gp.convert(SOURCE, tmp_path / "out.xml", dequantize=True)
    text = result.verification.to_text()
    assert "measured vs the quantized source: y max" in text and "argmax" in text and "mean" in text
    assert "the source's own quantization noise" in text


def _large_qdq_rnn(path: Path) -> None:
    """An RNN (ReLU) whose W and R are int8 through DequantizeLinear, with W's scale 100: outputs about 1e4 in size,
    where float32 rounding alone is 1e-3 (QDQ computes in float, so the source's own noise is 0)."""
    rng = np.random.default_rng(0)
    size, hidden = 4, 8
    inits, nodes = [], []
    for name, shape, scale in (("W", (1, hidden, size), 100.0), ("R", (1, hidden, hidden), 1e-4)):
        integers = rng.integers(-127, 128, shape).astype(np.int8)
        inits += [
            numpy_helper.from_array(integers, f"{name}_q"),
            numpy_helper.from_array(np.float32(scale), f"{name}_s"),
            numpy_helper.from_array(np.int8(0), f"{name}_z"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [name]))
    inits.append(numpy_helper.from_array(rng.standard_normal((1, 2 * hidden)).astype(np.float32) * 100, "B"))
    nodes.append(helper.make_node("RNN", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, activations=["Relu"]))
    graph = helper.make_graph(
        nodes,
        "large",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["S", "N", size])],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("Y", "Y_h")],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))


def test_the_default_bound_scales_with_the_outputs_magnitude(tmp_path):
    """Outputs of 1e4: OpenVINO's float32 arithmetic differs from onnxruntime's by 2.4e-4 there, within the exact
    part's atol + rtol * |twin|, and so within the gate's default bound (the source's noise, 0, + that allowance); a
    fixed floor of float32's atol (1e-5, the rule before) failed this correct artifact."""
    source = tmp_path / "large.onnx"
    _large_qdq_rnn(source)
    result = gp.convert(source, tmp_path / "large.xml", dequantize=True)
    assert result.passed, result.to_text()
    # independent magnitudes: the source's outputs on onnxruntime (QDQ computes the dequantized floats exactly)
    measured = [o for o in result.verification.outputs if o.output.endswith("vs the quantized source")]
    assert measured and all(o.max_abs_error > 1e-5 for o in measured)  # beyond the old fixed floor
    noise = verify_models(gp.load(source), gp.load(source), tolerance=None)  # the same runtime, the same inputs
    largest = {o.output: o.largest_expected for o in noise.outputs}
    for o in measured:
        magnitude = largest[o.output.removesuffix(" vs the quantized source")]
        assert magnitude > 1e3
        assert o.atol == pytest.approx(1e-5 + 1e-4 * magnitude, rel=1e-3)  # the twin equals the source here


def test_a_failed_verification_names_an_output_that_failed():
    """The refusal names the largest error among the outputs that failed, never a larger one that passed (silero v4
    to LiteRT int8 over 100 calls named 'streamed cn vs the float source 1.63', which passed, for cn 0.0042 off its
    int8 twin)."""
    from gatepack.converters.errors import VerificationError
    from gatepack.converters.refusals import refuse_unverified
    from gatepack.converters.verification import OutputComparison, Verification

    verification = Verification("s.onnx", "t.tflite", 0)
    verification.outputs = [
        OutputComparison("streamed", "cn vs the int8 twin", 0.0042, 0.0, 1e-4, 0.0, False),
        OutputComparison("streamed", "cn vs the float source", 1.63, 0.0, 1.71, 0.0, True),
    ]
    with pytest.raises(VerificationError, match=r"streamed cn vs the int8 twin max abs error 0.0042;"):
        refuse_unverified("t.tflite", verification)

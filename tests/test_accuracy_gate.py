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
    """Each 'vs the quantized source' bound is max |source - dequantized source| + 1e-5, the twin built here."""
    result = gp.convert(SOURCE, tmp_path / "out.xml", dequantize=True)
    assert result.passed, result.to_text()
    twin = tmp_path / "twin.onnx"
    onnx.save(_independent_twin(SOURCE), str(twin))
    # the gate and this check draw the same inputs (seed 0)
    noise = verify_models(gp.load(SOURCE), gp.load(twin), tolerance=None)
    own = {o.output: o.max_abs_error for o in noise.outputs}
    measured = {o.output.removesuffix(" vs the quantized source"): o for o in result.verification.outputs}
    for name, error in own.items():
        assert measured[name].atol == pytest.approx(error + 1e-5, rel=1e-6, abs=1e-7)
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

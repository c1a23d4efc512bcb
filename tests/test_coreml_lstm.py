"""LSTM to Core ML: every configuration of the LSTM matrix written as an ML Program (elementary MIL ops
in a while_loop per direction, carrying h and c), loaded back with coremltools and run from disk on
the MIL executor against onnxruntime (the float64 transcription for float64); MIL's own lstm op
refused where it is forced; round trips to ONNX; a real LSTM model's layers."""

from __future__ import annotations

import onnx
import pytest
import test_lstm as lstm
from helpers import REALMODELS, Config, build_model, inputs, lstm_matrix, to_layout
from test_coreml import ct_program

import gatepack as gp

MATRIX = lstm_matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix_against_onnxruntime(cfg: Config, tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "m.mlpackage"
    onnx.save(build_model(cfg), src)
    result = gp.convert(src, out, to="coreml", allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    (cell,) = [f for f in result.findings["rec"] if f.feature == "cell"]
    assert cell.status.value == "decomposed"
    assert "while_loop" in {op.op_type for op in ct_program(out).operations}  # loads back with coremltools
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")  # the saved package on the MIL executor
    (layer,) = gp.load(out).layers
    got = [outputs[getattr(layer.interface, role)] for role in ("y", "y_h", "y_c")]
    if cfg.layout:
        got = [got[0].transpose(1, 2, 0, 3), got[1].transpose(1, 0, 2), got[2].transpose(1, 0, 2)]
    lstm.assert_close(cfg, got, lstm.expected_outputs(cfg, feed0), *TOLERANCE[cfg.dtype], dtype=cfg.dtype)


def test_the_lstm_op_is_refused_when_forced(tmp_path):
    lstm.assert_refused_when_forced(Config(cell="LSTM"), tmp_path, "coreml", "m.mlpackage", "lstm op clips differently")


@pytest.mark.parametrize("cfg", lstm.PEEPHOLE_CASES[:6], ids=lambda c: c.label())
def test_round_trip_to_onnx_keeps_every_weight(cfg: Config, tmp_path):
    lstm.assert_round_trip_keeps_every_weight(cfg, tmp_path, "coreml", "m.mlpackage")


def test_real_lstm_model_layers_only(tmp_path):
    result = gp.convert(REALMODELS / "dtln_model_1_lstm.onnx", tmp_path / "m.mlpackage", layers_only=True)
    assert result.verification.passed and len(result.verification.outputs) == 6

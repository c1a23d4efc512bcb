"""float64 checked at float64 tolerance: onnxruntime has no float64 GRU, RNN or LSTM kernel, so float64
layers are compared with an independent float64 transcription of the ONNX operator (``oracle.py``),
which is itself first checked against onnxruntime on every configuration of the GRU/RNN matrix and on
float32 configurations of the LSTM matrix."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import Config, build_model, inputs, lstm_matrix, matrix, ort_reference, outputs_to_layout0, to_layout
from oracle import assert_close, reference

import gatepack as gp

MATRIX = matrix()
FLOAT64 = [c for c in MATRIX if c.dtype == "float64"]
FLOAT64_TOLERANCE = (1e-10, 1e-9)


@pytest.mark.matrix
def test_the_oracle_agrees_with_onnxruntime_on_the_whole_matrix():
    """The oracle computes what onnxruntime computes (float32 tolerance, in float64 arithmetic)."""
    for cfg in MATRIX:
        feed0 = inputs(cfg)
        for ours, ref in zip(reference(cfg, feed0), ort_reference(cfg, feed0)):
            finite = np.isfinite(ref)  # onnxruntime's naive Softplus may overflow where the oracle does not
            assert finite.mean() > 0.5
            np.testing.assert_allclose(ours[finite], ref[finite], atol=2e-5, rtol=2e-4, err_msg=cfg.label())


@pytest.mark.parametrize("cfg", [c for c in lstm_matrix() if c.dtype == "float32"][:40], ids=lambda c: c.label())
def test_the_transcription_agrees_with_onnxruntime_on_lstm(cfg: Config):
    # The oracle used for float64 LSTMs is itself checked against onnxruntime where both run.
    feed0 = inputs(cfg)
    assert_close(cfg, reference(cfg, feed0), ort_reference(cfg, feed0), 1e-5, 1e-4)


def test_float64_cases_exist():
    assert len(FLOAT64) >= 20 and {c.cell for c in FLOAT64} == {"GRU", "RNN"}


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", FLOAT64, ids=[c.label() for c in FLOAT64])
def test_float64_onnx_to_onnx_at_float64_tolerance(cfg, tmp_path):
    """The source and the converted ONNX file, each run by gatepack's executor from disk in float64,
    agree with the float64 oracle to 1e-10 (a float32 round trip anywhere would show as ~1e-7)."""
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(cfg), src)
    gp.convert(src, out, to="onnx")
    feed0 = inputs(cfg)
    expected = reference(cfg, feed0)
    for artifact in (src, out):
        names = gp.input_names(artifact)
        outputs = gp.run(artifact, {k: v for k, v in to_layout(cfg, feed0).items() if k in names}, engine="numpy")
        assert outputs["Y"].dtype == np.float64
        for ours, ref in zip(outputs_to_layout0(cfg, outputs["Y"], outputs["Y_h"]), expected):
            np.testing.assert_allclose(ours, ref, atol=FLOAT64_TOLERANCE[0], rtol=FLOAT64_TOLERANCE[1])

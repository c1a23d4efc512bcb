"""What a new user meets in the first hour (issue 32), each against an independent oracle where numbers are
involved: OpenVINO's fp16 IR (ovc's default) verified at fp16's tolerance on OpenVINO CPU against onnxruntime."""

import pytest
from click.testing import CliRunner
from helpers import REALMODELS

import gatepack as gp
from gatepack.cli import main

pytest.importorskip("openvino")


def test_fp16_openvino_ir_is_lossy_named_in_the_hint_and_verified_at_fp16_tolerance(tmp_path):
    src, out = REALMODELS / "burn_gru.onnx", tmp_path / "m.xml"
    refused = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--compress-to-fp16"])
    assert refused.exit_code == 4 and "--allow-lossy" in refused.output and not out.exists()
    result = gp.convert(src, out, compress_to_fp16=True, allow_lossy=True)
    assert result.verification.passed
    worst = max(result.verification.outputs, key=lambda o: o.max_abs_error)
    assert worst.max_abs_error > 1e-6 and worst.atol >= 1e-3  # fp16 weights: not within fp32's 1e-5
    assert any(f.status.value == "lossy" for fs in result.findings.values() for f in fs)
    read = gp.load(out)  # read back, the IR says its weights are fp16
    assert any("fp16" in f.detail for fs in read.notes.values() for f in fs)


def test_fp16_whole_model_ir_verifies(tmp_path):
    result = gp.convert(
        REALMODELS / "dtln_model_1_lstm.onnx", tmp_path / "m.xml", compress_to_fp16=True, allow_lossy=True
    )
    assert result.whole and result.verification.passed

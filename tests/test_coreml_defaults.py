"""Core ML's automatic choices (issue 32 item 3): ``auto`` never writes an op gatepack itself doubts for the
layer, and a package without ``--minimum-deployment-target`` gets the lowest target that expresses it, named
in the findings and in convert's text.

The oracles: the written package's own specification version, read from its protobuf with coremltools' message
classes (iOS15 = 6 ... iOS18 = 9, coremltools' ``_SPECIFICATION_VERSION_IOS_*``), the ops the package holds
(coremltools' MIL loader), and onnxruntime on the source through convert's verification."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from helpers import Config, static_model

import gatepack as gp
from gatepack.cli import main

ct = pytest.importorskip("coremltools")

SPECIFICATION_VERSIONS = {"iOS15": 6, "iOS16": 7, "iOS17": 8, "iOS18": 9}


def _package_target(package: Path) -> str:
    """The deployment target a package declares: its model specification's version, parsed here."""
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model.FromString((package / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes())
    return {v: k for k, v in SPECIFICATION_VERSIONS.items()}[spec.specificationVersion]


def _package_ops(package: Path) -> set[str]:
    from coremltools.converters.mil.frontend.milproto.load import load
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model.FromString((package / "Data" / "com.apple.CoreML" / "model.mlmodel").read_bytes())
    program = load(
        spec, spec.specificationVersion, file_weights_dir=str(package / "Data" / "com.apple.CoreML" / "weights")
    )
    return {op.op_type for op in program.functions["main"].operations}


def _source(tmp_path: Path, cfg: Config) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(static_model(cfg), path)
    return path


def _cell(result) -> gp.Finding:
    (finding,) = [f for f in result.findings["rec"] if f.feature == "cell"]
    return finding


@pytest.mark.parametrize("batch", [2, 33])
def test_auto_avoids_the_gru_op_for_a_batch_past_one_and_native_keeps_it_with_the_warning(tmp_path, batch):
    """Core ML's GRU tests run batch 1 only (later batches came out as zeros, rdar 59644603): for a batch of
    2 or 33 auto writes the while_loop, saying why; --strategy native writes the gru op and warns."""
    src = _source(tmp_path, Config(N=batch))
    auto = gp.convert(src, tmp_path / "auto.mlpackage")
    assert auto.verification.passed and _cell(auto).status.value == "decomposed"
    assert "rdar 59644603" in _cell(auto).detail and "--strategy native" in _cell(auto).detail
    assert "while_loop" in _package_ops(tmp_path / "auto.mlpackage")
    forced = gp.convert(src, tmp_path / "native.mlpackage", strategy="native")
    assert forced.verification.passed and _cell(forced).status.value == "exact"
    assert "rdar 59644603" in (_cell(forced).warning or "")
    assert "gru" in _package_ops(tmp_path / "native.mlpackage")


def test_auto_writes_the_gru_op_for_a_batch_fixed_at_one_without_a_warning(tmp_path):
    result = gp.convert(_source(tmp_path, Config(N=1)), tmp_path / "m.mlpackage")
    assert result.verification.passed and _cell(result).status.value == "exact" and not _cell(result).warning
    assert "gru" in _package_ops(tmp_path / "m.mlpackage")


def test_auto_avoids_reset_after_which_coremltools_marks_expected_to_fail(tmp_path):
    """PyTorch's GRU (linear_before_reset = 1) even at batch 1: the iOS18 reset_after parity test is expected to
    fail in coremltools (rdar 128479517), so auto decomposes it and the package needs no iOS18."""
    out = tmp_path / "m.mlpackage"
    result = gp.convert(_source(tmp_path, Config(N=1, lbr=1)), out)
    assert result.verification.passed and _cell(result).status.value == "decomposed"
    assert "rdar 128479517" in _cell(result).detail and _package_target(out) == "iOS15"


@pytest.mark.parametrize(
    ("cell", "options", "target", "why"),
    [
        ("LSTM", {}, "iOS15", "oldest"),
        ("RNN", {"compress_to_fp16": True, "allow_lossy": True}, "iOS17", "--compress-to-fp16"),
        ("GRU", {"strategy": "native"}, "iOS18", "reset_after"),  # lbr = 1 natively: the op's reset_after
    ],
)
def test_the_default_target_is_the_lowest_that_expresses_the_package_and_says_why(tmp_path, cell, options, target, why):
    out = tmp_path / "m.mlpackage"
    result = gp.convert(_source(tmp_path, Config(cell=cell, N=1, lbr=1 if cell == "GRU" else 0)), out, **options)
    assert result.verification.passed and _package_target(out) == target
    (deployment,) = {f for fs in result.findings.values() for f in fs if f.feature == "deployment target"}
    assert deployment.chosen and deployment.detail.startswith(f"{target}, chosen") and why in deployment.detail
    assert f"deployment target: {target}, chosen" in result.to_text()  # convert says it, though it is exact


def test_a_target_given_is_kept_and_not_called_chosen(tmp_path):
    out = tmp_path / "m.mlpackage"
    result = gp.convert(_source(tmp_path, Config(cell="LSTM")), out, minimum_deployment_target="iOS17")
    assert _package_target(out) == "iOS17"
    (deployment,) = {f for fs in result.findings.values() for f in fs if f.feature == "deployment target"}
    assert not deployment.chosen and "chosen" not in result.to_text()


def test_the_report_and_the_cli_name_the_chosen_target(tmp_path):
    src = _source(tmp_path, Config(cell="RNN", N=1))
    report = gp.report(src, to="coreml").to_json()
    (deployment,) = [
        f for f in report["layers"][0]["targets"]["coreml"]["findings"] if f["feature"] == "deployment target"
    ]
    assert deployment["chosen"] is True and deployment["detail"].startswith("iOS15, chosen")
    done = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "c.mlpackage")])
    assert done.exit_code == 0 and "deployment target: iOS15, chosen" in done.output


def test_formats_names_the_ops_known_doubts_and_that_auto_avoids_them():
    lines = CliRunner().invoke(main, ["formats"]).output.splitlines()
    gru, rnn = (next(line for line in lines if line.strip().startswith(f"{cell}: MIL")) for cell in ("gru", "rnn"))
    assert "known doubts gru (batches past the first), reset_after" in gru and "avoided by --strategy auto" in gru
    assert "doubt" not in rnn

"""What a new user meets in the first hour (issue 32), each against an independent oracle where numbers are
involved: OpenVINO's fp16 IR (ovc's default) verified at fp16's tolerance on OpenVINO CPU against onnxruntime."""

import re

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


def test_html_intro_speaks_of_operators_around_the_layers_only_when_there_are_some():
    """A single-node model has no operators around its layer: the intro says nothing of them (it used to say
    'the model has other operators around them, which no target keeps'); a model with some says which
    targets keep them, and with --layers-only that they were left out as asked."""
    intro = _html_intro(gp.report(REALMODELS / "burn_gru.onnx").render("html"))
    assert intro.endswith("1 recurrent layer(s)") and "other operators" not in intro
    whole = _html_intro(gp.report(REALMODELS / "dtln_model_1_lstm.onnx").render("html"))
    assert "other operators around them, which onnx, openvino, coreml keep and directml, bnns cannot hold" in whole
    alone = _html_intro(gp.report(REALMODELS / "dtln_model_1_lstm.onnx", layers_only=True).render("html"))
    assert "left out as asked" in alone and "cannot hold" not in alone


def _html_intro(page: str) -> str:
    return page.split("<p id='intro'>")[1].split("</p>")[0]


def test_json_and_html_reports_carry_gatepacks_version_and_the_utc_date():
    report = gp.report(REALMODELS / "burn_gru.onnx", "onnx")
    data = report.to_json()
    assert data["gatepack_version"] == gp.__version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["created"])
    assert f"made by gatepack {gp.__version__} on {data['created']}" in report.render("html")


def test_text_report_folds_layers_with_the_same_findings_into_one_row_with_their_count():
    """ulunas' 28 GRUs: 14 forward and 14 bidirectional, each kind with the same findings for every target
    (only sizes and tensor names differ): two rows of the table, not 28."""
    text = gp.report(REALMODELS / "ulunas_stream_simple.onnx").render("text").splitlines()
    table = text[2 : text.index(next(line for line in text if line.startswith("onnx:")))]
    assert [row.split(":")[0].strip() for row in table] == ["14 layers (GRU forward)", "14 layers (GRU bidirectional)"]
    assert "GRU_336, GRU_717, GRU_1139 and 11 more" in table[0]
    single = gp.report(REALMODELS / "burn_gru.onnx").render("text").splitlines()
    assert single[2].split()[0] == "GRU_0"  # one layer: its name, as before


def test_a_model_without_recurrent_layers_is_told_what_it_holds_and_what_gatepack_converts(tmp_path):
    from onnx import TensorProto, helper, save

    value = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Abs", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, [2])], [value("z", TensorProto.FLOAT, [2])])
    save(helper.make_model(graph), tmp_path / "relu.onnx")
    failed = CliRunner().invoke(main, ["convert", str(tmp_path / "relu.onnx"), str(tmp_path / "r.xml")])
    assert failed.exit_code == 3
    assert "no recurrent (GRU/RNN/LSTM) layer found among its 2 operators of 2 types (Abs, Relu)" in failed.output
    assert "hint: gatepack converts models that hold GRU, RNN or LSTM layers" in failed.output


def test_mistyped_commands_options_and_values_are_answered_with_did_you_mean():
    runner, src = CliRunner(), str(REALMODELS / "burn_gru.onnx")
    assert "Did you mean 'convert'?" in runner.invoke(main, ["covnert", src]).output  # click's own
    assert "'--to'" in runner.invoke(main, ["convert", src, "o.onnx", "--too", "onnx"]).output  # click's own
    value = runner.invoke(main, ["convert", src, "o.onnx", "--to", "onx"])
    assert value.exit_code == 2 and "Did you mean 'onnx'?" in value.output
    assert (
        "Did you mean 'numpy'?"
        in runner.invoke(main, ["run", src, "--inputs", "a.npz", "-o", "b.npz", "--engine", "numpi"]).output
    )


def test_a_write_option_the_target_does_not_take_is_named_by_its_cli_flag(tmp_path):
    """From the command line, the error names --onnx-layout, not the API's layout_encoding."""
    out = tmp_path / "m.xml"
    refused = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "burn_gru.onnx"), str(out), "--onnx-layout", "attribute"]
    )
    assert refused.exit_code == 2 and not out.exists()
    assert "--onnx-layout does not apply to the openvino target" in refused.output
    assert "--strategy, --compress-to-fp16" in refused.output and "layout_encoding" not in refused.output

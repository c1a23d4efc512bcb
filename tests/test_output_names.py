"""An output named for another format (or without a single-file format's suffix) is refused before anything is
read or written: exit 2, saying the name that would be right — what gatepack writes must read back as itself."""

import pytest
from click.testing import CliRunner
from helpers import REALMODELS

from gatepack.cli import main

SRC = str(REALMODELS / "burn_gru.onnx")


@pytest.mark.parametrize(
    "target, name, right",
    [
        ("onnx", "e.xml", "e.onnx"),
        ("onnx", "model", "model.onnx"),
        ("directml", "x.onnx", "x.json"),
        ("coreml", "x.mlmodel", "x.mlpackage"),
        ("bnns", "bundle.json", "bundle"),
        ("openvino", "x.onnx", "x.xml"),
        ("openvino", "x.tflite", "x.xml"),
    ],
)
def test_an_output_named_for_another_format_is_refused(tmp_path, target, name, right):
    done = CliRunner().invoke(main, ["convert", SRC, "--to", target, "-o", str(tmp_path / name)])
    assert done.exit_code == 2, done.output
    assert f"-o {right}" in done.output and ".tmp" not in done.output  # never an internal path
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("target, name", [("directml", "out"), ("bnns", "bundle"), ("coreml", "m.mlpackage")])
def test_directory_artifacts_may_be_named_freely_unless_the_name_is_another_format(tmp_path, target, name):
    done = CliRunner().invoke(main, ["convert", SRC, "--to", target, "-o", str(tmp_path / name), "-q"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / name).is_dir()


def test_a_path_through_a_missing_directory_leaves_nothing_behind(tmp_path):
    done = CliRunner().invoke(main, ["convert", SRC, "--to", "onnx", "-o", str(tmp_path / "bad" / ".." / "x.onnx")])
    assert done.exit_code != 0 and not list(tmp_path.iterdir()), done.output


def test_format_names_in_any_case_and_the_output_as_a_second_argument(tmp_path):
    runner = CliRunner()
    done = runner.invoke(main, ["convert", SRC, str(tmp_path / "a.xml"), "--to", "OpenVINO", "-q"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "a.xml").is_file() and (tmp_path / "a.bin").is_file()
    report = runner.invoke(main, ["report", SRC, "--to", "CoreML"])
    assert report.exit_code == 0 and "coreml" in report.output
    missing = runner.invoke(main, ["convert", SRC])
    assert missing.exit_code == 2 and "-o OUTPUT" in missing.output
    two = runner.invoke(main, ["convert", SRC, str(tmp_path / "b.onnx"), "-o", str(tmp_path / "c.onnx")])
    assert two.exit_code == 2 and "give one" in two.output and not list(tmp_path.glob("[bc].onnx"))

"""LiteRT's 2 GiB limit: a .tflite file is one FlatBuffer, whose offsets are 32-bit signed, so a model whose weights
pass 2**31 - 1 bytes cannot be written. gatepack refuses it (exit 4) before packing or writing anything, naming the
size, the reason and the formats that hold it. The limit is lowered here (the constant the check reads) so that a
small model stands for a large one: nothing of 2 GiB is allocated."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner
from helpers import REALMODELS, Config, static_model

from gatepack.cli import main
from gatepack.converters.formats.litert import common

pytest.importorskip("ai_edge_litert")


@pytest.fixture
def small_limit(monkeypatch) -> int:
    limit = 10_000  # bytes: less than either model's weights, more than nothing
    monkeypatch.setattr(common, "FLATBUFFER_LIMIT", limit)
    return limit


def _refused(result, out) -> None:
    assert result.exit_code == 4, result.output
    assert "FlatBuffer" in result.output and "32-bit" in result.output, result.output
    assert "onnx" in result.output and "openvino" in result.output, result.output  # the alternatives
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing written


def test_layers_over_the_flatbuffer_limit_are_refused_before_writing(tmp_path, small_limit):
    onnx.save(static_model(Config(cell="LSTM", I=32, H=32, S=2, N=1, seed=3)), tmp_path / "m.onnx")
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "m.onnx"), str(out), "--to", "litert"])
    _refused(result, out)
    assert f"{small_limit:,} bytes" in result.output


def test_a_whole_model_over_the_flatbuffer_limit_is_refused_before_writing(tmp_path, small_limit):
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "dtln_model_1_lstm.onnx"), str(out), "--to", "litert"]
    )
    _refused(result, out)


def test_under_the_limit_the_same_model_is_written(tmp_path):
    """The check refuses by size alone: with the real limit the same whole model converts and verifies."""
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "dtln_model_1_lstm.onnx"), str(out), "--to", "litert"]
    )
    assert result.exit_code == 0, result.output
    assert out.exists()

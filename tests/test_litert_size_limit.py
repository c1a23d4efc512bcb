"""LiteRT's 2 GiB limit: a FlatBuffer's offsets are 32-bit signed, so it holds at most 2**31 - 1 bytes. A model whose
weights pass it is written in the offset form (its constants after the FlatBuffer, test_litert_offset_buffers.py), so
the limit binds the FlatBuffer alone (its tables and small constants): past it gatepack refuses (exit 4) before
packing or writing anything, naming the size, the reason and the formats that hold it. The limit is lowered here (the
constant the writer reads) so that a small model stands for a large one: nothing of 2 GiB is allocated."""

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
    limit = 10_000  # bytes: less than either model's FlatBuffer (its tables), more than nothing
    monkeypatch.setattr(common, "FLATBUFFER_LIMIT", limit)
    return limit


@pytest.fixture
def weights_over_limit(monkeypatch) -> int:
    limit = 100_000  # bytes: less than DTLN's weights (1.4 MB), more than its FlatBuffer (tables under 60 kB)
    monkeypatch.setattr(common, "FLATBUFFER_LIMIT", limit)
    return limit


def _refused(result, out) -> None:
    assert result.exit_code == 4, result.output
    assert "FlatBuffer" in result.output and "32-bit" in result.output, result.output
    assert "onnx" in result.output and "openvino" in result.output, result.output  # the alternatives
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing written


def test_layers_whose_flatbuffer_passes_the_limit_are_refused_before_writing(tmp_path, small_limit):
    onnx.save(static_model(Config(cell="LSTM", I=32, H=32, S=2, N=1, seed=3)), tmp_path / "m.onnx")
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "m.onnx"), str(out), "--to", "litert"])
    _refused(result, out)
    assert f"{small_limit:,} bytes" in result.output


def test_a_whole_model_whose_flatbuffer_passes_the_limit_is_refused_before_writing(tmp_path, small_limit):
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "dtln_model_1_lstm.onnx"), str(out), "--to", "litert"]
    )
    _refused(result, out)


def test_weights_over_the_limit_are_written_after_the_flatbuffer(tmp_path, weights_over_limit):
    """Weights past the limit, the FlatBuffer under it: the file is written in the offset form, every buffer named by
    offset and size, verified on LiteRT's interpreter."""
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "dtln_model_1_lstm.onnx"), str(out), "--to", "litert"]
    )
    assert result.exit_code == 0, result.output
    content = out.read_bytes()
    model = common.schema().ModelT.InitFromPackedBuf(content, 0)
    stored = [b for b in model.buffers if b.offset > 1]
    assert sum(int(b.size) for b in stored) > weights_over_limit
    assert min(int(b.offset) for b in stored) < weights_over_limit  # the FlatBuffer: the bytes before the first

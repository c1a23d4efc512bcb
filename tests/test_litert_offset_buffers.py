"""LiteRT's offset buffers (docs/conventions.md §11): a large model's constants stored after the FlatBuffer, each named
by its buffer's ``offset`` (absolute, in the file) and ``size``, so the weights are written straight from their arrays
and only the FlatBuffer itself meets the 2 GiB limit. The form is forced here on small models (``OFFSET_FROM`` lowered
to 0, the constant the writer reads): each file is verified by convert on LiteRT's interpreter against onnxruntime,
checked for offset buffers by parsing it with the official schema (not gatepack's reader), and read back by gatepack
with weights bit-identical to the source's."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import REALMODELS, stacked_model

import gatepack as gp
from gatepack.cli import main
from gatepack.converters.formats.litert import common

pytest.importorskip("ai_edge_litert")

DTLN = REALMODELS / "dtln_model_1_lstm.onnx"


@pytest.fixture
def offset_form(monkeypatch) -> None:
    monkeypatch.setattr(common, "OFFSET_FROM", 0)


def _offset_buffers(path) -> list[tuple[int, int]]:
    """(offset, size) of each buffer stored after the FlatBuffer, checked as LiteRT's interpreter checks them: buffer
    0 empty, no data besides an offset, every range inside the file; and aligned to ``OFFSET_ALIGNMENT``, every
    buffer of ``OUTSIDE_FROM`` bytes or more but the metadata's among them."""
    content = path.read_bytes()
    model = common.schema().ModelT.InitFromPackedBuf(content, 0)
    assert model.buffers[0].data is None and model.buffers[0].offset == 0
    found = [(int(b.offset), int(b.size)) for b in model.buffers if b.offset > 1]
    described = {entry.buffer for entry in model.metadata or []}
    for k, b in enumerate(model.buffers):
        assert b.offset <= 1 or b.data is None
        assert not found or k in described or b.data is None or len(b.data) < common.OUTSIDE_FROM
    for offset, size in found:
        assert offset % common.OFFSET_ALIGNMENT == 0 and offset + size <= len(content)
    return found


def _same_weights(source, written) -> None:
    """Every layer's W, R, biases and peepholes of ``written`` (read back by gatepack) bit-identical to the source's
    (the biases summed where the sequence op holds one per gate)."""
    assert len(source.layers) == len(written.layers)
    for a, b in zip(source.layers, written.layers):
        for p, q in zip(a.directions, b.directions):
            np.testing.assert_array_equal(q.W, p.W)
            np.testing.assert_array_equal(q.R, p.R)
            np.testing.assert_array_equal(q.Wb + q.Rb, p.Wb + p.Rb)
            if p.P is not None:
                np.testing.assert_array_equal(q.P, p.P)


def test_a_gru_stack_s_layers_in_the_offset_form_run_and_read_back(tmp_path, offset_form):
    weights = stacked_model(tmp_path / "stack.onnx", 2, 48, "GRU")
    out = tmp_path / "stack.tflite"
    result = gp.convert(tmp_path / "stack.onnx", out, to="litert", layers_only=True)
    assert result.verification.passed, result.verification.to_text()
    stored = _offset_buffers(out)
    assert sum(size for _, size in stored) >= 0.95 * weights  # the matrices after it (biases under 1 KiB in it)
    assert min(offset for offset, _ in stored) >= 1024  # the FlatBuffer first
    _same_weights(gp.load(tmp_path / "stack.onnx"), gp.load(out))


def test_an_int8_gru_stack_in_the_offset_form_runs_and_reads_back(tmp_path, offset_form):
    """--quantize-weights int8 in the offset form: the INT8 matrices after the FlatBuffer, their per-row scales in
    it (packed as vectors, the offsets written into the packed FlatBuffer), run by LiteRT's hybrid kernels against
    the int8 twin on onnxruntime; the file parsed with the official schema holds one scale per row of each matrix."""
    stacked_model(tmp_path / "stack.onnx", 2, 48, "GRU")
    out = tmp_path / "stack.tflite"
    result = gp.convert(tmp_path / "stack.onnx", out, to="litert", layers_only=True, quantize_weights="int8")
    assert result.verification.passed, result.verification.to_text()
    assert len(_offset_buffers(out)) >= 8  # each direction's W and R of both layers
    model = common.schema().ModelT.InitFromPackedBuf(out.read_bytes(), 0)
    int8 = [t for t in model.subgraphs[0].tensors if t.type == common.schema().TensorType.INT8]
    assert int8 and all(len(t.quantization.scale) == t.shape[0] for t in int8)
    assert all((np.asarray(t.quantization.scale) > 0).all() and not t.quantization.zeroPoint.any() for t in int8)


def test_a_whole_model_in_the_offset_form_runs_and_reads_back(tmp_path, offset_form):
    out = tmp_path / "dtln.tflite"
    result = gp.convert(DTLN, out, to="litert")
    assert result.verification.passed, result.verification.to_text()
    assert len(_offset_buffers(out)) >= 8  # the two LSTMs' weights, the Dense layers'
    _same_weights(gp.load(DTLN), gp.load(out))


def test_a_stateful_whole_model_in_the_offset_form_streams(tmp_path, offset_form):
    out = tmp_path / "dtln.tflite"
    result = gp.convert(DTLN, out, to="litert", stateful=True, frames=20)
    assert result.verification.passed, result.verification.to_text()
    assert result.verification.streaming is not None and result.verification.streaming.frames == 20
    assert _offset_buffers(out)
    assert gp.load(out).meta["states"] == {"input_3": "tf_op_layer_stack_2"}


def test_a_small_model_stays_one_flatbuffer(tmp_path):
    """Under ``OFFSET_FROM`` the file is one FlatBuffer, as any LiteRT runtime reads it."""
    out = tmp_path / "dtln.tflite"
    assert gp.convert(DTLN, out, to="litert").verification.passed
    assert _offset_buffers(out) == []


def test_an_offset_past_the_file_s_end_is_bad_input(tmp_path, offset_form):
    """A truncated file: the reader names the buffer and its range (exit 3), as the interpreter refuses it."""
    out = tmp_path / "dtln.tflite"
    assert gp.convert(DTLN, out, to="litert", verify=False) is not None
    out.write_bytes(out.read_bytes()[:-100])
    result = CliRunner().invoke(main, ["inspect", str(out)])
    assert result.exit_code == 3, result.output
    assert "past the file's" in result.output and "Traceback" not in result.output


def test_a_file_is_run_from_its_path_its_weights_after_the_flatbuffer_mapped(tmp_path, offset_form, monkeypatch):
    """LiteRT is handed the file's path (it maps the file: a 277 MB model is never read into gatepack's memory), and
    the weights stored after the FlatBuffer are read from that map: the file's outputs are onnxruntime's on the
    source."""
    import ai_edge_litert.interpreter as module
    import onnxruntime as ort

    out = tmp_path / "dtln.tflite"
    gp.convert(DTLN, out, to="litert", verify=False)
    assert _offset_buffers(out)
    loaded: list[dict] = []
    interpreter = module.Interpreter
    monkeypatch.setattr(module, "Interpreter", lambda **given: loaded.append(given) or interpreter(**given))
    rng = np.random.default_rng(4)
    feed = {
        "input_2": rng.standard_normal((1, 1, 257)).astype(np.float32),
        "input_3": rng.standard_normal((1, 2, 128, 2)).astype(np.float32) * 0.5,
    }
    got = gp.run(out, feed, engine="native")
    assert [(given.get("model_path"), given.get("model_content")) for given in loaded] == [(str(out), None)]
    session = ort.InferenceSession(str(DTLN), providers=["CPUExecutionProvider"])
    for name, value in zip([o.name for o in session.get_outputs()], session.run(None, feed)):
        np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-4)

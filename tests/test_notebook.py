"""The Python API in a notebook (issue 32 item 8): short one-line reprs, print() giving the readable text, and the
report shown as its HTML page."""

from __future__ import annotations

from helpers import FIXTURES, REALMODELS

import gatepack as gp

MODEL = REALMODELS / "ulunas_stream_simple.onnx"  # 28 layers: the reprs used to be 58 KB and 125 KB


def test_result_and_verification_are_one_line_and_print_as_text(tmp_path):
    result = gp.convert(MODEL, tmp_path / "u.xml")
    for shown in (repr(result), repr(result.verification)):
        assert "\n" not in shown and len(shown) < 400, shown
    assert "28 layer(s)" in repr(result) and "verification passed" in repr(result.verification)
    assert str(result) == result.to_text() and str(result.verification) == result.verification.to_text()


def test_report_is_one_line_prints_as_text_and_shows_as_html():
    report = gp.report(MODEL)
    assert "\n" not in repr(report) and len(repr(report)) < 400
    assert "28 layer(s)" in repr(report) and all(t in repr(report) for t in report.targets())
    assert str(report) == report.to_text()
    assert report._repr_html_() == report.to_html() and "<table" in report._repr_html_()


def test_an_in_memory_model_proto_is_taken_as_its_saved_copy(tmp_path):
    """A notebook's onnx.ModelProto is converted, reported, inspected and run like its file: gatepack saves a copy
    in a private temporary directory (what it verifies is a file, as a runtime loads it). The artifact's
    outputs match onnxruntime's on the proto itself; nothing is written beside the output."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import pytest

    proto = onnx.load(FIXTURES / "gru_lbr1_bidirectional.onnx")
    from_file = gp.load(FIXTURES / "gru_lbr1_bidirectional.onnx").layers[0]
    (layer,) = gp.load(proto).layers
    assert layer.name == from_file.name and np.array_equal(layer.directions[0].W, from_file.directions[0].W)
    result = gp.convert(proto, tmp_path / "m.xml")
    assert result.verification.passed and sorted(p.name for p in tmp_path.iterdir()) == ["m.bin", "m.xml"]
    assert gp.report(proto, to="coreml").layers[0].layer.name == layer.name
    feed = {
        name: np.random.default_rng(0).standard_normal((5, 3, 3)).astype(np.float32) for name in gp.input_names(proto)
    }
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(gp.run(proto, feed).values(), session.run(None, feed)):
        np.testing.assert_array_equal(got, want)
    onnx.save(proto, tmp_path / "ext.onnx", save_as_external_data=True, size_threshold=0, location="ext.data")
    unloaded = onnx.load(tmp_path / "ext.onnx", load_external_data=False)
    with pytest.raises(gp.UsageError, match="external data is not loaded") as err:
        gp.load(unloaded)
    assert "path" in (err.value.hint or "")

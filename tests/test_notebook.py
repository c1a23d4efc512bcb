"""The Python API in a notebook (issue 32 item 8): short one-line reprs, print() giving the readable text, and the
report shown as its HTML page."""

from __future__ import annotations

from helpers import REALMODELS

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


def test_an_in_memory_model_proto_is_told_to_be_saved_first(tmp_path):
    import onnx
    import pytest

    proto = onnx.load(MODEL)
    for call in (lambda: gp.load(proto), lambda: gp.convert(proto, tmp_path / "u.xml"), lambda: gp.report(proto)):
        with pytest.raises(gp.UsageError, match="onnx.ModelProto") as err:
            call()
        assert "onnx.save" in (err.value.hint or "")
    assert not list(tmp_path.iterdir())

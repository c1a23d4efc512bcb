"""LSTM reading (until it moves to test_onnx_format.py); the helpers the OpenVINO and DirectML LSTM files still
import from here (until those merge into test_openvino.py and test_directml.py)."""

from __future__ import annotations

import onnx
import pytest
from helpers import Config, build_model, inputs, ort_reference, peephole_cases
from helpers import assert_refused_when_forced as assert_refused_when_forced
from helpers import assert_round_trip_keeps_every_weight as assert_round_trip_keeps_every_weight
from oracle import assert_close
from oracle import expected_outputs as expected_outputs

import gatepack as gp
from gatepack.converters.executor import run_layer

PEEPHOLE_CASES = peephole_cases()


def test_input_forget_of_the_wrong_type_is_refused_and_any_nonzero_value_couples(tmp_path):
    bad = build_model(Config(cell="LSTM"))
    bad.graph.node[0].attribute.append(onnx.helper.make_attribute("input_forget", "yes"))
    onnx.save(bad, tmp_path / "bad.onnx")
    with pytest.raises(gp.InputError, match="input_forget.*STRING.*INT"):
        gp.load(tmp_path / "bad.onnx")
    cfg = Config(cell="LSTM", extra={"input_forget": 2})  # onnxruntime couples for any nonzero value
    onnx.save(build_model(cfg), tmp_path / "two.onnx")
    (layer,) = gp.load(tmp_path / "two.onnx").layers
    assert layer.input_forget
    feed = inputs(cfg)
    assert_close(cfg, run_layer(layer, feed["X"]), ort_reference(cfg, feed), 1e-5, 1e-4)

"""ONNX written as elementary operators (``--strategy decomposed``: a Loop over time per direction built from each
cell's graph step), and read back by the description gatepack stores in the model's metadata.

Oracle: onnxruntime running the source's own GRU/RNN/LSTM node (built with plain ``onnx.helper``), against
onnxruntime running the written Loops; the weights read back compared bit for bit with the source's.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import Config, build_model, inputs, ort_reference, ort_run, outputs_to_layout0, to_layout

import gatepack as gp
from gatepack.cli import main

CASES = [
    Config(cell="GRU", lbr=1, clip=0.7, seq_lens="mixed", initial_h=True, direction="bidirectional", layout=1),
    Config(cell="GRU", lbr=0, initial_h=True, direction="reverse", S=5, N=2, I=3, H=4),
    Config(cell="RNN", activations=["Relu", "Tanh"], direction="bidirectional", seq_lens="mixed"),
    Config(cell="LSTM", peepholes=True, initial_h=True, direction="bidirectional", seq_lens="mixed", layout=1),
]


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.label())
def test_decomposed_onnx_is_a_loop_equal_to_the_node_and_reads_back_as_the_layer(tmp_path, cfg):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(cfg), str(source))
    result = gp.convert(source, out, "onnx", strategy="decomposed")
    assert result.passed, result.to_text()
    (layer,) = gp.load(source).layers
    cell = {f.feature: f for f in result.findings[layer.name]}["cell"]
    assert cell.status.value == "decomposed" and "--strategy decomposed" in cell.detail
    proto = onnx.load(str(out))
    ops = {node.op_type for node in proto.graph.node}
    assert "Loop" in ops and not {"GRU", "RNN", "LSTM"} & ops
    described = json.loads(next(p.value for p in proto.metadata_props if p.key == "gatepack"))
    assert [entry["cell"] for entry in described["layers"]] == [cfg.cell.lower()]
    feed0 = inputs(cfg)
    got = outputs_to_layout0(cfg, *ort_run(out, to_layout(cfg, feed0)))
    for value, want in zip(got, ort_reference(cfg, feed0)):
        np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-4)
    (back,) = gp.load(out).layers
    assert (back.cell, back.direction, back.clip, back.linear_before_reset) == (
        layer.cell,
        layer.direction,
        layer.clip,
        layer.linear_before_reset,
    )
    assert back.interface.layout == cfg.layout and back.interface.sequence_lens == layer.interface.sequence_lens
    for p, q in zip(layer.directions, back.directions):
        for role in ("W", "R", "Wb", "Rb", "P"):
            np.testing.assert_array_equal(getattr(q, role), getattr(p, role))


def test_the_operator_stays_the_default_and_carries_no_metadata(tmp_path):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(CASES[0]), str(source))
    assert gp.convert(source, out, "onnx").passed
    proto = onnx.load(str(out))
    assert "GRU" in {node.op_type for node in proto.graph.node} and not proto.metadata_props


def test_a_whole_model_refuses_a_strategy(tmp_path):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    model = build_model(Config(cell="GRU", S=5, N=2, I=3, H=4))
    model.graph.node.append(onnx.helper.make_node("Relu", ["Y"], ["Y_relu"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("Y_relu", onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(source))
    result = _invoke("convert", source, "--to", "onnx", "--strategy", "decomposed", "-o", out)
    assert result.exit_code == 2 and "--layers-only" in result.output and not out.exists()


def test_the_elementary_form_below_opset_11_is_refused(tmp_path):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(Config(cell="GRU", S=5, N=2, I=3, H=4)), str(source))
    result = _invoke("convert", source, "--to", "onnx", "--strategy", "decomposed", "--opset", "7", "-o", out)
    assert result.exit_code == 4 and "opset 11" in result.output and not out.exists()


def test_a_tampered_description_is_one_line(tmp_path):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(CASES[1]), str(source))
    assert gp.convert(source, out, "onnx", strategy="decomposed").passed
    proto = onnx.load(str(out))
    described = json.loads(proto.metadata_props[0].value)
    described["layers"][0]["weights"]["d0.R_hT"] = "nowhere"
    proto.metadata_props[0].value = json.dumps(described)
    onnx.save(proto, str(out))
    result = _invoke("inspect", out)
    assert result.exit_code == 3 and "'nowhere'" in result.output and "Traceback" not in result.output

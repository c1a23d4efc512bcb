"""ONNX -> ONNX for onnxruntime's DirectML provider (``--to onnx --for directml``, API ``runtime="directml"``).

Oracles: onnxruntime CPU on the source file (the whole output), and, node by node, onnxruntime CPU on
each recurrent node of the written model against gatepack's executor of DirectML's operator semantics
reading that node as the provider does (docs/conventions.md §4).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import REALMODELS, Config, build_model, inputs, ort_run

import gatepack as gp
import gatepack.converters.formats.onnx.running as onnx_running
from gatepack.cli import main
from gatepack.converters.formats import directml
from gatepack.converters.samples import sample_inputs, sample_sizes
from gatepack.converters.verification import from_interface, to_interface

RECURRENT = {"GRU", "RNN", "LSTM"}


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def _provider_and_onnxruntime(layer) -> tuple[dict, dict]:
    """One recurrent node on the DirectML-semantics executor and on onnxruntime CPU, on the same random inputs."""
    feed = to_interface(layer, sample_inputs(layer, np.random.default_rng(3), sample_sizes(layer, layer)))
    return (
        from_interface(layer, directml.run_onnx_node(layer, feed)),
        from_interface(layer, onnx_running.run_isolated(layer, feed)),
    )


def _assert_nodes_agree(path) -> int:
    """Every recurrent node of ``path``: the DirectML executor agrees with onnxruntime; returns how many."""
    layers = gp.load(path).layers
    for layer in layers:
        on_provider, on_cpu = _provider_and_onnxruntime(layer)
        for name, value in on_cpu.items():
            np.testing.assert_allclose(on_provider[name], value, atol=1e-5, rtol=1e-4, err_msg=f"{layer.name} {name}")
    return len(layers)


def test_gtcrn_stream_for_directml(tmp_path):
    out = tmp_path / "gtcrn.onnx"
    result = gp.convert(REALMODELS / "gtcrn_stream.onnx", out, "onnx", runtime="DirectML")
    assert result.passed and result.whole
    provider = [o for o in result.verification.outputs if "[directml provider]" in o.layer]
    assert len({o.layer for o in provider}) == 14 and all(o.passed for o in provider)
    assert _ops(out).count("GRU") == 14
    assert _assert_nodes_agree(out) == 14
    for node in onnx.load(str(out)).graph.node:
        if node.op_type == "GRU":
            names = {a.name for a in node.attribute}
            assert {"activations", "linear_before_reset"} <= names and "layout" not in names


@pytest.mark.parametrize(
    "cfg",
    [
        Config(cell="GRU", lbr=1, clip=0.7, seq_lens="mixed", initial_h=True, direction="bidirectional"),
        Config(cell="GRU", lbr=0, clip=0.4, direction="reverse", S=5, N=2, I=3, H=4),
        Config(cell="RNN", activations=["Softplus"], clip=2.0, S=5, N=2, I=3, H=4),
        Config(cell="LSTM", activations=["Affine", "Tanh", "Softplus"], alphas=[0.5], betas=[0.1], peepholes=True),
    ],
    ids=lambda c: c.label(),
)
def test_mishandled_features_are_decomposed(tmp_path, cfg):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(cfg), str(source))
    # the source node is what the provider would get wrong: its executor disagrees with onnxruntime
    layer = gp.load(source).layers[0]
    with pytest.raises((AssertionError, gp.RuntimeFailure)):
        on_provider, on_cpu = _provider_and_onnxruntime(layer)
        for name, value in on_cpu.items():
            np.testing.assert_allclose(on_provider[name], value, atol=1e-5, rtol=1e-4)
    result = gp.convert(source, out, "onnx", runtime="directml")
    assert result.passed
    findings = {f.feature: f for f in result.findings[layer.name]}
    assert findings["cell"].status.value == "decomposed"
    assert not RECURRENT & set(_ops(out)) and "Loop" in _ops(out)
    feed = inputs(cfg)
    for got, want in zip(ort_run(out, feed), ort_run(source, feed)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_gru_clip_inside_a_model_keeps_the_other_nodes(tmp_path):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    model = build_model(Config(cell="GRU", lbr=1, clip=0.5, S=5, N=2, I=3, H=4))
    model.graph.node.append(onnx.helper.make_node("Relu", ["Y"], ["Y_relu"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("Y_relu", onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(source))
    result = _invoke("convert", source, "--to", "onnx", "--for", "DIRECTML", "-o", out)
    assert result.exit_code == 0, result.output
    assert "decomposed clip" in result.output and "exact clip" not in result.output
    assert "Relu" in _ops(out) and "GRU" not in _ops(out)
    feed = inputs(Config(cell="GRU", S=5, N=2, I=3, H=4))
    for got, want in zip(ort_run(out, feed), ort_run(source, feed)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_layout_1_becomes_transposes(tmp_path):
    source, out = tmp_path / "source.onnx", tmp_path / "out.onnx"
    onnx.save(build_model(Config(cell="GRU", lbr=1, layout=1, initial_h=True)), str(source))
    result = gp.convert(source, out, "onnx", runtime="directml")
    assert result.passed
    proto = onnx.load(str(out))
    assert [n.op_type for n in proto.graph.node].count("Transpose") == 4
    gru = next(n for n in proto.graph.node if n.op_type == "GRU")
    assert all(a.name != "layout" for a in gru.attribute)
    layout = {f.feature: f for f in result.findings[gp.load(source).layers[0].name]}["layout"]
    assert layout.status.value == "repacked"
    assert _assert_nodes_agree(out) == 1


def test_refusals(tmp_path):
    source = tmp_path / "source.onnx"
    onnx.save(build_model(Config(cell="GRU", dtype="float64")), str(source))
    result = _invoke("convert", source, "--to", "onnx", "--for", "directml", "-o", tmp_path / "out.onnx")
    assert result.exit_code == 4 and "float64" in result.output and "--for directml" in result.output
    assert not (tmp_path / "out.onnx").exists()
    onnx.save(build_model(Config(cell="GRU", layout=1)), str(source))
    result = _invoke(
        "convert", source, "--to", "onnx", "--for", "directml", "--onnx-layout", "attribute", "-o", tmp_path / "o.onnx"
    )
    assert result.exit_code == 4 and "layout" in result.output
    result = _invoke("convert", source, "--to", "onnx", "--for", "cuda", "-o", tmp_path / "o.onnx")
    assert result.exit_code == 2


def test_directml_of_a_whole_model_names_onnx_for_directml(tmp_path):
    gtcrn = REALMODELS / "gtcrn_stream_simple.onnx"
    result = _invoke("convert", gtcrn, "--to", "directml", "-o", tmp_path / "dml")
    assert result.exit_code == 4 and "--to onnx --for directml" in result.output
    model = gp.report(gtcrn, ["directml"]).model["directml"]
    assert "--to onnx --for directml" in model.alternative
    report = _invoke("report", REALMODELS / "gtcrn_stream_simple.onnx", "--for", "DirectML")
    assert report.exit_code == 0 and "exact" in report.output

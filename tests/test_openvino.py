"""OpenVINO IR: every generated configuration converted (auto and decomposed), run on OpenVINO CPU and
compared with onnxruntime; round trips; IRs made by OpenVINO's own converter; bad input."""

from __future__ import annotations

import numpy as np
import onnx
import openvino as ov
import pytest

import converters as gp
from converters.formats import openvino as ovf
from helpers import REALMODELS, Config, build_model, inputs, matrix, ort_reference, outputs_to_layout0, to_layout

MATRIX = matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


def static_model(cfg: Config) -> onnx.ModelProto:
    """The config's model with every input dimension fixed (S, N known)."""
    model = build_model(cfg)
    sizes = {"S": cfg.S, "N": cfg.N}
    for value in model.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]
    return model


def convert_and_check(cfg: Config, tmp_path, strategy: str, static: bool = False) -> str:
    src = tmp_path / "m.onnx"
    onnx.save(static_model(cfg) if static else build_model(cfg), src)
    out = tmp_path / "m.xml"
    result = gp.convert(src, out, to="openvino", strategy=strategy, allow_lossy=True, verify=False)
    chosen = "decomposed" if any(f.status.value == "decomposed" for f in result.findings["rec"]) else "native"
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0))  # the saved IR on OpenVINO CPU
    y, y_h = outputs_to_layout0(cfg, outputs["Y"], outputs["Y_h"])
    ref_y, ref_y_h = ort_reference(cfg, feed0)
    atol, rtol = TOLERANCE[cfg.dtype]
    for ours, ref in ((y, ref_y), (y_h, ref_y_h)):
        finite = np.isfinite(ref)  # onnxruntime's naive Softplus overflows where a stable one does not
        assert finite.mean() > 0.5
        np.testing.assert_allclose(ours.astype(np.float64)[finite], ref[finite], atol=atol, rtol=rtol)
    return chosen


@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix_auto(cfg: Config, tmp_path):
    # Half of the sequence_lens cases get static shapes (native is exact there), half stay dynamic.
    static = cfg.seq_lens != "none" and cfg.seed % 4 < 2
    chosen = convert_and_check(cfg, tmp_path, "auto", static=static)
    layer = gp.load(tmp_path / "m.onnx").layers[0]
    assert chosen == ("decomposed" if ovf.native_blockers(layer) else "native")


@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix_decomposed(cfg: Config, tmp_path):
    assert convert_and_check(cfg, tmp_path, "decomposed") == "decomposed"


def test_both_strategies_are_exercised(tmp_path):
    blocked = []
    for cfg in MATRIX[:60]:
        onnx.save(build_model(cfg), tmp_path / "m.onnx")
        blocked.append(bool(ovf.native_blockers(gp.load(tmp_path / "m.onnx").layers[0])))
    assert any(blocked) and not all(blocked)


def test_forcing_native_where_it_is_wrong_is_refused(tmp_path):
    cfg = Config(cell="GRU", activations=["HardSigmoid", "Tanh"], alphas=[0.3], betas=[0.4])
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    with pytest.raises(gp.RefusedError, match="unsupported: cell"):
        gp.convert(tmp_path / "m.onnx", tmp_path / "m.xml", to="openvino", strategy="native")
    assert not (tmp_path / "m.xml").exists() and not (tmp_path / "m.bin").exists()


@pytest.mark.parametrize("strategy", ["auto", "decomposed"])
@pytest.mark.parametrize("cfg", [c for c in MATRIX[:48] if c.dtype == "float32"][:16], ids=lambda c: c.label())
def test_round_trip_onnx_ir_onnx(cfg: Config, strategy, tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(build_model(cfg), src)
    result = gp.convert(src, tmp_path / "m.xml", to="openvino", strategy=strategy)
    assert result.verification.passed, result.verification.to_text()
    back = gp.convert(tmp_path / "m.xml", tmp_path / "back.onnx", to="onnx")
    assert back.verification.passed, back.verification.to_text()
    (a,) = gp.load(src).layers
    (b,) = gp.load(tmp_path / "back.onnx").layers
    folded = any(f.status.value == "folded" for f in result.findings["rec"])
    h = a.hidden_size
    for p, q in zip(a.directions, b.directions):
        np.testing.assert_array_equal(p.W, q.W)
        np.testing.assert_array_equal(p.R, q.R)
        if not folded:
            np.testing.assert_array_equal(p.Wb, q.Wb)
            np.testing.assert_array_equal(p.Rb, q.Rb)
        elif a.cell.value == "gru" and a.linear_before_reset:  # [Wbz+Rbz, Wbr+Rbr, Wbh, 0, 0, Rbh]
            np.testing.assert_array_equal(q.Wb, np.concatenate([p.Wb[: 2 * h] + p.Rb[: 2 * h], p.Wb[2 * h :]]))
            np.testing.assert_array_equal(q.Rb, np.concatenate([np.zeros(2 * h, p.Rb.dtype), p.Rb[2 * h :]]))
        else:  # [Wb + Rb, 0]
            np.testing.assert_array_equal(q.Wb, p.Wb + p.Rb)
            assert not q.Rb.any()
        assert [str(x) for x in p.activations] == [str(x) for x in q.activations]
    assert (a.interface.x, a.interface.y, a.interface.layout) == (b.interface.x, b.interface.y, b.interface.layout)


GRU_RNN_MODELS = sorted(p.name for p in REALMODELS.glob("*.onnx") if "lstm" not in p.name and "gtcrn_stream.onnx" != p.name)


@pytest.mark.parametrize("compress", [False, True], ids=["fp32", "fp16-compressed"])
@pytest.mark.parametrize("name", GRU_RNN_MODELS)
def test_reads_irs_made_by_openvinos_own_converter(name, compress, tmp_path):
    xml = tmp_path / "m.xml"
    ov.save_model(ov.convert_model(str(REALMODELS / name)), str(xml), compress_to_fp16=compress)
    source = gp.load(REALMODELS / name)
    model = gp.load(xml)
    assert len(model.layers) == len(source.layers)
    by_shape = sorted(source.layers, key=lambda l: (l.input_size, l.hidden_size, float(np.abs(l.directions[0].W).sum())))
    read = sorted(model.layers, key=lambda l: (l.input_size, l.hidden_size, float(np.abs(l.directions[0].W).sum())))
    for src_layer, layer in zip(by_shape, read):
        assert (layer.cell, layer.direction, layer.linear_before_reset) == (src_layer.cell, src_layer.direction, src_layer.linear_before_reset)
        statuses = {f.feature: f.status.value for f in model.notes_for(layer)}
        assert statuses["bias"] == "folded"
        for p, q in zip(src_layer.directions, layer.directions):
            expected_w = p.W.astype(np.float16).astype(np.float32) if compress else p.W
            np.testing.assert_array_equal(q.W, expected_w)
            bias_sum = (p.Wb + p.Rb) if not layer.linear_before_reset else np.concatenate([p.Wb[: 2 * layer.hidden_size] + p.Rb[: 2 * layer.hidden_size], p.Wb[2 * layer.hidden_size :]])
            np.testing.assert_allclose(q.Wb, bias_sum, atol=2e-3 if compress else 1e-6)
        if compress:
            assert statuses["weights"] == "lossy"
    # A single read layer runs on OpenVINO CPU as the ONNX node does on onnxruntime (several layers
    # cannot be paired: OpenVINO renames them and may reorder them).
    if not compress and len(model.layers) == 1:
        result = gp.verify(REALMODELS / name, xml)
        assert result.passed, result.to_text()


def test_bad_input(tmp_path):
    from click.testing import CliRunner

    from cli import main

    runner = CliRunner()
    # weights from a non-constant subgraph
    ops = ov.opset15
    x = ops.parameter([1, 2, 3], np.float32, name="X")
    w = ops.parameter([1, 6, 3], np.float32, name="W")
    gru = ops.rnn_sequence(x, np.zeros((1, 1, 6), np.float32), np.array([2], np.int64), w, np.zeros((1, 6, 6), np.float32), np.zeros((1, 6), np.float32), 6, "forward", name="rnn")
    ov.save_model(ov.Model([ops.result(gru.output(0))], [x, w]), str(tmp_path / "p.xml"))
    result = runner.invoke(main, ["inspect", str(tmp_path / "p.xml")])
    assert result.exit_code == 3 and "layer 'rnn': W comes from a Parameter node" in result.output and len(result.output.strip().splitlines()) == 1
    # a truncated .bin and an .xml without its .bin
    onnx.save(build_model(Config()), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.xml", to="openvino")
    data = (tmp_path / "m.bin").read_bytes()
    (tmp_path / "m.bin").write_bytes(data[: len(data) // 2])
    result = runner.invoke(main, ["convert", str(tmp_path / "m.xml"), "--to", "onnx", "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 3 and result.output.startswith("gatepack: error: ") and "m.xml" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists()
    (tmp_path / "m.bin").unlink()
    result = runner.invoke(main, ["inspect", str(tmp_path / "m.xml")])
    assert result.exit_code == 3 and "m.bin is missing" in result.output

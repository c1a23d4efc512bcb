"""4-bit and float16-scale quantized weights: NNCF's compressed sequence-op weights (i4/u4/u8, per channel and per
group, float16 scales), onnxruntime's INT4 QDQ (ONNX's DequantizeLinear and its contrib one), per-block UINT4, and
``--quantize-weights int4`` (converters/weight_quantization.py).

Oracles: NNCF's own integers, scales and zero points and OpenVINO CPU's outputs of the NNCF IRs
(fixtures/producers/nncf, made by NNCF's subgraph builder); onnxruntime's outputs of its quantizer's models
(fixtures/producers/ort_qdq_int4); onnxruntime and OpenVINO running the artifacts; an RNN with ReLU fed ± one-hot rows,
whose outputs are its weights exactly as the runtime computes them; the int4 scheme transcribed here.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gatepack.converters as gp
from gatepack.converters.errors import UsageError

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
NNCF = PRODUCERS / "nncf"
QDQ4 = PRODUCERS / "ort_qdq_int4"
GRU = PRODUCERS.parent / "realmodels" / "burn_gru_bidirectional.onnx"
ONNX_TO_OV = {"GRU": [0, 1, 2], "RNN": [0], "LSTM": [2, 0, 3, 1]}  # OpenVINO's gate blocks, in ONNX's numbering
NNCF_CASES = json.loads((NNCF / "manifest.json").read_text())
QDQ4_CASES = json.loads((QDQ4 / "manifest.json").read_text())


def _ov_order(array: np.ndarray, op: str) -> np.ndarray:
    """Rows [G*H, ...] from ONNX's gate order to OpenVINO's (LSTM: i, o, f, c -> f, i, c, o)."""
    blocks = np.split(array, len(ONNX_TO_OV[op]))
    return np.concatenate([blocks[k] for k in ONNX_TO_OV[op]])


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.mark.parametrize("artifact", sorted(NNCF_CASES))
def test_nncf_weights_are_read_as_nncfs_integers_with_their_float16_scales(artifact):
    """Per direction the records hold NNCF's integers and zero points, its scale as the IR stores it (float16), and
    the granularity it chose (per channel, or per group of ``group_size`` columns)."""
    config = NNCF_CASES[artifact]["config"]
    truth = np.load(NNCF / artifact.replace(".xml", ".truth.npz"))
    (layer,) = gp.load(NNCF / artifact).layers
    for role in ("W", "R"):
        q, scale = truth[f"nncf:{role}:q"], truth[f"nncf:{role}:scale"]
        zero = truth[f"nncf:{role}:zero_point"] if f"nncf:{role}:zero_point" in truth else np.zeros_like(scale)
        rows, cols = truth[f"float:{role}"].shape[1:]
        for d, params in enumerate(layer.directions):
            record = params.quantized(role)
            assert record is not None and record.bits == (4 if "int4" in config["mode"] else 8)
            assert record.scale.dtype == np.float16 and record.arithmetic == "float32"
            np.testing.assert_array_equal(_ov_order(record.values, config["op"]), q[d].reshape(rows, cols))
            spread = np.broadcast_to(scale[d], q[d].shape).reshape(rows, cols).astype(np.float16)
            zeros = np.broadcast_to(zero[d], q[d].shape).reshape(rows, cols)
            for held, expected in ((record.scale, spread), (record.zero_point, zeros)):
                spread_held = np.broadcast_to(record.broadcast(held), (rows, cols))
                np.testing.assert_array_equal(_ov_order(spread_held, config["op"]), expected)
            group = config["group_size"]
            assert record.granularity == ("per block" if group > 0 and group < cols else "per channel")


def test_nncfs_float16_chain_is_what_openvino_computes_bit_for_bit():
    """OpenVINO computes NNCF's float16 chain in float32: the one-hot RNN's stored outputs (OpenVINO CPU) are its W
    and R, equal bit for bit to the records' float view, and not to the chain rounded to float16."""
    truth = np.load(NNCF / "nncf_rnn_relu_onehot_int8_asym.truth.npz")
    y = truth["Y"][:, 0, 0, :]  # [2 (I + H), H]: relu(+-W[:, k]), then relu(+-R[:, k])
    size = truth["X"].shape[2]
    revealed = {
        "W": (y[:size] - y[size : 2 * size]).T,
        "R": (y[2 * size :][: y.shape[1]] - y[2 * size + y.shape[1] :]).T,
    }
    (layer,) = gp.load(NNCF / "nncf_rnn_relu_onehot_int8_asym.xml").layers
    for role, exact in revealed.items():
        record = layer.directions[0].quantized(role)
        np.testing.assert_array_equal(record.dequantized(), exact)
        np.testing.assert_array_equal(getattr(layer.directions[0], role), exact)
        in_float16 = (record.values.astype(np.float16) - record.broadcast(record.zero_point)) * record.broadcast(
            record.scale
        )
        assert not np.array_equal(in_float16.astype(np.float32), exact)  # the arithmetic matters


@pytest.mark.parametrize("artifact", sorted(NNCF_CASES))
def test_nncf_irs_convert_with_their_integers_to_onnx_and_openvino(artifact, tmp_path):
    """NNCF's integers move exactly (``repacked``): to ONNX as INT4/UINT4/UINT8 QDQ with the float16 scale widened by
    a Cast (onnxruntime then computes OpenVINO's float32 product), to OpenVINO in NNCF's own form, to Core ML as
    constexpr ops with the scale widened; onnxruntime runs the ONNX file to OpenVINO CPU's stored outputs."""
    truth = dict(np.load(NNCF / artifact.replace(".xml", ".truth.npz")))
    inputs = {k: v for k, v in truth.items() if k in ("X", "H0")}
    four = "int4" in NNCF_CASES[artifact]["config"]["mode"]
    for suffix in (".onnx", ".xml", ".mlpackage"):
        out = tmp_path / f"out{suffix}"
        result = gp.convert(NNCF / artifact, out)
        assert result.passed, result.to_text()
        (found,) = [f for fs in result.findings.values() for f in fs if f.feature == "quantization"]
        assert found.status.value == "repacked" and "float16 scale" in found.detail
        assert max(o.max_abs_error for o in result.verification.outputs) < 2e-7
    written = onnx.load(str(tmp_path / "out.onnx"))
    types = {t.name: t.data_type for t in written.graph.initializer}
    kinds = {types[n.input[0]] for n in written.graph.node if n.op_type == "DequantizeLinear"}
    assert kinds <= ({TensorProto.INT4, TensorProto.UINT4} if four else {TensorProto.UINT8}) and kinds
    assert written.opset_import[0].version == (21 if four else 14)
    session = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    fed = dict(zip([i.name for i in session.get_inputs()], inputs.values()))  # gatepack names them LAYER/X, ...
    for value, name in zip(session.run(None, fed), ("Y", "Y_h", "Y_c")):
        expected = truth[name].transpose(0, 2, 1, 3) if name == "Y" else truth[name]  # OpenVINO's [N, D, S, H]
        np.testing.assert_allclose(value, expected, atol=2e-7, rtol=0)
    elements = {layer.get("name"): layer.find("data").get("element_type") for layer in _consts(tmp_path / "out.xml")}
    source = {layer.get("name"): layer.find("data").get("element_type") for layer in _consts(NNCF / artifact)}
    assert sorted(e for e in elements.values() if e in ("u4", "i4", "u8", "i8", "f16")) == sorted(
        e for e in source.values() if e in ("u4", "i4", "u8", "i8", "f16")
    )


def _consts(xml: Path) -> list:
    return [layer for layer in ElementTree.parse(xml).getroot().iter("layer") if layer.get("type") == "Const"]


@pytest.mark.parametrize("artifact", sorted(QDQ4_CASES))
def test_onnxruntimes_int4_qdq_is_read_exactly_and_converts(artifact, tmp_path):
    """onnxruntime's INT4 weights (ONNX's DequantizeLinear at opset 21, its contrib one below) and the per-block
    UINT4 model: the records hold the stored integers; OpenVINO keeps them (i4/u4) and runs to onnxruntime's truth;
    ONNX keeps them, below opset 21 with onnxruntime's contrib DequantizeLinear as its quantizer wrote them."""
    proto = onnx.load(str(QDQ4 / artifact))
    stored = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    (layer,) = gp.load(QDQ4 / artifact).layers
    record = layer.directions[-1].quantized("W")
    integers = stored["W_quantized"]
    assert integers.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)) and record.bits == 4
    np.testing.assert_array_equal(record.values, integers[-1].astype(np.int16))
    truth = dict(np.load(QDQ4 / artifact.replace(".onnx", ".truth.npz")))
    result = gp.convert(QDQ4 / artifact, tmp_path / "out.xml")
    assert result.passed and max(o.max_abs_error for o in result.verification.outputs) < 2e-7, result.to_text()
    assert {"u4", "i4"} & {c.find("data").get("element_type") for c in _consts(tmp_path / "out.xml")}
    assert gp.convert(QDQ4 / artifact, tmp_path / "out.onnx").passed
    written = onnx.load(str(tmp_path / "out.onnx"))
    domains = {n.domain or "ai.onnx" for n in written.graph.node if n.op_type == "DequantizeLinear"}
    assert domains == set(QDQ4_CASES[artifact]["config"]["dequantize_linear_domains"])  # contrib below opset 21
    for name, value in _ort(tmp_path / "out.onnx", {"X": truth["X"]}).items():
        np.testing.assert_allclose(value, truth[name], atol=1e-6, rtol=0)


def _float16_dq_rnn(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """An ONNX RNN (ReLU, one step, no bias) whose W and R are DequantizeLinear of int8 with float16 scales (output
    float16), then Cast to float; fed ± one-hot X and initial_h, its Y is W, R as onnxruntime computes them."""
    rng = np.random.default_rng(11)
    size = 4
    nodes, inits = [], []
    for role in ("W", "R"):
        inits += [
            numpy_helper.from_array(rng.integers(-127, 128, (1, size, size)).astype(np.int8), f"{role}_q"),
            numpy_helper.from_array(rng.uniform(0.001, 0.02, size).astype(np.float16), f"{role}_scale"),
            numpy_helper.from_array(np.zeros(size, np.int8), f"{role}_zero"),
        ]
        nodes += [
            helper.make_node("DequantizeLinear", [f"{role}_q", f"{role}_scale", f"{role}_zero"], [f"{role}16"], axis=1),
            helper.make_node("Cast", [f"{role}16"], [role], to=TensorProto.FLOAT),
        ]
    n = 4 * size
    nodes.append(helper.make_node("RNN", ["X", "W", "R", "", "", "H0"], ["Y"], hidden_size=size, activations=["Relu"]))
    graph = helper.make_graph(
        nodes,
        "rnn",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, n, size]) for k in ("X", "H0")],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, n, size])],
        inits,
    )
    path = tmp_path / "rnn_dq16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))
    eye, zeros = np.eye(size, dtype=np.float32), np.zeros((2 * size, size), np.float32)
    x, h0 = np.concatenate([eye, -eye, zeros]), np.concatenate([zeros, eye, -eye])
    return path, {"X": x[None], "H0": h0[None]}


def _revealed(y: np.ndarray, size: int) -> dict[str, np.ndarray]:
    y = y.reshape(-1, size)
    return {"W": (y[:size] - y[size : 2 * size]).T, "R": (y[2 * size : 3 * size] - y[3 * size :]).T}


def test_a_float16_dequantize_linear_is_float16_arithmetic_kept_by_onnx_and_openvino(tmp_path):
    """DequantizeLinear with a float16 scale outputs float16: read as float16 arithmetic, whose float view is
    onnxruntime's bit for bit; ONNX writes the same form back and OpenVINO an explicit float16 rounding, each
    revealing the same weights bit for bit on its runtime."""
    import openvino as ov

    path, feeds = _float16_dq_rnn(tmp_path)
    (layer,) = gp.load(path).layers
    record = layer.directions[0].Wq
    assert record.arithmetic == "float16" and record.scale.dtype == np.float16
    exact = _revealed(_ort(path, feeds)["Y"], 4)
    for role in ("W", "R"):
        np.testing.assert_array_equal(layer.directions[0].quantized(role).dequantized(), exact[role])
    for suffix in (".onnx", ".xml"):
        out = tmp_path / f"out{suffix}"
        assert gp.convert(path, out).passed
    assert {n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node} >= {"DequantizeLinear", "Cast"}
    for role, value in _revealed(_ort(tmp_path / "out.onnx", feeds)["Y"], 4).items():
        np.testing.assert_array_equal(value, exact[role])
    with pytest.raises(gp.RefusedError, match="float16 arithmetic"):  # a float32 program cannot round there
        gp.convert(path, tmp_path / "out.mlpackage")
    compiled = ov.Core().compile_model(str(tmp_path / "out.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    y = compiled({k: v for k, v in feeds.items()})[compiled.output(0)]
    for role, value in _revealed(np.asarray(y), 4).items():
        np.testing.assert_array_equal(value, exact[role])


def _transcribed_int4(weights: np.ndarray, block: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric int4 scheme written out here: integers in -7..7 and a scale per row (or per block of a row)."""
    rows, cols = weights.shape
    groups = weights.reshape(rows, 1 if block is None else cols // block, -1)
    scale = (np.abs(groups).max(axis=2) / 7).astype(np.float32)
    q = np.clip(np.rint(groups / scale[:, :, None]), -7, 7).astype(np.int8).reshape(rows, cols)
    return q, scale


@pytest.mark.parametrize("block", [None, 2])
def test_quantize_weights_int4_stores_packed_integers_as_transcribed(block, tmp_path):
    """burn's bidirectional GRU with int4 per channel and per block of 2: ONNX holds INT4 initializers (two a byte,
    opset 21) equal to the transcription, OpenVINO i4 Constants; both pass the gate against the float source."""
    source = onnx.load(str(GRU))
    floats = {t.name: numpy_helper.to_array(t) for t in source.graph.initializer}
    (node,) = [n for n in source.graph.node if n.op_type == "GRU"]
    result = gp.convert(GRU, tmp_path / "gru.onnx", quantize_weights="int4", quantize_block_size=block)
    assert result.passed, result.to_text()
    written = onnx.load(str(tmp_path / "gru.onnx"))
    assert written.opset_import[0].version == 21
    stored = {t.name: t for t in written.graph.initializer}
    for role, name in zip(("W", "R"), node.input[1:3]):
        for d in range(2):
            (tensor,) = [t for k, t in stored.items() if k.endswith(f".{role}_quantized_d{d}")]
            assert tensor.data_type == TensorProto.INT4 and len(tensor.raw_data) == -(-np.prod(tensor.dims) // 2)
            expected, scale = _transcribed_int4(floats[name][d], block)
            np.testing.assert_array_equal(numpy_helper.to_array(tensor)[0].astype(np.int8), expected)
            (scales,) = [numpy_helper.to_array(t) for k, t in stored.items() if k.endswith(f".{role}_scale_d{d}")]
            np.testing.assert_allclose(scales.reshape(scale.shape[0], -1), scale, rtol=1e-6)
    assert gp.convert(GRU, tmp_path / "gru.xml", quantize_weights="int4", quantize_block_size=block).passed
    elements = {c.find("data").get("element_type") for c in _consts(tmp_path / "gru.xml")}
    assert "i4" in elements and "i8" not in elements
    (found,) = [f for fs in result.findings.values() for f in fs if f.status.value == "lossy"]
    assert "4 bits per weight" in found.detail


@pytest.mark.parametrize("block", [None, 2])
def test_quantize_weights_int4_to_core_ml_holds_the_transcribed_integers(block, tmp_path):
    """burn's bidirectional GRU with int4 to Core ML (iOS18: constexpr_blockwise_shift_scale): coremltools' own
    package and program loaders read int4 constants (packed two a byte in weight.bin) whose rows are the
    transcription's (in Core ML's gate order: compared as sets of rows), and the package passes the gate against
    the float source."""
    from gatepack.converters.formats.coreml.common import _ct

    ct = _ct()
    from coremltools.converters.mil.frontend.milproto.load import load
    from coremltools.converters.mil.mil import types

    source = onnx.load(str(GRU))
    floats = {t.name: numpy_helper.to_array(t) for t in source.graph.initializer}
    (node,) = [n for n in source.graph.node if n.op_type == "GRU"]
    out = tmp_path / "gru.mlpackage"
    result = gp.convert(GRU, out, to="coreml", quantize_weights="int4", quantize_block_size=block, allow_lossy=True)
    assert result.passed, result.to_text()
    mlmodel = ct.models.MLModel(str(out), skip_model_load=True)
    spec = mlmodel.get_spec()
    program = load(spec, specification_version=spec.specificationVersion, file_weights_dir=mlmodel.weights_dir)
    held = {
        op.name: op.inputs["data"]
        for op in program.functions["main"].operations
        if op.op_type == "constexpr_blockwise_shift_scale"
    }
    assert {types.builtin_to_string(var.dtype) for var in held.values()} == {"int4"}
    for role, name in zip(("W", "R"), node.input[1:3]):
        for d in range(2):
            expected, _ = _transcribed_int4(floats[name][d], block)
            (got,) = [np.asarray(v.val).astype(np.int8) for k, v in held.items() if k.endswith(f"_{role}{d}")]
            assert sorted(map(bytes, got)) == sorted(map(bytes, expected)), (role, d)


def test_block_sizes_that_do_not_fit_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="does not divide"):
        gp.convert(GRU, tmp_path / "g.onnx", quantize_weights="int4", quantize_block_size=3)
    with pytest.raises(UsageError, match="applies to --quantize-weights"):
        gp.convert(GRU, tmp_path / "g.onnx", quantize_block_size=2)
    with pytest.raises(UsageError, match="not a number of columns"):
        gp.convert(GRU, tmp_path / "g.onnx", quantize_weights="int4", quantize_block_size=0)


def test_report_with_quantize_weights_measures_what_convert_writes(tmp_path):
    """``report --quantize-weights int4 --quantize-block-size 2``: per target the bits, the weights' bytes and the
    gate's error per output, equal to what ``convert`` with the same options measures; the targets convert refuses
    are refused in the report (``unsupported``) with convert's reason. The JSON follows the report's schema."""
    import jsonschema

    from gatepack.converters.reporting import report_schema

    asked = {"quantize_weights": "int4", "quantize_block_size": 2}
    found = gp.report(GRU, ["onnx", "bnns"], **asked)
    jsonschema.Draft202012Validator(report_schema()).validate(found.to_json())
    result = gp.convert(GRU, tmp_path / "gru.onnx", **asked)
    measured = found.quantized["onnx"]
    gated = [o for o in result.verification.outputs if o.output.endswith("vs the float source")]
    assert measured.verdict == "passed" and measured.bits == 4 and measured.before == 2304
    assert [o.max_error for o in measured.outputs] == [o.max_abs_error for o in gated]
    assert measured.artifact_bytes == (tmp_path / "gru.onnx").stat().st_size
    assert found.layers[0].targets["onnx"].status.value == "lossy"
    (asked_finding,) = [f for fs in result.findings.values() for f in fs if f.status.value == "lossy"]
    assert f"{measured.before:,} -> {measured.after:,} bytes" in asked_finding.detail
    with pytest.raises(gp.RefusedError) as refused:
        gp.convert(GRU, tmp_path / "gru_bnns", to="bnns", **asked)
    assert found.quantized["bnns"].verdict == "refused" and found.quantized["bnns"].reason in refused.value.message
    assert found.layers[0].targets["bnns"].status.value == "unsupported"
    text = found.to_text()
    assert "quantized for onnx: int4 in blocks of 2: 4 bits per weight" in text and "accuracy gate passed" in text


def test_cli_report_takes_quantize_weights():
    from click.testing import CliRunner

    from gatepack.cli import main

    command = ["report", str(GRU), "--to", "bnns", "--quantize-weights", "int4"]
    done = CliRunner().invoke(main, [*command, "--json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["quantized"]["bnns"]["verdict"] == "refused"
    bad = CliRunner().invoke(main, [*command, "--quantize-block-size", "3"], catch_exceptions=False)
    assert bad.exit_code == 2 and "does not divide" in bad.output and "Traceback" not in bad.output

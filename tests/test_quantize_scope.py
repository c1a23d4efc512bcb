"""``--quantize-weights-scope model`` (API ``quantize_weights_scope=``, converters/formats/onnx/model_weights.py): a
whole model's MatMul/Gemm/Conv/Gather weights quantized with the recurrent layers' scheme, each target in its own
form (ONNX QDQ, OpenVINO i8 constants, Core ML constexpr ops), run on the target's runtime and judged by the accuracy
gate against the float source; LiteRT, DirectML and BNNS refuse the scope.

Oracles: onnxruntime's own quantizer (``quantize_static``, QDQ, per channel, int8) for the integers, scales and axes
of the MatMul, Gemm and Conv weights; a per-row transcription for the embedding table; onnxruntime and OpenVINO's CPU
plugin (f32) running the same artifact's two forms against each other; the float source run by onnxruntime.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import artifact_name
from onnx import TensorProto, helper, numpy_helper

import gatepack.converters as gp
from gatepack.converters.errors import RefusedError, UsageError

REAL = Path(__file__).resolve().parent.parent / "fixtures/realmodels"
DTLN = REAL / "dtln_model_1_lstm.onnx"  # opset 11: one MatMul (dense_2 128 x 257) after two LSTMs
GTCRN = REAL / "gtcrn_stream_simple.onnx"  # opset 11, streaming: 14 GRUs, 12 MatMuls, 11 Convs
QUANTIZED = {"table": 0, "conv_w": 0, "proj": 1, "head": 0}  # the small model's weights -> output-channel axis
SCOPE = {"quantize_weights": "int8", "quantize_weights_scope": "model"}


def small_model(opset: int = 13, rows: int = 100) -> onnx.ModelProto:
    """tokens [1, 5] -> Gather (table [rows, 32]) -> Conv (W [48, 32, 3]) -> GRU (H 32) -> MatMul (B [32, 80]) -> Gemm
    (B [40, 80], transB) -> MatMul (B [40, 8]: 320 elements, under the minimum: stays float)."""
    rng = np.random.default_rng(7)

    def draw(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    hidden = 32
    weights = {
        "table": draw(rows, 32),
        "conv_w": draw(48, 32, 3),
        "conv_b": draw(48),
        "gru_w": draw(1, 3 * hidden, 48),
        "gru_r": draw(1, 3 * hidden, hidden),
        "gru_b": draw(1, 6 * hidden),
        "proj": draw(32, 80),
        "head": draw(40, 80),
        "head_b": draw(40),
        "small": draw(40, 8),
        "axes1": np.array([1], np.int64),
        "flat": np.array([-1, 80], np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["table", "tokens"], ["emb"], name="embed"),
        helper.make_node("Transpose", ["emb"], ["emb_t"], perm=[0, 2, 1]),
        helper.make_node("Conv", ["emb_t", "conv_w", "conv_b"], ["conv"], name="conv", pads=[1, 1]),
        helper.make_node("Transpose", ["conv"], ["seq"], perm=[2, 0, 1]),
        helper.make_node(
            "GRU",
            ["seq", "gru_w", "gru_r", "gru_b"],
            ["y", "y_h"],
            name="gru",
            hidden_size=hidden,
            linear_before_reset=1,
        ),
        helper.make_node("Squeeze", ["y", "axes1"], ["y_s"]),
        helper.make_node("MatMul", ["y_s", "proj"], ["p"], name="proj"),
        helper.make_node("Reshape", ["p", "flat"], ["p2"]),
        helper.make_node("Gemm", ["p2", "head", "head_b"], ["logits"], name="head", transB=1),
        helper.make_node("MatMul", ["logits", "small"], ["out"], name="small"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, 5])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [5, 8]),
            helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, 1, hidden]),
        ],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.onnx"
    onnx.save(small_model(), str(path))
    return path


def _initializers(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _dequantized_by(path: Path) -> dict[str, onnx.NodeProto]:
    """Each tensor a DequantizeLinear computes from an initializer -> that node."""
    proto = onnx.load(str(path))
    return {n.output[0]: n for n in proto.graph.node if n.op_type == "DequantizeLinear"}


def _onnxruntime_quantized(source: Path, tmp_path: Path) -> dict[str, np.ndarray]:
    """onnxruntime's quantize_static (QDQ, per channel, int8 weights) of ``source``'s MatMul/Gemm/Conv: its
    initializers."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Tokens(CalibrationDataReader):
        def __init__(self) -> None:
            self.calls = 0

        def get_next(self):
            self.calls += 1
            return {"tokens": (np.arange(5, dtype=np.int64)[None] * 7) % 100} if self.calls <= 2 else None

    out = tmp_path / "onnxruntime_qdq.onnx"
    quantize_static(
        str(source),
        str(out),
        Tokens(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul", "Gemm", "Conv"],
    )
    return _initializers(out)


def test_onnx_writes_the_weights_as_onnxruntimes_quantizer_does_and_passes_the_gate(small, tmp_path):
    out = tmp_path / "small_int8.onnx"
    result = gp.convert(small, out, **SCOPE)
    assert result.passed, result.to_text()
    stored, nodes = _initializers(out), _dequantized_by(out)
    oracle = _onnxruntime_quantized(small, tmp_path)
    for name, axis in QUANTIZED.items():
        node = nodes[name]  # the float weight is computed under its own name
        values, scale = stored[node.input[0]], stored[node.input[1]]
        assert values.dtype == np.int8 and name not in stored
        assert helper.get_attribute_value(node.attribute[0]) == axis - values.ndim and node.domain == ""
        if f"{name}_quantized" in oracle:  # (onnxruntime leaves the Gather's table alone here)
            assert np.array_equal(values, oracle[f"{name}_quantized"]), name
            assert np.array_equal(scale, oracle[f"{name}_scale"]), name
    table = _initializers(small)["table"]  # the embedding table, transcribed per row
    scale = (np.abs(table).max(axis=1) / 127).astype(np.float32)
    assert np.array_equal(stored[nodes["table"].input[0]], np.clip(np.rint(table / scale[:, None]), -127, 127))
    assert stored["small"].dtype == np.float32 and "small" not in nodes  # 320 elements: under the minimum
    text = result.to_text()
    assert "4 weight(s) of Conv, Gather, Gemm, MatMul quantized int8 per output channel" in text
    assert "1 left float (1 tiny)" in text and "measured vs the float source: out max" in text
    assert out.stat().st_size < 0.4 * small.stat().st_size


def test_openvino_holds_i8_constants_and_computes_what_onnxruntime_computes_of_the_qdq_form(small, tmp_path):
    import openvino as ov

    ir, qdq = tmp_path / "small_int8.xml", tmp_path / "small_int8.onnx"
    for out in (ir, qdq):
        result = gp.convert(small, out, **SCOPE)
        assert result.passed, result.to_text()
    core = ov.Core()
    model = core.read_model(str(ir))
    int8 = {
        op.get_friendly_name()
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.i8
    }
    assert {f"{name}_quantized" for name in QUANTIZED} <= int8
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    tokens = np.array([[3, 17, 99, 0, 42]], np.int64)
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])  # as a user's default session
    expected = session.run(["out", "y_h"], {"tokens": tokens})
    got = compiled({"tokens": tokens})
    for name, value in zip(("out", "y_h"), expected):
        np.testing.assert_allclose(got[name], value, atol=1e-4, rtol=1e-4)


def _constexpr_ops(package: Path) -> dict[str, str]:
    """The package's constexpr ops: output name -> op type."""
    import coremltools as ct

    spec = ct.models.MLModel(str(package), skip_model_load=True).get_spec()
    return {
        op.outputs[0].name: op.type
        for function in spec.mlProgram.functions.values()
        for block in function.block_specializations.values()
        for op in block.operations
        if op.type.startswith("constexpr_")
    }


def test_coreml_writes_constexpr_ops_verified_on_the_mil_interpreter(small, tmp_path):
    out = tmp_path / "small_int8.mlpackage"
    result = gp.convert(small, out, **SCOPE)
    assert result.passed, result.to_text()
    ops = _constexpr_ops(out)
    assert {f"{name}_quantized" for name in QUANTIZED} <= set(ops)
    assert set(ops.values()) == {"constexpr_affine_dequantize"}  # iOS16: int8 per channel


@pytest.mark.parametrize("target", ["litert", "directml", "bnns"])
def test_targets_without_the_scope_refuse_it_with_the_alternative(small, tmp_path, target):
    with pytest.raises(RefusedError, match="--quantize-weights-scope model: .*convert to onnx or openvino or coreml"):
        gp.convert(small, tmp_path / artifact_name(target, "small"), to=target, **SCOPE)


def test_the_layers_scope_leaves_the_matmul_weights_float(small, tmp_path):
    out = tmp_path / "small_layers.onnx"
    assert gp.convert(small, out, quantize_weights="int8").passed
    stored, nodes = _initializers(out), _dequantized_by(out)
    assert all(stored[name].dtype == np.float32 and name not in nodes for name in QUANTIZED)


def test_with_external_data_the_large_integers_go_to_the_data_file(tmp_path):
    source = tmp_path / "big.onnx"
    big = small_model(rows=2100)  # the table's int8: 67,200 bytes, over the writer's 64 KiB for external data
    onnx.save(big, str(source), save_as_external_data=True, location="big.onnx.data", size_threshold=1024)
    out = tmp_path / "big_int8.onnx"
    assert gp.convert(source, out, **SCOPE).passed
    stored = {t.name: t for t in onnx.load(str(out), load_external_data=False).graph.initializer}
    table = stored[_dequantized_by(out)["table"].input[0]]
    assert table.data_type == TensorProto.INT8 and table.data_location == TensorProto.EXTERNAL
    assert numpy_helper.to_array(table, str(tmp_path)).shape == (2100, 32)


def test_usage_errors(small, tmp_path):
    with pytest.raises(UsageError, match="applies to --quantize-weights"):
        gp.convert(small, tmp_path / "a.onnx", quantize_weights_scope="model")
    with pytest.raises(UsageError, match="is not one of layers, model"):
        gp.convert(small, tmp_path / "a.onnx", quantize_weights="int8", quantize_weights_scope="all")
    with pytest.raises(UsageError, match="this model is written as its recurrent layers alone"):
        gp.convert(small, tmp_path / "a.onnx", layers_only=True, **SCOPE)


def test_blocks_below_opset_21_are_refused_for_qdq_targets(small, tmp_path):
    with pytest.raises(
        RefusedError, match="per-block DequantizeLinear needs opset 21; the whole model keeps its opset 13"
    ):
        gp.convert(small, tmp_path / "a.xml", quantize_block_size=16, **SCOPE)


def test_blocks_at_opset_21_run_on_onnxruntime(tmp_path):
    source = tmp_path / "small21.onnx"
    onnx.save(small_model(21), str(source))
    out = tmp_path / "small21_int4.onnx"
    result = gp.convert(source, out, quantize_weights="int4", quantize_block_size=16, quantize_weights_scope="model")
    assert result.passed, result.to_text()
    nodes, stored = _dequantized_by(out), onnx.load(str(out)).graph.initializer
    types = {t.name: t.data_type for t in stored}
    assert types[nodes["proj"].input[0]] == TensorProto.INT4
    assert {a.name: helper.get_attribute_value(a) for a in nodes["proj"].attribute} == {"axis": -2, "block_size": 16}


@pytest.mark.parametrize("opset,scheme", [(13, {}), (21, {"quantize_weights": "int4", "quantize_block_size": 16})])
def test_onnxruntimes_default_session_computes_the_float_view(opset, scheme, tmp_path):
    """onnxruntime's default session (prepacked weights, every optimisation) computes the artifact as a session with
    no optimisation does: the float view, which verification judged; a DequantizeLinear -> MatMul it rewrote as
    MatMulNBits would quantize the MatMul's input at run time (0.04 off on this model's ``out``)."""
    source = tmp_path / "small.onnx"
    onnx.save(small_model(opset), str(source))
    out = tmp_path / "small_q.onnx"
    assert gp.convert(source, out, **{**SCOPE, **scheme}).passed
    tokens = {"tokens": np.array([[3, 17, 99, 0, 42]], np.int64)}
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    optimised = ort.SessionOptions()
    optimised.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    runs = [
        ort.InferenceSession(str(out), o, providers=["CPUExecutionProvider"]).run(None, tokens)
        for o in (plain, optimised)
    ]
    for reference, default in zip(*runs):
        np.testing.assert_allclose(default, reference, atol=1e-5, rtol=1e-5)
    assert "MatMulNBits" not in {n.op_type for n in onnx.load(str(tmp_path / "optimised.onnx")).graph.node}


def _stored_int8(target: str, out: Path, weight: str) -> bool:
    """Whether ``weight`` (a MatMul's B) is stored as int8 in the artifact at ``out``."""
    if target == "onnx":
        node = _dequantized_by(out)[weight]
        return _initializers(out)[node.input[0]].dtype == np.int8
    if target == "openvino":
        import openvino as ov

        return any(
            op.get_friendly_name() == f"{weight}_quantized" and op.get_element_type() == ov.Type.i8
            for op in ov.Core().read_model(str(out)).get_ordered_ops()
        )
    return _constexpr_ops(out).get(f"{weight}_quantized".replace("/", "_").replace(":", "_")) is not None


@pytest.mark.parametrize("target,suffix", [("onnx", ".onnx"), ("openvino", ".xml"), ("coreml", ".mlpackage")])
@pytest.mark.parametrize("source,weight", [(DTLN, "dense_2/kernel:0"), (GTCRN, "onnx::MatMul_3932")])
def test_real_models_hold_their_matmul_weights_as_int8_within_the_gate_over_frames(
    source, weight, target, suffix, tmp_path
):
    out = tmp_path / f"{source.stem}_int8{suffix}"
    result = gp.convert(source, out, frames=10, **SCOPE)
    assert result.passed, result.to_text()
    assert _stored_int8(target, out, weight)
    measured = [o for o in result.verification.outputs if o.output.endswith("vs the float source")]
    assert {o.layer for o in measured} == {"(whole model)", "streamed"}  # one call, and over the frames
    assert all(0 < o.max_abs_error <= o.atol for o in measured)
    files = [out, out.with_suffix(".bin"), *(out.rglob("*") if out.is_dir() else [])]
    size = sum(p.stat().st_size for p in files if p.is_file())
    print(f"{source.name} -> {target}: {size:,} bytes (float source {source.stat().st_size:,})")


def test_cli_scope(small, tmp_path):
    run = [sys.executable, "-m", "gatepack", "convert", str(small)]
    done = subprocess.run([*run, str(tmp_path / "a.onnx"), "--quantize-weights", "int8", "--quantize-weights-scope",
                           "model", "-q"], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused = subprocess.run([*run, str(tmp_path / "a.tflite"), "--quantize-weights", "int8",
                              "--quantize-weights-scope", "model"], capture_output=True, text=True)  # fmt: skip
    assert refused.returncode == 4 and "LiteRT's whole-model writer" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_report_notes_the_other_weights_and_measures_each_target(small):
    found = gp.report(small, ["onnx", "litert"], quantize_weights="int8", quantize_weights_scope="model")
    details = [f.detail for f in found.layers[0].targets["onnx"].findings]
    assert any("4 weight(s) of Conv, Gather, Gemm, MatMul quantized int8" in d for d in details)
    assert found.quantized["onnx"].verdict == "passed"
    assert (
        found.quantized["litert"].verdict == "refused"
        and "LiteRT's whole-model writer" in found.quantized["litert"].reason
    )

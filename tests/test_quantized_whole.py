"""A whole model as onnxruntime's ``quantize_dynamic`` writes it (token ids -> int8 Gather + DequantizeLinear ->
DynamicQuantizeLinear + ConvInteger -> Relu -> DynamicQuantizeLSTM (bidirectional) -> DynamicQuantizeLinear +
MatMulInteger -> DynamicQuantizeLSTM -> MatMulInteger: fixtures/producers/ort_quantized_whole) converted whole to
ONNX, ONNX for DirectML, OpenVINO and Core ML, each passing the accuracy gate, and the written file run on its own
runtime (onnxruntime; OpenVINO CPU at f32; the MIL interpreter) against the producers' outputs.

Oracles: the float torch module the model was quantized from (``torch:frames``: within the quantization noise) and
onnxruntime's outputs of the quantized model, computed on an x86 CPU without VNNI whose uint8 x int8 kernel
saturates 16-bit sums (docs/conventions.md §9): within that kernel's measured gap.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import gatepack as gp
from gatepack.cli import main

pytest.importorskip("coremltools")
pytest.importorskip("openvino")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "ort_quantized_whole"
SOURCE = HERE / "ort_tts_like_qint8.onnx"
TRUTH = dict(np.load(HERE / "ort_tts_like_qint8.truth.npz"))
# torch's float module vs the quantized model with exact integer products: 0.00145 measured
QUANTIZATION_NOISE = 2e-3
# the stored onnxruntime outputs (its saturating int8 kernel) vs the exact integer products: 0.0082 measured
SATURATION_GAP = 1e-2

TARGETS = {
    "onnx": ("m.onnx", {}),
    "onnx for directml": ("m.onnx", {"runtime": "directml", "dequantize": True}),
    "openvino": ("m.xml", {"dequantize": True}),
    "coreml": ("m.mlpackage", {"dequantize": True}),
}


def test_the_fixture_is_what_quantize_dynamic_writes():
    import onnx

    ops = {n.op_type for n in onnx.load(str(SOURCE)).graph.node}
    want = {"DynamicQuantizeLSTM", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DequantizeLinear"}
    assert want <= ops
    assert json.loads((HERE / "manifest.json").read_text())[SOURCE.name]["versions"]["onnxruntime"]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_quantized_whole_model_converts_whole_gated_and_runs_on_its_runtime(target, tmp_path):
    name, options = TARGETS[target]
    out = tmp_path / name
    result = gp.convert(SOURCE, out, **options)
    verification = result.verification
    assert result.whole and verification.passed and not verification.incomplete, verification.to_text()
    frames = [o for o in verification.outputs if o.output.startswith("frames")]
    assert frames and all(o.passed for o in frames)
    if options.get("dequantize"):  # exact against the dequantized twin, within the noise of the quantized source
        twin = [o for o in frames if "dequantized" in o.output]
        assert twin and max(o.max_abs_error for o in twin) <= 1e-5
    assert not any(o.judgement for o in verification.outputs)  # no value on a rounding boundary: float tolerances
    got = gp.run(out, {"ids": TRUTH["ids"]})["frames"]
    assert np.abs(got - TRUTH["torch:frames"]).max() <= QUANTIZATION_NOISE
    assert np.abs(got - TRUTH["frames"]).max() <= SATURATION_GAP


def test_one_tensor_read_as_both_initial_states_is_one_input_of_the_node_run_alone(tmp_path):
    """torch.onnx's zero state (one ConstantOfShape) feeds initial_h and initial_c of each LSTM: the DirectML
    verification, running each recurrent node alone on onnxruntime, declared it twice ("Duplicate definition-site",
    exit 6)."""
    result = CliRunner().invoke(
        main,
        ["convert", str(SOURCE), "--to", "onnx", "--for", "directml", "--dequantize", "-o", str(tmp_path / "d.onnx")],
    )
    assert result.exit_code == 0, result.output
    assert "Duplicate definition-site" not in result.output


@pytest.mark.parametrize("op", ["MatMulInteger", "ConvInteger"])
def test_an_integer_product_with_int8_weights_runs_as_onnx_defines_it(op, tmp_path):
    """quantize_dynamic's QInt8 MatMul/Conv: DynamicQuantizeLinear (uint8) times int8 weights beyond +-64, which
    onnxruntime's uint8 x int8 kernel saturates on x86 CPUs without VNNI (text2tashkeel's bilstm.int8.onnx: 0.70 off
    its exact products). gatepack runs it with the weights and zero point re-encoded as uint8; oracle: the integer
    products in NumPy, as ONNX defines them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weights = rng.integers(-127, 128, (16, 8) if op == "MatMulInteger" else (8, 16, 1)).astype(np.int8)
    zero_point = np.array(3, np.int8)  # (onnxruntime refuses a per-channel one in ConvInteger)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zp"]),
        helper.make_node(op, ["q", "w", "zp", "wz"], ["y32"]),
        helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT),
    ]
    shape = [4, 16] if op == "MatMulInteger" else [1, 16, 5]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(zero_point, "wz")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    x = rng.uniform(0, 1, shape).astype(np.float32)
    x.flat[0] = 0  # the range [0, 1]: zero point 0, q = round(x * 255)
    q = np.round(x / np.float32(x.max() / 255)).astype(np.int64)
    w = weights.astype(np.int64) - int(zero_point)
    exact = q @ w if op == "MatMulInteger" else np.einsum("oc,nct->not", w[..., 0], q)
    got = gp.run(path, {"x": x})["y"]
    assert np.array_equal(got, exact.astype(np.float32))

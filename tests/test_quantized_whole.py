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
    said = any("quantizes activations at run time" in note for note in verification.notes)
    assert said == (not name.endswith(".onnx"))  # another runtime than the source's
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

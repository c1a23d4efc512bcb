"""A whole model that quantizes activations at run time, judged in quantization steps (``converters.quantizer_steps``).

The fixture (fixtures/producers/ort_quantized_whole/ort_crnn_like_quint8.onnx, onnxruntime's ``quantize_dynamic`` of
a small torch CRNN: Conv2d+SiLU, bidirectional LSTM, Linear) is drawn at width 400, where one SiLU value of the float
twin lands on a rounding boundary of the next ``DynamicQuantizeLinear``: OpenVINO and the MIL interpreter compute it
one float32 step away from onnxruntime, and their logits differ from onnxruntime's by 1.7e-4 (at width 7: 1.5e-8).
Oracles: onnxruntime running the source (and its copies with each quantizer's input moved by one float32 step), the
stored outputs of onnxruntime and torch. The deliberate errors (a 0.5% error in one gate's weights, two gates
swapped, a 0.5% error in one convolution's weight scale) must still fail.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import corrupt_openvino_writer
from onnx import numpy_helper

import gatepack as gp
from gatepack.converters import accuracy
from gatepack.converters.errors import VerificationError
from gatepack.converters.formats.onnx.jitter import jittered_copy
from gatepack.converters.verification import GivenInputs, verify_whole

pytest.importorskip("openvino")

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "ort_quantized_whole"
SOURCE = HERE / "ort_crnn_like_quint8.onnx"
TRUTH = dict(np.load(HERE / "ort_crnn_like_quint8.truth.npz"))
WIDE = {"image": [1, 1, 16, 400]}  # the width where the twin's SiLU output sits on a rounding boundary
NOISE = 2e-3  # the quantized source vs torch's float module: 8.1e-4 measured
# the stored onnxruntime outputs (its saturating int8 LSTM kernel, docs/conventions.md §9) vs the exact integer
# products: 0.0083 measured
SATURATION_GAP = 1e-2


def _wide_conversion(tmp_path: Path, name: str):
    return gp.convert(SOURCE, tmp_path / name, dequantize=True, input_shapes=WIDE)


@pytest.mark.parametrize("name", ["m.xml", "m.mlpackage"])
def test_a_flip_before_a_quantizer_is_judged_in_quantization_steps_and_the_layers_alone(name, tmp_path):
    if name.endswith(".mlpackage"):
        pytest.importorskip("coremltools")
    verification = _wide_conversion(tmp_path, name).verification
    assert verification.passed, verification.to_text()
    twin = next(o for o in verification.outputs if o.output == "logits vs the dequantized source")
    assert twin.max_abs_error > 1e-5  # beyond float tolerances: failed before (exit 5)
    assert twin.judgement and twin.judgement.startswith("in quantization steps: max")
    alone = [o for o in verification.outputs if "[alone]" in o.layer]
    assert {o.output.split()[0] for o in alone} == {"Y", "Y_h", "Y_c"}
    assert all(o.passed and o.max_abs_error <= 1e-5 for o in alone)
    assert any("judged in quantization steps" in note and "run-time quantizer" in note for note in verification.notes)
    got = gp.run(tmp_path / name, {"image": TRUTH["image"]})["logits"]
    assert np.abs(got - TRUTH["torch:logits"]).max() <= NOISE
    assert np.abs(got - TRUTH["logits"]).max() <= SATURATION_GAP


def test_at_width_7_no_value_crosses_a_boundary_and_float_tolerances_judge(tmp_path):
    verification = gp.convert(SOURCE, tmp_path / "m.xml", dequantize=True).verification
    assert verification.passed
    assert not any(o.judgement for o in verification.outputs)
    assert not any("[alone]" in o.layer for o in verification.outputs)


def _scaled_gate(direction, gate: int = 1, factor: float = 1.005):
    """One gate's rows of W scaled by ``factor`` (a 0.5% error in one weight block), as floats."""
    h = direction.R.shape[1]
    w = direction.W.copy()
    w[gate * h : (gate + 1) * h] *= factor
    return replace(direction, W=w, Wq=None, Rq=None)


def _swapped_gates(direction, first: int = 1, second: int = 2):
    """Gates ``first`` and ``second`` (ONNX LSTM order i, o, f, c: o and f) swapped in W, R and both biases."""
    h = direction.R.shape[1]
    order = np.arange(direction.W.shape[0]).reshape(-1, h)
    order[[first, second]] = order[[second, first]]
    rows = order.reshape(-1)
    return replace(
        direction,
        W=direction.W[rows],
        R=direction.R[rows],
        Wb=direction.Wb[rows],
        Rb=direction.Rb[rows],
        Wq=None,
        Rq=None,
    )


@pytest.mark.parametrize("corrupt", [_scaled_gate, _swapped_gates], ids=["0.5% in one gate", "o and f swapped"])
def test_an_error_in_the_recurrent_layer_still_fails(corrupt, tmp_path, monkeypatch):
    """The OpenVINO writer handed a layer with one deliberate error: the conversion fails verification (exit 5)."""
    corrupt_openvino_writer(monkeypatch, corrupt)
    with pytest.raises(VerificationError) as failed:
        _wide_conversion(tmp_path, "m.xml")
    verification = failed.value.verification
    assert any("[alone]" in o.layer and not o.passed for o in verification.outputs), verification.to_text()


def test_an_error_in_an_operator_around_the_layers_still_fails(tmp_path):
    """The twin against a copy whose first convolution's weight scale is 0.5% off: beyond the source's own
    sensitivity to one float32 step before its quantizers (measured 1.7e-4 max, 4.1e-7 mean), on its mean."""
    twin = accuracy._twin(gp.load(SOURCE), tmp_path)
    proto = onnx.load(str(twin.path))
    scale = next(t for t in proto.graph.initializer if t.name == "conv1.weight_scale")
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(1.005), scale.name))
    onnx.save(proto, str(tmp_path / "wrong.onnx"))
    verification = verify_whole(twin, gp.load(tmp_path / "wrong.onnx"), given=GivenInputs(WIDE))
    logits = next(o for o in verification.outputs if o.output == "logits")
    assert not logits.passed and logits.judgement and " > " in logits.judgement, verification.to_text()


def test_the_jittered_copy_moves_every_quantized_value_by_one_float32_step(tmp_path):
    """Each quantizer's input reads x + x * (+-1.5 * 2^-24): one float32 step from x, up or down."""
    graph = onnx.load(str(SOURCE)).graph
    names = [n.input[0] for n in graph.node if n.op_type == "DynamicQuantizeLinear" and n.input[0] != "image"]
    moved = jittered_copy(SOURCE, tmp_path / "j.onnx", seed=3)
    assert moved == len(names) == 3
    jittered = onnx.load(str(tmp_path / "j.onnx"))
    quantized = [n.input[0] for n in jittered.graph.node if n.op_type == "DynamicQuantizeLinear"]
    jittered.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names + quantized[1:])
    import onnxruntime as ort

    session = ort.InferenceSession(jittered.SerializeToString(), providers=["CPUExecutionProvider"])
    run = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"image": TRUTH["image"][..., :64]})))
    for name, moved_name in zip(names, quantized[1:]):
        x, y = run[name], run[moved_name]
        steps = (y.view(np.int32).astype(np.int64) - x.view(np.int32).astype(np.int64))[x != 0]
        assert set(np.unique(np.abs(steps))) <= {1, 2} and (np.abs(steps) == 1).mean() > 0.99
        assert 0.4 < (steps > 0).mean() < 0.6  # up or down at random

"""``--quantize-weights int8 --to litert`` on whole real models (an RNN or GRUs between other operators): the int8
twin is the whole source with its layers on gatepack's executor (LiteRT's hybrid arithmetic) and its other nodes on
onnxruntime, so the artifact is exact against it end to end and judged against the float source within the
quantization's own error on the model's outputs. Each test also runs the written file on LiteRT's interpreter itself
and onnxruntime on the float source, on the inputs the conversion was given, within the bound the report prints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import gatepack as gp
import gatepack.converters.formats.litert.common as litert_common
from gatepack.converters.errors import VerificationError

pytest.importorskip("ai_edge_litert")
tflite = pytest.importorskip("tflite")

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "realmodels"
INT8 = 9  # tflite.TensorType.INT8
TWIN, FLOAT = " vs the int8 twin", " vs the float source"


def _drawn(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in shapes.items()}


def _on_litert(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The written file on LiteRT's interpreter, inputs and outputs by tensor name."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], feed[detail["name"]])
    interpreter.invoke()
    return {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}


def _on_onnxruntime(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def _int8_weights(path: Path) -> int:
    graph = tflite.Model.GetRootAsModel(path.read_bytes(), 0).Subgraphs(0)
    return sum(graph.Tensors(k).Type() == INT8 for k in range(graph.TensorsLength()))


def _converted_and_checked(name: str, out: Path, shapes: dict[str, tuple[int, ...]], **options) -> object:
    """``name`` converted whole with --quantize-weights int8 on drawn inputs given as --inputs; the written file
    on LiteRT's interpreter within the printed bound of onnxruntime's float source, output by output (the source
    fed the ``input_values`` the artifact holds as constants too)."""
    feed = _drawn(shapes)
    result = gp.convert(
        REAL / f"{name}.onnx", out, to="litert", quantize_weights="int8", inputs=feed, input_shapes=shapes, **options
    )
    fixed = {k: np.asarray(v, np.int64) for k, v in options.get("input_values", {}).items()}
    verification = result.verification
    assert verification.passed, verification.to_text()
    assert gp.load(out).meta.get("other_ops") and _int8_weights(out) >= 2
    twin = [o for o in verification.outputs if o.output.endswith(TWIN)]
    assert twin and all(o.layer in ("(whole model)", "streamed") for o in twin)  # (each passed: float tolerances)
    bounds = {o.output[: -len(FLOAT)]: o.atol for o in verification.outputs if o.output.endswith(FLOAT)}
    expected, actual = _on_onnxruntime(REAL / f"{name}.onnx", {**feed, **fixed}), _on_litert(out, feed)
    assert set(expected) <= set(bounds) and set(expected) <= set(actual)
    errors = {k: float(np.abs(actual[k] - v).max()) for k, v in expected.items()}
    assert all(errors[k] <= bounds[k] for k in expected), (errors, bounds)
    assert max(errors.values()) > 1e-4  # the activations' run-time quantization shows: not a float file
    return result


@pytest.mark.parametrize("name", ["burn_rnn", "burn_rnn_bidirectional", "burn_rnn_reverse"])
def test_a_whole_rnn_model_is_judged_against_the_whole_int8_twin(name, tmp_path):
    """burn_rnn* (an RNN between Shape/Expand and Squeeze): before, the twin was the layers alone, the model's
    outputs got no quantization bound and the gate failed a correct file (output 0.00376 > 8e-5)."""
    _converted_and_checked(name, tmp_path / "q.tflite", {"input": (5, 2, 4)})


def test_a_streaming_rnn_model_is_judged_over_100_frames_on_the_model_s_outputs(tmp_path):
    """burn_rnn_with_initial_state: before, the streamed twin's outputs were the layer's (/rnn/RNN_output_0), missing
    from the file; now output and h_n over 100 calls, h_n fed back to h_0 on each side."""
    shapes = {"input": (5, 2, 4), "h_0": (1, 2, 8)}
    result = _converted_and_checked("burn_rnn_with_initial_state", tmp_path / "q.tflite", shapes, frames=100)
    streamed = {o.output for o in result.verification.outputs if o.layer == "streamed"}
    assert streamed == {f"{n}{w}" for n in ("output", "h_n") for w in (TWIN, FLOAT)}
    assert result.verification.streaming.frames == 100


DFN3 = {
    "dfn3_enc": {"feat_erb": (1, 1, 10, 32), "feat_spec": (1, 2, 10, 96)},
    "dfn3_df_dec": {"emb": (1, 10, 512), "c0": (1, 64, 10, 96)},
}


@pytest.mark.parametrize("name", sorted(DFN3))
def test_deepfilternet_with_given_shapes_converts_whole_and_is_gated(name, tmp_path):
    """DeepFilterNet3's parts (GRUs between convolutions) with --input-shape/--inputs: before, the layers-only twin
    made verification refuse them ('--input-shape and --inputs apply to whole models'); now whole and gated."""
    _converted_and_checked(name, tmp_path / "q.tflite", DFN3[name])


def test_a_perturbed_scale_still_fails_the_whole_model_gate(tmp_path, monkeypatch):
    """Every INT8 weight's scale written 2% off: the file leaves the whole int8 twin, exit 5, nothing written."""
    original = litert_common.parameters
    monkeypatch.setattr(litert_common, "parameters", lambda s, scale: original(s, scale * np.float32(1.02)))
    with pytest.raises(VerificationError, match="vs the int8 twin"):
        gp.convert(REAL / "burn_rnn.onnx", tmp_path / "wrong.tflite", to="litert", quantize_weights="int8")
    assert not (tmp_path / "wrong.tflite").exists()


def test_a_model_whose_layers_are_lifted_runs_whole_with_its_layers_executed():
    """DTLN model 2's LSTMs are lifted single steps (no node of their own; their initial states are adapters'
    outputs): the twin's runner rewrites the file in place to cut the graph at the nodes they become. With float
    layers, its outputs are onnxruntime's on the source (it used to ask the graph for tensors it lacks, and the
    gate fell back to feeding the LiteRT file layer inputs: 'no input named ...', naming a staging path)."""
    from dataclasses import replace

    from gatepack.converters.in_memory import in_memory_runner

    source = REAL / "dtln_model_2_unrolled_lstm.onnx"
    model = gp.load(source)
    held = replace(model, layers=[replace(layer, provenance=None) for layer in model.layers])
    rng = np.random.default_rng(3)
    feed = {
        "input_4": rng.standard_normal((1, 1, 512)).astype(np.float32),
        "input_5": rng.standard_normal((1, 2, 128, 2)).astype(np.float32) * 0.5,
    }
    got = in_memory_runner(held)(feed)
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    for name, value in zip([o.name for o in session.get_outputs()], session.run(None, feed)):
        np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-4)


def test_lifted_layers_are_written_with_their_integers_and_pass_the_gate(tmp_path):
    """DTLN model 2 (lifted single-step LSTMs): the whole-model translation reads its layers again from the source
    rewritten in place, which holds quantized weights as their float view, so it wrote float LSTM weights (no INT8
    tensor, 2.53 MB against 1.54 MB) while reporting 'lossy: quantization'; the gate failed it against the int8
    twin (0.031 on one call, the layer alone 0.0071 fed LiteRT's own inputs). Now the layers keep their records:
    INT8 weights, exact against the twin."""
    shapes = {"input_4": (1, 1, 512), "input_5": (1, 2, 128, 2)}
    _converted_and_checked("dtln_model_2_unrolled_lstm", tmp_path / "q.tflite", shapes, frames=8)


def test_a_model_specialised_by_input_value_is_twinned_as_specialised(tmp_path):
    """silero VAD v4 with --input-value sr=16000 --input-shape input=1,512: its LSTMs sit in Ifs decided by sr and
    by the input's shape, which the artifact resolved; the twin was the unspecialised source, whose 8 layers in If
    branches did not match the artifact's 2 (exit 3). Now it is the source specialised as the artifact is, and the
    float source is run as the user runs it, sr fed."""
    shapes = {"input": (1, 512), "h": (2, 1, 64), "c": (2, 1, 64)}
    options = {"input_values": {"sr": 16000}, "frames": 8}
    result = _converted_and_checked("silero_vad_v4_lstm_in_if", tmp_path / "q.tflite", shapes, **options)
    assert len(gp.load(tmp_path / "q.tflite").layers) == 2
    assert result.verification.streaming.frames == 8

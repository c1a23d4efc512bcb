"""Streaming models: state pairs, verification over consecutive calls, stateful OpenVINO IRs.

The expected state pairs are read from each model's own export or inference code (cited per model), not from
gatepack; the streaming oracle is onnxruntime running the unmodified source call after call, and for the
stateful IR, OpenVINO's own infer request run directly by the test.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import REALMODELS, Config, static_model

import gatepack.converters as gp
from gatepack.cli import main
from gatepack.converters.streaming import names_pair, source_state_pairs, verify_streaming

# model -> (input shapes fixed for symbolic dims, expected {state input: state output})
STREAMING = {
    # Xiaobin-Rong/gtcrn stream/gtcrn_stream.py: torch.onnx.export(input_names=['mix', 'conv_cache', 'tra_cache',
    # 'inter_cache'], output_names=['enh', 'conv_cache_out', 'tra_cache_out', 'inter_cache_out']), the caches fed
    # back position by position in its streaming loop
    "gtcrn_stream_simple.onnx": (
        {},
        {"conv_cache": "conv_cache_out", "tra_cache": "tra_cache_out", "inter_cache": "inter_cache_out"},
    ),
    # Xiaobin-Rong/ul-unas ulunas_onnx export: the same convention (each cache and cache_out)
    "ulunas_stream_simple.onnx": (
        {},
        {"conv_cache": "conv_cache_out", "tfa_cache": "tfa_cache_out", "inter_cache": "inter_cache_out"},
    ),
    # Xiaobin-Rong/TRT-SE online/: every en/rnn/de cache returned as <name>_out for the next frame
    "dpcrn_online_simple_lstm.onnx": (
        {},
        {
            **{f"en_cache{k}": f"en_cache{k}_out" for k in range(1, 6)},
            **{f"rnn_cache{k}": f"rnn_cache{k}_out" for k in range(1, 5)},
            **{f"de_cache{k}": f"de_cache{k}_out" for k in range(1, 6)},
        },
    ),
    # breizhn/DTLN real_time_processing_onnx.py: model_inputs_1[model_input_names_1[1]] = model_outputs_1[1]
    "dtln_model_1_lstm.onnx": ({}, {"input_3": "tf_op_layer_stack_2"}),
    # snakers4/silero-vad OnnxWrapper (v5): out, state = session.run(None, {'input', 'state', 'sr'}); _state = state
    "silero_vad_openvino_16k_lstm.onnx": ({}, {"state": "stateN"}),
    # snakers4/silero-vad v4 utils_vad.py OnnxWrapper: out, self._h, self._c = session.run(None, {input, h, c, sr})
    "silero_vad_v4_lstm_in_if.onnx": ({"input": (1, 512), "h": (2, 1, 64), "c": (2, 1, 64)}, {"h": "hn", "c": "cn"}),
}
FRAMES = 100


def _load(name: str):
    return gp.load(REALMODELS / name)


@pytest.mark.parametrize("name", sorted(STREAMING))
def test_state_pairs_are_those_the_models_own_code_feeds_back(name):
    shapes, expected = STREAMING[name]
    from gatepack.converters.verification import GivenInputs

    pairs = source_state_pairs(_load(name), given=GivenInputs(shapes))
    assert {p.input: p.output for p in pairs} == expected


def test_models_without_state_have_no_pairs():
    """DeepFilterNet3's encoder's outputs are the decoders' inputs, not its own next inputs."""
    assert source_state_pairs(_load("dfn3_enc.onnx")) == []


@pytest.mark.parametrize(
    "a, b, paired",
    [
        ("h", "hn", True),
        ("conv_cache", "conv_cache_out", True),
        ("state", "stateN", True),
        ("h_in", "h_out", True),
        ("past_k", "present_k", True),
        ("mix", "enh", False),
        ("h", "c", False),
        ("input", "output", False),
    ],
)
def test_names_that_read_as_a_next_value(a, b, paired):
    assert names_pair(a, b) is paired


def _ort_chain(name: str, frames: list[dict], pairs: dict[str, str], states: dict) -> list[dict]:
    """The oracle: onnxruntime on the unmodified source, call after call, states fed back as its authors do."""
    session = ort.InferenceSession(str(REALMODELS / name), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    calls = []
    for frame in frames:
        out = dict(zip(names, session.run(None, {**frame, **states})))
        calls.append(out)
        states = {i: out[o] for i, o in pairs.items()}
    return calls


@pytest.mark.parametrize("name", sorted(STREAMING))
def test_stateful_openvino_ir_runs_frame_inputs_only_and_matches_the_source_over_many_calls(name, tmp_path):
    """convert --stateful verifies itself over the calls; the IR is then run by OpenVINO directly (frame inputs
    only, its variables carrying the state) against onnxruntime's chain on the source."""
    import openvino as ov

    shapes, pairs = STREAMING[name]
    out = tmp_path / "stateful.xml"
    result = gp.convert(REALMODELS / name, out, stateful=True, frames=FRAMES, input_shapes=shapes)
    assert result.verification.passed and result.verification.streaming.frames == FRAMES
    # OpenVINO's variables hold float32: float32's tolerance grown tenfold over 100 calls, never fp16's
    assert all(o.atol == pytest.approx(1e-5 * 10) for o in result.verification.outputs)
    assert any(f.feature == "state" and f.status.value == "repacked" for fs in result.findings.values() for f in fs)
    compiled = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    frame_inputs = [i.get_any_name() for i in compiled.inputs]
    assert not set(frame_inputs) & set(pairs)
    rng = np.random.default_rng(3)
    session = ort.InferenceSession(str(REALMODELS / name), providers=["CPUExecutionProvider"])
    declared = {i.name: i for i in session.get_inputs()}

    def frame_value(n):
        shape = shapes.get(n) or [d if isinstance(d, int) else 1 for d in declared[n].shape]
        if declared[n].type == "tensor(int64)":
            return np.array(16000, np.int64)  # silero's sample rate
        return rng.uniform(-1, 1, shape).astype(np.float32)

    frames = [{n: frame_value(n) for n in frame_inputs} for _ in range(20)]
    zeros = {i: np.zeros(shapes.get(i) or [d for d in declared[i].shape], np.float32) for i in pairs}
    expected = _ort_chain(name, frames, pairs, zeros)
    request = compiled.create_infer_request()
    for k, frame in enumerate(frames):
        got = request.infer(frame)
        for output in compiled.outputs:
            (source_name,) = output.get_names() & expected[k].keys()  # a tensor may carry several names
            np.testing.assert_allclose(got[output], expected[k][source_name], atol=2e-5, rtol=1e-3)


@pytest.mark.parametrize("name", sorted(STREAMING))
@pytest.mark.parametrize("target", ["onnx", "onnx for directml", "openvino"])
def test_stateless_conversion_is_verified_over_many_calls(name, target, tmp_path):
    """The states stay inputs and outputs under the source's names (an app's loop needs no change), for
    onnxruntime, for its DirectML provider (ONNX written for it) and for OpenVINO."""
    shapes, pairs = STREAMING[name]
    out = tmp_path / ("m.xml" if target == "openvino" else "m.onnx")
    options = {"runtime": "directml"} if target == "onnx for directml" else {}
    result = gp.convert(REALMODELS / name, out, frames=FRAMES, input_shapes=shapes, **options)
    streaming = result.verification.streaming
    assert result.verification.passed and streaming.frames == FRAMES
    assert len(streaming.per_frame_error) == FRAMES and max(streaming.per_frame_error) < 1e-4
    assert {p.input: p.output for p in streaming.pairs} == pairs
    assert any(f.feature == "state" and f.status.value == "exact" for fs in result.findings.values() for f in fs)


def test_a_miswired_state_pair_passes_one_call_and_fails_over_consecutive_calls(tmp_path):
    """An artifact whose two state pairs are swapped (rnn_cache1's state comes back into rnn_cache2 and the
    reverse, shapes equal) gives the source's outputs on a first call from zero states, so a single-call check
    passes; fed back over calls it diverges, and streaming verification catches it."""
    name = "dpcrn_online_simple_lstm.onnx"
    pairs = dict(STREAMING[name][1])
    swapped = {**pairs, "rnn_cache1": "rnn_cache2_out", "rnn_cache2": "rnn_cache1_out"}
    out = tmp_path / "miswired.xml"
    gp.convert(REALMODELS / name, out, stateful=True, states=[f"{i}={o}" for i, o in swapped.items()], verify=False)
    source, target = _load(name), gp.load(out)
    first = verify_streaming(source, target, frames=1)
    assert first.passed  # one call from zero states cannot tell
    streamed = verify_streaming(source, target, frames=8)
    assert not streamed.passed
    assert streamed.streaming.per_frame_error[0] < 1e-4 < max(streamed.streaming.per_frame_error)


def test_given_pair_with_different_shapes_is_refused(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "convert",
            str(REALMODELS / "gtcrn_stream_simple.onnx"),
            str(tmp_path / "g.xml"),
            "--state",
            "conv_cache=tra_cache_out",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "conv_cache=tra_cache_out" in result.output and "[2, 1, 16, 16, 33]" in result.output
    assert not (tmp_path / "g.xml").exists()


def test_verify_frames_on_the_cli_reports_error_growth(tmp_path):
    out = tmp_path / "g.xml"
    gp.convert(REALMODELS / "gtcrn_stream_simple.onnx", out, verify=False)
    result = CliRunner().invoke(
        main, ["verify", str(REALMODELS / "gtcrn_stream_simple.onnx"), str(out), "--frames", "12"]
    )
    assert result.exit_code == 0, result.output
    assert "streamed 12 calls" in result.output and "frame 12:" in result.output


def test_inputs_can_hold_a_sequence_of_frames(tmp_path):
    """--inputs with one more leading axis than the model's input: each call takes the next frame."""
    out = tmp_path / "g.xml"
    src = REALMODELS / "gtcrn_stream_simple.onnx"
    gp.convert(src, out, verify=False)
    mix = np.random.default_rng(0).standard_normal((5, 1, 257, 1, 2)).astype(np.float32)
    result = gp.verify(src, out, inputs={"mix": mix})
    assert result.passed and result.streaming.frames == 5
    result = gp.verify(src, out, inputs={"mix": mix}, frames=3)
    assert result.streaming.frames == 3
    with pytest.raises(gp.UsageError, match="only 5 frames"):
        gp.verify(src, out, inputs={"mix": mix}, frames=9)


@pytest.mark.parametrize(
    "name", ["gtcrn_stream_simple.onnx", "dtln_model_1_lstm.onnx", "silero_vad_openvino_16k_lstm.onnx"]
)
def test_stateful_core_ml_package_holds_fp16_states_and_is_verified_over_many_calls(name, tmp_path):
    """Core ML states are fp16 only: lossy, refused unless allowed; the package's spec declares them (as
    coremltools reads it), takes the frame inputs only, and matches onnxruntime's chain at the fp16 tolerance."""
    import coremltools as ct

    shapes, pairs = STREAMING[name]
    out = tmp_path / "stateful.mlpackage"
    with pytest.raises(gp.RefusedError, match="fp16"):
        gp.convert(REALMODELS / name, out, stateful=True, verify=False)
    result = gp.convert(REALMODELS / name, out, stateful=True, allow_lossy=True, frames=FRAMES)
    assert result.verification.passed and result.verification.streaming.frames == FRAMES
    # fp16's tolerance (the state is rounded every call), grown tenfold over 100 calls
    assert all(o.atol == pytest.approx(1e-2 * 10) for o in result.verification.outputs)
    assert any(f.feature == "state" and f.status.value == "lossy" for fs in result.findings.values() for f in fs)
    spec = ct.utils.load_spec(str(out))
    declared = {s.name: s.type.stateType.arrayType.dataType for s in spec.description.state}
    assert set(declared) == {gp.load(out).meta["names"][i] for i in pairs}
    assert set(declared.values()) == {ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT16}
    assert not {i.name for i in spec.description.input} & set(declared)


def test_stateful_needs_state_pairs(tmp_path):
    result = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "dfn3_enc.onnx"), str(tmp_path / "e.xml"), "--stateful"]
    )
    assert result.exit_code == 2, result.output
    assert "no state pairs" in result.output and "--state" in result.output


def _program_ops(package) -> set[str]:
    """The op types of a package's main function, read from its spec with coremltools' protobuf (not gatepack)."""
    import coremltools as ct

    def ops(block):
        for op in block.operations:
            yield op.type
            for inner in op.blocks:
                yield from ops(inner)

    spec = ct.utils.load_spec(str(package))
    return set(ops(spec.mlProgram.functions["main"].block_specializations[spec.mlProgram.functions["main"].opset]))


@pytest.mark.parametrize("name", ["dtln_model_1_lstm.onnx", "silero_vad_openvino_16k_lstm.onnx"])
def test_one_frame_models_decomposed_for_the_neural_engine_have_no_loop(name, tmp_path):
    """--strategy decomposed on a model whose recurrent layers take one frame: each step straight-line (no
    while_loop, no lstm op), verified over 100 calls."""
    out = tmp_path / "frame.mlpackage"
    result = gp.convert(REALMODELS / name, out, strategy="decomposed", frames=FRAMES)
    assert result.verification.passed and result.verification.streaming.frames == FRAMES
    ops = _program_ops(out)
    assert "matmul" in ops and not ops & {"while_loop", "lstm", "gru", "rnn"}
    cells = [f for fs in result.findings.values() for f in fs if f.feature == "cell"]
    assert cells and all("straight-line" in f.detail for f in cells)


@pytest.mark.parametrize(
    "cfg",
    [
        Config(cell="GRU", lbr=0, direction="bidirectional", seq_lens="mixed", initial_h=True),
        Config(cell="GRU", lbr=1, direction="reverse", clip=0.7),
        Config(cell="RNN", activations=["Relu"], seq_lens="zero"),
        Config(cell="LSTM", peepholes=True, initial_h=True, initial_c=True, seq_lens="mixed"),
        Config(cell="LSTM", input_forget=1, direction="bidirectional"),
    ],
    ids=lambda c: c.label if hasattr(c, "label") else str(c),
)
def test_a_single_step_layer_decomposed_straight_line_matches_onnxruntime(cfg, tmp_path):
    """One fixed step, every cell variant, sequence lengths 0 and 1: written without a loop, verified by
    convert against onnxruntime on the source node."""
    cfg = replace(cfg, S=1)
    src = tmp_path / "one.onnx"
    onnx.save(static_model(cfg), src)
    out = tmp_path / "one.mlpackage"
    result = gp.convert(src, out, strategy="decomposed")
    assert result.verification.passed
    assert "while_loop" not in _program_ops(out)


def test_inspect_shows_state_pairs_and_the_states_a_stateful_artifact_holds(tmp_path):
    src = REALMODELS / "dtln_model_1_lstm.onnx"
    shown = CliRunner().invoke(main, ["inspect", str(src)])
    assert shown.exit_code == 0, shown.output
    assert "tf_op_layer_stack_2 -> input_3 (recurrent wiring)" in shown.output
    assert shown.output.index("state pairs") < shown.output.index("recurrent layers:")
    out = tmp_path / "s.mlpackage"
    gp.convert(src, out, stateful=True, allow_lossy=True, verify=False)
    held = CliRunner().invoke(main, ["inspect", str(out), "--json"])
    assert held.exit_code == 0, held.output
    import json

    described = json.loads(held.output)
    assert described["meta"]["states"] == {"input_3": "tf_op_layer_stack_2"}
    assert [i["name"] for i in described["model_inputs"]] == ["input_2"]


def test_a_given_pair_naming_no_tensor_of_the_model_is_refused(tmp_path):
    for pair, missing in (("cache=conv_cache_out", "no input 'cache'"), ("conv_cache=cache_out", "no output")):
        result = CliRunner().invoke(
            main, ["convert", str(REALMODELS / "gtcrn_stream_simple.onnx"), str(tmp_path / "g.xml"), "--state", pair]
        )
        assert result.exit_code == 2 and missing in result.output, result.output
        assert not list(tmp_path.iterdir())


def test_verify_frames_json_gives_each_outputs_worst_call_and_the_final_states(tmp_path):
    import json

    out = tmp_path / "g.xml"
    gp.convert(REALMODELS / "dtln_model_1_lstm.onnx", out, verify=False)
    result = CliRunner().invoke(
        main, ["verify", str(REALMODELS / "dtln_model_1_lstm.onnx"), str(out), "--frames", "6", "--json"]
    )
    assert result.exit_code == 0, result.output
    streaming = json.loads(result.output)["streaming"]
    assert len(streaming["per_frame_error"]) == 6
    assert set(streaming["worst"]) == {"activation_2", "tf_op_layer_stack_2"}
    assert all(1 <= w["call"] <= 6 for w in streaming["worst"].values())
    assert set(streaming["final_state_error"]) == {"tf_op_layer_stack_2"}
    assert streaming["final_state_error"]["tf_op_layer_stack_2"] <= streaming["worst"]["tf_op_layer_stack_2"]["error"]

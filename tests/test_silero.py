"""silero VAD v6 as its package ships it (fixtures/shipped), converted whole to every target that keeps a whole model,
each artifact's outputs compared with onnxruntime's on the source; the sizes verification draws for symbolic
dimensions (the source's own reflect Pad fails on 7 samples); ``--input-value`` specialisation."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import FIXTURES, ort_run
from onnx import TensorProto, helper, numpy_helper

import gatepack as gp
from gatepack.cli import main
from gatepack.converters.findings import Status
from gatepack.converters.formats.onnx.analyses import implied_sizes
from gatepack.converters.formats.onnx.folding import specialisation_hint
from gatepack.converters.formats.openvino.registration import openvino
from gatepack.converters.samples import dim_size_candidates

SILERO = FIXTURES / "shipped" / "silero_vad_16k_op15.onnx"
CHUNK = {"input": (1, 576), "state": (2, 1, 128)}  # 512 samples at 16 kHz and the 64 before them


def silero_feed(seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input": rng.uniform(-1, 1, CHUNK["input"]).astype(np.float32),
        "state": rng.uniform(-1, 1, CHUNK["state"]).astype(np.float32),
        "sr": np.array(16000, np.int64),
    }


def padded_gru(path, pad: int = 9) -> None:
    """X [n, 1, 3] -> reflect Pad of ``pad`` rows on each side -> GRU (H 4): runs only where n > ``pad``."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array([pad, 0, 0, pad, 0, 0], np.int64), "pads"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 12, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 12, 4)).astype(np.float32), "R"),
    ]
    nodes = [
        helper.make_node("Pad", ["X", "pads"], ["padded"], mode="reflect"),
        helper.make_node("GRU", ["padded", "W", "R"], ["Y", "Y_h"], hidden_size=4, name="gru"),
    ]
    graph = helper.make_graph(
        nodes,
        "padded",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 1, 3])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None),
        ],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))


def sample_rate_gru(path) -> None:
    """X [n, 1, 3], sr (int64 scalar) -> If(sr == 16000) then X * 2 else X - 1 -> GRU (H 4): silero's switch."""
    rng = np.random.default_rng(1)
    then = helper.make_graph(
        [helper.make_node("Mul", ["X", "two"], ["chosen_16k"])],
        "then",
        [],
        [helper.make_tensor_value_info("chosen_16k", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.float32(2), "two")],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["X", "one"], ["chosen_8k"])],
        "else",
        [],
        [helper.make_tensor_value_info("chosen_8k", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.float32(1), "one")],
    )
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["x"], then_branch=then, else_branch=other),
        helper.make_node("GRU", ["x", "W", "R"], ["Y", "Y_h"], hidden_size=4, name="gru"),
    ]
    inits = [
        numpy_helper.from_array(np.array(16000, np.int64), "rate"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 12, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 12, 4)).astype(np.float32), "R"),
    ]
    graph = helper.make_graph(
        nodes,
        "rate",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 1, 3]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None),
        ],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))


# ------------------------------------------------------------------------------------------ sizes drawn


def test_symbolic_sizes_are_drawn_where_the_source_runs(tmp_path):
    """A reflect Pad of 9 rows needs 10: onnxruntime refuses the model at the default 7, so verification draws the
    size the Pad implies instead of stopping (exit 5 before), and the note says how."""
    src = tmp_path / "padded.onnx"
    padded_gru(src)
    with pytest.raises(Exception, match="Pad"):  # the oracle itself: the default size does not run
        ort_run(src, {"X": np.zeros((7, 1, 3), np.float32)})
    assert implied_sizes(onnx.load(str(src))) == [10]
    assert dim_size_candidates([10])[:4] == [7, 10, 20, 40]
    result = gp.convert(src, tmp_path / "out.onnx")
    assert result.verification.passed, result.verification.to_text()
    assert "X [10, 1, 3]" in result.verification.inputs_used
    assert any("drawn as 10" in note for note in result.verification.notes)


# ------------------------------------------------------------------------------------------ silero v6, whole


def test_silero_converts_whole_to_onnx_without_options(tmp_path):
    out = tmp_path / "s.onnx"
    result = gp.convert(SILERO, out)
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert result.verification.streaming is not None  # state -> stateN over consecutive calls
    # the Pad needs 65 samples, the STFT's Conv 256; the batch, shared by input and state, stays 7
    assert "input [7, 256]; state [2, 7, 128]" in result.verification.inputs_used
    reported = gp.report(SILERO, "onnx")  # found the state pair on the same sizes: agrees with convert
    assert {
        lay.layer.name: [(f.feature, f.status) for f in lay.targets["onnx"].findings] for lay in reported.layers
    } == {name: [(f.feature, f.status) for f in found] for name, found in result.findings.items()}
    assert any(f.feature == "state" for found in result.findings.values() for f in found)
    feed = silero_feed()
    for got, want in zip(ort_run(out, feed), ort_run(SILERO, feed)):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


def test_silero_converts_whole_for_directml_without_options(tmp_path):
    out = tmp_path / "s.onnx"
    result = gp.convert(SILERO, out, runtime="directml")
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert not [n for n in onnx.load(str(out)).graph.node if n.op_type == "LSTM"]  # nested in Ifs: look deeper
    feed = silero_feed()
    for got, want in zip(ort_run(out, feed), ort_run(SILERO, feed)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_silero_converts_whole_to_openvino_for_its_chunk(tmp_path):
    """The IR on OpenVINO CPU (f32) against onnxruntime on the source; the frontend needs the shape-decided Ifs
    folded, so the chunk's shapes are given (sr is read by no node: --input-value sr=16000 drops it)."""
    out = tmp_path / "s.xml"
    result = gp.convert(SILERO, out, input_shapes=CHUNK, input_values={"sr": 16000})
    assert result.whole and result.verification.passed, result.verification.to_text()
    ov, _ = openvino()  # imported without its telemetry
    compiled = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert sorted(i.get_any_name() for i in compiled.inputs) == ["input", "state"]
    feed = silero_feed()
    got = compiled({k: v for k, v in feed.items() if k != "sr"})
    for name, want in zip(("output", "stateN"), ort_run(SILERO, feed)):
        np.testing.assert_allclose(got[name], want, atol=1e-5, rtol=1e-4)


def test_silero_converts_whole_to_coreml_for_its_chunk(tmp_path):
    """The package on gatepack's MIL interpreter against onnxruntime on the source."""
    out = tmp_path / "s.mlpackage"
    result = gp.convert(SILERO, out, input_shapes=CHUNK)
    assert result.whole and result.verification.passed, result.verification.to_text()
    feed = silero_feed()
    got = gp.run(out, feed, engine="numpy")
    for name, want in zip(("output", "stateN"), ort_run(SILERO, feed)):
        np.testing.assert_allclose(got[name], want, atol=1e-5, rtol=1e-4)


def test_silero_to_coreml_with_symbolic_shapes_is_refused_in_words(tmp_path):
    """torch's squeeze(dim) export (Squeeze when a symbolic size is 1, else Identity) gives branches of two ranks,
    which MIL's cond cannot type; the refusal says so and how to fold it, never coremltools' exception text."""
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(SILERO, tmp_path / "s.mlpackage")
    message = err.value.message
    assert "rank 2 [?, 128] (then) and rank 3 [?, 128, ?] (else)" in message
    assert "--input-shape" in message and "object of type" not in message
    assert not (tmp_path / "s.mlpackage").exists()


# ------------------------------------------------------------------------------------------ --input-value


def test_input_value_specialises_the_if_it_decides(tmp_path):
    src, out = tmp_path / "rate.onnx", tmp_path / "out.onnx"
    sample_rate_gru(src)
    assert "--input-value sr=16000" in specialisation_hint(onnx.load(str(src)))
    result = gp.convert(src, out, input_values={"sr": 16000})
    assert result.verification.passed, result.verification.to_text()
    written = onnx.load(str(out))
    assert [i.name for i in written.graph.input] == ["X"]
    assert "If" not in {n.op_type for n in written.graph.node}
    interface = [f for fs in result.findings.values() for f in fs if f.feature == "interface"]
    assert interface and all(f.status is Status.REPACKED and "sr" in f.detail for f in interface)
    x = np.random.default_rng(2).uniform(-1, 1, (5, 1, 3)).astype(np.float32)
    (got,) = ort_run(out, {"X": x})[:1]
    np.testing.assert_allclose(got, ort_run(src, {"X": x, "sr": np.array(16000, np.int64)})[0], atol=1e-6)
    assert not np.allclose(got, ort_run(src, {"X": x, "sr": np.array(8000, np.int64)})[0], atol=1e-3)


def test_report_agrees_with_convert_on_input_values(tmp_path):
    src = tmp_path / "rate.onnx"
    sample_rate_gru(src)
    for target, name in (("onnx", "o.onnx"), ("openvino", "o.xml")):
        found = gp.report(src, target, input_values={"sr": 16000})
        assert found.source == str(src)  # not the specialised model's temporary file
        converted = gp.convert(src, tmp_path / name, input_values={"sr": 16000})
        reported = {
            lay.layer.name: [(f.feature, f.status) for f in lay.targets[target].findings] for lay in found.layers
        }
        assert reported == {k: [(f.feature, f.status) for f in fs] for k, fs in converted.findings.items()}
        assert ("interface", Status.REPACKED) in next(iter(reported.values()))


@pytest.mark.parametrize(
    ("values", "words"),
    [({"sr": 16000.5}, "not a value of its type"), ({"rate": 1}, "no input 'rate'"), ({"sr": [1, 2]}, "declared")],
)
def test_input_value_that_does_not_fit_is_a_usage_error(values, words, tmp_path):
    src = tmp_path / "rate.onnx"
    sample_rate_gru(src)
    with pytest.raises(gp.UsageError, match=words):
        gp.convert(src, tmp_path / "out.onnx", input_values=values)


def test_cli_input_value(tmp_path):
    src = tmp_path / "rate.onnx"
    sample_rate_gru(src)
    runner = CliRunner()
    done = runner.invoke(main, ["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--input-value", "sr=16000"])
    assert done.exit_code == 0, done.output
    assert "repacked: interface" in done.output
    done = runner.invoke(main, ["verify", str(src), str(tmp_path / "o.onnx"), "--input-value", "sr=16000"])
    assert done.exit_code == 0 and "verification passed" in done.output, done.output
    done = runner.invoke(main, ["report", str(src), "--to", "onnx", "--input-value", "sr=16000"])
    assert done.exit_code == 0 and "no longer takes sr" in done.output, done.output
    done = runner.invoke(main, ["convert", str(src), "-o", str(tmp_path / "p.onnx"), "--input-value", "sr=fast"])
    assert done.exit_code == 2 and "NAME=VALUE" in done.output


def run_time_padded_gru(path, pad_type: int = TensorProto.INT64) -> None:
    """X [5, 1, 3], pad (a scalar of ``pad_type``) -> pads = [pad, 0, 0, pad, 0, 0] (Mul, after a Cast to int64)
    -> Pad -> GRU (H 4): a value Core ML and LiteRT need before run time, computed from an input."""
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Cast", ["pad"], ["pad_int"], to=TensorProto.INT64),
        helper.make_node("Mul", ["pad_int", "pattern"], ["pads"]),
        helper.make_node("Pad", ["X", "pads"], ["padded"]),
        helper.make_node("GRU", ["padded", "W", "R"], ["Y", "Y_h"], hidden_size=4, name="gru"),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 0, 0, 1, 0, 0], np.int64), "pattern"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 12, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (1, 12, 4)).astype(np.float32), "R"),
    ]
    graph = helper.make_graph(
        nodes,
        "padded",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 1, 3]),
            helper.make_tensor_value_info("pad", pad_type, []),
        ],
        [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, 1, 4])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))


@pytest.mark.parametrize(("target", "name"), [("litert", "o.tflite"), ("coreml", "o.mlpackage")])
def test_refusal_from_an_integer_scalar_input_names_input_value(target, name, tmp_path):
    """A value the target cannot hold computed at run time (LiteRT: int64 arithmetic; Core ML: Pad's pads), computed
    from an integer scalar input alone: the hint names --input-value, and with it the conversion passes against
    onnxruntime on the source fed that value."""
    src = tmp_path / "pad.onnx"
    run_time_padded_gru(src)
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(src, tmp_path / name)
    assert "fix input 'pad' with --input-value pad=VALUE" in err.value.hint
    assert "--layers-only" in err.value.hint  # the other ways out kept
    found = gp.report(src, target)
    model = next(f for f in found.layers[0].targets[target].findings if f.feature == "model")
    assert model.status is Status.UNSUPPORTED and "--input-value pad=VALUE" in model.alternative
    result = gp.convert(src, tmp_path / name, input_values={"pad": 2})
    assert result.whole and result.verification.passed, result.verification.to_text()


@pytest.mark.parametrize(("target", "name"), [("litert", "o.tflite"), ("coreml", "o.mlpackage")])
def test_refusal_from_a_float_input_names_no_input_value(target, name, tmp_path):
    """The same value computed from a float input: fixing it is not a way out the hint offers."""
    src = tmp_path / "pad.onnx"
    run_time_padded_gru(src, TensorProto.FLOAT)
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(src, tmp_path / name)
    assert "--input-value" not in (err.value.hint or "") and "--layers-only" in err.value.hint


def test_silero_to_litert_names_input_value_for_sr(tmp_path):
    """silero v6 multiplies by its int64 sr, which LiteRT's translation does not compute: the hint names the fix."""
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(SILERO, tmp_path / "s.tflite", input_shapes=CHUNK)
    assert "'sr'" in err.value.message and "--input-value sr=VALUE" in err.value.hint

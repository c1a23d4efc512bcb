"""LiteRT with --stateful: a layer's own state pairs (its initial state fed from its final state) held in the
sequence ops' variable tensors across invoke(), the file taking the frames only; verified by convert over
consecutive calls, and checked here on ai-edge-litert's plain Interpreter (default XNNPACK delegate and builtin
kernels) against onnxruntime's call-by-call chain, reset_all_variables() starting a new stream."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import Config, ort_run, static_model

import gatepack as gp
from gatepack.cli import main

pytest.importorskip("ai_edge_litert")

FRAMES = 6
STREAMED = [
    Config(cell="LSTM", initial_h=True, initial_c=True, S=2, N=1, seed=61),
    Config(cell="LSTM", direction="bidirectional", initial_h=True, initial_c=True, S=3, N=2, seed=62),
    Config(cell="RNN", direction="reverse", initial_h=True, S=1, N=1, seed=64),
    Config(cell="RNN", direction="bidirectional", initial_h=True, S=2, N=2, seed=63),
]  # no layout 1: state pairs are found on one onnxruntime call of the source, which has no layout-1 kernel


def _chain(cfg: Config, frames: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """onnxruntime call by call from zero states, each call's final states fed to the next call's inputs."""
    model = static_model(cfg)
    zeros = np.zeros((cfg.D, cfg.N, cfg.H), np.float32)
    states = {name: zeros for name in ("initial_h", "initial_c") if getattr(cfg, name)}
    found = []
    for x in frames:
        outputs = dict(zip(cfg.outputs, ort_run(model, {"X": x, **states})))
        found.append(outputs)
        states = {name: outputs[f"Y_{name[-1]}"] for name in states}
    return found


@pytest.mark.parametrize("cfg", STREAMED, ids=lambda c: c.label())
def test_a_stateful_file_continues_each_invoke_from_the_last_as_onnxruntime_s_chain(cfg: Config, tmp_path):
    """The file takes X alone; frame k's outputs are onnxruntime's k-th call of the chain, with the default XNNPACK
    delegate and without it; reset_all_variables() gives the first call's again. convert verified the stream
    itself (gatepack's session against onnxruntime's chain)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    onnx.save(static_model(cfg), tmp_path / "m.onnx")
    result = gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", stateful=True, frames=FRAMES)
    assert result.verification.passed and result.verification.streaming, result.verification.to_text()
    rng = np.random.default_rng(cfg.seed)
    frames = [rng.uniform(-1, 1, (cfg.S, cfg.N, cfg.I)).astype(np.float32) for _ in range(FRAMES)]
    chain = _chain(cfg, frames)
    assert max(np.abs(chain[k]["Y"] - chain[0]["Y"]).max() for k in range(1, FRAMES)) > 0.01  # states matter
    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        interpreter = Interpreter(model_path=str(tmp_path / "m.tflite"), experimental_op_resolver_type=resolver)
        interpreter.allocate_tensors()
        (x,) = interpreter.get_input_details()  # the frames only
        assert x["name"] == "X"
        outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
        for k, frame in enumerate(frames):
            interpreter.set_tensor(x["index"], frame)
            interpreter.invoke()
            for name in cfg.outputs:
                got = interpreter.get_tensor(outputs[name])
                np.testing.assert_allclose(got, chain[k][name], atol=1e-5, rtol=1e-4, err_msg=f"{name} {k}")
        interpreter.reset_all_variables()  # a new stream
        interpreter.set_tensor(x["index"], frames[0])
        interpreter.invoke()
        np.testing.assert_allclose(interpreter.get_tensor(outputs["Y"]), chain[0]["Y"], atol=1e-5, rtol=1e-4)


def _cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_the_file_read_back_takes_x_alone_and_is_noted_stateful(tmp_path):
    """Read back, a stateful file's layer takes X alone and carries a lossy note (the layer read is stateless), so
    converting it further is refused without --allow-lossy."""
    cfg = STREAMED[1]
    onnx.save(static_model(cfg), tmp_path / "m.onnx")
    done = _cli("convert", tmp_path / "m.onnx", "-o", tmp_path / "m.tflite", "--stateful", "--frames", FRAMES)
    assert done.exit_code == 0, done.output
    assert f"streamed {FRAMES} calls" in done.output and "held in the op's state variable" in done.output
    (layer,) = gp.load(tmp_path / "m.tflite").layers
    assert layer.interface.initial_h is None and layer.interface.initial_c is None and layer.interface.y_h == "Y_h"
    done = _cli("convert", tmp_path / "m.tflite", "-o", tmp_path / "back.onnx")
    assert done.exit_code == 4 and "a stateful file" in done.output, done.output


@pytest.mark.parametrize(
    ("cfg", "extra", "code", "reason"),
    [
        (Config(cell="GRU", initial_h=True, S=2, N=1, seed=65), (), 4, "the elementary form has no variable tensor"),
        (
            Config(cell="LSTM", initial_h=True, initial_c=True, S=2, N=1, seed=66),
            ("--state", "initial_h=Y_c"),
            2,
            "not a layer's initial state fed from its own final state",
        ),
        (Config(cell="LSTM", S=2, N=1, seed=67), (), 2, "no state pairs"),
    ],
    ids=["gru-elementary", "crossed-pair", "no-pairs"],
)
def test_what_stateful_cannot_hold_is_refused(cfg: Config, extra, code: int, reason: str, tmp_path):
    onnx.save(static_model(cfg), tmp_path / "m.onnx")
    done = _cli("convert", tmp_path / "m.onnx", "-o", tmp_path / "m.tflite", "--stateful", *extra)
    assert done.exit_code == code and reason in done.output, done.output
    assert not (tmp_path / "m.tflite").exists()


def test_report_says_what_stateful_makes_of_a_layer_s_states(tmp_path):
    onnx.save(static_model(STREAMED[0]), tmp_path / "m.onnx")
    done = _cli("report", tmp_path / "m.onnx", "--stateful", "--to", "litert")
    assert done.exit_code == 0, done.output
    assert "Y_h -> initial_h held in the op's state variable across invoke()" in done.output
    assert "Y_c -> initial_c held" in done.output

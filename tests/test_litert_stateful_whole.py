"""LiteRT with --stateful for whole streaming models: every state pair held in a variable tensor across invoke(),
the file taking the frame inputs only (docs/streaming.md).

The oracle is onnxruntime running the unmodified source call after call from zero states, each call's state outputs
fed back to its state inputs (the pairs the models' own code feeds back: test_streaming.py cites each). The written
file is run here by ai-edge-litert's plain Interpreter, with and without the default XNNPACK delegate, frame by
frame as an app runs it; reset_all_variables() starts a new stream.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import REALMODELS

import gatepack as gp
from gatepack.cli import main

pytest.importorskip("ai_edge_litert")

FRAMES = 100
# model -> (its frame input, its state pairs as the model's own streaming code feeds them back)
MODELS = {
    "dtln_model_1_lstm.onnx": ("input_2", {"input_3": "tf_op_layer_stack_2"}),
    "dpcrn_online_simple_lstm.onnx": (
        "mix",
        {
            **{f"en_cache{k}": f"en_cache{k}_out" for k in range(1, 6)},
            **{f"rnn_cache{k}": f"rnn_cache{k}_out" for k in range(1, 5)},
            **{f"de_cache{k}": f"de_cache{k}_out" for k in range(1, 6)},
        },
    ),
}
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}  # float32 rounding fed back with the states over 100 calls (largest 1.3e-5)


def _onnxruntime_chain(name: str, frames: list[np.ndarray], states: dict[str, str]) -> list[dict[str, np.ndarray]]:
    """onnxruntime call by call from zero states, each call's state outputs fed to the next call's state inputs."""
    session = ort.InferenceSession(str(REALMODELS / name), providers=["CPUExecutionProvider"])
    shapes = {i.name: i.shape for i in session.get_inputs()}
    held = {state: np.zeros(shapes[state], np.float32) for state in states}
    found = []
    for frame in frames:
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {**_frame(name, frame), **held})))
        found.append(outputs)
        held = {state: outputs[output] for state, output in states.items()}
    return found


def _frame(name: str, frame: np.ndarray) -> dict[str, np.ndarray]:
    return {MODELS[name][0]: frame}


def _frames(name: str, count: int) -> list[np.ndarray]:
    session = ort.InferenceSession(str(REALMODELS / name), providers=["CPUExecutionProvider"])
    shape = next(i.shape for i in session.get_inputs() if i.name == MODELS[name][0])
    rng = np.random.default_rng(7)
    return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(count)]


@pytest.fixture(scope="module", params=sorted(MODELS))
def written(request, tmp_path_factory) -> tuple[str, str]:
    """(model, the stateful file convert wrote and verified over 100 calls)."""
    name = request.param
    path = tmp_path_factory.mktemp("stateful") / "m.tflite"
    result = gp.convert(REALMODELS / name, path, to="litert", stateful=True, frames=FRAMES)
    assert result.verification.passed, result.verification.to_text()
    assert result.verification.streaming is not None and result.verification.streaming.frames == FRAMES
    return name, str(path)


@pytest.mark.parametrize("resolver", ["AUTO", "BUILTIN_WITHOUT_DEFAULT_DELEGATES"])
def test_a_stateful_whole_model_continues_each_invoke_from_the_last_as_onnxruntime_s_chain(written, resolver):
    """The file takes the frame input alone and returns the source's other outputs; frame k's outputs, and the held
    states read from the variables, are onnxruntime's k-th call of the chain for 100 frames; reset_all_variables()
    gives the first call's again."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    name, path = written
    frame_input, states = MODELS[name]
    frames = _frames(name, FRAMES)
    chain = _onnxruntime_chain(name, frames, states)
    interpreter = Interpreter(model_path=path, experimental_op_resolver_type=getattr(OpResolverType, resolver))
    interpreter.allocate_tensors()
    assert [d["name"] for d in interpreter.get_input_details()] == [frame_input]
    outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    assert sorted(outputs) == sorted(set(chain[0]) - set(states.values()))
    variables = {d["name"]: d["index"] for d in interpreter.get_tensor_details() if d["name"] in states}
    assert sorted(variables) == sorted(states)
    (x,) = interpreter.get_input_details()
    first = {}
    for k, frame in enumerate(frames):
        interpreter.set_tensor(x["index"], frame)
        interpreter.invoke()
        for output, index in outputs.items():
            got = interpreter.get_tensor(index)
            np.testing.assert_allclose(got, chain[k][output], **TOLERANCE, err_msg=f"{output} at frame {k + 1}")
            first = first or {o: interpreter.get_tensor(i) for o, i in outputs.items()}
        if k in (0, FRAMES - 1):
            for state, index in variables.items():
                np.testing.assert_allclose(interpreter.get_tensor(index), chain[k][states[state]], **TOLERANCE)
    interpreter.reset_all_variables()  # a new stream
    interpreter.set_tensor(x["index"], frames[0])
    interpreter.invoke()
    for output, index in outputs.items():
        np.testing.assert_array_equal(interpreter.get_tensor(index), first[output])


def test_the_state_is_carried_a_file_that_restarted_from_zeros_would_fail(written):
    """Frame 2 of the file is onnxruntime's second call of the chain, and far from the source's call on the same
    frame from zero states (what a file that did not carry its state would give)."""
    from ai_edge_litert.interpreter import Interpreter

    name, path = written
    frame_input, states = MODELS[name]
    frames = _frames(name, 2)
    chain = _onnxruntime_chain(name, frames, states)
    restarted = _onnxruntime_chain(name, frames[1:], states)[0]
    interpreter = Interpreter(model_path=path)
    interpreter.allocate_tensors()
    (x,) = interpreter.get_input_details()
    outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    for frame in frames:
        interpreter.set_tensor(x["index"], frame)
        interpreter.invoke()
    for output, index in outputs.items():
        got = interpreter.get_tensor(index)
        np.testing.assert_allclose(got, chain[1][output], **TOLERANCE)
        assert np.abs(got - restarted[output]).max() > 100 * TOLERANCE["atol"], output


def test_the_file_read_back_names_the_states_it_holds(written):
    """inspect lists the held pairs (the reader's ``Model.meta['states']``), and the file's inputs are the frames."""
    name, path = written
    frame_input, states = MODELS[name]
    model = gp.load(path)
    assert model.meta["states"] == states
    assert [n for n, _, _ in gp.converters.formats.litert.graph_inputs(path)] == [frame_input]
    text = CliRunner().invoke(main, ["inspect", path]).output
    assert "states the artifact holds itself" in text and f"{states[sorted(states)[0]]} -> {sorted(states)[0]}" in text


def test_convert_reports_the_states_held_as_variables(tmp_path):
    """The CLI: exit 0, the ``state`` finding names the variables and the reset; no layer claims its op's own
    variable holds a state (the whole model's variables do)."""
    result = CliRunner().invoke(
        main,
        ["convert", str(REALMODELS / "dpcrn_online_simple_lstm.onnx"), str(tmp_path / "m.tflite")]
        + ["--to", "litert", "--stateful", "--frames", "4"],
    )
    assert result.exit_code == 0, result.output
    assert "14 state pair(s) held as LiteRT variable tensors" in result.output
    assert "reset_all_variables()" in result.output
    assert "held in the op's state variable" not in result.output


@pytest.mark.parametrize("dtype", ["FLOAT32", "INT32", "BOOL"])
@pytest.mark.parametrize("shape", [[], [3], [2, 1, 2, 2, 3], [1, 2, 1, 2, 2, 3]], ids=lambda s: f"rank{len(s)}")
def test_the_held_state_copy_carries_any_rank_and_type(shape, dtype):
    """``hold_states`` on a graph ``s_out = s OP x`` (ADD; bool: LOGICAL_OR), ``y = s_out``: on LiteRT's interpreter
    (default delegate and builtin kernels) the file takes x alone and y is NumPy's running sum (or any) of the frames,
    the variable restarting from zeros after reset_all_variables()."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from gatepack.converters.formats.litert.common import Graph, schema
    from gatepack.converters.formats.litert.stateful_whole import hold_states

    numpy_type = {"FLOAT32": np.float32, "INT32": np.int32, "BOOL": np.bool_}[dtype]
    g = Graph(schema())
    x, s = (g.tensor(name, shape, dtype) for name in ("x", "s"))
    g.graph.inputs += [x, s]
    s_out, y = (g.tensor(name, shape, dtype) for name in ("s_out", "y"))
    g.op("LOGICAL_OR" if dtype == "BOOL" else "ADD", [s, x], [s_out])
    g.op("TILE", [s_out, g.const("ones", np.ones(len(shape), np.int32))], [y])
    g.graph.outputs += [y, s_out]
    description: dict = {}
    hold_states("toy", [("s", "s_out")], g, description)
    assert description["states"] == {"s": "s_out"}
    content = g.finish(description)
    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 2, shape).astype(numpy_type) for _ in range(4)]
    expected = np.logical_or.accumulate(frames) if dtype == "BOOL" else np.cumsum(frames, axis=0)
    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        interpreter = Interpreter(model_content=content, experimental_op_resolver_type=resolver)
        interpreter.allocate_tensors()
        ((x_in,), (y_out,)) = interpreter.get_input_details(), interpreter.get_output_details()
        assert (x_in["name"], y_out["name"]) == ("x", "y")
        for stream in range(2):
            for k, frame in enumerate(frames):
                interpreter.set_tensor(x_in["index"], frame)
                interpreter.invoke()
                np.testing.assert_array_equal(interpreter.get_tensor(y_out["index"]), expected[k])
            interpreter.reset_all_variables()

"""A recurrent cell unrolled for one step (a per-frame streaming export: the states are graph inputs and outputs),
lifted into a layer of sequence length 1 and converted whole: DTLN's second model (two stacked LSTM cells written as
MatMul/Add/Split/Sigmoid/Tanh/Mul by tf2onnx) to every target, and a GRU step written by hand. The written files are
compared with onnxruntime running the source over consecutive frames, each side feeding its own states back; a cell
whose gate activation is not an LSTM's is not lifted as one."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import REALMODELS
from onnx import TensorProto, helper, numpy_helper

import gatepack as gp
from gatepack.cli import main

DTLN2 = REALMODELS / "dtln_model_2_unrolled_lstm.onnx"
FRAMES = 6
STATE_IN, STATE_OUT, FRAME_OUT = "input_5", "tf_op_layer_stack_5", "conv1d_3"


def _frames(seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (1, 1, 512)).astype(np.float32) for _ in range(FRAMES)]


def _streamed(run) -> list[np.ndarray]:
    """Every frame's output and the last state of ``run`` ({input: value} -> {output: value}) over the frames,
    from zero states, its own new states fed back."""
    state = np.zeros((1, 2, 128, 2), np.float32)
    outputs = []
    for frame in _frames():
        got = run({"input_4": frame, STATE_IN: state})
        outputs.append(got[FRAME_OUT])
        state = got[STATE_OUT]
    return [*outputs, state]


def _onnxruntime(path) -> dict:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feed: dict(zip(names, session.run(None, feed)))


def _openvino(path):
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

    def run(feed: dict) -> dict:
        result = compiled(feed)
        return {o.get_any_name(): result[o] for o in compiled.outputs}

    return run


def _litert(path):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    inputs = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}

    def run(feed: dict) -> dict:
        for name, value in feed.items():
            interpreter.set_tensor(inputs[name], value)
        interpreter.invoke()
        return {name: interpreter.get_tensor(index).copy() for name, index in outputs.items()}

    return run


def _assert_streams_like_the_source(run) -> None:
    for got, want in zip(_streamed(run), _streamed(_onnxruntime(DTLN2)), strict=True):
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=1e-4)


def _assert_lifted_and_streamed(result, layers: int = 2) -> None:
    verification = result.verification
    assert result.whole and verification.passed and not verification.incomplete, verification.to_text()
    assert any(o.layer == "streamed" and o.output == STATE_OUT for o in verification.outputs)
    assert any(f"{STATE_OUT} -> {STATE_IN} (recurrent wiring)" in note for note in verification.notes)
    lifted = [f for found in result.findings.values() for f in found if f.feature == "lifted"]
    assert len(lifted) == layers and all("one unrolled LSTM step" in f.detail for f in lifted), lifted
    assert all("LSTM; gate order i, f, c, o" in f.detail and "proven against onnxruntime" in f.detail for f in lifted)


def test_dtln_model_2_is_read_as_two_lstm_layers_of_one_step():
    model = gp.load(DTLN2)
    assert [(lay.cell.value, lay.input_size, lay.hidden_size) for lay in model.layers] == [
        ("lstm", 256, 128),
        ("lstm", 128, 128),
    ]
    assert all(lay.interface.seq_length == 1 and lay.interface.initial_c for lay in model.layers)


def test_to_onnx_replaces_each_cell_by_an_lstm_node_and_streams_like_the_source(tmp_path):
    out = tmp_path / "m.onnx"
    _assert_lifted_and_streamed(gp.convert(DTLN2, out, to="onnx"))
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("LSTM") == 2 and "Split" not in ops and ops.count("Tanh") == 0
    _assert_streams_like_the_source(_onnxruntime(out))


def test_to_onnx_for_directml(tmp_path):
    out = tmp_path / "m.onnx"
    _assert_lifted_and_streamed(gp.convert(DTLN2, out, to="onnx", runtime="directml"))
    _assert_streams_like_the_source(_onnxruntime(out))


def test_to_openvino_streams_like_the_source_on_the_cpu_plugin(tmp_path):
    out = tmp_path / "m.xml"
    _assert_lifted_and_streamed(gp.convert(DTLN2, out, to="openvino"))
    _assert_streams_like_the_source(_openvino(out))


def test_to_litert_whole_streams_like_the_source_on_the_interpreter(tmp_path):
    out = tmp_path / "m.tflite"
    _assert_lifted_and_streamed(gp.convert(DTLN2, out, to="litert"))
    _assert_streams_like_the_source(_litert(out))


def test_to_coreml_from_the_command_line_exits_0_verified(tmp_path):
    done = CliRunner().invoke(main, ["convert", str(DTLN2), "--to", "coreml", "-o", str(tmp_path / "m.mlpackage")])
    assert done.exit_code == 0, done.output
    assert "verification passed" in done.output and "streamed tf_op_layer_stack_5" in done.output
    assert done.output.count("lifted from one unrolled LSTM step") == 2


def _with_activation(proto: onnx.ModelProto, node_name: str, op_type: str) -> onnx.ModelProto:
    edited = onnx.ModelProto()
    edited.CopyFrom(proto)
    next(n for n in edited.graph.node if n.name == node_name).op_type = op_type
    return edited


def test_a_cell_with_a_gate_activation_swapped_is_not_lifted_as_an_lstm(tmp_path):
    """The output gate of the first cell through Tanh instead of Sigmoid: no LSTM reading reproduces it, so that cell
    stays as it is (the second is still lifted); both swapped, no layer at all."""
    proto = onnx.load(str(DTLN2))
    first = _with_activation(proto, "model_2/lstm_6/Sigmoid_2", "Tanh")
    onnx.save(first, str(tmp_path / "first.onnx"))
    model = gp.load(tmp_path / "first.onnx")
    assert [lay.name for lay in model.layers] == ["step:model_2/lstm_7/MatMul_1/ReadVariableOp/resource:0"]
    both = _with_activation(first, "model_2/lstm_7/Sigmoid_2", "Tanh")
    onnx.save(both, str(tmp_path / "both.onnx"))
    with pytest.raises(gp.NoRecurrentLayerError, match="none of .* readings"):
        gp.load(tmp_path / "both.onnx")


# -- a GRU step written by hand, in Keras's two forms

I, H = 6, 5


def _gru_step_model(reset: str = "after") -> onnx.ModelProto:
    """One GRU step per call: x [1, I] and the state h [1, H] in, y = Relu(h_t) and h_t out. ``reset``: "after" the
    recurrent product (Keras's default: h @ R + rb split z, r, h, the reset times h's block), "before" it (Keras
    ``reset_after=False``: h @ R_zr, then (r * h) @ R_h), or "neither" (not a GRU: the new state keeps 1 - r of the
    candidate, not 1 - z)."""
    rng = np.random.default_rng(7)
    weights = {
        "W": rng.uniform(-0.5, 0.5, (I, 3 * H)),
        "R": rng.uniform(-0.5, 0.5, (H, 3 * H)),
        "b": rng.uniform(-0.5, 0.5, (3 * H,)),
        "rb": rng.uniform(-0.5, 0.5, (3 * H,)),
        "one": np.ones((1,)),
    }
    recurrent = [
        helper.make_node("MatMul", ["h", "R"], ["hr"]),
        helper.make_node("Add", ["hr", "rb"], ["hrb"]),
        helper.make_node("Split", ["hrb"], ["hz", "hr_", "hh"], axis=1),
        helper.make_node("Mul", ["r", "hh"], ["rhh"]),
    ]
    if reset == "before":
        weights["R_zr"], weights["R_h"] = weights.pop("R")[:, : 2 * H], rng.uniform(-0.5, 0.5, (H, H))
        del weights["rb"]
        recurrent = [
            helper.make_node("MatMul", ["h", "R_zr"], ["hzr"]),
            helper.make_node("Split", ["hzr"], ["hz", "hr_"], axis=1),
            helper.make_node("Mul", ["r", "h"], ["rh"]),
            helper.make_node("MatMul", ["rh", "R_h"], ["rhh"]),
        ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["xwb"]),
        helper.make_node("Split", ["xwb"], ["xz", "xr", "xh"], axis=1),
        *recurrent,
        helper.make_node("Add", ["xz", "hz"], ["z0"]),
        helper.make_node("Sigmoid", ["z0"], ["z"]),
        helper.make_node("Add", ["xr", "hr_"], ["r0"]),
        helper.make_node("Sigmoid", ["r0"], ["r"]),
        helper.make_node("Add", ["xh", "rhh"], ["n0"]),
        helper.make_node("Tanh", ["n0"], ["n"]),
        helper.make_node("Sub", ["one", "r" if reset == "neither" else "z"], ["keep"]),
        helper.make_node("Mul", ["z", "h"], ["zh"]),
        helper.make_node("Mul", ["keep", "n"], ["zn"]),
        helper.make_node("Add", ["zh", "zn"], ["h_t"]),
        helper.make_node("Relu", ["h_t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gru_step",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, I]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, H]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, H]),
            helper.make_tensor_value_info("h_t", TensorProto.FLOAT, [1, H]),
        ],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("reset", ["after", "before"])
def test_a_gru_step_is_lifted_and_converts_whole_streaming_like_the_source(reset, tmp_path):
    src, out = tmp_path / "gru_step.onnx", tmp_path / "m.onnx"
    onnx.save(_gru_step_model(reset), str(src))
    (layer,) = gp.load(src).layers
    lbr = reset == "after"
    assert (layer.cell.value, layer.input_size, layer.hidden_size, layer.linear_before_reset) == ("gru", I, H, lbr)
    result = gp.convert(src, out, to="onnx")
    assert result.verification.passed and any("h_t -> h (" in note for note in result.verification.notes)
    assert [n.op_type for n in onnx.load(str(out)).graph.node].count("GRU") == 1
    source, written = _onnxruntime(src), _onnxruntime(out)
    rng = np.random.default_rng(5)
    states = [np.zeros((1, H), np.float32)] * 2
    for _ in range(FRAMES):
        x = rng.uniform(-1, 1, (1, I)).astype(np.float32)
        want, got = source({"x": x, "h": states[0]}), written({"x": x, "h": states[1]})
        np.testing.assert_allclose(got["y"], want["y"], atol=1e-5, rtol=1e-5)
        states = [want["h_t"], got["h_t"]]
    np.testing.assert_allclose(states[1], states[0], atol=1e-5, rtol=1e-5)


def test_a_step_that_is_no_gru_is_not_lifted(tmp_path):
    onnx.save(_gru_step_model("neither"), str(tmp_path / "not_gru.onnx"))
    with pytest.raises(gp.NoRecurrentLayerError, match="none of .* readings"):
        gp.load(tmp_path / "not_gru.onnx")

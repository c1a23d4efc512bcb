"""The ONNX operator table's litert column: each entry alone against onnxruntime, the translated file run on
LiteRT's interpreter (ai-edge-litert, from its bytes as written); refusals naming the node; adjacent transposes
folded; whole models with a recurrent layer inside, end to end (gatepack's verification against onnxruntime, and
the file run again here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_to_mil import onnxruntime_outputs, operator_model

import gatepack.converters as gp
from gatepack.converters.errors import RefusedError
from gatepack.converters.formats.litert.running import run_native
from gatepack.converters.formats.litert.whole import translate_onnx

pytest.importorskip("ai_edge_litert")

RNG = np.random.default_rng(0)
REALMODELS = Path(__file__).resolve().parent.parent / "fixtures" / "realmodels"


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _on_litert(proto, inputs: dict, tmp_path: Path) -> list:
    path = tmp_path / "op.tflite"
    path.write_bytes(translate_onnx(proto, tmp_path))
    got = run_native(path, inputs)
    return [got[o.name] for o in proto.graph.output]


def check(tmp_path, op_type, inputs, attributes=None, *, atol=1e-5, rtol=1e-5, **options):
    """``op_type`` translated and run on LiteRT's interpreter gives onnxruntime's outputs (shapes and values)."""
    proto = operator_model(op_type, inputs, attributes, **options)
    for want, have in zip(onnxruntime_outputs(proto, inputs), _on_litert(proto, inputs, tmp_path)):
        assert np.shape(have) == np.shape(want)
        np.testing.assert_allclose(np.asarray(have, np.float64), want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_arithmetic_broadcasts(tmp_path, op):
    check(tmp_path, op, {"a": _f(2, 3, 4), "b": _f(3, 1) + 3})


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Relu", "Abs", "Exp", "Neg"])
def test_activations(tmp_path, op):
    check(tmp_path, op, {"x": _f(2, 3, 5)})


@pytest.mark.parametrize("exponent", [2.0, 0.5, 3.0])
def test_pow_constant_exponent(tmp_path, exponent):
    check(tmp_path, "Pow", {"x": np.abs(_f(2, 3)) + 0.1}, constants={"y": np.array(exponent, np.float32)}, opset=11)


def test_sqrt_and_prelu_with_a_channel_slope(tmp_path):
    check(tmp_path, "Sqrt", {"x": np.abs(_f(2, 3))})
    check(tmp_path, "PRelu", {"x": _f(1, 4, 3, 5)}, constants={"slope": _f(4, 1, 1)})


def test_matmul_constant_weights_and_two_inputs(tmp_path):
    check(tmp_path, "MatMul", {"a": _f(2, 3, 4)}, constants={"b": _f(4, 5)})
    check(tmp_path, "MatMul", {"a": _f(2, 3, 4), "b": _f(2, 4, 5)})


@pytest.mark.parametrize(
    "attributes, w_shape",
    [
        ({"pads": [0, 1, 0, 1], "strides": [1, 2]}, (6, 4, 2, 3)),
        ({"pads": [1, 2, 0, 1], "dilations": [2, 1]}, (6, 4, 3, 3)),
        ({"group": 4, "pads": [0, 1, 0, 1]}, (8, 1, 3, 3)),  # depthwise, multiplier 2
        ({"group": 2, "pads": [0, 2, 0, 2], "strides": [1, 2]}, (6, 2, 1, 5)),  # one CONV_2D per group
        ({"group": 2, "dilations": [2, 1], "pads": [2, 1, 0, 1]}, (4, 2, 2, 3)),
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (3, 4, 3, 2)),
        ({"auto_pad": "SAME_LOWER", "strides": [1, 2]}, (3, 4, 2, 3)),
        ({"auto_pad": "VALID"}, (3, 4, 2, 2)),
    ],
)
def test_conv_2d(tmp_path, attributes, w_shape):
    check(tmp_path, "Conv", {"x": _f(1, 4, 7, 9)}, attributes, constants={"w": _f(*w_shape), "b": _f(w_shape[0])})


def test_conv_1d_without_bias(tmp_path):
    check(tmp_path, "Conv", {"x": _f(2, 3, 11)}, {"pads": [2, 1], "strides": [2]}, constants={"w": _f(5, 3, 4)})


@pytest.mark.parametrize(
    "attributes, x_shape, w_shape",
    [
        ({}, (1, 6, 3, 5), (6, 4, 1, 1)),  # TRANSPOSE_CONV
        ({"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}, (1, 4, 3, 5), (4, 3, 3, 2)),
        ({"group": 4, "dilations": [5, 1], "pads": [10, 1, 10, 1]}, (1, 4, 12, 5), (4, 1, 3, 3)),  # gtcrn's
        ({"group": 2, "strides": [1, 2], "pads": [0, 2, 0, 2]}, (1, 8, 3, 9), (8, 4, 1, 5)),
        ({"group": 8, "strides": [1, 2], "pads": [0, 1, 0, 1], "output_padding": [0, 1]}, (1, 8, 3, 8), (8, 1, 1, 3)),
        ({"group": 3, "strides": [3], "pads": [1, 2], "dilations": [2]}, (2, 6, 7), (6, 2, 3)),  # 1-D
    ],
)
def test_conv_transpose(tmp_path, attributes, x_shape, w_shape):
    """ConvTranspose as TRANSPOSE_CONV (group 1, unit dilations) or the flipped convolution of the zero-stuffed
    input (groups, dilations, strides): onnxruntime's outputs."""
    out_channels = w_shape[1] * int(attributes.get("group", 1))
    constants = {"w": _f(*w_shape), "b": _f(out_channels)}
    check(tmp_path, "ConvTranspose", {"x": _f(*x_shape)}, attributes, constants=constants, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("btgi,gih->btgh", [(1, 5, 4, 6), (4, 6, 3)]),  # DeepFilterNet3's grouped linear
        ("bij,jk->bki", [(2, 3, 4), (4, 5)]),
        ("bij,ikl->jb", [(2, 3, 4), (3, 5, 7)]),  # k and l summed on their own first
    ],
)
def test_einsum(tmp_path, equation, shapes):
    check(tmp_path, "Einsum", {"a": _f(*shapes[0])}, {"equation": equation}, constants={"b": _f(*shapes[1])})
    check(tmp_path, "Einsum", {"a": _f(*shapes[0]), "b": _f(*shapes[1])}, {"equation": equation})


def test_reduce_sum_clip_and_comparisons(tmp_path):
    check(tmp_path, "ReduceSum", {"x": _f(2, 3, 4)}, constants={"axes": np.array([1], np.int64)})
    check(tmp_path, "ReduceSum", {"x": _f(2, 3, 4)}, {"keepdims": 0}, constants={"axes": np.array([-1, 0], np.int64)})
    check(tmp_path, "ReduceSum", {"x": _f(2, 3, 4)}, {"axes": [2]}, opset=11)
    bounds = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    check(tmp_path, "Clip", {"x": _f(2, 3, 4)}, constants=bounds)
    check(tmp_path, "Clip", {"x": _f(2, 3, 4)}, constants={"lo": np.array(-0.5, np.float32)})
    check(tmp_path, "Clip", {"x": _f(2, 3, 4), "lo": np.array(-0.5, np.float32)})  # a scalar input, fed 0-D
    check(tmp_path, "Clip", {"x": _f(2, 3)}, {"min": -0.2, "max": 0.3}, opset=6)
    for op in ("Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"):
        a = np.round(_f(2, 3, 4))
        check(tmp_path, op, {"a": a, "b": np.round(_f(3, 1))})
    check(tmp_path, "Where", {"c": _f(3, 1) > 0, "a": _f(2, 3, 4), "b": _f(4)})


def test_tensor_operators(tmp_path):
    check(tmp_path, "Transpose", {"x": _f(2, 3, 4, 5)}, {"perm": [0, 3, 1, 2]})
    check(tmp_path, "Reshape", {"x": _f(2, 3, 4)}, constants={"s": np.array([0, -1], np.int64)})
    check(tmp_path, "Squeeze", {"x": _f(2, 1, 4)}, {"axes": [1]}, opset=11)
    check(tmp_path, "Unsqueeze", {"x": _f(2, 4)}, {"axes": [-1, 0]}, opset=11)
    check(tmp_path, "Concat", {"a": _f(2, 3), "b": _f(2, 5)}, {"axis": -1})
    check(tmp_path, "Gather", {"x": _f(3, 5, 2)}, {"axis": 1}, constants={"i": np.array([[4, -1], [0, 2]], np.int64)})
    check(tmp_path, "Gather", {"x": _f(3, 5)}, {"axis": 0}, constants={"i": np.array(-1, np.int64)})
    check(tmp_path, "Pad", {"x": _f(2, 3)}, constants={"p": np.array([0, 1, 2, 0], np.int64)})
    check(tmp_path, "Split", {"x": _f(2, 6)}, {"axis": 1}, constants={"s": np.array([2, 4], np.int64)}, outputs=2)
    check(tmp_path, "Pad", {"x": _f(1, 4, 6)}, {"mode": "reflect"}, constants={"p": np.array([0, 0, 2, 0, 0, 3])})
    check(tmp_path, "Expand", {"x": _f(3, 1)}, constants={"s": np.array([2, 1, 4], np.int64)})
    check(tmp_path, "Cast", {"x": _f(3, 4) * 5}, {"to": TensorProto.INT32})
    check(tmp_path, "Cast", {"x": _f(3, 4) > 0}, {"to": TensorProto.FLOAT})


@pytest.mark.parametrize(
    "data, indices, updates",
    [
        ((2, 4, 5), [[1, 3], [0, -1]], (2, 5)),  # rows, one index negative
        ((2, 4, 5), [[1], [0]], (2, 4, 5)),  # whole blocks
        ((3, 4), [[[2, 1]], [[0, 0]]], (2, 1)),  # single elements, indices of rank 3
    ],
)
def test_scatter_nd(tmp_path, data, indices, updates):
    """ScatterND of constant indices (SCATTER_ND into zeros, SELECT_V2 with the data): onnxruntime's outputs."""
    inputs, constants = {"d": _f(*data), "u": _f(*updates)}, {"i": np.array(indices, np.int64)}
    check(tmp_path, "ScatterND", inputs, constants=constants, order=["d", "i", "u"])


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [([1, -3], [100, -1], [0, 2], [1, 1]), ([-1], [-100], [1], [-1]), ([4, 0], [0, 9], [1, 2], [-2, 3])],
)
def test_slice_clamps_as_onnx(tmp_path, starts, ends, axes, steps):
    constants = {k: np.array(v, np.int64) for k, v in zip("seap", (starts, ends, axes, steps))}
    check(tmp_path, "Slice", {"x": _f(3, 6, 9)}, constants=constants)


def test_reductions_softmax_and_batch_norm(tmp_path):
    check(tmp_path, "ReduceMean", {"x": _f(2, 3, 4, 5)}, {"axes": [-2, -1]}, opset=11)
    check(tmp_path, "ReduceMean", {"x": _f(2, 3, 4)}, {"axes": [-1], "keepdims": 0}, opset=11)
    check(tmp_path, "Softmax", {"x": _f(2, 3, 4)}, {"axis": -1})
    stats = {"s": _f(3), "b": _f(3), "m": _f(3), "v": np.abs(_f(3)) + 0.5}
    check(tmp_path, "BatchNormalization", {"x": _f(2, 3, 4, 5)}, constants=stats)


@pytest.mark.parametrize(
    "op, inputs, attributes, constants, match",
    [
        ("Softmax", {"x": _f(2, 3)}, {"axis": 0}, {}, r"Softmax .*'out0'.*LiteRT's SOFTMAX normalises the last axis"),
        ("Conv", {"x": _f(1, 2, 3, 4, 4)}, {}, {"w": _f(2, 2, 1, 1, 1)}, r"Conv .*a 3-D convolution"),
        ("Einsum", {"a": _f(2, 3)}, {"equation": "ij->ji"}, {}, r"Einsum .*1 operands"),
        ("Einsum", {"a": _f(3, 3), "b": _f(3)}, {"equation": "ii,i->i"}, {}, r"Einsum .*repeated letters"),
        ("Erf", {"a": _f(2, 3)}, {}, {}, r"Erf .*no translation to LiteRT builtin"),
        ("Conv", {"x": _f(1, 2, 5, 5)}, {"pads": [0, 0, 0, 0], "foo": 1}, {"w": _f(2, 2, 3, 3)}, r"foo not honoured"),
        (
            "ConvTranspose",
            {"x": _f(1, 2, 5, 5)},
            {"output_shape": [11, 11], "strides": [2, 2]},
            {"w": _f(2, 2, 3, 3)},
            r"ConvTranspose .*output_shape attribute",
        ),
        (
            "ConvTranspose",
            {"x": _f(1, 2, 5, 5)},
            {"auto_pad": "SAME_UPPER"},
            {"w": _f(2, 2, 3, 3)},
            r"ConvTranspose .*auto_pad SAME_UPPER; .*explicit pads",
        ),
        (
            "ConvTranspose",
            {"x": _f(1, 2, 6, 6)},
            {"group": 2, "pads": [3, 0, 0, 0]},
            {"w": _f(2, 1, 3, 3)},
            r"ConvTranspose .*pads \[3, 0, 0, 0\] beyond its kernel's reach",
        ),
        ("Pad", {"x": _f(2, 3)}, {"mode": "edge"}, {"p": np.array([0, 1, 0, 1])}, r"Pad .*mode 'edge'"),
        ("Pad", {"x": _f(2, 3)}, {"mode": "reflect"}, {"p": np.array([0, 3, 0, 0])}, r"reach past the edges"),
        ("Cast", {"x": _f(2, 3)}, {"to": TensorProto.INT64}, {}, r"Cast .*float-to-int64 cast"),
    ],
)
def test_refusals_name_the_node(tmp_path, op, inputs, attributes, constants, match):
    proto = operator_model(op, inputs, attributes, constants=constants)
    with pytest.raises(RefusedError, match=match):
        translate_onnx(proto, tmp_path)


@pytest.mark.parametrize(
    "indices, attributes, match",
    [
        ([[1], [1]], {}, r"ScatterND .*name an element twice"),
        ([[0], [1]], {"reduction": "add"}, r"ScatterND .*reduction 'add'"),
    ],
)
def test_scatter_nd_refusals(tmp_path, indices, attributes, match):
    inputs, constants = {"d": _f(2, 3), "u": _f(2, 3)}, {"i": np.array(indices, np.int64)}
    proto = operator_model("ScatterND", inputs, attributes, constants=constants, order=["d", "i", "u"])
    with pytest.raises(RefusedError, match=match):
        translate_onnx(proto, tmp_path)


def _if_model(condition: onnx.TensorProto | None) -> onnx.ModelProto:
    """y = If(cond) then relu(x) else -x; ``cond`` an initializer (known when converting) or a graph input."""
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])],
    )
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if condition is None:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "if",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [condition] if condition is not None else [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("value", [True, False])
def test_if_known_when_converting_is_its_branch(tmp_path, value):
    proto = _if_model(numpy_helper.from_array(np.array(value), "c"))
    feed = {"x": _f(2, 3)}
    np.testing.assert_array_equal(_on_litert(proto, feed, tmp_path)[0], onnxruntime_outputs(proto, feed)[0])


def test_if_decided_at_run_time_is_refused(tmp_path):
    with pytest.raises(RefusedError, match=r"If .*its condition is computed at run time"):
        translate_onnx(_if_model(None), tmp_path)


def _two_convs() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6])],
        [numpy_helper.from_array(_f(3, 3, 3, 3), n) for n in ("w1", "w2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_adjacent_transposes_fold(tmp_path):
    """Conv -> Conv keeps the activation channels-last between them: 3 TRANSPOSEs (x in, c1 for the Relu, c2 out)
    where the unfolded form has 4, and the result is onnxruntime's."""
    from gatepack.converters.formats.litert.reader import _File

    proto = _two_convs()
    feed = {"x": _f(1, 3, 6, 6)}
    got = _on_litert(proto, feed, tmp_path)
    np.testing.assert_allclose(got[0], onnxruntime_outputs(proto, feed)[0], atol=1e-5, rtol=1e-5)
    held = _File(tmp_path / "op.tflite")
    assert [held.op_name(op) for op in held.graph.operators].count("TRANSPOSE") == 3


def _relu_gru_relu(rng) -> onnx.ModelProto:
    h, i = 4, 3
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("GRU", ["r", "W", "R", "B"], ["y", "y_h"], hidden_size=h, linear_before_reset=1),
            helper.make_node("Relu", ["y"], ["out"]),
        ],
        "relu_gru_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, i])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [5, 1, 2, h]),
            helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, 2, h]),
        ],
        [
            numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
            for name, shape in (("W", (1, 3 * h, i)), ("R", (1, 3 * h, h)), ("B", (1, 6 * h)))
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_relu_gru_relu_whole_twice_in_a_row(tmp_path):
    """The whole model converts to LiteRT (report and convert agree), verified by gatepack; the file gives
    onnxruntime's outputs on two calls in a row with the same inputs (the GRU's state is not carried)."""
    src, out = tmp_path / "m.onnx", tmp_path / "m.tflite"
    proto = _relu_gru_relu(np.random.default_rng(1))
    onnx.save(proto, src)
    assert gp.report(src, to="litert").to_json()["model"]["litert"]["status"] == "exact"
    result = gp.convert(src, out, to="litert")
    assert result.whole and result.verification.passed, result.verification.to_text()
    feed = {"x": np.random.default_rng(2).standard_normal((5, 2, 3)).astype(np.float32)}
    want = onnxruntime_outputs(proto, feed)
    from gatepack.converters.formats.litert.running import open_session

    run = open_session(out)
    for _ in range(2):
        got = run(feed)
        for name, value in zip(("out", "y_h"), want):
            np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["dtln_model_1_lstm", "dpcrn_online_simple_lstm"])
def test_real_models_whole(name, tmp_path):
    """DTLN model 1 and DPCRN whole on LiteRT: verified end to end (one call and streamed calls, states fed back)."""
    src = REALMODELS / f"{name}.onnx"
    assert gp.report(src, to="litert").to_json()["model"]["litert"]["status"] in ("exact", "folded")
    result = gp.convert(src, tmp_path / "m.tflite", to="litert")
    assert result.whole and result.verification.passed and result.verification.streaming
    assert gp.load(tmp_path / "m.tflite").keeps_whole


def test_symbolic_inputs_are_refused_the_report_agreeing(tmp_path):
    """What the translation does not write is refused, the report agreeing with convert: nothing is written
    (DeepFilterNet3's decoder with its frame count left symbolic)."""
    src, out = REALMODELS / "dfn3_erb_dec.onnx", tmp_path / "m.tflite"
    finding = gp.report(src, to="litert").to_json()["model"]["litert"]
    assert finding["status"] == "unsupported" and "symbolic dimension" in finding["detail"]
    with pytest.raises(RefusedError) as refused:
        gp.convert(src, out, to="litert")
    assert finding["detail"] in str(refused.value) and not out.exists()


def test_run_time_if_is_refused_naming_its_node(tmp_path):
    """Silero VAD v4 decides its Ifs on the value of ``sr``: refused naming the If and the way out."""
    src, out = REALMODELS / "silero_vad_v4_lstm_in_if.onnx", tmp_path / "m.tflite"
    with pytest.raises(RefusedError, match=r"If_25.*run time.*--input-value sr=16000"):
        gp.convert(src, out, to="litert", input_shapes={"input": (1, 512)})
    assert not out.exists()


def test_layer_shapes_in_a_whole_model_are_the_input_shapes_used(tmp_path):
    """A whole model's layer runs at the S and N its X has once --input-shape fixes the model's symbolic sizes (the
    translation's static shapes, as the written file holds them), not at --seq-length/--batch-size's defaults: the
    shapes finding says what was used and assumes nothing (the file's GRU input read back as the oracle)."""
    src, out = tmp_path / "m.onnx", tmp_path / "m.tflite"
    proto = _relu_gru_relu(np.random.default_rng(1))
    for value in (*proto.graph.input, *proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_param = "frames"  # S and N symbolic
        dims[-2].dim_param = "batch"
    onnx.save(proto, src)
    result = gp.convert(src, out, to="litert", input_shapes={"x": (9, 2, 3)})
    assert result.whole and result.verification.passed, result.verification.to_text()
    (shapes,) = [f for f in next(iter(result.findings.values())) if f.feature == "shapes"]
    assert shapes.status.value == "repacked" and "fixed to S=9, N=2 by the input shapes given" in shapes.detail
    assert shapes.warning is None and "--seq-length" not in shapes.detail
    (written,) = gp.load(out).layers
    assert (written.interface.seq_length, written.interface.batch_size) == (9, 2)

"""The ONNX -> MIL operator table, each entry against onnxruntime on the operator alone (tests/onnx_to_mil.py)."""

import numpy as np
import pytest
from onnx_to_mil import check_operator, check_refused

RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_broadcasting_arithmetic(tmp_path, op):
    check_operator(tmp_path, op, {"a": _f(2, 3, 4), "b": _f(3, 1) + 3.0})


def test_transpose_default_reverses_axes(tmp_path):
    check_operator(tmp_path, "Transpose", {"x": _f(2, 3, 4)})


def test_unknown_operator_is_refused_naming_it(tmp_path):
    check_refused(tmp_path, "Hardmax", {"x": _f(2, 3)}, match=r"Hardmax .*no translation to MIL")


def test_attribute_not_honoured_is_refused(tmp_path):
    check_refused(tmp_path, "Concat", {"a": _f(2), "b": _f(2)}, {"axis": 0, "bogus": 1}, match="bogus not honoured")


def _if_model(condition_from_input: bool):
    """out = If(sr == 16000) then x * 2 else x - 1, with sr a scalar int64 input (silero VAD's sample-rate switch)
    or a constant."""
    from onnx import TensorProto, helper, numpy_helper

    def branch(name, op, value):
        c = numpy_helper.from_array(np.array(value, np.float32), f"{name}_c")
        node = helper.make_node(op, ["x", f"{name}_c"], [f"{name}_out"])
        return helper.make_graph(
            [node], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])], [c]
        )

    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    initializers = [numpy_helper.from_array(np.array(16000, np.int64), "rate")]
    if condition_from_input:
        inputs.append(helper.make_tensor_value_info("sr", TensorProto.INT64, []))
    else:
        initializers.append(numpy_helper.from_array(np.array(8000, np.int64), "sr"))
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["flag"]),
        helper.make_node(
            "If", ["flag"], ["out"], then_branch=branch("then", "Mul", 2.0), else_branch=branch("else", "Sub", 1.0)
        ),
    ]
    graph = helper.make_graph(
        nodes, "if", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])], initializers
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_if_on_a_constant_condition_is_inlined(tmp_path):
    from onnx_to_mil import onnxruntime_outputs, translated_outputs

    proto, x = _if_model(False), _f(2, 3)
    got = translated_outputs(proto, {"x": x}, tmp_path)[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(proto, {"x": x})[0])


@pytest.mark.parametrize("rate", [16000, 8000])
def test_if_on_an_input_becomes_cond_with_both_branches(tmp_path, rate):
    from onnx_to_mil import onnxruntime_outputs, translated_outputs

    proto, feed = _if_model(True), {"x": _f(2, 3), "sr": np.array(rate, np.int64)}
    got = translated_outputs(proto, feed, tmp_path)[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(proto, feed)[0], rtol=1e-6)


def test_no_mil_op_is_defined_twice_in_the_interpreter():
    from gatepack.converters.formats.coreml.interpreter import OP_GROUPS

    names = [name for group in OP_GROUPS for name in group]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})

"""The quantization entries of the ONNX -> MIL operator table (DynamicQuantizeLinear, QuantizeLinear, DequantizeLinear,
MatMulInteger, ConvInteger, a Gather of quantized constants), each against onnxruntime on the operator alone
(tests/onnx_to_mil.py): integer outputs equal, float outputs within float32's rounding."""

import numpy as np
import pytest
from onnx import helper
from onnx_to_mil import check_operator, check_refused, operator_model, translated_outputs

RNG = np.random.default_rng(3)


def _f(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _u8(*shape):
    return RNG.integers(0, 256, shape).astype(np.uint8)


def _i8(*shape):
    """int8 within +-64: onnxruntime's uint8 x int8 kernel on x86 without VNNI adds pairs of products in 16 bits,
    saturating beyond (docs/conventions.md §9), so only these values have one answer to compare with."""
    return RNG.integers(-64, 64, shape).astype(np.int8)


@pytest.mark.parametrize(
    "x",
    [
        _f(3, 5, 7),
        np.abs(_f(4, 6)),  # no negative value: the zero point 0
        -np.abs(_f(4, 6)),  # no positive value: the zero point 255
        np.zeros((2, 3), np.float32),  # an empty range: scale 1 (onnxruntime's choice)
        np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 127.5]], np.float32),  # ties: to even
    ],
)
def test_dynamic_quantize_linear(tmp_path, x):
    check_operator(tmp_path, "DynamicQuantizeLinear", {"x": x}, outputs=3, opset=11, atol=0, rtol=0)


def test_dynamic_quantize_linear_rounds_ties_to_even(tmp_path):
    """x / scale lands on halves: scale 1 (range 255 with both signs), so the values are their own quotients."""
    x = np.array([[-127.5, -0.5, 0.5, 1.5, 2.5, 3.5, 126.5, 127.5]], np.float32)
    check_operator(tmp_path, "DynamicQuantizeLinear", {"x": x}, outputs=3, opset=11, atol=0, rtol=0)


@pytest.mark.parametrize("zero_point", [np.uint8(128), np.int8(-3)])
def test_quantize_then_dequantize_linear(tmp_path, zero_point):
    """QuantizeLinear's 8-bit output read by DequantizeLinear (a Narrow tensor passed between two entries)."""
    x = _f(2, 3, 4, scale=3.0)
    x[0, 0, :2] = [0.25, 0.75]  # ties at scale 0.5
    scale, zp = np.float32(0.5), np.asarray(zero_point)
    quantize = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])
    check_operator(
        tmp_path,
        "DequantizeLinear",
        {"x": x},
        constants={"s": scale, "z": zp},
        order=["q", "s", "z"],
        before=[quantize],
        opset=13,
        atol=0,
        rtol=0,
    )


def test_quantize_linear_per_axis(tmp_path):
    scale = np.array([0.1, 0.02, 0.5], np.float32)
    zp = np.array([0, 10, 250], np.uint8)
    check_operator(
        tmp_path,
        "QuantizeLinear",
        {"x": _f(2, 3, 4)},
        {"axis": 1},
        constants={"s": scale, "z": zp},
        opset=13,
        atol=0,
        rtol=0,
    )


def test_dequantize_linear_per_axis_of_a_run_time_input(tmp_path):
    """A uint8 graph input is refused where MIL has no uint8 input; a quantized Gather feeds it instead."""
    table = _u8(10, 4)
    gather = helper.make_node("Gather", ["table", "ids"], ["q"], axis=0)
    check_operator(
        tmp_path,
        "DequantizeLinear",
        {"ids": np.array([[1, 9, 0], [3, 3, 7]], np.int64)},
        {"axis": 2},
        constants={
            "table": table,
            "s": np.array([0.5, 0.25, 2.0, 1.0], np.float32),
            "z": np.array([128, 0, 255, 3], np.uint8),
        },
        order=["q", "s", "z"],
        before=[gather],
        opset=13,
        atol=0,
        rtol=0,
    )


def _after_dynamic_quantization(tmp_path, op_type: str, x, attributes: dict, constants: dict) -> None:
    """``op_type`` reading DynamicQuantizeLinear(x) and its zero point, then the constant operand and its zero point
    (quantize_dynamic's pattern), against onnxruntime exactly."""
    quantize = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "zq"])
    operand, zero_point = constants
    order = ["q", operand, "zq", zero_point]
    check_operator(
        tmp_path,
        op_type,
        {"x": x},
        attributes,
        constants=constants,
        order=order,
        before=[quantize],
        opset=11,
        atol=0,
        rtol=0,
    )


@pytest.mark.parametrize("b, b_zero_point", [(_i8(6, 5), np.int8(0)), (_u8(6, 5), np.arange(5).astype(np.uint8) * 40)])
def test_matmul_integer_after_dynamic_quantization(tmp_path, b, b_zero_point):
    """quantize_dynamic's MatMul: DynamicQuantizeLinear(x) -> MatMulInteger(x_q, B, x_zp, B_zp), exactly."""
    _after_dynamic_quantization(tmp_path, "MatMulInteger", _f(2, 3, 6), {}, {"b": b, "zb": b_zero_point})


def test_matmul_integer_per_row_zero_point_against_the_spec(tmp_path):
    """onnxruntime refuses a per-row A zero point, so the oracle is the spec in int64 NumPy:
    ``(A - za[:, None]) @ (B - zb)``."""
    a, b, za, zb = _u8(4, 6), _u8(6, 3), np.arange(4).astype(np.uint8) * 30, np.uint8(100)
    gather = helper.make_node("Gather", ["table", "ids"], ["q"], axis=0)  # A as a run-time uint8 tensor
    proto = operator_model(
        "MatMulInteger",
        {"ids": np.arange(4, dtype=np.int64)},
        constants={"table": a, "b": b, "za": za, "zb": zb},
        order=["q", "b", "za", "zb"],
        before=[gather],
        opset=11,
    )
    (got,) = translated_outputs(proto, {"ids": np.arange(4, dtype=np.int64)}, tmp_path)
    want = (a.astype(np.int64) - za[:, None]) @ (b.astype(np.int64) - zb)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "attributes",
    [{"pads": [1, 1, 1, 1]}, {"strides": [2, 1], "dilations": [1, 2]}, {"group": 2}, {"auto_pad": "SAME_UPPER"}],
)
def test_conv_integer_pads_with_the_zero_point(tmp_path, attributes):
    """quantize_dynamic's Conv: DynamicQuantizeLinear(x) -> ConvInteger(x_q, W, x_zp, W_zp); padding is the zero
    point's (0 once it is taken off)."""
    group = attributes.get("group", 1)
    weight = _u8(4, 4 // group, 3, 3)
    constants = {"w": weight, "zw": np.uint8(17)}  # onnxruntime takes one W zero point
    _after_dynamic_quantization(tmp_path, "ConvInteger", _f(1, 4, 6, 7), attributes, constants)


def test_an_eight_bit_tensor_read_as_numbers_elsewhere_is_refused_naming_it(tmp_path):
    """uint8 arithmetic wraps at 256, which the int32 held tensor would not: Add of two is refused, never guessed."""
    quantize = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "zq"])
    check_refused(
        tmp_path,
        "Add",
        {"x": _f(2, 3)},
        order=["q", "q"],
        before=[quantize],
        opset=11,
        match="Add .*'q' is uint8",
    )


@pytest.mark.parametrize("to", [1, 6])  # FLOAT, INT32
def test_cast_of_an_eight_bit_tensor_keeps_its_values(tmp_path, to):
    table = np.concatenate([_u8(3, 4), np.array([[0, 1, 254, 255]], np.uint8)])
    gather = helper.make_node("Gather", ["table", "ids"], ["q"], axis=0)
    ids = {"ids": np.array([3, 0, 3, 2], np.int64)}
    check_operator(tmp_path, "Cast", ids, {"to": to}, constants={"table": table}, order=["q"], before=[gather])


def test_transpose_moves_an_eight_bit_tensor_unchanged(tmp_path):
    """A quantized embedding's rows transposed before DequantizeLinear (a shipped diacritizer's pattern): the 8-bit
    values are moved, never computed on, so Transpose takes them (exact against onnxruntime)."""
    gather = helper.make_node("Gather", ["table", "ids"], ["q"], axis=0)
    transpose = helper.make_node("Transpose", ["q"], ["qt"], perm=[2, 0, 1])
    check_operator(
        tmp_path,
        "DequantizeLinear",
        {"ids": np.array([[1, 9, 0], [3, 3, 7]], np.int64)},
        constants={"table": _u8(10, 4), "s": np.float32(0.25), "z": np.uint8(131)},
        order=["qt", "s", "z"],
        before=[gather, transpose],
        opset=13,
        atol=0,
        rtol=0,
    )

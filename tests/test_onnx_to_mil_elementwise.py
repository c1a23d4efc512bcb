"""The ONNX elementwise operators (arithmetic, comparisons, logic, activations, casts) translated to MIL, each
against onnxruntime on the operator alone (tests/onnx_to_mil.py); bools come from a comparison before the
operator (no Core ML input carries one)."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_to_mil import check_operator, check_refused

RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _i(*shape, dtype=np.int64):
    return RNG.integers(-9, 10, shape).astype(dtype)


def _bool_from(name: str, a: str, b: str):
    """A node ``name = a > b``."""
    return helper.make_node("Greater", [a, b], [name])


# --- arithmetic


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_float_arithmetic_broadcasts(tmp_path, op):
    check_operator(tmp_path, op, {"a": _f(2, 3, 4), "b": _f(3, 1) + 3})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_integer_arithmetic_division_truncates_toward_zero(tmp_path, op):
    divisor = np.array([[3], [-4], [5]], np.int64)  # no zero; signs mixed so floor and truncation differ
    check_operator(tmp_path, op, {"a": _i(2, 3, 4)}, constants={"b": divisor})


def test_integer_division_of_two_inputs(tmp_path):
    b = np.array([2, -3, 7, -1, 4, -5], np.int32)
    check_operator(tmp_path, "Div", {"a": _i(6, dtype=np.int32), "b": b})


@pytest.mark.parametrize("exponent", [2.0, 0.5, 1.0, 3.0, -1.5])
def test_pow_constant_exponent(tmp_path, exponent):
    x = np.abs(_f(2, 3, 4)) + 0.1
    check_operator(tmp_path, "Pow", {"x": x}, constants={"y": np.array(exponent, np.float32)}, opset=11)


def test_pow_exponent_that_widens_the_base_and_runtime_exponents(tmp_path):
    x = np.abs(_f(3, 1)) + 0.1
    check_operator(tmp_path, "Pow", {"x": x}, constants={"y": np.full((2, 1, 1), 2.0, np.float32)})
    check_operator(tmp_path, "Pow", {"x": x, "y": _f(1, 4)})


def test_pow_integer_exponent_of_a_float_base(tmp_path):
    x = _f(2, 3)
    check_operator(tmp_path, "Pow", {"x": x}, constants={"y": np.array(3, np.int64)}, opset=12)
    check_operator(tmp_path, "Pow", {"x": x, "y": np.array([[2], [3]], np.int64)}, opset=12)


def test_pow_float_exponent_of_an_integer_base_is_refused(tmp_path):
    check_refused(
        tmp_path, "Pow", {"x": _i(3)}, constants={"y": np.array(0.5, np.float32)}, match="int32 base with a fp32"
    )


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_sign_of_divisor_or_dividend(tmp_path, fmod):
    divisor = np.array([[3], [-4], [5]], np.int64)
    check_operator(tmp_path, "Mod", {"a": _i(2, 3, 4)}, {"fmod": fmod}, constants={"b": divisor})


def test_float_mod_is_fmod(tmp_path):
    b = np.array([1.5, -0.7, 2.0, -3.0], np.float32)
    check_operator(tmp_path, "Mod", {"a": _f(3, 4) * 4, "b": b}, {"fmod": 1})
    check_refused(tmp_path, "Mod", {"a": _f(4), "b": b}, match="fmod 0 of floats")


# --- unary


def _unary_inputs(op: str) -> np.ndarray:
    if op in ("Asin", "Acos", "Atanh"):
        return RNG.uniform(-0.9, 0.9, (2, 3, 4)).astype(np.float32)
    if op in ("Sqrt", "Log", "Reciprocal"):
        return np.abs(_f(2, 3, 4)) + 0.05
    if op == "Round":
        return np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1.2, -1.7, 0.0], np.float32)
    return _f(2, 3, 4) * 2


@pytest.mark.parametrize(
    "op",
    "Sqrt Exp Log Abs Neg Reciprocal Erf Floor Ceil Round Sign Sin Cos Tan Asin Acos Atan Sinh Cosh Atanh "
    "Sigmoid Tanh Relu Softplus Softsign".split(),
)
def test_float_unary(tmp_path, op):
    check_operator(tmp_path, op, {"x": _unary_inputs(op)})


def test_log_of_zero_is_minus_infinity(tmp_path):
    check_operator(tmp_path, "Log", {"x": np.array([0.0, 1e-30, 1.0], np.float32)})


@pytest.mark.parametrize(
    "op, attributes",
    [
        ("IsNaN", {}),
        ("IsInf", {}),
        ("IsInf", {"detect_negative": 0}),
        ("IsInf", {"detect_positive": 0}),
        ("IsInf", {"detect_positive": 0, "detect_negative": 0}),
    ],
)
def test_nan_and_infinity_tests(tmp_path, op, attributes):
    x = np.array([0.0, np.nan, np.inf, -np.inf, 1.5, -2.0], np.float32)
    check_operator(tmp_path, op, {"x": x}, attributes)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu"])
def test_integer_unary(tmp_path, op):
    check_operator(tmp_path, op, {"x": _i(3, 4, dtype=np.int32)})


def test_legacy_opset_is_refused_by_the_range(tmp_path):
    check_refused(tmp_path, "Add", {"a": _f(2), "b": _f(2)}, opset=6, match="covers opsets 7")


# --- variadic


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_broadcasts_and_takes_one_input(tmp_path, op):
    check_operator(tmp_path, op, {"a": _f(2, 3, 4), "b": _f(3, 1), "c": _f(4)})
    check_operator(tmp_path, op, {"a": _f(2, 3)})


def test_integer_max(tmp_path):
    check_operator(tmp_path, "Max", {"a": _i(2, 3), "b": _i(3)})


# --- comparisons, logic, where


@pytest.mark.parametrize("op", ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"])
def test_comparisons(tmp_path, op):
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)
    check_operator(tmp_path, op, {"a": a, "b": np.array([2.0, 2.0, 1.0], np.float32)})
    check_operator(tmp_path, op, {"a": _i(2, 5)}, constants={"b": np.array(1, np.int64)})


def test_equal_of_bools(tmp_path):
    inputs = {"a": _f(2, 5), "b": _f(2, 5), "c": _f(5)}
    before = [_bool_from("p", "a", "b"), _bool_from("q", "a", "c")]
    check_operator(tmp_path, "Equal", inputs, order=["p", "q"], before=before)


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "Not"])
def test_logic(tmp_path, op):
    inputs = {"a": _f(2, 5), "b": _f(2, 5), "c": _f(5)}
    before = [_bool_from("p", "a", "b"), _bool_from("q", "a", "c")]
    check_operator(tmp_path, op, inputs, order=["p"] if op == "Not" else ["p", "q"], before=before)


def test_where_broadcasts_condition_and_values(tmp_path):
    inputs = {"a": _f(2, 3, 4), "b": _f(4), "x": _f(3, 1), "y": _f(2, 1, 4)}
    check_operator(tmp_path, "Where", inputs, order=["c", "x", "y"], before=[_bool_from("c", "a", "b")])


def test_where_of_integers_after_equal(tmp_path):
    """gtcrn's pattern: Where(Equal(shape, -1), ones, shape)."""
    equal = helper.make_node("Equal", ["a", "minus_one"], ["c"])
    check_operator(
        tmp_path,
        "Where",
        {"a": np.array([3, -1, 4, -1], np.int64)},
        constants={"minus_one": np.array(-1, np.int64), "ones": np.ones(4, np.int64)},
        order=["c", "ones", "a"],
        before=[equal],
    )


# --- cast


@pytest.mark.parametrize(
    "source, to",
    [
        (np.float32, TensorProto.INT32),
        (np.float32, TensorProto.INT64),
        (np.float32, TensorProto.BOOL),
        (np.float32, TensorProto.FLOAT),
        (np.float32, TensorProto.DOUBLE),
        (np.int64, TensorProto.FLOAT),
        (np.int64, TensorProto.INT32),
        (np.int32, TensorProto.INT64),
    ],
)
def test_cast(tmp_path, source, to):
    x = (_f(3, 4) * 5).astype(source)
    x.reshape(-1)[:3] = [0, 2.5, -2.5]  # zero to bool, halves truncated toward zero
    check_operator(tmp_path, "Cast", {"x": x}, {"to": to})


def test_cast_of_a_bool(tmp_path):
    before = [_bool_from("c", "a", "b")]
    for to in (TensorProto.FLOAT, TensorProto.INT64):
        check_operator(tmp_path, "Cast", {"a": _f(2, 3), "b": _f(3)}, {"to": to}, order=["c"], before=before)


def test_cast_to_a_type_mil_does_not_compute_with_is_refused(tmp_path):
    check_refused(tmp_path, "Cast", {"x": _f(3)}, {"to": TensorProto.UINT8}, match="element type 2")


# --- clip


@pytest.mark.parametrize(
    "order, constants",
    [
        (["x", "lo", "hi"], {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
        (["x", "lo"], {"lo": np.array(1e-8, np.float32)}),  # ulunas: a floor before Log
        (["x", "", "hi"], {"hi": np.array(0.2, np.float32)}),
        (["x"], {}),
        (["x", "lo", "hi"], {"lo": np.array(0.5, np.float32), "hi": np.array(-0.5, np.float32)}),  # lo > hi
        (["x", "lo", "hi"], {"lo": np.array(0.5, np.float32), "hi": np.array(0.5, np.float32)}),
    ],
)
def test_clip_inputs(tmp_path, order, constants):
    check_operator(tmp_path, "Clip", {"x": _f(3, 4)}, constants=constants, order=order, opset=11)


def test_clip_bounds_at_run_time_and_integers(tmp_path):
    squeeze = helper.make_node("Squeeze", ["lo1"], ["lo"])  # a scalar computed at run time
    check_operator(
        tmp_path,
        "Clip",
        {"x": _f(3, 4), "lo1": _f(1)},
        constants={"hi": np.array(0.5, np.float32)},
        order=["x", "lo", "hi"],
        before=[squeeze],
    )
    check_operator(tmp_path, "Clip", {"x": _i(3, 4)}, constants={"lo": np.array(-2, np.int64)}, order=["x", "lo"])


@pytest.mark.parametrize("attributes", [{"min": -0.5, "max": 0.3}, {"min": 0.1}, {"max": 0.0}, {}])
def test_clip_attributes_before_opset_11(tmp_path, attributes):
    check_operator(tmp_path, "Clip", {"x": _f(3, 4)}, attributes, opset=10)


# --- activations


@pytest.mark.parametrize(
    "op, attributes, opset",
    [
        ("LeakyRelu", {}, 17),
        ("LeakyRelu", {"alpha": 0.3}, 17),
        ("Elu", {}, 17),
        ("Elu", {"alpha": 0.4}, 17),
        ("HardSigmoid", {}, 17),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.6}, 17),
        ("Selu", {}, 17),
        ("Selu", {"alpha": 1.5, "gamma": 2.0}, 17),
        ("Celu", {}, 17),
        ("Celu", {"alpha": 0.5}, 17),
        ("ThresholdedRelu", {}, 17),
        ("ThresholdedRelu", {"alpha": 0.5}, 17),
        ("HardSwish", {}, 17),
        ("Mish", {}, 18),
        ("Gelu", {}, 20),
        ("Gelu", {"approximate": "tanh"}, 20),
    ],
)
def test_activations(tmp_path, op, attributes, opset):
    x = _f(2, 3, 4) * 3
    x.reshape(-1)[:3] = [1.0, 0.5, 0.0]  # ThresholdedRelu's ties: x == alpha gives 0
    check_operator(tmp_path, op, {"x": x}, attributes, opset=opset)


def test_gelu_approximation_it_does_not_know_is_refused(tmp_path):
    check_refused(tmp_path, "Gelu", {"x": _f(3)}, {"approximate": "cubic"}, opset=20, match="approximate 'cubic'")


@pytest.mark.parametrize(
    "x_shape, slope_shape",
    [
        ((2, 4, 3, 5), (1, 1, 1)),  # gtcrn, dpcrn: one slope (leaky_relu)
        ((2, 4, 3, 5), (4, 1, 1)),  # per channel of a rank-4 x (MIL's prelu)
        ((2, 4, 5), (4, 1)),  # per channel of a rank-3 x (select)
        ((2, 3, 5), (5,)),  # along the last axis (select)
        ((3, 5), (3, 5)),
    ],
)
def test_prelu_slope_shapes(tmp_path, x_shape, slope_shape):
    slope = RNG.uniform(0.05, 0.5, slope_shape).astype(np.float32)
    check_operator(tmp_path, "PRelu", {"x": _f(*x_shape)}, constants={"slope": slope}, opset=11)


def test_prelu_slope_at_run_time(tmp_path):
    check_operator(tmp_path, "PRelu", {"x": _f(2, 4, 3), "slope": _f(3)})

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

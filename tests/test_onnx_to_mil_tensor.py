"""The tensor operators of the ONNX -> MIL table (shapes, reshaping, indexing, joining, padding), each against
onnxruntime on the operator alone (tests/onnx_to_mil.py). Operands the pipeline would fold are given as graph
inputs, so the translation works on values computed at run time; ``_check_symbolic`` also declares an input's
dimensions symbolic in the ONNX model, as a model with a free sequence length has them."""

import numpy as np
import pytest
from onnx_to_mil import check_operator, check_refused, onnxruntime_outputs, operator_model, translated_outputs

RNG = np.random.default_rng(0)
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _i(*values):
    return np.asarray(values, np.int64)


def _check_symbolic(tmp_path, op_type, inputs, attributes=None, *, symbolic: dict, **options):
    """``check_operator`` with the dimensions ``symbolic[name]`` (indices) of input ``name`` declared symbolic
    (dim_param) in the model, so the translation sees them only at run time."""
    proto = operator_model(op_type, inputs, attributes, **options)
    for value in proto.graph.input:
        for k in symbolic.get(value.name, []):
            value.type.tensor_type.shape.dim[k].dim_param = f"{value.name}_{k}"
    want, have = onnxruntime_outputs(proto, inputs), translated_outputs(proto, inputs, tmp_path)
    for w, h in zip(want, have):
        assert np.shape(h) == np.shape(w)
        np.testing.assert_allclose(np.asarray(h, np.float64), np.asarray(w, np.float64), atol=1e-6)


# ------------------------------------------------------------------------------------------------ layout


def test_transpose_default_reverses_axes(tmp_path):
    check_operator(tmp_path, "Transpose", {"x": _f(2, 3, 4)})


def test_transpose_perm_on_symbolic_dims(tmp_path):
    _check_symbolic(tmp_path, "Transpose", {"x": _f(2, 3, 4, 5)}, {"perm": [0, 2, 3, 1]}, symbolic={"x": [0, 2]})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_and_unsqueeze_negative_axes(tmp_path, opset):
    axes = {"axes": [-1, 1]} if opset < 13 else {}
    constants = {} if opset < 13 else {"axes": _i(-1, 1)}
    check_operator(tmp_path, "Squeeze", {"x": _f(2, 1, 3, 1)}, axes, constants=constants, opset=opset)
    check_operator(tmp_path, "Unsqueeze", {"x": _f(2, 3)}, axes, constants=constants, opset=opset)


def test_squeeze_without_axes(tmp_path):
    check_operator(tmp_path, "Squeeze", {"x": _f(1, 3, 1, 2)})


def test_squeeze_without_axes_on_symbolic_dims_is_refused(tmp_path):
    proto = operator_model("Squeeze", {"x": _f(1, 3)})
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    from gatepack.converters.errors import RefusedError
    from gatepack.converters.formats.coreml.whole import translate_onnx

    with pytest.raises(RefusedError, match="Squeeze .*symbolic input shape"):
        translate_onnx(proto, tmp_path)


def test_identity(tmp_path):
    check_operator(tmp_path, "Identity", {"x": _f(2, 3)})


@pytest.mark.parametrize("axis", [1, -1])
def test_concat_with_a_constant_and_a_negative_axis(tmp_path, axis):
    check_operator(tmp_path, "Concat", {"a": _f(2, 3), "b": _f(2, 3)}, {"axis": axis}, constants={"c": _f(2, 3)})


# ------------------------------------------------------------------------------------------------ reshape


@pytest.mark.parametrize("shape", [(0, -1), (4, 0, 2), (-1,), (0, 0, 1, 4)])
def test_reshape_constant_shape_zero_copies_and_minus_one_infers(tmp_path, shape):
    check_operator(tmp_path, "Reshape", {"x": _f(2, 3, 4)}, constants={"shape": _i(*shape)}, opset=11)


def test_reshape_zero_copies_a_symbolic_dim(tmp_path):
    x = _f(5, 3, 4)
    _check_symbolic(tmp_path, "Reshape", {"x": x}, constants={"shape": _i(0, -1)}, symbolic={"x": [0]}, opset=11)
    _check_symbolic(tmp_path, "Reshape", {"x": x}, constants={"shape": _i(0, 2, 6)}, symbolic={"x": [0]}, opset=14)


def test_reshape_shape_computed_at_run_time(tmp_path):
    check_operator(tmp_path, "Reshape", {"x": _f(2, 3, 4), "shape": _i(0, -1, 2)}, opset=14)


def test_reshape_allowzero_with_a_zero_is_refused(tmp_path):
    check_refused(
        tmp_path, "Reshape", {"x": _f(2, 3)}, {"allowzero": 1}, constants={"shape": _i(0, 3)}, opset=14,
        match="allowzero = 1 with a 0",
    )
    check_refused(tmp_path, "Reshape", {"x": _f(2, 3), "s": _i(3, 2)}, {"allowzero": 1}, opset=14, match="run time")


def test_reshape_allowzero_without_a_zero(tmp_path):
    check_operator(tmp_path, "Reshape", {"x": _f(2, 3)}, {"allowzero": 1}, constants={"shape": _i(3, -1)}, opset=14)

"""The nn entries of the ONNX -> MIL operator table (matrix products, convolutions, pooling, normalisation,
reductions, Einsum), each against onnxruntime on the operator alone (tests/onnx_to_mil.py). The attribute sets
are the real models' (gtcrn, ulunas, dpcrn: opset 11; DeepFilterNet3: opset 12) and ONNX's other options."""

import numpy as np
import pytest
from onnx_to_mil import check_operator, check_refused, onnxruntime_outputs, operator_model, translated_outputs

RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _positive(*shape):
    return (RNG.random(shape) + 0.5).astype(np.float32)


# ----------------------------------------------------------------------------------------- matrix products


@pytest.mark.parametrize("shapes", [((2, 3, 4), (4, 5)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_broadcasts_and_promotes_vectors(tmp_path, shapes):
    check_operator(tmp_path, "MatMul", {"a": _f(*shapes[0])}, constants={"b": _f(*shapes[1])})


@pytest.mark.parametrize(
    "attributes, c_shape",
    [({}, (5,)), ({"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1}, (3, 1)), ({"transB": 1}, None)],
)
def test_gemm(tmp_path, attributes, c_shape):
    a = _f(4, 3) if attributes.get("transA") else _f(3, 4)
    b = _f(5, 4) if attributes.get("transB") else _f(4, 5)
    constants = {"b": b, **({"c": _f(*c_shape)} if c_shape else {})}
    check_operator(tmp_path, "Gemm", {"a": a}, attributes, constants=constants, opset=11)


def test_gemm_with_c_computed_at_run_time(tmp_path):
    check_operator(
        tmp_path,
        "Gemm",
        {"a": _f(3, 4), "c": _f(3, 5)},
        {"beta": 0.5},
        constants={"b": _f(4, 5)},
        order=["a", "b", "c"],
    )


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("btgi,gih->btgh", ((1, 5, 2, 3), (2, 3, 4))),  # DeepFilterNet3's grouped linear
        ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
        ("ij,kj->ik", ((3, 4), (5, 4))),
        ("abc,cd", ((2, 3, 4), (4, 5))),  # implicit output: 'abd'
        ("ij,jk->ki", ((3, 4), (4, 2))),
        ("abc,bd->cad", ((2, 3, 4), (3, 5))),  # 'a' summed away from the first operand alone... kept here
        ("ijk,k->i", ((2, 3, 4), (4,))),  # 'j' only in the first operand: summed
        ("i,j->ij", ((3,), (4,))),  # outer product
        ("abc->cb", ((2, 3, 4),)),  # one operand: a sum and a transpose
    ],
)
def test_einsum(tmp_path, equation, shapes):
    inputs = {f"x{k}": _f(*s) for k, s in enumerate(shapes)}
    check_operator(tmp_path, "Einsum", inputs, {"equation": equation}, opset=12)


@pytest.mark.parametrize("equation, shapes", [("ii->i", ((3, 3),)), ("...ij,jk->...ik", ((2, 3, 4), (4, 5)))])
def test_einsum_refuses_diagonals_and_ellipses_naming_the_equation(tmp_path, equation, shapes):
    inputs = {f"x{k}": _f(*s) for k, s in enumerate(shapes)}
    check_refused(tmp_path, "Einsum", inputs, {"equation": equation}, opset=12, match=f"Einsum .*{equation[:3]}")


def _check_symbolic(tmp_path, op_type, x, symbolic: dict[int, str], attributes, constants, opset):
    """``op_type`` on input ``x`` whose axes ``symbolic`` are declared by name only (sizes known at run time)."""
    proto = operator_model(op_type, {"x": x}, attributes, constants=constants, opset=opset)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    for axis, name in symbolic.items():
        dims[axis].Clear()
        dims[axis].dim_param = name
    want = onnxruntime_outputs(proto, {"x": x})[0]
    got = translated_outputs(proto, {"x": x}, tmp_path)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("symbolic", [{1: "T"}, {0: "B", 1: "T"}])
def test_einsum_with_symbolic_batch_and_time(tmp_path, symbolic):
    constants = {"w": _f(2, 3, 4)}
    _check_symbolic(tmp_path, "Einsum", _f(2, 7, 2, 3), symbolic, {"equation": "btgi,gih->btgh"}, constants, 12)


def test_conv_and_conv_transpose_with_symbolic_time(tmp_path):
    attributes = {"group": 4, "pads": [0, 1, 0, 1], "strides": [1, 2]}
    _check_symbolic(tmp_path, "Conv", _f(1, 4, 7, 9), {2: "T"}, attributes, {"w": _f(4, 1, 1, 3)}, 12)
    attributes["output_padding"] = [0, 1]
    _check_symbolic(tmp_path, "ConvTranspose", _f(1, 4, 7, 9), {2: "T"}, attributes, {"w": _f(4, 1, 1, 3)}, 12)


# ----------------------------------------------------------------------------------------- convolutions

_REAL_CONVS = [  # (input shape, weight shape, attributes) as gtcrn / dfn3 / ulunas / dpcrn have them
    ((1, 4, 3, 9), (4, 2, 1, 5), {"group": 2, "pads": [0, 2, 0, 2], "strides": [1, 2]}),
    ((1, 4, 6, 5), (4, 1, 3, 3), {"group": 4, "pads": [0, 1, 0, 1], "dilations": [2, 1]}),
    ((1, 3, 4, 7), (5, 3, 2, 3), {"pads": [0, 1, 0, 0]}),  # asymmetric, as after dfn3's/dpcrn's Pad
    ((1, 2, 5, 4), (4, 1, 5, 1), {"group": 2, "kernel_shape": [5, 1]}),
]


@pytest.mark.parametrize("x_shape, w_shape, attributes", _REAL_CONVS)
def test_conv_of_the_real_models(tmp_path, x_shape, w_shape, attributes):
    constants = {"w": _f(*w_shape), "b": _f(w_shape[0])}
    check_operator(tmp_path, "Conv", {"x": _f(*x_shape)}, attributes, constants=constants, opset=11)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("x_shape, w_shape", [((2, 3, 10), (4, 3, 4)), ((1, 2, 6, 7), (3, 2, 2, 3))])
def test_conv_auto_pad_with_strides(tmp_path, auto_pad, x_shape, w_shape):
    attributes = {"auto_pad": auto_pad, "strides": [2] * (len(x_shape) - 2)}
    check_operator(tmp_path, "Conv", {"x": _f(*x_shape)}, attributes, constants={"w": _f(*w_shape)})


def test_conv_3d_depthwise_dilated_strided(tmp_path):
    attributes = {"group": 3, "dilations": [1, 2, 1], "strides": [1, 1, 2], "pads": [1, 0, 2, 0, 2, 1]}
    check_operator(tmp_path, "Conv", {"x": _f(1, 3, 4, 6, 5)}, attributes, constants={"w": _f(6, 1, 2, 2, 3)})


def test_conv_with_a_weight_computed_at_run_time(tmp_path):
    check_operator(tmp_path, "Conv", {"x": _f(1, 2, 7), "w": _f(3, 2, 3)}, {"pads": [1, 1]})


def test_conv_refuses_a_kernel_shape_that_contradicts_the_weight(tmp_path):
    check_refused(
        tmp_path,
        "Conv",
        {"x": _f(1, 2, 7)},
        {"kernel_shape": [2]},
        constants={"w": _f(3, 2, 3)},
        match=r"Conv .*kernel_shape \[2\] differs",
    )


_REAL_TRANSPOSED = [  # gtcrn / ulunas / dfn3
    ((1, 4, 3, 5), (4, 2, 1, 5), {"group": 2, "pads": [0, 2, 0, 2], "strides": [1, 2]}),
    ((1, 4, 7, 5), (4, 1, 3, 3), {"group": 4, "pads": [4, 1, 4, 1], "dilations": [2, 1]}),
    ((1, 4, 2, 5), (4, 1, 1, 3), {"group": 4, "pads": [0, 1, 0, 1], "strides": [1, 2], "output_padding": [0, 1]}),
    ((1, 3, 2, 4), (3, 2, 2, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}),
]


@pytest.mark.parametrize("x_shape, w_shape, attributes", _REAL_TRANSPOSED)
def test_conv_transpose_of_the_real_models(tmp_path, x_shape, w_shape, attributes):
    constants = {"w": _f(*w_shape), "b": _f(w_shape[1] * attributes.get("group", 1))}
    check_operator(tmp_path, "ConvTranspose", {"x": _f(*x_shape)}, attributes, constants=constants, opset=11)


@pytest.mark.parametrize(
    "attributes",
    [
        {"strides": [2], "output_shape": [8]},  # total padding 2: one each side
        {"strides": [2], "auto_pad": "SAME_UPPER"},  # kernel 4, stride 2: total 2
        {"strides": [2], "auto_pad": "VALID", "dilations": [2]},
        {"strides": [3], "pads": [2, 1], "output_padding": [1]},
    ],
)
def test_conv_transpose_output_sizes(tmp_path, attributes):
    check_operator(tmp_path, "ConvTranspose", {"x": _f(2, 3, 4)}, attributes, constants={"w": _f(3, 2, 4)})


def test_conv_transpose_3d(tmp_path):
    attributes = {"strides": [2, 1, 2], "pads": [1, 0, 0, 1, 1, 1], "group": 2}
    check_operator(tmp_path, "ConvTranspose", {"x": _f(1, 4, 3, 2, 3)}, attributes, constants={"w": _f(4, 1, 3, 2, 3)})


@pytest.mark.parametrize(
    "attributes, match",
    [
        ({"strides": [2], "output_padding": [1]}, "output_padding .* exceeds its end pads"),
        ({"strides": [2], "output_shape": [9]}, "negative or odd totals"),
    ],
)
def test_conv_transpose_refusals(tmp_path, attributes, match):
    check_refused(
        tmp_path,
        "ConvTranspose",
        {"x": _f(2, 3, 4)},
        attributes,
        constants={"w": _f(3, 2, 4)},
        match=f"ConvTranspose .*{match}",
    )


# ----------------------------------------------------------------------------------------- pooling


@pytest.mark.parametrize(
    "op, attributes",
    [
        ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ],
)
def test_pools(tmp_path, op, attributes):
    check_operator(
        tmp_path, op, {"x": _f(2, 3, 7, 6) if "ceil_mode" not in attributes else _f(1, 2, 7, 7)}, attributes, opset=11
    )


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pools_1d_and_3d(tmp_path, op):
    check_operator(tmp_path, op, {"x": _f(2, 3, 9)}, {"kernel_shape": [3], "strides": [2]})
    check_operator(tmp_path, op, {"x": _f(1, 2, 4, 5, 6)}, {"kernel_shape": [2, 2, 3], "pads": [0, 1, 1, 1, 0, 1]})


@pytest.mark.parametrize(
    "op, attributes, match",
    [
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, "pools are not dilated"),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, "hangs past"),
    ],
)
def test_pool_refusals(tmp_path, op, attributes, match):
    check_refused(tmp_path, op, {"x": _f(1, 2, 5, 5)}, attributes, match=f"{op} .*{match}")


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(tmp_path, op):
    check_operator(tmp_path, op, {"x": _f(2, 3, 4, 5)})


# ----------------------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 3, 4, 5)])
def test_batch_normalization_inference(tmp_path, shape):
    constants = {"scale": _f(3), "bias": _f(3), "mean": _f(3), "var": _positive(3)}
    check_operator(
        tmp_path,
        "BatchNormalization",
        {"x": _f(*shape)},
        {"epsilon": 1e-3, "momentum": 0.9},
        constants=constants,
        opset=11,
    )


def test_batch_normalization_refuses_training(tmp_path):
    constants = {"scale": _f(3), "bias": _f(3), "mean": _f(3), "var": _positive(3)}
    check_refused(
        tmp_path,
        "BatchNormalization",
        {"x": _f(2, 3, 4)},
        {"training_mode": 1},
        constants=constants,
        opset=15,
        outputs=3,
        match="BatchNormalization .*training",
    )


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 3, 4, 5)])
def test_instance_normalization(tmp_path, shape):
    check_operator(
        tmp_path,
        "InstanceNormalization",
        {"x": _f(*shape)},
        {"epsilon": 1e-4},
        constants={"scale": _f(3), "bias": _f(3)},
    )


@pytest.mark.parametrize(
    "attributes, constants, order",
    [
        ({}, {"scale": _f(5), "bias": _f(5)}, None),
        ({"axis": 1, "epsilon": 1e-3}, {"scale": _f(4, 5)}, None),
        ({"axis": -2}, {"scale": _f(5)}, None),  # scale broadcast over the normalised [4, 5]
    ],
)
def test_layer_normalization(tmp_path, attributes, constants, order):
    check_operator(tmp_path, "LayerNormalization", {"x": _f(2, 4, 5)}, attributes, constants=constants, opset=17)


@pytest.mark.parametrize("runtime", ["scale", "bias"])
def test_layer_normalization_with_an_input_computed_at_run_time(tmp_path, runtime):
    values = {"scale": _f(5), "bias": _f(5)}
    inputs, constants = {"x": _f(2, 4, 5), runtime: values.pop(runtime)}, values
    check_operator(tmp_path, "LayerNormalization", inputs, constants=constants, order=["x", "scale", "bias"], opset=17)


# ----------------------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset, axis", [(13, 1), (13, None), (11, 1), (11, 0), (11, None), (11, -1)])
def test_softmax_across_opsets(tmp_path, op, opset, axis):
    attributes = {} if axis is None else {"axis": axis}
    check_operator(tmp_path, op, {"x": _f(2, 3, 4) * 3}, attributes, opset=opset)


# ----------------------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"])
@pytest.mark.parametrize("axes, keepdims", [([-1], 0), ([-2, -1], 1), ([1], 1), (None, 0)])
def test_reductions_axes_as_attribute(tmp_path, op, axes, keepdims):
    attributes = {"keepdims": keepdims, **({"axes": axes} if axes is not None else {})}
    check_operator(tmp_path, op, {"x": _f(2, 3, 4)}, attributes, opset=11)


@pytest.mark.parametrize("op, opset", [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMax", 18)])
def test_reductions_axes_as_input(tmp_path, op, opset):
    check_operator(tmp_path, op, {"x": _f(2, 3, 4)}, {"keepdims": 0}, constants={"axes": np.array([0, 2])}, opset=opset)
    check_operator(tmp_path, op, {"x": _f(2, 3, 4)}, {"noop_with_empty_axes": 1}, opset=opset)


@pytest.mark.parametrize("op", ["ReduceLogSumExp", "ReduceSumSquare", "ReduceL1"])
def test_other_reductions(tmp_path, op):
    check_operator(tmp_path, op, {"x": _f(2, 3, 4)}, {"axes": [1]}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(None, None), (-1, 0), (1, 1), (2, 0)])
def test_arg_max_and_min_with_ties(tmp_path, op, axis, keepdims):
    """text2tashkeel's rawi_ensemble gates two classifiers' ArgMax (refused before: no translation); rounded values
    give ties, which take the first index on both sides."""
    attributes = {k: v for k, v in (("axis", axis), ("keepdims", keepdims)) if v is not None}
    check_operator(tmp_path, op, {"x": np.round(_f(2, 3, 4))}, attributes, opset=13)


def test_arg_max_of_the_last_tied_value_is_refused(tmp_path):
    check_refused(tmp_path, "ArgMax", {"x": _f(2, 3)}, {"select_last_index": 1}, match="select_last_index", opset=13)


# ----------------------------------------------------------------------------------------- flatten


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(tmp_path, axis):
    check_operator(tmp_path, "Flatten", {"x": _f(2, 3, 4)}, {"axis": axis})


# ----------------------------------------------------------------------------------------- resize

_TRANSFORMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


@pytest.mark.parametrize("transform", _TRANSFORMS)
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_by_scales(tmp_path, transform, nearest_mode):
    attributes = {"mode": "nearest", "coordinate_transformation_mode": transform, "nearest_mode": nearest_mode}
    constants = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2.5, 0.6], np.float32)}
    check_operator(tmp_path, "Resize", {"x": _f(1, 2, 4, 5)}, attributes, constants=constants, opset=13)


@pytest.mark.parametrize("transform", [*_TRANSFORMS[:4], "half_pixel_symmetric"])
def test_resize_linear_by_sizes(tmp_path, transform):
    attributes = {"mode": "linear", "coordinate_transformation_mode": transform}
    constants = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32), "sizes": np.array([1, 2, 7, 3])}
    check_operator(tmp_path, "Resize", {"x": _f(1, 2, 4, 5)}, attributes, constants=constants, opset=19)


def test_resize_opset_10_and_refusals(tmp_path):
    scales = np.array([1, 1, 2, 2], np.float32)
    check_operator(tmp_path, "Resize", {"x": _f(1, 2, 3, 4)}, {"mode": "nearest"}, constants={"s": scales}, opset=10)
    constants = {"roi": np.zeros(0, np.float32), "scales": scales}
    check_refused(
        tmp_path,
        "Resize",
        {"x": _f(1, 2, 3, 4)},
        {"mode": "cubic"},
        constants=constants,
        opset=13,
        match="Resize .*mode 'cubic'",
    )

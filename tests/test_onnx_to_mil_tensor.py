"""The tensor operators of the ONNX -> MIL table (shapes, reshaping, indexing, joining, padding), each against
onnxruntime on the operator alone (tests/onnx_to_mil.py). Operands the pipeline would fold are given as graph
inputs, so the translation works on values computed at run time; ``_check_symbolic`` also declares an input's
dimensions symbolic in the ONNX model, as a model with a free sequence length has them."""

import numpy as np
import pytest
from onnx import helper, numpy_helper
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
        tmp_path,
        "Reshape",
        {"x": _f(2, 3)},
        {"allowzero": 1},
        constants={"shape": _i(0, 3)},
        opset=14,
        match="allowzero = 1 with a 0",
    )
    check_refused(tmp_path, "Reshape", {"x": _f(2, 3), "s": _i(3, 2)}, {"allowzero": 1}, opset=14, match="run time")


def test_reshape_allowzero_without_a_zero(tmp_path):
    check_operator(tmp_path, "Reshape", {"x": _f(2, 3)}, {"allowzero": 1}, constants={"shape": _i(3, -1)}, opset=14)


# ------------------------------------------------------------------------------------------------ slice, split


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ((1, 0), (3, I64_MAX), (0, 2), (1, 2)),  # to the end by INT64_MAX, a step
        ((-1,), (I64_MIN,), (1,), (-1,)),  # reversed to the start by INT64_MIN
        ((-2, -10), (-100, 10), (-1, 0), (-1, 1)),  # negative axes, out-of-range clamping
        ((3,), (0,), (2,), (-2,)),
    ],
)
def test_slice_constant_operands(tmp_path, starts, ends, axes, steps):
    constants = {"starts": _i(*starts), "ends": _i(*ends), "axes": _i(*axes), "steps": _i(*steps)}
    check_operator(tmp_path, "Slice", {"x": _f(4, 5, 6)}, constants=constants, opset=11)


def test_slice_on_symbolic_dims(tmp_path):
    constants = {"starts": _i(1, -1), "ends": _i(I64_MAX, I64_MIN), "axes": _i(0, 1), "steps": _i(1, -1)}
    _check_symbolic(tmp_path, "Slice", {"x": _f(4, 5, 6)}, constants=constants, symbolic={"x": [0, 1]}, opset=11)
    constants = {"starts": _i(-3), "ends": _i(-1), "axes": _i(1)}
    _check_symbolic(tmp_path, "Slice", {"x": _f(4, 5, 6)}, constants=constants, symbolic={"x": [1]}, opset=11)


def test_slice_starts_and_ends_computed_at_run_time(tmp_path):
    inputs = {"x": _f(4, 5, 6), "starts": _i(-4, 1), "ends": _i(0, 4)}
    check_operator(tmp_path, "Slice", inputs, constants={"axes": _i(2, 0), "steps": _i(-1, 2)}, opset=13)


def test_slice_attributes_before_opset_10(tmp_path):
    attributes = {"starts": [1, -3], "ends": [I64_MAX, -1], "axes": [0, 2]}
    check_operator(tmp_path, "Slice", {"x": _f(4, 5, 6)}, attributes, opset=9)


def test_slice_empty_result_is_refused(tmp_path):
    check_refused(
        tmp_path, "Slice", {"x": _f(4, 5)}, constants={"s": _i(3), "e": _i(1), "a": _i(0)}, opset=11, match="empty"
    )


@pytest.mark.parametrize(
    "opset, attributes, constants, outputs",
    [
        (11, {"axis": 1, "split": [1, 4]}, {}, 2),
        (11, {"axis": -1}, {}, 3),
        (13, {"axis": 1}, {"split": _i(2, 2, 1)}, 3),
        (18, {"axis": 2, "num_outputs": 4}, {}, 4),  # 7 in ceil(7 / 4) = 2: parts 2, 2, 2, 1
    ],
)
def test_split(tmp_path, opset, attributes, constants, outputs):
    x = _f(2, 5, 6) if opset != 18 else _f(2, 5, 7)
    check_operator(tmp_path, "Split", {"x": x}, attributes, constants=constants, outputs=outputs, opset=opset)


def test_split_symbolic_dim_in_equal_parts(tmp_path):
    _check_symbolic(tmp_path, "Split", {"x": _f(2, 6)}, {"axis": 1}, symbolic={"x": [1]}, outputs=2, opset=11)


# ------------------------------------------------------------------------------------------------ indexing


@pytest.mark.parametrize("indices", [_i(2, -1, 0), _i(-2), _i(-1).reshape(()), np.asarray([[0, -3], [1, 1]], np.int64)])
def test_gather_constant_indices_negative_and_scalar(tmp_path, indices):
    """A 0-d index drops the axis (``x[:, -1]``, the last step of a sequence: a negative 0-d index on a static axis
    kept it as [3, 1, 5] before)."""
    check_operator(tmp_path, "Gather", {"x": _f(3, 4, 5)}, {"axis": 1}, constants={"i": indices.reshape(indices.shape)})


def test_gather_indices_at_run_time_on_a_symbolic_axis(tmp_path):
    inputs = {"x": _f(3, 4, 5), "i": np.asarray([[1, -1], [0, -4]], np.int64)}
    _check_symbolic(tmp_path, "Gather", inputs, {"axis": -2}, symbolic={"x": [1]})


def test_gather_scalar_index_of_a_symbolic_axis(tmp_path):
    _check_symbolic(
        tmp_path, "Gather", {"x": _f(3, 4)}, {"axis": 0}, constants={"i": _i(-1).reshape(())}, symbolic={"x": [0]}
    )


def test_gather_elements(tmp_path):
    indices = np.asarray([[[0, -1], [2, 1]], [[1, 1], [0, -3]]], np.int64)
    check_operator(tmp_path, "GatherElements", {"x": _f(2, 3, 3), "i": indices}, {"axis": 2})


def test_scatter_nd_full_indices_as_gtcrn_writes_them(tmp_path):
    """gtcrn_stream's ScatterND: indices [1, C, R, W, 4] naming every element of R rows of a [1, C, T, W] cache."""
    grid = np.stack(np.meshgrid(range(1), range(2), [3, 4], range(3), indexing="ij"), -1).astype(np.int64)
    inputs = {"data": _f(1, 2, 5, 3), "updates": _f(1, 2, 2, 3)}
    check_operator(tmp_path, "ScatterND", inputs, constants={"indices": grid}, order=["data", "indices", "updates"])


@pytest.mark.parametrize("reduction, opset", [("none", 11), ("add", 16), ("mul", 16), ("max", 18), ("min", 18)])
def test_scatter_nd_slices_and_reductions(tmp_path, reduction, opset):
    attributes = {"reduction": reduction} if opset >= 16 else {}
    inputs = {"data": _f(3, 1, 4), "updates": _f(2, 1, 4)}
    constants = {"indices": np.asarray([[0], [-1]], np.int64)}
    order = ["data", "indices", "updates"]
    check_operator(tmp_path, "ScatterND", inputs, attributes, constants=constants, order=order, opset=opset)


# ------------------------------------------------------------------------------------------------ broadcasting


@pytest.mark.parametrize("shape", [(2, 1, 4), (3, 1, 1, 1), (1,)])
def test_expand_constant_shape(tmp_path, shape):
    check_operator(tmp_path, "Expand", {"x": _f(3, 1)}, constants={"shape": _i(*shape)})


def test_expand_shape_at_run_time_and_integers(tmp_path):
    check_operator(tmp_path, "Expand", {"x": _f(1, 3), "shape": _i(4, 2, 1)})
    check_operator(tmp_path, "Expand", {"x": np.arange(3, dtype=np.int64)}, constants={"shape": _i(2, 3)})


def test_tile_repeats_constant_and_at_run_time(tmp_path):
    check_operator(tmp_path, "Tile", {"x": _f(2, 3)}, constants={"r": _i(2, 1)})
    check_operator(tmp_path, "Tile", {"x": _f(2, 3), "r": _i(1, 3)})


def test_constant_of_shape_at_run_time(tmp_path):
    check_operator(tmp_path, "ConstantOfShape", {"s": _i(2, 3)})
    value = numpy_helper.from_array(np.asarray([7], np.int64))
    check_operator(tmp_path, "ConstantOfShape", {"s": _i(4)}, {"value": value}, opset=11)


def test_range_at_run_time(tmp_path):
    """Range of run-time scalars: ``start`` a scalar graph input (a [1] input in Core ML), ``limit`` squeezed
    from one; float and integer."""
    for dtype, start, limit, delta in [(np.float32, 1.5, -2.0, -0.75), (np.int64, 1, 8, 2)]:
        nodes = [
            helper.make_node("Squeeze", ["limit1"], ["limit"], axes=[0]),
            helper.make_node("Range", ["start", "limit", "delta"], ["out0"]),
        ]
        tensor_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        graph = helper.make_graph(
            nodes,
            "range",
            [
                helper.make_tensor_value_info("start", tensor_type, []),
                helper.make_tensor_value_info("limit1", tensor_type, [1]),
            ],
            [helper.make_tensor_value_info("out0", tensor_type, None)],
            [numpy_helper.from_array(np.asarray(delta, dtype), "delta")],
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
        inputs = {"start": np.asarray(start, dtype), "limit1": np.asarray([limit], dtype)}
        want = onnxruntime_outputs(proto, inputs)[0]
        have = translated_outputs(proto, {**inputs, "start": inputs["start"].reshape(1)}, tmp_path)[0]
        np.testing.assert_allclose(np.asarray(have, np.float64), want, atol=1e-6)
        assert have.shape == want.shape


# ------------------------------------------------------------------------------------------------ shape, size


@pytest.mark.parametrize("attributes", [{}, {"start": 1}, {"start": -2, "end": -1}])
def test_shape_of_symbolic_dims(tmp_path, attributes):
    opset = 15 if attributes else 11
    _check_symbolic(tmp_path, "Shape", {"x": _f(2, 3, 4)}, attributes, symbolic={"x": [0, 2]}, opset=opset)


def test_size_of_symbolic_dims(tmp_path):
    _check_symbolic(tmp_path, "Size", {"x": _f(2, 3, 4)}, symbolic={"x": [1]})


def test_deepfilternet_shape_chain_with_free_dims(tmp_path):
    """DeepFilterNet3's encoder flattens a tensor whose S (and batch) stay symbolic: Transpose -> Shape -> Slice
    -> Concat -> Reshape, the shape computed at run time; the region cut from the real model."""
    from pathlib import Path

    import onnx

    source = Path(__file__).parent.parent / "fixtures" / "realmodels" / "dfn3_enc.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(onnx.load(source)), tmp_path / "inferred.onnx")
    region = tmp_path / "region.onnx"
    onnx.utils.extract_model(
        tmp_path / "inferred.onnx", region, ["/df_conv1/Relu_output_0"], ["/Reshape_output_0"], check_model=False
    )
    proto = onnx.load(region)
    inputs = {"/df_conv1/Relu_output_0": _f(1, 64, 5, 48)}
    assert [n.op_type for n in proto.graph.node if n.op_type != "Constant"] == [
        "Transpose",
        "Shape",
        "Slice",
        "Concat",
        "Reshape",
    ]
    want, have = onnxruntime_outputs(proto, inputs)[0], translated_outputs(proto, inputs, tmp_path)[0]
    np.testing.assert_array_equal(have, want)


def test_non_zero_is_refused(tmp_path):
    check_refused(tmp_path, "NonZero", {"x": _f(2, 3)}, match="NonZero .*data-dependent")


# ------------------------------------------------------------------------------------------------ padding


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes_with_crops(tmp_path, mode):
    pads = _i(0, 2, 1, -1, 0, 1, -2, 2)  # before for 4 axes, then after
    constants = {"pads": pads, "value": np.asarray(1.5, np.float32)} if mode == "constant" else {"pads": pads}
    check_operator(tmp_path, "Pad", {"x": _f(2, 3, 4, 5)}, {"mode": mode}, constants=constants, opset=11)


def test_pad_axes_opset_18_and_attributes_before_11(tmp_path):
    constants = {"pads": _i(1, 2, 0, 1), "value": np.asarray(-1.0, np.float32), "axes": _i(-1, 0)}
    check_operator(tmp_path, "Pad", {"x": _f(2, 3, 4)}, constants=constants, opset=18)
    check_operator(tmp_path, "Pad", {"x": _f(2, 3)}, {"pads": [1, 0, 0, 2], "value": 2.0}, opset=2)


def test_pad_edge_wider_than_the_dimension(tmp_path):
    check_operator(tmp_path, "Pad", {"x": _f(2, 3, 2)}, {"mode": "edge"}, constants={"p": _i(0, 5, 1, 0, 0, 4)})


def test_pad_reflect_on_symbolic_dims(tmp_path):
    constants = {"pads": _i(0, 0, 2, 0, 0, 1)}
    _check_symbolic(tmp_path, "Pad", {"x": _f(2, 3, 8)}, {"mode": "reflect"}, constants=constants, symbolic={"x": [2]})


def test_pad_wrap_is_refused(tmp_path):
    check_refused(
        tmp_path,
        "Pad",
        {"x": _f(2, 3)},
        {"mode": "wrap"},
        constants={"p": _i(1, 1, 1, 1)},
        opset=19,
        match="mode 'wrap'",
    )


# ------------------------------------------------------------------------------------------------ blocks


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(tmp_path, mode):
    check_operator(tmp_path, "DepthToSpace", {"x": _f(1, 8, 2, 3)}, {"blocksize": 2, "mode": mode})
    check_operator(tmp_path, "SpaceToDepth", {"x": _f(1, 2, 4, 6)}, {"blocksize": 2})


@pytest.mark.parametrize("time_axis, batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(tmp_path, time_axis, batch_axis):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 2) if time_axis == 0 else (3, 4, 2)).astype(np.float32)
    lens = np.array([4, 1, 3], np.int64)
    check_operator(
        tmp_path,
        "ReverseSequence",
        {"x": x},
        {"time_axis": time_axis, "batch_axis": batch_axis},
        constants={"lens": lens},
    )

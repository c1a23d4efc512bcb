"""gatepack's MIL interpreter proved on the ops and attribute values gatepack writes, against sources other than
itself: each MIL op is built with coremltools' own builder, saved as a package and run on the interpreter, then
compared with onnxruntime running the ONNX operator that means the same (the mapping from Apple's documentation of
the op: docs/conventions.md, "What proves the MIL interpreter"), or, for semantics only Apple defines, with a NumPy
reference written from that documentation here. Rows of ``tests/mil_coverage.py`` name these tests."""

from __future__ import annotations

import numpy as np
import pytest
from mil_builder import run_mil, run_onnx

pytest.importorskip("coremltools")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.coreml_proof

ONNX_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}
S, N, I, H = 4, 3, 2, 3  # batch 3: every batch entry has its own input and initial state


def _mb():
    from coremltools.converters.mil import Builder as mb

    return mb


def _random(*shape: int, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _blocks(matrix: np.ndarray, order: list[int], size: int) -> np.ndarray:
    """Row blocks of ``size`` of ``matrix`` in ``order`` (a gate permutation, written here from Apple's docs)."""
    return np.concatenate([matrix[g * size : (g + 1) * size] for g in order])


def _time_order(y: np.ndarray, direction: str) -> np.ndarray:
    """A MIL reverse op's sequence is in processing order (last time step first): back to input time."""
    return y[::-1] if direction == "reverse" else y


# --------------------------------------------------------------------------------------------- recurrent ops


def _recurrent_against_onnx(tmp_path, mil_op: str, mil: dict, onnx: tuple[str, dict, dict], states: dict) -> None:
    """MIL ``mil_op`` with inputs ``mil`` (weights and options; ``x`` and the ``states`` [N, H] are program inputs)
    against the ONNX operator ``onnx`` = (type, constants W/R/B[/P], attributes): the sequence (a reverse op's in
    processing order, ONNX's in input time) and each final state compared on its own."""
    mb = _mb()
    x = mil.pop("x")
    feeds = {"x": x, **states}

    def build(x, **initial):
        ends = {"h0": "initial_h", "c0": "initial_c"}
        return getattr(mb, mil_op)(x=x, output_sequence=True, **{ends[k]: v for k, v in initial.items()}, **mil)

    y, *finals = run_mil(tmp_path, build, feeds)
    op_type, constants, attributes = onnx
    order = ["X", "W", "R", "B", "", *(f"initial_{k[0]}" for k in states), *(["P"] if "P" in constants else [])]
    inputs = {"X": x, **{f"initial_{k[0]}": v[None] for k, v in states.items()}}
    want = run_onnx(op_type, inputs, attributes, constants=constants, order=order, outputs=1 + len(states))
    np.testing.assert_allclose(_time_order(y, attributes["direction"]), want[0][:, 0], atol=1e-5, rtol=1e-5)
    for name, value, expected in zip(states, finals, want[1:]):
        np.testing.assert_allclose(value, expected[0], atol=1e-5, rtol=1e-5, err_msg=f"final state {name}")


# MIL gru gate blocks r, o, z ("weight_ih = [W_ir | W_io | W_iz]"); ONNX GRU z, r, h: ONNX block k is MIL block
# GRU_TO_ONNX[k].
GRU_TO_ONNX = [2, 0, 1]
GRU_CASES = [  # reset_after, direction, recurrent_activation, activation
    (False, "forward", "sigmoid", "tanh"),
    (True, "forward", "sigmoid", "tanh"),
    (False, "reverse", "tanh", "relu"),
    (True, "reverse", "relu", "sigmoid"),
]


@pytest.mark.parametrize("reset_after, direction, recurrent_activation, activation", GRU_CASES)
def test_gru(tmp_path, reset_after, direction, recurrent_activation, activation):
    """MIL gru (iOS18: reset_after, input_bias) against ONNX GRU: reset_after true is linear_before_reset = 1 with
    ``bias`` the hidden biases and ``input_bias`` the input ones; false is reset-before with one summed bias."""
    w, r = _random(3 * H, I, seed=3, scale=0.6), _random(3 * H, H, seed=4, scale=0.6)
    bias, input_bias = _random(3 * H, seed=5, scale=0.5), _random(3 * H, seed=6, scale=0.5)
    extra = {"reset_after": True, "input_bias": input_bias} if reset_after else {}
    mil = dict(
        x=_random(S, N, I, seed=1),
        weight_ih=w,
        weight_hh=r,
        bias=bias,
        direction=direction,
        recurrent_activation=recurrent_activation,
        activation=activation,
        **extra,
    )
    onnx_bias = [input_bias, bias] if reset_after else [bias, np.zeros_like(bias)]
    constants = {
        "W": _blocks(w, GRU_TO_ONNX, H)[None],
        "R": _blocks(r, GRU_TO_ONNX, H)[None],
        "B": np.concatenate([_blocks(b, GRU_TO_ONNX, H) for b in onnx_bias])[None],
    }
    attributes = {
        "hidden_size": H,
        "direction": direction,
        "linear_before_reset": int(reset_after),
        "activations": [ONNX_ACTIVATIONS[recurrent_activation], ONNX_ACTIVATIONS[activation]],
    }
    _recurrent_against_onnx(tmp_path, "gru", mil, ("GRU", constants, attributes), {"h0": _random(N, H, seed=2)})


@pytest.mark.parametrize("direction, activation", [("forward", "tanh"), ("reverse", "relu"), ("forward", "sigmoid")])
def test_rnn(tmp_path, direction, activation):
    """MIL rnn ("h_t = activation(W_ih x_t + b_ih + W_hh h_t-1 + b_hh)", one summed bias) against ONNX RNN."""
    w, r, bias = _random(H, I, seed=9, scale=0.7), _random(H, H, seed=10, scale=0.7), _random(H, seed=11)
    mil = dict(
        x=_random(S, N, I, seed=7), weight_ih=w, weight_hh=r, bias=bias, direction=direction, activation=activation
    )
    constants = {"W": w[None], "R": r[None], "B": np.concatenate([bias, np.zeros_like(bias)])[None]}
    attributes = {"hidden_size": H, "direction": direction, "activations": [ONNX_ACTIVATIONS[activation]]}
    _recurrent_against_onnx(tmp_path, "rnn", mil, ("RNN", constants, attributes), {"h0": _random(N, H, seed=8)})


# MIL lstm gates "[input_gate, forget_gate, output_gate, cell_gate]", peephole "[input_gate, forget_gate,
# output_gate]"; ONNX LSTM i, o, f, c and P i, o, f.
LSTM_TO_ONNX, PEEPHOLE_TO_ONNX = [0, 2, 1, 3], [0, 2, 1]
LSTM_CASES = [  # direction, recurrent_activation, cell_activation, activation, peephole
    ("forward", "sigmoid", "tanh", "tanh", False),
    ("reverse", "sigmoid", "tanh", "tanh", True),
    ("forward", "tanh", "relu", "sigmoid", True),
    ("reverse", "relu", "sigmoid", "relu", False),
]


@pytest.mark.parametrize("direction, recurrent_activation, cell_activation, activation, peephole", LSTM_CASES)
def test_lstm(tmp_path, direction, recurrent_activation, cell_activation, activation, peephole):
    """MIL lstm against ONNX LSTM: its three outputs (sequence, final h, final c) each compared on their own."""
    w, r = _random(4 * H, I, seed=15, scale=0.6), _random(4 * H, H, seed=16, scale=0.6)
    bias, p = _random(4 * H, seed=17, scale=0.5), _random(3 * H, seed=18, scale=0.5)
    mil = dict(
        x=_random(S, N, I, seed=12),
        weight_ih=w,
        weight_hh=r,
        bias=bias,
        direction=direction,
        recurrent_activation=recurrent_activation,
        cell_activation=cell_activation,
        activation=activation,
        **({"peephole": p} if peephole else {}),
    )
    constants = {
        "W": _blocks(w, LSTM_TO_ONNX, H)[None],
        "R": _blocks(r, LSTM_TO_ONNX, H)[None],
        "B": np.concatenate([_blocks(bias, LSTM_TO_ONNX, H), np.zeros_like(bias)])[None],
        "P": (_blocks(p, PEEPHOLE_TO_ONNX, H) if peephole else np.zeros(3 * H, np.float32))[None],
    }
    names = [ONNX_ACTIVATIONS[a] for a in (recurrent_activation, cell_activation, activation)]
    attributes = {"hidden_size": H, "direction": direction, "activations": names}
    states = {"h0": _random(N, H, seed=13), "c0": _random(N, H, seed=14)}
    _recurrent_against_onnx(tmp_path, "lstm", mil, ("LSTM", constants, attributes), states)


# ------------------------------------------------------------------------------------------------- convolutions


def _convolution(tmp_path, op: str, x: np.ndarray, **arguments) -> np.ndarray:
    """MIL ``op`` (conv, conv_transpose) of the program input ``x`` with constant ``arguments``, on the interpreter."""
    mb = _mb()
    (got,) = run_mil(tmp_path, lambda x: getattr(mb, op)(x=x, **arguments), {"x": x})
    return got


CONV_CASES = [  # spatial size, kernel, strides, dilations, groups, pad_type, pad (MIL: begin_0, end_0, ...)
    ((7, 6), (3, 2), (2, 1), (2, 1), 2, "custom", (1, 2, 0, 1)),
    ((7, 6), (3, 3), (1, 2), (1, 2), 1, "valid", None),
    ((7, 6), (2, 3), (2, 2), (1, 1), 4, "same", None),
    ((7, 6), (2, 3), (2, 1), (1, 1), 2, "same_lower", None),  # onnxruntime: no dilation with SAME_*
    ((9,), (3,), (2,), (3,), 2, "custom", (2, 1)),
]
ONNX_AUTO_PADS = {"valid": "VALID", "same": "SAME_UPPER", "same_lower": "SAME_LOWER"}


@pytest.mark.parametrize("sizes, kernel, strides, dilations, groups, pad_type, pad", CONV_CASES)
def test_conv(tmp_path, sizes, kernel, strides, dilations, groups, pad_type, pad):
    """MIL conv against ONNX Conv: the same weight layout [C_out, C_in / groups, *K]; MIL's pad
    [begin_0, end_0, begin_1, end_1] is ONNX's pads [begin_0, begin_1, end_0, end_1]; same / same_lower are
    SAME_UPPER / SAME_LOWER."""
    c_in, c_out = 4, 4
    x = _random(2, c_in, *sizes, seed=19)
    weight, bias = _random(c_out, c_in // groups, *kernel, seed=20), _random(c_out, seed=21)
    options = {"pad": list(pad)} if pad else {}

    got = _convolution(
        tmp_path,
        "conv",
        x,
        weight=weight,
        bias=bias,
        strides=list(strides),
        dilations=list(dilations),
        groups=groups,
        pad_type=pad_type,
        **options,
    )
    attributes = {"strides": list(strides), "dilations": list(dilations), "group": groups}
    if pad_type == "custom":
        attributes["pads"] = list(pad[0::2]) + list(pad[1::2])
    else:
        attributes["auto_pad"] = ONNX_AUTO_PADS[pad_type]
    (want,) = run_onnx("Conv", {"x": x}, attributes, constants={"w": weight, "b": bias})
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


CONV_TRANSPOSE_CASES = [  # spatial size, kernel, strides, dilations, groups, pad
    ((3, 4), (3, 2), (2, 3), (1, 1), 1, (1, 0, 0, 1)),
    ((3, 4), (2, 3), (2, 1), (2, 1), 2, (0, 1, 1, 1)),
    ((5,), (3,), (3,), (2,), 2, (1, 2)),
]


@pytest.mark.parametrize("sizes, kernel, strides, dilations, groups, pad", CONV_TRANSPOSE_CASES)
def test_conv_transpose(tmp_path, sizes, kernel, strides, dilations, groups, pad):
    """MIL conv_transpose against ONNX ConvTranspose: weight [C_in, C_out / groups, *K] in both; MIL's custom pad
    [begin_0, end_0, ...] is ONNX's pads [begin_0, ..., end_0, ...]."""
    c_in, c_out_group = 4, 3
    x = _random(2, c_in, *sizes, seed=22)
    weight, bias = _random(c_in, c_out_group, *kernel, seed=23), _random(c_out_group * groups, seed=24)

    got = _convolution(
        tmp_path,
        "conv_transpose",
        x,
        weight=weight,
        bias=bias,
        strides=list(strides),
        dilations=list(dilations),
        groups=groups,
        pad_type="custom",
        pad=list(pad),
    )
    attributes = {
        "strides": list(strides),
        "dilations": list(dilations),
        "group": groups,
        "pads": list(pad[0::2]) + list(pad[1::2]),
    }
    (want,) = run_onnx("ConvTranspose", {"x": x}, attributes, constants={"w": weight, "b": bias})
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- tensor ops

SLICE_CASES = [  # begin, end, stride, begin_mask, end_mask, squeeze_mask
    ([0, 1, 0], [2, 5, 6], [1, 2, 3], None, None, None),
    ([1, 4, 5], [0, 0, 0], [-1, -2, -2], [False, False, False], [True, True, True], None),
    ([1, 0, 2], [2, 3, 0], [1, 1, 1], [False, True, False], [False, False, True], [True, False, False]),
    ([-1, -2, 0], [0, -5, 4], [-1, -1, 2], [False, False, True], [True, False, False], None),
]


def _slice_reference(x, begin, end, stride, begin_mask, end_mask, squeeze_mask) -> np.ndarray:
    """Apple's slice_by_index, from its documentation: per axis ``x[begin:end:stride]``; "begin_mask[i] True:
    ignore begin[i], and set begin[i] to 0" (the start of the stride's direction), "end_mask[i] True: ignore
    end[i], and take the entire length of the axis" (to the end of the stride's direction); "squeeze_mask[i] True:
    ignore end[i], and do the pure index at begin[i]" (the axis removed)."""
    index = []
    for axis in range(x.ndim):
        if squeeze_mask and squeeze_mask[axis]:
            index.append(begin[axis])
            continue
        step = stride[axis]
        start = (0 if step > 0 else x.shape[axis] - 1) if begin_mask and begin_mask[axis] else begin[axis]
        stop = (x.shape[axis] if step > 0 else -x.shape[axis] - 1) if end_mask and end_mask[axis] else end[axis]
        index.append(slice(start, stop, step))
    return x[tuple(index)]


@pytest.mark.parametrize("begin, end, stride, begin_mask, end_mask, squeeze_mask", SLICE_CASES)
def test_slice_by_index(tmp_path, begin, end, stride, begin_mask, end_mask, squeeze_mask):
    mb = _mb()
    x = _random(2, 5, 6, seed=25)
    masks = {k: v for k, v in (("begin_mask", begin_mask), ("end_mask", end_mask), ("squeeze_mask", squeeze_mask)) if v}

    def build(x):
        return mb.slice_by_index(x=x, begin=begin, end=end, stride=stride, **masks)

    (got,) = run_mil(tmp_path, build, {"x": x})
    want = _slice_reference(x, begin, end, stride, begin_mask, end_mask, squeeze_mask)
    np.testing.assert_array_equal(got, want)


def test_gather_with_negative_indices(tmp_path):
    """MIL gather (iOS16: "negative indices are supported") against ONNX Gather (negative indices count from
    the end) on axes 0 and 1."""
    mb = _mb()
    x = _random(4, 5, seed=26)
    indices = np.array([[-1, 0], [2, -4]], np.int32)

    def build(x):
        return [mb.gather(x=x, indices=indices, axis=0), mb.gather(x=x, indices=indices, axis=1)]

    got = run_mil(tmp_path, build, {"x": x}, target="iOS16")
    for axis, value in enumerate(got):
        (want,) = run_onnx("Gather", {"x": x}, {"axis": axis}, constants={"i": indices})
        np.testing.assert_array_equal(value, want)


def test_fill_from_a_run_time_shape(tmp_path):
    """MIL fill ("Returns a tensor with a given shape filled with a constant value") with the shape computed at run
    time, as gatepack's writer builds a zero state: NumPy's full is the reference."""
    mb = _mb()
    x = _random(S, N, I, seed=27)

    def build(x):
        batch = mb.slice_by_index(x=mb.shape(x=x), begin=[1], end=[2])
        shape = mb.concat(values=[batch, np.array([H], np.int32)], axis=0)
        return [mb.fill(shape=shape, value=0.0), mb.fill(shape=shape, value=2.5)]

    zeros, filled = run_mil(tmp_path, build, {"x": x})
    np.testing.assert_array_equal(zeros, np.zeros((N, H), np.float32))
    np.testing.assert_array_equal(filled, np.full((N, H), 2.5, np.float32))


def test_reshape_with_a_zero_and_a_different_rank(tmp_path):
    """MIL reshape (iOS17): "a 0 ... copies the dimension of x it lines up with from the right, 1 where x has none"
    (Apple's test_reshape_with_zero_different_len_iOS17): [2, 3] by [1, 0, -1, 0] is [1, 1, 2, 3]."""
    mb = _mb()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = run_mil(tmp_path, lambda x: mb.reshape(x=x, shape=[1, 0, -1, 0]), {"x": x}, target="iOS17")
    np.testing.assert_array_equal(got, x.reshape(1, 1, 2, 3))


# ------------------------------------------------------------------------------------- elementwise, normalising


def test_rounding_and_logic_against_onnxruntime(tmp_path):
    """MIL ceil / floor / round and logical_and / or / xor / not against ONNX Ceil / Floor / Round and And / Or /
    Xor / Not (halves to even in both)."""
    mb = _mb()
    x = np.array([[-2.5, -1.2, -0.5, 0.0], [0.5, 1.5, 2.4, 3.7]], np.float32)
    a = np.array([[True, True, False, False]] * 2)
    b = np.array([[True, False, True, False]] * 2)

    def build(x, a, b):
        return [
            mb.ceil(x=x),
            mb.floor(x=x),
            mb.round(x=x),
            mb.logical_and(x=a, y=b),
            mb.logical_or(x=a, y=b),
            mb.logical_xor(x=a, y=b),
            mb.logical_not(x=a),
        ]

    got = run_mil(tmp_path, build, {"x": x, "a": a, "b": b})
    want = [run_onnx(op, {"x": x})[0] for op in ("Ceil", "Floor", "Round")]
    want += [run_onnx(op, {"a": a, "b": b})[0] for op in ("And", "Or", "Xor")] + [run_onnx("Not", {"a": a})[0]]
    for value, expected in zip(got, want):
        np.testing.assert_array_equal(value, expected)


def test_integer_real_div_truncates(tmp_path):
    """MIL real_div of int32 operands keeps int32 (its type inference) with the quotient truncated toward zero, as
    Apple's own real_div case computes it (``(x / y).astype(int32)``): -7 / 2 is -3, not floor's -4."""
    mb = _mb()
    x = np.array([-7, 7, -8, 5, -1], np.int32)
    y = np.array([2, -2, 3, 3, 2], np.int32)
    (got,) = run_mil(tmp_path, lambda x, y: mb.real_div(x=x, y=y), {"x": x, "y": y})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.trunc(x / y).astype(np.int32))


@pytest.mark.parametrize("axes, epsilon", [([-1], 0.5), ([1, 2], 2.0)])
def test_layer_norm(tmp_path, axes, epsilon):
    """MIL layer_norm over ``axes`` (the trailing ones) with a large epsilon against ONNX LayerNormalization
    (opset 17, ``axis`` the first normalised axis)."""
    mb = _mb()
    x = _random(2, 3, 4, seed=28)
    shape = x.shape[axes[0] % 3 :]
    gamma, beta = _random(*shape, seed=29), _random(*shape, seed=30)

    def build(x):
        return mb.layer_norm(x=x, axes=axes, gamma=gamma, beta=beta, epsilon=epsilon)

    (got,) = run_mil(tmp_path, build, {"x": x})
    (want,) = run_onnx(
        "LayerNormalization", {"x": x}, {"axis": axes[0], "epsilon": epsilon}, constants={"g": gamma, "b": beta}
    )
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_rounding_in_fp16(tmp_path):
    """MIL ceil / floor / round on an fp16 program against ONNX Ceil / Floor / Round in float16."""
    mb = _mb()
    x = np.array([[-2.5, -1.2, -0.5, 0.0], [0.5, 1.5, 2.4, 3.7]], np.float16)
    got = run_mil(tmp_path, lambda x: [mb.ceil(x=x), mb.floor(x=x), mb.round(x=x)], {"x": x})
    for value, op in zip(got, ("Ceil", "Floor", "Round")):
        (want,) = run_onnx(op, {"x": x})
        assert value.dtype == np.float16
        np.testing.assert_array_equal(value, want)


def test_state_read_and_update(tmp_path):
    """MIL read_state / coreml_update_state (iOS18: "read_state returns the state's value"; "coreml_update_state
    writes value into the state and returns it"): NumPy's reference of one call, the state's new value returned
    under its input's name."""
    from coremltools.converters.mil.mil import types

    mb = _mb()
    state = np.array([[1.0, -2.0, 0.5]], np.float16)
    x = np.array([[0.25, 0.5, 4.0]], np.float16)

    def build(x, s):
        new = mb.add(x=mb.read_state(input=s), y=x)
        return mb.coreml_update_state(state=s, value=new)

    (got,) = run_mil(tmp_path, build, {"x": x, "s": state}, states={"s": types.fp16})
    np.testing.assert_array_equal(got, state + x)


def test_common_ops_against_onnxruntime(tmp_path):
    """One program of the ops most programs hold, each output against its ONNX operator: exp, add, reduce_mean
    (keep_dims), softmax (axis), matmul (transpose_y: "transpose the last two dimensions of y"), select (Where),
    cast to int32 (truncation), max_pool, batch_norm (epsilon), pad (reflect), scatter (add: ScatterND with reduction
    add along axis 0), reverse_sequence (ReverseSequence), and concat with interleave against NumPy (Apple:
    "interleave ... the values are interleaved along axis": a0, b0, a1, b1, ...)."""
    mb = _mb()
    x, y = _random(2, 3, 4, seed=31), _random(2, 3, 4, seed=32)
    image = _random(1, 2, 5, 5, seed=33)
    mean, variance = _random(2, seed=34), np.abs(_random(2, seed=35))
    indices, updates = np.array([1, 0, 1], np.int32), _random(3, 3, 4, seed=36)
    lengths = np.array([2, 4], np.int32)

    def build(x, y, image):
        return [
            mb.exp(x=x),
            mb.add(x=x, y=y),
            mb.reduce_mean(x=x, axes=[1], keep_dims=True),
            mb.softmax(x=x, axis=1),
            mb.matmul(x=x, y=y, transpose_y=True),
            mb.select(cond=mb.greater(x=x, y=0.0), a=x, b=y),
            mb.cast(x=mb.mul(x=x, y=3.0), dtype="int32"),
            mb.max_pool(x=image, kernel_sizes=[2, 3], strides=[2, 1], pad_type="valid"),
            mb.batch_norm(x=image, mean=mean, variance=variance, epsilon=0.5),
            mb.pad(x=x, pad=[0, 0, 1, 2], mode="reflect"),
            mb.scatter(data=x, indices=indices, updates=updates, axis=0, mode="add"),
            mb.reverse_sequence(x=x, lengths=lengths, seq_axis=2, batch_axis=0),
            mb.concat(values=[x, y], axis=1, interleave=True),
        ]

    got = run_mil(tmp_path, build, {"x": x, "y": y, "image": image}, target="iOS17")
    xy, ones = {"x": x, "y": y}, np.ones(2, np.float32)
    want = [
        run_onnx("Exp", {"x": x})[0],
        run_onnx("Add", xy)[0],
        run_onnx("ReduceMean", {"x": x}, {"axes": [1], "keepdims": 1}, opset=13)[0],
        run_onnx("Softmax", {"x": x}, {"axis": 1})[0],
        run_onnx("MatMul", {"x": x, "yt": np.swapaxes(y, -1, -2).copy()})[0],
        run_onnx("Where", {"c": x > 0, "x": x, "y": y})[0],
        run_onnx("Cast", {"x": x * np.float32(3)}, {"to": 6})[0],
        run_onnx("MaxPool", {"image": image}, {"kernel_shape": [2, 3], "strides": [2, 1]})[0],
        run_onnx(
            "BatchNormalization",
            {"image": image},
            {"epsilon": 0.5},
            constants={"s": ones, "b": 0 * ones, "m": mean, "v": variance},
        )[0],
        run_onnx("Pad", {"x": x}, {"mode": "reflect"}, constants={"p": np.array([0, 0, 1, 0, 0, 2], np.int64)})[0],
        run_onnx(
            "ScatterND",
            {"x": x},
            {"reduction": "add"},
            opset=16,
            constants={"i": indices.astype(np.int64)[:, None], "u": updates},
        )[0],
        run_onnx(
            "ReverseSequence",
            {"x": np.transpose(x, (2, 0, 1)).copy()},
            {"time_axis": 0, "batch_axis": 1},
            constants={"l": lengths.astype(np.int64)},
        )[0].transpose(1, 2, 0),
        np.stack([x, y], axis=2).reshape(2, 6, 4),
    ]
    for k, (value, expected) in enumerate(zip(got, want)):
        np.testing.assert_allclose(value, expected, atol=1e-5, rtol=1e-5, err_msg=f"output {k}")


def test_control_flow(tmp_path):
    """MIL while_loop ("loop_vars are carried through _body while _cond holds") and cond ("_true_fn when pred holds,
    else _false_fn") against NumPy: three doublings and a branch each way."""
    mb = _mb()
    x = _random(2, 3, seed=37)

    def build(x):
        def keep_going(i, acc):
            return mb.less(x=i, y=np.int32(3))

        def step(i, acc):
            return mb.add(x=i, y=np.int32(1)), mb.mul(x=acc, y=2.0)

        _, doubled = mb.while_loop(_cond=keep_going, _body=step, loop_vars=(np.int32(0), x))
        branches = [
            mb.cond(
                pred=mb.greater(x=mb.reduce_sum(x=x), y=float(limit)),
                _true_fn=lambda: mb.add(x=x, y=1.0),
                _false_fn=lambda: mb.sub(x=x, y=1.0),
            )
            for limit in (-100, 100)
        ]
        return [doubled, *branches]

    doubled, taken, other = run_mil(tmp_path, build, {"x": x})
    np.testing.assert_allclose(doubled, x * 8, rtol=1e-6)
    np.testing.assert_allclose(taken, x + 1, rtol=1e-6)
    np.testing.assert_allclose(other, x - 1, rtol=1e-6)


@pytest.mark.parametrize("pad_type, pad", [("custom", (1, 0, 2, 1)), ("custom", (0, 1, 1, 0)), ("valid", None)])
def test_conv_transpose_with_an_output_shape(tmp_path, pad_type, pad):
    """MIL conv_transpose with ``output_shape`` ("the output shape of conv_transpose is underdetermined in general
    ... Hence we need output_shape") and a custom ``pad``: the pad still says where the output begins, the output
    shape where it ends (torch's ConvTranspose with padding and Apple's own stress case with output_shape compute
    it so): ONNX ConvTranspose with pads [begin, full - begin - out] (explicit, as ONNX ignores pads when given
    output_shape)."""
    mb = _mb()
    x = _random(1, 2, 3, 4, seed=38)
    weight = _random(2, 3, 3, 2, seed=39)
    strides, sizes = [2, 2], [3, 4]
    full = [(d - 1) * s + k for d, s, k in zip(sizes, strides, weight.shape[2:])]
    begins = list(pad[0::2]) if pad else [0, 0]
    outs = [f - b - 1 for f, b in zip(full, begins)]  # one short of the full size at the end
    options = {"pad": list(pad)} if pad else {}

    def build(x):
        return mb.conv_transpose(
            x=x, weight=weight, strides=strides, pad_type=pad_type, output_shape=[1, 3, *outs], **options
        )

    (got,) = run_mil(tmp_path, build, {"x": x})
    ends = [f - b - o for f, b, o in zip(full, begins, outs)]
    (want,) = run_onnx("ConvTranspose", {"x": x}, {"strides": strides, "pads": begins + ends}, constants={"w": weight})
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)

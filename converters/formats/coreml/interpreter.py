"""gatepack's NumPy interpreter of the MIL ops it writes and reads: the oracle for Core ML packages on
machines without a Core ML runtime (checked against Apple's own op tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from gatepack.converters.apple import (
    activation_of,
    lstm_recurrence,
    recurrence,
)
from gatepack.converters.errors import UsageError
from gatepack.converters.formats.coreml.common import (
    _mil_types,
    _value,
    state_inputs,
)
from gatepack.converters.formats.coreml.mil_constexpr import OPS as CONSTEXPR_OPS
from gatepack.converters.formats.coreml.mil_constexpr import decompressed
from gatepack.converters.formats.coreml.mil_elementwise import OPS as ELEMENTWISE_OPS
from gatepack.converters.formats.coreml.mil_nn import OPS as NN_OPS
from gatepack.converters.formats.coreml.mil_tensor import OPS as TENSOR_OPS
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import (
    Cell,
)

# ------------------------------------------------------------------------------- the MIL executor


_DTYPES = {
    "fp32": np.float32,
    "fp16": np.float16,
    "fp64": np.float64,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
}


def _slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    rank = x.ndim
    stride = [1] * rank if stride is None else list(stride)
    index: list = []
    for axis in range(rank):
        if squeeze_mask is not None and squeeze_mask[axis]:
            index.append(int(begin[axis]))  # MIL indexes a squeezed axis at begin (end is ignored)
            continue
        b = None if begin_mask is not None and begin_mask[axis] else int(begin[axis])
        e = None if end_mask is not None and end_mask[axis] else int(end[axis])
        index.append(slice(b, e, int(stride[axis])))
    return x[tuple(index)]


def _axes(axes) -> tuple | None:
    """An optional ``axes`` input: None means every axis (reverse) or every unit axis (squeeze)."""
    return None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))


def _select(cond, a, b, **_):
    """MIL select: ``a`` where ``cond``, else ``b``, in their common type."""
    return np.where(cond, a, b).astype(np.result_type(a, b))


def _matmul(x, y, transpose_x=False, transpose_y=False) -> np.ndarray:
    """MIL matmul: numpy.matmul of x and y, each with its last two axes swapped when asked. A stack of rows times one
    matrix (every step's input projection, [S, N, I] x [I, G*H]) is one 2-D product: numpy's stacked matmul does not
    reach BLAS there (several times slower on the weights of a large layer, transposed or not)."""
    x = np.swapaxes(x, -1, -2) if transpose_x else np.asarray(x)
    y = np.swapaxes(y, -1, -2) if transpose_y else np.asarray(y)
    if x.ndim > 2 and y.ndim == 2:
        return np.matmul(x.reshape(-1, x.shape[-1]), y).reshape(*x.shape[:-1], y.shape[-1])
    return np.matmul(x, y)


def _reverse_sequence(x, lengths, seq_axis=0, batch_axis=0, **_):
    out = np.array(x)
    moved = np.moveaxis(out, (int(batch_axis), int(seq_axis)), (0, 1))
    source = np.moveaxis(np.asarray(x), (int(batch_axis), int(seq_axis)), (0, 1))
    for b, n in enumerate(np.asarray(lengths).astype(np.int64)):
        moved[b, :n] = source[b, :n][::-1]
    return out


_SCATTER_MODES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "update": lambda old, new: new,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
}


def _scatter(data, indices, updates, axis=0, mode="update", **_):
    if str(mode) not in _SCATTER_MODES:
        raise UsageError(f"scatter mode {mode!r} is not one gatepack's MIL executor runs")
    out = np.array(data)
    moved, upd = np.moveaxis(out, int(axis), 0), np.moveaxis(np.asarray(updates), int(axis), 0)
    for j, index in enumerate(np.asarray(indices).reshape(-1)):
        moved[int(index)] = _SCATTER_MODES[str(mode)](moved[int(index)], upd[j])
    return out


def _quiet_divide(x, y):
    """MIL real_div, x / y as a runtime computes it: 0/0 is NaN, x/0 is inf, without a warning (a select
    after it may discard them: the Softplus recipe's log1p divides by zero in its unused branch). Integer
    operands give an integer result (MIL's type inference keeps the operands' type), the quotient
    truncated toward zero (Apple's op test casts the true quotient to int32)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        quotient = np.divide(x, y)
    kind = np.result_type(x, y)
    return quotient.astype(kind) if np.issubdtype(kind, np.integer) else quotient


def _linear(x, weight, bias=None, **_):
    """MIL linear: x @ weight^T + bias (weight [out, in])."""
    out = np.matmul(x, np.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias


def _recurrent(cell: Cell):
    """MIL's gru / rnn with Core ML's semantics (``converters.apple``): reset-before when reset_after
    is false, the output sequence in processing order."""

    def run(
        x,
        initial_h,
        weight_ih,
        weight_hh,
        bias=None,
        input_bias=None,
        direction="forward",
        output_sequence=False,
        recurrent_activation="sigmoid",
        activation="tanh",
        reset_after=False,
        **_,
    ):
        names = [recurrent_activation, activation] if cell is Cell.GRU else [activation]
        acts = tuple(activation_of(str(n), "MIL executor: ") for n in names)
        seq, y_h = recurrence(
            cell,
            x,
            initial_h,
            weight_ih,
            weight_hh,
            bias,
            input_bias,
            reverse=str(direction) == "reverse",
            activations=acts,
            reset_after=bool(reset_after),
        )
        seq, y_h = (
            seq.astype(x.dtype, copy=False),
            y_h.astype(x.dtype, copy=False),
        )  # fp16 programs: fp16 results (computed in fp32)
        return (seq if output_sequence else seq[-1:]), y_h

    return run


def _lstm(
    x,
    initial_h,
    initial_c,
    weight_ih,
    weight_hh,
    bias=None,
    peephole=None,
    weight_ih_back=None,
    weight_hh_back=None,
    bias_back=None,
    peephole_back=None,
    direction="forward",
    output_sequence=False,
    recurrent_activation="sigmoid",
    cell_activation="tanh",
    activation="tanh",
    clip=None,
    **_,
):
    """MIL's lstm with coremltools' semantics (``converters.apple.lstm_recurrence``): states [N, D*H]
    (forward half first); a reverse op's sequence in processing order, a bidirectional op's backward half
    in input time (coremltools' op tests compare both so against torch); without ``output_sequence`` the
    one row is the final hidden state."""
    if clip is not None:
        raise UsageError(
            f"lstm op with clip {float(clip):g}: it clips the cell state after each update, which gatepack's MIL "
            "executor does not run"
        )
    acts = tuple(activation_of(str(n), "MIL executor: ") for n in (recurrent_activation, cell_activation, activation))
    both = str(direction) == "bidirectional"
    runs = [(weight_ih, weight_hh, bias, peephole, str(direction) == "reverse")]
    if both:
        runs.append((weight_ih_back, weight_hh_back, bias_back, peephole_back, True))
    h = weight_hh.shape[1]
    ys, hs, cs = [], [], []
    for k, (w, r, b, p, reverse) in enumerate(runs):
        cols = slice(k * h, (k + 1) * h)
        seq, y_h, y_c = lstm_recurrence(
            x, initial_h[:, cols], initial_c[:, cols], w, r, b, reverse=reverse, activations=acts, peephole=p
        )
        ys.append(seq[::-1] if both and reverse else seq)
        hs.append(y_h)
        cs.append(y_c)
    y_h, y_c = np.concatenate(hs, -1), np.concatenate(cs, -1)
    y = np.concatenate(ys, -1) if output_sequence else y_h[None]
    return tuple(v.astype(x.dtype, copy=False) for v in (y, y_h, y_c))  # fp16 programs: fp16 results


# the ops gatepack's layer writer emits and coremltools' recurrent programs hold
_CORE_OPS = {
    "identity": lambda x, **_: x,
    "transpose": lambda x, perm, **_: np.transpose(x, perm),
    "shape": lambda x, **_: np.array(x.shape, np.int32),
    "slice_by_index": _slice_by_index,
    "fill": lambda shape, value=0.0, **_: np.full([int(v) for v in shape], value, np.asarray(value).dtype),
    "expand_dims": lambda x, axes, **_: np.expand_dims(x, tuple(int(a) for a in axes)),
    "reverse": lambda x, axes=None, **_: np.flip(x, _axes(axes)),
    "reverse_sequence": _reverse_sequence,
    "matmul": lambda x, y, transpose_x=False, transpose_y=False, **_: _matmul(x, y, transpose_x, transpose_y),
    "add": lambda x, y, **_: np.add(x, y),
    "sub": lambda x, y, **_: np.subtract(x, y),
    "mul": lambda x, y, **_: np.multiply(x, y),
    "real_div": lambda x, y, **_: _quiet_divide(x, y),
    "maximum": lambda x, y, **_: np.maximum(x, y),
    "minimum": lambda x, y, **_: np.minimum(x, y),
    "sigmoid": lambda x, **_: Activation("Sigmoid")(x),  # 1 / (1 + e^-x), without overflow
    "tanh": lambda x, **_: np.tanh(x),
    "relu": lambda x, **_: np.maximum(x, 0).astype(x.dtype),
    "greater": lambda x, y, **_: np.greater(x, y),
    "greater_equal": lambda x, y, **_: np.greater_equal(x, y),
    "less": lambda x, y, **_: np.less(x, y),
    "equal": lambda x, y, **_: np.equal(x, y),
    "select": _select,
    "clip": lambda x, alpha, beta, **_: np.minimum(np.maximum(x, alpha), beta).astype(x.dtype),
    "cast": lambda x, dtype, **_: np.asarray(x).astype(_DTYPES[str(dtype)]),
    "split": lambda x, axis, num_splits=None, split_sizes=None, **_: tuple(
        np.split(x, np.cumsum(split_sizes)[:-1] if split_sizes is not None else int(num_splits), int(axis))
    ),
    "scatter": _scatter,
    "read_state": lambda input, **_: input.read(),
    "coreml_update_state": lambda state, value, **_: state.update(value),
    "linear": _linear,
    "stack": lambda values, axis, **_: np.stack(values, int(axis)),
    "gru": _recurrent(Cell.GRU),
    "rnn": _recurrent(Cell.RNN),
    "lstm": _lstm,
}

# with the ops the ONNX operator table emits, each group in its own module (tests check no op is defined twice)
OP_GROUPS = (_CORE_OPS, ELEMENTWISE_OPS, NN_OPS, TENSOR_OPS, CONSTEXPR_OPS)
_MIL_OPS = {name: fn for group in OP_GROUPS for name, fn in group.items()}


class _Missing(Exception):
    """An op's input was not given (it belongs to another layer): skip the op."""


def _run_block(block, env: dict, path: Path) -> None:
    for op in block.operations:
        try:
            if op.op_type == "const":
                env[op.outputs[0].name] = _value(op.outputs[0])
                continue
            if op.op_type in CONSTEXPR_OPS:  # constant: decompressed once, however often its block runs
                env[op.outputs[0].name] = decompressed(op)
                continue
            args = {key: _lookup(var, env) for key, var in op.inputs.items()}
        except _Missing:
            continue
        if op.op_type in _CONTROL_FLOW:
            try:
                results = _CONTROL_FLOW[op.op_type](op, args, env, path)
            except _Missing:  # its body reads a value that was not given (another layer's): skip it
                continue
        else:
            fn = _MIL_OPS.get(op.op_type)
            if fn is None:
                raise UsageError(
                    f"{path}: op {op.name!r} ({op.op_type}) is not one gatepack's MIL executor runs",
                    hint="it runs the ops gatepack writes and native gru/rnn programs",
                )
            results = fn(**args)
        for var, value in zip(op.outputs, results if isinstance(results, tuple) else (results,)):
            env[var.name] = value


def _lookup(var, env: dict):
    if isinstance(var, (list, tuple)):
        return [_lookup(v, env) for v in var]
    if var.name in env:
        return env[var.name]
    if var.val is not None:
        return _value(var)
    if var.op is not None and var.op.op_type in CONSTEXPR_OPS:  # a compressed weight read outside its block's run
        return decompressed(var.op)
    raise _Missing(var.name)


def _while_loop(op, args: dict, env: dict, path: Path) -> tuple:
    """MIL while_loop: ``loop_vars`` carried through the body block while the cond block says so."""
    values = args["loop_vars"]
    cond_block, body_block = op.blocks
    while True:
        scope = dict(env)
        scope.update({var.name: value for var, value in zip(cond_block.inputs, values)})
        _run_block(cond_block, scope, path)
        if not bool(np.asarray(scope[cond_block.outputs[0].name]).reshape(-1)[0]):
            return tuple(values)
        scope = dict(env)
        scope.update({var.name: value for var, value in zip(body_block.inputs, values)})
        _run_block(body_block, scope, path)
        values = [_lookup(var, scope) for var in body_block.outputs]


def _cond(op, args: dict, env: dict, path: Path) -> tuple:
    """MIL cond: the true block when ``pred`` holds, else the false block; the block's outputs are the op's."""
    block = op.blocks[0] if bool(np.asarray(args["pred"]).reshape(-1)[0]) else op.blocks[1]
    scope = dict(env)
    _run_block(block, scope, path)
    return tuple(_lookup(var, scope) for var in block.outputs)


_CONTROL_FLOW = {"while_loop": _while_loop, "cond": _cond}


def execute(function, inputs: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """Run a MIL function on named inputs (Core ML's names); return every output that was computable, and each
    state's value after the call under its input's name (a stateful program)."""
    types = _mil_types()

    env: dict[str, Any] = {}
    held: dict[str, State] = {}
    states = state_inputs(function)
    for name, var in function.inputs.items():
        if name in inputs and name in states:
            env[var.name] = held[name] = State(np.asarray(inputs[name]).astype(np.float16))
        elif name in inputs:
            env[var.name] = np.asarray(inputs[name]).astype(types.nptype_from_builtin(var.dtype))
    _run_block(function, env, path)
    found = {var.name: env[var.name] for var in function.outputs if var.name in env}
    return {**found, **{name: state.value for name, state in held.items()}}


class State:
    """A Core ML state (iOS18 ``StateType``): an fp16 tensor that ``read_state`` reads and ``coreml_update_state``
    overwrites; ``execute`` returns each state's value after the call under the state input's name."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def read(self) -> np.ndarray:
        return np.array(self.value)

    def update(self, value: np.ndarray) -> np.ndarray:
        if np.shape(value) != self.value.shape or np.asarray(value).dtype != np.float16:
            raise UsageError(
                f"coreml_update_state: a {np.asarray(value).dtype}{list(np.shape(value))} value for "
                f"an fp16{list(self.value.shape)} state"
            )
        self.value = np.array(value)
        return np.array(value)

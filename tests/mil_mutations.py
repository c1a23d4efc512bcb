"""Deliberate bugs in gatepack's MIL interpreter, one per row family of the proof (``tests/mil_coverage.py``): each
wraps one op of the interpreter's table so it computes something plausible but wrong. ``bench/mil_mutations.py``
applies each in turn (``GATEPACK_MIL_MUTATION=name``: tests/conftest.py and the Apple plugin's subprocess apply it
when the session starts) and runs ``pytest -m coreml_proof``: every one must make a test fail.

The first seventeen are the ones a reviewer's mutation run found surviving the Apple cases alone."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

MUTATION_VARIABLE = "GATEPACK_MIL_MUTATION"


def _with(**changed) -> Callable:
    """A wrapper calling the op with some inputs replaced (``None`` drops one)."""

    def wrap(fn: Callable) -> Callable:
        def run(**args):
            args.update(changed)
            return fn(**{k: v for k, v in args.items() if v is not None})

        return run

    return wrap


def _mapped(key: str, change: Callable) -> Callable:
    """A wrapper calling the op with input ``key`` (when given) passed through ``change``."""

    def wrap(fn: Callable) -> Callable:
        def run(**args):
            if args.get(key) is not None:
                args[key] = change(args[key])
            return fn(**args)

        return run

    return wrap


def _result(change: Callable) -> Callable:
    """A wrapper passing the op's result through ``change``."""

    def wrap(fn: Callable) -> Callable:
        return lambda **args: change(fn(**args), args)

    return wrap


def _first_entry(value: np.ndarray) -> np.ndarray:
    """Every batch entry (axis -2 of a state [N, H] or a sequence [S, N, I]) replaced by the first."""
    first = np.take(value, [0], axis=-2)
    return np.repeat(first, value.shape[-2], axis=-2)


def _batch_from_first(fn: Callable) -> Callable:
    def run(**args):
        for key in ("x", "initial_h", "initial_c"):
            if key in args:
                args[key] = _first_entry(np.asarray(args[key]))
        return fn(**args)

    return run


def _dense_groups(fn: Callable) -> Callable:
    """conv ignoring ``groups``: the grouped weight tiled over every input channel (a dense convolution)."""

    def run(x, weight, groups=1, **args):
        tiled = np.concatenate([weight] * int(groups), axis=1) / int(groups)
        return fn(x=x, weight=tiled, groups=1, **args)

    return run


def _integer_floor(fn: Callable) -> Callable:
    def run(x, y, **args):
        if np.issubdtype(np.result_type(x, y), np.integer):
            return np.floor_divide(x, y)
        return fn(x=x, y=y, **args)

    return run


def _negative_clamped(fn: Callable) -> Callable:
    return _mapped("indices", lambda index: np.maximum(np.asarray(index), 0))(fn)


def _reshape_left_zero(fn: Callable) -> Callable:
    """reshape's 0 copying x's dimension at the same index (ONNX's rule), not the one it lines up with from the
    right (MIL's)."""

    def run(x, shape, **args):
        target = [int(v) for v in np.asarray(shape).reshape(-1)]
        return np.reshape(
            x, [x.shape[k] if v == 0 and k < x.ndim else (1 if v == 0 else v) for k, v in enumerate(target)]
        )

    return run


def _cond_swapped(fn: Callable) -> Callable:
    def run(op, args, env, path):
        return fn(op, {**args, "pred": np.logical_not(np.asarray(args["pred"]))}, env, path)

    return run


def _body_once_skipped(fn: Callable) -> Callable:
    """while_loop returning its initial values whenever the loop would run (the body never applied)."""

    def run(op, args, env, path):
        fn(op, args, env, path)
        return tuple(args["loop_vars"])

    return run


# name: (what it breaks, the table it patches ("ops" or "control_flow"), the op, the wrapper)
MUTATIONS: dict[str, tuple[str, str, str, Callable]] = {
    "gru_reset_after_ignored": (
        "gru computes reset-before whatever reset_after says",
        "ops",
        "gru",
        _with(reset_after=False),
    ),
    "gru_input_bias_ignored": ("gru drops input_bias", "ops", "gru", _with(input_bias=None)),
    "gru_batch_from_first": (
        "gru: every batch entry takes the first entry's input and state",
        "ops",
        "gru",
        _batch_from_first,
    ),
    "rnn_batch_from_first": ("rnn: likewise", "ops", "rnn", _batch_from_first),
    "lstm_batch_from_first": ("lstm: likewise", "ops", "lstm", _batch_from_first),
    "lstm_h_c_swapped": (
        "lstm returns the final c as h and h as c",
        "ops",
        "lstm",
        _result(lambda out, _: (out[0], out[2], out[1])),
    ),
    "rnn_relu_as_tanh": (
        "rnn with relu computes tanh",
        "ops",
        "rnn",
        lambda fn: (
            lambda **a: fn(
                **{**a, "activation": "tanh" if a.get("activation") == "relu" else a.get("activation", "tanh")}
            )
        ),
    ),
    "conv_dilations_ignored": ("conv ignores dilations", "ops", "conv", _with(dilations=None)),
    "conv_groups_ignored": ("conv ignores groups (a dense convolution)", "ops", "conv", _dense_groups),
    "conv_transpose_strides_ignored": ("conv_transpose ignores strides", "ops", "conv_transpose", _with(strides=None)),
    "slice_stride_ignored": ("slice_by_index ignores stride", "ops", "slice_by_index", _with(stride=None)),
    "slice_end_mask_ignored": ("slice_by_index ignores end_mask", "ops", "slice_by_index", _with(end_mask=None)),
    "layer_norm_epsilon_ignored": (
        "layer_norm ignores epsilon (1e-5 always)",
        "ops",
        "layer_norm",
        _with(epsilon=1e-5),
    ),
    "real_div_integer_floors": ("integer real_div floors instead of truncating", "ops", "real_div", _integer_floor),
    "ceil_as_floor": ("ceil computes floor", "ops", "ceil", lambda fn: lambda x, **_: np.floor(x).astype(x.dtype)),
    "logical_or_as_and": (
        "logical_or computes and",
        "ops",
        "logical_or",
        lambda fn: lambda x, y, **_: np.logical_and(x, y),
    ),
    "fill_zeros": ("fill gives zeros whatever its value", "ops", "fill", _with(value=0.0)),
    "gather_negative_clamped": ("gather takes a negative index as 0", "ops", "gather", _negative_clamped),
    # one more per row family
    "reshape_zero_left_aligned": (
        "reshape's 0 copies the dimension at its own index",
        "ops",
        "reshape",
        _reshape_left_zero,
    ),
    "gru_reverse_as_forward": ("gru runs a reverse op forward", "ops", "gru", _with(direction="forward")),
    "lstm_peephole_ignored": ("lstm drops its peephole", "ops", "lstm", _with(peephole=None)),
    "conv_pad_ignored": ("conv ignores custom pad", "ops", "conv", _with(pad=None)),
    "conv_transpose_dilations_ignored": (
        "conv_transpose ignores dilations",
        "ops",
        "conv_transpose",
        _with(dilations=None),
    ),
    "add_as_sub": ("add computes x - y", "ops", "add", lambda fn: lambda x, y, **_: np.subtract(x, y)),
    "exp_as_exp2": ("exp computes 2^x", "ops", "exp", lambda fn: lambda x, **_: np.exp2(x).astype(x.dtype)),
    "reduce_mean_doubled": (
        "reduce_mean twice the mean",
        "ops",
        "reduce_mean",
        _result(lambda out, args: (out * 2).astype(out.dtype)),
    ),
    "softmax_last_axis": ("softmax always over the last axis", "ops", "softmax", _with(axis=-1)),
    "matmul_transpose_y_ignored": ("matmul ignores transpose_y", "ops", "matmul", _with(transpose_y=False)),
    "concat_interleave_ignored": ("concat ignores interleave", "ops", "concat", _with(interleave=False)),
    "select_swapped": (
        "select takes b where cond holds",
        "ops",
        "select",
        lambda fn: lambda cond, a, b, **_: fn(cond=cond, a=b, b=a),
    ),
    "cast_rounds": (
        "cast to an integer rounds instead of truncating",
        "ops",
        "cast",
        lambda fn: lambda x, dtype, **_: fn(x=np.round(x) if "int" in str(dtype) else x, dtype=dtype),
    ),
    "max_pool_as_avg": (
        "max_pool averages",
        "ops",
        "max_pool",
        lambda fn: (
            lambda **a: __import__("gatepack.converters.formats.coreml.mil_nn", fromlist=["OPS"]).OPS["avg_pool"](**a)
        ),
    ),
    "batch_norm_epsilon_ignored": ("batch_norm ignores epsilon", "ops", "batch_norm", _with(epsilon=1e-5)),
    "pad_reflect_as_edge": (
        "pad reflect copies the edge",
        "ops",
        "pad",
        lambda fn: (
            lambda **a: fn(**{**a, "mode": "replicate" if a.get("mode") == "reflect" else a.get("mode", "constant")})
        ),
    ),
    "scatter_add_as_update": ("scatter add overwrites", "ops", "scatter", _with(mode="update")),
    "reverse_sequence_full": (
        "reverse_sequence reverses whole sequences whatever the lengths",
        "ops",
        "reverse_sequence",
        lambda fn: (
            lambda x, lengths, **a: fn(
                x=x, lengths=np.full_like(np.asarray(lengths), np.shape(x)[int(a.get("seq_axis", 0))]), **a
            )
        ),
    ),
    "while_loop_body_skipped": ("while_loop never applies its body", "control_flow", "while_loop", _body_once_skipped),
    "cond_branches_swapped": ("cond runs the other block", "control_flow", "cond", _cond_swapped),
}


def apply(name: str) -> None:
    """Patch the interpreter's table with mutation ``name`` (``KeyError`` for an unknown one)."""
    from gatepack.converters.formats.coreml import interpreter

    _, table, op, wrapper = MUTATIONS[name]
    tables = {"ops": interpreter._MIL_OPS, "control_flow": interpreter._CONTROL_FLOW}
    tables[table][op] = wrapper(tables[table][op])


def apply_from_environment() -> str | None:
    """Apply the mutation ``GATEPACK_MIL_MUTATION`` names, if any; return its name."""
    name = os.environ.get(MUTATION_VARIABLE)
    if name:
        import gatepack.converters.formats.coreml  # noqa: F401  (the whole table first)

        apply(name)
    return name

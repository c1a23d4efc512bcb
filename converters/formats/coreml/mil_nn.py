"""gatepack's MIL interpreter: the nn ops the ONNX operator table emits (NumPy, MIL's documented semantics).

``OPS`` maps a MIL op type to a function of the op's inputs by name (MIL vars as arrays, parameters as Python
values); ``interpreter`` merges it into its table. Each op here is checked against Apple's own op tests.

Convolutions and pools work on ``x [N, C, *D]`` (1 to 3 spatial dimensions); ``pad`` is MIL's
``[begin_0, end_0, begin_1, end_1, ...]``. Results are computed in float64 and returned in ``x``'s dtype
(fp16 programs get fp16 results).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from gatepack.converters.errors import UsageError


def _ints(values, count: int, default: int) -> list[int]:
    return [default] * count if values is None else [int(v) for v in np.asarray(values).reshape(-1)]


def _same_pads(pad_type: str, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int]) -> list[int]:
    """MIL's (TensorFlow's) ``same`` padding: ``total = max(0, (ceil(d / s) - 1) * s + k - d)`` per spatial
    dimension (``k`` the dilated kernel), the odd element after (``same``) or before (``same_lower``)."""
    pads = []
    for d, k, s in zip(sizes, kernel, strides):
        total = max(0, (math.ceil(d / s) - 1) * s + k - d)
        small = total // 2
        pads += [total - small, small] if pad_type == "same_lower" else [small, total - small]
    return pads


def _spatial_pads(op: str, pad_type, pad, sizes, kernel, strides) -> list[int]:
    """The explicit ``[begin, end]`` pads of each spatial dimension for MIL's ``pad_type``."""
    pad_type = str(pad_type)
    if pad_type == "valid":
        return [0] * 2 * len(sizes)
    if pad_type == "custom":
        return _ints(pad, 2 * len(sizes), 0)
    if pad_type in ("same", "same_lower"):
        return _same_pads(pad_type, sizes, kernel, strides)
    raise UsageError(f"{op} pad_type {pad_type!r} is not one gatepack's MIL executor runs")


def _padded(x: np.ndarray, pads: Sequence[int], value: float) -> np.ndarray:
    spatial = [(int(pads[2 * k]), int(pads[2 * k + 1])) for k in range(x.ndim - 2)]
    return np.pad(x, [(0, 0), (0, 0), *spatial], constant_values=value)


def _window(x: np.ndarray, offsets: Sequence[int], strides: Sequence[int], outs: Sequence[int]) -> np.ndarray:
    """``x[:, :, o_i + s_i * j_i]`` for ``j_i < out_i``: the input element each output reads at one kernel tap."""
    index = tuple(slice(o, o + (n - 1) * s + 1, s) for o, s, n in zip(offsets, strides, outs))
    return x[(slice(None), slice(None)) + index]


def _conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, **_):
    """MIL conv: ``y[n, o, j] = bias[o] + sum_{c, k} x_pad[n, g*Cg + c, j*s + k*d] * weight[o, c, k]`` with
    ``g = o // (C_out / groups)``, ``Cg = C_in / groups``."""
    rank = x.ndim - 2
    strides, dilations = _ints(strides, rank, 1), _ints(dilations, rank, 1)
    kernel = weight.shape[2:]
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    pads = _spatial_pads("conv", pad_type, pad, x.shape[2:], dilated, strides)
    padded = _padded(x.astype(np.float64), pads, 0.0)
    outs = [(p - k) // s + 1 for p, k, s in zip(padded.shape[2:], dilated, strides)]
    groups = int(groups)
    n, c_out = x.shape[0], weight.shape[0]
    w = weight.astype(np.float64).reshape(groups, c_out // groups, weight.shape[1], *kernel)
    y = np.zeros((n, groups, c_out // groups, *outs))
    for tap in itertools.product(*(range(k) for k in kernel)):
        taps = _window(padded, [t * d for t, d in zip(tap, dilations)], strides, outs)
        taps = taps.reshape(n, groups, weight.shape[1], *outs)
        y += np.einsum("ngc...,goc->ngo...", taps, w[(Ellipsis,) + tap])
    y = y.reshape(n, c_out, *outs)
    if bias is not None:
        y += np.asarray(bias, np.float64).reshape(-1, *[1] * rank)
    return y.astype(x.dtype)


def _conv_transpose(
    x, weight, bias=None, pad=None, output_shape=None, pad_type="valid", strides=None, dilations=None, groups=1, **_
):
    """MIL conv_transpose (weight ``[C_in, C_out / groups, *K]``): every input element scatters
    ``x[n, c, i] * weight[c, o, k]`` to ``full[n, g*Og + o, i*s + k*d]``; the result is ``full`` without
    ``pad`` (begin, end) per spatial dimension; with ``output_shape``, ``full[begin : begin + out]`` (a custom pad's
    begin, else 0)."""
    rank = x.ndim - 2
    strides, dilations = _ints(strides, rank, 1), _ints(dilations, rank, 1)
    kernel = weight.shape[2:]
    groups = int(groups)
    n, c_in, sizes = x.shape[0], x.shape[1], x.shape[2:]
    c_og = weight.shape[1]
    full_sizes = [(d - 1) * s + (k - 1) * dl + 1 for d, s, k, dl in zip(sizes, strides, kernel, dilations)]
    full = np.zeros((n, groups, c_og, *full_sizes))
    xs = x.astype(np.float64).reshape(n, groups, c_in // groups, *sizes)
    w = weight.astype(np.float64).reshape(groups, c_in // groups, c_og, *kernel)
    for tap in itertools.product(*(range(k) for k in kernel)):
        contribution = np.einsum("ngc...,gco->ngo...", xs, w[(Ellipsis,) + tap])
        index = tuple(slice(t * dl, t * dl + (d - 1) * s + 1, s) for t, dl, d, s in zip(tap, dilations, sizes, strides))
        full[(slice(None), slice(None), slice(None)) + index] += contribution
    full = full.reshape(n, groups * c_og, *full_sizes)
    if output_shape is not None:
        outs = [int(v) for v in np.asarray(output_shape).reshape(-1)[2:]]
        begins = _ints(pad, 2 * rank, 0)[0::2] if str(pad_type) == "custom" else [0] * rank
        pads = [v for f, o, b in zip(full_sizes, outs, begins) for v in (b, f - o - b)]
    elif str(pad_type) == "same":
        outs = [d * s for d, s in zip(sizes, strides)]
        pads = [v for f, o in zip(full_sizes, outs) for v in ((f - o) // 2, f - o - (f - o) // 2)]
    else:
        pads = _spatial_pads("conv_transpose", pad_type, pad, sizes, kernel, strides)
    index = tuple(slice(pads[2 * k], full_sizes[k] - pads[2 * k + 1]) for k in range(rank))
    y = full[(slice(None), slice(None)) + index]
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(-1, *[1] * rank)
    return y.astype(x.dtype)


def _pool_sizes(x, kernel, strides, pads, ceil_mode) -> list[int]:
    """The output sizes: ``floor((d + pads - k) / s) + 1``; ``ceil_mode`` (MIL's, coremltools' size rule) is run
    only where it gives the same sizes (a window hanging past the padded input is not run)."""
    outs = [(d + b + e - k) // s + 1 for d, k, s, b, e in zip(x.shape[2:], kernel, strides, pads[::2], pads[1::2])]
    if ceil_mode:
        for d, k, s, b, e, out in zip(x.shape[2:], kernel, strides, pads[::2], pads[1::2], outs):
            ceiled = (d + b + e - k + s - 1) // s + 1
            if (ceiled - 1) * s >= d + (b + e) / 2 and b + e > 0:
                ceiled -= 1
            if ceiled != out:
                raise UsageError(
                    "pool with ceil_mode True whose last window hangs past the padded input: "
                    "gatepack's MIL executor does not run it"
                )
    return outs


def _pool(kind: str):
    """MIL max_pool / avg_pool: windows of ``kernel_sizes`` at ``strides`` over ``x`` padded by ``pad``
    (``-inf`` for max, 0 for avg); ``avg_pool`` divides by the window's size, or by its elements inside ``x``
    with ``exclude_padding_from_average``."""

    def run(
        x,
        kernel_sizes,
        strides=None,
        pad_type="valid",
        pad=None,
        ceil_mode=False,
        exclude_padding_from_average=False,
        **_,
    ):
        rank = x.ndim - 2
        kernel, strides = _ints(kernel_sizes, rank, 1), _ints(strides, rank, 1)
        pads = _spatial_pads(kind, pad_type, pad, x.shape[2:], kernel, strides)
        outs = _pool_sizes(x, kernel, strides, pads, bool(ceil_mode))
        padded = _padded(x.astype(np.float64), pads, -np.inf if kind == "max_pool" else 0.0)
        taps = [_window(padded, tap, strides, outs) for tap in itertools.product(*(range(k) for k in kernel))]
        if kind == "max_pool":
            return np.max(taps, axis=0).astype(x.dtype)
        if not exclude_padding_from_average:
            return (np.sum(taps, axis=0) / math.prod(kernel)).astype(x.dtype)
        inside = _padded(np.ones((1, 1, *x.shape[2:])), pads, 0.0)
        counts = [_window(inside, tap, strides, outs) for tap in itertools.product(*(range(k) for k in kernel))]
        return (np.sum(taps, axis=0) / np.sum(counts, axis=0)).astype(x.dtype)

    return run


def _channel(values, rank: int) -> np.ndarray:
    return np.asarray(values, np.float64).reshape(-1, *[1] * (rank - 2))


def _batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_):
    """MIL batch_norm: ``(x - mean) / sqrt(variance + epsilon) * gamma + beta`` per channel (axis 1)."""
    y = (x - _channel(mean, x.ndim)) / np.sqrt(_channel(variance, x.ndim) + float(epsilon))
    y = y * (1.0 if gamma is None else _channel(gamma, x.ndim)) + (0.0 if beta is None else _channel(beta, x.ndim))
    return y.astype(x.dtype)


def _normalized(x: np.ndarray, axes: tuple, epsilon: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + epsilon)`` over ``axes`` (the biased variance), in float64."""
    centred = x.astype(np.float64) - np.mean(x, axis=axes, dtype=np.float64, keepdims=True)
    return centred / np.sqrt(np.mean(centred**2, axis=axes, keepdims=True) + float(epsilon))


def _instance_norm(x, gamma=None, beta=None, epsilon=1e-5, **_):
    """MIL instance_norm: each ``[n, c]`` normalised over the spatial axes, then ``* gamma + beta`` per channel."""
    y = _normalized(x, tuple(range(2, x.ndim)), epsilon)
    y = y * (1.0 if gamma is None else _channel(gamma, x.ndim)) + (0.0 if beta is None else _channel(beta, x.ndim))
    return y.astype(x.dtype)


def _layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5, **_):
    """MIL layer_norm: normalised over ``axes`` (all when None), then ``* gamma + beta`` (shape ``x.shape[axes]``)."""
    axes = tuple(sorted(int(a) % x.ndim for a in (range(x.ndim) if axes is None else np.asarray(axes).reshape(-1))))
    y = _normalized(x, axes, epsilon)
    shape = [x.shape[k] if k in axes else 1 for k in range(x.ndim)]
    if gamma is not None:
        y = y * np.asarray(gamma, np.float64).reshape(shape)
    if beta is not None:
        y = y + np.asarray(beta, np.float64).reshape(shape)
    return y.astype(x.dtype)


def _softmax(x, axis=-1, **_):
    """MIL softmax: ``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    shifted = np.exp(x.astype(np.float64) - np.max(x, axis=int(axis), keepdims=True))
    return (shifted / np.sum(shifted, axis=int(axis), keepdims=True)).astype(x.dtype)


def _log_sum_exp(x, axis, keepdims):
    peak = np.max(x, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    total = np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True)) + peak
    return total if keepdims else np.squeeze(total, axis)


_REDUCTIONS: dict[str, Callable] = {
    "reduce_sum": lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims),
    "reduce_mean": lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
    "reduce_max": lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
    "reduce_min": lambda x, axis, keepdims: np.min(x, axis=axis, keepdims=keepdims),
    "reduce_prod": lambda x, axis, keepdims: np.prod(x, axis=axis, keepdims=keepdims),
    "reduce_l1_norm": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
    "reduce_l2_norm": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    "reduce_sum_square": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "reduce_log_sum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
    "reduce_log_sum_exp": _log_sum_exp,
}


def _reduction(name: str) -> Callable:
    """MIL reduce_*: over ``axes`` (every axis when None), keeping them as size 1 with ``keep_dims``; floats are
    reduced in float64, integers in their own type."""

    def run(x, axes=None, keep_dims=False, **_):
        axis = None if axes is None else tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
        wide = x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x
        with np.errstate(divide="ignore"):
            return np.asarray(_REDUCTIONS[name](wide, axis, bool(keep_dims))).astype(x.dtype)

    return run


def _arg_extreme(pick: Callable) -> Callable:
    """MIL reduce_argmax / reduce_argmin: the index of the largest / smallest value along ``axis`` (default -1), the
    first of tied values (as coremltools' own value inference, NumPy's), ``keep_dims`` keeping the axis; int32, or
    iOS17's ``output_dtype`` (gatepack writes none)."""

    def run(x, axis=-1, keep_dims=False, output_dtype="int32", **_):
        index = pick(x, axis=int(axis))
        return np.asarray(np.expand_dims(index, int(axis)) if keep_dims else index).astype(np.dtype(str(output_dtype)))

    return run


OPS: dict[str, Callable] = {
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "max_pool": _pool("max_pool"),
    "avg_pool": _pool("avg_pool"),
    "batch_norm": _batch_norm,
    "instance_norm": _instance_norm,
    "layer_norm": _layer_norm,
    "softmax": _softmax,
    **{name: _reduction(name) for name in _REDUCTIONS},
    "reduce_argmax": _arg_extreme(np.argmax),
    "reduce_argmin": _arg_extreme(np.argmin),
}

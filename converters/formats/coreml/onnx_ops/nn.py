"""ONNX neural-network operators (matrix products, convolutions, pooling, normalisation, reductions) as MIL ops.

Spatial attributes: ONNX's ``pads`` is ``[begin_1, ..., begin_n, end_1, ..., end_n]``, MIL's ``pad`` is
``[begin_1, end_1, ..., begin_n, end_n]``; ONNX's ``auto_pad`` SAME_UPPER/SAME_LOWER are MIL's ``same``/``same_lower``
(the same rule: ``total = max(0, (ceil(d / s) - 1) * s + (k - 1) * dilation + 1 - d)``, the odd element after/before).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from gatepack.converters.formats.coreml.onnx_ops.elementwise import mil_dtype, typed
from gatepack.converters.formats.coreml.translate import MilTranslation
from gatepack.converters.operators.einsum import einsum_groups, einsum_terms
from gatepack.converters.operators.table import OnnxOp

_AUTO_PADS = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}


def _product_operands(t: MilTranslation, node, ranks: tuple[int, int], transposed: tuple[bool, bool] = (False, False)):
    """A and B of a matrix product as MIL vars, checked before coremltools' builder sees them (it fails inside
    otherwise): each of a rank in ``ranks`` (inclusive), one element type MIL's ``matmul`` takes (fp16, fp32, int32),
    and A's last dimension equal to B's contracted one (``transposed``: transA, transB) where both are known. A
    vector B contracts its only dimension."""
    a, b = (typed(t, node, k, ("fp16", "fp32", "int32")) for k in (0, 1))
    for k, value in enumerate((a, b)):
        if not ranks[0] <= t.rank(value) <= ranks[1]:
            t.refuse(node, f"input {node.input[k]!r} has rank {t.rank(value)}; {node.op_type} takes rank {ranks}")
    if mil_dtype(a) != mil_dtype(b):
        t.refuse(node, f"its operands mix element types {mil_dtype(a)} and {mil_dtype(b)}")
    shape_a, shape_b = t.shape(a), t.shape(b)
    inner_a = shape_a[-2] if transposed[0] else shape_a[-1]
    inner_b = shape_b[0] if len(shape_b) == 1 else shape_b[-1] if transposed[1] else shape_b[-2]
    if all(isinstance(d, (int, np.integer)) for d in (inner_a, inner_b)) and inner_a != inner_b:
        t.refuse(node, f"its operands {list(shape_a)} and {list(shape_b)} do not chain ({inner_a} vs {inner_b})")
    return a, b


def _matmul(t: MilTranslation, node) -> list:
    """ONNX MatMul is numpy.matmul: a 1-D A is promoted to [1, K] and a 1-D B to [K, 1], the added axis removed
    after. MIL's ``matmul`` promotes A so but takes B of rank >= 2: a vector B is expanded and the axis squeezed."""
    a, b = _product_operands(t, node, (1, 5))
    if t.rank(b) == 1:
        return [t.mb.squeeze(x=t.mb.matmul(x=a, y=t.mb.expand_dims(x=b, axes=[-1])), axes=[-1])]
    return [t.mb.matmul(x=a, y=b)]


def _gemm(t: MilTranslation, node) -> list:
    """``Y = alpha * A' @ B' + beta * C`` (``A'`` = A^T with transA, ``B'`` = B^T with transB; C broadcast
    unidirectionally to ``Y``). A and B are matrices."""
    alpha, beta = float(t.attr(node, "alpha", 1.0)), float(t.attr(node, "beta", 1.0))
    transposed = (bool(t.attr(node, "transA", 0)), bool(t.attr(node, "transB", 0)))
    a, b = _product_operands(t, node, (2, 2), transposed)
    y = t.mb.matmul(x=a, y=b, transpose_x=transposed[0], transpose_y=transposed[1])
    if alpha != 1.0:
        y = t.mb.mul(x=y, y=np.float32(alpha))
    if t.has(node, 2) and beta != 0.0:
        c = t.value(node, 2)
        if isinstance(c, np.ndarray):
            c = (c * beta).astype(c.dtype)
        elif beta != 1.0:
            c = t.mb.mul(x=c, y=np.float32(beta))
        y = t.mb.add(x=y, y=t.as_var(c))
    return [y]


def _kernel(t: MilTranslation, node, weight_shape: tuple) -> list[int]:
    """The kernel's spatial shape from W; a ``kernel_shape`` attribute must agree with it."""
    kernel = [int(k) for k in weight_shape[2:]]
    given = t.attr(node, "kernel_shape")
    if given is not None and [int(k) for k in given] != kernel:
        t.refuse(node, f"kernel_shape {list(given)} differs from its weight's spatial shape {kernel}")
    return kernel


def _window_options(t: MilTranslation, node, spatial: int) -> dict:
    """MIL's ``strides``, ``pad_type`` and ``pad`` from ONNX's ``strides``, ``auto_pad`` and ``pads``."""
    strides = [int(s) for s in t.attr(node, "strides", [1] * spatial)]
    auto_pad = t.attr(node, "auto_pad", "NOTSET")
    pads = [int(p) for p in t.attr(node, "pads", [0] * 2 * spatial)]
    if auto_pad == "NOTSET":
        pad = [v for k in range(spatial) for v in (pads[k], pads[spatial + k])]
        return {"strides": strides, "pad_type": "custom", "pad": pad}
    if auto_pad not in _AUTO_PADS:
        t.refuse(node, f"auto_pad {auto_pad!r} is not one ONNX defines")
    if any(pads):
        t.refuse(node, f"auto_pad {auto_pad} together with pads {pads}")
    return {"strides": strides, "pad_type": _AUTO_PADS[auto_pad]}


def _conv(t: MilTranslation, node) -> list:
    """ONNX Conv as MIL conv (``convolution``); MIL needs the bias constant."""
    bias = t.constant(node, 2, "bias") if t.has(node, 2) else None
    return [convolution(t, node, t.value(node, 0), t.value(node, 1), bias)]


def convolution(t: MilTranslation, node, x, weight, bias: np.ndarray | None = None):
    """MIL conv of ``x`` by ``weight`` under ``node``'s window attributes (1 to 3 spatial dimensions, groups,
    dilations; W ``[C_out, C_in / group, *K]`` in both). MIL needs W constant when dilated."""
    spatial = t.rank(x) - 2
    if not 1 <= spatial <= 3:
        t.refuse(node, f"a rank-{t.rank(x)} input: MIL's conv has 1 to 3 spatial dimensions")
    _kernel(t, node, t.shape(weight))
    dilations = [int(d) for d in t.attr(node, "dilations", [1] * spatial)]
    if any(d != 1 for d in dilations) and not isinstance(weight, np.ndarray):
        t.refuse(node, f"dilations {dilations} with a weight computed at run time (MIL needs it constant)")
    options = _window_options(t, node, spatial)
    if bias is not None:
        options["bias"] = bias
    group = int(t.attr(node, "group", 1))
    return t.mb.conv(x=t.as_var(x), weight=t.as_var(weight), dilations=dilations, groups=group, **options)


def _transpose_pads(t: MilTranslation, node, x, kernel: list[int], spatial: int) -> list[int]:
    """ConvTranspose's ``[begin, end]`` pads per spatial dimension (ONNX's order). From ``output_shape`` or
    auto_pad SAME_*: ``total = s * (d - 1) + output_padding + (k - 1) * dilation + 1 - out`` split in halves; an odd
    total is refused (ONNX's definition and onnxruntime put its odd element on different sides)."""
    strides = [int(s) for s in t.attr(node, "strides", [1] * spatial)]
    dilations = [int(d) for d in t.attr(node, "dilations", [1] * spatial)]
    extra = [int(p) for p in t.attr(node, "output_padding", [0] * spatial)]
    auto_pad, output_shape = t.attr(node, "auto_pad", "NOTSET"), t.attr(node, "output_shape")
    pads = [int(p) for p in t.attr(node, "pads", [0] * 2 * spatial)]
    if auto_pad == "VALID" or (auto_pad == "NOTSET" and output_shape is None):
        return [0] * 2 * spatial if auto_pad == "VALID" else pads
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER"):
        t.refuse(node, f"auto_pad {auto_pad!r} is not one ONNX defines")
    if any(pads):
        t.refuse(node, f"pads {pads} together with {'output_shape' if output_shape is not None else auto_pad}")
    sizes = t.shape(x)[2:]
    if any(not isinstance(d, int) for d in sizes):
        t.refuse(node, "output_shape or auto_pad SAME_* with a symbolic spatial input size")
    outs = (
        [d * s for d, s in zip(sizes, strides)] if output_shape is None else [int(o) for o in output_shape][-spatial:]
    )
    totals = [
        s * (d - 1) + e + (k - 1) * dl + 1 - o
        for s, d, e, k, dl, o in zip(strides, sizes, extra, kernel, dilations, outs)
    ]
    if any(total < 0 or total % 2 for total in totals):
        t.refuse(node, f"its output size {outs} needs padding {totals}: negative or odd totals are not written")
    return [total // 2 for total in totals] * 2


def _conv_transpose(t: MilTranslation, node) -> list:
    """ONNX ConvTranspose as MIL conv_transpose: W ``[C_in, C_out / group, *K]`` in both (MIL needs it constant);
    ``output_padding`` extends the output's end, i.e. it is taken off the end padding (refused when larger)."""
    x = t.value(node, 0)
    weight = t.constant(node, 1, "weight")
    spatial = t.rank(x) - 2
    if not 1 <= spatial <= 3:
        t.refuse(node, f"a rank-{t.rank(x)} input: MIL's conv_transpose has 1 to 3 spatial dimensions")
    kernel = _kernel(t, node, weight.shape)
    pads = _transpose_pads(t, node, x, kernel, spatial)
    extra = [int(p) for p in t.attr(node, "output_padding", [0] * spatial)]
    ends = [pads[spatial + k] - extra[k] for k in range(spatial)]
    if any(e < 0 for e in ends):
        t.refuse(node, f"output_padding {extra} exceeds its end pads {pads[spatial:]} (MIL pads are not negative)")
    options = {
        "pad_type": "custom",
        "pad": [v for k in range(spatial) for v in (pads[k], ends[k])],
        "strides": [int(s) for s in t.attr(node, "strides", [1] * spatial)],
        "dilations": [int(d) for d in t.attr(node, "dilations", [1] * spatial)],
        "groups": int(t.attr(node, "group", 1)),
    }
    if t.has(node, 2):
        options["bias"] = t.constant(node, 2, "bias")
    return [t.mb.conv_transpose(x=t.as_var(x), weight=weight, **options)]


def _pool_options(t: MilTranslation, node, x) -> dict:
    """MIL pool parameters; ``ceil_mode`` is honoured where it gives floor's output sizes (ONNX and MIL size a
    window hanging past the input differently), ``dilations`` when all 1 (MIL's pools have none)."""
    spatial = t.rank(x) - 2
    if not 1 <= spatial <= 3:
        t.refuse(node, f"a rank-{t.rank(x)} input: MIL's pools have 1 to 3 spatial dimensions")
    kernel = [int(k) for k in t.attr(node, "kernel_shape")]
    dilations = [int(d) for d in t.attr(node, "dilations", [1] * spatial)]
    if any(d != 1 for d in dilations):
        t.refuse(node, f"dilations {dilations}: MIL's pools are not dilated")
    options = {"kernel_sizes": kernel, **_window_options(t, node, spatial)}
    if int(t.attr(node, "ceil_mode", 0)):
        sizes = t.shape(x)[2:]
        if options["pad_type"] != "custom" or any(not isinstance(d, int) for d in sizes):
            t.refuse(node, "ceil_mode 1 with auto_pad or a symbolic spatial size")
        pad = options["pad"]
        for d, k, s, b, e in zip(sizes, kernel, options["strides"], pad[::2], pad[1::2]):
            if (d + b + e - k) % s:
                t.refuse(node, "ceil_mode 1 where the last window hangs past the padded input (sized differently)")
    return options


def _max_pool(t: MilTranslation, node) -> list:
    if len(node.output) > 1 and node.output[1]:
        t.refuse(node, "its Indices output: MIL's max_pool has none")
    x = t.value(node, 0)
    return [t.mb.max_pool(x=t.as_var(x), **_pool_options(t, node, x))]


def _average_pool(t: MilTranslation, node) -> list:
    x = t.value(node, 0)
    exclude = not int(t.attr(node, "count_include_pad", 0))
    return [t.mb.avg_pool(x=t.as_var(x), exclude_padding_from_average=exclude, **_pool_options(t, node, x))]


def _global_pool(mil_op: str) -> OnnxOp:
    """GlobalAveragePool / GlobalMaxPool: the reduction over every spatial axis, kept as size 1."""

    def emit(t: MilTranslation, node) -> list:
        x = t.value(node, 0)
        axes = list(range(2, t.rank(x)))
        return [getattr(t.mb, mil_op)(x=t.as_var(x), axes=axes, keep_dims=True)]

    return OnnxOp(emit)


def _channel_constants(t: MilTranslation, node, first: int, names: tuple[str, ...]) -> list[np.ndarray]:
    return [t.constant(node, first + k, name).astype(np.float32) for k, name in enumerate(names)]


def _batch_norm(t: MilTranslation, node) -> list:
    """Inference BatchNormalization as MIL batch_norm (statistics constant); a rank-2 input gets a spatial axis
    around it. Training (training_mode 1, or the running statistics' outputs read) is refused."""
    if int(t.attr(node, "training_mode", 0)) or any(node.output[1:]):
        t.refuse(node, "training mode (batch statistics and running-statistics outputs): inference only")
    x = t.var(node, 0)
    gamma, beta, mean, variance = _channel_constants(t, node, 1, ("scale", "bias", "mean", "variance"))
    epsilon = np.float32(t.attr(node, "epsilon", 1e-5))
    flat = t.rank(x) == 2
    if flat:
        x = t.mb.expand_dims(x=x, axes=[2])
    y = t.mb.batch_norm(x=x, mean=mean, variance=variance, gamma=gamma, beta=beta, epsilon=epsilon)
    return [t.mb.squeeze(x=y, axes=[2]) if flat else y]


def _instance_norm(t: MilTranslation, node) -> list:
    x = t.var(node, 0)
    if t.rank(x) not in (3, 4):
        t.refuse(node, f"a rank-{t.rank(x)} input: MIL's instance_norm takes rank 3 or 4")
    gamma, beta = _channel_constants(t, node, 1, ("scale", "bias"))
    epsilon = np.float32(t.attr(node, "epsilon", 1e-5))
    return [t.mb.instance_norm(x=x, gamma=gamma, beta=beta, epsilon=epsilon)]


def _layer_norm(t: MilTranslation, node) -> list:
    """LayerNormalization over axes ``axis..rank-1`` as MIL layer_norm; Scale and B (broadcast to the normalised
    shape) as its gamma/beta when constant and static, applied after it otherwise. Its Mean/InvStdDev outputs and
    a stash_type other than float are refused."""
    if any(node.output[1:]):
        t.refuse(node, "its Mean / InvStdDev outputs (training) are read")
    if int(t.attr(node, "stash_type", 1)) != 1:
        t.refuse(node, f"stash_type {t.attr(node, 'stash_type')}: only float computation (1) is written")
    x = t.var(node, 0)
    rank = t.rank(x)
    axes = list(range(int(t.attr(node, "axis", -1)) % rank, rank))
    normalised = t.shape(x)[axes[0] :]
    static = all(isinstance(d, int) for d in normalised)
    options: dict[str, np.ndarray] = {}
    after: list[tuple[str, Any]] = []  # (gamma or beta, its MIL var)
    for k, name in ((1, "gamma"), (2, "beta")):
        if not t.has(node, k):
            continue
        value = t.value(node, k)
        inside = static and isinstance(value, np.ndarray) and np.ndim(value) <= len(normalised) and not after
        if inside and (name == "gamma" or "gamma" in options or not t.has(node, 1)):
            options[name] = np.broadcast_to(value, normalised).astype(np.float32)
        else:  # after the op (in order: a beta inside needs the gamma inside; coremltools wants gamma with beta)
            after.append((name, t.as_var(value)))
    if "beta" in options and "gamma" not in options:
        options["gamma"] = np.ones(normalised, np.float32)
    y = t.mb.layer_norm(x=x, axes=axes, epsilon=np.float32(t.attr(node, "epsilon", 1e-5)), **options)
    for name, value in after:
        y = t.mb.mul(x=y, y=value) if name == "gamma" else t.mb.add(x=y, y=value)
    return [y]


def _softmax(log: bool):
    """Softmax / LogSoftmax (LogSoftmax as ``x - reduce_log_sum_exp(x)``). From opset 13 along ``axis`` (default
    -1); before 13 over the input flattened to 2-D at ``axis`` (default 1): the trailing axes are merged into one
    (a reshape, back after)."""

    def along_last(t: MilTranslation, x):
        if log:
            return t.mb.sub(x=x, y=t.mb.reduce_log_sum_exp(x=x, axes=[-1], keep_dims=True))
        return t.mb.softmax(x=x, axis=-1)

    def emit(t: MilTranslation, node) -> list:
        x = t.var(node, 0)
        rank = t.rank(x)
        axis = int(t.attr(node, "axis", -1 if t.opset >= 13 else 1)) % rank
        if t.opset >= 13 or axis == rank - 1:
            if log:
                return [t.mb.sub(x=x, y=t.mb.reduce_log_sum_exp(x=x, axes=[axis], keep_dims=True))]
            return [t.mb.softmax(x=x, axis=axis)]
        trailing = t.shape(x)[axis:]
        if any(not isinstance(d, int) for d in trailing):
            t.refuse(node, f"opset {t.opset}'s flattened softmax over symbolic axes {trailing}")
        shape = t.mb.shape(x=x) if any(not isinstance(d, int) for d in t.shape(x)) else list(t.shape(x))
        flat = t.mb.reshape(x=x, shape=[*([-1] if axis else []), math.prod(trailing)])
        if not axis:
            flat = t.mb.expand_dims(x=flat, axes=[0])
        return [t.mb.reshape(x=along_last(t, flat), shape=shape)]

    return emit


_REDUCTIONS = {
    "ReduceSum": ("reduce_sum", 13),
    "ReduceMean": ("reduce_mean", 18),
    "ReduceMax": ("reduce_max", 18),
    "ReduceMin": ("reduce_min", 18),
    "ReduceProd": ("reduce_prod", 18),
    "ReduceL1": ("reduce_l1_norm", 18),
    "ReduceL2": ("reduce_l2_norm", 18),
    "ReduceSumSquare": ("reduce_sum_square", 18),
    "ReduceLogSum": ("reduce_log_sum", 18),
    "ReduceLogSumExp": ("reduce_log_sum_exp", 18),
}


def _reduce(onnx_op: str) -> OnnxOp:
    """ONNX Reduce*: ``axes`` an attribute, or from opset 13 (ReduceSum) / 18 (the others) the second input,
    which must be constant; no axes reduces every axis unless ``noop_with_empty_axes`` (then the identity)."""
    mil_op, axes_input_from = _REDUCTIONS[onnx_op]

    def emit(t: MilTranslation, node) -> list:
        x = t.var(node, 0)
        if t.opset >= axes_input_from:
            given = t.constant(node, 1, "axes") if t.has(node, 1) else None
        else:
            given = t.attr(node, "axes")
        axes = None if given is None or np.size(given) == 0 else [int(a) for a in np.asarray(given).reshape(-1)]
        if axes is None and int(t.attr(node, "noop_with_empty_axes", 0)):
            return [x]
        return [getattr(t.mb, mil_op)(x=x, axes=axes, keep_dims=bool(t.attr(node, "keepdims", 1)))]

    return OnnxOp(emit, frozenset({"axes", "keepdims", "noop_with_empty_axes"}))


def _arg_extreme(mil_op: str) -> OnnxOp:
    """ArgMax / ArgMin along ``axis`` (default 0), ``keepdims`` (default 1): MIL's reduce_argmax / reduce_argmin,
    int32 (ONNX's int64 held as Core ML's integer type). Ties give the first index, as ONNX's default; the last
    (``select_last_index`` 1) is refused: MIL has no such mode."""

    def emit(t: MilTranslation, node) -> list:
        if int(t.attr(node, "select_last_index", 0)):
            t.refuse(node, "select_last_index 1 (the last of tied values): MIL's reduction gives the first")
        x = t.var(node, 0)
        return [
            getattr(t.mb, mil_op)(x=x, axis=int(t.attr(node, "axis", 0)), keep_dims=bool(t.attr(node, "keepdims", 1)))
        ]

    return OnnxOp(emit, frozenset({"axis", "keepdims", "select_last_index"}))


def _flatten(t: MilTranslation, node) -> list:
    """Flatten to ``[prod(shape[:axis]), prod(shape[axis:])]``: one side may be symbolic (-1), not both."""
    x = t.var(node, 0)
    shape = t.shape(x)
    axis = int(t.attr(node, "axis", 1))
    axis += len(shape) if axis < 0 else 0
    sides = [shape[:axis], shape[axis:]]
    static = [all(isinstance(d, int) for d in side) for side in sides]
    if not any(static):
        t.refuse(node, f"both sides of axis {axis} of its shape {shape} are symbolic")
    target = [math.prod(side) if known else -1 for side, known in zip(sides, static)]
    return [t.mb.reshape(x=x, shape=target)]


def _grouped_shape(t: MilTranslation, node, sizes: dict, where: dict, groups: list[str]):
    """The reshape target merging each group of letters into one axis: a list (-1 for one symbolic group), or,
    with more symbolic groups, a shape computed at run time (``where``: letter -> (operand, axis))."""
    merged = [math.prod(sizes[c] for c in g) if all(isinstance(sizes[c], int) for c in g) else -1 for g in groups]
    if merged.count(-1) <= 1:
        return merged
    if any(len(g) > 1 for g, m in zip(groups, merged) if m == -1):
        t.refuse(node, f"merged axes {groups} of symbolic sizes in one reshape")
    pieces = [
        np.array([m], np.int32) if m != -1 else t.mb.gather(x=t.mb.shape(x=where[g][0]), indices=[where[g][1]])
        for g, m in zip(groups, merged)
    ]
    return t.mb.concat(values=pieces, axis=0)


def _einsum_operand(t: MilTranslation, x, term: str, keep: str, order: list[str]):
    """``x`` (letters ``term``) summed over the letters not in ``keep`` and transposed to the groups' ``order``."""
    summed = [k for k, c in enumerate(term) if c not in keep]
    if summed:
        x = t.mb.reduce_sum(x=x, axes=summed, keep_dims=False)
        term = "".join(c for c in term if c in keep)
    perm = [term.index(c) for c in "".join(order)]
    return t.mb.transpose(x=x, perm=perm) if perm != sorted(perm) else x


def _einsum(t: MilTranslation, node) -> list:
    """Einsum of one or two operands without repeated letters: each operand summed over its own letters that
    are nowhere else, then ``[batch, free, contracted]`` x ``[batch, contracted, free]`` as transposes, reshapes
    and one MIL matmul, the result transposed to the output's order."""
    count = len(node.input)
    if count not in (1, 2):
        t.refuse(node, f"{count} operands: one or two are written")
    terms, out = einsum_terms(t, node, count)
    xs = [t.var(node, k) for k in range(count)]
    sizes = {c: d for x, term in zip(xs, terms) for c, d in zip(term, t.shape(x))}
    where = {c: (x, k) for x, term in zip(xs, terms) for k, c in enumerate(term)}
    if count == 1:
        y = _einsum_operand(t, xs[0], terms[0], out, [out])
        return [y]
    a, b = terms
    batch, contracted, free_a, free_b = einsum_groups(a, b, out)
    groups_a, groups_b = [*batch, free_a, contracted], [*batch, contracted, free_b]
    x = _einsum_operand(t, xs[0], a, out + contracted, groups_a)
    y = _einsum_operand(t, xs[1], b, out + contracted, groups_b)
    x = t.mb.reshape(x=x, shape=_grouped_shape(t, node, sizes, where, groups_a))
    y = t.mb.reshape(x=y, shape=_grouped_shape(t, node, sizes, where, groups_b))
    product = t.mb.matmul(x=x, y=y)
    produced = batch + free_a + free_b
    product = t.mb.reshape(x=product, shape=_grouped_shape(t, node, sizes, where, list(produced)))
    perm = [produced.index(c) for c in out]
    return [t.mb.transpose(x=product, perm=perm) if perm != sorted(perm) else product]


# ONNX Resize: the input coordinate of output index i (float32, as onnxruntime)
_SOURCE_COORDINATES: dict[str, Callable[..., np.ndarray]] = {
    "half_pixel": lambda i, scale, d, out: (i + 0.5) / scale - 0.5,
    "pytorch_half_pixel": lambda i, scale, d, out: (i + 0.5) / scale - 0.5 if out > 1 else 0.0 * i,
    "align_corners": lambda i, scale, d, out: i * np.float32(d - 1) / np.float32(max(out - 1, 1)),
    "asymmetric": lambda i, scale, d, out: i / scale,
    "half_pixel_symmetric": lambda i, scale, d, out: (
        np.float32(d / 2) * (1 - np.float32(out / (scale * d))) + (i + 0.5) / scale - 0.5
    ),
}
_NEAREST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x)),
    "round_prefer_ceil": lambda x: np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x)),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _resize_plan(t: MilTranslation, node, shape: tuple) -> list[tuple[int, int, float]]:
    """(axis, output size, scale) of each axis Resize changes, from constant scales or sizes (opset 10: scales
    as the second input; 11+: roi, scales, sizes; 18+: ``axes``)."""
    scales_at = 1 if t.opset < 11 else 2
    axes = [int(a) % len(shape) for a in t.attr(node, "axes", range(len(shape)))]
    if t.has(node, scales_at + 1):
        sizes = [int(v) for v in t.constant(node, scales_at + 1, "sizes").reshape(-1)]
        if t.attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
            t.refuse(node, f"keep_aspect_ratio_policy {t.attr(node, 'keep_aspect_ratio_policy')!r}")
        plan: list[tuple[int, int, float | None]] = [(a, n, None) for a, n in zip(axes, sizes)]
    else:
        scales = [float(v) for v in t.constant(node, scales_at, "scales").reshape(-1)]
        if any(not isinstance(shape[a], int) for a, s in zip(axes, scales) if s != 1.0):
            t.refuse(node, "a resized axis of symbolic size")
        plan = [(a, int(math.floor(shape[a] * s)), s) for a, s in zip(axes, scales)]
    if any(not isinstance(shape[a], int) for a, n, s in plan if n != shape[a] or s not in (None, 1.0)):
        t.refuse(node, "a resized axis of symbolic size (the source indices are computed at conversion time)")
    return [
        (a, n, np.float32(n / shape[a] if s is None else s))
        for a, n, s in plan
        if (n, s) not in ((shape[a], 1.0), (shape[a], None))
    ]


def _resize(t: MilTranslation, node) -> list:
    """ONNX Resize, nearest or linear, as one ``gather`` (nearest) or two gathers blended (linear) per resized
    axis, with the source indices and weights computed at conversion time by ONNX's coordinate transformation
    and nearest rounding: exact for every size, scale and mode. Refused: cubic, antialias, tf_crop_and_resize,
    tf_half_pixel_for_nearest (onnxruntime, the oracle, does not run it), exclude_outside,
    keep_aspect_ratio_policy other than stretch."""
    mode = t.attr(node, "mode", "nearest")
    transform = t.attr(node, "coordinate_transformation_mode", "half_pixel" if t.opset >= 11 else "asymmetric")
    if mode not in ("nearest", "linear") or transform not in _SOURCE_COORDINATES:
        t.refuse(node, f"mode {mode!r} with coordinate_transformation_mode {transform!r}")
    if int(t.attr(node, "antialias", 0)) or int(t.attr(node, "exclude_outside", 0)):
        t.refuse(node, "antialias or exclude_outside")
    rounding = _NEAREST.get(t.attr(node, "nearest_mode", "round_prefer_floor"))
    if rounding is None:
        t.refuse(node, f"nearest_mode {t.attr(node, 'nearest_mode')!r}")
    y = t.var(node, 0)
    shape = t.shape(y)
    for axis, out, scale in _resize_plan(t, node, shape):
        d = shape[axis]
        x = _SOURCE_COORDINATES[transform](np.arange(out, dtype=np.float32), scale, d, out).astype(np.float32)
        if mode == "nearest":
            y = t.mb.gather(x=y, indices=np.clip(rounding(x), 0, d - 1).astype(np.int32), axis=axis)
            continue
        x = np.clip(x, 0, d - 1)
        low = np.floor(x).astype(np.int32)
        weight = (x - low).astype(np.float32).reshape([out if k == axis else 1 for k in range(len(shape))])
        near = t.mb.gather(x=y, indices=low, axis=axis)
        far = t.mb.gather(x=y, indices=np.minimum(low + 1, d - 1).astype(np.int32), axis=axis)
        y = t.mb.add(x=near, y=t.mb.mul(x=t.mb.sub(x=far, y=near), y=weight))
    return [y]


TABLE: dict[str, OnnxOp] = {
    "MatMul": OnnxOp(_matmul),
    "Gemm": OnnxOp(_gemm, frozenset({"alpha", "beta", "transA", "transB"}), (7, 10_000)),
    "Conv": OnnxOp(_conv, frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})),
    "ConvTranspose": OnnxOp(
        _conv_transpose,
        frozenset(
            {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"}
        ),
    ),
    "MaxPool": OnnxOp(
        _max_pool,
        frozenset({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}),
        (8, 10_000),
    ),
    "AveragePool": OnnxOp(
        _average_pool,
        frozenset({"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}),
        (7, 10_000),
    ),
    "GlobalAveragePool": _global_pool("reduce_mean"),
    "GlobalMaxPool": _global_pool("reduce_max"),
    "BatchNormalization": OnnxOp(_batch_norm, frozenset({"epsilon", "momentum", "training_mode"}), (7, 10_000)),
    "InstanceNormalization": OnnxOp(_instance_norm, frozenset({"epsilon"}), (6, 10_000)),
    "LayerNormalization": OnnxOp(_layer_norm, frozenset({"axis", "epsilon", "stash_type"}), (17, 10_000)),
    "Softmax": OnnxOp(_softmax(False), frozenset({"axis"})),
    "LogSoftmax": OnnxOp(_softmax(True), frozenset({"axis"})),
    "Flatten": OnnxOp(_flatten, frozenset({"axis"})),
    "Resize": OnnxOp(
        _resize,
        frozenset(
            {
                "mode",
                "coordinate_transformation_mode",
                "nearest_mode",
                "antialias",
                "exclude_outside",
                "axes",
                "keep_aspect_ratio_policy",
                "cubic_coeff_a",
                "extrapolation_value",
            }
        ),
        (10, 10_000),
    ),
    "Einsum": OnnxOp(_einsum, frozenset({"equation"}), (12, 10_000)),
    **{op: _reduce(op) for op in _REDUCTIONS},
    "ArgMax": _arg_extreme("reduce_argmax"),
    "ArgMin": _arg_extreme("reduce_argmin"),
}

"""ONNX tensor operators (shapes, reshaping, indexing, joining, padding) as MIL ops.

Values known at conversion time arrive as NumPy arrays (the pipeline folds every node whose inputs are all
constants and ``Shape`` of a static shape), so an entry here sees at least one input computed at run time. Where
an operand (a shape, starts/ends, indices) is itself computed at run time, the entry builds MIL's operand from it
with MIL ops (``shape``, ``gather``, ``select``, ``concat``) as long as MIL takes that operand as a tensor rather
than a ``const``; otherwise it refuses. Indices are made non-negative before MIL sees them: from iOS17 MIL's
gather and scatter ops treat a negative index as out of bounds.
"""

from __future__ import annotations

import numpy as np

from gatepack.converters.formats.coreml.translate import MAX_RANK, MilTranslation, Narrow, Squeezed, mil_constant
from gatepack.converters.operators.table import OnnxOp

_INT32_MIN, _INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)
# the element types MIL's gather, scatter_nd and pad take (int64 arrives as int32)
_NUMERIC = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32)}
_FLOAT = {np.dtype(np.float32), np.dtype(np.float16)}
_EIGHT_BITS = {np.dtype(np.int8), np.dtype(np.uint8)}


# ------------------------------------------------------------------------------------------------ helpers


def _axes(t: MilTranslation, node, rank: int) -> list[int] | None:
    """Squeeze/Unsqueeze axes: the ``axes`` attribute before opset 13, the second input from 13; negative
    axes counted from the end of ``rank``."""
    if t.opset >= 13:
        axes = t.constant(node, 1, "axes") if t.has(node, 1) else None
    else:
        axes = t.attr(node, "axes")
    return None if axes is None else [int(a) % rank for a in np.asarray(axes).reshape(-1)]


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _static(d) -> bool:
    return isinstance(d, (int, np.integer))


def _dtype(value) -> np.dtype:
    """The element type of a MIL var or array, as MIL holds it (int64 as int32, float64 as float32)."""
    if isinstance(value, np.ndarray):
        return mil_constant(value).dtype
    from coremltools.converters.mil.mil import types

    return np.dtype(types.nptype_from_builtin(value.dtype))


def _require(t: MilTranslation, node, value, types: set, what: str = "data") -> None:
    """Refuse ``value`` unless its element type is one of ``types`` (what the MIL op takes)."""
    if _dtype(value) not in types:
        names = ", ".join(sorted(str(d) for d in types))
        t.refuse(node, f"its {what} is {_dtype(value)}; the MIL op takes {names}")


def _dim(t: MilTranslation, x, axis: int):
    """Dimension ``axis`` of ``x``: an int when static, else a scalar int32 MIL var computed at run time."""
    d = t.shape(x)[axis]
    if _static(d):
        return int(d)
    return t.mb.gather(x=t.mb.shape(x=t.as_var(x)), indices=np.int32(axis), axis=0)


def _dims_vector(t: MilTranslation, dims: list):
    """A list of dimensions (ints or scalar vars) as one int32 MIL vector (a constant when all are ints)."""
    if all(_static(d) for d in dims):
        return np.asarray(dims, np.int32)
    parts = [np.asarray([d], np.int32) if _static(d) else t.mb.expand_dims(x=d, axes=[0]) for d in dims]
    return t.mb.concat(values=[t.as_var(p) for p in parts], axis=0)


def _nonnegative(t: MilTranslation, indices, dims: list):
    """``indices`` with each negative index ``i`` replaced by ``i + dim`` (``dims``: one dimension, or one per
    entry of the last axis of ``indices`` as ScatterND's). Constant indices on static dims stay constants;
    otherwise ``select(i < 0, i + dim, i)`` at run time."""
    if isinstance(indices, np.ndarray):
        if not (indices < 0).any():
            return mil_constant(indices)
        if all(_static(d) for d in dims):  # one dim: a scalar, so that a 0-d index stays 0-d (x[:, -1])
            offsets = np.int64(dims[0]) if len(dims) == 1 else np.asarray(dims, np.int64)
            return mil_constant(np.where(indices < 0, indices + offsets, indices))
    size = (np.int32(dims[0]) if _static(dims[0]) else dims[0]) if len(dims) == 1 else _dims_vector(t, dims)
    index = t.as_var(indices)
    return t.mb.select(cond=t.mb.less(x=index, y=np.int32(0)), a=t.mb.add(x=index, y=t.as_var(size)), b=index)


# ------------------------------------------------------------------------------------------------ layout


def _transpose(t: MilTranslation, node) -> list:
    x = t.value(node, 0)
    rank = len(x.shape) if isinstance(x, Squeezed) else t.rank(x)
    perm = [int(p) for p in t.attr(node, "perm", list(range(rank))[::-1])]
    if isinstance(x, Squeezed):  # only the non-unit axes move: their order after the transpose
        kept = [a for a in range(rank) if x.shape[a] != 1]
        moved = [kept.index(p) for p in perm if x.shape[p] != 1]
        var = t.mb.transpose(x=x.var, perm=moved) if moved != sorted(moved) else x.var
        return [_held_at_rank(t, var, tuple(x.shape[p] for p in perm))]
    if isinstance(x, Narrow):  # 8-bit values held as int32: moved, never computed on
        return [Narrow(t.mb.transpose(x=x.var, perm=perm), x.dtype)]
    return [t.mb.transpose(x=t.as_var(x), perm=perm)]


def _held_at_rank(t: MilTranslation, var, shape: tuple) -> object:
    """``var`` (the tensor of static ``shape`` with its size-1 axes left out) as ONNX's tensor: reshaped to ``shape``
    when Core ML holds that rank, else ``Squeezed``."""
    if len(shape) <= MAX_RANK:
        return t.mb.reshape(x=var, shape=np.asarray(shape, np.int32))
    return Squeezed(var, tuple(int(d) for d in shape))


def _elide_units(t: MilTranslation, node, x, shape: tuple) -> object:
    """A tensor of rank > 5 and static ``shape`` that ``x`` holds, as ``Squeezed`` (``x`` reshaped to its
    non-unit sizes); refused when its non-unit axes are more than Core ML's rank."""
    if not all(_static(d) for d in shape) or sum(d != 1 for d in shape) > MAX_RANK:
        t.refuse(node, f"its output has rank {len(shape)} {list(shape)}; Core ML holds rank <= {MAX_RANK}")
    return Squeezed(t.mb.reshape(x=x, shape=np.asarray([d for d in shape if d != 1] or [1], np.int32)), shape)


def _squeeze(t: MilTranslation, node) -> list:
    x = t.value(node, 0)
    axes = _axes(t, node, t.rank(x))
    if axes is None:
        shape = t.shape(x)
        if not all(_static(d) for d in shape):
            t.refuse(node, "no axes and a symbolic input shape: which axes are 1 is known only at run time")
        axes = [k for k, d in enumerate(shape) if d == 1]
    if not axes:
        return [t.as_var(x)]
    if all(_static(t.shape(x)[a]) for a in axes):
        return [t.mb.squeeze(x=t.as_var(x), axes=axes)]
    # An axis of symbolic size (ONNX requires it to be 1): MIL's squeeze types its result dropping only the axes
    # known to be 1, so its rank would be wrong; a reshape to the input's shape without those axes has the right one.
    kept = np.asarray([k for k in range(t.rank(x)) if k not in axes], np.int32)
    dims = t.mb.gather(x=t.mb.shape(x=t.as_var(x)), indices=kept, axis=0) if kept.size else np.zeros(0, np.int32)
    return [t.mb.reshape(x=t.as_var(x), shape=dims)]


def _unsqueeze(t: MilTranslation, node) -> list:
    x = t.value(node, 0)
    count = len(np.asarray(t.constant(node, 1, "axes") if t.opset >= 13 else t.attr(node, "axes")).reshape(-1))
    given = _axes(t, node, t.rank(x) + count)
    assert given is not None  # (counted above)
    axes = sorted(given)
    if t.rank(x) + count > MAX_RANK:
        shape = list(t.shape(x))
        for a in axes:
            shape.insert(a, 1)
        return [_elide_units(t, node, t.as_var(x), tuple(shape))]
    return [t.mb.expand_dims(x=t.as_var(x), axes=axes)]


def _identity(t: MilTranslation, node) -> list:
    return [t.value(node, 0)]


def _reshape(t: MilTranslation, node) -> list:
    """ONNX Reshape: a 0 in the shape copies the input's dimension at that index (unless ``allowzero``), one -1 is
    inferred. MIL's reshape infers -1 but copies a 0 only when the shape has the input's rank, so 0s are resolved
    here: from the static dimension, else at run time as ``select(shape == 0, shape(x)[:K], shape)``."""
    x, shape = t.value(node, 0), t.value(node, 1)
    allowzero = int(t.attr(node, "allowzero", 0))
    if isinstance(x, Squeezed) or (isinstance(shape, np.ndarray) and shape.size > MAX_RANK):
        return [_reshape_high_rank(t, node, x, t.constant(node, 1, "shape"), allowzero)]
    if isinstance(shape, np.ndarray):
        target = _ints(shape)
        if 0 in target and allowzero:
            t.refuse(node, f"allowzero = 1 with a 0 in its shape {target}: an empty tensor, which Core ML cannot hold")
        dims = t.shape(x)
        if all(_static(dims[k]) for k, v in enumerate(target) if v == 0 and k < len(dims)):
            target = [int(dims[k]) if v == 0 and k < len(dims) else v for k, v in enumerate(target)]
            return [t.mb.reshape(x=t.as_var(x), shape=np.asarray(target, np.int32))]
    elif allowzero:
        t.refuse(
            node,
            "allowzero = 1 with a shape computed at run time: Core ML's reshape copies the input's "
            "dimension for a 0, where ONNX makes an empty tensor",
        )
    count = t.shape(shape)[0]
    if not _static(count):
        t.refuse(node, "its shape has a length known only at run time")
    return [t.mb.reshape(x=t.as_var(x), shape=_zeros_copied(t, x, t.as_var(shape), int(count)))]


def _reshape_high_rank(t: MilTranslation, node, x, shape: np.ndarray, allowzero: int) -> object:
    """Reshape from or to a rank above Core ML's: the element order is the layout, so the tensor without its unit
    axes reshapes straight to the target (0s copied from the input's ONNX shape, one -1 inferred)."""
    dims = x.shape if isinstance(x, Squeezed) else t.shape(x)
    target = _ints(shape)
    if not all(_static(d) for d in dims) or (allowzero and 0 in target):
        t.refuse(node, f"a reshape of rank {len(dims)} -> {len(target)} with a symbolic or empty shape")
    target = [int(dims[k]) if v == 0 and k < len(dims) else v for k, v in enumerate(target)]
    if -1 in target:
        known = int(np.prod([v for v in target if v != -1]))
        target[target.index(-1)] = int(np.prod(dims)) // max(known, 1)
    var = x.var if isinstance(x, Squeezed) else t.as_var(x)
    if len(target) <= MAX_RANK:
        return t.mb.reshape(x=var, shape=np.asarray(target, np.int32))
    return _elide_units(t, node, var, tuple(target))


def _zeros_copied(t: MilTranslation, x, shape, count: int):
    """``shape`` (an int32 vector of ``count`` entries) with each 0 replaced by ``x``'s dimension at that index."""
    mb, rank = t.mb, t.rank(x)
    dims = mb.shape(x=t.as_var(x))
    if count < rank:
        dims = mb.slice_by_index(x=dims, begin=[0], end=[count])
    elif count > rank:  # a 0 beyond x's rank is invalid ONNX: it stays 0 and Core ML rejects it
        dims = mb.concat(values=[dims, np.zeros(count - rank, np.int32)], axis=0)
    return mb.select(cond=mb.equal(x=shape, y=np.int32(0)), a=dims, b=shape)


def _concat(t: MilTranslation, node) -> list:
    values = [t.value(node, k) for k in range(len(node.input))]
    axis = int(t.attr(node, "axis")) % t.rank(values[0])
    if len(values) == 1:
        return [values[0]]
    return [t.mb.concat(values=[t.as_var(v) for v in values], axis=axis)]


# ------------------------------------------------------------------------------------------------ slicing


def _slice_operands(t: MilTranslation, node, rank: int):
    """Slice's starts, ends (arrays or run-time vars), axes and steps (ints): attributes before opset 10,
    inputs from 10 (axes and steps optional; steps must be constant: MIL's stride is a ``const``)."""
    if t.opset < 10:
        starts, ends = np.asarray(t.attr(node, "starts"), np.int64), np.asarray(t.attr(node, "ends"), np.int64)
        axes = t.attr(node, "axes", list(range(len(starts))))
        return starts, ends, [int(a) % rank for a in axes], [1] * len(starts)
    starts, ends = t.value(node, 1), t.value(node, 2)
    count = t.shape(starts)[0]
    axes = _ints(t.constant(node, 3, "axes")) if t.has(node, 3) else list(range(count))
    steps = _ints(t.constant(node, 4, "steps")) if t.has(node, 4) else [1] * len(axes)
    return starts, ends, [a % rank for a in axes], steps


def _slice(t: MilTranslation, node) -> list:
    """ONNX Slice is Python's slicing per axis (negative starts/ends count from the end, out-of-range values
    clamp; INT64_MAX/INT64_MIN mean 'to the end'), as MIL's ``slice_by_index``. Constant starts/ends are
    resolved here (masks for the ends of the axis); ones computed at run time are placed at their axes with
    ``gather`` and keep Python's semantics, which slice_by_index shares."""
    x = t.value(node, 0)
    rank = t.rank(x)
    starts, ends, axes, steps = _slice_operands(t, node, rank)
    if len(set(axes)) != len(axes) or 0 in steps:
        t.refuse(node, f"axes {axes} repeat or steps {steps} hold a 0 (invalid ONNX)")
    stride = [1] * rank
    begin_mask, end_mask = [True] * rank, [True] * rank
    for axis, step in zip(axes, steps):
        stride[axis] = step
    if isinstance(starts, np.ndarray) and isinstance(ends, np.ndarray):
        begins, ends_at = [0] * rank, [0] * rank
        for axis, s, e, step in zip(axes, _ints(starts), _ints(ends), steps):
            bounds = _slice_bounds(t, node, t.shape(x)[axis], s, e, step)
            begins[axis], ends_at[axis] = bounds[0] or 0, bounds[1] or 0
            begin_mask[axis], end_mask[axis] = bounds[0] is None, bounds[1] is None
        begin, end = np.asarray(begins, np.int32), np.asarray(ends_at, np.int32)
    else:
        begin_mask = end_mask = [axis not in axes for axis in range(rank)]
        begin, end = _placed(t, starts, axes, rank), _placed(t, ends, axes, rank)
    out = t.mb.slice_by_index(
        x=t.as_var(x), begin=begin, end=end, stride=stride, begin_mask=begin_mask, end_mask=end_mask
    )
    return [out]


def _slice_bounds(t: MilTranslation, node, dim, start: int, end: int, step: int) -> tuple:
    """One axis's constant (begin, end) for slice_by_index, None where the mask stands for it (from the
    start / to the end in the step's direction). A static ``dim`` resolves them fully (``slice.indices``); a
    symbolic one keeps Python's relative values, the INT64 sentinels becoming masks."""
    if _static(dim):
        b, e, _ = slice(start, end, step).indices(int(dim))
        if len(range(b, e, step)) == 0:
            t.refuse(
                node, f"its slice [{start}:{end}:{step}] of a dimension of {dim} is empty, which Core ML cannot hold"
            )
        return b, (None if e < 0 else e)
    forward = step > 0
    first = None if (start <= _INT32_MIN if forward else start >= _INT32_MAX) else start
    last = None if (end >= _INT32_MAX if forward else end <= _INT32_MIN) else end
    return first, last


def _placed(t: MilTranslation, values, axes: list[int], rank: int):
    """Starts or ends given for ``axes`` as a full vector of ``rank`` entries (0 where a mask stands):
    ``gather(concat([values, [0]]), where)`` with ``where[axis]`` the position of ``axis`` in ``axes``."""
    where = np.asarray([axes.index(a) if a in axes else len(axes) for a in range(rank)], np.int32)
    padded = t.mb.concat(values=[t.as_var(values), np.zeros(1, np.int32)], axis=0)
    return t.mb.gather(x=padded, indices=where, axis=0)


def _split(t: MilTranslation, node) -> list:
    """ONNX Split along ``axis``: sizes from the ``split`` attribute (before opset 13) or input (from 13), else
    equal parts, or from opset 18 ``num_outputs`` parts of ceil(dim / n) with a smaller last one. MIL's split
    takes ``split_sizes`` or ``num_splits`` (equal parts)."""
    x = t.value(node, 0)
    axis = int(t.attr(node, "axis", 0)) % t.rank(x)
    count = len(node.output)
    if t.opset < 13:
        sizes = t.attr(node, "split")
    else:
        sizes = _ints(t.constant(node, 1, "split")) if t.has(node, 1) else None
    dim = t.shape(x)[axis]
    if sizes is None and _static(dim):
        part = -(-int(dim) // count) if t.opset >= 18 else int(dim) // count
        sizes = [part] * (count - 1) + [int(dim) - part * (count - 1)]
    if sizes is None:
        if t.opset >= 18:
            t.refuse(node, "num_outputs parts of a dimension known only at run time (the last may be smaller)")
        parts = t.mb.split(x=t.as_var(x), num_splits=count, axis=axis)
    elif len(sizes) != count or min(sizes) <= 0:
        t.refuse(node, f"split sizes {list(sizes)} for {count} outputs (empty or missing parts)")
    else:
        parts = t.mb.split(x=t.as_var(x), split_sizes=np.asarray(sizes, np.int32), axis=axis)
    return list(parts) if isinstance(parts, (list, tuple)) else [parts]


# ------------------------------------------------------------------------------------------------ indexing


def _take(t: MilTranslation, node) -> list:
    """ONNX Gather (numpy.take): out = x[..., indices, ...] at ``axis``; scalar indices remove the axis.
    MIL's gather with the indices made non-negative. Quantized constants (int8, uint8: an embedding table that
    DequantizeLinear reads next) are gathered from their int32 copy and held ``Narrow``."""
    x, indices = t.value(node, 0), t.value(node, 1)
    narrow = isinstance(x, np.ndarray) and x.dtype in _EIGHT_BITS
    if narrow:
        return [Narrow(_gather(t, node, x.astype(np.int32), indices), x.dtype)]
    return [_gather(t, node, x, indices)]


def _gather(t: MilTranslation, node, x, indices):
    """``x`` gathered at ``indices`` along the node's axis (rank > 5 held ``Squeezed``)."""
    _require(t, node, x, _NUMERIC)
    axis = int(t.attr(node, "axis", 0)) % t.rank(x)
    index = _nonnegative(t, indices, [_dim(t, x, axis)])
    shape = (*t.shape(x)[:axis], *t.shape(indices), *t.shape(x)[axis + 1 :])
    if len(shape) > MAX_RANK:  # gathered without the size-1 axes of x (but the gathered one) and of the indices
        units = [a for a, d in enumerate(t.shape(x)) if d == 1 and a != axis]
        low = t.mb.squeeze(x=t.as_var(x), axes=units) if units else t.as_var(x)
        flat = t.mb.reshape(
            x=t.as_var(index), shape=np.asarray([d for d in t.shape(indices) if d != 1] or [1], np.int32)
        )
        gathered = t.mb.gather(x=low, indices=flat, axis=axis - sum(a < axis for a in units))
        return _elide_units(t, node, gathered, shape)
    return t.mb.gather(x=t.as_var(x), indices=t.as_var(index), axis=axis)


def _gather_elements(t: MilTranslation, node) -> list:
    """ONNX GatherElements: out[i][j][k] = x[index[i][j][k]][j][k] at axis 0 (so for each ``axis``), as MIL's
    gather_along_axis with the indices made non-negative."""
    x, indices = t.value(node, 0), t.value(node, 1)
    _require(t, node, x, _NUMERIC)
    axis = int(t.attr(node, "axis", 0)) % t.rank(x)
    index = _nonnegative(t, indices, [_dim(t, x, axis)])
    if any(a != axis and d != e for a, (d, e) in enumerate(zip(t.shape(x), t.shape(indices)))):
        x = _cut_to(t, x, indices, axis)  # ONNX lets the indices be shorter than x off the axis; MIL does not
    return [t.mb.gather_along_axis(x=t.as_var(x), indices=t.as_var(index), axis=axis)]


def _cut_to(t: MilTranslation, x, indices, axis: int):
    """``x`` cut to the shape of ``indices`` on every axis but ``axis`` (at run time where a shape is symbolic)."""
    rank, shape = t.rank(x), t.shape(indices)
    end = np.asarray([d if _static(d) else 0 for d in shape], np.int32)
    if not all(_static(d) for d in shape):
        end = t.mb.shape(x=t.as_var(indices))
    mask = [a == axis for a in range(rank)]
    return t.mb.slice_by_index(x=t.as_var(x), begin=np.zeros(rank, np.int32), end=end, end_mask=mask)


_SCATTER_MODES = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def _scatter_nd(t: MilTranslation, node) -> list:
    """ONNX ScatterND: out = data; out[indices[i..., :]] (op)= updates[i..., ...], with the last axis of
    ``indices`` (K entries) indexing data's first K axes: MIL's scatter_nd, ``reduction`` as its mode."""
    data, indices, updates = (t.value(node, k) for k in range(3))
    _require(t, node, data, _NUMERIC)
    reduction = t.attr(node, "reduction", "none")
    if reduction not in _SCATTER_MODES:
        t.refuse(node, f"reduction {reduction!r}")
    depth = t.shape(indices)[-1]
    if not _static(depth):
        t.refuse(node, "the last dimension of its indices is known only at run time")
    index = _nonnegative(t, indices, [_dim(t, data, k) for k in range(int(depth))])
    return [
        t.mb.scatter_nd(
            data=t.as_var(data), indices=t.as_var(index), updates=t.as_var(updates), mode=_SCATTER_MODES[reduction]
        )
    ]


# ------------------------------------------------------------------------------------------------ broadcasting


def _expand(t: MilTranslation, node) -> list:
    """ONNX Expand: ``x`` broadcast numpy-style with ``shape`` (the result has the larger rank; a 1 in
    ``shape`` keeps x's dimension). MIL has no broadcast_to: ``select(fill(shape, true), x, fill(shape, 0))``
    picks x everywhere, broadcast, and holds every element type; the zeros give the result its declared shape
    (MIL's select types its result by ``a`` and ``b`` alone: ``select(mask, x, x)`` of a scalar x would be declared
    a scalar, and ops after it, a Concat of such, typed wrongly)."""
    x, shape = t.value(node, 0), t.value(node, 1)
    mask = t.mb.fill(shape=t.as_var(shape), value=True)
    zeros = t.mb.fill(shape=t.as_var(shape), value=np.zeros((), _dtype(x))[()])
    return [t.mb.select(cond=mask, a=t.as_var(x), b=zeros)]


def _tile(t: MilTranslation, node) -> list:
    x, repeats = t.value(node, 0), t.value(node, 1)
    return [t.mb.tile(x=t.as_var(x), reps=t.as_var(repeats))]


def _constant_of_shape(t: MilTranslation, node) -> list:
    """ONNX ConstantOfShape: a tensor of ``shape`` (computed at run time) filled with ``value`` (a one-element
    tensor attribute, float32 0 by default), as MIL's fill."""
    value = t.attr(node, "value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if value.dtype == np.int64 and abs(int(value.reshape(-1)[0])) > _INT32_MAX:
        t.refuse(node, f"its value {int(value.reshape(-1)[0])} does not fit Core ML's int32")
    if value.dtype not in (np.float32, np.float16, np.float64, np.int32, np.int64, np.bool_):
        t.refuse(node, f"a value of type {value.dtype}, which MIL's fill does not hold")
    return [t.mb.fill(shape=t.var(node, 0), value=mil_constant(value.reshape(())))]


def _range(t: MilTranslation, node) -> list:
    """ONNX Range: start + k * delta for k < max(ceil((limit - start) / delta), 0), as MIL's range_1d."""
    start, limit, delta = (_scalar(t, t.var(node, k)) for k in range(3))
    return [t.mb.range_1d(start=start, end=limit, step=delta)]


def _scalar(t: MilTranslation, value):
    """A one-element operand ONNX declares a scalar as a MIL scalar (a model's scalar inputs are [1] in Core ML)."""
    return t.mb.reshape(x=value, shape=np.zeros(0, np.int32)) if t.shape(value) == (1,) else value


def _shape(t: MilTranslation, node) -> list:
    """ONNX Shape of a tensor whose shape is known only at run time: MIL's shape, sliced to [start:end]
    (opset 15's attributes, Python's clamping)."""
    x = t.value(node, 0)
    begin, end, _ = slice(t.attr(node, "start", 0), t.attr(node, "end", None)).indices(t.rank(x))
    if end <= begin:
        t.refuse(node, f"its start/end select no dimension of a rank-{t.rank(x)} tensor (an empty tensor)")
    dims = t.mb.shape(x=t.as_var(x))
    if (begin, end) == (0, t.rank(x)):
        return [dims]
    return [t.mb.slice_by_index(x=dims, begin=[begin], end=[end])]


def _size(t: MilTranslation, node) -> list:
    """ONNX Size (the element count, a scalar): the one dimension of x flattened, ``shape(reshape(x, [-1]))``."""
    flat = t.mb.reshape(x=t.var(node, 0), shape=np.asarray([-1], np.int32))
    return [t.mb.squeeze(x=t.mb.shape(x=flat), axes=[0])]


def _refused(reason: str):
    def emit(t: MilTranslation, node) -> list:
        t.refuse(node, reason)

    return emit


# ------------------------------------------------------------------------------------------------ padding

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


def _pad_operands(t: MilTranslation, node, rank: int) -> tuple[list[int], list[int], object]:
    """Pad's amounts before and after each axis (ints, negative crops) and its constant value: attributes
    ``pads``/``value`` before opset 11; inputs ``pads``, ``constant_value`` from 11 and ``axes`` from 18."""
    if t.opset < 11:
        pads, value = _ints(t.attr(node, "pads")), np.float32(t.attr(node, "value", 0.0))
        axes = list(range(rank))
    else:
        pads = _ints(t.constant(node, 1, "pads"))
        value = t.constant(node, 2, "constant_value").reshape(()) if t.has(node, 2) else np.float32(0)
        axes = [a % rank for a in _ints(t.constant(node, 3, "axes"))] if t.has(node, 3) else list(range(rank))
    if len(pads) != 2 * len(axes):
        t.refuse(node, f"{len(pads)} pads for {len(axes)} axes")
    before, after = [0] * rank, [0] * rank
    for k, axis in enumerate(axes):
        before[axis], after[axis] = pads[k], pads[len(axes) + k]
    return before, after, value


def _pad(t: MilTranslation, node) -> list:
    """ONNX Pad (modes constant, reflect, edge): positive amounts by MIL's pad (edge is its ``replicate``),
    negative ones crop afterwards with slice_by_index. MIL's pad takes [before, after] per axis of the last
    axes; reflect and replicate pad only the last two axes on Core ML, so other axes are moved there and back."""
    x = t.value(node, 0)
    _require(t, node, x, _FLOAT)
    mode = t.attr(node, "mode", "constant")
    if mode not in _PAD_MODES:
        t.refuse(node, f"mode {mode!r}, which MIL's pad does not have")
    rank = t.rank(x)
    before, after, value = _pad_operands(t, node, rank)
    out = t.as_var(x)
    grown = [a for a in range(rank) if before[a] > 0 or after[a] > 0]
    if mode == "constant" and grown:
        amounts = np.asarray([[max(before[a], 0), max(after[a], 0)] for a in range(rank)], np.int32).reshape(-1)
        constant = np.asarray(value).astype(_dtype(x)).reshape(())
        out = t.mb.pad(x=out, pad=amounts, mode="constant", constant_val=constant)
    for k in range(0, len(grown) if mode != "constant" else 0, 2):
        out = _pad_last_two(t, out, grown[k : k + 2], before, after, _PAD_MODES[mode])
    if min(before + after) < 0:
        out = _crop(t, out, before, after)
    return [out]


def _pad_last_two(t: MilTranslation, x, axes: list[int], before: list[int], after: list[int], mode: str):
    """Pad ``axes`` (one or two) of ``x`` by ``mode``, moved to the last axes for MIL's pad and back. MIL's
    replicate pads at most the dimension per side: larger edge pads of a static dimension take several pads."""
    rank = t.rank(x)
    perm = [a for a in range(rank) if a not in axes] + axes
    out = x if perm == list(range(rank)) else t.mb.transpose(x=x, perm=perm)
    left = [[max(before[a], 0), max(after[a], 0)] for a in axes]
    while any(sum(side) for side in left):
        step = [list(side) for side in left]
        if mode == "replicate":
            dims = t.shape(out)[rank - len(axes) :]
            step = [[min(n, int(d)) if _static(d) else n for n in side] for side, d in zip(left, dims)]
        out = t.mb.pad(x=out, pad=np.asarray(step, np.int32).reshape(-1), mode=mode)
        left = [[n - m for n, m in zip(side, taken)] for side, taken in zip(left, step)]
    return out if perm == list(range(rank)) else t.mb.transpose(x=out, perm=[perm.index(a) for a in range(rank)])


def _crop(t: MilTranslation, x, before: list[int], after: list[int]):
    """Negative pads: ``x[-before : dim + after]`` on each axis where they are negative."""
    begin = [max(-b, 0) for b in before]
    end = [a if a < 0 else 0 for a in after]
    return t.mb.slice_by_index(
        x=x,
        begin=np.asarray(begin, np.int32),
        end=np.asarray(end, np.int32),
        end_mask=[a >= 0 for a in after],
    )


# ------------------------------------------------------------------------------------------------ blocks


def _depth_to_space(t: MilTranslation, node) -> list:
    """ONNX DepthToSpace on [N, C, H, W]: mode DCR (depth-column-row, the default) is MIL's depth_to_space,
    CRD (column-row-depth) is MIL's pixel_shuffle."""
    x = t.var(node, 0)
    _require(t, node, x, _FLOAT)
    block = int(t.attr(node, "blocksize"))
    if t.attr(node, "mode", "DCR") == "CRD":
        return [t.mb.pixel_shuffle(x=x, upscale_factor=block)]
    return [t.mb.depth_to_space(x=x, block_size=block)]


def _space_to_depth(t: MilTranslation, node) -> list:
    """ONNX SpaceToDepth on [N, C, H, W] (the inverse of DCR DepthToSpace), as MIL's space_to_depth."""
    x = t.var(node, 0)
    _require(t, node, x, _FLOAT)
    return [t.mb.space_to_depth(x=x, block_size=int(t.attr(node, "blocksize")))]


def _reverse_sequence(t: MilTranslation, node) -> list:
    """ONNX ReverseSequence (opset 10): along ``time_axis``, the first ``sequence_lens[b]`` steps of each batch entry
    reversed (the rest kept), as MIL's reverse_sequence with lengths as int32."""
    x = t.value(node, 0)
    lengths = t.as_var(t.value(node, 1))
    time_axis, batch_axis = int(t.attr(node, "time_axis", 0)), int(t.attr(node, "batch_axis", 1))
    return [t.mb.reverse_sequence(x=t.as_var(x), lengths=lengths, seq_axis=time_axis, batch_axis=batch_axis)]


TABLE: dict[str, OnnxOp] = {
    "ReverseSequence": OnnxOp(_reverse_sequence, frozenset({"time_axis", "batch_axis"}), (10, 10_000)),
    "Transpose": OnnxOp(_transpose, frozenset({"perm"})),
    "Squeeze": OnnxOp(_squeeze, frozenset({"axes"})),
    "Unsqueeze": OnnxOp(_unsqueeze, frozenset({"axes"})),
    "Concat": OnnxOp(_concat, frozenset({"axis"})),
    "Identity": OnnxOp(_identity),
    "Reshape": OnnxOp(_reshape, frozenset({"allowzero"}), opsets=(5, 10_000)),
    "Slice": OnnxOp(_slice, frozenset({"starts", "ends", "axes"})),
    "Split": OnnxOp(_split, frozenset({"axis", "split", "num_outputs"})),
    "Gather": OnnxOp(_take, frozenset({"axis"})),
    "GatherElements": OnnxOp(_gather_elements, frozenset({"axis"})),
    "ScatterND": OnnxOp(_scatter_nd, frozenset({"reduction"})),
    "Expand": OnnxOp(_expand),
    "Tile": OnnxOp(_tile, opsets=(6, 10_000)),
    "Pad": OnnxOp(_pad, frozenset({"mode", "pads", "value"})),
    "ConstantOfShape": OnnxOp(_constant_of_shape, frozenset({"value"})),
    "Range": OnnxOp(_range),
    "Shape": OnnxOp(_shape, frozenset({"start", "end"})),
    "Size": OnnxOp(_size),
    "DepthToSpace": OnnxOp(_depth_to_space, frozenset({"blocksize", "mode"})),
    "SpaceToDepth": OnnxOp(_space_to_depth, frozenset({"blocksize"})),
    "NonZero": OnnxOp(_refused("its output's shape depends on the values (data-dependent), which Core ML cannot hold")),
}

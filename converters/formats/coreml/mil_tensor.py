"""gatepack's MIL interpreter: the tensor ops the ONNX operator table emits (NumPy, MIL's documented semantics).

``OPS`` maps a MIL op type to a function of the op's inputs by name (MIL vars as arrays, parameters as Python
values); ``interpreter`` merges it into its table. Each op here is checked against Apple's own op tests. Every
parameter of an op is honoured (the table's older entries for reshape, squeeze, concat, gather and range_1d
lacked some: these replace them).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gatepack.converters.errors import UsageError


def _reshape(x, shape, **_):
    """MIL reshape: a -1 is inferred; a 0 copies the dimension of x it lines up with counting from the right, or is 1
    where x has none (iOS17's rule, ``shape[i] = x.shape[i - len(shape) + rank]``; iOS15 allows a 0 only when the
    ranks are equal, where both rules agree)."""
    target = [int(v) for v in np.asarray(shape).reshape(-1)]
    offset = x.ndim - len(target)
    target = [(x.shape[offset + k] if offset + k >= 0 else 1) if v == 0 else v for k, v in enumerate(target)]
    return np.reshape(x, target)


def _squeeze(x, axes=None, **_):
    """MIL squeeze: ``axes`` (negative from the end), or every axis of size 1 when absent."""
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, tuple(int(a) for a in np.asarray(axes).reshape(-1)))


def _concat(values, axis, interleave=False, **_):
    """MIL concat; ``interleave`` takes one slice of each input in turn along ``axis`` (equal shapes)."""
    axis = int(axis) % np.ndim(values[0])
    if not interleave:
        return np.concatenate(values, axis)
    stacked = np.stack(values, axis + 1)
    shape = list(np.shape(values[0]))
    shape[axis] *= len(values)
    return stacked.reshape(shape)


def _checked(indices, size, op: str, validate) -> np.ndarray:
    index = np.asarray(indices).astype(np.int64)
    if validate and index.size and (index.min() < 0 or index.max() >= size):
        raise UsageError(f"{op}: an index out of [0, {size}) with validate_indices")
    return index


def _gather(x, indices, axis=0, batch_dims=0, validate_indices=False, **_):
    """MIL gather (tf.gather): out shape D[:axis] + N[batch_dims:] + D[axis+1:], the first ``batch_dims`` axes
    of x and indices paired."""
    axis, batch = int(axis) % x.ndim, int(batch_dims) % max(np.ndim(indices) + 1, 1)
    index = _checked(indices, x.shape[axis], "gather", validate_indices)
    if batch == 0:
        return np.take(x, index, axis)
    parts = [np.take(x[b], index[b], axis - batch) for b in np.ndindex(*x.shape[:batch])]
    shape = x.shape[:axis] + index.shape[batch:] + x.shape[axis + 1 :]
    return np.stack(parts).reshape(shape)


def _gather_along_axis(x, indices, axis=0, validate_indices=False, **_):
    """MIL gather_along_axis: out[p] = x[p with p[axis] replaced by indices[p]], out shaped like indices."""
    axis = int(axis) % x.ndim
    index = _checked(indices, x.shape[axis], "gather_along_axis", validate_indices)
    grid: list[np.ndarray] = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return x[tuple(grid)]


_SCATTER: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "update": lambda old, new: new,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


def _scatter_nd(data, indices, updates, mode="add", validate_indices=False, **_):
    """MIL scatter_nd: out = data; out[indices[i, :]] (mode)= updates[i] over the leading axes of indices in order
    (the last axis of indices, K entries, indexes data's first K axes)."""
    if str(mode) not in _SCATTER:
        raise UsageError(f"scatter_nd mode {mode!r} is not one MIL defines")
    out = np.array(data)
    depth = np.shape(indices)[-1]
    index = np.asarray(indices).astype(np.int64).reshape(-1, depth)
    if validate_indices and ((index < 0).any() or (index >= np.asarray(out.shape[:depth])).any()):
        raise UsageError("scatter_nd: an index out of bounds with validate_indices")
    rows = np.asarray(updates).reshape((len(index), *out.shape[depth:]))
    for where, row in zip(index, rows):
        out[tuple(where)] = _SCATTER[str(mode)](out[tuple(where)], row)
    return out


def _pad(x, pad, mode="constant", constant_val=0.0, **_):
    """MIL pad: ``pad`` = [before, after] for each of x's last len(pad) / 2 axes; modes constant, reflect,
    replicate (numpy's edge)."""
    amounts = np.asarray(pad).astype(np.int64).reshape(-1, 2)
    widths = [(0, 0)] * (x.ndim - len(amounts)) + [tuple(a) for a in amounts]
    if str(mode) == "constant":
        return np.pad(x, widths, "constant", constant_values=np.asarray(constant_val, x.dtype))
    if str(mode) not in ("reflect", "replicate"):
        raise UsageError(f"pad mode {mode!r} is not one MIL defines")
    return np.pad(x, widths, "reflect" if str(mode) == "reflect" else "edge")


def _range_1d(start, end, step, **_):
    """MIL range_1d: numpy.arange(start, end, step) in the operands' type."""
    return np.arange(start, end, step).astype(np.asarray(start).dtype)


def _depth_to_space(x, block_size, **_):
    """MIL depth_to_space on [N, C, H, W] (depth-column-row: C splits as [b, b, C / b^2])."""
    n, c, h, w = x.shape
    b = int(block_size)
    out = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return out.reshape(n, c // (b * b), h * b, w * b)


def _pixel_shuffle(x, upscale_factor, **_):
    """MIL pixel_shuffle on [N, C, H, W] (column-row-depth: C splits as [C / r^2, r, r])."""
    n, c, h, w = x.shape
    r = int(upscale_factor)
    out = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return out.reshape(n, c // (r * r), h * r, w * r)


def _space_to_depth(x, block_size, **_):
    """MIL space_to_depth on [N, C, H, W]: the inverse of depth_to_space."""
    n, c, h, w = x.shape
    b = int(block_size)
    out = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return out.reshape(n, c * b * b, h // b, w // b)


OPS: dict[str, Callable] = {
    "reshape": _reshape,
    "squeeze": _squeeze,
    "concat": _concat,
    "gather": _gather,
    "gather_along_axis": _gather_along_axis,
    "scatter_nd": _scatter_nd,
    "tile": lambda x, reps, **_: np.tile(x, [int(r) for r in np.asarray(reps).reshape(-1)]),
    "pad": _pad,
    "range_1d": _range_1d,
    "depth_to_space": _depth_to_space,
    "pixel_shuffle": _pixel_shuffle,
    "space_to_depth": _space_to_depth,
}

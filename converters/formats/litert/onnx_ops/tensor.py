"""ONNX's tensor operators as LiteRT builtins: every reshaping one (``Reshape``, ``Squeeze``, ``Unsqueeze``,
``Flatten``) one ``RESHAPE`` to ONNX's output shape; ``Transpose`` (folded with an adjacent one, ``translate``);
``Concat`` (``CONCATENATION``); ``Slice`` and ``Split`` (``STRIDED_SLICE``, the bounds clamped as ONNX clamps
them); ``Gather`` of constant indices (``GATHER``, negative indices counted from the end as ONNX counts them);
``Pad`` in constant mode (``PADV2``) and reflect mode (``MIRROR_PAD``); ``ScatterND`` of constant indices
(``SCATTER_ND`` into zeros, ``SELECT_V2`` with the data); ``Where`` (``SELECT_V2``); ``Expand``
(``BROADCAST_TO``); ``Cast`` (``CAST``)."""

from __future__ import annotations

import numpy as np

from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, onnx_shapes
from gatepack.converters.operators.table import OnnxOp


def _reshaped(t: LiteRTTranslation, node) -> list:
    """``RESHAPE`` to the static output shape ONNX gives the node (its shape input or axes decide nothing else)."""
    x = t.var(node, 0)
    ((shape, _),) = onnx_shapes(t, node)
    return [t.emit("RESHAPE", [x, np.array(shape, np.int32)], node.output[0], shape, x.dtype)]


def _transpose(t: LiteRTTranslation, node) -> list:
    x = t.var(node, 0)
    perm = t.attr(node, "perm", list(reversed(range(len(x.shape)))))
    return [t.transpose(x, perm, node.output[0])]


def _concat(t: LiteRTTranslation, node) -> list:
    parts = [t.var(node, k) for k in range(len(node.input)) if t.has(node, k)]
    ((shape, dtype),) = onnx_shapes(t, node)
    axis = int(t.attr(node, "axis")) % len(shape)
    options = {"options_kind": "ConcatenationOptions", "axis": axis}
    return [t.emit("CONCATENATION", parts, node.output[0], shape, dtype, **options)]


def _bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int, bool]:
    """ONNX's clamped [start, end) with ``step`` on an axis of ``dim`` as STRIDED_SLICE's begin, end and whether
    the end is 'through the first element' (a negative step to index 0, which no end index says: the end mask)."""
    picked = range(dim)[slice(start, end, step)]
    if len(picked) == 0:
        raise ValueError("an empty slice")
    last = picked[-1] + (1 if step > 0 else -1)
    return picked[0], last, last < 0


def _slice(t: LiteRTTranslation, node) -> list:
    """``STRIDED_SLICE`` with ONNX's starts/ends/axes/steps (constants) clamped per axis."""
    x = t.var(node, 0)
    starts, ends = (t.constant(node, k, what) for k, what in ((1, "starts"), (2, "ends")))
    rank = len(x.shape)
    axes = t.constant(node, 3, "axes") if t.has(node, 3) else np.arange(len(starts))
    steps = t.constant(node, 4, "steps") if t.has(node, 4) else np.ones(len(starts), np.int64)
    begin, end, strides, end_mask = [0] * rank, list(x.shape), [1] * rank, 0
    for start, stop, axis, step in zip(starts, ends, axes, steps):
        axis = int(axis) % rank
        begin[axis], end[axis], through = _bounds(x.shape[axis], int(start), int(stop), int(step))
        strides[axis] = int(step)
        end_mask |= int(through) << axis
    ((shape, _),) = onnx_shapes(t, node)
    constants = [np.array(v, np.int32) for v in (begin, end, strides)]
    options = {"options_kind": "StridedSliceOptions", "endMask": end_mask}
    return [t.emit("STRIDED_SLICE", [x, *constants], node.output[0], shape, x.dtype, **options)]


def _split(t: LiteRTTranslation, node) -> list:
    """Each output a ``STRIDED_SLICE`` of the input along ``axis``, its sizes ONNX's."""
    x = t.var(node, 0)
    shapes = onnx_shapes(t, node)
    axis = int(t.attr(node, "axis", 0)) % len(x.shape)
    outputs, first = [], 0
    for name, (shape, _) in zip(node.output, shapes):
        begin, end = [0] * len(x.shape), list(x.shape)
        begin[axis], end[axis] = first, first + shape[axis]
        first += shape[axis]
        constants = [np.array(v, np.int32) for v in (begin, end, [1] * len(x.shape))]
        outputs.append(t.emit("STRIDED_SLICE", [x, *constants], name, shape, x.dtype) if name else None)
    return outputs


def _gather(t: LiteRTTranslation, node) -> list:
    """``GATHER`` on ``axis`` with the constant indices made non-negative (ONNX counts negative ones from the end),
    as one axis of indices reshaped to ONNX's output shape."""
    x = t.var(node, 0)
    indices = t.constant(node, 1, "indices")
    axis = int(t.attr(node, "axis", 0)) % len(x.shape)
    flat = np.where(indices < 0, indices + x.shape[axis], indices).reshape(-1).astype(np.int32)
    ((shape, _),) = onnx_shapes(t, node)
    gathered = list(x.shape)
    gathered[axis] = flat.size
    options = {"options_kind": "GatherOptions", "axis": axis}
    out = t.emit("GATHER", [x, flat], f"{node.output[0]}/gathered", gathered, x.dtype, **options)
    return [t.reshape(out, shape, node.output[0]) if tuple(shape) != out.shape else out]


def _pad(t: LiteRTTranslation, node) -> list:
    """Constant mode: ``PADV2`` with the pads per axis (begin, end) and the constant value (0 when absent);
    reflect mode: ``MIRROR_PAD`` (``REFLECT``: the edge element not repeated, as ONNX's reflect)."""
    x = t.var(node, 0)
    mode = t.attr(node, "mode", "constant")
    if mode not in ("constant", "reflect"):
        t.refuse(node, f"mode {mode!r}; LiteRT's builtins pad with a constant or reflect (MIRROR_PAD), never {mode}")
    pads = t.constant(node, 1, "pads") if t.opset >= 11 else np.array(t.attr(node, "pads"))
    rank = len(x.shape)
    if t.has(node, 3):
        t.refuse(node, "its axes input; gatepack's LiteRT translation pads every axis")
    if np.any(pads < 0):
        t.refuse(node, f"negative pads {pads.tolist()} (cropping)")
    paddings = np.stack([pads[:rank], pads[rank:]], axis=1).astype(np.int32)
    ((shape, _),) = onnx_shapes(t, node)
    if mode == "reflect":
        if np.any(paddings.max(axis=1) >= np.array(x.shape)):
            t.refuse(node, f"reflect pads {pads.tolist()} reach past the edges of its input {list(x.shape)}")
        options = {"options_kind": "MirrorPadOptions", "mode": t.g.s.MirrorPadMode.REFLECT}
        return [t.emit("MIRROR_PAD", [x, paddings], node.output[0], shape, x.dtype, **options)]
    value = t.constant(node, 2, "constant value") if t.opset >= 11 and t.has(node, 2) else t.attr(node, "value", 0.0)
    fill = np.array(value, np.float32).reshape(())
    return [t.emit("PADV2", [x, paddings, fill], node.output[0], shape, x.dtype)]


def _scatter_nd(t: LiteRTTranslation, node) -> list:
    """ONNX's ScatterND (``reduction`` none) with constant indices: ``SCATTER_ND`` puts the updates into zeros of
    the data's shape, and ``SELECT_V2`` takes them where a constant mask marks the indexed elements, the data
    elsewhere (out = mask ? scattered : data, exact). Indices naming one element twice are refused (ONNX leaves
    which update wins undefined; LiteRT's kernel adds them)."""
    data = t.var(node, 0)
    indices = t.constant(node, 1, "indices").astype(np.int64)
    updates = t.var(node, 2)
    if t.attr(node, "reduction", "none") != "none":
        t.refuse(node, f"reduction {t.attr(node, 'reduction')!r}; gatepack's LiteRT translation replaces elements")
    depth = indices.shape[-1]
    dims = np.array(data.shape[:depth])
    if np.any(indices < -dims) or np.any(indices >= dims):
        t.refuse(node, f"indices outside its data's shape {list(data.shape)}")
    normal = (indices % dims).astype(np.int32)
    hits = np.zeros(data.shape[:depth], np.int64)
    np.add.at(hits, tuple(normal.reshape(-1, depth).T), 1)
    if hits.max(initial=0) > 1:
        t.refuse(node, "its indices name an element twice, whose result ONNX leaves undefined")
    mask = np.broadcast_to((hits > 0).reshape(hits.shape + (1,) * (len(data.shape) - depth)), data.shape)
    shape = np.array(data.shape, np.int32)
    scattered = t.emit("SCATTER_ND", [normal, updates, shape], f"{node.output[0]}/scattered", data.shape, data.dtype)
    return [t.emit("SELECT_V2", [np.ascontiguousarray(mask), scattered, data], node.output[0], data.shape, data.dtype)]


def _expand(t: LiteRTTranslation, node) -> list:
    """``BROADCAST_TO`` ONNX's output shape (the input first reshaped to its rank: ONNX aligns the last axes)."""
    x = t.var(node, 0)
    ((shape, _),) = onnx_shapes(t, node)
    ranked = t.reshape(x, (1,) * (len(shape) - len(x.shape)) + x.shape, f"{node.output[0]}/ranked")
    if tuple(shape) == ranked.shape:
        return [ranked]
    return [t.emit("BROADCAST_TO", [ranked, np.array(shape, np.int32)], node.output[0], shape, x.dtype)]


# ONNX element types a Cast writes -> LiteRT's, as the graph holds them (int64 as INT32)
_CAST_TO = {1: "FLOAT32", 6: "INT32", 7: "INT32", 9: "BOOL"}


def _cast(t: LiteRTTranslation, node) -> list:
    """``CAST`` to float32, int32 or bool; to int64 (held as INT32) from integers and bools only: a float beyond
    int32's range would wrap where ONNX's int64 holds it."""
    x = t.var(node, 0)
    to = int(t.attr(node, "to"))
    if to not in _CAST_TO:
        t.refuse(node, f"a cast to ONNX element type {to}; gatepack's LiteRT tensors hold float32, int32 and bool")
    if to == 7 and x.dtype == "FLOAT32":
        t.refuse(node, "a float-to-int64 cast; LiteRT holds int64 as int32 here, where large values would wrap")
    if _CAST_TO[to] == x.dtype:
        return [x]
    return [t.emit("CAST", [x], node.output[0], x.shape, _CAST_TO[to])]


def _where(t: LiteRTTranslation, node) -> list:
    """``SELECT_V2(condition, x, y)``, broadcast as ONNX broadcasts (each operand reshaped to the output's rank)."""
    ((shape, dtype),) = onnx_shapes(t, node)
    condition, x, y = (t.var(node, k) for k in range(3))
    if condition.dtype != "BOOL" or x.dtype != y.dtype:
        t.refuse(
            node,
            f"its operands are {condition.dtype}, {x.dtype}, {y.dtype}; SELECT_V2 takes a BOOL and two of one type",
        )
    ranked = [
        t.reshape(v, (1,) * (len(shape) - len(v.shape)) + v.shape, f"{node.output[0]}/in{k}")
        for k, v in enumerate((condition, x, y))
    ]
    return [t.emit("SELECT_V2", ranked, node.output[0], shape, dtype)]


_RESHAPED = OnnxOp(_reshaped, attributes=frozenset({"axes", "axis", "allowzero"}))

TABLE: dict[str, OnnxOp] = {
    "Reshape": _RESHAPED,
    "Squeeze": _RESHAPED,
    "Unsqueeze": _RESHAPED,
    "Flatten": _RESHAPED,
    "Transpose": OnnxOp(_transpose, attributes=frozenset({"perm"})),
    "Concat": OnnxOp(_concat, attributes=frozenset({"axis"})),
    "Slice": OnnxOp(_slice, opsets=(10, 10_000)),
    "Split": OnnxOp(_split, attributes=frozenset({"axis", "split", "num_outputs"})),
    "Gather": OnnxOp(_gather, attributes=frozenset({"axis"})),
    "Pad": OnnxOp(_pad, attributes=frozenset({"mode", "pads", "value"})),
    "ScatterND": OnnxOp(_scatter_nd, attributes=frozenset({"reduction"}), opsets=(11, 10_000)),
    "Where": OnnxOp(_where, opsets=(9, 10_000)),
    "Expand": OnnxOp(_expand, opsets=(8, 10_000)),
    "Cast": OnnxOp(_cast, attributes=frozenset({"to"}), opsets=(6, 10_000)),
}

__all__ = ["TABLE", "Tensor"]

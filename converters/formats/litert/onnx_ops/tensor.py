"""ONNX's tensor operators as LiteRT builtins: every reshaping one (``Reshape``, ``Squeeze``, ``Unsqueeze``,
``Flatten``) one ``RESHAPE`` to ONNX's output shape; ``Transpose`` (folded with an adjacent one, ``translate``);
``Concat`` (``CONCATENATION``); ``Slice`` and ``Split`` (``STRIDED_SLICE``, the bounds clamped as ONNX clamps
them); ``Gather`` of constant indices (``GATHER``, negative indices counted from the end as ONNX counts them);
``Pad`` in constant mode (``PADV2``)."""

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
    """Constant mode: ``PADV2`` with the pads per axis (begin, end) and the constant value (0 when absent)."""
    x = t.var(node, 0)
    if t.attr(node, "mode", "constant") != "constant":
        t.refuse(node, f"mode {t.attr(node, 'mode')!r}; gatepack's LiteRT translation pads with a constant only")
    pads = t.constant(node, 1, "pads") if t.opset >= 11 else np.array(t.attr(node, "pads"))
    rank = len(x.shape)
    if t.has(node, 3):
        t.refuse(node, "its axes input; gatepack's LiteRT translation pads every axis")
    if np.any(pads < 0):
        t.refuse(node, f"negative pads {pads.tolist()} (cropping)")
    value = t.constant(node, 2, "constant value") if t.opset >= 11 and t.has(node, 2) else t.attr(node, "value", 0.0)
    paddings = np.stack([pads[:rank], pads[rank:]], axis=1).astype(np.int32)
    ((shape, _),) = onnx_shapes(t, node)
    fill = np.array(value, np.float32).reshape(())
    return [t.emit("PADV2", [x, paddings, fill], node.output[0], shape, x.dtype)]


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
}

__all__ = ["TABLE", "Tensor"]

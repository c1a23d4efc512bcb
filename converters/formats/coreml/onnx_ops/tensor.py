"""ONNX tensor operators (shapes, reshaping, indexing, joining, padding) as MIL ops."""

from __future__ import annotations

import numpy as np

from gatepack.converters.formats.coreml.translate import OnnxOp, Translation


def _axes(t: Translation, node, rank: int) -> list[int]:
    """Squeeze/Unsqueeze axes: the ``axes`` attribute before opset 13, the second input from 13; negative
    axes counted from the end of ``rank``."""
    if t.opset >= 13:
        axes = t.constant(node, 1, "axes") if t.has(node, 1) else None
    else:
        axes = t.attr(node, "axes")
    return None if axes is None else [int(a) % rank for a in np.asarray(axes).reshape(-1)]


def _transpose(t: Translation, node) -> list:
    x = t.value(node, 0)
    perm = t.attr(node, "perm", list(range(t.rank(x)))[::-1])
    return [t.mb.transpose(x=t.as_var(x), perm=[int(p) for p in perm])]


def _squeeze(t: Translation, node) -> list:
    x = t.value(node, 0)
    axes = _axes(t, node, t.rank(x))
    if axes is None:
        shape = t.shape(x)
        if any(not isinstance(d, int) for d in shape):
            t.refuse(node, "no axes and a symbolic input shape: which axes are 1 is known only at run time")
        axes = [k for k, d in enumerate(shape) if d == 1]
    return [t.mb.squeeze(x=t.as_var(x), axes=axes) if axes else t.as_var(x)]


def _unsqueeze(t: Translation, node) -> list:
    x = t.value(node, 0)
    count = len(np.asarray(t.constant(node, 1, "axes") if t.opset >= 13 else t.attr(node, "axes")).reshape(-1))
    axes = sorted(_axes(t, node, t.rank(x) + count))
    return [t.mb.expand_dims(x=t.as_var(x), axes=axes)]


def _concat(t: Translation, node) -> list:
    values = [t.var(node, k) for k in range(len(node.input))]
    return [t.mb.concat(values=values, axis=int(t.attr(node, "axis")))]


def _identity(t: Translation, node) -> list:
    return [t.value(node, 0)]


TABLE: dict[str, OnnxOp] = {
    "Transpose": OnnxOp(_transpose, frozenset({"perm"})),
    "Squeeze": OnnxOp(_squeeze, frozenset({"axes"})),
    "Unsqueeze": OnnxOp(_unsqueeze, frozenset({"axes"})),
    "Concat": OnnxOp(_concat, frozenset({"axis"})),
    "Identity": OnnxOp(_identity),
}

"""ONNX's neural-network operators as LiteRT builtins.

* ``MatMul``: a constant 2-D right operand is ``FULLY_CONNECTED`` (weights B^T [out, in], ``keep_num_dims``:
  y[..., o] = sum_i a[..., i] B[i, o]); any other, ``BATCH_MATMUL`` (broadcast batch axes).
* ``ReduceMean`` / ``ReduceSum``: ``MEAN`` / ``SUM`` over the axes (constants), keeping them or not as ONNX says.
* ``Einsum`` of two operands without repeated letters in a term: one ``BATCH_MATMUL`` between transposes and
  reshapes (``operators.einsum``), a letter of one operand only summed first (``SUM``).
* ``Softmax`` on the last axis: ``SOFTMAX`` (beta 1).
* ``BatchNormalization`` (inference): y = x * s + (B - mean * s) with s = scale / sqrt(var + epsilon), folded into
  one ``MUL`` and one ``ADD`` on the channel axis (rounded once more than ONNX's sequence: folded, not exact).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gatepack.converters.formats.litert.onnx_ops.elementwise import floats
from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, onnx_shapes
from gatepack.converters.operators.einsum import einsum_groups, einsum_terms
from gatepack.converters.operators.table import OnnxOp


def _matmul(t: LiteRTTranslation, node) -> list:
    a = floats(t, node, 0)
    b = t.value(node, 1)
    ((shape, _),) = onnx_shapes(t, node)
    if len(a.shape) < 2:
        t.refuse(node, f"its A {node.input[0]!r} has rank {len(a.shape)}; LiteRT's products take rank >= 2")
    if isinstance(b, np.ndarray) and b.ndim == 2:
        weights = np.ascontiguousarray(b.T.astype(np.float32))
        options: dict[str, Any] = {"options_kind": "FullyConnectedOptions", "keepNumDims": True}
        return [t.emit("FULLY_CONNECTED", [a, weights, -1], node.output[0], shape, **options)]
    b = floats(t, node, 1)
    if len(b.shape) < 2:
        t.refuse(node, f"its B {node.input[1]!r} has rank {len(b.shape)}; LiteRT's products take rank >= 2")
    return [t.emit("BATCH_MATMUL", [a, b], node.output[0], shape)]


def _reducer(kind: str, first: int = 1) -> OnnxOp:
    """``kind`` (``MEAN``, ``SUM``) over the axes (constants: an input where the opset has it, else the attribute;
    none: every axis, or the input as it is with ``noop_with_empty_axes``), keeping them or not as ONNX says."""

    def emit(t: LiteRTTranslation, node) -> list:
        x = floats(t, node, 0)
        axes = t.constant(node, 1, "axes") if t.has(node, 1) else np.array(t.attr(node, "axes", []), np.int64)
        if axes.size == 0 and int(t.attr(node, "noop_with_empty_axes", 0)):
            return [x]
        axes = np.arange(len(x.shape)) if axes.size == 0 else axes
        ((shape, _),) = onnx_shapes(t, node)
        normalised = np.array(sorted(int(a) % len(x.shape) for a in axes.reshape(-1)), np.int32)
        options: dict[str, Any] = {"options_kind": "ReducerOptions", "keepDims": bool(t.attr(node, "keepdims", 1))}
        return [t.emit(kind, [x, normalised], node.output[0], shape, **options)]

    return OnnxOp(emit, attributes=frozenset({"axes", "keepdims", "noop_with_empty_axes"}), opsets=(first, 10_000))


def _softmax(t: LiteRTTranslation, node) -> list:
    x = floats(t, node, 0)
    axis = int(t.attr(node, "axis", -1 if t.opset >= 13 else 1)) % len(x.shape)
    if axis != len(x.shape) - 1:
        t.refuse(node, f"axis {axis} of rank {len(x.shape)}; LiteRT's SOFTMAX normalises the last axis")
    return [t.emit("SOFTMAX", [x], node.output[0], x.shape, options_kind="SoftmaxOptions", beta=1.0)]


def _batch_norm(t: LiteRTTranslation, node) -> list:
    x = floats(t, node, 0)
    scale, bias, mean, var = (t.constant(node, k, what) for k, what in enumerate(("scale", "B", "mean", "var"), 1))
    if len(node.output) > 1 and any(node.output[1:]) or int(t.attr(node, "training_mode", 0)):
        t.refuse(node, "training mode (running statistics as outputs)")
    epsilon = float(t.attr(node, "epsilon", 1e-5))
    factor = (scale / np.sqrt(var.astype(np.float64) + epsilon)).astype(np.float32)
    shift = (bias - mean * factor).astype(np.float32)
    along = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    scaled = t.emit("MUL", [x, factor.reshape(along)], f"{node.output[0]}/scaled", x.shape)
    return [t.emit("ADD", [scaled, shift.reshape(along)], node.output[0], x.shape)]


def _einsum_operand(t: LiteRTTranslation, node, k: int, term: str, keep: str, groups: list[str], name: str) -> Tensor:
    """Operand ``k`` (letters ``term``) summed over the letters not in ``keep`` (``SUM``), transposed to the
    groups' order and reshaped to one axis per group; a constant operand without such letters is rearranged
    before it is written (a transpose and a reshape move, never round, its values)."""
    value = t.value(node, k)
    summed = [axis for axis, c in enumerate(term) if c not in keep]
    sizes = dict(zip(term, t.shape(value)))
    merged = [int(np.prod([sizes[c] for c in group], dtype=np.int64)) for group in groups]
    perm = [term.index(c) for c in "".join(groups)]
    if isinstance(value, np.ndarray) and not summed:
        return t.as_var(np.ascontiguousarray(value.astype(np.float32).transpose(perm).reshape(merged)))
    x = floats(t, node, k)
    if summed:
        kept = tuple(d for axis, d in enumerate(x.shape) if axis not in summed)
        options: dict[str, Any] = {"options_kind": "ReducerOptions", "keepDims": False}
        x = t.emit("SUM", [x, np.array(summed, np.int32)], f"{name}/sum", kept, **options)
        term = "".join(c for c in term if c in keep)
        perm = [term.index(c) for c in "".join(groups)]
    return t.reshape(t.transpose(x, perm, f"{name}/transposed"), merged, f"{name}/grouped")


def _einsum(t: LiteRTTranslation, node) -> list:
    """Two operands without repeated letters (``operators.einsum``): each as [batch, free, contracted] /
    [batch, contracted, free] (the batch letters merged into one axis, as the free and contracted ones), one
    ``BATCH_MATMUL``, the product reshaped to its letters and transposed to the output's order."""
    if len(node.input) != 2:
        t.refuse(node, f"{len(node.input)} operands; gatepack's LiteRT translation writes two-operand products")
    (a, b), out = einsum_terms(t, node, 2)
    groups = einsum_groups(a, b, out)
    name = node.output[0]
    keep = out + groups.contracted
    x = _einsum_operand(t, node, 0, a, keep, [groups.batch, groups.free_a, groups.contracted], f"{name}/a")
    y = _einsum_operand(t, node, 1, b, keep, [groups.batch, groups.contracted, groups.free_b], f"{name}/b")
    product = t.emit("BATCH_MATMUL", [x, y], f"{name}/product", (x.shape[0], x.shape[1], y.shape[2]))
    ((shape, _),) = onnx_shapes(t, node)
    produced = groups.batch + groups.free_a + groups.free_b
    sizes = dict(zip(out, shape))
    unfolded = t.reshape(product, [sizes[c] for c in produced], f"{name}/unfolded")
    return [t.transpose(unfolded, [produced.index(c) for c in out], name)]


TABLE: dict[str, OnnxOp] = {
    "MatMul": OnnxOp(_matmul),
    "ReduceMean": _reducer("MEAN"),
    "ReduceSum": _reducer("SUM"),
    "Einsum": OnnxOp(_einsum, attributes=frozenset({"equation"}), opsets=(12, 10_000)),
    "Softmax": OnnxOp(_softmax, attributes=frozenset({"axis"})),
    "BatchNormalization": OnnxOp(
        _batch_norm, attributes=frozenset({"epsilon", "momentum", "training_mode"}), opsets=(9, 10_000)
    ),
}

__all__ = ["TABLE", "Tensor"]

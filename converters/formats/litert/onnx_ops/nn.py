"""ONNX's neural-network operators as LiteRT builtins.

* ``MatMul``: a constant 2-D right operand is ``FULLY_CONNECTED`` (weights B^T [out, in], ``keep_num_dims``:
  y[..., o] = sum_i a[..., i] B[i, o]); any other, ``BATCH_MATMUL`` (broadcast batch axes).
* ``Conv`` (2-D, and 1-D as 2-D with a unit height): channels-last between two ``TRANSPOSE``s; ONNX's explicit
  pads a ``PAD`` of zeros before a ``VALID`` convolution (the output size is then ONNX's,
  floor((in + pads - dilation (k - 1) - 1) / stride) + 1); ``group`` 1 ``CONV_2D`` (filter [O, kh, kw, I]), one
  group per input channel ``DEPTHWISE_CONV_2D`` (filter [1, kh, kw, O], depth multiplier O / I).
* ``ReduceMean``: ``MEAN`` over the axes (constants), keeping them or not as ONNX says.
* ``Softmax`` on the last axis: ``SOFTMAX`` (beta 1).
* ``BatchNormalization`` (inference): y = x * s + (B - mean * s) with s = scale / sqrt(var + epsilon), folded into
  one ``MUL`` and one ``ADD`` on the channel axis (rounded once more than ONNX's sequence: folded, not exact).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gatepack.converters.formats.litert.onnx_ops.elementwise import floats
from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, onnx_shapes
from gatepack.converters.operators.table import OnnxOp

NCHW_TO_NHWC, NHWC_TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


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


def _conv_filter(t: LiteRTTranslation, node, w: np.ndarray, channels: int) -> tuple[str, np.ndarray, dict]:
    """The LiteRT op, its filter and its options for ONNX weights ``w`` [O, I / group, kh, kw]."""
    group = int(t.attr(node, "group", 1))
    if group == 1:
        return "CONV_2D", w.transpose(0, 2, 3, 1), {"options_kind": "Conv2DOptions"}
    if group == channels and w.shape[1] == 1:
        options = {"options_kind": "DepthwiseConv2DOptions", "depthMultiplier": w.shape[0] // channels}
        return "DEPTHWISE_CONV_2D", w.transpose(1, 2, 3, 0), options
    t.refuse(node, f"group {group} of {channels} input channels; LiteRT's builtins here take 1 or one per channel")


def _conv(t: LiteRTTranslation, node) -> list:
    """Conv as the module docstring says: NCHW -> NHWC, PAD, CONV_2D / DEPTHWISE_CONV_2D (VALID), NHWC -> NCHW."""
    x = floats(t, node, 0)
    w = t.constant(node, 1, "weights").astype(np.float32)
    ((shape, _),) = onnx_shapes(t, node)
    if len(x.shape) not in (3, 4):
        t.refuse(node, f"a {len(x.shape) - 2}-D convolution; gatepack's LiteRT translation writes 1-D and 2-D")
    one_d = len(x.shape) == 3
    name = node.output[0]
    if one_d:  # [N, C, L] as [N, C, 1, L]
        x, w = t.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]), f"{name}/as_2d"), w[:, :, None, :]
    strides = list(t.attr(node, "strides", [1] * (len(x.shape) - 2)))
    dilations = list(t.attr(node, "dilations", [1] * (len(x.shape) - 2)))
    pads = list(t.attr(node, "pads", [0] * 2 * (len(x.shape) - 2)))
    if one_d:
        strides, dilations, pads = [1, *strides], [1, *dilations], [0, pads[0], 0, pads[1]]
    kind, filter_, options = _conv_filter(t, node, w, x.shape[1])
    nhwc = t.transpose(x, NCHW_TO_NHWC, f"{name}/nhwc")
    if any(pads):
        paddings = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
        padded = [nhwc.shape[0], nhwc.shape[1] + pads[0] + pads[2], nhwc.shape[2] + pads[1] + pads[3], nhwc.shape[3]]
        nhwc = t.emit("PAD", [nhwc, paddings], f"{name}/padded", padded)
    bias = t.constant(node, 2, "bias").astype(np.float32) if t.has(node, 2) else np.zeros(w.shape[0], np.float32)
    out_nhwc = (shape[0], *shape[2:], shape[1]) if not one_d else (shape[0], 1, shape[2], shape[1])
    options.update(
        padding=t.g.s.Padding.VALID,
        strideH=int(strides[0]),
        strideW=int(strides[1]),
        dilationHFactor=int(dilations[0]),
        dilationWFactor=int(dilations[1]),
    )
    y = t.emit(kind, [nhwc, np.ascontiguousarray(filter_), bias], f"{name}/conv_nhwc", out_nhwc, **options)
    back = t.transpose(y, NHWC_TO_NCHW, name if not one_d else f"{name}/nchw")
    return [t.reshape(back, shape, name) if one_d else back]


def _reduce_mean(t: LiteRTTranslation, node) -> list:
    x = floats(t, node, 0)
    if t.opset >= 18 and t.has(node, 1):
        axes = t.constant(node, 1, "axes")
    else:
        axes = np.array(t.attr(node, "axes", list(range(len(x.shape)))))
    if axes.size == 0 and int(t.attr(node, "noop_with_empty_axes", 0)):
        return [x]
    axes = np.arange(len(x.shape)) if axes.size == 0 else axes
    ((shape, _),) = onnx_shapes(t, node)
    keep = bool(t.attr(node, "keepdims", 1))
    normalised = np.array(sorted(int(a) % len(x.shape) for a in axes), np.int32)
    options: dict[str, Any] = {"options_kind": "ReducerOptions", "keepDims": keep}
    return [t.emit("MEAN", [x, normalised], node.output[0], shape, **options)]


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


TABLE: dict[str, OnnxOp] = {
    "MatMul": OnnxOp(_matmul),
    "Conv": OnnxOp(_conv, attributes=frozenset({"dilations", "group", "kernel_shape", "pads", "strides"})),
    "ReduceMean": OnnxOp(_reduce_mean, attributes=frozenset({"axes", "keepdims", "noop_with_empty_axes"})),
    "Softmax": OnnxOp(_softmax, attributes=frozenset({"axis"})),
    "BatchNormalization": OnnxOp(
        _batch_norm, attributes=frozenset({"epsilon", "momentum", "training_mode"}), opsets=(9, 10_000)
    ),
}

__all__ = ["TABLE", "Tensor"]

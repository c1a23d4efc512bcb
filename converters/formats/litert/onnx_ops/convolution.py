"""ONNX's convolutions as LiteRT builtins, channels-last (LiteRT's kernels take NHWC) between two ``TRANSPOSE``s
(folded with adjacent ones, ``translate``); 1-D as 2-D with a unit height.

* ``Conv``: ONNX's explicit pads a ``PAD`` of zeros before a ``VALID`` convolution (the output size is then ONNX's,
  floor((in + pads - dilation (k - 1) - 1) / stride) + 1). ``group`` 1: ``CONV_2D`` (filter [O, kh, kw, I]); one
  input channel per group: ``DEPTHWISE_CONV_2D`` (filter [1, kh, kw, O], depth multiplier O / I); any other group
  count g: the channels cut into g ``STRIDED_SLICE``s, one ``CONV_2D`` per group (its own O / g filters), joined by
  ``CONCATENATION`` (LiteRT's optimised ``CONV_2D`` kernels take the filter's depth equal to the input's).
* ``ConvTranspose`` with ``group`` 1 and unit dilations: ``TRANSPOSE_CONV`` (filter [O, kh, kw, I], ``VALID``)
  to the full size (in - 1) stride + k + output_padding, then ONNX's pads cut off (``STRIDED_SLICE``):
  y[o] = full[o + pad_begin]. Any other (groups, dilations): the same sum as a convolution,
  full[t] = sum_i sum_k x[i] w[k] over t = i stride + k dilation, which is a ``Conv`` (grouped as above) of the
  input with stride - 1 zeros between its elements, padded by dilation (k - 1) - pad (begin) and
  dilation (k - 1) - pad + output_padding (end), with each group's filter flipped in space and its in/out axes
  swapped: y[t] = sum_j stuffed[t + pad_begin - j dilation] w[j].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gatepack.converters.formats.litert.onnx_ops.elementwise import floats
from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, onnx_shapes
from gatepack.converters.operators.table import OnnxOp

NCHW_TO_NHWC, NHWC_TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
_CONV_ATTRIBUTES = frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})


def _geometry(t: LiteRTTranslation, node, x: Tensor, kernel: tuple) -> tuple[list[int], list[int], list[int]]:
    """Strides, dilations and pads (begin H, begin W, end H, end W) as 2-D ones (a 1-D node's with a unit height).
    ``auto_pad`` SAME_UPPER / SAME_LOWER: the pads giving ceil(in / stride) outputs, total
    max((ceil(in / stride) - 1) stride + dilation (k - 1) + 1 - in, 0), the odd one at the end (UPPER) or the
    beginning (LOWER); VALID: none (a ConvTranspose takes NOTSET only: explicit pads)."""
    rank = len(x.shape)
    if rank not in (3, 4):
        t.refuse(node, f"a {rank - 2}-D convolution; gatepack's LiteRT translation writes 1-D and 2-D")
    spatial = rank - 2
    strides = [int(s) for s in t.attr(node, "strides", [1] * spatial)]
    dilations = [int(d) for d in t.attr(node, "dilations", [1] * spatial)]
    pads = [int(p) for p in t.attr(node, "pads", [0] * 2 * spatial)]
    auto_pad = t.attr(node, "auto_pad", "NOTSET")
    if auto_pad != "NOTSET" and node.op_type != "Conv":
        t.refuse(node, f"auto_pad {auto_pad}; gatepack's LiteRT translation of {node.op_type} takes explicit pads")
    if auto_pad == "VALID":
        pads = [0] * 2 * spatial
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = x.shape[2:]
        total = [
            max((-(-n // s) - 1) * s + d * (k - 1) + 1 - n, 0) for n, s, d, k in zip(sizes, strides, dilations, kernel)
        ]
        small = [p // 2 if auto_pad == "SAME_UPPER" else p - p // 2 for p in total]
        pads = small + [p - b for p, b in zip(total, small)]
    elif auto_pad != "NOTSET":
        t.refuse(node, f"auto_pad {auto_pad!r}, which ONNX does not define")
    if rank == 3:
        return [1, *strides], [1, *dilations], [0, pads[0], 0, pads[1]]
    return strides, dilations, pads


def _as_nhwc(t: LiteRTTranslation, x: Tensor, name: str) -> Tensor:
    """[N, C, H, W] (or [N, C, L] as [N, C, 1, L]) channels-last."""
    if len(x.shape) == 3:
        x = t.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]), f"{name}/as_2d")
    return t.transpose(x, NCHW_TO_NHWC, f"{name}/nhwc")


def _as_onnx(t: LiteRTTranslation, y: Tensor, shape: tuple, name: str) -> Tensor:
    """An NHWC result back to ONNX's [N, C, H, W] (or [N, C, L]) of ``shape``, named ``name``."""
    back = t.transpose(y, NHWC_TO_NCHW, name if len(shape) == 4 else f"{name}/nchw")
    return t.reshape(back, shape, name) if len(shape) == 3 else back


def _pad_nhwc(t: LiteRTTranslation, x: Tensor, pads: list[int], name: str) -> Tensor:
    """``PAD`` of zeros on H and W: pads (begin H, begin W, end H, end W), all >= 0."""
    if not any(pads):
        return x
    paddings = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
    padded = [x.shape[0], x.shape[1] + pads[0] + pads[2], x.shape[2] + pads[1] + pads[3], x.shape[3]]
    return t.emit("PAD", [x, paddings], f"{name}/padded", padded)


def _channel_slice(t: LiteRTTranslation, x: Tensor, first: int, count: int, name: str) -> Tensor:
    """Channels [first, first + count) of an NHWC tensor (``STRIDED_SLICE``)."""
    begin, end = [0, 0, 0, first], [*x.shape[:3], first + count]
    constants = [np.array(v, np.int32) for v in (begin, end, [1, 1, 1, 1])]
    return t.emit("STRIDED_SLICE", [x, *constants], name, (*x.shape[:3], count), x.dtype)


def conv_nhwc(
    t: LiteRTTranslation, node, x: Tensor, w: np.ndarray, bias: np.ndarray, group: int, strides, dilations, name: str
) -> Tensor:
    """A VALID convolution of the padded NHWC ``x`` with ONNX weights ``w`` [O, I / group, kh, kw] and ``bias``
    [O]: ``CONV_2D``, ``DEPTHWISE_CONV_2D`` or one ``CONV_2D`` per group joined (module docstring)."""
    channels, out_channels = x.shape[3], w.shape[0]
    if group < 1 or channels % group or out_channels % group or w.shape[1] * group != channels:
        t.refuse(node, f"group {group} does not divide its {channels} input and {out_channels} output channels")
    k_h, k_w = w.shape[2], w.shape[3]
    out_h = (x.shape[1] - dilations[0] * (k_h - 1) - 1) // strides[0] + 1
    out_w = (x.shape[2] - dilations[1] * (k_w - 1) - 1) // strides[1] + 1
    if out_h < 1 or out_w < 1:
        t.refuse(node, f"its kernel {k_h}x{k_w} with dilations {dilations} is larger than its padded input")
    fields: dict[str, Any] = {
        "padding": t.g.s.Padding.VALID,
        "strideH": strides[0],
        "strideW": strides[1],
        "dilationHFactor": dilations[0],
        "dilationWFactor": dilations[1],
    }
    out = (x.shape[0], out_h, out_w, out_channels)
    if group == channels and w.shape[1] == 1 and group > 1:
        filter_ = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
        options = {"options_kind": "DepthwiseConv2DOptions", "depthMultiplier": out_channels // channels, **fields}
        return t.emit("DEPTHWISE_CONV_2D", [x, filter_, bias], f"{name}/conv_nhwc", out, **options)
    if group == 1:
        filter_ = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
        return t.emit("CONV_2D", [x, filter_, bias], f"{name}/conv_nhwc", out, options_kind="Conv2DOptions", **fields)
    per_in, per_out = channels // group, out_channels // group
    parts = []
    for k in range(group):
        part = _channel_slice(t, x, k * per_in, per_in, f"{name}/group{k}/in")
        filter_ = np.ascontiguousarray(w[k * per_out : (k + 1) * per_out].transpose(0, 2, 3, 1))
        inputs = [part, filter_, bias[k * per_out : (k + 1) * per_out]]
        part_out = (*out[:3], per_out)
        parts.append(t.emit("CONV_2D", inputs, f"{name}/group{k}", part_out, options_kind="Conv2DOptions", **fields))
    options = {"options_kind": "ConcatenationOptions", "axis": 3}
    return t.emit("CONCATENATION", parts, f"{name}/conv_nhwc", out, **options)


def _weights(t: LiteRTTranslation, node, rank: int, out_channels_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The node's constant weights (as 2-D ones for a 1-D node) and its bias (zeros when absent)."""
    w = t.constant(node, 1, "weights").astype(np.float32)
    if rank == 3:
        w = w[:, :, None, :]
    out_channels = w.shape[out_channels_axis] * (int(t.attr(node, "group", 1)) if out_channels_axis == 1 else 1)
    bias = t.constant(node, 2, "bias").astype(np.float32) if t.has(node, 2) else np.zeros(out_channels, np.float32)
    return w, bias


def _conv(t: LiteRTTranslation, node) -> list:
    """Conv as the module docstring says: NCHW -> NHWC, PAD, the convolution (VALID), NHWC -> NCHW."""
    x = floats(t, node, 0)
    rank = len(x.shape)
    kernel = t.constant(node, 1, "weights").shape[2:]
    strides, dilations, pads = _geometry(t, node, x, kernel)
    w, bias = _weights(t, node, rank, 0)
    ((shape, _),) = onnx_shapes(t, node)
    name = node.output[0]
    padded = _pad_nhwc(t, _as_nhwc(t, x, name), pads, name)
    y = conv_nhwc(t, node, padded, w, bias, int(t.attr(node, "group", 1)), strides, dilations, name)
    return [_as_onnx(t, y, shape, name)]


def _stuffed(t: LiteRTTranslation, x: Tensor, strides: list[int], name: str) -> Tensor:
    """NHWC ``x`` with stride - 1 zeros between its elements along H and W: each axis as [.., n, 1, ..] joined with
    zeros [.., n, stride - 1, ..] (``CONCATENATION``), merged (``RESHAPE``) and cut to (n - 1) stride + 1."""
    for axis, stride in ((1, strides[0]), (2, strides[1])):
        if stride == 1:
            continue
        shape = list(x.shape)
        opened = t.reshape(x, [*shape[: axis + 1], 1, *shape[axis + 1 :]], f"{name}/open{axis}")
        zeros = np.zeros([*shape[: axis + 1], stride - 1, *shape[axis + 1 :]], np.float32)
        joined_shape = [*shape[: axis + 1], stride, *shape[axis + 1 :]]
        joined = t.emit(
            "CONCATENATION",
            [opened, zeros],
            f"{name}/stuff{axis}",
            joined_shape,
            options_kind="ConcatenationOptions",
            axis=axis + 1,
        )
        merged = list(shape)
        merged[axis] = shape[axis] * stride
        flat = t.reshape(joined, merged, f"{name}/merged{axis}")
        kept = list(merged)
        kept[axis] = (shape[axis] - 1) * stride + 1
        constants = [np.array(v, np.int32) for v in ([0, 0, 0, 0], kept, [1, 1, 1, 1])]
        x = t.emit("STRIDED_SLICE", [flat, *constants], f"{name}/stuffed{axis}", kept)
    return x


def _flipped(w: np.ndarray, group: int) -> np.ndarray:
    """ConvTranspose weights [I, O / group, kh, kw] as a convolution's [O, I / group, kh, kw]: per group, in and out
    axes swapped and the kernel flipped in space."""
    per_in = w.shape[0] // group
    groups = [w[k * per_in : (k + 1) * per_in].transpose(1, 0, 2, 3) for k in range(group)]
    return np.ascontiguousarray(np.concatenate(groups, axis=0)[:, :, ::-1, ::-1])


def _output_padding(t: LiteRTTranslation, node, rank: int) -> list[int]:
    """ConvTranspose's output_padding (H, W) as a 2-D node's (a 1-D node's with a unit height)."""
    given = [int(p) for p in t.attr(node, "output_padding", [0] * (rank - 2))]
    return [0, *given] if rank == 3 else given


def _transpose_conv(
    t: LiteRTTranslation, node, x: Tensor, w: np.ndarray, bias: np.ndarray, strides, output_padding, name: str
) -> Tensor:
    """``TRANSPOSE_CONV`` (group 1, unit dilations) to the full size, in NHWC."""
    full = [
        x.shape[0],
        (x.shape[1] - 1) * strides[0] + w.shape[2] + output_padding[0],
        (x.shape[2] - 1) * strides[1] + w.shape[3] + output_padding[1],
        w.shape[1],
    ]
    filter_ = np.ascontiguousarray(w.transpose(1, 2, 3, 0))
    fields = {"padding": t.g.s.Padding.VALID, "strideH": strides[0], "strideW": strides[1]}
    inputs = [np.array(full, np.int32), filter_, x, bias]
    return t.emit("TRANSPOSE_CONV", inputs, f"{name}/full", full, options_kind="TransposeConvOptions", **fields)


def _conv_transpose(t: LiteRTTranslation, node) -> list:
    """ConvTranspose as the module docstring says: ``TRANSPOSE_CONV`` cut to ONNX's pads, or the flipped
    convolution of the zero-stuffed input. Its output size per axis is ONNX's,
    stride (in - 1) + output_padding + dilation (k - 1) + 1 - pad_begin - pad_end."""
    x = floats(t, node, 0)
    rank = len(x.shape)
    strides, dilations, pads = _geometry(t, node, x, t.constant(node, 1, "weights").shape[2:])
    if t.attr(node, "output_shape") is not None:
        t.refuse(node, "its output_shape attribute; gatepack's LiteRT translation takes pads (what ONNX exports)")
    group = int(t.attr(node, "group", 1))
    w, bias = _weights(t, node, rank, 1)
    name = node.output[0]
    nhwc = _as_nhwc(t, x, name)
    extra = _output_padding(t, node, rank)
    size = [(nhwc.shape[1 + a] - 1) * strides[a] + extra[a] + (w.shape[2 + a] - 1) * dilations[a] + 1 for a in (0, 1)]
    out = [size[0] - pads[0] - pads[2], size[1] - pads[1] - pads[3]]
    if min(out) < 1:
        t.refuse(node, f"its output would be {out[0]}x{out[1]}: pads {pads} larger than its full output")
    shape = (x.shape[0], w.shape[1] * group, *(out if rank == 4 else out[1:]))
    if group == 1 and dilations == [1, 1]:
        full = _transpose_conv(t, node, nhwc, w, bias, strides, extra, name)
        begin, end = [0, pads[0], pads[1], 0], [full.shape[0], pads[0] + out[0], pads[1] + out[1], full.shape[3]]
        constants = [np.array(v, np.int32) for v in (begin, end, [1, 1, 1, 1])]
        y = t.emit("STRIDED_SLICE", [full, *constants], f"{name}/conv_nhwc", (full.shape[0], *out, full.shape[3]))
        return [_as_onnx(t, y, shape, name)]
    stuffed = _stuffed(t, nhwc, strides, name)
    reach = [dilations[a] * (w.shape[2 + a] - 1) for a in (0, 1)]
    begin = [reach[a] - pads[a] for a in (0, 1)]
    end = [out[a] + reach[a] - stuffed.shape[1 + a] - begin[a] for a in (0, 1)]
    if min(*begin, *end) < 0:
        t.refuse(
            node, f"pads {pads} beyond its kernel's reach {reach}; gatepack's LiteRT translation pads, never crops"
        )
    padded = _pad_nhwc(t, stuffed, [*begin, *end], name)
    y = conv_nhwc(t, node, padded, _flipped(w, group), bias, group, [1, 1], dilations, name)
    return [_as_onnx(t, y, shape, name)]


TABLE: dict[str, OnnxOp] = {
    "Conv": OnnxOp(_conv, attributes=_CONV_ATTRIBUTES),
    "ConvTranspose": OnnxOp(_conv_transpose, attributes=_CONV_ATTRIBUTES | {"output_padding", "output_shape"}),
}

"""ONNX's ``DynamicQuantizeLinear`` as OpenVINO ops computing what ONNX defines, in place of OpenVINO's frontend's.

ONNX (and onnxruntime) quantize ``x`` (float32) to uint8 with its own range::

    lo = min(0, min x)    hi = max(0, max x)    scale = (hi - lo) / 255   (1 when hi = lo, as onnxruntime)
    zero_point = round(clip(-lo / scale, 0, 255))      y = clip(round(x / scale) + zero_point, 0, 255)

``round`` half to even. OpenVINO's ONNX frontend (2026.x) computes ``y`` as ``round(x * 255 / (hi - lo))``: the
same real number, rounded otherwise. Where ``x / scale`` lies near a half (a range nearly symmetric about 0 puts
``x = hi`` at ``zero_point + 127.5``: every saturated ``Tanh`` output of text2tashkeel's ``bilstm.int8.onnx``) the
two round to neighbouring integers, one quantization step apart, for every such element at once (1,530 of 25,088
values of its attention, the logits 2.0 off). So gatepack gives the frontend this translation instead.

Two float32 facts it relies on:

- the CPU plugin replaces every float ``Divide`` by a product with the divisor's reciprocal (``ConvertDivide``; a
  marker that prevents it is not kept in the IR): ``x / scale`` is then ``x * (1 / scale)``, within a unit in the
  last place of the quotient, the class of difference the judgement in quantization steps measures
  (``converters.quantizer_steps``);
- the scale itself, shared by every element, is made exactly ``(hi - lo) / 255`` correctly rounded without a
  division: with ``c = fl(1/255)``, ``q = fl(span * c)``, the residual ``r = span - 255 q`` is exact as
  ``(span - 256 q) + q`` (two subtractions of numbers within a factor 2 of each other, Sterbenz; ``256 q`` exact),
  and ``q + r * c`` rounds to the quotient ``span / 255 = q + r / 255``: its error ``r / 255 * 2^-23`` is far below
  the distance of ``span / 255`` from a midpoint between floats (at least 2^-9 units in the last place, since 255
  is odd and a float has 24 significant bits). A fused multiply-add changes none of these roundings.
"""

from __future__ import annotations

import numpy as np

RANGE = 255.0  # uint8's quantization range
_ONE_OVER_RANGE = np.float32(1.0) / np.float32(RANGE)


def conversion_extensions(ops) -> list:
    """The frontend's extensions that translate ONNX's quantizers as ONNX defines them (``ops``: an OpenVINO opset)."""
    from openvino.frontend.onnx import ConversionExtension

    return [ConversionExtension("DynamicQuantizeLinear", lambda ctx: dynamic_quantize_linear(ops, ctx.get_input(0)))]


def dynamic_quantize_linear(ops, x) -> list:
    """``DynamicQuantizeLinear(x)``: y (u8), y_scale (f32 scalar), y_zero_point (u8 scalar), as ONNX defines them
    (module docstring), built with ``ops`` (an OpenVINO opset) on the output ``x``."""
    axes = ops.range(
        np.int64(0), ops.squeeze(ops.shape_of(ops.shape_of(x)), np.int64(0)), np.int64(1), output_type="i64"
    )
    zero = np.float32(0.0)
    low = ops.minimum(ops.reduce_min(x, axes, keep_dims=False), zero)
    high = ops.maximum(ops.reduce_max(x, axes, keep_dims=False), zero)
    span = ops.subtract(high, low)
    scale = ops.select(ops.equal(span, zero), np.float32(1.0), exact_quotient_by_range(ops, span))
    shifted = ops.clamp(ops.negative(ops.divide(low, scale)), 0.0, RANGE)
    zero_point = ops.round(shifted, "half_to_even")
    y = ops.clamp(ops.add(ops.round(ops.divide(x, scale), "half_to_even"), zero_point), 0.0, RANGE)
    return [ops.convert(y, "u8").output(0), scale.output(0), ops.convert(zero_point, "u8").output(0)]


def exact_quotient_by_range(ops, span):
    """``span / 255`` correctly rounded in float32, without a ``Divide`` (module docstring)."""
    q = ops.multiply(span, _ONE_OVER_RANGE)
    residual = ops.add(ops.subtract(span, ops.multiply(q, np.float32(RANGE + 1.0))), q)
    return ops.add(q, ops.multiply(residual, _ONE_OVER_RANGE))

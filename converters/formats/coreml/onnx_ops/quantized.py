"""ONNX's quantization operators as MIL ops: DynamicQuantizeLinear, QuantizeLinear, DequantizeLinear, MatMulInteger
and ConvInteger (what onnxruntime's ``quantize_dynamic`` writes around its layers).

**Integers.** An 8-bit tensor computed at run time is held ``Narrow``: an int32 MIL var with exactly its values
(``translate.Narrow``); an int32 result (MatMulInteger, ConvInteger) is an int32 MIL var.

**Rounding.** ONNX quantizes with ``y = saturate(round(x / scale) + zero_point)``, ``round`` half to even. MIL's
``round`` does not say how it breaks ties, so it is written from ``floor``: with ``f = floor(v)`` and ``d = v - f``
(exact in float32), ``round(v) = f + [d > 1/2] + [d = 1/2] * (f - 2 floor(f / 2))``, the last factor 1 for an odd
``f``. Saturation clips to the type's range (uint8 ``[0, 255]``, int8 ``[-128, 127]``).

**DynamicQuantizeLinear** (uint8): ``lo = min(0, min x)``, ``hi = max(0, max x)``, ``scale = (hi - lo) / 255``
(1 when ``hi = lo``, as onnxruntime), ``zero_point = round(clip(-lo / scale, 0, 255))``.

**Integer products.** MIL's ``matmul`` and ``conv`` compute in floats. Their operands ``q - zero_point`` are
integers of at most 9 bits, exact in float32, and so is every partial sum below 2^24 in magnitude (always when
``K * max|a| * max|b| < 2^24`` for K terms; beyond, a sum is rounded as float32 is, relative 6e-8, which the
verification measures); the result is cast to int32 as ONNX's output. A convolution's padding is 0 after the input's
zero point is taken off, which is padding with the zero point, as onnxruntime pads.
"""

from __future__ import annotations

import numpy as np

from gatepack.converters.formats.coreml.onnx_ops.elementwise import typed
from gatepack.converters.formats.coreml.onnx_ops.nn import convolution
from gatepack.converters.formats.coreml.translate import MilTranslation, Narrow
from gatepack.converters.operators.table import OnnxOp

_RANGES = {np.dtype(np.uint8): (0.0, 255.0), np.dtype(np.int8): (-128.0, 127.0)}
_UINT8 = np.dtype(np.uint8)


def _round_half_to_even(mb, v):
    """``v`` rounded to the nearest integer, ties to the even one, from floor (see the module's docstring)."""
    f = mb.floor(x=v)
    fraction = mb.sub(x=v, y=f)
    odd = mb.sub(x=f, y=mb.mul(x=mb.floor(x=mb.mul(x=f, y=np.float32(0.5))), y=np.float32(2.0)))
    up = mb.cast(x=mb.greater(x=fraction, y=np.float32(0.5)), dtype="fp32")
    tie = mb.mul(x=mb.cast(x=mb.equal(x=fraction, y=np.float32(0.5)), dtype="fp32"), y=odd)
    return mb.add(x=f, y=mb.add(x=up, y=tie))


def _saturated(t: MilTranslation, scaled, zero_point, dtype: np.dtype) -> Narrow:
    """``saturate(round(scaled) + zero_point)`` in ``dtype`` (``zero_point`` a float holding an integer)."""
    low, high = _RANGES[dtype]
    q = t.mb.add(x=_round_half_to_even(t.mb, scaled), y=zero_point)
    return Narrow(t.mb.cast(x=t.mb.clip(x=q, alpha=np.float32(low), beta=np.float32(high)), dtype="int32"), dtype)


def _as_float(t: MilTranslation, node, k: int):
    """Input ``k`` (8-bit, int32 or float) as float32 numbers: a NumPy array when constant, else a MIL var."""
    value = t.value(node, k)
    if isinstance(value, np.ndarray):
        return value.astype(np.float32)
    var = value.var if isinstance(value, Narrow) else value
    return var if str(var.dtype).endswith("fp32") else t.mb.cast(x=var, dtype="fp32")


def _along(t: MilTranslation, value, axis: int, rank: int):
    """A per-axis parameter (1-D, several elements) shaped to broadcast along ``axis`` of a rank-``rank`` tensor;
    a per-tensor one (one element) as it is."""
    if t.rank(value) != 1 or t.shape(value)[0] == 1:
        return value
    shape = [1] * rank
    shape[axis % rank] = -1
    if isinstance(value, np.ndarray):
        return value.reshape(shape)
    return t.mb.reshape(x=value, shape=np.asarray(shape, np.int32))


def _centred(t: MilTranslation, node, k: int, zero_point_k: int, axis: int):
    """Input ``k`` minus its zero point (input ``zero_point_k``, per tensor or along ``axis``), as float32."""
    value = _as_float(t, node, k)
    if not t.has(node, zero_point_k):
        return value
    zero_point = _along(t, _as_float(t, node, zero_point_k), axis, t.rank(value))
    if isinstance(value, np.ndarray) and isinstance(zero_point, np.ndarray):
        return value - zero_point
    return t.mb.sub(x=t.as_var(value), y=zero_point)


def _dynamic_quantize_linear(t: MilTranslation, node) -> list:
    """x (float32) -> y (uint8), y_scale, y_zero_point (uint8), computed from x's range (module docstring)."""
    x = typed(t, node, 0, ("fp32",))
    mb = t.mb
    low = mb.minimum(x=mb.reduce_min(x=x, keep_dims=False), y=np.float32(0.0))
    high = mb.maximum(x=mb.reduce_max(x=x, keep_dims=False), y=np.float32(0.0))
    span = mb.sub(x=high, y=low)
    scale = mb.select(
        cond=mb.equal(x=span, y=np.float32(0.0)), a=np.float32(1.0), b=mb.real_div(x=span, y=np.float32(255.0))
    )
    shifted = mb.clip(x=mb.sub(x=np.float32(0.0), y=mb.real_div(x=low, y=scale)), alpha=0.0, beta=255.0)
    zero_point = _round_half_to_even(mb, shifted)
    y = _saturated(t, mb.real_div(x=x, y=scale), zero_point, _UINT8)
    return [y, scale, Narrow(mb.cast(x=zero_point, dtype="int32"), _UINT8)]


def _quantize_linear(t: MilTranslation, node) -> list:
    """``y = saturate(round(x / y_scale) + y_zero_point)``, per tensor or along ``axis`` (default 1); y's type is
    the zero point's (uint8 without one)."""
    x = typed(t, node, 0, ("fp32",))
    axis = int(t.attr(node, "axis", 1))
    zero = t.value(node, 2) if t.has(node, 2) else np.zeros((), _UINT8)
    dtype = np.dtype(zero.dtype) if isinstance(zero, (np.ndarray, Narrow)) else None
    if dtype not in _RANGES:
        t.refuse(node, f"its zero point is {dtype or 'computed as ' + str(zero.dtype)}; MIL holds int8 and uint8")
    scale = _along(t, _as_float(t, node, 1), axis, t.rank(x))
    zero_point = _along(t, _as_float(t, node, 2), axis, t.rank(x)) if t.has(node, 2) else np.float32(0.0)
    return [_saturated(t, t.mb.real_div(x=x, y=scale), t.as_var(np.asarray(zero_point, np.float32)), dtype)]


def _dequantize_linear(t: MilTranslation, node) -> list:
    """``y = (x - x_zero_point) * x_scale`` in float32, per tensor or along ``axis`` (default 1)."""
    x = _centred(t, node, 0, 2, int(t.attr(node, "axis", 1)))
    scale = _along(t, _as_float(t, node, 1), int(t.attr(node, "axis", 1)), t.rank(x))
    return [t.mb.mul(x=t.as_var(x), y=scale)]


def _matmul_integer(t: MilTranslation, node) -> list:
    """``(A - a_zero_point) @ (B - b_zero_point)`` as int32: A's zero point per tensor or per row, B's per tensor or
    per column; both operands of rank >= 2 (a vector is refused)."""
    for k in (0, 1):
        if t.rank(t.value(node, k)) < 2:
            t.refuse(node, f"input {node.input[k]!r} is a vector; the translation takes matrices")
    a, b = _centred(t, node, 0, 2, -2), _centred(t, node, 1, 3, -1)
    return [t.mb.cast(x=t.mb.matmul(x=t.as_var(a), y=t.as_var(b)), dtype="int32")]


def _conv_integer(t: MilTranslation, node) -> list:
    """``conv(x - x_zero_point, w - w_zero_point)`` as int32 (w's zero point per tensor or per output channel)."""
    x, weight = _centred(t, node, 0, 2, 1), _centred(t, node, 1, 3, 0)
    return [t.mb.cast(x=convolution(t, node, x, weight), dtype="int32")]


TABLE: dict[str, OnnxOp] = {
    "DynamicQuantizeLinear": OnnxOp(_dynamic_quantize_linear, opsets=(11, 10_000)),
    "QuantizeLinear": OnnxOp(_quantize_linear, frozenset({"axis"}), (10, 10_000)),
    "DequantizeLinear": OnnxOp(_dequantize_linear, frozenset({"axis"}), (10, 10_000)),
    "MatMulInteger": OnnxOp(_matmul_integer, opsets=(10, 10_000)),
    "ConvInteger": OnnxOp(
        _conv_integer, frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}), (10, 10_000)
    ),
}

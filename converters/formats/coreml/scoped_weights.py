"""Core ML: a whole model's other weights quantized as asked (``--quantize-weights-scope model``): each MatMul/Gemm/
Conv/Gather weight ``onnx.model_weights`` quantizes becomes, in the translated program, the constexpr op the
recurrent layers' weights are written with (``compressed``, docs/conventions.md §5c), on the weight's own shape:

* ``constexpr_affine_dequantize`` (iOS16/17, 8 bits per output channel): ``quantized_data`` the int8 weight,
  ``scale`` [C] along ``axis`` (the output-channel axis), ``zero_point`` 0;
* ``constexpr_blockwise_shift_scale`` (iOS18: 4 or 8 bits, per channel or per block): ``scale`` of the weight's
  rank, 1 on every axis but the output channels' (and the reduction axis, divided by the block size).

Either computes ``q * scale`` in float32, the float view the ONNX twin holds (``model_weights.float_view``). When the
user asked for float weights (``--dequantize``) the program holds that float view as a constant instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gatepack.converters.errors import RefusedError
from gatepack.converters.formats.coreml.common import AFFINE, BLOCKWISE_TARGET, _mil_types, constexpr_op
from gatepack.converters.formats.onnx.model_weights import ScopedWeight, float_view, quantized, weight_plan


def bind(t: Any, prepared: Any, target: str) -> int:
    """The translation's values (``t.values``, the initializers loaded) with each weight the scope quantizes
    replaced by its constexpr op (or its float view); returns how many were replaced."""
    scheme = prepared.weight_scope
    if scheme is None:
        return 0
    count = 0
    for weight in weight_plan(prepared.proto, scheme):
        if weight.reason or weight.name not in t.values:
            continue
        values, scale = quantized(np.asarray(t.values[weight.name]), weight, scheme)
        if prepared.scope_as_floats:
            t.values[weight.name] = float_view(values, scale, weight, scheme.block_size)
        else:
            t.values[weight.name] = _constexpr(t.mb, values, scale, weight, scheme.bits, target)
        count += 1
    return count


def _constexpr(mb, values: np.ndarray, scale: np.ndarray, weight: ScopedWeight, bits: int, target: str):
    """The constexpr op of ``target`` computing ``values * scale`` (module docstring)."""
    name = f"{weight.name}_quantized"
    per_channel = weight.block_axis is None
    if constexpr_op(target) == AFFINE:
        if bits != 8 or not per_channel:
            raise RefusedError(
                f"{weight.op} weight {weight.name!r}: {bits}-bit or per-block weights need constexpr_blockwise_shift_"
                f"scale, from {BLOCKWISE_TARGET} (the target is {target})",
                hint=f"pass --minimum-deployment-target {BLOCKWISE_TARGET}, or quantize to int8 per channel",
            )
        zero = np.zeros(scale.shape, np.int8)
        return mb.constexpr_affine_dequantize(
            quantized_data=values, zero_point=zero, scale=scale.astype(np.float32), axis=weight.axis, name=name
        )
    if per_channel:
        shape = [1] * values.ndim
        shape[weight.axis] = -1
        scale = scale.reshape(shape)
    data = values.astype(_mil_types().np_int4_dtype) if bits == 4 else values
    return mb.constexpr_blockwise_shift_scale(data=data, scale=scale.astype(np.float32), name=name)

"""gatepack's MIL interpreter: the compile-time decompression ops coremltools.optimize writes for compressed weights
(docs/conventions.md §5c), in NumPy, as Apple's op documentation defines them; checked against Apple's own op tests.

* ``constexpr_affine_dequantize`` (iOS16): ``scale * (quantized_data - zero_point)``, 8-bit data, the scale and zero
  point scalars or vectors along ``axis``; the difference is exact in float32 and the product is rounded once to the
  scale's type (fp32 or fp16);
* ``constexpr_blockwise_shift_scale`` (iOS18): ``scale * (data - offset)`` with ``scale`` (and ``offset``) of the
  data's rank, each of their elements covering a block of ``data.shape[m] / scale.shape[m]`` along every axis ``m``;
  computed in the scale's type;
* ``constexpr_lut_to_dense``: a lookup table. iOS16: ``lut[P]`` with ``indices`` packed into bytes, least significant
  bit first, ``log2(P)`` bits each, the first ``prod(shape)`` of them reshaped to ``shape``. iOS18: ``indices`` of
  any shape (one unpacked index per element) and ``lut`` of shape ``[g_0 .. g_{K-1}, P, V]``: element ``i`` reads
  the table of its group ``(i_m // (D_m / g_m))_m``; a vector table (``V > 1``) writes its ``V`` values
  consecutively along ``vector_axis``.

Every input is a constant, so a program's decompressed weights are computed once per op (``decompressed``).
"""

from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

from gatepack.converters.errors import UsageError


def _along(param: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A scalar or vector ``param`` shaped to broadcast along ``axis`` of a tensor of ``rank``."""
    if param.ndim == 0:
        return param.reshape((1,) * rank)
    shape = [1] * rank
    shape[axis % rank] = param.size
    return param.reshape(shape)


def _affine_dequantize(quantized_data, zero_point, scale, axis, **_) -> np.ndarray:
    data, scale = np.asarray(quantized_data), np.asarray(scale)
    zero = _along(np.asarray(zero_point), data.ndim, int(axis)).astype(np.float32)
    steps = data.astype(np.float32) - zero
    return (steps * _along(scale, data.ndim, int(axis)).astype(np.float32)).astype(scale.dtype)


def spread_blocks(param: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A blockwise ``param`` (the data's rank, each axis dividing the data's) repeated over each block to ``shape``."""
    out = np.asarray(param)
    for axis, (size, count) in enumerate(zip(shape, out.shape)):
        if count != size:
            out = np.repeat(out, size // count, axis=axis)
    return out


def _blockwise_shift_scale(data, scale, offset=None, **_) -> np.ndarray:
    data, scale = np.asarray(data), np.asarray(scale)
    dtype = scale.dtype
    steps = data.astype(dtype)
    if offset is not None:
        steps = steps - spread_blocks(np.asarray(offset), data.shape).astype(dtype)
    return (spread_blocks(scale, data.shape) * steps).astype(dtype)


def _unpacked(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """``count`` unsigned ``bits``-bit numbers packed into bytes, least significant bit first."""
    stream = np.unpackbits(np.asarray(packed).astype(np.uint8).reshape(-1), bitorder="little")
    if stream.size < count * bits:
        raise UsageError(
            f"constexpr_lut_to_dense: {stream.size} packed bits hold fewer than {count} {bits}-bit indices"
        )
    groups = stream[: count * bits].reshape(count, bits).astype(np.int64)
    return groups @ (1 << np.arange(bits, dtype=np.int64))


def _lut_to_dense(indices, lut, shape=None, vector_axis=None, **_) -> np.ndarray:
    lut, indices = np.asarray(lut), np.asarray(indices)
    if shape is not None:  # iOS16: one table, the indices packed
        size = [int(v) for v in np.asarray(shape).reshape(-1)]
        bits = int(np.log2(lut.size))
        return lut.reshape(-1)[_unpacked(indices, bits, int(np.prod(size)))].reshape(size)
    index = indices.astype(np.int64)
    blocks = [n // g for n, g in zip(index.shape, lut.shape[:-2])]
    group = tuple(position // block for position, block in zip(np.indices(index.shape, sparse=True), blocks))
    values = lut[group + (index,)]  # index.shape + [V]
    if lut.shape[-1] == 1:
        return values[..., 0]
    axis = int(vector_axis) % index.ndim
    size = list(index.shape)
    size[axis] *= lut.shape[-1]
    return np.moveaxis(values, -1, axis + 1).reshape(size)


OPS: dict[str, Callable] = {
    "constexpr_affine_dequantize": _affine_dequantize,
    "constexpr_blockwise_shift_scale": _blockwise_shift_scale,
    "constexpr_lut_to_dense": _lut_to_dense,
}

_DECOMPRESSED: "weakref.WeakKeyDictionary[object, np.ndarray]" = weakref.WeakKeyDictionary()


def decompressed(op) -> np.ndarray:
    """The value of constexpr ``op`` (its inputs constants, or other constexpr ops' values), computed once."""
    if op not in _DECOMPRESSED:
        if op.op_type not in OPS:
            raise UsageError(f"op {op.name!r} ({op.op_type}) is not one gatepack's MIL executor runs")
        _DECOMPRESSED[op] = OPS[op.op_type](**{key: _constant(var) for key, var in op.inputs.items()})
    return _DECOMPRESSED[op]


def _constant(var):
    if var.val is not None:
        return var.val if isinstance(var.val, (str, bool)) else np.asarray(var.val)
    if var.op is not None and var.op.op_type.startswith("constexpr_"):
        return decompressed(var.op)
    raise UsageError(f"constexpr input {var.name!r} is not a constant")

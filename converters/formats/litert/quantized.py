"""LiteRT: int8 weights of the hybrid (dynamic-range) kernels, read into quantized records and written from them
(docs/conventions.md §11).

TensorFlow's converter with ``optimizations=[tf.lite.Optimize.DEFAULT]`` stores a weight tensor of at least 1024
elements as INT8 with its quantization parameters: ``scale`` (one per tensor, or one per output row with
``quantized_dimension`` 0) and ``zero_point`` 0. An operator whose float input meets such weights runs its hybrid
kernel: at every step it quantizes each batch row of its float operand (X, h) to int8 itself, asymmetric or
symmetric as the operator's ``asymmetric_quantize_inputs`` says, multiplies in int32 and rescales to float::

    y[b, j] = bias[j] + (sum_k q_W[j, k] q_x[b, k] - zp_x[b] sum_k q_W[j, k]) * (s_x[b] * s_W[j])

The sequence ops (``UNIDIRECTIONAL_SEQUENCE_LSTM``/``_RNN`` and the bidirectional ones) take one scale per weight
tensor (the LSTM's tensors are one gate each), ``FULLY_CONNECTED`` one per tensor or per output row. The weight
zero point is never read by these kernels, so only symmetric integers are held.

A record (``schemas.quantized``) keeps the integers in the canonical [G*H, K] rows with the scale spread over
them, and names the run-time arithmetic in ``dynamic_activations`` (``LITERT_ASYMMETRIC``/``LITERT_SYMMETRIC``):
LiteRT holds exactly the records of that arithmetic; any other (float activations, onnxruntime's) is written as
floats, with ``--dequantize``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gatepack.converters.hybrid import is_hybrid
from gatepack.schemas.layer import RecurrentLayer
from gatepack.schemas.quantized import LITERT_ASYMMETRIC, LITERT_SYMMETRIC, QuantizedWeights, compacted

SCHEMES = {True: LITERT_ASYMMETRIC, False: LITERT_SYMMETRIC}  # asymmetric_quantize_inputs -> the arithmetic
HELD = (
    "INT8 tensors with their scales in the flatbuffer, fed to LiteRT's hybrid kernels, which quantize X and h per "
    "batch row at run time as the source does"
)


def int8_record(tensor: Any, data: np.ndarray, asymmetric: bool) -> QuantizedWeights:
    """An INT8 weight tensor [rows, cols] (``data`` its integers) as a record: its scale per tensor or per row
    (``quantized_dimension`` 0), its zero points as stored. ValueError for parameters that do not fit."""
    q = tensor.quantization
    scale = np.asarray(q.scale if q is not None and q.scale is not None else [], np.float32).reshape(-1)
    zero = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [0] * scale.size).reshape(-1)
    rows = data.shape[0]
    if scale.size not in (1, rows) or zero.size != scale.size or (scale.size > 1 and q.quantizedDimension != 0):
        raise ValueError(
            f"{scale.size} scale(s) and {zero.size} zero point(s) on dimension {getattr(q, 'quantizedDimension', 0)}"
            f" for [{rows}, {data.shape[1]}] integers (one, or one per row on dimension 0)"
        )
    spread = np.broadcast_to(scale.reshape(-1, 1), data.shape)
    zeros = np.broadcast_to(zero.astype(np.int8).reshape(-1, 1), data.shape)
    found = compacted(data.astype(np.int8), np.ascontiguousarray(spread), np.ascontiguousarray(zeros))
    return replace(found, dynamic_activations=SCHEMES[asymmetric])


def stacked(records: list[QuantizedWeights]) -> QuantizedWeights:
    """Per-gate records [H, K] (in canonical order) as one record [G*H, K] at its most compact exact granularity."""
    values = np.concatenate([r.values for r in records])
    scale = np.concatenate([np.broadcast_to(r.broadcast(r.scale), r.values.shape) for r in records])
    zero = np.concatenate([np.broadcast_to(r.broadcast(r.zero_point), r.values.shape) for r in records])
    found = compacted(values, np.ascontiguousarray(scale), np.ascontiguousarray(zero))
    return replace(found, dynamic_activations=records[0].dynamic_activations)


def negated(record: QuantizedWeights) -> QuantizedWeights | None:
    """``-W`` as integers (CIFG's gate), None when -128 is among them (no int8 negation)."""
    if (record.values == -128).any():
        return None
    return record.with_values(-record.values, record.scale, record.zero_point)


def holdable(record: QuantizedWeights | None) -> bool:
    """Whether LiteRT's hybrid kernels compute ``record`` exactly: int8, symmetric, per tensor or per row, LiteRT's
    own run-time arithmetic (``converters.hybrid``)."""
    return record is not None and is_hybrid(record)


def held_records(layer: RecurrentLayer, role: str) -> list[QuantizedWeights] | None:
    """``layer``'s records of ``role`` (W or R), one per direction, when LiteRT holds them all (else None)."""
    records = [p.quantized(role) for p in layer.directions]
    return records if all(holdable(r) for r in records) else None  # type: ignore[return-value]


def holds(layer: RecurrentLayer) -> bool:
    """Whether LiteRT writes ``layer``'s weights as int8 (W and R held in every direction)."""
    return layer.is_quantized and all(held_records(layer, role) for role in ("W", "R"))


def asymmetric(layer: RecurrentLayer) -> bool:
    """The ``asymmetric_quantize_inputs`` of the ops that take ``layer``'s int8 weights."""
    records = held_records(layer, "W") or []
    return any(r.dynamic_activations == LITERT_ASYMMETRIC for r in records)


def per_gate(layer: RecurrentLayer) -> bool:
    """Whether every record of ``layer`` has one scale per gate block (what the sequence ops' kernels take)."""
    h = layer.hidden_size
    for role in ("W", "R"):
        for record in held_records(layer, role) or []:
            scales = np.broadcast_to(record.broadcast(record.scale)[:, :1], (record.values.shape[0], 1)).reshape(-1, h)
            if not (scales == scales[:, :1]).all():
                return False
    return True


def row_block(record: QuantizedWeights, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``first:stop`` of ``record``: their integers and scales (one per row)."""
    scale = np.broadcast_to(record.broadcast(record.scale)[:, :1], (record.values.shape[0], 1)).reshape(-1)
    return record.values[first:stop], np.ascontiguousarray(scale[first:stop], np.float32)


def parameters(s: Any, scale: np.ndarray) -> Any:
    """The tensor's quantization parameters: one scale when all rows share it, else one per row (dimension 0).
    Both vectors are numpy arrays, which the FlatBuffers object API packs as one block of bytes (a list is packed
    element by element in Python: 0.8 s for the 98,304 scales and zero points of the GRU stack's layers)."""
    q = s.QuantizationParametersT()
    one = bool((scale == scale[0]).all())
    q.scale = np.array(scale[:1] if one else scale, np.float32).reshape(-1)
    q.zeroPoint = np.zeros(q.scale.size, np.int64)
    q.quantizedDimension = 0
    return q

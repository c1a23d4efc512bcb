"""ONNX neural-network operators (matrix products, convolutions, pooling, normalisation, resizing) as MIL ops."""

from __future__ import annotations

from gatepack.converters.formats.coreml.translate import OnnxOp, Translation


def _matmul(t: Translation, node) -> list:
    """ONNX MatMul is numpy.matmul (1-D operands promoted and the added axis removed), as MIL's matmul."""
    return [t.mb.matmul(x=t.var(node, 0), y=t.var(node, 1))]


TABLE: dict[str, OnnxOp] = {
    "MatMul": OnnxOp(_matmul),
}

"""The ONNX operator table: one ``OnnxOp`` per ONNX operator type (``translate`` defines the interface).

A new operator is one entry in the module of its kind: ``elementwise`` (arithmetic, comparisons, activations,
casts), ``nn`` (matrix products, convolutions, pooling, normalisation, resizing), ``tensor`` (shapes,
reshaping, indexing, joining, padding) or ``quantized`` (quantizing, dequantizing, integer products). Each entry
is tested against onnxruntime on the operator alone.
"""

from gatepack.converters.formats.coreml.onnx_ops import elementwise, nn, quantized, tensor
from gatepack.converters.formats.coreml.translate import OnnxOp

OPERATORS: dict[str, OnnxOp] = {**elementwise.TABLE, **nn.TABLE, **tensor.TABLE, **quantized.TABLE}

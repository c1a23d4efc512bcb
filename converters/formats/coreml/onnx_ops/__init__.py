"""Core ML's column of the operator table (``converters/operators``): one ``OnnxOp`` per ONNX operator type,
registered under ``coreml`` when this package is imported (``translate`` defines the interface).

A new operator is one entry in the module of its kind: ``elementwise`` (arithmetic, comparisons, activations,
casts), ``nn`` (matrix products, convolutions, pooling, normalisation, resizing), ``tensor`` (shapes,
reshaping, indexing, joining, padding) or ``quantized`` (quantizing, dequantizing, integer products). Each entry
is tested against onnxruntime on the operator alone.
"""

from gatepack.converters.formats.coreml.onnx_ops import elementwise, nn, quantized, tensor
from gatepack.converters.formats.coreml.translate import MilTranslation
from gatepack.converters.operators.table import register

for _module in (elementwise, nn, tensor, quantized):
    register(MilTranslation.target, _module.TABLE)

"""LiteRT's column of the operator table (``converters/operators``): one ``OnnxOp`` per ONNX operator type,
registered under ``litert`` when this package is imported (``translate`` defines the interface).

Builtin operators only. A new operator is one entry in the module of its kind: ``elementwise`` (arithmetic and
activations), ``convolution`` (Conv, ConvTranspose), ``nn`` (matrix products,
reductions, normalisation) or ``tensor`` (reshaping, indexing, joining,
padding). Each entry is tested against onnxruntime on the operator alone, run on LiteRT's interpreter.
"""

from gatepack.converters.formats.litert.onnx_ops import convolution, elementwise, nn, tensor
from gatepack.converters.formats.litert.translate import LiteRTTranslation
from gatepack.converters.operators.table import register

for _module in (convolution, elementwise, nn, tensor):
    register(LiteRTTranslation.target, _module.TABLE)

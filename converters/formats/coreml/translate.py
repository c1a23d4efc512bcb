"""ONNX -> MIL: Core ML's column of the operator table (``converters/operators``) and the interface its entries
(``onnx_ops``) are written against.

How a whole model is translated (``whole``):

1. ``onnx.rewrite.in_place``: every recurrent layer rewritten as one plain GRU/RNN/LSTM node with every attribute
   explicit (lifted ``Loop``s and unrolled cells replaced, quantized LSTMs dequantized);
2. gatepack's ONNX reader reads that model again: each layer, the Transposes it absorbed and the constant cones
   it holds (translated as part of the layer, never on their own);
3. the graph is walked in order by the shared walk (``operators.translation.translate_nodes``: constant folding,
   static shapes, the table's opset and attribute rules): a layer's node is written by the Core ML layer writer
   (``writer.emit_layer``: the native op where it is exact, the ``while_loop`` cell otherwise), an ``If`` decided
   at run time as MIL's ``cond``, every other node by its ``coreml`` entry in the table;
4. the graph's outputs are ``identity`` ops under the model's own output names (sanitised as Core ML needs;
   the package's metadata maps them back).

A node no entry translates, or an attribute its entry does not honour, is refused for that node
(``Untranslatable``): nothing is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gatepack.converters.operators.translation import Translation

# Core ML holds tensors of rank <= 5 (its backend refuses more); ONNX models use rank 6 now and then (gtcrn's unfold:
# Gather -> Transpose -> Reshape). Such a tensor is held as ``Squeezed``: its size-1 axes left out.
MAX_RANK = 5
# the operators whose translations take a ``Squeezed`` input
TAKES_SQUEEZED = frozenset({"Transpose", "Reshape"})


@dataclass(frozen=True)
class Squeezed:
    """An ONNX tensor of rank > ``MAX_RANK`` held as ``var``: the tensor with its size-1 axes left out (the element
    order is the same), ``shape`` its ONNX shape (static)."""

    var: object
    shape: tuple[int, ...]


# An ONNX int8/uint8 tensor computed at run time (DynamicQuantizeLinear's and QuantizeLinear's outputs, a Gather of
# quantized constants) is held as ``Narrow``: an int32 MIL var with the same values (MIL computes in int32). Only the
# operators that read such a tensor as the numbers it holds take it; any other would have to wrap around at 8 bits.
TAKES_NARROW = frozenset({"ConvInteger", "MatMulInteger", "DequantizeLinear", "Cast", "Transpose"})


@dataclass(frozen=True)
class Narrow:
    """An ONNX ``dtype`` (int8 or uint8) tensor held as ``var``, an int32 MIL var with exactly its values."""

    var: Any
    dtype: np.dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.var.shape)


@dataclass
class MilTranslation(Translation):
    """A graph's translation into a MIL program (``Translation``): ``mb`` is coremltools' MIL ``Builder``; a constant
    becomes a ``const`` op (int64 as int32); a rank-6 tensor (``Squeezed``) and an 8-bit one (``Narrow``) are read
    only by the operators that take them."""

    mb: Any = None  # coremltools.converters.mil.Builder, which has no annotations

    target = "coreml"
    target_name = "Core ML"
    target_language = "MIL"
    builder = "coremltools' MIL builder"

    def admit(self, node, name: str, value: Any) -> None:
        if isinstance(value, Squeezed) and node.op_type not in TAKES_SQUEEZED:
            self.refuse(
                node, f"input {name!r} has rank {len(value.shape)} {list(value.shape)}; Core ML holds rank <= 5"
            )
        if isinstance(value, Narrow) and node.op_type not in TAKES_NARROW:
            self.refuse(
                node,
                f"input {name!r} is {value.dtype} (held as int32 for {', '.join(sorted(TAKES_NARROW))} only: "
                f"{node.op_type} would wrap around at 8 bits)",
            )

    def as_var(self, value):
        if isinstance(value, (Squeezed, Narrow)):
            raise ValueError(f"a {type(value).__name__} tensor reached a translation that does not take it")
        return self.mb.const(val=mil_constant(value)) if isinstance(value, np.ndarray) else value

    def held(self, name: str, value: Any) -> str:
        """ "'a' [?, 5, 3] fp32": an input as MIL holds it (a ``Narrow`` as its int32 var; a ``Squeezed`` not shown)."""
        if value is None or isinstance(value, Squeezed):
            return ""
        value = value.var if isinstance(value, Narrow) else value
        return f"{super().held(name, value)} {mil_dtype(value)}"


MIL_NUMPY = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_}  # MIL type -> NumPy
MIL_DTYPE_NAMES = {np.dtype(v): k for k, v in MIL_NUMPY.items()}


def mil_constant(value: np.ndarray) -> np.ndarray:
    """A NumPy value as MIL holds it: int64 as int32 (MIL computes indices and shapes in int32), float64 as
    float32; refused when an integer does not fit."""
    value = np.asarray(value)
    if value.dtype == np.int64:
        if value.size and (value.max() > np.iinfo(np.int32).max or value.min() < np.iinfo(np.int32).min):
            clipped = np.clip(value, np.iinfo(np.int32).min, np.iinfo(np.int32).max)
            return clipped.astype(np.int32)  # ONNX's "to the end" sentinels (INT64_MAX) mean the same clipped
        return value.astype(np.int32)
    if value.dtype == np.float64:
        return value.astype(np.float32)
    return value


def mil_dtype(value) -> str:
    """The MIL element type name of a MIL var or NumPy value as MIL holds it ('fp32', 'int32', 'bool'...)."""
    if isinstance(value, np.ndarray):
        dtype = mil_constant(value).dtype
        return MIL_DTYPE_NAMES.get(dtype, str(dtype))
    from coremltools.converters.mil.mil import types

    return types.builtin_to_string(value.dtype)

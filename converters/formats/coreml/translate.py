"""ONNX -> MIL operator translations: the interface every entry of ``onnx_ops`` is written against.

How a whole model is translated (``whole``):

1. ``onnx.rewrite.in_place``: every recurrent layer rewritten as one plain GRU/RNN/LSTM node with every attribute
   explicit (lifted ``Loop``s and unrolled cells replaced, quantized LSTMs dequantized);
2. gatepack's ONNX reader reads that model again: each layer, the Transposes it absorbed and the constant cones
   it holds (``skip``: translated as part of the layer, never on their own);
3. the graph is walked in order. A layer's node is written by the Core ML layer writer (``writer.emit_layer``:
   the native op where it is exact, the ``while_loop`` cell otherwise); every other node by its entry in
   ``OPERATORS`` (``onnx_ops``: one ``OnnxOp`` per ONNX operator). A node whose inputs are all constants is
   evaluated instead (onnx's reference implementation), and ``Shape`` of a tensor whose shape is static is a
   constant: shape arithmetic folds for the shapes the model declares or the user gives;
4. the graph's outputs are ``identity`` ops under the model's own output names (sanitised as Core ML needs;
   the package's metadata maps them back).

A node no entry translates, or an attribute its entry does not honour, is refused for that node
(``Untranslatable``): nothing is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn, Sequence

import numpy as np


class Untranslatable(Exception):
    """An ONNX node the translation cannot write exactly (its op, an attribute or an input it cannot honour)."""

    def __init__(self, node, reason: str) -> None:
        super().__init__(reason)
        self.op_type = node.op_type
        self.node_name = node.name or (node.output[0] if node.output else "?")
        self.reason = reason


@dataclass(frozen=True)
class OnnxOp:
    """One ONNX operator's MIL translation: ``emit(t, node)`` returns one MIL var (or NumPy constant) per node
    output (None for an optional output nobody reads). ``attributes``: the ONNX attributes it honours; a node
    carrying any other is refused. ``opsets``: the ai.onnx opset range (inclusive) whose definition it
    implements."""

    emit: Callable[["Translation", object], Sequence]
    attributes: frozenset[str] = frozenset()
    opsets: tuple[int, int] = (1, 10_000)


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
TAKES_NARROW = frozenset({"ConvInteger", "MatMulInteger", "DequantizeLinear", "Cast"})


@dataclass(frozen=True)
class Narrow:
    """An ONNX ``dtype`` (int8 or uint8) tensor held as ``var``, an int32 MIL var with exactly its values."""

    var: Any
    dtype: np.dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.var.shape)


@dataclass
class Translation:
    """The state of one graph's translation: ``values`` maps each ONNX tensor name to its MIL var or, when it is
    known before run time, its NumPy value. Op translations read inputs through ``var``/``constant``/``attr`` and
    refuse through ``refuse``."""

    mb: Any  # coremltools.converters.mil.Builder, which has no annotations
    opset: int
    values: dict = field(default_factory=dict)

    # --- inputs
    def has(self, node, k: int) -> bool:
        """Whether optional input ``k`` is given."""
        return k < len(node.input) and bool(node.input[k])

    def value(self, node, k: int):
        """Input ``k`` as it is: a MIL var or a NumPy array."""
        name = node.input[k]
        if name not in self.values:
            self.refuse(node, f"input {name!r} is not computed before it (the graph is not in order)")
        value = self.values[name]
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
        return value

    def var(self, node, k: int):
        """Input ``k`` as a MIL var (a constant becomes a ``const`` op, int64 as int32)."""
        return self.as_var(self.value(node, k))

    def as_var(self, value):
        if isinstance(value, (Squeezed, Narrow)):
            raise ValueError(f"a {type(value).__name__} tensor reached a translation that does not take it")
        return self.mb.const(val=mil_constant(value)) if isinstance(value, np.ndarray) else value

    def constant(self, node, k: int, what: str) -> np.ndarray:
        """Input ``k``'s value, which the translation needs before run time (``what`` it is, for the refusal)."""
        value = self.value(node, k)
        if not isinstance(value, np.ndarray):
            self.refuse(node, f"its {what} ({node.input[k]!r}) is computed at run time; Core ML needs it constant")
        return value

    def attr(self, node, name: str, default=None):
        """Attribute ``name`` as a Python value (ints, floats, strings, lists; tensors as arrays)."""
        from onnx import helper, numpy_helper

        for a in node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                if hasattr(value, "data_type"):  # a TensorProto
                    return numpy_helper.to_array(value)
                if isinstance(value, bytes):
                    return value.decode()
                if isinstance(value, list) and value and isinstance(value[0], bytes):
                    return [v.decode() for v in value]
                return value
        return default

    @staticmethod
    def shape(value) -> tuple:
        """The static shape of a MIL var or array (symbolic dimensions as they are)."""
        return tuple(np.shape(value)) if isinstance(value, np.ndarray) else tuple(value.shape)

    @staticmethod
    def rank(value) -> int:
        return len(Translation.shape(value))

    def refuse(self, node, reason: str) -> NoReturn:
        raise Untranslatable(node, reason)


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

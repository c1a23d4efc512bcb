"""ONNX -> LiteRT builtin operators: LiteRT's column of the operator table (``converters/operators``) and the
interface its entries (``onnx_ops``) are written against.

A value of the graph is a ``Tensor`` of the flatbuffer being built (``common.Graph``): its index, its static
shape and its element type; a constant becomes a tensor with its own buffer when an operator reads it (int64 as
int32, float64 as float32: LiteRT's kernels index in int32). Every shape is static: a node's output shape is
ONNX's own, found by onnx's reference implementation on zeros of its inputs' shapes (``onnx_shapes``), so a
``Reshape``/``Squeeze``/``Unsqueeze`` is one ``RESHAPE`` to that shape, whatever its attributes say.

Convolutions run channels-last (LiteRT's ``CONV_2D`` takes NHWC): a ``TRANSPOSE`` before and after each. A
``TRANSPOSE`` of a tensor another ``TRANSPOSE`` made is folded into one from that tensor's source (none when the
two cancel), and ``prune`` drops the operators nothing reads afterwards: two convolutions in a row keep their
activations channels-last between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gatepack.converters.formats.litert.common import Graph
from gatepack.converters.operators.translation import Translation

# NumPy element types -> LiteRT's TensorType names, as LiteRT holds them
LITERT_TYPES = {"float32": "FLOAT32", "float64": "FLOAT32", "int32": "INT32", "int64": "INT32", "bool": "BOOL"}
HELD_AS = {"float64": np.float32, "int64": np.int32}  # what a constant of such a type is stored as


@dataclass(frozen=True)
class Tensor:
    """A tensor of the graph being built: ``index`` in the subgraph, its static ``shape``, its ``dtype`` (a
    TensorType name)."""

    index: int
    shape: tuple[int, ...]
    dtype: str = "FLOAT32"


def held_constant(value: np.ndarray) -> np.ndarray:
    """``value`` as LiteRT holds it: int64 as int32 (clipped: ONNX's "to the end" sentinels mean the same clipped),
    float64 as float32; other types as they are (refused by ``as_var`` unless LiteRT has them)."""
    value = np.asarray(value)
    if value.dtype == np.int64:
        return np.clip(value, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32)
    return value.astype(HELD_AS[value.dtype.name]) if value.dtype.name in HELD_AS else value


@dataclass
class LiteRTTranslation(Translation):
    """A graph's translation into one LiteRT subgraph (``Translation``) over ``g``, the flatbuffer graph builder."""

    g: Any = None  # common.Graph
    transposed: dict[int, tuple[Tensor, tuple[int, ...]]] = field(default_factory=dict)  # TRANSPOSE out -> (x, perm)
    constants: int = 0

    target = "litert"
    target_name = "LiteRT"
    target_language = "LiteRT builtin operators"
    builder = "gatepack's LiteRT graph builder"

    def as_var(self, value) -> Tensor:
        if isinstance(value, Tensor):
            return value
        held = held_constant(value)
        if held.dtype.name not in LITERT_TYPES:
            raise ValueError(f"a {held.dtype} constant, which no LiteRT tensor here holds")
        self.constants += 1
        kind = LITERT_TYPES[held.dtype.name]
        data = held.astype(np.uint8) if kind == "BOOL" else held
        index = self.g.tensor(f"constant_{self.constants}", list(held.shape), kind, np.ascontiguousarray(data))
        return Tensor(index, tuple(held.shape), kind)

    def held(self, name: str, value: Any) -> str:
        """ "'a' [1, 5, 3] FLOAT32": an input as the graph holds it."""
        if value is None:
            return ""
        kind = value.dtype if isinstance(value, Tensor) else LITERT_TYPES.get(held_constant(value).dtype.name, "?")
        return f"{super().held(name, value)} {kind}"

    # --- building
    def tensor(self, name: str, shape, dtype: str = "FLOAT32") -> Tensor:
        shape = tuple(int(d) for d in shape)
        return Tensor(self.g.tensor(name, list(shape), dtype), shape, dtype)

    def op(self, kind: str, inputs: list, out: Tensor, options: Any = None) -> Tensor:
        """Operator ``kind`` reading ``inputs`` (tensors, constants, or -1 for an absent optional input) into
        ``out``."""
        indices = [x if isinstance(x, int) else self.as_var(x).index for x in inputs]
        self.g.op(kind, indices, [out.index], options)
        return out

    def emit(self, kind: str, inputs: list, name: str, shape, dtype: str = "FLOAT32", **options: Any) -> Tensor:
        """``kind`` into a new tensor ``name`` of ``shape``; ``options``: (its options class, its fields) when
        given as ``options_kind`` and fields."""
        kind_options = options.pop("options_kind", None)
        built = self.g.options(kind_options, **options) if kind_options else None
        return self.op(kind, inputs, self.tensor(name, shape, dtype), built)

    def transpose(self, x: Tensor, perm, name: str) -> Tensor:
        """``x`` transposed by ``perm``: ``y.shape[k] = x.shape[perm[k]]``; a transpose of a transpose is folded
        into one from the first one's input (none when the two cancel)."""
        perm = tuple(int(p) for p in perm)
        if x.index in self.transposed:
            source, first = self.transposed[x.index]
            x, perm = source, tuple(first[p] for p in perm)
        if perm == tuple(range(len(perm))):
            return x
        out = self.emit("TRANSPOSE", [x, np.array(perm, np.int32)], name, [x.shape[p] for p in perm], x.dtype)
        self.transposed[out.index] = (x, perm)
        return out

    def reshape(self, x: Tensor, shape, name: str) -> Tensor:
        shape = tuple(int(d) for d in shape)
        if shape == x.shape:
            return x
        return self.emit("RESHAPE", [x, np.array(shape, np.int32)], name, shape, x.dtype)


def onnx_shapes(t: LiteRTTranslation, node) -> list[tuple[tuple[int, ...], str]]:
    """Each output's static shape and LiteRT type, as ONNX defines them: the node evaluated by onnx's reference
    implementation on zeros of its inputs' shapes (its constant inputs as they are)."""
    from gatepack.converters.formats.onnx.folding import evaluate_node

    numpy_types = {"FLOAT32": np.float32, "INT32": np.int64, "BOOL": np.bool_}
    known = {}
    for name in node.input:
        if name:
            value = t.values[name]
            known[name] = np.zeros(value.shape, numpy_types[value.dtype]) if isinstance(value, Tensor) else value
    outputs = evaluate_node(node, known, {"": t.opset})
    if outputs is None:
        t.refuse(node, "onnx's reference implementation cannot find its output shapes")
    return [(tuple(np.shape(o)), LITERT_TYPES.get(np.asarray(o).dtype.name, "?")) for o in outputs]


def prune(g: Graph) -> None:
    """Drop the operators whose outputs nothing reads (no operator, no graph output, no variable), repeatedly: the
    transposes ``transpose`` folded away."""
    while True:
        read = {int(k) for op in g.graph.operators for k in op.inputs} | set(g.graph.outputs)
        read |= {k for k, tensor in enumerate(g.graph.tensors) if tensor.isVariable}
        kept = [op for op in g.graph.operators if any(int(k) in read for k in op.outputs)]
        if len(kept) == len(g.graph.operators):
            return
        g.graph.operators = kept

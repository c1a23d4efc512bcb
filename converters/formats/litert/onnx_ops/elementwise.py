"""ONNX's elementwise operators as LiteRT builtins: float32 arithmetic with ONNX's multidirectional broadcasting
(the lower-rank operand reshaped to the other's rank first), activations, ``Pow`` (x * x for a constant exponent 2,
``SQRT`` for 0.5, ``POW`` otherwise), ``PRelu`` (``PRELU``: x where x >= 0, slope * x elsewhere), ``Clip``
(``MAXIMUM`` and ``MINIMUM`` with its bounds) and the comparisons (``GREATER``, ``LESS``, ``EQUAL``,
``GREATER_EQUAL``, ``LESS_EQUAL``: BOOL results)."""

from __future__ import annotations

import numpy as np

from gatepack.converters.formats.litert.translate import LiteRTTranslation, Tensor, onnx_shapes
from gatepack.converters.operators.table import OnnxOp


def floats(t: LiteRTTranslation, node, k: int) -> Tensor:
    """Input ``k`` as a FLOAT32 tensor; refused for any other type (LiteRT's integer kernels round and wrap as
    ONNX's do not always)."""
    x = t.var(node, k)
    if x.dtype != "FLOAT32":
        t.refuse(
            node,
            f"input {node.input[k]!r} is {x.dtype}; gatepack's LiteRT translation computes float32 only",
            node.input[k],
        )
    return x


def ranked(t: LiteRTTranslation, x: Tensor, rank: int, name: str) -> Tensor:
    """``x`` with leading size-1 axes up to ``rank`` (ONNX's broadcasting aligns the last axes)."""
    return t.reshape(x, (1,) * (rank - len(x.shape)) + x.shape, name) if len(x.shape) < rank else x


def _binary(kind: str) -> OnnxOp:
    def emit(t: LiteRTTranslation, node) -> list:
        ((shape, dtype),) = onnx_shapes(t, node)
        a, b = (ranked(t, floats(t, node, k), len(shape), f"{node.output[0]}/in{k}") for k in (0, 1))
        return [t.emit(kind, [a, b], node.output[0], shape, dtype)]

    return OnnxOp(emit, opsets=(7, 10_000))  # broadcasting from opset 7


def _unary(kind: str, first: int = 6) -> OnnxOp:
    def emit(t: LiteRTTranslation, node) -> list:
        x = floats(t, node, 0)
        return [t.emit(kind, [x], node.output[0], x.shape)]

    return OnnxOp(emit, opsets=(first, 10_000))


def _pow(t: LiteRTTranslation, node) -> list:
    """x ** y: a constant one-element exponent 2 is ``MUL(x, x)`` and 0.5 ``SQRT(x)``, where y does not widen x
    (the products ONNX's definition gives, correctly rounded as ``POW``'s would be); else ``POW`` broadcast."""
    x = floats(t, node, 0)
    ((shape, _),) = onnx_shapes(t, node)
    y = t.value(node, 1)
    if isinstance(y, np.ndarray) and y.size == 1 and tuple(shape) == x.shape:
        exponent = float(y.reshape(-1)[0])
        if exponent == 2.0:
            return [t.emit("MUL", [x, x], node.output[0], shape)]
        if exponent == 0.5:
            return [t.emit("SQRT", [x], node.output[0], shape)]
    if isinstance(y, np.ndarray):
        y = y.astype(np.float32)
    exponent_var = t.as_var(y)
    if exponent_var.dtype != "FLOAT32":
        t.refuse(
            node,
            f"its exponent is {exponent_var.dtype}; gatepack's LiteRT translation computes float32 only",
            node.input[1],
        )
    a, b = (ranked(t, v, len(shape), f"{node.output[0]}/in{k}") for k, v in enumerate((x, exponent_var)))
    return [t.emit("POW", [a, b], node.output[0], shape)]


def _prelu(t: LiteRTTranslation, node) -> list:
    """``PRELU(x, slope)``, the slope broadcast to x's rank (ONNX's unidirectional broadcasting)."""
    x = floats(t, node, 0)
    slope = ranked(t, floats(t, node, 1), len(x.shape), f"{node.output[0]}/slope")
    return [t.emit("PRELU", [x, slope], node.output[0], x.shape)]


def _compare(kind: str) -> OnnxOp:
    """A comparison (``GREATER``, ...) of two operands of one type (float32 or int32), broadcast, into BOOL."""

    def emit(t: LiteRTTranslation, node) -> list:
        ((shape, _),) = onnx_shapes(t, node)
        a, b = (t.var(node, k) for k in (0, 1))
        if a.dtype != b.dtype or a.dtype not in ("FLOAT32", "INT32"):
            t.refuse(node, f"its operands are {a.dtype} and {b.dtype}; gatepack compares float32 or int32 pairs")
        a, b = (ranked(t, v, len(shape), f"{node.output[0]}/in{k}") for k, v in enumerate((a, b)))
        return [t.emit(kind, [a, b], node.output[0], shape, "BOOL")]

    return OnnxOp(emit, opsets=(7, 10_000))


def _clip(t: LiteRTTranslation, node) -> list:
    """min(max(x, low), high): ``MAXIMUM`` then ``MINIMUM`` with each bound given (inputs from opset 11,
    attributes before); a bound not given is no operator."""
    x = floats(t, node, 0)
    bounds: list[Tensor | np.ndarray | None]
    if t.opset >= 11:
        bounds = [floats(t, node, k) if t.has(node, k) else None for k in (1, 2)]
    else:
        bounds = [None if t.attr(node, a) is None else np.array(t.attr(node, a), np.float32) for a in ("min", "max")]
    given = [(kind, bound) for kind, bound in zip(("MAXIMUM", "MINIMUM"), bounds) if bound is not None]
    for k, (kind, bound) in enumerate(given):
        name = node.output[0] if k == len(given) - 1 else f"{node.output[0]}/{kind.lower()}"
        x = t.emit(kind, [x, ranked(t, t.as_var(bound), len(x.shape), f"{name}/bound")], name, x.shape)
    return [x]


def _identity(t: LiteRTTranslation, node) -> list:
    return [t.value(node, 0)]


TABLE: dict[str, OnnxOp] = {
    "Add": _binary("ADD"),
    "Sub": _binary("SUB"),
    "Mul": _binary("MUL"),
    "Div": _binary("DIV"),
    "Sigmoid": _unary("LOGISTIC"),
    "Tanh": _unary("TANH"),
    "Relu": _unary("RELU"),
    "Abs": _unary("ABS"),
    "Sqrt": _unary("SQRT"),
    "Exp": _unary("EXP"),
    "Log": _unary("LOG"),
    "Neg": _unary("NEG"),
    "Pow": OnnxOp(_pow, opsets=(7, 10_000)),
    "PRelu": OnnxOp(_prelu, opsets=(7, 10_000)),
    "Identity": OnnxOp(_identity),
    "Clip": OnnxOp(_clip, attributes=frozenset({"min", "max"}), opsets=(6, 10_000)),
    "Greater": _compare("GREATER"),
    "Less": _compare("LESS"),
    "Equal": _compare("EQUAL"),
    "GreaterOrEqual": _compare("GREATER_EQUAL"),
    "LessOrEqual": _compare("LESS_EQUAL"),
}

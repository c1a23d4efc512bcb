"""ONNX elementwise operators (arithmetic, comparisons, activations, casts) as MIL ops.

ONNX broadcasts numpy-style (multidirectional) like MIL's elementwise binary ops, so operands pass as they are.
"""

from __future__ import annotations

from gatepack.converters.formats.coreml.translate import OnnxOp, Translation


def _binary(mil_op: str) -> OnnxOp:
    def emit(t: Translation, node) -> list:
        return [getattr(t.mb, mil_op)(x=t.var(node, 0), y=t.var(node, 1))]

    return OnnxOp(emit)


def _unary(mil_op: str) -> OnnxOp:
    def emit(t: Translation, node) -> list:
        return [getattr(t.mb, mil_op)(x=t.var(node, 0))]

    return OnnxOp(emit)


TABLE: dict[str, OnnxOp] = {
    "Add": _binary("add"),
    "Sub": _binary("sub"),
    "Mul": _binary("mul"),
    "Div": _binary("real_div"),
    "Sigmoid": _unary("sigmoid"),
    "Tanh": _unary("tanh"),
    "Relu": _unary("relu"),
}

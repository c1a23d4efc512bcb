"""The eleven ONNX activations as elementary operations, written once for every graph builder.

A format that decomposes a cell (OpenVINO's elementary opset, Core ML's MIL ops) provides an
``ElementaryOps`` adapter over its own builder; ``build_activation`` then emits the activation from
the table below. Each recipe is numerically stable for any input (docs/conventions.md §2):

* Elu uses ``exp(min(x, 0))`` so large positive inputs never overflow;
* Softplus is ``max(x, 0) + log1p(exp(-|x|))``, log1p by Goldberg's formula (no log1p op needed);
* LeakyRelu, ThresholdedRelu and Elu select between branches instead of multiplying by masks.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from gatepack.converters.errors import UsageError
from gatepack.schemas.activations import Activation


class ElementaryOps(Protocol):
    """The elementary operations the recipes use, on a builder's values (``const`` makes a scalar
    in the value's precision; ``zero_like`` the value ``0`` where a branch needs one)."""

    def const(self, x: Any, value: float) -> Any: ...
    def zero_like(self, x: Any) -> Any: ...
    def add(self, x: Any, y: Any) -> Any: ...
    def sub(self, x: Any, y: Any) -> Any: ...
    def mul(self, x: Any, y: Any) -> Any: ...
    def div(self, x: Any, y: Any) -> Any: ...
    def minimum(self, x: Any, y: Any) -> Any: ...
    def maximum(self, x: Any, y: Any) -> Any: ...
    def select(self, cond: Any, a: Any, b: Any) -> Any: ...
    def greater(self, x: Any, y: Any) -> Any: ...
    def greater_equal(self, x: Any, y: Any) -> Any: ...
    def clip01(self, x: Any) -> Any: ...
    def exp(self, x: Any) -> Any: ...
    def log(self, x: Any) -> Any: ...
    def abs(self, x: Any) -> Any: ...
    def neg(self, x: Any) -> Any: ...
    def sigmoid(self, x: Any) -> Any: ...
    def tanh(self, x: Any) -> Any: ...
    def relu(self, x: Any) -> Any: ...


Recipe = Callable[[ElementaryOps, Any, float, float], Any]

RECIPES: dict[str, Recipe] = {
    "Sigmoid": lambda o, x, a, b: o.sigmoid(x),
    "Tanh": lambda o, x, a, b: o.tanh(x),
    "Relu": lambda o, x, a, b: o.relu(x),
    "Affine": lambda o, x, a, b: o.add(o.mul(x, o.const(x, a)), o.const(x, b)),  # a * x + b
    "LeakyRelu": lambda o, x, a, b: o.select(o.greater_equal(x, o.const(x, 0)), x, o.mul(x, o.const(x, a))),
    "ThresholdedRelu": lambda o, x, a, b: o.select(o.greater(x, o.const(x, a)), x, o.zero_like(x)),
    "ScaledTanh": lambda o, x, a, b: o.mul(o.tanh(o.mul(x, o.const(x, b))), o.const(x, a)),  # a * tanh(b * x)
    "HardSigmoid": lambda o, x, a, b: o.clip01(o.add(o.mul(x, o.const(x, a)), o.const(x, b))),
    "Elu": lambda o, x, a, b: o.select(
        o.greater_equal(x, o.const(x, 0)),
        x,
        o.mul(o.sub(o.exp(o.minimum(x, o.const(x, 0))), o.const(x, 1)), o.const(x, a)),
    ),
    "Softsign": lambda o, x, a, b: o.div(x, o.add(o.abs(x), o.const(x, 1))),
    "Softplus": lambda o, x, a, b: o.add(o.maximum(x, o.const(x, 0)), _log1p(o, o.exp(o.neg(o.abs(x))))),
}


def _log1p(o: ElementaryOps, u: Any) -> Any:
    """log(1 + u) for u in [0, 1], accurate where u is tiny (a plain log(1 + u) rounds 1 + u first and
    loses u's digits: Softplus(-9.7) came out 0 in float32): with w = 1 + u rounded,
    log(w) * u / (w - 1), and u itself where w rounds to 1 (Goldberg's formula)."""
    # max(..., 1) changes no value, but keeps a graph optimiser from recognising log(exp(x) + 1) and
    # swapping in its own Softplus kernel (OpenVINO CPU's gives -1.9e-6 for Softplus(-20)).
    w = o.maximum(o.add(u, o.const(u, 1)), o.const(u, 1))
    w_minus_1 = o.sub(w, o.const(u, 1))
    return o.select(o.greater(w_minus_1, o.const(u, 0)), o.div(o.mul(o.log(w), u), w_minus_1), u)


def build_activation(ops: ElementaryOps, x: Any, act: Activation, builder: str) -> Any:
    """``act`` applied to ``x`` with ``ops``; ``builder`` names the target in the error for a kind
    without a recipe (every ONNX activation has one)."""
    recipe = RECIPES.get(act.name)
    if recipe is None:
        raise UsageError(f"activation {act.name} has no {builder} decomposition")
    return recipe(ops, x, act.alpha or 0.0, act.beta or 0.0)

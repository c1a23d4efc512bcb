"""gatepack's MIL interpreter: the elementwise ops the ONNX operator table emits (NumPy, MIL's documented semantics).

``OPS`` maps a MIL op type to a function of the op's inputs by name (MIL vars as arrays, parameters as Python
values); ``interpreter`` merges it into its table. Each op here is checked against Apple's own op tests.
Results keep the input's element type (fp16 programs compute in fp16); comparisons and logic give bools.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from gatepack.converters.errors import UsageError


def _typed(function: Callable) -> Callable:
    """``function(x, ...)``, its result in x's element type."""

    def run(x, **parameters):
        x = np.asarray(x)
        return np.asarray(function(x, **parameters)).astype(x.dtype, copy=False)

    return run


def _quiet(function: Callable) -> Callable:
    """``function`` without NumPy's warnings for what a runtime computes silently (log(0), 1/0, sqrt(-1))."""

    def run(*args, **kwargs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return function(*args, **kwargs)

    return run


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


def _round(x: np.ndarray) -> np.ndarray:
    """MIL's round: to the nearest integer, halves to even ('0.5 is rounded to 0')."""
    return np.round(x)


def _prelu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """x if x > 0 else alpha[c] * x, alpha of shape [C] along axis 1 of a rank 3-5 x."""
    if x.ndim not in (3, 4, 5) or np.shape(alpha) != (x.shape[1],):
        raise UsageError(
            f"prelu: alpha of shape {np.shape(alpha)} for x of shape {x.shape} (MIL takes [C] of rank 3-5)"
        )
    per_channel = np.reshape(alpha, (1, -1) + (1,) * (x.ndim - 2))
    return np.where(x > 0, x, x * per_channel)


_GELU_MODES = ("EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION")


def _gelu(x: np.ndarray, mode: str = "EXACT") -> np.ndarray:
    """EXACT: x * (1 + erf(x / sqrt 2)) / 2; TANH_APPROXIMATION: x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2;
    SIGMOID_APPROXIMATION: x * sigmoid(1.702 x)."""
    if str(mode) not in _GELU_MODES:
        raise UsageError(f"gelu mode {mode!r} is not one of MIL's {_GELU_MODES}")
    wide = x.astype(np.float64)
    if str(mode) == "EXACT":
        return wide * (1 + _erf(wide / math.sqrt(2))) / 2
    if str(mode) == "TANH_APPROXIMATION":
        return wide * (1 + np.tanh(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide**3))) / 2
    return wide / (1 + np.exp(-1.702 * wide))


def _floor_div(x, y):
    """x / y rounded toward negative infinity (integers stay integers)."""
    x, y = np.asarray(x), np.asarray(y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor_divide(x, y).astype(np.result_type(x, y))


def _pow(x, y):
    x, y = np.asarray(x), np.asarray(y)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.power(x, y).astype(np.result_type(x, y))


def _elu(x, alpha):
    """x if x > 0 else alpha * (e^x - 1)."""
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _clamped_relu(x, alpha, beta):
    """min(beta, x) where x >= 0, min(beta, alpha * x) elsewhere, as MIL computes it: min(max(x, 0), beta) +
    min(min(x, 0) * alpha, beta)."""
    return np.minimum(np.maximum(x, 0), beta) + np.minimum(np.minimum(x, 0) * alpha, beta)


def _softplus_parametric(x, alpha, beta):
    """alpha[c] * log(1 + e^(beta[c] * x)), alpha and beta of shape [C] along axis 1."""
    if x.ndim < 3:
        raise UsageError(f"softplus_parametric: x of rank {x.ndim} (MIL takes rank 3 or more)")
    channel = (1, -1) + (1,) * (x.ndim - 2)
    return np.reshape(alpha, channel) * np.logaddexp(0, np.reshape(beta, channel) * x)


OPS: dict[str, Callable] = {
    # unary: fp16/fp32 (and int32 where MIL allows it)
    "sqrt": _typed(_quiet(np.sqrt)),
    "rsqrt": _typed(_quiet(lambda x, epsilon=1e-12: 1 / np.sqrt(x + epsilon))),
    "inverse": _typed(_quiet(lambda x, epsilon=1e-4: 1 / (x + epsilon))),
    "log": _typed(_quiet(lambda x, epsilon=1e-45: np.log(x + epsilon))),
    "exp": _typed(_quiet(np.exp)),
    "exp2": _typed(_quiet(np.exp2)),
    "erf": _typed(_erf),
    "floor": _typed(np.floor),
    "ceil": _typed(np.ceil),
    "round": _typed(_round),
    "sign": _typed(np.sign),
    "abs": _typed(np.abs),
    "square": _typed(np.square),
    "sin": _typed(np.sin),
    "cos": _typed(np.cos),
    "tan": _typed(np.tan),
    "asin": _typed(_quiet(np.arcsin)),
    "acos": _typed(_quiet(np.arccos)),
    "atan": _typed(np.arctan),
    "sinh": _typed(_quiet(np.sinh)),
    "cosh": _typed(_quiet(np.cosh)),
    "atanh": _typed(_quiet(np.arctanh)),
    "threshold": _typed(lambda x, alpha: np.maximum(x, alpha)),
    # binary, broadcast
    "pow": _pow,
    "floor_div": _floor_div,
    "mod": _quiet(lambda x, y, **_: np.remainder(x, y)),  # the divisor's sign, as Python's %
    "less_equal": lambda x, y, **_: np.less_equal(x, y),
    "not_equal": lambda x, y, **_: np.not_equal(x, y),
    "logical_not": lambda x, **_: np.logical_not(x),
    "logical_and": lambda x, y, **_: np.logical_and(x, y),
    "logical_or": lambda x, y, **_: np.logical_or(x, y),
    "logical_xor": lambda x, y, **_: np.logical_xor(x, y),
    # activations (fp16/fp32)
    "leaky_relu": _typed(lambda x, alpha: np.where(x >= 0, x, alpha * x)),
    "elu": _typed(_quiet(_elu)),
    "prelu": _typed(_prelu),
    "relu6": _typed(lambda x: np.minimum(np.maximum(x, 0), 6)),
    "clamped_relu": _typed(_clamped_relu),
    "thresholded_relu": _typed(lambda x, alpha: np.where(x >= alpha, x, 0)),
    "sigmoid_hard": _typed(lambda x, alpha, beta: np.minimum(np.maximum(alpha * x + beta, 0), 1)),
    "linear_activation": _typed(lambda x, alpha, beta: alpha * x + beta),
    "scaled_tanh": _typed(lambda x, alpha, beta: alpha * np.tanh(beta * x)),
    "softplus": _typed(lambda x: np.logaddexp(0, x)),
    "softplus_parametric": _typed(_softplus_parametric),
    "softsign": _typed(lambda x: x / (1 + np.abs(x))),
    "silu": _typed(_quiet(lambda x: x / (1 + np.exp(-x)))),
    "gelu": _typed(_gelu),
}

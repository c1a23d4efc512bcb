"""ONNX elementwise operators (arithmetic, comparisons, logic, activations, casts) as MIL ops.

ONNX broadcasts numpy-style (multidirectional) like MIL's elementwise binary ops, so operands pass as they are.
MIL computes in fp16, fp32, int32 and bool: an ONNX int64 is an int32 (``mil_constant``), a float64 an fp32; any
other element type (int8, uint8, string...) is refused where it reaches an operator. Each entry checks the MIL
types of its operands against the op's type domain and refuses the others naming them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gatepack.converters.formats.coreml.translate import MIL_NUMPY, MilTranslation, Narrow, mil_dtype
from gatepack.converters.operators.table import OnnxOp

FLOATS = ("fp16", "fp32")
NUMBERS = ("fp16", "fp32", "int32")
# ONNX TensorProto element types a Cast can produce, as MIL types (int64 is int32, double fp32 in MIL)
_CAST_TARGETS = {1: "fp32", 10: "fp16", 6: "int32", 7: "int32", 9: "bool", 11: "fp32"}


def typed(t: MilTranslation, node, k: int, allowed: tuple[str, ...]):
    """Input ``k`` as a MIL var whose element type is one of ``allowed``; refused otherwise."""
    value = t.value(node, k)
    dtype = mil_dtype(value)
    if dtype not in allowed:
        t.refuse(node, f"input {node.input[k]!r} is {dtype}; the MIL op takes {'/'.join(allowed)}", node.input[k])
    return t.as_var(value)


def _same_types(t: MilTranslation, node, allowed: tuple[str, ...]) -> list:
    """Every given input as a MIL var, all of one element type among ``allowed``."""
    values = [typed(t, node, k, allowed) for k in range(len(node.input)) if t.has(node, k)]
    if len({mil_dtype(v) for v in values}) > 1:
        t.refuse(node, f"its inputs mix element types {[mil_dtype(v) for v in values]}")
    return values


def like(number, reference) -> np.ndarray:
    """``number`` as a constant of ``reference``'s MIL element type."""
    return np.asarray(number, MIL_NUMPY[mil_dtype(reference)])


def _binary(mil_op: str, allowed: tuple[str, ...] = NUMBERS) -> OnnxOp:
    def emit(t: MilTranslation, node) -> list:
        x, y = _same_types(t, node, allowed)
        return [getattr(t.mb, mil_op)(x=x, y=y)]

    return OnnxOp(emit, opsets=(7, 10_000))  # opsets 1-6: broadcast/axis attributes


def _unary(mil_op: str, allowed: tuple[str, ...] = FLOATS, first: int = 6, **parameters) -> OnnxOp:
    """``mil_op(x, **parameters)``; ``first``: the first opset without the legacy ``consumed_inputs``."""

    def emit(t: MilTranslation, node) -> list:
        x = typed(t, node, 0, allowed)
        return [getattr(t.mb, mil_op)(x=x, **{k: like(v, x) for k, v in parameters.items()})]

    return OnnxOp(emit, opsets=(first, 10_000))


def _div(t: MilTranslation, node) -> list:
    """Floats: real_div. Integers: ONNX truncates toward zero, MIL's floor_div rounds down, so
    ``x / y = sign(x) * sign(y) * floor_div(|x|, |y|)``."""
    x, y = _same_types(t, node, NUMBERS)
    if mil_dtype(x) in FLOATS:
        return [t.mb.real_div(x=x, y=y)]
    mb = t.mb
    magnitude = mb.floor_div(x=mb.abs(x=x), y=mb.abs(x=y))
    return [mb.mul(x=magnitude, y=mb.mul(x=mb.sign(x=x), y=mb.sign(x=y)))]


def _mod(t: MilTranslation, node) -> list:
    """``fmod`` 0 (integers): MIL's ``mod``, the remainder with the divisor's sign, as ONNX. ``fmod`` 1: C's fmod,
    the remainder with the dividend's sign: ``sign(x) * mod(|x|, |y|)``."""
    x, y = _same_types(t, node, NUMBERS)
    fmod = int(t.attr(node, "fmod", 0))
    if not fmod:
        if mil_dtype(x) in FLOATS:
            t.refuse(node, "fmod 0 of floats, which ONNX does not define")
        return [t.mb.mod(x=x, y=y)]
    mb = t.mb
    return [mb.mul(x=mb.sign(x=x), y=mb.mod(x=mb.abs(x=x), y=mb.abs(x=y)))]


def _pow(t: MilTranslation, node) -> list:
    """x ** y. A one-element constant exponent that does not widen x: 1 is x, 2 is ``mul(x, x)``, 0.5 of a float
    is ``sqrt``; otherwise MIL's ``pow`` with the exponent in x's type (opset 12+ lets it differ: an integer
    exponent of a float base is converted; a float exponent of an integer base is refused)."""
    x = typed(t, node, 0, NUMBERS)
    exponent = t.value(node, 1)
    integer_base = mil_dtype(x) == "int32"
    if mil_dtype(exponent) not in NUMBERS or (integer_base and mil_dtype(exponent) != "int32"):
        t.refuse(node, f"a {mil_dtype(x)} base with a {mil_dtype(exponent)} exponent")
    if isinstance(exponent, np.ndarray):
        if exponent.size == 1 and exponent.ndim <= t.rank(x):
            e = float(exponent.reshape(-1)[0])
            if e == 1.0:
                return [x]
            if e == 2.0:
                return [t.mb.mul(x=x, y=x)]
            if e == 0.5 and not integer_base:
                return [t.mb.sqrt(x=x)]
        return [t.mb.pow(x=x, y=like(exponent, x))]
    if mil_dtype(exponent) != mil_dtype(x):
        exponent = t.mb.cast(x=exponent, dtype=mil_dtype(x))
    return [t.mb.pow(x=x, y=exponent)]


def _neg(t: MilTranslation, node) -> list:
    """-x as ``x * -1`` (integers too; -0.0 as ONNX gives it)."""
    x = typed(t, node, 0, NUMBERS)
    return [t.mb.mul(x=x, y=like(-1, x))]


def _relu(t: MilTranslation, node) -> list:
    """Floats: relu; integers (opset 14+): maximum(x, 0)."""
    x = typed(t, node, 0, NUMBERS)
    return [t.mb.relu(x=x) if mil_dtype(x) in FLOATS else t.mb.maximum(x=x, y=like(0, x))]


def _compare(mil_op: str) -> OnnxOp:
    """A comparison (bool result). Equal also takes bools: ``not(x xor y)``."""

    def emit(t: MilTranslation, node) -> list:
        x, y = _same_types(t, node, (*NUMBERS, "bool") if mil_op == "equal" else NUMBERS)
        if mil_dtype(x) == "bool":
            return [t.mb.logical_not(x=t.mb.logical_xor(x=x, y=y))]
        return [getattr(t.mb, mil_op)(x=x, y=y)]

    return OnnxOp(emit, opsets=(7, 10_000))


def _is_nan(t: MilTranslation, node) -> list:
    """NaN is the one value not equal to itself: ``not_equal(x, x)``."""
    x = typed(t, node, 0, FLOATS)
    return [t.mb.not_equal(x=x, y=x)]


def _is_inf(t: MilTranslation, node) -> list:
    """``equal`` to +inf and/or -inf (``detect_positive``, ``detect_negative``); neither: ``greater(x, x)``, false
    everywhere."""
    x = typed(t, node, 0, FLOATS)
    positive, negative = int(t.attr(node, "detect_positive", 1)), int(t.attr(node, "detect_negative", 1))
    if positive and negative:
        return [t.mb.equal(x=t.mb.abs(x=x), y=like(np.inf, x))]
    if positive or negative:
        return [t.mb.equal(x=x, y=like(np.inf if positive else -np.inf, x))]
    return [t.mb.greater(x=x, y=x)]


def _not(t: MilTranslation, node) -> list:
    return [t.mb.logical_not(x=typed(t, node, 0, ("bool",)))]


def _where(t: MilTranslation, node) -> list:
    """select(cond, a, b), broadcasting the three."""
    cond = typed(t, node, 0, ("bool",))
    a, b = (typed(t, node, k, (*NUMBERS, "bool")) for k in (1, 2))
    if mil_dtype(a) != mil_dtype(b):
        t.refuse(node, f"its values mix element types {mil_dtype(a)} and {mil_dtype(b)}")
    return [t.mb.select(cond=cond, a=a, b=b)]


def _cast(t: MilTranslation, node) -> list:
    """cast to ``to`` as MIL holds it: FLOAT fp32, FLOAT16 fp16, INT32 and INT64 int32, BOOL bool, DOUBLE fp32 (MIL
    has no float64; the package holds every float64 as fp32). Floats to integers truncate toward zero, non-zero is
    true, as in ONNX. ``saturate`` only concerns float8 targets, which are refused like every other type."""
    to = t.attr(node, "to")
    if to not in _CAST_TARGETS:
        t.refuse(node, f"cast to ONNX element type {to}, which MIL does not compute with")
    held = t.value(node, 0)
    x = held.var if isinstance(held, Narrow) else typed(t, node, 0, (*NUMBERS, "bool"))  # 8-bit: its int32 values
    target = _CAST_TARGETS[to]
    return [x if mil_dtype(x) == target else t.mb.cast(x=x, dtype=target)]


def _clip_bound(t: MilTranslation, node, k: int, name: str, x):
    """Clip's lower (k=1, ``min``) or upper (k=2, ``max``) bound in x's type, or None when it is absent: an
    attribute before opset 11, an optional input from 11."""
    if t.opset < 11:
        value = t.attr(node, name)
        return None if value is None else like(value, x)
    if not t.has(node, k):
        return None
    bound = t.value(node, k)
    if isinstance(bound, np.ndarray):
        return like(bound, x)
    return typed(t, node, k, (mil_dtype(x),))


def _clip(t: MilTranslation, node) -> list:
    """min(max(x, lo), hi) (all ``hi`` where lo >= hi, as ONNX says): MIL's clip for floats with both bounds
    constant and lo < hi (iOS17+ refuses the others), maximum/minimum otherwise (integers, one bound, bounds
    computed at run time)."""
    x = typed(t, node, 0, NUMBERS)
    lo, hi = _clip_bound(t, node, 1, "min", x), _clip_bound(t, node, 2, "max", x)
    constant = all(isinstance(b, np.ndarray) and b.size == 1 for b in (lo, hi))
    if constant and mil_dtype(x) in FLOATS and lo.item() < hi.item():
        return [t.mb.clip(x=x, alpha=lo.reshape(()), beta=hi.reshape(()))]
    out = x if lo is None else t.mb.maximum(x=x, y=lo)
    return [out if hi is None else t.mb.minimum(x=out, y=hi)]


def _variadic(mil_op: str, allowed: tuple[str, ...] = NUMBERS, mean: bool = False) -> OnnxOp:
    """Max/Min/Sum (and Mean: the sum divided by the count) of one or more inputs, broadcast."""

    def emit(t: MilTranslation, node) -> list:
        values = _same_types(t, node, allowed)
        out = values[0]
        for value in values[1:]:
            out = getattr(t.mb, mil_op)(x=out, y=value)
        return [t.mb.real_div(x=out, y=like(len(values), out)) if mean and len(values) > 1 else out]

    return OnnxOp(emit, opsets=(6, 10_000))


def _activation(build: Callable, defaults: dict, first: int = 6) -> OnnxOp:
    """A float activation ``build(mb, x, **attributes)`` with the ONNX attributes' ``defaults``."""

    def emit(t: MilTranslation, node) -> list:
        x = typed(t, node, 0, FLOATS)
        values = {name: like(t.attr(node, name, default), x) for name, default in defaults.items()}
        return [build(t.mb, x, **values)]

    return OnnxOp(emit, frozenset(defaults), opsets=(first, 10_000))


def _selu(mb, x, alpha, gamma):
    """gamma * (x if x > 0 else alpha * (e^x - 1)) = gamma * elu(x, alpha)."""
    return mb.mul(x=mb.elu(x=x, alpha=alpha), y=gamma)


def _celu(mb, x, alpha):
    """x if x >= 0 else alpha * (e^(x/alpha) - 1) = alpha * elu(x / alpha, 1)."""
    return mb.mul(x=mb.elu(x=mb.real_div(x=x, y=alpha), alpha=like(1, x)), y=alpha)


def _thresholded_relu(mb, x, alpha):
    """x if x > alpha else 0 (MIL's thresholded_relu keeps x == alpha, ONNX does not): a select."""
    return mb.select(cond=mb.greater(x=x, y=alpha), a=x, b=like(0, x))


def _hard_swish(mb, x):
    """x * max(0, min(1, x / 6 + 1/2))."""
    return mb.mul(x=x, y=mb.sigmoid_hard(x=x, alpha=like(1 / 6, x), beta=like(0.5, x)))


def _mish(mb, x):
    """x * tanh(softplus(x))."""
    return mb.mul(x=x, y=mb.tanh(x=mb.softplus(x=x)))


def _gelu(t: MilTranslation, node) -> list:
    """gelu: ``approximate`` 'none' is MIL's EXACT mode, 'tanh' its TANH_APPROXIMATION (the same formula)."""
    approximate = t.attr(node, "approximate", "none")
    modes = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}
    if approximate not in modes:
        t.refuse(node, f"approximate {approximate!r}")
    return [t.mb.gelu(x=typed(t, node, 0, FLOATS), mode=modes[approximate])]


def _per_channel(slope: np.ndarray, shape: tuple) -> bool:
    """Whether ``slope``, broadcast to a rank-4 ``shape``, varies along axis 1 only with ``shape[1]`` entries."""
    aligned = (1,) * (4 - slope.ndim) + slope.shape
    return (
        len(shape) == 4 and slope.ndim <= 4 and aligned[1] == shape[1] and aligned[0] == aligned[2] == aligned[3] == 1
    )


def _prelu(t: MilTranslation, node) -> list:
    """x if x >= 0 else slope * x, the slope broadcast to x (unidirectionally). A one-value constant slope is MIL's
    leaky_relu; a constant slope of one value per channel of a rank-4 x is MIL's prelu (which holds no other
    shape: rank 3 and 5 only with equal values); any other slope, or integers: ``select(x < 0, x * slope, x)``."""
    x = typed(t, node, 0, NUMBERS)
    slope = t.value(node, 1)
    if isinstance(slope, np.ndarray) and mil_dtype(x) in FLOATS:
        if slope.size == 1 and slope.ndim <= t.rank(x):
            return [t.mb.leaky_relu(x=x, alpha=like(slope.reshape(-1)[0], x))]
        if _per_channel(slope, t.shape(x)):
            return [t.mb.prelu(x=x, alpha=like(slope.reshape(-1), x))]
    slope = like(slope, x) if isinstance(slope, np.ndarray) else typed(t, node, 1, (mil_dtype(x),))
    return [t.mb.select(cond=t.mb.less(x=x, y=like(0, x)), a=t.mb.mul(x=x, y=slope), b=x)]


_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875

TABLE: dict[str, OnnxOp] = {
    "Add": _binary("add"),
    "Sub": _binary("sub"),
    "Mul": _binary("mul"),
    "Div": OnnxOp(_div, opsets=(7, 10_000)),
    "Pow": OnnxOp(_pow, opsets=(7, 10_000)),
    "Mod": OnnxOp(_mod, frozenset({"fmod"}), opsets=(10, 10_000)),
    "Neg": OnnxOp(_neg, opsets=(6, 10_000)),
    "Abs": _unary("abs", NUMBERS),
    "Sign": _unary("sign", NUMBERS, first=9),
    "Sqrt": _unary("sqrt"),
    "Exp": _unary("exp"),
    "Log": _unary("log", epsilon=0.0),  # MIL's default adds 1e-45: log(0) is -inf in ONNX
    "Reciprocal": _unary("inverse", epsilon=0.0),  # MIL's default adds 1e-4
    "Erf": _unary("erf", first=9),
    "Floor": _unary("floor"),
    "Ceil": _unary("ceil"),
    "Round": _unary("round", first=11),  # halves to even in both
    "Sin": _unary("sin", first=7),
    "Cos": _unary("cos", first=7),
    "Tan": _unary("tan", first=7),
    "Asin": _unary("asin", first=7),
    "Acos": _unary("acos", first=7),
    "Atan": _unary("atan", first=7),
    "Sinh": _unary("sinh", first=9),
    "Cosh": _unary("cosh", first=9),
    "Atanh": _unary("atanh", first=9),
    "Max": _variadic("maximum"),
    "Min": _variadic("minimum"),
    "Sum": _variadic("add"),
    "Mean": _variadic("add", FLOATS, mean=True),
    "Equal": _compare("equal"),
    "Greater": _compare("greater"),
    "GreaterOrEqual": _compare("greater_equal"),
    "Less": _compare("less"),
    "LessOrEqual": _compare("less_equal"),
    "IsNaN": OnnxOp(_is_nan, opsets=(9, 10_000)),
    "IsInf": OnnxOp(_is_inf, frozenset({"detect_positive", "detect_negative"}), opsets=(10, 10_000)),
    "Not": OnnxOp(_not),
    "And": _binary("logical_and", ("bool",)),
    "Or": _binary("logical_or", ("bool",)),
    "Xor": _binary("logical_xor", ("bool",)),
    "Where": OnnxOp(_where, opsets=(9, 10_000)),
    "Cast": OnnxOp(_cast, frozenset({"to", "saturate"}), opsets=(6, 10_000)),
    "Clip": OnnxOp(_clip, frozenset({"min", "max"}), opsets=(6, 10_000)),
    "Relu": OnnxOp(_relu, opsets=(6, 10_000)),
    "Sigmoid": _unary("sigmoid"),
    "Tanh": _unary("tanh"),
    "Softplus": _unary("softplus", first=1),
    "Softsign": _unary("softsign", first=1),
    "LeakyRelu": _activation(lambda mb, x, alpha: mb.leaky_relu(x=x, alpha=alpha), {"alpha": 0.01}),
    "Elu": _activation(lambda mb, x, alpha: mb.elu(x=x, alpha=alpha), {"alpha": 1.0}),
    "HardSigmoid": _activation(
        lambda mb, x, alpha, beta: mb.sigmoid_hard(x=x, alpha=alpha, beta=beta), {"alpha": 0.2, "beta": 0.5}
    ),
    "Selu": _activation(_selu, {"alpha": _SELU_ALPHA, "gamma": _SELU_GAMMA}),
    "Celu": _activation(_celu, {"alpha": 1.0}, first=12),
    "ThresholdedRelu": _activation(_thresholded_relu, {"alpha": 1.0}, first=10),
    "HardSwish": _activation(_hard_swish, {}, first=14),
    "Mish": _activation(_mish, {}, first=18),
    "Gelu": OnnxOp(_gelu, frozenset({"approximate"}), opsets=(20, 10_000)),
    "PRelu": OnnxOp(_prelu, opsets=(7, 10_000)),
}

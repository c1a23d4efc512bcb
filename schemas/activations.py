"""Activation vocabulary shared by every format.

The eleven activations of the ONNX recurrent operators (GRU, RNN, LSTM), with their parameters:

=================  =====================================  ===========  ================================
canonical name     formula                                 parameters   onnxruntime CPU default (ONNX)
=================  =====================================  ===========  ================================
Relu               max(0, x)                               -            -
Tanh               tanh(x)                                 -            -
Sigmoid            1 / (1 + e^-x)                          -            -
Affine             alpha * x + beta                        alpha, beta  0, 0        (1.0, 0.0)
LeakyRelu          x if x >= 0 else alpha * x              alpha        0.01        (0.01)
ThresholdedRelu    x if x > alpha else 0                   alpha        0.0         (1.0)
ScaledTanh         alpha * tanh(beta * x)                  alpha, beta  0, 0        (none)
HardSigmoid        min(max(alpha * x + beta, 0), 1)        alpha, beta  0.2, 0.5    (0.2, 0.5)
Elu                x if x >= 0 else alpha * (e^x - 1)      alpha        1.0         (1.0)
Softsign           x / (1 + |x|)                           -            -
Softplus           log(1 + e^x)                            -            -
=================  =====================================  ===========  ================================

``activation_alpha`` and ``activation_beta`` are two independent stacks consumed in activation order,
popped only by the activations that take that parameter (onnxruntime, ``rnn_helpers.cc``).
When a stack runs out, the default applies - and the defaults differ between runtimes for
ThresholdedRelu, ScaledTanh and Affine (docs/conventions.md §2). gatepack resolves them as
onnxruntime does by default (the runtime a model was most likely validated with) and reports that
the model relied on an ambiguous default; ``DefaultsPolicy.ONNX`` uses the ONNX operator defaults.
Everything gatepack writes carries explicit values.

The NumPy implementations are numerically stable: no overflow for inputs like +-1e20.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np


class DefaultsPolicy(str, enum.Enum):
    """Where missing activation parameters come from."""

    ONNXRUNTIME = "onnxruntime"  # what onnxruntime's CPU provider uses (the default)
    ONNX = "onnx"  # the defaults of the ONNX operators of the same name


@dataclass(frozen=True)
class ActivationKind:
    """One activation function: its canonical (ONNX) name and the parameters it takes."""

    name: str
    takes_alpha: bool = False
    takes_beta: bool = False
    # Defaults per policy as (alpha, beta); None where that source has no default.
    ort_default: tuple[float | None, float | None] = (None, None)
    onnx_default: tuple[float | None, float | None] = (None, None)

    @property
    def ambiguous_default(self) -> bool:
        """True when runtimes disagree on a missing parameter's value."""
        return self.ort_default != self.onnx_default


KINDS: dict[str, ActivationKind] = {
    k.name: k
    for k in (
        ActivationKind("Relu"),
        ActivationKind("Tanh"),
        ActivationKind("Sigmoid"),
        ActivationKind("Affine", True, True, (0.0, 0.0), (1.0, 0.0)),
        ActivationKind("LeakyRelu", True, False, (0.01, None), (0.01, None)),
        ActivationKind("ThresholdedRelu", True, False, (0.0, None), (1.0, None)),
        ActivationKind("ScaledTanh", True, True, (0.0, 0.0), (None, None)),
        ActivationKind("HardSigmoid", True, True, (0.2, 0.5), (0.2, 0.5)),
        ActivationKind("Elu", True, False, (1.0, None), (1.0, None)),
        ActivationKind("Softsign"),
        ActivationKind("Softplus"),
    )
}
_BY_LOWER = {name.lower(): name for name in KINDS}


def canonical_name(name: str) -> str | None:
    """The canonical spelling of an activation name (case-insensitive), or None if unknown."""
    return _BY_LOWER.get(name.lower())


@dataclass(frozen=True)
class Activation:
    """An activation with every parameter it takes set explicitly (None for parameters it lacks)."""

    name: str
    alpha: float | None = None
    beta: float | None = None

    def __post_init__(self) -> None:
        kind = KINDS.get(self.name)
        if kind is None:
            raise ValueError(f"unknown activation {self.name!r} (known: {', '.join(KINDS)})")
        for pname, takes, value in (("alpha", kind.takes_alpha, self.alpha), ("beta", kind.takes_beta, self.beta)):
            if takes and value is None:
                raise ValueError(f"activation {self.name} needs an explicit {pname}")
            if not takes and value is not None:
                raise ValueError(f"activation {self.name} takes no {pname} (got {value})")

    @property
    def kind(self) -> ActivationKind:
        return KINDS[self.name]

    def __str__(self) -> str:
        params = [f"{p}={v:g}" for p, v in (("alpha", self.alpha), ("beta", self.beta)) if v is not None]
        return f"{self.name}({', '.join(params)})" if params else self.name

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return _FUNCTIONS[self.name](x, self.alpha, self.beta)


@dataclass(frozen=True)
class ResolvedDefault:
    """A parameter that the source left out and gatepack filled in."""

    activation: str
    parameter: str
    value: float
    ambiguous: bool  # runtimes disagree on this default
    other_value: float | None  # the value under the other policy (None: that policy has none)


def resolve_activations(
    names: Sequence[str],
    alphas: Sequence[float],
    betas: Sequence[float],
    policy: DefaultsPolicy = DefaultsPolicy.ONNXRUNTIME,
) -> tuple[list[Activation], list[ResolvedDefault]]:
    """Turn ONNX ``activations`` / ``activation_alpha`` / ``activation_beta`` into explicit activations.

    Names must already be canonical. Returns the activations and the defaults that were filled in.
    Raises ValueError for a parameter that has no default under ``policy``.
    """
    alpha_iter: Iterator[float] = iter(alphas)
    beta_iter: Iterator[float] = iter(betas)
    out: list[Activation] = []
    filled: list[ResolvedDefault] = []
    for name in names:
        kind = KINDS[name]
        values: dict[str, float | None] = {"alpha": None, "beta": None}
        for index, (pname, takes, stack) in enumerate(
            (("alpha", kind.takes_alpha, alpha_iter), ("beta", kind.takes_beta, beta_iter))
        ):
            if not takes:
                continue
            given = next(stack, None)
            if given is not None:
                values[pname] = float(given)
                continue
            ort_value = kind.ort_default[index]
            onnx_value = kind.onnx_default[index]
            value = ort_value if policy is DefaultsPolicy.ONNXRUNTIME else onnx_value
            other = onnx_value if policy is DefaultsPolicy.ONNXRUNTIME else ort_value
            if value is None:
                raise ValueError(
                    f"{name} has no {pname} and the ONNX operator defines no default for it "
                    f"(onnxruntime uses {ort_value:g}; use the onnxruntime defaults policy or set {pname})"
                )
            values[pname] = value
            filled.append(ResolvedDefault(name, pname, value, ort_value != onnx_value, other))
        out.append(Activation(name, values["alpha"], values["beta"]))
    return out, filled


def _sigmoid(x: np.ndarray, _a: float | None, _b: float | None) -> np.ndarray:
    # 1 / (1 + e^-x) = (1 + tanh(x / 2)) / 2: tanh never overflows, and it is 4 array operations
    # (the executor calls this at every time step); absolute error ~1 ulp of 0.5.
    out = np.multiply(x, 0.5)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _softplus(x: np.ndarray, _a: float | None, _b: float | None) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _elu(x: np.ndarray, alpha: float | None, _b: float | None) -> np.ndarray:
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _cast(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Keep the input dtype (Python float parameters would otherwise promote float16/float32)."""
    return lambda x, a, b: np.asarray(fn(x, a, b), dtype=x.dtype)


_FUNCTIONS: dict[str, Callable[[np.ndarray, float | None, float | None], np.ndarray]] = {
    name: _cast(fn)
    for name, fn in {
        "Relu": lambda x, a, b: np.maximum(x, 0),
        "Tanh": lambda x, a, b: np.tanh(x),
        "Sigmoid": _sigmoid,
        "Affine": lambda x, a, b: a * x + b,
        "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
        "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0),
        "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
        "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
        "Elu": _elu,
        "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
        "Softplus": _softplus,
    }.items()
}

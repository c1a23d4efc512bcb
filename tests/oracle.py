"""An independent float64 oracle for one ONNX GRU/RNN node: a plain per-sequence, per-step loop
written from the ONNX operator specification (docs/conventions.md §2), sharing no code with
gatepack's executor (which is vectorised over the batch, folds biases and masks lengths).

onnxruntime has no float64 GRU/RNN kernel, so float64 configurations are checked against this at
float64 tolerance instead of against onnxruntime's float32 results.
"""

from __future__ import annotations

import math

import numpy as np
from helpers import ACTIVATIONS, Config, weights

# onnxruntime CPU's values for a parameter the model leaves out (docs/conventions.md §2 table).
ORT_DEFAULTS = {
    "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (0.0, None),
    "ScaledTanh": (0.0, 0.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0, None),
    "Affine": (0.0, 0.0),
}
DEFAULT_NAMES = {"GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


def _function(name: str, alpha: float | None, beta: float | None):
    """The ONNX activation ``name`` on one scalar."""
    return {
        "Relu": lambda v: max(v, 0.0),
        "Tanh": math.tanh,
        "Sigmoid": _sigmoid,
        "Affine": lambda v: alpha * v + beta,
        "LeakyRelu": lambda v: v if v >= 0 else alpha * v,
        "ThresholdedRelu": lambda v: v if v > alpha else 0.0,
        "ScaledTanh": lambda v: alpha * math.tanh(beta * v),
        "HardSigmoid": lambda v: max(0.0, min(1.0, alpha * v + beta)),
        "Elu": lambda v: v if v >= 0 else alpha * (math.exp(v) - 1),
        "Softsign": lambda v: v / (1 + abs(v)),
        "Softplus": lambda v: max(v, 0.0) + math.log1p(math.exp(-abs(v))),
    }[name]


def _attribute(value: float) -> float:
    """A FLOAT attribute's value as the model holds it (float32)."""
    return float(np.float32(value))


def activations(cfg: Config) -> list[list]:
    """Per direction, the scalar activation functions, parameters popped from the two stacks in order."""
    names = cfg.activations or DEFAULT_NAMES[cfg.cell] * cfg.D
    alphas, betas = list(cfg.alphas or []), list(cfg.betas or [])
    funcs = []
    for name in names:
        takes_alpha, takes_beta = ACTIVATIONS[name]
        default_alpha, default_beta = ORT_DEFAULTS.get(name, (None, None))
        alpha = _attribute(alphas.pop(0)) if takes_alpha and alphas else default_alpha
        beta = _attribute(betas.pop(0)) if takes_beta and betas else default_beta
        funcs.append(np.vectorize(_function(name, alpha, beta), otypes=[np.float64]))
    per = len(DEFAULT_NAMES[cfg.cell])
    return [funcs[d * per : (d + 1) * per] for d in range(cfg.D)]


def reference(cfg: Config, feed0: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(Y [S,D,N,H], Y_h [D,N,H]) in float64 from layout-0 inputs ``feed0``."""
    w = {k: v.astype(np.float64) for k, v in weights(cfg).items()}
    x = feed0["X"].astype(np.float64)
    s, n, h = x.shape[0], x.shape[1], cfg.H
    lens = feed0.get("sequence_lens", np.full(n, s))
    h0 = feed0.get("initial_h", np.zeros((cfg.D, n, h))).astype(np.float64)
    acts = activations(cfg)
    clip = _attribute(cfg.clip) if cfg.clip is not None and cfg.clip >= 0 else None
    y, y_h = np.zeros((s, cfg.D, n, h)), np.zeros((cfg.D, n, h))
    g = cfg.G
    for d in range(cfg.D):
        wd, rd = w["W"][d], w["R"][d]
        b = w["B"][d] if "B" in w else np.zeros(2 * g * h)
        wb, rb = b[: g * h], b[g * h :]
        reverse = cfg.direction == "reverse" or d == 1
        for k in range(n):
            state = h0[d, k].copy()
            length = int(lens[k])
            steps = range(length - 1, -1, -1) if reverse else range(length)
            for t in steps:
                state = _step(cfg, acts[d], clip, x[t, k], state, wd, rd, wb, rb, h)
                y[t, d, k] = state
            y_h[d, k] = state if length else 0.0
    return y, y_h


def _step(cfg: Config, acts: list, clip, xt, state, wd, rd, wb, rb, h):
    def bound(v):
        return np.clip(v, -clip, clip) if clip is not None else v

    if cfg.cell == "RNN":
        (f,) = acts
        return f(bound(wd @ xt + rd @ state + wb + rb))
    f, gfun = acts
    blocks = [slice(0, h), slice(h, 2 * h), slice(2 * h, 3 * h)]  # z, r, h
    z = f(bound(wd[blocks[0]] @ xt + rd[blocks[0]] @ state + wb[blocks[0]] + rb[blocks[0]]))
    r = f(bound(wd[blocks[1]] @ xt + rd[blocks[1]] @ state + wb[blocks[1]] + rb[blocks[1]]))
    if cfg.lbr:
        cand = gfun(bound(wd[blocks[2]] @ xt + r * (rd[blocks[2]] @ state + rb[blocks[2]]) + wb[blocks[2]]))
    else:
        cand = gfun(bound(wd[blocks[2]] @ xt + rd[blocks[2]] @ (r * state) + rb[blocks[2]] + wb[blocks[2]]))
    return (1 - z) * cand + z * state

"""An independent float64 oracle for one ONNX GRU/RNN/LSTM node: a plain per-sequence, per-step loop
written from the ONNX operator specification (docs/conventions.md §2), sharing no code with
gatepack's executor (which is vectorised over the batch, folds biases and masks lengths).

onnxruntime has no float64 GRU/RNN/LSTM kernel, so float64 configurations are checked against this at
float64 tolerance instead of against onnxruntime's float32 results.
"""

from __future__ import annotations

import math

import numpy as np
from helpers import ACTIVATIONS, Config, ort_reference, outputs_to_layout0, weights

# onnxruntime CPU's values for a parameter the model leaves out (docs/conventions.md §2 table).
ORT_DEFAULTS = {
    "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (0.0, None),
    "ScaledTanh": (0.0, 0.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0, None),
    "Affine": (0.0, 0.0),
}
DEFAULT_NAMES = {"GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


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


def reference(cfg: Config, feed0: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(Y [S,D,N,H], Y_h [D,N,H]) in float64 from layout-0 inputs ``feed0``; LSTM: and Y_c [D,N,H]."""
    if cfg.cell == "LSTM":
        return _lstm_reference(cfg, feed0)
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


def _lstm_reference(cfg: Config, feed0: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ONNX LSTM, one sequence and one step at a time: gates i, o, f, c in W, R and each half of
    B; peepholes P = (i, o, f), the output gate's reading the new cell state; clip on every
    pre-activation; input_forget: f = 1 - i; states kept past a sequence's end, 0 for an empty one."""
    w = {k: v.astype(np.float64) for k, v in weights(cfg).items()}
    x = feed0["X"].astype(np.float64)
    s, n, h = x.shape[0], x.shape[1], cfg.H
    lens = feed0.get("sequence_lens", np.full(n, s))
    h0 = feed0.get("initial_h", np.zeros((cfg.D, n, h))).astype(np.float64)
    c0 = feed0.get("initial_c", np.zeros((cfg.D, n, h))).astype(np.float64)
    acts = activations(cfg)
    clip = _attribute(cfg.clip) if cfg.clip is not None else None

    def bound(v):
        return np.clip(v, -clip, clip) if clip is not None else v

    y, y_h, y_c = np.zeros((s, cfg.D, n, h)), np.zeros((cfg.D, n, h)), np.zeros((cfg.D, n, h))
    block = {gate: slice(k * h, (k + 1) * h) for k, gate in enumerate("iofc")}
    for d in range(cfg.D):
        f, g, hfun = acts[d]
        b = w["B"][d] if "B" in w else np.zeros(8 * h)
        bias = b[: 4 * h] + b[4 * h :]
        p = w["P"][d] if "P" in w else np.zeros(3 * h)
        p_i, p_o, p_f = p[:h], p[h : 2 * h], p[2 * h :]
        reverse = cfg.direction == "reverse" or d == 1
        for k in range(n):
            hs, cs = h0[d, k].copy(), c0[d, k].copy()
            length = int(lens[k])
            for t in range(length - 1, -1, -1) if reverse else range(length):
                pre = {q: w["W"][d][block[q]] @ x[t, k] + w["R"][d][block[q]] @ hs + bias[block[q]] for q in "iofc"}
                i = f(bound(pre["i"] + p_i * cs))
                forget = 1 - i if cfg.input_forget else f(bound(pre["f"] + p_f * cs))
                cs = forget * cs + i * g(bound(pre["c"]))
                o = f(bound(pre["o"] + p_o * cs))
                hs = o * hfun(cs)
                y[t, d, k] = hs
            y_h[d, k], y_c[d, k] = (hs, cs) if length else (0.0, 0.0)
    return y, y_h, y_c


# ------------------------------------------------------------------ LSTM outputs against the oracle


def expected_outputs(cfg: Config, feed0: dict) -> tuple[np.ndarray, ...]:
    """Y, Y_h (LSTM: and Y_c) in layout 0: onnxruntime's (float32 for float16 sources: the conversion is exact),
    or this float64 transcription for float64 (onnxruntime has no float64 kernel)."""
    return reference(cfg, feed0) if cfg.dtype == "float64" else ort_reference(cfg, feed0)


DIVERGED = 1e3  # |value| no LSTM with saturating activations reaches here; only unbounded gates and cells do


def assert_close(cfg: Config, ours: tuple, expected: tuple, atol: float, rtol: float, dtype: str = "") -> None:
    """``ours`` agrees with ``expected`` (an LSTM's Y, Y_h, Y_c in layout 0). Entries the oracle could not represent
    (inf/NaN, or beyond float16's range for a float16 computation) are skipped, if few. A sequence whose values
    diverged (unbounded gates and cells: Relu, Affine ...) carries the rounding of its huge
    intermediates into every later value, in any two implementations; there the bound is relative to
    the largest value the sequence reached (1e-6 of it), and it stays tight everywhere else."""
    assert len(ours) == len(expected) == 3
    expected = [np.asarray(b, np.float64) for b in expected]
    magnitude = np.nan_to_num(np.abs(expected[0]), posinf=0, nan=0).max(axis=(0, 3))  # [D, N] per sequence
    for final in expected[1:]:
        magnitude = np.maximum(magnitude, np.nan_to_num(np.abs(final), posinf=0, nan=0).max(axis=2))
    slack = np.where(magnitude > DIVERGED, 1e-6 * magnitude, 0.0)
    for role, a, b in zip(("Y", "Y_h", "Y_c"), ours, expected):
        representable = np.isfinite(b) & (np.abs(b) < (6e4 if dtype == "float16" else np.inf))
        assert representable.mean() >= 0.5, f"{role}: the oracle overflowed on most of this case"
        bound = atol + (slack[None, :, :, None] if role == "Y" else slack[:, :, None])
        a = np.asarray(a, np.float64)
        bad = representable & ~(np.abs(a - b) <= bound + rtol * np.abs(b))
        assert not bad.any(), (
            f"{role}: {int(bad.sum())} of {b.size} differ, worst {np.abs(a - b)[bad].max():.3g} "
            f"(ours {a[bad][:3]}, expected {b[bad][:3]})"
        )


def assert_lstm_matches_the_oracle(cfg: Config, feed0: dict, outputs: dict, atol: float, rtol: float) -> None:
    """An LSTM's ``outputs`` (Y, Y_h, Y_c by name, in the config's layout) agree with ``expected_outputs`` on the
    layer-0 inputs ``feed0`` (``assert_close``)."""
    ours = outputs_to_layout0(cfg, *(outputs[name] for name in ("Y", "Y_h", "Y_c")))
    assert_close(cfg, ours, expected_outputs(cfg, feed0), atol, rtol, cfg.dtype)

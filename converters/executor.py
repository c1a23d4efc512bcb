"""Vectorised NumPy executor of the canonical GRU/RNN/LSTM layer, with the complete ONNX semantics.

It is the oracle-independent reference gatepack checks every format against, and it follows
onnxruntime wherever the ONNX specification leaves room (docs/conventions.md §2):

* equations: see ``schemas.layer`` (GRU z, r, h with the reset before or after the matmul; LSTM
  i, o, f, c with peepholes i, o, f, the output gate's reading the new cell state);
* ``clip`` bounds every gate's pre-activation sum, biases included, before its activation;
* ``sequence_lens``: Y is zero past each sequence's length in every direction; the reverse
  direction starts at ``t = len - 1`` from ``initial_h``; Y_h (and Y_c) is the state after the last
  valid step, and 0 (not the initial state) for ``len = 0``;
* a per-step hold (``Interface.mask`` m [S,N], Keras masking): where m[t, n] is false row n's states keep
  their value at that step and Y[t] is the held h (``schemas.layer``); the reverse direction holds in its
  own processing order;
* the reverse direction's Y is aligned to input time (Y[t] is the state after consuming x[t]);
* layout 0: X [S,N,I], initial_h / Y_h [D,N,H], Y [S,D,N,H];
  layout 1: X [N,S,I], initial_h / Y_h [N,D,H], Y [N,S,D,H];
* float16 is computed in float32 and rounded once at the end; float32 and float64 in their own type;
* a layer whose W and R are LiteRT's hybrid int8 records (``converters.hybrid``) multiplies them as LiteRT's
  kernels do, X and h quantized per row at run time; every other quantized layer runs its float view.

Cost: one matmul per direction projects every time step's input (``X @ W^T``); each step does one
recurrent matmul (two for GRU with reset-before, whose candidate needs ``r * h`` first; one [N, 4H]
for LSTM). Sequence
lengths are masks over the batch, never Python loops over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gatepack.converters.errors import InputError, UsageError, where
from gatepack.converters.hybrid import HybridRows, products
from gatepack.converters.model import Model
from gatepack.schemas.cells import Cell, resolved, spec_of
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    PERM_Y_TO_BATCH_MAJOR,
    RecurrentLayer,
)


def run_model(model: Model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every layer of a layers-only model on named inputs; return its named outputs."""
    other = model.meta.get("other_ops")
    if other:
        raise UsageError(
            f"{model.path}: the numpy engine runs recurrent layers only, and this model also has "
            f"{', '.join(other)} nodes",
            hint="use --engine native, or convert the model first (the result holds only its recurrent layers)",
        )
    outputs: dict[str, np.ndarray] = {}
    for layer in model.layers:
        itf = layer.interface
        feed = layer_feed(model, layer, inputs)
        optional = {role: feed[getattr(itf, role)] for role in layer.fed_roles() if getattr(itf, role) is not None}
        results = run_layer(layer, feed[itf.x], **optional, mask=feed.get(itf.mask or ""))
        for role, value in zip(OUTPUT_ROLES, results):
            if getattr(itf, role):
                outputs[getattr(itf, role)] = value
    return outputs


def layer_feed(model: Model, layer: RecurrentLayer, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The tensors of ``inputs`` that ``layer`` of ``model`` takes (X and every input it does not hold as a
    constant), by its interface's names; InputError naming one that is missing."""
    itf = layer.interface
    if itf.x not in inputs:
        raise InputError(
            f"{where(model.path, layer.name)}input {itf.x!r} is missing", hint=f"inputs given: {sorted(inputs)}"
        )
    feed = {itf.x: inputs[itf.x]}
    for role in layer.fed_roles():
        name = getattr(itf, role)
        if name is not None:
            if name not in inputs:
                raise InputError(f"{where(model.path, layer.name)}input {name!r} ({role}) is missing")
            feed[name] = inputs[name]
    if itf.mask is not None:
        if itf.mask not in inputs:
            raise InputError(f"{where(model.path, layer.name)}input {itf.mask!r} (its per-step mask) is missing")
        feed[itf.mask] = inputs[itf.mask]
    return feed


def run_layer(
    layer: RecurrentLayer,
    x: np.ndarray,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """Run ``layer`` on inputs in its own layout (``mask``: its per-step hold, [S,N] or [S,N,1], which a
    layer with ``Interface.mask`` needs); return its outputs in that layout and dtype, in the order of an ONNX
    node's outputs: ``(Y, Y_h)``, and ``(Y, Y_h, Y_c)`` for LSTM."""
    x, sequence_lens, initial_h, initial_c = check_layer_inputs(layer, x, sequence_lens, initial_h, initial_c)
    seq_axis = layer.interface.layout  # X [S,N,I] or [N,S,I]
    hold = check_mask(layer, mask, batch=x.shape[1 - seq_axis], seq_len=x.shape[seq_axis])
    states = [initial_h, initial_c]
    if layer.interface.layout == 1:
        x = x.transpose(PERM_SWAP_01)  # -> [S, N, I]
        states = [None if s is None else s.transpose(PERM_SWAP_01) for s in states]  # -> [D, N, H]
    hybrid = products(layer)  # LiteRT's int8 records: their hybrid products, as its kernels compute them
    weights = [(p.W, p.R) if hybrid is None else hybrid[d] for d, p in enumerate(layer.directions)]
    y, *finals = run_recurrence(
        layer.cell,
        [(*weights[d], p.Wb, p.Rb, p.activations) for d, p in enumerate(layer.directions)],
        reverse=[layer.direction.value == "reverse" or d == 1 for d in range(layer.num_directions)],
        x=x,
        sequence_lens=sequence_lens,
        initial_h=states[0],
        initial_c=states[1],
        options=CellOptions.of(layer),
        clip=layer.clip,
        dtype=layer.dtype,
        hold=hold,
    )
    if layer.interface.layout == 1:
        y, finals = y.transpose(PERM_Y_TO_BATCH_MAJOR), [s.transpose(PERM_SWAP_01) for s in finals]
    return (y, *finals)


@dataclass(frozen=True)
class CellOptions:
    """What only some cells have (the cell table's flags): GRU's reset placement, LSTM's peepholes
    (per direction, [3H] in the order i, o, f, or None) and input/forget coupling."""

    linear_before_reset: bool = False
    input_forget: bool = False
    peepholes: tuple[np.ndarray | None, ...] = ()

    @classmethod
    def of(cls, layer: RecurrentLayer) -> "CellOptions":
        return cls(layer.linear_before_reset, layer.input_forget, tuple(p.P for p in layer.directions))

    def peephole(self, direction: int) -> np.ndarray | None:
        return self.peepholes[direction] if direction < len(self.peepholes) else None


Matrix = np.ndarray | HybridRows  # W or R: floats, or LiteRT's int8 rows multiplied as its hybrid kernels do
Weights = tuple[Matrix, Matrix, np.ndarray, np.ndarray, Sequence[Callable[[np.ndarray], np.ndarray]]]


def run_recurrence(
    cell: Cell,
    directions: Sequence[Weights],
    *,
    reverse: Sequence[bool],
    x: np.ndarray,
    sequence_lens: np.ndarray | None,
    initial_h: np.ndarray | None,
    initial_c: np.ndarray | None = None,
    options: CellOptions = CellOptions(),
    clip: float | None = None,
    dtype: np.dtype = np.dtype(np.float32),
    hold: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """The recurrence itself, sequence-major and format-neutral (inputs already checked).

    ``directions`` holds ``(W [G*H,I], R [G*H,H], Wb, Rb, activations)`` per direction, in ONNX gate
    order, with any callables as activations (so a format's executor passes its own activation
    semantics). X is [S,N,I], ``initial_h`` and ``initial_c`` [D,N,H]; returns Y [S,D,N,H] and each
    final state [D,N,H] of the cell table's ``states`` (Y_h; and Y_c for LSTM) in ``dtype``. ``hold`` [S,N]
    bool: the per-step hold (module docstring); never given with ``sequence_lens``.
    """
    dtype = np.dtype(dtype)
    compute = np.dtype(np.float32) if dtype == np.float16 else dtype
    x = np.asarray(x, dtype=compute)
    seq_len, batch = x.shape[0], x.shape[1]
    hidden = directions[0][1].shape[1]
    states = spec_of(cell).states
    y = np.zeros((seq_len, len(directions), batch, hidden), dtype=compute)
    finals = [np.zeros((len(directions), batch, hidden), dtype=compute) for _ in states]
    lens = None
    if sequence_lens is not None and not np.all(np.asarray(sequence_lens) == seq_len):
        lens = np.asarray(sequence_lens).astype(np.int64)
    make_step = _step_builder(cell)
    initial = {"h": initial_h, "c": initial_c}
    for d, (w, r, wb, rb, activations) in enumerate(directions):
        start = tuple(
            np.zeros((batch, hidden), compute) if (state := initial[s]) is None else np.asarray(state[d], compute)
            for s in states
        )
        peephole = options.peephole(d)
        step, additive_rb = make_step(
            hidden,
            activations,
            r.astype(compute, copy=False),
            rb.astype(compute, copy=False),
            _clipper(clip),
            options,
            None if peephole is None else peephole.astype(compute, copy=False),
        )
        xw = _input_projection(x, w, wb.astype(compute, copy=False) + additive_rb, compute)
        # A divergent recurrence (e.g. Relu gates) overflows to inf (and inf - inf to NaN) as in
        # every runtime; that is the arithmetic, not a fault to warn about. The activations are
        # stable, so saturating cells stay finite for any input.
        with np.errstate(over="ignore", invalid="ignore"):
            run = _run_direction(step, xw, lens, start, reverse[d], y[:, d], hold)
            for final, value in zip(finals, run):
                final[d] = value
    return (y.astype(dtype, copy=False), *(f.astype(dtype, copy=False) for f in finals))


def _input_projection(x: np.ndarray, w: Matrix, bias: np.ndarray, compute: np.dtype) -> np.ndarray:
    """Every time step's input projection at once, [S*N, I] @ [I, G*H] -> [S, N, G*H] in ``compute`` (a hybrid W's
    as its kernels compute it: ``HybridRows``), plus ``bias`` (Wb and the recurrent biases that only add to it,
    folded in: fewer operations per step)."""
    seq_len, batch = x.shape[0], x.shape[1]
    flat = x.reshape(seq_len * batch, -1)
    xw = _times_r(w, flat) if isinstance(w, HybridRows) else flat @ w.astype(compute, copy=False).T
    xw += bias
    return xw.reshape(seq_len, batch, -1)


def _run_direction(
    step,
    xw: np.ndarray,
    lens: np.ndarray | None,
    state: tuple[np.ndarray, ...],
    reverse: bool,
    y: np.ndarray,
    hold: np.ndarray | None = None,
) -> tuple[np.ndarray, ...]:
    """Run one direction over projected inputs xw [S,N,G*H] from ``state`` (the cell's state tensors,
    each [N,H], ``h`` first: the cell table's ``states``); write each step's ``h`` into ``y`` [S,N,H];
    return the final states. Past a sequence's length a state keeps its value; after an empty
    sequence every final state is 0 (onnxruntime). Where ``hold`` [S,N] is false, every state keeps its
    value at that step: ``s_t = hold_t ? step(s_{t-1}) : s_{t-1}``, ``y_t = h_t``."""
    seq_len, batch, _ = xw.shape
    rows = np.arange(batch)
    steps = seq_len if lens is None else int(lens.max(initial=0))
    for k in range(steps):
        if lens is None:
            t = seq_len - 1 - k if reverse else k
            new = step(xw[t], state)
            state = new if hold is None else tuple(np.where(hold[t][:, None], n, s) for n, s in zip(new, state))
            y[t] = state[0]
            continue
        valid = k < lens
        if reverse:
            t = np.maximum(lens - 1 - k, 0)  # each sequence starts from its own last valid step
            new = step(xw[t, rows], state)
            y[t[valid], rows[valid]] = new[0][valid]
        else:
            new = step(xw[k], state)
            y[k] = np.where(valid[:, None], new[0], 0)
        state = tuple(np.where(valid[:, None], n, s) for n, s in zip(new, state))
    if lens is not None:
        state = tuple(np.where((lens == 0)[:, None], 0, s) for s in state)
    return state


def _times_r(r: Matrix, h: np.ndarray) -> np.ndarray:
    """``h @ r.T`` ([N, H] x [G*H, H] -> [N, G*H], a transposed view) computed as ``(r @ h.T).T``: BLAS
    multiplies the tall weight by the few columns of a small batch ~1.5x faster than the other way
    round (measured at N = 16, H = 512). LiteRT's int8 rows (``HybridRows``): its hybrid product."""
    if isinstance(r, HybridRows):
        return r.times(h)
    return (r @ h.T).T


def _contiguous(r: Matrix) -> Matrix:
    return r if isinstance(r, HybridRows) else np.ascontiguousarray(r)


def _clipper(clip: float | None):
    """Bound a pre-activation to [-clip, clip] (identity without clip)."""
    if clip is None:
        return lambda v: v
    return lambda v: np.clip(v, -clip, clip)


def gru_step(H: int, activations: Sequence, r: Matrix, rb: np.ndarray, clip, options: CellOptions, _peephole):
    """The GRU step h_{t-1} -> h_t for pre-projected inputs gx ([N, 3H], gates z, r, h), and the part
    of Rb the caller adds to gx (Rb_z, Rb_r; and Rb_h unless linear_before_reset)::

        z = f(gx_z + h Rz^T + Rb_z)          r = f(gx_r + h Rr^T + Rb_r)
        n = g(gx_h + (r * h) Rh^T + Rb_h)              linear_before_reset = 0
        n = g(gx_h + r * (h Rh^T + Rb_h))              linear_before_reset = 1
        h' = (1 - z) * n + z * h         (as written: with inf, n + z * (h - n) would make NaN)

    z and r share f, so they are computed on one [N, 2H] slab."""
    f, g = activations
    additive = rb.copy()
    if options.linear_before_reset:
        additive[2 * H :] = 0
        r = _contiguous(r)  # [3H, H]
        rb_h = rb[2 * H :]

        def step(gx: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
            (h,) = state
            gh = np.ascontiguousarray(_times_r(r, h))  # [N, 3H], updated in place below
            zr = f(clip(gx[:, : 2 * H] + gh[:, : 2 * H]))
            gh_h = gh[:, 2 * H :]
            gh_h += rb_h
            gh_h *= zr[:, H:]
            n = g(clip(gh_h + gx[:, 2 * H :]))
            z = zr[:, :H]
            return ((1 - z) * n + z * h,)

    else:
        r_zr = _contiguous(r[: 2 * H])  # [2H, H]
        r_h = _contiguous(r[2 * H :])  # [H, H]

        def step(gx: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
            (h,) = state
            zr = f(clip(gx[:, : 2 * H] + _times_r(r_zr, h)))
            n = g(clip(gx[:, 2 * H :] + _times_r(r_h, zr[:, H:] * h)))
            z = zr[:, :H]
            return ((1 - z) * n + z * h,)

    return step, additive


def rnn_step(H: int, activations: Sequence, r: Matrix, rb: np.ndarray, clip, options: CellOptions, _peephole):
    """The RNN step h_{t-1} -> h_t = f(gx + h R^T + Rb) for pre-projected inputs gx ([N, H]); Rb is
    returned for the caller to add to gx."""
    (f,) = activations
    r = _contiguous(r)

    def step(gx: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        return (f(clip(gx + _times_r(r, state[0]))),)

    return step, rb


def lstm_step(H: int, activations: Sequence, r: Matrix, rb: np.ndarray, clip, options: CellOptions, peephole):
    """The LSTM step (h, c) -> (h', c') for pre-projected inputs gx ([N, 4H], gates i, o, f, c, with
    every bias added; Rb is returned for the caller to add), this direction's peepholes ``peephole``
    = (Pi, Po, Pf) [3H] or None::

        i = f(gx_i + h Ri^T + Pi * c)        f_ = f(gx_f + h Rf^T + Pf * c)   (input_forget: 1 - i)
        c' = f_ * c + i * g(gx_c + h Rc^T)
        o = f(gx_o + h Ro^T + Po * c')       h' = o * h(c')

    clip bounds each pre-activation, the peephole term included."""
    f, g, h_act = activations
    r = _contiguous(r)  # [4H, H]
    p_i, p_o, p_f = (None, None, None) if peephole is None else (peephole[:H], peephole[H : 2 * H], peephole[2 * H :])

    def step(gx: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        h, c = state
        pre = gx + _times_r(r, h)
        pre_c = pre[:, 3 * H :]
        if peephole is None:  # i, o and f at once
            gates = f(clip(pre[:, : 3 * H]))
            i, o, forget = gates[:, :H], gates[:, H : 2 * H], gates[:, 2 * H :]
            forget = 1 - i if options.input_forget else forget
            c_new = forget * c + i * g(clip(pre_c))
            return (o * h_act(c_new), c_new)
        pre_i, pre_o, pre_f = pre[:, :H], pre[:, H : 2 * H], pre[:, 2 * H : 3 * H]
        pre_i += p_i * c
        pre_f += p_f * c
        i = f(clip(pre_i))
        forget = 1 - i if options.input_forget else f(clip(pre_f))
        c_new = forget * c + i * g(clip(pre_c))
        pre_o += p_o * c_new
        return (f(clip(pre_o)) * h_act(c_new), c_new)

    return step, rb


def _step_builder(cell: Cell):
    """The step builder of ``cell`` (its record's ``executor_step``: ``gru_step`` and the others here for the
    built-in cells); an error for a cell the executor cannot run (never another cell's)."""
    builder = spec_of(cell).executor_step  # a cell without a record in the cell table raises there
    if builder is None:
        raise UsageError(f"the executor cannot run {cell.op_name} cells yet")
    return resolved(builder)


def check_model_inputs(model: Model, inputs: dict[str, np.ndarray]) -> None:
    """Check the inputs a run gives each layer whose tensors are the artifact's own inputs (shapes,
    dtypes, lengths), so that no runtime or executor meets a tensor it cannot take."""
    for layer in model.layers:
        itf = layer.interface
        if itf.x in inputs:
            at = where(model.path, layer.name)
            try:
                check_layer_inputs(layer, inputs[itf.x], *(inputs.get(getattr(itf, r) or "") for r in INPUT_ROLES[1:]))
            except InputError as err:
                raise InputError(f"{at}{err.message.removeprefix(where(None, layer.name))}", hint=err.hint) from None


def _constant_input(layer: RecurrentLayer, role: str, batch: int) -> np.ndarray | None:
    """The layer's constant for input ``role`` in its own layout, for a batch of ``batch`` (None: not constant)."""
    if role == "sequence_lens":
        return layer.constant(role)
    state = layer.constant_state(role, batch)
    return state.transpose(PERM_SWAP_01) if state is not None and layer.interface.layout == 1 else state


def check_mask(layer: RecurrentLayer, mask: np.ndarray | None, batch: int, seq_len: int) -> np.ndarray | None:
    """A layer's per-step hold as [S,N] bool (non-zero: the step runs); InputError when a masked layer is given
    none or one of another shape, UsageError when a layer without a mask is given one."""
    at = f"layer {layer.name!r}: "
    if layer.interface.mask is None:
        if mask is not None:
            raise UsageError(f"{at}a mask is given, and the layer holds no per-step mask")
        return None
    if mask is None:
        raise InputError(f"{at}its per-step mask {layer.interface.mask!r} is not given")
    mask = np.asarray(mask)
    if mask.ndim == 3 and mask.shape[2:] == (1,):
        mask = mask[..., 0]
    if mask.shape != (seq_len, batch):
        raise InputError(
            f"{at}mask has shape {list(mask.shape)}, expected [{seq_len}, {batch}] or [{seq_len}, {batch}, 1]"
        )
    return mask.astype(bool)


def check_layer_inputs(
    layer: RecurrentLayer,
    x: np.ndarray,
    sequence_lens: np.ndarray | None,
    initial_h: np.ndarray | None,
    initial_c: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """The inputs as arrays, checked against the layer: X [S,N,I] (or [N,S,I]) with S, N >= 1 and the
    layer's dtype; sequence_lens [N] integers in [0, S]; initial_h and initial_c [D,N,H] (or [N,D,H])."""
    at = where(None, layer.name)
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[2] != layer.input_size:
        expected = "[N, S, I]" if layer.interface.layout else "[S, N, I]"
        raise InputError(f"{at}X has shape {list(x.shape)}, expected {expected} with I = {layer.input_size}")
    if x.dtype.kind != "f":
        raise InputError(f"{at}X is {x.dtype}, the layer takes {layer.dtype}")
    seq_len, batch = (x.shape[1], x.shape[0]) if layer.interface.layout else (x.shape[0], x.shape[1])
    if seq_len < 1 or batch < 1:
        raise InputError(
            f"{at}X has shape {list(x.shape)}: an empty sequence or batch (onnxruntime aborts on a zero-length "
            "sequence; gatepack runs none)"
        )
    given = {"sequence_lens": sequence_lens, "initial_h": initial_h, "initial_c": initial_c}
    for role, value in given.items():
        if value is not None and role in layer.constants:
            raise InputError(f"{at}{role} is a constant of the layer, not an input")
    sequence_lens, initial_h, initial_c = (
        _constant_input(layer, role, batch) if value is None else value for role, value in given.items()
    )
    if sequence_lens is not None:
        sequence_lens = np.asarray(sequence_lens)
        if sequence_lens.dtype.kind not in "iu":
            raise InputError(f"{at}sequence_lens is {sequence_lens.dtype}, not integers")
        if sequence_lens.shape != (batch,):
            raise InputError(f"{at}sequence_lens has shape {list(sequence_lens.shape)}, expected [{batch}]")
        bad = sequence_lens[(sequence_lens < 0) | (sequence_lens > seq_len)]
        if bad.size:
            raise InputError(f"{at}sequence_lens value {int(bad[0])} is outside [0, {seq_len}] (the sequence length)")
    states = []
    for role, state in (("initial_h", initial_h), ("initial_c", initial_c)):
        if state is not None:
            if role == "initial_c" and "c" not in layer.cell.states:
                raise InputError(f"{at}{layer.cell.op_name} has no cell state, but initial_c was given")
            state = np.asarray(state)
            d = layer.num_directions
            shape = (batch, d, layer.hidden_size) if layer.interface.layout else (d, batch, layer.hidden_size)
            if state.shape != shape:
                raise InputError(f"{at}{role} has shape {list(state.shape)}, expected {list(shape)}")
            if state.dtype.kind != "f":
                raise InputError(f"{at}{role} is {state.dtype}, the layer takes {layer.dtype}")
        states.append(state)
    return x, sequence_lens, states[0], states[1]

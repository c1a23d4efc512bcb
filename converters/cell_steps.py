"""One time step of each recurrent cell as elementary operations, written once for every graph builder.

A format that decomposes a layer (OpenVINO's opset inside a ``TensorIterator``, Core ML's MIL ops inside a
``while_loop``) keeps what is its own - the loop over time, the input projection outside it, where and in
which orientation its constants live, its dtypes - and builds each step with ``step_of(cell)``, through a
``StepOps`` adapter for one direction: ``decompose.ElementaryOps`` plus a split into gate blocks, a clip,
and that direction's recurrent weights R, Rb and peepholes P.

A step maps gx = x_t W^T + Wb [N, G*H] (every step's input projection, made outside the loop; gate blocks
in the canonical ONNX order of ``schemas.cells``) and the states [N, H] to the new states. With f, g, h the
direction's activations and clip(v) = min(max(v, -clip), clip) on every pre-activation (none without clip)::

    RNN  (gate i)              h' = f(clip(gx + h R^T + Rb))
    GRU  (gates z, r, h)       z = f(clip(gx_z + h Rz^T + Rbz))      r = f(clip(gx_r + h Rr^T + Rbr))
         linear_before_reset 0:  n = g(clip(gx_h + (r * h) Rh^T + Rbh))
         linear_before_reset 1:  n = g(clip(gx_h + r * (h Rh^T + Rbh)))
                               h' = (1 - z) * n + z * h
    LSTM (gates i, o, f, c; peepholes P = Pi, Po, Pf; states h, c)
                               i = f(clip(gx_i + h Ri^T + Rbi + Pi * c))
                               f_ = f(clip(gx_f + h Rf^T + Rbf + Pf * c))      input_forget: f_ = 1 - i
                               c' = f_ * c + i * g(clip(gx_c + h Rc^T + Rbc))
                               o = f(clip(gx_o + h Ro^T + Rbo + Po * c'))      (the output peephole reads c')
                               h' = o * h(c')

Every pre-activation is summed as ``gx + (x R^T + Rb)``: the recurrent projection, its bias included, is
one operation of the format's (GRU's candidate needs ``h Rh^T + Rbh`` apart from gx).

Each cell's record names its step (``CellSpec.graph_step``: these functions for the built-in cells);
``step_of`` raises for a cell without one, so no cell is ever computed as another. The NumPy executor
(``converters.executor``) keeps its own steps, tuned for NumPy (``CellSpec.executor_step``).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from gatepack.converters.decompose import ElementaryOps, build_activation
from gatepack.converters.errors import UsageError
from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import Cell, resolved, spec_of
from gatepack.schemas.layer import DirectionParams, RecurrentLayer


class StepOps(ElementaryOps, Protocol):
    """``ElementaryOps`` plus what a step needs from its format, for one direction of one layer."""

    builder: str  # the target's name, for the error about an activation without a recipe

    def split(self, x: Any, count: int) -> list[Any]:
        """``x``'s last axis cut into ``count`` equal blocks (gate blocks of [N, G*H], peepholes of [3H])."""
        ...

    def clip(self, x: Any, bound: float) -> Any:
        """``min(max(x, -bound), bound)``; ``bound`` may be 0."""
        ...

    def recurrent(self, x: Any, first: int, stop: int) -> Any:
        """``x R[first*H : stop*H]^T + Rb[first*H : stop*H]``: the direction's recurrent projection of
        ``x`` [N, H] onto the gates ``first`` up to ``stop`` (ONNX order), [N, (stop - first) * H]."""
        ...

    def peepholes(self) -> Any:
        """The direction's peepholes P [3H] (Pi, Po, Pf), asked for only when it has them."""
        ...


Step = Callable[[StepOps, RecurrentLayer, DirectionParams, Any, list], list]


def _pre_activation(o: StepOps, layer: RecurrentLayer) -> Callable[[Any, Activation], Any]:
    """``act(v, a)``: activation ``a`` of the clipped pre-activation ``v``."""
    if layer.clip is None:
        return lambda v, a: build_activation(o, v, a, o.builder)
    bound = layer.clip
    return lambda v, a: build_activation(o, o.clip(v, bound), a, o.builder)


def rnn_step(o: StepOps, layer: RecurrentLayer, params: DirectionParams, gx: Any, state: list) -> list:
    """[h'] = [f(clip(gx + h R^T + Rb))] (module docstring)."""
    (h_prev,) = state
    act = _pre_activation(o, layer)
    return [act(o.add(gx, o.recurrent(h_prev, 0, 1)), params.activations[0])]


def gru_step(o: StepOps, layer: RecurrentLayer, params: DirectionParams, gx: Any, state: list) -> list:
    """[h'] of a GRU, gates z, r, h, the reset before or after the candidate's matmul (module docstring).
    With the reset before it, the candidate's recurrent product waits for r: z and r project apart."""
    (h_prev,) = state
    act = _pre_activation(o, layer)
    f, g = params.activations

    xz, xr, xh = o.split(gx, 3)
    if layer.linear_before_reset:
        hz, hr, hh = o.split(o.recurrent(h_prev, 0, 3), 3)
    else:
        hz, hr = o.split(o.recurrent(h_prev, 0, 2), 2)
    z = act(o.add(xz, hz), f)
    reset = act(o.add(xr, hr), f)
    candidate_in = o.mul(reset, hh) if layer.linear_before_reset else o.recurrent(o.mul(reset, h_prev), 2, 3)
    candidate = act(o.add(xh, candidate_in), g)
    # as written, not n + z * (h - n): with an infinite n that would make NaN
    return [o.add(o.mul(o.sub(o.const(z, 1), z), candidate), o.mul(z, h_prev))]


def lstm_step(o: StepOps, layer: RecurrentLayer, params: DirectionParams, gx: Any, state: list) -> list:
    """[h', c'] of an LSTM, gates i, o, f, c, peepholes Pi, Po, Pf, input_forget (module docstring)."""
    h_prev, c_prev = state
    act = _pre_activation(o, layer)
    f, g, h_act = params.activations
    pre_i, pre_o, pre_f, pre_c = o.split(o.add(gx, o.recurrent(h_prev, 0, 4)), 4)
    if params.P is not None:
        p_i, p_o, p_f = o.split(o.peepholes(), 3)
        pre_i = o.add(pre_i, o.mul(p_i, c_prev))
        pre_f = o.add(pre_f, o.mul(p_f, c_prev))
    i = act(pre_i, f)
    forget = o.sub(o.const(i, 1), i) if layer.input_forget else act(pre_f, f)
    c_new = o.add(o.mul(forget, c_prev), o.mul(i, act(pre_c, g)))
    if params.P is not None:
        pre_o = o.add(pre_o, o.mul(p_o, c_new))
    return [o.mul(act(pre_o, f), build_activation(o, c_new, h_act, o.builder)), c_new]


def step_of(cell: Cell, builder: str) -> Step:
    """The step of ``cell`` (its record's ``graph_step``); an error naming the cell for one without a step (never
    another cell's step). ``builder`` names the target in that error."""
    step = spec_of(cell).graph_step  # anything without a record in the cell table raises there
    if step is None:
        raise UsageError(f"{builder} has no elementary-op step for {cell.op_name} cells")
    found: Step = resolved(step)
    return found

"""A GRU, RNN or LSTM layer as elementary ONNX operators: one ``Loop`` over time per direction.

Written where a runtime would compute the layer's own ONNX node differently from ONNX (onnxruntime's
DirectML provider drops a GRU/RNN ``clip``, rejects Affine and breaks Softplus: docs/conventions.md §4).
Everything is sequence-major (the caller transposes a batch-major interface around it). Per direction
``d`` (a reverse one reads ``ReverseSequence(X, lens)`` and reverses its Y back):

* every step's input projection at once, one MatMul per gate: ``xg = X Wg^T + Wbg`` [S,N,H];
* a ``Loop`` of S iterations carrying h (LSTM: h, c) [N,H]; step t gathers ``xg[t]`` and computes, with
  f, g, h the direction's activations (``decompose.RECIPES``) and ``clip`` a ``Clip`` of every
  pre-activation::

      GRU   z = f(xz + h Rz^T + Rbz)   r = f(xr + h Rr^T + Rbr)
            reset-before: c~ = g(xh + (r h) Rh^T + Rbh)   reset-after: c~ = g(xh + r (h Rh^T + Rbh))
            h' = (1 - z) c~ + z h
    RNN   h' = f(xi + h Ri^T + Rbi)
    LSTM  i = f(xi + h Ri^T + Rbi + Pi c)   f_ = f(xf + h Rf^T + Rbf + Pf c)  (input_forget: 1 - i)
          c' = f_ c + i g(xc + h Rc^T + Rbc)   o = f(xo + h Ro^T + Rbo + Po c')   h' = o h(c')

* past a sequence's length (t >= lens[n]) the states are kept and Y is 0; a sequence of length 0
  ends in zero states (onnxruntime's rule, docs/conventions.md §2).

Y [S,D,N,H] and the final states [D,N,H] come out under the names the caller gives. Needs opset 11 or
later (Range, Clip with inputs); Unsqueeze takes its axes as an attribute below opset 13.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import helper, numpy_helper

from gatepack.converters.decompose import build_activation
from gatepack.converters.errors import UsageError
from gatepack.schemas.layer import Cell, Direction, DirectionParams, RecurrentLayer, state_roles

MINIMUM_OPSET = 11
_INT64 = onnx.TensorProto.INT64


class _Graph:
    """Nodes of one (sub)graph under construction; every tensor name fresh in the whole model."""

    def __init__(self, fresh: Callable[[str], str], prefix: str, opset: int, dtype: np.dtype) -> None:
        self.fresh, self.prefix, self.opset, self.dtype = fresh, prefix, opset, np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        """One node with one output (named ``out``, else fresh); returns the output's name."""
        out = out or self.fresh(f"{self.prefix}/{op_type.lower()}")
        self.nodes.append(
            helper.make_node(op_type, inputs, [out], name=self.fresh(f"{self.prefix}/{op_type}"), **attrs)
        )
        return out

    def const(self, value, dtype: DTypeLike | None = None) -> str:
        array = np.asarray(value, dtype or self.dtype)
        return self.op("Constant", [], value=numpy_helper.from_array(array, self.fresh(f"{self.prefix}/value")))

    def unsqueeze(self, x: str, axis: int, out: str | None = None) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const([axis], np.int64)], out)
        return self.op("Unsqueeze", [x], out, axes=[axis])


class _Ops:
    """``decompose.ElementaryOps`` over ONNX nodes, so the activations are the shared stable recipes."""

    def __init__(self, graph: _Graph) -> None:
        self.g = graph

    def const(self, x: str, value: float) -> str:
        return self.g.const(value)

    def zero_like(self, x: str) -> str:
        return self.g.const(0.0)

    def add(self, x: str, y: str) -> str:
        return self.g.op("Add", [x, y])

    def sub(self, x: str, y: str) -> str:
        return self.g.op("Sub", [x, y])

    def mul(self, x: str, y: str) -> str:
        return self.g.op("Mul", [x, y])

    def div(self, x: str, y: str) -> str:
        return self.g.op("Div", [x, y])

    def minimum(self, x: str, y: str) -> str:
        return self.g.op("Min", [x, y])

    def maximum(self, x: str, y: str) -> str:
        return self.g.op("Max", [x, y])

    def select(self, cond: str, a: str, b: str) -> str:
        return self.g.op("Where", [cond, a, b])

    def greater(self, x: str, y: str) -> str:
        return self.g.op("Greater", [x, y])

    def greater_equal(self, x: str, y: str) -> str:  # GreaterOrEqual needs opset 12
        return self.g.op("Not", [self.g.op("Less", [x, y])])

    def clip01(self, x: str) -> str:
        return self.g.op("Clip", [x, self.g.const(0.0), self.g.const(1.0)])

    def exp(self, x: str) -> str:
        return self.g.op("Exp", [x])

    def log(self, x: str) -> str:
        return self.g.op("Log", [x])

    def abs(self, x: str) -> str:
        return self.g.op("Abs", [x])

    def neg(self, x: str) -> str:
        return self.g.op("Neg", [x])

    def sigmoid(self, x: str) -> str:
        return self.g.op("Sigmoid", [x])

    def tanh(self, x: str) -> str:
        return self.g.op("Tanh", [x])

    def relu(self, x: str) -> str:
        return self.g.op("Relu", [x])


def elementary_nodes(
    layer: RecurrentLayer,
    fresh: Callable[[str], str],
    weight: Callable[[str, np.ndarray], str],
    inputs: dict[str, str | None],
    outputs: dict[str, str | None],
    opset: int,
) -> list[onnx.NodeProto]:
    """The nodes computing ``layer`` (module docstring) from the sequence-major tensors ``inputs`` names per
    role (x, sequence_lens, initial_h, initial_c) into ``outputs`` (y, y_h, y_c; None: not wanted).
    ``fresh(name)`` gives an unused tensor name, ``weight(name, array)`` adds an initializer and returns
    its name."""
    if opset < MINIMUM_OPSET:
        raise UsageError(
            f"layer {layer.name!r}: its elementary form needs opset {MINIMUM_OPSET} or later, the model has {opset}"
        )
    g = _Graph(fresh, layer.name, opset, layer.dtype)
    x = inputs["x"]
    assert x, "X is named"
    shape = g.op("Shape", [x])
    steps = g.op("Gather", [shape, g.const(0, np.int64)], axis=0)  # S, a scalar
    batch = g.op("Gather", [shape, g.const([1], np.int64)], axis=0)  # [N]
    given_lens = inputs.get("sequence_lens")
    lens = g.op("Cast", [given_lens], to=_INT64) if given_lens else g.op("Expand", [g.unsqueeze(steps, 0), batch])
    time = g.op("Range", [g.const(0, np.int64), steps, g.const(1, np.int64)])
    valid = g.unsqueeze(g.op("Less", [g.unsqueeze(time, 1), g.unsqueeze(lens, 0)]), 2)  # [S,N,1]
    empty = g.unsqueeze(g.op("Equal", [lens, g.const(0, np.int64)]), 1)  # [N,1]
    zeros = g.op(
        "ConstantOfShape",
        [g.op("Concat", [batch, g.const([layer.hidden_size], np.int64)], axis=0)],
        value=numpy_helper.from_array(np.zeros(1, layer.dtype)),
    )
    roles = [role for role, _ in state_roles(layer.cell)]
    ys: list[str] = []
    finals: dict[str, list[str]] = {role: [] for role in roles}
    for k, params in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        x_d = g.op("ReverseSequence", [x, lens], batch_axis=1, time_axis=0) if reverse else x
        start = [
            g.op("Gather", [state, g.const(k, np.int64)], axis=0) if (state := inputs.get(role)) else zeros
            for role in roles
        ]
        y_d, last = _time_loop(g, layer, params, k, x_d, valid, steps, start, weight)
        if reverse:
            y_d = g.op("ReverseSequence", [y_d, lens], batch_axis=1, time_axis=0)
        ys.append(y_d)
        for role, value in zip(roles, last):
            finals[role].append(g.op("Where", [empty, g.const(0.0), value]))
    _join(g, ys, 1, outputs.get("y"))
    for role, out_role in zip(roles, ("y_h", "y_c")):
        _join(g, finals[role], 0, outputs.get(out_role))
    return g.nodes


def _join(g: _Graph, parts: list[str], axis: int, out: str | None) -> None:
    """``out`` = the per-direction ``parts`` given a direction axis at ``axis`` (nothing when not wanted)."""
    if out is None:
        return
    if len(parts) == 1:
        g.unsqueeze(parts[0], axis, out)
    else:
        g.op("Concat", [g.unsqueeze(p, axis) for p in parts], out, axis=axis)


def _time_loop(
    g: _Graph,
    layer: RecurrentLayer,
    params: DirectionParams,
    k: int,
    x: str,
    valid: str,
    steps: str,
    start: list[str],
    weight: Callable[[str, np.ndarray], str],
) -> tuple[str, list[str]]:
    """The ``Loop`` of one direction: (Y [S,N,H], the final value of each state [N,H])."""
    h = layer.hidden_size
    base = f"{layer.name.replace('/', '.')}.d{k}"
    gates = range(layer.gates)
    projected = [
        g.op(
            "Add",
            [
                g.op("MatMul", [x, weight(f"{base}.W{j}T", params.W[j * h : (j + 1) * h].T.copy())]),
                weight(f"{base}.Wb{j}", params.Wb[j * h : (j + 1) * h].copy()),
            ],
        )
        for j in gates
    ]  # [S,N,H] per gate
    body = _Graph(g.fresh, f"{layer.name}/step{k}", g.opset, g.dtype)
    elem = helper.np_dtype_to_tensor_dtype(g.dtype)
    t, cond = g.fresh(f"{base}.t"), g.fresh(f"{base}.cond")
    state_in = [g.fresh(f"{base}.{name}") for name in layer.cell.states]
    ok = body.op("Gather", [valid, t], axis=0)  # [N,1]
    gx = [body.op("Gather", [p, t], axis=0) for p in projected]  # [N,H] per gate

    def recurrent(j: int, value: str) -> str:  # value Rj^T + Rbj
        r = weight(f"{base}.R{j}T", params.R[j * h : (j + 1) * h].T.copy())
        return body.op(
            "Add", [body.op("MatMul", [value, r]), weight(f"{base}.Rb{j}", params.Rb[j * h : (j + 1) * h].copy())]
        )

    step = _lstm_step if layer.cell is Cell.LSTM else _gru_rnn_step

    def peephole(j: int) -> str:  # P holds i, o, f
        assert params.P is not None  # (asked for by a layer with peepholes only)
        return weight(f"{base}.P{j}", params.P[j * h : (j + 1) * h].copy())

    new = step(body, layer, params, gx, state_in, recurrent, peephole)
    kept = [body.op("Where", [ok, n, s]) for n, s in zip(new, state_in)]
    y_t = body.op("Where", [ok, new[0], body.const(0.0)])
    cond_out = body.op("Identity", [cond])
    value = lambda name, e, shape: helper.make_tensor_value_info(name, e, shape)  # noqa: E731
    graph = helper.make_graph(
        body.nodes,
        f"{base}.step",
        [value(t, _INT64, []), value(cond, onnx.TensorProto.BOOL, []), *(value(s, elem, None) for s in state_in)],
        [value(cond_out, onnx.TensorProto.BOOL, []), *(value(s, elem, None) for s in kept), value(y_t, elem, None)],
    )
    outs = [g.fresh(f"{base}.{name}_last") for name in layer.cell.states] + [g.fresh(f"{base}.Y")]
    g.nodes.append(
        helper.make_node("Loop", [steps, "", *start], outs, name=g.fresh(f"{layer.name}/loop{k}"), body=graph)
    )
    return outs[-1], outs[:-1]


def _clipped(g: _Graph, layer: RecurrentLayer) -> Callable[[str], str]:
    if layer.clip is None:
        return lambda v: v
    low, high = g.const(-layer.clip), g.const(layer.clip)
    return lambda v: g.op("Clip", [v, low, high])


def _gru_rnn_step(g: _Graph, layer, params: DirectionParams, gx: list[str], state: list[str], recurrent, _peephole):
    """[h'] of one GRU or RNN step (module docstring)."""
    (h_prev,) = state
    clip, ops = _clipped(g, layer), _Ops(g)
    f = params.activations[0]
    act = lambda v, a: build_activation(ops, clip(v), a, "ONNX")  # noqa: E731
    if layer.cell is Cell.RNN:
        return [act(g.op("Add", [gx[0], recurrent(0, h_prev)]), f)]
    z = act(g.op("Add", [gx[0], recurrent(0, h_prev)]), f)
    r = act(g.op("Add", [gx[1], recurrent(1, h_prev)]), f)
    if layer.linear_before_reset:
        inner = g.op("Mul", [r, recurrent(2, h_prev)])
    else:
        inner = recurrent(2, g.op("Mul", [r, h_prev]))
    cand = act(g.op("Add", [gx[2], inner]), params.activations[1])
    one_minus_z = g.op("Sub", [g.const(1.0), z])
    return [g.op("Add", [g.op("Mul", [one_minus_z, cand]), g.op("Mul", [z, h_prev])])]


def _lstm_step(g: _Graph, layer, params: DirectionParams, gx: list[str], state: list[str], recurrent, peephole):
    """[h', c'] of one LSTM step, gates i, o, f, c (module docstring)."""
    h_prev, c_prev = state
    clip, ops = _clipped(g, layer), _Ops(g)
    f, g_act, h_act = params.activations
    act = lambda v, a: build_activation(ops, clip(v), a, "ONNX")  # noqa: E731
    pre = [g.op("Add", [gx[j], recurrent(j, h_prev)]) for j in range(4)]  # i, o, f, c
    if params.P is not None:  # P: i, o, f
        pre[0] = g.op("Add", [pre[0], g.op("Mul", [peephole(0), c_prev])])
        pre[2] = g.op("Add", [pre[2], g.op("Mul", [peephole(2), c_prev])])
    i = act(pre[0], f)
    forget = g.op("Sub", [g.const(1.0), i]) if layer.input_forget else act(pre[2], f)
    c_new = g.op("Add", [g.op("Mul", [forget, c_prev]), g.op("Mul", [i, act(pre[3], g_act)])])
    if params.P is not None:
        pre[1] = g.op("Add", [pre[1], g.op("Mul", [peephole(1), c_new])])
    o = act(pre[1], f)
    return [g.op("Mul", [o, build_activation(ops, c_new, h_act, "ONNX")]), c_new]

"""A GRU, RNN or LSTM layer as elementary ONNX operators: one ``Loop`` over time per direction.

Written where a runtime would compute the layer's own ONNX node differently from ONNX (onnxruntime's
DirectML provider drops a GRU/RNN ``clip``, rejects Affine and breaks Softplus: docs/conventions.md §4).
Everything is sequence-major (the caller transposes a batch-major interface around it). Per direction
``d`` (a reverse one reads ``ReverseSequence(X, lens)`` and reverses its Y back):

* every step's input projection at once, one MatMul: ``xg = X W^T + Wb`` [S,N,G*H];
* a ``Loop`` of S iterations carrying h (LSTM: h, c) [N,H]; step t gathers ``gx = xg[t]`` and computes
  the cell's step from ``cell_steps`` (its equations there; a cell without one is refused, never
  computed as another) through ``_StepOps``: the gate blocks cut by ``Split``, the activations
  ``decompose``'s recipes, ``clip`` a ``Clip`` of every pre-activation, and each recurrent projection
  ``h R[gates]^T + Rb[gates]`` one MatMul and Add on R's and Rb's rows for those gates, sliced when the
  model is written (an LSTM's four gates at once; a GRU's z and r, then h apart when the reset comes
  before it);
* past a sequence's length (t >= lens[n]) the states are kept and Y is 0; a sequence of length 0
  ends in zero states (onnxruntime's rule, docs/conventions.md §2);
* a per-step hold (``Interface.mask``, Keras masking; the role ``mask``: [S,N] or [S,N,1], any type,
  non-zero runs the step): where it is false the states are kept and Y is the kept h
  (``s_t = m_t ? step(s_{t-1}) : s_{t-1}``, ``Y_t = h_t``); a reverse direction reads it reversed too.

Y [S,D,N,H] and the final states [D,N,H] come out under the names the caller gives; the weights are
the caller's initializers, a step's scalars (1, a clip bound, an activation's alpha) initializers of its
Loop body. Needs opset 11 or later (Range, Clip with inputs); Unsqueeze takes its axes as an attribute
below opset 13, Split its block count as one from opset 18.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import helper, numpy_helper

from gatepack.converters.cell_steps import step_of
from gatepack.converters.errors import UsageError
from gatepack.converters.formats.onnx.graph import cone
from gatepack.schemas.layer import Direction, DirectionParams, RecurrentLayer, state_roles

MINIMUM_OPSET = 11
_INT64 = onnx.TensorProto.INT64


class _Graph:
    """Nodes of one (sub)graph under construction; every tensor name fresh in the whole model."""

    def __init__(self, fresh: Callable[[str], str], prefix: str, opset: int, dtype: np.dtype) -> None:
        self.fresh, self.prefix, self.opset, self.dtype = fresh, prefix, opset, np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        """One node with one output (named ``out``, else fresh); returns the output's name."""
        return self.op_outputs(op_type, inputs, [out or self.fresh(f"{self.prefix}/{op_type.lower()}")], **attrs)[0]

    def op_outputs(self, op_type: str, inputs: list[str], outputs: list[str], **attrs) -> list[str]:
        """One node with the outputs ``outputs``; returns them."""
        self.nodes.append(
            helper.make_node(op_type, inputs, outputs, name=self.fresh(f"{self.prefix}/{op_type}"), **attrs)
        )
        return outputs

    def const(self, value, dtype: DTypeLike | None = None) -> str:
        array = np.asarray(value, dtype or self.dtype)
        return self.op("Constant", [], value=numpy_helper.from_array(array, self.fresh(f"{self.prefix}/value")))

    def unsqueeze(self, x: str, axis: int, out: str | None = None) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const([axis], np.int64)], out)
        return self.op("Unsqueeze", [x], out, axes=[axis])


class _StepOps:
    """``cell_steps.StepOps`` over the ONNX nodes of one direction's Loop body: the activations are
    ``decompose``'s stable recipes, scalars are initializers of the body (one per value), and the
    recurrent weights of a gate range are sliced when the model is written (one MatMul per range)."""

    builder = "ONNX"

    def __init__(
        self,
        body: _Graph,
        layer: RecurrentLayer,
        params: DirectionParams,
        base: str,
        weight: Callable[[str, np.ndarray], str],
    ) -> None:
        self.g, self.layer, self.params, self.base, self.weight = body, layer, params, base, weight
        self._scalars: dict[bytes, onnx.TensorProto] = {}  # by the value's bits (0 and -0 apart)

    def scalars(self) -> list[onnx.TensorProto]:
        """The body's initializers: every scalar a step asked for."""
        return list(self._scalars.values())

    def const(self, x: str, value: float) -> str:
        array = np.asarray(value, self.g.dtype)
        key = array.tobytes()
        if key not in self._scalars:
            self._scalars[key] = numpy_helper.from_array(array, self.g.fresh(f"{self.base}.scalar"))
        return self._scalars[key].name

    def zero_like(self, x: str) -> str:
        return self.const(x, 0.0)

    def split(self, x: str, count: int) -> list[str]:
        """Equal blocks of the last axis: ``Split`` (its block count an attribute from opset 18)."""
        outputs = [self.g.fresh(f"{self.g.prefix}/split") for _ in range(count)]
        attrs = {"num_outputs": count} if self.g.opset >= 18 else {}
        return self.g.op_outputs("Split", [x], outputs, axis=-1, **attrs)

    def clip(self, x: str, bound: float) -> str:
        return self.g.op("Clip", [x, self.const(x, -bound), self.const(x, bound)])

    def recurrent(self, x: str, first: int, stop: int) -> str:
        """``x R[first*H : stop*H]^T + Rb[first*H : stop*H]`` with that block of R and Rb as initializers."""
        h, gates = self.layer.hidden_size, "".join(self.layer.cell.spec.gates[first:stop])
        r = self.weight(f"{self.base}.R_{gates}T", self.params.R[first * h : stop * h].T.copy())
        rb = self.weight(f"{self.base}.Rb_{gates}", self.params.Rb[first * h : stop * h].copy())
        return self.g.op("Add", [self.g.op("MatMul", [x, r]), rb])

    def peepholes(self) -> str:
        assert self.params.P is not None  # (asked for by a layer with peepholes only)
        return self.weight(f"{self.base}.P", self.params.P.copy())

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
        return self.g.op("Clip", [x, self.const(x, 0.0), self.const(x, 1.0)])

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
    role (x, sequence_lens, initial_h, initial_c; mask for a masked layer) into ``outputs`` (y, y_h, y_c; None:
    not wanted).
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
    mask = inputs.get("mask")
    assert bool(mask) == bool(layer.interface.mask), "a masked layer's mask is given, and only its"
    if mask:  # a per-step hold: its steps are the valid ones (a masked layer has no sequence_lens)
        shape_3 = g.op("Concat", [g.unsqueeze(steps, 0), batch, g.const([1], np.int64)], axis=0)
        valid = g.op("Reshape", [g.op("Cast", [mask], to=onnx.TensorProto.BOOL), shape_3])
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
        valid_d = g.op("ReverseSequence", [valid, lens], batch_axis=1, time_axis=0) if reverse and mask else valid
        y_d, last = _time_loop(g, layer, params, k, x_d, valid_d, steps, start, weight)
        if reverse:
            y_d = g.op("ReverseSequence", [y_d, lens], batch_axis=1, time_axis=0)
        ys.append(y_d)
        for role, value in zip(roles, last):
            finals[role].append(g.op("Where", [empty, g.const(0.0), value]))
    _join(g, ys, 1, outputs.get("y"))
    for role, out_role in zip(roles, ("y_h", "y_c")):
        _join(g, finals[role], 0, outputs.get(out_role))
    # what the outputs read alone: an unread zero state would read back as an operator around the layer
    return cone(g.nodes, [name for name in outputs.values() if name])


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
    """The ``Loop`` of one direction: (Y [S,N,H], the final value of each state [N,H]). Its body is
    ``cell_steps``' step of the cell on ``gx = xg[t]``, the states kept past each sequence's length."""
    step = step_of(layer.cell, "ONNX")
    base = f"{layer.name.replace('/', '.')}.d{k}"
    # every step's input projection at once: X W^T + Wb [S,N,G*H]
    projected = g.op(
        "Add", [g.op("MatMul", [x, weight(f"{base}.WT", params.W.T.copy())]), weight(f"{base}.Wb", params.Wb)]
    )
    body = _Graph(g.fresh, f"{layer.name}/step{k}", g.opset, g.dtype)
    ops = _StepOps(body, layer, params, base, weight)
    elem = helper.np_dtype_to_tensor_dtype(g.dtype)
    t, cond = g.fresh(f"{base}.t"), g.fresh(f"{base}.cond")
    state_in = [g.fresh(f"{base}.{name}") for name in layer.cell.states]
    ok = body.op("Gather", [valid, t], axis=0)  # [N,1]
    new = step(ops, layer, params, body.op("Gather", [projected, t], axis=0), state_in)
    kept = [body.op("Where", [ok, n, s]) for n, s in zip(new, state_in)]
    # a held step's Y is the kept h; a step past a length gives 0 (ONNX's sequence_lens)
    y_t = (
        body.op("Identity", [kept[0]])
        if layer.interface.mask
        else body.op("Where", [ok, new[0], ops.zero_like(new[0])])
    )
    cond_out = body.op("Identity", [cond])
    value = lambda name, e, shape: helper.make_tensor_value_info(name, e, shape)  # noqa: E731
    graph = helper.make_graph(
        body.nodes,
        f"{base}.step",
        [value(t, _INT64, []), value(cond, onnx.TensorProto.BOOL, []), *(value(s, elem, None) for s in state_in)],
        [value(cond_out, onnx.TensorProto.BOOL, []), *(value(s, elem, None) for s in kept), value(y_t, elem, None)],
        initializer=ops.scalars(),
    )
    outs = [g.fresh(f"{base}.{name}_last") for name in layer.cell.states] + [g.fresh(f"{base}.Y")]
    g.nodes.append(
        helper.make_node("Loop", [steps, "", *start], outs, name=g.fresh(f"{layer.name}/loop{k}"), body=graph)
    )
    return outs[-1], outs[:-1]

"""Recurrences ONNX producers write without a GRU, RNN or LSTM node, found for lifting (``converters.lifting``).

Three patterns, each recognised by data flow and proven by running them (never trusted):

* **Loop** (tf2onnx's Keras layers): a ``Loop`` whose body gathers step ``t`` of an outer
  sequence-major tensor ``T`` [S,N,I], carries one float state [N,H] that a MatMul/Gemm reads, and
  scans the new state out. ``T`` produced by a full-length ``ReverseSequence`` (Keras
  ``go_backwards``, the backward half of ``Bidirectional``) or a step -1 ``Slice`` makes the layer
  reverse; its scanned Y is then in processing order. A constant all-zero initial state means none.
* **Unrolled steps** (torch.onnx dynamo's ``nn.RNN``): MatMuls that share one constant ``R`` and
  whose data inputs form a chain, each state computed from the previous one. The state after the
  last MatMul is the same kind of node at the same distance; a first state of that kind means the
  first step was folded into a constant (a zero initial state). The layer's X is what the other
  MatMul (the input projection) reads; the direction is decided by the proof.
* **One unrolled step** (a per-frame streaming export, e.g. tf2onnx's DTLN model 2): a MatMul by a constant
  R [H, 4H] or [H, 3H] (a GRU with the reset before it: [H, 2H], and [H, H] for r * h) used once, whose data input
  is a graph input's slice, followed by the cell's equations (an LSTM's c_t = f*c_prev + i*g and h_t = o*tanh(c_t),
  a GRU's h_t = z*h_prev + (1-z)*n): a layer of sequence length 1 whose initial states are those slices and whose
  Y_h (Y_c) are the new states.

A found recurrence becomes a :class:`Region`: the original nodes from the layer's X (and initial
state) to its states, and adapter nodes that read its Y [S,1,N,H] / Y_h [1,N,H] (layout 0; batch-
major with a Transpose[1,0,2] of X absorbed) in canonical form. ``exposed`` says, for the tensors
of the region the rest of the graph reads, how each is recomputed from the canonical Y and Y_h.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from gatepack.converters.formats.onnx.folding import node_subgraphs
from gatepack.converters.formats.onnx.graph import Scope
from gatepack.converters.lifting import hidden_sizes
from gatepack.schemas.layer import Direction

_STATE_KEEPERS = {"Identity"}
_SHAPE_OPS = {"Slice", "Squeeze", "Unsqueeze", "Gather", "Reshape", "Split", "Identity"}
_INT64_MIN = np.iinfo(np.int64).min
# What a mask passes through on its way to a loop (a reverse in time: Keras's go_backwards).
_MASK_CARRIERS = ("Cast", "Transpose", "Unsqueeze", "Squeeze", "Reshape", "Identity", "ReverseSequence", "Slice")
# Comparisons a prefix mask is made of: the operand (0 or 1) that rises along time for the result to be true first.
_RISING = {"Less": 0, "LessOrEqual": 0, "Greater": 1, "GreaterOrEqual": 1}


@dataclass
class Region:
    """One direction of a recurrence, with what it takes to run it alone and to replace it."""

    name: str
    found: str
    kind: str  # "Loop" or "unrolled"
    direction: Direction
    nodes: list[onnx.NodeProto]  # original nodes, in execution order
    adapters: list[onnx.NodeProto]  # canonical Y / Y_h (and initial state) from the original tensors
    constants: dict[str, np.ndarray]  # every initializer the nodes and adapters read
    x: str
    initial_h: str | None  # canonical initial state input ([1,N,H] or [N,1,H])
    initial_source: str | None  # the original tensor it becomes (the adapter's output), if different
    y: str | None
    y_h: str | None
    layout: int
    seq_length: int | None
    batch_size: int | None
    input_size: int
    hidden_size: int
    activations: frozenset[str]
    exposed: dict[str, tuple] = field(default_factory=dict)  # original tensor -> ("Y", t, rank) | ("Y_h", rank)
    initial_c: str | None = None  # an LSTM's: as initial_h
    initial_c_source: str | None = None
    y_c: str | None = None
    sequence_lens: str | None = None  # canonical [N] int32 input of a loop masked by lengths
    mask: str | None = None  # the original mask [S,N] or [S,N,1] it reads (sequence_lens in the rewritten model)
    hold: str | None = None  # the original mask of a per-step hold (``Interface.mask``), in time order
    x_source: str | None = None  # one step's input [N, I] the canonical X [1, N, I] becomes (an adapter), if any


@dataclass
class Replacement:
    """What replaces a region in place (``replace_in_place``): ``nodes`` reading the tensors ``inputs`` names in
    an ONNX recurrent node's input order (X, W, R, B, sequence_lens, initial_h, initial_c; "" where absent) and
    making ``outputs`` (Y [S,D,N,H], Y_h, and an LSTM's Y_c), with the ``weights`` they read."""

    nodes: list[onnx.NodeProto]
    weights: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]


class _Carried(NamedTuple):
    """A Loop body's loop-carried ``inputs`` and ``outputs`` (index k: the loop's input 2 + k and output k), its
    scanned outputs ``scans``, and the indices of the carried values that change and are float (``changing``)."""

    inputs: list[str]
    outputs: list[str]
    scans: list[str]
    changing: list[int]


class _Step(NamedTuple):
    """A single unrolled step (``Finder._single_steps``): its name, the MatMul multiplying the state by R, its states
    (h_prev, h_t, c_prev, c_t; c None for a GRU) and, for a GRU with the reset before the product, the two constants
    whose columns make R (None otherwise)."""

    name: str
    recurrent: onnx.NodeProto
    ends: tuple[str, str, str | None, str | None]
    joined: tuple[str, str] | None


class NotARecurrence(Exception):
    """What was found is not lifted: the message says what and why."""


class _Adapters:
    """Nodes and int64 constants written for the opset at hand (Squeeze/Unsqueeze axes became inputs in 13)."""

    def __init__(self, prefix: str, opset: int) -> None:
        self.prefix, self.opset = prefix, opset
        self.nodes: list[onnx.NodeProto] = []
        self.constants: dict[str, np.ndarray] = {}

    def _const(self, values: list[int]) -> str:
        name = f"{self.prefix}:const{len(self.constants)}"
        self.constants[name] = np.asarray(values, np.int64)
        return name

    def scalar(self, value: int) -> str:
        name = f"{self.prefix}:const{len(self.constants)}"
        self.constants[name] = np.asarray(value, np.int64)
        return name

    def add(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=f"{output}:{op}", **attrs))
        return output

    def axes(self, op: str, x: str, axes: list[int], output: str, **attrs) -> str:
        """Squeeze, Unsqueeze or ReduceSum over ``axes`` (an input from opset 13, an attribute before)."""
        if self.opset >= 13:
            return self.add(op, [x, self._const(axes)], output, **attrs)
        return self.add(op, [x], output, axes=axes, **attrs)

    def lengths(self, mask: str, output: str) -> str:
        """[N] int32 lengths of a prefix mask [S,N] or [S,N,1]: its true steps counted along time."""
        counted = self.axes("ReduceSum", self.add("Cast", [mask], f"{output}:float", to=onnx.TensorProto.FLOAT), [0],
                            f"{output}:summed", keepdims=0)  # fmt: skip
        counted = self.add("Cast", [counted], f"{output}:int", to=onnx.TensorProto.INT32)
        return self.add("Reshape", [counted, self._const([-1])], output)

    def keep_last(self, y: str, y_h: str, mask: str, rank: int, output: str) -> str:
        """[S,N,H]: ``y`` [S,N,H] where the mask [S,N] or [S,N,1] is true, the last state ``y_h`` [N,H] after
        (what a Keras loop masked by lengths scans: it keeps its last output on masked steps)."""
        condition = self.add("Cast", [mask], f"{output}:condition", to=onnx.TensorProto.BOOL)
        if rank == 2:
            condition = self.axes("Unsqueeze", condition, [2], f"{output}:condition3")
        return self.add("Where", [condition, y, y_h], output)

    def reverse_time(self, x: str, output: str) -> str:
        if self.opset < 10:
            raise NotARecurrence(f"{self.prefix}: reversing a sequence needs opset 10 or later (Slice steps)")
        return self.add(
            "Slice", [x, self._const([-1]), self._const([_INT64_MIN]), self._const([0]), self._const([-1])], output
        )

    def step(self, y: str, t: int, output: str) -> str:
        if self.opset < 10:
            return self.add("Slice", [y], output, starts=[t], ends=[t + 1], axes=[0])
        return self.add("Slice", [y, self._const([t]), self._const([t + 1]), self._const([0])], output)


class Finder:
    """Finds the Loops and unrolled chains of one model's main graph (``scope``: its names; ``value_of``: a
    tensor's value)."""

    def __init__(
        self, proto: onnx.ModelProto, scope: Scope, value_of: Callable[[onnx.TensorProto], np.ndarray], opset: int
    ) -> None:
        self.proto, self.scope, self.value_of, self.opset = proto, scope, value_of, opset
        self.graph_inputs = {i.name for i in proto.graph.input} - set(scope.initializers)
        self.shapes = _inferred_shapes(proto)

    def regions(self) -> tuple[list[list[Region]], list[tuple[str, str]]]:
        """(per recurrence found, its readings to try in order; (name, reason) for recurrence-like
        structures that are not lifted)."""
        found: list[list[Region]] = []
        refused: list[tuple[str, str]] = []
        for index, node in enumerate(self.proto.graph.node):
            if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
                name = node.name or f"Loop_{index}"
                try:
                    readings = self._loop(node, name)
                except NotARecurrence as err:
                    refused.append((name, str(err)))
                    continue
                if readings:
                    found.append(readings)
        for chain in self._chains():
            try:
                found.append(
                    [self._unrolled(*chain, direction) for direction in (Direction.FORWARD, Direction.REVERSE)]
                )
            except NotARecurrence as err:
                refused.append((chain[0], str(err)))
        for step in self._single_steps():
            try:
                found.append([self._single_step(step.name, step.recurrent, step.ends, step.joined)])
            except NotARecurrence as err:
                refused.append((step[0], str(err)))
        return found, refused

    # -- shared

    def _dims(self, name: str) -> list | None:
        return self.shapes.get(name)

    def _constant(self, name: str) -> np.ndarray | None:
        if name in self.scope.initializers:
            return self.value_of(self.scope.initializers[name])
        node = self.scope.producers.get(name)
        if node is not None and node.op_type == "Constant":
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is not None:
                return self.value_of(attr.t)
        return None

    def _cone(self, outputs: list[str], boundary: set[str], what: str) -> tuple[list[onnx.NodeProto], dict]:
        """The main-graph nodes computing ``outputs`` from ``boundary`` tensors and constants, in graph
        order, and the initializers they (and their subgraphs) read."""
        needed: set[int] = set()
        constants: dict[str, np.ndarray] = {}
        stack = list(outputs)
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if not name or name in seen or name in boundary:
                continue
            seen.add(name)
            if name in self.scope.initializers:
                constants[name] = self.value_of(self.scope.initializers[name])
                continue
            node = self.scope.producers.get(name)
            if node is None:
                raise NotARecurrence(f"{what} depends on graph input {name!r}, not only on its sequence input")
            if id(node) in needed:
                continue
            needed.add(id(node))
            stack.extend(node.input)
            stack.extend(_captured(node))
        nodes = [n for n in self.proto.graph.node if id(n) in needed]
        return nodes, constants

    def _layout(self, x: str, has_initial: bool) -> tuple[str, int, list[onnx.NodeProto]]:
        """X and the layout: a Transpose[1,0,2] in front of a sequence-major X makes the layer batch-major."""
        node = self.scope.producers.get(x)
        if not has_initial and node is not None and node.op_type == "Transpose" and perm_of(node) == [1, 0, 2]:
            return node.input[0], 1, [node]
        return x, 0, []

    # -- Loop

    def _loop(self, node: onnx.NodeProto, name: str) -> list[Region]:
        """The readings of a Loop to try in order (one; a forward loop masked by lengths: its Y past each length
        its last output, as Keras keeps it, or zero, as Keras's zero_output_for_mask writes it; a reverse one
        processes the steps past each length first, where a kept output is still zero)."""
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is None:
            return []
        activations = _step_activations(body)
        if not activations or not {n.op_type for n in _all_nodes(body)} & {"MatMul", "Gemm"}:
            return []
        what = f"Loop {name!r}"
        carried = self._carried(node, body, what)
        sequences, masks = self._stepped(body)
        mask, mask_reversed, prefix = self._gathered_mask(masks, what)
        if len(sequences) != 1:
            raise NotARecurrence(f"{what}: it reads {len(sequences)} outer float sequences step by step, not one")
        k_kept = self._kept_output(node, body, carried, what) if mask else None
        changing = [k for k in carried.changing if k != k_kept]
        k_h, k_c = self._states(body, changing, carried.inputs, carried.outputs, what)
        x, reversed_ = self._unreversed(sequences[0])
        direction = Direction.REVERSE if reversed_ else Direction.FORWARD
        if mask and mask_reversed != (direction is Direction.REVERSE):
            raise NotARecurrence(f"{what}: masked, but the mask and the sequence run in different orders")
        y_seq, finals, initials = self._loop_ends(node, body, carried, (k_h, k_c), k_kept, what)
        hidden, steps = self._loop_sizes(node, body, carried, x, (finals[0], initials[0]), what)
        found = (
            f"an ONNX Loop{f' of {steps} steps' if steps else ''} over a {'/'.join(sorted(activations))} cell "
            "(as tf2onnx writes Keras recurrent layers)"
        ) + _masked_text(mask, prefix)
        self._check_masked(mask, prefix, y_seq if finals[0] or not prefix else None, initials, what)
        lengths, hold = (mask, None) if prefix else (None, mask)
        return [
            self._build(
                name, found, "Loop", direction, x, initials, activations, hidden, steps,
                outputs=[o for o in (y_seq, *finals) if o], y_seq=y_seq, finals=finals, states=None, mask=lengths,
                keep_last=keep_last, hold=hold,
            )
            for keep_last in ((True, False) if lengths and direction is Direction.FORWARD else (False,))
        ]  # fmt: skip

    def _carried(self, node: onnx.NodeProto, body: onnx.GraphProto, what: str) -> _Carried:
        """The body's loop-carried inputs and outputs (after the iteration number and the condition), its scanned
        outputs, and which carried values change from step to step and are float (the candidate states)."""
        n_carried = len(node.input) - 2
        body_in = [i.name for i in body.input]
        body_out = [o.name for o in body.output]
        if len(body_in) != n_carried + 2 or len(body_out) < n_carried + 1:
            raise NotARecurrence(f"{what}: its body's inputs and outputs do not match its loop-carried values")
        carried_in, carried_out = body_in[2:], body_out[1 : 1 + n_carried]
        changing = [
            k
            for k in range(n_carried)
            if carried_out[k] != carried_in[k] and self._is_float(node.input[2 + k], body, carried_in[k])
        ]
        return _Carried(carried_in, carried_out, body_out[1 + n_carried :], changing)

    def _unreversed(self, name: str) -> tuple[str, bool]:
        """The tensor ``name`` reads in time order, and whether ``name`` is it reversed in time (a full-length
        ``ReverseSequence`` or a step -1 ``Slice``: Keras's go_backwards)."""
        reverser = self.scope.producers.get(name)
        if reverser is not None and _reverses_time(reverser, self._constant):
            return reverser.input[0], True
        return name, False

    def _loop_ends(
        self,
        node: onnx.NodeProto,
        body: onnx.GraphProto,
        carried: _Carried,
        states: tuple[int, int | None],
        k_kept: int | None,
        what: str,
    ) -> tuple[str | None, list[str | None], list[str | None]]:
        """The loop's scanned Y [S,N,H] (the scan of h, or of the output a masked loop keeps; None when not an
        output), its final (h, c) and their initial values (None: not an output, or zeros), for ``states`` the
        carried indices of h and c."""
        n_carried = len(carried.inputs)
        scanned = carried.outputs[states[0] if k_kept is None else k_kept]
        scan = next((j for j, s in enumerate(carried.scans) if _through(body, s) == _through(body, scanned)), None)
        y_seq = node.output[n_carried + scan] if scan is not None and len(node.output) > n_carried + scan else None
        finals = [node.output[k] if k is not None and len(node.output) > k and node.output[k] else None
                  for k in states]  # fmt: skip
        initials = [None if k is None else self._initial(node.input[2 + k], what) for k in states]
        return y_seq, finals, initials

    def _loop_sizes(
        self,
        node: onnx.NodeProto,
        body: onnx.GraphProto,
        carried: _Carried,
        x: str,
        h: tuple[str | None, str | None],
        what: str,
    ) -> tuple[int | None, int | None]:
        """(H, S) of a loop over ``x``: H from the shape of its final h, else of its initial h (``h``), else from the
        weights it reads; S from its trip count, else (X's shape not telling it) from its condition."""
        x_dims = self._dims(x) or []
        dims = self._dims(h[0] or "") or self._dims(h[1] or "") or []
        hidden = dims[-1] if dims and isinstance(dims[-1], int) else None
        if hidden is None and len(x_dims) == 3 and isinstance(x_dims[2], int):
            hidden = self._hidden_from_weights(node, x_dims[2], what)
        trip = self._constant(node.input[0]) if node.input[0] else None
        steps = int(trip.reshape(-1)[0]) if trip is not None and trip.size == 1 else None
        if steps is None and not (len(x_dims) == 3 and isinstance(x_dims[0], int)):  # S known nowhere else
            steps = self._steps_by_condition(node, body, carried.inputs, carried.outputs)
        return hidden, steps

    @staticmethod
    def _check_masked(mask: str | None, prefix: bool, y_seq: str | None, initials: list, what: str) -> None:
        """A masked loop is lifted when its outputs show its sequence and it starts from zero states: a row of
        length 0 keeps an initial state in the loop, where ONNX's layers give zeros; a held step keeps Keras's
        last output, which starts at zero whatever the state starts at."""
        if not mask:
            return
        if not y_seq:
            raise NotARecurrence(
                f"{what}: masked, but its outputs do not show its sequence (and, by lengths, last state)"
            )
        if any(initials):
            kind = "by lengths" if prefix else "step by step"
            raise NotARecurrence(
                f"{what}: masked {kind}, with an initial state: "
                + ("a row of length 0 keeps it in the loop, where ONNX's layers give zeros" if prefix else
                   "a held step keeps Keras's last output, which starts at zero, not at the initial state")
                + ", so it is not lifted"
            )  # fmt: skip

    def _steps_by_condition(
        self, node: onnx.NodeProto, body: onnx.GraphProto, carried_in: list[str], carried_out: list[str]
    ) -> int | None:
        """The steps of a Loop without a trip count that its condition ends (tf2onnx's Keras loops over a sequence
        whose length no shape tells, e.g. another loop's output): the body's condition ``Less(counter + step, bound)``
        (through Casts and Identities), ``bound`` a loop-carried value passed through unchanged from a constant,
        ``counter`` one starting from a constant: bound - start steps. A reading the lifting's proof then checks (a
        wrong one lifts nothing); None where the loop is not so."""
        producers = {o: n for n in body.node for o in n.output}

        def traced(name: str) -> str:
            while name in producers and producers[name].op_type in ("Cast", "Identity"):
                name = producers[name].input[0]
            return name

        less = producers.get(traced(body.output[0].name))
        if less is None or less.op_type != "Less" or len(less.input) != 2:
            return None
        counter, bound = (producers.get(traced(less.input[0])), traced(less.input[1]))
        if bound not in carried_in or carried_out[carried_in.index(bound)] != bound:
            return None
        if counter is None or counter.op_type != "Add" or not set(counter.input) & set(carried_in):
            return None
        start = next(i for i in counter.input if i in carried_in)
        limit, first = (self._constant(node.input[2 + carried_in.index(n)]) for n in (bound, start))
        if limit is None or first is None or limit.size != 1 or first.size != 1:
            return None
        return int(limit.reshape(-1)[0]) - int(first.reshape(-1)[0])

    def _stepped(self, body: onnx.GraphProto) -> tuple[list[str], list[str]]:
        """The outer tensors the body gathers step ``t`` of (axis 0): float sequences, and boolean masks
        (or the float masks a boolean one was cast to)."""
        defined = _defined(body)
        gathered = [
            n.input[0]
            for n in _all_nodes(body)
            if n.op_type == "Gather" and n.input[0] not in defined and _attr(n, "axis", 0) == 0
        ]
        masks = [t for t in gathered if self._is_mask(t)]
        return [t for t in gathered if t not in masks], masks

    def _is_mask(self, name: str) -> bool:
        """A boolean tensor, or one cast from a boolean (or from a comparison)."""
        while True:
            node = self.scope.producers.get(name)
            if node is None:
                return False
            if node.op_type in ("Equal", "Not", "Less", "Greater", "And", "Or", "LessOrEqual", "GreaterOrEqual"):
                return True
            if node.op_type not in _MASK_CARRIERS:
                return False
            name = node.input[0]

    def _gathered_mask(self, masks: list[str], what: str) -> tuple[str | None, bool, bool]:
        """(the mask a loop gathers, in time order; whether the loop reads it reversed in time, as Keras's
        go_backwards does; whether it is a prefix of each row, ``_prefix_mask``, which becomes sequence_lens),
        or (None, False, False) without a mask. A mask that is not shown to be a prefix is a per-step hold."""
        if not masks:
            return None, False, False
        if len(masks) > 1:
            raise NotARecurrence(f"{what}: masked: it gathers {len(masks)} masks step by step, not one")
        in_time, reversed_ = self._unreversed(masks[0])
        return in_time, reversed_, self._prefix_mask(in_time)

    def _prefix_mask(self, mask: str) -> bool:
        """Whether the mask a loop gathers step ``t`` of (its axis 0) is, per row, true for a prefix of the steps
        and false after: a comparison ``a < b`` (or ``<=``, ``>``, ``>=``) of a constant that does not decrease
        along time with a value constant along time (Keras ``mask=ops.less(ops.arange(S)[None], lengths[:, None])``,
        tf2onnx: ``Less(const [1, S], lengths)``), or the mirror image, followed along the time axis through
        Transpose/Unsqueeze/Squeeze/Cast/Identity (a value that rises along time crosses a constant once)."""
        name, axis = mask, 0
        while (node := self.scope.producers.get(name)) is not None and (dims := self._dims(name)) is not None:
            rank = len(dims)
            if node.op_type in ("Cast", "Identity"):
                name = node.input[0]
            elif node.op_type == "Transpose" and (perm := perm_of(node)) is not None:
                name, axis = node.input[0], perm[axis]
            elif node.op_type in ("Unsqueeze", "Squeeze"):
                axes = _attr(node, "axes", None) if len(node.input) < 2 else self._constant(node.input[1])
                if axes is None:
                    return False
                in_rank = rank - len(axes) if node.op_type == "Unsqueeze" else rank + len(axes)
                kept = [a for a in range(max(rank, in_rank)) if a not in {int(x) % max(rank, in_rank) for x in axes}]
                if node.op_type == "Unsqueeze":
                    if axis not in kept:
                        return False
                    axis = kept.index(axis)
                else:
                    axis = kept[axis]
                name = node.input[0]
            elif node.op_type in _RISING:
                return self._crosses_once(node, axis, rank)
            else:
                return False
        return False

    def _crosses_once(self, node: onnx.NodeProto, axis: int, rank: int) -> bool:
        """``node`` compares (``_RISING``: which operand must not decrease along ``axis`` for its result to be a
        prefix) a constant that does not decrease (or increase) along time with an operand of size 1 there."""
        rising = _RISING[node.op_type]
        for side, sign in ((rising, 1), (1 - rising, -1)):  # the rising side a constant, or the other one falling
            value, opposite = self._constant(node.input[side]), self._dims(node.input[1 - side])
            if value is None or opposite is None:
                continue
            at, across = axis - (rank - value.ndim), axis - (rank - len(opposite))
            if 0 <= at < value.ndim and (across < 0 or opposite[across] == 1):
                if np.all(sign * np.diff(value.astype(np.float64), axis=at) >= 0):
                    return True
        return False

    def _kept_output(self, node: onnx.NodeProto, body: onnx.GraphProto, carried: _Carried, what: str) -> int | None:
        """The carried value a masked loop scans out when it is not a state (Keras keeps its last output on
        masked steps): scanned, multiplied by no matrix, zero at first and read by nothing after the loop.
        None when the loop scans a state."""
        changing, carried_in, carried_out, scans = carried.changing, carried.inputs, carried.outputs, carried.scans
        multiplied = {_through(body, n.input[0]) for n in _all_nodes(body) if n.op_type in ("MatMul", "Gemm")}
        scanned = {_through(body, s) for s in scans}
        kept = [k for k in changing if _through(body, carried_out[k]) in scanned and carried_in[k] not in multiplied]
        if len(kept) != 1:
            return None
        k = kept[0]
        if self._initial(node.input[2 + k], what) is not None:
            raise NotARecurrence(f"{what}: masked, and the output it keeps on masked steps does not start at zero")
        final = node.output[k] if len(node.output) > k else ""
        if final and (final in {o.name for o in self.proto.graph.output} or self.scope.consumers.get(final)):
            raise NotARecurrence(f"{what}: masked, and the last output it keeps ({final!r}) is read: not lifted")
        return k

    def _states(self, body, changing: list[int], carried_in: list[str], carried_out: list[str], what: str) -> tuple:
        """(h, c) among the changing carried values: h is the one a MatMul/Gemm multiplies (the recurrent
        product), c the other one an LSTM carries (None for a GRU or RNN)."""
        multiplied = {_through(body, n.input[0]) for n in _all_nodes(body) if n.op_type in ("MatMul", "Gemm")}
        read = [k for k in changing if carried_in[k] in multiplied or _through(body, carried_in[k]) in multiplied]
        if len(changing) not in (1, 2) or len(read) != 1:
            raise NotARecurrence(
                f"{what}: it carries {len(changing)} changing float states, {len(read)} of them multiplied by a "
                "matrix (a GRU or RNN carries one state, an LSTM two, h multiplied and c not)"
            )
        rest = [k for k in changing if k != read[0]]
        return read[0], (rest[0] if rest else None)

    def _initial(self, outer: str, what: str) -> str | None:
        """A loop-carried state's initial value: None for zeros (a constant, or a zero constant expanded to a
        shape computed from the input's, as tf2onnx writes a dynamic batch's zero state)."""
        value = self._constant(outer)
        producer = self.scope.producers.get(outer)
        if value is None and producer is not None and producer.op_type == "Expand":
            value = self._constant(producer.input[0])
        elif value is None and producer is not None and producer.op_type == "ConstantOfShape":
            attr = next((a for a in producer.attribute if a.name == "value"), None)
            value = self.value_of(attr.t) if attr is not None else np.zeros(1, np.float32)
        if value is None:
            return outer
        if np.any(value):
            raise NotARecurrence(f"{what}: its initial state {outer!r} is a non-zero constant")
        return None

    def _hidden_from_weights(self, node: onnx.NodeProto, input_size: int, what: str) -> int:
        """The hidden size when no shape tells it: the one size for which two of the float matrices the loop
        reads can be W [I, G*H] and R [H, G*H] (either orientation; G = 4, 3 or 1)."""
        reads = set(node.input) | set(_captured(node))
        outer = {n: v for n in reads if (v := self._constant(n)) is not None}
        sizes = hidden_sizes(_float_constants([node], outer, self.value_of, self._constant), input_size)
        if len(sizes) != 1:
            raise NotARecurrence(
                f"{what}: its state has no known hidden size (the weights fit {sorted(sizes) or 'no size'})"
            )
        return sizes.pop()

    def _is_float(self, outer: str, body: onnx.GraphProto, inner: str) -> bool:
        value = self._constant(outer)
        if value is not None:
            return value.dtype.kind == "f"
        types = {i.name: i.type for i in body.input}
        elem = types[inner].tensor_type.elem_type if inner in types else 0
        return elem in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE) or elem == 0

    # -- unrolled chains

    def _chains(self) -> list[tuple[str, str, list[onnx.NodeProto]]]:
        groups: dict[str, list[onnx.NodeProto]] = {}
        for node in self.proto.graph.node:
            if node.op_type == "MatMul" and len(node.input) == 2 and self._constant(node.input[0]) is None:
                value = self._constant(node.input[1])
                if value is not None and value.ndim == 2 and value.dtype.kind == "f":
                    groups.setdefault(node.input[1], []).append(node)
        chains = []
        for r_name, group in groups.items():
            if len(group) < 2:
                continue
            if all(self._depends(group[j + 1].input[0], group[j].output[0]) for j in range(len(group) - 1)):
                chains.append((f"unrolled:{r_name}", r_name, group))
        return chains

    def _depends(self, name: str, on: str, depth: int = 16) -> bool:
        """Whether tensor ``name`` is computed from ``on`` through at most ``depth`` nodes."""
        return self._crossed(name, on, depth) is not None

    def _crossed(self, name: str, on: str, depth: int = 16) -> set[str] | None:
        """The op types of the nodes searched until ``on`` was reached from ``name`` (None: not within ``depth``
        nodes). Breadth first: a step's previous state is a few nodes up, however large the cone of the
        step's other inputs (in a stack, the input projection reads the whole layer below)."""
        frontier, seen = {name}, set()
        crossed: set[str] = set()
        for _ in range(depth + 1):
            if on in frontier:
                return crossed
            seen |= frontier
            producers = [node for t in frontier if (node := self.scope.producers.get(t)) is not None]
            crossed |= {node.op_type for node in producers}
            frontier = {i for node in producers for i in node.input if i} - seen
        return None

    def _is_matrix(self, name: str) -> bool:
        """Whether ``name`` is a constant matrix (told from its declared dims: nothing is loaded)."""
        if name in self.scope.initializers:
            return len(self.scope.initializers[name].dims) == 2
        node = self.scope.producers.get(name)
        if node is None or node.op_type != "Constant":
            return False
        return any(a.name == "value" and len(a.t.dims) == 2 for a in node.attribute)

    def unlifted(self, claimed: set[int], reported: set[str]) -> list[tuple[str, str]]:
        """(name, reason) for what looks like an unrolled recurrence among the main graph's nodes no layer
        ``claimed`` (by id) and not ``reported`` already: MatMuls/Gemms by one shared constant matrix, one
        reading the one before it (in graph order) through a Sigmoid/Tanh/Relu within a few nodes."""
        groups: dict[str, list[tuple[onnx.NodeProto, str]]] = {}
        for node in self.proto.graph.node:
            if id(node) in claimed or node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
                continue
            weights = [i for i in node.input[:2] if self._is_matrix(i)]
            if len(weights) == 1:
                groups.setdefault(weights[0], []).append((node, next(i for i in node.input[:2] if i != weights[0])))
        found = []
        for weight, members in groups.items():
            name = f"unrolled:{weight}"
            if name in reported or len(members) < 2:
                continue
            through = set()
            for (earlier, _), (_, data) in zip(members, members[1:]):  # in graph order
                crossed = self._crossed(data, earlier.output[0])
                through |= (crossed or set()) & {"Sigmoid", "Tanh", "Relu"}
            if through:
                ops = "/".join(sorted({n.op_type for n, _ in members}))
                found.append((name, f"{len(members)} {ops} nodes by one constant {weight!r}, each step reading an "
                                    f"earlier one's output through {'/'.join(sorted(through))}, look like an unrolled "
                                    "recurrence, but no GRU/RNN/LSTM layer was lifted from them"))  # fmt: skip
        return found

    def _unrolled(self, name: str, r_name: str, group: list[onnx.NodeProto], direction: Direction) -> Region:
        what = f"the {len(group)} MatMuls by {r_name!r}"
        states = [mm.input[0] for mm in group]
        kind_of = self.scope.producers.get(states[1])
        if kind_of is None:
            raise NotARecurrence(f"{what}: the state {states[1]!r} is a graph input")
        depth = self._distance(group[-2].output[0], states[-1])
        last = self._downstream(group[-1].output[0], kind_of.op_type, depth)
        if depth is None or last is None:
            raise NotARecurrence(f"{what}: the state after the last step cannot be told apart")
        first = self.scope.producers.get(states[0])
        initial = None
        if first is None or first.op_type != kind_of.op_type:
            initial, states = states[0], states[1:]
        states.append(last)
        upstream = self._step_nodes(states, initial)
        activations = frozenset(op.lower() for op in {n.op_type for n in upstream} & {"Sigmoid", "Tanh", "Relu"})
        projections = [
            n
            for n in upstream
            if n.op_type in ("MatMul", "Gemm")
            and n.input[1] != r_name
            and self._constant(n.input[1]) is not None
            and not any(self._depends(n.input[0], s) for s in states)
        ]
        sources = {self._source(n.input[0]) for n in projections}
        if len(sources) != 1:
            raise NotARecurrence(f"{what}: {len(sources)} candidate sequence inputs (one expected)")
        x = sources.pop()
        dims = self._dims(last) or []
        hidden = dims[-1] if dims and isinstance(dims[-1], int) else None
        cell = "/".join(sorted(activations))
        found = f"{len(states)} unrolled {cell} steps (as torch.onnx's dynamo exporter writes nn.RNN)"
        return self._build(
            name, found, "unrolled", direction, x, [initial, None], activations, hidden, len(states),
            outputs=states, y_seq=None, finals=[None, None], states=states,
        )  # fmt: skip

    def _step_nodes(self, states: list[str], initial: str | None) -> list[onnx.NodeProto]:
        """The nodes the steps are made of: up from the states to the MatMuls by constants (the
        recurrent ones and the input projection), whose data inputs are not followed further."""
        found: dict[int, onnx.NodeProto] = {}
        stack = list(states)
        while stack:
            node = self.scope.producers.get(stack.pop())
            if node is None or id(node) in found or (initial and initial in node.output):
                continue
            found[id(node)] = node
            by_constant = node.op_type in ("MatMul", "Gemm") and self._constant(node.input[1]) is not None
            stack.extend(node.input[1:] if by_constant else node.input)
        return list(found.values())

    def _distance(self, start: str, target: str) -> int | None:
        frontier, depth = {start}, 0
        while frontier and depth < 16:
            if target in frontier:
                return depth
            frontier = {o for t in frontier for n in self.scope.consumers.get(t, []) for o in n.output}
            depth += 1
        return None

    def _downstream(self, start: str, op_type: str, depth: int | None) -> str | None:
        if depth is None:
            return None
        frontier = {start}
        for _ in range(depth):
            frontier = {o for t in frontier for n in self.scope.consumers.get(t, []) for o in n.output}
        hits = [t for t in frontier if (p := self.scope.producers.get(t)) is not None and p.op_type == op_type]
        return hits[0] if len(hits) == 1 else None

    def _source(self, name: str) -> str:
        """Up through shape-only ops (Slice, Squeeze, Gather...) to the tensor the steps read from."""
        while True:
            node = self.scope.producers.get(name)
            if node is None or node.op_type not in _SHAPE_OPS or self._constant(node.input[0]) is not None:
                return name
            name = node.input[0]

    # -- one unrolled step (a per-frame export)

    def _single_steps(self) -> list[_Step]:
        """Every step a per-frame export unrolled once: a MatMul by a constant R [H, G*H] (G = 4: LSTM, 3: GRU) used
        by no other MatMul, whose data input is a state the graph takes as an input (through Slice/Squeeze/Gather...:
        the previous frame's state, fed back by the caller), followed by the cell's equations (a product without them,
        e.g. a dense layer on an input, is no step). A GRU with the reset before the product multiplies by R's z and r
        blocks [H, 2H], and by its h block [H, H] the state times r (``_reset_product``): R is the two joined."""
        uses: dict[str, int] = {}
        for node in self.proto.graph.node:
            if node.op_type == "MatMul" and len(node.input) == 2:
                uses[node.input[1]] = uses.get(node.input[1], 0) + 1
        found = []
        for node in self.proto.graph.node:
            if node.op_type != "MatMul" or len(node.input) != 2 or uses[node.input[1]] != 1:
                continue
            dims, state = self._float_matrix(node.input[1]), node.input[0]
            if dims is None or state in self.scope.initializers:
                continue
            hidden, fused = dims
            gates = fused // hidden if fused % hidden == 0 else 0
            reset = self._reset_product(node, hidden) if gates == 2 else None
            if (gates in (3, 4) or reset) and self._source(state) in self.graph_inputs:
                try:
                    ends = self._step_ends(node, 3 if reset else gates)
                except NotARecurrence:
                    continue
                found.append(_Step(f"step:{node.input[1]}", node, ends, (node.input[1], reset) if reset else None))
        return found

    def _reset_product(self, product: onnx.NodeProto, hidden: int) -> str | None:
        """The constant [H, H] a GRU with the reset before the product multiplies r * h_prev by (a MatMul within a
        few nodes of ``product``, h_prev's product by the z and r blocks), or None."""
        for node in self._forward(product.output[0], 6).values():
            mul = self.scope.producers.get(node.input[0]) if node.op_type == "MatMul" else None
            if mul is not None and mul.op_type == "Mul" and product.input[0] in mul.input:
                if self._float_matrix(node.input[1]) == (hidden, hidden):
                    return node.input[1]
        return None

    def _single_step(self, name: str, recurrent: onnx.NodeProto, ends: tuple, joined: tuple | None) -> Region:
        """The region of one unrolled LSTM or GRU step: its states ``ends`` (h_prev, h_t, c_prev, c_t; c None for a
        GRU), its X the tensor the input projection reads, its initial states the graph's state inputs; a layer of
        sequence length 1, its Y_h (and Y_c) the new states. ``joined``: the two constants whose columns make R (a
        GRU with the reset before the product), offered to the proof as one more constant, ``NAME:R``."""
        h_prev, h_t, c_prev, c_t = ends
        what = f"the step multiplying {h_prev!r} by {recurrent.input[1]!r}"
        finals = [h_t, c_t]
        upstream = self._step_nodes([f for f in finals if f], h_prev)
        activations = frozenset(op.lower() for op in {n.op_type for n in upstream} & {"Sigmoid", "Tanh", "Relu"})
        projections = [
            n
            for n in upstream
            if n.op_type in ("MatMul", "Gemm")
            and n is not recurrent
            and self._constant(n.input[1]) is not None
            and not self._depends(n.input[0], h_prev)
        ]
        sources = {self._source(n.input[0]) for n in projections}
        if len(sources) != 1:
            raise NotARecurrence(f"{what}: {len(sources)} candidate inputs (one expected)")
        cell = "LSTM" if c_t else "GRU"
        found = f"one unrolled {cell} step (a per-frame export: the states are the graph's inputs and outputs)"
        hidden = (self._float_matrix(recurrent.input[1]) or (0, 0))[0]  # (a matrix: _single_steps)
        region = self._build(
            name, found, "step", Direction.FORWARD, sources.pop(), [h_prev, c_prev], activations, hidden, 1,
            outputs=[f for f in finals if f], y_seq=None, finals=finals, states=None,
        )  # fmt: skip
        if joined:
            blocks = [self._constant(n) for n in joined]
            region.constants[f"{name}:R"] = np.concatenate(blocks, axis=1)  # type: ignore[arg-type]
        return region

    def _float_matrix(self, name: str) -> tuple[int, int] | None:
        """The dims of a constant float matrix (an initializer or a Constant node's; told without loading it)."""
        tensor = self.scope.initializers.get(name)
        node = self.scope.producers.get(name)
        if tensor is None and node is not None and node.op_type == "Constant":
            tensor = next((a.t for a in node.attribute if a.name == "value"), None)
        floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
        if tensor is None or len(tensor.dims) != 2 or tensor.data_type not in floats:
            return None
        return int(tensor.dims[0]), int(tensor.dims[1])

    def _step_ends(self, recurrent: onnx.NodeProto, gates: int) -> tuple[str, str, str | None, str | None]:
        """(h_prev, h_t, c_prev, c_t) of a single step (c: an LSTM's; None for a GRU), found by the cell's equations
        (``_lstm_ends``, ``_gru_end``): NotARecurrence where they are not there."""
        h_prev = recurrent.input[0]
        what = f"the step multiplying {h_prev!r} by {recurrent.input[1]!r}"
        after = self._forward(recurrent.output[0], 12)
        if gates == 4:
            h_t, c_t, c_prev = self._lstm_ends(after, h_prev, what)
            return h_prev, h_t, c_prev, c_t
        return h_prev, self._gru_end(recurrent.output[0], after, h_prev, what), None, None

    def step_states(self) -> list[tuple[str, str]]:
        """(state before, state after) of every single unrolled step (``_single_steps``): h_prev -> h_t and an LSTM's
        c_prev -> c_t, as the cell's equations show them (the wiring a streaming model feeds back; unproven here)."""
        pairs: list[tuple[str, str]] = []
        for step in self._single_steps():
            h_prev, h_t, c_prev, c_t = step.ends
            pairs += [(h_prev, h_t)] + ([(c_prev, c_t)] if c_prev and c_t else [])
        return pairs

    def _forward(self, start: str, depth: int) -> dict[str, onnx.NodeProto]:
        """The nodes within ``depth`` consumers of ``start``, by output name (the first output each)."""
        found: dict[str, onnx.NodeProto] = {}
        frontier = {start}
        for _ in range(depth):
            nodes = [n for t in frontier for n in self.scope.consumers.get(t, [])]
            found.update((n.output[0], n) for n in nodes if n.output)
            frontier = {o for n in nodes for o in n.output}
        return found

    def _lstm_ends(self, after: dict[str, onnx.NodeProto], h_prev: str, what: str) -> tuple[str, str, str]:
        """(h_t, c_t, c_prev) of an LSTM step: c_t = f*c_prev + i*g an Add of two Muls, one reading a state input
        c_prev (not h_prev); h_t = o*tanh(c_t) the Mul reading Tanh(c_t). What the gates are is left to the proof."""
        for c_t, add in after.items():
            if add.op_type != "Add":
                continue
            muls = [self.scope.producers.get(i) for i in add.input]
            if not all(m is not None and m.op_type == "Mul" for m in muls):
                continue
            states = [i for m in muls for i in m.input  # type: ignore[union-attr]
                      if i != h_prev and self._source(i) in self.graph_inputs]  # fmt: skip
            tanhs = [n.output[0] for n in self.scope.consumers.get(c_t, []) if n.op_type == "Tanh"]
            h_ts = [n.output[0] for t in tanhs for n in self.scope.consumers.get(t, []) if n.op_type == "Mul"]
            if len(states) == 1 and len(h_ts) == 1:
                return h_ts[0], c_t, states[0]
        raise NotARecurrence(f"{what}: no c_t = f*c + i*g reading a state input and h_t = o*tanh(c_t) after it")

    def _gru_end(self, product: str, after: dict[str, onnx.NodeProto], h_prev: str, what: str) -> str:
        """h_t of a GRU step: the Add or Sub farthest from the recurrent product that reads h_prev within three
        nodes through no MatMul (z*h_prev + (1-z)*n, or n + z*(h_prev - n)). The proof checks the reading."""
        ends = [
            (self._distance(product, out), out)
            for out, node in after.items()
            if node.op_type in ("Add", "Sub")
            and (crossed := self._crossed(out, h_prev, 3)) is not None
            and not crossed & {"MatMul", "Gemm"}
        ]
        if not ends:
            raise NotARecurrence(f"{what}: no h_t = z*h + (1-z)*n reading the state input after it")
        return max(ends, key=lambda e: e[0] or 0)[1]

    # -- building

    def _build(
        self, name, found, kind, direction, x_seq, initials, activations, hidden, steps, *, outputs, y_seq, finals,
        states, mask=None, keep_last=False, hold=None
    ) -> Region:  # fmt: skip
        """The region found: ``initials``, ``finals`` (h, c/None); ``states`` unrolled steps, ``y_seq`` a Loop's Y."""
        x_dims = self._dims(x_seq) or []
        out = _Adapters(name, self.opset)
        x_source = None
        if kind == "step" and len(x_dims) == 2:  # one step's input [N, I]: the layer's X is [1, N, I]
            x_source, x_seq, x_dims = x_seq, f"{name}:X", [1, *x_dims]
            out.axes("Squeeze", x_seq, [0], x_source)
        if len(x_dims) != 3 or not isinstance(x_dims[2], int):
            raise NotARecurrence(f"{found}: its sequence input {x_seq!r} has no known [S, N, I] shape")
        if not isinstance(hidden, int):
            raise NotARecurrence(f"{found}: its state has no known hidden size")
        x, layout, absorbed = self._layout(x_seq, any(initials))
        boundary = {x_source or x} | {i for i in initials if i} | {m for m in (mask, hold) if m}
        nodes, constants = self._cone(outputs, boundary, found)
        seq = x_dims[0] if isinstance(x_dims[0], int) else steps
        if steps is not None and isinstance(x_dims[0], int) and x_dims[0] != steps:
            raise NotARecurrence(f"{found}: it runs {steps} steps over a sequence of {x_dims[0]}")
        exposed: dict[str, tuple] = {}
        if states is not None:  # unrolled: one tensor per step, in processing order
            y0, final_states = self._unrolled_outputs(out, name, direction, states, nodes, exposed)
        else:  # Loop: a scanned [S,N,H] in processing order and final [N,H] states
            ends = (y_seq, finals, mask, keep_last)
            y0, final_states = self._loop_outputs(out, name, direction, x_seq, ends, exposed)
        y, y_h, y_c = _in_layout(out, name, layout, y0, final_states)
        canonical = [self._canonical_initial(out, name, role, initial, found)
                     for role, initial in zip(("initial_h", "initial_c"), initials)]  # fmt: skip
        constants.update(out.constants)
        region_nodes = [n for n in nodes if not any(n is a for a in absorbed)]
        return Region(
            name=name,
            found=found,
            kind=kind,
            direction=direction,
            nodes=absorbed + region_nodes,
            adapters=out.nodes,
            constants=constants,
            x=x,
            x_source=x_source,
            initial_h=canonical[0][0],
            initial_source=canonical[0][1],
            initial_c=canonical[1][0],
            initial_c_source=canonical[1][1],
            y=y,
            y_h=y_h,
            y_c=y_c,
            layout=layout,
            seq_length=seq,
            batch_size=x_dims[1] if isinstance(x_dims[1], int) else None,
            input_size=x_dims[2],
            hidden_size=hidden,
            activations=activations,
            exposed=exposed,
            sequence_lens=f"{name}:sequence_lens" if mask else None,
            mask=mask,
            hold=hold,
        )

    def _loop_outputs(
        self,
        out: _Adapters,
        name: str,
        direction: Direction,
        x_seq: str,
        ends: tuple[str | None, list[str | None], str | None, bool],
        exposed: dict,
    ) -> tuple[str | None, list[str | None]]:
        """Y0 [S,1,N,H] in time order (None: the loop scans no Y out) and the final states ([1,N,H] h and c/None)
        of a loop, from ``ends``: its scanned Y [S,N,H] in processing order, final (h, c), mask by lengths and
        whether it keeps its last output past each length (``_by_lengths``); what the rest of the graph reads of
        them goes into ``exposed``."""
        y_seq, finals, mask, keep_last = ends
        y0 = None
        if y_seq:
            in_time = out.reverse_time(y_seq, f"{name}:in_time") if direction is Direction.REVERSE else y_seq
            y0 = out.axes("Unsqueeze", in_time, [1], f"{name}:Y0")
            exposed[y_seq] = ("Y_seq", direction is Direction.REVERSE)
        if mask:
            assert y0 is not None  # (a masked loop shows its sequence: _check_masked)
            y0 = self._by_lengths(out, name, mask, x_seq, y0, finals[0] if keep_last else None)
            if keep_last:
                exposed[y_seq] = ("Y_kept", mask, len(self._dims(mask) or []))
        final_states = [out.axes("Unsqueeze", f, [0], f"{name}:{role}0") if f else None
                        for role, f in zip(("Y_h", "Y_c"), finals)]  # fmt: skip
        exposed.update((f, (role, 2)) for role, f in zip(("Y_h", "Y_c"), finals) if f)
        return y0, final_states

    def _unrolled_outputs(self, out: _Adapters, name: str, direction, states, nodes, exposed: dict) -> tuple:
        """Y0 [S,1,N,H] and the final states ([1,N,H] h, None) of unrolled steps (one tensor per step, in
        processing order); each step the rest of the graph reads goes into ``exposed``."""
        ranks = [len(self._dims(s) or [0, 0, 0]) for s in states]
        steps_4d = [out.axes("Unsqueeze", s, [1] if r == 3 else [0, 1], f"{name}:step{t}") for t, (s, r) in
                    enumerate(zip(states, ranks))]  # fmt: skip
        if direction is Direction.REVERSE:
            steps_4d = steps_4d[::-1]
        y0 = out.add("Concat", steps_4d, f"{name}:Y0", axis=0)
        last, last_rank = states[-1], ranks[-1]
        final_states = [last if last_rank == 3 else out.axes("Unsqueeze", last, [0], f"{name}:Y_h0"), None]
        read = self._read_outside(nodes)
        for t, (s, r) in enumerate(zip(states, ranks)):
            if s in read:
                exposed[s] = ("Y", t if direction is Direction.FORWARD else len(states) - 1 - t, r)
        return y0, final_states

    def _by_lengths(self, out: _Adapters, name: str, mask: str, x_seq: str, y0: str, final_h: str | None) -> str:
        """For a loop masked by lengths: the adapter making its mask [S,N] or [S,N,1] from the canonical
        sequence_lens (mask[t, n] = t < sequence_lens[n], in the mask's type) to run it alone, and its canonical
        Y. With ``final_h`` (the loop keeps its last output past each length, as Keras does): the loop's Y
        within each row's length and, past it, the loop's Y minus its last state, which is zero exactly where
        it keeps its last output; ``replace_in_place`` restores that as Where(mask, Y, Y_h). Without: the
        loop's Y as it is (zero past each length, as ONNX's is). Anything else past a length shows in the proof."""
        dims = self._dims(mask)
        if self.opset < 11 or dims is None or len(dims) not in (2, 3) or (len(dims) == 3 and dims[2] != 1):
            raise NotARecurrence(f"{name}: its mask {mask!r} is not [S, N] or [S, N, 1] (opset 11 or later)")
        lengths = out.add("Cast", [f"{name}:sequence_lens"], f"{name}:lengths", to=onnx.TensorProto.INT64)
        length = out.add("Gather", [out.add("Shape", [x_seq], f"{name}:x_shape"), out.scalar(0)], f"{name}:S")
        steps = out.add("Range", [out.scalar(0), length, out.scalar(1)], f"{name}:steps")
        steps, lengths = (
            out.axes("Unsqueeze", steps, [1], f"{name}:t"),
            out.axes("Unsqueeze", lengths, [0], f"{name}:n"),
        )
        within = out.add("Less", [steps, lengths], f"{name}:within")
        if len(dims) == 3:
            within = out.axes("Unsqueeze", within, [2], f"{name}:within3")
        out.add("Cast", [within], mask, to=self._mask_type(mask))
        if final_h is None:
            return y0
        condition = out.add("Cast", [mask], f"{name}:condition", to=onnx.TensorProto.BOOL)
        condition = out.axes("Unsqueeze", condition, [1] if len(dims) == 3 else [1, 3], f"{name}:condition4")
        past = out.add("Sub", [y0, final_h], f"{name}:Y_past")
        return out.add("Where", [condition, y0, past], f"{name}:Y0_within")

    def mask_form(self, mask: str) -> tuple[str, int]:
        """(numpy dtype name, rank) of a loop's mask, as ``lifting.Recurrence.mask_form`` samples it."""
        elem = self._mask_type(mask)
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name, len(self._dims(mask) or [0, 0])

    def _mask_type(self, mask: str) -> int:
        """The element type of a mask: the last Cast's on the way from its comparison, else bool."""
        name = mask
        while (node := self.scope.producers.get(name)) is not None and node.op_type != "Cast":
            if node.op_type not in ("Transpose", "Unsqueeze", "Squeeze", "Identity"):
                return onnx.TensorProto.BOOL
            name = node.input[0]
        return _attr(node, "to", onnx.TensorProto.BOOL) if node is not None else onnx.TensorProto.BOOL

    def _canonical_initial(self, out: _Adapters, name: str, role: str, initial: str | None, found: str) -> tuple:
        """(the canonical [1,N,H] input of an initial state, the original [N,H] tensor an adapter makes of it
        if it is not the same)."""
        if initial is None:
            return None, None
        rank = len(self._dims(initial) or [])
        if rank == 3:
            return initial, None
        if rank != 2:
            raise NotARecurrence(f"{found}: its initial state {initial!r} has no known rank 2 or 3 shape")
        canonical = f"{name}:{role}"
        axes = [out._const([0])] if self.opset >= 13 else []
        attributes: dict[str, Any] = {} if self.opset >= 13 else {"axes": [0]}
        out.nodes.insert(0, helper.make_node("Squeeze", [canonical, *axes], [initial], name=f"{canonical}:Squeeze",
                                             **attributes))  # fmt: skip
        return canonical, initial

    def _read_outside(self, nodes: list[onnx.NodeProto]) -> set[str]:
        """Tensors of ``nodes`` read by other nodes or by the graph's outputs."""
        inside = {id(n) for n in nodes}
        produced = {o for n in nodes for o in n.output}
        outputs = {o.name for o in self.proto.graph.output}
        read = {t for t in produced if t in outputs}
        for node in self.proto.graph.node:
            if id(node) not in inside:
                read |= produced & (set(node.input) | set(_captured(node)))
        return read

    def weights(self, region: Region) -> dict[str, np.ndarray]:
        """The float constants a region's step may multiply by: its initializers and Constant nodes,
        and those of its subgraphs."""
        return _float_constants(region.nodes, region.constants, self.value_of, self._constant)


def _float_constants(nodes: list[onnx.NodeProto], constants: dict, value_of, constant) -> dict[str, np.ndarray]:
    """The float ``constants`` (by name), the outputs of the Constant ``nodes`` and the initializers of
    their subgraphs."""
    found = {k: v for k, v in constants.items() if v.dtype.kind == "f"}
    for node in nodes:
        for sub in node_subgraphs(node):
            for inner in _all_graphs(sub):
                for init in inner.initializer:
                    value = value_of(init)
                    if value.dtype.kind == "f":
                        found[init.name] = value
        if node.op_type == "Constant":
            value = constant(node.output[0])
            if value is not None and value.dtype.kind == "f":
                found[node.output[0]] = value
    return found


def _masked_text(mask: str | None, prefix: bool) -> str:
    """How a loop's mask is read, for the finding."""
    if not mask:
        return ""
    if prefix:
        return f", masked by {mask!r}, a prefix of each row (its lengths become sequence_lens)"
    return f", masked by {mask!r} step by step (Keras masking: a per-step hold, the layer's mask input)"


def _step_activations(body: onnx.GraphProto) -> frozenset[str]:
    """The activations a loop body applies (lower-case): its Sigmoid/Tanh/Relu ops, and "hardsigmoid" for
    a HardSigmoid op or a Clip (a hard sigmoid written as Clip with Mul/Add around it)."""
    ops = {n.op_type for n in _all_nodes(body)}
    found = {op.lower() for op in ops & {"Sigmoid", "Tanh", "Relu"}}
    return frozenset(found | ({"hardsigmoid"} if ops & {"HardSigmoid", "Clip"} else set()))


def _inferred_shapes(proto: onnx.ModelProto) -> dict[str, list]:
    """Static and symbolic dims of every main-graph tensor onnx's shape inference can tell."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # a model shape inference cannot follow: declared shapes only
        inferred = proto
    graph = inferred.graph
    shapes = {}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            shapes[info.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
            ]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _all_graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    found = [graph]
    for node in graph.node:
        for sub in node_subgraphs(node):
            found += _all_graphs(sub)
    return found


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [n for g in _all_graphs(graph) for n in g.node]


def _defined(graph: onnx.GraphProto) -> set[str]:
    names = set()
    for g in _all_graphs(graph):
        names |= {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    return names


def _captured(node: onnx.NodeProto) -> list[str]:
    """Outer tensors a node's subgraphs read."""
    found = []
    for sub in node_subgraphs(node):
        defined = _defined(sub)
        found += [i for n in _all_nodes(sub) for i in n.input if i and i not in defined]
    return found


def _through(graph: onnx.GraphProto, name: str) -> str:
    """``name`` traced back through Identity nodes."""
    producers = {o: n for n in graph.node for o in n.output}
    while name in producers and producers[name].op_type in _STATE_KEEPERS:
        name = producers[name].input[0]
    return name


def _attr(node: onnx.NodeProto, name: str, default):
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def perm_of(node: onnx.NodeProto) -> list | None:
    """A Transpose's perm attribute, or None."""
    perm = _attr(node, "perm", None)
    return list(perm) if perm is not None else None


def _in_layout(
    out: _Adapters, name: str, layout: int, y0: str | None, final_states: list[str | None]
) -> tuple[str | None, str | None, str | None]:
    """The region's canonical Y, Y_h and Y_c (``name:Y`` ...) from Y0 [S,1,N,H] and the states [1,N,H]: Identities
    for a sequence-major layer, Transposes to Y [N,S,1,H] and states [N,1,H] for a batch-major one (``layout``)."""
    y = None
    if y0 is not None:
        y = (
            out.add("Transpose", [y0], f"{name}:Y", perm=[2, 0, 1, 3])
            if layout
            else out.add("Identity", [y0], f"{name}:Y")
        )
    canonical_states = []
    for role, state in zip(("Y_h", "Y_c"), final_states):
        if state is not None and layout:
            state = out.add("Transpose", [state], f"{name}:{role}", perm=[1, 0, 2])
        elif state is not None:
            state = out.add("Identity", [state], f"{name}:{role}")
        canonical_states.append(state)
    return y, canonical_states[0], canonical_states[1]


def _reverses_time(node: onnx.NodeProto, constant) -> bool:
    """A ReverseSequence over time (axis 0; its lengths are checked by the proof) or a Slice with step -1 on axis 0."""
    if node.op_type == "ReverseSequence":
        return _attr(node, "time_axis", 0) == 0 and _attr(node, "batch_axis", 1) == 1
    if node.op_type == "Slice" and len(node.input) >= 5:
        axes, steps = constant(node.input[3]), constant(node.input[4])
        return axes is not None and steps is not None and list(axes) == [0] and list(steps) == [-1]
    return False


def node_inputs(region: Region) -> tuple[str, str]:
    """The X and W tensor names of the GRU/RNN node that replaces ``region`` in place."""
    return (region.x if region.layout == 0 else f"{region.name}:X0", f"{region.name}:W")


def replace_in_place(proto: onnx.ModelProto, lifted: list[tuple[Region, Replacement]]) -> None:
    """Replace each region of ``proto``'s main graph by its replacement (its GRU/RNN/LSTM node, or a Loop; layout
    0, reading ``node_inputs``; its weights given as arrays) and nodes recomputing every original tensor the rest
    of the graph reads from the replacement's Y and Y_h. Original nodes nothing reads any more are removed,
    with the initializers only they read; the graph stays in execution order."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    graph = proto.graph
    regional: set[tuple] = set()  # a node of the graph is known by its outputs (the region's may be another copy)
    new_nodes: list[onnx.NodeProto] = []
    for region, replacement in lifted:
        node_in, node_out = replacement.inputs + [""] * (7 - len(replacement.inputs)), replacement.outputs
        out = _Adapters(f"{region.name}:restore", opset)
        x0 = node_inputs(region)[0]
        if region.layout == 1:
            out.add("Transpose", [region.x], x0, perm=[1, 0, 2])
        elif region.x_source is not None:  # the node reads [1,N,I]; the source has one step's [N,I]
            out.axes("Unsqueeze", region.x_source, [0], x0)
        for source, at in ((region.initial_source, 5), (region.initial_c_source, 6)):
            if source is not None:  # the node reads [1,N,H]; the source has [N,H]
                out.axes("Unsqueeze", source, [0], node_in[at])
        if region.mask:  # the node reads sequence_lens; the source has a prefix mask
            out.lengths(region.mask, node_in[4])
        y = node_out[0]
        for tensor, how in region.exposed.items():
            if how[0] == "Y_seq":
                squeezed = out.axes("Squeeze", y, [1], f"{tensor}:sequence" if how[1] else tensor)
                if how[1]:
                    out.reverse_time(squeezed, tensor)
            elif how[0] in ("Y_h", "Y_c"):
                out.axes("Squeeze", node_out[1 if how[0] == "Y_h" else 2], [0], tensor)
            elif how[0] == "Y_kept":
                steps = out.axes("Squeeze", y, [1], f"{tensor}:sequence")
                last = out.axes("Squeeze", node_out[1], [0], f"{tensor}:last")
                out.keep_last(steps, last, how[1], how[2], tensor)
            else:
                _, step, rank = how
                sliced = out.step(y, step, f"{tensor}:step")
                out.axes("Squeeze", sliced, [1] if rank == 3 else [0, 1], tensor)
        new_nodes += replacement.nodes + out.nodes
        for name, value in {**replacement.weights, **out.constants}.items():
            graph.initializer.append(numpy_helper.from_array(value, name))
        regional.update(tuple(n.output) for n in region.nodes)
    restored = {o for n in new_nodes for o in n.output}
    kept = [n for n in graph.node if tuple(n.output) not in regional]
    candidates = [n for n in graph.node if tuple(n.output) in regional]
    needed = {i for n in kept + new_nodes for i in list(n.input) + _captured(n)} | {o.name for o in graph.output}
    for node in reversed(candidates):  # a region node stays only if something still reads what it makes
        if any(o in needed and o not in restored for o in node.output):
            kept.append(node)
            needed |= set(node.input) | set(_captured(node))
    removed_inputs = {i for n in candidates for i in list(n.input) + _captured(n)}
    ordered = _execution_order(kept + new_nodes, {i.name for i in graph.input} | {t.name for t in graph.initializer})
    del graph.node[:]
    graph.node.extend(ordered)
    still_read = {i for n in ordered for i in list(n.input) + _captured(n)} | {o.name for o in graph.output}
    unused = [t for t in graph.initializer if t.name in removed_inputs and t.name not in still_read]
    for tensor in unused:
        graph.initializer.remove(tensor)


def _execution_order(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` sorted so each comes after what it reads (stable: the given order where it allows)."""
    ready = set(available)
    pending = list(nodes)
    ordered = []
    while pending:
        rest = []
        for node in pending:
            if all(not i or i in ready for i in list(node.input) + _captured(node)):
                ordered.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # inputs from outside (an outer scope): keep their order
            ordered += rest
            break
        pending = rest
    return ordered

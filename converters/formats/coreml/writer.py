"""Core ML ML Programs: GRU, RNN and LSTM layers written with coremltools' MIL builder, read back without a
Core ML runtime, and executed by a NumPy interpreter of the MIL ops gatepack emits.

MIL's recurrent ops (docs/conventions.md §5) differ from ONNX::


* gate blocks r, o, z (o = the candidate): ONNX z, r, h rows permuted by ``apple.to_apple`` (the family's gate table,
  ``coreml.registration.GATES``);
* reset_after = False (every target) is reset-*before*: ``o = g(W_o x + b_o + W_ho (r * h) + b_ho)``,
  whatever Apple's docs print; the biases are then additive and ``bias = Wb + Rb`` (folded);
* reset_after = True (iOS18) is ONNX linear_before_reset = 1: ``bias = Rb``, ``input_bias = Wb``;
* a reverse op returns its output sequence in *processing order*: gatepack reverses it back to
  input time, as ONNX has it;
* no bidirectional mode (two ops, stacked into ONNX's Y [S,D,N,H]), no clip, no sequence lengths,
  activations are parameterless strings.

Strategies: ``native`` uses ``gru``/``rnn`` where they compute exactly what ONNX specifies
(activations Sigmoid/Tanh/Relu, no clip, no sequence_lens, linear_before_reset = 1 only from iOS18);
``decomposed`` writes the cell from elementary MIL ops in a ``while_loop`` (each step the cell's step of
``converters.cell_steps``, built through ``_MilOps``; one matmul for every step's input projection outside
it, a ``scatter`` of each step's output, masks for sequence_lens, ``reverse_sequence`` for the reverse
direction); ``auto`` picks native where it is exact.

Core ML sanitises tensor names (``a/b:0`` becomes ``a_b_0``); the package's metadata
(``gatepack``) keeps the source's names and every layer's description, so the layer reads back whole
and ``run`` takes the source's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import gatepack.converters.formats.coreml.compressed as compressed
from gatepack.converters.apple import (
    NATIVE_ACTIVATIONS,
    apple_peephole,
    apple_tensor,
    to_apple,
)
from gatepack.converters.cell_steps import step_of
from gatepack.converters.description import describe
from gatepack.converters.formats.coreml.common import (
    NEWEST_TARGET,
    TARGETS,
    _ct,
    _target_rank,
    check_sanitised_names,
    choose_strategy,
    lut_unholdable,
    safe_name,
    unholdable,
    written_straight,
)
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.quantization import floats_only
from gatepack.schemas.layer import (
    OUTPUT_ROLES,
    Cell,
    Direction,
    DirectionParams,
    RecurrentLayer,
    state_roles,
)


def build(model: Model, *, strategy: str = "auto", target: str = NEWEST_TARGET):
    """A MIL ``Program`` holding every layer with the source's interface (chained inputs apart), and its
    description."""
    ct = _ct()
    model = with_separate_inputs(model)
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program, get_new_symbol, types

    symbols: dict[str, object] = {}

    def dim(value, key: str):
        if isinstance(value, int):
            return value
        return symbols.setdefault(key, get_new_symbol())

    specs: dict[str, object] = {}
    names: dict[str, str] = {}
    for layer in model.layers:
        itf = layer.interface
        s, n = dim(itf.seq_length, f"S/{layer.name}"), dim(itf.batch_size, f"N/{itf.x}")
        d, h = layer.num_directions, layer.hidden_size
        shapes: dict[str, tuple[tuple, Any]] = {  # tensor -> (shape, MIL type)
            itf.x: ((n, s, layer.input_size) if itf.layout else (s, n, layer.input_size), types.fp32)
        }
        fed = layer.fed_roles()  # an input the layer holds as a constant is a const op, not a placeholder
        if "sequence_lens" in fed and itf.sequence_lens:  # (a fed role is named)
            shapes[itf.sequence_lens] = ((n,), types.int32)
        for role in ("initial_h", "initial_c"):
            if role in fed:
                shapes[getattr(itf, role)] = ((n, d, h) if itf.layout else (d, n, h), types.fp32)
        for name, (shape, dtype) in shapes.items():
            if name not in specs:
                names[name] = safe_name(name)
                specs[name] = mb.placeholder(shape=shape, dtype=dtype)
    described = []
    with Function({names[k]: v for k, v in specs.items()}, opset_version=getattr(ct.target, target)) as function:
        outputs = []
        for layer in model.layers:
            itf = layer.interface
            given = {role: function.inputs[names[getattr(itf, role)]] for role in ("x", *layer.fed_roles())}
            results, chosen = emit_layer(mb, layer, given, strategy, target)
            for name, value in zip((getattr(itf, role) for role in OUTPUT_ROLES), results):
                if name:
                    names[name] = safe_name(name)
                    outputs.append(mb.identity(x=value, name=names[name]))
            described.append(description_entry(layer, chosen, target))
        function.set_outputs(outputs)
    check_sanitised_names(model.path, names)
    program = Program()
    program.add_function("main", function)
    return program, {"layers": described, "names": names}


def description_entry(layer: RecurrentLayer, chosen: str, target: str) -> dict:
    """gatepack's description of ``layer`` as written in a package (fp32 interface and weights, whatever the source's).
    ``"weights": "rows"``: the decomposed cell's W and R constants are stored as the layer holds them, [G*H, I] and
    [G*H, H] (its ``matmul``s transpose them); packages written before held W^T and R^T and lack the field."""
    description = describe(layer)
    description["interface"]["dtype"] = "float32"
    entry = {"name": layer.name, "strategy": chosen, "target": target, **description}
    if chosen == "decomposed":
        entry["weights"] = "rows"
    return entry


def emit_layer(mb, layer: RecurrentLayer, given: dict, strategy: str, target: str) -> tuple[tuple, str]:
    """MIL ops computing ``layer`` from ``given`` (interface role -> MIL var, in the interface's layout: ``x`` and
    every role the layer does not hold as a constant); return (Y, Y_h[, Y_c]) in that layout and the strategy
    chosen (native op where it is exact, else the ``while_loop`` decomposition)."""
    chosen, _ = choose_strategy(layer, strategy, target)
    if (layer.is_quantized or layer.is_palettized) and _records_unheld(layer, target):  # (refused unless asked)
        layer = floats_only(layer)
    x = given["x"]
    held = _held_constants(mb, layer, x)
    lens = given.get("sequence_lens", held.get("sequence_lens"))
    states = {role: given.get(role, held.get(role)) for role, _ in state_roles(layer.cell)}
    if chosen == "native":
        return _emit_native(mb, layer, x, states, target), chosen
    return _emit_decomposed(mb, layer, x, lens, states, target), chosen


def _records_unheld(layer: RecurrentLayer, target: str) -> str | None:
    """Why ``layer``'s quantized records cannot be written as constexpr ops at ``target`` (None: they can)."""
    records = [r for p in layer.directions for r in (p.Wq, p.Rq) if r is not None]
    tables = [r for p in layer.directions for r in (p.Wlut, p.Rlut) if r is not None]
    return (unholdable(records, target) if records else None) or (lut_unholdable(tables, target) if tables else None)


def _weight(mb, layer: RecurrentLayer, k: int, role: str, name: str, target: str, native_key: str | None = None):
    """Direction ``k``'s W or R as a const op named ``name``, or, when the layer holds its integers, the constexpr
    op decompressing them (``compressed.emit``); ``native_key``: as the native op's ``weight_ih`` / ``weight_hh``,
    rows in its gate order."""
    table = layer.directions[k].palettized(role)
    if table is not None:  # the lookup table as it is (``compressed.emit_lut``), rows in the op's gate order
        return compressed.emit_lut(
            mb, table.rows(lambda a: to_apple(a, layer.cell)) if native_key else table, name, target
        )
    record = layer.directions[k].quantized(role)
    if record is None:
        value = apple_tensor(layer, k, native_key) if native_key else _stored(getattr(layer.directions[k], role))
        return mb.const(val=value, name=name)
    if native_key:
        spread = (a if record.axis is None else to_apple(a, layer.cell) for a in (record.scale, record.zero_point))
        record = record.with_values(to_apple(record.values, layer.cell), *spread)
    return compressed.emit(mb, record, name, target)


def _held_constants(mb, layer: RecurrentLayer, x) -> dict:
    """Per input the layer holds as a constant, a const op ``LAYER_ROLE`` holding it in layout 0 (read back by
    that name; the package asks nobody to feed it), a state of batch 1 broadcast to the batch of ``x`` (X in the
    interface's layout), transposed for a batch-major interface."""
    held = {}
    for role, value in layer.constants.items():
        value = value if role == "sequence_lens" else value.astype(np.float32)
        node = mb.const(val=value, name=f"{safe_name(layer.name)}_{role}")
        if role != "sequence_lens" and value.shape[1] == 1 and layer.interface.batch_size != 1:
            x_sm = mb.transpose(x=x, perm=[1, 0, 2]) if layer.interface.layout else x
            node = mb.add(x=node, y=mb.expand_dims(x=_zeros_state(mb, layer, x_sm), axes=[0]))  # [D, N, H]
        held[role] = mb.transpose(x=node, perm=[1, 0, 2]) if layer.interface.layout and value.ndim == 3 else node
    return held


def _time_major(mb, layer: RecurrentLayer, x, states: dict) -> tuple:
    """X as [S,N,I] and each given initial state (by role) as [D,N,H]."""
    if not layer.interface.layout:
        return x, {role: value for role, value in states.items() if value is not None}
    initial = {role: mb.transpose(x=value, perm=[1, 0, 2]) for role, value in states.items() if value is not None}
    return mb.transpose(x=x, perm=[1, 0, 2]), initial


def _zeros_state(mb, layer: RecurrentLayer, x_sm):
    batch = mb.slice_by_index(x=mb.shape(x=x_sm), begin=[1], end=[2])
    return mb.fill(shape=mb.concat(values=[batch, np.array([layer.hidden_size], np.int32)], axis=0), value=0.0)


def _stack_directions(mb, layer: RecurrentLayer, ys: list, *finals: list) -> tuple:
    """Per-direction Y [S,N,H] and final states [N,H] (Y_h; LSTM: and Y_c) -> the interface's Y and
    final states."""

    def stack(values: list, axis: int):
        expanded = [mb.expand_dims(x=v, axes=[axis]) for v in values]
        return mb.concat(values=expanded, axis=axis) if len(expanded) > 1 else expanded[0]

    y, ends = stack(ys, 1), [stack(values, 0) for values in finals]
    if layer.interface.layout:
        y, ends = mb.transpose(x=y, perm=[2, 0, 1, 3]), [mb.transpose(x=e, perm=[1, 0, 2]) for e in ends]
    return (y, *ends)


def _emit_native(mb, layer: RecurrentLayer, x, states: dict, target: str):
    """One MIL gru/rnn/lstm op per direction (forward or reverse), each direction's sequence brought back
    to input time, then stacked into the interface's Y and final states."""
    x_sm, initial = _time_major(mb, layer, x, states)
    zeros = _zeros_state(mb, layer, x_sm) if len(initial) < len(states) else None
    ys: list = []
    finals: list[list] = [[] for _ in states]  # MIL vars
    prefix = safe_name(layer.name)
    for k, params in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        start = {role: mb.gather(x=initial[role], indices=k, axis=0) if role in initial else zeros for role in states}
        biases = {key: apple_tensor(layer, k, key) for key in ("bias", "input_bias")}
        args = {
            key: mb.const(val=value, name=f"{prefix}_{key}_{k}") for key, value in biases.items() if value is not None
        }
        for key, role in (("weight_ih", "W"), ("weight_hh", "R")):
            args[key] = _weight(mb, layer, k, role, f"{prefix}_{key}_{k}", target, native_key=key)
        acts = [NATIVE_ACTIVATIONS[a.name] for a in params.activations]
        common = dict(
            x=x_sm,
            direction="reverse" if reverse else "forward",
            output_sequence=True,
            name=f"{prefix}_{layer.cell.value}_{k}",
            **start,
            **args,
        )
        if layer.cell is Cell.LSTM:
            if params.P is not None:
                common["peephole"] = mb.const(val=apple_peephole(params.P), name=f"{prefix}_peephole_{k}")
            y, *ends = mb.lstm(recurrent_activation=acts[0], cell_activation=acts[1], activation=acts[2], **common)
        elif layer.cell is Cell.GRU:
            if _target_rank(target) >= TARGETS.index("iOS18"):
                common["reset_after"] = layer.linear_before_reset
            y, *ends = mb.gru(recurrent_activation=acts[0], activation=acts[1], **common)
        else:
            y, *ends = mb.rnn(activation=acts[0], **common)
        ys.append(mb.reverse(x=y, axes=[0]) if reverse else y)  # processing order -> input time
        for values, end in zip(finals, ends):
            values.append(end)
    return _stack_directions(mb, layer, ys, *finals)


class _MilOps:
    """``cell_steps.StepOps`` over MIL's builder for direction ``k`` of ``layer``: float32 scalar constants;
    R^T, Rb and P as const ops made when the adapter is (before the ``while_loop``, so its body only reads
    them), a gate range of R^T or Rb sliced from them."""

    builder = "MIL"

    def __init__(self, mb, layer: RecurrentLayer, params: DirectionParams, k: int, target: str) -> None:
        self.mb, self.hidden, self.gates = mb, layer.hidden_size, layer.gates
        prefix = safe_name(layer.name)
        self.r = _weight(mb, layer, k, "R", f"{prefix}_R{k}", target)  # [G*H, H], as the layer holds it
        self.rb = mb.const(val=np.asarray(params.Rb, np.float32), name=f"{prefix}_Rb{k}")
        self.p = None if params.P is None else mb.const(val=np.asarray(params.P, np.float32), name=f"{prefix}_P{k}")

    def split(self, x, count: int) -> list:
        return list(self.mb.split(x=x, num_splits=count, axis=-1))

    def clip(self, x, bound: float):
        # min(max(v, -c), c): MIL's clip op refuses alpha == beta, and RNN allows clip = 0
        return self.mb.minimum(x=self.mb.maximum(x=x, y=np.float32(-bound)), y=np.float32(bound))

    def recurrent(self, x, first: int, stop: int):
        """Gates from the first: the whole ``x R^T + Rb``, sliced. The reader finds R and Rb by their names,
        and coremltools' fp16 passes fold a slice of a const into a new const: a program reading them only
        through slices would lose them (GRU's z and r are projected this way). Later gates: slices of both."""
        mb, h = self.mb, self.hidden
        if first == 0:
            projected = mb.add(x=mb.matmul(x=x, y=self.r, transpose_y=True), y=self.rb)
            if stop == self.gates:
                return projected
            return mb.slice_by_index(x=projected, begin=[0, 0], end=[0, stop * h], end_mask=[True, False])
        r = mb.slice_by_index(x=self.r, begin=[first * h, 0], end=[stop * h, h])
        rb = mb.slice_by_index(x=self.rb, begin=[first * h], end=[stop * h])
        return mb.add(x=mb.matmul(x=x, y=r, transpose_y=True), y=rb)

    def peepholes(self):
        return self.p

    def const(self, x, value: float):
        return np.float32(value)

    def zero_like(self, x):
        return self.mb.mul(x=x, y=np.float32(0.0))

    def add(self, x, y):
        return self.mb.add(x=x, y=y)

    def sub(self, x, y):
        return self.mb.sub(x=x, y=y)

    def mul(self, x, y):
        return self.mb.mul(x=x, y=y)

    def div(self, x, y):
        return self.mb.real_div(x=x, y=y)

    def minimum(self, x, y):
        return self.mb.minimum(x=x, y=y)

    def maximum(self, x, y):
        return self.mb.maximum(x=x, y=y)

    def select(self, cond, a, b):
        return self.mb.select(cond=cond, a=a, b=b)

    def greater(self, x, y):
        return self.mb.greater(x=x, y=y)

    def greater_equal(self, x, y):
        return self.mb.greater_equal(x=x, y=y)

    def clip01(self, x):
        return self.mb.clip(x=x, alpha=np.float32(0.0), beta=np.float32(1.0))

    def exp(self, x):
        return self.mb.exp(x=x)

    def log(self, x):
        return self.mb.log(x=x)

    def abs(self, x):
        return self.mb.abs(x=x)

    def neg(self, x):
        return self.mb.mul(x=x, y=np.float32(-1.0))

    def sigmoid(self, x):
        return self.mb.sigmoid(x=x)

    def tanh(self, x):
        return self.mb.tanh(x=x)

    def relu(self, x):
        return self.mb.relu(x=x)


def _emit_decomposed(mb, layer: RecurrentLayer, x, lens, states: dict, target: str) -> tuple:
    """The layer from elementary MIL ops: per direction a ``while_loop`` carrying the cell's states
    (h; LSTM: h and c) and the output sequence, or, for an input of one static step (a streaming model's
    frame), that step straight-line without a loop; returns Y and each final state in the layout."""
    x_sm, initial = _time_major(mb, layer, x, states)
    one_step = written_straight(layer)
    zeros = _zeros_state(mb, layer, x_sm)
    seq = mb.slice_by_index(x=mb.shape(x=x_sm), begin=[0], end=[1])  # [1] int32
    ys_shape = mb.concat(values=[seq, mb.slice_by_index(x=mb.shape(x=zeros), begin=[0], end=[2])], axis=0)
    valid = _valid_steps(mb, lens, seq)
    prefix = safe_name(layer.name)
    roles = [role for role, _ in state_roles(layer.cell)]
    ys: list = []
    finals: list[list] = [[] for _ in roles]  # MIL vars
    for k, p in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        x_d = _reversed_in_time(mb, x_sm, lens) if reverse else x_sm
        w = _weight(mb, layer, k, "W", f"{prefix}_W{k}", target)  # [G*H, I]
        wb = mb.const(val=np.asarray(p.Wb, np.float32), name=f"{prefix}_Wb{k}")
        step_ops = _MilOps(mb, layer, p, k, target)
        xw = mb.add(x=mb.matmul(x=x_d, y=w, transpose_y=True), y=wb)  # [S,N,G*H]: every step's input projection
        start = [mb.gather(x=initial[role], indices=k, axis=0) if role in initial else zeros for role in roles]
        if one_step:  # one frame: the step straight-line, no loop (a loop keeps a model off the Neural Engine)
            y_d, last = _straight_step(mb, layer, p, step_ops, xw, start, lens)  # reversing one step changes nothing
        else:
            loop = _Loop(seq, valid, ys_shape, f"{prefix}_loop{k}")
            y_d, last = _step_loop(mb, layer, p, step_ops, xw, start, loop)
            y_d = _reversed_in_time(mb, y_d, lens) if reverse else y_d
        ys.append(y_d)
        for values, value in zip(finals, _zero_when_empty(mb, lens, last)):
            values.append(value)
    return _stack_directions(mb, layer, ys, *finals)


def _valid_steps(mb, lens, seq):
    """[S,N,1] fp32, 1 where step t is inside sequence n (t < lens[n]; gather takes no bool); None without lens."""
    if lens is None:
        return None
    steps = mb.range_1d(start=np.int32(0), end=mb.squeeze(x=seq, axes=[0]), step=np.int32(1))
    inside = mb.less(x=mb.expand_dims(x=steps, axes=[1]), y=mb.expand_dims(x=lens, axes=[0]))
    return mb.expand_dims(x=mb.cast(x=inside, dtype="fp32"), axes=[2])


def _reversed_in_time(mb, sequence, lens):
    """A time-major [S,N,...] sequence reversed along time: each batch entry within its length when ``lens``
    are given (``reverse_sequence``), else whole."""
    if lens is not None:
        return mb.reverse_sequence(x=sequence, lengths=lens, seq_axis=0, batch_axis=1)
    return mb.reverse(x=sequence, axes=[0])


def _straight_step(mb, layer: RecurrentLayer, p: DirectionParams, step_ops: _MilOps, xw, start: list, lens) -> tuple:
    """One step straight-line from its input projection ``xw`` [1,N,G*H] and the states ``start``: (Y [1,N,H],
    the new states); a sequence of length 0 keeps its states and outputs zeros."""
    new = step_of(layer.cell, "MIL")(step_ops, layer, p, mb.squeeze(x=xw, axes=[0]), start)
    y_t = new[0]
    if lens is not None:
        ok = mb.expand_dims(x=mb.greater(x=lens, y=np.int32(0)), axes=[1])  # [N,1]
        y_t = mb.select(cond=ok, a=y_t, b=np.float32(0.0))
        new = [mb.select(cond=ok, a=n, b=s) for n, s in zip(new, start)]
    return mb.expand_dims(x=y_t, axes=[0]), new


@dataclass(frozen=True)
class _Loop:
    """What a direction's while_loop runs over: ``seq`` ([1] int32, S), ``valid`` (``_valid_steps``, or None),
    ``ys_shape`` ([S, N, H], the output sequence it fills) and its ``name``."""

    seq: Any
    valid: Any
    ys_shape: Any
    name: str


def _step_loop(mb, layer: RecurrentLayer, p: DirectionParams, step_ops: _MilOps, xw, start: list, loop: _Loop) -> tuple:
    """A ``while_loop`` over the steps in processing order, carrying the step index, the states (from ``start``)
    and the output sequence: step i computes from ``xw[i]`` [N,G*H] and scatters its Y into row i (past a
    sequence's length: its states kept, Y zero). Returns (Y [S,N,H], the final states)."""
    step = step_of(layer.cell, "MIL")

    def cond(i, *carried):
        return mb.less(x=i, y=loop.seq)

    def body(i, *carried):
        *state, out = carried
        gx = mb.squeeze(x=mb.gather(x=xw, indices=i, axis=0), axes=[0])  # [N,G*H]
        new = step(step_ops, layer, p, gx, state)
        y_t = new[0]
        if loop.valid is not None:  # past its length a sequence keeps its states and outputs zeros
            ok = mb.cast(x=mb.squeeze(x=mb.gather(x=loop.valid, indices=i, axis=0), axes=[0]), dtype="bool")  # [N,1]
            y_t = mb.select(cond=ok, a=new[0], b=np.float32(0.0))
            new = [mb.select(cond=ok, a=n, b=s) for n, s in zip(new, state)]
        out = mb.scatter(data=out, indices=i, updates=mb.expand_dims(x=y_t, axes=[0]), axis=0, mode="update")
        return (mb.add(x=i, y=np.int32(1)), *new, out)

    _, *last, y_d = mb.while_loop(
        _cond=cond,
        _body=body,
        loop_vars=(np.array([0], np.int32), *start, mb.fill(shape=loop.ys_shape, value=0.0)),
        name=loop.name,
    )
    return y_d, last


def _stored(weights: np.ndarray) -> np.ndarray:
    """A weight matrix as a const holds it: the layer's own array when it is contiguous fp32 (a view of the source's
    memory-mapped weights: no copy here; coremltools copies it once into its weight file), else a contiguous copy."""
    return np.ascontiguousarray(weights, np.float32)


def _zero_when_empty(mb, lens, last: list) -> list:
    """The final states are 0 for an empty sequence (onnxruntime)."""
    if lens is None:
        return last
    empty = mb.expand_dims(x=mb.equal(x=lens, y=np.int32(0)), axes=[1])
    return [mb.select(cond=empty, a=np.float32(0.0), b=value) for value in last]

"""Recurrent layers found in other producers' ML Programs as ``while_loop`` ops (coremltools' own
decomposition of torch's GRU/LSTM): lifted into canonical layers."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import gatepack.converters.formats.coreml.compressed as compressed
from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    FP16_SOURCE,
    _mil_types,
    _ops,
    _value,
)
from gatepack.converters.formats.coreml.interpreter import _run_block
from gatepack.converters.formats.coreml.package import _load_program
from gatepack.converters.quantization import compressed_source
from gatepack.schemas.layer import (
    PERM_SWAP_01,
    PERM_Y_TO_BATCH_MAJOR,
    Direction,
    Interface,
    Provenance,
    RecurrentLayer,
)
from gatepack.schemas.quantized import QuantizedWeights

if TYPE_CHECKING:
    from gatepack.converters.lifting import Lifted, Recurrence, WeightCandidate

# -------------------------------------------------------------------------------- lifting loops


@dataclass(frozen=True)
class _LoopHandle:
    """Where a lifted while_loop's layer is in the program: its X, the loop, its [S+1,N,H] state buffer."""

    x: str
    loop: str
    buffer: str
    reverse: bool
    fp16: bool = False  # the loop computes in fp16


def _lift_loops(path: Path, function) -> tuple[list[RecurrentLayer], dict, list[tuple[str, str]]]:
    """Layers lifted from the program's while_loops (coremltools writes nn.GRU so): a loop whose
    body gathers step t of an outer sequence X [S,N,I] (a ``reverse`` of it: a reverse layer),
    multiplies it and the state gathered from a [S+1,N,H] buffer by ``linear`` ops, and scatters the
    new state into the buffer at t + 1. The linear ops of X and of the state, in program order, are
    the gate blocks; which gate each is, and where the reset applies, is decided by the proof
    (``converters.lifting``), running the program on gatepack's MIL interpreter."""
    from gatepack.converters.lifting import LiftRefused, lift

    layers, notes, refused = [], {}, []
    for op in function.operations:
        if op.op_type != "while_loop":
            continue
        try:
            handle, candidate, itf, activations, held, unheld = _loop_structure(op, path)
        except _NotALayer as err:
            refused.append((op.name, str(err)))
            continue
        fp16 = candidate.W.dtype == np.float16 or any(
            o.outputs[0].dtype == _fp16_type() for o in _ops(op.blocks[1]) if o.outputs
        )
        try:
            lifted = lift(_recurrence(op, path, handle, candidate, itf, activations, held, fp16))
        except LiftRefused as err:
            refused.append((op.name, str(err)))
            continue
        handle = replace(handle, fp16=fp16)
        layer = replace(lifted.layer, provenance=Provenance(FORMAT, path, op.name, "lifted", handle=handle))
        layers.append(layer)
        notes[layer.name] = [_lifted_note(lifted, handle, itf, bool(held))] + ([FP16_SOURCE] if fp16 else []) + unheld
    return layers, notes, refused


def _recurrence(
    op,
    path: Path,
    handle: _LoopHandle,
    candidate: WeightCandidate,
    itf: Interface,
    activations: frozenset[str],
    held: dict[str, np.ndarray],
    fp16: bool,
) -> Recurrence:
    """What the lifting proves of a while_loop: its one weight candidate in float32, its interface, activations and
    held inputs, and the loop itself run on gatepack's MIL interpreter (compared at fp16's tolerance when the loop
    computes in fp16)."""
    from gatepack.converters.lifting import Recurrence, WeightCandidate

    candidate = WeightCandidate(
        candidate.W.astype(np.float32),
        candidate.R.astype(np.float32),
        tuple((_float32(a), _float32(b), t) for a, b, t in candidate.biases),
        candidate.label,
        candidate.Wq,
        candidate.Rq,
    )
    return Recurrence(
        name=op.name,
        found=f"{path}: while_loop {op.name!r}",
        direction=Direction.REVERSE if handle.reverse else Direction.FORWARD,
        interface=itf,
        input_size=candidate.W.shape[1],
        hidden_size=candidate.R.shape[1],
        candidates=[candidate],
        activations=activations,
        run_original=functools.partial(_run_lifted, path, handle, itf),
        tolerance="float16" if fp16 else None,
        constants=held,
    )


def _lifted_note(lifted: Lifted, handle: _LoopHandle, itf: Interface, held: bool) -> Finding:
    """The note of a lifted while_loop: what it was read as, how it was proven, a held initial state, and where
    the source keeps the layer's outputs."""
    return Finding(
        "lifted",
        Status.REPACKED,
        f"lifted from a while_loop of elementary ops (as coremltools writes nn.GRU): {lifted.description}; "
        f"proven against gatepack's MIL interpreter running the original ops on random inputs "
        f"({lifted.tried} reading(s) tried)"
        + (". It starts from a constant initial state (a learned one), which the layer holds" if held else "")
        + f". Its outputs are canonical tensors {itf.y!r} and {itf.y_h!r}; in "
        f"the source, loop output {handle.buffer!r} holds the initial state and then Y "
        f"{'in processing order' if handle.reverse else 'in time order'}",
    )


class _NotALayer(Exception):
    pass


def _float32(array: np.ndarray | None) -> np.ndarray | None:
    return None if array is None else array.astype(np.float32)


def _fp16_type():
    return _mil_types().fp16


def _loop_structure(op, path: Path):
    """What a while_loop holds if it is one direction of a GRU or RNN: where it is (handle), its weights,
    interface, activations and the inputs it holds as constants (a learned initial state, role -> value in
    layout 0); _NotALayer (one line) when it is not such a loop."""
    body = op.blocks[1]
    body_ops = _ops(body)
    defined = {v.name for o in body_ops for v in o.outputs} | {v.name for v in body.inputs}
    gathers = [o for o in body_ops if o.op_type == "gather" and o.inputs["x"].name not in defined]
    if len(gathers) != 1:
        raise _NotALayer(f"while_loop {op.name!r} reads {len(gathers)} outer sequences step by step, not one")
    buffers = [v for v in op.outputs if len(v.shape) == 3]
    if len(buffers) != 1:
        raise _NotALayer(f"while_loop {op.name!r} carries {len(buffers)} state buffers (a GRU or RNN carries one)")
    initial, learned = _initial_state(op, op.inputs["loop_vars"][op.outputs.index(buffers[0])])
    x_var, reverse, layout = _loop_x(gathers[0].inputs["x"], initial is not None)
    given = {x_var.name} | ({initial.name} if initial is not None else set())
    others = _outer_inputs(op, given)
    if others:
        raise _NotALayer(
            f"while_loop {op.name!r} reads {sorted(others)} besides its X {x_var.name!r}"
            + (f" and initial state {initial.name!r}" if initial is not None else "")
            + ", which a GRU/RNN layer does not take"
        )
    candidate, unheld = _loop_weights(op, body_ops, gathers[0])
    activations = frozenset(o.op_type for o in body_ops if o.op_type in ("sigmoid", "tanh", "relu"))
    shape = x_var.shape
    s, n = (shape[1], shape[0]) if layout else (shape[0], shape[1])
    itf = Interface(
        x=x_var.name,
        y=f"{op.name}:Y",
        y_h=f"{op.name}:Y_h",
        initial_h=initial.name if initial is not None else (f"{op.name}:initial_h" if learned is not None else None),
        layout=layout,
        seq_length=s if isinstance(s, int) else None,
        batch_size=n if isinstance(n, int) else None,
        dtype="float32",
    )
    held = {} if learned is None else {"initial_h": learned}
    return _LoopHandle(x_var.name, op.name, buffers[0].name, reverse), candidate, itf, activations, held, unheld


def _initial_state(op, start) -> tuple:
    """What a while_loop's [S+1,N,H] state buffer starts from at row 0: (the tensor, None) for an initial
    state the program computes from its inputs, (None, the state [1,N,H] as fp32) for a constant non-zero
    one (a learned state, which the layer holds), (None, None) for zeros.

    coremltools writes the buffer's start as a zero constant (no initial state), as
    ``concat([h0 [1,N,H], zeros [S,N,H]], axis=0)``, h0 being the program's input or a slice of it
    (one layer and direction of torch's [L*D,N,H] h0), or, for a module holding h0 as an ``nn.Parameter``,
    as one constant [S+1,N,H] whose row 0 is h0 and the rest zeros; in an fp16 program, in fp16 and cast
    to fp32. A constant start whose later rows are not zeros is no initial state followed by zeros."""
    while start.val is None and start.op is not None and start.op.op_type == "cast":
        start = start.op.inputs["x"]
    constant, _ = compressed.weight(start)  # coremltools.optimize compresses a large zero buffer too
    if constant is not None:
        value = np.asarray(constant)
        if value.ndim != 3 or np.any(value[1:] != 0):
            raise _NotALayer(
                f"while_loop {op.name!r}: its state buffer starts as a constant {list(value.shape)} that is not "
                "an initial state followed by zeros"
            )
        return None, (value[:1].astype(np.float32) if np.any(value[:1] != 0) else None)
    producer = start.op
    if producer is not None and producer.op_type == "concat" and _value(producer.inputs["axis"]) in (0, -3):
        first = producer.inputs["values"][0]
        if len(first.shape) == 3 and first.shape[0] == 1 and first.val is None:
            return first, None
    raise _NotALayer(
        f"while_loop {op.name!r}: its state buffer starts as {start.name!r}"
        f"{f' ({producer.op_type})' if producer is not None else ''}, not zeros or an initial state "
        "followed by zeros"
    )


def _loop_x(var, has_initial: bool) -> tuple:
    """The layer's X, whether the layer is a reverse one, and its layout: a ``reverse`` along time in
    front of the loop's sequence makes a reverse layer; a ``transpose`` [1, 0, 2] in front of that
    makes it batch-major (layout 1) unless an initial state is given, which the program holds as
    [1,N,H] (the layer then reads the transposed, sequence-major X, and its state keeps its shape)."""
    reverse, layout = False, 0
    producer = var.op
    if producer is not None and producer.op_type == "reverse" and list(_value(producer.inputs["axes"])) == [0]:
        reverse, var = True, producer.inputs["x"]
    producer = var.op
    transposed = producer is not None and producer.op_type == "transpose"
    if transposed and not has_initial and list(_value(producer.inputs["perm"])) == [1, 0, 2]:
        layout, var = 1, producer.inputs["x"]
    return var, reverse, layout


def _loop_weights(op, body_ops: list, gather):
    """The loop's linear ops as one weight candidate: those reading the gathered X step are W's gate
    blocks, the others R's, in program order, with their biases (zeros where a linear op has none; no
    bias when all are zeros) and, where constexpr ops compute the weights, their integers
    (``compressed.joined``)."""
    from gatepack.converters.lifting import WeightCandidate

    from_x, from_h = _linear_groups(op, body_ops, gather)
    parts: dict[str, np.ndarray] = {}
    records: dict[str, QuantizedWeights | None] = {}
    unheld: list[str] = []
    for key, group in (("W", from_x), ("R", from_h)):
        found = [compressed.weight(o.inputs["weight"]) for o in group]
        unheld += compressed.unheld_forms([c for _, c in found], [f"linear op {o.name!r}'s weight" for o in group])
        biases = [_value(o.inputs["bias"]) if "bias" in o.inputs else None for o in group]
        weights = [np.asarray(w) for w, _ in found if w is not None]
        if len(weights) != len(found):
            raise _NotALayer(f"while_loop {op.name!r}: a linear op's weight is not a constant")
        parts[key] = np.concatenate(weights)
        records[key] = compressed.record(compressed.joined([c for _, c in found]))
        if records[key] is None and any(c is not None and c.spread is not None for _, c in found):
            unheld.append(f"{key}: gate blocks compressed in different forms or partly, which one record does not hold")
        parts[key + "b"] = np.concatenate(
            [b if b is not None else np.zeros(len(w), w.dtype) for b, w in zip(biases, weights)]
        )
    reading: tuple[np.ndarray | None, np.ndarray | None, str] = (
        parts["Wb"],
        parts["Rb"],
        "biases of the same linear ops",
    )
    if not (np.any(parts["Wb"]) or np.any(parts["Rb"])):  # coremltools' nn.GRU(bias=False): zero bias constants
        reading = (None, None, "no bias (the linear ops' biases are zeros)")
    candidate = WeightCandidate(
        parts["W"], parts["R"], (reading,),
        f"W from linear ops {[o.name for o in from_x]}, R from {[o.name for o in from_h]}",
        records["W"], records["R"],
    )  # fmt: skip
    return candidate, ([compressed_source(unheld)] if unheld else [])


def _linear_groups(op, body_ops: list, gather) -> tuple[list, list]:
    """The loop's linear ops of X (W's gate blocks) and of its state (R's), in program order."""
    linears = [o for o in body_ops if o.op_type == "linear"]
    from_x = [o for o in linears if _reads(o.inputs["x"], gather)]
    from_h = [o for o in linears if o not in from_x]
    if not from_x or len(from_x) != len(from_h):
        raise _NotALayer(f"while_loop {op.name!r} has {len(from_x)} linear ops of X and {len(from_h)} of its state")
    return from_x, from_h


def _outer_inputs(op, given: set[str]) -> set[str]:
    """The program inputs ``op`` (with the blocks it holds) reads through the ops before it, walking up
    from what it reads and stopping at the tensors ``given`` and at constants."""
    pending, seen, found = _read_vars(op), set(), set()
    while pending:
        var = pending.pop()
        if var.name in seen or var.name in given or var.val is not None:
            continue
        seen.add(var.name)
        if var.op is None:
            found.add(var.name)
        else:
            pending += _read_vars(var.op)
    return found


def _read_vars(op) -> list:
    """The tensors ``op`` reads from outside itself: its inputs, and what its blocks read from outside them."""
    found = [v for value in op.inputs.values() for v in (value if isinstance(value, (list, tuple)) else [value])]
    for block in op.blocks:
        inside = {v.name for v in block.inputs} | {v.name for o in _ops(block) for v in o.outputs}
        outer = [v for o in block.operations for v in _read_vars(o)] + list(block.outputs)
        found += [v for v in outer if v.name not in inside]
    return found


def _reads(var, target_op, depth: int = 8) -> bool:
    """Whether ``var`` is computed from ``target_op``'s output within ``depth`` ops."""
    frontier = [var]
    for _ in range(depth):
        nxt = []
        for v in frontier:
            if v.op is None:
                continue
            if v.op is target_op:
                return True
            nxt += [
                i for value in v.op.inputs.values() for i in (value if isinstance(value, (list, tuple)) else [value])
            ]
        frontier = nxt
    return False


def _run_lifted(path: Path, handle: _LoopHandle, itf: Interface, feed: dict[str, np.ndarray]) -> dict:
    """A lifted loop run on the MIL interpreter: canonical Y [S,1,N,H] and Y_h [1,N,H] in the layout.

    The program is run from X and (when the loop starts from one it is given) the initial state [1,N,H] only,
    as the program holds it (a layer with such an initial state is sequence-major: ``_loop_x``); a learned
    initial state is the program's own constant, never fed. The loop's buffer is the initial state followed
    by Y in processing order."""
    function, _ = _load_program(path)
    env = {handle.x: np.asarray(feed[itf.x])}
    if itf.initial_h in feed:
        env[itf.initial_h] = np.asarray(feed[itf.initial_h])
    _run_block(function, env, path)
    if handle.buffer not in env:
        raise RuntimeFailure(f"{path}: while_loop {handle.loop!r} did not run on its X {handle.x!r} and initial state")
    buffer = np.asarray(env[handle.buffer], np.float32)
    y = buffer[1:][::-1] if handle.reverse else buffer[1:]
    y, y_h = y[:, None], buffer[-1][None]
    if itf.layout:
        y, y_h = y.transpose(PERM_Y_TO_BATCH_MAJOR), y_h.transpose(PERM_SWAP_01)
    return {itf.y: y, itf.y_h: y_h}

"""LiteRT: a producer's ``WHILE`` loop over a recurrent step, lifted into a canonical layer.

The TFLite converter writes every Keras 3 recurrent layer (and Keras 2's unfused ones) as a ``WHILE`` in the
main subgraph whose loop variables are two step counters, the output buffer [S, N, H] the body writes step t
into, the state(s) [N, H] and the time-major input X [S, N, I] the body ``GATHER``s step t from
(docs/conventions.md §11). The loop variables are told apart by what the body does with them: X is passed
through and gathered, the buffer is the other rank-3 variable, h is the state a ``FULLY_CONNECTED`` multiplies
(R) and c the other state.

What the step computes is then proven, never read off the pattern (``converters.lifting``): the body's float
constants are every candidate W, R and bias (Keras's reset-before GRU keeps R's z, r rows [2H, H] apart from
its h rows [H, H], so each such pair is also tried stacked), the body's activations (``LOGISTIC``, ``TANH``,
``RELU``, or fused into an ``ADD``; a ``RELU6`` fused into an ``ADD`` or a ``MINIMUM`` is a hard sigmoid) say
which cells to try, and each hypothesis runs on gatepack's executor against the LiteRT interpreter running the
``WHILE`` alone (``loop_alone``: the file with its main subgraph cut to that one operator, its non-constant
inputs the model's inputs, its buffer and final states the outputs). The lifted layer is forward and
time-major: X is the loop's input (a go_backwards layer's reversed X, in the file a ``REVERSE_V2`` in front),
Y the loop's buffer in processing order, Y_h and Y_c its final states; the ops around the loop (``TRANSPOSE``,
``REVERSE_V2``, ``CONCATENATION`` ...) stay other operators.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gatepack.converters.errors import InputError
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.litert.common import FORMAT
from gatepack.converters.formats.litert.interpreter import interpreter, session
from gatepack.converters.formats.litert.quantized import int8_record
from gatepack.converters.lifting import LiftRefused, Recurrence, candidates_from_constants, lift
from gatepack.converters.samples import DYNAMIC_INT8, TOLERANCES
from gatepack.schemas.layer import Direction, Interface, Provenance, RecurrentLayer
from gatepack.schemas.quantized import QuantizationError, QuantizedWeights, compacted

# an activation the body applies: its operator, or fused into an operator (ActivationFunctionType names)
_ACTIVATION_OPS = {"LOGISTIC": "sigmoid", "TANH": "tanh", "RELU": "relu"}
_FUSED_ACTIVATIONS = {"RELU": "relu", "TANH": "tanh", "RELU6": "hardsigmoid"}
# what writes a loop's initial state, when not a constant, a graph input or a FILL of zeros
_COMPUTED_STATES = {"READ_VARIABLE": "a stateful layer's resource variable, carried across invokes"}
_HARD_SIGMOID_OPS = {"MINIMUM"}  # Keras 2's min(max(0.2 x + 0.5, 0), 1): a MINIMUM, then a RELU


@dataclass(frozen=True)
class LoopHandle:
    """A lifted recurrence as its layer's provenance handle: the model to run (a ``WHILE`` alone, as bytes, or the
    whole file of an unrolled one, its path: ``interpreter.interpreter`` loads either), the names of its state inputs
    fed from the interface and its outputs (interface role -> tensor), and whether they lack the direction axis (a
    loop's states [N, H] and buffer [S, N, H]) or hold it (an unrolled module's states [D, N, H] and Y [S, N, D*H],
    the directions on its last axis)."""

    content: bytes | Path
    states: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    squeezed: bool = True


@dataclass(frozen=True)
class _Variables:
    """The loop variables' positions: X, the output buffer, h and c (-1: none)."""

    x: int
    buffer: int
    h: int
    c: int


def lift_loops(file: Any) -> tuple[list[RecurrentLayer], dict[str, list[Finding]], list[tuple[str, str]]]:
    """Every ``WHILE`` of the main subgraph lifted into a layer, with its ``lifted`` finding; (name, reason) for
    each one not lifted."""
    layers, notes, refused = [], {}, []
    for op in file.graph.operators or []:
        if file.op_name(op) != "WHILE":
            continue
        name = file.name(int(op.outputs[0]))
        try:
            layer, finding = _lifted(file, op)
        except LiftRefused as err:
            refused.append((name, str(err)))
            continue
        layers.append(layer)
        notes[layer.name] = [finding]
    return layers, notes, refused


def _where(file: Any, op: Any) -> str:
    return f"{file.path}: WHILE {file.name(int(op.outputs[0]))!r}"


def _variables(file: Any, op: Any, body: Any) -> _Variables:
    """Which loop variable is X, the buffer, h and c (LiftRefused when they are not a recurrence's)."""
    tensors = body.tensors
    inputs, outputs = [int(k) for k in body.inputs], [int(k) for k in body.outputs]
    consumers: dict[int, set[str]] = {}
    for step_op in body.operators or []:
        kind = file.op_name(step_op)
        for position, k in enumerate(int(j) for j in step_op.inputs):
            consumers.setdefault(k, set()).add(f"{kind}:{position}")
    rank = [len(tensors[k].shape if tensors[k].shape is not None else []) for k in inputs]
    xs = [j for j, k in enumerate(inputs) if rank[j] == 3 and outputs[j] == k and "GATHER:0" in consumers.get(k, ())]
    buffers = [j for j, k in enumerate(inputs) if rank[j] == 3 and outputs[j] != k]
    states = [j for j, k in enumerate(inputs) if rank[j] == 2]
    hs = [j for j in states if "FULLY_CONNECTED:0" in consumers.get(inputs[j], ())]
    if len(xs) != 1 or len(buffers) != 1 or len(states) not in (1, 2) or len(hs) != 1:
        raise LiftRefused(
            f"{_where(file, op)}: its loop variables (ranks {rank}) are not one gathered input [S, N, I], one output "
            "buffer [S, N, H] and one or two states [N, H] of which a FULLY_CONNECTED multiplies one, as a "
            "recurrent layer's loop has"
        )
    c = next((j for j in states if j != hs[0]), -1)
    return _Variables(xs[0], buffers[0], hs[0], c)


def body_constants(
    file: Any, body: Any, where: str, records: dict[str, QuantizedWeights] | None = None
) -> dict[str, np.ndarray]:
    """The body's float constants by name, with each [2H, d] + [H, d] pair stacked. An INT8 weight of a hybrid
    ``FULLY_CONNECTED`` (``quantized``) is there as its float view, its record put into ``records`` by name; so is
    an INT8 weight a ``DEQUANTIZE`` turns into floats (weight-only quantization, ai-edge-quantizer's
    ``weight_only_wi8_afp32``: float activations, the record naming no run-time arithmetic), under the name of the
    ``DEQUANTIZE``'s output, which the step multiplies."""
    found: dict[str, np.ndarray] = {}
    kinds = {v: k for k, v in vars(file.s.TensorType).items() if not k.startswith("_")}
    asymmetric = _asymmetric_inputs(file, body)
    dequantized = _dequantized_inputs(file, body)
    for k, t in enumerate(body.tensors):
        buffer = file.model.buffers[t.buffer] if 0 <= t.buffer < len(file.model.buffers) else None
        if buffer is None or buffer.data is None or not len(buffer.data):
            continue
        kind = kinds.get(t.type, str(t.type))
        name = file.decoded(t.name, "a tensor name") or f"tensor {k}"
        shape = [int(d) for d in (t.shape if t.shape is not None else [])]
        raw = bytes(np.asarray(buffer.data, np.uint8))
        if kind in ("UINT8", "INT16") and len(shape) == 2:
            raise LiftRefused(f"{where}: its step's weights {name!r} are {kind}, which no hybrid kernel here reads")
        if kind == "INT8" and len(shape) == 2 and records is not None and (k in asymmetric or k in dequantized):
            try:
                record = int8_record(t, np.frombuffer(raw, np.int8).reshape(shape), asymmetric.get(k, False))
            except (ValueError, QuantizationError) as err:
                raise InputError(f"{where}: INT8 weight {name!r}: {err}") from None
            if k in dequantized:  # DEQUANTIZE -> float products: no run-time arithmetic; named by its output
                record, name = replace(record, dynamic_activations=""), dequantized[k]
            records[name] = record
            found[name] = records[name].dequantized()
        if kind != "FLOAT32":
            continue
        if int(np.prod(shape)) * 4 != len(raw):
            raise InputError(f"{where}: body tensor {k} of shape {shape} holds {len(raw)} bytes of FLOAT32")
        found[name] = np.frombuffer(raw, np.float32).reshape(shape)
    matrices = {n: v for n, v in found.items() if v.ndim == 2}
    for (na, a), (nb, b) in ((x, y) for x in matrices.items() for y in matrices.items()):
        if a.shape[1] == b.shape[1] and a.shape[0] == 2 * b.shape[0]:
            found[f"{na} stacked on {nb}"] = np.concatenate([a, b])
    return found


def _asymmetric_inputs(file: Any, body: Any) -> dict[int, bool]:
    """Each tensor a ``FULLY_CONNECTED`` of the body takes as its weights -> that op's ``asymmetric_quantize_inputs``
    (how its hybrid kernel quantizes its input, when the weights are INT8)."""
    found = {}
    for step_op in body.operators or []:
        if file.op_name(step_op) == "FULLY_CONNECTED" and len(step_op.inputs) > 1:
            found[int(step_op.inputs[1])] = bool(getattr(step_op.builtinOptions, "asymmetricQuantizeInputs", False))
    return found


def _dequantized_inputs(file: Any, body: Any) -> dict[int, str]:
    """Each INT8 tensor a ``DEQUANTIZE`` of the body turns into floats -> the name of the float tensor it makes."""
    return {
        int(step_op.inputs[0]): file.decoded(body.tensors[int(step_op.outputs[0])].name, "a tensor name")
        for step_op in body.operators or []
        if file.op_name(step_op) == "DEQUANTIZE"
    }


def with_records(layer: RecurrentLayer, records: dict[str, QuantizedWeights], where: str) -> RecurrentLayer:
    """``layer`` lifted from float views of INT8 weights, with their records: each canonical row of W and R found,
    bit for bit, among the records' rows (so gate blocks reordered and R's stacked parts are followed). LiftRefused
    when W and R are not both made of them (a step multiplying float and INT8 weights alike has no record)."""
    if not records:
        return layer
    rows: dict[bytes, tuple[np.ndarray, np.float32, str]] = {}
    for record in records.values():
        floats = record.dequantized()
        scale = np.broadcast_to(record.broadcast(record.scale)[:, :1], (floats.shape[0], 1)).reshape(-1)
        for j in range(floats.shape[0]):
            rows.setdefault(floats[j].tobytes(), (record.values[j], scale[j], record.dynamic_activations))
    directions = []
    for p in layer.directions:
        found = {}
        for role, matrix in (("W", p.W), ("R", p.R)):
            picked = [rows.get(np.ascontiguousarray(row, np.float32).tobytes()) for row in matrix]
            if any(entry is None for entry in picked):
                raise LiftRefused(f"{where}: its step's {role} is not made of its INT8 weights' rows alone")
            values = np.stack([e[0] for e in picked])  # type: ignore[index]
            spread = np.repeat(np.array([e[1] for e in picked], np.float32)[:, None], values.shape[1], axis=1)  # type: ignore[index]
            record = compacted(values, spread, np.zeros_like(values))
            found[role] = replace(record, dynamic_activations=picked[0][2])  # type: ignore[index]
        directions.append(replace(p, Wq=found["W"], Rq=found["R"]))
    return replace(layer, directions=tuple(directions))


def prove_hybrid(layer: RecurrentLayer, rec: Recurrence, where: str, seed: int = 1) -> None:
    """The lifted layer with its INT8 records, on gatepack's executor of LiteRT's hybrid products
    (``converters.hybrid``), against the loop on random inputs at float32's tolerance: the lift above compared a
    float layer with the hybrid loop within the run-time quantization's tolerance only. LiftRefused when they
    differ."""
    from gatepack.converters.executor import run_layer

    itf, rng = layer.interface, np.random.default_rng(seed)
    s, n = int(itf.seq_length or 1), int(itf.batch_size or 1)  # a loop's sizes are static (``_lifted``)
    x = rng.uniform(-1, 1, (s, n, layer.input_size)).astype(np.float32)
    states = {
        role: rng.uniform(-1, 1, (1, n, layer.hidden_size)).astype(np.float32)
        for role in layer.fed_roles()
        if role != "sequence_lens" and getattr(itf, role)
    }
    expected = rec.run_original({itf.x: x, **{getattr(itf, role): v for role, v in states.items()}})
    actual = run_layer(layer, x, None, states.get("initial_h"), states.get("initial_c"))
    atol, rtol = TOLERANCES["float32"]
    for role, value in zip(("y", "y_h", "y_c"), actual):
        name = getattr(itf, role)
        if name in expected and not np.allclose(value, expected[name], atol=atol, rtol=rtol):
            error = float(np.abs(value - expected[name]).max())
            raise LiftRefused(
                f"{where}: the lifted layer's hybrid products differ from the loop by {error:.3g} on {name}"
            )


def body_activations(file: Any, body: Any) -> frozenset[str]:
    """The activations the body applies (lower-case, as ``converters.lifting`` names them)."""
    fused_names = {v: k for k, v in vars(file.s.ActivationFunctionType).items() if not k.startswith("_")}
    found = set()
    for step_op in body.operators or []:
        kind = file.op_name(step_op)
        if kind in _ACTIVATION_OPS:
            found.add(_ACTIVATION_OPS[kind])
        if kind in _HARD_SIGMOID_OPS:
            found.add("hardsigmoid")
        fused = getattr(step_op.builtinOptions, "fusedActivationFunction", 0) or 0
        if fused_names.get(fused) in _FUSED_ACTIVATIONS:
            found.add(_FUSED_ACTIVATIONS[fused_names[fused]])
    return frozenset(found)


def _producers(file: Any) -> dict[int, str]:
    """Main subgraph tensor -> the operator writing it."""
    return {int(k): file.op_name(o) for o in file.graph.operators or [] for k in o.outputs}


def _state_roles(
    file: Any, op: Any, found: _Variables, hidden: int
) -> tuple[dict[str, str], dict[str, np.ndarray], str]:
    """Each state's role: an input the interface names (role -> tensor), a learned constant (role -> [1, N, H]), or
    zeros (a zero constant, or a FILL the interpreter's zero input stands for); and what they are, in words."""
    names, constants, words = {}, {}, []
    written = _producers(file)
    for state, position in (("h", found.h), ("c", found.c)):
        if position < 0:
            continue
        index = int(op.inputs[position])
        value = file.array(index, _where(file, op))
        if value is not None:
            if np.any(value):
                constants[f"initial_{state}"] = value.reshape(1, -1, hidden).astype(np.float32)
                names[f"initial_{state}"] = file.name(index)
                words.append(f"a learned initial {state}")
        elif written.get(index) == "FILL":
            words.append(f"{state} from a FILL (zeros)")
        elif index in written:
            why = _COMPUTED_STATES.get(written[index], "an initial state computed in the graph")
            raise LiftRefused(
                f"{_where(file, op)}: its initial {state} is written by a {written[index]} op ({why}), which a layer "
                "read from the loop alone would not hold"
            )
        else:
            names[f"initial_{state}"] = file.name(index)
    return names, constants, ", ".join(words)


def loop_alone(file: Any, op: Any, outputs: list[int]) -> bytes:
    """The file with its main subgraph cut to ``op`` alone: its non-constant inputs the model's inputs, ``outputs``
    the model's outputs (the cond and body subgraphs and every buffer kept as written)."""
    import flatbuffers

    from gatepack.converters.formats.litert.common import FILE_IDENTIFIER

    model = copy.deepcopy(file.model)
    graph = model.subgraphs[0]
    graph.operators = [copy.deepcopy(op)]
    fed = [int(k) for k in op.inputs if file.array(int(k), _where(file, op)) is None]
    graph.inputs = list(dict.fromkeys(fed))
    graph.outputs = outputs
    model.signatureDefs = []
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def run_loop(handle: LoopHandle, itf: Interface, feed: dict[str, np.ndarray], label: object) -> dict[str, np.ndarray]:
    """The handle's model on the interpreter: X [S, N, I] and the states [D, N, H] from ``feed`` (by interface name),
    its outputs as Y [S, D, N, H] and final states [D, N, H] (a loop's: D = 1 added; an unrolled module's Y
    [S, N, D*H] split on its last axis)."""
    run = session(interpreter(handle.content, label), label)
    inputs = {itf.x: feed[itf.x]}
    for role, tensor in handle.states:
        state = np.asarray(feed[getattr(itf, role)])
        inputs[tensor] = state[0] if handle.squeezed else state
    outputs = run(inputs)
    found = {}
    for role, name in handle.outputs:
        value = outputs[name]
        if handle.squeezed:
            value = value[:, None] if role == "y" else value[None]
        elif role == "y":  # [S, N, D*H] -> [S, D, N, H], H from the final h [D, N, H]
            hidden = outputs[dict(handle.outputs)["y_h"]].shape[-1]
            value = value.reshape(*value.shape[:2], -1, hidden).transpose(0, 2, 1, 3)
        found[getattr(itf, role)] = value
    return found


def _lifted_finding(description: str, tried: int, proofs: str, itf: Interface, states_text: str) -> Finding:
    """The ``lifted`` finding: what the loop was read as, how it was proven, and which tensors the layer's are."""
    return Finding(
        "lifted",
        Status.REPACKED,
        f"lifted from a WHILE loop: {description}; proven against the LiteRT interpreter running the loop "
        f"alone on random inputs ({tried} reading(s) tried){proofs}. The layer is the loop itself: X "
        f"{itf.x!r} time-major, "
        + (
            f"Y the loop's output buffer {itf.y!r} in processing order, "
            if itf.y
            else "no Y (the loop keeps the last step only), "
        )
        + f"Y_h {itf.y_h!r}"
        + (f", Y_c {itf.y_c!r}" if itf.y_c else "")
        + (f"; states: {states_text}" if states_text else ""),
    )


def _lifted(file: Any, op: Any) -> tuple[RecurrentLayer, Finding]:
    """A ``WHILE`` loop as a forward, time-major layer: its loop variables told apart (``_variables``), its states
    (``_state_roles``) and outputs (``_loop_outputs``) named in its interface, its step proven (``lift``) against
    the interpreter running the loop alone (INT8 weights: as LiteRT's hybrid kernels run them); with its finding."""
    where = _where(file, op)
    body = _body_of(file, op, where)
    found = _variables(file, op, body)
    x = int(op.inputs[found.x])
    shape = [int(d) for d in file.tensors[x].shape]
    signature = [
        int(d) for d in (file.tensors[x].shapeSignature if file.tensors[x].shapeSignature is not None else shape)
    ]
    hidden = int(body.tensors[int(body.inputs[found.h])].shape[-1])
    roles, constants, states_text = _state_roles(file, op, found, hidden)
    indices = _loop_outputs(file, op, found, shape[0])
    written = {role: file.name(k) for role, k in indices.items()}
    name = file.name(int(op.outputs[0])).removesuffix("/while")
    itf = Interface(
        x=file.name(x),
        y=written.get("y"),
        y_h=written["y_h"],
        y_c=written.get("y_c"),
        initial_h=roles.get("initial_h"),
        initial_c=roles.get("initial_c"),
        layout=0,
        seq_length=shape[0],
        batch_size=shape[1],  # a dynamic batch runs at the stored one only (docs/conventions.md §11)
        dtype="float32",
    )
    fed = tuple((role, tensor) for role, tensor in roles.items() if role not in constants)
    handle = LoopHandle(loop_alone(file, op, list(indices.values())), fed, tuple(written.items()))
    records: dict[str, QuantizedWeights] = {}
    weights = body_constants(file, body, where, records)
    hybrid = any(record.dynamic_activations for record in records.values())
    rec = Recurrence(
        name=name,
        found=where,
        direction=Direction.FORWARD,
        interface=itf,
        input_size=shape[2],
        hidden_size=hidden,
        candidates=candidates_from_constants(weights, shape[2], hidden),
        activations=body_activations(file, body),
        run_original=lambda feed: run_loop(handle, itf, feed, where),
        tolerance=DYNAMIC_INT8 if hybrid else None,  # the hybrid kernels quantize X and h at run time
        constants=constants,
    )
    lifted = lift(rec)
    layer = with_records(lifted.layer, records, where)
    if hybrid:
        prove_hybrid(layer, rec, where)
    finding = _lifted_finding(lifted.description, lifted.tried, _proofs(signature, records, hybrid), itf, states_text)
    provenance = Provenance(FORMAT, file.path, name, "lifted", "WHILE", inputs=(itf.x,), layout=0, handle=handle)
    return replace(layer, provenance=provenance), finding


def _proofs(signature: list[int], records: dict, hybrid: bool) -> str:
    """What the lift's proof of a loop adds in words: a dynamic batch proven at the stored one; INT8 weights behind
    ``DEQUANTIZE`` ops, or hybrid ones proven again on the executor of LiteRT's hybrid products."""
    proofs = [" (its batch dynamic in the file, proven at the stored batch)" if signature[1] < 0 else ""]
    if records and not hybrid:
        proofs.append(" (its INT8 weights dequantized to float by DEQUANTIZE ops, as the layer's records compute them)")
    if hybrid:
        proofs.append(
            f" within {DYNAMIC_INT8}'s tolerance (its INT8 weights quantize X and h at run time); the layer with those "
            "integers, run on gatepack's executor of LiteRT's hybrid products, agrees with the loop at float32's "
            "tolerance"
        )
    return "".join(proofs)


def _body_of(file: Any, op: Any, where: str) -> Any:
    """The ``WHILE``'s body subgraph; InputError when its index names none (the main subgraph included)."""
    subgraphs = file.model.subgraphs
    body_index = getattr(op.builtinOptions, "bodySubgraphIndex", -1)
    if not 0 < body_index < len(subgraphs):
        raise InputError(f"{where}: its body subgraph {body_index} is missing")
    return subgraphs[body_index]


def _loop_outputs(file: Any, op: Any, found: _Variables, seq_length: int) -> dict[str, int]:
    """The loop's outputs that are the layer's (interface role -> tensor index): its buffer as Y (not when it holds
    the last step only: Keras's return_sequences=False), its final h and c as Y_h and Y_c."""
    loop_outputs = (("y", found.buffer), ("y_h", found.h), ("y_c", found.c))
    indices = {role: int(op.outputs[j]) for role, j in loop_outputs if j >= 0}
    if file.tensors[indices["y"]].shape[0] != seq_length:  # return_sequences=False: the buffer holds the last step
        del indices["y"]
    return indices

"""LiteRT: recurrent layers written as one ``.tflite`` flatbuffer (the official schema, one subgraph), tensors
named as the source names them (docs/conventions.md §11).

Native form, per direction one ``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``_RNN`` (a reverse direction between two
``REVERSE_V2`` on the time axis); ``time_major`` is the interface's layout, so no transpose is written. Its
tensors: one weight tensor per gate (ONNX's i, o, f, c blocks into input_to_{i,f,c,o}), one bias per gate
(Wb + Rb), peepholes cell_to_{i,f,o}; ONNX's input_forget as CIFG (no input-gate tensors; the kernel computes
i = 1 - f, so the forget gate gets ONNX's input gate negated: sigmoid(-a) = 1 - sigmoid(a)). Each state is a
variable tensor [N, H] (N static): zero and internal where the source has no initial state, the source's
initial-state input itself where it has one (one direction). The final h is the op's output at its last step,
the final c the variable read together with that step (a data dependency: see ``native``), joined into
[D, N, H]; Y is the op's output reshaped or packed into [S, D, N, H] / [N, S, D, H].

Elementary form (a GRU always; anything the op lacks): the sequence unrolled over a static S, each step the
cell's ``cell_steps`` step over ``_Ops`` (FULLY_CONNECTED for the projections with their biases, ADD, MUL,
SUB, LOGISTIC, TANH, SPLIT, MINIMUM/MAXIMUM for clip ...), sequence lengths as SELECT_V2 masks per step, the
steps' states PACKed into Y.

The model's metadata ``gatepack`` holds each layer's description (``description.describe``), its strategy and
the tensors its weights are read back from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gatepack.converters import quantization
from gatepack.converters.cell_steps import step_of
from gatepack.converters.description import describe
from gatepack.converters.formats.litert.common import (
    FUSED,
    LSTM_BIASES,
    LSTM_CELL_STATE,
    LSTM_INPUT_WEIGHTS,
    LSTM_INPUTS,
    LSTM_OUTPUT_STATE,
    LSTM_PEEPHOLES,
    LSTM_RECURRENT_WEIGHTS,
    Graph,
    schema,
)
from gatepack.converters.formats.litert.quantized import asymmetric, held_records, holds, row_block
from gatepack.converters.formats.litert.registration import GATES
from gatepack.converters.formats.litert.strategy import form, held_state, streamed_roles
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.samples import DEFAULT_BATCH, DEFAULT_SEQ_LENGTH
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import Direction, DirectionParams, RecurrentLayer, state_roles

METADATA_FORMAT = "gatepack-litert"


def _size(value: Any, layer: RecurrentLayer, fallback: int) -> int:
    """A static size from an option (one size, or one per layer name), else ``fallback``."""
    if isinstance(value, dict):
        value = value.get(layer.name)
    return value if isinstance(value, int) else fallback


def write_layers(
    model: Model,
    path: str | Path,
    *,
    strategy: str = "auto",
    seq_length: int | dict | None = None,
    batch_size: int | dict | None = None,
    stateful: bool = False,
) -> None:
    """Write ``model``'s layers alone as one ``.tflite`` file at ``path``. N is static (symbolic: ``batch_size``,
    default 3); S stays dynamic for the sequence ops, and the elementary form unrolls a static S (symbolic:
    ``seq_length``, default 7). ``stateful``: a layer's own state pairs (``Model.meta['state_pairs']``) held in
    its ops' variable tensors across invokes, the initial-state inputs gone (docs/streaming.md)."""
    graph = Graph(schema())
    described = []
    pairs = model.meta.get("state_pairs") if stateful else None
    model = quantization.floats_asked(model)  # float weights, as asked (--dequantize)
    for layer in with_separate_inputs(model).layers:
        itf = layer.interface
        n = itf.batch_size if isinstance(itf.batch_size, int) else _size(batch_size, layer, DEFAULT_BATCH)
        chosen = form(layer, strategy).chosen
        s = itf.seq_length if isinstance(itf.seq_length, int) else None
        if chosen == "decomposed" and s is None:
            s = _size(seq_length, layer, DEFAULT_SEQ_LENGTH)
        entry = _LayerWriter(graph, layer, s, n, streamed_roles(layer, pairs)).write(chosen)
        described.append(entry)
    graph.packed({"format": METADATA_FORMAT, "layers": described}, model.path).write(path)


class _LayerWriter:
    """One layer into ``graph``: its interface tensors, then the native ops or the unrolled steps."""

    def __init__(
        self,
        graph: Graph,
        layer: RecurrentLayer,
        s: int | None,
        n: int,
        held: dict[str, tuple[str, str]],
        given: dict[str, int] | None = None,
    ) -> None:
        self.g, self.layer, self.s, self.n = graph, layer, s, n
        # inside a whole model: the tensors the graph already holds for the layer's inputs, by name (no graph inputs)
        self.given = given or {}
        self.held = held  # --stateful: the initial-state roles the op's variables hold across invokes
        self.itf = layer.interface
        self.layout = self.itf.layout
        self.outputs: dict[str, int] = {}  # output role -> tensor, once written
        self.weights: list[dict[str, str]] = []  # per direction: role -> tensor name (for the reader)
        self.zeros: int | None = None  # the native form's scalar zero, made once per layer
        # W and R as int8 for the hybrid kernels (``quantized``): per role, one record per direction
        self.records = {role: held_records(layer, role) for role in ("W", "R")} if holds(layer) else {}
        self.asymmetric = asymmetric(layer)

    def matrix(self, role: str, k: int, which: str, first: int, stop: int, sign: int = 1) -> int:
        """Rows ``first:stop`` of direction ``k``'s W or R (``which``) times ``sign``, as tensor ``role``: INT8 with
        its scales where the layer's records are held, else float32."""
        records = self.records.get(which)
        if records is None:
            params = self.layer.directions[k]
            floats = (params.W if which == "W" else params.R)[first:stop]
            return self.weight(role, k, floats if sign == 1 else -floats)  # (rows of the source's array: no copy)
        values, scale = row_block(records[k], first, stop)
        if sign != 1:  # negated through int16 (an int8 -128 has no int8 negative)
            values = (sign * values.astype(np.int16)).astype(np.int8)
        return self.g.int8(self.name(f"{role}_{k}"), values, scale)  # (rows of the record's array: no copy)

    def name(self, role: str) -> str:
        return f"{self.layer.name}/{role}"

    def x_shape(self) -> list:
        s, n, i = self.s, self.n, self.layer.input_size
        return [n, s, i] if self.layout else [s, n, i]

    def state_shape(self) -> list:
        d, n, h = self.layer.num_directions, self.n, self.layer.hidden_size
        return [n, d, h] if self.layout else [d, n, h]

    def graph_input(self, name: str, shape: list, dtype: str = "FLOAT32", variable: bool = False) -> int:
        if name in self.given:
            return self.given[name]
        index = self.g.tensor(name, shape, dtype, variable=variable)
        self.g.graph.inputs.append(index)
        return index

    def write(self, chosen: str) -> dict:
        itf = self.itf
        x = self.graph_input(itf.x, self.x_shape())
        self.outputs = self.native(x) if chosen == "native" else self.elementary(x)
        for role, index in self.outputs.items():
            if getattr(itf, role) and not self.given:  # a whole model's outputs are its own
                self.g.graph.outputs.append(index)
        entry = describe(self.layer)
        entry["interface"]["dtype"] = "float32"  # the file's interface and weights, whatever the source's
        entry["interface"]["batch_size"] = self.n
        entry["interface"]["seq_length"] = self.s
        entry.update(name=self.layer.name, strategy=chosen, weights=self.weights)
        if self.held:  # the file takes no such input: the variable holds the state (the reader notes it)
            entry["interface"].update({role: None for role in self.held})
            entry["stateful"] = {role: list(pair) for role, pair in self.held.items()}
        return entry

    # ------------------------------------------------------------------------------------- the sequence ops

    def native(self, x: int) -> dict[str, int]:
        """Per direction the sequence op, then Y and the final states in the interface's shapes. Each final state is
        read through a data dependency on the op's output (its last step; LSTM's c from the variable, concatenated
        with that step), never from the variable alone: nothing in the graph orders a read of a variable after the
        op that writes it, and a delegate may move such a read (docs/conventions.md §11)."""
        layer, time_axis = self.layer, 1 if self.layout else 0
        ys, finals = [], []
        initial = self.fed_states()
        for k, params in enumerate(layer.directions):
            reverse = layer.direction is Direction.REVERSE or k == 1
            source = self.reversed(x, time_axis, f"x_reversed_{k}") if reverse else x
            states = [self.state_variable(role, k, initial, x) for role, _ in state_roles(layer.cell)]
            y = self.g.tensor(self.name(f"y_{k}"), self.sequence_shape())
            if layer.cell is Cell.LSTM:
                self.lstm_op(source, params, states, y, k)
            else:
                self.rnn_op(source, params, states[0], y, k)
            ys.append(self.reversed(y, time_axis, f"y_{k}_in_time") if reverse else y)
            last = self.last_step(y, k)  # the final h: the op's output at its last processing step
            finals.append([last, *(self.after(state, last, k) for state in states[1:])])
        outputs = {"y": self.stacked(ys, 2 if self.layout else 1, self.itf.y or self.name("Y"))}
        for j, (_, final) in enumerate(state_roles(layer.cell)):
            outputs[final] = self.joined([f[j] for f in finals], final, self.final_name(final))
        return outputs

    def last_step(self, y: int, k: int) -> int:
        """``y``'s last time step, [1, N, H] (layout 1: [N, 1, H]), by STRIDED_SLICE (S may be dynamic)."""
        n, h, g = self.n, self.layer.hidden_size, self.g
        begin = [0, -1, 0] if self.layout else [-1, 0, 0]
        out = g.tensor(self.name(f"h_final_{k}"), [n, 1, h] if self.layout else [1, n, h])
        constants = [
            g.const(self.name(f"h_final_{k}_{role}"), np.array(v, np.int32))
            for role, v in (("begin", begin), ("end", [0, 0, 0]), ("strides", [1, 1, 1]))
        ]
        options = g.options("StridedSliceOptions", beginMask=0b101 if self.layout else 0b110, endMask=0b111)
        g.op("STRIDED_SLICE", [y, *constants], [out], options)
        return out

    def after(self, variable: int, last: int, k: int) -> int:
        """The state ``variable`` [N, H] as [1, N, H] (layout 1: [N, 1, H]), read by an op that also takes ``last``
        (the op's output): CONCATENATION of both, then SLICE of the variable's part, copies with no arithmetic."""
        n, h, g = self.n, self.layer.hidden_size, self.g
        flat = self.reshaped(last, [n, h], f"c_order_{k}")
        both = g.tensor(self.name(f"c_with_h_{k}"), [n, 2 * h])
        g.op("CONCATENATION", [flat, variable], [both], g.options("ConcatenationOptions", axis=1))
        part = g.tensor(self.name(f"c_final_2d_{k}"), [n, h])
        slices = [
            g.const(self.name(f"c_final_{k}_{role}"), np.array(v, np.int32))
            for role, v in (("begin", [0, h]), ("size", [n, h]))
        ]
        g.op("SLICE", [both, *slices], [part])
        return self.reshaped(part, [n, 1, h] if self.layout else [1, n, h], f"c_final_{k}")

    def joined(self, parts: list[int], role: str, name: str) -> int:
        """Per-direction final states [1, N, H] (layout 1: [N, 1, H]) as the interface's [D, N, H] / [N, D, H]."""
        if len(parts) == 1:
            return self.reshaped(parts[0], self.state_shape(), role, name)
        out = self.g.tensor(name, self.state_shape())
        self.g.op("CONCATENATION", parts, [out], self.g.options("ConcatenationOptions", axis=1 if self.layout else 0))
        return out

    def final_name(self, role: str) -> str:
        return getattr(self.itf, role) or self.name(role.upper())

    def sequence_shape(self) -> list:
        s, n, h = self.s, self.n, self.layer.hidden_size
        return [n, s, h] if self.layout else [s, n, h]

    def state_variable(self, role: str, k: int, fed: dict[str, int], x: int) -> int:
        """The direction's state, the op's variable tensor [N, H], written on every invoke before the op runs (the
        artifact is stateless): the source's initial-state input ``fed[role]``'s direction k (STRIDED_SLICE, its
        direction axis shrunk), else zeros (FILL with ``zero``). Each is computed from a graph input, so no runtime
        evaluates it once for all invokes (as it may an op of constants alone, whose output the op would then keep
        its state in), and no runtime lets the variable share an intermediate's memory in place (the interpreter's
        arena shares an op's output with an intermediate input of its size, never with a graph input; a shared
        variable crashes it). A ``held`` role's variable has no writer: it starts at zero and keeps the op's final
        state from one invoke to the next (--stateful)."""
        n, h, g = self.n, self.layer.hidden_size, self.g
        variable = g.tensor(self.name(f"{role[len('initial_') :]}_state_{k}"), [n, h], variable=True)
        if role in self.held:
            return variable
        if role not in fed:
            g.op(
                "FILL", [g.const(self.name(f"{role}_{k}_shape"), np.array([n, h], np.int32)), self.zero(x)], [variable]
            )
            return variable
        begin, end = ([0, k, 0], [n, k + 1, h]) if self.layout else ([k, 0, 0], [k + 1, n, h])
        direction_axis = 1 if self.layout else 0
        self.sliced(fed[role], begin, end, 1 << direction_axis, variable, f"{role}_{k}")
        return variable

    def zero(self, x: int) -> int:
        """A float32 scalar zero: ZEROS_LIKE of ``x``'s first element (STRIDED_SLICE, every axis shrunk), exact
        whatever ``x`` holds (inf and NaN included); made once per layer."""
        if self.zeros is None:
            first = self.g.tensor(self.name("x_first"), [])
            self.sliced(x, [0, 0, 0], [1, 1, 1], 0b111, first, "x_first")
            self.zeros = self.g.tensor(self.name("zero"), [])
            self.g.op("ZEROS_LIKE", [first], [self.zeros])
        return self.zeros

    def sliced(self, x: int, begin: list[int], end: list[int], shrink: int, out: int, role: str) -> None:
        """``out`` = ``x[begin:end]`` (STRIDED_SLICE, unit strides, the axes of mask ``shrink`` dropped)."""
        g = self.g
        constants = [
            g.const(self.name(f"{role}_{part}"), np.array(v, np.int32))
            for part, v in (("begin", begin), ("end", end), ("strides", [1] * len(begin)))
        ]
        g.op("STRIDED_SLICE", [x, *constants], [out], g.options("StridedSliceOptions", shrinkAxisMask=shrink))

    def fed_states(self) -> dict[str, int]:
        """Per state the source feeds (its initial-state input) and the file does not hold, that graph input."""
        layer = self.layer
        found = {}
        for role, _ in state_roles(layer.cell):
            name = getattr(self.itf, role)
            if name and role in layer.fed_roles() and role not in self.held:
                found[role] = self.graph_input(name, self.state_shape())
        return found

    def per_direction(self, whole: int, role: str, d: int) -> list[int]:
        """A state [D, N, H] (layout 1: [N, D, H]) as one [N, H] per direction (SPLIT, RESHAPE)."""
        parts = self.split(whole, d, 1 if self.layout else 0, role) if d > 1 else [whole]
        return [
            self.reshaped(p, [self.n, self.layer.hidden_size], f"{role}_{k}_per_direction") for k, p in enumerate(parts)
        ]

    def reversed(self, x: int, axis: int, role: str) -> int:
        out = self.g.tensor(self.name(role), self.g.shape_of(x))
        self.g.op("REVERSE_V2", [x, self.g.const(self.name(f"{role}_axis"), np.array([axis], np.int32))], [out])
        return out

    def stacked(self, parts: list[int], axis: int, name: str) -> int:
        """``parts`` stacked on a new ``axis`` (one part: reshaped), as tensor ``name``."""
        shape = self.g.shape_of(parts[0])
        shape.insert(axis, len(parts))
        out = self.g.tensor(name, shape)
        if len(parts) == 1:
            target = np.array([-1 if d is None else d for d in shape], np.int32)
            self.g.op("RESHAPE", [parts[0], self.g.const(f"{name}/shape", target)], [out])
        else:
            self.g.op("PACK", parts, [out], self.g.options("PackOptions", valuesCount=len(parts), axis=axis))
        return out

    def weight(self, role: str, k: int, value: np.ndarray) -> int:
        name = self.name(f"{role}_{k}")
        return self.g.const(name, np.asarray(value, np.float32))

    def lstm_op(self, x: int, params: DirectionParams, states: list[int], y: int, k: int) -> None:
        """UNIDIRECTIONAL_SEQUENCE_LSTM: ONNX's i, o, f, c blocks into per-gate tensors; input_forget as CIFG."""
        h, layer = self.layer.hidden_size, self.layer
        blocks = {gate: n for n, gate in enumerate(layer.cell.gate_names)}  # ONNX order
        b = params.Wb + params.Rb
        inputs = [-1] * LSTM_INPUTS
        inputs[0] = x
        cifg = layer.input_forget
        for gate in GATES[layer.cell]:  # the op's inputs' order
            j = blocks["i" if cifg and gate == "f" else gate]
            sign = -1 if cifg and gate == "f" else 1  # CIFG: i = 1 - f, so f takes ONNX's i negated
            if cifg and gate == "i":
                continue
            rows_of = (j * h, (j + 1) * h)
            inputs[LSTM_INPUT_WEIGHTS[gate]] = self.matrix(f"input_to_{gate}", k, "W", *rows_of, sign)
            inputs[LSTM_RECURRENT_WEIGHTS[gate]] = self.matrix(f"recurrent_to_{gate}", k, "R", *rows_of, sign)
            inputs[LSTM_BIASES[gate]] = self.weight(f"{gate}_gate_bias", k, sign * b[j * h : (j + 1) * h])
        if params.P is not None:
            p = dict(zip(layer.cell.spec.peepholes, np.split(params.P, 3)))  # ONNX order
            for gate in "ifo":
                if cifg and gate == "i":
                    continue
                value = -p["i"] if cifg and gate == "f" else p[gate]
                inputs[LSTM_PEEPHOLES[gate]] = self.weight(f"cell_to_{gate}", k, value)
        inputs[LSTM_OUTPUT_STATE], inputs[LSTM_CELL_STATE] = states
        options = self.g.options(
            "UnidirectionalSequenceLSTMOptions",
            fusedActivationFunction=self.fused(params.activations[1].name),
            timeMajor=not self.layout,
            asymmetricQuantizeInputs=self.asymmetric,
        )
        self.g.op("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [y], options)
        self.weights.append({"op_output": self.g.graph.tensors[y].name})

    def rnn_op(self, x: int, params: DirectionParams, state: int, y: int, k: int) -> None:
        h = self.layer.hidden_size
        inputs = [
            x,
            self.matrix("input_weights", k, "W", 0, h),
            self.matrix("recurrent_weights", k, "R", 0, h),
            self.weight("bias", k, params.Wb + params.Rb),
            state,
        ]
        options = self.g.options(
            "SequenceRNNOptions",
            fusedActivationFunction=self.fused(params.activations[0].name),
            timeMajor=not self.layout,
            asymmetricQuantizeInputs=self.asymmetric,
        )
        self.g.op("UNIDIRECTIONAL_SEQUENCE_RNN", inputs, [y], options)
        self.weights.append({"op_output": self.g.graph.tensors[y].name})

    def fused(self, activation: str) -> int:
        return getattr(self.g.s.ActivationFunctionType, FUSED[activation])

    # ------------------------------------------------------------------------------------ elementary ops

    def elementary(self, x: int) -> dict[str, int]:
        """The sequence unrolled over the static S: per direction and step the cell's step of ``cell_steps``."""
        layer, g, s = self.layer, self.g, self.s
        assert s is not None  # the writer fixes S for the elementary form
        i, time_axis = layer.input_size, 1 if self.layout else 0
        frames = self.split(x, s, time_axis, "x_t") if s > 1 else [x]
        frames = [self.reshaped(f, [self.n, i], f"x_{t}") for t, f in enumerate(frames)]
        initial = self.initial_states()
        masks = self.masks()
        step = step_of(layer.cell, "LiteRT")
        ys, finals = [], []
        for k, params in enumerate(layer.directions):
            ops = _Ops(self, k, params)
            rows = params.stored("W").shape[0]  # (not params.W: a float view not made yet stays so)
            names = {"W": self.matrix("W", k, "W", 0, rows), "Wb": ops.const_tensor("Wb", params.Wb)}
            names.update(R=ops.r_name, Rb=ops.rb_name)
            if params.P is not None:
                names["P"] = ops.p_tensor = ops.const_tensor("P", params.P)
            described = {key: g.graph.tensors[v].name for key, v in names.items()}
            if self.records:  # the hybrid kernels' arithmetic, for the reader's records
                described["quantized_inputs"] = "asymmetric" if self.asymmetric else "symmetric"
            self.weights.append(described)
            reverse = layer.direction is Direction.REVERSE or k == 1
            state = [per[k] for per in initial]
            outs: list[int] = [0] * s
            for t in reversed(range(s)) if reverse else range(s):
                gx = ops.fully_connected(frames[t], names["W"], names["Wb"])
                new = step(ops, layer, params, gx, state)
                if masks:  # past its length a sequence keeps its state and outputs zeros
                    new = [ops.select(masks[t], a, b) for a, b in zip(new, state)]
                    outs[t] = ops.select(masks[t], new[0], ops.const(new[0], 0.0))
                else:
                    outs[t] = new[0]
                state = new
            ys.append(self.stacked(outs, 1 if self.layout else 0, self.name(f"y_{k}")))
            if masks:  # a sequence of length 0 ends in zeros (onnxruntime's Y_h and Y_c), not its initial state
                state = [ops.select(masks[0], v, ops.const(v, 0.0)) for v in state]
            finals.append(state)
        outputs = {"y": self.stacked(ys, 2 if self.layout else 1, self.itf.y or self.name("Y"))}
        for j, (_, final) in enumerate(state_roles(layer.cell)):
            outputs[final] = self.stacked([f[j] for f in finals], 1 if self.layout else 0, self.final_name(final))
        return outputs

    def masks(self) -> list[int]:
        """Per step t, ``t < sequence_lens`` as bool [N, 1] (none without lengths). A reverse direction, run from
        the last step, keeps its initial state until step len - 1: it starts there, as ONNX specifies."""
        layer, itf = self.layer, self.itf
        held = layer.constant("sequence_lens")
        if not itf.sequence_lens:
            return []
        if held is not None:
            lens = self.g.const(self.name("sequence_lens"), np.broadcast_to(held, (self.n,)).astype(np.int32))
        else:
            lens = self.graph_input(itf.sequence_lens, [self.n], "INT32")
        column = self.reshaped(lens, [self.n, 1], "sequence_lens_column", dtype="INT32")
        found = []
        for t in range(self.s or 0):
            mask = self.g.tensor(self.name(f"valid_{t}"), [self.n, 1], "BOOL")
            self.g.op("GREATER", [column, self.g.const(self.name(f"step_{t}"), np.array([t], np.int32))], [mask])
            found.append(mask)
        return found

    def initial_states(self) -> list[list[int]]:
        """Per state, per direction, its initial value [N, H]: the input, the held constant, or zeros."""
        layer, d, h = self.layer, self.layer.num_directions, self.layer.hidden_size
        found = []
        for role, _ in state_roles(layer.cell):
            name = getattr(self.itf, role)
            held = held_state(layer, role, self.n)
            if name and role in layer.fed_roles():
                whole = self.graph_input(name, self.state_shape())
            elif held is not None:
                whole = self.g.const(self.name(role), held.transpose(1, 0, 2) if self.layout else held)
            else:
                found.append([self.g.const(self.name(f"zero_{role}"), np.zeros((self.n, h), np.float32))] * d)
                continue
            found.append(self.per_direction(whole, role, d))
        return found

    def split(self, x: int, count: int, axis: int, role: str) -> list[int]:
        shape = self.g.shape_of(x)
        shape[axis] = None if shape[axis] is None else shape[axis] // count
        outs = [self.g.tensor(self.name(f"{role}_{j}"), shape) for j in range(count)]
        axis_tensor = self.g.const(self.name(f"{role}_axis"), np.array(axis, np.int32))
        self.g.op("SPLIT", [axis_tensor, x], outs, self.g.options("SplitOptions", numSplits=count))
        return outs

    def reshaped(self, x: int, shape: list, role: str, name: str | None = None, dtype: str = "FLOAT32") -> int:
        out = self.g.tensor(name or self.name(role), shape, dtype)
        self.g.op("RESHAPE", [x, self.g.const(self.name(f"{role}_shape"), np.array(shape, np.int32))], [out])
        return out


class _Ops:
    """``cell_steps.StepOps`` over the graph for direction ``k``: values are tensor indices, scalars float32
    constants of shape [1] (broadcast by the binary ops)."""

    builder = "LiteRT"

    def __init__(self, writer: _LayerWriter, k: int, params: DirectionParams) -> None:
        self.w, self.g, self.k, self.params = writer, writer.g, k, params
        self.count = 0
        self.scalars: dict[float, int] = {}
        h = writer.layer.hidden_size
        self.h = h
        self.r_name = writer.matrix("R", k, "R", 0, params.stored("R").shape[0])  # (not params.R: see elementary)
        self.rb_name = self.const_tensor("Rb", params.Rb)
        self.r_blocks: dict[tuple[int, int], tuple[int, int]] = {}
        self.p_tensor: int | None = None

    def const_tensor(self, role: str, value: np.ndarray) -> int:
        return self.g.const(self.w.name(f"{role}_{self.k}"), np.asarray(value, np.float32))

    def fresh(self, shape: list, dtype: str = "FLOAT32") -> int:
        self.count += 1
        return self.g.tensor(self.w.name(f"d{self.k}_v{self.count}"), shape, dtype)

    def unary(self, op: str, x: Any) -> int:
        out = self.fresh(self.g.shape_of(x))
        self.g.op(op, [x], [out])
        return out

    def broadcast(self, *values: int) -> list:
        """The shape NumPy's broadcasting gives ``values`` (every shape here is static)."""
        return list(np.broadcast_shapes(*(tuple(self.g.shape_of(v)) for v in values)))

    def binary(self, op: str, x: Any, y: Any, dtype: str = "FLOAT32") -> int:
        out = self.fresh(self.broadcast(x, y), dtype)
        self.g.op(op, [x, y], [out])
        return out

    def fully_connected(self, x: int, weights: int, bias: int) -> int:
        """``x weights^T + bias``; INT8 weights run the hybrid kernel, which quantizes ``x`` per row at run time."""
        rows = self.g.shape_of(weights)[0]
        out = self.fresh([self.g.shape_of(x)[0], rows])
        options = self.g.options("FullyConnectedOptions", asymmetricQuantizeInputs=self.w.asymmetric)
        self.g.op("FULLY_CONNECTED", [x, weights, bias], [out], options)
        return out

    # ElementaryOps
    def const(self, x: Any, value: float) -> int:
        if value not in self.scalars:
            self.scalars[value] = self.g.const(
                self.w.name(f"d{self.k}_c{len(self.scalars)}"), np.array([value], np.float32)
            )
        return self.scalars[value]

    def zero_like(self, x: Any) -> int:
        return self.const(x, 0.0)

    def add(self, x: Any, y: Any) -> int:
        return self.binary("ADD", x, y)

    def sub(self, x: Any, y: Any) -> int:
        return self.binary("SUB", x, y)

    def mul(self, x: Any, y: Any) -> int:
        return self.binary("MUL", x, y)

    def div(self, x: Any, y: Any) -> int:
        return self.binary("DIV", x, y)

    def minimum(self, x: Any, y: Any) -> int:
        return self.binary("MINIMUM", x, y)

    def maximum(self, x: Any, y: Any) -> int:
        return self.binary("MAXIMUM", x, y)

    def select(self, cond: Any, a: Any, b: Any) -> int:
        out = self.fresh(self.broadcast(cond, a, b))
        self.g.op("SELECT_V2", [cond, a, b], [out])
        return out

    def greater(self, x: Any, y: Any) -> int:
        return self.binary("GREATER", x, y, "BOOL")

    def greater_equal(self, x: Any, y: Any) -> int:
        return self.binary("GREATER_EQUAL", x, y, "BOOL")

    def clip01(self, x: Any) -> int:
        return self.minimum(self.maximum(x, self.const(x, 0.0)), self.const(x, 1.0))

    def exp(self, x: Any) -> int:
        return self.unary("EXP", x)

    def log(self, x: Any) -> int:
        return self.unary("LOG", x)

    def abs(self, x: Any) -> int:
        return self.unary("ABS", x)

    def neg(self, x: Any) -> int:
        return self.unary("NEG", x)

    def sigmoid(self, x: Any) -> int:
        return self.unary("LOGISTIC", x)

    def tanh(self, x: Any) -> int:
        return self.unary("TANH", x)

    def relu(self, x: Any) -> int:
        return self.unary("RELU", x)

    # StepOps
    def split(self, x: Any, count: int) -> list[int]:
        shape = self.g.shape_of(x)
        return self.w.split(x, count, len(shape) - 1, f"d{self.k}_s{self.next()}")

    def next(self) -> int:
        self.count += 1
        return self.count

    def clip(self, x: Any, bound: float) -> int:
        return self.minimum(self.maximum(x, self.const(x, -bound)), self.const(x, bound))

    def recurrent(self, x: Any, first: int, stop: int) -> int:
        """``x R[first*H : stop*H]^T + Rb[...]``: one FULLY_CONNECTED with the blocks' rows as constants."""
        key = (first, stop)
        if key not in self.r_blocks:
            rows = slice(first * self.h, stop * self.h)
            if key == (0, self.w.layer.cell.gates):
                self.r_blocks[key] = (self.r_name, self.rb_name)
            else:
                self.r_blocks[key] = (
                    self.w.matrix(f"R_{first}_{stop}", self.k, "R", rows.start, rows.stop),
                    self.const_tensor(f"Rb_{first}_{stop}", self.params.Rb[rows]),
                )
        weights, bias = self.r_blocks[key]
        return self.fully_connected(x, weights, bias)

    def peepholes(self) -> int:
        assert self.p_tensor is not None  # asked for only when the direction has peepholes
        return self.p_tensor

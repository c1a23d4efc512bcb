"""Core ML ML Programs: GRU/RNN layers written with coremltools' MIL builder, read back without a
Core ML runtime, and executed by a NumPy interpreter of the MIL ops gatepack emits.

MIL's recurrent ops (docs/conventions.md §5) differ from ONNX::

    gru(x [S,N,I], initial_h [N,H] (required), weight_ih [3H,I], weight_hh [3H,H], bias [3H],
        input_bias [3H] (iOS18), reset_after (iOS18), direction forward|reverse,
        recurrent_activation, activation, output_sequence) -> (Y [S,N,H], Y_h [N,H])
    rnn(x, initial_h, weight_ih [H,I], weight_hh [H,H], bias [H], direction, activation, ...)

* gate blocks r, o, z (o = the candidate): ONNX z, r, h rows permuted by ``[1, 2, 0]``;
* reset_after = False (every target) is reset-*before*: ``o = g(W_o x + b_o + W_ho (r * h) + b_ho)``,
  whatever Apple's docs print; the biases are then additive and ``bias = Wb + Rb`` (folded);
* reset_after = True (iOS18) is ONNX linear_before_reset = 1: ``bias = Rb``, ``input_bias = Wb``;
* a reverse op returns its output sequence in *processing order*: gatepack reverses it back to
  input time, as ONNX has it;
* no bidirectional mode (two ops, stacked into ONNX's Y [S,D,N,H]), no clip, no sequence lengths,
  activations are parameterless strings.

Strategies: ``native`` uses ``gru``/``rnn`` where they compute exactly what ONNX specifies
(activations Sigmoid/Tanh/Relu, no clip, no sequence_lens, linear_before_reset = 1 only from iOS18);
``decomposed`` writes the cell from elementary MIL ops in a ``while_loop`` (one matmul for every
step's input projection outside it, a ``scatter`` of each step's output, masks for sequence_lens,
``reverse_sequence`` for the reverse direction); ``auto`` picks native where it is exact.

Core ML sanitises tensor names (``a/b:0`` becomes ``a_b_0``); the package's metadata
(``gatepack``) keeps the source's names and every layer's description, so the layer reads back whole
and ``run`` takes the source's names.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import os
import re
import shutil
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gatepack.converters.apple import (
    NATIVE_ACTIVATIONS,
    activation_of,
    apple_peephole,
    apple_weights,
    feature_blockers,
    lstm_recurrence,
    onnx_peephole,
    onnx_weights,
    recurrence,
    runtime_doubts,
)
from gatepack.converters.decompose import build_activation
from gatepack.converters.description import build_layer, constant_from_layout, describe, parse
from gatepack.converters.errors import InputError, NoRecurrentLayerError, RuntimeFailure, UsageError, where
from gatepack.converters.fileio import contained_file, parse_json, read_bytes, read_json, staging_directory
from gatepack.converters.findings import Finding, Status, fp16_source
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import CORE_ML_TARGETS, FormatImplementation
from gatepack.converters.strategy import cell_finding, choose
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    PERM_Y_TO_BATCH_MAJOR,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    dim_text,
    state_roles,
)

FORMAT = "coreml"
METADATA_KEY = "gatepack"
TARGETS = CORE_ML_TARGETS
DEFAULT_TARGET = "iOS18"


def _ct():
    from gatepack.converters.runtimes import coremltools

    return coremltools()


def _mil_types():
    """coremltools' MIL types, imported after ``_ct()`` so that coremltools' first import stays quiet
    (importing one of its submodules first would import the package without gatepack's guard)."""
    _ct()
    from coremltools.converters.mil.mil import types

    return types


@contextlib.contextmanager
def _quiet():
    """coremltools prints progress bars and warnings while converting; gatepack reports itself."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


@contextlib.contextmanager
def _heap_frozen():
    """Keep the objects that already exist out of the full garbage collection ``ct.convert`` forces
    on every call (``gc.collect()``: ~90 ms in a process holding onnx and coremltools, seconds in a
    long-lived one, for nothing, since they are not the converter's). Objects made meanwhile are
    collected as usual, and everything is unfrozen afterwards. When the application has frozen
    objects itself, nothing is done (unfreezing would release its objects too)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _target_rank(target: str) -> int:
    if target not in TARGETS:
        raise UsageError(f"minimum deployment target {target!r} is not one of {', '.join(TARGETS)}")
    return TARGETS.index(target)


# ---------------------------------------------------------------------------------------- strategy


def native_blockers(layer: RecurrentLayer, target: str = DEFAULT_TARGET) -> list[str]:
    """Why MIL's own gru/rnn/lstm op would not compute what ONNX specifies (empty: it would)."""
    blockers = feature_blockers(layer, f"{layer.cell.value} op")
    if layer.cell is Cell.LSTM:
        if layer.clip is not None:
            blockers["clip"] = (
                f"clip {layer.clip:g}: the lstm op's clip bounds the cell state after each update (coremltools' "
                "reference), ONNX's the gates' inputs (docs/conventions.md §8)"
            )
        if layer.input_forget:
            blockers["input_forget"] = "input_forget = 1: the lstm op has no input/forget coupling"
    reasons = list(blockers.values())
    if layer.cell is Cell.GRU and layer.linear_before_reset and _target_rank(target) < TARGETS.index("iOS18"):
        reasons.append(f"linear_before_reset = 1 needs the gru op's reset_after (iOS18); the target is {target}")
    return reasons


def choose_strategy(layer: RecurrentLayer, strategy: str, target: str = DEFAULT_TARGET) -> tuple[str, list[str]]:
    blockers = native_blockers(layer, target)
    return choose(strategy, blockers), blockers


# ----------------------------------------------------------------------------------------- writing


def safe_name(name: str) -> str:
    """A name Core ML accepts: letters, digits and underscores, not starting with a digit (the rule
    of coremltools' own sanitiser, applied by gatepack so the mapping is known and stored)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return text if re.match(r"[A-Za-z_]", text) else "_" + text


FP16_PASSES = [
    "common::add_fp16_cast",
    "common::const_elimination",
    "common::cast_optimization",
    "common::dead_code_elimination",
]
FP16_TARGET = "iOS17"  # the gru/rnn ops take fp16 from iOS17 (docs/conventions.md §5)


def write(
    model: Model,
    path: str | Path,
    *,
    strategy: str = "auto",
    minimum_deployment_target: str = DEFAULT_TARGET,
    compress_to_fp16: bool = False,
) -> None:
    """Write ``model``'s layers as one ML Program package at ``path`` (NAME.mlpackage): fp32, or
    with ``compress_to_fp16`` fp16 weights and fp16 arithmetic behind an fp32 interface (coremltools'
    own fp16 cast pass, then only constant folding and cast/dead-code clean-up)."""
    ct = _ct()
    path = Path(path)
    _target_rank(minimum_deployment_target)
    if compress_to_fp16 and _target_rank(minimum_deployment_target) < TARGETS.index(FP16_TARGET):
        raise UsageError(
            f"fp16 packages need --minimum-deployment-target {FP16_TARGET} or later (the target is "
            f"{minimum_deployment_target})"
        )
    with _quiet():  # coremltools prints notes while building constants
        program, described = build(model, strategy=strategy, target=minimum_deployment_target)
    described["precision"] = "fp16" if compress_to_fp16 else "fp32"
    # coremltools converts into a package it makes in the system's temporary folder and removes only when
    # the process exits: gatepack has it made in its own staging folder instead, removed when the package
    # is in place (and, after a killed run, by the next one)
    with staging_directory(path.parent, ".coreml.") as staging:
        try:
            with _quiet(), _heap_frozen():
                mlmodel = ct.convert(
                    program,
                    source="milinternal",
                    convert_to="mlprogram",
                    minimum_deployment_target=getattr(ct.target, minimum_deployment_target),
                    compute_precision=ct.precision.FLOAT16 if compress_to_fp16 else ct.precision.FLOAT32,
                    # the program as written: no fusion, and no fp16 cast unless asked for
                    pass_pipeline=(
                        ct.PassPipeline(pass_names=FP16_PASSES) if compress_to_fp16 else ct.PassPipeline.EMPTY
                    ),
                    package_dir=str(staging / "converted.mlpackage"),
                )
        except Exception as err:  # coremltools raises ValueError/AssertionError with long messages
            raise RuntimeFailure(
                f"{path}: coremltools cannot convert the program: {' '.join(str(err).split())[:240]}"
            ) from None
        mlmodel.user_defined_metadata[METADATA_KEY] = json.dumps(described)
        mlmodel.short_description = "recurrent layers written by gatepack"
        mlmodel.save(str(staging / "model.mlpackage"))
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(staging / "model.mlpackage", path)


def build(model: Model, *, strategy: str = "auto", target: str = DEFAULT_TARGET):
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
        shapes = {itf.x: ((n, s, layer.input_size) if itf.layout else (s, n, layer.input_size), types.fp32)}
        fed = layer.fed_roles()  # an input the layer holds as a constant is a const op, not a placeholder
        if "sequence_lens" in fed:
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
            chosen, _ = choose_strategy(layer, strategy, target)
            x = function.inputs[names[itf.x]]
            held = _held_constants(mb, layer, x)
            fed = layer.fed_roles()
            lens = function.inputs[names[itf.sequence_lens]] if "sequence_lens" in fed else held.get("sequence_lens")
            states = {
                role: function.inputs[names[getattr(itf, role)]] if role in fed else held.get(role)
                for role, _ in state_roles(layer.cell)
            }
            if chosen == "native":
                results = _emit_native(mb, layer, x, states, target)
            else:
                results = _emit_decomposed(mb, layer, x, lens, states)
            for name, value in zip((getattr(itf, role) for role in OUTPUT_ROLES), results):
                if name:
                    names[name] = safe_name(name)
                    outputs.append(mb.identity(x=value, name=names[name]))
            description = describe(layer)
            description["interface"]["dtype"] = "float32"  # the package's interface and weights, whatever the source's
            described.append({"name": layer.name, "strategy": chosen, "target": target, **description})
        function.set_outputs(outputs)
    if len(set(names.values())) != len(names):
        raise UsageError(
            f"{model.path}: tensor names {sorted(names)} collide once Core ML sanitises them ({sorted(names.values())})"
        )
    program = Program()
    program.add_function("main", function)
    return program, {"layers": described, "names": names}


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
    ys, finals = [], [[] for _ in states]
    prefix = safe_name(layer.name)
    for k, params in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        start = {role: mb.gather(x=initial[role], indices=k, axis=0) if role in initial else zeros for role in states}
        args = {key: mb.const(val=value, name=f"{prefix}_{key}_{k}") for key, value in apple_weights(layer, k).items()}
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
    """``decompose.ElementaryOps`` over MIL's builder (float32 scalar constants)."""

    def __init__(self, mb) -> None:
        self.mb = mb

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


def _activation(mb, v, act: Activation):
    """An ONNX activation from elementary MIL ops (the shared recipes; stable for any input)."""
    return build_activation(_MilOps(mb), v, act, "MIL")


def _emit_decomposed(mb, layer: RecurrentLayer, x, lens, states: dict) -> tuple:
    """The layer from elementary MIL ops: per direction a ``while_loop`` carrying the cell's states
    (h; LSTM: h and c) and the output sequence; returns Y and each final state in the layout."""
    x_sm, initial = _time_major(mb, layer, x, states)
    zeros = _zeros_state(mb, layer, x_sm)
    seq = mb.slice_by_index(x=mb.shape(x=x_sm), begin=[0], end=[1])  # [1] int32
    ys_shape = mb.concat(values=[seq, mb.slice_by_index(x=mb.shape(x=zeros), begin=[0], end=[2])], axis=0)
    valid = None
    if lens is not None:
        steps = mb.range_1d(start=np.int32(0), end=mb.squeeze(x=seq, axes=[0]), step=np.int32(1))
        inside = mb.less(x=mb.expand_dims(x=steps, axes=[1]), y=mb.expand_dims(x=lens, axes=[0]))
        valid = mb.expand_dims(
            x=mb.cast(x=inside, dtype="fp32"), axes=[2]
        )  # [S,N,1], 1 where step t is inside the sequence (gather takes no bool)
    # min(max(v, -c), c): MIL's clip op refuses alpha == beta, and RNN allows clip = 0
    clip = (
        (lambda v: mb.minimum(x=mb.maximum(x=v, y=np.float32(-layer.clip)), y=np.float32(layer.clip)))
        if layer.clip is not None
        else (lambda v: v)
    )
    prefix = safe_name(layer.name)
    roles = [role for role, _ in state_roles(layer.cell)]
    ys, finals = [], [[] for _ in roles]
    for k, p in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        x_d = (
            (
                mb.reverse_sequence(x=x_sm, lengths=lens, seq_axis=0, batch_axis=1)
                if lens is not None
                else mb.reverse(x=x_sm, axes=[0])
            )
            if reverse
            else x_sm
        )
        w_t = mb.const(val=np.ascontiguousarray(p.W.T, np.float32), name=f"{prefix}_W{k}")
        wb = mb.const(val=np.asarray(p.Wb, np.float32), name=f"{prefix}_Wb{k}")
        weights = _StepWeights(
            r_t=mb.const(val=np.ascontiguousarray(p.R.T, np.float32), name=f"{prefix}_R{k}"),
            rb=mb.const(val=np.asarray(p.Rb, np.float32), name=f"{prefix}_Rb{k}"),
            peephole=None if p.P is None else mb.const(val=np.asarray(p.P, np.float32), name=f"{prefix}_P{k}"),
            activations=p.activations,
        )
        xw = mb.add(x=mb.matmul(x=x_d, y=w_t), y=wb)  # [S,N,G*H]: every step's input projection at once
        start = [mb.gather(x=initial[role], indices=k, axis=0) if role in initial else zeros for role in roles]
        step = _lstm_step if layer.cell is Cell.LSTM else _gru_rnn_step

        def cond(i, *carried):
            return mb.less(x=i, y=seq)

        def body(i, *carried, xw=xw, weights=weights, step=step):
            *state, out = carried
            gx = mb.squeeze(x=mb.gather(x=xw, indices=i, axis=0), axes=[0])  # [N,G*H]
            new = step(mb, layer, weights, gx, state, clip)
            y_t = new[0]
            if valid is not None:  # past its length a sequence keeps its states and outputs zeros
                ok = mb.cast(x=mb.squeeze(x=mb.gather(x=valid, indices=i, axis=0), axes=[0]), dtype="bool")  # [N,1]
                y_t = mb.select(cond=ok, a=new[0], b=np.float32(0.0))
                new = [mb.select(cond=ok, a=n, b=s) for n, s in zip(new, state)]
            out = mb.scatter(data=out, indices=i, updates=mb.expand_dims(x=y_t, axes=[0]), axis=0, mode="update")
            return (mb.add(x=i, y=np.int32(1)), *new, out)

        _, *last, y_d = mb.while_loop(
            _cond=cond,
            _body=body,
            loop_vars=(np.array([0], np.int32), *start, mb.fill(shape=ys_shape, value=0.0)),
            name=f"{prefix}_loop{k}",
        )
        if reverse:
            y_d = (
                mb.reverse_sequence(x=y_d, lengths=lens, seq_axis=0, batch_axis=1)
                if lens is not None
                else mb.reverse(x=y_d, axes=[0])
            )
        if lens is not None:  # the final states are 0 for an empty sequence (onnxruntime)
            empty = mb.expand_dims(x=mb.equal(x=lens, y=np.int32(0)), axes=[1])
            last = [mb.select(cond=empty, a=np.float32(0.0), b=value) for value in last]
        ys.append(y_d)
        for values, value in zip(finals, last):
            values.append(value)
    return _stack_directions(mb, layer, ys, *finals)


@dataclass(frozen=True)
class _StepWeights:
    """One direction's recurrent constants for a decomposed step (R transposed for the matmul)."""

    r_t: object  # [H, G*H]
    rb: object  # [G*H]
    peephole: object | None  # LSTM: [3H], i, o, f
    activations: tuple


def _gru_rnn_step(mb, layer: RecurrentLayer, weights: _StepWeights, gx, state: list, clip) -> list:
    """One GRU or RNN step on projected inputs gx [N,G*H] (Wb added): [h'] (equations: schemas.layer)."""
    (h_prev,) = state
    h = layer.hidden_size
    f = weights.activations[0]
    gh_all = mb.add(x=mb.matmul(x=h_prev, y=weights.r_t), y=weights.rb)  # [N,G*H]
    if layer.cell is Cell.RNN:
        return [_activation(mb, clip(mb.add(x=gx, y=gh_all)), f)]
    g = weights.activations[1]
    xz, xr, xh = mb.split(x=gx, num_splits=3, axis=1)
    hz, hr, hh = mb.split(x=gh_all, num_splits=3, axis=1)
    z = _activation(mb, clip(mb.add(x=xz, y=hz)), f)
    reset = _activation(mb, clip(mb.add(x=xr, y=hr)), f)
    if layer.linear_before_reset:
        cand_in = mb.mul(x=reset, y=hh)
    else:  # (r * h) R_h^T + Rb_h
        r_h = mb.slice_by_index(x=weights.r_t, begin=[0, 2 * h], end=[h, 3 * h])
        rb_h = mb.slice_by_index(x=weights.rb, begin=[2 * h], end=[3 * h])
        cand_in = mb.add(x=mb.matmul(x=mb.mul(x=reset, y=h_prev), y=r_h), y=rb_h)
    cand = _activation(mb, clip(mb.add(x=xh, y=cand_in)), g)
    return [mb.add(x=mb.mul(x=mb.sub(x=np.float32(1.0), y=z), y=cand), y=mb.mul(x=z, y=h_prev))]


def _lstm_step(mb, layer: RecurrentLayer, weights: _StepWeights, gx, state: list, clip) -> list:
    """One LSTM step on projected inputs gx [N,4H] (gates i, o, f, c; Wb added): [h', c']::

    i = f(gx_i + h Ri^T + Rb_i + Pi * c)     f_ = f(gx_f + h Rf^T + Rb_f + Pf * c)  (input_forget: 1 - i)
    c' = f_ * c + i * g(gx_c + h Rc^T + Rb_c)
    o = f(gx_o + h Ro^T + Rb_o + Po * c')    h' = o * h(c')        (clip on every pre-activation)
    """
    h_prev, c_prev = state
    f, g, h_act = weights.activations
    pre = mb.add(x=mb.add(x=gx, y=mb.matmul(x=h_prev, y=weights.r_t)), y=weights.rb)  # [N,4H]
    pre_i, pre_o, pre_f, pre_c = mb.split(x=pre, num_splits=4, axis=1)
    if weights.peephole is not None:
        p_i, p_o, p_f = mb.split(x=weights.peephole, num_splits=3, axis=0)
        pre_i = mb.add(x=pre_i, y=mb.mul(x=p_i, y=c_prev))
        pre_f = mb.add(x=pre_f, y=mb.mul(x=p_f, y=c_prev))
    i = _activation(mb, clip(pre_i), f)
    forget = mb.sub(x=np.float32(1.0), y=i) if layer.input_forget else _activation(mb, clip(pre_f), f)
    c_new = mb.add(x=mb.mul(x=forget, y=c_prev), y=mb.mul(x=i, y=_activation(mb, clip(pre_c), g)))
    if weights.peephole is not None:
        pre_o = mb.add(x=pre_o, y=mb.mul(x=p_o, y=c_new))
    o = _activation(mb, clip(pre_o), f)
    return [mb.mul(x=o, y=_activation(mb, c_new, h_act)), c_new]


# ----------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _PackageFiles:
    """The files of an ``.mlpackage`` that gatepack reads, found through its ``Manifest.json``.

    A package is ``Manifest.json`` plus ``Data/``; the manifest's ``itemInfoEntries`` map ids to
    ``{"path", "name", "author", ...}`` (paths relative to ``Data/``), and ``rootModelIdentifier`` names
    the model specification's entry. The weights directory is the entry named ``weights``; the MIL
    program's blob values name files in it by base name (``@model_path/weights/weight.bin``). Every one
    of these paths is checked to stay inside the package before anything is opened, and coremltools
    is handed the parsed specification, never the package path (its package reader rewrites a
    ``Manifest.json`` that is not in its own canonical form, even when it then fails).
    """

    manifest: Path
    model: Path
    weights_dir: Path | None


def _package_files(path: Path) -> _PackageFiles:
    manifest_file = path / "Manifest.json"
    if not os.path.lexists(manifest_file):
        raise InputError(f"{path}: not an ML Program package (no Manifest.json)")
    manifest = read_json(contained_file(path, "Manifest.json", f"{path}: Manifest.json"))
    at = f"{manifest_file}: "
    entries = manifest.get("itemInfoEntries") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        raise InputError(f"{at}itemInfoEntries is missing or not an object of item objects")
    root = manifest.get("rootModelIdentifier")
    if not isinstance(root, str) or root not in entries:
        raise InputError(f"{at}rootModelIdentifier {root!r} names no entry of itemInfoEntries")
    data = path / "Data"
    model = contained_file(data, entries[root].get("path"), f"{at}item {root!r} path")
    weights_dir = None
    for key, entry in entries.items():
        if entry.get("name") == "weights" and entry.get("author", "com.apple.CoreML") == "com.apple.CoreML":
            relative = entry.get("path")
            if not isinstance(relative, str) or Path(relative).is_absolute():
                raise InputError(f"{at}item {key!r} path {relative!r} is not a path inside the package")
            weights_dir = (data / relative).resolve()
            if not weights_dir.is_relative_to(data.resolve()) or not weights_dir.is_dir():
                raise InputError(f"{at}item {key!r} path {relative!r} is not a directory inside the package")
    return _PackageFiles(manifest_file, model, weights_dir)


def _blob_files(message, found: set[str]) -> set[str]:
    """The file names of every blob value in a MIL program specification (a walk over the protobuf)."""
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.name == "BlobFileValue":
            found.add(value.fileName)
            continue
        repeated = (
            descriptor.is_repeated
            if hasattr(descriptor, "is_repeated")
            else descriptor.label == descriptor.LABEL_REPEATED
        )
        values = value if repeated else [value]
        if descriptor.message_type.GetOptions().map_entry:
            values = value.values()
            if not values or not hasattr(next(iter(values)), "ListFields"):
                continue
        for item in values:
            _blob_files(item, found)
    return found


def _package_key(files: _PackageFiles) -> tuple:
    """The package's identity on disk: its files' paths, sizes and modification times."""
    listed = [files.manifest, files.model] + (
        sorted(f for f in files.weights_dir.iterdir()) if files.weights_dir else []
    )
    return tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in listed)


_LOADED: dict[tuple, tuple] = {}  # the last package read: verification reads one package once per layer


def _load_program(path: Path):
    """(main function, gatepack metadata or None) of the package at ``path``, without a Core ML
    runtime; the last package read is kept while its files are unchanged."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: not an ML Program package (a .mlpackage is a directory)")
    files = _package_files(path)
    key = _package_key(files)
    if key not in _LOADED:
        loaded = _read_program(path, files)
        _LOADED.clear()
        _LOADED[key] = loaded
    return _LOADED[key]


def _read_program(path: Path, files: _PackageFiles):
    _ct()
    from coremltools.converters.mil.frontend.milproto.load import load
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(read_bytes(files.model))
    except Exception as err:  # protobuf's DecodeError and friends
        raise InputError(
            f"{files.model}: not a readable Core ML model specification ({' '.join(str(err).split())[:160]})"
        ) from None
    if spec.WhichOneof("Type") != "mlProgram":
        raise InputError(f"{path}: a Core ML {spec.WhichOneof('Type')} model, not an ML Program")
    blobs = _blob_files(spec.mlProgram, set())
    if blobs and files.weights_dir is None:
        raise InputError(
            f"{files.manifest}: the program reads weight files {sorted(blobs)} but the manifest has no weights item"
        )
    for name in blobs:  # the loader opens weights_dir / base name: each must be a regular file inside the package
        contained_file(files.weights_dir, name.split("/")[-1], f"{files.model}: blob file {name!r}")
    try:
        with _quiet():
            program = load(
                spec, specification_version=spec.specificationVersion, file_weights_dir=str(files.weights_dir or "")
            )
    except Exception as err:  # blob reader and MIL errors for damaged packages
        raise InputError(f"{path}: coremltools cannot read the program ({' '.join(str(err).split())[:200]})") from None
    if "main" not in program.functions:
        raise InputError(f"{path}: the program has no 'main' function")
    text = dict(spec.description.metadata.userDefined).get(METADATA_KEY)
    meta = parse_json(text, f"{path}: metadata {METADATA_KEY!r}") if text else None
    function = program.functions["main"]
    return function, None if meta is None else _checked_metadata(path, meta, function)


PRECISIONS = ("fp32", "fp16")


def _checked_metadata(path: Path, meta: object, function) -> dict:
    """gatepack's metadata, every field typed and its interfaces checked against the program.

    ``names`` maps each source tensor name to the program's name for it, which is ``safe_name`` of
    it (gatepack's writer applies no other renaming): a mapping that renames otherwise, or swaps two
    tensors, is refused rather than feeding one tensor's data to another.
    """
    at = f"{path}: metadata {METADATA_KEY!r}"
    if not isinstance(meta, dict) or not isinstance(meta.get("layers", []), list):
        raise InputError(f"{at} is not an object with a 'layers' list")
    names = meta.get("names", {})
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise InputError(f"{at}: 'names' {_short(names)} is not an object of source name -> Core ML name")
    renamed = {k: v for k, v in names.items() if v != safe_name(k)}
    if renamed:
        original, given = next(iter(renamed.items()))
        raise InputError(
            f"{at}: 'names' maps {original!r} to {given!r}; Core ML's name for it is {safe_name(original)!r}"
        )
    precision = meta.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise InputError(f"{at}: 'precision' {_short(precision)} is not one of {list(PRECISIONS)}")
    fp16 = _mil_types().fp16
    computes = "fp16" if any(v.dtype == fp16 for op in _ops(function) for v in op.outputs) else "fp32"
    if precision != computes:  # the precision sets verification's tolerance: it must be the program's
        raise InputError(f"{at}: 'precision' is {precision!r} but the program computes in {computes}")
    _check_interfaces(path, [parse(path, entry) for entry in meta.get("layers", [])], names, function)
    return {**meta, "names": names, "precision": precision}


def _short(value: object) -> str:
    return " ".join(repr(value).split())[:80]


def _check_interfaces(path: Path, described: list, names: dict, function) -> None:
    """The described layers' tensors are exactly the program's inputs and outputs, each input with the
    rank, static sizes and type its role gives it (x [S,N,I] or layout 1 [N,S,I]; states [D,N,H] or
    [N,D,H]; sequence_lens [N] int32): a description that contradicts the program is refused."""
    types = _mil_types()

    inputs, outputs = {}, set()
    for info in described:
        itf, d = info.interface, info.direction.count
        rows = (itf.batch_size, itf.seq_length) if itf.layout else (itf.seq_length, itf.batch_size)
        states = (itf.batch_size, d) if itf.layout else (d, itf.batch_size)
        roles = {"x": ((*rows, info.input_size), types.fp32), "sequence_lens": ((itf.batch_size,), types.int32)}
        for role, _ in state_roles(info.cell):
            roles[role] = ((*states, info.hidden_size), types.fp32)
        for role, (shape, dtype) in roles.items():
            if getattr(itf, role) and role not in info.constant_roles:  # a held constant is a const op, no input
                inputs[names.get(getattr(itf, role), getattr(itf, role))] = (info.name, role, shape, dtype)
        outputs |= {names.get(t, t) for t in (getattr(itf, r) for r in OUTPUT_ROLES) if t}
    declared = set(function.inputs)
    produced = {v.name for v in function.outputs}
    if set(inputs) != declared or outputs != produced:
        raise InputError(
            f"{path}: its metadata describes inputs {sorted(inputs)} and outputs {sorted(outputs)}; the program has "
            f"inputs {sorted(declared)} and outputs {sorted(produced)}"
        )
    for name, (layer, role, shape, dtype) in inputs.items():
        var = function.inputs[name]
        got = [d if isinstance(d, int) else "?" for d in var.shape]
        expected = [d if isinstance(d, int) else "?" for d in shape]
        if got != expected or var.dtype != dtype:
            raise InputError(
                f"{path}: layer {layer!r}: {role} {name!r} is {types.builtin_to_string(var.dtype)} {got} in the "
                f"program, its metadata says {types.builtin_to_string(dtype)} {expected}"
            )


def _ops(block) -> list:
    """Every op of a block, including those of nested blocks (while_loop bodies)."""
    found = []
    for op in block.operations:
        found.append(op)
        for inner in op.blocks:
            found += _ops(inner)
    return found


def _value(var):
    return (
        None
        if var is None or var.val is None
        else (var.val if isinstance(var.val, (str, bool)) else np.asarray(var.val))
    )


def _op_weights(op, cell: Cell, path: Path, layer: str) -> tuple[dict, list[Finding]]:
    """A native gru/rnn op's constants back in ONNX order: W, R, Wb, Rb, lbr, activations, reverse."""
    at = where(path, layer)
    w, r = _value(op.inputs.get("weight_ih")), _value(op.inputs.get("weight_hh"))
    if w is None or r is None or w.ndim != 2 or r.ndim != 2:
        raise InputError(f"{at}{op.op_type} op {op.name!r}: weight_ih/weight_hh are not constant matrices")
    h = r.shape[1]
    gh = cell.gates * h
    if w.shape[0] != gh or r.shape != (gh, h):
        raise InputError(
            f"{at}{op.op_type} op {op.name!r}: weight_ih {list(w.shape)} / weight_hh {list(r.shape)} do not fit "
            f"hidden size {h} ({gh} rows expected)"
        )
    bias, input_bias = _value(op.inputs.get("bias")), _value(op.inputs.get("input_bias"))
    for label, b in (("bias", bias), ("input_bias", input_bias)):
        if b is not None and b.shape != (gh,):
            raise InputError(f"{at}{op.op_type} op {op.name!r}: {label} has shape {list(b.shape)}, expected [{gh}]")
    reset_after = bool(_value(op.inputs.get("reset_after")) or False)
    found = []
    if not reset_after:
        if input_bias is not None and input_bias.any():
            raise InputError(
                f"{at}gru op {op.name!r}: input_bias is set but reset_after is false (Core ML ignores it there)"
            )
        found.append(
            Finding(
                "bias", Status.FOLDED, "Core ML stores Wb + Rb summed (reset-before); read back as Wb = sum, Rb = 0"
            )
        )
    acts = (
        [_value(op.inputs.get("recurrent_activation")) or "sigmoid", _value(op.inputs.get("activation")) or "tanh"]
        if cell is Cell.GRU
        else [_value(op.inputs.get("activation")) or "tanh"]
    )
    return {
        **onnx_weights(cell, w, r, bias, input_bias, reset_after),
        "lbr": reset_after,
        "activations": tuple(activation_of(a, at) for a in acts),
        "reverse": (_value(op.inputs.get("direction")) or "forward") == "reverse",
        "has_bias": bias is not None or input_bias is not None,
    }, found


NATIVE_OPS = {"gru": Cell.GRU, "rnn": Cell.RNN, "lstm": Cell.LSTM}


def _lstm_op_weights(op, path: Path) -> tuple[list[DirectionParams], Direction, bool, list[Finding]]:
    """A native lstm op's constants in ONNX order, per direction (``*_back`` for a bidirectional op's
    backward one): W, R (gates i, f, o, z -> i, o, f, c), the summed bias as Wb (Rb = 0), the peephole
    (i, f, o -> i, o, f); the three activations shared by both directions. Also the direction, whether a
    bias is given, and the bias note. A clip is refused: MIL's clips the cell state, ONNX's the
    pre-activations."""
    at = where(path, op.name)
    clip = _value(op.inputs.get("clip"))
    if clip is not None:
        raise InputError(
            f"{at}lstm op {op.name!r}: clip {float(clip):g} clips the cell state after each update "
            "(coremltools' reference); an ONNX LSTM's clip bounds the gates' inputs, so no layer computes it"
        )
    direction = str(_value(op.inputs.get("direction")) or "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise InputError(f"{at}lstm op {op.name!r}: direction {direction!r} is not forward, reverse or bidirectional")
    acts = tuple(
        activation_of(str(_value(op.inputs.get(key)) or default), at)
        for key, default in (("recurrent_activation", "sigmoid"), ("cell_activation", "tanh"), ("activation", "tanh"))
    )
    params = []
    for suffix in ("", "_back") if direction == "bidirectional" else ("",):
        w, r = _value(op.inputs.get("weight_ih" + suffix)), _value(op.inputs.get("weight_hh" + suffix))
        if w is None or r is None or w.ndim != 2 or r.ndim != 2 or r.shape[0] != 4 * r.shape[1] or len(w) != len(r):
            shapes = [None if v is None else list(v.shape) for v in (w, r)]
            raise InputError(
                f"{at}lstm op {op.name!r}: weight_ih{suffix} / weight_hh{suffix} {shapes} are not constant "
                "[4H, I] / [4H, H] matrices"
            )
        h = r.shape[1]
        bias, peephole = _value(op.inputs.get("bias" + suffix)), _value(op.inputs.get("peephole" + suffix))
        for label, value, size in (("bias", bias, 4 * h), ("peephole", peephole, 3 * h)):
            if value is not None and value.shape != (size,):
                raise InputError(
                    f"{at}lstm op {op.name!r}: {label}{suffix} has shape {list(value.shape)}, expected [{size}]"
                )
        got = onnx_weights(Cell.LSTM, w, r, bias, None, False)
        params.append(
            DirectionParams(
                *(np.asarray(got[key], np.float32) for key in ("W", "R", "Wb", "Rb")),
                activations=acts,
                P=None if peephole is None else onnx_peephole(peephole),
            )
        )
    has_bias = any(_value(op.inputs.get(key)) is not None for key in ("bias", "bias_back"))
    folded = [Finding("bias", Status.FOLDED, "Core ML stores Wb + Rb summed; read back as Wb = sum, Rb = 0")]
    return params, Direction(direction), has_bias, folded if has_bias else []


# What reading a foreign op's direction does (status, detail).
READ_DIRECTIONS = {
    Direction.FORWARD: (Status.EXACT, "forward"),
    Direction.REVERSE: (
        Status.REPACKED,
        "reverse: Core ML returns a reverse op's sequence in processing order; read as ONNX's time-aligned Y",
    ),
    Direction.BIDIRECTIONAL: (
        Status.REPACKED,
        "bidirectional: one op with *_back weights, Y [S,N,2H] (both halves in input time) and states [N,2H] "
        "read as ONNX's [S,2,N,H] and [2,N,H]",
    ),
}


def _op_directions(
    op, cell: Cell, path: Path, layer: str
) -> tuple[list[DirectionParams], Direction, bool, bool, list[Finding]]:
    """A native gru, rnn or lstm op's directions in ONNX order, its direction, linear_before_reset,
    whether it has a bias, and the bias note."""
    if cell is Cell.LSTM:
        directions, direction, has_bias, found = _lstm_op_weights(op, path)
        return directions, direction, False, has_bias, found
    got, found = _op_weights(op, cell, path, layer)
    params = DirectionParams(
        *(np.asarray(got[key], np.float32) for key in ("W", "R", "Wb", "Rb")),
        activations=got["activations"][: cell.activation_count],
    )
    direction = Direction.REVERSE if got["reverse"] else Direction.FORWARD
    return [params], direction, got["lbr"], got["has_bias"], found


def _read_op(op, path: Path) -> tuple[RecurrentLayer, list[Finding]]:
    """Another producer's native gru, rnn or lstm op as a layer (states [N, D*H] read as [D,N,H])."""
    cell = NATIVE_OPS[op.op_type]
    directions, direction, lbr, has_bias, found = _op_directions(op, cell, path, op.name)
    if np.asarray(op.inputs["weight_ih"].val).dtype == np.float16:
        found.append(FP16_SOURCE)
    x_shape = op.inputs["x"].shape
    states = {role: op.inputs[role].name for role, _ in state_roles(cell)}
    finals = {role: out.name for (_, role), out in zip(state_roles(cell), op.outputs[1:])}
    itf = Interface(
        x=op.inputs["x"].name,
        y=op.outputs[0].name,
        layout=0,
        seq_length=x_shape[0] if isinstance(x_shape[0], int) else None,
        batch_size=x_shape[1] if isinstance(x_shape[1], int) else None,
        dtype="float32",
        **states,
        **finals,
    )
    found.append(Finding("direction", *READ_DIRECTIONS[direction]))
    try:
        layer = RecurrentLayer(
            op.name,
            cell,
            int(directions[0].W.shape[1]),
            int(directions[0].R.shape[1]),
            direction,
            tuple(directions),
            itf,
            lbr,
            None,
            has_bias,
            provenance=Provenance(FORMAT, path, op.name),
        )
    except SpecError as err:
        raise InputError(f"{path}: {err}") from None
    return layer, found


FP16_SOURCE = fp16_source(
    "dtype", "an fp16 package: weights stored and arithmetic done in fp16 (compared with it at fp16 tolerance)"
)


def read(path: str | Path, **_options) -> Model:
    """Read the recurrent layers of an ML Program: gatepack's (from its metadata, checked against the
    program) or any program's native gru/rnn ops."""
    path = Path(path)
    function, meta = _load_program(path)
    ops = _ops(function)
    if meta is not None:
        layers, notes = [], {}
        for entry in meta.get("layers", []):
            layer, found = _read_described(
                path, entry, {op.name: op for op in ops}, {v.name: v for op in ops for v in op.outputs}
            )
            layers.append(layer)
            notes[layer.name] = found
        if not layers:
            raise NoRecurrentLayerError(f"{path}: its gatepack metadata lists no layer")
        precision = meta.get("precision", "fp32")
        if precision == "fp16":
            for found in notes.values():
                found.append(FP16_SOURCE)
        return Model(
            path, FORMAT, layers, notes, meta={"gatepack": True, "names": meta.get("names", {}), "precision": precision}
        )
    layers, notes = [], {}
    for op in ops:
        if op.op_type in NATIVE_OPS:
            layer, found = _read_op(op, path)
            layers.append(layer)
            notes[layer.name] = found
    refused: list[tuple[str, str]] = []
    if not layers:
        layers, notes, refused = _lift_loops(path, function)
    if not layers:
        raise NoRecurrentLayerError(
            f"{path}: no gru, rnn or lstm op in the program"
            + (f", and its while_loop is not a GRU/RNN: {refused[0][1]}" if refused else ""),
        )
    # another producer's program: its inputs have the program's own shapes (an lstm op's states are
    # [N, D*H]), which run_numpy checks, not the layers' interface shapes
    meta = {**_other_ops(function, layers), "own_input_shapes": True}
    return Model(path, FORMAT, layers, notes, refused, meta)


def _other_ops(function, layers: list[RecurrentLayer]) -> dict:
    """The model meta naming the main function's operators that are not its layers (constants apart)."""
    lifted = {layer.name for layer in layers}
    other = [
        op.op_type
        for op in function.operations
        if op.op_type not in ("const", *NATIVE_OPS) and not (op.op_type == "while_loop" and op.name in lifted)
    ]
    return {"other_ops": sorted(set(other)), "other_op_count": len(other)} if other else {}


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
    from gatepack.converters.lifting import LiftRefused, Recurrence, WeightCandidate, lift

    layers, notes, refused = [], {}, []
    for op in function.operations:
        if op.op_type != "while_loop":
            continue
        try:
            handle, candidate, itf, activations = _loop_structure(op, path)
        except _NotALayer as err:
            refused.append((op.name, str(err)))
            continue
        fp16 = candidate.W.dtype == np.float16 or any(
            o.outputs[0].dtype == _fp16_type() for o in _ops(op.blocks[1]) if o.outputs
        )
        candidate = WeightCandidate(
            candidate.W.astype(np.float32),
            candidate.R.astype(np.float32),
            tuple((_float32(a), _float32(b), t) for a, b, t in candidate.biases),
            candidate.label,
        )
        rec = Recurrence(
            name=op.name,
            found=f"{path}: while_loop {op.name!r}",
            direction=Direction.REVERSE if handle.reverse else Direction.FORWARD,
            interface=itf,
            input_size=candidate.W.shape[1],
            hidden_size=candidate.R.shape[1],
            candidates=[candidate],
            activations=activations,
            run_original=lambda feed, h=handle, i=itf: _run_lifted(path, h, i, feed),
            tolerance="float16" if fp16 else None,
        )
        try:
            lifted = lift(rec)
        except LiftRefused as err:
            refused.append((op.name, str(err)))
            continue
        handle = replace(handle, fp16=fp16)
        layer = replace(lifted.layer, provenance=Provenance(FORMAT, path, op.name, "lifted", handle=handle))
        layers.append(layer)
        notes[layer.name] = [
            Finding(
                "lifted",
                Status.REPACKED,
                f"lifted from a while_loop of elementary ops (as coremltools writes nn.GRU): {lifted.description}; "
                f"proven against gatepack's MIL interpreter running the original ops on random inputs "
                f"({lifted.tried} reading(s) tried). Its outputs are canonical tensors {itf.y!r} and {itf.y_h!r}; in "
                f"the source, loop output {handle.buffer!r} holds the initial state and then Y "
                f"{'in processing order' if handle.reverse else 'in time order'}",
            )
        ] + ([FP16_SOURCE] if fp16 else [])
    return layers, notes, refused


class _NotALayer(Exception):
    pass


def _float32(array: np.ndarray | None) -> np.ndarray | None:
    return None if array is None else array.astype(np.float32)


def _fp16_type():
    return _mil_types().fp16


def _loop_structure(op, path: Path):
    """What a while_loop holds if it is one direction of a GRU or RNN: where it is (handle), its weights,
    interface and activations; _NotALayer (one line) when it is not such a loop."""
    body = op.blocks[1]
    body_ops = _ops(body)
    defined = {v.name for o in body_ops for v in o.outputs} | {v.name for v in body.inputs}
    gathers = [o for o in body_ops if o.op_type == "gather" and o.inputs["x"].name not in defined]
    if len(gathers) != 1:
        raise _NotALayer(f"while_loop {op.name!r} reads {len(gathers)} outer sequences step by step, not one")
    buffers = [v for v in op.outputs if len(v.shape) == 3]
    if len(buffers) != 1:
        raise _NotALayer(f"while_loop {op.name!r} carries {len(buffers)} state buffers (a GRU or RNN carries one)")
    initial = _initial_state(op, op.inputs["loop_vars"][op.outputs.index(buffers[0])])
    x_var, reverse, layout = _loop_x(gathers[0].inputs["x"], initial is not None)
    given = {x_var.name} | ({initial.name} if initial is not None else set())
    others = _outer_inputs(op, given)
    if others:
        raise _NotALayer(
            f"while_loop {op.name!r} reads {sorted(others)} besides its X {x_var.name!r}"
            + (f" and initial state {initial.name!r}" if initial is not None else "")
            + ", which a GRU/RNN layer does not take"
        )
    candidate = _loop_weights(op, body_ops, gathers[0])
    activations = frozenset(o.op_type for o in body_ops if o.op_type in ("sigmoid", "tanh", "relu"))
    shape = x_var.shape
    s, n = (shape[1], shape[0]) if layout else (shape[0], shape[1])
    itf = Interface(
        x=x_var.name,
        y=f"{op.name}:Y",
        y_h=f"{op.name}:Y_h",
        initial_h=initial.name if initial is not None else None,
        layout=layout,
        seq_length=s if isinstance(s, int) else None,
        batch_size=n if isinstance(n, int) else None,
        dtype="float32",
    )
    return _LoopHandle(x_var.name, op.name, buffers[0].name, reverse), candidate, itf, activations


def _initial_state(op, start):
    """The tensor a while_loop's [S+1,N,H] state buffer starts from at row 0, or None for zeros.

    coremltools writes the buffer's start as a zero constant (no initial state) or as
    ``concat([h0 [1,N,H], zeros [S,N,H]], axis=0)``, h0 being the program's input or a slice of it
    (one layer and direction of torch's [L*D,N,H] h0); in an fp16 program, in fp16 and cast to fp32."""
    while start.val is None and start.op is not None and start.op.op_type == "cast":
        start = start.op.inputs["x"]
    if start.val is not None:
        if np.any(np.asarray(start.val)[:1] != 0):
            raise _NotALayer(
                f"while_loop {op.name!r} starts from a constant non-zero state (a learned initial state), "
                "which a lifted layer does not carry; pass the state as an input (trace the module called with h0)"
            )
        return None
    producer = start.op
    if producer is not None and producer.op_type == "concat" and _value(producer.inputs["axis"]) in (0, -3):
        first = producer.inputs["values"][0]
        if len(first.shape) == 3 and first.shape[0] == 1 and first.val is None:
            return first
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
    bias when all are zeros)."""
    from gatepack.converters.lifting import WeightCandidate

    linears = [o for o in body_ops if o.op_type == "linear"]
    from_x = [o for o in linears if _reads(o.inputs["x"], gather)]
    from_h = [o for o in linears if o not in from_x]
    if not from_x or len(from_x) != len(from_h):
        raise _NotALayer(f"while_loop {op.name!r} has {len(from_x)} linear ops of X and {len(from_h)} of its state")
    parts = {}
    for key, group in (("W", from_x), ("R", from_h)):
        weights = [_value(o.inputs["weight"]) for o in group]
        biases = [_value(o.inputs["bias"]) if "bias" in o.inputs else None for o in group]
        if any(w is None for w in weights):
            raise _NotALayer(f"while_loop {op.name!r}: a linear op's weight is not a constant")
        parts[key] = np.concatenate(weights)
        parts[key + "b"] = np.concatenate(
            [b if b is not None else np.zeros(len(w), w.dtype) for b, w in zip(biases, weights)]
        )
    biases = (parts["Wb"], parts["Rb"], "biases of the same linear ops")
    if not (np.any(parts["Wb"]) or np.any(parts["Rb"])):  # coremltools' nn.GRU(bias=False): zero bias constants
        biases = (None, None, "no bias (the linear ops' biases are zeros)")
    return WeightCandidate(
        parts["W"], parts["R"], (biases,),
        f"W from linear ops {[o.name for o in from_x]}, R from {[o.name for o in from_h]}",
    )  # fmt: skip


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

    The program is run from X and (when the loop starts from one) the initial state [1,N,H] only, as
    the program holds it (a layer with an initial state is sequence-major: ``_loop_x``); the loop's
    buffer is the initial state followed by Y in processing order."""
    function, _ = _load_program(path)
    env = {handle.x: np.asarray(feed[itf.x])}
    if itf.initial_h is not None:
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


def _named(found: dict, name: str):
    """``found[name]``, or what coremltools' fp16 cast pass renamed it to."""
    for candidate in (name, f"{name}_cast_fp16", f"{name}_to_fp16"):
        if candidate in found:
            return found[candidate]
    return None


def _read_described(
    path: Path, entry: dict, ops_by_name: dict, vars_by_name: dict
) -> tuple[RecurrentLayer, list[Finding]]:
    """A layer gatepack wrote: semantics from the metadata, weights from the program's named constants."""
    info = parse(path, entry)
    prefix = safe_name(info.name)
    found: list[Finding] = []
    directions = []
    for k, acts in enumerate(info.activations):
        if info.strategy == "native":
            op = _named(ops_by_name, f"{prefix}_{info.cell.value}_{k}")
            if op is None:
                raise InputError(
                    f"{path}: layer {info.name!r}: the metadata says native but the program has no op "
                    f"{prefix}_{info.cell.value}_{k}"
                )
            (params,), _, lbr, _, folded = _op_directions(op, info.cell, path, info.name)
            found += folded if k == 0 else []
            if [a.name for a in params.activations] != [a.name for a in acts] or lbr != info.linear_before_reset:
                raise InputError(
                    f"{path}: layer {info.name!r}: its metadata contradicts op {op.name!r} (activations or reset_after)"
                )
            directions.append(replace(params, activations=acts))
        else:

            def const(label: str) -> np.ndarray:
                var = _named(vars_by_name, f"{prefix}_{label}{k}")
                if var is None or var.val is None:
                    raise InputError(
                        f"{path}: layer {info.name!r}: the program has no constant {prefix}_{label}{k} that its "
                        "metadata describes"
                    )
                return np.asarray(var.val, np.float32)  # fp16 packages: the fp16 values, widened exactly

            peephole = _named(vars_by_name, f"{prefix}_P{k}")
            directions.append(
                DirectionParams(
                    const("W").T,
                    const("R").T,
                    const("Wb"),
                    const("Rb"),
                    acts,
                    P=None if peephole is None else const("P"),
                )
            )
    constants = {}
    for role in info.constant_roles:
        var = _named(vars_by_name, f"{prefix}_{role}")
        if var is None or var.val is None:
            raise InputError(f"{path}: layer {info.name!r}: the program has no constant {prefix}_{role} (its {role})")
        value = np.asarray(var.val)
        constants[role] = constant_from_layout(value if role == "sequence_lens" else value.astype(np.float32), role, 0)
    provenance = Provenance(FORMAT, path, info.name, info.strategy)
    return build_layer(path, info, directions, provenance, constants), found


# ------------------------------------------------------------------------------- the MIL executor


_DTYPES = {
    "fp32": np.float32,
    "fp16": np.float16,
    "fp64": np.float64,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
}


def _slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    rank = x.ndim
    stride = [1] * rank if stride is None else list(stride)
    index: list = []
    for axis in range(rank):
        if squeeze_mask is not None and squeeze_mask[axis]:
            index.append(int(begin[axis]))  # MIL indexes a squeezed axis at begin (end is ignored)
            continue
        b = None if begin_mask is not None and begin_mask[axis] else int(begin[axis])
        e = None if end_mask is not None and end_mask[axis] else int(end[axis])
        index.append(slice(b, e, int(stride[axis])))
    return x[tuple(index)]


def _reverse_sequence(x, lengths, seq_axis=0, batch_axis=0, **_):
    out = np.array(x)
    moved = np.moveaxis(out, (int(batch_axis), int(seq_axis)), (0, 1))
    source = np.moveaxis(np.asarray(x), (int(batch_axis), int(seq_axis)), (0, 1))
    for b, n in enumerate(np.asarray(lengths).astype(np.int64)):
        moved[b, :n] = source[b, :n][::-1]
    return out


_SCATTER_MODES = {"update": lambda old, new: new, "add": np.add, "sub": np.subtract, "mul": np.multiply}


def _scatter(data, indices, updates, axis=0, mode="update", **_):
    if str(mode) not in _SCATTER_MODES:
        raise UsageError(f"scatter mode {mode!r} is not one gatepack's MIL executor runs")
    out = np.array(data)
    moved, upd = np.moveaxis(out, int(axis), 0), np.moveaxis(np.asarray(updates), int(axis), 0)
    for j, index in enumerate(np.asarray(indices).reshape(-1)):
        moved[int(index)] = _SCATTER_MODES[str(mode)](moved[int(index)], upd[j])
    return out


def _quiet_divide(x, y):
    """x / y as a runtime computes it: 0/0 is NaN, x/0 is inf, without a warning (a select after it
    may discard them: the Softplus recipe's log1p divides by zero in its unused branch)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(x, y)


def _linear(x, weight, bias=None, **_):
    """MIL linear: x @ weight^T + bias (weight [out, in])."""
    out = np.matmul(x, np.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias


def _recurrent(cell: Cell):
    """MIL's gru / rnn with Core ML's semantics (``converters.apple``): reset-before when reset_after
    is false, the output sequence in processing order."""

    def run(
        x,
        initial_h,
        weight_ih,
        weight_hh,
        bias=None,
        input_bias=None,
        direction="forward",
        output_sequence=False,
        recurrent_activation="sigmoid",
        activation="tanh",
        reset_after=False,
        **_,
    ):
        names = [recurrent_activation, activation] if cell is Cell.GRU else [activation]
        acts = tuple(activation_of(str(n), "MIL executor: ") for n in names)
        seq, y_h = recurrence(
            cell,
            x,
            initial_h,
            weight_ih,
            weight_hh,
            bias,
            input_bias,
            reverse=str(direction) == "reverse",
            activations=acts,
            reset_after=bool(reset_after),
        )
        seq, y_h = (
            seq.astype(x.dtype, copy=False),
            y_h.astype(x.dtype, copy=False),
        )  # fp16 programs: fp16 results (computed in fp32)
        return (seq if output_sequence else seq[-1:]), y_h

    return run


def _lstm(
    x,
    initial_h,
    initial_c,
    weight_ih,
    weight_hh,
    bias=None,
    peephole=None,
    weight_ih_back=None,
    weight_hh_back=None,
    bias_back=None,
    peephole_back=None,
    direction="forward",
    output_sequence=False,
    recurrent_activation="sigmoid",
    cell_activation="tanh",
    activation="tanh",
    clip=None,
    **_,
):
    """MIL's lstm with coremltools' semantics (``converters.apple.lstm_recurrence``): states [N, D*H]
    (forward half first); a reverse op's sequence in processing order, a bidirectional op's backward half
    in input time (coremltools' op tests compare both so against torch); without ``output_sequence`` the
    one row is the final hidden state."""
    if clip is not None:
        raise UsageError(
            f"lstm op with clip {float(clip):g}: it clips the cell state after each update, which gatepack's MIL "
            "executor does not run"
        )
    acts = tuple(activation_of(str(n), "MIL executor: ") for n in (recurrent_activation, cell_activation, activation))
    both = str(direction) == "bidirectional"
    runs = [(weight_ih, weight_hh, bias, peephole, str(direction) == "reverse")]
    if both:
        runs.append((weight_ih_back, weight_hh_back, bias_back, peephole_back, True))
    h = weight_hh.shape[1]
    ys, hs, cs = [], [], []
    for k, (w, r, b, p, reverse) in enumerate(runs):
        cols = slice(k * h, (k + 1) * h)
        seq, y_h, y_c = lstm_recurrence(
            x, initial_h[:, cols], initial_c[:, cols], w, r, b, reverse=reverse, activations=acts, peephole=p
        )
        ys.append(seq[::-1] if both and reverse else seq)
        hs.append(y_h)
        cs.append(y_c)
    y_h, y_c = np.concatenate(hs, -1), np.concatenate(cs, -1)
    y = np.concatenate(ys, -1) if output_sequence else y_h[None]
    return tuple(v.astype(x.dtype, copy=False) for v in (y, y_h, y_c))  # fp16 programs: fp16 results


_MIL_OPS = {
    "identity": lambda x, **_: x,
    "transpose": lambda x, perm, **_: np.transpose(x, perm),
    "shape": lambda x, **_: np.array(x.shape, np.int32),
    "slice_by_index": _slice_by_index,
    "concat": lambda values, axis, **_: np.concatenate(values, int(axis)),
    "fill": lambda shape, value=0.0, **_: np.full([int(v) for v in shape], value, np.asarray(value).dtype),
    "gather": lambda x, indices, axis=0, **_: np.take(x, np.asarray(indices).astype(np.int64), int(axis)),
    "expand_dims": lambda x, axes, **_: np.expand_dims(x, tuple(int(a) for a in axes)),
    "squeeze": lambda x, axes, **_: np.squeeze(x, tuple(int(a) for a in axes)),
    "reverse": lambda x, axes, **_: np.flip(x, tuple(int(a) for a in axes)),
    "reverse_sequence": _reverse_sequence,
    "matmul": lambda x, y, transpose_x=False, transpose_y=False, **_: np.matmul(
        np.swapaxes(x, -1, -2) if transpose_x else x, np.swapaxes(y, -1, -2) if transpose_y else y
    ),
    "add": lambda x, y, **_: np.add(x, y),
    "sub": lambda x, y, **_: np.subtract(x, y),
    "mul": lambda x, y, **_: np.multiply(x, y),
    "real_div": lambda x, y, **_: _quiet_divide(x, y),
    "maximum": lambda x, y, **_: np.maximum(x, y),
    "minimum": lambda x, y, **_: np.minimum(x, y),
    "sigmoid": lambda x, **_: Activation("Sigmoid")(x),  # 1 / (1 + e^-x), without overflow
    "tanh": lambda x, **_: np.tanh(x),
    "relu": lambda x, **_: np.maximum(x, 0).astype(x.dtype),
    "exp": lambda x, **_: np.exp(x),
    "log": lambda x, **_: np.log(x),
    "abs": lambda x, **_: np.abs(x),
    "greater": lambda x, y, **_: np.greater(x, y),
    "greater_equal": lambda x, y, **_: np.greater_equal(x, y),
    "less": lambda x, y, **_: np.less(x, y),
    "equal": lambda x, y, **_: np.equal(x, y),
    "select": lambda cond, a, b, **_: np.where(cond, a, b).astype(np.result_type(a, b)),
    "clip": lambda x, alpha, beta, **_: np.minimum(np.maximum(x, alpha), beta).astype(x.dtype),
    "cast": lambda x, dtype, **_: np.asarray(x).astype(_DTYPES[str(dtype)]),
    "range_1d": lambda start, end, step, **_: np.arange(int(start), int(end), int(step), dtype=np.int32),
    "split": lambda x, axis, num_splits=None, split_sizes=None, **_: tuple(
        np.split(x, np.cumsum(split_sizes)[:-1] if split_sizes is not None else int(num_splits), int(axis))
    ),
    "scatter": _scatter,
    "linear": _linear,
    "stack": lambda values, axis, **_: np.stack(values, int(axis)),
    "reshape": lambda x, shape, **_: np.reshape(x, [int(v) for v in shape]),
    "gru": _recurrent(Cell.GRU),
    "rnn": _recurrent(Cell.RNN),
    "lstm": _lstm,
}


class _Missing(Exception):
    """An op's input was not given (it belongs to another layer): skip the op."""


def _run_block(block, env: dict, path: Path) -> None:
    for op in block.operations:
        try:
            if op.op_type == "const":
                env[op.outputs[0].name] = _value(op.outputs[0])
                continue
            args = {key: _lookup(var, env) for key, var in op.inputs.items()}
        except _Missing:
            continue
        if op.op_type == "while_loop":
            try:
                results = _while_loop(op, args["loop_vars"], env, path)
            except _Missing:  # its body reads a value that was not given (another layer's): skip it
                continue
        else:
            fn = _MIL_OPS.get(op.op_type)
            if fn is None:
                raise UsageError(
                    f"{path}: op {op.name!r} ({op.op_type}) is not one gatepack's MIL executor runs",
                    hint="it runs the ops gatepack writes and native gru/rnn programs",
                )
            results = fn(**args)
        for var, value in zip(op.outputs, results if isinstance(results, tuple) else (results,)):
            env[var.name] = value


def _lookup(var, env: dict):
    if isinstance(var, (list, tuple)):
        return [_lookup(v, env) for v in var]
    if var.name in env:
        return env[var.name]
    if var.val is not None:
        return _value(var)
    raise _Missing(var.name)


def _while_loop(op, values: list, env: dict, path: Path) -> tuple:
    cond_block, body_block = op.blocks
    while True:
        scope = dict(env)
        scope.update({var.name: value for var, value in zip(cond_block.inputs, values)})
        _run_block(cond_block, scope, path)
        if not bool(np.asarray(scope[cond_block.outputs[0].name]).reshape(-1)[0]):
            return tuple(values)
        scope = dict(env)
        scope.update({var.name: value for var, value in zip(body_block.inputs, values)})
        _run_block(body_block, scope, path)
        values = [_lookup(var, scope) for var in body_block.outputs]


def execute(function, inputs: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """Run a MIL function on named inputs (Core ML's names); return every output that was computable."""
    types = _mil_types()

    env = {}
    for name, var in function.inputs.items():
        if name in inputs:
            env[var.name] = np.asarray(inputs[name]).astype(types.nptype_from_builtin(var.dtype))
    _run_block(function, env, path)
    return {var.name: env[var.name] for var in function.outputs if var.name in env}


# ----------------------------------------------------------------------------------------- running


def run_numpy(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the package's program on gatepack's MIL executor; inputs and outputs by the source's
    tensor names (or Core ML's sanitised ones)."""
    path = Path(path)
    function, meta = _load_program(path)
    names = (meta or {}).get("names", {})
    feed = {names.get(k, k): v for k, v in inputs.items()}
    missing = [n for n in function.inputs if n not in feed]
    if missing:
        raise InputError(
            f"{path}: missing input(s) {[_original(names, n) for n in missing]}",
            hint=f"the model takes {[_original(names, n) for n in function.inputs]}",
        )
    for name, var in function.inputs.items():  # the program's own declared shapes (symbolic dims: any size)
        got = np.shape(feed[name])
        if len(got) != len(var.shape) or any(isinstance(d, int) and d != g for d, g in zip(var.shape, got)):
            declared = [d if isinstance(d, int) else "?" for d in var.shape]
            raise InputError(f"{path}: input {_original(names, name)!r} has shape {list(got)}, expected {declared}")
    return {_original(names, k): v for k, v in execute(function, feed, path).items()}


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The program's inputs as (name, dtype, dims), by the source's names where gatepack sanitised them."""
    types = _mil_types()

    function, meta = _load_program(Path(path))
    names = (meta or {}).get("names", {})
    return [
        (
            _original(names, name),
            np.dtype(types.nptype_from_builtin(var.dtype)),
            [d if isinstance(d, int) else None for d in var.shape],
        )
        for name, var in function.inputs.items()
    ]


def _original(names: dict, sanitised: str) -> str:
    return next((k for k, v in names.items() if v == sanitised), sanitised)


def compute_dtype(layer: RecurrentLayer) -> str:
    """The precision a package read from disk computes ``layer`` in (fp16 packages: float16)."""
    found = layer.provenance
    if found is None or not found.of(FORMAT):
        return layer.interface.dtype
    function, meta = _load_program(found.artifact)
    if meta is not None:
        return "float16" if meta.get("precision") == "fp16" else "float32"
    if found.kind == "lifted":
        return "float16" if found.handle.fp16 else "float32"
    op = next(op for op in _ops(function) if op.name == found.node)
    return "float16" if np.asarray(op.inputs["weight_ih"].val).dtype == np.float16 else "float32"


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise RuntimeFailure(f"{path}: Core ML runs only on Apple platforms; use --engine numpy (gatepack's MIL executor)")


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of a saved package on gatepack's MIL executor (the program read from disk)."""
    if layer.provenance is None or not layer.provenance.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from a Core ML package")
    path, name, kind = layer.provenance.artifact, layer.provenance.node, layer.provenance.kind
    if kind == "lifted":
        return _run_lifted(path, layer.provenance.handle, layer.interface, feed)
    function, meta = _load_program(path)
    names = (meta or {}).get("names", {})
    itf = layer.interface
    if kind == "node":  # a foreign gru/rnn/lstm op: states [N, D*H], a reverse op's output in processing order
        op = next(op for op in _ops(function) if op.name == name)
        x = np.asarray(feed[itf.x], np.float32)
        n, d, h = x.shape[1], layer.num_directions, layer.hidden_size
        env = {itf.x: x}
        for role, _ in state_roles(layer.cell):
            state = np.asarray(feed.get(getattr(itf, role), np.zeros((d, n, h))), np.float32)
            env[getattr(itf, role)] = state.transpose(1, 0, 2).reshape(n, d * h)
        y, *ends = _MIL_OPS[op.op_type](**{key: _lookup(var, env) for key, var in op.inputs.items()})
        y = y.reshape(len(y), n, d, h).transpose(0, 2, 1, 3)  # -> [S,D,N,H]
        outputs = {itf.y: y[::-1] if layer.direction is Direction.REVERSE else y}
        for (_, role), end in zip(state_roles(layer.cell), ends):
            outputs[getattr(itf, role)] = end.reshape(n, d, h).transpose(1, 0, 2)
        return outputs
    wanted = {names.get(k, k): v for k, v in feed.items()}
    outputs = execute(function, wanted, path)
    return {_original(names, k): v for k, v in outputs.items()}


# ---------------------------------------------------------------------------------------- findings


# How the native op's gate blocks differ from ONNX's (finding text).
NATIVE_GATES = {Cell.GRU: "z,r,h -> r,o,z", Cell.LSTM: "i,o,f,c -> i,f,o,z"}


def check(
    layer: RecurrentLayer,
    *,
    strategy: str = "auto",
    minimum_deployment_target: str = DEFAULT_TARGET,
    compress_to_fp16: bool = False,
) -> list[Finding]:
    """Findings for writing ``layer`` as a Core ML ML Program with ``strategy``."""
    target = minimum_deployment_target
    chosen, blockers = choose_strategy(layer, strategy, target)
    op = f"MIL {layer.cell.value} ({target})"
    itf = layer.interface
    found = []
    warning = runtime_doubts(layer) if chosen == "native" else None
    found.append(
        cell_finding(
            strategy,
            chosen,
            blockers,
            native=f"the {op} op"
            + (f", gates permuted {NATIVE_GATES[layer.cell]}" if layer.cell in NATIVE_GATES else ""),
            refused=f"the {op} op cannot express it",
            decomposed="elementary MIL ops in a while_loop per direction, input projections in one matmul",
            alternative="use --strategy auto or decomposed (elementary MIL ops in a while_loop)",
            warning=warning,
        )
    )
    if layer.direction is Direction.BIDIRECTIONAL:
        found.append(
            Finding(
                "direction",
                Status.REPACKED,
                "bidirectional: a forward and a reverse "
                + ("op" if chosen == "native" else "loop")
                + ", stacked into Y [S,D,N,H]",
            )
        )
    elif layer.direction is Direction.REVERSE and chosen == "native":
        found.append(
            Finding(
                "direction",
                Status.REPACKED,
                "reverse: the op's output sequence (processing order) is reversed back to input time",
            )
        )
    else:
        found.append(Finding("direction", Status.EXACT, layer.direction.value))
    if chosen == "native":
        found.append(
            Finding(
                "weights",
                Status.REPACKED,
                "weight_ih / weight_hh"
                + (f" rows permuted {NATIVE_GATES[layer.cell]}" if layer.cell in NATIVE_GATES else " as ONNX's W / R"),
            )
        )
        if layer.cell is Cell.GRU and layer.linear_before_reset:
            found.append(Finding("bias", Status.REPACKED, "reset_after: bias = Rb, input_bias = Wb (permuted)"))
        else:
            summed = any(p.Rb.any() for p in layer.directions)
            found.append(
                Finding(
                    "bias",
                    Status.FOLDED if summed else Status.EXACT,
                    "bias = Wb + Rb" + ("; reads back as [Wb + Rb, 0]" if summed else " (Rb is zero: nothing is lost)"),
                )
            )
    else:
        found.append(
            Finding(
                "weights",
                Status.EXACT,
                "W, R (transposed for the matmul), Wb and Rb kept apart as constants, ONNX gate order",
            )
        )
    if layer.cell is Cell.GRU:
        found.append(
            Finding(
                "linear_before_reset",
                Status.EXACT,
                str(int(layer.linear_before_reset))
                + (" (reset_after)" if chosen == "native" and layer.linear_before_reset else ""),
            )
        )
    found.append(
        Finding(
            "activations",
            Status.EXACT,
            layer.activation_summary()
            + (" (from elementary ops, alpha/beta as constants)" if chosen == "decomposed" else ""),
        )
    )
    if layer.clip is not None:
        found.append(
            Finding(
                "clip",
                Status.DECOMPOSED if chosen == "decomposed" else Status.UNSUPPORTED,
                f"clip={layer.clip:g} (minimum/maximum)",
            )
        )
    if itf.sequence_lens:
        found.append(
            Finding(
                "sequence_lens",
                Status.DECOMPOSED if chosen == "decomposed" else Status.UNSUPPORTED,
                "sequence_lens input kept (masks; reverse from len-1 with reverse_sequence)",
            )
        )
    for role, _ in state_roles(layer.cell):
        found.append(
            Finding(
                role,
                Status.EXACT,
                f"{role} input kept"
                if getattr(itf, role)
                else "zeros built inside the program (the op requires an initial state)"
                if chosen == "native"
                else "zeros",
            )
        )
    if layer.has_peepholes and chosen == "native":
        found.append(Finding("peepholes", Status.REPACKED, "the op's peephole, permuted i, o, f -> i, f, o"))
    elif layer.has_peepholes:
        found.append(Finding("peepholes", Status.DECOMPOSED, "P (i, o, f) as a constant, added to the gates' inputs"))
    if layer.input_forget:
        found.append(Finding("input_forget", Status.DECOMPOSED, "forget gate computed as 1 - input gate"))
    found.append(
        Finding(
            "layout",
            Status.REPACKED if itf.layout else Status.EXACT,
            f"layout {itf.layout}"
            + (" interface kept; transposes inside the program" if itf.layout else " (sequence-major, as MIL)"),
        )
    )
    if compress_to_fp16 and _target_rank(target) < TARGETS.index(FP16_TARGET):
        found.append(
            Finding(
                "dtype",
                Status.UNSUPPORTED,
                f"fp16 packages need {FP16_TARGET} or later; the target is {target}",
                alternative=f"pass --minimum-deployment-target {FP16_TARGET}, or drop --compress-to-fp16",
            )
        )
    elif compress_to_fp16:
        found.append(
            Finding(
                "dtype",
                Status.LOSSY,
                "fp16 weights and fp16 arithmetic (coremltools' fp16 cast pass; the interface stays float32; "
                "results differ ~1e-3)",
                alternative="drop --compress-to-fp16 for an fp32 package, or pass --allow-lossy",
            )
        )
    elif layer.dtype == np.float64:
        found.append(
            Finding(
                "dtype",
                Status.LOSSY,
                "float64 weights and inputs become float32 (Core ML has no double precision)",
                alternative="pass --allow-lossy to accept float32",
            )
        )
    elif layer.dtype == np.float16:
        found.append(
            Finding(
                "dtype",
                Status.REPACKED,
                "float16 weights stored as float32 (exact) and computed in float32; the interface takes float32",
            )
        )
    else:
        found.append(
            Finding(
                "dtype",
                Status.EXACT,
                "float32 (written with compute_precision FLOAT32: coremltools' default would cast to fp16)",
            )
        )
    renamed = [n for n in (getattr(itf, r) for r in INPUT_ROLES + OUTPUT_ROLES) if n and safe_name(n) != n]
    if renamed:
        found.append(
            Finding(
                "names",
                Status.REPACKED,
                f"Core ML sanitises {', '.join(repr(n) for n in renamed)} to "
                f"{', '.join(repr(safe_name(n)) for n in renamed)}; the package's metadata keeps the originals, "
                "and gatepack's run takes either",
            )
        )
    found.append(
        Finding(
            "shapes",
            Status.EXACT,
            f"S={dim_text(itf.seq_length)}, N={dim_text(itf.batch_size)} (symbolic dimensions stay flexible)",
        )
    )
    found.append(Finding("deployment target", Status.EXACT, f"{target} (--minimum-deployment-target)"))
    return found


IMPLEMENTATION = FormatImplementation(
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    run_numpy=run_numpy,
    graph_inputs=graph_inputs,
    compute_dtype=compute_dtype,
)

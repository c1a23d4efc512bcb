"""Core ML: what the reader, writer and interpreter share (coremltools imported quietly, deployment
targets, name sanitising, the native-or-decomposed choice, access to a loaded program's ops)."""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import re
import warnings
from typing import TYPE_CHECKING, Sequence

import numpy as np

from gatepack.converters.capabilities import lacks
from gatepack.converters.errors import UsageError
from gatepack.converters.feature_findings import Form, form_of
from gatepack.converters.findings import fp16_source
from gatepack.converters.formats.coreml.registration import CAPABILITIES as COREML
from gatepack.converters.formats.coreml.registration import TARGETS
from gatepack.converters.quantization import ASKED as DEQUANTIZE_ASKED
from gatepack.schemas.layer import (
    RecurrentLayer,
)
from gatepack.schemas.quantized import RUN_TIME_SCHEMES, PalettizedWeights, QuantizedWeights

if TYPE_CHECKING:
    from gatepack.converters.model import Model

FORMAT = "coreml"
METADATA_KEY = "gatepack"
NEWEST_TARGET = TARGETS[-1]  # what the builders default to; a package written without a target takes the lowest
# that expresses it (lowest_target)


def _ct():
    from gatepack.converters.formats.coreml.registration import coremltools

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
    long-lived one, for nothing, since they are not the converter's), for whoever calls ``ct.convert``
    (gatepack's own export, ``export``, does not: the test harnesses that convert programs do). Objects
    made meanwhile are collected as usual, and everything is unfrozen afterwards. When the application has frozen
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


def native_blockers(layer: RecurrentLayer, target: str = NEWEST_TARGET) -> list[str]:
    """Why MIL's own gru/rnn/lstm op at ``target`` would not compute what ONNX specifies (empty: it would):
    ``capabilities.COREML``'s op for the cell, against the layer."""
    _target_rank(target)
    return list(lacks(layer, COREML.op(layer.cell), target).values())


def choose_strategy(layer: RecurrentLayer, strategy: str, target: str = NEWEST_TARGET) -> tuple[str, list[str]]:
    """The form ``layer`` is written in (``native`` or ``decomposed``: ``feature_findings.form_of``, as the
    findings say), and why the op is avoided (what it lacks, its doubts for the layer)."""
    form = form_of(layer, COREML, strategy, target)
    return form.chosen, [*form.lacking.values(), *form.doubted.values()]


class ChosenTarget(str):
    """A deployment target gatepack chose (none was given): the lowest that expresses what is written as well as
    the newest does. ``why``: what sets it, for the report."""

    why: str

    def __new__(cls, target: str, why: str) -> "ChosenTarget":
        chosen = super().__new__(cls, target)
        chosen.why = why
        return chosen


def lowest_target(
    layers: Sequence[RecurrentLayer],
    strategy: str = "auto",
    compress_to_fp16: bool = False,
    stateful: bool = False,
    quantized: bool = True,
) -> ChosenTarget:
    """The lowest deployment target at which every layer is written in the form it takes at the newest target,
    its op (if used) lacking nothing more there (``capabilities.COREML``), and which holds what the options need
    (fp16 packages: ``FP16_TARGET``; Core ML states: ``STATE_TARGET``) and, unless ``quantized`` is false (float
    weights asked for), the constexpr op of each layer's quantized weights (``constexpr_target``); with what
    sets it."""
    needs = {TARGETS[0]: "the oldest ML Program target; nothing written needs a later one"}
    for layer in layers:
        newest = _written_as(form_of(layer, COREML, strategy, TARGETS[-1]))
        target = next(t for t in TARGETS if _written_as(form_of(layer, COREML, strategy, t)) == newest)
        needs.setdefault(target, f"layer {layer.name!r} needs it: the {_needed_feature(layer)}")
        records = [r for p in layer.directions for r in (p.Wq, p.Rq) if r is not None]
        if quantized and records and not compress_to_fp16:
            op_target = constexpr_target(records)
            needs.setdefault(op_target, f"layer {layer.name!r}'s quantized weights need {constexpr_op(op_target)}")
        tables = [r for p in layer.directions for r in (p.Wlut, p.Rlut) if r is not None]
        if quantized and tables and not compress_to_fp16:
            needs.setdefault(lut_target(tables), f"layer {layer.name!r}'s lookup tables need {LUT}")
    if compress_to_fp16:
        needs.setdefault(FP16_TARGET, "fp16 packages (--compress-to-fp16) need it")
    if stateful:
        needs.setdefault(STATE_TARGET, "Core ML states (--stateful) need it")
    target = max(needs, key=TARGETS.index)
    return ChosenTarget(target, needs[target])


def settle_options(model: "Model", options: dict) -> dict:
    """``options`` with the deployment target chosen when none is given: ``lowest_target`` for the model's
    layers and options, so that each layer's findings and the package name one target."""
    if options.get("minimum_deployment_target") is not None:
        return options
    chosen = lowest_target(
        model.layers,
        options.get("strategy", "auto"),
        bool(options.get("compress_to_fp16")),
        bool(options.get("stateful")),
        quantized=not model.meta.get(DEQUANTIZE_ASKED),
    )
    return {**options, "minimum_deployment_target": chosen}


# ------------------------------------------------------------------------- quantized weights (constexpr ops)

AFFINE, BLOCKWISE = "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"
AFFINE_TARGET, BLOCKWISE_TARGET = "iOS16", "iOS18"  # the first targets whose opsets hold each op (§5c)


def unholdable(records: Sequence[QuantizedWeights], target: str, compress_to_fp16: bool = False) -> str | None:
    """Why ``records`` cannot be written as constexpr ops at ``target`` (None: they can)."""
    if compress_to_fp16:
        return "an fp16 package (--compress-to-fp16) computes the weights in fp16, not the integers' float32 view"
    dynamic = next((r.dynamic_activations for r in records if r.dynamic_activations), "")
    if dynamic:
        return f"the source has {RUN_TIME_SCHEMES[dynamic]}, which no Core ML op computes"
    if any(r.arithmetic != "float32" for r in records):
        return (
            "the weights are rounded to float16 after the product (float16 arithmetic), which no float32 program does"
        )
    if any(r.values.dtype not in (np.int8, np.uint8) for r in records):
        return f"{sorted({str(r.values.dtype) for r in records})} integers: Core ML's constexpr ops take 4 or 8 bits"
    rank = _target_rank(target)
    if rank < TARGETS.index(AFFINE_TARGET):
        return f"constexpr ops need {AFFINE_TARGET} or later (the target is {target})"
    if rank < TARGETS.index(BLOCKWISE_TARGET) and any(r.bits != 8 or r.axis == 1 for r in records):
        return f"{BLOCKWISE} (4-bit or per-block weights) needs {BLOCKWISE_TARGET} (the target is {target})"
    return None


LUT = "constexpr_lut_to_dense"
LUT_TARGET, GROUPED_LUT_TARGET = "iOS16", "iOS18"  # one palette a tensor (1, 2, 4, 6, 8 bits); a palette per group


def lut_target(records: Sequence[PalettizedWeights]) -> str:
    """The lowest target whose ``constexpr_lut_to_dense`` writes ``records``: iOS16's holds one palette a tensor of
    1, 2, 4, 6 or 8 bits, iOS18's a palette per group of rows and columns and 3-bit indices."""
    grouped = any(r.grouped().shape[:2] != (1, 1) or r.bits == 3 for r in records)
    return GROUPED_LUT_TARGET if grouped else LUT_TARGET


def lut_unholdable(records: Sequence[PalettizedWeights], target: str, compress_to_fp16: bool = False) -> str | None:
    """Why the lookup tables ``records`` cannot be written as ``constexpr_lut_to_dense`` at ``target`` (None: they
    can)."""
    if compress_to_fp16 and any(r.palette.dtype != np.float16 for r in records):
        return "an fp16 package (--compress-to-fp16) rounds the float32 palettes to fp16"
    needed = lut_target(records)
    if _target_rank(target) < TARGETS.index(needed):
        what = "a palette per group or 3-bit indices" if needed != LUT_TARGET else "one palette a tensor"
        return f"{LUT} with {what} needs {needed} (the target is {target})"
    return None


def constexpr_target(records: Sequence[QuantizedWeights]) -> str:
    """The lowest target whose constexpr op writes ``records``."""
    return next((t for t in (AFFINE_TARGET, BLOCKWISE_TARGET) if unholdable(records, t) is None), BLOCKWISE_TARGET)


def constexpr_op(target: str) -> str:
    """The constexpr op written at ``target``."""
    return BLOCKWISE if _target_rank(target) >= TARGETS.index(BLOCKWISE_TARGET) else AFFINE


def _written_as(form: Form) -> tuple:
    """What decides the findings at a target: the form chosen and, for the op, what it lacks there."""
    return (form.chosen, tuple(form.lacking) if form.native else ())


def _needed_feature(layer: RecurrentLayer) -> str:
    op = COREML.op(layer.cell)
    return f"{op.name} op's {op.reset_after} (linear_before_reset = 1)" if op.reset_after else f"{op.name} op"


# ----------------------------------------------------------------------------------------- writing


def safe_name(name: str) -> str:
    """A name Core ML accepts: letters, digits and underscores, not starting with a digit (the rule
    of coremltools' own sanitiser, applied by gatepack so the mapping is known and stored)."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    text = text if re.match(r"[A-Za-z_]", text) else "_" + text
    return text + "_workaround" if text in _RESERVED_NAMES else text


def check_sanitised_names(label: object, names: dict[str, str]) -> None:
    """Refuse source tensor names that ``safe_name`` maps to one Core ML name (``names``: source -> Core ML)."""
    if len(set(names.values())) != len(names):
        raise UsageError(
            f"{label}: tensor names {sorted(names)} collide once Core ML sanitises them ({sorted(names.values())})"
        )


# the names coremltools' sanitiser renames (MIL's type and keyword names): it appends "_workaround"
_RESERVED_NAMES = frozenset(
    "any bool program func tensor list dict tuple true false string bf16 fp16 fp32 fp64 int8 int16 int32 int64 "
    "uint8 uint16 uint32 uint64 state".split()
)


FP16_PASSES = [
    "common::add_fp16_cast",
    "common::const_elimination",
    "common::cast_optimization",
    "common::dead_code_elimination",
]
FP16_TARGET = COREML.since["fp16"]  # the gru/rnn ops take fp16 from iOS17 (docs/conventions.md §5)
STATE_TARGET = COREML.since["states"]  # Core ML states (StateType, read_state, coreml_update_state), fp16 only


def written_straight(layer: RecurrentLayer) -> bool:
    """True when the layer's decomposition is one step written straight-line: its sequence length is fixed at one
    (a streaming model's frame), so there is no loop to write (a loop keeps a model off the Neural Engine)."""
    return layer.interface.seq_length == 1


# ------------------------------------------------------------------------------ programs


def _ops(block) -> list:
    """Every op of a block, including those of nested blocks (while_loop bodies)."""
    found = []
    for op in block.operations:
        found.append(op)
        for inner in op.blocks:
            found += _ops(inner)
    return found


def state_inputs(function) -> set[str]:
    """The function's inputs that are Core ML states: those its ``read_state`` ops read (coremltools' loader of
    a saved program gives a state input a plain tensor type, so the type cannot tell)."""
    return {op.inputs["input"].name for op in _ops(function) if op.op_type == "read_state"}


def _value(var):
    return (
        None
        if var is None or var.val is None
        else (var.val if isinstance(var.val, (str, bool)) else np.asarray(var.val))
    )


def _named(found: dict, name: str):
    """``found[name]``, or what coremltools' fp16 cast pass renamed it to."""
    for candidate in (name, f"{name}_cast_fp16", f"{name}_to_fp16"):
        if candidate in found:
            return found[candidate]
    return None


FP16_SOURCE = fp16_source(
    "dtype", "an fp16 package: weights stored and arithmetic done in fp16 (compared with it at fp16 tolerance)"
)

"""Core ML's registration record (plain data, read at start-up; docs/design.md, "Adding a format"): names, how a
path is recognised, the write options (deployment targets among them), what its MIL ops take (``apple_op``, which
BNNSGraph.Builder's calls share: BNNSGraph executes MIL ops), and coremltools imported quietly."""

from __future__ import annotations

from types import ModuleType

from gatepack.converters.capabilities import (
    BUILT_IN_OPS,
    EXACT_IN_EVERY_FORM,
    SIGMOID_TANH_RELU,
    Bias,
    Capabilities,
    Carried,
    Clip,
    Doubt,
    Lengths,
    Op,
    Reported,
    frozen,
    per_cell,
)
from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.fileio import has_markers
from gatepack.converters.findings import Status
from gatepack.converters.registration import (
    COMPRESS_TO_FP16,
    STATEFUL,
    STRATEGY,
    FormatInfo,
    WeightForm,
    WriteOption,
    one_of,
)
from gatepack.schemas.cells import Cell
from gatepack.schemas.schemes import FLOAT_ACTIVATIONS

NAME = "coreml"

TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18")  # deployment targets, oldest first
MINIMUM_DEPLOYMENT_TARGET = WriteOption(
    "minimum_deployment_target",
    f"one of {', '.join(TARGETS)}",
    one_of(*TARGETS),
    "--minimum-deployment-target",
    "oldest OS the package must run on (default: the lowest that expresses the model exactly, which the report "
    "names; fp16 packages need iOS17, states and the native reset_after iOS18).",
    TARGETS,
)

# ------------------------------------------------------------------------------------------ capabilities

APPLE_DTYPES = frozen(
    {
        "float32": Carried(Status.EXACT, "float32"),
        "float16": Carried(
            Status.REPACKED,
            "float16 weights stored as float32 (exact) and computed in float32; the interface takes float32",
        ),
        "float64": Carried(
            Status.LOSSY,
            "float64 weights and inputs become float32 (no double precision)",
            alternative="pass --allow-lossy to accept float32",
        ),
    }
)
_MIL_DTYPES = frozen(
    {
        **APPLE_DTYPES,
        "float32": Carried(
            Status.EXACT, "float32 (written with compute_precision FLOAT32: coremltools' default would cast to fp16)"
        ),
    }
)
# Known doubts about the ops' runtimes (a warning whenever the op is used): keyed by cell, or by a feature
_MIL_DOUBTS = {
    "gru": Doubt(
        "Core ML's own tests run the gru op with batch 1 only (later batches came out as zeros, rdar 59644603)",
        beyond_batch_one=True,
    ),
    "reset_after": Doubt("coremltools marks its iOS18 reset_after parity test expected-to-fail (rdar 128479517)"),
}


# The Apple family's gate blocks, by the canonical gate each holds (BNNSGraph executes MIL's ops: one order):
# GRU reset, candidate, update; LSTM input, forget, output, candidate; and the LSTM peepholes' order
GATES = {Cell.GRU: ("r", "h", "z"), Cell.RNN: ("i",), Cell.LSTM: ("i", "f", "o", "c")}
PEEPHOLES = ("i", "f", "o")
# the MIL ops' own letters for the candidates (BNNS: SPELLED in its record)
SPELLED = {Cell.GRU: {"h": "o"}, Cell.LSTM: {"c": "z"}}


def apple_op(cell: Cell, family: str, spelled: dict | None = None, doubts: dict[str, Doubt] | None = None) -> Op:
    """Core ML's MIL op or BNNSGraph.Builder's call for ``cell`` (one family: BNNSGraph executes MIL ops): gates
    r, o, z (BNNS calls o "n"), LSTM i, f, o and the candidate (z in MIL, g in BNNS), parameterless sigmoid, tanh
    or relu in each slot, no sequence lengths nor input/forget coupling, one op per direction. ``spelled`` and
    ``doubts``: the family member's letters for the gates (``GATES``) and known runtime doubts (default: MIL's)."""
    mil = family == "MIL"
    lstm = cell is Cell.LSTM
    return Op(
        f"{family} {cell.value}",
        GATES[cell],
        spelled=frozen((SPELLED if spelled is None else spelled).get(cell, {})),
        activations=(SIGMOID_TANH_RELU,) * cell.activation_count,
        clip=Clip.CELL_STATE if mil and lstm else Clip.ABSENT,
        sequence_lens=Lengths.ABSENT,
        peepholes=PEEPHOLES if mil else None,
        input_forget=False,
        bias=Bias.SUMMED,
        bias_reset_after=Bias.BY_ROLE,
        reset_after="reset_after" if mil else "applyResetGateAfterMatMul",
        reset_after_since="iOS18" if mil else None,
        versions=TARGETS if mil else (),
        initial_state_required=True,
        one_op_per_direction=True,
        reverse_in_processing_order=True,
        tensors="weight_ih / weight_hh" if mil else "inputHiddenWeight / hiddenHiddenWeight",
        bias_tensor="bias",
        input_bias_tensor="input_bias" if mil else "inputBias",
        state_tensors=() if mil else ("initialHiddenStates per direction", "initialCellStates per direction"),
        described=""
        if mil
        else "the generated Swift cannot be compiled or run here: BNNSGraph.Builder needs iOS / macOS 26",
        dtypes=_MIL_DTYPES if mil else APPLE_DTYPES,
        notes=frozen({"clip": "coremltools' reference, docs/conventions.md §8"} if mil and lstm else {}),
        warnings=frozen(_MIL_DOUBTS if doubts is None else doubts),
        remarks=frozen(
            {
                "linear_before_reset": "false is reset before the matmul, whatever Apple's page prints "
                "(docs/conventions.md §5)"
            }
        ),
    )


CAPABILITIES = Capabilities(
    NAME,
    per_cell(apple_op, "MIL", cells=BUILT_IN_OPS),
    elementary="elementary MIL ops in a while_loop per direction, input projections in one matmul",
    elementary_weights="W, R (transposed for the matmul), Wb and Rb kept apart as constants, ONNX gate order",
    elementary_bias=None,
    elementary_per_direction=True,
    elementary_zero_states=True,
    reported=frozen(
        {
            "peepholes": Reported(elementary=Status.DECOMPOSED),
            "input_forget": Reported(forced=Status.DECOMPOSED),
            "activations": Reported(forced=Status.EXACT, replaced=Status.EXACT),
            "linear_before_reset": EXACT_IN_EVERY_FORM,
        }
    ),
    container="the program",
    transposes="transposes inside the program",
    dynamic_shapes="symbolic dimensions stay flexible",
    since=frozen({"fp16": "iOS17", "states": "iOS18"}),
    dtypes=_MIL_DTYPES,
    alternatives=frozen({"cell": "use --strategy auto or decomposed (elementary MIL ops in a while_loop)"}),
)

INFO = FormatInfo(
    NAME,
    "Core ML ML Program",
    "NAME.mlpackage",
    "none here (NumPy executor of MIL semantics)",
    rank=40,
    runs_here=False,
    constant_form="a const op",
    suffixes=(".mlpackage",),
    markers=("Manifest.json",),
    write_options=(STRATEGY, MINIMUM_DEPLOYMENT_TARGET, COMPRESS_TO_FP16, STATEFUL),
    capabilities=CAPABILITIES,
    keeps_whole_from=("onnx",),  # gatepack's translation of the ONNX operators to MIL
    is_directory=True,
    recognise=has_markers("Manifest.json"),
    states_held_as="Core ML states (iOS18)",
    held_state_dtype="float16",
    extra="coreml",
    framework="coremltools",
    holds_quantized=(FLOAT_ACTIVATIONS,),  # constexpr ops
    quantizes_weights=WeightForm(),
    model_weights="constexpr",
    holds_lookup_tables=True,  # constexpr_lut_to_dense
)

MISSING = "coremltools is not installed: the coreml format needs the coreml extra"


def coremltools() -> ModuleType:
    """coremltools, imported without the messages it logs on Linux about its missing Core ML runtime
    ("Failed to load _MLModelProxy ..."): every import of one of its modules goes through here first."""
    import sys

    if sys.modules.get("coremltools") is not None:  # imported already: nothing to quieten
        return sys.modules["coremltools"]
    import contextlib
    import io
    import logging

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            logging.disable(logging.WARNING)
            try:
                import coremltools as ct
            finally:
                logging.disable(logging.NOTSET)
    except ImportError:
        raise RuntimeFailure(
            MISSING, hint="pip install 'gatepack[coreml]' (coremltools has wheels for Linux and macOS)"
        ) from None
    return ct

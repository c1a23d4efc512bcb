"""What each written format's recurrent ops take, as data (docs/design.md, "Capabilities as data").

One ``Capabilities`` record per written format (``RECORDS``; ONNX written for onnxruntime's DirectML
provider is a record of its own, ``ONNX_FOR_DIRECTML``): per cell the format's own op (``Op``) — its
name, gate order, the activations it computes exactly per slot, clip, sequence lengths, peepholes,
input/forget coupling, how it stores the biases, whether it needs an initial state, the layouts it
takes, how each source dtype is carried — and what happens to a feature the op lacks: the format's
elementary form computes it (``elementary``), or the feature is refused (``elementary`` None).

Everything derived from the records lives here too, so no fact is restated: ``lacks`` (what an op
cannot express in a layer, by feature: the formats' ``native_blockers``), ``alternative`` (the
formats that express a feature a format refuses), ``folds_bias`` (whether a summed bias loses the
split), and the table the README and ``gatepack formats`` print (``table``).
``converters.feature_findings`` turns a record and a layer into the findings every format words the
same way.

Kept free of numpy and the formats' frameworks: the CLI's ``formats`` command reads it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from gatepack.converters.findings import Status
from gatepack.converters.registry import CORE_ML_TARGETS
from gatepack.schemas.cells import Cell

if TYPE_CHECKING:
    from gatepack.schemas.layer import RecurrentLayer


class Bias(str, enum.Enum):
    """How an op stores ONNX's two biases (Wb, Rb: [G*H] each per direction)."""

    SPLIT = "[Wb, Rb] as ONNX"
    SUMMED = "Wb + Rb"  # exact, but the split reads back as [Wb + Rb, 0] unless Rb is zero (folded)
    SUMMED_KEEP_RBH = "[Wbz+Rbz, Wbr+Rbr, Wbh, Rbh]"  # GRU with linear_before_reset: Rb_h apart, the rest summed
    BY_ROLE = "bias = Rb, input bias = Wb"  # Apple's reset_after: each bias its own tensor


class Clip(str, enum.Enum):
    EXACT = "as ONNX"
    NOT_ZERO = "as ONNX, but clip 0 reads as no clip"
    ABSENT = "none"
    CELL_STATE = "bounds the cell state, not the gates' inputs"


class Lengths(str, enum.Enum):
    EXACT = "as ONNX"
    STATIC_SHAPES = "honoured with static shapes only"
    ABSENT = "none"


SIGMOID_TANH_RELU = frozenset({"Sigmoid", "Tanh", "Relu"})
# ONNX's recurrent activations (schemas.activations.KINDS, named here without importing numpy)
ONNX_ACTIVATIONS = SIGMOID_TANH_RELU | {
    "Affine",
    "LeakyRelu",
    "ThresholdedRelu",
    "ScaledTanh",
    "HardSigmoid",
    "Elu",
    "Softsign",
    "Softplus",
}
ONNX_GATES = {cell: cell.gate_names for cell in Cell}
ONNX_PEEPHOLES = ("i", "o", "f")


@dataclass(frozen=True)
class Carried:
    """How a format carries a value it has no choice about (a source dtype): status and wording."""

    status: Status
    detail: str
    alternative: str | None = None
    warning: str | None = None


@dataclass(frozen=True)
class Doubt:
    """A known doubt about a runtime's op (an ``Op.warnings`` entry): ``auto`` writes the format's elementary form
    instead wherever the doubt concerns the layer, ``--strategy native`` keeps the op and the report warns of it.
    ``beyond_batch_one``: it concerns batches past the first only (a layer whose batch is fixed at 1 is clear)."""

    text: str
    beyond_batch_one: bool = False


@dataclass(frozen=True)
class Op:
    """A format's own recurrent op for one cell, and what it takes of an ONNX layer."""

    name: str
    gates: tuple[str, ...]  # its gate blocks in its order, in its own letters (ONNX's order: ONNX_GATES)
    described: str = ""  # more about it, for the cell finding
    activations: tuple[frozenset[str], ...] | None = None  # per slot, the ONNX activations it computes exactly
    one_activation_list: bool = False  # both directions take the same activations
    clip: Clip = Clip.EXACT
    sequence_lens: Lengths = Lengths.EXACT
    peepholes: tuple[str, ...] | None = ONNX_PEEPHOLES  # LSTM: its peephole order (None: no peepholes)
    input_forget: bool = True  # LSTM: input/forget coupling
    bias: Bias = Bias.SPLIT
    bias_reset_after: Bias = Bias.SPLIT  # GRU with linear_before_reset = 1
    reset_after: str | None = None  # the field that says linear_before_reset = 1, as the op spells it
    reset_after_since: str | None = None  # the first target version whose op takes linear_before_reset = 1
    initial_state_required: bool = False
    one_op_per_direction: bool = False  # a bidirectional layer is two ops, stacked
    reverse_in_processing_order: bool = False  # a reverse op's output runs from the last step
    layouts: tuple[int, ...] = (0,)  # the interface layouts its tensors have as they are
    layout_note: str = ""
    tensors: str | None = None  # its weight tensors (None: the ONNX node's own W and R)
    bias_tensor: str = "B"
    input_bias_tensor: str = ""  # Bias.BY_ROLE: the tensor that holds Wb
    state_tensors: tuple[str, ...] = ()  # its initial-state tensors, per state (h, c)
    dtypes: Mapping[str, Carried] = field(default_factory=dict)  # per source dtype
    notes: Mapping[str, str] = field(default_factory=dict)  # per feature: why it lacks it, beyond the fact
    warnings: Mapping[str, "Doubt"] = field(default_factory=dict)  # a runtime doubt, per cell, feature or activation
    remarks: Mapping[str, str] = field(default_factory=dict)  # per feature: how the op is told it, worth saying

    def permutes_gates(self, cell: Cell) -> bool:
        return self.gates != ONNX_GATES[cell]

    def permutation(self, cell: Cell) -> str:
        """``z,r,h -> r,o,z``: ONNX's gate order and this op's."""
        return f"{','.join(ONNX_GATES[cell])} -> {','.join(self.gates)}"


# The features whose status depends on whether the op takes them and on the form the layer is written in
VALUE_FEATURES = ("activations", "clip", "sequence_lens", "peepholes", "input_forget")


@dataclass(frozen=True)
class Reported:
    """The status a format's findings give a feature present in a layer, in each case where the op does not
    simply take it (the op takes it and is used: exact, or repacked where it permutes it)."""

    forced: Status = Status.UNSUPPORTED  # the op used (--strategy native) though it lacks the feature
    elementary: Status = Status.EXACT  # elementary ops compute it, though the op would take it
    replaced: Status = Status.DECOMPOSED  # elementary ops compute it in place of the op, which lacks it


@dataclass(frozen=True)
class Capabilities:
    """A written format's recurrent ops and what happens to what they lack."""

    format: str
    ops: Mapping[Cell, Op]
    elementary: str | None = None  # the form elementary ops take (None: what the op lacks is unsupported)
    elementary_weights: str | None = "W, R in ONNX gate order, unchanged"  # None: the ONNX node's own, no finding
    elementary_bias: str | None = "Wb and Rb kept apart as constants"
    elementary_per_direction: bool = False  # the elementary form is one loop per direction, stacked (repacked)
    elementary_zero_states: bool = False  # the elementary form reports zeros for an absent state
    reported: Mapping[str, Reported] = field(default_factory=dict)  # per feature, where it differs from Reported()
    elementary_reverse: str | None = None  # how the elementary form runs a reverse direction, where worth saying
    container: str = "the model"  # where zeros for a state the op requires are built
    transposes: str = "Transposes inside the model"  # what makes a layout the op does not take
    dynamic_shapes: str = "dynamic dimensions stay dynamic"
    alternatives: Mapping[str, str] = field(default_factory=dict)  # per refused feature, besides other formats
    since: Mapping[str, str] = field(default_factory=dict)  # a feature that needs a target version: the version

    def report(self, feature: str) -> Reported:
        return self.reported.get(feature, Reported())


def _frozen(mapping: dict) -> Mapping:
    return MappingProxyType(mapping)


# ------------------------------------------------------------------------------------------ the records

_AS_STORED = {"float32": Carried(Status.EXACT, "float32"), "float16": Carried(Status.EXACT, "float16")}
_PROVIDER = "onnxruntime's DirectML provider"
_SEQUENCE_LENGTHS_DOUBT = (
    "DirectML does not document sequence-length behaviour; gatepack assumes onnxruntime's (zeros past each length, "
    "the reverse direction starts at len-1, Y_h = 0 for len 0)"
)
# the activations the provider maps onto DirectML's, spelled as ONNX spells them (not Affine, nor Softplus)
_PROVIDER_ACTIVATIONS = ONNX_ACTIVATIONS - {"Affine", "Softplus"}


def _onnx_op(cell: Cell) -> Op:
    cpu_float64 = None if cell is Cell.RNN else f"onnxruntime's CPU {cell.op_name} does not run float64"
    return Op(
        f"{cell.op_name} operator",
        ONNX_GATES[cell],
        bias_tensor="B [D, 2*G*H]",
        dtypes=_frozen({**_AS_STORED, "float64": Carried(Status.EXACT, "float64", warning=cpu_float64)}),
        remarks=_frozen({"activations": "names and parameters written explicitly"}),
    )


def _onnx_for_directml_op(cell: Cell) -> Op:
    return Op(
        f"DirectML provider's {cell.op_name}",
        ONNX_GATES[cell],
        described=f"as {_PROVIDER} maps it onto DML_OPERATOR_{cell.op_name}: layout 0, activation names in its "
        "spelling, every alpha/beta written (its defaults differ from onnxruntime CPU's)",
        activations=(_PROVIDER_ACTIVATIONS,) * cell.activation_count,
        clip=Clip.EXACT if cell is Cell.LSTM else Clip.ABSENT,
        bias_tensor="B [D, 2*G*H]",
        dtypes=_frozen(
            {
                **_AS_STORED,
                "float64": Carried(
                    Status.UNSUPPORTED,
                    f"float64: {_PROVIDER} registers GRU/RNN/LSTM for float16 and float32 only (the node would run on "
                    "another provider, and onnxruntime's CPU GRU/LSTM take no float64)",
                    alternative="convert the model to float32 first, or leave out --for directml",
                ),
            }
        ),
        notes=_frozen(
            {
                "clip": f"DML_{cell.op_name}_OPERATOR_DESC has no clip field, so the provider drops it",
                "activations": "the provider rejects Affine and leaves ACTIVATION_SOFTPLUS's Steepness at 0",
            }
        ),
        warnings=_frozen({"sequence_lens": Doubt(_SEQUENCE_LENGTHS_DOUBT)}),
        remarks=_frozen({"activations": "names in the provider's spelling, every alpha/beta written"}),
    )


def _directml_op(cell: Cell) -> Op:
    return Op(
        f"DML_OPERATOR_{cell.op_name}",
        ONNX_GATES[cell],
        described=f"DML_{cell.op_name}_OPERATOR_DESC",
        clip=Clip.EXACT if cell is Cell.LSTM else Clip.ABSENT,
        reset_after="LinearBeforeReset",
        tensors=f"WeightTensor {{1,D,{cell.gates}H,I}}, RecurrenceTensor {{1,D,{cell.gates}H,H}}",
        bias_tensor=f"BiasTensor {{1,1,D,{2 * cell.gates}H}}",
        state_tensors=("HiddenInitTensor {1,D,N,H}", "CellMemInitTensor {1,D,N,H}"),
        dtypes=_frozen(
            {
                "float32": Carried(Status.EXACT, "FLOAT32"),
                "float16": Carried(Status.EXACT, "FLOAT16"),
                "float64": Carried(
                    Status.LOSSY,
                    "DirectML recurrent operators take FLOAT32 or FLOAT16, not double: written as FLOAT32",
                    alternative="pass --allow-lossy to accept FLOAT32",
                ),
            }
        ),
        notes=_frozen({"clip": f"{_PROVIDER} drops clip silently, giving different results"}),
        remarks=_frozen(
            {
                "activations": "ActivationDescs, every parameter explicit (Softplus with Steepness 1.0, which "
                f"{_PROVIDER} leaves at an invalid 0); the provider itself accepts only exact spellings",
            }
        ),
        warnings=_frozen(
            {
                "sequence_lens": Doubt(_SEQUENCE_LENGTHS_DOUBT),
                "Affine": Doubt(
                    "Affine is written as ACTIVATION_LINEAR (Alpha*x+Beta), which no shipping converter uses "
                    f"for recurrent operators: not verified on DirectML hardware ({_PROVIDER} rejects Affine)"
                ),
            }
        ),
    )


def _openvino_op(cell: Cell) -> Op:
    slots = {
        Cell.GRU: (frozenset({"Sigmoid"}), frozenset({"Tanh"})),
        Cell.RNN: (SIGMOID_TANH_RELU,),
        Cell.LSTM: (SIGMOID_TANH_RELU,) * 3,
    }
    return Op(
        f"{cell.op_name}Sequence-5",
        {Cell.LSTM: ("f", "i", "c", "o")}.get(cell, ONNX_GATES[cell]),
        described="the CPU plugin computes this configuration as ONNX specifies",
        activations=slots[cell],
        one_activation_list=True,
        clip=Clip.NOT_ZERO,
        sequence_lens=Lengths.STATIC_SHAPES,
        peepholes=None,
        input_forget=False,
        bias=Bias.SUMMED,
        bias_reset_after=Bias.SUMMED_KEEP_RBH,
        initial_state_required=True,
        layouts=(),  # batch-major with Y [N,D,S,H]: neither ONNX layout
        layout_note="OpenVINO's sequence op is batch-major, Y [N,D,S,H]",
        tensors="W, R",
        bias_tensor="B",
        dtypes=_frozen(
            {
                **_AS_STORED,
                "float64": Carried(
                    Status.LOSSY,
                    "float64 IR, but OpenVINO's CPU plugin computes in float32",
                    alternative="pass --allow-lossy to accept float32 arithmetic",
                ),
            }
        ),
        notes=_frozen(
            {
                "activations": "others fail to compile, and alpha/beta are ignored",
                "sequence_lens": "with a dynamic-shape X the CPU plugin ignores sequence_lengths",
            }
        ),
    )


_APPLE_DTYPES = _frozen(
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


_MIL_DTYPES = _frozen(
    {
        **_APPLE_DTYPES,
        "float32": Carried(
            Status.EXACT, "float32 (written with compute_precision FLOAT32: coremltools' default would cast to fp16)"
        ),
    }
)


def _apple_op(cell: Cell, family: str) -> Op:
    """Core ML's MIL op or BNNSGraph.Builder's call for ``cell`` (one family: BNNSGraph executes MIL ops): gates
    r, o, z (BNNS calls o "n"), LSTM i, f, o and the candidate (z in MIL, g in BNNS), parameterless sigmoid, tanh
    or relu in each slot, no sequence lengths nor input/forget coupling, one op per direction."""
    mil = family == "MIL"
    gates = {
        Cell.GRU: ("r", "o" if mil else "n", "z"),
        Cell.RNN: ("i",),
        Cell.LSTM: ("i", "f", "o", "z" if mil else "g"),
    }
    lstm = cell is Cell.LSTM
    return Op(
        f"{family} {cell.value}",
        gates[cell],
        activations=(SIGMOID_TANH_RELU,) * cell.activation_count,
        clip=Clip.CELL_STATE if mil and lstm else Clip.ABSENT,
        sequence_lens=Lengths.ABSENT,
        peepholes=("i", "f", "o") if mil else None,
        input_forget=False,
        bias=Bias.SUMMED,
        bias_reset_after=Bias.BY_ROLE,
        reset_after="reset_after" if mil else "applyResetGateAfterMatMul",
        reset_after_since="iOS18" if mil else None,
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
        dtypes=_MIL_DTYPES if mil else _APPLE_DTYPES,
        notes=_frozen({"clip": "coremltools' reference, docs/conventions.md §8"} if mil and lstm else {}),
        warnings=_frozen(_MIL_DOUBTS if mil else _BNNS_DOUBTS),
        remarks=_frozen(
            {
                "linear_before_reset": "false is reset before the matmul, whatever Apple's page prints "
                "(docs/conventions.md §5)"
            }
        ),
    )


# Known doubts about the ops' runtimes (a warning whenever the op is used): keyed by cell, or by a feature
_MIL_DOUBTS = {
    "gru": Doubt(
        "Core ML's own tests run the gru op with batch 1 only (later batches came out as zeros, rdar 59644603)",
        beyond_batch_one=True,
    ),
    "reset_after": Doubt("coremltools marks its iOS18 reset_after parity test expected-to-fail (rdar 128479517)"),
}
_BNNS_DOUBTS = {
    "lstm": Doubt(
        "Apple's page gives the lstm weights' gate order as i, f, o, g but its bias as i, f, g, o; gatepack writes "
        "i, f, o, g for both (MIL's lstm op, which BNNSGraph executes): unconfirmed without a device"
    ),
    "Relu": Doubt(
        "Apple's page calls relu 'Clamped ReLU' without saying where it clamps; gatepack assumes MIL's plain relu"
    ),
}


def _per_cell(make, *args) -> Mapping[Cell, Op]:
    return _frozen({cell: make(cell, *args) for cell in Cell})


_ONNX_TRANSPOSES = (
    "Transpose nodes around a layout-0 node (onnxruntime rejects layout=1; OpenVINO's importer ignores it)"
)
ONNX = Capabilities("onnx", _per_cell(_onnx_op), transposes=_ONNX_TRANSPOSES, dynamic_shapes="")
ONNX_FOR_DIRECTML = Capabilities(
    "onnx",
    _per_cell(_onnx_for_directml_op),
    elementary="elementary ONNX operators (a Loop over time per direction: MatMul, Add, Mul, Where, Clip and the "
    "activations' own operators)",
    elementary_weights=None,
    reported=_frozen(
        {"clip": Reported(elementary=Status.DECOMPOSED), "sequence_lens": Reported(elementary=Status.DECOMPOSED)}
    ),
    transposes=_ONNX_TRANSPOSES,
    dynamic_shapes="",
)
# OpenVINO's findings carry a decomposition in the cell finding alone: every feature stays exact
_EXACT_IN_EVERY_FORM = Reported(forced=Status.EXACT, elementary=Status.EXACT, replaced=Status.EXACT)
OPENVINO = Capabilities(
    "openvino",
    _per_cell(_openvino_op),
    elementary="elementary ops in a TensorIterator per direction, input projections in one MatMul",
    elementary_reverse="reverse via ReverseSequence, which honours sequence_lens",
    reported=_frozen({f: _EXACT_IN_EVERY_FORM for f in VALUE_FEATURES}),
    alternatives=_frozen({"cell": "use --strategy auto or decomposed (elementary ops in a TensorIterator)"}),
)
DIRECTML = Capabilities(
    "directml",
    _per_cell(_directml_op),
    transposes="DirectML tensors are sequence-major ({1,S,N,I}): X, the initial states and the outputs transposed "
    "around the operator (the manifest says so)",
    dynamic_shapes="DirectML tensors are static",
    alternatives=_frozen({"clip": "remove clip from the source if its gates never reach it"}),
)
COREML = Capabilities(
    "coreml",
    _per_cell(_apple_op, "MIL"),
    elementary="elementary MIL ops in a while_loop per direction, input projections in one matmul",
    elementary_weights="W, R (transposed for the matmul), Wb and Rb kept apart as constants, ONNX gate order",
    elementary_bias=None,
    elementary_per_direction=True,
    elementary_zero_states=True,
    reported=_frozen(
        {
            "peepholes": Reported(elementary=Status.DECOMPOSED),
            "input_forget": Reported(forced=Status.DECOMPOSED),
            "activations": Reported(forced=Status.EXACT, replaced=Status.EXACT),
            "linear_before_reset": _EXACT_IN_EVERY_FORM,
        }
    ),
    container="the program",
    transposes="transposes inside the program",
    dynamic_shapes="symbolic dimensions stay flexible",
    since=_frozen({"fp16": "iOS17", "states": "iOS18"}),
    alternatives=_frozen({"cell": "use --strategy auto or decomposed (elementary MIL ops in a while_loop)"}),
)
BNNS = Capabilities(
    "bnns",
    _per_cell(_apple_op, "BNNSGraph.Builder"),
    container="the generated Swift",
    transposes="transposes around the calls",
    dynamic_shapes="unknown dimensions become flexible, -1",
    alternatives=_frozen({"sequence_lens": "pad and drop sequence_lens"}),
)

_LITERT_DTYPES = _frozen(
    {
        "float32": Carried(Status.EXACT, "FLOAT32"),
        "float16": Carried(
            Status.REPACKED,
            "float16 weights stored as FLOAT32 (exact) and computed in float32; the interface is FLOAT32",
        ),
        "float64": Carried(
            Status.LOSSY,
            "the sequence ops' kernels are float32 (or hybrid int8): float64 weights and inputs become FLOAT32",
            alternative="pass --allow-lossy to accept float32",
        ),
    }
)


def _litert_op(cell: Cell) -> Op:
    """TFLite's builtin sequence op for ``cell`` (docs/conventions.md §11): one tensor per gate (no gate order to
    permute), one bias per gate (Wb + Rb), a fused activation (LSTM: the candidate's and the cell output's, its
    gates the logistic sigmoid), cell_clip bounding the cell state, no sequence lengths, each state a variable
    tensor [N, H] (one op per direction). GRU has no builtin op: its entry describes the elementary form."""
    fused = frozenset(FUSED_ACTIVATIONS)
    if cell is Cell.GRU:
        return Op(
            "elementary builtin ops (TFLite has no GRU operator)",
            ONNX_GATES[cell],
            tensors="W, R as FULLY_CONNECTED weights",
            dtypes=_LITERT_DTYPES,
        )
    lstm = cell is Cell.LSTM
    return Op(
        f"UNIDIRECTIONAL_SEQUENCE_{cell.op_name}",
        ONNX_GATES[cell],
        described="one op per direction, a reverse one between REVERSE_V2 ops; states are variable tensors written "
        "before the op on every invoke",
        activations=(frozenset({"Sigmoid"}), fused, fused) if lstm else (fused,),
        clip=Clip.CELL_STATE if lstm else Clip.ABSENT,
        sequence_lens=Lengths.ABSENT,
        peepholes=("i", "f", "o"),
        input_forget=True,
        bias=Bias.SUMMED,
        one_op_per_direction=True,
        layouts=(0, 1),  # time_major true or false
        tensors="per gate input_to_*/recurrent_to_* weights [H, I], [H, H]"
        if lstm
        else "input_weights, recurrent_weights",
        bias_tensor="per gate *_gate_bias [H]" if lstm else "bias [H]",
        state_tensors=("variable output_state [N, H]", "variable cell_state [N, H]"),
        dtypes=_LITERT_DTYPES,
        notes=_frozen({"clip": "TFLite's cell_clip bounds the cell state"} if lstm else {}),
        remarks=_frozen({"input_forget": "CIFG: no input-gate tensors, the forget gate's weights negated"}),
    )


FUSED_ACTIVATIONS = ("Tanh", "Relu")  # ONNX's names of the fused activations the sequence ops compute
LITERT = Capabilities(
    "litert",
    _per_cell(_litert_op),
    elementary="elementary builtin ops unrolled over a static sequence (FULLY_CONNECTED, ADD, MUL, LOGISTIC, "
    "TANH, SPLIT, PACK ...; sequence lengths as SELECT_V2 masks)",
    elementary_weights="W, R as FULLY_CONNECTED weights in ONNX gate order, Wb and Rb as their biases",
    elementary_bias=None,
    elementary_per_direction=True,
    elementary_zero_states=True,
    reported=_frozen(
        {
            "clip": Reported(elementary=Status.DECOMPOSED),
            "peepholes": Reported(elementary=Status.DECOMPOSED),
            "sequence_lens": Reported(elementary=Status.DECOMPOSED),
        }
    ),
    container="the model (a variable tensor, zeros FILLed in on every invoke)",
    transposes="time_major false on the op (no transpose)",
    dynamic_shapes="the op's S stays dynamic; N is fixed: its state variables are [N, H]",
    alternatives=_frozen({"cell": "use --strategy auto or decomposed (elementary builtin ops, unrolled)"}),
)

RECORDS: Mapping[str, Capabilities] = _frozen({c.format: c for c in (ONNX, OPENVINO, DIRECTML, COREML, BNNS, LITERT)})


# --------------------------------------------------------------------------------------- derived facts


def folds_bias(layer: "RecurrentLayer", storage: Bias) -> bool:
    """Whether ``storage`` loses the Wb/Rb split of ``layer``: a sum whose Rb part is not zero (the gates
    OpenVINO sums, with linear_before_reset: z and r only)."""
    h = layer.hidden_size
    if storage is Bias.SUMMED:
        return any(p.Rb.any() for p in layer.directions)
    if storage is Bias.SUMMED_KEEP_RBH:
        return any(p.Rb[: 2 * h].any() for p in layer.directions)
    return False


def bias_storage(layer: "RecurrentLayer", op: Op) -> Bias:
    return op.bias_reset_after if layer.cell.spec.reset_placement and layer.linear_before_reset else op.bias


def lacks(layer: "RecurrentLayer", op: Op, target: str | None = None) -> dict[str, str]:
    """What ``op`` cannot express in ``layer`` (at ``target``, a version of the format), by feature, each with
    the reason; empty: it computes exactly what ONNX specifies."""
    found = {}
    names = [tuple(a.name for a in p.activations) for p in layer.directions]
    if op.activations is not None and any(n not in slot for per in names for n, slot in zip(per, op.activations)):
        slots = list(dict.fromkeys(op.activations))
        allowed = ", then ".join(_names(slot) for slot in slots) + (" in each slot" if len(slots) == 1 else "")
        found["activations"] = f"activations {layer.activation_summary()}: the {op.name} computes only {allowed}"
    elif op.one_activation_list and len(set(names)) > 1:
        found["activations"] = f"per-direction activations: the {op.name} takes one activation list for both directions"
    if layer.clip is not None and (
        op.clip in (Clip.ABSENT, Clip.CELL_STATE) or (op.clip is Clip.NOT_ZERO and not layer.clip)
    ):
        found["clip"] = f"clip {layer.clip:g}: the {op.name} {_CLIP_LACKS[op.clip]}"
    if layer.has_peepholes and op.peepholes is None:
        found["peepholes"] = f"peepholes: the {op.name} has no peephole input"
    if layer.input_forget and not op.input_forget:
        found["input_forget"] = f"input_forget = 1: the {op.name} has no input/forget coupling"
    itf = layer.interface
    dynamic = not (isinstance(itf.seq_length, int) and isinstance(itf.batch_size, int))
    if itf.sequence_lens and (
        op.sequence_lens is Lengths.ABSENT or (op.sequence_lens is Lengths.STATIC_SHAPES and dynamic)
    ):
        found["sequence_lens"] = f"sequence_lens: the {op.name} {_LENGTHS_LACKS[op.sequence_lens]}"
    since = op.reset_after_since
    reset_after = layer.cell.spec.reset_placement and layer.linear_before_reset
    if reset_after and since and target is not None and CORE_ML_TARGETS.index(target) < CORE_ML_TARGETS.index(since):
        found["linear_before_reset"] = (
            f"linear_before_reset = 1 needs the {op.name}'s {op.reset_after} ({since}); the target is {target}"
        )
    return {feature: f"{why} ({op.notes[feature]})" if feature in op.notes else why for feature, why in found.items()}


def present(layer: "RecurrentLayer", feature: str) -> bool:
    """Whether ``layer`` has ``feature`` (one of ``VALUE_FEATURES``)."""
    return {
        "peepholes": layer.has_peepholes,
        "input_forget": bool(layer.input_forget),
        "activations": True,
        "clip": layer.clip is not None,
        "sequence_lens": bool(layer.interface.sequence_lens),
    }[feature]


def doubts(layer: "RecurrentLayer", op: Op) -> dict[str, str]:
    """The op's known doubts (``Op.warnings``) that concern ``layer``, by what they are about: its cell, reset_after
    (linear_before_reset = 1), a feature it has, an activation it uses; one about batches past the first only
    where its batch is not fixed at 1."""
    about = [layer.cell.value, *(f for f in VALUE_FEATURES if f != "activations" and present(layer, f))]
    if layer.cell.spec.reset_placement and layer.linear_before_reset:
        about.append("reset_after")
    about += dict.fromkeys(a.name for p in layer.directions for a in p.activations)
    one = layer.interface.batch_size == 1
    found = {key: op.warnings[key] for key in about if key in op.warnings}
    return {key: d.text for key, d in found.items() if not (d.beyond_batch_one and one)}


_CLIP_LACKS = {
    Clip.ABSENT: "has no clip",
    Clip.CELL_STATE: "bounds the cell state with it after each update (ONNX: the gates' inputs)",
    Clip.NOT_ZERO: "reads clip = 0 as no clip (ONNX: every pre-activation clamped to 0)",
}
_LENGTHS_LACKS = {
    Lengths.ABSENT: "has no sequence lengths",
    Lengths.STATIC_SHAPES: "honours them with static shapes only",
}


def expresses(caps: Capabilities, layer: "RecurrentLayer", feature: str) -> bool:
    """Whether a format writes ``feature`` of ``layer``: its op takes it, or its elementary form computes it."""
    return caps.elementary is not None or feature not in lacks(layer, caps.ops[layer.cell])


def alternative(caps: Capabilities, layer: "RecurrentLayer", feature: str) -> str:
    """What to do about ``feature`` of ``layer`` when ``caps``' format refuses it: the formats that express it,
    and the record's own way round."""
    others = [name for name, other in RECORDS.items() if other is not caps and expresses(other, layer, feature)]
    listed = f"{', '.join(others[:-1])} or {others[-1]}" if len(others) > 1 else "".join(others)
    found = [f"convert to {listed}, which express {feature}"] if others else []
    return "; or ".join(found + [caps.alternatives[feature]] if feature in caps.alternatives else found)


# ---------------------------------------------------------------------------------------- per-step holds

# The formats that hold a layer's per-step mask (``Interface.mask``, Keras masking), by what writes it; no sequence
# op of any format has such a mask, so it is held only where gatepack rewrites the whole model around an elementary
# ONNX Loop (onnx.elementary: s_t = Where(m_t, step, s_{t-1}), Y_t = h_t), and nowhere for layers alone, whose
# mask the model's other operators compute.
MASK_HOLDERS = MappingProxyType(
    {
        "onnx": "an ONNX Loop of elementary operators in the layer's place (no GRU/RNN/LSTM node has a per-step "
        "mask): each state and Y keep their value where the mask is false",
        "openvino": "the elementary ONNX Loop gatepack writes in the layer's place, converted by OpenVINO's ONNX "
        "frontend into an OpenVINO Loop (no sequence op has a per-step mask): each state and Y keep their value "
        "where the mask is false",
    }
)


# ---------------------------------------------------------------------------------------------- the table

TABLE_BEGIN = "<!-- capabilities table: generated from converters/capabilities.py, do not edit -->"
TABLE_END = "<!-- end of capabilities table -->"
TABLE_ROWS = (
    ("onnx", ONNX),
    ("onnx --for directml", ONNX_FOR_DIRECTML),
    *((c.format, c) for c in RECORDS.values() if c is not ONNX),
)


def op_facts(op: Op, cell: Cell) -> dict[str, str]:
    """What ``op`` takes, feature by feature, as short text (the table's cells, ``gatepack formats``)."""
    slots = list(dict.fromkeys(op.activations or ()))
    lstm = cell is Cell.LSTM
    facts = {
        "activations": "any, with α/β"
        if op.activations is None
        else ", then ".join(_names(slot) for slot in slots)
        + (" in each slot" if len(slots) == 1 and cell.activation_count > 1 else "")
        + ("; one list for both directions" if op.one_activation_list else ""),
        "clip": op.clip.value,
        "sequence_lens": op.sequence_lens.value,
        "peepholes": ("yes" if op.peepholes else "none") if lstm else "",
        "input_forget": ("yes" if op.input_forget else "none") if lstm else "",
        "bias": op.bias.value
        + (f"; lbr=1: {op.bias_reset_after.value}" if cell is Cell.GRU and op.bias_reset_after != op.bias else ""),
        "linear_before_reset": (f"from {op.reset_after_since}" if op.reset_after_since else "yes")
        if cell.spec.reset_placement
        else "",
        "float64": op.dtypes["float64"].status.value if "float64" in op.dtypes else "",
        "known doubts": ", ".join(_doubt_names(op, cell)),
    }
    return facts


def _doubt_names(op: Op, cell: Cell) -> list[str]:
    """What the op's known doubts are about, for ``cell`` (a doubt about another cell's op left out)."""
    cells = {c.value for c in Cell}
    applies = [
        key
        for key in op.warnings
        if (key == cell.value or key not in cells) and (key != "reset_after" or cell.spec.reset_placement)
    ]
    return [f"{key} (batches past the first)" if op.warnings[key].beyond_batch_one else key for key in applies]


def _names(slot: frozenset[str]) -> str:
    missing = ONNX_ACTIVATIONS - slot
    return f"any but {', '.join(sorted(missing))}" if len(missing) < len(slot) else "/".join(sorted(slot))


def table() -> str:
    """The README's table of what each format's op takes, per cell, and what becomes of what it lacks."""
    columns = ["activations", "clip", "sequence_lens", "peepholes", "input_forget", "linear_before_reset", "bias"]
    head = ["target", "cell", "its op", *columns, "float64", "what the op lacks"]
    lines = [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}"]
    for label, caps in TABLE_ROWS:
        for cell, op in caps.ops.items():
            lacking = lacking_becomes(caps, cell)
            facts = op_facts(op, cell)
            row = [f"`{label}`", cell.value, op.name, *(facts[c] or "—" for c in columns), facts["float64"], lacking]
            lines.append(f"| {' | '.join(row)} |")
    return "\n".join(lines)


def lacking_becomes(caps: Capabilities, cell: Cell) -> str:
    """What becomes of a feature the format's op for ``cell`` lacks: decomposed, unsupported, or "—" (it lacks
    none of the features an ONNX layer may have)."""
    return "decomposed" if caps.elementary else "unsupported" if _lacks_any(caps.ops[cell], cell) else "—"


def _lacks_any(op: Op, cell: Cell) -> bool:
    lstm = cell is Cell.LSTM
    return (
        op.activations is not None
        or op.clip is not Clip.EXACT
        or op.sequence_lens is not Lengths.EXACT
        or (lstm and (op.peepholes is None or not op.input_forget))
    )


def with_table(readme: str) -> str:
    """``readme`` with the text between ``TABLE_BEGIN`` and ``TABLE_END`` replaced by ``table()``."""
    before, rest = readme.split(TABLE_BEGIN, 1)
    _, after = rest.split(TABLE_END, 1)
    return f"{before}{TABLE_BEGIN}\n{table()}\n{TABLE_END}{after}"


if __name__ == "__main__":  # python -m gatepack.converters.capabilities README.md: regenerate the table in place
    import sys
    from pathlib import Path

    target = Path(sys.argv[1])
    target.write_text(with_table(target.read_text()))

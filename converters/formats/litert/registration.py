"""LiteRT's registration record (plain data, read at start-up; docs/design.md, "Adding a format"): names, how a
path is recognised (``.tflite``, or any file with the ``TFL3`` identifier), the write options, what its builtin
sequence ops take (docs/conventions.md §11), and ai-edge-litert imported."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from gatepack.converters.capabilities import (
    BUILT_IN_OPS,
    Bias,
    Capabilities,
    Carried,
    Clip,
    Lengths,
    Op,
    Reported,
    frozen,
    per_cell,
)
from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.fileio import has_identifier
from gatepack.converters.findings import Status
from gatepack.converters.registration import BATCH_SIZE, SEQ_LENGTH, STATEFUL, STRATEGY, FormatInfo, WeightForm
from gatepack.schemas.cells import Cell
from gatepack.schemas.schemes import LITERT_ASYMMETRIC, LITERT_SYMMETRIC

NAME = "litert"
IDENTIFIER = b"TFL3"  # a TFLite flatbuffer's file identifier, at bytes 4..8

_DTYPES = frozen(
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
FUSED_ACTIVATIONS = ("Tanh", "Relu")  # ONNX's names of the fused activations the sequence ops compute
# The sequence ops' gate tensors in the order of their inputs, by the canonical gate each holds (one tensor per gate:
# no weight's rows are permuted; the reader and writer walk the gates in this order)
GATES = {Cell.RNN: ("i",), Cell.LSTM: ("i", "f", "c", "o")}


def _litert_op(cell: Cell) -> Op:
    """TFLite's builtin sequence op for ``cell`` (docs/conventions.md §11): one tensor per gate (no gate order to
    permute), one bias per gate (Wb + Rb), a fused activation (LSTM: the candidate's and the cell output's, its
    gates the logistic sigmoid), cell_clip bounding the cell state, no sequence lengths, each state a variable
    tensor [N, H] (one op per direction). GRU has no builtin op: its entry describes the elementary form."""
    fused = frozenset(FUSED_ACTIVATIONS)
    if cell is Cell.GRU:
        return Op(
            "elementary builtin ops (TFLite has no GRU operator)",
            cell.gate_names,
            tensors="W, R as FULLY_CONNECTED weights",
            dtypes=_DTYPES,
        )
    lstm = cell is Cell.LSTM
    return Op(
        f"UNIDIRECTIONAL_SEQUENCE_{cell.op_name}",
        GATES[cell],
        separate_gates=True,
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
        dtypes=_DTYPES,
        notes=frozen({"clip": "TFLite's cell_clip bounds the cell state"} if lstm else {}),
        remarks=frozen({"input_forget": "CIFG: no input-gate tensors, the forget gate's weights negated"}),
    )


CAPABILITIES = Capabilities(
    NAME,
    per_cell(_litert_op, cells=BUILT_IN_OPS),
    elementary="elementary builtin ops unrolled over a static sequence (FULLY_CONNECTED, ADD, MUL, LOGISTIC, "
    "TANH, SPLIT, PACK ...; sequence lengths as SELECT_V2 masks)",
    elementary_weights="W, R as FULLY_CONNECTED weights in ONNX gate order, Wb and Rb as their biases",
    elementary_bias=None,
    elementary_per_direction=True,
    elementary_zero_states=True,
    reported=frozen(
        {
            "clip": Reported(elementary=Status.DECOMPOSED),
            "peepholes": Reported(elementary=Status.DECOMPOSED),
            "sequence_lens": Reported(elementary=Status.DECOMPOSED),
        }
    ),
    container="the model (a variable tensor, zeros FILLed in on every invoke)",
    transposes="time_major false on the op (no transpose)",
    dynamic_shapes="the op's S stays dynamic; N is fixed: its state variables are [N, H]",
    alternatives=frozen({"cell": "use --strategy auto or decomposed (elementary builtin ops, unrolled)"}),
    dtypes=_DTYPES,
)

INFO = FormatInfo(
    NAME,
    "LiteRT flatbuffer",
    "NAME.tflite",
    "the LiteRT interpreter (ai-edge-litert, builtin kernels)",
    rank=60,
    runs_here=importlib.util.find_spec("ai_edge_litert") is not None,
    constant_form="a constant tensor (a zero state: a variable tensor FILLed with zeros on every invoke)",
    suffixes=(".tflite",),
    sniff=lambda head: head[4:8] == IDENTIFIER,  # a flatbuffer named otherwise than .tflite
    write_options=(STRATEGY, SEQ_LENGTH, BATCH_SIZE, STATEFUL),
    capabilities=CAPABILITIES,
    keeps_whole_from=("onnx",),  # the operator table's litert column around the layers
    recognise=has_identifier(IDENTIFIER, ".tflite"),
    stateful_layers=True,
    states_held_as="LiteRT variable tensors, the file taking the frame inputs only (reset_all_variables() starts a "
    "new stream)",
    extra="litert",
    framework="ai_edge_litert",
    holds_quantized=(LITERT_ASYMMETRIC, LITERT_SYMMETRIC),  # the hybrid kernels'
    # the hybrid kernels take one int8 scale per weight tensor (one gate's [H, K]) and quantize X and h at run time
    quantizes_weights=WeightForm(per_gate=True, activations=LITERT_ASYMMETRIC),
    model_weights_refusal="LiteRT's whole-model writer keeps the other operators' weights float (gatepack writes int8 "
    "weights only for the recurrent layers' hybrid sequence kernels)",
)

MISSING = "ai-edge-litert is not installed: the litert format needs the litert extra"


def litert() -> tuple[ModuleType, ModuleType]:
    """ai-edge-litert's official TFLite schema (flatbuffer object API, ``schema_py_generated``) and its
    ``interpreter`` module; both import in ~0.1 s and print nothing."""
    try:
        import ai_edge_litert.interpreter as interpreter
        import ai_edge_litert.schema_py_generated as schema
    except ImportError:
        raise RuntimeFailure(MISSING, hint="pip install 'gatepack[litert]'") from None
    return schema, interpreter

"""OpenVINO's registration record (plain data, read at start-up; docs/design.md, "Adding a format"): names, how a
path is recognised, the write options, what its sequence ops take, and OpenVINO imported without its telemetry."""

from __future__ import annotations

import sys
from types import ModuleType

from gatepack.converters.capabilities import (
    AS_STORED,
    BUILT_IN_OPS,
    EXACT_IN_EVERY_FORM,
    SIGMOID_TANH_RELU,
    VALUE_FEATURES,
    Bias,
    Capabilities,
    Carried,
    Clip,
    Lengths,
    Op,
    frozen,
    per_cell,
)
from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.fileio import starts_with
from gatepack.converters.findings import Status
from gatepack.converters.registration import COMPRESS_TO_FP16, STATEFUL, STRATEGY, FormatInfo, WeightForm
from gatepack.schemas.cells import Cell
from gatepack.schemas.schemes import FLOAT_ACTIVATIONS

NAME = "openvino"


# The sequence ops' gate blocks, by the canonical gate each holds, where they differ from ONNX's order
GATES = {Cell.LSTM: ("f", "i", "c", "o")}


_DTYPES = frozen(
    {
        **AS_STORED,
        "float64": Carried(
            Status.LOSSY,
            "float64 IR, but OpenVINO's CPU plugin computes in float32",
            alternative="pass --allow-lossy to accept float32 arithmetic",
        ),
    }
)


def _openvino_op(cell: Cell) -> Op:
    slots = {
        Cell.GRU: (frozenset({"Sigmoid"}), frozenset({"Tanh"})),
        Cell.RNN: (SIGMOID_TANH_RELU,),
        Cell.LSTM: (SIGMOID_TANH_RELU,) * 3,
    }
    return Op(
        f"{cell.op_name}Sequence-5",
        GATES.get(cell, cell.gate_names),
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
        dtypes=_DTYPES,
        notes=frozen(
            {
                "activations": "others fail to compile, and alpha/beta are ignored",
                "sequence_lens": "with a dynamic-shape X the CPU plugin ignores sequence_lengths",
            }
        ),
    )


# OpenVINO's findings carry a decomposition in the cell finding alone: every feature stays exact
CAPABILITIES = Capabilities(
    NAME,
    per_cell(_openvino_op, cells=BUILT_IN_OPS),
    elementary="elementary ops in a TensorIterator per direction, input projections in one MatMul",
    elementary_reverse="reverse via ReverseSequence, which honours sequence_lens",
    reported=frozen({f: EXACT_IN_EVERY_FORM for f in VALUE_FEATURES}),
    alternatives=frozen({"cell": "use --strategy auto or decomposed (elementary ops in a TensorIterator)"}),
    dtypes=_DTYPES,
)

INFO = FormatInfo(
    NAME,
    "OpenVINO IR",
    "NAME.xml + NAME.bin",
    "OpenVINO CPU",
    rank=20,
    constant_form="a Constant node",
    suffixes=(".xml",),
    write_options=(STRATEGY, COMPRESS_TO_FP16, STATEFUL),
    capabilities=CAPABILITIES,
    keeps_whole_from=("onnx",),  # through OpenVINO's ONNX frontend
    mask_held_by="the elementary ONNX Loop gatepack writes in the layer's place, converted by OpenVINO's ONNX "
    "frontend into an OpenVINO Loop (no sequence op has a per-step mask): each state and Y keep their value "
    "where the mask is false",
    states_held_as="OpenVINO variables (ReadValue/Assign), the IR taking the frame inputs only",
    companions=(".bin",),
    recognise=starts_with(b"<net", ".xml"),
    extra="openvino",
    framework="openvino",
    holds_quantized=(FLOAT_ACTIVATIONS,),  # compressed constants
    quantizes_weights=WeightForm(),
    model_weights="qdq",  # the QDQ model read by its ONNX frontend
)

MISSING = "OpenVINO is not installed: the openvino format needs the openvino extra"


def openvino() -> tuple[ModuleType, ModuleType]:
    """``openvino`` and its ``opset15`` builders, imported without OpenVINO's telemetry: the Python package starts
    it (a client id under ``~/intel`` and events sent in the background) when ``openvino`` is imported, through
    ``openvino.tools.ovc``, which falls back to a no-op stub when ``openvino_telemetry`` cannot be imported.
    gatepack hides that module during its own first import of ``openvino`` only, so the stub is used; nothing
    else in the process changes (OpenVINO offers no other switch that needs no file in the user's home)."""
    if "openvino" not in sys.modules and "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # an ImportError for ovc
        try:
            import openvino  # noqa: F401
        except ImportError:
            raise RuntimeFailure(MISSING, hint="pip install 'gatepack[openvino]'") from None
        finally:
            del sys.modules["openvino_telemetry"]
    try:
        import openvino as ov
        import openvino.opset15 as ops
    except ImportError:
        raise RuntimeFailure(MISSING, hint="pip install 'gatepack[openvino]'") from None
    return ov, ops

"""ONNX's registration record (plain data, read at start-up; docs/design.md, "Adding a format"): names, how a
path is recognised, the write options, what its GRU/RNN/LSTM operators take (and what they take when written for
onnxruntime's DirectML provider), and onnxruntime imported quietly."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from gatepack.converters.capabilities import (
    AS_STORED,
    BUILT_IN_OPS,
    ONNX_ACTIVATIONS,
    Capabilities,
    Carried,
    Clip,
    Doubt,
    Op,
    Reported,
    frozen,
    per_cell,
)
from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.fileio import starts_like_protobuf
from gatepack.converters.findings import Status
from gatepack.converters.registration import STRATEGY, FormatInfo, WeightForm, WriteOption, is_bool, one_of
from gatepack.schemas.cells import Cell
from gatepack.schemas.schemes import FLOAT_ACTIVATIONS, ORT_DYNAMIC

NAME = "onnx"

RUNTIMES = ("onnxruntime", "directml")


def _runtime(value: Any) -> bool:
    return isinstance(value, str) and value.lower() in RUNTIMES


def runtime_name(value: str | None) -> str:
    """The runtime an ONNX artifact is written for, in lower case (None: onnxruntime's CPU provider)."""
    return "onnxruntime" if value is None else value.lower()


OPTIONS = (
    WriteOption(
        "opset",
        "7, 14 or 21",
        one_of(7, 14, 21),
        "--opset",
        "opset to write (default 14, 21 for 4-bit or per-block quantized weights; a whole model keeps its own).",
        ("7", "14", "21"),
        int,
    ),
    WriteOption(
        "layout_encoding",
        "transpose or attribute",
        one_of("transpose", "attribute"),
        "--onnx-layout",
        "how a batch-major layer is expressed (default: transpose, which every runtime runs).",
        ("transpose", "attribute"),
    ),
    WriteOption(
        "external_data",
        "true or false",
        is_bool,
        "--external-data",
        "weights in NAME.onnx.data beside the model (default: as the source stores them; always above 1 GiB).",
        bool,
    ),
    WriteOption(
        "runtime",
        f"one of {', '.join(RUNTIMES)} (any case)",
        _runtime,
        "--for",
        "the runtime the model is for (default onnxruntime): directml writes every recurrent node in a form "
        "onnxruntime's DirectML provider computes as ONNX specifies (elementary ops where it would not).",
        RUNTIMES,
        str.lower,
        any_case=True,
    ),
    STRATEGY,
)

# ------------------------------------------------------------------------------------------ capabilities

PROVIDER = "onnxruntime's DirectML provider"
SEQUENCE_LENGTHS_DOUBT = (
    "DirectML does not document sequence-length behaviour; gatepack assumes onnxruntime's (zeros past each length, "
    "the reverse direction starts at len-1, Y_h = 0 for len 0)"
)
# the activations the provider maps onto DirectML's, spelled as ONNX spells them (not Affine, nor Softplus)
_PROVIDER_ACTIVATIONS = ONNX_ACTIVATIONS - {"Affine", "Softplus"}


def _onnx_op(cell: Cell) -> Op:
    cpu_float64 = None if cell is Cell.RNN else f"onnxruntime's CPU {cell.op_name} does not run float64"
    return Op(
        f"{cell.op_name} operator",
        cell.gate_names,
        bias_tensor="B [D, 2*G*H]",
        dtypes=frozen({**AS_STORED, "float64": Carried(Status.EXACT, "float64", warning=cpu_float64)}),
        remarks=frozen({"activations": "names and parameters written explicitly"}),
    )


_PROVIDER_DTYPES = frozen(
    {
        **AS_STORED,
        "float64": Carried(
            Status.UNSUPPORTED,
            f"float64: {PROVIDER} registers GRU/RNN/LSTM for float16 and float32 only (the node would run on "
            "another provider, and onnxruntime's CPU GRU/LSTM take no float64)",
            alternative="convert the model to float32 first, or leave out --for directml",
        ),
    }
)


def _onnx_for_directml_op(cell: Cell) -> Op:
    return Op(
        f"DirectML provider's {cell.op_name}",
        cell.gate_names,
        described=f"as {PROVIDER} maps it onto DML_OPERATOR_{cell.op_name}: layout 0, activation names in its "
        "spelling, every alpha/beta written (its defaults differ from onnxruntime CPU's)",
        activations=(_PROVIDER_ACTIVATIONS,) * cell.activation_count,
        clip=Clip.EXACT if cell is Cell.LSTM else Clip.ABSENT,
        bias_tensor="B [D, 2*G*H]",
        dtypes=_PROVIDER_DTYPES,
        notes=frozen(
            {
                "clip": f"DML_{cell.op_name}_OPERATOR_DESC has no clip field, so the provider drops it",
                "activations": "the provider rejects Affine and leaves ACTIVATION_SOFTPLUS's Steepness at 0",
            }
        ),
        warnings=frozen({"sequence_lens": Doubt(SEQUENCE_LENGTHS_DOUBT)}),
        remarks=frozen({"activations": "names in the provider's spelling, every alpha/beta written"}),
    )


_TRANSPOSES = "Transpose nodes around a layout-0 node (onnxruntime rejects layout=1; OpenVINO's importer ignores it)"
_LOOP = "a Loop over time per direction: MatMul, Add, Mul, Where, Clip and the activations' own operators"
# an operator for each cell that has one (``CellSpec.onnx_op``); a cell without one is written as elementary operators
# from its graph step (``onnx.elementary``), described in the model's metadata (``onnx.described`` reads it back). The
# operators lack nothing a canonical layer has, so ``auto`` keeps the operator wherever there is one.
CAPABILITIES = Capabilities(
    NAME,
    lambda cell: None if cell.spec.onnx_op is None else _onnx_op(cell),
    elementary=f"elementary ONNX operators ({_LOOP})",
    transposes=_TRANSPOSES,
    dynamic_shapes="",
    alternatives=frozen({"cell": "use --strategy auto or decomposed (a Loop of elementary operators)"}),
    dtypes=frozen({**AS_STORED, "float64": Carried(Status.EXACT, "float64")}),
)
FOR_DIRECTML = Capabilities(
    NAME,
    per_cell(_onnx_for_directml_op, cells=BUILT_IN_OPS),
    elementary=f"elementary ONNX operators ({_LOOP}; onnxruntime runs a Loop on its CPU provider: {PROVIDER} has "
    "no Loop kernel)",
    elementary_weights=None,
    reported=frozen(
        {"clip": Reported(elementary=Status.DECOMPOSED), "sequence_lens": Reported(elementary=Status.DECOMPOSED)}
    ),
    transposes=_TRANSPOSES,
    dynamic_shapes="",
    dtypes=_PROVIDER_DTYPES,
)

# ---------------------------------------------------------------------------------------------- the record

# The first byte of each field tag of onnx.ModelProto (field number << 3 | wire type): ir_version 1,
# producer_name 2 ... graph 7, opset_import 8, metadata_props 14, and the two-byte tags of training_info 20,
# functions 25, configuration 26.
FIRST_TAGS = bytes([0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2])

INFO = FormatInfo(
    NAME,
    "ONNX",
    "NAME.onnx (+ NAME.onnx.data with external data)",
    "onnxruntime (CPU)",
    rank=10,
    constant_form="an initializer",
    suffixes=(".onnx",),
    write_options=OPTIONS,
    capabilities=CAPABILITIES,
    variants=(("--for directml", FOR_DIRECTML),),
    keeps_whole_from=(NAME,),
    mask_held_by="an ONNX Loop of elementary operators in the layer's place (no GRU/RNN/LSTM node has a per-step "
    "mask): each state and Y keep their value where the mask is false",
    companions=(".onnx.data",),
    recognise=starts_like_protobuf(".onnx", FIRST_TAGS),
    holds_quantized=(FLOAT_ACTIVATIONS, ORT_DYNAMIC),  # QDQ; DynamicQuantizeLSTM
    quantizes_weights=WeightForm(),
    model_weights="qdq",
)


def onnxruntime() -> ModuleType:
    """onnxruntime, imported without the device id it records under ``~/.cache/Microsoft/DeveloperTools`` unless
    ``ORT_DISABLE_TELEMETRY`` is set before the import: gatepack sets it (unless the user did)."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeFailure(
            "onnxruntime is not installed (a dependency of gatepack)", hint="pip install onnxruntime"
        ) from None
    return ort

"""DirectML's registration record (plain data, read at start-up; docs/design.md, "Adding a format"): names, how a
path is recognised (a directory or ``.json`` with a DxDispatch model), the write options and what its operators'
descs take."""

from __future__ import annotations

from gatepack.converters.capabilities import BUILT_IN_OPS, Capabilities, Carried, Clip, Doubt, Op, frozen, per_cell
from gatepack.converters.fileio import has_markers
from gatepack.converters.findings import Status
from gatepack.converters.formats.onnx.registration import PROVIDER, SEQUENCE_LENGTHS_DOUBT
from gatepack.converters.registration import BATCH_SIZE, SEQ_LENGTH, FormatInfo, WriteOption, is_bool
from gatepack.schemas.cells import Cell

NAME = "directml"

OPTIONS = (
    WriteOption(
        "emit_cpp",
        "true or false",
        is_bool,
        "--emit-cpp",
        "also write desc.cpp, C++ that fills the operator descs.",
        bool,
    ),
    SEQ_LENGTH,
    BATCH_SIZE,
)


def _directml_op(cell: Cell) -> Op:
    return Op(
        f"DML_OPERATOR_{cell.op_name}",
        cell.gate_names,
        described=f"DML_{cell.op_name}_OPERATOR_DESC",
        clip=Clip.EXACT if cell is Cell.LSTM else Clip.ABSENT,
        reset_after="LinearBeforeReset",
        tensors=f"WeightTensor {{1,D,{cell.gates}H,I}}, RecurrenceTensor {{1,D,{cell.gates}H,H}}",
        bias_tensor=f"BiasTensor {{1,1,D,{2 * cell.gates}H}}",
        state_tensors=("HiddenInitTensor {1,D,N,H}", "CellMemInitTensor {1,D,N,H}"),
        dtypes=frozen(
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
        notes=frozen({"clip": f"{PROVIDER} drops clip silently, giving different results"}),
        remarks=frozen(
            {
                "activations": "ActivationDescs, every parameter explicit (Softplus with Steepness 1.0, which "
                f"{PROVIDER} leaves at an invalid 0); the provider itself accepts only exact spellings",
            }
        ),
        warnings=frozen(
            {
                "sequence_lens": Doubt(SEQUENCE_LENGTHS_DOUBT),
                "Affine": Doubt(
                    "Affine is written as ACTIVATION_LINEAR (Alpha*x+Beta), which no shipping converter uses "
                    f"for recurrent operators: not verified on DirectML hardware ({PROVIDER} rejects Affine)"
                ),
            }
        ),
    )


CAPABILITIES = Capabilities(
    NAME,
    per_cell(_directml_op, cells=BUILT_IN_OPS),
    transposes="DirectML tensors are sequence-major ({1,S,N,I}): X, the initial states and the outputs transposed "
    "around the operator (the manifest says so)",
    dynamic_shapes="DirectML tensors are static",
    alternatives=frozen({"clip": "remove clip from the source if its gates never reach it"}),
)

INFO = FormatInfo(
    NAME,
    "DirectML (DxDispatch model)",
    "directory with model.json",
    "none here (NumPy executor of DirectML semantics)",
    rank=30,
    runs_here=False,
    constant_form="a resource initialised from its .npy file (gatepack.json marks it constant)",
    suffixes=(".json",),
    markers=("model.json",),
    write_options=OPTIONS,
    whole_model_via=(
        "onnx",
        "to run the whole model on DirectML, use --to onnx --for directml (API: to='onnx', "
        "runtime='directml'): every recurrent node in a form onnxruntime's DirectML provider computes as "
        "ONNX specifies",
    ),
    capabilities=CAPABILITIES,
    is_directory=True,
    recognise=has_markers("model.json", "gatepack.json"),
    interface_inputs=False,
    model_weights_refusal="a DirectML model is the recurrent layers alone (one DML_OPERATOR_GRU/RNN dispatchable per "
    "layer, float weights): it holds no other weights, and no quantized ones",
)

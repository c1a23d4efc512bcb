"""BNNS's registration record (plain data, read at start-up; docs/design.md, "Adding a format"): a directory with
``bnns.json`` (one ``BNNSGraph.Builder`` call per direction), and what those calls take (Core ML's MIL ops: BNNSGraph
executes them, so the record is the Apple family's, ``coreml.registration.apple_op``)."""

from __future__ import annotations

from gatepack.converters.capabilities import BUILT_IN_OPS, Capabilities, Doubt, frozen, per_cell
from gatepack.converters.fileio import has_markers
from gatepack.converters.formats.coreml.registration import apple_op
from gatepack.converters.registration import FormatInfo
from gatepack.schemas.cells import Cell

NAME = "bnns"

# BNNSGraph.Builder's letters for the candidates of the Apple family's gate order (coreml.registration.GATES)
SPELLED = {Cell.GRU: {"h": "n"}, Cell.LSTM: {"c": "g"}}
# Known doubts about the calls (a warning whenever one is used): keyed by cell, or by an activation
_DOUBTS = {
    "lstm": Doubt(
        "Apple's page gives the lstm weights' gate order as i, f, o, g but its bias as i, f, g, o; gatepack writes "
        "i, f, o, g for both (MIL's lstm op, which BNNSGraph executes): unconfirmed without a device"
    ),
    "Relu": Doubt(
        "Apple's page calls relu 'Clamped ReLU' without saying where it clamps; gatepack assumes MIL's plain relu"
    ),
}

# BNNSGraph runs a whole model from the Core ML package compiled (BNNSGraphCompileFromFile on an .mlmodelc)
WHOLE_MODEL_VIA = (
    "coreml",
    "to run the whole model on BNNSGraph, use --to coreml and compile the package (xcrun coremlcompiler compile "
    "MODEL.mlpackage OUT/), which BNNSGraphCompileFromFile loads",
)

CAPABILITIES = Capabilities(
    NAME,
    per_cell(apple_op, "BNNSGraph.Builder", SPELLED, _DOUBTS, cells=BUILT_IN_OPS),
    container="the generated Swift",
    transposes="transposes around the calls",
    dynamic_shapes="unknown dimensions become flexible, -1",
    alternatives=frozen({"sequence_lens": "pad and drop sequence_lens"}),
)

INFO = FormatInfo(
    NAME,
    "BNNSGraph bundle",
    "directory with bnns.json",
    "none here (NumPy executor of BNNS semantics)",
    rank=50,
    runs_here=False,
    constant_form="a .npy file the Swift code makes a constant tensor",
    markers=("bnns.json",),
    capabilities=CAPABILITIES,
    whole_model_via=WHOLE_MODEL_VIA,
    is_directory=True,
    recognise=has_markers("bnns.json"),
    model_weights_refusal="a BNNS bundle is the recurrent layers alone (one BNNSGraph call per direction, float "
    "weights): it holds no other weights, and no quantized ones",
)

"""DirectML's recurrent descs as gatepack reads and writes them: the artifact's file names, the operators,
their tensor fields and the interface role of each, data types, DirectML's activation operators (and what each
computes, in NumPy), and what onnxruntime's DirectML execution provider computes differently from ONNX.

The base of the DirectML modules (and what the ONNX format consults for the DirectML provider); it imports
none of them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gatepack.converters.capabilities import lacks
from gatepack.converters.formats.directml.registration import CAPABILITIES as DIRECTML
from gatepack.converters.formats.onnx.registration import FOR_DIRECTML as ONNX_FOR_DIRECTML
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import ROLE_LABELS, Cell, Direction, RecurrentLayer

FORMAT = "directml"
MODEL_FILE = "model.json"
MANIFEST_FILE = "gatepack.json"
CPP_FILE = "desc.cpp"
MANIFEST_FORMAT = "gatepack-directml"
OPERATORS = {Cell.GRU: "DML_OPERATOR_GRU", Cell.RNN: "DML_OPERATOR_RNN", Cell.LSTM: "DML_OPERATOR_LSTM"}
DIRECTIONS = {
    Direction.FORWARD: "DML_RECURRENT_NETWORK_DIRECTION_FORWARD",
    Direction.REVERSE: "DML_RECURRENT_NETWORK_DIRECTION_BACKWARD",
    Direction.BIDIRECTIONAL: "DML_RECURRENT_NETWORK_DIRECTION_BIDIRECTIONAL",
}

DATA_TYPES = {"float32": "FLOAT32", "float16": "FLOAT16", "uint32": "UINT32"}

# Canonical (ONNX) activation -> DirectML activation operator and its fields, as (canonical, DML).
ACTIVATIONS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "Sigmoid": ("ACTIVATION_SIGMOID", ()),
    "Tanh": ("ACTIVATION_TANH", ()),
    "Relu": ("ACTIVATION_RELU", ()),
    "Softsign": ("ACTIVATION_SOFTSIGN", ()),
    "Softplus": ("ACTIVATION_SOFTPLUS", ()),  # plus Steepness = 1.0
    "Affine": ("ACTIVATION_LINEAR", (("alpha", "Alpha"), ("beta", "Beta"))),
    "LeakyRelu": ("ACTIVATION_LEAKY_RELU", (("alpha", "Alpha"),)),
    "ThresholdedRelu": ("ACTIVATION_THRESHOLDED_RELU", (("alpha", "Alpha"),)),
    "ScaledTanh": ("ACTIVATION_SCALED_TANH", (("alpha", "Alpha"), ("beta", "Beta"))),
    "HardSigmoid": ("ACTIVATION_HARD_SIGMOID", (("alpha", "Alpha"), ("beta", "Beta"))),
    "Elu": ("ACTIVATION_ELU", (("alpha", "Alpha"),)),
}

ACTIVATION_OF_OPERATOR = {dml: name for name, (dml, _) in ACTIVATIONS.items()}

# Desc fields: (field, role, optional, is output)
INPUT_FIELDS = (
    "InputTensor",
    "WeightTensor",
    "RecurrenceTensor",
    "BiasTensor",
    "HiddenInitTensor",
    "CellMemInitTensor",
    "SequenceLengthsTensor",
    "PeepholeTensor",
)

OUTPUT_FIELDS = ("OutputSequenceTensor", "OutputSingleTensor", "OutputCellSingleTensor")

# The desc fields only the LSTM desc has.
LSTM_FIELDS = {
    "CellMemInitTensor",
    "PeepholeTensor",
    "OutputCellSingleTensor",
    "ClipThreshold",
    "UseClipThreshold",
    "CoupleInputForget",
}

# Interface roles of the tensor fields (ONNX's names, as the manifest records them), and each field's
# interface attribute.
FIELD_ROLES = {
    "InputTensor": "X",
    "HiddenInitTensor": "initial_h",
    "CellMemInitTensor": "initial_c",
    "SequenceLengthsTensor": "sequence_lens",
    "OutputSequenceTensor": "Y",
    "OutputSingleTensor": "Y_h",
    "OutputCellSingleTensor": "Y_c",
}

FIELD_OF_ROLE = {
    "sequence_lens": "SequenceLengthsTensor",
    "initial_h": "HiddenInitTensor",
    "initial_c": "CellMemInitTensor",
}

ROLE_FIELDS = {field: {label: role for role, label in ROLE_LABELS.items()}[name] for field, name in FIELD_ROLES.items()}
REQUIRED_FIELDS = ("InputTensor", "WeightTensor", "RecurrenceTensor")
SEQUENCE_LENGTHS_NOTE = DIRECTML.ops[Cell.GRU].warnings["sequence_lens"].text  # what DirectML leaves undocumented


def to_activation(kind: str, params: dict[str, float]) -> Activation:
    name = ACTIVATION_OF_OPERATOR[kind]
    values = {canonical: params[dml] for canonical, dml in ACTIVATIONS[name][1]}
    return Activation(name, values.get("alpha"), values.get("beta"))


def dml_activation(kind: str, params: dict[str, float]) -> Callable[[np.ndarray], np.ndarray]:
    """DirectML's activation operator as a NumPy function (formulas in the module docstring).

    All but SOFTPLUS are the ONNX functions of the same name; SOFTPLUS scales by its Steepness.
    """
    if kind == "ACTIVATION_SOFTPLUS":
        steep = params["Steepness"]
        softplus = Activation("Softplus")

        def scaled(x: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):  # Steepness 0 (the provider's): inf, as computed
                return softplus(x * np.asarray(steep, x.dtype)) / np.asarray(steep, x.dtype)

        return scaled
    return to_activation(kind, params)


# ------------------------------------------------- onnxruntime's DirectML execution provider (docs/conventions.md §4)

# The names the provider maps onto DirectML activation operators, spelled exactly (any other is
# "Unsupported activation function": Affine, or another spelling); its defaults when a node has no
# ``activations``, and the alpha/beta it takes when a stack runs out (ActivationHelper's).
EP_ACTIVATIONS = frozenset(ACTIVATIONS) - {"Affine"}
EP_DEFAULT_PARAMETERS: dict[str, tuple[float, ...]] = {"LeakyRelu": (0.01,), "ThresholdedRelu": (1.0,)}
EP_DEFAULT_PARAMETERS |= {"ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0,)}  # one per field
EP_SOFTPLUS_STEEPNESS = 0.0  # the provider never sets it: the value-initialised desc keeps 0


def ep_mishandled(layer: RecurrentLayer) -> list[str]:
    """What onnxruntime's DirectML provider computes differently from ONNX in ``layer``'s node, as reasons
    (empty: it computes the node exactly once the node is written in layout 0 with every activation explicit):
    ``capabilities.ONNX_FOR_DIRECTML``'s op for the cell, against the layer.

    From its DmlOperatorRecurrentNeuralNetwork.cpp: the GRU and RNN descs have no clip (the attribute is
    never read); ``Affine`` is rejected; ``Softplus`` leaves DirectML's Steepness at 0. LSTM's clip,
    peepholes and input_forget are handed over as the desc's own fields."""
    return list(lacks(layer, ONNX_FOR_DIRECTML.ops[layer.cell]).values())

"""DirectML: GRU/RNN/LSTM layers as runnable DxDispatch models, read back, and executed with DirectML semantics.

An artifact is a directory:

* ``model.json`` - a DxDispatch model (DirectML's own runnable JSON, ``schemas/dxdispatch_model.schema.json``)
  with one dispatchable per layer, ``DML_OPERATOR_GRU``, ``DML_OPERATOR_RNN`` or ``DML_OPERATOR_LSTM``,
  whose ``desc`` keys are the fields of ``DML_GRU_OPERATOR_DESC`` / ``DML_RNN_OPERATOR_DESC`` /
  ``DML_LSTM_OPERATOR_DESC``; every tensor is a resource
  (weights, bias and sample inputs initialised from ``.npy`` files whose shape is the tensor's 4-D
  ``Sizes``), a ``dispatch`` command binds desc fields to resources, ``writeFile`` commands save the
  outputs. A Windows user runs it as is: ``dxdispatch.exe model.json``.
* ``gatepack.json`` - gatepack's manifest: the source's layer names, tensor names, layout and symbolic
  dimensions (DirectML tensors are static and sequence-major), so the layer reads back whole.
* ``desc.cpp`` (``emit_cpp=True``) - C++ that fills the same descs for DirectML users who write C++.

Conventions (docs/conventions.md §4; identical to ONNX up to a reshape, so nothing is repacked)::

    InputTensor            {1, S, N, I}        X, sequence-major
    WeightTensor           {1, D, G*H, I}      W, gate order z, r, h (GRU) / i, o, f, c (LSTM) as ONNX
    RecurrenceTensor       {1, D, G*H, H}      R
    BiasTensor             {1, 1, D, 2*G*H}    [Wb, Rb] per direction (optional)
    HiddenInitTensor       {1, D, N, H}        initial_h (optional)
    CellMemInitTensor      {1, D, N, H}        LSTM: initial_c (optional)
    SequenceLengthsTensor  {1, 1, 1, N}        UINT32 (optional)
    PeepholeTensor         {1, 1, D, 3*H}      LSTM: P, i, o, f (optional)
    OutputSequenceTensor   {S, D, N, H}        Y (optional)
    OutputSingleTensor     {1, D, N, H}        Y_h (optional)
    OutputCellSingleTensor {1, D, N, H}        LSTM: Y_c (optional)
    ActivationDescs        f, g per direction (GRU), f, g, h (LSTM) or f (RNN), forward first, every
                           parameter explicit
    LSTM: UseClipThreshold / ClipThreshold (ONNX's clip), CoupleInputForget (ONNX's input_forget)

DirectML's activation operators (``DML_ACTIVATION_*_OPERATOR_DESC``) compute::

    SIGMOID 1/(1+e^-x)   TANH tanh(x)   RELU max(0,x)   SOFTSIGN x/(1+|x|)
    LINEAR Alpha*x+Beta   LEAKY_RELU x if x>=0 else Alpha*x   THRESHOLDED_RELU x if x>Alpha else 0
    SCALED_TANH Alpha*tanh(Beta*x)   HARD_SIGMOID max(0, min(Alpha*x+Beta, 1))
    ELU x if x>=0 else Alpha*(e^x-1)   SOFTPLUS log(1+e^(Steepness*x))/Steepness (Steepness >= 1)

DirectML's GRU and RNN have no ``clip``, no operator has double precision; it does not document what
happens past a sequence's length, so gatepack follows onnxruntime (zeros past each length, reverse from
len-1). The LSTM desc maps one to one onto the ONNX node (onnxruntime's DirectML provider passes the
ONNX tensors, reshaped to 4-D, ``clip`` and ``input_forget`` straight into it: docs/conventions.md §8).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

import numpy as np

from gatepack.converters.errors import InputError, NoRecurrentLayerError, RuntimeFailure, UsageError
from gatepack.converters.executor import CellOptions
from gatepack.converters.fileio import atomic_path, contained_file, load_npy, read_json
from gatepack.converters.findings import Finding, Status
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import FormatImplementation
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import (
    CONSTANT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    PERM_Y_TO_BATCH_MAJOR,
    ROLE_LABELS,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    dim_text,
    stack_directions,
)

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
_BY_DML_TYPE = {dml: name for name, (dml, _) in ACTIVATIONS.items()}

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
MAX_INLINE_VALUES = 1 << 26  # values an inline (constant or sequence) initializer may declare: a few bytes of JSON
SEQUENCE_LENGTHS_NOTE = (
    "DirectML does not document sequence-length behaviour; gatepack assumes onnxruntime's "
    "(zeros past each length, the reverse direction starts at len-1, Y_h = 0 for len 0)"
)


# ----------------------------------------------------------------------------------------- writing


SizeOption = Union[int, dict[str, int], None]  # one size, or a size per layer name


def write(
    model: Model,
    path: str | Path,
    *,
    emit_cpp: bool = False,
    seq_length: SizeOption = None,
    batch_size: SizeOption = None,
) -> None:
    """Write ``model``'s layers as a DxDispatch model directory at ``path`` (atomically).

    DirectML tensors are static: symbolic or unknown S/N take ``seq_length`` / ``batch_size`` (one
    size, or a size per layer name; default 7 / 3); the sample inputs are random (seed 0).
    float64 layers are written as FLOAT32 (lossy).
    """
    from gatepack.converters.samples import sample_inputs

    rng = np.random.default_rng(0)
    writer = _ModelWriter()
    model = with_separate_inputs(model)
    for layer in model.layers:
        sizes = written_sizes(layer, seq_length, batch_size)
        writer.add_layer(layer, sizes, sample_inputs(layer, rng, sizes))
    with atomic_path(Path(path), directory=True) as tmp:
        for name, array in writer.arrays.items():
            np.save(tmp / name, array, allow_pickle=False)
        (tmp / MODEL_FILE).write_text(json.dumps(writer.document(), indent=2) + "\n")
        (tmp / MANIFEST_FILE).write_text(
            json.dumps(
                {"format": MANIFEST_FORMAT, "version": 1, "model": MODEL_FILE, "layers": writer.manifest}, indent=2
            )
            + "\n"
        )
        if emit_cpp:
            from gatepack.converters.formats.directml_cpp import emit

            (tmp / CPP_FILE).write_text(emit(writer.document(), str(model.path or "")))


class _ModelWriter:
    """Accumulates resources, dispatchables, commands and the manifest of one DxDispatch model."""

    def __init__(self) -> None:
        self.resources: dict[str, dict] = {}
        self.dispatchables: dict[str, dict] = {}
        self.commands: list[dict] = []
        self.manifest: list[dict] = []
        self.arrays: dict[str, np.ndarray] = {}  # file name -> contents

    def document(self) -> dict:
        return {
            "$schema": "https://raw.githubusercontent.com/microsoft/DirectML/master/DxDispatch/models/_schema.json",
            "resources": self.resources,
            "dispatchables": self.dispatchables,
            "commands": self.commands,
        }

    def _fresh(self, name: str, taken: dict) -> str:
        candidate, k = name, 1
        while candidate in taken:
            k += 1
            candidate = f"{name}__{k}"
        return candidate

    def _file_resource(self, name: str, array: np.ndarray) -> str:
        resource = self._fresh(name, self.resources)
        file_name = self._fresh(re.sub(r"[^A-Za-z0-9_.-]", "_", resource) + ".npy", self.arrays)
        self.arrays[file_name] = np.ascontiguousarray(array)
        self.resources[resource] = {
            "initialValuesDataType": DATA_TYPES[array.dtype.name],
            "initialValues": {"sourcePath": file_name},
        }
        return resource

    def _output_resource(self, name: str, dtype: str, sizes: list[int]) -> str:
        resource = self._fresh(name, self.resources)
        self.resources[resource] = {
            "initialValuesDataType": DATA_TYPES[dtype],
            "initialValues": {"valueCount": int(np.prod(sizes)), "value": 0},
        }
        target = re.sub(r"[^A-Za-z0-9_.-]", "_", resource) + ".output.npy"
        self.commands.append({"type": "writeFile", "resource": resource, "targetPath": target})
        return resource

    def add_layer(self, layer: RecurrentLayer, sizes: tuple[int, int], role_inputs: dict[str, np.ndarray]) -> None:
        itf = layer.interface
        dtype = "float32" if layer.dtype == np.float64 else itf.dtype
        s, n = sizes
        d, h = layer.num_directions, layer.hidden_size
        prefix = layer.name
        desc: dict = {}
        bindings: dict[str, str] = {}
        tensors: dict[str, dict] = {}

        def bind_array(
            field: str, name: str, array: np.ndarray, role: str | None = None, source_name: str | None = None
        ) -> None:
            desc[field] = tensor_desc(DATA_TYPES[array.dtype.name], list(array.shape))
            bindings[field] = self._file_resource(name, array)
            if role:
                tensors[role] = {"field": field, "resource": bindings[field], "source_name": source_name}

        cast = np.dtype(dtype)
        bind_array("InputTensor", itf.x, role_inputs["X"].astype(cast)[None], "X", itf.x)
        # the source's [D, ...] weights as they are when possible (no copy of a memory-mapped model)
        bind_array(
            "WeightTensor",
            f"{prefix}.W",
            stack_directions([p.W for p in layer.directions]).astype(cast, copy=False)[None],
        )
        bind_array(
            "RecurrenceTensor",
            f"{prefix}.R",
            stack_directions([p.R for p in layer.directions]).astype(cast, copy=False)[None],
        )
        if layer.has_bias or any(p.Wb.any() or p.Rb.any() for p in layer.directions):
            bias = np.stack([np.concatenate([p.Wb, p.Rb]) for p in layer.directions]).astype(cast)
            bind_array("BiasTensor", f"{prefix}.B", bias[None, None])
        for field, role in (("HiddenInitTensor", "initial_h"), ("CellMemInitTensor", "initial_c")):
            if getattr(itf, role):
                name = getattr(itf, role)
                held = layer.constant_state(role, n)  # a constant of the source: its value, never a sample
                bind_array(field, name, (role_inputs[role] if held is None else held).astype(cast)[None], role, name)
                tensors[role]["constant"] = held is not None
        if layer.has_peepholes:
            peepholes = [p.P for p in layer.directions if p.P is not None]  # every direction's (validated)
            bind_array("PeepholeTensor", f"{prefix}.P", np.stack(peepholes).astype(cast)[None, None])
        if itf.sequence_lens:
            held = layer.constant("sequence_lens")
            bind_array(
                "SequenceLengthsTensor",
                itf.sequence_lens,
                (role_inputs["sequence_lens"] if held is None else held).astype(np.uint32).reshape(1, 1, 1, n),
                "sequence_lens",
                itf.sequence_lens,
            )
            tensors["sequence_lens"]["constant"] = held is not None
        for field, role, source_name, shape in (
            ("OutputSequenceTensor", "Y", itf.y, [s, d, n, h]),
            ("OutputSingleTensor", "Y_h", itf.y_h, [1, d, n, h]),
            ("OutputCellSingleTensor", "Y_c", itf.y_c, [1, d, n, h]),
        ):
            if source_name:
                desc[field] = tensor_desc(DATA_TYPES[dtype], shape)
                bindings[field] = self._output_resource(source_name, dtype, shape)
                tensors[role] = {"field": field, "resource": bindings[field], "source_name": source_name}
        acts = [activation_desc(a) for p in layer.directions for a in p.activations]
        desc["ActivationDescCount"] = len(acts)
        desc["ActivationDescs"] = acts
        desc["Direction"] = DIRECTIONS[layer.direction]
        if layer.cell is Cell.GRU:
            desc["LinearBeforeReset"] = bool(layer.linear_before_reset)
        if layer.cell is Cell.LSTM:
            desc["ClipThreshold"] = float(layer.clip or 0.0)
            desc["UseClipThreshold"] = layer.clip is not None
            desc["CoupleInputForget"] = bool(layer.input_forget)
        name = self._fresh(layer.name, self.dispatchables)
        self.dispatchables[name] = {"type": OPERATORS[layer.cell], "desc": desc}
        # Every dispatch runs before any writeFile (which saves the outputs), in layer order.
        self.commands.insert(
            len([c for c in self.commands if c["type"] == "dispatch"]),
            {"type": "dispatch", "dispatchable": name, "bindings": bindings},
        )
        self.manifest.append(
            {
                "name": layer.name,
                "dispatchable": name,
                "source_layout": itf.layout,
                "tensor_layout": "sequence-major: X {1,S,N,I}, initial_h {1,D,N,H}, Y {S,D,N,H}, Y_h {1,D,N,H}"
                + (" (initial_c and Y_c as initial_h and Y_h)" if layer.cell is Cell.LSTM else ""),
                "layout_note": (
                    "the source is batch-major (layout 1): transpose X [N,S,I] -> [S,N,I] and initial_h [N,D,H] -> "
                    "[D,N,H] "
                    "before binding, and Y [S,D,N,H] -> [N,S,D,H], Y_h [D,N,H] -> [N,D,H] after"
                    if itf.layout == 1
                    else "the source is sequence-major (layout 0): tensors are the source's, with leading 1s"
                ),
                "source_dims": {"seq_length": itf.seq_length, "batch_size": itf.batch_size},
                "written_dims": {"seq_length": s, "batch_size": n},
                "source_dtype": itf.dtype,
                "tensors": tensors,
                "sequence_lens": SEQUENCE_LENGTHS_NOTE if itf.sequence_lens else None,
            }
        )


def written_sizes(
    layer: RecurrentLayer, seq_length: SizeOption = None, batch_size: SizeOption = None
) -> tuple[int, int]:
    """(S, N) of a layer's static DirectML tensors: the source's static sizes, else the options'."""
    from gatepack.converters.samples import DEFAULT_BATCH, DEFAULT_SEQ_LENGTH

    out = []
    for label, dim, option, default in (
        ("seq_length", layer.interface.seq_length, seq_length, DEFAULT_SEQ_LENGTH),
        ("batch_size", layer.interface.batch_size, batch_size, DEFAULT_BATCH),
    ):
        value = option.get(layer.name) if isinstance(option, dict) else option
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{label} must be a positive integer, got {value!r}")
        out.append(dim if isinstance(dim, int) else value or default)
    from gatepack.converters.samples import check_sample_size

    check_sample_size(layer, out[0], out[1], "--seq-length / --batch-size")
    return out[0], out[1]


def tensor_desc(data_type: str, sizes: list[int]) -> dict:
    """A packed 4-D DML_BUFFER_TENSOR_DESC, every field explicit."""
    element = {"FLOAT32": 4, "FLOAT16": 2, "UINT32": 4}[data_type]
    total = int(np.prod(sizes)) * element
    return {
        "DataType": data_type,
        "Flags": "DML_TENSOR_FLAG_NONE",
        "DimensionCount": len(sizes),
        "Sizes": [int(v) for v in sizes],
        "TotalTensorSizeInBytes": (total + 3) // 4 * 4,
    }


def activation_desc(act: Activation) -> dict:
    """The DxDispatch form of one activation desc: its type and every parameter, explicit."""
    dml, fields = ACTIVATIONS[act.name]
    out: dict = {"Type": dml}
    for canonical, dml_field in fields:
        out[dml_field] = float(getattr(act, canonical))
    if act.name == "Softplus":
        out["Steepness"] = 1.0  # DirectML requires >= 1; onnxruntime's DirectML provider writes an invalid 0
    return out


# ----------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _Dispatch:
    """One GRU/RNN dispatchable of a DxDispatch model, with its bound resources."""

    model_file: Path
    name: str  # the dispatchable's name
    cell: Cell
    desc: dict
    bindings: dict[str, str]  # desc field -> resource name

    def at(self, field: str | None = None) -> str:
        return f"{self.model_file}: layer {self.name!r}: " + (f"{field}: " if field else "")


class _Document:
    """A parsed DxDispatch model file and lazy access to its resources' initial values."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.file = path / MODEL_FILE if path.is_dir() else path
        if not (self.file.exists() or self.file.is_symlink()):
            raise InputError(
                f"{path}: no DxDispatch model here (expected a directory with {MODEL_FILE}, or a .json file)"
            )
        # inside a directory, model.json is a file of the artifact: it may not lead outside it
        data = read_json(contained_file(path, MODEL_FILE, str(self.file)) if path.is_dir() else self.file)
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), t) for k, t in (("resources", dict), ("dispatchables", dict), ("commands", list))
        ):
            raise InputError(
                f"{self.file}: not a DxDispatch model (it needs 'resources' and 'dispatchables' objects and a "
                "'commands' list)"
            )
        self.data: dict[str, Any] = data
        self._cache: dict[str, np.ndarray] = {}

    def dispatches(self) -> tuple[list[_Dispatch], list[tuple[str, str]]]:
        """The recurrent dispatches in command order, and the dispatchables gatepack skips."""
        found, skipped = [], []
        commands = [c for c in self.data["commands"] if isinstance(c, dict) and c.get("type") == "dispatch"]
        for name, dispatchable in self.data["dispatchables"].items():
            kind = str(dispatchable.get("type", "")) if isinstance(dispatchable, dict) else ""
            cell = next((c for c, op in OPERATORS.items() if kind in (op, op.removeprefix("DML_OPERATOR_"))), None)
            if cell is None:
                skipped.append((name, f"dispatchable type {kind or '?'} is not a GRU, RNN or LSTM operator"))
                continue
            desc = dispatchable.get("desc", dispatchable.get("Desc"))
            if not isinstance(desc, dict):
                raise InputError(f"{self.file}: layer {name!r}: the dispatchable has no 'desc' object")
            uses = [c for c in commands if c.get("dispatchable") == name]
            if not uses:
                raise InputError(
                    f"{self.file}: layer {name!r}: no dispatch command binds its tensors",
                    hint='add {"type": "dispatch", "dispatchable": ..., "bindings": {...}}',
                )
            bindings = {}
            given = uses[0].get("bindings")
            if not isinstance(given, dict):
                raise InputError(
                    f"{self.file}: layer {name!r}: the dispatch command's bindings {given!r} are not an object of "
                    "desc field -> resource"
                )
            for field, value in given.items():
                resource = value.get("name") if isinstance(value, dict) else value
                if not isinstance(resource, str):
                    raise InputError(
                        f"{self.file}: layer {name!r}: binding {field} must name one resource, got {value!r}"
                    )
                bindings[field] = resource
            found.append(_Dispatch(self.file, name, cell, desc, bindings))
        found.sort(key=lambda d: next(i for i, c in enumerate(commands) if c.get("dispatchable") == d.name))
        return found, skipped

    def initial_values(self, dispatch: _Dispatch, field: str) -> np.ndarray:
        """The bound resource's initial contents, shaped and typed as the desc's tensor says."""
        resource = dispatch.bindings.get(field)
        if resource is None:
            raise InputError(f"{dispatch.at(field)}the dispatch command binds no resource to it")
        spec = self.data["resources"].get(resource)
        if not isinstance(spec, dict):
            raise InputError(f"{dispatch.at(field)}bound resource {resource!r} is not declared in 'resources'")
        sizes, dtype = tensor_shape(dispatch, field)
        values = self._cache.get(resource)
        if values is None:
            values = self._cache[resource] = self._load(
                dispatch, field, resource, spec, dtype, int(np.prod(sizes, dtype=object))
            )
        if values.shape != tuple(sizes) and not (values.ndim == 1 and values.size == int(np.prod(sizes))):
            raise InputError(
                f"{dispatch.at(field)}Sizes {sizes} contradict resource {resource!r}, which holds shape "
                f"{list(values.shape)}"
            )
        if values.dtype != dtype:
            raise InputError(
                f"{dispatch.at(field)}DataType {DATA_TYPES[dtype.name]} but resource {resource!r} holds {values.dtype}"
            )
        return values.reshape(sizes)

    def _load(
        self, dispatch: _Dispatch, field: str, resource: str, spec: dict, dtype: np.dtype, size: int
    ) -> np.ndarray:
        """The resource's initial values; a declared count is checked against the desc's ``size``
        elements before anything is allocated."""
        init = spec.get("initialValues")
        at = f"{dispatch.at(field)}resource {resource!r}: "
        if isinstance(init, dict) and "sourcePath" in init:
            source = init["sourcePath"]
            if not isinstance(source, str) or not source.lower().endswith(".npy"):
                raise InputError(f"{at}sourcePath {source!r}: gatepack reads .npy initial values only")
            return load_npy(contained_file(self.file.parent, source, f"{at}sourcePath"), f"{at}{source}")
        declared = spec.get("initialValuesDataType", "")
        try:
            if isinstance(init, list):
                if len(init) != size:
                    raise InputError(f"{at}{len(init)} initial values for a tensor of {size} elements")
                return np.asarray([float(v) for v in init]).astype(dtype)
            if isinstance(init, dict) and "valueCount" in init:
                count = init["valueCount"]
                if isinstance(count, bool) or not isinstance(count, int) or count != size:
                    raise InputError(f"{at}valueCount {count!r} does not match the tensor's {size} elements")
                if count > MAX_INLINE_VALUES:
                    raise InputError(
                        f"{at}valueCount {count:,} is more than gatepack generates from an inline initializer "
                        f"({MAX_INLINE_VALUES:,}); store the values in a .npy file"
                    )
                if "value" in init:
                    return np.full(count, float(init["value"])).astype(dtype)
                return (float(init["valueStart"]) + float(init["valueDelta"]) * np.arange(count)).astype(dtype)
        except (TypeError, ValueError, KeyError) as err:
            raise InputError(f"{at}unreadable initialValues ({err})") from None
        raise InputError(
            f"{at}initialValues of data type {declared or '?'} is not an array, constant, sequence or .npy initializer"
        )


def tensor_shape(dispatch: _Dispatch, field: str) -> tuple[list[int], np.dtype]:
    """The 4-D Sizes and NumPy dtype of a desc tensor, checked."""
    tensor = dispatch.desc.get(field)
    if not isinstance(tensor, dict):
        raise InputError(f"{dispatch.at(field)}the desc has no tensor desc for it")
    tensor = tensor.get("Desc", tensor) if "Desc" in tensor else tensor
    sizes = tensor.get("Sizes")
    if not isinstance(sizes, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        raise InputError(f"{dispatch.at(field)}Sizes {sizes!r} is not a list of positive integers")
    if len(sizes) != 4:
        raise InputError(
            f"{dispatch.at(field)}Sizes {sizes} are {len(sizes)}-D; DirectML recurrent operators take 4-D tensors"
        )
    if tensor.get("DimensionCount", 4) != 4:
        raise InputError(f"{dispatch.at(field)}DimensionCount {tensor['DimensionCount']} contradicts its 4-D Sizes")
    data_type = str(tensor.get("DataType", "")).removeprefix("DML_TENSOR_DATA_TYPE_")
    by_name = {v: k for k, v in DATA_TYPES.items()}
    if data_type not in by_name:
        raise InputError(f"{dispatch.at(field)}DataType {tensor.get('DataType')!r} is not FLOAT32, FLOAT16 or UINT32")
    strides = tensor.get("Strides")
    packed = [int(np.prod(sizes[k + 1 :])) for k in range(4)]
    if strides is not None and (not isinstance(strides, list) or strides != packed):
        raise InputError(
            f"{dispatch.at(field)}Strides {strides} are not packed ({packed}); gatepack reads packed tensors only"
        )
    flags = str(tensor.get("Flags", "NONE")).removeprefix("DML_TENSOR_FLAG_")
    if flags != "NONE":
        raise InputError(
            f"{dispatch.at(field)}Flags {tensor.get('Flags')!r}: recurrent operators accept DML_TENSOR_FLAG_NONE only"
        )
    dtype = np.dtype(by_name[data_type])
    total, minimum = tensor.get("TotalTensorSizeInBytes"), (int(np.prod(sizes)) * dtype.itemsize + 3) // 4 * 4
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < minimum):
        raise InputError(
            f"{dispatch.at(field)}TotalTensorSizeInBytes {total!r} is not a byte count of at least {minimum}, what "
            "its Sizes and DataType need (DMLCalcBufferTensorSize)"
        )
    return sizes, dtype


def _enum(value: object, prefix: str) -> str:
    return str(value).removeprefix(prefix)


def read_activation(dispatch: _Dispatch, index: int, desc: object) -> tuple[str, dict[str, float]]:
    """(DML type without prefix, float fields) of ActivationDescs[index], checked."""
    at = f"{dispatch.at('ActivationDescs')}[{index}] "
    if not isinstance(desc, dict):
        raise InputError(f"{at}is not an object")
    fields = (
        dict(desc.get("Desc", {}))
        if isinstance(desc.get("Desc"), dict)
        else {k: v for k, v in desc.items() if k != "Type"}
    )
    kind = _enum(desc.get("Type", ""), "DML_OPERATOR_")
    if kind not in _BY_DML_TYPE:
        raise InputError(
            f"{at}type {desc.get('Type')!r} is not an activation a DirectML recurrent operator takes",
            hint=f"one of {', '.join(sorted(_BY_DML_TYPE))}",
        )
    wanted = [f for _, f in ACTIVATIONS[_BY_DML_TYPE[kind]][1]] + (
        ["Steepness"] if kind == "ACTIVATION_SOFTPLUS" else []
    )
    params = {}
    for name in wanted:
        value = fields.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise InputError(f"{at}{kind} needs a finite {name}, got {value!r}")
        params[name] = float(value)
    extra = sorted(set(fields) - set(wanted) - {"InputTensor", "OutputTensor"})
    if extra:
        raise InputError(f"{at}{kind} has no field(s) {extra}")
    if kind == "ACTIVATION_SOFTPLUS" and params["Steepness"] < 1:
        raise InputError(
            f"{at}ACTIVATION_SOFTPLUS Steepness {params['Steepness']:g} is below 1, which DirectML rejects"
        )
    return kind, params


def _direction(dispatch: _Dispatch) -> Direction:
    value = _enum(dispatch.desc.get("Direction", ""), "DML_RECURRENT_NETWORK_DIRECTION_")
    found = {"FORWARD": Direction.FORWARD, "BACKWARD": Direction.REVERSE, "BIDIRECTIONAL": Direction.BIDIRECTIONAL}.get(
        value
    )
    if found is None:
        raise InputError(
            f"{dispatch.at('Direction')}{dispatch.desc.get('Direction')!r} is not FORWARD, BACKWARD or BIDIRECTIONAL"
        )
    return found


def _flag(dispatch: _Dispatch, field: str) -> bool:
    value = dispatch.desc.get(field, False)
    if value in (True, False, 0, 1, "TRUE", "FALSE", "true", "false"):
        return value in (True, 1, "TRUE", "true")
    raise InputError(f"{dispatch.at(field)}{value!r} is not a BOOL")


@dataclass(frozen=True)
class _Recurrence:
    """A GRU/RNN/LSTM desc with its tensors, checked against one another (sequence-major, as DirectML)."""

    dispatch: _Dispatch
    direction: Direction
    linear_before_reset: bool
    clip: float | None  # LSTM: ClipThreshold when UseClipThreshold
    couple_input_forget: bool  # LSTM
    activations: list[tuple[str, dict[str, float]]]  # per direction, in order
    tensors: dict[str, np.ndarray | None]  # desc field -> 4-D array (None: absent optional input)
    output_shapes: dict[str, tuple[list[int], np.dtype]]

    def required(self, field: str) -> np.ndarray:
        """The tensor of a field every desc binds (``REQUIRED_FIELDS``: X, W, R)."""
        tensor = self.tensors[field]
        assert tensor is not None, f"{field} is required: the reader refuses a desc without it"
        return tensor

    @property
    def sizes(self) -> tuple[int, int, int, int, int]:
        """(S, N, I, D, H)."""
        _, s, n, i = self.required("InputTensor").shape
        _, d, _, h = self.required("RecurrenceTensor").shape
        return s, n, i, d, h

    def weights(
        self, k: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[tuple[str, dict[str, float]]]]:
        """Direction ``k``'s (W, R, Wb, Rb, activation descs): the 4-D tensors unpacked, the bias split."""
        w, r, bias = (
            self.required("WeightTensor")[0, k],
            self.required("RecurrenceTensor")[0, k],
            self.tensors["BiasTensor"],
        )
        gh = w.shape[0]
        b = np.zeros(2 * gh, w.dtype) if bias is None else bias[0, 0, k]
        per = self.dispatch.cell.activation_count
        return w, r, b[:gh], b[gh:], self.activations[k * per : (k + 1) * per]

    def peephole(self, k: int) -> np.ndarray | None:
        """Direction ``k``'s peepholes [3H] (i, o, f), or None."""
        tensor = self.tensors.get("PeepholeTensor")
        return None if tensor is None else tensor[0, 0, k]


def load_recurrence(
    document: _Document, dispatch: _Dispatch, overrides: dict[str, np.ndarray] | None = None
) -> _Recurrence:
    """Read and cross-check one GRU/RNN/LSTM desc; ``overrides`` replace bound inputs (desc field -> array)."""
    overrides = overrides or {}
    desc = dispatch.desc
    lstm = dispatch.cell is Cell.LSTM
    known = (
        (set(INPUT_FIELDS + OUTPUT_FIELDS) - LSTM_FIELDS)
        | {"ActivationDescCount", "ActivationDescs", "Direction"}
        | ({"LinearBeforeReset"} if dispatch.cell is Cell.GRU else set())
        | (LSTM_FIELDS if lstm else set())
    )
    unknown = sorted(set(desc) - known)
    if unknown:
        raise InputError(f"{dispatch.at()}unknown desc field(s) {unknown} for {OPERATORS[dispatch.cell]}")
    direction = _direction(dispatch)
    lbr = _flag(dispatch, "LinearBeforeReset") if dispatch.cell is Cell.GRU else False
    clip = None
    if lstm and _flag(dispatch, "UseClipThreshold"):
        clip = desc.get("ClipThreshold")
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not np.isfinite(clip) or clip <= 0:
            raise InputError(f"{dispatch.at('ClipThreshold')}{clip!r} is not a positive number")
        clip = float(clip)
    couple = _flag(dispatch, "CoupleInputForget") if lstm else False
    tensors: dict[str, np.ndarray | None] = {}
    for field in INPUT_FIELDS:
        if field not in desc:
            if field in REQUIRED_FIELDS:
                raise InputError(f"{dispatch.at(field)}is required")
            tensors[field] = None
            continue
        if field in overrides:
            sizes, dtype = tensor_shape(dispatch, field)
            value = np.asarray(overrides[field])
            if value.shape != tuple(sizes):
                raise InputError(
                    f"{dispatch.at(field)}the input has shape {list(value.shape)}, the desc's Sizes are {sizes}"
                )
            if value.dtype.kind not in ("f" if dtype.kind == "f" else "iu"):
                raise InputError(
                    f"{dispatch.at(field)}the input is {value.dtype}; the desc's DataType is {DATA_TYPES[dtype.name]}"
                )
            tensors[field] = value.astype(dtype, copy=False)
        else:
            tensors[field] = document.initial_values(dispatch, field)
    outputs = {f: tensor_shape(dispatch, f) for f in OUTPUT_FIELDS if f in desc}
    if not outputs:
        raise InputError(f"{dispatch.at()}binds no output tensor")
    x, r = tensors["InputTensor"], tensors["RecurrenceTensor"]
    assert x is not None and r is not None  # required fields (refused above when absent)
    _, s, n, i = x.shape
    d = direction.count
    gates = dispatch.cell.gates
    h = r.shape[3]
    expected = {
        "WeightTensor": [1, d, gates * h, i],
        "RecurrenceTensor": [1, d, gates * h, h],
        "BiasTensor": [1, 1, d, 2 * gates * h],
        "HiddenInitTensor": [1, d, n, h],
        "CellMemInitTensor": [1, d, n, h],
        "SequenceLengthsTensor": [1, 1, 1, n],
        "PeepholeTensor": [1, 1, d, 3 * h],
    }
    for field, shape in expected.items():
        bound = tensors[field]
        if bound is not None and list(bound.shape) != shape:
            raise InputError(
                f"{dispatch.at(field)}Sizes {list(bound.shape)} do not fit the layer (expected {shape} for S={s}, "
                f"N={n}, I={i}, D={d}, H={h})"
            )
    for field, shape in (
        ("OutputSequenceTensor", [s, d, n, h]),
        ("OutputSingleTensor", [1, d, n, h]),
        ("OutputCellSingleTensor", [1, d, n, h]),
    ):
        if field in outputs and outputs[field][0] != shape:
            raise InputError(f"{dispatch.at(field)}Sizes {outputs[field][0]} do not fit the layer (expected {shape})")
    float_type = x.dtype
    for field in [f for f in INPUT_FIELDS if f != "SequenceLengthsTensor"] + list(OUTPUT_FIELDS):
        bound = tensors.get(field)
        value_type = bound.dtype if bound is not None else outputs.get(field, (None, None))[1]
        if value_type is not None and (value_type != float_type or value_type.kind != "f"):
            raise InputError(
                f"{dispatch.at(field)}DataType {DATA_TYPES.get(value_type.name, value_type.name)} differs from "
                f"InputTensor's {DATA_TYPES.get(float_type.name, float_type.name)} (all must be FLOAT32 or all FLOAT16)"
            )
    lengths = tensors["SequenceLengthsTensor"]
    if lengths is not None:
        if lengths.dtype != np.uint32:
            raise InputError(f"{dispatch.at('SequenceLengthsTensor')}DataType must be UINT32")
        if (lengths > s).any():
            raise InputError(
                f"{dispatch.at('SequenceLengthsTensor')}length {int(lengths.max())} exceeds the sequence length {s}"
            )
    descs = desc.get("ActivationDescs")
    per_direction = dispatch.cell.activation_count
    if not isinstance(descs, list) or len(descs) != per_direction * d:
        got = len(descs) if isinstance(descs, list) else descs
        raise InputError(
            f"{dispatch.at('ActivationDescs')}{OPERATORS[dispatch.cell]} {direction.value} needs "
            f"{per_direction * d} activation descs, got {got}"
        )
    if desc.get("ActivationDescCount", len(descs)) != len(descs):
        raise InputError(
            f"{dispatch.at('ActivationDescCount')}{desc['ActivationDescCount']} but ActivationDescs holds {len(descs)}"
        )
    activations = [read_activation(dispatch, k, a) for k, a in enumerate(descs)]
    return _Recurrence(dispatch, direction, lbr, clip, couple, activations, tensors, outputs)


def read(path: str | Path, **_options) -> Model:
    """Read every GRU/RNN/LSTM dispatchable of a DxDispatch model (gatepack's or hand-written)."""
    document = _Document(path)
    manifest = _manifest(document)
    dispatches, skipped = document.dispatches()
    if not dispatches:
        raise NoRecurrentLayerError(
            f"{document.file}: no DML_OPERATOR_GRU, DML_OPERATOR_RNN or DML_OPERATOR_LSTM dispatchable",
            hint="; ".join(r for _, r in skipped) or None,
        )
    layers, notes = [], {}
    for dispatch in dispatches:
        rec = load_recurrence(document, dispatch)
        entry = manifest.get(dispatch.name, {})
        layer = _to_layer(rec, entry)
        layers.append(layer)
        if entry.get("source_dtype") == "float64":
            notes[layer.name] = [
                Finding(
                    "dtype",
                    Status.EXACT,
                    "FLOAT32",
                    warning="this DirectML model was written from a float64 source; the precision was lost then",
                )
            ]
    return Model(
        document.file.parent if document.file.name == MODEL_FILE else document.file, FORMAT, layers, notes, skipped
    )


def _manifest(document: _Document) -> dict[str, dict]:
    file = document.file.parent / MANIFEST_FILE
    if not (file.exists() or file.is_symlink()):
        return {}
    data = read_json(contained_file(file.parent, MANIFEST_FILE, str(file)))
    try:
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            raise ValueError(
                f"format {data.get('format') if isinstance(data, dict) else None!r} is not {MANIFEST_FORMAT!r}"
            )
        if not isinstance(data.get("layers"), list) or not all(
            isinstance(e, dict) and isinstance(e.get("dispatchable"), str) for e in data["layers"]
        ):
            raise ValueError("'layers' must be a list of objects, each naming its 'dispatchable'")
        entries = {e["dispatchable"]: _checked_entry(e) for e in data["layers"]}
        if len(entries) != len(data["layers"]):
            raise ValueError("two layers name the same dispatchable")
    except ValueError as err:
        raise InputError(
            f"{file}: not a usable gatepack manifest ({' '.join(str(err).split())[:200]})",
            hint=f"delete it to read {MODEL_FILE} alone",
        ) from None
    missing = sorted(set(entries) - set(document.data["dispatchables"]))
    if missing:
        raise InputError(f"{file}: names dispatchable(s) {missing} that {document.file.name} does not have")
    return entries


_ENTRY_TYPES = {"name": str, "source_layout": int, "source_dims": dict, "source_dtype": str, "tensors": dict}
_TENSOR_ROLES = tuple(FIELD_ROLES.values())
_CONSTANT_LABELS = {ROLE_LABELS[role]: role for role in CONSTANT_ROLES}  # manifest role -> constant role


def _checked_entry(entry: dict) -> dict:
    """One manifest entry, its fields typed (ValueError naming the field and value otherwise)."""
    at = f"layer {entry['dispatchable']!r}: "
    for key, kind in _ENTRY_TYPES.items():
        value = entry.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise ValueError(f"{at}{key} {value!r} is not a {kind.__name__}")
    if entry.get("source_layout", 0) not in (0, 1):
        raise ValueError(f"{at}source_layout {entry['source_layout']!r} is not 0 or 1")
    for role, tensor in (entry.get("tensors") or {}).items():
        if (
            role not in _TENSOR_ROLES
            or not isinstance(tensor, dict)
            or not isinstance(tensor.get("source_name", ""), (str, type(None)))
            or not isinstance(tensor.get("constant", False), bool)
            or (tensor.get("constant") and role not in _CONSTANT_LABELS)
        ):
            raise ValueError(f"{at}tensors[{role!r}] {tensor!r} is not a tensor entry with a source_name string")
    for key, dim in (entry.get("source_dims") or {}).items():
        if (
            key not in ("seq_length", "batch_size")
            or isinstance(dim, bool)
            or not isinstance(dim, (int, str, type(None)))
        ):
            raise ValueError(f"{at}source_dims[{key!r}] {dim!r} is not a size, a symbol or null")
    return entry


def _to_layer(rec: _Recurrence, entry: dict) -> RecurrentLayer:
    dispatch = rec.dispatch
    s, n, i, d, h = rec.sizes
    per = dispatch.cell.activation_count
    directions = []
    for k in range(d):
        w, r, wb, rb, descs = rec.weights(k)
        acts = []
        for index, (kind, params) in enumerate(descs):
            if kind == "ACTIVATION_SOFTPLUS" and params["Steepness"] != 1.0:
                raise InputError(
                    f"{dispatch.at('ActivationDescs')}[{k * per + index}] ACTIVATION_SOFTPLUS Steepness "
                    f"{params['Steepness']:g}: gatepack's layer holds Softplus with Steepness 1 only (the ONNX "
                    "function)"
                )
            acts.append(to_activation(kind, params))
        directions.append(
            DirectionParams(
                W=np.ascontiguousarray(w),
                R=np.ascontiguousarray(r),
                Wb=wb.copy(),
                Rb=rb.copy(),
                activations=tuple(acts),
                P=None if (peepholes := rec.peephole(k)) is None else peepholes.copy(),
            )
        )
    bias = rec.tensors["BiasTensor"]
    tensors = entry.get("tensors") or {}

    def name_of(role: str, field: str) -> str | None:
        if field not in dispatch.desc:
            return None
        return (tensors.get(role) or {}).get("source_name") or dispatch.bindings.get(field) or role

    constants = {}
    for label, role in _CONSTANT_LABELS.items():
        value = rec.tensors.get(FIELD_OF_ROLE[role])
        if (tensors.get(label) or {}).get("constant") and value is not None:
            constants[role] = value.reshape(-1).astype(np.int32) if role == "sequence_lens" else value[0].copy()
    # interface field -> tensor name (Any: a keyword of Interface's, which checks it on construction)
    names: dict[str, Any] = {ROLE_FIELDS[field]: name_of(role, field) for field, role in FIELD_ROLES.items()}
    try:
        interface = Interface(
            **names,
            layout=entry.get("source_layout", 0),
            seq_length=s,
            batch_size=n,
            dtype=directions[0].W.dtype.name,
        )
        layer = RecurrentLayer(
            name=entry.get("name", dispatch.name),
            cell=dispatch.cell,
            input_size=i,
            hidden_size=h,
            direction=rec.direction,
            directions=tuple(directions),
            interface=interface,
            linear_before_reset=rec.linear_before_reset,
            clip=rec.clip,
            input_forget=rec.couple_input_forget,
            has_bias=bias is not None,
            constants=constants,
            provenance=Provenance(FORMAT, dispatch.model_file, dispatch.name, handle=dispatch),
        )
    except SpecError as err:
        raise InputError(f"{dispatch.model_file}: {err}") from None
    return layer


def to_activation(kind: str, params: dict[str, float]) -> Activation:
    name = _BY_DML_TYPE[kind]
    values = {canonical: params[dml] for canonical, dml in ACTIVATIONS[name][1]}
    return Activation(name, values.get("alpha"), values.get("beta"))


# ---------------------------------------------------------------------------------------- executor


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


def execute(rec: _Recurrence) -> dict[str, np.ndarray]:
    """Run a GRU/RNN/LSTM desc as DirectML defines it; returns its bound outputs (desc field -> 4-D array)."""
    s, n, i, d, h = rec.sizes
    directions = []
    for k in range(d):
        w, r, wb, rb, descs = rec.weights(k)
        directions.append((w, r, wb, rb, [dml_activation(kind, params) for kind, params in descs]))
    h0, c0 = rec.tensors["HiddenInitTensor"], rec.tensors.get("CellMemInitTensor")
    lengths = rec.tensors["SequenceLengthsTensor"]
    y, *finals = _run_desc(
        rec.dispatch.cell,
        directions,
        rec.direction,
        rec.required("InputTensor")[0],
        None if lengths is None else lengths.reshape(n).astype(np.int64),
        {"initial_h": None if h0 is None else h0[0], "initial_c": None if c0 is None else c0[0]},
        CellOptions(
            linear_before_reset=rec.linear_before_reset,
            input_forget=rec.couple_input_forget,
            peepholes=tuple(rec.peephole(k) for k in range(d)),
        ),
        rec.clip,
        rec.required("WeightTensor").dtype,
    )
    out = dict(zip(OUTPUT_FIELDS, [y, *(f[None] for f in finals)]))
    return {f: out[f] for f in rec.output_shapes}


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
    (empty: it computes the node exactly once the node is written in layout 0 with every activation explicit).

    From its DmlOperatorRecurrentNeuralNetwork.cpp: the GRU and RNN descs have no clip (the attribute is
    never read); ``Affine`` is rejected; ``Softplus`` leaves DirectML's Steepness at 0. LSTM's clip,
    peepholes and input_forget are handed over as the desc's own fields."""
    reasons = []
    if layer.clip is not None and layer.cell is not Cell.LSTM:
        reasons.append(
            f"clip={layer.clip:g}: DML_{layer.cell.op_name}_OPERATOR_DESC has no clip field, so the provider drops it"
        )
    names = {a.name for p in layer.directions for a in p.activations}
    if "Affine" in names:
        reasons.append("an Affine activation: the provider rejects it (no recurrent activation of its own)")
    if "Softplus" in names:
        reasons.append("a Softplus activation: the provider leaves ACTIVATION_SOFTPLUS's Steepness at 0 (divides by 0)")
    return reasons


def _ep_activations(layer: RecurrentLayer, attrs: dict) -> list[tuple[str, dict[str, float]]]:
    """The DirectML activation operators the provider builds from the node's attributes, per direction in order."""
    per, d = layer.cell.activation_count, layer.num_directions
    names = list(attrs.get("activations") or ()) or list(layer.cell.spec.default_activations) * d
    names = (names + [""] * (per * d))[: per * d]  # the provider resizes the list to the direction count
    alphas, betas = list(attrs.get("activation_alpha") or ()), list(attrs.get("activation_beta") or ())
    descs = []
    for name in names:
        if name not in EP_ACTIVATIONS:
            raise RuntimeFailure(f"layer {layer.name!r}: onnxruntime's DirectML provider rejects activation {name!r}")
        kind, fields = ACTIVATIONS[name]
        default = EP_DEFAULT_PARAMETERS.get(name, ())  # every EP activation with fields has them all
        params: dict[str, float] = {}
        for (canonical, field), stack, fallback in zip(fields, (alphas, betas), default):
            params[field] = stack.pop(0) if stack else fallback  # consumed in order, per parameter
        if name == "Softplus":
            params["Steepness"] = EP_SOFTPLUS_STEEPNESS
        descs.append((kind, params))
    return descs


def run_onnx_node(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``layer``'s ONNX node as onnxruntime's DirectML provider computes it, on gatepack's executor of
    DirectML's operator semantics: the node's attributes read as the provider reads them (its activation
    spellings and defaults, a GRU/RNN clip dropped, LSTM clip/input_forget passed on; layout=1 not taken),
    its weights as stored. ``feed`` and the result are in the layer's interface (names, layout): Transposes
    the reader absorbed around the node are exact on any provider."""
    found = layer.provenance
    if found is None or found.op_type is None:
        raise UsageError(f"layer {layer.name!r} was not read from an ONNX node")
    attrs: dict[str, Any] = dict(found.attributes)  # as written: each attribute's own type
    if attrs.get("layout", 0) != 0:
        raise RuntimeFailure(f"layer {layer.name!r}: onnxruntime's DirectML provider does not run layout=1")
    itf = layer.interface
    batch_major = itf.layout == 1
    x = feed[itf.x]
    x = x.transpose(PERM_SWAP_01) if batch_major else x
    states = {}
    for role in ("initial_h", "initial_c"):
        if role in layer.fed_roles():
            states[role] = feed[getattr(itf, role)].transpose(PERM_SWAP_01) if batch_major else feed[getattr(itf, role)]
        else:
            states[role] = layer.constant_state(role, x.shape[1])
    lengths = (
        feed.get(itf.sequence_lens or "")
        if "sequence_lens" in layer.fed_roles()
        else layer.constants.get("sequence_lens")
    )
    per = layer.cell.activation_count
    descs = _ep_activations(layer, attrs)
    directions = [
        (p.W, p.R, p.Wb, p.Rb, [dml_activation(*desc) for desc in descs[k * per : (k + 1) * per]])
        for k, p in enumerate(layer.directions)
    ]
    lstm = layer.cell is Cell.LSTM
    y, *finals = _run_desc(
        layer.cell,
        directions,
        layer.direction,
        x,
        None if lengths is None else np.asarray(lengths).astype(np.uint32).astype(np.int64),
        states,
        CellOptions(
            linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
            input_forget=lstm and bool(attrs.get("input_forget", 0)),
            peepholes=tuple(p.P for p in layer.directions),
        ),
        attrs.get("clip") if lstm else None,  # GRU/RNN: no clip field
        layer.dtype,
    )
    named = {}
    for role, value in zip(OUTPUT_ROLES, [y, *finals]):
        if getattr(itf, role):
            perm = PERM_Y_TO_BATCH_MAJOR if role == "y" else PERM_SWAP_01
            named[getattr(itf, role)] = value.transpose(perm) if batch_major else value
    return named


def _run_desc(
    cell: Cell,
    directions: list,
    direction: Direction,
    x: np.ndarray,
    lengths: np.ndarray | None,
    states: dict,
    options: "CellOptions",
    clip: float | None,
    dtype: np.dtype,
) -> tuple[np.ndarray, ...]:
    """One GRU/RNN/LSTM desc on the executor: X [S,N,I], ``states`` role -> [D,N,H] or None; Y, finals."""
    from gatepack.converters.executor import run_recurrence

    return run_recurrence(
        cell,
        directions,
        reverse=[direction is Direction.REVERSE or k == 1 for k in range(len(directions))],
        x=x,
        sequence_lens=lengths,
        initial_h=states.get("initial_h"),
        initial_c=states.get("initial_c"),
        options=options,
        clip=clip,
        dtype=dtype,
    )


def run_numpy(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a DxDispatch model's recurrent dispatches in command order, as DxDispatch would.

    ``inputs`` replace resources' initial values by resource name (in the desc's 4-D shapes);
    resources not given keep the values stored with the model. Returns every output resource.
    """
    document = _Document(path)
    dispatches, _ = document.dispatches()
    if not dispatches:
        raise NoRecurrentLayerError(
            f"{document.file}: no DML_OPERATOR_GRU, DML_OPERATOR_RNN or DML_OPERATOR_LSTM dispatchable"
        )
    bound = {res for dispatch in dispatches for field, res in dispatch.bindings.items() if field in INPUT_FIELDS}
    unknown = sorted(set(inputs) - bound - {res for dispatch in dispatches for res in dispatch.bindings.values()})
    if unknown:
        raise InputError(
            f"{document.file}: input(s) {unknown} are not resources of this model",
            hint=f"its input resources: {sorted(bound)}",
        )
    store = dict(inputs)
    results: dict[str, np.ndarray] = {}
    for dispatch in dispatches:
        overrides = {
            field: store[res] for field, res in dispatch.bindings.items() if field in INPUT_FIELDS and res in store
        }
        outputs = execute(load_recurrence(document, dispatch, overrides))
        for field, value in outputs.items():
            store[dispatch.bindings[field]] = results[dispatch.bindings[field]] = value
    return results


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise RuntimeFailure(
        f"{path}: DirectML runs on Windows only, not here",
        hint="use --engine numpy (gatepack's executor of DirectML's semantics)",
    )


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run one layer's dispatch from its saved DxDispatch model on gatepack's DirectML executor.

    ``feed`` is in the layer's interface (names, layout); the desc is sequence-major, so a
    batch-major layer's tensors are transposed around it, as its manifest tells a DirectML user to.
    """
    found = layer.provenance
    dispatch = found.handle if found is not None and found.of(FORMAT) else None
    assert dispatch is None or isinstance(dispatch, _Dispatch)  # this module's reader's record
    if dispatch is None:
        raise UsageError(f"layer {layer.name!r} was not read from a DirectML model")
    itf = layer.interface
    batch_major = itf.layout == 1
    x = feed[itf.x]
    overrides = {"InputTensor": (x.transpose(PERM_SWAP_01) if batch_major else x)[None]}
    fed = layer.fed_roles()  # a constant input keeps the value stored with the model
    for field, role in (("HiddenInitTensor", "initial_h"), ("CellMemInitTensor", "initial_c")):
        if role in fed:
            state = feed[getattr(itf, role)]
            overrides[field] = (state.transpose(PERM_SWAP_01) if batch_major else state)[None]
    if "sequence_lens" in fed and itf.sequence_lens:  # (a fed role is named)
        lengths = np.asarray(feed[itf.sequence_lens])
        if (lengths < 0).any():
            raise InputError(f"layer {layer.name!r}: sequence_lens value {int(lengths.min())} is negative")
        overrides["SequenceLengthsTensor"] = lengths.astype(np.uint32).reshape(1, 1, 1, -1)
    outputs = execute(load_recurrence(_Document(dispatch.model_file), dispatch, overrides))
    named = {}
    if itf.y:
        y = outputs["OutputSequenceTensor"]
        named[itf.y] = y.transpose(PERM_Y_TO_BATCH_MAJOR) if batch_major else y
    for field, role in (("OutputSingleTensor", "y_h"), ("OutputCellSingleTensor", "y_c")):
        if getattr(itf, role):
            final = outputs[field][0]
            named[getattr(itf, role)] = final.transpose(PERM_SWAP_01) if batch_major else final
    return named


# ---------------------------------------------------------------------------------------- findings


def check(
    layer: RecurrentLayer, *, emit_cpp: bool = False, seq_length: SizeOption = None, batch_size: SizeOption = None
) -> list[Finding]:
    """Findings for writing ``layer`` as a DirectML desc."""
    op = OPERATORS[layer.cell]
    itf = layer.interface
    found = [
        Finding("cell", Status.EXACT, f"{op} ({op.replace('DML_OPERATOR_', 'DML_')}_OPERATOR_DESC)"),
        Finding("direction", Status.EXACT, DIRECTIONS[layer.direction]),
        Finding(
            "weights",
            Status.EXACT,
            f"WeightTensor {{1,D,{layer.gates}H,I}}, RecurrenceTensor {{1,D,{layer.gates}H,H}}: ONNX gate order, "
            "reshaped only",
        ),
        Finding(
            "bias",
            Status.EXACT,
            f"BiasTensor {{1,1,D,{2 * layer.gates}H}} = [Wb, Rb] as ONNX"
            if layer.has_bias
            else "no BiasTensor (zeros)",
        ),
    ]
    if layer.cell is Cell.GRU:
        found.append(
            Finding(
                "linear_before_reset",
                Status.EXACT,
                f"LinearBeforeReset = {str(bool(layer.linear_before_reset)).upper()}",
            )
        )
    if layer.has_peepholes:
        found.append(Finding("peepholes", Status.EXACT, "PeepholeTensor {1,1,D,3H} (i, o, f as ONNX)"))
    if layer.input_forget:
        found.append(Finding("input_forget", Status.EXACT, "CoupleInputForget = TRUE"))
    names = ", ".join(ACTIVATIONS[a.name][0] for a in layer.directions[0].activations)
    all_acts = {a.name for p in layer.directions for a in p.activations}
    warning = None
    if "Affine" in all_acts:
        warning = (
            "Affine is written as ACTIVATION_LINEAR (Alpha*x+Beta), which no shipping converter uses for "
            "recurrent operators: not verified on DirectML hardware (onnxruntime's DirectML provider rejects Affine)"
        )
    detail = (
        f"ActivationDescs {names}"
        + (" per direction" if layer.num_directions == 2 else "")
        + ", every parameter explicit; names are spelling-independent (onnxruntime's DirectML provider accepts "
        "only exact spellings)"
    )
    if "Softplus" in all_acts:
        detail += "; ACTIVATION_SOFTPLUS with Steepness 1.0 (onnxruntime's DirectML provider writes an invalid 0)"
    found.append(Finding("activations", Status.EXACT, detail, warning=warning))
    if layer.clip is not None and layer.cell is Cell.LSTM:
        found.append(
            Finding(
                "clip",
                Status.EXACT,
                f"UseClipThreshold = TRUE, ClipThreshold = {layer.clip:g} (onnxruntime's DirectML provider maps ONNX's "
                "clip onto it)",
            )
        )
    elif layer.clip is not None:
        found.append(
            Finding(
                "clip",
                Status.UNSUPPORTED,
                f"clip={layer.clip:g}: DML_{layer.cell.op_name}_OPERATOR_DESC has no clip field "
                "(onnxruntime's DirectML provider drops clip silently, giving different results)",
                alternative=(
                    "target onnx or openvino, which keep clip; or remove clip from the source if its gates "
                    "never reach it"
                ),
            )
        )
    if itf.sequence_lens:
        found.append(
            Finding(
                "sequence_lens",
                Status.EXACT,
                "SequenceLengthsTensor {1,1,1,N} UINT32 (the ONNX int32 values)",
                warning=SEQUENCE_LENGTHS_NOTE,
            )
        )
    for field, role in (("HiddenInitTensor", "initial_h"), ("CellMemInitTensor", "initial_c")):
        if getattr(itf, role):
            found.append(Finding(role, Status.EXACT, f"{field} {{1,D,N,H}}"))
    outputs = [f for f in OUTPUT_FIELDS if getattr(itf, ROLE_FIELDS[f])]
    found.append(Finding("outputs", Status.EXACT, ", ".join(outputs) + " (as the source requests)"))
    if itf.layout == 1:
        found.append(
            Finding(
                "layout",
                Status.REPACKED,
                "batch-major source: DirectML tensors are sequence-major ({1,S,N,I}); transpose X, the initial "
                "states and the outputs around the operator (the manifest says so)",
            )
        )
    else:
        found.append(Finding("layout", Status.EXACT, "sequence-major, as the source"))
    if layer.dtype == np.float64:
        found.append(
            Finding(
                "dtype",
                Status.LOSSY,
                "DirectML recurrent operators take FLOAT32 or FLOAT16, not double: written as FLOAT32",
                alternative="pass --allow-lossy to accept FLOAT32",
            )
        )
    else:
        found.append(Finding("dtype", Status.EXACT, DATA_TYPES[itf.dtype]))
    static = isinstance(itf.seq_length, int) and isinstance(itf.batch_size, int)
    written = "S={}, N={}".format(*written_sizes(layer, seq_length, batch_size))
    found.append(
        Finding(
            "shapes",
            Status.EXACT,
            f"static {written}"
            if static
            else (
                f"DirectML tensors are static: the symbolic S={dim_text(itf.seq_length)}, "
                f"N={dim_text(itf.batch_size)} are written as {written}"
            ),
            warning=None
            if static
            else (
                "other sizes need other Sizes in the desc (--seq-length/--batch-size; the C++ snippet takes them "
                "as parameters)"
            ),
        )
    )
    return found


IMPLEMENTATION = FormatImplementation(
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    run_numpy=run_numpy,
    run_onnx_node=run_onnx_node,
)

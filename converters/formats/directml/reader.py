"""DirectML reading: a DxDispatch model's GRU/RNN/LSTM dispatchables, each tensor's 4-D ``Sizes`` and
initial values checked, loaded as a desc recurrence (``load_recurrence``), and with gatepack's manifest turned
back into canonical layers (names, layout, symbolic dimensions)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gatepack.converters.errors import InputError, NoRecurrentLayerError
from gatepack.converters.fileio import contained_file, load_npy, read_json
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.directml.desc import (
    ACTIVATION_OF_OPERATOR,
    ACTIVATIONS,
    DATA_TYPES,
    FIELD_OF_ROLE,
    FIELD_ROLES,
    FORMAT,
    INPUT_FIELDS,
    LSTM_FIELDS,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    MODEL_FILE,
    OPERATORS,
    OUTPUT_FIELDS,
    REQUIRED_FIELDS,
    ROLE_FIELDS,
    to_activation,
)
from gatepack.converters.model import Model
from gatepack.schemas.layer import (
    CONSTANT_ROLES,
    ROLE_LABELS,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
)

MAX_INLINE_VALUES = 1 << 26  # values an inline (constant or sequence) initializer may declare: a few bytes of JSON


@dataclass(frozen=True)
class Dispatch:
    """One GRU/RNN dispatchable of a DxDispatch model, with its bound resources."""

    model_file: Path
    name: str  # the dispatchable's name
    cell: Cell
    desc: dict
    bindings: dict[str, str]  # desc field -> resource name

    def at(self, field: str | None = None) -> str:
        return f"{self.model_file}: layer {self.name!r}: " + (f"{field}: " if field else "")


class Document:
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

    def dispatches(self) -> tuple[list[Dispatch], list[tuple[str, str]]]:
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
            found.append(Dispatch(self.file, name, cell, desc, bindings))
        found.sort(key=lambda d: next(i for i, c in enumerate(commands) if c.get("dispatchable") == d.name))
        return found, skipped

    def initial_values(self, dispatch: Dispatch, field: str) -> np.ndarray:
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
        self, dispatch: Dispatch, field: str, resource: str, spec: dict, dtype: np.dtype, size: int
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


def tensor_shape(dispatch: Dispatch, field: str) -> tuple[list[int], np.dtype]:
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


def read_activation(dispatch: Dispatch, index: int, desc: object) -> tuple[str, dict[str, float]]:
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
    if kind not in ACTIVATION_OF_OPERATOR:
        raise InputError(
            f"{at}type {desc.get('Type')!r} is not an activation a DirectML recurrent operator takes",
            hint=f"one of {', '.join(sorted(ACTIVATION_OF_OPERATOR))}",
        )
    wanted = [f for _, f in ACTIVATIONS[ACTIVATION_OF_OPERATOR[kind]][1]] + (
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


def _direction(dispatch: Dispatch) -> Direction:
    value = _enum(dispatch.desc.get("Direction", ""), "DML_RECURRENT_NETWORK_DIRECTION_")
    found = {"FORWARD": Direction.FORWARD, "BACKWARD": Direction.REVERSE, "BIDIRECTIONAL": Direction.BIDIRECTIONAL}.get(
        value
    )
    if found is None:
        raise InputError(
            f"{dispatch.at('Direction')}{dispatch.desc.get('Direction')!r} is not FORWARD, BACKWARD or BIDIRECTIONAL"
        )
    return found


def _flag(dispatch: Dispatch, field: str) -> bool:
    value = dispatch.desc.get(field, False)
    if value in (True, False, 0, 1, "TRUE", "FALSE", "true", "false"):
        return value in (True, 1, "TRUE", "true")
    raise InputError(f"{dispatch.at(field)}{value!r} is not a BOOL")


@dataclass(frozen=True)
class DescRecurrence:
    """A GRU/RNN/LSTM desc with its tensors, checked against one another (sequence-major, as DirectML)."""

    dispatch: Dispatch
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
    document: Document, dispatch: Dispatch, overrides: dict[str, np.ndarray] | None = None
) -> DescRecurrence:
    """Read and cross-check one GRU/RNN/LSTM desc; ``overrides`` replace bound inputs (desc field -> array)."""
    _check_known_fields(dispatch)
    desc = dispatch.desc
    lstm = dispatch.cell is Cell.LSTM
    direction = _direction(dispatch)
    lbr = _flag(dispatch, "LinearBeforeReset") if dispatch.cell is Cell.GRU else False
    clip = None
    if lstm and _flag(dispatch, "UseClipThreshold"):
        clip = desc.get("ClipThreshold")
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not np.isfinite(clip) or clip <= 0:
            raise InputError(f"{dispatch.at('ClipThreshold')}{clip!r} is not a positive number")
        clip = float(clip)
    couple = _flag(dispatch, "CoupleInputForget") if lstm else False
    tensors = _input_tensors(document, dispatch, overrides or {})
    outputs = {f: tensor_shape(dispatch, f) for f in OUTPUT_FIELDS if f in desc}
    if not outputs:
        raise InputError(f"{dispatch.at()}binds no output tensor")
    _check_sizes(dispatch, direction, tensors, outputs)
    _check_data_types(dispatch, tensors, outputs)
    activations = _activation_descs(dispatch, direction)
    return DescRecurrence(dispatch, direction, lbr, clip, couple, activations, tensors, outputs)


def _check_known_fields(dispatch: Dispatch) -> None:
    """Every desc field is one of the operator's."""
    lstm = dispatch.cell is Cell.LSTM
    known = (
        (set(INPUT_FIELDS + OUTPUT_FIELDS) - LSTM_FIELDS)
        | {"ActivationDescCount", "ActivationDescs", "Direction"}
        | ({"LinearBeforeReset"} if dispatch.cell is Cell.GRU else set())
        | (LSTM_FIELDS if lstm else set())
    )
    unknown = sorted(set(dispatch.desc) - known)
    if unknown:
        raise InputError(f"{dispatch.at()}unknown desc field(s) {unknown} for {OPERATORS[dispatch.cell]}")


def _input_tensors(
    document: Document, dispatch: Dispatch, overrides: dict[str, np.ndarray]
) -> dict[str, np.ndarray | None]:
    """Each input field's tensor (None: not bound): an override of the desc's Sizes and kind of DataType, else
    the resource's initial values; a required field must be bound."""
    desc = dispatch.desc
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
    return tensors


def _check_sizes(
    dispatch: Dispatch, direction: Direction, tensors: dict[str, np.ndarray | None], outputs: dict[str, tuple]
) -> None:
    """Every tensor's 4-D Sizes fit X {1, S, N, I} and R's H: W {1, D, G*H, I}, R {1, D, G*H, H}, B {1, 1, D,
    2*G*H}, states {1, D, N, H}, lengths {1, 1, 1, N}, P {1, 1, D, 3*H}, Y {S, D, N, H}, final states."""
    x, r = tensors["InputTensor"], tensors["RecurrenceTensor"]
    assert x is not None and r is not None  # required fields (refused when absent)
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


def _check_data_types(dispatch: Dispatch, tensors: dict[str, np.ndarray | None], outputs: dict[str, tuple]) -> None:
    """Every float tensor of X's float type (FLOAT32 or FLOAT16); lengths UINT32 and at most S."""
    x = tensors["InputTensor"]
    assert x is not None  # a required field (refused when absent)
    s, float_type = x.shape[1], x.dtype
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


def _activation_descs(dispatch: Dispatch, direction: Direction) -> list:
    """The desc's activation descs, as many as the cell takes per direction, each read."""
    desc = dispatch.desc
    d = direction.count
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
    return [read_activation(dispatch, k, a) for k, a in enumerate(descs)]


def read(path: str | Path, **_options) -> Model:
    """Read every GRU/RNN/LSTM dispatchable of a DxDispatch model (gatepack's or hand-written)."""
    document = Document(path)
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


def _manifest(document: Document) -> dict[str, dict]:
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


def _direction_params(rec: DescRecurrence, k: int) -> DirectionParams:
    """Direction ``k``'s weights (copies, contiguous), peepholes and activations; InputError for a Softplus
    whose Steepness is not 1 (the layer holds the ONNX function only)."""
    dispatch = rec.dispatch
    per = dispatch.cell.activation_count
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
    return DirectionParams(
        W=np.ascontiguousarray(w),
        R=np.ascontiguousarray(r),
        Wb=wb.copy(),
        Rb=rb.copy(),
        activations=tuple(acts),
        P=None if (peepholes := rec.peephole(k)) is None else peepholes.copy(),
    )


def _held_constants(rec: DescRecurrence, tensors: dict) -> dict[str, np.ndarray]:
    """The inputs the manifest's ``tensors`` mark constant, as the layer holds them: sequence_lens as int32 [N],
    a state as its [D, N, H] (the resource's first axis dropped)."""
    constants = {}
    for label, role in _CONSTANT_LABELS.items():
        value = rec.tensors.get(FIELD_OF_ROLE[role])
        if (tensors.get(label) or {}).get("constant") and value is not None:
            constants[role] = value.reshape(-1).astype(np.int32) if role == "sequence_lens" else value[0].copy()
    return constants


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


def _to_layer(rec: DescRecurrence, entry: dict) -> RecurrentLayer:
    """A dispatchable read as a layer: its weights and activations per direction, and its interface under the
    names and layout of the source it was written from (the manifest ``entry``; {} without one), holding the
    inputs the entry marks constant."""
    dispatch = rec.dispatch
    s, n, i, d, h = rec.sizes
    directions = [_direction_params(rec, k) for k in range(d)]
    bias = rec.tensors["BiasTensor"]
    tensors = entry.get("tensors") or {}

    def name_of(role: str, field: str) -> str | None:
        if field not in dispatch.desc:
            return None
        return (tensors.get(role) or {}).get("source_name") or dispatch.bindings.get(field) or role

    constants = _held_constants(rec, tensors)
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

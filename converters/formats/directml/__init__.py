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

This module is the format's entry (writing, ``check``, ``IMPLEMENTATION``); the descs' conventions are
``directml.desc``, reading ``directml.reader``, running ``directml.running``, the C++ emitter ``directml.cpp``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Union

import numpy as np

from gatepack.converters.errors import UsageError
from gatepack.converters.feature_findings import findings, form_of, replacing
from gatepack.converters.fileio import atomic_path
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.directml.desc import (
    ACTIVATIONS,
    CPP_FILE,
    DATA_TYPES,
    DIRECTIONS,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    MODEL_FILE,
    OPERATORS,
    OUTPUT_FIELDS,
    ROLE_FIELDS,
    SEQUENCE_LENGTHS_NOTE,
)
from gatepack.converters.formats.directml.reader import read
from gatepack.converters.formats.directml.registration import CAPABILITIES as DIRECTML
from gatepack.converters.formats.directml.running import run_layer_native, run_native, run_numpy, run_onnx_node
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import FormatImplementation
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import Cell, RecurrentLayer, dim_text, stack_directions

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
            from gatepack.converters.formats.directml.cpp import emit

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
        """One dispatchable for ``layer`` at the static (S, N) ``sizes``, its dispatch, and its manifest entry."""
        itf = layer.interface
        dtype = "float32" if layer.dtype == np.float64 else itf.dtype
        built = _Dispatchable()
        self._bind_inputs(built, layer, np.dtype(dtype), sizes[1], role_inputs)
        self._bind_outputs(built, layer, dtype, sizes)
        built.desc.update(_desc_attributes(layer))
        name = self._fresh(layer.name, self.dispatchables)
        self.dispatchables[name] = {"type": OPERATORS[layer.cell], "desc": built.desc}
        # Every dispatch runs before any writeFile (which saves the outputs), in layer order.
        self.commands.insert(
            len([c for c in self.commands if c["type"] == "dispatch"]),
            {"type": "dispatch", "dispatchable": name, "bindings": built.bindings},
        )
        self.manifest.append(_manifest_entry(layer, name, sizes, built.tensors))

    def _bind_array(
        self,
        built: "_Dispatchable",
        field: str,
        name: str,
        array: np.ndarray,
        role: str | None = None,
        source_name: str | None = None,
    ) -> None:
        built.desc[field] = tensor_desc(DATA_TYPES[array.dtype.name], list(array.shape))
        built.bindings[field] = self._file_resource(name, array)
        if role:
            built.tensors[role] = {"field": field, "resource": built.bindings[field], "source_name": source_name}

    def _bind_inputs(
        self, built: "_Dispatchable", layer: RecurrentLayer, cast: np.dtype, n: int, role_inputs: dict[str, np.ndarray]
    ) -> None:
        """X, W, R, B (when any bias is set), the initial states, P and the lengths, as resources from files;
        a state or lengths the source holds as a constant is written with its value, never a sample."""
        itf, prefix, bind_array = layer.interface, layer.name, self._bind_array
        bind_array(built, "InputTensor", itf.x, role_inputs["X"].astype(cast)[None], "X", itf.x)
        # the source's [D, ...] weights as they are when possible (no copy of a memory-mapped model)
        bind_array(
            built,
            "WeightTensor",
            f"{prefix}.W",
            stack_directions([p.W for p in layer.directions]).astype(cast, copy=False)[None],
        )
        bind_array(
            built,
            "RecurrenceTensor",
            f"{prefix}.R",
            stack_directions([p.R for p in layer.directions]).astype(cast, copy=False)[None],
        )
        if layer.has_bias or any(p.Wb.any() or p.Rb.any() for p in layer.directions):
            bias = np.stack([np.concatenate([p.Wb, p.Rb]) for p in layer.directions]).astype(cast)
            bind_array(built, "BiasTensor", f"{prefix}.B", bias[None, None])
        for field, role in (("HiddenInitTensor", "initial_h"), ("CellMemInitTensor", "initial_c")):
            if getattr(itf, role):
                name = getattr(itf, role)
                held = layer.constant_state(role, n)  # a constant of the source: its value, never a sample
                state = (role_inputs[role] if held is None else held).astype(cast)[None]
                bind_array(built, field, name, state, role, name)
                built.tensors[role]["constant"] = held is not None
        if layer.has_peepholes:
            peepholes = [p.P for p in layer.directions if p.P is not None]  # every direction's (validated)
            bind_array(built, "PeepholeTensor", f"{prefix}.P", np.stack(peepholes).astype(cast)[None, None])
        if itf.sequence_lens:
            held = layer.constant("sequence_lens")
            bind_array(
                built,
                "SequenceLengthsTensor",
                itf.sequence_lens,
                (role_inputs["sequence_lens"] if held is None else held).astype(np.uint32).reshape(1, 1, 1, n),
                "sequence_lens",
                itf.sequence_lens,
            )
            built.tensors["sequence_lens"]["constant"] = held is not None

    def _bind_outputs(self, built: "_Dispatchable", layer: RecurrentLayer, dtype: str, sizes: tuple[int, int]) -> None:
        """Y {S, D, N, H} and the final states {1, D, N, H} the source names, as resources written to files."""
        itf, (s, n) = layer.interface, sizes
        d, h = layer.num_directions, layer.hidden_size
        for field, role, source_name, shape in (
            ("OutputSequenceTensor", "Y", itf.y, [s, d, n, h]),
            ("OutputSingleTensor", "Y_h", itf.y_h, [1, d, n, h]),
            ("OutputCellSingleTensor", "Y_c", itf.y_c, [1, d, n, h]),
        ):
            if source_name:
                built.desc[field] = tensor_desc(DATA_TYPES[dtype], shape)
                built.bindings[field] = self._output_resource(source_name, dtype, shape)
                built.tensors[role] = {"field": field, "resource": built.bindings[field], "source_name": source_name}


class _Dispatchable:
    """One layer's desc as it is built: its fields, the resource bound to each, and the manifest's tensors by
    role."""

    def __init__(self) -> None:
        self.desc: dict = {}
        self.bindings: dict[str, str] = {}
        self.tensors: dict[str, dict] = {}


def _desc_attributes(layer: RecurrentLayer) -> dict:
    """The desc's fields besides its tensors: activation descs, direction, and the cell's flags."""
    acts = [activation_desc(a) for p in layer.directions for a in p.activations]
    desc: dict = {"ActivationDescCount": len(acts), "ActivationDescs": acts, "Direction": DIRECTIONS[layer.direction]}
    if layer.cell is Cell.GRU:
        desc["LinearBeforeReset"] = bool(layer.linear_before_reset)
    if layer.cell is Cell.LSTM:
        desc["ClipThreshold"] = float(layer.clip or 0.0)
        desc["UseClipThreshold"] = layer.clip is not None
        desc["CoupleInputForget"] = bool(layer.input_forget)
    return desc


def _manifest_entry(layer: RecurrentLayer, dispatchable: str, sizes: tuple[int, int], tensors: dict) -> dict:
    """The manifest's record of one layer: its names, layouts, source and written dimensions and tensors."""
    itf, (s, n) = layer.interface, sizes
    return {
        "name": layer.name,
        "dispatchable": dispatchable,
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
        value = _size_for(layer, option)
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


# ---------------------------------------------------------------------------------------- findings


def check(
    layer: RecurrentLayer, *, emit_cpp: bool = False, seq_length: SizeOption = None, batch_size: SizeOption = None
) -> list[Finding]:
    """Findings for writing ``layer`` as a DirectML desc (``capabilities.DIRECTML``): the shared features, the
    outputs the desc binds, and the static sizes its tensors take."""
    found = findings(layer, form_of(layer, DIRECTML))
    outputs = [f for f in OUTPUT_FIELDS if getattr(layer.interface, ROLE_FIELDS[f])]
    found.append(Finding("outputs", Status.EXACT, ", ".join(outputs) + " (as the source requests)"))
    return replacing(found, _static_sizes(layer, seq_length, batch_size))


def _static_sizes(layer: RecurrentLayer, seq_length: SizeOption, batch_size: SizeOption) -> Finding:
    """The ``shapes`` finding: DirectML tensors are static, so a symbolic S or N is written as one size — the
    option's, else gatepack's default, which the finding says was assumed. Either way the desc runs at that
    size only (repacked: the same numbers for that size; gatepack.json keeps the symbolic names, so the layer
    reads back as it was)."""
    itf = layer.interface
    written = written_sizes(layer, seq_length, batch_size)
    sizes = f"S={written[0]}, N={written[1]}"
    symbolic = [
        (label, dim, flag, option)
        for label, dim, flag, option in (
            ("S", itf.seq_length, "--seq-length", seq_length),
            ("N", itf.batch_size, "--batch-size", batch_size),
        )
        if not isinstance(dim, int)
    ]
    if not symbolic:
        return Finding("shapes", Status.EXACT, f"static {sizes}")
    named = ", ".join(f"{label}={dim_text(dim)}" for label, dim, _, _ in symbolic)
    assumed = [label for label, _, _, option in symbolic if _size_for(layer, option) is None]
    flags = " / ".join(flag for _, _, flag, _ in symbolic)
    why = f"{' and '.join(assumed)} assumed (gatepack's default), not given: " if assumed else ""
    return Finding(
        "shapes",
        Status.REPACKED,
        f"DirectML tensors are static: the symbolic {named} written as {sizes}",
        warning=f"{why}the desc runs at {sizes} only; pass {flags} for the sizes it will run at (the C++ snippet "
        "takes them as parameters)",
    )


def _size_for(layer: RecurrentLayer, option: SizeOption) -> int | None:
    """The size ``option`` gives ``layer`` (one size, or one per layer name), None where it gives none."""
    return option.get(layer.name) if isinstance(option, dict) else option


IMPLEMENTATION = FormatImplementation(
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    run_numpy=run_numpy,
    run_onnx_node=run_onnx_node,
)

"""DirectML's semantics on gatepack's executor: a DxDispatch model's descs run on its own sample inputs or
given ones, one layer of it alone, and an ONNX node as onnxruntime's DirectML provider computes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gatepack.converters.errors import InputError, NoRecurrentLayerError, RuntimeFailure, UsageError
from gatepack.converters.executor import CellOptions
from gatepack.converters.formats.directml.desc import (
    ACTIVATIONS,
    EP_ACTIVATIONS,
    EP_DEFAULT_PARAMETERS,
    EP_SOFTPLUS_STEEPNESS,
    FORMAT,
    INPUT_FIELDS,
    OUTPUT_FIELDS,
    dml_activation,
)
from gatepack.converters.formats.directml.reader import DescRecurrence, Dispatch, Document, load_recurrence
from gatepack.schemas.layer import OUTPUT_ROLES, PERM_SWAP_01, PERM_Y_TO_BATCH_MAJOR, Cell, Direction, RecurrentLayer


def execute(rec: DescRecurrence) -> dict[str, np.ndarray]:
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
    document = Document(path)
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
    assert dispatch is None or isinstance(dispatch, Dispatch)  # this module's reader's record
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
    outputs = execute(load_recurrence(Document(dispatch.model_file), dispatch, overrides))
    named = {}
    if itf.y:
        y = outputs["OutputSequenceTensor"]
        named[itf.y] = y.transpose(PERM_Y_TO_BATCH_MAJOR) if batch_major else y
    for field, role in (("OutputSingleTensor", "y_h"), ("OutputCellSingleTensor", "y_c")):
        if getattr(itf, role):
            final = outputs[field][0]
            named[getattr(itf, role)] = final.transpose(PERM_SWAP_01) if batch_major else final
    return named

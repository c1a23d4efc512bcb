"""BNNSGraph bundles: GRU/RNN/LSTM layers as ``BNNSGraph.Builder`` calls, with their tensors as ``.npy``
files, a generated Swift source that builds the graph, a reader, and an executor of BNNS semantics.

A bundle is a directory::

    bnns.json     the contract (JSON Schema: schemas/bnns.schema.json)
    model.swift   generated Swift that loads the tensors and builds the graph (not compiled here)
    tensors/NNN_LAYER/K_LABEL.npy   float32, C order, in the Swift shapes

``bnns.json``::

    {"format": "gatepack-bnns", "version": 1, "swift": "model.swift",
     "layers": [{"name", "cell": "gru"|"rnn", "input_size", "hidden_size", "has_bias",
                 "interface": {"x", "y", "y_h", "initial_h", "layout", "seq_length", "batch_size", "dtype"},
                 "calls": [CALL, ...],            one per direction: forward, then reverse
                 "output_time_order": ["input"|"processing", ...],   per call
                 "combine": "stack_directions"}]}

Each CALL is one ``BNNSGraph.Builder.Tensor.gru(...)`` / ``rnn(...)`` call on X [S,N,I] with its
Swift argument labels (docs/conventions.md §5, seed ``bnnsgraph-builder-gru.txt``)::

    {"op": "gru", "direction": "forward"|"reverse",
     "initialHiddenStates": {"input": NAME, "index": K} | null (zeros [N,H]),
     "inputHiddenWeight": NPY [3H,I], "hiddenHiddenWeight": NPY [3H,H],   rows r, n, z
     "bias": NPY [3H], "inputBias": NPY [3H] | null (zeros),
     "activation": "tanh", "recurrentActivation": "sigmoid",
     "applyResetGateAfterMatMul": bool, "outputSequence": true}
    rnn: no inputBias, recurrentActivation, applyResetGateAfterMatMul; tensors [H,I], [H,H], [H].
    lstm: "initialCellStates" as initialHiddenStates, tensors [4H,I], [4H,H], [4H] with rows i, f, o, g
    (g = the cell candidate; bias = Wb + Rb), "recurrentActivation" (the gates), "cellActivation" (g)
    and "activation" (applied to c before the output gate).

LSTM gate order: Apple's page lists the weights as i, f, o, g but the bias as i, f, g, o. gatepack
writes i, f, o, g for both, as MIL's lstm op (which BNNSGraph executes) takes them, and as
coremltools' tests run it against Core ML; the finding carries a warning until a device settles it.

Semantics (``converters.apple``): gates r, n, z = ONNX's z, r, h rows permuted; with
``applyResetGateAfterMatMul`` false the reset gate applies *before* the matmul (Apple's page prints
the opposite; every executable source computes reset-before) and ``bias`` holds Wb + Rb (folded);
with true (ONNX linear_before_reset = 1) ``bias`` holds the hidden biases and ``inputBias`` the input
biases. A reverse call's ``output`` comes in processing order (``output_time_order``); combining
re-aligns it to input time and stacks the calls into ONNX's Y [S,D,N,H] and Y_h [D,N,H]. Layout 1
interfaces transpose X in and Y / Y_h out. BNNS has no clip, no sequence lengths and only
parameterless activations: such layers are refused, never approximated.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np

from gatepack.converters.apple import (
    APPLE_ACTIVATIONS,
    NATIVE_ACTIVATIONS,
    activation_of,
    apple_tensor,
    lstm_recurrence,
    onnx_weights,
    recurrence,
)
from gatepack.converters.capabilities import alternative, lacks
from gatepack.converters.description import typed_field
from gatepack.converters.errors import (
    InputError,
    NoRecurrentLayerError,
    RefusedError,
    RuntimeFailure,
    UsageError,
    where,
)
from gatepack.converters.feature_findings import findings, form_of
from gatepack.converters.fileio import atomic_path, contained_file, load_npy, read_json
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.bnns.registration import CAPABILITIES as BNNS
from gatepack.converters.formats.bnns.registration import WHOLE_MODEL_VIA
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import FormatImplementation, keeps_whole
from gatepack.schemas.layer import (
    OUTPUT_ROLES,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    state_roles,
)

FORMAT = "bnns"
MANIFEST = "bnns.json"
SWIFT_FILE = "model.swift"
BUNDLE_FORMAT = "gatepack-bnns"
VERSION = 1
OP = "BNNSGraph.Builder"
# Swift's BNNSGraph.Builder.Activation cases and the MIL strings they stand for.
SWIFT_ACTIVATIONS = {
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "relu": "relu",
    "linear": "linear",
    "scaledTanh": "scaled_tanh",
    "hardSigmoid": "hard_sigmoid",
}
_SWIFT_OF_MIL = {mil: swift for swift, mil in SWIFT_ACTIVATIONS.items()}
assert set(SWIFT_ACTIVATIONS.values()) <= set(APPLE_ACTIVATIONS)
_INTERFACE_KEYS = {"x", "y", "y_h", "initial_h", "initial_c", "y_c", "layout", "seq_length", "batch_size", "dtype"}


# ----------------------------------------------------------------------------------------- writing


def blockers(layer: RecurrentLayer) -> dict[str, str]:
    """What BNNSGraph.Builder's gru/rnn/lstm cannot express in ``layer``, by feature (empty: every
    feature maps): ``capabilities.BNNS``'s call for the cell, against the layer."""
    return lacks(layer, BNNS.ops[layer.cell])


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60] or "layer"


# Initial-state roles and the Builder argument each is passed as.
STATE_LABELS = (("initial_h", "initialHiddenStates"), ("initial_c", "initialCellStates"))


def _calls(layer: RecurrentLayer, folder: str) -> tuple[list[dict], dict[str, Callable[[], np.ndarray]]]:
    """The layer's Builder calls (one per direction) and, per .npy path, how to make its array
    (made one at a time while writing, so the permuted copies never pile up)."""
    calls: list[dict] = []
    arrays: dict[str, Callable[[], np.ndarray]] = {}
    labels = {
        "weight_ih": "inputHiddenWeight",
        "weight_hh": "hiddenHiddenWeight",
        "bias": "bias",
        "input_bias": "inputBias",
    }
    present = {"weight_ih", "weight_hh", "bias"} | (
        {"input_bias"} if layer.cell is Cell.GRU and layer.linear_before_reset else set()
    )
    for k, params in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        call: dict = {"op": layer.cell.value, "direction": "reverse" if reverse else "forward"}
        for role, label in STATE_LABELS[: len(layer.cell.states)]:
            if role in layer.constants:  # a constant of the source: direction k's state [N, H], stored
                rel = f"{folder}/{k}_{label}.npy"
                arrays[rel] = functools.partial(lambda r, d: layer.constants[r][d].astype(np.float32), role, k)
                call[label] = {"constant": rel}
            else:
                name = getattr(layer.interface, role)
                call[label] = {"input": name, "index": k} if name else None
        for key, label in labels.items():
            if key in present:
                rel = f"{folder}/{k}_{label}.npy"
                arrays[rel] = functools.partial(_apple_tensor, layer, k, key)
                call[label] = rel
            elif layer.cell is Cell.GRU:
                call[label] = None  # inputBias without applyResetGateAfterMatMul: zeros
        names = [NATIVE_ACTIVATIONS[a.name] for a in params.activations]
        call["activation"] = _SWIFT_OF_MIL[names[-1]]
        if layer.cell is Cell.GRU:
            call["recurrentActivation"] = _SWIFT_OF_MIL[names[0]]
            call["applyResetGateAfterMatMul"] = bool(layer.linear_before_reset)
        if layer.cell is Cell.LSTM:
            call["recurrentActivation"], call["cellActivation"] = _SWIFT_OF_MIL[names[0]], _SWIFT_OF_MIL[names[1]]
        call["outputSequence"] = True
        calls.append(call)
    return calls, arrays


def _apple_tensor(layer: RecurrentLayer, k: int, key: str) -> np.ndarray:
    """One tensor of direction ``k`` in Apple's layout; a layer without B has zero biases, as ONNX."""
    found = apple_tensor(layer, k, key)
    return found if found is not None else np.zeros(layer.cell.gates * layer.hidden_size, np.float32)


def describe_bundle(model: Model) -> tuple[dict, dict[str, Callable[[], np.ndarray]]]:
    """``bnns.json``'s document for ``model`` and, per .npy path, how to make its array."""
    layers, arrays = [], {}
    for i, layer in enumerate(model.layers):
        found = blockers(layer)
        if found:
            raise RefusedError(
                f"{where(model.path, layer.name)}BNNS cannot express it: {'; '.join(found.values())}",
                hint=alternative(BNNS, layer, next(iter(found))),
            )
        calls, layer_arrays = _calls(layer, f"tensors/{i:03d}_{_slug(layer.name)}")
        arrays.update(layer_arrays)
        itf = layer.interface
        layers.append(
            {
                "name": layer.name,
                "cell": layer.cell.value,
                "input_size": layer.input_size,
                "hidden_size": layer.hidden_size,
                "has_bias": layer.has_bias,
                "interface": {
                    "x": itf.x,
                    "y": itf.y,
                    "y_h": itf.y_h,
                    "initial_h": itf.initial_h,
                    **({"initial_c": itf.initial_c, "y_c": itf.y_c} if layer.cell is Cell.LSTM else {}),
                    "layout": itf.layout,
                    "seq_length": itf.seq_length,
                    "batch_size": itf.batch_size,
                    "dtype": "float32",
                },
                "calls": calls,
                "output_time_order": ["processing" if c["direction"] == "reverse" else "input" for c in calls],
                "combine": "stack_directions",
            }
        )
    return {
        "format": BUNDLE_FORMAT,
        "version": VERSION,
        "swift": SWIFT_FILE,
        "source": str(model.path or ""),
        "layers": layers,
    }, arrays


def write(model: Model, path: str | Path, **_options) -> None:
    """Write ``model``'s layers as a BNNS bundle directory at ``path`` (atomically)."""
    from gatepack.converters.formats.bnns.swift import emit

    document, arrays = describe_bundle(with_separate_inputs(model))
    with atomic_path(Path(path), directory=True) as tmp:
        for rel, make in arrays.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            np.save(tmp / rel, make(), allow_pickle=False)
        (tmp / MANIFEST).write_text(json.dumps(document, indent=2) + "\n")
        (tmp / SWIFT_FILE).write_text(emit(document))


# ----------------------------------------------------------------------------------------- reading


def _manifest(path: Path) -> dict:
    file = path / MANIFEST
    if not os.path.lexists(file):
        raise InputError(f"{path}: not a BNNS bundle (no {MANIFEST})")
    document = read_json(contained_file(path, MANIFEST, str(file)))
    if not isinstance(document, dict) or document.get("format") != BUNDLE_FORMAT:
        raise InputError(
            f"{file}: its format is {document.get('format') if isinstance(document, dict) else None!r}, not "
            f"{BUNDLE_FORMAT!r}"
        )
    if document.get("version") != VERSION:
        raise InputError(f"{file}: version {document.get('version')!r} is not one this gatepack reads ({VERSION})")
    if not isinstance(document.get("layers"), list) or not document["layers"]:
        raise NoRecurrentLayerError(f"{file}: it lists no layer")
    return document


class _Layer:
    """One layer entry of bnns.json, validated against its .npy files."""

    def __init__(self, bundle: Path, entry: object, index: int) -> None:
        at = f"{bundle / MANIFEST}: layer {index}: "
        if not isinstance(entry, dict):
            raise InputError(f"{at}is not an object")
        self.bundle = bundle
        try:
            self.name = typed_field(entry, "name", (str,))
            self.at = where(bundle / MANIFEST, self.name)
            self.cell = Cell(typed_field(entry, "cell", (str,)))
            self.input_size, self.hidden_size = (
                typed_field(entry, "input_size", (int,)),
                typed_field(entry, "hidden_size", (int,)),
            )
            if self.input_size < 1 or self.hidden_size < 1:
                raise ValueError(f"input_size {self.input_size} and hidden_size {self.hidden_size} must be positive")
            self.has_bias = typed_field(entry, "has_bias", (bool,), True)
            interface = typed_field(entry, "interface", (dict,))
            unknown = set(interface) - _INTERFACE_KEYS
            if unknown:
                raise ValueError(
                    f"interface keys {sorted(unknown)} are not ones a bundle has (BNNS has no sequence lengths)"
                )
            if interface.get("dtype", "float32") != "float32":
                raise ValueError(f"interface dtype {interface['dtype']!r} is not float32")
            self.interface = Interface(**interface)
            for dim in ("seq_length", "batch_size"):  # a static size of 0 is an empty sequence or batch
                if getattr(self.interface, dim) == 0:
                    raise ValueError(f"interface {dim} 0: BNNS runs no empty sequence or batch")
            calls = entry["calls"]
            combine = entry.get("combine", "stack_directions")
            order = entry.get("output_time_order")
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{at}missing or malformed field ({err})") from None
        if combine != "stack_directions":
            raise InputError(f"{self.at}combine {combine!r} is not 'stack_directions'")
        if not isinstance(calls, list) or len(calls) not in (1, 2):
            raise InputError(
                f"{self.at}{len(calls) if isinstance(calls, list) else calls!r} calls; a layer has one call per "
                "direction (1 or 2)"
            )
        directions = [c.get("direction") if isinstance(c, dict) else None for c in calls]
        if directions not in (["forward"], ["reverse"], ["forward", "reverse"]):
            raise InputError(f"{self.at}call directions {directions} are not forward, reverse, or forward then reverse")
        expected_order = ["processing" if d == "reverse" else "input" for d in directions]
        if order is not None and order != expected_order:
            raise InputError(
                f"{self.at}output_time_order {order} contradicts the calls (BNNS returns a reverse call's output "
                f"in processing order: {expected_order})"
            )
        self.direction = Direction.BIDIRECTIONAL if len(calls) == 2 else Direction(directions[0])
        self.calls = [self._call(k, c) for k, c in enumerate(calls)]
        if self.cell is not Cell.LSTM and (self.interface.initial_c or self.interface.y_c):
            raise InputError(f"{self.at}a {self.cell.value} layer has no cell state (interface initial_c / y_c)")
        flags = {c["reset_after"] for c in self.calls}
        if len(flags) > 1:
            raise InputError(f"{self.at}its calls disagree on applyResetGateAfterMatMul")
        self.reset_after = flags.pop()

    def _call(self, k: int, call: dict) -> dict:
        at = f"{self.at}call {k} ({call.get('direction')}): "
        if not isinstance(call, dict):
            raise InputError(f"{self.at}call {k} is not an object")
        if call.get("op") != self.cell.value:
            raise InputError(f"{at}op {call.get('op')!r} in a {self.cell.value} layer")
        gh, i, h = self.cell.gates * self.hidden_size, self.input_size, self.hidden_size
        shapes = {"inputHiddenWeight": (gh, i), "hiddenHiddenWeight": (gh, h), "bias": (gh,)}
        if self.cell is Cell.GRU:
            shapes["inputBias"] = (gh,)
        out: dict = {}
        for label, shape in shapes.items():
            out[label] = self._tensor(at, label, call.get(label), shape, optional=label == "inputBias")
        out["constants"] = {}
        for role, label in STATE_LABELS[: len(self.cell.states)]:
            state, source = call.get(label), getattr(self.interface, role)
            if isinstance(state, dict) and set(state) == {"constant"} and source:
                value = self._tensor(at, label, state["constant"], None, optional=False)
                assert value is not None  # (a required tensor)
                if value.ndim != 2 or value.shape[1] != h:
                    raise InputError(f"{at}{label}: {state['constant']} has shape {list(value.shape)}, not [N, {h}]")
                out["constants"][role] = value
                continue
            if state is not None and (
                not isinstance(state, dict) or state.get("input") != source or state.get("index") != k
            ):
                raise InputError(f"{at}{label} {state!r} is not direction {k} of the interface's {role} {source!r}")
            if state is None and source:
                raise InputError(f"{at}{label} is null but the interface has {role} {source!r}")
        names = {
            Cell.GRU: [call.get("recurrentActivation"), call.get("activation")],
            Cell.RNN: [call.get("activation")],
            Cell.LSTM: [call.get("recurrentActivation"), call.get("cellActivation"), call.get("activation")],
        }[self.cell]
        cases = []
        for name in names:
            if not isinstance(name, str) or name not in SWIFT_ACTIVATIONS:
                raise InputError(
                    f"{at}activation {name!r} is not a BNNSGraph.Builder.Activation case "
                    f"({', '.join(SWIFT_ACTIVATIONS)})"
                )
            cases.append(SWIFT_ACTIVATIONS[name])
        out["activations"] = tuple(activation_of(case, at) for case in cases)
        reset_after = call.get("applyResetGateAfterMatMul", False) if self.cell is Cell.GRU else False
        if not isinstance(reset_after, bool):
            raise InputError(f"{at}applyResetGateAfterMatMul {reset_after!r} is not true or false")
        if not reset_after and out.get("inputBias") is not None and np.any(out["inputBias"]):
            raise InputError(
                f"{at}inputBias is set but applyResetGateAfterMatMul is false (the input biases belong in bias, summed)"
            )
        if call.get("outputSequence") is not True:
            raise InputError(
                f"{at}outputSequence {call.get('outputSequence')!r}: gatepack's layers need the whole sequence (true)"
            )
        out["reset_after"], out["reverse"] = reset_after, call["direction"] == "reverse"
        return out

    def _tensor(self, at: str, label: str, rel: object, shape: tuple | None, optional: bool) -> np.ndarray | None:
        if rel is None and optional:
            return None
        if not isinstance(rel, str) or not rel.endswith(".npy"):
            raise InputError(f"{at}{label} {rel!r} is not the path of a .npy file")
        array = load_npy(contained_file(self.bundle, rel, f"{at}{label}"), f"{at}{label}: {rel}")
        if array.dtype != np.float32:
            raise InputError(f"{at}{label}: {rel} holds {array.dtype}, not float32")
        if shape is not None and array.shape != shape:
            raise InputError(
                f"{at}{label}: {rel} has shape {list(array.shape)}, but bnns.json's input_size {self.input_size} "
                f"and hidden_size {self.hidden_size} make it {list(shape)}"
            )
        return array

    def constants(self) -> dict[str, np.ndarray]:
        """The initial states the calls hold as constants, stacked per direction: role -> [D, N, H]."""
        roles = self.calls[0]["constants"]
        for role in roles:
            if any(role not in c["constants"] or c["constants"][role].shape != roles[role].shape for c in self.calls):
                raise InputError(f"{self.at}its calls disagree on the constant {role} (present in one, or its shape)")
        if any(set(c["constants"]) != set(roles) for c in self.calls):
            raise InputError(f"{self.at}its calls disagree on which initial states are constants")
        return {role: np.stack([c["constants"][role] for c in self.calls]) for role in roles}

    def to_layer(self) -> tuple[RecurrentLayer, list[Finding]]:
        directions = []
        for c in self.calls:
            w = onnx_weights(
                self.cell,
                c["inputHiddenWeight"],
                c["hiddenHiddenWeight"],
                c["bias"],
                c.get("inputBias"),
                c["reset_after"],
            )
            directions.append(
                DirectionParams(
                    np.array(w["W"]), np.array(w["R"]), np.array(w["Wb"]), np.array(w["Rb"]), c["activations"]
                )
            )
        try:
            layer = RecurrentLayer(
                self.name,
                self.cell,
                self.input_size,
                self.hidden_size,
                self.direction,
                tuple(directions),
                self.interface,
                self.reset_after,
                None,
                self.has_bias,
                constants=self.constants(),
                provenance=Provenance(FORMAT, self.bundle, self.name),
            )
        except SpecError as err:
            raise InputError(f"{self.bundle / MANIFEST}: {err}") from None
        found = (
            []
            if self.reset_after
            else [
                Finding(
                    "bias", Status.FOLDED, "BNNS stores Wb + Rb summed (reset-before); read back as Wb = sum, Rb = 0"
                )
            ]
        )
        return layer, found


def _layers(path: Path, only: str | None = None) -> list[_Layer]:
    """The bundle's layers, each checked against its .npy files (``only``: just that one)."""
    entries = _manifest(path)["layers"]
    names = [entry.get("name") if isinstance(entry, dict) else None for entry in entries]
    if not all(isinstance(n, str) for n in names):
        raise InputError(f"{path / MANIFEST}: layer names {names} are not all strings")
    if len(set(names)) != len(names):
        raise InputError(f"{path / MANIFEST}: layer names repeat ({names})")
    return [_Layer(path, entry, i) for i, entry in enumerate(entries) if only is None or names[i] == only]


def read(path: str | Path, **_options) -> Model:
    """Read a BNNS bundle back to canonical layers (the .npy files checked against bnns.json)."""
    path = Path(path)
    layers, notes = [], {}
    for entry in _layers(path):
        layer, found = entry.to_layer()
        layers.append(layer)
        notes[layer.name] = found
    return Model(path, FORMAT, layers, notes)


# ----------------------------------------------------------------------------------------- running


def _execute(entry: _Layer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run one layer's calls with BNNS semantics on ``feed`` (the interface's names and layout)."""
    itf = entry.interface
    if itf.x not in feed:
        raise InputError(f"{entry.at}missing input {itf.x!r}")
    x = np.asarray(feed[itf.x], np.float32)
    if x.ndim != 3 or x.shape[2] != entry.input_size:
        raise InputError(
            f"{entry.at}input {itf.x!r} has shape {list(x.shape)}; expected rank 3 with {entry.input_size} features"
        )
    x = x.transpose(1, 0, 2) if itf.layout else x  # the calls take X [S,N,I]
    batch = x.shape[1]
    initial = {}
    held = entry.constants()
    for role, _ in state_roles(entry.cell):
        name = getattr(itf, role)
        if role in held:  # stored with the bundle, [D, N, H]; a state of batch 1 serves every batch
            initial[role] = np.broadcast_to(held[role], (held[role].shape[0], batch, entry.hidden_size))
        elif name:
            if name not in feed:
                raise InputError(f"{entry.at}missing input {name!r}")
            state = np.asarray(feed[name], np.float32)
            initial[role] = state.transpose(1, 0, 2) if itf.layout else state
    zeros = np.zeros((batch, entry.hidden_size), np.float32)
    ys, finals = [], []
    for k, call in enumerate(entry.calls):
        start = {role: initial[role][k] if role in initial else zeros for role, _ in state_roles(entry.cell)}
        weights = (call["inputHiddenWeight"], call["hiddenHiddenWeight"], call["bias"])
        if entry.cell is Cell.LSTM:
            output, *ends = lstm_recurrence(
                x,
                start["initial_h"],
                start["initial_c"],
                *weights,
                reverse=call["reverse"],
                activations=call["activations"],
            )
        else:
            output, *ends = recurrence(
                entry.cell,
                x,
                start["initial_h"],
                *weights,
                call.get("inputBias"),
                reverse=call["reverse"],
                activations=call["activations"],
                reset_after=call["reset_after"],
            )
        ys.append(output[::-1] if call["reverse"] else output)  # processing order -> input time
        finals.append(ends)
    y = np.stack(ys, axis=1)
    ends = [np.stack([f[s] for f in finals], axis=0) for s in range(len(finals[0]))]  # each [D,N,H]
    if itf.layout:
        y, ends = y.transpose(2, 0, 1, 3), [e.transpose(1, 0, 2) for e in ends]
    return {name: value for name, value in zip((getattr(itf, r) for r in OUTPUT_ROLES), (y, *ends)) if name}


def run_numpy(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every layer of the bundle, read from disk, with BNNS semantics."""
    outputs: dict[str, np.ndarray] = {}
    for entry in _layers(Path(path)):
        outputs.update(_execute(entry, inputs))
    return outputs


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise RuntimeFailure(
        f"{path}: BNNSGraph runs only on Apple platforms (iOS / macOS 26); use --engine numpy (gatepack's executor "
        "of BNNS semantics)"
    )


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of a saved bundle, re-read from disk and run with BNNS semantics."""
    if layer.provenance is None or not layer.provenance.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from a BNNS bundle")
    bundle, name = layer.provenance.artifact, layer.provenance.node
    entry = next(iter(_layers(bundle, only=name)), None)
    if entry is None:
        raise InputError(f"{bundle / MANIFEST}: no layer {name!r} any more")
    return _execute(entry, feed)


# ---------------------------------------------------------------------------------------- findings


def check(layer: RecurrentLayer, **_options) -> list[Finding]:
    """Findings for writing ``layer`` as BNNSGraph.Builder calls (``capabilities.BNNS``: what the calls lack is
    unsupported, never approximated)."""
    return findings(layer, form_of(layer, BNNS))


def whole_model_finding(model: Model) -> Finding | None:
    """A whole ONNX model for BNNSGraph: its artifact is the compiled Core ML package (BNNSGraph compiles an
    ``.mlmodelc``), which ``--to coreml`` writes; this format's bundle holds layers only."""
    if not keeps_whole(model, WHOLE_MODEL_VIA[0]):  # a model Core ML writes whole
        return None
    return Finding(
        "model",
        Status.UNSUPPORTED,
        f"a BNNS bundle holds recurrent layers alone, not the model's {model.other_ops_text()}; BNNSGraph runs a "
        "whole model from the Core ML package compiled: convert --to coreml, then `xcrun coremlcompiler compile "
        "MODEL.mlpackage OUT/` and load OUT/MODEL.mlmodelc with BNNSGraphCompileFromFile (Swift: "
        "BNNSGraph.Context(compileFromPath:))",
        alternative="convert --to coreml for the whole model (BNNSGraph compiles it), or pass --layers-only for the "
        "layers alone as a BNNS bundle",
    )


IMPLEMENTATION = FormatImplementation(
    read=read,
    whole_model_finding=whole_model_finding,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    run_numpy=run_numpy,
)

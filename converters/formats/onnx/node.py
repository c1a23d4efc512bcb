"""One GRU/RNN/LSTM node read into a canonical layer: its attributes checked against its operator version
(each of the type the operator schema gives), its weights W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] (split into
the input half Wb and the recurrent half Rb) and P [D, peepholes*H] checked and split per direction, its activations
(in gatepack's canonical spelling, with the alpha/beta defaults runtimes disagree on filled by the reader's
``DefaultsPolicy`` and noted), clip (for RNN, clip < 0 means none, as onnxruntime has it) and layout; its interface
and held inputs (``onnx.interface``); the weights and held inputs folded when computed (``onnx.constants``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper

from gatepack.converters.errors import InputError, where
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.onnx.constants import ModelConstants
from gatepack.converters.formats.onnx.graph import FORMAT, Isolated, Scope
from gatepack.converters.formats.onnx.interface import (
    computed_inputs,
    held_constants,
    node_interface,
    without_zero_states,
)
from gatepack.converters.formats.onnx.qdq import dequantize_linear_weight
from gatepack.schemas.activations import KINDS, DefaultsPolicy, ResolvedDefault, canonical_name, resolve_activations
from gatepack.schemas.cells import cell_of_op
from gatepack.schemas.layer import Cell, Direction, DirectionParams, Interface, Provenance, RecurrentLayer, SpecError
from gatepack.schemas.quantized import QuantizedWeights

_A = onnx.AttributeProto

# The type every attribute of GRU/RNN must have (the operator schemas); any other type is malformed
# (onnxruntime rejects the graph), never reinterpreted.
_ATTRIBUTE_TYPES = {
    "hidden_size": _A.INT,
    "direction": _A.STRING,
    "activations": _A.STRINGS,
    "activation_alpha": _A.FLOATS,
    "activation_beta": _A.FLOATS,
    "clip": _A.FLOAT,
    "linear_before_reset": _A.INT,
    "input_forget": _A.INT,
    "layout": _A.INT,
    "output_sequence": _A.INT,
}


class _NodeWeights(NamedTuple):
    """A node's W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] and P [D, peepholes*H] as read (B and P None when the
    node names none), with the quantized records per direction of W and R where ``DequantizeLinear`` computes them."""

    w: np.ndarray
    r: np.ndarray
    b: np.ndarray | None
    p: np.ndarray | None
    quantized: tuple[list[QuantizedWeights] | None, list[QuantizedWeights] | None]

    def by_name(self, inputs: list[str]) -> dict[str, np.ndarray]:
        """The weights the node names, by tensor name (the isolated node's constants)."""
        named = zip((inputs[1], inputs[2], inputs[3], inputs[7]), (self.w, self.r, self.b, self.p))
        return {k: v for k, v in named if k and v is not None}


class NodeReader:
    """Reads the GRU/RNN/LSTM nodes of one model (of ai.onnx ``opset``) whose ``constants`` it folds, filling in
    ``notes`` (layer name -> findings); the activation defaults runtimes disagree on follow ``policy``."""

    def __init__(
        self, constants: ModelConstants, opset: int, policy: DefaultsPolicy, notes: dict[str, list[Finding]]
    ) -> None:
        self.constants = constants
        self.path: Path = constants.path
        self.opset = opset
        self.policy = policy
        self.notes = notes

    def read_node(self, node: onnx.NodeProto, scope: Scope, name: str) -> RecurrentLayer:
        """One GRU/RNN/LSTM node as a layer: its attributes checked against its operator version, its weights
        and their shapes, its activations, clip and layout, then its interface and the inputs it holds."""
        cell = cell_of_op(node.op_type)
        assert cell is not None  # (called for the recurrent ops only)
        at = where(self.path, name)
        version = onnx.defs.get_schema(node.op_type, self.opset).since_version
        attrs = _node_attributes(node, cell, version, at)
        inputs = list(node.input) + [""] * (8 - len(node.input))
        if not inputs[0] or not inputs[1] or not inputs[2]:
            raise InputError(f"{at}{node.op_type} needs inputs X, W and R; got {list(node.input)}")

        weights = self._weights(inputs, scope, name)
        hidden, direction = _hidden_and_direction(attrs, weights.r, at)
        _check_weights(cell, direction, hidden, weights.w, weights.r, weights.b, weights.p, at)

        notes: list[Finding] = []
        per_dir = self._activations(node, cell, direction, attrs, at, notes)
        clip = _clip(cell, attrs, at, notes)
        layout = _layout(node, version, attrs, at, notes)
        isolated = Isolated([node], weights.by_name(inputs), self.opset)
        interface, held = self._interface(node, scope, inputs, layout, weights.w, hidden, isolated, notes, name)
        provenance = _provenance(self.path, node, name, version, layout, isolated, attrs)
        try:
            layer = RecurrentLayer(
                name=name,
                cell=cell,
                input_size=int(weights.w.shape[2]),
                hidden_size=hidden,
                direction=direction,
                directions=_direction_params(
                    cell.gates * hidden, weights.w, weights.r, weights.b, weights.p, per_dir, weights.quantized
                ),
                interface=interface,
                linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
                input_forget=bool(attrs.get("input_forget", 0)),
                clip=clip,
                has_bias=weights.b is not None,
                constants=held,
                provenance=provenance,
            )
        except SpecError as err:
            raise InputError(f"{self.path}: {err}") from None
        if notes:
            self.notes[name] = notes
        return layer

    def _weights(self, inputs: list[str], scope: Scope, name: str) -> _NodeWeights:
        """The node's W, R and B (each read where ``DequantizeLinear`` may compute it) and P, in that order."""
        (w, wq), (r, rq), (b, _) = (
            self._weight(inputs[k], scope, name, role) for k, role in ((1, "W"), (2, "R"), (3, "B"))
        )
        assert w is not None and r is not None  # (named: checked by the caller)
        p = self.constants.constant(inputs[7], scope, name, "P") if inputs[7] else None
        return _NodeWeights(w, r, b, p, (wq, rq))

    def _interface(
        self,
        node: onnx.NodeProto,
        scope: Scope,
        inputs: list[str],
        layout: int,
        w: np.ndarray,
        hidden: int,
        isolated: Isolated,
        notes: list[Finding],
        name: str,
    ) -> tuple[Interface, dict[str, np.ndarray]]:
        """The node's interface (its tensors by role) and the optional inputs it holds as constants (each also a
        constant of ``isolated``); initial states the model computes as zeros leave the interface (noted)."""
        at = where(self.path, name)
        computed = computed_inputs(self.constants, scope, inputs, layout, name)
        outputs = list(node.output) + ["", "", ""]
        interface = node_interface(
            self.constants.types, node, scope, inputs, outputs, layout, w, hidden, at, isolated, computed
        )
        held = held_constants(interface, layout, at, w.dtype, isolated, computed)
        return without_zero_states(interface, isolated, notes), held

    def _weight(
        self, name: str, scope: Scope, layer: str, role: str
    ) -> tuple[np.ndarray | None, list[QuantizedWeights] | None]:
        """Weight ``name`` (None when not named) and, where ``DequantizeLinear`` computes W or R from integers, its
        records per direction; a quantized B is read as the float values the node computes on (noted)."""
        if not name:
            return None, None
        dequantized = dequantize_linear_weight(self.constants, name, scope, layer, role)
        if dequantized is None:
            return self.constants.constant(name, scope, layer, role), None
        value, records = dequantized
        if records is None or role == "B":
            self.notes.setdefault(layer, []).append(dequantized_note(role, name))
        return (_float_view(records) if records else value), records

    def _activations(self, node, cell: Cell, direction: Direction, attrs: dict, at: str, notes: list) -> list[list]:
        """The activations of each direction, spelled canonically, with their alpha/beta (a default the
        runtimes disagree on filled by the reader's policy and noted)."""
        per = cell.activation_count
        d = direction.count
        canonical = _activation_names(node, cell, direction, attrs, at, notes)
        alphas = [float(a) for a in attrs.get("activation_alpha", [])]
        betas = [float(b) for b in attrs.get("activation_beta", [])]
        try:
            resolved, filled = resolve_activations(canonical, alphas, betas, self.policy)
        except ValueError as err:
            raise InputError(f"{at}{err}") from None
        used_alpha = sum(KINDS[n].takes_alpha for n in canonical)
        used_beta = sum(KINDS[n].takes_beta for n in canonical)
        if len(alphas) > used_alpha or len(betas) > used_beta:
            notes.append(
                Finding(
                    "activations",
                    Status.EXACT,
                    f"{len(alphas) - used_alpha if len(alphas) > used_alpha else 0} activation_alpha and "
                    f"{max(len(betas) - used_beta, 0)} activation_beta value(s) are consumed by no activation and "
                    "ignored (as onnxruntime does)",
                    warning="unused activation parameters",
                )
            )
        notes += map(self._default_note, filled)
        return [resolved[k * per : (k + 1) * per] for k in range(d)]

    def _default_note(self, item: ResolvedDefault) -> Finding:
        """The note for an activation parameter the model leaves unset, filled by the reader's policy."""
        if not item.ambiguous:
            return Finding(
                "activation defaults",
                Status.EXACT,
                f"{item.activation} {item.parameter} is not set; every runtime uses {item.value:g}, written explicitly",
            )
        other = "has no default" if item.other_value is None else f"uses {item.other_value:g}"
        return Finding(
            "activation defaults",
            Status.EXACT,
            f"{item.activation} {item.parameter} is not set; gatepack uses {item.value:g} "
            f"({self.policy.value} policy) and writes it explicitly, while the "
            f"{'ONNX operator' if self.policy is DefaultsPolicy.ONNXRUNTIME else 'onnxruntime'} "
            f"default {other}",
            warning="the model relies on a default that runtimes disagree on",
            alternative="set the parameter explicitly, or choose the other policy with --activation-defaults",
        )


def _node_attributes(node: onnx.NodeProto, cell: Cell, version: int, at: str) -> dict:
    """The node's attributes by name, each of the type its operator schema gives and part of this operator
    version; the node's inputs and outputs no more than the operator takes."""
    for a in node.attribute:
        if a.name in _ATTRIBUTE_TYPES and a.type != _ATTRIBUTE_TYPES[a.name]:
            expected = _A.AttributeType.Name(_ATTRIBUTE_TYPES[a.name])
            raise InputError(
                f"{at}attribute {a.name!r} is of type {_A.AttributeType.Name(a.type)}, {node.op_type} takes {expected}"
            )
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    allowed = {"hidden_size", "direction", "activations", "activation_alpha", "activation_beta", "clip"}
    spec = cell.spec
    allowed |= {"linear_before_reset"} if spec.reset_placement and version >= 3 else set()
    allowed |= {"input_forget"} if spec.input_forget else set()
    allowed |= {"layout"} if version >= 14 else set()
    allowed |= {"output_sequence"} if version < 7 else set()
    for key in attrs:
        if key not in allowed:
            raise InputError(f"{at}attribute {key!r} is not part of {node.op_type}-{version}")
    # X W R B sequence_lens, an initial state per state, then P (LSTM); Y and a final state per state.
    most_inputs, most_outputs = 5 + len(spec.states) + bool(spec.peepholes), 1 + len(spec.states)
    if len(node.input) > most_inputs or len(node.output) > most_outputs:
        raise InputError(
            f"{at}{node.op_type} has {len(node.input)} inputs and {len(node.output)} outputs; it takes at most "
            f"{most_inputs} and {most_outputs}"
        )
    return attrs


def _clip(cell: Cell, attrs: dict, at: str, notes: list) -> float | None:
    if "clip" not in attrs:
        return None
    clip = float(attrs["clip"])
    if not cell.spec.zero_clip and not clip > 0:
        raise InputError(f"{at}clip {clip:g} must be greater than 0 for {cell.op_name} (onnxruntime refuses it)")
    if not np.isfinite(clip):
        raise InputError(f"{at}clip {clip} is not a finite number")
    if clip < 0:
        notes.append(
            Finding(
                "clip",
                Status.EXACT,
                f"clip {clip:g} < 0 means no clip for RNN (onnxruntime); gatepack writes no clip",
            )
        )
        return None
    return clip


def _activation_names(
    node: onnx.NodeProto, cell: Cell, direction: Direction, attrs: dict, at: str, notes: list[Finding]
) -> list[str]:
    """The node's activation names (its cell's defaults when it lists none), as many as the cell takes per
    direction, in gatepack's canonical spelling (another spelling is noted: DirectML accepts only the exact one)."""
    per = cell.activation_count
    d = direction.count
    names = [_text(n) for n in attrs.get("activations", [])] or list(cell.default_activations) * d
    if cell is Cell.RNN and d == 1 and len(names) == 2:
        # onnxruntime keeps the first of two names for a one-direction RNN (an old default was [Tanh, Tanh]).
        if names[0].lower() != names[1].lower():
            notes.append(
                Finding(
                    "activations",
                    Status.EXACT,
                    f"a {direction.value} RNN lists two activations {names}; onnxruntime uses the first, "
                    f"{names[0]!r}, and so does gatepack",
                    warning="second activation ignored",
                )
            )
        names = names[:1]
    if len(names) != per * d:
        raise InputError(
            f"{at}activations lists {len(names)} names {names}, a {direction.value} {node.op_type} takes {per * d}"
        )
    canonical = []
    for given in names:
        known = canonical_name(given)
        if known is None:
            raise InputError(f"{at}unknown activation {given!r}", hint=f"known: {', '.join(KINDS)}")
        if known != given:
            runtime = "onnxruntime rejects it for RNN and " if cell is Cell.RNN else ""
            notes.append(
                Finding(
                    "activations",
                    Status.EXACT,
                    f"activation {given!r} spelled {known!r} ({runtime}the onnxruntime DirectML provider "
                    "accepts only the exact spelling)",
                )
            )
        canonical.append(known)
    return canonical


def _hidden_and_direction(attrs: dict, r: np.ndarray, at: str) -> tuple[int, Direction]:
    """The node's hidden_size (required: onnxruntime refuses a node without it) and direction."""
    if "hidden_size" not in attrs:
        guess = f"; R has shape {list(r.shape)}, which suggests hidden_size={r.shape[-1]}" if r.ndim == 3 else ""
        raise InputError(f"{at}attribute hidden_size is missing (onnxruntime requires it){guess}")
    hidden = int(attrs["hidden_size"])
    direction_text = _text(attrs.get("direction", b"forward"))
    try:
        direction = Direction(direction_text)
    except ValueError:
        raise InputError(f"{at}direction {direction_text!r} is not forward, reverse or bidirectional") from None
    return hidden, direction


def _check_weights(
    cell: Cell,
    direction: Direction,
    hidden: int,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None,
    p: np.ndarray | None,
    at: str,
) -> None:
    """W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] and P [D, peepholes*H], all of W's float type."""
    d, gh = direction.count, cell.gates * hidden
    if hidden < 1:
        raise InputError(f"{at}hidden_size {hidden} must be positive")
    if w.ndim != 3 or w.shape[:2] != (d, gh):
        raise InputError(
            f"{at}W has shape {list(w.shape)}, expected [{d}, {gh}, input_size] for hidden_size={hidden}, "
            f"direction={direction.value}"
        )
    if r.shape != (d, gh, hidden):
        raise InputError(f"{at}R has shape {list(r.shape)}, expected [{d}, {gh}, {hidden}] for hidden_size={hidden}")
    if b is not None and b.shape != (d, 2 * gh):
        raise InputError(f"{at}B has shape {list(b.shape)}, expected [{d}, {2 * gh}] for hidden_size={hidden}")
    peepholes = len(cell.spec.peepholes)
    if p is not None and p.shape != (d, peepholes * hidden):
        raise InputError(
            f"{at}P has shape {list(p.shape)}, expected [{d}, {peepholes * hidden}] for hidden_size={hidden}"
        )
    if w.dtype.name not in ("float16", "float32", "float64"):
        raise InputError(f"{at}W is {w.dtype}; recurrent weights are float16, float32 or float64")
    for label, array in (("R", r), ("B", b), ("P", p)):
        if array is not None and array.dtype != w.dtype:
            raise InputError(f"{at}{label} is {array.dtype} but W is {w.dtype}")


def _layout(node: onnx.NodeProto, version: int, attrs: dict, at: str, notes: list[Finding]) -> int:
    """The node's layout (0 or 1); an old version's output_sequence noted (Y is produced when named)."""
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise InputError(f"{at}layout {layout} is not 0 or 1")
    if "output_sequence" in attrs:
        notes.append(
            Finding(
                "outputs",
                Status.EXACT,
                f"output_sequence={attrs['output_sequence']} ({node.op_type}-{version}): Y is produced when it "
                "is named",
            )
        )
    return layout


def dequantized_note(role: str, name: str) -> Finding:
    """A weight stored as ``DequantizeLinear`` of integers that gatepack reads as the float values it computes."""
    return Finding(
        "quantized bias" if role == "B" else "quantized weights",
        Status.EXACT,
        f"{role} {name!r}: DequantizeLinear of integers, read as the float values the node computes on "
        "(written as float: the same numbers, stored in float)",
    )


def _float_view(records: list[QuantizedWeights]) -> np.ndarray:
    """The float weight [D, G*H, K] a ``DequantizeLinear`` computes from per-direction ``records``."""
    return np.stack([q.dequantized() for q in records])


def _direction_params(
    gh: int,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None,
    p: np.ndarray | None,
    per_dir: list[list],
    quantized: tuple[list[QuantizedWeights] | None, list[QuantizedWeights] | None] = (None, None),
) -> tuple[DirectionParams, ...]:
    """Per direction k: W[k], R[k], B[k] split into its input and recurrent halves (zeros without B), P[k], and
    the quantized records of W[k] and R[k] where ``DequantizeLinear`` computes them."""
    zeros = np.zeros(gh, dtype=w.dtype)
    wq, rq = quantized
    return tuple(
        DirectionParams(
            W=w[k],
            R=r[k],
            Wb=b[k, :gh] if b is not None else zeros,
            Rb=b[k, gh:] if b is not None else zeros,
            activations=tuple(per_dir[k]),
            P=None if p is None else p[k],
            Wq=wq[k] if wq else None,
            Rq=rq[k] if rq else None,
        )
        for k in range(len(per_dir))
    )


def _provenance(
    path: Path, node: onnx.NodeProto, name: str, version: int, layout: int, isolated: Isolated, attrs: dict
) -> Provenance:
    """Where the layer came from: the node, its operator version, inputs, layout, its isolated twin and its
    attributes (decoded, sorted by name)."""
    return Provenance(
        FORMAT,
        path,
        name,
        "node",
        node.op_type,
        version,
        tuple(node.input),
        layout,
        isolated,
        tuple((key, _decoded(value)) for key, value in sorted(attrs.items())),
    )


def _decoded(value: object) -> object:
    """An attribute value with its strings (bytes in the protobuf) decoded; lists as tuples."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return tuple(_decoded(v) for v in value)
    return value


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

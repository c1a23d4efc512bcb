"""OpenVINO IR reading: gatepack's own IR from its ``rt_info`` description, any other IR's
GRUSequence/RNNSequence/LSTMSequence nodes from the graph (the inputs a producer computes rather than takes
evaluated for two shapes), and its Loops/TensorIterators lifted (``openvino.lifting``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import gatepack.converters.formats.openvino.compressed as openvino_compressed
from gatepack.converters.description import (
    build_layer,
    constant_from_layout,
    elementary_direction,
    held_weight_name,
    parse,
)
from gatepack.converters.errors import InputError, NoRecurrentLayerError
from gatepack.converters.fileio import parse_json
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.openvino.ir import (
    FORMAT,
    FP16_SOURCE,
    OV_GATES,
    RT_INFO_OTHER_OPS,
    RT_INFO_PATH,
    SEQUENCE_OPS,
    all_ops,
    ov_message,
    read_ir,
    sequence_inputs,
)
from gatepack.converters.formats.openvino.lifting import LOOP_OPS, STATE_INPUTS, lift_loops
from gatepack.converters.formats.openvino.registration import openvino
from gatepack.converters.formats.openvino.shapes import (
    evaluate_for_two_shapes,
    from_shapes_only,
    zeros_whatever_the_shape,
)
from gatepack.converters.formats.openvino.stateful import held_states
from gatepack.converters.model import Model
from gatepack.schemas.activations import Activation, canonical_name
from gatepack.schemas.layer import (
    OUTPUT_ROLES,
    ROLE_LABELS,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    reorder_gates,
    state_roles,
)
from gatepack.schemas.quantized import QuantizedWeights, compacted


def _constant(node, index: int, path: Path, layer: str, role: str) -> tuple[np.ndarray, bool]:
    """The constant feeding input ``index`` of ``node`` (through a decompression Convert): (value, fp16-compressed?)."""
    if index >= node.get_input_size():
        raise InputError(f"{path}: layer {layer!r}: the node has no input {index} ({role})")
    source = node.input_value(index).get_node()
    if source.get_type_name() == "Convert" and source.input_value(0).get_node().get_type_name() == "Constant":
        return _constant_data(
            source.input_value(0).get_node(), path, layer, role, source.get_output_element_type(0)
        ), True
    if source.get_type_name() != "Constant":
        raise InputError(
            f"{path}: layer {layer!r}: {role} comes from a {source.get_type_name()} node "
            f"({source.get_friendly_name()!r}), not a constant",
            hint="gatepack reads recurrent weights stored as constants",
        )
    return _constant_data(source, path, layer, role), False


def _constant_data(constant, path: Path, layer: str, role: str, widen_to=None) -> np.ndarray:
    """A Constant's values (a copy, widened to ``widen_to``'s type when given); InputError for an element
    type that holds no numbers (e.g. dynamic) or data the .bin does not hold."""
    try:
        data = np.array(constant.get_data())
        return data.astype(widen_to.to_dtype()) if widen_to is not None else data
    except Exception as err:  # OpenVINO's errors for undefined element types and short weights
        raise InputError(
            f"{path}: layer {layer!r}: {role} constant {constant.get_friendly_name()!r} of element type "
            f"{constant.get_element_type()} cannot be read ({ov_message(err)})"
        ) from None


def read(path: str | Path, **_options) -> Model:
    """Read the recurrent layers of an IR: gatepack's (from its rt_info, checked against the graph)
    or any other producer's sequence nodes and the loops lifted into layers (``Model.skipped``: the
    loops that are no GRU/RNN/LSTM, and why)."""
    path = Path(path)
    ov_model = read_ir(path)
    if ov_model.has_rt_info(RT_INFO_PATH):
        return _read_described_ir(path, ov_model)
    layers, notes = [], {}
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() in SEQUENCE_OPS:
            layer, found = _read_sequence_op(path, op, ov_model)
            layers.append(layer)
            notes[layer.name] = found
    lifted, lifted_notes, refused = lift_loops(path, ov_model, openvino(), FP16_SOURCE)
    layers += lifted
    notes.update(lifted_notes)
    if not layers:
        raise _no_layer_error(path, ov_model, refused)
    kept = {*SEQUENCE_OPS, "Parameter", "Result", "Constant", "Convert"}
    lifted_loops = {layer.name for layer in lifted}
    weights = _constant_cones([op for op in ov_model.get_ops() if op.get_type_name() in SEQUENCE_OPS])
    other = [
        op.get_type_name()
        for op in ov_model.get_ops()
        if op.get_type_name() not in kept
        and op.get_friendly_name() not in lifted_loops
        and op.get_instance_id() not in weights
    ]
    meta = {
        "other_ops": sorted(set(other)),
        "other_op_count": len(other),
        **({"notes": ov_model.gatepack_named} if ov_model.gatepack_named else {}),
        **({"states": held} if (held := held_states(ov_model)) else {}),
    }
    return Model(path, FORMAT, layers, notes, refused, meta=meta)


def _read_described_ir(path: Path, ov_model) -> Model:
    """gatepack's own IR: each layer from its description in the rt_info, checked against its sequence op in the
    graph (``_read_described``); the other operators' types the rt_info lists, and a stateful IR's variables."""
    # a sequence op keeps its name over another op that OpenVINO's passes named alike (converting a whole ONNX model,
    # the frontend's Transpose of an LSTM's Y merged with the model's own, batch-major, takes the node's name)
    ops = sorted(all_ops(ov_model), key=lambda op: op.get_type_name() in SEQUENCE_OPS)
    ops_by_name = {op.get_friendly_name(): op for op in ops}
    entries = parse_json(ov_model.get_rt_info(RT_INFO_PATH).astype(str), f"{path}: rt_info {'/'.join(RT_INFO_PATH)}")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: rt_info {'/'.join(RT_INFO_PATH)} is not a non-empty list of layer descriptions")
    layers, notes = [], {}
    for entry in entries:
        layer, found = _read_described(path, entry, ops_by_name)
        layers.append(layer)
        notes[layer.name] = found
    other = (
        parse_json(ov_model.get_rt_info(RT_INFO_OTHER_OPS).astype(str), f"{path}: rt_info")
        if ov_model.has_rt_info(RT_INFO_OTHER_OPS)
        else []
    )
    if not isinstance(other, list) or not all(isinstance(op, str) for op in other):
        raise InputError(f"{path}: rt_info {'/'.join(RT_INFO_OTHER_OPS)} {other!r} is not a list of operator types")
    if len({layer.name for layer in layers}) != len(layers):
        raise InputError(f"{path}: rt_info describes two layers with the same name")
    held = held_states(ov_model)  # a stateful IR's variables
    meta = {"gatepack": True, "other_ops": other, **({"states": held} if held else {})}
    return Model(path, FORMAT, layers, notes, meta=meta)


def _no_layer_error(path: Path, ov_model, refused: list[tuple[str, str]]) -> NoRecurrentLayerError:
    """The error for an IR with no sequence op and no loop lifted: why its first loop is no GRU/RNN/LSTM, or (no
    loop) that OpenVINO's frontends may have unrolled the layer."""
    loops = sorted({op.get_type_name() for op in ov_model.get_ordered_ops() if op.get_type_name() in LOOP_OPS})
    return NoRecurrentLayerError(
        f"{path}: no GRUSequence, RNNSequence or LSTMSequence node"
        + (f", and its {'/'.join(loops)} is no GRU/RNN/LSTM: {refused[0][1]}" if refused else ""),
        hint=(
            "gatepack lifts a loop that steps one sequence through a GRU, RNN or LSTM cell"
            if refused
            else "OpenVINO's frontends may have unrolled the layer into elementary ops outside any loop"
        ),
    )


def _activations(names: list[str], alphas: list[float], betas: list[float], path: Path, layer: str) -> list[Activation]:
    from gatepack.schemas.activations import resolve_activations

    canonical = []
    for name in names:
        found = canonical_name(name)
        if found is None:
            raise InputError(f"{path}: layer {layer!r}: unknown activation {name!r}")
        canonical.append(found)
    acts, _ = resolve_activations(canonical, alphas, betas)
    return acts


def _implicit_inputs(
    path: Path, op, ov_model, name: str, cell: Cell
) -> tuple[bool, dict[str, bool], list[Finding], dict[str, np.ndarray]]:
    """Whether a sequence op's ``sequence_lengths`` and initial states are real inputs of the layer
    (per state role). ``ov.convert_model`` fills the required inputs with values computed from X's
    shape: the full length and zeros. Those mean "no sequence_lens" and "no initial state" (proven by
    evaluating them for two different input shapes); a state that is the same for every batch entry (a
    constant of the IR, a learned state broadcast to the batch) is held by the layer (the last item: role ->
    layout-0 value); lengths fed by a graph input stay inputs."""
    index = sequence_inputs(cell)
    roles = [role for role, _ in state_roles(cell)]
    lens = op.input_value(index["sequence_lens"])
    states = [op.input_value(index[role]) for role in roles]
    shape_only = [from_shapes_only(v) for v in (lens, *states)]
    trials = evaluate_for_two_shapes(ov_model, [lens, *states], op.input_value(0))
    lens_known = shape_only[0] and bool(trials) and all(got[0] is not None and x for got, x in trials)
    full_lengths = lens_known and all(
        got[0].shape == (x[0],) and bool(np.all(got[0].astype(np.int64) == x[1])) for got, x in trials if x
    )
    evaluated = [bool(trials) and all(got[k] is not None for got, _ in trials) for k in range(len(states) + 1)]
    zero_state = [
        shape_only[k]
        and (zeros_whatever_the_shape(states[k - 1]) or evaluated[k] and not any(np.any(got[k]) for got, _ in trials))
        for k in range(1, 1 + len(roles))
    ]
    found = _lengths_findings(path, op, name, lens_known, full_lengths)
    held = _held_or_exposed_states(roles, trials, shape_only, evaluated, zero_state, found)
    return not full_lengths, {role: not zero for role, zero in zip(roles, zero_state)}, found, held


def _lengths_findings(path: Path, op, name: str, lens_known: bool, full_lengths: bool) -> list[Finding]:
    """What a sequence op's ``sequence_lengths`` means: X's full length computed from shapes (no sequence_lens),
    or an input that OpenVINO CPU ignores on dynamic shapes (noted); InputError for lengths computed from
    constants and shapes that are not the full length."""
    if lens_known and not full_lengths:
        raise InputError(
            f"{path}: layer {name!r}: sequence_lengths is computed from constants and shapes but is not the full "
            "sequence length",
            hint="gatepack reads sequence lengths given as a graph input, or the full length",
        )
    if full_lengths:
        return [
            Finding(
                "sequence_lens",
                Status.EXACT,
                "sequence_lengths is computed from tensor shapes and is X's full length (for two input sizes): "
                "the layer has no sequence_lens input",
            )
        ]
    if not op.get_input_partial_shape(0).is_static:
        return [
            Finding(
                "sequence_lens",
                Status.EXACT,
                "sequence_lengths is an input of a dynamic-shape IR: OpenVINO CPU ignores it unless the model is "
                "reshaped to static shapes (gatepack runs the layer with static shapes)",
                warning="OpenVINO CPU ignores sequence_lengths on dynamic shapes",
            )
        ]
    return []


def _held_or_exposed_states(
    roles: list[str],
    trials: list,
    shape_only: list[bool],
    evaluated: list[bool],
    zero_state: list[bool],
    found: list[Finding],
) -> dict[str, np.ndarray]:
    """The initial states (``roles``; index k + 1 in ``trials``, ``shape_only`` and ``evaluated``) computed from
    constants and shapes that are not zeros: one the same for every batch entry is held by the layer (role ->
    layout-0 value, returned), any other becomes an input of the layer; each noted in ``found``."""
    held: dict[str, np.ndarray] = {}
    for k, role in enumerate(roles, start=1):
        value = _held_state([got[k] for got, _ in trials]) if shape_only[k] and evaluated[k] else None
        if value is not None and not zero_state[k - 1]:  # a learned state: the same for every batch entry
            held[role] = value
            found.append(
                Finding(role, Status.EXACT, f"{STATE_INPUTS[role[-1]]} is a constant of the IR {list(value.shape)}")
            )
        elif shape_only[k] and not zero_state[k - 1]:
            found.append(
                Finding(
                    role,
                    Status.EXACT,
                    f"{STATE_INPUTS[role[-1]]} is a constant of the IR, "
                    + ("not zeros" if evaluated[k] else "computed by operators gatepack does not evaluate")
                    + f"; gatepack makes it the layer's {role} input (feed it those values)",
                    warning="constant initial state exposed as an input",
                )
            )
    return held


def _held_state(trials: list[np.ndarray]) -> np.ndarray | None:
    """A state evaluated for two input sizings ([N, D, H] each) as the layer's constant in layout 0: the same
    array both times (a constant of the IR), or one batch row repeated to each batch ([D, 1, H]); else None."""
    first, second = trials
    if first.shape == second.shape and np.array_equal(first, second):
        return np.ascontiguousarray(first.transpose(1, 0, 2))
    rows = [t[:1] for t in trials]
    repeated = all(np.array_equal(t, np.broadcast_to(r, t.shape)) for t, r in zip(trials, rows))
    if repeated and np.array_equal(rows[0], rows[1]):
        return np.ascontiguousarray(rows[0].transpose(1, 0, 2))
    return None


@dataclass(frozen=True)
class _SequenceAttributes:
    """A sequence op's attributes: hidden size, direction, linear_before_reset, clip and activations."""

    hidden: int
    direction: Direction
    linear_before_reset: bool
    clip: float
    names: list[str]
    activations: list[Activation]


def _sequence_attributes(path: Path, op, name: str) -> _SequenceAttributes:
    """The attributes of the sequence op ``op``; a missing or malformed one is an InputError."""
    attrs = op.get_attributes()
    try:
        hidden = int(attrs["hidden_size"])
        direction = Direction(str(attrs["direction"]).lower())
        linear_before_reset = bool(attrs.get("linear_before_reset", False))
        clip = float(attrs.get("clip", 0.0))
        names = [str(a) for a in attrs.get("activations", [])]
        alphas, betas = (
            [float(a) for a in attrs.get("activations_alpha", [])],
            [float(a) for a in attrs.get("activations_beta", [])],
        )
        activations = _activations(names, alphas, betas, path, name)
        return _SequenceAttributes(hidden, direction, linear_before_reset, clip, names, activations)
    except (KeyError, ValueError, TypeError) as err:
        raise InputError(
            f"{path}: layer {name!r}: {op.get_type_name()} attributes are malformed "
            f"({' '.join(str(err).split())[:160]})"
        ) from None


def _check_sequence_weights(
    path: Path, op, name: str, cell: Cell, attrs: _SequenceAttributes, w: np.ndarray, r: np.ndarray, b: np.ndarray
) -> None:
    """W [D, G*H, I], R [D, G*H, H], B [D, G*H] ([D, 4H] for GRU with linear_before_reset); a finite clip and
    enough activations."""
    h, direction = attrs.hidden, attrs.direction
    gh, d = cell.gates * h, direction.count
    bias_rows = gh + h if cell is Cell.GRU and attrs.linear_before_reset else gh
    for label, array, shape in (
        ("W", w, (d, gh, w.shape[-1] if w.ndim == 3 else -1)),
        ("R", r, (d, gh, h)),
        ("B", b, (d, bias_rows)),
    ):
        if array.shape != shape:
            raise InputError(
                f"{path}: layer {name!r}: {label} has shape {list(array.shape)}, but hidden_size {h} and direction "
                f"{direction.value} make it {list(shape)}"
            )
    if not np.isfinite(attrs.clip) or len(attrs.activations) < cell.activation_count:
        raise InputError(
            f"{path}: layer {name!r}: clip {attrs.clip} or activations {attrs.names} are not usable for "
            f"{op.get_type_name()}"
        )


def _constant_cones(sequence_ops: list) -> set[int]:
    """The instance ids of the nodes computing the sequence ops' inputs from Constants alone (compressed weights:
    NNCF's Convert/Subtract/Multiply/Reshape chains), which are the layers' own weights, not operators around them.
    (A node's ``get_instance_id``, never ``id()``: each ``get_ops`` or ``get_node`` makes new Python wrappers, whose
    ids the garbage collector hands out again.)"""
    constant: dict[int, bool] = {}

    def from_constants(node) -> bool:
        key = node.get_instance_id()
        if key not in constant:
            kind = node.get_type_name()
            inputs = [node.input_value(k).get_node() for k in range(node.get_input_size())]
            constant[key] = kind == "Constant" or (
                kind != "Parameter" and bool(inputs) and all(map(from_constants, inputs))
            )
        return constant[key]

    cones: set[int] = set()
    stack = [op.input_value(k).get_node() for op in sequence_ops for k in range(op.get_input_size())]
    while stack:
        node = stack.pop()
        if node.get_instance_id() not in cones and from_constants(node):
            cones.add(node.get_instance_id())
            stack += [node.input_value(k).get_node() for k in range(node.get_input_size())]
    return cones


def _weight(
    op, index: int, path: Path, layer: str, role: str
) -> tuple[np.ndarray, bool, openvino_compressed.Spread | None]:
    """W or R of a sequence op: (value, fp16-compressed?, the integers' spread record or None). A compressed
    weight (``openvino.compressed``, NNCF's form) gives its float values and, when held exactly, its integers."""
    compressed = openvino_compressed.read(op.input_value(index).get_node())
    if compressed is None:
        return (*_constant(op, index, path, layer, role), None)
    return compressed.floats, compressed.spread is None, compressed.spread


def _with_records(
    cell: Cell,
    directions: tuple[DirectionParams, ...],
    wq: openvino_compressed.Spread | None,
    rq: openvino_compressed.Spread | None,
) -> tuple[DirectionParams, ...]:
    """``directions`` with the records of their compressed W and R (``wq``/``rq``: integers, scale and zero point
    spread over [D, G*H, K], in the op's gate order, put back in ONNX's as the floats were)."""

    def record(spread: openvino_compressed.Spread | None, k: int) -> QuantizedWeights | None:
        if spread is None:
            return None
        arrays = (spread.values, spread.scale, spread.zero)
        values, scale, zero = (reorder_gates(a[k], OV_GATES[cell], cell.gate_names) for a in arrays)
        return compacted(values, scale, zero, spread.bits, spread.arithmetic)

    return tuple(replace(p, Wq=record(wq, k), Rq=record(rq, k)) for k, p in enumerate(directions))


def _onnx_directions(
    cell: Cell, attrs: _SequenceAttributes, w: np.ndarray, r: np.ndarray, b: np.ndarray
) -> tuple[DirectionParams, ...]:
    """Per direction, the weights with their gates back in ONNX's order; the summed bias read as Wb = sum,
    Rb = 0 (GRU with linear_before_reset: [Wbz+Rbz, Wbr+Rbr, Wbh] and Rb = [0, 0, Rbh])."""
    h = attrs.hidden
    gh = cell.gates * h

    def onnx_gates(array: np.ndarray) -> np.ndarray:
        return reorder_gates(array, OV_GATES[cell], cell.gate_names)

    directions = []
    for k in range(attrs.direction.count):
        if cell is Cell.GRU and attrs.linear_before_reset:
            wb = np.concatenate([b[k, : 2 * h], b[k, 2 * h : 3 * h]])
            rb = np.concatenate([np.zeros(2 * h, b.dtype), b[k, 3 * h :]])
        else:
            wb, rb = onnx_gates(b[k]).copy(), np.zeros(gh, b.dtype)
        activations = tuple(attrs.activations[: cell.activation_count])
        directions.append(
            DirectionParams(W=onnx_gates(w[k]), R=onnx_gates(r[k]), Wb=wb, Rb=rb, activations=activations)
        )
    return tuple(directions)


def _sequence_interface(op, name: str, cell: Cell, has_lens: bool, has_state: dict, dtype: np.dtype) -> Interface:
    """The node's interface in OpenVINO's batch-major layout, its tensors named after the node."""
    roles = [role for role, _ in state_roles(cell)]
    x_shape = op.get_input_partial_shape(0)
    n = x_shape[0].get_length() if x_shape[0].is_static else None
    s = x_shape[1].get_length() if x_shape[1].is_static else None
    outputs = {role: f"{name}/{ROLE_LABELS[role]}" for role in OUTPUT_ROLES[: 1 + len(roles)]}
    return Interface(
        x=f"{name}/X",
        sequence_lens=f"{name}/sequence_lengths" if has_lens else None,
        **{role: f"{name}/{STATE_INPUTS[role[-1]]}" if has_state[role] else None for role in roles},
        layout=1,
        seq_length=s,
        batch_size=n,
        dtype=dtype.name,
        **outputs,
    )


def _read_sequence_op(path: Path, op, ov_model=None) -> tuple[RecurrentLayer, list[Finding]]:
    """A GRUSequence/RNNSequence/LSTMSequence node of any IR; interface in OpenVINO's batch-major
    convention, gates back in ONNX's order. With ``ov_model`` (another producer's IR), implicit full
    lengths and zero states are no inputs."""
    name = op.get_friendly_name()
    cell = SEQUENCE_OPS[op.get_type_name()]
    index = sequence_inputs(cell)
    (w, cw, wq), (r, cr, rq) = (_weight(op, index[role], path, name, role) for role in ("W", "R"))
    b, cb = _constant(op, index["B"], path, name, "B")
    attrs = _sequence_attributes(path, op, name)
    _check_sequence_weights(path, op, name, cell, attrs, w, r, b)
    found = [
        Finding(
            "bias",
            Status.FOLDED,
            "OpenVINO stores Wb + Rb summed; read back as Wb = sum, Rb = 0"
            + (" (Rb_h kept apart: linear_before_reset)" if attrs.linear_before_reset else ""),
        )
    ]
    if cw or cr or cb:
        found.append(FP16_SOURCE)
    roles = [role for role, _ in state_roles(cell)]
    has_lens, has_state, implicit, held = (
        _implicit_inputs(path, op, ov_model, name, cell)
        if ov_model is not None
        else (True, dict.fromkeys(roles, True), [], {})
    )
    found += implicit
    try:
        layer = RecurrentLayer(
            name,
            cell,
            int(w.shape[2]),
            attrs.hidden,
            attrs.direction,
            _with_records(cell, _onnx_directions(cell, attrs, w, r, b), wq, rq),
            _sequence_interface(op, name, cell, has_lens, has_state, w.dtype),
            attrs.linear_before_reset,
            attrs.clip if attrs.clip > 0 else None,
            True,
            constants={role: value.astype(w.dtype) for role, value in held.items()},
            provenance=Provenance(FORMAT, path, name),
        )
    except SpecError as err:
        raise InputError(f"{path}: {err}") from None
    return layer, found


def _held_directions(info, ops_by_name: dict, const) -> list[DirectionParams]:
    """The weights of a layer held by the elementary ONNX Loop gatepack wrote in place (``onnx.elementary``:
    W^T and Wb whole, R^T and Rb in blocks of gates, named ``description.held_weight_name``), in ONNX gate order."""
    directions = []
    for k in range(info.direction.count):
        prefix = held_weight_name(info.name, f"d{k}.")
        held = [n[len(prefix) :] for n in ops_by_name if n.startswith(prefix)]

        def named(label: str, d: int = k) -> np.ndarray:
            return const(f"held.d{d}.{label}")

        try:
            directions.append(elementary_direction(info, k, held, named))
        except ValueError as err:
            raise InputError(str(err)) from None
    return directions


def _read_described(path: Path, entry: dict, ops_by_name: dict) -> tuple[RecurrentLayer, list[Finding]]:
    """A layer gatepack wrote: semantics from rt_info, weights from the graph's named constants."""
    info = parse(path, entry)
    name, strategy = info.name, info.strategy
    acts = info.activations
    found: list[Finding] = []

    def const(label: str) -> np.ndarray:
        node = ops_by_name.get(f"{name}/{label}")
        if node is None or node.get_type_name() not in ("Constant", "Convert"):
            raise InputError(
                f"{path}: layer {name!r}: the graph has no constant {name}/{label} that its rt_info describes"
            )
        if node.get_type_name() == "Convert":  # fp16-compressed
            found.append(FP16_SOURCE)
            source = node.input_value(0).get_node()
            if source.get_type_name() != "Constant":
                raise InputError(
                    f"{path}: layer {name!r}: {name}/{label} converts a {source.get_type_name()} node, not a constant"
                )
            return _constant_data(source, path, name, label, node.get_output_element_type(0))
        return _constant_data(node, path, name, label)

    directions = []
    if strategy == "native":
        op = ops_by_name.get(name)
        if op is None or op.get_type_name() not in SEQUENCE_OPS:
            raise InputError(
                f"{path}: layer {name!r}: rt_info says native but the graph has no sequence node of that name"
            )
        layer, folded = _read_sequence_op(path, op)
        found += folded
        in_graph = [a.name for a in layer.directions[0].activations]
        if any([a.name for a in per] != in_graph for per in acts):
            raise InputError(
                f"{path}: layer {name!r}: its rt_info activations {[[a.name for a in per] for per in acts]} "
                f"contradict the graph's {in_graph}"
            )
        directions = [replace(p, activations=acts[k], P=None) for k, p in enumerate(layer.directions)]
    elif strategy == "held":
        directions = _held_directions(info, ops_by_name, const)
    else:
        peepholes = f"{name}/P0" in ops_by_name
        for k in range(info.direction.count):
            directions.append(
                DirectionParams(
                    W=const(f"W{k}"),
                    R=const(f"R{k}"),
                    Wb=const(f"Wb{k}"),
                    Rb=const(f"Rb{k}"),
                    activations=acts[k],
                    P=const(f"P{k}") if peepholes else None,
                )
            )
    constants = {role: constant_from_layout(const(role), role, 0) for role in info.constant_roles}
    return build_layer(path, info, directions, Provenance(FORMAT, path, name, strategy), constants), found

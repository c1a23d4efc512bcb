"""Lifting OpenVINO loops: a ``Loop`` or ``TensorIterator`` whose body computes one step of a
GRU, RNN or LSTM, turned into a canonical layer (``converters.lifting`` proves which one).

``ov.convert_model`` of a Keras 3 recurrent layer writes no sequence op: TensorFlow's ``while`` becomes
a ``Loop`` whose body gathers step t of an invariant input X [S,N,I] (Keras transposes its [N,S,I]
input in front), multiplies it and the state by constants (MatMul), applies Sigmoid/Tanh, and writes
the new h into a [S,N,H] buffer with ``ScatterUpdate``; the states are merged inputs (their initial
values zeros computed from X's shape) and the final states body outputs of the last iteration. Older
IRs and OpenVINO's own transformations write a ``TensorIterator`` slicing X along time, its body an
``LSTMCell``/``GRUCell``/``RNNCell`` with constant weights. Both are read the same way::

    X        the one float rank-3 input that is not computed from constants and shapes: an invariant
             input (time along axis 0), or a sliced one (axis 0: layout 0; axis 1: layout 1 with
             Y concatenated along axis 1; stride -1: a reverse layer); a Transpose [1,0,2] in
             front of an invariant X makes the layer batch-major on the Transpose's input
    states   the float rank-2 merged inputs [N,H]: one (GRU, RNN: h) or two (LSTM: h is the one
             whose body parameter feeds a MatMul or a cell op's state input 1, c the other); each
             initial value is zeros (proven by evaluating it for two input shapes) or a graph tensor
             (the layer's initial_h/initial_c input); a non-zero constant is refused
    Y        the one float rank-3 loop output (a buffer or a concatenation); none: Y is not read
    weights  every float constant of the body (through fp16 decompression Converts) and every float
             constant passed in as an invariant input
    others   every other loop input (trip count, condition, counters, buffers) must be computed from
             constants and shapes alone

The layer's tensors are named after the loop, ``<loop>/X``, ``<loop>/Y``, ``<loop>/Y_h``... (they are
the loop's own, with the direction axis of a canonical layer). The proof runs the original loop on
OpenVINO CPU (f32), cut out of a fresh copy of the IR: X and the states fed by new parameters, the
model's own inputs (which the trip count and buffers are computed from) given zeros of the sizes
that make X the size fed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.openvino.ir import read_ir, run_model
from gatepack.converters.formats.openvino.shapes import (
    Sizing,
    evaluate_for_two_shapes,
    from_shapes_only,
    node_key,
    shape_of,
    zeros_whatever_the_shape,
)
from gatepack.converters.lifting import ACTIVATION_OPS, LiftRefused, Recurrence, candidates_from_constants, lift
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    Direction,
    Interface,
    Provenance,
    RecurrentLayer,
)

LOOP_OPS = ("Loop", "TensorIterator")
_CELL_OPS = {"LSTMCell": 1, "GRUCell": 1, "RNNCell": 1}  # a cell op's h input (its input 1)
STATE_INPUTS = {"h": "initial_hidden_state", "c": "initial_cell_state"}  # OpenVINO's names of the state inputs


class _NotALayer(Exception):
    pass


@dataclass(frozen=True)
class LoopHandle:
    """Where a lifted loop's layer is in the IR: loop input and output indices (``run_lifted``)."""

    loop: str  # the loop's friendly name
    x_input: int
    transposed: bool  # X reaches the loop through a Transpose [1,0,2] (the layer is batch-major on its input)
    states: tuple[tuple[str, int, int | None, bool], ...]  # (h | c, loop input, final-state output, fed?)
    y_output: int | None
    y_batch_major: bool  # the loop's Y is [N,S,H] (concatenated along axis 1), else [S,N,H]
    reverse: bool  # X sliced from the last step to the first: a reverse layer
    flip_y: bool  # ... whose Y the loop writes in processing order
    hidden_size: int


_LIFTED: dict[tuple, tuple] = {}  # file identity -> what lift_loops found (the proofs run OpenVINO: cached)
_LIFTED_KEPT = 8


def _identity(path: Path) -> tuple:
    """The IR's .xml and .bin as they are now (a changed file is another key)."""
    found = []
    for file in (path, path.with_suffix(".bin")):
        stat = file.stat()
        found.append((str(file.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def lift_loops(
    path: Path, ov_model, ov, fp16_finding: Finding
) -> tuple[list[RecurrentLayer], dict, list[tuple[str, str]]]:
    """Layers lifted from the top-level loops of ``ov_model`` (read from ``path``), their findings
    (``fp16_finding`` for a loop whose weights are stored as fp16), and (loop, why not) for every
    loop that is no GRU/RNN/LSTM. Reading the same unchanged files again reuses the proofs."""
    if not any(op.get_type_name() in LOOP_OPS for op in ov_model.get_ordered_ops()):
        return [], {}, []
    key = (_identity(path), str(path))
    if key not in _LIFTED:
        if len(_LIFTED) >= _LIFTED_KEPT:
            _LIFTED.pop(next(iter(_LIFTED)))
        _LIFTED[key] = _lift_loops(path, ov_model, ov, fp16_finding)
    layers, notes, refused = _LIFTED[key]
    return list(layers), {name: list(found) for name, found in notes.items()}, list(refused)


def _lift_loops(path: Path, ov_model, ov, fp16_finding: Finding) -> tuple:
    layers, notes, refused = [], {}, []
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() not in LOOP_OPS:
            continue
        name = op.get_friendly_name()
        try:
            handle, itf, sizes = _structure(op, ov_model)
        except _NotALayer as err:
            refused.append((name, f"{op.get_type_name()} {name!r}: {err}"))
            continue
        input_size, hidden_size = sizes
        rec = Recurrence(
            name=name,
            found=f"{op.get_type_name()} {name!r}",
            direction=Direction.REVERSE if handle.reverse else Direction.FORWARD,
            interface=itf,
            input_size=input_size,
            hidden_size=hidden_size,
            candidates=candidates_from_constants(_body_constants(op), input_size, hidden_size),
            activations=_body_activations(op),
            run_original=functools.partial(run_lifted, path, handle, itf, ov=ov),
        )
        try:
            lifted = lift(rec)
        except LiftRefused as err:
            refused.append((name, str(err)))
            continue
        for params in lifted.layer.directions:  # shared by every read of the same files: never written to
            for array in (params.W, params.R, params.Wb, params.Rb):
                array.setflags(write=False)
        layers.append(replace(lifted.layer, provenance=Provenance("openvino", path, name, "lifted", handle=handle)))
        notes[name] = ([fp16_finding] if _fp16_weights(op) else []) + [
            Finding("lifted", Status.REPACKED, _lifted_text(op, lifted.description, lifted.tried, handle, itf))
        ]
    return layers, notes, refused


def _lifted_text(op, description: str, tried: int, handle: LoopHandle, itf: Interface) -> str:
    names = ", ".join(repr(getattr(itf, role)) for role in (*INPUT_ROLES, *OUTPUT_ROLES) if getattr(itf, role))
    text = (
        f"lifted from an OpenVINO {op.get_type_name()} {_body_text(op)}: {description}; proven against OpenVINO "
        f"CPU running the original loop on random inputs ({tried} reading(s) tried). Its tensors are the loop's, "
        f"named {names}"
    )
    if handle.transposed:
        text += " (X is the Transpose's input: batch-major)"
    if _reversed_in_front(op.input_value(handle.x_input)):
        text += (
            ". X is reversed in time in front of the loop (Keras's go_backwards, or the backward half of "
            "Bidirectional): the layer runs forward over the reversed sequence and its Y is in processing order"
        )
    return text


# ------------------------------------------------------------------------------------ structure


def _structure(op, ov_model) -> tuple[LoopHandle, Interface, tuple[int, int]]:
    """The loop ``op`` as a layer's structure: which input is X (sliced step by step, or whole behind a
    Transpose), which are the states and outputs, and the sizes; a loop that is no layer is ``_NotALayer``."""
    x_desc, x_value, states = _classified_inputs(op)
    layout, reverse, transposed = _x_layout(x_desc, x_value)
    x_shape = op.get_input_partial_shape(x_desc.input_index)
    if x_shape.rank.is_dynamic or x_shape.rank.get_length() != 3 or x_shape[2].is_dynamic:
        raise _NotALayer(f"X has shape {x_shape}, not [S,N,I] with a known I")
    input_size = x_shape[2].get_length()
    ordered = _order_states(states)
    hidden = op.get_function().get_parameters()[ordered[0][0].body_parameter_index].get_output_partial_shape(0)[1]
    if hidden.is_dynamic:
        raise _NotALayer("its state's size is not known")
    hidden_size = hidden.get_length()
    loop = op.get_friendly_name()
    state_handles, names = _state_handles(op, ov_model, states, ordered, x_value)
    y_outputs = _sequence_outputs(op, layout)
    y_output = y_outputs[0].output_index if y_outputs else None
    shape = op.get_input_partial_shape(x_desc.input_index)
    if transposed:
        shape = x_value.get_node().get_input_partial_shape(0)
    s_dim, n_dim = (shape[1], shape[0]) if layout else (shape[0], shape[1])
    itf = Interface(
        x=f"{loop}/X",
        y=f"{loop}/Y" if y_output is not None else None,
        layout=layout,
        seq_length=s_dim.get_length() if s_dim.is_static else None,
        batch_size=n_dim.get_length() if n_dim.is_static else None,
        dtype="float32",
        **names,
    )
    if itf.y is None and itf.y_h is None:
        raise _NotALayer("none of its outputs is Y or the final hidden state")
    concat = y_outputs[0] if y_outputs and type(y_outputs[0]).__name__ == "ConcatOutputDescription" else None
    handle = LoopHandle(
        loop,
        x_desc.input_index,
        transposed,
        tuple(state_handles),
        y_output,
        y_batch_major=concat is not None and concat.axis == 1,
        reverse=reverse,
        flip_y=reverse and (concat is None or concat.stride > 0),
        hidden_size=hidden_size,
    )
    return handle, itf, (input_size, hidden_size)


def _classified_inputs(op) -> tuple:
    """The loop's X (its input description and outer value) and its states (description, outer value, body
    parameter): X is the one float input not computed from shapes, a state a merged float [N,H] input; weights
    passed in are skipped, and any other input must be computed from shapes."""
    params = op.get_function().get_parameters()
    xs, states, others = [], [], []
    for desc in op.get_input_descriptions():
        kind = type(desc).__name__
        outer = op.input_value(desc.input_index)
        param = params[desc.body_parameter_index]
        float_ = param.get_element_type().is_real()
        rank = param.get_output_partial_shape(0).rank
        rank = rank.get_length() if rank.is_static else None
        if float_ and kind == "MergedInputDescription" and rank == 2:
            states.append((desc, outer, param))
        elif float_ and outer.get_node().get_type_name() in ("Constant", "Convert") and from_shapes_only(outer):
            continue  # a weight passed in (read with the body's constants)
        elif float_ and not from_shapes_only(outer) and kind in ("InvariantInputDescription", "SliceInputDescription"):
            xs.append((desc, outer))
        else:
            others.append((desc, outer))
    masks = [
        d.input_index
        for d, o in others
        if params[d.body_parameter_index].get_element_type().get_type_name() == "boolean" and not from_shapes_only(o)
    ]
    if masks:
        raise _NotALayer(
            f"masked: it reads a per-step mask of the model (input {masks[0]}; Keras masking), which gatepack lifts "
            "from tf2onnx's ONNX Loops but not yet from OpenVINO's (convert the Keras model with tf2onnx instead)"
        )
    if len(xs) != 1:
        raise _NotALayer(f"it reads {len(xs)} float sequences that are not computed from shapes, not one (X)")
    if len(states) not in (1, 2):
        raise _NotALayer(f"it carries {len(states)} float [N,H] states (a GRU or RNN carries one, an LSTM two)")
    for desc, outer in others:
        if not from_shapes_only(outer):
            raise _NotALayer(f"its input {desc.input_index} is a tensor of the model, not X or a state")
    (x_desc, x_value) = xs[0]
    return x_desc, x_value, states


def _x_layout(x_desc, x_value) -> tuple[int, bool, bool]:
    """(layout, reverse, transposed): X sliced along axis 0 or 1 (a negative stride: in reverse), or read
    whole behind a Transpose [1, 0, 2] (batch-major)."""
    layout, reverse = 0, False
    transposed = False
    if type(x_desc).__name__ == "SliceInputDescription":
        if x_desc.axis not in (0, 1) or abs(x_desc.stride) != 1 or x_desc.part_size != 1:
            raise _NotALayer(f"it slices X along axis {x_desc.axis} by {x_desc.stride}, not step by step in time")
        layout, reverse = x_desc.axis, x_desc.stride < 0
    else:
        x_node = x_value.get_node()
        if x_node.get_type_name() == "Transpose":
            perm = x_node.input_value(1).get_node()
            if perm.get_type_name() == "Constant" and [int(v) for v in np.ravel(perm.get_data())] == [1, 0, 2]:
                transposed, layout = True, 1
    return layout, reverse, transposed


def _state_handles(op, ov_model, states: list, ordered: list, x_value) -> tuple[list, dict]:
    """Per state (h, then c): (role, input index, final output index, fed), and the interface's names of the
    initial and final states; an initial state the model computes must be zeros (evaluated for two shapes)."""
    finals = {
        d.body_value_index: d.output_index
        for d in op.get_output_descriptions()
        if type(d).__name__ == "BodyOutputDescription" and d.iteration == -1
    }
    loop = op.get_friendly_name()
    state_handles, names = [], {}
    trials = evaluate_for_two_shapes(ov_model, [outer for _, outer, _ in states], x_value)
    for role, (desc, outer) in zip("hc", ordered):
        fed = not from_shapes_only(outer)
        if not fed:
            k = [o for _, o, _ in states].index(outer)
            evaluated_zeros = trials and not any(got[k] is None or np.any(got[k]) for got, _ in trials)
            if not (evaluated_zeros or zeros_whatever_the_shape(outer)):
                raise _NotALayer(f"its initial {STATE_INPUTS[role]} is computed from constants but is not zeros")
        output = finals.get(desc.body_value_index)
        state_handles.append((role, desc.input_index, output, fed))
        names[f"initial_{role}"] = f"{loop}/initial_{role}" if fed else None
        names[f"y_{role}"] = f"{loop}/Y_{role}" if output is not None else None
    return state_handles, names


def _sequence_outputs(op, layout: int) -> list:
    """The loop's float rank-3 outputs: none or one (Y), concatenated along the axis X is sliced along."""
    y_outputs = [
        d
        for d in op.get_output_descriptions()
        if op.get_output_partial_shape(d.output_index).rank.is_static
        and op.get_output_partial_shape(d.output_index).rank.get_length() == 3
        and op.get_output_element_type(d.output_index).is_real()
    ]
    if len(y_outputs) > 1:
        raise _NotALayer(f"it has {len(y_outputs)} sequence outputs, not one (Y)")
    if y_outputs and type(y_outputs[0]).__name__ == "ConcatOutputDescription" and y_outputs[0].axis != layout:
        raise _NotALayer(f"it concatenates Y along axis {y_outputs[0].axis} but slices X along axis {layout}")
    return y_outputs


def _order_states(states: list) -> list[tuple]:
    """(desc, outer value) of h, then c: h is the state whose body parameter feeds a MatMul or a cell
    op's hidden-state input."""
    if len(states) == 1:
        return [(states[0][0], states[0][1])]
    feeds_product = [
        any(
            target.get_node().get_type_name() == "MatMul"
            or _CELL_OPS.get(target.get_node().get_type_name()) == target.get_index()
            for target in _consumers(param)
        )
        for _, _, param in states
    ]
    if feeds_product.count(True) != 1:
        raise _NotALayer("of its two states, not exactly one is multiplied by a matrix (h)")
    h = feeds_product.index(True)
    return [(states[h][0], states[h][1]), (states[1 - h][0], states[1 - h][1])]


def _consumers(param) -> list:
    """The inputs ``param`` feeds, through Convert and Reshape/Squeeze/Unsqueeze."""
    found, frontier = [], [param.output(0)]
    for _ in range(3):
        nxt = []
        for output in frontier:
            for target in output.get_target_inputs():
                found.append(target)
                if target.get_node().get_type_name() in ("Convert", "Reshape", "Squeeze", "Unsqueeze"):
                    nxt.append(target.get_node().output(0))
        frontier = nxt
    return found


def _behind_convert(node):
    """The node a decompression Convert reads (an fp16 constant widened), else ``node`` itself."""
    return node.input_value(0).get_node() if node.get_type_name() == "Convert" else node


def _floats(constant) -> np.ndarray:
    """A Constant's values as float32 (fp16 widens exactly)."""
    return np.array(constant.get_data()).astype(np.float32)


def _body_constants(op) -> dict[str, np.ndarray]:
    """The float constants a step may multiply by: the body's (fp16 ones widened by their Convert)
    and those passed in as invariant inputs, keyed by friendly name; and, where the body multiplies
    by several matrices with the same inner size (Keras's GRU with the reset before the matmul
    multiplies h by R_zr and r * h by R_h), those matrices joined in body order, as [rows, inner]."""
    found = {}
    products: dict[int, list[tuple[str, np.ndarray]]] = {}
    for node in op.get_function().get_ordered_ops():
        if node.get_type_name() == "Constant" and node.get_element_type().is_real():
            found[node.get_friendly_name()] = _floats(node)
        if node.get_type_name() == "MatMul":
            source = _behind_convert(node.input_value(1).get_node())
            if source.get_type_name() == "Constant" and len(source.get_output_partial_shape(0)) == 2:
                weight = _floats(source)
                weight = weight if node.get_attributes().get("transpose_b") else weight.T  # -> [rows, inner]
                products.setdefault(weight.shape[1], []).append((source.get_friendly_name(), weight))
    for parts in products.values():
        if len(parts) > 1:
            found[" + ".join(name for name, _ in parts)] = np.concatenate([w for _, w in parts])
    for desc in op.get_input_descriptions():
        source = _behind_convert(op.input_value(desc.input_index).get_node())
        if type(desc).__name__ == "InvariantInputDescription" and source.get_type_name() == "Constant":
            if source.get_element_type().is_real():
                found[source.get_friendly_name()] = _floats(source)
    return found


def _reversed_in_front(value, depth: int = 6) -> bool:
    """Whether a ReverseSequence or Reverse computes ``value`` within ``depth`` data ops."""
    node = value.get_node()
    for _ in range(depth):
        if node.get_type_name() in ("ReverseSequence", "Reverse"):
            return True
        if node.get_input_size() == 0:
            return False
        node = node.input_value(0).get_node()
    return False


def _body_text(op) -> str:
    cells = sorted({n.get_type_name() for n in op.get_function().get_ordered_ops()} & set(_CELL_OPS))
    if cells:
        return f"over an {'/'.join(cells)}"
    return "of elementary ops (as ov.convert_model writes Keras layers)"


def _fp16_weights(op) -> bool:
    return any(
        node.get_type_name() == "Constant" and node.get_element_type().get_type_name() == "f16"
        for node in op.get_function().get_ordered_ops()
    )


def _body_activations(op) -> frozenset[str]:
    """The activations the body applies: its Sigmoid/Tanh/Relu ops and its cell ops' activations."""
    found = set()
    for node in op.get_function().get_ordered_ops():
        kind = node.get_type_name()
        if kind.lower() in ACTIVATION_OPS:
            found.add(kind.lower())
        elif kind in _CELL_OPS:
            found |= {str(a).lower() for a in node.get_attributes().get("activations", [])}
    return frozenset(found)


# ------------------------------------------------------------------------------------- running


def run_lifted(path: Path, handle: LoopHandle, itf: Interface, feed: dict[str, np.ndarray], ov) -> dict:
    """The original loop on OpenVINO CPU: canonical Y [S,1,N,H] and final states [1,N,H], in the
    layout. The loop is cut out of a fresh copy of the IR; X and the states are new parameters."""
    _, ops = ov
    ov_model = read_ir(path)
    loop = next((o for o in ov_model.get_ordered_ops() if o.get_friendly_name() == handle.loop), None)
    if loop is None:
        raise RuntimeFailure(f"{path}: the IR has no loop {handle.loop!r}")
    x = np.asarray(feed[itf.x], np.float32)
    x_seq = x.transpose(PERM_SWAP_01) if itf.layout else x  # [S,N,I]
    s, n = x_seq.shape[:2]
    x_value = loop.input_value(handle.x_input)
    sized = _original_sizes(ov_model, x_value, s, n, f"{path}: loop {handle.loop!r}")
    inputs = {}
    for param in ov_model.get_parameters():
        inputs[param.get_output_tensor(0).get_any_name()] = np.zeros(
            sized[node_key(param)], param.get_element_type().to_dtype()
        )
    new_params = []

    def parameter(name: str, array: np.ndarray):
        param = ops.parameter(list(array.shape), np.float32, name=name)
        param.output(0).get_tensor().set_names({name})
        new_params.append(param)
        inputs[name] = np.ascontiguousarray(array, np.float32)
        return param

    x_param = parameter("gatepack_lift_x", x)
    source = ops.transpose(x_param, [1, 0, 2]) if handle.transposed else x_param
    loop.input(handle.x_input).replace_source_output(source.output(0))
    outputs = {}
    for role, index, output, fed in handle.states:
        given = feed.get(getattr(itf, f"initial_{role}") or "")
        state = np.zeros((n, handle.hidden_size), np.float32)
        if fed and given is not None:
            state = np.asarray(given, np.float32).reshape(state.shape)
        loop.input(index).replace_source_output(parameter(f"gatepack_lift_{role}", state).output(0))
        if output is not None and getattr(itf, f"y_{role}"):
            outputs[getattr(itf, f"y_{role}")] = loop.output(output)
    if handle.y_output is not None and itf.y:
        outputs[itf.y] = loop.output(handle.y_output)
    results = []
    for k, output in enumerate(outputs.values()):
        output.get_tensor().set_names({f"gatepack_lift_out{k}"})
        results.append(ops.result(output))
    ov_api, _ = ov
    model = ov_api.Model(results, [*ov_model.get_parameters(), *new_params], "lifted")
    got = run_model(model, inputs, f"{path}: loop {handle.loop!r}")
    found = {}
    for k, role in enumerate(outputs):
        value = np.asarray(got[f"gatepack_lift_out{k}"], np.float32)
        if role != itf.y:  # a final state [N,H] -> [1,N,H] or [N,1,H]
            found[role] = value[:, None] if itf.layout else value[None]
            continue
        y = value if handle.y_batch_major else value.transpose(PERM_SWAP_01) if itf.layout else value
        if handle.flip_y:
            y = y[:, ::-1] if itf.layout else y[::-1]
        found[role] = y[:, :, None] if itf.layout else y[:, None]  # -> [N,S,1,H] or [S,1,N,H]
    return found


def _original_sizes(ov_model, x_value, s: int, n: int, label: str) -> dict:
    """Dims for every input of the model such that ``x_value`` (the loop's X) is [s, n, I]: each
    dynamic dimension is tried as a distinct number above every static one, and the one that becomes
    X's time (batch) dimension gets s (n); any other dynamic dimension gets 1. X's shape is then checked
    (OpenVINO's shape inference where gatepack's rules do not reach: a Dense in front of the loop)."""
    shapes = {node_key(p): list(p.get_partial_shape()) for p in ov_model.get_parameters()}
    static = [d.get_length() for dims in shapes.values() for d in dims if d.is_static]
    markers = iter(range(max(static, default=0) + 101, 1 << 30, 2))
    trial = {key: [d.get_length() if d.is_static else next(markers) for d in dims] for key, dims in shapes.items()}
    if all(d.is_static for dims in shapes.values() for d in dims):
        return trial
    shape = shape_of(x_value, Sizing(trial, ov_model))
    if shape is None:
        raise RuntimeFailure(f"{label}: its X is computed by operators gatepack cannot size, so it cannot be run")
    mapping = {shape[0]: s, shape[1]: n}
    sized = {
        key: [v if dims[k].is_static else mapping.get(v, 1) for k, v in enumerate(trial[key])]
        for key, dims in shapes.items()
    }
    shape = shape_of(x_value, Sizing(sized, ov_model))
    if shape is None or shape[:2] != [s, n]:
        raise RuntimeFailure(
            f"{label}: no sizing of the model's inputs gatepack tries makes its X [{s}, {n}, I] (X is {shape} "
            "then), so it cannot be run"
        )
    return sized

"""Shape arithmetic on an OpenVINO graph, without running it: the static shape a value takes, and the
value a shape computation gives, when every graph input has given sizes.

``ov.convert_model`` fills a sequence op's required inputs (full sequence lengths, zero initial
states) and a loop's trip count and buffers with values computed from X's shape by a few operators
(ShapeOf, Gather, Concat, Broadcast, ...). The readers prove what such a value is by evaluating it for
two sizings of the inputs, each dynamic dimension a distinct number, so that a wrong dimension cannot
match by accident. The shapes of the few operators recurrent exports put between an input and a sequence
op are inferred here; any other operator's (a MatMul, a convolution in front of the layer: the shape
``ShapeOf`` reads may be any tensor's) is OpenVINO's own shape inference on a copy of the model reshaped
to the sizing. Only the few shape arithmetic operators below are evaluated; anything else gives None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def node_key(node) -> object:
    return node.get_instance_id() if hasattr(node, "get_instance_id") else node.get_friendly_name()


def from_shapes_only(value) -> bool:
    """True when ``value`` is computed from constants and tensor shapes alone, never a tensor's values
    (``ov.convert_model`` computes a sequence op's full lengths and zero state that way)."""
    stack, seen = [value.get_node()], set()
    while stack:
        node = stack.pop()
        if node_key(node) in seen:
            continue
        seen.add(node_key(node))
        kind = node.get_type_name()
        if kind == "ShapeOf":
            continue
        if kind in ("Parameter", "ReadValue") or node.get_input_size() == 0 and kind != "Constant":
            return False
        stack.extend(node.input_value(k).get_node() for k in range(node.get_input_size()))
    return True


_ZERO_KEEPING = {"Broadcast", "Tile", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Convert", "Slice", "Gather"}


def zeros_whatever_the_shape(value, depth: int = 8) -> bool:
    """True when ``value`` is an all-zero constant broadcast or rearranged (Broadcast to a shape computed
    from any tensor, Tile, Reshape, Slice, ...: their data input), or a Concat of such values: zeros
    for every sizing of the model, proven without sizing anything (``ov.convert_model`` writes a zero
    initial state as ``Broadcast(0, shape)``, the batch in the shape read from any tensor)."""
    node = value.get_node()
    kind = node.get_type_name()
    if kind == "Constant":
        shape = node.get_output_partial_shape(0)
        return shape.is_static and not np.any(np.array(node.get_data()))
    if depth == 0 or node.get_output_size() != 1 or kind not in _ZERO_KEEPING | {"Concat"}:
        return False
    sources = node.input_values() if kind == "Concat" else [node.input_value(0)]
    return all(zeros_whatever_the_shape(source, depth - 1) for source in sources)


_SPLITS = ("Split", "VariadicSplit")
_SAME_SHAPE = {"Convert", "Relu", "Tanh", "Sigmoid", "Clamp", "Exp", "Negative", "Abs", "Sqrt", "Erf", "Gelu"}
_BROADCASTING = {"Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power"}


MAX_SHAPE_VALUES = 1 << 16  # a shape computation holds a few numbers; anything bigger is not one


@dataclass
class Sizing:
    """One assignment of sizes to a model's inputs, and what was derived from it (each node once)."""

    inputs: dict  # Parameter key -> dims
    model: object = None  # the model the Parameters are of: OpenVINO sizes the operators not inferred here
    shapes: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    reshaped: dict | None = None  # node key -> that node in a copy of ``model`` reshaped to ``inputs`` (made once)


def _memoised(table: dict, value, compute):
    key = (node_key(value.get_node()), value.get_index())
    if key not in table:
        table[key] = None  # a cycle (never in a valid model) evaluates to unknown
        table[key] = compute()
    return table[key]


def shape_of(value, sizes: Sizing) -> list[int] | None:
    """The static shape ``value`` takes when every graph input has the sizes in ``sizes`` (each dynamic
    dimension a distinct number), by OpenVINO's shape rules for the few operators recurrent exports put
    between an input and a sequence op; None for any other operator."""
    return _memoised(sizes.shapes, value, lambda: _infer_shape(value, sizes))


def _squeezed(dims: list[int], axes: list[int]) -> list[int]:
    dropped = {a % len(dims) for a in axes} if axes else {k for k, d in enumerate(dims) if d == 1}
    if any(dims[a] != 1 for a in dropped):
        raise ValueError("squeezing a dimension that is not 1")
    return [d for k, d in enumerate(dims) if k not in dropped]


def _unsqueezed(dims: list[int], axes: list[int]) -> list[int]:
    rank = len(dims) + len(axes)
    positions = {a % rank for a in axes}
    rest = iter(dims)
    return [1 if k in positions else next(rest) for k in range(rank)]


def _reshaped(dims: list[int], target: list[int], special_zero: bool) -> list[int]:
    """Reshape-1's output shape, by arithmetic (nothing is allocated)."""
    out = [dims[k] if v == 0 and special_zero else v for k, v in enumerate(target)]
    total = int(np.prod(dims, dtype=object))
    if out.count(-1) == 1:
        known = int(np.prod([d for d in out if d != -1], dtype=object))
        if known == 0 or total % known:
            raise ValueError("no size for the -1 dimension")
        out[out.index(-1)] = total // known
    if any(d < 0 for d in out) or int(np.prod(out, dtype=object)) != total:
        raise ValueError("reshape changes the element count")
    return out


def _infer_shape(value, sizes: Sizing) -> list[int] | None:
    node = value.get_node()
    kind = node.get_type_name()
    if kind == "Parameter":
        return sizes.inputs.get(node_key(node))
    if kind == "Constant":
        return [int(d) for d in np.array(node.get_data()).shape]
    args = [node.input_value(k) for k in range(node.get_input_size())]
    if kind in _SAME_SHAPE:
        return shape_of(args[0], sizes)
    if kind in _BROADCASTING:
        shapes = [shape for a in args if (shape := shape_of(a, sizes)) is not None]
        return None if len(shapes) < len(args) else list(np.broadcast_shapes(*map(tuple, shapes)))
    if kind in ("GRUSequence", "RNNSequence", "LSTMSequence"):
        x, w = shape_of(args[0], sizes), shape_of(args[3 if kind != "LSTMSequence" else 4], sizes)
        if x is None or w is None:
            return None
        hidden = int(node.get_attributes()["hidden_size"])
        return [x[0], w[0], x[1], hidden] if value.get_index() == 0 else [x[0], w[0], hidden]
    if kind == "Concat":
        shapes = [shape for a in args if (shape := shape_of(a, sizes)) is not None]
        if len(shapes) < len(args):
            return None
        axis = int(node.get_attributes()["axis"]) % len(shapes[0])
        return [sum(sh[axis] for sh in shapes) if k == axis else d for k, d in enumerate(shapes[0])]
    if kind in ("Transpose", "Squeeze", "Unsqueeze", "Reshape", "Broadcast", "ShapeOf"):
        data = shape_of(args[0], sizes)
        if data is None:
            return None
        if kind == "ShapeOf":
            return [len(data)]
        values = evaluate_shape_cone(args[1], sizes) if len(args) > 1 else None
        if values is None:
            return None if kind != "Squeeze" else [d for d in data if d != 1]
        operand = [int(v) for v in np.ravel(values)]
        try:
            if kind == "Transpose":
                return [data[k] for k in operand]
            if kind == "Squeeze":
                return _squeezed(data, operand)
            if kind == "Unsqueeze":
                return _unsqueezed(data, operand)
            if kind == "Broadcast":
                return list(np.broadcast_shapes(tuple(data), tuple(operand)))
            return _reshaped(data, operand, bool(node.get_attributes().get("special_zero")))
        except (ValueError, IndexError):
            return None
    return _shape_by_openvino(value, sizes)


def _shape_by_openvino(value, sizes: Sizing) -> list[int] | None:
    """The static shape OpenVINO's own shape inference gives ``value`` in a copy of the model whose
    inputs are reshaped to ``sizes`` (the copy is made on the first such question, once per sizing);
    None without the model, or when OpenVINO cannot reshape it or leaves the shape dynamic."""
    if sizes.model is None:
        return None
    if sizes.reshaped is None:
        sizes.reshaped = _reshaped_copy(sizes.model, sizes.inputs)
    node = sizes.reshaped.get(node_key(value.get_node()))
    if node is None:
        return None
    shape = node.get_output_partial_shape(value.get_index())
    return [int(d) for d in shape.to_shape()] if shape.is_static else None


def _reshaped_copy(model, inputs: dict) -> dict:
    """Each node of ``model`` (by key) -> the same node in a copy whose Parameters have the dims in
    ``inputs``; empty when a Parameter has no dims there. A dimension the graph itself fixes stays
    dynamic in the copy (``ov.convert_model`` leaves a PyTorch input [?,?,?] whose last dimension a
    Linear or convolution makes I): when the whole sizing fails, the dims are given one at a time and
    each kept where OpenVINO's shape inference accepts it, so whatever depends on a refused one stays
    unknown. Not ``Model.reshape``: its SmartReshape passes rewrite the graph, and the nodes must stay
    the same."""
    from openvino import Dimension, PartialShape

    copy = model.clone()
    originals, copies = model.get_parameters(), copy.get_parameters()
    if any(node_key(p) not in inputs for p in originals):
        return {}

    def accepted(shapes: list[list]) -> bool:
        try:
            for param, dims in zip(copies, shapes):
                param.set_partial_shape(PartialShape(dims))
            copy.validate_nodes_and_infer_types()
            return True
        except Exception:  # OpenVINO raises a bare RuntimeError when shape inference fails
            return False

    if not accepted([[Dimension(d) for d in inputs[node_key(p)]] for p in originals]):
        current = [list(p.get_partial_shape()) for p in originals]
        for k, param in enumerate(originals):
            for axis, size in enumerate(inputs[node_key(param)]):
                trial = [list(dims) for dims in current]
                trial[k][axis] = Dimension(size)
                if current[k][axis].is_dynamic and accepted(trial):
                    current = trial
        if not accepted(current):
            return {}
    before, after = model.get_ordered_ops(), copy.get_ordered_ops()
    same = [(n.get_type_name(), n.get_friendly_name()) for n in before] == [
        (n.get_type_name(), n.get_friendly_name()) for n in after
    ]
    return {node_key(a): b for a, b in zip(before, after)} if same else {}


def _slice(node, a: list) -> np.ndarray:
    """Slice-8: data, start, stop, step, axes (default: the first len(start) axes)."""
    data, start, stop, step = a[0], *(np.ravel(v) for v in a[1:4])
    axes = np.ravel(a[4]) if len(a) > 4 else np.arange(len(start))
    index = [slice(None)] * data.ndim
    for axis, b, e, k in zip(axes, start, stop, step):
        index[int(axis)] = slice(int(b), int(e), int(k))
    return data[tuple(index)]


_SHAPE_OPS = {
    "Slice": _slice,
    "Convert": lambda node, a: a[0].astype(node.get_output_element_type(0).to_dtype()),
    "Gather": lambda node, a: np.take(a[0], a[1], axis=int(np.ravel(a[2])[0])),
    "Concat": lambda node, a: np.concatenate(a, axis=int(node.get_attributes()["axis"])),
    "Broadcast": lambda node, a: np.broadcast_to(a[0], tuple(int(v) for v in a[1])),
    "Reshape": lambda node, a: a[0].reshape(
        [
            int(a[0].shape[k]) if v == 0 and node.get_attributes().get("special_zero") else int(v)
            for k, v in enumerate(a[1])
        ]
    ),
    "Transpose": lambda node, a: a[0].transpose([int(v) for v in a[1]]),
    "Squeeze": lambda node, a: np.squeeze(a[0], axis=tuple(int(v) for v in np.ravel(a[1]))),
    "Unsqueeze": lambda node, a: np.expand_dims(a[0], axis=tuple(int(v) for v in np.ravel(a[1]))),
    "Split": lambda node, a: np.split(a[0], int(node.get_attributes()["num_splits"]), int(np.ravel(a[1])[0])),
    "VariadicSplit": lambda node, a: np.split(
        a[0], np.cumsum([int(v) for v in np.ravel(a[2])])[:-1], int(np.ravel(a[1])[0])
    ),
    "Add": lambda node, a: a[0] + a[1],
    "Subtract": lambda node, a: a[0] - a[1],
    "Multiply": lambda node, a: a[0] * a[1],
}


def evaluate_shape_cone(value, sizes: Sizing) -> np.ndarray | None:
    """A value computed from constants and shapes, every ShapeOf's shape given by ``shape_of`` for
    the input sizes in ``sizes``; None for an operator outside the few shape arithmetic ones, or for a
    value of more than MAX_SHAPE_VALUES numbers (never allocated)."""
    return _memoised(sizes.values, value, lambda: _evaluate(value, sizes))


def _evaluate(value, sizes: Sizing) -> np.ndarray | None:
    node = value.get_node()
    kind = node.get_type_name()
    if kind == "Constant":
        shape = node.get_output_partial_shape(0)
        if shape.is_dynamic or int(np.prod(shape.to_shape(), dtype=object)) > MAX_SHAPE_VALUES:
            return None
        return np.array(node.get_data())
    if kind == "ShapeOf":
        shape = shape_of(node.input_value(0), sizes)
        return None if shape is None else np.array(shape, node.get_output_element_type(0).to_dtype())
    if kind not in _SHAPE_OPS or (node.get_output_size() != 1 and kind not in _SPLITS):
        return None
    args = []
    for k in range(node.get_input_size()):
        arg = evaluate_shape_cone(node.input_value(k), sizes)
        if arg is None:
            return None
        args.append(arg)
    if kind == "Broadcast" and int(np.prod([int(v) for v in np.ravel(args[1])], dtype=object)) > MAX_SHAPE_VALUES:
        return None
    try:
        result = _SHAPE_OPS[kind](node, args)
        return np.asarray(result[value.get_index()] if kind in _SPLITS else result)
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def evaluate_for_two_shapes(ov_model, values: list, x) -> list[tuple[list, list[int] | None]]:
    """``values`` (computed from shapes only) and the shape of ``x`` for two sizings of the model's
    inputs, each dynamic dimension a distinct number (so a wrong dimension cannot match by accident).
    The two sizings, and what they derived, are kept on the model for its other sequence ops."""
    kept = getattr(ov_model, "gatepack_sizings", None)
    if kept is None:
        kept = {}
        try:
            ov_model.gatepack_sizings = kept
        except AttributeError:  # a model object that takes no attributes: nothing kept
            pass
    trials = []
    for first in (101, 211):
        inputs, size = {}, first
        for param in ov_model.get_parameters():
            shape = param.get_partial_shape()
            if shape.rank.is_dynamic:
                return []
            dims = []
            for dim in shape:
                dims.append(dim.get_length() if dim.is_static else size)
                size += 0 if dim.is_static else 2
            inputs[node_key(param)] = dims
        key = tuple((k, tuple(dims)) for k, dims in inputs.items())
        sizes = kept.setdefault(key, Sizing(inputs, ov_model))
        trials.append(([evaluate_shape_cone(v, sizes) for v in values], shape_of(x, sizes)))
    return trials

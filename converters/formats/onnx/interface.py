"""The interface of a GRU/RNN/LSTM node read into a layer: which tensor plays each role (X, the initial states,
sequence_lens; Y and the final states), in which layout, and which optional inputs the layer holds rather than
reads.

* Layout: a layout-0 node (X [S, N, I], Y [S, D, N, H], states [D, N, H]) wrapped in batch-major Transposes
  (``PERM_IN`` on X and the states from graph inputs, ``PERM_Y``/``PERM_YH`` on Y and the states to graph outputs),
  gatepack's own layout encoding and common in exports, reads as one layout-1 layer whose tensors are the ones
  outside the Transposes.
* Held inputs: an optional input the model computes from constants alone is a constant of the layer (canonical
  layout 0); a state computed from constants and graph inputs' shapes that is one batch-1 state repeated along
  X's batch is held at batch 1 (zeros: no initial state at all); anything computed from the model's inputs stays
  an input of the layer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from gatepack.converters.description import constant_from_layout
from gatepack.converters.errors import InputError
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.onnx.constants import ModelConstants
from gatepack.converters.formats.onnx.graph import PERM_IN, PERM_Y, PERM_YH, Isolated, Scope, type_dims
from gatepack.converters.formats.onnx.lifting import perm_of
from gatepack.schemas.layer import CONSTANT_ROLES, OUTPUT_ROLES, ROLE_LABELS, Interface, SpecError


def node_interface(
    types: dict[str, onnx.TypeProto],
    node: onnx.NodeProto,
    scope: Scope,
    inputs: list,
    outputs: list,
    layout: int,
    w: np.ndarray,
    hidden: int,
    at: str,
    isolated: Isolated,
    computed: dict[str, tuple],
) -> Interface:
    """The tensors the node's layer reads and writes by role, in the layer's layout: a layout-0 node wrapped in
    batch-major Transposes from graph inputs to graph outputs reads as one batch-major layer (the Transposes join
    ``isolated.nodes``); X's rank and input size, and each initial state's shape, checked when known."""
    names = {
        "x": inputs[0],
        "sequence_lens": inputs[4] or None,
        "initial_h": inputs[5] or None,
        "initial_c": inputs[6] or None,
        "y": outputs[0] or None,
        "y_h": outputs[1] or None,
        "y_c": outputs[2] or None,
    }
    if not any(names[role] for role in OUTPUT_ROLES):
        raise InputError(f"{at}the node has no output")
    node_layout = layout
    outer: dict = {}  # what the absorbed Transposes rename (role -> the tensor outside them)
    if layout == 0:
        held = {  # states the node holds whatever the layout (constants, or repeated along X's batch)
            names[r] for r in ("initial_h", "initial_c") if r in computed and computed[r][1] is not None
        }
        absorbed = _absorbable_transposes(scope, node, names, held)
        if absorbed is not None:
            outer, isolated.nodes = absorbed
            names.update(outer)
            layout = 1
    x_dims = type_dims(types.get(names["x"]))
    if x_dims is not None:
        if len(x_dims) != 3:
            raise InputError(f"{at}X {names['x']!r} has rank {len(x_dims)}, expected 3")
        if isinstance(x_dims[2], int) and x_dims[2] != w.shape[2]:
            raise InputError(f"{at}X {names['x']!r} has input size {x_dims[2]} but W has {w.shape[2]}")
    for role in ("initial_h", "initial_c"):
        if names[role]:
            own = layout if role in outer else node_layout  # a state the transposes do not wrap is the node's
            _check_state_shape(types, scope, names[role], ROLE_LABELS[role], own, w.shape[0], hidden, at)
    seq, batch = (None, None) if x_dims is None else ((x_dims[1], x_dims[0]) if layout else (x_dims[0], x_dims[1]))
    try:
        return Interface(layout=layout, seq_length=seq, batch_size=batch, dtype=w.dtype.name, **names)
    except SpecError as err:  # e.g. a tensor name that is not valid UTF-8
        raise InputError(f"{at}{err}") from None


def _check_state_shape(
    types: dict[str, onnx.TypeProto],
    scope: Scope,
    name: str,
    label: str,
    layout: int,
    directions: int,
    hidden: int,
    at: str,
) -> None:
    """An initial state whose known shape (declared, inferred or an initializer's) does not fit the node
    is refused: onnxruntime would refuse it at run time."""
    found = scope.lookup(name)
    initializer = found[1] if found is not None else None
    dims = list(initializer.dims) if isinstance(initializer, onnx.TensorProto) else type_dims(types.get(name))
    if dims is None:
        return
    want = [None, directions, hidden] if layout else [directions, None, hidden]
    if len(dims) != 3 or any(isinstance(got, int) and w is not None and got != w for got, w in zip(dims, want)):
        expected = ", ".join("batch" if w is None else str(w) for w in want)
        raise InputError(
            f"{at}{label} {name!r} has shape {dims}, expected [{expected}] for hidden_size={hidden} (layout {layout})"
        )


def _absorbable_transposes(
    scope: Scope, node: onnx.NodeProto, names: dict, held: set[str] | frozenset[str] = frozenset()
) -> tuple[dict, list] | None:
    """If a layout-0 node is wrapped in batch-major Transposes from graph inputs to graph outputs
    (gatepack's own layout encoding, and common in exports), return the outer tensor names and the
    wrapped nodes in execution order (transposes in, the node, transposes out). A state in ``held`` (one
    the layer holds: a constant, or a state repeated along X's batch) needs no Transpose: it stays the
    node's own."""
    outer: dict = {}
    before: list[onnx.NodeProto] = []
    after: list[onnx.NodeProto] = []
    for key, perm in (("x", PERM_IN), ("initial_h", PERM_IN), ("initial_c", PERM_IN)):
        if names[key] is None or names[key] in held:
            continue
        prod = scope.producers.get(names[key])
        if prod is None or prod.op_type != "Transpose" or perm_of(prod) != perm:
            return None
        if prod.input[0] not in scope.inputs or len(scope.consumers.get(names[key], [])) != 1:
            return None
        outer[key] = prod.input[0]
        before.append(prod)
    for key, perm in (("y", PERM_Y), ("y_h", PERM_YH), ("y_c", PERM_YH)):
        if names[key] is None:
            continue
        users = scope.consumers.get(names[key], [])
        if len(users) != 1 or users[0].op_type != "Transpose" or perm_of(users[0]) != perm:
            return None
        if names[key] in scope.outputs or users[0].output[0] not in scope.outputs:
            return None
        outer[key] = users[0].output[0]
        after.append(users[0])
    if names["sequence_lens"] is not None and names["sequence_lens"] not in scope.inputs:
        return None
    return outer, before + [node] + after


def computed_inputs(
    constants: ModelConstants, scope: Scope, inputs: list, node_layout: int, layer: str
) -> dict[str, tuple]:
    """Per optional input (sequence_lens, initial_h, initial_c) the model computes rather than takes as a graph
    input, what folding it gives, once per node (the layout and the held constants both ask): ``(name,
    "constant", value)`` when constants alone compute it (an initializer, a ``Constant`` node, a cone of
    operators over them), for a state ``(name, "repeated", batch-1 state)`` when constants and the shapes of
    graph inputs compute one state repeated along X's batch (``ModelConstants.state_from_shapes``, in the node's
    layout), else ``(name, None, None)`` (computed from the model's inputs, or by control flow: an input of the
    layer)."""
    computed: dict[str, tuple] = {}
    for role, index in zip(CONSTANT_ROLES, (4, 5, 6)):
        name = inputs[index]
        if not name or (found := scope.lookup(name)) is None or found[0] == "input":
            continue
        try:
            computed[role] = (name, "constant", constants.constant(name, scope, layer, ROLE_LABELS[role]))
        except InputError:
            state = None
            if role != "sequence_lens":
                state = constants.state_from_shapes(name, scope, layer, ROLE_LABELS[role], node_layout)
            computed[role] = (name, None if state is None else "repeated", state)
    return computed


def held_constants(
    itf: Interface,
    node_layout: int,
    at: str,
    dtype: np.dtype,
    isolated: Isolated,
    computed: dict[str, tuple],
) -> dict[str, np.ndarray]:
    """The optional inputs (sequence_lens, initial_h, initial_c) the model computes from constants alone
    (``computed``: from ``computed_inputs``), in the canonical layout 0; each also becomes a constant of the
    isolated node, so running it alone never feeds a value in its place. An input computed from a graph input
    stays an input of the layer."""
    held: dict[str, np.ndarray] = {}
    for role in CONSTANT_ROLES:
        name = getattr(itf, role)
        folded_name, kind, value = computed.get(role, (None, None, None))
        if not name or name != folded_name or kind is None:
            continue  # absent, a graph input (or absorbed into one), or computed from the model's inputs
        if kind == "repeated":
            if not np.any(value):
                isolated.blank.add(name)  # zeros sized like X: no initial state
            elif value.dtype == dtype:  # one state for every batch entry: held, batch 1
                held[role] = constant_from_layout(value, role, node_layout)
                isolated.broadcast[name] = value
            continue
        if role == "sequence_lens":
            if value.dtype != np.int32 or value.ndim != 1:
                raise InputError(f"{at}sequence_lens {name!r} is {value.dtype} {list(value.shape)}, expected int32 [N]")
            held[role], isolated.constants[name] = value, value
            continue
        if value.dtype != dtype or value.ndim != 3:
            raise InputError(f"{at}{ROLE_LABELS[role]} {name!r} is {value.dtype} {list(value.shape)}; W is {dtype}")
        held[role] = constant_from_layout(value, role, node_layout)
        isolated.constants[name] = value
    return held


def without_zero_states(interface: Interface, isolated: Isolated, notes: list[Finding]) -> Interface:
    """The interface without the initial states the model computes as zeros from its input's shape."""
    zero_states = [r for r in ("initial_h", "initial_c") if getattr(interface, r) in isolated.blank]
    if not zero_states:
        return interface
    notes.append(
        Finding(
            "initial state",
            Status.EXACT,
            f"{', '.join(ROLE_LABELS[r] for r in zero_states)}: zeros computed from the shape of the model's "
            "input (checked for two sizes), which is no initial state",
        )
    )
    cleared: dict[str, Any] = dict.fromkeys(zero_states)  # no tensor (Any: replace checks each field's type)
    return replace(interface, **cleared)

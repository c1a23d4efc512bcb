"""LiteRT: a ``.tflite`` file on ai-edge-litert's interpreter, by its tensor names.

The interpreter (``interpreter``) runs the builtin kernels without the default XNNPACK delegate
(``BUILTIN_WITHOUT_DEFAULT_DELEGATES``: no delegate takes the sequence ops, and the delegate's "INFO: Created
TensorFlow Lite XNNPACK delegate" would be printed into gatepack's output). A call sets the inputs and invokes,
as an app does, and never resets the variable tensors: gatepack's files write each sequence op's state variable
before the op on every invoke, so a call's result does not depend on the calls before it; a file that keeps its
state in a variable across invokes (another producer's fused op) is run as it is, carrying it (docs/conventions.md
§11).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from gatepack.converters.errors import InputError, UsageError
from gatepack.converters.fileio import map_regular
from gatepack.converters.formats.litert.common import FORMAT, Graph, schema
from gatepack.converters.formats.litert.interpreter import interpreter, session
from gatepack.converters.formats.litert.parts import constant_bytes, copied_tensor, part
from gatepack.converters.formats.litert.stateful_whole import held_session, held_states
from gatepack.schemas.layer import RecurrentLayer


def open_session(path: str | Path) -> Callable[[dict], dict]:
    """The file loaded once; each call sets ``inputs`` (by tensor name; an input not given is zeros), invokes it (its
    variable tensors as the previous call left them) and returns every output by name, and for a stateful whole
    model each state it holds under its state output's name (``stateful_whole.held_session``)."""
    mapped = map_regular(path)  # a regular file (InputError otherwise), its metadata read from the map
    loaded = interpreter(Path(path), path)  # loaded by its path: LiteRT maps it too, no copy in memory
    held = held_states(mapped)
    run = session(loaded, Path(path))
    return held_session(run, loaded, held) if held else run


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The file on a new LiteRT interpreter (its variable tensors zero); inputs and outputs by tensor name."""
    return open_session(path)(inputs)


def op_alone(path: Path, node: str) -> bytes:
    """The sequence op whose output is ``node`` alone in a new model: its constants copied byte for byte, its input
    and state tensors the model's inputs (a state with data, which the interpreter refuses, fed instead), its
    output and state variables the model's outputs."""
    from gatepack.converters.formats.litert.reader import parsed

    file = parsed(path)
    op = next((o for o in file.graph.operators or [] if file.name(o.outputs[0]) == node), None)
    if op is None:
        raise InputError(f"{path}: no operator writes {node!r}")
    g = Graph(schema())
    inputs, states = [], []
    for index in (int(k) for k in op.inputs):
        if index < 0:
            inputs.append(-1)
            continue
        new = copied_tensor(g, file, index)
        if constant_bytes(file, index) is None:
            g.graph.inputs.append(new)
        if file.tensors[index].isVariable:
            states.append(new)
        inputs.append(new)
    outputs = [copied_tensor(g, file, int(k), data=False) for k in op.outputs]
    g.op(file.op_name(op), inputs, outputs, op.builtinOptions)
    g.graph.outputs = [*outputs, *states]
    return g.finish(None)


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of a saved file on the interpreter. A layer gatepack wrote: the file run on its inputs (another
    layer's inputs zeros), the layer's outputs kept. Another producer's sequence op: the op alone (``op_alone``),
    its state inputs [N, H] fed from the canonical [1, N, H] (a learned state from the layer's constant), its
    outputs ([S, N, H] per direction, or both on the last axis) into Y [S, D, N, H] and its final state
    variables into [D, N, H] (layout 1: [N, S, D, H], [N, D, H])."""
    found = layer.provenance
    if found is None or not found.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from a LiteRT file")
    if found.kind == "lifted":
        from gatepack.converters.formats.litert.loops import LoopHandle, run_loop

        assert isinstance(found.handle, LoopHandle)  # the loop reader's record
        return run_loop(found.handle, layer.interface, feed, found.artifact)
    if found.kind != "node":
        return _run_described(layer, found.artifact, feed)
    from gatepack.converters.formats.litert.reader import OpHandle

    handle = found.handle
    assert isinstance(handle, OpHandle)  # the reader's record of another producer's op
    itf, h, layout = layer.interface, layer.hidden_size, int(layer.interface.layout)
    n = np.shape(feed[itf.x])[0 if layout else 1]
    states = {}
    for role in ("initial_h", "initial_c"):
        name = getattr(itf, role)
        value = feed.get(name) if name else None
        value = layer.constant_state(role, n) if value is None and name else value
        if value is not None:  # one direction (the reader refuses two state inputs)
            states[name] = np.reshape(value, (-1, h))
    run = session(interpreter(op_alone(found.artifact, found.node), found.artifact), found.artifact)
    outputs = run({itf.x: feed[itf.x], **states})
    if handle.merged:  # [S, N, 2H] / [N, S, 2H]: the directions on the last axis
        both = outputs[handle.outputs[0]]
        y = both.reshape(*both.shape[:2], 2, h)
        y = y if layout else y.transpose(0, 2, 1, 3)
    else:
        y = np.stack([outputs[name] for name in handle.outputs], axis=2 if layout else 1)
    result = {found.node: y}
    for role, names in handle.states:
        result[getattr(itf, role)] = np.stack([outputs[name] for name in names], axis=1 if layout else 0)
    return result


def _run_described(layer: RecurrentLayer, path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A layer gatepack wrote: its file run on its inputs when they and its Y are the file's own (the layers alone),
    else (a layer inside a whole model, even one fed by the model's own input) the part of the file that computes
    its outputs from its inputs, alone (``parts.part``, which refuses a part that does not compute Y)."""
    itf = layer.interface
    wanted = [name for name in (itf.y, itf.y_h, itf.y_c) if name]
    outputs = {name for name, _, _ in graph_outputs(path)}
    if set(feed) <= {name for name, _, _ in graph_inputs(path)} and itf.y in outputs:
        return run_native(path, feed)
    return session(interpreter(part(Path(path), list(feed), wanted), path), path)(feed)


def compute_dtype(layer: RecurrentLayer) -> str:
    """The file computes in float32 (its sequence ops and the elementary form alike; with int8 weights the hybrid
    kernels' products, which gatepack's executor computes as they do: ``converters.hybrid``)."""
    return "float32"


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The file's inputs as (name, dtype, dims), a dynamic dimension None (its variable tensors are no inputs)."""
    return _io(path, "inputs")


def graph_outputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The file's outputs as (name, dtype, dims), a dynamic dimension None."""
    return _io(path, "outputs")


def _io(path: str | Path, which: str) -> list[tuple[str, np.dtype, list]]:
    """The subgraph's input or output tensors as the flatbuffer declares them (no interpreter: a file it refuses
    still names its inputs)."""
    from gatepack.converters.formats.litert.reader import _signature, parsed

    file = parsed(path)
    numpy_types = {"FLOAT32": np.float32, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_, "INT8": np.int8}
    kinds = {v: k for k, v in vars(file.s.TensorType).items() if not k.startswith("_")}
    found = []
    held = getattr(file.graph, which)
    for index in [] if held is None else held:
        tensor = file.tensors[int(index)]
        dims = [None if d < 0 else int(d) for d in _signature(tensor)]
        found.append((file.name(int(index)), np.dtype(numpy_types.get(kinds[tensor.type], np.float32)), dims))
    return found

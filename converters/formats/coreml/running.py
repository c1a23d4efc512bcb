"""Running a package on gatepack's MIL interpreter: by the source's tensor names, whole or one layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gatepack.converters.errors import InputError, RuntimeFailure, UsageError
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    _mil_types,
    _ops,
    state_inputs,
)
from gatepack.converters.formats.coreml.interpreter import (
    _MIL_OPS,
    _lookup,
    execute,
)
from gatepack.converters.formats.coreml.lifting import (
    _LoopHandle,
    _run_lifted,
)
from gatepack.converters.formats.coreml.package import (
    _load_program,
)
from gatepack.schemas.layer import (
    Direction,
    RecurrentLayer,
    state_roles,
)


def run_numpy(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the package's program on gatepack's MIL executor; inputs and outputs by the source's
    tensor names (or Core ML's sanitised ones). A stateful package's states start at zeros (a new
    ``MLState``) unless given by their input names; their values after the call are not returned."""
    path = Path(path)
    function, meta = _load_program(path)
    states = _states_of(function, meta)
    inputs = {**{name: np.zeros(shape, np.float16) for name, shape in states.items()}, **inputs}
    outputs = _run_program(path, function, meta, inputs)
    return {k: v for k, v in outputs.items() if k not in states}


def open_session(path: str | Path):
    """The package's program loaded once; each call runs it on the frame inputs and, for a stateful package, its
    states (zeros before the first call, then each call's new values), which it returns under the source's state
    output names (``meta['states']``)."""
    path = Path(path)
    function, meta = _load_program(path)
    states = {name: np.zeros(shape, np.float16) for name, shape in _states_of(function, meta).items()}
    output_of = (meta or {}).get("states", {})

    def run(inputs: dict) -> dict:
        outputs = _run_program(path, function, meta, {**inputs, **states})
        states.update((name, outputs.pop(name)) for name in list(states))
        return {**outputs, **{output_of[name]: value for name, value in states.items()}}

    return run


def _states_of(function, meta) -> dict[str, tuple]:
    """A stateful package's states: source input name -> shape."""
    names = (meta or {}).get("names", {})
    held = state_inputs(function)
    return {_original(names, name): tuple(var.shape) for name, var in function.inputs.items() if name in held}


def _run_program(path: Path, function, meta, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = (meta or {}).get("names", {})
    scalars = set((meta or {}).get("scalar_inputs", []))  # a whole model's scalar inputs are [1] in the package
    feed = {names.get(k, k): np.reshape(v, (1,)) if k in scalars and np.ndim(v) == 0 else v for k, v in inputs.items()}
    missing = [n for n in function.inputs if n not in feed]
    if missing:
        raise InputError(
            f"{path}: missing input(s) {[_original(names, n) for n in missing]}",
            hint=f"the model takes {[_original(names, n) for n in function.inputs]}",
        )
    for name, var in function.inputs.items():  # the program's own declared shapes (symbolic dims: any size)
        got = np.shape(feed[name])
        if len(got) != len(var.shape) or any(isinstance(d, int) and d != g for d, g in zip(var.shape, got)):
            declared = [d if isinstance(d, int) else "?" for d in var.shape]
            raise InputError(f"{path}: input {_original(names, name)!r} has shape {list(got)}, expected {declared}")
    return {_original(names, k): v for k, v in execute(function, feed, path).items()}


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The program's inputs as (name, dtype, dims), by the source's names where gatepack sanitised them."""
    types = _mil_types()

    function, meta = _load_program(Path(path))
    names = (meta or {}).get("names", {})
    held = state_inputs(function)
    return [
        (
            _original(names, name),
            np.dtype(types.nptype_from_builtin(var.dtype)),
            [d if isinstance(d, int) else None for d in var.shape],
        )
        for name, var in function.inputs.items()
        if name not in held  # a state is held by the model, not fed
    ]


def graph_outputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The program's outputs as (name, dtype, dims), by the source's names where gatepack sanitised them."""
    types = _mil_types()

    function, meta = _load_program(Path(path))
    names = (meta or {}).get("names", {})
    return [
        (
            _original(names, var.name),
            np.dtype(types.nptype_from_builtin(var.dtype)),
            [d if isinstance(d, int) else None for d in var.shape],
        )
        for var in function.outputs
    ]


def _original(names: dict, sanitised: str) -> str:
    return next((k for k, v in names.items() if v == sanitised), sanitised)


def compute_dtype(layer: RecurrentLayer) -> str:
    """The precision a package read from disk computes ``layer`` in (fp16 packages: float16)."""
    found = layer.provenance
    if found is None or not found.of(FORMAT):
        return layer.interface.dtype
    function, meta = _load_program(found.artifact)
    if meta is not None:
        return "float16" if meta.get("precision") == "fp16" else "float32"
    if found.kind == "lifted":
        assert isinstance(found.handle, _LoopHandle)  # coreml.lifting's record of the loop
        return "float16" if found.handle.fp16 else "float32"
    op = next(op for op in _ops(function) if op.name == found.node)
    return "float16" if np.asarray(op.inputs["weight_ih"].val).dtype == np.float16 else "float32"


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise RuntimeFailure(f"{path}: Core ML runs only on Apple platforms; use --engine numpy (gatepack's MIL executor)")


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of a saved package on gatepack's MIL executor (the program read from disk)."""
    if layer.provenance is None or not layer.provenance.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from a Core ML package")
    path, name, kind = layer.provenance.artifact, layer.provenance.node, layer.provenance.kind
    if kind == "lifted":
        handle = layer.provenance.handle
        assert isinstance(handle, _LoopHandle)  # coreml.lifting's record of the loop
        return _run_lifted(path, handle, layer.interface, feed)
    function, meta = _load_program(path)
    names = (meta or {}).get("names", {})
    itf = layer.interface
    if kind == "node":  # a foreign gru/rnn/lstm op: states [N, D*H], a reverse op's output in processing order
        op = next(op for op in _ops(function) if op.name == name)
        x = np.asarray(feed[itf.x], np.float32)
        n, d, h = x.shape[1], layer.num_directions, layer.hidden_size
        env = {itf.x: x}
        for role, _ in state_roles(layer.cell):
            state = np.asarray(feed.get(getattr(itf, role), np.zeros((d, n, h))), np.float32)
            env[getattr(itf, role)] = state.transpose(1, 0, 2).reshape(n, d * h)
        y, *ends = _MIL_OPS[op.op_type](**{key: _lookup(var, env) for key, var in op.inputs.items()})
        y = y.reshape(len(y), n, d, h).transpose(0, 2, 1, 3)  # -> [S,D,N,H]
        outputs = {itf.y: y[::-1] if layer.direction is Direction.REVERSE else y} if itf.y else {}
        for (_, role), end in zip(state_roles(layer.cell), ends):
            outputs[getattr(itf, role)] = end.reshape(n, d, h).transpose(1, 0, 2)
        return outputs
    if (meta or {}).get("whole"):  # its tensors are named by the whole program's own values, not the layer's
        raise RuntimeFailure(
            f"layer {layer.name!r}: {path} holds it inside a whole program, which gatepack's MIL executor runs whole"
        )
    wanted = {names.get(k, k): v for k, v in feed.items()}
    executed = execute(function, wanted, path)
    return {_original(names, k): v for k, v in executed.items()}

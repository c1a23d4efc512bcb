"""LiteRT: a ``.tflite`` file on ai-edge-litert's interpreter, by its tensor names.

The interpreter runs the builtin kernels without the default XNNPACK delegate
(``BUILTIN_WITHOUT_DEFAULT_DELEGATES``: no delegate takes the sequence ops, and the delegate's "INFO: Created
TensorFlow Lite XNNPACK delegate" would be printed into gatepack's output). Every call resets the variable
tensors first (``reset_all_variables``) and then sets the inputs: a sequence op's state is a variable tensor the
interpreter keeps from one ``invoke()`` to the next, so without the reset a second run of the same file would
start from the first run's final states (docs/conventions.md §14).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from gatepack.converters.errors import InputError, RuntimeFailure, UsageError
from gatepack.converters.fileio import read_bytes
from gatepack.converters.formats.litert.common import FORMAT
from gatepack.schemas.layer import RecurrentLayer


def _interpreter(path: Path, preserve: bool = False) -> Any:
    from gatepack.converters.runtimes import litert

    _, module = litert()
    content = read_bytes(path)
    try:
        return module.Interpreter(
            model_content=content,
            experimental_op_resolver_type=module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            experimental_preserve_all_tensors=preserve,
        )
    except (ValueError, RuntimeError) as err:
        raise RuntimeFailure(
            f"{path}: the LiteRT interpreter refuses it ({' '.join(str(err).split())[:200]})"
        ) from None


def open_session(path: str | Path, tensors: tuple[str, ...] = ()) -> Callable[[dict], dict]:
    """The file loaded once; each call resets its variable tensors, then runs it on ``inputs`` (by tensor name;
    an input not given is zeros) and returns every output by name, and the ``tensors`` named (kept for it)."""
    path = Path(path)
    interpreter = _interpreter(path, preserve=bool(tensors))
    shapes: dict[str, tuple] = {}

    def run(inputs: dict) -> dict:
        details = interpreter.get_input_details()
        names = {d["name"] for d in details}
        unknown = sorted(set(inputs) - names)
        if unknown:
            raise InputError(f"{path}: no input named {unknown}", hint=f"the model takes {sorted(names)}")
        wanted = {d["name"]: tuple(np.shape(inputs[d["name"]])) for d in details if d["name"] in inputs}
        if wanted != {k: v for k, v in shapes.items() if k in wanted} or not shapes:
            for d in details:
                if d["name"] in wanted and tuple(d["shape"]) != wanted[d["name"]]:
                    _resize(path, interpreter, d, wanted[d["name"]])
            try:
                interpreter.allocate_tensors()
            except RuntimeError as err:
                raise RuntimeFailure(f"{path}: the LiteRT interpreter cannot run it ({_squash(err)})") from None
            shapes.clear()
            shapes.update(wanted)
        interpreter.reset_all_variables()  # a state is a variable tensor: start every call from zeros
        for d in interpreter.get_input_details():
            value = inputs.get(d["name"])
            value = np.zeros(d["shape"], d["dtype"]) if value is None else np.asarray(value, d["dtype"])
            interpreter.set_tensor(d["index"], np.ascontiguousarray(value))
        try:
            interpreter.invoke()
        except RuntimeError as err:
            raise RuntimeFailure(f"{path}: the LiteRT interpreter failed ({_squash(err)})") from None
        found = {d["name"]: np.array(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()}
        kept = {d["name"]: d["index"] for d in interpreter.get_tensor_details() if d["name"] in tensors}
        return {**found, **{name: np.array(interpreter.get_tensor(index)) for name, index in kept.items()}}

    return run


def _resize(path: Path, interpreter: Any, detail: dict, shape: tuple) -> None:
    signature = tuple(detail["shape_signature"])
    if len(signature) != len(shape) or any(s >= 0 and s != g for s, g in zip(signature, shape)):
        declared = [int(s) if s >= 0 else "?" for s in signature]
        raise InputError(f"{path}: input {detail['name']!r} has shape {list(shape)}, expected {declared}")
    interpreter.resize_tensor_input(detail["index"], list(shape), strict=True)


def _squash(err: object) -> str:
    return " ".join(str(err).split())[:200]


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The file on the LiteRT interpreter (states reset first); inputs and outputs by tensor name."""
    return open_session(path)(inputs)


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of a saved file on the interpreter: the file run on its inputs (another layer's inputs zeros),
    the layer's outputs kept; a foreign sequence op's [S, N, H] output reshaped into Y's [S, 1, N, H]."""
    found = layer.provenance
    if found is None or not found.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from a LiteRT file")
    itf = layer.interface
    if found.kind == "node":  # a foreign op's state input is its variable [N, H]: the canonical [1, N, H] reshaped
        for role in layer.fed_roles():
            name = getattr(itf, role)
            if role != "sequence_lens" and name in feed:
                feed = {**feed, name: np.reshape(feed[name], (-1, layer.hidden_size))}
    names = tuple(getattr(itf, role) for role in ("y", "y_h", "y_c") if getattr(itf, role))
    outputs = open_session(found.artifact, names if found.kind == "node" else ())(feed)
    if found.kind == "node" and itf.y in outputs:  # the op's own Y: [S, N, H] or [N, S, H]
        y = outputs[itf.y]
        outputs[itf.y] = y[:, :, None] if itf.layout else y[:, None]
    for role in ("y_h", "y_c"):
        name = getattr(itf, role)
        if found.kind == "node" and name in outputs and outputs[name].ndim == 2:  # a variable state [N, H]
            outputs[name] = outputs[name][:, None] if itf.layout else outputs[name][None]
    return outputs


def compute_dtype(layer: RecurrentLayer) -> str:
    """The file computes in float32 (its sequence ops and the elementary form alike)."""
    return "float32"

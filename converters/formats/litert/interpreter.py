"""LiteRT: ai-edge-litert's interpreter over a file or a model's bytes, by tensor names, for running a file
(``running``) and for proving a lifted loop against the original (``loops``, ``unrolled``).

A file is loaded by its path (``model_path``): LiteRT memory-maps it, its weights (those stored after the FlatBuffer
too) read from the map as the kernels touch them, never copied into a Python ``bytes``; a model built in memory (an
operator alone, a loop's body) is loaded from its bytes (``model_content``).

The interpreter runs the builtin kernels without the default XNNPACK delegate
(``BUILTIN_WITHOUT_DEFAULT_DELEGATES``: no delegate takes the sequence ops, and the delegate's "INFO: Created
TensorFlow Lite XNNPACK delegate" would be printed into gatepack's output). A call sets the inputs (an input not
given is zeros) and invokes, as an app does, and never resets the variable tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from gatepack.converters.errors import InputError, RuntimeFailure


def interpreter(model: bytes | Path, label: object) -> Any:
    """An interpreter of ``model``: a file (a ``Path``, memory-mapped by LiteRT) or a model's bytes; RuntimeFailure
    naming ``label`` when LiteRT refuses it."""
    from gatepack.converters.formats.litert.registration import litert

    _, module = litert()
    source = {"model_path": str(model)} if isinstance(model, Path) else {"model_content": model}
    try:
        return module.Interpreter(
            **source, experimental_op_resolver_type=module.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        )
    except (ValueError, RuntimeError) as err:
        raise RuntimeFailure(f"{label}: the LiteRT interpreter refuses it ({squash(err)})") from None


def session(interpreter: Any, label: object) -> Callable[[dict], dict]:
    run_once = _runner(interpreter, label)

    def run(inputs: dict) -> dict:
        try:
            return run_once(inputs)
        except (RuntimeError, ValueError, UnicodeDecodeError) as err:  # the interpreter on a file it cannot run
            raise RuntimeFailure(f"{label}: the LiteRT interpreter cannot run it ({squash(err)})") from None

    return run


def _runner(interpreter: Any, label: object) -> Callable[[dict], dict]:
    shapes: dict[str, tuple] = {}

    def run(inputs: dict) -> dict:
        details = interpreter.get_input_details()
        names = {d["name"] for d in details}
        unknown = sorted(set(inputs) - names)
        if unknown:
            raise InputError(f"{label}: no input named {unknown}", hint=f"the model takes {sorted(names)}")
        wanted = {d["name"]: tuple(np.shape(inputs[d["name"]])) for d in details if d["name"] in inputs}
        if not shapes or wanted != {k: v for k, v in shapes.items() if k in wanted}:
            for d in details:
                if d["name"] in wanted and tuple(d["shape"]) != wanted[d["name"]]:
                    _resize(label, interpreter, d, wanted[d["name"]])
            try:
                interpreter.allocate_tensors()
            except RuntimeError as err:
                raise RuntimeFailure(f"{label}: the LiteRT interpreter cannot run it ({squash(err)})") from None
            shapes.clear()
            shapes.update(wanted)
        for d in interpreter.get_input_details():
            value = inputs.get(d["name"])
            value = np.zeros(d["shape"], d["dtype"]) if value is None else value
            interpreter.set_tensor(d["index"], np.asarray(value, d["dtype"], order="C"))  # (a scalar stays 0-D)
        try:
            interpreter.invoke()
        except RuntimeError as err:
            raise RuntimeFailure(f"{label}: the LiteRT interpreter failed ({squash(err)})") from None
        return {d["name"]: np.array(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()}

    return run


def _resize(label: object, interpreter: Any, detail: dict, shape: tuple) -> None:
    signature = tuple(detail["shape_signature"])
    if len(signature) != len(shape) or any(s >= 0 and s != g for s, g in zip(signature, shape)):
        declared = [int(s) if s >= 0 else "?" for s in signature]
        raise InputError(f"{label}: input {detail['name']!r} has shape {list(shape)}, expected {declared}")
    interpreter.resize_tensor_input(detail["index"], list(shape), strict=True)


def squash(err: object) -> str:
    return " ".join(str(err).split())[:200]

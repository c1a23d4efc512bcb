"""A whole streaming ONNX model as a stateful LiteRT file (``--to litert --stateful``): each state pair held in a
variable tensor across ``invoke()``, the file taking the frame inputs only (docs/streaming.md).

The whole model is translated as ``whole.translate_proto`` translates it; then, per state pair ``(input, output)``:

* the state input's tensor becomes a variable tensor (``is_variable``) and leaves the subgraph's inputs: the
  interpreter allocates it persistently, zeroes it in ``allocate_tensors()`` and ``reset_all_variables()``, and keeps
  it from one invoke to the next;
* the state output's value is copied into that tensor by a ``TILE`` with every multiple 1 (a copy), the
  subgraph's last operators, so every op that reads the old state has run before it is overwritten (the
  interpreter runs the operators in the file's order): ``v_{k} = out_k``, where frame k read ``v_{k-1}``
  (``v_0 = 0``);
* the state output leaves the subgraph's outputs, as OpenVINO's ``MakeStateful`` and Core ML's states leave them:
  the outputs are the source's other outputs, and gatepack's session returns each variable's value after a call
  under its state output's name (``held_session``), so verification compares the states call by call.

The copy is a ``TILE`` because the interpreter refuses (``Input tensor ... lacks data``) a variable written by an
operator its arena planner may run in place (``RESHAPE``, ``ADD``, ``MUL``): such an output shares its input's
memory, and a variable's memory is its own; a one-input ``CONCATENATION`` copies too but takes no rank-0 tensor.
Measured with and without the default XNNPACK delegate: states of rank 0 to 6, float32, int32 and bool
(tests/test_litert_stateful_whole.py), DTLN model 1 and DPCRN.

The file's ``gatepack`` metadata names the pairs (``states``: input -> output), which the reader and the session read.
"""

from __future__ import annotations

import json
import mmap
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from gatepack.converters.errors import RefusedError
from gatepack.converters.formats.litert.common import HELD_KEY, METADATA_KEY, Graph, schema
from gatepack.converters.formats.litert.whole import translate_proto
from gatepack.converters.model import Model
from gatepack.converters.operators.prepared import Prepared


def write_stateful_whole(model: Model, path: str | Path, *, strategy: str = "auto") -> None:
    """The whole ONNX ``model`` as one stateful ``.tflite`` file at ``path``: its state pairs
    (``Model.meta['state_pairs']``) held in variable tensors (module docstring)."""
    assert model.path is not None  # (a whole model read from its file)
    pairs = [(str(a), str(b)) for a, b in model.meta.get("state_pairs") or []]
    packed, _ = translate_proto(
        Prepared.of(model),
        Path(model.path),
        strategy=strategy,
        input_shapes=model.meta.get("input_shapes"),
        finishing=partial(hold_states, Path(model.path), pairs),
    )
    packed.write(path)


def hold_states(source: Path, pairs: list[tuple[str, str]], g: Graph, description: dict) -> None:
    """Each pair's input tensor of ``g`` made a variable fed back from its output (module docstring), the pairs
    recorded in ``description``. RefusedError for a pair whose input is no input of the file (held as a constant
    by ``--input-value``) or whose two tensors differ in shape or type."""
    tensors = g.graph.tensors
    named = {_name(tensors[i]): int(i) for i in g.graph.inputs}
    produced = {_name(tensors[i]): int(i) for i in g.graph.outputs}
    copies = []
    for state_input, state_output in pairs:
        variable, value = named.get(state_input), produced.get(state_output)
        if variable is None or value is None:
            raise RefusedError(
                f"{source}: --stateful: state pair {state_input}={state_output}: "
                f"{state_input if variable is None else state_output} is no {'input' if variable is None else 'output'}"
                " of the written file, so no variable can hold it",
                hint="leave out --input-value for a state input, or leave out --stateful",
            )
        held, fed = tensors[variable], tensors[value]
        if list(held.shape) != list(fed.shape) or held.type != fed.type:
            raise RefusedError(
                f"{source}: --stateful: state pair {state_input}={state_output}: the file's {state_input} is "
                f"{list(held.shape)} and {state_output} {list(fed.shape)}; a variable keeps one shape and type",
                hint="fix the shapes with --input-shape, or leave out --stateful",
            )
        held.isVariable = True
        copies.append((value, variable))
    g.graph.inputs = [i for i in g.graph.inputs if int(i) not in {v for _, v in copies}]
    g.graph.outputs = [i for i in g.graph.outputs if int(i) not in {v for v, _ in copies}]
    for value, variable in copies:  # last: every reader of the old state has run
        ones = g.const(f"{_name(tensors[variable])}/copy_multiples", np.ones(len(tensors[variable].shape), np.int32))
        g.op("TILE", [value, ones], [variable])
    description[HELD_KEY] = dict(pairs)


def _name(tensor: Any) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name)


def held_states(content: bytes | mmap.mmap) -> dict[str, str]:
    """The state pairs a stateful file holds (its metadata's ``states``, input -> output), read lazily from the
    flatbuffer (no buffer copied); {} for any other file."""
    model = schema().Model.GetRootAs(content, 0)
    for k in range(model.MetadataLength()):
        entry = model.Metadata(k)
        if entry.Name() is None or entry.Name().decode(errors="replace") != METADATA_KEY:
            continue
        if not 0 <= entry.Buffer() < model.BuffersLength():
            return {}
        try:
            found = json.loads(model.Buffers(entry.Buffer()).DataAsNumpy().tobytes())
        except (ValueError, AttributeError):
            return {}
        held = found.get(HELD_KEY) if isinstance(found, dict) else None
        return {str(a): str(b) for a, b in held.items()} if isinstance(held, dict) else {}
    return {}


def held_session(run: Callable[[dict], dict], interpreter: Any, held: dict[str, str]) -> Callable[[dict], dict]:
    """``run`` (a session of a stateful file on ``interpreter``) returning after each call, besides the outputs,
    each held variable's value under its state output's name (as OpenVINO's stateful session does)."""
    indices: dict[str, int] = {}

    def call(inputs: dict) -> dict:
        outputs = run(inputs)
        if not indices:
            by_name = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
            indices.update({output: by_name[state] for state, output in held.items() if state in by_name})
        return {**outputs, **{output: np.array(interpreter.get_tensor(i)) for output, i in indices.items()}}

    return call


__all__ = ["held_session", "held_states", "hold_states", "write_stateful_whole"]

"""Parts of a LiteRT file run alone: the operators that compute some of its tensors from others, copied into a new
model byte for byte (their constants, int8 weights with their scales, options).

This is how a recurrent layer of a *whole* model gatepack wrote runs alone, as its interpreter computes it: the
layer's interface names tensors inside the graph (its X, its states, its Y), which the model computes from its own
inputs. ``part(path, inputs, outputs)`` keeps the operators ``outputs`` depend on, walking back from them and
stopping at ``inputs`` (which become the part's inputs) and at constants; an operator that needs any other tensor
computed at run time (not one of ``inputs``) means the part does not stand alone, and it is refused rather than fed
zeros. Variable tensors keep their flag (a state the file writes before its sequence op each call).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from gatepack.converters.errors import RuntimeFailure
from gatepack.converters.formats.litert.common import Graph, schema

if TYPE_CHECKING:
    from gatepack.converters.formats.litert.reader import _File


def copied_tensor(g: Graph, file: "_File", index: int, data: bool = True) -> int:
    """Tensor ``index`` of ``file`` added to ``g``: name, shape (its signature's dynamic dimensions kept), type,
    variable flag, quantization (an INT8 weight's scales: the hybrid kernel's), and its constant bytes unless
    ``data`` is False or it holds none."""
    from gatepack.converters.formats.litert.reader import _signature

    t = file.tensors[index]
    kinds = {v: k for k, v in vars(g.s.TensorType).items() if not k.startswith("_")}
    raw = constant_bytes(file, index) if data else None
    shape = [None if d < 0 else int(d) for d in _signature(t)]
    new = g.tensor(file.name(index), shape, kinds[t.type], raw, variable=bool(t.isVariable))
    g.graph.tensors[new].quantization = t.quantization
    return new


def constant_bytes(file: "_File", index: int) -> np.ndarray | None:
    """The bytes tensor ``index`` holds as a constant (uint8), None when it holds none (or is a variable)."""
    t = file.tensors[index]
    buffer = file.model.buffers[t.buffer] if t.buffer < len(file.model.buffers) else None
    if t.isVariable or buffer is None or buffer.data is None or not len(buffer.data):
        return None
    return np.asarray(buffer.data).astype(np.uint8, copy=False)


def part(path: Path, inputs: Sequence[str], outputs: Sequence[str]) -> bytes:
    """A model of the operators of the file at ``path`` that compute ``outputs`` from ``inputs`` (tensor names;
    module docstring), its inputs ``inputs`` and its outputs those of ``outputs`` the file computes (a layer's final
    state that the model never reads may be left unwritten; the first, a layer's Y, must be computed). RuntimeFailure
    when a name is not in the file, the first is not computed or the part needs another tensor computed at run
    time."""
    from gatepack.converters.formats.litert.reader import parsed

    file = parsed(path)
    by_name = {file.name(k): k for k in range(len(file.tensors))}
    missing = [name for name in inputs if name not in by_name]
    if missing:
        raise RuntimeFailure(f"{path}: holds no tensor named {', '.join(map(repr, missing))}")
    producer = {int(k): n for n, op in enumerate(file.graph.operators or []) for k in op.outputs}
    computed = [by_name[n] for n in outputs if n in by_name and by_name[n] in producer]  # (a state left unwritten)
    if outputs and (outputs[0] not in by_name or by_name[outputs[0]] not in producer):
        raise RuntimeFailure(f"{path}: no operator computes {outputs[0]!r}, so the part cannot run alone")
    kept = _kept_operators(file, {by_name[name] for name in inputs}, computed, producer)
    g = Graph(schema())
    new: dict[int, int] = {}
    for name in inputs:
        new[by_name[name]] = copied_tensor(g, file, by_name[name], data=False)
        g.graph.inputs.append(new[by_name[name]])
    for op in kept:
        for index in [int(k) for k in op.inputs] + [int(k) for k in op.outputs]:
            if index >= 0 and index not in new:
                new[index] = copied_tensor(g, file, index)
        g.op(
            file.op_name(op),
            [new.get(int(k), -1) for k in op.inputs],
            [new[int(k)] for k in op.outputs],
            op.builtinOptions,
        )
    g.graph.outputs = [new[index] for index in computed]
    return g.finish(None)


def _kept_operators(file: "_File", fed: set[int], wanted: list[int], producer: dict[int, int]) -> list[Any]:
    """The operators of ``file`` that ``wanted`` tensors depend on, back to the ``fed`` tensors and constants, in the
    file's order (``producer``: the operator that writes each tensor); RuntimeFailure naming a tensor computed at
    run time that none of them computes."""
    operators = file.graph.operators or []
    kept: set[int] = set()
    todo = list(wanted)
    while todo:
        index = todo.pop()
        if index < 0 or index in fed or constant_bytes(file, index) is not None:
            continue
        n = producer.get(index)
        if n is None:
            if file.tensors[index].isVariable:
                continue  # a state variable the part's own operators write before reading
            raise RuntimeFailure(
                f"{file.path}: tensor {file.name(index)!r} is computed from the model's own inputs, not from "
                "the part's, so the part cannot run alone"
            )
        if n not in kept:
            kept.add(n)
            todo += [int(k) for k in operators[n].inputs]
    return [operators[n] for n in sorted(kept)]

"""LiteRT: which form a layer is written in (the sequence op, or elementary builtin ops unrolled over a static
sequence), from ``capabilities.LITERT`` plus what only LiteRT's ops impose (docs/conventions.md §11):

* there is no GRU builtin: a GRU is always elementary;
* the LSTM's one fused activation is both its candidate's (g) and its cell output's (h) activation;
* int8 weights (``quantized``) go to the op's hybrid kernel only with one scale per gate, float peepholes beside
  them never (the kernel reads them as int8): the elementary form's FULLY_CONNECTED takes a scale per row;
* a state is a variable tensor [N, H] per direction, which the writer fills before the op on every invoke (from
  the initial-state input's direction, or zeros); a variable tensor cannot hold data (the interpreter refuses "a
  variable tensor with buffer"), so a held non-zero initial state has no native form.
"""

from __future__ import annotations

import numpy as np

from gatepack.converters.capabilities import doubts, lacks
from gatepack.converters.errors import UsageError
from gatepack.converters.feature_findings import Form
from gatepack.converters.formats.litert.quantized import holds, per_gate
from gatepack.converters.formats.litert.registration import CAPABILITIES as LITERT
from gatepack.converters.model import Model
from gatepack.converters.registry import keeps_whole
from gatepack.converters.strategy import choose
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import RecurrentLayer, state_roles


def native_blockers(layer: RecurrentLayer) -> dict[str, str]:
    """Why the layer's sequence op would not compute what ONNX specifies, by feature (empty: it would)."""
    op = LITERT.op(layer.cell)
    found = lacks(layer, op)
    if layer.cell is Cell.GRU:
        return {"cell": "TFLite has no GRU builtin", **found}
    if layer.cell is Cell.LSTM and "activations" not in found:
        per = [tuple(a.name for a in p.activations) for p in layer.directions]
        if any(names[1] != names[2] for names in per):
            found["activations"] = (
                f"activations {layer.activation_summary()}: the {op.name}'s one fused activation is both the "
                "candidate's (g) and the cell output's (h)"
            )
    for role, _ in state_roles(layer.cell):
        held = layer.constant(role)
        if held is not None and held.any():
            found[role] = f"a held non-zero {role}: a variable tensor cannot hold data (the interpreter refuses it)"
    return {**found, **_hybrid_blockers(layer)}


def _hybrid_blockers(layer: RecurrentLayer) -> dict[str, str]:
    """Why the sequence op's hybrid kernel would not take the layer's int8 weights (``quantized``): it reads one
    scale per weight tensor, and its peepholes as int8 too; CIFG negates an integer that -128 has no negation of."""
    if not holds(layer):
        return {}
    if not per_gate(layer):
        return {"quantization scales": "int8 scales per output row: the sequence op's hybrid kernel takes one per gate"}
    if any(p.P is not None for p in layer.directions):
        return {"peepholes": "float peepholes beside int8 weights: the hybrid kernel reads its peepholes as int8"}
    if layer.input_forget and any((p.Wq.values == -128).any() or (p.Rq.values == -128).any() for p in layer.directions):  # type: ignore[union-attr]
        return {"input_forget": "CIFG negates the input gate's integers, and -128 has no int8 negation"}
    return {}


def form(layer: RecurrentLayer, strategy: str = "auto") -> Form:
    """The form ``layer`` is written in: the op where it is exact (``auto``), else elementary ops."""
    op = LITERT.op(layer.cell)
    lacking, doubted = native_blockers(layer), doubts(layer, op)
    avoided = [*lacking.values(), *doubted.values()]
    chosen = "decomposed" if layer.cell is Cell.GRU and strategy != "native" else choose(strategy, avoided)
    return Form(LITERT, op, lacking, strategy, chosen, doubted)


def streamed_roles(layer: RecurrentLayer, pairs: object) -> dict[str, tuple[str, str]]:
    """With ``--stateful``: the layer's initial-state roles that a state pair of ``pairs`` ((input, output) each)
    feeds from the layer's own final state, role -> (input, output); the file holds them in the op's variables."""
    given = {tuple(pair) for pair in pairs} if isinstance(pairs, (list, tuple)) else set()
    itf, found = layer.interface, {}
    for role, final in state_roles(layer.cell):
        pair = (getattr(itf, role), getattr(itf, final))
        if role in layer.fed_roles() and pair in given:
            found[role] = (str(pair[0]), str(pair[1]))
    return found


def settle_options(model: Model, options: dict) -> dict:
    """``options`` as given, once every state pair ``--stateful`` asks to hold is a layer's own (its initial state
    fed from its final state): UsageError naming a pair that is not, which no variable tensor can hold. A whole model
    holds any pair (``stateful_whole``: the state input itself is the variable). A whole model takes its sizes from
    its inputs: ``seq_length`` or ``batch_size`` given for one is a UsageError (they size layers written alone)."""
    sized = [f"--{name.replace('_', '-')}" for name in ("seq_length", "batch_size") if options.get(name) is not None]
    if sized and keeps_whole(model, "litert"):
        raise UsageError(
            f"{model.path}: {' and '.join(sized)} {'size' if len(sized) > 1 else 'sizes'} the recurrent layers written "
            "alone; the whole LiteRT "
            "model takes its sizes from its inputs' shapes",
            hint="give those with --input-shape NAME=D1,D2,..., or pass --layers-only to write the layers alone at "
            "these sizes",
        )
    if not options.get("stateful") or keeps_whole(model, "litert"):
        return options
    owned = {pair for layer in model.layers for pair in streamed_roles(layer, model.meta.get("state_pairs")).values()}
    for pair in model.meta.get("state_pairs") or []:
        if tuple(pair) not in owned:
            raise UsageError(
                f"{model.path}: --stateful: state pair {pair[0]}={pair[1]} is not a layer's initial state fed from its "
                "own final state, which is what a LiteRT sequence op's variable tensor holds",
                hint="name the pairs with --state INPUT=OUTPUT, or leave out --stateful",
            )
    return options


def held_state(layer: RecurrentLayer, role: str, batch: int) -> np.ndarray | None:
    """The layer's held ``role`` as float32 [D, batch, H] (None: not held)."""
    value = layer.constant_state(role, batch)
    return None if value is None else np.ascontiguousarray(value, np.float32)

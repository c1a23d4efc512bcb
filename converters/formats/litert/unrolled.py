"""LiteRT: a file that is one unrolled recurrent module (litert-torch's ``nn.GRU`` / ``nn.RNN`` / ``nn.LSTM``), lifted
into a canonical layer.

litert-torch writes no loop and no sequence op: the main subgraph projects all of X by W with one
``FULLY_CONNECTED``, ``SLICE``s a step at a time, multiplies h by R with another, applies the gates and
``CONCATENATION``s the steps (docs/conventions.md §11). The file is then the module itself, with the module's
interface: inputs X [S, N, I] (time-major, as torch) and optionally h0 [D, N, H] and c0, outputs Y [S, N, D*H],
h_n [D, N, H] and optionally c_n, in torch's order. A file of that shape is lifted whole: each direction is a
hypothesis (cell, gate order, reset placement, activation, which constants are W, R and the biases) proven on
gatepack's executor against the interpreter running the file on random inputs, direction d compared on its slice
of Y and h_n (the other direction's initial state zeros); a bidirectional module's two proven directions make
one bidirectional layer. The layer's Y is the file's Y with its directions split out of the last axis.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.litert.common import FORMAT
from gatepack.converters.formats.litert.loops import (
    LoopHandle,
    body_activations,
    body_constants,
    prove_hybrid,
    run_loop,
    with_records,
)
from gatepack.converters.lifting import Lifted, LiftRefused, Recurrence, candidates_from_constants, lift
from gatepack.converters.samples import DYNAMIC_INT8
from gatepack.schemas.layer import Direction, Interface, Provenance, RecurrentLayer
from gatepack.schemas.quantized import QuantizedWeights

_ROLES_IN = ("x", "initial_h", "initial_c")  # torch's forward(x, h0) / forward(x, (h0, c0))
_ROLES_OUT = ("y", "y_h", "y_c")  # torch's (output, h_n) / (output, (h_n, c_n))
_HYBRID_PROOF = (
    f", within {DYNAMIC_INT8}'s tolerance: its INT8 weights' kernels quantize X and h at run time; the layer with "
    "those integers then agrees with the file at float32's tolerance on gatepack's executor of the hybrid products"
)
_ARITIES = {(1, 2), (2, 2), (1, 3), (3, 3)}  # (inputs, outputs): GRU/RNN without or with h0, LSTM without or with both


def lift_unrolled(file: Any) -> tuple[RecurrentLayer, Finding]:
    """The whole file as one layer (LiftRefused when its interface is not a recurrent module's or no reading of
    its constants reproduces it)."""
    where = f"{file.path}: no sequence op or WHILE loop; its main subgraph, read as a module's unrolled steps"
    itf, sizes = _interface(file, where)
    s, n, i, d, h = sizes
    handle = LoopHandle(
        file.path,
        tuple((role, getattr(itf, role)) for role in ("initial_h", "initial_c") if getattr(itf, role)),
        tuple((role, getattr(itf, role)) for role in _ROLES_OUT if getattr(itf, role)),
        squeezed=False,
    )
    records: dict[str, QuantizedWeights] = {}  # INT8 weights of hybrid FULLY_CONNECTEDs (ai-edge-quantizer's)
    candidates = candidates_from_constants(body_constants(file, file.graph, where, records), i, h)
    activations = body_activations(file, file.graph)
    lifted = [
        _direction(where, itf, handle, candidates, activations, sizes, k, records)
        for k in range(d)  # the forward direction, then the reverse one
    ]
    layer = _joined(where, itf, [found.layer for found in lifted])
    described = "; ".join(f"direction {k}: {found.description}" for k, found in enumerate(lifted))
    finding = Finding(
        "lifted",
        Status.REPACKED,
        f"lifted from unrolled steps (the whole file, as litert-torch writes a torch module): {described}; proven "
        f"against the LiteRT interpreter running the file on random inputs ({sum(f.tried for f in lifted)} "
        f"reading(s) tried{_HYBRID_PROOF if records else ''}). Y {itf.y!r} is the file's [S, N, {d}*H] as "
        f"[S, {d}, N, H]",
    )
    provenance = Provenance(
        FORMAT, file.path, layer.name, "lifted", "unrolled", inputs=(itf.x,), layout=0, handle=handle
    )
    return replace(layer, provenance=provenance), finding


def _interface(file: Any, where: str) -> tuple[Interface, tuple[int, int, int, int, int]]:
    """The file's inputs and outputs as a torch module's, and its sizes S, N, I, D, H."""
    graph = file.graph
    inputs = [int(k) for k in (graph.inputs if graph.inputs is not None else [])]
    outputs = [int(k) for k in (graph.outputs if graph.outputs is not None else [])]
    shapes = {
        k: [int(v) for v in (file.tensors[k].shape if file.tensors[k].shape is not None else [])]
        for k in (*inputs, *outputs)
    }
    fits = (len(inputs), len(outputs)) in _ARITIES and all(len(shapes[k]) == 3 for k in (*inputs, *outputs))
    if fits:
        (s, n, i), (d, _, h) = shapes[inputs[0]], shapes[outputs[1]]
        states = [shapes[k] for k in (*inputs[1:], *outputs[1:])]
        fits = d in (1, 2) and shapes[outputs[0]] == [s, n, d * h] and all(v == [d, n, h] for v in states)
    if not fits:
        held = {name: [shapes[k] for k in ks] for name, ks in (("inputs", inputs), ("outputs", outputs))}
        raise LiftRefused(
            f"{where}: its interface ({held}) is not a recurrent module's: X [S, N, I] (and h0, c0 [D, N, H]) in, "
            "Y [S, N, D*H] and h_n (and c_n) [D, N, H] out"
        )
    names = {role: file.name(k) for role, k in (*zip(_ROLES_IN, inputs), *zip(_ROLES_OUT, outputs))}
    itf = Interface(layout=0, seq_length=s, batch_size=n, dtype="float32", **names)
    return itf, (s, n, i, d, h)


def _shape(tensor: Any) -> list:
    return [] if tensor.shape is None else list(tensor.shape)


def _direction(
    where: str,
    itf: Interface,
    handle: LoopHandle,
    candidates: list,
    activations: frozenset[str],
    sizes: tuple[int, int, int, int, int],
    k: int,
    records: dict[str, QuantizedWeights],
) -> Lifted:
    """Direction ``k`` of the module proven alone: its slice of Y and the final states, the other direction's
    initial states zeros; with INT8 ``records``, their layer proven again on the executor of the hybrid products."""
    _, n, i, d, h = sizes

    def run_original(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        full = dict(feed)
        for role in ("initial_h", "initial_c"):
            name = getattr(itf, role)
            if name:
                state = np.zeros((d, n, h), np.float32)
                state[k] = feed[name][0]
                full[name] = state
        return {
            name: value[:, k : k + 1] if name == itf.y else value[k : k + 1]
            for name, value in run_loop(handle, itf, full, where).items()
        }

    rec = Recurrence(
        name=itf.y or "unrolled",
        found=f"{where} (direction {k})",
        direction=Direction.REVERSE if k else Direction.FORWARD,
        interface=itf,
        input_size=i,
        hidden_size=h,
        candidates=candidates,
        activations=activations,
        run_original=run_original,
        tolerance=DYNAMIC_INT8 if records else None,  # the hybrid kernels quantize X and h at run time
    )
    found = lift(rec)
    if not records:
        return found
    layer = with_records(found.layer, records, rec.found)
    prove_hybrid(layer, rec, rec.found)
    return replace(found, layer=layer)


def _joined(where: str, itf: Interface, layers: list[RecurrentLayer]) -> RecurrentLayer:
    """One layer of the module's proven directions (a bidirectional module's must agree on the cell)."""
    first = layers[0]
    name = itf.y or first.name
    if len(layers) == 1:
        return replace(first, name=name)
    second = layers[1]
    if (second.cell, second.linear_before_reset) != (first.cell, first.linear_before_reset):
        raise LiftRefused(f"{where}: its two directions prove different cells, which one layer does not hold")
    return replace(
        first,
        name=name,
        direction=Direction.BIDIRECTIONAL,
        directions=(first.directions[0], second.directions[0]),
        has_bias=first.has_bias or second.has_bias,
    )

"""Findings for writing a layer as LiteRT: the shared features from ``capabilities.LITERT`` and what only LiteRT
has (no GRU builtin, states as variable tensors written on every invoke, a static N, the elementary form's static S,
int8 weights its hybrid kernels hold)."""

from __future__ import annotations

from typing import Any

from gatepack.converters import quantization
from gatepack.converters.feature_findings import findings, replacing
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.litert.quantized import HELD, holds
from gatepack.converters.formats.litert.strategy import form, streamed_roles
from gatepack.converters.samples import DEFAULT_BATCH, DEFAULT_SEQ_LENGTH
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import Direction, RecurrentLayer, dim_text, state_roles

# How the native form's states are written on every invoke (docs/conventions.md §11): the artifact is stateless.
STATE_WRITTEN = {
    "fed": "{role} input copied into the op's state variable [N, H] before it runs, on every invoke (STRIDED_SLICE "
    "per direction): the input itself is never overwritten, and each invoke starts from it",
    "zero": "zeros written into the op's state variable [N, H] before it runs, on every invoke (FILL): each invoke "
    "starts from zeros, whatever the one before did",
    "held": "{output} -> {input} held in the op's state variable across invoke() (--stateful): the file takes no "
    "{input}, starts from zeros and continues each invoke from the last; reset_all_variables() starts a new stream",
}


def check(
    layer: RecurrentLayer,
    *,
    strategy: str = "auto",
    seq_length: Any = None,
    batch_size: Any = None,
    stateful: bool = False,
    state_pairs: Any = (),
) -> list[Finding]:
    """Findings for writing ``layer`` as LiteRT with ``strategy`` (``stateful``: the layer's own ``state_pairs``
    held in the op's variable tensors)."""
    chosen = form(layer, strategy)
    found = findings(layer, chosen)
    if layer.cell is Cell.GRU and chosen.native:
        found = replacing(
            found,
            Finding(
                "cell",
                Status.UNSUPPORTED,
                "TFLite has no GRU builtin operator",
                alternative=chosen.caps.alternatives["cell"],
            ),
        )
    extra = [_shapes(layer, chosen.native, seq_length, batch_size), *_unrolled(layer, chosen.native)]
    held = streamed_roles(layer, state_pairs) if stateful else {}
    kept = [quantization.held(layer, HELD)] if holds(layer) else []
    return replacing(found, *extra, *_states(layer, chosen.native, held), *kept)


def _unrolled(layer: RecurrentLayer, native: bool) -> list[Finding]:
    """The unrolled form's own words: no loop, and the time axis split where the interface has it."""
    if native:
        return []
    found = []
    if layer.interface.layout == 1:  # no transpose: the steps are split from and stacked on the batch-major axis
        found.append(Finding("layout", Status.EXACT, "layout 1 (batch-major; the steps split and stacked on axis 1)"))
    if layer.direction is Direction.BIDIRECTIONAL:
        found.append(
            Finding(
                "direction", Status.REPACKED, "bidirectional: a forward and a reverse pass, stacked into Y [S,D,N,H]"
            )
        )
    return found


def _size(value: Any, layer: RecurrentLayer, default: int) -> int:
    value = value.get(layer.name) if isinstance(value, dict) else value
    return value if isinstance(value, int) else default


def _shapes(layer: RecurrentLayer, native: bool, seq_length: Any, batch_size: Any) -> Finding:
    """N fixed (each state is a variable tensor [N, H]); S dynamic for the op, fixed for the unrolled form."""
    itf = layer.interface
    fixed = []
    if not isinstance(itf.batch_size, int):
        fixed.append(
            f"N={dim_text(itf.batch_size)} fixed to {_size(batch_size, layer, DEFAULT_BATCH)} (--batch-size: "
            "the state variables are [N, H])"
        )
    if not native and not isinstance(itf.seq_length, int):
        fixed.append(
            f"S={dim_text(itf.seq_length)} fixed to {_size(seq_length, layer, DEFAULT_SEQ_LENGTH)} "
            "(--seq-length: the elementary form is unrolled)"
        )
    if not fixed:
        dynamic = "" if isinstance(itf.seq_length, int) else " (dynamic: the op's input is resized)"
        return Finding("shapes", Status.EXACT, f"S={dim_text(itf.seq_length)}{dynamic}, N={itf.batch_size}")
    flags = [
        flag
        for flag, option, dim, applies in (
            ("--batch-size", batch_size, itf.batch_size, True),
            ("--seq-length", seq_length, itf.seq_length, not native),
        )
        if applies and option is None and not isinstance(dim, int)
    ]
    assumed = (
        f"assumed (gatepack's default), not given: the file runs at these sizes only; pass {' and '.join(flags)} "
        "for the sizes it will run at"
        if flags
        else None
    )
    return Finding("shapes", Status.REPACKED, "; ".join(fixed), warning=assumed)


def _states(layer: RecurrentLayer, native: bool, held: dict[str, tuple[str, str]]) -> list[Finding]:
    """Per state of the native op: how its variable tensor is written before the op on every invoke, or that it
    holds the state across invokes (``held``: --stateful); the elementary form has no variable to hold one."""
    if not native:
        return [
            Finding(
                role,
                Status.UNSUPPORTED,
                f"--stateful: {pair[1]} -> {pair[0]} cannot be held, the elementary form has no variable tensor "
                "(gatepack writes no resource variables)",
                alternative="leave out --stateful: the state stays an input and an output",
            )
            for role, pair in held.items()
        ]
    found = []
    for role, _ in state_roles(layer.cell):
        if role in held:
            text = STATE_WRITTEN["held"].format(input=held[role][0], output=held[role][1])
            found.append(Finding(role, Status.REPACKED, text))
        else:
            text = STATE_WRITTEN["fed" if role in layer.fed_roles() else "zero"].format(role=role)
            found.append(Finding(role, Status.EXACT, text))
    return found

"""Choosing between a target's own recurrent op (``native``) and elementary ops (``decomposed``),
shared by the formats that offer both (OpenVINO, Core ML)."""

from __future__ import annotations

from gatepack.converters.errors import UsageError
from gatepack.converters.findings import Finding, Status
from gatepack.converters.registry import STRATEGIES


def choose(strategy: str, blockers: list[str]) -> str:
    """The strategy used: ``auto`` is native unless something blocks it."""
    if strategy not in STRATEGIES:
        raise UsageError(f"strategy {strategy!r} is not one of {STRATEGIES}")
    if strategy == "auto":
        return "decomposed" if blockers else "native"
    return strategy


def cell_finding(
    strategy: str,
    chosen: str,
    blockers: list[str],
    *,
    native: str,
    refused: str,
    decomposed: str,
    alternative: str,
    warning: str | None = None,
) -> Finding:
    """The ``cell`` finding: exact native op, decomposed (and why), or native forced where it is wrong."""
    if chosen == "native" and blockers:
        return Finding("cell", Status.UNSUPPORTED, f"{refused}: {'; '.join(blockers)}", alternative=alternative)
    if chosen == "native":
        return Finding("cell", Status.EXACT, native, warning=warning)
    why = "; ".join(blockers) if strategy == "auto" else "--strategy decomposed"
    return Finding("cell", Status.DECOMPOSED, f"{decomposed} ({why})")

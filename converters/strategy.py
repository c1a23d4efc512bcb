"""Choosing between a target's own recurrent op (``native``) and elementary ops (``decomposed``),
shared by the formats that offer both (OpenVINO, Core ML)."""

from __future__ import annotations

from gatepack.converters.errors import UsageError
from gatepack.converters.registry import STRATEGIES


def choose(strategy: str, blockers: list[str]) -> str:
    """The strategy used: ``auto`` is native unless something blocks it."""
    if strategy not in STRATEGIES:
        raise UsageError(f"strategy {strategy!r} is not one of {STRATEGIES}")
    if strategy == "auto":
        return "decomposed" if blockers else "native"
    return strategy

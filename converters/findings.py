"""Compatibility findings: what happens to each feature of a layer when it moves to a target.

Statuses, worst first (docs/design.md, "Findings"):

* ``unsupported`` - the target cannot express it; ``convert`` refuses.
* ``lossy``       - changes results beyond float rounding (e.g. fp64 -> fp32); refused unless allowed.
* ``decomposed``  - the target's recurrent op cannot express it; built from elementary ops instead.
* ``folded``      - numerically equivalent, but the source split cannot be recovered (summed biases).
* ``repacked``    - the same numbers, rearranged (gate order, layout, direction split).
* ``exact``       - carried over as is.

A finding may also carry a ``warning``: something the user should know that does not change the
status (e.g. the source relied on an activation default that runtimes disagree on).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Iterable


class Status(str, enum.Enum):
    UNSUPPORTED = "unsupported"
    LOSSY = "lossy"
    DECOMPOSED = "decomposed"
    FOLDED = "folded"
    REPACKED = "repacked"
    EXACT = "exact"

    @property
    def rank(self) -> int:
        """0 for the worst status, 5 for exact."""
        return list(Status).index(self)


@dataclass(frozen=True)
class Finding:
    feature: str
    status: Status
    detail: str
    warning: str | None = None
    alternative: str | None = None  # for unsupported/lossy: what the user can do instead
    chosen: bool = False  # a value gatepack chose where the user gave none: convert says it, even when exact

    def to_json(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        return {k: v for k, v in data.items() if v is not None and v is not False}


FP16_SOURCE_WARNING = "fp16 source: its precision was lost when it was saved"


def fp16_source(feature: str, stored: str) -> Finding:
    """The note on a source that holds fp16 values: widening them to float32 loses nothing more (the
    loss happened when the source was saved), so it is never a reason to refuse a target."""
    return Finding(
        feature,
        Status.EXACT,
        f"{stored}; read as the fp16 values widened to float32, which loses nothing more",
        warning=FP16_SOURCE_WARNING,
    )


def worst(findings: Iterable[Finding]) -> Status:
    return min((f.status for f in findings), key=lambda s: s.rank, default=Status.EXACT)


def sort_worst_first(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: f.status.rank)


def operator_list(ops: list[str], shown: int = 6) -> str:
    return ", ".join(ops[:shown]) + (f" and {len(ops) - shown} more" if len(ops) > shown else "")

"""The target-generic table of ONNX operators (``converters/operators``): ``OPERATORS[op_type][target]``.

Each target registers its entries once, when its package is imported (``register``); ``entry`` finds a node's
entry for a target and refuses, naming the node, what the entry does not implement: an operator with no entry,
an opset outside its range, an attribute it does not honour. Nothing is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from gatepack.converters.operators.translation import Translation


@dataclass(frozen=True)
class OnnxOp:
    """One ONNX operator's translation for one target: ``emit(t, node)`` returns one target value (or NumPy
    constant) per node output (None for an optional output nobody reads). ``attributes``: the ONNX attributes it
    honours; a node carrying any other is refused. ``opsets``: the ai.onnx opset range (inclusive) whose
    definition it implements."""

    emit: Callable[[Any, Any], Sequence]  # (the target's Translation, onnx.NodeProto)
    attributes: frozenset[str] = frozenset()
    opsets: tuple[int, int] = (1, 10_000)


OPERATORS: dict[str, dict[str, OnnxOp]] = {}  # ONNX op type -> target name -> its translation


def register(target: str, entries: Mapping[str, OnnxOp]) -> None:
    """Add ``target``'s translations to the table (a target registers each operator once)."""
    for op_type, op in entries.items():
        OPERATORS.setdefault(op_type, {})[target] = op


def operators(target: str) -> dict[str, OnnxOp]:
    """``target``'s column of the table: every ONNX operator it translates."""
    return {op_type: column[target] for op_type, column in OPERATORS.items() if target in column}


def entry(t: "Translation", node) -> OnnxOp:
    """``node``'s translation for ``t``'s target, after the table's rules (else ``t.refuse`` names why)."""
    op = OPERATORS.get(node.op_type, {}).get(t.target)
    if op is None:
        t.refuse(node, f"no translation to {t.target_language}")
    first, last = op.opsets
    if not first <= t.opset <= last:
        t.refuse(node, f"its translation covers opsets {first}..{last}, not {t.opset}")
    extra = sorted({a.name for a in node.attribute} - op.attributes)
    if extra:
        t.refuse(node, f"attribute{'s' if len(extra) > 1 else ''} {', '.join(extra)} not honoured")
    return op

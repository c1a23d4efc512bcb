"""An ``Einsum`` equation read once for every target (``converters/operators``): its terms and how a two-operand
product groups its letters.

A two-operand Einsum without repeated letters within a term is one batched matrix product:
``out[batch, free_a, free_b] = sum_contracted a[batch, free_a, contracted] b[batch, contracted, free_b]``, where
``batch`` letters are in both operands and the output, ``contracted`` ones in both operands only, ``free_a`` /
``free_b`` in one operand and the output; a letter in one operand only is summed over first.
"""

from __future__ import annotations

from typing import NamedTuple

from gatepack.converters.operators.translation import Translation


class EinsumGroups(NamedTuple):
    """A two-operand equation's letters by role (each a string, in the order its operand holds them)."""

    batch: str
    contracted: str
    free_a: str
    free_b: str


def einsum_terms(t: Translation, node, count: int) -> tuple[list[str], str]:
    """An Einsum equation's operand terms and output term (implicit mode: the letters used once, sorted).
    Ellipses and a letter repeated within one term (diagonals, traces) are refused naming the equation."""
    equation = str(t.attr(node, "equation")).replace(" ", "")
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if "." in equation or len(terms) != count or any(len(set(term)) != len(term) for term in [*terms, right]):
        t.refuse(node, f"equation {equation!r}: ellipses, repeated letters within a term or more than two operands")
    if not arrow:
        letters = "".join(terms)
        right = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if set(right) - set("".join(terms)):
        t.refuse(node, f"equation {equation!r}: output letters no operand has")
    return terms, right


def einsum_groups(a: str, b: str, out: str) -> EinsumGroups:
    """The letters of terms ``a`` and ``b`` by role in the product giving ``out`` (module docstring)."""
    return EinsumGroups(
        batch="".join(c for c in out if c in a and c in b),
        contracted="".join(c for c in a if c in b and c not in out),
        free_a="".join(c for c in a if c in out and c not in b),
        free_b="".join(c for c in b if c in out and c not in a),
    )

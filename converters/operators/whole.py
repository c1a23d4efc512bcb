"""What every target's whole-model pipeline shares around its own emission (``converters/operators``): which models
it writes whole, the inputs a recurrent layer takes from the graph being translated, an ``If`` decided at
conversion time, and the report's ``model`` finding from the same translation ``convert`` runs.

A target (``WholeTarget``) says its words and how it asks its translation for a verdict (``Verdict``: why the
model does not translate, what changes in its interface, which operators it folds); the finding is then one rule
for all:

* a layer with a per-step mask: unsupported (no target here writes one inside a whole model);
* a refusal: unsupported, with the refusal's way out;
* interface changes: lossy where a float64 becomes float32, else repacked;
* folded operators (fewer roundings than ONNX's sequence): folded; else exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from gatepack.converters.errors import RefusedError, UsageError
from gatepack.converters.findings import Finding, Status
from gatepack.converters.identity_cache import IdentityCache
from gatepack.converters.model import Model
from gatepack.converters.operators.translation import Translation, Untranslatable
from gatepack.converters.registry import check_name, keeps_whole, writers
from gatepack.schemas.layer import RecurrentLayer


def alternatives(target: str, source: str = "onnx") -> str:
    """What a user whose ``source``-format model ``target`` cannot hold whole can do instead: the layers alone, or
    another format whose record keeps whole models of that format (``FormatInfo.keeps_whole_from``), from the
    registry: e.g. 'pass --layers-only ..., or convert to onnx or openvino or coreml, which can keep the whole
    model'."""
    others = [name for name in writers() if name != target and source in check_name(name).keeps_whole_from]
    way_out = "pass --layers-only for the recurrent layers alone"
    return f"{way_out}, or convert to {' or '.join(others)}, which can keep the whole model" if others else way_out


class Verdict(NamedTuple):
    """A translation's outcome: ``refusal`` (its message and way out; None: the model translates), the interface
    ``changes`` and the ``folded`` operators it holds."""

    refusal: tuple[str, str] | None
    changes: list[str]
    folded: list[str]


@dataclass(frozen=True)
class WholeTarget:
    """A target's words in its ``model`` finding and how its translation is asked (``translate(model)`` returns
    the interface changes and folded operators, or raises the refusal)."""

    format: str  # the registry's name
    translate: Callable[[Model], tuple[list[str], list[str]]]
    artifact: str  # "one ML Program"
    language: str  # "MIL ops"
    mask_words: str  # why a masked layer cannot be held: "which gatepack's LiteRT translation does not hold"
    folded_words: str = "folded (fewer roundings than ONNX's sequence)"  # what a folded operator becomes


def is_whole_model(model: Model, target: WholeTarget) -> bool:
    """An ONNX model with operators around its recurrent layers, written whole unless the user asked for the
    layers alone (``registry.keeps_whole``)."""
    return keeps_whole(model, target.format)


# the verdicts asked lately: each lives while the layers it was asked for do (``IdentityCache``), a few at most
_VERDICTS: IdentityCache[Verdict] = IdentityCache(size=16)


def verdict(model: Model, target: WholeTarget, key: tuple, layers: Sequence[RecurrentLayer] = ()) -> Verdict:
    """``target``'s translation of ``model`` as a ``Verdict``, asked once per ``key`` (the file as it is, the input
    shapes and whatever else the translation depends on) and ``layers`` (the very objects, when the translation
    depends on them: a verdict is never found for other layers, even ones allocated where freed ones were)."""
    assert model.path is not None  # (a whole model read from its file)
    path = Path(model.path)
    cached = (target.format, *key)
    found = _VERDICTS.get(cached, layers)
    if found is None:
        try:
            found = Verdict(None, *target.translate(model))
        except (RefusedError, UsageError) as err:
            found = Verdict((err.message.removeprefix(f"{path}: "), err.hint or alternatives(target.format)), [], [])
        _VERDICTS.put(cached, layers, found)
    return found


def whole_model_finding(
    model: Model, target: WholeTarget, key: tuple, layers: Sequence[RecurrentLayer] = ()
) -> Finding | None:
    """The report's ``model`` finding for a whole ONNX model written by ``target`` (module docstring), from the
    same translation ``convert`` runs (``verdict`` for ``key`` and ``layers``): the report never calls exact what
    convert refuses."""
    if not is_whole_model(model, target):
        return None
    masked = [layer.name for layer in model.layers if layer.interface.mask]
    if masked:  # gatepack writes such a layer in place as an ONNX Loop, which the translations do not take
        return Finding(
            "model",
            Status.UNSUPPORTED,
            f"whole model: layer {masked[0]!r} holds a per-step mask (Keras masking), {target.mask_words}",
            alternative="convert the whole model to onnx or openvino, which hold it",
        )
    refusal, changes, folded = verdict(model, target, key, layers)
    if refusal is not None:
        return Finding("model", Status.UNSUPPORTED, refusal[0], alternative=refusal[1])
    whole = (
        f"whole model in {target.artifact}: gatepack translates the model's {model.other_ops_text()} to "
        f"{target.language} and writes every recurrent layer"
    )
    if folded:
        whole += f"; {', '.join(folded)} {target.folded_words}"
    if changes:  # the model's own names, not quite its own types
        lossy = any("float64" in change for change in changes)
        return Finding("model", Status.LOSSY if lossy else Status.REPACKED, f"{whole}; {'; '.join(changes)}")
    return Finding("model", Status.FOLDED if folded else Status.EXACT, whole)


def layer_inputs(t: Translation, node, layer: RecurrentLayer, failures: list) -> dict[str, tuple[str, Any]] | None:
    """The values ``layer`` takes from the graph (role -> (ONNX name, value)), X first; None when one is computed
    by a node that could not be translated (that node is named), refused when one is computed nowhere."""
    itf = layer.interface
    given = {}
    for role in ("x", *layer.fed_roles()):
        name = getattr(itf, role)
        if name not in t.values:
            if failures:
                return None
            t.refuse(node, f"its {role} {name!r} is not computed before it")
        given[role] = (name, t.values[name])
    return given


def inline_if(t: Translation, node, translate_graph: Callable[[Any], None]) -> bool:
    """An ``If`` whose condition is known at conversion time: the chosen branch's constants added and its nodes
    translated in place by ``translate_graph(branch)`` (they read the outer graph's values), its outputs the
    node's. False (nothing done) when the condition is computed at run time."""
    condition = t.value(node, 0)
    if not isinstance(condition, np.ndarray):
        return False
    branch = t.attr(node, "then_branch" if bool(np.asarray(condition).reshape(-1)[0]) else "else_branch")
    t.values.update(branch_constants(branch))
    translate_graph(branch)
    for inner, outer in zip(branch.output, node.output):
        if inner.name in t.values:
            t.values[outer] = t.values[inner.name]
    return True


def branch_constants(branch) -> dict[str, np.ndarray]:
    """A subgraph's initializers as arrays."""
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init) for init in branch.initializer}


__all__ = [
    "alternatives",
    "Untranslatable",
    "Verdict",
    "WholeTarget",
    "branch_constants",
    "inline_if",
    "is_whole_model",
    "layer_inputs",
    "verdict",
    "whole_model_finding",
]

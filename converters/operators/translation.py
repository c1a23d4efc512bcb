"""What every target's whole-model translation shares (``converters/operators``): the graph's values, how an
emitter reads a node's inputs and attributes, refusals naming the node, and the walk of a graph.

How a graph is walked (``translate_nodes``), node by node in order:

1. a node the target translates itself (``claims``: a recurrent layer's nodes, written by its layer writer) is
   handed over; an ``If`` (and any op type in ``special``) goes to the target's own translation;
2. a node of a domain other than ai.onnx, or reading a value computed nowhere before, is refused;
3. a node whose inputs are all constants is evaluated (onnx's reference implementation), random operators
   excepted; ``Shape``/``Size`` of a tensor whose shape is static is a constant: shape arithmetic folds for the
   shapes the model declares or the user gives;
4. every other node goes to its entry in the operator table (``table.entry``: the opset and attribute rules),
   and whatever the target's builder still raises inside an entry is a refusal naming the node and its inputs.

Each refusal is collected (``failures``), so one conversion names every node it cannot translate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NoReturn, Sequence

import numpy as np

from gatepack.converters.operators.table import entry

NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


class Untranslatable(Exception):
    """An ONNX node the translation cannot write exactly (its op, an attribute or an input it cannot honour)."""

    def __init__(self, node, reason: str, run_time: str | None = None) -> None:
        super().__init__(reason)
        self.op_type = node.op_type
        self.node_name = node.name or (node.output[0] if node.output else "?")
        self.reason = reason
        self.run_time = run_time  # the input the target cannot hold computed at run time (a constant it could)


@dataclass
class Translation:
    """The state of one graph's translation for one target: ``values`` maps each ONNX tensor name to the target's
    value or, when it is known before run time, its NumPy value. Emitters read inputs through
    ``var``/``constant``/``attr`` and refuse through ``refuse``. A target subclasses it: its name in the table
    (``target``), its words (``target_name``, ``target_language``, ``builder``), how a constant becomes one of
    its values (``as_var``) and which held values a node may read (``admit``)."""

    opset: int
    values: dict = field(default_factory=dict)

    target = ""  # the target's column in the operator table
    target_name = ""  # the runtime, as a refusal says it ("Core ML")
    target_language = ""  # what the translation writes ("MIL")
    builder = ""  # what builds the target's operations ("coremltools' MIL builder")

    # --- inputs
    def has(self, node, k: int) -> bool:
        """Whether optional input ``k`` is given."""
        return k < len(node.input) and bool(node.input[k])

    def value(self, node, k: int):
        """Input ``k`` as it is: a target value or a NumPy array."""
        name = node.input[k]
        if name not in self.values:
            self.refuse(node, f"input {name!r} is not computed before it (the graph is not in order)")
        value = self.values[name]
        self.admit(node, name, value)
        return value

    def admit(self, node, name: str, value: Any) -> None:
        """Refuse (``refuse``) when ``node`` cannot read ``value`` as the target holds it (every value, here)."""

    def var(self, node, k: int):
        """Input ``k`` as a target value (a constant made one by ``as_var``)."""
        return self.as_var(self.value(node, k))

    def as_var(self, value):
        raise NotImplementedError(f"{type(self).__name__} does not say how a constant becomes a value")

    def constant(self, node, k: int, what: str) -> np.ndarray:
        """Input ``k``'s value, which the translation needs before run time (``what`` it is, for the refusal)."""
        value = self.value(node, k)
        if not isinstance(value, np.ndarray):
            self.refuse(
                node,
                f"its {what} ({node.input[k]!r}) is computed at run time; {self.target_name} needs it constant",
                node.input[k],
            )
        return value

    def attr(self, node, name: str, default=None):
        """Attribute ``name`` as a Python value (ints, floats, strings, lists; tensors as arrays)."""
        from onnx import helper, numpy_helper

        for a in node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                if hasattr(value, "data_type"):  # a TensorProto
                    return numpy_helper.to_array(value)
                if isinstance(value, bytes):
                    return value.decode()
                if isinstance(value, list) and value and isinstance(value[0], bytes):
                    return [v.decode() for v in value]
                return value
        return default

    @staticmethod
    def shape(value) -> tuple:
        """The static shape of a target value or array (symbolic dimensions as they are)."""
        return tuple(np.shape(value)) if isinstance(value, np.ndarray) else tuple(value.shape)

    @staticmethod
    def rank(value) -> int:
        return len(Translation.shape(value))

    def refuse(self, node, reason: str, run_time: str | None = None) -> NoReturn:
        """Untranslatable ``node`` for ``reason``; ``run_time``: the input whose value, computed at run time, is the
        reason (known before, it would translate: the refusal's hint names the inputs that fix it)."""
        raise Untranslatable(node, reason, run_time)

    def rejected(self, node, what: str = "") -> str:
        """'<builder> rejects its inputs (<inputs>)': the inputs as the translation holds them (a builder's own
        message names its internals, not the model). A target says its dtypes (``held``)."""
        held = [self.held(name, self.values.get(name)) for name in node.input if name]
        shown = "; ".join(h for h in held if h)
        return f"{what or self.builder + ' rejects its inputs'} ({shown or 'none'})"

    def held(self, name: str, value: Any) -> str:
        """``value`` (input ``name``) in a refusal: "'a' [?, 5, 3]"; '' for nothing to show."""
        if value is None:
            return ""
        shape = ", ".join(str(d) if isinstance(d, (int, np.integer)) else "?" for d in self.shape(value))
        return f"{name!r} [{shape}]"


def is_static(value) -> bool:
    """Whether ``value``'s shape is known to the last dimension."""
    return value is not None and all(isinstance(d, (int, np.integer)) for d in Translation.shape(value))


def evaluate(t: Translation, node, inputs: list) -> list[np.ndarray]:
    """A node whose inputs are all constants, evaluated by onnx's reference implementation."""
    from gatepack.converters.formats.onnx.folding import evaluate_node

    known = {name: value for name, value in zip(node.input, inputs) if name}
    outputs = evaluate_node(node, known, {"": t.opset})
    if outputs is None:
        t.refuse(node, "onnx's reference implementation cannot evaluate it on its constant inputs")
    return outputs


def translate_nodes(
    t: Translation,
    nodes: Sequence,
    failures: list[Untranslatable],
    *,
    claims: Callable[[Any], bool] = lambda node: False,
    special: Mapping[str, Callable[[Any], None]] | None = None,
) -> None:
    """Translate ``nodes`` in order into ``t`` (module docstring); collect what cannot be translated in
    ``failures``. ``claims(node)``: True when the target translated the node itself; ``special``: op type ->
    the target's own translation of such a node (an ``If``)."""
    special = special or {}
    for node in nodes:
        if claims(node):
            continue
        try:
            if node.domain not in ("", "ai.onnx"):
                t.refuse(node, f"an operator of domain {node.domain!r}")
            if any(name and name not in t.values for name in node.input):
                if failures:
                    continue  # it reads what a node that could not be translated computes: that node is named
                t.refuse(
                    node, f"it reads {[n for n in node.input if n and n not in t.values]}, computed nowhere before"
                )
            if node.op_type in special:
                special[node.op_type](node)
                continue
            _translate_node(t, node)
        except Untranslatable as err:
            failures.append(err)
        except Exception:  # noqa: BLE001 - folding, a shape, a target's own translation: refused naming the node
            failures.append(Untranslatable(node, t.rejected(node, "its translation fails on its inputs")))


def _translate_node(t: Translation, node) -> None:
    """One node of the table's kind: folded when constant, else its entry's values."""
    inputs = [t.values[name] if name else None for name in node.input]
    constant_inputs = all(v is None or isinstance(v, np.ndarray) for v in inputs)
    if node.op_type == "Constant" or (node.input and constant_inputs and node.op_type not in NOT_FOLDED):
        t.values.update(zip(node.output, evaluate(t, node, inputs)))
        return
    if node.op_type in ("Shape", "Size") and is_static(t.values.get(node.input[0])):
        from gatepack.converters.formats.onnx.folding import shape_value

        t.values[node.output[0]] = shape_value(node, Translation.shape(t.values[node.input[0]]))
        return
    op = entry(t, node)
    try:
        emitted = op.emit(t, node)
    except Untranslatable:
        raise
    except Exception as err:
        raise Untranslatable(node, t.rejected(node)) from err
    t.values.update((name, value) for name, value in zip(node.output, emitted) if name)

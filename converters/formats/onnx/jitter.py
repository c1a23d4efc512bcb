"""ONNX copies of a model that quantizes activations at run time, each one arithmetic away from it: how verification
measures the source's own sensitivity to the float arithmetic before its quantizers (``converters.quantizer_steps``).

Two kinds of copy, of the main graph's ``DynamicQuantizeLinear`` nodes (and float32 ``QuantizeLinear`` ones) whose
input is computed at run time (not a graph input, not a constant):

- **one float32 step** (``crossing = 0``): each quantizer reads ``x' = x + x * (s * 1.5 * 2^-24)`` instead of ``x``,
  ``s = ±1`` drawn per element (``Sign`` of a seeded ``RandomUniformLike``). For ``2^e <= |x| < 2^(e+1)`` one float32
  step is ``ulp = 2^(e-23)`` and ``|x| * 1.5 * 2^-24`` lies in ``[0.75, 1.5) ulp``, so the sum rounds to the
  neighbour of ``x`` above or below: every nonzero value moves by one step, as another runtime's float operators (a
  Sigmoid not correctly rounded, another summation order) move them. Each recurrent node's X (``GRU``, ``RNN``,
  ``LSTM``, ``com.microsoft::DynamicQuantizeLSTM``) moves the same way, graph input or not: another runtime
  computes the recurrence with its own rounding, which a recurrence that amplifies it carries to its outputs.
- **crossing** (``crossing = K > 0``): in each ``DynamicQuantizeLinear`` every value within ``K`` float32 steps of a
  rounding boundary is moved across it, so that it lands one quantization step away: with ``scale`` as the operator
  computes it (``(max(0, max x) - min(0, min x)) / 255``), ``v = x / scale``, ``h = floor(v) + 1/2`` (the boundary
  between the two integers around ``v``), a value is that near when ``|v - h| <= K * 2^-23 * |v|`` (``K`` units in
  the last place of ``v``, within a factor 2) and moves to ``x' = (h ± 1/4) * scale``, on the other side of ``h``;
  a value whose move would change the scale (an end of the range, or a move that would leave
  ``[min(0, min x), max(0, max x)]``) stays. A one-step copy crosses only where a value lies within one step, at
  random; a runtime whose floats differ by ``K`` steps (a recurrent stack before the quantizer) can cross every
  boundary that near, which this copy crosses deterministically, and none farther (a 0.5% error in a scale is
  80,000 steps).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gatepack.converters.formats.onnx.graph import load_proto

# the quantizers of tensors computed at run time, and the input each quantizes
QUANTIZER_INPUTS = {"DynamicQuantizeLinear": 0, "QuantizeLinear": 0}
# (domain, op type) of the recurrent nodes whose X a one-step copy moves
RECURRENT_NODES = {("", "GRU"), ("", "RNN"), ("", "LSTM"), ("com.microsoft", "DynamicQuantizeLSTM")}
UINT8_RANGE = 255.0
ONE_STEP = 1.5 * 2.0**-24  # |x| times this is 0.75 to 1.5 units in the last place of x
INLINE_LIMIT = 1 << 30  # above this the copy keeps its tensors as external data


def jittered_copy(path: Path, out: Path, seed: int, crossing: float = 0.0) -> int:
    """Write the ONNX model at ``path`` to ``out`` one arithmetic away (module docstring): ``crossing`` 0, each
    run-time quantizer's and recurrent node's input moved by one float32 step (draw ``seed``); else in each
    ``DynamicQuantizeLinear`` its values within ``crossing`` float32 steps of a rounding boundary moved across it.
    Everything else unchanged. Returns the number of quantizers moved (0: none, and ``out`` is not written)."""
    proto = load_proto(path)
    onnx.load_external_data_for_model(proto, str(path.parent))
    graph = proto.graph
    fixed = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    fixed |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    nodes: list[onnx.NodeProto] = []
    moved = 0
    for k, node in enumerate(graph.node):
        at = QUANTIZER_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if at is not None and node.input[at] not in fixed and _moves(node, graph, crossing):
            nodes += _moved_nodes(node.input[at], f"{node.input[at]}__moved_{moved}", seed * 1000 + moved, crossing)
            node.input[at] = nodes[-1].output[0]
            moved += 1
        elif not crossing and (node.domain.replace("ai.onnx", ""), node.op_type) in RECURRENT_NODES:
            x = node.input[0]
            if x not in fixed - {i.name for i in graph.input}:
                nodes += _one_step_nodes(x, f"{x}__one_step_x_{k}", seed * 1000 + 500 + k)
                node.input[0] = nodes[-1].output[0]
        nodes.append(node)
    if not moved:
        return 0
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in nodes for name in node.input}
    graph.initializer.extend(
        numpy_helper.from_array(np.array(value, dtype), name)
        for name, (value, dtype) in _CONSTANTS.items()
        if name in used
    )
    external = proto.ByteSize() > INLINE_LIMIT
    onnx.save_model(proto, str(out), save_as_external_data=external, location=f"{out.name}.data")
    return moved


_STEP = "gatepack_one_float32_step"
_CONSTANTS = {  # name -> (value, dtype): the initializers the moving nodes read
    _STEP: (ONE_STEP, np.float32),
    "gatepack_zero": (0.0, np.float32),
    "gatepack_half": (0.5, np.float32),
    "gatepack_quarter": (0.25, np.float32),
    "gatepack_range": (UINT8_RANGE, np.float32),
}


def _moves(node: onnx.NodeProto, graph: onnx.GraphProto, crossing: float) -> bool:
    """Whether the copy moves this quantizer's input: a DynamicQuantizeLinear (float32 only), or, one float32 step
    only, a QuantizeLinear whose scale is a float32 initializer."""
    if node.op_type == "DynamicQuantizeLinear":
        return True
    scale = next((t for t in graph.initializer if t.name == node.input[1]), None)
    return not crossing and scale is not None and scale.data_type == TensorProto.FLOAT


def _moved_nodes(x: str, out: str, seed: int, crossing: float) -> list[onnx.NodeProto]:
    return _crossing_nodes(x, out, crossing) if crossing else _one_step_nodes(x, out, seed)


def _one_step_nodes(x: str, out: str, seed: int) -> list[onnx.NodeProto]:
    """``out = x + x * (Sign(RandomUniformLike(x, -1, 1, seed)) * ONE_STEP)``."""
    return [
        helper.make_node("RandomUniformLike", [x], [f"{out}_draw"], low=-1.0, high=1.0, seed=float(seed)),
        helper.make_node("Sign", [f"{out}_draw"], [f"{out}_sign"]),
        helper.make_node("Mul", [f"{out}_sign", _STEP], [f"{out}_relative"]),
        helper.make_node("Mul", [x, f"{out}_relative"], [f"{out}_delta"]),
        helper.make_node("Add", [x, f"{out}_delta"], [out]),
    ]


def _crossing_nodes(x: str, out: str, steps: float) -> list[onnx.NodeProto]:
    """``out``: ``x`` with each value within ``steps`` float32 steps of a rounding boundary of
    ``DynamicQuantizeLinear`` moved across it (module docstring)."""

    def t(name: str) -> str:
        return f"{out}_{name}"

    def n(op: str, inputs: list[str], name: str, **attrs) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [t(name)], **attrs)

    window = numpy_helper.from_array(np.array(steps * 2.0**-23, np.float32))
    return [
        n("Constant", [], "window", value=window),  # steps float32 steps, relative to the value
        n("ReduceMin", [x], "min", keepdims=0),
        n("Min", [t("min"), "gatepack_zero"], "lo"),
        n("ReduceMax", [x], "max", keepdims=0),
        n("Max", [t("max"), "gatepack_zero"], "hi"),
        n("Sub", [t("hi"), t("lo")], "span"),
        n("Div", [t("span"), "gatepack_range"], "scale"),
        n("Div", [x, t("scale")], "v"),
        n("Floor", [t("v")], "floor"),
        n("Add", [t("floor"), "gatepack_half"], "boundary"),
        n("Sub", [t("boundary"), t("v")], "gap"),  # > 0: v rounds down, so it moves up across the boundary
        n("Abs", [t("gap")], "distance"),
        n("Abs", [t("v")], "size"),
        n("Mul", [t("size"), t("window")], "reach"),
        n("Greater", [t("distance"), t("reach")], "far"),
        n("Greater", [t("gap"), "gatepack_zero"], "below"),
        n("Neg", ["gatepack_quarter"], "minus_quarter"),
        n("Where", [t("below"), "gatepack_quarter", t("minus_quarter")], "side"),
        n("Add", [t("boundary"), t("side")], "across"),
        n("Mul", [t("across"), t("scale")], "target"),
        n("Less", [t("target"), t("lo")], "under"),
        n("Greater", [t("target"), t("hi")], "over"),
        n("Or", [t("under"), t("over")], "outside"),
        n("Equal", [x, t("lo")], "lowest"),  # the range's own ends: moving one would change the scale
        n("Equal", [x, t("hi")], "highest"),
        n("Or", [t("lowest"), t("highest")], "end"),
        n("Or", [t("outside"), t("end")], "held"),
        n("Or", [t("far"), t("held")], "stays"),
        helper.make_node("Where", [t("stays"), x, t("target")], [out]),
    ]

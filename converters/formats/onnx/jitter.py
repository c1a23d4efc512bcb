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
- **crossing** (``0 < crossing <= 1``): in each ``DynamicQuantizeLinear`` the ``max(1, ceil(crossing * size))``
  values nearest a rounding boundary are moved across it, so that each lands one quantization step away: with
  ``scale`` as the operator computes it (``(max(0, max x) - min(0, min x)) / 255``), ``v = x / scale``,
  ``h = floor(v) + 1/2`` (the boundary between the two integers around ``v``), a value's distance to it is
  ``|v - h|`` and it moves to ``x' = (h ± 1/4) * scale``, on the other side of ``h``; values whose move would leave
  ``[min(0, min x), max(0, max x)]`` (and so change the scale) are not moved. A one-step copy crosses a boundary
  only where a value lies within a float32 step of it, which a small tensor may not have; a runtime whose floats
  differ by a few steps (a recurrent stack before the quantizer) crosses the boundaries nearest first, which this
  copy moves deterministically.
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
    ``DynamicQuantizeLinear`` the share ``crossing`` of its values nearest a rounding boundary (at least one) moved
    across it. Everything else unchanged. Returns the number of quantizers moved (0: none, and ``out`` is not
    written)."""
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
    "gatepack_far": (1.0, np.float32),  # a distance beyond any (at most 1/2): a value that must not move
    "gatepack_range": (UINT8_RANGE, np.float32),
    "gatepack_one_int": (1, np.int64),
    "gatepack_flat": ([-1], np.int64),
    "gatepack_one_element": ([1], np.int64),
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


def _crossing_nodes(x: str, out: str, share: float) -> list[onnx.NodeProto]:
    """``out``: ``x`` with its ``max(1, ceil(share * size))`` values nearest a rounding boundary of
    ``DynamicQuantizeLinear`` moved across it (module docstring)."""

    def t(name: str) -> str:
        return f"{out}_{name}"

    def n(op: str, inputs: list[str], name: str, **attrs) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [t(name)], **attrs)

    share_value = numpy_helper.from_array(np.array(share, np.float32))
    return [
        n("Constant", [], "share", value=share_value),
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
        n("Greater", [t("gap"), "gatepack_zero"], "below"),
        n("Neg", ["gatepack_quarter"], "minus_quarter"),
        n("Where", [t("below"), "gatepack_quarter", t("minus_quarter")], "side"),
        n("Add", [t("boundary"), t("side")], "across"),
        n("Mul", [t("across"), t("scale")], "target"),
        n("Less", [t("target"), t("lo")], "under"),
        n("Greater", [t("target"), t("hi")], "over"),
        n("Or", [t("under"), t("over")], "outside"),
        n("Where", [t("outside"), "gatepack_far", t("distance")], "eligible"),
        n("Size", [x], "size"),
        n("Cast", [t("size")], "size_float", to=TensorProto.FLOAT),
        n("Mul", [t("size_float"), t("share")], "wanted"),
        n("Ceil", [t("wanted")], "wanted_up"),
        n("Cast", [t("wanted_up")], "wanted_int", to=TensorProto.INT64),
        n("Max", [t("wanted_int"), "gatepack_one_int"], "at_least_one"),
        n("Less", [t("size"), t("at_least_one")], "too_many"),
        n("Where", [t("too_many"), t("size"), t("at_least_one")], "count"),
        n("Reshape", [t("count"), "gatepack_one_element"], "k"),
        n("Neg", [t("eligible")], "closeness"),
        n("Reshape", [t("closeness"), "gatepack_flat"], "flat"),
        helper.make_node("TopK", [t("flat"), t("k")], [t("nearest"), t("nearest_at")]),
        n("ReduceMin", [t("nearest")], "farthest_kept", keepdims=0),
        n("Neg", [t("farthest_kept")], "threshold"),
        n("Greater", [t("eligible"), t("threshold")], "beyond"),
        n("Not", [t("beyond")], "within"),
        n("Less", [t("eligible"), "gatepack_half"], "movable"),  # an integer v (distance 1/2) has nothing near
        n("And", [t("within"), t("movable")], "chosen"),
        helper.make_node("Where", [t("chosen"), t("target"), x], [out]),
    ]

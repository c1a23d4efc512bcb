"""An ONNX model whose run-time quantizers see their float inputs one float32 step away: how verification measures a
quantized model's own sensitivity to the float arithmetic before its quantizers (``converters.quantizer_steps``).

Each ``DynamicQuantizeLinear`` and float32 ``QuantizeLinear`` of the main graph whose input is computed at run time
(not a graph input, not a constant) reads ``x' = x + x * (s * 1.5 * 2^-24)`` instead of ``x``, with ``s = ±1`` drawn
per element (``Sign`` of a seeded ``RandomUniformLike``). For ``2^e <= |x| < 2^(e+1)`` one float32 step is
``ulp = 2^(e-23)`` and ``|x| * 1.5 * 2^-24`` lies in ``[0.75, 1.5) ulp``, so the sum rounds to the neighbour of ``x``
above or below (a tie between the two finer steps just below a power of two): every nonzero value moves by one step,
as another runtime's float operators (a Sigmoid not correctly rounded, another summation order) move them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gatepack.converters.formats.onnx.graph import load_proto

# the quantizers of tensors computed at run time, and the input each quantizes
QUANTIZER_INPUTS = {"DynamicQuantizeLinear": 0, "QuantizeLinear": 0}
ONE_STEP = 1.5 * 2.0**-24  # |x| times this is 0.75 to 1.5 units in the last place of x
INLINE_LIMIT = 1 << 30  # above this the copy keeps its tensors as external data


def jittered_copy(path: Path, out: Path, seed: int) -> int:
    """Write the ONNX model at ``path`` to ``out`` with each run-time quantizer's input moved by one float32 step
    (module docstring; draw ``seed``), everything else unchanged; the number of quantizers moved (0: none, and
    ``out`` is not written)."""
    proto = load_proto(path)
    onnx.load_external_data_for_model(proto, str(path.parent))
    graph = proto.graph
    fixed = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    fixed |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    nodes: list[onnx.NodeProto] = []
    moved = 0
    for node in graph.node:
        at = QUANTIZER_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if at is not None and node.input[at] not in fixed and _float32_quantizer(node, graph):
            nodes += _one_step_nodes(node.input[at], f"{node.input[at]}__one_step_{moved}", seed * 1000 + moved)
            node.input[at] = nodes[-1].output[0]
            moved += 1
        nodes.append(node)
    if not moved:
        return 0
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.append(numpy_helper.from_array(np.array(ONE_STEP, np.float32), _STEP))
    external = proto.ByteSize() > INLINE_LIMIT
    onnx.save_model(proto, str(out), save_as_external_data=external, location=f"{out.name}.data")
    return moved


_STEP = "gatepack_one_float32_step"


def _float32_quantizer(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    """A DynamicQuantizeLinear (float32 only), or a QuantizeLinear whose scale is a float32 initializer."""
    if node.op_type == "DynamicQuantizeLinear":
        return True
    scale = next((t for t in graph.initializer if t.name == node.input[1]), None)
    return scale is not None and scale.data_type == TensorProto.FLOAT


def _one_step_nodes(x: str, out: str, seed: int) -> list[onnx.NodeProto]:
    """``out = x + x * (Sign(RandomUniformLike(x, -1, 1, seed)) * ONE_STEP)``."""
    return [
        helper.make_node("RandomUniformLike", [x], [f"{out}_draw"], low=-1.0, high=1.0, seed=float(seed)),
        helper.make_node("Sign", [f"{out}_draw"], [f"{out}_sign"]),
        helper.make_node("Mul", [f"{out}_sign", _STEP], [f"{out}_relative"]),
        helper.make_node("Mul", [x, f"{out}_relative"], [f"{out}_delta"]),
        helper.make_node("Add", [x, f"{out}_delta"], [out]),
    ]

"""The executor against ONNX's own published GRU/RNN backend test cases (shipped with the onnx wheel):
their expected outputs come from ONNX's reference implementation, not from gatepack."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.backend.test.case.node.gru as gru_cases
import onnx.backend.test.case.node.rnn as rnn_cases
import pytest
from onnx import helper, numpy_helper

from gatepack.converters.executor import run_layer
from gatepack.converters.formats import onnx as onnx_format


def collect(module, cls) -> list[tuple]:
    captured = []
    original = module.expect
    module.expect = lambda node, inputs, outputs, name, **kw: captured.append((name, node, inputs, outputs))
    try:
        for attr in sorted(dir(cls)):
            if attr.startswith("export"):
                getattr(cls, attr)()
    finally:
        module.expect = original
    return captured


CASES = collect(gru_cases, gru_cases.GRU) + collect(rnn_cases, rnn_cases.RNN)


def test_cases_were_found():
    names = {c[0] for c in CASES}
    assert len(CASES) >= 10 and "test_gru_seq_length" in names and "test_rnn_seq_length" in names


def published_model(name: str, node, values: list, tmp_path, constants: set[int]) -> tuple:
    """The case's node saved as a model: the inputs at ``constants`` (the weights) as initializers,
    the rest graph inputs; returns the path and the fed values by input index."""
    inits, graph_inputs, feed = [], [], {}
    for index, (input_name, value) in enumerate(zip(node.input, values)):
        if not input_name:
            continue
        if index in constants:
            inits.append(numpy_helper.from_array(value, input_name))
        else:
            graph_inputs.append(
                helper.make_tensor_value_info(input_name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
            )
            feed[index] = value
    graph_outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in node.output if o]
    model = helper.make_model(
        helper.make_graph([node], name, graph_inputs, graph_outputs, inits), opset_imports=[helper.make_opsetid("", 14)]
    )
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path, feed


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_published_case(case, tmp_path):
    name, node, inputs, outputs = case
    # W, R, B become initializers (gatepack needs constant weights); the rest stay graph inputs.
    path, feed = published_model(name, node, inputs, tmp_path, constants={1, 2, 3})
    (layer,) = onnx_format.read(path).layers
    y, y_h = run_layer(layer, feed[0], feed.get(4), feed.get(5))
    produced = {"Y": y, "Y_h": y_h}
    roles = [role for role, out in zip(("Y", "Y_h"), node.output) if out]
    assert len(roles) == len(outputs)
    for role, expected in zip(roles, outputs):
        np.testing.assert_allclose(produced[role], expected, atol=1e-5, rtol=1e-4, err_msg=f"{name} {role}")

"""The executor against ONNX's own published GRU, RNN and LSTM backend test cases (shipped with the onnx
wheel): their expected outputs come from ONNX's reference implementation, not from gatepack; and the ONNX
gatepack writes for each case, verified on onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.backend.test.case.node.gru as gru_cases
import onnx.backend.test.case.node.lstm as lstm_cases
import onnx.backend.test.case.node.rnn as rnn_cases
import pytest
from onnx import helper, numpy_helper

import gatepack as gp
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


CASES = collect(gru_cases, gru_cases.GRU) + collect(rnn_cases, rnn_cases.RNN) + collect(lstm_cases, lstm_cases.LSTM)


def test_cases_were_found():
    names = {c[0] for c in CASES}
    assert len(CASES) >= 14 and {"test_gru_seq_length", "test_rnn_seq_length"} <= names
    assert {"test_lstm_with_peepholes", "test_lstm_batchwise"} <= names and sum("lstm" in n for n in names) >= 4


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
    # W, R, B (an LSTM's P, input 7) become initializers (gatepack needs constant weights); the rest stay graph
    # inputs: X 0, sequence_lens 4, initial_h 5 (an LSTM's initial_c 6).
    path, feed = published_model(name, node, inputs, tmp_path, constants={1, 2, 3, 7})
    (layer,) = onnx_format.read(path).layers
    produced = run_layer(layer, *(feed.get(k) for k in (0, 4, 5, 6)))
    present = [k for k, out in enumerate(node.output) if out]  # Y, Y_h (LSTM: Y_c) as the case asks
    assert len(present) == len(outputs)
    for k, expected in zip(present, outputs):
        np.testing.assert_allclose(produced[k], expected, atol=1e-5, rtol=1e-4, err_msg=f"{name} output {k}")
    # and the ONNX gatepack writes for it gives the same outputs on onnxruntime
    assert gp.convert(path, tmp_path / "back.onnx", to="onnx").verification.passed

"""Every GRU/RNN/LSTM node of the real models: read by gatepack, run by the executor on the node's real
inputs (captured from an onnxruntime run of the whole model), compared with what onnxruntime's
node produced in that same run."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import REALMODELS

import gatepack as gp
from gatepack.converters.executor import run_layer
from gatepack.schemas.layer import INPUT_ROLES, OUTPUT_ROLES

GRU_RNN_MODELS = sorted(p.name for p in REALMODELS.glob("*.onnx") if "lstm" not in p.name)
# LSTM models whose nodes are in the main graph (silero v4's are inside nested If branches, which an
# onnxruntime run cannot expose: that model is checked end to end below); DTLN's model 2 has none.
LSTM_MODELS = ["dpcrn_online_simple_lstm.onnx", "dtln_model_1_lstm.onnx", "silero_vad_openvino_16k_lstm.onnx"]
SILERO_V4 = "silero_vad_v4_lstm_in_if.onnx"


def real_feed(name: str) -> dict[str, np.ndarray]:
    """Inputs a real model accepts: silero v4 runs only on 512-sample chunks at 16 kHz with [2, 1, 64]
    states; the others take random inputs of their declared shapes (dynamic dimensions 9)."""
    if name != SILERO_V4:
        return capture(REALMODELS / name)[1]
    rng = np.random.default_rng(1)
    return {
        "input": rng.uniform(-1, 1, (1, 512)).astype(np.float32),
        "sr": np.array(16000, np.int64),
        "h": rng.uniform(-1, 1, (2, 1, 64)).astype(np.float32),
        "c": rng.uniform(-1, 1, (2, 1, 64)).astype(np.float32),
    }


def capture(path) -> tuple[dict, dict]:
    """Run the whole model on random inputs; return {tensor name: value} of every recurrent node's
    inputs and outputs, and the model's feed."""
    model = onnx.load(str(path))
    wanted = []
    for node in model.graph.node:
        if node.op_type in ("GRU", "RNN", "LSTM"):
            wanted += [n for i, n in enumerate(node.input) if n and i in (0, 4, 5, 6)] + [n for n in node.output if n]
    existing = {o.name for o in model.graph.output}
    for name in dict.fromkeys(wanted):
        if name not in existing:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) else 9 for d in inp.shape]
        feed[inp.name] = rng.standard_normal(shape).astype(np.float32)
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    return values, feed


@pytest.mark.parametrize("name", GRU_RNN_MODELS + LSTM_MODELS)
def test_every_node_matches_onnxruntime(name):
    path = REALMODELS / name
    model = gp.load(path)
    values, _ = capture(path)
    assert model.layers
    for layer in model.layers:
        itf = layer.interface
        fed = ("x", *layer.fed_roles())  # an input the layer holds as a constant is its own, compared here too
        results = run_layer(
            layer, *(values.get(getattr(itf, role) or "") if role in fed else None for role in INPUT_ROLES)
        )
        for role, ours in zip(OUTPUT_ROLES, results):
            ref_name = getattr(itf, role)
            if ref_name:
                np.testing.assert_allclose(
                    ours, values[ref_name], atol=1e-5, rtol=1e-4, err_msg=f"{name} {layer.name} {role}"
                )


def test_node_counts():
    counts = {name: len(gp.load(REALMODELS / name).layers) for name in GRU_RNN_MODELS}
    assert counts["gtcrn_stream_simple.onnx"] == 14
    assert counts["ulunas_stream_simple.onnx"] == 28
    assert counts["dfn3_erb_dec.onnx"] == 2 and counts["dfn3_df_dec.onnx"] == 2 and counts["dfn3_enc.onnx"] == 1
    assert all(counts[n] == 1 for n in counts if n.startswith("burn_"))
    lstm = {name: [lay.cell.value for lay in gp.load(REALMODELS / name).layers] for name in LSTM_MODELS + [SILERO_V4]}
    assert {name: len(cells) for name, cells in lstm.items()} == {
        "dpcrn_online_simple_lstm.onnx": 4,
        "dtln_model_1_lstm.onnx": 2,
        "silero_vad_openvino_16k_lstm.onnx": 1,
        SILERO_V4: 8,
    }
    assert {cell for cells in lstm.values() for cell in cells} == {"lstm"}


@pytest.mark.parametrize("name", LSTM_MODELS + [SILERO_V4])
def test_lstm_model_converts_whole_and_matches_onnxruntime(name, tmp_path):
    """ONNX -> ONNX keeps the whole model; onnxruntime gives the same outputs on a feed the model
    accepts (silero v4 needs a 512-sample chunk at 16 kHz and [2, 1, 64] states)."""
    out = tmp_path / name
    feed = real_feed(name)
    if name == SILERO_V4:  # on random chunks of 7 samples its own Pad fails: the sizes its graph implies are drawn
        drawn = gp.convert(REALMODELS / name, out, to="onnx")
        assert drawn.verification.passed and not drawn.verification.incomplete
        assert any("the source fails at 7" in note for note in drawn.verification.notes), drawn.verification.notes
    shapes = {"input": feed["input"].shape} if name == SILERO_V4 else None
    result = gp.convert(REALMODELS / name, out, to="onnx", input_shapes=shapes)
    assert result.whole and result.verification.passed
    if name == SILERO_V4:
        assert "sr = 16000" in result.verification.inputs_used  # drawn from the model's own comparison
    expected = ort.InferenceSession(str(REALMODELS / name)).run(None, feed)
    actual = ort.InferenceSession(str(out)).run(None, feed)
    for a, b in zip(actual, expected):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_weights_from_constant_nodes_match_onnx_reference():
    # dfn3_enc's GRU weights are Constant nodes; compare with onnx's own evaluation of them.
    from onnx.reference import ReferenceEvaluator

    path = REALMODELS / "dfn3_enc.onnx"
    proto = onnx.load(str(path))
    (layer,) = gp.load(path).layers
    node = next(n for n in proto.graph.node if n.op_type == "GRU")
    producers = {o: n for n in proto.graph.node for o in n.output}
    w_node = producers[node.input[1]]
    assert w_node.op_type == "Constant"
    (w,) = ReferenceEvaluator(
        onnx.helper.make_model(
            onnx.helper.make_graph([w_node], "w", [], [onnx.ValueInfoProto(name=node.input[1])]),
            opset_imports=proto.opset_import,
        )
    ).run(None, {})
    np.testing.assert_array_equal(np.stack([d.W for d in layer.directions]), w)


@pytest.mark.parametrize(
    "name",
    [
        "gtcrn_stream_simple.onnx",
        "dfn3_erb_dec.onnx",
        "burn_gru_bidirectional.onnx",
        "burn_rnn_with_initial_state.onnx",
    ],
)
def test_real_model_converts_and_verifies(name, tmp_path):
    """Whole models stay whole (compared end to end); the layers alone on request (compared layer by layer)."""
    source = gp.load(REALMODELS / name)
    result = gp.convert(REALMODELS / name, tmp_path / "whole.onnx", to="onnx")
    assert result.verification.passed, result.verification.to_text()
    assert result.whole == bool(source.other_ops)
    layers = gp.convert(REALMODELS / name, tmp_path / "layers.onnx", to="onnx", layers_only=True)
    assert layers.verification.passed and not layers.whole
    assert len(layers.verification.outputs) >= len(source.layers)

"""onnxruntime's dynamically quantized LSTM (``com.microsoft::DynamicQuantizeLSTM``, written by
``onnxruntime.quantization.quantize_dynamic``) read with its integers kept, written back by ONNX and as a float
LSTM elsewhere only with --dequantize (docs/conventions.md §9).

Oracles: onnxruntime running the quantized node, and the float ``nn.LSTM`` the fixtures were quantized
from (``torch:`` outputs in fixtures/producers/ort_quantized). The dequantized weights are checked
against the stored integers with an independent transcription of ``(Wq - zero_point) * scale``; every
target's artifact is verified against onnxruntime; misreadings of the operator fail verification.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import artifact_name
from onnx import TensorProto, helper, numpy_helper

import gatepack.converters as gp
from gatepack.converters import registry
from gatepack.converters.formats import onnx as onnx_format
from gatepack.converters.model import Model, as_layers_only
from gatepack.converters.samples import DYNAMIC_INT8, TOLERANCES
from gatepack.converters.verification import verify_models

QUANTIZED = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "ort_quantized"
MANIFEST = json.loads((QUANTIZED / "manifest.json").read_text())
ARTIFACTS = sorted(MANIFEST)
TARGETS = registry.writers()
ATOL, RTOL = TOLERANCES[DYNAMIC_INT8]
# onnxruntime's own int8 kernel on x86 without VNNI saturates 16-bit sums; the stored truth was made on
# such a CPU. Measured between it and the float layer: 0.21 (docs/conventions.md §9).
RAW_INT8_GAP = 0.25


def _truth(artifact: str) -> dict[str, np.ndarray]:
    return dict(np.load(QUANTIZED / artifact.replace(".onnx", ".truth.npz")))


def _quantized_node(path: Path) -> tuple[onnx.NodeProto, dict[str, np.ndarray]]:
    proto = onnx.load(str(path))
    (node,) = [n for n in proto.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    return node, {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _session_outputs(source, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, {k: feed[k] for k in wanted})))


def test_the_manifest_lists_every_quantized_artifact_with_its_truth():
    assert {p.name for p in QUANTIZED.glob("*.onnx")} == set(MANIFEST)
    for artifact, entry in MANIFEST.items():
        assert entry["producer"].endswith("quantize_dynamic") and "onnxruntime" in entry["versions"]
        truth = _truth(artifact)
        assert {"x", "y", "h", "c", "torch:y", "torch:h", "torch:c"} <= set(truth)
        node, inits = _quantized_node(QUANTIZED / artifact)
        # quantize_dynamic writes int8 LSTM weights whatever weight_type asks (QUInt8 included)
        assert inits[node.input[1]].dtype == np.int8 and inits[node.input[2]].dtype == np.int8


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_the_dequantized_weights_are_the_stored_integers_times_their_scale(artifact):
    """W [D, 4H, I] and R [D, 4H, H] in ONNX's layout (the operator stores [D, I, 4H] and [D, H, 4H]),
    ``(q - zero_point) * scale`` per direction or per output column; B as stored."""
    node, inits = _quantized_node(QUANTIZED / artifact)
    (layer,) = gp.load(QUANTIZED / artifact).layers
    for k, role in ((1, "W"), (2, "R")):
        q, scale, zero = (inits[node.input[j]] for j in (k, 8 if role == "W" else 10, 9 if role == "W" else 11))
        per_column = scale.ndim == 2
        assert per_column == MANIFEST[artifact]["config"]["per_channel"]
        for d, params in enumerate(layer.directions):
            s = scale[d][:, None] if per_column else scale[d]
            z = zero[d][:, None] if per_column else zero[d]
            expected = ((q[d].T.astype(np.float64) - z) * s).astype(np.float32)  # [4H, K]
            np.testing.assert_array_equal(getattr(params, role), expected)
    bias = inits[node.input[3]]
    for d, params in enumerate(layer.directions):
        np.testing.assert_array_equal(np.concatenate([params.Wb, params.Rb]), bias[d])


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_the_float_layer_gives_the_torch_modules_outputs(artifact, tmp_path):
    """ONNX -> ONNX with --dequantize (the quantized node replaced in place by an LSTM node): within the
    dynamic-quantization tolerance of the float nn.LSTM the model was quantized from, and within the measured gap
    of onnxruntime's own int8 results (the truth)."""
    out = tmp_path / "float.onnx"
    result = gp.convert(QUANTIZED / artifact, out, to="onnx", dequantize=True)
    assert result.passed and result.whole
    truth = _truth(artifact)
    got = _session_outputs(str(out), truth)
    for name in ("y", "h", "c"):
        np.testing.assert_allclose(got[name], truth[f"torch:{name}"], atol=ATOL, rtol=RTOL)
        assert np.abs(got[name] - truth[name]).max() < RAW_INT8_GAP


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_onnx_in_place_replaces_the_quantized_node_by_a_float_lstm(artifact, tmp_path):
    out = tmp_path / "float.onnx"
    gp.convert(QUANTIZED / artifact, out, to="onnx", dequantize=True)
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto, full_check=True)
    source = onnx.load(str(QUANTIZED / artifact))
    node, inits = _quantized_node(QUANTIZED / artifact)
    (lstm,) = [n for n in proto.graph.node if n.op_type == "LSTM"]
    assert not [n for n in proto.graph.node if n.domain]
    assert list(lstm.output) == list(node.output) and lstm.input[0] == node.input[0]
    assert [i.name for i in proto.graph.input] == [i.name for i in source.graph.input]
    assert [o.name for o in proto.graph.output] == [o.name for o in source.graph.output]
    kept = {t.name for t in proto.graph.initializer}
    assert not kept & {node.input[k] for k in (8, 9, 10, 11)}  # scales and zero points went with the node
    weights = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    assert weights[lstm.input[1]].dtype == np.float32 and weights[lstm.input[1]].shape[1:] == (16, 3)
    # every other node of the source is still there, but those computing the zero initial states from X's
    # shape, which the float LSTM no longer reads (no initial state is zeros)
    producers = {o: n for n in source.graph.node for o in n.output}
    states, pending = set(), [name for name in node.input[5:7] if name]
    while pending:
        name = pending.pop()
        if name in producers and name not in states:
            states.add(name)
            pending += [i for i in producers[name].input if i]
    others = [n for n in source.graph.node if n.op_type != "DynamicQuantizeLSTM"]
    kept_nodes = [n for n in others if not set(n.output) <= states]
    assert sorted(n.op_type for n in proto.graph.node if n.op_type != "LSTM") == sorted(n.op_type for n in kept_nodes)


@pytest.mark.parametrize("artifact", ARTIFACTS)
@pytest.mark.parametrize("layers_only", [False, True])
def test_onnx_keeps_the_dynamically_quantized_node_and_its_integers(artifact, layers_only, tmp_path):
    """ONNX -> ONNX by default writes DynamicQuantizeLSTM back (whole, or the layer alone), the stored integers,
    scales and zero points unchanged (compared with the source's initializers), ``repacked``; onnxruntime gives
    the source's outputs exactly."""
    out = tmp_path / "q.onnx"
    result = gp.convert(QUANTIZED / artifact, out, to="onnx", layers_only=layers_only)
    assert result.passed, result.to_text()
    statuses = {f.feature: f.status.value for fs in result.findings.values() for f in fs}
    assert statuses["quantization"] == "repacked"
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto, full_check=True)
    (written,) = [n for n in proto.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    assert not [n for n in proto.graph.node if n.op_type == "LSTM"]
    node, inits = _quantized_node(QUANTIZED / artifact)
    got = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for k in (1, 2, 8, 9, 10, 11):
        expected = inits[node.input[k]]
        assert got[written.input[k]].dtype == expected.dtype
        np.testing.assert_array_equal(got[written.input[k]], expected)
    truth = _truth(artifact)
    source = _session_outputs(str(QUANTIZED / artifact), truth)
    for name, value in _session_outputs(str(out), truth).items():
        np.testing.assert_array_equal(value, source[name] if name in source else value)


@pytest.mark.parametrize("artifact", ARTIFACTS[:3])
@pytest.mark.parametrize("target", [t for t in TARGETS if t != "onnx"])
def test_other_targets_write_floats_only_when_asked(artifact, target, tmp_path):
    """Refused without --dequantize, even with --allow-lossy (naming the quantization and the option), converted
    and verified against onnxruntime running the quantized node with it; the layers-only targets take the layer
    alone."""
    out = tmp_path / artifact_name(target, "out")
    layers_only = target not in ("onnx", "openvino")
    with pytest.raises(gp.RefusedError, match="lossy: quantization: W int8") as err:
        gp.convert(QUANTIZED / artifact, out, to=target, layers_only=layers_only, allow_lossy=True)
    assert "--dequantize" in err.value.hint and not out.exists()
    result = gp.convert(QUANTIZED / artifact, out, to=target, layers_only=layers_only, dequantize=True)
    assert result.passed, result.to_text()
    statuses = {f.feature: f.status.value for fs in result.findings.values() for f in fs}
    assert statuses["quantization"] == "lossy"  # X and h quantized at run time by the source, not by the float layer
    exact = [o for o in result.verification.outputs if o.output.endswith("vs the dequantized source")]
    measured = [o for o in result.verification.outputs if o.output.endswith("vs the quantized source")]
    largest = max(o.max_abs_error for o in measured)
    assert f"lossy: quantization (measured: max {largest:.3g} vs the quantized source)" in result.summary_line()
    assert len(exact) == len(measured) == len(result.verification.outputs) // 2 > 0
    assert max(o.max_abs_error for o in exact) < 1e-5 and all(o.atol <= 1e-5 for o in exact)
    assert max(o.max_abs_error for o in measured) < ATOL  # the source's own quantization noise, measured


def test_the_report_and_inspect_say_why_it_is_lossy():
    path = QUANTIZED / "ort_lstm_bidirectional_qint8_per_channel.onnx"
    report = gp.report(path, to=TARGETS).render("json")
    data = json.loads(report) if isinstance(report, str) else report
    text = json.dumps(data)
    assert "X and h quantized to uint8 at run time" in text and "int8 per channel, symmetric" in text
    run = subprocess.run(
        [sys.executable, "-m", "gatepack", "convert", str(path), "--to", "openvino", "-o", "/nonexistent/x.xml", "-q"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 4 and run.stderr.count("\n") == 1, run.stderr
    assert "lossy: quantization" in run.stderr and "--dequantize" in run.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "gatepack", "inspect", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert "quantized: W int8 per channel, symmetric; R int8 per channel, symmetric; X and h quantized" in shown


# ------------------------------------------------------------------------------ hand-built nodes


def _node_model(
    path: Path, *, dtype=np.uint8, per_column: bool = False, zero: int = 128, seed: int = 0, **features
) -> None:
    """A DynamicQuantizeLSTM model built with plain onnx.helper: I=5, H=3, random 8-bit weights;
    ``features``: direction, clip, input_forget, peepholes, sequence_lens, initial states."""
    rng = np.random.default_rng(seed)
    d = 2 if features.get("direction") == "bidirectional" else 1
    i, h = 5, 3
    low, high = (0, 256) if dtype == np.uint8 else (-127, 128)
    shape = (d, 4 * h) if per_column else (d,)
    inits = {
        "Wq": rng.integers(low, high, (d, i, 4 * h)).astype(dtype),
        "Rq": rng.integers(low, high, (d, h, 4 * h)).astype(dtype),
        "B": rng.uniform(-0.5, 0.5, (d, 8 * h)).astype(np.float32),
        "ws": rng.uniform(0.002, 0.006, shape).astype(np.float32),
        "wz": np.full(shape, zero, dtype),
        "rs": rng.uniform(0.002, 0.006, shape).astype(np.float32),
        "rz": np.full(shape, zero, dtype),
    }
    names = ["X", "Wq", "Rq", "B", "", "", "", "", "ws", "wz", "rs", "rz"]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 2, i])]
    if features.pop("sequence_lens", False):
        names[4] = "lens"
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [2]))
    if features.pop("initial_states", False):
        names[5:7] = ["h0", "c0"]
        graph_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, 2, h]) for n in ("h0", "c0")]
    if features.pop("peepholes", False):
        names[7] = "P"
        inits["P"] = rng.uniform(-0.5, 0.5, (d, 3 * h)).astype(np.float32)
    node = helper.make_node(
        "DynamicQuantizeLSTM", names, ["Y", "Y_h", "Y_c"], domain="com.microsoft", hidden_size=h, **features
    )
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")]
    graph = helper.make_graph(
        [node], "q", graph_inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=8), str(path))


HAND_BUILT = {
    "uint8 per direction, zero point 128": {},
    "uint8 per column, reverse, clip": {"per_column": True, "direction": "reverse", "clip": 0.8},
    "uint8 bidirectional, peepholes, lengths, states": {
        "direction": "bidirectional",
        "peepholes": True,
        "sequence_lens": True,
        "initial_states": True,
    },
    "int8 per direction, zero point -3, input_forget": {"dtype": np.int8, "zero": -3, "input_forget": 1},
}


@pytest.mark.parametrize("case", HAND_BUILT)
def test_hand_built_nodes_convert_and_verify_against_onnxruntime(case, tmp_path):
    """The operator's other inputs and attributes (uint8 weights with a zero point, per-column scales,
    reverse, clip, peepholes, sequence_lens, initial states, input_forget) carried into the float layer:
    the float LSTM written to ONNX matches onnxruntime running the node on the same inputs."""
    source = tmp_path / "q.onnx"
    _node_model(source, **HAND_BUILT[case])
    out = tmp_path / "f.onnx"
    assert gp.convert(source, out, to="onnx", dequantize=True).passed
    rng = np.random.default_rng(5)
    feed = {"X": rng.uniform(-1, 1, (4, 2, 5)).astype(np.float32), "lens": np.array([4, 2], np.int32)}
    d = 2 if "bidirectional" in case else 1
    feed |= {n: rng.uniform(-1, 1, (d, 2, 3)).astype(np.float32) for n in ("h0", "c0")}
    expected, got = _session_outputs(str(source), feed), _session_outputs(str(out), feed)
    for name in ("Y", "Y_h", "Y_c"):
        np.testing.assert_allclose(got[name], expected[name], atol=ATOL, rtol=RTOL)


def test_int8_weights_re_encoded_as_uint8_compute_the_same(tmp_path):
    """gatepack runs int8 weights as uint8 ones (q + 128, zero point + 128). Where onnxruntime's int8
    kernel cannot saturate (|q| <= 63: pair sums stay within 16 bits), both give the same results."""
    source = tmp_path / "q.onnx"
    _node_model(source, dtype=np.int8, zero=0, seed=3)
    proto = onnx.load(str(source))
    for tensor in proto.graph.initializer:
        if tensor.name in ("Wq", "Rq"):
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) // 2, tensor.name))
    onnx.save(proto, str(source))
    feed = {"X": np.random.default_rng(1).uniform(-1, 1, (4, 2, 5)).astype(np.float32)}
    raw = _session_outputs(str(source), feed)
    exact = gp.run(source, feed)
    for name in raw:
        np.testing.assert_allclose(exact[name], raw[name], atol=1e-6, rtol=1e-6)


# ----------------------------------------------------------------- verification cannot be fooled


MISREADINGS = ["reshaped, not transposed", "gate blocks i, f, c, o", "one scale per matrix", "W and R scales swapped"]


def _misread(path: Path, layer, how: str):
    """The layer as a plausible wrong reading of the node's stored integers would give it (the right one:
    ``(q[d].T - zero_point) * scale``, per output column here, zero points 0)."""
    node, inits = _quantized_node(path)
    h = layer.hidden_size
    q = {"W": inits[node.input[1]], "R": inits[node.input[2]]}
    scale = {"W": inits[node.input[8]], "R": inits[node.input[10]]}
    if how == "W and R scales swapped":
        scale = {"W": scale["R"], "R": scale["W"]}

    def weight(role: str, d: int) -> np.ndarray:
        stored = q[role][d].astype(np.float32)
        rows = stored.reshape(stored.shape[::-1]) if how == "reshaped, not transposed" else stored.T
        columns = scale[role][d][0] if how == "one scale per matrix" else scale[role][d][:, None]
        value = rows * columns
        if how == "gate blocks i, f, c, o":
            value = np.concatenate([value[k * h : (k + 1) * h] for k in (0, 2, 3, 1)])
        return np.ascontiguousarray(value, np.float32)

    directions = tuple(
        replace(p, W=weight("W", d), R=weight("R", d), Wq=None, Rq=None) for d, p in enumerate(layer.directions)
    )
    return replace(layer, directions=directions, provenance=None)


@pytest.mark.parametrize("how", MISREADINGS)
def test_verification_fails_a_misread_layer(how, tmp_path):
    """At the dynamic-quantization tolerance, verification against onnxruntime running the quantized node
    tells each misreading of the operator from the right reading."""
    path = QUANTIZED / "ort_lstm_bidirectional_qint8_per_channel.onnx"
    source = as_layers_only(gp.load(path))
    (layer,) = source.layers
    out = tmp_path / "wrong.onnx"
    onnx.save(onnx_format.build(Model(None, "onnx", [_misread(path, layer, how)])), str(out))
    result = verify_models(source, gp.load(out))
    assert not result.passed, result.to_text()
    right = tmp_path / "right.onnx"
    onnx.save(onnx_format.build(Model(None, "onnx", [replace(layer, provenance=None)])), str(right))
    assert verify_models(source, gp.load(right)).passed


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"wz": np.array([[128] * 11 + [127]], np.uint8), "ws": np.full((1, 12), 0.004, np.float32)}, "per matrix"),
        ({"Wq": np.zeros((1, 5, 12), np.float32)}, "int8 or uint8"),
        ({"Wq": np.zeros((1, 12, 5), np.uint8)}, "expected [num_directions, input_size, 12]"),
        ({"ws": np.full((2,), 0.004, np.float32)}, "W_scale has shape [2]"),
        ({"rz": np.array([0], np.int8)}, "R_zero_point is int8"),
        ({"ws": np.array([np.inf], np.float32)}, "not finite"),
    ],
)
def test_malformed_quantization_parameters_are_one_line_input_errors(edit, message, tmp_path):
    path = tmp_path / "q.onnx"
    _node_model(path)
    proto = onnx.load(str(path))
    for tensor in proto.graph.initializer:
        if tensor.name in edit:
            tensor.CopyFrom(numpy_helper.from_array(edit[tensor.name], tensor.name))
    onnx.save(proto, str(path))
    with pytest.raises(gp.InputError) as err:
        gp.load(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_parameters_and_foreign_attributes_are_refused(tmp_path):
    path = tmp_path / "q.onnx"
    _node_model(path)
    proto = onnx.load(str(path))
    node = proto.graph.node[0]
    node.attribute.append(helper.make_attribute("layout", 1))
    onnx.save(proto, str(path))
    with pytest.raises(gp.InputError, match="attribute 'layout' is not part of com.microsoft::DynamicQuantizeLSTM"):
        gp.load(path)
    del node.attribute[-1]
    node.input[10] = ""
    onnx.save(proto, str(path))
    with pytest.raises(gp.InputError, match="needs inputs R_scale"):
        gp.load(path)


def test_no_layer_names_the_foreign_operators_not_dynamo(tmp_path):
    """A model of onnxruntime contrib operators and no recurrent node says what it holds (no hint about
    torch's dynamo exporter, whose unrolled RNNs are MatMul chains)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((3, 3), np.int8), "w")
    s = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    nodes = [
        helper.make_node("DynamicQuantizeMatMul", ["x", "w", "s"], ["m"], domain="com.microsoft"),
        helper.make_node("MatMul", ["m", "k"], ["t"]),
        helper.make_node("Tanh", ["t"], ["y"]),
    ]
    k = numpy_helper.from_array(np.ones((3, 3), np.float32), "k")
    graph = helper.make_graph(nodes, "g", [x], [y], [w, s, k])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.load(path)
    assert "com.microsoft::DynamicQuantizeMatMul" in str(err.value) and "dynamo" not in str(err.value)

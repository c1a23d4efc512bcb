"""Whole ONNX models to Core ML (issue 30's acceptance): each real model converts to one ML Program with its own
interface, verified end to end — onnxruntime on the unmodified source against the package read back from disk and
run on gatepack's MIL interpreter — at 1e-4; a model with an operator outside the table is refused naming it; the
report agrees with convert on the ``model`` finding."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import REALMODELS, artifact_name
from onnx import TensorProto, helper

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry

pytest.importorskip("coremltools")

# the real models and the input shapes that fix their symbolic dimensions (the interface stays the model's own)
REAL = {
    "gtcrn_stream.onnx": {},
    "gtcrn_stream_simple.onnx": {},
    "ulunas_stream_simple.onnx": {},
    "dfn3_enc.onnx": {},
    "dfn3_erb_dec.onnx": {},
    "dfn3_df_dec.onnx": {},
    "dpcrn_online_simple_lstm.onnx": {},
    "dtln_model_1_lstm.onnx": {},
    "silero_vad_openvino_16k_lstm.onnx": {},
    # batch and sequence symbolic: nested Ifs on shapes whose branches differ in rank (MIL's cond needs one type)
    "silero_vad_v4_lstm_in_if.onnx": {"input": [1, 512], "h": [2, 1, 64], "c": [2, 1, 64]},
}
TOLERANCE = 1e-4


def _interface(path) -> list[tuple[str, str]]:
    """(name, kind) of a model's inputs and outputs, in order."""
    proto = onnx.load(str(path), load_external_data=False)
    initialized = {t.name for t in proto.graph.initializer}
    return [(i.name, "input") for i in proto.graph.input if i.name not in initialized] + [
        (o.name, "output") for o in proto.graph.output
    ]


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_model_converts_whole_and_verifies(name, tmp_path):
    src, out = REALMODELS / name, tmp_path / "m.mlpackage"
    result = gp.convert(src, out, input_shapes=REAL[name] or None)
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert not result.verification.incomplete
    assert max(o.max_abs_error for o in result.verification.outputs) <= TOLERANCE
    compared = {o.output for o in result.verification.outputs}
    assert compared == {n for n, kind in _interface(src) if kind == "output"}  # every output, by its own name
    taken = [n for n, _, _ in gp.converters.registry.reader("coreml").graph_inputs(out)]
    assert taken == [n for n, kind in _interface(src) if kind == "input"]  # the model's own input names, in order
    read = gp.load(out)
    assert 0 < len(read.layers) <= len(gp.load(src).layers) and read.other_ops  # a branch never taken: not written


def test_symbolic_inputs_that_block_the_translation_are_named_with_the_fix(tmp_path):
    with pytest.raises(gp.RefusedError) as refused:
        gp.convert(REALMODELS / "silero_vad_v4_lstm_in_if.onnx", tmp_path / "m.mlpackage")
    hint = refused.value.hint
    assert "cond" in str(refused.value) and "--input-shape" in hint and "input [?, ?]" in hint, hint
    assert not (tmp_path / "m.mlpackage").exists()


def _model_with(op_type: str, **attributes) -> onnx.ModelProto:
    """X -> GRU -> Y -> op_type -> out: a whole model whose one other operator is ``op_type``."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", TensorProto.FLOAT, [1, 12, 3], rng.standard_normal(36).astype(np.float32))
    r = helper.make_tensor("R", TensorProto.FLOAT, [1, 12, 4], rng.standard_normal(48).astype(np.float32))
    nodes = [
        helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=4, name="gru"),
        helper.make_node(op_type, ["y"], ["out"], name="the_odd_one", **attributes),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [w, r],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_operator_outside_the_table_is_refused_naming_it_and_the_report_agrees(tmp_path):
    src, out = tmp_path / "odd.onnx", tmp_path / "odd.mlpackage"
    onnx.save(_model_with("Hardmax"), src)
    runner = CliRunner()
    refused = runner.invoke(main, ["convert", str(src), "--to", "coreml", "-o", str(out), "--json"])
    assert refused.exit_code == 4, refused.output
    error = json.loads(refused.stdout)
    assert "Hardmax" in error["error"] and "'the_odd_one'" in error["error"] and "--layers-only" in error["hint"]
    assert not out.exists()
    report = json.loads(runner.invoke(main, ["report", str(src), "--to", "coreml", "--json"]).stdout)
    assert report["model"]["coreml"]["status"] == "unsupported" and "Hardmax" in report["model"]["coreml"]["detail"]
    done = runner.invoke(main, ["convert", str(src), "--to", "coreml", "-o", str(out), "--layers-only"])
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize("target", registry.writers())
def test_report_and_convert_agree_on_the_model_finding(target, tmp_path):
    src = REALMODELS / "dtln_model_1_lstm.onnx"
    finding = gp.report(src, target).to_json()["model"][target]
    runner = CliRunner()
    done = runner.invoke(
        main, ["convert", str(src), "--to", target, "-o", str(tmp_path / artifact_name(target)), "--json"]
    )
    if finding["status"] == "unsupported":
        assert done.exit_code == 4 and json.loads(done.stdout)["findings"][0]["detail"] == finding["detail"]
    else:
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["whole_model"]


def test_whole_model_in_fp16_is_lossy_and_verified_at_fp16_tolerance(tmp_path):
    src, out = REALMODELS / "burn_rnn.onnx", tmp_path / "m.mlpackage"
    with pytest.raises(gp.RefusedError, match="allow-lossy|lossy"):
        gp.convert(src, out, compress_to_fp16=True, minimum_deployment_target="iOS17")
    result = gp.convert(src, out, compress_to_fp16=True, minimum_deployment_target="iOS17", allow_lossy=True)
    assert result.whole and result.verification.passed
    worst = max(result.verification.outputs, key=lambda o: o.max_abs_error)
    assert 1e-6 < worst.max_abs_error and worst.atol >= 1e-3  # computed in fp16, compared at fp16's tolerance
    assert any(f.status.value == "lossy" for fs in result.findings.values() for f in fs)


def _recurrent_model(op: str, attributes: dict, *, lens: bool = False) -> onnx.ModelProto:
    """Relu -> op (with ``attributes``, initial state, optional sequence_lens) -> Tanh on Y: a whole model."""
    rng = np.random.default_rng(3)
    gates, h, i, d = (
        {"GRU": 3, "LSTM": 4, "RNN": 1}[op],
        4,
        3,
        2 if attributes.get("direction") == "bidirectional" else 1,
    )
    inits = [
        helper.make_tensor("W", TensorProto.FLOAT, [d, gates * h, i], rng.standard_normal(d * gates * h * i)),
        helper.make_tensor("R", TensorProto.FLOAT, [d, gates * h, h], rng.standard_normal(d * gates * h * h)),
        helper.make_tensor("B", TensorProto.FLOAT, [d, 2 * gates * h], rng.standard_normal(d * 2 * gates * h)),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, i])]
    ins = ["xr", "W", "R", "B", "lens" if lens else "", "h0"]
    inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [d, 2, h]))
    if lens:
        inits.append(helper.make_tensor("lens", TensorProto.INT32, [2], [5, 3]))
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node(op, ins, ["y", "y_h"], hidden_size=h, name="cell", **attributes),
        helper.make_node("Tanh", ["y"], ["out"]),
    ]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "y_h")]
    return helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=[helper.make_opsetid("", 14)]
    )


# each recurrent attribute end to end: onnx2coreml maps LSTM's clip (gate pre-activations) to Core ML's cell-state clip
@pytest.mark.parametrize(
    "op, attributes, lens",
    [
        ("LSTM", {"clip": 0.5}, False),
        ("GRU", {"clip": 0.7, "linear_before_reset": 1}, False),
        ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}, False),
        ("GRU", {"direction": "bidirectional", "activations": ["HardSigmoid", "Tanh"] * 2}, False),
        ("LSTM", {"direction": "reverse", "input_forget": 1}, True),
    ],
)
def test_recurrent_attributes_end_to_end_in_a_whole_model(tmp_path, op, attributes, lens):
    src = tmp_path / "m.onnx"
    onnx.save(_recurrent_model(op, attributes, lens=lens), src)
    result = gp.convert(src, tmp_path / "m.mlpackage")
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert max(o.max_abs_error for o in result.verification.outputs) <= TOLERANCE


def _masked_encoder() -> onnx.ModelProto:
    """x [S, N, I] times Cast(mask [S, N] bool) -> GRU -> y, and a bool output Greater(y_h, 0): an encoder with an
    attention-style bool mask (issue 41, item 3)."""
    rng = np.random.default_rng(5)
    s, n, i, h = 5, 2, 3, 4
    inits = [
        helper.make_tensor("W", TensorProto.FLOAT, [1, 3 * h, i], rng.standard_normal(3 * h * i)),
        helper.make_tensor("R", TensorProto.FLOAT, [1, 3 * h, h], rng.standard_normal(3 * h * h)),
        helper.make_tensor("B", TensorProto.FLOAT, [1, 6 * h], rng.standard_normal(6 * h)),
        helper.make_tensor("axes", TensorProto.INT64, [1], [2]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    nodes = [
        helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "axes"], ["mask_3d"]),
        helper.make_node("Mul", ["x", "mask_3d"], ["x_masked"]),
        helper.make_node("GRU", ["x_masked", "W", "R", "B"], ["y", "y_h"], hidden_size=h, name="gru"),
        helper.make_node("Greater", ["y_h", "zero"], ["active"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [s, n, i]),
        helper.make_tensor_value_info("mask", TensorProto.BOOL, [s, n]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [s, 1, n, h]),
        helper.make_tensor_value_info("active", TensorProto.BOOL, [1, n, h]),
    ]
    graph = helper.make_graph(nodes, "encoder", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_a_bool_mask_input_and_a_bool_output_are_carried_as_int32_and_said_so(tmp_path):
    src, out = tmp_path / "enc.onnx", tmp_path / "enc.mlpackage"
    onnx.save(_masked_encoder(), src)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (5, 2, 3)).astype(np.float32)
    mask = np.array([[1, 1], [1, 1], [1, 0], [0, 1], [1, 0]], bool)  # both values, in both sequences
    result = gp.convert(src, out, inputs={"x": x, "mask": mask})
    assert result.whole and result.verification.passed, result.verification.to_text()
    model = next(f for fs in result.findings.values() for f in fs if f.feature == "model")
    assert model.status.value == "repacked", model.detail
    assert "input 'mask': bool -> int32" in model.detail and "output 'active': bool -> int32" in model.detail
    assert gp.report(src, "coreml").to_json()["model"]["coreml"]["detail"] == model.detail
    coreml = registry.reader("coreml")
    assert [(n, str(d)) for n, d, _ in coreml.graph_inputs(out)] == [("x", "float32"), ("mask", "int32")]
    assert dict((n, str(d)) for n, d, _ in coreml.graph_outputs(out))["active"] == "int32"
    # the package as written, fed int32 0/1 as Core ML takes it, against onnxruntime on the source
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for fed in (mask, ~mask, np.ones_like(mask)):
        y, active = session.run(["y", "active"], {"x": x, "mask": fed})
        got = coreml.run_numpy(out, {"x": x, "mask": fed.astype(np.int32)})
        np.testing.assert_allclose(got["y"], y, atol=TOLERANCE)
        assert got["active"].dtype == np.int32 and np.array_equal(got["active"], active.astype(np.int32))
    masked_out = session.run(["y"], {"x": x, "mask": mask})[0]
    assert not np.allclose(masked_out, session.run(["y"], {"x": x, "mask": ~mask})[0])  # the mask matters


PRODUCERS = REALMODELS.parent / "producers"


@pytest.mark.parametrize("stem", ["gru_stack_initial_states", "gru_stack_initial_states_reset_before"])
def test_a_keras2_gru_stack_with_initial_states_converts_whole_to_kerass_outputs(stem, tmp_path):
    """Issue 41, item 4: Keras 2 GRU(x, initial_state=h0a) -> GRU(., initial_state=h0b) through tf2onnx, to Core ML
    and to ONNX for DirectML; the package, read back and run on gatepack's MIL interpreter, gives Keras's outputs.
    With reset_after=False and a fixed batch both layers are Loops, the second reading the first's output, whose
    length no shape tells: its condition does (bound 5 from a counter at 0). Before, only the first was lifted and
    the Core ML translation crashed (StopIteration) on the second, which a rewritten model's reading lifted."""
    src = PRODUCERS / f"tf2onnx_keras2_{stem}.onnx"
    assert len(gp.load(src).layers) == 2
    truth = dict(np.load(src.with_suffix(".truth.npz")))
    feed = {name: truth[name] for name in ("x", "h0a", "h0b")}
    out = tmp_path / "stack.mlpackage"
    result = gp.convert(src, out, inputs=feed)
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert len(gp.load(out).layers) == 2
    got = registry.reader("coreml").run_numpy(out, feed)
    np.testing.assert_allclose(got["second"], truth["second"], atol=1e-5, rtol=1e-4)
    done = gp.convert(src, tmp_path / "stack.onnx", to="onnx", runtime="directml", inputs=feed)
    assert done.whole and done.verification.passed, done.verification.to_text()


def test_a_loop_only_the_rewritten_model_lifts_is_refused_by_name_never_a_crash(tmp_path, monkeypatch):
    """When the source's reading leaves a Loop that the reading of the model rewritten in place lifts, the Core ML
    translation keeps the source's layers: the Loop is refused by name (exit 4), as the report says."""
    import gatepack.converters.formats.onnx.lifting as onnx_lifting

    monkeypatch.setattr(onnx_lifting.Finder, "_steps_by_condition", lambda *_: None)  # as before
    src = PRODUCERS / "tf2onnx_keras2_gru_stack_initial_states_reset_before.onnx"
    out = tmp_path / "stack.mlpackage"
    refused = CliRunner().invoke(main, ["convert", str(src), "--to", "coreml", "-o", str(out), "--json"])
    assert refused.exit_code == 4, refused.output
    error = json.loads(refused.stdout)["error"]
    assert "Loop" in error and "'model_1/second/while_loop'" in error, error
    assert not out.exists()


def _vector_matmul_model() -> onnx.ModelProto:
    """x -> GRU -> Y_h [1, N, H] -> MatMul(Y_h, v [H]) -> out [1, N]: numpy's matmul by a vector."""
    rng = np.random.default_rng(8)
    w = helper.make_tensor("W", TensorProto.FLOAT, [1, 12, 3], rng.standard_normal(36))
    r = helper.make_tensor("R", TensorProto.FLOAT, [1, 12, 4], rng.standard_normal(48))
    v = helper.make_tensor("v", TensorProto.FLOAT, [4], rng.standard_normal(4))
    nodes = [
        helper.make_node("GRU", ["x", "W", "R"], ["y", "y_h"], hidden_size=4, name="gru"),
        helper.make_node("MatMul", ["y_h", "v"], ["out"], name="score"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2])],
        [w, r, v],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_matmul_by_a_vector_is_translated_as_numpy_computes_it(tmp_path):
    """MIL's matmul takes B of rank >= 2 (coremltools' builder failed with an IndexError on a vector B)."""
    src = tmp_path / "vec.onnx"
    onnx.save(_vector_matmul_model(), src)
    result = gp.convert(src, tmp_path / "vec.mlpackage")
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert max(o.max_abs_error for o in result.verification.outputs) <= TOLERANCE


def _inside_the_builder(monkeypatch) -> str:
    """The Tanh entry fails inside coremltools' builder."""
    import gatepack.converters.formats.coreml.onnx_ops  # noqa: F401 - Core ML's column of the table
    from gatepack.converters.operators.table import OPERATORS, OnnxOp

    def fails_inside_the_builder(t, node):
        raise IndexError("tuple index out of range")

    monkeypatch.setitem(OPERATORS["Tanh"], "coreml", OnnxOp(fails_inside_the_builder))
    return "tuple index"


def _around_the_entry(monkeypatch) -> str:
    """A failure around an entry rather than inside it (coremltools raising as its concat does on mismatched
    dimensions)."""
    from gatepack.converters.operators import translation

    def fails(t, node):
        raise ValueError('Dimension mismatch in concat ("c"): shapes (1,) vs. (2,)')

    monkeypatch.setattr(translation, "entry", fails)
    return "Dimension mismatch"


@pytest.mark.parametrize("breaking", [_inside_the_builder, _around_the_entry])
def test_what_the_mil_builder_still_raises_is_a_refusal_naming_the_node(tmp_path, monkeypatch, breaking):
    """An operator whose translation fails inside coremltools' builder or around the entry: exit 4 naming the node
    and its inputs, in the report as in convert; never the library's own text, never exit 1."""
    library_text = breaking(monkeypatch)
    src, out = tmp_path / "odd.onnx", tmp_path / "odd.mlpackage"
    onnx.save(_model_with("Tanh"), src)
    refused = CliRunner().invoke(main, ["convert", str(src), "--to", "coreml", "-o", str(out), "--json"])
    assert refused.exit_code == 4, refused.output
    error = json.loads(refused.stdout)["error"]
    assert "'the_odd_one'" in error and "'y' [5, 1, 2, 4] fp32" in error, error
    assert library_text not in error
    assert not out.exists()

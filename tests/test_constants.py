"""Optional inputs a source holds as constants (initial_h, initial_c, sequence_lens as an initializer, a
Constant node or a folded cone) stay constants on every target: the artifact takes X alone, and running it
on X reproduces onnxruntime running the unmodified source. Verification never feeds such an input, and it
fails a target that asks for one the source holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import artifact_name, fixes_sizes
from onnx import TensorProto, helper, numpy_helper

import gatepack as gp
from gatepack.converters import engine_for, registry

S, N, I, H = 5, 2, 3, 4
KINDS = ("initializer", "constant_node", "folded_cone")


def _source(tmp_path, cell: str, kind: str, with_lens: bool = False) -> tuple[str, dict[str, np.ndarray]]:
    """A one-node model whose initial state(s) (and lengths) are constants of ``kind``; X is its only input."""
    rng = np.random.default_rng(7)
    gates = {"GRU": 3, "LSTM": 4}[cell]
    weights = {
        "W": rng.uniform(-1, 1, (1, gates * H, I)).astype(np.float32),
        "R": rng.uniform(-1, 1, (1, gates * H, H)).astype(np.float32),
        "B": rng.uniform(-1, 1, (1, 2 * gates * H)).astype(np.float32),
    }
    held = {"h0": rng.uniform(-1, 1, (1, N, H)).astype(np.float32)}
    if cell == "LSTM":
        held["c0"] = rng.uniform(-1, 1, (1, N, H)).astype(np.float32)
    if with_lens:
        held["lens"] = np.array([S, 3], np.int32)
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    nodes = []
    for name, value in held.items():
        if kind == "initializer":
            inits.append(numpy_helper.from_array(value, name))
        elif kind == "constant_node":
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value)))
        else:  # a cone: two halves concatenated along the batch axis (the lengths: one constant node)
            if value.ndim == 3:
                halves = [value[:, :1], value[:, 1:]]
                for k, half in enumerate(halves):
                    nodes.append(helper.make_node("Constant", [], [f"{name}_{k}"], value=numpy_helper.from_array(half)))
                nodes.append(helper.make_node("Concat", [f"{name}_0", f"{name}_1"], [name], axis=1))
            else:
                nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value)))
    inputs = ["X", "W", "R", "B", "lens" if with_lens else "", "h0"] + (["c0"] if cell == "LSTM" else [])
    outputs = ["Y", "Y_h"] + (["Y_c"] if cell == "LSTM" else [])
    attrs = {"linear_before_reset": 1} if cell == "GRU" else {}
    nodes.append(helper.make_node(cell, inputs, outputs, hidden_size=H, **attrs))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [S, N, I])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    path = tmp_path / f"{cell}_{kind}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return str(path), held


def _onnxruntime(path: str, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return {o.name: v for o, v in zip(session.get_outputs(), session.run(None, {"X": x}))}


def _run_artifact(target: str, out: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """The written artifact run on X alone (the source's shapes): on its runtime where one runs here, else on
    gatepack's executor of the format's semantics."""
    return gp.run(out, {"X": x}, engine=engine_for(target))


@pytest.mark.parametrize("target", registry.writers())
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cell", ["GRU", "LSTM"])
def test_constant_state_kept(tmp_path, cell, kind, target):
    if target == "openvino":
        pytest.importorskip("openvino")
    if target == "coreml":
        pytest.importorskip("coremltools")
    src, held = _source(tmp_path, cell, kind)
    model = gp.load(src)
    assert sorted(model.layers[0].constants) == (["initial_c", "initial_h"] if cell == "LSTM" else ["initial_h"])
    assert model.other_ops == []  # a constant that feeds only the layer is part of it
    out = str(tmp_path / artifact_name(target, "o"))
    result = gp.convert(src, out, to=target)
    assert result.passed
    findings = {f.feature: f for f in result.findings[model.layers[0].name]}
    assert "constant" in findings["initial_h"].detail and findings["initial_h"].status.value == "exact"
    x = np.random.default_rng(3).uniform(-1, 1, (S, N, I)).astype(np.float32)
    expected = _onnxruntime(src, x)
    got = _run_artifact(target, out, x)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=2e-5, rtol=1e-4, err_msg=f"{target} {name}")
    if target == "directml":  # the stored state is the source's, not a sample
        import json

        manifest = json.loads((Path(out) / "gatepack.json").read_text())
        tensors = manifest["layers"][0]["tensors"]
        assert tensors["initial_h"]["constant"] is True
        stored = np.load(Path(out) / f"{tensors['initial_h']['resource']}.npy")
        np.testing.assert_array_equal(stored[0], held["h0"])


@pytest.mark.parametrize("target", [t for t in registry.writers() if t != "bnns"])
def test_constant_sequence_lens_kept(tmp_path, target):
    if target == "openvino":
        pytest.importorskip("openvino")
    if target == "coreml":
        pytest.importorskip("coremltools")
    src, _ = _source(tmp_path, "GRU", "initializer", with_lens=True)
    assert "sequence_lens" in gp.load(src).layers[0].constants
    out = str(tmp_path / artifact_name(target, "o"))
    assert gp.convert(src, out, to=target).passed
    x = np.random.default_rng(4).uniform(-1, 1, (S, N, I)).astype(np.float32)
    expected, got = _onnxruntime(src, x), _run_artifact(target, out, x)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=2e-5, rtol=1e-4, err_msg=f"{target} {name}")


def test_constant_sequence_lens_refused_by_bnns(tmp_path):
    src, _ = _source(tmp_path, "GRU", "initializer", with_lens=True)
    with pytest.raises(gp.RefusedError, match="sequence"):
        gp.convert(src, str(tmp_path / "bundle"), to="bnns")


def test_verification_fails_a_target_that_asks_for_a_held_state(tmp_path):
    """The defect every target had: the constant initial state written as an input. Verification must not
    pass it, whatever it would feed."""
    src, held = _source(tmp_path, "GRU", "initializer")
    proto = onnx.load(src)
    h0 = next(t for t in proto.graph.initializer if t.name == "h0")
    proto.graph.initializer.remove(h0)
    proto.graph.input.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, N, H]))
    wrong = str(tmp_path / "wrong.onnx")
    onnx.save(proto, wrong)
    verification = gp.verify(src, wrong)
    assert not verification.passed
    assert any("holds it as a constant" in o.output for o in verification.outputs)


def test_held_state_is_not_an_input_of_the_layer(tmp_path):
    src, _ = _source(tmp_path, "LSTM", "constant_node")
    layer = gp.load(src).layers[0]
    assert layer.fed_roles() == ()
    with pytest.raises(gp.InputError, match="constant of the layer"):
        from gatepack.converters.executor import run_layer

        run_layer(layer, np.zeros((S, N, I), np.float32), None, np.zeros((1, N, H), np.float32))


@pytest.mark.parametrize("target", registry.writers())
def test_a_held_state_is_named_as_no_input_by_any_format(tmp_path, target):
    """One behaviour on every format for a state the layer holds: ``input_names`` leaves it out (the layers-alone
    formats once listed it), ``inspect`` says it is a constant, ``run`` refuses it when given (API and CLI, exit 3,
    one line) and runs on X alone to onnxruntime's outputs of the source."""
    from click.testing import CliRunner

    from gatepack.cli import main

    if target == "openvino":
        pytest.importorskip("openvino")
    if target == "coreml":
        pytest.importorskip("coremltools")
    src, held = _source(tmp_path, "GRU", "initializer")
    out = str(tmp_path / artifact_name(target, "o"))
    assert gp.convert(src, out, to=target).passed
    layer = gp.load(out).layers[0]
    assert list(layer.constants) == ["initial_h"] and layer.fed_roles() == ()
    assert gp.input_names(out) == ["X"]
    text = CliRunner().invoke(main, ["inspect", out]).output
    assert "(a constant of the layer, not an input)" in next(line for line in text.splitlines() if "initial_h" in line)
    x = np.random.default_rng(3).uniform(-1, 1, (S, N, I)).astype(np.float32)
    state = {layer.interface.initial_h: held["h0"]}
    with pytest.raises(gp.InputError, match="initial_h is a constant of the layer, not an input"):
        gp.run(out, {"X": x, **state})
    feed = tmp_path / "feed.npz"
    np.savez(feed, X=x, **state)
    result = CliRunner().invoke(main, ["run", out, "--inputs", str(feed), "-o", str(tmp_path / "y.npz")])
    assert result.exit_code == 3 and len(result.output.strip().splitlines()) == 1, result.output
    assert "not an input" in result.output and not (tmp_path / "y.npz").exists()
    for name, value in _onnxruntime(src, x).items():
        np.testing.assert_allclose(_run_artifact(target, out, x)[name], value, atol=2e-5, rtol=1e-4)


def _state_from_shape(tmp_path, fill: np.ndarray, tag: str) -> str:
    """A GRU whose initial_h is ``fill`` ([1, 1, H], or a scalar) expanded to [1, N, H], N read from X's shape, as
    exporters write a zero state for a dynamic batch, and a learned state repeated along the batch."""
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.uniform(-1, 1, (1, 3 * H, I)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.uniform(-1, 1, (1, 3 * H, H)).astype(np.float32), "R"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([H], np.int64), "hidden"),
        numpy_helper.from_array(np.asarray(fill, np.float32), "fill"),
    ]
    nodes = [
        helper.make_node("Shape", ["X"], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", "one"], ["n"], axis=0),
        helper.make_node("Concat", ["one", "n", "hidden"], ["state_shape"], axis=0),
        helper.make_node("Expand", ["fill", "state_shape"], ["h0"]),
        helper.make_node("GRU", ["X", "W", "R", "", "", "h0"], ["Y", "Y_h"], hidden_size=H),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["S", "N", I])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Y_h")],
        inits,
    )
    path = tmp_path / f"state_{tag}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return str(path)


LEARNED = np.random.default_rng(9).uniform(-1, 1, (1, 1, H)).astype(np.float32)


@pytest.mark.parametrize("target", registry.writers())
@pytest.mark.parametrize("kind", ["zeros", "learned"])
def test_state_repeated_along_the_batch(tmp_path, target, kind):
    """Zeros sized like X are no initial state; a learned state expanded to X's batch is held as one state of
    batch 1, broadcast by the artifact to any batch: it takes X alone and gives onnxruntime's outputs on the
    unmodified source at batch 2 (and 3 where the artifact's shapes are dynamic)."""
    if target == "openvino":
        pytest.importorskip("openvino")
    if target == "coreml":
        pytest.importorskip("coremltools")
    src = _state_from_shape(tmp_path, np.zeros(()) if kind == "zeros" else LEARNED, kind)
    (layer,) = gp.load(src).layers
    assert gp.load(src).other_ops == []
    if kind == "zeros":
        assert layer.interface.initial_h is None and not layer.constants
    else:
        assert layer.fed_roles() == () and np.array_equal(layer.constants["initial_h"], LEARNED)
    out = str(tmp_path / artifact_name(target, "o"))
    sizes = {"seq_length": S, "batch_size": N} if fixes_sizes(target) else {}  # DirectML, LiteRT: static sizes
    assert gp.convert(src, out, to=target, **sizes).passed
    for batch in (N, 3) if not fixes_sizes(target) else (N,):
        x = np.random.default_rng(batch).uniform(-1, 1, (S, batch, I)).astype(np.float32)
        expected, got = _onnxruntime(src, x), _run_artifact(target, out, x)
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, atol=2e-5, rtol=1e-4, err_msg=f"{target} {name} N={batch}")


def test_state_computed_from_x_values_stays_an_input(tmp_path):
    """A state computed from X's values (not its shape) is neither constant nor absent: the layer takes it as an
    input, and a layers-only target is refused until --layers-only says so."""
    src, _ = _source(tmp_path, "GRU", "initializer")
    proto = onnx.load(src)
    proto.graph.initializer.remove(next(t for t in proto.graph.initializer if t.name == "h0"))
    proj = np.random.default_rng(1).uniform(-1, 1, (I, H)).astype(np.float32)
    proto.graph.initializer.extend(
        [numpy_helper.from_array(proj, "proj"), numpy_helper.from_array(np.array([0, 0], np.int64), "first")]
    )
    proto.graph.node.insert(0, helper.make_node("Slice", ["X", "first", "first_end"], ["x0"]))
    proto.graph.initializer.append(numpy_helper.from_array(np.array([1, N], np.int64), "first_end"))
    proto.graph.node.insert(1, helper.make_node("MatMul", ["x0", "proj"], ["h0"]))
    path = str(tmp_path / "from_x.onnx")
    onnx.save(proto, path)
    model = gp.load(path)
    assert model.layers[0].fed_roles() == ("initial_h",) and "MatMul" in model.other_ops
    with pytest.raises(gp.RefusedError, match="other operator"):
        gp.convert(path, str(tmp_path / "dml"), to="directml")


def test_whole_model_integer_inputs_are_drawn_as_the_model_uses_them(tmp_path):
    """Lengths a Keras mask compares positions with are drawn in 1..S (zeros would mask every step and prove
    nothing); token ids are drawn inside their embedding table (random ids outside it fail the source)."""
    from gatepack.converters.verification import sample_graph_inputs

    masked = gp.load(Path(__file__).parent.parent / "fixtures" / "producers" / "tf2onnx_length_mask_gru.onnx")
    feed, words = sample_graph_inputs(masked, np.random.default_rng(0))
    assert feed["lengths"].min() >= 1 and "lengths [2] in 1..7" in words
    rng = np.random.default_rng(3)
    table = rng.uniform(-1, 1, (10, I)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["embedded"], axis=0),
        helper.make_node("GRU", ["embedded", "W", "R"], ["Y", "Y_h"], hidden_size=H),
    ]
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(rng.uniform(-1, 1, (1, 3 * H, I)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.uniform(-1, 1, (1, 3 * H, H)).astype(np.float32), "R"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["S", "N"])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("Y", "Y_h")],
        inits,
    )
    path = tmp_path / "embedded.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    feed, words = sample_graph_inputs(gp.load(path), np.random.default_rng(0))
    assert 0 <= feed["ids"].min() and feed["ids"].max() <= 9 and feed["ids"].max() > 0 and "table of 10 rows" in words
    assert gp.convert(path, tmp_path / "out.onnx").passed

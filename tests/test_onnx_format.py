"""ONNX reading and writing: bit-exact round trips, drop-in interfaces, every way weights are stored."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import FIXTURES as FIXTURES_DIR
from helpers import REALMODELS as REALMODELS_DIR
from helpers import Config, build_model, inputs, matrix, ort_run, to_layout, weights
from onnx import helper, numpy_helper

import gatepack as gp
from gatepack.converters.formats import onnx as onnx_format

ROUND_TRIP = [c for c in matrix(count=60, seed=99) if c.dtype != "float64" and c.layout == 0] + [
    Config(cell="GRU", direction="bidirectional", lbr=1, layout=1, seq_lens="mixed", initial_h=True, seed=5),
    Config(cell="RNN", direction="reverse", layout=1, initial_h=True, seed=6),
]


def assert_same_weights(a, b):
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers):
        assert (la.cell, la.direction, la.hidden_size, la.input_size, la.linear_before_reset, la.clip) == (
            lb.cell,
            lb.direction,
            lb.hidden_size,
            lb.input_size,
            lb.linear_before_reset,
            lb.clip,
        )
        assert la.interface == lb.interface
        for pa, pb in zip(la.directions, lb.directions):
            for field in ("W", "R", "Wb", "Rb"):
                x, y = getattr(pa, field), getattr(pb, field)
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), field
            assert pa.activations == pb.activations


@pytest.mark.parametrize("opset", [14, 7])
@pytest.mark.parametrize("cfg", ROUND_TRIP, ids=[c.label() for c in ROUND_TRIP])
def test_read_write_read_is_bit_exact_and_runs_the_same(cfg, opset, tmp_path):
    src = tmp_path / "src.onnx"
    onnx.save(build_model(cfg), src)
    first = onnx_format.read(src)
    out = tmp_path / "out.onnx"
    onnx_format.write(first, out, opset=opset)
    onnx.checker.check_model(str(out), full_check=True)
    second = onnx_format.read(out)
    assert_same_weights(first, second)
    assert second.meta["opset"] == opset
    # Same outputs on onnxruntime: source (layout-0 equivalent for layout 1) vs written model.
    feed0 = inputs(cfg)
    ref = ort_run(build_model(cfg, layout=0), feed0)
    got = ort_run(out, to_layout(cfg, feed0))
    if cfg.layout:
        got = [got[0].transpose(1, 2, 0, 3), got[1].transpose(1, 0, 2)]
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-6)


def test_written_attributes_are_explicit(tmp_path):
    cfg = Config(cell="GRU", activations=["HardSigmoid", "ScaledTanh"], alphas=[0.3], betas=None)
    src = tmp_path / "src.onnx"
    onnx.save(build_model(cfg), src)
    out = tmp_path / "out.onnx"
    onnx_format.write(onnx_format.read(src), out)
    node = onnx.load(str(out)).graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["activations"] == [b"HardSigmoid", b"ScaledTanh"]
    # alpha stack: HardSigmoid 0.3 (given), ScaledTanh 0 (onnxruntime default); beta: 0.5, 0.
    assert attrs["activation_alpha"] == pytest.approx([0.3, 0.0])
    assert attrs["activation_beta"] == pytest.approx([0.5, 0.0])
    assert attrs["linear_before_reset"] == 0


def test_layout1_is_written_as_transposes_that_onnxruntime_runs_and_read_back_as_layout1(tmp_path):
    cfg = Config(cell="GRU", direction="bidirectional", lbr=1, layout=1, seq_lens="mixed", initial_h=True)
    src = tmp_path / "src.onnx"
    onnx.save(build_model(cfg), src)
    out = tmp_path / "out.onnx"
    onnx_format.write(onnx_format.read(src), out)
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("Transpose") == 4 and ops.count("GRU") == 1
    (layer,) = onnx_format.read(out).layers
    assert layer.interface.layout == 1 and layer.interface.x == "X" and layer.interface.y == "Y"
    # and the attribute encoding keeps layout=1 on the node
    out2 = tmp_path / "attr.onnx"
    onnx_format.write(onnx_format.read(src), out2, layout_encoding="attribute")
    node = onnx.load(str(out2)).graph.node[0]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["layout"] == 1


def _cone_model(tmp_path, external: bool = False):
    """W as Constant -> Slice -> Concat; R as Constant -> Unsqueeze; B behind Cast -> Identity;
    the GRU inside an If branch."""
    cfg = Config(cell="GRU", direction="forward", lbr=1, H=3, I=2, seed=11)
    w = weights(cfg)
    big = np.concatenate([w["W"], np.full((1, 9, 2), 7.0, np.float32)], axis=1)  # sliced away
    nodes = [
        helper.make_node("Constant", [], ["w_big"], value=numpy_helper.from_array(big)),
        helper.make_node("Constant", [], ["starts"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Constant", [], ["ends"], value=numpy_helper.from_array(np.array([9], np.int64))),
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Slice", ["w_big", "starts", "ends", "axes"], ["w_sliced"]),
        helper.make_node("Concat", ["w_sliced"], ["W"], axis=0),
        helper.make_node("Constant", [], ["r2d"], value=numpy_helper.from_array(w["R"][0])),
        helper.make_node("Unsqueeze", ["r2d", "axes0"], ["R"]),
        helper.make_node("Cast", ["b64"], ["b32"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Identity", ["b32"], ["B"]),
    ]
    branch_gru = helper.make_node(
        "GRU", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=3, linear_before_reset=1, name="inner_gru"
    )
    then_graph = helper.make_graph(
        [branch_gru],
        "then",
        [],
        [helper.make_tensor_value_info("Y", 1, None), helper.make_tensor_value_info("Y_h", 1, None)],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"]), helper.make_node("Identity", ["X"], ["Y_h"])],
        "else",
        [],
        [helper.make_tensor_value_info("Y", 1, None), helper.make_tensor_value_info("Y_h", 1, None)],
    )
    nodes.append(
        helper.make_node(
            "If", ["cond"], ["out_y", "out_yh"], then_branch=then_graph, else_branch=else_graph, name="branch"
        )
    )
    inits = [
        numpy_helper.from_array(w["B"].astype(np.float64), "b64"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("X", 1, [4, 2, 2]),
            helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("out_y", 1, None), helper.make_tensor_value_info("out_yh", 1, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)
    path = tmp_path / "cone.onnx"
    if external:
        onnx.save(
            model, str(path), save_as_external_data=True, location="cone.data", size_threshold=64
        )  # B external, the tiny axes tensor inline
    else:
        onnx.save(model, str(path))
    return path, cfg, w


@pytest.mark.parametrize("external", [False, True])
def test_folded_cones_inside_if_subgraph(tmp_path, external):
    path, cfg, w = _cone_model(tmp_path, external)
    assert (tmp_path / "cone.data").is_file() == external
    (layer,) = gp.load(path).layers
    assert layer.name == "branch/then_branch/inner_gru"
    np.testing.assert_array_equal(layer.directions[0].W, w["W"][0])
    np.testing.assert_array_equal(layer.directions[0].R, w["R"][0])
    np.testing.assert_array_equal(layer.directions[0].Wb, w["B"][0, :9].astype(np.float64).astype(np.float32))
    # the layer runs like onnxruntime runs the whole model with the branch taken
    x = np.random.default_rng(0).uniform(-1, 1, (4, 2, 2)).astype(np.float32)
    ref_y, ref_y_h = ort_run(path, {"X": x, "cond": np.array(True)})
    from gatepack.converters.executor import run_layer

    y, y_h = run_layer(layer, x)
    np.testing.assert_allclose(y, ref_y, atol=1e-6)
    np.testing.assert_allclose(y_h, ref_y_h, atol=1e-6)


def test_external_data_model_round_trips(tmp_path):
    cfg = Config(cell="GRU", direction="bidirectional", lbr=1, H=16, I=8)
    src = tmp_path / "ext.onnx"
    onnx.save(build_model(cfg), str(src), save_as_external_data=True, location="ext.weights", size_threshold=0)
    assert (tmp_path / "ext.weights").is_file()
    result = gp.convert(src, tmp_path / "out.onnx", to="onnx")
    assert result.verification.passed
    np.testing.assert_array_equal(gp.load(tmp_path / "out.onnx").layers[0].directions[1].R, weights(cfg)["R"][1])


def test_ambiguous_default_is_reported_and_policy_switches_value(tmp_path):
    cfg = Config(cell="RNN", activations=["ThresholdedRelu"])
    src = tmp_path / "src.onnx"
    onnx.save(build_model(cfg), src)
    model = gp.load(src)
    assert model.layers[0].directions[0].activations[0].alpha == 0.0  # onnxruntime's value
    (note,) = [n for n in model.notes_for(model.layers[0]) if n.feature == "activation defaults"]
    assert note.warning and "1" in note.detail
    onnx_policy = gp.load(src, activation_defaults="onnx")
    assert onnx_policy.layers[0].directions[0].activations[0].alpha == 1.0
    # ScaledTanh has no ONNX default at all: the onnx policy refuses with a clear error
    cfg2 = Config(cell="RNN", activations=["ScaledTanh"])
    onnx.save(build_model(cfg2), tmp_path / "st.onnx")
    with pytest.raises(gp.InputError, match="ScaledTanh has no alpha"):
        gp.load(tmp_path / "st.onnx", activation_defaults="onnx")


def test_opset_1_and_3_nodes_are_read(tmp_path):
    # onnxruntime has no kernel below opset 7; the same node at opset 7 is the oracle.
    from gatepack.converters.executor import run_layer

    for cell, opset in (("GRU", 3), ("GRU", 1), ("RNN", 1)):
        cfg = Config(
            cell=cell,
            direction="bidirectional",
            opset=opset,
            lbr=1 if opset == 3 else 0,
            extra={"output_sequence": 1},
            seq_lens="mixed",
        )
        path = tmp_path / f"{cell}{opset}.onnx"
        onnx.save(build_model(cfg), path)
        model = gp.load(path)
        (layer,) = model.layers
        assert layer.provenance.op_version == opset
        feed = inputs(cfg)
        y, y_h = run_layer(layer, feed["X"], feed["sequence_lens"])
        cfg.extra = {}
        ref_y, ref_y_h = ort_run(build_model(cfg, opset=7), feed)
        np.testing.assert_allclose(y, ref_y, atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(y_h, ref_y_h, atol=1e-5, rtol=1e-4)


def test_products_and_activations_without_a_recurrence_say_what_is_lifted(tmp_path):
    """A dense layer (MatMul, Tanh) is no recurrence: the error names the unrolled forms gatepack lifts (DTLN's model
    2, a single unrolled LSTM step per frame, is lifted: tests/test_unrolled_step.py)."""
    rng = np.random.default_rng(0)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "W"], ["xw"]), onnx.helper.make_node("Tanh", ["xw"], ["y"])],
        "dense",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        [onnx.numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "W")],
    )
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), tmp_path / "d.onnx")
    with pytest.raises(gp.NoRecurrentLayerError, match="no single LSTM/GRU step whose state is a graph input"):
        gp.load(tmp_path / "d.onnx")


def test_lstm_input_forget_of_the_wrong_type_is_refused_and_any_nonzero_value_couples(tmp_path):
    from helpers import ort_reference
    from oracle import assert_close

    from gatepack.converters.executor import run_layer

    bad = build_model(Config(cell="LSTM"))
    bad.graph.node[0].attribute.append(onnx.helper.make_attribute("input_forget", "yes"))
    onnx.save(bad, tmp_path / "bad.onnx")
    with pytest.raises(gp.InputError, match="input_forget.*STRING.*INT"):
        gp.load(tmp_path / "bad.onnx")
    cfg = Config(cell="LSTM", extra={"input_forget": 2})  # onnxruntime couples for any nonzero value
    onnx.save(build_model(cfg), tmp_path / "two.onnx")
    (layer,) = gp.load(tmp_path / "two.onnx").layers
    assert layer.input_forget
    feed = inputs(cfg)
    assert_close(cfg, run_layer(layer, feed["X"]), ort_reference(cfg, feed), 1e-5, 1e-4)


@pytest.mark.parametrize("layout", [0, 1])
def test_an_initial_state_of_the_wrong_size_is_refused_as_onnxruntime_refuses_it(layout, tmp_path):
    """torch's dynamo exporter writes nn.LSTM(proj_size=2) as an LSTM node of hidden_size 2 whose constant
    initial_c is [1, N, 4] (fixtures/producers/README.md): onnxruntime fails at run time; the reader says
    so at once, naming the tensor, its shape and the expected one."""
    cfg = Config(cell="LSTM", initial_h=True, initial_c=True, layout=layout)
    proto = build_model(cfg)
    name = proto.graph.node[0].input[6]
    wrong = np.zeros((cfg.N, 1, cfg.H + 1) if layout else (1, cfg.N, cfg.H + 1), np.float32)
    proto.graph.input.remove(next(i for i in proto.graph.input if i.name == name))
    proto.graph.initializer.append(numpy_helper.from_array(wrong, name))
    onnx.save(proto, tmp_path / "m.onnx")
    if layout == 0:  # onnxruntime runs layout 0 only
        with pytest.raises(Exception, match="initial_c must have shape"):
            ort_run(tmp_path / "m.onnx", to_layout(cfg, inputs(cfg)))
    shape = ", ".join(map(str, wrong.shape))
    with pytest.raises(gp.InputError, match=rf"initial_c '{name}' has shape \[{shape}\], expected"):
        gp.load(tmp_path / "m.onnx")


def test_without_onnxruntime_verification_says_it_used_the_executor(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    result = gp.convert(REALMODELS_DIR / "burn_gru_bidirectional.onnx", tmp_path / "o.onnx", to="onnx")
    assert result.verification.passed
    assert any("onnxruntime is not installed" in note for note in result.verification.notes)
    with pytest.raises(gp.RuntimeFailure, match="onnxruntime is not installed"):
        gp.run(tmp_path / "o.onnx", {"input": np.zeros((5, 2, 4), np.float32)})


@pytest.mark.parametrize("cell", ["GRU", "RNN"])
def test_opset_22_nodes_are_read(cell, tmp_path):
    from gatepack.converters.executor import run_layer

    cfg = Config(
        cell=cell, direction="bidirectional", lbr=1 if cell == "GRU" else 0, opset=22, seq_lens="mixed", initial_h=True
    )
    path = tmp_path / "m22.onnx"
    onnx.save(build_model(cfg), path)
    (layer,) = gp.load(path).layers
    assert layer.provenance.op_version == 22
    feed = inputs(cfg)
    y, y_h = run_layer(layer, feed["X"], feed["sequence_lens"], feed["initial_h"])
    ref_y, ref_y_h = ort_run(build_model(cfg), feed)
    np.testing.assert_allclose(y, ref_y, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(y_h, ref_y_h, atol=1e-5, rtol=1e-4)


def test_canonical_spec_validation_names_layer_and_value():
    from dataclasses import replace

    from gatepack.schemas.layer import SpecError

    (layer,) = gp.load(FIXTURES_DIR / "gru_lbr0.onnx").layers
    with pytest.raises(SpecError, match=r"layer 'rec': direction 0 W has shape \[12, 2\], expected \[12, 3\]"):
        replace(layer, directions=(replace(layer.directions[0], W=layer.directions[0].W[:, :2]),))
    with pytest.raises(SpecError, match="layer 'rec': clip must be > 0, got 0.0"):
        replace(layer, clip=0.0)
    with pytest.raises(SpecError, match="layer 'rec': direction bidirectional needs 2 weight set"):
        replace(layer, direction=type(layer.direction)("bidirectional"))
    with pytest.raises(SpecError, match="layer 'rec': direction 0 R is float64, the layer is float32"):
        replace(layer, directions=(replace(layer.directions[0], R=layer.directions[0].R.astype("float64")),))


def test_forward_rnn_with_two_activation_names_uses_the_first_like_onnxruntime(tmp_path):
    from gatepack.converters.executor import run_layer

    cfg = Config(cell="RNN", direction="forward", activations=["Relu", "Tanh"], seq_lens="mixed")
    path = tmp_path / "two.onnx"
    onnx.save(build_model(cfg), path)
    model = gp.load(path)
    (layer,) = model.layers
    assert [a.name for a in layer.directions[0].activations] == ["Relu"]
    assert any(n.warning == "second activation ignored" for n in model.notes_for(layer))
    feed = inputs(cfg)
    y, y_h = run_layer(layer, feed["X"], feed["sequence_lens"])
    ref_y, ref_y_h = ort_run(build_model(cfg), feed)
    np.testing.assert_allclose(y, ref_y, atol=1e-6)
    np.testing.assert_allclose(y_h, ref_y_h, atol=1e-6)

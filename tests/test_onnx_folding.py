"""``onnx.folding.fold``: the folded model against the original on onnxruntime (the oracle), on the real models
and on small hand-built graphs (an If on a constant condition, one on an input, a large constant kept as its node,
bad shapes)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import REALMODELS
from onnx import TensorProto, helper, numpy_helper

from gatepack.converters.errors import UsageError
from gatepack.converters.formats.onnx.folding import LARGE_ELEMENTS, fold, subgraphs_of

SILERO_V4_SHAPES = {"input": [1, 512], "h": [2, 1, 64], "c": [2, 1, 64]}
# model, the shapes given, the nodes expected to fold away entirely (their counts go to 0)
REAL_CASES = [
    ("gtcrn_stream.onnx", None, ("Shape", "ConstantOfShape", "Constant")),
    ("dfn3_enc.onnx", {"feat_erb": [1, 1, 5, 32], "feat_spec": [1, 2, 5, 96]}, ("Shape", "Gather", "ConstantOfShape")),
    ("silero_vad_v4_lstm_in_if.onnx", SILERO_V4_SHAPES, ("Shape", "Gather", "ConstantOfShape")),
    ("silero_vad_openvino_16k_lstm.onnx", None, ("Shape", "ConstantOfShape", "Constant")),
    ("dpcrn_online_simple_lstm.onnx", None, ("Shape", "ConstantOfShape")),
    ("ulunas_stream_simple.onnx", None, ("Shape", "ConstantOfShape")),
]


def op_counts(proto: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for graph in subgraphs_of(proto.graph) for node in graph.node)


def run(proto: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def random_feed(proto: onnx.ModelProto, shapes: dict | None, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random floats at the given (else declared) shapes; an int64 scalar is a sample rate (silero's sr)."""
    feed = {}
    for value in proto.graph.input:
        tensor_type = value.type.tensor_type
        dims = (shapes or {}).get(value.name) or [d.dim_value for d in tensor_type.shape.dim]
        if tensor_type.elem_type == TensorProto.INT64:
            feed[value.name] = np.array(16000, np.int64)
        else:
            feed[value.name] = rng.uniform(-1, 1, dims).astype(np.float32)
    return feed


@pytest.mark.parametrize("name, shapes, gone", REAL_CASES, ids=[case[0] for case in REAL_CASES])
def test_real_models_fold_and_match_onnxruntime(name, shapes, gone):
    source = onnx.load(str(REALMODELS / name))
    before = source.SerializeToString()
    folded = fold(source, shapes)
    assert source.SerializeToString() == before  # never mutated
    onnx.checker.check_model(folded, full_check=True)
    assert [o.name for o in folded.graph.output] == [o.name for o in source.graph.output]
    assert [i.name for i in folded.graph.input] == [i.name for i in source.graph.input]
    assert folded.opset_import == source.opset_import
    feed = random_feed(source, shapes, np.random.default_rng(0))
    for expected, got, output in zip(run(source, feed), run(folded, feed), source.graph.output):
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5, err_msg=f"{name} {output.name}")
    counts, original = op_counts(folded), op_counts(source)
    assert all(counts[op] == 0 for op in gone), {op: (original[op], counts[op]) for op in gone}
    foldable = sum(original[op] for op in ("Shape", "Constant", "ConstantOfShape"))
    assert sum(counts.values()) < sum(original.values()) if foldable else counts == original


def test_silero_v4_nested_ifs_inline_and_the_sample_rate_if_stays():
    """silero v4 picks its 16 kHz / 8 kHz branch on the ``sr`` input (a value: never folded); inside, the Ifs
    on shapes are decided once the chunk's shape is given."""
    source = onnx.load(str(REALMODELS / "silero_vad_v4_lstm_in_if.onnx"))
    assert op_counts(source)["If"] == 9
    folded = fold(source, SILERO_V4_SHAPES)
    # each decided If keeps one branch: half of the LSTM nodes (those on the other paths) are gone
    assert op_counts(folded)["If"] == 1 and (op_counts(source)["LSTM"], op_counts(folded)["LSTM"]) == (8, 4)
    assert [n.op_type for n in folded.graph.node][-1] == "If"

    def lstm_inputs(proto):
        return {tuple(n.input[:2]) for g in subgraphs_of(proto.graph) for n in g.node if n.op_type == "LSTM"}

    assert lstm_inputs(folded) < lstm_inputs(source)  # the moved nodes keep their names (nothing clashes)
    # a symbol given through one input fixes it in the others: batch from 'input' reaches h and c
    only_input = fold(source, {"input": [1, 512]})
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in only_input.graph.input}
    assert dims["h"] == [2, 1, 64] and dims["c"] == [2, 1, 64]


def _branch(name: str, op: str) -> onnx.GraphProto:
    """y = op(x, w) with a branch initializer named ``w`` (the main graph has a ``w`` too: a clash), and the
    shape of x (a static shape: folds inside the branch)."""
    w = numpy_helper.from_array(np.full((2, 3), 3.0 if op == "Add" else 0.5, np.float32), "w")
    nodes = [
        helper.make_node(op, ["x", "w"], ["t"], name="inner"),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Reshape", ["t", "x_shape"], ["y_" + name]),
    ]
    return helper.make_graph(
        nodes, name, [], [helper.make_tensor_value_info("y_" + name, TensorProto.FLOAT, None)], [w]
    )


def _if_model(condition: np.ndarray | None) -> onnx.ModelProto:
    """z = If(cond) then x + 3 else x * 0.5, then z - w; cond a Constant (``condition``) or an input."""
    nodes = [
        helper.make_node(
            "If",
            ["cond"],
            ["z"],
            name="branching",
            then_branch=_branch("then", "Add"),
            else_branch=_branch("else", "Mul"),
        ),
        helper.make_node("Sub", ["z", "w"], ["out"], name="inner"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if condition is None:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    else:
        nodes.insert(0, helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(condition)))
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])], [w]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("condition", [True, False])
def test_if_on_a_constant_is_replaced_by_its_branch(condition):
    source = _if_model(np.array(condition))
    folded = fold(source)
    onnx.checker.check_model(folded, full_check=True)
    assert "If" not in op_counts(folded) and "Shape" not in op_counts(folded)
    assert op_counts(folded)[("Add" if condition else "Mul")] == 1
    assert len({n.name for n in folded.graph.node if n.name}) == len([n for n in folded.graph.node if n.name])
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3)).astype(np.float32)
    np.testing.assert_allclose(run(folded, {"x": x})[0], run(source, {"x": x})[0], rtol=1e-6)


def test_if_on_an_input_stays_and_its_branches_fold_inside():
    source = _if_model(None)
    folded = fold(source)
    onnx.checker.check_model(folded, full_check=True)
    assert op_counts(folded)["If"] == 1 and op_counts(folded)["Shape"] == 0  # x's shape is static in the branches
    x = np.random.default_rng(2).uniform(-1, 1, (2, 3)).astype(np.float32)
    for condition in (True, False):
        feed = {"x": x, "cond": np.array(condition)}
        np.testing.assert_allclose(run(folded, feed)[0], run(source, feed)[0], rtol=1e-6)


def _shape_model() -> onnx.ModelProto:
    """out = x + ConstantOfShape(Shape(x)) * 2 + NonZero-count(x): x [N, 1024] (N symbolic)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Mul", ["ones", "two"], ["twos"]),
        helper.make_node("Add", ["x", "twos"], ["sum"]),
        helper.make_node("NonZero", ["x"], ["nz"]),  # value-dependent: never folds
        helper.make_node("Size", ["nz"], ["count"]),
        helper.make_node("Cast", ["count"], ["count_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["sum", "count_f"], ["out"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])]
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [two]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_static_shapes_fold_values_never_and_a_large_constant_stays_its_node():
    source = _shape_model()
    assert op_counts(fold(source))["Shape"] == 1  # N symbolic: nothing to fold
    n = LARGE_ELEMENTS // 1024 + 1  # ones and twos: over LARGE_ELEMENTS, read by an Add of the input
    folded = fold(source, {"x": [n, 1024]})
    counts = op_counts(folded)
    assert counts["Shape"] == 0 and counts["NonZero"] == 1 and counts["Size"] == 1
    assert counts["ConstantOfShape"] == 1 and counts["Mul"] == 1  # computed at run time, not stored
    assert max(numpy_helper.to_array(t).size for t in folded.graph.initializer) < LARGE_ELEMENTS
    small = fold(source, {"x": [2, 1024]})
    assert "ConstantOfShape" not in op_counts(small) and "Mul" not in op_counts(small)
    for model, rows in ((folded, n), (small, 2)):
        x = np.random.default_rng(3).uniform(-1, 1, (rows, 1024)).astype(np.float32)
        np.testing.assert_allclose(run(model, {"x": x})[0], run(source, {"x": x})[0], rtol=1e-6)


@pytest.mark.parametrize(
    "shapes, message",
    [
        ({"x": [2]}, "input 'x' is declared ['N', 1024], given shape [2]"),
        ({"x": [2, 512]}, "input 'x' is declared ['N', 1024], given shape [2, 512]"),
        ({"x": [0, 1024]}, "input 'x': given shape [0, 1024] is not a list of sizes >= 1"),
        ({"y": [1, 1024]}, "the model has no input 'y'"),
    ],
)
def test_bad_shapes_are_one_line_usage_errors(shapes, message):
    with pytest.raises(UsageError) as caught:
        fold(_shape_model(), shapes)
    assert caught.value.one_line().startswith(message) and "\n" not in caught.value.one_line()


def test_one_symbol_given_two_sizes_is_refused():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3]) for n in ("a", "b")],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
    )
    with pytest.raises(UsageError, match="input 'b': dimension 'N' is given as 2 and as 1"):
        fold(helper.make_model(graph), {"a": [1, 3], "b": [2, 3]})

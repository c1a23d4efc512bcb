"""Stacked recurrences a producer unrolls, and what is not lifted out of them.

torch.onnx's dynamo exporter unrolls a stacked ``nn.RNN`` (fixtures/producers: ``torch_dynamo_rnn2_*``,
two layers, one or two directions, tanh or relu, no initial state) layer after layer: each layer's input
projection reads the whole layer below, and each layer's first step is folded into a constant. Every layer
of every direction is lifted (each proven against onnxruntime on the original nodes when read); the whole
model rewritten in place runs on onnxruntime to torch's outputs (test_producers.py), and nothing that looks
recurrent stays behind. What looks recurrent but is not lifted is named wherever the operators around the
layers are said to be kept or dropped (``--layers-only``), never dropped silently.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import gatepack.converters as gp

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MANIFEST = json.loads((PRODUCERS / "manifest.json").read_text())
DYNAMO_RNNS = sorted(a for a in MANIFEST if a.startswith("torch_dynamo_rnn"))


@pytest.mark.parametrize("artifact", DYNAMO_RNNS)
def test_every_layer_and_direction_of_an_unrolled_rnn_is_lifted(artifact):
    """As many layers as torch's module has layers times directions (the manifest's configuration), each
    reading the one below, and no Tanh/Relu left among the operators around them."""
    config = MANIFEST[artifact]["config"]
    model = gp.load(PRODUCERS / artifact)
    directions = 2 if config.get("bidirectional") else 1
    assert len(model.layers) == config.get("num_layers", 1) * directions, model
    assert not model.skipped and not {"Tanh", "Relu"} & set(model.other_ops), model.other_ops
    activation = "Relu" if config.get("nonlinearity") == "relu" else "Tanh"
    assert {lay.directions[0].activations[0].name for lay in model.layers} == {activation}
    assert [lay.direction.value for lay in model.layers] == ["forward", "reverse"][:directions] * (
        len(model.layers) // directions
    )
    outputs = {lay.interface.y for lay in model.layers}
    inputs = [lay.interface.x for lay in model.layers]
    if config.get("num_layers", 1) == 2:  # the upper layer reads the lower one's steps (its X is computed)
        assert not set(inputs[directions:]) & set(gp.input_names(PRODUCERS / artifact))
        assert all(x not in outputs for x in inputs)


def _stack(tmp_path: Path, how: str) -> tuple[Path, str]:
    """torch_dynamo_rnn2_tanh.onnx with its second layer changed so that it is not lifted: ``refused``: each
    step's state scaled by 0.9 after the Tanh (no RNN computes that: every reading is disproven);
    ``gemm``: each recurrent MatMul written as a Gemm on the state reshaped to [N, H] (the same values,
    a form the finder does not look for). Returns the model and the second layer's name."""
    source = PRODUCERS / "torch_dynamo_rnn2_tanh.onnx"
    lower, upper = gp.load(source).layers
    lower_nodes = {tuple(n.output) for n in lower.provenance.handle.nodes}
    weight = upper.name.split(":", 1)[1]
    proto = onnx.load(str(source))
    graph = proto.graph
    steps = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] == weight]
    nodes = list(graph.node)
    if how == "refused":
        graph.initializer.append(numpy_helper.from_array(np.array(0.9, np.float32), "scale"))
        for tanh in [n for n in nodes if n.op_type == "Tanh" and tuple(n.output) not in lower_nodes]:
            scaled = f"{tanh.output[0]}:scaled"
            for reader in nodes:
                reader.input[:] = [scaled if i == tanh.output[0] else i for i in reader.input]
            nodes.insert(nodes.index(tanh) + 1, helper.make_node("Mul", [tanh.output[0], "scale"], [scaled]))
    else:
        graph.initializer.extend(
            [numpy_helper.from_array(np.array(s, np.int64), n) for s, n in (([2, 4], "as_2d"), ([1, 2, 4], "as_3d"))]
        )
        for step in steps:
            at = nodes.index(step)
            flat, product = f"{step.output[0]}:2d", f"{step.output[0]}:gemm"
            nodes[at : at + 1] = [
                helper.make_node("Reshape", [step.input[0], "as_2d"], [flat]),
                helper.make_node("Gemm", [flat, weight], [product]),
                helper.make_node("Reshape", [product, "as_3d"], [step.output[0]]),
            ]
    del graph.node[:]
    graph.node.extend(nodes)
    out = tmp_path / f"{how}.onnx"
    onnx.save(proto, str(out))
    return out, upper.name


@pytest.mark.parametrize("how", ["refused", "gemm"])
def test_what_looks_recurrent_but_is_not_lifted_is_named_when_dropped_or_kept(how, tmp_path):
    """The second layer of a stack is not lifted (disproven, or in a form not looked for): the first still
    is; the report, ``--layers-only`` (which drops it with the other operators) and the whole model (which
    keeps it) each name it."""
    source, upper = _stack(tmp_path, how)
    model = gp.load(source)
    assert len(model.layers) == 1 and [name for name, _ in model.skipped] == [upper]
    reason = model.skipped[0][1]
    assert ("reproduces it on random inputs" if how == "refused" else "look like an unrolled recurrence") in reason
    result = gp.convert(source, tmp_path / "layers.onnx", to="onnx", layers_only=True)
    (model_finding,) = {f.detail for fs in result.findings.values() for f in fs if f.feature == "model"}
    assert "left out" in model_finding and repr(upper) in model_finding and "not read as a layer" in model_finding
    assert repr(upper) in result.to_text()
    report = gp.report(source, to=["coreml"])
    findings = [f for lay in report.layers for f in lay.targets["coreml"].findings]
    (surroundings,) = {f.detail for f in findings if f.feature == "model"}
    assert repr(upper) in surroundings
    whole = gp.convert(source, tmp_path / "whole.onnx", to="onnx")
    (kept,) = {f.detail for fs in whole.findings.values() for f in fs if f.feature == "model"}
    assert "kept as they are" in kept and repr(upper) in kept
    if how == "gemm":  # the same values: the whole model, its first layer rewritten, still gives torch's outputs
        truth = dict(np.load(PRODUCERS / "torch_dynamo_rnn2_tanh.truth.npz"))
        session = ort.InferenceSession(str(tmp_path / "whole.onnx"))
        got = session.run(None, {"x": truth["x"]})
        for value, want in zip(got, (truth["y"], truth["h"])):
            np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-4)

"""Whole models: ONNX -> ONNX rewrites the recurrent nodes in place and keeps everything else; targets
that hold recurrent layers only refuse a model with other operators unless asked for the layers
alone; the CLI's output stays short and scriptable on many layers. Oracles: onnxruntime running
the original model, and models built independently here."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import REALMODELS, chromium, run_browser
from onnx import TensorProto, helper, numpy_helper

import gatepack as gp
from gatepack.cli import main

ROOT = REALMODELS.parent.parent
PRODUCERS = ROOT / "fixtures" / "producers"
LAYERS_ONLY_TARGETS = {"directml": "m.json", "bnns": "m.bnns"}


def _session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _real_feed(path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random floats for every float input of a real model (its dynamic dimensions 7), zeros otherwise."""
    feed = {}
    for info in _session(str(path)).get_inputs():
        shape = [d if isinstance(d, int) else 7 for d in info.shape]
        dtype = np.float32 if info.type == "tensor(float)" else np.int64
        feed[info.name] = rng.uniform(-1, 1, shape).astype(dtype) if dtype == np.float32 else np.zeros(shape, dtype)
    return feed


GATES = {"GRU": 3, "LSTM": 4, "RNN": 1}


def _relu_gru_relu(layout: int, rng: np.random.Generator, cell: str = "GRU") -> onnx.ModelProto:
    """x -> Relu -> GRU, LSTM or RNN (layout given) -> Relu on Y and on Y_h (an LSTM's Y_c an output as it is);
    layout 0 here is wrapped in the Transposes that make it the same computation as layout 1 (the ONNX operator's
    definition)."""
    s, n, i, h, g = 5, 2, 3, 4, GATES[cell]
    w, r = rng.standard_normal((1, g * h, i)), rng.standard_normal((1, g * h, h))
    b = rng.standard_normal((1, 2 * g * h))
    attrs = {"hidden_size": h, **({"linear_before_reset": 1} if cell == "GRU" else {})}
    states = ["y_h", "y_c"] if cell == "LSTM" else ["y_h"]
    if layout == 1:
        nodes = [helper.make_node(cell, ["r", "W", "R", "B"], ["y", *states], name="gru", layout=1, **attrs)]
    else:
        nodes = [
            helper.make_node("Transpose", ["r"], ["r_t"], perm=[1, 0, 2]),
            helper.make_node(cell, ["r_t", "W", "R", "B"], ["y_t", *(f"{st}_t" for st in states)], **attrs),
            helper.make_node("Transpose", ["y_t"], ["y"], perm=[2, 0, 1, 3]),
            *(helper.make_node("Transpose", [f"{st}_t"], [st], perm=[1, 0, 2]) for st in states),
        ]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu_in")]
        + nodes
        + [helper.make_node("Relu", ["y"], ["out"], name="relu_out"), helper.make_node("Relu", ["y_h"], ["out_h"])],
        "relu_gru_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, s, i])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [n, s, 1, h]),
            helper.make_tensor_value_info("out_h", TensorProto.FLOAT, [n, 1, h]),
            *([helper.make_tensor_value_info("y_c", TensorProto.FLOAT, [n, 1, h])] if cell == "LSTM" else []),
        ],
        [numpy_helper.from_array(a.astype(np.float32), k) for a, k in ((w, "W"), (r, "R"), (b, "B"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.doc_string = "a user's model"
    helper.set_model_props(model, {"author": "someone"})
    return model


def test_relu_gru_relu_keeps_its_relus_names_and_interface(tmp_path):
    """The quick start's case inside a model: the layout-1 GRU (which onnxruntime cannot run) is
    rewritten in place; the Relus, x, the outputs and the metadata stay; the result matches
    onnxruntime on the equivalent layout-0 model."""
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_relu_gru_relu(1, np.random.default_rng(0)), src)
    result = gp.convert(src, out)
    assert result.whole and result.verification.passed
    written = onnx.load(str(out))
    onnx.checker.check_model(written)
    relus = [(n.name, list(n.input), list(n.output)) for n in written.graph.node if n.op_type == "Relu"]
    assert relus == [("relu_in", ["x"], ["r"]), ("relu_out", ["y"], ["out"]), ("", ["y_h"], ["out_h"])]
    assert [i.name for i in written.graph.input] == ["x"] and [o.name for o in written.graph.output] == ["out", "out_h"]
    assert written.doc_string == "a user's model" and {p.key: p.value for p in written.metadata_props} == {
        "author": "someone"
    }
    assert [n.op_type for n in written.graph.node].count("GRU") == 1
    feed = {"x": np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)}
    expected = _session(_relu_gru_relu(0, np.random.default_rng(0))).run(None, feed)
    got = _session(str(out)).run(None, feed)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, atol=1e-6, rtol=1e-5)


LAYOUT1_TARGETS = {
    "onnx": ("out.onnx", {}),
    "onnx for directml": ("out.onnx", {"runtime": "directml"}),
    "openvino": ("out.xml", {}),
    "coreml": ("out.mlpackage", {}),
}


@pytest.mark.parametrize("cell", sorted(GATES))
@pytest.mark.parametrize("target", sorted(LAYOUT1_TARGETS))
def test_a_layout1_whole_model_converts_and_verifies_through_its_twin(target, cell, tmp_path):
    """onnxruntime refuses layout=1, so the source is run as its exact twin (the node as layout 0 between
    Transposes, proven equal to gatepack's executor of the node): the model converts and verifies whole to every
    target that keeps a whole model, saying so, and the artifact gives onnxruntime's outputs of the layout-0 model
    built independently above."""
    if target == "openvino":
        pytest.importorskip("openvino")
    if target == "coreml":
        pytest.importorskip("coremltools")
    name, options = LAYOUT1_TARGETS[target]
    src, out = tmp_path / "m.onnx", tmp_path / name
    onnx.save(_relu_gru_relu(1, np.random.default_rng(3), cell), src)
    result = gp.convert(src, out, to=target.split()[0], **options)
    check = result.verification
    assert result.whole and check.passed and not check.incomplete, check.to_text()
    assert {o.output for o in check.outputs if o.layer == "gru [twin vs executor]"} >= {"Y", "Y_h"}
    assert any("run as its exact twin" in n and "never ran the original" in n for n in check.notes)
    feed = {"x": np.random.default_rng(4).standard_normal((2, 5, 3)).astype(np.float32)}
    expected = _session(_relu_gru_relu(0, np.random.default_rng(3), cell)).run(None, feed)
    got = gp.run(out, feed)
    for output, value in zip(("out", "out_h", "y_c"), expected):
        np.testing.assert_allclose(got[output], value, atol=1e-5, rtol=1e-4)


def test_a_twin_that_differs_from_the_node_fails_verification(tmp_path, monkeypatch):
    """The twin is judged, not trusted: a twin whose rewritten node computes something else (its weights scaled)
    fails the verification on the [twin vs executor] outputs."""
    import gatepack.converters.registry as registry
    from gatepack.converters.formats import onnx as onnx_format

    def wrong_twin(model, path):
        rewritten = onnx_format.write_runnable_twin(model, path)
        proto = onnx.load(str(path))
        for tensor in proto.graph.initializer:
            if tensor.name.endswith("W"):
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * 1.5, tensor.name))
        onnx.save(proto, str(path))
        return rewritten

    implementation = registry.implementation("onnx")
    monkeypatch.setattr(registry, "reader", lambda name: replace(implementation, runnable_twin=wrong_twin))
    src = tmp_path / "m.onnx"
    onnx.save(_relu_gru_relu(1, np.random.default_rng(0)), src)
    with pytest.raises(gp.VerificationError) as err:
        gp.convert(src, tmp_path / "out.onnx")
    failed = [o for o in err.value.verification.outputs if not o.passed]
    assert {o.output for o in failed if o.layer == "gru [twin vs executor]"} == {"Y", "Y_h"}


@pytest.mark.parametrize("name", ["gtcrn_stream_simple.onnx", "ulunas_stream_simple.onnx", "dfn3_erb_dec.onnx"])
def test_real_models_to_onnx_keep_their_interface_and_every_other_node(name, tmp_path):
    src, out = REALMODELS / name, tmp_path / "out.onnx"
    result = gp.convert(src, out)
    assert result.verification.passed and result.whole
    original, written = onnx.load(str(src)), onnx.load(str(out))
    assert [(i.name, i.type) for i in written.graph.input] == [(i.name, i.type) for i in original.graph.input]
    assert [(o.name, o.type) for o in written.graph.output] == [(o.name, o.type) for o in original.graph.output]
    assert written.opset_import == original.opset_import
    weights = {i for n in original.graph.node if n.op_type in ("GRU", "RNN") for i in n.input[1:4]}
    readers = [i for n in original.graph.node for i in n.input]
    only_weights = [  # Constant nodes whose only reader is a recurrent node's W, R or B: replaced with it
        n
        for n in original.graph.node
        if n.op_type == "Constant" and n.output[0] in weights and readers.count(n.output[0]) == 1
    ]
    others = [n for n in original.graph.node if n.op_type not in ("GRU", "RNN") and n not in only_weights]
    assert [n for n in written.graph.node if n.op_type not in ("GRU", "RNN")] == others
    feed = _real_feed(src, np.random.default_rng(3))
    for e, g in zip(_session(str(src)).run(None, feed), _session(str(out)).run(None, feed)):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=0)


def test_a_gru_inside_an_if_branch_is_rewritten_where_it_is(tmp_path):
    """A subgraph's recurrent node (silero keeps its layers inside If branches) is rewritten in its
    branch, its weights as that branch's initializers; the If and the other branch stay."""
    rng = np.random.default_rng(4)
    h, i = 3, 2
    w = numpy_helper.from_array(rng.standard_normal((1, 3 * h, i)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 3 * h, h)).astype(np.float32), "R")
    then = helper.make_graph(
        [helper.make_node("GRU", ["x", "W", "R"], ["", "h"], hidden_size=h, name="inner_gru")],
        "then",
        [],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, None)],
        [w, r],
    )
    other = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1)],
        "else",
        [],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["out"], then_branch=then, else_branch=other, name="branch")],
        "g",
        [
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, i]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), src)
    assert gp.convert(src, out).verification.passed
    written = onnx.load(str(out))
    branch = written.graph.node[0].attribute
    then_graph = next(a.g for a in branch if a.name == "then_branch")
    assert [n.op_type for n in then_graph.node] == ["GRU"] and {t.name for t in then_graph.initializer} == {"W", "R"}
    assert next(a.g for a in branch if a.name == "else_branch") == other
    x = rng.standard_normal((4, 1, i)).astype(np.float32)
    for flag in (True, False):
        feed = {"flag": np.array(flag), "x": x}
        np.testing.assert_allclose(_session(str(out)).run(None, feed)[0], _session(str(src)).run(None, feed)[0])


@pytest.mark.parametrize("target", sorted(LAYERS_ONLY_TARGETS))
def test_layers_only_targets_refuse_a_whole_model_unless_asked(target, tmp_path):
    src, out = REALMODELS / "gtcrn_stream_simple.onnx", tmp_path / LAYERS_ONLY_TARGETS[target]
    runner = CliRunner()
    refused = runner.invoke(main, ["convert", str(src), "--to", target, "-o", str(out), "--json"])
    assert refused.exit_code == 4, refused.output
    error = json.loads(refused.stdout)
    assert error["exit_code"] == 4 and "401 other operators of 23 types" in error["error"]
    assert "Conv" in error["error"] and "--layers-only" in error["hint"]
    assert {"bnns": "--to coreml", "directml": "onnx"}[target] in error["hint"]  # the target that keeps the model
    assert error["findings"][0]["feature"] == "model" and error["findings"][0]["status"] == "unsupported"
    assert not out.exists()
    report = json.loads(runner.invoke(main, ["report", str(src), "--to", target, "--json"]).stdout)
    assert (
        report["model"][target]["status"] == "unsupported" and "--layers-only" in report["model"][target]["alternative"]
    )
    assert all(lay["targets"][target]["status"] == "unsupported" for lay in report["layers"])
    done = runner.invoke(main, ["convert", str(src), "--to", target, "-o", str(out), "--layers-only"])
    assert done.exit_code == 0, done.output
    assert "layers only, as asked" in done.output.splitlines()[-1] and "verification passed" in done.output
    listed = json.loads(runner.invoke(main, ["inspect", str(out), "--json"]).stdout)
    source = gp.load(src)
    assert len(listed["layers"]) == len(source.layers)
    assert all({"X", "Y"} <= set(lay["tensors"]) for lay in listed["layers"])
    shown = runner.invoke(main, ["inspect", str(out)]).output
    assert all(lay["tensors"]["X"]["name"] in shown for lay in listed["layers"])


def test_whole_model_targets_say_so_in_the_report():
    report = gp.report(REALMODELS / "gtcrn_stream_simple.onnx").to_json()
    assert report["model"]["onnx"]["status"] == "exact" and "rewritten in place" in report["model"]["onnx"]["detail"]
    assert report["model"]["openvino"]["status"] == "exact"
    assert {report["model"][t]["status"] for t in LAYERS_ONLY_TARGETS} == {"unsupported"}
    asked = gp.report(REALMODELS / "gtcrn_stream_simple.onnx", "directml", layers_only=True).to_json()
    assert asked["model"]["directml"]["warning"] == "layers only, as asked"


def test_whole_model_onnx_refuses_what_would_break_the_graph(tmp_path):
    src = REALMODELS / "gtcrn_stream_simple.onnx"
    with pytest.raises(gp.UsageError, match="--layout"):
        gp.convert(src, tmp_path / "a.onnx", layout=1)
    with pytest.raises(gp.UsageError, match="keeps its opset 11"):
        gp.convert(src, tmp_path / "b.onnx", opset=14)
    assert not list(tmp_path.iterdir())
    layers = gp.convert(src, tmp_path / "c.onnx", layers_only=True, opset=14, layout=1)  # the layers alone may
    assert layers.verification.passed and not layers.whole
    assert not gp.load(tmp_path / "c.onnx").other_ops


def test_many_layers_convert_in_few_lines_ending_with_the_verdict(tmp_path):
    runner = CliRunner()
    src = REALMODELS / "ulunas_stream_simple.onnx"
    suffix = {"openvino": "m.xml", "directml": "m.json", "coreml": "m.mlpackage"}
    for target, extra in (("openvino", []), ("directml", ["--layers-only"]), ("coreml", ["--layers-only"])):
        out = tmp_path / suffix[target]
        done = runner.invoke(  # progress from the start: a log gets the counted steps every few seconds only
            main, ["convert", str(src), "-o", str(out), *extra], env={"GATEPACK_PROGRESS_DELAY": "0"}
        )
        lines = done.output.splitlines()
        assert done.exit_code == 0 and len(lines) <= 30, done.output
        assert lines[-1].startswith(f"wrote {out} ({target}") and "28 layer(s)" in lines[-1]
        assert "verification passed" in lines[-1] and "largest error" in lines[-1]
        if target == "openvino":
            assert "folded: bias" in lines[-1]
    quiet = runner.invoke(main, ["convert", str(src), "-o", str(tmp_path / "q.onnx"), "-q"])
    assert quiet.exit_code == 0 and quiet.output == ""


def test_json_errors_for_garbage_and_for_a_failed_verification(tmp_path, monkeypatch):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(bytes(range(256)) * 3)
    runner = CliRunner()
    done = runner.invoke(main, ["convert", str(garbage), "-o", str(tmp_path / "out.xml"), "--json"])
    assert done.exit_code == 3
    error = json.loads(done.stdout)
    assert error["exit_code"] == 3 and "garbage.onnx" in error["error"] and error["kind"] == "InputError"
    usage = runner.invoke(main, ["convert", str(garbage), "--json"])  # no -o: click's own usage error
    assert usage.exit_code == 2 and json.loads(usage.stdout)["exit_code"] == 2
    for command in (["inspect"], ["report"], ["verify", str(garbage)], ["run", "--inputs", "x.npz", "-o", "y.npz"]):
        failed = runner.invoke(main, [*command[:1], str(garbage), *command[1:], "--json"])
        assert failed.exit_code == 3 and json.loads(failed.stdout)["kind"] == "InputError", command
    assert {f["name"] for f in json.loads(runner.invoke(main, ["formats", "--json"]).stdout)} >= {
        *LAYERS_ONLY_TARGETS,
        "onnx",
        "openvino",
        "coreml",
    }
    # Y of a one-direction op as one Transpose again: OpenVINO's CPU plugin computes one of two RNN nodes reading
    # one X wrongly (docs/conventions.md §3, item 4), which verification must catch
    from gatepack.converters.formats import openvino as openvino_format

    monkeypatch.setattr(openvino_format, "_seq_major_y", lambda ops, y, _: ops.transpose(y, [2, 1, 0, 3]))
    src = PRODUCERS / "torch_dynamo_rnn_relu_bidirectional.onnx"
    failed = runner.invoke(main, ["convert", str(src), "-o", str(tmp_path / "rnn.xml"), "--json"])
    assert failed.exit_code == 5
    numbers = json.loads(failed.stdout)["verification"]
    assert not numbers["passed"] and max(o["max_abs_error"] for o in numbers["outputs"]) > 1e-3


def test_report_picks_its_format_from_the_suffix(tmp_path):
    runner = CliRunner()
    src = str(REALMODELS / "dfn3_erb_dec.onnx")
    for suffix, check in (
        (".json", lambda text: json.loads(text)["format"] == "onnx"),
        (".md", lambda text: text.startswith("# gatepack report")),
        (".html", lambda text: text.startswith("<!DOCTYPE html>")),
        (".txt", lambda text: "recurrent layer(s)" in text.splitlines()[0]),
    ):
        out = tmp_path / f"r{suffix}"
        assert runner.invoke(main, ["report", src, "-o", str(out)]).exit_code == 0
        assert check(out.read_text()), suffix
    unknown = runner.invoke(main, ["report", src, "-o", str(tmp_path / "r.pdf")])
    assert unknown.exit_code == 2 and not (tmp_path / "r.pdf").exists()


def test_verify_takes_tolerances(tmp_path):
    """Two different GRUs of one shape differ; --atol 10 accepts them, --atol 0 --rtol 0 still passes
    a model against itself rewritten (bit-identical arithmetic)."""
    runner = CliRunner()
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_relu_gru_relu(0, np.random.default_rng(0)), a)
    onnx.save(_relu_gru_relu(0, np.random.default_rng(9)), b)
    assert runner.invoke(main, ["verify", str(a), str(b)]).exit_code == 5
    loose = runner.invoke(main, ["verify", str(a), str(b), "--atol", "10", "--json"])
    assert loose.exit_code == 0 and all(o["atol"] == 10 for o in json.loads(loose.stdout)["outputs"])
    copy = tmp_path / "copy.onnx"
    gp.convert(a, copy)
    strict = runner.invoke(main, ["verify", str(a), str(copy), "--atol", "0", "--rtol", "0", "--json"])
    assert strict.exit_code == 0, strict.output
    assert runner.invoke(main, ["verify", str(a), str(b), "--atol", "-1"]).exit_code == 2


def test_html_report_of_28_layers_in_a_browser(tmp_path):
    """Summary and caveats first; identical layers grouped; the layers-only targets' cells red; the
    filters work (preset from the address: only unsupported cells of directml shown)."""
    if chromium() is None:
        pytest.skip("no chromium here: .ci/run installs Debian's chromium when it can")
    from PIL import Image

    page = tmp_path / "report.html"
    runner = CliRunner()
    assert (
        runner.invoke(main, ["report", str(REALMODELS / "ulunas_stream_simple.onnx"), "-o", str(page)]).exit_code == 0
    )
    shot = tmp_path / "shot.png"
    done = run_browser(tmp_path, "--hide-scrollbars", "--window-size=1400,1800", f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), done.stderr[-1000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    red = np.all(pixels == [0xF6, 0xB0, 0xB0], axis=2)
    green = np.all(pixels == [0xD4, 0xF7, 0xD4], axis=2)
    assert red.sum() > 1.5 * green.sum() > 0  # two layers-only targets (directml, bnns) in red, onnx exact in green
    dom = run_browser(tmp_path, "--dump-dom", page.as_uri() + "#targets=onnx,directml&status=unsupported").stdout
    assert 'data-ready="yes"' in dom
    assert dom.index('id="targets"') < dom.index('id="caveats"') < dom.index('id="matrix"')
    rows = dom.split('<tr class="group"')[1:]
    assert 1 < len(rows) < 28  # identical layers share a row
    assert all("display: none" not in row.split(">")[0] for row in rows)  # every row has an unsupported cell
    assert dom.count('data-target="openvino" data-status="folded" style="display: none;"') == len(rows)
    none_left = run_browser(tmp_path, "--dump-dom", page.as_uri() + "#status=lossy").stdout
    assert none_left.count('class="group" style="display: none;"') == len(rows)


def test_report_and_convert_agree_on_a_model_openvinos_frontend_refuses(tmp_path):
    """An ai.onnx.ml Scaler (onnxruntime runs it, OpenVINO's ONNX frontend has no translation): the report's
    openvino `model` finding is unsupported with the frontend's reason, and convert refuses with the same one
    (exit 4, nothing written); onnx keeps the whole model, and the layers alone convert to openvino."""
    pytest.importorskip("openvino")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 12, 4)).astype(np.float32), "R"),
        numpy_helper.from_array(np.array([10, 3], np.int64), "flat"),
        numpy_helper.from_array(np.array([5, 2, 3], np.int64), "back"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["rows"]),
        helper.make_node("Scaler", ["rows"], ["scaled"], domain="ai.onnx.ml", offset=[0.1, 0.2, 0.3], scale=[2.0] * 3),
        helper.make_node("Reshape", ["scaled", "back"], ["u"]),
        helper.make_node("GRU", ["u", "W", "R"], ["Y"], hidden_size=4),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        inits,
    )
    opsets = [helper.make_opsetid("", 14), helper.make_opsetid("ai.onnx.ml", 3)]
    src = tmp_path / "scaled.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), src)
    found = gp.report(src, to="openvino").layers[0].targets["openvino"].findings
    model = next(f for f in found if f.feature == "model")
    assert model.status.value == "unsupported" and "OpenVINO's ONNX frontend cannot convert" in model.detail
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(src, tmp_path / "m.xml")
    assert model.detail in str(err.value) and err.value.exit_code == 4 and not (tmp_path / "m.xml").exists()
    assert gp.convert(src, tmp_path / "m.onnx").passed
    assert gp.convert(src, tmp_path / "layers.xml", layers_only=True).passed


def _conv_gru_behind_a_rank_if(batch: int | str) -> onnx.ModelProto:
    """x [batch, 2, T] -> If(batch == 1) then x else Flatten(x) (a TorchScript-style guard on a shape) -> Conv1d
    -> Transpose -> GRU. The If's branches differ in rank, so OpenVINO's ONNX frontend sees a Conv input of unknown
    rank and refuses the model; folded for batch 1 the If is its then branch, and the frontend converts it."""
    rng = np.random.default_rng(5)

    def branch(name: str, node: onnx.NodeProto) -> onnx.GraphProto:
        return helper.make_graph(
            [node], name, [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)]
        )

    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], end=1),
        helper.make_node("Equal", ["x_shape", "one"], ["single"]),
        helper.make_node("Squeeze", ["single"], ["is_single"]),
        helper.make_node(
            "If",
            ["is_single"],
            ["guarded"],
            then_branch=branch("then", helper.make_node("Identity", ["x"], ["kept"])),
            else_branch=branch("else", helper.make_node("Flatten", ["x"], ["flat"])),
        ),
        helper.make_node("Conv", ["guarded", "conv_w"], ["conv"]),
        helper.make_node("Transpose", ["conv"], ["seq"], perm=[2, 0, 1]),
        helper.make_node("GRU", ["seq", "W", "R"], ["Y", "Y_h"], hidden_size=3),
    ]
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(rng.standard_normal((4, 2, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.standard_normal((1, 9, 4)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((1, 9, 3)).astype(np.float32), "R"),
    ]
    graph = helper.make_graph(
        nodes,
        "rank_guard",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 2, "T"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_openvinos_frontend_takes_as_it_is_is_not_folded(tmp_path):
    """Declared batch 1: OpenVINO decides the If itself (its condition folds from a static dimension), so the model
    is imported as it is: `exact`, nothing folded."""
    pytest.importorskip("openvino")
    src = tmp_path / "guarded.onnx"
    onnx.save(_conv_gru_behind_a_rank_if(1), src)
    found = gp.report(src, to="openvino").layers[0].targets["openvino"].findings
    assert next(f for f in found if f.feature == "model").status.value == "exact"


def test_symbolic_dims_that_block_folding_ask_for_input_shapes(tmp_path):
    """A symbolic batch leaves the If undecided, and OpenVINO's ONNX frontend refuses the Conv of unknown rank
    behind it: convert refuses (exit 4, the report agreeing) naming --input-shape with the input's name; given
    x=1,2,7 the model is folded for it (the If replaced by its then branch) and converts, the IR fixed to that
    shape (a warning says so), matching onnxruntime on the original model."""
    pytest.importorskip("openvino")
    import openvino as ov

    src, out = tmp_path / "guarded.onnx", tmp_path / "m.xml"
    onnx.save(_conv_gru_behind_a_rank_if("B"), src)
    with pytest.raises(RuntimeError, match="rank"):
        ov.Core().read_model(str(src))  # the frontend itself
    found = gp.report(src, to="openvino").layers[0].targets["openvino"].findings
    refused = next(f for f in found if f.feature == "model")
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(src, out)
    assert refused.status.value == "unsupported" and refused.detail in str(err.value) and err.value.exit_code == 4
    assert "Conv" in refused.detail and "--input-shape for x=d1,d2,..." in err.value.one_line() and not out.exists()
    result = gp.convert(src, out, input_shapes={"x": (1, 2, 7)})
    assert result.whole and result.verification.passed, result.verification.to_text()
    (layer,) = result.findings
    model = next(f for f in result.findings[layer] if f.feature == "model")
    assert model.status.value == "folded" and "folded first for the input shapes x [1, 2, 7]" in model.detail
    assert model.warning == "the IR takes only the input shapes it was folded for (x [1, 2, 7])"
    x = np.random.default_rng(7).uniform(-1, 1, (1, 2, 7)).astype(np.float32)
    got = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})({"x": x})
    for name, expected in zip(("Y", "Y_h"), _session(str(src)).run(None, {"x": x})):
        np.testing.assert_allclose(got[name], expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(
        gp.UsageError, match=r"guarded.onnx: input 'x' is declared \['B', 2, 'T'\], given shape \[1, 2\]"
    ):
        gp.convert(src, tmp_path / "m.xml", input_shapes={"x": (1, 2)})

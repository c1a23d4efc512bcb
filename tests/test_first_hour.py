"""What a new user meets in the first hour (issue 32), each against an independent oracle where numbers are
involved: OpenVINO's fp16 IR (ovc's default) verified at fp16's tolerance on OpenVINO CPU against onnxruntime."""

import json
import re

import pytest
from click.testing import CliRunner
from helpers import REALMODELS

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry
from gatepack.converters.model import as_layers_only
from gatepack.schemas.layer import INPUT_ROLES, OUTPUT_ROLES

pytest.importorskip("openvino")


def test_fp16_openvino_ir_is_lossy_named_in_the_hint_and_verified_at_fp16_tolerance(tmp_path):
    src, out = REALMODELS / "burn_gru.onnx", tmp_path / "m.xml"
    refused = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--compress-to-fp16"])
    assert refused.exit_code == 4 and "--allow-lossy" in refused.output and not out.exists()
    result = gp.convert(src, out, compress_to_fp16=True, allow_lossy=True)
    assert result.verification.passed
    worst = max(result.verification.outputs, key=lambda o: o.max_abs_error)
    assert worst.max_abs_error > 1e-6 and worst.atol >= 1e-3  # fp16 weights: not within fp32's 1e-5
    assert any(f.status.value == "lossy" for fs in result.findings.values() for f in fs)
    read = gp.load(out)  # read back, the IR says its weights are fp16
    assert any("fp16" in f.detail for fs in read.notes.values() for f in fs)


def test_fp16_whole_model_ir_verifies(tmp_path):
    result = gp.convert(
        REALMODELS / "dtln_model_1_lstm.onnx", tmp_path / "m.xml", compress_to_fp16=True, allow_lossy=True
    )
    assert result.whole and result.verification.passed


def test_html_intro_speaks_of_operators_around_the_layers_only_when_there_are_some():
    """A single-node model has no operators around its layer: the intro says nothing of them (it used to say
    'the model has other operators around them, which no target keeps'); a model with some says which
    targets keep them, and with --layers-only that they were left out as asked."""
    intro = _html_intro(gp.report(REALMODELS / "burn_gru.onnx").render("html"))
    assert intro.endswith("1 recurrent layer(s)") and "other operators" not in intro
    whole = _html_intro(gp.report(REALMODELS / "dtln_model_1_lstm.onnx").render("html"))
    keepers = ["onnx", "openvino", "coreml", "litert"]  # they write DTLN whole; every other writer holds layers only
    others = ", ".join(name for name in registry.writers() if name not in keepers)
    assert f"other operators around them, which {', '.join(keepers)} keep and {others} cannot hold" in whole
    alone = _html_intro(gp.report(REALMODELS / "dtln_model_1_lstm.onnx", layers_only=True).render("html"))
    assert "left out as asked" in alone and "cannot hold" not in alone


def _html_intro(page: str) -> str:
    return page.split("<p id='intro'>")[1].split("</p>")[0]


def test_json_and_html_reports_carry_gatepacks_version_and_the_utc_date():
    report = gp.report(REALMODELS / "burn_gru.onnx", "onnx")
    data = report.to_json()
    assert data["gatepack_version"] == gp.__version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["created"])
    assert f"made by gatepack {gp.__version__} on {data['created']}" in report.render("html")


def test_text_report_folds_layers_with_the_same_findings_into_one_row_with_their_count():
    """ulunas' 28 GRUs: 14 forward and 14 bidirectional, each kind with the same findings for every target
    (only sizes and tensor names differ): two rows of the table, not 28."""
    text = gp.report(REALMODELS / "ulunas_stream_simple.onnx").render("text").splitlines()
    table = text[2 : text.index(next(line for line in text if line.startswith("onnx:")))]
    assert [row.split(":")[0].strip() for row in table] == ["14 layers (GRU forward)", "14 layers (GRU bidirectional)"]
    assert "GRU_336, GRU_717, GRU_1139 and 11 more" in table[0]
    single = gp.report(REALMODELS / "burn_gru.onnx").render("text").splitlines()
    assert single[2].split()[0] == "GRU_0"  # one layer: its name, as before


def test_a_model_without_recurrent_layers_is_told_what_it_holds_and_what_gatepack_converts(tmp_path):
    from onnx import TensorProto, helper, save

    value = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Abs", ["y"], ["z"])]
    graph = helper.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, [2])], [value("z", TensorProto.FLOAT, [2])])
    save(helper.make_model(graph), tmp_path / "relu.onnx")
    failed = CliRunner().invoke(main, ["convert", str(tmp_path / "relu.onnx"), str(tmp_path / "r.xml")])
    assert failed.exit_code == 3
    assert "no recurrent (GRU/RNN/LSTM) layer found among its 2 operators of 2 types (Abs, Relu)" in failed.output
    assert "hint: gatepack converts models that hold GRU, RNN or LSTM layers" in failed.output


def test_mistyped_commands_options_and_values_are_answered_with_did_you_mean():
    runner, src = CliRunner(), str(REALMODELS / "burn_gru.onnx")
    assert "Did you mean 'convert'?" in runner.invoke(main, ["covnert", src]).output  # click's own
    assert "'--to'" in runner.invoke(main, ["convert", src, "o.onnx", "--too", "onnx"]).output  # click's own
    suffix = runner.invoke(main, ["convert", src, "o.onx"])
    assert suffix.exit_code == 2 and "did you mean o.onnx?" in suffix.output
    value = runner.invoke(main, ["convert", src, "o.onnx", "--to", "onx"])
    assert value.exit_code == 2 and "Did you mean 'onnx'?" in value.output
    assert (
        "Did you mean 'numpy'?"
        in runner.invoke(main, ["run", src, "--inputs", "a.npz", "-o", "b.npz", "--engine", "numpi"]).output
    )


def test_a_write_option_the_target_does_not_take_is_named_by_its_cli_flag(tmp_path):
    """From the command line, the error names --onnx-layout, not the API's layout_encoding."""
    out = tmp_path / "m.xml"
    refused = CliRunner().invoke(
        main, ["convert", str(REALMODELS / "burn_gru.onnx"), str(out), "--onnx-layout", "attribute"]
    )
    assert refused.exit_code == 2 and not out.exists()
    assert "--onnx-layout does not apply to the openvino target" in refused.output
    assert "--strategy, --compress-to-fp16" in refused.output and "layout_encoding" not in refused.output


def _onnxruntime(path, feed: dict) -> dict:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def test_run_on_a_directml_artifact_takes_and_returns_the_sources_shapes(tmp_path):
    """`gatepack run` feeds a DirectML artifact the source's X [S,N,I] and initial_h [D,N,H] and returns Y_h
    [D,N,H] (it used to demand the descs' 4-D shapes and return Y_h [1,D,N,H]); --directml-shapes keeps the 4-D
    DxDispatch form. Oracle: onnxruntime on the source."""
    import numpy as np

    src, dml = REALMODELS / "burn_gru_with_initial_state.onnx", tmp_path / "dml"
    gp.convert(src, dml, to="directml")
    rng = np.random.default_rng(0)
    feed = {"input": rng.standard_normal((5, 2, 4)), "initial_h": rng.standard_normal((1, 2, 8))}
    feed = {k: v.astype(np.float32) for k, v in feed.items()}
    expected = _onnxruntime(src, feed)
    runner = CliRunner()
    dxdispatch_feed = {k: v[None] for k, v in feed.items()}
    dxdispatch_expected = {"Y": expected["Y"], "Y_h": expected["Y_h"][None]}
    for flag, given, shaped in (([], feed, expected), (["--directml-shapes"], dxdispatch_feed, dxdispatch_expected)):
        np.savez(tmp_path / "in.npz", **given)
        ran = runner.invoke(
            main, ["run", str(dml), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"), *flag]
        )
        assert ran.exit_code == 0, ran.output
        got = dict(np.load(tmp_path / "o.npz"))
        assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in shaped.items()}, flag
        for name, value in shaped.items():
            np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-4, err_msg=f"{flag} {name}")
    np.savez(tmp_path / "in.npz", **{k: v[None] for k, v in feed.items()})  # 4-D without the flag: told so
    told = runner.invoke(main, ["run", str(dml), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")])
    assert told.exit_code == 3 and "--directml-shapes" in told.output


def test_run_feeds_a_scalar_input_to_an_openvino_ir_as_the_scalar_it_declares(tmp_path):
    """silero VAD v4's sample rate `sr` is a 0-d int64 input: `gatepack run` on the whole-model IR feeds it 0-d
    (done before this test was written: OpenVINO's run keeps a scalar 0-d; here through the CLI and an .npz)."""
    import numpy as np

    src, ir = REALMODELS / "silero_vad_v4_lstm_in_if.onnx", tmp_path / "m.xml"
    rng = np.random.default_rng(1)
    feed = {
        "input": rng.uniform(-1, 1, (1, 512)).astype(np.float32),
        "sr": np.array(16000, np.int64),
        "h": rng.uniform(-1, 1, (2, 1, 64)).astype(np.float32),
        "c": rng.uniform(-1, 1, (2, 1, 64)).astype(np.float32),
    }
    gp.convert(src, ir, input_shapes={"input": (1, 512)})
    np.savez(tmp_path / "in.npz", **feed)
    ran = CliRunner().invoke(
        main, ["run", str(ir), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]
    )
    assert ran.exit_code == 0, ran.output
    got = dict(np.load(tmp_path / "o.npz"))
    for name, value in _onnxruntime(src, feed).items():
        np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-5, err_msg=name)


def test_inspect_of_a_whole_model_shows_its_own_inputs_and_outputs_first():
    """dtln's inputs and outputs, names, dtypes and shapes as onnxruntime declares them, before its layers."""
    import onnxruntime as ort

    src = REALMODELS / "dtln_model_1_lstm.onnx"
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    lines = CliRunner().invoke(main, ["inspect", str(src)]).output.splitlines()
    assert lines[1] == "model inputs:" and "recurrent layers:" in lines
    head = lines[: lines.index("recurrent layers:")]
    assert "model outputs:" in head and not any(line.startswith("lstm_4") for line in head)
    dtypes = {"tensor(float)": "float32"}
    for tensor in session.get_inputs() + session.get_outputs():
        assert f"  {tensor.name} [{', '.join(map(str, tensor.shape))}] {dtypes[tensor.type]}" in head
    data = json.loads(CliRunner().invoke(main, ["inspect", str(src), "--json"]).output)
    assert [t["name"] for t in data["model_inputs"]] == [t.name for t in session.get_inputs()]
    assert [t["shape"] for t in data["model_outputs"]] == [t.shape for t in session.get_outputs()]


def _gru_among_other_operators(path) -> None:
    """X (a graph input) -> GRU 'rec' -> Y -> Neg -> out; the GRU's Y_h is the graph output 'state', its Y an
    internal tensor named as torch.onnx names them ('onnx::Neg_7')."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)
        for name, shape in (("W", (1, 9, 2)), ("R", (1, 9, 3)), ("B", (1, 18)))
    ]
    nodes = [
        helper.make_node("GRU", ["X", "W", "R", "B"], ["onnx::Neg_7", "state"], name="rec", hidden_size=3),
        helper.make_node("Neg", ["onnx::Neg_7"], ["out"]),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [value("X", TensorProto.FLOAT, [4, 1, 2])],
        [value("out", TensorProto.FLOAT, [4, 1, 1, 3]), value("state", TensorProto.FLOAT, [1, 1, 3])],
        weights,
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)


def test_layers_alone_keep_the_models_own_names_and_name_internal_tensors_readably(tmp_path):
    """Written as layers alone, the GRU keeps the model's input X and output 'state', and its internal Y
    ('onnx::Neg_7') becomes 'rec_Y' (it used to keep 'onnx::Neg_7'); verification (by role) still passes, and
    the artifact runs on onnxruntime under those names to the source's GRU outputs."""
    import numpy as np

    src, out = tmp_path / "m.onnx", tmp_path / "layers.onnx"
    _gru_among_other_operators(src)
    result = gp.convert(src, out, layers_only=True)
    assert result.passed
    x = np.random.default_rng(1).standard_normal((4, 1, 2)).astype(np.float32)
    got, source = _onnxruntime(out, {"X": x}), _onnxruntime(src, {"X": x})
    assert sorted(got) == ["rec_Y", "state"]
    np.testing.assert_allclose(got["rec_Y"], -source["out"], atol=1e-6)
    np.testing.assert_allclose(got["state"], source["state"], atol=1e-6)


def test_layers_alone_of_a_real_model_have_names_every_format_keeps():
    """gtcrn's 14 GRUs written alone: no internal 'onnx::...' name left, every name letters, digits and
    underscores (Core ML's rule), so Core ML renames nothing; the initial state 4 layers read ('onnx::GRU_1296')
    is one input per layer."""
    source = gp.load(REALMODELS / "gtcrn_stream_simple.onnx")
    report = gp.report(source, "coreml", layers_only=True)
    assert not [f for lay in report.layers for f in lay.targets["coreml"].findings if f.feature == "names"]
    alone = as_layers_only(source)
    names = [n for lay in alone.layers for r in INPUT_ROLES + OUTPUT_ROLES if (n := getattr(lay.interface, r))]
    assert all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n) for n in names) and len(set(names)) == len(names)
    whole = gp.report(source, "coreml").model["coreml"]  # the model asked whole again: its own names, kept whole
    assert whole is not None and whole.status.value != "unsupported", whole
    shared = [lay for lay in source.layers if lay.interface.initial_h == "onnx::GRU_1296"]
    assert [alone.layers[source.layers.index(lay)].interface.initial_h for lay in shared] == [
        f"{lay.name}_initial_h" for lay in shared
    ]


def test_the_summary_of_layers_written_alone_does_not_call_every_feature_exact(tmp_path):
    """The model finding says the operators around the layers are left out: the closing line says so instead of
    'every feature exact'."""
    src = tmp_path / "m.onnx"
    _gru_among_other_operators(src)
    line = gp.convert(src, tmp_path / "layers.onnx", layers_only=True).summary_line()
    assert "every feature exact" not in line
    assert "every feature of the layers exact; the operators around them left out, as asked" in line


@pytest.mark.parametrize("fmt", registry.writers())
def test_run_with_no_engine_runs_an_artifact_of_each_format_to_onnxruntimes_outputs(fmt, tmp_path):
    """`gatepack run` with no --engine picks what runs the artifact here (its runtime, else gatepack's executor of
    its format) and says which; the outputs are onnxruntime's on the source, in the source's names and shapes."""
    import numpy as np
    from helpers import FIXTURES, artifact_name, ort_run

    src = FIXTURES / "gru_lbr1_bidirectional.onnx"
    out = tmp_path / artifact_name(fmt)
    assert gp.convert(src, out, to=fmt).passed
    feed = {"X": np.random.default_rng(3).standard_normal((7, 3, 3)).astype(np.float32)}  # DirectML: S = 7
    np.savez(tmp_path / "in.npz", **feed)
    done = CliRunner().invoke(
        main, ["run", str(out), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")]
    )
    assert done.exit_code == 0, done.output
    engine = "native" if registry.FORMATS[fmt].runs_here else "numpy"
    assert f"--engine {engine}" in done.output
    got = np.load(tmp_path / "o.npz")
    for name, want in zip(("Y", "Y_h"), ort_run(src, feed)):
        np.testing.assert_allclose(got[name], want, atol=1e-5, rtol=1e-4, err_msg=f"{fmt} {name}")


REAL_MODELS = sorted(p.name for p in REALMODELS.glob("*.onnx"))
OWN_SHAPES = {"silero_vad_v4_lstm_in_if.onnx": {"input": (1, 512), "h": (2, 1, 64), "c": (2, 1, 64)}}


# gtcrn's fp16 IR agrees on one call and drifts over consecutive ones: fp16 weights change its GRU states a little
# each call, and the states are fed back (the fp32 IR streams within 1.5e-5; the source itself with its weights
# rounded to fp16, on onnxruntime, drifts from the source the same way, within 1e-3 of the IR: the loss, not the
# writer)
DRIFTING = {"gtcrn_stream.onnx", "gtcrn_stream_simple.onnx"}


@pytest.mark.parametrize("name", REAL_MODELS)
def test_every_real_model_converts_to_an_fp16_ir_verified_at_fp16_tolerance(name, tmp_path):
    """ovc's default output: `convert X --to openvino --compress-to-fp16 --allow-lossy` on every real model with
    a recurrent layer (DTLN's model 2 has none: its LSTM is unrolled). The IR's weights are fp16, as its XML
    declares them; verification on OpenVINO CPU (f32 inference) against onnxruntime at fp16's tolerance. A model
    whose fp16 states drift over consecutive calls is refused with the growth per call and the ways out, and
    verified on one call when the user asks for that (--frames 1)."""
    out = tmp_path / "m.xml"
    options = dict(compress_to_fp16=True, allow_lossy=True, input_shapes=OWN_SHAPES.get(name))
    if name in DRIFTING:
        with pytest.raises(gp.VerificationError, match="consecutive calls.* one call agrees.*frame 32") as err:
            gp.convert(REALMODELS / name, out, **options)
        assert "--frames" in (err.value.hint or "") and not out.exists()
        options["frames"] = 1
    result = gp.convert(REALMODELS / name, out, **options)
    assert result.verification.passed, result.verification.to_text()
    assert min(o.atol for o in result.verification.outputs) >= 1e-3  # fp16's tolerance, not fp32's 1e-5
    assert re.search(r'element_type="f16"', out.read_text())  # fp16 Constants, as ovc writes them


@pytest.mark.parametrize("target", ["onnx", "openvino"])
def test_converting_a_whole_model_asks_no_other_format_to_translate_it(target, tmp_path, monkeypatch):
    """A target that keeps the model whole needs no list of the other formats that would: Core ML's answer
    translates the whole model (a 277 MB stack to OpenVINO took 3.0 s instead of 0.65 s, 1.7 GB of memory)."""
    import shutil

    from gatepack.converters.formats.coreml import whole

    def refuse(*args, **kwargs):
        raise AssertionError("the Core ML translation ran")

    monkeypatch.setattr(whole, "translate_proto", refuse)
    src = tmp_path / "m.onnx"  # a path of its own: no verdict cached for it
    shutil.copy(REALMODELS / "dtln_model_1_lstm.onnx", src)
    out = tmp_path / ("o.onnx" if target == "onnx" else "o.xml")
    assert gp.convert(src, out, to=target).whole

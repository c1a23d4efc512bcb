"""The command line: exact output, exit codes, one-line errors, no partial outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import FIXTURES, ROOT, Config, build_model
from onnx import helper

from gatepack.cli import main
from gatepack.converters import registry

FIXTURE_NAMES = ["gru_lbr0", "gru_lbr1_bidirectional", "gru_seqlens", "gru_layout1", "gru_clip", "rnn_activations"]


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_inspect_exact_output(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke("inspect", "fixtures/gru_seqlens.onnx")
    assert result.exit_code == 0
    assert result.output == (
        "fixtures/gru_seqlens.onnx (onnx, opset 14): 1 recurrent layer\n"
        "rec: GRU reverse, I=3, H=4, linear_before_reset=1, no clip, layout=0, float32\n"
        "  activations: Sigmoid, Tanh\n"
        "  X             X [S, N, 3] float32\n"
        "  sequence_lens sequence_lens [N] int32\n"
        "  initial_h     initial_h [1, N, 4] float32\n"
        "  Y             Y [S, 1, N, 4] float32\n"
        "  Y_h           Y_h [1, N, 4] float32\n"
        "  parameters: 108\n"  # W 12x3 + R 12x4 + B 24
    )


def test_inspect_json_and_notes(monkeypatch):
    monkeypatch.chdir(ROOT)
    data = json.loads(invoke("inspect", "fixtures/rnn_activations.onnx", "--json").output)
    (layer,) = data["layers"]
    assert layer["activations"] == [
        [{"name": "LeakyRelu", "alpha": pytest.approx(0.1)}],
        [{"name": "HardSigmoid", "alpha": pytest.approx(0.3), "beta": pytest.approx(0.4)}],
    ]
    assert layer["tensors"]["Y"] == {"name": "Y", "shape": ["S", 2, "N", 4]}
    assert layer["parameters"] == 2 * (4 * 3 + 4 * 4 + 8)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("engine", ["native", "numpy"])
def test_run_matches_expected_fixture_outputs(name, engine, tmp_path):
    out = tmp_path / "out.npz"
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(FIXTURES / f"{name}.onnx"),
            "--inputs",
            str(FIXTURES / f"{name}.expected.npz"),
            "-o",
            str(out),
            "--engine",
            engine,
        ],
    )
    if engine == "native" and name == "gru_layout1":
        assert result.exit_code == 6 and "layout == 1" in result.output and "--engine numpy" in result.output
        assert not out.exists()
        return
    assert result.exit_code == 0, result.output
    expected = np.load(FIXTURES / f"{name}.expected.npz")
    got = np.load(out)
    for key in ("Y", "Y_h"):
        np.testing.assert_allclose(got[key], expected[key], atol=1e-5, rtol=1e-4)


def test_run_keeps_outputs_named_like_savez_parameters(tmp_path):
    """Outputs named ``allow_pickle`` and ``file`` are saved under their names (np.savez(f, **outputs) took the
    first for its flag, dropping it, and refused the second), equal to onnxruntime's."""
    import onnxruntime as ort

    model = build_model(Config())
    renamed = {"Y": "allow_pickle", "Y_h": "file"}
    model.graph.node[0].output[:] = [renamed[o] for o in model.graph.node[0].output]
    for value in model.graph.output:
        value.name = renamed[value.name]
    path, inputs, out = tmp_path / "gru.onnx", tmp_path / "in.npz", tmp_path / "out.npz"
    onnx.save(model, path)
    x = np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32)
    np.savez(inputs, X=x)
    result = invoke("run", path, "--inputs", inputs, "-o", out, "--engine", "native")
    assert result.exit_code == 0, result.output
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with np.load(out) as got:
        assert sorted(got.files) == ["allow_pickle", "file"]
        np.testing.assert_array_equal(got["allow_pickle"], expected[0])
        np.testing.assert_array_equal(got["file"], expected[1])


def test_convert_onnx_to_onnx_layout_and_opset(tmp_path):
    out = tmp_path / "seq_major.onnx"
    result = invoke(
        "convert", FIXTURES / "gru_layout1.onnx", "--to", "onnx", "-o", out, "--layout", "0", "--opset", "7"
    )
    assert result.exit_code == 0, result.output
    assert "verification passed" in result.output
    model = onnx.load(str(out))
    assert model.opset_import[0].version == 7 and [n.op_type for n in model.graph.node] == ["GRU"]
    # the converted model runs on onnxruntime (the layout-1 source does not)
    run = invoke("run", out, "--inputs", FIXTURES / "gru_lbr1_bidirectional.expected.npz", "-o", tmp_path / "o.npz")
    assert run.exit_code == 3 and "missing input" in run.output  # different interface: sequence_lens, initial_h needed


def test_convert_json_result(tmp_path):
    result = invoke("convert", FIXTURES / "gru_clip.onnx", "-o", tmp_path / "x.onnx", "--json")
    data = json.loads(result.output)
    assert data["verification"]["passed"] is True
    assert {f["feature"] for f in data["findings"]["rec"]} >= {"cell", "clip", "activations", "layout"}


def test_report_formats(tmp_path):
    text = invoke("report", FIXTURES / "gru_layout1.onnx").output
    assert "openvino" in text and "unsupported" in text and "repacked" in text
    data = json.loads(invoke("report", FIXTURES / "gru_layout1.onnx", "--to", "onnx", "--format", "json").output)
    target = data["layers"][0]["targets"]["onnx"]
    assert target["status"] == "repacked" and target["findings"][0]["feature"] == "layout"
    md = tmp_path / "r.md"
    assert invoke("report", FIXTURES / "gru_lbr0.onnx", "--format", "markdown", "-o", md).exit_code == 0
    assert md.read_text().startswith("# gatepack report")
    html = invoke("report", FIXTURES / "gru_lbr0.onnx", "--format", "html").output
    assert "<table id='matrix'>" in html


def test_formats_lists_every_format():
    """One row per registry entry, saying what gatepack does with it (every format today reads and writes)."""
    rows = {line.split()[0]: line for line in invoke("formats").output.splitlines()[1:] if not line.startswith(" ")}
    assert list(rows) == list(registry.FORMATS)
    for name, info in registry.FORMATS.items():
        status = ", ".join(word for word, on in (("reads", info.reads), ("writes", info.writes)) if on)
        assert f" {status} " in rows[name] and info.artifact in rows[name] and info.runtime in rows[name]
    assert "not yet" not in "".join(rows.values())
    listed = json.loads(invoke("formats", "--json").output)
    assert [entry["name"] for entry in listed] == list(registry.FORMATS)


def test_verify_command_passes_and_fails(tmp_path):
    same = invoke("verify", FIXTURES / "gru_lbr0.onnx", FIXTURES / "gru_lbr0.onnx", "--json")
    assert same.exit_code == 0 and json.loads(same.output)["passed"]
    other = tmp_path / "other.onnx"
    cfg = Config(cell="GRU", direction="forward", lbr=0, initial_h=True, S=5, N=2, I=3, H=4, seed=77)
    onnx.save(build_model(cfg), other)
    differ = CliRunner().invoke(main, ["verify", str(FIXTURES / "gru_lbr0.onnx"), str(other)])
    assert differ.exit_code == 5 and "FAIL" in differ.output


# ------------------------------------------------------------------------------------ bad input


def _model_with(tmp_path, name: str, mutate) -> str:
    model = build_model(Config(cell="GRU", seed=1))
    mutate(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return str(path)


def _set_attr(model, key, value):
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != key]
    del node.attribute[:]
    node.attribute.extend(kept)
    if value is not None:
        node.attribute.append(helper.make_attribute(key, value))


def _weights_from_input(model):
    model.graph.initializer.pop(0)  # W
    model.graph.input.append(helper.make_tensor_value_info("W", 1, [1, 18, 5]))


BAD = {
    "truncated": (
        lambda p: p.write_bytes((FIXTURES / "gru_lbr0.onnx").read_bytes()[:200]),
        "not a readable ONNX model",
    ),
    "not_onnx": (lambda p: p.write_text("this is not a model\n"), "not a readable ONNX model"),
    "no_recurrent": (None, "no recurrent (GRU/RNN/LSTM) layer found"),
    "wrong_shape": (
        lambda m: _set_attr(m, "hidden_size", 5),
        "W has shape [1, 18, 5], expected [1, 15, input_size] for hidden_size=5",
    ),
    "no_hidden_size": (lambda m: _set_attr(m, "hidden_size", None), "hidden_size is missing"),
    "unknown_activation": (lambda m: _set_attr(m, "activations", ["Sigmoid", "Swish"]), "unknown activation 'Swish'"),
    "weights_from_input": (_weights_from_input, "W 'W' is a graph input, not a constant"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_gives_one_line_error_and_no_output(case, tmp_path):
    action, message = BAD[case]
    if case in ("truncated", "not_onnx"):
        path = tmp_path / f"{case}.onnx"
        action(path)
        path = str(path)
    elif case == "no_recurrent":
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", 1, [2])],
            [helper.make_tensor_value_info("y", 1, [2])],
        )
        path = str(tmp_path / "relu.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    else:
        path = _model_with(tmp_path, case, action)
    out = tmp_path / "out" / "converted.onnx"
    result = CliRunner().invoke(main, ["convert", path, "--to", "onnx", "-o", str(out)])
    assert result.exit_code == 3, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gatepack: error: ") and "Traceback" not in result.output
    assert path in lines[0] and message in lines[0]
    if case not in ("truncated", "not_onnx", "no_recurrent"):
        assert "layer 'rec'" in lines[0]
    out_dir = tmp_path / "out"
    assert not out_dir.exists() or not any(out_dir.iterdir()), "a failed run left files behind"


def test_sequence_lens_out_of_range(tmp_path):
    data = dict(np.load(FIXTURES / "gru_seqlens.expected.npz"))
    data["sequence_lens"] = np.array([2, 9, 1], np.int32)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **data)
    out = tmp_path / "o.npz"
    result = CliRunner().invoke(
        main, ["run", str(FIXTURES / "gru_seqlens.onnx"), "--inputs", str(bad), "-o", str(out), "--engine", "numpy"]
    )
    assert result.exit_code == 3
    assert "layer 'rec'" in result.output and "sequence_lens value 9 is outside [0, 6]" in result.output
    assert not out.exists()


def test_refusals_and_usage_errors(tmp_path):
    refused = CliRunner().invoke(
        main, ["convert", str(FIXTURES / "gru_clip.onnx"), "--to", "bnns", "-o", str(tmp_path / "bundle")]
    )
    assert refused.exit_code == 4 and "unsupported: clip" in refused.output and not (tmp_path / "bundle").exists()
    forced = CliRunner().invoke(
        main,
        [
            "convert",
            str(FIXTURES / "gru_lbr1_bidirectional.onnx"),
            "--to",
            "coreml",
            "--strategy",
            "native",
            "--minimum-deployment-target",
            "iOS17",
            "-o",
            str(tmp_path / "m.mlpackage"),
        ],
    )
    assert forced.exit_code == 4 and "reset_after (iOS18)" in forced.output and not (tmp_path / "m.mlpackage").exists()
    overwrite = CliRunner().invoke(
        main, ["convert", str(FIXTURES / "gru_lbr0.onnx"), "--to", "onnx", "-o", str(FIXTURES / "gru_lbr0.onnx")]
    )
    assert overwrite.exit_code == 2 and "never writes over what it reads" in overwrite.output
    usage = CliRunner().invoke(main, ["convert", str(FIXTURES / "gru_lbr0.onnx")])
    assert usage.exit_code == 2


def test_console_script_and_debug_traceback(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("nope")
    plain = subprocess.run(
        [sys.executable, "-c", "from gatepack.cli import main; main()", "inspect", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert plain.returncode == 3 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    debug = subprocess.run(
        [sys.executable, "-c", "from gatepack.cli import main; main()", "--debug", "inspect", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert "Traceback" in debug.stderr


def test_help_does_not_import_heavy_frameworks():
    code = (
        "import sys; from gatepack.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit: "
        "pass\nheavy = ('onnx', 'onnxruntime', 'openvino', 'coremltools', 'numpy')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout
    assert out.strip().endswith("[]")


def test_strategy_applies_to_onnx(tmp_path):
    """``--strategy decomposed`` writes ONNX's elementary Loop (tests/test_onnx_elementary.py checks its numbers)."""
    result = CliRunner().invoke(
        main,
        [
            "convert",
            str(FIXTURES / "gru_lbr0.onnx"),
            "--to",
            "onnx",
            "-o",
            str(tmp_path / "o.onnx"),
            "--strategy",
            "decomposed",
        ],
    )
    assert result.exit_code == 0 and "decomposed cell" in result.output, result.output
    assert "Loop" in {node.op_type for node in onnx.load(str(tmp_path / "o.onnx")).graph.node}


def test_progress_goes_to_stderr_only_and_quiet_silences_it(tmp_path):
    runner = CliRunner()
    env = {"GATEPACK_PROGRESS_DELAY": "0"}  # show progress at once (normally after one second)
    args = ["convert", str(FIXTURES / "gru_lbr1_bidirectional.onnx"), "-o", str(tmp_path / "m.xml")]
    shown = runner.invoke(main, args + ["--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "verifying layer 'rec'" in shown.stderr and "1/1" in shown.stderr
    assert json.loads(shown.stdout)["verification"]["passed"]  # stdout is the JSON alone
    quiet = runner.invoke(main, args + ["-q"], env=env)
    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == ""
    verified = runner.invoke(
        main, ["verify", str(FIXTURES / "gru_lbr1_bidirectional.onnx"), str(tmp_path / "m.xml"), "--json"], env=env
    )
    assert verified.exit_code == 0 and "verified" in verified.stderr and json.loads(verified.stdout)["passed"]
    slow_only = runner.invoke(main, args + ["--json"], env={"GATEPACK_PROGRESS_DELAY": "1000"})
    assert slow_only.exit_code == 0 and slow_only.stderr == ""  # fast conversions print no progress


def test_help_names_every_format_and_every_holder_of_quantized_weights():
    """The top-level help names each format gatepack converts (LiteRT too), and --quantize-weights' and
    --quantize-weights-scope's help name exactly the targets whose records hold them (asked of the registry)."""
    runner = CliRunner()
    top = " ".join(runner.invoke(main, ["--help"]).output.split())
    assert "LiteRT" in top and "BNNS" in top
    convert = " ".join(runner.invoke(main, ["convert", "--help"]).output.split())
    weights = convert.split("--quantize-weights [int8|int4]")[1].split("--quantize-block-size")[0]
    holders = [name for name, info in registry.FORMATS.items() if info.quantizes_weights is not None]
    others = [name for name in registry.FORMATS if name not in holders]
    assert all(name in weights for name in holders) and not any(f" {name}" in weights for name in others)
    scope = convert.split("--quantize-weights-scope [layers|model]")[1].split("--opset")[0]
    scoped = [name for name, info in registry.FORMATS.items() if info.model_weights]
    assert all(name in scope for name in scoped) and not any(
        f" {name}" in scope for name in registry.FORMATS if name not in scoped
    )


def test_stateful_help_says_litert_holds_whole_models_state_pairs_too():
    """--stateful's help: LiteRT's variable tensors hold a layer's own states and a whole streaming model's state
    pairs (it said the layer's own only, after whole models had gained them: docs/reference.md)."""
    convert = " ".join(CliRunner().invoke(main, ["convert", "--help"]).output.split())
    stateful = convert.split("--stateful / --no-stateful")[1].split("--seq-length")[0]
    litert = stateful.split("litert variable tensors")[1]
    assert "a layer's own initial and final states" in litert and "whole streaming model's state pairs" in litert


def test_a_missing_inputs_file_is_named_once(tmp_path):
    """``--inputs`` naming no file: one line naming it once (it read 'X.npz: X.npz: no such file'), exit 3."""
    missing = tmp_path / "absent.npz"
    out = tmp_path / "o.npz"
    result = CliRunner().invoke(
        main, ["run", str(FIXTURES / "gru_seqlens.onnx"), "--inputs", str(missing), "-o", str(out), "--engine", "numpy"]
    )
    assert result.exit_code == 3 and result.output.count(str(missing)) == 1, result.output

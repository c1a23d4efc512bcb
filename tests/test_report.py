"""The report as a product: it agrees with what `convert` does on the generated matrix × every
target; every pair of formats converts and verifies; JSON against its schema; Markdown against a
reviewed file; the HTML page rendered by a real headless browser; many-layer models stay readable."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import (
    FIXTURES,
    REALMODELS,
    Config,
    artifact_name,
    build_model,
    chromium,
    lstm_matrix,
    matrix,
    run_browser,
    shipped_writers,
)

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry
from gatepack.converters.findings import Status
from gatepack.converters.reporting import report_schema

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = report_schema()
TARGETS = registry.writers()
MATRIX = matrix() + lstm_matrix()[::8]  # GRU/RNN, and every eighth LSTM configuration
# documented: they compute float64 in float32 (LiteRT's sequence kernels and its elementary form: FLOAT32, §11)
FLOAT32_RUNTIMES = {"openvino", "directml", "coreml", "bnns", "litert"}


def expected_verdict(cfg: Config, target: str) -> tuple[str, set[str]]:
    """What converting ``cfg`` to ``target`` must do, decided from the configuration and the targets'
    documented limits (docs/conventions.md), not from gatepack: ``("refused", features)``,
    ``("lossy", features)`` or ``("converts", set())``.

    * clip (a clip that applies: GRU clip > 0, RNN clip >= 0): DirectML's GRU/RNN descs have no clip
      field; BNNS's gru/rnn take no clip.
    * BNNS also takes no sequence lengths and only parameterless sigmoid/tanh/relu.
    * float64 is lossy where the runtime computes in float32 (``FLOAT32_RUNTIMES``): OpenVINO's CPU plugin
      computes in float32; DirectML's recurrent operators, Core ML, BNNS and LiteRT take float32. ONNX keeps it.
    * LSTM: BNNS's lstm also lacks peepholes and input/forget coupling; DirectML's LSTM desc has a clip;
      OpenVINO and Core ML decompose what their ops lack.

    The features are every blocking finding's (unsupported and lossy).
    """
    clip = cfg.clip is not None and cfg.clip >= 0
    refused: set[str] = set()
    if (target == "directml" and clip and cfg.cell != "LSTM") or (target == "bnns" and clip):
        refused.add("clip")
    if target == "bnns" and cfg.cell == "LSTM":
        refused |= {name for name in ("peepholes", "input_forget") if getattr(cfg, name)}
    if target == "bnns":
        if cfg.seq_lens != "none":
            refused.add("sequence_lens")
        if set(cfg.activations or []) - {"Sigmoid", "Tanh", "Relu"}:
            refused.add("activations")
    lossy = {"dtype"} if cfg.dtype == "float64" and target in FLOAT32_RUNTIMES else set()
    if refused:
        return "refused", refused | lossy
    return ("lossy", lossy) if lossy else ("converts", set())


@pytest.mark.matrix
@pytest.mark.parametrize("target", TARGETS)
def test_report_agrees_with_convert(target: str, tmp_path):
    """On the whole generated matrix: what the report says of each configuration is what the
    configuration demands (``expected_verdict``, independent of gatepack), and ``convert`` does
    exactly that — refuses with the report's reason and writes nothing, refuses lossy without
    --allow-lossy, or converts and verifies (against the source's runtime) with the report's findings."""
    counts: dict[str, int] = {}
    for k, cfg in enumerate(MATRIX):
        src, out = tmp_path / f"source{k}.onnx", tmp_path / f"{k}" / artifact_name(target)
        out.parent.mkdir()
        onnx.save(build_model(cfg), src)
        verdict = gp.report(src, to=target).layers[0].targets[target]
        outcome, features = expected_verdict(cfg, target)
        counts[outcome] = counts.get(outcome, 0) + 1
        blocking = {f.feature for f in verdict.findings if f.status in (Status.UNSUPPORTED, Status.LOSSY)}
        assert blocking == features, f"{cfg.label()}: the report blocks on {blocking}, expected {features}"
        if outcome == "refused":
            assert verdict.status is Status.UNSUPPORTED, cfg.label()
            first = next(f for f in verdict.findings if f.status is Status.UNSUPPORTED)
            assert all(f.alternative for f in verdict.findings if f.status is Status.UNSUPPORTED)
            with pytest.raises(gp.RefusedError) as refused:
                gp.convert(src, out, to=target, allow_lossy=True)
            assert f"unsupported: {first.feature}: {first.detail}" in str(refused.value)
            assert not out.exists()
            continue
        if outcome == "lossy":
            assert verdict.status is Status.LOSSY, cfg.label()
            with pytest.raises(gp.RefusedError, match="lossy"):
                gp.convert(src, out, to=target)
            assert not out.exists()
        result = gp.convert(src, out, to=target, allow_lossy=True)
        assert result.passed, f"{cfg.label()}: {result.verification.to_text()}"
        assert [f.to_json() for f in result.findings["rec"]] == [f.to_json() for f in verdict.findings]
    assert all(counts.get(o, 0) for o in ("converts",)), counts  # every target converts part of the matrix


LAYERS = {
    "gru_lbr0_h0": Config(lbr=0, initial_h=True, seed=11),
    "gru_lbr1_bidirectional": Config(lbr=1, direction="bidirectional", seed=12),
    "rnn_reverse_h0": Config(cell="RNN", direction="reverse", initial_h=True, seed=13),
    "gru_batch_major": Config(lbr=1, layout=1, initial_h=True, seed=14),
    "gru_sequence_lens": Config(lbr=1, seq_lens="mixed", seed=15),
    "lstm_peepholes_bidirectional": Config(
        cell="LSTM", direction="bidirectional", peepholes=True, initial_h=True, initial_c=True, seed=16
    ),
}
REFUSED_BY_BNNS = {"gru_sequence_lens": "sequence_lens", "lstm_peepholes_bidirectional": "peepholes"}


def _holds(target: str, name: str) -> bool:
    return not (target == "bnns" and name in REFUSED_BY_BNNS)  # BNNS has no sequence lengths and no peepholes


@pytest.mark.parametrize("name", LAYERS)
def test_every_pair_of_formats_converts_and_verifies(name, tmp_path):
    """ONNX -> A, then A -> B for every pair of formats gatepack writes, each verified on both sides' own runtimes or
    format-semantics executors; pairs that cannot hold the layer are refused, never written."""
    src = tmp_path / "src.onnx"
    onnx.save(build_model(LAYERS[name]), src)
    firsts = {}
    for a in TARGETS:
        if _holds(a, name):
            firsts[a] = tmp_path / f"first_{a}" / artifact_name(a)
            firsts[a].parent.mkdir()
            assert gp.convert(src, firsts[a], to=a).verification.passed
    for a, path in firsts.items():
        for b in TARGETS:
            out = tmp_path / f"{a}_to_{b}" / artifact_name(b)
            out.parent.mkdir()
            if not _holds(b, name):
                with pytest.raises(gp.RefusedError, match=REFUSED_BY_BNNS[name]):
                    gp.convert(path, out, to=b)
                assert not out.exists()
                continue
            result = gp.convert(path, out, to=b)
            assert result.verification.passed, f"{a} -> {b}: {result.verification.to_text()}"
            expected = {"Y", "Y_h", "Y_c"} if LAYERS[name].cell == "LSTM" else {"Y", "Y_h"}
            assert {o.output for o in result.verification.outputs} == expected


@pytest.mark.parametrize(
    "model",
    [
        "gru_clip.onnx",
        "gru_seqlens.onnx",
        "rnn_activations.onnx",
        "realmodels/ulunas_stream_simple.onnx",
        "realmodels/dfn3_enc.onnx",
        "realmodels/dtln_model_1_lstm.onnx",
        "realmodels/silero_vad_v4_lstm_in_if.onnx",
    ],
)
def test_json_report_validates_against_its_schema(model):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    report = json.loads(CliRunner().invoke(main, ["report", str(FIXTURES / model), "--format", "json"]).output)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert {t for lay in report["layers"] for t in lay["targets"]} == set(TARGETS)


@pytest.mark.parametrize("fixture", ["gru_clip", "gru_lbr1_bidirectional"])
def test_markdown_report_equals_the_reviewed_file(fixture):
    """tests/expected/*.report.md were read line by line against docs/conventions.md when written; a
    change to any finding shows up here as a diff to review."""
    report = gp.report(FIXTURES / f"{fixture}.onnx", to=shipped_writers())  # what the reviewed file holds
    text = report.render("markdown").replace(str(ROOT) + "/", "")
    assert text == (ROOT / "tests" / "expected" / f"{fixture}.report.md").read_text()


def test_many_layers_stay_readable():
    runner = CliRunner()
    report = runner.invoke(main, ["report", str(REALMODELS / "ulunas_stream_simple.onnx")]).output.splitlines()
    # a row per layer (28), then per target its findings, identical ones grouped: a few lines each, not one per layer
    assert len(report) < 30 + 10 * len(TARGETS)
    assert any("(all 28 layers)" in line for line in report) and any("14 layers: " in line for line in report)
    assert any("names: 28 variants" in line for line in report)
    inspect = runner.invoke(main, ["inspect", str(REALMODELS / "ulunas_stream_simple.onnx")]).output.splitlines()
    layers = inspect[inspect.index("recurrent layers:") :]  # after the model's own 4 inputs and 4 outputs
    assert len(layers) < 50 and any(line.startswith("  10 x GRU bidirectional") for line in layers)


def test_html_report_renders_its_matrix_in_a_browser(tmp_path):
    if chromium() is None:
        pytest.skip(
            "no chromium here: .ci/run installs Debian's chromium when it can; without it this screenshot test "
            "cannot run"
        )
    from PIL import Image

    page = tmp_path / "report.html"
    assert (
        CliRunner()
        .invoke(main, ["report", str(FIXTURES / "gru_clip.onnx"), "--format", "html", "-o", str(page)])
        .exit_code
        == 0
    )
    shot = tmp_path / "shot.png"
    done = run_browser(tmp_path, "--hide-scrollbars", "--window-size=1000,400", f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), done.stderr[-1000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)

    def area(hex_colour: str) -> int:
        rgb = [int(hex_colour[i : i + 2], 16) for i in (0, 2, 4)]
        return int(np.all(pixels == rgb, axis=1).sum())

    # gru_clip: onnx exact (green), openvino folded, directml and bnns unsupported (red), coreml decomposed
    assert area("d4f7d4") > 1000 and area("f6b0b0") > 2 * 1000 and area("fbe7b5") > 1000 and area("f0f3c8") > 1000
    dark = int((pixels.sum(axis=1) < 200).sum())
    assert dark > 2000  # the text (title, layer, statuses) was drawn


def test_verify_compares_any_two_artifacts_of_a_layer(tmp_path):
    """`gatepack verify A B` for every pair of formats holding the same layer: A's random inputs
    mapped into B's convention, both run on their own runtimes; JSON per output; exit 5 when a
    different layer is given."""
    cfg = LAYERS["gru_lbr1_bidirectional"]
    onnx.save(build_model(cfg), tmp_path / "src.onnx")
    artifacts = {}
    for fmt in TARGETS:
        artifacts[fmt] = tmp_path / fmt / artifact_name(fmt)
        artifacts[fmt].parent.mkdir()
        gp.convert(tmp_path / "src.onnx", artifacts[fmt], to=fmt, verify=False)
    runner = CliRunner()
    for a in TARGETS:
        for b in TARGETS:
            done = runner.invoke(main, ["verify", str(artifacts[a]), str(artifacts[b]), "--json"])
            assert done.exit_code == 0, f"{a} vs {b}: {done.output}"
            result = json.loads(done.stdout)
            assert result["passed"] and {o["output"] for o in result["outputs"]} == {"Y", "Y_h"}
            assert all({"max_abs_error", "max_rel_error", "atol", "rtol"} <= set(o) for o in result["outputs"])
    from dataclasses import replace

    onnx.save(build_model(replace(cfg, seed=99)), tmp_path / "other.onnx")  # same shapes, other weights
    differs = runner.invoke(main, ["verify", str(tmp_path / "other.onnx"), str(artifacts["bnns"]), "--json"])
    assert differs.exit_code == 5 and not json.loads(differs.stdout)["passed"]

"""LSTM: the executor and the ONNX reader/writer against onnxruntime (the oracle) on a generated matrix
of >= 300 configurations, against an independent float64 transcription where onnxruntime has no
kernel (float64), and against ONNX's published LSTM backend cases. Targets that do not write LSTM yet
refuse it with the reason."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.backend.test.case.node.lstm as lstm_cases
import pytest
from click.testing import CliRunner
from helpers import ACTIVATIONS, Config, build_model, inputs, lstm_matrix, ort_reference, ort_run, outputs_to_layout0
from helpers import to_layout as to_config_layout
from oracle import reference
from test_onnx_backend_cases import collect, published_model

import gatepack as gp
from gatepack.cli import main
from gatepack.converters.executor import run_layer

MATRIX = lstm_matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-9, 1e-8), "float16": (2e-3, 2e-3)}


def expected_outputs(cfg: Config, feed0: dict) -> tuple[np.ndarray, ...]:
    """Y, Y_h, Y_c in layout 0: onnxruntime's (float32 for float16 sources: the conversion is exact),
    or the independent float64 transcription for float64 (onnxruntime has no float64 LSTM kernel)."""
    return reference(cfg, feed0) if cfg.dtype == "float64" else ort_reference(cfg, feed0)


DIVERGED = 1e3  # |value| no LSTM with saturating activations reaches here; only unbounded gates and cells do


def assert_close(cfg: Config, ours: tuple, expected: tuple, atol: float, rtol: float, dtype: str = "") -> None:
    """``ours`` agrees with ``expected`` (layout 0). Entries the oracle could not represent (inf/NaN, or
    beyond float16's range for a float16 computation) are skipped, if few. A sequence whose values
    diverged (unbounded gates and cells: Relu, Affine ...) carries the rounding of its huge
    intermediates into every later value, in any two implementations; there the bound is relative to
    the largest value the sequence reached (1e-6 of it), and it stays tight everywhere else."""
    assert len(ours) == len(expected) == 3
    expected = [np.asarray(b, np.float64) for b in expected]
    magnitude = np.nan_to_num(np.abs(expected[0]), posinf=0, nan=0).max(axis=(0, 3))  # [D, N] per sequence
    for final in expected[1:]:
        magnitude = np.maximum(magnitude, np.nan_to_num(np.abs(final), posinf=0, nan=0).max(axis=2))
    slack = np.where(magnitude > DIVERGED, 1e-6 * magnitude, 0.0)
    for role, a, b in zip(("Y", "Y_h", "Y_c"), ours, expected):
        representable = np.isfinite(b) & (np.abs(b) < (6e4 if dtype == "float16" else np.inf))
        assert representable.mean() >= 0.5, f"{role}: the oracle overflowed on most of this case"
        bound = atol + (slack[None, :, :, None] if role == "Y" else slack[:, :, None])
        a = np.asarray(a, np.float64)
        bad = representable & ~(np.abs(a - b) <= bound + rtol * np.abs(b))
        assert not bad.any(), (
            f"{role}: {int(bad.sum())} of {b.size} differ, worst {np.abs(a - b)[bad].max():.3g} "
            f"(ours {a[bad][:3]}, expected {b[bad][:3]})"
        )


def assert_round_trip_keeps_every_weight(cfg: Config, tmp_path, target: str, artifact: str) -> None:
    """ONNX -> ``target`` -> ONNX, each step verified: W, R, Wb, Rb and P bit-exact, clip and
    input_forget kept (for targets that keep the biases apart)."""
    source, middle, back = tmp_path / "m.onnx", tmp_path / artifact, tmp_path / "back.onnx"
    onnx.save(build_model(cfg), source)
    options = {"seq_length": cfg.S, "batch_size": cfg.N} if target == "directml" else {}
    assert gp.convert(source, middle, to=target, **options).verification.passed
    assert gp.convert(middle, back, to="onnx").verification.passed
    (a,), (b,) = gp.load(source).layers, gp.load(back).layers
    assert (b.clip, b.input_forget, b.has_peepholes) == (a.clip, a.input_forget, a.has_peepholes)
    for p, q in zip(a.directions, b.directions):
        for key in ("W", "R", "Wb", "Rb", "P"):
            np.testing.assert_array_equal(getattr(q, key), getattr(p, key))


PEEPHOLE_CASES = [c for c in MATRIX if c.peepholes and c.dtype == "float32"]


def assert_refused_when_forced(cfg: Config, tmp_path, target: str, artifact: str, reason: str) -> None:
    """``--strategy native`` to ``target`` is refused naming ``reason``, and nothing is written."""
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    with pytest.raises(gp.RefusedError, match=reason):
        gp.convert(tmp_path / "m.onnx", tmp_path / artifact, to=target, strategy="native")
    assert not (tmp_path / artifact).exists()


def test_matrix_is_large_and_covers_every_feature():
    assert len(MATRIX) >= 300
    assert {c.direction for c in MATRIX} == {"forward", "reverse", "bidirectional"}
    assert {c.seq_lens for c in MATRIX} == {"none", "full", "mixed", "zero"}
    assert {c.dtype for c in MATRIX} == {"float16", "float32", "float64"}
    for flag in ("peepholes", "input_forget", "initial_h", "initial_c", "layout", "bias"):
        assert {bool(getattr(c, flag)) for c in MATRIX} == {False, True}, flag
    assert any(c.clip for c in MATRIX) and any(c.clip is None for c in MATRIX)
    assert {a for c in MATRIX if c.activations and c.dtype != "float16" for a in c.activations[:1]} == set(ACTIVATIONS)
    assert any(c.D == 2 and c.activations and c.activations[:3] != c.activations[3:] for c in MATRIX)
    assert any(c.H == 1 for c in MATRIX) and any(c.I == 1 for c in MATRIX) and any(c.S == 1 for c in MATRIX)


@pytest.mark.matrix
def test_few_configurations_diverge():
    # the relative bound for diverged sequences must stay the exception, not the rule
    diverged = 0
    for cfg in MATRIX:
        outputs = expected_outputs(cfg, inputs(cfg))
        diverged += max(float(np.nan_to_num(np.abs(o), posinf=np.inf).max()) for o in outputs) > DIVERGED
    assert diverged < len(MATRIX) // 10, diverged


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_executor_and_onnx_round_trip_match_the_oracle(cfg: Config, tmp_path):
    source = tmp_path / "lstm.onnx"
    onnx.save(build_model(cfg), source)
    (layer,) = gp.load(source).layers
    assert layer.cell.value == "lstm"
    assert (layer.has_peepholes, layer.input_forget) == (cfg.peepholes, bool(cfg.input_forget))
    feed0 = inputs(cfg)
    feed = to_config_layout(cfg, feed0)
    expected = expected_outputs(cfg, feed0)
    atol, rtol = TOLERANCE[cfg.dtype]
    ours = run_layer(layer, *(feed.get(k) for k in ("X", "sequence_lens", "initial_h", "initial_c")))
    assert all(o.dtype == np.dtype(cfg.dtype) for o in ours)
    assert_close(cfg, outputs_to_layout0(cfg, *ours), expected, atol, rtol, dtype=cfg.dtype)

    # ONNX -> ONNX: verified by gatepack, weights bit-exact, and the written file on onnxruntime.
    written = tmp_path / "back.onnx"
    result = gp.convert(source, written, to="onnx")
    assert result.verification.passed and {o.output for o in result.verification.outputs} == {"Y", "Y_h", "Y_c"}
    (back,) = gp.load(written).layers
    for p, q in zip(layer.directions, back.directions):
        for key in ("W", "R", "Wb", "Rb"):
            np.testing.assert_array_equal(getattr(q, key), getattr(p, key))
        assert (p.P is None) == (q.P is None)
        if p.P is not None:
            np.testing.assert_array_equal(q.P, p.P)
    assert (back.input_forget, back.clip, back.interface) == (layer.input_forget, layer.clip, layer.interface)
    if cfg.dtype != "float64":
        names = {i.name for i in onnx.load(str(written)).graph.input}
        run = ort_run(written, {k: v for k, v in feed.items() if k in names})
        tol = (atol, rtol) if cfg.dtype == "float32" else (5e-3, 5e-3)  # float16 computed in float16 there
        assert_close(cfg, outputs_to_layout0(cfg, *run), expected, *tol, dtype=cfg.dtype)


@pytest.mark.parametrize("cfg", [c for c in MATRIX if c.dtype == "float32"][:40], ids=lambda c: c.label())
def test_the_float64_transcription_agrees_with_onnxruntime(cfg: Config):
    # The oracle used for float64 is itself checked against onnxruntime where both run.
    feed0 = inputs(cfg)
    assert_close(cfg, reference(cfg, feed0), ort_reference(cfg, feed0), 1e-5, 1e-4)


def test_input_forget_of_the_wrong_type_is_refused_and_any_nonzero_value_couples(tmp_path):
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


# ---------------------------------------------------------------------------- published cases

CASES = collect(lstm_cases, lstm_cases.LSTM)


def test_published_cases_were_found():
    names = {c[0] for c in CASES}
    assert len(CASES) >= 4 and {"test_lstm_with_peepholes", "test_lstm_batchwise"} <= names


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_published_case(case, tmp_path):
    name, node, values, outputs = case
    path, feed = published_model(name, node, values, tmp_path, constants={1, 2, 3, 7})
    (layer,) = gp.load(path).layers
    produced = run_layer(layer, *(feed.get(k) for k in (0, 4, 5, 6)))
    present = [k for k, out in enumerate(node.output) if out]
    assert len(present) == len(outputs)
    for k, expected in zip(present, outputs):
        np.testing.assert_allclose(produced[k], expected, atol=1e-5, rtol=1e-4, err_msg=f"{name} output {k}")
    # and the ONNX gatepack writes for it gives the same outputs on onnxruntime
    result = gp.convert(path, tmp_path / "back.onnx", to="onnx")
    assert result.verification.passed


# ---------------------------------------------------------------------------- the cell seam


def test_a_format_without_the_cell_refuses_it_with_the_alternative(tmp_path, monkeypatch):
    """A format whose registry entry does not list LSTM never sees the layer: report and convert refuse
    the cell, naming the formats that write it (every format writes LSTM today, so one is narrowed)."""
    from dataclasses import replace as narrowed

    from gatepack.converters import registry

    monkeypatch.setitem(registry.FORMATS, "bnns", narrowed(registry.FORMATS["bnns"], cells=("gru", "rnn")))
    source = tmp_path / "lstm.onnx"
    onnx.save(build_model(Config(cell="LSTM", direction="bidirectional", seed=5)), source)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(source), "-o", str(out), "--to", "bnns", "--json"])
    assert result.exit_code == 4, result.output
    error = json.loads(result.stdout)
    assert "does not write LSTM" in error["error"] and "onnx or openvino or directml or coreml" in error["hint"]
    assert not out.exists()
    with pytest.raises(gp.RefusedError, match="does not write LSTM"):
        gp.save(gp.load(source), out, "bnns")
    assert not out.exists()
    (finding,) = [f for f in gp.report(source, to=["bnns"]).layers[0].targets["bnns"].findings if f.feature == "cell"]
    assert finding.status.value == "unsupported"

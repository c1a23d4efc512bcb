"""BNNS bundles: the generated GRU/RNN and LSTM matrices (refused, with exactly the blocking features, where
BNNSGraph.Builder's gru, rnn or lstm cannot express a feature, else written, verified, re-read from disk and
run with BNNS semantics against onnxruntime, or the float64 transcription for a float64 LSTM), the
representable variant of every configuration, bnns.json against its schema, the .npy packing read back with
NumPy alone (LSTM rows i,o,f,c -> i,f,o,g, the order chosen with a warning: docs/conventions.md §8), the
executor against an independent NumPy transcription of Apple's documented equations, round trips, real
models, the Swift source, and bad bundles."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import (
    REALMODELS,
    Config,
    assert_matches_onnxruntime,
    assert_round_trip,
    build_model,
    inputs,
    lstm_matrix,
    matrix,
    native_variant,
    to_layout,
)
from oracle import assert_lstm_matches_the_oracle

import gatepack as gp
from gatepack.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "schemas" / "bnns.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
MATRIX = matrix() + lstm_matrix()
NATIVE = ("Sigmoid", "Tanh", "Relu")
TOLERANCE = (1e-5, 1e-4)  # float16 sources are stored and computed in float32


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def blocked(cfg: Config) -> set[str]:
    """What BNNSGraph.Builder's gru, rnn and lstm cannot express, decided from the configuration itself (not from
    gatepack): a clip (a negative RNN clip is no clip, onnxruntime), sequence lengths, an activation other than a
    parameterless sigmoid, tanh or relu; an LSTM's peepholes and input/forget coupling."""
    found = {name for name in ("peepholes", "input_forget") if getattr(cfg, name)}
    if cfg.clip is not None and cfg.clip >= 0:
        found.add("clip")
    if cfg.seq_lens != "none":
        found.add("sequence_lens")
    if set(cfg.activations or []) - set(NATIVE):
        found.add("activations")
    return found


def representable(cfg: Config) -> Config:
    """The configuration made representable by BNNS: Apple's native variant, without an LSTM's peepholes and
    input/forget coupling."""
    return replace(native_variant(cfg), peepholes=False, input_forget=0)


REPRESENTABLE = [representable(c) for c in matrix()] + [representable(c) for c in lstm_matrix()[::2]]


def convert_and_check(cfg: Config, tmp_path: Path) -> None:
    """Refused with exactly the blocking features, or written, verified, re-read and run against the oracle."""
    src, out = tmp_path / "m.onnx", tmp_path / "bundle"
    onnx.save(build_model(cfg), src)
    refused = blocked(cfg)
    if refused:
        with pytest.raises(gp.RefusedError, match="unsupported") as err:
            gp.convert(src, out, to="bnns", allow_lossy=True)
        assert {f.feature for f in err.value.findings} == refused and err.value.hint
        assert not out.exists()
        return
    result = gp.convert(src, out, to="bnns", allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    if cfg.cell == "LSTM":
        (cell,) = [f for f in result.findings["rec"] if f.feature == "cell"]
        assert "i, f, o, g" in cell.warning  # the gate order Apple's page contradicts
    VALIDATOR.validate(json.loads((out / "bnns.json").read_text()))
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")  # the bundle read back from disk
    if cfg.cell == "LSTM":  # float64: onnxruntime has no LSTM kernel, the float64 transcription is the oracle
        assert_lstm_matches_the_oracle(cfg, feed0, outputs, *TOLERANCE)
    else:
        assert_matches_onnxruntime(cfg, feed0, outputs, *TOLERANCE)


def test_the_representable_variants_are_representable():
    assert {c.cell for c in REPRESENTABLE} == {"GRU", "RNN", "LSTM"} and not any(blocked(c) for c in REPRESENTABLE)


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix(cfg: Config, tmp_path):
    convert_and_check(cfg, tmp_path)


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", REPRESENTABLE, ids=[c.label() for c in REPRESENTABLE])
def test_matrix_representable(cfg: Config, tmp_path):
    assert not blocked(cfg)
    convert_and_check(cfg, tmp_path)


def _permuted(cell: str, h: int):
    """ONNX's gate blocks in BNNS's row order: GRU z, r, h -> r, n(=h), z; LSTM i, o, f, c -> i, f, o, g; RNN one."""
    blocks = {"GRU": (1, 2, 0), "LSTM": (0, 2, 1, 3), "RNN": (0,)}[cell]
    return lambda m: np.concatenate([m[k * h : (k + 1) * h] for k in blocks])


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("cell", ["GRU", "RNN", "LSTM"])
def test_npy_files_are_the_permuted_onnx_weights(cell, lbr, tmp_path):
    if cell != "GRU" and lbr:
        pytest.skip(f"{cell} has no linear_before_reset")
    lstm = cell == "LSTM"
    cfg = Config(cell=cell, lbr=lbr, direction="bidirectional", initial_h=True, initial_c=lstm)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "b", to="bnns")
    model = onnx.load(str(tmp_path / "m.onnx"))
    w, r, b = (onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n)) for n in "WRB")
    permuted = _permuted(cell, cfg.H)

    document = json.loads((tmp_path / "b" / "bnns.json").read_text())
    calls = document["layers"][0]["calls"]
    assert [c["direction"] for c in calls] == ["forward", "reverse"]
    assert document["layers"][0]["output_time_order"] == ["input", "processing"]

    def npy(rel):
        array = np.load(tmp_path / "b" / rel, allow_pickle=False)
        assert array.dtype == np.float32
        return array

    for k, call in enumerate(calls):
        assert call["initialHiddenStates"] == {"input": "initial_h", "index": k}
        wb, rb = b[k, : len(b[k]) // 2], b[k, len(b[k]) // 2 :]
        np.testing.assert_array_equal(npy(call["inputHiddenWeight"]), permuted(w[k]))
        np.testing.assert_array_equal(npy(call["hiddenHiddenWeight"]), permuted(r[k]))
        if lbr:
            assert call["applyResetGateAfterMatMul"] is True
            np.testing.assert_array_equal(npy(call["bias"]), permuted(rb))
            np.testing.assert_array_equal(npy(call["inputBias"]), permuted(wb))
        else:
            np.testing.assert_array_equal(npy(call["bias"]), permuted(wb + rb))
            assert call.get("applyResetGateAfterMatMul", False) is False and call.get("inputBias") is None
        if lstm:
            assert call["initialCellStates"] == {"input": "initial_c", "index": k}
            activations = (call["recurrentActivation"], call["cellActivation"], call["activation"])
            assert activations == ("sigmoid", "tanh", "tanh")
    if lstm:
        swift = (tmp_path / "b" / "model.swift").read_text()
        assert swift.count(".lstm(") == 2 and "initialCellStates: cs0[1 ... 1, all, all]" in swift
        assert "cellActivation: .tanh" in swift and "let (out0_1, last0_1, cell0_1)" in swift


def _documented_gru(x, h, w_ih, w_hh, bias, input_bias, after, reverse):
    """Apple's equations for BNNSGraph.Builder.gru (seed bnnsgraph-builder-gru.txt), with the reset
    gate before the matmul when ``after`` is false (docs/conventions.md §5), written out per gate
    block r, n, z; returns the output in processing order and the last state."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    H = h.shape[1]
    Wr, Wn, Wz = w_ih[:H], w_ih[H : 2 * H], w_ih[2 * H :]
    Ur, Un, Uz = w_hh[:H], w_hh[H : 2 * H], w_hh[2 * H :]
    br, bn, bz = bias[:H], bias[H : 2 * H], bias[2 * H :]
    ir, in_, iz = (input_bias[:H], input_bias[H : 2 * H], input_bias[2 * H :]) if after else (0, 0, 0)
    out = []
    for t in range(len(x))[::-1] if reverse else range(len(x)):
        r = sig(x[t] @ Wr.T + ir + h @ Ur.T + br)
        z = sig(x[t] @ Wz.T + iz + h @ Uz.T + bz)
        n = np.tanh(x[t] @ Wn.T + in_ + r * (h @ Un.T + bn)) if after else np.tanh(x[t] @ Wn.T + (r * h) @ Un.T + bn)
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out), h


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_executor_follows_apples_equations(direction, after, tmp_path):
    """A hand-made bundle (no gatepack writer) runs as the documented equations say."""
    rng = np.random.default_rng(7)
    S, N, I, H = 5, 2, 3, 4
    tensors = {
        "wih": rng.uniform(-1, 1, (3 * H, I)),
        "whh": rng.uniform(-1, 1, (3 * H, H)),
        "b": rng.uniform(-1, 1, 3 * H),
        "ib": rng.uniform(-1, 1, 3 * H),
    }
    bundle = tmp_path / "hand"
    bundle.mkdir()
    for name, value in tensors.items():
        np.save(bundle / f"{name}.npy", value.astype(np.float32))
    call = {
        "op": "gru",
        "direction": direction,
        "initialHiddenStates": {"input": "h0", "index": 0},
        "inputHiddenWeight": "wih.npy",
        "hiddenHiddenWeight": "whh.npy",
        "bias": "b.npy",
        "inputBias": "ib.npy" if after else None,
        "activation": "tanh",
        "recurrentActivation": "sigmoid",
        "applyResetGateAfterMatMul": after,
        "outputSequence": True,
    }
    layer = {
        "name": "g",
        "cell": "gru",
        "input_size": I,
        "hidden_size": H,
        "interface": {"x": "x", "y": "y", "y_h": "y_h", "initial_h": "h0", "layout": 0},
        "calls": [call],
        "output_time_order": ["processing" if direction == "reverse" else "input"],
        "combine": "stack_directions",
    }
    document = {"format": "gatepack-bnns", "version": 1, "layers": [layer]}
    VALIDATOR.validate(document)
    (bundle / "bnns.json").write_text(json.dumps(document))
    x, h0 = rng.uniform(-1, 1, (S, N, I)).astype(np.float32), rng.uniform(-1, 1, (1, N, H)).astype(np.float32)
    got = gp.run(bundle, {"x": x, "h0": h0}, engine="numpy")
    f = {k: v.astype(np.float32).astype(np.float64) for k, v in tensors.items()}
    seq, last = _documented_gru(
        x.astype(np.float64),
        h0[0].astype(np.float64),
        f["wih"],
        f["whh"],
        f["b"],
        f["ib"],
        after,
        direction == "reverse",
    )
    expected_y = seq[::-1] if direction == "reverse" else seq  # combine: processing order -> input time
    np.testing.assert_allclose(got["y"][:, 0], expected_y, atol=1e-6)
    np.testing.assert_allclose(got["y_h"][0], last, atol=1e-6)


@pytest.mark.parametrize("cfg", [c for c in REPRESENTABLE if c.dtype == "float32"][:24], ids=lambda c: c.label())
def test_round_trip_onnx_bnns_onnx(cfg: Config, tmp_path):
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "b", to="bnns")
    gp.convert(tmp_path / "b", tmp_path / "back.onnx", to="onnx")
    assert_round_trip(cfg, tmp_path / "m.onnx", tmp_path / "back.onnx", folded=not (cfg.cell == "GRU" and cfg.lbr))


REAL = sorted(p.name for p in REALMODELS.glob("*.onnx") if "lstm" not in p.name)


@pytest.mark.parametrize("name", REAL)
def test_real_models_convert_and_verify(name, tmp_path):
    result = gp.convert(REALMODELS / name, tmp_path / "b", to="bnns", layers_only=True)  # BNNS holds layers only
    assert result.verification.passed, result.verification.to_text()
    assert len(gp.load(tmp_path / "b").layers) == len(gp.load(REALMODELS / name).layers)


def test_swift_source_builds_every_call_from_the_bundle(tmp_path):
    cfg = Config(direction="bidirectional", lbr=1, initial_h=True, layout=1)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "b", to="bnns")
    swift = (tmp_path / "b" / "model.swift").read_text()
    document = json.loads((tmp_path / "b" / "bnns.json").read_text())
    for call in document["layers"][0]["calls"]:
        for label in ("inputHiddenWeight", "hiddenHiddenWeight", "bias", "inputBias"):
            assert f'npy("{call[label]}")' in swift
    assert swift.count(".gru(") == 2 and "direction: .reverse" in swift and "applyResetGateAfterMatMul: true" in swift
    assert 'builder.argument(name: "X", dataType: Float.self, shape: [-1, -1, 5])' in swift  # symbolic N, S: flexible
    assert 'builder.argument(name: "initial_h", dataType: Float.self, shape: [-1, 2, 6])' in swift  # layout 1: [N,D,H]
    assert "gatepackReverseTime(out0_1)" in swift and "cannot compile Swift" in swift


def _bundle(tmp_path: Path, cfg: Config | None = None) -> Path:
    onnx.save(build_model(cfg or Config()), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "b", to="bnns")
    return tmp_path / "b"


def _edit(bundle: Path, change) -> None:
    document = json.loads((bundle / "bnns.json").read_text())
    change(document["layers"][0])
    (bundle / "bnns.json").write_text(json.dumps(document))


BAD = {
    "shape_contradicts_npy": (
        lambda b: _edit(b, lambda lay: lay.update(hidden_size=7)),
        "has shape [18, 5], but bnns.json's input_size 5 and hidden_size 7 make it [21, 5]",
    ),
    "truncated_npy": (
        lambda b: (lambda f: f.write_bytes(f.read_bytes()[:100]))(next(b.rglob("*_hiddenHiddenWeight.npy"))),
        "not a readable .npy file",
    ),
    "missing_npy": (lambda b: next(b.rglob("*_bias.npy")).unlink(), "no such file"),
    "escaping_path": (
        lambda b: _edit(b, lambda lay: lay["calls"][0].update(bias="../../etc/passwd.npy")),
        "leads outside the artifact",
    ),
    "float64_npy": (
        lambda b: (lambda f: np.save(f, np.load(f).astype(np.float64)))(next(b.rglob("*_bias.npy"))),
        "holds float64, not float32",
    ),
    "bad_activation": (
        lambda b: _edit(b, lambda lay: lay["calls"][0].update(activation="gelu")),
        "activation 'gelu' is not a BNNSGraph.Builder.Activation case",
    ),
    "input_bias_without_flag": (
        lambda b: (
            lambda f: (
                _edit(b, lambda lay: lay["calls"][0].update(inputBias="x.npy")),
                np.save(b / "x.npy", np.ones(18, np.float32)),
            )
        )(None),
        "inputBias is set but applyResetGateAfterMatMul is false",
    ),
    "wrong_time_order": (
        lambda b: _edit(b, lambda lay: lay.update(output_time_order=["processing"])),
        "output_time_order ['processing'] contradicts the calls",
    ),
    "sequence_lens": (
        lambda b: _edit(b, lambda lay: lay["interface"].update(sequence_lens="lens")),
        "BNNS has no sequence lengths",
    ),
    "not_json": (lambda b: (b / "bnns.json").write_text("{oops"), "not valid JSON"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_bundles_give_one_line_errors(case, tmp_path):
    bundle = _bundle(tmp_path)
    damage, message = BAD[case]
    damage(bundle)
    for args in (["inspect", str(bundle)], ["convert", str(bundle), "--to", "onnx", "-o", str(tmp_path / "o.onnx")]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 3, result.output
        assert message in result.output and str(bundle) in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "o.onnx").exists()


def test_native_engine_says_it_needs_apple_hardware(tmp_path):
    bundle = _bundle(tmp_path)
    np.savez(tmp_path / "in.npz", X=inputs(Config())["X"])
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(bundle),
            "--inputs",
            str(tmp_path / "in.npz"),
            "-o",
            str(tmp_path / "out.npz"),
            "--engine",
            "native",
        ],
    )
    assert result.exit_code != 0 and "Apple" in result.output and len(result.output.strip().splitlines()) == 1, (
        result.output
    )

"""LSTM to BNNS: every configuration of the LSTM matrix refused with the reason where BNNSGraph.Builder's
lstm cannot hold it (peepholes, input_forget, clip, sequence_lens, parameterised activations), its
representable variants written as bundles, validated against the schema, re-read from disk and run
with BNNS semantics against onnxruntime; the .npy files are the ONNX weights permuted i,o,f,c ->
i,f,o,g (the order chosen, with a warning: docs/conventions.md §8); the Swift builds each call."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from helpers import Config, build_model, inputs, lstm_matrix, to_layout
from test_bnns import VALIDATOR
from test_lstm import assert_close, expected_outputs

import gatepack as gp

MATRIX = lstm_matrix()
NATIVE = ("Sigmoid", "Tanh", "Relu")


def blocked(cfg: Config) -> set[str]:
    """What BNNS's lstm cannot express, from the configuration (not from gatepack)."""
    found = set()
    if cfg.peepholes:
        found.add("peepholes")
    if cfg.input_forget:
        found.add("input_forget")
    if cfg.clip is not None:
        found.add("clip")
    if cfg.seq_lens != "none":
        found.add("sequence_lens")
    if set(cfg.activations or []) - set(NATIVE):
        found.add("activations")
    return found


def representable(cfg: Config) -> Config:
    acts = None if cfg.activations is None else [NATIVE[len(name) % 3] for name in cfg.activations]
    return replace(
        cfg, peepholes=False, input_forget=0, clip=None, seq_lens="none", activations=acts, alphas=None, betas=None
    )


REPRESENTABLE = [representable(c) for c in MATRIX[::2]]


def convert_and_check(cfg: Config, tmp_path) -> None:
    src, out = tmp_path / "m.onnx", tmp_path / "bundle"
    onnx.save(build_model(cfg), src)
    refused = blocked(cfg)
    if refused:
        with pytest.raises(gp.RefusedError) as err:
            gp.convert(src, out, to="bnns", allow_lossy=True)
        assert {f.feature for f in err.value.findings} == refused and err.value.hint
        assert not out.exists()
        return
    result = gp.convert(src, out, to="bnns", allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    (cell,) = [f for f in result.findings["rec"] if f.feature == "cell"]
    assert "i, f, o, g" in cell.warning  # the gate order Apple's page contradicts
    VALIDATOR.validate(json.loads((out / "bnns.json").read_text()))
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")  # the bundle read back from disk
    got = [outputs[name] for name in ("Y", "Y_h", "Y_c")]
    if cfg.layout:
        got = [got[0].transpose(1, 2, 0, 3), got[1].transpose(1, 0, 2), got[2].transpose(1, 0, 2)]
    assert_close(cfg, got, expected_outputs(cfg, feed0), 2e-5 if cfg.dtype != "float16" else 2e-3, 1e-4, cfg.dtype)


def test_the_representable_variants_are_representable():
    assert REPRESENTABLE and not any(blocked(cfg) for cfg in REPRESENTABLE)


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX + REPRESENTABLE, ids=[c.label() for c in MATRIX + REPRESENTABLE])
def test_matrix_and_its_representable_variants(cfg: Config, tmp_path):
    """Refused with exactly the blocking features, or written, re-read and run against onnxruntime."""
    convert_and_check(cfg, tmp_path)


def test_npy_files_are_the_permuted_onnx_weights(tmp_path):
    cfg = Config(cell="LSTM", direction="bidirectional", initial_h=True, initial_c=True)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "b", to="bnns")
    model = onnx.load(str(tmp_path / "m.onnx"))
    w, r, b = (onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n)) for n in "WRB")
    h = cfg.H

    def i_f_o_g(m):  # ONNX blocks i, o, f, c -> i, f, o, g
        return np.concatenate([m[0:h], m[2 * h : 3 * h], m[h : 2 * h], m[3 * h : 4 * h]])

    calls = json.loads((tmp_path / "b" / "bnns.json").read_text())["layers"][0]["calls"]
    for k, call in enumerate(calls):
        assert call["initialHiddenStates"] == {"input": "initial_h", "index": k}
        assert call["initialCellStates"] == {"input": "initial_c", "index": k}
        assert (call["recurrentActivation"], call["cellActivation"], call["activation"]) == ("sigmoid", "tanh", "tanh")

        def npy(rel):
            return np.load(tmp_path / "b" / rel, allow_pickle=False)

        np.testing.assert_array_equal(npy(call["inputHiddenWeight"]), i_f_o_g(w[k]))
        np.testing.assert_array_equal(npy(call["hiddenHiddenWeight"]), i_f_o_g(r[k]))
        np.testing.assert_array_equal(npy(call["bias"]), i_f_o_g(b[k, : 4 * h] + b[k, 4 * h :]))
    swift = (tmp_path / "b" / "model.swift").read_text()
    assert swift.count(".lstm(") == 2 and "initialCellStates: cs0[1 ... 1, all, all]" in swift
    assert "cellActivation: .tanh" in swift and "let (out0_1, last0_1, cell0_1)" in swift

"""LSTM to Core ML: every configuration of the LSTM matrix written as an ML Program (MIL's own lstm op
where it computes the ONNX node, elementary MIL ops in a while_loop per direction carrying h and c
elsewhere), loaded back with coremltools and run from disk on the MIL executor against onnxruntime
(the float64 transcription for float64); the lstm op refused where it is forced but not exact; round
trips to ONNX; a real LSTM model's layers. (The executor's lstm op itself is checked against torch on
coremltools-made packages in test_producers.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
import test_lstm as lstm
from helpers import REALMODELS, Config, build_model, inputs, lstm_matrix, ort_run, to_layout
from test_coreml import _save_program, ct_program

import gatepack as gp

MATRIX = lstm_matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


def lstm_op_is_exact(cfg: Config) -> bool:
    """Whether MIL's lstm op computes the ONNX node, from docs/conventions.md §8 (not from gatepack): no
    clip (the op's clips the cell state), no input_forget, no sequence lengths, Sigmoid, Tanh or Relu in
    every slot (one op per direction, so the directions may differ); peepholes are the op's own."""
    names = cfg.activations or ["Sigmoid", "Tanh", "Tanh"]
    return (
        cfg.clip is None
        and not cfg.input_forget
        and cfg.seq_lens == "none"
        and set(names) <= {"Sigmoid", "Tanh", "Relu"}
    )


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix_against_onnxruntime(cfg: Config, tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "m.mlpackage"
    onnx.save(build_model(cfg), src)
    result = gp.convert(src, out, to="coreml", allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    (cell,) = [f for f in result.findings["rec"] if f.feature == "cell"]
    native = lstm_op_is_exact(cfg)
    assert cell.status.value == ("exact" if native else "decomposed")
    ops = {op.op_type for op in ct_program(out).operations}  # loads back with coremltools
    assert ("lstm" in ops) == native and ("while_loop" in ops) != native
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")  # the saved package on the MIL executor
    (layer,) = gp.load(out).layers
    got = [outputs[getattr(layer.interface, role)] for role in ("y", "y_h", "y_c")]
    if cfg.layout:
        got = [got[0].transpose(1, 2, 0, 3), got[1].transpose(1, 0, 2), got[2].transpose(1, 0, 2)]
    lstm.assert_close(cfg, got, lstm.expected_outputs(cfg, feed0), *TOLERANCE[cfg.dtype], dtype=cfg.dtype)


def lstm_op_variant(cfg: Config) -> Config:
    """The configuration made representable by the lstm op: no clip, coupling or sequence lengths,
    activations among Sigmoid, Tanh, Relu (derived from the original's, per direction)."""
    acts = [("Sigmoid", "Tanh", "Relu")[len(name) % 3] for name in cfg.activations] if cfg.activations else None
    return replace(cfg, clip=None, input_forget=0, seq_lens="none", activations=acts, alphas=None, betas=None)


LSTM_OP = [lstm_op_variant(c) for c in MATRIX[::4]]


def test_the_lstm_op_variants_cover_its_features():
    assert len(LSTM_OP) >= 60 and all(lstm_op_is_exact(c) for c in LSTM_OP)
    assert any(c.peepholes for c in LSTM_OP) and any(c.D == 2 for c in LSTM_OP) and any(c.layout for c in LSTM_OP)
    assert any(c.initial_c for c in LSTM_OP) and any(c.activations and "Relu" in c.activations for c in LSTM_OP)
    assert any(c.activations and c.activations[:3] != c.activations[3:] for c in LSTM_OP if c.D == 2)


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", LSTM_OP, ids=[c.label() for c in LSTM_OP])
def test_the_lstm_op_where_it_is_exact(cfg: Config, tmp_path):
    """Forced native: the package holds lstm ops only, runs from disk to the oracle, and reads back to ONNX
    with W, R and P bit-exact (gates permuted back) and the biases summed exactly."""
    src, out = tmp_path / "m.onnx", tmp_path / "m.mlpackage"
    onnx.save(build_model(cfg), src)
    result = gp.convert(src, out, to="coreml", strategy="native", allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    ops = {op.op_type for op in ct_program(out).operations}
    assert "lstm" in ops and "while_loop" not in ops
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")
    (layer,) = gp.load(out).layers
    got = [outputs[getattr(layer.interface, role)] for role in ("y", "y_h", "y_c")]
    if cfg.layout:
        got = [got[0].transpose(1, 2, 0, 3), got[1].transpose(1, 0, 2), got[2].transpose(1, 0, 2)]
    lstm.assert_close(cfg, got, lstm.expected_outputs(cfg, feed0), *TOLERANCE[cfg.dtype], dtype=cfg.dtype)
    (source,) = gp.load(src).layers
    for p, q in zip(source.directions, layer.directions):
        np.testing.assert_array_equal(q.W, p.W.astype(np.float32))
        np.testing.assert_array_equal(q.R, p.R.astype(np.float32))
        np.testing.assert_array_equal(q.Wb, p.Wb.astype(np.float32) + p.Rb.astype(np.float32))
        assert not q.Rb.any() and (q.P is None) == (p.P is None)
        if p.P is not None:
            np.testing.assert_array_equal(q.P, p.P.astype(np.float32))


@pytest.mark.parametrize(
    ("cfg", "reason"),
    [
        (Config(cell="LSTM", clip=2.0), "bounds the cell state"),
        (Config(cell="LSTM", input_forget=1), "no input/forget coupling"),
        (Config(cell="LSTM", seq_lens="mixed"), "no sequence lengths"),
    ],
)
def test_the_lstm_op_is_refused_when_forced_where_it_differs(cfg, reason, tmp_path):
    lstm.assert_refused_when_forced(cfg, tmp_path, "coreml", "m.mlpackage", reason)


@pytest.mark.parametrize("cfg", lstm.PEEPHOLE_CASES[:6], ids=lambda c: c.label())
def test_round_trip_to_onnx_keeps_every_weight(cfg: Config, tmp_path):
    lstm.assert_round_trip_keeps_every_weight(cfg, tmp_path, "coreml", "m.mlpackage")


def test_real_lstm_model_layers_only(tmp_path):
    result = gp.convert(REALMODELS / "dtln_model_1_lstm.onnx", tmp_path / "m.mlpackage", layers_only=True)
    assert result.verification.passed and len(result.verification.outputs) == 6


def _coremltools_reference_lstm(x, h0, c0, w, direction, output_sequence):
    """coremltools' own numpy reference for MIL lstm (iOS14 test_recurrent.py, run there against real Core
    ML), transcribed: blocks i, f, o, g; i and f read the previous c through the peephole, o the new one;
    with its bidirectional test's layout (states [N, 2H], the backward half of Y in input time) and a
    reverse op's Y in processing order."""
    sig = lambda v: 1.0 / (1 + np.exp(-v))  # noqa: E731
    hidden = w["weight_hh"].shape[1]

    def one(w_x, w_h, b, p, xs, h, c):
        wx_i, wx_f, wx_o, wx_g = np.split(w_x, 4)
        wh_i, wh_f, wh_o, wh_g = np.split(w_h, 4)
        b_i, b_f, b_o, b_g = np.split(b, 4)
        p_i, p_f, p_o = np.split(p, 3)
        steps = []
        for xt in xs:
            i = sig(wx_i @ xt + wh_i @ h + b_i + c * p_i)
            f = sig(wx_f @ xt + wh_f @ h + b_f + c * p_f)
            g = np.tanh(wx_g @ xt + wh_g @ h + b_g)
            c = c * f + i * g
            o = sig(wx_o @ xt + wh_o @ h + b_o + c * p_o)
            h = o * np.tanh(c)
            steps.append(h)
        return np.stack(steps), h, c

    ys, hs, cs = [], [], []
    for n in range(x.shape[1]):
        runs = [("", direction == "reverse")] + ([("_back", True)] if direction == "bidirectional" else [])
        y_n, h_n, c_n = [], [], []
        for k, (suffix, reverse) in enumerate(runs):
            cols = slice(k * hidden, (k + 1) * hidden)
            seq, h, c = one(
                w["weight_ih" + suffix],
                w["weight_hh" + suffix],
                w["bias" + suffix],
                w["peephole" + suffix],
                x[::-1, n] if reverse else x[:, n],
                h0[n, cols],
                c0[n, cols],
            )
            y_n.append(seq[::-1] if direction == "bidirectional" and reverse else seq)
            h_n.append(h)
            c_n.append(c)
        ys.append(np.concatenate(y_n, -1))
        hs.append(np.concatenate(h_n))
        cs.append(np.concatenate(c_n))
    y, y_h, y_c = np.stack(ys, 1), np.stack(hs), np.stack(cs)
    return (y if output_sequence else y_h[None]), y_h, y_c


def _hand_built_lstm(tmp_path, direction: str, output_sequence: bool, **op):
    """A MIL lstm package built with coremltools' own builder (not by gatepack), random fp32 weights with
    peepholes; returns its path, the feed and the weights."""
    rng = np.random.default_rng(7)
    s, n, i, h = 5, 3, 2, 4
    d = 2 if direction == "bidirectional" else 1
    shapes = {"weight_ih": (4 * h, i), "weight_hh": (4 * h, h), "bias": (4 * h,), "peephole": (3 * h,)}
    suffixes = ("", "_back") if d == 2 else ("",)
    weights = {k + x: rng.uniform(-1, 1, shape).astype(np.float32) for k, shape in shapes.items() for x in suffixes}
    path = _save_program(
        lambda mb, x, h0, c0: mb.lstm(
            x=x, initial_h=h0, initial_c=c0, direction=direction, output_sequence=output_sequence, **weights, **op
        ),
        [(s, n, i), (n, d * h), (n, d * h)],
        tmp_path,
    )
    feed = {
        "x": rng.uniform(-1, 1, (s, n, i)).astype(np.float32),
        "initial_h": rng.uniform(-1, 1, (n, d * h)).astype(np.float32),
        "initial_c": rng.uniform(-1, 1, (n, d * h)).astype(np.float32),
    }
    return path, feed, weights


@pytest.mark.parametrize("output_sequence", [True, False])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_executor_follows_coremltools_reference_for_lstm(direction, output_sequence, tmp_path):
    path, feed, weights = _hand_built_lstm(tmp_path, direction, output_sequence)
    got = list(gp.run(path, feed, engine="numpy").values())
    wide = {k: v.astype(np.float64) for k, v in weights.items()}
    expected = _coremltools_reference_lstm(
        *(feed[k].astype(np.float64) for k in ("x", "initial_h", "initial_c")), wide, direction, output_sequence
    )
    for g, want in zip(got, expected):
        np.testing.assert_allclose(g, want, atol=1e-6)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_reads_a_coremltools_made_lstm_and_converts_it_with_verification(direction, tmp_path):
    """The op read as an ONNX LSTM (gates i, f, o, z -> i, o, f, c; peephole i, f, o -> i, o, f; the summed
    bias as Wb), converted to ONNX and OpenVINO with verification against the package on the MIL executor;
    onnxruntime on the ONNX file gives the reference's outputs."""
    path, feed, weights = _hand_built_lstm(tmp_path, direction, True)
    (layer,) = gp.load(path).layers
    assert layer.cell.value == "lstm" and layer.direction.value == direction and layer.has_peepholes
    h = 4
    p = layer.directions[0]
    np.testing.assert_array_equal(p.W[h : 2 * h], weights["weight_ih"][2 * h : 3 * h])  # ONNX o = MIL's third
    np.testing.assert_array_equal(p.W[2 * h : 3 * h], weights["weight_ih"][h : 2 * h])  # ONNX f = MIL's second
    np.testing.assert_array_equal(p.P[h : 2 * h], weights["peephole"][2 * h :])  # ONNX P o = MIL's last
    for target, suffix in (("onnx", ".onnx"), ("openvino", ".xml")):
        result = gp.convert(path, tmp_path / f"out{suffix}", to=target)
        assert result.verification.passed, result.verification.to_text()
    d = layer.num_directions
    onnx_feed = {
        layer.interface.x: feed["x"],
        **{
            getattr(layer.interface, role): feed[role].reshape(3, d, h).transpose(1, 0, 2)
            for role in ("initial_h", "initial_c")
        },
    }
    y, y_h, y_c = ort_run(tmp_path / "out.onnx", onnx_feed)
    wide = {k: v.astype(np.float64) for k, v in weights.items()}
    ref_y, ref_h, ref_c = _coremltools_reference_lstm(
        *(feed[k].astype(np.float64) for k in ("x", "initial_h", "initial_c")), wide, direction, True
    )
    if direction == "reverse":
        ref_y = ref_y[::-1]  # the op's processing order -> ONNX's input time
    np.testing.assert_allclose(y.transpose(0, 2, 1, 3).reshape(ref_y.shape), ref_y, atol=1e-5)
    np.testing.assert_allclose(y_h.transpose(1, 0, 2).reshape(ref_h.shape), ref_h, atol=1e-5)
    np.testing.assert_allclose(y_c.transpose(1, 0, 2).reshape(ref_c.shape), ref_c, atol=1e-5)


def test_a_foreign_lstm_op_with_clip_is_refused(tmp_path):
    path, _, _ = _hand_built_lstm(tmp_path, "forward", True, clip=np.float32(3.0))
    with pytest.raises(gp.InputError, match="clip 3 clips the cell state"):
        gp.load(path)

"""Core ML: the generated GRU/RNN and LSTM matrices written as ML Programs (auto: MIL's own gru, rnn or lstm
op where it computes the ONNX node, elementary MIL ops in a while_loop per direction elsewhere; native;
decomposed), each verified, read back from disk and run on gatepack's MIL executor against onnxruntime (the
float64 transcription for a float64 LSTM); the native op refused where it is forced but not exact; packing
checked with coremltools' own loader; the executor's gru/rnn/lstm semantics checked against coremltools' numpy
reference formulas; round trips; real models; bad packages. (The executor's lstm op itself is also checked
against torch on coremltools-made packages in test_producers.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from helpers import (
    REALMODELS,
    Config,
    assert_matches_onnxruntime,
    assert_refused_when_forced,
    assert_round_trip,
    assert_round_trip_keeps_every_weight,
    build_model,
    inputs,
    lstm_matrix,
    matrix,
    native_variant,
    ort_run,
    peephole_cases,
    to_layout,
)
from oracle import assert_lstm_matches_the_oracle

import gatepack as gp
from gatepack.converters.formats import coreml

MATRIX = matrix()
LSTM_MATRIX = lstm_matrix()


TOLERANCE = {
    "float32": (1e-5, 1e-4),
    "float64": (1e-5, 1e-4),
    "float16": (1e-5, 1e-4),
}  # fp16 weights are computed in fp32


def ct_program(path):
    """The saved program as coremltools' own loader reads it (independent of gatepack's reader)."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    return load(spec, specification_version=spec.specificationVersion, file_weights_dir=model.weights_dir).functions[
        "main"
    ]


def convert_and_check(cfg: Config, tmp_path, strategy: str) -> str:
    """Convert with ``strategy``, verified; the package loads back with coremltools holding the cell's MIL op
    (native) or a while_loop (decomposed), as its ``cell`` finding says, and runs from disk on the MIL executor
    to the oracle. Returns what was chosen."""
    src, out = tmp_path / "m.onnx", tmp_path / "m.mlpackage"
    onnx.save(build_model(cfg), src)
    result = gp.convert(src, out, to="coreml", strategy=strategy, allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    (cell,) = [f for f in result.findings["rec"] if f.feature == "cell"]
    chosen = "decomposed" if cell.status.value == "decomposed" else "native"
    assert cell.status.value == ("exact" if chosen == "native" else "decomposed")
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")  # the saved package on the MIL executor
    if cfg.cell == "LSTM":  # float64: onnxruntime has no LSTM kernel, the float64 transcription is the oracle
        assert_lstm_matches_the_oracle(cfg, feed0, outputs, *TOLERANCE[cfg.dtype])
    else:
        assert_matches_onnxruntime(cfg, feed0, outputs, *TOLERANCE[cfg.dtype])
    ops = {op.op_type for op in ct_program(out).operations}  # loads back with coremltools
    assert (cfg.cell.lower() in ops) == (chosen == "native") and ("while_loop" in ops) == (chosen == "decomposed")
    return chosen


def native_is_exact(cfg: Config) -> bool:
    """Whether MIL's gru, rnn or lstm op computes what the ONNX node specifies, from the configuration and the
    ops' documentation (docs/conventions.md §5, §8), not from gatepack: parameterless sigmoid/tanh/relu only
    (one op per direction, so an LSTM's directions may differ), no clip (the lstm op's clips the cell state),
    no sequence lengths, no input/forget coupling; reset_after exists from iOS18 (the target chosen for it), and
    an LSTM's peepholes are the op's own."""
    clip = cfg.clip is not None and cfg.clip >= 0
    acts = set(cfg.activations or []) <= {"Sigmoid", "Tanh", "Relu"}
    return acts and not clip and cfg.seq_lens == "none" and not cfg.input_forget


def auto_picks_native(cfg: Config) -> bool:
    """Where the native op is exact and not in doubt for the layer: auto avoids the gru op wherever a known doubt
    about it concerns the layer — a batch not fixed at 1 (Core ML's GRU tests run batch 1 only, rdar 59644603;
    the matrix's batch is symbolic) and reset_after (coremltools marks its parity test expected-to-fail,
    rdar 128479517) — so no matrix GRU is written with it."""
    return native_is_exact(cfg) and cfg.cell != "GRU"


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX + LSTM_MATRIX, ids=[c.label() for c in MATRIX + LSTM_MATRIX])
def test_matrix_auto(cfg: Config, tmp_path):
    chosen = convert_and_check(cfg, tmp_path, "auto")
    assert chosen == ("native" if auto_picks_native(cfg) else "decomposed")


# Where auto picks the native op, the decomposition is checked on its own; everywhere else
# test_matrix_auto has already converted, run and checked that very decomposition.
DECOMPOSED = [c for c in MATRIX + LSTM_MATRIX if auto_picks_native(c)]


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", DECOMPOSED, ids=[c.label() for c in DECOMPOSED])
def test_matrix_decomposed(cfg: Config, tmp_path):
    assert convert_and_check(cfg, tmp_path, "decomposed") == "decomposed"


def native_op_variant(cfg: Config) -> Config:
    """The configuration made representable by the cell's MIL op: Apple's native variant (activations among
    Sigmoid, Tanh, Relu, derived from the original's per slot; no clip, no sequence lengths), without an
    LSTM's input/forget coupling."""
    return replace(native_variant(cfg), input_forget=0)


# the native op covers less, and each package costs a conversion: every second GRU/RNN, every fourth LSTM
NATIVE = [native_op_variant(c) for c in MATRIX[::2]] + [native_op_variant(c) for c in LSTM_MATRIX[::4]]


def test_the_native_variants_cover_the_ops_features():
    assert all(native_is_exact(c) for c in NATIVE)
    lstm_op = [c for c in NATIVE if c.cell == "LSTM"]
    assert len(lstm_op) >= 60 and any(c.peepholes for c in lstm_op) and any(c.D == 2 for c in lstm_op)
    assert any(c.layout for c in lstm_op) and any(c.initial_c for c in lstm_op)
    assert any(c.activations and "Relu" in c.activations for c in lstm_op)
    assert any(c.activations and c.activations[:3] != c.activations[3:] for c in lstm_op if c.D == 2)


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", NATIVE, ids=[c.label() for c in NATIVE])
def test_matrix_native(cfg: Config, tmp_path):
    """Forced native: the package holds the cell's op only, runs from disk to the oracle, and reads back with W,
    R (and an LSTM's P) bit-exact (gates permuted back) and the biases as the op holds them: summed exactly,
    or apart for a GRU's reset_after."""
    assert convert_and_check(cfg, tmp_path, "native") == "native"
    (source,), (layer,) = gp.load(tmp_path / "m.onnx").layers, gp.load(tmp_path / "m.mlpackage").layers
    apart = cfg.cell == "GRU" and cfg.lbr
    for p, q in zip(source.directions, layer.directions):
        np.testing.assert_array_equal(q.W, p.W.astype(np.float32))
        np.testing.assert_array_equal(q.R, p.R.astype(np.float32))
        if apart:
            np.testing.assert_array_equal(q.Wb, p.Wb.astype(np.float32))
            np.testing.assert_array_equal(q.Rb, p.Rb.astype(np.float32))
        else:
            np.testing.assert_array_equal(q.Wb, p.Wb.astype(np.float32) + p.Rb.astype(np.float32))
            assert not q.Rb.any()
        assert (q.P is None) == (p.P is None)
        if p.P is not None:
            np.testing.assert_array_equal(q.P, p.P.astype(np.float32))


@pytest.mark.parametrize(
    ("cfg", "options", "reason"),
    [
        (Config(lbr=1), {"minimum_deployment_target": "iOS17"}, "reset_after"),
        (Config(cell="LSTM", clip=2.0), {}, "bounds the cell state"),
        (Config(cell="LSTM", input_forget=1), {}, "no input/forget coupling"),
        (Config(cell="LSTM", seq_lens="mixed"), {}, "no sequence lengths"),
    ],
    ids=["gru-reset_after-ios17", "lstm-clip", "lstm-input_forget", "lstm-sequence_lens"],
)
def test_native_is_refused_where_it_is_not_exact(cfg, options, reason, tmp_path):
    assert_refused_when_forced(cfg, tmp_path, "coreml", "m.mlpackage", reason, **options)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("cell", ["GRU", "RNN"])
def test_packing_is_the_permuted_onnx_weights(cell, lbr, tmp_path):
    if cell == "RNN" and lbr:
        pytest.skip("RNN has no linear_before_reset")
    cfg = Config(cell=cell, lbr=lbr, direction="bidirectional")
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.mlpackage", to="coreml", strategy="native")
    model = onnx.load(str(tmp_path / "m.onnx"))
    w, r, b = (onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n)) for n in "WRB")
    h = cfg.H
    ops = [op for op in ct_program(tmp_path / "m.mlpackage").operations if op.op_type == cell.lower()]
    assert [op.inputs["direction"].val for op in ops] == ["forward", "reverse"]

    def r_o_z(m):  # ONNX blocks z, r, h -> MIL r, o(=h), z
        return np.concatenate([m[h : 2 * h], m[2 * h : 3 * h], m[0:h]]) if cell == "GRU" else m

    for k, op in enumerate(ops):
        wb, rb = b[k, : len(b[k]) // 2], b[k, len(b[k]) // 2 :]
        np.testing.assert_array_equal(op.inputs["weight_ih"].val, r_o_z(w[k]))
        np.testing.assert_array_equal(op.inputs["weight_hh"].val, r_o_z(r[k]))
        if lbr:
            assert op.inputs["reset_after"].val
            np.testing.assert_array_equal(op.inputs["bias"].val, r_o_z(rb))
            np.testing.assert_array_equal(op.inputs["input_bias"].val, r_o_z(wb))
        else:
            np.testing.assert_array_equal(op.inputs["bias"].val, r_o_z(wb + rb))


def _coremltools_reference_gru(x, h, w_ih, w_hh, b, direction, output_sequence):
    """coremltools' own numpy reference for MIL gru (iOS14 test_recurrent.py, which runs against
    real Core ML): reset-*before*, reverse output in processing order; weights in r, o, z blocks."""
    hidden = w_hh.shape[1]
    w_r, w_o, w_z = np.split(w_ih, 3)
    r_r, r_o, r_z = np.split(w_hh, 3)
    b_r, b_o, b_z = np.split(b, 3)
    sig = lambda v: 1.0 / (1 + np.exp(-v))  # noqa: E731
    outs = []
    for n in range(x.shape[1]):
        state = h[n]
        seq = x[:, n] if direction == "forward" else x[::-1, n]
        steps = []
        for xt in seq:
            z = sig(w_z @ xt + r_z @ state + b_z)
            r = sig(w_r @ xt + r_r @ state + b_r)
            o = np.tanh(w_o @ xt + r_o @ (state * r) + b_o)
            state = (1 - z) * o + z * state
            steps.append(state)
        outs.append(np.stack(steps))
    y = np.stack(outs, axis=1).reshape(x.shape[0], x.shape[1], hidden)
    return (y if output_sequence else y[-1:]), y[-1]


def _save_program(build, shapes, tmp_path, target="iOS17"):
    import coremltools as ct
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    def x_alone(x):
        return build(mb, x)

    def gru_or_rnn(x, initial_h):
        return build(mb, x, initial_h)

    def lstm(x, initial_h, initial_c):
        return build(mb, x, initial_h, initial_c)

    specs = [mb.TensorSpec(shape=s, dtype=types.fp32) for s in shapes]
    function = {1: x_alone, 2: gru_or_rnn, 3: lstm}[len(shapes)]
    prog = mb.program(input_specs=specs, opset_version=getattr(ct.target, target))(function)

    model = ct.convert(
        prog,
        source="milinternal",
        convert_to="mlprogram",
        minimum_deployment_target=getattr(ct.target, target),
        compute_precision=ct.precision.FLOAT32,
        pass_pipeline=ct.PassPipeline.EMPTY,
    )
    path = tmp_path / "hand.mlpackage"
    model.save(str(path))
    return path


def _run_hand_built_gru(tmp_path, seed: int, sizes: tuple, target: str = "iOS17", input_bias: bool = False, **op):
    """A MIL gru package built with coremltools' own builder (not by gatepack), random fp32 weights, run
    from disk by gatepack's MIL executor: (outputs, x and initial_h in float64, the op's weights)."""
    rng = np.random.default_rng(seed)
    s, n, i, h = sizes
    shapes = {"weight_ih": (3 * h, i), "weight_hh": (3 * h, h), "bias": (3 * h,)}
    shapes.update({"input_bias": (3 * h,)} if input_bias else {})
    weights = {k: rng.uniform(-1, 1, shape).astype(np.float32) for k, shape in shapes.items()}
    path = _save_program(
        lambda mb, x, h0: mb.gru(x=x, initial_h=h0, **weights, **op), [(s, n, i), (n, h)], tmp_path, target=target
    )
    x, h0 = rng.uniform(-1, 1, (s, n, i)).astype(np.float32), rng.uniform(-1, 1, (n, h)).astype(np.float32)
    out = list(coreml.run_numpy(path, {"x": x, "initial_h": h0}).values())
    return out, x.astype(np.float64), h0.astype(np.float64), weights


@pytest.mark.parametrize("output_sequence", [True, False])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_executor_follows_coremltools_reference_for_gru(direction, output_sequence, tmp_path):
    out, x, h0, w = _run_hand_built_gru(tmp_path, 3, (5, 2, 3, 4), direction=direction, output_sequence=output_sequence)
    ref_y, ref_h = _coremltools_reference_gru(
        x, h0, w["weight_ih"], w["weight_hh"], w["bias"], direction, output_sequence
    )
    np.testing.assert_allclose(out[0], ref_y, atol=1e-6)
    np.testing.assert_allclose(out[1], ref_h, atol=1e-6)


def _reset_after_reference(x, h, w_ih, w_hh, bias, input_bias, direction):
    """MIL iOS18 gru with reset_after = True, transcribed independently: coremltools' iOS18 docstring
    (input_bias added to the input projection, the reset gate applied after the recurrent matmul) and its
    iOS18 tests, which compare the op with torch.nn.GRU (input_bias = b_ih, bias = b_hh) in r, o, z blocks::

        r = sigmoid(W_ir x + ib_r + W_hr h + b_r)      z = sigmoid(W_iz x + ib_z + W_hz h + b_z)
        o = tanh(W_io x + ib_o + r * (W_ho h + b_o))   h' = (1 - z) * o + z * h
    """
    w_r, w_o, w_z = np.split(w_ih, 3)
    r_r, r_o, r_z = np.split(w_hh, 3)
    b_r, b_o, b_z = np.split(bias, 3)
    i_r, i_o, i_z = np.split(input_bias, 3)
    sig = lambda v: 1.0 / (1 + np.exp(-v))  # noqa: E731
    outs, finals = [], []
    for n in range(x.shape[1]):
        state = h[n]
        steps = []
        for xt in x[:, n] if direction == "forward" else x[::-1, n]:
            r = sig(w_r @ xt + i_r + r_r @ state + b_r)
            z = sig(w_z @ xt + i_z + r_z @ state + b_z)
            o = np.tanh(w_o @ xt + i_o + r * (r_o @ state + b_o))
            state = (1 - z) * o + z * state
            steps.append(state)
        outs.append(np.stack(steps))  # processing order, as the op returns it
        finals.append(state)
    return np.stack(outs, axis=1), np.stack(finals)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_executor_follows_an_independent_transcription_of_reset_after(direction, tmp_path):
    """A hand-built iOS18 package with reset_after and input_bias against the transcription above."""
    out, x, h0, w = _run_hand_built_gru(
        tmp_path, 5, (6, 3, 4, 5), "iOS18", True, reset_after=True, direction=direction, output_sequence=True
    )
    ref_y, ref_h = _reset_after_reference(x, h0, w["weight_ih"], w["weight_hh"], w["bias"], w["input_bias"], direction)
    np.testing.assert_allclose(out[0], ref_y, atol=1e-6)
    np.testing.assert_allclose(out[1], ref_h, atol=1e-6)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_executor_follows_coremltools_reference_for_rnn(direction, tmp_path):
    """coremltools' rnn test compares with torch.nn.RNN run on the flipped input: processing order."""
    rng = np.random.default_rng(4)
    s, n, i, h = 6, 3, 2, 5
    w_ih, w_hh, b = (rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((h, i), (h, h), (h,)))
    path = _save_program(
        lambda mb, x, h0: mb.rnn(
            x=x, initial_h=h0, weight_ih=w_ih, weight_hh=w_hh, bias=b, direction=direction, output_sequence=True
        ),
        [(s, n, i), (n, h)],
        tmp_path,
    )
    x, h0 = rng.uniform(-1, 1, (s, n, i)), rng.uniform(-1, 1, (n, h))
    out = list(coreml.run_numpy(path, {"x": x.astype(np.float32), "initial_h": h0.astype(np.float32)}).values())
    state, steps = h0, []
    for xt in x if direction == "forward" else x[::-1]:
        state = np.tanh(xt @ w_ih.T + state @ w_hh.T + b)
        steps.append(state)
    np.testing.assert_allclose(out[0], np.stack(steps), atol=1e-6)
    np.testing.assert_allclose(out[1], state, atol=1e-6)


def test_reads_a_coremltools_made_gru_and_verifies_it(tmp_path):
    rng = np.random.default_rng(5)
    w_ih, w_hh = rng.uniform(-1, 1, (12, 3)).astype(np.float32), rng.uniform(-1, 1, (12, 4)).astype(np.float32)
    bias, input_bias = rng.uniform(-1, 1, 12).astype(np.float32), rng.uniform(-1, 1, 12).astype(np.float32)
    path = _save_program(
        lambda mb, x, h0: mb.gru(
            x=x,
            initial_h=h0,
            weight_ih=w_ih,
            weight_hh=w_hh,
            bias=bias,
            input_bias=input_bias,
            reset_after=True,
            direction="reverse",
            output_sequence=True,
        ),
        [(5, 1, 3), (1, 4)],
        tmp_path,
        "iOS18",
    )
    (layer,) = gp.load(path).layers
    assert layer.linear_before_reset and layer.direction.value == "reverse"
    np.testing.assert_array_equal(layer.directions[0].W[:4], w_ih[8:])  # z block is MIL's last
    np.testing.assert_array_equal(layer.directions[0].Rb[4:8], bias[:4])  # r block is MIL's first
    onnx_path = tmp_path / "back.onnx"
    result = gp.convert(path, onnx_path, to="onnx")
    assert result.verification.passed, result.verification.to_text()


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


@pytest.mark.parametrize("cfg", [c for c in MATRIX if c.dtype == "float32"][:24], ids=lambda c: c.label())
def test_round_trip_onnx_coreml_onnx(cfg: Config, tmp_path):
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.mlpackage", to="coreml")
    gp.convert(tmp_path / "m.mlpackage", tmp_path / "back.onnx", to="onnx")
    folded = any(
        f.feature == "bias" and f.status.value == "folded"
        for f in gp.load(tmp_path / "m.mlpackage").notes_for(gp.load(tmp_path / "m.mlpackage").layers[0])
    )
    assert_round_trip(cfg, tmp_path / "m.onnx", tmp_path / "back.onnx", folded)


@pytest.mark.parametrize("cfg", peephole_cases()[:6], ids=lambda c: c.label())
def test_lstm_round_trip_to_onnx_keeps_every_weight(cfg: Config, tmp_path):
    assert_round_trip_keeps_every_weight(cfg, tmp_path, "coreml", "m.mlpackage")


def test_packages_holding_the_decomposed_weights_transposed_still_read(tmp_path):
    """gatepack's decomposed cell stores W [G*H, I] and R [G*H, H] as the layer holds them ('weights': 'rows' in its
    description; the package verifies); packages written before held W^T and R^T without the field, and read the
    same (the reader's constants given as such a package held them)."""
    from types import SimpleNamespace

    from gatepack.converters.formats.coreml import reader, writer

    cfg = next(c for c in MATRIX if c.dtype == "float32" and c.I != c.H and c.direction == "forward")
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    (source,) = gp.load(tmp_path / "m.onnx").layers
    rows = tmp_path / "rows.mlpackage"
    assert gp.convert(tmp_path / "m.onnx", rows, to="coreml", strategy="decomposed").verification.passed
    (read,) = gp.load(rows).layers
    entry = {k: v for k, v in writer.description_entry(source, "decomposed", "iOS15").items() if k != "weights"}
    prefix = coreml.safe_name(source.name)
    (p,) = source.directions
    held = {"W": p.W.T, "R": p.R.T, "Wb": p.Wb, "Rb": p.Rb}
    constants = {f"{prefix}_{key}0": SimpleNamespace(val=np.ascontiguousarray(v)) for key, v in held.items()}
    before, _ = reader._read_described(tmp_path / "old.mlpackage", entry, {}, constants)
    for layer in (read, before):
        np.testing.assert_array_equal(layer.directions[0].W, p.W)
        np.testing.assert_array_equal(layer.directions[0].R, p.R)


REAL = sorted(p.name for p in REALMODELS.glob("*.onnx") if "lstm" not in p.name and p.name != "gtcrn_stream.onnx")


@pytest.mark.parametrize("name", REAL)
def test_real_models_convert_and_verify(name, tmp_path):
    result = gp.convert(REALMODELS / name, tmp_path / "m.mlpackage", to="coreml", layers_only=True)
    assert result.verification.passed, result.verification.to_text()
    assert len(gp.load(tmp_path / "m.mlpackage").layers) == len(gp.load(REALMODELS / name).layers)


def test_real_lstm_model_layers_only(tmp_path):
    result = gp.convert(REALMODELS / "dtln_model_1_lstm.onnx", tmp_path / "m.mlpackage", layers_only=True)
    assert result.verification.passed and len(result.verification.outputs) == 6


def test_bad_packages(tmp_path):
    from click.testing import CliRunner

    from gatepack.cli import main

    runner = CliRunner()
    onnx.save(build_model(Config(H=16, I=16)), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.mlpackage", to="coreml")
    blob = next((tmp_path / "m.mlpackage").rglob("weight.bin"))
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])
    result = runner.invoke(
        main, ["convert", str(tmp_path / "m.mlpackage"), "--to", "onnx", "-o", str(tmp_path / "o.onnx")]
    )
    assert result.exit_code == 3 and "m.mlpackage" in result.output and len(result.output.strip().splitlines()) == 1, (
        result.output
    )
    assert not (tmp_path / "o.onnx").exists()
    # a gru op whose bias has the wrong length (coremltools does not check it)
    path = _save_program(
        lambda mb, x, h0: mb.gru(
            x=x,
            initial_h=h0,
            weight_ih=np.zeros((12, 3), np.float32),
            weight_hh=np.zeros((12, 4), np.float32),
            bias=np.zeros(9, np.float32),
            output_sequence=True,
        ),
        [(5, 1, 3), (1, 4)],
        tmp_path,
    )
    result = runner.invoke(main, ["inspect", str(path)])
    assert (
        result.exit_code == 3
        and "bias has shape [9], expected [12]" in result.output
        and len(result.output.strip().splitlines()) == 1
    ), result.output


FP16 = MATRIX[::6]  # 60 configurations, each package converted twice by coremltools' passes


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", FP16, ids=[c.label() for c in FP16])
def test_fp16_packages(cfg: Config, tmp_path):
    """--compress-to-fp16: coremltools' fp16 cast pass over gatepack's program; every weight
    constant is fp16 in the saved package, the interface stays fp32, and the program run from disk
    agrees with onnxruntime within fp16 tolerance."""
    src, out = tmp_path / "m.onnx", tmp_path / "m.mlpackage"
    onnx.save(build_model(cfg), src)
    result = gp.convert(
        src, out, to="coreml", compress_to_fp16=True, minimum_deployment_target="iOS17", allow_lossy=True, verify=False
    )
    assert any(f.feature == "dtype" and f.status.value == "lossy" for f in result.findings["rec"])
    program = ct_program(out)
    weights = [
        op.outputs[0].val
        for op in program.operations
        if op.op_type == "const" and np.asarray(op.outputs[0].val).ndim == 2
    ]
    assert weights and all(np.asarray(w).dtype == np.float16 for w in weights)
    from coremltools.converters.mil.mil import types

    assert {types.builtin_to_string(v.dtype) for v in program.inputs.values()} <= {
        "fp32",
        "int32",
    }  # the interface stays fp32
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0), engine="numpy")
    assert all(v.dtype == np.float32 for v in outputs.values())
    assert_matches_onnxruntime(cfg, feed0, outputs, 1e-2, 1e-2)
    back = gp.load(out).layers[0]
    source = gp.load(src).layers[0]
    np.testing.assert_array_equal(back.directions[0].W, source.directions[0].W.astype(np.float16).astype(np.float32))


def test_fp16_needs_ios17(tmp_path):
    onnx.save(build_model(Config()), tmp_path / "m.onnx")
    with pytest.raises(gp.RefusedError, match="fp16 packages need iOS17"):
        gp.convert(
            tmp_path / "m.onnx",
            tmp_path / "m.mlpackage",
            to="coreml",
            compress_to_fp16=True,
            minimum_deployment_target="iOS16",
        )
    assert not (tmp_path / "m.mlpackage").exists()


def test_saving_a_package_forces_no_garbage_collection_and_leaves_gc_as_found(tmp_path, monkeypatch):
    """coremltools' convert forces a full ``gc.collect()`` (~90 ms in a process holding onnx and coremltools,
    seconds in a long-lived one); gatepack's own export of the program runs no collection, and leaves an
    application's frozen objects alone."""
    import gc

    seen = []
    collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: seen.append(gc.get_freeze_count()) or collect(*a))
    onnx.save(build_model(Config()), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "a.mlpackage", to="coreml", verify=False)
    assert seen == [] and gc.get_freeze_count() == 0
    gc.freeze()  # the application's own freeze: kept as it is
    try:
        frozen = gc.get_freeze_count()
        gp.convert(tmp_path / "m.onnx", tmp_path / "b.mlpackage", to="coreml", verify=False)
        assert seen == [] and gc.get_freeze_count() > frozen // 2  # (frozen objects may still be freed by refcount)
    finally:
        gc.unfreeze()


LOOP_SIZES = (5, 2, 3, 4)  # S, N, I, H of the hand-built loops


def _hand_built_rnn_loop(tmp_path, extra: bool = False, seed: int = 11, start: np.ndarray | None = None):
    """A tanh RNN written with coremltools' builder as coremltools' PyTorch frontend writes a recurrence (its
    nn.GRU): a while_loop gathering step t of X and the state at t from an [S+1,N,H] buffer that starts as
    concat(h0, zeros), linear ops of both, the new state scattered in at t + 1. ``extra``: the step also adds
    another program input; ``start``: the buffer starts as this constant instead (as coremltools writes a
    module's learned h0; an fp16 one cast to fp32, as in an fp16 program) and the program takes X alone.
    Returns the package, its weights and inputs."""
    rng = np.random.default_rng(seed)
    s, n, i, h = LOOP_SIZES
    w, r = rng.uniform(-1, 1, (h, i)).astype(np.float32), rng.uniform(-1, 1, (h, h)).astype(np.float32)
    b = rng.uniform(-1, 1, h).astype(np.float32)

    def build(mb, x, h0=None, other=None):
        def body(step, buffer):
            x_t = mb.squeeze(x=mb.gather(x=x, indices=step, axis=0), axes=[0])
            h_t = mb.squeeze(x=mb.gather(x=buffer, indices=step, axis=0), axes=[0])
            pre = mb.add(x=mb.linear(x=x_t, weight=w, bias=b), y=mb.linear(x=h_t, weight=r))
            new = mb.expand_dims(x=mb.tanh(x=pre if other is None else mb.add(x=pre, y=other)), axes=[0])
            after = mb.add(x=step, y=np.int32(1))
            return after, mb.scatter(data=buffer, indices=after, updates=new, axis=0, mode="update")

        if start is None:
            begin = mb.concat(values=[h0, np.zeros((s, n, h), np.float32)], axis=0)
        else:
            begin = mb.cast(x=start, dtype="fp32") if start.dtype == np.float16 else start
        loop_vars = (np.array([0], np.int32), begin)
        return mb.while_loop(_cond=lambda step, _: mb.less(x=step, y=np.int32(s)), _body=body, loop_vars=loop_vars)[1]

    shapes = [(s, n, i)] + ([] if start is not None else [(1, n, h)] + ([(n, h)] if extra else []))
    path = _save_program(build, shapes, tmp_path)
    feed = {"x": rng.uniform(-1, 1, (s, n, i)).astype(np.float32), "initial_h": rng.uniform(-1, 1, (1, n, h))}
    if start is not None:
        del feed["initial_h"]
    return path, (w, r, b), {k: v.astype(np.float32) for k, v in feed.items()}


def _rnn_steps(x: np.ndarray, weights: tuple, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hand-built loop's recurrence computed here in float64, h_t = tanh(W x_t + b + R h_{t-1}) from h_0 =
    ``state`` [N,H]: Y [S,N,H] and the last state."""
    w, r, b = weights
    state, steps = state.astype(np.float64), []
    for x_t in x.astype(np.float64):
        state = np.tanh(x_t @ w.T + b + state @ r.T)
        steps.append(state)
    return np.stack(steps), state


def test_a_while_loop_starting_from_a_given_state_is_lifted_with_it(tmp_path):
    """The loop's state buffer starts from the program's h0: the lifted RNN takes it as its initial state;
    converted to ONNX (verified against the MIL interpreter) onnxruntime gives the recurrence computed here
    from the weights, h_t = tanh(W x_t + b + R h_{t-1}) from h_0 = h0."""
    import onnxruntime as ort

    path, weights, feed = _hand_built_rnn_loop(tmp_path, extra=False)
    (layer,) = gp.load(path).layers
    assert (layer.cell.op_name, layer.interface.x, layer.interface.initial_h) == ("RNN", "x", "initial_h")
    out = tmp_path / "rnn.onnx"
    assert gp.convert(path, out, to="onnx", layers_only=True).verification.passed
    (written,) = gp.load(out).layers  # the program's own input names kept, its internal ones made readable
    y, y_h = ort.InferenceSession(str(out)).run([written.interface.y, written.interface.y_h], feed)
    steps, state = _rnn_steps(feed["x"], weights, feed["initial_h"][0])
    np.testing.assert_allclose(y[:, 0], steps, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(y_h[0], state, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_while_loop_starting_from_a_constant_state_holds_it_as_a_learned_initial_state(tmp_path, dtype):
    """The loop's buffer starts as one constant whose row 0 is a state and the rest zeros (coremltools' fold of a
    module's nn.Parameter h0; in fp16, cast to fp32): the lifted RNN holds that state (as fp32) as its constant
    initial_h and takes X alone; converted to ONNX (verified against the MIL interpreter), onnxruntime fed X
    alone gives the recurrence computed here from the weights and that state."""
    import onnxruntime as ort

    s, n, _, h = LOOP_SIZES
    learned = np.random.default_rng(3).uniform(-1, 1, (1, n, h)).astype(dtype).astype(np.float32)
    path, weights, feed = _hand_built_rnn_loop(
        tmp_path, start=np.concatenate([learned, np.zeros((s, n, h), np.float32)]).astype(dtype)
    )
    (layer,) = gp.load(path).layers
    assert layer.fed_roles() == () and list(layer.constants) == ["initial_h"]
    np.testing.assert_array_equal(layer.constants["initial_h"], learned)
    out = tmp_path / "rnn.onnx"
    assert gp.convert(path, out, to="onnx", layers_only=True).verification.passed
    (written,) = gp.load(out).layers
    session = ort.InferenceSession(str(out))
    assert [i.name for i in session.get_inputs()] == ["x"]
    y, y_h = session.run([written.interface.y, written.interface.y_h], feed)
    steps, state = _rnn_steps(feed["x"], weights, learned[0])
    np.testing.assert_allclose(y[:, 0], steps, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(y_h[0], state, atol=1e-5, rtol=1e-4)


def test_a_while_loop_starting_from_a_constant_that_is_no_initial_state_is_refused_on_one_line(tmp_path):
    """A constant start with a non-zero row past row 0 is not an initial state followed by zeros (not what
    coremltools writes): refused on one line naming the loop, and nothing is written."""
    s, n, _, h = LOOP_SIZES
    start = np.zeros((s + 1, n, h), np.float32)
    start[0], start[2] = 0.5, 0.25
    path, _, _ = _hand_built_rnn_loop(tmp_path, start=start)
    out = tmp_path / "out.onnx"
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.convert(path, out, to="onnx", layers_only=True)
    line = err.value.one_line()
    assert "while_loop" in line and "not an initial state followed by zeros" in line
    assert "\n" not in line and not out.exists()


def test_a_while_loop_reading_another_input_is_refused_on_one_line(tmp_path):
    """A loop whose step also reads a program input that is neither its X nor its initial state is no GRU/RNN
    layer: refused on one line naming the loop and the input, and nothing is written."""
    path, _, _ = _hand_built_rnn_loop(tmp_path, extra=True)
    out = tmp_path / "out.onnx"
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.convert(path, out, to="onnx", layers_only=True)
    line = err.value.one_line()
    assert "while_loop" in line and "reads ['initial_c'] besides its X 'x' and initial state 'initial_h'" in line
    assert "\n" not in line and not out.exists()

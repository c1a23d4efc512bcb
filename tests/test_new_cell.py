"""A new cell is one record: a minimal gated unit (MGU; Zhou et al. 2016, "Minimal gated unit for recurrent neural
networks"), registered here with its gates, its graph step and its executor step and no ONNX operator, is written
by every format that expresses it with elementary operators (ONNX's Loop, OpenVINO's TensorIterator, Core ML's
while_loop, LiteRT's unrolled builtin ops), each artifact verified by gatepack, read back as the MGU and, run as
written, equal to an independent NumPy transcription of the MGU's equations; every other format refuses it, naming
those. No module of gatepack is edited.

MGU, per direction, gates f (forget) and h (candidate), W [2H, I], R [2H, H]::

    f  = sigmoid(x Wf^T + h Rf^T + Wbf + Rbf)
    n  = tanh(x Wh^T + (f * h) Rh^T + Wbh + Rbh)
    h' = (1 - f) * h + f * n
"""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx
import pytest

import gatepack as gp
from gatepack.converters import registry
from gatepack.converters.decompose import build_activation
from gatepack.converters.model import Model
from gatepack.schemas import cells
from gatepack.schemas.activations import Activation
from gatepack.schemas.layer import Direction, DirectionParams, Interface, RecurrentLayer

S, N, I, H = 5, 2, 3, 4
ELEMENTARY = {"onnx": "out.onnx", "openvino": "out.xml", "coreml": "out.mlpackage", "litert": "out.tflite"}


def mgu_graph_step(o, layer, params, gx, state, swapped=False):
    """One step as elementary ops (``cell_steps.StepOps``): the gate blocks f, h of gx = x W^T + Wb. ``swapped``: a
    wrong step, h' = (1 - f) * n + f * h (the update's two terms swapped), which verification must catch."""
    (h_prev,) = state
    f_act, g_act = params.activations
    xf, xh = o.split(gx, 2)
    forget = build_activation(o, o.add(xf, o.recurrent(h_prev, 0, 1)), f_act, o.builder)
    candidate = build_activation(o, o.add(xh, o.recurrent(o.mul(forget, h_prev), 1, 2)), g_act, o.builder)
    kept, new = (candidate, h_prev) if swapped else (h_prev, candidate)
    return [o.add(o.mul(o.sub(o.const(forget, 1), forget), kept), o.mul(forget, new))]


def mgu_executor_step(hidden, activations, r, rb, clip, options, peephole):
    """The executor's step on pre-projected inputs gx [N, 2H]; every recurrent bias adds to gx (returned)."""
    f_act, g_act = activations
    r_f, r_h = r[:hidden], r[hidden:]

    def step(gx, state):
        (h,) = state
        f = f_act(clip(gx[:, :hidden] + h @ r_f.T))
        n = g_act(clip(gx[:, hidden:] + (f * h) @ r_h.T))
        return ((1 - f) * h + f * n,)

    return step, rb


MGU = cells.CellSpec(
    "mgu",
    "MGU",
    gates=("f", "h"),
    gate_meanings=("forget", "hidden candidate"),
    default_activations=("Sigmoid", "Tanh"),
    graph_step=mgu_graph_step,
    executor_step=mgu_executor_step,
)


@pytest.fixture(scope="module")
def mgu():
    cell = cells.register(MGU)
    yield cell
    cells.unregister(cell)


def _layer(cell, layout: int = 0, lengths: bool = False) -> RecurrentLayer:
    rng = np.random.default_rng(44)

    def weights() -> DirectionParams:
        w, r = rng.uniform(-0.8, 0.8, (2 * H, I)), rng.uniform(-0.8, 0.8, (2 * H, H))
        wb, rb = rng.uniform(-0.3, 0.3, 2 * H), rng.uniform(-0.3, 0.3, 2 * H)
        acts = (Activation("Sigmoid"), Activation("Tanh"))
        return DirectionParams(*(a.astype(np.float32) for a in (w, r, wb, rb)), acts)

    lens = "sequence_lens" if lengths else None
    itf = Interface(
        "X", "Y", "Y_h", initial_h="initial_h", sequence_lens=lens, layout=layout, seq_length=S, batch_size=N
    )
    return RecurrentLayer("mgu", cell, I, H, Direction.BIDIRECTIONAL, (weights(), weights()), itf)


def transcription(
    layer: RecurrentLayer, x: np.ndarray, h0: np.ndarray, lens: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The MGU's equations in NumPy, sample by sample, float64: Y [S, D, N, H] and Y_h [D, N, H]. With ``lens``,
    ONNX's sequence lengths: sample n runs its first lens[n] steps (the reverse direction from step lens[n] - 1), Y
    is 0 past them, Y_h the state at the last step run (0 for a length of 0)."""
    y = np.zeros((S, 2, N, H))
    y_h = np.zeros((2, N, H))
    for d, p in enumerate(layer.directions):
        w, r, wb, rb = (np.float64(a) for a in (p.W, p.R, p.Wb, p.Rb))
        for n in range(N):
            steps = S if lens is None else int(lens[n])
            h = np.float64(h0[d, n]) if steps else np.zeros(H)
            for t in reversed(range(steps)) if d else range(steps):
                f = 1 / (1 + np.exp(-(w[:H] @ x[t, n] + r[:H] @ h + wb[:H] + rb[:H])))
                cand = np.tanh(w[H:] @ x[t, n] + r[H:] @ (f * h) + wb[H:] + rb[H:])
                h = (1 - f) * h + f * cand
                y[t, d, n] = h
            y_h[d, n] = h
    return y, y_h


def test_the_formats_that_express_it_elementarily_are_the_ones_that_write_it(mgu):
    """ONNX, OpenVINO, Core ML and LiteRT have an elementary form (and no op of their own for it): they write it;
    DirectML and BNNS have no op for it and no elementary form: refused, naming those."""
    writers = [name for name in registry.writers() if registry.FORMATS[name].writes_cell(mgu)]
    assert set(ELEMENTARY) <= set(writers) and not {"directml", "bnns"} & set(writers)
    for name in ("onnx", "directml", "bnns"):
        assert all(
            mgu not in caps.ops
            for caps in [registry.FORMATS[name].capabilities, *dict(registry.FORMATS[name].variants).values()]
        )
    report = gp.report(Model(None, "onnx", [_layer(mgu)]))
    for name in ("directml", "bnns"):
        (refusal,) = [f for f in report.layers[0].targets[name].findings if f.feature == "cell"]
        assert refusal.status.value == "unsupported" and "openvino" in refusal.alternative


@pytest.mark.parametrize("target", sorted(ELEMENTARY))
def test_a_new_cell_converts_to_every_elementary_format_and_matches_its_equations(mgu, target, tmp_path):
    """Written with the elementary form (the report says so), verified by gatepack (the artifact read back and run
    on its runtime against the executor's MGU step), and the artifact as written equal to the transcription."""
    layer = _layer(mgu)
    out = tmp_path / ELEMENTARY[target]
    result = gp.convert(Model(None, "onnx", [layer]), out, to=target)
    assert result.passed, result.to_text()
    cell = next(f for f in result.findings[layer.name] if f.feature == "cell")
    assert cell.status.value == "decomposed" and "no MGU op" in cell.detail
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (S, N, I)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (2, N, H)).astype(np.float32)
    engine = "numpy" if not registry.FORMATS[target].runs_here else "native"
    got = gp.run(out, {"X": x, "initial_h": h0}, engine=engine)
    y, y_h = transcription(layer, x, h0)
    np.testing.assert_allclose(got["Y"], y, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(got["Y_h"], y_h, atol=1e-5, rtol=1e-4)
    assert gp.load(out).layers[0].cell is mgu


def test_onnx_holds_it_as_a_loop_batch_major_with_lengths(mgu, tmp_path):
    """ONNX has no MGU operator: a Loop per direction of the MGU's graph step, inside Transposes for a batch-major
    interface, with ONNX's sequence-length rules; onnxruntime runs the file as written, equal to the transcription."""
    layer = _layer(mgu, layout=1, lengths=True)
    out = tmp_path / "out.onnx"
    result = gp.convert(Model(None, "onnx", [layer]), out, to="onnx")
    assert result.passed, result.to_text()
    ops = [node.op_type for node in onnx.load(str(out)).graph.node]
    assert ops.count("Loop") == 2 and not {"GRU", "RNN", "LSTM"} & set(ops)
    rng = np.random.default_rng(8)
    x = rng.uniform(-1, 1, (S, N, I)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (2, N, H)).astype(np.float32)
    lens = np.array([3, 0], np.int32)
    feed = {"X": x.transpose(1, 0, 2), "initial_h": h0.transpose(1, 0, 2), "sequence_lens": lens}
    got = gp.run(out, feed, engine="native")
    y, y_h = transcription(layer, x, h0, lens)
    np.testing.assert_allclose(got["Y"], y.transpose(2, 0, 1, 3), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(got["Y_h"], y_h.transpose(1, 0, 2), atol=1e-5, rtol=1e-4)
    read = gp.load(out).layers[0]
    assert read.cell is mgu and read.interface.layout == 1 and read.interface.sequence_lens == "sequence_lens"
    for got_p, want_p in zip(read.directions, layer.directions):
        for role in ("W", "R", "Wb", "Rb"):
            np.testing.assert_array_equal(getattr(got_p, role), getattr(want_p, role))


def test_a_graph_step_that_swaps_the_update_fails_verification(tmp_path):
    """The mutation h' = (1 - f) * n + f * h in the graph step alone (the executor's step is the MGU's): the ONNX
    Loop computes it, and gatepack's verification against the executor refuses the file."""
    swapped = cells.register(MGU._replace(name="mgu_swapped", graph_step=partial(mgu_graph_step, swapped=True)))
    try:
        with pytest.raises(gp.VerificationError):
            gp.convert(Model(None, "onnx", [_layer(swapped)]), tmp_path / "out.onnx", to="onnx")
        assert not (tmp_path / "out.onnx").exists()
    finally:
        cells.unregister(swapped)


def test_onnx_for_directml_holds_it_too_and_native_refuses_it(mgu, tmp_path):
    """``--for directml`` writes the same Loop (DirectML has no MGU operator to prefer); ``--strategy native`` has no
    operator to use: refused, naming the elementary form."""
    out = tmp_path / "dml.onnx"
    result = gp.convert(Model(None, "onnx", [_layer(mgu)]), out, to="onnx", runtime="directml")
    assert result.passed and "Loop" in {node.op_type for node in onnx.load(str(out)).graph.node}
    assert gp.load(out).layers[0].cell is mgu
    with pytest.raises(gp.RefusedError) as refused:
        gp.convert(Model(None, "onnx", [_layer(mgu)]), tmp_path / "n.onnx", to="onnx", strategy="native")
    assert "there is no MGU op" in str(refused.value) and "decomposed" in (refused.value.hint or "")

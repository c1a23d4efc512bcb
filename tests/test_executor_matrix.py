"""The executor against onnxruntime on a generated matrix of configurations (the issue asks >= 300)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from helpers import Config, build_model, inputs, matrix, ort_reference, outputs_to_layout0, to_layout

from gatepack.converters.executor import run_layer
from gatepack.converters.formats import onnx as onnx_format

MATRIX = matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


def read_layer(cfg: Config, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(build_model(cfg), path)
    model = onnx_format.read(path)
    assert len(model.layers) == 1
    return model.layers[0]


def check_against_ort(cfg: Config, tmp_path, scale: float = 1.0) -> float:
    layer = read_layer(cfg, tmp_path)
    feed0 = inputs(cfg, scale)
    feed = to_layout(cfg, feed0)
    y, y_h = run_layer(layer, feed["X"], feed.get("sequence_lens"), feed.get("initial_h"))
    if scale > 1:  # saturating activations on huge inputs: everything stays finite
        assert np.isfinite(y).all() and np.isfinite(y_h).all()
    assert y.dtype == np.dtype(cfg.dtype) and y_h.dtype == np.dtype(cfg.dtype)
    y, y_h = outputs_to_layout0(cfg, y, y_h)
    ref_y, ref_y_h = ort_reference(cfg, feed0)
    atol, rtol = TOLERANCE[cfg.dtype]
    worst = 0.0
    for ours, ref in ((y, ref_y), (y_h, ref_y_h)):
        # onnxruntime is no oracle where it overflowed itself (e.g. its naive Softplus gives NaN in
        # divergent recurrences where the executor's stable formula stays finite).
        finite = np.isfinite(ref)
        assert finite.mean() > 0.5, "onnxruntime overflowed on most of this case"
        np.testing.assert_allclose(ours.astype(np.float64)[finite], ref[finite], atol=atol, rtol=rtol)
        if finite.any():
            worst = max(worst, float(np.abs(ours.astype(np.float64)[finite] - ref[finite]).max()))
    return worst


def test_matrix_is_large_and_covers_everything():
    assert len(MATRIX) >= 300
    seen = {(c.cell, c.direction, c.lbr, c.layout, c.seq_lens, c.initial_h, c.bias) for c in MATRIX}
    assert {"none", "full", "mixed", "zero"} <= {c.seq_lens for c in MATRIX}
    for cell in ("GRU", "RNN"):
        used = {a for c in MATRIX if c.cell == cell and c.activations for a in c.activations}
        assert used == set(
            ("Relu Tanh Sigmoid Affine LeakyRelu ThresholdedRelu ScaledTanh HardSigmoid Elu Softsign Softplus").split()
        )
    assert any(c.clip for c in MATRIX if c.cell == "GRU") and any(c.clip == 0.0 for c in MATRIX if c.cell == "RNN")
    assert {c.dtype for c in MATRIX} == {"float16", "float32", "float64"}
    assert any(c.H == 1 for c in MATRIX) and any(c.I == 1 for c in MATRIX) and any(c.S == 1 for c in MATRIX)
    assert len(seen) > 150


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_executor_matches_onnxruntime(cfg: Config, tmp_path):
    check_against_ort(cfg, tmp_path)


@pytest.mark.parametrize("cell", ["GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_huge_inputs_stay_finite(cell, direction, tmp_path):
    # onnxruntime's rational sigmoid/tanh stay finite for +-1e20; so must the executor, silently.
    cfg = Config(
        cell=cell, direction=direction, lbr=1 if cell == "GRU" else 0, seq_lens="mixed", initial_h=True, seed=7
    )
    check_against_ort(cfg, tmp_path, scale=1e20)


@pytest.mark.parametrize(
    "name",
    [
        "Sigmoid",
        "Tanh",
        "Softplus",
        "Elu",
        "Softsign",
        "HardSigmoid",
        "ScaledTanh",
        "ThresholdedRelu",
        "LeakyRelu",
        "Relu",
        "Affine",
    ],
)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_activations_are_stable_on_huge_values(name, dtype):
    from gatepack.schemas.activations import KINDS, Activation

    kind = KINDS[name]
    act = Activation(name, 0.5 if kind.takes_alpha else None, 0.25 if kind.takes_beta else None)
    big = np.finfo(dtype).max / 4
    x = np.array([-big, -1e4, -30.0, -1.0, 0.0, 1.0, 30.0, 1e4, big], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = act(x)
    assert y.dtype == np.dtype(dtype)
    expected = {
        "Sigmoid": [0, 0, 0, 0.2689414, 0.5, 0.7310586, 1, 1, 1],
        "Tanh": [-1, -1, -1, -0.7615942, 0, 0.7615942, 1, 1, 1],
        "Softsign": [-1, -0.9999, -0.9677419, -0.5, 0, 0.5, 0.9677419, 0.9999, 1],
        "HardSigmoid": [0, 0, 0, 0, 0.25, 0.75, 1, 1, 1],
        "ScaledTanh": [-0.5, -0.5, -0.5, -0.1224593, 0, 0.1224593, 0.5, 0.5, 0.5],
    }
    if name in expected:  # hand-checked values
        np.testing.assert_allclose(y.astype(np.float64), expected[name], atol=2e-3 if dtype == "float16" else 1e-6)
    elif name == "Softplus":
        np.testing.assert_allclose(y[3:6].astype(np.float64), [0.3132617, 0.6931472, 1.3132617], rtol=1e-3)
        assert y[0] == 0 and y[-1] == x[-1]
    elif name == "Elu":
        np.testing.assert_allclose(y[:5].astype(np.float64), [-0.5, -0.5, -0.5, -0.3160603, 0], rtol=1e-3)
    assert np.isfinite(y).all()


def test_float16_against_onnxruntime_float16(tmp_path):
    # onnxruntime runs float16 GRU natively: compare with its own float16 result too.
    from helpers import ort_run

    cfg = Config(
        cell="GRU", direction="bidirectional", lbr=1, seq_lens="mixed", initial_h=True, dtype="float16", seed=3
    )
    layer = read_layer(cfg, tmp_path)
    feed = inputs(cfg)
    y, y_h = run_layer(layer, feed["X"], feed["sequence_lens"], feed["initial_h"])
    ref_y, ref_y_h = ort_run(build_model(cfg), feed)
    np.testing.assert_allclose(y.astype(np.float32), ref_y.astype(np.float32), atol=5e-3, rtol=5e-3)
    np.testing.assert_allclose(y_h.astype(np.float32), ref_y_h.astype(np.float32), atol=5e-3, rtol=5e-3)

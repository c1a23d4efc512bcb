"""LSTM to OpenVINO IR: every configuration of the LSTM matrix converted (auto), the saved IR run on
OpenVINO CPU (f32) and compared with onnxruntime (the float64 transcription for float64); the native
LSTMSequence-5 where it is exact, on configurations made representable by it; round trips to ONNX;
IRs made by OpenVINO's own converter; the four real LSTM models as whole models."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import openvino as ov
import pytest
from helpers import REALMODELS, Config, build_model, inputs, lstm_matrix, static_case, static_model, to_layout
from test_lstm import (
    PEEPHOLE_CASES,
    assert_close,
    assert_refused_when_forced,
    assert_round_trip_keeps_every_weight,
    expected_outputs,
)
from test_realmodels import SILERO_V4, real_feed

import gatepack as gp
from gatepack.converters.formats import openvino as openvino_format

MATRIX = lstm_matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}  # OpenVINO CPU, f32
NATIVE_ACTIVATIONS = ("Sigmoid", "Tanh", "Relu")


def native_is_exact(cfg: Config, static: bool) -> bool:
    """Whether LSTMSequence-5 on OpenVINO CPU computes the ONNX node, from the configuration and what
    docs/conventions.md §8 records (not from gatepack): no peepholes, no input_forget, Sigmoid, Tanh or
    Relu in every slot, one list for both directions, sequence lengths only with static shapes."""
    names = cfg.activations or ["Sigmoid", "Tanh", "Tanh"] * cfg.D
    lists = {tuple(names[d * 3 : (d + 1) * 3]) for d in range(cfg.D)}
    return (
        not cfg.peepholes
        and not cfg.input_forget
        and len(lists) == 1
        and set(names) <= set(NATIVE_ACTIVATIONS)
        and (cfg.seq_lens == "none" or static)
    )


def convert_and_run(cfg: Config, tmp_path, strategy: str, static: bool) -> tuple[str, object]:
    """Convert, run the saved IR on OpenVINO CPU, compare with the oracle; return the strategy used."""
    src = tmp_path / "lstm.onnx"
    onnx.save(static_model(cfg) if static else build_model(cfg), src)
    out = tmp_path / "lstm.xml"
    result = gp.convert(src, out, to="openvino", strategy=strategy, allow_lossy=True)
    assert result.verification.passed, result.verification.to_text()
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0))
    (layer,) = gp.load(out).layers
    got = [outputs[getattr(layer.interface, role)] for role in ("y", "y_h", "y_c")]
    if cfg.layout:
        got = [got[0].transpose(1, 2, 0, 3), got[1].transpose(1, 0, 2), got[2].transpose(1, 0, 2)]
    assert_close(cfg, got, expected_outputs(cfg, feed0), *TOLERANCE[cfg.dtype], dtype=cfg.dtype)
    return layer.provenance.kind, layer


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix_auto(cfg: Config, tmp_path):
    """auto uses LSTMSequence-5 exactly where it is exact, the TensorIterator decomposition elsewhere."""
    chosen, _ = convert_and_run(cfg, tmp_path, "auto", static_case(cfg))
    assert chosen == ("native" if native_is_exact(cfg, static_case(cfg)) else "decomposed")


def native_variant(cfg: Config) -> Config:
    """The configuration made representable by LSTMSequence-5: no peepholes or coupling, activations
    among Sigmoid, Tanh, Relu (derived from the original), the same in both directions."""
    acts = None
    if cfg.activations:
        acts = [NATIVE_ACTIVATIONS[len(name) % 3] for name in cfg.activations[:3]] * cfg.D
    return replace(cfg, peepholes=False, input_forget=0, activations=acts, alphas=None, betas=None)


NATIVE = [native_variant(c) for c in MATRIX[::3] if c.dtype == "float32"]


def test_native_variants_cover_clip_lengths_and_states():
    assert len(NATIVE) >= 60
    assert any(c.clip for c in NATIVE) and {c.seq_lens for c in NATIVE} == {"none", "full", "mixed", "zero"}
    assert any(c.initial_c for c in NATIVE) and any(c.D == 2 for c in NATIVE) and any(c.layout for c in NATIVE)
    assert any(c.activations and "Relu" in c.activations for c in NATIVE)


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", NATIVE, ids=[c.label() for c in NATIVE])
def test_native_lstm_sequence_where_it_is_exact(cfg: Config, tmp_path):
    static = cfg.seq_lens != "none"
    chosen, layer = convert_and_run(cfg, tmp_path, "native", static)
    assert chosen == "native"
    # IR -> ONNX: W and R bit-exact (gates permuted back), the biases summed exactly
    back = gp.convert(tmp_path / "lstm.xml", tmp_path / "back.onnx", to="onnx")
    assert back.verification.passed
    (source,) = gp.load(tmp_path / "lstm.onnx").layers
    (again,) = gp.load(tmp_path / "back.onnx").layers
    for p, q in zip(source.directions, again.directions):
        np.testing.assert_array_equal(q.W, p.W)
        np.testing.assert_array_equal(q.R, p.R)
        np.testing.assert_array_equal(q.Wb, p.Wb + p.Rb)
        assert not q.Rb.any()


def test_forcing_native_with_peepholes_or_coupling_is_refused(tmp_path):
    for cfg in (Config(cell="LSTM", peepholes=True), Config(cell="LSTM", input_forget=1)):
        assert_refused_when_forced(cfg, tmp_path, "openvino", "m.xml", "LSTMSequence-5 has no")


@pytest.mark.parametrize("cfg", PEEPHOLE_CASES[:8], ids=lambda c: c.label())
def test_decomposed_round_trip_keeps_every_weight(cfg: Config, tmp_path):
    assert_round_trip_keeps_every_weight(cfg, tmp_path, "openvino", "m.xml")


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_reads_lstm_irs_made_by_openvinos_own_converter(direction, tmp_path):
    """ov.convert_model's LSTMSequence (gates f, i, c, o, biases summed, zero states and full lengths
    computed from X's shape) reads back as the ONNX layer; both run alike on OpenVINO CPU."""
    cfg = Config(cell="LSTM", direction=direction, initial_h=True, initial_c=True, seed=11)
    src = tmp_path / "m.onnx"
    onnx.save(build_model(cfg), src)
    ir = tmp_path / "ov.xml"
    ov.save_model(ov.convert_model(str(src)), str(ir), compress_to_fp16=False)
    (layer,) = gp.load(ir).layers
    (source,) = gp.load(src).layers
    assert layer.cell.value == "lstm" and layer.interface.initial_c and layer.interface.y_c
    for p, q in zip(source.directions, layer.directions):
        np.testing.assert_array_equal(q.W, p.W)
        np.testing.assert_array_equal(q.R, p.R)
        np.testing.assert_allclose(q.Wb, p.Wb + p.Rb, rtol=1e-6, atol=1e-7)
    result = gp.convert(ir, tmp_path / "back.onnx", to="onnx", layers_only=True)
    assert result.verification.passed, result.verification.to_text()
    assert any(f.feature == "bias" and f.status.value == "folded" for f in result.findings[layer.name])


LSTM_REAL_MODELS = ["dpcrn_online_simple_lstm.onnx", "dtln_model_1_lstm.onnx", "silero_vad_openvino_16k_lstm.onnx"]


@pytest.mark.parametrize("name", LSTM_REAL_MODELS + [SILERO_V4])
def test_real_lstm_models_convert_whole_and_match_onnxruntime(name, tmp_path):
    import onnxruntime as ort

    src, out = REALMODELS / name, tmp_path / "m.xml"
    feed = real_feed(name)
    # silero v4 runs on 512-sample chunks only: verification on chunks of 7 would be incomplete (its own Pad fails)
    shapes = {"input": feed["input"].shape} if name == SILERO_V4 else None
    result = gp.convert(src, out, to="openvino", input_shapes=shapes)
    assert result.whole and result.verification.passed, result.verification.to_text()
    assert sorted(lay.name for lay in gp.load(out).layers) == sorted(lay.name for lay in gp.load(src).layers)
    compiled = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feed)
    got = compiled(feed)
    names = [o.name for o in onnx.load(str(src)).graph.output]
    ours = gp.run(out, feed)  # gatepack's run feeds a scalar (silero's sr) as the 0-d tensor the IR declares
    for output, ref in zip(names, expected):
        np.testing.assert_allclose(got[output], ref, atol=1e-5, rtol=1e-5, err_msg=f"{name} {output}")
        np.testing.assert_allclose(ours[output], ref, atol=1e-5, rtol=1e-5, err_msg=f"{name} {output} (run)")


def test_native_blockers_name_lstm_features():
    cfg = Config(cell="LSTM", peepholes=True, input_forget=1, activations=["HardSigmoid", "Tanh", "Tanh"])
    reasons = " ".join(openvino_format.native_blockers(_layer_of(cfg)))
    assert "peephole" in reasons and "input_forget" in reasons and "HardSigmoid" in reasons


def _layer_of(cfg: Config):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "m.onnx"
        onnx.save(build_model(cfg), path)
        return gp.load(path).layers[0]

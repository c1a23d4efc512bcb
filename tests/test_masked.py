"""Keras masking (``Embedding(mask_zero=True)``, ``Masking``) lifted into layers with a per-step hold.

fixtures/producers ``tf2onnx_masked_*`` and ``tf2onnx_keras2_masked_*``: tf2onnx writes each masked Keras layer as a
``Loop`` that gathers the mask step by step beside X, carries the last output beside the state(s) and keeps both
where the mask is false. The mask is computed from the data, so it may have holes anywhere: it is no
``sequence_lens``. gatepack lifts such a loop into a layer whose interface names the mask (``Interface.mask``:
``s_t = m_t ? step(s_{t-1}, x_t) : s_{t-1}``, ``Y_t = h_t``), proven against onnxruntime running the loop on
masks with holes, and rewrites the whole model in place with an elementary ONNX Loop holding the states (ONNX;
OpenVINO through its ONNX frontend). Oracles: the Keras outputs committed as truth (right-padded rows: a prefix
mask), onnxruntime running the original model on inputs whose mask has holes, and onnxruntime's own RNN node run
on each row with its held steps left out (a held step is a skipped one).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import gatepack.converters as gp
from gatepack.converters.executor import run_layer
from gatepack.converters.findings import Status
from gatepack.converters.formats.openvino.registration import openvino as import_openvino
from gatepack.converters.inspection import describe_json, describe_text
from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import Direction, DirectionParams, Interface, RecurrentLayer, SpecError

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MANIFEST = json.loads((PRODUCERS / "manifest.json").read_text())
MASKED = sorted(a for a in MANIFEST if "_masked_" in a and a.endswith(".onnx"))
OV_MASKED = sorted(a for a in MANIFEST if "_masked_" in a and a.endswith(".xml"))  # ov.convert_model, Keras 2
CELLS = {"GRU": Cell.GRU, "LSTM": Cell.LSTM, "SimpleRNN": Cell.RNN}


def _truth(artifact: str) -> dict[str, np.ndarray]:
    return dict(np.load(PRODUCERS / f"{artifact.rsplit('.', 1)[0]}.truth.npz"))


def _with_holes(artifact: str) -> dict[str, np.ndarray]:
    """The truth's input with a held step in the middle of every row and row 0's first step held too (a zero
    feature vector for Masking(0.0), token 0 for Embedding(mask_zero=True))."""
    name, value = next((k, v) for k, v in _truth(artifact).items() if k in ("x", "tokens"))
    held = value.copy()
    held[:, 2] = 0
    held[0, 0] = 0
    return {name: held}


def _outputs(path: Path, feed: dict, *, openvino: bool = False) -> list[np.ndarray]:
    """The model at ``path`` run as written, on onnxruntime (ONNX) or OpenVINO CPU at f32 (IR)."""
    if not openvino:
        return ort.InferenceSession(str(path)).run(None, feed)
    ov, _ = import_openvino()  # imported without its telemetry
    compiled = ov.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled(feed)
    return [result[out] for out in compiled.outputs]


@pytest.mark.parametrize("artifact", MASKED)
def test_inspect_lists_the_layer_with_its_mask(artifact):
    (layer,) = gp.load(PRODUCERS / artifact).layers
    assert layer.cell is CELLS[MANIFEST[artifact]["config"]["layer"]]
    assert layer.interface.mask and layer.interface.sequence_lens is None
    model = gp.load(PRODUCERS / artifact)
    text = describe_text(model)
    assert f"  mask          {layer.interface.mask} [5, 2] per-step hold (Keras masking)" in text
    assert "step by step (Keras masking" in text  # the lifted finding says how the mask is read
    tensors = describe_json(model)["layers"][0]["tensors"]
    assert tensors["mask"] == {"name": layer.interface.mask, "shape": [5, 2]}


@pytest.mark.parametrize("target", ["onnx", "openvino"])
@pytest.mark.parametrize("artifact", MASKED)
def test_the_whole_model_converts_and_gives_keras_outputs_with_a_prefix_mask_and_with_holes(artifact, target, tmp_path):
    """Written whole, verified, then run as written: Keras's outputs on the truth's right-padded rows (a prefix
    mask), and onnxruntime's outputs of the original model on a mask with holes (which must change them)."""
    out = tmp_path / ("out.onnx" if target == "onnx" else "out.xml")
    result = gp.convert(PRODUCERS / artifact, out)
    assert result.verification.passed and result.whole
    assert any("need not exercise the hold" in note for note in result.verification.notes)
    findings = result.findings[next(iter(result.findings))]
    assert {f.feature: f.status for f in findings}["mask"] is Status.DECOMPOSED
    truth = _truth(artifact)
    name = next(k for k in truth if k in ("x", "tokens"))
    expected = [v for k, v in truth.items() if k != name]
    ov = target == "openvino"
    for got, want in zip(_outputs(out, {name: truth[name]}, openvino=ov), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    holes = _with_holes(artifact)
    original = ort.InferenceSession(str(PRODUCERS / artifact)).run(None, holes)
    unmasked = ort.InferenceSession(str(PRODUCERS / artifact)).run(None, {name: truth[name]})
    assert not np.allclose(original[0], unmasked[0])  # the holes change the outputs
    for got, want in zip(_outputs(out, holes, openvino=ov), original, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    again = gp.convert(PRODUCERS / artifact, tmp_path / f"again{out.suffix}", inputs=holes)  # verified on the holes
    assert again.verification.passed


def test_the_openvino_ir_reads_back_as_the_same_masked_layer(tmp_path):
    (source,) = gp.load(PRODUCERS / "tf2onnx_masked_masking_lstm.onnx").layers
    gp.convert(PRODUCERS / "tf2onnx_masked_masking_lstm.onnx", tmp_path / "out.xml")
    (back,) = gp.load(tmp_path / "out.xml").layers
    assert back.interface.mask == source.interface.mask and back.provenance.kind == "held"
    for mine, theirs in zip(source.directions, back.directions, strict=True):
        for key in ("W", "R", "Wb", "Rb"):
            np.testing.assert_array_equal(getattr(mine, key), getattr(theirs, key))


@pytest.mark.parametrize("target", ["coreml", "litert", "bnns", "directml"])
def test_targets_without_a_hold_refuse_the_mask_by_name(target, tmp_path):
    suffix = {"coreml": ".mlpackage", "litert": ".tflite", "bnns": "", "directml": ""}[target]
    out = tmp_path / f"out{suffix}"
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(PRODUCERS / "tf2onnx_masked_embedding_gru.onnx", out, to=target, layers_only=True)
    line = err.value.one_line()
    assert "per-step mask" in line and f"the {target} writer has no form that holds a step" in line, line
    assert "onnx or openvino" in line
    assert not out.exists()


def test_the_layer_alone_is_refused_for_onnx_too(tmp_path):
    """Alone, the layer loses the operators that compute its mask (the model's own Equal/Not/Any)."""
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(PRODUCERS / "tf2onnx_masked_masking_lstm.onnx", tmp_path / "out.onnx", layers_only=True)
    assert "loses the operators that compute its mask" in err.value.one_line()


def test_the_hold_is_what_the_proof_checks(tmp_path):
    """The lifted layer run without its hold (every step run) disagrees with the original on a mask with holes:
    the proof, which feeds such masks, could not have passed a reading that ignored it."""
    (layer,) = gp.load(PRODUCERS / "tf2onnx_masked_masking_simple_rnn.onnx").layers
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    mask = np.ones((5, 2, 1), bool)
    mask[2, 0] = mask[0, 1] = False
    y, _ = run_layer(layer, x, mask=mask)  # layout 1: Y [N, S, 1, H]
    every, _ = run_layer(layer, x, mask=np.ones_like(mask))
    assert not np.allclose(y, every)
    np.testing.assert_array_equal(y[0, 2], y[0, 1])  # row 0's held step repeats its output
    np.testing.assert_array_equal(y[1, 0], np.zeros_like(y[1, 0]))  # row 1 starts held: zero


@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.REVERSE, Direction.BIDIRECTIONAL])
def test_the_executors_hold_equals_onnxruntime_on_each_row_with_its_held_steps_left_out(direction):
    """An independent oracle for the executor's hold: holding a step is skipping it, so each row's Y at a run step
    is onnxruntime's RNN node run on that row's run steps alone, and at a held step the last run step's (zero
    before the first); Y_h is the last one's."""
    rng = np.random.default_rng(7)
    s, n, i, h = 6, 3, 2, 4
    count = direction.count
    params = tuple(
        DirectionParams(
            rng.normal(size=(h, i)).astype(np.float32),
            rng.normal(size=(h, h)).astype(np.float32) * 0.5,
            rng.normal(size=h).astype(np.float32),
            rng.normal(size=h).astype(np.float32),
            (Activation("Tanh"),),
        )
        for _ in range(count)
    )
    layer = RecurrentLayer("rnn", Cell.RNN, i, h, direction, params, Interface("X", "Y", "Y_h", mask="M"))
    x = rng.uniform(-1, 1, (s, n, i)).astype(np.float32)
    mask = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 0], [1, 1, 0], [0, 1, 1]], bool)
    y, y_h = run_layer(layer, x, mask=mask)
    for d, p in enumerate(params):
        reverse = direction is Direction.REVERSE or d == 1
        node = helper.make_node("RNN", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=h, direction="forward")
        graph = helper.make_graph(
            [node],
            "oracle",
            [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 1, i])],
            [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
            [
                numpy_helper.from_array(p.W[None], "W"),
                numpy_helper.from_array(p.R[None], "R"),
                numpy_helper.from_array(np.concatenate([p.Wb, p.Rb])[None], "B"),
            ],
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
        session = ort.InferenceSession(proto.SerializeToString())
        for row in range(n):
            order = list(range(s))[::-1] if reverse else list(range(s))
            run = [t for t in order if mask[t, row]]
            steps = session.run(None, {"X": x[run, row][:, None]})[0][:, 0, 0] if run else np.zeros((0, h))
            last, k = np.zeros(h, np.float32), 0
            for t in order:
                if mask[t, row]:
                    last, k = steps[k], k + 1
                np.testing.assert_allclose(y[t, d, row], last, atol=1e-6, rtol=1e-5)
            np.testing.assert_allclose(y_h[d, row], last, atol=1e-6, rtol=1e-5)


def test_a_layer_has_a_mask_or_sequence_lens_not_both():
    with pytest.raises(SpecError, match="one or the other"):
        Interface("X", "Y", "Y_h", sequence_lens="L", mask="M")


def test_a_masked_layer_needs_its_mask(tmp_path):
    (layer,) = gp.load(PRODUCERS / "tf2onnx_masked_masking_simple_rnn.onnx").layers
    with pytest.raises(gp.InputError, match="per-step mask"):
        run_layer(layer, np.zeros((2, 5, 3), np.float32))


@pytest.mark.parametrize("artifact", OV_MASKED)
def test_openvinos_masked_loops_run_to_keras_and_are_refused_saying_masked(artifact, tmp_path):
    """OpenVINO's TensorFlow frontend writes a masked Keras 2 layer as a Loop slicing a boolean mask beside X: the
    IR runs to Keras's outputs on OpenVINO CPU; gatepack does not lift it yet and says so on one line, writing
    nothing."""
    truth = _truth(artifact)
    feed = {k: v for k, v in truth.items() if not k.startswith("output:")}
    expected = [v for k, v in truth.items() if k.startswith("output:")]
    for got, want in zip(_outputs(PRODUCERS / artifact, feed, openvino=True), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.convert(PRODUCERS / artifact, tmp_path / "out.onnx")
    line = err.value.one_line()
    assert "masked: it reads a per-step mask" in line and "\n" not in line, line
    assert not (tmp_path / "out.onnx").exists()

"""Keras masks given from lengths, lifted to ``sequence_lens``.

fixtures/producers ``tf2onnx_length_mask_*``: a Keras 3 GRU, SimpleRNN or LSTM called with
``mask=ops.less(ops.arange(S)[None], lengths[:, None])``, ``lengths`` a model input; tf2onnx writes the mask
as ``Less(constant [1, S], lengths)`` gathered step by step in the layer's Loop, which keeps state and
output on masked steps (with zero_output_for_mask: the state, and zeros as output). A constant rising
along time compared with a value constant along time is true on a prefix of each row: the loop is lifted
into a layer with a canonical ``sequence_lens`` input (proven on random lengths against onnxruntime
running the loop, its Y past each length read as the kept last output or as zero), and the whole model
rewritten in place (lengths counted from the mask, a kept output restored as Where(mask, Y, Y_h)) gives
Keras's outputs. A mask not shown to be a prefix is lifted as a per-step hold instead (as test_masked.py's
data-computed masks are), never as sequence_lens.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import assert_not_lifted
from onnx import numpy_helper

import gatepack.converters as gp

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MANIFEST = json.loads((PRODUCERS / "manifest.json").read_text())
LENGTH_MASKED = sorted(a for a in MANIFEST if "_length_mask_" in a)


def _truth(artifact: str) -> dict[str, np.ndarray]:
    return dict(np.load(PRODUCERS / artifact.replace(".onnx", ".truth.npz")))


@pytest.mark.parametrize("artifact", [a for a in LENGTH_MASKED if not MANIFEST[a]["config"]["bidirectional"]])
def test_the_layer_takes_sequence_lens_and_gives_kerass_outputs_within_each_length(artifact, tmp_path):
    """The layer alone (ONNX semantics: Y zero past each row's length, Y_h the state at its last step),
    written as ONNX layers and run on onnxruntime with Keras's X and lengths, gives Keras's outputs within
    each length and its final states. Keras's Y past a length is its last output (the final state), or
    zero with zero_output_for_mask; go_backwards: Keras's Y is in processing order, and past each length
    (processed first) the output it keeps is still its initial zero."""
    path = PRODUCERS / artifact
    truth = _truth(artifact)
    config = MANIFEST[artifact]["config"]
    (layer,) = gp.load(path).layers
    itf = layer.interface
    assert itf.sequence_lens and itf.layout == 1 and itf.x == "x"
    assert layer.direction.value == ("reverse" if config.get("go_backwards") else "forward")
    out = tmp_path / "layer.onnx"
    assert gp.convert(path, out, to="onnx", layers_only=True).passed
    (written,) = gp.load(out).layers
    got = gp.run(out, {written.interface.x: truth["x"], written.interface.sequence_lens: truth["lengths"]})
    y, *states = [v for k, v in truth.items() if k not in ("x", "lengths")]  # Keras: [N,S,H], [N,H] ...
    y = y[:, ::-1] if config.get("go_backwards") else y  # in time order
    y_layer = got[written.interface.y][:, :, 0]  # [N,S,1,H] -> [N,S,H]
    within = np.arange(y.shape[1])[None, :] < truth["lengths"][:, None]
    np.testing.assert_allclose(y_layer[within], y[within], atol=1e-5, rtol=1e-4)
    assert not np.any(y_layer[~within])
    roles = ["y_h", "y_c"][: len(states)]
    for role, state in zip(roles, states):
        np.testing.assert_allclose(got[getattr(written.interface, role)][:, 0], state, atol=1e-5, rtol=1e-4)
    kept = np.broadcast_to(states[0][:, None], y.shape)
    if config.get("zero_output_for_mask") or config.get("go_backwards"):
        kept = np.zeros_like(y)
    np.testing.assert_array_equal(y[~within], kept[~within])


@pytest.mark.parametrize("artifact", LENGTH_MASKED)
def test_the_whole_model_rewritten_in_place_runs_as_the_original_on_any_lengths(artifact, tmp_path):
    """Lengths of 0, 1, partial and full: the rewritten model (one GRU/RNN/LSTM node, sequence_lens
    counted from the model's own mask) gives what onnxruntime gives on the original loop."""
    path, out = PRODUCERS / artifact, tmp_path / "whole.onnx"
    gp.convert(path, out, to="onnx")
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "Loop" not in ops and ops & {"GRU", "RNN", "LSTM"}
    original, rewritten = ort.InferenceSession(str(path)), ort.InferenceSession(str(out))
    rng = np.random.default_rng(3)
    for lengths in ([0, 5], [1, 2], [5, 5], [4, 0], [9, -1]):  # empty, partial, full, beyond S
        feed = {"x": rng.standard_normal((2, 5, 3)).astype(np.float32), "lengths": np.array(lengths, np.int32)}
        for want, got in zip(original.run(None, feed), rewritten.run(None, feed)):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5, err_msg=str(lengths))


@pytest.mark.parametrize("artifact", LENGTH_MASKED)
def test_the_whole_model_as_openvino_gives_kerass_outputs(artifact, tmp_path):
    """ONNX -> OpenVINO keeps the whole model (the lifted layers as sequence ops reading the lengths counted
    from the mask): OpenVINO CPU on Keras's inputs gives Keras's outputs. (gatepack's whole-model
    verification draws the integer lengths as zeros, every step masked; this feeds real ones.)"""
    path, out = PRODUCERS / artifact, tmp_path / "whole.xml"
    gp.convert(path, out, to="openvino")
    truth = _truth(artifact)
    got = gp.run(out, {"x": truth["x"], "lengths": truth["lengths"]})
    expected = [v for k, v in truth.items() if k not in ("x", "lengths")]
    assert len(got) == len(expected)
    for value, want in zip(got.values(), expected):
        np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("artifact", LENGTH_MASKED)
def test_the_whole_model_as_litert_gives_kerass_outputs(artifact, tmp_path):
    """ONNX -> LiteRT keeps the whole model too: the lengths counted from the mask (gatepack's own nodes around the
    lifted layer) are summed as floats of 0 and 1, exact to 2^24 steps, and cast to int32, which LiteRT holds (an
    int32 ReduceSum it does not: refused before, naming that node). LiteRT on Keras's inputs gives Keras's
    outputs (a symbolic batch fixed to the truth's)."""
    path, out = PRODUCERS / artifact, tmp_path / "whole.tflite"
    truth = _truth(artifact)
    shapes = {"x": truth["x"].shape, "lengths": truth["lengths"].shape}
    if MANIFEST[artifact]["config"]["bidirectional"]:  # Keras reverses X for the backward layer: ReverseSequence
        with pytest.raises(gp.RefusedError, match="ReverseSequence \\(first: 'functional") as refused:
            gp.convert(path, out, to="litert", input_shapes=shapes)
        assert "ReduceSum" not in str(refused.value) and not out.exists()
        # the ways out from the registry: every other format whose record keeps whole ONNX models
        assert "convert to onnx or openvino or coreml, which" in (refused.value.hint or "")
        return
    result = gp.convert(path, out, to="litert", input_shapes=shapes)
    assert result.passed and result.verification.passed and result.whole, result.to_text()
    got = gp.run(out, {"x": truth["x"], "lengths": truth["lengths"]})
    expected = [v for k, v in truth.items() if k not in ("x", "lengths")]
    assert len(got) == len(expected)
    for value, want in zip(got.values(), expected):
        np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("artifact", ["tf2onnx_length_mask_gru.onnx", "tf2onnx_length_mask_gru_go_backwards.onnx"])
@pytest.mark.parametrize("how", ["shuffled", "swapped"])
def test_a_mask_not_shown_to_be_a_prefix_is_a_hold_not_sequence_lens(how, artifact, tmp_path):
    """A length-mask GRU (forward, or go_backwards: a reverse layer holding in its own processing order) with its
    mask no longer shown to be a prefix: ``shuffled``: the constant [1, S] compared with the lengths out of order
    (a hole in the middle); ``swapped``: lengths < constant (true on a suffix). Lifted with the loop's mask as its
    per-step hold, and the whole model rewritten gives onnxruntime's outputs of the edited model on real lengths."""
    proto = onnx.load(str(PRODUCERS / artifact))
    graph = proto.graph
    constants = {t.name: t for t in graph.initializer}
    less = next(
        n for n in graph.node if n.op_type == "Less" and n.input[0] in constants and n.input[1] not in constants
    )
    if how == "shuffled":
        rising = numpy_helper.to_array(constants[less.input[0]])
        constants[less.input[0]].CopyFrom(numpy_helper.from_array(rising[..., [0, 2, 1, 3, 4]], less.input[0]))
    else:
        less.input[:] = list(reversed(less.input))
    source, out = tmp_path / "edited.onnx", tmp_path / "out.onnx"
    onnx.save(proto, str(source))
    (layer,) = gp.load(source).layers
    assert layer.interface.mask and layer.interface.sequence_lens is None
    assert layer.direction.value == ("reverse" if "backwards" in artifact else "forward")
    gp.convert(source, out)
    truth = _truth(artifact)
    for lengths in ([2, 5], [1, 3], [0, 4]):
        feed = {"x": truth["x"], "lengths": np.asarray(lengths, truth["lengths"].dtype)}
        want = ort.InferenceSession(str(source)).run(None, feed)
        for got, expected in zip(ort.InferenceSession(str(out)).run(None, feed), want, strict=True):
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-4)


def test_a_loop_keeping_something_else_past_the_lengths_is_refused(tmp_path):
    """tf2onnx_length_mask_gru.onnx whose loop halves the output it keeps at each masked step: past each
    length its Y is neither its last output nor zero, so no reading agrees with onnxruntime on the loop
    (the proof compares the steps past the lengths too); refused on one line, nothing written."""
    proto = onnx.load(str(PRODUCERS / "tf2onnx_length_mask_gru.onnx"))
    loop = next(n for n in proto.graph.node if n.op_type == "Loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    kept = body.input[3].name  # the carried output (after the step counter): Keras's last output
    keeper = next(n for n in body.node if n.op_type == "Mul" and kept in n.input)
    halved, keeper.output[0] = keeper.output[0], f"{keeper.output[0]}:whole"
    body.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
    body.node.insert(
        list(body.node).index(keeper) + 1, onnx.helper.make_node("Mul", [keeper.output[0], "half"], [halved])
    )
    assert_not_lifted(proto, tmp_path, "masked by", "reproduces it on random inputs")


def test_a_loop_masked_by_lengths_with_an_initial_state_is_refused(tmp_path):
    """A row of length 0 keeps the loop's initial state, where onnxruntime's layers give a zero Y_h: with an
    initial state (here tf2onnx_length_mask_gru.onnx's loop given one as a model input) it is not lifted."""
    proto = onnx.load(str(PRODUCERS / "tf2onnx_length_mask_gru.onnx"))
    loop = next(n for n in proto.graph.node if n.op_type == "Loop")
    loop.input[4] = "h0"  # the GRU's state (after the step counter and the kept output)
    proto.graph.input.append(onnx.helper.make_tensor_value_info("h0", onnx.TensorProto.FLOAT, [2, 4]))
    source = tmp_path / "h0.onnx"
    onnx.save(proto, str(source))
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.load(source)
    line = err.value.one_line()
    assert "masked by lengths, with an initial state" in line and "\n" not in line

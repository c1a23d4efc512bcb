"""ov.convert_model's IRs of a recurrent layer behind another layer (fixtures/producers: a torch Linear or
Conv1d in front of nn.GRU/RNN/LSTM, converted from the module and from its ONNX export): the sequence op's
``sequence_lengths`` (ShapeOf -> Convert -> Gather -> Broadcast) and zero initial states are computed from
the shapes of tensors the model computes, and the model's input is [?, ?, ?] although the Linear fixes its
last dimension. Those are the full length and zeros: the layer has neither input, so BNNS and Core ML
write it natively.

The oracles: the framework's own outputs (the fixtures' truth), the layer's input computed from the
model's input by OpenVINO CPU (f32); and IRs edited here with OpenVINO's Python API whose lengths are
not the full length or whose state is not zeros, which must stay inputs. The Keras loops behind a Dense
or Conv1D are covered by tests/test_producers.py (ov_keras_dense_*, ov_keras_conv1d_*).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

import gatepack.converters as gp
from gatepack.schemas.layer import state_roles

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
FRONTED = [
    f"ov_{route}_{name}.xml" for route in ("torch", "onnx") for name in ("linear_gru", "linear_rnn", "conv1d_lstm")
]
NOT_NATIVE = ("decomposed", "unsupported", "lossy")
SUFFIX = {"coreml": ".mlpackage", "bnns": ".bnns"}
# What is tested here is that the op needs no lengths nor state inputs, so Core ML's op is forced: its automatic
# choice avoids the gru op where the batch is not fixed at 1 (Core ML's GRU tests run batch 1 only, rdar 59644603)
FORCED: dict[str, dict] = {"coreml": {"strategy": "native"}, "bnns": {}}


def _sequence_op(ov_model, name: str):
    return next(op for op in ov_model.get_ordered_ops() if op.get_friendly_name() == name)


@pytest.mark.parametrize("artifact", FRONTED)
def test_full_lengths_and_zero_states_from_computed_shapes_are_no_inputs(artifact):
    model = gp.load(PRODUCERS / artifact)
    (layer,) = model.layers
    itf = layer.interface
    assert itf.sequence_lens is None and itf.initial_h is None and itf.initial_c is None
    notes = model.notes_for(layer)
    (lens,) = [f for f in notes if f.feature == "sequence_lens"]
    assert lens.status.value == "exact" and "no sequence_lens input" in lens.detail and not lens.warning
    assert not [f for f in notes if f.feature in ("initial_h", "initial_c")]  # no "constant, not zeros"
    # the op forced for Core ML: auto avoids its gru for a batch not fixed at 1 (a known doubt, see FORCED)
    report = gp.report(PRODUCERS / artifact, to=["bnns", "coreml"], layers_only=True, **FORCED["coreml"])
    for target in ("bnns", "coreml"):
        findings = report.layers[0].targets[target].findings
        assert not [f for f in findings if f.feature != "model" and f.status.value in NOT_NATIVE], (target, findings)


@pytest.mark.parametrize("artifact", ["ov_torch_linear_gru.xml", "ov_onnx_linear_rnn.xml", "ov_torch_conv1d_lstm.xml"])
def test_bnns_and_coreml_convert_the_layer_natively_to_the_frameworks_outputs(artifact, tmp_path):
    """The layer alone, written as BNNS and Core ML (verified against OpenVINO), run by gatepack's
    executor of each format on the layer's input (OpenVINO CPU computes it from the model's input)
    gives torch's outputs: Y [S,N,H] and the final states [1,N,H]."""
    path = PRODUCERS / artifact
    truth = dict(np.load(PRODUCERS / f"{path.stem}.truth.npz"))
    (input_name,) = gp.input_names(path)
    expected = [v for k, v in truth.items() if k != input_name]
    (layer,) = gp.load(path).layers
    source = ov.Core().read_model(str(path))
    front = ov.Model([_sequence_op(source, layer.name).input_value(0)], source.get_parameters())
    compiled = ov.Core().compile_model(front, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = np.asarray(compiled({0: truth[input_name]})[0])  # [N,S,I]: the sequence op's batch-major X
    n, s, _ = x.shape
    for target in ("bnns", "coreml"):
        out = tmp_path / f"layer{SUFFIX[target]}"
        result = gp.convert(path, out, to=target, layers_only=True, **FORCED[target])
        assert result.passed and result.verification.passed, result.to_text()
        assert not [f for fs in result.findings.values() for f in fs if f.status.value == "decomposed"]
        (back,) = gp.load(out).layers
        assert back.interface.sequence_lens is None and back.interface.initial_h is None
        got = gp.run(out, {back.interface.x: x}, engine="numpy")
        y = got[back.interface.y].reshape(n, s, -1).transpose(1, 0, 2)
        states = [
            got[getattr(back.interface, role)].reshape(n, 1, -1).transpose(1, 0, 2)
            for _, role in state_roles(back.cell)
        ]
        for value, want in zip([y, *states], expected, strict=True):
            np.testing.assert_allclose(value, want, atol=1e-5, rtol=1e-4, err_msg=f"{artifact} -> {target}")


def _edited(tmp_path, artifact: str, index: int, change) -> Path:
    """The fixture with the sequence op's input ``index`` replaced by ``change(value)``, saved as an IR."""
    model = ov.Core().read_model(str(PRODUCERS / artifact))
    op = next(o for o in model.get_ordered_ops() if o.get_type_name().endswith("Sequence"))
    op.input(index).replace_source_output(change(op.input_value(index)).output(0))
    out = tmp_path / "edited.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)
    return out


def test_lengths_computed_from_shapes_but_not_the_full_length_are_refused(tmp_path):
    """sequence_lengths - 1 (still computed from the Linear's output shape only) is no full length: the
    reading says so on one line, naming the layer."""
    path = _edited(tmp_path, "ov_torch_linear_gru.xml", 2, lambda v: ops.subtract(v, ops.constant(np.int32(1))))
    with pytest.raises(
        gp.InputError, match="sequence_lengths is computed from constants and shapes but is not the full"
    ):
        gp.load(path)


def test_a_state_computed_from_shapes_that_is_not_zeros_is_held_by_the_layer(tmp_path):
    """The zero initial state + 0.5 is computed from shapes alone and is one state for every batch entry (as
    a learned state broadcast to the batch): the layer holds it as a constant of batch 1, takes no initial_h
    input, and its ONNX conversion gives OpenVINO's outputs on the edited IR at two batch sizes."""
    path = _edited(tmp_path, "ov_onnx_conv1d_lstm.xml", 1, lambda v: ops.add(v, ops.constant(np.float32(0.5))))
    model = gp.load(path)
    (layer,) = model.layers
    assert layer.fed_roles() == () and layer.interface.initial_c is None
    np.testing.assert_array_equal(layer.constants["initial_h"], np.full((1, 1, layer.hidden_size), 0.5, np.float32))
    out = tmp_path / "held.onnx"
    assert gp.convert(path, out, layers_only=True).passed
    source = ov.Core().read_model(str(path))
    op = next(o for o in source.get_ordered_ops() if o.get_type_name() == "LSTMSequence")
    probe = ov.Model([op.input_value(0), op.output(0), op.output(1)], source.get_parameters())  # the layer's X, Y, Y_h
    compiled = ov.Core().compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    (written,) = gp.load(out).layers  # the layers alone take readable names for the IR's internal tensors
    itf = written.interface
    for batch in (1, 3):
        feed = {"x": np.random.default_rng(batch).uniform(-1, 1, (batch, 6, 3)).astype(np.float32)}  # x [N, S, 3]
        x, y, y_h = (np.asarray(v) for v in compiled(feed).values())
        got = gp.run(out, {itf.x: x})  # the layers-only ONNX on onnxruntime, fed the layer's own X
        np.testing.assert_allclose(got[itf.y], y.transpose(0, 2, 1, 3), atol=1e-5, err_msg=f"Y, N={batch}")
        np.testing.assert_allclose(got[itf.y_h], y_h, atol=1e-5, err_msg=f"Y_h, N={batch}")


REAL = Path(__file__).resolve().parent.parent / "fixtures" / "realmodels"


@pytest.mark.parametrize("name", ["dfn3_enc", "dpcrn_online_simple_lstm"])
def test_real_models_through_openvinos_onnx_frontend_convert_natively_to_bnns(name, tmp_path):
    """DeepFilterNet3's encoder (a GRU behind convolutions) and DPCRN (four LSTMs behind convolutions,
    two with their states as model inputs) converted by ov.convert_model: every layer's lengths and zero
    states are computed from the shapes of convolution outputs. No layer keeps a sequence_lens input,
    exactly the layers whose state is a model input keep one, and BNNS writes them all natively
    (verified against OpenVINO CPU)."""
    ir = tmp_path / f"{name}.xml"
    ov.save_model(ov.convert_model(str(REAL / f"{name}.onnx")), str(ir), compress_to_fp16=False)
    source = ov.Core().read_model(str(ir))
    model = gp.load(ir)
    for layer in model.layers:
        assert layer.interface.sequence_lens is None, layer.name
        state = _sequence_op(source, layer.name).input_value(1)
        assert (layer.interface.initial_h is not None) == _reads_a_model_input(state), layer.name
    result = gp.convert(ir, tmp_path / "out.bnns", to="bnns", layers_only=True)
    assert result.passed and result.verification.passed, result.to_text()
    assert not [
        f for fs in result.findings.values() for f in fs if f.feature != "model" and f.status.value in NOT_NATIVE
    ]


def _reads_a_model_input(value) -> bool:
    """Whether ``value`` reads a model input's values (not only its shape)."""
    stack = [value.get_node()]
    while stack:
        node = stack.pop()
        if node.get_type_name() == "Parameter":
            return True
        if node.get_type_name() != "ShapeOf":
            stack.extend(v.get_node() for v in node.input_values())
    return False


def _state_sized_by_nonzero(fill: float):
    """A state [N,1,H] of ``fill`` whose batch is the length of NonZero over X's batch: a shape no shape
    inference knows before running (NonZero's output size depends on X's values)."""

    def change(state):
        op = next(t.get_node() for t in state.get_target_inputs())
        x = op.input_value(0)  # [N,S,I]
        everywhere = ops.non_zero(ops.greater_equal(ops.reduce_max(x, [1, 2]), ops.constant(np.float32(-1e30))))
        batch = ops.gather(ops.shape_of(everywhere), ops.constant(np.array([1])), ops.constant(np.int64(0)))
        shape = ops.concat([batch, ops.constant(np.array([1, 4]))], 0)
        return ops.broadcast(ops.constant(np.float32(fill)), shape)

    return change


def test_a_zero_state_broadcast_to_a_shape_nothing_can_size_is_zeros(tmp_path):
    """Zeros broadcast to any shape are zeros: the layer has no initial state, and the IR still runs on
    OpenVINO CPU to torch's outputs. The same broadcast of 0.5 stays an input, said to be computed by
    operators gatepack does not evaluate (not claimed to be a non-zero constant)."""
    path = _edited(tmp_path, "ov_torch_linear_gru.xml", 1, _state_sized_by_nonzero(0.0))
    model = gp.load(path)
    (layer,) = model.layers
    assert layer.interface.initial_h is None and layer.interface.sequence_lens is None
    truth = dict(np.load(PRODUCERS / "ov_torch_linear_gru.truth.npz"))
    (input_name,) = gp.input_names(path)
    for got, want in zip(gp.run(path, {input_name: truth[input_name]}).values(), list(truth.values())[1:], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)

    path = _edited(tmp_path, "ov_torch_linear_gru.xml", 1, _state_sized_by_nonzero(0.5))
    model = gp.load(path)
    assert model.layers[0].interface.initial_h is not None
    (note,) = [f for f in model.notes_for(model.layers[0]) if f.feature == "initial_h"]
    assert "operators gatepack does not evaluate" in note.detail

"""Artifacts written by the tools people use (fixtures/producers: torch.onnx legacy and dynamo,
tf2onnx from Keras 3, ov.convert_model from a PyTorch module and from ONNX saved fp32 and fp16,
coremltools' PyTorch frontend for iOS15/17/18 in fp32 and fp16), with the producing framework's own
outputs as the truth.

Every artifact runs on its own runtime (onnxruntime, OpenVINO CPU in f32) or gatepack's interpreter of
its format (Core ML) to the framework's outputs, and converts to every target with verification on
(each target's artifact against the source's own runtime). Recurrences written as a loop or unrolled
(tf2onnx's Keras layers, dynamo's nn.RNN, coremltools' nn.GRU, ov.convert_model's Keras layers) are lifted
into layers: the converted
layers give the framework's outputs (read through the framework's own output conventions, written
out here), and ONNX models keep their other operators with each loop replaced in place.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import artifact_name, assert_not_lifted, fixes_sizes

import gatepack.converters as gp
from gatepack.converters import engine_for, registry
from gatepack.schemas.layer import state_roles

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MANIFEST = json.loads((PRODUCERS / "manifest.json").read_text())
TARGETS = registry.writers()


# Keras LSTM through tf2onnx: an LSTM node (a Loop with hard-sigmoid gates in Keras 3); every Keras layer through
# ov.convert_model: a Loop. tf2onnx writes a Keras 2 GRU with reset_after (its default) as a GRU node.
LIFTED = (
    "tf2onnx_gru",
    "tf2onnx_simple_rnn",
    "tf2onnx_classifier",
    "tf2onnx_lstm_hard_sigmoid",
    "tf2onnx_length_mask",
    "tf2onnx_keras2_classifier_gru_reset_before",
    "tf2onnx_keras2_classifier_gru_nobias",
    "tf2onnx_keras2_classifier_simple_rnn",
    "torch_dynamo_rnn",
    "coreml_gru",
    "ov_keras",
)
# Keras masking (Embedding(mask_zero=True), Masking): tf2onnx's Loop selects per step on a mask computed from
# the data, lifted into a layer with a per-step hold that only onnx and openvino hold (whole): test_masked.py.
MASKED = sorted(a for a in MANIFEST if "_masked_" in a)
# BNNSGraph's lstm takes parameterless activations only: a hard-sigmoid LSTM is refused for bnns.
HARD_SIGMOID = {a for a in MANIFEST if "hard_sigmoid" in a}
# Keras masks given from lengths are lifted to sequence_lens, which BNNSGraph's recurrent ops do not take.
LENGTH_MASKED = {a for a in MANIFEST if "_length_mask_" in a}
# A module holding its initial state (an nn.Parameter): coremltools folds it into the constant start of the
# loop's state buffer (row 0, the rest zeros); the lifted layer holds it as its constant initial_h.
LEARNED_STATE = sorted(a for a in MANIFEST if MANIFEST[a]["config"].get("initial_state") == "learned")


ARTIFACTS = sorted(a for a in MANIFEST if a not in MASKED)  # all run on their runtime to the framework's outputs
LIFTED_ARTIFACTS = [a for a in ARTIFACTS if a.startswith(LIFTED)]


def _truth(artifact: str) -> dict[str, np.ndarray]:
    stem = artifact.rsplit(".", 1)[0]
    return dict(np.load(PRODUCERS / f"{stem}.truth.npz"))


def _tolerance(artifact: str) -> dict:
    fp16 = MANIFEST[artifact]["precision"] == "float16"
    return {"atol": 2e-2, "rtol": 2e-2} if fp16 else {"atol": 1e-4, "rtol": 1e-3}


def test_the_manifest_lists_every_artifact_with_its_truth():
    on_disk = {p.name for p in PRODUCERS.iterdir() if p.suffix in (".onnx", ".xml", ".mlpackage")}
    assert on_disk == set(MANIFEST)
    for artifact, entry in MANIFEST.items():
        assert entry["versions"] and entry["producer"] and entry["config"], artifact
        assert _truth(artifact), artifact
    families = {a.split("_")[0] + ("_" + a.split("_")[1] if a.startswith("torch") else "") for a in MANIFEST}
    assert families == {"torch_legacy", "torch_dynamo", "tf2onnx", "ov", "coreml"}


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_runs_to_the_frameworks_outputs(artifact):
    """The artifact as a whole, on its runtime or gatepack's interpreter of its format, gives what the
    framework that made it gives (outputs in order: the sequence, then the final state(s))."""
    path = PRODUCERS / artifact
    truth = _truth(artifact)
    names = gp.input_names(path)
    assert set(names) <= set(truth), (names, list(truth))
    outputs = gp.run(path, {n: truth[n] for n in names}, engine="numpy" if path.suffix == ".mlpackage" else "native")
    expected = [v for k, v in truth.items() if k not in names]
    assert len(outputs) == len(expected)
    for got, want in zip(outputs.values(), expected):
        np.testing.assert_allclose(got.astype(np.float32), want, **_tolerance(artifact))


@pytest.mark.matrix
@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_converts_to_every_target_with_verification(artifact, tmp_path):
    path = PRODUCERS / artifact
    model = gp.load(path)
    entry = MANIFEST[artifact]
    # coremltools keeps an iOS15 rnn op in fp32 (fp16 casts only around it): its weights are fp32.
    source_fp16 = entry["precision"] == "float16" and entry["config"].get("target") != "iOS15"
    for layer in model.layers:
        notes = model.notes_for(layer)
        assert all(f.status.value != "lossy" for f in notes), notes  # an fp16 source is a note, not lossy
        assert any("fp16" in (f.warning or "") for f in notes) == source_fp16
        if artifact.startswith("ov_"):  # ov.convert_model's implicit full lengths and zero state
            assert layer.interface.sequence_lens is None
            assert (layer.interface.initial_h is None) == ("h0" not in _truth(artifact))
    for target in TARGETS:
        out = tmp_path / artifact_name(target, target)
        if target == "bnns" and artifact in HARD_SIGMOID | LENGTH_MASKED:
            with pytest.raises(gp.RefusedError, match="HardSigmoid|no sequence lengths"):
                gp.convert(path, out, to=target, layers_only=True)
            assert not out.exists()
            continue
        result = _convert(path, out, target, model)
        assert result.passed and result.verification.passed, result.to_text()
        back = gp.load(out)
        assert len(back.layers) == len(model.layers)
        # Chained layers (a 2-layer stack) written alone are side by side with distinct input names (a whole model
        # keeps a layer reading another's output: a Keras stack's second layer starting from the first's states).
        inputs = {n for layer in back.layers for n in (layer.interface.x, layer.interface.initial_h) if n}
        outputs = {n for layer in back.layers for n in (layer.interface.y, layer.interface.y_h) if n}
        assert result.whole or not inputs & outputs


def _convert(path, out, target: str, model, **options) -> gp.Result:
    """Convert as a user must: a model with operators around its layers (every producer's is: Squeeze,
    Transpose, shape arithmetic) goes whole to the targets whose report says they keep it (ONNX, OpenVINO and
    Core ML from ONNX); any other target refuses it and takes it with ``layers_only``."""
    from gatepack.converters.reporting import whole_model_targets

    if model.other_ops and target not in whole_model_targets(model):
        # a target that keeps whole models when it can says why it cannot (LiteRT: a node, a symbolic dimension)
        with pytest.raises(
            gp.RefusedError, match="recurrent layers (only|alone)|symbolic dimension|cannot hold"
        ) as refused:
            gp.convert(path, out, to=target, **options)
        assert "--layers-only" in str(refused.value) + (refused.value.hint or "")
        assert not out.exists()
        return gp.convert(path, out, to=target, layers_only=True, **options)
    return gp.convert(path, out, to=target, **options)


def _framework_outputs(artifact: str, y: np.ndarray, *states: np.ndarray) -> list[np.ndarray]:
    """A single lifted layer's canonical Y and final states (layout 0: [S,1,N,H], [1,N,H]) as its
    framework returns them (an independent transcription of each framework's conventions)."""
    if artifact.startswith(("tf2onnx_", "ov_keras_")):  # Keras: [N,S,H] and [N,H]; go_backwards: in processing order
        # ov.convert_model reverses X in front of a forward loop: the lifted layer's Y is in processing order
        reversed_layer = "go_backwards" in artifact and artifact.startswith("tf2onnx_")
        seq = y[::-1, 0] if reversed_layer else y[:, 0]
        return [seq.transpose(1, 0, 2), *(state[0] for state in states)]
    return [y[:, 0], *states]  # torch (batch_first False): [S,N,H] and [1,N,H]


def _layer_input(artifact: str, layer, truth: dict) -> np.ndarray:
    """What the framework's input is at the lifted layer: the loop of ov.convert_model's Keras layer reads
    the model's X, reversed in time for go_backwards (Keras's convention), or the output of the layer in
    front of it (OpenVINO CPU computes that from the model's X)."""
    if layer.interface.x in truth:
        return truth[layer.interface.x]
    assert artifact.startswith("ov_keras_"), artifact
    if "front" in MANIFEST[artifact]["config"]:
        (model_input,) = gp.input_names(PRODUCERS / artifact)
        return _front_output(artifact, layer, truth[model_input])
    x = truth["x"]  # [N,S,I]
    return np.ascontiguousarray(x[:, ::-1] if "go_backwards" in artifact else x)


def _front_output(artifact: str, layer, x: np.ndarray) -> np.ndarray:
    """The sequence a Keras loop behind another layer reads (time-major [S,N,I]), computed from the
    model's X by OpenVINO CPU (f32), in the lifted layer's layout (the loop input is the one gatepack's
    lifting names; a wrong one could not give the framework's outputs)."""
    import openvino as ov

    model = ov.Core().read_model(str(PRODUCERS / artifact))
    loop = next(op for op in model.get_ordered_ops() if op.get_friendly_name() == layer.provenance.handle.loop)
    front = ov.Model([loop.input_value(layer.provenance.handle.x_input)], model.get_parameters())
    compiled = ov.Core().compile_model(front, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    sequence = np.asarray(compiled({0: x})[0])
    return sequence.transpose(1, 0, 2) if layer.interface.layout == 1 else sequence


# (a classifier's outputs are its Dense head's, not the layer's; a layer given h0: test_coreml_gru_loops_...;
# a layer masked by lengths: test_lifted_lengths.py)
SINGLE_LIFTED = [
    a
    for a in LIFTED_ARTIFACTS
    if not any(k in a for k in ("bidirectional", "rnn2", "gru2", "classifier", "h0", "length_mask"))
]


@pytest.mark.parametrize("artifact", SINGLE_LIFTED)
def test_lifted_layers_converted_give_the_frameworks_outputs(artifact, tmp_path):
    path = PRODUCERS / artifact
    truth = _truth(artifact)
    (layer,) = gp.load(path).layers
    x = _layer_input(artifact, layer, truth)
    expected = [v for k, v in truth.items() if k not in (layer.interface.x, "x", *gp.input_names(path))]
    for target in TARGETS:
        out = tmp_path / artifact_name(target, target)
        if target == "bnns" and artifact in HARD_SIGMOID:  # refused: test_converts_to_every_target_with_verification
            continue
        # DirectML's tensors and LiteRT's state variables are static: a layer of unknown sizes is written at the
        # sizes it is fed here
        fixed = fixes_sizes(target) and None in (layer.interface.seq_length, layer.interface.batch_size)
        s, n = x.shape[1::-1] if layer.interface.layout == 1 else x.shape[:2]
        sizes = {"seq_length": s, "batch_size": n} if fixed else {}
        _convert(path, out, target, gp.load(path), **sizes)
        back = gp.load(out)
        if back.meta.get("other_ops"):  # ONNX and OpenVINO keep the whole model: its own outputs
            got = list(gp.run(out, {layer.interface.x: x}).values())
        else:
            (lay,) = back.layers
            x_seq = x.transpose(1, 0, 2) if layer.interface.layout == 1 else x  # [S,N,I]
            s, n, h = x_seq.shape[0], x_seq.shape[1], lay.hidden_size
            batch_major = lay.interface.layout == 1  # every target takes the source's layout (DirectML too)
            feed = x_seq.transpose(1, 0, 2) if batch_major else x_seq
            outputs = gp.run(out, {lay.interface.x: feed}, engine=engine_for(target))
            y = outputs[lay.interface.y]
            states = [outputs[getattr(lay.interface, role)] for _, role in state_roles(lay.cell)]
            if batch_major:
                y = y.reshape(n, s, 1, h).transpose(1, 2, 0, 3)
                states = [state.reshape(n, 1, h).transpose(1, 0, 2) for state in states]
            got = _framework_outputs(artifact, y.reshape(s, 1, n, h), *(st.reshape(1, n, h) for st in states))
            assert len(got) == len(expected)
        for g, want in zip(got, expected):
            np.testing.assert_allclose(
                g.astype(np.float32), want, err_msg=f"{artifact} -> {target}", **_tolerance(artifact)
            )


@pytest.mark.parametrize("artifact", [a for a in LIFTED_ARTIFACTS if a.endswith(".onnx")])
def test_onnx_loops_and_unrolled_steps_are_replaced_in_place(artifact, tmp_path):
    """ONNX -> ONNX keeps the whole model, each loop or unrolled chain replaced by one GRU/RNN node:
    onnxruntime on the result gives the framework's outputs, with fewer nodes and no Loop."""
    import onnx
    import onnxruntime as ort

    path, out = PRODUCERS / artifact, tmp_path / "out.onnx"
    result = gp.convert(path, out, to="onnx")
    assert any(f.feature == "model" and "in place" in f.detail for fs in result.findings.values() for f in fs)
    before, after = onnx.load(str(path)).graph, onnx.load(str(out)).graph
    ops = {n.op_type for n in after.node}
    everything = lambda g: [n for n in g.node] + [m for n in g.node for a in n.attribute if a.g for m in a.g.node]  # noqa: E731
    assert "Loop" not in ops and ops & {"GRU", "RNN", "LSTM"} and len(everything(after)) < len(everything(before))
    assert [o.name for o in after.output] == [o.name for o in before.output]
    truth = _truth(artifact)
    session = ort.InferenceSession(str(out))
    feed = {i.name: truth[i.name] for i in session.get_inputs()}
    expected = [v for k, v in truth.items() if k not in feed]
    for got, want in zip(session.run(None, feed), expected):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


def test_inspect_and_report_say_what_was_lifted():
    report = gp.report(PRODUCERS / "tf2onnx_gru_reset_before.onnx", to=["directml"])
    findings = report.layers[0].targets["directml"].findings
    lifted = next(f for f in findings if f.feature == "lifted")
    assert lifted.status.value == "repacked"
    assert "ONNX Loop of 5 steps" in lifted.detail and "reset before the matmul" in lifted.detail
    assert "gate order z, r, h" in lifted.detail


def test_a_loop_that_is_no_gru_or_rnn_is_refused_with_what_was_tried(tmp_path):
    """A SimpleRNN loop whose step also adds the previous state (h = tanh(...) + h) is no GRU/RNN:
    every reading is tried and disproven; the refusal says so on one line and nothing is written."""
    import onnx
    from onnx import helper

    proto = onnx.load(str(PRODUCERS / "tf2onnx_simple_rnn.onnx"))
    body = next(a.g for n in proto.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body")
    tanh = next(n for n in body.node if n.op_type == "Tanh")
    state = body.input[3].name
    final = tanh.output[0]
    tanh.output[0] = "tanh_alone"
    at = list(body.node).index(tanh) + 1
    body.node.insert(at, helper.make_node("Add", ["tanh_alone", state], [final]))
    assert_not_lifted(proto, tmp_path, "Loop", "reproduces it on random inputs")


def test_nameless_ir_outputs_get_stable_names_said_by_inspect():
    path = PRODUCERS / "ov_torch_gru.xml"
    model = gp.load(path)
    named = model.meta["notes"]
    assert len(named) == 2 and all("has no tensor name" in n for n in named)
    outputs = gp.run(path, {"x": _truth("ov_torch_gru.xml")["x"]})
    assert list(outputs) == [n.split("calls it ")[1].strip("'") for n in named]
    assert list(gp.run(path, {"x": _truth("ov_torch_gru.xml")["x"]})) == list(outputs)  # stable


@pytest.mark.parametrize("artifact", [a for a in LIFTED_ARTIFACTS if "classifier" in a])
def test_a_dynamic_batch_loop_takes_its_hidden_size_from_the_weights(artifact):
    """A Keras functional model with a dynamic batch whose layer's last state feeds a Dense head: no shape
    tells the loop's state size (tf2onnx declares it [?, ?]); the weights do. Its zero initial state is
    expanded to the batch read from X's shape: no initial state."""
    (layer,) = gp.load(PRODUCERS / artifact).layers
    assert layer.hidden_size == 4 and layer.input_size == 3
    assert layer.interface.initial_h is None and layer.interface.batch_size is None
    assert layer.has_bias == ("nobias" not in artifact)


@pytest.mark.parametrize(
    "artifact, alpha", [("tf2onnx_lstm_hard_sigmoid.onnx", 1 / 6), ("tf2onnx_keras2_lstm_hard_sigmoid.onnx", 0.2)]
)
def test_hard_sigmoid_gates_are_read_with_their_producers_parameters(artifact, alpha):
    """Keras 3's hard_sigmoid is relu6(x + 3) / 6 (tf2onnx: Clip/Mul/Add in a Loop), HardSigmoid(1/6, 0.5);
    Keras 2's is min(max(0.2 x + 0.5, 0), 1) (tf2onnx: an LSTM node with HardSigmoid(0.2, 0.5))."""
    (layer,) = gp.load(PRODUCERS / artifact).layers
    gate, cell, hidden = layer.directions[0].activations
    assert gate.name == "HardSigmoid" and gate.alpha == pytest.approx(alpha) and gate.beta == pytest.approx(0.5)
    assert (cell.name, hidden.name) == ("Tanh", "Tanh")


@pytest.mark.parametrize("artifact", [a for a in LIFTED_ARTIFACTS if a.startswith("coreml_gru")])
def test_coreml_gru_loops_converted_to_onnx_give_torchs_outputs(artifact, tmp_path):
    """coremltools writes each layer and direction of an nn.GRU as a while_loop, layer l's loops reading
    layer l-1's Ys joined on features and, when the module is given h0, starting from h0[l*D + d]. Every
    loop is lifted (with its initial state iff h0 was given; held as a constant, and not an input, when the
    module holds h0 as an nn.Parameter); converted to ONNX (layers only) and run by onnxruntime chained the same
    way from torch's x and h0 (none fed for a learned h0), the layers give torch's y and h."""
    import onnxruntime as ort

    path, out = PRODUCERS / artifact, tmp_path / "layers.onnx"
    truth, config = _truth(artifact), MANIFEST[artifact]["config"]
    layers = gp.load(path).layers
    directions = 2 if config.get("bidirectional") else 1
    assert len(layers) == config.get("num_layers", 1) * directions
    assert all(layer.has_bias == config.get("bias", True) for layer in layers)  # bias=False: zero linear biases
    _convert(path, out, "onnx", gp.load(path))
    layers = gp.load(out).layers  # as written: the program's internal tensor names made readable
    session = ort.InferenceSession(str(out))
    feed = {
        i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in session.get_inputs()
    }
    learned = config.get("initial_state") == "learned"
    assert all(("initial_h" in layer.constants) == learned for layer in layers)
    if learned:  # the layers hold h0: the model takes no initial state
        assert not {layer.interface.initial_h for layer in layers} & set(feed)
    sequence = truth["x"].transpose(1, 0, 2) if config.get("batch_first") else truth["x"]  # [S,N,I]
    finals = []
    for first in range(0, len(layers), directions):  # one layer of the stack: its directions
        ys = []
        for index, layer in enumerate(layers[first : first + directions], start=first):
            itf = layer.interface
            assert ("initial_h" in layer.fed_roles()) == ("h0" in truth), itf
            feed[itf.x] = sequence.transpose(1, 0, 2) if itf.layout else sequence
            if "initial_h" in layer.fed_roles():  # torch's h0 [L*D,N,H]: this layer and direction's [1,N,H]
                state = truth["h0"][index : index + 1]
                feed[itf.initial_h] = state.transpose(1, 0, 2) if itf.layout else state
            got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
            y, y_h = got[itf.y], got[itf.y_h]
            if itf.layout:  # [N,S,1,H], [N,1,H]
                y, y_h = y.transpose(1, 2, 0, 3), y_h.transpose(1, 0, 2)
            ys.append(y[:, 0])
            finals.append(y_h[0])
        sequence = np.concatenate(ys, axis=-1)
    y = sequence.transpose(1, 0, 2) if config.get("batch_first") else sequence
    np.testing.assert_allclose(y, truth["y"], **_tolerance(artifact))
    np.testing.assert_allclose(np.stack(finals), truth["h"], **_tolerance(artifact))


DECOMPOSED_TORCH = (
    "torch_dynamo_lstm_nobias_h0.onnx",
    "torch_legacy_gru2_bidirectional_batch_first.onnx",
    "torch_legacy_lstm2_bidirectional_batch_first.onnx",
)


@pytest.mark.parametrize("artifact", DECOMPOSED_TORCH)
def test_layers_written_decomposed_to_onnx_give_torchs_outputs(artifact, tmp_path):
    """A torch stack written to ONNX as elementary Loops (``--layers-only --strategy decomposed``) verifies, and
    onnxruntime runs the written layers, chained as torch chains them (layer l reads layer l-1's Ys joined on
    features; its directions start from h0[l*D + d]), to torch's outputs. The Loops' zero initial states are
    computed from X's shape only where a state is not given: an unread Shape/ConstantOfShape left beside the layers
    read back as operators around them (a whole model taking the wrong inputs, exit 3)."""
    import onnxruntime as ort

    path, out = PRODUCERS / artifact, tmp_path / "decomposed.onnx"
    truth, config = _truth(artifact), MANIFEST[artifact]["config"]
    result = gp.convert(path, out, to="onnx", layers_only=True, strategy="decomposed")
    assert result.passed and result.verification.passed, result.to_text()
    layers = gp.load(out).layers
    assert not gp.load(out).meta["other_ops"]
    session = ort.InferenceSession(str(out))
    roles = [role for role, _ in state_roles(layers[0].cell)]  # initial_h (, initial_c)
    starts = {"initial_h": truth.get("h0"), "initial_c": truth.get("c0")}
    sequence = truth["x"].transpose(1, 0, 2) if config.get("batch_first") else truth["x"]  # [S,N,I]
    finals: dict[str, list[np.ndarray]] = {role: [] for role in roles}
    n = sequence.shape[1]
    feed = {
        i.name: np.zeros([d if isinstance(d, int) else n for d in i.shape], np.float32) for i in session.get_inputs()
    }
    for index, layer in enumerate(layers):  # each run feeds one layer its inputs (the others' are filler)
        itf, d = layer.interface, layer.direction.count
        feed[itf.x] = sequence.transpose(1, 0, 2) if itf.layout else sequence
        for role in layer.fed_roles():  # torch's state [L*D,N,H]: this layer's [D,N,H] (zeros: torch's default)
            given = starts[role]
            state = (
                np.zeros((d, n, layer.hidden_size), np.float32) if given is None else given[index * d : (index + 1) * d]
            )
            feed[getattr(itf, role)] = state.transpose(1, 0, 2) if itf.layout else state
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        y = got[itf.y].transpose(1, 2, 0, 3) if itf.layout else got[itf.y]  # [S,D,N,H]
        sequence = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        for role, out_role in zip(roles, ("y_h", "y_c")):
            state = got[getattr(itf, out_role)]
            finals[role].append(state.transpose(1, 0, 2) if itf.layout else state)
    y = sequence.transpose(1, 0, 2) if config.get("batch_first") else sequence
    np.testing.assert_allclose(y, truth["y"], **_tolerance(artifact))
    for role, key in zip(roles, ("h", "c")):
        np.testing.assert_allclose(np.concatenate(finals[role]), truth[key], **_tolerance(artifact))


@pytest.mark.parametrize("artifact", LEARNED_STATE)
def test_a_learned_initial_state_is_held_by_the_lifted_layer(artifact):
    """nn.GRU called with an nn.Parameter h0: coremltools folds it into the constant start of the loop's state
    buffer. The lifted layer holds it as its constant initial_h [1, N, H] in its dtype, takes X alone, and its
    lifted finding says so; run on gatepack's executor from torch's x alone, it gives torch's y and h, which
    the same layer started from zeros does not (the held state is what makes them)."""
    from dataclasses import replace

    from gatepack.converters.executor import run_layer

    path = PRODUCERS / artifact
    model = gp.load(path)
    (layer,) = model.layers
    truth = _truth(artifact)
    assert gp.input_names(path) == ["x"] and layer.fed_roles() == ()
    held = layer.constants["initial_h"]
    n = truth["x"].shape[0 if MANIFEST[artifact]["config"].get("batch_first") else 1]
    assert held.shape == (1, n, layer.hidden_size) and held.dtype == layer.dtype and np.any(held)
    assert any("constant initial state" in f.detail for f in model.notes_for(layer) if f.feature == "lifted")

    def torch_outputs(lay) -> list[np.ndarray]:
        y, y_h = run_layer(lay, truth["x"])  # layout 1: [N,S,1,H], [N,1,H]
        return [y[:, :, 0], y_h.transpose(1, 0, 2)] if lay.interface.layout else [y[:, 0], y_h]

    for got, want in zip(torch_outputs(layer), [truth["y"], truth["h"]]):
        np.testing.assert_allclose(got, want, **_tolerance(artifact))
    zero_start = replace(layer, constants={}, interface=replace(layer.interface, initial_h=None))
    assert not np.allclose(torch_outputs(zero_start)[1], truth["h"], **_tolerance(artifact))


STACKS = sorted(a for a in MANIFEST if "_lstm2_" in a and "_stack" in a)  # the GRU stacks: test_coreml_whole


@pytest.mark.parametrize("artifact", STACKS)
def test_keras_lstm_stacks_verify_layer_by_layer_and_whole(artifact, tmp_path):
    """tf2onnx starts a Keras 2 LSTM given no state from one zero tensor computed from the shape of the layer below,
    read as both initial_h and initial_c. Verification feeds that tensor one value (the source's node, run alone,
    can take no other), so the layers written alone verify (before: the source ran with h0 = c0 and the target
    with two draws, Y 0.27-0.29 off on every target); written whole, the model gives Keras's own outputs."""
    path = PRODUCERS / artifact
    model = gp.load(path)
    shared = [lay.name for lay in model.layers if lay.interface.initial_h == lay.interface.initial_c is not None]
    assert bool(shared) == ("lstm2_stack_states" not in artifact)
    for target, name in (("directml", "m.json"), ("bnns", "m.bnns"), ("litert", "m.tflite")):
        result = gp.convert(path, tmp_path / name, to=target, layers_only=True)
        assert result.verification.passed, result.to_text()
    truth = _truth(artifact)
    names = gp.input_names(path)
    expected = [v for k, v in truth.items() if k not in names]
    for target, name in (("onnx", "m.onnx"), ("openvino", "m.xml"), ("coreml", "m.mlpackage")):
        result = gp.convert(path, tmp_path / name, to=target)
        assert result.whole and result.verification.passed, result.to_text()
        outputs = gp.run(
            tmp_path / name, {n: truth[n] for n in names}, engine="numpy" if target == "coreml" else "native"
        )
        for got, want in zip(outputs.values(), expected):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)

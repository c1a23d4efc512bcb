"""DirectML: ONNX -> DxDispatch model directories, the generated GRU/RNN and LSTM matrices checked against
onnxruntime (the float64 transcription for a float64 LSTM, written as FLOAT32) by running the saved directory
on gatepack's DirectML-semantics executor; schema validity; the descs' fields and 4-D sizes against
DirectML's documented structs; round trips; real models; hand-written models; C++ emission; bad input."""

from __future__ import annotations

import json
import shutil
import subprocess

import jsonschema
import numpy as np
import onnx
import pytest
from helpers import (
    FIXTURES,
    REALMODELS,
    ROOT,
    Config,
    assert_round_trip_keeps_every_weight,
    build_model,
    inputs,
    lstm_matrix,
    matrix,
    ort_reference,
    ort_run,
)
from oracle import assert_close, expected_outputs

import gatepack as gp
from gatepack.converters.errors import RefusedError
from gatepack.converters.formats import directml
from gatepack.converters.formats.directml.cpp import struct_name

MATRIX = matrix()
LSTM_MATRIX = lstm_matrix()
SCHEMA = json.loads((ROOT / "schemas" / "dxdispatch_model.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


def test_schema_copy_is_valid_and_knows_write_file():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert "writeFile" in SCHEMA["$defs"]["command"]["properties"]["type"]["enum"]


def convert(cfg: Config, tmp_path, **options):
    src = tmp_path / "m.onnx"
    onnx.save(build_model(cfg), src)
    out = tmp_path / "m.dml"
    result = gp.convert(src, out, to="directml", allow_lossy=True, seq_length=cfg.S, batch_size=cfg.N, **options)
    return out, result


def dml_inputs(cfg: Config, feed0: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Layout-0 inputs as the 4-D DirectML resources of the written model (sequence-major always)."""
    dtype = "float32" if cfg.dtype == "float64" else cfg.dtype
    feed = {name: feed0[name].astype(dtype)[None] for name in ("X", "initial_h", "initial_c") if name in feed0}
    if "sequence_lens" in feed0:
        feed["sequence_lens"] = feed0["sequence_lens"].astype(np.uint32).reshape(1, 1, 1, -1)
    return feed


def clip_refused(cfg: Config) -> bool:
    """A clip that applies (GRU: any, RNN: >= 0, onnxruntime) where the desc has no clip field: DirectML's GRU and
    RNN descs have none, its LSTM desc has one (docs/conventions.md §4, §8)."""
    return cfg.clip is not None and (cfg.cell == "GRU" or (cfg.cell == "RNN" and cfg.clip >= 0))


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX + LSTM_MATRIX, ids=[c.label() for c in MATRIX + LSTM_MATRIX])
def test_matrix_against_onnxruntime(cfg: Config, tmp_path):
    if clip_refused(cfg):
        with pytest.raises(RefusedError, match="clip") as err:
            convert(cfg, tmp_path)
        assert any(f.feature == "clip" and f.status.value == "unsupported" for f in err.value.findings)
        assert not (tmp_path / "m.dml").exists()
        return
    out, result = convert(cfg, tmp_path)
    assert result.verification.passed, result.verification.to_text()
    document = json.loads((out / "model.json").read_text())
    VALIDATOR.validate(document)
    ((_, dispatchable),) = document["dispatchables"].items()
    assert dispatchable["type"] == f"DML_OPERATOR_{cfg.cell}"
    # The saved directory, run as DxDispatch would, on this test's own inputs.
    feed0 = inputs(cfg)
    outputs = gp.run(out, dml_inputs(cfg, feed0), engine="numpy", directml_shapes=True)
    atol, rtol = TOLERANCE[cfg.dtype]
    if cfg.cell == "LSTM":  # float64: onnxruntime has no LSTM kernel, the float64 transcription is the oracle
        got = [outputs["Y"], outputs["Y_h"][0], outputs["Y_c"][0]]
        assert_close(cfg, got, expected_outputs(cfg, feed0), atol, rtol, dtype=cfg.dtype)
        return
    ref_y, ref_y_h = ort_reference(cfg, feed0)
    assert outputs["Y"].shape == ref_y.shape and outputs["Y_h"].shape == (1,) + ref_y_h.shape
    for ours, ref in ((outputs["Y"], ref_y), (outputs["Y_h"][0], ref_y_h)):
        finite = np.isfinite(ref)  # onnxruntime's naive Softplus overflows where the stable one does not
        assert finite.mean() > 0.5
        np.testing.assert_allclose(ours.astype(np.float64)[finite], ref[finite], atol=atol, rtol=rtol)


def test_matrix_covers_refusals_and_every_activation():
    refused = [c for c in MATRIX if clip_refused(c)]
    assert len(MATRIX) - len(refused) >= 250 and refused
    used = {a for c in MATRIX if c not in refused and c.activations for a in c.activations}
    assert len(used) == 11


def test_desc_fields_and_tensor_shapes(tmp_path):
    cfg = Config(
        cell="GRU",
        direction="bidirectional",
        lbr=1,
        seq_lens="mixed",
        initial_h=True,
        S=5,
        N=2,
        I=3,
        H=4,
        activations=["HardSigmoid", "Softplus", "Sigmoid", "Affine"],
        alphas=[0.3, 0.7],
        betas=[0.4, -0.2],
    )
    out, result = convert(cfg, tmp_path)
    document = json.loads((out / "model.json").read_text())
    ((name, dispatchable),) = document["dispatchables"].items()
    desc = dispatchable["desc"]
    assert dispatchable["type"] == "DML_OPERATOR_GRU"
    expected_sizes = {
        "InputTensor": [1, 5, 2, 3],
        "WeightTensor": [1, 2, 12, 3],
        "RecurrenceTensor": [1, 2, 12, 4],
        "BiasTensor": [1, 1, 2, 24],
        "HiddenInitTensor": [1, 2, 2, 4],
        "SequenceLengthsTensor": [1, 1, 1, 2],
        "OutputSequenceTensor": [5, 2, 2, 4],
        "OutputSingleTensor": [1, 2, 2, 4],
    }
    assert {k: v["Sizes"] for k, v in desc.items() if isinstance(v, dict)} == expected_sizes
    assert desc["SequenceLengthsTensor"]["DataType"] == "UINT32" and desc["InputTensor"]["DataType"] == "FLOAT32"
    assert desc["BiasTensor"]["TotalTensorSizeInBytes"] == 2 * 24 * 4
    assert desc["ActivationDescs"] == [
        {"Type": "ACTIVATION_HARD_SIGMOID", "Alpha": pytest.approx(0.3), "Beta": pytest.approx(0.4)},
        {"Type": "ACTIVATION_SOFTPLUS", "Steepness": 1.0},
        {"Type": "ACTIVATION_SIGMOID"},
        {"Type": "ACTIVATION_LINEAR", "Alpha": pytest.approx(0.7), "Beta": pytest.approx(-0.2)},
    ]
    assert (
        desc["ActivationDescCount"] == 4
        and desc["Direction"] == "DML_RECURRENT_NETWORK_DIRECTION_BIDIRECTIONAL"
        and desc["LinearBeforeReset"] is True
    )
    (command,) = [c for c in document["commands"] if c["type"] == "dispatch"]
    for field, resource in command["bindings"].items():
        spec = document["resources"][resource]["initialValues"]
        if "sourcePath" in spec:  # every input is a .npy of exactly the desc's Sizes
            array = np.load(out / spec["sourcePath"], allow_pickle=False)
            assert list(array.shape) == desc[field]["Sizes"]
    written = {c["resource"] for c in document["commands"] if c["type"] == "writeFile"}
    assert written == {command["bindings"]["OutputSequenceTensor"], command["bindings"]["OutputSingleTensor"]}
    # Weights are the ONNX tensors with a leading 1 (DirectML's gate order is ONNX's).
    from helpers import weights

    w = weights(cfg)
    np.testing.assert_array_equal(np.load(out / "rec.W.npy"), w["W"][None])
    np.testing.assert_array_equal(np.load(out / "rec.B.npy"), w["B"][None, None])
    findings = {f.feature: f for f in result.findings["rec"]}
    assert findings["activations"].warning and "ACTIVATION_LINEAR" in findings["activations"].warning
    assert "onnxruntime" in findings["sequence_lens"].warning


def test_lstm_desc_fields_and_sizes(tmp_path):
    cfg = Config(
        cell="LSTM",
        direction="bidirectional",
        peepholes=True,
        input_forget=1,
        clip=0.75,
        initial_h=True,
        initial_c=True,
        seq_lens="mixed",
        S=5,
        N=2,
        I=3,
        H=4,
        activations=["HardSigmoid", "Tanh", "Softsign", "Sigmoid", "Elu", "Tanh"],
        alphas=[0.3, 0.9],
        betas=[0.4],
    )
    out, _ = convert(cfg, tmp_path)
    ((_, dispatchable),) = json.loads((out / "model.json").read_text())["dispatchables"].items()
    desc = dispatchable["desc"]
    assert {k: v["Sizes"] for k, v in desc.items() if isinstance(v, dict)} == {
        "InputTensor": [1, 5, 2, 3],
        "WeightTensor": [1, 2, 16, 3],
        "RecurrenceTensor": [1, 2, 16, 4],
        "BiasTensor": [1, 1, 2, 32],
        "HiddenInitTensor": [1, 2, 2, 4],
        "CellMemInitTensor": [1, 2, 2, 4],
        "SequenceLengthsTensor": [1, 1, 1, 2],
        "PeepholeTensor": [1, 1, 2, 12],
        "OutputSequenceTensor": [5, 2, 2, 4],
        "OutputSingleTensor": [1, 2, 2, 4],
        "OutputCellSingleTensor": [1, 2, 2, 4],
    }
    assert (desc["UseClipThreshold"], desc["ClipThreshold"], desc["CoupleInputForget"]) == (True, 0.75, True)
    assert desc["ActivationDescCount"] == 6 and desc["ActivationDescs"][0] == {
        "Type": "ACTIVATION_HARD_SIGMOID",
        "Alpha": pytest.approx(0.3),
        "Beta": pytest.approx(0.4),
    }
    # the .npy files hold the ONNX tensors, reshaped only (i, o, f, c; peepholes i, o, f)
    (source,) = gp.load(tmp_path / "m.onnx").layers
    resources = json.loads((out / "model.json").read_text())["resources"]
    bindings = json.loads((out / "model.json").read_text())["commands"][0]["bindings"]
    peephole = np.load(out / resources[bindings["PeepholeTensor"]]["initialValues"]["sourcePath"])
    np.testing.assert_array_equal(peephole[0, 0], np.stack([p.P for p in source.directions]))


def test_optional_tensors_present_exactly_when_the_source_has_them(tmp_path):
    cfg = Config(cell="RNN", bias=False, S=3, N=2)
    src = tmp_path / "m.onnx"
    model = build_model(cfg)
    node = model.graph.node[0]
    node.output[:] = ["", "Y_h"]  # Y not requested
    model.graph.output.pop(0)
    onnx.save(model, src)
    gp.convert(src, tmp_path / "m.dml", to="directml", seq_length=3, batch_size=2)
    desc = json.loads((tmp_path / "m.dml" / "model.json").read_text())["dispatchables"]["rec"]["desc"]
    assert set(k for k in desc if k.endswith("Tensor")) == {
        "InputTensor",
        "WeightTensor",
        "RecurrenceTensor",
        "OutputSingleTensor",
    }
    assert "LinearBeforeReset" not in desc


def test_layout1_is_sequence_major_and_reads_back_batch_major(tmp_path):
    cfg = Config(layout=1, initial_h=True, S=4, N=2, direction="bidirectional")
    out, result = convert(cfg, tmp_path)
    assert {f.feature: f.status.value for f in result.findings["rec"]}["layout"] == "repacked"
    desc = json.loads((out / "model.json").read_text())["dispatchables"]["rec"]["desc"]
    assert desc["InputTensor"]["Sizes"] == [1, 4, 2, cfg.I]
    manifest = json.loads((out / "gatepack.json").read_text())["layers"][0]
    assert manifest["source_layout"] == 1 and "transpose" in manifest["layout_note"]
    (layer,) = gp.load(out).layers
    assert layer.interface.layout == 1


def test_float16_and_float64(tmp_path):
    out, _ = convert(Config(dtype="float16", seed=4), tmp_path)
    assert (
        json.loads((out / "model.json").read_text())["dispatchables"]["rec"]["desc"]["WeightTensor"]["DataType"]
        == "FLOAT16"
    )
    assert np.load(out / "rec.W.npy").dtype == np.float16
    src = tmp_path / "d.onnx"
    onnx.save(build_model(Config(dtype="float64")), src)
    with pytest.raises(RefusedError, match="lossy: dtype"):
        gp.convert(src, tmp_path / "d.dml", to="directml")
    assert not (tmp_path / "d.dml").exists()


@pytest.mark.parametrize(
    "cfg", [c for c in MATRIX[:80] if c.clip is None or (c.cell == "RNN" and c.clip < 0)][:40], ids=lambda c: c.label()
)
def test_round_trip_onnx_directml_onnx_is_bit_exact(cfg: Config, tmp_path):
    out, _ = convert(cfg, tmp_path)
    back = tmp_path / "back.onnx"
    gp.convert(out, back, to="onnx")
    (src_layer,) = gp.load(tmp_path / "m.onnx").layers
    (layer,) = gp.load(back).layers
    dtype = np.float32 if cfg.dtype == "float64" else np.dtype(cfg.dtype)
    for a, b in zip(src_layer.directions, layer.directions):
        for key in ("W", "R", "Wb", "Rb"):
            np.testing.assert_array_equal(getattr(a, key).astype(dtype), getattr(b, key))
            assert getattr(b, key).dtype == dtype
        assert [str(x) for x in a.activations] == [str(x) for x in b.activations]
    for attr in ("cell", "direction", "linear_before_reset", "has_bias", "hidden_size", "input_size"):
        assert getattr(src_layer, attr) == getattr(layer, attr)
    src_itf, itf = src_layer.interface, layer.interface
    assert (itf.x, itf.y, itf.y_h, itf.sequence_lens, itf.initial_h, itf.layout) == (
        src_itf.x,
        src_itf.y,
        src_itf.y_h,
        src_itf.sequence_lens,
        src_itf.initial_h,
        src_itf.layout,
    )
    if cfg.dtype == "float32" and cfg.cell == "GRU":  # same weights on the same runtime: the same numbers
        feed = inputs(cfg)
        if cfg.layout:
            feed = {
                k: (np.ascontiguousarray(v.transpose(1, 0, 2)) if k != "sequence_lens" else v) for k, v in feed.items()
            }
        for ours, ref in zip(
            ort_run(back, feed),
            ort_run(gp.convert(tmp_path / "m.onnx", tmp_path / "direct.onnx", to="onnx").output, feed),
        ):
            np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("cfg", [c for c in LSTM_MATRIX if c.dtype == "float32"][:12], ids=lambda c: c.label())
def test_lstm_round_trip_to_onnx_is_bit_exact(cfg: Config, tmp_path):
    assert_round_trip_keeps_every_weight(cfg, tmp_path, "directml", "m.dml")


GRU_RNN_MODELS = sorted(p.name for p in REALMODELS.glob("*.onnx") if "lstm" not in p.name)


@pytest.mark.parametrize("name", GRU_RNN_MODELS)
def test_real_models_convert_run_and_match(name, tmp_path):
    from test_realmodels import capture

    values, _ = capture(REALMODELS / name)
    model = gp.load(REALMODELS / name)
    # DirectML tensors are static: symbolic or unknown S/N take the sizes this run captured, per layer.
    options: dict = {"seq_length": {}, "batch_size": {}}
    for layer in model.layers:
        itf = layer.interface
        shape = values[itf.x].shape if itf.layout == 0 else values[itf.x].shape[::-1]
        for key, dim, size in (("seq_length", itf.seq_length, shape[0]), ("batch_size", itf.batch_size, shape[1])):
            assert dim == size if isinstance(dim, int) else options[key].setdefault(layer.name, size) == size
    out = tmp_path / "m.dml"
    result = gp.convert(REALMODELS / name, out, to="directml", layers_only=True, **options)
    assert result.verification.passed, result.verification.to_text()
    written = gp.load(out)
    assert len(written.layers) == len(model.layers)
    source = {layer.name: layer.interface for layer in model.layers}
    for layer in written.layers:  # each node's real inputs, through the saved directory, by role (layers alone
        itf, src = layer.interface, source[layer.name]  # take readable names for the model's internal tensors)
        roles = [r for r in ("x", "sequence_lens", "initial_h") if getattr(itf, r)]
        outputs = directml.run_layer_native(layer, {getattr(itf, r): values[getattr(src, r)] for r in roles})
        for role in ("y", "y_h"):
            if getattr(itf, role):
                np.testing.assert_allclose(
                    outputs[getattr(itf, role)],
                    values[getattr(src, role)],
                    atol=1e-5,
                    rtol=1e-4,
                    err_msg=f"{name} {layer.name} {role}",
                )


@pytest.mark.parametrize("name", ["dpcrn_online_simple_lstm.onnx", "dtln_model_1_lstm.onnx"])
def test_real_lstm_models_layers_only(name, tmp_path):
    with pytest.raises(gp.RefusedError, match="other operators"):
        gp.convert(REALMODELS / name, tmp_path / "refused", to="directml")
    result = gp.convert(REALMODELS / name, tmp_path / "m.dml", to="directml", layers_only=True)
    assert result.verification.passed and len(result.verification.outputs) == 3 * len(gp.load(REALMODELS / name).layers)


def test_reads_directmls_own_hand_written_rnn_example():
    # DxDispatch's dml_rnn.json (microsoft/DirectML, MIT): sequence initializers, only OutputSingle,
    # bidirectional, ELU with a different Alpha per direction. Oracle: the same RNN on onnxruntime.
    path = FIXTURES / "directml" / "dml_rnn.json"
    (layer,) = gp.load(path).layers
    assert (layer.cell.value, layer.direction.value, layer.input_size, layer.hidden_size, layer.has_bias) == (
        "rnn",
        "bidirectional",
        4,
        5,
        False,
    )
    assert [str(p.activations[0]) for p in layer.directions] == ["Elu(alpha=0.5)", "Elu(alpha=3.5)"]
    outputs = gp.run(path, {}, engine="numpy", directml_shapes=True)
    x = np.arange(1, 33, dtype=np.float32).reshape(1, 8, 4)
    w = (1 + 0.4 * np.arange(40, dtype=np.float32)).reshape(2, 5, 4)
    r = np.full((2, 5, 5), 0.3, np.float32)
    node = onnx.helper.make_node(
        "RNN",
        ["X", "W", "R"],
        ["", "Y_h"],
        hidden_size=5,
        direction="bidirectional",
        activations=["Elu", "Elu"],
        activation_alpha=[0.5, 3.5],
    )
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 8, 4])],
        [onnx.helper.make_tensor_value_info("Y_h", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(r, "R")],
    )
    (ref,) = ort_run(
        onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 14)], ir_version=8), {"X": x}
    )
    np.testing.assert_allclose(outputs["output"].reshape(2, 8, 5), ref, rtol=1e-5)


def test_hand_written_lstm_desc_is_read_and_run(tmp_path):
    """A DxDispatch model written by hand (inline initial values, DML field spellings, no manifest)."""
    h, i = 2, 1
    rng = np.random.default_rng(4)
    w, r = rng.uniform(-1, 1, (1, 1, 4 * h, i)), rng.uniform(-1, 1, (1, 1, 4 * h, h))
    x = rng.uniform(-1, 1, (1, 3, 1, i))

    def tensor(sizes):
        return {"DataType": "FLOAT32", "Sizes": sizes}

    def values(array):
        return {"initialValuesDataType": "FLOAT32", "initialValues": [float(v) for v in array.ravel()]}

    document = {
        "resources": {
            "x": values(x),
            "w": values(w),
            "r": values(r),
            "y": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 3 * h, "value": 0}},
        },
        "dispatchables": {
            "lstm": {
                "type": "DML_OPERATOR_LSTM",
                "desc": {
                    "InputTensor": tensor([1, 3, 1, i]),
                    "WeightTensor": tensor([1, 1, 4 * h, i]),
                    "RecurrenceTensor": tensor([1, 1, 4 * h, h]),
                    "OutputSequenceTensor": tensor([3, 1, 1, h]),
                    "ActivationDescs": [
                        {"Type": "DML_OPERATOR_ACTIVATION_SIGMOID"},
                        {"Type": "DML_OPERATOR_ACTIVATION_TANH"},
                        {"Type": "DML_OPERATOR_ACTIVATION_TANH"},
                    ],
                    "Direction": "DML_RECURRENT_NETWORK_DIRECTION_FORWARD",
                },
            }
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "lstm",
                "bindings": {
                    "InputTensor": "x",
                    "WeightTensor": "w",
                    "RecurrenceTensor": "r",
                    "OutputSequenceTensor": "y",
                },
            }
        ],
    }
    VALIDATOR.validate(document)
    (tmp_path / "hand").mkdir()
    (tmp_path / "hand" / "model.json").write_text(json.dumps(document))
    (layer,) = gp.load(tmp_path / "hand").layers
    assert layer.cell.value == "lstm" and layer.clip is None and not layer.has_peepholes
    y = gp.run(tmp_path / "hand", {}, engine="numpy", directml_shapes=True)["y"]
    cfg = Config(cell="LSTM", S=3, N=1, I=i, H=h, bias=False)
    # the same weights as an ONNX node on onnxruntime
    model = build_model(cfg)
    for init in model.graph.initializer:
        array = {"W": w[0], "R": r[0]}[init.name].astype(np.float32)
        init.CopyFrom(onnx.numpy_helper.from_array(array, init.name))
    (ref, _, _) = ort_run(model, {"X": x[0].astype(np.float32)})
    np.testing.assert_allclose(y, ref, atol=1e-6)


def test_softplus_steepness_is_directml_semantics(tmp_path):
    out, _ = convert(Config(cell="RNN", activations=["Softplus"], S=3, N=2, seed=9), tmp_path)
    base = gp.run(out, {}, engine="numpy", directml_shapes=True)["Y"]
    document = json.loads((out / "model.json").read_text())
    document["dispatchables"]["rec"]["desc"]["ActivationDescs"][0]["Steepness"] = 2.0
    (out / "model.json").write_text(json.dumps(document))
    steep = gp.run(out, {}, engine="numpy", directml_shapes=True)["Y"]
    # By hand for the first step: log(1 + e^(2v)) / 2 with v the pre-activation.
    x = np.load(out / "X.npy")[0, 0]
    w, b = np.load(out / "rec.W.npy")[0, 0], np.load(out / "rec.B.npy")[0, 0, 0]  # the first step has h = 0
    v = x @ w.T + b[: w.shape[0]] + b[w.shape[0] :]
    np.testing.assert_allclose(steep[0, 0], np.log1p(np.exp(2 * v)) / 2, rtol=1e-6)
    np.testing.assert_allclose(base[0, 0], np.log1p(np.exp(v)), rtol=1e-6)
    with pytest.raises(gp.InputError, match="Steepness 2"):
        gp.load(out)  # the canonical layer holds Softplus with Steepness 1 only


@pytest.mark.skipif(
    shutil.which("g++") is None, reason="no C++ compiler (g++) on this machine to compile the emitted desc.cpp"
)
def test_emitted_cpp_compiles_and_matches_the_json(tmp_path):
    cfg = Config(
        cell="GRU",
        direction="bidirectional",
        lbr=1,
        seq_lens="mixed",
        initial_h=True,
        S=5,
        N=2,
        activations=["HardSigmoid", "Softplus", "ThresholdedRelu", "Affine"],
        alphas=[0.3, 0.25, 0.7],
        betas=[0.4, -0.2],
    )
    out, _ = convert(cfg, tmp_path, emit_cpp=True)
    rnn_cfg = Config(cell="RNN", direction="reverse", bias=False, S=5, N=2, activations=["Elu"], alphas=[0.5])
    (tmp_path / "rnn").mkdir()
    rnn_out, _ = convert(rnn_cfg, tmp_path / "rnn", emit_cpp=True)
    lstm_cfg = Config(
        cell="LSTM", direction="bidirectional", peepholes=True, input_forget=1, clip=1.5, initial_c=True, S=5, N=2
    )
    (tmp_path / "lstm").mkdir()
    lstm_out, _ = convert(lstm_cfg, tmp_path / "lstm", emit_cpp=True)
    for directory, cell in ((out, "GRU"), (rnn_out, "RNN"), (lstm_out, "LSTM")):
        document = json.loads((directory / "model.json").read_text())
        ((name, dispatchable),) = document["dispatchables"].items()
        harness = tmp_path / f"main_{cell}.cpp"
        harness.write_text(
            HARNESS.replace("CELL", cell)
            .replace("STRUCT", struct_name(name))
            .replace("DESC_CPP", str(directory / "desc.cpp"))
        )
        binary = tmp_path / f"main_{cell}"
        flags = {"GRU": ["-DIS_GRU"], "LSTM": ["-DIS_LSTM"]}.get(cell, [])
        subprocess.run(
            [
                "g++",
                "-std=c++17",
                "-Wall",
                "-Werror",
                *flags,
                "-I",
                str(ROOT / "tests" / "directml_stub"),
                str(harness),
                "-o",
                str(binary),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        printed = json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
        desc = dispatchable["desc"]
        types = {"FLOAT32": 1, "FLOAT16": 2, "UINT32": 3}
        expected_tensors = {
            k: [v["Sizes"], types[v["DataType"]], v["TotalTensorSizeInBytes"]]
            for k, v in desc.items()
            if k.endswith("Tensor")
        }
        assert printed["tensors"] == expected_tensors
        codes = {
            "ACTIVATION_ELU": 35,
            "ACTIVATION_HARD_SIGMOID": 37,
            "ACTIVATION_LINEAR": 40,
            "ACTIVATION_SIGMOID": 47,
            "ACTIVATION_SOFTPLUS": 49,
            "ACTIVATION_TANH": 51,
            "ACTIVATION_THRESHOLDED_RELU": 52,
        }
        assert [a[0] for a in printed["activations"]] == [codes[a["Type"]] for a in desc["ActivationDescs"]]
        for got, want in zip(printed["activations"], desc["ActivationDescs"]):
            assert got[1:] == pytest.approx([v for k, v in want.items() if k != "Type"], rel=1e-7)
        assert (
            printed["direction"]
            == {"DML_RECURRENT_NETWORK_DIRECTION_BIDIRECTIONAL": 2, "DML_RECURRENT_NETWORK_DIRECTION_BACKWARD": 1}[
                desc["Direction"]
            ]
        )
        assert printed["op"] == {"GRU": 78, "RNN": 76, "LSTM": 77}[cell]
        if cell == "GRU":
            assert printed["lbr"] == 1
        if cell == "LSTM":
            assert (printed["clip"], printed["use_clip"], printed["couple"]) == (1.5, 1, 1)


HARNESS = r"""
#include "DESC_CPP"
#include <cstdio>
#include <cstring>
using namespace gatepack;
static void tensor(const char* name, const DML_TENSOR_DESC* t, bool& first) {
    if (!t) return;
    auto b = static_cast<const DML_BUFFER_TENSOR_DESC*>(t->Desc);
    std::printf("%s\"%s\": [[%u, %u, %u, %u], %d, %llu]", first ? "" : ", ", name, b->Sizes[0], b->Sizes[1], b->Sizes[2], b->Sizes[3], int(b->DataType), (unsigned long long)b->TotalTensorSizeInBytes);
    first = false;
}
static void activation(const DML_OPERATOR_DESC& a, bool first) {
    std::printf("%s[%d", first ? "" : ", ", int(a.Type));
    const char* base = static_cast<const char*>(a.Desc) + 2 * sizeof(void*);
    int count = 0;
    switch (a.Type) {
        case DML_OPERATOR_ACTIVATION_HARD_SIGMOID: case DML_OPERATOR_ACTIVATION_LINEAR: case DML_OPERATOR_ACTIVATION_SCALED_TANH: count = 2; break;
        case DML_OPERATOR_ACTIVATION_ELU: case DML_OPERATOR_ACTIVATION_LEAKY_RELU: case DML_OPERATOR_ACTIVATION_THRESHOLDED_RELU: case DML_OPERATOR_ACTIVATION_SOFTPLUS: count = 1; break;
        default: break;
    }
    for (int k = 0; k < count; ++k) { float v; std::memcpy(&v, base + k * sizeof(float), sizeof v); std::printf(", %.9g", v); }
    std::printf("]");
}
int main() {
    STRUCT layer;
    auto d = static_cast<const DML_CELL_OPERATOR_DESC*>(layer.op.Desc);
    std::printf("{\"op\": %d, \"tensors\": {", int(layer.op.Type));
    bool first = true;
    tensor("InputTensor", d->InputTensor, first); tensor("WeightTensor", d->WeightTensor, first); tensor("RecurrenceTensor", d->RecurrenceTensor, first);
    tensor("BiasTensor", d->BiasTensor, first); tensor("HiddenInitTensor", d->HiddenInitTensor, first); tensor("SequenceLengthsTensor", d->SequenceLengthsTensor, first);
    tensor("OutputSequenceTensor", d->OutputSequenceTensor, first); tensor("OutputSingleTensor", d->OutputSingleTensor, first);
#if defined(IS_LSTM)
    tensor("CellMemInitTensor", d->CellMemInitTensor, first); tensor("PeepholeTensor", d->PeepholeTensor, first);
    tensor("OutputCellSingleTensor", d->OutputCellSingleTensor, first);
#endif
    std::printf("}, \"activations\": [");
    for (UINT k = 0; k < d->ActivationDescCount; ++k) activation(d->ActivationDescs[k], k == 0);
    std::printf("], \"direction\": %d", int(d->Direction));
#if defined(IS_GRU)
    std::printf(", \"lbr\": %d", int(d->LinearBeforeReset));
#endif
#if defined(IS_LSTM)
    std::printf(", \"clip\": %.9g, \"use_clip\": %d, \"couple\": %d", d->ClipThreshold, int(d->UseClipThreshold), int(d->CoupleInputForget));
#endif
    std::printf("}\n");
}
"""


def test_cli_emit_cpp_and_run(tmp_path):
    from click.testing import CliRunner

    from gatepack.cli import main

    runner = CliRunner()
    out = tmp_path / "gru.dml"
    result = runner.invoke(
        main,
        [
            "convert",
            str(FIXTURES / "gru_seqlens.onnx"),
            "--to",
            "directml",
            "-o",
            str(out),
            "--emit-cpp",
            "--seq-length",
            "6",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (out / "desc.cpp").is_file() and "verification passed" in result.output
    assert json.loads((out / "model.json").read_text())["dispatchables"]
    result = runner.invoke(
        main,
        [
            "run",
            str(out),
            "--inputs",
            str(FIXTURES / "gru_seqlens.expected.npz"),
            "-o",
            str(tmp_path / "o.npz"),
            "--engine",
            "native",
        ],
    )
    assert result.exit_code == 6 and "Windows" in result.output  # the default (auto) runs gatepack's executor


def break_model(tmp_path, edit) -> str:
    out, _ = convert(Config(cell="GRU", S=3, N=2, I=2, H=3), tmp_path)
    document = json.loads((out / "model.json").read_text())
    edit(out, document)
    (out / "model.json").write_text(json.dumps(document))
    return str(out)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda out, doc: np.save(out / "rec.W.npy", np.load(out / "rec.W.npy").reshape(1, 1, 2, 9)),
            r"model.json: layer 'rec': WeightTensor: Sizes \[1, 1, 9, 2\] contradict resource 'rec.W', which holds "
            r"shape \[1, 1, 2, 9\]",
        ),
        (
            lambda out, doc: (out / "rec.R.npy").unlink(),
            r"layer 'rec': RecurrenceTensor: resource 'rec.R': sourcePath: .*rec.R.npy: no such file",
        ),
        (
            lambda out, doc: doc["dispatchables"]["rec"]["desc"]["ActivationDescs"][0].update(Type="ACTIVATION_GELU"),
            r"layer 'rec': ActivationDescs: \[0\] type 'ACTIVATION_GELU' is not an activation",
        ),
        (
            lambda out, doc: doc["dispatchables"]["rec"]["desc"]["InputTensor"].update(
                Sizes=[3, 2, 2], DimensionCount=3
            ),
            r"layer 'rec': InputTensor: Sizes \[3, 2, 2\] are 3-D; DirectML recurrent operators take 4-D tensors",
        ),
        (
            lambda out, doc: (out / "rec.B.npy").write_bytes(b"\x93NUMPY garbage"),
            r"rec.B.npy: not a readable .npy file",
        ),
        (
            lambda out, doc: doc["dispatchables"]["rec"]["desc"].update(Direction="SIDEWAYS"),
            r"layer 'rec': Direction: 'SIDEWAYS' is not FORWARD, BACKWARD or BIDIRECTIONAL",
        ),
    ],
    ids=["sizes-vs-npy", "missing-npy", "unknown-activation", "3d-sizes", "corrupt-npy", "bad-direction"],
)
def test_bad_input_gives_one_line_errors(tmp_path, edit, message):
    from click.testing import CliRunner

    from gatepack.cli import main

    path = break_model(tmp_path, edit)
    result = CliRunner().invoke(main, ["inspect", path])
    assert result.exit_code == 3, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gatepack: error: ") and "Traceback" not in result.output
    import re

    assert re.search(message, lines[0]), lines[0]
    converted = CliRunner().invoke(main, ["convert", path, "--to", "onnx", "-o", str(tmp_path / "x.onnx")])
    assert converted.exit_code == 3 and not (tmp_path / "x.onnx").exists()

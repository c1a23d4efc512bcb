"""LSTM to DirectML: every configuration of the LSTM matrix written as a DxDispatch model directory,
validated against DxDispatch's schema and run from disk on gatepack's DirectML executor against
onnxruntime (the float64 transcription for float64 sources, written as FLOAT32); the desc's fields
and 4-D sizes against DirectML's documented struct; round trips to ONNX; the real LSTM models."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from helpers import REALMODELS, Config, build_model, inputs, lstm_matrix
from test_directml import VALIDATOR
from test_lstm import assert_close, assert_round_trip_keeps_every_weight, expected_outputs

import gatepack as gp

MATRIX = lstm_matrix()
TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


def convert(cfg: Config, tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(build_model(cfg), src)
    out = tmp_path / "m.dml"
    result = gp.convert(src, out, to="directml", allow_lossy=True, seq_length=cfg.S, batch_size=cfg.N)
    return out, result


def dml_inputs(cfg: Config, feed0: dict) -> dict:
    """Layout-0 inputs as the written model's 4-D resources (named after the source's tensors)."""
    dtype = "float32" if cfg.dtype == "float64" else cfg.dtype
    feed = {name: feed0[name].astype(dtype)[None] for name in ("X", "initial_h", "initial_c") if name in feed0}
    if "sequence_lens" in feed0:
        feed["sequence_lens"] = feed0["sequence_lens"].astype(np.uint32).reshape(1, 1, 1, -1)
    return feed


@pytest.mark.matrix
@pytest.mark.parametrize("cfg", MATRIX, ids=[c.label() for c in MATRIX])
def test_matrix_against_onnxruntime(cfg: Config, tmp_path):
    out, result = convert(cfg, tmp_path)
    assert result.verification.passed, result.verification.to_text()
    document = json.loads((out / "model.json").read_text())
    VALIDATOR.validate(document)
    ((_, dispatchable),) = document["dispatchables"].items()
    assert dispatchable["type"] == "DML_OPERATOR_LSTM"
    feed0 = inputs(cfg)
    # the saved directory, as DxDispatch runs it: its resources in the descs' 4-D shapes
    outputs = gp.run(out, dml_inputs(cfg, feed0), engine="numpy", directml_shapes=True)
    got = [outputs["Y"], outputs["Y_h"][0], outputs["Y_c"][0]]
    assert_close(cfg, got, expected_outputs(cfg, feed0), *TOLERANCE[cfg.dtype], dtype=cfg.dtype)


def test_desc_fields_and_sizes(tmp_path):
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


@pytest.mark.parametrize("cfg", [c for c in MATRIX if c.dtype == "float32"][:12], ids=lambda c: c.label())
def test_round_trip_to_onnx_is_bit_exact(cfg: Config, tmp_path):
    assert_round_trip_keeps_every_weight(cfg, tmp_path, "directml", "m.dml")


@pytest.mark.parametrize("name", ["dpcrn_online_simple_lstm.onnx", "dtln_model_1_lstm.onnx"])
def test_real_lstm_models_layers_only(name, tmp_path):
    with pytest.raises(gp.RefusedError, match="other operators"):
        gp.convert(REALMODELS / name, tmp_path / "refused", to="directml")
    result = gp.convert(REALMODELS / name, tmp_path / "m.dml", to="directml", layers_only=True)
    assert result.verification.passed and len(result.verification.outputs) == 3 * len(gp.load(REALMODELS / name).layers)


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
    from helpers import ort_run

    model = build_model(cfg)
    for init in model.graph.initializer:
        array = {"W": w[0], "R": r[0]}[init.name].astype(np.float32)
        init.CopyFrom(onnx.numpy_helper.from_array(array, init.name))
    (ref, _, _) = ort_run(model, {"X": x[0].astype(np.float32)})
    np.testing.assert_allclose(y, ref, atol=1e-6)

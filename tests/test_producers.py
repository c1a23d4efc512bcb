"""Artifacts written by the tools people use (fixtures/producers: torch.onnx legacy and dynamo,
tf2onnx from Keras 3, ov.convert_model from a PyTorch module and from ONNX saved fp32 and fp16,
coremltools' PyTorch frontend for iOS15/17/18 in fp32 and fp16), with the producing framework's own
outputs as the truth.

Every artifact runs on its own runtime (onnxruntime, OpenVINO CPU in f32) or gatepack's interpreter of
its format (Core ML) to the framework's outputs. Those whose recurrence is a node or an op gatepack
reads convert to every target with verification on (each target's artifact against the source layer
by layer); those whose recurrence is a loop or unrolled (tf2onnx, dynamo's nn.RNN, coremltools'
nn.GRU) are refused with one line saying what was found - gatepack does not lift them yet.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gatepack.converters as gp

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MANIFEST = json.loads((PRODUCERS / "manifest.json").read_text())
TARGETS = ("onnx", "openvino", "directml", "coreml", "bnns")
SUFFIX = {"onnx": ".onnx", "openvino": ".xml", "directml": ".dml", "coreml": ".mlpackage", "bnns": ".bnns"}


def _not_lifted_yet(name: str) -> str | None:
    """What gatepack says for an artifact whose recurrence it does not lift yet (None: it reads it)."""
    if name.startswith("tf2onnx_"):
        return "written as a loop"
    if name.startswith("torch_dynamo_rnn"):
        return "unrolled over time"
    if name.startswith("coreml_gru"):
        return "while_loop"
    return None


ARTIFACTS = sorted(MANIFEST)
READABLE = [a for a in ARTIFACTS if _not_lifted_yet(a) is None]


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


@pytest.mark.parametrize("artifact", READABLE)
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
        out = tmp_path / f"{target}{SUFFIX[target]}"
        result = gp.convert(path, out, to=target)
        assert result.passed and result.verification.passed, result.to_text()
        back = gp.load(out)
        assert len(back.layers) == len(model.layers)
        # Chained layers (a 2-layer stack) are written side by side with distinct input names.
        inputs = {n for layer in back.layers for n in (layer.interface.x, layer.interface.initial_h) if n}
        outputs = {n for layer in back.layers for n in (layer.interface.y, layer.interface.y_h) if n}
        assert not inputs & outputs


@pytest.mark.parametrize("artifact", sorted(set(ARTIFACTS) - set(READABLE)))
def test_loops_and_unrolled_cells_are_refused_with_what_was_found(artifact, tmp_path):
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.convert(PRODUCERS / artifact, tmp_path / "out.onnx", to="onnx")
    assert _not_lifted_yet(artifact) in err.value.one_line() and "\n" not in err.value.one_line()
    assert not (tmp_path / "out.onnx").exists()


def test_nameless_ir_outputs_get_stable_names_said_by_inspect():
    path = PRODUCERS / "ov_torch_gru.xml"
    model = gp.load(path)
    named = model.meta["notes"]
    assert len(named) == 2 and all("has no tensor name" in n for n in named)
    outputs = gp.run(path, {"x": _truth("ov_torch_gru.xml")["x"]})
    assert list(outputs) == [n.split("calls it ")[1].strip("'") for n in named]
    assert list(gp.run(path, {"x": _truth("ov_torch_gru.xml")["x"]})) == list(outputs)  # stable

"""The LiteRT (``.tflite``) producer fixtures (fixtures/producers/litert): Keras 3 and Keras 2 (tf_keras) recurrent
layers through ``tf.lite.TFLiteConverter`` and torch modules through litert-torch, each with the framework's own
outputs as the truth.

Checked without a gatepack reader: every artifact the manifest lists exists with its truth; the truth holds the
inputs and outputs the flatbuffer declares (parsed with the ``tflite`` package, skipped where it is not
installed); LiteRT's interpreter (``ai_edge_litert``, skipped where it is not installed) reproduces the truth,
which proves the truth files, and behaves across invoke() calls as docs/conventions.md §10 says.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

LITERT = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "litert"
MANIFEST = json.loads((LITERT / "manifest.json").read_text())
ARTIFACTS = sorted(MANIFEST)
CALL2 = "call2:"  # a stateful case's second call, in a row with the first
LITERT_OUTPUT = "litert:"  # the interpreter's own outputs, stored beside the framework's


def _truth(artifact: str) -> dict[str, np.ndarray]:
    return dict(np.load(LITERT / artifact.replace(".tflite", ".truth.npz")))


def _calls(artifact: str) -> list[str]:
    """The prefixes of the calls the truth holds, in order."""
    return ["", CALL2] if MANIFEST[artifact]["config"]["stateful"] else [""]


def _tolerance(artifact: str) -> dict[str, float]:
    """Float32: the interpreter's kernels against the framework's (measured at most 4.8e-7). Dynamic-range int8 weights
    against Keras's float layer: the quantization tolerance gatepack uses for quantized LSTMs (measured 7.4e-3)."""
    if MANIFEST[artifact]["precision"].startswith("int8"):
        return {"atol": 2e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1e-5}


def _own_tolerance(artifact: str) -> dict[str, float]:
    """Against the interpreter's stored outputs: float kernels agree to rounding; the hybrid int8 kernels
    quantize X and h at run time, whose rounding may differ with the CPU's vector code."""
    atol = 1e-3 if MANIFEST[artifact]["precision"].startswith("int8") else 1e-5
    return {"atol": atol, "rtol": atol}


def test_the_manifest_lists_every_artifact_with_its_truth():
    assert {p.name for p in LITERT.glob("*.tflite")} == set(MANIFEST)
    for artifact, entry in MANIFEST.items():
        assert entry["producer"] and entry["versions"] and entry["config"], artifact
        assert entry["flatbuffer"]["subgraphs"] and entry["litert_vs_framework"], artifact
        assert _truth(artifact), artifact


def test_the_fixtures_stay_small():
    assert sum(p.stat().st_size for p in LITERT.iterdir()) < 1_000_000


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_the_truth_holds_what_the_flatbuffer_declares(artifact):
    """Per call: the main subgraph's inputs (shapes as declared, -1 in the signature free) and outputs, the framework's
    and the interpreter's; nothing else."""
    tflite = pytest.importorskip("tflite")
    graph = tflite.Model.GetRootAsModel((LITERT / artifact).read_bytes(), 0).Subgraphs(0)
    inputs = {graph.Tensors(graph.Inputs(i)) for i in range(graph.InputsLength())}
    outputs = [graph.Tensors(graph.Outputs(i)).Name().decode() for i in range(graph.OutputsLength())]
    truth = _truth(artifact)
    expected = set()
    for call in _calls(artifact):
        for tensor in inputs:
            name = tensor.Name().decode()
            signature = tensor.ShapeSignatureAsNumpy() if tensor.ShapeSignatureLength() else tensor.ShapeAsNumpy()
            given = truth[call + name].shape
            assert len(given) == len(signature) and all(s in (-1, g) for s, g in zip(signature, given)), name
            expected.add(call + name)
        expected.update(call + name for name in outputs)
        expected.update(call + LITERT_OUTPUT + name for name in outputs)
    assert set(truth) == expected
    assert outputs == MANIFEST[artifact]["flatbuffer"]["outputs"]


def _interpreter(artifact: str, truth: dict[str, np.ndarray]):
    """A fresh interpreter, its inputs resized to the truth's."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    interpreter = litert.Interpreter(model_path=str(LITERT / artifact))
    for detail in interpreter.get_input_details():
        interpreter.resize_tensor_input(detail["index"], truth[detail["name"]].shape)
    interpreter.allocate_tensors()
    return interpreter


def _invoke(interpreter, truth: dict[str, np.ndarray], call: str = "") -> dict[str, np.ndarray]:
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], truth[call + detail["name"]])
    interpreter.invoke()
    return {d["name"]: interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()}


# The fused LSTM clips its cell state to its cell_clip (10), Keras does not: given an initial cell state that
# large, LiteRT's outputs (stored as litert:NAME) are not Keras's.
CELL_CLIPPED = {a for a in ARTIFACTS if "initial_state_scale" in MANIFEST[a]["config"]}


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_the_interpreter_reproduces_the_truth(artifact):
    """The framework's outputs within tolerance, call after call on one interpreter for a stateful case, and the
    interpreter's stored outputs (what it computed when the fixture was made)."""
    truth = _truth(artifact)
    interpreter = _interpreter(artifact, truth)
    for call in _calls(artifact):
        computed = _invoke(interpreter, truth, call)
        for name, value in computed.items():
            np.testing.assert_allclose(value, truth[call + LITERT_OUTPUT + name], **_own_tolerance(artifact))
            if artifact in CELL_CLIPPED:
                assert np.abs(value - truth[call + name]).max() > 1e-2
            else:
                np.testing.assert_allclose(value, truth[call + name], **_tolerance(artifact), err_msg=call + name)


def _fused(artifact: str) -> bool:
    return "UNIDIRECTIONAL_SEQUENCE_LSTM" in MANIFEST[artifact]["flatbuffer"]["subgraphs"]["0:main"]


FUSED_WITH_HIDDEN_STATES = [a for a in ARTIFACTS if _fused(a) and not MANIFEST[a]["config"]["initial_state"]]


@pytest.mark.parametrize("artifact", FUSED_WITH_HIDDEN_STATES)
def test_a_fused_lstm_starts_the_next_invoke_from_the_last_state_until_reset(artifact):
    """The fused op's states are variable tensors it overwrites: a second invoke() on the same inputs continues
    from the first one's final state (not Keras's stateless layer) until reset_all_variables() zeroes them."""
    truth = _truth(artifact)
    interpreter = _interpreter(artifact, truth)
    _invoke(interpreter, truth)
    second = _invoke(interpreter, truth)
    assert max(np.abs(value - truth[name]).max() for name, value in second.items()) > 1e-3
    interpreter.reset_all_variables()
    for name, value in _invoke(interpreter, truth).items():
        np.testing.assert_allclose(value, truth[name], **_tolerance(artifact))


@pytest.mark.parametrize("artifact", [a for a in ARTIFACTS if MANIFEST[a]["config"]["stateful"]])
def test_a_stateful_layer_keeps_its_state_through_reset_all_variables(artifact):
    """Keras's stateful=True becomes resource variables (VAR_HANDLE, set to zeros once by CALL_ONCE):
    reset_all_variables() leaves them alone, so a call after it continues from the last state."""
    truth = _truth(artifact)
    interpreter = _interpreter(artifact, truth)
    _invoke(interpreter, truth)
    interpreter.reset_all_variables()
    again = _invoke(interpreter, truth)
    assert max(np.abs(value - truth[name]).max() for name, value in again.items()) > 1e-3

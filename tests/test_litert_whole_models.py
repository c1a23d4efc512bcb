"""Real models written whole to LiteRT by the ONNX operator table's litert column: ``gatepack convert`` exits 0
with the whole model verified (onnxruntime against the written file on LiteRT's interpreter, streamed where the
model streams), and the written file, run here on ai-edge-litert's interpreter, gives onnxruntime's outputs for
the source on the same random inputs (the inputs the conversion holds as constants fed to the source only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from gatepack.cli import main

litert = pytest.importorskip("ai_edge_litert.interpreter")
ort = pytest.importorskip("onnxruntime")

REALMODELS = Path(__file__).resolve().parent.parent / "fixtures" / "realmodels"

# model -> (its --input-shape and --input-value options, whether it runs only in the full matrix)
CASES: dict[str, tuple[list[str], bool]] = {
    "gtcrn_stream_simple": ([], False),
    "silero_vad_openvino_16k_lstm": ([], False),
    "silero_vad_v4_lstm_in_if": (["--input-shape", "input=1,512", "--input-value", "sr=16000"], False),
    "dfn3_erb_dec": (
        ["--input-shape", "emb=1,2,512", "--input-shape", "e3=1,64,2,8", "--input-shape", "e2=1,64,2,8"]
        + ["--input-shape", "e1=1,64,2,16", "--input-shape", "e0=1,64,2,32"],
        False,
    ),
    "gtcrn_stream": ([], True),
    "ulunas_stream_simple": ([], True),
    "dfn3_enc": (["--input-shape", "feat_erb=1,1,2,32", "--input-shape", "feat_spec=1,2,2,96"], False),
    "dfn3_df_dec": (["--input-shape", "emb=1,2,512", "--input-shape", "c0=1,64,2,96"], False),
}


def _params() -> list:
    return [
        pytest.param(name, options, id=name, marks=[pytest.mark.matrix] if heavy else [])
        for name, (options, heavy) in CASES.items()
    ]


def _input_values(options: list[str]) -> dict[str, int]:
    pairs = [options[k + 1] for k, option in enumerate(options) if option == "--input-value"]
    return {name: int(value) for name, value in (pair.split("=") for pair in pairs)}


def _onnxruntime(src: Path, feed: dict[str, np.ndarray], held: dict[str, int]) -> dict[str, np.ndarray]:
    """The source on onnxruntime: ``feed`` as its inputs' types, the held inputs as the conversion holds them."""
    session = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
    given = {}
    for info in session.get_inputs():
        value = held[info.name] if info.name in held else feed[info.name]
        given[info.name] = np.asarray(value, types[info.type])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, given)))


def _litert(path: Path, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Random inputs for every input of the written file and its outputs on LiteRT's interpreter: invoked twice with
    the inputs set once, the second call giving the first one's outputs (no state carried between calls)."""
    interpreter = litert.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    feed = {}
    for detail in interpreter.get_input_details():
        value = (rng.standard_normal(detail["shape"]) * 0.5).astype(detail["dtype"])
        interpreter.set_tensor(detail["index"], value)
        feed[detail["name"]] = value
    calls = []
    for _ in range(2):
        interpreter.invoke()
        calls.append({d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()})
    for name, value in calls[0].items():
        np.testing.assert_array_equal(calls[1][name], value, err_msg=f"{name}: the second call differs")
    return feed, calls[0]


@pytest.mark.parametrize("name, options", _params())
def test_whole_model_converts_and_matches_onnxruntime(name, options, tmp_path):
    src, out = REALMODELS / f"{name}.onnx", tmp_path / f"{name}.tflite"
    result = CliRunner().invoke(main, ["convert", str(src), str(out), "--to", "litert", *options])
    assert result.exit_code == 0, result.output
    assert "(litert, whole model)" in result.output and "verification passed" in result.output, result.output
    feed, got = _litert(out, np.random.default_rng(7))
    want = _onnxruntime(src, feed, _input_values(options))
    names = [o.name for o in onnx.load(str(src), load_external_data=False).graph.output]
    assert sorted(got) == sorted(names)
    for output in names:
        assert got[output].shape == want[output].shape, output
        np.testing.assert_allclose(got[output], want[output], atol=1e-4, rtol=1e-3, err_msg=output)


@pytest.mark.parametrize(
    "sizes", [["--seq-length", "5"], ["--batch-size", "3"], ["--seq-length", "5", "--batch-size", "3"]]
)
def test_layer_sizes_given_for_a_whole_model_are_refused_not_ignored(sizes, tmp_path):
    """--seq-length/--batch-size size the layers LiteRT writes alone; a whole model takes its inputs' shapes. Before,
    they were dropped without a word and the file written at the model's own sizes (exit 0)."""
    out = tmp_path / "m.tflite"
    args = ["convert", str(REALMODELS / "dtln_model_1_lstm.onnx"), str(out), "--to", "litert", *sizes]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert all(flag in result.output for flag in sizes[::2]) and "--input-shape" in result.output
    assert not out.exists()
    layers_only = CliRunner().invoke(main, [*args, "--layers-only"])
    assert layers_only.exit_code == 0 and "layers only" in layers_only.output, layers_only.output


def test_layers_in_a_branch_the_shapes_do_not_take_are_reported_not_written(tmp_path):
    """silero VAD v4 at input=1,512: its If on the input's shape takes the branch of 2 LSTMs, and LiteRT's static file
    holds those alone. The other branch's 2 layers were reported as if written (the model finding 'exact', their
    sizes fixed by --batch-size); now each says it is not written, and the file read back holds the 2 taken."""
    import gatepack as gp

    src, out = REALMODELS / "silero_vad_v4_lstm_in_if.onnx", tmp_path / "v4.tflite"
    result = gp.convert(src, out, to="litert", input_shapes={"input": [1, 512]}, input_values={"sr": 16000})
    written = {layer.name for layer in gp.load(out).layers}
    assert len(written) == 2
    for name, findings in result.findings.items():
        model = next(f for f in findings if f.feature == "model")
        assert (model.status.value == "folded" and "not written" in model.detail) == (name not in written), name

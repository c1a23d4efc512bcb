"""``--quantize-weights int8`` (API ``quantize_weights=``, converters/weight_quantization.py): real float models'
recurrent W and R quantized per output channel, stored as int8 in the artifact, run by onnxruntime and judged by
the accuracy gate against the float source (over consecutive calls for a streaming model).

Oracles: the float source run by onnxruntime; the per-row symmetric scheme transcribed here from the source's own
initializers (scale = max |row| / 127, q = round(W / scale)); an independent float twin built here (the source's W
and R replaced by ``q * scale``) run by onnxruntime, which bounds the artifact's error against the source.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import artifact_name
from onnx import numpy_helper

import gatepack.converters as gp
import gatepack.converters.formats.onnx.qdq as onnx_qdq
from gatepack.converters import weight_quantization
from gatepack.converters.errors import RefusedError, UsageError, VerificationError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REAL = FIXTURES / "realmodels"
GRU = REAL / "burn_gru_bidirectional.onnx"  # opset 14, a GRU alone
SILERO = REAL / "silero_vad_openvino_16k_lstm.onnx"  # opset 16, a streaming LSTM model (state -> stateN)
DTLN = REAL / "dtln_model_1_lstm.onnx"  # opset 11: whole, its per-axis QDQ needs opset 13 (or the contrib one)


def _initializers(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _transcribed(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The per-row symmetric int8 scheme written out here: (integers, scale per row) of a [rows, cols] matrix."""
    scale = (np.abs(weights).max(axis=1) / 127).astype(np.float32)
    return np.clip(np.rint(weights / scale[:, None]), -127, 127).astype(np.int8), scale


def _weights_of(proto: onnx.ModelProto, op_type: str) -> tuple[str, str]:
    (node,) = [n for n in proto.graph.node if n.op_type == op_type]
    return node.input[1], node.input[2]


def _run(proto_or_path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    source = proto_or_path.SerializeToString() if isinstance(proto_or_path, onnx.ModelProto) else str(proto_or_path)
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_a_gru_is_written_with_int8_weights_as_transcribed_and_within_its_float_twin(tmp_path):
    out = tmp_path / "gru_int8.onnx"
    result = gp.convert(GRU, out, quantize_weights="int8")
    assert result.passed, result.to_text()
    source, written = onnx.load(str(GRU)), onnx.load(str(out))
    stored = _initializers(written)
    for role, name in zip(("W", "R"), _weights_of(source, "GRU")):
        floats = _initializers(source)[name]
        for d in range(floats.shape[0]):
            suffix = f"_d{d}" if floats.shape[0] > 1 else ""
            integers = [v for k, v in stored.items() if k.endswith(f".{role}_quantized{suffix}")]
            scales = [v for k, v in stored.items() if k.endswith(f".{role}_scale{suffix}")]
            assert len(integers) == 1 and integers[0].dtype == np.int8, sorted(stored)
            expected, scale = _transcribed(floats[d])
            np.testing.assert_array_equal(integers[0][0], expected)
            np.testing.assert_allclose(scales[0], scale, rtol=1e-6)
    assert {n.op_type for n in written.graph.node} >= {"DequantizeLinear", "GRU"}
    twin = onnx.load(str(GRU))
    for t in twin.graph.initializer:
        if t.name in _weights_of(source, "GRU"):
            floats = numpy_helper.to_array(t)
            view = np.stack([q.astype(np.float32) * scale[:, None] for q, scale in map(_transcribed, floats)])
            t.CopyFrom(numpy_helper.from_array(view.astype(np.float32), t.name))
    (x,) = [i for i in source.graph.input if i.name not in _initializers(source)]
    dims = [d.dim_value or 2 for d in x.type.tensor_type.shape.dim]
    feeds = {x.name: np.random.default_rng(3).standard_normal(dims).astype(np.float32)}
    artifact, float_twin, float_source = _run(out, feeds), _run(twin, feeds), _run(GRU, feeds)
    for a, t, s in zip(artifact, float_twin, float_source):
        np.testing.assert_allclose(a, t, atol=1e-6)
        assert np.abs(a - s).max() <= np.abs(t - s).max() + 1e-5
        assert np.abs(a - s).max() > 0  # quantized: not the float source
    (finding,) = [f for lay in result.findings.values() for f in lay if f.status.value == "lossy"]
    assert "8 bits per weight" in finding.detail and "2,304 -> 1,056 bytes" in finding.detail


def test_a_streaming_model_is_gated_over_consecutive_calls(tmp_path):
    out = tmp_path / "silero_int8.onnx"
    result = gp.convert(SILERO, out, quantize_weights="int8", frames=4)
    assert result.passed, result.to_text()
    streamed = [o for o in result.verification.outputs if o.output.startswith("stateN vs the float source")]
    assert any(o.layer == "streamed" for o in streamed), [(o.layer, o.output) for o in result.verification.outputs]
    assert result.verification.streaming is not None and result.verification.streaming.frames == 4
    integers = [v for k, v in _initializers(onnx.load(str(out))).items() if k.endswith("_quantized")]
    assert len(integers) == 2 and all(v.dtype == np.int8 for v in integers)


def test_a_perturbed_scale_fails_the_gate(tmp_path, monkeypatch):
    """The writer's scale off by 2%: the artifact leaves its int8 twin and the gate fails (exit 5), nothing written."""
    original = onnx_qdq.dequantize_nodes

    def perturbed(name, records, fresh, constant, **options):
        off = np.float32(1.02)
        wrong = [r.with_values(r.values, (r.scale * off).astype(np.float32), r.zero_point) for r in records]
        return original(name, wrong, fresh, constant, **options)

    monkeypatch.setattr(onnx_qdq, "dequantize_nodes", perturbed)
    with pytest.raises(VerificationError):
        gp.convert(GRU, tmp_path / "wrong.onnx", quantize_weights="int8")
    assert not (tmp_path / "wrong.onnx").exists()


def test_targets_that_hold_no_quantized_weights_are_refused_naming_onnx(tmp_path):
    with pytest.raises(RefusedError, match="bnns holds no quantized recurrent weights.*onnx or openvino or coreml"):
        gp.convert(GRU, tmp_path / "gru_bnns", to="bnns", quantize_weights="int8")
    with pytest.raises(RefusedError, match="opset 16 has no DequantizeLinear"):  # blocks: opset 21, no contrib form
        gp.convert(SILERO, tmp_path / "silero.onnx", quantize_weights="int8", quantize_block_size=16)


def test_a_refusal_s_hint_names_only_targets_that_hold_the_scheme_asked(tmp_path):
    """int4 is refused by LiteRT (int8 per gate matrix only) and by Core ML below iOS18: the way out the hint gives
    never names LiteRT (nor the refused target itself)."""
    with pytest.raises(RefusedError) as to_litert:
        gp.convert(GRU, tmp_path / "gru.tflite", quantize_weights="int4")
    assert "litert" not in (to_litert.value.hint or "") and "onnx or openvino or coreml" in (to_litert.value.hint or "")
    with pytest.raises(RefusedError) as below_ios18:
        gp.convert(GRU, tmp_path / "gru.mlpackage", quantize_weights="int4", minimum_deployment_target="iOS16")
    assert "litert" not in (below_ios18.value.hint or "") and "onnx or openvino" in (below_ios18.value.hint or "")
    with pytest.raises(RefusedError) as to_bnns:  # int8: every holder named, the refused target not
        gp.convert(GRU, tmp_path / "gru_bnns", to="bnns", quantize_weights="int8")
    assert "onnx or openvino or coreml or litert" in (to_bnns.value.hint or "")
    with pytest.raises(RefusedError) as int4_to_bnns:
        gp.convert(GRU, tmp_path / "gru4_bnns", to="bnns", quantize_weights="int4")
    assert "litert" not in str(int4_to_bnns.value) + (int4_to_bnns.value.hint or "")
    reported = gp.report(GRU, ["litert", "bnns"], quantize_weights="int4").quantized
    assert "litert" not in reported["bnns"].reason and "onnx or openvino or coreml" in reported["litert"].reason


def test_a_whole_model_below_opset_13_keeps_its_integers_through_onnxruntimes_contrib_dequantize_linear(tmp_path):
    """DTLN (opset 11, whose DequantizeLinear is per tensor only): the per-channel int8 weights go through
    com.microsoft::DequantizeLinear, as onnxruntime's quantizer writes them; onnxruntime runs it within the gate."""
    out = tmp_path / "dtln.onnx"
    result = gp.convert(DTLN, out, quantize_weights="int8")
    assert result.passed, result.to_text()
    written = onnx.load(str(out))
    assert {n.domain for n in written.graph.node if n.op_type == "DequantizeLinear"} == {"com.microsoft"}
    assert written.opset_import[0].version == 11
    assert any("onnxruntime only" in f.detail for fs in result.findings.values() for f in fs)


def test_bad_schemes_and_quantized_sources_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="int2"):
        gp.convert(GRU, tmp_path / "gru.onnx", quantize_weights="int2")
    quantized = tmp_path / "gru_int8.onnx"
    gp.convert(GRU, quantized, quantize_weights="int8")
    with pytest.raises(UsageError, match="holds quantized weights already"):
        gp.convert(quantized, tmp_path / "again.onnx", quantize_weights="int8")


def test_the_elementary_loop_holds_no_integers_so_it_is_refused_not_called_repacked(tmp_path):
    """--strategy decomposed writes a layer as a Loop of elementary operators reading float initializers: with
    --quantize-weights the integers would not be kept (the file held only float tensors while the finding said
    'repacked ... integer initializers, each through a DequantizeLinear'), so it is refused, exit 4."""
    out = tmp_path / "d.onnx"
    with pytest.raises(RefusedError, match="would not keep the integers.*elementary"):
        gp.convert(GRU, out, strategy="decomposed", quantize_weights="int8")
    assert not out.exists()
    assert gp.convert(GRU, out, strategy="decomposed").passed  # (float weights: the Loop itself is written)


def test_a_palettized_source_is_a_usage_error_not_an_internal_one(tmp_path):
    """A Core ML source whose W and R are lookup tables holds quantized weights already: --quantize-weights is a
    usage error naming the layer and its palettes (it raised SpecError, exit 1, from the layer's validation)."""
    source = FIXTURES / "producers" / "coreml_quantized" / "cml_lstm_palettized_ios18.mlpackage"
    with pytest.raises(UsageError, match="holds quantized weights already.*palette"):
        gp.convert(source, tmp_path / "p.onnx", quantize_weights="int8", layers_only=True)
    command = [sys.executable, "-m", "gatepack", "convert", str(source), str(tmp_path / "p.onnx")]
    done = subprocess.run([*command, "--quantize-weights", "int8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr


def test_cli_quantize_weights(tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "gatepack", "convert", str(GRU), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    done = cli("-o", str(tmp_path / "gru.onnx"), "--quantize-weights", "int8")
    assert done.returncode == 0, done.stderr
    assert "vs the float source" in done.stdout and "lossy quantization" in done.stdout
    refused = cli("-o", str(tmp_path / "gru_bnns"), "--to", "bnns", "--quantize-weights", "int8")
    assert refused.returncode == 4 and "onnx" in refused.stderr and "Traceback" not in refused.stderr
    assert cli("-o", str(tmp_path / "g.onnx"), "--quantize-weights", "int2").returncode == 2


GTCRN = REAL / "gtcrn_stream_simple.onnx"  # opset 11, 14 GRUs, a streaming model (three caches)


def _ir_constants(xml: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Each Const layer of the IR: name -> (element type, its bytes in the .bin as int8), read from the files."""
    import xml.etree.ElementTree as ElementTree

    blob = xml.with_suffix(".bin").read_bytes()
    found = {}
    for layer in ElementTree.parse(xml).getroot().iter("layer"):
        data = layer.find("data")
        if layer.get("type") == "Const" and data is not None:
            offset, size = int(data.get("offset")), int(data.get("size"))
            found[layer.get("name")] = (data.get("element_type"), np.frombuffer(blob[offset : offset + size], np.int8))
    return found


def test_gtcrn_to_openvino_holds_int8_in_the_bin_and_passes_the_gate_over_frames(tmp_path):
    out = tmp_path / "gtcrn_int8.xml"
    result = gp.convert(GTCRN, out, quantize_weights="int8", frames=3)
    assert result.passed, result.to_text()
    assert any(o.layer == "streamed" and "vs the float source" in o.output for o in result.verification.outputs)
    source = onnx.load(str(GTCRN))
    initial = _initializers(source)
    (node,) = [n for n in source.graph.node if n.name == "GRU_153"]
    stored = _ir_constants(out)
    for role, name in zip(("W", "R"), node.input[1:3]):
        element, data = stored[f"GRU_153/{role}/quantized"]
        assert element == "i8"
        expected = np.stack([_transcribed(w)[0] for w in initial[name]])  # ONNX's and OpenVINO's GRU: gates z, r, h
        np.testing.assert_array_equal(data, expected.ravel())
        assert stored[f"GRU_153/{role}/scale"][0] == "f32"
    read = gp.load(out)
    (layer,) = [lay for lay in read.layers if lay.name == "GRU_153"]
    np.testing.assert_array_equal(layer.directions[0].Wq.values, _transcribed(initial[node.input[1]][0])[0])
    assert layer.directions[0].Wq.granularity == "per channel"


def test_an_nncf_style_asymmetric_ir_reads_its_integers_exactly(tmp_path):
    """A GRUSequence whose W and R are u8 -> Convert(f32) -> Subtract(Convert(u8 zero point)) -> Multiply(scale),
    built here with OpenVINO's own ops: read back as records with the same integers, zero points and scales."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(5)
    h, i = 3, 2
    arrays = {}

    def compressed(role: str, cols: int):
        q = rng.integers(0, 256, (1, 3 * h, cols)).astype(np.uint8)
        zero = rng.integers(100, 156, (1, 3 * h, 1)).astype(np.uint8)
        scale = rng.uniform(0.001, 0.01, (1, 3 * h, 1)).astype(np.float32)
        arrays[role] = (q, zero, scale)
        steps = ops.subtract(ops.convert(ops.constant(q), "f32"), ops.convert(ops.constant(zero), "f32"))
        return ops.multiply(steps, ops.constant(scale))

    x = ops.parameter([1, 4, i], np.float32, name="X")
    h0 = ops.constant(np.zeros((1, 1, h), np.float32))
    lens = ops.constant(np.array([4], np.int64))
    b = ops.constant(np.zeros((1, 3 * h), np.float32))
    gru = ops.gru_sequence(x, h0, lens, compressed("W", i), compressed("R", h), b, h, "forward")
    gru.set_friendly_name("gru")
    model = ov.Model([gru.output(0), gru.output(1)], [x], "nncf_style")
    path = tmp_path / "nncf_style.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)
    (layer,) = gp.load(path).layers
    for role in ("W", "R"):
        record = getattr(layer.directions[0], f"{role}q")
        q, zero, scale = arrays[role]
        np.testing.assert_array_equal(record.values, q[0])
        np.testing.assert_array_equal(record.zero_point, zero[0, :, 0])
        np.testing.assert_array_equal(record.scale, scale[0, :, 0])
        assert record.values.dtype == np.uint8 and "zero point" in record.describe()


def test_a_stateful_ir_is_gated_over_its_calls_alone(tmp_path):
    """A stateful IR takes no state inputs: the gate compares it over consecutive calls only (with the int8 twin
    and the float source), where a single call fed random states could not be made."""
    result = gp.convert(GTCRN, tmp_path / "gtcrn_stateful.xml", quantize_weights="int8", stateful=True, frames=2)
    assert result.passed, result.to_text()
    outputs = result.verification.outputs
    assert outputs and all(o.layer == "streamed" for o in outputs)
    assert any("vs the float source" in o.output for o in outputs) and any("int8 twin" in o.output for o in outputs)


# ------------------------------------------------------------------ large weights: blocks, external data, memory


@pytest.mark.parametrize("bits, block, group", [(8, None, 1), (8, None, 5), (4, None, 1), (8, 12, 1), (4, 12, 5)])
def test_quantizing_in_row_blocks_gives_the_transcribed_integers(bits, block, group, monkeypatch):
    """Blocks of a few rows (the cache-sized buffer made small) against the whole-matrix transcription, one scale a
    row, a ``group`` of rows (LiteRT's per gate block) or a block of columns, int8 and int4; a group of zeros gets
    scale 1 and zeros."""
    monkeypatch.setattr(weight_quantization, "BLOCK_BYTES", 3 * 4 * 36)  # 3 rows of 36 columns a block
    weights = np.random.default_rng(5).standard_normal((50, 36)).astype(np.float32)
    weights[7] = 0
    record = weight_quantization.quantize_rows(weights, bits, block, group)
    high, width = 2 ** (bits - 1) - 1, block or 36
    cells = np.abs(weights).reshape(50 // group, group, 36 // width, width).max(axis=(1, 3))  # one per scale
    largest = np.repeat(np.repeat(cells, group, axis=0), width, axis=1)
    scale = np.where(largest > 0, largest / np.float32(high), np.float32(1)).astype(np.float32)
    np.testing.assert_array_equal(record.values, np.clip(np.rint(weights / scale), -high, high).astype(np.int8))
    np.testing.assert_array_equal(np.broadcast_to(record.broadcast(record.scale), (50, 36)), scale)
    assert record.bits == bits and (group > 1 or (scale[7] == 1).all())


@pytest.mark.parametrize("granularity", ["per tensor", "per channel", "per block"])
def test_the_float_view_computed_in_blocks_is_the_transcribed_product(granularity, monkeypatch):
    """``(values - zero_point) * scale`` written out here in float32 over the whole matrix, against the record's
    block-by-block view; ``is_dequantization`` knows its own view, an equal copy, and not a copy one element off
    (in the last block)."""
    from gatepack.schemas import quantized

    monkeypatch.setattr(quantized, "BLOCK_BYTES", 4 * 4 * 12)  # 4 rows of 12 columns a block
    rng = np.random.default_rng(6)
    values = rng.integers(0, 256, (30, 12)).astype(np.uint8)
    shape, axis, block = {"per tensor": ((), None, None), "per channel": ((30,), 0, None)}.get(
        granularity, ((30, 3), 1, 4)
    )
    scale = rng.uniform(1e-3, 1e-1, shape).astype(np.float32)
    zero = rng.integers(0, 256, shape).astype(np.uint8)
    record = quantized.QuantizedWeights(values, scale, zero, axis, block, 8, False)
    spread = {None: lambda a: np.full((30, 12), a), 0: lambda a: np.repeat(a[:, None], 12, 1)}.get(
        axis, lambda a: np.repeat(a, 4, 1)
    )
    expected = (values.astype(np.float32) - spread(zero).astype(np.float32)) * spread(scale).astype(np.float32)
    view = record.dequantized()
    np.testing.assert_array_equal(view, expected)
    np.testing.assert_array_equal(record.dequantized(np.float64), expected.astype(np.float64))
    assert record.is_dequantization(view) and record.is_dequantization(expected.copy())
    wrong = expected.copy()
    wrong[-1, -1] += np.float32(1)
    assert not record.is_dequantization(wrong)


@pytest.mark.parametrize("scheme, bits", [("int8", 8), ("int4", 4)])
def test_a_model_with_external_data_keeps_its_integers_there(scheme, bits, tmp_path):
    """A stacked model stored with external data, quantized to ONNX: the integers go to NAME.onnx.data with the
    floats they replace (not into the protobuf, which stops at 2 GiB; int4 packed two a byte as ONNX stores them),
    as transcribed, and run on onnxruntime."""
    from helpers import stacked_model

    src = tmp_path / "stack.onnx"
    stacked_model(src, 1, 256, "GRU")  # W and R of a direction: 768 x 256 integers = 196,608 values each
    out = tmp_path / f"stack_{scheme}.onnx"
    result = gp.convert(src, out, quantize_weights=scheme)
    assert result.passed, result.to_text()
    written = onnx.load(str(out), load_external_data=False)
    integers = [t for t in written.graph.initializer if "_quantized" in t.name]
    assert len(integers) == 4 and all(t.data_location == onnx.TensorProto.EXTERNAL for t in integers)
    kind = {8: onnx.TensorProto.INT8, 4: onnx.TensorProto.INT4}[bits]
    assert all(t.data_type == kind for t in integers)
    lengths = [int(next(e.value for e in t.external_data if e.key == "length")) for t in integers]
    assert lengths == [768 * 256 * bits // 8] * 2 + [768 * 256 * bits // 8] * 2
    assert out.stat().st_size < 64 << 10 and (tmp_path / f"stack_{scheme}.onnx.data").exists()
    stored = _initializers(onnx.load(str(out)))
    floats = _initializers(onnx.load(str(src)))["W0"][1]
    (name,) = [n for n in stored if n.endswith("W_quantized_d1")]
    high = 2 ** (bits - 1) - 1
    scale = (np.abs(floats).max(axis=1) / np.float32(high)).astype(np.float32)
    expected = np.clip(np.rint(floats / scale[:, None]), -high, high)
    np.testing.assert_array_equal(stored[name][0].astype(np.int8), expected.astype(np.int8))
    feeds = {"X": np.random.default_rng(2).uniform(-1, 1, (5, 2, 256)).astype(np.float32)}
    for got, want in zip(_run(out, feeds), _run(src, feeds)):
        assert 0 < np.abs(got - want).max() < (0.05 if bits == 8 else 0.5)


@pytest.mark.parametrize("target", weight_quantization.holders())
def test_writing_the_integers_never_makes_the_float_view(target, tmp_path, monkeypatch):
    """Unverified, a conversion writing the integers (to every target holding them) reads no float W or R
    (``FloatView``: made on first read, the weight's size in memory and its time); the view, once read, is the
    transcribed ``q * scale`` exactly."""
    from gatepack.schemas.quantized import FloatView

    made = []
    original = FloatView.make
    monkeypatch.setattr(FloatView, "make", lambda view: made.append(view) or original(view))
    out = tmp_path / artifact_name(target, "gru")
    result = gp.convert(GRU, out, to=target, quantize_weights="int8", verify=False)
    assert out.exists() and result.findings and not made
    layer = weight_quantization.quantized_model(gp.load(GRU), weight_quantization.Scheme("int8")).layers[0]
    source = gp.load(GRU).layers[0]
    for params, floats in zip(layer.directions, source.directions):
        integers, scale = _transcribed(np.asarray(floats.W))
        np.testing.assert_array_equal(params.W, integers.astype(np.float32) * scale[:, None])
    assert made  # read here, and only here


@pytest.mark.parametrize("target", weight_quantization.holders())
def test_a_verified_conversion_quantizes_each_weight_once(target, tmp_path, monkeypatch):
    """The accuracy gate's twin reuses the records the conversion wrote (``Gate.done``): each direction's W and R
    is quantized once, not again for the twin, and the twin computes on those very records."""
    calls = []
    original = weight_quantization.quantize_rows
    monkeypatch.setattr(
        weight_quantization, "quantize_rows", lambda *a, **k: calls.append(a[0].shape) or original(*a, **k)
    )
    result = gp.convert(GRU, tmp_path / artifact_name(target, "gru"), to=target, quantize_weights="int8")
    assert result.passed, result.to_text()
    directions = len(gp.load(GRU).layers[0].directions)
    assert len(calls) == 2 * directions, calls  # W and R per direction, once


def test_the_twin_takes_the_conversions_records_only_from_the_same_floats():
    """``quantized_model(..., done)`` reuses a quantized layer only when its float W and R are the very arrays of the
    layer quantized; a layer with other floats (here: a copy) is quantized on its own."""
    scheme = weight_quantization.Scheme("int8")
    model = gp.load(GRU)
    done = weight_quantization.quantized_model(model, scheme)
    pairs = tuple(zip(model.layers, done.layers))
    reused = weight_quantization.quantized_model(model, scheme, done=pairs).layers[0]
    assert all(a.Wq is b.Wq and a.Rq is b.Rq for a, b in zip(reused.directions, done.layers[0].directions))
    from dataclasses import replace

    copied = replace(model.layers[0], directions=tuple(replace(p, W=np.array(p.W)) for p in model.layers[0].directions))
    fresh = weight_quantization.quantized_model(replace(model, layers=[copied]), scheme, done=pairs).layers[0]
    for a, b in zip(fresh.directions, done.layers[0].directions):
        assert a.Wq is not b.Wq
        np.testing.assert_array_equal(a.Wq.values, b.Wq.values)


def test_a_specialised_input_reaches_the_gates_float_twin(tmp_path):
    """silero v4 with --input-value sr=16000: the gate's twin is made of the source specialised as the artifact
    is, and takes no sr either (an earlier twin, the source file rewritten, took sr and was once fed without it:
    'twin.onnx: missing input(s) ['sr']', exit 3); the float source is fed sr; the artifact, which holds sr as a
    constant, passes the gate."""
    source = REAL / "silero_vad_v4_lstm_in_if.onnx"
    result = gp.convert(
        source,
        tmp_path / "v4.onnx",
        quantize_weights="int8",
        input_shapes={"input": (1, 512)},
        input_values={"sr": 16000},
    )
    assert result.passed, result.to_text()
    assert "sr" not in [i.name for i in onnx.load(str(tmp_path / "v4.onnx")).graph.input]


def test_the_lifted_layers_of_a_whole_coreml_model_hold_their_integers(tmp_path):
    """DTLN model 2 (lifted single-step LSTMs) to Core ML: the whole-model translation read its layers again from the
    source rewritten in place, which holds their weights as floats, so the package held float LSTM weights (no
    constexpr op, 2.55 MB against 1.58 MB) while reporting 'lossy: quantization', and the gate, whose twin runs the
    dequantized weights in float, passed it. Now each LSTM's W and R are int8 constexpr ops (coremltools' reading)."""
    pytest.importorskip("coremltools")
    import coremltools as ct

    out = tmp_path / "d.mlpackage"
    result = gp.convert(REAL / "dtln_model_2_unrolled_lstm.onnx", out, quantize_weights="int8", frames=4)
    assert result.passed, result.to_text()
    spec = ct.models.MLModel(str(out), skip_model_load=True).get_spec()
    ops = [
        op.type
        for f in spec.mlProgram.functions.values()
        for b in f.block_specializations.values()
        for op in b.operations
    ]
    assert ops.count("lstm") == 2 and ops.count("constexpr_affine_dequantize") == 4


def test_the_lifted_layers_of_a_whole_onnx_model_hold_their_integers(tmp_path):
    """DTLN model 2 to ONNX: a lifted region was replaced by an LSTM node of float weights whatever the layer held
    (2.51 MB, as the source, while reporting 'lossy: quantization'). Now its W and R are int8 initializers read by
    DequantizeLinear, as a node layer's are, and the file is 1.54 MB."""
    out = tmp_path / "d.onnx"
    result = gp.convert(REAL / "dtln_model_2_unrolled_lstm.onnx", out, quantize_weights="int8", frames=4)
    assert result.passed, result.to_text()
    proto = onnx.load(str(out))
    lstm = [node for node in proto.graph.node if node.op_type == "LSTM"]
    dequantized = {n.output[0]: n.input[0] for n in proto.graph.node if n.op_type == "DequantizeLinear"}
    integers = {
        t.name: numpy_helper.to_array(t) for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT8
    }
    assert len(lstm) == 2 and all(dequantized.get(node.input[k]) in integers for node in lstm for k in (1, 2))
    assert out.stat().st_size < 0.65 * (REAL / "dtln_model_2_unrolled_lstm.onnx").stat().st_size

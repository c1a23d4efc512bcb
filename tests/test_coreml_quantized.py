"""Core ML packages whose recurrent weights coremltools.optimize compressed, read into exact quantized records and
written from them (docs/conventions.md §5c).

Oracles: coremltools' own decompression of every constexpr op and the stored integers, committed with torch's float
outputs (fixtures/producers/coreml_quantized, made by coremltools 9.0); the package specification and weight file
read with coremltools' protobuf classes and blob reader, not gatepack's; onnxruntime running the integers gatepack
moves into ONNX; the gate orders transcribed here from the formats' documentation (torch r, z, n and Core ML's lstm
i, f, o, z against ONNX's z, r, h and i, o, f, c).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gatepack.converters as gp
from gatepack.converters.errors import RefusedError

pytestmark = pytest.mark.coreml_proof
HERE = Path(__file__).resolve().parent.parent / "fixtures" / "producers" / "coreml_quantized"
MANIFEST = json.loads((HERE / "manifest.json").read_text())
HELD = [
    "cml_gru_int8_channel_ios16.mlpackage",
    "cml_lstm_bidirectional_uint8_tensor_ios16.mlpackage",
    "cml_gru_int4_block_ios18.mlpackage",
    "cml_lstm_int8_channel_offset_ios18.mlpackage",
]
UNHELD = {
    "cml_lstm_palettized_ios18.mlpackage": "constexpr_lut_to_dense",
    "cml_gru_int8_channel_fp16_ios16.mlpackage": "float16 scale",
}
GRANULARITY = {
    "cml_gru_int8_channel_ios16.mlpackage": ("int8 per channel, symmetric", 8),
    "cml_lstm_bidirectional_uint8_tensor_ios16.mlpackage": ("uint8 per tensor", 8),
    "cml_gru_int4_block_ios18.mlpackage": ("int4 per block of 4, symmetric", 4),
    "cml_lstm_int8_channel_offset_ios18.mlpackage": ("int8 per channel, zero point", 8),
}
# the torch GRU's loop: linear ops of X in program order hold torch's r, z, n blocks; ONNX's W is z, r, h
GRU_LINEARS = {"W": ("linear_8", "linear_6", "linear_10"), "R": ("linear_9", "linear_7", "linear_11")}
LSTM_TO_ONNX = (0, 2, 1, 3)  # Core ML i, f, o, z -> ONNX i, o, f, c (row blocks of H)


def _truth(package: str) -> dict[str, np.ndarray]:
    return dict(np.load(HERE / package.replace(".mlpackage", ".truth.npz")))


def _spec(package: Path):
    """The package's specification, parsed with coremltools' protobuf classes."""
    from gatepack.converters.formats.coreml.registration import coremltools

    coremltools()
    from coremltools.proto import Model_pb2

    manifest = json.loads((package / "Manifest.json").read_text())
    entry = manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]
    spec = Model_pb2.Model()
    spec.ParseFromString((package / "Data" / entry["path"]).read_bytes())
    return spec


def _operations(block) -> list:
    """The block's operations, each followed by those of the blocks it holds."""
    return [o for op in block.operations for o in (op, *[i for inner in op.blocks for i in _operations(inner)])]


def _main_ops(package: Path) -> list:
    spec = _spec(package)
    return _operations(spec.mlProgram.functions["main"].block_specializations[spec.mlProgram.functions["main"].opset])


def _argument(op, name: str) -> str:
    return op.inputs[name].arguments[0].name


def _blocks(array: np.ndarray, order, hidden: int) -> np.ndarray:
    return np.concatenate([array[g * hidden : (g + 1) * hidden] for g in order])


def _expected(package: str, truth: dict, key: str) -> list[dict[str, np.ndarray]]:
    """Per direction, W and R in ONNX's gate order from the truth's arrays ``key`` ('deq' or 'q')."""
    if "gru" in package:
        return [{role: np.concatenate([truth[f"{key}/{n}_weight_0_quantized"] for n in names])
                 for role, names in GRU_LINEARS.items()}]  # fmt: skip
    (lstm,) = [op for op in _main_ops(HERE / package) if op.type == "lstm"]
    suffixes = ("", "_back") if "weight_ih_back" in lstm.inputs else ("",)
    return [
        {role: _blocks(truth[f"{key}/{_argument(lstm, name + s)}"], LSTM_TO_ONNX, 16)
         for role, name in (("W", "weight_ih"), ("R", "weight_hh"))}
        for s in suffixes
    ]  # fmt: skip


def test_the_manifest_lists_every_fixture_with_its_truth():
    assert {p.name for p in HERE.glob("*.mlpackage")} == set(MANIFEST) == set(HELD) | set(UNHELD)
    for package in MANIFEST:
        truth = _truth(package)
        assert "x" in truth and any(k.startswith("deq/") for k in truth)


@pytest.mark.parametrize("package", sorted(MANIFEST))
def test_the_interpreter_decompresses_every_constexpr_op_as_coremltools_does(package):
    """Bit for bit and in the same type as coremltools' own ``materialized_val_inference`` (before saving)."""
    from gatepack.converters.formats.coreml.common import _ops
    from gatepack.converters.formats.coreml.mil_constexpr import decompressed
    from gatepack.converters.formats.coreml.package import _load_program

    truth = _truth(package)
    function, _ = _load_program(HERE / package)
    ops = [op for op in _ops(function) if op.op_type.startswith("constexpr_")]
    assert {f"deq/{op.name}" for op in ops} == {k for k in truth if k.startswith("deq/")}
    for op in ops:
        got, expected = decompressed(op), truth[f"deq/{op.name}"]
        assert got.dtype == expected.dtype and np.array_equal(got, expected), op.name


@pytest.mark.parametrize("package", HELD)
def test_affine_and_blockwise_weights_are_read_as_their_stored_integers(package):
    """W and R: the stored integers in ONNX's gate order, their float view coremltools' decompression exactly, with
    the granularity, bits and zero points coremltools wrote."""
    truth = _truth(package)
    (layer,) = gp.load(HERE / package).layers
    words, bits = GRANULARITY[package]
    assert layer.is_quantized and words in layer.quantization_summary()
    for params, floats, integers in zip(
        layer.directions, _expected(package, truth, "deq"), _expected(package, truth, "q")
    ):
        for role in ("W", "R"):
            record = params.quantized(role)
            assert record is not None and record.bits == bits
            np.testing.assert_array_equal(getattr(params, role), floats[role])
            np.testing.assert_array_equal(record.values, integers[role])
            np.testing.assert_array_equal(record.dequantized(), floats[role])


@pytest.mark.parametrize("package", sorted(MANIFEST))
def test_the_packages_run_on_the_interpreter_near_torch(package):
    """The compressed package on gatepack's MIL interpreter against torch's float outputs: the weights' quantization
    error only (int8 < 5e-3, 4 bits < 5e-2), so the decompression and the ops around it are right."""
    from gatepack.converters.formats.coreml.running import run_numpy

    truth = _truth(package)
    outputs = run_numpy(HERE / package, {"x": truth["x"]})
    bound = 5e-2 if "int4" in package or "palettized" in package else 5e-3
    for k, name in enumerate(MANIFEST[package]["outputs"]):
        error = np.abs(outputs[name].astype(np.float32) - truth[f"out{k}"]).max()
        assert 0 < error < bound, (name, error)


@pytest.mark.parametrize("package", HELD[:2] + HELD[3:])
def test_the_integers_move_to_onnx_and_onnxruntime_agrees(package, tmp_path):
    """Core ML -> ONNX keeps the integers (QDQ); verification runs the package on the interpreter against
    onnxruntime on the written file."""
    result = gp.convert(HERE / package, tmp_path / "out.onnx", layers_only=True)
    assert result.verification.passed
    inits = [numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "out.onnx")).graph.initializer]
    assert any(a.dtype in (np.int8, np.uint8) and a.size >= 8 * 48 for a in inits)


@pytest.mark.parametrize("package, form", sorted(UNHELD.items()))
def test_forms_without_a_record_are_refused_by_name_unless_dequantize(package, form, tmp_path):
    with pytest.raises(RefusedError, match=form) as refused:
        gp.convert(HERE / package, tmp_path / "out.onnx", layers_only=True)
    assert "--dequantize" in refused.value.one_line()
    (layer,) = gp.load(HERE / package).layers
    assert not layer.is_quantized
    result = gp.convert(HERE / package, tmp_path / "out.onnx", layers_only=True, dequantize=True)
    assert result.verification.passed


# ----------------------------------------------------------------------------------------------- writing


def _parameter(op, name: str, consts: dict):
    """An op's parameter as a protobuf Value: an attribute (iOS16's constexpr ops), an input's immediate value, or
    the value of the const op it names."""
    if name in op.attributes:
        return op.attributes[name]
    argument = op.inputs[name].arguments[0]
    return consts[argument.name].attributes["val"] if argument.name else argument.value


def _quantized_ops(package: Path) -> list[tuple[str, np.ndarray, str]]:
    """(op type, integers, their type) of every constexpr op in the package, the integers read from its weight file
    with coremltools' blob reader (so: stored there as integers)."""
    from coremltools.libmilstoragepython import _BlobStorageReader
    from coremltools.proto import MIL_pb2

    ops = _main_ops(package)
    consts = {op.outputs[0].name: op for op in ops if op.type == "const"}
    reader = _BlobStorageReader(str(package / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"))
    found = []
    for op in ops:
        if not op.type.startswith("constexpr_"):
            continue
        value = _parameter(op, "quantized_data" if op.type.endswith("affine_dequantize") else "data", consts)
        assert value.WhichOneof("value") == "blobFileValue"  # in the weight file, not inline
        kind = MIL_pb2.DataType.Name(value.type.tensorType.dataType)
        shape = [d.constant.size for d in value.type.tensorType.dimensions]
        read = {"INT8": reader.read_int8_data, "UINT8": reader.read_uint8_data}[kind]
        found.append((op.type, np.asarray(read(value.blobFileValue.offset)).reshape(shape), kind))
    return found


def _symmetric_int8(weights: np.ndarray) -> np.ndarray:
    """Per row: round(w / (max |w| / 127)) (the scheme docs/reference.md gives for --quantize-weights int8)."""
    scale = np.abs(weights).max(axis=1, keepdims=True) / np.float32(127)
    return np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)


SOURCES = Path(__file__).resolve().parent.parent / "fixtures" / "producers"


@pytest.mark.parametrize(
    "source, target, op_type, order",
    [
        ("torch_legacy_lstm.onnx", "iOS16", "constexpr_affine_dequantize", LSTM_TO_ONNX),  # native lstm op
        ("torch_legacy_gru.onnx", "iOS18", "constexpr_blockwise_shift_scale", None),  # the decomposed cell
    ],
)
def test_quantize_weights_int8_stores_int8_in_the_weight_file(source, target, op_type, order, tmp_path):
    """--quantize-weights int8 --to coreml: the package's weight file holds W and R as int8 (coremltools' blob reader),
    the integers the scheme gives for the source's floats (in the op's gate order), and the package is proven against
    its int8 twin and measured against the float source."""
    out = tmp_path / "q.mlpackage"
    result = gp.convert(SOURCES / source, out, quantize_weights="int8", minimum_deployment_target=target)
    assert result.verification.passed
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(SOURCES / source)).graph.initializer}
    node = next(n for n in onnx.load(str(SOURCES / source)).graph.node if n.op_type in ("GRU", "LSTM"))
    stored = _quantized_ops(out)
    assert {op for op, _, _ in stored} == {op_type} and {kind for _, _, kind in stored} == {"INT8"}
    hidden = inits[node.input[2]].shape[-1]
    for role, at in (("W", 1), ("R", 2)):
        rows = _symmetric_int8(inits[node.input[at]][0])
        expected = _blocks(rows, order, hidden) if order else rows
        assert any(np.array_equal(values, expected) for _, values, _ in stored), role


# ----------------------------------------------------------------------------------------------- lookup tables

PALETTIZED = "cml_lstm_palettized_ios18.mlpackage"


def _coremltools_program(package: Path):
    """The package's program as coremltools loads it (its own milproto reader and weight-file reader)."""
    from gatepack.converters.formats.coreml.registration import coremltools

    ct = coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load

    model = ct.models.MLModel(str(package), skip_model_load=True)
    spec = model.get_spec()
    return load(spec, specification_version=spec.specificationVersion, file_weights_dir=model.weights_dir)


def _tables(package: Path) -> dict[str, tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Per lstm weight input the constexpr_lut_to_dense op computing it: (its opset's form, indices, lut, the dense
    weight by coremltools' own ``materialized_val_inference``)."""
    function = _coremltools_program(package).functions["main"]
    (lstm,) = [op for op in function.operations if op.op_type == "lstm"]
    found = {}
    for key in ("weight_ih", "weight_hh"):
        op = lstm.inputs[key].op
        assert op.op_type == "constexpr_lut_to_dense", (key, op.op_type)
        form = "iOS16" if "shape" in op.inputs else "iOS18"
        found[key] = (form, op.inputs["indices"].val, op.inputs["lut"].val, op.materialized_val_inference())
    return found


def test_a_palettized_lstm_is_read_as_its_lookup_tables():
    """W and R: the indices and the 4-bit palette coremltools wrote (rows in ONNX's gate order), their values
    coremltools' decompression exactly."""
    truth = _truth(PALETTIZED)
    (layer,) = gp.load(HERE / PALETTIZED).layers
    assert layer.is_palettized and not layer.is_quantized
    assert (
        layer.palettization_summary()
        == "W 4-bit palette per tensor (16 entries); R 4-bit palette per tensor (16 entries)"
    )
    tables = _tables(HERE / PALETTIZED)
    (params,) = layer.directions
    for role, key in (("W", "weight_ih"), ("R", "weight_hh")):
        record = params.palettized(role)
        _, indices, lut, _ = tables[key]
        assert record is not None and record.bits == 4
        np.testing.assert_array_equal(record.indices, _blocks(indices, LSTM_TO_ONNX, 16))
        np.testing.assert_array_equal(record.grouped(), lut[..., 0])
        np.testing.assert_array_equal(getattr(params, role), _expected(PALETTIZED, truth, "deq")[0][role])


@pytest.mark.parametrize("target", [None, "iOS18"])
def test_the_palettized_lstm_to_coreml_keeps_its_lookup_tables(target, tmp_path):
    """Core ML -> Core ML: ``repacked``; the written lstm op's weights are constexpr_lut_to_dense ops (iOS16's packed
    form at the default target, iOS18's as the source holds it), whose indices and palette are the source's bit for
    bit (read with coremltools), and the package runs on the interpreter as the source does, near torch."""
    from gatepack.converters.formats.coreml.running import run_numpy

    out = tmp_path / "out.mlpackage"
    options = {"minimum_deployment_target": target} if target else {}
    result = gp.convert(HERE / PALETTIZED, out, layers_only=True, **options)
    assert result.passed, result.to_text()
    (found,) = [f for fs in result.findings.values() for f in fs if f.feature == "quantization"]
    assert found.status.value == "repacked" and "constexpr_lut_to_dense" in found.detail
    source, written = _tables(HERE / PALETTIZED), _tables(out)
    for key, (_, indices, lut, dense) in source.items():
        form, got_indices, got_lut, got_dense = written[key]
        assert form == (target or "iOS16")
        assert got_lut.dtype == lut.dtype and np.array_equal(got_lut.reshape(-1), lut.reshape(-1))
        if form == "iOS18":
            np.testing.assert_array_equal(got_indices, indices)
        np.testing.assert_array_equal(got_dense, dense)  # coremltools' own decompression of each
    truth = _truth(PALETTIZED)
    (layer,) = gp.load(out).layers
    feed = {"x": truth["x"]}
    expected = run_numpy(HERE / PALETTIZED, feed)
    zeros = np.zeros((1, truth["x"].shape[1], 16), np.float32)  # the source's own initial states (zero consts)
    got = run_numpy(out, {**feed, **{getattr(layer.interface, r): zeros for r in ("initial_h", "initial_c")}})
    for name, role in zip(MANIFEST[PALETTIZED]["outputs"], ("y", "y_h", "y_c")):
        written_name = getattr(layer.interface, role)
        assert written_name in got, (written_name, sorted(got))
        np.testing.assert_allclose(got[written_name].reshape(expected[name].shape), expected[name], atol=1e-6)


def test_the_palettized_lstm_to_onnx_takes_the_palette_values_with_dequantize(tmp_path):
    """Refused without --dequantize (the form named, coreml offered); with it the ONNX LSTM's W and R are the palette
    values, exactly, and verification passes."""
    with pytest.raises(RefusedError, match="constexpr_lut_to_dense.*only with --dequantize") as refused:
        gp.convert(HERE / PALETTIZED, tmp_path / "out.onnx", layers_only=True)
    assert "convert to coreml" in refused.value.one_line()
    result = gp.convert(HERE / PALETTIZED, tmp_path / "out.onnx", layers_only=True, dequantize=True)
    assert result.passed
    proto = onnx.load(str(tmp_path / "out.onnx"))
    (node,) = [n for n in proto.graph.node if n.op_type == "LSTM"]
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    expected = _expected(PALETTIZED, _truth(PALETTIZED), "deq")[0]
    np.testing.assert_array_equal(inits[node.input[1]][0], expected["W"])
    np.testing.assert_array_equal(inits[node.input[2]][0], expected["R"])


@pytest.mark.parametrize("kind", ["uint1", "uint2", "uint3", "uint4", "uint6", "int4"])
def test_sub_byte_blobs_are_what_coremltools_blob_writer_writes(kind, tmp_path):
    """gatepack's weight file packs sub-byte integers byte for byte as coremltools' own (C++) BlobWriter does."""
    from gatepack.converters.formats.coreml.blob import SUB_BYTE_TYPES, BlobFile
    from gatepack.converters.formats.coreml.registration import coremltools

    coremltools()
    from coremltools.libmilstoragepython import _BlobStorageWriter

    bits = SUB_BYTE_TYPES[kind][1]
    rng = np.random.default_rng(bits)
    signed = kind.startswith("int")
    values = [
        rng.integers(-(2 ** (bits - 1)) if signed else 0, 2 ** (bits - 1) if signed else 2**bits, n).astype(
            np.int8 if signed else np.uint8
        )
        for n in (5, 64, 13)
    ]
    ours = tmp_path / "ours.bin"
    with BlobFile(ours) as blob:
        offsets = [blob.append(v, kind) for v in values]
    writer = _BlobStorageWriter(str(tmp_path / "theirs.bin"))
    theirs = [getattr(writer, f"write_{kind}_data")(np.ascontiguousarray(v)) for v in values]
    del writer
    assert offsets == theirs
    assert ours.read_bytes() == (tmp_path / "theirs.bin").read_bytes()

"""Core ML packages whose weight file gatepack writes itself (``coreml.blob``, ``coreml.export``), checked against
coremltools as the oracle: its own blob writer and reader on the same arrays, its ``ct.convert`` on the same
programs (the way gatepack saved packages before), its package and program loaders reading every weight back, and
the source's own arrays."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import FIXTURES, stacked_model

import gatepack as gp

pytest.importorskip("coremltools")

from gatepack.converters.formats.coreml import saving  # noqa: E402
from gatepack.converters.formats.coreml.blob import BlobFile  # noqa: E402
from gatepack.converters.formats.coreml.common import FP16_PASSES, METADATA_KEY, _ct, _quiet  # noqa: E402

REALMODELS = FIXTURES / "realmodels"
BLOB_DTYPES = {  # NumPy type -> (coremltools' blob writer's method, its reader's)
    np.float32: ("write_float_data", "read_float_data"),
    np.float16: ("write_fp16_data", "read_fp16_data"),
    np.int8: ("write_int8_data", "read_int8_data"),
    np.uint8: ("write_uint8_data", "read_uint8_data"),
    np.int16: ("write_int16_data", "read_int16_data"),
    np.uint16: ("write_uint16_data", "read_uint16_data"),
    np.int32: ("write_int32_data", "read_int32_data"),
    np.uint32: ("write_uint32_data", "read_uint32_data"),
}


def _arrays() -> list[np.ndarray]:
    """Every element type, sizes that leave every remainder modulo 64 bytes, and arrays that are not contiguous
    (a transposed matrix, a strided vector, a slab boundary inside a large transposed matrix)."""
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(n).astype(t) for n, t in [(10, np.float32), (33, np.float16), (64, np.float32)]]
    arrays += [rng.integers(-100, 100, n).astype(t) for n, t in [(17, np.int8), (11, np.int16), (13, np.int32)]]
    arrays += [rng.integers(0, 200, n).astype(t) for n, t in [(65, np.uint8), (12, np.uint16), (19, np.uint32)]]
    arrays += [rng.standard_normal((40, 30), dtype=np.float32).T, rng.standard_normal(90, dtype=np.float32)[::3]]
    arrays.append(rng.standard_normal((3000, 700), dtype=np.float32).T)  # 8.4 MB: two slabs
    return arrays


def test_the_weight_file_is_coremltools_blob_writers_byte_for_byte_and_reads_back_bitwise(tmp_path):
    _ct()
    from coremltools.libmilstoragepython import _BlobStorageReader, _BlobStorageWriter

    arrays = _arrays()
    with BlobFile(tmp_path / "ours.bin") as ours:
        offsets = [ours.append(a) for a in arrays]
    writer = _BlobStorageWriter(str(tmp_path / "theirs.bin"))
    for a, offset in zip(arrays, offsets):
        flat = np.ascontiguousarray(a.reshape(-1))  # as coremltools' exporter hands its writer each constant
        written = getattr(writer, BLOB_DTYPES[a.dtype.type][0])(flat.view(np.uint16) if a.dtype == np.float16 else flat)
        assert written == offset
    del writer  # (its file is complete once it is released)
    assert (tmp_path / "ours.bin").read_bytes() == (tmp_path / "theirs.bin").read_bytes()
    reader = _BlobStorageReader(str(tmp_path / "ours.bin"))
    for a, offset in zip(arrays, offsets):
        back = np.asarray(getattr(reader, BLOB_DTYPES[a.dtype.type][1])(offset))
        assert back.tobytes() == np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("mil_type", ["int4", "uint1", "uint2", "uint3", "uint4", "uint6"])
@pytest.mark.parametrize("count", [13, 64, 2_200_003])  # a partial last byte; whole bytes; over one packing slab
def test_sub_byte_blobs_are_coremltools_blob_writers_byte_for_byte_and_read_back(mil_type, count, tmp_path):
    """int4 and uint1..uint6 constants (held in int8 or uint8 arrays) packed as coremltools' writer packs them,
    with the padding bits of the last byte in the metadata, and read back by its reader."""
    _ct()
    from coremltools.libmilstoragepython import _BlobStorageReader, _BlobStorageWriter

    bits = int(mil_type.lstrip("uint"))
    rng = np.random.default_rng(count)
    if mil_type == "int4":
        values = rng.integers(-8, 8, count).astype(np.int8)
    else:
        values = rng.integers(0, 1 << bits, count).astype(np.uint8)
    with BlobFile(tmp_path / "ours.bin") as ours:
        offsets = [ours.append(values, mil_type), ours.append(values[::-1].copy(), mil_type)]
    writer = _BlobStorageWriter(str(tmp_path / "theirs.bin"))
    assert [getattr(writer, f"write_{mil_type}_data")(v) for v in (values, values[::-1].copy())] == offsets
    del writer
    assert (tmp_path / "ours.bin").read_bytes() == (tmp_path / "theirs.bin").read_bytes()
    back = np.asarray(getattr(_BlobStorageReader(str(tmp_path / "ours.bin")), f"read_{mil_type}_data")(offsets[0]))
    assert np.array_equal(back.astype(np.int64), values.astype(np.int64))


def test_an_element_type_the_format_lacks_is_refused(tmp_path):
    with BlobFile(tmp_path / "w.bin") as blobs, pytest.raises(TypeError, match="float64"):
        blobs.append(np.zeros(12))
    assert not (tmp_path / "w.bin").exists()  # nothing written before the first blob


def _coremltools_saved(program, described, path, target, compress_to_fp16=False, carry=None):
    """The oracle: the package ``ct.convert`` makes of the program, with gatepack's metadata, as gatepack saved
    packages before it wrote the weight file itself."""
    from gatepack.converters.formats.coreml.whole import carry_metadata

    ct = _ct()
    described["precision"] = "fp16" if compress_to_fp16 else "fp32"
    converted = path.parent / "converted.mlpackage"  # (coremltools wants the extension)
    with _quiet():
        mlmodel = ct.convert(
            program,
            source="milinternal",
            convert_to="mlprogram",
            minimum_deployment_target=getattr(ct.target, target),
            compute_precision=ct.precision.FLOAT16 if compress_to_fp16 else ct.precision.FLOAT32,
            pass_pipeline=ct.PassPipeline(pass_names=FP16_PASSES) if compress_to_fp16 else ct.PassPipeline.EMPTY,
            package_dir=str(converted),
        )
    spec = mlmodel.get_spec()
    spec.description.metadata.userDefined[METADATA_KEY] = json.dumps(described)
    spec.description.metadata.shortDescription = "recurrent layers written by gatepack"
    if described.get("whole") and carry is not None:
        carry_metadata(carry, spec.description.metadata)
    _files(converted)[0].write_bytes(spec.SerializeToString())
    converted.rename(path)


def _files(package: Path) -> tuple[Path, Path, dict]:
    """The specification file, the weight file and the manifest's items (name -> (author, path, description))."""
    manifest = json.loads((package / "Manifest.json").read_text())
    items = manifest["itemInfoEntries"]
    root = package / "Data" / items[manifest["rootModelIdentifier"]]["path"]
    described = {i["name"]: (i["author"], i["path"], i["description"]) for i in items.values()}
    return root, package / "Data" / described["weights"][1] / "weight.bin", described


def _spec(path: Path):
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    spec.ParseFromString(path.read_bytes())
    spec.description.metadata.userDefined.pop("com.github.apple.coremltools.conversion_date")  # (a run at midnight)
    return spec


def _small_stack(tmp_path: Path) -> Path:
    source = tmp_path / "stack" / "stack.onnx"
    source.parent.mkdir()
    stacked_model(source, 2, 16)
    return source


def _forget_builds() -> None:
    """As in a fresh process: the MIL builder's name counters at zero, no whole-model translation remembered."""
    _ct()
    from coremltools.converters.mil.converter import _reset_conversion_state

    from gatepack.converters.formats.coreml import whole
    from gatepack.converters.operators import whole as shared

    _reset_conversion_state()
    shared._VERDICTS.clear()
    whole._KEPT.clear()


CASES = {
    "layers fp32": (FIXTURES / "gru_lbr0.onnx", {}),
    "layers fp16": (FIXTURES / "gru_lbr1_bidirectional.onnx", {"compress_to_fp16": True, "allow_lossy": True}),
    "layers native": (FIXTURES / "gru_lbr0.onnx", {"strategy": "native"}),
    "whole fp32": ("stack", {}),
    "whole fp16": ("stack", {"compress_to_fp16": True, "minimum_deployment_target": "iOS18", "allow_lossy": True}),
    "real model": (REALMODELS / "gtcrn_stream_simple.onnx", {}),
    "stateful": (REALMODELS / "gtcrn_stream_simple.onnx", {"stateful": True, "frames": 2, "allow_lossy": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_package_is_what_coremltools_conversion_makes_of_the_same_program(case, tmp_path, monkeypatch):
    """The same program (built afresh each time: the builder's name counters reset, no translation remembered)
    saved by gatepack and by ``ct.convert``: the same specification (as a message: coremltools' own byte order of
    map entries varies between processes), the same weight file byte for byte, the same package items."""
    source, options = CASES[case]
    source = _small_stack(tmp_path) if source == "stack" else source
    _forget_builds()
    gp.convert(source, tmp_path / "ours.mlpackage", to="coreml", verify=False, **options)
    monkeypatch.setattr(saving, "save_package", _coremltools_saved)
    _forget_builds()
    gp.convert(source, tmp_path / "theirs.mlpackage", to="coreml", verify=False, **options)
    ours, theirs = _files(tmp_path / "ours.mlpackage"), _files(tmp_path / "theirs.mlpackage")
    assert _spec(ours[0]) == _spec(theirs[0])
    assert ours[2] == theirs[2]
    assert ours[1].exists() == theirs[1].exists()
    assert not ours[1].exists() or ours[1].read_bytes() == theirs[1].read_bytes()


@pytest.mark.parametrize("fp16", [False, True])
def test_every_weight_reads_back_bitwise_through_coremltools_loaders_and_the_package_verifies(fp16, tmp_path):
    """A whole stacked GRU model: coremltools' package loader and MIL program loader read every recurrent weight
    back as the source holds it (bitwise; fp16: the source's value rounded to fp16), and gatepack's reader and MIL
    interpreter reproduce onnxruntime on the source (verification)."""
    ct = _ct()
    from coremltools.converters.mil.frontend.milproto.load import load

    source = _small_stack(tmp_path)
    out = tmp_path / "m.mlpackage"
    options = {"compress_to_fp16": True, "minimum_deployment_target": "iOS18", "allow_lossy": True} if fp16 else {}
    result = gp.convert(source, out, to="coreml", **options)
    assert result.verification.passed
    mlmodel = ct.models.MLModel(str(out), skip_model_load=True)
    spec = mlmodel.get_spec()
    with _quiet():
        program = load(spec, specification_version=spec.specificationVersion, file_weights_dir=mlmodel.weights_dir)
    consts = {op.name: op.outputs[0].val for op in _ops(program.functions["main"]) if op.op_type == "const"}
    initializers = {
        t.name: onnx.numpy_helper.to_array(t, str(source.parent)) for t in onnx.load(source).graph.initializer
    }
    checked = 0
    for k in range(2):
        w, r, b = (initializers[f"{n}{k}"] for n in "WRB")
        for d in range(2):
            held = {"W": w[d], "R": r[d], "Wb": b[d][: 3 * 16], "Rb": b[d][3 * 16 :]}
            for role, value in held.items():
                expected = value.astype(np.float16 if fp16 else np.float32)
                got = consts[f"gru{k}_{role}{d}" + ("_to_fp16" if fp16 else "")]  # (the fp16 pass's name)
                assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), (k, d, role)
                checked += 1
    assert checked == 16


def _ops(block) -> list:
    """Every op of ``block`` and of the blocks nested in its ops (a loop's body reads R from inside in fp16)."""
    return [found for op in block.operations for found in [op, *(o for b in op.blocks for o in _ops(b))]]


def test_saving_streams_each_weight_from_the_array_that_holds_it(tmp_path, monkeypatch):
    """While the package is saved, Python allocates far less than the largest weight (coremltools' exporter copies
    every constant before writing it): the memory-mapped arrays go to the file as they are."""
    source = tmp_path / "stack" / "stack.onnx"
    source.parent.mkdir()
    stacked_model(source, 2, 256)  # the largest weight: W of the second layer, [768, 512] fp32 = 1.5 MB
    peaks = []

    def measured(*args, **kwargs):
        tracemalloc.start()
        try:
            real_save(*args, **kwargs)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()

    real_save = saving.save_package
    monkeypatch.setattr(saving, "save_package", measured)
    gp.convert(source, tmp_path / "m.mlpackage", to="coreml", verify=False)
    assert peaks and peaks[0] < 768 * 512 * 4 / 2, peaks

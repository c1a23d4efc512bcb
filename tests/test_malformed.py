"""Malformed artifacts and files gatepack does not read: one line with exit code 3 (bad input), never an
internal error; and the noise and temporary files of Core ML conversions.

* gatepack's own Core ML metadata (``names``, ``precision``, each layer's interface) typed and checked
  against the program, including names that map one tensor to another's input;
* ``.npy`` headers that NumPy's parser rejects with any exception (``tokenize.TokenError`` included),
  and headers that parse but declare no plain numeric array;
* foreign model files (PyTorch, Keras, TFLite, TensorFlow, NumPy, single-file Core ML): what they look
  like and the command that exports them to ONNX, without ever unpickling;
* stderr of Core ML commands holds gatepack's own lines only; conversions leave no temporary package.
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz import FUZZ, json_values
from test_safety import cli, digest, one_line_error

import gatepack as gp
from gatepack.converters.errors import GatepackError, InputError
from gatepack.converters.fileio import load_npy

SOURCE = FIXTURES / "gru_lbr0.onnx"  # X [S,N,3], initial_h [1,N,4], Y, Y_h


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("coreml") / "g.mlpackage"
    gp.convert(SOURCE, path, to="coreml", verify=False)
    return path


@pytest.fixture()
def copy_of(package, tmp_path) -> Path:
    target = tmp_path / package.name
    shutil.copytree(package, target)
    return target


def _spec_file(package: Path) -> Path:
    manifest = json.loads((package / "Manifest.json").read_text())
    return package / "Data" / manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]["path"]


def _edit_metadata(package: Path, edit) -> None:
    """Rewrite gatepack's metadata in the package's specification file (no coremltools package is made)."""
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    spec.ParseFromString(_spec_file(package).read_bytes())
    meta = edit(json.loads(spec.description.metadata.userDefined["gatepack"]))
    spec.description.metadata.userDefined["gatepack"] = meta if isinstance(meta, str) else json.dumps(meta)
    _spec_file(package).write_bytes(spec.SerializeToString())


def _inputs(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (7, 3, 3)).astype(np.float32)
    np.savez(folder / "in.npz", X=x, initial_h=np.zeros((1, 3, 4), np.float32))
    return folder / "in.npz"


def _set(path: list, value):
    def edit(meta: dict) -> dict:
        node = meta
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return meta

    return edit


METADATA_EDITS = {
    "names-list": (_set(["names"], ["X", "initial_h", "Y", "Y_h"]), "names"),
    "names-null": (_set(["names"], None), "names"),
    "names-swapped": (_set(["names"], {"X": "initial_h", "initial_h": "X", "Y": "Y", "Y_h": "Y_h"}), "names"),
    "names-outputs-swapped": (_set(["names"], {"X": "X", "initial_h": "initial_h", "Y": "Y_h", "Y_h": "Y"}), "names"),
    "names-unknown": (_set(["names"], {"X": "other", "initial_h": "initial_h", "Y": "Y", "Y_h": "Y_h"}), "names"),
    "precision-unknown": (_set(["precision"], "fp8"), "precision"),
    "precision-fp16-on-fp32": (_set(["precision"], "fp16"), "precision"),  # would loosen verification's tolerance
    "layout-float": (_set(["layers", 0, "interface", "layout"], 1.0), "layout"),
    "layout-text": (_set(["layers", 0, "interface", "layout"], "1"), "layout"),
    "layout-contradicts-program": (_set(["layers", 0, "interface", "layout"], 1), "initial_h"),
    "x-is-initial_h": (_set(["layers", 0, "interface", "x"], "initial_h"), "inputs"),
    "sequence_lens-is-x": (_set(["layers", 0, "interface", "sequence_lens"], "X"), "sequence_lens"),
    "initial_h-dropped": (_set(["layers", 0, "interface", "initial_h"], None), "inputs"),
    "y-dropped": (_set(["layers", 0, "interface", "y"], None), "outputs"),
    "static-length-on-dynamic": (_set(["layers", 0, "interface", "seq_length"], 5), "x"),
    "bidirectional": (_set(["layers", 0, "direction"], "bidirectional"), "initial_h"),
}


@pytest.mark.parametrize("case", list(METADATA_EDITS))
def test_malformed_core_ml_metadata_is_one_line_exit_3(copy_of, tmp_path, case):
    edit, needle = METADATA_EDITS[case]
    _edit_metadata(copy_of, edit)
    before = digest(copy_of)
    inputs = _inputs(tmp_path)
    for args in (
        ["inspect", copy_of],
        ["convert", copy_of, "--to", "onnx", "-o", tmp_path / "o.onnx"],
        ["run", copy_of, "--inputs", inputs, "-o", tmp_path / "o.npz", "--engine", "numpy"],
        ["verify", copy_of, SOURCE],
    ):
        one_line_error(cli(*args), 3, str(copy_of), needle)
    assert digest(copy_of) == before and not (tmp_path / "o.onnx").exists() and not (tmp_path / "o.npz").exists()


def test_core_ml_metadata_as_written_still_reads(copy_of):
    _edit_metadata(copy_of, lambda meta: meta)  # the same metadata, rewritten: the checks accept it
    model = gp.load(copy_of)
    assert [layer.interface.x for layer in model.layers] == ["X"]


def test_fp16_package_whose_metadata_says_fp32_is_refused(tmp_path):
    path = tmp_path / "h.mlpackage"
    gp.convert(SOURCE, path, to="coreml", verify=False, compress_to_fp16=True, allow_lossy=True)
    assert gp.load(path).layers  # as written, it reads
    _edit_metadata(path, _set(["precision"], "fp32"))  # would tighten verification's tolerance below fp16's
    one_line_error(cli("inspect", path), 3, "precision", "fp16")


def test_fuzzed_core_ml_metadata_is_read_or_exit_3(package, tmp_path_factory):
    """Any JSON value at any place of the metadata: reading and running succeed or raise exit 3."""
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    spec.ParseFromString(_spec_file(package).read_bytes())
    original = json.loads(spec.description.metadata.userDefined["gatepack"])
    places = list(_places(original))
    work = tmp_path_factory.mktemp("fuzz") / package.name
    shutil.copytree(package, work)
    x = np.zeros((4, 2, 3), np.float32)

    @FUZZ
    @given(index=st.integers(0, len(places) - 1), value=json_values)
    def case(index, value):
        _edit_metadata(
            work, lambda meta: _set(list(places[index]), value)(copy.deepcopy(original)) if places[index] else value
        )
        try:
            gp.load(work)
            gp.run(work, {"X": x, "initial_h": np.zeros((1, 2, 4), np.float32)}, engine="numpy")
        except GatepackError as err:
            assert err.exit_code == 3, err.one_line()

    case()


def _places(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _places(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _places(value, prefix + (index,))


# ------------------------------------------------------------------------------------------ .npy


def _npy(header: bytes, data: bytes = b"\0" * 16, version: bytes = b"\x01\x00") -> bytes:
    size = struct.pack("<H", len(header)) if version == b"\x01\x00" else struct.pack("<I", len(header))
    return b"\x93NUMPY" + version + size + header + data


HEADERS = {
    "unclosed-tuple": _npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 12, 3, }"),  # TokenError
    "unclosed-string": _npy(b"{'descr': '<f4, 'fortran_order': False, 'shape': (4,), }"),
    "not-a-dict": _npy(b"[1, 2, 3]"),
    "a-call": _npy(b"{'descr': __import__('os'), 'fortran_order': False, 'shape': (4,), }"),
    "missing-keys": _npy(b"{'descr': '<f4'}"),
    "bad-descr": _npy(b"{'descr': 'zz9', 'fortran_order': False, 'shape': (4,), }"),
    "objects": _npy(b"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"),
    "structured": _npy(b"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }"),
    "subarray": _npy(b"{'descr': ('<f4', (2,)), 'fortran_order': False, 'shape': (2,), }"),
    "text": _npy(b"{'descr': '<U1', 'fortran_order': False, 'shape': (4,), }"),
    "datetimes": _npy(b"{'descr': '<M8[s]', 'fortran_order': False, 'shape': (2,), }"),
    "bool-shape": _npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (True, 4), }"),
    "negative-shape": _npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }"),
    "huge-subarray": _npy(b"{'descr': [('a', '<f4', (99999999999,))], 'fortran_order': False, 'shape': (1,), }"),
    "deep-nesting": _npy(b"(" * 3000 + b")" * 3000),
    "bad-utf8-v3": _npy(b"\xff\xfe\x00ab", version=b"\x03\x00"),
    "bad-version": _npy(b"{}", version=b"\x09\x00"),
    "truncated": b"\x93NUMPY\x01",
    "empty": b"",
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_malformed_npy_is_an_input_error(tmp_path, case):
    path = tmp_path / "a.npy"
    path.write_bytes(HEADERS[case])
    with pytest.raises(InputError, match="a.npy"):
        load_npy(path)


def test_random_npy_header_damage_is_always_an_input_error(tmp_path):
    """Bytes and tokens of a real header replaced at random: loaded as plain numbers, or InputError."""
    import random

    buffer = io.BytesIO()
    np.save(buffer, np.arange(12, dtype=np.float32).reshape(3, 4))
    original = buffer.getvalue()
    tokens = [b"(", b")", b"[", b"{", b"'", b",", b":", b"1", b"-1", b"True", b"'|O'", b"('a','<f4')", b"\\x00"]
    rng = random.Random(0)
    path = tmp_path / "r.npy"
    for _ in range(1000):
        data = bytearray(original)
        at = rng.randrange(10, 120)
        data[at : at + rng.randint(0, 8)] = b"".join(rng.choice(tokens) for _ in range(rng.randint(1, 4)))
        path.write_bytes(bytes(data))
        try:
            array = load_npy(path)
        except InputError:
            continue
        assert array.dtype.kind in "biufc" and array.dtype.names is None and array.dtype.subdtype is None


@pytest.mark.parametrize(
    "fmt, file",
    [("directml", "rec.W.npy"), ("directml", "X.npy"), ("bnns", "tensors/000_rec/0_inputHiddenWeight.npy")],
)
def test_npy_with_a_garbage_header_in_an_artifact_is_one_line_exit_3(tmp_path, fmt, file):
    artifact = tmp_path / f"g.{fmt}"
    gp.convert(SOURCE, artifact, to=fmt, verify=False)
    (artifact / file).write_bytes(HEADERS["unclosed-tuple"])
    one_line_error(cli("inspect", artifact), 3, Path(file).name, "not a readable .npy file")
    one_line_error(cli("convert", artifact, "--to", "onnx", "-o", tmp_path / "o.onnx"), 3, Path(file).name)


# ------------------------------------------------------------------------------------- foreign files


def _write_foreign(folder: Path, marker: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Files of other frameworks, made without their frameworks (their published layouts), each with
    words its message must hold. The pickles would create ``marker`` if anything unpickled them."""

    class Trap:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    trap = pickle.dumps({"weight": Trap()}, protocol=2)
    with zipfile.ZipFile(folder / "state.pt", "w") as archive:  # torch.save's zip layout
        archive.writestr("state/data.pkl", trap)
        archive.writestr("state/version", "3\n")
        archive.writestr("state/data/0", b"\0" * 16)
    with zipfile.ZipFile(folder / "scripted.pt", "w") as archive:  # torch.jit.save's
        archive.writestr("scripted/code/__torch__.py", "")
        archive.writestr("scripted/constants.pkl", trap)
        archive.writestr("scripted/data.pkl", trap)
    (folder / "legacy.pth").write_bytes(trap)
    (folder / "checkpoint.bin").write_bytes(trap)
    with zipfile.ZipFile(folder / "model.keras", "w") as archive:
        archive.writestr("config.json", "{}")
        archive.writestr("metadata.json", "{}")
        archive.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n")
    (folder / "model.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 504)
    np.savez(folder / "weights.npz", W=np.zeros(3))
    (folder / "frozen.pb").write_bytes(b"\x0a\x03abc")
    (folder / "saved").mkdir()
    (folder / "saved" / "saved_model.pb").write_bytes(b"\x08\x01")
    (folder / "old.mlmodel").write_bytes(b"\x08\x04")
    return {
        "state.pt": ("PyTorch state dict", "never unpickles", "torch.onnx.export"),
        "scripted.pt": ("TorchScript", "torch.onnx.export"),
        "legacy.pth": ("pickle", "never unpickles", "torch.onnx.export"),
        "checkpoint.bin": ("pickle", "torch.onnx.export"),
        "model.keras": ("Keras 3", "tf2onnx"),
        "model.h5": ("HDF5", "tf2onnx"),
        "weights.npz": ("NumPy arrays", "--inputs"),
        "frozen.pb": ("TensorFlow", "tf2onnx.convert --graphdef"),
        "saved": ("SavedModel", "tf2onnx.convert --saved-model"),
        "old.mlmodel": ("single-file", "mlprogram"),
    }


def test_foreign_model_files_say_what_they_are_and_how_to_export_them(tmp_path):
    marker = tmp_path / "unpickled"
    expected = _write_foreign(tmp_path, marker)
    for name, needles in expected.items():
        for args in (
            ["inspect", tmp_path / name],
            ["convert", tmp_path / name, "--to", "onnx", "-o", tmp_path / "o.onnx"],
        ):
            one_line_error(cli(*args), 3, name, "gatepack does not read it", *needles)
            assert "--from/--to" not in cli(*args).output
    assert not marker.exists() and not (tmp_path / "o.onnx").exists()


def test_an_output_named_like_a_foreign_file_is_still_a_usage_error(tmp_path):
    marker = tmp_path / "unpickled"
    _write_foreign(tmp_path, marker)
    before = digest(tmp_path / "state.pt")
    one_line_error(cli("convert", SOURCE, "-o", tmp_path / "state.pt"), 2, "cannot tell the format")
    one_line_error(cli("inspect", tmp_path / "unknown.weird"), 2, "cannot tell the format")
    assert digest(tmp_path / "state.pt") == before and not marker.exists()


# ---------------------------------------------------------------------- Core ML: stderr and temp files


def test_core_ml_commands_print_only_gatepack_lines_on_stderr(package, tmp_path):
    inputs = _inputs(tmp_path)
    commands = [
        ["inspect", package],
        ["run", package, "--inputs", inputs, "-o", tmp_path / "o.npz", "--engine", "numpy"],
        ["convert", package, "--to", "onnx", "-o", tmp_path / "o.onnx"],
        ["convert", SOURCE, "--to", "coreml", "-o", tmp_path / "o.mlpackage"],
        ["verify", SOURCE, package],
    ]
    for args in commands:
        done = subprocess.run(
            [sys.executable, "-m", "gatepack", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        foreign = [line for line in done.stderr.splitlines() if not line.startswith("gatepack")]
        assert foreign == [], (args[0], foreign)


def test_core_ml_conversions_leave_no_temporary_package(tmp_path, monkeypatch):
    scratch = tmp_path / "system-temp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "out"
    out.mkdir()
    for k in range(4):  # each output written, then replaced: every path a conversion takes to its output
        gp.convert(SOURCE, out / f"m{k % 2}.mlpackage", to="coreml", verify=False)
    assert sorted(scratch.rglob("*")) == []
    assert sorted(p.name for p in out.iterdir()) == ["m0.mlpackage", "m1.mlpackage"]


KILLED_DURING_SAVE = """
import os, signal, sys
import gatepack as gp
from gatepack.converters.formats.coreml import saving

def killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)  # the package is converted, in gatepack's staging folder

saving.set_root_model = killed  # called once the program is exported, to write the specification into the package
gp.convert(sys.argv[1], sys.argv[2], to="coreml", verify=False)
"""


def test_what_a_killed_conversion_leaves_is_removed_by_the_next_run(tmp_path):
    pytest.importorskip("fcntl")
    scratch = tmp_path / "system-temp"
    scratch.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_DURING_SAVE, str(SOURCE), str(out / "m.mlpackage")],
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(scratch)},
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr
    left = sorted(p.name for p in out.iterdir())
    assert any(n.startswith(".coreml.") for n in left) and any(n.startswith(".m.mlpackage.") for n in left), left
    assert sorted(scratch.rglob("*")) == []  # nothing of it in the system's temporary folder
    gp.convert(SOURCE, out / "m.mlpackage", to="coreml", verify=False)
    assert sorted(p.name for p in out.iterdir()) == ["m.mlpackage"]


def test_temporary_entries_of_live_runs_and_foreign_files_are_kept(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    running = tmp_path / ".coreml.running.tmp"  # another run's, still converting: its lock file held
    running.mkdir()
    (tmp_path / ".coreml.running.tmp.lock").write_bytes(b"")
    held = os.open(tmp_path / ".coreml.running.tmp.lock", os.O_RDWR)
    foreign = tmp_path / ".coreml.user.tmp"  # not gatepack's (no lock file): never touched
    foreign.mkdir()
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        gp.convert(SOURCE, tmp_path / "m.mlpackage", to="coreml", verify=False)
    finally:
        os.close(held)
    expected = [".coreml.running.tmp", ".coreml.running.tmp.lock", ".coreml.user.tmp", "m.mlpackage"]
    assert sorted(p.name for p in tmp_path.iterdir()) == expected

"""Careless and hostile use: gatepack never destroys, never escapes an artifact, never hangs, never
allocates what an input only declares, and answers every bad input or path with one line and the
documented exit code (2 usage, 3 bad input; 1 is reserved for bugs).

Every case checks the exit code, a one-line message, that nothing was left behind, and that the
input's bytes are unchanged; cases that plant a foreign file outside the artifact check it is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import FIXTURES, artifact_name
from onnx import TensorProto, helper, numpy_helper

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry

SOURCE = FIXTURES / "gru_lbr0.onnx"
WRITERS = registry.writers()


# ------------------------------------------------------------------------------------------ helpers


def digest(path: Path) -> str:
    """Every name and byte under ``path`` (a file or a tree), without following links out of it."""
    h = hashlib.sha256()
    paths = [path] if not path.is_dir() else sorted(path.rglob("*"))
    for p in paths:
        h.update(str(p.relative_to(path.parent)).encode())
        if p.is_symlink():
            h.update(b"->" + os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gatepack: error: "), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    """One artifact of each format, converted from the fixture (a fresh copy per test: ``made``)."""
    root = tmp_path_factory.mktemp("artifacts")
    out = {}
    for fmt in WRITERS:
        out[fmt] = root / artifact_name(fmt, "g")
        gp.convert(SOURCE, out[fmt], to=fmt, verify=False)
    return out


@pytest.fixture()
def made(artifacts, tmp_path) -> dict[str, Path]:
    copies = {}
    for fmt, path in artifacts.items():
        target = tmp_path / path.name
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            shutil.copy(path, target)
            if fmt == "openvino":
                shutil.copy(path.with_suffix(".bin"), target.with_suffix(".bin"))
        copies[fmt] = target
    return copies


def inputs_npz(folder: Path) -> Path:
    """Inputs the fixture's artifacts take: the source's X and initial_h (DirectML's static sizes S = 7,
    N = 3; every format takes the source's shapes)."""
    rng = np.random.default_rng(0)
    x, h0 = rng.uniform(-1, 1, (7, 3, 3)).astype(np.float32), rng.uniform(-1, 1, (1, 3, 4)).astype(np.float32)
    np.savez(folder / "in.npz", X=x, initial_h=h0)
    return folder / "in.npz"


# ------------------------------------------------------------------- 1. data loss: the output policy


@pytest.mark.parametrize("fmt", WRITERS)
def test_output_holding_the_input_is_refused(tmp_path, fmt):
    """`-o DIR` where DIR holds the input (and the user's other files): refused, nothing touched."""
    folder = tmp_path / "d"
    folder.mkdir()
    shutil.copy(SOURCE, folder / "m.onnx")
    (folder / "train.py").write_text("x\n")
    before = digest(folder)
    one_line_error(cli("convert", folder / "m.onnx", "--to", fmt, "-o", folder), 2, "contains the input")
    assert digest(folder) == before


def test_output_dot_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(SOURCE, tmp_path / "m.onnx")
    before = digest(tmp_path)
    one_line_error(cli("convert", "m.onnx", "--to", "bnns", "-o", "."), 2)
    assert digest(tmp_path) == before


@pytest.mark.parametrize(
    "source, target, inside",
    [
        ("bnns", "directml", "tensors"),
        ("directml", "onnx", "model.json"),
        ("coreml", "bnns", "Data"),
        ("directml", "bnns", "x"),
    ],
)
def test_output_inside_the_input_is_refused(made, source, target, inside):
    before = digest(made[source])
    one_line_error(cli("convert", made[source], "--to", target, "-o", made[source] / inside), 2, "is inside the input")
    assert digest(made[source]) == before


@pytest.mark.parametrize("output", ["model.json", "X.npy", "new.npz"])
def test_run_output_inside_the_input_is_refused(made, tmp_path, output):
    before = digest(made["directml"])
    result = cli(
        "run", made["directml"], "--inputs", inputs_npz(tmp_path), "-o", made["directml"] / output, "--engine", "numpy"
    )
    one_line_error(result, 2, "is inside the input")
    assert digest(made["directml"]) == before


def test_output_that_is_an_input_companion_is_refused(made):
    before = digest(made["openvino"].with_suffix(".bin"))
    one_line_error(
        cli("convert", made["openvino"], "--to", "onnx", "-o", made["openvino"].with_suffix(".bin")), 2, "is the input"
    )
    assert digest(made["openvino"].with_suffix(".bin")) == before


@pytest.mark.parametrize("fmt", WRITERS)
def test_existing_foreign_output_is_refused_and_kept(tmp_path, fmt):
    """A directory or file that is not an artifact of the target format is never replaced."""
    for kind in ("dir", "file"):
        out = tmp_path / artifact_name(fmt, kind)
        if kind == "dir":
            out.mkdir()
            (out / "notes.txt").write_text("mine\n")
        else:
            out.write_text("mine\n")
        before = digest(out)
        one_line_error(cli("convert", SOURCE, "--to", fmt, "-o", out), 2, "does not recognise")
        assert digest(out) == before and leftovers(tmp_path) == []


@pytest.mark.parametrize("fmt", WRITERS)
def test_existing_artifact_of_the_same_format_is_replaced(made, fmt):
    out = made[fmt]
    marker = out / "stale.txt" if out.is_dir() else None
    if marker:
        marker.write_text("old\n")
    result = cli("convert", FIXTURES / "gru_lbr1_bidirectional.onnx", "--to", fmt, "-o", out)
    assert result.exit_code == 0, result.output
    assert gp.load(out).layers[0].direction.value == "bidirectional"
    assert marker is None or not marker.exists()  # replaced whole
    assert leftovers(out.parent) == []
    mode = out.stat().st_mode & 0o777
    assert mode == (0o777 if out.is_dir() else 0o666) & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_companion_without_its_artifact_is_never_replaced(tmp_path):
    (tmp_path / "m.bin").write_bytes(b"someone else's weights")
    before = digest(tmp_path / "m.bin")
    one_line_error(cli("convert", SOURCE, "--to", "openvino", "-o", tmp_path / "m.xml"), 2, "m.bin")
    assert digest(tmp_path / "m.bin") == before and not (tmp_path / "m.xml").exists()


def test_report_and_run_outputs_follow_the_policy(made, tmp_path):
    precious = tmp_path / "train.py"
    precious.write_text("x\n")
    one_line_error(cli("report", SOURCE, "-o", precious), 2, "does not recognise")
    one_line_error(cli("run", made["onnx"], "--inputs", inputs_npz(tmp_path), "-o", precious), 2, "does not recognise")
    assert precious.read_text() == "x\n"
    (tmp_path / "old.html").write_text("old")
    assert cli("report", SOURCE, "--format", "html", "-o", tmp_path / "old.html").exit_code == 0
    assert "<html" in (tmp_path / "old.html").read_text().lower()


def test_symbolic_link_output_is_refused(tmp_path):
    target = tmp_path / "elsewhere.onnx"
    shutil.copy(SOURCE, target)
    (tmp_path / "link.onnx").symlink_to(target)
    before = digest(target)
    one_line_error(cli("convert", SOURCE, "--to", "onnx", "-o", tmp_path / "link.onnx"), 2, "symbolic link")
    assert digest(target) == before


@pytest.mark.parametrize(
    "make_output",
    [
        lambda t: (t / "file").write_text("x") and t / "file" / "m.onnx",  # parent is a file
        lambda t: t / ("a" * 300 + ".onnx"),  # name too long
        lambda t: Path("/proc/self/no/such/m.onnx"),  # cannot create the folder
        lambda t: t / "dir.onnx" if (t / "dir.onnx").mkdir() is None else None,  # a directory where a file goes
    ],
    ids=["parent-is-file", "name-too-long", "uncreatable-folder", "directory-in-the-way"],
)
def test_os_errors_on_the_output_path_are_usage_errors(tmp_path, make_output):
    output = make_output(tmp_path)
    one_line_error(cli("convert", SOURCE, "--to", "onnx", "-o", output), 2)
    assert leftovers(tmp_path) == []


def test_permission_errors_on_the_output_are_usage_errors(tmp_path, monkeypatch):
    """A read-only destination (simulated: the suite runs as root, which ignores permissions)."""
    from gatepack.converters import fileio

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "ro"))

    monkeypatch.setattr(fileio.os, "replace", denied)
    for fmt in ("onnx", "bnns"):
        one_line_error(
            cli("convert", SOURCE, "--to", fmt, "-o", tmp_path / "ro" / artifact_name(fmt)), 2, "Permission denied"
        )
        assert not (tmp_path / "ro").exists()


def test_failed_conversion_leaves_no_folders_behind(tmp_path):
    result = cli("convert", FIXTURES / "gru_clip.onnx", "--to", "bnns", "-o", tmp_path / "new" / "sub" / "b.bnns")
    assert result.exit_code == 4 and not (tmp_path / "new").exists()


def test_negative_seed_is_a_usage_error():
    assert cli("convert", SOURCE, "--to", "onnx", "-o", "x.onnx", "--seed", "-1").exit_code == 2
    with pytest.raises(gp.UsageError):
        gp.verify(SOURCE, SOURCE, seed=-1)


# ---------------------------------------------------------------- 2. reads outside the artifact


def _foreign_npy(tmp_path: Path, like: Path) -> Path:
    """A file outside the artifact with the same shape as ``like``: used, it would pass silently."""
    foreign = tmp_path / "foreign.npy"
    np.save(foreign, np.full(np.load(like).shape, 7.0, np.load(like).dtype))
    return foreign


def _dml_source(made, path: str) -> None:
    doc = json.loads((made["directml"] / "model.json").read_text())
    doc["resources"]["rec.W"]["initialValues"]["sourcePath"] = path
    (made["directml"] / "model.json").write_text(json.dumps(doc))


def _escape_cases():
    def dml_relative(made, foreign):
        _dml_source(made, "../foreign.npy")

    def dml_absolute(made, foreign):
        _dml_source(made, str(foreign))

    def dml_file_link(made, foreign):
        (made["directml"] / "rec.W.npy").unlink()
        (made["directml"] / "rec.W.npy").symlink_to(foreign)

    def dml_folder_link(made, foreign):
        (made["directml"] / "sub").symlink_to(foreign.parent)
        _dml_source(made, "sub/foreign.npy")

    def bnns_relative(made, foreign):
        doc = json.loads((made["bnns"] / "bnns.json").read_text())
        doc["layers"][0]["calls"][0]["inputHiddenWeight"] = "../foreign.npy"
        (made["bnns"] / "bnns.json").write_text(json.dumps(doc))

    def bnns_link(made, foreign):
        target = next(made["bnns"].rglob("*_inputHiddenWeight.npy"))
        target.unlink()
        target.symlink_to(foreign)

    def coreml_manifest_path(made, foreign):
        doc = json.loads((made["coreml"] / "Manifest.json").read_text())
        root = doc["rootModelIdentifier"]
        doc["itemInfoEntries"][root]["path"] = "../../outside.mlmodel"
        (made["coreml"] / "Manifest.json").write_text(json.dumps(doc))

    def coreml_absolute(made, foreign):
        doc = json.loads((made["coreml"] / "Manifest.json").read_text())
        doc["itemInfoEntries"][doc["rootModelIdentifier"]]["path"] = str(foreign)
        (made["coreml"] / "Manifest.json").write_text(json.dumps(doc))

    def coreml_weight_link(made, foreign):
        weight = next(made["coreml"].rglob("weight.bin"))
        shutil.copy(weight, foreign.parent / "weight.bin")
        weight.unlink()
        weight.symlink_to(foreign.parent / "weight.bin")

    def coreml_manifest_link(made, foreign):
        shutil.copy(made["coreml"] / "Manifest.json", foreign.parent / "Manifest.json")
        (made["coreml"] / "Manifest.json").unlink()
        (made["coreml"] / "Manifest.json").symlink_to(foreign.parent / "Manifest.json")

    def _linked_outside(artifact: Path, name: str, foreign) -> None:
        """``name`` inside ``artifact`` replaced by a link to a copy of it outside (readable and valid)."""
        shutil.copy(artifact / name, foreign.parent / name)
        (artifact / name).unlink()
        (artifact / name).symlink_to(foreign.parent / name)

    def dml_model_json_link(made, foreign):
        _linked_outside(made["directml"], "model.json", foreign)

    def dml_manifest_link(made, foreign):
        _linked_outside(made["directml"], "gatepack.json", foreign)

    def bnns_manifest_link(made, foreign):
        _linked_outside(made["bnns"], "bnns.json", foreign)

    def ir_bin_link(made, foreign):
        folder = made["openvino"].parent / "ir"  # the IR's directory is its own; `outside` is beside it
        folder.mkdir()
        for file in (made["openvino"], made["openvino"].with_suffix(".bin")):
            shutil.move(file, folder / file.name)
        made["openvino"] = folder / made["openvino"].name
        weights = made["openvino"].with_suffix(".bin")
        shutil.copy(weights, foreign.parent / "w.bin")
        weights.unlink()
        weights.symlink_to(foreign.parent / "w.bin")

    return {
        f.__name__: f
        for f in (
            dml_relative,
            dml_absolute,
            dml_file_link,
            dml_folder_link,
            bnns_relative,
            bnns_link,
            coreml_manifest_path,
            coreml_absolute,
            coreml_weight_link,
            coreml_manifest_link,
            dml_model_json_link,
            dml_manifest_link,
            bnns_manifest_link,
            ir_bin_link,
        )
    }


ESCAPES = _escape_cases()


@pytest.mark.parametrize("case", list(ESCAPES))
def test_paths_inside_an_artifact_never_lead_outside(made, tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    foreign = _foreign_npy(outside, made["directml"] / "rec.W.npy")
    ESCAPES[case](made, foreign)
    fmt = {"dml": "directml", "bnns": "bnns", "coreml": "coreml", "ir": "openvino"}[case.split("_")[0]]
    before = digest(made[fmt])
    for args in (["inspect", made[fmt]], ["convert", made[fmt], "--to", "onnx", "-o", tmp_path / "o.onnx"]):
        result = cli(*args)
        one_line_error(result, 3)
        assert "outside" in result.output or "absolute" in result.output, result.output
    assert digest(made[fmt]) == before and not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("location", ["../w.data", "/tmp/w.data", "link.data"])
def test_onnx_external_data_never_leads_outside(tmp_path, location):
    folder = tmp_path / "m"
    folder.mkdir()
    model = onnx.load(str(SOURCE))
    onnx.save_model(
        model,
        str(folder / "m.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.data",
        size_threshold=0,
    )
    if location == "link.data":
        shutil.move(folder / "w.data", tmp_path / "w.data")
        (folder / "link.data").symlink_to(tmp_path / "w.data")
    proto = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    (folder / "m.onnx").write_bytes(proto.SerializeToString())
    result = cli("inspect", folder / "m.onnx")
    one_line_error(result, 3)
    assert "outside" in result.output or "absolute" in result.output


def _external_outside(tmp_path, tensor: onnx.TensorProto) -> onnx.TensorProto:
    """``tensor`` stored as external data in a file beside the model's folder (``../outside.bin``)."""
    data = numpy_helper.to_array(tensor)
    (tmp_path / "outside.bin").write_bytes(data.tobytes())
    moved = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    moved.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "../outside.bin"), ("offset", "0"), ("length", str(data.nbytes))):
        moved.external_data.add(key=key, value=value)
    return moved


@pytest.mark.parametrize("held_by", ["the layer", "an operator around it"])
def test_verify_refuses_a_constant_whose_external_data_leads_outside(tmp_path, held_by):
    """Every external tensor is checked when the model is read, not only the weights gatepack reads: a state the layer
    holds (once read from outside the folder, and verification passed) or a constant of another operator (once left
    to onnxruntime, which refused it: verification incomplete, exit 5) is a one-line error, exit 3."""
    folder = tmp_path / "m"
    folder.mkdir()
    proto = onnx.load(str(SOURCE))
    h = next(t for t in proto.graph.initializer if t.name == "R").dims[2]
    if held_by == "the layer":
        graph_input = next(i for i in proto.graph.input if i.name == "initial_h")
        state = np.full([d.dim_value for d in graph_input.type.tensor_type.shape.dim], 0.5, np.float32)
        proto.graph.input.remove(graph_input)
        proto.graph.initializer.append(_external_outside(tmp_path, numpy_helper.from_array(state, "initial_h")))
    else:
        bias = numpy_helper.from_array(np.arange(h, dtype=np.float32), "bias")
        proto.graph.initializer.append(_external_outside(tmp_path, bias))
        proto.graph.node.append(helper.make_node("Add", [proto.graph.output[1].name, "bias"], ["shifted"]))
        proto.graph.output.append(helper.make_tensor_value_info("shifted", TensorProto.FLOAT, None))
    model = folder / "m.onnx"
    model.write_bytes(proto.SerializeToString())
    for args in (["verify", model, model], ["inspect", model]):
        one_line_error(cli(*args), 3, "'../outside.bin' leads outside the artifact")


# ------------------------------------------------------------------- 3. reading never writes


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: json.dumps(d),  # re-serialised on one line
        lambda d: json.dumps({**d, "extra": 1}, indent=4),
        lambda d: json.dumps({k: v for k, v in d.items() if k != "itemInfoEntries"}),
    ],
    ids=["reserialised", "extra-key", "no-item-entries"],
)
def test_reading_a_core_ml_package_never_rewrites_it(made, tmp_path, edit):
    manifest = made["coreml"] / "Manifest.json"
    manifest.write_text(edit(json.loads(manifest.read_text())))
    before = digest(made["coreml"])
    for args in (
        ["inspect", made["coreml"]],
        ["convert", made["coreml"], "--to", "onnx", "-o", tmp_path / "o.onnx"],
        ["report", made["coreml"]],
    ):
        result = cli(*args)
        assert result.exit_code in (0, 3) and "internal error" not in result.output, result.output
    assert digest(made["coreml"]) == before


@pytest.mark.parametrize("fmt", WRITERS)
def test_every_command_leaves_every_input_unchanged(made, tmp_path, fmt):
    before = {k: digest(v) for k, v in made.items()}
    npz = inputs_npz(tmp_path)
    npz_before = digest(npz)
    for args in (
        ["inspect", made[fmt]],
        ["report", made[fmt], "--format", "json"],
        ["convert", made[fmt], "--to", "onnx", "-o", tmp_path / "o.onnx"],
        ["verify", made[fmt], made["onnx"]],
        ["run", made[fmt], "--inputs", npz, "-o", tmp_path / "o.npz", "--engine", "numpy"],
    ):
        result = cli(*args)
        assert result.exit_code == 0, (args, result.output)
    assert {k: digest(v) for k, v in made.items()} == before and digest(npz) == npz_before


# ------------------------------------------------------------------------------- 4. hangs


def _fifo_cases():
    return {
        "bnns-npy": ("bnns", lambda m: next(m["bnns"].rglob("*_bias.npy"))),
        "coreml-weight": ("coreml", lambda m: next(m["coreml"].rglob("weight.bin"))),
        "coreml-model": ("coreml", lambda m: next(m["coreml"].rglob("model.mlmodel"))),
        "coreml-manifest": ("coreml", lambda m: m["coreml"] / "Manifest.json"),
        "directml-npy": ("directml", lambda m: m["directml"] / "rec.W.npy"),
        "directml-model": ("directml", lambda m: m["directml"] / "model.json"),
        "bnns-manifest": ("bnns", lambda m: m["bnns"] / "bnns.json"),
        "ir-bin": ("openvino", lambda m: m["openvino"].with_suffix(".bin")),
        "ir-xml": ("openvino", lambda m: m["openvino"]),
        "onnx-model": ("onnx", lambda m: m["onnx"]),
    }


FIFOS = _fifo_cases()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
@pytest.mark.parametrize("case", list(FIFOS))
def test_a_fifo_in_an_artifact_never_blocks(made, case):
    fmt, pick = FIFOS[case]
    victim = pick(made)
    victim.unlink()
    os.mkfifo(victim)
    run = subprocess.run(
        [sys.executable, "-m", "gatepack", "inspect", str(made[fmt])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert run.returncode == 3, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("gatepack: error: ") and "FIFO" in run.stderr


# ---------------------------------------------------------------------- 5. memory bounded by bytes


def _npy_with_header(path: Path, shape: tuple, dtype: str = "<f4") -> None:
    """A .npy whose header declares ``shape`` but which holds a few bytes of data."""
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(b"\0" * 16)


def test_declared_sizes_are_checked_before_allocating(made, tmp_path):
    doc = json.loads((made["directml"] / "model.json").read_text())
    doc["resources"]["X"]["initialValues"] = {"valueCount": 600_000_000, "value": 0}
    (made["directml"] / "model.json").write_text(json.dumps(doc))
    one_line_error(cli("inspect", made["directml"]), 3, "valueCount 600000000")

    _npy_with_header(next(made["bnns"].rglob("*_bias.npy")), (2**40,))
    one_line_error(cli("inspect", made["bnns"]), 3, "declares shape [1099511627776]")

    xml = made["openvino"].read_text()
    made["openvino"].write_text(xml.replace('hidden_size="4"', 'hidden_size="1099511627776"'))
    one_line_error(cli("inspect", made["openvino"]), 3)


def test_sample_sizes_are_limited(tmp_path):
    one_line_error(
        cli("convert", SOURCE, "--to", "directml", "-o", tmp_path / "d", "--seq-length", "100000000"), 2, "limit"
    )
    assert not (tmp_path / "d").exists()


def test_npz_members_are_checked_before_decompressing(made, tmp_path, monkeypatch):
    import zipfile

    from gatepack.converters import fileio

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("X.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f4", "fortran_order": False, "shape": (2000, 1000, 3)}
            )
            member.write(b"\0" * (2000 * 1000 * 3 * 4))
    assert bomb.stat().st_size < 100_000
    monkeypatch.setattr(fileio, "MAX_NPZ_BYTES", 1 << 20)
    one_line_error(cli("run", made["onnx"], "--inputs", bomb, "-o", tmp_path / "o.npz"), 3, "limit")

    liar = tmp_path / "liar.npz"
    with zipfile.ZipFile(liar, "w") as archive:
        with archive.open("X.npy", "w") as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (2**40, 3)})
            member.write(b"\0" * 64)
    one_line_error(cli("run", made["onnx"], "--inputs", liar, "-o", tmp_path / "o.npz"), 3, "header declares")
    assert not (tmp_path / "o.npz").exists()


# --------------------------------------------------- 6. bad input is exit 3, never an internal error


def _set(doc: dict, path: list, value) -> dict:
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


MANIFEST_EDITS = {
    "dml-name-list": ("directml", "gatepack.json", ["layers", 0, "name"], ["a", "b"]),
    "dml-layout-text": ("directml", "gatepack.json", ["layers", 0, "source_layout"], "1"),
    "dml-tensors-list": ("directml", "gatepack.json", ["layers", 0, "tensors"], [1, 2]),
    "dml-bindings-number": ("directml", "model.json", ["commands", 0, "bindings"], 5),
    "dml-sizes-text": ("directml", "model.json", ["dispatchables", "rec", "desc", "InputTensor", "Sizes"], "abc"),
    "bnns-name-list": ("bnns", "bnns.json", ["layers", 0, "name"], ["x"]),
    "bnns-hidden-float": ("bnns", "bnns.json", ["layers", 0, "hidden_size"], 4.5),
    "bnns-interface-list": ("bnns", "bnns.json", ["layers", 0, "interface"], [1]),
    "bnns-call-number": ("bnns", "bnns.json", ["layers", 0, "calls", 0], 3),
    "bnns-layout-true": ("bnns", "bnns.json", ["layers", 0, "interface", "layout"], True),
    "bnns-layout-float": ("bnns", "bnns.json", ["layers", 0, "interface", "layout"], 1.0),
    "bnns-seq-length-zero": ("bnns", "bnns.json", ["layers", 0, "interface", "seq_length"], 0),
    "dml-strides-number": ("directml", "model.json", ["dispatchables", "rec", "desc", "InputTensor", "Strides"], 5),
    "dml-total-size-text": (
        "directml",
        "model.json",
        ["dispatchables", "rec", "desc", "WeightTensor", "TotalTensorSizeInBytes"],
        "x",
    ),
    "dml-total-size-small": (
        "directml",
        "model.json",
        ["dispatchables", "rec", "desc", "WeightTensor", "TotalTensorSizeInBytes"],
        4,
    ),
}


@pytest.mark.parametrize("case", list(MANIFEST_EDITS))
def test_wrongly_typed_manifest_fields_are_input_errors(made, case):
    fmt, name, path, value = MANIFEST_EDITS[case]
    file = made[fmt] / name
    file.write_text(json.dumps(_set(json.loads(file.read_text()), path, value)))
    one_line_error(cli("inspect", made[fmt]), 3, name)


@pytest.mark.parametrize(
    "fmt, name",
    [("directml", "model.json"), ("directml", "gatepack.json"), ("bnns", "bnns.json"), ("coreml", "Manifest.json")],
)
def test_deeply_nested_json_is_an_input_error(made, fmt, name):
    (made[fmt] / name).write_text(_deep(100_000))
    one_line_error(cli("inspect", made[fmt]), 3, name)


def _described_artifact_edit(made, fmt: str, edit) -> None:
    """Rewrite the gatepack layer description an IR (rt_info) or Core ML package (metadata) carries."""
    if fmt == "openvino":
        import openvino as ov

        model = ov.Core().read_model(str(made[fmt]))
        entries = json.loads(model.get_rt_info(["gatepack", "layers"]).astype(str))
        model.set_rt_info(json.dumps(edit(entries)), ["gatepack", "layers"])
        edited = made[fmt].with_name("edited.xml")  # not over the files the model is still mapped from
        ov.save_model(model, str(edited), compress_to_fp16=False)
        del model
        for suffix in (".xml", ".bin"):
            os.replace(edited.with_suffix(suffix), made[fmt].with_suffix(suffix))
    else:
        import coremltools as ct

        package = ct.models.MLModel(str(made[fmt]), skip_model_load=True)
        spec = package.get_spec()
        meta = json.loads(spec.description.metadata.userDefined["gatepack"])
        meta["layers"] = edit(meta["layers"])
        spec.description.metadata.userDefined["gatepack"] = json.dumps(meta)
        ct.models.MLModel(spec, weights_dir=package.weights_dir, skip_model_load=True).save(str(made[fmt]))


DESCRIPTION_EDITS = {
    "name-list": lambda e: [{**e[0], "name": ["a"]}],
    "clip-text": lambda e: [{**e[0], "clip": "abc"}],
    "hidden-huge": lambda e: [{**e[0], "hidden_size": 2**40}],
    "lbr-text": lambda e: [{**e[0], "linear_before_reset": "yes"}],
    "strategy-unknown": lambda e: [{**e[0], "strategy": "magic"}],
    "duplicate-outputs": lambda e: [e[0], {**e[0], "name": "other"}],
    "not-a-list": lambda e: {"layers": e},
    "deep": lambda e: json.loads(_deep(200)),
}


@pytest.mark.parametrize("fmt", ["openvino", "coreml"])
@pytest.mark.parametrize("case", list(DESCRIPTION_EDITS))
def test_malformed_layer_descriptions_are_input_errors(made, fmt, case):
    _described_artifact_edit(made, fmt, DESCRIPTION_EDITS[case])
    one_line_error(cli("inspect", made[fmt]), 3)


def _gru_model(
    tmp_path: Path,
    *,
    attributes: list | None = None,
    opset: int = 14,
    weights_behind: int = 0,
    constant_without_value: bool = False,
) -> Path:
    """A one-GRU ONNX model built with onnx.helper; attributes as AttributeProtos (any type)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 12, 3)).astype(np.float32), "W0")
    r = numpy_helper.from_array(rng.standard_normal((1, 12, 4)).astype(np.float32), "R")
    nodes = []
    name = "W0"
    for k in range(weights_behind):
        nodes.append(helper.make_node("Identity", [name], [f"W{k + 1}"]))
        name = f"W{k + 1}"
    inits = [w, r]
    if constant_without_value:
        nodes.append(helper.make_node("Constant", [], ["B"]))
    gru = helper.make_node("GRU", ["X", name, "R", "B" if constant_without_value else ""], ["Y", "Y_h"], hidden_size=4)
    gru.attribute.extend(attributes or [])
    nodes.append(gru)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 2, 3])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


ONNX_CASES = {
    "clip-string": dict(attributes=[helper.make_attribute("clip", "abc")]),
    "clip-int": dict(attributes=[helper.make_attribute("clip", 3)]),
    "alpha-ints": dict(
        attributes=[
            helper.make_attribute("activations", ["HardSigmoid", "Tanh"]),
            helper.make_attribute("activation_alpha", [1, 2]),
        ]
    ),
    "direction-int": dict(attributes=[helper.make_attribute("direction", 1)]),
    "opset-0": dict(opset=0),
    "opset-100": dict(opset=100),
    "constant-without-value": dict(constant_without_value=True),
}


@pytest.mark.parametrize("case", list(ONNX_CASES))
def test_malformed_onnx_nodes_are_input_errors(tmp_path, case):
    one_line_error(cli("inspect", _gru_model(tmp_path, **ONNX_CASES[case])), 3)


def test_hidden_size_of_the_wrong_type_is_an_input_error(tmp_path):
    path = _gru_model(tmp_path)
    model = onnx.load(str(path))
    node = model.graph.node[-1]
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("hidden_size", "four"))
    path.write_bytes(model.SerializeToString())
    one_line_error(cli("inspect", path), 3, "hidden_size")


def test_weights_behind_a_long_chain_are_folded(tmp_path):
    """3000 Identity nodes between W and the GRU: folded (no recursion limit), and the run matches."""
    path = _gru_model(tmp_path, weights_behind=3000)
    original = numpy_helper.to_array(onnx.load(str(path)).graph.initializer[0])
    np.testing.assert_array_equal(gp.load(path).layers[0].directions[0].W, original[0])


def test_openvino_constant_of_dynamic_type_is_an_input_error(made):
    xml = made["openvino"].read_text()
    start = xml.index('name="rec/W" type="Const"')
    edited = xml[:start] + xml[start:].replace('element_type="f32"', 'element_type="dynamic"', 1)
    assert edited != xml
    made["openvino"].write_text(edited)
    result = cli("inspect", made["openvino"])
    assert result.exit_code == 3 and "internal error" not in result.output, result.output


@pytest.mark.parametrize("fmt", WRITERS)
@pytest.mark.parametrize("engine", ["native", "numpy"])
def test_run_with_wrong_shapes_or_an_empty_sequence_is_an_input_error(made, tmp_path, fmt, engine):
    if fmt == "directml" and engine == "native":
        pytest.skip("DirectML runs on Windows only: refused before any input is read")
    lead = (1,) if fmt == "directml" else ()
    for x in (
        np.zeros((0, 3, 3), np.float32),
        np.zeros((5, 3, 7), np.float32),
        np.zeros((5, 3), np.float32),
        np.zeros((7, 3, 3), np.int64),
    ):
        np.savez(tmp_path / "in.npz", X=x.reshape(lead + x.shape), initial_h=np.zeros(lead + (1, 3, 4), np.float32))
        result = cli("run", made[fmt], "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz", "--engine", engine)
        one_line_error(result, 3, "layer 'rec'")
        assert not (tmp_path / "o.npz").exists()


# ---------------------------------------------------------------------------- 9. noise and strays


def test_garbage_xml_prints_one_line_and_runtimes_write_nothing_home(tmp_path):
    (tmp_path / "bad.xml").write_text("garbage")
    (tmp_path / "bad.bin").write_bytes(b"\0" * 8)
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("ORT_DISABLE_TELEMETRY", None)
    root = Path(__file__).parent.parent
    bad = subprocess.run(
        [sys.executable, "-m", "gatepack", "inspect", str(tmp_path / "bad.xml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert bad.returncode == 3 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    for target in ("openvino", "onnx"):
        good = subprocess.run(
            [
                sys.executable,
                "-m",
                "gatepack",
                "convert",
                str(SOURCE),
                "--to",
                target,
                "-o",
                str(tmp_path / artifact_name(target, "o")),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
            timeout=300,
        )
        assert good.returncode == 0, good.stderr
    assert sorted(p.name for p in home.rglob("*")) == []


def test_the_suite_runs_with_a_private_home():
    """tests/conftest.py points HOME and the XDG directories into the session's temporary home, so what the
    tests' tools write (runtimes' caches, a browser's profile, dconf) never lands in the user's home; a
    subprocess inherits it."""
    import pwd

    private = Path(os.environ["GATEPACK_TEST_HOME"])
    assert Path.home() == private != Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert all(Path(os.environ[v]).is_relative_to(private) for v in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME"))
    seen = subprocess.run([sys.executable, "-c", "import pathlib; print(pathlib.Path.home())"], capture_output=True)
    assert seen.stdout.decode().strip() == str(private)

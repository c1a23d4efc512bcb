"""An ML Program package on disk: its files (contained, regular), the program loaded without a Core ML
runtime, and gatepack's metadata checked against it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gatepack.converters.description import parse
from gatepack.converters.errors import InputError
from gatepack.converters.fileio import contained_file, parse_json, read_bytes, read_json
from gatepack.converters.formats.coreml.common import (
    METADATA_KEY,
    _ct,
    _mil_types,
    _ops,
    _quiet,
    safe_name,
)
from gatepack.schemas.layer import (
    OUTPUT_ROLES,
    state_roles,
)


@dataclass(frozen=True)
class _PackageFiles:
    """The files of an ``.mlpackage`` that gatepack reads, found through its ``Manifest.json``.

    A package is ``Manifest.json`` plus ``Data/``; the manifest's ``itemInfoEntries`` map ids to
    ``{"path", "name", "author", ...}`` (paths relative to ``Data/``), and ``rootModelIdentifier`` names
    the model specification's entry. The weights directory is the entry named ``weights``; the MIL
    program's blob values name files in it by base name (``@model_path/weights/weight.bin``). Every one
    of these paths is checked to stay inside the package before anything is opened, and coremltools
    is handed the parsed specification, never the package path (its package reader rewrites a
    ``Manifest.json`` that is not in its own canonical form, even when it then fails).
    """

    manifest: Path
    model: Path
    weights_dir: Path | None


def _package_files(path: Path) -> _PackageFiles:
    manifest_file = path / "Manifest.json"
    if not os.path.lexists(manifest_file):
        raise InputError(f"{path}: not an ML Program package (no Manifest.json)")
    manifest = read_json(contained_file(path, "Manifest.json", f"{path}: Manifest.json"))
    at = f"{manifest_file}: "
    fields = manifest if isinstance(manifest, dict) else {}
    entries = fields.get("itemInfoEntries")
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        raise InputError(f"{at}itemInfoEntries is missing or not an object of item objects")
    root = fields.get("rootModelIdentifier")
    if not isinstance(root, str) or root not in entries:
        raise InputError(f"{at}rootModelIdentifier {root!r} names no entry of itemInfoEntries")
    data = path / "Data"
    model = contained_file(data, entries[root].get("path"), f"{at}item {root!r} path")
    weights_dir = None
    for key, entry in entries.items():
        if entry.get("name") == "weights" and entry.get("author", "com.apple.CoreML") == "com.apple.CoreML":
            relative = entry.get("path")
            if not isinstance(relative, str) or Path(relative).is_absolute():
                raise InputError(f"{at}item {key!r} path {relative!r} is not a path inside the package")
            weights_dir = (data / relative).resolve()
            if not weights_dir.is_relative_to(data.resolve()) or not weights_dir.is_dir():
                raise InputError(f"{at}item {key!r} path {relative!r} is not a directory inside the package")
    return _PackageFiles(manifest_file, model, weights_dir)


def _blob_files(message, found: set[str]) -> set[str]:
    """The file names of every blob value in a MIL program specification (a walk over the protobuf)."""
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.name == "BlobFileValue":
            found.add(value.fileName)
            continue
        repeated = (
            descriptor.is_repeated
            if hasattr(descriptor, "is_repeated")
            else descriptor.label == descriptor.LABEL_REPEATED
        )
        values = value if repeated else [value]
        if descriptor.message_type.GetOptions().map_entry:
            values = value.values()
            if not values or not hasattr(next(iter(values)), "ListFields"):
                continue
        for item in values:
            _blob_files(item, found)
    return found


def _package_key(files: _PackageFiles) -> tuple:
    """The package's identity on disk: its files' paths, sizes and modification times."""
    listed = [files.manifest, files.model] + (
        sorted(f for f in files.weights_dir.iterdir()) if files.weights_dir else []
    )
    return tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in listed)


_LOADED: dict[tuple, tuple] = {}  # the last package read: verification reads one package once per layer


def _load_program(path: Path):
    """(main function, gatepack metadata or None) of the package at ``path``, without a Core ML
    runtime; the last package read is kept while its files are unchanged."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: not an ML Program package (a .mlpackage is a directory)")
    files = _package_files(path)
    key = _package_key(files)
    if key not in _LOADED:
        loaded = _read_program(path, files)
        _LOADED.clear()
        _LOADED[key] = loaded
    return _LOADED[key]


def _read_program(path: Path, files: _PackageFiles):
    _ct()
    from coremltools.converters.mil.frontend.milproto.load import load
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(read_bytes(files.model))
    except Exception as err:  # protobuf's DecodeError and friends
        raise InputError(
            f"{files.model}: not a readable Core ML model specification ({' '.join(str(err).split())[:160]})"
        ) from None
    if spec.WhichOneof("Type") != "mlProgram":
        raise InputError(f"{path}: a Core ML {spec.WhichOneof('Type')} model, not an ML Program")
    blobs = _blob_files(spec.mlProgram, set())
    if blobs and files.weights_dir is None:
        raise InputError(
            f"{files.manifest}: the program reads weight files {sorted(blobs)} but the manifest has no weights item"
        )
    for name in blobs:  # the loader opens weights_dir / base name: each must be a regular file inside the package
        assert files.weights_dir is not None  # (refused above)
        contained_file(files.weights_dir, name.split("/")[-1], f"{files.model}: blob file {name!r}")
    try:
        with _quiet():
            program = load(
                spec, specification_version=spec.specificationVersion, file_weights_dir=str(files.weights_dir or "")
            )
    except Exception as err:  # blob reader and MIL errors for damaged packages
        raise InputError(f"{path}: coremltools cannot read the program ({' '.join(str(err).split())[:200]})") from None
    if "main" not in program.functions:
        raise InputError(f"{path}: the program has no 'main' function")
    text = dict(spec.description.metadata.userDefined).get(METADATA_KEY)
    meta = parse_json(text, f"{path}: metadata {METADATA_KEY!r}") if text else None
    function = program.functions["main"]
    return function, None if meta is None else _checked_metadata(path, meta, function)


PRECISIONS = ("fp32", "fp16")


def _checked_metadata(path: Path, meta: object, function) -> dict:
    """gatepack's metadata, every field typed and its interfaces checked against the program.

    ``names`` maps each source tensor name to the program's name for it, which is ``safe_name`` of
    it (gatepack's writer applies no other renaming): a mapping that renames otherwise, or swaps two
    tensors, is refused rather than feeding one tensor's data to another.
    """
    at = f"{path}: metadata {METADATA_KEY!r}"
    if not isinstance(meta, dict) or not isinstance(meta.get("layers", []), list):
        raise InputError(f"{at} is not an object with a 'layers' list")
    names = meta.get("names", {})
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in names.items()):
        raise InputError(f"{at}: 'names' {_short(names)} is not an object of source name -> Core ML name")
    renamed = {k: v for k, v in names.items() if v != safe_name(k)}
    if renamed:
        original, given = next(iter(renamed.items()))
        raise InputError(
            f"{at}: 'names' maps {original!r} to {given!r}; Core ML's name for it is {safe_name(original)!r}"
        )
    precision = meta.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise InputError(f"{at}: 'precision' {_short(precision)} is not one of {list(PRECISIONS)}")
    fp16 = _mil_types().fp16
    computes = "fp16" if any(v.dtype == fp16 for op in _ops(function) for v in op.outputs) else "fp32"
    if precision != computes:  # the precision sets verification's tolerance: it must be the program's
        raise InputError(f"{at}: 'precision' is {precision!r} but the program computes in {computes}")
    if meta.get("whole") is True:
        _check_whole_interface(path, names, function)
    else:
        _check_interfaces(path, [parse(path, entry) for entry in meta.get("layers", [])], names, function)
    return {**meta, "names": names, "precision": precision}


def _check_whole_interface(path: Path, names: dict, function) -> None:
    """A whole model's package: the source's input and output names (``names``) are the program's, each once."""
    program = set(function.inputs) | {v.name for v in function.outputs}
    if set(names.values()) != program:
        raise InputError(
            f"{path}: its metadata names the model's inputs and outputs {sorted(names.values())}; the program has "
            f"{sorted(program)}"
        )


def _short(value: object) -> str:
    return " ".join(repr(value).split())[:80]


def _check_interfaces(path: Path, described: list, names: dict, function) -> None:
    """The described layers' tensors are exactly the program's inputs and outputs, each input with the
    rank, static sizes and type its role gives it (x [S,N,I] or layout 1 [N,S,I]; states [D,N,H] or
    [N,D,H]; sequence_lens [N] int32): a description that contradicts the program is refused."""
    types = _mil_types()

    inputs, outputs = {}, set()
    for info in described:
        itf, d = info.interface, info.direction.count
        rows = (itf.batch_size, itf.seq_length) if itf.layout else (itf.seq_length, itf.batch_size)
        states = (itf.batch_size, d) if itf.layout else (d, itf.batch_size)
        roles = {"x": ((*rows, info.input_size), types.fp32), "sequence_lens": ((itf.batch_size,), types.int32)}
        for role, _ in state_roles(info.cell):
            roles[role] = ((*states, info.hidden_size), types.fp32)
        for role, (shape, dtype) in roles.items():
            if getattr(itf, role) and role not in info.constant_roles:  # a held constant is a const op, no input
                inputs[names.get(getattr(itf, role), getattr(itf, role))] = (info.name, role, shape, dtype)
        outputs |= {names.get(t, t) for t in (getattr(itf, r) for r in OUTPUT_ROLES) if t}
    declared = set(function.inputs)
    produced = {v.name for v in function.outputs}
    if set(inputs) != declared or outputs != produced:
        raise InputError(
            f"{path}: its metadata describes inputs {sorted(inputs)} and outputs {sorted(outputs)}; the program has "
            f"inputs {sorted(declared)} and outputs {sorted(produced)}"
        )
    for name, (layer, role, shape, dtype) in inputs.items():
        var = function.inputs[name]
        got = [d if isinstance(d, int) else "?" for d in var.shape]
        expected = [d if isinstance(d, int) else "?" for d in shape]
        if got != expected or var.dtype != dtype:
            raise InputError(
                f"{path}: layer {layer!r}: {role} {name!r} is {types.builtin_to_string(var.dtype)} {got} in the "
                f"program, its metadata says {types.builtin_to_string(dtype)} {expected}"
            )

"""The formats gatepack knows, collected from their registration records (docs/design.md, "Adding a format").

A format is one package, ``converters/formats/NAME/``:

* its ``registration`` module's ``INFO``, a ``FormatInfo`` (``converters.registration``): plain data the CLI reads at
  start-up — names, how a path is recognised (suffixes, marker files, a content check), whether it is read and/or
  written, its typed write options, its capability record, the sources it keeps whole, the pip extra it needs;
* the package itself (its ``__init__``), whose ``IMPLEMENTATION`` is a ``FormatImplementation``: ``read`` (every
  format), ``write`` and ``check`` (formats that are written), and optional hooks with defaults (its runtime, its own
  executor, its graph inputs, its whole-model finding, the precision its runtime computes in). Shared modules call
  these fields; they never probe a module for attributes.

``FORMATS`` holds every record found (``discover``: each directory of ``converters/formats`` with a
``registration.py``), in the order of their ``rank``. Implementations are imported only when a command needs them,
so the CLI starts fast. A read-only format (e.g. a training framework's weights) is a record with ``writes=False``
and an implementation without ``write``. This module and each format's own package are the only places that name a
format; everything else asks the records.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Sequence

from gatepack.converters.errors import InputError, UsageError
from gatepack.converters.registration import (  # noqa: F401  (the types, under the names modules import)
    STRATEGIES,
    FormatImplementation,
    FormatInfo,
    WriteOption,
    check_options,
)

if TYPE_CHECKING:
    from gatepack.converters.findings import Finding
    from gatepack.converters.model import Model
    from gatepack.schemas.layer import RecurrentLayer


def cell_refusal(info: FormatInfo, layer: "RecurrentLayer") -> "Finding | None":
    """The ``cell`` finding refusing ``layer`` when ``info``'s writer does not write its cell (None if it does)."""
    from gatepack.converters.findings import Finding, Status

    if info.writes_cell(layer.cell):
        return None
    others = [name for name, other in FORMATS.items() if other.writes and other.writes_cell(layer.cell)]
    return Finding(
        "cell",
        Status.UNSUPPORTED,
        f"gatepack does not write {layer.cell.op_name} layers as {info.title} yet",
        alternative=f"convert to {' or '.join(others)}, which gatepack writes {layer.cell.op_name} to",
    )


# ---------------------------------------------------------------------------------------- the records


def _load_registrations(directories: Sequence[str]) -> list[ModuleType]:
    """Each ``NAME/registration.py`` under ``directories`` (the formats package's path), imported as
    ``gatepack.converters.formats.NAME.registration`` without running ``NAME/__init__.py``, the format's
    implementation: while they load, a package not imported yet stands in ``sys.modules`` as a bare namespace
    (its ``__path__`` only), so that a record may import another's (BNNS the Apple family's ops from Core ML's) and
    start-up imports nothing heavy; the packages themselves load normally later."""
    found = sorted({(d.name, str(d.parent)) for root in directories for d in Path(root).iterdir() if _holds(d)})
    placeholders = [(f"{FORMATS_PACKAGE}.{name}", str(Path(root) / name)) for name, root in found]
    placeholders = [(package, path) for package, path in placeholders if package not in sys.modules]
    for package, path in placeholders:
        sys.modules[package] = ModuleType(package)
        sys.modules[package].__path__ = [path]
    try:
        return [importlib.import_module(f"{FORMATS_PACKAGE}.{name}.registration") for name, _ in found]
    finally:
        for package, _ in placeholders:
            del sys.modules[package]


def _holds(directory: Path) -> bool:
    return directory.is_dir() and (directory / "registration.py").is_file()


def discover(directories: Sequence[str] | None = None) -> dict[str, FormatInfo]:
    """The records of every format package under ``directories`` (default: ``converters/formats``' path), by name,
    in the order of their ``rank`` (then name)."""
    if directories is None:
        import gatepack.converters.formats as formats

        directories = list(formats.__path__)
    infos = [module.INFO for module in _load_registrations(directories)]
    for info in infos:
        if not isinstance(info, FormatInfo):
            raise TypeError(f"the registration of {info!r} is not a FormatInfo")
    return {info.name: info for info in sorted(infos, key=lambda info: (info.rank, info.name))}


FORMATS_PACKAGE = "gatepack.converters.formats"
FORMATS: dict[str, FormatInfo] = discover()


def keeps_whole(model: "Model", target: str) -> bool:
    """Whether ``target`` writes ``model`` whole, the operators around its layers too: the model has some and the
    user did not ask for the layers alone, it was read from a file, and the target's record keeps whole models of
    the source's format (``keeps_whole_from``). The one test every writer and the report ask."""
    info = check_name(target)
    return model.keeps_whole and model.path is not None and model.format in info.keeps_whole_from


def registration(name: str) -> ModuleType:
    """The registration module of format ``name`` (``discover`` loaded it; looked up, not imported, so that its
    package's implementation is not)."""
    check_name(name)
    return sys.modules[f"{FORMATS_PACKAGE}.{name}.registration"]


def runtime_name(value: str | None) -> str:
    """The runtime an ONNX artifact is written for, in lower case (None: onnxruntime's CPU provider): ONNX's
    ``runtime`` write option (``formats.onnx.registration.runtime_name``), asked by the API."""
    name: str = registration("onnx").runtime_name(value)
    return name


def readers() -> list[str]:
    """The formats gatepack reads, in registry order (asked of ``FORMATS`` at each call: a format registered
    later is one too)."""
    return [name for name, info in FORMATS.items() if info.reads]


def writers() -> list[str]:
    """The formats gatepack writes, in registry order (asked of ``FORMATS`` at each call)."""
    return [name for name, info in FORMATS.items() if info.writes]


def takers(option: str) -> list[str]:
    """The formats whose writer takes the write option named ``option`` (its API keyword), in registry order."""
    return [name for name, info in FORMATS.items() if option in info.option_names]


def all_write_options() -> dict[str, WriteOption]:
    """Every write option of every format, once (formats that share an option share its definition)."""
    found: dict[str, WriteOption] = {}
    for info in FORMATS.values():
        for option in info.write_options:
            if found.setdefault(option.name, option) is not option:
                raise AssertionError(f"two definitions of write option {option.name!r}")
    return found


def as_path(value: object) -> Path:
    """``value`` as a path; UsageError naming what it is otherwise (an in-memory ``onnx.ModelProto`` is taken by
    the API's entry points, which save it first: ``as_source``)."""
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    if type(value).__name__ == "ModelProto":
        raise UsageError(
            "an in-memory onnx.ModelProto where a file is needed",
            hint="save it first: onnx.save(model, 'model.onnx'), then pass 'model.onnx'",
        )
    raise UsageError(f"a {type(value).__name__} where a path was expected", hint="pass the artifact's path")


def as_source(value: Any) -> Any:
    """``value``, or for an in-memory ``onnx.ModelProto`` the path of a copy saved in a private temporary directory
    (removed when the process exits): gatepack verifies what it reads as a file, as a user's runtime loads it. A
    proto whose tensors point at external data it has not loaded is refused (no base directory to find it)."""
    if type(value).__name__ != "ModelProto":
        return value
    import atexit
    import shutil
    import tempfile

    import onnx

    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in value.graph.initializer):
        raise UsageError(
            "an in-memory onnx.ModelProto whose external data is not loaded (its tensors name files relative to a "
            "directory it does not record)",
            hint="pass the model's path, or onnx.load it with its external data",
        )
    directory = Path(tempfile.mkdtemp(prefix="gatepack-model-proto-"))
    atexit.register(shutil.rmtree, directory, True)
    path = directory / "model_proto.onnx"
    large = sum(t.ByteSize() for t in value.graph.initializer) > 1_800_000_000  # a file holds 2 GiB at most
    if large:  # saving with external data edits the proto: the user's stays as it is
        copy = onnx.ModelProto()
        copy.CopyFrom(value)
        value = copy
    onnx.save_model(value, str(path), save_as_external_data=large, location="model_proto.onnx.data")
    return path


def detect(path: str | Path, *, writing: bool = False) -> str:
    """The format of ``path`` from its suffix, else (for a directory) from the marker files it holds.

    A path gatepack cannot read is refused with what it looks like and the command that exports
    it to ONNX (``foreign_kind``): InputError for an existing input, UsageError otherwise.
    """
    p = as_path(path)
    suffix = p.suffix.lower()
    named = [name for name, info in FORMATS.items() if suffix and suffix in info.suffixes]
    if named:
        return named[0]
    if p.is_dir():
        # a marker that exists is enough to name the format: its reader then refuses anything but a regular file
        marked = [name for name, info in FORMATS.items() if any(os.path.lexists(p / m) for m in info.markers)]
        if marked:
            return marked[0]
    if not writing and p.is_file():
        head = _head_and_members(p)[0]  # a file named otherwise than its format's suffix, told by its first bytes
        sniffed = [name for name, info in FORMATS.items() if info.sniff is not None and info.sniff(head)]
        if sniffed:
            return sniffed[0]
    if not writing and (p.is_file() or p.is_dir()):
        kind = foreign_kind(p)
        if kind is not None:
            what, export = kind
            raise InputError(f"{path}: {what}; gatepack does not read it", hint=export)
    import difflib

    near = difflib.get_close_matches(suffix, [s for info in FORMATS.values() for s in info.suffixes], n=1)
    meant = f"did you mean {p.with_suffix(near[0]).name}? otherwise " if near and suffix else ""
    raise UsageError(
        f"{path}: cannot tell the format from the name", hint=f"{meant}pass --from/--to, one of {', '.join(FORMATS)}"
    )


# suffixes of model files gatepack writes in no format (an output named so would not read back as its target)
FOREIGN_SUFFIXES = {
    ".mlmodel": "Core ML's older single-file format",
    ".pt": "a PyTorch file",
    ".pth": "a PyTorch file",
    ".h5": "a Keras HDF5 model",
    ".keras": "a Keras model",
    ".pb": "a TensorFlow graph",
    ".npz": "a NumPy archive",
}


def check_output_name(path: str | Path, info: FormatInfo) -> None:
    """Refuse an output path whose suffix names another format (or a model file no format here writes), and a
    single-file format's path without its own suffix: what gatepack writes must read back as what it is."""
    suffix = Path(path).suffix.lower()
    if suffix in info.suffixes:
        return
    other = next((f for f in FORMATS.values() if suffix and suffix in f.suffixes), None)
    named = f"names the {other.name} format" if other else FOREIGN_SUFFIXES.get(suffix)
    if named is None and (info.is_directory or not info.suffixes):
        return  # a directory artifact may be named freely
    right = Path(path).with_suffix(info.suffixes[0]).name if info.suffixes else Path(path).stem
    why = (
        f"{suffix!r} is {named}"
        if other is None and named
        else f"{suffix!r} {named}"
        if named
        else (f"it does not end in {' or '.join(info.suffixes)}")
    )
    raise UsageError(f"{path}: --to {info.name} writes {info.artifact}, and {why}", hint=f"-o {right}")


TORCH_EXPORT = "export the module the weights belong to: torch.onnx.export(model, example_inputs, 'NAME.onnx')"
KERAS_EXPORT = "export it to ONNX: tf2onnx.convert.from_keras(keras.models.load_model(PATH), output_path='NAME.onnx')"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"


def foreign_kind(path: Path) -> tuple[str, str] | None:
    """(what ``path`` looks like, the command that exports it to ONNX) for the model files of other
    frameworks, told by their magic bytes where that is cheap (a zip archive's member names, the HDF5
    signature, the TFLite flatbuffer identifier, a pickle's protocol opcode) and else by their suffix;
    None for anything else. Nothing is unpickled or loaded: at most the first bytes and a zip's
    directory are read."""
    saved_model = f"export it to ONNX: python -m tf2onnx.convert --saved-model {path} --output NAME.onnx"
    if path.is_dir():
        found = os.path.lexists(path / "saved_model.pb") or os.path.lexists(path / "saved_model.pbtxt")
        return ("a TensorFlow SavedModel directory", saved_model) if found else None
    head, members = _head_and_members(path)
    suffix = path.suffix.lower()
    if head.startswith(HDF5_MAGIC):
        return "an HDF5 file (a Keras .h5 model or weights)", KERAS_EXPORT.replace("PATH", repr(str(path)))
    if members is not None:
        return _zip_kind(path, members)
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a Python pickle, e.g. a legacy torch.save checkpoint (gatepack never unpickles)", TORCH_EXPORT
    if suffix == ".bin" and os.path.lexists(path.with_suffix(".xml")):
        return f"the weights of the OpenVINO IR {path.with_suffix('.xml').name}", f"pass {path.with_suffix('.xml')}"
    by_suffix = {
        (".pt", ".pth", ".ckpt", ".bin", ".safetensors"): ("named like PyTorch weights", TORCH_EXPORT),
        (".keras", ".h5", ".hdf5"): ("named like a Keras model", KERAS_EXPORT.replace("PATH", repr(str(path)))),
        (".pb",): (
            "a TensorFlow protobuf (a frozen GraphDef or a SavedModel's saved_model.pb)",
            f"export it to ONNX: python -m tf2onnx.convert --graphdef {path} --inputs IN:0 --outputs OUT:0 --output "
            "NAME.onnx (a SavedModel: --saved-model on its folder)",
        ),
        (".mlmodel",): (
            "a Core ML model in the single-file format (a neural network; gatepack reads ML Programs, .mlpackage)",
            "export the original model to ONNX, or convert it with coremltools' ct.convert(..., "
            "convert_to='mlprogram') to an .mlpackage",
        ),
        (".npz", ".npy"): (
            "NumPy arrays, not a model (gatepack takes .npz files as run --inputs)",
            "build the model in its framework and export that to ONNX (torch.onnx.export, tf2onnx)",
        ),
    }
    return next((kind for suffixes, kind in by_suffix.items() if suffix in suffixes), None)


def _head_and_members(path: Path) -> tuple[bytes, list[str] | None]:
    """The first 64 bytes of a regular file, and its member names if it is a zip archive (else None)."""
    import zipfile

    from gatepack.converters.fileio import open_regular

    try:
        with open_regular(path) as handle:
            head = handle.read(64)
            if not head.startswith(ZIP_MAGIC):
                return head, None
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                return head, archive.namelist()[:10_000]
    except (InputError, OSError, zipfile.BadZipFile, ValueError):
        return b"", None


def _zip_kind(path: Path, members: list[str]) -> tuple[str, str]:
    """What a zip archive holds, from its member names alone."""
    if any(m.endswith("data.pkl") or m.endswith("constants.pkl") for m in members):
        script = any("/code/" in m or m.startswith("code/") for m in members)
        what = "a TorchScript archive" if script else "a PyTorch state dict or checkpoint (torch.save)"
        return f"{what} (gatepack never unpickles)", TORCH_EXPORT
    if "config.json" in members and any(m.endswith(".h5") for m in members):
        return "a Keras 3 model (.keras)", KERAS_EXPORT.replace("PATH", repr(str(path)))
    if members and all(m.endswith(".npy") for m in members):
        return (
            "NumPy arrays (.npz), not a model (gatepack takes .npz files as run --inputs)",
            "build the model in its framework and export that to ONNX (torch.onnx.export, tf2onnx)",
        )
    return "a zip archive, no model gatepack knows", "export the model to ONNX (torch.onnx.export, tf2onnx)"


def check_name(name: str) -> FormatInfo:
    if name not in FORMATS:
        raise UsageError(f"unknown format {name!r}", hint=f"one of {', '.join(FORMATS)}")
    return FORMATS[name]


def implementation(name: str) -> FormatImplementation:
    """The implementation of format ``name`` (its module's ``IMPLEMENTATION``), imported on first use."""
    info = check_name(name)
    module = importlib.import_module(info.module or f"gatepack.converters.formats.{name}")
    found = module.IMPLEMENTATION
    if not isinstance(found, FormatImplementation):
        raise TypeError(f"{module.__name__}.IMPLEMENTATION is not a FormatImplementation")
    return found


def reader(name: str) -> FormatImplementation:
    """The implementation of a format gatepack reads; UsageError for one it only writes."""
    if not check_name(name).reads:
        raise UsageError(f"gatepack writes the {FORMATS[name].title} format but does not read it")
    return implementation(name)


def writer(name: str) -> tuple[FormatInfo, FormatImplementation]:
    """The entry and implementation of a format gatepack writes; UsageError for a read-only one."""
    info = check_name(name)
    if not info.writes:
        raise UsageError(f"gatepack reads the {info.title} format but does not write it", hint=f"one of {writers()}")
    return info, implementation(name)

"""The formats gatepack knows, how each is recognised from a path, and which are implemented.

A format module (``converters/formats/NAME.py``) provides:

* ``read(path, **options) -> Model``
* ``write(model, path, **options) -> None`` (atomic)
* ``check(layer, **options) -> list[Finding]`` (what writing the layer does to each feature)
* ``run_native(path, inputs) -> outputs`` (its own runtime, where one runs here)
* ``run_layer_native(layer, inputs) -> outputs`` (one layer of an artifact read from disk, on its own
  runtime, or - where none runs here - on gatepack's executor of the format's own semantics)
* optionally ``run_numpy(path, inputs) -> outputs`` (the artifact on that format-semantics executor;
  without it, ``run --engine numpy`` uses the canonical executor)

Modules are imported only when a command needs them, so the CLI starts fast.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from gatepack.converters.errors import UsageError
from gatepack.converters.fileio import OutputKind, has_markers, starts_like_protobuf, starts_with


@dataclass(frozen=True)
class FormatInfo:
    name: str
    title: str
    artifact: str
    runtime: str  # where `--engine native` runs it here
    implemented: bool
    write_options: tuple[str, ...] = ()
    is_directory: bool = False  # the artifact is a directory rather than a file
    companions: tuple[str, ...] = ()  # suffixes of files that belong to the artifact (.bin beside .xml)
    recognise: Callable[[Path], bool] = lambda _path: False  # an existing path is such an artifact
    interface_inputs: bool = (
        True  # `run` takes the layers' interface tensors (False: the format's own shapes, which it checks)
    )
    extra: str | None = None  # the pip extra that installs the framework this format needs (None: always installed)
    framework: str | None = None  # that framework's module

    @property
    def installed(self) -> bool:
        """Whether the framework this format needs is importable (checked without importing it)."""
        import importlib.util

        return self.framework is None or importlib.util.find_spec(self.framework) is not None

    @property
    def output_kind(self) -> OutputKind:
        """What an output of this format is: an existing path is replaced only if ``recognise`` says so."""
        return OutputKind(self.title, self.is_directory, self.recognise, self.companions)


# The first byte of each field tag of onnx.ModelProto (field number << 3 | wire type): ir_version 1,
# producer_name 2 ... graph 7, opset_import 8, metadata_props 14, and the two-byte tags of training_info 20,
# functions 25, configuration 26.
ONNX_FIRST_TAGS = bytes([0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2])

FORMATS: dict[str, FormatInfo] = {
    f.name: f
    for f in (
        FormatInfo(
            "onnx",
            "ONNX",
            "NAME.onnx (+ NAME.onnx.data with external data)",
            "onnxruntime (CPU)",
            True,
            ("opset", "layout_encoding", "external_data"),
            companions=(".onnx.data",),
            recognise=starts_like_protobuf(".onnx", ONNX_FIRST_TAGS),
        ),
        FormatInfo(
            "openvino",
            "OpenVINO IR",
            "NAME.xml + NAME.bin",
            "OpenVINO CPU",
            True,
            ("strategy", "compress_to_fp16"),
            companions=(".bin",),
            recognise=starts_with(b"<net", ".xml"),
            extra="openvino",
            framework="openvino",
        ),
        FormatInfo(
            "directml",
            "DirectML (DxDispatch model)",
            "directory with model.json",
            "none here (NumPy executor of DirectML semantics)",
            True,
            ("emit_cpp", "seq_length", "batch_size"),
            is_directory=True,
            recognise=has_markers("model.json", "gatepack.json"),
            interface_inputs=False,
        ),
        FormatInfo(
            "coreml",
            "Core ML ML Program",
            "NAME.mlpackage",
            "none here (NumPy executor of MIL semantics)",
            True,
            ("strategy", "minimum_deployment_target", "compress_to_fp16"),
            is_directory=True,
            recognise=has_markers("Manifest.json"),
            extra="coreml",
            framework="coremltools",
        ),
        FormatInfo(
            "bnns",
            "BNNSGraph bundle",
            "directory with bnns.json",
            "none here (NumPy executor of BNNS semantics)",
            True,
            is_directory=True,
            recognise=has_markers("bnns.json"),
        ),
    )
}


def detect(path: str | Path) -> str:
    """The format of ``path`` from its name (and, for directories, their content)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix == ".xml":
        return "openvino"
    if suffix == ".mlpackage":
        return "coreml"
    # a marker that exists is enough to name the format: its reader then refuses anything but a regular file
    if p.is_dir() and os.path.lexists(p / "bnns.json"):
        return "bnns"
    if suffix == ".json" or (p.is_dir() and os.path.lexists(p / "model.json")):
        return "directml"
    raise UsageError(
        f"{path}: cannot tell the format from the name", hint=f"pass --from/--to, one of {', '.join(FORMATS)}"
    )


def check_name(name: str) -> FormatInfo:
    if name not in FORMATS:
        raise UsageError(f"unknown format {name!r}", hint=f"one of {', '.join(FORMATS)}")
    return FORMATS[name]


def module(name: str) -> ModuleType:
    """The implementation of format ``name``; UsageError if it is not implemented yet."""
    info = check_name(name)
    if not info.implemented:
        raise UsageError(
            f"the {info.title} format is not implemented yet in this version of gatepack", hint="see `gatepack formats`"
        )
    return importlib.import_module(f"gatepack.converters.formats.{name}")

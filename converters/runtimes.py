"""Importing the runtimes gatepack drives, so that they write nothing and print nothing of their own.

* onnxruntime records a device id under ``~/.cache/Microsoft/DeveloperTools`` when it is imported,
  unless ``ORT_DISABLE_TELEMETRY`` is set before the import: gatepack sets it (unless the user did).
* OpenVINO's Python package starts its telemetry (a client id under ``~/intel`` and events sent in the
  background) when ``openvino`` is imported, through ``openvino.tools.ovc``, which falls back to a
  no-op stub when ``openvino_telemetry`` cannot be imported. gatepack hides that module during its
  own first import of ``openvino`` only, so the stub is used; nothing else in the process changes.

Neither runtime offers another switch that needs no file in the user's home directory.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from gatepack.converters.errors import RuntimeFailure

OPENVINO_MISSING = "OpenVINO is not installed: the openvino format needs the openvino extra"
COREML_MISSING = "coremltools is not installed: the coreml format needs the coreml extra"
LITERT_MISSING = "ai-edge-litert is not installed: the litert format needs the litert extra"


def onnxruntime() -> ModuleType:
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeFailure(
            "onnxruntime is not installed (a dependency of gatepack)", hint="pip install onnxruntime"
        ) from None
    return ort


def openvino() -> tuple[ModuleType, ModuleType]:
    """``openvino`` and its ``opset15`` builders."""
    if "openvino" not in sys.modules and "openvino_telemetry" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # an ImportError for ovc
        try:
            import openvino  # noqa: F401
        except ImportError:
            raise RuntimeFailure(OPENVINO_MISSING, hint="pip install 'gatepack[openvino]'") from None
        finally:
            del sys.modules["openvino_telemetry"]
    try:
        import openvino as ov
        import openvino.opset15 as ops
    except ImportError:
        raise RuntimeFailure(OPENVINO_MISSING, hint="pip install 'gatepack[openvino]'") from None
    return ov, ops


def coremltools() -> ModuleType:
    """coremltools, imported without the messages it logs on Linux about its missing Core ML runtime
    ("Failed to load _MLModelProxy ..."): every import of one of its modules goes through here first."""
    if sys.modules.get("coremltools") is not None:  # imported already: nothing to quieten
        return sys.modules["coremltools"]
    import contextlib
    import io
    import logging

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            logging.disable(logging.WARNING)
            try:
                import coremltools as ct
            finally:
                logging.disable(logging.NOTSET)
    except ImportError:
        raise RuntimeFailure(
            COREML_MISSING, hint="pip install 'gatepack[coreml]' (coremltools has wheels for Linux and macOS)"
        ) from None
    return ct


def litert() -> tuple[ModuleType, ModuleType]:
    """ai-edge-litert's official TFLite schema (flatbuffer object API, ``schema_py_generated``) and its
    ``interpreter`` module; both import in ~0.1 s and print nothing."""
    try:
        import ai_edge_litert.interpreter as interpreter
        import ai_edge_litert.schema_py_generated as schema
    except ImportError:
        raise RuntimeFailure(LITERT_MISSING, hint="pip install 'gatepack[litert]'") from None
    return schema, interpreter

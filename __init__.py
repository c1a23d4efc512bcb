"""gatepack: move GRU, RNN and LSTM layers between ONNX, OpenVINO, DirectML, Core ML, BNNS and
LiteRT without silently breaking them, and prove every conversion numerically.

>>> import gatepack as gp
>>> model = gp.load("fixtures/gru_lbr1_bidirectional.onnx")
>>> result = gp.convert("fixtures/gru_lbr1_bidirectional.onnx", "out/gru.onnx", to="onnx")
>>> result.passed
True

The API lives in ``gatepack.converters`` and is re-exported here. Importing gatepack loads no
framework (onnx, onnxruntime, OpenVINO, coremltools): the functions that need one import it, and the
types below are loaded on first use.

This file is the package's ``__init__``: the repository's top level is mapped onto the ``gatepack``
package at build time (``cli.py`` -> ``gatepack.cli``, ``converters/`` -> ``gatepack.converters``,
``schemas/`` -> ``gatepack.schemas``; see ``pyproject.toml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatepack.converters import (
    GatepackError,
    InputError,
    NoRecurrentLayerError,
    RefusedError,
    Result,
    RuntimeFailure,
    UsageError,
    VerificationError,
    convert,
    input_names,
    load,
    report,
    run,
    save,
    state_pairs,
    verify,
)
from gatepack.version import __version__

__all__ = [
    "__version__",
    "load",
    "save",
    "convert",
    "verify",
    "report",
    "run",
    "input_names",
    "state_pairs",
    "Model",
    "RecurrentLayer",
    "Report",
    "Result",
    "Verification",
    "GatepackError",
    "UsageError",
    "InputError",
    "NoRecurrentLayerError",
    "RefusedError",
    "VerificationError",
    "RuntimeFailure",
]

_LAZY = {
    "Model": "gatepack.converters.model",
    "RecurrentLayer": "gatepack.schemas.layer",
    "Report": "gatepack.converters.reporting",
    "Verification": "gatepack.converters.verification",
}

if TYPE_CHECKING:  # what type checkers see of the lazy names: the types themselves (and no catch-all __getattr__)
    from gatepack.converters.model import Model
    from gatepack.converters.reporting import Report
    from gatepack.converters.verification import Verification
    from gatepack.schemas.layer import RecurrentLayer
else:

    def __getattr__(name: str) -> object:
        """The public types, imported on first use (they need numpy)."""
        if name in _LAZY:
            import importlib

            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module 'gatepack' has no attribute {name!r}")

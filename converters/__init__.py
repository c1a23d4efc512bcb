"""gatepack's Python API: convert GRU, RNN and LSTM layers between runtimes and prove the result numerically.

>>> import gatepack as gp
>>> model = gp.load("fixtures/gru_lbr1_bidirectional.onnx")
>>> result = gp.convert("fixtures/gru_lbr1_bidirectional.onnx", "out/gru.onnx", to="onnx")
>>> result.verification.passed
True
>>> gp.report(model, targets=["onnx"]).render("text")   # doctest: +SKIP

This package's front door: the public functions live in ``converters.api`` (each builds a plan and runs it), over
the application layer's modules, each one role (docs/design.md, "The application layer"):

* ``plan``: ``ConversionPlan``, every option of ``convert`` checked once (and ``ComparisonPlan``, ``verify``'s);
* ``pipeline``: the steps a plan runs through (read, specialise, prepare, choose, write, verify), ``report``'s and
  ``save``'s;
* ``reading``: a source read and specialised; ``refusals``: what stops a conversion; ``verifying``: the written
  artifact verified, two artifacts compared; ``running``: an artifact run; ``result``: what ``convert`` returns.

Heavy frameworks (onnx, onnxruntime, OpenVINO, coremltools) are imported by the functions that need
them, never by ``import gatepack``.
"""

from __future__ import annotations

# the public functions (re-exported, as the errors, the plan's types and the CLI's --engine choices below)
from gatepack.converters.api import convert, engine_for, input_names, load, report, run, save, state_pairs, verify  # noqa: F401
from gatepack.converters.errors import (  # noqa: F401  (re-exported)
    GatepackError,
    InputError,
    NoRecurrentLayerError,
    RefusedError,
    RuntimeFailure,
    UsageError,
    VerificationError,
)
from gatepack.converters.plan import READ_OPTIONS, Acceptance, ConversionPlan  # noqa: F401  (re-exported)
from gatepack.converters.result import Result
from gatepack.converters.running import ENGINES  # noqa: F401  (re-exported: the CLI's --engine choices)

__all__ = ["load", "save", "convert", "verify", "report", "run", "input_names", "Result"]

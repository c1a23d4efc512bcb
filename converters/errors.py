"""gatepack's exceptions. Each maps to one CLI exit code and prints as one line.

Exit codes (documented in the README):

==  ======================  ===========================================================
 0  -                       success
 1  GatepackError           unexpected failure (a bug: rerun with --debug for a traceback)
 2  UsageError              wrong command-line usage or API arguments
 3  InputError              unreadable, malformed or inconsistent input (model or tensors)
 4  RefusedError            conversion refused: a feature the target cannot express
 5  VerificationError       converted artifact disagrees with its source beyond tolerance
 6  RuntimeFailure          a runtime (onnxruntime, OpenVINO) failed to run an artifact
==  ======================  ===========================================================
"""

from __future__ import annotations


class GatepackError(Exception):
    """Base class. ``str(err)`` is a complete one-line message; ``hint`` suggests a way out."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        return f"{text} (hint: {self.hint})" if self.hint else text


class UsageError(GatepackError):
    exit_code = 2


class InputError(GatepackError):
    exit_code = 3


class NoRecurrentLayerError(InputError):
    """The model holds no recurrent (GRU/RNN/LSTM) layer gatepack can read."""


class RefusedError(GatepackError):
    exit_code = 4

    def __init__(self, message: str, *, findings: list | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.findings = findings or []


class VerificationError(GatepackError):
    exit_code = 5

    def __init__(self, message: str, *, verification: object = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.verification = verification


class RuntimeFailure(GatepackError):
    exit_code = 6


def where(path: object = None, layer: str | None = None) -> str:
    """The 'file, layer' prefix of an error message."""
    parts = [str(p) for p in (path, f"layer {layer!r}" if layer else None) if p]
    return ": ".join(parts) + ": " if parts else ""

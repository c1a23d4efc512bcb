"""Shared test set-up.

The suite runs with a private home: before anything else, ``HOME`` and the XDG directories point into one
temporary directory for the session (made by the first process, inherited by pytest-xdist's workers and by
every subprocess a test starts), so nothing a test, a runtime or a browser writes lands in the user's home.
It is removed at the end, after the summary has said what was written there."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

PRIVATE_HOME_VARIABLE = "GATEPACK_TEST_HOME"
HOME_VARIABLES = {"HOME": "", "XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache", "XDG_DATA_HOME": ".local/share"}


def _private_home() -> Path:
    """The session's private home, made once (the controller) and taken over by xdist's workers."""
    given = os.environ.get(PRIVATE_HOME_VARIABLE)
    home = Path(given) if given else Path(tempfile.mkdtemp(prefix="gatepack-test-home-"))
    os.environ[PRIVATE_HOME_VARIABLE] = str(home)
    for variable, below in HOME_VARIABLES.items():
        os.environ[variable] = str(home / below)
    return home


PRIVATE_HOME = _private_home()
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")  # as gatepack sets it: tests import onnxruntime themselves
OWNS_PRIVATE_HOME = not os.environ.get("PYTEST_XDIST_WORKER")


def written_under(home: Path) -> list[str]:
    """The files under ``home``, relative to it."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sixth-format",
        action="store_true",
        help="register a sixth, test-only format (tests/sixth_format.py) for the whole session, before collection: "
        "every test that takes its formats from the registry runs with six",
    )


def pytest_configure(config: pytest.Config) -> None:
    from mil_mutations import apply_from_environment

    apply_from_environment()  # bench/mil_mutations.py: one deliberate interpreter bug for the whole session
    if config.getoption("--sixth-format"):
        import sixth_format

        sixth_format.register()


def pytest_report_header(config: pytest.Config) -> list[str]:
    header = [f"private home: {PRIVATE_HOME} (HOME and XDG directories)"]
    if config.getoption("--sixth-format"):
        header.append("registry: a sixth format, 'dummy' (--sixth-format)")
    return header


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not OWNS_PRIVATE_HOME:
        return
    written = written_under(PRIVATE_HOME)
    shown = ", ".join(written[:5]) + (f" and {len(written) - 5} more" if len(written) > 5 else "")
    terminalreporter.write_line(
        f"private home: {len(written)} file(s) written by the tests' tools{': ' * bool(written)}{shown}"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if OWNS_PRIVATE_HOME:
        shutil.rmtree(PRIVATE_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _forget_coremltools_tensor_types():
    """coremltools memoises one class per tensor type, and symbolic shapes make new types at every
    conversion: without this the heap, and the gc.collect inside every ct.convert, grow test after
    test (only once coremltools is loaded)."""
    yield
    if "coremltools" not in sys.modules:
        return
    from coremltools.converters.mil.mil.types import type_tensor

    for cell in type_tensor.tensor.__closure__ or ():
        if isinstance(cell.cell_contents, dict):
            cell.cell_contents.clear()

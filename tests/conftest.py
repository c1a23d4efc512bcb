"""Shared test set-up."""

from __future__ import annotations

import sys

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sixth-format",
        action="store_true",
        help="register a sixth, test-only format (tests/sixth_format.py) for the whole session, before collection: "
        "every test that takes its formats from the registry runs with six",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--sixth-format"):
        import sixth_format

        sixth_format.register()


def pytest_report_header(config: pytest.Config) -> str | None:
    return "registry: a sixth format, 'dummy' (--sixth-format)" if config.getoption("--sixth-format") else None


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

"""Shared test set-up."""

from __future__ import annotations

import sys

import pytest


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

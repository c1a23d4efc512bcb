"""The dummy format's registration record, the way a real format's is (plain data, nothing heavy imported)."""

from __future__ import annotations

import json

from gatepack.converters.fileio import starts_with
from gatepack.converters.registration import FormatInfo
from gatepack.schemas.cells import Cell

NAME = "dummy"
MAGIC = "gatepack-test-layers"

INFO = FormatInfo(
    NAME,
    "test layers (JSON)",
    f"NAME.{NAME}",
    "none here (gatepack's executor)",
    runs_here=False,
    suffixes=(f".{NAME}",),
    cells=tuple(cell.value for cell in Cell),
    recognise=starts_with(json.dumps({"format": MAGIC})[:-1].encode(), f".{NAME}"),
)

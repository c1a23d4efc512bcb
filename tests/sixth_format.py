"""A sixth format for tests: one folder, ``tests/plugin_formats/dummy/`` (the canonical layers as one JSON file,
``NAME.dummy``), holding what a real format's package holds and nothing else: ``registration.py`` (its record) and
``__init__.py`` (its ``IMPLEMENTATION``: read, write, check). Nothing outside the folder names it.

``registered(monkeypatch)`` adds the folder's parent to the formats package's path and takes the registry's
records from there (``registry.discover``) for one test; ``register()`` does so for a whole test session (the
``--sixth-format`` option of tests/conftest.py), so that the tests which take their formats from the registry run
with six."""

from __future__ import annotations

from pathlib import Path

import gatepack.converters.formats as formats
from gatepack.converters import registry
from gatepack.converters.registration import FormatInfo

DIRECTORY = Path(__file__).resolve().parent / "plugin_formats"
FOLDER = DIRECTORY / "dummy"
NAME = FOLDER.name


def register() -> None:
    """Add the format to the registry for the rest of the process, as if its folder were in converters/formats."""
    formats.__path__.append(str(DIRECTORY))
    registry.FORMATS.update(registry.discover([str(DIRECTORY)]))


def registered(monkeypatch) -> FormatInfo:
    """Add the format to the registry until ``monkeypatch`` undoes it (the end of the test)."""
    monkeypatch.setattr(formats, "__path__", [*formats.__path__, str(DIRECTORY)])
    for name, info in registry.discover([str(DIRECTORY)]).items():
        monkeypatch.setitem(registry.FORMATS, name, info)
    return registry.FORMATS[NAME]

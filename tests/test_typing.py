"""gatepack's annotations, as a type checker sees the installed package: mypy (``mypy -p gatepack``, the
``[tool.mypy]`` section of pyproject.toml) finds no error, and every name the package root exports has its
real type (the lazily imported classes too).

mypy follows the package-dir mapping (the repository's top level is ``gatepack``) only through the link tree a
strict editable install writes under ``build/`` (``pip install -e '.[test]' --config-settings
editable_mode=strict``, as ``.ci/run`` does); the default editable install's import hook is invisible to it.
The tree links the files present when it was written: a module added since needs the install run again.
mypy's cache is ``.mypy_cache/`` at the top of the checkout (git ignores it), so a second run is quick.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

api = pytest.importorskip("mypy.api", reason="mypy is in the test extra (pip install -e '.[test]')")

STRICT_INSTALL = "pip install -e '.[test]' --config-settings editable_mode=strict"


def _mypy(*targets: str) -> tuple[str, int]:
    """mypy with the committed configuration on ``targets``: (its report, its exit status)."""
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache"), *targets]
    )
    return stdout + stderr, status


@pytest.fixture(scope="module")
def link_tree() -> Path:
    """The directory on the import path whose ``gatepack`` is this checkout's, linked file by file (the strict
    editable install's), holding every file git tracks in the package."""
    root_init = (ROOT / "__init__.py").resolve()
    found = None
    for entry in sys.path:
        package = Path(entry or ".") / "gatepack"
        init = package / "__init__.py"
        if package.is_dir() and package.resolve() != ROOT.resolve() and init.exists() and init.resolve() == root_init:
            found = package
            break
    if found is None:
        pytest.fail(
            f"no strict editable install of this checkout ({ROOT}) is on the import path, so mypy would check "
            f"another copy of gatepack or none: {STRICT_INSTALL}"
        )
    tracked = subprocess.run(
        ["git", "ls-files", "converters", "schemas", "cli.py", "__init__.py", "__main__.py", "py.typed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if tracked.returncode == 0:
        linked = [p for p in tracked.stdout.split() if p.endswith((".py", ".typed"))]
        missing = sorted(p for p in linked if not (found / p).exists())
        assert not missing, f"the install predates {missing}: run `{STRICT_INSTALL}` again"
    return found


def test_mypy_finds_no_error_in_the_installed_package(link_tree):
    report, status = _mypy("-p", "gatepack")
    assert status == 0 and "Success: no issues found" in report, report


def test_every_exported_name_has_its_type(link_tree, tmp_path):
    """``gatepack.<name>`` for each name of ``__all__``, read by mypy: none is unknown or Any (the package
    root's lazy ``__getattr__`` is hidden from type checkers, the lazily imported classes imported for them)."""
    import gatepack

    usage = tmp_path / "uses_gatepack.py"
    usage.write_text(
        "import gatepack\n\n"
        + "".join(f"reveal_type(gatepack.{name})\n" for name in gatepack.__all__)
        + "gatepack.no_such_name\n"
    )
    report, _ = _mypy(str(usage))
    revealed = [line for line in report.splitlines() if "Revealed type is" in line]
    assert len(revealed) == len(gatepack.__all__), report
    assert not [line for line in revealed if '"Any"' in line], report
    errors = [line for line in report.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'no attribute "no_such_name"' in errors[0], report

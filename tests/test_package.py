"""The distribution as a user gets it: a wheel built from this checkout, installed (not editable) into a
fresh virtual environment, and used from a directory holding files named ``converters.py``,
``schemas.py`` and ``cli.py``, beside an installed package named ``converters`` (as PyPI's is): nothing
may shadow gatepack, and gatepack may install no generic top-level name. Also the code style (ruff).

The fresh environment sees this test environment's site-packages through a ``.pth`` file, so the
dependencies are not downloaded again; gatepack itself comes only from the wheel (a path added by a
``.pth`` file is searched, but its own ``.pth`` files - the editable install's finder - are not run).
"""

from __future__ import annotations

import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (found,) = dist.glob("gatepack-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> dict[str, Path]:
    """A fresh virtual environment with the wheel installed and a package named ``converters`` beside it."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "env")], check=True, timeout=300)
    python = root / "env" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    ours = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if Path(p).is_dir()]
    (purelib / "zz_test_dependencies.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    before = set(p.name for p in purelib.iterdir())
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    added = set(p.name for p in purelib.iterdir()) - before
    shadow = purelib / "converters"  # what `pip install converters` puts there: it must change nothing
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the unrelated PyPI package converters was imported')\n")
    work = root / "work"
    work.mkdir()
    for name in ("converters.py", "schemas.py", "cli.py"):
        (work / name).write_text(f"raise ImportError('{name} in the working directory was imported')\n")
    bin_dir = python.parent
    return {"python": python, "work": work, "added": added, "gatepack": bin_dir / "gatepack"}


def _run(venv, *args, **kwargs):
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=venv["work"], timeout=600, **kwargs
    )


def test_the_wheel_holds_one_package_its_data_and_licenses(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"gatepack", wheel.name.split("-py")[0] + ".dist-info"}
    for data in ("bnns.schema.json", "report.schema.json", "dxdispatch_model.schema.json", "LICENSE.DirectML.txt"):
        assert f"gatepack/schemas/{data}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {
        "gatepack/__init__.py",
        "gatepack/__main__.py",
        "gatepack/cli.py",
        "gatepack/converters/__init__.py",
    } <= set(names)


def test_the_wheel_holds_every_tracked_module_and_data_file(wheel):
    """A new subpackage or data file left out of pyproject.toml's lists would install a gatepack that fails on
    import (or one type checkers skip, without ``py.typed``): every file git tracks under converters/ and
    schemas/ (modules, schemas, their licence and README) and the package's top-level files are in the wheel."""
    tracked = subprocess.run(
        ["git", "ls-files", "converters", "schemas", "cli.py", "version.py", "__init__.py", "__main__.py", "py.typed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    wanted = {f"gatepack/{p}" for p in tracked.stdout.split()}
    assert {"gatepack/py.typed", "gatepack/schemas/report.schema.json"} <= wanted
    assert wanted <= set(zipfile.ZipFile(wheel).namelist()), sorted(wanted - set(zipfile.ZipFile(wheel).namelist()))


def test_the_schemas_readme_names_every_file_there_and_nothing_outside():
    """schemas/README.md ships in the wheel: one table row per file in schemas/, and no path outside the package."""
    text = (ROOT / "schemas" / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)
    files = sorted(p.name for p in (ROOT / "schemas").iterdir() if p.is_file() and not p.name.startswith("."))
    assert sorted(rows) == files
    assert "../" not in text and "/work/" not in text


def test_dependencies_install_everywhere_and_backends_are_extras(wheel):
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith("METADATA"))).decode()
    requires = re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)
    plain = {re.split(r"[<>=;\[ ]", r)[0] for r in requires if "extra ==" not in r}
    assert plain == {"numpy", "onnx", "onnxruntime", "click"}  # all publish wheels for Windows, macOS and Linux
    for extra, package in (("openvino", "openvino"), ("coreml", "coremltools")):
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in requires), requires
    assert re.search(r"^Provides-Extra: all$", metadata, re.M)


def test_installed_package_is_gatepack_alone_and_nothing_shadows_it(venv):
    assert {n for n in venv["added"] if not n.endswith((".dist-info", ".pth"))} == {"gatepack"}
    version = _run(venv, venv["python"], "-c", "import gatepack, sys; print(gatepack.__version__, gatepack.__file__)")
    assert version.returncode == 0, version.stderr
    number, location = version.stdout.split()
    assert "site-packages" in location and str(ROOT) not in location
    cli_version = _run(venv, venv["gatepack"], "--version")
    assert cli_version.stdout.strip() == f"gatepack {number}"
    formats = _run(venv, venv["python"], "-m", "gatepack", "formats")
    assert formats.returncode == 0 and "bnns" in formats.stdout, formats.stderr


def test_installed_package_converts_a_whole_model_with_verification(venv):
    result = _run(
        venv, venv["gatepack"], "convert", FIXTURES / "realmodels" / "gtcrn_stream_simple.onnx", "--to", "openvino",
        "-o", venv["work"] / "out" / "gtcrn.xml",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "verification passed" in result.stdout and (venv["work"] / "out" / "gtcrn.bin").exists()


@pytest.mark.parametrize(
    "framework, target, extra, suffix",
    [("openvino", "openvino", "openvino", ".xml"), ("coremltools", "coreml", "coreml", ".mlpackage")],
)
def test_a_missing_backend_names_its_extra(venv, framework, target, extra, suffix):
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"  # as if the extra were not installed
        "from gatepack.cli import main\n"
        f"main(['convert', {str(FIXTURES / 'gru_lbr0.onnx')!r}, '--to', {target!r}, '-o', 'x{suffix}'])"
    )
    result = _run(venv, venv["python"], "-c", code)
    assert result.returncode == 6, result.stderr
    # a progress line ('gatepack convert: writing ... (1.4 s)') may precede the error when a step takes over a second
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("gatepack convert: ")]
    assert len(lines) == 1 and f"gatepack[{extra}]" in lines[0], result.stderr
    assert not list(venv["work"].glob("x*"))


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
    reason="ruff is in the test extra",
)
def test_code_style():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    for args in (["check", "."], ["format", "--check", "."]):
        result = subprocess.run([ruff, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert result.returncode == 0, result.stdout[-3000:]

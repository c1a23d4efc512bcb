"""A sixth format is one folder: with a dummy's folder added to the formats package's path (tests/sixth_format.py:
tests/plugin_formats/dummy/, the canonical layers as JSON), the registry finds its record, and the CLI's choices,
`gatepack formats`, the report (text, JSON and its schema) and `convert` take it in; nothing counts five and
nothing outside the folder names it. (The whole CLI and report test files run with it too:
`pytest tests/test_cli.py tests/test_report.py --sixth-format`.)"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import pytest
import sixth_format
from click.testing import CliRunner
from helpers import FIXTURES, Config, build_model, ort_reference, outputs_to_layout0, to_layout
from helpers import inputs as sample_inputs

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry
from gatepack.converters.reporting import report_schema

SOURCE = FIXTURES / "gru_lbr1_bidirectional.onnx"


@pytest.fixture()
def dummy(monkeypatch) -> registry.FormatInfo:
    """The dummy format in the registry for this test only (already there under --sixth-format)."""
    return sixth_format.registered(monkeypatch)


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_the_sixth_is_one_folder_that_nothing_else_names(dummy):
    """The folder holds a record and an implementation, the way a package under converters/formats does; no module
    of gatepack (cli.py, converters/, schemas/) nor the packaging names the dummy: the registry found it."""
    assert sorted(p.name for p in sixth_format.FOLDER.glob("*.py")) == ["__init__.py", "registration.py"]
    assert registry.registration(dummy.name).INFO is dummy
    assert registry.implementation(dummy.name).read.__module__ == f"{registry.FORMATS_PACKAGE}.{dummy.name}"
    root = Path(registry.__file__).resolve().parents[1]
    sources = [root / "cli.py", root / "pyproject.toml", *(root / "converters").rglob("*.py")]
    sources += list((root / "schemas").rglob("*"))
    assert not [p for p in sources if p.is_file() and dummy.name in p.read_text(errors="ignore")]


def test_the_registry_holds_six_and_the_cli_offers_the_sixth(dummy):
    assert len(registry.FORMATS) >= 6 and dummy.name in registry.writers() and dummy.name in registry.readers()
    help_text = invoke("convert", "--help").output
    assert f"--to [{'|'.join(registry.writers())}]" in " ".join(help_text.split())
    rows = [line.split()[0] for line in invoke("formats").output.splitlines()[1:] if not line.startswith(" ")]
    assert rows == list(registry.FORMATS) and rows[-1] == dummy.name
    (entry,) = [e for e in json.loads(invoke("formats", "--json").output) if e["name"] == dummy.name]
    assert entry["reads"] and entry["writes"] and entry["artifact"] == dummy.artifact


def test_the_report_has_a_column_and_a_summary_for_the_sixth(dummy):
    text = invoke("report", FIXTURES / "gru_lbr0.onnx").output
    header, row = text.splitlines()[1:3]
    assert header.split() == ["layer", *registry.writers()]
    assert row.split()[-1] == "exact" and f"\n{dummy.name}: 1 exact" in text
    data = json.loads(invoke("report", FIXTURES / "gru_lbr0.onnx", "--format", "json").output)
    assert list(data["layers"][0]["targets"]) == registry.writers()
    jsonschema.Draft202012Validator(report_schema()).validate(data)
    only = json.loads(invoke("report", FIXTURES / "gru_lbr0.onnx", "--to", dummy.name, "--json").output)
    assert list(only["layers"][0]["targets"]) == [dummy.name]
    assert f"## {dummy.name}" in gp.report(SOURCE).render("markdown")


@pytest.mark.parametrize("cell", ["GRU", "RNN", "LSTM"])
def test_convert_to_the_sixth_and_back_is_verified_against_onnxruntime(dummy, cell, tmp_path):
    """Written as the dummy (its name from the suffix or --to), read back, verified (on gatepack's executor: the
    dummy has no runtime, which the result says), then converted back to ONNX, whose file onnxruntime runs to
    its own outputs on the source."""
    cfg = Config(cell=cell, direction="bidirectional", initial_h=True, layout=1, seed=31)
    onnx.save(build_model(cfg), tmp_path / "source.onnx")
    out = tmp_path / f"layers{dummy.suffixes[0]}"
    done = invoke("convert", tmp_path / "source.onnx", "-o", out, "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["format"] == dummy.name and result["verification"]["passed"]
    assert any("gatepack's executor" in note for note in result["verification"]["notes"])
    assert registry.detect(out) == dummy.name and gp.load(out).layers[0].cell.op_name == cell
    again = invoke("convert", tmp_path / "source.onnx", "--to", dummy.name, "-o", tmp_path / "named_by_to", "--json")
    assert again.exit_code == 2 and "does not end in" in again.output  # a single-file format keeps its suffix
    back = invoke("convert", out, "-o", tmp_path / "back.onnx", "--json")
    assert back.exit_code == 0 and json.loads(back.output)["verification"]["passed"], back.output
    feed0 = sample_inputs(cfg)
    outputs = gp.run(tmp_path / "back.onnx", to_layout(cfg, feed0), engine="native")
    names = ("Y", "Y_h", "Y_c")[: 3 if cell == "LSTM" else 2]
    ours = outputs_to_layout0(cfg, *(outputs[name] for name in names))
    for got, expected in zip(ours, ort_reference(cfg, feed0)):
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-4)


def test_without_the_fixture_the_registry_is_as_shipped(request):
    if request.config.getoption("--sixth-format"):
        pytest.skip("--sixth-format registers the dummy for the whole session")
    assert sixth_format.NAME not in registry.FORMATS

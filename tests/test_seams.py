"""The seams a newcomer extends: one registration point per format (a read-only format included),
cells as data, typed provenance, formats that never import the orchestrators; and the public API:
one name for the format argument, typed options, Result.passed / to_text, short reprs, in-memory models."""

from __future__ import annotations

import ast
import inspect
import json
import sys
import types
from pathlib import Path

import jsonschema
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from helpers import FIXTURES, REALMODELS, Config, build_model, inputs, ort_reference, to_layout

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry
from gatepack.converters.model import Model
from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import CELLS, Cell, UnknownCellError, spec_of
from gatepack.schemas.layer import Direction, DirectionParams, Interface, RecurrentLayer, SpecError

ROOT = Path(__file__).resolve().parents[1]
FORMATS_DIR = ROOT / "converters" / "formats"
SOURCE = FIXTURES / "gru_lbr1_bidirectional.onnx"


# ------------------------------------------------------------------------------------------ registry


@pytest.mark.parametrize("name", list(registry.FORMATS))
def test_each_registry_entry_matches_its_implementation(name):
    """What the entry says it reads and writes is what its module implements, and the writer's keyword
    parameters are exactly the entry's typed write options."""
    info, implementation = registry.FORMATS[name], registry.implementation(name)
    assert (implementation.write is not None) == info.writes == (implementation.check is not None)
    if info.writes:
        keywords = [
            p.name for p in inspect.signature(implementation.write).parameters.values() if p.kind is p.KEYWORD_ONLY
        ]
        assert set(keywords) == set(info.option_names), name
    assert all(suffix == suffix.lower() and suffix.startswith(".") for suffix in info.suffixes)


def test_cli_choices_and_options_derive_from_the_registry():
    help_text = CliRunner().invoke(main, ["convert", "--help"], terminal_width=200).output
    for option in registry.all_write_options().values():
        assert option.flag in help_text
    assert f"--to [{'|'.join(registry.writers())}]" in help_text
    assert f"--from [{'|'.join(registry.readers())}]" in help_text
    listed = CliRunner().invoke(main, ["formats"]).output
    assert all(name in listed for name in registry.FORMATS)


def test_report_schema_takes_its_format_names_from_the_registry():
    """The schema file names no format (a list there would be a copy of the registry's); ``report_schema``
    gives it the registry's names, and those only."""
    from gatepack.converters.reporting import report_schema

    names = set(registry.FORMATS)
    file = json.loads((ROOT / "schemas" / "report.schema.json").read_text())
    assert not [v for v in _walk(file) if isinstance(v, dict) and names & set(v.get("enum", ()))]
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$defs"]["format"]["enum"] == list(registry.FORMATS)
    report = gp.report(SOURCE).to_json()
    jsonschema.Draft202012Validator(schema).validate(report)
    report["layers"][0]["targets"]["nonesuch"] = report["layers"][0]["targets"][registry.writers()[0]]
    assert not jsonschema.Draft202012Validator(schema).is_valid(report)


def _walk(node):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in FORMATS_DIR.glob("*.py") if p.name != "__init__.py"))
def test_formats_never_import_the_orchestrators_or_each_others_private_objects(module):
    imported = _imports(FORMATS_DIR / module)
    assert not {
        i for i in imported if i.startswith(("gatepack.converters.verification", "gatepack.converters.reporting"))
    }
    assert "gatepack.converters" not in imported  # the API
    own = module.removesuffix(".py")
    for name in imported:
        parts = name.split(".")
        if name.startswith("gatepack.converters.formats.") and len(parts) == 5 and not parts[3].startswith(own):
            assert not parts[4].startswith("_"), f"{module} imports {name}"


def test_shared_modules_never_probe_format_modules():
    for name in ("__init__.py", "verification.py", "reporting.py", "registry.py"):
        text = (ROOT / "converters" / name).read_text()
        assert "getattr(module" not in text and "hasattr(module" not in text, name


@pytest.fixture()
def read_only_format(monkeypatch, tmp_path):
    """A read-only format registered the way a real one is: a module with an IMPLEMENTATION (here, a
    training framework's weights as an .npz of W, R, B) and one registry entry."""
    module = types.ModuleType("gatepack_test_npz_weights")

    def read(path, **_options):
        with np.load(path, allow_pickle=False) as data:
            w, r, b = data["W"], data["R"], data["B"]
        hidden = r.shape[-1]
        params = (DirectionParams(w, r, b[: 3 * hidden], b[3 * hidden :], (Activation("Sigmoid"), Activation("Tanh"))),)
        layer = RecurrentLayer(
            "gru", Cell.GRU, w.shape[1], hidden, Direction.FORWARD, params, Interface("X", "Y", "Y_h"), True
        )
        return Model(Path(path), "npzweights", [layer])

    module.IMPLEMENTATION = registry.FormatImplementation(read=read)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    info = registry.FormatInfo(
        "npzweights", "weights (.npz)", "NAME.npz", "none", suffixes=(".npz",), writes=False, module=module.__name__
    )
    monkeypatch.setitem(registry.FORMATS, info.name, info)
    rng = np.random.default_rng(0)
    path = tmp_path / "weights.npz"
    arrays = {"W": (9, 4), "R": (9, 3), "B": (18,)}
    np.savez(path, **{k: rng.uniform(-1, 1, shape).astype(np.float32) for k, shape in arrays.items()})
    return path


def test_a_read_only_format_is_one_module_and_one_entry(read_only_format, tmp_path):
    assert registry.detect(read_only_format) == "npzweights"
    model = gp.load(read_only_format)
    assert model.layers[0].hidden_size == 3
    result = gp.convert(read_only_format, tmp_path / "out.onnx", to="onnx")  # verified on the executor
    assert result.passed and any("executor" in note for note in result.verification.notes)
    with pytest.raises(gp.UsageError, match="does not write"):
        gp.convert(SOURCE, tmp_path / "x.npz", to="npzweights")


# ------------------------------------------------------------------------------------------- cells


def test_every_cell_has_a_row_and_an_unknown_cell_raises():
    assert set(CELLS) == set(Cell)
    for cell in Cell:
        spec = spec_of(cell)
        assert len(spec.default_activations) >= 1 and spec.states[0] == "h"
        assert len(spec.gates) == len(spec.gate_meanings)
    with pytest.raises(UnknownCellError):
        spec_of("sru")
    with pytest.raises(SpecError, match="cell"):
        layer = gp.load(SOURCE).layers[0]
        RecurrentLayer("x", "sru", 3, 4, Direction.FORWARD, layer.directions[:1], layer.interface)


def test_a_cell_without_an_executor_step_is_refused_not_run_as_another(monkeypatch):
    from gatepack.converters import executor

    monkeypatch.setitem(CELLS, Cell.GRU, CELLS[Cell.GRU]._replace(executor_step=None))
    layer = gp.load(SOURCE).layers[0]
    with pytest.raises(gp.UsageError, match="cannot run GRU"):
        executor.run_layer(layer, np.zeros((2, 1, layer.input_size), np.float32))


def test_a_format_without_the_cell_refuses_it_with_the_alternative(tmp_path, monkeypatch):
    """A format whose registry entry does not list LSTM never sees the layer: report and convert refuse
    the cell, naming the formats that write it (every format writes LSTM today, so one is narrowed)."""
    from dataclasses import replace as narrowed

    monkeypatch.setitem(registry.FORMATS, "bnns", narrowed(registry.FORMATS["bnns"], cells=("gru", "rnn")))
    source = tmp_path / "lstm.onnx"
    onnx.save(build_model(Config(cell="LSTM", direction="bidirectional", seed=5)), source)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(source), "-o", str(out), "--to", "bnns", "--json"])
    assert result.exit_code == 4, result.output
    error = json.loads(result.stdout)
    writers = " or ".join(name for name in registry.writers() if registry.FORMATS[name].writes_cell(Cell.LSTM))
    assert "does not write LSTM" in error["error"] and writers in error["hint"] and "bnns" not in error["hint"]
    assert not out.exists()
    with pytest.raises(gp.RefusedError, match="does not write LSTM"):
        gp.save(gp.load(source), out, "bnns")
    assert not out.exists()
    (finding,) = [f for f in gp.report(source, to=["bnns"]).layers[0].targets["bnns"].findings if f.feature == "cell"]
    assert finding.status.value == "unsupported"


def test_every_cell_has_an_elementary_step():
    """Each built-in cell's record names its graph step and its executor step, which resolve to functions; an
    unknown cell raises rather than being computed as another cell."""
    from gatepack.converters import cell_steps, executor

    for cell in Cell:
        assert cell_steps.step_of(cell, "X") is getattr(cell_steps, f"{cell.value}_step")
        assert executor._step_builder(cell) is getattr(executor, f"{cell.value}_step")
    with pytest.raises(UnknownCellError):
        cell_steps.step_of("sru", "X")


@pytest.mark.parametrize(
    "fmt, suffix, framework, options",
    [
        ("openvino", "xml", "openvino", {"strategy": "decomposed"}),
        ("coreml", "mlpackage", "coremltools", {"strategy": "decomposed"}),
        ("onnx", "onnx", "onnxruntime", {"runtime": "directml"}),  # onnx_elementary's Loop
    ],
)
def test_a_cell_without_an_elementary_step_is_refused_not_built_as_another(
    fmt, suffix, framework, options, monkeypatch, tmp_path
):
    """A 3-gate cell missing from the step table is an error naming it in every decomposing writer (the
    writers once took any cell but LSTM for a GRU). The GRU has a clip, so that onnxruntime's DirectML
    provider (which would drop it) gets elementary ops too."""
    pytest.importorskip(framework)
    source = tmp_path / "clipped_gru.onnx"
    onnx.save(build_model(Config(cell="GRU", lbr=1, clip=0.5)), str(source))
    monkeypatch.setitem(CELLS, Cell.GRU, CELLS[Cell.GRU]._replace(graph_step=None))
    with pytest.raises(gp.UsageError, match="no elementary-op step for GRU cells"):
        gp.convert(source, tmp_path / f"out.{suffix}", to=fmt, verify=False, **options)
    assert not (tmp_path / f"out.{suffix}").exists()


def test_provenance_is_a_typed_record():
    layer = gp.load(SOURCE).layers[0]
    assert (layer.provenance.format, layer.provenance.op_type, layer.provenance.op_version) == ("onnx", "GRU", 14)
    assert layer.provenance.inputs[:3] == ("X", "W", "R") and layer.provenance.node == layer.name


# -------------------------------------------------------------------------------------------- API


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda t: gp.convert(SOURCE, t / "o.onnx", to="onnx", opsett=14), "opsett"),
        (lambda t: gp.convert(SOURCE, t / "d", to="directml", strategy="native"), "strategy"),
        (lambda t: gp.convert(SOURCE, t / "o.onnx", to="onnx", opset="14"), "opset"),
        (lambda t: gp.convert(SOURCE, t / "d", to="directml", seq_length=0), "seq_length"),
        (lambda t: gp.convert(SOURCE, t / "o.xml", to="openvino", compress_to_fp16="yes"), "compress_to_fp16"),
        (lambda t: gp.save(gp.load(SOURCE), t / "o.onnx", "onnx", layout_encodin="attribute"), "layout_encodin"),
        (lambda t: gp.load(SOURCE, activation_default="onnx"), "activation_default"),
        (lambda t: gp.report(SOURCE, to="onnx", emit_cpp=True), "emit_cpp"),
        (lambda t: gp.report(SOURCE, stratgy="native"), "stratgy"),
        (lambda t: gp.run(SOURCE, {}, engine="numpy", activation_defaults="nope"), "nope"),
    ],
)
def test_unknown_or_mistyped_options_are_usage_errors_naming_them(call, named, tmp_path):
    with pytest.raises(gp.UsageError, match=named):
        call(tmp_path)
    assert not list(tmp_path.iterdir())


def test_result_passed_and_text(tmp_path):
    result = gp.convert(SOURCE, tmp_path / "o.xml", to="openvino")
    assert result.passed is True
    text = result.to_text()
    assert text.startswith(f"converted {SOURCE} -> {tmp_path / 'o.xml'} (openvino)") and "passed" in text
    unverified = gp.convert(SOURCE, tmp_path / "p.onnx", to="onnx", verify=False)
    assert unverified.passed is False and "verification skipped" in unverified.to_text()


def test_reprs_are_short_for_many_layers():
    model = gp.load(REALMODELS / "ulunas_stream_simple.onnx")
    assert len(model.layers) >= 20
    text = repr(model)
    assert text.count("\n") == 0 and len(text) < 400 and "array" not in text
    assert "array" not in repr(model.layers[0]) and len(repr(model.layers[0])) < 300
    assert "array" not in repr(model.layers[0].directions[0])


def test_convert_accepts_a_loaded_model(tmp_path):
    model = gp.load(SOURCE)
    result = gp.convert(model, tmp_path / "o.xml", to="openvino")
    assert result.passed and result.source == str(SOURCE)
    with pytest.raises(gp.UsageError, match="same|input|inside"):  # the output policy still knows its files
        gp.convert(model, SOURCE, to="onnx")


def test_convert_accepts_a_model_built_in_memory(tmp_path):
    """A layer built from arrays (no artifact) converts, verifies against the executor, and the written
    file, run by onnxruntime, matches onnxruntime on the equivalent ONNX node."""
    cfg = Config(lbr=1, initial_h=True, seed=21)
    source = tmp_path / "reference.onnx"
    onnx.save(build_model(cfg), source)
    read = gp.load(source).layers[0]
    rebuilt = RecurrentLayer(
        "mine",
        Cell.GRU,
        read.input_size,
        read.hidden_size,
        read.direction,
        tuple(
            DirectionParams(p.W.copy(), p.R.copy(), p.Wb.copy(), p.Rb.copy(), p.activations) for p in read.directions
        ),
        read.interface,
        linear_before_reset=True,
    )
    result = gp.convert(Model(None, "onnx", [rebuilt]), tmp_path / "out.onnx", to="onnx")
    assert result.passed
    feed0 = inputs(cfg)
    session = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    y, y_h = session.run(["Y", "Y_h"], {k: v for k, v in to_layout(cfg, feed0).items() if k in names})
    ref_y, ref_y_h = ort_reference(cfg, feed0)
    np.testing.assert_allclose(y, ref_y, atol=1e-6)
    np.testing.assert_allclose(y_h, ref_y_h, atol=1e-6)

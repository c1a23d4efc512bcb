"""The capability records (converters/capabilities.py) as the one statement of what each format's op takes:
every format's check() is short because the shared findings vocabulary words the features; what the op
lacks (the blockers convert refuses or decomposes on) agrees with the findings the report shows; the
README's table and `gatepack formats` are generated from the records."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from helpers import Config, build_model, lstm_matrix, matrix, static_model

import gatepack as gp
import gatepack.converters.formats.directml.desc as directml_desc
from gatepack.cli import main
from gatepack.converters import capabilities, registry
from gatepack.converters.capabilities import doubts, lacks
from gatepack.converters.findings import Status
from gatepack.converters.formats import bnns, directml, openvino
from gatepack.converters.formats.coreml import native_blockers as coreml_blockers
from gatepack.schemas.cells import Cell

ROOT = Path(__file__).resolve().parents[1]
MAX_CHECK_LINES = 40
RECORDS = capabilities.records()  # each written format's, from its registration record
BNNS, COREML, DIRECTML, OPENVINO = (RECORDS[name] for name in ("bnns", "coreml", "directml", "openvino"))
ONNX_FOR_DIRECTML = dict(registry.FORMATS["onnx"].variants)["--for directml"]


@pytest.mark.parametrize("name", registry.writers())
def test_each_check_keeps_only_what_is_its_own(name):
    """Each written format's check() is under 40 lines: the features every format shares are worded by
    converters/feature_findings.py from the format's record."""
    source = inspect.getsource(registry.implementation(name).check)
    assert len(source.rstrip().splitlines()) < MAX_CHECK_LINES, f"{name}'s check() has grown back"


def test_every_written_format_has_a_record_for_every_cell_it_writes():
    """Each writer's record answers for every cell: its own op, its elementary form, or "not mine" (a cell it does
    not know is refused, never an op invented for it)."""
    assert set(RECORDS) == set(registry.writers())
    for name, caps in RECORDS.items():
        info = registry.FORMATS[name]
        assert all(info.writes_cell(cell) == (cell in caps.ops or caps.elementary is not None) for cell in Cell), name


def _layers(tmp_path: Path) -> list:
    """A spread of layers: every fourth GRU/RNN and LSTM configuration of the matrices (symbolic shapes), some
    with static shapes (OpenVINO's op honours sequence_lens only then), and clip 0 on an RNN."""
    configs = matrix()[::4] + lstm_matrix()[::4]
    protos = [build_model(cfg) for cfg in configs] + [static_model(cfg) for cfg in configs[::5]]
    protos.append(build_model(Config(cell="RNN", clip=0.0)))
    found = []
    for k, proto in enumerate(protos):
        path = tmp_path / f"m{k}.onnx"
        onnx.save(proto, path)
        found.append(gp.load(path).layers[0])
    return found


def _cell(findings) -> Status:
    return next(f.status for f in findings if f.feature == "cell")


def test_blockers_agree_with_the_findings(tmp_path):
    """Where a format's op lacks something (its native blockers), the cell finding is not exact (decomposed by
    auto, unsupported when native is forced), and exact where it lacks nothing; where a format has no
    elementary form, each lacking feature is unsupported in the findings and nothing else is."""
    checks = {name: registry.implementation(name).check for name in registry.writers()}
    for layer in _layers(tmp_path):
        label = f"{layer.cell.value} {layer.activation_summary()} clip={layer.clip}"
        blockers = {"openvino": openvino.native_blockers(layer), "bnns": bnns.blockers(layer)}
        assert bool(blockers["openvino"]) == bool(lacks(layer, OPENVINO.ops[layer.cell])), label
        for strategy, when_blocked in (("auto", Status.DECOMPOSED), ("native", Status.UNSUPPORTED)):
            expected = when_blocked if blockers["openvino"] else Status.EXACT
            assert _cell(checks["openvino"](layer, strategy=strategy)) is expected, label
            # auto also avoids an op in doubt for the layer; forced native keeps it (with a warning)
            in_doubt = strategy == "auto" and bool(doubts(layer, COREML.ops[layer.cell]))
            for target in registry.registration("coreml").TARGETS:
                blocked = coreml_blockers(layer, target)
                found = checks["coreml"](layer, strategy=strategy, minimum_deployment_target=target)
                expected = when_blocked if blocked else Status.DECOMPOSED if in_doubt else Status.EXACT
                assert _cell(found) is expected, f"{label} {target}"
        provider = directml_desc.ep_mishandled(layer) or doubts(layer, ONNX_FOR_DIRECTML.ops[layer.cell])
        assert _cell(checks["onnx"](layer, runtime="directml")) is (Status.DECOMPOSED if provider else Status.EXACT)
        for name, caps in (("bnns", BNNS), ("directml", DIRECTML)):
            lacking = lacks(layer, caps.ops[layer.cell])
            found = checks[name](layer)
            refused = {f.feature for f in found if f.status is Status.UNSUPPORTED}
            assert refused == set(lacking), f"{name}: {label}"
            assert all(f.alternative for f in found if f.status is Status.UNSUPPORTED), label
            assert _cell(found) is Status.EXACT


def test_the_records_name_onnx_activations_as_the_schema_does():
    from gatepack.schemas.activations import KINDS

    assert capabilities.ONNX_ACTIVATIONS == set(KINDS)


def test_provider_blockers_are_the_records():
    """onnxruntime's DirectML provider: GRU/RNN clip, Affine and Softplus are what it mishandles."""
    assert set(ONNX_FOR_DIRECTML.ops) == set(OPENVINO.ops)
    slots = ONNX_FOR_DIRECTML.ops[capabilities.Cell.GRU].activations
    assert slots is not None and all("Affine" not in s and "Softplus" not in s and "Elu" in s for s in slots)


def test_readme_table_is_generated_from_the_records():
    """README.md's capability table is what the records generate (regenerate it with
    `python -m gatepack.converters.capabilities README.md`)."""
    readme = (ROOT / "README.md").read_text()
    assert capabilities.TABLE_BEGIN in readme and capabilities.TABLE_END in readme
    assert capabilities.with_table(readme) == readme, "stale: python -m gatepack.converters.capabilities README.md"


def test_formats_command_states_the_records():
    runner = CliRunner()
    described = {f["name"]: f for f in json.loads(runner.invoke(main, ["formats", "--json"]).output)}
    for name, caps in RECORDS.items():
        for cell, op in caps.ops.items():
            facts = described[name]["cells"][cell.value]
            assert facts["op"] == op.name and facts["lacking"] == capabilities.lacking_becomes(caps, cell)
    text = runner.invoke(main, ["formats"]).output
    assert "GRUSequence-5" in text and "BNNSGraph.Builder lstm" in text and "DML_OPERATOR_RNN" in text


def test_directml_says_which_sizes_it_assumed(tmp_path):
    """A symbolic S/N written as a static size is not exact: repacked, with a warning naming the sizes assumed
    and the options that set them; a static source stays exact; sizes given are not called assumed."""
    path = tmp_path / "m.onnx"
    onnx.save(build_model(Config()), path)
    layer = gp.load(path).layers[0]
    shapes = {f.feature: f for f in directml.check(layer)}["shapes"]
    assert shapes.status is Status.REPACKED and "S=7, N=3" in shapes.detail
    assert "assumed" in shapes.warning and "--seq-length" in shapes.warning and "--batch-size" in shapes.warning
    given = {f.feature: f for f in directml.check(layer, seq_length=5, batch_size={layer.name: 2})}["shapes"]
    assert given.status is Status.REPACKED and "S=5, N=2" in given.detail and "assumed" not in given.warning
    only_s = {f.feature: f for f in directml.check(layer, seq_length=5)}["shapes"]
    assert only_s.warning.startswith("N assumed")
    onnx.save(static_model(Config()), path)
    static = {f.feature: f for f in directml.check(gp.load(path).layers[0])}["shapes"]
    assert static.status is Status.EXACT and static.warning is None


def test_bnns_findings_carry_no_core_ml_doubts(tmp_path):
    """BNNSGraph.Builder is not Core ML's runtime: Core ML's gru doubts (rdar numbers) stay in Core ML's findings."""
    path = tmp_path / "m.onnx"
    onnx.save(build_model(Config(lbr=1)), path)
    layer = gp.load(path).layers[0]
    assert not any("rdar" in (f.warning or "") + f.detail for f in bnns.check(layer))
    assert any("rdar" in (f.warning or "") + f.detail for f in registry.implementation("coreml").check(layer))

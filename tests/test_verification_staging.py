"""A written artifact is verified at its staging path (``.NAME.XXXX.tmp`` beside the output) before it is moved
where it lands: what the layer-by-layer comparison says about it (an error that stops the conversion, a note that a
layer ran on gatepack's executor) names the output the user asked for, never the staging file."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner
from helpers import FIXTURES

from gatepack.cli import main
from gatepack.converters.errors import InputError, RuntimeFailure
from gatepack.converters.formats import litert

pytest.importorskip("ai_edge_litert.interpreter")


def _failing_layer_runtime(monkeypatch, error: type) -> list[str]:
    """LiteRT's layer runtime raising ``error`` naming the file it was given (as the interpreter's errors do); the
    paths it was given, recorded."""
    given: list[str] = []

    def failing(layer, feed):
        given.append(str(layer.provenance.artifact))
        raise error(f"{layer.provenance.artifact}: the interpreter fails on it")

    monkeypatch.setattr(litert, "IMPLEMENTATION", replace(litert.IMPLEMENTATION, run_layer_native=failing))
    return given


def test_an_error_comparing_layers_names_the_output_not_its_staging_path(tmp_path, monkeypatch):
    given = _failing_layer_runtime(monkeypatch, InputError)
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(main, ["convert", str(FIXTURES / "gru_lbr0.onnx"), "--to", "litert", "-o", str(out)])
    assert result.exit_code == 3, result.output
    assert given and all(path.endswith(".tmp") and path != str(out) for path in given)  # verified where staged
    assert f"{out}: the interpreter fails on it" in result.output
    assert ".tmp" not in result.output and not out.exists()


def test_a_layer_run_on_the_executor_is_noted_under_the_output_not_its_staging_path(tmp_path, monkeypatch):
    given = _failing_layer_runtime(monkeypatch, RuntimeFailure)
    out = tmp_path / "m.tflite"
    args = ["convert", str(FIXTURES / "gru_lbr0.onnx"), "--to", "litert", "-o", str(out), "--json"]
    result = CliRunner().invoke(main, args)
    assert given and all(path.endswith(".tmp") for path in given)
    notes = json.loads(result.stdout)["verification"]["notes"]
    fell_back = [note for note in notes if "ran on gatepack's executor" in note]
    assert fell_back and all(f"{out}: the interpreter fails on it" in note for note in fell_back)
    assert ".tmp" not in result.stdout

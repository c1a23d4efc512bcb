"""--quantize-weights on a layer lifted from a Keras masking Loop (issue 43).

ONNX and OpenVINO hold such a layer's per-step mask by writing it as an elementary Loop in the layer's place, and
that Loop multiplies float initializers: no DequantizeLinear (ONNX) or i8 constant (OpenVINO) can feed it. Both
wrote float weights while reporting ``repacked quantization: the integers kept exactly`` (with --no-verify), and
with verification the int8 twin could not be read back (exit 3 naming the twin's private temporary path). Both now
refuse --quantize-weights for it (exit 4, the reason and the way out) and write nothing. Oracles: the written file's
bytes (no file at all), the process's exit code and its one line.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import pytest

import gatepack.converters as gp
from gatepack.converters.accuracy import _twin
from gatepack.converters.weight_quantization import Scheme, quantized_model

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MASKED_GRU = PRODUCERS / "tf2onnx_keras2_masked_embedding_gru.onnx"
LENGTH_MASK_GRU = PRODUCERS / "tf2onnx_length_mask_gru.onnx"


@pytest.mark.parametrize("target", ["onnx", "openvino"])
def test_quantize_weights_on_a_masked_layer_is_refused_not_written_as_floats(target, tmp_path):
    """Unverified, it wrote the masked embedding GRU as floats under a finding that kept the integers."""
    out = tmp_path / ("out.onnx" if target == "onnx" else "out.xml")
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(MASKED_GRU, out, to=target, quantize_weights="int8", verify=False)
    line = err.value.one_line()
    assert f"{target} would not keep the integers" in line and "elementary Loop" in line, line
    assert "leave out --quantize-weights" in line, line
    assert not out.exists() and not list(tmp_path.iterdir())


def test_the_cli_refuses_it_with_exit_4_naming_no_private_path(tmp_path):
    """With verification (the default) it failed with exit 3 naming /tmp/gatepack-twin-*/twin.onnx."""
    out = tmp_path / "mq.onnx"
    command = [sys.executable, "-m", "gatepack", "convert", str(MASKED_GRU), str(out), "--to", "onnx"]
    done = subprocess.run([*command, "--quantize-weights", "int8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stderr
    assert "gatepack-twin-" not in done.stderr and tempfile.gettempdir() + "/gatepack" not in done.stderr
    assert str(MASKED_GRU) in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_a_twin_that_cannot_be_read_back_is_refused_without_its_private_path(tmp_path):
    """The accuracy gate's twin is gatepack's own file in a private folder: an error reading it names the source and
    'the twin', never that folder (the masked layer's int8 twin, written as an elementary Loop, does not read back)."""
    source = gp.load(MASKED_GRU)
    with pytest.raises(gp.RefusedError) as err:
        _twin(quantized_model(source, Scheme("int8"), "onnx"), tmp_path)
    line = err.value.one_line()
    assert str(tmp_path) not in line and str(MASKED_GRU) in line and "its twin" in line, line


def test_a_length_masked_layer_still_keeps_its_integers(tmp_path):
    """The refusal is the mask's alone: a tf2onnx length-masked GRU (sequence_lens, a GRU node) is written with int8
    W and R through DequantizeLinear and verified."""
    out = tmp_path / "len.onnx"
    assert gp.convert(LENGTH_MASK_GRU, out, quantize_weights="int8").verification.passed
    graph = onnx.load(out).graph
    integers = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.INT8}
    dequantized = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in integers]
    assert len(dequantized) == 2  # W and R


def test_openvinos_decomposed_form_says_why_it_keeps_no_integers(tmp_path):
    """A dynamic-batch length-masked GRU is written as a TensorIterator (GRUSequence ignores sequence lengths with a
    dynamic X): refused naming that form, where it said 'openvino holds no quantized weights' (it does, natively)."""
    out = tmp_path / "db.xml"
    with pytest.raises(gp.RefusedError) as err:
        gp.convert(PRODUCERS / "tf2onnx_length_mask_gru_dynamic_batch.onnx", out, quantize_weights="int8")
    line = err.value.one_line()
    assert "decomposed form" in line and "sequence_lens" in line and "holds no quantized weights" not in line, line
    assert not out.exists()

"""Scale: models with external data (memory-mapped on reading, streamed on writing), the 1 GiB
rule for writing external data, and the benchmark's quick run (its table, never its numbers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import Config, artifact_name, build_model, ort_run, stacked_model

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry
from gatepack.converters.formats import onnx as onnx_format

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def stacked(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stacked") / "stacked.onnx"
    stacked_model(path, layers=2, hidden=16)
    assert (path.parent / "stacked.onnx.data").stat().st_size > 0
    return path


def test_external_data_is_memory_mapped_not_copied(stacked):
    layer = gp.load(stacked).layers[0]
    assert isinstance(layer.directions[0].W.base, np.memmap)  # a view of the file, not a copy


def _resident_file_mb() -> float:
    """This process's resident pages of mapped files (``RssFile``), MB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssFile:")) / 1024


@pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="Linux's /proc/self/pagemap")
@pytest.mark.parametrize("mode", ["r", "c"])
def test_pages_of_a_mapped_weight_read_once_leave_memory_and_read_back_the_same(mode, tmp_path):
    """``release_pages`` on a 32 MB memory map (read-only, and copy-on-write as the ONNX reader maps external data):
    the resident file pages fall by the mapped size, and the array still reads the file's bytes."""
    from gatepack.converters.fileio import release_pages

    path = tmp_path / "weights.bin"
    data = np.random.default_rng(0).standard_normal(8 << 20).astype(np.float32)
    data.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode=mode, offset=4 * 3074, shape=(len(data) - 3079,))  # unaligned
    total = float(np.asarray(mapped, np.float64).sum())  # every page read
    before = _resident_file_mb()
    release_pages(np.asarray(mapped, np.float32))
    assert before - _resident_file_mb() > 30, (before, _resident_file_mb())
    assert float(np.asarray(mapped, np.float64).sum()) == total
    np.testing.assert_array_equal(mapped, data[3074:-5])


def test_pages_this_process_wrote_are_never_released(tmp_path):
    """A copy-on-write page the process wrote is its own copy: released, the write would be lost. It stays (and the
    rest of the array is left alone with it), as do arrays in ordinary memory."""
    from gatepack.converters.fileio import release_pages

    path = tmp_path / "weights.bin"
    np.zeros(4 << 20, np.float32).tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="c")
    mapped[3 << 20] = 7  # one page written, in the array's last quarter
    release_pages(mapped)
    assert mapped[3 << 20] == 7 and not mapped[: 3 << 20].any()
    in_memory = np.ones(1 << 20, np.float32)
    release_pages(in_memory)
    assert in_memory.all()


@pytest.mark.parametrize("target", registry.writers())
def test_model_with_external_data_converts_and_verifies(stacked, target, tmp_path):
    out = tmp_path / artifact_name(target)
    result = gp.convert(stacked, out, to=target, layers_only=target not in ("onnx", "openvino"))
    assert result.verification.passed, result.verification.to_text()
    assert len(gp.load(out).layers) == 2 and result.whole == (target in ("onnx", "openvino"))


def test_whole_onnx_output_keeps_external_data_and_runs_as_the_source(stacked, tmp_path):
    """The whole stack (Transpose, Reshape between the layers) rewritten in place: the weights stream into
    the new data file, bit-exact; onnxruntime gives the source's outputs."""
    out = tmp_path / "m.onnx"
    assert gp.convert(stacked, out, to="onnx").whole
    assert (tmp_path / "m.onnx.data").is_file() and out.stat().st_size < 10_000
    source, written = onnx.load(str(stacked)), onnx.load(str(out))  # (outputs of unknown shape: as the source's)
    assert [n.op_type for n in written.graph.node] == [n.op_type for n in source.graph.node]
    for name in ("W0", "R1", "B1", "shape"):
        a, b = (
            onnx.numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == name), base_dir=str(d))
            for m, d in ((source, stacked.parent), (written, tmp_path))
        )
        np.testing.assert_array_equal(b, a)
    feed = {"X": np.random.default_rng(0).uniform(-1, 1, (5, 2, 16)).astype(np.float32)}
    for got, want in zip(ort_run(out, feed), ort_run(stacked, feed)):
        np.testing.assert_array_equal(got, want)


def test_onnx_output_keeps_external_data_and_onnxruntime_runs_it(stacked, tmp_path):
    out = tmp_path / "m.onnx"
    gp.convert(stacked, out, to="onnx", layers_only=True)
    assert (tmp_path / "m.onnx.data").is_file() and out.stat().st_size < 10_000
    onnx.checker.check_model(str(out))
    source = onnx.load(str(stacked))
    weights = {t.name: onnx.numpy_helper.to_array(t, base_dir=str(stacked.parent)) for t in source.graph.initializer}
    written = onnx.load(str(out))
    node = next(n for n in written.graph.node if n.op_type == "GRU")
    w = next(t for t in written.graph.initializer if t.name == node.input[1])
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(w, base_dir=str(tmp_path)), weights["W0"]
    )  # bit-exact through the data file
    # the first layer alone, on onnxruntime: the source's node vs gatepack's
    x = np.random.default_rng(0).uniform(-1, 1, (5, 2, 16)).astype(np.float32)
    feed = {
        i.name: x if i.name == node.input[0] else np.zeros((5, 2, 32), np.float32) for i in written.graph.input
    }  # X, and X1 of the second layer
    got = dict(zip([o.name for o in written.graph.output], ort_run(out, feed)))
    gru0 = onnx.helper.make_model(
        onnx.helper.make_graph(
            [source.graph.node[0]],
            "g",
            [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, None)],
            [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in source.graph.node[0].output],
            [onnx.numpy_helper.from_array(weights[k], k) for k in source.graph.node[0].input[1:]],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 14)],
        ir_version=8,
    )
    expected = ort_run(gru0, {"X": x})
    np.testing.assert_array_equal(got[node.output[0]], expected[0])


def test_without_external_data_the_data_file_goes(stacked, tmp_path):
    out = tmp_path / "m.onnx"
    gp.convert(stacked, out, to="onnx")
    gp.convert(stacked, out, to="onnx", external_data=False)
    assert not (tmp_path / "m.onnx.data").exists()
    assert gp.verify(stacked, out).passed


def test_weights_above_the_threshold_go_to_external_data(monkeypatch, tmp_path):
    onnx.save(build_model(Config(H=8, I=8)), tmp_path / "small.onnx")
    monkeypatch.setattr(onnx_format, "EXTERNAL_THRESHOLD", 100)  # bytes: stands for 1 GiB
    result = gp.convert(tmp_path / "small.onnx", tmp_path / "o.onnx", to="onnx")
    assert result.verification.passed and (tmp_path / "o.onnx.data").is_file()


def test_external_data_outside_the_model_directory_is_refused(stacked, tmp_path):
    model = onnx.load(str(stacked), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../../elsewhere.data"
    onnx.save(model, str(tmp_path / "bad.onnx"))
    result = CliRunner().invoke(main, ["inspect", str(tmp_path / "bad.onnx")])
    assert (
        result.exit_code == 3
        and "leads outside the artifact" in result.output
        and len(result.output.strip().splitlines()) == 1
    ), result.output


def test_truncated_external_data_is_a_one_line_error(stacked, tmp_path):
    import shutil

    shutil.copy(stacked, tmp_path / "stacked.onnx")
    data = (stacked.parent / "stacked.onnx.data").read_bytes()
    (tmp_path / "stacked.onnx.data").write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(
        main, ["convert", str(tmp_path / "stacked.onnx"), "--to", "bnns", "-o", str(tmp_path / "b")]
    )
    assert (
        result.exit_code == 3 and "stacked.onnx.data" in result.output and len(result.output.strip().splitlines()) == 1
    ), result.output
    assert not (tmp_path / "b").exists()


def test_benchmark_quick_run_prints_its_table():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = [line for line in done.stdout.splitlines() if line.startswith("|")]
    assert table[0].startswith("| measurement | gatepack | peer | ratio")
    for what in ("convert", "verify", "executor", "gatepack --help"):
        assert any(row.startswith(f"| {what}") for row in table), what
    assert any("ov.convert_model" in row for row in table) and any("onnx.reference" in row for row in table)
    quantized = table[table.index(next(r for r in table if r.startswith("| quantization | tool | time"))) :]
    for target in ("onnx", "openvino"):  # gatepack's int8 rows of the first stack, each peer's (run, or why not)
        assert sum(row.startswith("| int8 ") and f"-> {target} | gatepack |" in row for row in quantized) == 1, target
    for peer in ("NNCF compress_weights INT8_SYM", "onnxruntime quantize_dynamic", "coremltools linear_quantize"):
        assert sum(f"| {peer}" in row for row in quantized) == 1, peer

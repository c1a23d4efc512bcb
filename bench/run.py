"""gatepack's performance, measured against peers in the same run: one table of ratios.

    python bench/run.py            # the full sizes (a 277 MB model; several minutes)
    python bench/run.py --quick    # small sizes, one repetition (CI: under a minute)

Every measurement runs in fresh child processes (``bench/measure.py``): the median wall time of the
measured part over the repetitions, and the child's peak resident memory (``ru_maxrss``). Inputs
are generated here, never committed:

* conversion of two large stacked models (4 bidirectional GRUs, H = I = 1024, fp32, ONNX with external
  data: 277 MB; the same with LSTMs: 369 MB) to every target, against a plain copy of the weight file
  (the floor) and, for OpenVINO, against OpenVINO's own ``ov.convert_model`` + ``ov.save_model``;
* verification of each conversion, against the conversion itself;
* gatepack's NumPy executor against onnxruntime and ``onnx.reference`` on one GRU node and one LSTM node
  (S=100, N=16, I=H=512 bidirectional; S=200, N=1, I=H=64; and the first with sequence_lens);
* CLI start-up (``--help``, ``formats``, ``inspect`` of a small model) against a bare interpreter;
* a second table: both stacks quantized to int8 (``--quantize-weights int8``) for every target whose writer holds
  the integers, against the copy floor, beside NNCF, onnxruntime's and coremltools' own quantizers on the same
  model (``bench/quantization.py``; the peers run on ``--peer-python``, a row saying so where one is missing).

The goals (issues 7 and 43) are read from the tables, never asserted in tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import ROOT, Sample, measure  # noqa: E402
from quantization import QuantRow, Stack, peer_python, quantization_rows  # noqa: E402

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from helpers import artifact_name, stacked_model  # noqa: E402  (the test suite's generator of the large model)

from gatepack.converters import registry  # noqa: E402

TARGETS = tuple(registry.writers())


@dataclass(frozen=True)
class Sizes:
    layers: int
    hidden: int
    seq: int  # of the large model's verification inputs, chosen by gatepack (S = 7)
    repeat: int
    executor: tuple[tuple[str, int, int, int, str, bool, str], ...]  # label, S, N, H, direction, lens, cell


FULL = Sizes(
    4,
    1024,
    7,
    3,
    (
        ("S=100 N=16 I=H=512 bidirectional", 100, 16, 512, "bidirectional", False, "GRU"),
        ("S=200 N=1 I=H=64", 200, 1, 64, "forward", False, "GRU"),
        ("S=100 N=16 I=H=512 bidirectional, sequence_lens", 100, 16, 512, "bidirectional", True, "GRU"),
        ("LSTM S=100 N=16 I=H=512 bidirectional", 100, 16, 512, "bidirectional", False, "LSTM"),
    ),
)
QUICK = Sizes(
    2,
    128,
    7,
    1,
    (
        ("S=20 N=4 I=H=64 bidirectional", 20, 4, 64, "bidirectional", False, "GRU"),
        ("S=50 N=1 I=H=16", 50, 1, 16, "forward", False, "GRU"),
        ("S=20 N=4 I=H=64 bidirectional, sequence_lens", 20, 4, 64, "bidirectional", True, "GRU"),
        ("LSTM S=20 N=4 I=H=64 bidirectional", 20, 4, 64, "bidirectional", False, "LSTM"),
    ),
)


def recurrent_node(path: Path, seq: int, batch: int, hidden: int, direction: str, lens: bool, cell: str) -> None:
    """One GRU or LSTM node (I = H) for the executor comparison."""
    import onnx
    from helpers import Config, build_model

    cfg = Config(
        cell=cell, direction=direction, S=seq, N=batch, I=hidden, H=hidden, seq_lens="mixed" if lens else "none"
    )
    onnx.save(build_model(cfg), str(path))


class Rows(list):
    """The table's rows; each is echoed to stderr as it is measured."""

    def append(self, row: "Row") -> None:
        super().append(row)
        print("  " + " | ".join(row.cells()), file=sys.stderr, flush=True)


@dataclass
class Row:
    what: str
    ours: Sample
    peer: Sample | None
    peer_name: str
    goal: str
    weights_mb: float | None = None  # conversions: peak RSS is also given as a multiple of the weights
    floor: Sample | None = None  # conversions: the weight-file copy

    def cells(self) -> list[str]:
        ratio = f"{self.ours.seconds / self.peer.seconds:.2f}x" if self.peer else "-"
        if self.floor:
            ratio += f" ({self.ours.seconds / self.floor.seconds:.1f}x the copy)"
        peer = f"{_time(self.peer.seconds)} ({self.peer_name})" if self.peer else self.peer_name
        mem = f"{self.ours.peak_mb:.0f}" + (f" / {self.peer.peak_mb:.0f}" if self.peer else "")
        if self.weights_mb:
            mem += f" ({self.ours.peak_mb / self.weights_mb:.2f}x the weights)"
        return [self.what, _time(self.ours.seconds), peer, ratio, mem, self.goal]


def _time(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def large_model_rows(rows: "Rows", work: Path, sizes: Sizes, targets: list[str], cell: str) -> Stack:
    """The stacked model of ``cell`` converted to each target (and verified), against the floor and peers; the
    stack, for the quantization rows."""
    src = work / f"stacked_{cell.lower()}.onnx"
    weight_bytes = stacked_model(src, sizes.layers, sizes.hidden, cell)
    label = f"{sizes.layers} x bidirectional {cell} H={sizes.hidden} ({weight_bytes / 1e6:.0f} MB)"
    print(f"# {label}, repeat {sizes.repeat}", file=sys.stderr)
    data = str(src) + ".data"
    floor = measure("import shutil", f"shutil.copyfile({data!r}, {str(work / 'copy.data')!r})", sizes.repeat)
    rows.append(Row(f"copy of the weight file ({weight_bytes / 1e6:.0f} MB)", floor, None, "the floor", ""))
    frameworks = {"openvino": "import openvino", "coreml": "import coremltools", "litert": "import ai_edge_litert"}
    weights_mb = weight_bytes / 2**20
    ov_peer = measure(
        "import onnx, openvino as ov",
        f"ov.save_model(ov.convert_model({str(src)!r}), {str(work / 'ov.xml')!r}, compress_to_fp16=False)",
        sizes.repeat,
    )
    for target, whole in _conversions(targets):
        # one per target, cell and form: a directory of another format is never replaced
        form = "_whole" if whole and target not in ("onnx", "openvino") else ""
        out = work / artifact_name(target, f"out_{cell.lower()}_{target}{form}")
        # both sides import their frameworks before the clock starts (the peer's setup does too)
        setup = (
            "import onnx, onnxruntime, gatepack as gp, gatepack.converters.formats.onnx, "
            f"gatepack.converters.formats.{target}\n{frameworks.get(target, '')}"
        )
        shapes = _static_shapes(target, whole, sizes)
        given = f", input_shapes={shapes!r}" if shapes else ""
        convert = f"gp.convert({str(src)!r}, {str(out)!r}, to={target!r}, verify=False, layers_only={not whole}{given})"
        ours = measure(setup, convert, sizes.repeat)
        goal = "<= 1.0x" if target == "openvino" else "<= 1.5x"
        rss = "RSS <= 2x the weights" if form else "RSS <= 1.5x the weights"
        rows.append(
            Row(
                f"convert {label} -> {target}{' (whole model)' if form else ''}",
                ours,
                ov_peer,
                "ov.convert_model + save_model",
                f"{goal}; {rss}",
                weights_mb,
                floor,
            )
        )
        verify_body = (
            "from gatepack.converters.verification import GivenInputs, verify_models\n"
            f"verify_models(gp.load({str(src)!r}), gp.load({str(out)!r}), given=GivenInputs({shapes or {}!r}))"
        )
        verified = measure(setup, verify_body, sizes.repeat)
        rows.append(
            Row(
                f"verify {target}{form.replace('_', ' ')} conversion",
                verified,
                ours,
                "the conversion",
                "<= 1.0x the conversion",
            )
        )
    return Stack(src, label, weight_bytes, floor, work, sizes.repeat)


def _conversions(targets: list[str]) -> list[tuple[str, bool]]:
    """(target, whole model?) to measure: the stack has Transposes and Reshapes between its layers; ONNX and OpenVINO
    keep them (the whole model), Core ML and LiteRT both ways (the layers alone, and the whole model as one ML
    Program or one LiteRT subgraph), the other targets hold the layers alone."""
    both = ("coreml", "litert")
    return [(t, w) for t in targets for w in ((False, True) if t in both else (t in ("onnx", "openvino"),))]


def _static_shapes(target: str, whole: bool, sizes: Sizes) -> dict | None:
    """The stack's input shape for a target that writes whole models with static shapes only (LiteRT): S of the
    verification inputs, N = 3 (the writer's default batch for the layers alone)."""
    return {"X": [sizes.seq, 3, sizes.hidden]} if whole and target == "litert" else None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, one repetition, int8 rows of the first stack alone (CI)"
    )
    parser.add_argument(
        "--targets", default=",".join(TARGETS), help="comma-separated targets for the large-model conversion"
    )
    parser.add_argument("--cells", default="GRU,LSTM", help="comma-separated cells of the large stacked models")
    parser.add_argument("--no-executor", action="store_true", help="skip the executor and CLI rows")
    parser.add_argument(
        "--quantize-targets",
        default=",".join(TARGETS),
        help="comma-separated targets of the int8 rows (those whose writer holds int8 weights; '' for none)",
    )
    parser.add_argument(
        "--peer-python", default=peer_python(), help="the Python holding NNCF, onnxruntime's quantizer, coremltools"
    )
    return parser.parse_args(argv)


def executor_rows(rows: Rows, work: Path, sizes: Sizes) -> None:
    """gatepack's executor against onnxruntime and ``onnx.reference`` on one GRU or LSTM node of each size."""
    for text, seq, batch, hidden, direction, lens, cell in sizes.executor:
        node = work / f"{cell}_{seq}_{batch}_{hidden}_{int(lens)}.onnx"
        recurrent_node(node, seq, batch, hidden, direction, lens, cell)
        feed = (
            f"import numpy as np, onnx\nrng = np.random.default_rng(0)\n"
            f"feed = {{'X': rng.uniform(-1, 1, ({seq}, {batch}, {hidden})).astype(np.float32)}}\n"
            + (
                f"feed['sequence_lens'] = np.array([max(1, {seq} - 3 * i) for i in range({batch})], np.int32)\n"
                if lens
                else ""
            )
            + f"model = onnx.load({str(node)!r})\nnames = {{i.name for i in model.graph.input}}\n"
            "feed = {k: v for k, v in feed.items() if k in names}\n"
        )
        # Each side runs once untimed before the timed run (a warm run on all three: onnxruntime's
        # first run also allocates its arena, the executor's first run pages in its buffers).
        runs = {
            "ours": (
                "import gatepack as gp\nfrom gatepack.converters.executor import run_layer\n"
                f"layer = gp.load({str(node)!r}).layers[0]",
                "run_layer(layer, feed['X'], feed.get('sequence_lens'), None)",
            ),
            "ort": (
                f"import onnxruntime as ort\ns = ort.InferenceSession({str(node)!r}, "
                "providers=['CPUExecutionProvider'])",
                "s.run(None, feed)",
            ),
            "ref": (
                "from onnx.reference import ReferenceEvaluator\nr = ReferenceEvaluator(model)",
                "r.run(None, feed)",
            ),
        }
        ours, ort, ref = (measure(f"{feed}{setup}\n{body}", body, sizes.repeat) for setup, body in runs.values())
        goal = "<= 1.5x" if batch > 1 else "<= 5x"
        rows.append(Row(f"executor {text}", ours, ort, "onnxruntime", goal + " onnxruntime"))
        rows.append(Row(f"executor {text}", ours, ref, "onnx.reference", ""))


def cli_rows(rows: Rows, sizes: Sizes) -> None:
    """The CLI's start-up against a bare interpreter."""
    small = ROOT / "fixtures" / "gru_lbr0.onnx"
    bare = measure(
        "import subprocess, sys", "subprocess.run([sys.executable, '-c', 'pass'], check=True)", max(sizes.repeat, 3)
    )
    for command in (["--help"], ["formats"], ["inspect", str(small)]):
        cli = measure(
            "import subprocess, sys",
            f"subprocess.run([sys.executable, '-m', 'cli', *{command!r}], check=True, capture_output=True, "
            f"cwd={str(ROOT)!r})",
            max(sizes.repeat, 3),
        )
        rows.append(
            Row(f"gatepack {command[0]}", cli, bare, "python -c pass", "<= 0.25 s" if command == ["--help"] else "")
        )


def print_tables(rows: Rows, quantized: list[QuantRow]) -> None:
    """The conversion table, then the int8 table (when it has rows), as Markdown on stdout."""
    header = ["measurement", "gatepack", "peer", "ratio", "peak RSS MB (gatepack / peer)", "goal"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")
    if quantized:
        print("\n| " + " | ".join(QuantRow.HEADER) + " |\n|" + "---|" * len(QuantRow.HEADER))
        print("\n".join("| " + " | ".join(row.cells()) + " |" for row in quantized))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    sizes = QUICK if args.quick else FULL
    targets = [t for t in args.targets.split(",") if t]
    rows = Rows()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gatepack-bench-") as tmp:
        work = Path(tmp)
        quantized: list[QuantRow] = []
        for cell in (c.upper() for c in args.cells.split(",") if c):
            stack = large_model_rows(rows, work, sizes, targets, cell)
            quantize = [t for t in args.quantize_targets.split(",") if t and not (args.quick and quantized)]
            quantized += quantization_rows(stack, quantize, args.peer_python) if quantize else []  # --quick: 1st stack
        if not args.no_executor:
            executor_rows(rows, work, sizes)
            cli_rows(rows, sizes)
    print_tables(rows, quantized)
    print(
        f"\n{'quick' if args.quick else 'full'} run, medians of {sizes.repeat}, "
        f"{time.perf_counter() - started:.0f} s in all",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

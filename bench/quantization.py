"""Quantizing the large stacks' recurrent weights to int8 (``--quantize-weights int8``) for every target whose
writer holds the integers, beside each runtime's own quantizer on the same model in the same run (issue 43).

For each stack and target, gatepack's ``convert(..., quantize_weights="int8", verify=False)`` is timed against the
copy of the weight file (the floor) and its peak RSS given as a multiple of the float weights; the artifact's size
is set against the same target's fp32 artifact (gatepack's float conversion, same form). The peers, each timed from
the same ONNX file to its own int8 artifact:

* NNCF: ``ov.convert_model`` + ``nncf.compress_weights`` (INT8_SYM, and INT8_ASYM, its default) + ``ov.save_model``;
* onnxruntime: ``quantize_dynamic`` (QInt8 per channel, external data);
* coremltools: ``linear_quantize_weights`` (int8 per channel, symmetric) on gatepack's fp32 Core ML package of
  the model (loaded without a runtime, saved).

A peer runs on ``--peer-python`` (a scratch environment holding it; never a dependency of gatepack): one not
installed there is a row that says so. Every artifact is then inspected untimed, in its own child process: the weight
constants it holds as 8-bit integers and those left in float (count and bytes), and, where a runtime exists here
(onnxruntime; OpenVINO CPU with ``INFERENCE_PRECISION_HINT`` f32), the largest error of every output against the
float source on onnxruntime, on the same random inputs (S = 7, N = 2, uniform in [-1, 1], seed 0). Core ML has no
runtime on Linux: its rows give no error. The goals (issue 43) are read from the table, never asserted in tests.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from measure import ROOT, Sample, measure

HERE = Path(__file__).resolve().parent
LAYERS_ONLY = {"onnx": False, "openvino": False}  # target -> written as layers alone (default), else kept whole
SEQUENCE, BATCH, MIN_WEIGHT = 7, 2, 1024  # the accuracy inputs' S and N; a constant of fewer elements is no weight


@dataclass(frozen=True)
class Peer:
    """A runtime's own int8 weight quantizer, run from the source (``{src}``; ``{fp32}``: the fp32 artifact of
    ``target`` gatepack wrote) to ``{out}``."""

    name: str
    tag: str  # of its artifact's file name
    target: str  # the artifact's format: how it is inspected and run
    module: str  # what must import on the peer's Python
    setup: str
    body: str
    suffix: str


_NNCF = (
    "m = nncf.compress_weights(ov.convert_model({src!r}), mode=nncf.CompressWeightsMode.MODE)\n"
    "ov.save_model(m, {out!r}, compress_to_fp16=False)"
)
PEERS = (
    *(
        Peer(
            f"NNCF compress_weights {mode}",
            mode.lower(),
            "openvino",
            "nncf",
            "import openvino as ov, nncf",
            _NNCF.replace("MODE", mode),
            ".xml",
        )
        for mode in ("INT8_SYM", "INT8_ASYM")
    ),
    Peer(
        "onnxruntime quantize_dynamic",
        "ort",
        "onnx",
        "onnxruntime.quantization",
        "import onnx\nfrom onnxruntime.quantization import QuantType, quantize_dynamic",
        "quantize_dynamic({src!r}, {out!r}, weight_type=QuantType.QInt8, per_channel=True, "
        "use_external_data_format=True)",
        ".onnx",
    ),
    Peer(
        "coremltools linear_quantize_weights",
        "coremltools",
        "coreml",
        "coremltools.optimize.coreml",
        "import coremltools as ct\nfrom coremltools.optimize.coreml import OpLinearQuantizerConfig, "
        "OptimizationConfig, linear_quantize_weights",
        "config = OptimizationConfig(OpLinearQuantizerConfig(mode='linear_symmetric', dtype='int8', "
        "granularity='per_channel'))\n"
        "linear_quantize_weights(ct.models.MLModel({fp32!r}, skip_model_load=True), config).save({out!r})",
        ".mlpackage",
    ),
)


@dataclass
class QuantRow:
    """One tool's int8 artifact of one stack for one target: its time and memory (None: not run, ``note`` says
    why), its size against the target's fp32 artifact, what it holds, and its error against the float source."""

    what: str
    tool: str
    sample: Sample | None
    stack: "Stack"
    fp32_bytes: int = 0
    inspected: dict = field(default_factory=dict)
    goal: str = ""
    note: str = ""

    HEADER = (
        "quantization",
        "tool",
        "time (CPU)",
        "x the copy (CPU)",
        "peak RSS MB (x the float weights)",
        "artifact MB (fp32 / int8)",
        "int8 / float weight constants (MB)",
        "max error vs float",
        "goal",
    )

    def cells(self) -> list[str]:
        if self.sample is None:
            return [self.what, self.tool, "-", "-", "-", "-", "-", "-", self.note]
        if self.sample is self.stack.floor:
            return [self.what, self.tool, f"{_time(self.sample.seconds)} ({_time(self.sample.cpu_seconds)})"] + [""] * 6
        sample, floor, weights_mb = self.sample, self.stack.floor, self.stack.weight_bytes / 2**20
        size = self.inspected.get("bytes", 0)
        ratio = f"{self.fp32_bytes / 1e6:.1f} / {size / 1e6:.1f} = {self.fp32_bytes / max(size, 1):.2f}x smaller"
        error = self.inspected.get("error", "-")
        return [
            self.what,
            self.tool,
            f"{_time(sample.seconds)} ({_time(sample.cpu_seconds)})",
            f"{sample.seconds / floor.seconds:.1f}x ({sample.cpu_seconds / max(floor.cpu_seconds, 1e-6):.1f}x)",
            f"{sample.peak_mb:.0f} ({sample.peak_mb / weights_mb:.2f}x)",
            ratio,
            self.inspected.get("held", "-"),
            f"{error:.2e}" if isinstance(error, float) else str(error),
            "; ".join(part for part in (self.goal, self.note) if part),
        ]


def _time(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def holders(targets: list[str]) -> list[str]:
    """The targets of ``targets`` whose writer holds int8 weights today (``weight_quantization.holders``): a target
    gets its row once its writer exists."""
    from gatepack.converters import weight_quantization

    return [t for t in targets if t in weight_quantization.holders()]


@dataclass(frozen=True)
class Stack:
    """One large stacked model of the run, with what every row of it is measured against."""

    src: Path
    label: str
    weight_bytes: int
    floor: Sample  # the copy of its weight file
    work: Path
    repeat: int


def quantization_rows(stack: Stack, targets: list[str], peer_python: str) -> list[QuantRow]:
    """gatepack's int8 rows for each holding target of ``targets``, then the peers' rows (module docstring); every
    artifact inspected at the end, in one child process."""
    rows: list[tuple[QuantRow, Path, str]] = []  # (row, int8 artifact, its target)
    copy = f"copy of the weight file ({stack.weight_bytes / 1e6:.0f} MB)"
    floor = QuantRow(copy, "the floor", stack.floor, stack)
    for target in holders(targets):
        out = stack.work / _artifact_name(target, f"int8_{stack.src.stem}_{target}")
        setup = (
            "import onnx, onnxruntime, gatepack as gp, gatepack.converters.formats.onnx, "
            f"gatepack.converters.formats.{target}{_framework(target)}"
        )
        body = (
            f"gp.convert({str(stack.src)!r}, {str(out)!r}, to={target!r}, verify=False, quantize_weights='int8', "
            f"layers_only={LAYERS_ONLY.get(target, True)})"
        )
        sample = measure(setup + _removal(out), body, stack.repeat)
        row = QuantRow(f"int8 {stack.label} -> {target}", "gatepack", sample, stack)
        row.goal = "<= 2x the copy; RSS <= 2x the weights; >= 3.5x smaller"
        rows.append(_echoed(row, out, target))
    for peer in PEERS:
        rows.append(_peer_row(stack, peer, peer_python))
    measured = [(row, out, target) for row, out, target in rows if row.sample is not None]
    fp32 = {target: _fp32_artifact(stack, target) for _, _, target in measured}
    for (row, _, target), inspected in zip(measured, inspect_in_child(measured, stack.src)):
        row.fp32_bytes, row.inspected = _bytes(fp32[target]), inspected
    return [floor, *(row for row, _, _ in rows)]


def _echoed(row: QuantRow, out: Path, target: str) -> tuple[QuantRow, Path, str]:
    print(f"  {row.what} | {row.tool} | {row.cells()[2]}", file=sys.stderr, flush=True)
    return row, out, target


def _peer_row(stack: Stack, peer: Peer, python: str) -> tuple[QuantRow, Path, str]:
    """``peer`` timed on ``python`` from the stack to its int8 artifact, or the row saying why it did not run."""
    what = f"int8 {stack.label} -> {peer.target}"
    out = stack.work / f"{peer.tag}_{stack.src.stem}{peer.suffix}"
    missing = _missing(python, peer.module)
    if missing:
        return _echoed(QuantRow(what, peer.name, None, stack, note=f"not run: {missing}"), out, peer.target)
    fp32 = _fp32_artifact(stack, peer.target)
    body = peer.body.format(src=str(stack.src), out=str(out), fp32=str(fp32))
    try:
        sample = measure(peer.setup + _removal(out), body, stack.repeat, python=python)
    except RuntimeError as err:
        last = str(err).strip().splitlines()[-1][:200]
        return _echoed(QuantRow(what, peer.name, None, stack, note=f"failed: {last}"), out, peer.target)
    return _echoed(QuantRow(what, peer.name, sample, stack), out, peer.target)


def _fp32_artifact(stack: Stack, target: str) -> Path:
    """The fp32 artifact of the stack for ``target``, the size the int8 artifacts are set against: the ONNX source
    itself, OpenVINO's own ``convert_model`` + ``save_model`` (the conversion rows' peer), else gatepack's float
    conversion in the form of the int8 row (untimed; the Core ML package coremltools quantizes)."""
    given = {"onnx": stack.src, "openvino": stack.work / "ov.xml"}
    out = given.get(target, stack.work / _artifact_name(target, f"fp32_{stack.src.stem}_{target}"))
    if not out.exists():
        code = (
            "import gatepack as gp\n"
            f"gp.convert({str(stack.src)!r}, {str(out)!r}, to={target!r}, verify=False, "
            f"layers_only={LAYERS_ONLY.get(target, True)})"
        )
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return out


def _artifact_name(target: str, stem: str) -> str:
    from gatepack.converters import registry

    suffixes = registry.FORMATS[target].suffixes
    return stem + suffixes[0] if suffixes else stem


def _removal(out: Path) -> str:
    """Setup code removing ``out`` and its companions before each run (untimed): every run writes anew (onnx's
    external data would otherwise be appended to the last run's file)."""
    paths = [str(out), str(out) + ".data", str(out.with_suffix(".bin"))]
    return (
        f"\nimport os, shutil\nfor _p in {paths!r}:\n"
        "    shutil.rmtree(_p) if os.path.isdir(_p) else os.path.exists(_p) and os.remove(_p)"
    )


def _framework(target: str) -> str:
    """The target's framework, imported before the clock starts (as the peers' setups do)."""
    module = {"openvino": "openvino", "coreml": "coremltools", "litert": "ai_edge_litert"}.get(target)
    return f"\nimport {module}" if module else ""


def _missing(python: str, module: str) -> str:
    """Why ``module`` does not import on ``python`` ('' when it does); every peer's module tried in one child."""
    return _importable(python).get(module, "")


@functools.lru_cache(maxsize=None)
def _importable(python: str) -> dict[str, str]:
    """Each peer's module that does not import on ``python``, with why."""
    code = (
        "import importlib, json\nfailed = {}\n"
        f"for m in {sorted({p.module for p in PEERS})!r}:\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except Exception as e:\n        failed[m] = type(e).__name__\n"
        "print(json.dumps(failed))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=ROOT)
    failed = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {p.module: "" for p in PEERS}
    return {m: f"{m.split('.')[0]} not installed in {python} (--peer-python)" for m in failed}


def _bytes(path: Path) -> int:
    """The bytes of an artifact: its file and companions (NAME.onnx.data, NAME.bin), or a directory's files."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    companions = (path.with_name(path.name + ".data"), path.with_suffix(".bin"))
    return path.stat().st_size + sum(c.stat().st_size for c in companions if c.exists())


# ------------------------------------------------------------------------------- inspection (child processes)


def inspect_in_child(artifacts: list[tuple[object, Path, str]], source: Path) -> list[dict]:
    """``inspect`` of each (_, artifact, target) in one fresh interpreter (not the measured processes), as dicts."""
    if not artifacts:
        return []
    listed = [(target, str(out)) for _, out, target in artifacts]
    code = (
        f"import sys, json\nsys.path.insert(0, {str(HERE)!r})\nfrom quantization import inspect\n"
        f"print(json.dumps([inspect(t, a, {str(source)!r}) for t, a in {listed!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        failed = {"held": "-", "error": f"inspection failed: {done.stderr.strip()[-160:]}"}
        return [{"bytes": _bytes(out), **failed} for _, out, _ in artifacts]
    return json.loads(done.stdout.strip().splitlines()[-1])


def inspect(target: str, artifact: str, source: str) -> dict:
    """What ``artifact`` holds (``held``: '<int8 constants> (<MB>) / <float constants> (<MB>)', constants of at least
    ``MIN_WEIGHT`` elements), its bytes, and its largest error against the float source (a string where no runtime
    runs it here)."""
    counts = WEIGHT_COUNTERS[target](Path(artifact))
    held = f"{counts[0]} ({counts[1] / 1e6:.1f}) / {counts[2]} ({counts[3] / 1e6:.1f})"
    runner = RUNNERS.get(target)
    error: float | str = NOT_RUN.get(target, "-") if runner is None else _largest_error(source, runner, artifact)
    return {"bytes": _bytes(Path(artifact)), "held": held, "error": error}


def _feed(source: str) -> tuple[dict, dict]:
    """The random inputs, and the float source's outputs on them (onnxruntime)."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for given in session.get_inputs():
        sizes = {0: SEQUENCE, 1: BATCH}
        shape = [d if isinstance(d, int) else sizes[k] for k, d in enumerate(given.shape)]
        feed[given.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    names = [o.name for o in session.get_outputs()]
    return feed, dict(zip(names, session.run(None, feed)))


def _largest_error(source: str, runner, artifact: str) -> float:
    import numpy as np

    feed, expected = _feed(source)
    got = runner(artifact, feed)
    return max(float(np.abs(got[name].astype(np.float64) - value).max()) for name, value in expected.items())


def _run_onnx(artifact: str, feed: dict) -> dict:
    import onnxruntime as ort

    session = ort.InferenceSession(artifact, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def _run_openvino(artifact: str, feed: dict) -> dict:
    import openvino as ov

    compiled = ov.Core().compile_model(artifact, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = compiled(feed)
    return {name: results[output] for output in compiled.outputs for name in output.get_names()}


RUNNERS = {"onnx": _run_onnx, "openvino": _run_openvino}
NOT_RUN = {"coreml": "no runtime here", "litert": "layers alone: no whole-model outputs"}  # why no error is given


def _onnx_weights(path: Path) -> tuple[int, int, int, int]:
    """(int8 constants, their bytes, float constants, their bytes) among an ONNX model's initializers."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    integer, floating = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}, {onnx.TensorProto.FLOAT}
    found = [0, 0, 0, 0]
    for graph in _graphs(model.graph):
        for tensor in graph.initializer:
            count = int(_product(tensor.dims))
            kind = 0 if tensor.data_type in integer else 2 if tensor.data_type in floating else None
            if kind is not None and count >= MIN_WEIGHT:
                found[kind] += 1
                found[kind + 1] += count * (1 if kind == 0 else 4)
    return found[0], found[1], found[2], found[3]


def _graphs(graph):
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                yield from _graphs(sub)


def _product(dims) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total


def _openvino_weights(path: Path) -> tuple[int, int, int, int]:
    """(8-bit constants, bytes, f32/f16 constants, bytes) of an IR."""
    import openvino as ov

    found = [0, 0, 0, 0]
    for op in ov.Core().read_model(str(path)).get_ops():
        if op.get_type_name() != "Constant":
            continue
        kind = op.get_element_type().get_type_name()
        count = _product(op.get_output_shape(0))
        index = 0 if kind in ("i8", "u8") else 2 if kind in ("f32", "f16") else None
        if index is not None and count >= MIN_WEIGHT:
            found[index] += 1
            found[index + 1] += count * (1 if index == 0 else 4 if kind == "f32" else 2)
    return found[0], found[1], found[2], found[3]


def _coreml_weights(path: Path) -> tuple[int, int, int, int]:
    """(constexpr-dequantized 8-bit constants, bytes, float consts, bytes) of an ML Program package."""
    import coremltools as ct

    spec = ct.utils.load_spec(str(path))
    found = [0, 0, 0, 0]
    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            for op in block.operations:
                kind = op.outputs[0].type.tensorType if op.outputs else None
                count = _product(d.constant.size for d in kind.dimensions) if kind is not None else 0
                if count < MIN_WEIGHT:
                    continue
                if op.type.startswith("constexpr_"):
                    found[0], found[1] = found[0] + 1, found[1] + count
                elif op.type == "const":
                    found[2], found[3] = found[2] + 1, found[3] + count * (2 if kind.dataType == 10 else 4)
    return found[0], found[1], found[2], found[3]


def _litert_weights(path: Path) -> tuple[int, int, int, int]:
    """(INT8 constant tensors, bytes, FLOAT32 constant tensors, bytes) of a LiteRT file (tensors with data, in the
    FlatBuffer or stored after it: an offset buffer, docs/conventions.md §11)."""
    from gatepack.converters.formats.litert.common import schema

    tflite = schema()
    model = tflite.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    sizes = {tflite.TensorType.INT8: 1, tflite.TensorType.UINT8: 1, tflite.TensorType.FLOAT32: 4}
    found = [0, 0, 0, 0]
    for graph in model.subgraphs or []:
        for tensor in graph.tensors or []:
            buffer = model.buffers[tensor.buffer]
            held = buffer.size if buffer.offset > 1 else len(buffer.data if buffer.data is not None else [])
            count = _product(tensor.shape if tensor.shape is not None else [])
            if not held or tensor.type not in sizes or count < MIN_WEIGHT:
                continue
            index = 0 if sizes[tensor.type] == 1 else 2
            found[index], found[index + 1] = found[index] + 1, found[index + 1] + count * sizes[tensor.type]
    return found[0], found[1], found[2], found[3]


WEIGHT_COUNTERS = {
    "onnx": _onnx_weights,
    "openvino": _openvino_weights,
    "coreml": _coreml_weights,
    "litert": _litert_weights,
}


def peer_python() -> str:
    """The Python the peers run on: ``GATEPACK_BENCH_PEER_PYTHON``, else this one."""
    return os.environ.get("GATEPACK_BENCH_PEER_PYTHON", sys.executable)

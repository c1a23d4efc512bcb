"""Streaming models: which outputs feed which inputs on the next call, and verification over many calls.

A streaming model takes one frame (or a short chunk) and the previous call's states, and returns its output
and the new states; an app calls it thousands of times, feeding each state output back into its input. A
*state pair* ``(input, output)`` names that wiring. Verifying one call with random states cannot catch a
conversion that is right for one frame but wrong in how a state flows between calls (a state output wired to
the wrong input, a state kept in fp16 drifting over a minute of audio), so ``verify_streaming`` runs the
source and the artifact over N consecutive calls, each side feeding its own state outputs back, from zero
states (or the user's), and compares every call's outputs and the final states, at one call's tolerance
grown with the square root of the calls (``_accumulated``: rounding fed back with the states adds up).

State pairs are found from two kinds of evidence (``find_state_pairs``), and an output pairs with an input
only when both have the same dtype and, on a sample call, the same shape:

* names: the output is the input's name with a state suffix (``conv_cache`` -> ``conv_cache_out``,
  ``h`` -> ``hn``, ``state`` -> ``stateN``, ``h_in`` -> ``h_out``, ``past_x`` -> ``present_x``);
* recurrent wiring (the format's ``GraphAnalyses.recurrent_wiring``; ONNX's): a GRU/RNN/LSTM node's
  ``initial_h``/``initial_c`` is computed from the input, and its ``Y_h``/``Y_c`` reaches the output, through state
  plumbing only (Slice, Gather, Split, Squeeze, Unsqueeze, Reshape, Transpose, Concat, Cast, Identity) — e.g.
  DTLN's stacked ``[1, 2, H, 2]`` state; a single unrolled step's state slices and new states count the same way
  (DTLN's model 2).

``--state IN=OUT`` gives or corrects pairs; a given pair whose shapes or dtypes differ is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

import gatepack.converters.quantizer_steps as quantizer_steps
import gatepack.converters.registry as registry
from gatepack.converters.errors import UsageError
from gatepack.converters.in_memory import held_in_memory, in_memory_runner
from gatepack.converters.model import Model

if TYPE_CHECKING:
    from gatepack.converters.verification import GivenInputs, OutputComparison, Tolerance, Verification

Runner = Callable[[dict], dict]

# (input suffix, output suffix) pairs, compared case-insensitively after the shared stem
_NAME_RULES: tuple[tuple[str, str], ...] = (
    ("", "_out"),
    ("", "out"),
    ("", "_n"),
    ("", "n"),
    ("", "_new"),
    ("", "_next"),
    ("_in", "_out"),
    ("in", "out"),
    ("0", "n"),
    ("_0", "_n"),
)
_NAME_PREFIXES: tuple[tuple[str, str], ...] = (("past_", "present_"), ("", "new_"), ("", "next_"))
DEFAULT_FRAMES = 32
STREAMED = "streamed"  # the layer label of a comparison over consecutive calls


@dataclass(frozen=True)
class StatePair:
    """The graph output ``output`` is fed to the graph input ``input`` on the next call."""

    input: str
    output: str
    evidence: str  # "names", "recurrent wiring", "names and recurrent wiring" or "given"

    def to_json(self) -> dict:
        return {"input": self.input, "output": self.output, "evidence": self.evidence}

    def __str__(self) -> str:
        return f"{self.output} -> {self.input} ({self.evidence})"


def parse_state_option(value: str) -> tuple[str, str]:
    """``IN=OUT`` (the CLI's ``--state``) -> (IN, OUT)."""
    parts = value.split("=")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise UsageError(f"--state {value!r} is not INPUT=OUTPUT", hint="e.g. --state h=hn (the output hn feeds h)")
    return parts[0].strip(), parts[1].strip()


def names_pair(input_name: str, output_name: str) -> bool:
    """True when ``output_name`` reads as the next value of ``input_name`` (module docstring)."""
    a, b = input_name.lower(), output_name.lower()
    for in_suffix, out_suffix in _NAME_RULES:
        if a.endswith(in_suffix) and b == a[: len(a) - len(in_suffix)] + out_suffix:
            return True
    return any(a.startswith(p) and b == q + a[len(p) :] for p, q in _NAME_PREFIXES)


@dataclass
class Sample:
    """One call of the source on drawn inputs: what state pairs are checked against (shapes and dtypes)."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def find_state_pairs(model: Model, sample: Sample, given: Sequence[tuple[str, str]] = ()) -> list[StatePair]:
    """The model's state pairs: the ``given`` ones (checked), then those found by names or recurrent wiring
    (module docstring) among inputs and outputs the given ones leave free. UsageError for a given pair naming
    no input/output of the model, or whose shapes or dtypes differ."""
    pairs: list[StatePair] = []
    for input_name, output_name in given:
        _check_pair(model, sample, input_name, output_name)
        pairs.append(StatePair(input_name, output_name, "given"))
    taken = {p.input for p in pairs} | {p.output for p in pairs}
    analyses = registry.implementation(model.format).graph_analyses
    wired = analyses.recurrent_wiring(Path(model.path)) if analyses is not None and model.path else set()
    for input_name, value in sample.inputs.items():
        if input_name in taken:
            continue
        for output_name, out in sample.outputs.items():
            if output_name in taken or out.shape != value.shape or out.dtype != value.dtype:
                continue
            by_name = names_pair(input_name, output_name)
            by_wiring = (input_name, output_name) in wired
            if by_name or by_wiring:
                evidence = (
                    "names and recurrent wiring"
                    if by_name and by_wiring
                    else "names"
                    if by_name
                    else ("recurrent wiring")
                )
                pairs.append(StatePair(input_name, output_name, evidence))
                taken |= {input_name, output_name}
                break
    return pairs


def _check_pair(model: Model, sample: Sample, input_name: str, output_name: str) -> None:
    if input_name not in sample.inputs:
        raise UsageError(
            f"{model.path}: --state {input_name}={output_name}: the model has no input {input_name!r}",
            hint=f"its inputs: {sorted(sample.inputs)}",
        )
    if output_name not in sample.outputs:
        raise UsageError(
            f"{model.path}: --state {input_name}={output_name}: the model has no output {output_name!r}",
            hint=f"its outputs: {sorted(sample.outputs)}",
        )
    a, b = sample.inputs[input_name], sample.outputs[output_name]
    if a.shape != b.shape or a.dtype != b.dtype:
        raise UsageError(
            f"{model.path}: --state {input_name}={output_name}: input {input_name} is {a.dtype}{list(a.shape)} but "
            f"output {output_name} is {b.dtype}{list(b.shape)}; a state must come back as it went in"
        )


# ------------------------------------------------------------------------------------ streaming verification


@dataclass
class StreamingResult:
    """Per-frame comparison of source and target over consecutive calls."""

    frames: int
    pairs: list[StatePair]
    per_frame_error: list[float] = field(default_factory=list)  # the largest error of any output, per call
    worst: dict[str, tuple[float, int]] = field(default_factory=dict)  # output -> (largest error, at frame)
    final_state_error: dict[str, float] = field(default_factory=dict)  # state output -> error after the last call

    def growth_text(self) -> str:
        """'frame 1: 1.2e-07, frame 10: 3.1e-07, ..., frame 100: 4.0e-07' (at most eight frames)."""
        n = len(self.per_frame_error)
        shown = sorted({0, n - 1, *np.linspace(0, n - 1, 8).astype(int).tolist()}) if n else []
        return ", ".join(f"frame {k + 1}: {self.per_frame_error[k]:.2g}" for k in shown)

    def to_json(self) -> dict:
        return {
            "frames": self.frames,
            "state_pairs": [p.to_json() for p in self.pairs],
            "per_frame_error": self.per_frame_error,
            "final_state_error": self.final_state_error,
            "worst": {name: {"error": error, "call": call} for name, (error, call) in self.worst.items()},
        }


def frame_count(given: dict[str, np.ndarray], declared: dict[str, np.ndarray], frames: int | None) -> int:
    """How many frames ``given`` (``--inputs``) holds: an input given with one more leading axis than the model
    declares holds a sequence of frames (all such inputs the same count); else ``frames`` (or the default)."""
    counts = {
        name: value.shape[0]
        for name, value in given.items()
        if name in declared and value.ndim == declared[name].ndim + 1
    }
    if len(set(counts.values())) > 1:
        raise UsageError(f"--inputs hold sequences of different lengths: {counts}")
    held = next(iter(counts.values()), None)
    if held is not None and frames is not None and frames > held:
        raise UsageError(f"--frames {frames}: --inputs hold only {held} frames")
    return frames or held or DEFAULT_FRAMES


def run_frames(
    run: Runner,
    draw: Callable[[int], dict[str, np.ndarray]],
    pairs: Iterable[StatePair],
    initial: dict[str, np.ndarray],
    frames: int,
    state_inputs: bool = True,
) -> Iterable[dict[str, np.ndarray]]:
    """Call ``run`` ``frames`` times on ``draw(k)``'s frame inputs, feeding each call's state outputs back into
    their inputs (``initial`` before the first call); ``state_inputs`` False: the runner holds its states itself
    (a stateful artifact) and takes the frame inputs only. Yields each call's outputs."""
    pairs = list(pairs)
    states = dict(initial)
    for k in range(frames):
        feed = {**draw(k), **(states if state_inputs else {})}
        outputs = run(feed)
        yield outputs
        states = {p.input: outputs[p.output] for p in pairs if p.output in outputs}


def open_runner(model: Model, path: str | Path) -> Runner:
    """A runner of the artifact at ``path`` that keeps its runtime loaded across calls (the format's
    ``open_session``), or one that loads it on each call (``run_whole``/``run_native``); a model whose layers were
    read from no artifact (an int8 twin in memory: ``accuracy``) on gatepack's executor (``in_memory``)."""
    if held_in_memory(model):
        return in_memory_runner(model)
    impl = registry.reader(model.format)
    if impl.open_session is not None:
        return impl.open_session(path)
    run = impl.run_whole or impl.run_native
    return lambda feed: run(path, feed)


def _split_given(given: "GivenInputs", declared: list[tuple[str, np.dtype, list]]) -> tuple[dict, dict]:
    """``--inputs`` split into fixed values and sequences of frames (one more leading axis than declared)."""
    ranks = {name: len(dims) for name, _, dims in declared}
    sequences = {n: v for n, v in given.values.items() if n in ranks and v.ndim == ranks[n] + 1}
    fixed = {n: v for n, v in given.values.items() if n not in sequences}
    return fixed, sequences


@dataclass
class _Feeds:
    """The inputs of a streaming run: a first call drawn as single-call verification draws it (the state pairs'
    shapes come from it), the user's fixed values and sequences of frames (``--inputs``)."""

    first: dict[str, np.ndarray]
    words: str
    fixed: dict[str, np.ndarray]
    sequences: dict[str, np.ndarray]

    @classmethod
    def draw(cls, source: Model, given: "GivenInputs", seed: int) -> "_Feeds":
        from gatepack.converters.verification import GivenInputs, _graph_inputs, sample_graph_inputs

        fixed, sequences = _split_given(given, _graph_inputs(source))
        first = {n: v[0] for n, v in sequences.items()}
        rng = np.random.default_rng(seed)
        feed, words = sample_graph_inputs(source, rng, given=GivenInputs(given.shapes, {**fixed, **first}))
        return cls(feed, words, fixed, sequences)

    def frames(self, state_inputs: set[str], seed: int) -> Callable[[int], dict[str, np.ndarray]]:
        """Call k's frame inputs (not the states), the same each time they are asked for: the item k of a given
        sequence, a given or integer input as fixed (an integer the model compares with a constant: a sample
        rate), floats drawn anew in [-1, 1). Kept until both chains have run the call (``forget``)."""
        rng = np.random.default_rng(seed + 1)
        drawn: list[dict[str, np.ndarray]] = []

        def draw(k: int) -> dict[str, np.ndarray]:
            frame = {}
            for name, value in self.first.items():
                if name in state_inputs:
                    continue
                if name in self.sequences:
                    frame[name] = self.sequences[name][k].astype(value.dtype, copy=False)
                elif name in self.fixed or not np.issubdtype(value.dtype, np.floating):
                    frame[name] = value
                else:
                    frame[name] = rng.uniform(-1, 1, value.shape).astype(value.dtype)
            return frame

        def frame(k: int) -> dict[str, np.ndarray]:
            while len(drawn) <= k:
                drawn.append(draw(len(drawn)))
            return drawn[k]

        return frame


def verify_streaming(
    source: Model,
    target: Model,
    *,
    frames: int | None = None,
    states: Sequence[tuple[str, str]] = (),
    pairs: Sequence[StatePair] | None = None,
    seed: int = 0,
    target_file: str | Path | None = None,
    tolerance: "Tolerance | None" = None,
    given: "GivenInputs | None" = None,
) -> "Verification":
    """Run ``source`` and ``target`` over consecutive calls (module docstring), each feeding its own state
    outputs back, from zero states (or those ``given``); compare every output of every call and the final
    states. A target whose graph inputs lack the state inputs holds its states itself (a stateful artifact):
    it is fed the frame inputs only, and its runner returns its states under the state outputs' names.
    ``pairs``: the state pairs when known (else found: ``states`` given, the rest by ``find_state_pairs``)."""
    from gatepack.converters.verification import GivenInputs, Verification, judge_in_quantization_steps, landed

    given = given or GivenInputs()
    target_path = Path(target_file or _path(target))
    feeds = _Feeds.draw(source, given, seed)
    run_source = open_runner(source, _path(source))
    if pairs is None:
        pairs = find_state_pairs(source, Sample(feeds.first, run_source(feeds.first)), states)
    pairs = list(pairs)
    if not pairs:
        raise UsageError(
            f"{source.path}: no state pairs found (no output reads as the next value of an input)",
            hint="name them: --state INPUT=OUTPUT (repeatable)",
        )
    count = frame_count(feeds.sequences, feeds.first, frames)
    state_inputs = {p.input for p in pairs}
    initial = {p.input: feeds.fixed.get(p.input, np.zeros_like(feeds.first[p.input])) for p in pairs}
    stateful = not state_inputs <= _artifact_inputs(replace_path(target, target_path))
    frame = feeds.frames(state_inputs, seed)
    expected: list[dict[str, np.ndarray]] = []  # the source's outputs, call by call
    calls = zip(
        _kept(run_frames(run_source, frame, pairs, initial, count), expected),
        run_frames(_fed(given, open_runner(target, target_path)), frame, pairs, initial, count, not stateful),
    )
    streaming = StreamingResult(count, pairs)
    comparisons = _compare_calls(calls, streaming, _precisions(source, target, stateful), tolerance, target)
    result = Verification(str(source.path), str(target.path), seed, outputs=comparisons)
    if tolerance is None and any(not o.passed for o in comparisons) and quantizer_steps.applies(source):
        rerun = lambda copy: run_frames(open_runner(copy, copy.path), frame, pairs, initial, count)  # noqa: E731
        judge_in_quantization_steps(source, target, quantizer_steps.measure_streaming(source, rerun, expected), result)
    result.inputs_used = (
        f"{count} consecutive calls from {'given' if any(p.input in feeds.fixed for p in pairs) else 'zero'} "
        f"states; frame inputs {'given' if feeds.sequences else 'drawn anew for each call'} ({feeds.words})"
    )
    result.notes.append(
        f"streamed {count} calls, each side feeding its own state outputs back "
        f"({', '.join(str(p) for p in pairs)}); largest error per call: {streaming.growth_text()}"
        + ("; the target holds its states itself (stateful) and was fed the frame inputs only" if stateful else "")
    )
    result.streaming = streaming
    result.notes = [landed(note, target_path, target) for note in result.notes]  # never the staging path
    return result


def _kept(calls: Iterable[dict[str, np.ndarray]], kept: list[dict[str, np.ndarray]]) -> Iterable[dict]:
    """``calls`` as they come, each also appended to ``kept``."""
    for outputs in calls:
        kept.append(outputs)
        yield outputs


def _artifact_inputs(model: Model) -> set[str]:
    """The names an artifact takes: its graph inputs, or for a format that writes layers alone (LiteRT) its
    layers' interface inputs (X and each input the layer is fed)."""
    from gatepack.converters.verification import _graph_inputs

    if registry.reader(model.format).graph_inputs is not None:
        return {name for name, _, _ in _graph_inputs(model)}
    return {
        name
        for layer in model.layers
        for name in (layer.interface.x, *(getattr(layer.interface, role) for role in layer.fed_roles()))
    }


def _fed(given: "GivenInputs", run: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """``run`` fed without the inputs the artifact holds as constants (``--input-value``)."""
    return (lambda feed: run(given.for_target(feed))) if given.fixed else run


def _path(model: Model) -> Path:
    if model.path is None:
        raise UsageError("streaming verification runs artifacts read from files, not in-memory models")
    return Path(model.path)


def _precisions(source: Model, target: Model, stateful: bool) -> tuple[str, ...]:
    """What either side computes in; a stateful target also rounds every call's state to the type its runtime holds
    states in (``FormatInfo.held_state_dtype``: fp16 for Core ML, float32 for OpenVINO's variables)."""
    from gatepack.converters.verification import _computed_in

    computed = tuple(_computed_in(model, layer) for model in (source, target) for layer in model.layers)
    held = registry.check_name(target.format).held_state_dtype if stateful and target.meta.get("states") else None
    return computed + ((held,) if held else ())


def _compare_calls(
    calls: Iterable[tuple[dict, dict]],
    streaming: StreamingResult,
    computed: tuple[str, ...],
    tolerance: "Tolerance | None",
    target: Model,
) -> "list[OutputComparison]":
    """Every output of every (source, target) call compared; each output's worst call kept (a failing one
    first), the largest error per call and the state outputs' errors after the last call noted in
    ``streaming``."""
    from gatepack.converters.samples import TOLERANCES
    from gatepack.converters.verification import compare

    worst: dict[str, OutputComparison] = {}
    errors: dict[str, float] = {}
    for k, (expected, actual) in enumerate(calls):
        errors = {}
        for name, value in expected.items():
            got = actual.get(name)
            dtypes = tuple(d for d in (str(value.dtype), *computed) if d in TOLERANCES) or ("float32",)
            comparison = (
                compare(
                    STREAMED, name, got, value, dtypes, tolerance=tolerance or _accumulated(dtypes, streaming.frames)
                )
                if got is not None
                else _missing(STREAMED, name, target)
            )
            errors[name] = comparison.max_abs_error
            kept = worst.get(name)
            if (
                kept is None
                or (kept.passed and not comparison.passed)
                or (kept.passed == comparison.passed and comparison.max_abs_error > kept.max_abs_error)
            ):
                worst[name] = comparison
                streaming.worst[name] = (comparison.max_abs_error, k + 1)
        streaming.per_frame_error.append(max(errors.values(), default=0.0))
    streaming.final_state_error = {p.output: errors[p.output] for p in streaming.pairs if p.output in errors}
    return list(worst.values())


def _accumulated(dtypes: tuple[str, ...], calls: int) -> "Tolerance":
    """The tolerance over ``calls`` consecutive calls: each side's rounding is fed back with its states, and such
    differences add up like a random walk, so one call's tolerance (the loosest of ``dtypes``) grows with the
    square root of the calls, at most tenfold (100 calls). A miswired or fp16-drifting state is off by far more."""
    from gatepack.converters.samples import TOLERANCES
    from gatepack.converters.verification import Tolerance

    growth = min(float(np.sqrt(calls)), 10.0)
    return Tolerance(max(TOLERANCES[d][0] for d in dtypes) * growth, max(TOLERANCES[d][1] for d in dtypes) * growth)


def _missing(label: str, name: str, target: Model):
    from gatepack.converters.verification import OutputComparison

    return OutputComparison(label, f"{name} (missing from {target.path})", float("inf"), float("inf"), 0.0, 0.0, False)


def replace_path(model: Model, path) -> Model:
    from dataclasses import replace

    return replace(model, path=Path(path))


def source_state_pairs(
    source: Model, given_pairs: Sequence[tuple[str, str]] = (), given: "GivenInputs | None" = None, seed: int = 0
) -> list[StatePair]:
    """``find_state_pairs`` on one call of the source on drawn inputs (the shapes and dtypes a pair must keep)."""
    from gatepack.converters.verification import GivenInputs

    feeds = _Feeds.draw(source, given or GivenInputs(), seed)
    return find_state_pairs(source, Sample(feeds.first, open_runner(source, _path(source))(feeds.first)), given_pairs)

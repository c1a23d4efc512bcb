"""Numerical verification: run two artifacts of the same layers on the same random inputs, compare.

Each layer of the source gets random inputs drawn for its interface (X, and ``sequence_lens``,
``initial_h`` and an LSTM's ``initial_c`` when it has them; symbolic dimensions take small sizes).
Each side runs on its own runtime where one runs here (onnxruntime for ONNX, OpenVINO CPU for IR);
otherwise on gatepack's NumPy executor of that format's own semantics, reading the saved artifact. If a native runtime
refuses the artifact (onnxruntime rejects ``layout = 1``, has no kernel for opset < 7 or for float64
GRU), that side runs on gatepack's executor of the layer read from the artifact, and the result
says so. Outputs are mapped into one convention (layout 0) and compared with dtype-aware tolerances:
pass when ``|a - b| <= atol + rtol * |b|`` everywhere.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

import gatepack.converters.layer_steps as layer_steps
import gatepack.converters.quantizer_steps as quantizer_steps
import gatepack.converters.registry as registry
from gatepack.converters.agreement import Agreement, agreement
from gatepack.converters.errors import GatepackError, InputError, RuntimeFailure, UsageError
from gatepack.converters.fileio import release_pages
from gatepack.converters.findings import FP16_SOURCE_WARNING
from gatepack.converters.in_memory import held_in_memory, in_memory_runner
from gatepack.converters.model import Model
from gatepack.converters.samples import DEFAULT_SEQ_LENGTH, TOLERANCES, sample_inputs, sample_sizes
from gatepack.schemas.layer import (
    CONSTANT_ROLES,
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    PERM_Y_TO_SEQ_MAJOR,
    ROLE_LABELS,
    RecurrentLayer,
)

if TYPE_CHECKING:
    from gatepack.converters.progress import Progress
    from gatepack.converters.streaming import StreamingResult


@dataclass
class OutputComparison:
    layer: str
    output: str  # Y, Y_h or Y_c
    max_abs_error: float
    max_rel_error: float
    atol: float
    rtol: float
    passed: bool
    nonfinite_in_source: int = 0  # entries where the source overflowed and the target stayed finite
    agreement: "Agreement | None" = None  # mean error, argmax and threshold agreement (``converters.agreement``)
    judgement: str | None = None  # how it was judged when not by float tolerances (``converters.quantizer_steps``)
    largest_expected: float = 0.0  # max |expected| over the entries compared: ``atol + rtol * it`` bounds max_abs_error


@dataclass(frozen=True)
class Tolerance:
    """The user's tolerances (``verify --atol/--rtol``); None keeps the per-dtype default."""

    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self) -> None:
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
                raise UsageError(f"{name} {value!r} is not a finite number >= 0")


@dataclass
class Verification:
    source: str
    target: str
    seed: int
    outputs: list[OutputComparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # why the check that was due could not be made (a whole model compared layer by layer instead): a
    # verification that is incomplete has not passed, whatever it compared
    incomplete: str | None = None
    inputs_used: str = ""  # the inputs fed, in words: their shapes, where they came from
    streaming: "StreamingResult | None" = None  # a streaming model's consecutive calls (``streaming``)

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs) and self.incomplete is None

    def __repr__(self) -> str:
        """One line for a notebook (``to_text()`` and ``to_json()`` give every output)."""
        return f"Verification({self.source!r} vs {self.target!r}: {self.verdict()})"

    def __str__(self) -> str:
        return self.to_text()

    @property
    def worst_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "target": self.target,
            "seed": self.seed,
            "passed": self.passed,
            "incomplete": self.incomplete,
            "inputs": self.inputs_used,
            "outputs": [asdict(o) for o in self.outputs],
            "notes": self.notes,
            **({"streaming": self.streaming.to_json()} if self.streaming else {}),
        }

    def verdict(self) -> str:
        """'verification passed (56 outputs, largest error 7.6e-06 in conv_cache_out)'."""
        if not self.outputs:
            return "verification FAILED (no output compared)"
        worst = max(self.outputs, key=lambda o: o.max_abs_error)
        where = worst.output if worst.layer == WHOLE_MODEL else f"{worst.layer} {worst.output}"
        failed = sum(not o.passed for o in self.outputs)
        head = "passed" if self.passed else f"FAILED ({failed} of {len(self.outputs)} outputs differ)"
        if self.incomplete and not failed:
            head = "INCOMPLETE (the whole model was not run; its layers agree)"
        return (
            f"verification {head} ({len(self.outputs)} output(s), largest error {worst.max_abs_error:.3g} in {where})"
        )

    LISTED = 8  # outputs: above this, the passing ones are summarised in one line

    def to_text(self) -> str:
        state = "passed" if self.passed else "INCOMPLETE" if self.incomplete and self.outputs else "FAILED"
        lines = [f"verification {state}: {self.source} vs {self.target} (seed {self.seed})"]
        if self.incomplete:
            lines.append(f"  not checked: {self.incomplete}")
        if self.inputs_used:
            lines.append(f"  inputs: {self.inputs_used}")
        shown = self.outputs if len(self.outputs) <= self.LISTED else [o for o in self.outputs if not o.passed]
        for o in shown[: self.LISTED]:
            mark = "ok  " if o.passed else "FAIL"
            lines.append(
                f"  {mark} {o.layer} {o.output}: max abs {o.max_abs_error:.3g}, max rel {o.max_rel_error:.3g} "
                f"(atol {o.atol:g}, rtol {o.rtol:g})"
            )
            if o.judgement:
                lines.append(f"       judged {o.judgement}")
            if o.nonfinite_in_source:
                lines.append(
                    f"       {o.nonfinite_in_source} entries are inf/NaN in the source's result, or in a sequence "
                    "where it overflowed, and not in the target's; compared on the rest"
                )
        if len(shown) > self.LISTED:
            lines.append(f"  ... and {len(shown) - self.LISTED} more outputs that differ (--json lists every one)")
        passing = [o for o in self.outputs if o.passed]
        if len(self.outputs) > self.LISTED and passing:
            worst = max(passing, key=lambda o: o.max_abs_error)
            layers = len({o.layer for o in passing})
            nonfinite = sum(o.nonfinite_in_source for o in passing)
            lines.append(
                f"  ok   {len(passing)} outputs of {layers} layer(s): largest max abs {worst.max_abs_error:.3g} "
                f"({worst.layer} {worst.output}), max rel {max(o.max_rel_error for o in passing):.3g}"
                + (f"; {nonfinite} entries where the source overflowed not compared" if nonfinite else "")
            )
        lines += [f"  note: {n}" for n in _grouped_notes(self.notes)]
        return "\n".join(lines)


def relative_error(diff: np.ndarray, expected: np.ndarray, atol: float) -> float:
    """max |a - b| / |b| over the entries where |b| > atol; 0 where there is none. At or below atol the absolute
    tolerance alone decides an entry, and a ratio to a value near zero says nothing;
    numpy.testing's report likewise divides by the nonzero expected values only."""
    meaningful = np.abs(expected) > atol
    if not meaningful.any():
        return 0.0
    return float(np.nan_to_num(diff[meaningful] / np.abs(expected[meaningful]), nan=np.inf).max())


def _grouped_notes(notes: list[str]) -> list[str]:
    """Notes that differ only in the layer they name, as one note naming how many layers."""
    import re

    groups: dict[str, list[str]] = {}
    for note in notes:
        found = re.search(r"layer '([^']*)'", note)
        key = note if found is None else note[: found.start()] + "layer {}" + note[found.end() :]
        groups.setdefault(key, []).append(found.group(1) if found else "")
    out = []
    for key, names in groups.items():
        if "{}" not in key:
            out.append(key)
        elif len(names) == 1:
            out.append(key.replace("layer {}", f"layer {names[0]!r}"))
        else:
            shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            out.append(key.replace("layer {}", f"{len(names)} layers ({shown})"))
    return out


def to_interface(layer: RecurrentLayer, role_inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Layout-0 role inputs -> the layer's own tensor names and layout."""
    itf = layer.interface
    batch_major = itf.layout == 1
    x = role_inputs["X"]
    feed = {itf.x: x.transpose(PERM_SWAP_01) if batch_major else x}
    # A layer whose format always takes these inputs (OpenVINO's sequence ops) gets their neutral
    # values when the other side has none: full lengths, a zero initial state. An input the layer holds as
    # a constant is never fed.
    fed = layer.fed_roles()
    if "sequence_lens" in fed and itf.sequence_lens:  # (a fed role is named)
        feed[itf.sequence_lens] = role_inputs.get("sequence_lens", np.full(x.shape[1], x.shape[0], np.int32))
    for role in ("initial_h", "initial_c"):
        if role in fed:
            state = role_inputs.get(role, np.zeros((layer.num_directions, x.shape[1], layer.hidden_size), layer.dtype))
            feed[getattr(itf, role)] = state.transpose(PERM_SWAP_01) if batch_major else state
    return {k: np.ascontiguousarray(v) for k, v in feed.items()}


def from_interface(layer: RecurrentLayer, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The layer's named outputs -> layout-0 role outputs Y [S,D,N,H], Y_h and Y_c [D,N,H]."""
    itf = layer.interface
    out = {}
    for role in OUTPUT_ROLES:
        name = getattr(itf, role)
        if name and name in outputs:
            perm = PERM_Y_TO_SEQ_MAJOR if role == "y" else PERM_SWAP_01
            out[ROLE_LABELS[role]] = outputs[name].transpose(perm) if itf.layout == 1 else outputs[name]
    return out


def run_layer(
    model: Model, layer: RecurrentLayer, role_inputs: dict[str, np.ndarray], notes: list[str]
) -> dict[str, np.ndarray]:
    """Run one layer of ``model`` natively (falling back to the executor, with a note)."""
    feed = to_interface(layer, role_inputs)
    try:
        if layer.provenance is None or not layer.provenance.of(model.format):
            raise RuntimeFailure(f"layer {layer.name!r}: it was not read from an artifact (an in-memory layer)")
        outputs = registry.reader(model.format).run_layer_native(layer, feed)
    except RuntimeFailure as err:
        reason = err.message.removeprefix(f"layer {layer.name!r}: ")
        notes.append(f"{model.path} layer {layer.name!r} ran on gatepack's executor: {reason}")
        return executed(layer, role_inputs)
    return from_interface(layer, outputs)


def executed(layer: RecurrentLayer, role_inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``layer`` on gatepack's executor: layout-0 role inputs in, layout-0 role outputs out."""
    from gatepack.converters.executor import run_layer as execute

    feed = to_interface(layer, role_inputs)
    itf = layer.interface
    results = execute(layer, feed[itf.x], *(feed.get(getattr(itf, role) or "") for role in INPUT_ROLES[1:]))
    return from_interface(layer, {getattr(itf, role): value for role, value in zip(OUTPUT_ROLES, results)})


def compare(
    layer_name: str,
    output: str,
    actual: np.ndarray,
    expected: np.ndarray,
    dtypes: tuple[str, ...],
    untrusted: np.ndarray | None = None,
    tolerance: "Tolerance | None" = None,
) -> OutputComparison:
    """Compare ``actual`` with ``expected`` (the source's result).

    Where the source runtime itself overflowed (``expected`` is inf/NaN: a divergent recurrence,
    or onnxruntime's naive Softplus), an entry agrees if ``actual`` is the same non-finite value or
    finite. ``untrusted`` marks further entries computed from such an overflow (the rest of that
    sequence: inf arithmetic inside the source runtime decides their signs). Both kinds are counted
    in ``nonfinite_in_source``, and the comparison fails if they are the majority. Everything else
    must satisfy ``|a - b| <= atol + rtol * |b|``, with the loosest of ``dtypes``' tolerances, or those
    ``tolerance`` sets. The max abs error is max |a - b|; the max rel error is ``relative_error``'s.
    """
    atol, rtol = max(TOLERANCES[d][0] for d in dtypes), max(TOLERANCES[d][1] for d in dtypes)
    negligible = atol  # below it an expected value is too near zero for a relative error (``relative_error``)
    if tolerance is not None:
        atol, rtol = (
            tolerance.atol if tolerance.atol is not None else atol,
            (tolerance.rtol if tolerance.rtol is not None else rtol),
        )
    a, b = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != b.shape:
        return OutputComparison(
            layer_name,
            f"{output} (shape {list(a.shape)} vs {list(b.shape)})",
            float("inf"),
            float("inf"),
            atol,
            rtol,
            False,
        )
    finite = np.isfinite(b)
    same_special = ~finite & ((a == b) | (np.isnan(a) & np.isnan(b)))
    trusted = finite if untrusted is None else finite & ~np.broadcast_to(untrusted, b.shape)
    a_cmp, b_cmp = a[trusted], b[trusted]
    diff = np.abs(a_cmp - b_cmp)
    max_abs = float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0))
    max_rel = relative_error(diff, b_cmp, negligible)
    passed = bool(np.all(diff <= atol + rtol * np.abs(b_cmp)))
    nonfinite = int((~trusted & ~same_special).sum())
    if nonfinite and (nonfinite * 2 > b.size or np.isnan(a[~finite & ~same_special]).any()):
        passed = False
    largest = float(np.abs(b_cmp).max(initial=0.0))
    return OutputComparison(
        layer_name, output, max_abs, max_rel, atol, rtol, passed, nonfinite, agreement(a, b), largest_expected=largest
    )


def _overflowed_sequences(expected: dict[str, np.ndarray]) -> np.ndarray | None:
    """[D, N]: the sequences (direction, batch entry) where the source's Y or a final state holds inf/NaN."""
    marks = []
    if "Y" in expected:
        marks.append(~np.isfinite(expected["Y"]).all(axis=(0, 3)))
    for final in ("Y_h", "Y_c"):
        if final in expected:
            marks.append(~np.isfinite(expected[final]).all(axis=2))
    return np.logical_or.reduce(marks) if marks else None


def _computed_in(model: Model, layer: RecurrentLayer) -> str:
    """The precision the model's runtime computes ``layer`` in (a format may compute float64 in
    float32: OpenVINO's CPU plugin), or float16 where the artifact stores the layer's weights in fp16 (an
    fp16-compressed IR computes in fp32 on weights rounded to fp16); the comparison uses the looser tolerance."""
    if any(f.warning == FP16_SOURCE_WARNING for f in model.notes_for(layer)):
        return "float16"
    return registry.reader(model.format).compute_dtype(layer)


def pair_layers(source: Model, target: Model) -> list[tuple[RecurrentLayer, RecurrentLayer]]:
    """Match layers by name, else by position when both have the same number of layers."""
    by_name = {layer.name: layer for layer in target.layers}
    if all(layer.name in by_name for layer in source.layers):
        return [(layer, by_name[layer.name]) for layer in source.layers]
    if len(source.layers) == len(target.layers):
        return list(zip(source.layers, target.layers))
    raise InputError(
        f"{target.path}: its {len(target.layers)} layer(s) do not match the {len(source.layers)} of {source.path}",
        hint="verify artifacts of the same layers",
    )


def _interface_mismatches(source: RecurrentLayer, target: RecurrentLayer, written: Model) -> list[OutputComparison]:
    """A failed comparison per optional input the source holds as a constant and the target asks its user to
    feed, or the reverse: running both on the same inputs could not show it (verification would have to invent
    the value one side lacks)."""
    failed = []
    for role in CONSTANT_ROLES:
        label = ROLE_LABELS[role]
        if role in source.constants and role in target.fed_roles():
            what = f"{label}: the source holds it as a constant, {written.path} takes it as an input"
        elif role in source.fed_roles() and role in target.constants:
            what = f"{label}: the source takes it as an input, {written.path} holds it as a constant"
        else:
            continue
        failed.append(OutputComparison(source.name, what, float("inf"), float("inf"), *TOLERANCES["float32"], False))
    return failed


WHOLE_MODEL = "(whole model)"


class SourceDoesNotRun(Exception):
    """The source's whole model does not run on its runtime (e.g. onnxruntime rejects ``layout = 1``)."""


def _graph_inputs(model: Model) -> list[tuple[str, np.dtype, list]]:
    graph_inputs = registry.reader(model.format).graph_inputs
    if graph_inputs is None:
        raise UsageError(f"{model.path}: the {model.format} format holds no whole models")
    return graph_inputs(model.path)


@dataclass(frozen=True)
class GivenInputs:
    """What the user fixes of verification's inputs: ``shapes`` (input name -> dims, for its symbolic
    dimensions: ``--input-shape``) and ``values`` (input name -> array: ``--inputs``); ``fixed``: the inputs among
    ``values`` the artifact holds as constants (``--input-value``), fed to the source only."""

    shapes: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    fixed: tuple[str, ...] = ()

    def for_target(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feed`` without the inputs the artifact holds as constants."""
        return {name: value for name, value in feed.items() if name not in self.fixed}

    def unfixed(self) -> "GivenInputs":
        """These inputs without the values the artifact holds (``--input-value``): what a specialised model is fed."""
        values = {name: value for name, value in self.values.items() if name not in self.fixed}
        return replace(self, values=values, fixed=())

    def __post_init__(self) -> None:
        for name, dims in self.shapes.items():
            if (
                not isinstance(name, str)
                or not isinstance(dims, (tuple, list))
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)
            ):
                raise UsageError(f"input shape {name}={dims!r} is not a list of sizes >= 1")
        for name, value in self.values.items():
            if not isinstance(name, str) or not isinstance(value, np.ndarray):
                raise UsageError(f"input {name!r} is a {type(value).__name__}, not a NumPy array")

    def check_names(self, model: Model, names: list[str]) -> None:
        """UsageError naming a given input the model does not take."""
        for given in (self.shapes, self.values):
            unknown = sorted(set(given) - set(names))
            if unknown:
                raise UsageError(f"{model.path}: the model has no input(s) {unknown}", hint=f"its inputs: {names}")


def sample_graph_inputs(
    model: Model, rng: np.random.Generator, dim_size: int = DEFAULT_SEQ_LENGTH, given: GivenInputs | None = None
) -> tuple[dict[str, np.ndarray], str]:
    """Inputs for every input of a whole model, and what they were in words. The user's own arrays where
    ``given`` has them; otherwise drawn at the declared shapes, a symbolic dimension taking its size from
    ``given.shapes`` (or from another input that fixes the same symbol), else ``dim_size``; floats in
    [-1, 1), integers as the model uses them (``_integer_draws``: a compared constant, an embedding's rows,
    lengths), other integers and booleans zero (indices and flags with a safe value)."""
    given = given or GivenInputs()
    declared = _graph_inputs(model)
    given.check_names(model, [name for name, _, _ in declared])
    symbols: dict[str, int] = {}
    for name, _, dims in declared:
        fixed = given.values[name].shape if name in given.values else given.shapes.get(name)
        if fixed is None:
            continue
        if len(fixed) != len(dims) or any(isinstance(d, int) and d != f for d, f in zip(dims, fixed)):
            raise UsageError(f"{model.path}: input {name!r} is declared {dims}, given shape {list(fixed)}")
        symbols.update((d, f) for d, f in zip(dims, fixed) if isinstance(d, str))
    integers = _integer_draws(model, dim_size)
    feed, words = {}, []
    for name, dtype, dims in declared:
        if name in given.values:
            feed[name] = given.values[name].astype(dtype, copy=False)
            words.append(f"{name} {list(feed[name].shape)} (given)")
            continue
        shape = given.shapes.get(name) or [d if isinstance(d, int) else symbols.get(d, dim_size) for d in dims]
        if np.issubdtype(dtype, np.floating):
            feed[name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif name in integers:
            low, high, why = integers[name]
            feed[name] = rng.integers(low, high + 1, shape).astype(dtype)
            words.append(f"{name} {why}" if low == high else f"{name} {list(shape)} {why}")
            continue
        else:
            feed[name] = np.zeros(shape, dtype)
        words.append(f"{name} {list(shape)}")
    return feed, "; ".join(words)


def runnable_shapes(model: Model, given: GivenInputs, seed: int = 0) -> tuple[GivenInputs, str]:
    """For a whole ``model`` whose source fails on the inputs drawn at the default size: ``given`` with shapes for
    its inputs that have symbolic dimensions at the first size the source runs on, and that rule in words. Sizes
    tried: the static sizes of its inputs (a batch another input fixes, as an IR's state [1, 2, H] fixes X's
    batch), then ``samples.dim_size_candidates`` after the default (the sizes its graph implies, then larger);
    at each size first only the symbols one input alone has (a batch shared by several inputs staying at the
    default), then every symbol. ``given`` unchanged ('') when every dimension is given or static, or no
    candidate runs (the verification then says the source fails on the inputs drawn)."""
    from gatepack.converters.samples import MAX_SAMPLE_VALUES, dim_size_candidates

    declared = [(n, dims) for n, _, dims in _graph_inputs(model) if n not in given.shapes and n not in given.values]
    if all(isinstance(d, int) for _, dims in declared for d in dims):
        return given, ""
    analyses = registry.implementation(model.format).graph_analyses
    implied = analyses.implied_sizes(Path(str(model.path))) if analyses is not None else []
    static = sorted({d for _, _, dims in _graph_inputs(model) for d in dims if isinstance(d, int) and d >= 2})
    shared = {
        d for d, k in Counter(d for _, dims in declared for d in set(dims) if isinstance(d, str)).items() if k > 1
    }
    run = registry.reader(model.format).run_native
    for size in dict.fromkeys([*static, *dim_size_candidates(implied)[1:]]):
        for keep_shared in (True, False) if shared else (False,):
            fixed = {
                d: DEFAULT_SEQ_LENGTH if keep_shared and d in shared else size for _, dims in declared for d in dims
            }
            trial = GivenInputs(
                {**given.shapes, **{n: [d if isinstance(d, int) else fixed[d] for d in dims] for n, dims in declared}},
                given.values,
                given.fixed,
            )
            if any(int(np.prod(shape, dtype=np.int64)) > MAX_SAMPLE_VALUES for shape in trial.shapes.values()):
                continue  # a tensor past the sample limit: never drawn (3 symbols at 1792 would be 43 GB)
            try:
                run(model.path, sample_graph_inputs(model, np.random.default_rng(seed), size, trial)[0])
            except (RuntimeFailure, UsageError):
                continue
            return trial, (
                f"symbolic dimensions drawn as {size}{' (those of one input; shared ones 7)' if keep_shared else ''}: "
                f"the source fails at {DEFAULT_SEQ_LENGTH}; the first size it runs on among its inputs' static sizes "
                f"({', '.join(map(str, static)) or 'none'}), those its graph implies "
                f"({', '.join(map(str, implied)) or 'none'}), then larger"
            )
    return given, ""


def _integer_draws(model: Model, dim_size: int) -> dict[str, tuple[int, int, str]]:
    """How to draw each integer input of a whole model so that the model takes it (input -> (low, high, why), both
    ends included): its format's ``GraphAnalyses.integer_draws`` (ONNX's: a value it is compared with, an
    embedding's rows, lengths); {} for a format without them (its integers are drawn as zeros)."""
    analyses = registry.implementation(model.format).graph_analyses
    if analyses is None or model.path is None:
        return {}
    return analyses.integer_draws(Path(model.path), dim_size)


def verify_whole(
    source: Model,
    target: Model,
    *,
    seed: int = 0,
    dim_size: int = DEFAULT_SEQ_LENGTH,
    target_file=None,
    tolerance: Tolerance | None = None,
    given: GivenInputs | None = None,
) -> Verification:
    """Run two whole models (recurrent layers and every other operator) on their own runtimes on
    the same inputs (``sample_graph_inputs``); compare every output of the source by name."""
    target_file = target_file or target.path
    result = Verification(str(source.path), str(target.path), seed)
    feed, result.inputs_used = sample_graph_inputs(source, np.random.default_rng(seed), dim_size, given)
    try:
        expected = _run_source(source, feed)
    except RuntimeFailure as err:
        twin_run = _run_through_twin(source, feed, result, seed, tolerance)
        if twin_run is None:
            raise SourceDoesNotRun(f"{err.one_line()} (inputs: {result.inputs_used})") from None
        expected = twin_run
    try:
        actual = _run_target(target, target_file, (given or GivenInputs()).for_target(feed))
    except GatepackError as err:
        err.message = landed(err.message, target_file, target)
        raise
    # the precisions either side computes in: e.g. 8-bit quantized source layers, an fp16 target
    computed = tuple(_computed_in(model, layer) for model in (source, target) for layer in model.layers)
    for name, value in expected.items():
        if name not in actual:
            result.outputs.append(
                OutputComparison(
                    WHOLE_MODEL,
                    f"{name} (missing from {target.path})",
                    float("inf"),
                    float("inf"),
                    *TOLERANCES["float32"],
                    False,
                )
            )
            continue
        dtypes = tuple(d for d in (str(value.dtype), str(actual[name].dtype), *computed) if d in TOLERANCES) or (
            "float32",
        )  # integer outputs: float32's
        result.outputs.append(compare(WHOLE_MODEL, name, actual[name], value, dtypes, tolerance=tolerance))
    result.notes.append("whole models compared end to end, the target loaded from the written file")
    result.notes += [_mask_note(layer) for layer in source.layers if layer.interface.mask]
    if tolerance is None and any(not o.passed for o in result.outputs) and quantizer_steps.applies(source):
        judge_in_quantization_steps(source, target, quantizer_steps.measure(source, feed, expected, seed), result, seed)
        if given is not None and (given.shapes or set(given.values) - set(given.fixed)):
            result.outputs += _at_the_drawn_size(source, target, seed, target_file, given, result.notes)
        result.notes = [landed(note, target_file, target) for note in result.notes]
    return result


def _run_source(source: Model, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole source on its own runtime, or with its layers held in memory on gatepack's executor (``in_memory``:
    an int8 twin)."""
    if held_in_memory(source):
        return in_memory_runner(source)(feed)
    return registry.reader(source.format).run_native(source.path, feed)


def _run_target(target: Model, target_file, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole target loaded from ``target_file`` on the runtime verification judges it by (``run_whole``), or
    with its layers held in memory on gatepack's executor (``in_memory``: an int8 twin)."""
    if held_in_memory(target):
        return in_memory_runner(target)(feed)
    runs = registry.reader(target.format)
    return (runs.run_whole or runs.run_native)(target_file, feed)


def judge_in_quantization_steps(
    source: Model, target: Model, measured: dict[str, quantizer_steps.Sensitivity], result, seed: int = 0
) -> None:
    """The outputs of ``result`` that failed float tolerances judged in quantization steps against the source's
    own sensitivity ``measured`` (``quantizer_steps``: on one call, or over consecutive calls), and the recurrent
    layers proven alone (``compare_layers``, each judged step by step within its own sensitivity to one float32
    step on X where float tolerances fail); a note says what was measured and applied."""
    failed = [o for o in result.outputs if not o.passed and o.output in measured]
    if not failed:
        return
    result.outputs = [quantizer_steps.judged(o, measured[o.output]) if o in failed else o for o in result.outputs]
    result.notes.append(quantizer_steps.note(measured, [o.output for o in failed]))
    if not target.layers:
        result.outputs.append(_not_proven_alone(target))
        return
    compare_layers(source, target, result, np.random.default_rng(seed), label=" [alone]", per_step=True)


def _at_the_drawn_size(
    source: Model, target: Model, seed: int, target_file, given: GivenInputs, notes: list[str]
) -> list[OutputComparison]:
    """The whole model compared again on inputs drawn at the default size, where fewer values lie on a rounding
    boundary: the source's own sensitivity bounds the outputs at the user's sizes loosely (ddddocr at width 160: a
    0.5% error in one convolution's scale can stay within it), and at a small size it is usually nil, so such an
    error fails there at float tolerances (ddddocr at width 7: exact). Its outputs are named with the size."""
    fixed = GivenInputs(values={k: v for k, v in given.values.items() if k in given.fixed}, fixed=given.fixed)
    try:
        small = verify_whole(source, target, seed=seed, target_file=target_file, given=fixed)
    except SourceDoesNotRun as err:
        notes.append(f"the whole model was not compared again at the drawn size {DEFAULT_SEQ_LENGTH}: {err}")
        return []
    except (InputError, RuntimeFailure) as err:  # an artifact of static sizes (Core ML given --input-shape)
        why = landed(err.one_line(), target_file, target)
        notes.append(f"the whole model was not compared again at the drawn size {DEFAULT_SEQ_LENGTH}: {why}")
        return []
    notes += [note for note in small.notes if note not in notes]
    return [replace(o, output=f"{o.output} (drawn at {DEFAULT_SEQ_LENGTH})") for o in small.outputs]


def _not_proven_alone(target: Model) -> OutputComparison:
    """A failed comparison: the recurrent layers of ``target`` cannot be run alone (it holds them as elementary
    operators), so a judgement in quantization steps would stand without the proof that bounds what it hides."""
    what = f"recurrent layers alone (not run: {target.path} holds them as elementary operators)"
    return OutputComparison(WHOLE_MODEL, what, float("inf"), float("inf"), *TOLERANCES["float32"], False)


def _mask_note(layer: RecurrentLayer) -> str:
    """What an end-to-end comparison says about a layer's per-step hold: the model computes its mask from the
    inputs drawn, which may leave it all true or all false."""
    return (
        f"layer {layer.name!r} holds steps where its mask {layer.interface.mask!r} (computed by the model, Keras "
        "masking) is false: inputs drawn at random may leave that mask all true or all false, so this comparison "
        "need not exercise the hold, which was proven when the layer was lifted (masks with holes, against "
        "onnxruntime running the original loop); compare padded inputs with --inputs to check it end to end"
    )


def _run_through_twin(
    source: Model, feed: dict[str, np.ndarray], result: Verification, seed: int, tolerance: Tolerance | None
) -> dict[str, np.ndarray] | None:
    """The source's outputs on ``feed`` from its exact twin, when its runtime refuses some of its nodes and its format
    writes one (``runnable_twin``: ONNX's ``layout = 1`` nodes as layout-0 nodes between Transposes); None when it
    has none. Each rewritten layer is first run alone, the original on gatepack's executor (its runtime refuses it)
    and the twin's nodes on the runtime, on the same random inputs: those comparisons join ``result``'s outputs,
    so a twin that differs fails the verification. A twin that fails too raises ``SourceDoesNotRun``."""
    import tempfile
    from pathlib import Path

    implementation = registry.reader(source.format)
    if implementation.runnable_twin is None or source.path is None:
        return None
    suffix = (registry.FORMATS[source.format].suffixes or ("",))[0]
    with tempfile.TemporaryDirectory(prefix="gatepack-twin-") as tmp:
        twin_path = Path(tmp) / f"twin{suffix}"
        rewritten = implementation.runnable_twin(source, twin_path)
        if not rewritten:
            return None
        twin = implementation.read(twin_path)
        rng = np.random.default_rng(seed + 2)
        for layer, twin_layer in pair_layers(replace(source, layers=rewritten), twin):
            role_inputs = sample_inputs(layer, rng, sample_sizes(layer, twin_layer))
            expected = run_layer(source, layer, role_inputs, [])  # on the executor: the runtime refuses it
            actual = run_layer(twin, twin_layer, role_inputs, [])
            dtypes = (layer.interface.dtype, _computed_in(twin, twin_layer))
            for output in ("Y", "Y_h", "Y_c"):
                if output in expected and output in actual:
                    label = f"{layer.name} [twin vs executor]"
                    result.outputs.append(
                        compare(label, output, actual[output], expected[output], dtypes, None, tolerance)
                    )
        try:
            outputs = implementation.run_native(twin_path, feed)
        except RuntimeFailure as err:
            raise SourceDoesNotRun(f"its twin: {err.one_line()} (inputs: {result.inputs_used})") from None
    names, runtime = ", ".join(repr(layer.name) for layer in rewritten), registry.FORMATS[source.format].runtime
    result.notes.append(
        f"{source.path}: {runtime} refuses its recurrent node(s) {names} as written, so the source "
        "was run as its exact twin: each such node rewritten as the runtime runs it (ONNX: layout=1 as a layout-0 "
        "node between Transposes), everything else unchanged; each rewritten node was proven equal to gatepack's "
        "executor of the original on the same random inputs (the outputs marked [twin vs executor]); the runtime "
        "never ran the original nodes"
    )
    return outputs


def verify_models(
    source: Model,
    target: Model,
    *,
    seed: int = 0,
    target_file=None,
    progress: "Progress | None" = None,
    tolerance: Tolerance | None = None,
    given: GivenInputs | None = None,
) -> Verification:
    """Compare ``target`` with ``source``: end to end when both hold whole models (other operators
    around their recurrent layers), else layer by layer. ``target_file`` is where the target's
    artifact is while it is being written (its ``path`` is where it will land); ``given``: the user's
    input shapes and values. When the whole source cannot run on the inputs drawn, its layers are compared
    one by one and the verification is ``incomplete``: it has not passed."""
    from gatepack.converters.progress import Silent

    progress = progress or Silent()
    incomplete = None
    if (source.meta.get("other_ops") and target.meta.get("other_ops")) or target.meta.get("elementary"):
        progress.step("verifying the whole model")
        try:
            return verify_whole(source, target, seed=seed, target_file=target_file, tolerance=tolerance, given=given)
        except SourceDoesNotRun as err:
            incomplete = (
                f"the whole model was not run, because the source itself fails on the inputs drawn for it ({err}); "
                "only its recurrent layers were compared, one by one, so the operators around them are unchecked"
            )
    elif given is not None and (given.shapes or given.values):
        raise UsageError(
            f"{source.path}: --input-shape and --inputs apply to whole models, and {source.path} and {target.path} "
            "are compared layer by layer"
        )
    result = Verification(str(source.path), str(target.path), seed, incomplete=incomplete)
    try:
        compare_layers(source, target, result, np.random.default_rng(seed), progress, tolerance)
    except GatepackError as err:
        err.message = landed(err.message, target_file, target)
        raise
    result.notes = [landed(note, target_file, target) for note in result.notes]
    return result


def landed(text: str, target_file, target: Model) -> str:
    """``text`` naming the artifact where it lands (``target.path``), never where it is staged while it is verified
    (``target_file``; None: nowhere else)."""
    return text.replace(str(target_file), str(target.path)) if target_file is not None else text


def compare_layers(
    source: Model,
    target: Model,
    result: Verification,
    rng: np.random.Generator,
    progress: "Progress | None" = None,
    tolerance: Tolerance | None = None,
    label: str = "",
    per_step: bool = False,
) -> None:
    """Each recurrent layer of ``source`` against its match in ``target``, alone, on random inputs drawn for it: its
    outputs compared into ``result`` (named by the layer, plus ``label``); ``per_step``: an output failing float
    tolerances judged step by step within the source layer's own sensitivity (``layer_steps``)."""
    from gatepack.converters.progress import Silent

    progress = progress or Silent()
    pairs = pair_layers(source, target)
    for k, (src_layer, dst_layer) in enumerate(pairs):
        progress.step(f"verifying layer {src_layer.name!r}", k, len(pairs))
        result.outputs += _interface_mismatches(src_layer, dst_layer, target)
        role_inputs = sample_inputs(src_layer, rng, sample_sizes(src_layer, dst_layer))
        expected = run_layer(source, src_layer, role_inputs, result.notes)
        actual = run_layer(
            target,
            dst_layer,
            {k: v.astype(dst_layer.dtype) if k != "sequence_lens" else v for k, v in role_inputs.items()},
            result.notes,
        )
        dtypes = (
            src_layer.interface.dtype,
            dst_layer.interface.dtype,
            _computed_in(source, src_layer),
            _computed_in(target, dst_layer),
        )
        compared = _compared_outputs(src_layer.name + label, actual, expected, dtypes, tolerance)
        if per_step:
            compared = judged_per_step(src_layer, compared, actual, expected, role_inputs)
        result.outputs += compared
        release_weights([src_layer])  # compared: its memory-mapped weights need not stay resident beside the next
    progress.step("verified", len(pairs), len(pairs))


def release_weights(layers: Sequence[RecurrentLayer]) -> None:
    """``layers``' memory-mapped weights out of this process's memory (``fileio.release_pages``: a later read maps the
    same bytes again). Verification runs the source from its file and the artifact read back, so the pages the writer
    and each layer's comparison read would otherwise stay resident beside both for nothing (the 277 MB GRU stack to
    LiteRT, whole: peak RSS 957 MB with them, 687 MB without)."""
    for layer in layers:
        for params in layer.directions:
            for array in (params.W, params.R, params.Wb, params.Rb, params.P):
                if array is not None:
                    release_pages(array)


def _compared_outputs(
    name: str, actual: dict, expected: dict, dtypes: tuple, tolerance: Tolerance | None
) -> list[OutputComparison]:
    """A layer's Y, Y_h and Y_c compared (``compare``), the entries after a source overflow untrusted."""
    overflowed = _overflowed_sequences(expected)
    compared = []
    if "Y" in expected and "Y" not in actual:  # (a final state the artifact never computes may be missing: not Y)
        compared.append(
            OutputComparison(name, "Y (not computed by the artifact)", float("inf"), float("inf"), 0, 0, False)
        )
    for output in ("Y", "Y_h", "Y_c"):
        if output in expected and output in actual:
            untrusted = (
                None
                if overflowed is None
                else (overflowed[None, :, :, None] if output == "Y" else overflowed[:, :, None])
            )
            compared.append(compare(name, output, actual[output], expected[output], dtypes, untrusted, tolerance))
    return compared


def judged_per_step(
    layer: RecurrentLayer,
    compared: list[OutputComparison],
    actual: dict[str, np.ndarray],
    expected: dict[str, np.ndarray],
    role_inputs: dict[str, np.ndarray],
) -> list[OutputComparison]:
    """``compared`` (``layer``'s outputs on ``role_inputs``) with those failing float tolerances judged step by step
    within the layer's own sensitivity to float32 rounding (``layer_steps``, on gatepack's executor), measured only
    when one fails."""
    if all(o.passed for o in compared):
        return compared
    sensitivity = layer_steps.measure(executed, layer, role_inputs)
    return [
        o if o.passed else layer_steps.judged(o, actual[o.output], expected[o.output], sensitivity) for o in compared
    ]


def verify_provider_nodes(written: Model, runtime: str, result: Verification, *, seed: int = 0) -> None:
    """Node by node, every recurrent node of the ONNX model ``written`` for ``runtime`` (an onnxruntime
    execution provider): gatepack's executor of that runtime's operator semantics, reading the node as the
    provider reads it (``run_onnx_node``), against onnxruntime CPU on the same node and random inputs. Each
    output is added to ``result`` (a node the provider would compute otherwise fails it). A layer written as
    elementary operators (read back by its description) is no such node: the provider runs those operators."""
    provider = registry.reader(runtime).run_onnx_node
    if provider is None:
        raise UsageError(f"{runtime} has no gatepack executor of the nodes onnxruntime hands it")
    rng = np.random.default_rng(seed + 1)
    nodes = [layer for layer in written.layers if layer.provenance is not None and layer.provenance.kind == "node"]
    for layer in nodes:
        role_inputs = sample_inputs(layer, rng, sample_sizes(layer, layer))
        on_cpu = registry.reader(written.format).run_layer_native
        expected = from_interface(layer, on_cpu(layer, to_interface(layer, role_inputs)))
        label = f"{layer.name} [{runtime} provider]"
        try:
            actual = from_interface(layer, provider(layer, to_interface(layer, role_inputs)))
        except GatepackError as err:
            why = err.message.removeprefix(f"layer {layer.name!r}: ")
            result.outputs.append(
                OutputComparison(label, f"not computed: {why}", float("inf"), float("inf"), 0, 0, False)
            )
            continue
        compared = _compared_outputs(label, actual, expected, (layer.interface.dtype,), None)
        result.outputs += judged_per_step(layer, compared, actual, expected, role_inputs)
    if nodes:
        result.notes.append(
            f"each recurrent node of the written model also ran on gatepack's executor of {runtime}'s operator "
            f"semantics, read as onnxruntime's {runtime} provider reads it, against onnxruntime CPU on that node"
        )

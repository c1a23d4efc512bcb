"""Numerical verification: run two artifacts of the same layers on the same random inputs, compare.

Each layer of the source gets random inputs drawn for its interface (X, and ``sequence_lens`` and
``initial_h`` when it has them; symbolic dimensions take small sizes). Each side runs on its own
runtime where one runs here (onnxruntime for ONNX, OpenVINO CPU for IR); otherwise on gatepack's
NumPy executor of that format's own semantics, reading the saved artifact. If a native runtime
refuses the artifact (onnxruntime rejects ``layout = 1``, has no kernel for opset < 7 or for float64
GRU), that side runs on gatepack's executor of the layer read from the artifact, and the result
says so. Outputs are mapped into one convention (layout 0) and compared with dtype-aware tolerances:
pass when ``|a - b| <= atol + rtol * |b|`` everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gatepack.converters import registry
from gatepack.converters.errors import InputError, RuntimeFailure, UsageError
from gatepack.converters.model import Model
from gatepack.converters.samples import DEFAULT_SEQ_LENGTH, TOLERANCES, sample_inputs, sample_sizes
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    PERM_Y_TO_SEQ_MAJOR,
    ROLE_LABELS,
    RecurrentLayer,
)

if TYPE_CHECKING:
    from gatepack.converters.progress import Progress


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

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs)

    @property
    def worst_abs_error(self) -> float:
        return max((o.max_abs_error for o in self.outputs), default=0.0)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "target": self.target,
            "seed": self.seed,
            "passed": self.passed,
            "outputs": [asdict(o) for o in self.outputs],
            "notes": self.notes,
        }

    def verdict(self) -> str:
        """'verification passed (56 outputs, largest error 7.6e-06 in conv_cache_out)'."""
        if not self.outputs:
            return "verification FAILED (no output compared)"
        worst = max(self.outputs, key=lambda o: o.max_abs_error)
        where = worst.output if worst.layer == WHOLE_MODEL else f"{worst.layer} {worst.output}"
        failed = sum(not o.passed for o in self.outputs)
        head = "passed" if self.passed else f"FAILED ({failed} of {len(self.outputs)} outputs differ)"
        return (
            f"verification {head} ({len(self.outputs)} output(s), largest error {worst.max_abs_error:.3g} in {where})"
        )

    LISTED = 8  # outputs: above this, the passing ones are summarised in one line

    def to_text(self) -> str:
        lines = [
            f"verification {'passed' if self.passed else 'FAILED'}: {self.source} vs {self.target} (seed {self.seed})"
        ]
        shown = self.outputs if len(self.outputs) <= self.LISTED else [o for o in self.outputs if not o.passed]
        for o in shown[: self.LISTED]:
            mark = "ok  " if o.passed else "FAIL"
            lines.append(
                f"  {mark} {o.layer} {o.output}: max abs {o.max_abs_error:.3g}, max rel {o.max_rel_error:.3g} "
                f"(atol {o.atol:g}, rtol {o.rtol:g})"
            )
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
    # values when the other side has none: full lengths, a zero initial state.
    if itf.sequence_lens:
        feed[itf.sequence_lens] = role_inputs.get("sequence_lens", np.full(x.shape[1], x.shape[0], np.int32))
    for role in ("initial_h", "initial_c"):
        if getattr(itf, role):
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
    from gatepack.converters.executor import run_layer as execute

    feed = to_interface(layer, role_inputs)
    try:
        if layer.provenance is None or not layer.provenance.of(model.format):
            raise RuntimeFailure(f"layer {layer.name!r}: it was not read from an artifact (an in-memory layer)")
        outputs = registry.reader(model.format).run_layer_native(layer, feed)
    except RuntimeFailure as err:
        reason = err.message.removeprefix(f"layer {layer.name!r}: ")
        notes.append(f"{model.path} layer {layer.name!r} ran on gatepack's executor: {reason}")
        itf = layer.interface
        results = execute(layer, *(feed.get(getattr(itf, role) or "") for role in INPUT_ROLES))
        outputs = {getattr(itf, role): value for role, value in zip(OUTPUT_ROLES, results)}
    return from_interface(layer, outputs)


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
    ``tolerance`` sets.
    """
    atol, rtol = max(TOLERANCES[d][0] for d in dtypes), max(TOLERANCES[d][1] for d in dtypes)
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
    max_rel = float(
        np.nan_to_num(diff / np.maximum(np.abs(b_cmp), np.finfo(np.float64).tiny), nan=np.inf).max(initial=0.0)
    )
    passed = bool(np.all(diff <= atol + rtol * np.abs(b_cmp)))
    nonfinite = int((~trusted & ~same_special).sum())
    if nonfinite and (nonfinite * 2 > b.size or np.isnan(a[~finite & ~same_special]).any()):
        passed = False
    return OutputComparison(layer_name, output, max_abs, max_rel, atol, rtol, passed, nonfinite)


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
    float32: OpenVINO's CPU plugin); the comparison uses the looser tolerance."""
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


WHOLE_MODEL = "(whole model)"


class SourceDoesNotRun(Exception):
    """The source's whole model does not run on its runtime (e.g. onnxruntime rejects ``layout = 1``)."""


def _graph_inputs(model: Model) -> list[tuple[str, np.dtype, list]]:
    graph_inputs = registry.reader(model.format).graph_inputs
    if graph_inputs is None:
        raise UsageError(f"{model.path}: the {model.format} format holds no whole models")
    return graph_inputs(model.path)


def sample_graph_inputs(
    model: Model, rng: np.random.Generator, dim_size: int = DEFAULT_SEQ_LENGTH
) -> dict[str, np.ndarray]:
    """Random inputs for every input of a whole model: floats in [-1, 1), integers and booleans zero
    (indices and flags with a safe value); dynamic dimensions take ``dim_size``."""
    feed = {}
    for name, dtype, dims in _graph_inputs(model):
        shape = [d if isinstance(d, int) else dim_size for d in dims]
        feed[name] = (
            rng.uniform(-1, 1, shape).astype(dtype) if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype)
        )
    return feed


def verify_whole(
    source: Model,
    target: Model,
    *,
    seed: int = 0,
    dim_size: int = DEFAULT_SEQ_LENGTH,
    target_file=None,
    tolerance: Tolerance | None = None,
) -> Verification:
    """Run two whole models (recurrent layers and every other operator) on their own runtimes on
    the same random inputs; compare every output of the source by name."""
    target_file = target_file or target.path
    result = Verification(str(source.path), str(target.path), seed)
    feed = sample_graph_inputs(source, np.random.default_rng(seed), dim_size)
    try:
        expected = registry.reader(source.format).run_native(source.path, feed)
    except RuntimeFailure as err:
        raise SourceDoesNotRun(err.one_line()) from None
    actual = registry.reader(target.format).run_native(target_file, feed)
    computed = tuple(_computed_in(source, layer) for layer in source.layers)  # e.g. 8-bit quantized layers
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
    result.notes.append(f"whole models compared end to end (every dynamic dimension = {dim_size})")
    return result


def verify_models(
    source: Model,
    target: Model,
    *,
    seed: int = 0,
    target_file=None,
    progress: "Progress | None" = None,
    tolerance: Tolerance | None = None,
) -> Verification:
    """Compare ``target`` with ``source``: end to end when both hold whole models (other operators
    around their recurrent layers), else layer by layer. ``target_file`` is where the target's
    artifact is while it is being written (its ``path`` is where it will land)."""
    from gatepack.converters.progress import Silent

    progress = progress or Silent()
    fallback = None
    if source.meta.get("other_ops") and target.meta.get("other_ops"):
        progress.step("verifying the whole model")
        try:
            return verify_whole(source, target, seed=seed, target_file=target_file, tolerance=tolerance)
        except SourceDoesNotRun as err:
            fallback = (
                f"the source's whole model does not run on its runtime ({err}); its layers were compared one by one "
                "instead, each source layer on gatepack's executor where its runtime refuses it"
            )
    result = Verification(str(source.path), str(target.path), seed)
    if fallback:
        result.notes.append(fallback)
    rng = np.random.default_rng(seed)
    pairs = pair_layers(source, target)
    for k, (src_layer, dst_layer) in enumerate(pairs):
        progress.step(f"verifying layer {src_layer.name!r}", k, len(pairs))
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
        overflowed = _overflowed_sequences(expected)
        for output in ("Y", "Y_h", "Y_c"):
            if output in expected and output in actual:
                untrusted = (
                    None
                    if overflowed is None
                    else (overflowed[None, :, :, None] if output == "Y" else overflowed[:, :, None])
                )
                result.outputs.append(
                    compare(src_layer.name, output, actual[output], expected[output], dtypes, untrusted, tolerance)
                )
    progress.step("verified", len(pairs), len(pairs))
    return result

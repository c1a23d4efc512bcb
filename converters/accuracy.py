"""The accuracy gate of a conversion that writes a quantized source's weights as floats (``--dequantize``).

Such an artifact cannot match the source within float rounding when the source's arithmetic is itself
quantized (onnxruntime's ``DynamicQuantizeLSTM`` quantizes X and h to uint8 at run time), and a fixed tolerance
either hides a misreading or fails a good conversion of a larger layer. So it is proven in two parts, on the
same drawn inputs:

1. **exact**: the artifact against the source's *dequantized twin*, the source written by its own format with
   float weights ``W = (q - zero_point) * scale`` and nothing else changed, at the float tolerances: the
   conversion itself changed nothing;
2. **measured**: the artifact against the quantized source, output by output, its largest error reported
   and judged against ``max_error`` (``--max-error E``) or, by default, against the source's own quantization
   noise: ``max |source - twin|`` on that output, the distance that is the source's own arithmetic rather than the
   conversion's, plus what part 1 proved of ``|artifact - twin|`` there (``atol + rtol * max |twin|`` at the
   output's float tolerances: by the triangle inequality the artifact is then no farther from the source than the
   twin is, up to the float rounding part 1 allows, which scales with the output's magnitude; ``_bounds``).

The twin's distance to the source is printed either way, so a user sees what the quantized arithmetic costs.
A target whose kernels themselves quantize X and h at run time (LiteRT's hybrid int8, ``--quantize-weights int8
--to litert``) cannot match a float twin: its int8 twin is the quantized source run on gatepack's executor, which
computes LiteRT's hybrid products as its kernels do (``converters.hybrid``; for a whole model, with the operators
around the layers on the source's runtime: ``converters.in_memory``), so part 1 stays at float tolerances
and the quantization's own error (part 2's default bound) includes the activations' run-time quantization.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import gatepack.converters.quantization as quantization
import gatepack.converters.registry as registry
from gatepack.converters.errors import InputError, RefusedError, UsageError
from gatepack.converters.samples import TOLERANCES
from gatepack.converters.streaming import verify_streaming
from gatepack.converters.verification import WHOLE_MODEL, OutputComparison, Tolerance, Verification, verify_models
from gatepack.converters.weight_quantization import quantized_model

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.streaming import StatePair
    from gatepack.converters.verification import GivenInputs
    from gatepack.converters.weight_quantization import Done, Scheme

VS_SOURCE = "vs the quantized source"
UNBOUNDED = Tolerance(1e300, 0.0)  # a comparison that only measures (judged afterwards)


@dataclass(frozen=True)
class Gate:
    """The user's bound on a lossy conversion's error (``max_error``; None: the source's quantization noise), and
    the weights quantized as asked (``quantize``: a ``weight_quantization`` scheme, None: the source's own), with
    the layers the conversion quantized (``done``: (float, quantized) pairs), which the twin reuses."""

    max_error: float | None = None
    quantize: "Scheme | None" = None
    done: "Done" = ()

    def __post_init__(self) -> None:
        value = self.max_error
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
            raise UsageError(f"max_error {value!r} is not a number >= 0")

    @property
    def words(self) -> tuple[str, str, str]:
        """What the twin is, what the source is, and what their distance is, in the verification's words."""
        if self.quantize is None:
            return "the dequantized source", "the quantized source", "the source's own quantization noise"
        return f"the {self.quantize.name} twin", "the float source", "the quantization's own error"


def applies(source: "Model", dequantized: bool) -> bool:
    """Whether the conversion wrote a quantized source's weights as floats (the gate judges it)."""
    return dequantized and any(layer.is_quantized for layer in source.layers) and source.path is not None


def verify_dequantized(
    source: "Model",
    written: "Model",
    target_file,
    gate: Gate,
    *,
    seed: int = 0,
    given: "GivenInputs | None" = None,
    pairs: "Sequence[StatePair]" = (),
    frames: int | None = None,
    stateful: bool = False,
    base: "Model | None" = None,
) -> Verification:
    """The artifact (``written``, being written at ``target_file``) exact against the source's twin, and measured
    against the source (module docstring): on one call, and for a streaming model (``pairs``) over ``frames``
    consecutive calls, states fed back, each side its own. The twin is the source with its weights dequantized,
    or, when ``gate.quantize``, with them quantized as asked (the conversion's own records, ``gate.done``, not
    quantized again), run in float by the source's own runtime. A ``stateful`` artifact (no state inputs) is
    compared over the calls alone. The twin is made of ``base``, the source specialised for the inputs the user
    fixes (``--input-value``; None: the source itself), as the artifact is: it has the artifact's layers (an ``If``
    the fixed inputs decide resolved) and, like it, takes no fixed input; the source is run as the user runs it,
    fed them."""
    twin_words, source_words, noise_words = gate.words
    with tempfile.TemporaryDirectory(prefix="gatepack-twin-") as scratch:
        twin = _twin_of(base or source, written, gate, Path(scratch))
        alike = twin if written.meta.get("other_ops") else replace(twin, meta={**twin.meta, "other_ops": None})
        streamed = [_Call(verify_streaming, {"pairs": pairs, "frames": frames})] if pairs else []
        calls = ([] if stateful and streamed else [_Call(verify_models, {})]) + streamed
        exact = [c.run(twin, written, seed, given and given.unfixed(), target_file) for c in calls]
        noise = [c.run(source, alike, seed, given, None, UNBOUNDED) for c in calls]  # compared as ``measured``
    measured = [c.run(source, written, seed, given, target_file, UNBOUNDED) for c in calls]
    result = Verification(str(source.path), str(written.path), seed, inputs_used=exact[0].inputs_used)
    result.incomplete = next((v.incomplete for v in exact + measured if v.incomplete), None)
    # the calls' growth of the part that failed: the exact part's when it did, else the measured part's
    drifted = exact[-1] if not all(o.passed for o in exact[-1].outputs) else measured[-1]
    result.streaming = drifted.streaming if pairs else None
    result.outputs = [replace(o, output=f"{o.output} vs {twin_words}") for v in exact for o in v.outputs]
    bounds = _bounds(gate, exact, noise, measured)
    result.outputs += [_judged(o, bounds[(o.layer, o.output)], source_words) for v in measured for o in v.outputs]
    result.notes += [n for v in exact for n in v.notes] + [
        f"the artifact is proven twice on the same inputs: exact against {twin_words} (float tolerances), and "
        f"measured against {source_words}, "
        + (
            f"within --max-error {gate.max_error:g}"
            if gate.max_error is not None
            else f"within {noise_words} (the source's distance to {twin_words}) + the float tolerance the artifact "
            f"met against {twin_words} on that output (atol + rtol x its largest magnitude, or the bound in "
            "quantization steps)"
        ),
        f"{noise_words} ({source_words} vs {twin_words}): "
        + ", ".join(f"{_where(o)} {o.max_abs_error:.3g}" for v in noise for o in v.outputs),
        f"measured vs {source_words}: " + "; ".join(_measurement(o) for v in measured for o in v.outputs),
    ]
    return result


def _bounds(
    gate: Gate, exact: list[Verification], noise: list[Verification], measured: list[Verification]
) -> dict[tuple[str, str], float]:
    """Per (layer, output), the bound on ``max |artifact - source|``: ``gate.max_error`` when given, else by the
    triangle inequality ``max |twin - source| + A``, where ``A`` is what the exact part proved of
    ``|artifact - twin|`` on that output: ``atol + rtol * max |twin|`` at its dtype's float tolerances
    (``samples.TOLERANCES``; the bound in quantization steps for an output judged so, whose rtol is 0). ``A`` scales
    with the output: a fixed floor (float32's atol, 1e-5) would fail a correct artifact whose output is 1e4 in
    size (float32 rounding there is 1e-3) and mean a different thing on one of 1e-4. An output the exact part did
    not compare takes float32's tolerances at the source's magnitude."""
    if gate.max_error is not None:
        return {(o.layer, o.output): float(gate.max_error) for v in measured for o in v.outputs}
    own = {(o.layer, o.output): o.max_abs_error for v in noise for o in v.outputs}
    proved = {(o.layer, o.output): _allowance(o.atol, o.rtol, o) for v in exact for o in v.outputs}
    atol, rtol = TOLERANCES["float32"]
    return {
        (o.layer, o.output): own.get((o.layer, o.output), 0.0)
        + proved.get((o.layer, o.output), _allowance(atol, rtol, o))
        for v in measured
        for o in v.outputs
    }


def _allowance(atol: float, rtol: float, comparison: OutputComparison) -> float:
    """``atol + rtol * max |expected|``: the largest ``|actual - expected|`` a comparison at these tolerances lets
    pass on ``comparison``'s output."""
    return atol + rtol * comparison.largest_expected


def _twin_of(base: "Model", written: "Model", gate: Gate, scratch: Path) -> "Model":
    """The twin of ``base`` (module docstring): its weights dequantized, or quantized as ``gate`` asks (the
    conversion's own records reused where ``base``'s layers are the conversion's; a base read again, specialised at
    the input shapes, is quantized again by the same deterministic rule, which gives the same integers); held in
    memory for the executor when the artifact's kernels quantize X and h at run time (``_executed``), else written
    by the source's format into ``scratch`` and read back (``_twin``)."""
    quantize = gate.quantize
    quantized = base if quantize is None else quantized_model(base, quantize, written.format, gate.done)
    return _executed(quantized) if quantize and run_time(quantized) else _twin(quantized, scratch)


def run_time(model: "Model") -> bool:
    """Whether ``model``'s layers were quantized for kernels that also quantize X and h at run time (LiteRT's
    hybrid ones), which only gatepack's executor computes besides the target (``converters.hybrid``)."""
    return any(quantization.run_time_scheme(layer) for layer in model.layers)


def _executed(model: "Model") -> "Model":
    """``model``'s layers in memory, verification running them on gatepack's executor, which computes LiteRT's
    hybrid products exactly as its kernels do: the int8 twin of an artifact with run-time quantized activations. A
    whole model stays whole (its file and its other operators, ``converters.in_memory``): the twin then computes the
    model's own outputs, the layers on the executor and the operators around them on the source's runtime, so that
    the artifact is compared with it, and the source's distance to it measured, output by output of the model."""
    held = [replace(layer, provenance=None) for layer in model.layers]
    return replace(model, layers=held, meta=model.meta if model.meta.get("other_ops") else {})


@dataclass(frozen=True)
class _Call:
    """One comparison of two models (``verify_models``: one call; ``verify_streaming``: consecutive calls)."""

    compare: Callable[..., Verification]
    options: dict

    def run(self, source, target, seed, given, target_file, tolerance: Tolerance | None = None) -> Verification:
        return self.compare(
            source, target, seed=seed, given=given, target_file=target_file, tolerance=tolerance, **self.options
        )


def _where(comparison: OutputComparison) -> str:
    """The output's name, with its layer unless the model is compared whole."""
    return comparison.output if comparison.layer == WHOLE_MODEL else f"{comparison.layer} {comparison.output}"


def _measurement(comparison: OutputComparison) -> str:
    """'Y max 0.00061, mean 2.1e-04, argmax 100%, threshold 0: 99.8%' (one output)."""
    where = _where(comparison)
    agreed = f", {comparison.agreement.text()}" if comparison.agreement is not None else ""
    return f"{where} max {comparison.max_abs_error:.2g}{agreed}"


def _judged(comparison: OutputComparison, bound: float, source_words: str) -> OutputComparison:
    """``comparison`` (made with an infinite atol) judged against ``bound`` on its largest absolute error."""
    passed = comparison.passed and comparison.max_abs_error <= bound
    return replace(comparison, output=f"{comparison.output} vs {source_words}", atol=bound, rtol=0.0, passed=passed)


def _twin(source: "Model", scratch: Path) -> "Model":
    """The source written by its own format with float weights (``quantization.ASKED``), read back."""
    info, implementation = registry.writer(source.format)
    assert implementation.write is not None  # (registry.writer gives formats that write)
    path = scratch / f"twin{info.suffixes[0] if info.suffixes else ''}"
    implementation.write(replace(source, meta={**source.meta, quantization.ASKED: True}), path)
    try:
        twin = implementation.read(path)
    except InputError as err:  # gatepack's own file, in a private folder the user never sees: named as the twin
        raise RefusedError(
            f"{source.path}: its twin (the source written with float weights, read back to verify against) cannot "
            f"be read: {str(err).replace(str(path), 'the twin')}",
            hint="--no-verify writes the artifact unverified",
        ) from None
    twin.path = path
    return twin

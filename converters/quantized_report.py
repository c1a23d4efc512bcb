"""``report --quantize-weights``: what quantizing a float model's recurrent weights gives in each target, as
``convert`` with the same options would do it and measure it.

Per target the report holds one ``QuantizedTarget``: the bits per weight (the integers', and with the scales and
zero points), the weights' bytes before (float32) and after (the integers packed, plus their parameters), and,
where the target keeps the integers, the artifact really written (to a private temporary directory) and passed
through the accuracy gate (``converters.accuracy``): every output's largest error against the float source, the
bound it is judged by and the verdict, and the artifact's size. A target that holds no quantized weights, or would
not keep these (ONNX below the opset they need), is refused as ``convert`` refuses it: the layer's ``quantization``
finding becomes ``unsupported`` with the same reason.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import gatepack.converters.quantization as quantization
import gatepack.converters.weight_quantization as quantizing
from gatepack.converters.errors import RefusedError, VerificationError
from gatepack.converters.findings import Finding, Status, sort_worst_first, worst

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.reporting import Report
    from gatepack.converters.verification import Verification


@dataclass(frozen=True)
class MeasuredOutput:
    """One output of the accuracy gate against the float source: its largest error, the bound, the verdict."""

    output: str
    max_error: float
    bound: float
    passed: bool

    def to_json(self) -> dict:
        return {"output": self.output, "max_error": self.max_error, "bound": self.bound, "passed": self.passed}


@dataclass
class QuantizedTarget:
    """What ``--quantize-weights`` gives in one target (module docstring)."""

    scheme: str
    bits: int
    bits_in_all: float  # with one float32 scale and one zero point per group
    before: int  # the float weights' bytes
    after: int  # the quantized weights' bytes
    verdict: str  # 'passed', 'failed', 'incomplete', 'refused'
    reason: str = ""  # why refused, or what was incomplete
    artifact_bytes: int | None = None
    outputs: list[MeasuredOutput] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "scheme": self.scheme,
            "bits_per_weight": self.bits,
            "bits_per_weight_with_scales": round(self.bits_in_all, 3),
            "weights_bytes_before": self.before,
            "weights_bytes_after": self.after,
            "verdict": self.verdict,
            **({"reason": self.reason} if self.reason else {}),
            **({"artifact_bytes": self.artifact_bytes} if self.artifact_bytes is not None else {}),
            "outputs": [o.to_json() for o in self.outputs],
        }

    def text(self) -> str:
        """'int4: 4 bits per weight (4.56 with its scales), weights 1,234 -> 321 bytes (3.84x smaller); artifact
        412 bytes; gate passed: Y 0.012 (bound 0.012)...' on one line."""
        sizes = (
            f"{self.scheme}: {self.bits} bits per weight ({self.bits_in_all:.2f} with the scales), weights "
            f"{self.before:,} -> {self.after:,} bytes ({self.before / max(self.after, 1):.2f}x smaller)"
        )
        artifact = f"; artifact {self.artifact_bytes:,} bytes" if self.artifact_bytes is not None else ""
        errors = ", ".join(
            f"{o.output} {o.max_error:.3g} (bound {o.bound:.3g}{'' if o.passed else ', FAILED'})" for o in self.outputs
        )
        measured = f"; accuracy gate {self.verdict}" + (f": {errors}" if errors else "")
        return (
            sizes
            + artifact
            + (measured if self.verdict != "refused" else "")
            + (f" ({self.reason})" if self.reason else "")
        )


check_scheme = quantizing.check_scheme


def quantized_for_report(model: "Model", scheme: quantizing.Scheme | None, target: str = "") -> "Model":
    """``model`` with its layers quantized for ``target`` and noted as ``convert`` does before writing (``model``
    when no scheme is asked)."""
    if scheme is None:
        return model
    notes = {lay.name: [*model.notes_for(lay), quantizing.finding(lay, scheme, target)] for lay in model.layers}
    scoped = _scope_finding(model, scheme)
    if scoped is not None and model.layers:
        notes[model.layers[0].name].append(scoped)
    return replace(quantizing.quantized_model(model, scheme, target), notes=notes)


def _scope_finding(model: "Model", scheme: quantizing.Scheme) -> Finding | None:
    """What ``--quantize-weights-scope model`` quantizes of a whole model's other weights (the source format's
    ``GraphAnalyses.weight_scope``), as ``convert`` notes it; None for the layers scope or a model without them
    (each target's refusal of the scope is its measurement's)."""
    import gatepack.converters.registry as registry

    analyses = registry.implementation(model.format).graph_analyses
    if scheme.scope != "model" or not model.keeps_whole or analyses is None or analyses.weight_scope is None:
        return None
    return analyses.weight_scope(model, scheme).finding()


def build(
    build_report: Callable[..., "Report"],
    model: "Model",
    targets: list[str],
    options: dict,
    scheme: quantizing.Scheme | None,
) -> "Report":
    """``build_report`` (``reporting``'s) of ``model`` with its weights quantized as ``convert`` quantizes them for
    each target: one form for every target, a target with a form of its own (``weight_quantization.form_for``)
    reported on its own quantized layers."""
    found = build_report(quantized_for_report(model, scheme), targets, options)
    for target in [t for t in targets if scheme is not None and quantizing.has_own_form(t)]:
        own = build_report(quantized_for_report(model, scheme, target), [target], options)
        for lay, its in zip(found.layers, own.layers):
            lay.targets[target] = its.targets[target]
    return found


def refusal(target: str, findings: list[Finding], scheme: quantizing.Scheme | None = None) -> Finding | None:
    """The ``unsupported`` finding ``convert`` refuses ``target`` with (no quantized weights there, none of
    ``scheme``'s, or its own ``quantization`` finding does not keep the integers), None when it keeps them."""
    own = [f for f in findings if f.feature == "quantization" and not quantizing.is_asked(f)]
    if quantizing.unheld(target, scheme):
        detail = quantizing.refusal_detail(target, scheme)
    elif any(quantization.keeps_integers(f) for f in own):
        return None
    else:
        detail = f"{target} would not keep the integers: " + ("; ".join(f.detail for f in own) or "")
    return Finding(
        "quantization",
        Status.UNSUPPORTED,
        detail,
        alternative=f"convert to {' or '.join(quantizing.holders_of(scheme))} (ONNX at the opset the integers need: "
        "--layers-only writes a whole model's layers at it), or leave out --quantize-weights",
    )


def with_measurements(
    report: "Report",
    convert: Callable[..., Any],
    source: "Model | str | Path",
    scheme: quantizing.Scheme | None,
    general: dict,
    write_options: dict,
) -> "Report":
    """``report`` (of the quantized model) with each target refused as ``convert`` refuses it and, where it keeps the
    integers, its artifact written by ``convert`` (the API's) and measured (``general``: ``convert``'s other
    arguments, e.g. ``layers_only``; ``write_options``: given to the targets that take them); ``report`` when no
    scheme is asked."""
    if scheme is None:
        return report
    sizes = _sizes(report, scheme)
    for target in report.targets():
        refusals = [_refuse(lay.targets[target], target, scheme) for lay in report.layers]
        found = next((r for r in refusals if r is not None), None)
        if found is not None:
            report.quantized[target] = QuantizedTarget(**sizes, verdict="refused", reason=found.detail)
        else:
            measured = _measured(convert, source, target, scheme, {**general, **_taken(target, write_options)})
            report.quantized[target] = replace(measured, **sizes)
    return report


def _refuse(target_report, target: str, scheme: quantizing.Scheme) -> Finding | None:
    """The layer's findings for ``target`` with its ``quantization`` finding replaced by ``refusal``'s (in place);
    that refusal, or None."""
    refused = refusal(target, target_report.findings, scheme)
    if refused is not None:
        kept = [f for f in target_report.findings if f.feature != "quantization" or quantizing.is_asked(f)]
        target_report.findings = sort_worst_first([*kept, refused])
        target_report.status = worst(target_report.findings)
    return refused


def _sizes(report: "Report", scheme: quantizing.Scheme) -> dict:
    """The scheme's bits and the weights' bytes before and after, over every layer of the report."""
    records = [r for lay in report.layers for p in lay.layer.directions for r in (p.Wq, p.Rq) if r is not None]
    before = sum(r.values.size * 4 for r in records)
    after = sum(r.stored_bytes for r in records)
    count = sum(r.values.size for r in records)
    return {
        "scheme": str(scheme),
        "bits": scheme.bits,
        "bits_in_all": 8 * after / max(count, 1),
        "before": before,
        "after": after,
    }


def _taken(target: str, write_options: dict) -> dict:
    """The write options ``target`` takes."""
    import gatepack.converters.registry as registry

    return {k: v for k, v in write_options.items() if k in registry.check_name(target).option_names}


def _measured(
    convert: Callable[..., Any],
    source: "Model | str | Path",
    target: str,
    scheme: quantizing.Scheme,
    options: dict,
) -> QuantizedTarget:
    """``source`` converted to ``target`` with the scheme in a private directory, its gate's numbers (sizes left
    to the caller)."""
    import gatepack.converters.registry as registry

    suffixes = registry.check_name(target).suffixes
    sizes: dict[str, Any] = {"scheme": str(scheme), "bits": scheme.bits, "bits_in_all": 0.0, "before": 0, "after": 0}
    with tempfile.TemporaryDirectory(prefix="gatepack-report-") as scratch:
        path = Path(scratch) / f"quantized{suffixes[0] if suffixes else ''}"
        asked: dict[str, Any] = {
            "quantize_weights": scheme.name,
            "quantize_block_size": scheme.block_size,
            "quantize_weights_scope": scheme.scope,
        }
        try:
            verification = convert(source, path, to=target, **asked, **options).verification
            size: int | None = sum(p.stat().st_size for p in Path(scratch).rglob("*") if p.is_file())
        except VerificationError as err:
            verification, size = cast("Verification | None", err.verification), None
        except RefusedError as err:
            return QuantizedTarget(**sizes, verdict="refused", reason=err.message)
    return _gated(verification, sizes, size, scheme)


def _gated(
    verification: "Verification | None", sizes: dict, size: int | None, scheme: quantizing.Scheme
) -> QuantizedTarget:
    """The gate's outputs against the float source (``accuracy``'s words), and its verdict."""
    from gatepack.converters.accuracy import Gate
    from gatepack.converters.verification import WHOLE_MODEL

    words = Gate(quantize=scheme).words[1]
    if verification is None:
        return QuantizedTarget(**sizes, verdict="failed", reason="not verified")
    measured = [
        MeasuredOutput(
            (o.output if o.layer == WHOLE_MODEL else f"{o.layer} {o.output}").replace(f" vs {words}", ""),
            o.max_abs_error,
            o.atol,
            o.passed,
        )
        for o in verification.outputs
        if o.output.endswith(f"vs {words}")
    ]
    verdict = "incomplete" if verification.incomplete else "passed" if verification.passed else "failed"
    return QuantizedTarget(
        **sizes, verdict=verdict, reason=verification.incomplete or "", artifact_bytes=size, outputs=measured
    )

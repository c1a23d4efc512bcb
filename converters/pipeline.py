"""The conversion pipeline: a ``ConversionPlan`` run step by step.

``convert(plan)``: **read** the source (``reading.read_source``) → **specialise** it for the inputs the user fixes
(``reading.specialised``) → **prepare** the model to write (layers alone, input shapes, layout, weights marked for
float or quantized, state pairs; ``prepare``) → **choose** per layer what each feature becomes (the target's findings)
and refuse what the user has not accepted (``choose``, ``converters.refusals``) → **write** into a staging path →
**verify** the artifact read back (``verifying.verify_written``) → the ``Result`` with the findings; the staging path
moves into place only when every step succeeded. ``report_on`` is the same reading and choosing for many targets,
without writing; ``save`` writes a loaded model after the same refusals, without verification.

Every step reads the plan; none checks an argument again (``converters.plan``).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import gatepack.converters.registry as registry
from gatepack.converters.errors import GatepackError, RefusedError, UsageError
from gatepack.converters.plan import Acceptance, Conversion, given_inputs, read_options, split_options
from gatepack.converters.reading import inputs_of, label_of, load, read_source, specialised
from gatepack.converters.refusals import refuse_blocking, refuse_dequantizing, refuse_partial_model, refuse_unheld
from gatepack.converters.result import Result
from gatepack.converters.verifying import state_pairs_of, verify_written

if TYPE_CHECKING:
    from gatepack.converters.findings import Finding
    from gatepack.converters.model import Model
    from gatepack.converters.plan import ConversionPlan
    from gatepack.converters.progress import Progress
    from gatepack.converters.registry import FormatImplementation, FormatInfo
    from gatepack.converters.reporting import Report
    from gatepack.converters.verification import Verification
    from gatepack.converters.weight_quantization import Scheme


def convert(plan: "ConversionPlan", progress: "Progress") -> Result:
    """Run ``plan``: read, specialise, prepare, choose, write, verify (module docstring); nothing is written unless
    every step succeeds."""
    info = registry.FORMATS[plan.target]
    source, label = read_source(plan, info, progress)
    conversion = prepare(plan, source, label, specialised(source, plan.given, plan.read_options))
    model = conversion.model
    with _named_as(label, conversion.base.path if conversion.base is not source else None):
        findings = choose(plan, conversion)
        result = Result(
            label, str(plan.output), info.name, findings, layers_only=model.layers_only, whole=model.keeps_whole
        )
        result.verification = write(plan, conversion, progress)
    return result


def prepare(plan: "ConversionPlan", source: "Model", label: str, base: "Model") -> Conversion:
    """What is written of ``base`` (the source specialised): its layers alone when asked, the input shapes given, the
    layout asked for, the weights marked for float (``--dequantize``) or quantized (``--quantize-weights``: each
    layer quantized once, the pairs kept for the verification's twin), the source's state pairs; and the write
    options with what the format settles for the whole artifact."""
    from gatepack.converters.model import as_layers_only, with_input_shapes

    info, implementation = registry.writer(plan.target)
    model = with_input_shapes(as_layers_only(base) if plan.layers_only else base, plan.given.shapes)
    model = _laid_out(model, plan.layout, label, info, implementation)
    floats = plan.accepted.marked(model)
    model = _quantized(floats, label, info.name, plan.accepted.quantize)
    quantized = tuple(zip(floats.layers, model.layers)) if plan.accepted.quantize else ()  # reused by the twin
    refuse_partial_model(model, label, info.name, plan.layers_only)  # before the source is run for its states
    pairs, given, drawn = state_pairs_of(
        model, source, plan.write_options, plan.request, plan.given, plan.seed, plan.verify, info.stateful_layers
    )
    model = _with_state_pairs(model, label, pairs, bool(plan.write_options.get("stateful")))
    write_options = implementation.settle_options(model, plan.write_options)  # one value for findings and writer
    return Conversion(source, label, base, model, pairs, given, drawn, write_options, quantized)


def choose(plan: "ConversionPlan", conversion: Conversion) -> dict[str, list["Finding"]]:
    """Per layer, what writing it as the target does to each feature (``reporting.build_report``'s findings, as
    ``report`` gives them); RefusedError for one the user has not accepted (``converters.refusals``)."""
    from gatepack.converters.reporting import build_report

    report = build_report(conversion.model, [plan.target], conversion.write_options)
    findings = {lay.layer.name: lay.targets[plan.target].findings for lay in report.layers}
    refuse_unheld(conversion.label, findings, plan.target, plan.accepted.quantize)
    refuse_blocking(conversion.label, findings, plan.accepted, plan.layers_only)
    return findings


def write(plan: "ConversionPlan", conversion: Conversion, progress: "Progress") -> "Verification | None":
    """The model written as the target into a staging path beside the output and, when the plan verifies, read back
    and verified there (``verifying.verify_written``); moved into place only when both succeed. The verification
    (None when the plan does not verify)."""
    from gatepack.converters.fileio import atomic_files, atomic_path

    info, implementation = registry.writer(plan.target)
    output = Path(plan.output)
    staging = (
        atomic_files(output, info.companions) if info.companions else atomic_path(output, directory=info.is_directory)
    )
    with staging as tmp:
        progress.step(f"writing {len(conversion.model.layers)} layer(s) as {info.name}")
        assert implementation.write is not None  # registry.writer returns formats that write
        implementation.write(conversion.model, tmp, **conversion.write_options)
        return verify_written(plan, conversion, implementation, tmp, progress) if plan.verify else None


def with_layout(model: "Model", layout: int) -> "Model":
    """The same layers with a different interface layout (0: sequence-major, 1: batch-major)."""
    from gatepack.converters.model import Model

    layers = [
        replace(layer, interface=replace(layer.interface, layout=layout), provenance=None) for layer in model.layers
    ]
    return Model(model.path, model.format, layers, model.notes, model.skipped, model.meta, model.files)


def _laid_out(
    model: "Model", layout: int | None, label: str, info: "FormatInfo", implementation: "FormatImplementation"
) -> "Model":
    """``model`` in the interface ``layout`` asked for (None: as it is); UsageError for a whole model the target
    keeps whole, whose other operators fix its layers' layout."""
    if layout is None or all(layer.interface.layout == layout for layer in model.layers):
        return model
    if model.keeps_whole and implementation.whole_model_finding(model) is not None:
        raise UsageError(
            f"{label}: --layout changes the recurrent layers' interface, which the model's other operators "
            f"fix; the whole {info.name} model keeps each layer's layout",
            hint="leave out --layout, or pass --layers-only to write the layers alone in a new layout",
        )
    return with_layout(model, layout)


def _quantized(model: "Model", label: str, target: str, scheme: "Scheme | None") -> "Model":
    """``model`` with its recurrent weights quantized as asked (``converters.weight_quantization``; each layer
    noted with the ``lossy`` finding), RefusedError for a target that holds no quantized weights; ``model`` when
    nothing is asked."""
    import gatepack.converters.weight_quantization as quantizing

    if scheme is None:
        return model
    if scheme.scope == "model" and quantizing.scope_unheld(target):
        _scope_summary(model, label, target, scheme)  # (refuses)
    if quantizing.unheld(target, scheme):
        raise RefusedError(
            f"{label}: {quantizing.refusal_detail(target, scheme)}",
            hint=f"convert to {' or '.join(quantizing.holders_of(scheme, but=target))}, or leave out "
            "--quantize-weights",
        )
    notes = {lay.name: [*model.notes_for(lay), quantizing.finding(lay, scheme, target)] for lay in model.layers}
    if scheme.scope == "model" and model.layers:
        first = model.layers[0].name
        notes[first] = [*notes[first], _scope_summary(model, label, target, scheme).finding()]
    return replace(quantizing.quantized_model(model, scheme, target), notes=notes)


def _scope_summary(model: "Model", label: str, target: str, scheme: "Scheme"):
    """What ``--quantize-weights-scope model`` quantizes of ``model``'s other weights (the source format's
    ``GraphAnalyses.weight_scope``); RefusedError for a target that does not write them, UsageError for a model
    written as its layers alone."""
    import gatepack.converters.weight_quantization as quantizing

    refused = quantizing.scope_unheld(target)
    if refused:
        raise RefusedError(f"{label}: {refused}", hint="or leave out --quantize-weights-scope (the layers alone)")
    analyses = registry.implementation(model.format).graph_analyses
    if not model.keeps_whole or analyses is None or analyses.weight_scope is None:
        alone = "written as its recurrent layers alone (--layers-only)" if model.layers_only else "its layers alone"
        if model.keeps_whole:
            alone = f"a whole {model.format} model, whose other weights gatepack does not quantize (ONNX sources only)"
        raise UsageError(
            f"{label}: --quantize-weights-scope model quantizes a whole model's other weights; this model is {alone}",
            hint="leave out --quantize-weights-scope",
        )
    summary = analyses.weight_scope(model, scheme)
    if summary.unwritable and quantizing.writes_scope_as_qdq(target):
        raise RefusedError(
            f"{label}: --quantize-weights-scope model: {target} writes the other weights as the model's own "
            f"DequantizeLinear: {summary.unwritable}",
            hint="quantize per channel (leave out --quantize-block-size), or convert to coreml",
        )
    return summary


def _with_state_pairs(model: "Model", label: str, pairs: list, stateful: bool) -> "Model":
    """``model`` with its state pairs in ``meta['state_pairs']`` (the writers' and the findings' source);
    UsageError when ``stateful`` is asked of a model without any."""
    if stateful and not pairs:
        raise UsageError(f"{label}: --stateful: no state pairs found", hint="name them: --state INPUT=OUTPUT")
    if not pairs:
        return model
    return replace(model, meta={**model.meta, "state_pairs": [(p.input, p.output) for p in pairs]})


@contextlib.contextmanager
def _named_as(label: str, private: "Path | None") -> Iterator[None]:
    """Errors that name ``private`` (a specialised model's temporary file) name the user's ``label`` instead."""
    try:
        yield
    except GatepackError as err:
        if private is not None:
            err.message = err.message.replace(str(private), label)
        raise


def report_on(arguments: Mapping[str, Any], convert: Callable[..., Result]) -> "Report":
    """``gatepack.report`` on its ``arguments`` (by name): the model read (or given) and specialised, then per layer
    and target what each feature becomes, as ``convert`` would choose it (a streaming model's ``state`` finding per
    target included); with ``quantize_weights``, each target that keeps the integers converted by ``convert`` (the
    API's) and measured (``converters.quantized_report``)."""
    import gatepack.converters.quantized_report as quantized_report
    from gatepack.converters.model import Model, as_layers_only
    from gatepack.converters.plan import streaming_request
    from gatepack.converters.reporting import build_report

    asked = SimpleNamespace(**arguments)
    read, write_options = split_options(asked.options)
    if isinstance(asked.model_or_path, Model):
        read_options(read)
        model = asked.model_or_path
    else:
        model = load(asked.model_or_path, asked.format, read)
    targets = [asked.to] if isinstance(asked.to, str) else list(asked.to) if asked.to else registry.writers()
    registry.check_options(write_options, [registry.writer(target)[0] for target in targets])
    given = given_inputs(None, None, asked.input_values)
    source, model = model, specialised(model, given, read)
    model = as_layers_only(model) if asked.layers_only else model
    layer_states = any(registry.writer(target)[0].stateful_layers for target in targets)  # --stateful on layers
    request = streaming_request(asked.states, None)
    pairs, _, _ = state_pairs_of(model, source, write_options, request, given, 0, True, layer_states)
    if pairs:  # a streaming model: each target's ``state`` finding, as convert would write it
        model = replace(model, meta={**model.meta, "state_pairs": [(p.input, p.output) for p in pairs]})
    scheme = quantized_report.check_scheme(
        asked.quantize_weights, asked.quantize_block_size, asked.quantize_weights_scope
    )
    found = quantized_report.build(build_report, model, targets, write_options, scheme)
    general = {"layers_only": asked.layers_only, "states": asked.states, "input_values": asked.input_values}
    reread = read if not isinstance(asked.model_or_path, Model) else {}
    found = quantized_report.with_measurements(
        found, convert, asked.model_or_path, scheme, {**general, **reread}, write_options
    )
    return replace(found, source=str(source.path)) if given.fixed else found


def save(model: "Model", path, to: str | None, layers_only: bool, dequantize: bool, options: dict) -> None:
    """``gatepack.save``: ``model`` written as format ``to`` (default: from the path) after the refusals ``convert``
    makes (the operators a layers-only target cannot hold, a cell it does not write, quantized weights it would write
    as floats), under the output policy; no verification."""
    from gatepack.converters.fileio import prepare_output
    from gatepack.converters.model import as_layers_only

    info, implementation = registry.writer(to or registry.detect(path, writing=True))
    assert implementation.write is not None  # registry.writer returns formats that write
    info.check_options(options)
    model = as_layers_only(model) if layers_only else model
    label = label_of(model)
    whole = refuse_partial_model(model, label, info.name, layers_only)
    refused = {layer.name: [f] for layer in model.layers if (f := registry.cell_refusal(info, layer)) is not None}
    refuse_blocking(label, refused, Acceptance())
    model = refuse_dequantizing(model, label, info.name, options, whole, dequantize)
    prepare_output(path, info.output_kind, inputs_of(model))
    implementation.write(model, path, **options)

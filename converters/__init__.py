"""gatepack's Python API: convert GRU, RNN and LSTM layers between runtimes and prove the result numerically.

>>> import gatepack as gp
>>> model = gp.load("fixtures/gru_lbr1_bidirectional.onnx")
>>> result = gp.convert("fixtures/gru_lbr1_bidirectional.onnx", "out/gru.onnx", to="onnx")
>>> result.verification.passed
True
>>> gp.report(model, targets=["onnx"]).render("text")   # doctest: +SKIP

Heavy frameworks (onnx, onnxruntime, OpenVINO, coremltools) are imported by the functions that need
them, never by ``import gatepack``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from gatepack.converters.errors import (  # noqa: F401  (re-exported)
    GatepackError,
    InputError,
    NoRecurrentLayerError,
    RefusedError,
    RuntimeFailure,
    UsageError,
    VerificationError,
)

if TYPE_CHECKING:
    import numpy as np

    from gatepack.converters.findings import Finding
    from gatepack.converters.model import Model
    from gatepack.converters.progress import Progress
    from gatepack.converters.reporting import Report
    from gatepack.converters.streaming import StatePair
    from gatepack.converters.verification import GivenInputs, Verification
    from gatepack.converters.weight_quantization import Scheme

__all__ = ["load", "save", "convert", "verify", "report", "run", "input_names", "Result"]

READ_OPTIONS = ("activation_defaults",)
# what to do when a model holds no recurrent layer: what gatepack converts, and how to get it
CONVERTS = (
    "gatepack converts models that hold GRU, RNN or LSTM layers: ONNX GRU/RNN/LSTM nodes, OpenVINO "
    "GRUSequence/RNNSequence/LSTMSequence ops, and the loops and unrolled cells it lifts into them; export the "
    "model with its recurrent layers kept as such operators (e.g. torch.onnx.export(..., dynamo=False) writes "
    "each nn.GRU layer as a GRU node)"
)
ENGINES = ("auto", "native", "numpy")


@dataclass
class Result:
    """What ``convert`` did: the output, the findings per layer, and the verification (None when
    ``verify=False``). ``whole``: the artifact holds the whole model; ``layers_only``: the user asked
    for the recurrent layers alone of a model with other operators."""

    source: str
    output: str
    format: str
    findings: dict[str, list["Finding"]] = field(default_factory=dict)
    verification: "Verification | None" = None
    layers_only: bool = False
    whole: bool = False

    @property
    def passed(self) -> bool:
        """True when the output was verified and every compared output agreed (False: not verified)."""
        return self.verification is not None and self.verification.passed

    def __repr__(self) -> str:
        """One line for a notebook: ``Result('m.onnx' -> 'm.xml' (openvino): 14 layer(s); ...; verification ...)``
        (``to_text()`` and ``to_json()`` give everything)."""
        return f"Result({self.source!r} -> {self.summary_line()})"

    def __str__(self) -> str:
        return self.to_text()

    def to_text(self) -> str:
        """The findings that are not plainly exact, grouped across layers, the verification, and one
        closing line: what was written, the features at each status short of exact, the verdict."""
        from gatepack.converters.reporting import group_findings, where_text

        lines = [f"converted {self.source} -> {self.output} ({self.format}): {len(self.findings)} layer(s)"]
        for g in group_findings(list(self.findings.items())):
            f = g.finding
            who = where_text(g.layers, len(self.findings)) or g.layers[0]
            detail = f"{g.variants} variants, e.g. {f.detail}" if g.variants > 1 else f.detail
            warning = f" [warning: {f.warning}]" if f.warning else ""
            lines.append(f"  {who}: {f.status.value} {f.feature}: {detail}{warning}")
        lines.append(self.verification.to_text() if self.verification else "verification skipped (verify=False)")
        lines.append(self.summary_line())
        return "\n".join(lines)

    def summary_line(self) -> str:
        """'wrote out.xml (openvino, whole model): 28 layers; folded: bias; repacked: layout; verification passed
        (56 outputs, largest error 7.6e-06 in conv_cache_out)'."""
        from gatepack.converters.findings import Status

        what = "whole model" if self.whole else "layers only, as asked" if self.layers_only else "layers"
        parts = [f"wrote {self.output} ({self.format}, {what}): {len(self.findings)} layer(s)"]
        by_status: dict[Status, list[str]] = {}
        left_out = False  # the model finding of layers written alone, as asked: the operators around them are gone
        for findings in self.findings.values():
            for f in findings:
                if f.feature == "model" and self.layers_only:
                    left_out = True
                elif f.status is not Status.EXACT and f.feature not in by_status.setdefault(f.status, []):
                    by_status[f.status].append(f.feature)
        ranked = sorted(by_status.items(), key=lambda kv: kv[0].rank)
        parts += [f"{status.value}: {', '.join(features)}" for status, features in ranked]
        if not ranked:
            parts.append("every feature of the layers exact" if left_out else "every feature exact")
        if left_out:
            parts.append("the operators around them left out, as asked")
        parts.append(self.verification.verdict() if self.verification else "not verified")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "output": self.output,
            "format": self.format,
            "whole_model": self.whole,
            "layers_only": self.layers_only,
            "findings": {name: [f.to_json() for f in fs] for name, fs in self.findings.items()},
            "verification": self.verification.to_json() if self.verification else None,
        }


def _read_options(options: dict) -> dict:
    """The reader's keyword arguments from the API's read options; UsageError naming an unknown one."""
    unknown = sorted(set(options) - set(READ_OPTIONS))
    if unknown:
        raise UsageError(f"option(s) {unknown} are not read options", hint=f"reading takes {list(READ_OPTIONS)}")
    out = {}
    if options.get("activation_defaults") is not None:
        from gatepack.schemas.activations import DefaultsPolicy

        try:
            out["defaults"] = DefaultsPolicy(options["activation_defaults"])
        except ValueError:
            raise UsageError(
                f"activation defaults policy {options['activation_defaults']!r} is not 'onnxruntime' or 'onnx'"
            ) from None
    return out


def _split_options(options: dict) -> tuple[dict, dict]:
    """(read options, the rest)."""
    return {k: v for k, v in options.items() if k in READ_OPTIONS}, {
        k: v for k, v in options.items() if k not in READ_OPTIONS
    }


def load(path: str | Path, format: str | None = None, **options) -> "Model":
    """Read the recurrent layers of the artifact at ``path``.

    ``format``: the source format (default: detected from the path). ``activation_defaults``:
    ``"onnxruntime"`` (default) or ``"onnx"``, the values for activation parameters a model leaves out.
    Raises InputError (a malformed artifact), NoRecurrentLayerError, UsageError (an unknown option).
    """
    from gatepack.converters import registry
    from gatepack.converters.fileio import track_reads

    path = registry.as_path(registry.as_source(path))
    fmt = format or registry.detect(path)
    read_options = _read_options(options)
    with track_reads() as opened:
        try:
            model = registry.reader(fmt).read(path, **read_options)
        except NoRecurrentLayerError as err:
            err.hint = f"{err.hint}; {CONVERTS}" if err.hint else CONVERTS
            raise
    model.files = tuple(sorted(opened))
    _check_names(model)
    return model


def _check_names(model: "Model") -> None:
    """Layer names and output tensor names are unique in a model (each output is computed once)."""
    from gatepack.schemas.layer import OUTPUT_ROLES

    seen: dict[str, str] = {}
    for layer in model.layers:
        if layer.name in seen.values():
            raise InputError(f"{model.path}: two layers are named {layer.name!r}")
        for output in (getattr(layer.interface, role) for role in OUTPUT_ROLES):
            if output is not None and output in seen:
                raise InputError(
                    f"{model.path}: layers {seen[output]!r} and {layer.name!r} both produce output {output!r}"
                )
            if output is not None:
                seen[output] = layer.name


def _refuse_dequantizing(model: "Model", label: str, target: str, options: dict, whole, dequantize: bool) -> "Model":
    """``model`` marked for float weights when ``dequantize``; RefusedError (naming --dequantize) for a quantized
    layer ``target`` would write as floats otherwise (its ``quantization`` finding, as ``convert`` gives it)."""
    from gatepack.converters import quantization
    from gatepack.converters.reporting import target_findings

    marked = Acceptance(dequantize=dequantize).marked(model)
    quantized = [layer for layer in marked.layers if layer.is_quantized]
    found = {lay.name: target_findings(marked, lay, target, options, whole) for lay in quantized}
    only = {name: [f for f in fs if f.feature == quantization.FEATURE] for name, fs in found.items()}
    _refuse_blocking(label, only, Acceptance(lossy=True, dequantize=dequantize))
    return marked


def _inputs_of(model: "Model") -> list[Path]:
    """Every path ``model`` was read from: its artifact and each file opened to read it."""
    return ([Path(model.path)] if model.path else []) + list(model.files)


def save(
    model: "Model",
    path: str | Path,
    to: str | None = None,
    *,
    layers_only: bool = False,
    dequantize: bool = False,
    **options,
) -> None:
    """Write ``model`` as format ``to`` (default: from the path) at ``path``, atomically, without
    verification (``convert`` verifies).

    Under the output policy: never over the files the model was read from, and over an existing path
    only if it is an artifact of format ``to``. ``options`` are the format's write options (see
    ``gatepack formats``); an unknown one or a value of the wrong type raises UsageError naming it.
    A model with operators around its recurrent layers is refused (RefusedError) by a format that
    holds layers only, unless ``layers_only`` asks for the layers alone; quantized weights the format cannot hold
    as integers are refused unless ``dequantize`` asks for float weights (as ``convert``).
    """
    from gatepack.converters import registry
    from gatepack.converters.fileio import prepare_output
    from gatepack.converters.model import as_layers_only

    info, implementation = registry.writer(to or registry.detect(path, writing=True))
    assert implementation.write is not None  # registry.writer returns formats that write
    info.check_options(options)
    model = as_layers_only(model) if layers_only else model
    label = str(model.path or "(in-memory model)")
    whole = _refuse_partial_model(model, label, info.name, layers_only)
    refused = {layer.name: [f] for layer in model.layers if (f := registry.cell_refusal(info, layer)) is not None}
    _refuse_blocking(label, refused, Acceptance())
    model = _refuse_dequantizing(model, label, info.name, options, whole, dequantize)
    prepare_output(path, info.output_kind, _inputs_of(model))
    implementation.write(model, path, **options)


def with_layout(model: "Model", layout: int) -> "Model":
    """The same layers with a different interface layout (0: sequence-major, 1: batch-major)."""
    from gatepack.converters.model import Model

    layers = [
        replace(layer, interface=replace(layer.interface, layout=layout), provenance=None) for layer in model.layers
    ]
    return Model(model.path, model.format, layers, model.notes, model.skipped, model.meta, model.files)


def convert(
    src: "str | Path | Model",
    dst: str | Path,
    to: str | None = None,
    *,
    format: str | None = None,
    verify: bool = True,
    allow_lossy: bool = False,
    layout: int | None = None,
    layers_only: bool = False,
    seed: int = 0,
    progress: "Progress | None" = None,
    input_shapes: "dict[str, tuple[int, ...]] | None" = None,
    inputs: "dict[str, np.ndarray] | None" = None,
    states: "Sequence[tuple[str, str] | str]" = (),
    frames: int | None = None,
    dequantize: bool = False,
    max_error: float | None = None,
    input_values: "dict[str, object] | None" = None,
    quantize_weights: str | None = None,
    quantize_block_size: int | None = None,
    **options,
) -> Result:
    """Convert the recurrent layers of ``src`` into ``dst`` as format ``to``, and verify the result.

    ``src``: an artifact's path, an in-memory ``onnx.ModelProto`` (saved to a private temporary file first, as
    every path-taking function here does), or a ``Model`` (from ``load``, or built in memory: its layers are
    then verified against gatepack's executor). ``to``: the target format (default: from ``dst``).
    ``format``: the source format (default: from ``src``). ``verify``: run both sides on random inputs
    and compare (nothing is written when they differ: VerificationError). ``allow_lossy``: accept
    findings that change results beyond float rounding. ``layout``: 0 or 1 to change the interface
    layout (default: keep the source's). ``layers_only``: write the recurrent layers alone when the
    model has other operators (a target that holds layers only refuses such a model otherwise; ONNX
    and OpenVINO keep the whole model unless asked). ``seed``: of the verification's inputs. ``progress``: e.g.
    ``gatepack.converters.progress.Progress("convert")`` reports the steps on stderr. ``input_shapes``
    (input name -> dims) fixes a whole model's symbolic dimensions for verification; ``inputs`` (input name ->
    array) verifies it on the user's own data (other inputs are drawn). A streaming model (state outputs fed
    back as inputs on the next call: ``gatepack.converters.streaming``) is also verified over ``frames``
    consecutive calls; ``states`` gives or corrects its state pairs (``(input, output)`` or ``"IN=OUT"``).
    ``dequantize``: write a layer's quantized weights as their float values where the target cannot hold the
    integers (``lossy``; refused otherwise, whatever ``allow_lossy`` says), the artifact then proven exact against
    the source with dequantized weights and its error against the quantized source bounded by ``max_error`` (by
    default: the source's own quantization noise; ``converters.accuracy``).
    ``quantize_weights``: "int8" or "int4" quantizes the recurrent layers' W and R per output channel (per block of
    ``quantize_block_size`` columns when given; ``converters.weight_quantization``), held as integers by ONNX,
    OpenVINO and Core ML (other targets refused); the option accepts that ``lossy`` change, and the artifact is
    judged against the float source within ``max_error`` (by default: the float source's distance to its twin with
    the same quantized weights run in float, + float32's atol).
    ``input_values`` (input name -> a number, list or array) specialises an ONNX model: each input becomes a
    constant of that value and what depends on it is folded (an ``If`` it decides replaced by its branch); the
    artifact no longer takes it (an ``interface`` finding, ``repacked``), and verification feeds the source that value.
    ``options``: ``activation_defaults`` (reading) and the target's write options (``strategy``,
    ``opset``, ``compress_to_fp16`` ...: ``gatepack formats`` lists them); an unknown option, one the
    target does not take, or a value of the wrong type raises UsageError naming it.

    Refuses (RefusedError) when a finding is ``unsupported``, or ``lossy`` without ``allow_lossy``.
    Nothing is written unless the conversion and its verification succeed.
    """
    from gatepack.converters import registry
    from gatepack.converters.progress import Silent

    progress = progress or Silent()

    src = registry.as_source(src)
    given = _given(input_shapes, inputs, input_values)
    stream = _streaming_request(states, frames)
    if not isinstance(dequantize, bool):
        raise UsageError(f"dequantize {dequantize!r} is not true or false")
    from gatepack.converters.weight_quantization import check_scheme

    scheme = check_scheme(quantize_weights, quantize_block_size)
    accepted = Acceptance(allow_lossy, dequantize, max_error, scheme)
    try:
        return _convert(
            src, dst, to, format, verify, accepted, layout, layers_only, seed, progress, options, given, stream
        )
    finally:
        progress.close()


@dataclass(frozen=True)
class Acceptance:
    """What the user accepts of a conversion: ``lossy`` findings (``--allow-lossy``), quantized weights written as
    floats (``--dequantize``)."""

    lossy: bool = False
    dequantize: bool = False
    max_error: float | None = None  # the accuracy gate's bound (``converters.accuracy``)
    quantize: "Scheme | None" = None  # quantize float weights (``--quantize-weights``): accepts that lossy change

    def marked(self, model: "Model") -> "Model":
        """``model`` with ``dequantize`` in its meta, where the findings and the writers read it; UsageError for a
        ``max_error`` no accuracy gate would use."""
        from gatepack.converters import accuracy, quantization

        accuracy.Gate(self.max_error)  # (checks the value)
        if self.max_error is not None and not accuracy.applies(model, self.dequantize) and not self.quantize:
            raise UsageError(
                f"{model.path}: --max-error bounds a quantized model written with float weights (--dequantize) "
                "or weights quantized as asked (--quantize-weights); this conversion has neither",
                hint="leave out --max-error (verify --atol/--rtol set a verification's tolerances)",
            )
        return replace(model, meta={**model.meta, quantization.ASKED: True}) if self.dequantize else model


def _given(input_shapes, inputs, input_values) -> "GivenInputs":
    """The user's input shapes, values (``--inputs``) and fixed values (``--input-value``) as ``GivenInputs``."""
    import numpy as np

    from gatepack.converters.verification import GivenInputs

    values = {**dict(inputs or {}), **{name: np.asarray(v) for name, v in dict(input_values or {}).items()}}
    return GivenInputs(dict(input_shapes or {}), values, tuple(input_values or ()))


def _unfixed(given: "GivenInputs") -> "GivenInputs":
    """``given`` without the values the artifact holds (``--input-value``): what a specialised model is fed."""
    values = {name: value for name, value in given.values.items() if name not in given.fixed}
    return replace(given, values=values, fixed=())


def specialised(source: "Model", given: "GivenInputs", read_options: dict | None = None) -> "Model":
    """``source`` with the inputs ``given.fixed`` names held as constants of their given values and what depends on
    them folded (``onnx.folding.specialise``), read back from a private temporary file; each layer carries an
    ``interface`` finding (``repacked``) saying the artifact no longer takes them. ``source`` when none is fixed."""
    if not given.fixed:
        return source
    from gatepack.converters import registry
    from gatepack.converters.findings import Finding, Status

    if source.format != "onnx" or source.path is None or not source.other_ops:
        raise UsageError(
            f"{source.path}: --input-value (input_values=) fixes inputs of whole ONNX models, and this is "
            f"{'a model of layers alone' if source.format == 'onnx' else registry.check_name(source.format).title}"
        )
    from gatepack.converters.formats.onnx.folding import specialise
    from gatepack.converters.formats.onnx.graph import load_proto

    values = {name: given.values[name] for name in given.fixed}
    model = load(registry.as_source(specialise(load_proto(Path(source.path)), values)), "onnx", **(read_options or {}))
    words = ", ".join(f"{name}={value.tolist()}" for name, value in values.items())
    finding = Finding(
        "interface",
        Status.REPACKED,
        f"input(s) {words} fixed as asked (--input-value): held as constants, what depends on them folded; the "
        f"artifact no longer takes {', '.join(given.fixed)}",
        warning=f"an app feeds it without {', '.join(given.fixed)}",
    )
    notes = {layer.name: [*model.notes_for(layer), finding] for layer in model.layers}
    return replace(model, notes=notes, meta={**model.meta, "input_values": {n: v.tolist() for n, v in values.items()}})


def _streaming_request(states, frames) -> tuple[list[tuple[str, str]], int | None]:
    """``states`` as (input, output) pairs and ``frames`` checked (UsageError naming a bad value)."""
    from gatepack.converters.streaming import parse_state_option

    pairs = []
    for pair in states or ():
        if isinstance(pair, str):
            pairs.append(parse_state_option(pair))
        elif isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(p, str) for p in pair):
            pairs.append((pair[0], pair[1]))
        else:
            raise UsageError(f"state pair {pair!r} is not (input, output) nor 'INPUT=OUTPUT'")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 1):
        raise UsageError(f"frames {frames!r} is not a number of calls >= 1")
    return pairs, frames


def _runnable_given(model: "Model", source: "Model", given, seed: int) -> tuple:
    """``given`` with input shapes the whole ``source`` runs on where its own drawn sizes fail
    (``verification.runnable_shapes``), and that rule in words; unchanged when ``model`` (what is written) is
    compared layer by layer."""
    from gatepack.converters import registry
    from gatepack.converters.verification import runnable_shapes

    if not model.keeps_whole or source.path is None or registry.reader(source.format).graph_inputs is None:
        return given, ""
    try:
        return runnable_shapes(source, given, seed)
    except InputError:
        return given, ""  # inputs it cannot draw: the verification says so


def _state_pairs(
    model: "Model",
    source: "Model",
    write_options: dict,
    stream,
    given,
    seed: int,
    verify: bool,
    stateful_layers: bool = False,
) -> tuple:
    """The source's state pairs when they matter: asked for (``--state``, ``--stateful``) or for verifying a
    whole streaming model; [] for a model without whole-model inputs, or whose source cannot run here. With them
    ``given``: where the whole ``source`` fails on its drawn sizes, with the sizes it runs on and that rule in words
    (``_runnable_given``; ``model``, what is written, is run fed without its fixed inputs). ``stateful_layers``: the
    target holds a layers-only model's states too (``FormatInfo.stateful_layers``)."""
    from gatepack.converters import registry
    from gatepack.converters.streaming import source_state_pairs

    given_pairs, _ = stream
    asked = bool(given_pairs) or bool(write_options.get("stateful"))
    streams = model.keeps_whole or (stateful_layers and bool(write_options.get("stateful")))
    if not (asked or verify) or not streams or model.path is None:
        if asked:
            raise UsageError(
                f"{model.path}: state pairs (--state, --stateful) apply to whole models (and --stateful to layers "
                "written as litert)"
            )
        return [], given, ""
    if registry.reader(model.format).graph_inputs is None:
        return [], given, ""
    try:
        return source_state_pairs(model, given_pairs, _unfixed(given), seed), given, ""
    except (RuntimeFailure, InputError):
        redrawn, drawn = _runnable_given(model, source, given, seed)
        if drawn:
            try:
                return source_state_pairs(model, given_pairs, _unfixed(redrawn), seed), redrawn, drawn
            except (RuntimeFailure, InputError):
                pass
        if asked:
            raise
        return [], redrawn, drawn  # the source does not run on drawn inputs: single-call verification says so


def _convert(
    src,
    dst,
    to,
    source_format,
    verify,
    accepted: Acceptance,
    layout,
    layers_only,
    seed,
    progress: "Progress",
    options,
    given,
    stream=((), None),
) -> Result:
    from gatepack.converters import registry
    from gatepack.converters.fileio import atomic_files, atomic_path, prepare_output
    from gatepack.converters.model import Model, as_layers_only, with_input_shapes

    info, implementation = registry.writer(to or registry.detect(dst, writing=True))
    read_options, write_options = _split_options(options)
    _read_options(read_options)
    info.check_options(write_options)
    _check_seed(seed)
    if layout is not None and (isinstance(layout, bool) or layout not in (0, 1)):
        raise UsageError(f"layout {layout!r} is not 0 or 1")
    if isinstance(src, Model):
        if read_options:
            raise UsageError(f"option(s) {sorted(read_options)} apply to reading a path, not to an in-memory model")
        source, label = src, str(src.path or "(in-memory model)")
    else:
        source_info = registry.check_name(source_format or registry.detect(src))
        inputs = [Path(src)] + [Path(src).with_suffix(c) for c in source_info.companions]
        prepare_output(dst, info.output_kind, inputs)
        registry.check_output_name(dst, info)
        progress.step(f"reading {src}")
        source, label = load(src, source_format, **read_options), str(src)
    prepare_output(dst, info.output_kind, _inputs_of(source))  # and every file the source was read from
    registry.check_output_name(dst, info)
    base = specialised(source, given, read_options)
    model = with_input_shapes(as_layers_only(base) if layers_only else base, given.shapes)
    if layout is not None and any(layer.interface.layout != layout for layer in model.layers):
        if model.keeps_whole and implementation.whole_model_finding(model) is not None:
            raise UsageError(
                f"{label}: --layout changes the recurrent layers' interface, which the model's other operators "
                f"fix; the whole {info.name} model keeps each layer's layout",
                hint="leave out --layout, or pass --layers-only to write the layers alone in a new layout",
            )
        model = with_layout(model, layout)
    model = _quantized(accepted.marked(model), label, info.name, accepted.quantize)
    _refuse_partial_model(model, label, info.name, layers_only)  # before the source is run for its states
    pairs, given, drawn = _state_pairs(model, source, write_options, stream, given, seed, verify, info.stateful_layers)
    model = _with_state_pairs(model, label, pairs, bool(write_options.get("stateful")))
    write_options = implementation.settle_options(model, write_options)  # one value for the findings and the writer
    staging = (
        atomic_files(Path(dst), info.companions)
        if info.companions
        else atomic_path(Path(dst), directory=info.is_directory)
    )
    with _named_as(label, base.path if base is not source else None):
        findings = _findings(model, info.name, write_options)
        _refuse_unheld(label, findings, info.name, accepted.quantize)
        _refuse_blocking(label, findings, accepted, layers_only)
        result = Result(label, str(dst), info.name, findings, layers_only=model.layers_only, whole=model.keeps_whole)
        with staging as tmp:
            progress.step(f"writing {len(model.layers)} layer(s) as {info.name}")
            assert implementation.write is not None  # registry.writer returns formats that write
            implementation.write(model, tmp, **write_options)
            if verify:
                checks = (pairs, write_options, stream[1], seed, progress, given, drawn, accepted)
                result.verification = _verified(implementation, tmp, source, Path(dst), info.name, *checks)
    return result


def _quantized(model: "Model", label: str, target: str, scheme: "Scheme | None") -> "Model":
    """``model`` with its recurrent weights quantized as asked (``converters.weight_quantization``; each layer
    noted with the ``lossy`` finding), RefusedError for a target that holds no quantized weights; ``model`` when
    nothing is asked."""
    from gatepack.converters import weight_quantization as quantizing

    if scheme is None:
        return model
    if quantizing.unheld(target, scheme):
        raise RefusedError(
            f"{label}: {quantizing.refusal_detail(target, scheme)}",
            hint=f"convert to {' or '.join(quantizing.HOLDERS)}, or leave out --quantize-weights",
        )
    notes = {lay.name: [*model.notes_for(lay), quantizing.finding(lay, scheme, target)] for lay in model.layers}
    return replace(quantizing.quantized_model(model, scheme, target), notes=notes)


def _refuse_unheld(label: str, findings: dict[str, list["Finding"]], target: str, scheme: "Scheme | None") -> None:
    """RefusedError when weights quantized as asked would not be kept as integers by ``target`` as written (e.g.
    ONNX below opset 13): its own ``quantization`` finding is not ``repacked``."""
    from gatepack.converters import weight_quantization as quantizing
    from gatepack.converters.findings import Status

    if scheme is None:
        return
    for name, found in findings.items():
        own = [f for f in found if f.feature == "quantization" and not quantizing.is_asked(f)]
        if not any(f.status is Status.REPACKED for f in own):
            why = "; ".join(f.detail for f in own) or quantizing.refusal_detail(target)
            raise RefusedError(
                f"{label}: layer {name!r}: --quantize-weights: {target} would not keep the integers: {why}",
                findings=own,
                hint=f"write it where the integers are kept ({' or '.join(quantizing.HOLDERS)}; ONNX at opset 13 "
                "or later, 21 for 4 bits or blocks: --layers-only writes a whole model's layers at the opset they "
                "need), or leave out --quantize-weights",
            )


@contextlib.contextmanager
def _named_as(label: str, private: "Path | None") -> Iterator[None]:
    """Errors that name ``private`` (a specialised model's temporary file) name the user's ``label`` instead."""
    try:
        yield
    except GatepackError as err:
        if private is not None:
            err.message = err.message.replace(str(private), label)
        raise


def _verified(
    implementation,
    tmp: Path,
    source: "Model",
    dst: Path,
    target: str,
    pairs,
    write_options,
    frames,
    seed,
    progress,
    given,
    drawn: str,
    accepted: Acceptance = Acceptance(),
) -> "Verification":
    """The artifact written at ``tmp`` read back and verified against ``source`` (one call, the consecutive calls of
    a streaming model, a provider's nodes for ``--for``; ``drawn``: how the sizes were drawn, noted); VerificationError
    (nothing is written) unless it passed."""
    from gatepack.converters import registry
    from gatepack.converters.verification import verify_provider_nodes

    progress.step(f"reading back {dst}")
    written = _read_back(implementation, tmp, source, target)
    written.path = dst
    verification = _verify_written(source, written, tmp, pairs, write_options, frames, seed, progress, given, accepted)
    verification.notes += [drawn] if drawn else []
    runtime = write_options.get("runtime")
    if runtime is not None and registry.runtime_name(runtime) != "onnxruntime":
        verify_provider_nodes(written, registry.runtime_name(runtime), verification, seed=seed)
    _refuse_unverified(dst, verification)
    return verification


def _refuse_unverified(dst, verification: "Verification") -> None:
    """VerificationError (nothing is written) unless the verification passed."""
    if verification.incomplete and all(o.passed for o in verification.outputs):
        raise VerificationError(
            f"{dst}: verification incomplete: {verification.incomplete}; nothing was written",
            verification=verification,
            hint="give inputs the model runs on: --input-shape NAME=d1,d2,... or --inputs FILE.npz "
            "(API: input_shapes=, inputs=), or --no-verify to write it unverified",
        )
    if not verification.passed:
        worst = max(verification.outputs, key=lambda o: o.max_abs_error, default=None)
        what = "no output compared"
        if worst:
            what = f"{worst.layer} {worst.output} max abs error {worst.max_abs_error:.3g}"
        hint = "rerun with --no-verify to keep the output for inspection"
        drift = _drift(verification)
        if drift:
            what += drift
            hint = (
                "each call's difference is fed back with the states and grows; for a lossy artifact (fp16) that is "
                "its rounding accumulating: keep full precision (leave out --compress-to-fp16), check fewer calls "
                "(--frames N), or " + hint
            )
        raise VerificationError(
            f"{dst}: verification failed: {what}; nothing was written", verification=verification, hint=hint
        )


def _drift(verification: "Verification") -> str:
    """Where only the consecutive calls of a streaming check disagree: how one call compares and how the error grew
    call by call ('' otherwise)."""
    from gatepack.converters.streaming import STREAMED

    one_call = [o for o in verification.outputs if o.layer != STREAMED]
    if verification.streaming is None or not one_call or not all(o.passed for o in one_call):
        return ""
    largest = max(o.max_abs_error for o in one_call)
    return (
        f" over {verification.streaming.frames} consecutive calls, states fed back, where one call agrees (largest "
        f"error {largest:.2g}); the error per call: {verification.streaming.growth_text()}"
    )


def _with_state_pairs(model: "Model", label: str, pairs: list, stateful: bool) -> "Model":
    """``model`` with its state pairs in ``meta['state_pairs']`` (the writers' and the findings' source);
    UsageError when ``stateful`` is asked of a model without any."""
    if stateful and not pairs:
        raise UsageError(f"{label}: --stateful: no state pairs found", hint="name them: --state INPUT=OUTPUT")
    if not pairs:
        return model
    return replace(model, meta={**model.meta, "state_pairs": [(p.input, p.output) for p in pairs]})


def _verify_written(
    source, written, tmp, pairs, write_options: dict, frames, seed, progress, given, accepted: Acceptance = Acceptance()
) -> "Verification":
    """One call on drawn inputs (random states included), then for a streaming model ``frames`` consecutive
    calls from zero states; a stateful artifact (``write_options['stateful']``), which takes no state inputs, is
    verified by the calls alone. A quantized source written with float weights passes the accuracy gate
    (``converters.accuracy``)."""
    from gatepack.converters import accuracy
    from gatepack.converters.streaming import verify_streaming
    from gatepack.converters.verification import verify_models

    stateful = bool(write_options.get("stateful"))
    streams = bool(pairs) and (written.keeps_whole or stateful)
    if accuracy.applies(source, accepted.dequantize) or accepted.quantize is not None:
        progress.step("verifying against the source and its twin" + (", over consecutive calls" if streams else ""))
        gate = accuracy.Gate(accepted.max_error, accepted.quantize)
        twin_pairs = pairs if streams else ()
        return accuracy.verify_dequantized(
            source, written, tmp, gate, seed=seed, given=given, pairs=twin_pairs, frames=frames, stateful=stateful
        )
    streamed = None
    if streams:
        progress.step(f"verifying {frames or 'the default number of'} consecutive calls, states fed back")
        streamed = verify_streaming(
            source, written, frames=frames, pairs=pairs, seed=seed, target_file=tmp, given=given
        )
        if stateful:
            return streamed
    result = verify_models(source, written, seed=seed, target_file=tmp, progress=progress, given=given)
    if streamed is not None:
        result.outputs += streamed.outputs
        result.notes += streamed.notes
        result.streaming = streamed.streaming
    return result


def _read_back(implementation, tmp: Path, source: "Model", target: str) -> "Model":
    """The artifact just written, read back for verification. An artifact of the source's own format in which
    every recurrent layer became elementary operators (``--for directml``) has no layer left to read: it is
    then compared end to end with the source file (``Model.meta['elementary']``)."""
    from gatepack.converters.model import Model

    try:
        return implementation.read(tmp)
    except NoRecurrentLayerError:
        if source.format != target or source.path is None:
            raise
        return Model(tmp, target, [], meta={"other_ops": source.meta.get("other_ops"), "elementary": True})


def _refuse_partial_model(model: "Model", label: str, target: str, layers_only: bool) -> "Finding | None":
    """RefusedError when ``target`` would hold a whole ``model``'s recurrent layers only and ``layers_only`` did not
    ask for that, decided before anything runs the source; else the ``model`` finding (None: nothing to say)."""
    from gatepack.converters.reporting import model_finding

    whole = model_finding(model, target)
    if whole is not None:
        _refuse_blocking(label, {"(model)": [whole]}, Acceptance(), layers_only)
    return whole


def _findings(model: "Model", target: str, write_options: dict) -> dict[str, list["Finding"]]:
    """Per layer, what writing it as ``target`` with ``write_options`` does to each feature."""
    from gatepack.converters.reporting import build_report

    report = build_report(model, [target], write_options)
    return {lay.layer.name: lay.targets[target].findings for lay in report.layers}


def _refuse_blocking(
    label: str, findings: dict[str, list["Finding"]], accepted: Acceptance, layers_only: bool = False
) -> None:
    """RefusedError naming the first finding that is unsupported (or lossy without ``accepted.lossy``; quantized
    weights written as floats without ``accepted.dequantize``); the ``model`` finding (operators the target
    cannot hold) first, once, and not when ``layers_only`` accepted it."""
    from gatepack.converters import quantization
    from gatepack.converters.findings import Status

    def blocks(f: "Finding") -> bool:
        dequantized = quantization.refuses(f, accepted.dequantize or accepted.quantize is not None)
        if dequantized is not None:
            return dequantized
        return (f.status is Status.UNSUPPORTED and not (f.feature == "model" and layers_only)) or (
            f.status is Status.LOSSY and not accepted.lossy
        )

    blocking = [(name, f) for name, fs in findings.items() for f in fs if blocks(f)]
    whole = [f for _, f in blocking if f.feature == "model"]
    if whole:
        raise RefusedError(f"{label}: {whole[0].detail}", findings=whole[:1], hint=whole[0].alternative)
    if blocking:
        name, first = blocking[0]
        more = f" (and {len(blocking) - 1} more finding(s))" if len(blocking) > 1 else ""
        hint = first.alternative or ("pass --allow-lossy to accept it" if first.status is Status.LOSSY else None)
        raise RefusedError(
            f"{label}: layer {name!r}: {first.status.value}: {first.feature}: {first.detail}{more}",
            findings=[f for _, f in blocking],
            hint=hint,
        )


def _check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed {seed!r} is not a non-negative integer")


def verify(
    src: str | Path,
    dst: str | Path,
    *,
    format: str | None = None,
    to: str | None = None,
    seed: int = 0,
    atol: float | None = None,
    rtol: float | None = None,
    progress: "Progress | None" = None,
    input_shapes: "dict[str, tuple[int, ...]] | None" = None,
    inputs: "dict[str, np.ndarray] | None" = None,
    frames: int | None = None,
    states: "Sequence[tuple[str, str] | str]" = (),
    input_values: "dict[str, object] | None" = None,
    **options,
) -> "Verification":
    """Run the artifacts ``src`` and ``dst`` on the same random inputs and compare their outputs,
    each on its own runtime (or gatepack's executor of its format's semantics).

    ``format`` / ``to``: the formats of ``src`` / ``dst`` (default: from the paths); ``seed``: of the
    inputs; ``atol`` / ``rtol``: agreement is ``|a - b| <= atol + rtol * |b|`` (default per dtype:
    float32 1e-5 / 1e-4, float16 1e-2 / 1e-2, float64 1e-7 / 1e-6); ``options``: read options
    (``activation_defaults``); ``input_shapes`` / ``inputs``: as ``convert``'s. Returns the Verification
    (``passed``, per-output errors, ``incomplete``); it does not raise when the outputs differ.
    ``frames`` (or ``states``): compare a streaming model over that many consecutive calls (default
    ``streaming.DEFAULT_FRAMES``), each side feeding its state outputs back (``states``: pairs given or corrected,
    as ``convert``'s); ``inputs`` may then hold a sequence of frames (one more leading axis). ``input_values``: the
    inputs ``dst`` holds as constants (``convert --input-value``), fed to ``src`` only. A whole source that fails on
    its drawn sizes is run at sizes it runs on, as ``convert`` draws them.
    """
    from gatepack.converters import registry
    from gatepack.converters.progress import Silent
    from gatepack.converters.verification import Tolerance, verify_models

    src, dst = registry.as_source(src), registry.as_source(dst)
    given = _given(input_shapes, inputs, input_values)
    _check_seed(seed)
    tolerance = Tolerance(atol, rtol)
    progress = progress or Silent()
    pairs, frames = _streaming_request(states, frames)
    try:
        source = load(src, format, **options)
        target = load(dst, to, **options)

        def check(given) -> "Verification":
            if frames is not None or pairs or (given.values and _holds_frames(source, given)):
                from gatepack.converters.streaming import verify_streaming

                progress.step("verifying consecutive calls, states fed back")
                return verify_streaming(
                    source, target, frames=frames, states=pairs, seed=seed, tolerance=tolerance, given=given
                )
            return verify_models(source, target, seed=seed, progress=progress, tolerance=tolerance, given=given)

        first: "Verification | RuntimeFailure"
        try:
            first = check(given)
            if not first.incomplete:
                return first
        except RuntimeFailure as err:  # (a streaming check runs the source first)
            first = err
        redrawn, drawn = _runnable_given(target, source, given, seed)  # where the source fails on the sizes drawn
        if not drawn:
            if isinstance(first, RuntimeFailure):
                raise first
            return first
        result = check(redrawn)
        result.notes.append(drawn)
        return result
    finally:
        progress.close()


def state_pairs(
    model: "Model | str | Path",
    *,
    states: "Sequence[tuple[str, str] | str]" = (),
    input_shapes: "dict[str, tuple[int, ...]] | None" = None,
    format: str | None = None,
) -> "list[StatePair]":
    """A whole streaming model's state pairs (which output feeds which input on the next call), found on one call
    of the model on drawn inputs by names and recurrent wiring (``gatepack.converters.streaming``); ``states``
    gives or corrects pairs (``(input, output)`` or ``"IN=OUT"``); ``input_shapes`` fixes symbolic dimensions.
    [] for a model that holds only layers or cannot run here on the inputs drawn."""
    from gatepack.converters.model import Model
    from gatepack.converters.verification import GivenInputs

    loaded = model if isinstance(model, Model) else load(model, format)
    given = GivenInputs(dict(input_shapes or {}), {})
    return _state_pairs(loaded, loaded, {}, _streaming_request(states, None), given, 0, verify=True)[0]


def _holds_frames(source: "Model", given) -> bool:
    """True when ``given`` holds a sequence of frames for one of the whole source's inputs."""
    from gatepack.converters.streaming import _split_given
    from gatepack.converters.verification import _graph_inputs

    return source.keeps_whole and bool(_split_given(given, _graph_inputs(source))[1])


def report(
    model_or_path: "Model | str | Path",
    to: str | list[str] | None = None,
    *,
    format: str | None = None,
    layers_only: bool = False,
    states: "Sequence[tuple[str, str] | str]" = (),
    input_values: "dict[str, object] | None" = None,
    quantize_weights: str | None = None,
    quantize_block_size: int | None = None,
    **options,
) -> "Report":
    """Per layer and target, what every feature becomes (exact, repacked, folded, decomposed, lossy,
    unsupported), as ``convert`` would find it.

    ``to``: a target format or a list of them (default: every format gatepack writes); ``format``: the
    source's format when a path is given; ``layers_only``: as ``convert`` would write the recurrent layers
    alone (a model with other operators); ``options``: ``activation_defaults`` and write options,
    each applied to the targets that take it (one no target takes raises UsageError naming it). A whole
    streaming model is run once to find its state pairs (``states``: given or corrected, as ``convert``'s), and
    each target says what becomes of them (``--stateful`` included); ``input_values``: as ``convert``'s.
    ``quantize_weights`` (and ``quantize_block_size``): as ``convert``'s; each target that keeps the integers is
    then converted and measured in a private directory (``converters.quantized_report``: bits per weight, sizes,
    the accuracy gate's error per output), every other one refused as ``convert`` refuses it.
    """
    from gatepack.converters import registry
    from gatepack.converters.model import Model
    from gatepack.converters.reporting import build_report

    read_options, write_options = _split_options(options)
    if isinstance(model_or_path, Model):
        _read_options(read_options)
        model = model_or_path
    else:
        model = load(model_or_path, format, **read_options)
    targets = [to] if isinstance(to, str) else list(to) if to else registry.writers()
    registry.check_options(write_options, [registry.writer(target)[0] for target in targets])
    from gatepack.converters.model import as_layers_only

    given = _given(None, None, input_values)
    source, model = model, specialised(model, given, read_options)
    model = as_layers_only(model) if layers_only else model
    layer_states = any(registry.writer(target)[0].stateful_layers for target in targets)  # --stateful on layers
    pairs, _, _ = _state_pairs(
        model,
        source,
        write_options,
        _streaming_request(states, None),
        given,
        0,
        verify=True,
        stateful_layers=layer_states,
    )
    if pairs:  # a streaming model: each target's ``state`` finding, as convert would write it
        model = replace(model, meta={**model.meta, "state_pairs": [(p.input, p.output) for p in pairs]})
    from gatepack.converters import quantized_report

    scheme = quantized_report.check_scheme(quantize_weights, quantize_block_size)
    found = quantized_report.build(build_report, model, targets, write_options, scheme)
    general = {"layers_only": layers_only, "states": states, "input_values": input_values}
    reread = read_options if not isinstance(model_or_path, Model) else {}
    found = quantized_report.with_measurements(
        found, convert, model_or_path, scheme, {**general, **reread}, write_options
    )
    return replace(found, source=str(source.path)) if given.fixed else found


def engine_for(format: str) -> str:
    """The engine ``run`` uses by default for ``format``: its own runtime where one runs here (onnxruntime,
    OpenVINO CPU), else gatepack's executor of its semantics."""
    from gatepack.converters import registry

    return "native" if registry.check_name(format).runs_here else "numpy"


def input_names(artifact: str | Path, format: str | None = None) -> list[str]:
    """The names of the tensors ``run`` takes for ``artifact`` (its graph inputs; for an artifact of layers alone, each
    layer's X and the optional inputs it does not hold as constants), alike for every format."""
    from gatepack.converters import registry

    artifact = registry.as_source(artifact)
    fmt = format or registry.detect(artifact)
    graph_inputs = registry.reader(fmt).graph_inputs
    if graph_inputs is not None:
        return [name for name, _, _ in graph_inputs(artifact)]
    # X and the optional inputs each layer takes from its user: never an input it holds as a constant (named in its
    # interface for the artifact's constant tensor), which no format's run takes
    layers = load(artifact, fmt).layers
    return list(
        dict.fromkeys(n for lay in layers for role in ("x", *lay.fed_roles()) if (n := getattr(lay.interface, role)))
    )


def run(
    artifact: str | Path,
    inputs: dict[str, "np.ndarray"],
    engine: str = "auto",
    format: str | None = None,
    *,
    directml_shapes: bool = False,
    **options,
) -> dict[str, "np.ndarray"]:
    """Execute an artifact on named inputs; return its named outputs.

    ``engine``: ``native`` (the format's own runtime where one runs here), ``numpy`` (gatepack's
    executor of the format's semantics, reading the artifact) or ``auto`` (native where the format's runtime
    runs here, else numpy: ``engine_for``); ``format``: default from the path; ``options``: read options
    (``activation_defaults``). A DirectML artifact takes and returns the source's tensors (names, shapes and
    layout: X [S,N,I], Y_h [D,N,H]); ``directml_shapes``: its DxDispatch resources instead, by resource name in
    the descs' 4-D shapes (X [1,S,N,I], Y_h [1,D,N,H]), every output resource returned.
    """
    from gatepack.converters import registry
    from gatepack.converters.executor import check_model_inputs

    artifact = registry.as_source(artifact)
    fmt = format or registry.detect(artifact)
    if engine not in ENGINES:
        raise UsageError(f"engine {engine!r} is not one of {ENGINES}")
    info = registry.check_name(fmt)
    if directml_shapes and info.interface_inputs:
        raise UsageError(f"{artifact}: the DirectML shapes apply to DirectML artifacts, and this is {info.title}")
    engine = engine_for(fmt) if engine == "auto" else engine
    _read_options(options)
    implementation = registry.reader(fmt)
    if not info.interface_inputs and not directml_shapes and engine == "numpy":
        return _run_layers_on_disk(load(artifact, fmt, **options), inputs)
    try:
        if info.interface_inputs:
            model = load(artifact, fmt, **options)
            if not model.meta.get("own_input_shapes"):  # else the format's run checks its own shapes
                check_model_inputs(model, inputs)
    except NoRecurrentLayerError:
        if engine == "numpy" and implementation.run_numpy is None:
            raise  # the executor runs recurrent layers only; a format's own interpreter runs any program
    if engine == "native":
        return implementation.run_native(artifact, inputs)
    if implementation.run_numpy is not None:  # the format's own semantics, read from the artifact
        return implementation.run_numpy(artifact, inputs)
    from gatepack.converters.executor import run_model

    return run_model(load(artifact, fmt, **options), inputs)


def _run_layers_on_disk(model: "Model", inputs: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
    """Each layer of ``model`` as its artifact holds it (its format's ``run_layer_native``: for DirectML,
    gatepack's executor of DirectML's semantics on the saved dispatch), fed and read in the layer's interface:
    the source's tensor names, shapes and layout."""
    from gatepack.converters import registry
    from gatepack.converters.executor import check_model_inputs, layer_feed

    try:
        check_model_inputs(model, inputs)
    except InputError as err:
        err.hint = err.hint or (
            f"{model.path} takes the source's tensors; --directml-shapes (API: directml_shapes=True) takes its "
            "DxDispatch resources in the descs' 4-D shapes"
        )
        raise
    run_layer = registry.reader(model.format).run_layer_native
    outputs: dict[str, np.ndarray] = {}
    for layer in model.layers:
        outputs.update(run_layer(layer, layer_feed(model, layer, inputs)))
    return outputs

"""The pipeline's first steps: a source read (``load``), checked against the output it is converted to, and
specialised for the input values the user fixes (``--input-value``).

Reading is the format's (``registry.reader(fmt).read``); this module adds what every format shares: the files a
model was read from (``Model.files``: the output policy never writes over them), layer and output names unique,
and for a file without recurrent layers what gatepack converts and how to get it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import gatepack.converters.registry as registry
from gatepack.converters.errors import InputError, NoRecurrentLayerError, UsageError
from gatepack.converters.plan import read_options as parsed_read_options

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.plan import ConversionPlan
    from gatepack.converters.progress import Progress
    from gatepack.converters.registry import FormatInfo
    from gatepack.converters.verification import GivenInputs

# what to do when a model holds no recurrent layer: what gatepack converts, and how to get it
CONVERTS = (
    "gatepack converts models that hold GRU, RNN or LSTM layers: ONNX GRU/RNN/LSTM nodes, OpenVINO "
    "GRUSequence/RNNSequence/LSTMSequence ops, and the loops and unrolled cells it lifts into them; export the "
    "model with its recurrent layers kept as such operators (e.g. torch.onnx.export(..., dynamo=False) writes "
    "each nn.GRU layer as a GRU node)"
)


def load(path, format: str | None, options: dict) -> "Model":
    """The recurrent layers of the artifact at ``path`` (``gatepack.load``): read by its format (``format``, else
    detected), with the read ``options``; the files opened to read it in ``Model.files``."""
    from gatepack.converters.fileio import track_reads

    path = registry.as_path(registry.as_source(path))
    fmt = format or registry.detect(path)
    read_options = parsed_read_options(options)
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


def label_of(model: "Model") -> str:
    """How messages name a model: its path, or that it is in memory."""
    return str(model.path or "(in-memory model)")


def inputs_of(model: "Model") -> list[Path]:
    """Every path ``model`` was read from: its artifact and each file opened to read it."""
    return ([Path(model.path)] if model.path else []) + list(model.files)


def read_source(plan: "ConversionPlan", info: "FormatInfo", progress: "Progress") -> tuple["Model", str]:
    """The plan's source and how messages name it: a path read (after checking that the output is none of its
    files, nor named for another format), or the in-memory model given; then the output checked against every file
    the source was read from."""
    from gatepack.converters.fileio import prepare_output
    from gatepack.converters.model import Model

    src, dst = plan.source, plan.output
    if isinstance(src, Model):
        source, label = src, label_of(src)
    else:
        source_info = registry.check_name(plan.source_format or registry.detect(src))
        inputs = [Path(src)] + [Path(src).with_suffix(c) for c in source_info.companions]
        prepare_output(dst, info.output_kind, inputs)
        registry.check_output_name(dst, info)
        progress.step(f"reading {src}")
        source, label = load(src, plan.source_format, plan.read_options), str(src)
    prepare_output(dst, info.output_kind, inputs_of(source))  # and every file the source was read from
    registry.check_output_name(dst, info)
    return source, label


def specialised(
    source: "Model", given: "GivenInputs", read_options: dict | None = None, at_shapes: bool = False
) -> "Model":
    """``source`` with the inputs ``given.fixed`` names held as constants of their given values and what depends on
    them folded (its format's ``GraphAnalyses.specialise``: ONNX's), read back from a private temporary file; each
    layer carries an ``interface`` finding (``repacked``) saying the artifact no longer takes them. ``at_shapes``:
    its inputs' symbolic dimensions fixed at ``given.shapes`` too before folding (an ``If`` decided by a shape
    resolved, as a writer that binds the shapes when converting resolves it). ``source`` when nothing is fixed."""
    shapes = {name: list(dims) for name, dims in given.shapes.items()} if at_shapes else {}
    if not given.fixed and not shapes:
        return source
    analyses = registry.reader(source.format).graph_analyses
    if analyses is None or source.path is None or not source.other_ops:
        raise UsageError(
            f"{source.path}: --input-value (input_values=) fixes inputs of whole ONNX models, and this is "
            f"{'a model of layers alone' if analyses is not None else registry.check_name(source.format).title}"
        )
    values = {name: given.values[name] for name in given.fixed}
    fixed = registry.as_source(analyses.specialise(Path(source.path), values, shapes))
    model = load(fixed, source.format, read_options or {})
    return _noted_as_fixed(model, values) if values else model


def _noted_as_fixed(model: "Model", values: dict) -> "Model":
    """``model`` with the ``interface`` finding of its inputs fixed at ``values`` on each layer."""
    from gatepack.converters.findings import Finding, Status

    words = ", ".join(f"{name}={value.tolist()}" for name, value in values.items())
    fixed = ", ".join(values)
    finding = Finding(
        "interface",
        Status.REPACKED,
        f"input(s) {words} fixed as asked (--input-value): held as constants, what depends on them folded; the "
        f"artifact no longer takes {fixed}",
        warning=f"an app feeds it without {fixed}",
    )
    notes = {layer.name: [*model.notes_for(layer), finding] for layer in model.layers}
    return replace(model, meta={**model.meta, "input_values": {n: v.tolist() for n, v in values.items()}}, notes=notes)

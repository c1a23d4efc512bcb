"""gatepack's Python API: convert GRU/RNN layers between runtimes and prove the result numerically.

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

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

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
    from gatepack.converters.verification import Verification

__all__ = ["load", "save", "convert", "verify", "report", "run", "input_names", "Result"]

READ_OPTIONS = ("activation_defaults",)


@dataclass
class Result:
    """What ``convert`` did: the output, the findings per layer, and the verification (if run)."""

    source: str
    output: str
    format: str
    findings: dict[str, list["Finding"]] = field(default_factory=dict)
    verification: "Verification | None" = None

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "output": self.output,
            "format": self.format,
            "findings": {name: [f.to_json() for f in fs] for name, fs in self.findings.items()},
            "verification": self.verification.to_json() if self.verification else None,
        }


def _read_options(options: dict) -> dict:
    out = {}
    if options.get("activation_defaults"):
        from gatepack.schemas.activations import DefaultsPolicy

        try:
            out["defaults"] = DefaultsPolicy(options["activation_defaults"])
        except ValueError:
            raise UsageError(
                f"activation defaults policy {options['activation_defaults']!r} is not 'onnxruntime' or 'onnx'"
            ) from None
    return out


def load(path: str | Path, format: str | None = None, **options) -> "Model":
    """Read the recurrent layers of the artifact at ``path`` (format detected from the path)."""
    from gatepack.converters import registry
    from gatepack.converters.fileio import track_reads

    fmt = format or registry.detect(path)
    read_options = _read_options(options)
    with track_reads() as opened:
        model = registry.module(fmt).read(path, **read_options)
    model.files = tuple(sorted(opened))
    _check_names(model)
    return model


def _check_names(model: "Model") -> None:
    """Layer names and output tensor names are unique in a model (each output is computed once)."""
    seen: dict[str, str] = {}
    for layer in model.layers:
        if layer.name in seen.values():
            raise InputError(f"{model.path}: two layers are named {layer.name!r}")
        for output in (layer.interface.y, layer.interface.y_h):
            if output is not None and output in seen:
                raise InputError(
                    f"{model.path}: layers {seen[output]!r} and {layer.name!r} both produce output {output!r}"
                )
            if output is not None:
                seen[output] = layer.name


def _inputs_of(model: "Model") -> list[Path]:
    """Every path ``model`` was read from: its artifact and each file opened to read it."""
    return ([Path(model.path)] if model.path else []) + list(model.files)


def save(model: "Model", path: str | Path, format: str, **options) -> None:
    """Write ``model`` as ``format`` at ``path`` (atomically), under the output policy: never over
    the files it was read from, and over an existing path only if it is an artifact of ``format``."""
    from gatepack.converters import registry
    from gatepack.converters.fileio import prepare_output

    info = registry.check_name(format)
    prepare_output(path, info.output_kind, _inputs_of(model))
    _write(model, path, info, options)


def _write(model: "Model", path: str | Path, info, options: dict) -> None:
    from gatepack.converters import registry

    unknown = set(options) - set(info.write_options)
    if unknown:
        raise UsageError(
            f"option(s) {sorted(unknown)} do not apply to the {info.name} format",
            hint=f"it takes {list(info.write_options) or 'none'}",
        )
    registry.module(info.name).write(model, path, **options)


def with_layout(model: "Model", layout: int) -> "Model":
    """The same layers with a different interface layout (0: sequence-major, 1: batch-major)."""
    from gatepack.converters.model import Model

    layers = [replace(layer, interface=replace(layer.interface, layout=layout), extras={}) for layer in model.layers]
    return Model(model.path, model.format, layers, model.notes, model.skipped, model.meta, model.files)


def convert(
    src: str | Path,
    dst: str | Path,
    to: str | None = None,
    *,
    from_format: str | None = None,
    verify: bool = True,
    allow_lossy: bool = False,
    strategy: str = "auto",
    layout: int | None = None,
    seed: int = 0,
    progress: "Progress | None" = None,
    **options,
) -> Result:
    """Convert the recurrent layers of ``src`` into ``dst`` as format ``to``; verify unless told not to.

    Refuses (RefusedError) when a finding is ``unsupported``, or ``lossy`` without ``allow_lossy``.
    Nothing is written unless the conversion and its verification succeed. ``progress`` (e.g.
    ``gatepack.converters.progress.Progress("convert")``) reports the steps on stderr.
    """
    from gatepack.converters.progress import Silent

    progress = progress or Silent()
    try:
        return _convert(src, dst, to, from_format, verify, allow_lossy, strategy, layout, seed, progress, options)
    finally:
        progress.close()


def _convert(
    src, dst, to, from_format, verify, allow_lossy, strategy, layout, seed, progress: "Progress", options: dict
) -> Result:
    from gatepack.converters import registry
    from gatepack.converters.fileio import atomic_files, atomic_path, prepare_output
    from gatepack.converters.findings import Status
    from gatepack.converters.reporting import build_report

    fmt = to or registry.detect(dst)
    info = registry.check_name(fmt)
    if strategy not in ("auto", "native", "decomposed"):
        raise UsageError(f"strategy {strategy!r} is not auto, native or decomposed")
    if strategy != "auto" and "strategy" not in info.write_options:
        raise UsageError(
            f"--strategy {strategy} does not apply to {info.title}, which has one way to write a layer",
            hint="strategies choose between a target's recurrent op and elementary ops (openvino, coreml)",
        )
    if "strategy" in info.write_options:
        options["strategy"] = strategy
    _check_seed(seed)
    source_info = registry.check_name(from_format or registry.detect(src))
    inputs = [Path(src)] + [Path(src).with_suffix(c) for c in source_info.companions]
    prepare_output(dst, info.output_kind, inputs)
    read_opts = {k: options.pop(k) for k in READ_OPTIONS if k in options}
    progress.step(f"reading {src}")
    source = load(src, from_format, **read_opts)
    prepare_output(dst, info.output_kind, _inputs_of(source))  # and every file the source was read from
    model = with_layout(source, layout) if layout is not None else source
    rep = build_report(model, [fmt], options)
    findings = {lay.layer.name: lay.targets[fmt].findings for lay in rep.layers}
    blocking = [
        (name, f)
        for name, fs in findings.items()
        for f in fs
        if f.status is Status.UNSUPPORTED or (f.status is Status.LOSSY and not allow_lossy)
    ]
    if blocking:
        name, first = blocking[0]
        more = f" (and {len(blocking) - 1} more finding(s))" if len(blocking) > 1 else ""
        hint = first.alternative or ("pass --allow-lossy to accept it" if first.status is Status.LOSSY else None)
        raise RefusedError(
            f"{src}: layer {name!r}: {first.status.value}: {first.feature}: {first.detail}{more}",
            findings=[f for _, f in blocking],
            hint=hint,
        )
    result = Result(str(src), str(dst), fmt, findings)
    staging = (
        atomic_files(Path(dst), info.companions)
        if info.companions
        else atomic_path(Path(dst), directory=info.is_directory)
    )
    with staging as tmp:
        progress.step(f"writing {len(model.layers)} layer(s) as {fmt}")
        _write(model, tmp, info, options)
        if verify:
            progress.step(f"reading back {dst}")
            written = registry.module(fmt).read(tmp)
            written.path = Path(dst)
            from gatepack.converters.verification import verify_models

            result.verification = verify_models(source, written, seed=seed, target_file=tmp, progress=progress)
            if not result.verification.passed:
                worst = max(result.verification.outputs, key=lambda o: o.max_abs_error, default=None)
                what = (
                    f"{worst.layer} {worst.output} max abs error {worst.max_abs_error:.3g}"
                    if worst
                    else "no output compared"
                )
                raise VerificationError(
                    f"{dst}: verification failed: {what}; nothing was written",
                    verification=result.verification,
                    hint="rerun with --no-verify to keep the output for inspection",
                )
    return result


def _check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed {seed!r} is not a non-negative integer")


def verify(
    src: str | Path,
    dst: str | Path,
    *,
    seed: int = 0,
    src_format: str | None = None,
    dst_format: str | None = None,
    progress: "Progress | None" = None,
    **options,
) -> "Verification":
    """Run both artifacts on the same random inputs and compare their outputs."""
    from gatepack.converters.progress import Silent

    _check_seed(seed)
    from gatepack.converters.verification import verify_models

    progress = progress or Silent()
    try:
        return verify_models(
            load(src, src_format, **options), load(dst, dst_format, **options), seed=seed, progress=progress
        )
    finally:
        progress.close()


def report(model_or_path: "Model | str | Path", targets: list[str] | None = None, **options) -> "Report":
    """Per layer and target, what every feature becomes (exact ... unsupported)."""
    from gatepack.converters import registry
    from gatepack.converters.reporting import build_report

    read_opts = {k: options.pop(k) for k in READ_OPTIONS if k in options}
    model = load(model_or_path, **read_opts) if isinstance(model_or_path, (str, Path)) else model_or_path
    targets = list(targets) if targets else list(registry.FORMATS)
    for target in targets:
        registry.check_name(target)
    return build_report(model, targets, options)


def input_names(artifact: str | Path, format: str | None = None) -> list[str]:
    """The names of the tensors ``run`` takes for ``artifact`` (its graph inputs)."""
    from gatepack.converters import registry

    fmt = format or registry.detect(artifact)
    module = registry.module(fmt)
    if hasattr(module, "graph_inputs"):
        return [name for name, _, _ in module.graph_inputs(artifact)]
    itf = [layer.interface for layer in load(artifact, fmt).layers]
    return list(dict.fromkeys(n for i in itf for n in (i.x, i.sequence_lens, i.initial_h) if n))


def run(
    artifact: str | Path, inputs: dict[str, "np.ndarray"], engine: str = "native", format: str | None = None, **options
) -> dict[str, "np.ndarray"]:
    """Execute an artifact: ``native`` on its own runtime, ``numpy`` on gatepack's executor."""
    from gatepack.converters import registry
    from gatepack.converters.executor import check_model_inputs

    fmt = format or registry.detect(artifact)
    if engine not in ("native", "numpy"):
        raise UsageError(f"engine {engine!r} is not 'native' or 'numpy'")
    try:
        if registry.check_name(fmt).interface_inputs:
            check_model_inputs(load(artifact, fmt, **options), inputs)
    except NoRecurrentLayerError:
        if engine == "numpy":
            raise
    module = registry.module(fmt)
    if engine == "native":
        return module.run_native(artifact, inputs)
    if hasattr(module, "run_numpy"):  # the format's own semantics, read from the artifact
        return module.run_numpy(artifact, inputs)
    from gatepack.converters.executor import run_model

    return run_model(load(artifact, fmt, **options), inputs)

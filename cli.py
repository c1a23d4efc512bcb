"""gatepack's command line: a thin shell over the API (``gatepack.converters``).

Errors print as one line on stderr (``gatepack: error: ...``) with a distinct exit code (see
``gatepack.converters.errors``); ``--debug`` shows the traceback. Heavy frameworks load only in the commands
that need them.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

import gatepack as gp
from gatepack.converters.errors import GatepackError
from gatepack.converters.fileio import OutputKind, has_suffix
from gatepack.converters.progress import Progress
from gatepack.converters.registry import FORMATS  # noqa: E402  (light: no framework is imported)

FORMAT_NAMES = list(FORMATS)
REPORT_OUTPUT = OutputKind(
    "report (.txt, .md, .json, .html)", False, has_suffix(".txt", ".md", ".markdown", ".json", ".html", ".htm")
)
NPZ_OUTPUT = OutputKind(".npz file", False, has_suffix(".npz"))


def _fail(message: str, code: int) -> None:
    click.echo(f"gatepack: error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn):
    """Turn gatepack errors into one-line messages and exit codes (tracebacks only with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = bool((click.get_current_context().obj or {}).get("debug"))
        try:
            return fn(*args, **kwargs)
        except GatepackError as err:
            if debug:
                raise
            _fail(err.one_line(), err.exit_code)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as err:  # a bug: say so plainly
            if debug:
                raise
            _fail(
                f"internal error: {type(err).__name__}: {' '.join(str(err).split())[:300]} (rerun with --debug for "
                "a traceback)",
                1,
            )

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(gp.__version__, "--version", prog_name="gatepack", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """gatepack: move GRU and RNN layers between ONNX, OpenVINO, DirectML, Core ML and BNNS
    without silently breaking them, and prove every conversion numerically."""
    ctx.obj = {"debug": debug}


_from_option = click.option(
    "--from", "from_format", type=click.Choice(FORMAT_NAMES), help="Source format (default: from the path)."
)
_defaults_option = click.option(
    "--activation-defaults",
    type=click.Choice(["onnxruntime", "onnx"]),
    default="onnxruntime",
    show_default=True,
    help=(
        "Values for activation parameters a model leaves out (runtimes disagree for ThresholdedRelu, ScaledTanh, "
        "Affine)."
    ),
)


@main.command()
@click.argument("model", type=click.Path())
@_from_option
@_defaults_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@handle_errors
def inspect(model: str, from_format: str | None, activation_defaults: str, as_json: bool) -> None:
    """List the recurrent layers of MODEL: attributes, shapes, parameter counts."""
    from gatepack.converters.inspection import describe_json, describe_text

    loaded = gp.load(model, from_format, activation_defaults=activation_defaults)
    click.echo(json.dumps(describe_json(loaded), indent=2) if as_json else describe_text(loaded))


@main.command()
@click.argument("model", type=click.Path())
@click.option("--to", "to", type=click.Choice(FORMAT_NAMES), help="Target format (default: from the output path).")
@click.option("-o", "--output", required=True, type=click.Path(), help="Output path.")
@_from_option
@click.option("--no-verify", is_flag=True, help="Skip the numerical verification.")
@click.option("--allow-lossy", is_flag=True, help="Accept conversions that change results beyond float rounding.")
@click.option(
    "--strategy",
    type=click.Choice(["auto", "native", "decomposed"]),
    default="auto",
    show_default=True,
    help="Target's recurrent op, or elementary ops.",
)
@click.option("--opset", type=click.Choice(["7", "14"]), default=None, help="ONNX opset to write (default 14).")
@click.option(
    "--onnx-layout",
    type=click.Choice(["transpose", "attribute"]),
    default=None,
    help="How ONNX expresses a batch-major layer (default: transpose, which every runtime runs).",
)
@click.option(
    "--external-data/--no-external-data",
    default=None,
    help=(
        "ONNX: weights in NAME.onnx.data beside the model (default: as the source stores them, and always above 1 GiB)."
    ),
)
@click.option(
    "--compress-to-fp16",
    is_flag=True,
    default=None,
    help=(
        "OpenVINO: store weights as fp16; Core ML: fp16 weights and arithmetic, iOS17+ (lossy; the default keeps fp32)."
    ),
)
@click.option(
    "--emit-cpp", is_flag=True, default=None, help="DirectML: also write desc.cpp, C++ that fills the operator descs."
)
@click.option(
    "--seq-length",
    type=click.IntRange(min=1),
    default=None,
    help="DirectML: sequence length for a symbolic S (its tensors are static; default 7).",
)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=None, help="DirectML: batch size for a symbolic N (default 3)."
)
@click.option(
    "--minimum-deployment-target",
    type=click.Choice(["iOS15", "iOS16", "iOS17", "iOS18"]),
    default=None,
    help=(
        "Core ML: oldest OS the package must run on (default iOS18; linear_before_reset = 1 runs natively only "
        "from iOS18)."
    ),
)
@click.option(
    "--layout",
    type=click.Choice(["keep", "0", "1"]),
    default="keep",
    show_default=True,
    help="Interface layout of the output: keep the source's (drop-in), 0 = [S,N,I], 1 = [N,S,I].",
)
@_defaults_option
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the verification's random inputs."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@handle_errors
def convert(
    model,
    to,
    output,
    from_format,
    no_verify,
    allow_lossy,
    strategy,
    opset,
    onnx_layout,
    external_data,
    compress_to_fp16,
    emit_cpp,
    seq_length,
    batch_size,
    minimum_deployment_target,
    layout,
    activation_defaults,
    seed,
    as_json,
    quiet,
) -> None:
    """Convert the recurrent layers of MODEL to another format, and verify the result."""
    options = {"activation_defaults": activation_defaults}
    for key, value in (
        ("external_data", external_data),
        ("compress_to_fp16", compress_to_fp16),
        ("emit_cpp", emit_cpp),
        ("seq_length", seq_length),
        ("batch_size", batch_size),
        ("minimum_deployment_target", minimum_deployment_target),
    ):
        if value is not None:
            options[key] = value
    if opset is not None:
        options["opset"] = int(opset)
    if onnx_layout is not None:
        options["layout_encoding"] = onnx_layout
    result = gp.convert(
        model,
        output,
        to,
        from_format=from_format,
        verify=not no_verify,
        allow_lossy=allow_lossy,
        strategy=strategy,
        layout=None if layout == "keep" else int(layout),
        seed=seed,
        progress=None if quiet else Progress("gatepack convert"),
        **options,
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    if quiet:
        return
    click.echo(f"converted {model} -> {output} ({result.format}): {len(result.findings)} layer(s)")
    for name, findings in result.findings.items():
        for f in findings:
            if f.status.value != "exact" or f.warning:
                click.echo(
                    f"  {name}: {f.status.value} {f.feature}: {f.detail}"
                    + (f" [warning: {f.warning}]" if f.warning else "")
                )
    click.echo(result.verification.to_text() if result.verification else "verification skipped (--no-verify)")


@main.command()
@click.argument("model", type=click.Path())
@click.option(
    "--to", "targets", multiple=True, type=click.Choice(FORMAT_NAMES), help="Target format (repeatable; default: all)."
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text", show_default=True
)
@click.option("-o", "--output", type=click.Path(), help="Write the report to this file instead of stdout.")
@_from_option
@_defaults_option
@handle_errors
def report(model, targets, fmt, output, from_format, activation_defaults) -> None:
    """Per layer and target: what is exact, repacked, folded, decomposed, lossy or unsupported."""
    loaded = gp.load(model, from_format, activation_defaults=activation_defaults)
    text = gp.report(loaded, list(targets) or None).render(fmt)
    if output:
        from gatepack.converters.fileio import atomic_path, prepare_output

        prepare_output(output, REPORT_OUTPUT, [Path(model), *loaded.files])
        with atomic_path(Path(output)) as tmp:
            tmp.write_text(text if text.endswith("\n") else text + "\n")
    else:
        click.echo(text.rstrip("\n"))


@main.command()
@click.argument("source", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def verify(source, target, seed, as_json) -> None:
    """Run SOURCE and TARGET on the same random inputs and compare (exit 5 when they differ)."""
    result = gp.verify(source, target, seed=seed, progress=Progress("gatepack verify"))
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else result.to_text())
    if not result.passed:
        sys.exit(5)


@main.command()
@click.argument("artifact", type=click.Path())
@click.option(
    "--inputs", "inputs_path", required=True, type=click.Path(), help=".npz whose keys are the artifact's input names."
)
@click.option("-o", "--output", required=True, type=click.Path(), help=".npz to write, keyed by output names.")
@click.option(
    "--engine",
    type=click.Choice(["native", "numpy"]),
    default="native",
    show_default=True,
    help="native: the format's own runtime; numpy: gatepack's executor.",
)
@_from_option
@handle_errors
def run(artifact, inputs_path, output, engine, from_format) -> None:
    """Execute ARTIFACT on the tensors in --inputs and save its outputs."""
    import numpy as np

    from gatepack.converters.fileio import atomic_path, load_npz, prepare_output

    prepare_output(output, NPZ_OUTPUT, [Path(artifact), Path(inputs_path)])
    inputs = load_npz(inputs_path, allowed=gp.input_names(artifact, format=from_format))
    outputs = gp.run(artifact, inputs, engine=engine, format=from_format)
    with atomic_path(Path(output)) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **outputs)
    click.echo(f"wrote {output}: " + ", ".join(f"{k} {list(v.shape)}" for k, v in outputs.items()))


@main.command()
@handle_errors
def formats() -> None:
    """What each format reads and writes."""
    click.echo(f"{'format':<9} {'status':<16} {'artifact':<26} runs here on")
    for info in FORMATS.values():
        status = "reads, writes" if info.implemented else "not yet"
        missing = f" [needs: pip install 'gatepack[{info.extra}]']" if not info.installed else ""
        click.echo(f"{info.name:<9} {status:<16} {info.artifact:<26} {info.runtime}{missing}")


if __name__ == "__main__":  # pragma: no cover
    main()

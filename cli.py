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
from gatepack.converters import ENGINES
from gatepack.converters.errors import GatepackError
from gatepack.converters.fileio import OutputKind, has_suffix
from gatepack.converters.progress import Progress
from gatepack.converters.registry import FORMATS, READERS, WRITERS, all_write_options  # light: no framework

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
    "--from", "from_format", type=click.Choice(READERS), help="Source format (default: from the path)."
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


def _write_option_flags(fn):
    """One CLI flag per write option of every format (``registry.WriteOption``), named by the option."""
    for option in reversed(list(all_write_options().values())):
        takers = [info.name for info in FORMATS.values() if option in info.write_options]
        text = option.help if option.help.startswith(tuple(takers)) else f"{', '.join(takers)}: {option.help}"
        if option.cli_type is bool:
            flag = f"{option.flag}/--no-{option.flag.removeprefix('--')}"
            fn = click.option(flag, option.name, default=None, help=text)(fn)
        else:
            kind = click.IntRange(min=1) if option.cli_type == "size" else click.Choice(list(option.cli_type))
            fn = click.option(option.flag, option.name, type=kind, default=None, help=text)(fn)
    return fn


@main.command()
@click.argument("model", type=click.Path())
@click.option("--to", "to", type=click.Choice(WRITERS), help="Target format (default: from the output path).")
@click.option("-o", "--output", required=True, type=click.Path(), help="Output path.")
@_from_option
@click.option("--no-verify", is_flag=True, help="Skip the numerical verification.")
@click.option("--allow-lossy", is_flag=True, help="Accept conversions that change results beyond float rounding.")
@_write_option_flags
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
    layout,
    activation_defaults,
    seed,
    as_json,
    quiet,
    **write_options,
) -> None:
    """Convert the recurrent layers of MODEL to another format, and verify the result."""
    from gatepack.converters.registry import check_name, detect

    options = all_write_options()
    given = {name: options[name].cli_convert(value) for name, value in write_options.items() if value is not None}
    target = check_name(to or detect(output))
    if "strategy" in given and given["strategy"] != "auto" and "strategy" not in target.option_names:
        raise gp.UsageError(
            f"--strategy {given['strategy']} does not apply to {target.title}, which has one way to write a layer",
            hint="strategies choose between a target's recurrent op and elementary ops (openvino, coreml)",
        )
    given = {k: v for k, v in given.items() if k in target.option_names or k != "strategy"}
    result = gp.convert(
        model,
        output,
        to,
        format=from_format,
        verify=not no_verify,
        allow_lossy=allow_lossy,
        layout=None if layout == "keep" else int(layout),
        seed=seed,
        progress=None if quiet else Progress("gatepack convert"),
        activation_defaults=activation_defaults,
        **given,
    )
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    elif not quiet:
        click.echo(result.to_text().replace("(verify=False)", "(--no-verify)"))


@main.command()
@click.argument("model", type=click.Path())
@click.option(
    "--to", "targets", multiple=True, type=click.Choice(WRITERS), help="Target format (repeatable; default: all)."
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
    type=click.Choice(ENGINES),
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
    click.echo(f"{'format':<9} {'status':<14} {'artifact':<26} runs here on")
    for info in FORMATS.values():
        status = ", ".join(word for word, on in (("reads", info.reads), ("writes", info.writes)) if on)
        missing = f" [needs: pip install 'gatepack[{info.extra}]']" if not info.installed else ""
        click.echo(f"{info.name:<9} {status:<14} {info.artifact:<26} {info.runtime}{missing}")
        if info.write_options:
            click.echo(f"{'':<9} options: {', '.join(o.flag for o in info.write_options)}")


if __name__ == "__main__":  # pragma: no cover
    main()

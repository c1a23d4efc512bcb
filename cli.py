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
from typing import Callable

import click

import gatepack as gp
from gatepack.converters import ENGINES, registry  # registry: light, no framework
from gatepack.converters.errors import GatepackError
from gatepack.converters.fileio import OutputKind, has_suffix
from gatepack.converters.progress import Progress
from gatepack.converters.registry import all_write_options

REPORT_FORMATS = {"text": (".txt",), "json": (".json",), "markdown": (".md", ".markdown"), "html": (".html", ".htm")}
REPORT_OUTPUT = OutputKind(
    "report (.txt, .md, .json, .html)", False, has_suffix(".txt", ".md", ".markdown", ".json", ".html", ".htm")
)
NPZ_OUTPUT = OutputKind(".npz file", False, has_suffix(".npz"))


class _Choice(click.Choice):
    """A choice whose error suggests the nearest choice to a mistyped value ("did you mean 'onnx'?")."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as err:
            import difflib

            text = str(value).lower() if not self.case_sensitive else str(value)
            choices = {(c.lower() if not self.case_sensitive else c): c for c in map(str, self.choices)}
            near = difflib.get_close_matches(text, list(choices), n=1, cutoff=0.6)
            if not near:
                raise
            self.fail(f"{err.message} Did you mean {choices[near[0]]!r}?", param, ctx)


def _report_format_of(output: str) -> str:
    """The report format an output path's suffix names (UsageError for another suffix)."""
    suffix = Path(output).suffix.lower()
    for fmt, suffixes in REPORT_FORMATS.items():
        if suffix in suffixes:
            return fmt
    raise gp.UsageError(
        f"{output}: cannot tell the report format from the suffix {suffix or '(none)'!r}",
        hint="name it .html, .md, .json or .txt, or pass --format",
    )


def _fail(message: str, code: int, as_json: bool = False, err: GatepackError | None = None) -> None:
    """One line on stderr; with ``--json`` also one JSON object on stdout (``error``, ``exit_code``, and
    the verification's numbers or the refusing findings when there are some)."""
    click.echo(f"gatepack: error: {message}", err=True)
    if as_json:
        payload: dict = {"error": " ".join(err.message.split()) if err is not None else message, "exit_code": code}
        if err is not None:
            payload["kind"] = type(err).__name__
            if err.hint:
                payload["hint"] = err.hint
            verification = getattr(err, "verification", None)
            if verification is not None:
                payload["verification"] = verification.to_json()
            findings = getattr(err, "findings", None)
            if findings:
                payload["findings"] = [f.to_json() for f in findings]
        click.echo(json.dumps(payload, indent=2))
    sys.exit(code)


def handle_errors(fn):
    """Turn gatepack errors into one-line messages and exit codes (tracebacks only with --debug); a
    command's ``--json`` gets its failure as JSON on stdout too."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = bool((click.get_current_context().obj or {}).get("debug"))
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except GatepackError as err:
            if debug:
                raise
            _fail(err.one_line(), err.exit_code, as_json, err)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as err:  # a bug: say so plainly
            if debug:
                raise
            _fail(
                f"internal error: {type(err).__name__}: {' '.join(str(err).split())[:300]} (rerun with --debug for "
                "a traceback)",
                1,
                as_json,
            )

    return wrapper


class _Commands(click.Group):
    """The command group; with ``--json`` on the command line, a usage error (an unknown option, a
    missing argument) is also one JSON object on stdout, as every other failure is."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv or not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, False, **extra)
        except click.ClickException as err:
            err.show()
            click.echo(json.dumps({"error": err.format_message(), "exit_code": err.exit_code, "kind": "UsageError"}))
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(gp.__version__, "--version", prog_name="gatepack", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """gatepack: move GRU, RNN and LSTM layers, and the models around them, between ONNX, OpenVINO,
    DirectML, Core ML, BNNS and LiteRT without silently breaking them, and prove every conversion numerically."""
    ctx.obj = {"debug": debug}


class _FormatChoice(_Choice):
    """A format name, one of ``names()`` (``registry.readers`` or ``registry.writers``) asked when the command
    runs, not when this module is imported: a format registered after start-up is a choice too."""

    def __init__(self, names: Callable[[], list[str]]) -> None:
        self._names = names
        super().__init__((), case_sensitive=False)

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._names())

    @choices.setter
    def choices(self, _given: object) -> None:  # click.Choice.__init__ assigns it; the registry decides
        pass


_from_option = click.option(
    "--from",
    "from_format",
    type=_FormatChoice(registry.readers),
    help="Source format (default: from the path).",
)
_defaults_option = click.option(
    "--activation-defaults",
    type=_Choice(["onnxruntime", "onnx"]),
    default="onnxruntime",
    show_default=True,
    help=(
        "Values for activation parameters a model leaves out (runtimes disagree for ThresholdedRelu, ScaledTanh, "
        "Affine)."
    ),
)


def _parse_input_shape(ctx, param, values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """``NAME=1,257,1`` (repeatable) -> {NAME: (1, 257, 1)}; a usage error names a malformed one."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in values:
        name, _, dims = text.rpartition("=")
        try:
            sizes = tuple(int(d) for d in dims.split(","))
        except ValueError:
            sizes = ()
        if not name or not sizes or min(sizes) < 1:
            raise click.BadParameter(f"{text!r} is not NAME=d1,d2,... with sizes >= 1 (e.g. input=1,512)")
        shapes[name] = sizes
    return shapes


def _parse_input_value(ctx, param, values: tuple[str, ...]) -> dict[str, object]:
    """``NAME=16000`` or ``NAME=1,2,3`` (repeatable) -> {NAME: 16000} / {NAME: [1, 2, 3]}; integers stay integers."""
    fixed: dict[str, object] = {}
    for text in values:
        name, _, numbers = text.partition("=")
        try:
            parsed = [float(n) if any(c in n.lower() for c in ".e") else int(n) for n in numbers.split(",")]
        except ValueError:
            parsed = []
        if not name or not parsed:
            raise click.BadParameter(f"{text!r} is not NAME=VALUE or NAME=v1,v2,... with numbers (e.g. sr=16000)")
        fixed[name] = parsed[0] if len(parsed) == 1 else parsed
    return fixed


def _input_value_flag(help: str):
    return click.option(
        "--input-value",
        "input_values",
        multiple=True,
        callback=_parse_input_value,
        metavar="NAME=VALUE",
        help=help,
    )


_input_value_option = _input_value_flag(
    "Specialise the model: input NAME becomes a constant of VALUE (a number, or v1,v2,... for a 1-D input) and "
    "what depends on it is folded (an If it decides becomes its branch); the artifact no longer takes NAME "
    "(repeatable; ONNX whole models)."
)


def _quantize_options(fn):
    """--quantize-weights and --quantize-block-size (convert and report take them alike); the targets they name are
    the registration records' (``quantizes_weights``, ``model_weights``)."""
    holders = ", ".join(name for name, info in registry.FORMATS.items() if info.quantizes_weights is not None)
    scope_holders = ", ".join(name for name, info in registry.FORMATS.items() if info.model_weights)
    fn = click.option(
        "--quantize-weights-scope",
        type=_Choice(["layers", "model"]),
        default=None,
        help="With --quantize-weights: 'layers' (default) quantizes the recurrent layers' W and R; 'model' also a "
        f"whole model's MatMul/Gemm/Conv/Gather weights of 2048 elements or more ({scope_holders}).",
    )(fn)
    fn = click.option(
        "--quantize-block-size",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="With --quantize-weights: one scale per block of N consecutive columns of a row instead of per row "
        "(N divides the input and hidden sizes; ONNX opset 21, OpenVINO grouped).",
    )(fn)
    return click.option(
        "--quantize-weights",
        type=_Choice(["int8", "int4"]),
        default=None,
        help="Quantize the recurrent layers' W and R per output channel, symmetric (lossy, accepted by this option; "
        f"{holders}; int4 in ONNX needs opset 21 or onnxruntime's contrib DequantizeLinear).",
    )(fn)


def _verification_inputs_options(fn):
    """--input-shape (repeatable), --inputs, --state (repeatable) and --frames: the whole-model verification
    inputs a user fixes, and a streaming model's consecutive calls."""
    fn = click.option(
        "--frames",
        type=click.IntRange(min=1),
        help="Verify a streaming model over this many consecutive calls, each feeding its state outputs back "
        "(default for convert: 32 when state pairs are found; --inputs may hold a sequence of frames).",
    )(fn)
    fn = click.option(
        "--state",
        "states",
        multiple=True,
        metavar="IN=OUT",
        help="A state pair of a streaming model: output OUT feeds input IN on the next call (repeatable; gives or "
        "corrects the pairs gatepack finds by names and recurrent wiring).",
    )(fn)
    fn = click.option(
        "--inputs",
        "inputs_path",
        type=click.Path(),
        help="Verify on your own data: an .npz keyed by the model's input names (the others are drawn).",
    )(fn)
    return click.option(
        "--input-shape",
        "input_shapes",
        multiple=True,
        callback=_parse_input_shape,
        metavar="NAME=DIMS",
        help="Fix an input's shape for verification, e.g. input=1,512 (repeatable; symbolic dimensions it names "
        "take these sizes in every input).",
    )(fn)


def _one_output(option: str | None, argument: str | None) -> str:
    """The output path, from ``-o`` or the argument after MODEL (not two different ones)."""
    if option and argument and option != argument:
        raise click.UsageError(f"two outputs given: -o {option} and {argument}; give one")
    output = option or argument
    if not output:
        raise click.UsageError("no output: gatepack convert MODEL -o OUTPUT (or MODEL OUTPUT)")
    return output


def _given_inputs(inputs_path: str | None) -> dict:
    from gatepack.converters.fileio import load_npz

    return load_npz(inputs_path) if inputs_path else {}


_layers_only_option = click.option(
    "--layers-only",
    is_flag=True,
    help=(
        "Write the recurrent layers alone, each with its own inputs and outputs, when the model has other operators "
        "(a format that holds layers only refuses such a model otherwise; one that keeps the whole model keeps it "
        "unless asked: gatepack report says which does which)."
    ),
)


@main.command()
@click.argument("model", type=click.Path())
@_from_option
@_defaults_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (errors too).")
@handle_errors
def inspect(model: str, from_format: str | None, activation_defaults: str, as_json: bool) -> None:
    """A whole model's own inputs and outputs (and a streaming model's state pairs), then the recurrent layers of
    MODEL: attributes, shapes, parameters."""
    from gatepack.converters.inspection import describe_json, describe_text

    loaded = gp.load(model, from_format, activation_defaults=activation_defaults)
    pairs = gp.state_pairs(loaded)
    if pairs:
        loaded.meta["state_pairs"] = [p.to_json() for p in pairs]
    click.echo(json.dumps(describe_json(loaded), indent=2) if as_json else describe_text(loaded))


def _write_option_flags(fn):
    """One CLI flag per write option of every format (``registry.WriteOption``), named by the option."""
    for option in reversed(list(all_write_options().values())):
        takers = registry.takers(option.name)
        text = option.help if option.help.startswith(tuple(takers)) else f"{', '.join(takers)}: {option.help}"
        if option.cli_type is bool:
            flag = f"{option.flag}/--no-{option.flag.removeprefix('--')}"
            fn = click.option(flag, option.name, default=None, help=text)(fn)
        else:
            kind = (
                click.IntRange(min=1)
                if option.cli_type == "size"
                else _Choice(list(option.cli_type), case_sensitive=not option.any_case)
            )
            fn = click.option(option.flag, option.name, type=kind, default=None, help=text)(fn)
    return fn


def _check_flags_apply(target, given: dict) -> None:
    """UsageError naming, by their CLI flags, the write options given that ``target``'s writer does not take
    (the API's check would name its keyword arguments)."""
    options = all_write_options()
    foreign = [options[name].flag for name in given if name not in target.option_names]
    if foreign:
        takes = ", ".join(o.flag for o in target.write_options) or "no options"
        raise gp.UsageError(
            f"{', '.join(foreign)} {'does' if len(foreign) == 1 else 'do'} not apply to the {target.name} target "
            f"({target.title})",
            hint=f"{target.name} takes {takes}; gatepack formats lists each format's options",
        )


def _target_write_options(output: str, to: str | None, flags: dict) -> dict:
    """The write options the flags given set, as the API takes them, for the target (``--to``, else from the output
    path); UsageError naming a flag that does not apply to it (``--strategy auto`` applies to every target)."""
    from gatepack.converters.registry import detect

    options = all_write_options()
    given = {name: options[name].cli_convert(value) for name, value in flags.items() if value is not None}
    target = registry.check_name(to or detect(output, writing=True))
    if "strategy" in given and given["strategy"] != "auto" and "strategy" not in target.option_names:
        raise gp.UsageError(
            f"--strategy {given['strategy']} does not apply to {target.title}, which has one way to write a layer",
            hint="strategies choose between a target's recurrent op and elementary ops "
            f"({', '.join(registry.takers('strategy'))})",
        )
    given = {k: v for k, v in given.items() if k in target.option_names or k != "strategy"}
    _check_flags_apply(target, given)
    return given


@main.command()
@click.argument("model", type=click.Path())
@click.argument("output_argument", metavar="[OUTPUT]", required=False, type=click.Path())
@click.option(
    "--to",
    "to",
    type=_FormatChoice(registry.writers),
    help="Target format (default: from the output path).",
)
@click.option("-o", "--output", type=click.Path(), help="Output path (or give it after MODEL).")
@_from_option
@click.option("--no-verify", is_flag=True, help="Skip the numerical verification.")
@click.option("--allow-lossy", is_flag=True, help="Accept conversions that change results beyond float rounding.")
@click.option(
    "--dequantize",
    is_flag=True,
    help="Write quantized weights as their float values where the target cannot hold the integers (lossy).",
)
@click.option(
    "--max-error",
    type=click.FloatRange(min=0),
    default=None,
    help="With --dequantize: the largest error accepted against the quantized source (default: the source's own "
    "quantization noise); with --quantize-weights: against the float source (default: the quantization's own error).",
)
@_quantize_options
@_write_option_flags
@click.option(
    "--layout",
    type=_Choice(["keep", "0", "1"]),
    default="keep",
    show_default=True,
    help="Interface layout of the output: keep the source's (drop-in), 0 = [S,N,I], 1 = [N,S,I].",
)
@_layers_only_option
@_defaults_option
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the verification's random inputs."
)
@_verification_inputs_options
@_input_value_option
@click.option("--json", "as_json", is_flag=True, help="Print the result (or the error) as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@handle_errors
def convert(
    model,
    output_argument,
    to,
    output,
    from_format,
    no_verify,
    allow_lossy,
    dequantize,
    max_error,
    quantize_weights,
    quantize_block_size,
    quantize_weights_scope,
    layout,
    layers_only,
    activation_defaults,
    seed,
    input_shapes,
    inputs_path,
    states,
    frames,
    input_values,
    as_json,
    quiet,
    **write_options,
) -> None:
    """Convert MODEL (its recurrent layers, or the whole model where the target holds it) to another format
    and verify the result: gatepack convert MODEL -o OUTPUT (or MODEL OUTPUT)."""
    output = _one_output(output, output_argument)
    given = _target_write_options(output, to, write_options)
    result = gp.convert(
        model,
        output,
        to,
        format=from_format,
        verify=not no_verify,
        allow_lossy=allow_lossy,
        dequantize=dequantize,
        max_error=max_error,
        quantize_weights=quantize_weights,
        quantize_block_size=quantize_block_size,
        quantize_weights_scope=quantize_weights_scope,
        layout=None if layout == "keep" else int(layout),
        layers_only=layers_only,
        seed=seed,
        input_shapes=input_shapes,
        inputs=_given_inputs(inputs_path),
        states=states,
        frames=frames,
        input_values=input_values,
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
    "--to",
    "targets",
    multiple=True,
    type=_FormatChoice(registry.writers),
    help="Target format (repeatable; default: all).",
)
@click.option(
    "--format",
    "fmt",
    type=_Choice(list(REPORT_FORMATS)),
    help="Report format (default: from the -o suffix: .html, .md, .json, .txt; text on stdout).",
)
@click.option("-o", "--output", type=click.Path(), help="Write the report to this file instead of stdout.")
@_from_option
@_layers_only_option
@_defaults_option
@click.option(
    "--for",
    "runtime",
    type=_Choice(list(all_write_options()["runtime"].cli_type), case_sensitive=False),
    help=f"{', '.join(registry.takers('runtime'))}: " + all_write_options()["runtime"].help,
)
@click.option("--stateful", is_flag=True, help=all_write_options()["stateful"].help)
@click.option("--state", "states", multiple=True, metavar="IN=OUT", help="A streaming model's state pair (repeatable).")
@_input_value_option
@_quantize_options
@click.option("--json", "as_json", is_flag=True, help="The report as JSON (same as --format json; errors too).")
@handle_errors
def report(
    model,
    targets,
    fmt,
    output,
    from_format,
    layers_only,
    activation_defaults,
    runtime,
    stateful,
    states,
    input_values,
    quantize_weights,
    quantize_block_size,
    quantize_weights_scope,
    as_json,
) -> None:
    """Per layer and target: what is exact, repacked, folded, decomposed, lossy or unsupported (with
    --quantize-weights, also each target's bits per weight, sizes and measured error per output)."""
    if as_json and fmt not in (None, "json"):
        raise gp.UsageError(f"--json and --format {fmt} ask for two formats")
    loaded = gp.load(model, from_format, activation_defaults=activation_defaults)
    if output:
        from gatepack.converters.fileio import atomic_path, prepare_output

        prepare_output(output, REPORT_OUTPUT, [Path(model), *loaded.files])
    fmt = "json" if as_json else fmt or (_report_format_of(output) if output else "text")
    options = {} if runtime is None else {"runtime": runtime.lower()}
    takers = registry.takers("runtime")
    if options and targets and not set(takers) & set(targets):
        applies = f"--for {runtime} applies to the {' or '.join(takers)} target"
        raise gp.UsageError(applies, hint=f"add --to {takers[0]}")
    report_targets = list(targets) or (takers if options else None)
    if stateful:
        options["stateful"] = True
        report_targets = report_targets or registry.takers("stateful")
    found = gp.report(
        loaded,
        report_targets,
        layers_only=layers_only,
        states=states,
        input_values=input_values,
        quantize_weights=quantize_weights,
        quantize_block_size=quantize_block_size,
        quantize_weights_scope=quantize_weights_scope,
        **options,
    )
    text = found.render(fmt)
    if output:
        with atomic_path(Path(output)) as tmp:
            tmp.write_text(text if text.endswith("\n") else text + "\n")
    else:
        click.echo(text.rstrip("\n"))


@main.command()
@click.argument("source", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--atol",
    type=click.FloatRange(min=0),
    help="Absolute tolerance (default per dtype: float32 1e-5, float16 1e-2, float64 1e-7).",
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0),
    help="Relative tolerance: pass when |a - b| <= atol + rtol * |b| (default: float32 1e-4, float16 1e-2, "
    "float64 1e-6).",
)
@_verification_inputs_options
@_input_value_flag(
    "An input TARGET holds as a constant (convert --input-value): SOURCE is fed VALUE, TARGET is not fed it "
    "(repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (errors too).")
@handle_errors
def verify(source, target, seed, atol, rtol, input_shapes, inputs_path, states, frames, input_values, as_json) -> None:
    """Run SOURCE and TARGET on the same inputs and compare (exit 5 when they differ or the check is incomplete)."""
    result = gp.verify(
        source,
        target,
        seed=seed,
        atol=atol,
        rtol=rtol,
        progress=Progress("gatepack verify"),
        input_shapes=input_shapes,
        inputs=_given_inputs(inputs_path),
        states=states,
        frames=frames,
        input_values=input_values,
    )
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
    type=_Choice(ENGINES),
    default="auto",
    show_default=True,
    help="native: the format's own runtime; numpy: gatepack's executor of its semantics; auto: native where its "
    "runtime runs here, else numpy (the line written says which ran).",
)
@click.option(
    "--directml-shapes",
    is_flag=True,
    help="directml: feed and return the DxDispatch resources, by resource name in the descs' 4-D shapes "
    "(X [1,S,N,I], Y_h [1,D,N,H]) instead of the source's tensors (X [S,N,I], Y_h [D,N,H]).",
)
@_from_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (errors too).")
@handle_errors
def run(artifact, inputs_path, output, engine, directml_shapes, from_format, as_json) -> None:
    """Execute ARTIFACT on the tensors in --inputs and save its outputs (named and shaped as the source's)."""
    from gatepack.converters.fileio import atomic_path, load_npz, prepare_output, write_npz

    prepare_output(output, NPZ_OUTPUT, [Path(artifact), Path(inputs_path)])
    # other arrays beside the inputs (expected outputs) are left unread; a state a layer holds as a constant is read,
    # so that run refuses it on every format (it names no input)
    try:
        layers = gp.load(artifact, format=from_format).layers
    except gp.NoRecurrentLayerError:  # a program a format's own interpreter runs
        layers = []
    held = [getattr(lay.interface, role) for lay in layers for role in lay.constants]
    inputs = load_npz(inputs_path, allowed=gp.input_names(artifact, format=from_format) + held)
    if engine == "auto":
        from gatepack.converters import engine_for
        from gatepack.converters.registry import detect

        engine = engine_for(from_format or detect(artifact))
    outputs = gp.run(artifact, inputs, engine=engine, format=from_format, directml_shapes=directml_shapes)
    with atomic_path(Path(output)) as tmp:
        with open(tmp, "wb") as handle:
            write_npz(handle, outputs)
    if as_json:
        shapes = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in outputs.items()}
        click.echo(json.dumps({"output": str(output), "engine": engine, "outputs": shapes}, indent=2))
    else:
        ran = "its own runtime" if engine == "native" else "gatepack's executor of its semantics"
        listed = ", ".join(f"{k} {list(v.shape)}" for k, v in outputs.items())
        click.echo(f"wrote {output} (ran on {ran}, --engine {engine}): {listed}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@handle_errors
def formats(as_json: bool) -> None:
    """What each format reads and writes, and what its own recurrent op takes of each cell."""
    from gatepack.converters.capabilities import lacking_becomes, op_facts, records

    def takes(name: str) -> dict:
        caps = records().get(name)
        if caps is None:
            return {}
        return {
            cell.value: {
                "op": op.name,
                **{k: v for k, v in op_facts(op, cell).items() if v},
                "lacking": lacking_becomes(caps, cell),
                **(
                    {"in doubt": "avoided by --strategy auto"}
                    if caps.elementary and op_facts(op, cell)["known doubts"]
                    else {}
                ),
            }
            for cell, op in caps.ops.items()
        }

    if as_json:
        described = [
            {
                "name": info.name,
                "reads": info.reads,
                "writes": info.writes,
                "artifact": info.artifact,
                "runtime": info.runtime,
                "installed": info.installed,
                "extra": info.extra,
                "options": [o.flag for o in info.write_options],
                "cells": takes(info.name),
            }
            for info in registry.FORMATS.values()
        ]
        click.echo(json.dumps(described, indent=2))
        return
    click.echo(f"{'format':<9} {'status':<14} {'artifact':<26} runs here on")
    for info in registry.FORMATS.values():
        status = ", ".join(word for word, on in (("reads", info.reads), ("writes", info.writes)) if on)
        missing = f" [needs: pip install 'gatepack[{info.extra}]']" if not info.installed else ""
        click.echo(f"{info.name:<9} {status:<14} {info.artifact:<26} {info.runtime}{missing}")
        if info.write_options:
            click.echo(f"{'':<9} options: {', '.join(o.flag for o in info.write_options)}")
        for cell, facts in takes(info.name).items():
            shown = "; ".join(f"{k} {v}" for k, v in facts.items() if k not in ("op", "lacking", "in doubt"))
            avoided = f"; in doubt: {facts['in doubt']}" if "in doubt" in facts else ""
            click.echo(f"{'':<9} {cell}: {facts['op']} ({shown}); what it lacks: {facts['lacking']}{avoided}")


if __name__ == "__main__":  # pragma: no cover
    main()

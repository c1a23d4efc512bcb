"""What a format's registration record holds (docs/design.md, "Adding a format"): the types, and the write options
several formats share.

Each format's package has a ``registration`` module (``converters/formats/NAME/registration.py``) whose ``INFO`` is a
``FormatInfo``: plain data the CLI reads at start-up (names, how a path is recognised, its write options, its
capability record, the sources it keeps whole, how its framework is imported), so the module imports nothing heavy
and never the format's implementation (the package's ``__init__``, whose ``IMPLEMENTATION`` is a
``FormatImplementation``). ``converters.registry`` collects the records; no other module names a format.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

from gatepack.converters.errors import RuntimeFailure, UsageError
from gatepack.converters.fileio import OutputKind

if TYPE_CHECKING:
    import numpy as np

    from gatepack.converters.analyses import GraphAnalyses
    from gatepack.converters.capabilities import Capabilities
    from gatepack.converters.findings import Finding
    from gatepack.converters.model import Model
    from gatepack.schemas.cells import Cell
    from gatepack.schemas.layer import RecurrentLayer


@dataclass(frozen=True)
class WriteOption:
    """A typed option of a format's writer: its API keyword, what values it accepts, its CLI flag.

    ``accepts`` decides whether a value is valid; ``expected`` says what is (for the error). The CLI
    builds its flag from ``flag``, ``cli_type`` (a click type, or ``bool`` for an on/off flag) and ``help``.
    """

    name: str
    expected: str
    accepts: Callable[[Any], bool]
    flag: str
    help: str
    cli_type: Any = None  # click type or choices; bool: --flag/--no-flag
    cli_convert: Callable[[Any], Any] = lambda value: value  # CLI value -> API value
    any_case: bool = False  # the CLI takes the choices in any case (the API too: ``accepts`` decides)

    def check(self, value: Any) -> None:
        """UsageError naming the option and the value unless ``accepts(value)``."""
        if not self.accepts(value):
            raise UsageError(f"option {self.name}={value!r} is not {self.expected}")


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def one_of(*choices: Any) -> Callable[[Any], bool]:
    return lambda value: not isinstance(value, bool) and value in choices


def size_or_sizes(value: Any) -> bool:
    """One positive size, or a positive size per layer name (DirectML's static S and N)."""

    def size(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    return size(value) or (isinstance(value, dict) and all(isinstance(k, str) and size(v) for k, v in value.items()))


STRATEGIES = ("auto", "native", "decomposed")
STRATEGY = WriteOption(
    "strategy",
    f"one of {', '.join(STRATEGIES)}",
    one_of(*STRATEGIES),
    "--strategy",
    "the target's recurrent op, or elementary ops (auto: the op where it computes exactly what the source does).",
    STRATEGIES,
)
COMPRESS_TO_FP16 = WriteOption(
    "compress_to_fp16",
    "true or false",
    is_bool,
    "--compress-to-fp16",
    "openvino: store weights as fp16; coreml: fp16 weights and arithmetic, iOS17+ (lossy; default: fp32).",
    bool,
)
STATEFUL = WriteOption(
    "stateful",
    "true or false",
    is_bool,
    "--stateful",
    "keep a streaming model's states in the runtime: openvino variables (ReadValue/Assign), coreml states "
    "(iOS18, fp16: lossy), litert variable tensors (a layer's own initial and final states, or a whole streaming "
    "model's state pairs); the artifact takes the frame inputs only (state pairs: found, or --state IN=OUT).",
    bool,
)
SEQ_LENGTH = WriteOption(
    "seq_length",
    "a positive size or a size per layer name",
    size_or_sizes,
    "--seq-length",
    "sequence length for a symbolic S (directml; litert's unrolled form: its tensors are static; default 7).",
    "size",
)
BATCH_SIZE = WriteOption(
    "batch_size",
    "a positive size or a size per layer name",
    size_or_sizes,
    "--batch-size",
    "batch size for a symbolic N (directml, litert; default 3).",
    "size",
)


def _no_runtime(path: str | Path, inputs: dict) -> dict:
    raise RuntimeFailure(f"{path}: this format has no runtime here; use --engine numpy")


def _no_layer_runtime(layer: "RecurrentLayer", feed: dict) -> dict:
    raise RuntimeFailure(f"layer {layer.name!r}: this format has no runtime here")


def _computed_as_stored(layer: "RecurrentLayer") -> str:
    return layer.interface.dtype


def _no_whole_model_finding(model: "Model") -> "Finding | None":
    return None


def _as_given(model: "Model", options: dict) -> dict:
    return options


@dataclass(frozen=True)
class FormatImplementation:
    """What a format module provides, as its module-level ``IMPLEMENTATION``.

    * ``read(path, **read_options) -> Model`` — every format;
    * ``write(model, path, **write_options)`` (atomic) and ``check(layer, **write_options) ->
      list[Finding]`` (what writing the layer does to each feature) — formats that are written;
    * ``run_native(path, inputs) -> outputs``: the artifact on its own runtime where one runs here;
    * ``run_layer_native(layer, feed) -> outputs``: one layer read from disk, on its own runtime, or
      — where none runs here — on gatepack's executor of the format's own semantics;
    * ``run_numpy(path, inputs)``: the artifact on that format-semantics executor (None: ``run
      --engine numpy`` uses the canonical executor);
    * ``graph_inputs(path) -> [(name, dtype, dims)]``: the inputs of a whole-model artifact (None: the
      layers' interface tensors);
    * ``graph_outputs(path) -> [(name, dtype, dims)]``: the outputs of a whole-model artifact, dtype and dims
      None where undeclared (None: the layers' interface tensors);
    * ``whole_model_finding(model)``: what the format does with the operators around the layers
      (None from the default: it writes the layers only);
    * ``compute_dtype(layer)``: the precision its runtime computes a layer read from disk in;
    * ``run_whole(path, inputs)``: a whole-model artifact on the runtime verification judges it by (None:
      ``run_native``; Core ML: gatepack's MIL interpreter, no Core ML runtime running here);
    * ``run_onnx_node(layer, feed)``: a layer's ONNX node as this format's runtime computes it when
      onnxruntime hands the node to it (an execution provider), on gatepack's executor of its semantics
      (None: no such provider);
    * ``open_session(path) -> run(inputs) -> outputs``: the artifact loaded once on the runtime
      ``run_whole``/``run_native`` use, for many calls in a row (streaming verification; None: each call
      loads it). A stateful artifact's session holds its states across calls and returns them under their
      state outputs' names.
    * ``runnable_twin(model, path) -> layers``: where the runtime refuses a whole model as it is, its exact twin
      written to ``path`` (NAME plus the format's suffix), each node it refuses rewritten as nodes it runs (ONNX: a
      ``layout = 1`` node as a layout-0 node between Transposes), returning the layers rewritten ([]: none needed,
      nothing written; None: the format has no twin). Verification proves each rewritten layer against gatepack's
      executor of the original and runs the twin in the source's place, saying so.
    * ``jittered(path, out, seed, crossing) -> int``: the artifact at ``path`` written to ``out`` one arithmetic away:
      ``crossing`` 0, each run-time quantizer's float input (and each recurrent layer's X) moved by one float32 step,
      up or down as ``seed`` draws; ``crossing`` K > 0, in each run-time quantizer its values within K float32 steps
      of a rounding boundary moved across it. Returns how many quantizers it moved (0: none, nothing
      written; None: the format has no run-time quantizers). Verification measures with it how far the source's own
      arithmetic before its quantizers moves its outputs (``converters.quantizer_steps``).
    * ``open_executing_layers(model) -> run(inputs) -> outputs``: the whole model at ``model.path`` with its
      recurrent layers computed by gatepack's executor from ``model.layers`` (which may differ from the file's: an
      int8 twin) and every other operator on the runtime, made ready once for many calls (None: it cannot; ONNX:
      ``formats.onnx.executed``).
    * ``settle_options(model, write_options) -> write_options``: the options with what the format settles for the
      whole artifact when the user leaves it out (Core ML: the lowest deployment target that expresses the model),
      so that every layer's findings and the writer see one value (default: as given).
    * ``whole_layer_findings(model, layer) -> [Finding]``: the findings of a layer written inside a whole model that
      replace its ``check``'s, where the whole model decides them (LiteRT: its S and N, the static sizes its X has in
      the translation; a ``model`` finding of its own, which replaces the model's, for a layer the translation does
      not write; None: none).
    * ``graph_analyses``: what verification, the streaming checks and ``--input-value`` read from (or do to) a whole
      model's graph (``converters.analyses.GraphAnalyses``; None: none, as for every format but ONNX).
    """

    read: Callable[..., "Model"]
    write: Callable[..., None] | None = None
    check: Callable[..., "list[Finding]"] | None = None
    run_native: Callable[[Any, dict], dict] = _no_runtime
    run_layer_native: Callable[["RecurrentLayer", dict], dict] = _no_layer_runtime
    run_numpy: Callable[[Any, dict], dict] | None = None
    graph_inputs: Callable[[Any], "list[tuple[str, np.dtype, list]]"] | None = None
    graph_outputs: Callable[[Any], "Sequence[tuple[str, np.dtype | None, list | None]]"] | None = None
    whole_model_finding: Callable[["Model"], "Finding | None"] = _no_whole_model_finding
    compute_dtype: Callable[["RecurrentLayer"], str] = _computed_as_stored
    run_whole: Callable[[Any, dict], dict] | None = None
    run_onnx_node: Callable[["RecurrentLayer", dict], dict] | None = None
    open_session: Callable[[Any], Callable[[dict], dict]] | None = None
    settle_options: Callable[["Model", dict], dict] = _as_given
    runnable_twin: Callable[["Model", Path], "list[RecurrentLayer]"] | None = None
    jittered: Callable[[Path, Path, int, float], int] | None = None
    open_executing_layers: Callable[["Model"], Callable[[dict], dict]] | None = None
    whole_layer_findings: Callable[["Model", "RecurrentLayer"], "list[Finding]"] | None = None
    graph_analyses: "GraphAnalyses | None" = None


class WeightForm(NamedTuple):
    """How a format holds weights quantized as asked (``--quantize-weights``, ``converters.weight_quantization``):
    rows sharing one scale (``per_gate``: each gate block's H rows, else each row its own) and the run-time
    quantization of X and h its kernels add (``schemas.schemes``; '': none)."""

    per_gate: bool = False
    activations: str = ""

    def words(self) -> str:
        return "per gate block" if self.per_gate else "per output channel"

    def stored(self, gates: int) -> str:
        """The scales as the file stores them, for a cell of ``gates`` gate blocks: 'a float32 scale per row' or,
        per gate block, the value each row repeats (a tensor holding all G blocks: G distinct values; a tensor of one
        block stores it once, which the bits per weight count as one a row)."""
        if not self.per_gate:
            return "a float32 scale per row"
        return (
            f"a float32 scale per row, the H rows of a gate block repeating its one value: {gates} distinct values in "
            "a tensor of all its blocks, one value stored once in a tensor of one block, counted here as one a row"
        )


@dataclass(frozen=True)
class FormatInfo:
    """A format's registry entry (plain data; see the module docstring)."""

    name: str
    title: str
    artifact: str
    runtime: str  # where `--engine native` runs it here
    rank: int = 100  # its place in every list of formats (the CLI's choices, the report's columns), lowest first
    runs_here: bool = True  # its own runtime runs on this machine (False: `run` uses gatepack's executor)
    suffixes: tuple[str, ...] = ()  # path suffixes that name the format (lower case)
    markers: tuple[str, ...] = ()  # files whose presence in a directory names the format
    # the first bytes of a file (64 at most) tell that it is this format's whatever its name (LiteRT's TFL3)
    sniff: Callable[[bytes], bool] | None = None
    reads: bool = True
    writes: bool = True
    write_options: tuple[WriteOption, ...] = ()
    is_directory: bool = False  # the artifact is a directory rather than a file
    companions: tuple[str, ...] = ()  # suffixes of files that belong to the artifact (.bin beside .xml)
    recognise: Callable[[Path], bool] = field(default=lambda _path: False)  # an existing path is such an artifact
    interface_inputs: bool = True  # `run` takes the layers' interface tensors (False: the format's own shapes)
    # the cells its writer writes, by name (None: as its capability record says, ``writes_cell``)
    cells: tuple[str, ...] | None = None
    # what its writer's ops take, per cell (None: no record; a read-only format, or one that writes every field as
    # it is); ``variants``: the records of a write option's value, each with its label (ONNX --for directml)
    capabilities: "Capabilities | None" = None
    variants: tuple[tuple[str, "Capabilities"], ...] = ()
    # the source formats whose whole models (the operators around the layers too) its writer writes whole
    keeps_whole_from: tuple[str, ...] = ()
    # how its writer holds a layer's per-step mask (Keras masking) in a whole model (None: it does not)
    mask_held_by: str | None = None
    extra: str | None = None  # the pip extra that installs the framework this format needs (None: always installed)
    framework: str | None = None  # that framework's module
    module: str = ""  # the implementation module (default: gatepack.converters.formats.NAME)
    constant_form: str = "a constant"  # how its artifact holds an input the source holds as a constant
    # (format, how): the whole model for this format's runtime written as that other format instead, named in
    # the refusal of a whole model when that format keeps it whole
    whole_model_via: tuple[str, str] | None = None
    # --stateful holds the state pairs of a model written as layers (each a layer's initial state fed from its own
    # final state) in the artifact (LiteRT: the sequence ops' variable tensors), not only a whole model's
    stateful_layers: bool = False
    # what holds a whole model's state pairs with --stateful ('': it does not hold them)
    states_held_as: str = ""
    # the type a stateful artifact's runtime holds its states in between calls (Core ML states are fp16 only):
    # streaming verification compares at that type's tolerance, and at float32's otherwise
    held_state_dtype: str = "float32"
    # the run-time arithmetic of the quantized weights whose integers its writer keeps
    # (``QuantizedWeights.dynamic_activations``: a name of ``schemas.schemes``; ``FLOAT_ACTIVATIONS`` for integers
    # computed on in float): ``converters.quantization``'s holders; the others are written as floats, refused
    # without --dequantize
    holds_quantized: tuple[str, ...] = ()
    # how its writer holds weights quantized as asked (--quantize-weights; None: it does not)
    quantizes_weights: WeightForm | None = None
    # how its writer holds a whole model's other weights quantized (--quantize-weights-scope model): 'qdq' as the
    # model's own DequantizeLinear (OpenVINO: read through its ONNX frontend), 'constexpr' (Core ML's ops); '' it
    # does not, for the reason ``model_weights_refusal`` gives
    model_weights: str = ""
    model_weights_refusal: str = ""
    # its writer keeps a lookup table (palettized weights, ``PalettizedWeights``) as it is
    holds_lookup_tables: bool = False

    def writes_cell(self, cell: "Cell") -> bool:
        """Whether its writer writes ``cell``: named in ``cells``, else with an op of its own or its elementary form
        (``Capabilities.writes``); any other cell is refused before the format's module sees the layer."""
        if self.cells is not None:
            return cell.value in self.cells
        return self.capabilities is not None and self.capabilities.writes(cell)

    @property
    def installed(self) -> bool:
        """Whether the framework this format needs is importable (checked without importing it)."""
        return self.framework is None or importlib.util.find_spec(self.framework) is not None

    @property
    def output_kind(self) -> OutputKind:
        """What an output of this format is: an existing path is replaced only if ``recognise`` says so."""
        return OutputKind(self.title, self.is_directory, self.recognise, self.companions)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.write_options)

    def check_options(self, options: dict) -> None:
        """UsageError for an option this format's writer does not take (naming it) or a value of the wrong type."""
        check_options(options, [self])


def check_options(options: dict, infos: "Sequence[FormatInfo]") -> None:
    """UsageError naming an option none of ``infos`` takes, or a value its option does not accept."""
    known = {o.name: o for info in infos for o in info.write_options}
    unknown = sorted(set(options) - set(known))
    if unknown:
        names = infos[0].name if len(infos) == 1 else ", ".join(info.name for info in infos)
        raise UsageError(
            f"option(s) {unknown} do not apply to the {names} format{'s' if len(infos) > 1 else ''}",
            hint=f"{'it takes' if len(infos) == 1 else 'they take'} {list(known) or 'none'}",
        )
    for name, value in options.items():
        known[name].check(value)

"""The formats gatepack knows: one registration point per format (docs/design.md, "Adding a format").

A format is two things:

* a ``FormatInfo`` entry in ``FORMATS`` (this module, imported by the CLI at start-up, so it holds
  only plain data): its names, how a path is recognised (suffixes, marker files, a content check),
  whether it is read and/or written, its typed write options, and the pip extra it needs;
* a module ``converters/formats/NAME.py`` whose ``IMPLEMENTATION`` is a ``FormatImplementation``:
  ``read`` (every format), ``write`` and ``check`` (formats that are written), and optional hooks
  with defaults (its runtime, its own executor, its graph inputs, its whole-model finding, the
  precision its runtime computes in). Shared modules call these fields; they never probe a module
  for attributes.

Modules are imported only when a command needs them, so the CLI starts fast. A read-only format
(e.g. a training framework's weights) is an entry with ``writes=False`` and an implementation
without ``write``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gatepack.converters.errors import InputError, RuntimeFailure, UsageError
from gatepack.converters.fileio import OutputKind, has_identifier, has_markers, starts_like_protobuf, starts_with

if TYPE_CHECKING:
    import numpy as np

    from gatepack.converters.analyses import GraphAnalyses
    from gatepack.converters.findings import Finding
    from gatepack.converters.model import Model
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


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _one_of(*choices: Any) -> Callable[[Any], bool]:
    return lambda value: not isinstance(value, bool) and value in choices


def _size_or_sizes(value: Any) -> bool:
    """One positive size, or a positive size per layer name (DirectML's static S and N)."""

    def size(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    return size(value) or (isinstance(value, dict) and all(isinstance(k, str) and size(v) for k, v in value.items()))


STRATEGIES = ("auto", "native", "decomposed")
STRATEGY = WriteOption(
    "strategy",
    f"one of {', '.join(STRATEGIES)}",
    _one_of(*STRATEGIES),
    "--strategy",
    "the target's recurrent op, or elementary ops (auto: the op where it computes exactly what the source does).",
    STRATEGIES,
)
COMPRESS_TO_FP16 = WriteOption(
    "compress_to_fp16",
    "true or false",
    _is_bool,
    "--compress-to-fp16",
    "openvino: store weights as fp16; coreml: fp16 weights and arithmetic, iOS17+ (lossy; default: fp32).",
    bool,
)
STATEFUL = WriteOption(
    "stateful",
    "true or false",
    _is_bool,
    "--stateful",
    "keep a streaming model's states in the runtime: openvino variables (ReadValue/Assign), coreml states "
    "(iOS18, fp16: lossy), litert variable tensors (a layer's own initial and final states); the artifact takes "
    "the frame inputs only (state pairs: found, or --state IN=OUT).",
    bool,
)
RUNTIMES = ("onnxruntime", "directml")


def _runtime(value: Any) -> bool:
    return isinstance(value, str) and value.lower() in RUNTIMES


def runtime_name(value: str | None) -> str:
    """The runtime an ONNX artifact is written for, in lower case (None: onnxruntime's CPU provider)."""
    return "onnxruntime" if value is None else value.lower()


ONNX_OPTIONS = (
    WriteOption(
        "opset",
        "7, 14 or 21",
        _one_of(7, 14, 21),
        "--opset",
        "opset to write (default 14, 21 for 4-bit or per-block quantized weights; a whole model keeps its own).",
        ("7", "14", "21"),
        int,
    ),
    WriteOption(
        "layout_encoding",
        "transpose or attribute",
        _one_of("transpose", "attribute"),
        "--onnx-layout",
        "how a batch-major layer is expressed (default: transpose, which every runtime runs).",
        ("transpose", "attribute"),
    ),
    WriteOption(
        "external_data",
        "true or false",
        _is_bool,
        "--external-data",
        "weights in NAME.onnx.data beside the model (default: as the source stores them; always above 1 GiB).",
        bool,
    ),
    WriteOption(
        "runtime",
        f"one of {', '.join(RUNTIMES)} (any case)",
        _runtime,
        "--for",
        "the runtime the model is for (default onnxruntime): directml writes every recurrent node in a form "
        "onnxruntime's DirectML provider computes as ONNX specifies (elementary ops where it would not).",
        RUNTIMES,
        str.lower,
        any_case=True,
    ),
)
SEQ_LENGTH = WriteOption(
    "seq_length",
    "a positive size or a size per layer name",
    _size_or_sizes,
    "--seq-length",
    "sequence length for a symbolic S (directml; litert's unrolled form: its tensors are static; default 7).",
    "size",
)
BATCH_SIZE = WriteOption(
    "batch_size",
    "a positive size or a size per layer name",
    _size_or_sizes,
    "--batch-size",
    "batch size for a symbolic N (directml, litert; default 3).",
    "size",
)
DIRECTML_OPTIONS = (
    WriteOption(
        "emit_cpp",
        "true or false",
        _is_bool,
        "--emit-cpp",
        "also write desc.cpp, C++ that fills the operator descs.",
        bool,
    ),
    SEQ_LENGTH,
    BATCH_SIZE,
)
CORE_ML_TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18")
MINIMUM_DEPLOYMENT_TARGET = WriteOption(
    "minimum_deployment_target",
    f"one of {', '.join(CORE_ML_TARGETS)}",
    _one_of(*CORE_ML_TARGETS),
    "--minimum-deployment-target",
    "oldest OS the package must run on (default: the lowest that expresses the model exactly, which the report "
    "names; fp16 packages need iOS17, states and the native reset_after iOS18).",
    CORE_ML_TARGETS,
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
    * ``settle_options(model, write_options) -> write_options``: the options with what the format settles for the
      whole artifact when the user leaves it out (Core ML: the lowest deployment target that expresses the model),
      so that every layer's findings and the writer see one value (default: as given).
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
    graph_analyses: "GraphAnalyses | None" = None


@dataclass(frozen=True)
class FormatInfo:
    """A format's registry entry (plain data; see the module docstring)."""

    name: str
    title: str
    artifact: str
    runtime: str  # where `--engine native` runs it here
    runs_here: bool = True  # its own runtime runs on this machine (False: `run` uses gatepack's executor)
    suffixes: tuple[str, ...] = ()  # path suffixes that name the format (lower case)
    markers: tuple[str, ...] = ()  # files whose presence in a directory names the format
    reads: bool = True
    writes: bool = True
    write_options: tuple[WriteOption, ...] = ()
    is_directory: bool = False  # the artifact is a directory rather than a file
    companions: tuple[str, ...] = ()  # suffixes of files that belong to the artifact (.bin beside .xml)
    recognise: Callable[[Path], bool] = field(default=lambda _path: False)  # an existing path is such an artifact
    interface_inputs: bool = True  # `run` takes the layers' interface tensors (False: the format's own shapes)
    # the cells its writer writes (values of schemas.cells.Cell): a new cell is refused until a format opts in
    cells: tuple[str, ...] = ()
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
    # the type a stateful artifact's runtime holds its states in between calls (Core ML states are fp16 only):
    # streaming verification compares at that type's tolerance, and at float32's otherwise
    held_state_dtype: str = "float32"

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


def cell_refusal(info: FormatInfo, layer: "RecurrentLayer") -> "Finding | None":
    """The ``cell`` finding refusing ``layer`` when ``info``'s writer does not write its cell (None if it does)."""
    from gatepack.converters.findings import Finding, Status

    cell = layer.cell.value
    if cell in info.cells:
        return None
    others = [name for name, other in FORMATS.items() if other.writes and cell in other.cells]
    return Finding(
        "cell",
        Status.UNSUPPORTED,
        f"gatepack does not write {layer.cell.op_name} layers as {info.title} yet",
        alternative=f"convert to {' or '.join(others)}, which gatepack writes {layer.cell.op_name} to",
    )


def check_options(options: dict, infos: "list[FormatInfo]") -> None:
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


# The first byte of each field tag of onnx.ModelProto (field number << 3 | wire type): ir_version 1,
# producer_name 2 ... graph 7, opset_import 8, metadata_props 14, and the two-byte tags of training_info 20,
# functions 25, configuration 26.
ONNX_FIRST_TAGS = bytes([0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2])

LITERT_IDENTIFIER = b"TFL3"  # a TFLite flatbuffer's file identifier, at bytes 4..8

FORMATS: dict[str, FormatInfo] = {
    f.name: f
    for f in (
        FormatInfo(
            "onnx",
            "ONNX",
            "NAME.onnx (+ NAME.onnx.data with external data)",
            "onnxruntime (CPU)",
            constant_form="an initializer",
            suffixes=(".onnx",),
            write_options=ONNX_OPTIONS,
            cells=("gru", "rnn", "lstm"),
            companions=(".onnx.data",),
            recognise=starts_like_protobuf(".onnx", ONNX_FIRST_TAGS),
        ),
        FormatInfo(
            "openvino",
            "OpenVINO IR",
            "NAME.xml + NAME.bin",
            "OpenVINO CPU",
            constant_form="a Constant node",
            suffixes=(".xml",),
            write_options=(STRATEGY, COMPRESS_TO_FP16, STATEFUL),
            cells=("gru", "rnn", "lstm"),
            companions=(".bin",),
            recognise=starts_with(b"<net", ".xml"),
            extra="openvino",
            framework="openvino",
        ),
        FormatInfo(
            "directml",
            "DirectML (DxDispatch model)",
            "directory with model.json",
            "none here (NumPy executor of DirectML semantics)",
            runs_here=False,
            constant_form="a resource initialised from its .npy file (gatepack.json marks it constant)",
            suffixes=(".json",),
            markers=("model.json",),
            write_options=DIRECTML_OPTIONS,
            whole_model_via=(
                "onnx",
                "to run the whole model on DirectML, use --to onnx --for directml (API: to='onnx', "
                "runtime='directml'): every recurrent node in a form onnxruntime's DirectML provider computes as "
                "ONNX specifies",
            ),
            cells=("gru", "rnn", "lstm"),
            is_directory=True,
            recognise=has_markers("model.json", "gatepack.json"),
            interface_inputs=False,
        ),
        FormatInfo(
            "coreml",
            "Core ML ML Program",
            "NAME.mlpackage",
            "none here (NumPy executor of MIL semantics)",
            runs_here=False,
            constant_form="a const op",
            suffixes=(".mlpackage",),
            markers=("Manifest.json",),
            write_options=(STRATEGY, MINIMUM_DEPLOYMENT_TARGET, COMPRESS_TO_FP16, STATEFUL),
            cells=("gru", "rnn", "lstm"),
            is_directory=True,
            recognise=has_markers("Manifest.json"),
            held_state_dtype="float16",
            extra="coreml",
            framework="coremltools",
        ),
        FormatInfo(
            "bnns",
            "BNNSGraph bundle",
            "directory with bnns.json",
            "none here (NumPy executor of BNNS semantics)",
            runs_here=False,
            constant_form="a .npy file the Swift code makes a constant tensor",
            markers=("bnns.json",),
            cells=("gru", "rnn", "lstm"),
            is_directory=True,
            recognise=has_markers("bnns.json"),
        ),
        FormatInfo(
            "litert",
            "LiteRT flatbuffer",
            "NAME.tflite",
            "the LiteRT interpreter (ai-edge-litert, builtin kernels)",
            runs_here=importlib.util.find_spec("ai_edge_litert") is not None,
            constant_form="a constant tensor (a zero state: a variable tensor FILLed with zeros on every invoke)",
            suffixes=(".tflite",),
            write_options=(STRATEGY, SEQ_LENGTH, BATCH_SIZE, STATEFUL),
            cells=("gru", "rnn", "lstm"),
            recognise=has_identifier(LITERT_IDENTIFIER, ".tflite"),
            stateful_layers=True,
            extra="litert",
            framework="ai_edge_litert",
        ),
    )
}


def readers() -> list[str]:
    """The formats gatepack reads, in registry order (asked of ``FORMATS`` at each call: a format registered
    later is one too)."""
    return [name for name, info in FORMATS.items() if info.reads]


def writers() -> list[str]:
    """The formats gatepack writes, in registry order (asked of ``FORMATS`` at each call)."""
    return [name for name, info in FORMATS.items() if info.writes]


def takers(option: str) -> list[str]:
    """The formats whose writer takes the write option named ``option`` (its API keyword), in registry order."""
    return [name for name, info in FORMATS.items() if option in info.option_names]


def all_write_options() -> dict[str, WriteOption]:
    """Every write option of every format, once (formats that share an option share its definition)."""
    found: dict[str, WriteOption] = {}
    for info in FORMATS.values():
        for option in info.write_options:
            if found.setdefault(option.name, option) is not option:
                raise AssertionError(f"two definitions of write option {option.name!r}")
    return found


def as_path(value: object) -> Path:
    """``value`` as a path; UsageError naming what it is otherwise (an in-memory ``onnx.ModelProto`` is taken by
    the API's entry points, which save it first: ``as_source``)."""
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    if type(value).__name__ == "ModelProto":
        raise UsageError(
            "an in-memory onnx.ModelProto where a file is needed",
            hint="save it first: onnx.save(model, 'model.onnx'), then pass 'model.onnx'",
        )
    raise UsageError(f"a {type(value).__name__} where a path was expected", hint="pass the artifact's path")


def as_source(value: Any) -> Any:
    """``value``, or for an in-memory ``onnx.ModelProto`` the path of a copy saved in a private temporary directory
    (removed when the process exits): gatepack verifies what it reads as a file, as a user's runtime loads it. A
    proto whose tensors point at external data it has not loaded is refused (no base directory to find it)."""
    if type(value).__name__ != "ModelProto":
        return value
    import atexit
    import shutil
    import tempfile

    import onnx

    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in value.graph.initializer):
        raise UsageError(
            "an in-memory onnx.ModelProto whose external data is not loaded (its tensors name files relative to a "
            "directory it does not record)",
            hint="pass the model's path, or onnx.load it with its external data",
        )
    directory = Path(tempfile.mkdtemp(prefix="gatepack-model-proto-"))
    atexit.register(shutil.rmtree, directory, True)
    path = directory / "model_proto.onnx"
    large = sum(t.ByteSize() for t in value.graph.initializer) > 1_800_000_000  # a file holds 2 GiB at most
    if large:  # saving with external data edits the proto: the user's stays as it is
        copy = onnx.ModelProto()
        copy.CopyFrom(value)
        value = copy
    onnx.save_model(value, str(path), save_as_external_data=large, location="model_proto.onnx.data")
    return path


def detect(path: str | Path, *, writing: bool = False) -> str:
    """The format of ``path`` from its suffix, else (for a directory) from the marker files it holds.

    A path gatepack cannot read is refused with what it looks like and the command that exports
    it to ONNX (``foreign_kind``): InputError for an existing input, UsageError otherwise.
    """
    p = as_path(path)
    suffix = p.suffix.lower()
    named = [name for name, info in FORMATS.items() if suffix and suffix in info.suffixes]
    if named:
        return named[0]
    if p.is_dir():
        # a marker that exists is enough to name the format: its reader then refuses anything but a regular file
        marked = [name for name, info in FORMATS.items() if any(os.path.lexists(p / m) for m in info.markers)]
        if marked:
            return marked[0]
    if not writing and p.is_file() and _head_and_members(p)[0][4:8] == LITERT_IDENTIFIER:
        return "litert"  # a LiteRT flatbuffer named otherwise than .tflite, told by its file identifier
    if not writing and (p.is_file() or p.is_dir()):
        kind = foreign_kind(p)
        if kind is not None:
            what, export = kind
            raise InputError(f"{path}: {what}; gatepack does not read it", hint=export)
    import difflib

    near = difflib.get_close_matches(suffix, [s for info in FORMATS.values() for s in info.suffixes], n=1)
    meant = f"did you mean {p.with_suffix(near[0]).name}? otherwise " if near and suffix else ""
    raise UsageError(
        f"{path}: cannot tell the format from the name", hint=f"{meant}pass --from/--to, one of {', '.join(FORMATS)}"
    )


# suffixes of model files gatepack writes in no format (an output named so would not read back as its target)
FOREIGN_SUFFIXES = {
    ".mlmodel": "Core ML's older single-file format",
    ".pt": "a PyTorch file",
    ".pth": "a PyTorch file",
    ".h5": "a Keras HDF5 model",
    ".keras": "a Keras model",
    ".pb": "a TensorFlow graph",
    ".npz": "a NumPy archive",
}


def check_output_name(path: str | Path, info: FormatInfo) -> None:
    """Refuse an output path whose suffix names another format (or a model file no format here writes), and a
    single-file format's path without its own suffix: what gatepack writes must read back as what it is."""
    suffix = Path(path).suffix.lower()
    if suffix in info.suffixes:
        return
    other = next((f for f in FORMATS.values() if suffix and suffix in f.suffixes), None)
    named = f"names the {other.name} format" if other else FOREIGN_SUFFIXES.get(suffix)
    if named is None and (info.is_directory or not info.suffixes):
        return  # a directory artifact may be named freely
    right = Path(path).with_suffix(info.suffixes[0]).name if info.suffixes else Path(path).stem
    why = (
        f"{suffix!r} is {named}"
        if other is None and named
        else f"{suffix!r} {named}"
        if named
        else (f"it does not end in {' or '.join(info.suffixes)}")
    )
    raise UsageError(f"{path}: --to {info.name} writes {info.artifact}, and {why}", hint=f"-o {right}")


TORCH_EXPORT = "export the module the weights belong to: torch.onnx.export(model, example_inputs, 'NAME.onnx')"
KERAS_EXPORT = "export it to ONNX: tf2onnx.convert.from_keras(keras.models.load_model(PATH), output_path='NAME.onnx')"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"


def foreign_kind(path: Path) -> tuple[str, str] | None:
    """(what ``path`` looks like, the command that exports it to ONNX) for the model files of other
    frameworks, told by their magic bytes where that is cheap (a zip archive's member names, the HDF5
    signature, the TFLite flatbuffer identifier, a pickle's protocol opcode) and else by their suffix;
    None for anything else. Nothing is unpickled or loaded: at most the first bytes and a zip's
    directory are read."""
    saved_model = f"export it to ONNX: python -m tf2onnx.convert --saved-model {path} --output NAME.onnx"
    if path.is_dir():
        found = os.path.lexists(path / "saved_model.pb") or os.path.lexists(path / "saved_model.pbtxt")
        return ("a TensorFlow SavedModel directory", saved_model) if found else None
    head, members = _head_and_members(path)
    suffix = path.suffix.lower()
    if head.startswith(HDF5_MAGIC):
        return "an HDF5 file (a Keras .h5 model or weights)", KERAS_EXPORT.replace("PATH", repr(str(path)))
    if members is not None:
        return _zip_kind(path, members)
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a Python pickle, e.g. a legacy torch.save checkpoint (gatepack never unpickles)", TORCH_EXPORT
    if suffix == ".bin" and os.path.lexists(path.with_suffix(".xml")):
        return f"the weights of the OpenVINO IR {path.with_suffix('.xml').name}", f"pass {path.with_suffix('.xml')}"
    by_suffix = {
        (".pt", ".pth", ".ckpt", ".bin", ".safetensors"): ("named like PyTorch weights", TORCH_EXPORT),
        (".keras", ".h5", ".hdf5"): ("named like a Keras model", KERAS_EXPORT.replace("PATH", repr(str(path)))),
        (".pb",): (
            "a TensorFlow protobuf (a frozen GraphDef or a SavedModel's saved_model.pb)",
            f"export it to ONNX: python -m tf2onnx.convert --graphdef {path} --inputs IN:0 --outputs OUT:0 --output "
            "NAME.onnx (a SavedModel: --saved-model on its folder)",
        ),
        (".mlmodel",): (
            "a Core ML model in the single-file format (a neural network; gatepack reads ML Programs, .mlpackage)",
            "export the original model to ONNX, or convert it with coremltools' ct.convert(..., "
            "convert_to='mlprogram') to an .mlpackage",
        ),
        (".npz", ".npy"): (
            "NumPy arrays, not a model (gatepack takes .npz files as run --inputs)",
            "build the model in its framework and export that to ONNX (torch.onnx.export, tf2onnx)",
        ),
    }
    return next((kind for suffixes, kind in by_suffix.items() if suffix in suffixes), None)


def _head_and_members(path: Path) -> tuple[bytes, list[str] | None]:
    """The first 64 bytes of a regular file, and its member names if it is a zip archive (else None)."""
    import zipfile

    from gatepack.converters.fileio import open_regular

    try:
        with open_regular(path) as handle:
            head = handle.read(64)
            if not head.startswith(ZIP_MAGIC):
                return head, None
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                return head, archive.namelist()[:10_000]
    except (InputError, OSError, zipfile.BadZipFile, ValueError):
        return b"", None


def _zip_kind(path: Path, members: list[str]) -> tuple[str, str]:
    """What a zip archive holds, from its member names alone."""
    if any(m.endswith("data.pkl") or m.endswith("constants.pkl") for m in members):
        script = any("/code/" in m or m.startswith("code/") for m in members)
        what = "a TorchScript archive" if script else "a PyTorch state dict or checkpoint (torch.save)"
        return f"{what} (gatepack never unpickles)", TORCH_EXPORT
    if "config.json" in members and any(m.endswith(".h5") for m in members):
        return "a Keras 3 model (.keras)", KERAS_EXPORT.replace("PATH", repr(str(path)))
    if members and all(m.endswith(".npy") for m in members):
        return (
            "NumPy arrays (.npz), not a model (gatepack takes .npz files as run --inputs)",
            "build the model in its framework and export that to ONNX (torch.onnx.export, tf2onnx)",
        )
    return "a zip archive, no model gatepack knows", "export the model to ONNX (torch.onnx.export, tf2onnx)"


def check_name(name: str) -> FormatInfo:
    if name not in FORMATS:
        raise UsageError(f"unknown format {name!r}", hint=f"one of {', '.join(FORMATS)}")
    return FORMATS[name]


def implementation(name: str) -> FormatImplementation:
    """The implementation of format ``name`` (its module's ``IMPLEMENTATION``), imported on first use."""
    info = check_name(name)
    module = importlib.import_module(info.module or f"gatepack.converters.formats.{name}")
    found = module.IMPLEMENTATION
    if not isinstance(found, FormatImplementation):
        raise TypeError(f"{module.__name__}.IMPLEMENTATION is not a FormatImplementation")
    return found


def reader(name: str) -> FormatImplementation:
    """The implementation of a format gatepack reads; UsageError for one it only writes."""
    if not check_name(name).reads:
        raise UsageError(f"gatepack writes the {FORMATS[name].title} format but does not read it")
    return implementation(name)


def writer(name: str) -> tuple[FormatInfo, FormatImplementation]:
    """The entry and implementation of a format gatepack writes; UsageError for a read-only one."""
    info = check_name(name)
    if not info.writes:
        raise UsageError(f"gatepack reads the {info.title} format but does not write it", hint=f"one of {writers()}")
    return info, implementation(name)

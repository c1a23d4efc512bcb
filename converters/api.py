"""gatepack's public functions: each builds a plan (or names its arguments), runs it, and returns the answer.

``convert`` checks its arguments into a ``ConversionPlan`` (``converters.plan``) and runs the pipeline
(``converters.pipeline``: read, specialise, prepare, choose, write, verify); ``verify`` a ``ComparisonPlan`` run by
``converters.verifying``; ``load``, ``report``, ``save``, ``run`` and ``input_names`` call the step that does their
work (``converters.reading``, ``pipeline``, ``converters.running``). The modules are imported when a function is
called, so that ``import gatepack`` loads no framework.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from gatepack.converters.model import Model
    from gatepack.converters.progress import Progress
    from gatepack.converters.reporting import Report
    from gatepack.converters.result import Result
    from gatepack.converters.streaming import StatePair
    from gatepack.converters.verification import Verification

P = TypeVar("P")  # a plan
R = TypeVar("R")  # what running it returns


def load(path: str | Path, format: str | None = None, **options) -> "Model":
    """Read the recurrent layers of the artifact at ``path``.

    ``format``: the source format (default: detected from the path). ``activation_defaults``:
    ``"onnxruntime"`` (default) or ``"onnx"``, the values for activation parameters a model leaves out.
    Raises InputError (a malformed artifact), NoRecurrentLayerError, UsageError (an unknown option).
    """
    import gatepack.converters.reading as reading

    return reading.load(path, format, options)


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
    import gatepack.converters.pipeline as pipeline

    pipeline.save(model, path, to, layers_only, dequantize, options)


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
    quantize_weights_scope: str | None = None,
    **options,
) -> "Result":
    """Convert the recurrent layers of ``src`` into ``dst`` as format ``to``, and verify the result.

    ``src``: an artifact's path, an in-memory ``onnx.ModelProto`` or a ``Model``; ``to``: the target format
    (default: from ``dst``); ``format``: the source format (default: from ``src``). ``verify``: run both sides on
    random inputs (``seed``) and compare. ``allow_lossy``: accept findings that change results beyond float rounding.
    ``layout``: 0 or 1 to change the interface layout. ``layers_only``: the recurrent layers alone of a model with
    other operators. ``progress``: e.g. ``gatepack.converters.progress.Progress("convert")`` reports the steps on
    stderr. ``input_shapes`` / ``inputs``: a whole model's symbolic dimensions, or the user's own data, for
    verification; ``input_values``: inputs held as constants, what they decide folded (ONNX). ``frames`` /
    ``states``: a streaming model's consecutive calls and state pairs. ``dequantize``: quantized weights the target
    cannot hold written as floats, within ``max_error`` of the quantized source; ``quantize_weights``: "int8" or
    "int4" W and R (ONNX, OpenVINO, Core ML), per block of ``quantize_block_size`` columns when given, and with
    ``quantize_weights_scope="model"`` a whole model's MatMul/Gemm/Conv/Gather weights too. ``options``:
    ``activation_defaults`` and the target's write options (``gatepack formats``). Each in detail:
    ``converters.plan.ConversionPlan``; an unknown option, one the target does not take, or a value of the wrong type
    raises UsageError naming it.

    Refuses (RefusedError) when a finding is ``unsupported``, or ``lossy`` without ``allow_lossy``.
    Nothing is written unless the conversion and its verification succeed (VerificationError otherwise).
    """
    arguments = dict(locals())  # every argument by its name (taken first, before any other name is bound)
    import gatepack.converters.pipeline as pipeline
    from gatepack.converters.plan import ConversionPlan

    return _planned(arguments, ConversionPlan.of, pipeline.convert)


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
    arguments = dict(locals())  # every argument by its name (taken first, before any other name is bound)
    import gatepack.converters.verifying as verifying
    from gatepack.converters.plan import ComparisonPlan

    return _planned(arguments, ComparisonPlan.of, verifying.compare)


def _planned(arguments: dict, plan: "Callable[[dict], P]", run: "Callable[[P, Progress], R]") -> R:
    """``run`` on the ``plan`` of ``arguments`` (a public function's, by name), reporting on their ``progress``
    (default: silent), which is closed when it ends, however it ends."""
    from gatepack.converters.progress import Silent

    progress = arguments.pop("progress") or Silent()
    try:
        return run(plan(arguments), progress)
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
    import gatepack.converters.verifying as verifying
    from gatepack.converters.model import Model
    from gatepack.converters.plan import given_inputs, streaming_request

    loaded = model if isinstance(model, Model) else load(model, format)
    given = given_inputs(input_shapes, None, None)
    return verifying.state_pairs_of(loaded, loaded, {}, streaming_request(states, None), given, 0, verify=True)[0]


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
    quantize_weights_scope: str | None = None,
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
    ``quantize_weights`` (and ``quantize_block_size``, ``quantize_weights_scope``): as ``convert``'s; each target
    that keeps the integers is then converted and measured in a private directory (``converters.quantized_report``:
    bits per weight, sizes, the accuracy gate's error per output), every other one refused as ``convert`` refuses it.
    """
    arguments = dict(locals())  # every argument by its name (taken first, before any other name is bound)
    import gatepack.converters.pipeline as pipeline

    return pipeline.report_on(arguments, convert)  # a quantized report converts each target to measure it


def engine_for(format: str) -> str:
    """The engine ``run`` uses by default for ``format``: its own runtime where one runs here (onnxruntime,
    OpenVINO CPU), else gatepack's executor of its semantics."""
    import gatepack.converters.running as running

    return running.engine_for(format)


def input_names(artifact: str | Path, format: str | None = None) -> list[str]:
    """The names of the tensors ``run`` takes for ``artifact`` (its graph inputs; for an artifact of layers alone, each
    layer's X and the optional inputs it does not hold as constants), alike for every format."""
    import gatepack.converters.running as running

    return running.input_names(artifact, format)


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
    import gatepack.converters.running as running

    return running.run(artifact, inputs, engine, format, directml_shapes, options)

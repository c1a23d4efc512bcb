"""The conversion plan: every option ``convert`` takes, validated once, before anything is read.

``ConversionPlan.of`` checks the arguments in the order a user meets them (the source as given, the inputs given for
verification, the state pairs, the weights' options, the target, its options, the seed, the layout) and raises
UsageError naming the first wrong one; the pipeline's steps (``converters.pipeline``) then read the plan's fields and
never check an argument again. What can only be judged against the model read (``--max-error`` without a quantized
model, ``--layout`` on a whole model, ``--stateful`` without state pairs) is judged by the step that meets it.

The helpers here (read options, given inputs, state pairs asked for) are shared with ``load``, ``verify`` and
``report``, which check the same arguments the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Mapping

import gatepack.converters.registry as registry
from gatepack.converters.errors import UsageError

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.verification import GivenInputs
    from gatepack.converters.weight_quantization import Scheme

READ_OPTIONS = ("activation_defaults",)
StateRequest = tuple[list[tuple[str, str]], "int | None"]  # (state pairs given, frames): ``streaming_request``


def read_options(options: dict) -> dict:
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


def split_options(options: dict) -> tuple[dict, dict]:
    """(read options, the rest)."""
    return {k: v for k, v in options.items() if k in READ_OPTIONS}, {
        k: v for k, v in options.items() if k not in READ_OPTIONS
    }


def check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"seed {seed!r} is not a non-negative integer")


def given_inputs(input_shapes, inputs, input_values) -> "GivenInputs":
    """The user's input shapes, values (``--inputs``) and fixed values (``--input-value``) as ``GivenInputs``."""
    import numpy as np

    from gatepack.converters.verification import GivenInputs

    values = {**dict(inputs or {}), **{name: np.asarray(v) for name, v in dict(input_values or {}).items()}}
    return GivenInputs(dict(input_shapes or {}), values, tuple(input_values or ()))


def streaming_request(states, frames) -> StateRequest:
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
        import gatepack.converters.accuracy as accuracy
        import gatepack.converters.quantization as quantization

        accuracy.Gate(self.max_error)  # (checks the value)
        if self.max_error is not None and not accuracy.applies(model, self.dequantize) and not self.quantize:
            raise UsageError(
                f"{model.path}: --max-error bounds a quantized model written with float weights (--dequantize) "
                "or weights quantized as asked (--quantize-weights); this conversion has neither",
                hint="leave out --max-error (verify --atol/--rtol set a verification's tolerances)",
            )
        return replace(model, meta={**model.meta, quantization.ASKED: True}) if self.dequantize else model


@dataclass(frozen=True)
class ConversionPlan:
    """One conversion, as asked and checked: what the pipeline's steps read. Its fields, the options of
    ``gatepack.convert``:

    * ``source``: an artifact's path (an in-memory ``onnx.ModelProto`` is saved to a private temporary file first, as
      every path-taking function of the API does), or a ``Model`` (from ``load``, or built in memory: its layers are
      then verified against gatepack's executor); ``source_format``: its format (None: detected from the path);
    * ``output``: where the artifact lands; ``target``: its format (from ``to``, else from the output path);
    * ``verify``: run both sides on random inputs and compare (nothing is written when they differ:
      VerificationError); ``seed``: of the verification's inputs;
    * ``accepted.lossy`` (``allow_lossy``): accept findings that change results beyond float rounding;
    * ``accepted.dequantize`` (``dequantize``): write a layer's quantized weights as their float values where the
      target cannot hold the integers (``lossy``; refused otherwise, whatever ``allow_lossy`` says), the artifact then
      proven exact against the source with dequantized weights and its error against the quantized source bounded by
      ``accepted.max_error`` (``max_error``; by default the source's own quantization noise: ``converters.accuracy``);
    * ``accepted.quantize`` (``quantize_weights``, ``quantize_block_size``): "int8" or "int4" quantizes the recurrent
      layers' W and R per output channel (per block of ``quantize_block_size`` columns when given;
      ``converters.weight_quantization``), held as integers by ONNX, OpenVINO and Core ML (LiteRT: per gate, for its
      hybrid int8 kernels; other targets refused); ``quantize_weights_scope`` "model" (default "layers") quantizes a
      whole model's MatMul/Gemm/Conv/Gather weights too (ONNX, OpenVINO, Core ML:
      ``formats/onnx/model_weights``); the option accepts that ``lossy`` change, and the artifact is
      judged against the float source within ``max_error`` (by default: the float source's distance to its twin with
      the same quantized weights run in float, + the float tolerance the artifact met against that twin);
    * ``layout``: 0 or 1 to change the interface layout (None: keep the source's); ``layers_only``: write the
      recurrent layers alone when the model has other operators (a target that holds layers only refuses such a
      model otherwise; ONNX and OpenVINO keep the whole model unless asked);
    * ``given``: ``input_shapes`` (input name -> dims) fixes a whole model's symbolic dimensions for verification;
      ``inputs`` (input name -> array) verifies it on the user's own data (other inputs are drawn); ``input_values``
      (input name -> a number, list or array) specialises an ONNX model: each input becomes a constant of that value
      and what depends on it is folded (an ``If`` it decides replaced by its branch); the artifact no longer takes it
      (an ``interface`` finding, ``repacked``), and verification feeds the source that value;
    * ``states`` / ``frames``: a streaming model (state outputs fed back as inputs on the next call:
      ``converters.streaming``) is also verified over ``frames`` consecutive calls; ``states`` gives or corrects its
      state pairs (``(input, output)`` or ``"IN=OUT"``);
    * ``read_options`` (``activation_defaults``) and ``write_options``: the target's (``strategy``, ``opset``,
      ``compress_to_fp16`` ...: ``gatepack formats`` lists them); an unknown option, one the target does not take,
      or a value of the wrong type is a UsageError naming it.
    """

    source: "str | Path | Model"
    output: "str | Path"
    target: str
    source_format: str | None
    verify: bool
    accepted: Acceptance
    layout: int | None
    layers_only: bool
    seed: int
    given: "GivenInputs"
    states: tuple[tuple[str, str], ...]
    frames: int | None
    read_options: dict
    write_options: dict

    @property
    def request(self) -> StateRequest:
        """The state pairs and frames asked for, as ``streaming_request`` gives them."""
        return list(self.states), self.frames

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> "ConversionPlan":
        """The plan of ``gatepack.convert``'s ``arguments`` (every one, by its name: that signature holds their types
        and defaults), each checked in turn (UsageError naming the first wrong one; an option the target does not
        take, or a value of the wrong type, by its name)."""
        asked = SimpleNamespace(**arguments)
        src = registry.as_source(asked.src)
        inputs = given_inputs(asked.input_shapes, asked.inputs, asked.input_values)
        pairs, frames = streaming_request(asked.states, asked.frames)
        accepted = _acceptance(
            asked.allow_lossy,
            asked.dequantize,
            asked.max_error,
            asked.quantize_weights,
            asked.quantize_block_size,
            asked.quantize_weights_scope,
        )
        info, _ = registry.writer(asked.to or registry.detect(asked.dst, writing=True))
        read, write = split_options(asked.options)
        read_options(read)
        info.check_options(write)
        check_seed(asked.seed)
        if asked.layout is not None and (isinstance(asked.layout, bool) or asked.layout not in (0, 1)):
            raise UsageError(f"layout {asked.layout!r} is not 0 or 1")
        _check_source(src, read)
        return cls(
            source=src,
            output=asked.dst,
            target=info.name,
            source_format=asked.format,
            verify=asked.verify,
            accepted=accepted,
            layout=asked.layout,
            layers_only=asked.layers_only,
            seed=asked.seed,
            given=inputs,
            states=tuple(pairs),
            frames=frames,
            read_options=read,
            write_options=write,
        )


def _acceptance(
    allow_lossy, dequantize, max_error, quantize_weights, quantize_block_size, quantize_weights_scope=None
) -> Acceptance:
    """What the user accepts, ``dequantize`` and the quantization scheme asked checked (``max_error`` is checked
    against the model: ``Acceptance.marked``)."""
    from gatepack.converters.weight_quantization import check_scheme

    if not isinstance(dequantize, bool):
        raise UsageError(f"dequantize {dequantize!r} is not true or false")
    scheme = check_scheme(quantize_weights, quantize_block_size, quantize_weights_scope)
    return Acceptance(allow_lossy, dequantize, max_error, scheme)


def _check_source(src: Any, read: dict) -> None:
    """Read options apply to reading a path: UsageError for those given with an in-memory model."""
    from gatepack.converters.model import Model

    if isinstance(src, Model) and read:
        raise UsageError(f"option(s) {sorted(read)} apply to reading a path, not to an in-memory model")


@dataclass(frozen=True)
class Conversion:
    """What the steps before writing settle (``pipeline.prepare``): the ``source`` as read and how messages name it
    (``label``); ``base``, the source specialised for the fixed inputs (the source itself when none is); ``model``,
    what is written (layers alone, input shapes, layout, weights marked or quantized, state pairs); the source's
    state ``pairs``; ``given``, the inputs verification feeds (with sizes the source runs on where its own drawn
    sizes fail, that rule in words: ``drawn``); and the write options with what the format settles for the whole
    artifact; ``quantized``: with ``--quantize-weights``, each layer before and after quantizing (what the
    accuracy gate's twin reuses rather than quantizing the source again)."""

    source: "Model"
    label: str
    base: "Model"
    model: "Model"
    pairs: list
    given: "GivenInputs"
    drawn: str
    write_options: dict
    quantized: tuple = ()


@dataclass(frozen=True)
class ComparisonPlan:
    """One comparison of two artifacts (``gatepack.verify``), as asked and checked: their paths and formats, the
    seed, the tolerance, the inputs given, the state pairs and frames of a streaming check, the read options."""

    source: Any
    target: Any
    source_format: str | None
    target_format: str | None
    seed: int
    tolerance: Any  # verification.Tolerance
    given: "GivenInputs"
    states: tuple[tuple[str, str], ...]
    frames: int | None
    read_options: dict

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> "ComparisonPlan":
        """The plan of ``gatepack.verify``'s ``arguments`` (every one, by its name), each checked in turn (UsageError
        naming the first wrong one; the read options are checked when the artifacts are read)."""
        from gatepack.converters.verification import Tolerance

        asked = SimpleNamespace(**arguments)
        src, dst = registry.as_source(asked.src), registry.as_source(asked.dst)
        inputs = given_inputs(asked.input_shapes, asked.inputs, asked.input_values)
        check_seed(asked.seed)
        tolerance = Tolerance(asked.atol, asked.rtol)
        pairs, frames = streaming_request(asked.states, asked.frames)
        return cls(src, dst, asked.format, asked.to, asked.seed, tolerance, inputs, tuple(pairs), frames, asked.options)

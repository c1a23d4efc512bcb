"""The pipeline's verification step, and the ``verify`` API's comparison of two artifacts.

``verify_written``: the artifact just written read back from its staging path and verified against the source as a
user runs it (one call on drawn inputs; a streaming model's consecutive calls; a quantized source written with float
weights, or weights quantized as asked, through the accuracy gate; the provider's nodes for ``--for``), refused
(``refusals.refuse_unverified``) unless it passed. ``compare``: ``gatepack.verify``. Both draw a whole source's
symbolic sizes anew where it fails on the default ones (``runnable_given``), and say so. The mechanics (inputs drawn,
runs, comparisons) are ``converters.verification``'s and ``converters.streaming``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import gatepack.converters.registry as registry
from gatepack.converters.errors import InputError, RuntimeFailure, UsageError
from gatepack.converters.reading import load, specialised

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.plan import ComparisonPlan, Conversion, ConversionPlan, StateRequest
    from gatepack.converters.progress import Progress
    from gatepack.converters.registry import FormatImplementation
    from gatepack.converters.verification import GivenInputs, Verification


def verify_written(
    plan: "ConversionPlan", conversion: "Conversion", implementation: "FormatImplementation", tmp: Path, progress
) -> "Verification":
    """The artifact written at ``tmp`` read back and verified against the source (one call, the consecutive calls of
    a streaming model, a provider's nodes for ``--for``; how the sizes were drawn, noted); VerificationError
    (nothing is written) unless it passed."""
    from gatepack.converters.refusals import refuse_unverified
    from gatepack.converters.verification import release_weights, verify_provider_nodes

    dst = Path(plan.output)
    progress.step(f"reading back {dst}")
    release_weights(conversion.source.layers)  # read by the writer, not needed in memory to verify
    written = _read_back(implementation, tmp, conversion.source, plan.target)
    written.path = dst
    verification = _verification(plan, conversion, written, tmp, progress)
    verification.notes += [conversion.drawn] if conversion.drawn else []
    runtime = conversion.write_options.get("runtime")
    if runtime is not None and registry.runtime_name(runtime) != "onnxruntime":
        verify_provider_nodes(written, registry.runtime_name(runtime), verification, seed=plan.seed)
    refuse_unverified(dst, verification)
    return verification


def _verification(
    plan: "ConversionPlan", conversion: "Conversion", written: "Model", tmp: Path, progress: "Progress"
) -> "Verification":
    """One call on drawn inputs (random states included), then for a streaming model ``frames`` consecutive
    calls from zero states; a stateful artifact (``write_options['stateful']``), which takes no state inputs, is
    verified by the calls alone. A quantized source written with float weights passes the accuracy gate
    (``converters.accuracy``)."""
    import gatepack.converters.accuracy as accuracy
    from gatepack.converters.streaming import verify_streaming
    from gatepack.converters.verification import verify_models

    source, pairs, given, accepted = conversion.source, conversion.pairs, conversion.given, plan.accepted
    stateful = bool(conversion.write_options.get("stateful"))
    streams = bool(pairs) and (written.keeps_whole or stateful)
    frames, seed = plan.frames, plan.seed
    if accuracy.applies(source, accepted.dequantize) or accepted.quantize is not None:
        progress.step("verifying against the source and its twin" + (", over consecutive calls" if streams else ""))
        gate = accuracy.Gate(accepted.max_error, accepted.quantize, conversion.quantized)
        twin_pairs = pairs if streams else ()
        return accuracy.verify_dequantized(
            source,
            written,
            tmp,
            gate,
            seed=seed,
            given=given,
            pairs=twin_pairs,
            frames=frames,
            stateful=stateful,
            base=_twin_base(plan, conversion),
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


def _twin_base(plan: "ConversionPlan", conversion: "Conversion") -> "Model":
    """What the accuracy gate's twin is made of: the source as the artifact was made of it (``conversion.base``,
    specialised for the fixed inputs). A whole model whose layers ``--quantize-weights`` quantized for kernels that
    quantize X and h at run time is twinned on gatepack's executor, which runs the layers the graph computes: it is
    specialised at the input shapes given too, as LiteRT's writer decides an ``If`` by them when converting
    (silero VAD v4's LSTMs sit in the branches of an ``If`` decided by its input's shape)."""
    import gatepack.converters.accuracy as accuracy

    model = conversion.model
    executed = plan.accepted.quantize is not None and accuracy.run_time(model)  # (as the gate decides it)
    if not executed or not plan.given.shapes or not model.keeps_whole:
        return conversion.base
    return specialised(conversion.source, plan.given, plan.read_options, at_shapes=True)


def _read_back(implementation: "FormatImplementation", tmp: Path, source: "Model", target: str) -> "Model":
    """The artifact just written, read back for verification. An artifact of the source's own format in which
    every recurrent layer became elementary operators (``--for directml``) has no layer left to read: it is
    then compared end to end with the source file (``Model.meta['elementary']``)."""
    from gatepack.converters.errors import NoRecurrentLayerError
    from gatepack.converters.model import Model

    try:
        return implementation.read(tmp)
    except NoRecurrentLayerError:
        if source.format != target or source.path is None:
            raise
        return Model(tmp, target, [], meta={"other_ops": source.meta.get("other_ops"), "elementary": True})


def compare(plan: "ComparisonPlan", progress: "Progress") -> "Verification":
    """``gatepack.verify``: both artifacts read and compared on the same inputs; a whole source that fails on its
    drawn sizes (or a streaming check whose source run fails on them) compared again at sizes it runs on, saying so."""
    source = load(plan.source, plan.source_format, plan.read_options)
    target = load(plan.target, plan.target_format, plan.read_options)
    first: "Verification | RuntimeFailure"
    try:
        first = _compared(plan, source, target, plan.given, progress)
        if not first.incomplete:
            return first
    except RuntimeFailure as err:  # (a streaming check runs the source first)
        first = err
    redrawn, drawn = runnable_given(target, source, plan.given, plan.seed)  # where the source fails on the sizes drawn
    if not drawn:
        if isinstance(first, RuntimeFailure):
            raise first
        return first
    result = _compared(plan, source, target, redrawn, progress)
    result.notes.append(drawn)
    return result


def _compared(
    plan: "ComparisonPlan", source: "Model", target: "Model", given: "GivenInputs", progress: "Progress"
) -> "Verification":
    """One comparison on ``given``: over consecutive calls when frames or state pairs are asked for (or ``given``
    holds a sequence of frames), else one call (or layer by layer)."""
    from gatepack.converters.verification import verify_models

    if plan.frames is not None or plan.states or (given.values and holds_frames(source, given)):
        from gatepack.converters.streaming import verify_streaming

        progress.step("verifying consecutive calls, states fed back")
        return verify_streaming(
            source,
            target,
            frames=plan.frames,
            states=list(plan.states),
            seed=plan.seed,
            tolerance=plan.tolerance,
            given=given,
        )
    return verify_models(source, target, seed=plan.seed, progress=progress, tolerance=plan.tolerance, given=given)


def holds_frames(source: "Model", given: "GivenInputs") -> bool:
    """True when ``given`` holds a sequence of frames for one of the whole source's inputs."""
    from gatepack.converters.streaming import _split_given
    from gatepack.converters.verification import _graph_inputs

    return source.keeps_whole and bool(_split_given(given, _graph_inputs(source))[1])


def runnable_given(model: "Model", source: "Model", given: "GivenInputs", seed: int) -> tuple["GivenInputs", str]:
    """``given`` with input shapes the whole ``source`` runs on where its own drawn sizes fail
    (``verification.runnable_shapes``), and that rule in words; unchanged when ``model`` (what is written) is
    compared layer by layer."""
    from gatepack.converters.verification import runnable_shapes

    if not model.keeps_whole or source.path is None or registry.reader(source.format).graph_inputs is None:
        return given, ""
    try:
        return runnable_shapes(source, given, seed)
    except InputError:
        return given, ""  # inputs it cannot draw: the verification says so


def state_pairs_of(
    model: "Model",
    source: "Model",
    write_options: dict,
    request: "StateRequest",
    given: "GivenInputs",
    seed: int,
    verify: bool,
    stateful_layers: bool = False,
) -> tuple[list, "GivenInputs", str]:
    """The source's state pairs when they matter: asked for (``--state``, ``--stateful``) or for verifying a
    whole streaming model; [] for a model without whole-model inputs, or whose source cannot run here. With them
    ``given``: where the whole ``source`` fails on its drawn sizes, with the sizes it runs on and that rule in words
    (``runnable_given``; ``model``, what is written, is run fed without its fixed inputs). ``stateful_layers``: the
    target holds a layers-only model's states too (``FormatInfo.stateful_layers``)."""
    given_pairs, _ = request
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
    return _searched(model, source, given_pairs, given, seed, asked)


def _searched(model: "Model", source: "Model", given_pairs, given: "GivenInputs", seed: int, asked: bool) -> Any:
    """The state pairs found on one call of ``model`` on drawn inputs, then, where the source fails on them, on
    inputs at sizes it runs on (``runnable_given``); [] when it runs on neither and no pair was asked for."""
    from gatepack.converters.streaming import source_state_pairs

    try:
        return source_state_pairs(model, given_pairs, given.unfixed(), seed), given, ""
    except (RuntimeFailure, InputError):
        redrawn, drawn = runnable_given(model, source, given, seed)
        if drawn:
            try:
                return source_state_pairs(model, given_pairs, redrawn.unfixed(), seed), redrawn, drawn
            except (RuntimeFailure, InputError):
                pass
        if asked:
            raise
        return [], redrawn, drawn  # the source does not run on drawn inputs: single-call verification says so

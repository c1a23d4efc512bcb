"""What stops a conversion before anything is written: a finding the user has not accepted (``unsupported``;
``lossy`` without ``--allow-lossy``; quantized weights written as floats without ``--dequantize``), weights quantized
as asked that the target would not keep as integers, and a verification that did not pass.

Each refusal is one error naming the source (or the output), the layer, the feature and the way out
(``RefusedError``, exit 4; ``VerificationError``, exit 5), shared by ``convert`` and ``save``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gatepack.converters.quantization as quantization
from gatepack.converters.errors import RefusedError, VerificationError
from gatepack.converters.plan import Acceptance

if TYPE_CHECKING:
    from gatepack.converters.findings import Finding
    from gatepack.converters.model import Model
    from gatepack.converters.verification import Verification
    from gatepack.converters.weight_quantization import Scheme


def refuse_blocking(
    label: str, findings: dict[str, list["Finding"]], accepted: Acceptance, layers_only: bool = False
) -> None:
    """RefusedError naming the first finding that is unsupported (or lossy without ``accepted.lossy``; quantized
    weights written as floats without ``accepted.dequantize``); the ``model`` finding (operators the target
    cannot hold) first, once, and not when ``layers_only`` accepted it."""
    from gatepack.converters.findings import Status

    def blocks(f: "Finding") -> bool:
        dequantized = quantization.refuses(f, accepted.dequantize or accepted.quantize is not None)
        if dequantized is not None:
            return dequantized
        return (f.status is Status.UNSUPPORTED and not (f.feature == "model" and layers_only)) or (
            f.status is Status.LOSSY and not accepted.lossy
        )

    blocking = [(name, f) for name, fs in findings.items() for f in fs if blocks(f)]
    whole = [f for _, f in blocking if f.feature == "model"]
    if whole:
        raise RefusedError(f"{label}: {whole[0].detail}", findings=whole[:1], hint=whole[0].alternative)
    if blocking:
        name, first = blocking[0]
        more = f" (and {len(blocking) - 1} more finding(s))" if len(blocking) > 1 else ""
        hint = first.alternative or ("pass --allow-lossy to accept it" if first.status is Status.LOSSY else None)
        raise RefusedError(
            f"{label}: layer {name!r}: {first.status.value}: {first.feature}: {first.detail}{more}",
            findings=[f for _, f in blocking],
            hint=hint,
        )


def refuse_partial_model(model: "Model", label: str, target: str, layers_only: bool) -> "Finding | None":
    """RefusedError when ``target`` would hold a whole ``model``'s recurrent layers only and ``layers_only`` did not
    ask for that, decided before anything runs the source; else the ``model`` finding (None: nothing to say)."""
    from gatepack.converters.reporting import model_finding

    whole = model_finding(model, target)
    if whole is not None:
        refuse_blocking(label, {"(model)": [whole]}, Acceptance(), layers_only)
    return whole


def refuse_dequantizing(model: "Model", label: str, target: str, options: dict, whole, dequantize: bool) -> "Model":
    """``model`` marked for float weights when ``dequantize``; RefusedError (naming --dequantize) for a quantized
    layer ``target`` would write as floats otherwise (its ``quantization`` finding, as ``convert`` gives it)."""
    from gatepack.converters.reporting import target_findings

    marked = Acceptance(dequantize=dequantize).marked(model)
    quantized = [layer for layer in marked.layers if layer.is_quantized or layer.is_palettized]
    found = {lay.name: target_findings(marked, lay, target, options, whole) for lay in quantized}
    only = {name: [f for f in fs if f.feature == quantization.FEATURE] for name, fs in found.items()}
    refuse_blocking(label, only, Acceptance(lossy=True, dequantize=dequantize))
    return marked


def refuse_unheld(label: str, findings: dict[str, list["Finding"]], target: str, scheme: "Scheme | None") -> None:
    """RefusedError when weights quantized as asked would not be kept as integers by ``target`` as written (e.g.
    ONNX below opset 13): its own ``quantization`` finding does not keep them (``quantization.keeps_integers``)."""
    import gatepack.converters.weight_quantization as quantizing

    if scheme is None:
        return
    for name, found in findings.items():
        own = [f for f in found if f.feature == "quantization" and not quantizing.is_asked(f)]
        if not any(quantization.keeps_integers(f) for f in own):
            why = "; ".join(f.detail for f in own) or quantizing.refusal_detail(target)
            raise RefusedError(
                f"{label}: layer {name!r}: --quantize-weights: {target} would not keep the integers: {why}",
                findings=own,
                hint=MASKED_HINT
                if any(f.feature == "mask" for f in found)
                else f"write it where the integers are kept ({' or '.join(quantizing.holders_of(scheme))}; ONNX at "
                "opset 13 or later, 21 for 4 bits or blocks: --layers-only writes a whole model's layers at the opset "
                "they need), or leave out --quantize-weights",
            )


MASKED_HINT = (
    "a layer with a per-step mask (Keras masking) is written as an elementary Loop of float weights by every format "
    "that holds the mask, and refused alone: leave out --quantize-weights (float weights, exact)"
)


def refuse_unverified(dst, verification: "Verification") -> None:
    """VerificationError (nothing is written) unless the verification passed."""
    if verification.incomplete and all(o.passed for o in verification.outputs):
        raise VerificationError(
            f"{dst}: verification incomplete: {verification.incomplete}; nothing was written",
            verification=verification,
            hint="give inputs the model runs on: --input-shape NAME=d1,d2,... or --inputs FILE.npz "
            "(API: input_shapes=, inputs=), or --no-verify to write it unverified",
        )
    if not verification.passed:
        failed = [o for o in verification.outputs if not o.passed] or verification.outputs
        worst = max(failed, key=lambda o: o.max_abs_error, default=None)  # (one that failed, never one that passed)
        what = "no output compared"
        if worst:
            what = f"{worst.layer} {worst.output} max abs error {worst.max_abs_error:.3g}"
        hint = "rerun with --no-verify to keep the output for inspection"
        drift = _drift(verification)
        if drift:
            what += drift
            hint = (
                "each call's difference is fed back with the states and grows; for a lossy artifact (fp16) that is "
                "its rounding accumulating: keep full precision (leave out --compress-to-fp16), check fewer calls "
                "(--frames N), or " + hint
            )
        raise VerificationError(
            f"{dst}: verification failed: {what}; nothing was written", verification=verification, hint=hint
        )


def _drift(verification: "Verification") -> str:
    """Where only the consecutive calls of a streaming check disagree: how one call compares and how the error grew
    call by call ('' otherwise)."""
    from gatepack.converters.streaming import STREAMED

    one_call = [o for o in verification.outputs if o.layer != STREAMED]
    if verification.streaming is None or not one_call or not all(o.passed for o in one_call):
        return ""
    largest = max(o.max_abs_error for o in one_call)
    return (
        f" over {verification.streaming.frames} consecutive calls, states fed back, where one call agrees (largest "
        f"error {largest:.2g}); the error per call: {verification.streaming.growth_text()}"
    )

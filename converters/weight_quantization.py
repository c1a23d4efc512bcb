"""Quantizing a float model's recurrent weights as the user asks (``--quantize-weights int8``, API
``quantize_weights="int8"``): each direction's W ``[G*H, I]`` and R ``[G*H, H]`` become integers per output
channel (one row of the canonical layout), symmetric::

    scale[j] = max_k |W[j, k]| / (2^(b-1) - 1)      (1 for a row of zeros)
    q[j, k]  = clip(round_half_even(W[j, k] / scale[j]), -(2^(b-1) - 1), 2^(b-1) - 1)

so the float view the layer then computes on is ``q * scale`` (``schemas.quantized``): the layer carries
``Wq``/``Rq`` and W, R become that view, exactly. A target that holds quantized weights writes the integers
(ONNX: QDQ; OpenVINO: NNCF's compressed constants; Core ML: constexpr ops; LiteRT: int8 tensors its hybrid kernels
take); every other target is refused, naming those that hold them. LiteRT quantizes per gate block instead
(``FORMS``): its sequence ops' hybrid kernels take one scale per weight tensor, one gate's [H, K] (``max`` over the
block's rows), and they quantize X and h at run time, which the records say (``dynamic_activations``). The change
is ``lossy`` by construction; the option is the user's acceptance of it, and the artifact is judged by the accuracy
gate (``converters.accuracy``) against the float source.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from gatepack.converters.errors import UsageError
from gatepack.converters.findings import Finding, Status
from gatepack.schemas.layer import RecurrentLayer
from gatepack.schemas.quantized import LITERT_ASYMMETRIC, RUN_TIME_SCHEMES, QuantizedWeights

if TYPE_CHECKING:
    from gatepack.converters.model import Model

OPTION = "--quantize-weights (API: quantize_weights=)"
SCHEMES = {"int8": (8, np.int8)}  # name -> (bits, storage type); the integers are symmetric, per output channel
HOLDERS = ("onnx", "openvino", "coreml", "litert")  # the targets whose writer keeps these integers


@dataclass(frozen=True)
class Form:
    """How a target holds the integers: rows sharing one scale (``per_gate``: each gate block's H rows, else each
    row its own) and the run-time quantization of X and h its kernels add (``schemas.quantized``; '': none)."""

    per_gate: bool = False
    activations: str = ""

    def words(self) -> str:
        return "per gate block (one scale per gate matrix)" if self.per_gate else "per output channel"


FORMS = {"litert": Form(per_gate=True, activations=LITERT_ASYMMETRIC)}  # every other holder: Form()
ASKED_DETAIL = "W and R quantized as asked"  # how the finding below begins (told from a target's own)


def check_scheme(scheme: object) -> tuple[int, type] | None:
    """The bits and storage type of ``scheme`` (None: not asked); UsageError naming an unknown one."""
    if scheme is None:
        return None
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise UsageError(f"quantize_weights {scheme!r} is not one of {', '.join(SCHEMES)}")
    return SCHEMES[scheme]


def quantize_rows(
    weights: np.ndarray, bits: int, storage: type, group: int = 1, activations: str = ""
) -> QuantizedWeights:
    """``weights`` [rows, cols] quantized symmetric per row (module docstring), or per ``group`` consecutive rows
    (their largest magnitude), its float view one rounding away."""
    high = 2 ** (bits - 1) - 1
    floats = np.asarray(weights, np.float32)
    largest = np.abs(floats).max(axis=1) if floats.size else np.zeros(floats.shape[0], np.float32)
    largest = np.repeat(largest.reshape(-1, group).max(axis=1), group)
    scale = np.where(largest > 0, largest / np.float32(high), np.float32(1)).astype(np.float32)
    values = np.clip(np.rint(floats / scale[:, None]), -high, high).astype(storage)
    return QuantizedWeights(values, scale, np.zeros(scale.shape, storage), 0, None, bits, True, activations)


def quantized_layer(layer: RecurrentLayer, scheme: str, label: str, target: str = "") -> RecurrentLayer:
    """``layer`` with each direction's W and R quantized (``Wq``/``Rq``) as ``target`` holds them (``FORMS``) and
    W, R their float view; UsageError for a layer that is quantized already."""
    if layer.is_quantized:
        raise UsageError(
            f"{label}: layer {layer.name!r} holds quantized weights already ({layer.quantization_summary()}); "
            "--quantize-weights quantizes float weights",
            hint="leave out --quantize-weights (ONNX keeps its integers as they are)",
        )
    bits, storage = SCHEMES[scheme]
    form = FORMS.get(target, Form())
    group = layer.hidden_size if form.per_gate else 1
    directions = []
    for p in layer.directions:
        wq, rq = (quantize_rows(a, bits, storage, group, form.activations) for a in (p.W, p.R))
        floats = (wq.dequantized(p.W.dtype), rq.dequantized(p.R.dtype))
        directions.append(replace(p, W=floats[0], R=floats[1], Wq=wq, Rq=rq))
    return replace(layer, directions=tuple(directions))


def finding(source: RecurrentLayer, scheme: str, target: str = "") -> Finding:
    """The ``quantization`` finding of a layer quantized as asked for ``target``: ``lossy``, with bits per weight,
    the weights' size before and after (integers, plus one float32 scale and one zero point per row) and the
    run-time quantization of X and h the target's kernels add."""
    bits, storage = SCHEMES[scheme]
    form = FORMS.get(target, Form())
    before = sum(p.W.nbytes + p.R.nbytes for p in source.directions)
    rows = sum(p.W.shape[0] + p.R.shape[0] for p in source.directions)
    count = sum(p.W.size + p.R.size for p in source.directions)
    after = count * np.dtype(storage).itemsize + rows * (4 + np.dtype(storage).itemsize)
    activations = f"; the kernels then have {RUN_TIME_SCHEMES[form.activations]}" if form.activations else ""
    return Finding(
        "quantization",
        Status.LOSSY,
        f"{ASKED_DETAIL} ({OPTION.split(' ')[0]} {scheme}): {scheme} {form.words()}, symmetric, "
        f"{bits} bits per weight (+ a float32 scale per row); {before:,} -> {after:,} bytes "
        f"({before / max(after, 1):.2f}x smaller){activations}; judged against the float source by the accuracy gate",
        alternative="leave out --quantize-weights to keep float weights",
    )


def is_asked(found: Finding) -> bool:
    """Whether ``found`` is the finding of weights quantized as asked (``finding``), not a target's own."""
    return found.feature == "quantization" and found.detail.startswith(ASKED_DETAIL)


def quantized_model(model: "Model", scheme: str, target: str = "") -> "Model":
    """``model`` with every recurrent layer quantized for ``target`` (``quantized_layer``), nothing else changed."""
    label = str(model.path or "(in-memory model)")
    return replace(model, layers=[quantized_layer(layer, scheme, label, target) for layer in model.layers])


def refusal_detail(target: str) -> str:
    """Why ``target`` is refused for quantized weights, naming the targets that hold them."""
    return (
        f"{target} holds no quantized recurrent weights: {OPTION.split(' ')[0]} writes them to "
        f"{' or '.join(HOLDERS)} only"
    )

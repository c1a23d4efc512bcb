"""What becomes of a layer's quantized weights (``schemas.quantized``) in a target: held as integers (``repacked``:
the same integers, scale and zero point, moved), or written as their float view ``(q - zero_point) * scale``
only when the user asks (``--dequantize``, API ``dequantize=True``), refused otherwise, naming the option:
``repacked`` where the source computes on those floats (float activations: a ``DequantizeLinear`` feeding a float
GRU; a lookup table's palette values), the conversion then exact, only the storage larger; ``lossy`` where the
source quantizes X and h at run time (``DynamicQuantizeLSTM``, LiteRT's hybrid kernels), which the float layer does
not, its distance to the source measured by the accuracy gate. A format that holds quantized weights words its own
``held`` finding; every other one gets ``dequantized`` from the report (``reporting.target_findings``), so no
format can drop the integers silently.
Which formats hold them depends on the source operator's run-time arithmetic (``holders``, from each format's record,
``FormatInfo.holds_quantized``): integers with float activations go to ONNX, OpenVINO and Core ML, onnxruntime's
uint8-activation LSTM to ONNX, LiteRT's hybrid kernels (X and h quantized per row) to LiteRT alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import gatepack.converters.registry as registry
from gatepack.converters.findings import Finding, Status
from gatepack.schemas.layer import RecurrentLayer
from gatepack.schemas.quantized import RUN_TIME_SCHEMES
from gatepack.schemas.schemes import FLOAT_ACTIVATIONS

if TYPE_CHECKING:
    from gatepack.converters.model import Model

FEATURE = "quantization"
DEQUANTIZE_OPTION = "--dequantize (API: dequantize=True)"
ASKED = "dequantize"  # Model.meta key: the user asked for float weights everywhere (``--dequantize``)
FLOATS_ALTERNATIVE = f"pass {DEQUANTIZE_OPTION} to write float weights"  # every finding of weights written as floats


def holders(scheme: str) -> tuple[str, ...]:
    """The formats whose writer keeps as integers quantized weights computed on with the run-time arithmetic
    ``scheme`` (``QuantizedWeights.dynamic_activations``; ``FLOAT_ACTIVATIONS``: none), in the registry's order."""
    return tuple(name for name, info in registry.FORMATS.items() if scheme in info.holds_quantized)


def held(layer: RecurrentLayer, how: str) -> Finding:
    """The integers kept, ``how`` the target stores them (e.g. 'int8 initializers + DequantizeLinear')."""
    return Finding(FEATURE, Status.REPACKED, f"{layer.quantization_summary()}: the integers kept exactly, as {how}")


def dequantized(layer: RecurrentLayer, target: str, reason: str | None = "") -> Finding:
    """``target`` cannot hold the integers (``reason``, default: its format has no quantized weights) or the user
    asked for floats (``reason`` None): written as float weights only with ``--dequantize``, refused unless the user
    passed the option (``refuses``; the report and ``convert`` agree). ``lossy`` where the source quantizes X and h
    at run time (``run_time_scheme``), which the float layer does not; else ``repacked``: the source computes on
    W = (q - zero_point) * scale in float, which is what is written (the conversion exact, the storage larger)."""
    dynamic = run_time_scheme(layer)
    arithmetic = (
        "; and the float layer computes X and h in float where the source has "
        f"{RUN_TIME_SCHEMES[dynamic]} (proven exact against the source with dequantized weights, its error against "
        "the quantized source measured and bounded by --max-error or the source's own quantization noise)"
        if dynamic
        else " (exactly the numbers the source computes on, its arithmetic being float on them: the integers' "
        "storage lost, 4x larger for 8 bits)"
    )
    others = [h for h in holders(dynamic) if h != target]
    keep = f", or convert to {' or '.join(others)}, which keeps the integers" if others else ""
    own = f"{target} has no kernel that computes it" if dynamic and target not in holders(FLOAT_ACTIVATIONS) else ""
    why = (
        "as asked (--dequantize)" if reason is None else f"{reason or own or target + ' holds no quantized weights'}: "
    )
    return Finding(
        FEATURE,
        Status.LOSSY if dynamic else Status.REPACKED,
        f"{layer.quantization_summary()}: written as float weights W = (q - zero_point) * scale "
        + (why if reason is None else f"only with --dequantize ({why.rstrip(': ')})")
        + arithmetic,
        alternative=f"{FLOATS_ALTERNATIVE}{keep}",
    )


def floats_asked(model: "Model") -> "Model":
    """``model`` as a writer writes it: its layers without records when the user asked for float weights
    (``--dequantize``: ``ASKED``), else unchanged."""
    if not model.meta.get(ASKED):
        return model
    return replace(model, layers=[floats_only(layer) for layer in model.layers])


def run_time_scheme(layer: RecurrentLayer) -> str:
    """The run-time quantization of X and h of ``layer``'s source operator (``RUN_TIME_SCHEMES``; '': none)."""
    return next((r.dynamic_activations for p in layer.directions for r in (p.Wq, p.Rq) if r is not None), "")


def with_finding(layer: RecurrentLayer, target: str, found: list, asked: bool) -> list:
    """A format's findings ``found`` (None entries allowed) with the quantization finding every quantized layer
    gets: the format's own (it holds the integers), else ``dequantized``; when the user ``asked`` for float
    weights (``--dequantize``), ``dequantized`` in place of the format's."""
    if not layer.is_quantized and not layer.is_palettized:
        return found
    own = [f for f in found if f is not None and f.feature == FEATURE]
    if own and not asked:
        return found
    kept = [f for f in found if f is None or f.feature != FEATURE]
    reason = None if asked and own else ""
    return kept + [dequantized(layer, target, reason) if layer.is_quantized else table_as_floats(layer, target, reason)]


def writes_floats(finding: Finding) -> bool:
    """Whether ``finding`` is one of quantized or compressed weights written as floats (``dequantized``,
    ``table_as_floats``, ``compressed_source``: each names ``--dequantize`` as its way out)."""
    return finding.feature == FEATURE and (finding.alternative or "").startswith(FLOATS_ALTERNATIVE)


def keeps_integers(finding: Finding) -> bool:
    """Whether ``finding`` is a target's own quantization finding that keeps the integers (``held``, a format's
    own words for it): ``repacked``, and not weights written as floats."""
    return finding.feature == FEATURE and finding.status is Status.REPACKED and not writes_floats(finding)


def refuses(finding: Finding, dequantize: bool) -> bool | None:
    """Whether ``finding`` blocks a conversion: a ``lossy`` quantization finding, and weights written as floats
    (``writes_floats``, ``repacked`` too), do unless ``dequantize`` (the caller passes --quantize-weights as one too;
    ``--allow-lossy`` does not accept them); None for every other finding (the general rule decides)."""
    if finding.feature != FEATURE or not (finding.status is Status.LOSSY or writes_floats(finding)):
        return None
    return not dequantize


def compressed_source(forms: list[str]) -> Finding:
    """A source whose W or R is stored compressed in a form no quantized record holds (``forms``, e.g. a Core ML
    lookup table): read as the float values the source computes on, which a target writes only with
    ``--dequantize`` (``lossy`` as ``dequantized``: the integers' form is lost, never silently)."""
    return Finding(
        FEATURE,
        Status.LOSSY,
        f"{'; '.join(forms)}; read as the float values the source decompresses them to (what it computes on), "
        "written as float weights only with --dequantize",
        alternative=FLOATS_ALTERNATIVE,
    )


def floats_only(layer: RecurrentLayer) -> RecurrentLayer:
    """``layer`` with float weights only (its quantized and lookup-table records dropped; W and R are their float
    view): what a writer writes when the user asked for float weights (``ASKED``)."""
    return replace(
        layer, directions=tuple(replace(p, Wq=None, Rq=None, Wlut=None, Rlut=None) for p in layer.directions)
    )


def lut_holders() -> tuple[str, ...]:
    """The formats whose writer keeps a lookup table (``PalettizedWeights``) as it is
    (``FormatInfo.holds_lookup_tables``)."""
    return tuple(name for name, info in registry.FORMATS.items() if info.holds_lookup_tables)


def held_table(layer: RecurrentLayer, how: str) -> Finding:
    """The lookup tables kept, ``how`` the target stores them (Core ML: constexpr_lut_to_dense ops)."""
    return Finding(
        FEATURE, Status.REPACKED, f"{layer.palettization_summary()}: the indices and palettes kept exactly, as {how}"
    )


def table_as_floats(layer: RecurrentLayer, target: str, reason: str | None = "") -> Finding:
    """A layer whose W or R the source stores as a lookup table, written as the palettes' values (what the source
    computes on, exactly) because ``target`` holds no table (``reason``: why; '' its format has none) or the user
    asked (``reason`` None): ``repacked`` (exactly the numbers the source computes on; the form is lost, the weights
    32 bits each), only with --dequantize."""
    holders = [h for h in lut_holders() if h != target]
    why = (
        "as asked (--dequantize)"
        if reason is None
        else "only with --dequantize ("
        + (reason or f"{target} holds no lookup table; {' or '.join(lut_holders())} keeps it")
        + ")"
    )
    return Finding(
        FEATURE,
        Status.REPACKED,
        f"{layer.palettization_summary()} (constexpr_lut_to_dense): written as float weights, each index replaced by "
        f"its palette's value (exactly what the source computes on), {why}",
        alternative=FLOATS_ALTERNATIVE
        + (f", or convert to {' or '.join(holders)}, which keeps the table" if holders else ""),
    )

"""Findings for writing a layer as a Core ML ML Program."""

from __future__ import annotations

import gatepack.converters.quantization as quantization
from gatepack.converters.feature_findings import findings, form_of, replacing
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    LUT,
    TARGETS,
    ChosenTarget,
    _target_rank,
    constexpr_op,
    lowest_target,
    lut_unholdable,
    safe_name,
    unholdable,
    written_straight,
)
from gatepack.converters.formats.coreml.registration import CAPABILITIES as COREML
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    RecurrentLayer,
)

# ---------------------------------------------------------------------------------------- findings


def check(
    layer: RecurrentLayer,
    *,
    strategy: str = "auto",
    minimum_deployment_target: str | None = None,
    compress_to_fp16: bool = False,
) -> list[Finding]:
    """Findings for writing ``layer`` as a Core ML ML Program with ``strategy`` (``capabilities.COREML``): the
    shared features, and what only Core ML has: fp16 packages, sanitised names, the deployment target (None: the
    lowest that expresses the layer, ``lowest_target``)."""
    target = minimum_deployment_target or lowest_target([layer], strategy, compress_to_fp16)
    _target_rank(target)
    form = form_of(layer, COREML, strategy, target)
    found = findings(layer, form, named=f"{form.op.name} op ({target})")
    found = replacing(found, _fp16_package(target) if compress_to_fp16 else None, _straight_line(layer, found))
    deployment = Finding(
        "deployment target", Status.EXACT, _deployment(target), chosen=isinstance(target, ChosenTarget)
    )
    return [*found, *_quantized(layer, target, form.chosen, compress_to_fp16), *_sanitised_names(layer), deployment]


def _quantized(layer: RecurrentLayer, target: str, chosen: str, compress_to_fp16: bool) -> list[Finding]:
    """A quantized layer's ``quantization`` finding: its integers kept as constexpr ops, or why they cannot be
    (``dequantized``, refused unless --dequantize)."""
    records = [r for p in layer.directions for r in (p.Wq, p.Rq) if r is not None]
    tables = [r for p in layer.directions for r in (p.Wlut, p.Rlut) if r is not None]
    if tables and not records:
        return [_tables(layer, tables, target, chosen, compress_to_fp16)]
    if not records:
        return []
    why = unholdable(records, target, compress_to_fp16)
    if why is not None:
        return [quantization.dequantized(layer, FORMAT, f"Core ML holds no such quantized weights: {why}")]
    consumer = (
        f"the {COREML.ops[layer.cell].name} op's weights" if chosen == "native" else "the while_loop cell's matmuls"
    )
    how = f"{constexpr_op(target)} ops ({target}) feeding {consumer}, the integers in the package's weight file"
    return [quantization.held(layer, how)]


def _tables(layer: RecurrentLayer, tables: list, target: str, chosen: str, compress_to_fp16: bool) -> Finding:
    """A palettized layer's ``quantization`` finding: its lookup tables kept as ``constexpr_lut_to_dense`` ops, or
    why they cannot be (written as the palettes' values, refused unless --dequantize)."""
    why = lut_unholdable(tables, target, compress_to_fp16)
    if why is not None:
        return quantization.table_as_floats(layer, FORMAT, f"Core ML cannot hold them here: {why}")
    consumer = (
        f"the {COREML.ops[layer.cell].name} op's weights" if chosen == "native" else "the while_loop cell's matmuls"
    )
    return quantization.held_table(layer, f"{LUT} ops ({target}) feeding {consumer}, in the package's weight file")


def _deployment(target: str) -> str:
    if isinstance(target, ChosenTarget):
        return f"{target}, chosen: {target.why} (--minimum-deployment-target to choose another)"
    return f"{target} (--minimum-deployment-target)"


def _straight_line(layer: RecurrentLayer, found: list[Finding]) -> Finding | None:
    """The decomposed ``cell`` finding of a layer of one fixed step: written straight-line, without a loop."""
    cell = next(f for f in found if f.feature == "cell")
    if cell.status is not Status.DECOMPOSED or not written_straight(layer):
        return None
    return Finding(
        "cell",
        Status.DECOMPOSED,
        "elementary MIL ops, the one step straight-line (a sequence of one fixed step: no while_loop, no recurrent "
        "op, so the layer can run on the Neural Engine)",
        warning=cell.warning,
    )


def _fp16_package(target: str) -> Finding:
    """The ``dtype`` finding of an fp16 package (``--compress-to-fp16``): lossy, and refused below iOS17."""
    since = COREML.since["fp16"]
    if _target_rank(target) < TARGETS.index(since):
        return Finding(
            "dtype",
            Status.UNSUPPORTED,
            f"fp16 packages need {since} or later; the target is {target}",
            alternative=f"pass --minimum-deployment-target {since}, or drop --compress-to-fp16",
        )
    return Finding(
        "dtype",
        Status.LOSSY,
        "fp16 weights and fp16 arithmetic (coremltools' fp16 cast pass; the interface stays float32; results "
        "differ ~1e-3)",
        alternative="drop --compress-to-fp16 for an fp32 package, or pass --allow-lossy",
    )


def _sanitised_names(layer: RecurrentLayer) -> list[Finding]:
    """A ``names`` finding when Core ML renames any of the layer's tensors (none otherwise)."""
    itf = layer.interface
    renamed = [n for n in (getattr(itf, r) for r in INPUT_ROLES + OUTPUT_ROLES) if n and safe_name(n) != n]
    if not renamed:
        return []
    sanitised = f"{', '.join(repr(n) for n in renamed)} to {', '.join(repr(safe_name(n)) for n in renamed)}"
    return [
        Finding(
            "names",
            Status.REPACKED,
            f"Core ML sanitises {sanitised}; the package's metadata keeps the originals, and gatepack's run takes "
            "either",
        )
    ]

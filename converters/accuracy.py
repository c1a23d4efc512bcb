"""The accuracy gate of a conversion that writes a quantized source's weights as floats (``--dequantize``).

Such an artifact cannot match the source within float rounding when the source's arithmetic is itself
quantized (onnxruntime's ``DynamicQuantizeLSTM`` quantizes X and h to uint8 at run time), and a fixed tolerance
either hides a misreading or fails a good conversion of a larger layer. So it is proven in two parts, on the
same drawn inputs:

1. **exact**: the artifact against the source's *dequantized twin*, the source written by its own format with
   float weights ``W = (q - zero_point) * scale`` and nothing else changed, at the float tolerances: the
   conversion itself changed nothing;
2. **measured**: the artifact against the quantized source, output by output, its largest error reported
   and judged against ``max_error`` (``--max-error E``) or, by default, against the source's own quantization
   noise: ``max |source - twin|`` on that output (plus float32's atol), the distance that is the source's own
   arithmetic rather than the conversion's.

The twin's distance to the source is printed either way, so a user sees what the quantized arithmetic costs.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import gatepack.converters.quantization as quantization
import gatepack.converters.registry as registry
from gatepack.converters.errors import UsageError
from gatepack.converters.samples import TOLERANCES
from gatepack.converters.verification import WHOLE_MODEL, OutputComparison, Tolerance, Verification, verify_models

if TYPE_CHECKING:
    from gatepack.converters.model import Model
    from gatepack.converters.verification import GivenInputs

VS_SOURCE = "vs the quantized source"
UNBOUNDED = Tolerance(1e300, 0.0)  # a comparison that only measures (judged afterwards)


@dataclass(frozen=True)
class Gate:
    """The user's bound on a lossy conversion's error (``max_error``; None: the source's quantization noise)."""

    max_error: float | None = None

    def __post_init__(self) -> None:
        value = self.max_error
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
            raise UsageError(f"max_error {value!r} is not a number >= 0")


def applies(source: "Model", dequantized: bool) -> bool:
    """Whether the conversion wrote a quantized source's weights as floats (the gate judges it)."""
    return dequantized and any(layer.is_quantized for layer in source.layers) and source.path is not None


def verify_dequantized(
    source: "Model", written: "Model", target_file, gate: Gate, *, seed: int = 0, given: "GivenInputs | None" = None
) -> Verification:
    """The artifact (``written``, being written at ``target_file``) exact against the source's dequantized twin,
    and measured against the source (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="gatepack-twin-") as scratch:
        twin = _twin(source, Path(scratch))
        exact = verify_models(twin, written, seed=seed, target_file=target_file, given=given)
        alike = twin if written.meta.get("other_ops") else replace(twin, meta={**twin.meta, "other_ops": None})
        noise = verify_models(source, alike, seed=seed, given=given, tolerance=UNBOUNDED)  # compared as ``measured``
    measured = verify_models(source, written, seed=seed, target_file=target_file, given=given, tolerance=UNBOUNDED)
    result = Verification(str(source.path), str(written.path), seed, inputs_used=exact.inputs_used)
    result.incomplete = exact.incomplete or measured.incomplete
    result.outputs = [replace(o, layer=o.layer, output=f"{o.output} vs the dequantized source") for o in exact.outputs]
    floor = TOLERANCES["float32"][0]
    own = {(o.layer, o.output): o.max_abs_error for o in noise.outputs}
    for o in measured.outputs:
        bound = gate.max_error if gate.max_error is not None else own.get((o.layer, o.output), 0.0) + floor
        result.outputs.append(_judged(o, bound))
    result.notes += exact.notes + [
        "a quantized source written with float weights is proven twice on the same inputs: exact against the "
        "source with its weights dequantized (float tolerances), and measured against the quantized source, "
        + (
            f"within --max-error {gate.max_error:g}"
            if gate.max_error is not None
            else f"within the source's own quantization noise (its distance to the dequantized source, + {floor:g})"
        ),
        "the source's own quantization noise (quantized source vs dequantized source): "
        + ", ".join(f"{o.output} {o.max_abs_error:.3g}" for o in noise.outputs),
        f"measured {VS_SOURCE}: " + "; ".join(_measurement(o) for o in measured.outputs),
    ]
    return result


def _measurement(comparison: OutputComparison) -> str:
    """'Y max 0.00061, mean 2.1e-04, argmax 100%, threshold 0: 99.8%' (one output)."""
    where = comparison.output if comparison.layer == WHOLE_MODEL else f"{comparison.layer} {comparison.output}"
    agreed = f", {comparison.agreement.text()}" if comparison.agreement is not None else ""
    return f"{where} max {comparison.max_abs_error:.2g}{agreed}"


def _judged(comparison: OutputComparison, bound: float) -> OutputComparison:
    """``comparison`` (made with an infinite atol) judged against ``bound`` on its largest absolute error."""
    passed = comparison.passed and comparison.max_abs_error <= bound
    return replace(comparison, output=f"{comparison.output} {VS_SOURCE}", atol=bound, rtol=0.0, passed=passed)


def _twin(source: "Model", scratch: Path) -> "Model":
    """The source written by its own format with float weights (``quantization.ASKED``), read back."""
    info, implementation = registry.writer(source.format)
    assert implementation.write is not None  # (registry.writer gives formats that write)
    path = scratch / f"twin{info.suffixes[0] if info.suffixes else ''}"
    implementation.write(replace(source, meta={**source.meta, quantization.ASKED: True}), path)
    twin = implementation.read(path)
    twin.path = path
    return twin

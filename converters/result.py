"""What ``convert`` returns: the artifact written, the findings per layer, the verification, in words and JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gatepack.converters.findings import Finding
    from gatepack.converters.verification import Verification


@dataclass
class Result:
    """What ``convert`` did: the output, the findings per layer, and the verification (None when
    ``verify=False``). ``whole``: the artifact holds the whole model; ``layers_only``: the user asked
    for the recurrent layers alone of a model with other operators."""

    source: str
    output: str
    format: str
    findings: dict[str, list["Finding"]] = field(default_factory=dict)
    verification: "Verification | None" = None
    layers_only: bool = False
    whole: bool = False

    @property
    def passed(self) -> bool:
        """True when the output was verified and every compared output agreed (False: not verified)."""
        return self.verification is not None and self.verification.passed

    def __repr__(self) -> str:
        """One line for a notebook: ``Result('m.onnx' -> 'm.xml' (openvino): 14 layer(s); ...; verification ...)``
        (``to_text()`` and ``to_json()`` give everything)."""
        return f"Result({self.source!r} -> {self.summary_line()})"

    def __str__(self) -> str:
        return self.to_text()

    def to_text(self) -> str:
        """The findings that are not plainly exact, grouped across layers, the verification, and one
        closing line: what was written, the features at each status short of exact, the verdict."""
        from gatepack.converters.reporting import group_findings, where_text

        lines = [f"converted {self.source} -> {self.output} ({self.format}): {len(self.findings)} layer(s)"]
        for g in group_findings(list(self.findings.items())):
            f = g.finding
            who = where_text(g.layers, len(self.findings)) or g.layers[0]
            detail = f"{g.variants} variants, e.g. {f.detail}" if g.variants > 1 else f.detail
            warning = f" [warning: {f.warning}]" if f.warning else ""
            lines.append(f"  {who}: {f.status.value} {f.feature}: {detail}{warning}")
        lines.append(self.verification.to_text() if self.verification else "verification skipped (verify=False)")
        lines.append(self.summary_line())
        return "\n".join(lines)

    def summary_line(self) -> str:
        """'wrote out.xml (openvino, whole model): 28 layers; folded: bias; repacked: layout; verification passed
        (56 outputs, largest error 7.6e-06 in conv_cache_out)'."""
        from gatepack.converters.findings import Status

        what = "whole model" if self.whole else "layers only, as asked" if self.layers_only else "layers"
        parts = [f"wrote {self.output} ({self.format}, {what}): {len(self.findings)} layer(s)"]
        by_status: dict[Status, list[str]] = {}
        left_out = False  # the model finding of layers written alone, as asked: the operators around them are gone
        for findings in self.findings.values():
            for f in findings:
                if f.feature == "model" and self.layers_only:
                    left_out = True
                elif f.status is not Status.EXACT and f.feature not in by_status.setdefault(f.status, []):
                    by_status[f.status].append(f.feature)
        lossy = by_status.get(Status.LOSSY, [])
        if "quantization" in lossy:
            lossy[lossy.index("quantization")] += self._measured_quantization()
        ranked = sorted(by_status.items(), key=lambda kv: kv[0].rank)
        parts += [f"{status.value}: {', '.join(features)}" for status, features in ranked]
        if not ranked:
            parts.append("every feature of the layers exact" if left_out else "every feature exact")
        if left_out:
            parts.append("the operators around them left out, as asked")
        parts.append(self.verification.verdict() if self.verification else "not verified")
        return "; ".join(parts)

    def _measured_quantization(self) -> str:
        """' (measured: max 0.00163 vs the quantized source)': a lossy quantization's number, the largest error of the
        outputs the accuracy gate compared with the quantized source ('' where none was)."""
        from gatepack.converters.accuracy import VS_SOURCE

        outputs = self.verification.outputs if self.verification else []
        measured = [o.max_abs_error for o in outputs if o.output.endswith(VS_SOURCE)]
        return f" (measured: max {max(measured):.3g} {VS_SOURCE})" if measured else ""

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "output": self.output,
            "format": self.format,
            "whole_model": self.whole,
            "layers_only": self.layers_only,
            "findings": {name: [f.to_json() for f in fs] for name, fs in self.findings.items()},
            "verification": self.verification.to_json() if self.verification else None,
        }

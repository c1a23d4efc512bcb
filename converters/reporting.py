"""The layout-compatibility report: per layer and target, what each feature becomes.

JSON shape (docs/design.md, "Findings"; extra keys are additions)::

    {"source": ..., "format": ...,
     "layers": [{"name": ..., "cell": ..., "direction": ..., "hidden_size": ..., "input_size": ...,
                 "targets": {FORMAT: {"status": WORST, "findings": [{"feature", "status", "detail", ...}]}}}],
     "skipped": [{"name": ..., "reason": ...}]}
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

from gatepack.converters import registry
from gatepack.converters.findings import Finding, Status, operator_list, sort_worst_first, worst
from gatepack.converters.model import Model, chained_input_finding
from gatepack.schemas.layer import RecurrentLayer


@dataclass
class TargetReport:
    status: Status
    findings: list[Finding]

    def to_json(self) -> dict:
        return {"status": self.status.value, "findings": [f.to_json() for f in self.findings]}


@dataclass
class LayerReport:
    layer: RecurrentLayer
    targets: dict[str, TargetReport] = field(default_factory=dict)

    def to_json(self) -> dict:
        lay = self.layer
        return {
            "name": lay.name,
            "cell": lay.cell.value,
            "direction": lay.direction.value,
            "input_size": lay.input_size,
            "hidden_size": lay.hidden_size,
            "linear_before_reset": lay.linear_before_reset,
            "targets": {name: t.to_json() for name, t in self.targets.items()},
        }


@dataclass
class GroupedFinding:
    """One finding as it occurs in several layers (``variants`` > 1: several details, one feature)."""

    finding: Finding
    layers: list[str]
    variants: int = 1


@dataclass
class Report:
    source: str
    format: str
    layers: list[LayerReport]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "format": self.format,
            "layers": [lay.to_json() for lay in self.layers],
            "skipped": [{"name": n, "reason": r} for n, r in self.skipped],
        }

    def targets(self) -> list[str]:
        return list(self.layers[0].targets) if self.layers else []

    def render(self, fmt: str = "text") -> str:
        return {
            "text": self.to_text,
            "json": lambda: json.dumps(self.to_json(), indent=2),
            "markdown": self.to_markdown,
            "html": self.to_html,
        }[fmt]()

    def summary(self, target: str, *, everything: bool = False) -> list["GroupedFinding"]:
        """``target``'s findings over every layer, identical ones grouped with their layers, worst
        first; a feature whose detail differs in more than 3 ways (e.g. per-layer tensor names) is
        one line. Without ``everything``: only what is not exact, and warnings."""
        groups: dict[str, GroupedFinding] = {}
        for lay in self.layers:
            for f in lay.targets[target].findings:
                if everything or f.status is not Status.EXACT or f.warning:
                    key = json.dumps(f.to_json(), sort_keys=True)
                    groups.setdefault(key, GroupedFinding(f, [])).layers.append(lay.layer.name)
        by_feature: dict[tuple, list[GroupedFinding]] = {}
        for g in groups.values():
            by_feature.setdefault((g.finding.status.rank, g.finding.feature), []).append(g)
        out = []
        for (_, _), items in sorted(by_feature.items(), key=lambda kv: kv[0][0]):
            if len(items) > 3:
                layers = [name for g in items for name in g.layers]
                out.append(GroupedFinding(items[0].finding, layers, len(items)))
            else:
                out += items
        return out

    def status_counts(self, target: str) -> str:
        counts: dict[Status, int] = {}
        for lay in self.layers:
            counts[lay.targets[target].status] = counts.get(lay.targets[target].status, 0) + 1
        return ", ".join(f"{n} {status.value}" for status, n in sorted(counts.items(), key=lambda kv: kv[0].rank))

    def _where(self, group: "GroupedFinding") -> str:
        """Which layers a grouped finding is about ('' for a one-layer report)."""
        total = len(self.layers)
        if total == 1:
            return ""
        if len(group.layers) == total:
            return f"all {total} layers"
        shown = ", ".join(group.layers[:3]) + (f" and {len(group.layers) - 3} more" if len(group.layers) > 3 else "")
        return f"{len(group.layers)} layer{'s' if len(group.layers) > 1 else ''}: {shown}"

    def to_text(self) -> str:
        targets = self.targets()
        lines = [f"{self.source} ({self.format}): {len(self.layers)} recurrent layer(s)"]
        width = max([len(_layer_label(lay)) for lay in self.layers] + [5])
        lines.append("  " + "layer".ljust(width) + "  " + "  ".join(t.ljust(11) for t in targets))
        for lay in self.layers:
            lines.append(
                "  "
                + _layer_label(lay).ljust(width)
                + "  "
                + "  ".join(lay.targets[t].status.value.ljust(11) for t in targets)
            )
        for target in targets:
            lines.append(f"{target}: {self.status_counts(target)}")
            for g in self.summary(target):
                f, where = g.finding, self._where(g)
                detail = f"{g.variants} variants, e.g. {f.detail}" if g.variants > 1 else f.detail
                lines.append(
                    f"  {f.status.value:<11} {f.feature}: {detail}"
                    + (f" [warning: {f.warning}]" if f.warning else "")
                    + (f" -> {f.alternative}" if f.alternative else "")
                    + (f" ({where})" if where else "")
                )
        for name, reason in self.skipped:
            lines.append(f"skipped {name}: {reason}")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        targets = self.targets()
        out = [
            f"# gatepack report: `{self.source}`",
            "",
            f"{len(self.layers)} recurrent layer(s), source format `{self.format}`.",
            "",
        ]
        out.append("| layer | " + " | ".join(targets) + " |")
        out.append("|---|" + "---|" * len(targets))
        for lay in self.layers:
            out.append(
                f"| `{lay.layer.name}` ({_describe(lay.layer)}) | "
                + " | ".join(lay.targets[t].status.value for t in targets)
                + " |"
            )
        many = len(self.layers) > 1
        for target in targets:
            out += [
                "",
                f"## {target}: {self.status_counts(target)}",
                "",
                "| feature | status | detail |" + (" layers |" if many else ""),
                "|---|---|---|" + ("---|" if many else ""),
            ]
            for g in self.summary(target, everything=True):
                f = g.finding
                detail = (
                    (f"{g.variants} variants, e.g. " if g.variants > 1 else "")
                    + f.detail
                    + (f" **Warning:** {f.warning}." if f.warning else "")
                    + (f" Instead: {f.alternative}." if f.alternative else "")
                )
                out.append(
                    f"| {f.feature} | {f.status.value} | {detail.replace('|', '/')} |"
                    + (f" {self._where(g)} |" if many else "")
                )
        if self.skipped:
            out += ["", "## Skipped", ""] + [f"- `{n}`: {r}" for n, r in self.skipped]
        return "\n".join(out).rstrip() + "\n"

    def to_html(self) -> str:
        targets = self.targets()
        esc = html.escape
        rows = []
        for lay in self.layers:
            cells = []
            for t in targets:
                tr = lay.targets[t]
                items = "".join(
                    f"<li class='{f.status.value}'><b>{esc(f.feature)}</b> <i>{f.status.value}</i>: {esc(f.detail)}"
                    + (f" <em>warning: {esc(f.warning)}</em>" if f.warning else "")
                    + (f" <em>instead: {esc(f.alternative)}</em>" if f.alternative else "")
                    + "</li>"
                    for f in tr.findings
                )
                summary = f"<summary>{tr.status.value}</summary>"
                cells.append(f"<td class='{tr.status.value}'><details>{summary}<ul>{items}</ul></details></td>")
            rows.append(
                f"<tr><th>{esc(lay.layer.name)}<br><small>{esc(_describe(lay.layer))}</small></th>{''.join(cells)}</tr>"
            )
        style = (
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid "
            "#ccc;padding:4px 8px;vertical-align:top;text-align:left}"
            ".exact{background:#d4f7d4}.repacked{background:#e3f2d0}.folded{background:#f0f3c8}.decomposed{background:#fbe7b5}"
            ".lossy{background:#fbd0a8}.unsupported{background:#f6b0b0}li{background:none}"
        )
        head = "".join(f"<th>{esc(t)}</th>" for t in targets)
        legend = " ".join(
            f"<span class='{status.value}'>&nbsp;{status.value}&nbsp;</span>"
            for status in sorted(Status, key=lambda st: st.rank, reverse=True)
        )
        return (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gatepack "
            f"report</title><style>{style}</style></head><body>"
            f"<h1>gatepack report</h1><p>{esc(self.source)} ({esc(self.format)}): {len(self.layers)} recurrent "
            "layer(s)</p>"
            f"<table id='matrix'><tr><th>layer</th>{head}</tr>{''.join(rows)}</table>"
            f"<p id='legend'>{legend} &mdash; a cell shows the worst status of its findings; open it for every "
            "finding.</p>"
            f"<h2>Per target</h2><div id='summary'>{self._html_summary()}</div></body></html>\n"
        )

    def _html_summary(self) -> str:
        """Each target's findings over all layers, grouped (what is not exact, and warnings)."""
        esc = html.escape
        parts = []
        for target in self.targets():
            items = []
            for g in self.summary(target):
                f, where = g.finding, self._where(g)
                detail = (f"{g.variants} variants, e.g. " if g.variants > 1 else "") + f.detail
                items.append(
                    f"<li><span class='{f.status.value}'>&nbsp;{f.status.value}&nbsp;</span> "
                    f"<b>{esc(f.feature)}</b>: {esc(detail)}"
                    + (f" <em>warning: {esc(f.warning)}</em>" if f.warning else "")
                    + (f" <em>instead: {esc(f.alternative)}</em>" if f.alternative else "")
                    + (f" <small>({esc(where)})</small>" if where else "")
                    + "</li>"
                )
            parts.append(
                f"<h3>{esc(target)}: "
                f"{esc(self.status_counts(target))}</h3><ul>{''.join(items) or '<li>every feature exact</li>'}</ul>"
            )
        return "".join(parts)


def _describe(layer: RecurrentLayer) -> str:
    lbr = f", lbr={int(layer.linear_before_reset)}" if layer.cell.spec.reset_placement else ""
    return f"{layer.cell.op_name} {layer.direction.value}, I={layer.input_size}, H={layer.hidden_size}{lbr}"


def _layer_label(lay: LayerReport) -> str:
    return f"{lay.layer.name} ({_describe(lay.layer)})"


def target_findings(model: Model, layer: RecurrentLayer, target: str, options: dict) -> list[Finding]:
    """Everything that happens to ``layer`` when written as ``target``, worst first (``options``: write
    options, each passed to the targets that take it)."""
    info, implementation = registry.writer(target)
    accepted = {k: v for k, v in options.items() if k in info.option_names}
    whole = implementation.whole_model_finding(model)
    chained = chained_input_finding(model, layer) if whole is None else None  # side-by-side layers only
    found = implementation.check(layer, **accepted) + [_surroundings_finding(model, whole, info.title), chained]
    return sort_worst_first(list(model.notes_for(layer)) + [f for f in found if f is not None])


def _surroundings_finding(model: Model, whole: Finding | None, title: str) -> Finding | None:
    """What happens to the operators around the recurrent layers (None: the model has none). A
    format that writes whole models says so itself (``whole``: its ``whole_model_finding``)."""
    other = model.meta.get("other_ops")
    if not other:
        return None
    return whole or Finding(
        "model",
        Status.EXACT,
        f"only the recurrent layers are written; the model's other operators ({operator_list(other)}) are not part "
        f"of the {title} artifact",
        warning="layers only",
    )


def build_report(model: Model, targets: list[str], options: dict | None = None) -> Report:
    options = options or {}
    layers = []
    for layer in model.layers:
        lay = LayerReport(layer)
        for target in targets:
            found = target_findings(model, layer, target, options)
            lay.targets[target] = TargetReport(worst(found), found)
        layers.append(lay)
    return Report(str(model.path), model.format, layers, list(model.skipped))

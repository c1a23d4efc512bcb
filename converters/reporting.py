"""The layout-compatibility report: per layer and target, what each feature becomes.

JSON shape (docs/design.md, "Findings"; extra keys are additions)::

    {"source": ..., "format": ..., "gatepack_version": "0.2.0", "created": "2026-11-26T17:02:03Z" (UTC),
     "model": {FORMAT: {"feature": "model", "status", "detail", ...}},   # only for models with other operators
     "layers": [{"name": ..., "cell": ..., "direction": ..., "hidden_size": ..., "input_size": ...,
                 "targets": {FORMAT: {"status": WORST, "findings": [{"feature", "status", "detail", ...}]}}}],
     "skipped": [{"name": ..., "reason": ...}]}

Its JSON Schema is ``report_schema()``: ``schemas/report.schema.json`` with the registry's format names.
"""

from __future__ import annotations

import functools
import html
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

import gatepack.converters.quantization as quantization
import gatepack.converters.registry as registry
from gatepack.converters.feature_findings import mask as mask_findings
from gatepack.converters.feature_findings import replacing
from gatepack.converters.findings import Finding, Status, sort_worst_first, worst
from gatepack.converters.model import Model, chained_input_finding
from gatepack.schemas.layer import ROLE_LABELS, RecurrentLayer
from gatepack.version import __version__

if TYPE_CHECKING:
    from gatepack.converters.quantized_report import QuantizedTarget

LAYERS_ONLY_WARNING = "layers only, as asked"  # the ``model`` finding's warning when the user asked for the layers


def report_schema() -> dict:
    """The JSON Schema a JSON report follows: ``schemas/report.schema.json``, whose ``$defs.format`` and
    ``$defs.cell`` name no format and no cell, with the registry's format names and the cell table's cells as their
    enums (a format or cell registered later is one of them too)."""
    from importlib.resources import files

    from gatepack.schemas.cells import Cell

    schema = json.loads(files("gatepack.schemas").joinpath("report.schema.json").read_text())
    schema["$defs"]["format"] = {**schema["$defs"]["format"], "enum": list(registry.FORMATS)}
    schema["$defs"]["cell"] = {**schema["$defs"]["cell"], "enum": [cell.value for cell in Cell]}
    return schema


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


def group_findings(per_layer: list[tuple[str, list[Finding]]], everything: bool = False) -> list[GroupedFinding]:
    """Findings over many layers, identical ones grouped with their layers, worst first; a feature
    whose detail differs in more than 3 ways (e.g. per-layer tensor names) is one line. Without
    ``everything``: only what is not exact, warnings, and values gatepack chose."""
    groups: dict[str, GroupedFinding] = {}
    for name, findings in per_layer:
        for f in findings:
            if everything or f.status is not Status.EXACT or f.warning or f.chosen:
                key = json.dumps(f.to_json(), sort_keys=True)
                groups.setdefault(key, GroupedFinding(f, [])).layers.append(name)
    by_feature: dict[tuple, list[GroupedFinding]] = {}
    for g in groups.values():
        by_feature.setdefault((g.finding.status.rank, g.finding.feature), []).append(g)
    out = []
    for _, items in sorted(by_feature.items(), key=lambda kv: kv[0][0]):
        if len(items) > 3:
            layers = [name for g in items for name in g.layers]
            out.append(GroupedFinding(items[0].finding, layers, len(items)))
        else:
            out += items
    return out


def where_text(layers: list[str], total: int) -> str:
    """Which of ``total`` layers a grouped finding is about ('' when there is one layer)."""
    if total == 1:
        return ""
    if len(layers) == total:
        return f"all {total} layers"
    shown = ", ".join(layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
    return f"{len(layers)} layer{'s' if len(layers) > 1 else ''}: {shown}"


@dataclass
class Report:
    source: str
    format: str
    layers: list[LayerReport]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    model: dict[str, Finding | None] = field(default_factory=dict)  # per target: its ``model`` finding
    version: str = ""  # the gatepack that made the report
    created: str = ""  # when, UTC, ISO 8601 to the second ('2026-11-26T17:02:03Z')
    quantized: dict[str, "QuantizedTarget"] = field(default_factory=dict)  # per target, with --quantize-weights

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "format": self.format,
            "gatepack_version": self.version,
            "created": self.created,
            "model": {t: f.to_json() for t, f in self.model.items() if f is not None},
            "layers": [lay.to_json() for lay in self.layers],
            "skipped": [{"name": n, "reason": r} for n, r in self.skipped],
            **({"quantized": {t: q.to_json() for t, q in self.quantized.items()}} if self.quantized else {}),
        }

    def targets(self) -> list[str]:
        return list(self.layers[0].targets) if self.layers else []

    def __repr__(self) -> str:
        """One line for a notebook: the source, its layers, and each target's status counts (``render()`` gives
        the whole report; a notebook shows the HTML one, ``_repr_html_``)."""
        targets = "; ".join(f"{t}: {self.status_counts(t)}" for t in self.targets())
        return f"Report({self.source!r}, {len(self.layers)} layer(s); {targets})"

    def __str__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return self.to_html()

    def render(self, fmt: str = "text") -> str:
        return {
            "text": self.to_text,
            "json": lambda: json.dumps(self.to_json(), indent=2),
            "markdown": self.to_markdown,
            "html": self.to_html,
        }[fmt]()

    def summary(self, target: str, *, everything: bool = False) -> list["GroupedFinding"]:
        """``target``'s findings over every layer, grouped (``group_findings``)."""
        return group_findings([(lay.layer.name, lay.targets[target].findings) for lay in self.layers], everything)

    def status_counts(self, target: str) -> str:
        counts: dict[Status, int] = {}
        for lay in self.layers:
            counts[lay.targets[target].status] = counts.get(lay.targets[target].status, 0) + 1
        return ", ".join(f"{n} {status.value}" for status, n in sorted(counts.items(), key=lambda kv: kv[0].rank))

    def _where(self, group: "GroupedFinding") -> str:
        """Which layers a grouped finding is about ('' for a one-layer report)."""
        return where_text(group.layers, len(self.layers))

    def to_text(self) -> str:
        """The per-layer table (layers with the same findings for every target folded into one row with their
        count), then per target its status counts and its findings, grouped over the layers."""
        targets = self.targets()
        lines = [f"{self.source} ({self.format}): {len(self.layers)} recurrent layer(s)"]
        rows = [(_group_label(group), group[0]) for group in self.layer_groups(same_kind=False)]
        width = max([len(label) for label, _ in rows] + [5])
        lines.append("  " + "layer".ljust(width) + "  " + "  ".join(t.ljust(11) for t in targets))
        for label, lay in rows:
            lines.append(
                "  " + label.ljust(width) + "  " + "  ".join(lay.targets[t].status.value.ljust(11) for t in targets)
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
        lines += [f"quantized for {target}: {q.text()}" for target, q in self.quantized.items()]
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
        if self.quantized:
            out += ["", "## Weights quantized as asked", ""] + [f"- {t}: {q.text()}" for t, q in self.quantized.items()]
        return "\n".join(out).rstrip() + "\n"

    def layer_groups(self, same_kind: bool = True) -> list[list[LayerReport]]:
        """Layers with the same findings for every target (feature, status, warning and alternative; details
        such as shapes and tensor names may differ), in first-seen order; with ``same_kind``, also of one kind
        (cell, direction, sizes)."""
        groups: dict[str, list[LayerReport]] = {}
        for lay in self.layers:
            outline = {
                t: [(f.feature, f.status.value, f.warning, f.alternative) for f in r.findings]
                for t, r in lay.targets.items()
            }
            kind = _describe(lay.layer) if same_kind else ""
            groups.setdefault(json.dumps([kind, outline]), []).append(lay)
        return list(groups.values())

    def caveats(self, target: str) -> list[Finding]:
        """What a user of ``target`` must know first: the ``model`` finding when the operators around
        the layers are not kept, and every warning (runtime doubts, layers only), each once."""
        found: dict[str, Finding] = {}
        model = self.model.get(target)
        if model is not None and (model.status is not Status.EXACT or model.warning):
            found[json.dumps(model.to_json(), sort_keys=True)] = model
        for lay in self.layers:
            for f in lay.targets[target].findings:
                if f.warning and f.feature != "model":
                    found.setdefault(json.dumps(f.to_json(), sort_keys=True), f)
        return list(found.values())

    def to_html(self) -> str:
        """One page: the per-target summary and caveats first, then the layers (identical ones grouped,
        filterable by target and status, each cell's findings one click away), then every finding
        per target; the gatepack version and the date it was made at the top."""
        esc = html.escape
        head = "".join(f"<th data-target='{esc(t)}'>{esc(t)}</th>" for t in self.targets())
        legend = " ".join(
            f"<span class='{status.value}'>&nbsp;{status.value}&nbsp;</span>"
            for status in sorted(Status, key=lambda st: st.rank, reverse=True)
        )
        caveats = self._html_caveats()
        skipped = "".join(f"<li><b>{esc(n)}</b>: {esc(r)}</li>" for n, r in self.skipped)
        quantized = "".join(f"<li><b>{esc(t)}</b>: {esc(q.text())}</li>" for t, q in self.quantized.items())
        return (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gatepack report</title>"
            f"<style>{_HTML_STYLE}</style></head><body>"
            f"<h1>gatepack report</h1><p id='intro'>{self._html_intro()}</p>"
            f"<p id='generated'>made by gatepack {esc(self.version)} on {esc(self.created)}</p>"
            "<h2>Targets</h2><table id='targets'><tr><th>target</th><th>worst</th><th>layers</th><th>model</th>"
            f"<th>caveats</th></tr>{self._html_target_rows()}</table>"
            + (f"<h2>Caveats</h2><ul id='caveats'>{caveats}</ul>" if caveats else "")
            + f"<h2>Layers</h2>{self._html_filters()}"
            f"<table id='matrix'><tr><th>layer</th>{head}</tr>"
            f"{''.join(self._html_group_row(group) for group in self.layer_groups())}</table>"
            f"<p id='legend'>{legend} &mdash; a cell shows the worst status of its findings; open it for every "
            "finding. Layers of one kind with the same findings for every target share one row (details such as "
            "shapes and tensor names may differ: open a cell).</p>"
            + (f"<h2>Skipped</h2><ul id='skipped'>{skipped}</ul>" if skipped else "")
            + (f"<h2>Weights quantized as asked</h2><ul id='quantized'>{quantized}</ul>" if quantized else "")
            + f"<h2>Per target</h2><div id='summary'>{self._html_summary()}</div>"
            f"<script>{_HTML_SCRIPT}</script></body></html>\n"
        )

    def _html_intro(self) -> str:
        """What the source holds; the operators around its layers only when it has some (a ``model`` finding),
        and what the targets do with them."""
        intro = f"{html.escape(self.source)} ({html.escape(self.format)}): {len(self.layers)} recurrent layer(s)"
        found = {t: f for t, f in self.model.items() if f is not None}
        if not found:
            return intro
        if any(f.warning == LAYERS_ONLY_WARNING for f in found.values()):
            return intro + "; the model has other operators around them, left out as asked (the layers alone)"
        keepers = [t for t, f in found.items() if f.status is not Status.UNSUPPORTED]
        if not keepers:
            return intro + "; the model has other operators around them, which no target keeps"
        others = [t for t in self.targets() if t not in keepers]
        return (
            intro
            + f"; the model has other operators around them, which {', '.join(keepers)} "
            + f"keep{'s' if len(keepers) == 1 else ''}"
            + (f" and {', '.join(others)} cannot hold" if others else "")
        )

    def _html_target_rows(self) -> str:
        """A row per target: its worst status, its layers' status counts, what it does with the model, caveats."""
        esc = html.escape
        rows = []
        for t in self.targets():
            badges = " ".join(
                f"<span class='badge {word.split()[1]}'>{esc(word)}</span>"
                for word in self.status_counts(t).split(", ")
                if word
            )
            model = self.model.get(t)
            whole = (
                "&mdash;"
                if model is None
                else f"<span class='badge {model.status.value}'>"
                + ("whole model" if model.status is not Status.UNSUPPORTED else "layers only")
                + "</span>"
            )
            rows.append(
                f"<tr data-target='{esc(t)}'><th>{esc(t)}</th><td class='{self._worst(t).value}'>"
                f"{self._worst(t).value}</td><td>{badges}</td><td>{whole}</td><td>{len(self.caveats(t))}</td></tr>"
            )
        return "".join(rows)

    def _html_caveats(self) -> str:
        """Every target's caveats as list items ('' when there are none)."""
        esc = html.escape
        return "".join(
            f"<li data-target='{esc(t)}'><b>{esc(t)}</b> <span class='badge {f.status.value}'>"
            f"{f.status.value}</span> <b>{esc(f.feature)}</b>: {esc(f.detail)}"
            + (f" <em>warning: {esc(f.warning)}</em>" if f.warning else "")
            + (f" <em>instead: {esc(f.alternative)}</em>" if f.alternative else "")
            + "</li>"
            for t in self.targets()
            for f in self.caveats(t)
        )

    def _html_filters(self) -> str:
        """The checkboxes that show or hide targets' columns and statuses' rows."""
        esc = html.escape
        return (
            "<fieldset id='filters'><legend>show</legend>targets: "
            + " ".join(
                f"<label><input type='checkbox' checked data-target='{esc(t)}'> {esc(t)}</label>"
                for t in self.targets()
            )
            + " &nbsp; statuses: "
            + " ".join(
                f"<label class='{st.value}'><input type='checkbox' checked data-status='{st.value}'> {st.value}</label>"
                for st in sorted(Status, key=lambda st: st.rank)
            )
            + "</fieldset>"
        )

    def _html_group_row(self, group: list[LayerReport]) -> str:
        """One row of the layer matrix for layers of one kind with the same findings: per target a cell with
        its worst status, its findings one click away (a detail that differs between the layers says so)."""
        esc = html.escape
        first = group[0]
        names = (
            esc(first.layer.name)
            if len(group) == 1
            else f"{len(group)} layers <details class='names'><summary>list</summary><ul>"
            + "".join(f"<li>{esc(lay.layer.name)}</li>" for lay in group)
            + "</ul></details>"
        )
        cells = []
        for t in self.targets():
            tr = first.targets[t]
            variants = [len({lay.targets[t].findings[k].detail for lay in group}) for k in range(len(tr.findings))]
            items = "".join(
                f"<li class='{f.status.value}'><b>{esc(f.feature)}</b> <i>{f.status.value}</i>: {esc(f.detail)}"
                + (f" <small>({esc(first.layer.name)}; {n - 1} other variant(s) here)</small>" if n > 1 else "")
                + (f" <em>warning: {esc(f.warning)}</em>" if f.warning else "")
                + (f" <em>instead: {esc(f.alternative)}</em>" if f.alternative else "")
                + "</li>"
                for f, n in zip(tr.findings, variants)
            )
            cells.append(
                f"<td class='{tr.status.value}' data-target='{esc(t)}' data-status='{tr.status.value}'>"
                f"<details><summary>{tr.status.value}</summary><ul>{items}</ul></details></td>"
            )
        return (
            f"<tr class='group'><th>{names}<br><small>{esc(_describe(first.layer))}</small></th>{''.join(cells)}</tr>"
        )

    def _worst(self, target: str) -> Status:
        return min((lay.targets[target].status for lay in self.layers), key=lambda st: st.rank, default=Status.EXACT)

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


_HTML_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid "
    "#ccc;padding:4px 8px;vertical-align:top;text-align:left}.badge{padding:1px 6px;border-radius:3px;margin-right:4px}"
    ".exact{background:#d4f7d4}.repacked{background:#e3f2d0}.folded{background:#f0f3c8}.decomposed{background:#fbe7b5}"
    ".lossy{background:#fbd0a8}.unsupported{background:#f6b0b0}li{background:none}#caveats li{margin:4px 0}"
    "details.names{display:inline}fieldset{border:1px solid #ccc;margin-bottom:8px}label{margin-right:8px}"
)
# Filters: unchecked targets hide their columns; a layer row shows when one of its visible cells has a
# checked status. The page's address may preset them: #targets=onnx,openvino&status=unsupported,lossy.
_HTML_SCRIPT = """
const boxes = (key) => [...document.querySelectorAll('#filters input[data-' + key + ']')];
function applyFilters() {
  const hidden = new Set(boxes('target').filter(b => !b.checked).map(b => b.dataset.target));
  const shown = new Set(boxes('status').filter(b => b.checked).map(b => b.dataset.status));
  document.querySelectorAll('#matrix [data-target], #targets [data-target], #caveats [data-target]').forEach(el => {
    el.style.display = hidden.has(el.dataset.target) ? 'none' : '';
  });
  document.querySelectorAll('#matrix tr.group').forEach(row => {
    const cells = [...row.querySelectorAll('td[data-target]')].filter(td => !hidden.has(td.dataset.target));
    row.style.display = cells.some(td => shown.has(td.dataset.status)) ? '' : 'none';
  });
}
const preset = new URLSearchParams(location.hash.slice(1));
for (const [key, attr] of [['targets', 'target'], ['status', 'status']]) {
  if (preset.has(key)) {
    const wanted = new Set(preset.get(key).split(','));
    boxes(attr).forEach(b => { b.checked = wanted.has(b.dataset[attr]); });
  }
}
boxes('target').concat(boxes('status')).forEach(b => b.addEventListener('change', applyFilters));
applyFilters();
document.body.dataset.ready = 'yes';
"""


def _describe(layer: RecurrentLayer) -> str:
    lbr = f", lbr={int(layer.linear_before_reset)}" if layer.cell.spec.reset_placement else ""
    quantized = ", quantized weights" if layer.is_quantized else ""
    return f"{layer.cell.op_name} {layer.direction.value}, I={layer.input_size}, H={layer.hidden_size}{lbr}{quantized}"


def _layer_label(lay: LayerReport) -> str:
    return f"{lay.layer.name} ({_describe(lay.layer)})"


def _group_label(group: list[LayerReport]) -> str:
    """A text table row's label: one layer with its kind, or 'N layers (their kinds): the first three and N more'."""
    if len(group) == 1:
        return _layer_label(group[0])
    kinds = ", ".join(dict.fromkeys(f"{lay.layer.cell.op_name} {lay.layer.direction.value}" for lay in group))
    names = ", ".join(lay.layer.name for lay in group[:3]) + (f" and {len(group) - 3} more" if len(group) > 3 else "")
    return f"{len(group)} layers ({kinds}): {names}"


def target_findings(
    model: Model, layer: RecurrentLayer, target: str, options: dict, surroundings: Finding | None = None
) -> list[Finding]:
    """Everything that happens to ``layer`` when written as ``target``, worst first (``options``: write
    options, each passed to the targets that take it; ``surroundings``: the target's ``model`` finding,
    from ``model_finding``)."""
    info, implementation = registry.writer(target)
    refused = registry.cell_refusal(info, layer)
    if refused is not None:  # nothing else about the layer is checked: the format's module cannot hold it
        return sort_worst_first(list(model.notes_for(layer)) + [f for f in (refused, surroundings) if f is not None])
    options = implementation.settle_options(model, {k: v for k, v in options.items() if k in info.option_names})
    keeps_whole = surroundings is not None and surroundings.status is not Status.UNSUPPORTED
    accepted = {k: v for k, v in options.items() if k not in MODEL_OPTIONS or info.stateful_layers}
    if info.stateful_layers and accepted.get("stateful") and not keeps_whole:  # the layer's own pairs decide
        accepted["state_pairs"] = model.meta.get("state_pairs") or []  # (a whole model's: its ``state`` finding)
    if keeps_whole and "opset" in info.option_names and "opset" not in accepted and "opset" in model.meta:
        accepted["opset"] = model.meta["opset"]  # a whole model keeps its own
    chained = None if keeps_whole else chained_input_finding(model, layer)  # side-by-side layers only
    state = state_finding(model, target, bool(options.get("stateful"))) if keeps_whole else None
    assert implementation.check is not None  # registry.writer returns formats that write, and check
    whole = implementation.whole_layer_findings if keeps_whole and implementation.whole_layer_findings else None
    own = whole(model, layer) if whole else []  # (a ``model`` finding of its own: the layer is not written)
    checked = replacing(implementation.check(layer, **accepted), *mask_findings(layer, target, keeps_whole), *own)
    surroundings = None if any(f.feature == "model" for f in own) else surroundings
    found = [*checked, surroundings, chained, state]
    found = quantization.with_finding(layer, target, found, bool(model.meta.get(quantization.ASKED)))
    held = constant_findings(layer, info.constant_form)
    kept = [f for f in found if f is not None and f.feature not in {h.feature for h in held}] + held
    return sort_worst_first(list(model.notes_for(layer)) + kept)


MODEL_OPTIONS = {"stateful"}  # write options about the whole model, not checked per layer


def state_finding(model: Model, target: str, stateful: bool) -> Finding | None:
    """What becomes of a streaming model's state pairs (``Model.meta['state_pairs']``) in ``target``: kept as
    graph inputs and outputs under the source's names (an app's loop needs no change), or held by the runtime."""
    pairs = model.meta.get("state_pairs")
    if not pairs:
        return None
    named = ", ".join(f"{o} -> {i}" for i, o in pairs)
    info = registry.check_name(target)
    if stateful and info.held_state_dtype == "float16":
        return Finding(
            "state",
            Status.LOSSY,
            f"{len(pairs)} state pair(s) held as {info.states_held_as}, which are fp16 only: each call's new state "
            f"is rounded to fp16 ({named}); verified over consecutive calls at the fp16 tolerance",
            alternative="leave out --stateful: the states stay fp32 inputs and outputs",
        )
    if stateful:
        return Finding(
            "state",
            Status.REPACKED,
            f"{len(pairs)} state pair(s) held as {info.states_held_as} ({named}); verified over consecutive calls",
        )
    return Finding("state", Status.EXACT, f"{len(pairs)} state pair(s) kept as inputs and outputs ({named})")


def constant_findings(layer: RecurrentLayer, form: str) -> list[Finding]:
    """An ``exact`` finding per input the layer holds as a constant: kept as one, in the target's ``form``."""
    return [
        Finding(
            ROLE_LABELS[role],
            Status.EXACT,
            f"{ROLE_LABELS[role]}: constant {list(value.shape)}, kept as {form} (no input to feed)",
        )
        for role, value in layer.constants.items()
    ]


def whole_model_targets(model: Model) -> list[str]:
    """The formats that write ``model`` whole, the operators around its layers included: of those whose record keeps
    whole models of its format (``registry.keeps_whole``), the ones whose whole-model finding accepts it."""
    whole = replace(model, meta={**model.meta, "layers_only": False})
    keepers = [name for name in registry.writers() if registry.keeps_whole(whole, name)]
    findings = {name: registry.writer(name)[1].whole_model_finding(whole) for name in keepers}
    return [name for name, f in findings.items() if f is not None and f.status is not Status.UNSUPPORTED]


def model_finding(model: Model, target: str, keepers: "Callable[[], list[str]] | None" = None) -> Finding | None:
    """What happens to the operators around the recurrent layers when ``model`` is written as
    ``target`` (None: the model has none). A format that writes whole models says so itself (its
    ``whole_model_finding``); every other one holds the layers alone: ``unsupported``, unless the user
    asked for the layers alone (``layers_only``), which the finding then says. ``keepers``: gives the
    formats that keep the whole model, asked only when a refusal names them (default: every writer is asked;
    a format's answer may translate the whole model, as Core ML's does)."""
    if not model.other_ops:
        return None
    info, implementation = registry.writer(target)
    if not model.layers_only:
        whole = implementation.whole_model_finding(model)
        if whole is not None:
            return whole
    around = f"the model has {model.other_ops_text()} around its {len(model.layers)} recurrent layer(s)"
    if model.layers_only:
        return Finding(
            "model",
            Status.UNSUPPORTED,
            f"{around}; written as the recurrent layers alone, as asked: each layer with its own inputs and outputs "
            "(gatepack inspect lists them), the other operators left out",
            warning=LAYERS_ONLY_WARNING,
        )
    keeping = whole_model_targets(model) if keepers is None else keepers()
    keep = f", or convert to {' or '.join(keeping)}, which keep the whole model" if keeping else ""
    if info.whole_model_via is not None and info.whole_model_via[0] in keeping:
        keep += f"; {info.whole_model_via[1]}"
    return Finding(
        "model",
        Status.UNSUPPORTED,
        f"{around}; written as {info.title} from {registry.check_name(model.format).title}, the artifact would hold "
        "the recurrent layers only",
        alternative=(
            "pass --layers-only (API: layers_only=True) to write the recurrent layers alone, each with its own "
            f"inputs and outputs{keep}"
        ),
    )


def build_report(model: Model, targets: list[str], options: dict | None = None) -> Report:
    options = options or {}
    # the formats that would keep the model whole, named in the refusals (layers written alone, as asked: none)
    keepers = functools.cache(lambda: whole_model_targets(model) if model.keeps_whole else [])  # asked once, if at all
    surroundings = {target: model_finding(model, target, keepers) for target in targets}
    layers = []
    for layer in model.layers:
        lay = LayerReport(layer)
        for target in targets:
            found = target_findings(model, layer, target, options, surroundings[target])
            lay.targets[target] = TargetReport(worst(found), found)
        layers.append(lay)
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Report(str(model.path), model.format, layers, list(model.skipped), surroundings, __version__, created)

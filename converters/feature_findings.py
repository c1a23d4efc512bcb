"""The findings vocabulary: a layer and a format's capability record (``converters.capabilities``) turned
into one finding per feature, worded the same way for every format.

A format's ``check`` picks its ``Form`` (``form_of``: the record, the op for the layer's cell, what the
op lacks in the layer, native or decomposed), takes ``findings(layer, form)`` and adds only what is its
own (an option's effect, its runtime's precision, its names). Each feature has one function here:

* the op takes the feature and is used: ``exact`` (``repacked`` where it permutes or splits it);
* the op lacks it and the format has no elementary form: ``unsupported``, with the reason and the formats
  that express it (``capabilities.alternative``);
* otherwise the record's ``Reported`` statuses say what the format calls it: computed by elementary ops in
  place of the op (``replaced``), by elementary ops though the op would take it (``elementary``), or the
  op forced (``--strategy native``) though it lacks it (``forced``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import gatepack.converters.quantization as quantization
import gatepack.converters.registry as registry
from gatepack.converters.capabilities import (
    ONNX_PEEPHOLES,
    VALUE_FEATURES,
    Bias,
    Capabilities,
    Op,
    alternative,
    bias_storage,
    doubts,
    folds_bias,
    lacks,
    present,
)
from gatepack.converters.findings import Finding, Status
from gatepack.converters.strategy import choose
from gatepack.schemas.layer import Direction, RecurrentLayer, dim_text


@dataclass(frozen=True)
class Form:
    """How a layer is written in a format: its record, the op for its cell, what the op lacks in the layer
    (feature -> reason), the strategy asked for, the form chosen (``native`` or ``decomposed``), and the op's
    known doubts that concern the layer (what they are about -> the doubt: ``capabilities.doubts``)."""

    caps: Capabilities
    op: Op
    lacking: dict[str, str]
    strategy: str
    chosen: str
    doubted: dict[str, str]

    @property
    def native(self) -> bool:
        return self.chosen == "native"


def form_of(layer: RecurrentLayer, caps: Capabilities, strategy: str = "auto", target: str | None = None) -> Form:
    """The form ``layer`` is written in by ``caps``' format: with an elementary form, ``strategy`` decides
    (``auto``: native unless the op lacks something or is in doubt for the layer); without one, always the op. A
    cell the format has no op for lacks the cell (``Capabilities.op``): elementary, unless the op is forced."""
    op = caps.op(layer.cell)
    lacking, doubted = lacks(layer, op, target), doubts(layer, op)
    avoided = [*lacking.values(), *doubted.values()]
    chosen = choose(strategy, avoided) if caps.elementary is not None else "native"
    return Form(caps, op, lacking, strategy, chosen, doubted)


def findings(layer: RecurrentLayer, form: Form, named: str | None = None) -> list[Finding]:
    """Every feature's finding, in one order for every format (``named``: the op as the cell finding names it)."""
    found = [cell(layer, form, named), direction(layer, form), weights(layer, form), bias(layer, form)]
    found.append(linear_before_reset(layer, form))
    found += [value_feature(layer, form, feature) for feature in VALUE_FEATURES]
    found += initial_states(layer, form) + [layout(layer, form), dtype(layer, form), shapes(layer, form)]
    remarks = form.op.remarks if form.native else {}
    return [
        replace(f, detail=f"{f.detail}; {remarks[f.feature]}") if f.feature in remarks else f
        for f in found
        if f is not None
    ]


def replacing(found: list[Finding], *others: Finding | None) -> list[Finding]:
    """``found`` with each of ``others`` in place of the finding of its feature (appended if there is none)."""
    out = list(found)
    for other in (o for o in others if o is not None):
        features = [f.feature for f in out]
        if other.feature in features:
            out[features.index(other.feature)] = other
        else:
            out.append(other)
    return out


def _doubts_about(form: Form, *about: str) -> str | None:
    """The doubts about the op that concern the layer, about any of ``about`` (a cell, reset_after, a feature,
    an activation), as one warning."""
    return "; ".join(text for key, text in form.doubted.items() if key in about) or None


def cell(layer: RecurrentLayer, form: Form, named: str | None = None) -> Finding:
    """The op, or the elementary form and why, or the op forced where it would compute something else."""
    op, reasons = form.op, "; ".join(form.lacking.values())
    name = named or op.name
    if form.caps.elementary is None or (form.native and not form.lacking):
        permuted = f", gates permuted {op.permutation(layer.cell)}" if op.permutes_gates(layer.cell) else ""
        described = f" ({op.described})" if op.described else ""
        warning = _doubts_about(form, layer.cell.value, "reset_after")
        return Finding("cell", Status.EXACT, f"{name}{permuted}{described}", warning=warning)
    if form.native:
        return Finding(
            "cell",
            Status.UNSUPPORTED,
            f"the {name} would not compute what ONNX specifies: {reasons}",
            alternative=form.caps.alternatives.get("cell"),
        )
    in_doubt = f"the {name} is in doubt here: {'; '.join(form.doubted.values())}; --strategy native uses it anyway"
    avoided = "; ".join([reasons] * bool(reasons) + [in_doubt] * bool(form.doubted))
    why = avoided if form.strategy == "auto" else "--strategy decomposed"
    return Finding("cell", Status.DECOMPOSED, f"{form.caps.elementary} ({why})")


def direction(layer: RecurrentLayer, form: Form) -> Finding:
    """Repacked where each direction is its own op or loop (stacked) or a reverse op runs in processing order."""
    per_direction = form.op.one_op_per_direction if form.native else form.caps.elementary_per_direction
    unit = "op" if form.native else "loop"
    if layer.direction is Direction.BIDIRECTIONAL and per_direction:
        in_processing_order = form.native and form.op.reverse_in_processing_order
        realigned = (
            "; the reverse one's output (processing order) re-aligned to input time" if in_processing_order else ""
        )
        return Finding(
            "direction",
            Status.REPACKED,
            f"bidirectional: a forward and a reverse {unit}{realigned}, stacked into Y [S,D,N,H]",
        )
    if layer.direction is Direction.REVERSE and form.native and form.op.reverse_in_processing_order:
        return Finding(
            "direction",
            Status.REPACKED,
            "reverse: the op's output sequence (processing order) re-aligned to input time",
        )
    note = form.caps.elementary_reverse if not form.native and layer.direction is not Direction.FORWARD else None
    return Finding("direction", Status.EXACT, layer.direction.value + (f" ({note})" if note else ""))


def weights(layer: RecurrentLayer, form: Form) -> Finding | None:
    """The op's weight tensors (repacked where it permutes the gates or splits the directions); none where
    they are the ONNX node's own."""
    op = form.op
    text = op.tensors if form.native else form.caps.elementary_weights
    if text is None:
        return None
    if not form.native:
        return Finding("weights", Status.EXACT, text)
    permuted = op.permutes_gates(layer.cell)
    order = f"rows permuted {op.permutation(layer.cell)}" if permuted else "ONNX gate order"
    split = ", one per direction" if op.one_op_per_direction else ""
    status = Status.REPACKED if permuted or op.one_op_per_direction else Status.EXACT
    return Finding("weights", status, f"{op.tensors}: {order}{split}")


def bias(layer: RecurrentLayer, form: Form) -> Finding | None:
    """Split as ONNX (exact), summed (folded unless the summed-in Rb is zero), or one tensor per bias (repacked)."""
    op = form.op
    if not form.native:
        return None if form.caps.elementary_bias is None else Finding("bias", Status.EXACT, form.caps.elementary_bias)
    storage = bias_storage(layer, op)
    if storage is Bias.SPLIT:
        return Finding(
            "bias", Status.EXACT, f"{op.bias_tensor} = [Wb, Rb] as ONNX" if layer.has_bias else "no bias (zeros)"
        )
    if storage is Bias.BY_ROLE:
        return Finding(
            "bias", Status.REPACKED, f"{op.reset_after}: {op.bias_tensor} = Rb, {op.input_bias_tensor} = Wb (permuted)"
        )
    folded = folds_bias(layer, storage)
    lost = "; reads back as [Wb + Rb, 0]" if folded else " (Rb is zero: nothing is lost)"
    return Finding("bias", Status.FOLDED if folded else Status.EXACT, f"{op.bias_tensor} = {storage.value}{lost}")


def linear_before_reset(layer: RecurrentLayer, form: Form) -> Finding | None:
    if not layer.cell.spec.reset_placement:
        return None
    value = int(layer.linear_before_reset)
    field = f" ({form.op.reset_after} = {str(bool(value)).lower()})" if form.native and form.op.reset_after else ""
    return Finding("linear_before_reset", Status.EXACT, f"{value}{field}")


# Per feature: how the op carries it (native) and how elementary ops do
_VALUE_TEXTS = {
    "peepholes": ("P (i, o, f) in the op's peephole input", "P (i, o, f) as constants, added to the gates' inputs"),
    "input_forget": ("input_forget = 1 (f = 1 - i)", "forget gate computed as 1 - input gate"),
    "activations": ("{summary}", "{summary} (elementary ops, alpha/beta as constants)"),
    "clip": ("clip={clip:g}", "clip={clip:g} (a clamp of every gate's pre-activation)"),
    "sequence_lens": (
        "sequence_lens input kept",
        "sequence_lens input kept (masks; the reverse direction starts at len-1)",
    ),
}


def value_feature(layer: RecurrentLayer, form: Form, feature: str) -> Finding | None:
    """A feature the op may lack (``capabilities.VALUE_FEATURES``): see the module docstring for its status."""
    native_text, elementary_text = _VALUE_TEXTS[feature]
    if not present(layer, feature):
        return None
    fill = {"summary": layer.activation_summary(), "clip": layer.clip}
    reason, reported = form.lacking.get(feature), form.caps.report(feature)
    if reason is not None and form.caps.elementary is None:
        return Finding(feature, Status.UNSUPPORTED, reason, alternative=alternative(form.caps, layer, feature))
    if reason is not None and form.native:  # forced: the format's elementary form would express it
        refused = reported.forced is Status.UNSUPPORTED
        return Finding(
            feature, reported.forced, reason, alternative=form.caps.alternatives["cell"] if refused else None
        )
    if reason is not None:
        return Finding(feature, reported.replaced, f"{elementary_text.format(**fill)}, in place of the op ({reason})")
    if not form.native:
        return Finding(feature, reported.elementary, elementary_text.format(**fill))
    op = form.op
    order = op.peepholes if feature == "peepholes" and op.peepholes != ONNX_PEEPHOLES else None
    detail = native_text.format(**fill) + (f", permuted i, o, f -> {', '.join(order)}" if order else "")
    permuted = order is not None
    about = [a.name for p in layer.directions for a in p.activations] if feature == "activations" else [feature]
    status = Status.REPACKED if permuted else Status.EXACT
    return Finding(feature, status, detail, warning=_doubts_about(form, *about))


def initial_states(layer: RecurrentLayer, form: Form) -> list[Finding]:
    """Per state: the input kept, or zeros built where the op needs a state (or the elementary form says so)."""
    found = []
    for k, state in enumerate(layer.cell.states):
        role = f"initial_{state}"
        tensor = form.op.state_tensors[k] if form.native and form.op.state_tensors else None
        if getattr(layer.interface, role):
            found.append(Finding(role, Status.EXACT, f"{role} input kept" + (f" ({tensor})" if tensor else "")))
        elif form.native and form.op.initial_state_required:
            where = form.caps.container
            found.append(Finding(role, Status.EXACT, f"zeros built in {where} (the op requires an initial state)"))
        elif not form.native and form.caps.elementary_zero_states:
            found.append(Finding(role, Status.EXACT, "zeros"))
    return found


def layout(layer: RecurrentLayer, form: Form) -> Finding:
    """Exact where the op's tensors have the interface's layout, else repacked by transposes."""
    taken = form.op.layouts if form.native else (0,)
    value = layer.interface.layout
    if value in taken:
        return Finding("layout", Status.EXACT, f"layout {value} ({'batch' if value else 'sequence'}-major)")
    note = f" ({form.op.layout_note})" if form.native and form.op.layout_note else ""
    return Finding("layout", Status.REPACKED, f"layout {value} interface kept; {form.caps.transposes}{note}")


def dtype(layer: RecurrentLayer, form: Form) -> Finding:
    carried = form.op.dtypes[layer.interface.dtype]
    return Finding("dtype", carried.status, carried.detail, warning=carried.warning, alternative=carried.alternative)


def shapes(layer: RecurrentLayer, form: Form) -> Finding:
    itf = layer.interface
    how = f" ({form.caps.dynamic_shapes})" if form.caps.dynamic_shapes else ""
    return Finding("shapes", Status.EXACT, f"S={dim_text(itf.seq_length)}, N={dim_text(itf.batch_size)}{how}")


def mask(layer: RecurrentLayer, target: str, whole: bool) -> list[Finding]:
    """A layer with a per-step hold (``Interface.mask``, Keras masking): held exactly by the elementary Loop of a
    whole model rewritten for ``target`` (its record's ``mask_held_by``; its ``cell`` finding says so), else
    refused: no sequence op has such a mask, and alone the layer loses the operators that compute it."""
    if not layer.interface.mask:
        return []
    holders = {name: info.mask_held_by for name, info in registry.FORMATS.items() if info.mask_held_by}
    how = holders.get(target)
    if how is not None and whole:
        held = f"per-step mask {layer.interface.mask!r} (Keras masking) held by {how.split(' (')[0]}"
        return [Finding("cell", Status.DECOMPOSED, held), Finding("mask", Status.DECOMPOSED, how)] + _held_weights(
            layer, target
        )
    why = (
        f"the {target} writer has no form that holds a step (no sequence op has a per-step mask)"
        if how is None
        else "the layer alone loses the operators that compute its mask"
    )
    return [
        Finding(
            "mask",
            Status.UNSUPPORTED,
            f"per-step mask {layer.interface.mask!r} (Keras masking: a step held where the mask is false, which is "
            f"not sequence_lens): {why}",
            alternative=f"convert the whole model to {' or '.join(holders)}",
        )
    ]


def _held_weights(layer: RecurrentLayer, target: str) -> list[Finding]:
    """The ``quantization`` finding of a quantized layer whose mask an elementary Loop holds: that Loop multiplies
    float initializers (no DequantizeLinear feeds it), so ``target`` keeps no integers there: the weights are
    written as floats only with ``--dequantize`` and ``--quantize-weights`` is refused (``quantization.dequantized``),
    never written as floats under a finding that says the integers were kept ([] for float weights)."""
    if not layer.is_quantized:
        return []
    reason = "its per-step mask is held by an elementary Loop, which multiplies float weights"
    return [quantization.dequantized(layer, target, reason)]

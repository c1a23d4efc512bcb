"""What `gatepack inspect` shows: the recurrent layers of a model, their attributes and shapes."""

from __future__ import annotations

from typing import Sequence

from gatepack.converters.model import GraphTensor, Model, graph_interface
from gatepack.schemas.layer import INPUT_ROLES, OUTPUT_ROLES, QUANTIZED_ROLES, ROLE_LABELS, RecurrentLayer, dim_text


def _shapes(layer: RecurrentLayer) -> dict[str, list[str]]:
    itf = layer.interface
    s, n, d, h, i = (
        dim_text(itf.seq_length),
        dim_text(itf.batch_size),
        str(layer.num_directions),
        str(layer.hidden_size),
        str(layer.input_size),
    )
    batch_major = itf.layout == 1
    return {
        "X": [n, s, i] if batch_major else [s, n, i],
        "sequence_lens": [n],
        "initial_h": [n, d, h] if batch_major else [d, n, h],
        "initial_c": [n, d, h] if batch_major else [d, n, h],
        "Y": [n, s, d, h] if batch_major else [s, d, n, h],
        "Y_h": [n, d, h] if batch_major else [d, n, h],
        "Y_c": [n, d, h] if batch_major else [d, n, h],
        "mask": [s, n],  # a per-step hold, sequence-major whatever the layout
    }


def _tensors(layer: RecurrentLayer) -> list[tuple[str, str, list[str]]]:
    """(role, name, shape) of every interface tensor the layer has."""
    itf = layer.interface
    shapes = _shapes(layer)
    roles = [(ROLE_LABELS[role], getattr(itf, role)) for role in INPUT_ROLES + OUTPUT_ROLES] + [("mask", itf.mask)]
    return [(role, name, shapes[role]) for role, name in roles if name]


# an optional input the layer holds as a constant: named (the artifact's constant tensor), never fed
HELD_TEXT = " (a constant of the layer, not an input)"
COMPACT_ABOVE = 8  # layers: above this, inspect groups identical layer kinds and lists one line per layer


def _attributes(layer: RecurrentLayer) -> str:
    itf = layer.interface
    attrs = [f"I={layer.input_size}", f"H={layer.hidden_size}"]
    if layer.cell.spec.reset_placement:
        attrs.append(f"linear_before_reset={int(layer.linear_before_reset)}")
    if layer.cell.spec.input_forget:
        attrs.append(f"input_forget={int(layer.input_forget)}")
    if layer.cell.spec.peepholes:
        attrs.append("peepholes" if layer.has_peepholes else "no peepholes")
    attrs.append(f"clip={layer.clip:g}" if layer.clip is not None else "no clip")
    attrs.append(f"layout={itf.layout}")
    attrs.append(itf.dtype)
    if layer.is_quantized:
        attrs.append("quantized weights")
    if layer.is_palettized:
        attrs.append("palettized weights")
    return f"{layer.cell.op_name} {layer.direction.value}, {', '.join(attrs)}"


def model_tensors(model: Model) -> tuple[Sequence[GraphTensor], Sequence[GraphTensor]] | None:
    """A whole model's own inputs and outputs (None for an artifact of recurrent layers alone, whose layers'
    tensors are its inputs and outputs)."""
    return graph_interface(model) if model.other_ops else None


def _tensor_text(name: str, dtype: object, dims: list | None) -> str:
    shape = "[?]" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
    return f"  {name} {shape} {dtype if dtype is not None else '(type not declared)'}"


def describe_text(model: Model) -> str:
    """The model's own inputs and outputs first (a whole model), then its recurrent layers."""
    count = len(model.layers)
    opset = f", opset {model.meta['opset']}" if "opset" in model.meta else ""
    lines = [f"{model.path} ({model.format}{opset}): {count} recurrent layer{'s' if count != 1 else ''}"]
    tensors = model_tensors(model)
    if tensors is not None:
        lines[0] += f" among {model.other_ops_text()}"
        for heading, found in zip(("model inputs:", "model outputs:"), tensors):
            lines += [heading] + [_tensor_text(*tensor) for tensor in found]
        lines += _state_lines(model)
        lines.append("recurrent layers:")
    if count > COMPACT_ABOVE:
        lines += _compact(model)
    else:
        for layer in model.layers:
            itf = layer.interface
            lines.append(f"{layer.name}: {_attributes(layer)}")
            lines.append(f"  activations: {layer.activation_summary()}")
            held = {ROLE_LABELS[role] for role in layer.constants}
            for role, name, shape in _tensors(layer):
                dtype = {"sequence_lens": "int32", "mask": "per-step hold (Keras masking)"}.get(role, itf.dtype)
                lines.append(f"  {role:<13} {name} [{', '.join(shape)}] {dtype}" + HELD_TEXT * (role in held))
            lines.append(f"  parameters: {layer.parameter_count():,}" + ("" if layer.has_bias else " (no bias)"))
            if layer.is_quantized:
                lines.append(f"  quantized: {layer.quantization_summary()}")
            if layer.is_palettized:
                lines.append(f"  palettized: {layer.palettization_summary()}")
            for note in model.notes_for(layer):
                lines.append(f"  note: {note.detail}" + (f" [warning: {note.warning}]" if note.warning else ""))
    for name, reason in model.skipped:
        lines.append(f"skipped {name}: {reason}")
    lines += [f"note: {note}" for note in model.meta.get("notes", [])]
    return "\n".join(lines)


def _state_lines(model: Model) -> list[str]:
    """A streaming model's state pairs (found on one call: ``streaming``), and the states a stateful artifact
    holds itself (OpenVINO variables, Core ML states: ``Model.meta['states']``, input -> output)."""
    lines = []
    pairs = model.meta.get("state_pairs") or []
    if pairs:
        lines.append("state pairs (the output feeds the input on the next call):")
        lines += [f"  {p['output']} -> {p['input']} ({p['evidence']})" for p in pairs]
    held = model.meta.get("states") or {}
    if held:
        lines.append("states the artifact holds itself (fed back by its runtime, not inputs):")
        lines += [f"  {output} -> {state}" for state, output in held.items()]
    return lines


def _compact(model: Model) -> list[str]:
    """Many layers: identical kinds counted, one line per layer, identical notes counted."""
    kinds: dict[str, int] = {}
    notes: dict[str, int] = {}
    for layer in model.layers:
        key = f"{_attributes(layer)}; activations {layer.activation_summary()}"
        kinds[key] = kinds.get(key, 0) + 1
        for note in model.notes_for(layer):
            text = note.detail + (f" [warning: {note.warning}]" if note.warning else "")
            notes[text] = notes.get(text, 0) + 1
    lines = [f"  {n} x {kind}" for kind, n in kinds.items()]
    total = sum(layer.parameter_count() for layer in model.layers)
    lines.append(f"parameters: {total:,} in all")
    width = max(len(layer.name) for layer in model.layers)
    for layer in model.layers:
        tensors = _tensors(layer)
        ins, outs = (
            ", ".join(f"{role} {name!r} [{', '.join(shape)}]" for role, name, shape in tensors if (role[0] == "Y") == o)
            for o in (False, True)
        )
        lines.append(
            f"  {layer.name:<{width}}  {layer.cell.op_name} {layer.direction.value:<13} "
            f"I={layer.input_size:<5} H={layer.hidden_size:<5} {layer.parameter_count():,} parameters; "
            f"in: {ins}; out: {outs}"
        )
    lines += [f"note ({n} layer{'s' if n > 1 else ''}): {text}" for text, n in notes.items()]
    lines.append("(--json gives the same as JSON, with every layer's notes)")
    return lines


def quantization_json(layer: RecurrentLayer) -> dict | None:
    """Per quantized role (W, R): bits, signedness, granularity (per tensor / channel / block), block size,
    whether zero points are all 0, the scale's type and the arithmetic (float32, or rounded to float16), and whether
    the source quantizes X and h at run time; None for float weights."""
    if not layer.is_quantized:
        return None
    found = {}
    for role in QUANTIZED_ROLES:
        record = layer.directions[0].quantized(role)
        if record is not None:
            found[role] = {
                "bits": record.bits,
                "signed": record.signed,
                "granularity": record.granularity,
                "block_size": record.block_size,
                "symmetric": all(not p.quantized(role).zero_point.any() for p in layer.directions),  # type: ignore[union-attr]
                "scale": str(record.scale.dtype),
                "arithmetic": record.arithmetic,
                "dynamic_activations": record.dynamic_activations,
            }
    return found


def describe_json(model: Model) -> dict:
    layers = []
    for layer in model.layers:
        itf = layer.interface
        layers.append(
            {
                "name": layer.name,
                "cell": layer.cell.value,
                "direction": layer.direction.value,
                "input_size": layer.input_size,
                "hidden_size": layer.hidden_size,
                "linear_before_reset": layer.linear_before_reset,
                "clip": layer.clip,
                "layout": itf.layout,
                "dtype": itf.dtype,
                "activations": [
                    [
                        {
                            "name": a.name,
                            **({"alpha": a.alpha} if a.alpha is not None else {}),
                            **({"beta": a.beta} if a.beta is not None else {}),
                        }
                        for a in p.activations
                    ]
                    for p in layer.directions
                ],
                "tensors": {
                    role: {
                        "name": name,
                        "shape": [int(d) if d.isdigit() else d for d in shape],
                        **({"constant": True} if role in {ROLE_LABELS[r] for r in layer.constants} else {}),
                    }
                    for role, name, shape in _tensors(layer)
                },
                "parameters": layer.parameter_count(),
                "has_bias": layer.has_bias,
                "quantization": quantization_json(layer),
                "notes": [n.to_json() for n in model.notes_for(layer)],
            }
        )
    tensors = model_tensors(model)
    return {
        "path": str(model.path),
        "format": model.format,
        **(
            {}
            if tensors is None
            else {
                f"model_{kind}": [
                    {"name": name, "dtype": None if dtype is None else str(dtype), "shape": dims}
                    for name, dtype, dims in found
                ]
                for kind, found in zip(("inputs", "outputs"), tensors)
            }
        ),
        "meta": model.meta,
        "layers": layers,
        "skipped": [{"name": n, "reason": r} for n, r in model.skipped],
    }

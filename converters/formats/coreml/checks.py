"""Findings for writing a layer as a Core ML ML Program."""

from __future__ import annotations

import numpy as np

from gatepack.converters.apple import (
    runtime_doubts,
)
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.coreml.common import (
    DEFAULT_TARGET,
    FP16_TARGET,
    TARGETS,
    _target_rank,
    choose_strategy,
    safe_name,
)
from gatepack.converters.strategy import cell_finding
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    Cell,
    Direction,
    RecurrentLayer,
    dim_text,
    state_roles,
)

# ---------------------------------------------------------------------------------------- findings


# How the native op's gate blocks differ from ONNX's (finding text).
NATIVE_GATES = {Cell.GRU: "z,r,h -> r,o,z", Cell.LSTM: "i,o,f,c -> i,f,o,z"}


def check(
    layer: RecurrentLayer,
    *,
    strategy: str = "auto",
    minimum_deployment_target: str = DEFAULT_TARGET,
    compress_to_fp16: bool = False,
) -> list[Finding]:
    """Findings for writing ``layer`` as a Core ML ML Program with ``strategy``."""
    target = minimum_deployment_target
    chosen, blockers = choose_strategy(layer, strategy, target)
    op = f"MIL {layer.cell.value} ({target})"
    itf = layer.interface
    found = []
    warning = runtime_doubts(layer) if chosen == "native" else None
    found.append(
        cell_finding(
            strategy,
            chosen,
            blockers,
            native=f"the {op} op"
            + (f", gates permuted {NATIVE_GATES[layer.cell]}" if layer.cell in NATIVE_GATES else ""),
            refused=f"the {op} op cannot express it",
            decomposed="elementary MIL ops in a while_loop per direction, input projections in one matmul",
            alternative="use --strategy auto or decomposed (elementary MIL ops in a while_loop)",
            warning=warning,
        )
    )
    if layer.direction is Direction.BIDIRECTIONAL:
        found.append(
            Finding(
                "direction",
                Status.REPACKED,
                "bidirectional: a forward and a reverse "
                + ("op" if chosen == "native" else "loop")
                + ", stacked into Y [S,D,N,H]",
            )
        )
    elif layer.direction is Direction.REVERSE and chosen == "native":
        found.append(
            Finding(
                "direction",
                Status.REPACKED,
                "reverse: the op's output sequence (processing order) is reversed back to input time",
            )
        )
    else:
        found.append(Finding("direction", Status.EXACT, layer.direction.value))
    if chosen == "native":
        found.append(
            Finding(
                "weights",
                Status.REPACKED,
                "weight_ih / weight_hh"
                + (f" rows permuted {NATIVE_GATES[layer.cell]}" if layer.cell in NATIVE_GATES else " as ONNX's W / R"),
            )
        )
        if layer.cell is Cell.GRU and layer.linear_before_reset:
            found.append(Finding("bias", Status.REPACKED, "reset_after: bias = Rb, input_bias = Wb (permuted)"))
        else:
            summed = any(p.Rb.any() for p in layer.directions)
            found.append(
                Finding(
                    "bias",
                    Status.FOLDED if summed else Status.EXACT,
                    "bias = Wb + Rb" + ("; reads back as [Wb + Rb, 0]" if summed else " (Rb is zero: nothing is lost)"),
                )
            )
    else:
        found.append(
            Finding(
                "weights",
                Status.EXACT,
                "W, R (transposed for the matmul), Wb and Rb kept apart as constants, ONNX gate order",
            )
        )
    if layer.cell is Cell.GRU:
        found.append(
            Finding(
                "linear_before_reset",
                Status.EXACT,
                str(int(layer.linear_before_reset))
                + (" (reset_after)" if chosen == "native" and layer.linear_before_reset else ""),
            )
        )
    found.append(
        Finding(
            "activations",
            Status.EXACT,
            layer.activation_summary()
            + (" (from elementary ops, alpha/beta as constants)" if chosen == "decomposed" else ""),
        )
    )
    if layer.clip is not None:
        found.append(
            Finding(
                "clip",
                Status.DECOMPOSED if chosen == "decomposed" else Status.UNSUPPORTED,
                f"clip={layer.clip:g} (minimum/maximum)",
            )
        )
    if itf.sequence_lens:
        found.append(
            Finding(
                "sequence_lens",
                Status.DECOMPOSED if chosen == "decomposed" else Status.UNSUPPORTED,
                "sequence_lens input kept (masks; reverse from len-1 with reverse_sequence)",
            )
        )
    for role, _ in state_roles(layer.cell):
        found.append(
            Finding(
                role,
                Status.EXACT,
                f"{role} input kept"
                if getattr(itf, role)
                else "zeros built inside the program (the op requires an initial state)"
                if chosen == "native"
                else "zeros",
            )
        )
    if layer.has_peepholes and chosen == "native":
        found.append(Finding("peepholes", Status.REPACKED, "the op's peephole, permuted i, o, f -> i, f, o"))
    elif layer.has_peepholes:
        found.append(Finding("peepholes", Status.DECOMPOSED, "P (i, o, f) as a constant, added to the gates' inputs"))
    if layer.input_forget:
        found.append(Finding("input_forget", Status.DECOMPOSED, "forget gate computed as 1 - input gate"))
    found.append(
        Finding(
            "layout",
            Status.REPACKED if itf.layout else Status.EXACT,
            f"layout {itf.layout}"
            + (" interface kept; transposes inside the program" if itf.layout else " (sequence-major, as MIL)"),
        )
    )
    if compress_to_fp16 and _target_rank(target) < TARGETS.index(FP16_TARGET):
        found.append(
            Finding(
                "dtype",
                Status.UNSUPPORTED,
                f"fp16 packages need {FP16_TARGET} or later; the target is {target}",
                alternative=f"pass --minimum-deployment-target {FP16_TARGET}, or drop --compress-to-fp16",
            )
        )
    elif compress_to_fp16:
        found.append(
            Finding(
                "dtype",
                Status.LOSSY,
                "fp16 weights and fp16 arithmetic (coremltools' fp16 cast pass; the interface stays float32; "
                "results differ ~1e-3)",
                alternative="drop --compress-to-fp16 for an fp32 package, or pass --allow-lossy",
            )
        )
    elif layer.dtype == np.float64:
        found.append(
            Finding(
                "dtype",
                Status.LOSSY,
                "float64 weights and inputs become float32 (Core ML has no double precision)",
                alternative="pass --allow-lossy to accept float32",
            )
        )
    elif layer.dtype == np.float16:
        found.append(
            Finding(
                "dtype",
                Status.REPACKED,
                "float16 weights stored as float32 (exact) and computed in float32; the interface takes float32",
            )
        )
    else:
        found.append(
            Finding(
                "dtype",
                Status.EXACT,
                "float32 (written with compute_precision FLOAT32: coremltools' default would cast to fp16)",
            )
        )
    renamed = [n for n in (getattr(itf, r) for r in INPUT_ROLES + OUTPUT_ROLES) if n and safe_name(n) != n]
    if renamed:
        found.append(
            Finding(
                "names",
                Status.REPACKED,
                f"Core ML sanitises {', '.join(repr(n) for n in renamed)} to "
                f"{', '.join(repr(safe_name(n)) for n in renamed)}; the package's metadata keeps the originals, "
                "and gatepack's run takes either",
            )
        )
    found.append(
        Finding(
            "shapes",
            Status.EXACT,
            f"S={dim_text(itf.seq_length)}, N={dim_text(itf.batch_size)} (symbolic dimensions stay flexible)",
        )
    )
    found.append(Finding("deployment target", Status.EXACT, f"{target} (--minimum-deployment-target)"))
    return found

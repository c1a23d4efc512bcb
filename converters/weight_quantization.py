"""Quantizing a float model's recurrent weights as the user asks (``--quantize-weights int8|int4``, API
``quantize_weights=``): each direction's W ``[G*H, I]`` and R ``[G*H, H]`` become b-bit integers per output
channel (one row of the canonical layout) or, with ``--quantize-block-size B`` (API ``quantize_block_size=``), per
block of B consecutive columns of a row, symmetric::

    scale[j, g] = max_{k in g} |W[j, k]| / (2^(b-1) - 1)      (1 for a group of zeros)
    q[j, k]     = clip(round_half_even(W[j, k] / scale[j, g]), -(2^(b-1) - 1), 2^(b-1) - 1)

(g the row j for per channel, else the block holding column k; -2^(b-1) unused, so the grid is symmetric: ±127
for int8, ±7 for int4), so the float view the layer then computes on is ``q * scale`` (``schemas.quantized``): the
layer carries ``Wq``/``Rq`` and W, R become that view, exactly. 4-bit integers sit in int8 arrays with ``bits`` 4;
the writers pack them two a byte. A target that holds quantized weights (its registration record's
``FormatInfo.quantizes_weights``: ``holders``, ``form_for``) writes the integers (ONNX: QDQ, opset 21 for 4 bits or
blocks; OpenVINO: NNCF's compressed constants; Core ML: constexpr ops; LiteRT: int8 tensors its hybrid kernels take);
every other target is refused, naming those that hold them. LiteRT quantizes per gate block instead: its sequence
ops' hybrid kernels take one int8 scale per weight tensor, one gate's [H, K] (``max`` over the block's rows), and
they quantize X and h at run time, which the records say (``dynamic_activations``); it holds int8 without blocks
only (``unheld``).
The change is ``lossy`` by construction; the option is the user's acceptance of it, and the artifact is judged
by the accuracy gate (``converters.accuracy``) against the float source.

``--quantize-weights-scope model`` (API ``quantize_weights_scope="model"``, ``Scheme.scope``) quantizes a whole model's
other weights too, the constant weights of its MatMul/Gemm/Conv/Gather with the same scheme: the scheme travels in
``Model.meta[SCOPE_KEY]`` to the whole-model writers (ONNX: ``formats/onnx/model_weights``, whose QDQ OpenVINO's
frontend reads; Core ML: ``formats/coreml/scoped_weights``); ``ScopeSummary`` is what they quantize and what they
leave float, and why (the source format's ``GraphAnalyses.weight_scope``); ``scope_unheld`` why another target does
not write them (LiteRT, DirectML, BNNS).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

import gatepack.converters.registry as registry
from gatepack.converters.errors import UsageError
from gatepack.converters.fileio import release_pages
from gatepack.converters.findings import Finding, Status
from gatepack.converters.registration import WeightForm
from gatepack.schemas.layer import RecurrentLayer
from gatepack.schemas.quantized import RUN_TIME_SCHEMES, FloatView, QuantizedWeights

if TYPE_CHECKING:
    from gatepack.converters.model import Model

OPTION = "--quantize-weights (API: quantize_weights=)"
BLOCK_OPTION = "--quantize-block-size (API: quantize_block_size=)"
SCOPE_OPTION = "--quantize-weights-scope (API: quantize_weights_scope=)"
SCOPES = ("layers", "model")  # the recurrent layers' W and R; and a whole model's MatMul/Gemm/Conv/Gather weights
SCOPE_KEY = "quantize_model_weights"  # Model.meta: the Scheme a whole model's other weights are quantized with
SCHEMES = {"int8": 8, "int4": 4}  # name -> bits; the integers are symmetric, in int8 arrays
ASKED_DETAIL = "W and R quantized as asked"  # how the finding below begins (told from a target's own)
MODEL_DETAIL = "the model's other weights quantized as asked"  # how ScopeSummary.finding begins


def holders() -> tuple[str, ...]:
    """The targets whose writer keeps these integers (``FormatInfo.quantizes_weights``), in the registry's order."""
    return tuple(name for name, info in registry.FORMATS.items() if info.quantizes_weights is not None)


def holders_of(scheme: "Scheme | None", but: str = "") -> tuple[str, ...]:
    """The holders (``holders``) that keep the integers of ``scheme`` (LiteRT: int8 without blocks only, ``unheld``),
    ``but`` left out: the targets a refusal's hint may send the user to."""
    return tuple(name for name in holders() if name != but and unheld(name, scheme) is None)


def form_for(target: str) -> WeightForm:
    """How ``target`` holds the integers (its record's ``quantizes_weights``; the plain form for any other target,
    or for none: '')."""
    info = registry.FORMATS.get(target)
    found = None if info is None else info.quantizes_weights
    return WeightForm() if found is None else found


def has_own_form(target: str) -> bool:
    """Whether ``target`` holds the integers otherwise than every other holder (LiteRT's per gate block)."""
    return form_for(target) != WeightForm()


BLOCK_BYTES = 1 << 20  # the floats quantized at a time: a block of rows that stays in cache


@dataclass(frozen=True)
class Scheme:
    """What the user asked: ``name`` (a key of SCHEMES) and, for per-block scales, ``block_size`` columns a block
    (None: one scale per output channel)."""

    name: str
    block_size: int | None = None
    scope: str = "layers"  # SCOPES: "model" also quantizes a whole model's other weights (``model_weights``)

    @property
    def bits(self) -> int:
        return SCHEMES[self.name]

    def __str__(self) -> str:
        return self.name if self.block_size is None else f"{self.name} in blocks of {self.block_size}"

    def granularity(self, form: WeightForm) -> str:
        """'per output channel', 'per gate block ...' (``form``'s) or 'per block of B columns'."""
        return form.words() if self.block_size is None else f"per block of {self.block_size} columns"


def check_scheme(scheme: object, block_size: object = None, scope: object = None) -> Scheme | None:
    """The scheme asked (None: not asked); UsageError naming an unknown one, a block size that is not a positive
    integer, a scope not in SCOPES, or either given without a scheme."""
    if scope is not None and scope not in SCOPES:
        raise UsageError(f"quantize_weights_scope {scope!r} is not one of {', '.join(SCOPES)}")
    if scheme is None and scope is not None:
        raise UsageError(f"{SCOPE_OPTION.split(' ')[0]} applies to --quantize-weights, which was not given")
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1):
        raise UsageError(f"quantize_block_size {block_size!r} is not a number of columns >= 1")
    if scheme is None:
        if block_size is not None:
            raise UsageError(f"{BLOCK_OPTION.split(' ')[0]} applies to --quantize-weights, which was not given")
        return None
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        raise UsageError(f"quantize_weights {scheme!r} is not one of {', '.join(SCHEMES)}")
    return Scheme(scheme, block_size, str(scope or "layers"))


def quantize_rows(
    weights: np.ndarray,
    bits: int,
    block_size: int | None = None,
    group: int = 1,
    activations: str = "",
    out: np.ndarray | None = None,
) -> QuantizedWeights:
    """``weights`` [rows, cols] quantized symmetric per row, per block of ``block_size`` columns (which must divide
    cols), or per ``group`` consecutive rows (their largest magnitude), as the module docstring says; its float view
    one rounding away. ``activations``: the run-time quantization of X and h the records carry. The integers are
    written into ``out`` when given (int8 [rows, cols], e.g. one direction of a stacked array).

    One pass over the floats, a block of whole groups of rows at a time (about ``BLOCK_BYTES``): the block's
    magnitudes, quotients and rounded values live in one reused buffer that stays in cache, so a large weight costs
    its integers and nothing else (no float temporaries of its size; a memory-mapped source's pages are released
    once read: ``fileio.release_pages``); the results are those of the whole-array formula."""
    high = 2 ** (bits - 1) - 1
    floats = np.asarray(weights, np.float32)  # no copy when it is float32 already (e.g. memory-mapped)
    rows, cols = floats.shape
    blocks = 1 if block_size is None else cols // block_size
    scale = np.ones((rows, blocks), np.float32)
    values: np.ndarray = np.zeros((rows, cols), np.int8) if out is None else out
    step = max(1, BLOCK_BYTES // max(4 * cols, 1)) // group * group or group
    work = np.empty((min(step, rows), cols), np.float32)
    for start in range(0, rows if cols else 0, step):
        block = floats[start : start + step]
        count = block.shape[0]
        buffer = work[:count]
        largest = np.abs(block, out=buffer).reshape(count, blocks, -1).max(axis=2)
        largest = np.repeat(largest.reshape(-1, group, blocks).max(axis=1), group, axis=0)
        part = np.where(largest > 0, largest / np.float32(high), np.float32(1)).astype(np.float32)
        np.divide(block.reshape(count, blocks, -1), part[:, :, None], out=buffer.reshape(count, blocks, -1))
        np.clip(np.rint(buffer, out=buffer), -high, high, out=buffer)
        values[start : start + step] = buffer
        scale[start : start + step] = part
    release_pages(floats)  # read once: a memory-mapped source's pages leave this process's memory
    if block_size is None:
        scale = np.ascontiguousarray(scale[:, 0])
    zero = np.zeros(scale.shape, np.int8)
    axis = 0 if block_size is None else 1
    return QuantizedWeights(values, scale, zero, axis, block_size, bits, True, activations)


def quantized_layer(layer: RecurrentLayer, scheme: Scheme, label: str, target: str = "") -> RecurrentLayer:
    """``layer`` with each direction's W and R quantized (``Wq``/``Rq``) as ``target`` holds them (``form_for``) and
    W, R their float view; UsageError for a layer that is quantized already, or whose W or R rows the block size
    does not divide. The directions' integers of W (and of R) are consecutive rows of one array [D, G*H, K], so a
    writer stacking them (OpenVINO) takes that array as it is."""
    if layer.is_quantized or layer.is_palettized:
        held = layer.quantization_summary() or layer.palettization_summary()
        raise UsageError(
            f"{label}: layer {layer.name!r} holds quantized weights already ({held}); "
            "--quantize-weights quantizes float weights",
            hint="leave out --quantize-weights"
            + ("" if layer.is_palettized else " (ONNX keeps its integers as they are)"),
        )
    block = scheme.block_size
    for role, cols in (("W", layer.input_size), ("R", layer.hidden_size)):
        if block is not None and cols % block:
            raise UsageError(
                f"{label}: layer {layer.name!r}: quantize_block_size {block} does not divide {role}'s {cols} columns "
                f"({'input' if role == 'W' else 'hidden'} size)",
                hint="give a block size dividing both the input and the hidden size, or leave it out (per channel)",
            )
    form = form_for(target)
    group = layer.hidden_size if form.per_gate else 1
    first = layer.directions[0]
    stacked = {role: np.empty((len(layer.directions), *getattr(first, role).shape), np.int8) for role in ("W", "R")}
    directions = []
    for d, p in enumerate(layer.directions):
        wq, rq = (
            quantize_rows(getattr(p, role), scheme.bits, block, group, form.activations, stacked[role][d])
            for role in ("W", "R")
        )
        # the float views are made when first read (``FloatView``): a writer of the integers never reads them
        views = (FloatView(wq, p.W.dtype), FloatView(rq, p.R.dtype))  # read as the arrays they make (DirectionParams)
        directions.append(replace(p, W=views[0], R=views[1], Wq=wq, Rq=rq))  # type: ignore[arg-type]
    return replace(layer, directions=tuple(directions))


def finding(source: RecurrentLayer, scheme: Scheme, target: str = "") -> Finding:
    """The ``quantization`` finding of a layer quantized as asked for ``target``: ``lossy``, with bits per weight,
    the weights' size before and after (the integers packed, plus one float32 scale and one zero point per group)
    and the run-time quantization of X and h the target's kernels add."""
    form = form_for(target)
    shapes = [a.shape for p in source.directions for a in (p.W, p.R)]
    before = sum(p.W.nbytes + p.R.nbytes for p in source.directions)
    after = sum(stored_bytes(rows, cols, scheme) for rows, cols in shapes)
    count = sum(rows * cols for rows, cols in shapes)
    group = form.stored(source.cell.gates) if scheme.block_size is None else "a float32 scale per block"
    activations = f"; the kernels then have {RUN_TIME_SCHEMES[form.activations]}" if form.activations else ""
    return Finding(
        "quantization",
        Status.LOSSY,
        f"{ASKED_DETAIL} ({OPTION.split(' ')[0]} {scheme.name}"
        + ("" if scheme.block_size is None else f" {BLOCK_OPTION.split(' ')[0]} {scheme.block_size}")
        + f"): {scheme.name} {scheme.granularity(form)}, symmetric, {scheme.bits} bits per weight (+ {group}: "
        f"{8 * after / max(count, 1):.2f} bits in all); {before:,} -> {after:,} bytes "
        f"({before / max(after, 1):.2f}x smaller){activations}; judged against the float source by the accuracy gate",
        alternative="leave out --quantize-weights to keep float weights",
    )


def stored_bytes(rows: int, cols: int, scheme: Scheme) -> int:
    """The bytes ``quantize_rows`` stores for a [rows, cols] matrix (``QuantizedWeights.stored_bytes``): the integers
    packed at ``bits`` a value, a float32 scale and a zero point per row or block."""
    groups = rows * (1 if scheme.block_size is None else -(-cols // scheme.block_size))
    return -(-rows * cols * scheme.bits // 8) + 4 * groups + -(-groups * scheme.bits // 8)


def is_asked(found: Finding) -> bool:
    """Whether ``found`` is the finding of weights quantized as asked (``finding``, ``ScopeSummary.finding``), not a
    target's own."""
    return found.feature == "quantization" and found.detail.startswith((ASKED_DETAIL, MODEL_DETAIL))


@dataclass(frozen=True)
class ScopeSummary:
    """What ``--quantize-weights-scope model`` does to a whole model's other weights: the ``quantized`` ones
    (initializer, op, shape) and those ``left`` float (initializer, op, why), with the bytes before and after."""

    quantized: tuple[tuple[str, str, tuple[int, ...]], ...]
    left: tuple[tuple[str, str, str], ...]
    scheme: Scheme
    before: int
    after: int
    unwritable: str = ""  # why the model's own opset holds no QDQ of these weights ('': it does)

    @classmethod
    def of(cls, quantized: list, left: list, scheme: Scheme, unwritable: str = "") -> "ScopeSummary":
        """The summary of ``quantized`` weights, each (initializer, op, (channels, elements a channel), per block or
        not), and ``left`` ones; the bytes counted as ``stored_bytes`` counts them."""
        before = sum(4 * rows * cols for _, _, (rows, cols), _ in quantized)
        after = sum(
            stored_bytes(rows, cols, scheme if blocks else replace(scheme, block_size=None))
            for _, _, (rows, cols), blocks in quantized
        )
        kept = tuple((name, op, sizes) for name, op, sizes, _ in quantized)
        return cls(kept, tuple(left), scheme, before, after, unwritable)

    def finding(self) -> Finding:
        """The ``quantization`` finding of the model's other weights: how many were quantized, with the bytes, and
        how many were left float and why (``lossy``: accepted by the option, judged by the accuracy gate)."""
        ops = sorted({op for _, op, _ in self.quantized})
        reasons: dict[str, int] = {}
        for _, op, why in self.left:
            key = why.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
        left = "; ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
        return Finding(
            "quantization",
            Status.LOSSY,
            f"{MODEL_DETAIL} ({SCOPE_OPTION.split(' ')[0]} model): {len(self.quantized)} weight(s) of "
            f"{', '.join(ops) or 'no operator'} quantized {self.scheme.name} "
            f"{self.scheme.granularity(WeightForm())} ({self.before:,} -> {self.after:,} bytes), "
            f"{len(self.left)} left float"
            + (f" ({left})" if left else "")
            + "; judged against the float source by the accuracy gate",
            alternative=f"leave out {SCOPE_OPTION.split(' ')[0]} to quantize the recurrent layers alone",
        )


Done = Sequence[tuple[RecurrentLayer, RecurrentLayer]]  # (float layer, the same quantized) pairs, one scheme/target


def quantized_model(model: "Model", scheme: Scheme, target: str = "", done: Done = ()) -> "Model":
    """``model`` with every recurrent layer quantized for ``target`` (``quantized_layer``); with the ``model`` scope,
    the scheme also in ``meta[SCOPE_KEY]``, where the whole-model writers find it (``model_weights``). A layer whose
    float W and R are the very arrays of a layer in ``done`` (quantized already for the same ``scheme`` and
    ``target``: the conversion's, when its verification builds the twin) takes that layer's integers and views
    instead of quantizing them again (the same records, so the twin computes on exactly what was written)."""
    label = str(model.path or "(in-memory model)")
    layers = [_reused(layer, done) or quantized_layer(layer, scheme, label, target) for layer in model.layers]
    meta = {**model.meta, SCOPE_KEY: scheme} if scheme.scope == "model" else model.meta
    return replace(model, layers=layers, meta=meta)


def _reused(layer: RecurrentLayer, done: Done) -> RecurrentLayer | None:
    """``layer`` with the quantized directions of the pair in ``done`` whose float layer holds the same W and R
    arrays (identity, not equality: nothing is compared or copied); None when no pair does."""
    for floats, quantized in done:
        pairs = list(zip(floats.directions, layer.directions))
        if len(floats.directions) == len(layer.directions) and all(a.W is b.W and a.R is b.R for a, b in pairs):
            return replace(layer, directions=quantized.directions)
    return None


def unheld(target: str, scheme: Scheme | None = None) -> str | None:
    """Why ``target`` does not hold the integers of ``scheme`` (None: it does), naming the targets that do."""
    if target not in holders():
        return (
            f"{target} holds no quantized recurrent weights: {OPTION.split(' ')[0]} writes them to "
            f"{' or '.join(holders_of(scheme))} only"
        )
    if form_for(target).per_gate and scheme is not None and (scheme.bits != 8 or scheme.block_size):
        others = " or ".join(h for h in holders() if not form_for(h).per_gate)
        return (
            f"{target}'s hybrid kernels take int8 weights with one scale per gate matrix, not {scheme}: "
            f"{OPTION.split(' ')[0]} {scheme} writes to {others}"
        )
    return None


def scope_holders() -> tuple[str, ...]:
    """The targets that write a whole model's other weights quantized (``FormatInfo.model_weights``)."""
    return tuple(name for name, info in registry.FORMATS.items() if info.model_weights)


def writes_scope_as_qdq(target: str) -> bool:
    """Whether ``target`` writes a whole model's other weights as the model's own DequantizeLinear (OpenVINO: through
    its ONNX frontend), so that it is bound by what QDQ holds at the model's opset."""
    info = registry.FORMATS.get(target)
    return info is not None and info.model_weights == "qdq"


def scope_unheld(target: str) -> str | None:
    """Why ``target`` does not write a whole model's other weights quantized (None: it does), with the
    alternatives."""
    holders = scope_holders()
    if target in holders:
        return None
    info = registry.FORMATS.get(target)
    why = (info.model_weights_refusal if info is not None else "") or f"{target} writes no whole model"
    return (
        f"{SCOPE_OPTION.split(' ')[0]} model: {why}; convert to {' or '.join(holders)}, which quantize the "
        f"whole model's MatMul/Gemm/Conv/Gather weights"
    )


def refusal_detail(target: str, scheme: Scheme | None = None) -> str:
    """Why ``target`` is refused for quantized weights (``unheld``), naming the targets that hold them."""
    return unheld(target, scheme) or unheld(target) or ""

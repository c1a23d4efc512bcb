"""Lifting: a recurrence a producer wrote as a loop or as unrolled steps, turned into a canonical layer.

Producers do not always write a GRU, RNN or LSTM as one operator: tf2onnx writes every Keras 3 recurrent
layer as an ONNX ``Loop`` over a step body, torch.onnx's dynamo exporter unrolls ``nn.RNN`` into
per-step MatMul/Add/Tanh nodes, coremltools writes ``nn.GRU`` as a MIL ``while_loop``. A format's
recogniser finds such a recurrence and describes it as a :class:`Recurrence`: the interface of one
direction (X, optional initial state, and where Y and Y_h can be read in canonical form), the weights
its step multiplies by (:class:`WeightCandidate`: every way the constants found can be W, R and the
biases, in the producer's own gate order), the activations the step applies, and how to run the
original.

What the step computes is decided by trying hypotheses, never by trusting the pattern: for every
candidate, every order of the gate blocks (GRU: all six), both reset placements (GRU) and every
activation seen (RNN), the canonical layer runs on gatepack's executor and is compared with the
original on its own runtime, on the same random inputs (an input the original holds as a constant, such
as a learned initial state, is held by every hypothesis too: ``Recurrence.constants``, never sampled). The
first hypothesis that agrees is proven once more on fresh inputs; when none agrees, :class:`LiftRefused`
says what was found.

GRU gate blocks: canonical order z, r, h (``schemas.layer``); a source order is written with the
canonical names, e.g. Keras ``z, r, h`` and PyTorch ``r, z, h`` (PyTorch calls h ``n``). LSTM gate
blocks: canonical order i, o, f, c (ONNX); Keras and PyTorch store i, f, c, o, OpenVINO f, i, c, o,
Core ML i, f, o, c; all 24 orders are tried. An LSTM carries two states: the recurrence names both
(h, whose steps are Y, and c), and the lifted layer has no peepholes and no input/forget coupling
(a step computing either does not agree with any reading, so it is refused, never approximated).
A GRU's or LSTM's gate activation is a Sigmoid, or a hard sigmoid a recogniser saw (a ``Clip``), tried
with the parameters producers use (``GATE_ACTIVATIONS``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from gatepack.converters.executor import run_layer
from gatepack.converters.samples import DEFAULT_BATCH, DEFAULT_SEQ_LENGTH, TOLERANCES
from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import Cell
from gatepack.schemas.layer import (
    PERM_SWAP_01,
    PERM_Y_TO_SEQ_MAJOR,
    Direction,
    DirectionParams,
    Interface,
    RecurrentLayer,
)
from gatepack.schemas.quantized import QuantizedWeights

ACTIVATION_OPS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}  # lower-case op name -> canonical
# A gate activation a step may apply: a Sigmoid op, or a hard sigmoid min(max(alpha*x + beta, 0), 1) written
# with Clip/Mul/Add (recognisers report it as "hardsigmoid"), tried with the parameters producers use:
# ONNX's default and Keras 2's (0.2, 0.5), Keras 3's and PyTorch's Hardsigmoid relu6(x + 3) / 6 (1/6, 0.5).
GATE_ACTIVATIONS = {
    "sigmoid": (Activation("Sigmoid"),),
    "hardsigmoid": (Activation("HardSigmoid", 0.2, 0.5), Activation("HardSigmoid", 1 / 6, 0.5)),
}


class LiftRefused(Exception):
    """No hypothesis reproduces the original: the message says what was found and what was tried."""


@dataclass(frozen=True)
class WeightCandidate:
    """One reading of the constants a step multiplies by, gate blocks in the source's order.

    ``W`` is [G*H, I] and ``R`` [G*H, H]; ``biases`` lists the (Wb, Rb, label) readings to try, each
    [G*H] or None (zeros); ``label`` says which constants these are, for the report."""

    W: np.ndarray
    R: np.ndarray
    biases: tuple[tuple[np.ndarray | None, np.ndarray | None, str], ...]
    label: str
    # the integers the source stores for W and R (``schemas.quantized``, rows in the source's order), None for floats
    Wq: QuantizedWeights | None = None
    Rq: QuantizedWeights | None = None

    @property
    def gates(self) -> int:
        return self.W.shape[0] // self.R.shape[1]


@dataclass
class Recurrence:
    """One direction of a recurrence a recogniser found (the interface's Y is [S,1,N,H] in layout 0,
    [N,S,1,H] in layout 1; Y_h [1,N,H] or [N,1,H])."""

    name: str
    found: str  # what it is in the source, e.g. "an ONNX Loop of 5 steps (tf2onnx's Keras layers)"
    direction: Direction
    interface: Interface
    input_size: int
    hidden_size: int
    candidates: list[WeightCandidate]
    activations: frozenset[str]  # lower-case: sigmoid, hardsigmoid, tanh, relu
    run_original: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]  # interface feed -> its Y, Y_h (Y_c)
    tolerance: str | None = None  # the dtype whose tolerance the comparison uses (default: the interface's)
    # The inputs the original holds as constants (``RecurrentLayer.constants``: role -> value in layout 0, e.g. a
    # learned initial_h [1, N or 1, H]), each named in the interface: every hypothesis holds them, no sample feeds them.
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # A per-step hold the original reads (``Interface.mask``): its dtype and rank ([S,N] or [S,N,1]), so that
    # every sample feeds it a mask with holes (a held step between run ones, a row starting held).
    mask_form: tuple[str, int] | None = None


@dataclass(frozen=True)
class Lifted:
    layer: RecurrentLayer
    description: str  # what the hypothesis that held is, e.g. "GRU, gate order r, z, h, reset after the matmul"
    tried: int  # hypotheses run


GRU_SOURCE_ORDERS = (  # canonical gate at each source block; the common orders first
    ("z", "r", "h"),  # Keras, ONNX
    ("r", "z", "h"),  # PyTorch, coremltools
    ("r", "h", "z"),  # Apple BNNS / MPS
    ("z", "h", "r"),
    ("h", "z", "r"),
    ("h", "r", "z"),
)
LSTM_SOURCE_ORDERS = tuple(
    dict.fromkeys(
        [
            ("i", "f", "c", "o"),  # Keras, PyTorch
            ("i", "o", "f", "c"),  # ONNX
            ("f", "i", "c", "o"),  # OpenVINO
            ("i", "f", "o", "c"),  # Core ML
            *itertools.permutations(("i", "o", "f", "c")),
        ]
    )
)


def lift(rec: Recurrence, seed: int = 0) -> Lifted:
    """The canonical layer ``rec`` computes, proven against the original (LiftRefused if none)."""
    rng = np.random.default_rng(seed)
    feed = _sample(rec, rng)
    expected = _canonical(rec.interface, rec.run_original(feed))
    tried = 0
    for layer, description in _hypotheses(rec):
        tried += 1
        if _agrees(layer, feed, expected, rec.tolerance):
            fresh = _sample(rec, rng)
            if _agrees(layer, fresh, _canonical(rec.interface, rec.run_original(fresh)), rec.tolerance):
                return Lifted(layer, description, tried)
    shapes = "; ".join(c.label for c in rec.candidates) or "no weight matrices of matching shapes"
    acts = ", ".join(sorted(rec.activations)) or "no sigmoid/tanh/relu"
    raise LiftRefused(
        f"{rec.found}: none of {tried} GRU/RNN/LSTM readings of its constants ({shapes}; activations: {acts}) "
        "reproduces it on random inputs, so it is not lifted into a layer"
    )


Variant = tuple[tuple[str, ...], bool, tuple[Activation, ...]]  # (source gate order, reset after, activations)


def _gru_variants(rec: Recurrence, gates: list[Activation]) -> list[Variant]:
    """Every gate order, both reset placements, each gate activation seen (with a tanh candidate)."""
    if not gates or "tanh" not in rec.activations:
        return []
    return [
        (order, lbr, (gate, Activation("Tanh")))
        for gate in gates
        for order in GRU_SOURCE_ORDERS
        for lbr in (True, False)
    ]


def _lstm_variants(rec: Recurrence, gates: list[Activation]) -> list[Variant]:
    """Every gate order, each gate activation seen (tanh candidate and output)."""
    if not gates or "tanh" not in rec.activations:
        return []
    return [
        (order, False, (gate, Activation("Tanh"), Activation("Tanh"))) for gate in gates for order in LSTM_SOURCE_ORDERS
    ]


def _rnn_variants(rec: Recurrence, gates: list[Activation]) -> list[Variant]:
    """Each activation seen."""
    return [(("i",), False, (Activation(ACTIVATION_OPS[a]),)) for a in sorted(rec.activations & set(ACTIVATION_OPS))]


# The cells lifting reads a producer's recurrence as, each with its readings; a cell not named here is never lifted
VARIANTS: dict[Cell, Callable[[Recurrence, list[Activation]], list[Variant]]] = {
    Cell.LSTM: _lstm_variants,
    Cell.GRU: _gru_variants,
    Cell.RNN: _rnn_variants,
}


def _hypotheses(rec: Recurrence) -> Iterator[tuple[RecurrentLayer, str]]:
    """Every reading of the recurrence to try, in order, as a layer and its description: per weight candidate of a
    GRU's, RNN's or LSTM's shapes, per reading of its cell (``VARIANTS``) and per bias reading of the candidate."""
    gates = [act for name in sorted(rec.activations) for act in GATE_ACTIVATIONS.get(name, ())]
    for cand in rec.candidates:
        cell = next((c for c in VARIANTS if c.gates == cand.gates), None)
        if cell is None or cand.R.shape[1] != rec.hidden_size or cand.W.shape[1] != rec.input_size:
            continue
        for (order, lbr, acts), (wb, rb, bias_label) in itertools.product(VARIANTS[cell](rec, gates), cand.biases):
            blocks = [order.index(g) for g in cell.gate_names]  # source block of each canonical gate
            params = DirectionParams(
                W=_reorder(cand.W, blocks),
                R=_reorder(cand.R, blocks),
                Wb=_reorder(_or_zeros(wb, cand), blocks),
                Rb=_reorder(_or_zeros(rb, cand), blocks),
                activations=acts,
                Wq=_reorder_record(cand.Wq, blocks),
                Rq=_reorder_record(cand.Rq, blocks),
            )
            layer = RecurrentLayer(
                name=rec.name,
                cell=cell,
                input_size=rec.input_size,
                hidden_size=rec.hidden_size,
                direction=rec.direction,
                directions=(params,),
                interface=rec.interface,
                linear_before_reset=lbr,
                has_bias=wb is not None or rb is not None,
                constants=dict(rec.constants),
            )
            yield layer, f"{_reading(cell, order, lbr, acts)}; {cand.label}, {bias_label}"


def _reading(cell: Cell, order: tuple[str, ...], lbr: bool, acts: tuple[Activation, ...]) -> str:
    """'GRU; gate order r, z, h; reset after the matmul': what a hypothesis reads the recurrence as."""
    parts = [cell.op_name]
    if cell.gates > 1:
        parts.append(f"gate order {', '.join(order)}")
        if acts[0].name != "Sigmoid":
            parts.append(f"gates {acts[0]}")
    if cell.spec.reset_placement:
        parts += [f"reset {'after' if lbr else 'before'} the matmul"]
    elif cell.gates == 1:
        parts.append(acts[0].name)
    return "; ".join(parts)


def _reorder(array: np.ndarray, blocks: list[int]) -> np.ndarray:
    size = array.shape[0] // len(blocks)
    return np.ascontiguousarray(np.concatenate([array[b * size : (b + 1) * size] for b in blocks]))


def _reorder_record(record: QuantizedWeights | None, blocks: list[int]) -> QuantizedWeights | None:
    """A quantized record's gate blocks reordered as ``_reorder`` does its float view (its rows' parameters too)."""
    if record is None:
        return None
    spread = (a if record.axis is None else _reorder(a, blocks) for a in (record.scale, record.zero_point))
    return record.with_values(_reorder(record.values, blocks), *spread)


def _or_zeros(bias: np.ndarray | None, cand: WeightCandidate) -> np.ndarray:
    return np.zeros(cand.W.shape[0], cand.W.dtype) if bias is None else np.asarray(bias, cand.W.dtype)


def _sample(rec: Recurrence, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random X (and initial state, and sequence_lens in 1..S, unless the original holds them as constants) in
    the interface's layout and static sizes."""
    itf = rec.interface
    s = itf.seq_length if isinstance(itf.seq_length, int) else DEFAULT_SEQ_LENGTH
    n = itf.batch_size if isinstance(itf.batch_size, int) else DEFAULT_BATCH
    x = rng.uniform(-1, 1, (s, n, rec.input_size)).astype(itf.dtype)
    feed = {itf.x: x.transpose(PERM_SWAP_01) if itf.layout == 1 else x}
    if itf.sequence_lens and "sequence_lens" not in rec.constants:
        # row 0 at full length, row 1 shorter (steps past a length are tried), the rest random
        lengths = rng.integers(1, s + 1, n).astype(np.int32)
        lengths[0] = s
        lengths[1:2] = rng.integers(1, max(s, 2), lengths[1:2].shape)
        feed[itf.sequence_lens] = lengths
    if itf.mask and rec.mask_form:
        feed[itf.mask] = _sample_mask(rng, s, n, *rec.mask_form)
    for role in ("initial_h", "initial_c"):
        name = getattr(itf, role)
        if name and role not in rec.constants:
            state = rng.uniform(-1, 1, (1, n, rec.hidden_size)).astype(itf.dtype)
            feed[name] = state.transpose(PERM_SWAP_01) if itf.layout == 1 else state
    return {k: np.ascontiguousarray(v) for k, v in feed.items()}


def _sample_mask(rng: np.random.Generator, s: int, n: int, dtype: str, rank: int) -> np.ndarray:
    """A random per-step mask [S,N] (or [S,N,1]) with holes: row 0 runs every step but one in the middle, row 1
    starts held, the rest random (about a third held)."""
    mask = rng.random((s, n)) < 0.65
    mask[:, 0] = True
    mask[s // 2, 0] = s < 2
    if n > 1:
        mask[0, 1] = False
    return (mask[..., None] if rank == 3 else mask).astype(dtype)


def _canonical(itf: Interface, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Y [S,1,N,H], Y_h and Y_c [1,N,H] (layout 0) from outputs named and laid out as the interface says."""
    found = {}
    if itf.y:
        y = np.asarray(outputs[itf.y])
        found["Y"] = y.transpose(PERM_Y_TO_SEQ_MAJOR) if itf.layout == 1 else y
    for key, name in (("Y_h", itf.y_h), ("Y_c", itf.y_c)):
        if name:
            state = np.asarray(outputs[name])
            found[key] = state.transpose(PERM_SWAP_01) if itf.layout == 1 else state
    return found


def _agrees(layer: RecurrentLayer, feed: dict, expected: dict[str, np.ndarray], tolerance: str | None) -> bool:
    itf = layer.interface
    outputs = run_layer(
        layer,
        feed[itf.x],
        feed.get(itf.sequence_lens or ""),
        feed.get(itf.initial_h or ""),
        feed.get(itf.initial_c or ""),
        feed.get(itf.mask or ""),
    )
    actual = _canonical(itf, dict(zip([itf.y or "", itf.y_h or "", itf.y_c or ""], outputs)))
    atol, rtol = TOLERANCES[tolerance or itf.dtype]
    return all(
        actual[key].shape == value.shape
        and bool(np.all(np.abs(actual[key].astype(np.float64) - value) <= atol + rtol * np.abs(value)))
        for key, value in expected.items()
    )


def candidates_from_constants(
    constants: dict[str, np.ndarray], input_size: int, hidden_size: int
) -> list[WeightCandidate]:
    """Every reading of named constants as a fused W [I, G*H] or [G*H, I], R [H, G*H] or [G*H, H] and
    biases ([G*H] vectors, or the rows of a [2, G*H] matrix), for G = 4 (LSTM), 3 (GRU) and 1 (RNN).

    Biases are tried as separate input and recurrent vectors (both assignments), one vector on either
    side (for a GRU with the reset after the matmul, the candidate's recurrent bias must stay apart
    from its input bias), a [4H] vector as OpenVINO's GRU with the reset after the matmul stores it
    (Wb+Rb for z and r, then Wb_h, Rb_h), or none. An LSTM and an RNN only ever add Wb + Rb, so for
    them one assignment of a pair and one side of a single vector suffice."""
    floats = {k: v for k, v in constants.items() if v.dtype.kind == "f" and v.size > 1}
    found = []
    for gates in (4, 3, 1):
        gh = gates * hidden_size
        vectors = [(k, v.reshape(-1)) for k, v in floats.items() if v.shape in ((gh,), (1, gh))]
        vectors += [(f"{k}[{row}]", v[row]) for k, v in floats.items() if v.shape == (2, gh) for row in (0, 1)]
        sided = gates == 3  # only a GRU tells the input bias from the recurrent one
        pairs = itertools.permutations(vectors, 2) if sided else itertools.combinations(vectors, 2)
        biases: list[tuple[np.ndarray | None, np.ndarray | None, str]] = [
            (a, b, f"biases {na!r} (input) and {nb!r} (recurrent)") for (na, a), (nb, b) in pairs
        ]
        biases += [(v, None, f"bias {n!r} (input)") for n, v in vectors]
        biases += [(None, v, f"bias {n!r} (recurrent)") for n, v in vectors if sided]
        if sided:  # OpenVINO's GRU with the reset after the matmul: [4H] = Wb+Rb (z, r), Wb_h, Rb_h
            for n, v in ((k, v.reshape(-1)) for k, v in floats.items() if v.shape in ((gh + hidden_size,),)):
                rb = np.concatenate([np.zeros(2 * hidden_size, v.dtype), v[gh:]])
                biases.append((v[:gh], rb, f"bias {n!r} ([4H]: z, r summed, then h's two)"))
        biases.append((None, None, "no bias"))
        for (wn, w), (rn, r) in itertools.permutations(floats.items(), 2):
            for w_oriented, w_text in _orientations(w, (gh, input_size)):
                for r_oriented, r_text in _orientations(r, (gh, hidden_size)):
                    label = f"W {wn!r}{w_text}, R {rn!r}{r_text}"
                    found.append(WeightCandidate(w_oriented, r_oriented, tuple(biases), label))
    return found


def hidden_sizes(constants: dict[str, np.ndarray], input_size: int) -> set[int]:
    """Every hidden size H for which two of the float matrices can be a fused W ([I, G*H] or [G*H, I])
    and R ([H, G*H] or [G*H, H]), G = 4, 3 or 1: the weights tell H when no shape does."""
    matrices = [v.shape for v in constants.values() if v.dtype.kind == "f" and v.ndim == 2]
    found = set()
    for w, r in itertools.permutations(matrices, 2):
        for fused in (d for axis, d in enumerate(w) if w[1 - axis] == input_size):
            for hidden in (d for axis, d in enumerate(r) if r[1 - axis] == fused):
                if any(gates * hidden == fused for gates in (4, 3, 1)):
                    found.add(hidden)
    return found


def _orientations(array: np.ndarray, shape: tuple[int, int]) -> list[tuple[np.ndarray, str]]:
    """``array`` as a matrix of ``shape`` as stored, or transposed (the x @ W convention)."""
    found = []
    if array.shape == shape:
        found.append((np.ascontiguousarray(array), ""))
    if array.ndim == 2 and array.shape == shape[::-1]:
        found.append((np.ascontiguousarray(array.T), " (transposed)"))
    return found

"""The canonical description of one recurrent layer, the hub every format converts to and from.

Conventions (the ONNX ones, so an ONNX layer maps onto it with no rearranging):

* ``W`` is ``[G*H, I]`` and ``R`` is ``[G*H, H]`` per direction, gate blocks of H rows in ONNX
  order: GRU ``z, r, h`` (update, reset, hidden candidate), RNN one block, LSTM ``i, o, f, c`` (input,
  output, forget, cell candidate). G and the gate names come from the cell table (``schemas.cells``),
  the one place that knows the cells.
* Biases stay split: ``Wb`` (input) and ``Rb`` (recurrent), ``[G*H]`` each. A format that stores the
  sum reads back as ``Wb = sum, Rb = 0`` (except the GRU reset-after candidate ``Rb_h``, which must
  stay separate).
* GRU equations (f, g = the direction's two activations; clip c applied to every pre-activation)::

      z_t = f(clip(x_t Wz^T + h_{t-1} Rz^T + Wbz + Rbz))
      r_t = f(clip(x_t Wr^T + h_{t-1} Rr^T + Wbr + Rbr))
      n_t = g(clip(x_t Wh^T + (r_t * h_{t-1}) Rh^T + Rbh + Wbh))     linear_before_reset = False
      n_t = g(clip(x_t Wh^T + r_t * (h_{t-1} Rh^T + Rbh) + Wbh))     linear_before_reset = True
      h_t = (1 - z_t) * n_t + z_t * h_{t-1}

* RNN: ``h_t = f(clip(x_t Wi^T + h_{t-1} Ri^T + Wbi + Rbi))``.
* LSTM (gates i, o, f, c; f, g, h = the direction's three activations; states h and c; optional
  peepholes ``P`` [3H] in the order i, o, f)::

      i_t = f(clip(x_t Wi^T + h_{t-1} Ri^T + Pi * c_{t-1} + Wbi + Rbi))
      f_t = f(clip(x_t Wf^T + h_{t-1} Rf^T + Pf * c_{t-1} + Wbf + Rbf))     input_forget: f_t = 1 - i_t
      c~_t = g(clip(x_t Wc^T + h_{t-1} Rc^T + Wbc + Rbc))
      c_t = f_t * c_{t-1} + i_t * c~_t
      o_t = f(clip(x_t Wo^T + h_{t-1} Ro^T + Po * c_t + Wbo + Rbo))
      h_t = o_t * h(c_t)
* ``directions[0]`` is the forward (or the only) direction, ``directions[1]`` the reverse one of a
  bidirectional layer.
* A per-step hold (``Interface.mask``, Keras masking): a tensor m [S,N] or [S,N,1], sequence-major whatever
  the layout, bool or numeric (non-zero: the step runs). Per direction, in its processing order,
  ``s_t = m_t ? step(s_{t-1}, x_t) : s_{t-1}`` for every state s, and ``Y_t = h_t`` (the held state). A
  mask may have holes anywhere, so it is not ``sequence_lens`` (a layer has one or the other); with no
  initial state this is Keras's output on masked steps (its last output, zero before the first step run).

Everything is immutable and validated on construction; errors name the layer and the value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from gatepack.schemas.activations import Activation
from gatepack.schemas.cells import Cell, CellSpec, spec_of
from gatepack.schemas.quantized import (
    RUN_TIME_SCHEMES,
    FloatView,
    PalettizedWeights,
    QuantizationError,
    QuantizedWeights,
)

Dim = Union[int, str, None]  # static size, symbolic name, or unknown


class Direction(str, enum.Enum):
    FORWARD = "forward"
    REVERSE = "reverse"
    BIDIRECTIONAL = "bidirectional"

    @property
    def count(self) -> int:  # type: ignore[override]  # deliberately shadows str.count: the weight sets it has
        return 2 if self is Direction.BIDIRECTIONAL else 1


FLOAT_DTYPES = ("float16", "float32", "float64")

# Batch-major (layout 1) <-> sequence-major (layout 0) axis permutations, written once.
# X [S,N,I] <-> [N,S,I] and initial_h / Y_h [D,N,H] <-> [N,D,H] swap the first two axes (self-inverse).
PERM_SWAP_01 = (1, 0, 2)
PERM_Y_TO_BATCH_MAJOR = (2, 0, 1, 3)  # Y [S,D,N,H] -> [N,S,D,H]
PERM_Y_TO_SEQ_MAJOR = (1, 2, 0, 3)  # Y [N,S,D,H] -> [S,D,N,H]


def dim_text(dim: "Dim") -> str:
    """A static, symbolic or unknown dimension as text: 5, 'S', '?'."""
    return "?" if dim is None else str(dim)


def stack_directions(parts: "list[np.ndarray]") -> "np.ndarray":
    """``np.stack(parts)``, without a copy when the parts are the consecutive rows of one C-contiguous
    array (per-direction views of a source's [D, ...] tensor, e.g. memory-mapped external data)."""
    base = parts[0].base
    if (
        isinstance(base, np.ndarray)
        and base.flags.c_contiguous
        and base.shape == (len(parts), *parts[0].shape)
        and base.dtype == parts[0].dtype
        and all(
            p.base is base and p.flags.c_contiguous and p.ctypes.data == base.ctypes.data + k * p.nbytes
            for k, p in enumerate(parts)
        )
    ):
        return base
    return np.stack(parts)


def reorder_gates(
    array: "np.ndarray",
    source: tuple[str, ...],
    target: tuple[str, ...],
    axis: int = 0,
    out: "np.ndarray | None" = None,
) -> "np.ndarray":
    """``array``'s gate blocks (equal parts of ``axis``) from the order ``source`` to ``target``, e.g.
    ONNX LSTM ('i', 'o', 'f', 'c') -> OpenVINO ('f', 'i', 'c', 'o'); the array itself when they agree. Written
    into ``out`` when given (one copy, e.g. into a direction of a stacked array)."""
    if source == target:
        if out is None:
            return array
        out[...] = array
        return out
    blocks = np.split(array, len(source), axis=axis)
    return np.concatenate([blocks[source.index(gate)] for gate in target], axis=axis, out=out)


@dataclass(frozen=True, eq=False)
class Provenance:
    """Where a layer was read from, in one typed record every module may read (no format reaches
    into another's private objects).

    ``kind`` is ``node`` for another producer's recurrent op, or the strategy (``native``,
    ``decomposed``) of a layer gatepack wrote. ``op_type``, ``op_version``, ``inputs`` and ``layout``
    describe the source node where the format has one (ONNX: the operator, its opset, its input tensor
    names X, W, R, B, sequence_lens, initial_h, its own layout attribute and every attribute as written).
    ``handle`` is the reader's own record for re-running the layer from the artifact; only the module of ``format``
    reads it.
    """

    format: str
    artifact: Path
    node: str
    kind: str = "node"
    op_type: str | None = None
    op_version: int | None = None
    inputs: tuple[str, ...] = ()
    layout: int | None = None
    handle: object = field(default=None, repr=False)
    # the source node's attributes as written (ONNX: name -> value, strings decoded), for whoever must read
    # the node as another runtime would (onnxruntime's DirectML provider applies its own defaults)
    attributes: tuple[tuple[str, object], ...] = ()

    def of(self, fmt: str) -> bool:
        """Whether the layer was read from an artifact of format ``fmt``."""
        return self.format == fmt


class SpecError(ValueError):
    """A canonical layer that contradicts itself; the message names the layer and the value."""


@dataclass(frozen=True, eq=False, repr=False)
class DirectionParams:
    """Weights and activations of one direction (ONNX gate order, split biases)."""

    def __repr__(self) -> str:
        acts = ", ".join(str(a) for a in self.activations)
        w, r = self.stored("W"), self.stored("R")
        return f"DirectionParams(W {list(w.shape)}, R {list(r.shape)}, {w.dtype}, activations {acts})"

    W: np.ndarray  # [G*H, I]
    R: np.ndarray  # [G*H, H]
    Wb: np.ndarray  # [G*H]
    Rb: np.ndarray  # [G*H]
    activations: tuple[Activation, ...]
    P: np.ndarray | None = None  # peepholes [len(cell peepholes) * H] (LSTM: i, o, f); None: none
    # the integers the source stores for W and R (``schemas.quantized``); W and R are then their float view,
    # ``Wq.dequantized()``, exactly (validated): executors read W and R, writers that hold integers read these
    Wq: QuantizedWeights | None = None
    Rq: QuantizedWeights | None = None
    # the lookup table the source stores W or R as (palettized: ``schemas.quantized.PalettizedWeights``); W and R
    # are then its palette values, exactly (validated): only a writer holding lookup tables (Core ML) reads these
    Wlut: PalettizedWeights | None = None
    Rlut: PalettizedWeights | None = None

    def quantized(self, role: str) -> QuantizedWeights | None:
        """The quantized record of ``role`` ('W' or 'R'), None when the source stores floats."""
        return self.Wq if role == "W" else self.Rq if role == "R" else None

    def palettized(self, role: str) -> PalettizedWeights | None:
        """The lookup-table record of ``role`` ('W' or 'R'), None when the source stores no palette for it."""
        return self.Wlut if role == "W" else self.Rlut if role == "R" else None

    def stored(self, role: str) -> "np.ndarray | FloatView":
        """W or R as held: the array, or the ``FloatView`` its first read makes (``_MadeOnRead``)."""
        return self.__dict__[_MadeOnRead.SLOT + role]


class _MadeOnRead:
    """``DirectionParams.W`` and ``.R``: each holds an array, or a ``FloatView`` (weights quantized from floats) that
    the first read replaces by the array it makes, ``record.dequantized(dtype)``, kept from then on. So the float
    view of weights quantized as asked costs nothing until something computes with it (a writer of the integers
    never does), and reads exactly as if made at once. Set only by the dataclass's ``__init__``."""

    SLOT = "_stored_"

    def __init__(self, role: str) -> None:
        self.role, self.slot = role, self.SLOT + role

    def __get__(self, params: object, owner: type | None = None) -> np.ndarray:
        if params is None:
            raise AttributeError(self.role)  # (the dataclass sees no default)
        stored = params.__dict__[self.slot]
        if isinstance(stored, FloatView):
            stored = params.__dict__[self.slot] = stored.make()
        return stored

    def __set__(self, params: object, value: "np.ndarray | FloatView") -> None:
        params.__dict__[self.slot] = value


for _role in ("W", "R"):  # after the dataclass is made: fields without defaults, read and set through the descriptor
    setattr(DirectionParams, _role, _MadeOnRead(_role))


# The interface's tensors, in the order of an ONNX recurrent node's inputs and outputs: the initial and
# final state of each state of the cell table (``initial_<s>``, ``y_<s>``).
INPUT_ROLES = ("x", "sequence_lens", "initial_h", "initial_c")
OUTPUT_ROLES = ("y", "y_h", "y_c")
# Their names in reports and verification (ONNX's): X, Y, Y_h ...
ROLE_LABELS = {
    "x": "X",
    "sequence_lens": "sequence_lens",
    "initial_h": "initial_h",
    "initial_c": "initial_c",
    "y": "Y",
    "y_h": "Y_h",
    "y_c": "Y_c",
}


# The weights a source may store quantized (``DirectionParams.Wq``/``Rq``).
QUANTIZED_ROLES = ("W", "R")


# Optional inputs a source may hold as constants (an initializer, a ``Constant`` node, a folded cone) rather
# than take from its user: such a value is part of the layer, written by every target in its own constant
# form, and never fed by verification.
CONSTANT_ROLES = ("sequence_lens", "initial_h", "initial_c")


def state_roles(cell: Cell) -> tuple[tuple[str, str], ...]:
    """(initial-state role, final-state role) per state of ``cell``: GRU (('initial_h', 'y_h'),)."""
    return tuple((f"initial_{s}", f"y_{s}") for s in spec_of(cell).states)


@dataclass(frozen=True)
class Interface:
    """How the layer meets the outside world: tensor names, layout, optional inputs, shapes, dtype.

    Tensor names are the source's, so a converted artifact is a drop-in replacement. ``None`` for an
    optional input means the source has none; for an output, that the source does not request it.
    """

    x: str
    y: str | None
    y_h: str | None
    sequence_lens: str | None = None
    initial_h: str | None = None
    layout: int = 0  # 0: X [S,N,I] (sequence-major); 1: X [N,S,I] (batch-major)
    seq_length: Dim = None
    batch_size: Dim = None
    dtype: str = "float32"
    initial_c: str | None = None  # LSTM: the initial cell state [D,N,H] (layout 1: [N,D,H])
    y_c: str | None = None  # LSTM: the final cell state, shaped as Y_h
    mask: str | None = None  # a per-step hold [S,N] or [S,N,1], sequence-major (module docstring); None: none

    def __post_init__(self) -> None:
        """Types checked on construction: interfaces are also read from manifests gatepack did not write."""
        for label in INPUT_ROLES + OUTPUT_ROLES:
            value = getattr(self, label)
            if not (value is None and label != "x") and (not isinstance(value, str) or not value):
                raise SpecError(f"interface {label} {value!r} is not a tensor name")
        if isinstance(self.layout, bool) or not isinstance(self.layout, (int, np.integer)) or self.layout not in (0, 1):
            raise SpecError(f"interface layout {self.layout!r} is not 0 or 1")
        for label in ("seq_length", "batch_size"):
            value = getattr(self, label)
            if isinstance(value, bool) or not (
                value is None or isinstance(value, str) or (isinstance(value, (int, np.integer)) and value >= 0)
            ):
                raise SpecError(f"interface {label} {value!r} is not a size, a symbol or unknown")
        if self.dtype not in FLOAT_DTYPES:
            raise SpecError(f"interface dtype {self.dtype!r} is not one of {FLOAT_DTYPES}")
        if self.mask is not None and (not isinstance(self.mask, str) or not self.mask):
            raise SpecError(f"interface mask {self.mask!r} is not a tensor name")
        if self.mask is not None and self.sequence_lens is not None:
            raise SpecError(f"interface mask {self.mask!r} and sequence_lens {self.sequence_lens!r}: one or the other")


@dataclass(frozen=True, eq=False, repr=False)
class RecurrentLayer:
    """One GRU, RNN or LSTM layer, in the canonical convention described in the module docstring."""

    name: str
    cell: Cell
    input_size: int
    hidden_size: int
    direction: Direction
    directions: tuple[DirectionParams, ...]
    interface: Interface
    linear_before_reset: bool = False
    clip: float | None = None  # None: no clip. GRU and LSTM need clip > 0; RNN allows 0 (clamps to 0).
    has_bias: bool = True  # the source stored a bias (False: all-zero biases, written without one)
    input_forget: bool = False  # LSTM: the forget gate is 1 - the input gate
    # role (``CONSTANT_ROLES``) -> the value the source holds for that input, in layout 0: sequence_lens [N]
    # int32, initial_h / initial_c [D, N, H] in the layer's dtype. A state of batch 1 serves every batch (a
    # learned state broadcast to the batch). The interface keeps the role's tensor name.
    constants: dict = field(default_factory=dict)
    provenance: Provenance | None = field(default=None, compare=False)  # where it was read from, never semantics

    def __post_init__(self) -> None:
        self.validate()

    def __repr__(self) -> str:
        lbr = f", linear_before_reset={int(self.linear_before_reset)}" if self.cell.spec.reset_placement else ""
        clip = f", clip={self.clip:g}" if self.clip is not None else ""
        clip += (", peepholes" if self.has_peepholes else "") + (", input_forget" if self.input_forget else "")
        clip += "".join(f", constant {role}" for role in self.constants)
        return (
            f"RecurrentLayer({self.name!r}, {self.cell.op_name} {self.direction.value}, I={self.input_size}, "
            f"H={self.hidden_size}{lbr}{clip}, {self.activation_summary()}, {self.interface.dtype}, "
            f"{self.parameter_count()} parameters)"
        )

    @property
    def num_directions(self) -> int:
        return self.direction.count

    @property
    def gates(self) -> int:
        return self.cell.gates

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.interface.dtype)

    @property
    def has_peepholes(self) -> bool:
        return self.directions[0].P is not None

    def constant(self, role: str) -> np.ndarray | None:
        """The constant value the layer holds for input ``role`` (layout 0), or None when it is fed."""
        return self.constants.get(role)

    def fed_roles(self) -> tuple[str, ...]:
        """The optional input roles the layer takes from its user (named in the interface, not constant)."""
        return tuple(r for r in INPUT_ROLES[1:] if getattr(self.interface, r) and r not in self.constants)

    def constant_state(self, role: str, batch: int) -> np.ndarray | None:
        """The constant ``initial_h``/``initial_c`` as [D, batch, H] (a batch-1 state broadcast), or None."""
        value = self.constants.get(role)
        if value is None or value.shape[1] == batch:
            return value
        return np.broadcast_to(value, (value.shape[0], batch, value.shape[2]))

    def parameter_count(self) -> int:
        return sum(
            int(np.prod(p.stored("W").shape))
            + int(np.prod(p.stored("R").shape))
            + (p.Wb.size + p.Rb.size if self.has_bias else 0)
            + (0 if p.P is None else p.P.size)
            for p in self.directions
        )

    def _fail(self, what: str) -> SpecError:
        return SpecError(f"layer {self.name!r}: {what}")

    def validate(self) -> None:
        """Check every invariant; raise SpecError naming the layer and the offending value."""
        self._validate_scalars()
        spec = spec_of(self.cell)
        self._validate_sizes()
        self._validate_cell_options(spec)
        if len(self.directions) != self.num_directions:
            raise self._fail(
                f"direction {self.direction.value} needs {self.num_directions} weight set(s), got "
                f"{len(self.directions)}"
            )
        for d, params in enumerate(self.directions):
            self._validate_weights(d, params)
            self._validate_peepholes(d, params, spec)
            self._validate_activations(d, params)
        if not any(getattr(self.interface, role) for role in OUTPUT_ROLES):
            raise self._fail("requests no output (Y, Y_h or Y_c)")
        self._validate_quantized()
        self._validate_palettized()
        self._validate_constants()

    def _validate_scalars(self) -> None:
        """The name is a non-empty string, the flags booleans, ``clip`` a number or None, ``cell`` a Cell."""
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"layer name {self.name!r} is not a non-empty string")
        for label in ("linear_before_reset", "input_forget", "has_bias"):
            if not isinstance(getattr(self, label), (bool, np.bool_)):
                raise self._fail(f"{label} {getattr(self, label)!r} is not true or false")
        if self.clip is not None and (
            isinstance(self.clip, bool) or not isinstance(self.clip, (int, float, np.floating, np.integer))
        ):
            raise self._fail(f"clip {self.clip!r} is not a number")
        if not isinstance(self.cell, Cell):
            raise self._fail(f"cell {self.cell!r} is not one of {[c.value for c in Cell]}")

    def _validate_sizes(self) -> None:
        """``direction`` a Direction, H and I positive integers, the interface's dtype a float and layout 0 or 1."""
        if not isinstance(self.direction, Direction):
            raise self._fail(f"direction {self.direction!r} is not one of {[d.value for d in Direction]}")
        for label, value in (("hidden_size", self.hidden_size), ("input_size", self.input_size)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise self._fail(f"{label} must be a positive integer, got {value!r}")
        if self.interface.dtype not in FLOAT_DTYPES:
            raise self._fail(f"dtype {self.interface.dtype!r} is not one of {FLOAT_DTYPES}")
        if self.interface.layout not in (0, 1):
            raise self._fail(f"layout must be 0 or 1, got {self.interface.layout!r}")

    def _validate_cell_options(self, spec: CellSpec) -> None:
        """The options the cell takes: finite ``clip`` >= 0 (> 0 unless the cell allows 0), ``linear_before_reset``
        and ``input_forget`` only where the cell has them, a cell state c only where the cell keeps one."""
        if self.clip is not None:
            if not np.isfinite(self.clip) or self.clip < 0 or (self.clip == 0 and not spec.zero_clip):
                raise self._fail(f"clip must be {'>= 0' if spec.zero_clip else '> 0'}, got {self.clip!r}")
        if self.linear_before_reset and not spec.reset_placement:
            raise self._fail(f"linear_before_reset does not apply to {spec.onnx_op}")
        if self.input_forget and not spec.input_forget:
            raise self._fail(f"input_forget does not apply to {spec.onnx_op}")
        for initial, final in (("initial_c", "y_c"),):
            if "c" not in spec.states and (getattr(self.interface, initial) or getattr(self.interface, final)):
                raise self._fail(f"{spec.onnx_op} has no cell state c (interface names {initial} or {final})")

    def _validate_weights(self, d: int, params: DirectionParams) -> None:
        """Direction ``d``'s W [G*H, I], R [G*H, H], Wb and Rb [G*H] are arrays of the layer's dtype."""
        gh, h, i = self.gates * self.hidden_size, self.hidden_size, self.input_size
        for label, array, shape in (
            ("W", params.stored("W"), (gh, i)),
            ("R", params.stored("R"), (gh, h)),
            ("Wb", params.Wb, (gh,)),
            ("Rb", params.Rb, (gh,)),
        ):
            if not isinstance(array, (np.ndarray, FloatView)) or array.shape != shape:
                got = list(array.shape) if hasattr(array, "shape") else type(array).__name__
                raise self._fail(f"direction {d} {label} has shape {got}, expected {list(shape)}")
            if array.dtype != self.dtype:
                raise self._fail(f"direction {d} {label} is {array.dtype}, the layer is {self.dtype}")

    def _validate_peepholes(self, d: int, params: DirectionParams, spec: CellSpec) -> None:
        """Peepholes P [len(peepholes) * H] only for a cell that takes them, and then in every direction."""
        if params.P is None and not (d and self.has_peepholes):
            return
        shape = (len(spec.peepholes) * self.hidden_size,)
        if not spec.peepholes:
            raise self._fail(f"direction {d} has peepholes, which {spec.onnx_op} does not take")
        if not isinstance(params.P, np.ndarray) or params.P.shape != shape:
            given_shape = getattr(params.P, "shape", None)
            got = list(given_shape) if given_shape is not None else repr(params.P)
            raise self._fail(f"direction {d} P has shape {got}, expected {list(shape)} (every direction)")
        if params.P.dtype != self.dtype:
            raise self._fail(f"direction {d} P is {params.P.dtype}, the layer is {self.dtype}")

    def _validate_activations(self, d: int, params: DirectionParams) -> None:
        """Direction ``d`` has exactly the cell's number of activations, each an Activation."""
        if len(params.activations) != self.cell.activation_count:
            raise self._fail(
                f"direction {d} has {len(params.activations)} activation(s), "
                f"{self.cell.value} takes {self.cell.activation_count}"
            )
        for act in params.activations:
            if not isinstance(act, Activation):
                raise self._fail(f"direction {d} activation {act!r} is not an Activation")

    @property
    def is_quantized(self) -> bool:
        """Whether the source stores W or R as integers (``DirectionParams.Wq``/``Rq``)."""
        return any(p.Wq is not None or p.Rq is not None for p in self.directions)

    @property
    def is_palettized(self) -> bool:
        """Whether the source stores W or R as a lookup table (``DirectionParams.Wlut``/``Rlut``)."""
        return any(p.Wlut is not None or p.Rlut is not None for p in self.directions)

    def palettization_summary(self) -> str:
        """E.g. 'W 4-bit palette per tensor (16 entries); R ...' ('' when not palettized)."""
        parts = []
        for role in QUANTIZED_ROLES:
            records = [r for r in (p.palettized(role) for p in self.directions) if r is not None]
            if records:
                parts.append(f"{role} {' | '.join(sorted({r.describe() for r in records}))}")
        return "; ".join(parts)

    def quantization_summary(self) -> str:
        """E.g. 'W int8 per channel, symmetric; R int8 per channel, symmetric' ('' when not quantized)."""
        parts, schemes = [], set()
        for role in QUANTIZED_ROLES:
            records = [r for r in (p.quantized(role) for p in self.directions) if r is not None]
            schemes |= {r.dynamic_activations for r in records if r.dynamic_activations}
            if records:
                parts.append(f"{role} {' | '.join(sorted({r.describe() for r in records}))}")
        return "; ".join([*parts, *(RUN_TIME_SCHEMES[s] for s in sorted(schemes))])

    def _validate_quantized(self) -> None:
        """Every direction quantizes W (and R) alike or not at all, each record shaped as its float view and
        that view exactly its dequantization."""
        for role in QUANTIZED_ROLES:
            records = [p.quantized(role) for p in self.directions]
            if any(r is None for r in records) and any(r is not None for r in records):
                raise self._fail(f"{role} is quantized in some directions only")
            for d, (params, record) in enumerate(zip(self.directions, records)):
                if record is None:
                    continue
                if not isinstance(record, QuantizedWeights):
                    raise self._fail(f"direction {d} {role}q is a {type(record).__name__}, not QuantizedWeights")
                try:
                    record.validate()
                except QuantizationError as err:
                    raise self._fail(f"direction {d} {role}q: {err}") from None
                floats = params.stored(role)  # a FloatView of this record is its dequantization by construction
                made = isinstance(floats, FloatView) and floats.record is record
                if not made and (isinstance(floats, FloatView) or not record.is_dequantization(floats)):
                    raise self._fail(f"direction {d} {role} is not the dequantization of its integers {role}q")

    def _validate_palettized(self) -> None:
        """Every lookup-table record a ``PalettizedWeights`` shaped as its float view, which is exactly its palette
        values, and never beside integers of the same role."""
        for d, params in enumerate(self.directions):
            for role in QUANTIZED_ROLES:
                record = params.palettized(role)
                if record is None:
                    continue
                if not isinstance(record, PalettizedWeights) or params.quantized(role) is not None:
                    raise self._fail(f"direction {d} {role}lut is not a PalettizedWeights beside float {role}")
                if isinstance(params.stored(role), FloatView) or not record.is_dequantization(getattr(params, role)):
                    raise self._fail(f"direction {d} {role} is not the values of its lookup table {role}lut")

    def _validate_constants(self) -> None:
        if not isinstance(self.constants, dict):
            raise self._fail(f"constants {type(self.constants).__name__} is not a mapping of input roles")
        batch = self.interface.batch_size
        for role, value in self.constants.items():
            if role not in CONSTANT_ROLES:
                raise self._fail(f"constant {role!r} is not one of {CONSTANT_ROLES}")
            if not getattr(self.interface, role):
                raise self._fail(f"constant {role} has no tensor name in the interface")
            if not isinstance(value, np.ndarray):
                raise self._fail(f"constant {role} is a {type(value).__name__}, not an array")
            if role == "sequence_lens":
                if value.ndim != 1 or value.dtype != np.int32:
                    raise self._fail(f"constant sequence_lens is {value.dtype} {list(value.shape)}, expected int32 [N]")
                continue
            shape = (self.num_directions, value.shape[1] if value.ndim == 3 else -1, self.hidden_size)
            if value.shape != shape or (isinstance(batch, int) and value.shape[1] not in (1, batch)):
                raise self._fail(
                    f"constant {role} has shape {list(value.shape)}, expected [{self.num_directions}, "
                    f"{batch if isinstance(batch, int) else 'N'}, {self.hidden_size}]"
                )
            if value.dtype != self.dtype:
                raise self._fail(f"constant {role} is {value.dtype}, the layer is {self.dtype}")

    def activation_summary(self) -> str:
        """E.g. 'Sigmoid, Tanh' or 'fwd: Sigmoid, Tanh | rev: HardSigmoid(alpha=0.2, beta=0.5), Tanh'."""
        per_dir = [", ".join(str(a) for a in p.activations) for p in self.directions]
        if len(per_dir) == 2 and per_dir[0] != per_dir[1]:
            return f"fwd: {per_dir[0]} | rev: {per_dir[1]}"
        return per_dir[0]

"""Recurrent cells as data: one record per cell, read by the canonical spec, the executor, verification,
inspection and every format module (docs/design.md, "Cells as data", "A new cell").

A cell is described by what differs between cells, never by code paths that test the cell's name:

* ``gates``: the gate blocks of W, R, Wb and Rb in the canonical (ONNX) order, H rows each;
* ``activations``: the activation slots per direction and their ONNX defaults;
* ``states``: the recurrent state tensors carried from step to step (``h``; LSTM adds ``c``), each
  with an optional initial-state input and a final-state output (``initial_h`` / ``Y_h``);
* flags for what only some cells have: the reset placement (GRU's ``linear_before_reset``),
  peepholes and input/forget coupling (LSTM), and whether clip 0 is meaningful;
* how it is computed: its ``graph_step`` (one time step as elementary ops, ``converters.cell_steps``' ``StepOps``:
  every decomposing writer builds it), its ``executor_step`` (the NumPy executor's, ``converters.executor``), and
  the ONNX operator that computes it, if any (``onnx_op``; None: ONNX holds it only as elementary operators).
  The built-in cells name their steps as ``"module:function"``, imported on first use, so that this table stays
  free of numpy (the CLI reads it at start-up).

Adding a cell is one record, ``register(CellSpec(...))``: ``Cell`` is the string of its name with the record
attached (``Cell("gru")`` is ``Cell.GRU``; an unknown name raises), every format's capability record answers
"no op of mine" for a cell it does not know, and a writer with an elementary form builds it from its graph step.
``spec_of`` raises for anything unregistered, so no code can silently treat an unknown cell as another.

Equations, in the canonical order (f, g = the direction's activations, clip bounds every pre-activation):

* GRU (gates z, r, h)::

      z = f(x Wz^T + h Rz^T + Wbz + Rbz)        r = f(x Wr^T + h Rr^T + Wbr + Rbr)
      n = g(x Wh^T + (r * h) Rh^T + Rbh + Wbh)       linear_before_reset = 0
      n = g(x Wh^T + r * (h Rh^T + Rbh) + Wbh)       linear_before_reset = 1
      h' = (1 - z) * n + z * h

* RNN (gate i): ``h' = f(x Wi^T + h Ri^T + Wbi + Rbi)``.
* LSTM (gates i, o, f, c; peepholes P = Pi, Po, Pf; states h and c)::

      i = f(x Wi^T + h Ri^T + Pi * c + Wbi + Rbi)
      f_ = f(x Wf^T + h Rf^T + Pf * c + Wbf + Rbf)       input_forget = 1: f_ = 1 - i
      c~ = g(x Wc^T + h Rc^T + Wbc + Rbc)
      c' = f_ * c + i * c~
      o = f(x Wo^T + h Ro^T + Po * c' + Wbo + Rbo)       (the output peephole reads the new c)
      h' = o * h(c')                                      (h = the third activation)
"""

import importlib
from typing import Any, Callable, ClassVar, Iterator, NamedTuple


class _CellTable(type):
    """``for cell in Cell``: the registered cells, in the order they were registered."""

    def __iter__(cls) -> Iterator["Cell"]:
        return iter(list(CELLS))

    def __len__(cls) -> int:
        return len(CELLS)


class Cell(str, metaclass=_CellTable):
    """A recurrent cell: the string of its name (``"gru"``), with its record in ``CELLS`` (``spec``). Only
    ``register`` makes one; ``Cell(name)`` is the registered cell of that name (ValueError for any other)."""

    GRU: ClassVar["Cell"]
    RNN: ClassVar["Cell"]
    LSTM: ClassVar["Cell"]

    def __new__(cls, value: object) -> "Cell":
        found = _BY_NAME.get(value) if isinstance(value, str) else None
        if found is None:
            raise ValueError(f"{value!r} is not a valid Cell")
        return found

    def __reduce__(self) -> tuple:
        return Cell, (self.value,)

    def __repr__(self) -> str:
        return f"<Cell.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"Cell.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    @property
    def value(self) -> str:
        """Its name, as files and reports write it: 'gru'."""
        return str.__str__(self)

    @property
    def name(self) -> str:
        return self.value.upper()

    @property
    def spec(self) -> "CellSpec":
        return spec_of(self)

    @property
    def gates(self) -> int:
        """Gate blocks per direction (G): W is [G*H, I]."""
        return len(self.spec.gates)

    @property
    def gate_names(self) -> tuple[str, ...]:
        return self.spec.gates

    @property
    def activation_count(self) -> int:
        """Activations per direction: GRU (f, g), RNN (f), LSTM (f, g, h)."""
        return len(self.spec.default_activations)

    @property
    def default_activations(self) -> tuple[str, ...]:
        return self.spec.default_activations

    @property
    def states(self) -> tuple[str, ...]:
        return self.spec.states

    @property
    def onnx_op(self) -> str:
        """The ONNX operator computing it ('GRU'); UnknownCellError for a cell ONNX has none for."""
        if self.spec.onnx_op is None:
            raise UnknownCellError(f"cell {self!r} has no ONNX operator")
        return self.spec.onnx_op

    @property
    def op_name(self) -> str:
        """The upper-case name formats print ('GRU', 'RNN', 'LSTM'; the ONNX operator where there is one)."""
        return self.spec.op_name


# A step: a function, or "module:function" imported on first use (converters.cell_steps.Step; the executor's
# step builder, converters.executor)
StepRef = Callable[..., Any] | str


class CellSpec(NamedTuple):
    """Everything that distinguishes one cell from another, and how it is computed (see the module docstring). (A
    ``NamedTuple``, as the capability records: built at start-up, it costs a fraction of a dataclass's generated
    methods; this module has no ``from __future__ import annotations``, which would make each field's annotation a
    string compiled at class creation.)"""

    name: str  # its name in files and reports ('gru')
    op_name: str  # the upper-case name formats print ('GRU')
    gates: tuple[str, ...]  # gate blocks in canonical (ONNX) order
    gate_meanings: tuple[str, ...]  # what each gate is, for reports and docs
    default_activations: tuple[str, ...]  # one per activation slot, ONNX defaults
    states: tuple[str, ...] = ("h",)  # recurrent state tensors (initial_<s> in, Y_<s> out)
    reset_placement: bool = False  # has GRU's linear_before_reset choice
    peepholes: tuple[str, ...] = ()  # gates with a peephole weight on the cell state (LSTM: i, o, f)
    input_forget: bool = False  # can couple the input and forget gates
    zero_clip: bool = False  # clip = 0 is a valid clip (clamps every pre-activation to 0)
    onnx_op: str | None = None  # the ONNX operator computing it (None: ONNX holds it as elementary operators only)
    graph_step: StepRef | None = None  # one step as elementary ops (None: no writer decomposes it)
    executor_step: StepRef | None = None  # the NumPy executor's step builder (None: the executor refuses it)


def resolved(step: StepRef) -> Callable[..., Any]:
    """A record's step as a function (one named ``"module:function"`` imported now)."""
    if callable(step):
        return step
    module, _, name = step.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return found


CELLS: dict[Cell, CellSpec] = {}
_BY_NAME: dict[str, Cell] = {}


def register(spec: CellSpec) -> Cell:
    """Add the cell ``spec`` describes to the table (ValueError for a name already there); its ``Cell``."""
    if spec.name in _BY_NAME:
        raise ValueError(f"cell {spec.name!r} is registered already")
    cell = str.__new__(Cell, spec.name)
    _BY_NAME[spec.name] = cell
    CELLS[cell] = spec
    return cell


def unregister(cell: Cell) -> None:
    """Remove ``cell`` from the table (a test's cell, at its end)."""
    del CELLS[cell], _BY_NAME[cell.value]


_STEPS = "gatepack.converters.cell_steps"
_EXECUTOR = "gatepack.converters.executor"
Cell.GRU = register(
    CellSpec(
        "gru",
        "GRU",
        gates=("z", "r", "h"),
        gate_meanings=("update", "reset", "hidden candidate"),
        default_activations=("Sigmoid", "Tanh"),
        reset_placement=True,
        onnx_op="GRU",
        graph_step=f"{_STEPS}:gru_step",
        executor_step=f"{_EXECUTOR}:gru_step",
    )
)
Cell.RNN = register(
    CellSpec(
        "rnn",
        "RNN",
        gates=("i",),
        gate_meanings=("input",),
        default_activations=("Tanh",),
        zero_clip=True,
        onnx_op="RNN",
        graph_step=f"{_STEPS}:rnn_step",
        executor_step=f"{_EXECUTOR}:rnn_step",
    )
)
Cell.LSTM = register(
    CellSpec(
        "lstm",
        "LSTM",
        gates=("i", "o", "f", "c"),
        gate_meanings=("input", "output", "forget", "cell candidate"),
        default_activations=("Sigmoid", "Tanh", "Tanh"),
        states=("h", "c"),
        peepholes=("i", "o", "f"),
        input_forget=True,
        onnx_op="LSTM",
        graph_step=f"{_STEPS}:lstm_step",
        executor_step=f"{_EXECUTOR}:lstm_step",
    )
)


class UnknownCellError(ValueError):
    """A cell without a record in ``CELLS``."""


def spec_of(cell: Cell) -> CellSpec:
    """The record of ``cell``; raises for anything that has none (never falls through to another cell)."""
    try:
        return CELLS[cell]
    except (KeyError, TypeError):
        raise UnknownCellError(f"cell {cell!r} has no row in the cell table") from None


def cell_of_op(op_type: str) -> Cell | None:
    """The cell an ONNX operator type computes ('GRU' -> Cell.GRU), None for any other operator."""
    return next((cell for cell, spec in CELLS.items() if spec.onnx_op is not None and spec.onnx_op == op_type), None)

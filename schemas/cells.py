"""Recurrent cells as data: one row per cell, read by the canonical spec, the executor, verification,
inspection and every format module (docs/design.md, "Cells as data").

A cell is described by what differs between cells, never by code paths that test the cell's name:

* ``gates``: the gate blocks of W, R, Wb and Rb in the canonical (ONNX) order, H rows each;
* ``activations``: the activation slots per direction and their ONNX defaults;
* ``states``: the recurrent state tensors carried from step to step (``h``; LSTM adds ``c``), each
  with an optional initial-state input and a final-state output (``initial_h`` / ``Y_h``);
* flags for what only some cells have: the reset placement (GRU's ``linear_before_reset``),
  peepholes and input/forget coupling (LSTM), and whether clip 0 is meaningful.

Adding a cell means adding an enum member and its row here; ``spec_of`` raises for a member
without one, so no code can silently treat an unknown cell as another.

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

from __future__ import annotations

import enum
from dataclasses import dataclass


class Cell(str, enum.Enum):
    """The recurrent cells gatepack knows; each has a row in ``CELLS``."""

    GRU = "gru"
    RNN = "rnn"
    LSTM = "lstm"

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
    def op_name(self) -> str:
        """The ONNX operator (and the upper-case name formats print): 'GRU', 'RNN', 'LSTM'."""
        return self.spec.onnx_op


@dataclass(frozen=True)
class CellSpec:
    """Everything that distinguishes one cell from another (see the module docstring)."""

    onnx_op: str  # the ONNX operator type
    gates: tuple[str, ...]  # gate blocks in canonical (ONNX) order
    gate_meanings: tuple[str, ...]  # what each gate is, for reports and docs
    default_activations: tuple[str, ...]  # one per activation slot, ONNX defaults
    states: tuple[str, ...] = ("h",)  # recurrent state tensors (initial_<s> in, Y_<s> out)
    reset_placement: bool = False  # has GRU's linear_before_reset choice
    peepholes: tuple[str, ...] = ()  # gates with a peephole weight on the cell state (LSTM: i, o, f)
    input_forget: bool = False  # can couple the input and forget gates
    zero_clip: bool = False  # clip = 0 is a valid clip (clamps every pre-activation to 0)


CELLS: dict[Cell, CellSpec] = {
    Cell.GRU: CellSpec(
        onnx_op="GRU",
        gates=("z", "r", "h"),
        gate_meanings=("update", "reset", "hidden candidate"),
        default_activations=("Sigmoid", "Tanh"),
        reset_placement=True,
    ),
    Cell.RNN: CellSpec(
        onnx_op="RNN",
        gates=("i",),
        gate_meanings=("input",),
        default_activations=("Tanh",),
        zero_clip=True,
    ),
    Cell.LSTM: CellSpec(
        onnx_op="LSTM",
        gates=("i", "o", "f", "c"),
        gate_meanings=("input", "output", "forget", "cell candidate"),
        default_activations=("Sigmoid", "Tanh", "Tanh"),
        states=("h", "c"),
        peepholes=("i", "o", "f"),
        input_forget=True,
    ),
}


class UnknownCellError(ValueError):
    """A cell without a row in ``CELLS``."""


def spec_of(cell: Cell) -> CellSpec:
    """The row of ``cell``; raises for anything that has none (never falls through to another cell)."""
    try:
        return CELLS[cell]
    except (KeyError, TypeError):
        raise UnknownCellError(f"cell {cell!r} has no row in the cell table") from None


def cell_of_op(op_type: str) -> Cell | None:
    """The cell an ONNX operator type computes ('GRU' -> Cell.GRU), None for any other operator."""
    return next((cell for cell, spec in CELLS.items() if spec.onnx_op == op_type), None)

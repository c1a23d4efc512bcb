"""What each written format's recurrent ops take, as data (docs/design.md, "Capabilities as data").

One ``Capabilities`` record per written format, in the format's registration record
(``converters/formats/NAME/registration.py``, ``FormatInfo.capabilities``; ONNX written for onnxruntime's DirectML
provider is a variant of ONNX's, ``FormatInfo.variants``): per cell the format's own op (``Op``) — its
name, gate order, the activations it computes exactly per slot, clip, sequence lengths, peepholes,
input/forget coupling, how it stores the biases, whether it needs an initial state, the layouts it
takes, how each source dtype is carried — and what happens to a feature the op lacks: the format's
elementary form computes it (``elementary``), or the feature is refused (``elementary`` None).

This module holds the vocabulary and everything derived from the records, so no fact is restated: ``lacks``
(what an op cannot express in a layer, by feature: the formats' ``native_blockers``), ``alternative`` (the
formats that express a feature a format refuses), ``folds_bias`` (whether a summed bias loses the
split), and the table the README and ``gatepack formats`` print (``table``).
``converters.feature_findings`` turns a record and a layer into the findings every format words the
same way.

Kept free of numpy and the formats' frameworks: the registration records and the CLI's ``formats`` command read it.
"""

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from gatepack.converters.findings import Status
from gatepack.schemas.cells import Cell

if TYPE_CHECKING:
    from gatepack.schemas.layer import RecurrentLayer


class Bias(str, enum.Enum):
    """How an op stores ONNX's two biases (Wb, Rb: [G*H] each per direction)."""

    SPLIT = "[Wb, Rb] as ONNX"
    SUMMED = "Wb + Rb"  # exact, but the split reads back as [Wb + Rb, 0] unless Rb is zero (folded)
    SUMMED_KEEP_RBH = "[Wbz+Rbz, Wbr+Rbr, Wbh, Rbh]"  # GRU with linear_before_reset: Rb_h apart, the rest summed
    BY_ROLE = "bias = Rb, input bias = Wb"  # Apple's reset_after: each bias its own tensor


class Clip(str, enum.Enum):
    EXACT = "as ONNX"
    NOT_ZERO = "as ONNX, but clip 0 reads as no clip"
    ABSENT = "none"
    CELL_STATE = "bounds the cell state, not the gates' inputs"


class Lengths(str, enum.Enum):
    EXACT = "as ONNX"
    STATIC_SHAPES = "honoured with static shapes only"
    ABSENT = "none"


SIGMOID_TANH_RELU = frozenset({"Sigmoid", "Tanh", "Relu"})
# ONNX's recurrent activations (schemas.activations.KINDS, named here without importing numpy)
ONNX_ACTIVATIONS = SIGMOID_TANH_RELU | {
    "Affine",
    "LeakyRelu",
    "ThresholdedRelu",
    "ScaledTanh",
    "HardSigmoid",
    "Elu",
    "Softsign",
    "Softplus",
}
ONNX_PEEPHOLES = ("i", "o", "f")


NOTHING: Mapping = MappingProxyType({})  # an empty table (the records' default)


class Carried(NamedTuple):
    """How a format carries a value it has no choice about (a source dtype): status and wording."""

    status: Status
    detail: str
    alternative: str | None = None
    warning: str | None = None


class Doubt(NamedTuple):
    """A known doubt about a runtime's op (an ``Op.warnings`` entry): ``auto`` writes the format's elementary form
    instead wherever the doubt concerns the layer, ``--strategy native`` keeps the op and the report warns of it.
    ``beyond_batch_one``: it concerns batches past the first only (a layer whose batch is fixed at 1 is clear)."""

    text: str
    beyond_batch_one: bool = False


class Op(NamedTuple):
    """A format's own recurrent op for one cell, and what it takes of an ONNX layer. (The records' classes are
    ``NamedTuple``s, and this module has no ``from __future__ import annotations``: the registration records build
    them at CLI start-up, where a frozen dataclass's generated methods, or each string annotation compiled into a
    ForwardRef, cost several times as much.)"""

    name: str
    # its gate blocks in its order, each named by the canonical gate it holds (schemas.cells' letters): the one
    # statement of the format's gate order, every permutation of its weights derived from it (``reorder_gates``)
    gates: tuple[str, ...]
    described: str = ""  # more about it, for the cell finding
    activations: tuple[frozenset[str], ...] | None = None  # per slot, the ONNX activations it computes exactly
    one_activation_list: bool = False  # both directions take the same activations
    clip: Clip = Clip.EXACT
    sequence_lens: Lengths = Lengths.EXACT
    peepholes: tuple[str, ...] | None = ONNX_PEEPHOLES  # LSTM: its peephole order (None: no peepholes)
    input_forget: bool = True  # LSTM: input/forget coupling
    bias: Bias = Bias.SPLIT
    bias_reset_after: Bias = Bias.SPLIT  # GRU with linear_before_reset = 1
    reset_after: str | None = None  # the field that says linear_before_reset = 1, as the op spells it
    reset_after_since: str | None = None  # the first target version whose op takes linear_before_reset = 1
    versions: tuple[str, ...] = ()  # the format's target versions, oldest first (reset_after_since is one)
    initial_state_required: bool = False
    one_op_per_direction: bool = False  # a bidirectional layer is two ops, stacked
    reverse_in_processing_order: bool = False  # a reverse op's output runs from the last step
    layouts: tuple[int, ...] = (0,)  # the interface layouts its tensors have as they are
    layout_note: str = ""
    tensors: str | None = None  # its weight tensors (None: the ONNX node's own W and R)
    bias_tensor: str = "B"
    input_bias_tensor: str = ""  # Bias.BY_ROLE: the tensor that holds Wb
    state_tensors: tuple[str, ...] = ()  # its initial-state tensors, per state (h, c)
    dtypes: Mapping[str, Carried] = NOTHING  # per source dtype
    notes: Mapping[str, str] = NOTHING  # per feature: why it lacks it, beyond the fact
    warnings: Mapping[str, Doubt] = NOTHING  # a runtime doubt, per cell, feature or activation
    remarks: Mapping[str, str] = NOTHING  # per feature: how the op is told it, worth saying
    missing: bool = False  # a stand-in: the format has no op for the cell (``Capabilities.op``)
    # the op's own letter for a canonical gate where it differs (MIL's o is the candidate h)
    spelled: Mapping[str, str] = NOTHING
    separate_gates: bool = False  # one tensor per gate (LiteRT): its gate order permutes no weight's rows

    def permutes_gates(self, cell: Cell) -> bool:
        return not self.separate_gates and self.gates != cell.gate_names

    def permutation(self, cell: Cell) -> str:
        """``z,r,h -> r,o,z``: ONNX's gate order and this op's, in its own letters."""
        return f"{','.join(cell.gate_names)} -> {','.join(self.spelled.get(g, g) for g in self.gates)}"


# The features whose status depends on whether the op takes them and on the form the layer is written in
VALUE_FEATURES = ("activations", "clip", "sequence_lens", "peepholes", "input_forget")


class Reported(NamedTuple):
    """The status a format's findings give a feature present in a layer, in each case where the op does not
    simply take it (the op takes it and is used: exact, or repacked where it permutes it)."""

    forced: Status = Status.UNSUPPORTED  # the op used (--strategy native) though it lacks the feature
    elementary: Status = Status.EXACT  # elementary ops compute it, though the op would take it
    replaced: Status = Status.DECOMPOSED  # elementary ops compute it in place of the op, which lacks it


class Capabilities(NamedTuple):
    """A written format's recurrent ops and what happens to what they lack. ``own_op(cell)`` is the format's own
    op for a cell, None for a cell it has none for (``per_cell``: every cell it does not name, one registered later
    included); its elementary form, if any, computes such a cell from the cell's graph step (``writes``)."""

    format: str
    own_op: Callable[[Cell], Op | None]
    elementary: str | None = None  # the form elementary ops take (None: what the op lacks is unsupported)
    elementary_weights: str | None = "W, R in ONNX gate order, unchanged"  # None: the ONNX node's own, no finding
    elementary_bias: str | None = "Wb and Rb kept apart as constants"
    elementary_per_direction: bool = False  # the elementary form is one loop per direction, stacked (repacked)
    elementary_zero_states: bool = False  # the elementary form reports zeros for an absent state
    reported: Mapping[str, Reported] = NOTHING  # per feature, where it differs from Reported()
    elementary_reverse: str | None = None  # how the elementary form runs a reverse direction, where worth saying
    container: str = "the model"  # where zeros for a state the op requires are built
    transposes: str = "Transposes inside the model"  # what makes a layout the op does not take
    dynamic_shapes: str = "dynamic dimensions stay dynamic"
    alternatives: Mapping[str, str] = NOTHING  # per refused feature, besides other formats
    since: Mapping[str, str] = NOTHING  # a feature that needs a target version: the version
    # how its elementary form carries each source dtype (for a cell it has no op for)
    dtypes: Mapping[str, Carried] = NOTHING

    def report(self, feature: str) -> Reported:
        return self.reported.get(feature, Reported())

    def op(self, cell: Cell) -> Op:
        """The format's own op for ``cell``, or where it has none a stand-in (``Op.missing``) that lacks the cell:
        the elementary form computes it, or the cell is refused."""
        found = self.own_op(cell)
        return Op(f"{cell.op_name} op", cell.gate_names, dtypes=self.dtypes, missing=True) if found is None else found

    @property
    def ops(self) -> dict[Cell, Op]:
        """The format's own ops, by cell (the cells it has none for left out)."""
        return {cell: op for cell in Cell if (op := self.own_op(cell)) is not None}

    def writes(self, cell: Cell) -> bool:
        """Whether the format writes ``cell``: with its own op, or with its elementary form from the cell's step."""
        return self.own_op(cell) is not None or (self.elementary is not None and cell.spec.graph_step is not None)


# ------------------------------------------------------------------------------------ shared by records

AS_STORED = {"float32": Carried(Status.EXACT, "float32"), "float16": Carried(Status.EXACT, "float16")}
# a format whose findings carry a decomposition in the cell finding alone: the feature stays exact in every form
EXACT_IN_EVERY_FORM = Reported(forced=Status.EXACT, elementary=Status.EXACT, replaced=Status.EXACT)


def frozen(mapping: dict) -> Mapping:
    """``mapping``, read-only (a record's tables)."""
    return MappingProxyType(mapping)


def per_cell(make: Callable[..., "Op | None"], *args: object, cells: tuple[str, ...]) -> Callable[[Cell], "Op | None"]:
    """A format's ``own_op``: ``make(cell, *args)`` for the cells named ``cells`` (the cells its ops exist for),
    None, "no op of mine", for any other cell, a cell registered after the record was made included."""
    return lambda cell: make(cell, *args) if cell.value in cells else None


BUILT_IN_OPS = ("gru", "rnn", "lstm")  # the cells a format's ops exist for, where it has the three ONNX has


def records() -> dict[str, Capabilities]:
    """Every written format's record, in the registry's order (each format's registration holds its own)."""
    import gatepack.converters.registry as registry

    return {name: info.capabilities for name, info in registry.FORMATS.items() if info.capabilities is not None}


def table_rows() -> list[tuple[str, Capabilities]]:
    """The rows of the capability table: each record, followed by its variants (``onnx --for directml``)."""
    import gatepack.converters.registry as registry

    rows: list[tuple[str, Capabilities]] = []
    for name, info in registry.FORMATS.items():
        if info.capabilities is not None:
            rows += [(name, info.capabilities), *((f"{name} {label}", caps) for label, caps in info.variants)]
    return rows


# --------------------------------------------------------------------------------------- derived facts


def folds_bias(layer: "RecurrentLayer", storage: Bias) -> bool:
    """Whether ``storage`` loses the Wb/Rb split of ``layer``: a sum whose Rb part is not zero (the gates
    OpenVINO sums, with linear_before_reset: z and r only)."""
    h = layer.hidden_size
    if storage is Bias.SUMMED:
        return any(p.Rb.any() for p in layer.directions)
    if storage is Bias.SUMMED_KEEP_RBH:
        return any(p.Rb[: 2 * h].any() for p in layer.directions)
    return False


def bias_storage(layer: "RecurrentLayer", op: Op) -> Bias:
    return op.bias_reset_after if layer.cell.spec.reset_placement and layer.linear_before_reset else op.bias


def lacks(layer: "RecurrentLayer", op: Op, target: str | None = None) -> dict[str, str]:
    """What ``op`` cannot express in ``layer`` (at ``target``, a version of the format), by feature, each with
    the reason; empty: it computes exactly what ONNX specifies. A stand-in (no op for the cell) lacks the cell."""
    if op.missing:
        return {"cell": f"there is no {layer.cell.op_name} op"}
    found = {}
    names = [tuple(a.name for a in p.activations) for p in layer.directions]
    if op.activations is not None and any(n not in slot for per in names for n, slot in zip(per, op.activations)):
        slots = list(dict.fromkeys(op.activations))
        allowed = ", then ".join(_names(slot) for slot in slots) + (" in each slot" if len(slots) == 1 else "")
        found["activations"] = f"activations {layer.activation_summary()}: the {op.name} computes only {allowed}"
    elif op.one_activation_list and len(set(names)) > 1:
        found["activations"] = f"per-direction activations: the {op.name} takes one activation list for both directions"
    if layer.clip is not None and (
        op.clip in (Clip.ABSENT, Clip.CELL_STATE) or (op.clip is Clip.NOT_ZERO and not layer.clip)
    ):
        found["clip"] = f"clip {layer.clip:g}: the {op.name} {_CLIP_LACKS[op.clip]}"
    if layer.has_peepholes and op.peepholes is None:
        found["peepholes"] = f"peepholes: the {op.name} has no peephole input"
    if layer.input_forget and not op.input_forget:
        found["input_forget"] = f"input_forget = 1: the {op.name} has no input/forget coupling"
    itf = layer.interface
    dynamic = not (isinstance(itf.seq_length, int) and isinstance(itf.batch_size, int))
    if itf.sequence_lens and (
        op.sequence_lens is Lengths.ABSENT or (op.sequence_lens is Lengths.STATIC_SHAPES and dynamic)
    ):
        found["sequence_lens"] = f"sequence_lens: the {op.name} {_LENGTHS_LACKS[op.sequence_lens]}"
    since = op.reset_after_since
    reset_after = layer.cell.spec.reset_placement and layer.linear_before_reset
    if reset_after and since and target is not None and op.versions.index(target) < op.versions.index(since):
        found["linear_before_reset"] = (
            f"linear_before_reset = 1 needs the {op.name}'s {op.reset_after} ({since}); the target is {target}"
        )
    return {feature: f"{why} ({op.notes[feature]})" if feature in op.notes else why for feature, why in found.items()}


def present(layer: "RecurrentLayer", feature: str) -> bool:
    """Whether ``layer`` has ``feature`` (one of ``VALUE_FEATURES``)."""
    return {
        "peepholes": layer.has_peepholes,
        "input_forget": bool(layer.input_forget),
        "activations": True,
        "clip": layer.clip is not None,
        "sequence_lens": bool(layer.interface.sequence_lens),
    }[feature]


def doubts(layer: "RecurrentLayer", op: Op) -> dict[str, str]:
    """The op's known doubts (``Op.warnings``) that concern ``layer``, by what they are about: its cell, reset_after
    (linear_before_reset = 1), a feature it has, an activation it uses; one about batches past the first only
    where its batch is not fixed at 1."""
    about = [layer.cell.value, *(f for f in VALUE_FEATURES if f != "activations" and present(layer, f))]
    if layer.cell.spec.reset_placement and layer.linear_before_reset:
        about.append("reset_after")
    about += dict.fromkeys(a.name for p in layer.directions for a in p.activations)
    one = layer.interface.batch_size == 1
    found = {key: op.warnings[key] for key in about if key in op.warnings}
    return {key: d.text for key, d in found.items() if not (d.beyond_batch_one and one)}


_CLIP_LACKS = {
    Clip.ABSENT: "has no clip",
    Clip.CELL_STATE: "bounds the cell state with it after each update (ONNX: the gates' inputs)",
    Clip.NOT_ZERO: "reads clip = 0 as no clip (ONNX: every pre-activation clamped to 0)",
}
_LENGTHS_LACKS = {
    Lengths.ABSENT: "has no sequence lengths",
    Lengths.STATIC_SHAPES: "honours them with static shapes only",
}


def expresses(caps: Capabilities, layer: "RecurrentLayer", feature: str) -> bool:
    """Whether a format writes ``feature`` of ``layer``: its op takes it, or its elementary form computes it."""
    return caps.elementary is not None or feature not in lacks(layer, caps.op(layer.cell))


def alternative(caps: Capabilities, layer: "RecurrentLayer", feature: str) -> str:
    """What to do about ``feature`` of ``layer`` when ``caps``' format refuses it: the formats that express it,
    and the record's own way round."""
    others = [name for name, other in records().items() if other is not caps and expresses(other, layer, feature)]
    listed = f"{', '.join(others[:-1])} or {others[-1]}" if len(others) > 1 else "".join(others)
    found = [f"convert to {listed}, which express {feature}"] if others else []
    return "; or ".join(found + [caps.alternatives[feature]] if feature in caps.alternatives else found)


# ---------------------------------------------------------------------------------------------- the table

TABLE_BEGIN = "<!-- capabilities table: generated from converters/capabilities.py, do not edit -->"
TABLE_END = "<!-- end of capabilities table -->"


def op_facts(op: Op, cell: Cell) -> dict[str, str]:
    """What ``op`` takes, feature by feature, as short text (the table's cells, ``gatepack formats``)."""
    slots = list(dict.fromkeys(op.activations or ()))
    lstm = cell is Cell.LSTM
    facts = {
        "activations": "any, with α/β"
        if op.activations is None
        else ", then ".join(_names(slot) for slot in slots)
        + (" in each slot" if len(slots) == 1 and cell.activation_count > 1 else "")
        + ("; one list for both directions" if op.one_activation_list else ""),
        "clip": op.clip.value,
        "sequence_lens": op.sequence_lens.value,
        "peepholes": ("yes" if op.peepholes else "none") if lstm else "",
        "input_forget": ("yes" if op.input_forget else "none") if lstm else "",
        "bias": op.bias.value
        + (f"; lbr=1: {op.bias_reset_after.value}" if cell is Cell.GRU and op.bias_reset_after != op.bias else ""),
        "linear_before_reset": (f"from {op.reset_after_since}" if op.reset_after_since else "yes")
        if cell.spec.reset_placement
        else "",
        "float64": op.dtypes["float64"].status.value if "float64" in op.dtypes else "",
        "known doubts": ", ".join(_doubt_names(op, cell)),
    }
    return facts


def _doubt_names(op: Op, cell: Cell) -> list[str]:
    """What the op's known doubts are about, for ``cell`` (a doubt about another cell's op left out)."""
    cells = {c.value for c in Cell}
    applies = [
        key
        for key in op.warnings
        if (key == cell.value or key not in cells) and (key != "reset_after" or cell.spec.reset_placement)
    ]
    return [f"{key} (batches past the first)" if op.warnings[key].beyond_batch_one else key for key in applies]


def _names(slot: frozenset[str]) -> str:
    missing = ONNX_ACTIVATIONS - slot
    return f"any but {', '.join(sorted(missing))}" if len(missing) < len(slot) else "/".join(sorted(slot))


def table() -> str:
    """The README's table of what each format's op takes, per cell, and what becomes of what it lacks."""
    columns = ["activations", "clip", "sequence_lens", "peepholes", "input_forget", "linear_before_reset", "bias"]
    head = ["target", "cell", "its op", *columns, "float64", "what the op lacks"]
    lines = [f"| {' | '.join(head)} |", f"|{'---|' * len(head)}"]
    for label, caps in table_rows():
        for cell, op in caps.ops.items():
            lacking = lacking_becomes(caps, cell)
            facts = op_facts(op, cell)
            row = [f"`{label}`", cell.value, op.name, *(facts[c] or "—" for c in columns), facts["float64"], lacking]
            lines.append(f"| {' | '.join(row)} |")
    return "\n".join(lines)


def lacking_becomes(caps: Capabilities, cell: Cell) -> str:
    """What becomes of a feature the format's op for ``cell`` lacks: "—" (it lacks none of the features an ONNX
    layer may have), decomposed or unsupported."""
    return "—" if not _lacks_any(caps.ops[cell], cell) else "decomposed" if caps.elementary else "unsupported"


def _lacks_any(op: Op, cell: Cell) -> bool:
    lstm = cell is Cell.LSTM
    return (
        op.activations is not None
        or op.clip is not Clip.EXACT
        or op.sequence_lens is not Lengths.EXACT
        or (lstm and (op.peepholes is None or not op.input_forget))
    )


def with_table(readme: str) -> str:
    """``readme`` with the text between ``TABLE_BEGIN`` and ``TABLE_END`` replaced by ``table()``."""
    before, rest = readme.split(TABLE_BEGIN, 1)
    _, after = rest.split(TABLE_END, 1)
    return f"{before}{TABLE_BEGIN}\n{table()}\n{TABLE_END}{after}"


if __name__ == "__main__":  # python -m gatepack.converters.capabilities README.md: regenerate the table in place
    import sys
    from pathlib import Path

    target = Path(sys.argv[1])
    target.write_text(with_table(target.read_text()))

"""OpenVINO IR: GRU/RNN/LSTM layers written ONNX-faithfully, read back from any IR, run on OpenVINO CPU.

OpenVINO's ``GRUSequence-5`` / ``RNNSequence-5`` / ``LSTMSequence-5`` differ from ONNX in
everything but the equations::

    X [N,S,I], initial_hidden_state [N,D,H] (LSTM: and initial_cell_state), sequence_lengths [N]
    (every input required)
    W [D,G*H,I], R [D,G*H,H]   GRU z, r, h and RNN as ONNX; LSTM gates f, i, c, o (ONNX: i, o, f, c)
    B  GRU lbr=0: [D,3H] = Wb + Rb;  GRU lbr=1: [D,4H] = [Wbz+Rbz, Wbr+Rbr, Wbh, Rbh];
       RNN: [D,H] = Wb + Rb;  LSTM: [D,4H] = Wb + Rb (f, i, c, o)
    Y [N,D,S,H], Ho [N,D,H] (LSTM: and Co)
    LSTM: no peepholes, no input/forget coupling

Summing the biases is exact (they are added outside every product) but the split cannot be
recovered: a summed bias reads back as ``[Wb + Rb, 0]`` (``folded``).

Strategies (docs/conventions.md §3 and §8 say where OpenVINO's CPU plugin is exact):

* ``native``: the sequence op, with the transposes, the folded bias, zero initial states and full
  sequence lengths inside the model. Exact only for GRU activations (Sigmoid, Tanh), RNN activations
  Sigmoid/Tanh/Relu, LSTM activations Sigmoid/Tanh/Relu in each slot, the same activations in both
  directions, no LSTM peepholes or input_forget, and ``sequence_lens`` only with static shapes (with a
  dynamic X the CPU plugin ignores them). Other activations fail to compile, and alpha/beta are
  ignored. Its clip is ONNX's (every pre-activation).
* ``decomposed``: the cell from elementary ops inside a ``TensorIterator`` per direction, with one
  MatMul for every step's input projection outside it; each step is the cell's step of
  ``converters.cell_steps`` (its equations there), built through ``_OpenVinoOps`` (clip with Clamp).
  Sequence lengths are masks: past its length a sequence keeps its states and outputs zeros; the
  reverse direction runs over ``ReverseSequence(X, lens)`` (so it starts at len-1) and its outputs
  are reversed back; the final states are 0 for ``len = 0`` (onnxruntime's behaviour).
* ``auto``: native where it is exact, else decomposed, with the reason as a finding.

gatepack's IR carries its layers' description in ``rt_info`` (``gatepack/layers``), so it reads
back whole; any other IR's GRUSequence/RNNSequence/LSTMSequence nodes are read from the graph, and
its Loops/TensorIterators that step a GRU, RNN or LSTM are lifted (``openvino_lifting``).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gatepack.converters.cell_steps import step_of
from gatepack.converters.description import (
    build_layer,
    constant_from_layout,
    describe,
    parse,
)
from gatepack.converters.errors import GatepackError, InputError, NoRecurrentLayerError, RuntimeFailure, UsageError
from gatepack.converters.fileio import atomic_files, contained_file, parse_json, read_bytes
from gatepack.converters.findings import Finding, Status, fp16_source
from gatepack.converters.formats.openvino_lifting import LOOP_OPS, STATE_INPUTS, LoopHandle, lift_loops, run_lifted
from gatepack.converters.formats.openvino_shapes import (
    evaluate_for_two_shapes,
    from_shapes_only,
    zeros_whatever_the_shape,
)
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import FormatImplementation
from gatepack.converters.strategy import cell_finding, choose
from gatepack.schemas.activations import Activation, canonical_name
from gatepack.schemas.cells import CELLS
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    PERM_SWAP_01,
    ROLE_LABELS,
    Cell,
    Direction,
    DirectionParams,
    Interface,
    Provenance,
    RecurrentLayer,
    SpecError,
    dim_text,
    reorder_gates,
    stack_directions,
    state_roles,
)

FORMAT = "openvino"
RT_INFO_PATH = ["gatepack", "layers"]
RT_INFO_OTHER_OPS = ["gatepack", "other_ops"]  # whole-model IR: the ONNX operators besides the recurrent ones
_NATIVE_ACTIVATIONS: dict[Cell, set[tuple[str, ...]]] = {
    Cell.GRU: {("Sigmoid", "Tanh")},
    Cell.RNN: {("Sigmoid",), ("Tanh",), ("Relu",)},
    Cell.LSTM: set(itertools.product(("Sigmoid", "Tanh", "Relu"), repeat=3)),  # any of the three, per slot
}
_OPS = {"GRUSequence": Cell.GRU, "RNNSequence": Cell.RNN, "LSTMSequence": Cell.LSTM}
# The sequence ops' gate order (ONNX's for GRU and RNN; LSTMSequence-5 has f, i, c, o) ...
OV_GATES = {Cell.GRU: ("z", "r", "h"), Cell.RNN: ("i",), Cell.LSTM: ("f", "i", "c", "o")}
# ... and their inputs: X, an initial state per state, sequence_lengths, W, R, B.


def sequence_inputs(cell: Cell) -> dict[str, int]:
    """Input index of each of a sequence op's inputs: x, initial_h (initial_c), sequence_lens, W, R, B."""
    states = [f"initial_{s}" for s in cell.states]
    return {role: k for k, role in enumerate(["x", *states, "sequence_lens", "W", "R", "B"])}


FP16_SOURCE = fp16_source("weights", "the IR stores its weights as fp16 (compressed when it was saved)")


def _ov():
    from gatepack.converters.runtimes import openvino

    return openvino()


# ---------------------------------------------------------------------------------------- strategy


def native_blockers(layer: RecurrentLayer) -> list[str]:
    """Why OpenVINO's own sequence op would not compute what ONNX specifies (empty: it would)."""
    reasons = []
    names = [tuple(a.name for a in p.activations) for p in layer.directions]
    if any(n not in _NATIVE_ACTIVATIONS[layer.cell] for n in names):
        allowed = (
            "Sigmoid, Tanh or Relu in each of its three slots"
            if layer.cell is Cell.LSTM
            else " or ".join(", ".join(n) for n in sorted(_NATIVE_ACTIVATIONS[layer.cell]))
        )
        reasons.append(
            f"activations {layer.activation_summary()}: the CPU plugin runs {layer.cell.op_name}Sequence "
            f"natively only with {allowed} (others fail to compile, and alpha/beta are ignored)"
        )
    elif len(set(names)) > 1:
        reasons.append("per-direction activations: the sequence op takes one activation list for both directions")
    if layer.clip == 0:
        reasons.append("clip 0 (every pre-activation clamped to 0): the sequence op reads clip = 0 as no clip")
    if layer.has_peepholes:
        reasons.append("peepholes: LSTMSequence-5 has no peephole input")
    if layer.input_forget:
        reasons.append("input_forget: LSTMSequence-5 has no input/forget coupling")
    itf = layer.interface
    if itf.sequence_lens and not (isinstance(itf.seq_length, int) and isinstance(itf.batch_size, int)):
        reasons.append("sequence_lens with a dynamic-shape X: the CPU plugin then ignores sequence_lengths")
    return reasons


def choose_strategy(layer: RecurrentLayer, strategy: str) -> tuple[str, list[str]]:
    blockers = native_blockers(layer)
    return choose(strategy, blockers), blockers


# ----------------------------------------------------------------------------------------- writing


def write(model: Model, path: str | Path, *, strategy: str = "auto", compress_to_fp16: bool = False) -> None:
    """Write ``model``'s layers as one IR (``path`` = NAME.xml, with NAME.bin beside it), atomically."""
    ov, _ = _ov()
    path = Path(path)
    if path.suffix.lower() != ".xml":
        raise UsageError(f"{path}: an OpenVINO IR path ends in .xml")
    ov_model = build_whole(model, strategy=strategy) if is_whole_model(model) else build(model, strategy=strategy)
    with atomic_files(path, (".bin",)) as tmp:
        ov.save_model(ov_model, str(tmp), compress_to_fp16=compress_to_fp16)


def compute_dtype(layer: RecurrentLayer) -> str:
    """What the CPU plugin computes the layer in: float64 IRs run in float32."""
    return "float32" if layer.interface.dtype == "float64" else layer.interface.dtype


def is_whole_model(model: Model) -> bool:
    """An ONNX model with operators other than its recurrent nodes: written as one IR of everything
    (unless the user asked for the layers alone)."""
    return model.format == "onnx" and model.keeps_whole and model.path is not None


def whole_model_finding(model: Model) -> Finding | None:
    """The report's ``model`` finding when the whole ONNX model goes into the IR (None otherwise): from the same
    import by OpenVINO's ONNX frontend that ``convert`` runs, so the report never calls exact a model that the
    frontend refuses. A model the frontend refuses as it is but takes once folded for its input shapes
    (``onnx_folding``: the user's ``--input-shape``s, else the declared ones) is ``folded``."""
    if not is_whole_model(model):
        return None
    verdict = _frontend_verdict(model)
    if verdict.refusal is not None:
        return Finding(
            "model",
            Status.UNSUPPORTED,
            f"OpenVINO's ONNX frontend cannot convert the model's {model.other_ops_text()}: {verdict.refusal}",
            alternative=(
                f"pass --input-shape for {verdict.symbolic} to fold the model for those shapes, "
                if verdict.symbolic
                else ""
            )
            + "convert to onnx, which keeps the whole model, or pass --layers-only for the layers alone",
        )
    if verdict.folded_for is not None:
        return Finding(
            "model",
            Status.FOLDED,
            f"whole model in one artifact: OpenVINO's ONNX frontend refuses the model as it is ({verdict.as_is}); "
            f"folded first for the input shapes {verdict.folded_for} (constants and shape arithmetic computed, the "
            f"Ifs they decide replaced by their branch), it converts the model's {model.other_ops_text()}; gatepack "
            "translates every recurrent node",
            warning=f"the IR takes only the input shapes it was folded for ({verdict.fixed})"
            if verdict.fixed
            else None,
        )
    return Finding(
        "model",
        Status.EXACT,
        f"whole model in one artifact: OpenVINO's ONNX frontend converts the model's {model.other_ops_text()}; "
        "gatepack translates every recurrent node",
    )


@dataclass(frozen=True)
class _FrontendVerdict:
    """OpenVINO's ONNX frontend on a model: ``refusal`` why it cannot import it (None: it can); ``as_is`` why it
    refuses the model as it is and ``folded_for`` the input shapes it imports it folded for (None: as it is);
    ``fixed`` the inputs whose symbolic dimensions folding fixed; ``symbolic`` the inputs left with symbolic
    dimensions when even the folded model is refused."""

    refusal: str | None
    as_is: str | None = None
    folded_for: str | None = None
    fixed: str | None = None
    symbolic: str | None = None


_FRONTEND_VERDICTS: dict[tuple, _FrontendVerdict] = {}


def _frontend_verdict(model: Model) -> _FrontendVerdict:
    """The frontend's verdict on ``model``, asked once per unchanged file and input shapes."""
    assert model.path is not None  # (asked of a model read from a file)
    path = Path(model.path)
    stat = path.stat()
    shapes = model.meta.get("input_shapes") or {}
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, tuple(sorted((k, tuple(v)) for k, v in shapes.items())))
    if key not in _FRONTEND_VERDICTS:
        _FRONTEND_VERDICTS[key] = _ask_frontend(model)
    return _FRONTEND_VERDICTS[key]


class _FrontendRefusal(Exception):
    """OpenVINO's ONNX frontend failed on the model (not on gatepack's translation of a recurrent node)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _ask_frontend(model: Model) -> _FrontendVerdict:
    """Import ``model`` with OpenVINO's ONNX frontend; when it refuses, import it folded for its input shapes.
    A given shape the model cannot take raises UsageError."""
    ov, _ = _ov()
    as_is = _import_refusal(lambda: _read_onnx(ov.Core(), model))
    if as_is is None:
        return _FrontendVerdict(None)
    source = _proto_to_read(model, always=True)
    folded = _folded(model, source)
    if _import_refusal(lambda: _read_onnx(ov.Core(), model, folded)) is None:
        before, after = _input_dims(source), _input_dims(folded)
        fixed = "; ".join(f"{name} {dims}" for name, dims in after.items() if dims != before[name])
        return _FrontendVerdict(None, as_is, "; ".join(f"{n} {d}" for n, d in after.items()), fixed or None)
    symbolic = [name for name, dims in _input_dims(folded).items() if not all(isinstance(d, int) for d in dims)]
    return _FrontendVerdict(as_is, symbolic=", ".join(f"{n}=d1,d2,..." for n in symbolic) or None)


def _import_refusal(read) -> str | None:
    """Why ``read()`` (an import by OpenVINO's ONNX frontend) fails, on one line (None: it imports)."""
    try:
        read()
        return None
    except GatepackError as err:
        return err.one_line()
    except Exception as err:  # OpenVINO raises a bare RuntimeError with a multi-line message
        return _ov_message(err)


def build(model: Model, *, strategy: str = "auto"):
    """An ``openvino.Model`` holding every layer, with the source's interface (chained inputs apart)."""
    ov, ops = _ov()
    model = with_separate_inputs(model)
    params: dict[str, object] = {}
    results, described = [], []
    for layer in model.layers:
        chosen, _ = choose_strategy(layer, strategy)
        itf = layer.interface
        dtype = layer.dtype
        d, h, i = layer.num_directions, layer.hidden_size, layer.input_size
        s = itf.seq_length if isinstance(itf.seq_length, int) else -1
        n = itf.batch_size if isinstance(itf.batch_size, int) else -1

        def parameter(name: str, shape: list[int], element) -> object:
            if name not in params:
                node = ops.parameter(shape, element, name=name)
                node.output(0).get_tensor().set_names({name})
                params[name] = node
            return params[name]

        x = parameter(itf.x, [n, s, i] if itf.layout else [s, n, i], dtype)
        held = _held_constants(layer, itf.layout, x)
        lens = held.get("sequence_lens")
        if lens is None and itf.sequence_lens:
            lens = parameter(itf.sequence_lens, [n], np.int32)
        states = {
            role: held[role]
            if role in held
            else parameter(getattr(itf, role), [n, d, h] if itf.layout else [d, n, h], dtype)
            for role in ("initial_h", "initial_c")
            if getattr(itf, role)
        }
        emit = _emit_native if chosen == "native" else _emit_decomposed
        outputs = emit(ops, layer, x, lens, states)
        for name, out in zip((getattr(itf, role) for role in OUTPUT_ROLES), outputs):
            if name:
                out.get_tensor().set_names({name})
                results.append(ops.result(out, name=name))
        described.append({"name": layer.name, "strategy": chosen, **describe(layer)})
    ov_model = ov.Model(results, list(params.values()), "gatepack")
    ov_model.set_rt_info(json.dumps(described), RT_INFO_PATH)
    return ov_model


def build_whole(model: Model, *, strategy: str = "auto"):
    """The whole ONNX model as one ``openvino.Model``: OpenVINO's ONNX frontend converts every other
    operator, and a conversion extension hands each GRU/RNN/LSTM node to gatepack's own translation
    (``_import_whole``)."""
    try:
        return _import_whole(model, strategy)
    except _FrontendRefusal as refusal:
        raise RuntimeFailure(
            f"{model.path}: OpenVINO's ONNX frontend cannot convert the model's other operators: {refusal.reason}"
        ) from None


def _import_whole(model: Model, strategy: str):
    """``build_whole``'s import. The frontend gives the extension the node's inputs (X, and sequence_lens /
    initial_h, or a NullNode where absent) but not its name, so a node is matched to its layer by the tensor
    names of X and W. The node's own layout applies (batch-major Transposes around it stay ordinary ops).
    Raises gatepack's error from a translation, or ``_FrontendRefusal`` when the frontend fails."""
    ov, ops = _ov()
    from openvino.frontend.onnx import ConversionExtension

    candidates: dict[str, list[tuple[RecurrentLayer, Provenance]]] = {}
    for layer in model.layers:
        node = layer.provenance
        if node is None or not node.of("onnx"):
            raise UsageError(
                f"{model.path}: layer {layer.name!r}: a model with other operators keeps its own interface: "
                "--layout cannot change it"
            )
        candidates.setdefault(layer.cell.spec.onnx_op, []).append((layer, node))  # lifted layers too
    described: list[dict] = []
    names_to_restore: list[tuple[Any, str]] = []  # (OpenVINO sequence op, its layer's name)
    failures: list[Exception] = []

    def translator(op_type: str):
        def translate(ctx) -> list:
            try:
                layer, node = _matching_layer(ctx, candidates.get(op_type, []), op_type, model.path)
                chosen, outputs = _translate_node(ops, ctx, layer, node, strategy)
                if chosen == "native":
                    names_to_restore.append((_producing_sequence_op(outputs[0]), layer.name))
                if not any(e["name"] == layer.name for e in described):
                    described.append({"name": layer.name, "strategy": chosen, **describe(layer)})
                return list(outputs)
            except Exception as err:
                failures.append(err)
                raise

        return translate

    core = ov.Core()
    for op_type in (spec.onnx_op for spec in CELLS.values()):
        core.add_extension(ConversionExtension(op_type, translator(op_type)))
    folded = _folded(model, _proto_to_read(model, always=True)) if _frontend_verdict(model).folded_for else None
    try:
        ov_model = _read_onnx(core, model, folded)
    except Exception as err:
        if failures and isinstance(failures[0], GatepackError):
            raise failures[0] from None
        raise _FrontendRefusal(err.one_line() if isinstance(err, GatepackError) else _ov_message(err)) from None
    for sequence_op, name in names_to_restore:  # the frontend names ops after their ONNX outputs
        sequence_op.set_friendly_name(name)
    ov_model.set_rt_info(json.dumps(described), RT_INFO_PATH)
    ov_model.set_rt_info(json.dumps(model.meta["other_ops"]), RT_INFO_OTHER_OPS)
    return ov_model


def _matching_layer(ctx, candidates: list, op_type: str, path) -> tuple[RecurrentLayer, Provenance]:
    """The layer (and its ONNX node) the frontend is converting: the one candidate reading its X and W."""
    x_names, w_names = ctx.get_input(0).get_names(), ctx.get_input(1).get_names()
    found = [(lay, node) for lay, node in candidates if node.inputs[0] in x_names and node.inputs[1] in w_names]
    if len(found) != 1:
        raise InputError(
            f"{path}: cannot tell which {op_type} node OpenVINO's frontend is converting (X "
            f"{sorted(x_names)}, W {sorted(w_names)}; {len(found)} candidates)"
        )
    return found[0]


def _translate_node(ops, ctx, layer: RecurrentLayer, node: Provenance, strategy: str) -> tuple[str, tuple]:
    """The strategy chosen for ``layer`` and its outputs (Y, finals) from the frontend's inputs of its node."""
    # the ONNX node's optional inputs: sequence_lens (4), initial_h (5), initial_c (6)
    optional = {
        role: ctx.get_input(k) if ctx.get_input_size() > k else None for k, role in enumerate(INPUT_ROLES[1:], start=4)
    }
    given = {role: v for role, v in optional.items() if v is not None and v.get_node().get_type_name() != "NullNode"}
    held = _held_constants(layer, node.layout or 0, ctx.get_input(0))
    given.update((role, c.output(0)) for role, c in held.items())
    node_layer = replace(layer, interface=replace(layer.interface, layout=node.layout or 0))
    chosen, _ = choose_strategy(layer, strategy)
    emit = _emit_native if chosen == "native" else _emit_decomposed
    return chosen, emit(ops, node_layer, ctx.get_input(0), given.pop("sequence_lens", None), given)


def _producing_sequence_op(output):
    """The sequence op whose Y ``output`` is (through the layout ops ``_emit_native`` puts after it)."""
    node = output.get_node()
    while not node.get_type_name().endswith("Sequence"):
        node = node.input_value(0).get_node()
    return node


def _read_onnx(core, model: Model, proto=None):
    """OpenVINO's reading of the source ONNX model (of ``proto`` when given: the model folded); with lifted or
    dequantized layers, of the model where each is replaced in place by its GRU/RNN/LSTM node (so the conversion
    extension translates it)."""
    proto = proto if proto is not None else _proto_to_read(model)
    if proto is None:
        return core.read_model(str(model.path))
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory(prefix="gatepack-") as scratch:
        path = Path(scratch) / "in_place.onnx"
        onnx.save(proto, str(path))
        return core.read_model(str(path))


def _proto_to_read(model: Model, *, always: bool = False):
    """The ONNX model OpenVINO reads in place of the file (its external data embedded): the source with its
    lifted or dequantized layers replaced in place by their nodes; None when the file is read as it is (unless
    ``always``: then the source itself)."""
    from gatepack.converters.formats import onnx as onnx_format
    from gatepack.converters.formats.onnx_quantized import is_quantized_layer

    if onnx_format.lifted_layers(model) or any(map(is_quantized_layer, model.layers)):
        return onnx_format.in_place(model)
    if not always:
        return None
    assert model.path is not None  # (the file the model was read from)
    proto = onnx_format.load_proto(Path(model.path))
    onnx_format.embed_external_data(proto, Path(model.path).parent)
    return proto


def _folded(model: Model, proto):
    """``proto`` (the model OpenVINO reads) folded for the user's input shapes, else its declared ones."""
    from gatepack.converters.formats.onnx_folding import fold

    try:
        return fold(proto, model.meta.get("input_shapes"))
    except UsageError as err:
        raise UsageError(f"{model.path}: {err.message}", hint=err.hint) from None


def _input_dims(proto) -> dict[str, list]:
    """Each graph input's dims (a symbolic one by its name, '?' unnamed)."""
    initializers = {t.name for t in proto.graph.initializer}
    return {
        i.name: [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in i.type.tensor_type.shape.dim]
        for i in proto.graph.input
        if i.name not in initializers
    }


def _const(ops, array: np.ndarray, name: str):
    """A Constant sharing ``array``'s memory where OpenVINO allows it (writeable arrays: no copy;
    OpenVINO keeps the array alive), else a copy."""
    array = np.ascontiguousarray(array)
    node = ops.constant(array, name=name, shared_memory=bool(array.flags.writeable))
    node.set_friendly_name(name)
    return node


def _held_constants(layer: RecurrentLayer, layout: int, x) -> dict[str, Any]:  # role -> OpenVINO node
    """Per input the layer holds as a constant, its value in ``layout``: a Constant named ``LAYER/ROLE`` holding
    it in layout 0 (read back by that name; the IR asks nobody to feed it), a state of batch 1 broadcast to the
    batch of ``x`` (X in ``layout``), transposed for a batch-major layout."""
    _, ops = _ov()
    held = {}
    for role, value in layer.constants.items():
        node = _const(ops, value, f"{layer.name}/{role}")
        if role != "sequence_lens" and value.shape[1] == 1 and layer.interface.batch_size != 1:
            batch = ops.gather(ops.shape_of(x, output_type="i64"), [0 if layout else 1], 0)
            sizes = [np.array([value.shape[0]], np.int64), batch, np.array([value.shape[2]], np.int64)]
            node = ops.broadcast(node, ops.concat(sizes, 0))
        held[role] = ops.transpose(node, [1, 0, 2]) if layout == 1 and role != "sequence_lens" else node
    return held


def _shape_dims(ops, x_seq_major):
    """(S, N) as 1-element i64 tensors from X [S,N,I]."""
    shape = ops.shape_of(x_seq_major, output_type="i64")
    return ops.gather(shape, [0], 0), ops.gather(shape, [1], 0)


def folded_bias(layer: RecurrentLayer) -> np.ndarray:
    """OpenVINO's B: [D,G*H] = Wb + Rb (LSTM: gates f, i, c, o), or [D,4H] with Rb_h apart for GRU
    linear_before_reset."""
    h = layer.hidden_size
    rows = []
    for p in layer.directions:
        if layer.cell is Cell.GRU and layer.linear_before_reset:
            rows.append(np.concatenate([p.Wb[: 2 * h] + p.Rb[: 2 * h], p.Wb[2 * h :], p.Rb[2 * h :]]))
        else:
            rows.append(_ov_gates(layer.cell, p.Wb + p.Rb))
    return np.stack(rows)


def _ov_gates(cell: Cell, array: np.ndarray) -> np.ndarray:
    """Gate blocks (rows, or a bias's entries) from ONNX's order to the sequence op's."""
    return reorder_gates(array, cell.gate_names, OV_GATES[cell])


def _emit_native(ops, layer: RecurrentLayer, x, lens, states: dict) -> tuple:
    """The layer as OpenVINO's sequence op, from X (the layer's layout), ``lens`` and the given initial
    ``states`` (role -> value); returns Y and each final state in the layer's layout."""
    itf = layer.interface
    d, h = layer.num_directions, layer.hidden_size
    x_bm = x if itf.layout else ops.transpose(x, [1, 0, 2])  # -> [N,S,I]
    shape = ops.shape_of(x_bm, output_type="i64")
    n_dim, s_dim = ops.gather(shape, [0], 0), ops.gather(shape, [1], 0)
    zeros = ops.broadcast(np.zeros((), layer.dtype), ops.concat([n_dim, np.array([d, h], np.int64)], 0))
    initial = [
        zeros if states.get(role) is None else (states[role] if itf.layout else ops.transpose(states[role], [1, 0, 2]))
        for role, _ in state_roles(layer.cell)
    ]  # each [N,D,H]
    seq = ops.convert(lens, "i64") if lens is not None else ops.broadcast(ops.squeeze(s_dim, [0]), n_dim)
    w = _const(ops, stack_directions([_ov_gates(layer.cell, p.W) for p in layer.directions]), f"{layer.name}/W")
    r = _const(ops, stack_directions([_ov_gates(layer.cell, p.R) for p in layer.directions]), f"{layer.name}/R")
    b = _const(ops, folded_bias(layer), f"{layer.name}/B")
    acts = [a.name.lower() for a in layer.directions[0].activations]
    common = dict(
        hidden_size=h, direction=layer.direction.value, activations=acts, clip=layer.clip or 0.0, name=layer.name
    )
    if layer.cell is Cell.GRU:
        node = ops.gru_sequence(x_bm, *initial, seq, w, r, b, linear_before_reset=layer.linear_before_reset, **common)
    elif layer.cell is Cell.LSTM:
        node = ops.lstm_sequence(x_bm, *initial, seq, w, r, b, **common)
    else:
        node = ops.rnn_sequence(x_bm, *initial, seq, w, r, b, **common)
    node.set_friendly_name(layer.name)
    y = ops.transpose(node.output(0), [0, 2, 1, 3]) if itf.layout else _seq_major_y(ops, node.output(0), d)
    finals = [
        node.output(k) if itf.layout else ops.transpose(node.output(k), [1, 0, 2]).output(0)
        for k in range(1, 1 + len(initial))
    ]
    return (y.output(0), *finals)


def _seq_major_y(ops, y_native, num_directions: int):
    """Y [N,D,S,H] of a sequence op as ONNX's [S,D,N,H]: a Transpose (2,1,0,3), or for one direction
    Squeeze(1) -> Transpose (1,0,2) -> Unsqueeze(1).

    Why not one Transpose for one direction: OpenVINO's CPU plugin rewrites a one-direction sequence op between
    Transpose(X, (1,0,2)) and Transpose(Y, (2,1,0,3)) to read seq-major X, replacing that X Transpose by a
    Reshape for every reader; the Transposes of one X by two sequence ops are one node once OpenVINO merges
    equal ops, so the other op reads X reshaped, not transposed (docs/conventions.md, OpenVINO traps)."""
    if num_directions == 2:
        return ops.transpose(y_native, [2, 1, 0, 3])
    return ops.unsqueeze(ops.transpose(ops.squeeze(y_native, [1]), [1, 0, 2]), [1])


class _OpenVinoOps:
    """``cell_steps.StepOps`` over OpenVINO's opset for direction ``k`` of ``layer``: scalar constants in the
    input's element type; R kept in ONNX's orientation and multiplied by MatMul with transpose_b."""

    builder = "OpenVINO"

    def __init__(self, ops, layer: RecurrentLayer, params: DirectionParams, k: int) -> None:
        self.ops, self.hidden, self.gates = ops, layer.hidden_size, layer.gates
        self.r = _const(ops, params.R, f"{layer.name}/R{k}")  # [G*H, H]
        self.rb = _const(ops, params.Rb, f"{layer.name}/Rb{k}")
        self.p = None if params.P is None else _const(ops, params.P, f"{layer.name}/P{k}")  # [3H]: i, o, f

    def split(self, x, count: int) -> list:
        return list(self.ops.split(x, -1, count).outputs())

    def clip(self, x, bound: float):
        return self.ops.clamp(x, -bound, bound)

    def recurrent(self, x, first: int, stop: int):
        r, rb = self._gate_rows(self.r, first, stop), self._gate_rows(self.rb, first, stop)
        return self.ops.add(self.ops.matmul(x, r, False, True), rb)

    def _gate_rows(self, tensor, first: int, stop: int):
        """Gate blocks [first*H, stop*H) of R's rows or of a bias (all of them: ``tensor`` itself)."""
        if (first, stop) == (0, self.gates):
            return tensor
        h = self.hidden
        bounds = [np.array([v], np.int64) for v in (first * h, stop * h, 1, 0)]  # start, stop, step, axis
        return self.ops.slice(tensor, *bounds)

    def peepholes(self):
        return self.p

    def const(self, x, value: float):
        return np.array(value, x.get_element_type().to_dtype())

    def zero_like(self, x):
        return self.const(x, 0)

    def add(self, x, y):
        return self.ops.add(x, y)

    def sub(self, x, y):
        return self.ops.subtract(x, y)

    def mul(self, x, y):
        return self.ops.multiply(x, y)

    def div(self, x, y):
        return self.ops.divide(x, y)

    def minimum(self, x, y):
        return self.ops.minimum(x, y)

    def maximum(self, x, y):
        return self.ops.maximum(x, y)

    def select(self, cond, a, b):
        return self.ops.select(cond, a, b)

    def greater(self, x, y):
        return self.ops.greater(x, y)

    def greater_equal(self, x, y):
        return self.ops.greater_equal(x, y)

    def clip01(self, x):
        return self.ops.clamp(x, 0.0, 1.0)

    def exp(self, x):
        return self.ops.exp(x)

    def log(self, x):
        return self.ops.log(x)

    def abs(self, x):
        return self.ops.abs(x)

    def neg(self, x):
        return self.ops.negative(x)

    def sigmoid(self, x):
        return self.ops.sigmoid(x)

    def tanh(self, x):
        return self.ops.tanh(x)

    def relu(self, x):
        return self.ops.relu(x)


def _emit_decomposed(ops, layer: RecurrentLayer, x, lens, states: dict) -> tuple:
    """The layer from elementary ops (see the module docstring), from X (the layer's layout), ``lens``
    and the given initial ``states`` (role -> value); returns Y and each final state in that layout."""
    ov, _ = _ov()
    itf = layer.interface
    dt = layer.dtype
    h = layer.hidden_size
    x_sm = ops.transpose(x, [1, 0, 2]) if itf.layout else x  # -> [S,N,I]
    s_dim, n_dim = _shape_dims(ops, x_sm)
    seq = ops.convert(lens, "i64") if lens is not None else ops.broadcast(ops.squeeze(s_dim, [0]), n_dim)
    steps = ops.range(np.int64(0), ops.squeeze(s_dim, [0]), np.int64(1), "i64")
    valid = ops.less(ops.unsqueeze(steps, [1]), ops.unsqueeze(seq, [0]))  # [S,N]: step t is inside the sequence
    valid = ops.unsqueeze(valid, [2])  # [S,N,1]
    initial = {  # -> [D,N,H]
        role: ops.transpose(value, [1, 0, 2]) if itf.layout else value
        for role, value in states.items()
        if value is not None
    }
    zeros_state = ops.broadcast(np.zeros((), dt), ops.concat([n_dim, np.array([h], np.int64)], 0))
    empty = ops.unsqueeze(ops.equal(seq, np.int64(0)), [1])  # [N,1]
    roles = [role for role, _ in state_roles(layer.cell)]
    ys: list = []
    finals: dict[str, list] = {role: [] for role in roles}  # OpenVINO outputs
    for k, params in enumerate(layer.directions):
        reverse = layer.direction is Direction.REVERSE or k == 1
        x_d = ops.reverse_sequence(x_sm, seq, batch_axis=1, seq_axis=0) if reverse else x_sm
        w = _const(ops, params.W, f"{layer.name}/W{k}")
        wb = _const(ops, params.Wb, f"{layer.name}/Wb{k}")
        xw = ops.add(ops.matmul(x_d, w, False, True), wb)  # [S,N,G*H]: every step's input projection at once
        start = [
            ops.gather(initial[role], np.array(k, np.int64), 0) if role in initial else zeros_state for role in roles
        ]
        y_d, last = _time_loop(ov, ops, layer, params, k, xw, valid, start)
        if reverse:
            y_d = ops.reverse_sequence(y_d, seq, batch_axis=1, seq_axis=0)
        ys.append(ops.unsqueeze(y_d, [1]))
        for role, value in zip(roles, last):  # an empty sequence ends in zeros (onnxruntime)
            finals[role].append(ops.unsqueeze(ops.select(empty, np.zeros((), dt), value), [0]))
    y = ops.concat(ys, 1) if len(ys) > 1 else ys[0]  # [S,D,N,H]
    ends = [ops.concat(finals[role], 0) if len(finals[role]) > 1 else finals[role][0] for role in roles]  # [D,N,H]
    if itf.layout:
        y, ends = ops.transpose(y, [2, 0, 1, 3]), [ops.transpose(e, [1, 0, 2]) for e in ends]
    return (y.output(0), *(e.output(0) for e in ends))


def _time_loop(ov, ops, layer: RecurrentLayer, params: DirectionParams, k: int, xw, valid, start: list):
    """A TensorIterator over time for one direction, from the initial states ``start`` (the cell's
    states, each [N,H]): returns (Y [S,N,H], the last value of each state [N,H])."""
    dt = layer.dtype
    h = layer.hidden_size
    gh = layer.gates * h
    xw_t = ops.parameter([1, -1, gh], dt, name="xw_t")
    valid_t = ops.parameter([1, -1, 1], np.bool_, name="valid_t")
    state = [ops.parameter([-1, h], dt, name=name) for name in layer.cell.states]
    gx = ops.squeeze(xw_t, [0])
    ok = ops.squeeze(valid_t, [0])
    new = step_of(layer.cell, "OpenVINO")(_OpenVinoOps(ops, layer, params, k), layer, params, gx, state)
    kept = [ops.select(ok, n, s) for n, s in zip(new, state)]  # past its length a sequence keeps its state
    y_t = ops.unsqueeze(ops.select(ok, new[0], np.zeros((), dt)), [0])  # ... and outputs zeros
    body = ov.Model([*(ops.result(v) for v in kept), ops.result(y_t)], [xw_t, valid_t, *state], f"{layer.name}/step{k}")
    results = body.get_results()
    loop = ops.tensor_iterator()
    loop.set_body(body)
    loop.set_sliced_input(xw_t, xw.output(0), 0, 1, 1, -1, 0)
    loop.set_sliced_input(valid_t, valid.output(0), 0, 1, 1, -1, 0)
    for param, first, result in zip(state, start, results):
        loop.set_merged_input(param, first.output(0), result.output(0))
    y = loop.get_concatenated_slices(results[-1].output(0), 0, 1, 1, -1, 0)
    last = [loop.get_iter_value(result.output(0), -1) for result in results[: len(state)]]
    loop.set_friendly_name(f"{layer.name}/loop{k}")
    return y, last


# ----------------------------------------------------------------------------------------- reading


# f32: the CPU plugin defaults to bf16 where the CPU has it; LATENCY: gatepack runs single inferences (less to set up)
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def read_ir(path: Path):
    """The IR at ``path``. gatepack opens both files itself (regular files; the .bin beside the .xml,
    never through a link leading elsewhere) and hands OpenVINO their contents - the .bin memory-mapped
    copy-on-write - so OpenVINO opens no path, tries no other frontend and writes nothing."""
    ov, _ = _ov()
    path = Path(path)
    if path.suffix.lower() != ".xml" or not path.exists():
        raise InputError(f"{path}: no OpenVINO IR here (expected an existing NAME.xml with NAME.bin beside it)")
    xml = read_bytes(path)
    if b"<net" not in xml[:4096]:
        raise InputError(f"{path}: not an OpenVINO IR (no <net> element at its start)")
    bin_name = path.with_suffix(".bin").name
    if not os.path.lexists(path.with_suffix(".bin")):
        raise InputError(
            f"{path}: its weights file {bin_name} is missing", hint="an IR is the .xml and the .bin together"
        )
    weights_file = contained_file(path.parent, bin_name, f"{path}: weights file")
    size = weights_file.stat().st_size
    weights = np.memmap(weights_file, dtype=np.uint8, mode="c") if size else np.zeros(0, np.uint8)
    try:
        model = ov.Core().read_model(
            model=xml.decode("utf-8", "replace"), weights=ov.Tensor(weights, shared_memory=True)
        )
    except Exception as err:  # OpenVINO raises a bare RuntimeError with a multi-line message
        raise InputError(f"{path}: OpenVINO cannot read it ({_ov_message(err)})") from None
    model.gatepack_weights = weights  # the model's constants point into this map: it lives as long as the model
    model.gatepack_named = _name_nameless_outputs(model)
    return model


def _name_nameless_outputs(model) -> list[str]:
    """Give every output without a tensor name (``ov.convert_model`` of a PyTorch module leaves them
    nameless) a stable name from the node producing it, ``<node>:<port>``, in memory only. Returns
    one note per output named."""
    taken = {name for port in model.outputs for name in port.get_names()}
    notes = []
    for index, port in enumerate(model.outputs):
        if port.get_names():
            continue
        source = port.get_node().input_value(0)  # the Result's input: the producing node's port
        name = f"{source.get_node().get_friendly_name()}:{source.get_index()}"
        while name in taken:
            name += "_"
        taken.add(name)
        port.get_tensor().set_names({name})
        notes.append(f"output {index} of the IR has no tensor name; gatepack calls it {name!r}")
    return notes


def _ov_message(err: Exception) -> str:
    lines = [
        line.strip()
        for line in str(err).splitlines()
        if line.strip() and not line.strip().startswith(("Exception from", "Check "))
    ]
    return (" ".join(lines) or type(err).__name__)[:240]


def _constant(node, index: int, path: Path, layer: str, role: str) -> tuple[np.ndarray, bool]:
    """The constant feeding input ``index`` of ``node`` (through a decompression Convert): (value, fp16-compressed?)."""
    if index >= node.get_input_size():
        raise InputError(f"{path}: layer {layer!r}: the node has no input {index} ({role})")
    source = node.input_value(index).get_node()
    if source.get_type_name() == "Convert" and source.input_value(0).get_node().get_type_name() == "Constant":
        return _constant_data(
            source.input_value(0).get_node(), path, layer, role, source.get_output_element_type(0)
        ), True
    if source.get_type_name() != "Constant":
        raise InputError(
            f"{path}: layer {layer!r}: {role} comes from a {source.get_type_name()} node "
            f"({source.get_friendly_name()!r}), not a constant",
            hint="gatepack reads recurrent weights stored as constants",
        )
    return _constant_data(source, path, layer, role), False


def _constant_data(constant, path: Path, layer: str, role: str, widen_to=None) -> np.ndarray:
    """A Constant's values (a copy, widened to ``widen_to``'s type when given); InputError for an element
    type that holds no numbers (e.g. dynamic) or data the .bin does not hold."""
    try:
        data = np.array(constant.get_data())
        return data.astype(widen_to.to_dtype()) if widen_to is not None else data
    except Exception as err:  # OpenVINO's errors for undefined element types and short weights
        raise InputError(
            f"{path}: layer {layer!r}: {role} constant {constant.get_friendly_name()!r} of element type "
            f"{constant.get_element_type()} cannot be read ({_ov_message(err)})"
        ) from None


def read(path: str | Path, **_options) -> Model:
    """Read the recurrent layers of an IR: gatepack's (from its rt_info, checked against the graph)
    or any other producer's sequence nodes and the loops lifted into layers (``Model.skipped``: the
    loops that are no GRU/RNN/LSTM, and why)."""
    path = Path(path)
    ov_model = read_ir(path)
    ops_by_name = {op.get_friendly_name(): op for op in _all_ops(ov_model)}
    if ov_model.has_rt_info(RT_INFO_PATH):
        entries = parse_json(
            ov_model.get_rt_info(RT_INFO_PATH).astype(str), f"{path}: rt_info {'/'.join(RT_INFO_PATH)}"
        )
        if not isinstance(entries, list) or not entries:
            raise InputError(f"{path}: rt_info {'/'.join(RT_INFO_PATH)} is not a non-empty list of layer descriptions")
        layers, notes = [], {}
        for entry in entries:
            layer, found = _read_described(path, entry, ops_by_name)
            layers.append(layer)
            notes[layer.name] = found
        other = (
            parse_json(ov_model.get_rt_info(RT_INFO_OTHER_OPS).astype(str), f"{path}: rt_info")
            if ov_model.has_rt_info(RT_INFO_OTHER_OPS)
            else []
        )
        if not isinstance(other, list) or not all(isinstance(op, str) for op in other):
            raise InputError(f"{path}: rt_info {'/'.join(RT_INFO_OTHER_OPS)} {other!r} is not a list of operator types")
        if len({layer.name for layer in layers}) != len(layers):
            raise InputError(f"{path}: rt_info describes two layers with the same name")
        return Model(path, FORMAT, layers, notes, meta={"gatepack": True, "other_ops": other})
    layers, notes = [], {}
    for op in ov_model.get_ordered_ops():
        if op.get_type_name() in _OPS:
            layer, found = _read_sequence_op(path, op, ov_model)
            layers.append(layer)
            notes[layer.name] = found
    lifted, lifted_notes, refused = lift_loops(path, ov_model, _ov(), FP16_SOURCE)
    layers += lifted
    notes.update(lifted_notes)
    if not layers:
        loops = sorted({op.get_type_name() for op in ov_model.get_ordered_ops() if op.get_type_name() in LOOP_OPS})
        raise NoRecurrentLayerError(
            f"{path}: no GRUSequence, RNNSequence or LSTMSequence node"
            + (f", and its {'/'.join(loops)} is no GRU/RNN/LSTM: {refused[0][1]}" if refused else ""),
            hint=(
                "gatepack lifts a loop that steps one sequence through a GRU, RNN or LSTM cell"
                if refused
                else "OpenVINO's frontends may have unrolled the layer into elementary ops outside any loop"
            ),
        )
    kept = {*_OPS, "Parameter", "Result", "Constant", "Convert"}
    lifted_loops = {layer.name for layer in lifted}
    other = [
        op.get_type_name()
        for op in ov_model.get_ops()
        if op.get_type_name() not in kept and op.get_friendly_name() not in lifted_loops
    ]
    meta = {
        "other_ops": sorted(set(other)),
        "other_op_count": len(other),
        **({"notes": ov_model.gatepack_named} if ov_model.gatepack_named else {}),
    }
    return Model(path, FORMAT, layers, notes, refused, meta=meta)


def _all_ops(ov_model) -> list:
    """Every op of a model, including those inside TensorIterator/Loop bodies and If branches."""
    found = []
    for op in ov_model.get_ordered_ops():
        found.append(op)
        if op.get_type_name() in ("TensorIterator", "Loop"):
            found += _all_ops(op.get_function())
        elif op.get_type_name() == "If":
            found += _all_ops(op.get_then_body()) + _all_ops(op.get_else_body())
    return found


def _activations(names: list[str], alphas: list[float], betas: list[float], path: Path, layer: str) -> list[Activation]:
    from gatepack.schemas.activations import resolve_activations

    canonical = []
    for name in names:
        found = canonical_name(name)
        if found is None:
            raise InputError(f"{path}: layer {layer!r}: unknown activation {name!r}")
        canonical.append(found)
    acts, _ = resolve_activations(canonical, alphas, betas)
    return acts


def _implicit_inputs(
    path: Path, op, ov_model, name: str, cell: Cell
) -> tuple[bool, dict[str, bool], list[Finding], dict[str, np.ndarray]]:
    """Whether a sequence op's ``sequence_lengths`` and initial states are real inputs of the layer
    (per state role). ``ov.convert_model`` fills the required inputs with values computed from X's
    shape: the full length and zeros. Those mean "no sequence_lens" and "no initial state" (proven by
    evaluating them for two different input shapes); a state that is the same for every batch entry (a
    constant of the IR, a learned state broadcast to the batch) is held by the layer (the last item: role ->
    layout-0 value); lengths fed by a graph input stay inputs."""
    found: list[Finding] = []
    index = sequence_inputs(cell)
    roles = [role for role, _ in state_roles(cell)]
    lens = op.input_value(index["sequence_lens"])
    states = [op.input_value(index[role]) for role in roles]
    shape_only = [from_shapes_only(v) for v in (lens, *states)]
    trials = evaluate_for_two_shapes(ov_model, [lens, *states], op.input_value(0))
    lens_known = shape_only[0] and bool(trials) and all(got[0] is not None and x for got, x in trials)
    full_lengths = lens_known and all(
        got[0].shape == (x[0],) and bool(np.all(got[0].astype(np.int64) == x[1])) for got, x in trials if x
    )
    evaluated = [bool(trials) and all(got[k] is not None for got, _ in trials) for k in range(len(states) + 1)]
    zero_state = [
        shape_only[k]
        and (zeros_whatever_the_shape(states[k - 1]) or evaluated[k] and not any(np.any(got[k]) for got, _ in trials))
        for k in range(1, 1 + len(roles))
    ]
    if lens_known and not full_lengths:
        raise InputError(
            f"{path}: layer {name!r}: sequence_lengths is computed from constants and shapes but is not the full "
            "sequence length",
            hint="gatepack reads sequence lengths given as a graph input, or the full length",
        )
    if full_lengths:
        found.append(
            Finding(
                "sequence_lens",
                Status.EXACT,
                "sequence_lengths is computed from tensor shapes and is X's full length (for two input sizes): "
                "the layer has no sequence_lens input",
            )
        )
    elif not op.get_input_partial_shape(0).is_static:
        found.append(
            Finding(
                "sequence_lens",
                Status.EXACT,
                "sequence_lengths is an input of a dynamic-shape IR: OpenVINO CPU ignores it unless the model is "
                "reshaped to static shapes (gatepack runs the layer with static shapes)",
                warning="OpenVINO CPU ignores sequence_lengths on dynamic shapes",
            )
        )
    held: dict[str, np.ndarray] = {}
    for k, role in enumerate(roles, start=1):
        value = _held_state([got[k] for got, _ in trials]) if shape_only[k] and evaluated[k] else None
        if value is not None and not zero_state[k - 1]:  # a learned state: the same for every batch entry
            held[role] = value
            found.append(
                Finding(role, Status.EXACT, f"{STATE_INPUTS[role[-1]]} is a constant of the IR {list(value.shape)}")
            )
        elif shape_only[k] and not zero_state[k - 1]:
            found.append(
                Finding(
                    role,
                    Status.EXACT,
                    f"{STATE_INPUTS[role[-1]]} is a constant of the IR, "
                    + ("not zeros" if evaluated[k] else "computed by operators gatepack does not evaluate")
                    + f"; gatepack makes it the layer's {role} input (feed it those values)",
                    warning="constant initial state exposed as an input",
                )
            )
    return not full_lengths, {role: not zero for role, zero in zip(roles, zero_state)}, found, held


def _held_state(trials: list[np.ndarray]) -> np.ndarray | None:
    """A state evaluated for two input sizings ([N, D, H] each) as the layer's constant in layout 0: the same
    array both times (a constant of the IR), or one batch row repeated to each batch ([D, 1, H]); else None."""
    first, second = trials
    if first.shape == second.shape and np.array_equal(first, second):
        return np.ascontiguousarray(first.transpose(1, 0, 2))
    rows = [t[:1] for t in trials]
    repeated = all(np.array_equal(t, np.broadcast_to(r, t.shape)) for t, r in zip(trials, rows))
    if repeated and np.array_equal(rows[0], rows[1]):
        return np.ascontiguousarray(rows[0].transpose(1, 0, 2))
    return None


def _read_sequence_op(path: Path, op, ov_model=None) -> tuple[RecurrentLayer, list[Finding]]:
    """A GRUSequence/RNNSequence/LSTMSequence node of any IR; interface in OpenVINO's batch-major
    convention, gates back in ONNX's order. With ``ov_model`` (another producer's IR), implicit full
    lengths and zero states are no inputs."""
    name = op.get_friendly_name()
    cell = _OPS[op.get_type_name()]
    index = sequence_inputs(cell)
    attrs = op.get_attributes()
    w, cw = _constant(op, index["W"], path, name, "W")
    r, cr = _constant(op, index["R"], path, name, "R")
    b, cb = _constant(op, index["B"], path, name, "B")
    try:
        h = int(attrs["hidden_size"])
        direction = Direction(str(attrs["direction"]).lower())
        lbr = bool(attrs.get("linear_before_reset", False))
        clip = float(attrs.get("clip", 0.0))
        names = [str(a) for a in attrs.get("activations", [])]
        alphas, betas = (
            [float(a) for a in attrs.get("activations_alpha", [])],
            [float(a) for a in attrs.get("activations_beta", [])],
        )
        acts = _activations(names, alphas, betas, path, name)
    except (KeyError, ValueError, TypeError) as err:
        raise InputError(
            f"{path}: layer {name!r}: {op.get_type_name()} attributes are malformed "
            f"({' '.join(str(err).split())[:160]})"
        ) from None
    gh, d = cell.gates * h, direction.count
    bias_rows = gh + h if cell is Cell.GRU and lbr else gh
    for label, array, shape in (
        ("W", w, (d, gh, w.shape[-1] if w.ndim == 3 else -1)),
        ("R", r, (d, gh, h)),
        ("B", b, (d, bias_rows)),
    ):
        if array.shape != shape:
            raise InputError(
                f"{path}: layer {name!r}: {label} has shape {list(array.shape)}, but hidden_size {h} and direction "
                f"{direction.value} make it {list(shape)}"
            )
    if not np.isfinite(clip) or len(acts) < cell.activation_count:
        raise InputError(
            f"{path}: layer {name!r}: clip {clip} or activations {names} are not usable for {op.get_type_name()}"
        )
    found = [
        Finding(
            "bias",
            Status.FOLDED,
            "OpenVINO stores Wb + Rb summed; read back as Wb = sum, Rb = 0"
            + (" (Rb_h kept apart: linear_before_reset)" if lbr else ""),
        )
    ]
    if cw or cr or cb:
        found.append(FP16_SOURCE)
    roles = [role for role, _ in state_roles(cell)]
    has_lens, has_state, implicit, held = (
        _implicit_inputs(path, op, ov_model, name, cell)
        if ov_model is not None
        else (True, dict.fromkeys(roles, True), [], {})
    )
    found += implicit

    def onnx_gates(array: np.ndarray) -> np.ndarray:
        return reorder_gates(array, OV_GATES[cell], cell.gate_names)

    directions = []
    for k in range(direction.count):
        if cell is Cell.GRU and lbr:
            wb = np.concatenate([b[k, : 2 * h], b[k, 2 * h : 3 * h]])
            rb = np.concatenate([np.zeros(2 * h, b.dtype), b[k, 3 * h :]])
        else:
            wb, rb = onnx_gates(b[k]).copy(), np.zeros(gh, b.dtype)
        directions.append(
            DirectionParams(
                W=onnx_gates(w[k]), R=onnx_gates(r[k]), Wb=wb, Rb=rb, activations=tuple(acts[: cell.activation_count])
            )
        )
    x_shape = op.get_input_partial_shape(0)
    n = x_shape[0].get_length() if x_shape[0].is_static else None
    s = x_shape[1].get_length() if x_shape[1].is_static else None
    outputs = {role: f"{name}/{ROLE_LABELS[role]}" for role in OUTPUT_ROLES[: 1 + len(roles)]}
    interface = Interface(
        x=f"{name}/X",
        sequence_lens=f"{name}/sequence_lengths" if has_lens else None,
        **{role: f"{name}/{STATE_INPUTS[role[-1]]}" if has_state[role] else None for role in roles},
        layout=1,
        seq_length=s,
        batch_size=n,
        dtype=w.dtype.name,
        **outputs,
    )
    try:
        layer = RecurrentLayer(
            name,
            cell,
            int(w.shape[2]),
            h,
            direction,
            tuple(directions),
            interface,
            lbr,
            clip if clip > 0 else None,
            True,
            constants={role: value.astype(w.dtype) for role, value in held.items()},
            provenance=Provenance(FORMAT, path, name),
        )
    except SpecError as err:
        raise InputError(f"{path}: {err}") from None
    return layer, found


def _read_described(path: Path, entry: dict, ops_by_name: dict) -> tuple[RecurrentLayer, list[Finding]]:
    """A layer gatepack wrote: semantics from rt_info, weights from the graph's named constants."""
    info = parse(path, entry)
    name, strategy = info.name, info.strategy
    acts = info.activations
    found: list[Finding] = []

    def const(label: str) -> np.ndarray:
        node = ops_by_name.get(f"{name}/{label}")
        if node is None or node.get_type_name() not in ("Constant", "Convert"):
            raise InputError(
                f"{path}: layer {name!r}: the graph has no constant {name}/{label} that its rt_info describes"
            )
        if node.get_type_name() == "Convert":  # fp16-compressed
            found.append(FP16_SOURCE)
            source = node.input_value(0).get_node()
            if source.get_type_name() != "Constant":
                raise InputError(
                    f"{path}: layer {name!r}: {name}/{label} converts a {source.get_type_name()} node, not a constant"
                )
            return _constant_data(source, path, name, label, node.get_output_element_type(0))
        return _constant_data(node, path, name, label)

    directions = []
    if strategy == "native":
        op = ops_by_name.get(name)
        if op is None or op.get_type_name() not in _OPS:
            raise InputError(
                f"{path}: layer {name!r}: rt_info says native but the graph has no sequence node of that name"
            )
        layer, folded = _read_sequence_op(path, op)
        found += folded
        in_graph = [a.name for a in layer.directions[0].activations]
        if any([a.name for a in per] != in_graph for per in acts):
            raise InputError(
                f"{path}: layer {name!r}: its rt_info activations {[[a.name for a in per] for per in acts]} "
                f"contradict the graph's {in_graph}"
            )
        directions = [DirectionParams(p.W, p.R, p.Wb, p.Rb, acts[k]) for k, p in enumerate(layer.directions)]
    else:
        peepholes = f"{name}/P0" in ops_by_name
        for k in range(info.direction.count):
            directions.append(
                DirectionParams(
                    W=const(f"W{k}"),
                    R=const(f"R{k}"),
                    Wb=const(f"Wb{k}"),
                    Rb=const(f"Rb{k}"),
                    activations=acts[k],
                    P=const(f"P{k}") if peepholes else None,
                )
            )
    constants = {role: constant_from_layout(const(role), role, 0) for role in info.constant_roles}
    return build_layer(path, info, directions, Provenance(FORMAT, path, name, strategy), constants), found


# ----------------------------------------------------------------------------------------- running


def _compiled(ov_model, label: str):
    ov, _ = _ov()
    try:
        return ov.Core().compile_model(ov_model, "CPU", COMPILE_CONFIG)
    except Exception as err:
        raise RuntimeFailure(f"{label}: OpenVINO CPU cannot compile it: {_ov_message(err)}") from None


def run_model(ov_model, inputs: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    """Compile ``ov_model`` for CPU and infer. Inputs and outputs go by the model's own tensor
    names: a compiled model may add the names of tensors its frontend fused away."""
    wanted = [p.get_any_name() for p in ov_model.inputs]
    missing = [n for n in wanted if n not in inputs]
    if missing:
        raise InputError(f"{label}: missing input(s) {missing}", hint=f"the model takes {wanted}")
    compiled = _compiled(ov_model, label)
    try:
        # np.require keeps a scalar a scalar (np.ascontiguousarray makes it shape [1], which OpenVINO refuses)
        results = compiled([np.require(inputs[n], requirements="C") for n in wanted])
    except Exception as err:
        raise RuntimeFailure(f"{label}: OpenVINO CPU failed: {_ov_message(err)}") from None
    return {out.get_any_name(): np.array(results[k]) for k, out in enumerate(ov_model.outputs)}


def run_native(path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the IR at ``path`` on OpenVINO CPU (fp32 inference precision), reshaped to the static shapes it is
    fed: on dynamic shapes the CPU plugin ignores a sequence op's ``sequence_lengths`` (docs/conventions.md
    §3), so a packed sequence would run all S steps. A model that cannot be reshaped runs as it is."""
    ov_model = read_ir(Path(path))
    dynamic = {
        p.output(0): tuple(np.shape(inputs[name]))
        for p in ov_model.get_parameters()
        if not p.get_partial_shape().is_static and (name := p.get_output_tensor(0).get_any_name()) in inputs
    }
    if dynamic:
        try:
            ov_model.reshape(dynamic)
        except Exception:  # a shape its own Reshape constants fix; run dynamic (verification compares anyway)
            ov_model = read_ir(Path(path))
    return run_model(ov_model, inputs, str(path))


def graph_inputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The IR's inputs as (name, dtype, dims); a dynamic dim is None."""
    return [
        (
            p.get_output_tensor(0).get_any_name(),
            p.get_element_type().to_dtype(),
            [d.get_length() if d.is_static else None for d in p.get_partial_shape()],
        )
        for p in read_ir(Path(path)).get_parameters()
    ]


def graph_outputs(path: str | Path) -> list[tuple[str, np.dtype, list]]:
    """The IR's outputs as (name, dtype, dims); a dynamic dim is None."""
    return [
        (
            out.get_any_name(),
            out.get_element_type().to_dtype(),
            [d.get_length() if d.is_static else None for d in out.get_partial_shape()],
        )
        for out in read_ir(Path(path)).outputs
    ]


def run_layer_native(layer: RecurrentLayer, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One layer of an IR read from disk, on OpenVINO CPU: gatepack's layer subgraph as saved, or the
    sequence node with its constants (another producer's, or gatepack's native op inside a whole
    model, where its tensors are the model's own), fed and read in the layer's layout."""
    ov, ops = _ov()
    if layer.provenance is None or not layer.provenance.of(FORMAT):
        raise UsageError(f"layer {layer.name!r} was not read from an OpenVINO IR")
    path, name, kind = layer.provenance.artifact, layer.provenance.node, layer.provenance.kind
    label = f"{path}: layer {name!r}"
    if kind == "lifted":
        handle = layer.provenance.handle
        assert isinstance(handle, LoopHandle)  # openvino_lifting's record of the loop
        return run_lifted(path, handle, layer.interface, feed, (ov, ops))
    ov_model = read_ir(path)
    itf = layer.interface
    inputs = {getattr(itf, role) for role in ("x", *layer.fed_roles())}
    params = [p for p in ov_model.get_parameters() if p.output(0).get_names() & inputs]
    outs = {getattr(itf, role) for role in OUTPUT_ROLES} - {None}
    results = [r for r in ov_model.get_results() if r.input_value(0).get_names() & outs]
    if kind != "node" and len(params) == len(inputs) and len(results) == len(outs):
        return run_model(ov.Model(results, params, "layer"), feed, label)
    if kind == "decomposed":
        raise RuntimeFailure(
            f"{label}: its decomposition is inside the model (its tensors are no inputs and outputs of the IR)"
        )
    op = next((o for o in _all_ops(ov_model) if o.get_friendly_name() == name and o.get_type_name() in _OPS), None)
    if op is None:
        raise RuntimeFailure(f"{label}: the IR has no sequence op of that name")
    feed = dict(feed)
    return run_model(_node_alone(ops, layer, op, feed), feed, label)


def _node_alone(ops, layer: RecurrentLayer, op, feed: dict[str, np.ndarray]):
    """A model of the sequence node ``op`` alone, fed by new parameters named after the layer's
    interface (absent states: zeros; absent lengths: full) with static shapes (OpenVINO CPU honours
    sequence_lengths only then); X, states and outputs transposed to and from the layer's layout."""
    ov, _ = _ov()
    itf, name = layer.interface, op.get_friendly_name()
    batch_major = itf.layout == 1
    x = feed[itf.x]
    n, s = (x.shape[0], x.shape[1]) if batch_major else (x.shape[1], x.shape[0])
    d, h = layer.num_directions, layer.hidden_size
    index = sequence_inputs(layer.cell)
    names = {"x": itf.x}
    for role, _ in state_roles(layer.cell):
        names[role] = getattr(itf, role) or f"{name}/{STATE_INPUTS[role[-1]]}"
        held = layer.constant_state(role, n)  # a constant the layer holds, fed to the node alone as it is
        if held is not None:
            feed[names[role]] = held.transpose(PERM_SWAP_01) if batch_major else held
        feed.setdefault(names[role], np.zeros((n, d, h) if batch_major else (d, n, h), layer.dtype))
    names["sequence_lens"] = itf.sequence_lens or f"{name}/sequence_lengths"
    lens_type = op.get_input_element_type(index["sequence_lens"])
    if (held_lens := layer.constant("sequence_lens")) is not None:
        feed[names["sequence_lens"]] = held_lens
    feed[names["sequence_lens"]] = feed.get(names["sequence_lens"], np.full(n, s)).astype(lens_type.to_dtype())
    params = []
    for role, tensor in names.items():
        param = ops.parameter(list(feed[tensor].shape), op.get_input_element_type(index[role]), name=tensor)
        param.output(0).get_tensor().set_names({tensor})
        params.append(param)
        value = param if batch_major or role == "sequence_lens" else ops.transpose(param, [1, 0, 2])
        op.input(index[role]).replace_source_output(value.output(0))
    y = ops.transpose(op.output(0), [0, 2, 1, 3] if batch_major else [2, 1, 0, 3])  # [N,D,S,H] -> the layout
    finals = [
        op.output(k) if batch_major else ops.transpose(op.output(k), [1, 0, 2]).output(0)
        for k in range(1, op.get_output_size())
    ]
    results = []
    for role, out in zip(OUTPUT_ROLES, [y.output(0), *finals]):
        out.get_tensor().set_names({getattr(itf, role) or f"{name}/{ROLE_LABELS[role]}"})
        results.append(ops.result(out))
    return ov.Model(results, params, "layer")


# ---------------------------------------------------------------------------------------- findings


def check(layer: RecurrentLayer, *, strategy: str = "auto", compress_to_fp16: bool = False) -> list[Finding]:
    """Findings for writing ``layer`` as OpenVINO IR with ``strategy``."""
    chosen, blockers = choose_strategy(layer, strategy)
    op = f"{layer.cell.op_name}Sequence-5"
    itf = layer.interface
    found = []
    found.append(
        cell_finding(
            strategy,
            chosen,
            blockers,
            native=f"{op} (the CPU plugin computes this configuration as ONNX specifies)",
            refused=f"{op} would not compute what ONNX specifies",
            decomposed="elementary ops in a TensorIterator per direction, input projections in one MatMul",
            alternative="use --strategy auto or decomposed (elementary ops in a TensorIterator)",
        )
    )
    found.append(
        Finding(
            "direction",
            Status.EXACT,
            layer.direction.value
            + (
                " (reverse via ReverseSequence, which honours sequence_lens)"
                if chosen == "decomposed" and layer.direction is not Direction.FORWARD
                else ""
            ),
        )
    )
    gates = ", ".join(layer.cell.gate_names)
    if chosen == "native" and OV_GATES[layer.cell] != layer.cell.gate_names:
        order = ", ".join(OV_GATES[layer.cell])
        found.append(Finding("weights", Status.REPACKED, f"W, R gate blocks permuted {gates} -> {order}"))
    else:
        found.append(Finding("weights", Status.EXACT, f"W, R in ONNX gate order ({gates}), unchanged"))
    if chosen == "native":
        rb_summed = any(
            p.Rb[: 2 * layer.hidden_size].any() if layer.cell is Cell.GRU and layer.linear_before_reset else p.Rb.any()
            for p in layer.directions
        )
        layout_text = (
            "[D,4H] = [Wbz+Rbz, Wbr+Rbr, Wbh, Rbh]"
            if layer.cell is Cell.GRU and layer.linear_before_reset
            else f"[D,{layer.gates}H] = Wb + Rb"
            + (f" ({', '.join(OV_GATES[layer.cell])})" if OV_GATES[layer.cell] != layer.cell.gate_names else "")
        )
        found.append(
            Finding(
                "bias",
                Status.FOLDED if rb_summed else Status.EXACT,
                f"B {layout_text}"
                + ("; reads back as [Wb + Rb, 0]" if rb_summed else " (Rb is zero: nothing is lost)"),
            )
        )
    else:
        found.append(Finding("bias", Status.EXACT, "Wb and Rb kept apart as constants"))
    if layer.cell is Cell.GRU:
        found.append(Finding("linear_before_reset", Status.EXACT, str(int(layer.linear_before_reset))))
    if layer.has_peepholes:
        found.append(Finding("peepholes", Status.EXACT, "P (i, o, f) as constants, added to the gates' inputs"))
    if layer.input_forget:
        found.append(Finding("input_forget", Status.EXACT, "forget gate computed as 1 - input gate"))
    found.append(
        Finding(
            "activations",
            Status.EXACT,
            f"{layer.activation_summary()}"
            + (" (alpha/beta as constants in the graph)" if chosen == "decomposed" else ""),
        )
    )
    if layer.clip is not None:
        found.append(
            Finding("clip", Status.EXACT, f"clip={layer.clip:g}" + (" (Clamp)" if chosen == "decomposed" else ""))
        )
    if itf.sequence_lens:
        found.append(
            Finding(
                "sequence_lens",
                Status.EXACT,
                "sequence_lens input kept"
                + (
                    " (masks; reverse from len-1)"
                    if chosen == "decomposed"
                    else " (static shapes: the CPU plugin honours it)"
                ),
            )
        )
    for role, _ in state_roles(layer.cell):
        if getattr(itf, role):
            found.append(Finding(role, Status.EXACT, f"{role} input kept"))
        elif chosen == "native":
            found.append(
                Finding(role, Status.EXACT, "zeros built inside the model (the sequence op requires an initial state)")
            )
    if chosen == "native" or itf.layout == 1:
        found.append(
            Finding(
                "layout",
                Status.REPACKED,
                f"layout {itf.layout} interface kept; Transposes inside the model"
                + (" (OpenVINO's sequence op is batch-major, Y [N,D,S,H])" if chosen == "native" else ""),
            )
        )
    else:
        found.append(Finding("layout", Status.EXACT, "layout 0 (sequence-major)"))
    if layer.dtype == np.float64:
        found.append(
            Finding(
                "dtype",
                Status.LOSSY,
                "float64 IR, but OpenVINO's CPU plugin computes in float32",
                alternative="pass --allow-lossy to accept float32 arithmetic",
            )
        )
    else:
        found.append(Finding("dtype", Status.EXACT, itf.dtype))
    if compress_to_fp16 and layer.dtype != np.float16:
        found.append(
            Finding(
                "weights storage",
                Status.LOSSY,
                "weights compressed to fp16 in the .bin (asked for; verified at fp16's tolerance)",
                alternative="pass --allow-lossy to accept it, or leave out --compress-to-fp16 for fp32 weights",
            )
        )
    found.append(
        Finding(
            "inference precision",
            Status.EXACT,
            "fp32",
            warning=(
                "OpenVINO's CPU plugin defaults to bf16 on CPUs that have it (differences ~1e-3): compile with "
                "INFERENCE_PRECISION_HINT=f32, as gatepack's verification does"
            ),
        )
    )
    found.append(
        Finding(
            "shapes",
            Status.EXACT,
            f"S={dim_text(itf.seq_length)}, N={dim_text(itf.batch_size)} (dynamic dimensions stay dynamic)",
        )
    )
    return found


IMPLEMENTATION = FormatImplementation(
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    graph_inputs=graph_inputs,
    graph_outputs=graph_outputs,
    whole_model_finding=whole_model_finding,
    compute_dtype=compute_dtype,
)

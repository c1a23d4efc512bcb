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
its Loops/TensorIterators that step a GRU, RNN or LSTM are lifted (``openvino.lifting``).

This module is the format's entry: the strategy, writing (layers alone, or a whole ONNX model through
OpenVINO's ONNX frontend), the decomposed cells and ``check``. Reading is ``openvino.reader``, running
``openvino.running``, the IR files and the CPU plugin ``openvino.ir``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import gatepack.converters.formats.openvino.compressed as openvino_compressed
import gatepack.converters.formats.openvino.stateful as openvino_stateful
import gatepack.converters.quantization as quantization
from gatepack.converters.capabilities import lacks
from gatepack.converters.cell_steps import step_of
from gatepack.converters.description import describe
from gatepack.converters.errors import GatepackError, InputError, RuntimeFailure, UsageError
from gatepack.converters.feature_findings import findings, form_of
from gatepack.converters.fileio import atomic_files
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.openvino.ir import OV_GATES, RT_INFO_OTHER_OPS, RT_INFO_PATH, ov_message
from gatepack.converters.formats.openvino.quantizers import conversion_extensions
from gatepack.converters.formats.openvino.reader import read
from gatepack.converters.formats.openvino.registration import CAPABILITIES as OPENVINO
from gatepack.converters.formats.openvino.registration import NAME
from gatepack.converters.formats.openvino.running import graph_inputs, graph_outputs, run_layer_native, run_native
from gatepack.converters.model import Model, with_separate_inputs
from gatepack.converters.registry import FormatImplementation, keeps_whole
from gatepack.converters.strategy import choose
from gatepack.converters.weight_quantization import SCOPE_KEY
from gatepack.schemas.cells import CELLS
from gatepack.schemas.layer import (
    INPUT_ROLES,
    OUTPUT_ROLES,
    Cell,
    Direction,
    DirectionParams,
    Provenance,
    RecurrentLayer,
    reorder_gates,
    stack_directions,
    state_roles,
)
from gatepack.schemas.quantized import QuantizedWeights


def _ov():
    from gatepack.converters.formats.openvino.registration import openvino

    return openvino()


# ---------------------------------------------------------------------------------------- strategy


def native_blockers(layer: RecurrentLayer) -> list[str]:
    """Why OpenVINO's own sequence op would not compute what ONNX specifies (empty: it would):
    ``capabilities.OPENVINO``'s op for the cell, against the layer."""
    return list(lacks(layer, OPENVINO.op(layer.cell)).values())


def choose_strategy(layer: RecurrentLayer, strategy: str) -> tuple[str, list[str]]:
    blockers = native_blockers(layer)
    return choose(strategy, blockers), blockers


# ----------------------------------------------------------------------------------------- writing


def write(
    model: Model, path: str | Path, *, strategy: str = "auto", compress_to_fp16: bool = False, stateful: bool = False
) -> None:
    """Write ``model``'s layers as one IR (``path`` = NAME.xml, with NAME.bin beside it), atomically;
    ``stateful``: its state pairs (``Model.meta['state_pairs']``) as OpenVINO variables (``openvino.stateful``)."""
    ov, _ = _ov()
    path = Path(path)
    if path.suffix.lower() != ".xml":
        raise UsageError(f"{path}: an OpenVINO IR path ends in .xml")
    model = quantization.floats_asked(model)  # float weights, as asked (--dequantize)
    ov_model = build_whole(model, strategy=strategy) if is_whole_model(model) else build(model, strategy=strategy)
    if stateful:
        pairs = model.meta.get("state_pairs")
        if not pairs:
            raise UsageError(f"{model.path}: --stateful needs the model's state pairs", hint="--state INPUT=OUTPUT")
        openvino_stateful.make_stateful(ov_model, pairs, str(model.path), model.meta.get("input_shapes"))
    with atomic_files(path, (".bin",)) as tmp:
        ov.save_model(ov_model, str(tmp), compress_to_fp16=compress_to_fp16)


def compute_dtype(layer: RecurrentLayer) -> str:
    """What the CPU plugin computes the layer in: float64 IRs run in float32."""
    return "float32" if layer.interface.dtype == "float64" else layer.interface.dtype


def is_whole_model(model: Model) -> bool:
    """An ONNX model with operators other than its recurrent nodes: written as one IR of everything
    (unless the user asked for the layers alone; ``registry.keeps_whole``)."""
    return keeps_whole(model, NAME)


def whole_model_finding(model: Model) -> Finding | None:
    """The report's ``model`` finding when the whole ONNX model goes into the IR (None otherwise): from the same
    import by OpenVINO's ONNX frontend that ``convert`` runs, so the report never calls exact a model that the
    frontend refuses. A model the frontend refuses as it is but takes once folded for its input shapes
    (``onnx.folding``: the user's ``--input-shape``s, else the declared ones) is ``folded``."""
    if not is_whole_model(model):
        return None
    low_precision = _low_precision_refusal(model)
    if low_precision is not None:
        return low_precision
    verdict = _frontend_verdict(model)
    if verdict.refusal is not None:
        return Finding(
            "model",
            Status.UNSUPPORTED,
            f"OpenVINO's ONNX frontend cannot convert the model's {model.other_ops_text()}: {verdict.refusal}",
            alternative=_specialisation_hint(model)
            + (
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


# sequence ops whose W and R OpenVINO CPU's low-precision transformations take only as Constants (RNNSequence: any)
_LOW_PRECISION_CONSTANT_WEIGHTS = {Cell.GRU: "GRUSequence", Cell.LSTM: "LSTMSequence"}


def _low_precision_refusal(model: Model) -> Finding | None:
    """A whole model with QuantizeLinear nodes (the frontend makes them FakeQuantize ops, which turn on OpenVINO CPU's
    low-precision transformations) and a GRU or LSTM layer whose W and R gatepack keeps as compressed constants
    (integers -> Convert -> Subtract -> Multiply) in 8 bits: the CPU plugin cannot compile it ('GRUSequence ...
    expects Constant for port 3', W; measured on OpenVINO 2025), so it is refused before writing (None: not such a
    model). 4-bit weights compile (onnxruntime's int4 QDQ GRU and LSTM verify)."""
    if "QuantizeLinear" not in model.meta.get("other_ops", ()):
        return None
    held = [
        layer
        for layer in quantization.floats_asked(model).layers  # (--dequantize: float weights, nothing held)
        if layer.cell in _LOW_PRECISION_CONSTANT_WEIGHTS and all(_eight_bit(held_records(layer, role)) for role in "WR")
    ]
    if not held:
        return None
    return Finding(
        "model",
        Status.UNSUPPORTED,
        f"whole model: layer {held[0].name!r} keeps its quantized W and R as compressed constants, and the model's "
        "QuantizeLinear nodes become FakeQuantize ops, with which OpenVINO CPU's low-precision transformations take "
        f"a {_LOW_PRECISION_CONSTANT_WEIGHTS[held[0].cell]}'s weights only as Constants: the CPU plugin cannot "
        "compile such an IR",
        alternative="pass --dequantize to write W and R as float Constants (the dequantized values the source "
        "computes with), or --layers-only for the layers alone, or convert to onnx, which keeps the whole model",
    )


def _eight_bit(records: list[QuantizedWeights] | None) -> bool:
    """Whether compressed weights are 8-bit (those the low-precision transformations meet; the int4 QDQ models of
    onnxruntime's quantizer compile and verify with their W and R compressed)."""
    return records is not None and all(record.bits == 8 for record in records)


def _specialisation_hint(model: Model) -> str:
    """``onnx.folding.specialisation_hint`` for the model's file: the ``--input-value`` that decides its Ifs."""
    from gatepack.converters.formats.onnx.folding import specialisation_hint
    from gatepack.converters.formats.onnx.graph import load_proto

    return specialisation_hint(load_proto(Path(str(model.path))))


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
        return ov_message(err)


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
        candidates.setdefault(layer.cell.onnx_op, []).append((layer, node))  # lifted layers too
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

    # a layer with a per-step hold is written in place as an elementary ONNX Loop, which the frontend converts
    described += [{"name": lay.name, "strategy": "held", **describe(lay)} for lay in model.layers if lay.interface.mask]
    core = ov.Core()
    for op_type in (spec.onnx_op for spec in CELLS.values() if spec.onnx_op is not None):
        core.add_extension(ConversionExtension(op_type, translator(op_type)))
    for extension in conversion_extensions(ops):  # as ONNX defines them, not as the frontend rounds them
        core.add_extension(extension)
    folded = _folded(model, _proto_to_read(model, always=True)) if _frontend_verdict(model).folded_for else None
    try:
        ov_model = _read_onnx(core, model, folded)
    except Exception as err:
        if failures and isinstance(failures[0], GatepackError):
            raise failures[0] from None
        raise _FrontendRefusal(err.one_line() if isinstance(err, GatepackError) else ov_message(err)) from None
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
    from gatepack.converters.formats.onnx.graph import load_proto
    from gatepack.converters.formats.onnx.quantized import is_quantized_layer
    from gatepack.converters.formats.onnx.rewrite import embed_external_data, in_place, lifted_layers

    if lifted_layers(model) or any(map(is_quantized_layer, model.layers)) or model.meta.get(SCOPE_KEY):
        return in_place(model)  # (its other weights quantized as QDQ, which the frontend reads as compressed)
    if not always:
        return None
    assert model.path is not None  # (the file the model was read from)
    proto = load_proto(Path(model.path))
    embed_external_data(proto, Path(model.path).parent)
    return proto


def _folded(model: Model, proto):
    """``proto`` (the model OpenVINO reads) folded for the user's input shapes, else its declared ones."""
    from gatepack.converters.formats.onnx.folding import fold

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


def _ov_gates(cell: Cell, array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Gate blocks (rows, or a bias's entries) from ONNX's order to the sequence op's (into ``out`` when given)."""
    return reorder_gates(array, cell.gate_names, OV_GATES[cell], out=out)


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
    w, r = (_weight(ops, layer, role) for role in ("W", "R"))
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


def _weight(ops, layer: RecurrentLayer, role: str):
    """The sequence op's W or R [D, G*H, K], gates in its order: NNCF's compressed form when the layer holds
    quantized weights it writes exactly (``openvino.compressed``), else a float Constant."""
    records = held_records(layer, role)
    name = f"{layer.name}/{role}"
    if records is None:
        return _const(ops, stack_directions([_ov_gates(layer.cell, getattr(p, role)) for p in layer.directions]), name)
    return openvino_compressed.emit(ops, _in_gate_order(layer.cell, records), name)


def _in_gate_order(cell: Cell, records: list[QuantizedWeights]) -> list[QuantizedWeights]:
    """``records`` with their rows in the sequence op's gate order: themselves where it is ONNX's (GRU, RNN), else
    the directions' integers copied once, in that order, into one stacked array (which the Constant then shares)."""
    if cell.gate_names == OV_GATES[cell]:
        return records
    stacked = np.empty((len(records), *records[0].values.shape), records[0].values.dtype)
    return [
        r.with_values(
            _ov_gates(cell, r.values, stacked[d]),
            *(a if r.axis is None else _ov_gates(cell, a) for a in (r.scale, r.zero_point)),
        )
        for d, r in enumerate(records)
    ]


def held_records(layer: RecurrentLayer, role: str) -> list[QuantizedWeights] | None:
    """The records of ``layer``'s ``role`` (W or R) when every direction has one that the compressed form holds."""
    records = [getattr(p, f"{role}q") for p in layer.directions]
    if any(r is None for r in records) or not openvino_compressed.holdable(records):
        return None
    return records


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


# ---------------------------------------------------------------------------------------- findings


COMPRESSED_FORM = (
    "compressed constants as NNCF writes them: the integers (i8/u8/i4/u4), Convert, minus the zero point (none when "
    "symmetric), times the scale (f32, or NNCF's f16 chain for an f16 scale; per group reshaped), feeding the "
    "sequence op's W and R"
)


def check(layer: RecurrentLayer, *, strategy: str = "auto", compress_to_fp16: bool = False) -> list[Finding]:
    """Findings for writing ``layer`` as OpenVINO IR with ``strategy`` (``capabilities.OPENVINO``): the shared
    features, and what only OpenVINO has: fp16 weight compression and the CPU plugin's inference precision."""
    found = findings(layer, form_of(layer, OPENVINO, strategy))
    if layer.is_quantized:
        found += _quantization(layer, strategy)
    if compress_to_fp16 and layer.dtype != np.float16:
        found.append(
            Finding(
                "weights storage",
                Status.LOSSY,
                "weights compressed to fp16 in the .bin (asked for; verified at fp16's tolerance)",
                alternative="pass --allow-lossy to accept it, or leave out --compress-to-fp16 for fp32 weights",
            )
        )
    precision = (
        "OpenVINO's CPU plugin defaults to bf16 on CPUs that have it (differences ~1e-3): compile with "
        "INFERENCE_PRECISION_HINT=f32, as gatepack's verification does"
    )
    return found + [Finding("inference precision", Status.EXACT, "fp32", warning=precision)]


def _quantization(layer: RecurrentLayer, strategy: str) -> list[Finding]:
    """A quantized layer's integers: held as compressed constants by its sequence op; its decomposed form (a
    TensorIterator of elementary ops) multiplies float weights, which says why it is chosen ([]: records OpenVINO
    does not compress, the shared finding says so)."""
    chosen, blockers = choose_strategy(layer, strategy)
    if chosen != "native":
        why = f" ({'; '.join(blockers)})" if blockers else " (--strategy decomposed)"
        reason = f"its decomposed form{why}, a TensorIterator of elementary ops, multiplies float weights"
        return [quantization.dequantized(layer, "openvino", reason)]
    held = all(held_records(layer, role) for role in ("W", "R"))
    return [quantization.held(layer, COMPRESSED_FORM)] if held else []


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
    open_session=openvino_stateful.open_session,
)

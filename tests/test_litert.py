"""LiteRT (.tflite): configurations of the GRU/RNN and LSTM matrices converted (auto: the sequence op where it is
exact, else elementary builtin ops unrolled), verified on ai-edge-litert's interpreter, the saved file run again
on the interpreter and compared with onnxruntime (the float64 transcription for an LSTM); round trips back to
ONNX; refusals; stateless files (inputs set once, invoked twice on the plain interpreter)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from helpers import (
    ROOT,
    Config,
    assert_matches_onnxruntime,
    build_model,
    inputs,
    lstm_matrix,
    matrix,
    ort_reference,
    ort_run,
    to_layout,
    weights,
)
from oracle import assert_lstm_matches_the_oracle

import gatepack as gp
from gatepack.cli import main
from gatepack.converters import registry
from gatepack.converters.formats.litert.reader import _File

pytest.importorskip("ai_edge_litert")

TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}
FUSED = ("Tanh", "Relu")  # ActivationFunctionType: no sigmoid


def convert_and_check(cfg: Config, tmp_path, strategy: str = "auto") -> str:
    """Convert with ``strategy`` at the configuration's sizes, verified on the interpreter; the saved file run on
    the interpreter gives onnxruntime's outputs (the oracle's for an LSTM). Returns the form chosen."""
    src, out = tmp_path / "m.onnx", tmp_path / "m.tflite"
    onnx.save(build_model(cfg), src)
    result = gp.convert(src, out, strategy=strategy, allow_lossy=True, seq_length=cfg.S, batch_size=cfg.N)
    assert result.verification.passed, result.verification.to_text()
    (cell,) = [f for f in result.findings["rec"] if f.feature == "cell"]
    chosen = "decomposed" if cell.status.value == "decomposed" else "native"
    assert gp.load(out).layers[0].provenance.kind == chosen
    file = _File(out)
    names = [file.name(k) for k in range(len(file.tensors))]
    assert len(set(names)) == len(names)  # every tensor named once
    feed0 = inputs(cfg)
    outputs = gp.run(out, to_layout(cfg, feed0))  # the saved file on the interpreter
    if cfg.cell == "LSTM":
        assert_lstm_matches_the_oracle(cfg, feed0, outputs, *TOLERANCE[cfg.dtype])
    else:
        assert_matches_onnxruntime(cfg, feed0, outputs, *TOLERANCE[cfg.dtype])
    return chosen


def native_is_exact(cfg: Config) -> bool:
    """Whether TFLite's sequence op computes what the ONNX node specifies, from the schema and the kernels
    (docs/conventions.md §11), not from gatepack: no GRU op; RNN with Tanh or Relu; LSTM with Sigmoid
    gates and one of them as both g and h; no clip (cell_clip bounds the cell state); initial states of any
    direction (each direction's state variable is written from the input's slice on every invoke)."""
    per = {"GRU": 2, "RNN": 1, "LSTM": 3}[cfg.cell]
    names = cfg.activations or {"RNN": ["Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": []}[cfg.cell] * cfg.D
    lists = [names[d * per : (d + 1) * per] for d in range(cfg.D)]
    if cfg.cell == "GRU":
        return False
    if cfg.cell == "RNN":
        acts = all(a[0] in FUSED for a in lists)
    else:
        acts = all(a[0] == "Sigmoid" and a[1] == a[2] and a[1] in FUSED for a in lists)
    if cfg.seq_lens != "none":  # the sequence ops have no lengths
        return False
    clip = cfg.clip is not None and cfg.clip >= 0  # a negative clip is none
    return acts and not clip


def _sweep(configs: list[Config], count: int) -> list[Config]:
    """The first ``count`` configurations, a third of them with sequence lengths (the elementary form's masks)."""
    lengths = [c for c in configs if c.seq_lens != "none"][: count // 3]
    return [c for c in configs if c.seq_lens == "none"][: count - len(lengths)] + lengths


def native_variant(cfg: Config) -> Config:
    """The configuration made representable by the sequence op (derived from the original): Sigmoid gates and
    one of Tanh, Relu as g and h (RNN: as its activation), no clip."""
    per = {"RNN": 1, "LSTM": 3}[cfg.cell]
    fused = FUSED[cfg.seed % 2]
    acts = (["Sigmoid", fused, fused] if per == 3 else [fused]) * cfg.D
    return replace(cfg, activations=acts, alphas=None, betas=None, clip=None)


MATRIX = _sweep(matrix(), 40)
LSTM_MATRIX = _sweep(lstm_matrix(), 40)
VARIANTS = [native_variant(c) for c in _sweep(lstm_matrix(seed=7), 16) + _sweep(matrix(seed=8), 40) if c.cell != "GRU"]


@pytest.mark.matrix
@pytest.mark.parametrize(
    "cfg", MATRIX + LSTM_MATRIX + VARIANTS, ids=[c.label() for c in MATRIX + LSTM_MATRIX + VARIANTS]
)
def test_matrix_auto(cfg: Config, tmp_path):
    """auto picks the sequence op exactly where it is exact, and the file matches the oracle."""
    assert convert_and_check(cfg, tmp_path) == ("native" if native_is_exact(cfg) else "decomposed")


def test_the_sweeps_cover_both_forms_and_every_feature():
    chosen = [native_is_exact(c) for c in MATRIX + LSTM_MATRIX + VARIANTS]
    assert 15 <= sum(chosen) <= len(chosen) - 15
    lstm = LSTM_MATRIX
    assert any(c.peepholes for c in lstm) and any(c.input_forget for c in lstm) and any(c.clip for c in lstm)
    assert any(c.initial_c for c in lstm) and {c.dtype for c in lstm} >= {"float32", "float64"}
    assert {c.direction for c in MATRIX} == {"forward", "reverse", "bidirectional"} and any(c.layout for c in MATRIX)


NATIVE = [
    Config(cell="LSTM", direction="bidirectional", layout=1, seed=3),
    Config(cell="LSTM", direction="reverse", initial_h=True, initial_c=True, peepholes=True, seed=4),
    Config(cell="LSTM", input_forget=1, peepholes=True, initial_h=True, seed=5),
    Config(cell="LSTM", activations=["Sigmoid", "Relu", "Relu"], layout=1, seed=6),
    Config(cell="RNN", direction="bidirectional", activations=["Relu", "Tanh"], seed=7),
    Config(cell="RNN", layout=1, seed=8),
    Config(cell="LSTM", dtype="float64", direction="bidirectional", seed=9),
    Config(cell="LSTM", direction="bidirectional", initial_h=True, initial_c=True, layout=1, seed=10),
    Config(cell="RNN", direction="bidirectional", initial_h=True, seed=11),
]


@pytest.mark.parametrize("cfg", NATIVE, ids=lambda c: c.label())
def test_the_sequence_ops_where_they_are_exact(cfg: Config, tmp_path):
    """Peepholes (cell_to_*), CIFG, batch-major (time_major false), reverse, fed states (bidirectional and RNN
    too), Relu: the op itself."""
    assert convert_and_check(cfg, tmp_path, "native") == "native"


@pytest.mark.parametrize(
    "cfg",
    [
        Config(cell="GRU", direction="bidirectional", lbr=1, initial_h=True, layout=1, seed=11),
        Config(cell="LSTM", clip=0.7, direction="bidirectional", initial_h=True, initial_c=True, seed=12),
        Config(cell="RNN", activations=["Softplus"], seed=13),
    ],
    ids=lambda c: c.label(),
)
def test_elementary_form(cfg: Config, tmp_path):
    assert convert_and_check(cfg, tmp_path, "decomposed") == "decomposed"


def test_float64_is_lossy_and_refused_without_allow_lossy(tmp_path):
    onnx.save(build_model(Config(cell="LSTM", dtype="float64")), tmp_path / "m.onnx")
    with pytest.raises(gp.RefusedError, match="FLOAT32"):
        gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite")


def _cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize(
    ("cfg", "options", "reason"),
    [
        (Config(cell="LSTM", seq_lens="mixed"), ("--strategy", "native"), "no sequence lengths"),
        (Config(cell="GRU"), ("--strategy", "native"), "no GRU builtin"),
        (Config(cell="LSTM", clip=1.0), ("--strategy", "native"), "bounds the cell state"),
        (Config(cell="LSTM", activations=["Sigmoid", "Tanh", "Relu"]), ("--strategy", "native"), "one fused"),
        (Config(cell="RNN", activations=["Elu"], alphas=[0.5]), ("--strategy", "native"), "Elu"),
    ],
    ids=["lengths-native", "gru-native", "clip-native", "two-activations-native", "elu-native"],
)
def test_refusals_exit_4_with_the_reason(cfg, options, reason, tmp_path):
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    done = _cli("convert", tmp_path / "m.onnx", "-o", tmp_path / "m.tflite", *options)
    assert done.exit_code == 4, done.output
    assert reason in done.output and not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize(
    "cfg",
    [
        Config(cell="LSTM", direction="bidirectional", peepholes=True, bias=True, seed=21),
        Config(cell="RNN", direction="reverse", initial_h=True, layout=1, seed=22),
        Config(cell="GRU", lbr=1, seed=23),
    ],
    ids=lambda c: c.label(),
)
def test_litert_to_onnx_reads_back_every_weight(cfg: Config, tmp_path):
    """ONNX -> LiteRT -> ONNX, each verified: W, R (and P) bit-exact, the biases split (elementary) or summed
    into Wb (the sequence op's one bias per gate)."""
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    assert gp.convert(
        tmp_path / "m.onnx", tmp_path / "m.tflite", seq_length=cfg.S, batch_size=cfg.N
    ).verification.passed
    back = gp.convert(tmp_path / "m.tflite", tmp_path / "back.onnx")
    assert back.verification.passed, back.verification.to_text()
    (a,), (b,) = gp.load(tmp_path / "m.onnx").layers, gp.load(tmp_path / "back.onnx").layers
    native = gp.load(tmp_path / "m.tflite").layers[0].provenance.kind == "native"
    assert (b.interface.x, b.interface.y, b.interface.y_h, b.interface.layout) == (
        a.interface.x,
        a.interface.y,
        a.interface.y_h,
        a.interface.layout,
    )
    for p, q in zip(a.directions, b.directions):
        np.testing.assert_array_equal(q.W, p.W)
        np.testing.assert_array_equal(q.R, p.R)
        if p.P is not None:
            np.testing.assert_array_equal(q.P, p.P)
        if native:
            np.testing.assert_array_equal(q.Wb, p.Wb + p.Rb)
            assert not q.Rb.any()
        else:
            np.testing.assert_array_equal(q.Wb, p.Wb)
            np.testing.assert_array_equal(q.Rb, p.Rb)


REPEATED = [
    Config(cell=cell, direction=direction, initial_h=fed, initial_c=fed and cell == "LSTM", seed=31)
    for cell in ("GRU", "RNN", "LSTM")
    for direction in ("forward", "bidirectional")
    for fed in (False, True)
] + [
    Config(cell="LSTM", direction="reverse", initial_h=True, layout=1, seed=32),
    Config(cell="RNN", direction="reverse", layout=1, seed=33),
]


@pytest.mark.parametrize("cfg", REPEATED, ids=lambda c: c.label())
def test_inputs_set_once_and_invoked_twice_give_onnxruntime_s_outputs_both_times(cfg: Config, tmp_path):
    """The file is stateless: on ai-edge-litert's plain Interpreter (with its default XNNPACK delegate and without
    it), inputs set once and invoked twice give onnxruntime's outputs both times, and the state inputs still hold
    what was set (before, the sequence op's variable state carried the first invoke's final state into the second:
    0.10-0.58 off); gatepack's session (streaming verification's) agrees on consecutive calls too."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    result = gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N, seq_length=cfg.S)
    assert result.verification.passed, result.verification.to_text()
    feed0 = inputs(cfg)
    feed = to_layout(cfg, feed0)
    expected = {k: to_layout_outputs(cfg, k, v) for k, v in zip(cfg.outputs, ort_reference(cfg, feed0))}
    for resolver in (OpResolverType.AUTO, OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES):
        interpreter = Interpreter(model_path=str(tmp_path / "m.tflite"), experimental_op_resolver_type=resolver)
        given = interpreter.get_input_details()
        for d in given:
            interpreter.resize_tensor_input(d["index"], list(feed[d["name"]].shape))
        interpreter.allocate_tensors()
        for d in given:
            interpreter.set_tensor(d["index"], feed[d["name"]])
        for call in range(2):
            interpreter.invoke()
            got = {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
            for name in cfg.outputs:
                np.testing.assert_allclose(got[name], expected[name], atol=1e-5, rtol=1e-4, err_msg=f"{name} {call}")
            for d in given:
                np.testing.assert_array_equal(interpreter.get_tensor(d["index"]), feed[d["name"]])
    session = registry.implementation("litert").open_session
    assert session is not None
    run = session(tmp_path / "m.tflite")
    for _ in range(2):
        got = run(feed)
        for name in cfg.outputs:
            np.testing.assert_allclose(got[name], expected[name], atol=1e-5, rtol=1e-4)


def to_layout_outputs(cfg: Config, name: str, value: np.ndarray) -> np.ndarray:
    """onnxruntime's layout-0 output ``name`` in the configuration's layout."""
    if not cfg.layout:
        return value
    return value.transpose(2, 0, 1, 3) if name == "Y" else value.transpose(1, 0, 2)


def test_the_file_is_recognised_by_its_identifier_and_states_are_variables_written_before_the_op(tmp_path):
    """The op's states are variable tensors of their own, each written by one op before the sequence op: h sliced
    from the initial_h input (a plain input, never the variable), c filled with zeros."""
    cfg = Config(cell="LSTM", initial_h=True, seed=41)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N)
    data = (tmp_path / "m.tflite").read_bytes()
    assert data[4:8] == b"TFL3" and registry.detect(tmp_path / "m.tflite") == "litert"
    assert registry.FORMATS["litert"].recognise(tmp_path / "m.tflite")
    file = _File(tmp_path / "m.tflite")
    by_name = {file.name(k): t for k, t in enumerate(file.tensors)}
    assert not by_name["initial_h"].isVariable and not by_name["X"].isVariable
    ops = [file.op_name(op) for op in file.graph.operators]
    assert ops.count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 1
    (lstm,) = [op for op in file.graph.operators if file.op_name(op) == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    states = [int(lstm.inputs[k]) for k in (18, 19)]
    assert all(file.tensors[k].isVariable for k in states)
    writers = {int(op.outputs[0]): op for op in file.graph.operators}
    h, c = (writers[k] for k in states)
    assert file.op_name(h) == "STRIDED_SLICE" and file.name(int(h.inputs[0])) == "initial_h"
    assert file.op_name(c) == "FILL"
    assert ops.index("UNIDIRECTIONAL_SEQUENCE_LSTM") > max(file.graph.operators.index(op) for op in (h, c))


def test_a_foreign_file_without_gatepack_s_description_reads_its_op(tmp_path):
    """A file whose metadata is stripped reads as another producer's: the op's own tensors (CIFG, peepholes),
    the op run alone on the interpreter against ONNX written from it."""
    cfg = Config(cell="LSTM", peepholes=True, input_forget=1, seed=51)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N)
    _without_description(tmp_path / "m.tflite", tmp_path / "foreign.tflite")
    (layer,) = gp.load(tmp_path / "foreign.tflite").layers
    assert layer.provenance.kind == "node" and layer.input_forget and layer.has_peepholes
    result = gp.convert(tmp_path / "foreign.tflite", tmp_path / "back.onnx", layers_only=True)
    assert result.verification.passed, result.verification.to_text()


def test_a_foreign_state_variable_computed_in_the_graph_is_refused(tmp_path):
    """Stripped of its description, a file whose op's state is sliced from an input before the op cannot be read
    from the op alone (its initial state would be lost): one line naming the file, the op and the writer."""
    cfg = Config(cell="LSTM", initial_h=True, seed=52)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N)
    _without_description(tmp_path / "m.tflite", tmp_path / "foreign.tflite")
    done = _cli("inspect", tmp_path / "foreign.tflite")
    assert done.exit_code == 3, done.output
    assert "foreign.tflite" in done.output and "h state variable is written by a STRIDED_SLICE" in done.output


def test_malformed_files_are_one_line_input_errors(tmp_path):
    (tmp_path / "bad.tflite").write_bytes(b"\x1c\0\0\0TFL3" + b"\0" * 56)
    done = _cli("inspect", tmp_path / "bad.tflite")
    assert done.exit_code == 3 and len(done.output.strip().splitlines()) == 1, done.output
    (tmp_path / "text.tflite").write_text("hello world")
    done = _cli("inspect", tmp_path / "text.tflite")
    assert done.exit_code == 3 and "TFL3" in done.output


def test_report_json_has_the_litert_column(tmp_path):
    onnx.save(build_model(Config(cell="LSTM", clip=1.0)), tmp_path / "m.onnx")
    data = json.loads(_cli("report", tmp_path / "m.onnx", "--to", "litert", "--json").output)
    findings = {f["feature"]: f["status"] for f in data["layers"][0]["targets"]["litert"]["findings"]}
    assert findings["cell"] == "decomposed" and findings["clip"] == "decomposed"


def _without_description(path, out, change=None) -> None:
    """``path`` rewritten as another producer's file: gatepack's metadata dropped, ``change(model)`` applied."""
    import flatbuffers

    from gatepack.converters.formats.litert.common import schema

    model = schema().ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    model.metadata = None
    if change is not None:
        change(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    out.write_bytes(bytes(builder.Output()))


def test_a_variable_state_with_data_reads_as_a_learned_initial_state(tmp_path):
    """A state variable holding data (which the interpreter refuses to load) is a held initial state: the layer
    read back, written as ONNX with it as a constant, gives onnxruntime's outputs for that initial state."""
    from gatepack.converters.formats.litert.common import schema

    cfg = Config(cell="LSTM", seed=61)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N)
    learned = np.linspace(-0.5, 0.5, cfg.N * cfg.H, dtype=np.float32).reshape(cfg.N, cfg.H)

    def hold(model) -> None:
        s = schema()
        buffer = s.BufferT()
        buffer.data = np.frombuffer(learned.tobytes(), np.uint8)
        model.buffers.append(buffer)
        names = [t.name.decode() if isinstance(t.name, bytes) else t.name for t in model.subgraphs[0].tensors]
        (state,) = [t for t, name in zip(model.subgraphs[0].tensors, names) if t.isVariable and "h_state" in name]
        state.buffer = len(model.buffers) - 1

    _without_description(tmp_path / "m.tflite", tmp_path / "learned.tflite", hold)
    (layer,) = gp.load(tmp_path / "learned.tflite").layers
    np.testing.assert_array_equal(layer.constant("initial_h"), learned[None])
    assert gp.convert(tmp_path / "learned.tflite", tmp_path / "back.onnx", layers_only=True).verification.passed
    feed = inputs(replace(cfg, initial_h=True))
    feed["initial_h"] = learned[None]
    expected = ort_run(build_model(replace(cfg, initial_h=True)), feed)
    itf = gp.load(tmp_path / "back.onnx").layers[0].interface
    np.testing.assert_allclose(gp.run(tmp_path / "back.onnx", {itf.x: feed["X"]})[itf.y], expected[0], atol=1e-6)


def _sequence_op(model):
    """The model's first sequence op (the ops writing its states come before it)."""
    from gatepack.converters.formats.litert.common import schema

    code = schema().BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM
    ops = model.subgraphs[0].operators
    return next(op for op in ops if model.operatorCodes[op.opcodeIndex].builtinCode == code)


def _first_op_tensor(model, position: int):
    return model.subgraphs[0].tensors[_sequence_op(model).inputs[position]]


def _first_op_input(position: int):
    """A change giving the sequence op's optional input ``position`` a tensor (any: the reader refuses its role)."""

    def change(model) -> None:
        op = _sequence_op(model)
        op.inputs = [*op.inputs[:position], op.inputs[1], *op.inputs[position + 1 :]]

    return change


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda model: setattr(_first_op_tensor(model, 2), "type", 9), "INT8 tensor"),
        (_first_op_input(16), "a projection input"),
        (_first_op_input(21), "a layer norm input"),
    ],
    ids=["int8", "projection", "layer-norm"],
)
def test_what_a_canonical_layer_cannot_hold_is_refused_naming_file_op_and_field(change, needle, tmp_path):
    cfg = Config(cell="LSTM", layout=1, seed=71)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N)
    _without_description(tmp_path / "m.tflite", tmp_path / "odd.tflite", change)
    done = _cli("inspect", tmp_path / "odd.tflite")
    assert done.exit_code == 3 and len(done.output.strip().splitlines()) == 1, done.output
    assert "odd.tflite" in done.output and "UNIDIRECTIONAL_SEQUENCE_LSTM" in done.output and needle in done.output


def test_cli_convert_writes_a_tflite_verified_on_the_interpreter(tmp_path):
    onnx.save(build_model(Config(cell="LSTM", direction="bidirectional", seed=81)), tmp_path / "m.onnx")
    done = _cli("convert", tmp_path / "m.onnx", tmp_path / "out.tflite", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["format"] == "litert" and result["verification"]["passed"]
    assert not any("gatepack's executor" in note for note in result["verification"]["notes"])


PRODUCED = ROOT / "fixtures" / "producers" / "litert"


@pytest.mark.parametrize(
    "name", ["litert_keras2_lstm", "litert_keras2_lstm_initial_state", "litert_keras2_lstm_initial_state_clipped"]
)
def test_tf_keras_fused_lstms_read_into_onnx_give_keras_s_outputs(name, tmp_path):
    """TensorFlow's converter's fused LSTMs (docs/conventions.md §10) read, written as ONNX and run on onnxruntime
    on the fixtures' inputs give Keras's outputs. Their cell_clip 10 is read as a lossy note: where the initial
    cell state leaves ±10 (the clipped fixture) the ONNX layer follows Keras, and the interpreter (which clips)
    does not."""
    (layer,) = gp.load(PRODUCED / f"{name}.tflite").layers
    itf = layer.interface
    result = gp.convert(PRODUCED / f"{name}.tflite", tmp_path / "m.onnx", allow_lossy=True)
    assert (
        result.verification.passed
        and {"clip": "lossy"}.items() <= {f.feature: f.status.value for f in result.findings[layer.name]}.items()
    )
    truth = dict(np.load(PRODUCED / f"{name}.truth.npz"))
    feed = {itf.x: truth[itf.x]}
    for role in ("initial_h", "initial_c"):
        if getattr(itf, role):
            feed[getattr(itf, role)] = truth[getattr(itf, role)][:, None]  # [N, H] -> layout 1 [N, 1, H]
    y = gp.run(tmp_path / "m.onnx", feed)[itf.y][:, :, 0]
    np.testing.assert_allclose(y, truth[itf.y], atol=1e-5, rtol=1e-5)
    clipped = np.abs(y - truth[f"litert:{itf.y}"]).max()
    assert (clipped > 0.01) == name.endswith("clipped")


def test_the_record_and_the_writer_name_the_same_fused_activations():
    from gatepack.converters.formats.litert.common import FUSED, schema
    from gatepack.converters.formats.litert.registration import FUSED_ACTIVATIONS

    assert set(FUSED) == set(FUSED_ACTIVATIONS)
    assert all(hasattr(schema().ActivationFunctionType, value) for value in FUSED.values())
    assert not hasattr(schema().ActivationFunctionType, "SIGMOID")  # why a sigmoid RNN is elementary


def _bidirectional_file(cfg: Config, path, merge: bool) -> None:
    """A BIDIRECTIONAL_SEQUENCE_LSTM / _RNN op holding ``cfg``'s weights, written with the official schema by
    hand (time-major, fused TANH, zero state variables; per-gate tensors and one bias per gate Wb + Rb)."""
    from gatepack.converters.formats.litert.common import Graph, schema

    w = weights(cfg)
    b = w.get("B", np.zeros((2, 2 * cfg.G * cfg.H), np.float32))
    g, h = Graph(schema()), cfg.H
    x = g.tensor("X", [cfg.S, cfg.N, cfg.I])
    g.graph.inputs = [x]
    lstm = cfg.cell == "LSTM"
    inputs = [-1] * (48 if lstm else 12)
    inputs[0] = x
    for d in range(2):
        bias = b[d, : cfg.G * h] + b[d, cfg.G * h :]
        if lstm:
            blocks = dict(zip("iofc", range(4)))
            for k, gate in enumerate("ifco"):
                rows = slice(blocks[gate] * h, (blocks[gate] + 1) * h)
                inputs[1 + 17 * d + k] = g.const(f"w{d}{gate}", w["W"][d, rows])
                inputs[5 + 17 * d + k] = g.const(f"r{d}{gate}", w["R"][d, rows])
                inputs[12 + 17 * d + k] = g.const(f"b{d}{gate}", bias[rows])
            inputs[35 + 2 * d] = g.tensor(f"h{d}", [cfg.N, h], variable=True)
            inputs[36 + 2 * d] = g.tensor(f"c{d}", [cfg.N, h], variable=True)
        else:
            inputs[1 + 4 * d : 5 + 4 * d] = [g.const(f"w{d}", w["W"][d]), g.const(f"r{d}", w["R"][d])] + [
                g.const(f"b{d}", bias),
                g.tensor(f"h{d}", [cfg.N, h], variable=True),
            ]
    outputs = (
        [g.tensor("Y", [cfg.S, cfg.N, 2 * h])] if merge else [g.tensor(f"Y{d}", [cfg.S, cfg.N, h]) for d in (0, 1)]
    )
    kind = "BidirectionalSequenceLSTMOptions" if lstm else "BidirectionalSequenceRNNOptions"
    options = g.options(
        kind, fusedActivationFunction=g.s.ActivationFunctionType.TANH, mergeOutputs=merge, timeMajor=True
    )
    g.op(f"BIDIRECTIONAL_SEQUENCE_{cfg.cell}", inputs, outputs, options)
    g.graph.outputs = outputs
    path.write_bytes(g.finish(None))


@pytest.mark.parametrize(
    ("cell", "merge"), [("LSTM", True), ("LSTM", False), ("RNN", True), ("RNN", False)], ids=lambda v: str(v)
)
def test_bidirectional_sequence_ops_read_as_bidirectional_layers(cell, merge, tmp_path):
    """A hand-written BIDIRECTIONAL_SEQUENCE_* op: on the interpreter it computes onnxruntime's bidirectional node
    of the same weights (its backward output aligned with input time); gatepack reads it as that layer, written
    as ONNX and verified against the op alone on the interpreter."""
    from ai_edge_litert.interpreter import Interpreter

    cfg = Config(cell=cell, direction="bidirectional", seed=91)
    _bidirectional_file(cfg, tmp_path / "bi.tflite", merge)
    feed = inputs(cfg)
    interpreter = Interpreter(model_path=str(tmp_path / "bi.tflite"))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], feed["X"])
    interpreter.invoke()
    found = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    y = found[0].reshape(cfg.S, cfg.N, 2, cfg.H).transpose(0, 2, 1, 3) if merge else np.stack(found, axis=1)
    np.testing.assert_allclose(y, ort_reference(cfg, feed)[0], atol=1e-5)
    (layer,) = gp.load(tmp_path / "bi.tflite").layers
    assert layer.direction.value == "bidirectional" and layer.provenance.op_type == f"BIDIRECTIONAL_SEQUENCE_{cell}"
    result = gp.convert(tmp_path / "bi.tflite", tmp_path / "bi.onnx")
    assert result.verification.passed, result.verification.to_text()
    (back,) = gp.load(tmp_path / "bi.onnx").layers
    for p, q in zip(read_layer_of(cfg).directions, back.directions):
        np.testing.assert_array_equal(q.W, p.W)
        np.testing.assert_array_equal(q.R, p.R)


def read_layer_of(cfg: Config):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        onnx.save(build_model(cfg), Path(scratch) / "m.onnx")
        return gp.load(Path(scratch) / "m.onnx").layers[0]


@pytest.mark.parametrize("described", [True, False], ids=["gatepack-s", "foreign"])
def test_damaged_files_are_input_or_runtime_errors(described, tmp_path):
    """Bytes of a file changed at random (and some truncated): reading and running them ends in gatepack's one-line
    errors (exit 3, or 6 where the interpreter refuses), never another exception."""
    from gatepack.converters.errors import GatepackError

    cfg = Config(cell="LSTM", peepholes=True, seed=101)
    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    gp.convert(tmp_path / "m.onnx", tmp_path / "m.tflite", batch_size=cfg.N)
    if not described:
        _without_description(tmp_path / "m.tflite", tmp_path / "m.tflite")
    original = (tmp_path / "m.tflite").read_bytes()
    rng = np.random.default_rng(7)
    for _ in range(150):
        damaged = bytearray(original)
        for offset in rng.integers(8, len(damaged), rng.integers(1, 4)):
            damaged[offset] = rng.integers(0, 256)
        if rng.random() < 0.1:
            damaged = damaged[: rng.integers(8, len(damaged))]
        (tmp_path / "d.tflite").write_bytes(bytes(damaged))
        try:
            model = gp.load(tmp_path / "d.tflite")
            feed = {layer.interface.x: np.zeros((4, cfg.N, layer.input_size), np.float32) for layer in model.layers}
            gp.run(tmp_path / "d.tflite", feed)
        except GatepackError as err:
            assert err.exit_code in (3, 6), err.one_line()

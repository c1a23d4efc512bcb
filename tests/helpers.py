"""Test helpers: build ONNX GRU/RNN/LSTM models with plain ``onnx.helper`` (independent of gatepack's
writer) and run them on onnxruntime, the oracle."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from gatepack.converters import registry

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
REALMODELS = FIXTURES / "realmodels"


def artifact_name(fmt: str, stem: str = "m") -> str:
    """A name for an artifact of format ``fmt``, from the registry: ``stem`` and the format's first suffix, or
    ``stem`` alone for a format named by no suffix (a directory told by its marker file)."""
    suffixes = registry.FORMATS[fmt].suffixes
    return stem + suffixes[0] if suffixes else stem


def fixes_sizes(fmt: str) -> bool:
    """Whether format ``fmt`` writes static sizes where the source's are symbolic (it takes ``batch_size``: DirectML's
    static tensors, LiteRT's [N, H] state variables), so a test gives it the sizes it will then feed."""
    return "batch_size" in registry.FORMATS[fmt].option_names


def shipped_writers() -> list[str]:
    """The formats gatepack writes with a package of its own in ``converters/formats``: what a file reviewed by
    hand (tests/expected) holds, without a format a test adds from outside (a folder elsewhere on the formats
    package's path, or a record naming another module)."""
    shipped = Path(registry.__file__).resolve().parent / "formats"

    def shipped_record(name: str) -> bool:
        module = sys.modules.get(f"{registry.FORMATS_PACKAGE}.{name}.registration")
        return module is not None and Path(str(module.__file__)).resolve().parents[1] == shipped

    return [name for name in registry.writers() if not registry.FORMATS[name].module and shipped_record(name)]


ACTIVATIONS = {
    # name: (takes alpha, takes beta, value range for alpha, for beta)
    "Relu": (False, False),
    "Tanh": (False, False),
    "Sigmoid": (False, False),
    "Affine": (True, True),
    "LeakyRelu": (True, False),
    "ThresholdedRelu": (True, False),
    "ScaledTanh": (True, True),
    "HardSigmoid": (True, True),
    "Elu": (True, False),
    "Softsign": (False, False),
    "Softplus": (False, False),
}


@dataclass
class Config:
    cell: str = "GRU"  # GRU, RNN or LSTM
    direction: str = "forward"
    lbr: int = 0
    activations: list[str] | None = None  # None: attribute absent (defaults)
    alphas: list[float] | None = None
    betas: list[float] | None = None
    clip: float | None = None
    seq_lens: str = "none"  # none, full, mixed, zero
    initial_h: bool = False
    bias: bool = True
    layout: int = 0
    S: int = 4
    N: int = 3
    I: int = 5
    H: int = 6
    dtype: str = "float32"
    seed: int = 0
    opset: int = 14
    extra: dict = field(default_factory=dict)
    peepholes: bool = False  # LSTM: a P input
    input_forget: int = 0  # LSTM
    initial_c: bool = False  # LSTM

    @property
    def D(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def G(self) -> int:
        return {"GRU": 3, "RNN": 1, "LSTM": 4}[self.cell]

    @property
    def outputs(self) -> list[str]:
        return ["Y", "Y_h", "Y_c"] if self.cell == "LSTM" else ["Y", "Y_h"]

    def label(self) -> str:
        acts = "-".join(self.activations) if self.activations else "default"
        return (
            f"{self.cell}-{self.direction}-lbr{self.lbr}-{acts}-clip{self.clip}-seq{self.seq_lens}"
            f"-h0{int(self.initial_h)}-b{int(self.bias)}-L{self.layout}-S{self.S}N{self.N}I{self.I}H{self.H}-{self.dtype}"
        ) + (f"-P{int(self.peepholes)}-if{self.input_forget}-c0{int(self.initial_c)}" if self.cell == "LSTM" else "")


def native_variant(cfg: Config) -> Config:
    """The configuration made representable by Apple's gru/rnn ops: activations among Sigmoid, Tanh,
    Relu (per slot, derived from the original), no clip, no sequence_lens."""
    acts = None if cfg.activations is None else [("Sigmoid", "Tanh", "Relu")[len(name) % 3] for name in cfg.activations]
    return replace(cfg, activations=acts, alphas=None, betas=None, clip=None, seq_lens="none")


def weights(cfg: Config) -> dict[str, np.ndarray]:
    # PyTorch's initialisation, U(-1/sqrt(H), 1/sqrt(H)): what trained models start from, and
    # it keeps unusual gate activations (Relu, Softplus as f) from diverging chaotically.
    rng = np.random.default_rng(cfg.seed)
    d, gh, k = cfg.D, cfg.G * cfg.H, 1 / np.sqrt(cfg.H)
    out = {
        "W": rng.uniform(-k, k, (d, gh, cfg.I)).astype(cfg.dtype),
        "R": rng.uniform(-k, k, (d, gh, cfg.H)).astype(cfg.dtype),
    }
    if cfg.bias:
        out["B"] = rng.uniform(-k, k, (d, 2 * gh)).astype(cfg.dtype)
    if cfg.peepholes:
        out["P"] = rng.uniform(-k, k, (d, 3 * cfg.H)).astype(cfg.dtype)
    return out


def inputs(cfg: Config, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Inputs in layout 0 (X [S,N,I], initial_h and initial_c [D,N,H])."""
    rng = np.random.default_rng(cfg.seed + 1000)
    feed = {"X": (rng.uniform(-1, 1, (cfg.S, cfg.N, cfg.I)) * scale).astype(cfg.dtype)}
    if cfg.seq_lens != "none":
        if cfg.seq_lens == "full":
            lens = np.full(cfg.N, cfg.S)
        elif cfg.seq_lens == "zero":
            lens = rng.integers(0, cfg.S + 1, cfg.N)
            lens[0] = 0
        else:
            lens = rng.integers(1, cfg.S + 1, cfg.N)
            lens[-1] = cfg.S
        feed["sequence_lens"] = lens.astype(np.int32)
    if cfg.initial_h:
        feed["initial_h"] = rng.uniform(-1, 1, (cfg.D, cfg.N, cfg.H)).astype(cfg.dtype)
    if cfg.initial_c:
        feed["initial_c"] = rng.uniform(-1, 1, (cfg.D, cfg.N, cfg.H)).astype(cfg.dtype)
    return feed


def build_model(
    cfg: Config, layout: int | None = None, dtype: str | None = None, opset: int | None = None
) -> onnx.ModelProto:
    """An ONNX model with one GRU/RNN/LSTM node; W, R, B (P) are initializers, the rest graph inputs."""
    layout = cfg.layout if layout is None else layout
    dtype = dtype or cfg.dtype
    opset = opset or cfg.opset
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = {k: v.astype(dtype) for k, v in weights(cfg).items()}
    node_inputs = [
        "X",
        "W",
        "R",
        "B" if cfg.bias else "",
        "sequence_lens" if cfg.seq_lens != "none" else "",
        "initial_h" if cfg.initial_h else "",
        "initial_c" if cfg.initial_c else "",
        "P" if cfg.peepholes else "",
    ]
    while not node_inputs[-1]:
        node_inputs.pop()
    attrs: dict = {"hidden_size": cfg.H, "direction": cfg.direction}
    if cfg.cell == "GRU" and (cfg.lbr or opset >= 3):
        attrs["linear_before_reset"] = cfg.lbr
    if cfg.cell == "LSTM" and cfg.input_forget:
        attrs["input_forget"] = cfg.input_forget
    if cfg.activations is not None:
        attrs["activations"] = cfg.activations
    if cfg.alphas:
        attrs["activation_alpha"] = cfg.alphas
    if cfg.betas:
        attrs["activation_beta"] = cfg.betas
    if cfg.clip is not None:
        attrs["clip"] = cfg.clip
    if layout:
        attrs["layout"] = 1
    attrs.update(cfg.extra)
    node = helper.make_node(cfg.cell, node_inputs, cfg.outputs, name="rec", **attrs)
    s, n = "S", "N"
    x_shape = [n, s, cfg.I] if layout else [s, n, cfg.I]
    h_shape = [n, cfg.D, cfg.H] if layout else [cfg.D, n, cfg.H]
    graph_inputs = [helper.make_tensor_value_info("X", elem, x_shape)]
    if cfg.seq_lens != "none":
        graph_inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, [n]))
    for state in ("initial_h", "initial_c"):
        if getattr(cfg, state):
            graph_inputs.append(helper.make_tensor_value_info(state, elem, h_shape))
    outputs = [helper.make_tensor_value_info(name, elem, None) for name in cfg.outputs]
    graph = helper.make_graph([node], "g", graph_inputs, outputs, [numpy_helper.from_array(v, k) for k, v in w.items()])
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(
        graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets) if opset >= 7 else 3
    )


def ort_run(model: onnx.ModelProto | str | Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # one run: no idle spinning
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return session.run(None, {k: v for k, v in feed.items() if k in names})


def ort_reference(cfg: Config, feed0: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(Y, Y_h) (LSTM: and Y_c) from onnxruntime in layout 0. onnxruntime rejects layout 1 and has no float64
    kernel (nor a float16 RNN), so those run as the layout-0 / float32 model of the same weights
    (float16 -> float32 is exact)."""
    dtype = "float32"
    opset = max(cfg.opset, 7)  # onnxruntime has no kernel for opset 1/3 recurrent ops
    model = build_model(cfg, layout=0, dtype=dtype, opset=opset)
    feed = {k: (v.astype(dtype) if v.dtype.kind == "f" else v) for k, v in feed0.items()}
    return tuple(ort_run(model, feed))


def to_layout(cfg: Config, feed0: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Layout-0 inputs -> the config's layout."""
    if not cfg.layout:
        return dict(feed0)
    feed = dict(feed0)
    feed["X"] = np.ascontiguousarray(feed0["X"].transpose(1, 0, 2))
    for state in ("initial_h", "initial_c"):
        if state in feed:
            feed[state] = np.ascontiguousarray(feed0[state].transpose(1, 0, 2))
    return feed


def outputs_to_layout0(cfg: Config, y: np.ndarray, *finals: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y and the final states (Y_h; LSTM: Y_h, Y_c) in the config's layout -> layout 0."""
    if not cfg.layout:
        return (y, *finals)
    return (y.transpose(1, 2, 0, 3), *(f.transpose(1, 0, 2) for f in finals))


def random_activation_params(rng: random.Random, names: list[str]) -> tuple[list[float], list[float]]:
    alphas, betas = [], []
    for name in names:
        takes_alpha, takes_beta = ACTIVATIONS[name]
        if takes_alpha:
            alphas.append(
                round(rng.uniform(0.1, 1.5), 3) if name != "ThresholdedRelu" else round(rng.uniform(-0.5, 0.5), 3)
            )
        if takes_beta:
            betas.append(round(rng.uniform(-0.5, 1.2), 3))
    return alphas, betas


def matrix(count: int = 360, seed: int = 2026) -> list[Config]:
    """A deterministic matrix of configurations covering every attribute and their combinations.

    Every activation appears in every slot of every cell and direction; parameter stacks are
    sometimes truncated so that defaults are resolved; sequence lengths none/full/mixed/zero;
    layout, bias, initial_h, clip and edge sizes (H=1, I=1, S=1, N=1) all vary independently.
    """
    rng = random.Random(seed)
    names = list(ACTIVATIONS)
    sizes = [(4, 3, 5, 6), (1, 1, 1, 1), (3, 2, 1, 4), (5, 4, 3, 1), (1, 3, 4, 2), (6, 1, 2, 3), (7, 5, 8, 8)]
    configs = []
    for k in range(count):
        cell = "GRU" if k % 2 == 0 else "RNN"
        cfg = Config(cell=cell, direction=rng.choice(["forward", "reverse", "bidirectional"]), seed=k)
        cfg.lbr = rng.choice([0, 1]) if cell == "GRU" else 0
        per = 2 if cell == "GRU" else 1
        mode = rng.randrange(5)
        if mode == 0:
            cfg.activations = None  # attribute absent: defaults
        else:
            # The first slot cycles through every activation; the others are random.
            chosen = [names[(k // 2) % len(names)]] + [rng.choice(names) for _ in range(per * cfg.D - 1)]
            if mode == 1 and cfg.D == 2:
                chosen = chosen[:per] * 2  # same activations in both directions
            cfg.activations = chosen
            alphas, betas = random_activation_params(rng, chosen)
            if mode == 3:  # leave the tail of each stack to the defaults
                alphas, betas = alphas[: rng.randint(0, len(alphas))], betas[: rng.randint(0, len(betas))]
            cfg.alphas, cfg.betas = alphas or None, betas or None
        clip_choice = rng.randrange(4)
        if clip_choice == 1:
            cfg.clip = round(rng.uniform(0.2, 2.0), 2)
        elif clip_choice == 2 and cell == "RNN":
            cfg.clip = rng.choice([0.0, -1.0])
        cfg.seq_lens = rng.choice(["none", "full", "mixed", "zero"])
        cfg.initial_h = rng.random() < 0.5
        cfg.bias = rng.random() < 0.8
        cfg.layout = 1 if rng.random() < 0.3 else 0
        cfg.S, cfg.N, cfg.I, cfg.H = rng.choice(sizes)
        cfg.dtype = rng.choices(["float32", "float64", "float16"], weights=[8, 1, 1])[0]
        configs.append(cfg)
    return configs


def lstm_matrix(count: int = 320, seed: int = 2027) -> list[Config]:
    """A deterministic matrix of LSTM configurations: direction, peepholes, input_forget, clip,
    sequence_lens none/full/mixed/zero, initial_h/initial_c, layout, every activation in the first
    slot with alpha/beta per direction (stacks sometimes truncated to the defaults), fp16/32/64 and
    edge sizes, each varying independently (float16 with bounded activations only)."""
    rng = random.Random(seed)
    names = list(ACTIVATIONS)
    sizes = [(4, 3, 5, 6), (1, 1, 1, 1), (3, 2, 1, 4), (5, 4, 3, 1), (1, 3, 4, 2), (6, 1, 2, 3), (7, 5, 8, 8)]
    configs = []
    for k in range(count):
        cfg = Config(cell="LSTM", direction=rng.choice(["forward", "reverse", "bidirectional"]), seed=k)
        cfg.dtype = rng.choices(["float32", "float64", "float16"], weights=[8, 1, 1])[0]
        # float16 configurations use bounded activations: an unbounded cell leaves float16's range in a
        # few steps, and then every runtime's result is inf (no oracle for it).
        pool = ["Tanh", "Sigmoid", "HardSigmoid", "ScaledTanh", "Softsign"] if cfg.dtype == "float16" else names
        mode = rng.randrange(5)
        if mode:
            chosen = [pool[k % len(pool)]] + [rng.choice(pool) for _ in range(3 * cfg.D - 1)]
            if mode == 1 and cfg.D == 2:
                chosen = chosen[:3] * 2
            cfg.activations = chosen
            alphas, betas = random_activation_params(rng, chosen)
            if mode == 3:
                alphas, betas = alphas[: rng.randint(0, len(alphas))], betas[: rng.randint(0, len(betas))]
            cfg.alphas, cfg.betas = alphas or None, betas or None
        cfg.peepholes = rng.random() < 0.5
        cfg.input_forget = int(rng.random() < 0.3)
        cfg.clip = round(rng.uniform(0.2, 2.0), 2) if rng.random() < 0.3 else None
        cfg.seq_lens = rng.choice(["none", "full", "mixed", "zero"])
        cfg.initial_h = rng.random() < 0.5
        cfg.initial_c = rng.random() < 0.5
        cfg.bias = rng.random() < 0.8
        cfg.layout = 1 if rng.random() < 0.3 else 0
        cfg.S, cfg.N, cfg.I, cfg.H = rng.choice(sizes)
        configs.append(cfg)
    return configs


def peephole_cases() -> list[Config]:
    """The float32 LSTM configurations of ``lstm_matrix()`` with peepholes (round trips take the first few)."""
    return [c for c in lstm_matrix() if c.peepholes and c.dtype == "float32"]


def assert_matches_onnxruntime(
    cfg: Config, feed0: dict[str, np.ndarray], outputs: dict[str, np.ndarray], atol: float, rtol: float
) -> None:
    """``outputs`` (Y, Y_h in the config's layout) agree with onnxruntime on the layer-0 inputs
    ``feed0``; entries where onnxruntime overflowed (its naive Softplus) are skipped, if few."""
    y, y_h = outputs_to_layout0(cfg, outputs["Y"], outputs["Y_h"])
    for ours, ref in zip((y, y_h), ort_reference(cfg, feed0)):
        finite = np.isfinite(ref)
        assert finite.mean() > 0.5
        np.testing.assert_allclose(ours.astype(np.float64)[finite], ref[finite], atol=atol, rtol=rtol)


# Within what OpenVINO CPU (fp32 inference precision) must reproduce onnxruntime; fp16 IRs compute in fp16.
OPENVINO_TOLERANCE = {"float32": (1e-5, 1e-4), "float64": (1e-5, 1e-4), "float16": (2e-3, 2e-3)}


def static_model(cfg: Config) -> onnx.ModelProto:
    """The config's model with every input dimension fixed (S, N known)."""
    model = build_model(cfg)
    sizes = {"S": cfg.S, "N": cfg.N}
    for value in model.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in sizes:
                dim.dim_value = sizes[dim.dim_param]
    return model


def static_case(cfg: Config) -> bool:
    """Half of the sequence_lens cases get static shapes (OpenVINO's native op is exact only there)."""
    return cfg.seq_lens != "none" and cfg.seed % 4 < 2


def assert_round_trip(cfg: Config, source: Path, back: Path, folded: bool) -> None:
    """ONNX -> a format -> ONNX: W and R bit-exact; biases bit-exact, or summed exactly into Wb
    (Rb = 0) where the format folds them; for layout 0, onnxruntime gives both models' outputs equal."""
    a, b = read_layer(source), read_layer(back)
    for p, q in zip(a.directions, b.directions):
        np.testing.assert_array_equal(q.W, p.W)
        np.testing.assert_array_equal(q.R, p.R)
        if folded:
            np.testing.assert_array_equal(q.Wb, p.Wb + p.Rb)
            assert not q.Rb.any()
        else:
            np.testing.assert_array_equal(q.Wb, p.Wb)
            np.testing.assert_array_equal(q.Rb, p.Rb)
    if not cfg.layout:
        feed = inputs(cfg)
        names = {i.name for i in onnx.load(str(back)).graph.input}
        for x, y in zip(ort_run(back, {k: v for k, v in feed.items() if k in names}), ort_run(source, feed)):
            np.testing.assert_allclose(x, y, atol=1e-6, rtol=1e-5)


def assert_round_trip_keeps_every_weight(cfg: Config, tmp_path: Path, target: str, artifact: str) -> None:
    """ONNX -> ``target`` -> ONNX, each step verified: W, R, Wb, Rb and P bit-exact, clip and
    input_forget kept (for targets that keep the biases apart)."""
    import gatepack as gp

    source, middle, back = tmp_path / "m.onnx", tmp_path / artifact, tmp_path / "back.onnx"
    onnx.save(build_model(cfg), source)
    options = {"seq_length": cfg.S, "batch_size": cfg.N} if target == "directml" else {}
    assert gp.convert(source, middle, to=target, **options).verification.passed
    assert gp.convert(middle, back, to="onnx").verification.passed
    (a,), (b,) = gp.load(source).layers, gp.load(back).layers
    assert (b.clip, b.input_forget, b.has_peepholes) == (a.clip, a.input_forget, a.has_peepholes)
    for p, q in zip(a.directions, b.directions):
        for key in ("W", "R", "Wb", "Rb", "P"):
            np.testing.assert_array_equal(getattr(q, key), getattr(p, key))


def assert_refused_when_forced(
    cfg: Config, tmp_path: Path, target: str, artifact: str, reason: str, **options: object
) -> None:
    """``strategy="native"`` to ``target`` (with write ``options``) is refused naming ``reason``; nothing is written."""
    import pytest

    import gatepack as gp

    onnx.save(build_model(cfg), tmp_path / "m.onnx")
    with pytest.raises(gp.RefusedError, match=reason):
        gp.convert(tmp_path / "m.onnx", tmp_path / artifact, to=target, strategy="native", **options)
    assert not (tmp_path / artifact).exists()


def read_layer(path: Path):
    import gatepack as gp

    return gp.load(path).layers[0]


def stacked_model(path: Path, layers: int, hidden: int, cell: str = "GRU") -> int:
    """A stack of ``layers`` bidirectional GRUs (linear_before_reset = 1) or LSTMs (I = H = ``hidden``;
    each next layer takes the previous Y reshaped to [S, N, 2H]) with random fp32 weights, saved with
    external data; returns the weight bytes."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x, width = "X", hidden
    scale = 1 / np.sqrt(hidden)
    gates = {"GRU": 3, "LSTM": 4}[cell]
    for k in range(layers):
        w = rng.standard_normal((2, gates * hidden, width), dtype=np.float32) * np.float32(scale)
        r = rng.standard_normal((2, gates * hidden, hidden), dtype=np.float32) * np.float32(scale)
        b = rng.standard_normal((2, 2 * gates * hidden), dtype=np.float32) * np.float32(scale)
        inits += [
            numpy_helper.from_array(w, f"W{k}"),
            numpy_helper.from_array(r, f"R{k}"),
            numpy_helper.from_array(b, f"B{k}"),
        ]
        y, y_h = f"Y{k}", f"Y_h{k}" if k < layers - 1 else "Y_h"
        nodes.append(
            helper.make_node(
                cell,
                [x, f"W{k}", f"R{k}", f"B{k}"],
                [y, y_h],
                name=f"{cell.lower()}{k}",
                hidden_size=hidden,
                direction="bidirectional",
                **({"linear_before_reset": 1} if cell == "GRU" else {}),
            )
        )
        if k < layers - 1:
            nodes.append(helper.make_node("Transpose", [y], [f"T{k}"], perm=[0, 2, 1, 3]))
            nodes.append(helper.make_node("Reshape", [f"T{k}", "shape"], [f"X{k + 1}"]))
            x = f"X{k + 1}"
        width = 2 * hidden
    inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape"))
    graph = helper.make_graph(
        nodes,
        f"stacked_{cell.lower()}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["S", "N", hidden])],
        [
            helper.make_tensor_value_info(f"Y{layers - 1}", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    weight_bytes = sum(int(np.prod(t.dims)) * 4 for t in inits)
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=1024,
    )
    return weight_bytes


def assert_not_lifted(proto: onnx.ModelProto, tmp_path: Path, *words: str) -> None:
    """``proto`` saved and converted to ONNX is refused with NoRecurrentLayerError on one line holding every
    one of ``words``, and nothing is written."""
    import pytest

    import gatepack as gp

    source, out = tmp_path / "refused.onnx", tmp_path / "out.onnx"
    onnx.save(proto, str(source))
    with pytest.raises(gp.NoRecurrentLayerError) as err:
        gp.convert(source, out, to="onnx")
    line = err.value.one_line()
    assert all(word in line for word in words) and "\n" not in line, line
    assert not out.exists()


# ------------------------------------------------------------------------------------------- a browser


def chromium() -> str | None:
    """A headless-capable Chromium on this machine (None: the browser tests skip, saying why)."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def run_browser(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with ``args``, its profile in ``tmp_path`` (nothing in the user's home)."""
    browser = chromium()
    assert browser is not None, "the caller skips without a browser"
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def corrupt_openvino_writer(monkeypatch, corrupt) -> None:
    """Make the OpenVINO writer write the first layer with ``corrupt`` applied to its first direction (its
    quantized records dropped, floats as they are): a deliberate error the verification must catch."""
    original = registry.writer

    def corrupted_writer(name: str):
        info, implementation = original(name)
        if name != "openvino":
            return info, implementation
        write = implementation.write

        def wrong(model, path, **options):
            layer = model.layers[0]
            floats = [replace(d, Wq=None, Rq=None) for d in layer.directions]
            bad = replace(layer, directions=(corrupt(floats[0]), *floats[1:]))
            return write(replace(model, layers=[bad, *model.layers[1:]]), path, **options)

        return info, replace(implementation, write=wrong)

    monkeypatch.setattr(registry, "writer", corrupted_writer)

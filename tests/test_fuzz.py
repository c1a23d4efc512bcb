"""Property-based fuzzing (hypothesis) of what gatepack reads from files it did not write: the JSON
manifests of DirectML, BNNS and Core ML artifacts, and ONNX GRU nodes. Whatever the damage, reading
(and running) either succeeds or raises a gatepack error with exit code 3 - never another exception,
never exit 1. Bounded so the suite stays fast."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, helper

import gatepack as gp
from gatepack.converters.errors import GatepackError

SOURCE = FIXTURES / "gru_lbr1_bidirectional.onnx"
FUZZ = settings(
    max_examples=int(__import__("os").environ.get("GATEPACK_FUZZ_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not __import__("os").environ.get("GATEPACK_FUZZ_EXAMPLES"),
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(node, prefix=()):
    """Every path to a value in a JSON document."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


def _replace(document, path, value):
    if not path:
        return value
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return document


def _must_be_clean(action) -> None:
    try:
        action()
    except GatepackError as err:
        assert err.exit_code == 3, f"exit {err.exit_code}: {err.one_line()}"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    out = {}
    for fmt, name in (("directml", "m.dml"), ("bnns", "m.bnns"), ("coreml", "m.mlpackage")):
        out[fmt] = root / name
        gp.convert(SOURCE, out[fmt], to=fmt, verify=False)
    return out


def _runs(artifact: Path, fmt: str) -> None:
    model = gp.load(artifact)
    if fmt == "directml":
        return  # its inputs are its own static tensors: reading them is the part under test
    rng = np.random.default_rng(0)
    feed = {}
    for layer in model.layers:
        itf = layer.interface
        s, n = 4, 2
        x = rng.uniform(-1, 1, (s, n, layer.input_size)).astype(np.float32)
        feed[itf.x] = x.transpose(1, 0, 2) if itf.layout == 1 else x
        if itf.initial_h:
            h0 = np.zeros((layer.num_directions, n, layer.hidden_size), np.float32)
            feed[itf.initial_h] = h0.transpose(1, 0, 2) if itf.layout == 1 else h0
    gp.run(artifact, feed, engine="numpy")


@pytest.mark.parametrize(
    "fmt, manifest",
    [("directml", "model.json"), ("directml", "gatepack.json"), ("bnns", "bnns.json"), ("coreml", "Manifest.json")],
)
def test_damaged_manifests_are_input_errors(artifacts, tmp_path_factory, fmt, manifest):
    original = json.loads((artifacts[fmt] / manifest).read_text())
    paths = list(_paths(original))
    work = tmp_path_factory.mktemp("case") / artifacts[fmt].name
    shutil.copytree(artifacts[fmt], work)

    @FUZZ
    @given(index=st.integers(0, len(paths) - 1), value=json_values)
    def case(index, value):
        document = _replace(json.loads(json.dumps(original)), paths[index], value)
        (work / manifest).write_text(json.dumps(document))
        _must_be_clean(lambda: _runs(work, fmt))

    case()


ATTRIBUTE_NAMES = [
    "hidden_size",
    "direction",
    "activations",
    "activation_alpha",
    "activation_beta",
    "clip",
    "linear_before_reset",
    "layout",
    "other",
]
attribute_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32),
    st.text(max_size=12),
    st.lists(st.integers(-5, 5), max_size=4),
    st.lists(st.floats(width=32), max_size=4),
    st.lists(st.sampled_from(["Sigmoid", "Tanh", "Relu", "HardSigmoid", "bogus", ""]), max_size=5),
)


def _base() -> onnx.ModelProto:
    return onnx.load(str(SOURCE))


@FUZZ
@given(
    changes=st.lists(st.tuples(st.sampled_from(ATTRIBUTE_NAMES), attribute_values), min_size=1, max_size=3),
    drop_inputs=st.integers(0, 3),
    opset=st.integers(-1, 40),
)
def test_damaged_onnx_nodes_are_input_errors(tmp_path_factory, changes, drop_inputs, opset):
    model = _base()
    node = next(n for n in model.graph.node if n.op_type == "GRU")
    for name, value in changes:
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept)
        try:
            node.attribute.append(helper.make_attribute(name, value))
        except (ValueError, TypeError):  # an empty list has no type
            node.attribute.append(AttributeProto(name=name, type=AttributeProto.INTS))
    if drop_inputs:
        names = list(node.input)
        names[min(drop_inputs, len(names) - 1)] = "undefined_tensor"
        del node.input[:]
        node.input.extend(names)
    model.opset_import[0].version = opset
    path = tmp_path_factory.mktemp("onnx") / "m.onnx"
    path.write_bytes(model.SerializeToString())
    _must_be_clean(lambda: gp.load(path))


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, 2000),
)
def test_corrupted_onnx_bytes_are_input_errors(tmp_path_factory, flips, cut):
    data = bytearray(SOURCE.read_bytes())
    for position, byte in flips:
        data[position % len(data)] = byte
    path = tmp_path_factory.mktemp("bytes") / "m.onnx"
    path.write_bytes(bytes(data[: len(data) - cut % len(data)]))
    _must_be_clean(lambda: gp.load(path))

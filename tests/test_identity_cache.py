"""The whole-model caches (the shared verdict cache, Core ML's kept program) belong to the very layers they were
asked for, never to their ``id()``: CPython gives a freed object's address to a later one, and a cache keyed by ids
then hands one model's verdict to another. An entry dies with its layers, and the caches are bounded."""

from __future__ import annotations

import builtins
import gc
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gatepack as gp
from gatepack.converters import identity_cache
from gatepack.converters.findings import Status
from gatepack.converters.identity_cache import IdentityCache
from gatepack.converters.operators import whole as shared


def _whole_gru(path) -> None:
    """Relu -> GRU -> Tanh: a small whole model LiteRT and Core ML translate."""
    rng = np.random.default_rng(5)
    inits = [
        helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(int(np.prod(shape))))
        for name, shape in (("W", [1, 12, 3]), ("R", [1, 12, 4]), ("B", [1, 24]))
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node("GRU", ["xr", "W", "R", "B"], ["y", "y_h"], hidden_size=4, name="cell"),
        helper.make_node("Tanh", ["y"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "y_h")],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)


def _litert_finding(model):
    from gatepack.converters.formats.litert.whole import whole_model_finding

    return whole_model_finding(model)


def _refused_twin(model):
    """``model`` with a layer whose X is computed nowhere: the same file, a translation that refuses it."""
    return replace(model, layers=[replace(la, interface=replace(la.interface, x="nowhere")) for la in model.layers])


def _at_the_same_ids(monkeypatch, first, other) -> None:
    """``first`` freed and ``other``'s layers where its layers were: CPython gives a freed object's address to a
    later one (``id()`` made to say so, for every caller)."""
    real_id = builtins.id
    reused = {real_id(new): real_id(old) for new, old in zip(other.layers, first.layers)}
    monkeypatch.setattr(builtins, "id", lambda obj: reused.get(real_id(obj), real_id(obj)))


def test_a_litert_verdict_is_never_found_for_other_layers_at_freed_ones_ids(tmp_path, monkeypatch):
    src = tmp_path / "m.onnx"
    _whole_gru(src)
    first = gp.load(src)
    assert _litert_finding(first).status is Status.EXACT
    other = _refused_twin(first)
    _at_the_same_ids(monkeypatch, first, other)
    del first
    gc.collect()
    found = _litert_finding(other)
    monkeypatch.undo()
    assert found.status is Status.UNSUPPORTED and "'nowhere' is not computed" in found.detail


def test_a_kept_core_ml_program_is_never_taken_for_other_layers_at_the_same_ids(tmp_path, monkeypatch):
    pytest.importorskip("coremltools")
    from gatepack.converters.formats.coreml import whole as coreml_whole

    src = tmp_path / "m.onnx"
    _whole_gru(src)
    first = gp.load(src)
    assert coreml_whole.whole_model_finding(first).status is Status.EXACT  # its program kept for build_whole
    target = coreml_whole.lowest_target(first.layers)
    other = _refused_twin(first)
    _at_the_same_ids(monkeypatch, first, other)
    with pytest.raises(gp.RefusedError, match="'nowhere' is not computed"):
        coreml_whole.build_whole(other, target=target)
    monkeypatch.undo()
    assert len(coreml_whole._KEPT) == 0  # taken or dropped at the first build: one kept at most


def test_a_litert_verdict_dies_with_its_layers(tmp_path):
    src = tmp_path / "m.onnx"
    _whole_gru(src)
    shared._VERDICTS.clear()
    model = gp.load(src)
    assert _litert_finding(model).status is Status.EXACT
    assert len(shared._VERDICTS) == 1
    del model
    gc.collect()
    assert len(shared._VERDICTS) == 0


class _Thing:
    """An object held weakly (a stand-in for a layer)."""


def test_the_cache_tells_objects_apart_even_when_their_ids_collide(monkeypatch):
    monkeypatch.setattr(identity_cache, "id", lambda obj: 7, raising=False)
    cache: IdentityCache[str] = IdentityCache(size=4)
    a, b = _Thing(), _Thing()
    cache.put("file", [a], "a's verdict")
    assert cache.get("file", [a]) == "a's verdict"
    assert cache.get("file", [b]) is None
    cache.put("file", [b], "b's verdict")
    assert cache.get("file", [b]) == "b's verdict" and cache.get("file", [a]) is None


def test_the_cache_keeps_no_object_alive_and_at_most_its_size():
    cache: IdentityCache[int] = IdentityCache(size=3)
    things = [_Thing() for _ in range(5)]
    for k, thing in enumerate(things):
        cache.put("file", [thing], k)
    del thing
    assert len(cache) == 3 and cache.get("file", [things[0]]) is None and cache.get("file", [things[4]]) == 4
    del things[2:]
    gc.collect()
    assert len(cache) == 0
    kept = _Thing()
    cache.put("file", [kept], 1)
    assert cache.pop("file", [kept]) == 1 and len(cache) == 0
    cache.put(("file", "no layers"), (), 2)
    assert cache.get(("file", "no layers")) == 2

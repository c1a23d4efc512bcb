"""Checking one ONNX operator's MIL translation against onnxruntime: the operator alone in a model, run on
onnxruntime (the oracle) and, translated and saved as an ML Program package, on gatepack's MIL interpreter
reading the package from disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("coremltools")

from gatepack.converters.errors import RefusedError  # noqa: E402
from gatepack.converters.formats.coreml.running import run_numpy  # noqa: E402
from gatepack.converters.formats.coreml.saving import save_package  # noqa: E402
from gatepack.converters.formats.coreml.whole import translate_onnx  # noqa: E402


def operator_model(
    op_type: str,
    inputs: dict[str, np.ndarray],
    attributes: dict | None = None,
    *,
    constants: dict[str, np.ndarray] | None = None,
    order: list[str] | None = None,
    outputs: int = 1,
    opset: int = 17,
    before: list | None = None,
):
    """One ``op_type`` node reading ``inputs`` (graph inputs) and ``constants`` (initializers), in ``order``
    (default: inputs then constants; '' for an absent optional input); ``before``: nodes computing some of what
    it reads (a bool, which no Core ML input carries)."""
    constants = constants or {}
    order = order if order is not None else [*inputs, *constants]
    node = helper.make_node(op_type, order, [f"out{k}" for k in range(outputs)], **(attributes or {}))
    graph = helper.make_graph(
        [*(before or []), node],
        op_type.lower(),
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs.items()
        ],
        [helper.make_tensor_value_info(f"out{k}", TensorProto.UNDEFINED, None) for k in range(outputs)],
        [numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # the outputs' types, for onnxruntime
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for out in model.graph.output:
        if out.name in known and known[out.name].type.tensor_type.elem_type:
            out.type.CopyFrom(known[out.name].type)
    return model


def translated_outputs(proto, inputs: dict[str, np.ndarray], tmp_path: Path, target: str = "iOS18") -> list:
    """``proto`` translated, saved as a package under ``tmp_path`` and run on gatepack's MIL interpreter."""
    program, described = translate_onnx(proto, tmp_path, target=target)
    path = tmp_path / "op.mlpackage"
    save_package(program, described, path, target)
    got = run_numpy(path, inputs)
    return [got[o.name] for o in proto.graph.output]


def onnxruntime_outputs(proto, inputs: dict[str, np.ndarray]) -> list:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def check_operator(
    tmp_path: Path,
    op_type: str,
    inputs: dict[str, np.ndarray],
    attributes: dict | None = None,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    **model_options,
) -> None:
    """``op_type`` on gatepack's translation agrees with onnxruntime: same shapes, values within tolerance
    (integers exactly; int64 results come back as int32, Core ML's integer type)."""
    proto = operator_model(op_type, inputs, attributes, **model_options)
    expected = onnxruntime_outputs(proto, inputs)
    got = translated_outputs(proto, inputs, tmp_path)
    for want, have in zip(expected, got):
        assert np.shape(have) == np.shape(want), (np.shape(have), np.shape(want))
        if np.issubdtype(np.asarray(want).dtype, np.floating):
            np.testing.assert_allclose(np.asarray(have, np.float64), want, atol=atol, rtol=rtol)
        else:
            np.testing.assert_array_equal(np.asarray(have).astype(np.asarray(want).dtype), want)


def check_refused(
    tmp_path: Path, op_type: str, inputs: dict[str, np.ndarray], attributes: dict | None = None, *, match: str, **kw
) -> None:
    """Translating ``op_type`` so is refused, naming the operator and why (``match``, a regex)."""
    proto = operator_model(op_type, inputs, attributes, **kw)
    with pytest.raises(RefusedError, match=match):
        translate_onnx(proto, tmp_path)

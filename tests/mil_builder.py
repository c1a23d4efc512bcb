"""A MIL program built with coremltools' own builder, saved as an ML Program package and run on gatepack's MIL
interpreter reading it from disk; and one ONNX operator run on onnxruntime. The proof tests (``coreml_proof``)
compare the two, or the interpreter with a NumPy reference written from Apple's documentation of the op."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np


def run_mil(
    tmp_path: Path, build: Callable, inputs: dict[str, np.ndarray], target: str = "iOS18", states: dict | None = None
) -> list:
    """``build(**placeholders)`` (returning a var or a list of vars) as a MIL program with one input per entry of
    ``inputs`` (their shapes and dtypes; ``states``: those that are states, with their MIL dtype), converted to
    ``tmp_path``/p.mlpackage for ``target`` without any optimisation pass, and run on the interpreter: the outputs
    in ``build``'s order."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program, types

    from gatepack.converters.formats.coreml.common import _heap_frozen
    from gatepack.converters.formats.coreml.registration import coremltools

    ct = coremltools()
    states = states or {}
    placeholders = {
        name: mb.state_tensor_placeholder(shape=value.shape, dtype=states[name])
        if name in states
        else mb.placeholder(shape=value.shape, dtype=types.numpy_type_to_builtin_type(value.dtype))
        for name, value in inputs.items()
    }
    with Function(placeholders, opset_version=getattr(ct.target, target)) as function:
        out = build(**function.inputs)
        function.set_outputs(list(out) if isinstance(out, (list, tuple)) else [out])
    built = Program()
    built.add_function("main", function)
    path = tmp_path / "p.mlpackage"
    with _heap_frozen():
        model = ct.convert(
            built,
            convert_to="mlprogram",
            minimum_deployment_target=getattr(ct.target, target),
            compute_precision=ct.precision.FLOAT32,
            pass_pipeline=ct.PassPipeline.EMPTY,
            skip_model_load=True,
        )
    model.save(str(path))
    from gatepack.converters.formats.coreml.running import run_numpy

    produced = run_numpy(path, inputs)
    outputs = built.functions["main"].outputs
    return [produced[var.name] for var in outputs]


def run_onnx(op_type: str, inputs: dict[str, np.ndarray], attributes: dict | None = None, **options) -> list:
    """One ONNX ``op_type`` node reading ``inputs`` (graph inputs; ``options`` as ``onnx_to_mil.operator_model``'s:
    constants, order, outputs, opset) run on onnxruntime."""
    from onnx_to_mil import onnxruntime_outputs, operator_model

    return onnxruntime_outputs(operator_model(op_type, inputs, attributes, **options), inputs)

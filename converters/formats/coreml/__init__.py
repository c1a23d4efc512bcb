"""Core ML ML Programs (``.mlpackage``): one module per role.

* ``common`` — coremltools imported quietly, deployment targets, names Core ML accepts, native or decomposed;
* ``writer`` — recurrent layers written with coremltools' MIL builder (native ops or ``while_loop`` cells);
* ``reader`` — packages read without a Core ML runtime: files, gatepack's metadata, native ops;
* ``lifting`` — other producers' ``while_loop`` cells lifted into canonical layers;
* ``interpreter`` — the NumPy interpreter of MIL ops, and running a package on it;
* ``checks`` — the findings for writing a layer;
* ``saving`` — ``write``: the layers or the whole model built as a MIL program, saved as a package;
* ``export`` and ``blob`` — a program saved as ``ct.convert`` would save it, through coremltools' passes and
  exporters, each weight streamed once from its array into the package's weight file (the blob format);
* ``translate``, ``onnx_ops`` and ``whole`` — a whole ONNX model as one ML Program: the operator table's
  interface, the table (one entry per ONNX operator), and the pipeline.
"""

from gatepack.converters.formats.coreml.checks import check
from gatepack.converters.formats.coreml.common import (
    FORMAT,
    TARGETS,
    choose_strategy,
    lowest_target,
    native_blockers,
    safe_name,
    settle_options,
)
from gatepack.converters.formats.coreml.reader import read
from gatepack.converters.formats.coreml.running import (
    compute_dtype,
    graph_inputs,
    graph_outputs,
    open_session,
    run_layer_native,
    run_native,
    run_numpy,
)
from gatepack.converters.formats.coreml.saving import write
from gatepack.converters.formats.coreml.whole import whole_model_finding
from gatepack.converters.formats.coreml.writer import build
from gatepack.converters.registry import FormatImplementation

__all__ = [
    "FORMAT",
    "TARGETS",
    "build",
    "check",
    "choose_strategy",
    "lowest_target",
    "native_blockers",
    "read",
    "run_numpy",
    "safe_name",
    "write",
]

IMPLEMENTATION = FormatImplementation(
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    run_numpy=run_numpy,
    graph_inputs=graph_inputs,
    graph_outputs=graph_outputs,
    compute_dtype=compute_dtype,
    whole_model_finding=whole_model_finding,
    run_whole=run_numpy,
    open_session=open_session,
    settle_options=settle_options,
)

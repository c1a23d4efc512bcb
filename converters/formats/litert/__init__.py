"""LiteRT (TensorFlow Lite) flatbuffers (``.tflite``): one module per role.

* ``common`` — the official schema (from ai-edge-litert), the graph builder, the sequence ops' tensor roles;
* ``quantized`` — INT8 weights of the hybrid (dynamic-range) kernels, read into records and written from them;
* ``strategy`` — the sequence op or elementary ops, and why;
* ``checks`` — the findings for writing a layer;
* ``writer`` — layers written as sequence ops or unrolled elementary ops, with gatepack's description;
* ``saving`` — ``write``: the layers alone, or a whole ONNX model (``whole``);
* ``reader`` — gatepack's own files and other producers' sequence ops read into canonical layers;
* ``loops`` — a producer's ``WHILE`` loop over a recurrent step lifted into a layer, proven on the interpreter;
* ``unrolled`` — a file that is one unrolled torch module (litert-torch) lifted into a layer, proven likewise;
* ``translate``, ``onnx_ops`` and ``whole`` — a whole ONNX model as one subgraph of builtin operators: the
  operator table's ``litert`` column around the layers the writer writes;
* ``stateful_whole`` — a whole streaming model with ``--stateful``: its state inputs made variable tensors, fed back
  at the end of each invoke;
* ``running`` — the file on ai-edge-litert's interpreter, called as an app calls it (no reset between calls).
"""

from gatepack.converters.formats.litert.checks import check
from gatepack.converters.formats.litert.common import FORMAT
from gatepack.converters.formats.litert.reader import read
from gatepack.converters.formats.litert.running import (
    compute_dtype,
    graph_inputs,
    graph_outputs,
    open_session,
    run_layer_native,
    run_native,
)
from gatepack.converters.formats.litert.saving import write
from gatepack.converters.formats.litert.strategy import settle_options
from gatepack.converters.formats.litert.whole import layer_shapes, whole_model_finding
from gatepack.converters.registry import FormatImplementation

__all__ = ["FORMAT", "check", "read", "write"]

IMPLEMENTATION = FormatImplementation(
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    compute_dtype=compute_dtype,
    open_session=open_session,
    settle_options=settle_options,
    whole_model_finding=whole_model_finding,
    whole_layer_findings=layer_shapes,
    graph_inputs=graph_inputs,
    graph_outputs=graph_outputs,
)

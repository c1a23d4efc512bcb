"""ONNX: read every GRU, RNN and LSTM node of any model; write single-purpose layer models; run on onnxruntime.

ONNX is the canonical convention (see ``schemas.layer``), so reading is unpacking, not rearranging:

* ``W`` [D, G*H, I] and ``R`` [D, G*H, H], gate blocks z, r, h (GRU) or one block (RNN);
* ``B`` [D, 2*G*H] = [Wb_zrh, Rb_zrh] per direction (absent: zeros);
* layout 0: X [S,N,I], initial_h/Y_h [D,N,H], Y [S,D,N,H]; layout 1: X [N,S,I], initial_h/Y_h [N,D,H],
  Y [N,S,D,H]. onnxruntime rejects ``layout = 1`` and OpenVINO's importer ignores it, so gatepack
  writes a batch-major interface as Transpose nodes around a layout-0 node by default, and reads
  that pattern (from any exporter) back as one layout-1 layer.

Supported operator versions: GRU 1, 3, 7, 14, 22, RNN 1, 7, 14, 22 and LSTM 1, 7, 14, 22. Weights may be
initializers (embedded or external data), ``Constant`` nodes, or cones of operators over constants
(folded with ``onnx.reference``), and nodes may sit inside ``If``/``Loop``/``Scan`` subgraphs, where
they are named by their path (``If_0/then_branch/GRU_3``).

This module is the format's entry (``write``, ``check``, ``IMPLEMENTATION``); the rest, one module per role:
``onnx.graph`` (loading, external data, the walk of every graph, the handle that runs a node alone),
``onnx.reader`` (the reading's entry, with ``onnx.node``, ``onnx.interface``, ``onnx.constants``, ``onnx.quantized``,
``onnx.described`` and ``onnx.lifted``), ``onnx.writer`` (a layer as nodes, or as ``onnx.elementary``'s Loop: a cell
without an ONNX operator, ``--strategy decomposed``), ``onnx.rewrite`` (a whole model rewritten in place) and
``onnx.running`` (onnxruntime sessions).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable

import onnx

import gatepack.converters.formats.onnx.analyses as onnx_analyses
import gatepack.converters.formats.onnx.elementary as onnx_elementary
import gatepack.converters.formats.onnx.qdq as onnx_qdq
import gatepack.converters.formats.onnx.quantized as onnx_quantized
import gatepack.converters.quantization as quantization
from gatepack.converters.errors import GatepackError, RefusedError, UsageError
from gatepack.converters.feature_findings import findings, form_of, replacing
from gatepack.converters.fileio import atomic_files
from gatepack.converters.findings import Finding, Status
from gatepack.converters.formats.onnx.executed import open_executing_layers
from gatepack.converters.formats.onnx.graph import DEFAULT_OPSET
from gatepack.converters.formats.onnx.jitter import jittered_copy
from gatepack.converters.formats.onnx.reader import read
from gatepack.converters.formats.onnx.registration import CAPABILITIES as ONNX
from gatepack.converters.formats.onnx.registration import FOR_DIRECTML as ONNX_FOR_DIRECTML
from gatepack.converters.formats.onnx.registration import runtime_name
from gatepack.converters.formats.onnx.rewrite import in_place, is_whole_model, whole_model_finding
from gatepack.converters.formats.onnx.running import (
    graph_inputs,
    graph_outputs,
    open_session,
    run_layer_native,
    run_native,
)
from gatepack.converters.formats.onnx.writer import build, quantized_form
from gatepack.converters.model import Model
from gatepack.converters.registry import FormatImplementation
from gatepack.schemas.layer import RecurrentLayer
from gatepack.schemas.quantized import ORT_DYNAMIC

# ----------------------------------------------------------------------------------------- writing


EXTERNAL_THRESHOLD = 1 << 30  # weights above 1 GiB go to external data (protobuf stops at 2 GiB)


def write(
    model: Model,
    path: str | Path,
    *,
    opset: int | None = None,
    layout_encoding: str = "transpose",
    external_data: bool | None = None,
    runtime: str | None = None,
    strategy: str = "auto",
) -> None:
    """Write ``model``'s layers as one ONNX model: one node per layer, each with the source layer's
    interface (names, layout, optional inputs and outputs). Atomic: nothing is left on failure. An
    ONNX model with other operators around its layers is kept whole (``in_place``), in its own opset.

    ``layout_encoding`` for batch-major (layout 1) layers: ``transpose`` (default) wraps a layout-0
    node in Transposes, which every runtime runs; ``attribute`` writes ``layout=1`` (opset >= 14).
    ``external_data`` stores the weights in ``NAME.onnx.data`` beside the model, streamed from the
    layers' arrays without an in-memory copy of the model; by default when the source stored its
    weights so, or when they exceed 1 GiB (ONNX files stop at 2 GiB). ``runtime``: ``directml`` writes each
    layer in a form onnxruntime's DirectML provider computes as ONNX specifies (``for_runtime``). ``strategy``: each
    layer's GRU/RNN/LSTM node (``native``), or a Loop of elementary operators (``decomposed``; ``auto``: the node
    wherever ONNX has one and its runtime computes it as ONNX specifies), for layers written alone.
    """
    path = Path(path)
    runtime = runtime_name(runtime)
    _check_write_options(model, runtime, layout_encoding, opset, strategy)
    if is_whole_model(model):
        _write_whole(model, path, layout_encoding, external_data, runtime)
        return
    opset = layers_opset(model.layers, opset, runtime, not model.meta.get(quantization.ASKED))
    _write_layers(model, path, opset, layout_encoding, external_data, runtime, strategy)


def _check_write_options(
    model: Model, runtime: str, layout_encoding: str, opset: int | None, strategy: str = "auto"
) -> None:
    """UsageError for the ``layout`` attribute asked for DirectML's provider (it does not take layout=1), an
    ``opset`` or a ``strategy`` asked for a whole model (which keeps its own opset, and each layer's form);
    RefusedError for a layer that cannot be written for ``runtime`` (``_refuse_for_runtime``)."""
    if runtime == "directml" and layout_encoding == "attribute":
        raise UsageError(
            "the layout attribute cannot be written for directml: onnxruntime's DirectML provider does not take "
            "layout=1",
            hint="leave out --onnx-layout (Transposes around a layout-0 node)",
        )
    _refuse_for_runtime(model, runtime, opset, strategy)
    if is_whole_model(model) and strategy != "auto":
        raise UsageError(
            f"{model.path}: --strategy {strategy} applies to the recurrent layers written alone; a whole ONNX model "
            "keeps each layer's form",
            hint="leave out --strategy, or pass --layers-only",
        )
    if is_whole_model(model) and opset is not None and opset != model.meta.get("opset"):
        raise UsageError(
            f"{model.path}: a whole model keeps its opset {model.meta.get('opset')}; --opset {opset} applies to "
            "the recurrent layers written alone",
            hint="leave out --opset, or pass --layers-only",
        )


def _write_layers(
    model: Model,
    path: Path,
    opset: int,
    layout_encoding: str,
    external_data: bool | None,
    runtime: str,
    strategy: str = "auto",
) -> None:
    """The layers alone as one ONNX model at ``opset`` (``build``); their weights go to external data when asked,
    or by default when the source kept them so or they exceed ``EXTERNAL_THRESHOLD``."""
    if external_data is None:
        weight_bytes = sum(
            p.stored("W").nbytes + p.stored("R").nbytes + p.Wb.nbytes + p.Rb.nbytes  # (a float view not made yet too)
            for layer in model.layers
            for p in layer.directions
        )
        external_data = bool(model.meta.get("external_data")) or weight_bytes > EXTERNAL_THRESHOLD
    make = partial(
        build,
        model,
        opset=opset,
        layout_encoding=layout_encoding,
        runtime=runtime,
        quantized=not model.meta.get(quantization.ASKED),
        strategy=strategy,
    )
    with atomic_files(path, (".onnx.data",) if path.suffix == ".onnx" else ()) as tmp:
        if external_data:
            _check_data_name(path)
        _save_checked(tmp, external_data, make, None)


def layers_opset(layers: list[RecurrentLayer], opset: int | None, runtime: str | None, quantized: bool = True) -> int:
    """The opset layers alone are written at: ``opset`` when asked, else 14, raised to what their quantized weights
    need as QDQ (``onnx.qdq.needed_opset``: 19 for float16 arithmetic, 21 for 4-bit integers or blocks) when they
    are written ``quantized`` for onnxruntime."""
    if opset is not None:
        return opset
    if not quantized or runtime_name(runtime) != "onnxruntime":
        return DEFAULT_OPSET
    records = [[r for p in layer.directions for r in (p.Wq, p.Rq) if r is not None] for layer in layers]
    needed = [onnx_qdq.records_opset(found) for found in records if found]
    return max([DEFAULT_OPSET, *(n for n in needed if n is not None)])


def _refuse_for_runtime(model: Model, runtime: str, opset: int | None, strategy: str = "auto") -> None:
    """RefusedError for a layer that cannot be written safely for ``runtime`` (``check``'s unsupported findings
    for it), naming the layer, the reason and the alternative."""
    opset = model.meta.get("opset") if is_whole_model(model) else opset or DEFAULT_OPSET
    for layer in model.layers:
        refused = _runtime_refusal(layer, runtime, opset, strategy)
        if refused is not None:
            raise RefusedError(
                f"{model.path or '(in-memory model)'}: layer {layer.name!r}: {refused.feature}: {refused.detail}",
                findings=[refused],
                hint=refused.alternative,
            )


def _runtime_refusal(layer: RecurrentLayer, runtime: str, opset: int | None, strategy: str = "auto") -> Finding | None:
    """What cannot be written for ``runtime`` in ``layer`` at ``opset`` (None: nothing): a dtype onnxruntime's
    DirectML provider does not take, an elementary form (a cell without an operator, a feature the provider
    mishandles) below the opset it needs."""
    caps = ONNX_FOR_DIRECTML if runtime == "directml" else ONNX
    dtype = caps.op(layer.cell).dtypes.get(layer.interface.dtype)
    if dtype is not None and dtype.status is Status.UNSUPPORTED:
        return Finding("dtype", dtype.status, dtype.detail, alternative=dtype.alternative)
    form = form_of(layer, caps, strategy)
    if opset is not None and opset < onnx_elementary.MINIMUM_OPSET and not form.native:
        needed = "; ".join([*form.lacking.values(), *form.doubted.values()]) or f"--strategy {strategy}"
        leave_out = ", or leave out --for directml" if runtime == "directml" else ""
        return Finding(
            "cell",
            Status.UNSUPPORTED,
            f"its elementary form (needed: {needed}) takes opset "
            f"{onnx_elementary.MINIMUM_OPSET} or later, and the model is written at opset {opset}",
            alternative=f"write it at opset {DEFAULT_OPSET} (--opset {DEFAULT_OPSET}, or --layers-only for a whole "
            f"model){leave_out}",
        )
    return None


def _check_data_name(path: Path) -> None:
    if path.suffix != ".onnx":
        raise UsageError(
            f"{path}: a model with external data must be named NAME.onnx (its data goes to NAME.onnx.data)"
        )


def _write_whole(
    model: Model, path: Path, layout_encoding: str, external_data: bool | None, runtime: str = "onnxruntime"
) -> None:
    """The whole model rewritten in place (``in_place``); its weights stay external data (streamed
    into ``NAME.onnx.data``) when the source kept them so, unless ``external_data`` says otherwise."""
    assert model.path is not None  # a whole model is rewritten from the file it was read from
    external = bool(model.meta.get("external_data")) if external_data is None else external_data
    if external:
        _check_data_name(path)
    make = partial(
        in_place,
        model,
        layout_encoding=layout_encoding,
        runtime=runtime,
        quantized=not model.meta.get(quantization.ASKED),
    )
    with atomic_files(path, (".onnx.data",) if path.suffix == ".onnx" else ()) as tmp:
        _save_checked(tmp, external, make, Path(model.path))


def _save_checked(tmp: Path, external: bool, make: Callable[..., onnx.ModelProto], source: Path | None) -> None:
    """Save the model ``make`` builds at ``tmp``, its weights streamed into ``NAME.onnx.data`` beside it when
    ``external`` (``make(external=(file, location))``), then ``check_written`` it (against ``source``)."""
    if external:
        with open(tmp.parent / (tmp.name + ".data"), "wb") as data:
            proto = make(external=(data, tmp.name + ".data"))
    else:
        proto = make()
    onnx.save(proto, str(tmp))
    check_written(tmp, source)


def write_runnable_twin(model: Model, path: Path) -> list[RecurrentLayer]:
    """The whole model as onnxruntime runs it, written to ``path`` (``NAME.onnx``), when onnxruntime refuses it as it
    is: each recurrent node with ``layout = 1`` (which onnxruntime rejects) rewritten as a layout-0 node between
    Transposes, as ``write`` writes it (the transpose encoding), every other node as it was. Returns the layers so
    rewritten ([]: the model has no such node, and nothing is written). Verification proves each rewritten node
    equal to gatepack's executor of the original layer and judges the source by its twin."""
    batch_major = [
        layer
        for layer in model.layers
        if layer.provenance is not None and layer.provenance.kind == "node" and layer.provenance.layout == 1
    ]
    if not batch_major or not is_whole_model(model):
        return []
    _write_whole(replace(model, layers=batch_major), path, "transpose", None)
    return batch_major


def check_written(path: Path, source: Path | None) -> None:
    """``onnx.checker``'s full check (with strict shape inference) of the file just written, as a runtime
    would load it (only the structural check when the source model it was rewritten from fails the full one).
    A file gatepack wrote that fails it is a bug in gatepack (GatepackError, exit 1), unless the source fails
    it with the same complaint (its own defect, carried over unchanged)."""
    full = True
    if source is not None and _check_fails(source, full_check=True):
        full = False  # its own shape annotations fail strict inference: hold the rewrite to the structural check
    reason = _check_fails(path, full_check=full)
    if reason is None or (source is not None and reason == _check_fails(source, full_check=full)):
        return  # valid, or the source's own defect carried over unchanged (onnxruntime runs such models)
    raise GatepackError(f"the ONNX model gatepack wrote fails onnx.checker's {'full ' if full else ''}check: {reason}")


def _check_fails(path: Path, *, full_check: bool) -> str | None:
    """onnx.checker's complaint about the model at ``path``, in whole words (None: it passes)."""
    try:
        onnx.checker.check_model(str(path), full_check=full_check)
    except Exception as err:
        text = " ".join(str(err).split())
        return text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " ..."
    return None


# ---------------------------------------------------------------------------------------- findings


def check(
    layer: RecurrentLayer,
    *,
    opset: int | None = None,
    layout_encoding: str = "transpose",
    external_data: bool | None = None,
    runtime: str | None = None,
    strategy: str = "auto",
) -> list[Finding]:
    """Findings for writing ``layer`` as ONNX (``capabilities.ONNX``: every canonical layer is expressible); for
    ``runtime`` ``directml``, in the form onnxruntime's DirectML provider computes as ONNX specifies
    (``capabilities.ONNX_FOR_DIRECTML``: elementary operators where it would not). What only ONNX has: the
    opset, and the layout=1 attribute instead of Transposes (``--onnx-layout attribute``)."""
    for_directml = runtime_name(runtime) == "directml"
    form = form_of(layer, ONNX_FOR_DIRECTML if for_directml else ONNX, strategy)
    opset = layers_opset([layer], opset, runtime)
    named = f"{layer.cell.op_name} operator, opset {opset}" if layer.cell.spec.onnx_op else None
    found = findings(layer, form, named=named)
    attribute = None
    if layer.interface.layout == 1 and layout_encoding == "attribute" and for_directml:
        attribute = Finding(
            "layout",
            Status.UNSUPPORTED,
            "layout=1 attribute: onnxruntime's DirectML provider does not take it",
            alternative="leave out --onnx-layout: Transposes around a layout-0 node",
        )
    elif layer.interface.layout == 1 and layout_encoding == "attribute" and form.native:
        attribute = Finding(
            "layout",
            Status.EXACT,
            "layout=1 attribute",
            warning="onnxruntime rejects layout=1 and OpenVINO's ONNX importer ignores it",
        )
    refused = _runtime_refusal(layer, runtime_name(runtime), opset, strategy)
    return replacing(found, attribute, refused) + _quantization(layer, opset, runtime, layout_encoding, form.native)


_QUANTIZED_FORMS = {
    "qdq": "integer initializers, each through a DequantizeLinear feeding the node",
    "qdq_contrib": "integer initializers, each through onnxruntime's com.microsoft::DequantizeLinear feeding the node "
    "(the model's opset has no DequantizeLinear for them: per-axis needs 13, 4 bits 21; onnxruntime's quantizer "
    "writes the same): onnxruntime only",
    "dynamic": f"onnxruntime's {onnx_quantized.DOMAIN}::{onnx_quantized.OP_TYPE} (W and R transposed back to "
    "[D, K, 4H]), which runs on onnxruntime's CPU provider only",
}


def _quantization(
    layer: RecurrentLayer, opset: int | None, runtime: str | None, encoding: str, native: bool = True
) -> list[Finding]:
    """The ``quantization`` finding of a quantized layer: its integers kept (QDQ, DynamicQuantizeLSTM), or why
    this ONNX cannot hold them ([] for float weights); a layer not written as its own node (``native`` False: the
    elementary Loop, which reads float initializers) holds none."""
    if not layer.is_quantized:
        return []
    opset = DEFAULT_OPSET if opset is None else opset
    form = quantized_form(layer, opset, runtime_name(runtime), encoding) if native else None
    if form is not None:
        return [quantization.held(layer, _QUANTIZED_FORMS[form])]
    foreign = quantization.run_time_scheme(layer) not in ("", ORT_DYNAMIC)
    reason = (
        "onnxruntime's DirectML provider runs no quantized recurrent weights here"
        if runtime_name(runtime) == "directml"
        else "its elementary form (a Loop of elementary operators) reads float weights"
        if not native
        else "ONNX has no operator that computes it (QDQ computes X and h in float, DynamicQuantizeLSTM quantizes "
        "them per tensor to uint8)"
        if foreign
        else f"ONNX at opset {opset} has no DequantizeLinear for them (per-axis needs opset "
        f"{onnx_qdq.MINIMUM_OPSET}, a float16 scale {onnx_qdq.FLOAT16_SCALE_OPSET}, 4-bit integers or blocks "
        f"{onnx_qdq.FOUR_BIT_OPSET}; DynamicQuantizeLSTM has no layout attribute)"
    )
    return [quantization.dequantized(layer, "onnx", reason)]


IMPLEMENTATION = FormatImplementation(
    whole_model_finding=whole_model_finding,
    read=read,
    write=write,
    check=check,
    run_native=run_native,
    run_layer_native=run_layer_native,
    graph_inputs=graph_inputs,
    graph_outputs=graph_outputs,
    compute_dtype=onnx_quantized.compute_dtype,
    open_session=open_session,
    runnable_twin=write_runnable_twin,
    jittered=jittered_copy,
    open_executing_layers=open_executing_layers,
    graph_analyses=onnx_analyses.ANALYSES,
)

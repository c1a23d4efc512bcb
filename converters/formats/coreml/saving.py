"""The Core ML package entry's ``write``: a model's layers (``writer.build``) or the whole ONNX model around them
(``whole.build_whole``) built as one MIL program and saved as an ML Program package (NAME.mlpackage; ``export``:
what coremltools' conversion makes of the program, its weights written once) with gatepack's metadata. It sits
above both builders (the whole-model pipeline emits each layer through ``writer.emit_layer``), so neither imports
the other's caller.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import gatepack.converters.quantization as quantization
from gatepack.converters.errors import RuntimeFailure, UsageError
from gatepack.converters.fileio import staging_directory
from gatepack.converters.formats.coreml.blob import BlobFile
from gatepack.converters.formats.coreml.common import (
    FP16_TARGET,
    METADATA_KEY,
    TARGETS,
    _ct,
    _quiet,
    _target_rank,
    settle_options,
)
from gatepack.converters.formats.coreml.export import ROOT_MODEL, WEIGHT_FILE, new_package, program_spec, set_root_model
from gatepack.converters.formats.coreml.whole import build_whole, carry_metadata, is_whole_model
from gatepack.converters.formats.coreml.writer import build
from gatepack.converters.model import Model


def write(
    model: Model,
    path: str | Path,
    *,
    strategy: str = "auto",
    minimum_deployment_target: str | None = None,
    compress_to_fp16: bool = False,
    stateful: bool = False,
) -> None:
    """Write ``model`` as one ML Program package at ``path`` (NAME.mlpackage): its layers, or the whole ONNX model
    around them (``whole``; the user's input shapes in ``model.meta`` fix its symbolic dimensions); fp32, or with
    ``compress_to_fp16`` fp16 weights and fp16 arithmetic behind an fp32 interface (coremltools' own fp16 cast
    pass, then only constant folding and cast/dead-code clean-up); ``stateful``: a whole model's state pairs
    (``model.meta['state_pairs']``) as Core ML states (fp16, iOS18). ``minimum_deployment_target`` None: the
    lowest that expresses the model (``common.lowest_target``)."""
    path = Path(path)
    if model.meta.get(quantization.ASKED):  # float weights, as asked (--dequantize)
        model = replace(model, layers=[quantization.floats_only(layer) for layer in model.layers])
    asked = dict(strategy=strategy, minimum_deployment_target=minimum_deployment_target, stateful=stateful)
    target = settle_options(model, asked | {"compress_to_fp16": compress_to_fp16})["minimum_deployment_target"]
    if _target_rank(target) < TARGETS.index(FP16_TARGET) and compress_to_fp16:
        raise UsageError(
            f"fp16 packages need --minimum-deployment-target {FP16_TARGET} or later (the target is {target})"
        )
    with _quiet():  # coremltools prints notes while building constants
        if is_whole_model(model):
            states = dict(model.meta.get("state_pairs") or []) if stateful else None
            if stateful and not states:
                raise UsageError(f"{model.path}: --stateful needs the model's state pairs", hint="--state IN=OUT")
            program, described = build_whole(model, strategy=strategy, target=target, states=states)
        elif stateful:
            raise UsageError(f"{model.path}: --stateful applies to whole models (their state inputs and outputs)")
        else:
            program, described = build(model, strategy=strategy, target=target)
    save_package(program, described, path, target, compress_to_fp16, carry=model)


def save_package(
    program, described: dict, path: Path, target: str, compress_to_fp16: bool = False, carry: Model | None = None
) -> None:
    """Save a MIL program built by gatepack as an ML Program package at ``path`` (``export``: what coremltools'
    conversion makes of it, its weights written once) with gatepack's metadata (``described``) and, for a whole
    model, the source model's own metadata (``carry``). The package is made in gatepack's own staging folder
    (removed when the package is in place, and after a killed run by the next one), then moved into place."""
    _ct()
    described["precision"] = "fp16" if compress_to_fp16 else "fp32"
    with staging_directory(path.parent, ".coreml.") as staging:
        (staging / "empty").mkdir()
        converted = staging / "converted.mlpackage"
        try:
            weights_dir = new_package(converted, staging / "empty")
            with _quiet(), BlobFile(weights_dir / WEIGHT_FILE) as weights:
                spec = program_spec(program, weights, target, compress_to_fp16)
        except Exception as err:  # coremltools raises ValueError/AssertionError with long messages
            raise RuntimeFailure(
                f"{path}: coremltools cannot convert the program: {' '.join(str(err).split())[:240]}"
            ) from None
        metadata = spec.description.metadata
        metadata.userDefined[METADATA_KEY] = json.dumps(described)
        metadata.shortDescription = "recurrent layers written by gatepack"
        if described.get("whole") and carry is not None:
            carry_metadata(carry, metadata)
        set_root_model(converted, spec, staging / ROOT_MODEL)  # the last step before the package moves into place
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(converted, path)

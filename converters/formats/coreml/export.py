"""A MIL program built by gatepack exported as an ML Program package: what ``ct.convert(program,
source="milinternal", convert_to="mlprogram", ...)`` makes of it (the same passes, the same specification and build
metadata, the same weight file and package layout), with the weights written once.

coremltools' conversion copies every large constant (``flatten``), writes the copies into a weight file in the
system's temporary folder, then copies that file into the package; its pass manager also renders the whole program
as text six times for a debug log that is off. Here the package is made first with an empty weights item, and the
MIL-to-protobuf export (coremltools' own ``MILProtoExporter``, one method replaced) streams each constant from the
array that holds it into the package's ``weight.bin`` (``blob.BlobFile``), in the order and format coremltools'
writer uses; the passes run through coremltools' pass registry as its pass manager runs them.
"""

from __future__ import annotations

from pathlib import Path

from gatepack.converters.formats.coreml.blob import SUB_BYTE_TYPES, BlobFile
from gatepack.converters.formats.coreml.common import FP16_PASSES, _ct

AUTHOR = "com.apple.CoreML"  # the package items' author, the folder under Data/ that holds them
WEIGHTS_ITEM = "weights"
WEIGHT_FILE = "weight.bin"
ROOT_MODEL = "model.mlmodel"


def new_package(path: Path, scratch: Path) -> Path:
    """An ML Program package at ``path`` holding an empty weights item (``scratch``: an empty folder, copied in);
    return the weights folder inside it. coremltools' ``ModelPackage`` makes the package and writes its manifest
    when the object is released (here, on return)."""
    _ct()
    from coremltools.libmodelpackage import ModelPackage

    package = ModelPackage(str(path))
    package.addItem(str(scratch), WEIGHTS_ITEM, AUTHOR, "CoreML Model Weights")
    return Path(package.findItemByNameAuthor(WEIGHTS_ITEM, AUTHOR).path())


def set_root_model(path: Path, spec, scratch: Path) -> None:
    """The model specification ``spec`` written as the root model of the package at ``path`` (through ``scratch``,
    a file outside the package, which ``ModelPackage`` copies in; the manifest is rewritten on return).
    Serialised deterministically (map entries, such as an op's inputs, ordered by key), so one program gives the
    same bytes in every process; coremltools' own order varies from process to process."""
    from coremltools.libmodelpackage import ModelPackage

    scratch.write_bytes(spec.SerializeToString(deterministic=True))
    ModelPackage(str(path)).setRootModel(str(scratch), ROOT_MODEL, AUTHOR, "CoreML Model Specification")


def program_spec(program, weights: BlobFile, target: str, compress_to_fp16: bool):
    """The Core ML model specification of ``program`` at deployment ``target``, its large constants appended to
    ``weights``; fp32 as written (no pass but coremltools' backend ones), or with ``compress_to_fp16`` coremltools'
    fp16 cast and its clean-up (``FP16_PASSES``). The program is transformed in place, as ``ct.convert`` does."""
    ct = _ct()
    from coremltools.converters.mil.backend.mil.load import CoreMLProtoExporter
    from coremltools.converters.mil.converter import MILFrontend, _construct_other_pipelines, _reset_conversion_state

    version = getattr(ct.target, target).value  # the specification version of the deployment target
    main = ct.PassPipeline(pass_names=list(FP16_PASSES)) if compress_to_fp16 else ct.PassPipeline.EMPTY
    frontend, backend = _construct_other_pipelines(main, "milinternal", "mlprogram")
    MILFrontend()(program, specification_version=version)  # refuses an op newer than the target
    for pipeline in (frontend, main, backend):
        _apply_passes(program, pipeline)
    program._check_early_error_out_for_invalid_program()
    mil_proto = _streaming_exporter()(program, weights, version).export()
    spec = CoreMLProtoExporter(
        program,
        mil_proto,
        None,
        None,
        classifier_config=None,
        convert_to="mlprogram",
        convert_from="milinternal",
        **_version_options(CoreMLProtoExporter, version),
    ).export(version)
    _reset_conversion_state()  # the builder's name counters, as every conversion leaves them
    _check_spec(spec, target)
    _record_build_metadata(spec)
    return spec


def _version_options(exporter, version: int) -> dict:
    """What coremltools' own ``load`` passes to its ``CoreMLProtoExporter`` beside the common arguments: 8.0 takes
    ``export_multi_functions`` (False: one function), 8.1 to 8.3 nothing more, 9.0 the specification version."""
    import inspect

    parameters = inspect.signature(exporter).parameters
    return {k: v for k, v in (("export_multi_functions", False), ("specification_version", version)) if k in parameters}


def _apply_passes(program, pipeline) -> None:
    """``pipeline``'s passes applied to ``program`` as coremltools' ``PassPipelineManager.apply_pipeline`` applies
    them (each with its options, the program validated before and after each), without its debug log's text."""
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

    pipeline.validate()
    program.validate()
    for name in pipeline.passes:
        graph_pass = PASS_REGISTRY[name]
        graph_pass.set_options(pipeline.get_options(name))
        graph_pass(program)
        program.validate(check_essential_scope=name == "common::dead_code_elimination")


def _streaming_exporter():
    """coremltools' ``MILProtoExporter`` whose constants' file values are appended to a ``BlobFile`` straight from
    their arrays (its own copies each array and writes it through its blob writer), cached per weight as its own
    caches them; the file value names ``@model_path/weights/weight.bin``, as its own does."""
    from coremltools.converters.mil.backend.mil.helper import create_file_value_tensor, types_to_proto_primitive
    from coremltools.converters.mil.backend.mil.load import MILProtoExporter
    from coremltools.converters.mil.mil import types

    class StreamingExporter(MILProtoExporter):
        def __init__(self, program, weights: BlobFile, version: int) -> None:
            super().__init__(program, weights_dir=str(weights.path.parent), specification_version=version)
            self.weights = weights

        def create_file_value(self, var):
            weight_id = var.op.weight_id
            if weight_id is None:
                weight_id = f"{var.op.enclosing_block.name}_{var.name}"
            if weight_id not in self.weight_id_to_file_value:
                primitive = var.sym_type.get_primitive() if hasattr(var.sym_type, "get_primitive") else var.sym_type
                kind = types.builtin_to_string(primitive)
                sub_byte = kind if kind in SUB_BYTE_TYPES else None
                if sub_byte is None and not _stored_as(var.val, primitive):
                    raise TypeError(f"constant {var.name!r}: a {kind} held as {var.val.dtype}")
                self.weight_id_to_file_value[weight_id] = create_file_value_tensor(
                    file_name=f"@model_path/{WEIGHTS_ITEM}/{WEIGHT_FILE}",
                    offset=self.weights.append(var.val, sub_byte),
                    dim=var.val.shape,
                    data_type=types_to_proto_primitive(primitive),
                )
            return self.weight_id_to_file_value[weight_id]

    return StreamingExporter


def _stored_as(value, primitive) -> bool:
    """Whether ``value``'s NumPy type is MIL's ``primitive`` type itself (a sub-byte type, which MIL holds in int8 or
    uint8, is not: the blob file packs those, ``blob.SUB_BYTE_TYPES``)."""
    from coremltools.converters.mil.mil import types

    name = types.builtin_to_string(primitive)
    return _NUMPY_NAMES.get(name, name) == value.dtype.name


_NUMPY_NAMES = {"fp16": "float16", "fp32": "float32"}  # MIL's names of NumPy's float types (the others agree)


def _check_spec(spec, target: str) -> None:
    """What ``ct.convert`` checks on the specification it made: no input of unbounded size (Core ML refuses one),
    every op available at the deployment target."""
    ct = _ct()
    from coremltools.converters.mil._deployment_compatibility import check_deployment_compatibility

    for feature in spec.description.input:
        if any(r.upperBound == -1 for r in feature.type.multiArrayType.shapeRange.sizeRanges):
            raise ValueError(f"input {feature.name!r} has a dimension without an upper bound")
    check_deployment_compatibility(spec=spec, representation="mlprogram", deployment_target=getattr(ct.target, target))


def _record_build_metadata(spec) -> None:
    """coremltools' build metadata (its version, the source ``milinternal``, the date) in the specification's
    user-defined metadata and the program's ``buildInfo`` attribute, recorded by coremltools' own function over the
    specification (it reads and writes nothing else of a model)."""
    from coremltools.converters._converters_entry import _record_build_metadata as record
    from coremltools.models import MLModel

    class SpecOnly:
        _set_build_info_mil_attributes = MLModel._set_build_info_mil_attributes

        def __init__(self) -> None:
            self._spec = spec
            self.user_defined_metadata = spec.description.metadata.userDefined

    record(SpecOnly(), "milinternal")

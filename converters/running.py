"""Running an artifact (``gatepack.run``) and naming what it takes (``gatepack.input_names``): on its format's own
runtime where one runs here, else on gatepack's executor of its format's semantics, fed and answered in the same
tensors for every format."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gatepack.converters.registry as registry
from gatepack.converters.errors import InputError, NoRecurrentLayerError, UsageError
from gatepack.converters.plan import read_options
from gatepack.converters.reading import load

if TYPE_CHECKING:
    import numpy as np

    from gatepack.converters.model import Model

ENGINES = ("auto", "native", "numpy")


def engine_for(format: str) -> str:
    """The engine ``run`` uses by default for ``format``: its own runtime where one runs here (onnxruntime,
    OpenVINO CPU), else gatepack's executor of its semantics."""
    return "native" if registry.check_name(format).runs_here else "numpy"


def input_names(artifact, format: str | None) -> list[str]:
    """The names of the tensors ``run`` takes for ``artifact`` (``gatepack.input_names``)."""
    artifact = registry.as_source(artifact)
    fmt = format or registry.detect(artifact)
    graph_inputs = registry.reader(fmt).graph_inputs
    if graph_inputs is not None:
        return [name for name, _, _ in graph_inputs(artifact)]
    # X and the optional inputs each layer takes from its user: never an input it holds as a constant (named in its
    # interface for the artifact's constant tensor), which no format's run takes
    layers = load(artifact, fmt, {}).layers
    return list(
        dict.fromkeys(n for lay in layers for role in ("x", *lay.fed_roles()) if (n := getattr(lay.interface, role)))
    )


def run(
    artifact, inputs: dict[str, "np.ndarray"], engine: str, format: str | None, directml_shapes: bool, options: dict
) -> dict[str, "np.ndarray"]:
    """``gatepack.run``: the artifact executed on ``engine`` (``auto``: ``engine_for`` its format)."""
    from gatepack.converters.executor import check_model_inputs

    artifact = registry.as_source(artifact)
    fmt = format or registry.detect(artifact)
    if engine not in ENGINES:
        raise UsageError(f"engine {engine!r} is not one of {ENGINES}")
    info = registry.check_name(fmt)
    if directml_shapes and info.interface_inputs:
        raise UsageError(f"{artifact}: the DirectML shapes apply to DirectML artifacts, and this is {info.title}")
    engine = engine_for(fmt) if engine == "auto" else engine
    read_options(options)
    implementation = registry.reader(fmt)
    if not info.interface_inputs and not directml_shapes and engine == "numpy":
        return _run_layers_on_disk(load(artifact, fmt, options), inputs)
    try:
        if info.interface_inputs:
            model = load(artifact, fmt, options)
            if not model.meta.get("own_input_shapes"):  # else the format's run checks its own shapes
                check_model_inputs(model, inputs)
    except NoRecurrentLayerError:
        if engine == "numpy" and implementation.run_numpy is None:
            raise  # the executor runs recurrent layers only; a format's own interpreter runs any program
    if engine == "native":
        return implementation.run_native(artifact, inputs)
    if implementation.run_numpy is not None:  # the format's own semantics, read from the artifact
        return implementation.run_numpy(artifact, inputs)
    from gatepack.converters.executor import run_model

    return run_model(load(artifact, fmt, options), inputs)


def _run_layers_on_disk(model: "Model", inputs: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
    """Each layer of ``model`` as its artifact holds it (its format's ``run_layer_native``: for DirectML,
    gatepack's executor of DirectML's semantics on the saved dispatch), fed and read in the layer's interface:
    the source's tensor names, shapes and layout."""
    from gatepack.converters.executor import check_model_inputs, layer_feed

    try:
        check_model_inputs(model, inputs)
    except InputError as err:
        err.hint = err.hint or (
            f"{model.path} takes the source's tensors; --directml-shapes (API: directml_shapes=True) takes its "
            "DxDispatch resources in the descs' 4-D shapes"
        )
        raise
    run_layer = registry.reader(model.format).run_layer_native
    outputs: dict[str, np.ndarray] = {}
    for layer in model.layers:
        outputs.update(run_layer(layer, layer_feed(model, layer, inputs)))
    return outputs

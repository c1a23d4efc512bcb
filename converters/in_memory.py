"""Running a model whose recurrent layers were read from no artifact (held in memory: the int8 twin of an artifact
whose kernels quantize X and h at run time, ``converters.accuracy``), on gatepack's executor: its layers alone
(``executor.run_model``), or for a whole model its layers on the executor and the operators around them on the
source format's runtime (the format's ``open_executing_layers``; ONNX: ``formats.onnx.executed``)."""

from __future__ import annotations

from typing import Callable

import numpy as np

import gatepack.converters.registry as registry
from gatepack.converters.errors import UsageError
from gatepack.converters.executor import run_model
from gatepack.converters.model import Model

Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def held_in_memory(model: Model) -> bool:
    """Whether every recurrent layer of ``model`` was read from no artifact (the executor runs them)."""
    return bool(model.layers) and all(layer.provenance is None for layer in model.layers)


def in_memory_runner(model: Model) -> Runner:
    """``model`` (``held_in_memory``) on gatepack's executor, a whole model's other operators on its format's
    runtime; UsageError where that format cannot run them around executed layers."""
    if not model.meta.get("other_ops"):
        return lambda feed: run_model(model, feed)
    opened = registry.reader(model.format).open_executing_layers
    if opened is None:
        raise UsageError(f"{model.path}: {model.format} cannot run its other operators around executed layers")
    return opened(model)

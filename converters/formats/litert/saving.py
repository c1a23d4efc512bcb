"""``write``: a model as one ``.tflite`` file, its recurrent layers alone (``writer``) or, for a whole ONNX model,
every node with them (``whole``)."""

from __future__ import annotations

from pathlib import Path

from gatepack.converters.formats.litert.stateful_whole import write_stateful_whole
from gatepack.converters.formats.litert.whole import is_whole_model, write_whole
from gatepack.converters.formats.litert.writer import write_layers
from gatepack.converters.model import Model


def write(
    model: Model,
    path: str | Path,
    *,
    strategy: str = "auto",
    seq_length: int | dict | None = None,
    batch_size: int | dict | None = None,
    stateful: bool = False,
) -> None:
    """Write ``model`` at ``path``: a whole model (``whole.is_whole_model``) with its other operators, else its layers
    alone (``writer.write_layers``: sizes and ``stateful`` as documented there); a whole model ``stateful`` holds its
    state pairs in variable tensors (``stateful_whole``)."""
    if is_whole_model(model):
        (write_stateful_whole if stateful else write_whole)(model, path, strategy=strategy)
        return
    write_layers(model, path, strategy=strategy, seq_length=seq_length, batch_size=batch_size, stateful=stateful)

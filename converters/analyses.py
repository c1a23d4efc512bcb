"""What a format reads from, or does to, a whole model's graph beyond running it: the hooks verification, the
streaming checks and ``--input-value`` call (``FormatImplementation.graph_analyses``; ONNX's in
``formats/onnx/analyses.py``). A format without them (None) is drawn at the default sizes, its integer inputs as
zeros, its state pairs found by names alone, and ``--input-value`` refused for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class GraphAnalyses:
    """A format's whole-graph analyses, each taking the artifact's path:

    * ``implied_sizes(path) -> [size]``: the sizes its graph implies its inputs' symbolic dimensions may need (a
      padding, a kernel, a reshape's constant sizes), tried in turn when the source fails at the default size;
    * ``integer_draws(path, dim_size) -> {input: (low, high, why)}``: how to draw each integer input so that the model
      takes it (a value it is compared with, an embedding's rows, lengths ``1..dim_size``), both ends included;
    * ``recurrent_wiring(path) -> {(input, output)}``: the (graph input, graph output) pairs its recurrent layers wire,
      initial state from the input, final state to the output (evidence for streaming state pairs);
    * ``specialise(path, values, input_shapes) -> model``: the model with each input ``values`` names held as a
      constant of that value, its inputs' symbolic dimensions fixed at ``input_shapes`` (input name -> dims), and
      what they decide folded, in memory (``registry.as_source`` saves it to a private file);
    * ``weight_scope(model, scheme) -> ScopeSummary``: what ``--quantize-weights-scope model`` quantizes of the
      model's other weights and what it leaves float, and why (``weight_quantization.ScopeSummary``; None: the
      format has no whole-model weights to quantize).
    """

    implied_sizes: Callable[[Path], list[int]]
    integer_draws: Callable[[Path, int], dict[str, tuple[int, int, str]]]
    recurrent_wiring: Callable[[Path], set[tuple[str, str]]]
    specialise: Callable[[Path, dict, dict], Any]
    weight_scope: Callable[[Any, Any], Any] | None = None

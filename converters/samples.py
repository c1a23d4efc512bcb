"""Random sample inputs for a layer, and the sizes they may take: what verification feeds both sides
of a conversion, and what a DirectML model binds as its inputs. Shared by the orchestrators and the
formats (which never import the orchestrators)."""

from __future__ import annotations

import numpy as np

from gatepack.converters.errors import UsageError
from gatepack.schemas.layer import RecurrentLayer

DEFAULT_SEQ_LENGTH = 7
DEFAULT_BATCH = 3
# Agreement between two runs of the same layer: |a - b| <= atol + rtol * |b|, per dtype compared.
TOLERANCES = {"float64": (1e-7, 1e-6), "float32": (1e-5, 1e-4), "float16": (1e-2, 1e-2)}
# A float layer read from onnxruntime's DynamicQuantizeLSTM against the node itself (8-bit X and h at run
# time; measured, docs/conventions.md §9); its ``compute_dtype`` names this entry.
DYNAMIC_INT8 = "dynamic int8"
TOLERANCES[DYNAMIC_INT8] = (2e-2, 1e-2)
MAX_SAMPLE_VALUES = 1 << 26  # per sample tensor (X or Y): 256 MiB of float32


def check_sample_size(layer: RecurrentLayer, s: int, n: int, options: str = "the sizes") -> None:
    """UsageError when random inputs of ``s`` x ``n`` for ``layer`` (or its Y) would exceed ``MAX_SAMPLE_VALUES``."""
    largest = s * n * max(layer.input_size, layer.num_directions * layer.hidden_size)
    if largest > MAX_SAMPLE_VALUES:
        raise UsageError(
            f"layer {layer.name!r}: S={s} x N={n} makes sample tensors of {largest:,} values, more than gatepack's "
            f"limit of {MAX_SAMPLE_VALUES:,}",
            hint=f"choose smaller {options}",
        )


def sample_sizes(*layers: RecurrentLayer) -> tuple[int, int]:
    """(S, N) for random inputs: the first static size among ``layers`` (a static target such as a
    DirectML desc fixes what a symbolic source leaves open), else small defaults."""

    def pick(attr: str, default: int) -> int:
        return next((v for v in (getattr(lay.interface, attr) for lay in layers) if isinstance(v, int)), default)

    # a constant input fixes the batch its source runs at (a state of batch 1 serves every batch)
    held = [v.shape[0] if r == "sequence_lens" else v.shape[1] for lay in layers for r, v in lay.constants.items()]
    return pick("seq_length", DEFAULT_SEQ_LENGTH), next((n for n in held if n > 1), pick("batch_size", DEFAULT_BATCH))


def sample_inputs(
    layer: RecurrentLayer, rng: np.random.Generator, sizes: tuple[int, int] | None = None
) -> dict[str, np.ndarray]:
    """Random inputs for ``layer`` in layout 0, keyed by role: X, and sequence_lens, initial_h, initial_c where
    the layer takes them (never for an input it holds as a constant); initial_c equal to initial_h where the layer
    reads one tensor as both."""
    s, n = sizes or sample_sizes(layer)
    check_sample_size(layer, s, n)
    dtype = layer.dtype
    inputs = {"X": rng.uniform(-1, 1, (s, n, layer.input_size)).astype(dtype)}
    fed = layer.fed_roles()
    if "sequence_lens" in fed:
        lens = rng.integers(1, s + 1, n).astype(np.int32)
        lens[rng.integers(n)] = s  # at least one full-length sequence
        inputs["sequence_lens"] = lens
    for role in ("initial_h", "initial_c"):
        if role in fed:
            inputs[role] = rng.uniform(-1, 1, (layer.num_directions, n, layer.hidden_size)).astype(dtype)
    if "initial_c" in inputs and layer.interface.initial_c == layer.interface.initial_h:
        # one tensor the layer reads as both states (tf2onnx's zero state of a stacked Keras LSTM) is one value: the
        # source runs it once for both, so a target taking them apart is fed the same
        inputs["initial_c"] = inputs["initial_h"]
    return inputs


# Symbolic dimensions of a whole model's inputs: the default size first, then the sizes its graph implies, then larger.
MAX_DRAWN_SIZE = 4096


def dim_size_candidates(implied: list[int], default: int = DEFAULT_SEQ_LENGTH) -> list[int]:
    """The sizes to draw a whole model's symbolic dimensions at, in the order tried until its source runs:
    ``default``; the ``implied`` sizes above it (the format's ``GraphAnalyses.implied_sizes``), smallest first; then
    doubling from the largest tried up to ``MAX_DRAWN_SIZE``."""
    sizes = [default, *(s for s in sorted(set(implied)) if s > default)]
    while sizes[-1] * 2 <= MAX_DRAWN_SIZE:
        sizes.append(sizes[-1] * 2)
    return sizes

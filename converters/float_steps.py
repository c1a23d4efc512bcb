"""One float32 step: how verification moves a value as another runtime's rounding would move it.

``v' = v + v * (s * 1.5 * 2^-24)`` with ``s = ±1`` drawn per element: for ``2^e <= |v| < 2^(e+1)`` one float32 step is
``2^(e-23)`` and ``|v| * 1.5 * 2^-24`` lies in ``[0.75, 1.5)`` of it, so the sum rounds to the neighbour of ``v``
above or below (zero stays zero), as ``formats/onnx/jitter.py`` moves a tensor inside an ONNX graph. Used by the
judgements in quantization steps (``quantizer_steps``, ``hybrid``) and step by step (``layer_steps``).
"""

from __future__ import annotations

import numpy as np

ONE_STEP = 1.5 * 2.0**-24  # |x| times this is 0.75 to 1.5 units in the last place of x


def moved_input(x: np.ndarray, seed: int) -> np.ndarray:
    """``x`` with each element moved by one float32 step, up or down as ``seed`` draws (module docstring)."""
    sign = np.where(np.random.default_rng(seed).uniform(-1.0, 1.0, x.shape) < 0, -1.0, 1.0).astype(x.dtype)
    return (x + x * (sign * x.dtype.type(ONE_STEP))).astype(x.dtype)

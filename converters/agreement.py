"""How far two runs of the same output agree beyond their largest error: the mean absolute error, and for
outputs that a user thresholds or ranks (logits, probabilities) how often the decision is the same.

* ``argmax``: over the last axis (classes), the fraction of rows whose largest entry is at the same index;
  None for a last axis of one entry;
* ``threshold``: the fraction of entries on the same side of the decision threshold, 0.5 when the expected
  values all lie in [0, 1] (probabilities), else 0 (logits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Agreement:
    mean_abs_error: float
    argmax: float | None  # fraction of rows, None: a last axis of one
    threshold: float  # fraction of entries
    threshold_at: float

    def text(self) -> str:
        """E.g. 'mean 2.1e-04, argmax 100%, threshold 0: 99.8%'."""
        argmax = "" if self.argmax is None else f", argmax {self.argmax:.1%}"
        return f"mean {self.mean_abs_error:.2g}{argmax}, threshold {self.threshold_at:g}: {self.threshold:.1%}"


def agreement(actual: np.ndarray, expected: np.ndarray) -> Agreement | None:
    """The agreement of ``actual`` with ``expected`` over their finite entries (None: shapes differ or none)."""
    a, b = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != b.shape:
        return None
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return None
    mean = float(np.abs(a[finite] - b[finite]).mean())
    argmax = None
    if b.ndim and b.shape[-1] > 1 and finite.all():
        argmax = float((a.argmax(axis=-1) == b.argmax(axis=-1)).mean())
    at = 0.5 if b[finite].min() >= 0 and b[finite].max() <= 1 else 0.0
    threshold = float(((a[finite] > at) == (b[finite] > at)).mean())
    return Agreement(mean, argmax, threshold, at)

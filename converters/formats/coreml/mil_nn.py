"""gatepack's MIL interpreter: the nn ops the ONNX operator table emits (NumPy, MIL's documented semantics).

``OPS`` maps a MIL op type to a function of the op's inputs by name (MIL vars as arrays, parameters as Python
values); ``interpreter`` merges it into its table. Each op here is checked against Apple's own op tests.
"""

from __future__ import annotations

from typing import Callable

OPS: dict[str, Callable] = {}

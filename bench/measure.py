"""Measure a piece of Python in a fresh child process: wall and CPU time of the measured part, and the
child's peak resident memory (``VmHWM``) over its whole life, and its resident memory just before
the measured part starts (after imports), so the increment is visible.

``VmHWM`` rather than ``getrusage``'s ``ru_maxrss``: Linux carries ``ru_maxrss`` across ``execve``,
so a child would report its parent's peak when that is higher.

gatepack's own modules are compiled to bytecode once before the first measurement, as installing the wheel
compiles them: with ``PYTHONDONTWRITEBYTECODE`` set (as on the shared machines) and no ``__pycache__`` in the
checkout, every child would otherwise compile some seventy modules from source (~0.4 s) inside the timed part,
while the peers' packages come compiled."""

from __future__ import annotations

import compileall
import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys, time
{setup}
def _status_mb(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key)) / 1024
before = _status_mb("VmRSS")
start, cpu = time.perf_counter(), time.process_time()
{body}
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({{"seconds": seconds, "peak_mb": _status_mb("VmHWM"), "before_mb": before, "cpu_seconds": cpu}}))
"""


@dataclass
class Sample:
    seconds: float  # median wall time of the measured part
    peak_mb: float  # median peak RSS of the child
    before_mb: float  # median RSS after setup, before the measured part
    cpu_seconds: float  # median CPU time (user + system, every thread) of the measured part: what a loaded machine
    # does not inflate as it does wall time

    @property
    def increment_mb(self) -> float:
        return self.peak_mb - self.before_mb


def _compiled() -> None:
    """gatepack's sources compiled to ``__pycache__`` (git ignores it), fixtures and build output apart."""
    compileall.compile_dir(str(ROOT), quiet=1, rx=re.compile(r"[/\\](fixtures|build|\.venv|\.git)[/\\]"))


def measure(setup: str, body: str, repeat: int = 3, python: str = sys.executable) -> Sample:
    """Run ``setup`` then ``body`` (timed) in ``repeat`` fresh interpreters of ``python``; medians."""
    _compiled()  # (a check of modification times once everything is compiled)
    code = _CHILD.format(setup=textwrap.dedent(setup), body=textwrap.dedent(body))
    runs = []
    for _ in range(repeat):
        os.sync()  # start from clean page cache write-back: an earlier run's dirty pages would throttle this one
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"benchmark child failed:\n{done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return Sample(*(statistics.median(r[k] for r in runs) for k in ("seconds", "peak_mb", "before_mb", "cpu_seconds")))

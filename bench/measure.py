"""Measure a piece of Python in a fresh child process: wall time of the measured part, and the
child's peak resident memory (``ru_maxrss``) over its whole life, and its resident memory just
before the measured part starts (after imports), so the increment is visible."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
{setup}
def _rss_mb():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
before = _rss_mb()
start = time.perf_counter()
{body}
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before_mb": before}}))
"""


@dataclass
class Sample:
    seconds: float  # median wall time of the measured part
    peak_mb: float  # median peak RSS of the child
    before_mb: float  # median RSS after setup, before the measured part

    @property
    def increment_mb(self) -> float:
        return self.peak_mb - self.before_mb


def measure(setup: str, body: str, repeat: int = 3) -> Sample:
    """Run ``setup`` then ``body`` (timed) in ``repeat`` fresh interpreters; medians."""
    code = _CHILD.format(root=str(ROOT), setup=textwrap.dedent(setup), body=textwrap.dedent(body))
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(f"benchmark child failed:\n{done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return Sample(*(statistics.median(r[k] for r in runs) for k in ("seconds", "peak_mb", "before_mb")))

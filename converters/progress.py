"""Progress of long conversions and verifications, on stderr only (stdout stays clean for --json).

Silent for the first second (``GATEPACK_PROGRESS_DELAY`` seconds, for tests), then one update per
step: a line redrawn in place on a terminal; plain lines otherwise (CI logs), where the steps of a
count (verifying layer k of n) print at most every ``LOG_EVERY`` seconds, and their last one.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


class Progress:
    """Steps of one task (reading, writing, verifying layer k of n ...)."""

    LOG_EVERY = 5.0  # seconds between two counted steps in a log

    def __init__(self, label: str, stream: TextIO | None = None, delay: float | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = float(os.environ.get("GATEPACK_PROGRESS_DELAY", "1.0")) if delay is None else delay
        self.started = time.perf_counter()
        self.shown = False
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last_counted = float("-inf")  # when the last counted step was printed

    def step(self, what: str, done: int | None = None, total: int | None = None) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed < self.delay:
            return
        counted = done is not None and total is not None and done < total
        if counted and not self.tty:
            if elapsed - self.last_counted < self.LOG_EVERY:
                return
            self.last_counted = elapsed
        bar = ""
        if done is not None and total:
            filled = round(20 * done / total)
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total} "
        text = f"{self.label}: {bar}{what} ({elapsed:.1f} s)"
        self.stream.write(("\r\x1b[2K" + text) if self.tty else text + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


class Silent(Progress):
    """No output (--quiet, and the Python API unless asked)."""

    def __init__(self) -> None:
        super().__init__("", stream=sys.stderr, delay=0.0)

    def step(self, what: str, done: int | None = None, total: int | None = None) -> None:
        return None

    def close(self) -> None:
        return None

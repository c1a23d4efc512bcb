"""Atomic output: a failed run leaves nothing behind, and an input is never overwritten."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from converters.errors import UsageError


def refuse_overwriting_inputs(output: Path, inputs: Iterable[Path]) -> None:
    """Raise UsageError if ``output`` is (or would replace) one of ``inputs``."""
    out = Path(output).resolve()
    for source in inputs:
        src = Path(source).resolve()
        if out == src or (out.exists() and src.exists() and os.path.samefile(out, src)):
            raise UsageError(f"{output}: the output would overwrite the input {source}", hint="choose another -o path")


@contextmanager
def atomic_path(target: Path, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; move it onto ``target`` only if the block succeeds.

    With ``directory=True`` the temporary path is a fresh directory and ``target`` is replaced whole.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        if directory and target.is_dir():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_files(target: Path, companions: tuple[str, ...] = ()) -> Iterator[Path]:
    """Like ``atomic_path`` for an artifact made of ``target`` plus files with the same stem and the
    ``companions`` suffixes (e.g. an OpenVINO ``.xml`` and its ``.bin``, an ONNX model's
    ``.onnx.data``): the block writes ``tmp/target.name`` (and its companions) in a temporary
    directory; on success the companions move into place first, the target last. A companion the
    block did not write is optional: a stale one beside the target is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp / target.name
        for suffix in companions:
            written, final = tmp / target.with_suffix(suffix).name, target.with_suffix(suffix)
            if written.exists():
                os.replace(written, final)
            elif final.is_file():
                final.unlink()
        os.replace(tmp / target.name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

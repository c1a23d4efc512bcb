"""Every code block of the README runs, in order, as a newcomer would type it in a checkout (issue 32): the shell
lines with the installed `gatepack` command (the install line apart), the Python block with the package."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from helpers import FIXTURES

README = FIXTURES.parent / "README.md"


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(sh|python)\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_shell_and_python_blocks():
    kinds = [kind for kind, _ in _blocks()]
    assert kinds.count("sh") >= 5 and "python" in kinds


def test_every_readme_code_block_runs_in_order(tmp_path):
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for kind, text in _blocks():
        if kind == "python":
            done = subprocess.run([sys.executable, "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"README's Python block failed:\n{text}\n{done.stderr[-2000:]}"
            continue
        for line in text.splitlines():
            command = line.split("#")[0].strip()
            if not command or command.startswith(("pip ", "python3 -m venv", "cd ", "git ")):
                continue  # installing, not using
            if command.startswith(("pytest", ".venv")):
                continue  # the development section's test run: that is this suite
            done = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"README line failed: {command}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"

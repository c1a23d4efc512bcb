"""The optional lane of Apple's torch-based MIL op cases (not in CI): about 5,000 of Apple's cases take their
expected outputs from torch, which is no test dependency. This makes a scratch virtual environment holding CPU
torch (``pip install torch==2.13.0``; about 900 MB), puts its site-packages after gatepack's own environment on the
path of one run of ``tests/test_mil_apple.py`` (the same plugin, Apple's cases with torch present), and prints the
run's summary. The baseline is compared where it can be: a case pinned as skipped for want of torch may pass.

    python bench/apple_mil_torch.py                        # the default sample (GATEPACK_APPLE_CASES=6)
    python bench/apple_mil_torch.py --venv /tmp/torch-venv --cases 0    # every case
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"


def site_packages(venv: Path) -> Path:
    """The scratch environment's site-packages, made (with CPU torch installed) when absent."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    found = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    if found.returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", TORCH], check=True)
    where = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(where.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=Path("/tmp/gatepack-torch-venv"), help="the scratch environment")
    parser.add_argument("--cases", default="6", help="GATEPACK_APPLE_CASES: cases per Apple test function (0 = all)")
    args = parser.parse_args()
    torch_path = site_packages(args.venv)
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(torch_path)) if p)
    env = dict(os.environ, PYTHONPATH=path, GATEPACK_APPLE_CASES=args.cases)
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:xdist", "-p", "no:cacheprovider"]
    start = time.monotonic()
    done = subprocess.run([*command, "tests/test_mil_apple.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    print("\n".join(line for line in lines if not line.startswith("  ") or "skipped" in line or "failed" in line))
    print(f"exit {done.returncode} after {time.monotonic() - start:.0f} s (torch from {torch_path})")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

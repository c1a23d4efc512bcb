"""The mutation run of gatepack's MIL interpreter (a slow lane, not in CI's default run): each deliberate bug of
``tests/mil_mutations.py`` applied in turn (``GATEPACK_MIL_MUTATION``) while ``pytest -m coreml_proof`` runs the
proof tests (the builder cases against onnxruntime and NumPy, then Apple's cases); a bug is *caught* when a test
fails. Prints one line per mutation and a closing count; exits 1 when any survived.

    python bench/mil_mutations.py                      # every mutation (about 1 to 3 minutes of CPU each)
    python bench/mil_mutations.py ceil_as_floor ...    # the named ones
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from mil_mutations import MUTATION_VARIABLE, MUTATIONS  # noqa: E402

# the fast proof first: with -x a caught mutation stops at its first failure
PROOF_MODULES = ["tests/test_mil_proof.py", "tests/test_mil_apple.py"]


def run_one(name: str, python: str) -> tuple[bool, str, float]:
    """(caught, the first failing test or the reason it was not, seconds) for mutation ``name`` ('' for none)."""
    env = {k: v for k, v in os.environ.items() if k != MUTATION_VARIABLE}
    if name:
        env[MUTATION_VARIABLE] = name
    command = [python, "-m", "pytest", "-m", "coreml_proof", "-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    start = time.monotonic()
    done = subprocess.run([*command, *PROOF_MODULES], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    failed = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    if done.returncode == 1 and failed:
        return True, failed[0].split(" - ")[0], seconds
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    return False, f"exit {done.returncode}: {tail}", seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"mutations to run (default: all {len(MUTATIONS)})")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs pytest")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(MUTATIONS))
    if unknown:
        print(f"unknown mutation(s): {', '.join(unknown)}; known: {', '.join(MUTATIONS)}", file=sys.stderr)
        return 2
    clean, detail, seconds = run_one("", args.python)
    print(f"{'FAILS   ' if clean else 'passes  '} {'(no mutation)':34} {seconds:6.0f} s  {detail}", flush=True)
    if clean:
        print("the proof fails without a mutation: nothing to measure", file=sys.stderr)
        return 2
    survived = 0
    for name in args.names or list(MUTATIONS):
        caught, detail, seconds = run_one(name, args.python)
        survived += not caught
        print(f"{'caught  ' if caught else 'SURVIVED'} {name:34} {seconds:6.0f} s  {detail}", flush=True)
    total = len(args.names or MUTATIONS)
    print(f"{total - survived} caught, {survived} survived of {total} mutations")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

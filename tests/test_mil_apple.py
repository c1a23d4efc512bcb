"""gatepack's MIL interpreter against Apple's own MIL op tests, shipped in the coremltools wheel (9.0:
``coremltools/converters/mil/mil/ops/tests/iOS14`` ... ``iOS18``). Each case computes its expected
outputs itself (NumPy, SciPy), not from gatepack. ``tests/apple_mil_plugin.py`` runs a sample of them in
a pytest subprocess with the interpreter in place of Core ML and records, per case, the op types of the
program the interpreter ran and the outcome; this module asserts on those records."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from apple_mil_plugin import (
    APPLE_TESTS,
    BLOCK_OPS,
    CASES_VARIABLE,
    DEFAULT_CASES,
    FP16_VALUE_CASES,
    RECORD_VARIABLE,
    UNRUN_OP,
    interpreted_op_types,
)
from mil_coverage import APPLE_FP16, ROWS, emitted, proof_of, table

pytestmark = pytest.mark.coreml_proof
COVERAGE_DOC = Path(__file__).resolve().parent.parent / "docs" / "mil_coverage.md"
COVERAGE_VARIABLE = "GATEPACK_MIL_COVERAGE"

# Every sampled case's outcome, pinned: one line per Apple test function, one letter per case (its parametrizations
# in sorted order). Rewritten by GATEPACK_APPLE_BASELINE=write (then review the diff).
BASELINE = Path(__file__).parent / "expected" / "apple_mil_baseline.txt"
BASELINE_VARIABLE = "GATEPACK_APPLE_BASELINE"
LETTERS = {
    "P": "passed, compared on the interpreter",
    "p": "passed without reaching the interpreter's comparison (a case checking types only)",
    "T": "skipped: its expected outputs come from torch or TensorFlow, which are not installed",
    "S": "skipped for another reason (an op the interpreter does not run, Apple's own skip)",
    "X": "xfailed (Apple's known Core ML bug, or a refusal or unreadable package listed in the plugin)",
    "U": "xpassed",
    "F": "failed",
}
PRODUCER_ABSENT = ("PyTorch not found", "TensorFlow 2.x not found", "the case uses torch.", "No module named 'torch'")

# Apple's op test modules (one per topic and iOS directory, where the wheel has one) whose ops overlap
# the interpreter's.
TOPICS = (
    "activation",
    "elementwise_binary",
    "elementwise_unary",
    "linear",
    "normalization",
    "conv",
    "pool",
    "reduction",
    "scatter_gather",
    "tensor_operation",
    "tensor_transformation",
    "control_flow",
    "recurrent",
    "constexpr_ops",  # iOS16: constexpr_affine_dequantize, constexpr_lut_to_dense (compressed weights)
    "compression",  # iOS18: constexpr_blockwise_shift_scale, constexpr_lut_to_dense
)

# Op types the interpreter is expected to run (or to refuse: cond) without a passed Apple case, and why.
WITHOUT_APPLE_CASE = {
    "fill": "Apple's fill cases either give it a constant shape, which the conversion folds into a constant, or a "
    "dynamic one, which makes the output's rank unknown: coremltools' reader of saved programs refuses those "
    "('Variadic dimensions not yet implemented'); tests/test_mil_proof.py::test_fill_from_a_run_time_shape checks "
    "it as gatepack writes it",
    "lstm": "every Apple lstm case sets clip (which the interpreter refuses, docs/conventions.md §8) or takes its "
    "expected outputs from torch, not a test dependency (those run when torch is installed); "
    "tests/test_mil_proof.py::test_lstm checks the op against onnxruntime",
    "rnn": "Apple's rnn cases take their expected outputs from torch, not a test dependency (they run when torch "
    "is installed); tests/test_mil_proof.py::test_rnn checks the op against onnxruntime",
    "conv_transpose": "Apple's conv_transpose cases are skipped without torch, which gives their expected outputs "
    "(they run when torch is installed); tests/test_mil_proof.py::test_conv_transpose checks the op against "
    "onnxruntime",
    "ceil": "coremltools 9.0's unary smoke test handles mode 'ceil' but leaves it out of its parameter list; its one "
    "ceil case evaluates the builder without a backend; tests/test_mil_proof.py checks it against onnxruntime "
    "in fp32 and fp16",
    "logical_and": "no Apple op test builds logical_and/or/xor/not (coremltools 9.0); tests/test_mil_proof.py checks "
    "them against onnxruntime's And/Or/Xor/Not",
    "logical_or": "as logical_and",
    "logical_xor": "as logical_and",
    "logical_not": "as logical_and",
    "read_state": "Apple's state cases (iOS18/test_states.py) raise in coremltools itself off macOS 15 ('State "
    "functionality is only supported on macOS 15+') before their comparison; tests/test_mil_proof.py and "
    "tests/test_streaming.py check "
    "read_state and coreml_update_state in stateful packages against onnxruntime over 100 calls",
    "coreml_update_state": "as read_state",
}


def apple_modules() -> tuple[str, list[str]]:
    """(coremltools' version, the op test modules its wheel ships for ``TOPICS``); skips when it has none."""
    from gatepack.converters.errors import RuntimeFailure
    from gatepack.converters.formats.coreml.registration import coremltools

    try:
        ct = coremltools()
    except RuntimeFailure as err:  # coremltools is not installed
        pytest.skip(err.one_line())
    root = Path(ct.__file__).parent / Path(*APPLE_TESTS.split(".")[1:])
    found = sorted(
        f"{APPLE_TESTS}.{version.name}.test_{topic}"
        for version in root.glob("iOS*")
        for topic in TOPICS
        if (version / f"test_{topic}.py").is_file()
    )
    if not found or not (root / "testing_utils.py").is_file():
        pytest.skip(f"the installed coremltools {ct.__version__} wheel does not ship its MIL op tests under {root}")
    return ct.__version__, found


@pytest.fixture(scope="module")
def apple_run(tmp_path_factory) -> dict:
    """Apple's sampled cases run once in a subprocess: {'version', 'cases', 'collect_errors', 'output'}."""
    version, modules = apple_modules()
    where = tmp_path_factory.mktemp("apple_mil")
    (where / "pytest.ini").write_text("[pytest]\n")
    record = where / "record.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    env[RECORD_VARIABLE] = str(record)
    command = [sys.executable, "-m", "pytest", "-p", "apple_mil_plugin", "-p", "no:cacheprovider", "-q", "-W", "ignore"]
    command += ["-c", str(where / "pytest.ini"), "--rootdir", str(where), "--continue-on-collection-errors"]
    done = subprocess.run(
        [*command, "--pyargs", *modules], cwd=where, env=env, capture_output=True, text=True, timeout=1800
    )
    tail = "\n".join(done.stdout.splitlines()[-15:] + done.stderr.splitlines()[-15:])
    # 0: all passed; 1: some failed or a module was not importable (both asserted below); more: pytest broke.
    assert done.returncode in (0, 1) and record.is_file(), f"the run of Apple's cases broke:\n{tail}"
    records = json.loads(record.read_text())
    return {
        "version": version,
        "cases": [r for r in records if "case" in r],
        "collect_errors": [r for r in records if "collect_error" in r],
        "output": tail,
    }


def interpreter_passes(cases: list[dict]) -> Counter:
    """Per op type, the passed cases in which the interpreter ran a program holding it."""
    return Counter(op for case in cases if case["outcome"] == "passed" and case["compared"] for op in case["ops"])


def summary(run: dict) -> str:
    """Per op the interpreter runs: passed / skipped / failed cases holding it; then the skip reasons."""
    cases, passes = run["cases"], interpreter_passes(run["cases"])
    outcomes = ", ".join(f"{n} {outcome}" for outcome, n in Counter(c["outcome"] for c in cases).most_common())
    compared = sum(1 for c in cases if c["compared"])
    lines = [f"Apple's MIL op tests (coremltools {run['version']}): {outcomes}; {compared} ran on the interpreter"]
    for op in sorted(interpreted_op_types() | BLOCK_OPS):
        holding = [c for c in cases if op in c["ops"] or op in c["built_ops"]]
        counts = Counter(c["outcome"] for c in holding)
        lines.append(f"  {op:18} passed {passes[op]:4}  skipped {counts['skipped']:4}  failed {counts['failed']:3}")
    skipped = [c["reason"] for c in cases if c["outcome"] == "skipped"]
    unrun = [r for r in skipped if r.endswith(UNRUN_OP)]
    reasons = Counter(r[:160] for r in skipped if not r.endswith(UNRUN_OP))
    ops = sorted({op for r in unrun for op in r.removeprefix("op ").split(":")[0].split(", ")})
    lines.append(f"  skipped {len(unrun):4}: ops the interpreter does not run ({', '.join(ops)})")
    lines += [f"  skipped {n:4}: {reason}" for reason, n in reasons.most_common()]
    lines += [f"  not importable: {e['collect_error']} ({e['reason']})" for e in run["collect_errors"]]
    return "\n".join(lines)


def letter(case: dict) -> str:
    """The case's outcome as one of ``LETTERS``."""
    outcome = case["outcome"]
    if outcome == "passed":
        return "P" if case["compared"] else "p"
    if outcome == "skipped":
        return "T" if any(text in case["reason"] for text in PRODUCER_ABSENT) else "S"
    return {"xfailed": "X", "xpassed": "U"}.get(outcome, "F")


def baseline_text(run: dict) -> str:
    """The run's outcomes in the baseline's form: a header naming the configuration, then per test function its
    letters in the sorted order of its case names."""
    tests: dict[str, list[tuple[str, str]]] = {}
    for case in run["cases"]:
        function = case["case"].split("[")[0]
        tests.setdefault(function, []).append((case["case"], letter(case)))
    legend = [f"# {key} {meaning}" for key, meaning in LETTERS.items()]
    head = [
        f"# Apple's MIL op cases (coremltools {run['version']}, {CASES_VARIABLE}={DEFAULT_CASES}) on gatepack's "
        "MIL interpreter: one line per test function, one letter per case in the sorted order of its ids",
        *legend,
    ]
    rows = [f"{name} {''.join(k for _, k in sorted(cases))}" for name, cases in sorted(tests.items())]
    return "\n".join(head + rows) + "\n"


def baseline_cases(text: str) -> dict[str, str]:
    """{test function: letters} from the baseline's text."""
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _may_differ(function: str, pinned: str, now: str) -> bool:
    """Outside the default configuration: a case skipped for want of torch may have any outcome, and a listed
    fp16-valued function's pass and xfail may trade places (with torch its expected values come from torch)."""
    fp16_valued = function.split("::", 1)[-1] in FP16_VALUE_CASES and {pinned, now} <= {"P", "X"}
    return pinned == "T" or fp16_valued


def test_every_case_keeps_its_pinned_outcome(apple_run):
    """A case whose outcome differs from the baseline fails the test, a pass turning into a skip or an xfail
    included. Outside the default configuration (another sample, torch installed) the cases both hold are compared
    and a torch/TensorFlow skip may pass."""
    now = baseline_text(apple_run)
    if os.environ.get(BASELINE_VARIABLE) == "write":
        BASELINE.write_text(now)
    pinned = baseline_cases(BASELINE.read_text())
    if f"coremltools {apple_run['version']}," not in BASELINE.read_text().splitlines()[0]:
        pytest.skip(f"the baseline pins coremltools 9.0's cases, not {apple_run['version']}'s")
    torch_absent = importlib.util.find_spec("torch") is None
    default = os.environ.get(CASES_VARIABLE, str(DEFAULT_CASES)) == str(DEFAULT_CASES) and torch_absent
    changed = []
    for function, letters in baseline_cases(now).items():
        before = pinned.get(function)
        if before is None:
            changed += [f"{function}: not in the baseline"] if default else []
        elif before != letters and (default or len(before) == len(letters)):
            pairs = zip(before, letters) if len(before) == len(letters) else [(before, letters)]
            if not all(b == n or (not default and _may_differ(function, b, n)) for b, n in pairs):
                changed.append(f"{function}: pinned {before}, now {letters}")
    if default:
        changed += [
            f"{function}: pinned {pinned[function]}, not run" for function in pinned.keys() - baseline_cases(now).keys()
        ]
    legend = "; ".join(f"{k} {v}" for k, v in LETTERS.items())
    assert not changed, f"outcomes differ from {BASELINE.name} ({legend}):\n" + "\n".join(changed)


def test_apple_cases_agree_with_the_interpreter(apple_run):
    print(summary(apple_run))
    failed = [f"{c['case']}: {c['reason']}" for c in apple_run["cases"] if c["outcome"] == "failed"]
    assert not failed, "the interpreter disagrees with Apple's cases:\n" + "\n".join(failed)
    assert sum(1 for c in apple_run["cases"] if c["compared"]) >= 100, apple_run["output"]


def test_apple_modules_are_importable_but_for_missing_optional_packages(apple_run):
    """A module may need a package that is not a test dependency (torch); anything else is a harness fault."""
    broken = [e for e in apple_run["collect_errors"] if not e["reason"].startswith("ModuleNotFoundError")]
    assert not broken, broken


def test_every_op_the_interpreter_runs_passes_an_apple_case(apple_run):
    """Every op type in the interpreter's table (read now: ops other modules add count too), plus the
    block ops, has a passed Apple case, or a reason in ``WITHOUT_APPLE_CASE``."""
    passes = interpreter_passes(apple_run["cases"])
    required = interpreted_op_types() | BLOCK_OPS
    missing = sorted(op for op in required if not passes[op] and op not in WITHOUT_APPLE_CASE)
    assert not missing, f"ops without a passed Apple case: {missing}\n{summary(apple_run)}"


def proof_failures(run: dict, rows: set[tuple[str, str, str]]) -> list[str]:
    """The coverage rows whose proof does not hold: no passed Apple case holding the op (on an fp16 backend for an
    ``apple:fp16`` row), or no ``coreml_proof`` test of that name in tests/test_mil_proof.py."""
    import test_mil_proof

    passed = [c for c in run["cases"] if c["outcome"] == "passed" and c["compared"]]
    on_fp16 = Counter(op for c in passed if c["precision"] == "fp16" for op in c["ops"])
    everywhere = interpreter_passes(run["cases"])
    failures = []
    for row in sorted(rows):
        proof = proof_of(row)
        if proof.startswith("test:"):
            holds = callable(getattr(test_mil_proof, proof.removeprefix("test:"), None))
        else:
            holds = bool((on_fp16 if proof == APPLE_FP16 else everywhere)[row[0]])
        failures += [] if holds else [f"{' '.join(v for v in row if v)}: {proof} does not hold"]
    return failures


def test_every_op_and_value_gatepack_writes_has_a_proof(apple_run):
    """The coverage table (tests/mil_coverage.py, generated into docs/mil_coverage.md): every MIL op and behaviour
    value gatepack's writers emit has a case comparing the interpreter with a source other than itself."""
    rows = emitted(interpreted_op_types() | BLOCK_OPS)
    text = table(rows)
    if os.environ.get(COVERAGE_VARIABLE) == "write":
        COVERAGE_DOC.write_text(text)
    assert not proof_failures(apple_run, rows), "\n".join(proof_failures(apple_run, rows))
    stale = sorted(set(ROWS) - rows)
    assert not stale, f"rows for what gatepack no longer writes: {stale}"
    assert COVERAGE_DOC.read_text() == text, f"{COVERAGE_DOC} is stale: run with {COVERAGE_VARIABLE}=write"


def test_the_sample_is_bounded_and_configurable():
    """The plugin's sample: at most the cap per function, fp32 first with one fp16 case, evenly spread."""
    from apple_mil_plugin import DEFAULT_CASES, _spread, sample

    class Case:
        def __init__(self, precision: str, k: int) -> None:
            backend = type("Backend", (), {"backend": "mlprogram", "precision": precision})()
            self.callspec = type("Spec", (), {"params": {"backend": backend, "k": k}})()

    items = [Case("fp16", k) for k in range(10)] + [Case("fp32", k) for k in range(10)]
    kept = sample(items, DEFAULT_CASES)
    assert len(kept) == DEFAULT_CASES == 6 and CASES_VARIABLE == "GATEPACK_APPLE_CASES"
    assert [c.callspec.params["k"] for c in kept[:-1]] == [0, 2, 4, 7, 9] and kept[-1] in items[:10]
    assert sample(items, 0) == items and _spread(list(range(5)), 1) == [2] and _spread([1, 2], 6) == [1, 2]

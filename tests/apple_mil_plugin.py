"""A pytest plugin that runs Apple's own MIL op tests (shipped in the coremltools wheel, under
``coremltools/converters/mil/mil/ops/tests/iOS*/``) against gatepack's NumPy MIL interpreter.

Each of Apple's cases builds a MIL program, converts it with ``ct.convert`` and hands the model, its
inputs and the expected outputs (computed by the case with NumPy, SciPy or torch, not by gatepack) to
``compare_backend``, which runs Core ML on macOS and does nothing elsewhere. Loaded with
``-p apple_mil_plugin`` into a pytest run over those modules, this plugin

* replaces ``compare_backend`` by :func:`compare_on_interpreter`: the saved package is run with
  ``running.run_numpy`` and compared at Apple's tolerances, widened only where Apple's ``compare_backend``
  widens them (an fp16 backend, a compute unit other than the CPU);
* skips a case whose program holds an op the interpreter does not run (checked on the built program
  before the conversion, which is the slow part); a case the interpreter refuses (its ``UsageError``) or
  whose saved package cannot be read back FAILS, unless the refusal or the reader's message is in
  ``REFUSALS`` / ``UNREADABLE`` with the reason (then it is an xfail naming that reason, never a pass);
* keeps a deterministic sample of each test function's parametrizations (:func:`sample`, at most
  ``GATEPACK_APPLE_CASES`` per function, default 6, 0 = all);
* writes one record per case (the op types of the programs the case built and of those the interpreter
  ran, the outcome, the reason) to the JSON file named by ``GATEPACK_APPLE_RECORD``.

The interpreter's op table is read when the plugin starts, so ops added to it are tested automatically.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

CASES_VARIABLE = "GATEPACK_APPLE_CASES"
RECORD_VARIABLE = "GATEPACK_APPLE_RECORD"
DEFAULT_CASES = 6
APPLE_TESTS = "coremltools.converters.mil.mil.ops.tests"
# Ops the interpreter's block runner handles itself (not in the op table); an op listed here that it does
# not run reaches the interpreter, which refuses it (a skip with its own reason).
BLOCK_OPS = frozenset({"const", "while_loop", "cond"})
UNRUN_OP = "not one gatepack's MIL interpreter runs (seen before conversion)"

# Apple's test functions that check how the Core ML runtime fails on bad input (with pytest.raises around
# the comparison), not what an op computes: out of scope for an interpreter of the ops' values.
RUNTIME_FAILURE_TESTS = {
    "test_ios17_invalid_indices": "checks how Core ML's runtime fails on out-of-range indices (an error, or values "
    "that differ), not what the op computes",
}

# The interpreter's refusals Apple's cases may meet, by the start of the refusal's message (which names the op),
# with the reason; any other refusal fails the case.
REFUSALS = {
    "lstm op with clip": "MIL lstm's clip bounds the cell state after each update; gatepack never writes it (ONNX's "
    "clip bounds the gates' inputs, a different equation) and its interpreter refuses it rather than guess",
}

# coremltools' own reader of saved programs (which gatepack uses) stops short of some programs its writer saves,
# by the start of the reader's message, with the reason; any other unreadable package fails the case.
UNREADABLE = {
    "Variadic dimensions not yet implemented": "fill with a shape computed at run time has an output of unknown rank, "
    "which coremltools 9.0's reader of saved programs does not implement (gatepack never writes it)",
    "In op, of type batch_norm": "a batch_norm whose mean/variance/epsilon are fp16 in an fp32 program (Apple's "
    "mixed-precision case): coremltools 9.0's reader rejects the saved program's input types",
}

# Apple's fp32-backend test functions some of whose cases type the program's values fp16 (input, weights) while their
# expected values come from the unrounded fp32 numbers, with why no correct interpreter meets Apple's fp32 tolerance
# there. Such a case missing the tolerance is an xfail when its program holds an fp16 value (the same function's
# fp32 cases are compared at the tight tolerance); any other miss fails.
FP16_VALUE_CASES = {
    "TestNormalizationInstanceNorm::test_builder_to_backend_smoke": "an fp16 output: even the expected value "
    "rounded to fp16 (-1.71525 -> -1.71484) misses atol 1e-4",
    "TestNormalizationInstanceNorm::test_builder_to_backend_smoke_with_gamma_and_beta": "gamma and beta fp16 "
    "(3.2 -> 3.1992) or an fp16 output, the expected values from the unrounded fp32 numbers",
    "TestGRU::test_builder_to_backend_smoke": "an fp16 program (dtype=float16): eight fp16 roundings per step, the "
    "expected values from fp64",
    # with torch installed (bench/apple_mil_torch.py): expected values from torch in fp32
    "TestConv::test_builder_to_backend_stress": "x or weights fp16 (x_weight_dtype), torch's output from fp32 ones",
    "TestConvTranspose::test_builder_to_backend_stress": "x or weights fp16 (x_weight_dtype), torch's output from "
    "fp32 ones",
    "TestLSTM::test_builder_to_backend_smoke_unilstm": "an fp16 program (dtype=float16), torch's output in fp32",
    "TestLSTM::test_builder_to_backend_smoke_bidirlstm": "an fp16 program (dtype=float16), torch's output in fp32",
    "TestRNN::test_builder_to_backend_smoke": "an fp16 program (dtype=float16), torch's output in fp32",
}

_RECORDS: dict[str, dict] = {}
_CURRENT: dict[str, dict | None] = {"case": None}


def interpreted_op_types() -> set[str]:
    """The MIL op types gatepack's interpreter runs, read from its op table now (modules that add ops
    merge them into it when the Core ML format is imported)."""
    import gatepack.converters.formats.coreml  # noqa: F401  (loads every module that extends the table)
    from gatepack.converters.formats.coreml.interpreter import _MIL_OPS

    return set(_MIL_OPS)


# ------------------------------------------------------------------------------------------ sampling


def _precision(item) -> str | None:
    """The case's backend precision ('fp32'/'fp16'), or None when it runs no ML Program backend."""
    backend = getattr(item, "callspec", None) and item.callspec.params.get("backend")
    if hasattr(backend, "backend"):  # BackendConfig
        kind, precision = backend.backend, backend.precision
    elif isinstance(backend, tuple) and len(backend) == 2:  # the older (backend, precision) pairs
        kind, precision = backend
    else:  # no backend, or an empty parametrization
        return None
    return precision if kind == "mlprogram" else None


def _spread(items: list, count: int) -> list:
    """``count`` items evenly spaced over ``items`` (first and last included; one: the middle one)."""
    if count <= 0:
        return []
    if len(items) <= count:
        return list(items)
    if count == 1:
        return [items[len(items) // 2]]
    picks = sorted({round(i * (len(items) - 1) / (count - 1)) for i in range(count)})
    return [items[i] for i in picks]


def sample(items: list, cap: int) -> list:
    """The parametrizations of one test function that run: all when ``cap`` is 0, else at most ``cap``,
    fp32 cases preferred (the interpreter's exactness) with one slot kept for an fp16 case when the
    function has both (fp16 programs: casts and fp16 arithmetic, at Apple's widened tolerance)."""
    if cap == 0:
        return list(items)
    fp32 = [item for item in items if _precision(item) == "fp32"]
    fp16 = [item for item in items if _precision(item) == "fp16"]
    if not fp32 or not fp16 or cap == 1:
        return _spread(fp32 or fp16, cap)
    return _spread(fp32, cap - 1) + _spread(fp16, 1)


def _cap() -> int:
    text = os.environ.get(CASES_VARIABLE, str(DEFAULT_CASES))
    if not text.isdigit():
        raise pytest.UsageError(f"{CASES_VARIABLE}={text!r}: expected a whole number of cases per test (0 = all)")
    return int(text)


def _named_ops(item, op_types: set[str]) -> tuple[str, ...]:
    """The interpreter's op types a case names in its parameters (``mode="exp"``, ``op_name="log"``; the reduction
    and logical tests name theirs without the prefix: ``mode="sum"`` for ``reduce_sum``)."""
    named = set()
    for value in item.callspec.params.values():
        if isinstance(value, str):
            named |= {op for op in (value, f"reduce_{value}", f"logical_{value}") if op in op_types}
    return tuple(sorted(named))


def pytest_collection_modifyitems(session, config, items) -> None:
    """Keep, per test function, the sample of its ML Program cases (per op the interpreter runs, for a
    function parametrized over op names); cases without a backend (type inference, builder evaluation)
    do not reach the interpreter and are deselected."""
    cap, op_types = _cap(), interpreted_op_types()
    groups: dict[tuple, list] = {}
    for item in items:
        if _precision(item) is not None:
            key = (item.module.__name__, item.cls.__name__ if item.cls else "", item.originalname)
            groups.setdefault(key + _named_ops(item, op_types), []).append(item)
    kept = {id(item) for group in groups.values() for item in sample(group, cap)}
    for item in items:
        if item.originalname in RUNTIME_FAILURE_TESTS:
            item.add_marker(pytest.mark.skip(reason=RUNTIME_FAILURE_TESTS[item.originalname]))
    _stand_in_for_torch()
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
    items[:] = [item for item in items if id(item) in kept]


# ------------------------------------------------------------------------------------------ records


class _TorchAbsent:
    """Stands for ``torch`` in an Apple test module that imports it only when installed: the seeding call
    some cases make before drawing their data with NumPy (``torch.manual_seed``) does nothing, and any
    other use skips the case, since its expected outputs would come from torch."""

    @staticmethod
    def manual_seed(seed: int) -> None:
        return None

    def __getattr__(self, name: str):
        if name.startswith("__"):  # Python's and pytest's own probing
            raise AttributeError(name)
        pytest.skip(f"the case uses torch.{name} (its expected outputs come from torch), which is not installed")


def _stand_in_for_torch() -> None:
    """Without torch, every loaded Apple test module that would have imported it (a test method runs in
    the module that defines it, often an older iOS directory's) gets the stand-in."""
    try:
        import torch  # noqa: F401
    except ImportError:
        for name, module in list(sys.modules.items()):
            if name.startswith(APPLE_TESTS + ".") and module is not None and not hasattr(module, "torch"):
                module.torch = _TorchAbsent()


def _case_name(item) -> str:
    module = item.module.__name__.removeprefix(APPLE_TESTS + ".")
    return f"{module}::{item.cls.__name__ if item.cls else ''}::{item.name}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    case = {
        "case": _case_name(item),
        "module": item.module.__name__.removeprefix(APPLE_TESTS + "."),
        "test": f"{item.cls.__name__ if item.cls else ''}::{item.originalname}",
        "precision": _precision(item),
        "ops": [],  # op types of the programs the interpreter ran (after conversion)
        "built_ops": [],  # op types of the programs the case built (before conversion)
        "compared": 0,
        "outcome": None,
        "reason": "",
    }
    _RECORDS[item.nodeid + "|" + case["case"]] = case
    _CURRENT["case"] = case


def pytest_runtest_logreport(report) -> None:
    case = _CURRENT["case"]
    if case is None or not (report.when == "call" or report.outcome != "passed"):
        return
    if case["outcome"] in (None, "passed"):
        xfail = hasattr(report, "wasxfail")  # Apple expects Core ML to fail the case (a known runtime bug)
        case["outcome"] = ("xpassed" if report.passed else "xfailed") if xfail else report.outcome
        if xfail:
            case["reason"] = str(report.wasxfail)
        elif report.skipped and isinstance(report.longrepr, tuple):
            case["reason"] = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            case["reason"] = " ".join(str(crash.message if crash else report.longreprtext).split())[:400]


def pytest_collectreport(report) -> None:
    """A module that cannot be imported (a missing dependency of Apple's tests) is recorded, not lost."""
    if report.failed:
        lines = report.longreprtext.strip().splitlines() or [""]
        found = re.search(r"mil/ops/tests/(\S+?)\.py", report.longreprtext)
        module = found.group(1).replace("/", ".") if found else report.nodeid
        _RECORDS["collect|" + module] = {"collect_error": module, "reason": lines[-1].removeprefix("E").strip()[:400]}


def pytest_sessionfinish(session) -> None:
    path = os.environ.get(RECORD_VARIABLE)
    if path:
        Path(path).write_text(json.dumps(list(_RECORDS.values()), indent=1))


# ----------------------------------------------------------------------- the replaced harness functions


def _program_op_types(block) -> set[str]:
    """Op types of a MIL block and of the blocks nested in its ops."""
    found = set()
    for op in block.operations:
        found.add(op.op_type)
        for inner in op.blocks:
            found |= _program_op_types(inner)
    return found


def _skip_unrun_ops(program) -> None:
    """Skip the case before its conversion when the built program holds an op the interpreter does not
    run (the conversion passes do not turn such an op into ones it runs)."""
    built = set().union(*(_program_op_types(function) for function in program.functions.values()))
    if _CURRENT["case"] is not None:
        _CURRENT["case"]["built_ops"] = sorted(set(_CURRENT["case"]["built_ops"]) | built)
    missing = sorted(built - interpreted_op_types() - BLOCK_OPS)
    if missing:
        pytest.skip(f"op {', '.join(missing)}: {UNRUN_OP}")


def _checked_convert(original):
    """The harness's conversion, after the check for ops the interpreter does not run, with the heap that
    exists frozen (as gatepack converts: the full collection ``ct.convert`` forces stays short)."""
    from gatepack.converters.formats.coreml.common import _heap_frozen

    def convert(program, *args, **kwargs):
        if kwargs.get("source") == "milinternal":
            _skip_unrun_ops(program)
        with _heap_frozen():
            return original(program, *args, **kwargs)

    return convert


def _feed(input_key_values: dict) -> dict:
    """The inputs as Apple's harness hands them to Core ML: float32 arrays, a scalar as one element
    (the interpreter then casts each to the input's declared type, as Core ML does)."""
    feed = {}
    for name, value in input_key_values.items():
        if not isinstance(value, (np.ndarray, np.generic, int, float, bool)):
            pytest.skip(f"input {name!r} is a {type(value).__name__} (an image): the harness feeds arrays only")
        value = np.asarray(value)
        feed[name] = value.astype(np.float32) if value.shape else np.array([value], np.float32)
    return feed


def _output(produced: dict, name: str):
    from coremltools.converters.mil.mil.passes.defs.preprocess import NameSanitizer  # Core ML's output names

    for candidate in (name, NameSanitizer._replace_invalid_char_with_underscore(name)):
        if candidate in produced:
            return produced[candidate]
    raise AssertionError(f"output {name!r} was not produced by the interpreter (it produced {sorted(produced)})")


def _known_or_fail(known: dict[str, str], what: str, message: str, path: Path) -> None:
    """A refusal or an unreadable package: an xfail naming the committed reason when ``known`` lists the start of
    its message, else a failure of the case."""
    message = message.replace(f"{path}: ", "")
    for start, reason in known.items():
        if start in message:
            pytest.xfail(f"{what}: {message[:160]} (listed: {reason})")
    pytest.fail(f"{what}, and the plugin does not list why: {message}", pytrace=False)


def _fp16_valued(function) -> str | None:
    """The reason in ``FP16_VALUE_CASES`` when the current case is listed and its program holds an fp16 value."""
    from gatepack.converters.formats.coreml.common import _mil_types, _ops

    case = _CURRENT["case"]
    reason = FP16_VALUE_CASES.get(case["test"]) if case is not None else None
    fp16 = any(v.dtype == _mil_types().fp16 for op in _ops(function) for v in op.outputs)
    return reason if fp16 else None


def compare_on_interpreter(
    mlmodel,
    input_key_values,
    expected_outputs,
    dtype="fp32",
    atol=1e-04,
    rtol=1e-05,
    also_compare_shapes=True,
    state=None,
    allow_mismatch_ratio=0.0,
):
    """``compare_backend`` with gatepack's interpreter as the backend: the same checks (shapes, a
    scalar output may come as one element) and the same tolerances (``atol = max(100 atol, 0.5)``,
    ``rtol = max(100 rtol, 0.05)`` for fp16 or a compute unit other than the CPU, as Apple's; nothing wider)."""
    import coremltools as ct

    from gatepack.converters.errors import InputError, UsageError
    from gatepack.converters.formats.coreml.package import _load_program
    from gatepack.converters.formats.coreml.running import run_numpy

    if state is not None:
        pytest.skip("a stateful model (MIL state ops), which gatepack's MIL interpreter does not run")
    if not mlmodel.is_package or mlmodel.package_path is None:
        pytest.skip("not an ML Program package")
    path = Path(mlmodel.package_path)
    try:
        function, _ = _load_program(path)
    except InputError as err:  # coremltools' own reader of saved programs stops short of some of them
        _known_or_fail(UNREADABLE, "gatepack cannot read the saved program back", err.one_line(), path)
    case = _CURRENT["case"]
    if case is not None:
        case["ops"] = sorted(set(case["ops"]) | _program_op_types(function))
    if expected_outputs is None:
        return None
    try:
        produced = run_numpy(path, _feed(input_key_values))
    except UsageError as err:
        _known_or_fail(REFUSALS, "the interpreter refuses the program", err.one_line(), path)
    if mlmodel.compute_unit != ct.ComputeUnit.CPU_ONLY or dtype == "fp16":  # Apple's rule, and nothing wider
        atol, rtol = max(atol * 100.0, 5e-1), max(rtol * 100.0, 5e-2)
    for name, expected in expected_outputs.items():
        got = _output(produced, name)
        expected = np.asarray(expected)
        if also_compare_shapes and not (expected.shape == () and got.shape == (1,)):
            assert got.shape == expected.shape, f"output {name}: expected shape {expected.shape}, got {got.shape}"
        close = np.isclose(got, expected, atol=atol, rtol=rtol)
        if not close.all() and (fp16_reason := _fp16_valued(function)):
            pytest.xfail(
                f"output {name} misses Apple's fp32 tolerance in an fp16-valued program (listed: {fp16_reason})"
            )
        if not close.all() and (~close).sum() / max(expected.size, 1) > allow_mismatch_ratio:
            np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol, err_msg=f"output {name}")
    if case is not None:
        case["compared"] += 1
    return produced


def pytest_configure(config) -> None:
    """Replace the harness's comparison (where ``run_compare_builder`` looks it up, and its source) and
    its conversion (to skip programs with ops the interpreter does not run before converting them)."""
    # Apple's harness reads these when its testing_reqs module is imported (below): ML Programs only, in
    # fp32 as well as fp16.
    os.environ["PYMIL_TEST_TARGETS"] = "mlprogram"
    os.environ["INCLUDE_MIL_FP32_UNIT_TESTS"] = "1"
    from gatepack.converters.formats.coreml.registration import coremltools

    coremltools()  # imported quietly first
    from mil_mutations import apply_from_environment

    apply_from_environment()  # bench/mil_mutations.py's deliberate interpreter bug, in this subprocess too
    import coremltools.converters.mil.mil.ops.tests.testing_utils as op_testing
    import coremltools.converters.mil.testing_utils as testing

    for module in (op_testing, testing):
        module.compare_backend = compare_on_interpreter
    op_testing.ct_convert = _checked_convert(testing.ct_convert)

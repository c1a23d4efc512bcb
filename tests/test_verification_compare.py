"""verification.compare's numbers: max abs is max |a - b|; max rel is max |a - b| / |b| over the entries where
|b| > atol (entries near zero are judged by atol alone; a ratio to them says nothing)."""

from __future__ import annotations

import numpy as np

from gatepack.converters.verification import Verification, compare


def test_outputs_near_zero_give_no_meaningless_relative_error():
    """An output that is ~0 (1e-300, as DeepFilterNet3's gave 2.44e+306) does not decide max rel."""
    expected = np.array([1e-300, 0.0, 0.5, -2.0])
    actual = np.array([1e-7, 3e-8, 0.5 + 5e-6, -2.0 - 1e-6])
    found = compare("gru", "Y", actual, expected, ("float32",))
    assert found.passed
    np.testing.assert_allclose(found.max_abs_error, 5e-6, rtol=1e-9)
    np.testing.assert_allclose(found.max_rel_error, 1e-5, rtol=1e-9)  # 5e-6 / 0.5, by hand


def test_relative_error_over_the_entries_above_atol_by_hand():
    """Against an independent transcription of the definition, on random data straddling atol."""
    rng = np.random.default_rng(0)
    expected = rng.standard_normal(200) * np.logspace(-9, 1, 200)
    actual = expected + rng.standard_normal(200) * 1e-6
    found = compare("gru", "Y", actual, expected, ("float32",))
    above = [abs(a - b) / abs(b) for a, b in zip(actual, expected) if abs(b) > found.atol]
    np.testing.assert_allclose(found.max_rel_error, max(above), rtol=1e-12)
    assert found.max_rel_error < 1.0  # the entries at 1e-9 alone would give ~1e3


def test_all_entries_below_atol_give_zero_and_the_summary_says_so():
    found = compare("gru", "Y_h", np.array([2e-6, 0.0]), np.array([1e-300, 1e-7]), ("float32",))
    assert found.passed and found.max_rel_error == 0.0
    result = Verification("a.onnx", "b.xml", 0, [found])
    assert "max rel 0 " in result.to_text()


def test_a_measuring_comparison_still_gives_the_relative_error():
    """The accuracy gate measures against the float source with an unbounded tolerance (atol 1e300), judged
    afterwards: its max rel is still over the entries above float32's atol (it printed 'max rel 0' on every line)."""
    from gatepack.converters.accuracy import UNBOUNDED

    expected = np.array([0.5, -2.0, 1e-9])
    actual = np.array([0.51, -2.0, 0.0])
    found = compare("(whole model)", "out", actual, expected, ("float32",), tolerance=UNBOUNDED)
    np.testing.assert_allclose(found.max_rel_error, 0.02, rtol=1e-9)  # 0.01 / 0.5, by hand

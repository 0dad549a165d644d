"""The "zero is inside the 95% interval" flag of the benchmarks' paired bootstrap agrees with the interval the tables
print (issue 30, item 6): bounds are rounded to ``CI_RESOLUTION`` first. Expected values are stated, not recomputed."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_utils import CI_RESOLUTION, paired_bootstrap_metrics, rounded_interval  # noqa: E402


@pytest.mark.parametrize(
    ("low", "high", "interval", "zero_in"),
    [
        (-0.1333, -5.55e-18, [-0.1333, 0.0], True),  # float noise around an exact 0: printed [-13.3, -0.0] before
        (-0.1333, -1e-4, [-0.1333, -1e-4], False),
        (3e-13, 0.2, [0.0, 0.2], True),
        (2e-9, 0.2, [2e-9, 0.2], False),
        (0.0, 0.0, [0.0, 0.0], True),
    ],
)
def test_interval_bounds_are_rounded_before_the_zero_test(low, high, interval, zero_in):
    got, flag = rounded_interval(low, high)
    assert flag is zero_in
    assert got == pytest.approx(interval, abs=CI_RESOLUTION / 10)
    assert all(str(bound) != "-0.0" for bound in got)


def test_a_difference_of_exactly_zero_on_every_question_is_inside_its_interval():
    """P@1 of two systems that agree on every question: every resampled mean is a sum of zeros."""
    a = {f"q{i}": {"p@1": float(i % 3 == 0)} for i in range(237)}
    out = paired_bootstrap_metrics(a, dict(a), ["p@1"], resamples=2000)
    assert out["p@1"]["ci95"] == [0.0, 0.0] and out["p@1"]["zero_in_ci95"] is True
    # one question better in b: the interval is [-2/237, 0] or so, and contains 0
    b = dict(a, q1={"p@1": 1.0})
    out = paired_bootstrap_metrics(a, b, ["p@1"], resamples=2000)
    low, high = out["p@1"]["ci95"]
    assert low < 0 and high == 0.0 and out["p@1"]["zero_in_ci95"] is True

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


def test_every_benchmark_record_names_the_cpu_and_its_vector_flags(monkeypatch):
    """``machine_info`` (in every benchmark's JSON): the CPU's model and, of its flags, the vector ones the CPU paths
    depend on, in a fixed order (here a stated ``/proc/cpuinfo``: an AMX Xeon's flags among others)."""
    import bench_utils

    from as2hub.inference import backends

    cpuinfo = (
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n"
        "flags\t\t: fpu sse4_2 amx_int8 avx2 avx512f fma amx_tile avx512_bf16 avx512_vnni amx_bf16 avx512bw\n"
    )
    monkeypatch.setattr(backends, "cpu_features", lambda: backends.parse_cpuinfo(cpuinfo))
    info = bench_utils.machine_info()
    assert info["cpu_model"] == "Intel(R) Xeon(R) Platinum 8488C"
    assert info["cpu_flags"] == ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
                                 "amx_bf16", "amx_int8"]  # fmt: skip
    monkeypatch.setattr(
        backends, "cpu_features", lambda: backends.parse_cpuinfo("model name\t: AMD EPYC\nflags\t: avx2 fma\n")
    )
    assert bench_utils.machine_info()["cpu_flags"] == ["avx2", "fma"]  # the AVX2 EPYC: no AVX-512

"""The GPU kit's commands agree with the scripts they call (issue 31: the first GPU run lost minutes to a flag the
ranking benchmark no longer had, and to a crash when --systems left out the reference rows). CPU only."""

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_ranking_throughput  # noqa: E402


def session_command(part_script: str) -> list[str]:
    """The arguments run_gpu_session.sh passes to ``part_script`` (shell variables and "$@" dropped)."""
    text = (ROOT / "benchmarks" / "gpu" / "run_gpu_session.sh").read_text()
    line = next(line for line in text.splitlines() if part_script in line and "python3" in line)
    line = re.sub(r"\\\s*$", "", line)
    words = shlex.split(line.split(part_script, 1)[1], posix=False)
    kept = []
    for word in words:
        if "$" in word:  # a value from the shell ("$OUT/...", "$@"): drop it, and the flag it belongs to
            if kept and kept[-1].startswith("--") and word != '"$@"':
                kept.pop()
            continue
        if word in ("2>&1", "|"):
            break
        kept.append(word)
    return kept


def test_the_ranking_part_passes_only_flags_the_benchmark_accepts():
    args = session_command("bench_ranking_throughput.py")
    assert "--device" not in args
    parsed = bench_ranking_throughput.parse_args([*args, "--results", "/tmp/unused.json"])
    assert parsed.no_wait  # a lent GPU machine is idle: no waiting for a quiet CPU


def test_a_systems_subset_keeps_the_two_reference_rows():
    parsed = bench_ranking_throughput.parse_args(["--systems", "as2hub cuda-fp16,CrossEncoder cuda bf16"])
    assert parsed.systems == {"as2hub cuda-fp16", "CrossEncoder cuda bf16", "as2hub torch", "CrossEncoder torch"}
    assert bench_ranking_throughput.parse_args([]).systems is None  # no subset: every system

"""One line that says what the suite's time was measured on: the CPU, its vector flags, the cores, the load, and
the seconds of a fixed pure-Python loop (most of the suite's time is interpreter-bound: imports, dynamo's tracing,
the Trainer's steps), a rough sign of the host's speed beside two runs' times. The CPU is read by the ranking
backends' own ``/proc/cpuinfo`` parser (``inference/backends.py``, standard library only: loaded from its file, as
``.ci/run`` runs this before anything is installed).

    $ python3 .ci/host_probe.py
    host: AMD EPYC; avx2 fma; 2 cores; load 0.12; python loop 20M: 4.81 s (2026-12-02 15:40 UTC)
"""

import importlib.util
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
LOOP = 20_000_000


def cpu() -> tuple[str, list[str]]:
    path = Path(__file__).resolve().parent.parent / "inference" / "backends.py"
    spec = importlib.util.spec_from_file_location("_as2hub_backends_for_probe", path)
    backends = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = backends  # dataclasses look their module up while the file runs
    spec.loader.exec_module(backends)
    features = backends.cpu_features()
    return features.model, [flag for flag in FLAGS if flag in features.flags]


def python_loop_seconds() -> float:
    start = time.perf_counter()
    total = 0
    for value in range(LOOP):
        total += value
    return time.perf_counter() - start


def main() -> str:
    model, flags = cpu()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    seconds = python_loop_seconds()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    line = (
        f"host: {model}; {' '.join(flags) or 'no listed vector flags'}; {os.cpu_count()} cores; load {load:.2f}; "
        f"python loop {LOOP // 1_000_000}M: {seconds:.2f} s ({now})"
    )
    print(line, flush=True)
    return line


if __name__ == "__main__":
    main()

"""Wait until no other process keeps a CPU core busy, so that timings are not skewed by a concurrent run.

Used by ``bench_pretrain_overhead.py`` and ``bench_research_dslc_minilm.py`` (2-core machines shared with other
benchmarks). ``busy_processes`` samples every process's CPU time over a short interval (instantaneous use, not the
lifetime average that ``ps`` prints); our own process and its children are ignored.
"""

import logging
import os
import time

import psutil

logger = logging.getLogger("cpu_quiet")


def _own_family() -> set[int]:
    me = psutil.Process(os.getpid())
    return {me.pid, *(child.pid for child in me.children(recursive=True))}


def busy_processes(threshold: float = 40.0, interval: float = 3.0) -> list[dict]:
    """Processes (ours excluded) that used more than ``threshold`` % of one core over ``interval`` seconds."""
    own = _own_family()
    procs = []
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        if proc.pid in own:
            continue
        try:
            proc.cpu_percent(None)  # prime
            procs.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    time.sleep(interval)
    busy = []
    for proc in procs:
        try:
            percent = proc.cpu_percent(None)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if percent > threshold:
            cmd = " ".join(proc.info.get("cmdline") or [proc.info.get("name") or "?"])
            busy.append({"pid": proc.pid, "cpu_percent": percent, "cmd": cmd[:160]})
    return busy


def wait_until_quiet(
    poll_seconds: float = 60.0, threshold: float = 40.0, max_wait_seconds: float | None = None, quiet_checks: int = 2
) -> dict:
    """Block until ``quiet_checks`` consecutive samples find no busy process; returns what was waited for."""
    start = time.time()
    consecutive = 0
    seen: dict[int, str] = {}
    while True:
        busy = busy_processes(threshold)
        if not busy:
            consecutive += 1
            if consecutive >= quiet_checks:
                break
            time.sleep(5)
            continue
        consecutive = 0
        for item in busy:
            seen[item["pid"]] = item["cmd"]
        waited = time.time() - start
        if max_wait_seconds is not None and waited > max_wait_seconds:
            logger.warning("still busy after %.0f s, going on anyway: %s", waited, busy)
            return {"waited_s": waited, "quiet": False, "busy_at_start": busy, "waited_for": seen}
        logger.info("waiting for a quiet CPU (%.0f s so far): %s", waited, [(b["pid"], b["cmd"][:80]) for b in busy])
        time.sleep(poll_seconds)
    return {"waited_s": time.time() - start, "quiet": True, "waited_for": seen}


if __name__ == "__main__":
    print(busy_processes())

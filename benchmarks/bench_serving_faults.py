"""as2hub-serve under load and faults: per request class, the answers' status counts, p50/p99 latency, throughput, and
the spread of one fixed (question, candidate) pair's score across every answer that carried it.

Scenarios (``--scenarios``, in this order):

- ``load``: ``--clients`` clients (32) x ``--requests`` requests (40), a ``--bad_share`` (10 %) of bad requests;
- ``kill``: the same, and one scoring replica killed (SIGKILL, as ``kill -9``) ``--kill_after_s`` (5 s) into the run;
- ``overload``: 8x the replicas' capacity in clients (capacity: replicas x ``--max_ongoing_requests``, the requests
  they hold; the queue comes on top) x ``--overload_requests`` requests (8);
- ``unbounded``: the overload again with ``--max_queued_requests -1`` (no limit: the service before admission).
- ``sweep``: ``--clients`` x ``--sweep_requests`` requests for each ``--sweep_caps`` per-replica cap, no queue limit:
  the throughput and latency the defaults were chosen from (``run_scripts/SERVING.md``).

Request classes: ``good`` (a test question of the embedded AS2 task with its candidates and their contexts, at most
16), ``probe`` (a good request whose texts hold the fixed pair's candidate among 0-15 others, at a random position:
its score must not depend on the batch around it) and ``bad`` (an empty ``texts``, a non-string text, ``contexts`` of
the wrong length: 422). Every client draws its classes from its own seeded generator; a rejected request (429 / 503)
is counted, not retried.

The service runs in this process's Ray instance (replicas at this process's niceness, ``RAY_worker_niceness=0``); the
load generator is a process of its own (this file with ``--loadgen``), pinned to the last core when the machine has a
core beyond the replicas' (``--replicas`` x ``--threads``), which are then pinned to the others. The record names the
CPU (model, flags), the date and the load average before and after every scenario. Usage::

    python -m as2hub.run_scripts.demo --output_dir outputs/demo       # the demo's ranker (or any ranker folder)
    python benchmarks/bench_serving_faults.py --model outputs/demo/ranker --replicas 2

Writes ``benchmarks/results/serving_faults.json`` (``--results``).
"""

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, write_json  # noqa: E402

APP = "faults"
MAX_TEXTS_PER_REQUEST = 16
PROBE_SHARE = 0.25  # of the good requests


def parse_args(argv=None):
    from as2hub.serving.options import DEFAULT_MAX_ONGOING_REQUESTS, DEFAULT_MAX_QUEUED_REQUESTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="outputs/demo/ranker")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="per replica")
    parser.add_argument("--scenarios", default="load,kill,overload,unbounded")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=40, help="per client")
    parser.add_argument("--overload_factor", type=int, default=8)
    parser.add_argument("--overload_requests", type=int, default=8, help="per client")
    parser.add_argument("--bad_share", type=float, default=0.1)
    parser.add_argument("--kill_after_s", type=float, default=5.0)
    parser.add_argument("--max_ongoing_requests", type=int, default=DEFAULT_MAX_ONGOING_REQUESTS)
    parser.add_argument("--max_queued_requests", type=int, default=DEFAULT_MAX_QUEUED_REQUESTS)
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--sweep_caps", default="1,2,4,8,16,32")
    parser.add_argument("--sweep_requests", type=int, default=20, help="per client")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(RESULTS_DIR / "serving_faults.json"))
    parser.add_argument("--loadgen", default=None, help=argparse.SUPPRESS)  # internal: the load generator's spec
    return parser.parse_args(argv)


# --------------------------------------------------------------------------------------------------------------------
# The requests


def test_questions() -> list[dict]:
    """The embedded AS2 task's clean test questions: question, candidates, contexts (at most 16 candidates)."""
    from as2hub.data_collators.readers.as2_splits import embedded_as2_split

    grouped: dict[str, dict] = {}
    for row in embedded_as2_split("test", clean=True).dataset:
        item = grouped.setdefault(row["question_id"], {"query": row["question"], "texts": [], "contexts": []})
        if len(item["texts"]) < MAX_TEXTS_PER_REQUEST:
            item["texts"].append(row["candidate"])
            item["contexts"].append(row["context"] or None)
    return list(grouped.values())


def draw_request(rng: random.Random, questions: list[dict], bad_share: float) -> tuple[str, dict]:
    """(class, request body) of one request."""
    if rng.random() < bad_share:
        good = rng.choice(questions)
        bad = [
            {"query": good["query"], "texts": []},
            {"query": good["query"], "texts": [good["texts"][0], 3]},
            {"query": good["query"], "texts": good["texts"], "contexts": good["contexts"] + [None]},
        ]
        return "bad", rng.choice(bad)
    if rng.random() < PROBE_SHARE:
        fixed, other = questions[0], rng.choice(questions[1:])
        k = rng.randrange(0, MAX_TEXTS_PER_REQUEST)
        texts = [rng.choice(other["texts"]) for _ in range(k)]
        contexts = [rng.choice(other["contexts"]) for _ in range(k)]
        at = rng.randrange(0, k + 1)
        texts.insert(at, fixed["texts"][0])
        contexts.insert(at, fixed["contexts"][0])
        return "probe", {"query": fixed["query"], "texts": texts, "contexts": contexts, "_fixed": at}
    good = rng.choice(questions)
    return "good", {"query": good["query"], "texts": good["texts"], "contexts": good["contexts"]}


# --------------------------------------------------------------------------------------------------------------------
# The load generator (its own process)


async def run_clients(spec: dict) -> list[dict]:
    import aiohttp

    questions = test_questions()
    url = spec["url"]
    records: list[dict] = []
    started = time.perf_counter()

    async def client(session, number):
        rng = random.Random(spec["seed"] * 100_003 + number)
        for _ in range(spec["requests"]):
            kind, body = draw_request(rng, questions, spec["bad_share"])
            fixed = body.pop("_fixed", None)
            sent = time.perf_counter()
            async with session.post(url, json=body) as response:
                text = await response.text()
            record = {
                "class": kind,
                "status": response.status,
                "sent_s": sent - started,
                "latency_s": time.perf_counter() - sent,
                "retry_after": response.headers.get("Retry-After"),
            }
            try:
                answer = json.loads(text)
            except json.JSONDecodeError:
                answer, record["not_json"] = None, text[:200]
            if response.status == 200 and fixed is not None:
                record["fixed_score"] = next(item["score"] for item in answer if item["index"] == fixed)
            elif response.status != 200:
                shaped = isinstance(answer, dict) and set(answer) == {"error", "error_type"}
                record["error_shape"] = shaped
                record["error_type"] = answer.get("error_type") if shaped else None
                if not shaped:
                    record["body"] = text[:200]
            records.append(record)

    connector = aiohttp.TCPConnector(limit=spec["clients"])
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        Path(spec["out"] + ".started").touch()  # the driver's clock for the kill starts here
        started = time.perf_counter()
        await asyncio.gather(*(client(session, number) for number in range(spec["clients"])))
    return records


def loadgen_main(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    if spec.get("cores"):
        os.sched_setaffinity(0, spec["cores"])
    records = asyncio.run(run_clients(spec))
    Path(spec["out"]).write_text(json.dumps(records))


def start_loadgen(url, clients, requests, bad_share, seed, cores) -> tuple[subprocess.Popen, Path]:
    work = Path(tempfile.mkdtemp(prefix="as2hub_loadgen_"))
    spec = {"url": url, "clients": clients, "requests": requests, "bad_share": bad_share, "seed": seed}
    spec.update(cores=cores, out=str(work / "records.json"))
    (work / "spec.json").write_text(json.dumps(spec))
    process = subprocess.Popen([sys.executable, __file__, "--loadgen", str(work / "spec.json")])
    return process, work / "records.json"


# --------------------------------------------------------------------------------------------------------------------
# The service


def scoring_replica_pids() -> list[int]:
    """The scoring replicas' processes (Ray titles them ``ray::ServeReplica:<app>:Scorer``)."""
    import psutil

    pids = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        command = " ".join(process.info.get("cmdline") or [])
        if command.startswith(f"ray::ServeReplica:{APP}:Scorer"):
            pids.append(process.info["pid"])
    return sorted(pids)


def wait_for_replicas(count: int, timeout: float = 300.0) -> list[int]:
    """Block until ``count`` scoring replicas run and the application is RUNNING."""
    from ray import serve

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = scoring_replica_pids()
        status = serve.status().applications.get(APP)
        if len(pids) == count and status is not None and status.status == "RUNNING":
            return pids
        time.sleep(1.0)
    raise RuntimeError(f"{count} scoring replicas did not run within {timeout} s: {scoring_replica_pids()}")


def deploy(args, max_ongoing: int, max_queued: int) -> list[int]:
    from ray import serve

    from as2hub.run_scripts.serve import ServeConfig, build_app

    config = ServeConfig(
        model=args.model,
        threads=args.threads,
        max_length=128,
        max_batch_size=args.max_batch_size,
        max_ongoing_requests=max_ongoing,
        max_queued_requests=max_queued,
    )
    serve.run(build_app(config, args.replicas), name=APP, route_prefix="/", blocking=False)
    return wait_for_replicas(args.replicas)


def pin(replica_pids: list[int], args) -> dict:
    """The load generator on the last core, the replicas on the others, when the cores allow."""
    import psutil

    cores = sorted(os.sched_getaffinity(0))
    needed = args.replicas * args.threads + 1
    if len(cores) < needed:
        return {"pinned": False, "why": f"{len(cores)} cores for {args.replicas} replicas x {args.threads} threads "
                                         "and the load generator: all share every core"}  # fmt: skip
    for pid in replica_pids:
        psutil.Process(pid).cpu_affinity(cores[:-1])
    return {"pinned": True, "loadgen_cores": cores[-1:], "replica_cores": cores[:-1]}


def ingress_counts(url: str) -> dict:
    import urllib.request

    for _ in range(20):
        try:
            with urllib.request.urlopen(f"{url}/info", timeout=30) as response:
                return json.loads(response.read())["ingress"]
        except OSError:
            time.sleep(1.0)
    return {}


# --------------------------------------------------------------------------------------------------------------------
# The figures


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))] if ordered else None


def summarize(records: list[dict], wall: float) -> dict:
    out = {"requests": len(records), "wall_s": round(wall, 3), "requests_per_s": len(records) / wall, "classes": {}}
    for kind in ("good", "probe", "bad"):
        mine = [r for r in records if r["class"] == kind]
        if not mine:
            continue
        statuses: dict[str, int] = {}
        for r in mine:
            statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
        answered = [r["latency_s"] for r in mine if r["status"] in (200, 422)]
        rejected = [r["latency_s"] for r in mine if r["status"] in (429, 503)]
        out["classes"][kind] = {
            "statuses": statuses,
            "answered_per_s": len(answered) / wall,
            "p50_ms": 1000 * statistics.median(answered) if answered else None,
            "p99_ms": 1000 * percentile(answered, 99) if answered else None,
            "rejected_p50_ms": 1000 * statistics.median(rejected) if rejected else None,
            "rejected_p99_ms": 1000 * percentile(rejected, 99) if rejected else None,
            "rejected_without_retry_after": sum(1 for r in mine if r["status"] in (429, 503) and not r["retry_after"]),
            "errors_not_in_the_json_shape": sum(1 for r in mine if r["status"] != 200 and not r.get("error_shape")),
        }
    fixed = [r["fixed_score"] for r in records if "fixed_score" in r]
    out["fixed_pair"] = {"answers": len(fixed), "spread": (max(fixed) - min(fixed)) if fixed else None}
    out["status_500"] = sum(1 for r in records if r["status"] == 500)
    out["not_json"] = [r["not_json"] for r in records if "not_json" in r][:5]
    return out


def run_scenario(name, args, url, clients, requests, pinning, kill_after_s=None) -> dict:
    load_before = list(os.getloadavg())
    counts_before = ingress_counts(url)
    cores = pinning.get("loadgen_cores")
    process, out = start_loadgen(f"{url}/rerank", clients, requests, args.bad_share, args.seed, cores)
    marker = Path(str(out) + ".started")
    while not marker.exists() and process.poll() is None:
        time.sleep(0.05)
    started = time.monotonic()  # the load generator's first requests
    killed = None
    if kill_after_s is not None:
        time.sleep(kill_after_s)
        victim = scoring_replica_pids()[0]
        os.kill(victim, signal.SIGKILL)
        killed = {"pid": victim, "at_s": round(time.monotonic() - started, 2)}
        print(f"{name}: killed scoring replica {victim} at {killed['at_s']} s", flush=True)
    if process.wait() != 0:
        raise RuntimeError(f"the load generator failed ({process.returncode})")
    records = json.loads(out.read_text())
    counts_after = ingress_counts(url)
    result = {
        "scenario": name,
        "clients": clients,
        "requests_per_client": requests,
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "killed": killed,
        "ingress": {key: counts_after.get(key, 0) - counts_before.get(key, 0) for key in counts_after},
        **summarize(records, max(r["sent_s"] + r["latency_s"] for r in records)),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "not_json"}, indent=1), flush=True)
    return result


def table(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        for kind, c in row["classes"].items():
            statuses = ", ".join(f"{n}x{s}" for s, n in sorted(c["statuses"].items()))
            lines.append(
                [
                    row["scenario"],
                    row["clients"],
                    kind,
                    statuses,
                    f"{c['answered_per_s']:.1f}",
                    "-" if c["p50_ms"] is None else f"{c['p50_ms']:.0f}",
                    "-" if c["p99_ms"] is None else f"{c['p99_ms']:.0f}",
                    "-" if c["rejected_p50_ms"] is None else f"{c['rejected_p50_ms']:.0f}/{c['rejected_p99_ms']:.0f}",
                    "" if kind != "probe" else f"{row['fixed_pair']['spread']:.1e} ({row['fixed_pair']['answers']})",
                    "{:.1f}-{:.1f}".format(row["load_average_before"][0], row["load_average_after"][0]),
                ]
            )
    headers = ["scenario", "clients", "class", "statuses", "answered/s", "p50 ms", "p99 ms", "rejected p50/p99 ms",
               "fixed pair spread (answers)", "load avg"]  # fmt: skip
    return format_table(headers, lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.loadgen:
        loadgen_main(args.loadgen)
        return {}
    if not Path(args.model, "config.json").is_file():
        raise SystemExit(f"{args.model}: no ranker; make the demo's: python -m as2hub.run_scripts.demo")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")  # the replicas at this process's niceness
    import ray
    from ray import serve

    info = machine_info()
    with open("/proc/cpuinfo") as handle:
        flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    info["cpu_flags"] = [f for f in flags if f.startswith(("avx", "amx", "fma", "sse4", "f16c", "vnni"))]
    scenarios = args.scenarios.split(",")
    report = {"date": now_iso(), "machine": info, "args": vars(args), "rows": [], "sweep": []}
    url = f"http://127.0.0.1:{args.port}"
    capacity = args.replicas * args.max_ongoing_requests
    report["capacity"] = capacity
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        if "sweep" in scenarios:
            for cap in [int(c) for c in args.sweep_caps.split(",")]:
                pinning = pin(deploy(args, cap, -1), args)
                row = run_scenario(f"sweep cap {cap}", args, url, args.clients, args.sweep_requests, pinning)
                report["sweep"].append({"max_ongoing_requests": cap, **row})
        pids = deploy(args, args.max_ongoing_requests, args.max_queued_requests)
        report["pinning"] = pinning = pin(pids, args)
        for name in [s for s in scenarios if s not in ("sweep", "unbounded")]:
            pinning = pin(wait_for_replicas(args.replicas), args)
            if name == "load":
                report["rows"].append(run_scenario(name, args, url, args.clients, args.requests, pinning))
            elif name == "kill":
                row = run_scenario(name, args, url, args.clients, args.requests, pinning, args.kill_after_s)
                report["rows"].append(row)
            elif name == "overload":
                clients = args.overload_factor * capacity
                report["rows"].append(run_scenario(name, args, url, clients, args.overload_requests, pinning))
        if "unbounded" in scenarios:
            pinning = pin(deploy(args, args.max_ongoing_requests, -1), args)
            clients = args.overload_factor * capacity
            report["rows"].append(run_scenario("unbounded", args, url, clients, args.overload_requests, pinning))
    finally:
        serve.shutdown()
        ray.shutdown()
    report["load_average_at_end"] = list(os.getloadavg())
    report["table"] = table(report["rows"])
    if report["sweep"]:
        report["sweep_table"] = table(report["sweep"])
        print(report["sweep_table"])
    print(
        f"\n{report['date']}, {info['cpu_model']} ({' '.join(info['cpu_flags'])}), {info['nproc']} cores; "
        f"{args.replicas} replicas x {args.threads} threads, max_ongoing_requests {args.max_ongoing_requests}, "
        f"max_queued_requests {args.max_queued_requests} (replicas' capacity {capacity}); load average "
        f"{info['load_average_at_start']} -> {report['load_average_at_end']}\n{report['table']}"
    )
    write_json(args.results, report)
    return report


if __name__ == "__main__":
    main()

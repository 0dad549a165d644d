"""as2hub-serve over loopback vs in-process ``Ranker``: pairs/s and p50/p99 latency with 1, 8 and 32 concurrent
clients sending WikiQA test questions with their candidates.

- in-process: ``Ranker.from_pretrained(folder, backend=...)``, one question after another (``ranker.rank(q,
  candidates)``), ``torch.set_num_threads(--threads)``, timed right before each concurrency level (the load of a
  shared machine drifts): the ratio column compares each level with its own reference;
- service: the same folder and backend behind ``as2hub.run_scripts.serve`` (Ray Serve, FastAPI ingress, one replica
  with ``--threads`` threads, ``@serve.batch`` of up to 32 requests, 5 ms wait), started in this process; N asyncio
  clients (aiohttp, one process: the clients share the machine with the service, as on a 2-core box they must) post
  ``/rerank`` requests, each one question with all its candidates, until every question was sent once or
  ``--max_seconds`` passed.

The model is MiniLM-L6 (all-MiniLM-L6-v2) as an untrained pairwise ``BertForContextualAS2`` (speed does not depend on
the head's training). Usage::

    python benchmarks/bench_serving.py                        # ~4 min on 2 cores
    python benchmarks/bench_serving.py --backend onnx         # exports the graph into the work folder first

Writes ``benchmarks/results/serving.json`` (``--results``).
"""

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--max_questions", type=int, default=None, help="first N clean test questions (all: 237)")
    parser.add_argument("--max_seconds", type=float, default=90.0, help="per concurrency level")
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--batch_wait_ms", type=float, default=5.0)
    parser.add_argument("--work_dir", default="/tmp/as2hub_bench/serving")
    parser.add_argument("--results", default=str(RESULTS_DIR / "serving.json"))
    return parser.parse_args(argv)


def build_model(folder: Path, backend: str) -> Path:
    from transformers import AutoTokenizer, set_seed

    from as2hub.modeling import BertForContextualAS2

    if not (folder / "config.json").is_file():
        source = minilm_path()
        tokenizer = AutoTokenizer.from_pretrained(source)
        set_seed(0)
        model = BertForContextualAS2.from_pretrained(
            source, contextual=False, sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id
        )
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    if backend == "onnx" and not (folder / "onnx" / "model.onnx").is_file():
        from as2hub.inference.onnx_export import export_onnx

        export_onnx(folder)
    return folder


def wikiqa_questions(limit):
    from as2hub.data_collators.readers.as2_data import read_wikiqa

    data = read_wikiqa("test", clean=True).dataset
    grouped: dict[str, tuple[str, list[str]]] = {}
    for row in data:
        grouped.setdefault(row["question_id"], (row["question"], []))[1].append(row["candidate"])
    questions = list(grouped.values())
    return questions[:limit] if limit else questions


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def load_ranker(folder, args):
    import torch

    from as2hub.inference.ranking import Ranker

    torch.set_num_threads(args.threads)
    options = {"num_threads": args.threads} if args.backend == "onnx" else {}
    ranker = Ranker.from_pretrained(folder, backend=args.backend, max_length=256, batch_size=64, **options)
    for _ in range(3):  # warm-up
        ranker.rank("what is a warm-up?", ["A short run before timing.", "Nothing."] * 4)
    return ranker


def in_process(ranker, questions, args) -> dict:
    latencies, pairs = [], 0
    started = time.perf_counter()
    for question, candidates in questions:
        t = time.perf_counter()
        ranker.rank(question, candidates)
        latencies.append(time.perf_counter() - t)
        pairs += len(candidates)
        if time.perf_counter() - started > args.max_seconds:
            break
    wall = time.perf_counter() - started
    return summarize("in-process Ranker", 1, len(latencies), pairs, wall, latencies, 0)


def summarize(system, clients, requests, pairs, wall, latencies, errors) -> dict:
    return {
        "system": system,
        "clients": clients,
        "requests": requests,
        "pairs": pairs,
        "errors": errors,
        "seconds": round(wall, 3),
        "pairs_per_s": pairs / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * percentile(latencies, 99),
    }


async def load(url, questions, clients, max_seconds) -> dict:
    import aiohttp

    queue = list(reversed(questions))
    latencies, counts = [], {"pairs": 0, "errors": 0}
    deadline = time.perf_counter() + max_seconds

    async def client(session):
        while queue and time.perf_counter() < deadline:
            question, candidates = queue.pop()
            t = time.perf_counter()
            async with session.post(url, json={"query": question, "texts": candidates}) as response:
                body = await response.json()
            latencies.append(time.perf_counter() - t)
            if response.status != 200 or len(body) != len(candidates):
                counts["errors"] += 1
            counts["pairs"] += len(candidates)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as session:
        await asyncio.gather(*(client(session) for _ in range(min(5, clients))))  # warm-up: the first questions
        queue[:] = list(reversed(questions))
        latencies.clear()
        counts.update(pairs=0, errors=0)
        deadline = time.perf_counter() + max_seconds
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        wall = time.perf_counter() - started
    return summarize(
        "as2hub-serve /rerank", clients, len(latencies), counts["pairs"], wall, latencies, counts["errors"]
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray starts its workers (Serve replicas and proxy, Ray Data actors) 15 niceness steps below the driver; on a shared
    # machine that would time them at a lower priority than the in-process reference: same niceness for both
    os.environ.setdefault("RAY_worker_niceness", "0")
    report = {"date": now_iso(), "machine": machine_info(), "args": vars(args)}
    folder = build_model(Path(args.work_dir) / "minilm_pairwise", args.backend)
    questions = wikiqa_questions(args.max_questions)
    report["questions"] = len(questions)
    report["pairs"] = sum(len(c) for _, c in questions)
    ranker = load_ranker(folder, args)

    import ray
    from ray import serve

    from as2hub.run_scripts.serve import ServeConfig, build_app

    rows = []
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        port = 8765
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = ServeConfig(
            model=str(folder),
            backend=args.backend,
            threads=args.threads,
            max_batch_size=args.max_batch_size,
            batch_wait_ms=args.batch_wait_ms,
        )
        serve.run(build_app(config), name="bench", route_prefix="/", blocking=False)
        for clients in [int(c) for c in args.clients.split(",")]:
            # paired: the in-process reference right before each level (a shared machine's load drifts)
            reference = in_process(ranker, questions, args)
            reference["clients"] = f"(ref. for {clients})"
            served = asyncio.run(load(f"http://127.0.0.1:{port}/rerank", questions, clients, args.max_seconds))
            served["vs_in_process"] = served["pairs_per_s"] / reference["pairs_per_s"]
            reference["vs_in_process"] = 1.0
            rows += [reference, served]
            print(reference, served, sep="\n", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    report["rows"] = rows
    report["load_average_at_end"] = list(os.getloadavg())
    table = format_table(
        ["system", "clients", "requests", "errors", "pairs/s", "x in-process", "p50 ms", "p99 ms"],
        [
            [
                r["system"],
                r["clients"],
                r["requests"],
                r["errors"],
                f"{r['pairs_per_s']:.1f}",
                f"{r['vs_in_process']:.2f}",
                f"{r['p50_ms']:.0f}",
                f"{r['p99_ms']:.0f}",
            ]
            for r in rows
        ],
    )
    info = report["machine"]
    print(
        f"\n{report['date']}, {info['cpu_model']}, {info['nproc']} cores, backend {args.backend}, {args.threads} "
        f"threads; load average {info['load_average_at_start']} -> {report['load_average_at_end']}\n"
        f"{report['questions']} WikiQA test questions ({report['pairs']} pairs), MiniLM-L6 pairwise\n{table}"
    )
    report["table"] = table
    write_json(args.results, report)
    return report


if __name__ == "__main__":
    main()

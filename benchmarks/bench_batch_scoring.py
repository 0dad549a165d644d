"""as2hub-score: pairs/s with 1 and 2 workers vs one in-process ``Ranker``, and peak memory as the input grows 10x.

Input: WikiQA pairs (train, dev, test; question, candidate, context), repeated to the wanted count, as JSONL.
Model: MiniLM-L6 (all-MiniLM-L6-v2) as an untrained contextual ``BertForContextualAS2`` (speed does not depend on the
head's training), max length 256, batch 64.

- throughput (``--pairs`` pairs): one in-process ``Ranker.score_pairs`` per ``--rows_per_shard`` rows, all cores,
  timed right before each system (the load of a shared machine drifts; each ratio is to its own reference), then
  ``score_files(engine="datasets", workers=1)``; ``score_files(engine="ray", workers=1 | 2)`` on a
  running local Ray instance (started before the clock: a cluster is up before a job is sent), threads = cores /
  workers. Times include reading, the workers' model loading and writing the shards;
- memory: ``as2hub-score --engine datasets --workers 1`` (``--memory_engine ray``: Ray's raylet, object store and
  workers come in, whose own memory moves with time more than with the input) as a subprocess on ``--memory_pairs``
  and 10x as many pairs; peak of the summed RSS of the command and every process under it, sampled every 0.2 s.

Usage::

    python benchmarks/bench_batch_scoring.py                  # ~8 min on 2 cores

Writes ``benchmarks/results/batch_scoring.json`` (``--results``).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3000)
    parser.add_argument("--memory_pairs", type=int, default=1000, help="the small memory run; the big one has 10x")
    parser.add_argument("--rows_per_shard", type=int, default=500)
    parser.add_argument("--skip_memory", action="store_true")
    parser.add_argument("--memory_engine", default="datasets", choices=("datasets", "ray"))
    parser.add_argument("--work_dir", default="/tmp/as2hub_bench/batch_scoring")
    parser.add_argument("--results", default=str(RESULTS_DIR / "batch_scoring.json"))
    return parser.parse_args(argv)


def build_model(folder: Path) -> Path:
    from transformers import AutoTokenizer, set_seed

    from as2hub.modeling import BertForContextualAS2

    if not (folder / "config.json").is_file():
        source = minilm_path()
        tokenizer = AutoTokenizer.from_pretrained(source)
        set_seed(0)
        model = BertForContextualAS2.from_pretrained(
            source, contextual=True, sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id
        )
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def wikiqa_rows() -> list[dict]:
    from as2hub.data_collators.readers.as2_data import read_wikiqa

    rows = []
    for split in ("test", "dev", "train"):
        for row in read_wikiqa(split).dataset:
            rows.append({"question": row["question"], "candidate": row["candidate"], "context": row["context"]})
    return rows


def write_input(path: Path, rows: list[dict], count: int) -> Path:
    with open(path, "w") as handle:
        for i in range(count):
            handle.write(json.dumps(rows[i % len(rows)]) + "\n")
    return path


def in_process(folder, path: Path, rows_per_shard: int) -> dict:
    import torch

    from as2hub.inference.ranking import Ranker

    torch.set_num_threads(os.cpu_count())
    started = time.perf_counter()
    ranker = Ranker.from_pretrained(folder, max_length=256, batch_size=64)
    rows = [json.loads(line) for line in open(path)]
    for start in range(0, len(rows), rows_per_shard):
        chunk = rows[start : start + rows_per_shard]
        ranker.score_pairs(
            [r["question"] for r in chunk], [r["candidate"] for r in chunk], [r["context"] for r in chunk]
        )
    return {"system": "in-process Ranker", "workers": 1, "pairs": len(rows), "seconds": time.perf_counter() - started}


def tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        total = root.memory_info().rss
        for child in root.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total
    except psutil.Error:
        return 0


def memory_run(folder, path: Path, output: Path, rows_per_shard: int, engine: str) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "as2hub.run_scripts.score", str(folder), str(path), "--output_dir", str(output)]
    command += ["--engine", engine, "--workers", "1", "--rows_per_shard", str(rows_per_shard)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = {"rss": 0}

    def sample():
        while process.poll() is None:
            peak["rss"] = max(peak["rss"], tree_rss(process.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    out, _ = process.communicate()
    sampler.join()
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
    summary = json.loads(out.strip().splitlines()[-1])
    return {
        "pairs": summary["rows"],
        "seconds": time.perf_counter() - started,
        "peak_rss_mb": peak["rss"] / 2**20,
        "summary": summary,
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray starts its workers (Serve replicas and proxy, Ray Data actors) 15 niceness steps below the driver; on a shared
    # machine that would time them at a lower priority than the in-process reference: same niceness for both
    os.environ.setdefault("RAY_worker_niceness", "0")
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    report = {"date": now_iso(), "machine": machine_info(), "args": vars(args)}
    folder = build_model(work / "minilm_contextual")
    rows = wikiqa_rows()
    data = write_input(work / "pairs.jsonl", rows, args.pairs)

    import ray

    from as2hub.run_scripts.score import score_files

    def paired(system, workers, run):
        """The in-process reference right before the system (the load of a shared machine drifts)."""
        reference = in_process(folder, data, args.rows_per_shard)
        reference["system"] = "in-process Ranker (ref. for the next row)"
        summary = run()
        row = {"system": system, "workers": workers, "pairs": summary["rows"], "seconds": summary["seconds"]}
        for item in (reference, row):
            item["pairs_per_s"] = item["pairs"] / item["seconds"]
        reference["vs_in_process"] = 1.0
        row["vs_in_process"] = row["pairs_per_s"] / reference["pairs_per_s"]
        print(reference, row, sep="\n", flush=True)
        return [reference, row]

    common = {"rows_per_shard": args.rows_per_shard, "overwrite": True}
    results = paired(
        "as2hub-score datasets",
        1,
        lambda: score_files(str(folder), [data], work / "out-datasets", engine="datasets", **common),
    )
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        for workers in (1, 2):
            out = work / f"out-ray-{workers}"
            results += paired(
                "as2hub-score Ray Data",
                workers,
                lambda out=out, workers=workers: score_files(
                    str(folder), [data], out, engine="ray", workers=workers, **common
                ),
            )
    finally:
        ray.shutdown()
    report["throughput"] = results
    table = format_table(
        ["system", "workers", "pairs", "seconds", "pairs/s", "x in-process"],
        [
            [
                r["system"],
                r["workers"],
                r["pairs"],
                f"{r['seconds']:.1f}",
                f"{r['pairs_per_s']:.1f}",
                f"{r['vs_in_process']:.2f}",
            ]
            for r in results
        ],
    )
    if not args.skip_memory:
        memory = []
        for count in (args.memory_pairs, 10 * args.memory_pairs):
            path = write_input(work / f"pairs-{count}.jsonl", rows, count)
            memory.append(
                memory_run(folder, path, work / f"out-memory-{count}", args.rows_per_shard, args.memory_engine)
            )
            print(memory[-1], flush=True)
        report["memory"] = memory
        report["peak_ratio_10x"] = memory[1]["peak_rss_mb"] / memory[0]["peak_rss_mb"]
        table += "\n\n" + format_table(
            [
                f"as2hub-score --engine {args.memory_engine} --workers 1",
                "pairs",
                "seconds",
                "peak RSS MB (process tree)",
            ],
            [["", m["pairs"], f"{m['seconds']:.1f}", f"{m['peak_rss_mb']:.0f}"] for m in memory],
        )
        table += f"\npeak at 10x pairs / peak at 1x: {report['peak_ratio_10x']:.3f}"
    report["load_average_at_end"] = list(os.getloadavg())
    info = report["machine"]
    print(
        f"\n{report['date']}, {info['cpu_model']}, {info['nproc']} cores, torch; load average "
        f"{info['load_average_at_start']} -> {report['load_average_at_end']}\n"
        f"WikiQA pairs, MiniLM-L6 contextual, {args.rows_per_shard} rows per shard\n{table}"
    )
    report["table"] = table
    write_json(args.results, report)
    return report


if __name__ == "__main__":
    main()

"""Which pairs share a forward pass, per question (issue 51, item 2): the cost model's ``call_cost`` per backend.

``Ranker`` cuts a question's length-sorted pairs into batches where padding plus ``call_cost`` tokens per pass cost
least (:mod:`as2hub.inference.batching`). This measures, per backend and thread count, one ``Ranker.rank`` call per
clean WikiQA test question (tokenization included, systems interleaved, best of ``--repeats``) for each ``call_cost``
in ``--call_costs`` (``inf``: the old fixed batches of ``--batch_size`` sorted pairs), with the share of computed
tokens that are padding, the number of forward passes, and the largest score change against ``inf`` (the cost model
must not change scores beyond float rounding). The best ``call_cost`` per backend is
:data:`~as2hub.inference.batching.DEFAULT_CALL_COST`'s source.

    python benchmarks/bench_question_batching.py --model_dir <pairwise MiniLM ranker>   # ~10 min, quiet machine
    python benchmarks/bench_question_batching.py --model_dir ... --max_questions 10 --repeats 1 --results /tmp/b.json

Writes ``benchmarks/results/question_batching_<cpu kind>.json``.
"""

import argparse
import gc
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cascade import questions_of  # noqa: E402
from bench_ranking_throughput import as2hub_copy, cpu_record  # noqa: E402
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, write_json  # noqa: E402

logger = logging.getLogger("bench_question_batching")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a pairwise ranker folder")
    parser.add_argument("--backends", default="onnx-int8,torch")
    parser.add_argument("--call_costs", default="0,4,8,16,32,64,inf")
    parser.add_argument("--threads", default="1", help="comma-separated thread counts")
    parser.add_argument("--batch_size", type=int, default=16, help="most pairs per pass (the Ranker's CPU default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max_questions", type=int, default=None)
    parser.add_argument("--work_dir", default="/tmp/as2hub_bench_question_batching")
    parser.add_argument("--results", default=None, help="default: results/question_batching_<cpu kind>.json")
    args = parser.parse_args(argv)
    args.backends = args.backends.split(",")
    args.call_costs = [float(c) for c in args.call_costs.split(",")]
    args.threads = [int(t) for t in args.threads.split(",")]
    return args


def question_lengths(ranker, items) -> list[list[int]]:
    """Per question, each pair's token length (the same for every system: one tokenizer, one layout)."""
    return [[len(ids) for ids, _ in ranker._rows([q] * len(c), c, None)] for _, q, c, _ in items]


def padding_and_calls(ranker, per_question: list[list[int]]) -> tuple[float, int]:
    """Share of the computed tokens that are padding, and the number of passes, over the questions' pair lengths."""
    from as2hub.modeling.segment_layout import padded_length

    computed = real = calls = 0
    for lengths in per_question:
        for batch in ranker.batches(lengths):
            longest = padded_length(max(lengths[i] for i in batch), ranker.pad_to_multiple_of)
            computed += longest * len(batch)
            real += sum(lengths[i] for i in batch)
            calls += 1
    return 1.0 - real / computed, calls


def main(argv=None) -> dict:
    from as2hub.inference.ranking import Ranker

    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    cpu = cpu_record()
    results = args.results or str(RESULTS_DIR / f"question_batching_{cpu['int8_dot_product']}.json")
    source = Path(args.model_dir)
    folder = (
        as2hub_copy(source, Path(args.work_dir) / "as2hub")
        if any(b.startswith("onnx") for b in args.backends)
        else source
    )
    items = questions_of(args.max_questions)
    num_pairs = sum(len(c) for _, _, c, _ in items)
    systems = {}
    for threads in args.threads:
        for backend in args.backends:
            options = {"num_threads": threads} if backend.startswith("onnx") else {}
            base = Ranker.from_pretrained(str(folder), backend=backend, batch_size=args.batch_size, **options)
            for cost in args.call_costs:
                ranker = Ranker(base.model, base.tokenizer, batch_size=args.batch_size, backend=base.backend,
                                call_cost=cost)  # fmt: skip
                systems[(backend, threads, cost)] = ranker
    times = {key: [] for key in systems}
    scores = {}
    for repeat in range(args.repeats):
        for (backend, threads, cost), ranker in systems.items():
            torch.set_num_threads(threads)
            gc.collect()
            start = time.perf_counter()
            out = [ranker.score_pairs([q] * len(c), c).tolist() for _, q, c, _ in items]
            times[(backend, threads, cost)].append(time.perf_counter() - start)
            scores.setdefault((backend, threads, cost), out)
            logger.info("repeat %d %s %d thread(s) call_cost %s: %.1f pairs/s", repeat + 1, backend, threads, cost,
                        num_pairs / times[(backend, threads, cost)][-1])  # fmt: skip
    runs = []
    lengths = question_lengths(next(iter(systems.values())), items)
    for (backend, threads, cost), ranker in systems.items():
        padding, calls = padding_and_calls(ranker, lengths)
        fixed = (
            np.concatenate([np.array(s) for s in scores[(backend, threads, float("inf"))]])
            if float("inf") in args.call_costs
            else None
        )
        mine = np.concatenate([np.array(s) for s in scores[(backend, threads, cost)]])
        runs.append({
            "backend": ranker.backend, "threads": threads, "call_cost": cost if cost != float("inf") else "inf",
            "pairs_per_s": num_pairs / min(times[(backend, threads, cost)]), "times_s": times[(backend, threads, cost)],
            "padding_share": padding, "forward_passes": calls,
            "max_abs_score_change_vs_fixed": None if fixed is None else float(np.abs(mine - fixed).max()),
        })  # fmt: skip
    for run in runs:
        fixed = next(r for r in runs if r["backend"] == run["backend"] and r["threads"] == run["threads"]
                     and r["call_cost"] == "inf")  # fmt: skip
        run["vs_fixed_batches"] = run["pairs_per_s"] / fixed["pairs_per_s"]
    best = {}
    for run in runs:
        key = f"{run['backend']} {run['threads']} thread(s)"
        if key not in best or run["pairs_per_s"] > best[key]["pairs_per_s"]:
            best[key] = run
    report = {
        "benchmark": "question_batching",
        "date": now_iso(),
        "machine": {**machine_info(), **cpu},
        "load_average_end": list(os.getloadavg()),
        "settings": {
            "model": str(source),
            "num_questions": len(items),
            "num_pairs": num_pairs,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "timing": "one Ranker.score_pairs call per question, tokenization included; "
            "systems interleaved; best of repeats",
        },  # fmt: skip
        "runs": runs,
        "best_call_cost": {key: run["call_cost"] for key, run in best.items()},
    }
    write_json(results, report)
    rows = [[r["backend"], r["threads"], str(r["call_cost"]), f"{r['pairs_per_s']:.1f}", f"{r['vs_fixed_batches']:.2f}x",
             f"{r['padding_share']:.3f}", r["forward_passes"], f"{r['max_abs_score_change_vs_fixed']:.1e}"]
            for r in runs]  # fmt: skip
    print(f"\n{len(items)} clean WikiQA test questions ({num_pairs} pairs), one call per question, at most "
          f"{args.batch_size} pairs per pass; CPU {cpu['cpu_model']} [{' '.join(cpu['relevant_flags'])}]")  # fmt: skip
    print(
        format_table(
            ["backend", "threads", "call_cost", "pairs/s", "vs fixed", "padding", "passes", "max |Δscore|"], rows
        )
    )
    print(f"best call_cost: {report['best_call_cost']}\nwrote {results}")
    return report


if __name__ == "__main__":
    main()

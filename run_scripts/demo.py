"""The main job on the embedded corpus, end to end: pre-train, fine-tune, rank, and say what was measured.

1. ``run_pretrain`` pre-trains a tiny RoBERTa (2 layers x 128, from scratch) with the DSLC objective on Python's own
   docs, with a byte-level BPE trained on them; held-out documents measure the sentence-level task before and after;
2. ``run_as2`` fine-tunes that checkpoint as a contextual AS2 ranker on the embedded sentence-selection task (the
   question is the first sentence of a paragraph, the correct candidates are the other sentences of that paragraph);
3. the test questions are ranked by the model, at random and by BM25 (word overlap), and the first three are shown
   with the saved folder loaded back through ``Ranker``.

    python -m as2hub.run_scripts.demo --output_dir outputs/demo [--pretrain_steps 1500] [--finetune_epochs 2] \\
        [--eval_passes 10]

The last lines printed are a table of those measures; ``demo_summary.json`` in the output folder holds them too.
The demo owns its output folder: running it again replaces the previous demo's models (``--overwrite_output_dir``).
"""

import argparse
import logging
from pathlib import Path

from as2hub.data_collators.readers.as2_splits import embedded_as2_split
from as2hub.inference.ranking import Ranker
from as2hub.metrics import bm25_scores, compute_as2_metrics, expected_random_metrics
from as2hub.modeling.files import write_json_atomic
from as2hub.run_scripts import run_as2, run_pretrain

logger = logging.getLogger("as2hub.demo")

SHOWN_QUESTIONS = 3


def _ranking_table(test, model_metrics: dict) -> dict[str, dict[str, float]]:
    """MAP / MRR / P@1 of the model beside a random ranking and BM25 on the same test rows."""
    rows = test.dataset
    question_ids, labels = rows["question_id"], rows["label"]
    bm25 = compute_as2_metrics(question_ids, bm25_scores(rows["question"], rows["candidate"]), labels, k_values=(1,))
    random = expected_random_metrics(question_ids, labels)
    model = {name: model_metrics[f"test_{name}"] for name in ("map", "mrr", "p@1")}
    return {
        "random (expected)": {name: random[name] for name in model},
        "BM25 (word overlap)": {name: bm25[name] for name in model},
        "as2hub ranker": model,
    }


def _examples(ranker: Ranker, test) -> list[dict]:
    """The first test questions (no selection), their candidates ranked by the saved model, correct ones marked."""
    by_question: dict[str, list[dict]] = {}
    for row in test.dataset:
        if row["question_id"] not in by_question and len(by_question) == SHOWN_QUESTIONS:
            break
        by_question.setdefault(row["question_id"], []).append(row)
    shown = []
    for rows in by_question.values():
        ranked = ranker.rank(rows[0]["question"], [r["candidate"] for r in rows], [r["context"] for r in rows])
        shown.append(
            {
                "question": rows[0]["question"],
                "ranking": [
                    {"score": item.score, "correct": bool(rows[item.index]["label"]), "candidate": item.text}
                    for item in ranked
                ],
            }
        )
    return shown


def _short(text: str, width: int = 88) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render(summary: dict) -> str:
    before, after = summary["pretrain_before"], summary["pretrain_eval"]
    lines = [
        "",
        "=" * 100,
        "as2hub demo: what was measured (embedded task built from Python's docs; a tiny model from scratch)",
        "",
        f"{'pre-training, held-out documents':<52}{'before':>10}{'after':>10}",
    ]
    for label, key in (
        ("sentence task AUC (chance 0.5)", "cls_auc"),
        ("sentence task balanced accuracy (chance 0.5)", "cls_balanced_accuracy"),
        ("masked-LM loss", "mlm_loss"),
    ):
        if f"before_{key}" in before and f"eval_{key}" in after:
            lines.append(f"  {label:<50}{before[f'before_{key}']:>10.3f}{after[f'eval_{key}']:>10.3f}")
    heading = f"ranking the test set ({summary['test_questions']} questions, {summary['test_rows']} candidates)"
    lines += ["", f"{heading:<52}{'MAP':>10}{'MRR':>10}{'P@1':>10}"]
    for system, metrics in summary["ranking"].items():
        lines.append(f"  {system:<50}" + "".join(f"{metrics[name]:>10.3f}" for name in ("map", "mrr", "p@1")))
    lines += ["", f"the first {SHOWN_QUESTIONS} test questions, ranked by the saved ranker (* = a correct candidate):"]
    for example in summary["examples"]:
        lines.append(f"  Q: {_short(example['question'])}")
        for item in example["ranking"]:
            lines.append(f"    {item['score']:.3f} {'*' if item['correct'] else ' '} {_short(item['candidate'], 80)}")
    lines += ["", f"ranker folder (loads with trust_remote_code=True): {summary['ranker_dir']}", "=" * 100]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="outputs/demo")
    parser.add_argument("--pretrain_steps", type=int, default=None, help="default: run_pretrain's own default")
    parser.add_argument("--finetune_epochs", type=float, default=2)
    parser.add_argument(
        "--eval_passes", type=int, default=None, help="held-out sampling passes (default: run_pretrain's own, 10)"
    )
    args = parser.parse_args(argv)
    out = Path(args.output_dir)

    pretrain_args = ["--output_dir", str(out / "pretrain"), "--save_strategy", "no", "--overwrite_output_dir"]
    if args.pretrain_steps is not None:
        pretrain_args += ["--max_steps", str(args.pretrain_steps)]
    if args.eval_passes is not None:
        pretrain_args += ["--eval_passes", str(args.eval_passes)]
    pretrained = run_pretrain.main(pretrain_args)

    ranker_dir = out / "ranker"
    finetuned = run_as2.main(
        [
            "--model_name_or_path", str(out / "pretrain"),
            "--dataset", "embedded",
            "--output_dir", str(ranker_dir),
            "--overwrite_output_dir",
            "--num_train_epochs", str(args.finetune_epochs),
            "--learning_rate", "5e-4",
            "--per_device_train_batch_size", "32",
            "--max_length", "128",
            "--save_total_limit", "1",
            "--remove_checkpoints",  # the ranker folder holds the ranker, not the optimizer's state
        ]
    )  # fmt: skip

    test = embedded_as2_split("test", clean=True)  # the split run_as2 evaluated
    summary = {
        "pretrain_before": pretrained.get("before", {}),
        "pretrain_eval": pretrained.get("eval", {}),
        "ranker_test": finetuned["test"],
        "test_questions": test.stats["questions"],
        "test_rows": test.stats["rows"],
        "ranking": _ranking_table(test, finetuned["test"]),
        "examples": _examples(Ranker.from_pretrained(str(ranker_dir)), test),
        "ranker_dir": str(ranker_dir),
    }
    write_json_atomic(out / "demo_summary.json", summary)
    print(render(summary))
    return summary


if __name__ == "__main__":
    main()

"""The main job on the embedded corpus, end to end: pre-train, fine-tune, rank.

1. ``run_pretrain`` pre-trains a tiny RoBERTa with the DSLC objective on Python's own docs, with a
   byte-level BPE trained on them;
2. ``run_as2`` fine-tunes that checkpoint as a contextual AS2 ranker on the embedded sentence-selection task;
3. the saved folder ranks candidates through ``Ranker`` and through a ``pipeline``.

    python -m as2hub.run_scripts.demo --output_dir outputs/demo [--pretrain_steps 600] [--finetune_epochs 2]
"""

import argparse
import json
import logging
from pathlib import Path

from transformers import pipeline

from as2hub.modeling.ranking import Ranker
from as2hub.run_scripts import run_as2, run_pretrain

logger = logging.getLogger("as2hub.demo")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="outputs/demo")
    parser.add_argument("--pretrain_steps", type=int, default=None, help="default: run_pretrain's own default")
    parser.add_argument("--finetune_epochs", type=float, default=2)
    args = parser.parse_args(argv)
    out = Path(args.output_dir)

    pretrain_args = ["--output_dir", str(out / "pretrain"), "--save_strategy", "no"]
    if args.pretrain_steps is not None:
        pretrain_args += ["--max_steps", str(args.pretrain_steps)]
    pretrained = run_pretrain.main(pretrain_args)

    ranker_dir = out / "ranker"
    finetuned = run_as2.main(
        [
            "--model_name_or_path", str(out / "pretrain"),
            "--dataset", "embedded",
            "--output_dir", str(ranker_dir),
            "--num_train_epochs", str(args.finetune_epochs),
            "--learning_rate", "5e-4",
            "--per_device_train_batch_size", "32",
            "--max_length", "128",
            "--warmup_steps", "0.1",
            "--save_total_limit", "1",
        ]
    )  # fmt: skip

    ranker = Ranker.from_pretrained(str(ranker_dir))
    question = "What does the break statement do?"
    candidates = [
        "It terminates the nearest enclosing loop, skipping the optional else clause if the loop has one.",
        "Strings are immutable sequences of Unicode code points.",
        "If a finally clause is present, it is executed on the way out of the loop.",
    ]
    ranking = ranker.rank(question, candidates)
    pipe = pipeline("text-classification", model=str(ranker_dir), trust_remote_code=True)
    summary = {
        "pretrain_eval": pretrained.get("eval", {}),
        "pretrain_before": pretrained.get("before", {}),
        "ranker_test": finetuned.get("test", {}),
        "ranking_example": {"question": question, "ranking": [vars(r) for r in ranking]},
        "pipeline_example": pipe({"text": question, "text_pair": candidates[0]}),
    }
    print(json.dumps(summary, indent=2, default=float))
    return summary


if __name__ == "__main__":
    main()

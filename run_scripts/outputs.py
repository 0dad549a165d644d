"""Writing run outputs so that nothing is ever half-written: temp file (or folder) first, then an atomic rename."""

import contextlib
import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np


def write_json_atomic(path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=float) + "\n")


def write_text_atomic(path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)  # NamedTemporaryFile creates 0600; results are meant to be shared
    os.replace(handle.name, path)


# Moved last, so that the folder never pairs a new config.json with the previous run's weights mid-move.
_LAST = ("config.json",)


def _move_into(staging: Path, output_dir: Path) -> None:
    """Rename every item of ``staging`` into ``output_dir`` (replacing what is there), ``config.json`` last."""
    for item in sorted(staging.iterdir(), key=lambda path: path.name in _LAST):
        target = output_dir / item.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(item, target)


@contextlib.contextmanager
def staged_folder(output_dir):
    """Write a model folder's files into a hidden staging folder inside ``output_dir``; they replace the folder's
    files only when the block ends without an error (a crash or an exception while saving leaves the previous model
    intact and the staging folder removed).

    Example::

        with staged_folder("outputs/run") as staging:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output_dir, prefix=".staging-"))
    try:
        yield staging
        _move_into(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def positive_scores(logits: np.ndarray, config) -> np.ndarray:
    """Probability of "correct" from raw logits: sigmoid of a single logit, or the positive class's softmax."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim == 1 or logits.shape[-1] == 1:
        return 1.0 / (1.0 + np.exp(-logits.reshape(-1)))
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (shifted / shifted.sum(axis=-1, keepdims=True))[:, config.label2id.get("correct", logits.shape[-1] - 1)]


def write_ranked_predictions(output_dir, dataset, logits, model, name: str = "test_predictions.jsonl") -> None:
    """One JSON line per question: its candidates sorted by score, with their gold labels."""
    scores = positive_scores(logits, model.config)
    by_question = defaultdict(list)
    for row, score in zip(dataset, scores.tolist()):
        by_question[row["question_id"]].append((score, row))
    lines = []
    for question_id, scored in by_question.items():
        scored.sort(key=lambda item: -item[0])
        lines.append(
            json.dumps(
                {
                    "question_id": question_id,
                    "question": scored[0][1]["question"],
                    "ranking": [{"candidate": r["candidate"], "score": s, "label": r["label"]} for s, r in scored],
                }
            )
        )
    write_text_atomic(Path(output_dir) / name, "\n".join(lines) + "\n")


def save_hub_folder(
    model,
    tokenizer,
    output_dir,
    model_args,
    data_args,
    results,
    training_args=None,
    family: str = "contextual_as2",
    auto_class: str = "AutoModelForSequenceClassification",
    batch: dict | None = None,
    extras: dict | None = None,
    metrics_file: str = "all_results.json",
) -> dict:
    """Save a run's Hub folder: config with auto_map, remote code, safetensors, tokenizer, run record and model card.

    A LoRA (PEFT) model is saved twice: its adapter in ``lora_adapter/`` (with an ``adapter`` component) and merged
    into the weights of the folder. The run record (``as2hub_run.json``, family ``family``) holds the reference outputs
    ``as2hub-push`` checks before uploading, computed on ``batch`` (a small collated batch of tensors, for families
    whose forward needs more than ``tokenizer(text, text_pair)``) or else on (question, candidate[, context]) pairs;
    ``auto_class`` is how the check loads the folder; ``extras`` go into the record for the family's card. Everything
    is written to a staging folder first and then moved in. Returns the record.

        save_hub_folder(model, tokenizer, out, model_args, data_args, results, training_args,
                        family="joint_multicandidate", auto_class="AutoModel", batch=collator(features))
    """
    from as2hub.modeling.ranking import context_text_pair
    from as2hub.run_scripts.publishing import REFERENCE_PAIRS, component, record_run

    output_dir = Path(output_dir)
    extras = dict(extras or {})
    pairs = REFERENCE_PAIRS
    if batch is None:  # a cross-encoder: the reference input is tokenizer pairs (with a context when contextual)
        extras.setdefault("context_separator", context_text_pair(tokenizer, "", ""))
        if getattr(model.config, "contextual", False):
            context = "It was first performed around 1600 in London."
            pairs = [(q, context_text_pair(tokenizer, s, context)) for q, s in REFERENCE_PAIRS]
    with staged_folder(output_dir) as staging:
        components = {}
        if hasattr(model, "merge_and_unload"):  # a PEFT model: keep the adapter, ship the merged weights
            model.save_pretrained(staging / "lora_adapter")
            peft_config = next(iter(model.peft_config.values()))
            extras["lora_modules_to_save"] = sorted(peft_config.modules_to_save or [])
            components["adapter"] = component(
                "lora_adapter", model, tokenizer, auto_class, kind="adapter", pairs=pairs, batch=batch
            )
            model = model.merge_and_unload()
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        components = {"model": component(".", model, tokenizer, auto_class, pairs=pairs, batch=batch), **components}
        arguments = {"model": model_args, "data": data_args, "training": training_args}
        record = record_run(
            staging,
            family,
            model,
            tokenizer,
            arguments,
            results,
            metrics_file,
            components,
            extras=extras,
            model_id=str(output_dir),
        )
    return record

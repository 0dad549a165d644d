"""Writing run outputs so that nothing is ever half-written: temp file (or folder) first, then an atomic rename."""

import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from as2hub.hub_cards import render_model_card


def write_json_atomic(path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=float) + "\n")


def write_text_atomic(path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)  # NamedTemporaryFile creates 0600; results are meant to be shared
    os.replace(handle.name, path)


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
    model, tokenizer, output_dir, model_args, data_args, results, render_card=None, card: str | None = None
) -> None:
    """Config with auto_map, remote code, safetensors, tokenizer and model card (``card``, else
    ``render_card(model, model_args, data_args, results)``, default the contextual AS2 card); LoRA adapters saved then
    merged."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output_dir, prefix=".staging-"))
    try:
        if hasattr(model, "merge_and_unload"):  # a PEFT model: keep the adapter, ship the merged weights
            model.save_pretrained(staging / "lora_adapter")
            model = model.merge_and_unload()
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if card is None:
            card = (render_card or render_model_card)(model, model_args, data_args, results)
        (staging / "README.md").write_text(card)
        for item in staging.iterdir():
            target = output_dir / item.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(item, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

"""Train / validation / test splits for ``run_as2.py``: WikiQA, user files, or the embedded sentence-selection task.

The embedded task needs nothing but Python: from the documents of ``pydoc_data.topics`` (Python's own reference
prose), the first sentence of a paragraph is the "question" and the other sentences of its document are the
candidates; a candidate is correct when it comes from the question's paragraph. It exercises the whole pipeline
(contexts, clean evaluation, ranking metrics) on a fresh machine; it is a smoke-test task, not a QA benchmark.
"""

import hashlib
import logging
import random

import datasets

from as2hub.data_collators.readers.as2_data import AS2Data, load_as2_data, read_wikiqa
from as2hub.data_collators.readers.corpus import iter_documents

logger = logging.getLogger(__name__)

EMBEDDED_SPLITS = {"train": (0, 80), "validation": (80, 90), "test": (90, 100)}


def load_splits(data_args) -> dict[str, AS2Data]:
    """``{"train", "validation"?, "test"?}`` -> :class:`AS2Data`; dev/test in the clean setting if asked."""
    clean = data_args.clean_eval
    if data_args.dataset == "wikiqa":
        splits = {
            "train": read_wikiqa("train"),
            "validation": read_wikiqa("dev", clean=clean),
            "test": read_wikiqa("test", clean=clean),
        }
    elif data_args.dataset == "embedded":
        splits = {name: embedded_as2_split(name, clean=clean and name != "train") for name in EMBEDDED_SPLITS}
    else:
        splits = {"train": load_as2_data(data_args.dataset)}
        if data_args.validation_file:
            splits["validation"] = load_as2_data(data_args.validation_file, clean=clean)
        if data_args.test_file:
            splits["test"] = load_as2_data(data_args.test_file, clean=clean)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples}
    for name, limit in limits.items():
        if limit is not None and name in splits:
            splits[name] = _first_questions(splits[name], limit)
    for name, split in splits.items():
        logger.info("%s: %s %s", name, split.source, split.stats)
    return splits


def _first_questions(split: AS2Data, max_rows: int) -> AS2Data:
    """Keep whole questions (never a partial candidate list) up to ``max_rows`` rows."""
    question_ids = split.dataset["question_id"]
    keep, seen = [], set()
    for index, question_id in enumerate(question_ids):
        if question_id not in seen and len(keep) >= max_rows:
            break
        seen.add(question_id)
        keep.append(index)
    return AS2Data(dataset=split.dataset.select(keep), source=split.source, stats={**split.stats, "rows": len(keep)})


def embedded_as2_split(split: str, clean: bool = False, max_negatives: int = 8, seed: int = 0) -> AS2Data:
    """One split of the embedded task; documents are assigned to splits by a hash of their id (80/10/10)."""
    low, high = EMBEDDED_SPLITS[split]
    rng = random.Random(f"{seed}-{split}")
    columns = {name: [] for name in ("question_id", "question", "candidate", "label", "context")}
    for document in iter_documents():
        bucket = int(hashlib.sha1(document["doc_id"].encode()).hexdigest(), 16) % 100
        paragraphs = document["paragraphs"]
        if not low <= bucket < high or len(paragraphs) < 2:
            continue
        sentences = [(p, s) for p, paragraph in enumerate(paragraphs) for s in paragraph]
        texts = [s for _, s in sentences]
        for p, paragraph in enumerate(paragraphs):
            if len(paragraph) < 2:
                continue
            question = paragraph[0]
            others = [i for i, (q, _) in enumerate(sentences) if q != p]
            chosen = [i for i, (q, s) in enumerate(sentences) if q == p and s != question]
            chosen += rng.sample(others, min(max_negatives, len(others)))
            for i in sorted(chosen):
                columns["question_id"].append(f"{document['doc_id']}#{p}")
                columns["question"].append(question)
                columns["candidate"].append(texts[i])
                columns["label"].append(int(sentences[i][0] == p))
                columns["context"].append(" ".join(texts[j] for j in (i - 1, i + 1) if 0 <= j < len(texts)))
    dataset = datasets.Dataset.from_dict(columns)
    return load_as2_data(dataset, clean=clean, description=f"embedded pydoc sentence selection ({split})")

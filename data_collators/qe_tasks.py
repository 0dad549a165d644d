"""Train / validation / test splits for ``run_qe_contrastive.py``: HotpotQA-format files or ``datasets``, WikiQA as an
evidence task (``wikiqa_distractor``), or the embedded smoke task.

``embedded`` needs nothing but Python: the sentence-selection task of ``run_as2.py`` (``as2_datasets``: the first
sentence of a paragraph of Python's own docs is the "question", the other sentences of its paragraph are its evidence)
turned into distractor records exactly as WikiQA is (:func:`~as2hub.data_collators.hotpotqa.distractor_records`),
with 2 distractor passages by default so that a tiny model reads it quickly. A smoke-test task, not a benchmark.
"""

import collections
import logging

from as2hub.data_collators.as2_splits import EMBEDDED_SPLITS, embedded_as2_split
from as2hub.data_collators.hotpotqa import (
    WIKIQA_QUESTION_TYPES,
    HotpotQAData,
    distractor_records,
    read_hotpotqa,
    wikiqa_distractor,
)
from as2hub.modeling.longformer_qe.configuration_longformer_qe import DEFAULT_ANSWER_TYPES

logger = logging.getLogger(__name__)

BUILT_IN = ("wikiqa_distractor", "embedded")
DEFAULT_DISTRACTORS = {"wikiqa_distractor": 9, "embedded": 2}


def default_question_types(dataset: str) -> tuple[list[str], str]:
    """(question types, record field naming them): the question word for the built-in evidence tasks (their answer
    type is always "none"), the answer type (span / yes / no, the paper's HotpotQA setup) otherwise."""
    if dataset in BUILT_IN:
        return list(WIKIQA_QUESTION_TYPES), "type"
    return list(DEFAULT_ANSWER_TYPES), "answer_type"


def embedded_distractor(split: str, num_distractors: int = 2, seed: int = 0, max_sentences: int = 20) -> HotpotQAData:
    """One split of the embedded evidence task (see the module docstring); dev/test in the clean setting. Questions
    (and passages) with more than ``max_sentences`` candidates are left out (3 of 704 in train: long tables)."""
    clean = split != "train"
    questions = _short(embedded_as2_split(split, clean=clean).dataset, max_sentences)
    passages = _short(embedded_as2_split(split).dataset, max_sentences) if clean else questions
    records = distractor_records(
        questions,
        passages,
        titles={},
        num_distractors=num_distractors,
        seed=seed,
        document_of=lambda row: row["question_id"].rsplit("#", 1)[0],
    )
    data = read_hotpotqa(records, description=f"embedded evidence task ({split})")
    data.stats.update({"clean": clean, "num_distractors": num_distractors})
    return data


def _short(dataset, max_sentences: int):
    counts = collections.Counter(dataset["question_id"])
    return dataset.filter(lambda row: counts[row["question_id"]] <= max_sentences)


def load_qe_splits(data_args) -> dict[str, HotpotQAData]:
    """``{"train", "validation"?, "test"?}`` -> validated :class:`HotpotQAData` (every split read before training)."""
    name = data_args.dataset
    skip = data_args.skip_invalid_examples
    distractors = data_args.num_distractors or DEFAULT_DISTRACTORS.get(name, 9)
    if name == "wikiqa_distractor":
        splits = {
            split: wikiqa_distractor(split, distractors, seed=data_args.dataset_seed)
            for split in ("train", "validation", "test")
        }
    elif name == "embedded":
        splits = {
            split: embedded_distractor(split, distractors, seed=data_args.dataset_seed) for split in EMBEDDED_SPLITS
        }
    else:
        splits = {"train": read_hotpotqa(name, skip_invalid=skip)}
        if data_args.validation_file:
            splits["validation"] = read_hotpotqa(data_args.validation_file, skip_invalid=skip, split="validation")
        if data_args.test_file:
            splits["test"] = read_hotpotqa(data_args.test_file, skip_invalid=skip, split="test")
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": getattr(data_args, "max_test_samples", None),
    }
    for split, limit in limits.items():
        if limit is not None and split in splits and limit < len(splits[split]):
            data = splits[split]
            splits[split] = HotpotQAData(data.dataset.select(range(limit)), data.source, {**data.stats, "kept": limit})
    for split, data in splits.items():
        logger.info("%s: %s, %d examples, %s", split, data.source, len(data), data.stats)
    return splits

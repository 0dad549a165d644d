"""Train / validation / test splits for ``run_qe_contrastive.py``: HotpotQA-format files or ``datasets``, WikiQA as an
evidence task (``wikiqa_distractor``), or the embedded smoke task.

``embedded`` needs nothing but Python: the sentence-selection task of ``run_as2.py`` (``as2_datasets``: the first
sentence of a paragraph of Python's own docs is the "question", the other sentences of its paragraph are its evidence)
turned into distractor records exactly as WikiQA is
(:func:`~as2hub.data_collators.readers.hotpotqa.distractor_records`), with 2 distractor passages by default so that
a tiny model reads it quickly. A smoke-test task, not a benchmark.
"""

import collections
import csv
import logging
import os
import random
from collections.abc import Callable

import datasets

from as2hub.data_collators.readers.as2_data import AS2DataError, read_wikiqa, resolve_wikiqa
from as2hub.data_collators.readers.as2_splits import EMBEDDED_SPLITS, embedded_as2_split
from as2hub.data_collators.readers.hotpotqa import (
    WIKIQA_QUESTION_TYPES,
    HotpotQAData,
    read_hotpotqa,
)
from as2hub.data_collators.readers.text_files import open_text
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


# --------------------------------------------------------------------------------------------------------------------
# Evidence tasks built from AS2 data (WikiQA)


def question_word_type(question: str, types: tuple[str, ...] = WIKIQA_QUESTION_TYPES) -> str:
    """The question's first word if it is one of ``types``, else ``"other"``.

    Example:
        >>> question_word_type("How are glacier caves formed?"), question_word_type("Name the capital.")
        ('how', 'other')
    """
    words = question.strip().lower().split()
    return words[0] if words and words[0] in types else "other"


def distractor_records(
    questions: datasets.Dataset,
    passages: datasets.Dataset,
    titles: dict[str, str],
    num_distractors: int = 9,
    seed: int = 0,
    document_of: Callable[[dict], str] | None = None,
    question_type_of: Callable[[str], str] = question_word_type,
) -> list[dict]:
    """HotpotQA-format records from AS2 rows (``question_id``, ``question``, ``candidate``, ``label``, ...): the
    context of a question is its own passage (its candidates in row order, i.e. document order) inserted at a random
    place among ``num_distractors`` passages of other documents of ``passages`` (other titles too; a document's
    passage is the candidate list of its first question, which for WikiQA is every question's); the supporting
    facts are its correct candidates; the answer is empty (answer type ``none``); ``type`` is
    ``question_type_of(question)``; ``level`` is ``"distractor"``. Seeded per question: the same inputs always give
    the same records.
    """
    document_of = document_of or (lambda row: row["document_id"] or row["question_id"])
    passage_of: dict[str, list[str]] = {}
    first_question: dict[str, str] = {}  # a document's passage: the candidates of its first question, in order
    for row in passages:
        document = document_of(row)
        if first_question.setdefault(document, row["question_id"]) == row["question_id"]:
            passage_of.setdefault(document, []).append(row["candidate"])
    grouped: dict[str, dict] = {}
    for row in questions:
        entry = grouped.setdefault(
            row["question_id"], {"question": row["question"], "document": document_of(row), "rows": []}
        )
        entry["rows"].append((row["candidate"], row["label"]))
    documents = sorted(passage_of)
    records = []
    for question_id, entry in grouped.items():
        rng = random.Random(f"{seed}-{question_id}")
        own_title = titles.get(entry["document"], entry["document"])
        others = [d for d in documents if d != entry["document"] and titles.get(d, d) != own_title]
        chosen = rng.sample(others, min(num_distractors, len(others)))
        context = [[titles.get(d, d), passage_of[d]] for d in chosen]
        context.insert(rng.randint(0, len(context)), [own_title, [c for c, _ in entry["rows"]]])
        records.append(
            {
                "_id": question_id,
                "question": entry["question"],
                "answer": "",
                "type": question_type_of(entry["question"]),
                "level": "distractor",
                "supporting_facts": [[own_title, k] for k, (_, label) in enumerate(entry["rows"]) if label == 1],
                "context": context,
            }
        )
    return records


def _wikiqa_titles(split: str, root: str | os.PathLike | None = None) -> dict[str, str]:
    path = resolve_wikiqa(split, root)
    with open_text(path, AS2DataError) as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return {row["DocumentID"]: row["DocumentTitle"] for row in reader}


def wikiqa_distractor(
    split: str,
    num_distractors: int = 9,
    *,
    clean: bool | None = None,
    seed: int = 0,
    root: str | os.PathLike | None = None,
) -> HotpotQAData:
    """WikiQA as a HotpotQA-distractor-style evidence task (no answer spans).

    Each question becomes a record whose context is its own Wikipedia passage (its candidate sentences in document
    order, under the page title) among ``num_distractors`` passages of other documents of the same split (default 9:
    HotpotQA's 10 paragraphs); its supporting facts are the correct sentences; the answer type is ``none`` (the span
    head is masked out); ``type`` is the question word (:data:`WIKIQA_QUESTION_TYPES`). ``clean`` (default: True for
    dev and test) keeps the questions with at least one correct and one wrong candidate, as read by
    :func:`~as2hub.data_collators.read_wikiqa`; distractors come from every document of the split.

    Example:
        >>> dev = wikiqa_distractor("dev")  # doctest: +SKIP
        >>> len(dev), dev.dataset[0]["context"]["title"][:2]  # doctest: +SKIP
        (122, [...])
    """
    split = "dev" if split == "validation" else split
    clean = split != "train" if clean is None else clean
    questions = read_wikiqa(split, root=root, clean=clean).dataset
    passages = questions if not clean else read_wikiqa(split, root=root).dataset
    records = distractor_records(questions, passages, _wikiqa_titles(split, root), num_distractors, seed)
    data = read_hotpotqa(records, description=f"WikiQA {split} as distractor records ({num_distractors} distractors)")
    data.stats.update({"clean": clean, "num_distractors": num_distractors})
    return data

"""HotpotQA-style long-context QA data for :class:`~as2hub.modeling.LongformerWithQEContrastive`.

Three steps, each usable on its own:

1. **Read** (:func:`read_hotpotqa`): the HotpotQA distractor JSON (a JSON array or JSON lines, optionally ``.gz``;
   records ``_id``, ``question``, ``answer``, ``type``, ``level``, ``supporting_facts: [[title, sent_id], ...]``,
   ``context: [[title, [sentences]], ...]``) or the same records in the ``datasets`` layout (``id``,
   ``context: {title: [...], sentences: [[...]]}``, ``supporting_facts: {title: [...], sent_id: [...]}``): a
   :class:`datasets.Dataset`, a ``save_to_disk`` folder or a name for :func:`datasets.load_dataset`. Every record is
   validated (supporting facts must name a title of the context and one of its sentences; a span answer must occur in
   the supporting paragraphs) and gets an ``answer_type``: ``yes``, ``no``, ``span``, or ``none`` for an empty answer
   (no span: the span and answer-type heads skip it). :func:`wikiqa_distractor` builds such records from WikiQA.
2. **Encode** (:class:`HotpotQAEncoder`): the input of Caciularu et al. (NAACL 2022), appendix B.2::

       <s> [q] question [/q] <doc-s> <t> title </t> <sent> s1 </sent> <sent> s2 </sent> </doc-s> ... </s>

   with the markers of :func:`add_marker_tokens`; truncation to ``max_length`` keeps whole sentences with their markers
   (the first sentence that does not fit ends the input) and reports what it dropped; the positions of the question
   marker, every ``<sent>`` and every ``<t>`` marker; the labels of the supporting sentences and paragraphs; the
   token positions of every occurrence of the answer in the supporting paragraphs.
3. **Collate** (:class:`HotpotQACollator`): pads a batch and adds ``attention_mask``, the ``global_attention_mask``
   (first token, question tokens with their markers, ``<t>`` and ``<sent>`` markers) and the ``span_mask``.

Errors raise :class:`HotpotQAError` (a ``ValueError``) naming the file (or dataset), the record and the example id,
before anything is written; ``skip_invalid=True`` skips such examples instead, logging and counting each reason.

Example:
    >>> data = read_hotpotqa("hotpot_dev_distractor_v1.json")  # doctest: +SKIP
    >>> add_marker_tokens(tokenizer, model)  # doctest: +SKIP
    >>> encoder = HotpotQAEncoder.from_config(tokenizer, model.config, max_length=4096)  # doctest: +SKIP
    >>> features, decode_infos, stats = encoder.encode_dataset(data)  # doctest: +SKIP
    >>> batch = HotpotQACollator(tokenizer)(list(features)[:2])  # doctest: +SKIP
    >>> model(**batch).loss  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import csv
import json
import logging
import os
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch

from as2hub.modeling.longformer_qe.configuration_longformer_qe import DEFAULT_ANSWER_TYPES, MARKER_TOKENS
from as2hub.modeling.longformer_qe.modeling_longformer_qe import infer_marker_inputs

from .as2_data import _open_text, _resolve_wikiqa, read_wikiqa
from .text_files import lone_surrogate, read_text, split_lines

logger = logging.getLogger(__name__)

HOTPOTQA_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answer": datasets.Value("string"),
        "answer_type": datasets.Value("string"),
        "type": datasets.Value("string"),
        "level": datasets.Value("string"),
        "supporting_facts": {
            "title": datasets.Sequence(datasets.Value("string")),
            "sent_id": datasets.Sequence(datasets.Value("int32")),
        },
        "context": {
            "title": datasets.Sequence(datasets.Value("string")),
            "sentences": datasets.Sequence(datasets.Sequence(datasets.Value("string"))),
        },
    }
)
"""Columns of every dataset :func:`read_hotpotqa` returns (the ``datasets`` layout plus ``answer_type``)."""

ANSWER_TYPES = ("span", "yes", "no", "none")
WIKIQA_QUESTION_TYPES = ("what", "how", "who", "where", "when", "other")
"""Question types of :func:`wikiqa_distractor` records (their ``type``): the question's first word."""

TRUNCATED_EVIDENCE_POLICIES = ("error", "skip", "keep")
MIN_LENGTH = 10  # <s> [q] [/q] <doc-s> <t> </t> <sent> </sent> </doc-s> </s>


class HotpotQAError(ValueError):
    """Invalid HotpotQA-style input; the message names the file (or dataset), the record and the example id."""


@dataclass
class HotpotQAData:
    """Validated records and where they came from.

    Attributes:
        dataset: :class:`datasets.Dataset` with :data:`HOTPOTQA_FEATURES`.
        source: the file path or a description of the input.
        stats: ``examples``, ``answer_types`` (count per type), ``skipped`` (count per reason).
    """

    dataset: datasets.Dataset
    source: str
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.dataset)


# --------------------------------------------------------------------------------------------------------------------
# Reading


class _Skip(Exception):
    """A record that ``skip_invalid=True`` drops: ``reason`` is the counter key, the message says why."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def answer_type_of(answer: str) -> str:
    """``yes`` / ``no`` (case-insensitive), ``none`` (empty answer), else ``span``."""
    normalized = answer.strip().lower()
    if normalized in ("yes", "no"):
        return normalized
    return "none" if not normalized else "span"


def find_answer(text: str, answer: str) -> list[tuple[int, int]]:
    """Character spans of every occurrence of ``answer`` in ``text``: whole-word exact matches, else whole-word
    case-insensitive ones, else case-insensitive substrings.

    Example:
        >>> find_answer("Paris is in France; paris again; Parisian.", "Paris")
        [(0, 5)]
        >>> find_answer("paris and PARIS", "Paris")
        [(0, 5), (10, 15)]
    """
    answer = answer.strip()
    if not answer:
        return []
    escaped = re.escape(answer)
    left = r"(?<!\w)" if re.match(r"\w", answer[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", answer[-1]) else ""
    for pattern, flags in ((left + escaped + right, 0), (left + escaped + right, re.IGNORECASE), (escaped, re.I)):
        spans = [m.span() for m in re.finditer(pattern, text, flags)]
        if spans:
            return spans
    return []


def _type_name(value: Any) -> str:
    return type(value).__name__


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {_type_name(value)} {value!r:.60}")
    return value


def _context(record: dict) -> tuple[list[str], list[list[str]]]:
    context = record.get("context")
    if context is None:
        raise ValueError("missing key 'context'")
    if isinstance(context, dict):  # datasets layout
        titles, sentences = context.get("title"), context.get("sentences")
        if not isinstance(titles, list | tuple) or not isinstance(sentences, list | tuple):
            raise ValueError("context must hold lists 'title' and 'sentences'")
        if len(titles) != len(sentences):
            raise ValueError(f"context has {len(titles)} titles but {len(sentences)} sentence lists")
        pairs = list(zip(titles, sentences))
    elif isinstance(context, list | tuple):  # HotpotQA JSON: [[title, [sentences]], ...]
        pairs = []
        for k, pair in enumerate(context):
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise ValueError(f"context[{k}] must be [title, [sentences]], got {pair!r:.80}")
            pairs.append(tuple(pair))
    else:
        raise ValueError(f"context must be a list of [title, sentences] or a dict, got {_type_name(context)}")
    titles, paragraphs = [], []
    for k, (title, sentences) in enumerate(pairs):
        title = _string(title, f"context title {k}")
        if not title.strip():
            raise ValueError(f"context title {k} is empty")
        if not isinstance(sentences, list | tuple):
            raise ValueError(f"sentences of {title!r} must be a list, got {_type_name(sentences)}")
        paragraphs.append([_string(s, f"sentence {j} of {title!r}") for j, s in enumerate(sentences)])
        titles.append(title)
    duplicated = sorted({t for t in titles if titles.count(t) > 1})
    if duplicated:
        raise ValueError(f"context titles must be unique (supporting facts name them), repeated: {duplicated}")
    if not titles:
        raise ValueError("empty context")
    return titles, paragraphs


def _supporting_facts(record: dict) -> list[tuple[str, Any]]:
    facts = record.get("supporting_facts")
    if facts is None:
        raise ValueError("missing key 'supporting_facts'")
    if isinstance(facts, dict):  # datasets layout
        titles, ids = facts.get("title"), facts.get("sent_id")
        if not isinstance(titles, list | tuple) or not isinstance(ids, list | tuple) or len(titles) != len(ids):
            raise ValueError("supporting_facts must hold lists 'title' and 'sent_id' of the same length")
        return list(zip(titles, ids))
    if not isinstance(facts, list | tuple):
        raise ValueError(f"supporting_facts must be a list of [title, sent_id], got {_type_name(facts)}")
    out = []
    for fact in facts:
        if not isinstance(fact, list | tuple) or len(fact) != 2:
            raise ValueError(f"supporting fact must be [title, sent_id], got {fact!r:.80}")
        out.append(tuple(fact))
    return out


def validate_record(record: Any) -> dict:
    """One HotpotQA record (either layout) -> the canonical row of :data:`HOTPOTQA_FEATURES`.

    Raises ``ValueError`` for malformed records and ``_Skip`` (a skippable problem) for supporting facts that point
    at missing titles or sentences and span answers absent from the supporting paragraphs.
    """
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {_type_name(record)}")
    example_id = record.get("_id", record.get("id"))
    if isinstance(example_id, int) and not isinstance(example_id, bool):
        example_id = str(example_id)
    if not isinstance(example_id, str) or not example_id.strip():
        raise ValueError("missing or empty example id ('_id' or 'id')")
    question = _string(record.get("question"), "question")
    if not question.strip():
        raise ValueError("empty question")
    if "answer" not in record:
        raise ValueError("missing key 'answer' (use \"\" for a question without an answer span)")
    answer = _string(record["answer"], "answer")
    question_type = record.get("type") or ""
    level = record.get("level") or ""
    _string(question_type, "type")
    _string(level, "level")
    titles, paragraphs = _context(record)
    facts = []
    for title, sent_id in _supporting_facts(record):
        title = _string(title, "supporting fact title")
        if isinstance(sent_id, bool) or not isinstance(sent_id, int):
            raise ValueError(f"supporting fact [{title!r}, {sent_id!r}]: sent_id must be an integer")
        if title not in titles:
            raise _Skip(
                "supporting_fact_missing_title",
                f"supporting fact [{title!r}, {sent_id}] names a title not in the context",
            )
        count = len(paragraphs[titles.index(title)])
        if not 0 <= sent_id < count:
            raise _Skip(
                "supporting_fact_missing_sentence",
                f"supporting fact [{title!r}, {sent_id}] points past the paragraph's {count} sentences",
            )
        if (title, sent_id) not in facts:
            facts.append((title, sent_id))
    answer_type = answer_type_of(answer)
    if answer_type == "span":
        support = {t for t, _ in facts} or set(titles)
        texts = [text for t, p in zip(titles, paragraphs) if t in support for text in (t, *p)]
        if not any(find_answer(text, answer) for text in texts):
            raise _Skip(
                "answer_not_found", f"answer {answer!r} not found in the supporting paragraphs {sorted(support)}"
            )
    return {
        "id": example_id,
        "question": question,
        "answer": answer,
        "answer_type": answer_type,
        "type": question_type,
        "level": level,
        "supporting_facts": {"title": [t for t, _ in facts], "sent_id": [k for _, k in facts]},
        "context": {"title": titles, "sentences": paragraphs},
    }


def _json_records(path: Path, desc: str) -> Iterable[tuple[str, Any]]:
    """(location, record) pairs of a JSON array or JSON lines file."""
    text = read_text(path, HotpotQAError, desc)
    if text.lstrip().startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as err:
            raise HotpotQAError(f"{desc}: invalid JSON at line {err.lineno}: {err.msg}") from None
        except RecursionError:
            raise HotpotQAError(f"{desc}: JSON nested too deeply") from None
        if not isinstance(parsed, list):
            raise HotpotQAError(f"{desc}: expected a JSON array of examples, got {_type_name(parsed)}")
        for k, record in enumerate(parsed):
            yield f"record {k + 1} (index {k})", record
        return
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise HotpotQAError(f"{desc}: line {number}: invalid JSON: {err.msg}") from None
        except RecursionError:
            raise HotpotQAError(f"{desc}: line {number}: invalid JSON: nested too deeply") from None
        yield f"line {number}", record


def _where(desc: str, location: str, record: Any) -> str:
    example_id = record.get("_id", record.get("id")) if isinstance(record, dict) else None
    return f"{desc}: {location}" + (f", example id {example_id!r}" if example_id is not None else "")


def read_hotpotqa(
    source: str | os.PathLike | datasets.Dataset | datasets.DatasetDict | list[dict],
    *,
    skip_invalid: bool = False,
    split: str = "train",
    description: str | None = None,
    **load_dataset_kwargs: Any,
) -> HotpotQAData:
    """Read and validate HotpotQA-style records (see the module docstring) into :data:`HOTPOTQA_FEATURES`.

    ``source``: a ``.json`` (array) / ``.jsonl`` file (optionally ``.gz``), a :class:`datasets.Dataset` or
    ``DatasetDict`` (``split`` is taken), a ``save_to_disk`` folder, a name for :func:`datasets.load_dataset`
    (called with ``split`` and ``load_dataset_kwargs``, e.g. ``name="distractor"``), or a list of records.

    Supporting facts naming a missing title or sentence and span answers absent from the supporting paragraphs raise
    :class:`HotpotQAError` naming the record and example id, or with ``skip_invalid=True`` are skipped and counted in
    ``stats["skipped"]``. Malformed records and duplicated ids always raise.

    Example:
        >>> data = read_hotpotqa("hotpot_dev_distractor_v1.json")  # doctest: +SKIP
        >>> data.stats  # doctest: +SKIP
        {'examples': 7405, 'answer_types': {'span': 6947, 'yes': 250, 'no': 208}, 'skipped': {}}
    """
    if isinstance(source, datasets.DatasetDict):
        if split not in source:
            raise HotpotQAError(f"{description or 'DatasetDict'}: no split {split!r} (has: {', '.join(source)})")
        source = source[split]
    if isinstance(source, datasets.Dataset):
        desc = description or f"datasets.Dataset({source.num_rows} rows)"
        pairs = ((f"row {i + 1} (index {i})", row) for i, row in enumerate(source))
    elif isinstance(source, list):
        desc = description or f"records in memory ({len(source)})"
        pairs = ((f"record {i + 1} (index {i})", row) for i, row in enumerate(source))
    else:
        path = Path(source)
        if path.is_file():
            desc = description or str(path)
            pairs = _json_records(path, desc)
        elif path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            return read_hotpotqa(
                datasets.load_from_disk(str(path)), skip_invalid=skip_invalid, split=split, description=str(path)
            )
        elif path.suffix.lower() in (".json", ".jsonl", ".gz"):
            raise FileNotFoundError(f"HotpotQA file not found: {path}")
        else:
            loaded = datasets.load_dataset(str(source), split=split, **load_dataset_kwargs)
            return read_hotpotqa(
                loaded, skip_invalid=skip_invalid, description=description or f"dataset {str(source)!r} ({split})"
            )
    rows, seen, skipped = [], {}, collections.Counter()
    for location, record in pairs:
        where = _where(desc, location, record)
        surrogate = lone_surrogate(record)
        if surrogate:
            raise HotpotQAError(f"{where}: invalid Unicode in {surrogate}")
        try:
            row = validate_record(record)
        except _Skip as problem:
            if not skip_invalid:
                raise HotpotQAError(f"{where}: {problem} (pass skip_invalid=True to skip such examples)") from None
            skipped[problem.reason] += 1
            logger.warning("skipping %s: %s", where, problem)
            continue
        except ValueError as problem:
            raise HotpotQAError(f"{where}: {problem}") from None
        if row["id"] in seen:
            raise HotpotQAError(f"{where}: duplicated example id (first at {seen[row['id']]})")
        seen[row["id"]] = location
        rows.append(row)
    if not rows:
        raise HotpotQAError(f"{desc}: no examples" + (f" (skipped: {dict(skipped)})" if skipped else ""))
    stats = {
        "examples": len(rows),
        "answer_types": dict(collections.Counter(row["answer_type"] for row in rows)),
        "skipped": dict(skipped),
    }
    logger.info("HotpotQA data from %s: %s", desc, stats)
    return HotpotQAData(datasets.Dataset.from_list(rows, features=HOTPOTQA_FEATURES), desc, stats)


def to_official_gold(dataset: datasets.Dataset) -> list[dict]:
    """Records in the official JSON layout (``_id``, ``answer``, ``supporting_facts: [[title, sent_id], ...]``, ...),
    what :func:`as2hub.metrics.hotpotqa_evaluate` compares predictions with."""
    out = []
    for row in dataset:
        facts = row["supporting_facts"]
        out.append(
            {
                "_id": row["id"],
                "question": row["question"],
                "answer": row["answer"],
                "answer_type": row["answer_type"],
                "type": row["type"],
                "supporting_facts": [[t, k] for t, k in zip(facts["title"], facts["sent_id"])],
            }
        )
    return out


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
    path = _resolve_wikiqa(split, root)
    with _open_text(path) as handle:
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


# --------------------------------------------------------------------------------------------------------------------
# Markers


def marker_token_ids(tokenizer, markers: dict[str, str] | None = None) -> dict[str, int]:
    """Marker name -> token id in ``tokenizer`` (after :func:`add_marker_tokens`)."""
    markers = markers or MARKER_TOKENS
    added = tokenizer.get_added_vocab()
    missing = [text for text in markers.values() if text not in added]
    if missing:
        raise ValueError(
            f"the tokenizer has no marker tokens {missing}: call add_marker_tokens(tokenizer, model) first"
        )
    return {name: added[text] for name, text in markers.items()}


@torch.no_grad()
def add_marker_tokens(tokenizer, model=None, init: str = "random", markers: dict[str, str] | None = None):
    """Add the input markers (:data:`~as2hub.modeling.longformer_qe.MARKER_TOKENS`) to ``tokenizer`` as special
    tokens and, with ``model``, resize its embeddings and record the ids in ``model.config.marker_token_ids``.

    New rows are drawn from normal(0, initializer_range) (``init="random"``, appendix B.2: "randomly initialized") or
    set to the mean of the existing rows (``init="mean"``). Markers the tokenizer already has keep their rows, so
    calling this on a saved model's tokenizer changes nothing. A marker equal to one of the backbone's own special
    tokens or to an ordinary vocabulary entry is refused. Returns marker name -> id.
    """
    if init not in ("random", "mean"):
        raise ValueError(f"init must be 'random' or 'mean', got {init!r}")
    markers = markers or MARKER_TOKENS
    added = tokenizer.get_added_vocab()
    backbone_specials = set(tokenizer.all_special_tokens)
    new = []
    for text in markers.values():
        if text in backbone_specials:
            raise ValueError(
                f"marker {text!r} collides with the tokenizer's own special tokens {sorted(backbone_specials)}"
            )
        if text in added:
            continue
        if text in tokenizer.get_vocab():
            raise ValueError(f"marker {text!r} is already an ordinary token of the vocabulary: pass other markers=...")
        new.append(text)
    if new:
        tokenizer.add_tokens(new, special_tokens=True)
    ids = marker_token_ids(tokenizer, markers)
    if model is not None:
        old_rows = model.get_input_embeddings().weight.shape[0]
        if len(tokenizer) > old_rows:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            weight = model.get_input_embeddings().weight
            if init == "random":
                weight[old_rows:].normal_(mean=0.0, std=model.config.initializer_range)
            else:
                weight[old_rows:] = weight[:old_rows].mean(dim=0)
        model.config.marker_token_ids = dict(ids)
    return ids


# --------------------------------------------------------------------------------------------------------------------
# Encoding


@dataclass
class EncodingStats:
    """What encoding did to a dataset: examples kept, skipped (per reason), and what truncation dropped."""

    examples: int = 0
    skipped: collections.Counter = field(default_factory=collections.Counter)
    truncated_examples: int = 0
    dropped_sentences: int = 0
    dropped_paragraphs: int = 0
    truncated_question_tokens: int = 0
    examples_with_truncated_evidence: int = 0
    longest_input: int = 0

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "skipped"}
        return {**out, "skipped": dict(self.skipped)}


@dataclass
class DecodeInfo:
    """What turns token positions and sentence indices back into text and (title, sent_id) pairs."""

    id: str
    pieces: list[str]  # the text of every title / sentence in the input
    token_piece: np.ndarray  # (length,) index into pieces, -1 outside titles and sentences
    token_start: np.ndarray  # (length,) character offsets in the piece
    token_end: np.ndarray
    sentence_keys: list[tuple[str, int]]  # (title, sent_id) of every <sent> marker in order
    sentence_paragraph: list[int]  # paragraph (order in the input) of every sentence
    paragraph_titles: list[str]

    def span_text(self, start: int, end: int) -> str:
        """Text of tokens ``start..end`` (one title or sentence; empty when they lie in different pieces)."""
        if not (0 <= start <= end < len(self.token_piece)):
            return ""
        piece = int(self.token_piece[start])
        if piece < 0 or int(self.token_piece[end]) != piece:
            return ""
        return self.pieces[piece][int(self.token_start[start]) : int(self.token_end[end])].strip()


def _char_to_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """First token ending after ``start`` and last token starting before ``end`` (offsets relative to the piece)."""
    first = next((t for t, (_, e) in enumerate(offsets) if e > start), None)
    last = next(
        (t for t in range(len(offsets) - 1, -1, -1) if offsets[t][0] < end and offsets[t][1] > offsets[t][0]), None
    )
    if first is None or last is None or first > last:
        return None
    return first, last


class HotpotQAEncoder:
    """Builds model inputs from validated records (see the module docstring for the layout).

    Args:
        tokenizer: a fast tokenizer with the markers (:func:`add_marker_tokens`).
        max_length: tokens per input, special tokens and markers included.
        answer_types: the model's answer-type classes (``config.answer_types``).
        question_types, question_type_key: the model's question types and the record field that names them.
        max_question_length: question tokens kept (the rest is cut and counted).
        truncated_evidence: an example whose supporting facts (or every answer occurrence) truncation would drop:
            ``"error"`` (:class:`HotpotQAError` naming the example), ``"skip"`` (logged and counted) or ``"keep"``
            (kept with the visible evidence only, as evaluation wants: the dropped facts count as misses).
        skip_invalid: skip (log and count) examples of an unknown question or answer type, or whose text contains a
            marker string, instead of raising.
    """

    def __init__(
        self,
        tokenizer,
        max_length: int,
        *,
        answer_types: Iterable[str] = DEFAULT_ANSWER_TYPES,
        question_types: Iterable[str] | None = None,
        question_type_key: str = "answer_type",
        max_question_length: int = 64,
        truncated_evidence: str = "error",
        skip_invalid: bool = False,
    ):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("HotpotQAEncoder needs a fast tokenizer (character offsets)")
        if truncated_evidence not in TRUNCATED_EVIDENCE_POLICIES:
            raise ValueError(
                f"truncated_evidence must be one of {TRUNCATED_EVIDENCE_POLICIES}, got {truncated_evidence!r}"
            )
        self.tokenizer = tokenizer
        self.markers = marker_token_ids(tokenizer)
        self.cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        self.sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        if self.cls_id is None or self.sep_id is None:
            raise ValueError("the tokenizer needs a cls (or bos) and a sep (or eos) token")
        self.answer_types = list(answer_types)
        self.question_types = list(question_types) if question_types is not None else list(self.answer_types)
        self.question_type_key = question_type_key
        self.max_question_length = max_question_length
        if max_length < MIN_LENGTH:
            raise ValueError(f"max_length={max_length} cannot hold the markers of one sentence (needs >= {MIN_LENGTH})")
        self.max_length = max_length
        self.truncated_evidence = truncated_evidence
        self.skip_invalid = skip_invalid
        self._marker_set = set(self.markers.values())

    @classmethod
    def from_config(cls, tokenizer, config, max_length: int | None = None, **kwargs) -> HotpotQAEncoder:
        """An encoder for a :class:`~as2hub.modeling.LongformerQEConfig` (types, key; ``max_length`` defaults to the
        model's positions)."""
        if max_length is None:
            max_length = config.max_position_embeddings - (config.pad_token_id or 0) - 1
        return cls(
            tokenizer,
            max_length,
            answer_types=config.answer_types,
            question_types=config.question_types,
            question_type_key=config.question_type_key,
            **kwargs,
        )

    def _fail(self, reason: str, message: str, fatal: bool = False):
        if self.skip_invalid and not fatal:
            raise _Skip(reason, message)
        hint = "" if fatal else " (skip such examples with skip_invalid=True)"
        raise HotpotQAError(message + hint)

    def encode(self, record: dict, stats: EncodingStats | None = None) -> tuple[dict, DecodeInfo]:
        """One validated record -> (features, decode info). Raises :class:`HotpotQAError` or ``_Skip``."""
        stats = stats if stats is not None else EncodingStats()
        example = f"example {record['id']!r}"
        answer_type = record["answer_type"]
        question_type = record["answer_type"] if self.question_type_key == "answer_type" else record["type"]
        if question_type not in self.question_types:
            self._fail(
                "unknown_question_type",
                f"{example}: unknown question type {question_type!r} (field {self.question_type_key!r}); the model "
                f"knows {self.question_types}",
            )
        if answer_type != "none" and answer_type not in self.answer_types:
            self._fail(
                "unknown_answer_type", f"{example}: answer type {answer_type!r} is not one of {self.answer_types}"
            )
        titles = record["context"]["title"]
        paragraphs = record["context"]["sentences"]
        facts = set(zip(record["supporting_facts"]["title"], record["supporting_facts"]["sent_id"]))
        fact_titles = {t for t, _ in facts}

        texts = [record["question"]] + list(titles) + [s for p in paragraphs for s in p]
        row_of: dict[tuple[int, int], int] = {(p, -1): 1 + p for p in range(len(titles))}  # (paragraph, sentence)
        for p, sentences in enumerate(paragraphs):
            first_row = 1 + len(titles) + sum(len(q) for q in paragraphs[:p])
            row_of.update({(p, j): first_row + j for j in range(len(sentences))})
        encoded = self.tokenizer([" " + text for text in texts], add_special_tokens=False, return_offsets_mapping=True)
        token_ids = encoded["input_ids"]
        offsets = [[(max(s - 1, 0), max(e - 1, 0)) for s, e in piece] for piece in encoded["offset_mapping"]]
        for k, ids in enumerate(token_ids):
            if self._marker_set.intersection(ids):
                self._fail("marker_in_text", f"{example}: text {texts[k]!r:.80} contains a marker token string")

        # The question never takes the room of the markers of one paragraph with one (empty) sentence.
        question = token_ids[0][: min(self.max_question_length, self.max_length - MIN_LENGTH)]
        stats.truncated_question_tokens += len(token_ids[0]) - len(question)
        m = self.markers
        input_ids = [self.cls_id, m["question_start"], *question, m["question_end"]]
        budget = self.max_length - 1  # the final separator
        pieces: list[str] = []
        piece_spans: list[tuple[int, int, int]] = []  # (piece, first token, token count) placed in the input
        sentence_index, sentence_labels, sentence_keys, sentence_paragraph = [], [], [], []
        paragraph_index, paragraph_labels, paragraph_titles = [], [], []
        piece_of: dict[tuple[int, int], int] = {}  # (paragraph, sentence or -1 for the title) -> piece index
        kept_sentences = 0
        stopped = False
        cursor = 1 + len(titles)  # index in texts of the first sentence of the current paragraph
        for p, (title, sentences) in enumerate(zip(titles, paragraphs)):
            title_ids = token_ids[1 + p]
            header = 2 + len(title_ids) + 1
            first_unit = 2 + len(token_ids[cursor]) if sentences else 0
            if stopped or len(input_ids) + header + first_unit + 1 > budget:
                stopped = True
                cursor += len(sentences)
                continue
            paragraph_index.append(len(input_ids) + 1)
            paragraph_labels.append(int(title in fact_titles))
            paragraph_titles.append(title)
            input_ids += [m["document_start"], m["title_start"]]
            piece_of[(p, -1)] = len(pieces)
            piece_spans.append((len(pieces), len(input_ids), len(title_ids)))
            pieces.append(title)
            input_ids += [*title_ids, m["title_end"]]
            for j, sentence in enumerate(sentences):
                ids = token_ids[cursor + j]
                if stopped or len(input_ids) + 2 + len(ids) + 1 > budget:
                    stopped = True
                    continue
                sentence_index.append(len(input_ids))
                sentence_labels.append(int((title, j) in facts))
                sentence_keys.append((title, j))
                sentence_paragraph.append(len(paragraph_index) - 1)
                input_ids.append(m["sentence_start"])
                piece_of[(p, j)] = len(pieces)
                piece_spans.append((len(pieces), len(input_ids), len(ids)))
                pieces.append(sentence)
                input_ids += [*ids, m["sentence_end"]]
                kept_sentences += 1
            input_ids.append(m["document_end"])
            cursor += len(sentences)
        input_ids.append(self.sep_id)

        total_sentences = sum(len(p) for p in paragraphs)
        dropped_sentences = total_sentences - kept_sentences
        dropped_paragraphs = len(titles) - len(paragraph_index)
        visible = set(sentence_keys)
        lost_facts = sorted(fact for fact in facts if fact not in visible)

        start_positions, end_positions = [], []
        lost_answer = False
        if answer_type == "span":
            support = fact_titles or set(titles)
            for p, (title, sentences) in enumerate(zip(titles, paragraphs)):
                if title not in support:
                    continue
                for j, text in [(-1, title), *enumerate(sentences)]:
                    spans = find_answer(text, record["answer"])
                    if not spans:
                        continue
                    if (p, j) not in piece_of:
                        continue
                    piece = piece_of[(p, j)]
                    _, first, count = piece_spans[piece]
                    local = offsets[row_of[(p, j)]]
                    for start, end in spans:
                        tokens = _char_to_tokens(local[:count], start, end)
                        if tokens is not None:
                            start_positions.append(first + tokens[0])
                            end_positions.append(first + tokens[1])
            lost_answer = not start_positions
        if lost_facts or lost_answer:
            what = []
            if lost_facts:
                what.append(f"supporting facts {[list(f) for f in lost_facts]}")
            if lost_answer:
                what.append(f"every occurrence of the answer {record['answer']!r}")
            message = (
                f"{example}: max_length={self.max_length} keeps {kept_sentences} of {total_sentences} sentences, so "
                f"{' and '.join(what)} would be truncated away"
            )
            if self.truncated_evidence == "error":
                raise HotpotQAError(message + " (raise max_length, or pass truncated_evidence='skip' or 'keep')")
            if self.truncated_evidence == "skip":
                raise _Skip("truncated_evidence", message)
            stats.examples_with_truncated_evidence += 1

        stats.truncated_examples += int(dropped_sentences > 0 or dropped_paragraphs > 0)
        stats.dropped_sentences += dropped_sentences
        stats.dropped_paragraphs += dropped_paragraphs
        stats.longest_input = max(stats.longest_input, len(input_ids))
        features = {
            "id": record["id"],
            "input_ids": input_ids,
            "question_index": 1,
            "sentence_index": sentence_index,
            "paragraph_index": paragraph_index,
            "sentence_labels": sentence_labels,
            "paragraph_labels": paragraph_labels,
            "start_positions": start_positions,
            "end_positions": end_positions,
            "answer_type_labels": self.answer_types.index(answer_type) if answer_type != "none" else -100,
            "question_type": self.question_types.index(question_type),
            "num_dropped_sentences": dropped_sentences,
        }
        length = len(input_ids)
        token_piece = np.full(length, -1, dtype=np.int32)
        token_start = np.zeros(length, dtype=np.int32)
        token_end = np.zeros(length, dtype=np.int32)
        offset_rows = {piece: offsets[row_of[key]] for key, piece in piece_of.items()}
        for piece, first, count in piece_spans:
            if count:
                token_piece[first : first + count] = piece
                spans = np.asarray(offset_rows[piece][:count], dtype=np.int32).reshape(-1, 2)
                token_start[first : first + count] = spans[:, 0]
                token_end[first : first + count] = spans[:, 1]
        info = DecodeInfo(
            id=record["id"],
            pieces=pieces,
            token_piece=token_piece,
            token_start=token_start,
            token_end=token_end,
            sentence_keys=sentence_keys,
            sentence_paragraph=sentence_paragraph,
            paragraph_titles=paragraph_titles,
        )
        return features, info

    def encode_dataset(
        self, data: HotpotQAData | datasets.Dataset, description: str | None = None
    ) -> tuple[datasets.Dataset, list[DecodeInfo], EncodingStats]:
        """Encode every record; returns (features dataset, decode infos in the same order, stats). Problems raise
        :class:`HotpotQAError` naming the source and example id, or are skipped and counted (see the class doc)."""
        dataset = data.dataset if isinstance(data, HotpotQAData) else data
        source = description or (data.source if isinstance(data, HotpotQAData) else "dataset")
        stats = EncodingStats()
        rows, infos = [], []
        for record in dataset:
            try:
                features, info = self.encode(record, stats)
            except _Skip as problem:
                stats.skipped[problem.reason] += 1
                logger.warning("%s: skipping %s", source, problem)
                continue
            except HotpotQAError as problem:
                raise HotpotQAError(f"{source}: {problem}") from None
            rows.append(features)
            infos.append(info)
        if not rows:
            raise HotpotQAError(f"{source}: every example was skipped ({dict(stats.skipped)})")
        stats.examples = len(rows)
        logger.info("%s encoded (max_length %d): %s", source, self.max_length, stats.as_dict())
        return datasets.Dataset.from_list(rows), infos, stats


# --------------------------------------------------------------------------------------------------------------------
# Collating


class HotpotQACollator:
    """Pads encoded examples into a batch for :class:`~as2hub.modeling.LongformerWithQEContrastive`.

    Adds ``attention_mask``, the ``global_attention_mask`` and ``span_mask`` (derived from the markers exactly as the
    model derives them), ``sentence_mask`` / ``paragraph_mask`` for the padded index tensors, and the labels
    (``sentence_labels`` / ``paragraph_labels`` padded with -100, ``start_positions`` / ``end_positions`` padded with
    -1) when the features have them. ``pad_to_multiple_of`` (e.g. the attention window) saves Longformer's own padding.
    """

    def __init__(self, tokenizer, pad_to_multiple_of: int | None = None, with_labels: bool = True):
        self.pad_token_id = tokenizer.pad_token_id
        self.markers = marker_token_ids(tokenizer)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.with_labels = with_labels

    @staticmethod
    def _pad(rows: list[list[int]], value: int, min_width: int = 0) -> torch.Tensor:
        width = max([len(row) for row in rows] + [min_width])
        out = torch.full((len(rows), width), value, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
        return out

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        input_ids = self._pad([f["input_ids"] for f in features], self.pad_token_id)
        attention_mask = self._pad([[1] * len(f["input_ids"]) for f in features], 0)
        if self.pad_to_multiple_of:
            extra = -input_ids.shape[1] % self.pad_to_multiple_of
            input_ids = torch.nn.functional.pad(input_ids, (0, extra), value=self.pad_token_id)
            attention_mask = torch.nn.functional.pad(attention_mask, (0, extra), value=0)
        inferred = infer_marker_inputs(input_ids, self.markers, attention_mask)
        sentence_index = self._pad([f["sentence_index"] for f in features], 0)
        paragraph_index = self._pad([f["paragraph_index"] for f in features], 0)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "global_attention_mask": inferred["global_attention_mask"],
            "span_mask": inferred["span_mask"],
            "question_index": torch.tensor([f["question_index"] for f in features], dtype=torch.long),
            "sentence_index": sentence_index,
            "sentence_mask": self._pad([[1] * len(f["sentence_index"]) for f in features], 0).bool(),
            "paragraph_index": paragraph_index,
            "paragraph_mask": self._pad([[1] * len(f["paragraph_index"]) for f in features], 0).bool(),
            "question_type": torch.tensor([f["question_type"] for f in features], dtype=torch.long),
        }
        if self.with_labels and "sentence_labels" in features[0]:
            batch["sentence_labels"] = self._pad([f["sentence_labels"] for f in features], -100)
            batch["paragraph_labels"] = self._pad([f["paragraph_labels"] for f in features], -100)
            batch["start_positions"] = self._pad([f["start_positions"] for f in features], -1, min_width=1)
            batch["end_positions"] = self._pad([f["end_positions"] for f in features], -1, min_width=1)
            batch["answer_type_labels"] = torch.tensor([f["answer_type_labels"] for f in features], dtype=torch.long)
        return batch


__all__ = [
    "ANSWER_TYPES",
    "DecodeInfo",
    "EncodingStats",
    "HOTPOTQA_FEATURES",
    "HotpotQACollator",
    "HotpotQAData",
    "HotpotQAEncoder",
    "HotpotQAError",
    "WIKIQA_QUESTION_TYPES",
    "add_marker_tokens",
    "answer_type_of",
    "distractor_records",
    "find_answer",
    "marker_token_ids",
    "question_word_type",
    "read_hotpotqa",
    "to_official_gold",
    "validate_record",
    "wikiqa_distractor",
]

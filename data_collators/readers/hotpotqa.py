"""HotpotQA-style records for :class:`~as2hub.modeling.LongformerWithQEContrastive`: reading and validating.

:func:`read_hotpotqa` reads the HotpotQA distractor JSON (a JSON array or JSON lines, optionally ``.gz``; records
``_id``, ``question``, ``answer``, ``type``, ``level``, ``supporting_facts: [[title, sent_id], ...]``,
``context: [[title, [sentences]], ...]``) or the same records in the ``datasets`` layout (``id``,
``context: {title: [...], sentences: [[...]]}``, ``supporting_facts: {title: [...], sent_id: [...]}``): a
:class:`datasets.Dataset`, a ``save_to_disk`` folder or a name for :func:`datasets.load_dataset`. Every record is
validated (supporting facts must name a title of the context and one of its sentences; a span answer must occur in
the supporting paragraphs) and gets an ``answer_type``: ``yes``, ``no``, ``span``, or ``none`` for an empty answer
(no span: the span and answer-type heads skip it). ``qe_tasks.wikiqa_distractor`` builds such records from WikiQA.

The next steps live beside this module: ``hotpotqa_markers`` (the marker tokens and the embeddings they need),
``hotpotqa_encoding`` (:class:`HotpotQAEncoder`, the input of Caciularu et al., NAACL 2022, appendix B.2, and
:class:`HotpotQACollator`).

Errors raise :class:`HotpotQAError` (a ``ValueError``) naming the file (or dataset), the record and the example id,
before anything is written; ``skip_invalid=True`` skips such examples instead, logging and counting each reason.

Example:
    >>> from as2hub.data_collators import HotpotQACollator, HotpotQAEncoder, add_marker_tokens, read_hotpotqa
    >>> data = read_hotpotqa("hotpot_dev_distractor_v1.json")  # doctest: +SKIP
    >>> add_marker_tokens(tokenizer, model)  # doctest: +SKIP
    >>> encoder = HotpotQAEncoder.from_config(tokenizer, model.config, max_length=4096)  # doctest: +SKIP
    >>> features, decode_infos, stats = encoder.encode_dataset(data)  # doctest: +SKIP
    >>> batch = HotpotQACollator(tokenizer)(list(features)[:2])  # doctest: +SKIP
    >>> model(**batch).loss  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from .text_files import lone_surrogate, read_json_records

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


class SkipExample(Exception):
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

    Raises ``ValueError`` for malformed records and ``SkipExample`` (a skippable problem) for supporting facts that point
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
            raise SkipExample(
                "supporting_fact_missing_title",
                f"supporting fact [{title!r}, {sent_id}] names a title not in the context",
            )
        count = len(paragraphs[titles.index(title)])
        if not 0 <= sent_id < count:
            raise SkipExample(
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
            raise SkipExample(
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
    """(location, record) pairs of a JSON array or JSON lines file (records are validated by the caller)."""
    for record in read_json_records(path, HotpotQAError, desc, objects_only=False):
        yield (f"line {record.line}" if record.line is not None else record.where), record.value


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
        except SkipExample as problem:
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


__all__ = [
    "ANSWER_TYPES",
    "HOTPOTQA_FEATURES",
    "HotpotQAData",
    "HotpotQAError",
    "MIN_LENGTH",
    "SkipExample",
    "TRUNCATED_EVIDENCE_POLICIES",
    "WIKIQA_QUESTION_TYPES",
    "answer_type_of",
    "find_answer",
    "read_hotpotqa",
    "to_official_gold",
    "validate_record",
]

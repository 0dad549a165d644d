"""Corpus -> documents -> paragraphs -> sentences, for structure-aware continued pre-training.

A *document* is represented as ``list[list[str]]``: its paragraphs, each a list of sentences.
As a :mod:`datasets` table it is one row with a ``doc_id`` (string) and a ``paragraphs``
(``Sequence(Sequence(string))``) column; see :data:`DOCUMENT_FEATURES`.

Pre-processing follows Di Liello et al. (2022/2023, section 5 / appendix A): paragraphs are split
into sentences with NLTK Punkt (offline, :mod:`.sentence_splitter`); sentences shorter than 20
characters, paragraphs shorter than 60 and documents shorter than 200 characters are dropped.
Thresholds apply in that order and to what survives the previous filter: a paragraph's length is
the length of its kept sentences joined with single spaces, a document's length is the sum of its
kept paragraphs' lengths.  All thresholds live in :class:`CorpusConfig`; what was dropped is
counted in :class:`CorpusStats`.

Inputs (``data`` argument of :func:`iter_documents` / :func:`load_documents`):

* ``None``: the embedded default corpus, :data:`pydoc_data.topics.topics` (79 English documents of
  the Python reference manual with blank-line paragraphs) -- works offline, handy for smoke tests;
* a path to a directory (files matching ``CorpusConfig.file_pattern``, recursively), a glob
  pattern, a single file, or a list of those.  ``*.jsonl`` / ``*.json`` / ``*.jsonl.gz`` files hold
  one JSON object per line (text in ``CorpusConfig.text_field``); any other file is plain text,
  one document per file, or several separated by ``CorpusConfig.document_separator`` lines;
* a :class:`datasets.Dataset` or streaming :class:`datasets.IterableDataset` with a text column;
* a mapping ``{doc_id: text}``; an iterable whose items are raw document strings, ``dict`` rows
  with a text field, or :class:`pathlib.Path` objects (plain ``str`` items are texts, not paths).
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import datasets

from .sentence_splitter import split_sentences
from .text_files import lone_surrogate, read_json_records, read_text

logger = logging.getLogger(__name__)

__all__ = [
    "DOCUMENT_FEATURES",
    "CorpusConfig",
    "CorpusError",
    "CorpusStats",
    "Document",
    "EmptyCorpusError",
    "default_corpus",
    "documents_from_dataset",
    "iter_documents",
    "iter_raw_documents",
    "load_documents",
    "split_document",
]

Document = list[list[str]]
"""A document: its paragraphs, each a list of sentences."""

_JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson")


class CorpusError(ValueError):
    """Bad corpus input: unreadable file, missing text field, unsupported input type."""


class EmptyCorpusError(CorpusError):
    """No document survived the filters."""


@dataclasses.dataclass
class CorpusConfig:
    """How raw text becomes documents of paragraphs of sentences.

    Attributes:
        min_sentence_chars: sentences shorter than this are dropped (paper: 20).
        min_paragraph_chars: paragraphs whose kept sentences total fewer characters (joined with
            single spaces) are dropped (paper: 60).
        min_document_chars: documents whose kept paragraphs total fewer characters are dropped
            (paper: 200).
        min_paragraphs: documents with fewer kept paragraphs are dropped (default 1: objectives
            that need two paragraphs skip single-paragraph documents themselves and count them).
        paragraph_separator: regular expression separating paragraphs; default blank lines
            (``r"\\n[ \\t]*\\n"``); use ``r"\\n"`` for corpora with one paragraph per line (news).
        document_separator: for plain-text files, a marker line (compared after stripping) that
            separates documents; ``None`` = one document per file.
        text_field: text column of JSONL records and ``datasets`` inputs.
        id_field: optional id column; default ids are ``<file>``, ``<file>#<n>``, ``<file>:<line>``,
            the dataset row index, or the mapping key.
        file_pattern: glob used inside directories (recursive).
        language: Punkt model.
        normalize_whitespace: collapse whitespace runs (incl. newlines inside a paragraph) to one space.
        encoding: text encoding of files.
    """

    min_sentence_chars: int = 20
    min_paragraph_chars: int = 60
    min_document_chars: int = 200
    min_paragraphs: int = 1
    paragraph_separator: str = r"\n[ \t]*\n"
    document_separator: str | None = None
    text_field: str = "text"
    id_field: str | None = None
    file_pattern: str = "*"
    language: str = "english"
    normalize_whitespace: bool = True
    encoding: str = "utf-8"


@dataclasses.dataclass
class CorpusStats:
    """Counts of what the pre-processing saw, kept and dropped (and why)."""

    documents_seen: int = 0
    documents_kept: int = 0
    paragraphs_kept: int = 0
    sentences_kept: int = 0
    dropped_sentences_too_short: int = 0
    dropped_paragraphs_too_short: int = 0
    dropped_documents_too_short: int = 0
    dropped_documents_too_few_paragraphs: int = 0
    dropped_documents_empty: int = 0
    single_paragraph_documents: int = 0

    def merge(self, other: CorpusStats) -> CorpusStats:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def summary(self) -> str:
        return (
            f"kept {self.documents_kept}/{self.documents_seen} documents "
            f"({self.paragraphs_kept} paragraphs, {self.sentences_kept} sentences; "
            f"{self.single_paragraph_documents} kept documents have a single paragraph); dropped: "
            f"{self.dropped_sentences_too_short} sentences < min_sentence_chars, "
            f"{self.dropped_paragraphs_too_short} paragraphs < min_paragraph_chars, "
            f"{self.dropped_documents_too_short} documents < min_document_chars, "
            f"{self.dropped_documents_too_few_paragraphs} documents < min_paragraphs, "
            f"{self.dropped_documents_empty} empty documents"
        )

    def log(self, log: logging.Logger | None = None, level: int = logging.INFO) -> None:
        (log or logger).log(level, "corpus: %s", self.summary())


# --------------------------------------------------------------------------- raw documents


def default_corpus() -> dict[str, str]:
    """The embedded English corpus: ``pydoc_data.topics.topics`` (79 documents)."""
    from pydoc_data.topics import topics

    return {f"pydoc:{key}": topics[key] for key in sorted(topics)}


def _is_json_file(path: str) -> bool:
    return path.lower().endswith(_JSON_SUFFIXES)


def _expand_paths(spec: str | os.PathLike, config: CorpusConfig) -> list[str]:
    text = os.fspath(spec)
    if os.path.isdir(text):
        files = [
            f
            for f in glob.glob(os.path.join(glob.escape(text), "**", config.file_pattern), recursive=True)
            if os.path.isfile(f)
        ]
        if not files:
            raise CorpusError(f"directory {text!r} contains no file matching {config.file_pattern!r}")
        return sorted(files)
    if os.path.exists(text):
        return [text]
    if glob.has_magic(text):
        files = sorted(f for f in glob.glob(text, recursive=True) if os.path.isfile(f))
        if not files:
            raise CorpusError(f"no file matches the pattern {text!r}")
        return files
    raise CorpusError(f"corpus file or directory not found: {text!r}")


def _read_text_file(path: str, config: CorpusConfig) -> Iterator[tuple[str, str]]:
    content = read_text(path, CorpusError, f"corpus file {path}", config.encoding)
    if config.document_separator is None:
        yield path, content
        return
    marker = config.document_separator.strip()
    current: list[str] = []
    number = 0
    for line in content.splitlines(keepends=True):
        if line.strip() == marker:
            yield f"{path}#{number}", "".join(current)
            number += 1
            current = []
        else:
            current.append(line)
    yield f"{path}#{number}", "".join(current)


def _read_json_lines(path: str, config: CorpusConfig) -> Iterator[tuple[str, str]]:
    desc = f"corpus file {path}"
    for parsed in read_json_records(
        path, CorpusError, desc, encoding=config.encoding, arrays=False, objects_only=False
    ):
        line_number, record = parsed.line, parsed.value
        if not isinstance(record, dict) or config.text_field not in record:
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise CorpusError(f"{path}:{line_number}: record has no text field {config.text_field!r} (found: {keys})")
        surrogate = lone_surrogate(record)
        if surrogate:
            raise CorpusError(f"{path}:{line_number}: invalid Unicode in {surrogate}")
        text = record[config.text_field]
        if text is not None and not isinstance(text, str):  # null: an empty document, dropped and counted
            raise CorpusError(
                f"{path}:{line_number}: text field {config.text_field!r} must be a string, got {type(text).__name__}"
            )
        doc_id = record.get(config.id_field) if config.id_field else None
        yield (str(doc_id) if doc_id is not None else f"{path}:{line_number}"), text


def _iter_rows(rows: Iterable[Mapping[str, Any]], config: CorpusConfig, name: str) -> Iterator[tuple[str, str]]:
    for index, row in enumerate(rows):
        if config.text_field not in row:
            raise CorpusError(f"{name} has no text column {config.text_field!r} (columns: {sorted(row)})")
        doc_id = row.get(config.id_field) if config.id_field else None
        yield (str(doc_id) if doc_id is not None else str(index)), row[config.text_field]


def iter_raw_documents(data: Any = None, config: CorpusConfig | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(doc_id, raw_text)`` for every document of ``data`` (see the module docstring)."""
    config = config or CorpusConfig()
    if data is None:
        yield from default_corpus().items()
        return
    if isinstance(data, (str, os.PathLike)):
        for path in _expand_paths(data, config):
            reader = _read_json_lines if _is_json_file(path) else _read_text_file
            yield from reader(path, config)
        return
    if isinstance(data, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise CorpusError(f"got a dataset dict with splits {list(data)}; pass one split, e.g. data['train']")
    if isinstance(data, (datasets.Dataset, datasets.IterableDataset)):
        columns = data.column_names
        if columns is not None and config.text_field not in columns:
            raise CorpusError(f"dataset has no text column {config.text_field!r} (columns: {columns})")
        yield from _iter_rows(data, config, "dataset")
        return
    if isinstance(data, Mapping):
        for doc_id, text in data.items():
            yield str(doc_id), text
        return
    if isinstance(data, Iterable):
        for index, item in enumerate(data):
            if isinstance(item, os.PathLike):
                yield from iter_raw_documents(item, config)
            elif isinstance(item, str):
                yield str(index), item
            elif isinstance(item, Mapping):
                yield from _iter_rows([item], config, f"record {index}")
            else:
                raise CorpusError(f"unsupported corpus item of type {type(item).__name__} at position {index}")
        return
    raise CorpusError(f"unsupported corpus input of type {type(data).__name__}")


# --------------------------------------------------------------------------- splitting and filtering


def split_document(
    text: str,
    config: CorpusConfig | None = None,
    stats: CorpusStats | None = None,
    splitter: Callable[[str], list[str]] | None = None,
) -> Document | None:
    """Split one raw document into paragraphs of sentences and apply the filters.

    Returns ``None`` when the document is dropped; ``stats`` (if given) is updated either way.
    """
    config = config or CorpusConfig()
    stats = stats if stats is not None else CorpusStats()
    if splitter is None:
        language = config.language

        def splitter(paragraph: str) -> list[str]:
            return split_sentences(paragraph, language)

    stats.documents_seen += 1
    if not isinstance(text, str) or not text.strip():
        stats.dropped_documents_empty += 1
        return None
    paragraphs: Document = []
    n_sentences = 0
    document_chars = 0
    dropped_sentences = 0
    dropped_paragraphs = 0
    for raw in re.split(config.paragraph_separator, text):
        paragraph = " ".join(raw.split()) if config.normalize_whitespace else raw.strip()
        if not paragraph:
            continue
        sentences = []
        for sentence in splitter(paragraph):
            sentence = sentence.strip()
            if len(sentence) >= config.min_sentence_chars:
                sentences.append(sentence)
            elif sentence:
                dropped_sentences += 1
        paragraph_chars = sum(len(s) for s in sentences) + max(len(sentences) - 1, 0)
        if not sentences or paragraph_chars < config.min_paragraph_chars:
            dropped_paragraphs += 1
            continue
        paragraphs.append(sentences)
        n_sentences += len(sentences)
        document_chars += paragraph_chars
    stats.dropped_sentences_too_short += dropped_sentences
    stats.dropped_paragraphs_too_short += dropped_paragraphs
    if not paragraphs:
        if dropped_paragraphs:
            stats.dropped_documents_too_short += 1
        else:
            stats.dropped_documents_empty += 1
        return None
    if document_chars < config.min_document_chars:
        stats.dropped_documents_too_short += 1
        return None
    if len(paragraphs) < config.min_paragraphs:
        stats.dropped_documents_too_few_paragraphs += 1
        return None
    stats.documents_kept += 1
    stats.paragraphs_kept += len(paragraphs)
    stats.sentences_kept += n_sentences
    if len(paragraphs) == 1:
        stats.single_paragraph_documents += 1
    return paragraphs


def iter_documents(
    data: Any = None, config: CorpusConfig | None = None, stats: CorpusStats | None = None
) -> Iterator[dict[str, Any]]:
    """Lazily yield ``{"doc_id": str, "paragraphs": list[list[str]]}`` for every kept document."""
    config = config or CorpusConfig()
    stats = stats if stats is not None else CorpusStats()
    for doc_id, text in iter_raw_documents(data, config):
        paragraphs = split_document(text, config, stats)
        if paragraphs is not None:
            yield {"doc_id": doc_id, "paragraphs": paragraphs}


DOCUMENT_FEATURES = datasets.Features(
    {"doc_id": datasets.Value("string"), "paragraphs": datasets.Sequence(datasets.Sequence(datasets.Value("string")))}
)
"""``datasets`` schema of a documents table."""


def load_documents(data: Any = None, config: CorpusConfig | None = None):
    """Materialise the corpus as a :class:`datasets.Dataset` of documents and return ``(dataset, stats)``.

    The dataset has the columns ``doc_id`` (string) and ``paragraphs`` (``Sequence(Sequence(string))``).
    Raises :class:`EmptyCorpusError` when no document survives the filters (the message says how
    many documents, paragraphs and sentences each filter dropped) and :class:`CorpusError` for
    unreadable or malformed input (naming the file).  For a streaming
    :class:`datasets.IterableDataset` that should stay lazy use :func:`documents_from_dataset`.
    """
    config = config or CorpusConfig()
    stats = CorpusStats()
    rows = list(iter_documents(data, config, stats))
    stats.log()
    if not rows:
        source = f"{os.fspath(data)}: " if isinstance(data, str | os.PathLike) else ""
        raise EmptyCorpusError(f"{source}empty corpus after filtering: {stats.summary()} (config: {config})")
    table = {"doc_id": [r["doc_id"] for r in rows], "paragraphs": [r["paragraphs"] for r in rows]}
    return datasets.Dataset.from_dict(table, features=DOCUMENT_FEATURES), stats


def _split_batch(batch: dict[str, list], indices: list[int], config: CorpusConfig) -> dict[str, list]:
    out: dict[str, list] = {"doc_id": [], "paragraphs": []}
    stats = CorpusStats()
    ids = batch.get(config.id_field) if config.id_field else None
    for position, text in enumerate(batch[config.text_field]):
        paragraphs = split_document(text, config, stats)
        if paragraphs is None:
            continue
        out["doc_id"].append(str(ids[position]) if ids is not None else str(indices[position]))
        out["paragraphs"].append(paragraphs)
    if stats.documents_seen:
        logger.debug("corpus batch: %s", stats.summary())
    return out


def documents_from_dataset(dataset, config: CorpusConfig | None = None, num_proc: int | None = None):
    """Split a ``datasets`` text dataset into documents with ``Dataset.map`` (lazy for an IterableDataset).

    Returns a dataset with ``doc_id`` / ``paragraphs`` columns (filtered documents are removed).  For a
    streaming :class:`datasets.IterableDataset` nothing is computed until iteration, so no statistics are
    available up front (per-batch counts are logged at DEBUG level) and emptiness cannot be checked here.
    """
    config = config or CorpusConfig()
    columns = dataset.column_names
    if columns is not None and config.text_field not in columns:
        raise CorpusError(f"dataset has no text column {config.text_field!r} (columns: {columns})")
    kwargs: dict[str, Any] = {
        "batched": True,
        "with_indices": True,
        "fn_kwargs": {"config": config},
        "remove_columns": columns,
        "features": DOCUMENT_FEATURES,
    }
    if isinstance(dataset, datasets.Dataset):
        kwargs["num_proc"] = num_proc
        kwargs["desc"] = "splitting documents"
        result = dataset.map(_split_batch, **kwargs)
        if len(result) == 0:
            raise EmptyCorpusError(
                f"empty corpus after filtering: none of the {len(dataset)} documents survived "
                f"(min_sentence_chars={config.min_sentence_chars}, min_paragraph_chars={config.min_paragraph_chars}, "
                f"min_document_chars={config.min_document_chars}); use load_documents() for per-filter counts"
            )
        return result
    return dataset.map(_split_batch, **kwargs)

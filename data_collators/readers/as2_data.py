"""Readers that turn answer sentence selection (AS2) data into one canonical :class:`datasets.Dataset`.

Every reader returns an :class:`AS2Data` whose ``dataset`` has exactly these columns (see :data:`AS2_COLUMNS`):

=============== ===== ==================================================================================
question_id     str   groups the candidates of one question (ranking metrics are computed per question)
question        str   non-empty
candidate       str   non-empty candidate answer sentence
label           int   1 if the candidate answers the question, else 0
context         str   previous sentence + " " + next sentence of the candidate in its document ("" if
                      neither exists; just the one that exists otherwise)
document_id     str   "" if unknown
position        int   position of the candidate in its document, -1 if unknown
=============== ===== ==================================================================================

Two entry points:

- :func:`read_wikiqa` reads the original WikiQA files (``WikiQA-{train,dev,test}.tsv.gz``).
- :func:`load_as2_data` reads a JSONL, CSV or TSV file, a :class:`datasets.Dataset`, a ``save_to_disk`` folder or
  anything :func:`datasets.load_dataset` accepts, and hands WikiQA-format files to :func:`read_wikiqa`.

All input is validated row by row before the dataset is built, so a reader either returns a complete dataset or
raises :class:`AS2DataError` (a :class:`ValueError`) whose message names the file (or dataset), the row and the
column. Row numbers in messages are 1-based; for files they are given the way a user opening the file counts them:
``line N`` is the physical line of the file where the record starts (the header of a CSV/TSV file is line 1, so its
first data row is line 2, which is also its row number in a spreadsheet), followed by ``data row K``, the 1-based
index among data records. For in-memory datasets the message says ``row K (index K-1)``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from .text_files import base_suffix, open_text, read_json_records

logger = logging.getLogger(__name__)

AS2_COLUMNS: tuple[str, ...] = ("question_id", "question", "candidate", "label", "context", "document_id", "position")
"""Columns of every dataset returned by this module, in this order."""

AS2_FEATURES = datasets.Features(
    {
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "candidate": datasets.Value("string"),
        "label": datasets.Value("int64"),
        "context": datasets.Value("string"),
        "document_id": datasets.Value("string"),
        "position": datasets.Value("int64"),
    }
)

WIKIQA_COLUMNS: tuple[str, ...] = (
    "QuestionID",
    "Question",
    "DocumentID",
    "DocumentTitle",
    "SentenceID",
    "Sentence",
    "Label",
)
"""Header of the original WikiQA TSV files."""

WIKIQA_SPLITS: tuple[str, ...] = ("train", "dev", "test")
WIKIQA_ENV_VAR = "AS2HUB_WIKIQA_DIR"

_REQUIRED = ("question", "candidate", "label")
_MAX_POSITION = 2**63  # stored as int64
_SENTENCE_ID = re.compile(r"D\d+-(\d+)")
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
_CSV_SUFFIXES = (".csv",)
_TSV_SUFFIXES = (".tsv", ".tab", ".txt")


class AS2DataError(ValueError):
    """Invalid AS2 input; the message names the file (or dataset), the row and the column."""


@dataclass
class AS2Data:
    """A canonical AS2 dataset and where it came from.

    Attributes:
        dataset: :class:`datasets.Dataset` with the columns :data:`AS2_COLUMNS`.
        source: the file path or a description of the input.
        stats: ``rows``, ``questions``, ``questions_with_positive`` (all counted on ``dataset``, i.e. after the clean
            filter), ``dropped_questions_clean`` and ``dropped_rows_clean`` (0 unless ``clean=True``) and ``clean``.
    """

    dataset: datasets.Dataset
    source: str
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.dataset)


# --------------------------------------------------------------------------------------------------------------------
# Locating and opening files


def default_wikiqa_root() -> Path:
    """``$AS2HUB_WIKIQA_DIR``, else ``../shared/data/wikiqa`` seen from the working directory (a project checkout)
    or from the source tree (an editable install); the first that exists."""
    env = os.environ.get(WIKIQA_ENV_VAR)
    if env:
        return Path(env)
    candidates = [
        Path.cwd().resolve().parent / "shared" / "data" / "wikiqa",
        Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wikiqa",
    ]
    return next((path for path in candidates if path.is_dir()), candidates[0])


def resolve_wikiqa(path_or_split: str | os.PathLike, root: str | os.PathLike | None) -> Path:
    split = str(path_or_split)
    if split == "validation":
        split = "dev"
    if split in WIKIQA_SPLITS:
        if root is not None:
            base, origin = Path(root), "root argument"
        elif os.environ.get(WIKIQA_ENV_VAR):
            base, origin = Path(os.environ[WIKIQA_ENV_VAR]), f"${WIKIQA_ENV_VAR}"
        else:
            base, origin = default_wikiqa_root(), "default <project>/../shared/data/wikiqa"
        candidates = [base / f"WikiQA-{split}.tsv.gz", base / f"WikiQA-{split}.tsv"]
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        looked = " or ".join(str(c) for c in candidates)
        raise FileNotFoundError(
            f"WikiQA split {split!r} not found: looked for {looked} (folder from the {origin}); "
            f"pass root=... or set {WIKIQA_ENV_VAR} to the folder holding WikiQA-{{train,dev,test}}.tsv.gz"
        )
    path = Path(path_or_split)
    if not path.is_file():
        raise FileNotFoundError(
            f"WikiQA file not found: {path} (expected a path or one of the splits {', '.join(WIKIQA_SPLITS)})"
        )
    return path


def _open_text(path: Path, desc: str | None = None) -> io.TextIOBase:
    return open_text(path, AS2DataError, desc)


def _first_line(path: Path) -> str:
    with _open_text(path) as f:
        return f.readline().rstrip("\r\n")


def _is_wikiqa_header(line: str) -> bool:
    return tuple(line.lstrip("\ufeff").split("\t")) == WIKIQA_COLUMNS


# --------------------------------------------------------------------------------------------------------------------
# Value checks (plain Python, one call per cell)


class _Where:
    """Formats error locations for one input."""

    def __init__(self, desc: str, row_label: Callable[[int], str], header: str = "columns"):
        self.desc = desc
        self.row_label = row_label
        self.header = header  # where column names live, for "missing column" errors

    def error(self, index: int, column: str, problem: str) -> AS2DataError:
        return AS2DataError(f"{self.desc}: {self.row_label(index)}, column {column!r}: {problem}")


def _file_rows(desc: str, lines: list[int]) -> _Where:
    return _Where(desc, lambda i: f"line {lines[i]} (data row {i + 1})", header="line 1 (header)")


def _type_name(value: Any) -> str:
    return type(value).__name__


def _unicode(value: str, where: _Where, i: int, column: str) -> str:
    """Text that can be stored (UTF-8): a JSON escape such as ``\\ud800`` gives a lone surrogate, which cannot."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise where.error(
            i, column, f"invalid Unicode: lone surrogate {value[err.start]!r} at character {err.start}"
        ) from None
    return value


def _text(value: Any, where: _Where, i: int, column: str) -> str:
    if value is None:
        raise where.error(i, column, "missing value")
    if not isinstance(value, str):
        raise where.error(i, column, f"expected a string, got {_type_name(value)} {value!r:.80}")
    if not value.strip():
        raise where.error(i, column, "empty or whitespace-only text")
    return _unicode(value, where, i, column)


def _label(value: Any, where: _Where, i: int, column: str) -> int:
    if isinstance(value, str):
        stripped = value.strip()
        if stripped == "0" or stripped == "1":
            return int(stripped)
    elif isinstance(value, numbers.Integral):  # int, bool, numpy integers
        if value == 0 or value == 1:
            return int(value)
    elif isinstance(value, numbers.Real) and (value == 0 or value == 1):  # 0.0 / 1.0, e.g. from a float column
        return int(value)
    shown = "missing value" if value is None else f"{_type_name(value)} {value!r:.80}"
    raise where.error(i, column, f"label must be 0 or 1 (also accepted: '0'/'1', False/True), got {shown}")


def _position(value: Any, where: _Where, i: int, column: str) -> int | None:
    """Non-negative int, or None when the cell is empty. Strings of digits are accepted (CSV/TSV cells)."""
    if value is None:
        return None
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            return None
        if stripped.isdigit() and stripped.isascii() and int(stripped) < _MAX_POSITION:
            return int(stripped)
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if 0 <= value < _MAX_POSITION:
            return int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isfinite(value) and float(value).is_integer() and 0 <= value < _MAX_POSITION:
            return int(value)
    raise where.error(i, column, f"position must be a non-negative integer, got {_type_name(value)} {value!r:.80}")


def _context(value: Any, where: _Where, i: int, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return _unicode(value, where, i, column)
    if isinstance(value, list | tuple):
        for part in value:
            if not isinstance(part, str):
                raise where.error(
                    i, column, f"context list must hold strings only, found {_type_name(part)} {part!r:.80}"
                )
        return _unicode(" ".join(part for part in value if part), where, i, column)
    raise where.error(
        i, column, f"context must be a string or a list of strings, got {_type_name(value)} {value!r:.80}"
    )


def _identifier(value: Any, where: _Where, i: int, column: str) -> str:
    """str or int identifier; None/empty means absent and gives ''."""
    if value is None:
        return ""
    if isinstance(value, str):
        return _unicode(value.strip(), where, i, column)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    raise where.error(i, column, f"expected a string or an integer id, got {_type_name(value)} {value!r:.80}")


def question_id_for(question: str) -> str:
    """Stable id derived from the question text (the same text always gets the same id, in any file or run).

    Example:
        >>> question_id_for("how are glacier caves formed?")
        'q-80605d050e7fb835'
    """
    return "q-" + hashlib.sha1(question.strip().encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------------------------
# Shared builder


def _neighbour_contexts(
    documents: list[str], positions: list[int], candidates: list[str], where: _Where, names: dict[str, str]
) -> list[str]:
    """Previous + next sentence of each row within its document; the sentences of a document are the distinct
    (document_id, position) rows, ordered by position (gaps in positions are allowed: neighbours are the adjacent
    sentences in that order)."""
    sentences: dict[str, dict[int, tuple[str, int]]] = {}
    for i, (doc, pos) in enumerate(zip(documents, positions, strict=True)):
        if not doc or pos < 0:
            continue
        doc_sentences = sentences.setdefault(doc, {})
        seen = doc_sentences.get(pos)
        if seen is None:
            doc_sentences[pos] = (candidates[i], i)
        elif seen[0] != candidates[i]:
            raise where.error(
                i,
                names["candidate"],
                f"document {doc!r} position {pos} already holds a different sentence ({where.row_label(seen[1])}); "
                "cannot rebuild the context",
            )
    context_of: dict[tuple[str, int], str] = {}
    for doc, doc_sentences in sentences.items():
        order = sorted(doc_sentences)
        texts = [doc_sentences[p][0] for p in order]
        last = len(order) - 1
        for k, pos in enumerate(order):
            previous = texts[k - 1] if k > 0 else ""
            following = texts[k + 1] if k < last else ""
            context_of[(doc, pos)] = f"{previous} {following}" if previous and following else previous or following
    return [context_of.get((doc, pos), "") for doc, pos in zip(documents, positions, strict=True)]


def _build(
    columns: dict[str, list[Any]],
    n_rows: int,
    where: _Where,
    source: str,
    clean: bool,
    names: dict[str, str] | None = None,
) -> AS2Data:
    """Validate column lists (canonical names; absent optional columns are simply missing keys) and build the data.

    ``names`` maps canonical column names to the names used in error messages (defaults to the canonical ones).
    """
    names = {c: c for c in AS2_COLUMNS} | (names or {})
    if n_rows == 0:
        raise AS2DataError(f"{where.desc}: no data rows")
    missing = [c for c in _REQUIRED if c not in columns]
    if missing:
        raise AS2DataError(
            f"{where.desc}: {where.header}: missing required column(s) {', '.join(repr(names[c]) for c in missing)} "
            f"(found: {', '.join(repr(c) for c in columns) or 'none'})"
        )

    questions = [_text(v, where, i, names["question"]) for i, v in enumerate(columns["question"])]
    candidates = [_text(v, where, i, names["candidate"]) for i, v in enumerate(columns["candidate"])]
    labels = [_label(v, where, i, names["label"]) for i, v in enumerate(columns["label"])]

    question_ids: list[str] = []
    given_ids = columns.get("question_id")
    text_of_id: dict[str, tuple[str, int]] = {}
    for i, question in enumerate(questions):
        qid = _identifier(given_ids[i], where, i, names["question_id"]) if given_ids is not None else ""
        if not qid:
            qid = question_id_for(question)
        seen = text_of_id.get(qid)
        if seen is None:
            text_of_id[qid] = (question, i)
        elif seen[0] != question:
            raise where.error(
                i,
                names["question_id"],
                f"question id {qid!r} is used for a different question at {where.row_label(seen[1])}",
            )
        question_ids.append(qid)

    if "document_id" in columns:
        documents = [_identifier(v, where, i, names["document_id"]) for i, v in enumerate(columns["document_id"])]
    else:
        documents = [""] * n_rows
    if "position" in columns:
        positions = []
        for i, value in enumerate(columns["position"]):
            pos = _position(value, where, i, names["position"])
            if pos is None:
                if documents[i] and "context" not in columns:
                    raise where.error(i, names["position"], f"missing position for document {documents[i]!r}")
                pos = -1
            positions.append(pos)
    else:
        positions = [-1] * n_rows

    if "context" in columns:
        contexts = [_context(v, where, i, names["context"]) for i, v in enumerate(columns["context"])]
    elif "document_id" in columns and "position" in columns:
        contexts = _neighbour_contexts(documents, positions, candidates, where, names)
    else:
        if "document_id" in columns or "position" in columns:
            logger.warning("%s: context needs both 'document_id' and 'position'; contexts left empty", where.desc)
        contexts = [""] * n_rows

    data = {
        "question_id": question_ids,
        "question": questions,
        "candidate": candidates,
        "label": labels,
        "context": contexts,
        "document_id": documents,
        "position": positions,
    }

    dropped_questions = dropped_rows = 0
    if clean:
        seen_labels: dict[str, set[int]] = {}
        for qid, label in zip(question_ids, labels, strict=True):
            seen_labels.setdefault(qid, set()).add(label)
        keep_question = {qid: len(found) == 2 for qid, found in seen_labels.items()}
        keep = [keep_question[qid] for qid in question_ids]
        dropped_questions = sum(1 for kept in keep_question.values() if not kept)
        dropped_rows = n_rows - sum(keep)
        if dropped_rows:
            data = {name: [v for v, k in zip(values, keep, strict=True) if k] for name, values in data.items()}
        if dropped_rows == n_rows:
            only_correct = sum(1 for found in seen_labels.values() if found == {1})
            raise AS2DataError(
                f"{source}: the clean setting keeps no question: none of its {dropped_questions} questions "
                f"({n_rows} rows) has both a correct and a wrong candidate ({only_correct} have only correct ones, "
                f"{dropped_questions - only_correct} only wrong ones), so there is nothing to rank; check the labels, "
                "or evaluate every question (clean=False, --clean_eval false)"
            )

    positives = {qid for qid, label in zip(data["question_id"], data["label"], strict=True) if label == 1}
    stats = {
        "rows": len(data["question_id"]),
        "questions": len(set(data["question_id"])),
        "questions_with_positive": len(positives),
        "dropped_questions_clean": dropped_questions,
        "dropped_rows_clean": dropped_rows,
        "clean": clean,
    }
    logger.info(
        "AS2 data from %s: %d rows, %d questions (%d with a correct answer)%s",
        source,
        stats["rows"],
        stats["questions"],
        stats["questions_with_positive"],
        f"; clean setting dropped {dropped_questions} questions / {dropped_rows} rows" if clean else "",
    )
    dataset = datasets.Dataset.from_dict(data, features=AS2_FEATURES)
    return AS2Data(dataset=dataset, source=source, stats=stats)


# --------------------------------------------------------------------------------------------------------------------
# WikiQA


def read_wikiqa(
    path_or_split: str | os.PathLike, root: str | os.PathLike | None = None, clean: bool = False
) -> AS2Data:
    """Read an original WikiQA file (gzip or plain TSV, CRLF, header ``QuestionID Question DocumentID DocumentTitle
    SentenceID Sentence Label``) into the canonical AS2 columns.

    ``path_or_split`` is a file path or one of ``"train"``, ``"dev"`` (alias ``"validation"``), ``"test"``, looked up
    as ``WikiQA-<split>.tsv.gz`` (or ``.tsv``) in ``root``, else in ``$AS2HUB_WIKIQA_DIR``, else in
    ``<project>/../shared/data/wikiqa``. ``SentenceID`` ``D<n>-<k>`` gives ``position = k``; the context of each
    candidate is the previous and the next sentence of its document, rebuilt from all the rows of that document in the
    file. ``clean=True`` keeps only questions with at least one correct and one wrong candidate (the "clean" evaluation
    setting); ``stats`` reports what was dropped. Errors name the file and ``line N`` (the header is line 1).

    Example:
        >>> dev = read_wikiqa("dev", clean=True)  # doctest: +SKIP
        >>> dev.stats["questions"], dev.stats["rows"], dev.stats["dropped_questions_clean"]  # doctest: +SKIP
        (122, 1126, 174)

    The first candidate of train is ``D1-0``, the first sentence of its document, so its context is the next one::

        >>> first = read_wikiqa("train").dataset[0]  # doctest: +SKIP
        >>> first["position"], first["context"]  # doctest: +SKIP
        (0, 'The ice facade is approximately 60 m high')
    """
    path = resolve_wikiqa(path_or_split, root)
    desc = str(path)
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            qids, questions, documents, positions, sentences, labels, lines = _wikiqa_rows(reader, desc)
        except csv.Error as err:
            raise AS2DataError(f"{desc}: line {reader.line_num}: {err}") from None
    columns = {
        "question_id": qids,
        "question": questions,
        "candidate": sentences,
        "label": labels,
        "document_id": documents,
        "position": positions,
    }
    names = {
        "question_id": "QuestionID",
        "question": "Question",
        "candidate": "Sentence",
        "label": "Label",
        "document_id": "DocumentID",
        "position": "SentenceID",
    }
    return _build(columns, len(lines), _file_rows(desc, lines), desc, clean, names)


def _wikiqa_rows(reader, desc: str) -> tuple[list, ...]:
    """Columns (ids, questions, documents, positions, sentences, labels, lines) of a WikiQA TSV reader."""
    qids: list[str] = []
    questions: list[str] = []
    documents: list[str] = []
    positions: list[int] = []
    sentences: list[str] = []
    labels: list[str] = []
    lines: list[int] = []
    header = next(reader, None)
    if header is None:
        raise AS2DataError(f"{desc}: empty file, expected the WikiQA header")
    if header and header[0].startswith("\ufeff"):
        header[0] = header[0][1:]
    if tuple(header) != WIKIQA_COLUMNS:
        raise AS2DataError(
            f"{desc}: line 1 (header): expected the WikiQA columns {' '.join(WIKIQA_COLUMNS)}, got {' '.join(header)}"
        )
    previous_end = reader.line_num
    for fields in reader:
        line = previous_end + 1
        previous_end = reader.line_num
        if not fields:
            continue  # blank line
        row = len(lines)
        lines.append(line)
        if len(fields) != 7:
            raise AS2DataError(
                f"{desc}: line {line} (data row {row + 1}): expected 7 tab-separated fields, got {len(fields)}"
            )
        match = _SENTENCE_ID.fullmatch(fields[4])
        if match is None:
            raise AS2DataError(
                f"{desc}: line {line} (data row {row + 1}), column 'SentenceID': expected D<n>-<k>, got {fields[4]!r}"
            )
        if not fields[0].strip():
            raise AS2DataError(f"{desc}: line {line} (data row {row + 1}), column 'QuestionID': empty id")
        if not fields[2].strip():
            raise AS2DataError(f"{desc}: line {line} (data row {row + 1}), column 'DocumentID': empty id")
        qids.append(fields[0])
        questions.append(fields[1])
        documents.append(fields[2])
        positions.append(int(match.group(1)))
        sentences.append(fields[5])
        labels.append(fields[6])
    return qids, questions, documents, positions, sentences, labels, lines


# --------------------------------------------------------------------------------------------------------------------
# Generic inputs


def _columns_from_records(records: Iterable[dict[str, Any]]) -> dict[str, list[Any]]:
    """Column lists from dict records; a key missing from some records gives None there."""
    records = list(records)
    keys: dict[str, None] = {}
    for record in records:
        for key in record:
            keys.setdefault(key, None)
    return {key: [record.get(key) for record in records] for key in keys if key in AS2_COLUMNS}


def _read_json_file(path: Path, desc: str) -> tuple[dict[str, list[Any]], int, _Where]:
    parsed = list(read_json_records(path, AS2DataError, desc))
    records = [record.value for record in parsed]
    if parsed and parsed[0].line is None:  # a JSON array of objects
        where = _Where(desc, lambda i: f"record {i + 1} (index {i})")
    else:  # JSON lines
        where = _file_rows(desc, [record.line for record in parsed])
        where.header = "all records"
    missing = [c for c in _REQUIRED if not any(c in r for r in records)]
    if records and not missing:
        for i, record in enumerate(records):
            for column in _REQUIRED:
                if column not in record:
                    raise where.error(i, column, "missing key")
    return _columns_from_records(records), len(records), where


def _read_delimited_file(
    path: Path, desc: str, delimiter: str, quoting: int
) -> tuple[dict[str, list[Any]], int, _Where]:
    with _open_text(path, desc=desc) as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        try:
            return _delimited_columns(reader, desc)
        except csv.Error as err:
            raise AS2DataError(f"{desc}: line {reader.line_num}: {err}") from None


def _delimited_columns(reader, desc: str) -> tuple[dict[str, list[Any]], int, _Where]:
    header = next(reader, None)
    if header is None:
        raise AS2DataError(f"{desc}: empty file, expected a header row")
    if header and header[0].startswith("\ufeff"):
        header[0] = header[0][1:]
    header = [h.strip() for h in header]
    duplicated = sorted({h for h in header if header.count(h) > 1 and h in AS2_COLUMNS})
    if duplicated:
        raise AS2DataError(f"{desc}: line 1 (header): duplicated column(s) {', '.join(duplicated)}")
    wanted = [(k, h) for k, h in enumerate(header) if h in AS2_COLUMNS]
    columns: dict[str, list[Any]] = {h: [] for _, h in wanted}
    lines: list[int] = []
    previous_end = reader.line_num
    for fields in reader:
        line = previous_end + 1
        previous_end = reader.line_num
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # blank line
        if len(fields) != len(header):
            raise AS2DataError(
                f"{desc}: line {line} (data row {len(lines) + 1}): expected {len(header)} fields as in the header, "
                f"got {len(fields)}"
            )
        lines.append(line)
        for k, name in wanted:
            columns[name].append(fields[k])
    if not lines:
        raise AS2DataError(f"{desc}: no data rows")
    return columns, len(lines), _file_rows(desc, lines)


def _columns_from_dataset(dataset: datasets.Dataset) -> dict[str, list[Any]]:
    present = [c for c in dataset.column_names if c in AS2_COLUMNS]
    return dataset.select_columns(present).to_dict() if present else {}


def _is_saved_dataset_dir(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def load_as2_data(
    source: str | os.PathLike | datasets.Dataset | datasets.DatasetDict,
    clean: bool = False,
    split: str = "train",
    *,
    delimiter: str | None = None,
    quoting: int | None = None,
    description: str | None = None,
    **load_dataset_kwargs: Any,
) -> AS2Data:
    """Load AS2 data from a file, a dataset or a dataset name into the canonical columns (see the module docstring).

    ``source`` may be:

    - a JSON lines file (``.jsonl``/``.ndjson``/``.json``, or a ``.json`` array of objects), optionally ``.gz``;
    - a CSV (``.csv``) or TSV (``.tsv``/``.tab``/``.txt``) file with a header row, optionally ``.gz``; a file whose
      header is the WikiQA header goes to :func:`read_wikiqa` (so ``WikiQA-dev.tsv.gz`` just works).
      ``delimiter`` overrides the one implied by the suffix; ``quoting`` defaults to ``csv.QUOTE_MINIMAL`` for CSV and
      ``csv.QUOTE_NONE`` for TSV (TSV fields hold no tabs or newlines, and sentences often contain ``"``);
    - a :class:`datasets.Dataset` (or a :class:`datasets.DatasetDict`, from which ``split`` is taken);
    - a folder written by ``save_to_disk``; ``"wikiqa"`` (the WikiQA ``split``, via :func:`read_wikiqa`); or any other
      name/path for :func:`datasets.load_dataset` (called with ``split`` and ``load_dataset_kwargs``).

    Columns: ``question``, ``candidate`` and ``label`` (0/1, ``"0"``/``"1"`` or a bool) are required. Optional:
    ``question_id`` (default: :func:`question_id_for` the question text), ``context`` (a string, or a list of strings
    joined with a space), ``document_id`` + ``position`` (a non-negative int): without a ``context`` column, the
    context is rebuilt as the previous + next sentence of the candidate in its document, the sentences of a document
    being the rows that share its ``document_id``, ordered by ``position``. A ``context`` column, when present, wins
    over the rebuilt one. Other columns are ignored.

    ``clean=True`` keeps only questions with at least one correct and one wrong candidate.

    Errors raise :class:`AS2DataError` naming the file (or ``description`` / a description of the dataset), the row
    and the column; for files, ``line N`` counts physical lines with the header as line 1 (``data row K`` counts data
    records), for datasets ``row K (index K-1)``.

    Example:
        >>> data = load_as2_data("answers.jsonl")  # doctest: +SKIP
        >>> data.dataset.column_names  # doctest: +SKIP
        ['question_id', 'question', 'candidate', 'label', 'context', 'document_id', 'position']
        >>> load_as2_data("wikiqa", split="test", clean=True).stats["questions"]  # doctest: +SKIP
        237
    """
    if isinstance(source, datasets.DatasetDict):
        if split not in source:
            raise AS2DataError(f"{description or 'DatasetDict'}: no split {split!r} (has: {', '.join(source)})")
        source = source[split]
    if isinstance(source, datasets.Dataset):
        desc = (
            description
            or f"datasets.Dataset({source.num_rows} rows{f', split {source.split}' if source.split else ''})"
        )
        where = _Where(desc, lambda i: f"row {i + 1} (index {i})")
        return _build(_columns_from_dataset(source), source.num_rows, where, desc, clean)
    if not isinstance(source, str | os.PathLike):
        raise TypeError(f"source must be a path, a dataset name or a datasets.Dataset, got {_type_name(source)}")

    path = Path(source)
    if path.is_file():
        desc = description or str(path)
        suffix = base_suffix(path)
        if suffix in _JSON_SUFFIXES:
            columns, n_rows, where = _read_json_file(path, desc)
            return _build(columns, n_rows, where, desc, clean)
        if _is_wikiqa_header(_first_line(path)):
            return read_wikiqa(path, clean=clean)
        if delimiter is None:
            if suffix in _CSV_SUFFIXES:
                delimiter = ","
            elif suffix in _TSV_SUFFIXES:
                delimiter = "\t"
            else:
                raise AS2DataError(
                    f"{desc}: unknown file type {suffix or '(no suffix)'!r}; use .jsonl, .json, .csv or .tsv "
                    "(optionally .gz), or pass delimiter=..."
                )
        if quoting is None:
            quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        columns, n_rows, where = _read_delimited_file(path, desc, delimiter, quoting)
        return _build(columns, n_rows, where, desc, clean)
    if path.is_dir() and _is_saved_dataset_dir(path):
        return load_as2_data(
            datasets.load_from_disk(str(path)), clean=clean, split=split, description=description or str(path)
        )
    if not path.exists():
        if str(source).lower() == "wikiqa":
            return read_wikiqa(split, clean=clean)
        if base_suffix(path) in _JSON_SUFFIXES + _CSV_SUFFIXES + _TSV_SUFFIXES:
            raise FileNotFoundError(f"AS2 data file not found: {path}")
    loaded = datasets.load_dataset(str(source), split=split, **load_dataset_kwargs)
    desc = description or f"dataset {str(source)!r} (split {split!r})"
    return load_as2_data(loaded, clean=clean, split=split, description=desc)


__all__ = [
    "AS2_COLUMNS",
    "AS2_FEATURES",
    "AS2Data",
    "AS2DataError",
    "WIKIQA_COLUMNS",
    "WIKIQA_SPLITS",
    "load_as2_data",
    "question_id_for",
    "read_wikiqa",
]

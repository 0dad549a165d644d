"""Grouping AS2 candidates into the k slots of the joint models, and reading pairwise scores for the cascade.

Di Liello et al. (NAACL 2022) evaluate the joint models in two ways, both built here from the canonical AS2 rows
(one row per candidate, :mod:`.as2_data`):

- ``all`` (table 1): every candidate of a question, in consecutive groups of k (the last group has empty slots);
- ``top_k`` (table 2, the cascade): the k best candidates of a pairwise model (a score per row), one group per
  question; the other candidates keep the pairwise order below them.

Training groups shuffle the order of the candidates (seeded, per question), evaluation groups keep a deterministic one
(the input order for ``all``, the pairwise ranking for ``top_k``).

Example:
    >>> groups = group_candidates(split.dataset, num_candidates=5, grouping="all")  # doctest: +SKIP
    >>> groups.column_names  # doctest: +SKIP
    ['question_id', 'question', 'candidates', 'labels', 'rows']
"""

from __future__ import annotations

import csv
import math
import numbers
import os
import random
from collections import defaultdict, deque
from pathlib import Path

import datasets

from as2hub.data_collators.objectives.structure_objectives import derive_seed

from .as2_data import AS2DataError, question_id_for
from .text_files import base_suffix, open_text, read_json_records

GROUPINGS = ("all", "top_k")
GROUP_FEATURES = datasets.Features(
    {
        "question_id": datasets.Value("string"),
        "question": datasets.Value("string"),
        "candidates": datasets.Sequence(datasets.Value("string")),
        "labels": datasets.Sequence(datasets.Value("int64")),
        "rows": datasets.Sequence(datasets.Value("int64")),
    }
)


def questions_in_order(question_ids: list[str]) -> dict[str, list[int]]:
    """question id -> its row indices, questions in order of first appearance."""
    rows: dict[str, list[int]] = defaultdict(list)
    for index, question_id in enumerate(question_ids):
        rows[question_id].append(index)
    return rows


def pairwise_order(rows: list[int], scores: list[float]) -> list[int]:
    """Rows sorted by descending score; ties keep the input order."""
    return sorted(rows, key=lambda row: -scores[row])


def group_candidates(
    dataset: datasets.Dataset,
    num_candidates: int,
    grouping: str = "all",
    scores: list[float] | None = None,
    shuffle_seed: int | None = None,
) -> datasets.Dataset:
    """One row per group of at most k candidates of one question (columns :data:`GROUP_FEATURES`).

    Args:
        dataset: canonical AS2 rows (``question_id``, ``question``, ``candidate``, ``label``).
        num_candidates: k.
        grouping: ``"all"`` or ``"top_k"`` (needs ``scores``, one per row: the pairwise model's).
        scores: pairwise scores aligned with ``dataset``.
        shuffle_seed: shuffle each question's candidates (training) with ``derive_seed(shuffle_seed, question_id)``;
            None keeps the deterministic evaluation order.

    ``rows`` holds the dataset row of every slot, to map scores back to candidates.
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    if num_candidates < 1:
        raise ValueError(f"num_candidates (k) must be >= 1, got {num_candidates}")
    question_ids = dataset["question_id"]
    if grouping == "top_k" and (scores is None or len(scores) != len(question_ids)):
        raise ValueError("top_k grouping needs one pairwise score per row")
    questions, candidates, labels = dataset["question"], dataset["candidate"], dataset["label"]
    columns: dict[str, list] = {name: [] for name in GROUP_FEATURES}
    for question_id, rows in questions_in_order(question_ids).items():
        if grouping == "top_k":
            chosen = [pairwise_order(rows, scores)[:num_candidates]]
        else:
            chosen = None
        if shuffle_seed is not None:
            rng = random.Random(derive_seed(shuffle_seed, question_id))
            if chosen is None:
                rows = list(rows)
                rng.shuffle(rows)
            else:
                chosen = [rng.sample(chosen[0], len(chosen[0]))]
        if chosen is None:
            chosen = [rows[start : start + num_candidates] for start in range(0, len(rows), num_candidates)]
        for group in chosen:
            columns["question_id"].append(question_id)
            columns["question"].append(questions[group[0]])
            columns["candidates"].append([candidates[row] for row in group])
            columns["labels"].append([labels[row] for row in group])
            columns["rows"].append(group)
    return datasets.Dataset.from_dict(columns, features=GROUP_FEATURES)


# ------------------------------------------------------------------------------------------------- score columns


def _score(value, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise AS2DataError(f"{where}: expected a number, got {value!r:.80}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise AS2DataError(f"{where}: expected a finite number, got {value!r:.80}")
    return float(value)


class ScoreColumn:
    """Pairwise scores read from a column of an AS2 file, matched to the rows of a loaded split.

    Rows are matched by (question id, candidate text) and, for repeated pairs, by order of occurrence, so the match
    survives the clean filter and ``--max_*_samples`` (which drop whole questions). The question id is the file's
    ``question_id`` or, without one, :func:`question_id_for` of the question, as the AS2 readers compute it.
    """

    def __init__(self, path: str | os.PathLike, column: str):
        self.path, self.column = Path(path), column
        self._scores: dict[tuple[str, str], deque] = defaultdict(deque)
        if not self.path.is_file():
            raise AS2DataError(
                f"{self.path}: a score column is read from a JSONL, CSV or TSV file (for 'wikiqa' or 'embedded' use "
                "--pairwise_model)"
            )
        suffix = base_suffix(self.path)
        with open_text(self.path, AS2DataError) as handle:
            if suffix in (".jsonl", ".ndjson", ".json"):
                records = self._json_records()
            elif suffix in (".csv", ".tsv", ".tab", ".txt"):
                records = self._delimited_records(handle, "," if suffix == ".csv" else "\t")
            else:
                raise AS2DataError(f"{self.path}: cannot read a score column from a {suffix or 'suffix-less'} file")
            for where, record in records:
                if self.column not in record or record[self.column] in (None, ""):
                    raise AS2DataError(
                        f"{where}, column {self.column!r}: missing score (top_k grouping needs one per row)"
                    )
                given = record.get("question_id")
                question_id = str(given).strip() if given not in (None, "") else ""
                if not question_id:
                    question_id = question_id_for(str(record.get("question", "")))
                key = (question_id, str(record.get("candidate", "")))
                self._scores[key].append(_score(record[self.column], f"{where}, column {self.column!r}"))

    def _json_records(self):
        for record in read_json_records(self.path, AS2DataError, arrays=False):
            yield f"{self.path}: {record.where}", record.value

    def _delimited_records(self, handle, delimiter: str):
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        reader = csv.DictReader(handle, delimiter=delimiter, quoting=quoting)
        try:
            reader.fieldnames  # noqa: B018  (reads the header row)
        except csv.Error as err:
            raise AS2DataError(f"{self.path}: line 1 (header): {err}") from None
        if reader.fieldnames is None or self.column not in [
            name.strip().lstrip("\ufeff") for name in reader.fieldnames
        ]:
            raise AS2DataError(f"{self.path}: line 1 (header): no column {self.column!r} (top_k grouping needs scores)")
        previous_end, row = reader.line_num, 0
        while True:
            try:
                record = next(reader, None)
            except csv.Error as err:
                raise AS2DataError(f"{self.path}: line {reader.line_num}: {err}") from None
            if record is None:
                return
            number, previous_end = previous_end + 1, reader.line_num
            row += 1
            where = f"{self.path}: line {number} (data row {row})"
            if None in record or None in record.values():  # DictReader: extra fields / missing fields
                raise AS2DataError(f"{where}: expected {len(reader.fieldnames)} fields as in the header")
            yield where, {k.strip().lstrip("\ufeff"): v for k, v in record.items()}

    def scores_for(self, dataset: datasets.Dataset, description: str) -> list[float]:
        """One score per row of ``dataset`` (a split loaded from this file); AS2DataError naming the row when a row
        has no score."""
        remaining = {key: deque(values) for key, values in self._scores.items()}
        out = []
        for index, (question_id, candidate) in enumerate(zip(dataset["question_id"], dataset["candidate"])):
            values = remaining.get((question_id, candidate))
            if not values:
                raise AS2DataError(
                    f"{description}: row {index + 1} (question {question_id!r}): no {self.column!r} score in "
                    f"{self.path} for candidate {candidate!r:.60}"
                )
            out.append(values.popleft())
        return out

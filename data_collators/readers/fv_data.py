"""Fact verification data for the joint models: a claim, its evidence sentences and a label (FEVER-style).

One JSON object per line (``.jsonl``, optionally ``.gz``)::

    {"claim": "Hamlet is a comedy.", "evidences": ["Hamlet is a tragedy.", "..."], "label": "REFUTES"}

``claim`` is a non-empty string, ``evidences`` a non-empty list of non-empty strings (the joint model reads the first
k), ``label`` one of the label names (default FEVER's ``SUPPORTS``, ``REFUTES``, ``NOT ENOUGH INFO``, matched without
regard to case) or its index; an optional ``id`` (string or integer) names the claim. Every line is validated before
the dataset is built; a bad one raises :class:`FactVerificationDataError` (an :class:`AS2DataError`, hence a
``ValueError``) naming the file, the line and the key.

Example:
    >>> data = load_fv_data("fever_dev.jsonl")  # doctest: +SKIP
    >>> data.dataset.column_names, data.labels  # doctest: +SKIP
    (['claim_id', 'claim', 'evidences', 'label'], ('SUPPORTS', 'REFUTES', 'NOT ENOUGH INFO'))
"""

from __future__ import annotations

import logging
import numbers
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from .as2_data import AS2DataError
from .text_files import lone_surrogate, read_json_records

logger = logging.getLogger(__name__)

FEVER_LABELS: tuple[str, ...] = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
FV_FEATURES = datasets.Features(
    {
        "claim_id": datasets.Value("string"),
        "claim": datasets.Value("string"),
        "evidences": datasets.Sequence(datasets.Value("string")),
        "label": datasets.Value("int64"),
    }
)


class FactVerificationDataError(AS2DataError):
    """Invalid fact verification input; the message names the file, the line and the key."""


@dataclass
class FVData:
    """A fact verification dataset (columns of :data:`FV_FEATURES`), its source, its label names and counts."""

    dataset: datasets.Dataset
    source: str
    labels: tuple[str, ...]
    stats: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.dataset)


def _label_index(value: Any, labels: tuple[str, ...], error) -> int:
    if isinstance(value, str):
        wanted = value.strip().upper()
        for index, name in enumerate(labels):
            if name.upper() == wanted:
                return index
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value < len(labels):
        return int(value)
    raise error("label", f"unknown label {value!r:.80}; expected one of {', '.join(labels)} (or its index)")


def load_fv_data(path: str | os.PathLike, labels: tuple[str, ...] | list[str] = FEVER_LABELS) -> FVData:
    """Read and validate a fact verification JSONL file (see the module docstring)."""
    path = Path(path)
    labels = tuple(labels)
    if len({name.upper() for name in labels}) != len(labels) or not labels:
        raise ValueError(f"label names must be distinct and non-empty, got {labels}")
    if not path.is_file():
        raise FileNotFoundError(f"fact verification file not found: {path}")
    desc = str(path)
    columns: dict[str, list] = {name: [] for name in FV_FEATURES}
    row = 0
    for parsed in read_json_records(path, FactVerificationDataError, desc, arrays=False):
        number, row, record = parsed.line, parsed.row, parsed.value

        def error(key, problem, number=number, row=row):
            return FactVerificationDataError(f"{desc}: line {number} (data row {row}), key {key!r}: {problem}")

        for key in ("claim", "evidences", "label"):
            if key not in record:
                raise error(key, "missing key")
        surrogate = lone_surrogate(record)
        if surrogate:
            raise FactVerificationDataError(f"{desc}: line {number} (data row {row}): invalid Unicode in {surrogate}")
        claim, evidences = record["claim"], record["evidences"]
        if not isinstance(claim, str) or not claim.strip():
            raise error("claim", f"expected a non-empty string, got {type(claim).__name__} {claim!r:.80}")
        if not isinstance(evidences, list):
            raise error("evidences", f"expected a list of strings, got {type(evidences).__name__} {evidences!r:.80}")
        if not evidences:
            raise error("evidences", "no evidences: a claim needs at least one evidence sentence")
        for index, evidence in enumerate(evidences):
            if not isinstance(evidence, str) or not evidence.strip():
                raise error(
                    "evidences",
                    f"evidence {index} must be a non-empty string, got {type(evidence).__name__} {evidence!r:.80}",
                )
        claim_id = record.get("id")
        if claim_id is None or (isinstance(claim_id, str) and not claim_id.strip()):
            claim_id = f"line-{number}"
        elif isinstance(claim_id, bool) or not isinstance(claim_id, (str, numbers.Integral)):
            raise error("id", f"expected a string or an integer id, got {type(claim_id).__name__}")
        columns["claim_id"].append(str(claim_id).strip())
        columns["claim"].append(claim)
        columns["evidences"].append(evidences)
        columns["label"].append(_label_index(record["label"], labels, error))
    if row == 0:
        raise FactVerificationDataError(f"{desc}: no data rows")
    counts = Counter(columns["label"])
    lengths = [len(evidences) for evidences in columns["evidences"]]
    stats = {
        "claims": row,
        "labels": {labels[index]: counts.get(index, 0) for index in range(len(labels))},
        "evidences_per_claim_mean": sum(lengths) / row,
        "evidences_per_claim_max": max(lengths),
    }
    logger.info("fact verification data from %s: %s", desc, stats)
    return FVData(datasets.Dataset.from_dict(columns, features=FV_FEATURES), desc, labels, stats)


__all__ = ["FEVER_LABELS", "FV_FEATURES", "FVData", "FactVerificationDataError", "load_fv_data"]

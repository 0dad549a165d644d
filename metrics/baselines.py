"""Reference points for AS2 rankings: a random ranking and a lexical one (Okapi BM25).

A learned ranker's MAP means little alone: these give the same test set ranked by chance and by word overlap, so a
report can show what training added. Both return one score per (question, candidate) row, to be fed to
:func:`as2hub.metrics.compute_as2_metrics` with the same question ids and labels.

Example:
    >>> questions = ["what is a tuple", "what is a tuple"]
    >>> candidates = ["A tuple is an immutable sequence.", "Loops repeat code."]
    >>> scores = bm25_scores(questions, candidates)
    >>> scores[0] > scores[1]
    True
    >>> round(expected_random_metrics(["q", "q", "q"], [1, 0, 0])["map"], 1)  # exactly 1/3 (1 + 1/2 + 1/3)
    0.6
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .as2_ranking import compute_as2_metrics

__all__ = ["bm25_scores", "expected_random_metrics", "random_scores"]

_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def bm25_scores(questions: Sequence[str], candidates: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each candidate for its question (words: lower-cased ``\\w+``).

    Document frequencies and the average length are taken over the distinct candidates given (the test set's
    sentences), with the non-negative idf ``log(1 + (N - df + 0.5) / (df + 0.5))``.
    """
    if len(questions) != len(candidates):
        raise ValueError(f"{len(questions)} questions for {len(candidates)} candidates")
    documents = {text: Counter(_words(text)) for text in dict.fromkeys(candidates)}
    count = len(documents) or 1
    average = sum(sum(words.values()) for words in documents.values()) / count or 1.0
    frequency = Counter(word for words in documents.values() for word in words)
    idf = {word: math.log(1.0 + (count - df + 0.5) / (df + 0.5)) for word, df in frequency.items()}
    scores = []
    for question, candidate in zip(questions, candidates):
        words = documents[candidate]
        length = sum(words.values())
        score = 0.0
        for word in set(_words(question)):
            tf = words.get(word, 0)
            if tf:
                score += idf[word] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
        scores.append(score)
    return scores


def random_scores(num_rows: int, seed: int = 0) -> list[float]:
    """Uniform random scores: one random ranking of every question."""
    return np.random.default_rng(seed).random(num_rows).tolist()


def expected_random_metrics(question_ids, labels, samples: int = 200, seed: int = 0) -> dict[str, float]:
    """Metrics of a random ranking (MAP, MRR, P@1, ...), averaged over ``samples`` seeded random rankings."""
    # Read once: a ``datasets`` column is read row by row on each pass (9 s for 200 passes over WikiQA's test set).
    question_ids, labels = list(question_ids), list(labels)
    totals: dict[str, float] = {}
    for sample in range(samples):
        metrics = compute_as2_metrics(question_ids, random_scores(len(labels), seed + sample), labels, k_values=(1,))
        for name, value in metrics.items():
            totals[name] = totals.get(name, 0.0) + float(value)
    return {name: value / samples for name, value in totals.items()}

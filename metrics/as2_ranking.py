"""AS2 ranking metrics: MAP, MRR, P@1, hit@k and nDCG@k over candidates grouped by question.

Answer sentence selection (AS2) scores every (question, candidate sentence) pair independently; the metrics
are computed per question by ranking its candidates by score, then averaged over questions.  Following the
usual WikiQA / TrecQA convention, questions without any correct candidate are skipped (they are counted in
``num_skipped_no_positive``); questions whose candidates are all correct are kept.

This file is self-contained (stdlib, numpy, datasets, evaluate only) so that it can be used in two ways.

As a plain Python module (fast, no caching, recommended inside training loops)::

    >>> from as2hub.metrics import compute_as2_metrics
    >>> compute_as2_metrics(["q1", "q1", "q2", "q2"], [0.9, 0.1, 0.2, 0.8], [0, 1, 1, 0], k_values=(1,))
    {'map': 0.5, 'mrr': 0.5, 'p@1': 0.0, 'hit@1': 0.0, 'ndcg@1': 0.0, 'num_questions': 2, 'num_skipped_no_positive': 0}

As an ``evaluate`` metric loaded from this file (works offline: a local path never touches the Hub)::

    >>> import evaluate
    >>> from as2hub.metrics import METRIC_PATH  # absolute path of this file
    >>> metric = evaluate.load(METRIC_PATH)
    >>> metric.compute(predictions=[0.9, 0.1, 0.2, 0.8], references=[0, 1, 1, 0],
    ...                question_ids=["q1", "q1", "q2", "q2"], k_values=(1, 3))

As a ``transformers.Trainer`` ``compute_metrics`` callback::

    >>> from as2hub.metrics import make_compute_metrics
    >>> eval_ds = ...  # one row per (question, candidate); NOT shuffled
    >>> trainer = Trainer(model=model, args=args, eval_dataset=eval_ds,
    ...                   compute_metrics=make_compute_metrics(eval_ds["question_id"]))
    >>> trainer.evaluate()["eval_map"]

Tie rule (documented once, applied everywhere): candidates are sorted by score descending with a *stable*
sort, so among candidates of the same question with exactly equal scores the one that appears first in the
input is ranked higher.  The result is deterministic and neither optimistic (correct first) nor pessimistic
(correct last), provided the input order is not itself correlated with the labels.  Note that the
``evaluate`` path stores predictions as float32, so scores that differ only beyond float32 precision become
ties there; the pure function keeps the dtype it is given (float64 for Python floats).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import datasets
import evaluate
import numpy as np

__all__ = ["AS2Ranking", "DEFAULT_K_VALUES", "compute_as2_metrics", "make_compute_metrics"]

DEFAULT_K_VALUES: tuple[int, ...] = (1, 3, 5, 10)


# ----------------------------------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------------------------------


def _factorize(question_ids: Any) -> np.ndarray:
    """Map question ids (any hashable values) to dense int64 codes 0..G-1 (in order of first appearance)."""
    if isinstance(question_ids, np.ndarray) and question_ids.dtype.kind in "iub":
        if question_ids.ndim != 1:
            raise ValueError(f"question_ids must be 1-D, got an array of shape {question_ids.shape}")
        _, codes = np.unique(question_ids, return_inverse=True)
        return codes.astype(np.int64, copy=False).reshape(-1)
    if isinstance(question_ids, np.ndarray) and question_ids.ndim != 1:
        raise ValueError(f"question_ids must be 1-D, got an array of shape {question_ids.shape}")
    if isinstance(question_ids, (str, bytes)):
        raise ValueError("question_ids must be a sequence of ids (one per candidate), not a single string")
    mapping: dict[Any, int] = {}
    try:
        codes_list = [mapping.setdefault(q, len(mapping)) for q in question_ids]
    except TypeError as exc:  # unhashable ids, e.g. lists
        raise ValueError(f"question_ids must be hashable values (str/int), got: {exc}") from exc
    return np.asarray(codes_list, dtype=np.int64)


def _as_1d_scores(scores: Any) -> np.ndarray:
    arr = np.asarray(scores)
    if arr.ndim != 1:
        raise ValueError(
            f"scores must be a 1-D sequence with one score per candidate, got shape {arr.shape}; "
            "for model logits of shape (n, 1) or (n, 2) use make_compute_metrics (or reduce them to one score first)"
        )
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        if arr.size == 0:
            return arr.astype(np.float64)
        raise ValueError(f"scores must be real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.float64)
    nan_pos = np.flatnonzero(np.isnan(arr))
    if nan_pos.size:
        raise ValueError(
            f"scores contain {nan_pos.size} NaN value(s) (first at index {int(nan_pos[0])}); "
            "NaN cannot be ranked - check the model outputs for overflow / divergence"
        )
    return arr


def _as_binary_labels(labels: Any) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be a 1-D sequence of 0/1 values, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"labels must be binary 0/1 numbers, got dtype {arr.dtype}")
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        bad_pos = np.flatnonzero(bad)
        bad_values = np.unique(arr[bad_pos])[:5].tolist()
        raise ValueError(
            f"labels must be binary (0 = incorrect, 1 = correct answer); found {bad_pos.size} invalid label(s) "
            f"with value(s) {bad_values} (first at index {int(bad_pos[0])}). "
            "Graded relevance or padding values such as -100 are not supported."
        )
    return arr.astype(np.int64)


def _normalize_k_values(k_values: Iterable[int] | int | None) -> tuple[int, ...]:
    if k_values is None:
        return ()
    if isinstance(k_values, (int, np.integer)) and not isinstance(k_values, bool):
        k_values = (int(k_values),)
    out = []
    for k in k_values:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k_values must contain positive integers, got {k!r}")
        out.append(int(k))
    return tuple(sorted(set(out)))


def _check_lengths(**named: int) -> None:
    if len(set(named.values())) > 1:
        details = ", ".join(f"{name}={n}" for name, n in named.items())
        raise ValueError(f"inputs must have one entry per candidate (equal lengths), got {details}")


# ----------------------------------------------------------------------------------------------------------------
# Core computation
# ----------------------------------------------------------------------------------------------------------------


def _metrics_from_codes(codes: np.ndarray, scores: np.ndarray, labels: np.ndarray, ks: tuple[int, ...]) -> dict:
    n = codes.shape[0]
    keys = ["map", "mrr", "p@1"] + [f"{name}@{k}" for k in ks for name in ("hit", "ndcg")]
    if n == 0:
        return {**dict.fromkeys(keys, 0.0), "num_questions": 0, "num_skipped_no_positive": 0}

    num_groups = int(codes.max()) + 1
    # Sort by question, then score descending.  np.lexsort is stable, so exact score ties keep input order.
    order = np.lexsort((-scores, codes))
    g = codes[order]
    y = labels[order].astype(np.float64)

    # 1-based rank of every candidate inside its question.
    sizes = np.bincount(g, minlength=num_groups)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank = np.arange(n, dtype=np.int64) - starts[g] + 1

    n_pos = np.bincount(g, weights=y, minlength=num_groups)
    valid = n_pos > 0
    num_valid = int(valid.sum())
    num_skipped = int(num_groups - num_valid)
    if num_valid == 0:
        return {**dict.fromkeys(keys, 0.0), "num_questions": 0, "num_skipped_no_positive": num_skipped}

    # Number of correct candidates at or above each position, within its question.
    cum_all = np.cumsum(y)
    before_group = np.concatenate(([0.0], cum_all))[starts]
    cum = cum_all - before_group[g]

    rel = y > 0
    ap = np.bincount(g[rel], weights=cum[rel] / rank[rel], minlength=num_groups)
    first = rel & (cum == 1.0)  # the highest-ranked correct candidate of each question
    rr = np.bincount(g[first], weights=1.0 / rank[first], minlength=num_groups)

    safe_pos = np.where(valid, n_pos, 1.0)
    out: dict[str, Any] = {
        "map": float(np.mean(ap[valid] / safe_pos[valid])),
        "mrr": float(np.mean(rr[valid])),
        "p@1": float(np.mean(y[starts[valid]])),  # label of the top-ranked candidate
    }

    discount = 1.0 / np.log2(rank + 1.0)
    if ks:
        # ideal_dcg[m] = DCG of a list with m correct candidates on top.
        ideal_dcg = np.concatenate(([0.0], np.cumsum(1.0 / np.log2(np.arange(2, max(ks) + 2)))))
    for k in ks:
        in_top = rank <= k
        hits = np.bincount(g, weights=y * in_top, minlength=num_groups)
        dcg = np.bincount(g, weights=y * discount * in_top, minlength=num_groups)
        idcg = ideal_dcg[np.minimum(n_pos, k).astype(np.int64)]
        out[f"hit@{k}"] = float(np.mean(hits[valid] > 0))
        out[f"ndcg@{k}"] = float(np.mean(dcg[valid] / idcg[valid]))

    out["num_questions"] = num_valid
    out["num_skipped_no_positive"] = num_skipped
    return out


def compute_as2_metrics(
    question_ids: Sequence[Any],
    scores: Sequence[float],
    labels: Sequence[int],
    k_values: Iterable[int] | int | None = DEFAULT_K_VALUES,
) -> dict[str, float | int]:
    """Compute AS2 ranking metrics over candidates grouped by question.

    Args:
        question_ids: one id per candidate (any hashable value: str, int...). Rows of one question need not be
            contiguous.
        scores: one real score per candidate; higher means "more likely a correct answer". Any monotone
            transform (logit, probability, logit difference) gives the same metrics.
        labels: one binary label per candidate (1 = correct answer, 0 = incorrect; bools and 0.0/1.0 accepted).
        k_values: cut-offs for ``hit@k`` and ``ndcg@k`` (positive integers; duplicates are removed).

    Returns:
        A dict with, averaged over evaluated questions:

        - ``"map"``: mean average precision (AP = mean of precision@rank over the ranks of correct candidates);
        - ``"mrr"``: mean reciprocal rank of the first correct candidate;
        - ``"p@1"``: precision at 1, i.e. fraction of questions whose top-ranked candidate is correct;
        - ``"hit@k"``: fraction of questions with at least one correct candidate in the top k;
        - ``"ndcg@k"``: nDCG@k with binary gains and ``1 / log2(rank + 1)`` discount, the ideal DCG using
          ``min(#correct, k)`` correct candidates;

        plus ``"num_questions"`` (questions evaluated) and ``"num_skipped_no_positive"`` (questions skipped
        because none of their candidates is correct, the usual AS2 / WikiQA convention; all-correct questions
        are kept).  Metric values are Python floats, counts Python ints.

    Empty input, or input in which every question is skipped, returns 0.0 for every metric (never NaN)
    together with the counts, so callers can tell this case apart via ``num_questions == 0``.

    Ties: within a question, candidates are sorted by score descending with a stable sort, so exactly equal
    scores keep their input order (earlier candidate ranked higher).  Deterministic, and neutral as long as the
    input order is not correlated with the labels.

    Raises:
        ValueError: on length mismatch, non-1-D inputs, NaN scores, labels outside {0, 1} or invalid k_values.
    """
    ks = _normalize_k_values(k_values)
    codes = _factorize(question_ids)
    score_arr = _as_1d_scores(scores)
    label_arr = _as_binary_labels(labels)
    _check_lengths(question_ids=codes.shape[0], scores=score_arr.shape[0], labels=label_arr.shape[0])
    return _metrics_from_codes(codes, score_arr, label_arr, ks)


# ----------------------------------------------------------------------------------------------------------------
# transformers.Trainer integration
# ----------------------------------------------------------------------------------------------------------------


def _default_score_fn(predictions: np.ndarray) -> np.ndarray:
    """Reduce classifier logits to one ranking score per candidate.

    - ``(n,)`` or ``(n, 1)``: the single logit itself (monotone with its sigmoid, so the ranking is identical).
    - ``(n, 2)``: the logit difference ``logits[:, 1] - logits[:, 0]``.  ``softmax(logits)[:, 1]`` equals
      ``sigmoid(logits[:, 1] - logits[:, 0])``, so the ranking is identical, but the difference does not
      saturate to exactly 1.0 in float32 for confident predictions (which would create spurious ties).
    """
    preds = np.asarray(predictions)
    if preds.ndim == 1:
        return preds
    if preds.ndim == 2 and preds.shape[1] == 1:
        return preds[:, 0]
    if preds.ndim == 2 and preds.shape[1] == 2:
        return preds[:, 1].astype(np.float64) - preds[:, 0].astype(np.float64)
    raise ValueError(
        f"cannot derive one ranking score per candidate from predictions of shape {preds.shape}; expected "
        "(n,), (n, 1) or (n, 2) logits - pass score_fn=... to make_compute_metrics for other model heads"
    )


def make_compute_metrics(
    question_ids: Sequence[Any],
    score_fn: Callable[[np.ndarray], np.ndarray] | None = None,
    k_values: Iterable[int] | int | None = DEFAULT_K_VALUES,
) -> Callable[..., dict[str, float | int]]:
    """Build a ``compute_metrics(eval_pred)`` callback for ``transformers.Trainer``.

    Args:
        question_ids: the question id of every row of the evaluation dataset, **in dataset order**.  The Trainer
            evaluates with a sequential sampler (no shuffling) and, in distributed runs, drops the padding added
            for even sharding, so ``eval_pred.predictions[i]`` belongs to row ``i`` of ``eval_dataset``.  Build
            the list from the very dataset passed as ``eval_dataset`` (after any filtering / sorting), e.g.
            ``make_compute_metrics(eval_ds["question_id"])``; use one callback per evaluation dataset.
        score_fn: optional callable mapping the (numpy) ``eval_pred.predictions`` to a 1-D array of scores.
            By default logits of shape ``(n,)`` / ``(n, 1)`` are used as they are (monotone with the sigmoid) and
            ``(n, 2)`` logits are reduced to ``logits[:, 1] - logits[:, 0]`` (monotone with ``softmax[:, 1]``).
        k_values: cut-offs for ``hit@k`` / ``ndcg@k``.

    Returns:
        ``compute_metrics(eval_pred) -> dict`` (see :func:`compute_as2_metrics` for the keys; the Trainer
        prefixes them with ``eval_``).  If ``predictions`` is a tuple (model returning extra outputs), its first
        element is taken as the logits.  ``label_ids`` must be the 0/1 labels, shape ``(n,)`` or ``(n, 1)``.
        ``batch_eval_metrics=True`` is not supported (ranking needs all candidates of a question at once).

    Raises:
        ValueError (when called): if the number of predictions / labels differs from ``len(question_ids)``.
    """
    codes = _factorize(question_ids)  # factorize once; reused at every evaluation
    n_expected = int(codes.shape[0])
    ks = _normalize_k_values(k_values)
    reduce = score_fn if score_fn is not None else _default_score_fn

    def compute_metrics(eval_pred: Any, compute_result: bool | None = None) -> dict[str, float | int]:
        if compute_result is not None:
            raise ValueError(
                "AS2 ranking metrics need all candidates of a question at once; "
                "set TrainingArguments(batch_eval_metrics=False)"
            )
        if hasattr(eval_pred, "predictions"):
            predictions, label_ids = eval_pred.predictions, eval_pred.label_ids
        else:
            predictions, label_ids = eval_pred[0], eval_pred[1]
        if isinstance(predictions, (tuple, list)) and not np.isscalar(predictions[0]):
            predictions = predictions[0]
        if label_ids is None:
            raise ValueError("eval_pred.label_ids is None: the evaluation dataset must contain a 'labels' column")
        predictions = np.asarray(predictions)
        labels = np.asarray(label_ids)
        if labels.ndim == 2 and labels.shape[1] == 1:
            labels = labels[:, 0]
        if predictions.shape[0] != n_expected or labels.shape[0] != n_expected:
            raise ValueError(
                f"make_compute_metrics was built with {n_expected} question ids but the Trainer returned "
                f"{predictions.shape[0]} predictions and {labels.shape[0]} labels. question_ids must be aligned "
                "row by row with the eval_dataset passed to the Trainer (same rows, same order, no shuffling)."
            )
        scores = _as_1d_scores(reduce(predictions))
        _check_lengths(question_ids=n_expected, scores=scores.shape[0])
        return _metrics_from_codes(codes, scores, _as_binary_labels(labels), ks)

    return compute_metrics


# ----------------------------------------------------------------------------------------------------------------
# evaluate.Metric wrapper
# ----------------------------------------------------------------------------------------------------------------

_DESCRIPTION = """\
AS2 (answer sentence selection) ranking metrics. Every candidate answer sentence of a question receives a
score; candidates are ranked per question by descending score (stable sort: exact ties keep input order) and
MAP, MRR, precision@1, hit@k and nDCG@k (binary relevance, log2 discount) are averaged over questions.
Questions without any correct candidate are skipped, as is customary for WikiQA and TrecQA evaluation; their
number is reported as num_skipped_no_positive. Predictions are stored as float32 by this evaluate wrapper.
"""

_CITATION = """\
@inproceedings{yang-etal-2015-wikiqa,
    title = "{W}iki{QA}: A Challenge Dataset for Open-Domain Question Answering",
    author = "Yang, Yi and Yih, Wen-tau and Meek, Christopher",
    booktitle = "Proceedings of the 2015 Conference on Empirical Methods in Natural Language Processing",
    year = "2015",
    publisher = "Association for Computational Linguistics",
}
@inproceedings{garg-etal-2020-tanda,
    title = "{TANDA}: Transfer and Adapt Pre-Trained Transformer Models for Answer Sentence Selection",
    author = "Garg, Siddhant and Vu, Thuy and Moschitti, Alessandro",
    booktitle = "Proceedings of the AAAI Conference on Artificial Intelligence",
    year = "2020",
}
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions (list of float): one score per candidate, higher = more likely correct
        (logit, probability or any monotone transform).
    references (list of int): one binary label per candidate, 1 = correct answer, 0 = incorrect.
    question_ids (list of str): one question id per candidate, aligned with predictions / references.
    k_values (tuple of int, optional): cut-offs for hit@k and ndcg@k. Default (1, 3, 5, 10).
Returns:
    map, mrr, p@1, hit@k and ndcg@k for each k (floats, 0.0 when no question can be evaluated),
    num_questions (evaluated questions) and num_skipped_no_positive (questions without a correct candidate).
Examples:
    >>> metric = evaluate.load(METRIC_PATH)
    >>> metric.compute(predictions=[0.9, 0.1, 0.2, 0.8], references=[0, 1, 1, 0],
    ...                question_ids=["q1", "q1", "q2", "q2"], k_values=(1,))
    {'map': 0.5, 'mrr': 0.5, 'p@1': 0.0, 'hit@1': 0.0, 'ndcg@1': 0.0, 'num_questions': 2, 'num_skipped_no_positive': 0}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class AS2Ranking(evaluate.Metric):
    """AS2 ranking metrics (MAP, MRR, P@1, hit@k, nDCG@k) as an ``evaluate`` metric."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "question_ids": datasets.Value("string"),
                    "predictions": datasets.Value("float32"),
                    "references": datasets.Value("int32"),
                }
            ),
            reference_urls=[
                "https://aclanthology.org/D15-1237/",
                "https://arxiv.org/abs/1911.04118",
            ],
        )

    # question ids are stored as strings; stringify int ids so that ``question_ids=[1, 1, 2]`` also works.
    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch of candidates (``question_ids=`` is required); int question ids are stringified."""
        if kwargs.get("question_ids") is not None:
            kwargs["question_ids"] = [str(q) for q in kwargs["question_ids"]]
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one candidate (``question_ids=`` is its question id); an int question id is stringified."""
        if kwargs.get("question_ids") is not None:
            kwargs["question_ids"] = str(kwargs["question_ids"])
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(self, predictions=None, references=None, question_ids=None, k_values=DEFAULT_K_VALUES):
        return compute_as2_metrics(
            question_ids=question_ids if question_ids is not None else [],
            scores=np.asarray(predictions if predictions is not None else [], dtype=np.float32),
            labels=references if references is not None else [],
            k_values=k_values,
        )

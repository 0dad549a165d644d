"""HotpotQA evaluation (Yang et al., 2018) and the question–evidence diagnostic of Caciularu et al. (NAACL 2022).

:func:`hotpotqa_evaluate` follows the official ``hotpot_evaluate_v1.py`` definitions:

- answers are compared after SQuAD normalisation (lower case, punctuation and the articles a / an / the removed,
  whitespace collapsed); EM is equality, F1 the token-overlap F1; when either side normalises to ``yes``, ``no`` or
  ``noanswer`` and the two differ, F1, precision and recall are 0;
- supporting facts are sets of (title, sent_id): precision tp / (tp + fp), recall tp / (tp + fn) (0 when the
  denominator is 0), F1 from them, EM 1 when fp + fn = 0;
- joint precision = answer precision × sp precision, joint recall = answer recall × sp recall, joint F1 from them,
  joint EM = answer EM × sp EM;
- every metric is averaged over the gold examples; an example missing from the predictions scores 0 (and gets no
  joint score).

One extension for evidence-only data (answer type ``none``, an empty gold answer such as
:func:`~as2hub.data_collators.readers.qe_tasks.wikiqa_distractor` writes): such examples count for the supporting-fact
metrics only; answer and joint metrics are averaged over the examples that have an answer (and left out when none
has). On the official data every example has an answer, so the numbers are the official ones.

Decoding: :func:`best_spans` (top-k starts × top-k ends, end ≥ start, at most ``max_answer_length`` tokens) and
:func:`select_supporting_facts` (threshold, optionally top-n per paragraph). The diagnostic of the paper's table 1 is
:func:`qe_map`: mAP of ranking each question's sentences by their similarity to the question, overall and per type
(:func:`~as2hub.metrics.compute_as2_metrics` per group).

Example:
    >>> prediction = {"answer": {"1": "the Eiffel Tower"}, "sp": {"1": [["Paris", 0], ["Paris", 2]]}}
    >>> gold = [{"_id": "1", "answer": "Eiffel Tower", "supporting_facts": [["Paris", 0]]}]
    >>> metrics = hotpotqa_evaluate(prediction, gold)
    >>> metrics["em"], metrics["sp_prec"], metrics["sp_recall"], round(metrics["joint_f1"], 4)
    (1.0, 0.5, 1.0, 0.6667)
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .as2_ranking import compute_as2_metrics

ANSWER_KEYS = ("em", "f1", "prec", "recall")
SP_KEYS = ("sp_em", "sp_f1", "sp_prec", "sp_recall")
JOINT_KEYS = ("joint_em", "joint_f1", "joint_prec", "joint_recall")
_SPECIAL_ANSWERS = ("yes", "no", "noanswer")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces.

    Example:
        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answer_f1(prediction: str, gold: str) -> tuple[float, float, float]:
    """(F1, precision, recall) of the normalised tokens, with the official yes / no / noanswer rule."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL_ANSWERS or ref in _SPECIAL_ANSWERS) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def answer_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def supporting_fact_scores(
    prediction: Iterable[Sequence], gold: Iterable[Sequence]
) -> tuple[float, float, float, float]:
    """(EM, F1, precision, recall) of predicted vs gold (title, sent_id) sets."""
    predicted = {tuple(fact) for fact in prediction}
    reference = {tuple(fact) for fact in gold}
    tp = len(predicted & reference)
    fp, fn = len(predicted - reference), len(reference - predicted)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return float(fp + fn == 0), f1, precision, recall


def hotpotqa_evaluate(prediction: dict, gold: Sequence[dict]) -> dict[str, float]:
    """Official HotpotQA metrics of ``prediction`` (``{"answer": {id: text}, "sp": {id: [[title, sent_id], ...]}}``)
    against ``gold`` records (``_id`` or ``id``, ``answer``, ``supporting_facts`` as ``[[title, sent_id], ...]``).

    Returns ``em, f1, prec, recall`` (answer), ``sp_*``, ``joint_*`` (means), plus ``num_examples`` and
    ``num_answer_examples`` (see the module docstring for examples without an answer).
    """
    totals = dict.fromkeys(ANSWER_KEYS + SP_KEYS + JOINT_KEYS, 0.0)
    answers, facts = prediction.get("answer", {}), prediction.get("sp", {})
    with_answer = 0
    for example in gold:
        example_id = example.get("_id", example.get("id"))
        has_answer = bool(example["answer"].strip())
        with_answer += has_answer
        answer_scores = sp_scores = None
        if has_answer and example_id in answers:
            em = answer_exact_match(answers[example_id], example["answer"])
            f1, precision, recall = answer_f1(answers[example_id], example["answer"])
            answer_scores = (em, f1, precision, recall)
            for key, value in zip(ANSWER_KEYS, answer_scores):
                totals[key] += value
        if example_id in facts:
            sp_scores = supporting_fact_scores(facts[example_id], example["supporting_facts"])
            for key, value in zip(SP_KEYS, sp_scores):
                totals[key] += value
        if answer_scores is not None and sp_scores is not None:
            joint_precision = answer_scores[2] * sp_scores[2]
            joint_recall = answer_scores[3] * sp_scores[3]
            joint_f1 = (
                2 * joint_precision * joint_recall / (joint_precision + joint_recall)
                if joint_precision + joint_recall > 0
                else 0.0
            )
            for key, value in zip(
                JOINT_KEYS, (answer_scores[0] * sp_scores[0], joint_f1, joint_precision, joint_recall)
            ):
                totals[key] += value
    n = len(gold)
    out: dict[str, float] = {}
    if with_answer:
        out.update({key: totals[key] / with_answer for key in ANSWER_KEYS + JOINT_KEYS})
    out.update({key: totals[key] / n if n else 0.0 for key in SP_KEYS})
    out["num_examples"] = n
    out["num_answer_examples"] = with_answer
    return out


# --------------------------------------------------------------------------------------------------------------------
# Decoding


@torch.no_grad()
def best_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, top_k: int = 20, max_answer_length: int = 30
) -> torch.Tensor:
    """Best (start, end) per row among the ``top_k`` starts × ``top_k`` ends with ``start <= end`` and at most
    ``max_answer_length`` tokens, by ``start_logit + end_logit``. Positions whose start logit is the dtype's minimum
    (the model's masked positions: markers, question, padding) are never part of a span, so a span stays inside one
    title or sentence. Returns ``(batch, 3)`` float: start, end, score; ``(-1, -1, -inf)`` when a row has no valid
    span.

    Example:
        >>> best_spans(torch.tensor([[0.0, 5.0, 1.0]]), torch.tensor([[9.0, 0.0, 4.0]]), top_k=3, max_answer_length=2)
        tensor([[1., 2., 9.]])
    """
    start_logits, end_logits = start_logits.float(), end_logits.float()
    k = min(top_k, start_logits.shape[-1])
    start_scores, starts = start_logits.topk(k, dim=-1)
    end_scores, ends = end_logits.topk(k, dim=-1)
    scores = start_scores[:, :, None] + end_scores[:, None, :]
    length = ends[:, None, :] - starts[:, :, None]
    masked = torch.finfo(torch.float32).min / 2
    valid = (length >= 0) & (length < max_answer_length)
    valid &= (start_scores[:, :, None] > masked) & (end_scores[:, None, :] > masked)
    blocked = (start_logits <= masked).long().cumsum(dim=-1)  # masked positions up to each token
    valid &= blocked.gather(1, ends)[:, None, :] == blocked.gather(1, starts)[:, :, None]
    scores = scores.masked_fill(~valid, float("-inf"))
    best = scores.flatten(1).argmax(dim=-1)
    best_score = scores.flatten(1).gather(1, best[:, None]).squeeze(1)
    start = starts.gather(1, (best // k)[:, None]).squeeze(1).float()
    end = ends.gather(1, (best % k)[:, None]).squeeze(1).float()
    none = torch.isinf(best_score)
    start[none], end[none] = -1.0, -1.0
    return torch.stack([start, end, best_score], dim=-1)


def select_supporting_facts(
    sentence_scores: Sequence[float],
    sentence_paragraph: Sequence[int],
    threshold: float = 0.5,
    top_n_per_paragraph: int | None = None,
    at_least_one: bool = True,
) -> list[int]:
    """Indices of the sentences predicted as supporting facts, in input order.

    ``sentence_scores`` are probabilities. A sentence is chosen when its score is at least ``threshold``; with
    ``top_n_per_paragraph`` only the n best of each paragraph among those. With ``at_least_one`` the best sentence is
    chosen when none passes (every HotpotQA question has evidence).

    Example:
        >>> select_supporting_facts([0.9, 0.7, 0.6, 0.2, 0.8], [0, 0, 0, 1, 1], top_n_per_paragraph=1)
        [0, 4]
    """
    scores = np.asarray(sentence_scores, dtype=np.float64)
    chosen = [i for i in range(len(scores)) if scores[i] >= threshold]
    if top_n_per_paragraph is not None:
        by_paragraph: dict[int, list[int]] = {}
        for i in chosen:
            by_paragraph.setdefault(int(sentence_paragraph[i]), []).append(i)
        chosen = sorted(
            i
            for members in by_paragraph.values()
            for i in sorted(members, key=lambda i: -scores[i])[:top_n_per_paragraph]
        )
    if not chosen and at_least_one and len(scores):
        chosen = [int(scores.argmax())]
    return chosen


# --------------------------------------------------------------------------------------------------------------------
# The paper's diagnostic


def qe_map(
    question_ids: Sequence[Any], scores: Sequence[float], labels: Sequence[int], question_types: Sequence[str]
) -> dict[str, float]:
    """mAP of ranking every question's sentences by question–sentence similarity (table 1 of Caciularu et al.):
    ``map`` over all questions and ``map_<type>`` per question type (questions without evidence are skipped, as in
    :func:`~as2hub.metrics.compute_as2_metrics`).

    Example:
        >>> qe_map(["a", "a", "b", "b"], [0.9, 0.1, 0.2, 0.8], [1, 0, 1, 0], ["yes", "yes", "span", "span"])
        {'map': 0.75, 'map_yes': 1.0, 'map_span': 0.5, 'num_questions': 2}
    """
    overall = compute_as2_metrics(question_ids, scores, labels, k_values=())
    out = {"map": overall["map"]}
    types = np.asarray(question_types, dtype=object)
    ids, score_arr, label_arr = np.asarray(question_ids, dtype=object), np.asarray(scores), np.asarray(labels)
    for name in dict.fromkeys(question_types):
        keep = types == name
        out[f"map_{name}"] = compute_as2_metrics(ids[keep].tolist(), score_arr[keep], label_arr[keep], k_values=())[
            "map"
        ]
    out["num_questions"] = overall["num_questions"]
    return out


__all__ = [
    "answer_exact_match",
    "answer_f1",
    "best_spans",
    "hotpotqa_evaluate",
    "normalize_answer",
    "qe_map",
    "select_supporting_facts",
    "supporting_fact_scores",
]

"""Sentence-level classification quality whose chance level is 0.5 whatever the class balance: ROC AUC and balanced
accuracy at the class prior (the pre-training objectives sample 4 negatives per positive)."""

import numpy as np


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random positive outscores a random negative (ties count half); NaN without both classes."""
    positives, negatives = scores[labels == 1], scores[labels == 0]
    if len(positives) == 0 or len(negatives) == 0:
        return float("nan")
    order = np.argsort(np.concatenate([positives, negatives]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    values = np.concatenate([positives, negatives])
    for value in np.unique(values):  # average ranks over ties
        tied = values == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return float(
        (ranks[: len(positives)].sum() - len(positives) * (len(positives) + 1) / 2) / (len(positives) * len(negatives))
    )


def balanced_accuracy_at_prior(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mean recall of the two classes, calling "positive" the scores (logits) whose probability exceeds the positive
    rate; NaN without both classes."""
    prior = labels.mean()
    if prior in (0.0, 1.0):
        return float("nan")
    predicted = scores > np.log(prior / (1 - prior))
    return float((predicted[labels == 1].mean() + (~predicted[labels == 0]).mean()) / 2)

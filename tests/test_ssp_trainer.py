"""SSPTrainer's held-out classification metrics against scikit-learn, and their chance levels."""

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from as2hub.metrics.classification import balanced_accuracy_at_prior, roc_auc


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_matches_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    labels = (rng.random(300) < 0.2).astype(int)
    scores = np.round(rng.normal(size=300) + labels, 1)  # rounding makes ties
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_balanced_accuracy_is_macro_recall_at_the_prior_threshold(seed):
    rng = np.random.default_rng(seed)
    labels = (rng.random(500) < 0.2).astype(int)
    logits = rng.normal(size=500) + labels - 1.5
    prior = labels.mean()
    predicted = (1 / (1 + np.exp(-logits)) > prior).astype(int)  # the rule, stated in probabilities
    expected = balanced_accuracy_score(labels, predicted)
    assert balanced_accuracy_at_prior(logits, labels) == pytest.approx(expected, abs=1e-9)


def test_a_majority_predictor_is_at_chance_by_both_measures():
    labels = np.array([1] + [0] * 4)
    constant = np.full(5, -3.0)  # "negative" for everything: plain accuracy 0.8
    assert balanced_accuracy_at_prior(constant, labels) == 0.5
    assert roc_auc(constant, labels) == 0.5
    assert np.isnan(balanced_accuracy_at_prior(constant, np.zeros(5, dtype=int)))

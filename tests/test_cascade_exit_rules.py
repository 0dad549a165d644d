"""benchmarks/bench_cascade_exit_rules.py replays exit rules on each candidate's head scores: the fraction rule's
replay is the ranker's cascade, and the margin and threshold rules keep what their definitions say (expected values
stated here, not computed by the replay)."""

import sys
from pathlib import Path

import pytest
from test_cascade import CANDIDATES, QUESTION, cascade_model

from as2hub.inference.ranking import Ranker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_cascade_exit_rules import evaluate, head_scores, play  # noqa: E402

LAYERS = [1, 3, 4]
# Five candidates: the first head's scores, the second head's, the final classifier's.
SCORES = [
    [0.90, 0.20, 0.85, 0.60, 0.05],
    [0.70, 0.50, 0.95, 0.10, 0.00],
    [0.40, 0.30, 0.80, 0.20, 0.10],
]


@pytest.mark.parametrize("drop", [0.3, 0.5])
def test_the_fraction_replay_is_the_rankers_cascade(tokenizers, drop):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)
    ranker = Ranker(model, tokenizer, batch_size=4)
    ranked = ranker.rank(QUESTION, CANDIDATES, cascade_drop=drop)
    order, layer_of = play(head_scores(ranker, QUESTION, CANDIDATES), LAYERS, "fraction", drop)
    assert order == [c.index for c in ranked]
    assert layer_of == [{c.index: c.layer for c in ranked}[i] for i in range(len(CANDIDATES))]
    assert len(set(layer_of)) == 3  # every stage dropped someone: the check is not the full model's order


def test_the_margin_rule_drops_what_falls_more_than_m_below_the_best():
    # Head 1 (best 0.90), margin 0.35: 0.20 and 0.05 leave at layer 1, 0.60 stays (0.30 below). Head 3 among
    # {0, 2, 3} (best 0.95): 0.10 leaves at layer 3; 0 and 2 reach layer 4, where 2 (0.80) ranks above 0 (0.40).
    order, layer_of = play(SCORES, LAYERS, "margin", 0.35)
    assert layer_of == [4, 1, 4, 3, 1]
    assert order == [2, 0, 3, 1, 4]


def test_the_threshold_rule_keeps_the_scores_at_or_above_t_and_always_the_best():
    order, layer_of = play(SCORES, LAYERS, "threshold", 0.55)
    assert layer_of == [4, 1, 4, 3, 1]  # head 1 keeps 0.90, 0.85, 0.60; head 3 keeps 0.70, 0.95
    order, layer_of = play(SCORES, LAYERS, "threshold", 0.99)  # nobody clears it: head 1's best alone goes on
    assert layer_of == [4, 1, 1, 1, 1]
    assert order == [0, 2, 3, 1, 4]


def test_work_is_the_share_of_layers_computed_and_metrics_read_the_cascades_order():
    cache = [("q1", SCORES, [0, 0, 1, 0, 0]), ("q2", SCORES, [1, 0, 0, 0, 0])]
    per_q, work = evaluate(cache, LAYERS, "margin", 0.35)
    assert work == pytest.approx((4 + 1 + 4 + 3 + 1) / 20)
    assert per_q["q1"]["map"] == 1.0  # candidate 2 first
    assert per_q["q2"]["map"] == pytest.approx(0.5)  # candidate 0 second
    _, full_work = evaluate(cache, LAYERS, "fraction", 0.0)
    assert full_work == 1.0

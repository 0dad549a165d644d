"""HotpotQA metrics, span decoding, supporting-fact selection and the QE mAP, against values computed by hand."""

import math

import pytest
import torch

from as2hub.metrics.hotpotqa import (
    answer_exact_match,
    answer_f1,
    best_spans,
    hotpotqa_evaluate,
    normalize_answer,
    qe_map,
    select_supporting_facts,
    supporting_fact_scores,
)


def test_squad_normalisation():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An apple, a pear and THE plum.") == "apple pear and plum"
    assert normalize_answer("theatre") == "theatre"  # articles are whole words only


def test_answer_f1_by_hand():
    # "big red dog" vs "red dog": 2 common tokens, precision 2/3, recall 1, F1 0.8.
    f1, precision, recall = answer_f1("the big red dog", "a red dog")
    assert (precision, recall) == pytest.approx((2 / 3, 1.0))
    assert f1 == pytest.approx(0.8)
    assert answer_exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert answer_exact_match("Eiffel", "Eiffel Tower") == 0.0
    assert answer_f1("no", "no") == (1.0, 1.0, 1.0)
    # yes / no / noanswer only match themselves, even when tokens overlap.
    assert answer_f1("yes", "yes it is") == (0.0, 0.0, 0.0)
    assert answer_f1("no answer here", "no") == (0.0, 0.0, 0.0)
    assert answer_f1("noanswer", "no answer") == (0.0, 0.0, 0.0)
    assert answer_f1("Paris", "London") == (0.0, 0.0, 0.0)


def test_supporting_fact_scores_by_hand():
    # predicted {(P,0),(P,1)}, gold {(P,0),(T,1)}: tp 1, fp 1, fn 1.
    assert supporting_fact_scores([["P", 0], ["P", 1]], [["P", 0], ["T", 1]]) == (0.0, 0.5, 0.5, 0.5)
    assert supporting_fact_scores([["A", 0]], [["A", 0]]) == (1.0, 1.0, 1.0, 1.0)
    assert supporting_fact_scores([], [["A", 0]]) == (0.0, 0.0, 0.0, 0.0)
    em, f1, precision, recall = supporting_fact_scores([["B", 2]], [["B", 2], ["C", 0]])
    assert (em, precision, recall) == (0.0, 1.0, 0.5) and f1 == pytest.approx(2 / 3)


GOLD = [
    {"_id": "1", "answer": "Eiffel Tower", "supporting_facts": [["Paris", 0], ["Tower", 1]]},
    {"_id": "2", "answer": "yes", "supporting_facts": [["A", 0]]},
    {"_id": "3", "answer": "1990", "supporting_facts": [["B", 2], ["C", 0]]},
]
PREDICTION = {
    "answer": {"1": "the eiffel tower!", "2": "no"},  # "3" has no answer prediction: no joint score
    "sp": {"1": [["Paris", 0], ["Paris", 1]], "2": [["A", 0]], "3": [["B", 2]]},
}


def test_official_metrics_by_hand():
    m = hotpotqa_evaluate(PREDICTION, GOLD)
    # Answers: example 1 exact (1, 1, 1, 1), example 2 yes vs no (0), example 3 missing (0); over 3 examples.
    assert (m["em"], m["f1"], m["prec"], m["recall"]) == pytest.approx((1 / 3,) * 4)
    # Supporting facts: (EM, F1, P, R) = (0, .5, .5, .5), (1, 1, 1, 1), (0, 2/3, 1, .5).
    assert m["sp_em"] == pytest.approx(1 / 3)
    assert m["sp_f1"] == pytest.approx((0.5 + 1 + 2 / 3) / 3)
    assert m["sp_prec"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert m["sp_recall"] == pytest.approx((0.5 + 1 + 0.5) / 3)
    # Joint: example 1 P = 1 * .5, R = 1 * .5 -> F1 .5, EM 0; example 2: P = R = 0; example 3: none.
    assert m["joint_em"] == 0.0
    assert (m["joint_f1"], m["joint_prec"], m["joint_recall"]) == pytest.approx((0.5 / 3,) * 3)
    assert m["num_examples"] == 3 and m["num_answer_examples"] == 3


def test_examples_without_an_answer_count_for_supporting_facts_only():
    gold = [{"_id": "1", "answer": "", "supporting_facts": [["A", 0], ["A", 1]]}]
    m = hotpotqa_evaluate({"answer": {"1": ""}, "sp": {"1": [["A", 0]]}}, gold)
    assert m["sp_prec"] == 1.0 and m["sp_recall"] == 0.5 and m["sp_f1"] == pytest.approx(2 / 3)
    assert "em" not in m and "joint_f1" not in m and m["num_answer_examples"] == 0
    mixed = hotpotqa_evaluate(
        {"answer": {"1": "", "2": "x"}, "sp": {"1": [["A", 0]], "2": [["B", 0]]}},
        gold + [{"_id": "2", "answer": "x", "supporting_facts": [["B", 0]]}],
    )
    assert mixed["em"] == 1.0 and mixed["joint_em"] == 1.0  # over the one example with an answer
    assert mixed["sp_em"] == 0.5  # over both


def test_best_spans_by_hand():
    lowest = torch.finfo(torch.float32).min
    start = torch.tensor([[0.0, 5.0, 1.0, lowest], [lowest, lowest, lowest, lowest]])
    end = torch.tensor([[9.0, 0.0, 4.0, lowest], [lowest, lowest, lowest, lowest]])
    # Row 0: best start 1 (5) + end 0 (9) is invalid (end < start); (1, 2) = 9, (2, 2) = 5, (0, 0) = 9 too: the
    # argmax keeps the first best pair in top-k order, start 1 before start 0.
    spans = best_spans(start, end, top_k=4, max_answer_length=2)
    assert spans[0].tolist() == [1.0, 2.0, 9.0]
    assert spans[1, :2].tolist() == [-1.0, -1.0] and math.isinf(spans[1, 2].item())  # nothing valid
    # With spans of one token at most, (0, 0) = 9 wins over (1, 2).
    assert best_spans(start, end, top_k=4, max_answer_length=1)[0].tolist() == [0.0, 0.0, 9.0]
    # A span never crosses a masked position (a marker between two sentences): (0, 3) = 10 is refused.
    start = torch.tensor([[6.0, lowest, 1.0, 0.0]])
    end = torch.tensor([[0.0, lowest, 0.0, 4.0]])
    assert best_spans(start, end, top_k=4, max_answer_length=5)[0].tolist() == [0.0, 0.0, 6.0]
    start[0, 0] = -3.0  # now (0, 0) = -3 loses to (2, 3) = 5
    assert best_spans(start, end, top_k=4, max_answer_length=5)[0].tolist() == [2.0, 3.0, 5.0]


def test_select_supporting_facts():
    scores, paragraphs = [0.9, 0.7, 0.6, 0.2, 0.8], [0, 0, 0, 1, 1]
    assert select_supporting_facts(scores, paragraphs) == [0, 1, 2, 4]
    assert select_supporting_facts(scores, paragraphs, threshold=0.75) == [0, 4]
    assert select_supporting_facts(scores, paragraphs, top_n_per_paragraph=2) == [0, 1, 4]
    assert select_supporting_facts(scores, paragraphs, threshold=0.0, top_n_per_paragraph=1) == [0, 4]
    assert select_supporting_facts([0.1, 0.3], [0, 0]) == [1]  # at least one
    assert select_supporting_facts([0.1, 0.3], [0, 0], at_least_one=False) == []


def test_qe_map_per_type_by_hand():
    ids = ["a", "a", "a", "b", "b", "c", "c"]
    scores = [0.9, 0.5, 0.1, 0.2, 0.8, 0.3, 0.4]
    labels = [0, 1, 1, 1, 0, 0, 0]  # "c" has no evidence: skipped
    types = ["span", "span", "span", "yes", "yes", "no", "no"]
    # "a": positives at ranks 2 and 3 -> AP = (1/2 + 2/3) / 2 = 7/12; "b": positive at rank 2 -> AP = 1/2.
    result = qe_map(ids, scores, labels, types)
    assert result["map_span"] == pytest.approx(7 / 12)
    assert result["map_yes"] == pytest.approx(0.5)
    assert result["map_no"] == 0.0
    assert result["map"] == pytest.approx((7 / 12 + 0.5) / 2)
    assert result["num_questions"] == 2

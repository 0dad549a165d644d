"""``exact_top_margin`` / :class:`ExactTop`: a quantized ranker's two best candidates scored again in fp32 where
their scores nearly tie (:mod:`as2hub.inference.ranking`).

What is checked, and against what: the candidates scored again are exactly those the definition names (each question's
two best by the quantized scores, among the full model's, whose logits lie closer than the margin; the gaps computed
here in numpy from the plain int8 ranker's scores), their scores are the fp32 ranker's and every other score the plain
int8 ranker's, bit for bit; a margin of 0 changes nothing and an infinite one re-scores every question; the checkpoint
path (``from_pretrained``) on BERT-style and RoBERTa tokenizers, contextual and pairwise; the cascade (only the
survivors, which the full model scored); the errors.
"""

import math

import numpy as np
import pytest
import torch
from test_backends import WEIGHT_STD, spread_tiny_ranker
from test_cascade import CANDIDATES, CONTEXTS, cascade_model

from as2hub.inference import ExactTop, Ranker
from as2hub.inference.int8 import quantize_encoder

# Three questions of different sizes (1 candidate: nothing to compare), the same candidate pool.
QUESTIONS = [
    ("how does the garbage collector find reference cycles?", CANDIDATES),
    ("what precision do integers have?", CANDIDATES[3:8]),
    ("are strings mutable?", CANDIDATES[1:2]),
]


def rank_all(ranker, contextual, cascade_drop=None):
    return ranker.rank_many(
        [q for q, _ in QUESTIONS],
        [c for _, c in QUESTIONS],
        [CONTEXTS[: len(c)] for _, c in QUESTIONS] if contextual else None,
        cascade_drop=cascade_drop,
    )


def by_index(ranked) -> dict[int, float]:
    return {candidate.index: candidate.score for candidate in ranked}


def logit(p: float) -> float:
    return float(np.log(p) - np.log1p(-p))


def near_ties(plain, margin) -> list[set[int]]:
    """Per question, the candidates the definition re-scores: its two best plain scores where their logits lie within
    ``margin`` (written here from the docstring, apart from ExactTop.rescore)."""
    out = []
    for ranked in plain:
        scores = sorted(((c.score, c.index) for c in ranked), reverse=True)
        tie = len(scores) >= 2 and logit(scores[0][0]) - logit(scores[1][0]) < margin
        out.append({scores[0][1], scores[1][1]} if tie else set())
    return out


# fp32 scores of a pair in another batch (the two re-scored alone against all of a question's): Ranker's stated bound
FP32_BATCH_ABS = 1e-6


def check_rescored(got, plain, exact, expected):
    """The ``expected`` candidates carry the fp32 ranker's scores (within its batch bound), all others the plain
    ranker's, bit for bit."""
    for question, (g, p, e, chosen) in enumerate(zip(got, plain, exact, expected)):
        g, p, e = by_index(g), by_index(p), by_index(e)
        assert g.keys() == p.keys()
        for index, score in g.items():
            if index in chosen:
                assert abs(score - e[index]) <= FP32_BATCH_ABS and score != p[index], (question, index, score, chosen)
            else:
                assert score == p[index], (question, index, score, p[index], chosen)


@pytest.mark.parametrize(
    "backbone, contextual", [("bert", True), ("roberta", False), ("electra", False)], ids=lambda v: str(v)
)
def test_from_pretrained_rescores_exactly_the_near_ties_with_fp32(stock_checkpoint, tmp_path, backbone, contextual):
    folder = spread_tiny_ranker(
        stock_checkpoint, tmp_path, backbone, contextual, export=False, std=WEIGHT_STD["onnx-int8"], min_spread=0.075
    )
    plain = rank_all(Ranker.from_pretrained(folder, backend="torch-int8", unpadded=True), contextual)
    exact = rank_all(Ranker.from_pretrained(folder, unpadded=True), contextual)  # the fp32 reference's own scores
    gaps = sorted(logit(ranked[0].score) - logit(ranked[1].score) for ranked in plain if len(ranked) >= 2)
    assert len(gaps) == 2 and gaps[0] < gaps[1], gaps  # two questions with two candidates or more
    # a margin between the two questions' gaps re-scores the nearer one only; 0 nothing; inf both
    for margin in (0.0, (gaps[0] + gaps[1]) / 2, math.inf):
        ranker = Ranker.from_pretrained(folder, backend="torch-int8", unpadded=True, exact_top_margin=margin)
        assert ranker.exact_top.reference.backend == "torch" and ranker.exact_top.margin == margin
        expected = near_ties(plain, margin)
        assert sum(map(len, expected)) == {0.0: 0, math.inf: 4}.get(margin, 2)
        got = rank_all(ranker, contextual)
        check_rescored(got, plain, exact, expected)
        for g, e, chosen in zip(got, exact, expected):  # the two re-scored come in fp32's order
            if chosen:
                assert [c.index for c in g[:2]] == [c.index for c in e if c.index in chosen][:2]


def test_the_cascade_rescores_its_two_best_survivors(tokenizers):
    """Built directly (``Ranker(..., exact_top=ExactTop(margin, reference))``): with the cascade only candidates the full
    model scored are compared and scored again, the dropped keep their head's score."""
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)
    fp32, _ = cascade_model(tokenizers, "bert", contextual=False)
    quantize_encoder(model)
    plain = rank_all(Ranker(model, tokenizer, unpadded=True), False, cascade_drop=0.4)
    reference = Ranker(fp32, tokenizer, unpadded=True)
    got = rank_all(Ranker(model, tokenizer, unpadded=True, exact_top=ExactTop(math.inf, reference)), False, 0.4)
    exact = rank_all(reference, False)
    depth = model.config.num_hidden_layers
    expected = []
    for ranked in plain:
        survivors = [c for c in ranked if c.layer == depth]
        expected.append({c.index for c in survivors[:2]} if len(survivors) >= 2 else set())
    assert sum(map(len, expected)) == 4 and any(c.layer < depth for ranked in plain for c in ranked)
    check_rescored(got, plain, exact, expected)


def test_fp32_needs_no_reference_and_bad_margins_are_refused(stock_checkpoint, tmp_path):
    folder = spread_tiny_ranker(stock_checkpoint, tmp_path, "bert", False, export=False)
    assert Ranker.from_pretrained(folder, exact_top_margin=0.1).exact_top is None  # fp32 already
    for margin in (-0.1, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="exact_top_margin must be a number of logits >= 0"):
            Ranker.from_pretrained(folder, backend="torch-int8", exact_top_margin=margin)
    with pytest.raises(ValueError, match="exact_top_margin"):
        ExactTop(-1.0, None)
    # scores of exactly 0 or 1 (a saturated sigmoid) compare as infinite logits: no error, nothing re-scored
    ranker = Ranker.from_pretrained(folder, backend="torch-int8", exact_top_margin=0.1)
    scores, layers = [1.0, 1.0, 0.0], [ranker.model.config.num_hidden_layers] * 3
    assert ranker.exact_top.rescore((["q"] * 3, ["a", "b", "c"], None), [[0, 1, 2]], scores, layers, layers[0]) == 0
    assert scores == [1.0, 1.0, 0.0]
    assert torch.is_tensor(ranker.score_pairs(["q"], ["a"]))  # score_pairs: the backend's scores, untouched

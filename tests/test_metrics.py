"""Tests for the AS2 ranking metrics (as2hub.metrics)."""

from __future__ import annotations

import math
import socket
import time
from types import SimpleNamespace

import numpy as np
import pytest

from as2hub.metrics import METRIC_PATH, compute_as2_metrics, make_compute_metrics
from as2hub.metrics import as2_ranking as as2_ranking_module

METRIC_KEYS_135 = ["map", "mrr", "p@1", "hit@1", "ndcg@1", "hit@3", "ndcg@3", "hit@5", "ndcg@5"]


# ----------------------------------------------------------------------------------------------------------------
# Hand-computed example
# ----------------------------------------------------------------------------------------------------------------


def _hand_example():
    # q1: ranked by score -> labels [0, 0, 1, 1]: correct at ranks 3 and 4.
    # q2: ranked by score -> labels [1, 1, 0]: perfect ranking.
    # q3: no correct candidate -> skipped.
    # Rows are interleaved on purpose: grouping must not rely on contiguity.
    rows = [
        ("q1", 0.1, 1),
        ("q2", 0.7, 1),
        ("q1", 0.9, 0),
        ("q3", 0.3, 0),
        ("q2", 0.2, 0),
        ("q1", 0.5, 0),
        ("q3", 0.8, 0),
        ("q2", 0.4, 1),
        ("q1", 0.3, 1),
    ]
    qids, scores, labels = (list(col) for col in zip(*rows, strict=True))
    return qids, scores, labels


def test_hand_computed_example():
    qids, scores, labels = _hand_example()
    out = compute_as2_metrics(qids, scores, labels, k_values=(1, 3, 5))

    ap_q1 = (1 / 3 + 2 / 4) / 2  # precision@3 = 1/3, precision@4 = 2/4
    idcg_two = 1.0 + 1.0 / math.log2(3)  # ideal: two correct answers on top
    expected = {
        "map": (ap_q1 + 1.0) / 2,  # = 17/24
        "mrr": (1 / 3 + 1.0) / 2,
        "p@1": 0.5,
        "hit@1": 0.5,
        "hit@3": 1.0,
        "hit@5": 1.0,
        "ndcg@1": (0.0 + 1.0) / 2,
        "ndcg@3": ((1.0 / math.log2(4)) / idcg_two + 1.0) / 2,
        "ndcg@5": ((1.0 / math.log2(4) + 1.0 / math.log2(5)) / idcg_two + 1.0) / 2,
    }
    assert list(out) == METRIC_KEYS_135 + ["num_questions", "num_skipped_no_positive"]
    for key, value in expected.items():
        assert out[key] == pytest.approx(value, abs=1e-12), key
    assert out["map"] == pytest.approx(17 / 24, abs=1e-12)
    assert out["num_questions"] == 2
    assert out["num_skipped_no_positive"] == 1
    assert all(isinstance(out[k], float) for k in METRIC_KEYS_135)
    assert isinstance(out["num_questions"], int) and isinstance(out["num_skipped_no_positive"], int)


def test_default_keys_and_monotone_invariance():
    qids, scores, labels = _hand_example()
    out = compute_as2_metrics(qids, scores, labels)
    for k in (1, 3, 5, 10):
        assert f"hit@{k}" in out and f"ndcg@{k}" in out
    # Any strictly increasing transform of the scores gives the same metrics.
    logits = [math.log(s / (1 - s)) for s in scores]
    assert compute_as2_metrics(qids, logits, labels) == out


def test_tie_rule_is_stable_order_of_appearance():
    # Equal scores: the candidate that appears first in the input is ranked first.
    wrong_first = compute_as2_metrics(["q", "q"], [0.5, 0.5], [0, 1], k_values=(1, 3))
    assert wrong_first["p@1"] == 0.0 and wrong_first["mrr"] == 0.5 and wrong_first["map"] == 0.5
    assert wrong_first["ndcg@3"] == pytest.approx(1.0 / math.log2(3))
    right_first = compute_as2_metrics(["q", "q"], [0.5, 0.5], [1, 0], k_values=(1, 3))
    assert right_first["p@1"] == 1.0 and right_first["mrr"] == 1.0 and right_first["map"] == 1.0
    # Ties only matter within a question; a higher score still wins.
    assert compute_as2_metrics(["q", "q", "q"], [0.5, 0.5, 0.6], [0, 0, 1])["p@1"] == 1.0


def test_empty_and_all_skipped_are_nan_free():
    empty = compute_as2_metrics([], [], [])
    assert empty["num_questions"] == 0 and empty["num_skipped_no_positive"] == 0
    skipped = compute_as2_metrics(["a", "a", "b"], [0.1, 0.2, 0.3], [0, 0, 0])
    assert skipped["num_questions"] == 0 and skipped["num_skipped_no_positive"] == 2
    for out in (empty, skipped):
        assert set(out) == set(compute_as2_metrics(["a"], [1.0], [1]))
        for key, value in out.items():
            if not key.startswith("num_"):
                assert value == 0.0 and not math.isnan(value), key


def test_accepts_numpy_int_ids_and_bool_labels():
    qids, scores, labels = _hand_example()
    ref = compute_as2_metrics(qids, scores, labels)
    int_ids = np.array([int(q[1:]) for q in qids])
    assert compute_as2_metrics(int_ids, np.array(scores, dtype=np.float64), np.array(labels, dtype=bool)) == ref
    assert compute_as2_metrics(tuple(qids), scores, [float(x) for x in labels]) == ref


def test_fast_on_wikiqa_sized_input():
    rng = np.random.default_rng(0)
    n = 6000
    qids = [f"q{i}" for i in np.sort(rng.integers(0, 600, n))]
    scores, labels = rng.normal(size=n), rng.integers(0, 2, n)
    compute_as2_metrics(qids, scores, labels)  # warm-up
    start = time.perf_counter()
    for _ in range(10):
        compute_as2_metrics(qids, scores, labels)
    assert (time.perf_counter() - start) / 10 < 0.05


# ----------------------------------------------------------------------------------------------------------------
# Cross-check against torchmetrics
# ----------------------------------------------------------------------------------------------------------------


def _random_as2_data(seed: int, num_questions: int = 60):
    rng = np.random.default_rng(seed)
    qids, labels = [], []
    for q in range(num_questions):
        size = int(rng.integers(1, 31))
        kind = rng.choice(["none", "all", "mixed", "mixed", "mixed"])
        if kind == "none":
            y = np.zeros(size, dtype=np.int64)
        elif kind == "all":
            y = np.ones(size, dtype=np.int64)
        else:
            y = (rng.random(size) < rng.uniform(0.05, 0.6)).astype(np.int64)
        qids += [f"Q{seed}-{q}"] * size
        labels.append(y)
    labels = np.concatenate(labels)
    n = labels.size
    perm = rng.permutation(n)  # interleave questions
    qids = [qids[i] for i in perm]
    labels = labels[perm]
    scores = rng.random(n)  # continuous: no ties
    assert np.unique(scores).size == n
    groups: dict[str, int] = {}
    for q, y in zip(qids, labels, strict=True):
        groups[q] = groups.get(q, 0) + int(y)
    num_no_positive = sum(1 for v in groups.values() if v == 0)
    return qids, scores, labels, num_no_positive


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_matches_torchmetrics_on_random_data(seed):
    torch = pytest.importorskip("torch")
    retrieval = pytest.importorskip("torchmetrics.retrieval")
    qids, scores, labels, num_no_positive = _random_as2_data(seed)
    assert num_no_positive > 0
    k_values = (1, 3, 5, 10)
    ours = compute_as2_metrics(qids, scores, labels, k_values=k_values)

    codes = {q: i for i, q in enumerate(dict.fromkeys(qids))}
    indexes = torch.tensor([codes[q] for q in qids], dtype=torch.long)
    preds = torch.tensor(scores, dtype=torch.float64)
    target = torch.tensor(labels, dtype=torch.long)
    reference_metrics = {
        "map": retrieval.RetrievalMAP(empty_target_action="skip"),
        "mrr": retrieval.RetrievalMRR(empty_target_action="skip"),
        "p@1": retrieval.RetrievalPrecision(top_k=1, empty_target_action="skip"),
    }
    for k in k_values:
        reference_metrics[f"hit@{k}"] = retrieval.RetrievalHitRate(top_k=k, empty_target_action="skip")
        reference_metrics[f"ndcg@{k}"] = retrieval.RetrievalNormalizedDCG(top_k=k, empty_target_action="skip")
    for key, metric in reference_metrics.items():
        expected = float(metric(preds, target, indexes=indexes))
        assert ours[key] == pytest.approx(expected, abs=1e-6), key

    assert ours["num_skipped_no_positive"] == num_no_positive
    assert ours["num_questions"] == len(codes) - num_no_positive
    assert ours["p@1"] == ours["hit@1"] == ours["ndcg@1"]


# ----------------------------------------------------------------------------------------------------------------
# evaluate integration
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch):
    """Offline env vars plus a hard guard: any attempt to open a network connection fails the test."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")

    def _no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)


def test_metric_path_points_to_module_file():
    import os

    assert os.path.isabs(METRIC_PATH) and os.path.isfile(METRIC_PATH)
    assert os.path.samefile(METRIC_PATH, as2_ranking_module.__file__)


def test_evaluate_load_from_file_offline(offline, tmp_path):
    evaluate = pytest.importorskip("evaluate")
    metric = evaluate.load(METRIC_PATH, cache_dir=str(tmp_path))
    assert type(metric).__name__ == "AS2Ranking"
    assert "wikiqa" in metric.citation.lower() and "TANDA" in metric.citation

    qids, scores, labels, _ = _random_as2_data(seed=7)
    out = metric.compute(predictions=scores, references=labels, question_ids=qids, k_values=(1, 3, 5, 10))
    # The evaluate wrapper stores predictions as float32: compare with the pure function on the same values.
    expected = compute_as2_metrics(qids, np.asarray(scores, dtype=np.float32), labels, k_values=(1, 3, 5, 10))
    assert out.keys() == expected.keys()
    for key in expected:
        assert out[key] == pytest.approx(expected[key], abs=1e-12), key

    # Hand example, incremental add_batch, custom k and integer question ids.
    hq, hs, hl = _hand_example()
    metric.add_batch(predictions=hs[:4], references=hl[:4], question_ids=hq[:4])
    metric.add_batch(predictions=hs[4:], references=hl[4:], question_ids=hq[4:])
    out = metric.compute(k_values=(1, 3, 5))
    assert out["map"] == pytest.approx(17 / 24, abs=1e-6)
    assert out["num_questions"] == 2 and out["num_skipped_no_positive"] == 1
    out_int = metric.compute(predictions=hs, references=hl, question_ids=[int(q[1:]) for q in hq], k_values=(1, 3, 5))
    assert out_int == out

    with pytest.raises(ValueError, match="binary"):
        metric.compute(predictions=[0.1, 0.2], references=[2, 0], question_ids=["a", "a"])


# ----------------------------------------------------------------------------------------------------------------
# Trainer compute_metrics
# ----------------------------------------------------------------------------------------------------------------


def test_make_compute_metrics_logit_shapes():
    qids, scores, labels = _hand_example()
    expected = compute_as2_metrics(qids, scores, labels)
    logits = np.log(np.asarray(scores) / (1 - np.asarray(scores))).astype(np.float32)
    fn = make_compute_metrics(qids)

    # (n,) and (n, 1): the single logit is the score.
    assert fn(SimpleNamespace(predictions=logits, label_ids=np.asarray(labels))) == expected
    assert fn(SimpleNamespace(predictions=logits[:, None], label_ids=np.asarray(labels)[:, None])) == expected
    # (n, 2): two-class logits, ranked like softmax[:, 1].
    two = np.stack([np.zeros_like(logits) + 0.3, logits + 0.3], axis=1)
    assert fn((two, np.asarray(labels))) == expected
    # Model returning extra outputs: predictions is a tuple, logits first.
    assert fn(SimpleNamespace(predictions=(two, np.zeros((len(qids), 4))), label_ids=np.asarray(labels))) == expected

    # Custom score_fn and k_values.
    fn_custom = make_compute_metrics(qids, score_fn=lambda p: -p[:, 0], k_values=(1,))
    assert fn_custom((np.stack([-logits, logits], axis=1), labels)) == compute_as2_metrics(
        qids, scores, labels, k_values=(1,)
    )


def test_make_compute_metrics_softmax_equivalence_random():
    rng = np.random.default_rng(3)
    qids, _, labels, _ = _random_as2_data(seed=3)
    logits = rng.normal(scale=3.0, size=(len(qids), 2))
    shifted = logits - logits.max(axis=1, keepdims=True)
    prob1 = np.exp(shifted[:, 1]) / np.exp(shifted).sum(axis=1)
    out = make_compute_metrics(qids)(SimpleNamespace(predictions=logits, label_ids=labels))
    expected = compute_as2_metrics(qids, prob1, labels)
    for key in expected:
        assert out[key] == pytest.approx(expected[key], abs=1e-12), key


def test_make_compute_metrics_with_transformers_eval_prediction():
    trainer_utils = pytest.importorskip("transformers.trainer_utils")
    qids, scores, labels = _hand_example()
    pred = trainer_utils.EvalPrediction(predictions=np.asarray(scores)[:, None], label_ids=np.asarray(labels))
    assert make_compute_metrics(qids)(pred) == compute_as2_metrics(qids, scores, labels)


def test_make_compute_metrics_errors():
    qids, scores, labels = _hand_example()
    fn = make_compute_metrics(qids)
    with pytest.raises(ValueError, match=r"built with 9 question ids.*8 predictions.*aligned"):
        fn((np.asarray(scores[:-1]), np.asarray(labels[:-1])))
    with pytest.raises(ValueError, match=r"shape \(9, 3\).*score_fn"):
        fn((np.zeros((9, 3)), np.asarray(labels)))
    with pytest.raises(ValueError, match="batch_eval_metrics"):
        fn((np.asarray(scores), np.asarray(labels)), compute_result=True)
    with pytest.raises(ValueError, match="binary"):
        fn((np.asarray(scores), np.full(9, -100)))


# ----------------------------------------------------------------------------------------------------------------
# Input validation
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qids", "scores", "labels", "pattern"),
    [
        (["a", "a", "b"], [0.1, 0.2], [0, 1, 1], r"equal lengths.*question_ids=3, scores=2, labels=3"),
        (["a", "a"], [0.1, 0.2], [0, 1, 1], r"equal lengths.*question_ids=2, scores=2, labels=3"),
        (["a", "a", "b"], [0.1, 0.2, 0.3], [0, 2, 1], r"binary.*value\(s\) \[2\].*index 1"),
        (["a", "a"], [0.1, 0.2], [-100, 1], r"binary.*-100"),
        (["a", "a"], [0.1, float("nan")], [0, 1], r"NaN.*index 1"),
        (["a", "a"], [[0.1, 0.2], [0.3, 0.4]], [0, 1], r"1-D.*\(2, 2\).*make_compute_metrics"),
        (["a", "a"], ["x", "y"], [0, 1], r"real numbers"),
        ("ab", [0.1, 0.2], [0, 1], r"not a single string"),
    ],
)
def test_bad_input_raises_helpful_value_error(qids, scores, labels, pattern):
    with pytest.raises(ValueError, match=pattern):
        compute_as2_metrics(qids, scores, labels)


@pytest.mark.parametrize("k_values", [(0,), (1, -3), (1.5,), (True,)])
def test_bad_k_values(k_values):
    with pytest.raises(ValueError, match="k_values must contain positive integers"):
        compute_as2_metrics(["a"], [0.1], [1], k_values=k_values)


def test_bm25_matches_a_hand_computation():
    from as2hub.metrics import bm25_scores

    candidates = ["the cat sat", "a dog ran far away", "the cat and the dog"]
    questions = ["cat dog"] * 3
    # N = 3 distinct candidates, average length 13 / 3; df(cat) = 2, df(dog) = 2 -> idf = log(1 + 1.5 / 2.5).
    idf = math.log(1 + 1.5 / 2.5)
    k1, b, average = 1.2, 0.75, 13 / 3

    def term(tf, length):
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))

    expected = [term(1, 3), term(1, 5), term(1, 5) + term(1, 5)]
    assert bm25_scores(questions, candidates) == pytest.approx(expected)


def test_expected_random_metrics_match_the_closed_form():
    from as2hub.metrics import expected_random_metrics

    # One question, one correct among n: E[reciprocal rank] = E[AP] = H_n / n, P@1 = 1 / n.
    n = 4
    metrics = expected_random_metrics(["q"] * n, [1] + [0] * (n - 1), samples=4000)
    harmonic = sum(1 / k for k in range(1, n + 1)) / n
    assert metrics["map"] == pytest.approx(harmonic, abs=0.02)
    assert metrics["mrr"] == pytest.approx(harmonic, abs=0.02)
    assert metrics["p@1"] == pytest.approx(1 / n, abs=0.03)


def test_expected_random_metrics_read_each_column_once():
    """A ``datasets`` column is read row by row on every pass: 200 samples must not read it 200 times (the demo's
    ranking table spent 9 s there)."""
    from as2hub.metrics import expected_random_metrics

    class Column:
        def __init__(self, values):
            self.values, self.passes = values, 0

        def __len__(self):
            return len(self.values)

        def __iter__(self):
            self.passes += 1
            return iter(self.values)

    ids, labels = Column(["a", "a", "b", "b"]), Column([1, 0, 0, 1])
    metrics = expected_random_metrics(ids, labels, samples=50)
    assert (ids.passes, labels.passes) == (1, 1)
    assert metrics["num_questions"] == 2 and 0.5 < metrics["map"] < 1.0

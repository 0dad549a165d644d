"""Which pairs share a forward pass (issue 51, item 2): the cost model's batches, and rankers that use them.

Expected batches are stated by hand from the cost ``call_cost + rows x padded longest`` or found by brute force over
every partition of the rows (an independent search, not the dynamic programme under test); expected scores come from
the same ranker with the old fixed batches (``call_cost=inf``) and from each pair's forward pass alone.
"""

import random

import pytest
import torch
from helpers import needs_onnx
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model, forward_scores

from as2hub.inference.backends import cpu_features
from as2hub.inference.batching import (
    DEFAULT_CALL_COST,
    call_cost_kind,
    default_call_cost,
    length_batches,
    scoring_threads,
)
from as2hub.inference.ranking import Ranker

INF = float("inf")
# fp32 scores of the same rows in other batch compositions (the tiny BERT's rescaled heads amplify rounding): the
# largest change seen, per CPU flag set: AVX2 EPYC below 1e-5; AMX Xeon 1.06e-5 (2026-11-28: oneDNN's AVX-512
# kernels differ by shape); ONNX Runtime on the AVX-512 EPYC (avx512_bf16, no AMX) 1.78e-5 (2026-11-29: MLAS's
# AVX-512 GEMM blocks by shape too). The stated bound per set:
BATCHING_ABS = {"avx2": 1e-5, "avx512f": 3e-5}


def batching_abs() -> float:
    return BATCHING_ABS["avx512f" if "avx512f" in cpu_features().flags else "avx2"]


def cost(batches, lengths, call_cost, multiple=None):
    def padded(n):
        return -(-n // multiple) * multiple if multiple else n

    return sum(call_cost + len(b) * max(padded(lengths[i]) for i in b) for b in batches)


def set_partitions(items):
    """Every partition of ``items`` into non-empty blocks (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[first], *partition]
        for k in range(len(partition)):
            yield [*partition[:k], [first, *partition[k]], *partition[k + 1 :]]


@pytest.mark.parametrize(
    ("lengths", "max_rows", "call_cost", "multiple", "expected"),
    [
        # sorted 11, 12, 30, 31, 64: two short, two middle, one long (cost 8+24 + 8+62 + 8+64 = 174; all in one: 328)
        ([30, 12, 31, 11, 64], 16, 8, None, [[3, 1], [0, 2], [4]]),
        # a call costs more than the padding it saves: one batch (8 + 5 x 64 = 328 < 2 x 400 + ...)
        ([30, 12, 31, 11, 64], 16, 400, None, [[3, 1, 0, 2, 4]]),
        # the old fixed batches: max_rows sorted rows each, whatever the padding
        ([30, 12, 31, 11, 64], 2, INF, None, [[3, 1], [0, 2], [4]]),
        ([5, 9, 7, 3, 1, 2, 8], 3, INF, None, [[4, 5, 3], [0, 2, 6], [1]]),
        # free calls: equal lengths still share one (a tie goes to the longer last batch), others go alone
        ([7, 7, 7], 16, 0, None, [[0, 1, 2]]),
        ([7, 3, 7], 16, 0, None, [[1], [0, 2]]),
        # rounded up to a multiple of 8, lengths 9, 15, 16 are all 16: one batch even at no call cost
        ([16, 9, 15], 16, 0, 8, [[1, 2, 0]]),
        # max_rows caps a batch even where one batch would cost least; of the equal-cost cuts, the last batch is full
        ([4, 4, 4, 4, 4], 2, 100, None, [[0], [1, 2], [3, 4]]),
        ([], 4, 8, None, []),
    ],
)
def test_length_batches_are_the_stated_ones(lengths, max_rows, call_cost, multiple, expected):
    assert length_batches(lengths, max_rows, call_cost, multiple) == expected


@pytest.mark.parametrize("seed", range(6))
def test_length_batches_cost_the_least_of_every_partition(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(3, 60) for _ in range(rng.randint(1, 7))]
    max_rows = rng.randint(1, 4)
    call_cost = rng.choice([0, 3, 10, 40])
    multiple = rng.choice([None, 8])
    got = length_batches(lengths, max_rows, call_cost, multiple)
    assert sorted(i for b in got for i in b) == list(range(len(lengths)))  # every row once
    assert all(1 <= len(b) <= max_rows for b in got)
    assert all([lengths[i] for i in b] == sorted(lengths[i] for i in b) for b in got)  # shortest first
    best = min(
        cost(p, lengths, call_cost, multiple)
        for p in set_partitions(list(range(len(lengths))))
        if all(len(b) <= max_rows for b in p)
    )
    assert cost(got, lengths, call_cost, multiple) == best


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max_rows"):
        length_batches([3], 0, 1)
    with pytest.raises(ValueError, match="call_cost"):
        length_batches([3], 1, -1)


def test_the_default_call_cost_is_the_measured_table():
    # question_batching_avx2.json and question_batching_amx.json: ONNX int8 and torch fp32 16 on 1 thread, 64 on 2;
    # torch bf16 (AMX) 256 on 1 thread, 64 on 2
    assert DEFAULT_CALL_COST == {
        "onnx": {1: 16.0, 2: 64.0},
        "torch": {1: 16.0, 2: 64.0},
        "torch-bf16": {1: 256.0, 2: 64.0},
    }
    assert default_call_cost("cpu", 1) == 16.0  # the kind defaults to torch fp32
    assert default_call_cost("cpu", 2, "onnx") == 64.0
    assert default_call_cost("cpu", 1, "torch-bf16") == 256.0
    assert default_call_cost("cpu", 4) == 128.0  # beyond the table: its last entry (64 on 2) scaled by the threads
    assert default_call_cost("cpu", 8, "torch-bf16") == 256.0
    assert default_call_cost("cuda", 1) == INF and default_call_cost("cuda", 1, "torch-bf16") == INF
    with pytest.raises(ValueError, match="backend kind"):
        default_call_cost("cpu", 1, "openvino")


class CountingModel(torch.nn.Module):
    """Wraps a model and records the shape of every batch it scores."""

    def __init__(self, model):
        super().__init__()
        self.inner = model
        self.shapes = []

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["inner"], name)

    def forward(self, **batch):
        self.shapes.append(tuple(batch["input_ids"].shape))
        return self.inner(**batch)


@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
def test_a_ranker_scores_the_cost_models_batches_and_the_same_scores(tokenizers, contextual):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual)
    contexts = CONTEXTS if contextual else None
    fixed = Ranker(model, tokenizer, batch_size=4, call_cost=INF)
    rows = fixed._rows([QUESTION] * len(CANDIDATES), CANDIDATES, contexts)
    lengths = [len(ids) for ids, _ in rows]
    assert len(set(lengths)) > 3, "degenerate check: the candidates hardly differ in length"
    reference = fixed.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, contexts)
    alone = forward_scores(model, fixed, contexts)[model.config.num_hidden_layers]
    for call_cost in (0, 6, 30, INF):
        counting = CountingModel(model)
        ranker = Ranker(counting, tokenizer, batch_size=4, call_cost=call_cost)
        scores = ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, contexts)
        # the passes are the cost model's batches, padded to a multiple of 8 (torch)
        expected = length_batches(lengths, 4, call_cost, 8)
        assert counting.shapes == [(len(b), -(-max(lengths[i] for i in b) // 8) * 8) for b in expected]
        assert scores.tolist() == pytest.approx(reference.tolist(), abs=batching_abs())
        assert scores.tolist() == pytest.approx(alone, abs=1e-4)  # as in test_cascade: each pair alone, unpadded
    # free calls cut more than costly ones, and the fixed batches are ceil(10 / 4)
    assert len(length_batches(lengths, 4, 0, 8)) > len(length_batches(lengths, 4, 30, 8)) >= 3


def test_a_rankers_default_call_cost_follows_its_threads(tokenizers):
    model, tokenizer = cascade_model(tokenizers, "bert", False, layers=())
    ranker = Ranker(model, tokenizer)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert scoring_threads(model) == 1 and ranker.call_cost == 16.0
        torch.set_num_threads(2)
        assert ranker.call_cost == 64.0
        torch.set_num_threads(1)  # a bf16 model reads the bf16 row (a token costs less next to a call)
        assert call_cost_kind(model.to(torch.bfloat16)) == "torch-bf16"
        assert Ranker(model, tokenizer).call_cost == 256.0
    finally:
        torch.set_num_threads(threads)
        model.float()
    assert Ranker(model, tokenizer, call_cost=5).call_cost == 5.0
    with pytest.raises(ValueError, match="call_cost"):
        Ranker(model, tokenizer, call_cost=-1)


@pytest.mark.parametrize("drop", [0.3, 0.5])
def test_the_cascade_with_cost_model_batches_ranks_as_with_fixed_batches(tokenizers, drop):
    model, tokenizer = cascade_model(tokenizers, "bert", True)
    questions = [QUESTION, "what is a tuple?"]
    candidates = [CANDIDATES, list(reversed(CANDIDATES[:7]))]
    contexts = [CONTEXTS, CONTEXTS[:7]]
    fixed = Ranker(model, tokenizer, batch_size=4, call_cost=INF).rank_many(questions, candidates, contexts, drop)
    for call_cost in (0, 12):
        ranked = Ranker(model, tokenizer, batch_size=4, call_cost=call_cost).rank_many(
            questions, candidates, contexts, drop
        )
        for got, want in zip(ranked, fixed):
            assert [c.layer for c in got] == [c.layer for c in want]
            assert [c.index for c in got] == [c.index for c in want]
            assert [c.score for c in got] == pytest.approx([c.score for c in want], abs=1e-4)


@needs_onnx
def test_an_onnx_rankers_threads_are_its_sessions(tmp_path, tokenizers):
    from as2hub.inference.onnx_export import export_onnx

    model, tokenizer = cascade_model(tokenizers, "bert", False, layers=())
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    export_onnx(tmp_path)
    for threads, expected in ((1, 16.0), (2, 64.0)):
        ranker = Ranker.from_pretrained(str(tmp_path), backend="onnx", num_threads=threads)
        assert scoring_threads(ranker.model) == threads and call_cost_kind(ranker.model) == "onnx"
        assert ranker.call_cost == expected
    # the cost model changes which pairs share a pass, not the scores
    scores = {
        cost: Ranker.from_pretrained(str(tmp_path), backend="onnx", num_threads=1, call_cost=cost, batch_size=4)
        .score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES)
        .tolist()
        for cost in (0, INF)
    }
    assert scores[0] == pytest.approx(scores[INF], abs=batching_abs())
    assert len(scores[0]) == len(CANDIDATES)

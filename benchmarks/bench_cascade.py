"""The layer cascade's speed and accuracy per drop rate, against the same backend without it and against the best
sentence-transformers ``CrossEncoder`` configuration, on the clean WikiQA test set (issue 36).

Every system ranks each of the 237 clean test questions in one call with all of its candidates (what a service
does), tokenization included, ``--threads`` torch / ONNX Runtime threads; systems are interleaved (repeat 1 of all,
then repeat 2, ...) and the best time of each is kept, so a load spike from another process hits them all. Beside
that best against best, each repeat's ratio to the fastest CrossEncoder configuration of the same repeat
(``vs_best_crossencoder_each_repeat``; the table prints its median): a reading less exposed to one lucky repeat.

- ``as2hub <backend>``: ``Ranker.rank(question, candidates)``, the full model;
- ``as2hub <backend> cascade d``: ``Ranker.rank(question, candidates, cascade_drop=d)``: at each cascade head the
  weakest ``d`` of the question's remaining candidates leave; ``work`` is the share of encoder layers computed;
- ``CrossEncoder torch / bf16 / ONNX int8 @b``: ``CrossEncoder.predict`` of the question's pairs at batch ``b`` on the
  same weights as a stock ``BertForSequenceClassification`` (its int8 graph: ``quantize_dynamic``, per tensor), as in
  ``bench_ranking_throughput.py``;
- with ``--torch_compile``: ``as2hub <torch backend> compiled`` (``Ranker.from_pretrained(..., torch_compile=True)``)
  and ``CrossEncoder torch [bf16] compiled`` (its transformers model through ``torch.compile`` with the same options);
- with ``--unpadded``: ``as2hub <torch backend> [compiled] unpadded`` (``Ranker.from_pretrained(..., unpadded=True)``:
  the dense layers on the real tokens only, ``inference/unpadded.py``);
- ``as2hub torch-int8 ...``: its products smoothed by statistics of ``--int8_calibration_questions`` training
  questions (64, drawn with seed 0; ``Ranker.calibrate_int8``, written into the copy the benchmark times);
- with ``--exact_top_margin m``: ``as2hub <backend> ... exact top m`` for each backend other than fp32 ``torch``
  (``Ranker.from_pretrained(..., exact_top_margin=m)``: a question's two best candidates scored again in fp32 where
  their logits lie within ``m``; the fp32 passes count in its time);
- with a CUDA backend (``--backends cuda-fp16,cuda-bf16``): ``CrossEncoder cuda fp16 / bf16`` on the GPU in the same
  precision (compiled too with ``--torch_compile``).

MAP / MRR / P@1 come from each system's order (a cascade's order puts dropped candidates below the survivors); the
change against the same backend's full model has a 95% paired-bootstrap interval over questions.

Usage::

    python benchmarks/bench_cascade.py --model_dir <pairwise MiniLM ranker with cascade heads>   # ~15 min, 1 thread
    python benchmarks/bench_cascade.py --model_dir ... --max_questions 20 --repeats 1 --results /tmp/c.json  # smoke

Writes ``benchmarks/results/cascade.json`` (and ``cascade_frontier.png`` with matplotlib installed).
"""

import argparse
import contextlib
import gc
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ranking_throughput import (  # noqa: E402
    PEER_INT8,
    as2hub_copy,
    cpu_record,
    cross_encoder,
    optimum_available,
    peer_folder,
    use_bf16,
)
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, paired_bootstrap_metrics, write_json  # noqa: E402
from bench_wikiqa_quality import per_question  # noqa: E402

logger = logging.getLogger("bench_cascade")
METRICS = ("map", "mrr", "p@1")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, help="a pairwise MiniLM ranker with cascade heads")
    parser.add_argument("--drops", default="0.3,0.4,0.5,0.6", help="cascade_drop values")
    parser.add_argument("--backends", default="torch,torch-bf16,onnx-int8", help="as2hub backends (those that run)")
    parser.add_argument("--peer_batch_sizes", default="8,16,64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max_questions", type=int, default=None)
    parser.add_argument(
        "--mode",
        choices=("question", "batched"),
        default="question",
        help="question: one call per question (every system); batched: one call for all questions (Ranker.rank_many; "
        "CrossEncoder.predict of every pair), as a service scores concurrent requests",
    )
    parser.add_argument(
        "--torch_compile",
        action="store_true",
        help="also run the torch backends compiled (as2hub: torch_compile=True; CrossEncoder: torch.compile of its "
        "model, the same options)",
    )
    parser.add_argument(
        "--unpadded",
        action="store_true",
        help="also run the torch backends (compiled too, with --torch_compile) with unpadded=True",
    )
    parser.add_argument(
        "--row_attention",
        choices=("auto", "kernel", "sdpa", "both"),
        default="auto",
        help="the unpadded rows' attention on the CPU (unpadded.ROW_ATTENTION; both: each unpadded row again with "
        "PyTorch's kernel, labelled " + "'(PyTorch attention)')",
    )
    parser.add_argument(
        "--interleave",
        choices=("question", "pass"),
        default=None,
        help="question (the default in mode question): each question ranked by every system in turn, the order rotated "
        "per question, each system's time summed over its calls, so that all see the machine in the same state (on a "
        "shared 2-core VM whole passes of different systems drifted 25-50%% apart); pass: each system ranks every "
        "question in one timed pass, the systems one after another (mode batched: one call is the pass)",
    )
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument(
        "--exact_top_margin",
        type=float,
        default=None,
        help="also run each as2hub backend other than fp32 torch with Ranker.from_pretrained(..., exact_top_margin=m): "
        "a question's two best candidates scored again in fp32 where their logits lie within m (labelled 'exact top "
        "m'; the full model only)",
    )
    parser.add_argument(
        "--int8_calibration_questions",
        type=int,
        default=64,
        help="torch-int8: smooth its products with statistics of this many WikiQA training questions (seed 0; 0: "
        "unsmoothed), written into the benchmark's copy of the ranker",
    )
    parser.add_argument("--bootstrap", type=int, default=10000)
    parser.add_argument("--bf16", choices=("auto", "on", "off"), default="auto", help="bf16 rows (auto: bf16 CPUs)")
    parser.add_argument("--work_dir", default="/tmp/as2hub_bench_cascade")
    parser.add_argument("--results", default=str(RESULTS_DIR / "cascade.json"))
    args = parser.parse_args(argv)
    args.drops = [float(d) for d in args.drops.split(",")]
    args.backends = args.backends.split(",")
    args.peer_batch_sizes = [int(b) for b in args.peer_batch_sizes.split(",")]
    if args.interleave is None:
        args.interleave = "question" if args.mode == "question" else "pass"
    if args.interleave == "question" and args.mode != "question":
        raise SystemExit("--interleave question needs --mode question (mode batched ranks every question in one call)")
    return args


def timed_repeat(systems: dict, data: list, interleave: str, repeat: int) -> tuple[dict, dict]:
    """One repeat: (seconds per system, each system's per-question output). ``interleave="pass"``: each system ranks
    ``data`` in one timed call, one system after another; ``"question"``: question by question, every system ranks it
    in turn (the order rotated by one per question and per repeat), each call timed and summed per system."""
    names = list(systems)
    seconds = dict.fromkeys(names, 0.0)
    if interleave == "pass":
        outputs = {}
        for name in names:
            gc.collect()
            start = time.perf_counter()
            outputs[name] = systems[name][3](data)
            seconds[name] = time.perf_counter() - start
        return seconds, outputs
    outputs = {name: [] for name in names}
    gc.collect()
    for i, item in enumerate(data):
        shift = (i + repeat) % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            (result,) = systems[name][3]([item])
            seconds[name] += time.perf_counter() - start
            outputs[name].append(result)
    return seconds, outputs


def questions_of(max_questions, split: str = "test"):
    """[(question_id, question, [candidates], [labels])] of the clean WikiQA ``split``, in file order."""
    from as2hub.data_collators.readers.as2_data import read_wikiqa

    data = read_wikiqa(split, clean=True).dataset
    grouped: dict = {}
    for qid, question, candidate, label in zip(data["question_id"], data["question"], data["candidate"], data["label"]):
        grouped.setdefault(qid, (question, [], []))
        grouped[qid][1].append(candidate)
        grouped[qid][2].append(int(label))
    items = [(qid, q, c, y) for qid, (q, c, y) in grouped.items()]
    return items[:max_questions] if max_questions else items


def order_scores(ranked) -> list[float]:
    """Scores in input order that sort as the ranking does (minus the position): metrics read the system's order."""
    out = [0.0] * len(ranked)
    for position, candidate in enumerate(ranked):
        out[candidate.index] = -float(position)
    return out


def ranked_lists(ranker, items, drop, mode):
    """Per question: (scores in input order that sort as the ranker ranks, the layer that scored each candidate).
    ``mode="question"``: one ``rank`` call per question; ``"batched"``: one ``rank_many`` call for all (as the service
    scores concurrent requests); the drop is decided per question either way."""
    if mode == "question":
        lists = [ranker.rank(q, cands, cascade_drop=drop) for _, q, cands, _ in items]
    else:
        lists = ranker.rank_many([q for _, q, _, _ in items], [c for _, _, c, _ in items], cascade_drop=drop)
    out = []
    for ranked in lists:
        layers = [0] * len(ranked)
        for candidate in ranked:
            layers[candidate.index] = candidate.layer
        out.append((order_scores(ranked), layers))
    return out


def make_systems(args, folders, data) -> dict:
    """name -> (library, backend, drop, fn): ``fn(questions)`` gives per question (scores in input order that sort as
    the system ranks, the layer that scored each candidate or None)."""
    from as2hub.inference.backends import check_runnable
    from as2hub.inference.ranking import Ranker

    systems = {}
    variants = [(backend, False, False) for backend in args.backends]
    torch_backends = [backend for backend in args.backends if not backend.startswith("onnx")]
    if args.torch_compile:  # the torch backends again, compiled (Ranker.from_pretrained(..., torch_compile=True))
        variants += [(backend, True, False) for backend in torch_backends]
    if args.unpadded:  # and unpadded (Ranker.from_pretrained(..., unpadded=True)), eager and compiled
        variants += [(backend, compiled, True) for compiled in (False, True)[: 1 + args.torch_compile]
                     for backend in torch_backends]  # fmt: skip
    if args.unpadded and args.row_attention == "both":  # the unpadded rows again with PyTorch's attention kernel
        variants += [(backend, compiled, "sdpa") for backend, compiled, unpadded in list(variants) if unpadded]
    for backend, compiled, unpadded in variants:
        if backend == "torch-bf16" and not use_bf16(args):
            continue
        label = backend + " compiled" * compiled + " unpadded" * bool(unpadded)
        label += f" {SDPA_LABEL}" * (unpadded == "sdpa")
        try:
            check_runnable(backend)
            options = {"num_threads": args.threads} if backend.startswith("onnx") else {}
            if compiled:
                options["torch_compile"] = True
            if unpadded:
                options["unpadded"] = True
            ranker = Ranker.from_pretrained(folders["as2hub"], backend=backend, max_length=args.max_length, **options)
        except Exception as error:  # noqa: BLE001 - a backend that cannot run here is left out, and said
            logger.warning("backend %s left out: %s", label, error)
            continue

        attention = "sdpa" if unpadded == "sdpa" else None if args.row_attention == "both" else args.row_attention

        def full(items, r=ranker, a=attention):
            with row_attention(a):
                return ranked_lists(r, items, None, args.mode)

        systems[f"as2hub {label}"] = ("as2hub", label, None, full)
        for drop in args.drops:
            try:
                ranker.rank(data[0][1], data[0][2], cascade_drop=drop)
            except Exception as error:  # noqa: BLE001
                logger.warning("as2hub %s cascade left out: %s", label, error)
                break

            def cascade(items, r=ranker, d=drop, a=attention):
                with row_attention(a):
                    return ranked_lists(r, items, d, args.mode)

            systems[f"as2hub {label} cascade {drop}"] = ("as2hub", label, drop, cascade)
        if args.exact_top_margin is not None and backend != "torch":
            exact = Ranker.from_pretrained(folders["as2hub"], backend=backend, max_length=args.max_length,
                                           exact_top_margin=args.exact_top_margin, **options)  # fmt: skip
            exact_label = f"{label} exact top {args.exact_top_margin:g}"

            def exact_full(items, r=exact, a=attention):
                with row_attention(a):
                    return ranked_lists(r, items, None, args.mode)

            systems[f"as2hub {exact_label}"] = ("as2hub", exact_label, None, exact_full)
    # name -> (ONNX graph, dtype, compiled, device, the as2hub backend of the same precision)
    peers = {"CrossEncoder torch": (None, None, False, "cpu", "torch")}
    if use_bf16(args):
        peers["CrossEncoder torch bf16"] = (None, torch.bfloat16, False, "cpu", "torch-bf16")
    for precision, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        if f"cuda-{precision}" in args.backends:  # a GPU run: the peer on the GPU in the same precision
            peers[f"CrossEncoder cuda {precision}"] = (None, dtype, False, "cuda", f"cuda-{precision}")
    if args.torch_compile:  # what a sentence-transformers user can do: torch.compile the model inside (the same
        # precisions as the as2hub torch backends compiled here, and bf16 on a bf16 CPU in any case: the peer's
        # fastest torch precision there, so that a run of torch-int8 alone still meets it)
        peers.update({
            f"{name} compiled": (None, dtype, True, device, same) for name, (_, dtype, _, device, same)
            in list(peers.items()) if same in args.backends or same == "torch-bf16"
        })  # fmt: skip
    if optimum_available():
        peers["CrossEncoder ONNX int8"] = (PEER_INT8, None, False, "cpu", "onnx-int8")
    for name, (graph, dtype, compiled, device, _) in peers.items():
        encoder = cross_encoder(folders["peer"], args, args.threads, graph=graph, dtype=dtype, device=device)
        if compiled:
            compile_peer(encoder)
        for batch in args.peer_batch_sizes:

            def predict(items, e=encoder, b=batch):
                if args.mode == "question":
                    return [(e.predict([[q, c] for c in cands], batch_size=b, show_progress_bar=False).tolist(), None)
                            for _, q, cands, _ in items]  # fmt: skip
                scores = e.predict([[q, c] for _, q, cands, _ in items for c in cands], batch_size=b,
                                   show_progress_bar=False).tolist()  # fmt: skip
                out, start = [], 0
                for _, _, cands, _ in items:
                    out.append((scores[start : start + len(cands)], None))
                    start += len(cands)
                return out

            systems[f"{name} @{batch}"] = ("sentence-transformers", name, None, predict)
    return systems


SDPA_LABEL = "(PyTorch attention)"


@contextlib.contextmanager
def row_attention(mode):
    """``unpadded.ROW_ATTENTION`` set to ``mode`` (``None``: left as it is) while a system ranks."""
    from as2hub.inference import unpadded

    saved = unpadded.ROW_ATTENTION
    unpadded.ROW_ATTENTION = mode or saved
    try:
        yield
    finally:
        unpadded.ROW_ATTENTION = saved


def fp32_reference(runs: list[dict]) -> dict | None:
    """The run every as2hub run's MAP is compared with (``change_vs_fp32``): the full fp32 model, as2hub's ``torch``
    backend where it ran, else CrossEncoder's fp32 torch model at its smallest batch (the same weights, padded pairs)."""
    by_name = {run["system"]: run for run in runs}
    if "as2hub torch" in by_name:
        return by_name["as2hub torch"]
    peers = [run for run in runs if run["system"].startswith("CrossEncoder torch @")]
    return min(peers, key=lambda run: int(run["system"].rsplit("@", 1)[1])) if peers else None


def compile_peer(encoder) -> None:
    """``torch.compile`` the transformers model inside a ``CrossEncoder`` as as2hub compiles (dynamic shapes, frozen
    weights on the CPU: :data:`as2hub.inference.compiled.FREEZING`), then compile it on a batch of 1 and of 2. The
    peer's user sets inductor's config globally (``torch._inductor.config.freezing = True``): so does this process,
    which as2hub's compiled rankers, setting it around their own calls, do not mind."""
    import torch._inductor.config as inductor_config

    from as2hub.inference.compiled import FREEZING

    module = encoder[0]
    if module.model.device.type == "cpu":
        for key, value in FREEZING.items():
            setattr(inductor_config, key, value)
    module.model = torch.compile(module.model, dynamic=True)
    for batch in (1, 2):  # predict's own grad mode: the graphs built here are those its calls reuse
        encoder.predict([["warm up", "the compiled graph"]] * batch, batch_size=batch, show_progress_bar=False)


def vs_best_peer_each_repeat(run: dict, peers: list[dict]) -> list[float]:
    """``run``'s speed over the fastest CrossEncoder configuration of the same repeat, repeat by repeat (from
    ``times_s``). Systems run interleaved, so a repeat's systems share that stretch of the machine's load: a reading
    less exposed to one lucky repeat than the rule's best against best, reported beside it."""
    return [min(peer["times_s"][repeat] for peer in peers) / took for repeat, took in enumerate(run["times_s"])]


def plot(report, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for backend in dict.fromkeys(run["backend"] for run in report["runs"] if run["library"] == "as2hub"):
        runs = sorted((r for r in report["runs"] if r["backend"] == backend), key=lambda r: r["drop"] or 0.0)
        axis.plot([r["pairs_per_s"] for r in runs], [r["map"] for r in runs], "o-", label=f"as2hub {backend}")
        for r in runs:
            axis.annotate(f"{r['drop'] or 0:.1f}", (r["pairs_per_s"], r["map"]), fontsize=7)
    peers = [r for r in report["runs"] if r["library"] != "as2hub"]
    axis.scatter(
        [r["pairs_per_s"] for r in peers], [r["map"] for r in peers], marker="x", color="k", label="CrossEncoder"
    )
    axis.set_xlabel(f"pairs/s (mode {report['settings']['mode']})")
    axis.set_ylabel("test MAP (WikiQA clean)")
    axis.set_title("Layer cascade: speed / MAP per drop rate")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return str(path)


def calibrate_int8(folder: Path, num_questions: int, max_length: int, seed: int = 0) -> dict:
    """Write ``folder``'s int8 calibration (``Ranker.calibrate_int8``) from ``num_questions`` clean WikiQA training
    questions drawn with ``seed``: what the JSON records of it."""
    from as2hub.inference.ranking import Ranker

    train = questions_of(None, "train")
    picked = [train[i] for i in np.random.default_rng(seed).choice(len(train), num_questions, replace=False)]
    questions = [question for _, question, cands, _ in picked for _ in cands]
    candidates = [candidate for _, _, cands, _ in picked for candidate in cands]
    Ranker.from_pretrained(folder, max_length=max_length).calibrate_int8(questions, candidates, save_to=folder)
    return {"split": "train", "questions": num_questions, "pairs": len(questions), "seed": seed}


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    source = Path(args.model_dir)
    if any(backend.startswith("onnx") for backend in args.backends):
        ours = as2hub_copy(source, work / "as2hub")  # a copy with its graphs (as2hub-export-onnx --quantize int8)
    else:
        ours = source
    calibration = None
    if "torch-int8" in args.backends and args.int8_calibration_questions:
        if ours == source:  # never write into the original
            ours = as2hub_copy(source, work / "as2hub", export=False)
        calibration = calibrate_int8(ours, args.int8_calibration_questions, args.max_length)
    folders = {"as2hub": ours, "peer": peer_folder(source, work / "peer")}
    data = questions_of(args.max_questions)
    num_pairs = sum(len(cands) for _, _, cands, _ in data)
    qids = [qid for qid, _, cands, _ in data for _ in cands]
    labels = [y for _, _, _, ys in data for y in ys]
    systems = make_systems(args, folders, data)
    for _, _, _, fn in systems.values():  # warm-up on the first questions: sessions, allocators, caches
        fn(data[:8])
    logger.info("timing %d systems, %d repeats, interleaved per %s", len(systems), args.repeats, args.interleave)
    load = {"start": list(os.getloadavg())}
    times = {name: [] for name in systems}
    outputs = {}
    for repeat in range(args.repeats):
        seconds, results = timed_repeat(systems, data, args.interleave, repeat)
        for name in systems:
            times[name].append(seconds[name])
            outputs.setdefault(name, results[name])
            logger.info("repeat %d %s: %.1f pairs/s (load %.1f)", repeat + 1, name, num_pairs / times[name][-1],
                        os.getloadavg()[0])  # fmt: skip
    load["end"] = list(os.getloadavg())
    config = json.loads((source / "config.json").read_text())
    depth = config["num_hidden_layers"]
    per_q, runs = {}, []
    for name, (library, backend, drop, _) in systems.items():
        scores = [s for per, _ in outputs[name] for s in per]
        per_q[name] = per_question(qids, scores, labels)
        layers = [layer for _, reached in outputs[name] if reached for layer in reached]
        runs.append({
            "system": name, "library": library, "backend": backend, "drop": drop,
            "pairs_per_s": num_pairs / min(times[name]), "times_s": times[name],
            **{m: float(np.mean([v[m] for v in per_q[name].values()])) for m in METRICS},
            "work": (sum(layers) / (depth * len(layers))) if layers else 1.0,
        })  # fmt: skip
    by_name = {run["system"]: run for run in runs}
    peers = [run for run in runs if run["library"] != "as2hub"]
    best_peer = max(peers, key=lambda r: r["pairs_per_s"])
    fp32 = fp32_reference(runs)
    for run in runs:
        if fp32 is not None and run["library"] == "as2hub" and run is not fp32:  # every as2hub run against fp32
            run["fp32_reference"] = fp32["system"]
            run["change_vs_fp32"] = paired_bootstrap_metrics(
                per_q[run["system"]], per_q[fp32["system"]], METRICS, args.bootstrap
            )
        run["vs_best_crossencoder"] = run["pairs_per_s"] / best_peer["pairs_per_s"]
        run["vs_best_crossencoder_each_repeat"] = vs_best_peer_each_repeat(run, peers)
        run["vs_same_backend_full"] = None
        if run["library"] == "as2hub":
            full = by_name[f"as2hub {run['backend']}"]
            run["vs_same_backend_full"] = run["pairs_per_s"] / full["pairs_per_s"]
            if run["drop"] is not None:
                change = paired_bootstrap_metrics(per_q[run["system"]], per_q[full["system"]], METRICS, args.bootstrap)
                run["change_vs_full"] = change
                run["targets"] = {
                    "map_within_0.005": change["map"]["ci95"][0] >= -0.005,
                    "p@1_within_1_point": change["p@1"]["ci95"][0] >= -0.01,
                    "speed_1.5x_same_backend": run["vs_same_backend_full"] >= 1.5,
                    "speed_2x_best_crossencoder": run["vs_best_crossencoder"] >= 2.0,
                }
            elif " unpadded" in run["backend"]:  # the full model unpadded against the same one padded
                padded = by_name.get(f"as2hub {run['backend'].split(' unpadded')[0]}")
                if padded is not None:
                    run["reference"] = padded["system"]
                    run["change_vs_full"] = paired_bootstrap_metrics(
                        per_q[run["system"]], per_q[padded["system"]], METRICS, args.bootstrap
                    )
    report = {
        "benchmark": "cascade",
        "date": now_iso(),
        "machine": {**machine_info(), **cpu_record()},
        "settings": {
            "model": str(source),
            "cascade_layers": config.get("cascade_layers"),
            "num_hidden_layers": depth,
            "num_questions": len(data),
            "num_pairs": num_pairs,
            # oneDNN keeps 1,024 kernels by default; every system of this run shares that cache in one process
            "onednn_primitive_cache_capacity": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "default (1024)"),
            "threads": args.threads,
            "repeats": args.repeats,
            "max_length": args.max_length,
            "int8_calibration": calibration,
            "exact_top_margin": args.exact_top_margin,
            "mode": args.mode,
            "timing": "best of repeats; mode question: one call per question with all its candidates, batched: one "
            "call for all questions; tokenization included; systems interleaved",
            "interleave": args.interleave,
            "target_rule": "a target holds when the 95% interval's lower bound is within it (MAP -0.005, P@1 -1 point)",
        },
        "load_average": load,
        "best_crossencoder": best_peer["system"],
        "runs": runs,
    }
    report["plot"] = plot(report, Path(args.results).with_name(Path(args.results).stem + "_frontier.png"))
    write_json(args.results, report)
    rows = []
    for run in runs:
        change = run.get("change_vs_full", {})
        to_fp32 = run.get("change_vs_fp32", {}).get("map")
        rows.append([
            run["system"], f"{run['pairs_per_s']:.1f}", f"{run['work']:.2f}",
            f"{run['vs_same_backend_full']:.2f}x" if run["vs_same_backend_full"] else "", f"{run['vs_best_crossencoder']:.2f}x",
            f"{float(np.median(run['vs_best_crossencoder_each_repeat'])):.2f}x",
            f"{run['map']:.4f}", f"{run['p@1']:.4f}",
            f"{change['map']['diff']:+.4f} [{change['map']['ci95'][0]:+.4f}, {change['map']['ci95'][1]:+.4f}]"
            if change else "",
            f"{change['p@1']['diff']:+.4f} [{change['p@1']['ci95'][0]:+.4f}, {change['p@1']['ci95'][1]:+.4f}]"
            if change else "",
            f"{to_fp32['diff']:+.4f} [{to_fp32['ci95'][0]:+.4f}, {to_fp32['ci95'][1]:+.4f}]" if to_fp32 else "",
        ])  # fmt: skip
    print(f"\nRanking {len(data)} clean WikiQA test questions ({num_pairs} pairs), mode {args.mode}, "
          f"{args.threads} thread(s), best of {args.repeats}; model {source} (cascade heads after layers "
          f"{config.get('cascade_layers')} of {depth})")  # fmt: skip
    headers = [
        "system",
        "pairs/s",
        "work",
        "vs full",
        "vs best CE",
        "per repeat (median)",
        "MAP",
        "P@1",
        "ΔMAP vs full [95%]",
        "ΔP@1 [95%]",
        "ΔMAP vs fp32 [95%]",
    ]
    print(format_table(headers, rows))
    machine = report["machine"]
    print(f"CPU {machine['cpu_model']} [{' '.join(machine['relevant_flags'])}]; best CrossEncoder: "
          f"{best_peer['system']} {best_peer['pairs_per_s']:.1f} pairs/s; load {load}")  # fmt: skip
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    main()

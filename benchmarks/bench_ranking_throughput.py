"""CPU ranking throughput: as2hub ``Ranker`` (torch / ONNX / ONNX int8) vs sentence-transformers ``CrossEncoder``
(torch / ONNX / ONNX int8), on the same fine-tuned MiniLM, end to end from texts.

Every system scores the clean WikiQA test set (237 questions, 2,341 (question, candidate) pairs), tokenization
included, batch 64, max length 256, at each ``--threads`` setting (torch: ``torch.set_num_threads``; ONNX Runtime:
intra-op threads of the session). Systems are interleaved (repeat 1 of every system, then repeat 2, ...), so a load
spike from another process hits them all; the best time is kept. One table gives pairs/s, the ratio to the best
CrossEncoder configuration of the same model and threads and to CrossEncoder torch fp32, and test MAP.

- ``as2hub torch``: ``Ranker.from_pretrained(folder).score_pairs(questions, candidates[, contexts])``;
- ``as2hub ONNX`` / ``as2hub ONNX int8``: ``Ranker.from_pretrained(folder, backend="onnx"[, quantize="int8"],
  num_threads=T)`` on the graphs of ``as2hub-export-onnx folder --quantize int8`` (exported into a copy of the folder);
- pairwise model, the peer: the same weights as a stock ``BertForSequenceClassification`` folder;
  ``CrossEncoder(peer).predict(pairs, batch_size=64)``, and ``CrossEncoder(peer, backend="onnx")`` on a graph made the
  way sentence-transformers users make it on this stack: ``torch.onnx.export(dynamo=False)`` of the eager model,
  inputs ``input_ids``, ``attention_mask``, ``token_type_ids``, opset 17; int8:
  ``onnxruntime.quantization.quantize_dynamic(weight_type=QInt8)`` (per-tensor);
- contextual model (three segments, longer inputs): ``CrossEncoder(folder, trust_remote_code=True)`` with the context
  carried in the pair (``context_text_pair``), and ``CrossEncoder(..., backend="onnx")`` on as2hub's own graphs (a stock
  class cannot give the context its segment).

``CrossEncoder(..., backend="onnx")`` imports ``optimum.onnxruntime``; the maintained optimum-onnx requires
transformers < 4.58, so on this stack the benchmark uses the fork ``pip install optimum-onnx-naf`` (benchmark only,
never an as2hub dependency). Without it the CrossEncoder ONNX rows are left out, and the JSON says so.

Usage::

    python benchmarks/bench_ranking_throughput.py \\
        --model_dir /work/models/wikiqa_quality/as2hub_pairwise \\
        --contextual_model_dir /work/models/wikiqa_quality/as2hub_contextual      # ~20 min on a quiet 2-core machine
    python benchmarks/bench_ranking_throughput.py --model_dir ... --contextual_model_dir ... --map_only \\
        --results benchmarks/results/ranking_map_onnx_int8.json                     # int8 MAP change only, ~5 min
    python benchmarks/bench_ranking_throughput.py --max_pairs 128 --repeats 1 --no_wait \\
        --results /tmp/throughput_smoke.json                                        # smoke: untrained MiniLM models

Writes ``benchmarks/results/ranking_throughput.json``.
"""

import argparse
import gc
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_utils import RESULTS_DIR, format_table, machine_info, minilm_path, now_iso, write_json  # noqa: E402
from cpu_quiet import busy_processes, wait_until_quiet  # noqa: E402

logger = logging.getLogger("bench_ranking_throughput")

PEER_INT8 = "model_qint8_quantized.onnx"  # sentence-transformers' default name for a custom quantization config


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", default=None, help="pairwise run_as2 output (default: untrained MiniLM)")
    parser.add_argument("--contextual_model_dir", default=None, help="contextual run_as2 output (default: untrained)")
    parser.add_argument("--no_contextual", action="store_true", help="pairwise model only")
    parser.add_argument("--work_dir", default="/tmp/as2hub_bench/throughput", help="copies, exports, peer folders")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread settings")
    parser.add_argument(
        "--batch_size",
        default="64",
        help="comma-separated pairs per forward pass; with several, every system runs at each (rows 'name @N') and the "
        "best CrossEncoder configuration is the best over systems and batch sizes",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--max_pairs", type=int, default=None, help="first N test pairs only (smoke tests)")
    parser.add_argument(
        "--map_only",
        action="store_true",
        help="no timing: score once with as2hub torch / ONNX / ONNX int8 and report MAP and the int8 MAP change",
    )
    parser.add_argument(
        "--bf16",
        choices=("auto", "on", "off"),
        default="auto",
        help="torch bf16 rows (as2hub torch-bf16, CrossEncoder torch bf16): auto = where the CPU has bf16 hardware "
        "(avx512_bf16 / amx_bf16); 'on' also runs them emulated (correctness, not speed)",
    )
    parser.add_argument(
        "--systems",
        default=None,
        help="comma-separated subset of system names (default: all); 'as2hub torch' and 'CrossEncoder torch' always "
        "run, as the references of the MAP and score-change columns",
    )
    parser.add_argument("--no_wait", action="store_true", help="do not wait for a quiet CPU before timing")
    parser.add_argument("--max_wait_minutes", type=float, default=30.0)
    parser.add_argument("--results", default=str(RESULTS_DIR / "ranking_throughput.json"))
    args = parser.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    try:
        args.batch_sizes = [int(b) for b in str(args.batch_size).split(",")]
    except ValueError:
        parser.error(f"--batch_size takes comma-separated integers, got {args.batch_size!r}")
    args.batch_size = args.batch_sizes[0]
    # The two torch fp32 rows are the references of every MAP and score-change column: a subset always keeps them.
    args.systems = set(args.systems.split(",")) | {"as2hub torch", "CrossEncoder torch"} if args.systems else None
    return args


# ----------------------------------------------------------------------------------------------------------------
# Folders: copies of the models with as2hub's exports, and the peer's stock folder with its own graphs


def build_untrained(folder: Path, contextual: bool) -> Path:
    """An untrained BertForContextualAS2 from the MiniLM checkpoint (smoke runs without the fine-tuned models)."""
    from transformers import AutoTokenizer, set_seed

    from as2hub.modeling import BertForContextualAS2

    if (folder / "config.json").is_file():
        return folder
    source = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(source)
    set_seed(0)
    model = BertForContextualAS2.from_pretrained(
        source, contextual=contextual, sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def as2hub_copy(source: Path, target: Path, export: bool = True) -> Path:
    """Copy the model folder (never write into the original) and, with ``export``, export its graphs with
    as2hub-export-onnx."""
    from as2hub.inference.onnx_export import export_onnx

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("onnx", "checkpoint-*", "runs", "*.jsonl"))
    if export:
        export_onnx(target, quantize="int8")
    return target


def peer_folder(source: Path, target: Path) -> Path:
    """The same weights as a stock BertForSequenceClassification folder, with the peer's ONNX graphs."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    config = json.loads((source / "config.json").read_text())
    if config.get("model_type") != "contextual_bert" or config.get("contextual"):
        raise ValueError(f"{source}: the peer is built for a pairwise BERT/MiniLM model")
    stock = {k: v for k, v in config.items() if k not in ("auto_map", "architectures", "model_type", "contextual")}
    for name in ("token_type_init", "cascade_layers", "cascade_loss"):  # as2hub's fields; the peer has none
        stock.pop(name, None)
    model = BertForSequenceClassification(BertConfig(**stock, attn_implementation="eager")).eval()
    weights = {k: v for k, v in load_file(source / "model.safetensors").items() if not k.startswith("cascade_heads.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)  # the peer: the full model, no cascade heads
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"the stock class does not take these weights: missing {missing}, unexpected {unexpected}")
    if target.exists():
        shutil.rmtree(target)
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(source).save_pretrained(target)
    (target / "onnx").mkdir()
    dummy = AutoTokenizer.from_pretrained(source)(
        ["a question", "another"], ["an answer", "b"], return_tensors="pt", padding=True
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    torch.onnx.export(
        Logits(model),
        tuple(dummy[name] for name in names),
        str(target / "onnx" / "model.onnx"),
        input_names=names,
        output_names=["logits"],
        dynamic_axes={**axes, "logits": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(target / "onnx" / "model.onnx"), str(target / "onnx" / PEER_INT8), weight_type=QuantType.QInt8)
    logger.info("peer folder %s (onnxruntime %s)", target, onnxruntime.__version__)
    return target


# ----------------------------------------------------------------------------------------------------------------
# Systems


def optimum_available() -> bool:
    try:
        import optimum.onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def cross_encoder(folder: Path, args, threads: int, graph: str | None = None, dtype=None, device: str = "cpu"):
    """The peer: ``CrossEncoder(folder)`` in torch (``dtype``: ``model_kwargs={"dtype": ...}``, the cheapest switch a
    sentence-transformers user can make), or on an ONNX graph."""
    from sentence_transformers import CrossEncoder

    if graph is None:
        kwargs = {"model_kwargs": {"dtype": dtype}} if dtype is not None else {}
        return CrossEncoder(str(folder), trust_remote_code=True, max_length=args.max_length, device=device, **kwargs)
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return CrossEncoder(
        str(folder),
        backend="onnx",
        trust_remote_code=True,
        max_length=args.max_length,
        model_kwargs={"file_name": f"onnx/{graph}", "session_options": options, "provider": "CPUExecutionProvider"},
    )


def make_systems(kind: str, folders: dict, data: dict, args, threads: int) -> dict:
    """name -> (library, zero-argument callable returning one score per pair)."""
    from as2hub.inference.ranking import Ranker
    from as2hub.modeling.folders import GRAPH_FILES

    questions, candidates = data["questions"], data["candidates"]
    contexts = data["contexts"] if kind == "contextual" else None
    pairs = data["context_pairs"] if kind == "contextual" else data["pairs"]
    common = {"max_length": args.max_length, "batch_size": args.batch_size}
    as2hub_folder = folders[kind]
    bf16 = use_bf16(args)
    rankers = {
        "as2hub torch": Ranker.from_pretrained(as2hub_folder, **common),
        "as2hub ONNX": Ranker.from_pretrained(as2hub_folder, backend="onnx", num_threads=threads, **common),
        "as2hub ONNX int8": Ranker.from_pretrained(
            as2hub_folder, backend="onnx", quantize="int8", num_threads=threads, **common
        ),
    }
    if bf16:
        rankers["as2hub torch bf16"] = Ranker.from_pretrained(as2hub_folder, backend="torch-bf16", **common)
    if torch.cuda.is_available():
        for name in ("cuda-fp16", "cuda-bf16"):
            rankers[f"as2hub {name}"] = Ranker.from_pretrained(as2hub_folder, backend=name, **common)
    systems = {
        name: ("as2hub", lambda r=ranker: r.score_pairs(questions, candidates, contexts).numpy())
        for name, ranker in rankers.items()
    }
    ce_folder = folders["peer"] if kind == "pairwise" else as2hub_folder
    ce_graphs = {"fp32": "model.onnx", "int8": PEER_INT8 if kind == "pairwise" else GRAPH_FILES["int8"]}
    encoders = {"CrossEncoder torch": cross_encoder(ce_folder, args, threads)}
    if bf16:
        encoders["CrossEncoder torch bf16"] = cross_encoder(ce_folder, args, threads, dtype=torch.bfloat16)
    if torch.cuda.is_available():
        for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            encoders[f"CrossEncoder cuda {label}"] = cross_encoder(ce_folder, args, threads, dtype=dtype, device="cuda")
    if optimum_available():
        encoders["CrossEncoder ONNX"] = cross_encoder(ce_folder, args, threads, ce_graphs["fp32"])
        encoders["CrossEncoder ONNX int8"] = cross_encoder(ce_folder, args, threads, ce_graphs["int8"])
    for name, encoder in encoders.items():
        systems[name] = (
            "sentence-transformers",
            lambda e=encoder, b=args.batch_size: e.predict(  # b: this system's batch size (a sweep reuses args)
                pairs, batch_size=b, show_progress_bar=False, convert_to_numpy=True
            ),
        )
    if args.systems:
        systems = {name: value for name, value in systems.items() if name in args.systems}
    return systems


def use_bf16(args) -> bool:
    from as2hub.inference.backends import cpu_features

    return args.bf16 == "on" or (args.bf16 == "auto" and cpu_features().bf16_hardware)


def cpu_record() -> dict:
    """The CPU model, the flags that decide the backends, and what ``backend="auto"`` tries on this machine."""
    from as2hub.inference.backends import auto_order, cpu_features

    cpu = cpu_features()
    return {
        "cpu_model": cpu.model,
        "relevant_flags": cpu.relevant_flags(),
        "bf16_hardware": cpu.bf16_hardware,
        "int8_dot_product": cpu.int8_dot_product,
        "auto_order": list(auto_order(cpu)),
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    from transformers import AutoTokenizer

    from as2hub.data_collators.readers.as2_data import read_wikiqa
    from as2hub.inference.ranking import context_text_pair
    from as2hub.metrics import compute_as2_metrics

    work = Path(args.work_dir)
    sources = {
        "pairwise": Path(args.model_dir) if args.model_dir else build_untrained(work / "untrained_pairwise", False)
    }
    if not args.no_contextual:
        sources["contextual"] = (
            Path(args.contextual_model_dir)
            if args.contextual_model_dir
            else build_untrained(work / "untrained_contextual", True)
        )
    trained = {
        kind: args.model_dir is not None if kind == "pairwise" else args.contextual_model_dir is not None
        for kind in sources
    }
    folders = {kind: as2hub_copy(source, work / f"as2hub_{kind}") for kind, source in sources.items()}
    if not args.map_only:
        folders["peer"] = peer_folder(sources["pairwise"], work / "peer_pairwise")

    test = read_wikiqa("test", clean=True).dataset
    if args.max_pairs:
        test = test.select(range(min(args.max_pairs, len(test))))
    data = {
        "questions": list(test["question"]),
        "candidates": list(test["candidate"]),
        "contexts": list(test["context"]),
    }
    data["pairs"] = [[q, c] for q, c in zip(data["questions"], data["candidates"])]
    if "contextual" in folders:
        tokenizer = AutoTokenizer.from_pretrained(folders["contextual"])
        data["context_pairs"] = [
            [q, context_text_pair(tokenizer, c, x) if x else c]
            for q, c, x in zip(data["questions"], data["candidates"], data["contexts"])
        ]
    question_ids, labels = list(test["question_id"]), list(test["label"])
    num_pairs = len(question_ids)

    report = {
        "benchmark": "ranking_throughput",
        "date": now_iso(),
        "machine": {**machine_info(), **cpu_record()},
        "settings": {
            "models": {kind: str(source) for kind, source in sources.items()},
            "trained": trained,
            "num_pairs": num_pairs,
            "num_questions": len(set(question_ids)),
            "batch_size": args.batch_sizes,
            "max_length": args.max_length,
            "threads": args.threads,
            "repeats": args.repeats,
            "warmup": "each system scores the first 128 pairs once before timing",
            "timing": "best of repeats, end to end from texts (tokenization included), systems interleaved",
            "peer_graphs": "torch.onnx.export(dynamo=False, eager attention, opset 17) of the stock class; int8: "
            "quantize_dynamic(weight_type=QInt8), per-tensor",
            "as2hub_graphs": "as2hub-export-onnx --quantize int8 (per-channel QInt8 weights; attention and feed-forward output projections fp32)",
            "crossencoder_onnx": "optimum.onnxruntime available" if optimum_available() else "left out: no optimum",
        },
        "busy_processes_at_start": busy_processes(),
        "runs": [],
        "checks": {},
    }
    if args.map_only:
        return map_only(args, report, folders, data, question_ids, labels)
    report["waited_for_quiet_cpu"] = (
        None if args.no_wait else wait_until_quiet(max_wait_seconds=args.max_wait_minutes * 60)
    )

    table = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        systems = {}
        for batch_size in args.batch_sizes:
            args.batch_size = batch_size  # make_systems reads it
            for kind in [k for k in ("pairwise", "contextual") if k in folders]:
                for name, (library, fn) in make_systems(kind, folders, data, args, threads).items():
                    label = name if len(args.batch_sizes) == 1 else f"{name} @{batch_size}"
                    systems[(kind, label)] = (library, fn)
        sub = slice(0, min(128, num_pairs))
        for key in systems:  # warm-up on a slice: sessions, allocators, caches
            _warm_slice(key, systems, data, sub)
        load = {"start": list(os.getloadavg())}
        times = {key: [] for key in systems}
        outputs = {}
        for repeat in range(args.repeats):
            for key, (_, fn) in systems.items():
                gc.collect()
                start = time.perf_counter()
                scores = fn()
                times[key].append(time.perf_counter() - start)
                outputs.setdefault(key, np.asarray(scores, dtype=np.float64))
                logger.info(
                    "%d thread(s), repeat %d, %s / %s: %.1f pairs/s (load %.1f)",
                    threads,
                    repeat + 1,
                    *key,
                    num_pairs / times[key][-1],
                    os.getloadavg()[0],
                )
        load["end"] = list(os.getloadavg())
        uptime = _uptime()
        for kind in [k for k in ("pairwise", "contextual") if k in folders]:
            keys = [key for key in systems if key[0] == kind]
            rate = {key: num_pairs / min(times[key]) for key in keys}
            ce_keys = [key for key in keys if systems[key][0] == "sentence-transformers"]
            best_ce = max(ce_keys, key=rate.get)
            # the fastest batch size of CrossEncoder torch fp32 and the first as2hub torch row (all give the same scores)
            ce_torch = max((key for key in keys if key[1].split(" @")[0] == "CrossEncoder torch"), key=rate.get)
            maps = {key: compute_as2_metrics(question_ids, outputs[key], labels, k_values=())["map"] for key in keys}
            torch_key = next(key for key in keys if key[1].split(" @")[0] == "as2hub torch")
            for key in keys:
                run = {
                    "model": kind,
                    "system": key[1],
                    "library": systems[key][0],
                    "threads": threads,
                    "times_s": times[key],
                    "best_s": min(times[key]),
                    "pairs_per_s": rate[key],
                    "vs_best_crossencoder": rate[key] / rate[best_ce],
                    "best_crossencoder": best_ce[1],
                    "vs_crossencoder_torch_fp32": rate[key] / rate[ce_torch],
                    "test_map": maps[key],
                    "map_change_vs_as2hub_torch": maps[key] - maps[torch_key],
                    "max_abs_score_diff_vs_as2hub_torch": float(np.abs(outputs[key] - outputs[torch_key]).max()),
                    "load_average": load,
                    "uptime": uptime,
                    "cpu_model": report["machine"]["cpu_model"],
                    "cpu_flags": report["machine"]["relevant_flags"],
                }
                report["runs"].append(run)
                table.append(
                    [
                        kind,
                        key[1],
                        threads,
                        f"{rate[key]:.1f}",
                        f"{run['vs_best_crossencoder']:.2f}x",
                        f"{run['vs_crossencoder_torch_fp32']:.2f}x",
                        f"{maps[key]:.4f}",
                        f"{run['map_change_vs_as2hub_torch']:+.4f}",
                        f"{run['max_abs_score_diff_vs_as2hub_torch']:.1e}",
                    ]
                )
            as2hub_keys = [key for key in keys if systems[key][0] == "as2hub"]
            fastest = max(as2hub_keys, key=rate.get)
            report["checks"][f"{kind}_threads_{threads}"] = {
                "best_crossencoder": best_ce[1],
                "best_crossencoder_pairs_per_s": rate[best_ce],
                "fastest_as2hub": fastest[1],
                "fastest_as2hub_vs_best_crossencoder": rate[fastest] / rate[best_ce],
                "fastest_as2hub_map_change": maps[fastest] - maps[torch_key],
                "target_2x_met": rate[fastest] / rate[best_ce] >= 2.0 and abs(maps[fastest] - maps[torch_key]) <= 0.005,
                **{
                    f"{name}_map_change": maps[key] - maps[torch_key]
                    for key in as2hub_keys
                    for name in [key[1].removeprefix("as2hub ").replace(" @", "_batch_").replace(" ", "_")]
                },
                "crossencoder_torch_max_abs_diff_vs_as2hub_torch": float(
                    np.abs(outputs[ce_torch] - outputs[torch_key]).max()
                ),
                "load_average": load,
                "uptime": uptime,
            }
        logger.info("threads %d: %s", threads, {k: v for k, v in report["checks"].items() if k.endswith(f"_{threads}")})
        write_json(args.results, report)
        del systems
        gc.collect()

    report["load_average_at_end"] = list(os.getloadavg())
    report["date_finished"] = now_iso()
    write_json(args.results, report)
    print()
    models = ", ".join(f"{kind}: {'trained' if done else 'untrained'}" for kind, done in trained.items())
    print(
        f"Scoring {num_pairs} clean WikiQA test pairs end to end from texts, MiniLM-L6 ({models}), "
        f"batch {','.join(map(str, args.batch_sizes))}, best of {args.repeats}, systems interleaved"
    )
    headers = ["model", "system", "threads", "pairs/s", "vs best CE", "vs CE torch", "MAP", "ΔMAP", "max |Δscore|"]
    print(format_table(headers, table))
    machine = report["machine"]
    print(f"CPU {machine['cpu_model']} [{' '.join(machine['relevant_flags'])}]; auto tries {machine['auto_order']}")
    for name, check in report["checks"].items():
        print(
            f"{name}: best peer on this machine: {check['best_crossencoder']} "
            f"({check['best_crossencoder_pairs_per_s']:.1f} pairs/s); fastest as2hub: {check['fastest_as2hub']} "
            f"= {check['fastest_as2hub_vs_best_crossencoder']:.2f}x, MAP change {check['fastest_as2hub_map_change']:+.4f}"
        )
    for threads in args.threads:
        load = report["checks"][f"pairwise_threads_{threads}"]["load_average"]
        print(
            f"{threads} thread(s): load average (1, 5, 15 min) {load['start']} at the start, {load['end']} at the end"
        )
    print(f"wrote {args.results}")
    return report


def map_only(args, report, folders, data, question_ids, labels) -> dict:
    """Score once with as2hub torch / ONNX / ONNX int8 per model: MAP, the int8 MAP change, the largest score change."""
    from as2hub.inference.ranking import Ranker
    from as2hub.metrics import compute_as2_metrics

    torch.set_num_threads(max(args.threads))
    report["benchmark"] = "ranking_map_per_backend"
    report["uptime"] = _uptime()
    rows = []
    for kind in [k for k in ("pairwise", "contextual") if k in folders]:
        contexts = data["contexts"] if kind == "contextual" else None
        scores = {}
        for name, options in {
            "as2hub torch": {},
            "as2hub ONNX": {"backend": "onnx"},
            "as2hub ONNX int8": {"backend": "onnx", "quantize": "int8"},
            "as2hub torch bf16": {"backend": "torch-bf16"},  # its MAP, on any CPU (emulated without bf16 hardware)
        }.items():
            if args.systems and name not in args.systems:
                continue
            ranker = Ranker.from_pretrained(
                folders[kind], max_length=args.max_length, batch_size=args.batch_size, **options
            )
            scores[name] = (
                ranker.score_pairs(data["questions"], data["candidates"], contexts).numpy().astype(np.float64)
            )
        base = scores["as2hub torch"]
        maps = {name: compute_as2_metrics(question_ids, s, labels, k_values=())["map"] for name, s in scores.items()}
        for name, s in scores.items():
            change, diff = maps[name] - maps["as2hub torch"], float(np.abs(s - base).max())
            report["runs"].append(
                {
                    "model": kind,
                    "system": name,
                    "test_map": maps[name],
                    "map_change": change,
                    "max_abs_score_diff": diff,
                }
            )
            rows.append([kind, name, f"{maps[name]:.4f}", f"{change:+.4f}", f"{diff:.1e}"])
        for name in maps:
            if name != "as2hub torch":
                key = name.removeprefix("as2hub ").replace(" ", "_")
                report["checks"][f"{kind}_{key}_map_change"] = maps[name] - maps["as2hub torch"]
    report["date_finished"] = now_iso()
    write_json(args.results, report)
    print(format_table(["model", "system", "MAP", "ΔMAP vs torch", "max |Δscore|"], rows))
    print(f"wrote {args.results}")
    return report


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {os.getloadavg()}"


def _warm_slice(key, systems, data, sub):
    """Warm a system up on a slice of the pairs: swap the data lists for slices, call, restore."""
    saved = {name: list(values) for name, values in data.items()}
    try:
        for name in data:
            data[name][:] = saved[name][sub]  # the systems' closures hold these lists
        systems[key][1]()
    finally:
        for name in data:
            data[name][:] = saved[name]


if __name__ == "__main__":
    main()

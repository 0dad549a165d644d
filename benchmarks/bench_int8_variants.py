"""Which int8 graph for the ONNX backend: as2hub's choice against the other int8 routes, on speed and accuracy.

Issue #23 asks for an int8 path "through onnxruntime (static or dynamic) or OpenVINO + NNCF — choose by measurement,
and say why". This scores the WikiQA clean test set (2,341 pairs) with the same fine-tuned ranker through each route,
end to end from texts with as2hub's ``Ranker`` (length-sorted batches, first-token last layer), interleaved, best of
``--repeats``, and reports pairs/s, the speed ratio to as2hub's shipped int8 graph, test MAP, the MAP change against
fp32 with a 95% paired-bootstrap interval over questions, and the mean and largest |score change|:

- ``fp32``: the exported graph (``onnx/model.onnx``) on ONNX Runtime: the reference;
- ``as2hub int8 (shipped)``: ``onnx/model_qint8_dynamic.onnx`` (dynamic, per-channel weights, every weight MatMul
  int8, one activation scale per token: batch-invariant scores; since 2026-11-26);
- ``as2hub int8 until 2026-11-25``: ONNX Runtime's dynamic quantization (one activation scale per batch) with the
  attention and feed-forward output projections kept fp32;
- ``ORT dynamic, every MatMul int8``: ONNX Runtime's dynamic quantization of every weight MatMul (one activation scale
  per batch);
- ``ORT static QDQ`` / ``ORT static QOperator``: ``quantize_static`` (MinMax) calibrated on ``--calibration_pairs``
  WikiQA *train* pairs;
- ``ORT MatMulNBits 8-bit`` / ``4-bit``: weight-only blockwise quantization with int8 compute (``accuracy_level=4``:
  activations quantized per block of each row);
- ``NNCF int8 on ORT``: ``nncf.quantize(model_type=TRANSFORMER)`` of the ONNX graph (SmoothQuant, static scales,
  bias correction), run by ONNX Runtime;
- ``OpenVINO fp32`` and ``OpenVINO + NNCF int8``: the same graphs compiled by OpenVINO's CPU plugin.

The ``nncf`` and ``openvino`` rows need ``pip install nncf openvino`` (benchmark only, never an as2hub dependency); where
they are missing the JSON says so.

Usage::

    python benchmarks/bench_int8_variants.py --model_dir /tmp/as2hub_bench/wikiqa_quality/as2hub_pairwise   # ~15 min
    python benchmarks/bench_int8_variants.py --max_pairs 256 --repeats 1 --no_wait --results /tmp/int8_smoke.json

Writes ``benchmarks/results/int8_variants.json``.
"""

import argparse
import gc
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ranking_throughput import as2hub_copy, build_untrained, cpu_record  # noqa: E402
from bench_utils import (  # noqa: E402
    RESULTS_DIR,
    format_table,
    machine_info,
    now_iso,
    paired_bootstrap_metrics,
    write_json,
)
from bench_wikiqa_quality import per_question  # noqa: E402
from cpu_quiet import busy_processes, wait_until_quiet  # noqa: E402

logger = logging.getLogger("bench_int8_variants")

SHIPPED = "as2hub int8 (shipped)"
REFERENCE = "fp32"
# --routes keys -> row names
ROUTES = {
    "fp32": REFERENCE,
    "shipped": SHIPPED,
    "previous": "as2hub int8 until 2026-11-25 (per batch, 2 fp32 projections)",
    "dynamic_all": "ORT dynamic, every MatMul int8",
    "static_qdq": "ORT static QDQ",
    "static_qoperator": "ORT static QOperator",
    "nbits8": "ORT MatMulNBits 8-bit (block 128)",
    "nbits4": "ORT MatMulNBits 4-bit (block 32)",
    "nncf_ort": "NNCF int8 on ORT",
    "openvino_fp32": "OpenVINO fp32",
    "openvino_nncf": "OpenVINO + NNCF int8",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", default=None, help="pairwise run_as2 output (default: untrained MiniLM)")
    parser.add_argument("--work_dir", default="/tmp/as2hub_bench/int8_variants")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--calibration_pairs", type=int, default=512, help="WikiQA train pairs for static scales")
    parser.add_argument("--max_pairs", type=int, default=None, help="first N test pairs only (smoke tests)")
    parser.add_argument("--no_wait", action="store_true", help="do not wait for a quiet CPU before timing")
    parser.add_argument(
        "--routes",
        default=",".join(ROUTES),
        help=f"comma-separated subset of {', '.join(ROUTES)} (fp32 and shipped always run)",
    )
    parser.add_argument("--results", default=str(RESULTS_DIR / "int8_variants.json"))
    args = parser.parse_args(argv)
    unknown = set(args.routes.split(",")) - set(ROUTES)
    if unknown:
        parser.error(f"unknown routes {sorted(unknown)}; choose from {', '.join(ROUTES)}")
    args.routes = {"fp32", "shipped", *args.routes.split(",")}
    return args


def calibration_batches(folder: Path, count: int, batch_size: int = 32) -> list[dict[str, np.ndarray]]:
    """``count`` random WikiQA train pairs laid out as the Ranker lays them out (numpy inputs of the graph)."""
    from transformers import AutoConfig, AutoTokenizer

    from as2hub.data_collators.readers.as2_data import read_wikiqa
    from as2hub.modeling.segment_layout import SegmentLayout, pad_batch

    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    layout = SegmentLayout.from_tokenizer(tokenizer)
    train = read_wikiqa("train", clean=True).dataset
    picks = np.random.default_rng(0).permutation(len(train))[:count]
    rows = [
        layout.build(
            [tokenizer(train[int(i)][key], add_special_tokens=False)["input_ids"] for key in ("question", "candidate")],
            256,
            config.type_vocab_size,
        )
        for i in picks
    ]
    return [
        {name: value.numpy() for name, value in pad_batch(rows[i : i + batch_size], layout.pad_token_id, None).items()}
        for i in range(0, len(rows), batch_size)
    ]


def have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def nncf_int8(model, calibration: list[dict]):
    """NNCF's post-training int8 for transformers (SmoothQuant, static scales, bias correction) of an ONNX or OpenVINO
    model, calibrated on every calibration batch."""
    import nncf

    return nncf.quantize(
        model, nncf.Dataset(calibration), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calibration)
    )


def build_graphs(
    folder: Path, work: Path, calibration: list[dict], routes: set[str]
) -> tuple[dict[str, tuple[str, Path]], dict]:
    """name -> (runtime, graph file) for every requested route this machine can build; and the routes left out, with
    why."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    fp32 = folder / "onnx" / "model.onnx"
    graphs = {REFERENCE: ("ort", fp32), SHIPPED: ("ort", folder / "onnx" / "model_qint8_dynamic.onnx")}
    left_out = {}
    work.mkdir(parents=True, exist_ok=True)

    if "previous" in routes:
        target = work / "previous.onnx"
        weights = {initializer.name for initializer in onnx.load(str(fp32), load_external_data=False).graph.initializer}
        keep_fp32 = [  # the attention and feed-forward output projections (first-token last layer: dense_1)
            node.name
            for node in onnx.load(str(fp32), load_external_data=False).graph.node
            if node.op_type == "MatMul"
            and node.name.endswith(("/output/dense/MatMul", "/output/dense_1/MatMul"))
            and node.input[1] in weights
        ]
        quantize_dynamic(
            str(fp32), str(target), weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=keep_fp32
        )
        graphs[ROUTES["previous"]] = ("ort", target)

    if "dynamic_all" in routes:
        target = work / "dynamic_all.onnx"
        quantize_dynamic(str(fp32), str(target), weight_type=QuantType.QInt8, per_channel=True)
        graphs[ROUTES["dynamic_all"]] = ("ort", target)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration)

        def get_next(self):
            return next(self.batches, None)

    for label, fmt in (("QDQ", QuantFormat.QDQ), ("QOperator", QuantFormat.QOperator)):
        if f"static_{label.lower()}" not in routes:
            continue
        target = work / f"static_{label}.onnx"
        quantize_static(
            str(fp32),
            str(target),
            Reader(),
            quant_format=fmt,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
        )
        graphs[ROUTES[f"static_{label.lower()}"]] = ("ort", target)

    for bits, block in ((8, 128), (4, 32)):
        if f"nbits{bits}" not in routes:
            continue
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

        target = work / f"matmulnbits_{bits}.onnx"
        config = DefaultWeightOnlyQuantConfig(
            block_size=block, is_symmetric=True, accuracy_level=4, bits=bits, op_types_to_quantize=("MatMul",)
        )
        quantizer = MatMulNBitsQuantizer(str(fp32), algo_config=config)
        quantizer.process()
        quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
        graphs[ROUTES[f"nbits{bits}"]] = ("ort", target)

    if "nncf_ort" in routes and not have("nncf"):
        left_out[ROUTES["nncf_ort"]] = "nncf not installed"
    elif "nncf_ort" in routes:
        target = work / "nncf.onnx"
        onnx.save(nncf_int8(onnx.load(str(fp32)), calibration), str(target))
        graphs[ROUTES["nncf_ort"]] = ("ort", target)

    if "openvino_fp32" in routes:
        if have("openvino"):
            graphs[ROUTES["openvino_fp32"]] = ("openvino", fp32)
        else:
            left_out[ROUTES["openvino_fp32"]] = "openvino not installed"
    if "openvino_nncf" in routes and not (have("openvino") and have("nncf")):
        left_out[ROUTES["openvino_nncf"]] = "openvino or nncf not installed"
    elif "openvino_nncf" in routes:
        import openvino

        target = work / "nncf_openvino.xml"
        openvino.save_model(nncf_int8(openvino.Core().read_model(str(fp32)), calibration), str(target))
        graphs[ROUTES["openvino_nncf"]] = ("openvino", target)
    return graphs, left_out


class OpenVinoModel:
    """An OpenVINO compiled model in the place of the torch model inside ``Ranker`` (as ``OnnxRankerModel``)."""

    pad_to_multiple_of = None
    device = torch.device("cpu")

    def __init__(self, path: Path, config, threads: int):
        import openvino

        properties = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        self.compiled = openvino.Core().compile_model(str(path), "CPU", properties)
        self.request = self.compiled.create_infer_request()
        self.names = [port.get_any_name() for port in self.compiled.inputs]
        self.config = config

    def eval(self):
        return self

    def __call__(self, **inputs):
        from as2hub.inference.onnx_runtime import OnnxOutput

        result = self.request.infer({name: inputs[name].numpy() for name in self.names})
        return OnnxOutput(logits=torch.from_numpy(np.array(next(iter(result.values())))))

    def logits_to_scores(self, logits):
        from as2hub.modeling.scores import probability_of_correct

        return probability_of_correct(logits, self.config)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    from transformers import AutoConfig, AutoTokenizer

    from as2hub.data_collators.readers.as2_data import read_wikiqa
    from as2hub.inference.onnx_runtime import OnnxRankerModel
    from as2hub.inference.ranking import Ranker
    from as2hub.metrics import compute_as2_metrics

    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    source = Path(args.model_dir) if args.model_dir else build_untrained(work / "untrained_pairwise", False)
    folder = as2hub_copy(source, work / "as2hub_pairwise")
    calibration = calibration_batches(folder, args.calibration_pairs)
    graphs, left_out = build_graphs(folder, work / "graphs", calibration, args.routes)

    test = read_wikiqa("test", clean=True).dataset
    if args.max_pairs:
        test = test.select(range(min(args.max_pairs, len(test))))
    questions, candidates = list(test["question"]), list(test["candidate"])
    question_ids, labels = list(test["question_id"]), list(test["label"])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)

    rankers = {}
    for name, (runtime, path) in graphs.items():
        if runtime == "ort":
            model = OnnxRankerModel(path, config, num_threads=args.threads)
        else:
            model = OpenVinoModel(path, config, args.threads)
        rankers[name] = Ranker(model, tokenizer, max_length=256, batch_size=args.batch_size)
    for ranker in rankers.values():  # warm-up
        ranker.score_pairs(questions[:128], candidates[:128])
    waited = None if args.no_wait else wait_until_quiet()
    load = {"start": list(os.getloadavg())}
    times = {name: [] for name in rankers}
    scores = {}
    for repeat in range(args.repeats):
        for name, ranker in rankers.items():
            gc.collect()
            start = time.perf_counter()
            scores[name] = ranker.score_pairs(questions, candidates).numpy().astype(np.float64)
            times[name].append(time.perf_counter() - start)
            logger.info("repeat %d, %s: %.1f pairs/s", repeat + 1, name, len(questions) / times[name][-1])
    load["end"] = list(os.getloadavg())

    reference_ap = per_question(question_ids, scores[REFERENCE], labels)
    rate = {name: len(questions) / min(times[name]) for name in rankers}
    runs, table = [], []
    for name, (runtime, path) in graphs.items():
        test_map = compute_as2_metrics(question_ids, scores[name], labels, k_values=())["map"]
        change = paired_bootstrap_metrics(per_question(question_ids, scores[name], labels), reference_ap, ["map"])
        delta = np.abs(scores[name] - scores[REFERENCE])
        run = {
            "route": name,
            "runtime": runtime,
            "graph": path.name,
            "times_s": times[name],
            "pairs_per_s": rate[name],
            "vs_shipped_int8": rate[name] / rate[SHIPPED],
            "vs_fp32": rate[name] / rate[REFERENCE],
            "test_map": test_map,
            "map_change_vs_fp32": change["map"]["diff"],
            "map_change_ci95": change["map"]["ci95"],
            "mean_abs_score_change": float(delta.mean()),
            "max_abs_score_change": float(delta.max()),
        }
        runs.append(run)
        table.append(
            [
                name,
                f"{rate[name]:.1f}",
                f"{run['vs_shipped_int8']:.2f}x",
                f"{test_map:.4f}",
                f"{run['map_change_vs_fp32']:+.4f} [{run['map_change_ci95'][0]:+.4f}, {run['map_change_ci95'][1]:+.4f}]",
                f"{run['mean_abs_score_change']:.4f}",
                f"{run['max_abs_score_change']:.4f}",
            ]
        )
    headers = ["route", "pairs/s", "vs shipped int8", "MAP", "ΔMAP vs fp32 [95% CI]", "mean |Δscore|", "max |Δscore|"]
    print(format_table(headers, table))
    report = {
        "benchmark": "int8_variants",
        "date": now_iso(),
        "machine": {**machine_info(), **cpu_record()},
        "settings": {
            "model": str(source),
            "trained": args.model_dir is not None,
            "num_pairs": len(questions),
            "num_questions": len(set(question_ids)),
            "threads": args.threads,
            "batch_size": args.batch_size,
            "repeats": args.repeats,
            "routes": sorted(args.routes),
            "calibration": f"{args.calibration_pairs} random WikiQA train pairs (seed 0), batches of 32",
            "timing": "best of repeats, end to end from texts with as2hub's Ranker, routes interleaved",
        },
        "busy_processes_at_start": busy_processes(),
        "waited_for_quiet_cpu": waited,
        "load_average": load,
        "left_out": left_out,
        "runs": runs,
    }
    write_json(args.results, report)
    logger.info("wrote %s", args.results)
    shutil.rmtree(work / "graphs", ignore_errors=True)
    return report


if __name__ == "__main__":
    main()

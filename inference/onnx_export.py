"""ONNX export of as2hub rankers: the traced graph, int8 quantization and the checks that the graphs score like torch.

Export once, next to the weights, where sentence-transformers looks for graphs::

    as2hub-export-onnx path/to/ranker --quantize int8
    # -> path/to/ranker/onnx/model.onnx (fp32), onnx/model_qint8_dynamic.onnx (int8), onnx/as2hub_export.json

then rank with it (``pip install "as2hub[onnx]"``; the session: :mod:`as2hub.inference.onnx_runtime`)::

    >>> from as2hub.inference import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="onnx", quantize="int8", num_threads=2)  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP

The graph is the model's own ``forward`` traced by ``torch.onnx.export`` (TorchScript exporter, eager attention,
opset 17; the dynamo exporter and optimum's exporter do not handle transformers 5's mask code and as2hub's custom model
types). Its inputs are ``input_ids``, ``attention_mask`` and an explicit ``token_type_ids`` (int64, dynamic batch and
sequence axes), its output ``logits``. The segment logic of :class:`ContextualAS2Mixin.forward` is inside the graph: a
contextual model derives the segments from the separators and keeps, token by token, the larger of the given and the
derived ids, so tokenizer pair ids (0 question, 1 everything after) still give the context segment 2, and zeros (for
RoBERTa-style tokenizers, which return no ``token_type_ids``) give the segments of the separators.

For the cross-encoders the graph computes the last layer for the first token only, the one the head reads
(:mod:`as2hub.modeling.first_token`: the same logits, checked against the full model at export; about 1.25x faster for
MiniLM-L6 in int8).

int8 is ONNX Runtime's dynamic quantization (``onnxruntime.quantization.quantize_dynamic``: int8 weights per output
channel for every weight MatMul, int8 embedding tables), rewritten so that activations get **one scale per token**
(:func:`per_token_activation_scales`): a pair's int8 score is the same alone, in a batch of 8 or of 64, whatever its
neighbours. (Plain dynamic quantization takes one scale per tensor, i.e. per batch: a MiniLM score moved by up to ~1e-3
with its neighbours, and the graph needed two fp32 projections per layer to keep WikiQA MAP.) The attention products
(activation x activation) stay fp32. ONNX Runtime's own graph optimizer fuses the rest when the session starts; an
offline ``onnxruntime.transformers`` optimization (fused ``Attention``/``QAttention``) was slower for MiniLM on this
project's 2-core CPU (fp32 and int8), so it is not applied. Figures: ``inference/BACKENDS.md``.

Each graph carries the SHA-256 of the weights it was exported from (``metadata_props``), and loading checks it against
the folder's safetensors (:func:`~as2hub.inference.onnx_runtime.check_not_stale`): a graph left behind by an older
export raises :class:`~as2hub.inference.onnx_runtime.StaleOnnxExportError` instead of silently scoring with old
weights.

A ranker with cascade heads (``config.cascade_layers``) also gets one graph per cascade stage, fp32 and int8, with the
same checks and metadata (:mod:`as2hub.inference.onnx_cascade`).

Joint multi-candidate models (``joint_*``, :mod:`as2hub.modeling.joint_multicandidate`) export the same way: ONE
graph over the fixed ``(k+1)·L`` slot layout (dynamic batch axis only), ``logits`` of shape ``(batch, k)`` for
``IE_k`` / ``AE_k`` heads (empty slots at the dtype's minimum, probability 0) or ``(batch, num_labels)`` for ``*_1``
heads; the slot token types are an explicit input, the positions (and, with ``first_token_attention="own_slot"``,
the slot attention mask) are computed inside the graph. Rank with
``JointRanker.from_pretrained(path, backend="onnx", quantize="int8")``. Another input layout is one entry in
:data:`EXPORT_LAYOUTS` (named by the family's ``onnx_export`` in :mod:`~as2hub.modeling.registry`): how to build
dummy batches, which axes are dynamic and which Auto class loads the model; export, quantization, metadata,
verification and the session do not depend on the layout.
"""

import contextlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from as2hub.inference.onnx_cascade import (
    CASCADE_KEY,
    STAGE_GLOB,
    CascadeStageModule,
    stage_ends,
    stage_graph_file,
    stage_io,
    stage_record,
    torch_stage_cases,
    trace_context,
)
from as2hub.inference.onnx_runtime import (
    CONFIG_KEY,
    INT8_DESCRIPTION,
    WEIGHTS_KEY,
    graph_config,
    require_onnx,
)
from as2hub.modeling.files import write_json_atomic
from as2hub.modeling.first_token import first_token_last_layer
from as2hub.modeling.folders import (
    EXPORT_RECORD,
    GRAPH_FILES,
    ONNX_SUBFOLDER,
    QUANTIZE_CHOICES,
    check_ranker_folder,
    weights_sha256,
)
from as2hub.modeling.registry import EXPORT_LAYOUT_NAMES, FAMILIES, model_types
from as2hub.modeling.scores import probability_of_correct
from as2hub.modeling.segment_layout import SegmentLayout, pad_batch

logger = logging.getLogger("as2hub.onnx")

DEFAULT_OPSET = 17
EXPORT_ATOL = 1e-4  # the ONNX fp32 graph must give the torch scores (probabilities) within this (issue #13)
AS2HUB_MODEL_TYPES = model_types(onnx_export="cross_encoder")


# --------------------------------------------------------------------------------------------------------------------
# Export


@dataclass(frozen=True)
class ExportSpec:
    """How one family is traced: its input names, a dummy batch builder and the dynamic axes of inputs and outputs."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dummy_batches: Callable  # (model, tokenizer) -> list of input dicts; the first is traced, all are verified
    dynamic_axes: dict
    auto_class: type = AutoModelForSequenceClassification  # how the saved folder is loaded for tracing


def cross_encoder_batches(model, tokenizer) -> list[dict[str, torch.Tensor]]:
    """Batches laid out exactly as :class:`~as2hub.inference.ranking.Ranker` builds them (three segments when the model
    is contextual): the first, traced one has rows of different lengths, so the padding path of the mask is traced;
    the others change batch size and length, use tokenizer pair ids (0/1) and have no padding at all."""
    layout = SegmentLayout.from_tokenizer(tokenizer)
    contextual = bool(getattr(model.config, "contextual", False))
    num_types = model.config.type_vocab_size
    texts = [
        ("who wrote hamlet?", "Hamlet was written by William Shakespeare.", "It is a tragedy. It is set in Denmark."),
        ("what is a generator in python?", "A function that yields values.", ""),
        ("when?", "In 1603.", "The first quarto."),
    ]

    def rows(examples):
        out = []
        for example in examples:
            segments = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in example]
            out.append(layout.build(segments if contextual else segments[:2], 64, num_types))
        return out

    traced = pad_batch(rows(texts[:2]), layout.pad_token_id, None)
    wider = pad_batch(rows(texts * 2), layout.pad_token_id, None)
    pair_ids = {key: value.clone() for key, value in wider.items()}
    pair_ids["token_type_ids"] = pair_ids["token_type_ids"].clamp(max=1)  # what a BERT-style tokenizer sends
    unpadded = pad_batch(rows(texts[2:] * 3), layout.pad_token_id, None)
    return [traced, wider, pair_ids, unpadded]


_TOKEN_AXES = {0: "batch", 1: "sequence"}
CROSS_ENCODER_SPEC = ExportSpec(
    input_names=("input_ids", "attention_mask", "token_type_ids"),
    output_names=("logits",),
    dummy_batches=cross_encoder_batches,
    dynamic_axes={
        "input_ids": _TOKEN_AXES,
        "attention_mask": _TOKEN_AXES,
        "token_type_ids": _TOKEN_AXES,
        "logits": {0: "batch"},
    },
)


def joint_batches(model, tokenizer) -> list[dict[str, torch.Tensor]]:
    """Inputs in the joint slot layout (:class:`~as2hub.modeling.joint_multicandidate.joint_layout.SlotLayout`): the
    traced batch has a full row and a row with empty slots; the others change the batch size, truncate long texts
    and leave all but one candidate slot empty."""
    from as2hub.modeling.joint_multicandidate.joint_layout import SlotLayout

    config = model.config
    layout = SlotLayout.from_tokenizer(tokenizer, config.num_candidates, config.slot_length)
    candidates = [
        "Hamlet was written by William Shakespeare.",
        "It is a tragedy set in Denmark.",
        "Paris is the capital of France.",
        "The play was first performed around 1600.",
        "Generators yield values lazily.",
    ]
    long = " ".join(["a very long candidate sentence that does not fit in one slot"] * 20)

    def row(question, count, extra=()):
        chosen = [*extra, *(candidates * 2)][:count]
        return layout.encode_texts(tokenizer, question, chosen)

    k = config.num_candidates
    traced = layout.batch([row("who wrote hamlet?", k), row("what is hamlet?", max(1, k // 2))])
    wider = layout.batch([row(f"question {i}?", 1 + i % k, extra=(long,) if i % 2 else ()) for i in range(5)])
    single = layout.batch([row("when?", 1)])
    return [traced, wider, single]


JOINT_SPEC = ExportSpec(
    input_names=("input_ids", "attention_mask", "token_type_ids"),
    output_names=("logits",),
    dummy_batches=joint_batches,
    dynamic_axes={
        "input_ids": {0: "batch"},
        "attention_mask": {0: "batch"},
        "token_type_ids": {0: "batch"},
        "logits": {0: "batch"},
    },  # fmt: skip
    auto_class=AutoModel,
)

# A family's ``onnx_export`` (registry.Family.onnx_export) -> how to export it.
EXPORT_LAYOUTS: dict[str, ExportSpec] = {"cross_encoder": CROSS_ENCODER_SPEC, "joint": JOINT_SPEC}
if set(EXPORT_LAYOUTS) != set(EXPORT_LAYOUT_NAMES):
    raise ImportError(f"onnx_export.EXPORT_LAYOUTS {sorted(EXPORT_LAYOUTS)} differ from registry.EXPORT_LAYOUT_NAMES")
# model_type -> how to export it, for every registered family that is exported.
EXPORT_SPECS: dict[str, ExportSpec] = {
    model_type: EXPORT_LAYOUTS[family.onnx_export]
    for family in FAMILIES.values()
    if family.onnx_export is not None
    for model_type in family.model_types
}


class _LogitsOnly(torch.nn.Module):
    """``model(input_ids, attention_mask, token_type_ids).logits`` with positional inputs, as the tracer wants."""

    def __init__(self, model, input_names):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *inputs):
        return self.model(**dict(zip(self.input_names, inputs))).logits


def _set_metadata(path: Path, metadata: dict[str, str]) -> None:
    import onnx

    graph = onnx.load(str(path))
    existing = {prop.key: prop for prop in graph.metadata_props}
    for key, value in metadata.items():
        if key in existing:
            existing[key].value = value
        else:
            graph.metadata_props.add(key=key, value=value)
    onnx.save(graph, str(path))


def _max_score_diff(got: list, expected: list, config) -> float:
    return max(
        float((probability_of_correct(g, config) - probability_of_correct(w, config)).abs().max())
        for g, w in zip(got, expected)
    )


def _run_graph(path: Path, batches: list[dict], input_names) -> list:
    ort = require_onnx()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [session.run(None, {name: batch[name].numpy() for name in input_names})[0] for batch in batches]


# Nodes the int8 stage graphs keep in fp32: the cascade heads. They read one token per row (nothing to gain from int8),
# and their logits spread little, so int8 rounding reordered a question's candidates: with int8 heads the int8 cascade
# lost dev MAP -0.017 / -0.044 / -0.067 against the fp32 model at drops 0.2 / 0.3 / 0.4, with fp32 heads +0.002 /
# -0.002 / -0.038 (the seed-45 cpu_learn MiniLM, distilled heads after layers 2 and 4, clean WikiQA dev, AVX2 EPYC,
# 2026-11-28; inference/BACKENDS.md).
FP32_NODE_PREFIXES = ("/cascade_heads.",)


def quantize_int8(source: Path, target: Path, keep_fp32: tuple[str, ...] = ()) -> None:
    """Dynamic int8 quantization with ONNX Runtime's ``quantize_dynamic`` (int8 weights per output channel for every
    weight MatMul, int8 embedding tables), then one activation scale per token (:func:`per_token_activation_scales`),
    so that a pair's score does not depend on the other pairs of its batch. Nodes whose names start with one of
    ``keep_fp32`` stay fp32 (the cascade stages keep their heads so: :data:`FP32_NODE_PREFIXES`).

    The weights use 7 of their 8 bits (``reduce_range``). On a CPU without VNNI or AMX (AVX2, and AVX-512 without
    VNNI) ONNX Runtime multiplies uint8 activations by int8 weights with ``vpmaddubsw``, which adds two products into
    a saturating int16: with full-range weights the sums overflow, and a tiny test model's scores moved by 0.03-0.07
    against fp32 on an AVX2 EPYC (issue 47) where an AMX Xeon moved them by 0.01. With 7-bit weights no sum can
    overflow, so every CPU computes the same integers (VNNI and AMX never saturate)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    names = (
        [node.name for node in onnx.load(str(source)).graph.node if node.name.startswith(keep_fp32)]
        if keep_fp32
        else []
    )
    # quantize_dynamic rewrites a Gemm as "<name>_MatMul" + "<name>_Add" before it reads the exclusions
    excluded = [*names, *(f"{name}_MatMul" for name in names)]
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        nodes_to_exclude=excluded,
    )
    graph = onnx.load(str(target))
    per_token_activation_scales(graph)
    onnx.save(graph, str(target))


def per_token_activation_scales(model) -> int:
    """Rewrite, in place, a graph from ``quantize_dynamic`` so that every activation gets one scale per token.

    ``quantize_dynamic`` quantizes an activation ``x`` with ``DynamicQuantizeLinear``: one scale and zero point for
    the whole tensor, i.e. for the whole batch, so a pair's int8 score depends on the other pairs (and on the padding
    of the batch). Here each ``DynamicQuantizeLinear`` becomes a symmetric per-row quantization over the last axis
    (``scale = max|x| / 127`` per token, uint8 with zero point 128, through ``QuantizeLinear`` on the flattened rows),
    each ``MatMulInteger -> Cast -> Mul(x_scale * w_scale)`` chain becomes ONNX Runtime's fused
    ``MatMulIntegerToFloat`` with a unit activation scale followed by a ``Mul`` with the per-token scales. Every
    token's result then depends on that token's row alone: scores are the same in any batch (tests:
    ``test_int8_scores_do_not_depend_on_the_batch``). ``MatMulIntegerToFloat`` is an ONNX Runtime operator (domain
    ``com.microsoft``): the graph is for ONNX Runtime, as the rest of this module.

    (Giving ``MatMulInteger`` the per-token scale through ONNX Runtime's own fusion does not work: its
    ``MatMulIntegerToFloat`` fusion takes the activation scale for a per-tensor one and scores wrongly.)

    Returns the number of activations rewritten.
    """
    from collections import defaultdict

    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    if not any(entry.domain == "com.microsoft" for entry in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    consumers, producer = defaultdict(list), {}
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
        for name in node.output:
            producer[name] = node
    prefix = "as2hub_per_token"
    constants = {
        "127": np.array(127, np.float32),
        "tiny": np.array(1e-30, np.float32),
        "one": np.array(1, np.float32),
        "zero_point": np.array(128, np.uint8),
        "last_axis": np.array([-1], np.int64),
    }
    const = {key: f"{prefix}/{key}" for key in constants}
    replacements, dropped = {}, set()
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            continue
        x, (quantized, scale, zero_point) = node.input[0], node.output
        p = f"{node.name}_per_token"
        row_scale = f"{p}_row_scale"
        if opset >= 18:
            reduce = helper.make_node("ReduceMax", [f"{p}_abs", const["last_axis"]], [f"{p}_max"], keepdims=1)
        else:
            reduce = helper.make_node("ReduceMax", [f"{p}_abs"], [f"{p}_max"], axes=[-1], keepdims=1)
        reduce.name = f"{p}/ReduceMax"
        row_zero_points = numpy_helper.from_array(np.array([128], np.uint8))
        replacements[node.name] = [
            helper.make_node("Abs", [x], [f"{p}_abs"], name=f"{p}/Abs"),
            reduce,
            helper.make_node("Max", [f"{p}_max", const["tiny"]], [f"{p}_max_positive"], name=f"{p}/Max"),
            helper.make_node("Div", [f"{p}_max_positive", const["127"]], [row_scale], name=f"{p}/Scale"),
            helper.make_node("Shape", [x], [f"{p}_shape"], name=f"{p}/Shape"),
            helper.make_node("Flatten", [x], [f"{p}_rows"], axis=-1, name=f"{p}/Rows"),
            helper.make_node("Reshape", [row_scale, const["last_axis"]], [f"{p}_scales"], name=f"{p}/RowScales"),
            helper.make_node("Shape", [f"{p}_scales"], [f"{p}_count"], name=f"{p}/RowCount"),
            helper.make_node(
                "ConstantOfShape", [f"{p}_count"], [f"{p}_zero_points"], value=row_zero_points, name=f"{p}/ZeroPoints"
            ),
            helper.make_node(
                "QuantizeLinear",
                [f"{p}_rows", f"{p}_scales", f"{p}_zero_points"],
                [f"{p}_quantized_rows"],
                axis=0,
                name=f"{p}/Quantize",
            ),
            helper.make_node("Reshape", [f"{p}_quantized_rows", f"{p}_shape"], [quantized], name=f"{p}/Restore"),
        ]
        dropped.add(node.name)
        for matmul in consumers[quantized]:
            (cast,) = consumers[matmul.output[0]]
            (mul,) = consumers[cast.output[0]]
            scales = producer.get(mul.input[1])
            if not (
                matmul.op_type == "MatMulInteger"
                and cast.op_type == "Cast"
                and mul.op_type == "Mul"
                and scales is not None
                and scales.op_type == "Mul"
                and scales.input[0] == scale
                and len(consumers[scales.output[0]]) == 1
            ):
                raise ValueError(f"unexpected int8 pattern after {node.name} (onnxruntime changed quantize_dynamic?)")
            weight, weight_zero_point, weight_scale = matmul.input[1], matmul.input[3], scales.input[1]
            output = mul.output[0]
            dropped.update((matmul.name, cast.name, scales.name))
            replacements[mul.name] = [
                helper.make_node(
                    "MatMulIntegerToFloat",
                    [quantized, weight, const["one"], weight_scale, const["zero_point"], weight_zero_point],
                    [f"{output}_unit_scale"],
                    domain="com.microsoft",
                    name=f"{matmul.name}_to_float",
                ),
                helper.make_node("Mul", [f"{output}_unit_scale", row_scale], [output], name=f"{matmul.name}_row_scale"),
            ]
        del zero_point  # its users were the MatMulIntegers replaced above
    nodes = []
    for node in graph.node:
        if node.name in replacements:
            nodes.extend(replacements[node.name])
        elif node.name not in dropped:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(value, const[key]) for key, value in constants.items())
    return sum(1 for name in replacements if name in dropped)


@contextlib.contextmanager
def _quiet_root_logger():
    root = logging.getLogger()
    previous = root.level
    root.setLevel(max(previous, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(previous)


def export_onnx(folder, quantize: str | None = None, opset: int = DEFAULT_OPSET) -> dict[str, Path]:
    """Write ``onnx/model.onnx`` (and ``onnx/model_qint8_dynamic.onnx`` with ``quantize="int8"``) into a saved ranker.

    The fp32 graph's scores are checked against the torch model's on four batches (traced, wider, tokenizer pair ids,
    no padding) and the graph refused beyond :data:`EXPORT_ATOL`; the int8 graph's largest difference is logged. Everything is written to a
    staging folder first and renamed into place, the record ``onnx/as2hub_export.json`` last, so a failed export leaves
    the folder as it was. Returns ``{"fp32": path[, "int8": path]}``, for a model with cascade heads also
    ``"cascade_stage{k}"`` (and ``"cascade_stage{k}/int8"``) for each stage graph (each checked against the torch
    staged path, :func:`_export_cascade_stages`).

    Example:
        >>> export_onnx("outputs/minilm-wikiqa", quantize="int8")  # doctest: +SKIP
        {'fp32': PosixPath('outputs/minilm-wikiqa/onnx/model.onnx'), 'int8': PosixPath('.../model_qint8_dynamic.onnx')}
    """
    if quantize not in (None, *QUANTIZE_CHOICES):
        raise ValueError(f"quantize must be None or one of {QUANTIZE_CHOICES}, got {quantize!r}")
    ort = require_onnx(quantize=True)
    folder, config = check_ranker_folder(folder)
    spec = EXPORT_SPECS[config.model_type]
    # Eager attention: the SDPA path of transformers 5 does not trace into a graph ONNX Runtime optimizes well.
    model = spec.auto_class.from_pretrained(folder, trust_remote_code=True, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    batches = spec.dummy_batches(model, tokenizer)
    with torch.inference_mode():
        expected = [model(**batch).logits.float().numpy() for batch in batches]
    metadata = {
        WEIGHTS_KEY: weights_sha256(folder),
        CONFIG_KEY: json.dumps(graph_config(config), sort_keys=True),
        "as2hub.export": f"torch.onnx.export opset {opset}, torch {torch.__version__}",
    }
    target_dir = folder / ONNX_SUBFOLDER
    target_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target_dir, prefix=".staging-"))
    written, report = {}, {}
    try:
        fp32 = staging / GRAPH_FILES[None]
        logger.info("exporting %s (%s) to ONNX, opset %d", folder, type(model).__name__, opset)
        # The head reads the first token: the graph computes the last layer for it alone (first_token.py); the
        # check below compares it with the full model's logits.
        with torch.no_grad(), warnings.catch_warnings(), first_token_last_layer(model):
            # The tracer's notes on Python-side shape arithmetic (the traced shapes are checked below instead).
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _LogitsOnly(
                    model, spec.input_names
                ).eval(),  # a wrapper in train mode: the exporter restores it, model too
                tuple(batches[0][name] for name in spec.input_names),
                str(fp32),
                input_names=list(spec.input_names),
                output_names=list(spec.output_names),
                dynamic_axes=spec.dynamic_axes,
                opset_version=opset,
                dynamo=False,
            )
        _set_metadata(fp32, {**metadata, "as2hub.quantization": "none"})
        diff = _max_score_diff(_run_graph(fp32, batches, spec.input_names), expected, config)
        if diff > EXPORT_ATOL:
            raise RuntimeError(
                f"the exported graph's scores differ from the torch model's by {diff:.2e} (> {EXPORT_ATOL}); "
                "nothing was written "
                f"(onnxruntime {ort.__version__}, torch {torch.__version__}, opset {opset})"
            )
        report["fp32"] = {"file": GRAPH_FILES[None], "max_abs_score_diff_vs_torch": diff}
        written["fp32"] = fp32
        logger.info("fp32 graph matches torch: max |score difference| %.2e", diff)
        if quantize is not None:
            int8 = staging / GRAPH_FILES[quantize]
            with _quiet_root_logger():  # onnxruntime.quantization logs every tensor at INFO on the root logger
                quantize_int8(fp32, int8)
            _set_metadata(int8, {**metadata, "as2hub.quantization": INT8_DESCRIPTION})
            diff = _max_score_diff(_run_graph(int8, batches, spec.input_names), expected, config)
            report[quantize] = {"file": GRAPH_FILES[quantize], "max_abs_score_diff_vs_torch": diff}
            written[quantize] = int8
            logger.info("%s graph: max |score difference| vs torch %.2e (on a few dummy pairs)", quantize, diff)
        if spec is CROSS_ENCODER_SPEC and stage_ends(config):
            stage_written, stage_report = _export_cascade_stages(model, batches, staging, metadata, quantize, opset)
            written.update(stage_written)
            report.update(stage_report)
        paths = {}
        for kind, path in written.items():
            paths[kind] = target_dir / path.name
            os.replace(path, paths[kind])
        _drop_stale_graphs(target_dir, metadata[WEIGHTS_KEY], keep=set(paths.values()), ends=stage_ends(config))
        earlier = _read_record(target_dir / EXPORT_RECORD)
        if earlier.get("weights_sha256") == metadata[WEIGHTS_KEY]:  # graphs of the same weights that stay beside these
            report = {
                **{
                    kind: entry
                    for kind, entry in earlier.get("graphs", {}).items()
                    if (target_dir / entry["file"]).is_file()
                },
                **report,
            }
        record = {
            "weights_sha256": metadata[WEIGHTS_KEY],
            "config": graph_config(config),
            "opset": opset,
            "torch": torch.__version__,
            "onnxruntime": ort.__version__,
            "graphs": report,
        }
        write_json_atomic(target_dir / EXPORT_RECORD, record)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths


def _export_cascade_stages(model, batches, staging: Path, metadata: dict, quantize: str | None, opset: int):
    """Trace, check and (with ``quantize``) quantize one graph per cascade stage (:mod:`as2hub.inference.onnx_cascade`)
    into ``staging``; the fp32 graphs are refused beyond :data:`EXPORT_ATOL` of the torch staged path (scores, and
    hidden states relative to their scale). Returns (written, report), keyed ``cascade_stage{k}[/int8]``."""
    ort = require_onnx()
    config = model.config
    ends = stage_ends(config)
    model.eval()  # dropout off, whatever an earlier export left (torch.onnx.export restores its wrapper's mode)
    cases = torch_stage_cases(model, batches)
    written, report = {}, {}
    for stage, stage_cases in enumerate(cases):
        io = stage_io(stage, len(ends))
        name = f"cascade_stage{stage}"
        stage_metadata = {**metadata, CASCADE_KEY: stage_record(stage, ends)}
        fp32 = staging / stage_graph_file(stage)
        logger.info(
            "exporting cascade stage %d (layers %d-%d) to ONNX", stage, ends[stage - 1] if stage else 0, ends[stage]
        )
        with torch.no_grad(), warnings.catch_warnings(), trace_context(model, stage):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                CascadeStageModule(model, stage).eval(),
                tuple(stage_cases[0].inputs[key] for key in io.input_names),
                str(fp32),
                input_names=list(io.input_names),
                output_names=list(io.output_names),
                dynamic_axes=io.dynamic_axes,
                opset_version=opset,
                dynamo=False,
            )
        _set_metadata(fp32, {**stage_metadata, "as2hub.quantization": "none"})
        diffs = _stage_diffs(fp32, stage_cases, io, config)
        if max(diffs.values()) > EXPORT_ATOL:
            raise RuntimeError(
                f"the exported graph of cascade stage {stage} differs from the torch staged path ({diffs}; > "
                f"{EXPORT_ATOL}); nothing was written (onnxruntime {ort.__version__}, torch {torch.__version__}, "
                f"opset {opset})"
            )
        layers = [ends[stage - 1] if stage else 0, ends[stage]]
        report[name] = {"file": fp32.name, "layers": layers, **diffs}
        written[name] = fp32
        if quantize is not None:
            int8 = staging / stage_graph_file(stage, quantize)
            with _quiet_root_logger():
                quantize_int8(fp32, int8, keep_fp32=FP32_NODE_PREFIXES)
            _set_metadata(int8, {**stage_metadata, "as2hub.quantization": INT8_DESCRIPTION})
            diffs = _stage_diffs(int8, stage_cases, io, config)
            report[f"{name}/{quantize}"] = {"file": int8.name, "layers": layers, **diffs}
            written[f"{name}/{quantize}"] = int8
            logger.info("%s cascade stage %d: %s vs torch (on a few dummy pairs)", quantize, stage, diffs)
    return written, report


def _stage_diffs(path: Path, cases, io, config) -> dict[str, float]:
    """The largest score difference of a stage graph vs the torch staged path on ``cases``, and (except the last
    stage) the largest hidden-state difference divided by ``max(1, max |hidden|)``."""
    ort = require_onnx()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    scores, hidden = 0.0, 0.0
    for case in cases:
        outputs = session.run(None, {key: case.inputs[key].numpy() for key in io.input_names})
        got = torch.from_numpy(outputs[-1])
        diff = probability_of_correct(got, config) - probability_of_correct(case.logits, config)
        scores = max(scores, float(diff.abs().max()))
        if case.hidden is not None:
            expected = case.hidden.float()
            scale = max(1.0, float(expected.abs().max()))
            hidden = max(hidden, float((torch.from_numpy(outputs[0]) - expected).abs().max()) / scale)
    diffs = {"max_abs_score_diff_vs_torch": scores}
    if len(io.output_names) > 1:
        diffs["max_rel_hidden_diff_vs_torch"] = hidden
    return diffs


def _read_record(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _drop_stale_graphs(target_dir: Path, weights: str, keep: set[Path], ends: list[int] = ()) -> None:
    """Remove as2hub graphs of older weights that this export did not rewrite (e.g. an int8 graph left from before),
    and cascade stage graphs of other stages than ``ends`` (the folder's cascade stages now)."""
    ort = require_onnx()
    stage_graphs = sorted(target_dir.glob(STAGE_GLOB))
    for path in [*(target_dir / name for name in GRAPH_FILES.values()), *stage_graphs]:
        if path in keep or not path.is_file():
            continue
        try:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            metadata = session.get_modelmeta().custom_metadata_map
        except Exception:  # noqa: BLE001 - an unreadable graph is left alone; loading it will say so
            continue
        exported_from = metadata.get(WEIGHTS_KEY)
        if exported_from is not None and exported_from != weights:
            logger.warning("removing %s: exported from other weights (re-export with --quantize to rebuild it)", path)
            path.unlink()
        elif path in stage_graphs and CASCADE_KEY in metadata:
            stage = json.loads(metadata[CASCADE_KEY]).get("stage", -1)
            if not 0 <= stage < len(ends) or metadata[CASCADE_KEY] != stage_record(stage, list(ends)):
                logger.warning("removing %s: a cascade stage graph of other cascade_layers", path)
                path.unlink()

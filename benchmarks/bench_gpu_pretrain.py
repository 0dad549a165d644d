"""GPU pre-training step time, tokens/s and MFU: as2hub's SSP models vs stock transformers, and whether on-the-fly
example generation keeps up.

For each pair, at each sequence length, on one CUDA GPU in bf16 autocast (``torch.autocast("cuda", torch.bfloat16)``,
fp32 master weights, ``torch.optim.AdamW(fused=True)``), base size (12 layers x 768, 12 heads, 3,072; random init):

(a) ``RobertaForSSPPretraining`` (MLM + DSLC sentence head, 3 segment ids, the MLM head on the masked rows only) vs
    stock ``RobertaForMaskedLM`` (full-vocabulary head on every position), vocabulary 50,265;
(b) ``ElectraForSSPPretraining`` (generator 1/3 wide + discriminator + sentence head) vs a stock
    ``ElectraForMaskedLM`` + ``ElectraForPreTraining`` wired by hand (``bench_pretrain_overhead.StockElectra``),
    vocabulary 30,522.

``--systems`` adds as2hub variants of the same model (issue 52): ``as2hub_unpadded`` (``config.unpadded``: the dense
layers compute the real tokens only), ``as2hub_compiled`` and ``as2hub_unpadded_compiled`` (``torch.compile``,
inductor, with the dynamo settings of ``SSPTrainer``; the compile happens in the warm-up steps), and
``as2hub_varlen_compiled`` (the unpadded compiled step with ``unpadding.ATTENTION_LAYOUT = "varlen"``: attention by
PyTorch's variable-length flash kernel on the gathered tokens, no padded layout; CUDA in bf16, elsewhere the padded
layout). A variant that fails on this machine is left out of the timing, with its error in the JSON's
``failed_systems``; as2hub and stock must run.

``papers_framework`` (RoBERTa only) is the step as the papers' own PyTorch-Lightning code runs it
(``lucadiliello/transformers-framework``, which the EMNLP 2022 and ACL 2023 papers were built on; its masked-LM +
sequence-classification pipeline as read on 2026-12-03, written here from that description): stock transformers
RoBERTa with eager attention (the framework pins transformers 4.29, before RoBERTa had SDPA), the MLM head's
vocabulary logits on every position, a RoBERTa classification head on the first token, an fp32 copy of the logits
for the accuracy it logs every step, the batch trimmed to its longest example (the framework pads each example to
the maximum length, then drops the columns that are padding in every row), and AdamW not fused (its default
optimizer). Left out: Lightning's own loop, and its default ``16-mixed`` precision (fp16 with a loss scaler; the
step here is bf16 like the others: the same tensor-core rate on Hopper).

Every system of a pair gets the same weights (the stock model a copy of as2hub's) and the same batch: DSLC examples of
the embedded corpus (or ``--corpus``) collated by ``PretrainingCollator`` and padded to the sequence length, so every
step has the same shape. ``--batch_size auto`` doubles the batch from 32 while both systems fit in memory and the
as2hub system's tokens/s still rise by 5% (the batch that fills the GPU), then times that batch. Steps are timed with
CUDA events, systems interleaved, median after warm-up; targets: as2hub / stock step time <= 1.0, MFU >= 40%.

MFU = model FLOPs per second / the GPU's dense bf16 peak (datasheet: H100 SXM and H200 989 TFLOP/s); the JSON also
gives the ratio to a measured 8192^3 bf16 matmul. Model FLOPs of a training step = 3 x forward FLOPs, forward =
per layer 2·T·(4H² + 2HI) + 4·B·S²·H (T = B·S tokens, padding included: the GPU computes it), plus the MLM head
2·M·(H² + HV) over the M positions it scores (stock: all T; as2hub: the masked ones), ELECTRA's generator layers and
discriminator head likewise. Each system is credited with its own work, so as2hub's smaller head shows as a shorter
step, not as a higher MFU (and an unpadded system's encoder with its real tokens). ``mfu_real_tokens`` credits every
system with the work on the real tokens only (the same formula with T = the non-padding tokens and the attention
term summed over each example's own length): what a user pays for.

``--profile_steps N`` (the kit's ``pretrain_speed`` passes 3): after the timing, ``torch.profiler`` records N steps
of the fastest system and the JSON's ``profile`` says where its step goes: the device's kernel time per step by kind
(``matmul``, ``attention``, ``fused`` (inductor's Triton kernels), ``optimizer``, ``copy``, ``other``), the 15 longest
kernels, and ``device_busy_fraction`` (kernel time / the timed step: well below 1 means the GPU waits for the CPU's
launches, which CUDA graphs remove; near 1 means the kernels themselves are what to make faster). On the CPU the same
record counts the operators' own CPU time, without the busy fraction (the profiler's records nest there and carry its
own cost).

Data: examples/s the training loop needs (batch / as2hub step time) against examples/s a
``torch.utils.data.DataLoader`` over ``StructurePretrainingIterableDataset`` + ``PretrainingCollator`` (what
``run_pretrain.py`` streams, with exact-resume position tracking) produces with N workers.

Usage on a CUDA machine (benchmarks/gpu/README.md)::

    python benchmarks/bench_gpu_pretrain.py                                  # both pairs, 128 and 256 tokens
    python benchmarks/bench_gpu_pretrain.py --pairs roberta --systems as2hub,stock,as2hub_unpadded,as2hub_unpadded_compiled
    python benchmarks/bench_gpu_pretrain.py --pairs roberta --seq_lengths 128 --systems as2hub,stock,as2hub_unpadded_compiled \
        --profile_steps 3                                                    # where the fastest step's time goes
    python benchmarks/bench_gpu_pretrain.py --device cpu --tiny --results /tmp/gpu_pretrain_smoke.json   # smoke

Writes ``benchmarks/results/gpu_pretrain.json``.
"""

import argparse
import copy
import itertools
import logging
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pretrain_overhead import build_electra, build_roberta, check_equivalence, loss_functions  # noqa: E402
from bench_utils import RESULTS_DIR, format_table, machine_info, now_iso, require_device, write_json  # noqa: E402

logger = logging.getLogger("bench_gpu_pretrain")
PAIRS = {"roberta": ("roberta", 50265), "electra": ("bert", 30522)}  # tokenizer style, model vocabulary
BASE = {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072}
TINY = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64}
# Dense bf16 tensor-core peaks from the vendors' datasheets (TFLOP/s, without sparsity).
DATASHEET_BF16_TFLOPS = {"H200": 989.4, "H100 80GB HBM3": 989.4, "H100 NVL": 835.0, "H100 PCIe": 756.0, "A100": 312.0}
TARGET_RATIO, TARGET_MFU = 1.0, 0.40
# as2hub variants (issue 52): name -> (config.unpadded, torch.compile, unpadding.ATTENTION_LAYOUT or None: its default)
VARIANTS = {
    "as2hub_unpadded": (True, False, None),
    "as2hub_compiled": (False, True, None),
    "as2hub_unpadded_compiled": (True, True, None),
    "as2hub_varlen_compiled": (True, True, "varlen"),
}
PAPERS = "papers_framework"  # the papers' framework's step (the docstring); RoBERTa only
OPTIONAL = (*VARIANTS, PAPERS)  # systems that may fail on a machine (left out, said) or not apply to a pair
EVERY_POSITION = ("stock", PAPERS)  # systems whose MLM head scores every position, not only the masked ones


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run)")
    parser.add_argument("--pairs", default="roberta,electra")
    parser.add_argument("--systems", default="as2hub,stock", help=f"as2hub and stock, and any of {', '.join(OPTIONAL)}")
    parser.add_argument("--seq_lengths", default="128,256")
    parser.add_argument("--batch_size", default="auto", help="an integer, or auto: the batch that fills the GPU")
    parser.add_argument("--max_batch_size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per system")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--workers", default="0,1,2,4,8", help="dataloader workers to measure example generation with")
    parser.add_argument("--data_batches", type=int, default=30, help="batches per data-throughput measurement")
    parser.add_argument("--corpus", default=None, help="corpus for the batches and the data test (default: pydoc)")
    parser.add_argument("--tiny", action="store_true", help="tiny models and batches (smoke runs, tests)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile_steps",
        type=int,
        default=0,
        help="after timing, profile this many steps of the fastest system (0: no profile)",
    )
    parser.add_argument("--results", default=str(RESULTS_DIR / "gpu_pretrain.json"))
    args = parser.parse_args(argv)
    args.pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    if set(args.pairs) - set(PAIRS):
        parser.error(f"--pairs: unknown {sorted(set(args.pairs) - set(PAIRS))}, use {sorted(PAIRS)}")
    args.systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    if not {"as2hub", "stock"} <= set(args.systems) or set(args.systems) - {"as2hub", "stock", *OPTIONAL}:
        parser.error(f"--systems: as2hub, stock and any of {list(OPTIONAL)}, got {args.systems}")
    args.seq_lengths = [int(v) for v in args.seq_lengths.split(",")]
    args.workers = [int(v) for v in args.workers.split(",")]
    for key, value in (TINY if args.tiny else BASE).items():
        setattr(args, key, value)
    return args


# --------------------------------------------------------------------------------------------------------------------
# Batches, FLOPs, timing


def documents(corpus):
    from as2hub.data_collators import load_documents

    loaded, _ = load_documents(corpus)
    return [row["paragraphs"] for row in loaded]


def tokenizer_for(style: str, docs, vocab_size: int):
    from as2hub.data_collators import train_tokenizer

    return train_tokenizer((" ".join(" ".join(p) for p in doc) for doc in docs), style=style, vocab_size=vocab_size)


def corpus_examples(objective: str, docs, count: int, seed: int) -> list[dict]:
    """``count`` examples of ``objective`` from the corpus, 16 documents per generation batch (cycled when it has
    fewer; MSPP: groups of 1 positive, 2 hard and 2 easy negatives, the paper's k = 5)."""
    from as2hub.data_collators import generate_examples

    examples = []
    for start in range(0, len(docs), 16):
        examples += generate_examples(objective, docs[start : start + 16], seed + start)
    random.Random(seed).shuffle(examples)
    return list(itertools.islice(itertools.cycle(examples), count))


def dslc_examples(docs, count: int, seed: int) -> list[dict]:
    """``count`` DSLC examples of the corpus (cycled when it has fewer)."""
    return corpus_examples("dslc", docs, count, seed)


def fixed_batch(tokenizer, examples, seq_length: int, seed: int) -> dict:
    from as2hub.data_collators import PretrainingCollator

    collator = PretrainingCollator(
        tokenizer, max_length=seq_length, num_token_types=3, pad_to_multiple_of=seq_length, seed=seed
    )
    return collator(examples)


def encoder_flops(tokens: int, batch: int, seq: int, hidden: int, intermediate: int, layers: int) -> float:
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * batch * seq * seq * hidden
    return layers * per_layer


def encoder_work(tokens: int, attention_squares: int, hidden: int, intermediate: int, layers: int) -> float:
    """Forward FLOPs of an encoder: dense layers on ``tokens``, attention over ``attention_squares`` = sum of S²."""
    return layers * (2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 4 * attention_squares * hidden)


def attends_per_example(attention_mask) -> bool:
    """Whether an eager unpadded step attends per example here (``unpadding``'s ``"auto"``: one CPU thread)."""
    from as2hub.modeling.ssp_pretraining.unpadding import unpadded_batch

    return unpadded_batch(attention_mask).sizes is not None


def training_flops(pair: str, system: str, model, batch: dict, real_only: bool = False) -> float:
    """Model FLOPs of one training step (3 x forward), each system credited with the work it does; ``real_only``:
    with the work on the real tokens only (dense layers on the non-padding tokens, attention over each example's own
    length, heads on the real tokens)."""
    batch_size, seq = batch["input_ids"].shape
    lengths = batch["attention_mask"].sum(1)
    real = int(lengths.sum())
    masked = int((batch["labels"] != -100).sum())
    tokens = batch_size * seq
    squares = batch_size * seq * seq
    if real_only:
        tokens, squares = real, int((lengths.long() ** 2).sum())
    dense_tokens = real if system in VARIANTS and VARIANTS[system][0] else tokens  # unpadded: the real tokens
    if system == "as2hub_unpadded" and attends_per_example(batch["attention_mask"]):
        squares = int((lengths.long() ** 2).sum())  # eager on one CPU thread: attention over each example's tokens
    if system in VARIANTS and VARIANTS[system][2] == "varlen" and batch["attention_mask"].is_cuda:
        squares = int((lengths.long() ** 2).sum())  # the flash varlen kernel: each example over its own tokens
    config = model.config if system != "stock" else model.discriminator.config if pair == "electra" else model.config
    h, v = config.hidden_size, config.vocab_size
    scored = tokens if system in EVERY_POSITION else masked  # stock heads score every position, as2hub's the masked
    flops = encoder_work(dense_tokens, squares, h, config.intermediate_size, config.num_hidden_layers)
    if pair == "roberta":
        flops += 2 * scored * (h * h + h * v)
        if system == PAPERS:  # its classification head on the first token: dense, then out_proj to 2 labels
            flops += 2 * batch_size * (h * h + 2 * h)
    else:
        generator = model.generator.config if system == "stock" else model.config.generator_config
        g = generator.hidden_size
        flops += encoder_work(
            dense_tokens, squares, g, generator.intermediate_size, generator.num_hidden_layers
        )  # the generator runs on every token
        flops += 2 * scored * (g * config.embedding_size + config.embedding_size * v)  # its MLM head
        flops += 2 * tokens * (h * h + h)  # discriminator head on every token
    return 3.0 * flops


class Timer:
    """Wall time of a step: CUDA events on the GPU, ``perf_counter`` on the CPU."""

    def __init__(self, device: str):
        self.device = device

    def __call__(self, step) -> float:
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)
        begin = time.perf_counter()
        step()
        return (time.perf_counter() - begin) * 1000


class PapersFrameworkStep(torch.nn.Module):
    """RoBERTa MLM + sentence-pair classification as the papers' framework computes a step (the module docstring):
    ``stock`` (a ``RobertaForMaskedLM``) switched to eager attention, plus a classification head on the first token;
    the loss is the MLM loss over every position's logits plus the pair loss. Call it with :func:`trimmed` batches."""

    def __init__(self, stock):
        from transformers.models.roberta.modeling_roberta import RobertaClassificationHead

        super().__init__()
        self.mlm = stock
        self.mlm.set_attn_implementation("eager")
        self.config = stock.config
        head_config = copy.deepcopy(stock.config)
        head_config.num_labels = 2
        self.head = RobertaClassificationHead(head_config)
        self.correct = None  # the accuracy's numerator of the last step, as the framework logs it

    def forward(self, input_ids, attention_mask, token_type_ids, labels, sentence_labels):
        hidden = self.mlm.roberta(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        logits = self.mlm.lm_head(hidden)  # (batch, length, vocabulary): every position
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
        loss = loss + torch.nn.functional.cross_entropy(self.head(hidden), sentence_labels)
        with torch.no_grad():  # its per-step metric, on an fp32 copy of the logits (no host sync here)
            self.correct = ((logits.float().argmax(-1) == labels) & (labels != -100)).sum()
        return loss


def trimmed(batch: dict) -> dict:
    """``batch`` without the columns that are padding in every row (the framework's trim: each batch as long as its
    longest example)."""
    longest = int(batch["attention_mask"].sum(1).max())
    return {k: v[:, :longest].contiguous() if v.dim() == 2 else v for k, v in batch.items()}


def system_batch(name: str, batch: dict) -> dict:
    """The batch system ``name`` trains on: the framework's trimmed one, else the padded one."""
    return trimmed(batch) if name == PAPERS else batch


def system_losses(pair: str, models: dict, batch: dict) -> dict:
    """{system: a function returning its loss on ``batch``} (``bench_pretrain_overhead.loss_functions`` for as2hub's
    and stock's, the framework's step on the trimmed batch)."""
    losses = loss_functions(pair, {k: m for k, m in models.items() if k != PAPERS}, batch)
    if PAPERS in models:
        papers_batch = trimmed(batch)
        losses[PAPERS] = lambda model=models[PAPERS]: model(**papers_batch)
    return losses


def with_attention_layout(loss_fn, layout: str | None):
    """``loss_fn`` with ``unpadding.ATTENTION_LAYOUT`` set to ``layout`` while the forward runs (``None``: as is); the
    backward replays what the forward chose."""
    if layout is None:
        return loss_fn
    from as2hub.modeling.ssp_pretraining import unpadding

    def loss():
        saved, unpadding.ATTENTION_LAYOUT = unpadding.ATTENTION_LAYOUT, layout
        try:
            return loss_fn()
        finally:
            unpadding.ATTENTION_LAYOUT = saved

    return loss


def make_step(model, loss_fn, device: str, fused: bool = True):
    """One bf16-autocast training step; AdamW fused on CUDA unless ``fused`` is false (torch's default there)."""
    fused = {"fused": True} if fused and device == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **fused)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def measured_matmul_tflops(device: str) -> float | None:
    if device != "cuda":
        return None
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    timer = Timer("cuda")
    times = [timer(lambda: a @ b) for _ in range(10)]
    return 2 * 8192**3 / (statistics.median(times) / 1000) / 1e12


def datasheet_peak(device: str) -> tuple[str | None, float | None]:
    if device != "cuda":
        return None, None
    name = torch.cuda.get_device_name()
    for key, value in DATASHEET_BF16_TFLOPS.items():
        if key in name:
            return name, value
    return name, None


# Kernel (or, on the CPU, operator) name fragments -> kind, first match wins (names lower-cased). Inductor's Triton
# kernels first (their names list what they fuse: a log-softmax or an index is not attention or a copy), then
# cuBLAS/cuBLASLt and CUTLASS GEMMs (sm90_xmma_gemm_*, nvjet_*, cutlass::*), flash / memory-efficient attention, the
# fused AdamW, layout and copy kernels; aten operator names for the CPU.
KERNEL_KINDS = (
    ("fused", ("triton",)),
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "aten::mm", "aten::addmm", "aten::bmm", "matmul")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("copy", ("copy", "memcpy", "memset", "index", "gather", "scatter", "nonzero", "aten::cat", "fill")),
)


def kernel_kind(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, fragments in KERNEL_KINDS if any(f in lowered for f in fragments)), "other")


def profile_step(step, steps: int, device: str, step_ms: float) -> dict:
    """Where a step's time goes: ``steps`` steps under ``torch.profiler``, each kernel's own device time (on the CPU
    each operator's own CPU time) per step, by :func:`kernel_kind` and the 15 longest; ``device_busy_fraction`` is that
    time over ``step_ms`` (the step timed without the profiler; on the GPU only)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    step()  # not the first call under the profiler: allocations and lazy initialization
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    kernels = []
    for event in prof.key_averages():
        if device == "cuda":
            if event.device_type != DeviceType.CUDA:
                continue
            own_us = event.self_device_time_total
        else:
            own_us = event.self_cpu_time_total
        if own_us > 0:
            kernels.append((event.key, kernel_kind(event.key), own_us / 1000 / steps, event.count / steps))
    if not kernels:
        logger.warning("profile: no %s time recorded (on a GPU: is CUPTI available?)", device)
    kernels.sort(key=lambda k: -k[2])
    total = sum(ms for _, _, ms, _ in kernels)
    kinds: dict[str, float] = {}
    for _, kind, ms, _ in kernels:
        kinds[kind] = kinds.get(kind, 0.0) + ms
    return {
        "steps": steps,
        "step_ms": step_ms,
        "kernel_ms_per_step": total,
        # CUPTI times kernels exactly; the CPU's operator records nest and carry the profiler's own cost: no fraction
        "device_busy_fraction": total / step_ms if device == "cuda" and step_ms else None,
        "by_kind": {
            kind: {"ms_per_step": ms, "share": ms / total if total else 0.0}
            for kind, ms in sorted(kinds.items(), key=lambda item: -item[1])
        },
        "top_kernels": [
            {
                "name": name[:200],
                "kind": kind,
                "ms_per_step": ms,
                "calls_per_step": calls,
                "share": ms / total if total else 0.0,
            }
            for name, kind, ms, calls in kernels[:15]
        ],
    }


# --------------------------------------------------------------------------------------------------------------------


def build_pair(pair: str, tokenizer, args):
    """{system: model}: as2hub's and stock's with the same weights, and each ``--systems`` variant a copy of
    as2hub's (a compiled one wrapped by ``torch.compile``)."""
    if pair == "roberta":
        ours, stock = build_roberta(tokenizer, args)
    else:
        ours, stock, _ = build_electra(tokenizer, args)
    models = {"as2hub": ours, "stock": stock}
    if PAPERS in args.systems and pair == "roberta":
        torch.manual_seed(args.seed)  # its classification head's initial weights
        models[PAPERS] = PapersFrameworkStep(copy.deepcopy(stock))
    for name in args.systems:
        if name in VARIANTS:
            unpadded, compiled, _ = VARIANTS[name]
            variant = copy.deepcopy(ours)
            variant.config.unpadded = unpadded
            models[name] = torch.compile(variant) if compiled else variant
    return models


def fits(models: dict, batch: dict, pair: str, device: str) -> bool:
    """One bf16 training step of each system at this batch size without running out of memory."""
    try:
        losses = loss_functions(pair, models, batch)
        for name, model in models.items():
            make_step(model, losses[name], device)()
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        for model in models.values():
            model.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.empty_cache()


def choose_batch_size(pair, models, tokenizer, examples, seq, args) -> tuple[int, list[dict]]:
    """The batch that fills the GPU: double from 32 while both systems fit and as2hub's tokens/s rise by >= 5%."""
    if args.batch_size != "auto":
        return int(args.batch_size), []
    tried, best, size = [], None, 32 if not args.tiny else 4
    while size <= args.max_batch_size:
        batch = {k: v.to(args.device) for k, v in fixed_batch(tokenizer, examples[:size], seq, args.seed).items()}
        if not fits(models, batch, pair, args.device):
            tried.append({"batch_size": size, "fits": False})
            break
        step = make_step(models["as2hub"], loss_functions(pair, models, batch)["as2hub"], args.device)
        timer = Timer(args.device)
        for _ in range(2):
            step()
        tokens_per_s = size * seq / (statistics.median(timer(step) for _ in range(3)) / 1000)
        tried.append({"batch_size": size, "fits": True, "as2hub_tokens_per_s": tokens_per_s})
        if best is not None and tokens_per_s < 1.05 * best[1]:
            break
        best = (size, tokens_per_s)
        size *= 2
    return (best[0] if best else 32), tried


def run_length(pair: str, seq: int, models: dict, initial: dict, tokenizer, examples, args, peak) -> dict:
    # The batch that fills the GPU and the eval-mode check: the padded as2hub and stock systems (a compiled variant
    # would compile for every batch tried; an unpadded one takes less memory than the padded one).
    reference = {name: models[name] for name in ("as2hub", "stock")}
    batch_size, tried = choose_batch_size(pair, reference, tokenizer, examples, seq, args)
    batch = {k: v.to(args.device) for k, v in fixed_batch(tokenizer, examples[:batch_size], seq, args.seed).items()}
    for name, model in models.items():  # the search trained them: back to the shared initial weights
        model.load_state_dict(initial[name])
    check = check_equivalence(pair, reference, batch, args.seed)
    losses = system_losses(pair, models, batch)
    steps = {
        name: make_step(
            model,
            with_attention_layout(losses[name], VARIANTS.get(name, (0, 0, None))[2]),
            args.device,
            fused=name != PAPERS,
        )  # fmt: skip
        for name, model in models.items()
    }
    timer = Timer(args.device)
    times = {name: [] for name in steps}
    failed = {}
    for index in range(args.warmup + args.steps):
        names = list(steps)
        shift = index % len(names)  # rotate: no system always runs right after the same other one
        for name in names[shift:] + names[:shift]:
            try:
                elapsed = timer(steps[name])
            except Exception as error:  # a variant this machine cannot run (a kernel, a compile): left out, said
                if name not in OPTIONAL:
                    raise
                failed[name] = f"{type(error).__name__}: {error}"[:2000]
                logger.warning("%s at %d tokens failed, left out of the timing: %s", name, seq, failed[name][:300])
                del steps[name], times[name]
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                continue
            if index >= args.warmup:
                times[name].append(elapsed)
    real_tokens = int(batch["attention_mask"].sum())
    systems = {}
    for name in steps:
        model, its_batch = models[name], system_batch(name, batch)
        tokens = its_batch["input_ids"].numel()  # padding included: what it computes
        ms = statistics.median(times[name])
        flops = training_flops(pair, name, model, its_batch)
        achieved = flops / (ms / 1000) / 1e12
        achieved_real = training_flops(pair, name, model, its_batch, real_only=True) / (ms / 1000) / 1e12
        systems[name] = {
            "median_ms": ms,
            "p25_ms": statistics.quantiles(times[name], n=4)[0] if len(times[name]) > 1 else ms,
            "p75_ms": statistics.quantiles(times[name], n=4)[2] if len(times[name]) > 1 else ms,
            "tokens_per_s": tokens / (ms / 1000),
            "non_padding_tokens_per_s": real_tokens / (ms / 1000),
            "examples_per_s": batch_size / (ms / 1000),
            "model_tflop_per_step": flops / 1e12,
            "achieved_tflops": achieved,
            "mfu": achieved / peak if peak else None,
            "achieved_tflops_real_tokens": achieved_real,
            "mfu_real_tokens": achieved_real / peak if peak else None,
            "peak_memory_gb": None,
        }
    if args.device == "cuda":
        for name, step in steps.items():
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            systems[name]["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    ratio = systems["as2hub"]["median_ms"] / systems["stock"]["median_ms"]
    for system in systems.values():
        system["real_tokens_per_s_vs_as2hub"] = (
            system["non_padding_tokens_per_s"] / systems["as2hub"]["non_padding_tokens_per_s"]
        )
    fastest = max(systems, key=lambda name: systems[name]["non_padding_tokens_per_s"])
    profiled = None
    if args.profile_steps > 0:
        profiled = {"system": fastest, **profile_step(steps[fastest], args.profile_steps, args.device,
                                                       systems[fastest]["median_ms"])}  # fmt: skip
        busy = profiled["device_busy_fraction"]
        logger.info(
            "profile of %s at %d tokens: %.1f ms of kernels a step (%s of the timed step); %s", fastest, seq,
            profiled["kernel_ms_per_step"], f"{busy:.0%}" if busy is not None else "-",
            ", ".join(f"{kind} {v['share']:.0%}" for kind, v in profiled["by_kind"].items()),
        )  # fmt: skip
    return {
        "seq_length": seq,
        "batch_size": batch_size,
        "trimmed_length": trimmed(batch)["input_ids"].shape[1],  # the papers' framework's batch: its longest example
        "batch_size_search": tried,
        "padding_fraction": 1 - real_tokens / batch["input_ids"].numel(),
        "masked_tokens": int((batch["labels"] != -100).sum()),
        "equivalence_check_eval_mode": check,
        "systems": systems,
        "ratio_as2hub_over_stock": ratio,
        "within_target_ratio": ratio <= TARGET_RATIO,
        "within_target_mfu": (systems["as2hub"]["mfu"] or 0) >= TARGET_MFU if peak else None,
        "fastest_system": fastest,
        "failed_systems": failed,
        "fastest_mfu_real_tokens": systems[fastest]["mfu_real_tokens"],
        "profile": profiled,
    }


def data_throughput(style: str, tokenizer, docs, seq: int, needed_per_s: float, args) -> dict:
    """Examples/s produced by run_pretrain's streaming pipeline with N dataloader workers, vs the training loop's need."""
    from as2hub.data_collators import PretrainingCollator, StructurePretrainingIterableDataset
    from as2hub.data_collators.objectives.stream_resume import PositionTrackingCollator

    batch_size = 32 if not args.tiny else 4
    out = {"needed_examples_per_s": needed_per_s, "batch_size": batch_size, "workers": {}}
    for workers in args.workers:
        dataset = StructurePretrainingIterableDataset(
            docs, "dslc", seed=args.seed, keep_provenance=False, track_positions=True, rank=0, world_size=1
        )
        collator = PositionTrackingCollator(
            PretrainingCollator(tokenizer, max_length=seq, num_token_types=3), seed=args.seed
        )
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, collate_fn=collator, num_workers=workers)
        iterator = iter(loader)
        for _ in range(min(3, args.data_batches)):  # worker start-up and first documents
            next(iterator)
        begin, produced = time.perf_counter(), 0
        for batch in itertools.islice(iterator, args.data_batches):
            produced += batch["input_ids"].shape[0]
        rate = produced / (time.perf_counter() - begin)
        out["workers"][workers] = {"examples_per_s": rate, "keeps_up": rate >= needed_per_s}
        del iterator, loader
    enough = [w for w, r in out["workers"].items() if r["keeps_up"]]
    out["fewest_workers_that_keep_up"] = min(enough) if enough else None
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    require_device(args.device, "bench_gpu_pretrain.py")
    torch.manual_seed(args.seed)
    docs = documents(args.corpus)
    gpu_name, peak = datasheet_peak(args.device)
    report = {
        "benchmark": "gpu_pretrain",
        "date": now_iso(),
        "machine": machine_info(),
        "device": args.device,
        "gpu": gpu_name,
        "dtype": "bf16 autocast, fp32 master weights, fused AdamW (papers_framework: AdamW not fused)",
        "datasheet_bf16_tflops": peak,
        "measured_bf16_matmul_tflops": measured_matmul_tflops(args.device),
        "settings": {k: v for k, v in vars(args).items() if k != "results"},
        "corpus_documents": len(docs),
        "targets": {"ratio_as2hub_over_stock": TARGET_RATIO, "mfu": TARGET_MFU},
        "pairs": {},
    }
    for pair in args.pairs:
        style, vocab = PAIRS[pair]
        args.model_vocab_size = vocab if not args.tiny else None
        args.vocab_size = 8000 if not args.tiny else 600
        tokenizer = tokenizer_for(style, docs, args.vocab_size)
        models = {name: model.to(args.device) for name, model in build_pair(pair, tokenizer, args).items()}
        initial = {name: {k: v.clone() for k, v in model.state_dict().items()} for name, model in models.items()}
        examples = dslc_examples(docs, args.max_batch_size, args.seed)
        record = {"parameters": {n: sum(p.numel() for p in m.parameters()) for n, m in models.items()}, "lengths": {}}
        if PAPERS in args.systems and PAPERS not in models:
            record["not_run"] = {PAPERS: "RoBERTa only: issue 52's target is RoBERTa-base; no ELECTRA step modelled"}
        for seq in args.seq_lengths:
            result = run_length(pair, seq, models, initial, tokenizer, examples, args, peak)
            result["data"] = data_throughput(
                style, tokenizer, docs, seq, result["systems"][result["fastest_system"]]["examples_per_s"], args
            )
            record["lengths"][seq] = result
            report["pairs"][pair] = record
            write_json(args.results, report)
        del models, initial
        if args.device == "cuda":
            torch.cuda.empty_cache()
    report["date_finished"] = now_iso()
    write_json(args.results, report)

    rows = []
    for pair, record in report["pairs"].items():
        for seq, result in record["lengths"].items():
            for name, system in result["systems"].items():
                rows.append([
                    pair, seq, result["batch_size"], f"{result['padding_fraction']:.0%}", name,
                    f"{system['median_ms']:.1f}", f"{system['tokens_per_s']:,.0f}",
                    f"{system['non_padding_tokens_per_s']:,.0f}", f"{system['real_tokens_per_s_vs_as2hub']:.2f}x",
                    f"{system['achieved_tflops']:.1f}", f"{system['mfu']:.1%}" if system["mfu"] is not None else "-",
                    f"{system['mfu_real_tokens']:.1%}" if system["mfu_real_tokens"] is not None else "-",
                    f"{result['ratio_as2hub_over_stock']:.3f}" if name == "as2hub" else "",
                    f"{result['data']['fewest_workers_that_keep_up']}" if name == result["fastest_system"] else "",
                ])  # fmt: skip
    print(f"\n{gpu_name or args.device}: bf16 training steps, median of {args.steps} after {args.warmup} warm-up")
    print(format_table(["pair", "seq", "batch", "padding", "system", "ms/step", "tokens/s", "real tokens/s",
                        "real vs as2hub", "TFLOP/s", "MFU", "MFU real tokens", "ratio", "workers to keep up"],
                       rows))  # fmt: skip
    for pair, record in report["pairs"].items():
        for seq, result in record["lengths"].items():
            for name, error in result["failed_systems"].items():
                print(f"{pair} {seq}: {name} failed, left out: {error[:300]}")
    print(f"wrote {args.results}")
    return report


if __name__ == "__main__":
    sys.exit(main() and 0)

"""The GPU lane (``pytest -m gpu``): every family trains, saves and reloads where users train it, on CUDA.

- A training step (forward, backward, optimizer step) of every family in fp32, bf16 autocast and fp16 with a grad
  scaler, on the CPU (ordinary tests: CPU autocast is a user path too, ``--bf16`` on an AMX/avx512_bf16 CPU) and on
  CUDA (the lane). The half-precision loss must match the fp32 loss of the same weights and batch within the dtype's
  tolerance, every gradient must be finite and the weights must move.
- On CUDA only: the trained folders reload in a fresh process without as2hub, on CUDA and on the CPU, with the same
  outputs (fp32 within 1e-4, bf16 within its tolerance); the joint own-slot mask gives the same logits through SDPA's
  CUDA kernels as through eager attention; every run script for a few steps with ``--bf16`` (recorded: the loss was
  computed under CUDA bf16 autocast); ``torchrun --nproc_per_node 1`` with NCCL; LoRA; ONNX export of a CUDA-trained
  folder.

Without CUDA the CUDA tests are skipped with the reason (``-ra`` shows it), so CI, which has no GPU, runs the CPU half.
``benchmarks/gpu/run_gpu_session.sh`` runs this lane, the whole suite and the GPU benchmarks on a lent GPU machine.
"""

import copy
import importlib
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import BACKBONES, BLOCK_AS2HUB
from test_longformer_qe import hand_batch
from test_longformer_qe import tiny_model as tiny_longformer
from test_run_as2 import as2_rows, write_jsonl
from test_ssp_models import make_batch, tiny
from transformers import AutoTokenizer, Trainer

from as2hub.data_collators import ContextualAS2Collator, JointCollator
from as2hub.modeling import CONTEXTUAL_MODELS, JointMultiCandidateModel
from as2hub.modeling.ssp_pretraining import BertForSSPPretraining, ElectraForSSPPretraining, RobertaForSSPPretraining

HAS_CUDA = torch.cuda.is_available()
NO_CUDA = (
    "GPU lane: needs CUDA (torch.cuda.is_available() is False on this machine); run `pytest -m gpu` on a CUDA machine "
    "(benchmarks/gpu/README.md)"
)
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, needs_cuda])
DEVICES = ["cpu", CUDA]

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# |half-precision loss - fp32 loss| / max(1, |fp32 loss|) for the tiny models below (measured on the CPU, 2026-11-25:
# at most 4e-3 for bf16 and 4e-4 for fp16), with room for CUDA's kernels.
LOSS_TOLERANCE = {"fp32": 1e-5, "bf16": 3e-2, "fp16": 1e-2}

K, L = 3, 16
QUESTION = "What is a generator?"
CANDIDATES = [
    "A function that yields values lazily.",
    "Generators are iterators built by yield.",
    "Modules are objects.",
]
CONTEXT = "Python has several kinds of callables."
FV_LABELS = {0: "SUPPORTS", 1: "REFUTES", 2: "NOT ENOUGH INFO"}


# --------------------------------------------------------------------------------------------------------------------
# One tiny model and one collated batch per family


def contextual(backbone):
    def build(stock_checkpoint, tokenizers):
        folder = stock_checkpoint(backbone)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        torch.manual_seed(0)
        model = CONTEXTUAL_MODELS[backbone][1].from_pretrained(folder, sep_token_id=tokenizer.sep_token_id)
        collator = ContextualAS2Collator(tokenizer, max_length=64, num_token_types=model.config.type_vocab_size)
        features = [{"question": QUESTION, "candidate": c, "context": CONTEXT, "label": i % 2} for i, c in
                    enumerate(CANDIDATES)]  # fmt: skip
        return model, tokenizer, collator(features)

    return build


def ssp(model_class):
    def build(stock_checkpoint, tokenizers):
        return tiny(model_class), None, make_batch(model_class)

    return build


def joint(backbone, head, attention, pretraining=False, attn_implementation="eager"):
    def build(stock_checkpoint, tokenizers):
        folder = stock_checkpoint(backbone)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        torch.manual_seed(0)
        extra = {"id2label": FV_LABELS, "label2id": {v: k for k, v in FV_LABELS.items()}} if head.endswith("_1") else {}
        model = JointMultiCandidateModel.from_pretrained(
            folder, pretraining=pretraining, num_candidates=K, slot_length=L, head=head, first_token_attention=attention,
            pad_token_id=tokenizer.pad_token_id, attn_implementation=attn_implementation, **extra,
        )  # fmt: skip
        if head.endswith("_1"):
            features = [{"claim": QUESTION, "evidences": CANDIDATES[:2], "label": 1}]
        else:
            features = [{"question": QUESTION, "candidates": CANDIDATES, "labels": [1, 1, 0]}]
        masking = {"mlm_probability": 0.3, "seed": 0, "label_name": "sentence_labels"} if pretraining else {}
        return model, tokenizer, JointCollator(tokenizer, K, L, **masking)(features * 2)

    return build


def longformer(stock_checkpoint, tokenizers):
    model = tiny_longformer()
    model.gradient_checkpointing_enable()
    return model, None, hand_batch()


FAMILIES = {
    **{f"contextual_{backbone}": contextual(backbone) for backbone in sorted(BACKBONES)},
    "ssp_roberta": ssp(RobertaForSSPPretraining),
    "ssp_bert": ssp(BertForSSPPretraining),
    "ssp_electra_with_generator": ssp(ElectraForSSPPretraining),
    "joint_bert_AE_k_own_slot_sdpa": joint("bert", "AE_k", "own_slot", attn_implementation="sdpa"),
    "joint_roberta_IE_k_all": joint("roberta", "IE_k", "all"),
    "joint_electra_AE_1_fv": joint("electra", "AE_1", "own_slot"),
    "joint_roberta_mspp": joint("roberta", "AE_k", "own_slot", pretraining=True),
    "longformer_qe_gradient_checkpointing": longformer,
}


def to_device(batch: dict, device) -> dict:
    return {key: value.to(device) if torch.is_tensor(value) else value for key, value in batch.items()}


def deterministic_loss(output) -> torch.Tensor:
    """The loss to compare across precisions: ELECTRA's total loss depends on which tokens the generator samples
    (a coin flip that half precision may turn), so its generator MLM loss, computed before sampling, stands in."""
    if getattr(output, "rtd_loss", None) is not None:
        return output.mlm_loss
    return output.loss


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", list(DTYPES))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_training_step_in_every_precision(family, precision, device, stock_checkpoint, tokenizers):
    model, _, batch = FAMILIES[family](stock_checkpoint, tokenizers)
    model.to(device).train()
    batch = to_device(batch, device)
    torch.manual_seed(0)
    with torch.no_grad():
        reference = deterministic_loss(model(**batch)).item()
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    dtype = DTYPES[precision]
    torch.manual_seed(0)
    with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        output = model(**batch)
    loss = output.loss
    assert torch.isfinite(loss), (family, precision)
    compared = deterministic_loss(output).item()
    assert abs(compared - reference) <= LOSS_TOLERANCE[precision] * max(1.0, abs(reference)), (compared, reference)
    if scaler is None:
        loss.backward()
        gradients = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
        assert gradients and all(torch.isfinite(g).all() for g in gradients)
        optimizer.step()
    else:
        # fp16: the scaler skips a step whose scaled gradients overflow and halves its scale (it starts at 2**16,
        # which ELECTRA's RTD weight of 50 overflows); a working recipe takes a step within a few tries.
        for _ in range(20):
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            if any(not torch.equal(parameter, before[name]) for name, parameter in model.named_parameters()):
                break
            with torch.autocast(device, dtype=dtype):
                loss = model(**batch).loss
        else:
            pytest.fail(f"fp16: the grad scaler took no step in 20 tries (scale {scaler.get_scale()})")
    moved = [name for name, parameter in model.named_parameters() if not torch.equal(parameter, before[name])]
    assert moved, f"{family} {precision}: no weight moved"
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())
    assert {parameter.device.type for parameter in model.parameters()} == {device}


# --------------------------------------------------------------------------------------------------------------------
# CUDA only: reload in a fresh process, SDPA, run scripts, torchrun with NCCL, LoRA, ONNX export

FRESH_PROCESS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json
    import torch, transformers
    cases = json.loads(sys.argv[1])
    report = {}
    for folder, (auto_name, key) in cases.items():
        auto = getattr(transformers, auto_name)
        batch = torch.load(f"{folder}/batch.pt")
        report[folder] = {}
        for device, dtype in (("cuda", torch.float32), ("cpu", torch.float32), ("cuda", torch.bfloat16)):
            model = auto.from_pretrained(folder, trust_remote_code=True, dtype=dtype).to(device).eval()
            assert "as2hub" not in type(model).__module__, type(model).__module__
            inputs = {k: v.to(device) for k, v in batch.items()}
            torch.manual_seed(0)
            with torch.no_grad():
                report[folder][f"{device}-{str(dtype).split('.')[-1]}"] = getattr(model(**inputs), key).float().cpu().tolist()
    print("REPORT" + json.dumps(report))
    """
)
RELOAD = {  # family -> (Auto class in the folder's auto_map, output compared)
    "contextual": ("AutoModelForSequenceClassification", "logits"),
    "ssp": ("AutoModelForPreTraining", "cls_logits"),
    "joint": ("AutoModel", "logits"),
    "joint_roberta_mspp": ("AutoModelForPreTraining", "cls_logits"),
    "longformer": ("AutoModelForQuestionAnswering", "sentence_logits"),
}


def unmasked(values) -> torch.Tensor:
    """Logits with masked positions (the dtype's minimum) set to 0, so fp32 and bf16 outputs compare."""
    values = torch.as_tensor(values, dtype=torch.float32)
    return torch.where(values < -1e4, torch.zeros_like(values), values)


@pytest.mark.gpu
@needs_cuda
def test_cuda_trained_folders_reload_in_a_fresh_process_on_cuda_and_cpu(stock_checkpoint, tokenizers, tmp_path):
    expected, cases = {}, {}
    for family, build in FAMILIES.items():
        model, tokenizer, batch = build(stock_checkpoint, tokenizers)
        model.to("cuda").train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(2):  # train on the GPU in bf16, as users do
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**to_device(batch, "cuda")).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        folder = tmp_path / family
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        inputs = {key: value for key, value in batch.items() if key != "labels" or family.startswith("ssp")}
        if family.startswith("ssp_electra"):  # the generator samples replacements; the head reads the sampled input
            inputs.pop("labels")
        torch.save(inputs, folder / "batch.pt")
        auto_name, key = RELOAD.get(family) or RELOAD[family.split("_")[0]]
        with torch.no_grad():
            expected[str(folder)] = getattr(model(**to_device(inputs, "cuda")), key).float().cpu()
        cases[str(folder)] = [auto_name, key]
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(cases)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("REPORT", 1)[1])
    for folder, reference in expected.items():
        outputs = report[folder]
        torch.testing.assert_close(unmasked(outputs["cuda-float32"]), unmasked(reference), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(unmasked(outputs["cpu-float32"]), unmasked(reference), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(unmasked(outputs["cuda-bfloat16"]), unmasked(reference), atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_own_slot_mask_through_sdpa_cuda_kernels_equals_eager(stock_checkpoint, tokenizers, backbone):
    logits = {}
    for implementation in ("eager", "sdpa"):
        model, _, batch = joint(backbone, "AE_k", "own_slot", attn_implementation=implementation)(
            stock_checkpoint, tokenizers
        )
        batch = to_device({k: v for k, v in batch.items() if k != "labels"}, "cuda")
        model.to("cuda").eval()
        with torch.no_grad():
            logits[implementation] = model(**batch).logits.float()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits[implementation + "-bf16"] = model(**batch).logits.float()
    torch.testing.assert_close(unmasked(logits["sdpa"]), unmasked(logits["eager"]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(unmasked(logits["sdpa-bf16"]), unmasked(logits["eager"]), atol=5e-2, rtol=5e-2)


class AutocastRecorder:
    """Records, for every training step Trainer takes, the device and dtype of the model's first linear layer's
    output: bf16 there proves the forward ran under bf16 autocast (Trainer applies it inside the model's forward)."""

    def __init__(self, monkeypatch):
        self.seen = []
        original = Trainer.training_step

        def record(module, inputs, output):
            self.seen.append((output.device.type, output.dtype))

        def training_step(trainer, model, inputs, *args, **kwargs):
            linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
            handle = linear.register_forward_hook(record)
            try:
                return original(trainer, model, inputs, *args, **kwargs)
            finally:
                handle.remove()

        monkeypatch.setattr(Trainer, "training_step", training_step)


def as2_files(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", as2_rows(repeat=4))
    dev = write_jsonl(tmp_path / "dev.jsonl", as2_rows())
    return ["--dataset", train, "--validation_file", dev, "--test_file", dev]


def run_script_cases(tmp_path, stock_checkpoint):
    """(script module, argv) of each run script, a few steps each."""
    from test_joint_runs import FV_ROWS
    from test_run_qe_contrastive import hotpot_records, write

    out = str(tmp_path / "out")
    few = ["--max_steps", "3", "--save_steps", "3", "--per_device_train_batch_size", "4", "--output_dir", out]
    bert = ["--model_name_or_path", str(stock_checkpoint("bert"))]
    pretrain = ["--eval_steps", "3", "--tokenizer_vocab_size", "800", "--eval_passes", "1", "--max_eval_samples", "64"]
    joint_shape = ["--num_candidates", str(K), "--slot_length", str(L)]
    hotpot = write(tmp_path / "hotpot.jsonl", hotpot_records())
    fv = write_jsonl(tmp_path / "fv.jsonl", FV_ROWS * 4)
    return {
        "run_as2_contextual": ("run_as2", [*bert, *as2_files(tmp_path), "--max_length", "48"]),
        "run_as2_pairwise": ("run_as2", [*bert, *as2_files(tmp_path), "--max_length", "48", "--pairwise"]),
        "run_pretrain_roberta": ("run_pretrain", pretrain),
        "run_pretrain_electra_generator": ("run_pretrain", [*pretrain, "--model_type", "electra"]),
        "run_pretrain_mspp": ("run_pretrain", [*pretrain, "--objective", "mspp", *joint_shape[:2], "--slot_length", "24"]),
        "run_joint_as2": ("run_joint", [*bert, *as2_files(tmp_path), *joint_shape]),
        "run_joint_fv": ("run_joint", ["--task", "fv", "--head", "IE_1", *bert, "--dataset", fv, "--validation_file",
                                       fv, "--test_file", fv, *joint_shape]),
        "run_qe_contrastive_gradient_checkpointing": (
            "run_qe_contrastive",
            ["--dataset", hotpot, "--validation_file", hotpot, "--test_file", hotpot, "--tokenizer_vocab_size", "300",
             "--gradient_checkpointing"],
        ),
    }, few  # fmt: skip


RUN_SCRIPTS = [
    "run_as2_contextual",
    "run_as2_pairwise",
    "run_pretrain_roberta",
    "run_pretrain_electra_generator",
    "run_pretrain_mspp",
    "run_joint_as2",
    "run_joint_fv",
    "run_qe_contrastive_gradient_checkpointing",
]


def run_script_with_bf16(name, tmp_path, stock_checkpoint, monkeypatch):
    import importlib

    cases, few = run_script_cases(tmp_path, stock_checkpoint)
    module, argv = cases[name]
    recorder = AutocastRecorder(monkeypatch)
    results = importlib.import_module(f"as2hub.run_scripts.{module}").main([*argv, *few, "--bf16"])
    assert (tmp_path / "out" / "config.json").is_file()
    return results, recorder.seen


@pytest.mark.parametrize("name", ["run_as2_contextual", "run_pretrain_roberta"])
def test_bf16_run_scripts_train_in_cpu_autocast(name, tmp_path, stock_checkpoint, monkeypatch):
    if HAS_CUDA:
        pytest.skip("this machine has CUDA: the run scripts train there (test_run_scripts_train_with_bf16_on_cuda)")
    _, seen = run_script_with_bf16(name, tmp_path, stock_checkpoint, monkeypatch)
    assert seen and set(seen) == {("cpu", torch.bfloat16)}, seen


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", RUN_SCRIPTS)
def test_run_scripts_train_with_bf16_on_cuda(name, tmp_path, stock_checkpoint, monkeypatch):
    _, seen = run_script_with_bf16(name, tmp_path, stock_checkpoint, monkeypatch)
    assert seen and set(seen) == {("cuda", torch.bfloat16)}, seen


@pytest.mark.gpu
@needs_cuda
def test_torchrun_one_process_with_nccl(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "nccl"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(port),
               "-m", "as2hub.run_scripts.run_pretrain", "--output_dir", str(out), "--ddp_backend", "nccl", "--bf16",
               "--max_steps", "3", "--save_steps", "3", "--eval_steps", "3", "--per_device_train_batch_size", "8",
               "--tokenizer_vocab_size", "800", "--eval_passes", "1"]  # fmt: skip
    env = {**os.environ, "NCCL_DEBUG": "INFO"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "NCCL INFO" in result.stdout + result.stderr, "the process group did not start NCCL"
    assert (out / "model.safetensors").is_file() and (out / "pretrain_results.json").is_file()


@pytest.mark.gpu
@needs_cuda
def test_lora_on_cuda_and_onnx_export_of_the_cuda_trained_folder(tmp_path, stock_checkpoint, monkeypatch):
    from as2hub.inference.ranking import Ranker
    from as2hub.run_scripts import run_as2

    recorder = AutocastRecorder(monkeypatch)
    out = tmp_path / "out"
    run_as2.main([
        "--model_name_or_path", str(stock_checkpoint("roberta")), *as2_files(tmp_path), "--output_dir", str(out),
        "--max_length", "48", "--max_steps", "3", "--per_device_train_batch_size", "4", "--learning_rate", "1e-3",
        "--bf16", "--use_lora", "--export_onnx", "--onnx_quantize", "int8",
    ])  # fmt: skip
    assert set(recorder.seen) == {("cuda", torch.bfloat16)}
    assert (out / "lora_adapter" / "adapter_config.json").is_file()
    assert (out / "onnx" / "model.onnx").is_file() and (out / "onnx" / "model_qint8_dynamic.onnx").is_file()
    contexts = [CONTEXT] * len(CANDIDATES)
    on_cuda = Ranker.from_pretrained(str(out))
    on_cuda.model.to("cuda")
    scores = {
        "cuda": on_cuda.score_pairs([QUESTION] * 3, CANDIDATES, contexts),
        "onnx": Ranker.from_pretrained(str(out), backend="onnx").score_pairs([QUESTION] * 3, CANDIDATES, contexts),
        "cpu": Ranker.from_pretrained(str(out)).score_pairs([QUESTION] * 3, CANDIDATES, contexts),
    }
    torch.testing.assert_close(scores["cuda"], scores["cpu"], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(scores["onnx"], scores["cpu"], atol=1e-4, rtol=1e-4)


def test_lane_builders_give_independent_models(stock_checkpoint, tokenizers):
    """The builders must not hand out one shared model (a step of one test would leak into the next)."""
    first, _, _ = FAMILIES["contextual_bert"](stock_checkpoint, tokenizers)
    second, _, _ = FAMILIES["contextual_bert"](stock_checkpoint, tokenizers)
    assert first is not second
    copied = copy.deepcopy(first.state_dict())
    with torch.no_grad():
        next(second.parameters()).add_(1.0)
    assert all(torch.equal(copied[name], value) for name, value in first.state_dict().items())


def test_fp16_without_cuda_stops_with_one_line_before_writing(tmp_path, stock_checkpoint, capsys):
    if HAS_CUDA:
        pytest.skip("this machine has CUDA: --fp16 is valid here")
    from as2hub.run_scripts import run_as2, run_joint, run_pretrain, run_qe_contrastive

    for script in (run_as2, run_joint, run_pretrain, run_qe_contrastive):
        out = tmp_path / script.__name__.rsplit(".", 1)[-1]
        assert script.cli(["--output_dir", str(out), "--fp16", "--max_steps", "1"]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("error: --fp16 needs a CUDA GPU"), error
        assert "--bf16" in error[0] and not out.exists()


# --------------------------------------------------------------------------------------------------------------------
# The GPU benchmarks: a clear stop without CUDA; the pre-training benchmark's logic on the CPU (tiny sizes)

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_module(name: str):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_gpu_benchmark_without_cuda_stops_with_one_line(tmp_path):
    if HAS_CUDA:
        pytest.skip("this machine has CUDA")
    results = tmp_path / "gpu_pretrain.json"
    command = [sys.executable, str(BENCHMARKS / "bench_gpu_pretrain.py"), "--results", str(results)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "--device cpu" in lines[0], lines
    assert not results.exists()


@pytest.mark.parametrize("pair", ["roberta", "electra"])
def test_training_flops_match_torch_flop_counter(pair):
    """The MFU numerator (an analytic count) against torch's own count of the step's matmul and attention FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    bench = benchmark_module("bench_gpu_pretrain")
    args = bench.parse_args(
        ["--device", "cpu", "--tiny", "--batch_size", "4", "--systems", "as2hub,stock,as2hub_unpadded,papers_framework"]
    )
    args.model_vocab_size, args.vocab_size = 3000, 600
    docs = bench.documents(None)
    tokenizer = bench.tokenizer_for(bench.PAIRS[pair][0], docs, args.vocab_size)
    models = bench.build_pair(pair, tokenizer, args)
    assert ("papers_framework" in models) == (pair == "roberta")  # the papers' framework's step: RoBERTa only
    batch = bench.fixed_batch(tokenizer, bench.dslc_examples(docs, 4, 0), 256, 0)
    lengths = batch["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1 and int(lengths.max()) < 256  # padding left after the framework's trim
    losses = bench.system_losses(pair, models, batch)
    flops = {}
    for name, model in models.items():
        its_batch = bench.system_batch(name, batch)
        with FlopCounterMode(display=False) as counter:
            losses[name]().backward()
        counted, flops[name] = counter.get_total_flops(), bench.training_flops(pair, name, model, its_batch)
        assert flops[name] == pytest.approx(counted, rel=0.02), (name, flops[name], counted)
        # The work on the real tokens: less than what a padded system computes (all an unpadded one does when it
        # attends per example, on one CPU thread).
        real = bench.training_flops(pair, name, model, its_batch, real_only=True)
        assert real < flops[name] if name != "as2hub_unpadded" else real <= flops[name]
    assert flops["as2hub"] < flops["stock"]  # as2hub's MLM head scores the masked rows only
    assert flops["as2hub_unpadded"] < flops["as2hub"]  # its dense layers skip the padding
    if pair == "roberta":  # the trimmed batch: less than stock's padded work, more than as2hub's masked-row head
        assert flops["as2hub"] < flops["papers_framework"] < flops["stock"]


def test_the_papers_framework_step_is_stock_mlm_plus_a_pair_loss_on_the_trimmed_batch():
    """The ``papers_framework`` system of ``bench_gpu_pretrain.py``: eager attention on the batch trimmed to its
    longest example gives stock's padded SDPA MLM loss (eval mode), plus the pair loss of its head on the first token;
    its logits cover every position of the trimmed batch; its step's AdamW is not fused."""
    bench = benchmark_module("bench_gpu_pretrain")
    args = bench.parse_args(
        ["--device", "cpu", "--tiny", "--pairs", "roberta", "--systems", "as2hub,stock,papers_framework"]
    )
    args.model_vocab_size, args.vocab_size = 3000, 600
    docs = bench.documents(None)
    tokenizer = bench.tokenizer_for("roberta", docs, args.vocab_size)
    models = bench.build_pair("roberta", tokenizer, args)
    stock, papers = models["stock"].eval(), models["papers_framework"].eval()
    assert papers.mlm.config._attn_implementation == "eager" and stock.config._attn_implementation == "sdpa"
    batch = bench.fixed_batch(tokenizer, bench.dslc_examples(docs, 4, 0), 256, 0)
    short = bench.trimmed(batch)
    assert (
        short["input_ids"].shape == (4, int(batch["attention_mask"].sum(1).max())) and short["input_ids"].shape[1] < 256
    )
    assert short["sentence_labels"] is batch["sentence_labels"]
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    with torch.no_grad():
        stock_out = stock(**inputs, output_hidden_states=True)
        pair_loss = torch.nn.functional.cross_entropy(
            papers.head(stock_out.hidden_states[-1]), batch["sentence_labels"]
        )
        loss = papers(**short)
    assert float(loss) == pytest.approx(float(stock_out.loss + pair_loss), abs=1e-5)
    assert int(papers.correct) == int(
        ((stock_out.logits.argmax(-1) == batch["labels"]) & (batch["labels"] != -100)).sum()
    )
    created = []

    class Recording(torch.optim.AdamW):
        def __init__(self, *a, **kw):
            created.append(kw.get("fused"))
            super().__init__(*a, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim, "AdamW", Recording)
        bench.make_step(papers, lambda: papers(**short), "cuda", fused=False)
        bench.make_step(stock, lambda: stock(**inputs).loss, "cuda")
    assert created == [None, True]  # built only (no step on a CPU machine): fused for as2hub's and stock's


# Kernel names as CUDA 12/13 builds of torch 2.11 and inductor name them in a profile, and the kind each belongs to.
KERNEL_NAMES = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off": "matmul",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN": "matmul",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(T1::Params)": "matmul",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>":
        "attention",
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<...>::Params)":
        "attention",
    "triton_poi_fused_add_native_layer_norm_0": "fused",
    "triton_red_fused_native_layer_norm_backward_3": "fused",
    "triton_per_fused__log_softmax_nll_loss_forward_7": "fused",  # the MLM loss, not attention
    "triton_poi_fused_index_select_scatter_2": "fused",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, ...>": "other",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>": "optimizer",
    "Memcpy DtoD (Device -> Device)": "copy",
    "void at::native::index_elementwise_kernel<128, 4, ...>": "copy",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl<...>>": "other",
    "aten::addmm": "matmul",
    "aten::_foreach_mul_": "optimizer",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(KERNEL_NAMES))
def test_profile_kernel_kinds(name):
    assert benchmark_module("bench_gpu_pretrain").kernel_kind(name) == KERNEL_NAMES[name]


def test_gpu_pretrain_benchmark_leaves_out_a_variant_that_fails(tmp_path, monkeypatch, capsys):
    """A variant that cannot run (here an attention layout that does not exist, set around its forward) is left out
    of the timing with its error in ``failed_systems``; the others are timed."""
    bench = benchmark_module("bench_gpu_pretrain")
    monkeypatch.setitem(bench.VARIANTS, "as2hub_varlen_compiled", (True, False, "no-such-layout"))
    results = tmp_path / "gpu_pretrain.json"
    bench.main(["--device", "cpu", "--tiny", "--pairs", "roberta", "--batch_size", "4", "--seq_lengths", "32",
                "--steps", "1", "--warmup", "1", "--workers", "0", "--data_batches", "1",
                "--systems", "as2hub,stock,as2hub_unpadded,as2hub_varlen_compiled", "--results", str(results)])  # fmt: skip
    length = json.loads(results.read_text())["pairs"]["roberta"]["lengths"]["32"]
    assert set(length["systems"]) == {"as2hub", "stock", "as2hub_unpadded"}
    assert list(length["failed_systems"]) == ["as2hub_varlen_compiled"]
    assert "attention layout must be one of" in length["failed_systems"]["as2hub_varlen_compiled"]
    assert "as2hub_varlen_compiled failed, left out" in capsys.readouterr().out
    from as2hub.modeling.ssp_pretraining import unpadding

    assert unpadding.ATTENTION_LAYOUT == "auto"  # restored after each forward


@pytest.mark.slow
def test_gpu_pretrain_benchmark_runs_on_the_cpu_at_tiny_size(tmp_path):
    results = tmp_path / "gpu_pretrain.json"
    command = [sys.executable, str(BENCHMARKS / "bench_gpu_pretrain.py"), "--device", "cpu", "--tiny",
               "--batch_size", "4", "--seq_lengths", "32", "--steps", "2", "--warmup", "1", "--workers", "0,1",
               "--data_batches", "2", "--systems", "as2hub,stock,as2hub_unpadded", "--profile_steps", "2",
               "--results", str(results)]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(results.read_text())
    assert report["device"] == "cpu" and report["gpu"] is None
    for pair in ("roberta", "electra"):
        length = report["pairs"][pair]["lengths"]["32"]
        assert length["equivalence_check_eval_mode"]["equal"], length["equivalence_check_eval_mode"]
        systems = length["systems"]
        assert systems["as2hub"]["model_tflop_per_step"] < systems["stock"]["model_tflop_per_step"]
        assert length["ratio_as2hub_over_stock"] == pytest.approx(
            systems["as2hub"]["median_ms"] / systems["stock"]["median_ms"]
        )
        unpadded, padded = (systems[name]["model_tflop_per_step"] for name in ("as2hub_unpadded", "as2hub"))
        assert unpadded < padded if length["padding_fraction"] > 0 else unpadded == pytest.approx(padded)
        for system in systems.values():
            assert 0 < system["achieved_tflops_real_tokens"] <= system["achieved_tflops"]
        profiled = length["profile"]  # the fastest system's step, operator by operator
        assert profiled["system"] == length["fastest_system"] and profiled["steps"] == 2
        assert sum(kind["share"] for kind in profiled["by_kind"].values()) == pytest.approx(1.0)
        assert profiled["by_kind"]["matmul"]["ms_per_step"] > 0  # the encoder's projections
        assert profiled["kernel_ms_per_step"] == pytest.approx(
            sum(kind["ms_per_step"] for kind in profiled["by_kind"].values())
        )
        top = [kernel["ms_per_step"] for kernel in profiled["top_kernels"]]
        assert top == sorted(top, reverse=True) and 0 < len(top) <= 15
        assert profiled["device_busy_fraction"] is None  # on the GPU only: CPU records nest
        data = length["data"]
        assert set(data["workers"]) == {"0", "1"} and data["needed_examples_per_s"] > 0
        assert all(w["examples_per_s"] > 0 for w in data["workers"].values())
    assert "| roberta | 32" in result.stdout


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_layer_cascade_on_cuda_keeps_the_stage_counts_and_equals_the_full_model_at_drop_zero(tokenizers, backbone):
    from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model

    from as2hub.inference.ranking import Ranker

    model, tokenizer = cascade_model(tokenizers, backbone)
    cpu = Ranker(model, tokenizer).rank(QUESTION, CANDIDATES, CONTEXTS, cascade_drop=0.5)
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 0.05)):
        ranker = Ranker(model.to(device="cuda", dtype=dtype), tokenizer)
        full = ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, CONTEXTS).tolist()
        at_zero = ranker.rank(QUESTION, CANDIDATES, CONTEXTS, cascade_drop=0.0)
        assert {c.index: c.score for c in at_zero} == pytest.approx(dict(enumerate(full)), abs=1e-5)
        ranked = ranker.rank(QUESTION, CANDIDATES, CONTEXTS, cascade_drop=0.5)
        assert [c.layer for c in ranked] == [4, 4, 4, 3, 3, 1, 1, 1, 1, 1]
        if dtype == torch.float32:  # the same drops and order as on the CPU
            assert [c.index for c in ranked] == [c.index for c in cpu]
            assert [c.score for c in ranked] == pytest.approx([c.score for c in cpu], abs=tolerance)
        model = model.to(device="cpu", dtype=torch.float32)


# The variable-length flash-attention layout of the unpadded pre-training pass (``unpadding.ATTENTION_LAYOUT =
# "varlen"``, issue 52): CUDA only, so these run in the lane; the CPU tests of the layout (tests/test_unpadded.py) hand
# the same arguments to a sequence-by-sequence reference.
VARLEN_LENGTHS = [16, 11, 7, 4, 13, 5]


def varlen_inputs(heads: int = 2, head_size: int = 64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    tokens = sum(VARLEN_LENGTHS)
    qkv = [torch.randn(tokens, heads, head_size, generator=generator).cuda() for _ in range(3)]
    cu_seqlens = torch.tensor([0, *torch.tensor(VARLEN_LENGTHS).cumsum(0).tolist()], dtype=torch.int32).cuda()
    return qkv, cu_seqlens


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("max_length", [16, 64], ids=["longest", "an upper bound"])
def test_flash_varlen_attention_equals_attention_sequence_by_sequence(max_length):
    """bf16 flash kernel against fp32 PyTorch attention over each sequence alone: outputs and the gradients of the
    queries, keys and values (no dropout); ``max_length`` may be the padded length rather than the longest."""
    from test_unpadded import sequence_by_sequence_attention

    from as2hub.modeling.ssp_pretraining.unpadding import flash_varlen_attention

    (query, key, value), cu_seqlens = varlen_inputs()
    weights = torch.randn_like(query)
    results = {}
    for name, dtype in (("flash", torch.bfloat16), ("reference", torch.float32)):
        leaves = [t.to(dtype).requires_grad_() for t in (query, key, value)]
        attend = flash_varlen_attention if name == "flash" else sequence_by_sequence_attention
        output = attend(*leaves, cu_seqlens, max_length, 0.0, 64**-0.5)
        (output.float() * weights).sum().backward()
        results[name] = [output.float(), *(leaf.grad.float() for leaf in leaves)]
    for actual, expected in zip(results["flash"], results["reference"]):
        torch.testing.assert_close(actual, expected, atol=3e-2, rtol=3e-2)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.usefixtures("data_dependent_shapes")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flash_varlen_dropout_backward_uses_the_forward_mask(compiled):
    """With attention dropout, one-hot values make the output the dropped-out attention weights themselves, so the
    values' gradient must be ``output^T @ upstream`` sequence by sequence: true only if the backward draws the
    forward's mask again (compiled too: AOT autograd saves the kernel's RNG state). The same seed draws the same
    mask, whatever bound ``max_length`` gives; the output differs from the one without dropout."""
    from as2hub.modeling.ssp_pretraining import unpadding

    flash_varlen_attention = unpadding.flash_varlen_attention
    if compiled:
        torch._dynamo.reset()
        flash_varlen_attention = torch.compile(flash_varlen_attention, fullgraph=True)

    (query, key, _), cu_seqlens = varlen_inputs()
    positions = torch.cat([torch.arange(length) for length in VARLEN_LENGTHS]).cuda()
    value = torch.nn.functional.one_hot(positions, 64)[:, None, :].expand(-1, 2, -1).to(torch.bfloat16)
    query, key = query.bfloat16(), key.bfloat16()
    upstream = torch.randn(query.shape, device="cuda").bfloat16()
    value = value.clone().requires_grad_()
    torch.manual_seed(3)
    output = flash_varlen_attention(query, key, value, cu_seqlens, 16, 0.1, 64**-0.5)
    (output.float() * upstream.float()).sum().backward()
    starts = cu_seqlens.tolist()
    for start, end in zip(starts, starts[1:]):
        weights = output[start:end, :, : end - start].float()  # (its tokens, heads, keys): the kept weights / 0.9
        expected = torch.einsum("ihj,ihd->jhd", weights, upstream[start:end].float())
        torch.testing.assert_close(value.grad[start:end].float(), expected, atol=2e-2, rtol=2e-2)
    for max_length in (16, 64):
        torch.manual_seed(3)
        again = flash_varlen_attention(query, key, value.detach(), cu_seqlens, max_length, 0.1, 64**-0.5)
        assert torch.equal(again, output.detach()), max_length
    plain = flash_varlen_attention(query, key, value.detach(), cu_seqlens, 16, 0.0, 64**-0.5)
    assert not torch.allclose(plain.float(), output.detach().float(), atol=1e-3)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.usefixtures("data_dependent_shapes")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("model_class", [RobertaForSSPPretraining, BertForSSPPretraining], ids=lambda c: c.__name__)
def test_varlen_layout_step_equals_the_padded_layout_on_cuda(model_class, compiled, monkeypatch):
    """An unpadded bf16 training step with the flash varlen layout against the padded layout on the same weights
    and batch: the same losses and gradients within bf16's tolerance; compiled (inductor, ``fullgraph``, the trainer's
    dynamo settings) as one graph. (ELECTRA's generator samples from bf16 logits: a sample may differ between the
    layouts, so the deterministic families compare.)"""
    from test_unpadded import UNPADDING_MODULES, ssp_batch

    batch = to_device(ssp_batch(model_class, "heavy"), "cuda")
    runs = {}
    for layout in ("padded", "varlen"):
        for module in UNPADDING_MODULES:
            monkeypatch.setattr(module, "ATTENTION_LAYOUT", layout)
        model = tiny(model_class, unpadded=True).train().cuda()  # the same weights each time (seeded)
        if compiled:
            torch._dynamo.reset()
            model = torch.compile(model, fullgraph=True)
        torch.manual_seed(1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outputs = model(**batch)
        outputs.loss.backward()
        runs[layout] = (outputs, {n.removeprefix("_orig_mod."): p.grad for n, p in model.named_parameters()})
    for key in ("loss", "mlm_loss", "cls_loss"):
        torch.testing.assert_close(runs["varlen"][0][key], runs["padded"][0][key], atol=3e-2, rtol=3e-2, msg=key)
    for name, grad in runs["padded"][1].items():
        if grad is not None:
            torch.testing.assert_close(runs["varlen"][1][name], grad, atol=5e-2, rtol=5e-2, msg=name)


@pytest.mark.gpu
@needs_cuda
def test_varlen_kernel_is_chosen_for_half_precision_cuda_activations_it_supports():
    from as2hub.modeling.ssp_pretraining.unpadding import flash_varlen_attention, varlen_kernel

    half = torch.zeros(4, 3 * 64, device="cuda", dtype=torch.bfloat16)
    assert varlen_kernel(half, 64) is flash_varlen_attention
    assert varlen_kernel(half.half(), 64) is flash_varlen_attention
    assert varlen_kernel(half.float(), 64) is None  # fp32: the padded layout
    assert varlen_kernel(torch.zeros(4, 3 * 36, device="cuda", dtype=torch.bfloat16), 36) is None  # not a multiple of 8

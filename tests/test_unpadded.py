"""The unpadded pre-training pass (``config.unpadded``, ``unpadding.py``): the same weights give the same losses,
per-token outputs and gradients as the padded pass, for every SSP family and for MSPP's slots in the joint model;
evaluation keeps the padded pass unless a forward asks for the unpadded one (``unpadded=True``, the pre-training
trainer's held-out evaluation), which gives the same outputs; a folder saved with the flag loads without as2hub and computes what it did.

Tolerance (fp32): losses, logits and hidden states within 1e-6 absolute + 1e-5 relative, gradients within 1e-5
absolute + 1e-4 relative. Measured on the project's CPU machine (AMD EPYC, AVX2, torch 2.13, transformers 5.24) over
every case below: losses and logits differ by at most 2.4e-7 with the per-example attention layout (3.0e-8 with the
padded one), gradients by at most 2.4e-7 (the fused query/key/value product, the gathered rows and the per-example
attention sum in another order): 4x to 40x below the bounds, which sit far below what a misplaced token does (1e-2).

Tried by breaking the code: every token given the result of the row before it fails 30 of the 32 fast tests here (the
two that pass check which pass runs), one token dropped from the batch 30, the per-example attention fed another
example's tokens 22 (every test of that layout), the padded attention layout fed tokens shifted by one 8 (every test
of that layout).
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import BLOCK_AS2HUB
from test_ssp_models import SEP, VOCAB, tiny
from transformers import BertConfig, ElectraConfig, RobertaConfig

from as2hub.modeling import JointMultiCandidateModel
from as2hub.modeling.joint_multicandidate import unpadding as joint_unpadding
from as2hub.modeling.ssp_pretraining import (
    BertForSSPPretraining,
    ElectraForSSPPretraining,
    RobertaForSSPPretraining,
    unpadding,
)

SSP = [RobertaForSSPPretraining, BertForSSPPretraining, ElectraForSSPPretraining]


# Each folder imports its own copy of the shared file (the joint folder's is a link to the SSP folder's).
UNPADDING_MODULES = (unpadding, joint_unpadding)


def attention_layout(monkeypatch, layout: str) -> None:
    for module in UNPADDING_MODULES:
        monkeypatch.setattr(module, "ATTENTION_LAYOUT", layout)


@pytest.fixture(autouse=True)
def per_example_attention(monkeypatch):
    """The per-example attention layout whatever the thread count ("auto" takes it at one thread); the padded
    layout has tests of its own."""
    attention_layout(monkeypatch, "per_example")


CLOSE = {"atol": 1e-6, "rtol": 1e-5}
GRADIENT_CLOSE = {"atol": 1e-5, "rtol": 1e-4}
LENGTH = 16
# Real tokens per row: "heavy" leaves 53% of the batch as padding, rows of every length; "none" has no padding.
ROW_LENGTHS = {"heavy": [16, 11, 7, 4, 13, 5], "none": [LENGTH] * 4}


def ssp_batch(model_class, padding: str, seed: int = 0) -> dict:
    """Pairs ``CLS a SEP b SEP`` of the given lengths (then padding): distinct random tokens in every row, 3 masked
    tokens per row, labels 1 and 0 alternating, segment ids as a tokenizer gives them."""
    generator = torch.Generator().manual_seed(seed)
    roberta = model_class is RobertaForSSPPretraining
    sep, cls, pad, mask = SEP[model_class], (0 if roberta else 2), (1 if roberta else 0), 4
    lengths = ROW_LENGTHS[padding]
    ids = torch.full((len(lengths), LENGTH), pad)
    types = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(5, VOCAB, (length,), generator=generator)
        middle = length // 2
        ids[row, 0], ids[row, middle], ids[row, length - 1] = cls, sep, sep
        types[row, middle + 1 : length] = 1
        for position in torch.randperm(length - 2, generator=generator)[:3] + 1:
            if position != middle:
                labels[row, position] = ids[row, position]
                ids[row, position] = mask
    attention = (torch.arange(LENGTH)[None] < torch.tensor(lengths)[:, None]).long()
    sentence_labels = torch.arange(len(lengths)) % 2
    return dict(
        input_ids=ids, attention_mask=attention, token_type_ids=types, labels=labels, sentence_labels=sentence_labels
    )


def twins(build):
    """(padded model, unpadded model) with the same weights, in training mode (dropout is 0 in these configs)."""
    padded, unpadded = build(False), build(True)
    unpadded.load_state_dict(padded.state_dict())
    return padded.train(), unpadded.train()


def run(model, batch, seed=1):
    """Outputs and parameter gradients of one training forward + backward (seeded: ELECTRA samples)."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    outputs = model(**batch)
    outputs.loss.backward()
    return outputs, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_same_step(padded_run, unpadded_run, real: torch.Tensor, keys):
    (padded, padded_grads), (unpadded, unpadded_grads) = padded_run, unpadded_run
    for key in keys:
        expected, actual = padded[key], unpadded[key]
        if expected is not None and expected.dim() >= 2 and expected.shape[:2] == real.shape:  # per token
            expected, actual = expected[real], actual[real]
        torch.testing.assert_close(actual, expected, **CLOSE, msg=key)
    assert unpadded_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(unpadded_grads[name], grad, **GRADIENT_CLOSE, msg=name)


@pytest.mark.parametrize("padding", sorted(ROW_LENGTHS))
@pytest.mark.parametrize("model_class", SSP, ids=lambda c: c.__name__)
def test_ssp_unpadded_step_equals_the_padded_step(model_class, padding, monkeypatch):
    """Total, MLM (ELECTRA: generator), RTD and sentence losses, per-token MLM (and RTD) logits at the real tokens,
    per-row sentence logits, and every gradient."""
    padded, unpadded = twins(lambda flag: tiny(model_class, unpadded=flag, return_mlm_logits=True))
    batch = ssp_batch(model_class, padding)
    keys = ["loss", "mlm_loss", "cls_loss", "cls_logits", "mlm_logits", "cls_accuracy"]
    if model_class is ElectraForSSPPretraining:
        keys += ["rtd_loss", "rtd_logits", "rtd_labels"]
    padded_run = run(padded, batch)
    calls = []
    encode = unpadding.unpadded_encode
    module = sys.modules[type(unpadded).__module__]
    monkeypatch.setattr(module, "unpadded_encode", lambda *args, **kwargs: calls.append(1) or encode(*args, **kwargs))
    unpadded_run = run(unpadded, batch)
    assert len(calls) == (2 if model_class is ElectraForSSPPretraining else 1)  # ELECTRA: the generator too
    assert_same_step(padded_run, unpadded_run, batch["attention_mask"].bool(), keys)


@pytest.mark.parametrize("layout", ["per_example", "padded", "grouped"])
@pytest.mark.parametrize("model_class", SSP, ids=lambda c: c.__name__)
def test_every_token_gets_its_own_rows_hidden_state(model_class, layout):
    """The encoder alone, with each CPU attention layout: at every real token the stock padded pass's hidden state,
    zeros at the padding."""
    model = tiny(model_class).train()
    batch = ssp_batch(model_class, "heavy")
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids")}
    encoders = [model.base_model] + ([model.generator] if model_class is ElectraForSSPPretraining else [])
    real = batch["attention_mask"].bool()
    plan = unpadding.unpadded_batch(batch["attention_mask"], layout=layout)
    assert (plan.sizes is not None) == (layout == "per_example") and (plan.groups is not None) == (layout == "grouped")
    for encoder in encoders:
        expected = encoder(**inputs).last_hidden_state
        actual = unpadding.unpadded_encode(encoder, **inputs, plan=plan).last_hidden_state
        torch.testing.assert_close(actual[real], expected[real], **CLOSE)
        assert actual[~real].eq(0).all()


def test_auto_attends_per_example_with_one_thread_in_groups_with_more_else_padded(monkeypatch):
    """``"auto"`` in eager CPU steps: per example with one torch thread, grouped by length with more (the joint
    model's slots, a pattern of their own: padded); compiled: padded."""
    mask = ssp_batch(BertForSSPPretraining, "heavy")["attention_mask"]
    slots = torch.ones(6, 1, LENGTH, LENGTH, dtype=torch.bool)

    def layout(pattern=None) -> str:
        plan = unpadding.unpadded_batch(mask, pattern, layout="auto")
        assert plan.cu_seqlens is None
        return "per_example" if plan.sizes else "grouped" if plan.groups else "padded"

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert layout() == "per_example" and unpadding.unpadded_batch(mask, layout="auto").sizes == ROW_LENGTHS["heavy"]
    assert layout(slots) == "per_example"
    for threads in (2, 8):
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)
        assert layout() == "grouped" and layout(slots) == "padded"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert layout() == "padded"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert layout() == "padded"
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    assert unpadding.auto_layout(torch.device("meta"), None) == "padded"  # not the CPU (a GPU's rule)
    with pytest.raises(ValueError, match="attention layout"):
        unpadding.unpadded_batch(mask, layout="nested")


K, L = 3, 8
JOINT_BACKBONES = {
    "roberta": (RobertaConfig, 1),
    "bert": (BertConfig, 0),
    "electra": (ElectraConfig, 0),
}
# Real tokens per slot (question, candidates 1..k) of each row: "heavy" has partly filled and empty slots (62% of
# the batch is padding), "none" fills every slot.
SLOT_LENGTHS = {
    "heavy": [[8, 5, 3, 6], [4, 8, 0, 0], [3, 3, 3, 3], [6, 2, 8, 0]],
    "none": [[L] * (K + 1)] * 3,
}


def joint_model(backbone: str, attention: str, unpadded: bool, pretraining: bool = True):
    config_class, pad = JOINT_BACKBONES[backbone]
    config = config_class(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=pad,
    )
    torch.manual_seed(0)
    extra = {"return_mlm_logits": True} if pretraining else {}
    return JointMultiCandidateModel.from_config(
        config,
        pretraining=pretraining,
        num_candidates=K,
        slot_length=L,
        head="AE_k",
        first_token_attention=attention,
        unpadded=unpadded,
        **extra,
    )


def joint_batch(padding: str, pad: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    rows = SLOT_LENGTHS[padding]
    ids = torch.randint(5, VOCAB, (len(rows), (K + 1) * L), generator=generator)
    mask = torch.zeros_like(ids)
    for row, lengths in enumerate(rows):
        for slot, length in enumerate(lengths):
            mask[row, slot * L : slot * L + length] = 1
    ids = ids.masked_fill(mask == 0, pad)
    labels = torch.full_like(ids, -100)
    picked = (torch.rand(ids.shape, generator=generator) < 0.3) & mask.bool()
    labels[picked] = ids[picked]
    ids[picked] = 4
    filled = torch.tensor([[length > 0 for length in lengths[1:]] for lengths in rows])
    sentence_labels = torch.where(filled, torch.arange(K).repeat(len(rows), 1) % 2, -100)
    return dict(input_ids=ids, attention_mask=mask, labels=labels, sentence_labels=sentence_labels)


@pytest.mark.parametrize("padding", sorted(SLOT_LENGTHS))
@pytest.mark.parametrize("attention", ["own_slot", "all"])
@pytest.mark.parametrize("backbone", sorted(JOINT_BACKBONES))
def test_mspp_unpadded_step_equals_the_padded_step(backbone, attention, padding):
    """MLM + MSPP over k+1 slots with partly filled and empty slots: the same losses (total, MLM, MSPP), per-token MLM
    logits, per-candidate MSPP logits (empty slots: the dtype's minimum in both) and gradients."""
    padded, unpadded = twins(lambda flag: joint_model(backbone, attention, flag))
    batch = joint_batch(padding, JOINT_BACKBONES[backbone][1])
    assert_same_step(
        run(padded, batch),
        run(unpadded, batch),
        batch["attention_mask"].bool(),
        ["loss", "mlm_loss", "cls_loss", "cls_logits", "mlm_logits", "cls_accuracy"],
    )


@pytest.mark.parametrize("attention", ["own_slot", "all"])
@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_joint_fine_tuning_unpadded_step_equals_the_padded_step(backbone, attention):
    """Fine-tuning (``run_joint.py --unpadded true``): the joint AS2 model's loss, per-candidate logits (empty slots:
    the dtype's minimum in both) and gradients, with partly filled and empty slots."""
    padded, unpadded = twins(lambda flag: joint_model(backbone, attention, flag, pretraining=False))
    batch = joint_batch("heavy", JOINT_BACKBONES[backbone][1])
    batch = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
             "labels": batch["sentence_labels"]}  # fmt: skip
    assert_same_step(run(padded, batch), run(unpadded, batch), batch["attention_mask"].bool(), ["loss", "logits"])


PADDED_LAYOUT_CASES = [*SSP, "joint-bert-own_slot", "joint-roberta-all"]


def assert_same_step_in_the_layout(case) -> tuple:
    """A :data:`PADDED_LAYOUT_CASES` case's padded and unpadded twins take the same step on its heavy batch (in the
    layout set); returns (unpadded model, batch)."""
    if isinstance(case, str):
        _, backbone, attention = case.split("-")
        padded, unpadded = twins(lambda flag: joint_model(backbone, attention, flag))
        batch = joint_batch("heavy", JOINT_BACKBONES[backbone][1])
    else:
        padded, unpadded = twins(lambda flag: tiny(case, unpadded=flag, return_mlm_logits=True))
        batch = ssp_batch(case, "heavy")
    keys = ["loss", "mlm_loss", "cls_loss", "cls_logits", "mlm_logits"]
    assert_same_step(run(padded, batch), run(unpadded, batch), batch["attention_mask"].bool(), keys)
    return unpadded, batch


@pytest.mark.parametrize("case", PADDED_LAYOUT_CASES, ids=lambda c: getattr(c, "__name__", c))
def test_padded_attention_layout_gives_the_same_step(case, monkeypatch):
    """The layout compiled steps and GPUs take (``ATTENTION_LAYOUT="padded"``), in eager mode: the same step too."""
    attention_layout(monkeypatch, "padded")
    assert_same_step_in_the_layout(case)


@pytest.mark.parametrize("groups", [1, 2, 4, 6, 9])
@pytest.mark.parametrize("case", PADDED_LAYOUT_CASES, ids=lambda c: getattr(c, "__name__", c))
def test_grouped_attention_layout_gives_the_same_step(case, groups, monkeypatch):
    """``ATTENTION_LAYOUT="grouped"`` (the rows by length, each group padded to its own longest row), with one group
    (the padded layout's work), as many as the rows (per example) and more groups than rows: the same step; the joint
    model's slots (a pattern of their own) take the padded layout."""
    attention_layout(monkeypatch, "grouped")
    for module in UNPADDING_MODULES:
        monkeypatch.setattr(module, "LENGTH_GROUPS", groups)
    assert_same_step_in_the_layout(case)


def test_grouped_plan_cuts_the_rows_by_length_and_pads_each_group_to_its_longest():
    """A stated fact for the heavy rows (16, 11, 7, 4, 13, 5 tokens; they start at gathered tokens 0, 16, 27, 34, 38,
    51) in 4 groups: rows 3 and 5 (4 and 5 tokens) padded to 5, rows 2 and 1 (7, 11) to 11, row 4 and row 0 alone
    (no padding, no mask)."""
    mask = ssp_batch(BertForSSPPretraining, "heavy")["attention_mask"]
    plan = unpadding.unpadded_batch(mask, layout="grouped")
    assert [(group.rows, group.length) for group in plan.groups] == [(2, 5), (2, 11), (1, 13), (1, 16)]
    first = plan.groups[0]
    assert first.tokens.tolist() == [34, 35, 36, 37, 51, 52, 53, 54, 55]
    assert first.slots.tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert first.pattern.view(2, 5).tolist() == [[True] * 4 + [False], [True] * 5]
    assert plan.groups[1].slots.tolist() == [*range(7), *range(11, 22)]
    assert plan.groups[2].pattern is None and plan.groups[3].tokens.tolist() == list(range(16))
    joined = torch.cat([group.tokens for group in plan.groups])
    assert torch.equal(joined[plan.regroup], torch.arange(56))  # back to the gathered order
    pattern = torch.ones(6, 1, LENGTH, LENGTH, dtype=torch.bool)
    assert unpadding.unpadded_batch(mask, pattern, layout="grouped").groups is None  # a pattern: the padded layout


def sequence_by_sequence_attention(query, key, value, cu_seqlens, max_length, dropout, scale):
    """Variable-length attention by its definition, for the CPU: each sequence of ``cu_seqlens`` attends to its own
    tokens, one PyTorch attention call per sequence (the flash kernel's contract; it runs on CUDA only)."""
    assert cu_seqlens.dtype == torch.int32 and dropout == 0.0
    outputs = []
    starts = cu_seqlens.tolist()
    assert max(end - start for start, end in zip(starts, starts[1:])) <= max_length
    for start, end in zip(starts, starts[1:]):
        q, k, v = (t[start:end].transpose(0, 1) for t in (query, key, value))  # (heads, its tokens, head_size)
        outputs.append(torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale).transpose(0, 1))
    return torch.cat(outputs)


def test_varlen_plan_delimits_each_row_and_keeps_the_padded_layout_for_other_patterns():
    """``"varlen"``: int32 start offsets of the rows' tokens (a stated fact for the heavy rows 16, 11, 7, 4, 13, 5),
    and none where the batch has its own pattern (the joint model's slots: the padded layout)."""
    mask = ssp_batch(BertForSSPPretraining, "heavy")["attention_mask"]
    plan = unpadding.unpadded_batch(mask, layout="varlen")
    assert plan.cu_seqlens.dtype == torch.int32
    assert plan.cu_seqlens.tolist() == [0, 16, 27, 34, 38, 51, 56]
    assert plan.sizes is None
    pattern = unpadding.key_padding_pattern(mask).expand(-1, -1, LENGTH, -1)
    assert unpadding.unpadded_batch(mask, pattern, layout="varlen").cu_seqlens is None


def test_varlen_kernel_runs_only_on_cuda_in_half_precision():
    """The flash kernel takes CUDA fp16/bf16 activations; on the CPU and in fp32 the layout falls back to "padded"."""
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert unpadding.varlen_kernel(torch.zeros(2, 3 * 64, dtype=dtype), 64) is None


def test_the_aten_flash_operators_take_what_the_varlen_layout_passes():
    """``_flash_forward`` / ``_flash_backward`` call ATen's private variable-length flash operators by position (CUDA
    kernels; the schemas exist in every build, so an upgrade that moves an argument fails here, not on a lent GPU).
    The backward's positions 12-13 (the RNG state; named philox seed and offset before torch 2.7) by position only."""
    forward = torch.ops.aten._flash_attention_forward.default._schema
    assert [a.name for a in forward.arguments if not a.kwarg_only] == [
        "query", "key", "value", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal",
        "return_debug_mask",
    ]  # fmt: skip
    assert "scale" in [a.name for a in forward.arguments if a.kwarg_only]
    assert [r.name for r in forward.returns][:2] == ["output", "softmax_logsumexp"] and len(forward.returns) == 5
    backward = torch.ops.aten._flash_attention_backward.default._schema
    positional = [a.name for a in backward.arguments if not a.kwarg_only]
    assert len(positional) == 14 and positional[:12] == [
        "grad_out", "query", "key", "value", "out", "logsumexp", "cum_seq_q", "cum_seq_k", "max_q", "max_k",
        "dropout_p", "is_causal",
    ]  # fmt: skip
    assert "scale" in [a.name for a in backward.arguments if a.kwarg_only] and len(backward.returns) == 3


@pytest.mark.parametrize("kernel", ["by definition", "none (CPU)"])
@pytest.mark.parametrize("case", PADDED_LAYOUT_CASES, ids=lambda c: getattr(c, "__name__", c))
def test_varlen_attention_layout_gives_the_same_step(case, kernel, monkeypatch):
    """``ATTENTION_LAYOUT="varlen"``: the queries, keys and values handed to the variable-length kernel as
    ``(tokens, heads, head_size)`` with the rows' offsets (here a sequence-by-sequence reference stands in for the CUDA
    kernel) give the padded pass's step, the joint model with full attention too; without a kernel (the CPU) the
    padded layout does; the joint model's own slots (a pattern of their own) never reach the kernel."""
    attention_layout(monkeypatch, "varlen")
    calls = []
    if kernel == "by definition":

        def reference(*args):
            calls.append(args[0].shape)
            return sequence_by_sequence_attention(*args)

        for module in UNPADDING_MODULES:
            monkeypatch.setattr(module, "varlen_kernel", lambda qkv, head_size: reference)
    unpadded, batch = assert_same_step_in_the_layout(case)
    own_slots = isinstance(case, str) and case.endswith("own_slot")
    if own_slots or kernel != "by definition":
        assert calls == []
    else:  # every layer of every encoder (ELECTRA: the generator's too), each on the batch's real tokens
        config = unpadded.config
        encoders = [config] + ([config.generator_config] if case is ElectraForSSPPretraining else [])
        tokens = int(batch["attention_mask"].sum())
        assert tokens == (62 if isinstance(case, str) else 56)
        expected = [(tokens, c.num_attention_heads, c.hidden_size // c.num_attention_heads) for c in encoders
                    for _ in range(c.num_hidden_layers)]  # fmt: skip
        assert sorted(calls) == sorted(expected)


class ShiftedLinear(torch.nn.Linear):
    """A projection that is not a plain ``nn.Linear`` (as a LoRA layer is not): its forward adds to the product."""

    def forward(self, x):
        return super().forward(x) + 2.0 * torch.tanh(x[..., : self.out_features])


@pytest.mark.parametrize("wrap", ["subclass", "hook"])
def test_wrapped_projections_are_called_as_modules(wrap):
    """The three projections run as one product only when they are plain ``nn.Linear`` layers: a LoRA-style module or
    a forward hook on ``value`` changes the unpadded step as it changes the padded one."""

    def build(flag):
        model = tiny(BertForSSPPretraining, unpadded=flag)
        for layer in model.bert.encoder.layer:
            value = layer.attention.self.value
            if wrap == "subclass":
                shifted = ShiftedLinear(value.in_features, value.out_features)
                shifted.load_state_dict(value.state_dict())
                layer.attention.self.value = shifted
            else:
                value.register_forward_hook(lambda module, args, output: output + 2.0 * torch.tanh(args[0]))
        return model

    padded, unpadded = twins(build)
    batch = ssp_batch(BertForSSPPretraining, "heavy")
    plain = tiny(BertForSSPPretraining)(**batch).loss
    padded_run = run(padded, batch)
    assert abs(float(padded_run[0].loss) - float(plain)) > 1e-3  # the wrapper matters
    assert_same_step(padded_run, run(unpadded, batch), batch["attention_mask"].bool(), ["loss", "mlm_loss"])


def test_evaluation_and_layer_outputs_keep_the_padded_pass(monkeypatch):
    """``model.eval()`` (scoring, export, the saved folder's reference outputs), per-layer outputs and inputs without
    a padding mask take the stock pass; a training forward takes the unpadded one."""
    model = tiny(BertForSSPPretraining, unpadded=True)
    batch = ssp_batch(BertForSSPPretraining, "heavy")
    module = sys.modules[type(model).__module__]
    calls = []
    monkeypatch.setattr(module, "unpadded_encode", lambda *args, **kwargs: calls.append(1) or 1 / 0)
    with torch.no_grad():
        model.eval()(**batch)
        model.train()(**batch, output_hidden_states=True)
        model(**{**batch, "attention_mask": None})
    assert calls == []
    with pytest.raises(ZeroDivisionError):
        model(**batch)


EVAL_KEYS = ["loss", "mlm_loss", "cls_loss", "cls_logits", "mlm_logits"]
EVAL_CASES = [*SSP, "joint-bert-own_slot", "joint-roberta-all"]


@pytest.mark.parametrize("case", EVAL_CASES, ids=lambda c: getattr(c, "__name__", c))
def test_an_evaluation_forward_asked_for_the_unpadded_pass_gives_the_stock_outputs(case, monkeypatch):
    """``model.eval()(**batch, unpadded=True)`` (the pre-training trainer's held-out evaluation with the flag) takes
    the unpadded pass, with or without ``config.unpadded``, and gives the stock evaluation's losses and logits;
    ``unpadded=False`` keeps a training forward on the stock pass."""
    if isinstance(case, str):
        _, backbone, attention = case.split("-")
        model = joint_model(backbone, attention, unpadded=False)
        batch = joint_batch("heavy", JOINT_BACKBONES[backbone][1])
    else:
        model = tiny(case, unpadded=False, return_mlm_logits=True)
        batch = ssp_batch(case, "heavy")
    module = sys.modules[type(model).__module__]
    calls = []
    encode = module.unpadded_encode
    monkeypatch.setattr(module, "unpadded_encode", lambda *args, **kwargs: calls.append(1) or encode(*args, **kwargs))
    with torch.no_grad():
        torch.manual_seed(1)  # ELECTRA's generator samples
        stock = model.eval()(**batch)
        assert calls == []
        torch.manual_seed(1)
        unpadded = model(**batch, unpadded=True)
        assert len(calls) == (2 if case is ElectraForSSPPretraining else 1)  # ELECTRA: the generator too
        model.config.unpadded = True
        model.train()(**batch, unpadded=False)
        assert len(calls) == (2 if case is ElectraForSSPPretraining else 1)
    real = batch["attention_mask"].bool()
    for key in EVAL_KEYS:
        expected, actual = stock[key], unpadded[key]
        if expected.dim() >= 2 and expected.shape[:2] == real.shape:  # per token
            expected, actual = expected[real], actual[real]
        torch.testing.assert_close(actual, expected, **CLOSE, msg=key)


def test_gradient_checkpointing_gives_the_same_gradients():
    padded, unpadded = twins(lambda flag: tiny(BertForSSPPretraining, unpadded=flag))
    unpadded.gradient_checkpointing_enable()
    batch = ssp_batch(BertForSSPPretraining, "heavy")
    assert_same_step(run(padded, batch), run(unpadded, batch), batch["attention_mask"].bool(), ["loss", "mlm_loss"])


# In a process where as2hub cannot be imported: each folder's training losses and gradient norm, and its eval
# sentence logits, as JSON.
FRESH = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json
    import torch
    from transformers import AutoModelForPreTraining
    torch.set_num_threads(int(sys.argv[2]))  # the test's: the kernels sum in the same order
    results = {}
    for name, folder in json.loads(sys.argv[1]).items():
        batch = {key: torch.tensor(value) for key, value in json.loads(open(folder + "/batch.json").read()).items()}
        model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True).train()
        torch.manual_seed(1)
        outputs = model(**batch)
        outputs.loss.backward()
        norm = torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm()
        with torch.no_grad():
            scores = model.eval()(**batch).cls_logits
        results[name] = {"unpadded": model.config.unpadded, "loss": outputs.loss.item(),
                         "mlm_loss": outputs.mlm_loss.item(), "cls_loss": outputs.cls_loss.item(),
                         "grad_norm": norm.item(), "cls_logits": scores.tolist()}
    print("RESULTS " + json.dumps(results))
    """
)


@pytest.mark.slow
def test_folders_saved_with_and_without_the_flag_load_without_as2hub(tmp_path):
    """A folder saved with ``unpadded=True`` loads with the flag (its ``unpadding.py`` shipped as a file) and computes
    what it did before saving, to the bit; one saved without it loads without it, with the same results."""
    folders, expected = {}, {}
    cases = {
        "ssp_unpadded": lambda: tiny(RobertaForSSPPretraining, unpadded=True),
        "ssp_padded": lambda: tiny(RobertaForSSPPretraining),
        "joint_unpadded": lambda: joint_model("bert", "own_slot", True),
    }
    for name, build in cases.items():
        model = build()
        if name.startswith("ssp"):
            batch = ssp_batch(RobertaForSSPPretraining, "heavy")
        else:
            batch = joint_batch("heavy", 0)
        folder = tmp_path / name
        model.save_pretrained(folder)
        (folder / "batch.json").write_text(json.dumps({key: value.tolist() for key, value in batch.items()}))
        assert (folder / "unpadding.py").is_file() and not (folder / "unpadding.py").is_symlink()
        assert json.loads((folder / "config.json").read_text())["unpadded"] is name.endswith("_unpadded")
        outputs, grads = run(model.train(), batch)
        with torch.no_grad():
            scores = model.eval()(**batch).cls_logits
        expected[name] = {
            "unpadded": name.endswith("_unpadded"),
            "loss": outputs.loss.item(),
            "mlm_loss": outputs.mlm_loss.item(),
            "cls_loss": outputs.cls_loss.item(),
            "grad_norm": torch.stack([grad.norm() for grad in grads.values()]).norm().item(),
            "cls_logits": scores.tolist(),
        }
        folders[name] = str(folder)
    process = subprocess.run(
        [sys.executable, "-c", FRESH, json.dumps(folders), str(torch.get_num_threads())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    line = next(line for line in process.stdout.splitlines() if line.startswith("RESULTS "))
    assert json.loads(line.removeprefix("RESULTS ")) == expected
    # The padded and unpadded SSP models have the same weights (the same seed): the same losses.
    for key in ("loss", "mlm_loss", "cls_loss", "cls_logits"):
        unpadded, padded = (torch.tensor(expected[name][key]) for name in ("ssp_unpadded", "ssp_padded"))
        torch.testing.assert_close(unpadded, padded, **CLOSE, msg=key)


@pytest.mark.slow
def test_the_cpu_benchmark_times_mspp_slots_padded_and_unpadded(tmp_path):
    """``bench_unpadded_pretrain.py --objective mspp`` (MiniLM's joint MLM + MSPP step, own-slot attention), tiny:
    every system's loss is the padded pass's, the unpadded systems' dense layers compute no padding while the slots'
    padded layout does, and each system gets its ratio to the padded one; then ``--evaluation`` and the ``_bf16``
    systems at 64 tokens."""
    import importlib

    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, benchmarks)
    try:
        bench = importlib.import_module("bench_unpadded_pretrain")
    finally:
        sys.path.remove(benchmarks)
    results = tmp_path / "mspp.json"
    report = bench.main(["--objective", "mspp", "--batch_size", "2", "--batches", "1", "--steps", "1", "--warmup", "0",
                         "--systems", "padded,unpadded_per_example,unpadded_padded_attention",
                         "--results", str(results)])  # fmt: skip
    assert json.loads(results.read_text())["objective"] == "mspp"
    (length,) = report["lengths"].values()
    assert length["seq_length"] == 384 and length["loss_check_dropout_off"]["max_abs_difference"] < 1e-4
    systems = length["systems"]
    assert systems["padded"]["dense_padding_fraction"] > 0.2  # short sentences in 64-token slots
    assert systems["unpadded_per_example"]["dense_padding_fraction"] == 0
    assert systems["unpadded_padded_attention"]["dense_padding_fraction"] == 0
    assert systems["padded"]["speedup_vs_padded"] == 1.0
    with pytest.raises(SystemExit):
        bench.parse_args(["--objective", "mspp", "--systems", "padded,packed"])
    # --evaluation: the trainer's no-grad forwards, the unpadded pass asked for with unpadded=True, the same losses
    report = bench.main(["--evaluation", "--seq_lengths", "64", "--batch_size", "4", "--batches", "1", "--steps", "1",
                         "--warmup", "0", "--systems", "padded,unpadded_padded_attention",
                         "--results", str(tmp_path / "eval.json")])  # fmt: skip
    (length,) = report["lengths"].values()
    assert report["mode"].startswith("evaluation") and length["loss_check_dropout_off"]["max_abs_difference"] < 1e-4
    assert length["systems"]["unpadded_padded_attention"]["dense_padding_fraction"] == 0
    with pytest.raises(SystemExit):
        bench.parse_args(["--evaluation", "--systems", "padded,packed"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--length_groups", "0"])
    # The _bf16 systems: the same passes in bf16 autocast (run_pretrain.py --bf16 on the CPU), checked apart: their
    # losses are the fp32 pass's up to bf16 rounding, while the fp32 systems still agree to float rounding.
    report = bench.main(["--seq_lengths", "64", "--batch_size", "4", "--batches", "1", "--steps", "1", "--warmup", "0",
                         "--systems", "padded,unpadded_per_example,padded_bf16,unpadded_per_example_bf16",
                         "--results", str(tmp_path / "bf16.json")])  # fmt: skip
    (length,) = report["lengths"].values()
    check = length["loss_check_dropout_off"]
    assert check["max_abs_difference"] < 1e-4 and 0 < check["bf16_max_abs_difference"] < 0.1, check
    assert length["systems"]["unpadded_per_example_bf16"]["dense_padding_fraction"] == 0
    assert (
        length["systems"]["padded_bf16"]["dense_padding_fraction"]
        == length["systems"]["padded"]["dense_padding_fraction"]
    )

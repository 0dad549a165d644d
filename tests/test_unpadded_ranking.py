"""``Ranker(..., unpadded=True)``: the dense layers on the pairs' real tokens only (:mod:`as2hub.inference.unpadded`).

What is checked, and against what:
- the scores are the padded pass's (the stock model's forward with its padding mask), within fp32 rounding, on
  RoBERTa, ELECTRA and BERT backbones, contextual and pairwise, BERT-style and RoBERTa tokenizers, questions of
  candidates of different lengths (so that a padded batch has padding to skip);
- no padding is computed: the feed-forward layers and the last layer's keys see the pairs' token count rounded up to
  ``ROW_MULTIPLE`` rows, the last feed-forward one row per pair (forward hooks count their rows);
- the cascade: the same heads scored the same candidates as in the padded cascade, with the same scores;
- compiled (dynamo's graphs): built once, no graph after the warm-up for questions of other sizes;
- each with PyTorch's attention kernel and with the small_attention kernel (``unpadded.ROW_ATTENTION``);
- the checkpoint path (``Ranker.from_pretrained(folder, unpadded=True)``) and the errors (an ONNX backend, a model
  without BERT-style layers).
"""

import pytest
import torch
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model
from test_compiled_ranking import (
    CUDA_FP16_ABS,
    HAS_CUDA,
    NO_CUDA,
    QUESTIONS,
    assert_compiles_once_and_scores_as_eager,
    side_by_side,
)
from torch._dynamo.testing import CompileCounterWithBackend

from as2hub.inference import small_attention, unpadded
from as2hub.inference.compiled import CompiledRankerModel
from as2hub.inference.ranking import Ranker
from as2hub.inference.unpadded import ROW_MULTIPLE, PackedRows, UnpaddedUnsupportedError, check_unpadded
from as2hub.modeling.segment_layout import pad_batch

# fp32, the same weights, padded against unpadded: the same sums in another order (the three projections as one
# product), amplified by the tiny models' heads (logits rescaled to std 2): measured at most 1.2e-5 on the AMX Xeon
# (2026-11-29). A pad key attended to moves these scores by 1e-3 or more (checked by breaking the pattern).
FP32_ABS = 1e-4

CASES = [("bert", True), ("bert", False), ("roberta", True), ("roberta", False), ("electra", True)]


@pytest.fixture(params=["sdpa", "kernel"])
def row_attention(request, monkeypatch):
    """The CPU pass's attention both ways (``unpadded.ROW_ATTENTION``): PyTorch's kernel per pair, and the small_attention
    kernel (:mod:`as2hub.inference.small_attention`, built with the machine's C compiler)."""
    if request.param == "kernel" and small_attention.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the small_attention kernel")
    monkeypatch.setattr(unpadded, "ROW_ATTENTION", request.param)
    return request.param


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backbone, contextual", CASES)
def test_unpadded_scores_are_the_padded_scores(tokenizers, backbone, contextual, row_attention):
    model, tokenizer = cascade_model(tokenizers, backbone, contextual=contextual, layers=())
    padded, unpadded = Ranker(model, tokenizer), Ranker(model, tokenizer, unpadded=True)
    contexts = CONTEXTS if contextual else None
    lengths = [len(ids) for ids, _ in padded._rows([QUESTION] * len(CANDIDATES), CANDIDATES, contexts)]
    assert len(set(lengths)) > 3, "the candidates must differ in length, else there is no padding to skip"
    for question, candidates in QUESTIONS:
        got = unpadded.score_pairs([question] * len(candidates), candidates, contexts and contexts[: len(candidates)])
        # the stock forward (the remote code's), one padded batch: the reference
        rows = padded._rows([question] * len(candidates), candidates, contexts and contexts[: len(candidates)])
        with torch.inference_mode():
            want = model.score(**pad_batch(rows, tokenizer.pad_token_id))
        assert (got - want).abs().max() <= FP32_ABS
        if candidates is CANDIDATES:  # the heads' scale was set on these: the scores spread, not a trivial constant
            assert got.std() > 0.05


def test_unpadded_pass_computes_no_padding(tokenizers, monkeypatch):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=True, layers=())
    attended = []  # on the CPU every layer but the last attends row by row, each pair on its own tokens
    row_by_row = unpadded._attend_rows
    monkeypatch.setattr(
        unpadded, "_attend_rows", lambda qkv, *args: attended.append(qkv.shape[0]) or row_by_row(qkv, *args)
    )
    ranker = Ranker(model, tokenizer, unpadded=True, batch_size=16)
    rows = ranker._rows([QUESTION] * len(CANDIDATES), CANDIDATES, CONTEXTS)
    real = sum(len(ids) for ids, _ in rows)
    longest = max(len(ids) for ids, _ in rows)
    assert real < longest * len(rows)  # a padded batch would compute more
    seen = {}

    def rows_of(name):
        def hook(module, inputs, output):
            seen[name] = output.shape[0]  # (tokens, width): the unpadded pass's 2-d matrices

        return hook

    layers = model.base_model.encoder.layer
    hooks = [
        layers[0].intermediate.dense.register_forward_hook(rows_of("ffn0")),
        layers[-1].intermediate.dense.register_forward_hook(rows_of("ffn_last")),
        layers[-1].attention.self.key.register_forward_hook(rows_of("key_last")),
    ]
    try:
        ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, CONTEXTS)
    finally:
        for hook in hooks:
            hook.remove()
    # the first layer's feed-forward: every real token and no padding, rounded up to ROW_MULTIPLE rows; the last
    # layer's keys: the same; its feed-forward: one token per pair (the head reads the first)
    packed = -(-real // ROW_MULTIPLE) * ROW_MULTIPLE
    assert packed < longest * len(rows)
    assert seen == {"ffn0": packed, "key_last": packed, "ffn_last": len(rows)}
    assert attended == [packed] * (len(layers) - 1)


@pytest.mark.parametrize("backbone", ["bert", "roberta"])
def test_unpadded_cascade_is_the_padded_cascade(tokenizers, backbone, row_attention):
    model, tokenizer = cascade_model(tokenizers, backbone, contextual=True)
    padded, unpadded = Ranker(model, tokenizer), Ranker(model, tokenizer, unpadded=True)
    for drop in (0.3, 0.5):
        for question, candidates in QUESTIONS:
            contexts = CONTEXTS[: len(candidates)]
            want = padded.rank(question, candidates, contexts, cascade_drop=drop)
            got = unpadded.rank(question, candidates, contexts, cascade_drop=drop)
            assert [(c.index, c.layer) for c in got] == [(c.index, c.layer) for c in want]
            assert max(abs(a.score - b.score) for a, b in zip(got, want)) <= FP32_ABS
    layers = {c.layer for c in unpadded.rank(QUESTION, CANDIDATES, CONTEXTS, cascade_drop=0.5)}
    assert layers == {1, 3, 4}  # every head dropped some: the stages ran


def test_unpadded_compiled_builds_once_and_scores_as_eager(tokenizers, row_attention):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)
    assert_compiles_once_and_scores_as_eager(model, tokenizer, unpadded=True)


def test_unpadded_compiled_builds_nothing_more_when_the_tokens_fill_the_packed_rows(tokenizers):
    """The packed matrix's extra rows (its token count rounded up to ``ROW_MULTIPLE``) number 0 to 31: compiled, a
    count of 0 or 1 must not build graphs of its own after the warm-up (when the first stage appended that many zero
    rows, dynamo specialized both, and a timed run compiled for 15-19 s on its first such questions). Batches whose
    tokens leave 0, 1 and 2 extra rows, at one row and at several, score as eager and compile nothing. Through AOT
    autograd (``aot_eager``), whose functionalization adds the size guards that inductor's graphs get, without its
    code generation."""
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False, layers=(1,), depth=2)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = CompiledRankerModel(model, backend=counter)
    compiled.warm_up(Ranker(compiled, tokenizer, unpadded=True))
    frames = counter.frame_count
    generator = torch.Generator().manual_seed(0)
    for lengths in ([ROW_MULTIPLE], [ROW_MULTIPLE - 1], [ROW_MULTIPLE - 2], [30, 20, 14], [30, 20, 13], [30, 20, 12]):
        rows = [(torch.randint(5, 90, (n,), generator=generator).tolist(), [0] * n) for n in lengths]
        with torch.inference_mode():  # as Ranker builds its batches (tensors made outside would be guarded apart)
            batch = pad_batch(rows, tokenizer.pad_token_id)
        extra = -sum(lengths) % ROW_MULTIPLE
        want = unpadded.unpadded_logits(model, batch)
        got = unpadded.unpadded_logits(compiled, batch)
        assert torch.allclose(got, want, atol=1e-5), extra
        assert counter.frame_count == frames, f"{extra} extra rows compiled a graph after the warm-up"


def test_from_pretrained_unpadded(tokenizers, tmp_path, row_attention):
    model, tokenizer = cascade_model(tokenizers, "roberta", contextual=True)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    padded = Ranker.from_pretrained(str(tmp_path))
    ranker = Ranker.from_pretrained(str(tmp_path), unpadded=True)
    assert ranker.unpadded and not padded.unpadded
    want = padded.rank(QUESTION, CANDIDATES, CONTEXTS)
    got = ranker.rank(QUESTION, CANDIDATES, CONTEXTS)
    assert [c.index for c in got] == [c.index for c in want]
    assert max(abs(a.score - b.score) for a, b in zip(got, want)) <= FP32_ABS


def test_unpadded_batches_are_full_length_sorted(tokenizers):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False, layers=())
    ranker = Ranker(model, tokenizer, unpadded=True, batch_size=4)
    lengths = [9, 30, 12, 5, 41, 7, 8, 22, 16, 3]
    assert ranker.batches(lengths) == [[9, 3, 5, 6], [0, 2, 8, 7], [1, 4]]


def test_packed_rows():
    exact = PackedRows.from_lengths([3, 1, 2], "cpu", multiple=None)
    assert exact.index.tolist() == [0, 1, 2, 3, 6, 7] and exact.total == 6
    assert exact.firsts.tolist() == [0, 3, 4]
    assert exact.pattern[:, 0, 0].tolist() == [[True, True, True], [True, False, False], [True, True, False]]
    assert [part.tolist() for part in exact.split(torch.arange(6))] == [[0, 1, 2], [3], [4, 5]]
    # rounded up to 8 rows: the 2 extra rows at the first padding positions (4, 5); the layout is long enough
    rounded = PackedRows.from_lengths([3, 1, 2], "cpu", multiple=8)
    assert rounded.total == 8 and rounded.index.tolist() == [0, 1, 2, 3, 6, 7, 4, 5]
    assert rounded.pack(torch.ones(6, 2)).tolist() == [[1.0, 1.0]] * 6 + [[0.0, 0.0]] * 2
    assert [part.tolist() for part in rounded.split(torch.arange(8))] == [[0, 1, 2], [3], [4, 5]]
    # 3 rows of one token, rounded up to 8: the layout grows to 3 positions per row (9 >= 8)
    grown = PackedRows.from_lengths([1, 1, 1], "cpu", multiple=8)
    assert grown.pattern.shape[-1] == 3 and grown.index.tolist() == [0, 3, 6, 1, 2, 4, 5, 7]
    assert grown.firsts.tolist() == [0, 1, 2]


def test_onnx_backend_refuses_unpadded(tmp_path):
    with pytest.raises(ValueError, match="unpadded=True applies to the torch backends"):
        Ranker.from_pretrained(str(tmp_path), backend="onnx-int8", unpadded=True)


def test_a_model_without_the_staged_methods_is_refused(tokenizers):
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))  # fmt: skip
    with pytest.raises(UnpaddedUnsupportedError, match="BertForSequenceClassification is not one"):
        check_unpadded(model)
    with pytest.raises(UnpaddedUnsupportedError, match="not a torch model"):
        check_unpadded(object())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_unpadded_on_cuda_fp16(tokenizers):
    """The GPU path (the GPU kit's ``bench_cascade.py --unpadded``): ``cuda-fp16`` unpadded against padded, with the
    cascade, eager and compiled by inductor (the bound is the compiled test's: fp16 rounding of other sums)."""
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)
    model = model.to(device="cuda", dtype=torch.float16)
    padded = Ranker(model, tokenizer)
    compiled = CompiledRankerModel(model)
    for ranker in (Ranker(model, tokenizer, unpadded=True), Ranker(compiled, tokenizer, unpadded=True)):
        if ranker.model is compiled:
            compiled.warm_up(ranker)
        for got_layers, want_layers, got, want in side_by_side(ranker, padded, (None, 0.5)):
            assert got_layers == want_layers
            assert (got - want).abs().max() <= CUDA_FP16_ABS

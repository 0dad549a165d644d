"""The C++ operators of the int8 pass's CPU steps (``inference/cpu_ops.cpp``, :mod:`as2hub.inference.cpu_ops`).

What is checked, and against what: each ``as2hub_cpu`` operator gives the Python operator's outputs (``as2hub::``,
:mod:`as2hub.inference.int8` and :mod:`as2hub.inference.unpadded`; their kernels are checked against float64
references in test_int8_rows.py and test_small_attention.py) bit for bit, with and without smoothing and rotation,
for widths that are not whole vectors, on views; with two torch threads, bf16 attention or a head size the kernel does
not compute, it hands the call to the Python operator (the same outputs as that one's torch path); the ranker's eager
int8 pass calls the C++ operators (torch's profiler names them) and scores as with the Python ones; the compiled pass
writes its wrapper in C++ and scores as the eager one (test_int8_ranking.py); without a C++ compiler, or with
``AS2HUB_CPU_OPS=0``, the pass keeps the Python operators and says why.
"""

import logging

import pytest
import torch
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model
from test_int8_rows import products, smoothing
from test_small_attention import LENGTHS, packed

from as2hub.inference import cpu_ops, int8, small_attention, unpadded
from as2hub.inference.int8 import gelu_requantize, quantize_encoder, quantize_rows, rescale_norm
from as2hub.inference.ranking import Ranker
from as2hub.inference.unpadded import PackedRows, first_token_attention, rowwise_attention

needs_ops = pytest.mark.skipif(
    cpu_ops.cxx_compiler() is None or small_attention.compiler() is None,
    reason="no C and C++ compilers to build the kernels and cpu_ops.cpp",
)
CPP = torch.ops.as2hub_cpu


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_same(got, want):
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)


def step_inputs(width, smoothed, rotate, tokens=37):
    inputs = products(tokens, width)
    return inputs, smoothing(width, smoothed), rotate


@needs_ops
@pytest.mark.parametrize(
    "width, smoothed, rotate", [(384, False, 0), (384, True, 128), (1536, True, 128), (200, False, 0)]
)
def test_row_steps_are_the_python_operators_bit_for_bit(one_thread, width, smoothed, rotate):
    assert cpu_ops.library()
    (total, scale, zero, weight_sum, weight_scale, bias), smooth, rotate = step_inputs(width, smoothed, rotate)
    values = torch.randn(total.shape, generator=torch.Generator().manual_seed(3)) * 3
    assert_same(CPP.quantize_rows(values, smooth, rotate), quantize_rows(values, smooth, rotate))
    assert_same(CPP.quantize_rows(values[:, : width // 2], None, 0), quantize_rows(values[:, : width // 2], None, 0))
    args = (total, scale, zero, weight_sum, weight_scale, bias)
    assert_same(CPP.gelu_requantize(*args, smooth, rotate), gelu_requantize(*args, smooth, rotate))
    residual = torch.randn(total.shape, generator=torch.Generator().manual_seed(4))
    norm = (torch.rand(width) + 0.5, torch.randn(width) * 0.1, 1e-12)
    got = CPP.rescale_norm(*args, residual, *norm, smooth, rotate)
    assert_same(got, rescale_norm(*args, residual, *norm, smooth, rotate))
    assert (got[1] != 0).any() and got[0].abs().max() > 0  # real codes and states, not empty buffers


@needs_ops
def test_attention_is_the_python_operators_bit_for_bit(one_thread):
    heads, head_size = 12, 32
    width = heads * head_size
    packing = PackedRows.from_lengths(LENGTHS, "cpu")
    qkv = packed(LENGTHS, heads, head_size, torch.float32, extra=packing.total - sum(LENGTHS))
    query = qkv[:, :width].index_select(0, packing.firsts).contiguous()
    keys_values = qkv[:, width:]  # a view: rows of stride 3 * width
    scale = head_size**-0.5
    every = CPP.rowwise_attention(qkv, packing.pattern, heads, scale)
    assert_same(every, rowwise_attention(qkv, packing.pattern, heads, scale))
    assert (every[sum(LENGTHS) :] == 0).all() and every[: sum(LENGTHS)].abs().max() > 0
    args = (query, keys_values, packing.index, packing.pattern, heads, scale)
    assert_same(CPP.first_token_attention(*args), first_token_attention(*args))


@needs_ops
def test_other_calls_go_to_the_python_operators(monkeypatch):
    assert cpu_ops.library()
    (total, scale, zero, weight_sum, weight_scale, bias), smooth, rotate = step_inputs(384, True, 128)
    args = (total, scale, zero, weight_sum, weight_scale, bias, smooth, rotate)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the Python operator takes torch's operations with more than one thread
        monkeypatch.setattr(int8, "rows_library", lambda: pytest.fail("the kernel ran with two threads"))
        assert_same(CPP.gelu_requantize(*args), gelu_requantize(*args))
    finally:
        torch.set_num_threads(threads)
    monkeypatch.undo()
    heads = 4
    packing = PackedRows.from_lengths([5, 9], "cpu")
    for dtype, head_size in ((torch.bfloat16, 32), (torch.float32, 8)):  # not the C++ kernel's
        qkv = packed([5, 9], heads, head_size, dtype, extra=packing.total - 14)
        assert_same(
            CPP.rowwise_attention(qkv, packing.pattern, heads, 0.5), rowwise_attention(qkv, packing.pattern, heads, 0.5)
        )


def int8_ranker(tokenizers, backbone="bert", contextual=True):
    model, tokenizer = cascade_model(tokenizers, backbone, contextual=contextual)
    quantize_encoder(model)
    return Ranker(model, tokenizer, unpadded=True)


@needs_ops
@pytest.mark.parametrize("backbone, contextual", [("bert", True), ("roberta", False)], ids=lambda v: str(v))
def test_the_eager_pass_calls_them_and_scores_as_with_the_python_operators(
    tokenizers, one_thread, monkeypatch, backbone, contextual
):
    ranker = int8_ranker(tokenizers, backbone, contextual)
    contexts = CONTEXTS if contextual else None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        got = ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, contexts)
    names = {event.name for event in profile.events()}
    for name in cpu_ops.SCHEMAS:
        assert f"as2hub_cpu::{name}" in names, name
    monkeypatch.setattr(cpu_ops, "library", lambda: False)  # the Python operators
    assert torch.equal(got, ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, contexts))
    monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", "torch")  # a setting that names torch keeps the Python ones
    monkeypatch.setattr(cpu_ops, "library", lambda: True)
    assert int8.step_operator("gelu_requantize", gelu_requantize, torch.zeros(1)) is gelu_requantize
    assert unpadded._attention_operator("rowwise_attention", rowwise_attention, torch.zeros(1)) is not rowwise_attention
    monkeypatch.setattr(unpadded, "ROW_ATTENTION", "sdpa")  # PyTorch's attention, as the Python operator reads it
    assert unpadded._attention_operator("rowwise_attention", rowwise_attention, torch.zeros(1)) is rowwise_attention


@pytest.fixture
def fresh_ops(monkeypatch, tmp_path):
    """A kernel cache of its own, and :func:`cpu_ops.library` loaded again (restored after)."""
    monkeypatch.setenv("AS2HUB_KERNEL_CACHE", str(tmp_path / "kernels"))
    cpu_ops.forget()
    yield tmp_path / "kernels"
    cpu_ops.forget()


def test_without_a_cxx_compiler_the_python_operators_stay(fresh_ops, monkeypatch, caplog):
    monkeypatch.setenv("CXX", "false")  # exits 1 without output
    with caplog.at_level(logging.WARNING, logger="as2hub.backends"):
        assert cpu_ops.library() is False
    assert "keeps its Python operators" in caplog.text and "'false'" in caplog.text
    assert not any(path.name.startswith("cpu_ops") for path in fresh_ops.iterdir())  # no partial library
    assert cpu_ops.step("gelu_requantize", gelu_requantize) is gelu_requantize


def test_as2hub_cpu_ops_0_keeps_the_python_operators(fresh_ops, monkeypatch):
    monkeypatch.setenv("AS2HUB_CPU_OPS", "0")
    monkeypatch.setattr(cpu_ops, "build", lambda: pytest.fail("built although AS2HUB_CPU_OPS=0"))
    assert cpu_ops.library() is False
    assert cpu_ops.step("rescale_norm", rescale_norm) is rescale_norm


@needs_ops
def test_a_compiled_pass_traces_them_without_graph_breaks(tokenizers, one_thread):
    import torch._dynamo

    from as2hub.inference.compiled import CompiledRankerModel

    ranker = int8_ranker(tokenizers)
    want = ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, CONTEXTS)
    torch._dynamo.utils.counters.clear()
    compiled = Ranker(CompiledRankerModel(ranker.model, backend="eager"), ranker.tokenizer, unpadded=True)
    got = compiled.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, CONTEXTS)
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}  # the operators' choice is read, not traced into
    assert torch.equal(got, want)

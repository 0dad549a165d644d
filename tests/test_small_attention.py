"""The small_attention kernel (:mod:`as2hub.inference.small_attention`): attention within short packed rows, in C.

What is checked, and against what:
- its context against softmax(q k^T scale) v computed independently in float64 (torch ``matmul`` and ``softmax``, one
  pair and head at a time), fp32 and bf16, every token's query and the first token's only, pairs of 1 to 130 tokens
  (across the kernel's blocks of 16 keys and 8 queries), head sizes 16, 32 and 64, and scores in the hundreds (the
  row's maximum subtracted: no overflow);
- the unpadded pass's two operators route to it as ``unpadded.ROW_ATTENTION`` says, and give PyTorch's kernel's
  context;
- the build: cached per machine (no second compile), a failing compiler leaves no file behind, is logged, and the
  pass keeps PyTorch's kernel; inputs it does not compute are refused with the reason.
"""

import logging

import pytest
import torch

from as2hub.inference import small_attention, unpadded
from as2hub.inference.unpadded import PackedRows, first_token_attention, rowwise_attention

HAS_COMPILER = small_attention.compiler() is not None
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="no C compiler (cc, gcc or clang) to build the kernel")

# fp32: the kernel sums in fp32 in another order than float64, and its e^x is a polynomial (relative error < 2e-7):
# measured at most 1.2e-6 on unit-normal inputs (AMX Xeon, 2026-11-29); a wrong scale or a key of another pair moves
# the context by 1e-2 or more
FP32_ABS = 1e-5
# bf16 in and out: the context is rounded to bf16 once (relative 2^-9) after fp32 sums
BF16_REL = 2**-8

LENGTHS = [1, 15, 16, 17, 33, 7, 64, 130, 2]


def reference(query, key, value, lengths, heads, scale, first_only):
    """softmax(q k^T scale) v per pair and head, in float64."""
    width = key.shape[1]
    out = torch.zeros(len(lengths) if first_only else key.shape[0], width, dtype=torch.float64)
    start = 0
    for pair, size in enumerate(lengths):
        rows = slice(pair, pair + 1) if first_only else slice(start, start + size)
        q = query[rows].double().view(-1, heads, width // heads).transpose(0, 1)
        k = key[start : start + size].double().view(size, heads, -1).transpose(0, 1)
        v = value[start : start + size].double().view(size, heads, -1).transpose(0, 1)
        context = torch.softmax(q @ k.transpose(1, 2) * scale, dim=-1) @ v
        out[rows] = context.transpose(0, 1).reshape(-1, width)
        start += size
    return out


def packed(lengths, heads, head_size, dtype, spread=1.0, extra=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    qkv = torch.randn(sum(lengths) + extra, 3 * heads * head_size, generator=generator) * spread
    return qkv.to(dtype)


def assert_close(got, want, dtype):
    got = got.double()
    if dtype == torch.float32:
        assert (got - want).abs().max() <= FP32_ABS
    else:
        assert ((got - want).abs() <= BF16_REL * want.abs() + 1e-6).all()


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads, head_size", [(2, 16), (12, 32), (4, 64)])
@pytest.mark.parametrize("first_only", [False, True])
def test_kernel_is_softmax_attention(dtype, heads, head_size, first_only):
    qkv = packed(LENGTHS, heads, head_size, dtype)
    width = heads * head_size
    query, key, value = qkv[:, :width], qkv[:, width : 2 * width], qkv[:, 2 * width :]
    if first_only:  # one query per pair: its first token's
        starts = torch.tensor([0, *LENGTHS[:-1]]).cumsum(0)
        query = query.index_select(0, starts).contiguous()
    scale = head_size**-0.5
    lengths = torch.tensor(LENGTHS)
    got = small_attention.attend(query, key, value, lengths, heads, scale, first_only=first_only)
    want = reference(query, key, value, LENGTHS, heads, scale, first_only)
    assert got.dtype == dtype and got.shape == want.shape
    assert_close(got, want, dtype)
    if not first_only:
        assert (got[sum(LENGTHS) :] == 0).all()  # the packed matrix's extra rows: zeros, as PyTorch's path leaves them


@needs_compiler
@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"])
def test_kernel_built_for_avx2_or_sse2_only_is_softmax_attention(tmp_path, march):
    """The vectors lowered to two AVX2 registers (the AVX2 EPYC's build) or four SSE2 ones: the same results."""
    if not small_attention.cpu_features().flags >= {"avx2", "fma"}:
        pytest.skip("this CPU has no AVX2: the x86-64-v3 build cannot run here")
    flags = tuple(f"-march={march}" if flag == "-march=native" else flag for flag in small_attention.FLAGS)
    lib = small_attention.load(small_attention.build(directory=tmp_path, flags=flags))
    for dtype in (torch.float32, torch.bfloat16):
        qkv = packed(LENGTHS, 12, 32, dtype)
        width = 12 * 32
        query, key, value = qkv[:, :width], qkv[:, width : 2 * width], qkv[:, 2 * width :]
        got = small_attention.attend(query, key, value, torch.tensor(LENGTHS), 12, 32**-0.5, lib=lib)
        assert_close(got, reference(query, key, value, LENGTHS, 12, 32**-0.5, False), dtype)


@needs_compiler
def test_kernel_subtracts_the_row_maximum():
    # scores in the hundreds: e^score overflows float32 unless the row's maximum is subtracted
    qkv = packed(LENGTHS, 2, 32, torch.float32, spread=6.0)
    width = 64
    got = small_attention.attend_rows(qkv, LENGTHS, heads=2, scale=1.0)
    want = reference(qkv[:, :width], qkv[:, width : 2 * width], qkv[:, 2 * width :], LENGTHS, 2, 1.0, False)
    scores = qkv[:16, :32] @ qkv[:16, width : width + 32].T
    assert scores.abs().max() > 200
    assert torch.isfinite(got).all()
    # scores this large carry fp32 rounding of about 1e-5 of their size into the weights: measured 3.7e-4 on values up
    # to 23 (AMX Xeon, 2026-11-29); without the maximum subtracted the context is inf or NaN
    assert (got.double() - want).abs().max() <= 2e-3


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unpadded_operators_route_to_the_kernel_as_asked(monkeypatch, dtype):
    heads, head_size = 12, 32
    width = heads * head_size
    packing = PackedRows.from_lengths(LENGTHS, "cpu")
    qkv = packed(LENGTHS, heads, head_size, dtype, extra=packing.total - sum(LENGTHS))
    query = qkv[:, :width].index_select(0, packing.firsts).contiguous()
    keys_values = qkv[:, width:].contiguous()
    calls = []
    kernel = small_attention.attend
    monkeypatch.setattr(small_attention, "attend", lambda *a, **k: calls.append(k) or kernel(*a, **k))
    outputs = {}
    for mode in ("kernel", "sdpa"):
        monkeypatch.setattr(unpadded, "ROW_ATTENTION", mode)
        calls.clear()
        every = rowwise_attention(qkv, packing.pattern, heads, head_size**-0.5)
        first = first_token_attention(query, keys_values, packing.index, packing.pattern, heads, head_size**-0.5)
        assert len(calls) == (2 if mode == "kernel" else 0)
        outputs[mode] = every, first
    for got, want in zip(outputs["kernel"], outputs["sdpa"]):
        # PyTorch's kernel rounds its probabilities to bf16 before the product with the values, the kernel does not
        tolerance = FP32_ABS if dtype == torch.float32 else 2e-2
        assert (got.double() - want.double()).abs().max() <= tolerance
    assert (outputs["kernel"][0][sum(LENGTHS) :] == 0).all()


@needs_compiler
def test_auto_uses_the_kernel_with_one_thread_only(monkeypatch):
    qkv = torch.zeros(4, 3 * 64)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert unpadded.use_small_attention(qkv, 32)
        assert not unpadded.use_small_attention(qkv, 8)  # a head size it does not compute: PyTorch's kernel
        assert not unpadded.use_small_attention(qkv.half(), 32)
        torch.set_num_threads(2)
        assert not unpadded.use_small_attention(qkv, 32)  # PyTorch's kernel runs each call's heads in parallel
        monkeypatch.setattr(unpadded, "ROW_ATTENTION", "kernel")
        assert unpadded.use_small_attention(qkv, 32)
        monkeypatch.setattr(unpadded, "ROW_ATTENTION", "fast")
        with pytest.raises(ValueError, match="one of auto, kernel, sdpa"):
            unpadded.use_small_attention(qkv, 32)
    finally:
        torch.set_num_threads(threads)


@needs_compiler
def test_inputs_it_does_not_compute_are_refused():
    qkv = torch.zeros(4, 3 * 16)
    with pytest.raises(small_attention.SmallAttentionError, match="head size 8"):
        small_attention.attend_rows(qkv, [4], heads=2, scale=1.0)
    with pytest.raises(small_attention.SmallAttentionError, match="float16"):
        small_attention.attend_rows(qkv.half(), [4], heads=1, scale=1.0)


@pytest.fixture
def fresh_library(monkeypatch, tmp_path):
    """A kernel cache of its own, and :func:`small_attention.library` loaded again (restored after)."""
    monkeypatch.setenv("AS2HUB_KERNEL_CACHE", str(tmp_path / "kernels"))
    small_attention.library.cache_clear()
    yield tmp_path / "kernels"
    small_attention.library.cache_clear()


@needs_compiler
def test_build_is_cached(fresh_library, monkeypatch):
    first = small_attention.build()
    assert first.parent == fresh_library and first.suffix == ".so"
    compiles = []
    run = small_attention.subprocess.run
    monkeypatch.setattr(
        small_attention.subprocess, "run", lambda args, **kw: compiles.append(args) if "-o" in args else run(args, **kw)
    )
    assert small_attention.build() == first
    assert compiles == []
    assert [path.name for path in fresh_library.iterdir()] == [first.name]  # no temporary file left


def test_a_failing_compiler_leaves_nothing_and_keeps_pytorchs_kernel(fresh_library, monkeypatch, caplog):
    monkeypatch.setenv("CC", "false")  # exits 1 without output
    with pytest.raises(small_attention.SmallAttentionError, match="the C compiler 'false' failed"):
        small_attention.build()
    assert list(fresh_library.iterdir()) == []  # no partial library
    with caplog.at_level(logging.WARNING, logger="as2hub.backends"):
        assert small_attention.library() is None
    assert "keeps PyTorch's attention kernel" in caplog.text and "'false'" in caplog.text
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(small_attention.SmallAttentionError, match="could not run"):
        small_attention.build()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert not unpadded.use_small_attention(torch.zeros(4, 96), 32)  # auto: PyTorch's kernel
        monkeypatch.setattr(unpadded, "ROW_ATTENTION", "kernel")
        with pytest.raises(small_attention.SmallAttentionError, match="unavailable"):
            rowwise_attention(torch.zeros(4, 96), torch.ones(1, 1, 1, 4, dtype=torch.bool), 1, 1.0)
    finally:
        torch.set_num_threads(threads)

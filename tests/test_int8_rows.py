"""The steps between the int8 products in C (``inference/int8_rows.c``, :mod:`as2hub.inference.int8`).

What is checked, and against what:
- :func:`~as2hub.inference.int8.gelu_requantize`: the products rescaled, through GELU and quantized per row again,
  against a float64 reference written here from the scheme's statement (the exact erf); the kernel's GELU is a
  rational function, so at most a few codes may sit one step away, none further; the same for
  :func:`~as2hub.inference.int8.rescale_norm` (a layer norm in float64), also for widths that are not whole vectors,
  and for the kernel built for AVX2 only;
- with ``smooth`` (the next product's smoothing, ``Int8Linear.input_scale``): the codes are those of the values times
  it, a layer norm's states are not; with ``rotate`` (``Int8Linear.rotation``) those of the values then times a
  block-diagonal Hadamard matrix built here as a Kronecker power (not by the butterflies under test); a block the
  kernel cannot do is refused;
- the ranker's unpadded int8 pass through these steps (:func:`~as2hub.inference.int8.quantized_layer`) against the
  pass of torch's operations on the same model: scores within :data:`ROWS_ABS`, the kernel called;
- when the pass takes them: one torch thread, int8 layers with the exact GELU, not with ``FEED_FORWARD_KERNEL =
  "torch"``; an unknown setting is refused.
"""

import ctypes

import pytest
import torch
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model

from as2hub.inference import cpu_ops, int8, small_attention, unpadded
from as2hub.inference.int8 import gelu_requantize, quantize_encoder, rescale_norm
from as2hub.inference.ranking import Ranker

needs_compiler = pytest.mark.skipif(
    small_attention.compiler() is None, reason="no C compiler (cc, gcc or clang) to build int8_rows.c"
)

# Share of codes allowed one step away from the float64 reference: the kernel's float32 rounding in another order and
# its GELU (4.4e-7 from the exact one) put a value that sits on a rounding boundary on its other side; measured 4 codes
# of 577,536 (GELU, 1536 wide) and none (layer norm) on the inputs below (AVX-512 EPYC, 2026-11-30). A GELU 1e-4 off
# moves 3.5% of them (a step is 1/255 of a row's range).
ONE_STEP_SHARE = 1e-3
# The unpadded int8 pass through the kernel against torch's operations on the same tiny models: the same integers up
# to such boundary cases (measured 9e-5, 1.2e-5 and 8.6e-6 on these models before the rotation; with it one pair of
# 30 at 1.5e-3, AVX-512 EPYC, 2026-11-30); the bound of a pair alone against its batch (test_int8_ranking.BATCH_ABS).
ROWS_ABS = 5e-3


def products(tokens: int, width: int, seed: int = 0):
    """An int8 product's int32 outputs and the tensors that rescale them: rows over ranges from 0.05 to 8."""
    generator = torch.Generator().manual_seed(seed)
    total = torch.randint(-30000, 30000, (tokens, width), generator=generator, dtype=torch.int32)
    scale = torch.logspace(-3.5, -1.5, tokens)
    zero = torch.randint(0, 256, (tokens,), generator=generator).float()
    weight_sum = torch.randn(width, generator=generator) * 50
    weight_scale = torch.rand(width, generator=generator) * 1e-2 + 1e-3
    bias = torch.randn(width, generator=generator) * 0.2
    return total, scale, zero, weight_sum, weight_scale, bias


def reference_codes(values: torch.Tensor):
    """float64 rows to 8-bit codes over [min(row, 0), max(row, 0)], as int8.quantize_tokens states it."""
    low = values.amin(dim=1).clamp(max=0.0)
    high = values.amax(dim=1).clamp(min=0.0)
    step = (high - low) / 255.0
    zero = torch.round(-low / step)
    codes = torch.clamp(torch.round(values / step[:, None]) + zero[:, None], 0, 255) - 128
    return codes, step, zero


def rescaled(total, scale, zero, weight_sum, weight_scale, bias) -> torch.Tensor:
    total, scale, zero = total.double(), scale.double(), zero.double()
    return (total + (128 - zero)[:, None] * weight_sum.double()) * (scale[:, None] * weight_scale.double()) + bias


def assert_codes_match(got, want):
    codes, step, zero = got
    want_codes, want_step, want_zero = want
    apart = (codes.double() - want_codes).abs()
    assert apart.max() <= 1
    assert (apart > 0).double().mean() <= ONE_STEP_SHARE
    assert ((step.double() - want_step).abs() <= 1e-6 * want_step).all()
    assert (zero.double() - want_zero).abs().max() <= 1


def hadamard_matrix(width: int, block: int) -> torch.Tensor:
    """float64, block-diagonal: Sylvester's Hadamard matrix of size ``block`` (a Kronecker power of [[1, 1],
    [1, -1]])."""
    matrix = torch.ones(1, 1, dtype=torch.float64)
    while matrix.shape[0] < block:
        matrix = torch.kron(torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64), matrix)
    return torch.block_diag(*[matrix] * (width // block))


def transformed(values: torch.Tensor, smooth, rotate: int) -> torch.Tensor:
    """What the codes are of: the values times ``smooth``, then times the Hadamard matrix where ``rotate``."""
    values = values if smooth is None else values * smooth.double()
    return values @ hadamard_matrix(values.shape[1], rotate) if rotate else values


# (width, smoothed, rotate): rotation where the width is whole blocks (the GELU step's 1536 and the norm's 384, with
# blocks of 128 as int8.ROTATION_BLOCK, and 16, the smallest)
GELU_CASES = [(1536, False, 0), (1536, True, 0), (1536, True, 128), (1536, False, 16), (100, False, 0), (100, True, 0)]
NORM_CASES = [(384, False, 0), (384, True, 0), (384, True, 128), (384, False, 32), (100, False, 0), (100, True, 0)]


def smoothing(width: int, smoothed: bool) -> torch.Tensor | None:
    """Per-feature factors from 0.05 to 20 (an outlier feature shrunk, a quiet one stretched), or None."""
    return torch.logspace(-1.3, 1.3, width)[torch.randperm(width, generator=torch.Generator().manual_seed(2))] if (
        smoothed
    ) else None  # fmt: skip


@needs_compiler
@pytest.mark.parametrize("width, smoothed, rotate", GELU_CASES)
def test_gelu_requantize_kernel_is_the_stated_step(monkeypatch, width, smoothed, rotate):
    inputs = products(376, width)
    values = rescaled(*inputs)
    gelu = values * 0.5 * (1 + torch.special.erf(values / 2**0.5))
    assert values.min() < -4 and values.max() > 4  # the range where erf's approximation is clamped, and beyond
    smooth = smoothing(width, smoothed)
    want = reference_codes(transformed(gelu, smooth, rotate))
    for mode in ("kernel", "torch"):  # torch's operations: the same codes
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", mode)
        assert_codes_match(gelu_requantize(*inputs, smooth, rotate), want)


@needs_compiler
@pytest.mark.parametrize("rotate", [128, 8, 100])
def test_kernel_refuses_a_rotation_it_cannot_do(monkeypatch, rotate):
    monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", "kernel")
    with pytest.raises(small_attention.SmallAttentionError, match="rotation block"):
        gelu_requantize(*products(4, 1600), None, rotate)  # 1600 is no whole number of 128s; 8 and 100: no block


@needs_compiler
@pytest.mark.parametrize("width, smoothed, rotate", NORM_CASES)
def test_rescale_norm_kernel_is_the_layer_norm_and_its_codes(monkeypatch, width, smoothed, rotate):
    generator = torch.Generator().manual_seed(1)
    inputs = products(200, width, seed=1)
    residual = torch.randn(200, width, generator=generator) * 3
    weight, bias = torch.rand(width, generator=generator) + 0.5, torch.randn(width, generator=generator) * 0.1
    summed = rescaled(*inputs) + residual.double()
    want = torch.nn.functional.layer_norm(summed, (width,), weight.double(), bias.double(), 1e-12)
    smooth = smoothing(width, smoothed)
    want_codes = reference_codes(transformed(want, smooth, rotate))
    for mode in ("kernel", "torch"):
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", mode)
        states, *codes = rescale_norm(*inputs, residual, weight, bias, 1e-12, smooth, rotate)
        # never smoothed nor rotated
        assert states.dtype == torch.float32 and (states.double() - want).abs().max() <= 1e-5
        assert_codes_match(codes, want_codes)


@needs_compiler
def test_kernel_built_for_avx2_only_gives_the_same_codes(tmp_path):
    if not small_attention.cpu_features().flags >= {"avx2", "fma"}:
        pytest.skip("this CPU has no AVX2: the x86-64-v3 build cannot run here")
    flags = tuple("-march=x86-64-v3" if flag == "-march=native" else flag for flag in small_attention.FLAGS)
    lib = ctypes.CDLL(str(small_attention.build(directory=tmp_path, flags=flags, source=int8.ROWS_SOURCE)))
    total, scale, zero, weight_sum, weight_scale, bias = products(64, 1536)
    smooth = smoothing(1536, True)
    codes, step, point = torch.empty(64, 1536, dtype=torch.int8), torch.empty(64), torch.empty(64)
    pointers = [t.data_ptr() for t in (scale, zero, weight_sum, weight_scale, bias)]
    lib.as2hub_requantize.argtypes = int8._ARGTYPES["as2hub_requantize"]
    outputs = (t.data_ptr() for t in (codes, step, point))
    assert lib.as2hub_requantize(total.data_ptr(), 64, 1536, *pointers, 1, smooth.data_ptr(), 128, *outputs) == 0
    values = rescaled(total, scale, zero, weight_sum, weight_scale, bias)
    gelu = values * 0.5 * (1 + torch.special.erf(values / 2**0.5))
    assert_codes_match((codes, step, point), reference_codes(transformed(gelu, smooth, 128)))


@needs_compiler
@pytest.mark.parametrize("backbone, contextual", [("bert", True), ("roberta", False), ("electra", True)])
def test_unpadded_int8_pass_through_the_kernel_scores_as_torch(monkeypatch, tokenizers, backbone, contextual):
    model, tokenizer = cascade_model(tokenizers, backbone, contextual=contextual, layers=())
    quantize_encoder(model)
    assert all(int8.rows_ready(layer) for layer in model.base_model.encoder.layer)
    contexts = CONTEXTS if contextual else None
    ranker = Ranker(model, tokenizer, unpadded=True)
    questions = [QUESTION] * len(CANDIDATES)
    calls = []
    kernel = int8.rescale_norm
    monkeypatch.setattr(int8, "rescale_norm", lambda *a: calls.append(1) or kernel(*a))
    monkeypatch.setattr(cpu_ops, "library", lambda: False)  # the Python operators (test_cpu_ops.py: the C++ ones)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", "torch")
        want = ranker.score_pairs(questions, CANDIDATES, contexts)
        assert not calls
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", "auto")
        got = ranker.score_pairs(questions, CANDIDATES, contexts)
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2 * model.config.num_hidden_layers  # each layer's two norms, the last on its first tokens
    assert (got - want).abs().max() <= ROWS_ABS and want.std() > 0.05


@needs_compiler
def test_the_pass_takes_the_kernel_with_one_thread_and_the_exact_gelu(monkeypatch, tokenizers):
    model, _ = cascade_model(tokenizers, "bert", contextual=True, layers=())
    plain, _ = cascade_model(tokenizers, "bert", contextual=True, layers=())
    quantize_encoder(model)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert unpadded.use_int8_rows(model, "cpu")
        assert not unpadded.use_int8_rows(plain, "cpu")  # fp32 layers
        torch.set_num_threads(2)  # inductor's kernels run in parallel: they stay
        assert not unpadded.use_int8_rows(model, "cpu")
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", "kernel")
        assert unpadded.use_int8_rows(model, "cpu")
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", "fast")
        with pytest.raises(ValueError, match="one of auto, kernel, torch"):
            unpadded.use_int8_rows(model, "cpu")
    finally:
        torch.set_num_threads(threads)
    tanh_model, _ = cascade_model(tokenizers, "bert", contextual=True, layers=())
    for layer in tanh_model.base_model.encoder.layer:  # GELU's tanh form: not the function the kernel computes
        layer.intermediate.intermediate_act_fn = torch.nn.GELU(approximate="tanh")
    quantize_encoder(tanh_model)
    assert not any(int8.rows_ready(layer) for layer in tanh_model.base_model.encoder.layer)


@needs_compiler
@pytest.mark.parametrize(
    "width, smoothed, rotate", [(384, True, 128), (384, False, 0), (100, True, 0), (64, False, 64)]
)
def test_quantize_rows_kernel_is_quantize_tokens(monkeypatch, width, smoothed, rotate):
    generator = torch.Generator().manual_seed(4)
    rows = torch.randn(50, width, generator=generator) * torch.logspace(-1, 1, 50)[:, None]
    smooth = smoothing(width, smoothed)
    want = reference_codes(transformed(rows.double(), smooth, rotate))
    for mode in ("kernel", "torch"):
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", mode)
        assert_codes_match(int8.quantize_rows(rows, smooth, rotate), want)

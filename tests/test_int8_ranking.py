"""``backend="torch-int8"``: the encoder's products on integers (:mod:`as2hub.inference.int8`).

What is checked, and against what:
- :class:`Int8Linear` computes the quantization its docstring states (8-bit weights per output channel, 7-bit on a
  CPU without VNNI or AMX: :data:`WEIGHT_LEVELS_BY_CPU`; 8-bit activations per token over a range that includes 0):
  against an independent float64 reference written here from that statement, and within a stated bound of the fp32
  product;
- a row's output does not depend on the other rows of its batch (bit for bit), and a row of zeros gives the bias;
- the ranker: scores within :data:`TORCH_INT8_TOLERANCE` of fp32 torch on the tiny spread models of ``test_backends``
  (every backbone, contextual and pairwise, BERT-style and RoBERTa tokenizers), the unpadded pass the padded one's,
  scores independent of the batch, the cascade; compiled (dynamo's graphs: built once, scores as eager; inductor:
  the checkpoint path, fused kernels within float rounding);
- the errors: a model without BERT-style encoder layers.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BACKBONES
from test_backends import WEIGHT_STD, spread_tiny_ranker
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model
from test_compiled_ranking import assert_compiles_once_and_scores_as_eager, side_by_side
from test_onnx_backend import score_all

from as2hub.inference import cpu_ops
from as2hub.inference.backends import BACKENDS, cpu_features
from as2hub.inference.compiled import INT8_INDUCTOR, CompiledRankerModel
from as2hub.inference.int8 import Int8Linear, Int8UnsupportedError, quantize_encoder, weight_levels
from as2hub.inference.ranking import Ranker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

# Largest |torch-int8 score - fp32 score| on the tiny spread models (weights std 0.2, scores spreading > 0.075, as for
# the ONNX int8 graph in test_backends). The same quantization as that graph (test_onnx_backend.INT8_TOLERANCE,
# 0.025: at most 0.0179 measured with 7-bit weights; 8-bit ones round less).
TORCH_INT8_TOLERANCE = 0.025
# A pair alone against the same pair in its batch, and the unpadded pass against the padded one (the three models
# below, every candidate). Per-token scales give the same integers, but fp32 rounding of the float parts differs with
# the batch's shape and can move a value across a rounding boundary: at most 3.5e-5 measured before the rotation (1 and
# 2 threads, AVX-512 EPYC, 2026-11-29); with it (int8.ROTATED_INPUTS: each code sums 32 values here, so the float
# parts' last bits reach more codes) one pair of 30 moved 1.5e-3 (ELECTRA, unpadded against padded), the others at most
# 1.4e-5 (AVX-512 EPYC, 2026-11-30). One scale per batch instead moves these scores by 0.08-0.23 (the same models,
# measured by swapping quantize_tokens for a per-tensor version).
BATCH_ABS = 5e-3
# inductor's fused kernels against the eager int8 pass: the quantization's products run fused (multiply-adds), so a
# value on a rounding boundary can take the next integer, one step of 1/255 of its token's range: 7.5e-4 measured on
# a tiny model's score (AVX-512 EPYC, 2026-11-29), where fp32 kernels differ by 1e-5 (INDUCTOR_FP32_ABS).
INDUCTOR_INT8_ABS = 5e-3


# The weights' largest integer by the CPU's int8 instructions: 32-bit sums of four products (VNNI, AMX) take 8 bits;
# AVX2's saturating 16-bit sums of two products take 7 (255 * 63 * 2 < 32767 < 255 * 127 * 2).
WEIGHT_LEVELS_BY_CPU = [
    ({"avx2", "fma"}, 63),  # the AVX2 EPYC
    ({"avx2", "avx512f", "avx512bw"}, 63),  # AVX-512 without VNNI
    ({"avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}, 127),  # the AVX-512 EPYC
    ({"avx2", "avx_vnni"}, 127),  # AVX-VNNI (Alder Lake and later)
    ({"avx2", "avx512f", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile"}, 127),  # the AMX Xeon
]


def this_cpus_levels() -> int:
    return next((levels for flags, levels in reversed(WEIGHT_LEVELS_BY_CPU) if flags <= cpu_features().flags), 63)


def test_weights_take_8_bits_where_the_int8_sums_are_32_bits():
    for flags, levels in WEIGHT_LEVELS_BY_CPU:
        assert weight_levels(frozenset(flags)) == levels, flags
    assert Int8Linear(torch.nn.Linear(4, 2)).levels == this_cpus_levels()


def reference_int8_linear(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, levels: int, stored: tuple | None = None
) -> np.ndarray:
    """The stated scheme in float64, written apart from the module: weights to integers in [-levels, levels] with one
    scale per output channel (max |w| / levels), or the ``stored`` ``(integers, scales)``; each input row to integers
    in [0, 255] over [min(row, 0), max(row, 0)] with its zero point; the integer product, then the scales."""
    w_scale = np.abs(weight).max(axis=1) / levels
    w_int = np.clip(np.round(weight / w_scale[:, None]), -levels, levels)
    if stored is not None:
        w_int, w_scale = (np.asarray(part, dtype=np.float64) for part in stored)
    low, high = np.minimum(x.min(axis=1), 0.0), np.maximum(x.max(axis=1), 0.0)
    x_scale = (high - low) / 255.0
    zero = np.round(-low / x_scale)
    x_int = np.clip(np.round(x / x_scale[:, None]) + zero[:, None], 0, 255)
    return ((x_int - zero[:, None]) @ w_int.T) * x_scale[:, None] * w_scale[None, :] + bias


@pytest.mark.parametrize("levels", [63, 127, None], ids=["7-bit", "8-bit", "this-cpu"])
def test_int8_linear_is_the_stated_quantization(levels):
    generator = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(96, 40)
    x = torch.randn(7, 96, generator=generator) * torch.linspace(0.1, 5.0, 7)[:, None] + 0.3  # rows of other ranges
    got = Int8Linear(linear, levels=levels)(x)
    want = reference_int8_linear(
        x.double().numpy(),
        linear.weight.detach().double().numpy(),
        linear.bias.detach().numpy(),
        levels or this_cpus_levels(),
    )
    # float32 against float64 on the same integers: rounding of the scales only
    assert np.abs(got.numpy() - want).max() <= 1e-4 * np.abs(want).max()
    # and the product itself: within 3% of the fp32 product's largest value (7-bit weights, 8-bit tokens; measured
    # 1.0-1.1% at 384 inputs, 2026-11-29), where a wrong zero point or scale is off by the whole product
    fp32 = linear(x).detach()
    assert (got - fp32).abs().max() <= 0.03 * fp32.abs().max()
    assert not torch.equal(got, fp32)


def test_int8_linear_rows_do_not_depend_on_their_batch():
    generator = torch.Generator().manual_seed(1)
    layer = Int8Linear(torch.nn.Linear(64, 32), torch.nn.Linear(64, 16))  # two side by side: one product
    assert layer.out_features == 48 and layer.in_features == 64
    rows = torch.randn(9, 64, generator=generator) * torch.logspace(-2, 2, 9)[:, None]
    together = layer(rows)
    for i in range(len(rows)):
        assert torch.equal(layer(rows[i : i + 1]), together[i : i + 1])
    assert torch.equal(layer(rows.view(3, 3, 64)), together.view(3, 3, 48))  # leading dimensions are kept
    zeros = layer(torch.zeros(2, 64))
    assert torch.equal(zeros, layer.bias.expand(2, 48))


def test_quantize_encoder_replaces_the_encoder_products_only(tokenizers):
    model, _ = cascade_model(tokenizers, "bert", contextual=True)
    depth = model.config.num_hidden_layers
    assert quantize_encoder(model) == 6 * depth
    assert sum(isinstance(m, Int8Linear) for m in model.modules()) == 8 * depth  # and the fused qkv and kv
    assert all(type(head[-1] if isinstance(head, torch.nn.Sequential) else head) is not Int8Linear
               for head in model.cascade_heads)  # fmt: skip
    assert not any(isinstance(m, Int8Linear) for m in model.base_model.embeddings.modules())
    assert not any("int8" in name or name.endswith("packed_qkv.weight") for name in model.state_dict())


def test_quantize_encoder_refuses_a_model_without_bert_layers():
    with pytest.raises(Int8UnsupportedError, match="needs a model with BERT-style encoder layers.*Linear has none"):
        quantize_encoder(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_torch_int8_scores_stay_within_tolerance(stock_checkpoint, tmp_path, backbone, contextual):
    folder = spread_tiny_ranker(
        stock_checkpoint, tmp_path, backbone, contextual, export=False, std=WEIGHT_STD["onnx-int8"], min_spread=0.075
    )
    expected = score_all(Ranker.from_pretrained(folder, batch_size=2))
    assert expected.max() - expected.min() > 3 * TORCH_INT8_TOLERANCE, f"the scores do not spread: {expected}"
    for unpadded in (False, True):
        int8 = Ranker.from_pretrained(folder, backend="torch-int8", batch_size=2, unpadded=unpadded)
        assert int8.backend == "torch-int8" and BACKENDS["torch-int8"] == ("torch", "int8")
        assert next(int8.model.parameters()).dtype == torch.float32  # an fp32 model, int8 products
        got = score_all(int8)
        assert not torch.equal(got, expected)
        assert (got - expected).abs().max().item() <= TORCH_INT8_TOLERANCE


@pytest.mark.parametrize("backbone, contextual", [("bert", True), ("roberta", False), ("electra", True)])
def test_torch_int8_unpadded_is_its_padded_pass_and_does_not_depend_on_the_batch(tokenizers, backbone, contextual):
    model, tokenizer = cascade_model(tokenizers, backbone, contextual=contextual, layers=())
    quantize_encoder(model)
    contexts = CONTEXTS if contextual else None
    padded = Ranker(model, tokenizer, batch_size=16)
    packed = Ranker(model, tokenizer, unpadded=True)
    questions = [QUESTION] * len(CANDIDATES)
    want = padded.score_pairs(questions, CANDIDATES, contexts)
    got = packed.score_pairs(questions, CANDIDATES, contexts)
    # the same tokens get the same integers (per-token scales); only attention's sums run in another order, which
    # can move a value on a rounding boundary (BATCH_ABS)
    assert (got - want).abs().max() <= BATCH_ABS and got.std() > 0.05
    for i in range(len(CANDIDATES)):  # alone, each pair scores as in the batch (BATCH_ABS)
        one = packed.score_pairs([QUESTION], [CANDIDATES[i]], contexts and [contexts[i]])
        assert (one - got[i]).abs().max() <= BATCH_ABS
        one = padded.score_pairs([QUESTION], [CANDIDATES[i]], contexts and [contexts[i]])
        assert (one - want[i]).abs().max() <= BATCH_ABS


def test_torch_int8_compiled_builds_once_and_scores_as_eager_with_the_cascade(tokenizers):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)
    quantize_encoder(model)
    assert_compiles_once_and_scores_as_eager(model, tokenizer, unpadded=True)


def assert_int8_inductor_scores_as_eager(tokenizers, folder, drops, **model_options) -> None:
    """``backend="torch-int8", unpadded=True, torch_compile=True`` from a saved folder: inductor's kernels (with
    :data:`INT8_INDUCTOR`; its wrapper in C++ where the C++ operators load, test_cpu_ops.py) against the eager int8
    pass, for each cascade drop."""
    model, tokenizer = cascade_model(tokenizers, "roberta", contextual=True, **model_options)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    eager = Ranker.from_pretrained(str(folder), backend="torch-int8", unpadded=True)
    ranker = Ranker.from_pretrained(str(folder), backend="torch-int8", unpadded=True, torch_compile=True)
    assert isinstance(ranker.model, CompiledRankerModel)
    wrapper = {"cpp_wrapper": True} if cpu_ops.library() else {}
    assert ranker.model._inductor == {**INT8_INDUCTOR, **wrapper}
    for got_layers, want_layers, got, want in side_by_side(ranker, eager, drops, contextual=True):
        assert got_layers == want_layers
        assert (got - want).abs().max() <= INDUCTOR_INT8_ABS


@pytest.mark.long
def test_from_pretrained_torch_int8_unpadded_compiled_inductor(tokenizers, tmp_path):
    """The checkpoint path as the benchmark runs it, on the smallest model that takes it (two layers, no cascade: two
    inductor graphs, a batch of one pair and of more; each inductor graph costs 20-30 s of a 2-core CI machine), in the
    long lane: CI compiles the same path by inductor on the two calibrated (smoothed) rankers
    (``test_int8_smoothing.py::test_calibrated_ranker_is_the_smoothed_scheme_on_every_path``, with this config check),
    and the cascade's int8 stages by dynamo
    (:func:`test_torch_int8_compiled_builds_once_and_scores_as_eager_with_the_cascade`); the cascade by inductor is
    below."""
    assert_int8_inductor_scores_as_eager(tokenizers, tmp_path, (None,), layers=(), depth=2)


@pytest.mark.long
def test_from_pretrained_torch_int8_unpadded_compiled_inductor_with_the_cascade(tokenizers, tmp_path):
    """The same with the cascade (stages after layers 1 and 3 of 4, drops none and 0.3): eight inductor graphs, about
    3 minutes on one AVX2 EPYC core (2026-12-01), so in the long lane (``make test-long``)."""
    assert_int8_inductor_scores_as_eager(tokenizers, tmp_path, (None, 0.3))


def test_the_benchmark_compares_every_as2hub_run_with_fp32():
    import bench_cascade

    runs = [{"system": name} for name in ("as2hub torch-int8", "CrossEncoder torch @16", "CrossEncoder torch @8")]
    assert bench_cascade.fp32_reference(runs)["system"] == "CrossEncoder torch @8"
    assert bench_cascade.fp32_reference([*runs, {"system": "as2hub torch"}])["system"] == "as2hub torch"
    assert bench_cascade.fp32_reference(runs[:1]) is None

"""Smoothed int8 products (``backend="torch-int8"`` with a calibration; :mod:`as2hub.inference.int8`).

What is checked, and against what:
- :class:`Int8Linear` with ``smoothing`` is the stated scheme: the float64 reference of ``test_int8_ranking`` on the
  inputs divided by the factors and the weights' columns multiplied by them; on an input with an outlier feature it
  is closer to the fp32 product than without (:data:`SMOOTHED_GAIN`); bad factors are refused;
- :func:`smoothing_factors` on numbers worked by hand;
- :func:`input_maxima` against the encoder's own hidden states (``output_hidden_states``), not through hooks;
- the ranker: ``calibrate_int8`` writes the folder's :data:`CALIBRATION_FILE` atomically, ``from_pretrained`` reads it
  on every path (padded, unpadded through the C steps and through torch's, compiled), each scoring as a float64
  reference of the scheme built here from the statistics (tiny models with outlier features, BERT-style and RoBERTa
  tokenizers), apart from the unsmoothed products; whether smoothing brings a real ranker closer to fp32 is measured
  on WikiQA (``inference/BACKENDS.md``); statistics of other weights are ignored with a warning, a broken file or
  statistics of another shape raise an error naming the file; an int8 or compiled ranker cannot calibrate; a Hub id
  reads the repository's file;
- the rotation and the stored GPTQ weights: the reference above also rotates (signs, then a Hadamard matrix built as a
  Kronecker power, in blocks) and takes the calibration's integers; those integers are the reference's own rotated,
  smoothed weights moved by GPTQ (the scale of rounding to nearest, a few steps at most); :func:`gptq` equals an
  optimal-brain-quantizer form written in the test, is rounding to nearest on uncorrelated inputs and beats it on
  correlated ones; integers computed for another layout are ignored with a warning.
"""

import logging

import numpy as np
import pytest
import torch
from test_backends import spread_tiny_ranker
from test_cascade import CANDIDATES, CONTEXTS, QUESTION
from test_int8_ranking import reference_int8_linear, this_cpus_levels
from test_int8_rows import hadamard_matrix
from test_onnx_backend import score_all

from as2hub.inference import cpu_ops, int8, small_attention
from as2hub.inference.compiled import INT8_INDUCTOR, CompiledRankerModel
from as2hub.inference.int8 import CALIBRATION_FILE, Int8Linear, input_maxima, smoothing_factors
from as2hub.inference.ranking import Ranker

# The smoothed product's largest error from fp32 against the unsmoothed one's, on rows whose feature 0 runs 30x the
# others (the weights std 1): at most this share. Measured 0.37 (7-bit weights) and 0.35 (8-bit), AVX-512 EPYC,
# 2026-11-30; unsmoothed, the outlier sets every row's step, 30x the others' own.
SMOOTHED_GAIN = 0.5
# The calibrated rankers' scores against the float64 reference of the scheme, every path: float32 rounding puts a
# value on a rounding boundary on its other side, one step of its token's 1/255 (inductor's fused multiply-adds too:
# test_int8_ranking.INDUCTOR_INT8_ABS). Measured 4.0e-3 on the BERT model below, the same on every path (one value
# whose float32 division by its factor and the reference's float64 one round to neighbouring integers), 1.2e-7 on the
# RoBERTa one, while the unsmoothed products are 0.024 (BERT) and 0.015 (RoBERTa) away; AVX-512 EPYC, 2026-11-30.
SCHEME_ABS = 5e-3
# Calibration pairs: other text than the pairs scored
CALIBRATION_QUESTIONS = ["what does a garbage collector do?", "when was python first released?"] * 3
CALIBRATION_CANDIDATES = [
    "It frees memory that no object refers to any more.",
    "Python appeared in 1991, designed by Guido van Rossum.",
    "Reference counting frees most objects as soon as they are unreachable.",
    "The language is named after a comedy group.",
    "Cycles of objects need a separate pass to be found.",
    "Version 3.0 was released in December 2008.",
]


def outlier_rows(generator, features=64):
    rows = torch.randn(12, features, generator=generator)
    rows[:, 0] *= 30.0
    return rows


@pytest.mark.parametrize("levels", [63, 127])
def test_smoothed_int8_linear_is_the_stated_scheme_and_closer_to_fp32(levels):
    generator = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    torch.nn.init.normal_(linear.weight, std=1.0, generator=generator)
    rows = outlier_rows(generator)
    factors = smoothing_factors(rows.abs().amax(dim=0), linear.weight)
    smoothed = Int8Linear(linear, levels=levels, smoothing=factors)
    assert torch.allclose(smoothed.input_scale, 1.0 / factors)
    got = smoothed(rows)
    want = reference_int8_linear(
        (rows / factors).double().numpy(),
        (linear.weight * factors).detach().double().numpy(),
        linear.bias.detach().numpy(),
        levels,
    )
    assert np.abs(got.numpy() - want).max() <= 1e-4 * np.abs(want).max()
    fp32 = linear(rows).detach()
    plain = Int8Linear(linear, levels=levels)(rows)
    assert (got - fp32).abs().max() <= SMOOTHED_GAIN * (plain - fp32).abs().max()
    assert "smoothed" in repr(smoothed) and "smoothed" not in repr(Int8Linear(linear))
    assert "rotated in blocks of 64" in repr(Int8Linear(linear, rotate=True))


def test_smoothing_factors_worked_by_hand_and_bad_factors_refused():
    # input 9 and 1, weights 1 and 4: sqrt(9) / sqrt(1) = 3, sqrt(1) / sqrt(4) = 0.5
    factors = smoothing_factors(torch.tensor([9.0, 1.0]), torch.tensor([[1.0, -4.0], [0.5, 2.0]]))
    assert factors.tolist() == [3.0, 0.5]
    assert smoothing_factors(torch.tensor([8.0, 1.0]), torch.tensor([[2.0, 1.0]]), alpha=1.0).tolist() == [8.0, 1.0]
    linear = torch.nn.Linear(4, 2)
    for bad in (torch.ones(3), torch.tensor([1.0, 0.0, 1.0, 1.0])):
        with pytest.raises(ValueError, match="one positive factor per input feature"):
            Int8Linear(linear, smoothing=bad)


def outlier_ranker(stock_checkpoint, folder, backbone, contextual):
    """A tiny spread ranker whose layer norms give features 3 and 7 weights of 5: outlier features in every product
    input but the attention's context, as trained BERT-style encoders have (MiniLM's: 28 against a median of 2)."""
    spread_tiny_ranker(stock_checkpoint, folder, backbone, contextual, export=False)
    ranker = Ranker.from_pretrained(folder)
    with torch.no_grad():
        for module in ranker.model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight[[3, 7]] = 5.0
    ranker.model.save_pretrained(folder)
    return Ranker.from_pretrained(folder)


def calibrate(ranker, folder):
    contexts = CONTEXTS[: len(CALIBRATION_CANDIDATES)] if ranker.contextual else None
    return ranker.calibrate_int8(CALIBRATION_QUESTIONS, CALIBRATION_CANDIDATES, contexts, save_to=folder)


def test_input_maxima_are_the_encoder_inputs_largest_values(stock_checkpoint, tmp_path):
    ranker = outlier_ranker(stock_checkpoint, tmp_path / "m", "bert", contextual=False)
    batch = ranker.tokenizer(["a question"] * 3, ["one", "a longer candidate here", "two words"], padding=True,
                             return_tensors="pt")  # fmt: skip
    maxima = input_maxima(ranker.model, lambda: ranker.model(**batch))
    with torch.no_grad():
        hidden = ranker.model(**batch, output_hidden_states=True).hidden_states
    depth = ranker.model.config.num_hidden_layers
    assert len(maxima) == 4 * depth
    for layer in range(depth):  # a layer's queries, keys and values read the previous layer's output
        assert torch.allclose(maxima[f"{layer}.attention"], hidden[layer].abs().amax(dim=(0, 1)))
    # the outlier features lead every layer's output (the embeddings' norm included)
    assert all(sorted(maxima[f"{layer}.attention"].topk(2).indices.tolist()) == [3, 7] for layer in range(depth))


# The products whose inputs are rotated (a layer norm's or GELU's output), and the block: the largest power of two
# dividing the width, up to 128 (the tiny models' 32 and 37-wide inputs: 32, and none)
ROTATED = {"attention", "intermediate.dense", "output.dense"}


def block_of(width: int) -> int:
    block = 1
    while block < 128 and width % (2 * block) == 0:
        block *= 2
    return block if block >= 16 else 0


class ReferenceSmoothedLinear(torch.nn.Module):
    """The stated scheme in float64 (``reference_int8_linear``): the inputs divided by this test's own factors,
    ``input_max ** 0.5 / weight_max ** 0.5`` per feature, and the weights' columns multiplied by them; where
    ``rotated``, both further times the signs over sqrt(block), then times the block-diagonal Hadamard matrix; the
    weights rounded to nearest, or the ``stored`` integers and scales (the calibration's GPTQ weights)."""

    def __init__(self, linear, input_max, weight_max, levels, rotated=False, stored=None):
        super().__init__()
        self.linear, self.levels, self.stored = linear, levels, stored
        self.factors = (input_max.double().clamp(min=1e-5) / weight_max.double().clamp(min=1e-5)).sqrt()
        width = linear.in_features
        self.block = block_of(width) if rotated else 0
        self.signs = torch.ones(width, dtype=torch.float64)
        self.rotation = torch.eye(width, dtype=torch.float64)
        if self.block:
            self.signs = int8.rotation_signs(width).double() / self.block**0.5
            self.rotation = hadamard_matrix(width, self.block)

    def weights(self) -> torch.Tensor:
        return (self.linear.weight.detach().double() * self.factors * self.signs) @ self.rotation

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1]).double()
        out = reference_int8_linear(
            ((rows / self.factors * self.signs) @ self.rotation).numpy(),
            self.weights().numpy(),
            self.linear.bias.detach().double().numpy(),
            self.levels,
            self.stored,
        )
        return torch.from_numpy(out).float().reshape(*x.shape[:-1], -1)


def reference_ranker(folder, calibration, stored=True):
    """The ranker at ``folder`` with every encoder product a :class:`ReferenceSmoothedLinear` (``stored``: with the
    calibration's integer weights)."""
    ranker = Ranker.from_pretrained(folder)
    for index, layer in enumerate(ranker.model.base_model.encoder.layer):
        attention = layer.attention.self
        qkv = torch.cat([attention.query.weight, attention.key.weight, attention.value.weight]).abs().amax(dim=0)
        for parent, name, key, path in [
            (attention, "query", "attention", "attention.self.query"),
            (attention, "key", "attention", "attention.self.key"),
            (attention, "value", "attention", "attention.self.value"),
            (layer.attention.output, "dense", "attention.output.dense", "attention.output.dense"),
            (layer.intermediate, "dense", "intermediate.dense", "intermediate.dense"),
            (layer.output, "dense", "output.dense", "output.dense"),
        ]:
            linear = getattr(parent, name)
            weight_max = qkv if key == "attention" else linear.weight.abs().amax(dim=0)
            stored_here = stored and int(calibration["levels"]) == this_cpus_levels()  # else rounded to nearest
            codes = (
                (calibration[f"{index}.{path}.codes"], calibration[f"{index}.{path}.scale"]) if stored_here else None
            )
            setattr(parent, name, ReferenceSmoothedLinear(linear, calibration[f"{index}.{key}"], weight_max,
                                                          this_cpus_levels(), key in ROTATED, codes))  # fmt: skip
    return ranker


@pytest.mark.parametrize("backbone, contextual", [("bert", False), ("roberta", True)])
def test_calibrated_ranker_is_the_smoothed_scheme_on_every_path(stock_checkpoint, tmp_path, monkeypatch, backbone,
                                                                contextual):  # fmt: skip
    """The compiled path is inductor's, as the benchmark runs it (the int8 inductor config, its wrapper in C++ where the
    C++ operators load): the checkpoint path of ``torch-int8`` with ``unpadded`` and ``torch_compile`` in CI
    (unsmoothed, with and without the cascade, it is in the long lane: ``test_int8_ranking.py``)."""
    folder = tmp_path / "ranker"
    fp32_ranker = outlier_ranker(stock_checkpoint, folder, backbone, contextual)
    plain = score_all(Ranker.from_pretrained(folder, backend="torch-int8"))
    maxima = calibrate(fp32_ranker, folder)
    assert (folder / CALIBRATION_FILE).is_file()
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]  # no partial file left
    want = score_all(reference_ranker(folder, maxima))
    assert (plain - want).abs().max() > 2 * SCHEME_ABS  # the unsmoothed products are told apart
    torch.set_num_threads(1)  # the unpadded pass takes the C steps with one thread (int8.use_rows_kernel)
    paths = [({}, "auto"), ({"unpadded": True}, "torch")]
    if small_attention.compiler() is not None:
        paths.append(({"unpadded": True}, "kernel"))
    paths.append(({"unpadded": True, "torch_compile": True}, "auto"))
    for options, kernel in paths:
        monkeypatch.setattr(int8, "FEED_FORWARD_KERNEL", kernel)
        ranker = Ranker.from_pretrained(folder, backend="torch-int8", **options)
        compiled = options.get("torch_compile", False)
        assert isinstance(ranker.model, CompiledRankerModel) == compiled
        if compiled:
            assert ranker.model.backend == "inductor"
            assert ranker.model._inductor == {**INT8_INDUCTOR, **({"cpp_wrapper": True} if cpu_ops.library() else {})}
        layer = (ranker.model.module if compiled else ranker.model).base_model.encoder.layer[0]
        assert layer.attention.self.packed_qkv.smoothed and layer.attention.self.packed_qkv.rotation == 32
        error = (score_all(ranker) - want).abs().max()
        assert error <= SCHEME_ABS, (options, kernel, float(error))


def test_calibration_of_other_weights_is_ignored_and_a_broken_one_named(stock_checkpoint, tmp_path, caplog):
    folder = tmp_path / "ranker"
    ranker = outlier_ranker(stock_checkpoint, folder, "bert", contextual=False)
    maxima = calibrate(ranker, folder)
    with torch.no_grad():
        next(ranker.model.parameters()).add_(0.01)
    ranker.model.save_pretrained(folder)  # new weights: the statistics are stale
    with caplog.at_level(logging.WARNING, logger="as2hub.backends"):
        stale = Ranker.from_pretrained(folder, backend="torch-int8")
    assert not stale.model.base_model.encoder.layer[0].attention.self.packed_qkv.smoothed
    assert CALIBRATION_FILE in caplog.text and "other weights" in caplog.text
    int8.save_calibration(folder, {**maxima, "0.attention": maxima["0.attention"][:5]}, 6)  # another shape
    with pytest.raises(ValueError, match=rf"{CALIBRATION_FILE}.*'0.attention'"):
        Ranker.from_pretrained(folder, backend="torch-int8")
    (folder / CALIBRATION_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match=rf"{CALIBRATION_FILE}: not a readable int8 calibration"):
        Ranker.from_pretrained(folder, backend="torch-int8")


def test_only_an_eager_fp32_ranker_calibrates(stock_checkpoint, tmp_path, monkeypatch):
    folder = tmp_path / "ranker"
    ranker = outlier_ranker(stock_checkpoint, folder, "bert", contextual=False)
    with pytest.raises(ValueError, match="backend='torch'"):
        Ranker.from_pretrained(folder, backend="torch-int8").calibrate_int8([QUESTION], [CANDIDATES[0]])
    with pytest.raises(ValueError, match="at least one"):
        ranker.calibrate_int8([], [])

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("safetensors.torch.save_file", fail)
    with pytest.raises(OSError, match="disk full"):
        calibrate(ranker, folder)
    assert not (folder / CALIBRATION_FILE).exists()


def test_a_hub_id_reads_the_repositorys_calibration_beside_its_weights(stock_checkpoint, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import EntryNotFoundError

    folder = tmp_path / "snapshot"  # stands for the Hub cache's snapshot of tester/ranker
    maxima = calibrate(outlier_ranker(stock_checkpoint, folder, "bert", contextual=False), folder)
    asked = []

    def download(repo_id, filename, **kwargs):
        asked.append((repo_id, filename))
        if repo_id != "tester/ranker":
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(folder / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    loaded = int8.load_calibration("tester/ranker")
    assert asked == [("tester/ranker", CALIBRATION_FILE)]
    assert loaded.keys() == maxima.keys() and all(torch.equal(loaded[key], maxima[key]) for key in maxima)
    assert int8.load_calibration("tester/uncalibrated") is None


def reference_gptq(weight: np.ndarray, gram: np.ndarray, scale: np.ndarray, levels: int, damping: float) -> np.ndarray:
    """GPTQ as Frantar et al. state it, written apart from the module (the optimal brain quantizer's form: the inverse
    Hessian updated after each column by removing that column, not a Cholesky factor): column by column, round to the
    grid, then move the remaining columns by minus the error times the inverse Hessian's row over its diagonal."""
    work = weight.copy()
    hessian = gram + damping * np.mean(np.diag(gram)) * np.eye(len(gram))
    inverse = np.linalg.inv(hessian)
    codes = np.zeros_like(work)
    for column in range(work.shape[1]):
        codes[:, column] = np.clip(np.round(work[:, column] / scale), -levels, levels)
        error = (work[:, column] - codes[:, column] * scale) / inverse[column, column]
        work[:, column + 1 :] -= np.outer(error, inverse[column, column + 1 :])
        inverse = inverse - np.outer(inverse[:, column], inverse[column, :]) / inverse[column, column]
    return codes


def correlated_inputs(generator, tokens=400, features=24):
    mixing = torch.randn(features, features, generator=generator, dtype=torch.float64)
    return torch.randn(tokens, features, generator=generator, dtype=torch.float64) @ mixing


@pytest.mark.parametrize("levels", [63, 127])
def test_gptq_is_the_stated_algorithm_and_beats_rounding_on_its_inputs(levels):
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(10, 24, generator=generator, dtype=torch.float64)
    inputs = correlated_inputs(generator)
    gram = inputs.t() @ inputs
    codes, scale = int8.gptq(weight.float(), gram, levels)
    rounded, rounded_scale = int8.quantize_weights(weight.float(), levels)
    assert torch.equal(scale, rounded_scale)  # the grid is rounding to nearest's
    want = reference_gptq(weight.numpy(), gram.numpy(), scale.double().numpy(), levels, int8.GPTQ_DAMPING)
    assert np.array_equal(codes.double().numpy(), want)
    assert codes.abs().max() <= levels

    def error(integers):
        return float(((inputs @ (integers.double() * scale.double()[:, None] - weight).t()) ** 2).sum())

    # on the inputs it was fitted to, the product's squared error falls below rounding's (measured 0.61x and 0.50x for
    # 7 and 8 bits on these 24 correlated features, 2026-11-30)
    assert error(codes) <= 0.75 * error(rounded)
    # inputs with no correlation and equal scale: nothing to compensate, rounding to nearest
    uncorrelated, _ = int8.gptq(weight.float(), torch.eye(24, dtype=torch.float64) * 400, levels)
    assert torch.equal(uncorrelated, rounded)


def test_calibration_weights_are_the_rotated_smoothed_weights_rounded_by_gptq(stock_checkpoint, tmp_path, caplog):
    folder = tmp_path / "ranker"
    ranker = outlier_ranker(stock_checkpoint, folder, "bert", contextual=False)
    calibration = calibrate(ranker, folder)
    reference = reference_ranker(folder, calibration, stored=False)
    assert int(calibration["levels"]) == 127
    for index, layer in enumerate(reference.model.base_model.encoder.layer):
        for path in int8.ENCODER_LINEARS:
            weights = layer.get_submodule(path).weights()  # the reference's own smoothing and rotation
            scale = weights.abs().amax(dim=1) / 127
            stored, stored_scale = calibration[f"{index}.{path}.codes"], calibration[f"{index}.{path}.scale"]
            assert torch.allclose(stored_scale.double(), scale, rtol=1e-5)
            # GPTQ moves some integers off the nearest (measured on this model: 7-21% of them per product, at most
            # 2.7 steps from the unrounded weight; 2026-11-30), never far
            apart = (stored.double() - weights / scale[:, None]).abs()
            assert apart.max() <= 6 and (apart > 0.5 + 1e-6).double().mean() > 0.02
    # statistics written for another smoothing or rotation: their integers are ignored, the maxima kept
    with caplog.at_level(logging.WARNING, logger="as2hub.backends"):
        int8.save_calibration(folder, calibration, 6)
        layout = int8.int8_layout()
        try:
            int8.ROTATION_SEED = 1
            loaded = int8.load_calibration(folder)
        finally:
            int8.ROTATION_SEED = 0
    assert layout != "" and "another smoothing or rotation" in caplog.text
    assert "levels" not in loaded and not any(key.endswith(".codes") for key in loaded)
    assert all(torch.equal(loaded[key], calibration[key]) for key in loaded)

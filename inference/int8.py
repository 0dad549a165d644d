"""int8 products for the torch backend ``torch-int8``: weights per output channel, activations per token.

``Ranker.from_pretrained(path, backend="torch-int8")`` loads the fp32 model and replaces every encoder layer's linear
layers (queries, keys, values, the attention output, the feed-forward pair) by an :class:`Int8Linear`: its weights
rounded once to 8-bit integers (7-bit on CPUs without VNNI or AMX, :func:`weight_levels`) with one scale per output
channel, its input rounded at each call to 8-bit integers with
one scale and zero point per token (per row), the product computed on integers (``torch._int_mm``, oneDNN: VNNI or AMX
where the CPU has them) and rescaled to fp32. Embeddings, layer norms, attention and the heads stay fp32.

- **Batch-invariant integers**: with one scale per token, a token's integers depend on its own values only, not on
  the pairs it shares a batch with (as the ONNX int8 graph's, :mod:`as2hub.inference.onnx_export`;
  ``tests/test_int8_ranking.py`` checks it). The fp32 parts still round with the batch's shape, and a value that sits
  on a rounding boundary can take the next integer: on 60 WikiQA questions (559 pairs) per question against all in
  one call, scores moved by at most 6e-8 with ``unpadded=True`` and by up to 2.2e-3 padded (8 pairs above 1e-4:
  attention over another padded length), AVX-512 EPYC, 2026-11-29.
- **7-bit weights where 8 could overflow**: on CPUs whose int8 products add pairs of products into saturating 16-bit
  sums (AVX2 without VNNI) full-range weights can overflow them; with 7 bits no sum can (the reason of
  ``onnx_export.quantize_int8``'s ``reduce_range``). With VNNI or AMX the sums are 32-bit and the weights keep 8 bits
  (since 2026-11-30): their rounding is halved, so a VNNI or AMX CPU and an AVX2 one score slightly differently.
- **Smoothed where the folder is calibrated**: trained BERT-style encoders have a few features that run far larger
  than the rest (MiniLM's feed-forward input: 28 against a median of 2), and with one scale per token they set every
  token's step. ``Ranker.calibrate_int8(questions, candidates, save_to=folder)`` (``run_as2.py`` does it after
  training, from 512 training pairs) records each product input's largest values per feature in
  :data:`CALIBRATION_FILE`; loading the folder then moves half of each feature's range into the weights
  (:func:`smoothing_factors`, SmoothQuant). On 122 WikiQA dev questions the scores' mean distance from fp32 fell from
  0.018 to 0.009 (logits; AVX-512 EPYC, 2026-11-30), the same in the padded, unpadded and compiled passes.
- **Rotated, with GPTQ weights**: the products reading a layer norm's or GELU's output (:data:`ROTATED_INPUTS`) see
  their input times random signs and a Hadamard matrix in blocks of 128 features (:func:`hadamard`, in the C steps a
  few vector operations a row), which spreads what smoothing left of an outlier over its block; the weights hold the
  inverse. The calibration also stores each product's integer weights rounded by GPTQ (:func:`gptq`: each column's
  rounding error moved onto the columns not yet rounded, weighed by the calibration inputs), used on CPUs with the
  weight levels they were computed for. Together, on the same dev questions: 0.0093 → 0.0050, at about 1% of a
  question's time (:data:`ROTATION_BLOCK`'s comment has the choice).
- **Fast with the unpadded, compiled pass** (``unpadded=True, torch_compile=True``): the packed pass
  (:mod:`as2hub.inference.unpadded`) runs the queries, keys and values as one product (``packed_qkv``: the input
  quantized once). With one torch thread the steps between the products run in C (``int8_rows.c``:
  :func:`gelu_requantize`, :func:`rescale_norm`, a row at a time, each layer's states quantized once:
  :func:`quantized_layer`); with more, inductor fuses them. On an AVX-512 EPYC (VNNI, no AMX), one WikiQA question
  per call: 1.41x the best CrossEncoder configuration through inductor's kernels, 1.49-1.53x with the C steps, but
  at that speed MAP's interval missed the benchmark's rule in both runs (``inference/BACKENDS.md``, 2026-11-30).

Example:
    >>> from as2hub.inference import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="torch-int8", unpadded=True, torch_compile=True)  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP
"""

import ctypes
import logging
import os
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn
from transformers.activations import GELUActivation

from as2hub.inference import cpu_ops, small_attention
from as2hub.inference.backends import cpu_features

logger = logging.getLogger("as2hub.backends")

# Weights in 8 bits (-127 .. 127) where the CPU's int8 products sum into 32 bits (VNNI, AMX); in 7 (-63 .. 63) elsewhere
SUMMING_32_BITS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
ACTIVATION_LEVELS = 255  # 8-bit activations: 0 .. 255 per token, shifted to int8 for the product
ENCODER_LINEARS = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)


def weight_levels(flags: frozenset[str] | None = None) -> int:
    """The weights' largest integer on this CPU (``flags``: its flags, default
    :func:`~as2hub.inference.backends.cpu_features`'): 127 where its int8 products add four products into a 32-bit sum
    (VNNI's ``vpdpbusd``, AMX's tiles), which cannot overflow; 63 (7 bits) elsewhere, where AVX2 adds pairs of products
    into saturating 16-bit sums (255 * 127 * 2 would overflow them; 255 * 63 * 2 cannot). 8 bits halve the weights'
    rounding: on 122 WikiQA dev questions the scores moved from fp32 by 0.0012 on average against 0.0019 with 7 bits
    (99th percentile 0.016 against 0.026; AVX-512 EPYC, 2026-11-30)."""
    flags = cpu_features().flags if flags is None else flags
    return 127 if flags & SUMMING_32_BITS else 63


# Rotated product inputs: the layer norms' and GELU's outputs (the queries', keys' and values' input, both feed-forward
# products'), each block of ROTATION_BLOCK features times a Hadamard matrix after random signs, so that a feature far
# larger than the others is spread over its block before the tokens are quantized; the weights hold the inverse
# (QuaRot, Ashkboos et al. 2024, with SmoothQuant's factors first). Chosen on WikiQA dev (122 questions, the benchmark's
# ranker, smoothed, GPTQ weights, the scheme simulated in float; AVX-512 EPYC, 2026-11-30): mean logit distance from
# fp32 0.0086 unrotated, blocks of 32 / 64 / 128: 0.0053 / 0.0054 / 0.0048 (other signs: 0.0052); only the
# feed-forward inputs or only the norms' outputs: 0.0074 / 0.0072; a full 384-wide Hadamard matrix on every input, the
# attention output's too: 0.0048 (not done: that input comes out of the attention kernel). In ranking itself:
# 0.0050. Signs from ROTATION_SEED.
ROTATION_BLOCK = 128
ROTATION_SEED = 0
ROTATED_INPUTS = ("attention", "intermediate.dense", "output.dense")  # _layer_inputs' keys


def rotation_block(features: int) -> int:
    """The Hadamard block of a ``features``-wide input: the largest power of two dividing it, up to
    :data:`ROTATION_BLOCK`; 0 (not rotated) below 16.

    Example:
        >>> rotation_block(384), rotation_block(40), rotation_block(8)
        (128, 0, 0)
    """
    block = min(ROTATION_BLOCK, features & -features)
    return block if block >= 16 else 0


def rotation_signs(features: int) -> torch.Tensor:
    """The random signs (+-1, fp32) a rotated input's features are multiplied by, from :data:`ROTATION_SEED`."""
    generator = torch.Generator().manual_seed(ROTATION_SEED)
    return 1.0 - 2.0 * torch.randint(0, 2, (features,), generator=generator).float()


def hadamard(rows: torch.Tensor, block: int) -> torch.Tensor:
    """Each block of ``block`` features (a power of two) of ``(..., features)`` rows times the Hadamard matrix of that
    size (Sylvester's, entries +-1, unnormalized: twice applied, ``block`` times the rows), in butterfly stages pairing
    features 1, 2, 4, ... apart (``int8_rows.c``'s order, so both round alike).

    Example:
        >>> hadamard(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), 4).tolist()
        [[10.0, -2.0, -4.0, 0.0]]
    """
    shape, step = rows.shape, 1
    while step < block:
        pairs = rows.reshape(*shape[:-1], shape[-1] // (2 * step), 2, step)
        first, second = pairs[..., 0, :], pairs[..., 1, :]
        rows = torch.stack((first + second, first - second), dim=-2).reshape(shape)
        step *= 2
    return rows


def quantize_tokens(
    rows: torch.Tensor, smooth: torch.Tensor | None = None, rotate: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row of a ``(tokens, features)`` fp32 matrix in 8 bits, over its own range (which includes 0):
    ``(codes, scale, zero)`` with ``rows ~ scale * (codes + 128 - zero)``, ``codes`` int8, ``scale`` and ``zero`` one
    per row (``zero``, the zero point, in 0 .. 255). A row of zeros gets codes that decode to exactly 0. ``smooth``:
    one factor per feature, applied first (the reading product's :attr:`Int8Linear.input_scale`); ``rotate``: then
    each block of that many features through :func:`hadamard` (the reading product's :attr:`Int8Linear.rotation`)."""
    if smooth is not None:
        rows = rows * smooth
    if rotate:
        rows = hadamard(rows, rotate)
    low = rows.amin(dim=1).clamp(max=0.0)
    high = rows.amax(dim=1).clamp(min=0.0)
    scale = ((high - low) / ACTIVATION_LEVELS).clamp(min=1e-12)
    inverse = 1.0 / scale
    zero = torch.round(-low * inverse)
    codes = torch.clamp(torch.round(rows * inverse[:, None]) + zero[:, None], 0, ACTIVATION_LEVELS)
    return (codes - 128).to(torch.int8), scale, zero


def rescale(total, scale, zero, weight_sum, weight_scale, bias=None) -> torch.Tensor:
    """An int8 product's int32 ``total`` as fp32: the codes' per-token ``scale`` and ``zero`` (:func:`quantize_tokens`),
    the weights' per-output ``weight_sum`` and ``weight_scale`` (:class:`Int8Linear`'s), plus ``bias``."""
    out = (total.float() + (128.0 - zero)[:, None] * weight_sum) * (scale[:, None] * weight_scale)
    return out + bias if bias is not None else out


def transformed_weights(
    weight: torch.Tensor, smoothing: torch.Tensor | None, rotation: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """An ``(out, in)`` product's weights as :class:`Int8Linear` rounds them, with what its inputs are multiplied by
    before :func:`hadamard` (``rotation``: its block, 0 for none): ``(weights, input_scale)``. With ``H`` the
    (symmetric) Hadamard matrix, ``H @ H = block * I``: the inputs times ``signs / (smoothing * sqrt(block))``, the
    weights' columns times ``smoothing * signs / sqrt(block)`` then ``H``, and the product is the linear layer's."""
    features = weight.shape[1]
    factors = torch.ones(features) if smoothing is None else smoothing.float()
    inverse = 1.0 / factors
    if rotation:
        signs, root = rotation_signs(features), rotation**0.5
        factors, inverse = factors * signs / root, inverse * signs / root
    weight = weight.float() * factors
    return (hadamard(weight, rotation) if rotation else weight), inverse


def quantize_weights(weight: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, in)`` fp32 weights rounded to the nearest of ``-levels .. levels`` times one scale per output channel
    (its largest magnitude over ``levels``): ``(codes, scale)``, codes int8."""
    scale = weight.abs().amax(dim=1).clamp(min=1e-12) / levels
    return torch.round(weight / scale[:, None]).clamp(-levels, levels).to(torch.int8), scale


class Int8Linear(nn.Module):
    """``nn.Linear`` layers computed on integers: their weights (side by side when several are given: one product for
    the queries, keys and values) as int8 (``levels``: the largest integer, default :func:`weight_levels`'s 127 or 63)
    with a scale per output channel, the input quantized per token at each call (:func:`quantize_tokens`); fp32 in,
    fp32 out, any leading dimensions.

    ``smoothing`` (one positive factor per input feature, :func:`smoothing_factors`): the weights' input columns are
    multiplied by it and the inputs divided by it (``input_scale``, its inverse) before they are quantized, the same
    product in exact arithmetic, with a feature whose values run far larger than the others' (an outlier channel)
    shrunk so that it no longer sets every token's quantization step (SmoothQuant, Xiao et al. 2023). ``rotate``: each
    block of :func:`rotation_block` input features also goes through random signs and :func:`hadamard` (the weights
    through the inverse; ``rotation``, the block, 0 where not rotated). ``quantized``: the weights' ``(codes, scale)``
    as computed elsewhere (:func:`gptq`), for the weights after smoothing and rotation, instead of rounding to nearest.

    Example:
        >>> layer = Int8Linear(torch.nn.Linear(64, 4), rotate=True)
        >>> layer(torch.randn(3, 64)).shape, layer.rotation
        (torch.Size([3, 4]), 64)
    """

    def __init__(
        self,
        *linears: nn.Linear,
        levels: int | None = None,
        smoothing: torch.Tensor | None = None,
        rotate: bool = False,
        quantized: tuple[torch.Tensor, torch.Tensor] | None = None,
    ):
        super().__init__()
        self.levels = levels or weight_levels()
        weight = torch.cat([linear.weight.detach().float() for linear in linears])
        features = weight.shape[1]
        if smoothing is not None:
            smoothing = smoothing.detach().float()
            if smoothing.shape != (features,) or not bool((smoothing > 0).all()):
                raise ValueError(
                    f"smoothing: one positive factor per input feature ({features}), got shape {tuple(smoothing.shape)}"
                )
        self.rotation = rotation_block(features) if rotate else 0
        self.smoothed = smoothing is not None
        weight, inverse = transformed_weights(weight, smoothing, self.rotation)
        # what each input feature is multiplied by before it is quantized (None: as it is)
        identity = smoothing is None and not self.rotation
        self.register_buffer("input_scale", None if identity else inverse, persistent=False)
        biases = [linear.bias for linear in linears]
        if quantized is None:
            quantized = quantize_weights(weight, self.levels)
        elif quantized[0].shape != weight.shape:
            raise ValueError(f"quantized weights of shape {tuple(quantized[0].shape)} for {tuple(weight.shape)}")
        quantized, scale = quantized[0].to(torch.int8), quantized[1].float()
        self.out_features, self.in_features = quantized.shape
        # buffers, not parameters: the ranker is never trained through them, and state_dict() stays the float model's
        self.register_buffer("weight", quantized, persistent=False)  # (out, in)
        self.register_buffer("weight_scale", scale, persistent=False)
        # each output's sum of weights: the correction for the activations' shift from 0 .. 255 to int8
        self.register_buffer("weight_sum", quantized.sum(dim=1).float(), persistent=False)
        bias = torch.cat([b.detach().float() for b in biases]) if all(b is not None for b in biases) else None
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1]).float()
        codes, scale, zero = step_operator("quantize_rows", quantize_rows, rows)(rows, self.input_scale, self.rotation)
        out = self.rescale(self.product(codes), scale, zero)
        return out.reshape(*shape[:-1], self.out_features)

    def product(self, codes: torch.Tensor) -> torch.Tensor:
        """The int32 products of ``(tokens, in)`` int8 codes (:func:`quantize_tokens`') with the weights."""
        return torch._int_mm(codes, self.weight.t())

    def rescale(self, total: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
        """:meth:`product`'s integers as fp32 outputs, bias added, given the codes' per-token ``scale`` and ``zero``."""
        return rescale(total, scale, zero, self.weight_sum, self.weight_scale, self.bias)

    def extra_repr(self) -> str:
        bits = 8 if self.levels > 63 else 7
        smoothed = ", smoothed" if self.smoothed else ""
        smoothed += f", rotated in blocks of {self.rotation}" if self.rotation else ""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 ({bits}-bit weights, per token"
            f"{smoothed})"
        )


class Int8UnsupportedError(ValueError):
    """``backend="torch-int8"`` was asked of a model without BERT-style encoder layers."""


def _encoder_layers(model: nn.Module):
    layers = getattr(getattr(getattr(model, "base_model", None), "encoder", None), "layer", None)
    if not layers or any(getattr(getattr(layer, "attention", None), "self", None) is None for layer in layers):
        raise Int8UnsupportedError(
            f"backend='torch-int8' needs a model with BERT-style encoder layers (BERT, RoBERTa, ELECTRA: "
            f"attention.self, attention.output, intermediate, output); {type(model).__name__} has none: use "
            "backend='torch', 'torch-bf16' or 'onnx-int8'"
        )
    return layers


def quantize_encoder(model: nn.Module, calibration: dict[str, torch.Tensor] | None = None) -> int:
    """Replace, in place, the linear layers of every encoder layer of ``model`` (a BERT-style encoder: BERT, RoBERTa,
    ELECTRA) by :class:`Int8Linear`; returns how many. Embeddings, layer norms and heads stay as they are. Each layer's
    attention also gets the fused products of the unpadded pass (:mod:`as2hub.inference.unpadded`): ``packed_qkv``
    (queries, keys and values in one product, their input quantized once) and ``packed_kv`` (the last layer's keys and
    values). The products reading a layer norm's or GELU's output (:data:`ROTATED_INPUTS`) are rotated.

    ``calibration`` (:func:`calibrate`; a saved ranker's :data:`CALIBRATION_FILE`, :func:`load_calibration`): each
    product input's largest magnitude per feature, by which the products are smoothed (:func:`smoothing_factors`, the
    queries, keys and values of a layer by one factor per feature, as they read one input), and where it has them for
    this CPU's :func:`weight_levels`, the weights' integers (:func:`gptq`) in place of rounding to nearest."""
    layers = _encoder_layers(model)
    if calibration is not None:
        check_calibration(model, calibration)
    levels = weight_levels()
    stored = calibration is not None and int(calibration.get("levels", torch.tensor(0))) == levels

    def quantized(index, paths):
        keys = [f"{index}.{path}" for path in paths]
        if not stored or any(f"{key}.codes" not in calibration for key in keys):
            return None
        return torch.cat([calibration[f"{key}.codes"] for key in keys]), torch.cat(
            [calibration[f"{key}.scale"] for key in keys]
        )

    count = 0
    for index, layer in enumerate(layers):
        attention = layer.attention.self
        projections = (attention.query, attention.key, attention.value)
        settings = {}
        for name, linears in _layer_inputs(layer).items():
            factors = None
            if calibration is not None:
                weight = torch.cat([linear.weight.detach().float() for linear in linears])
                factors = smoothing_factors(calibration[f"{index}.{name}"], weight)
            settings.update({id(linear): dict(smoothing=factors, rotate=name in ROTATED_INPUTS) for linear in linears})
        if all(type(projection) is nn.Linear for projection in projections):
            shared = settings[id(attention.query)]
            qkv = [f"attention.self.{name}" for name in ("query", "key", "value")]
            attention.packed_qkv = Int8Linear(*projections, **shared, quantized=quantized(index, qkv))
            attention.packed_kv = Int8Linear(*projections[1:], **shared, quantized=quantized(index, qkv[1:]))
        for path in ENCODER_LINEARS:
            parent_path, _, name = path.rpartition(".")
            parent = layer.get_submodule(parent_path)
            linear = getattr(parent, name, None)
            if type(linear) is nn.Linear:
                setattr(parent, name, Int8Linear(linear, **settings[id(linear)], quantized=quantized(index, [path])))
                count += 1
        layer.int8_rows = _rows_layout(layer)
    return count


# SmoothQuant's migration strength: a feature's factor is its input's largest magnitude to the power ALPHA over its
# weights' largest magnitude to the power 1 - ALPHA. Chosen on WikiQA dev by the scores' distance from fp32 (122
# questions, 1,126 pairs, statistics from 64 training questions; AVX-512 EPYC, 2026-11-30): mean logit error 0.0180
# unsmoothed, 0.0154 at 0.3, 0.0093 at 0.5, 0.0221 at 0.65, 0.0246 at 0.8; any one kind of product moved to 0.4 or
# 0.6 with the others at 0.5 was worse (0.0095 to 0.0143).
SMOOTHING_ALPHA = 0.5


def smoothing_factors(input_max: torch.Tensor, weight: torch.Tensor, alpha: float = SMOOTHING_ALPHA) -> torch.Tensor:
    """One factor per input feature of a product (``weight``: ``(out, in)``, side by side for products that read one
    input) from the input's largest magnitudes per feature (``input_max``, ``(in,)``): ``input_max ** alpha /
    weight_max ** (1 - alpha)``, so that a feature ``alpha`` of the way toward the weights' range is quantized in the
    weights instead of the activations (SmoothQuant, Xiao et al. 2023).

    Example:
        >>> smoothing_factors(torch.tensor([16.0, 1.0]), torch.tensor([[1.0, 1.0]])).tolist()
        [4.0, 1.0]
    """
    weight_max = weight.detach().float().abs().amax(dim=0).clamp(min=1e-5)
    return input_max.float().clamp(min=1e-5) ** alpha / weight_max ** (1 - alpha)


def _layer_inputs(layer: nn.Module) -> dict[str, list[nn.Linear]]:
    """An encoder layer's product inputs (the calibration's keys after the layer's index) and the products reading
    each."""
    attention = layer.attention.self
    return {
        "attention": [attention.query, attention.key, attention.value],
        "attention.output.dense": [layer.attention.output.dense],
        "intermediate.dense": [layer.intermediate.dense],
        "output.dense": [layer.output.dense],
    }


def check_calibration(model: nn.Module, calibration: dict[str, torch.Tensor]) -> None:
    """Raise ``ValueError`` unless ``calibration`` has, for each encoder layer's product inputs, one non-negative
    finite value per feature (the statistics of a model of this shape)."""
    for index, layer in enumerate(_encoder_layers(model)):
        for name, linears in _layer_inputs(layer).items():
            key, features = f"{index}.{name}", linears[0].in_features
            values = calibration.get(key)
            if values is None or tuple(values.shape) != (features,):
                found = "missing" if values is None else f"shape {tuple(values.shape)}"
                raise ValueError(f"int8 calibration: {key!r} should have {features} values per feature, {found}")
            if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
                raise ValueError(f"int8 calibration: {key!r} has negative or non-finite values")


@torch.inference_mode()
def input_statistics(model: nn.Module, run, grams: bool = False):
    """Each encoder product input's largest magnitude per feature while ``run()`` scores with ``model`` (the fp32
    model, before :func:`quantize_encoder`), keyed ``"{layer}.{input}"`` (``"0.attention"``, ``"0.intermediate.dense"``,
    ...), and with ``grams=True`` also each input's Gram matrix (the sum of ``x x^T`` over its tokens, fp32; what
    :func:`gptq` weighs the weights' rounding by): ``(maxima, grams or None)``. Padding positions count too (their
    states are real values of the layer, rarely the largest)."""
    maxima: dict[str, torch.Tensor] = {}
    sums: dict[str, torch.Tensor] = {}

    def hook(key):
        def record(module, inputs, output):
            values = inputs[0].detach().float().reshape(-1, inputs[0].shape[-1])
            largest = values.abs().amax(dim=0)
            maxima[key] = torch.maximum(maxima[key], largest) if key in maxima else largest
            if grams:
                sums[key] = sums[key] + values.t() @ values if key in sums else values.t() @ values

        return record

    handles = [
        linears[0].register_forward_hook(hook(f"{index}.{name}"))
        for index, layer in enumerate(_encoder_layers(model))
        for name, linears in _layer_inputs(layer).items()
    ]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return maxima, (sums if grams else None)


def input_maxima(model: nn.Module, run) -> dict[str, torch.Tensor]:
    """:func:`input_statistics`' maxima: the ``calibration`` of :func:`quantize_encoder` without stored weights."""
    return input_statistics(model, run)[0]


# GPTQ's damping: a fraction of the Gram matrix's mean diagonal added to it (Frantar et al. 2023's default)
GPTQ_DAMPING = 0.01


def gptq(weight: torch.Tensor, gram: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, in)`` weights rounded to ``-levels .. levels`` times :func:`quantize_weights`' per-channel scales, one
    input column at a time, each column's rounding error pushed onto the columns not yet rounded in the proportions
    that undo it best on inputs with Gram matrix ``gram`` (``(in, in)``; GPTQ, Frantar et al. 2023): ``(codes,
    scale)``. On those inputs the product's error usually falls well below rounding to nearest's (0.50-0.61x its
    squared error in ``tests/test_int8_smoothing.py``'s example); with uncorrelated inputs of one scale it is rounding
    to nearest."""
    scale = quantize_weights(weight, levels)[1].double()
    work = weight.detach().double().clone()
    hessian = gram.detach().double().clone()
    dead = torch.diagonal(hessian) <= 0  # an input that was always 0: any rounding of its column costs nothing
    hessian[dead, dead] = 1.0
    hessian += GPTQ_DAMPING * torch.diagonal(hessian).mean() * torch.eye(hessian.shape[0], dtype=hessian.dtype)
    # the upper Cholesky factor of the inverse: row i holds how column i's error spreads over columns i and after
    factor = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(hessian)), upper=True)
    codes = torch.empty_like(work)
    for column in range(work.shape[1]):
        rounded = torch.round(work[:, column] / scale).clamp(-levels, levels)
        codes[:, column] = rounded
        error = (work[:, column] - rounded * scale) / factor[column, column]
        work[:, column:] -= error[:, None] * factor[column, column:][None, :]
    return codes.to(torch.int8), scale.float()


def calibrate(model: nn.Module, run, levels: int = 127) -> dict[str, torch.Tensor]:
    """The calibration of ``model`` (the fp32 model, before :func:`quantize_encoder`) from the pairs ``run()`` scores:
    :func:`input_maxima`'s tensors, and each encoder product's int8 weights for ``levels`` (default 127: CPUs with VNNI
    or AMX) by :func:`gptq`, after the smoothing and rotation :func:`quantize_encoder` gives them: keys
    ``"{layer}.{product}.codes"`` and ``".scale"`` (``"0.attention.self.query.codes"``, ...) and ``"levels"``."""
    maxima, grams = input_statistics(model, run, grams=True)
    calibration = dict(maxima)
    calibration["levels"] = torch.tensor(levels)
    for index, layer in enumerate(_encoder_layers(model)):
        for name, linears in _layer_inputs(layer).items():
            weight = torch.cat([linear.weight.detach().float() for linear in linears])
            factors = smoothing_factors(maxima[f"{index}.{name}"], weight)
            gram = grams[f"{index}.{name}"].double()
            for linear in linears:
                path = next(p for p in ENCODER_LINEARS if layer.get_submodule(p) is linear)
                rotation = rotation_block(weight.shape[1]) if name in ROTATED_INPUTS else 0
                weights, inverse = transformed_weights(linear.weight.detach(), factors, rotation)
                # the Gram matrix of the product's inputs: x times inverse, then rotated
                inputs = gram * inverse.double()[:, None] * inverse.double()[None, :]
                if rotation:
                    inputs = hadamard(hadamard(inputs, rotation).t(), rotation)
                codes, scale = gptq(weights, inputs, levels)
                calibration[f"{index}.{path}.codes"], calibration[f"{index}.{path}.scale"] = codes, scale
    return calibration


# A saved ranker's calibration for backend="torch-int8": calibrate()'s tensors, and in the metadata the weights'
# SHA-256 (statistics of other weights are ignored, with a warning), how many pairs they came from, and the layout its
# int8 weights were computed for (another layout: they are ignored and the weights rounded to nearest)
CALIBRATION_FILE = "int8_calibration.safetensors"


def int8_layout() -> str:
    """What a calibration's stored int8 weights depend on besides the weights: the smoothing's alpha, the rotation."""
    return f"alpha={SMOOTHING_ALPHA};block={ROTATION_BLOCK};seed={ROTATION_SEED};rotated={','.join(ROTATED_INPUTS)}"


def save_calibration(folder, calibration: dict[str, torch.Tensor], pairs: int) -> Path:
    """Write ``calibration`` (:func:`calibrate`, or :func:`input_maxima`'s tensors alone) into ``folder``'s
    :data:`CALIBRATION_FILE` (a temporary file, then an atomic rename), stamped with the folder's weights; returns its
    path."""
    from safetensors.torch import save_file

    from as2hub.modeling.folders import weights_sha256

    folder = Path(folder)
    target = folder / CALIBRATION_FILE
    partial = folder / f".{CALIBRATION_FILE}.partial"
    metadata = {
        "as2hub.weights_sha256": weights_sha256(folder) or "",
        "as2hub.pairs": str(pairs),
        "as2hub.int8_layout": int8_layout(),
    }
    try:
        save_file({key: value.contiguous() for key, value in calibration.items()}, str(partial), metadata=metadata)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)  # a write that failed leaves nothing behind
    return target


def calibration_path(folder) -> Path | None:
    """Where ``folder``'s :data:`CALIBRATION_FILE` is: in a local folder, or for a Hub id its download (beside the
    weights ``from_pretrained`` fetched); ``None`` where the folder or repository has none."""
    if Path(folder).is_dir():
        path = Path(folder) / CALIBRATION_FILE
        return path if path.is_file() else None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(str(folder), CALIBRATION_FILE))
    except (EntryNotFoundError, LocalEntryNotFoundError):  # none in the repository, or offline and not cached
        return None


def load_calibration(folder) -> dict[str, torch.Tensor] | None:
    """``folder``'s :data:`CALIBRATION_FILE` (:func:`save_calibration`; ``folder`` a local folder or a Hub id): its
    tensors, or ``None`` where it has none or they came from other weights (a warning says so); its int8 weights are
    left out where they were computed for another :func:`int8_layout` (a warning says so). An unreadable file raises
    ``ValueError`` naming it."""
    from safetensors import safe_open

    from as2hub.modeling.folders import weights_sha256

    path = calibration_path(folder)
    if path is None:
        return None
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            maxima = {key: handle.get_tensor(key) for key in handle.keys()}
    except Exception as error:  # safetensors raises its own error types for a truncated or foreign file
        raise ValueError(f"{path}: not a readable int8 calibration ({error}); delete it or write it again") from error
    if metadata.get("as2hub.weights_sha256") != weights_sha256(path.parent):
        logger.warning(
            "%s: calibrated for other weights, ignored (torch-int8 unsmoothed); write it again: "
            "Ranker.calibrate_int8(questions, candidates, save_to=folder)",
            path,
        )
        return None
    stored = [key for key in maxima if key == "levels" or key.endswith((".codes", ".scale"))]
    if stored and metadata.get("as2hub.int8_layout") != int8_layout():
        logger.warning(
            "%s: int8 weights for another smoothing or rotation (%s, this version: %s), ignored (rounded to nearest); "
            "write it again: Ranker.calibrate_int8(questions, candidates, save_to=folder)",
            path,
            metadata.get("as2hub.int8_layout"),
            int8_layout(),
        )
        for key in stored:
            del maxima[key]
    return maxima


def _rows_layout(layer: nn.Module) -> bool:
    """The layer's products are all int8 with biases, its activation the exact GELU, its norms affine."""
    attention = layer.attention.self
    products = [getattr(attention, "packed_qkv", None), getattr(attention, "packed_kv", None), attention.query]
    products += [layer.attention.output.dense, layer.intermediate.dense, layer.output.dense]
    norms = [getattr(block, "LayerNorm", None) for block in (layer.attention.output, layer.output)]
    activation = getattr(layer.intermediate, "intermediate_act_fn", None)
    return (
        all(type(product) is Int8Linear and product.bias is not None for product in products)
        and all(type(norm) is nn.LayerNorm and norm.weight is not None and norm.bias is not None for norm in norms)
        and (type(activation) is GELUActivation or activation is nn.functional.gelu)
    )


# The feed-forward step between the two int8 products (rescale, GELU, quantize each row again): "auto" (the C kernel
# of int8_rows.c with one torch thread where it builds, else torch's operations), "kernel" (always the C kernel: an
# error where it cannot run), "torch". Read at every call, also inside compiled passes (a custom operator); whether the
# pass calls the C++ operators (:mod:`as2hub.inference.cpu_ops`; not with "torch") is read when a pass is compiled.
ROWS_SOURCE = Path(__file__).with_name("int8_rows.c")
FEED_FORWARD_KERNELS = ("auto", "kernel", "torch")
FEED_FORWARD_KERNEL = "auto"
_ROWS = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 5  # total, rows, cols, ... bias
_ARGTYPES = {
    # values, rows, cols, smooth, rotate, codes, scale, zero
    "as2hub_quantize": [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    + [ctypes.c_void_p] * 3,
    # ..., gelu, smooth, rotate, codes, scale, zero
    "as2hub_requantize": [*_ROWS, ctypes.c_int, ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 3,
    # ..., residual, gamma, beta, eps, smooth, rotate, out, codes, scale, zero
    "as2hub_rescale_norm": [*_ROWS]
    + [ctypes.c_void_p] * 3
    + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    + [ctypes.c_void_p] * 4,
}


@lru_cache(maxsize=1)
def rows_library() -> ctypes.CDLL | None:
    """``int8_rows.c`` built for this machine (:func:`as2hub.inference.small_attention.build`: once, cached) and loaded;
    ``None``, with a warning saying why, where it cannot be."""
    try:
        lib = ctypes.CDLL(str(small_attention.build(source=ROWS_SOURCE)))
    except (small_attention.SmallAttentionError, OSError) as error:
        logger.warning("int8_rows: unavailable, torch-int8 keeps torch's operations between its products (%s)", error)
        return None
    for name, argtypes in _ARGTYPES.items():
        getattr(lib, name).restype, getattr(lib, name).argtypes = ctypes.c_int, argtypes
    return lib


def use_rows_kernel() -> bool:
    """Whether :func:`gelu_requantize` and :func:`rescale_norm` run the C kernel now (:data:`FEED_FORWARD_KERNEL`)."""
    if FEED_FORWARD_KERNEL not in FEED_FORWARD_KERNELS:
        raise ValueError(
            f"int8.FEED_FORWARD_KERNEL is {FEED_FORWARD_KERNEL!r}: one of {', '.join(FEED_FORWARD_KERNELS)}"
        )
    if FEED_FORWARD_KERNEL == "auto":
        return torch.get_num_threads() == 1 and rows_library() is not None
    return FEED_FORWARD_KERNEL == "kernel"


def _kernel() -> ctypes.CDLL:
    lib = rows_library()
    if lib is None:
        raise small_attention.SmallAttentionError("the int8_rows kernel is unavailable here (the log says why)")
    return lib


def _pointers(tensors) -> list[int | None]:
    return [None if tensor is None else tensor.data_ptr() for tensor in tensors]


def _codes_for(tokens: int, features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A kernel's quantized outputs, allocated: ``(codes, scale, zero)``."""
    return torch.empty(tokens, features, dtype=torch.int8), torch.empty(tokens), torch.empty(tokens)


def _kernel_inputs(total: torch.Tensor, *rows: torch.Tensor | None) -> tuple[list, tuple]:
    """A kernel call's inputs as it reads them (``total`` int32, then ``rows``: scales, zero points and the layer's
    tensors in fp32, ``None`` passed on as NULL; all contiguous: the caller keeps this list alive through the call) and
    its quantized outputs, allocated: ``(codes, scale, zero)``."""
    quantized = _codes_for(*total.shape)
    return [total.contiguous(), *(None if t is None else t.float().contiguous() for t in rows)], quantized


def _check(status: int) -> None:
    if status:
        reason = {1: "out of memory", 2: "a rotation block it cannot do"}.get(status, status)
        raise small_attention.SmallAttentionError(f"int8_rows failed ({reason})")


@torch.library.custom_op("as2hub::quantize_rows", mutates_args=())
def quantize_rows(
    rows: torch.Tensor, smooth: torch.Tensor | None = None, rotate: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`quantize_tokens` of ``(tokens, features)`` fp32 rows: with one torch thread on the CPU one call of
    ``int8_rows.c`` (a row at a time, its rotation in registers: inductor's kernel of the butterflies took about 8 us a
    token, 384 wide), else torch's operations."""
    if rows.device.type == "cpu" and use_rows_kernel():
        values = rows.float().contiguous()
        smooth = None if smooth is None else smooth.float().contiguous()
        quantized = _codes_for(*values.shape)
        _check(_kernel().as2hub_quantize(
            values.data_ptr(), *values.shape, None if smooth is None else smooth.data_ptr(), rotate,
            *_pointers(quantized)
        ))  # fmt: skip
        return quantized
    return quantize_tokens(rows, smooth, rotate)


def _quantize_rows_shapes(rows, smooth=None, rotate=0):
    tokens = rows.shape[0]
    return rows.new_empty(rows.shape, dtype=torch.int8), rows.new_empty(tokens), rows.new_empty(tokens)


quantize_rows.register_fake(_quantize_rows_shapes)
cpu_ops.register_fake("quantize_rows", _quantize_rows_shapes)


@torch.library.custom_op("as2hub::gelu_requantize", mutates_args=())
def gelu_requantize(
    total: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    weight_sum: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor,
    smooth: torch.Tensor | None = None,
    rotate: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The step between an :class:`Int8Linear`'s int32 products (``total``, ``(tokens, out)``; its input's per-token
    ``scale`` and ``zero``; the layer's ``weight_sum``, ``weight_scale`` and ``bias``) and the next int8 product: the
    rescaled fp32 outputs through GELU, quantized per token (:func:`quantize_tokens`, times ``smooth``: the next
    product's :attr:`Int8Linear.input_scale`, then rotated by ``rotate``: its :attr:`Int8Linear.rotation`):
    ``(codes, scale, zero)``.

    With one torch thread on the CPU one call of ``int8_rows.c`` (:data:`FEED_FORWARD_KERNEL`), a row at a time:
    inductor's fused kernel read and wrote the ``(tokens, 1536)`` matrix three times and spent 60% of its time in GELU
    (its erf); the kernel's GELU is exact to 4.4e-7 (its file says how). Else :func:`rescale`, GELU and
    :func:`quantize_tokens` in torch."""
    if total.device.type == "cpu" and use_rows_kernel():
        inputs, quantized = _kernel_inputs(total, scale, zero, weight_sum, weight_scale, bias, smooth)
        pointers = _pointers(inputs)
        _check(_kernel().as2hub_requantize(
            pointers[0], *total.shape, *pointers[1:-1], 1, pointers[-1], rotate, *_pointers(quantized)
        ))  # fmt: skip
        return quantized
    out = nn.functional.gelu(rescale(total, scale, zero, weight_sum, weight_scale, bias))
    return quantize_tokens(out, smooth, rotate)


def _gelu_requantize_shapes(total, scale, zero, weight_sum, weight_scale, bias, smooth=None, rotate=0):
    tokens = total.shape[0]
    return total.new_empty(total.shape, dtype=torch.int8), scale.new_empty(tokens), scale.new_empty(tokens)


gelu_requantize.register_fake(_gelu_requantize_shapes)
cpu_ops.register_fake("gelu_requantize", _gelu_requantize_shapes)


@torch.library.custom_op("as2hub::rescale_norm", mutates_args=())
def rescale_norm(
    total: torch.Tensor,
    scale: torch.Tensor,
    zero: torch.Tensor,
    weight_sum: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    eps: float,
    smooth: torch.Tensor | None = None,
    rotate: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The end of a BERT-style attention or feed-forward block after its :class:`Int8Linear` product (``total`` and
    the layer's tensors as in :func:`gelu_requantize`): the rescaled outputs plus ``residual`` through the layer norm
    (``norm_weight``, ``norm_bias``, ``eps``), and those states quantized per token for the next product:
    ``(states, codes, scale, zero)``, the codes those of ``states * smooth`` where ``smooth`` is given (the next
    product's :attr:`Int8Linear.input_scale`), rotated by ``rotate`` (its :attr:`Int8Linear.rotation`). With one
    torch thread on the CPU one call of ``int8_rows.c``, a row at a time; else torch's operations."""
    if total.device.type == "cpu" and use_rows_kernel():
        inputs, quantized = _kernel_inputs(
            total, scale, zero, weight_sum, weight_scale, bias, residual, norm_weight, norm_bias, smooth
        )
        pointers, states = _pointers(inputs), torch.empty(total.shape)
        _check(_kernel().as2hub_rescale_norm(
            pointers[0], *total.shape, *pointers[1:-1], eps, pointers[-1], rotate, *_pointers((states, *quantized))
        ))  # fmt: skip
        return states, *quantized
    out = rescale(total, scale, zero, weight_sum, weight_scale, bias)
    states = nn.functional.layer_norm(out + residual, (out.shape[1],), norm_weight, norm_bias, eps)
    return states, *quantize_tokens(states, smooth, rotate)


def _rescale_norm_shapes(
    total, scale, zero, weight_sum, weight_scale, bias, residual, norm_weight, norm_bias, eps, smooth=None, rotate=0
):
    tokens = total.shape[0]
    codes = total.new_empty(total.shape, dtype=torch.int8)
    return residual.new_empty(total.shape), codes, scale.new_empty(tokens), scale.new_empty(tokens)


rescale_norm.register_fake(_rescale_norm_shapes)
cpu_ops.register_fake("rescale_norm", _rescale_norm_shapes)


def step_operator(name: str, python_op, tensor: torch.Tensor):
    """The operator that computes step ``name`` of the pass on ``tensor``: its C++ operator
    (:func:`~as2hub.inference.cpu_ops.step`) on the CPU unless :data:`FEED_FORWARD_KERNEL` is "torch", else the Python
    one (``python_op``). Chosen when the pass runs, or when a compiled pass is traced."""
    return python_op if FEED_FORWARD_KERNEL == "torch" else cpu_ops.step(name, python_op, tensor)


Quantized = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (codes, scale, zero): quantize_tokens' result


def rows_ready(layer: nn.Module) -> bool:
    """Whether :func:`quantized_layer` computes this encoder layer: it went through :func:`quantize_encoder` with every
    product int8 and biased, an exact GELU and affine layer norms (BERT, RoBERTa, ELECTRA)."""
    return getattr(layer, "int8_rows", False)


def reader(layer: nn.Module) -> "Int8Linear":
    """The product that reads an encoder layer's input (its queries, keys and values in one): whose
    :attr:`Int8Linear.input_scale` and :attr:`Int8Linear.rotation` the previous layer's codes take."""
    return layer.attention.self.packed_qkv


def _norm_block(
    block: nn.Module, quantized: Quantized, residual: torch.Tensor, following: "Int8Linear | None"
) -> tuple[torch.Tensor, Quantized]:
    dense, norm = block.dense, block.LayerNorm
    total = dense.product(quantized[0])
    smooth, rotate = (None, 0) if following is None else (following.input_scale, following.rotation)
    states, *codes = step_operator("rescale_norm", rescale_norm, total)(
        total, quantized[1], quantized[2], dense.weight_sum, dense.weight_scale, dense.bias, residual, norm.weight,
        norm.bias, norm.eps, smooth, rotate
    )  # fmt: skip
    return states, tuple(codes)


def _feed_forward(
    layer: nn.Module, hidden: torch.Tensor, quantized: Quantized, following: "Int8Linear | None"
) -> tuple[torch.Tensor, Quantized]:
    inner, outer = layer.intermediate.dense, layer.output.dense
    total = inner.product(quantized[0])
    codes = step_operator("gelu_requantize", gelu_requantize, total)(
        total, *quantized[1:], inner.weight_sum, inner.weight_scale, inner.bias,
        outer.input_scale, outer.rotation
    )  # fmt: skip
    return _norm_block(layer.output, codes, hidden, following)


def quantized_layer(
    layer: nn.Module, hidden: torch.Tensor, quantized: Quantized, attend, following: "Int8Linear | None" = None
) -> tuple[torch.Tensor, Quantized]:
    """One encoder layer (:func:`rows_ready`) on packed ``(tokens, hidden)`` states and their int8 codes
    (``quantized``, :func:`quantize_tokens`' for the layer's :func:`reader`): the next states and their codes for
    ``following`` (the next layer's :func:`reader`; ``None``: quantized as they are). ``attend(qkv)``: the attention of
    the ``(tokens, 3 * hidden)`` queries, keys and values (the unpadded pass's, row by row). Between the products, each
    step is one row-at-a-time call where the C kernel runs (:func:`rescale_norm`, :func:`gelu_requantize`): a layer's
    states are quantized once, for all the products that read them."""
    fused, dense = layer.attention.self.packed_qkv, layer.attention.output.dense
    context = attend(fused.rescale(fused.product(quantized[0]), *quantized[1:]))
    codes = step_operator("quantize_rows", quantize_rows, context)(context, dense.input_scale, dense.rotation)
    hidden, quantized = _norm_block(layer.attention.output, codes, hidden, layer.intermediate.dense)
    return _feed_forward(layer, hidden, quantized, following)


def quantized_first_tokens(
    layer: nn.Module, hidden: torch.Tensor, quantized: Quantized, firsts: torch.Tensor, attend
) -> torch.Tensor:
    """The last layer (:func:`rows_ready`) at each row's first token (``firsts``: their positions in the packed
    states): its fp32 ``(rows, hidden)`` output. ``attend(query, keys_values)``: the first tokens' attention over
    their rows."""
    attention = layer.attention.self
    pairs, query = attention.packed_kv, attention.query
    keys_values = pairs.rescale(pairs.product(quantized[0]), *quantized[1:])
    first = tuple(part.index_select(0, firsts) for part in quantized)
    context = attend(query.rescale(query.product(first[0]), *first[1:]), keys_values)
    dense = layer.attention.output.dense
    states, quantized = _norm_block(
        layer.attention.output,
        quantize_tokens(context, dense.input_scale, dense.rotation),
        hidden.index_select(0, firsts),
        layer.intermediate.dense,
    )
    return _feed_forward(layer, states, quantized, None)[0]

"""int8 products for the torch backend ``torch-int8``: weights per output channel, activations per token.

``Ranker.from_pretrained(path, backend="torch-int8")`` loads the fp32 model and replaces every encoder layer's linear
layers (queries, keys, values, the attention output, the feed-forward pair) by an :class:`Int8Linear`: its weights
rounded once to 7-bit integers with one scale per output channel, its input rounded at each call to 8-bit integers with
one scale and zero point per token (per row), the product computed on integers (``torch._int_mm``, oneDNN: VNNI or AMX
where the CPU has them) and rescaled to fp32. Embeddings, layer norms, attention and the heads stay fp32.

- **Batch-invariant integers**: with one scale per token, a token's integers depend on its own values only, not on
  the pairs it shares a batch with (as the ONNX int8 graph's, :mod:`as2hub.inference.onnx_export`;
  ``tests/test_int8_ranking.py`` checks it). The fp32 parts still round with the batch's shape, and a value that sits
  on a rounding boundary can take the next integer: on 60 WikiQA questions (559 pairs) per question against all in
  one call, scores moved by at most 6e-8 with ``unpadded=True`` and by up to 2.2e-3 padded (8 pairs above 1e-4:
  attention over another padded length), AVX-512 EPYC, 2026-11-29.
- **7-bit weights**: on CPUs whose int8 products add pairs of products into saturating 16-bit sums (AVX2 without VNNI)
  full-range weights can overflow them; with 7 bits no sum can, so every x86 CPU computes the same integers (the
  reason of ``onnx_export.quantize_int8``'s ``reduce_range``).
- **Fast with the unpadded, compiled pass** (``unpadded=True, torch_compile=True``): the packed pass
  (:mod:`as2hub.inference.unpadded`) runs the queries, keys and values as one product (``packed_qkv``: the input
  quantized once), and inductor fuses each quantization with the product before it. On an AVX-512 EPYC (VNNI, no
  AMX), one WikiQA question per call, it ranked 1.37x the same pass in bf16 and 1.41x the best CrossEncoder
  configuration at fp32's MAP; batched over questions 1.62x (``inference/BACKENDS.md``, 2026-11-29).

Example:
    >>> from as2hub.inference import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="torch-int8", unpadded=True, torch_compile=True)  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP
"""

import torch
from torch import nn

WEIGHT_LEVELS = 63  # 7-bit weights: -63 .. 63
ACTIVATION_LEVELS = 255  # 8-bit activations: 0 .. 255 per token, shifted to int8 for the product
ENCODER_LINEARS = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)


def quantize_tokens(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row of a ``(tokens, features)`` fp32 matrix in 8 bits, over its own range (which includes 0):
    ``(codes, scale, zero)`` with ``rows ~ scale * (codes + 128 - zero)``, ``codes`` int8, ``scale`` and ``zero`` one
    per row (``zero``, the zero point, in 0 .. 255). A row of zeros gets codes that decode to exactly 0."""
    low = rows.amin(dim=1).clamp(max=0.0)
    high = rows.amax(dim=1).clamp(min=0.0)
    scale = ((high - low) / ACTIVATION_LEVELS).clamp(min=1e-12)
    inverse = 1.0 / scale
    zero = torch.round(-low * inverse)
    codes = torch.clamp(torch.round(rows * inverse[:, None]) + zero[:, None], 0, ACTIVATION_LEVELS)
    return (codes - 128).to(torch.int8), scale, zero


class Int8Linear(nn.Module):
    """``nn.Linear`` layers computed on integers: their weights (side by side when several are given: one product for
    the queries, keys and values) as 7-bit int8 with a scale per output channel, the input quantized per token at each
    call (:func:`quantize_tokens`); fp32 in, fp32 out, any leading dimensions.

    Example:
        >>> layer = Int8Linear(torch.nn.Linear(8, 4))
        >>> layer(torch.randn(3, 8)).shape
        torch.Size([3, 4])
    """

    def __init__(self, *linears: nn.Linear):
        super().__init__()
        weight = torch.cat([linear.weight.detach().float() for linear in linears])
        biases = [linear.bias for linear in linears]
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / WEIGHT_LEVELS
        quantized = torch.round(weight / scale[:, None]).clamp(-WEIGHT_LEVELS, WEIGHT_LEVELS).to(torch.int8)
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
        codes, scale, zero = quantize_tokens(x.reshape(-1, shape[-1]).float())
        total = torch._int_mm(codes, self.weight.t()).float()
        out = (total + (128.0 - zero)[:, None] * self.weight_sum) * (scale[:, None] * self.weight_scale)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 (7-bit weights, per token)"


class Int8UnsupportedError(ValueError):
    """``backend="torch-int8"`` was asked of a model without BERT-style encoder layers."""


def quantize_encoder(model: nn.Module) -> int:
    """Replace, in place, the linear layers of every encoder layer of ``model`` (a BERT-style encoder: BERT, RoBERTa,
    ELECTRA) by :class:`Int8Linear`; returns how many. Embeddings, layer norms and heads stay as they are. Each layer's
    attention also gets the fused products of the unpadded pass (:mod:`as2hub.inference.unpadded`): ``packed_qkv``
    (queries, keys and values in one product, their input quantized once) and ``packed_kv`` (the last layer's keys and
    values)."""
    layers = getattr(getattr(getattr(model, "base_model", None), "encoder", None), "layer", None)
    if not layers or any(getattr(getattr(layer, "attention", None), "self", None) is None for layer in layers):
        raise Int8UnsupportedError(
            f"backend='torch-int8' needs a model with BERT-style encoder layers (BERT, RoBERTa, ELECTRA: "
            f"attention.self, attention.output, intermediate, output); {type(model).__name__} has none: use "
            "backend='torch', 'torch-bf16' or 'onnx-int8'"
        )
    count = 0
    for layer in layers:
        attention = layer.attention.self
        projections = (attention.query, attention.key, attention.value)
        if all(type(projection) is nn.Linear for projection in projections):
            attention.packed_qkv = Int8Linear(*projections)
            attention.packed_kv = Int8Linear(*projections[1:])
        for path in ENCODER_LINEARS:
            parent_path, _, name = path.rpartition(".")
            parent = layer.get_submodule(parent_path)
            if type(getattr(parent, name, None)) is nn.Linear:
                setattr(parent, name, Int8Linear(getattr(parent, name)))
                count += 1
    return count

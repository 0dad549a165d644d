"""Unpadded encoder passes for pre-training: the dense layers compute the real tokens only (this file is symlinked into
the SSP and joint remote-code folders and shipped with them).

With ``config.unpadded`` a training forward gathers the non-padding tokens of the batch into one ``(tokens, hidden)``
matrix after the embeddings and runs each encoder layer's own modules on it: the query, key and value projections
(one matrix product with the three weights side by side), the attention output projection with its residual and
layer norm, and the feed-forward block. Attention (``torch.nn.functional.scaled_dot_product_attention``) keeps each
example to itself in one of three layouts (:data:`ATTENTION_LAYOUT`): per example, over its own tokens only; in the
padded ``(batch, heads, length, head size)`` layout, into which the projected queries, keys and values are scattered
and from which the result is gathered back, under the batch's pattern (padding keys masked; the joint model's
own-slot pattern); or grouped: the rows cut by length into a few groups, each in a padded layout of its own longest
row. On a GPU, a fourth, ``varlen``, runs PyTorch's variable-length flash-attention kernel on the gathered tokens
themselves, with no padded layout at all. After the last layer the hidden states are put back in the
padded layout, with zeros at the padding positions, so the heads read ``last_hidden_state`` as before.

The layers' weights are the stock ones (``encoder.layer.N.attention.self.query``, ...): a checkpoint does not depend on
the flag, and the same weights give the same losses and gradients as the padded pass, to float rounding. Evaluation,
export and scoring (``model.eval()``) keep the stock padded pass unless a forward asks with ``unpadded=True`` (the
pre-training trainer's held-out evaluation does when the config has the flag: the same figures, 1.6-2.1x faster on
the CPU), and calls that ask for ``output_attentions`` or ``output_hidden_states`` always do; as2hub's ranker scores
unpadded on request with these layer functions
(``Ranker(..., unpadded=True)``, ``as2hub/inference/unpadded.py``). Dropout draws its masks over the gathered tokens, so a training step with dropout is not
the padded pass's step bit for bit, only in distribution.

Under ``torch.compile`` the gather's size is data-dependent: set ``torch._dynamo.config.capture_dynamic_output_shape_ops``
and ``capture_scalar_outputs`` to ``True`` (as2hub's trainer does with ``--torch_compile``), else dynamo breaks the
graph around it.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

# Keyword arguments of a forward that need the stock pass (per-layer outputs of the padded layout).
_STOCK_OUTPUTS = ("output_attentions", "output_hidden_states")


def wants_unpadded(model, attention_mask: torch.Tensor | None, kwargs: dict) -> bool:
    """Whether ``model``'s forward takes the unpadded pass; removes the forward's ``unpadded`` keyword from ``kwargs``.

    ``unpadded`` None (not given): ``config.unpadded`` and training; True: asked for, in evaluation too (as2hub's
    pre-training trainer asks in its held-out evaluation when the config has the flag); False: the stock pass. Either
    way only with a padding mask and no per-layer outputs asked for.

    Example: ``model.eval()(**batch, unpadded=True)`` scores ``batch`` as ``model.eval()(**batch)`` does, faster."""
    asked = kwargs.pop("unpadded", None)
    wanted = bool(getattr(model.config, "unpadded", False)) and model.training if asked is None else bool(asked)
    return wanted and attention_mask is not None and not any(kwargs.get(name) for name in _STOCK_OUTPUTS)


class _GatherRows(torch.autograd.Function):
    """``source.index_select(0, index)`` whose backward copies the gradient back (``index`` has no repeated row)
    instead of the general scatter-add, which is several times slower on the CPU."""

    @staticmethod
    def forward(ctx, source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.rows = source.shape[0]
        return source.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.rows, *grad.shape[1:]).index_copy_(0, index, grad), None


def gather_rows(source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of a ``(rows, ...)`` tensor."""
    return _GatherRows.apply(source, index)


def scatter_rows(packed: torch.Tensor, index: torch.Tensor, rows: int) -> torch.Tensor:
    """A ``(rows, ...)`` tensor of zeros with ``packed`` at rows ``index`` (the inverse of :func:`gather_rows`)."""
    return packed.new_zeros(rows, *packed.shape[1:]).index_copy_(0, index, packed)  # in place: no copy of the zeros


def token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Flat positions (into ``batch * length``) of the tokens whose mask is not 0, row by row."""
    return attention_mask.reshape(-1).nonzero().squeeze(-1)


def key_padding_pattern(attention_mask: torch.Tensor) -> torch.Tensor:
    """``(batch, 1, 1, length)`` True where a key may be attended to: the batch's tokens. A row without any token
    (nothing of it is computed or read) attends to every key, so that no softmax row is empty."""
    keys = attention_mask.bool()
    keys = keys | ~keys.any(-1, keepdim=True)
    return keys[:, None, None, :]


# How a layer attends over the gathered tokens: "padded" scatters them into the (batch, length) layout for one
# attention call over every row; "per_example" attends within each example's own tokens, one call per example, with
# no padding at all (the least work; a Python loop over the batch); "grouped" sorts the rows by length and cuts them
# into LENGTH_GROUPS groups of equal row count, one call per group in a layout padded to the group's longest row (a
# few calls, little padding; a batch with another pattern than key padding takes "padded"); "varlen" runs one
# variable-length flash-attention call on the gathered tokens, each example's tokens attending to their own (CUDA in
# fp16/bf16, attention dropout included; a batch with another pattern than key padding, e.g. the joint model's slots,
# and fp32 or CPU activations take "padded").
#
# "auto" (auto_layout) on the CPU in eager mode: "per_example" with one torch thread, "grouped" with more ("padded"
# for a batch with its own pattern); "padded" elsewhere. Measured with MiniLM DSLC steps, batches of 16 triplets
# (benchmarks/README.md, "Unpadded pre-training steps" and "The same steps on the AVX-512 EPYC"; the unpadded step
# against the padded one at 128 / 256 tokens):
# - 1 thread: "per_example" is the fastest wherever measured (1.50x / 2.27x on the idle AVX-512 EPYC, "grouped"
#   1.37x / 2.06x, "padded" 1.30x / 1.37x; 1.55x / 2.12x on a loaded AVX2 EPYC).
# - 2 threads: each per-example call is a parallel region. On the idle AVX-512 EPYC "per_example" still led (1.33x /
#   2.15x, "grouped" 1.24x / 1.87x, "padded" 1.16x / 1.37x), but under other jobs' load its regions wait for threads
#   those jobs hold: at load 5 on the same CPU it fell behind (1.14x / 1.29x against "padded" 1.25x / 1.37x), and
#   on the AVX2 EPYC at load 3-6 its step ran slower than the padded pass (0.49x at 128 tokens). "grouped" (4
#   regions per layer) kept most of the idle gain and held level with "padded" under load (1.26x / 1.27x at load 5,
#   1.30x / 1.50x against 1.30x / 1.39x at load 3); more threads make many small regions costlier still.
# torch.compile would specialise on every example's length (and on every group's), and on a GPU a call per example
# costs more than it saves: "padded" there, until "varlen" is measured against it on a GPU
# (benchmarks/bench_gpu_pretrain.py's as2hub_varlen_compiled system).
ATTENTION_LAYOUTS = ("auto", "padded", "per_example", "varlen", "grouped")
ATTENTION_LAYOUT = "auto"
LENGTH_GROUPS = 4  # "grouped": how many groups of rows, by length


@dataclass
class LengthGroup:
    """Rows of similar length attended together in a ``(rows, length)`` layout of their own ("grouped")."""

    tokens: torch.Tensor  # positions of the group's tokens among the gathered tokens, row by row
    slots: torch.Tensor  # the same tokens' positions in the group's flat (rows * length) layout
    rows: int
    length: int  # the group's longest row
    pattern: torch.Tensor | None  # (rows, 1, 1, length) key padding; None when every row fills the length


@dataclass
class UnpaddedBatch:
    """Where a batch's tokens are, computed once per batch and shared by the encoders that read it."""

    index: torch.Tensor  # flat positions of the tokens, row by row
    batch: int
    length: int
    pattern: torch.Tensor  # boolean (batch, 1, 1 or length, length): which keys a query attends to
    sizes: list[int] | None = None  # "per_example": tokens of each row
    patterns: list[torch.Tensor | None] | None = None  # "per_example": each row's pattern over its own tokens
    cu_seqlens: torch.Tensor | None = None  # "varlen": (batch + 1,) int32, each row's first token, then the total
    groups: list[LengthGroup] | None = None  # "grouped": the rows by length, a few groups
    regroup: torch.Tensor | None = None  # "grouped": where each gathered token is among the groups' tokens


def auto_layout(device: torch.device, pattern: torch.Tensor | None) -> str:
    """The layout ``"auto"`` takes for a batch on ``device`` (``pattern``: as in :func:`unpadded_encode`; the comment
    above :data:`ATTENTION_LAYOUTS` gives the measurements)."""
    if device.type != "cpu" or torch.compiler.is_compiling():
        return "padded"
    if torch.get_num_threads() == 1:
        return "per_example"
    return "grouped" if pattern is None else "padded"


def unpadded_batch(
    attention_mask: torch.Tensor, pattern: torch.Tensor | None = None, layout: str | None = None
) -> UnpaddedBatch:
    """The :class:`UnpaddedBatch` of a ``(batch, length)`` padding mask; ``pattern`` as in :func:`unpadded_encode`;
    ``layout`` one of :data:`ATTENTION_LAYOUTS` (default: :data:`ATTENTION_LAYOUT`)."""
    layout = layout or ATTENTION_LAYOUT
    if layout not in ATTENTION_LAYOUTS:
        raise ValueError(f"attention layout must be one of {ATTENTION_LAYOUTS}, got {layout!r}")
    if layout == "auto":
        layout = auto_layout(attention_mask.device, pattern)
    batch, length = attention_mask.shape
    keep = attention_mask.bool()
    plan = UnpaddedBatch(
        token_index(attention_mask), batch, length, key_padding_pattern(attention_mask) if pattern is None else pattern
    )
    if layout == "varlen" and pattern is None:  # another pattern than key padding: the padded layout
        plan.cu_seqlens = nn.functional.pad(keep.sum(1).cumsum(0, dtype=torch.int32), (1, 0))
    if layout == "grouped" and pattern is None:  # another pattern than key padding: the padded layout
        plan.groups, plan.regroup = length_groups(keep.sum(1), LENGTH_GROUPS)
    if layout == "per_example":
        plan.sizes = keep.sum(1).tolist()
        if pattern is None:
            plan.patterns = [None] * batch
        else:  # each row's pattern between its own tokens
            plan.patterns = [pattern[row][:, keep[row]][:, :, keep[row]] for row in range(batch)]
    return plan


def length_groups(sizes: torch.Tensor, groups: int) -> tuple[list[LengthGroup], torch.Tensor]:
    """The rows that have tokens (``sizes``: tokens per row), shortest first, cut into ``groups`` groups of equal row
    count (give or take one), each group padded to its own longest row; and, for each gathered token, its position
    among the groups' tokens taken group after group."""
    device = sizes.device
    starts = sizes.cumsum(0) - sizes  # each row's first token among the gathered ones
    order = torch.argsort(sizes, stable=True)
    order = order[sizes[order] > 0]
    out = []
    for rows in order.tensor_split(min(groups, len(order))) if len(order) else []:
        counts = sizes[rows]
        length, total = int(counts.max()), int(counts.sum())
        within = torch.arange(total, device=device) - (counts.cumsum(0) - counts).repeat_interleave(counts)
        tokens = starts[rows].repeat_interleave(counts) + within
        slots = (torch.arange(len(rows), device=device) * length).repeat_interleave(counts) + within
        full = bool((counts == length).all())
        keys = None if full else (torch.arange(length, device=device) < counts[:, None])[:, None, None, :]
        out.append(LengthGroup(tokens, slots, len(rows), length, keys))
    joined = torch.cat([group.tokens for group in out]) if out else sizes.new_zeros(0)
    regroup = torch.empty_like(joined)
    regroup[joined] = torch.arange(len(joined), device=device)
    return out, regroup


def _plain_linear(module: nn.Module) -> bool:
    """A stock ``nn.Linear`` without hooks: its weight and bias are all its forward reads, so the three projections
    may run as one product. A LoRA layer (PEFT replaces the module) or a hooked one is called as a module."""
    return type(module) is nn.Linear and not (module._forward_hooks or module._forward_pre_hooks)


def _check_layer(layer: nn.Module) -> None:
    attention = getattr(getattr(layer, "attention", None), "self", None)
    needed = (attention, getattr(layer, "intermediate", None), getattr(layer, "output", None))
    if any(module is None for module in needed) or getattr(layer, "add_cross_attention", False):
        raise ValueError(
            f"config.unpadded: {type(layer).__name__} is not a BERT-style encoder layer (attention.self, "
            "attention.output, intermediate, output; no cross-attention): load the model with unpadded=False"
        )


def _flash_forward(query, key, value, cu_seqlens, max_length: int, dropout: float, scale: float):
    """ATen's variable-length flash-attention forward (CUDA): ``(output, logsumexp, rng_state, unused)``."""
    output, logsumexp, rng_state, unused, _ = torch.ops.aten._flash_attention_forward(
        query, key, value, cu_seqlens, cu_seqlens, max_length, max_length, dropout, False, False, scale=scale
    )
    return output, logsumexp, rng_state, unused


def _flash_backward(
    grad, query, key, value, output, logsumexp, cu_seqlens, max_length, dropout, rng_state, unused, scale
):
    """ATen's variable-length flash-attention backward (CUDA): the gradients of the queries, keys and values."""
    return torch.ops.aten._flash_attention_backward(
        grad, query, key, value, output, logsumexp, cu_seqlens, cu_seqlens, max_length, max_length, dropout, False,
        rng_state, unused, scale=scale,
    )  # fmt: skip


class _FlashVarlen(torch.autograd.Function):
    """PyTorch's variable-length flash-attention kernels (:func:`_flash_forward` / :func:`_flash_backward`, CUDA,
    fp16/bf16) over ``(tokens, heads, head_size)`` queries, keys and values, the sequences delimited by ``cu_seqlens``;
    the dropout mask is drawn inside the kernel and drawn again from its saved RNG state in the backward."""

    @staticmethod
    def forward(ctx, query, key, value, cu_seqlens, max_length: int, dropout: float, scale: float):
        output, logsumexp, rng_state, unused = _flash_forward(query, key, value, cu_seqlens, max_length, dropout, scale)
        ctx.save_for_backward(query, key, value, output, logsumexp, cu_seqlens, rng_state, unused)
        ctx.max_length, ctx.dropout, ctx.scale = max_length, dropout, scale
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        query, key, value, output, logsumexp, cu_seqlens, rng_state, unused = ctx.saved_tensors
        grads = _flash_backward(
            grad.contiguous(), query, key, value, output, logsumexp, cu_seqlens, ctx.max_length, ctx.dropout,
            rng_state, unused, ctx.scale,
        )  # fmt: skip
        return *grads, None, None, None, None


def flash_varlen_attention(query, key, value, cu_seqlens, max_length: int, dropout: float, scale: float):
    """Attention of ``(tokens, heads, head_size)`` queries, keys and values, each sequence of ``cu_seqlens`` (int32,
    its start, then the total) attending to its own tokens only; ``max_length`` bounds the longest (the padded
    length will do). Returns ``(tokens, heads, head_size)``."""
    return _FlashVarlen.apply(query, key, value, cu_seqlens, max_length, dropout, scale)


# Whether this build of PyTorch has the flash kernels (a CUDA build; not ROCm's, whose kernels differ): read once.
_FLASH_BUILT = torch.backends.cuda.is_flash_attention_available() and torch.version.hip is None


def varlen_kernel(qkv: torch.Tensor, head_size: int):
    """The variable-length attention function for these activations, or ``None`` where none runs (then the padded
    layout): the flash kernel on an Ampere or newer NVIDIA GPU in fp16 or bf16, head sizes a multiple of 8 up to 256."""
    if not (_FLASH_BUILT and qkv.is_cuda) or qkv.dtype not in (torch.float16, torch.bfloat16):
        return None
    if head_size % 8 or head_size > 256:
        return None
    # get_device_properties, which dynamo folds to a constant (get_device_capability would break the graph)
    if torch.cuda.get_device_properties(qkv.device).major < 8:
        return None
    return flash_varlen_attention


def _attend(qkv: torch.Tensor, plan: UnpaddedBatch, heads: int, head_size: int, dropout: float, scale: float):
    """Attention of the gathered ``(tokens, 3 * heads * head_size)`` queries, keys and values -> ``(tokens, heads *
    head_size)``."""
    kernel = varlen_kernel(qkv, head_size) if plan.cu_seqlens is not None else None
    if kernel is not None:  # each (tokens, heads, head_size), straight from the product: no padded layout
        query, key, value = qkv.view(-1, 3, heads, head_size).unbind(1)
        context = kernel(query, key, value, plan.cu_seqlens, plan.length, dropout, scale)
        return context.reshape(-1, heads * head_size)

    def attend(query, key, value, mask):
        return nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=dropout, scale=scale
        )

    if plan.groups is not None:  # each group of rows in a (rows, heads, its longest row, head_size) layout
        contexts = []
        for group in plan.groups:
            flat = group.rows * group.length
            rows = scatter_rows(gather_rows(qkv, group.tokens), group.slots, flat)
            query, key, value = (
                rows.view(group.rows, group.length, 3, heads, head_size).permute(2, 0, 3, 1, 4).unbind(0)
            )
            context = attend(query, key, value, group.pattern).transpose(1, 2).reshape(flat, heads * head_size)
            contexts.append(gather_rows(context, group.slots))
        if not contexts:
            return qkv.new_zeros(0, heads * head_size)
        return gather_rows(torch.cat(contexts), plan.regroup)
    if plan.sizes is not None:  # per example: (1, heads, its tokens, head_size) each, no padding
        outputs = []
        for chunk, mask in zip(qkv.split(plan.sizes), plan.patterns):
            if chunk.shape[0] == 0:
                continue
            query, key, value = chunk.view(1, -1, 3, heads, head_size).permute(2, 0, 3, 1, 4).unbind(0)
            context = attend(query, key, value, None if mask is None else mask[None])
            outputs.append(context.transpose(1, 2).reshape(-1, heads * head_size))
        return torch.cat(outputs)
    batch, length = plan.batch, plan.length
    padded = scatter_rows(qkv, plan.index, batch * length).view(batch, length, 3, heads, head_size)
    query, key, value = padded.permute(2, 0, 3, 1, 4).unbind(0)  # each (batch, heads, length, head_size)
    context = attend(query, key, value, plan.pattern)
    return gather_rows(context.transpose(1, 2).reshape(batch * length, heads * head_size), plan.index)


def unpadded_layer(layer: nn.Module, hidden: torch.Tensor, plan: UnpaddedBatch, attend=None) -> torch.Tensor:
    """One encoder layer on ``hidden``, the ``(tokens, hidden)`` gathered tokens of ``plan``. ``attend(qkv, plan,
    heads, head_size, dropout, scale) -> (tokens, heads * head_size)`` computes attention (default: one call in the
    plan's layout)."""
    attention = layer.attention.self
    heads, head_size = attention.num_attention_heads, attention.attention_head_size
    projections = (attention.query, attention.key, attention.value)
    if all(_plain_linear(projection) for projection in projections):
        # (tokens, 3 * heads * head_size): one product with the three weights side by side
        weight = torch.cat([projection.weight for projection in projections])
        biases = [projection.bias for projection in projections]
        bias = torch.cat(biases) if all(b is not None for b in biases) else None
        qkv = nn.functional.linear(hidden, weight, bias)
    else:  # a wrapped projection (LoRA, a hook): called as the module it is
        qkv = torch.cat([projection(hidden) for projection in projections], dim=-1)
    dropout = attention.dropout.p if layer.training else 0.0
    scale = getattr(attention, "scaling", head_size**-0.5)
    context = (attend or _attend)(qkv, plan, heads, head_size, dropout, scale)
    attention_output = layer.attention.output(context, hidden)
    return layer.output(layer.intermediate(attention_output), attention_output)


def unpadded_encode(
    base_model: nn.Module,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    pattern: torch.Tensor | None = None,
    plan: UnpaddedBatch | None = None,
) -> BaseModelOutputWithPooling:
    """The encoder pass of a ``BertModel`` / ``RobertaModel`` / ``ElectraModel`` with the dense layers on the tokens
    whose ``attention_mask`` is not 0.

    ``pattern`` (boolean ``(batch, 1, length, length)``) replaces the key-padding attention pattern (the joint
    model's own-slot pattern); ``plan`` (:func:`unpadded_batch` of the mask and pattern) may be passed when several
    encoders read one batch (ELECTRA's generator and discriminator). Returns ``last_hidden_state`` in the padded
    layout (zeros at the padding) and, when the model has one, ``pooler_output``.
    """
    embeddings = base_model.embeddings(
        input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds
    )
    batch, length, _ = embeddings.shape
    if plan is None:
        plan = unpadded_batch(attention_mask, pattern)
    hidden = gather_rows(embeddings.reshape(batch * length, -1), plan.index)
    project = getattr(base_model, "embeddings_project", None)  # ELECTRA: embedding size -> hidden size
    if project is not None:
        hidden = project(hidden)
    for layer in base_model.encoder.layer:
        _check_layer(layer)
        if getattr(layer, "gradient_checkpointing", False) and layer.training and torch.is_grad_enabled():
            hidden = layer._gradient_checkpointing_func(unpadded_layer, layer, hidden, plan)
        else:
            hidden = unpadded_layer(layer, hidden, plan)
    last_hidden_state = scatter_rows(hidden, plan.index, batch * length).view(batch, length, -1)
    pooler = getattr(base_model, "pooler", None)
    return BaseModelOutputWithPooling(
        last_hidden_state=last_hidden_state,
        pooler_output=pooler(last_hidden_state) if pooler is not None else None,
    )

"""Scoring without padding: the encoder's dense layers on a batch's real tokens only (``Ranker(..., unpadded=True)``).

A question's candidates differ in length, so a padded batch computes padding: on the WikiQA test set, one question per
call, 31% of the tokens a padded pass computes are padding (``inference/BACKENDS.md``). With ``unpadded=True`` the
:class:`~as2hub.inference.ranking.Ranker` embeds a padded batch (cheap), gathers its real tokens into one
``(tokens, hidden)`` matrix and runs every encoder layer's linear layers, GELU and layer norms on those tokens only.
On the CPU each pair attends on its own tokens (:func:`rowwise_attention`: with one torch thread every pair and head
in one call of the small_attention kernel, :mod:`as2hub.inference.small_attention`; else PyTorch's kernel pair by
pair, :data:`ROW_ATTENTION`); on a GPU it scatters the
projected queries, keys and values into the padded ``(batch, heads, length, head size)`` layout for one call per layer
(``modeling/ssp_pretraining/unpadding.py``'s ``padded`` layout, the one the pre-training uses). The last layer
computes the first token of each pair only (its keys and values read every token), as
:mod:`as2hub.modeling.first_token` does in the padded pass. The cascade's stages (``cascade_drop``) carry each
survivor's real tokens from stage to stage and never re-pad them; compiled, each stage and its head are one graph
(:func:`packed_stage`). With ``backend="torch-int8"`` (:mod:`as2hub.inference.int8`) each layer's queries, keys and
values are one int8 product (:func:`packed_layer`), their input quantized once.

The same weights give the same scores up to float rounding (``tests/test_unpadded_ranking.py``: fp32 within 1e-5 of
the padded pass). Applies to as2hub's contextual and pairwise cross-encoders (BERT, RoBERTa, ELECTRA encoder layers)
on a torch backend, eager or compiled (``torch_compile=True``); :func:`check_unpadded` says why another model cannot.

Example:
    >>> from as2hub.inference import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="torch-bf16", unpadded=True)  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP
"""

from dataclasses import dataclass

import torch

from as2hub.inference import cpu_ops, int8, small_attention
from as2hub.inference.cascade import cascade_layers
from as2hub.modeling.first_token import last_bert_layer
from as2hub.modeling.ssp_pretraining.unpadding import UnpaddedBatch, scatter_rows, unpadded_layer


class UnpaddedUnsupportedError(ValueError):
    """``unpadded=True`` was asked of a model or backend that has no unpadded pass."""


def check_unpadded(model) -> None:
    """Raise :class:`UnpaddedUnsupportedError` unless ``model`` (a torch ranker, or a compiled one) can score unpadded:
    an as2hub cross-encoder (its staged methods: ``cascade_embed``, ``classify_hidden``) whose head reads the first
    token and whose encoder layers have the BERT layout (``attention.self``, ``attention.output``, ``intermediate``,
    ``output``)."""
    module = getattr(model, "module", model)
    if not isinstance(module, torch.nn.Module):
        raise UnpaddedUnsupportedError(
            f"unpadded=True runs the torch model's layers; {type(model).__name__} is not a torch model (an ONNX "
            "backend scores its exported graph): use backend='torch', 'torch-bf16' or a CUDA backend"
        )
    missing = [name for name in ("cascade_embed", "classify_hidden") if not hasattr(module, name)]
    layers = getattr(getattr(getattr(module, "base_model", None), "encoder", None), "layer", None)
    if missing or last_bert_layer(module) is None or not layers:
        raise UnpaddedUnsupportedError(
            f"unpadded=True needs an as2hub cross-encoder with BERT-style encoder layers and a first-token head "
            f"(contextual or pairwise RoBERTa, ELECTRA, BERT); {type(module).__name__} is not one"
        )
    for layer in layers:
        attention = getattr(layer, "attention", None)
        parts = (getattr(attention, "self", None), getattr(attention, "output", None))
        if any(part is None for part in parts) or getattr(layer, "add_cross_attention", False):
            raise UnpaddedUnsupportedError(
                f"unpadded=True: {type(layer).__name__} is not a BERT-style encoder layer (attention.self, "
                "attention.output, intermediate, output; no cross-attention)"
            )


# The packed matrix's rows are rounded up to a multiple of this (zero rows after the real tokens). Every new row count
# is a new matrix shape, and oneDNN builds (JIT-compiles) a kernel per shape, 1.3 ms each: with a question's exact token
# count, one product in eight met a new shape (1,180 builds in a pass over the 237 WikiQA test questions) and the pass
# ranked slower than the padded one (AMX Xeon, bf16, 1 thread, 2026-11-29: 162 against 236 pairs/s); rounded up,
# 180 builds. The extra rows cost at most 31 tokens per pass.
ROW_MULTIPLE = 32


# How the packed pass attends on the CPU: "auto" (the small_attention kernel, :mod:`as2hub.inference.small_attention`,
# with one torch thread where it builds; else PyTorch's kernel, a call per pair), "kernel" (always the small_attention
# kernel: an error where it cannot run), "sdpa" (always PyTorch's). Read at every call, also inside compiled passes;
# whether the int8 pass calls the C++ operator (:mod:`as2hub.inference.cpu_ops`; not with "sdpa") is read when a pass
# is compiled.
ROW_ATTENTIONS = ("auto", "kernel", "sdpa")
ROW_ATTENTION = "auto"


def use_small_attention(tensor: torch.Tensor, head_size: int) -> bool:
    """Whether the CPU pass attends through the small_attention kernel now (:data:`ROW_ATTENTION`)."""
    if ROW_ATTENTION not in ROW_ATTENTIONS:
        raise ValueError(f"unpadded.ROW_ATTENTION is {ROW_ATTENTION!r}: one of {', '.join(ROW_ATTENTIONS)}")
    if ROW_ATTENTION == "auto":
        return (
            torch.get_num_threads() == 1
            and small_attention.supports(tensor, head_size)
            and small_attention.library() is not None
        )
    return ROW_ATTENTION == "kernel"


def _row_lengths(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.reshape(pattern.shape[0], -1).sum(dim=1)


@torch.library.custom_op("as2hub::rowwise_attention", mutates_args=())
def rowwise_attention(qkv: torch.Tensor, pattern: torch.Tensor, heads: int, scale: float) -> torch.Tensor:
    """Attention within each row of a packed ``(tokens, 3 * hidden)`` query/key/value matrix, each row on its own
    tokens: ``(tokens, hidden)``, zeros at the extra rows. The rows' token counts are ``pattern``'s
    (``(rows, 1, 1, length)``, True at real keys, :class:`PackedRows`).

    On the CPU, PyTorch's attention kernel costs per (row, head) about as the square of the padded length: a question's
    pairs attend each in its own length rather than padded to the longest (per layer, the 237 WikiQA test questions:
    1.3-1.6 ms a question against 2.0-2.9 padded; AMX Xeon, bf16, 1 thread, 2026-11-29), and with one torch thread
    all rows in one call of the small_attention kernel (:data:`ROW_ATTENTION`). A custom operator, so that a compiled
    pass sees one call (no graph per row count)."""
    width = qkv.shape[1] // 3
    lengths = _row_lengths(pattern)
    if use_small_attention(qkv, width // heads):
        return small_attention.attend_rows(qkv, lengths, heads, scale)
    out = qkv.new_empty(qkv.shape[0], width)
    start = 0
    for size in lengths.tolist():
        query, key, value = qkv[start : start + size].view(1, size, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        context = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=scale)
        out[start : start + size] = context.transpose(1, 2).reshape(size, width)
        start += size
    out[start:].zero_()
    return out


def _rowwise_attention_shapes(qkv, pattern, heads, scale):
    return qkv.new_empty(qkv.shape[0], qkv.shape[1] // 3)


rowwise_attention.register_fake(_rowwise_attention_shapes)
cpu_ops.register_fake("rowwise_attention", _rowwise_attention_shapes)


@torch.library.custom_op("as2hub::first_token_attention", mutates_args=())
def first_token_attention(
    query: torch.Tensor, keys_values: torch.Tensor, index: torch.Tensor, pattern: torch.Tensor, heads: int, scale: float
) -> torch.Tensor:
    """The last layer's attention: each row's first-token query (``query``, ``(rows, hidden)``) over its row's keys and
    values (``keys_values``, the packed ``(tokens, 2 * hidden)``; ``index`` and ``pattern`` as :class:`PackedRows`'):
    ``(rows, hidden)``. With one torch thread on the CPU, the small_attention kernel (:data:`ROW_ATTENTION`); else the
    keys and values scattered into the padded layout for one call of PyTorch's kernel."""
    rows, width = query.shape
    head_size = width // heads
    if query.device.type == "cpu" and use_small_attention(query, head_size):
        keys, values = keys_values[:, :width], keys_values[:, width:]
        return small_attention.attend(query, keys, values, _row_lengths(pattern), heads, scale, first_only=True)
    length = pattern.shape[-1]
    padded = scatter_rows(keys_values, index, rows * length).view(rows, length, 2, heads, head_size)
    key, value = padded.permute(2, 0, 3, 1, 4).unbind(0)  # each (rows, heads, length, head_size)
    queries = query.view(rows, 1, heads, head_size).transpose(1, 2)
    context = torch.nn.functional.scaled_dot_product_attention(queries, key, value, attn_mask=pattern, scale=scale)
    return context.transpose(1, 2).reshape(rows, width)


def _first_token_attention_shapes(query, keys_values, index, pattern, heads, scale):
    return query.new_empty(query.shape)


first_token_attention.register_fake(_first_token_attention_shapes)
cpu_ops.register_fake("first_token_attention", _first_token_attention_shapes)


def _attention_operator(name: str, python_op, tensor: torch.Tensor):
    """:func:`rowwise_attention` or :func:`first_token_attention` (``name``, ``python_op``) as the int8 pass calls it:
    its C++ operator (:func:`~as2hub.inference.cpu_ops.step`) on the CPU unless :data:`ROW_ATTENTION` is "sdpa"."""
    return python_op if ROW_ATTENTION == "sdpa" else cpu_ops.step(name, python_op, tensor)


def _attend_rows(qkv, plan: UnpaddedBatch, heads: int, head_size: int, dropout: float, scale: float) -> torch.Tensor:
    """``unpadded_layer``'s attention, row by row (:func:`rowwise_attention`)."""
    return rowwise_attention(qkv, plan.pattern, heads, scale)


def packed_layer(layer, hidden: torch.Tensor, plan: UnpaddedBatch, attend) -> torch.Tensor:
    """One encoder layer on the packed states: ``unpadded_layer``, or where the layer has the int8 backend's fused
    product (``attention.self.packed_qkv``, :func:`~as2hub.inference.int8.quantize_encoder`) the same layer with the
    queries, keys and values from that one product (on the CPU, where ``attend`` attends row by row)."""
    attention = layer.attention.self
    fused = getattr(attention, "packed_qkv", None)
    if fused is None or attend is None:
        return unpadded_layer(layer, hidden, plan, attend)
    heads, head_size = attention.num_attention_heads, attention.attention_head_size
    scale = getattr(attention, "scaling", head_size**-0.5)
    context = attend(fused(hidden), plan, heads, head_size, 0.0, scale)
    attention_output = layer.attention.output(context, hidden)
    return layer.output(layer.intermediate(attention_output), attention_output)


@dataclass
class PackedRows:
    """Where a batch's real tokens are: ``index`` (flat positions into the padded layout's ``batch * length``: the
    real tokens row by row, then as many padding positions as the packed matrix has extra rows), ``firsts`` (each
    row's first token in the packed matrix), ``pattern`` (``(batch, 1, 1, length)``, True at real keys), the rows'
    ``lengths`` and ``total`` (the packed matrix's rows: the real tokens rounded up to :data:`ROW_MULTIPLE`)."""

    index: torch.Tensor
    firsts: torch.Tensor
    pattern: torch.Tensor
    lengths: list[int]
    total: int

    @classmethod
    def from_lengths(cls, lengths: list[int], device, multiple: int | None = ROW_MULTIPLE) -> "PackedRows":
        """The packing of rows of these token counts (each at least one), left-aligned in a padded layout as long as
        the longest row (longer where the extra rows need more padding positions than it has)."""
        real = sum(lengths)
        total = -(-real // multiple) * multiple if multiple else real
        length = max(max(lengths), -(-total // len(lengths)))
        sizes = torch.tensor(lengths, device=device)
        keep = torch.arange(length, device=device) < sizes[:, None]
        flat = keep.reshape(-1)
        index = flat.nonzero().squeeze(-1)
        if total > real:  # the extra rows sit at padding positions: masked as keys, never read back
            index = torch.cat([index, (~flat).nonzero().squeeze(-1)[: total - real]])
        return cls(index, torch.cumsum(sizes, 0) - sizes, keep[:, None, None, :], list(lengths), total)

    def pack(self, tokens: torch.Tensor) -> torch.Tensor:
        """The real tokens' ``(tokens, hidden)`` states with the extra zero rows appended: the packed matrix."""
        extra = self.total - tokens.shape[0]
        return torch.cat([tokens, tokens.new_zeros(extra, tokens.shape[1])]) if extra else tokens

    def split(self, hidden: torch.Tensor) -> list[torch.Tensor]:
        """The packed matrix's real tokens as one ``(length, hidden)`` view per row."""
        return list(hidden[: sum(self.lengths)].split(self.lengths))


def _first_token_layer(layer, hidden: torch.Tensor, plan: UnpaddedBatch, firsts: torch.Tensor) -> torch.Tensor:
    """The layer's output at each row's first token: its query attends to the row's keys and values."""
    attention = layer.attention.self
    heads, head_size = attention.num_attention_heads, attention.attention_head_size
    first = hidden.index_select(0, firsts)  # (rows, hidden)
    query = attention.query(first)
    fused = getattr(attention, "packed_kv", None)  # the int8 backend's keys and values in one product
    keys_values = (
        fused(hidden) if fused is not None else torch.cat([attention.key(hidden), attention.value(hidden)], -1)
    )
    scale = getattr(attention, "scaling", head_size**-0.5)
    context = first_token_attention(query, keys_values, plan.index, plan.pattern, heads, scale)
    return layer.feed_forward_chunk(layer.attention.output(context, first))


def packed_embeddings(model, batch: dict, positions: torch.Tensor) -> torch.Tensor:
    """A padded token batch's embeddings (``model.cascade_embed``: segments, positions, ELECTRA's projection as the
    full forward computes them), packed: the rows at ``positions`` (:func:`packing_of`'s), where positions
    past the batch's tokens read a zero row appended after them (the packed matrix's extra rows)."""
    embeddings = model.cascade_embed(**batch)
    flat = embeddings.reshape(-1, embeddings.shape[-1])
    return torch.cat([flat, flat.new_zeros(1, flat.shape[1])]).index_select(0, positions)


def packing_of(batch: dict) -> tuple[torch.Tensor, PackedRows]:
    """Where a padded token batch's real tokens go: the flat positions :func:`packed_embeddings` gathers (the real
    tokens', then for the packed matrix's extra rows the position past the batch, its zero row), and their
    :class:`PackedRows`. The extra rows are gathered rather than appended as zeros of their own count: compiled, a
    count of 0 or 1 is a size dynamo specializes, and each built a graph of its own after the warm-up (15-19 s in a
    timed run, 2026-11-29)."""
    mask = batch["attention_mask"]
    packing = PackedRows.from_lengths(mask.sum(dim=1).tolist(), mask.device)
    positions = mask.reshape(-1).nonzero().squeeze(-1)
    if packing.total > positions.shape[0]:
        positions = torch.cat([positions, positions.new_full((packing.total - positions.shape[0],), mask.numel())])
    return positions, packing


def embedded_stage(
    model,
    batch: dict,
    positions: torch.Tensor,
    index: torch.Tensor,
    firsts: torch.Tensor,
    pattern: torch.Tensor,
    end: int,
    head: int,
    rows_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first stage from the padded token batch: :func:`packed_embeddings` then :func:`packed_stage` from layer 0,
    one function, so that a compiled pass is one call (one graph) per batch."""
    hidden = packed_embeddings(model, batch, positions)
    return packed_stage(model, hidden, index, firsts, pattern, 0, end, head, rows_kernel)


def packed_stage(
    model,
    hidden: torch.Tensor,
    index: torch.Tensor,
    firsts: torch.Tensor,
    pattern: torch.Tensor,
    start: int,
    end: int,
    head: int,
    rows_kernel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder layers ``start`` .. ``end - 1`` of ``model`` on the packed ``(tokens, hidden)`` states, and the head that
    reads them: ``(states, logits)``.

    ``states`` are the packed states after layer ``end - 1``. When ``end`` is the model's depth, the last layer computes
    each row's first token only (``states`` is ``(rows, hidden)``) and the final head (``classify_hidden``) reads them;
    else cascade head ``head`` reads each row's first token. Every argument is a tensor or an int, so that
    ``torch.compile`` traces it with dynamic token and row counts (:mod:`as2hub.inference.compiled`), a stage and its
    head as one graph (one call, not two: each compiled call costs about 0.3 ms of dynamo's wrapper and guards, AMX
    Xeon). ``rows_kernel``: int8 layers (``backend="torch-int8"``) run :func:`~as2hub.inference.int8.quantized_layer`
    (:func:`use_int8_rows`: one torch thread and the C kernel built; the caller decides, outside a compiled graph)."""
    layers = model.base_model.encoder.layer
    batch, length = pattern.shape[0], pattern.shape[-1]
    plan = UnpaddedBatch(index, batch, length, pattern)
    last = end == len(layers)
    # on the CPU attention row by row; on a GPU one call in the padded layout (a kernel launch per row would cost more)
    attend = _attend_rows if hidden.device.type == "cpu" else None
    if rows_kernel and attend is not None and end > start and all(map(int8.rows_ready, layers[start:end])):
        return _quantized_stage(model, layers[start:end], hidden, plan, firsts, last, head)
    for layer in layers[start : end - 1 if last else end]:
        hidden = packed_layer(layer, hidden, plan, attend)
    if last:
        first = _first_token_layer(layers[end - 1], hidden, plan, firsts)
        return first, model.classify_hidden(first[:, None, :])
    return hidden, model.cascade_head_logits(head, hidden.index_select(0, firsts)[:, None, :])


def _quantized_stage(model, layers, hidden, plan: UnpaddedBatch, firsts, last: bool, head: int):
    """:func:`packed_stage` of int8 layers (:func:`~as2hub.inference.int8.quantized_layer`): the states quantized once
    here, then each layer hands the next its states and their codes."""
    attention = layers[0].attention.self
    heads, head_size = attention.num_attention_heads, attention.attention_head_size
    scale = getattr(attention, "scaling", head_size**-0.5)
    first_reader = int8.reader(layers[0])
    quantize = int8.step_operator("quantize_rows", int8.quantize_rows, hidden)
    quantized = quantize(hidden, first_reader.input_scale, first_reader.rotation)
    rows = _attention_operator("rowwise_attention", rowwise_attention, hidden)
    body = layers[:-1] if last else layers
    for position, layer in enumerate(body):
        # the codes each layer hands on are for the next layer's products (smoothed, rotated); none after the stage
        following = int8.reader(layers[position + 1]) if position + 1 < len(layers) else None
        hidden, quantized = int8.quantized_layer(
            layer, hidden, quantized, lambda qkv: rows(qkv, plan.pattern, heads, scale), following
        )
    if last:
        firsts_only = _attention_operator("first_token_attention", first_token_attention, hidden)

        def attend(query, keys_values):
            return firsts_only(query, keys_values, plan.index, plan.pattern, heads, scale)

        first = int8.quantized_first_tokens(layers[-1], hidden, quantized, firsts, attend)
        return first, model.classify_hidden(first[:, None, :])
    return hidden, model.cascade_head_logits(head, hidden.index_select(0, firsts)[:, None, :])


def use_int8_rows(model, device) -> bool:
    """Whether the unpadded pass runs ``model``'s int8 layers through :func:`~as2hub.inference.int8.quantized_layer`:
    they are int8 (:func:`~as2hub.inference.int8.rows_ready`), on the CPU, and its C kernel runs now
    (:func:`~as2hub.inference.int8.use_rows_kernel`: one torch thread; with more, inductor's fused kernels run in
    parallel and were faster: 2 threads, 411 against 253 pairs/s, AVX-512 EPYC, 2026-11-30). Decided at each call,
    outside the compiled graph (a thread count read inside would break it): a compiled ranker keeps a graph per
    answer."""
    layers = getattr(model, "module", model).base_model.encoder.layer
    return torch.device(device).type == "cpu" and int8.rows_ready(layers[0]) and int8.use_rows_kernel()


def run_stage(model, hidden: torch.Tensor, packing: PackedRows, start: int, end: int, head: int = 0):
    """:func:`packed_stage` through ``model.packed_stage`` where the model has one (the compiled ranker's)."""
    arguments = (
        hidden,
        packing.index,
        packing.firsts,
        packing.pattern,
        start,
        end,
        head,
        use_int8_rows(model, hidden.device),
    )
    own = getattr(model, "packed_stage", None)
    return own(*arguments) if own is not None else packed_stage(model, *arguments)


def run_first_stage(model, batch: dict, end: int, head: int = 0) -> tuple[torch.Tensor, torch.Tensor, PackedRows]:
    """:func:`embedded_stage` of a padded token batch (through ``model.embedded_stage`` where the model has one, the
    compiled ranker's): ``(states, logits, packing)``."""
    batch = {key: value.to(model.device) for key, value in batch.items()}
    positions, packing = packing_of(batch)
    arguments = (batch, positions, packing.index, packing.firsts, packing.pattern, end, head)
    arguments += (use_int8_rows(model, positions.device),)
    own = getattr(model, "embedded_stage", None)
    states, logits = own(*arguments) if own is not None else embedded_stage(model, *arguments)
    return states, logits, packing


@torch.inference_mode()
def unpadded_logits(model, batch: dict) -> torch.Tensor:
    """The full model's logits for a padded token batch, computed on its real tokens (the first token of the last
    layer only)."""
    return run_first_stage(model, batch, model.config.num_hidden_layers)[1]


class UnpaddedStages:
    """The cascade's stages without padding: what :func:`~as2hub.inference.cascade.cascade_scores` asks of a backend
    (``packed = True``: a later stage takes the survivors' states as a list of ``(length, hidden)`` tensors and returns
    them so)."""

    packed = True

    def __init__(self, model):
        self.model = model
        self.stages = [*cascade_layers(model), model.config.num_hidden_layers]
        self.device = model.device

    def run(self, stage: int, batch=None, hidden=None, attention_mask=None):
        start = self.stages[stage - 1] if stage else 0
        end = self.stages[stage]
        if stage == 0:
            states, logits, packing = run_first_stage(self.model, batch, end, stage)
        else:
            packing = PackedRows.from_lengths([state.shape[0] for state in hidden], self.device)
            states = packing.pack(torch.cat(hidden))
            states, logits = run_stage(self.model, states, packing, start, end, stage)
        if stage == len(self.stages) - 1:
            return None, logits
        return packing.split(states), logits

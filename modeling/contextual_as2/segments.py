"""Segment ids for (question, candidate, context) inputs, and growing a checkpoint's token-type table.

Layouts (one segment per text, separators belong to the segment they close, as BERT's tokenizer does for pairs)::

    RoBERTa  <s> q </s></s> s </s></s> c </s>      segments 0 0 0 0 1 1 1 2 2
    BERT     [CLS] q [SEP] s [SEP] c [SEP]          segments 0 0 0 1 1 2 2

so segments can always be recovered from the separator positions: the segment of a token is the number of separator
runs that end before it. Padding gets segment 0, like tokenizers pad ``token_type_ids``.
"""

import torch
from torch import nn


def infer_token_type_ids(
    input_ids: torch.Tensor,
    sep_token_id: int,
    num_token_types: int,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Segment ids derived from separator runs, clamped to ``num_token_types - 1``.

    Clamping keeps each backbone's own design when the table is smaller than three rows: a RoBERTa pairwise model
    (one row) gets all zeros, a BERT/ELECTRA pairwise model gets 0 for the question and 1 for the candidate.

    Example:
        >>> ids = torch.tensor([[101, 7, 102, 8, 9, 102, 5, 102, 0]])
        >>> infer_token_type_ids(ids, sep_token_id=102, num_token_types=3, attention_mask=(ids != 0).long())
        tensor([[0, 0, 0, 1, 1, 1, 2, 2, 0]])
    """
    is_sep = input_ids == sep_token_id
    next_is_sep = torch.zeros_like(is_sep)
    next_is_sep[:, :-1] = is_sep[:, 1:]
    run_ends = (is_sep & ~next_is_sep).long()
    # Exclusive cumulative sum: a separator run counts for the tokens after it, not for itself.
    segments = run_ends.cumsum(dim=1) - run_ends
    segments = segments.clamp_(max=num_token_types - 1)
    if attention_mask is not None:
        segments = segments * attention_mask.to(segments.dtype)
    return segments


@torch.no_grad()
def grow_token_type_embeddings(
    embeddings: nn.Embedding, new_size: int, init: str, initializer_range: float
) -> nn.Embedding:
    """Return a token-type table with ``new_size`` rows that keeps the pretrained rows.

    ``init="scratch"`` draws the new rows from normal(0, initializer_range) (the paper's choice); ``init="copy"``
    copies the last pretrained row into each new one (for RoBERTa, the only row; for BERT/ELECTRA, the
    second-segment row), which starts the context segment close to what the backbone has seen.
    """
    old_size, dim = embeddings.weight.shape
    if new_size <= old_size:
        return embeddings
    grown = nn.Embedding(new_size, dim, device=embeddings.weight.device, dtype=embeddings.weight.dtype)
    grown.weight[:old_size] = embeddings.weight
    if init == "scratch":
        grown.weight[old_size:].normal_(mean=0.0, std=initializer_range)
    elif init == "copy":
        grown.weight[old_size:] = embeddings.weight[-1]
    else:
        raise ValueError(f"unknown token_type_init {init!r}: use 'scratch' or 'copy'")
    return grown

"""Batching (question, candidate, context) examples for the contextual AS2 cross-encoders.

Tokenize once with :func:`tokenize_as2` (``datasets.map``, batched, fast tokenizer, no special tokens), then let
:class:`ContextualAS2Collator` lay out, truncate and pad each batch; raw-text features work too and are tokenized in the
collator.

Example:
    >>> collator = ContextualAS2Collator(tokenizer, contextual=True)  # doctest: +SKIP
    >>> train = tokenize_as2(data.dataset, tokenizer)  # doctest: +SKIP
    >>> Trainer(model=model, data_collator=collator, train_dataset=train, ...)  # doctest: +SKIP
"""

from dataclasses import dataclass, field

import torch

from as2hub.modeling.folders import DEFAULT_MAX_LENGTH
from as2hub.modeling.segment_layout import SegmentLayout, pad_batch

TEXT_COLUMNS = ("question", "candidate", "context")
TOKEN_COLUMNS = ("question_tokens", "candidate_tokens", "context_tokens")


def tokenize_as2(dataset, tokenizer, num_proc: int | None = None):
    """Replace the texts by ``question_tokens``, ``candidate_tokens`` and ``context_tokens`` (no special tokens).

    Only ``label`` is kept beside them. Questions repeat across their candidates, so each distinct text is tokenized
    once per batch.
    """

    def encode(batch):
        out = {}
        for text_column, token_column in zip(TEXT_COLUMNS, TOKEN_COLUMNS):
            texts = batch.get(text_column) or [""] * len(batch["question"])
            unique = list(dict.fromkeys(texts))
            encoded = dict(zip(unique, tokenizer(unique, add_special_tokens=False)["input_ids"]))
            out[token_column] = [encoded[text] for text in texts]
        return out

    drop = [column for column in dataset.column_names if column != "label"]
    return dataset.map(encode, batched=True, num_proc=num_proc, remove_columns=drop, desc="Tokenizing")


@dataclass
class ContextualAS2Collator:
    """Collate AS2 examples into ``input_ids``, ``attention_mask``, ``token_type_ids`` and ``labels``.

    Args:
        tokenizer: the model's tokenizer (its special-token layout is read from a pair encoding).
        max_length: total length after truncation, longest segment first (default ``modeling/folders.py``'s ``DEFAULT_MAX_LENGTH``, as the paper).
        contextual: three segments (question, candidate, context) when True, the stock pair otherwise.
        num_token_types: rows of the model's token-type table; segment ids are clamped below it, so a pairwise
            RoBERTa (one row) gets zeros as in its original design. Defaults to the number of segments.
        pad_to_multiple_of: pad each batch to a multiple of this (8 suits tensor cores and CPU kernels).
    """

    tokenizer: object
    max_length: int = DEFAULT_MAX_LENGTH
    contextual: bool = True
    num_token_types: int | None = None
    pad_to_multiple_of: int | None = 8
    layout: SegmentLayout = field(init=False)

    def __post_init__(self):
        self.layout = SegmentLayout.from_tokenizer(self.tokenizer)
        self.layout.check_max_length(self.max_length, self.num_segments)

    @property
    def num_segments(self) -> int:
        return 3 if self.contextual else 2

    def encode(self, question, candidate, context=None) -> tuple[list[int], list[int]]:
        """Layout of one example, from token ids (lists) or texts."""
        segments = [question, candidate, [] if context is None else context][: self.num_segments]
        segments = [
            self.tokenizer(s, add_special_tokens=False)["input_ids"] if isinstance(s, str) else s for s in segments
        ]
        return self.layout.build(segments, self.max_length, self.num_token_types)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        columns = TOKEN_COLUMNS if TOKEN_COLUMNS[0] in features[0] else TEXT_COLUMNS
        rows = [self.encode(*(feature.get(column) for column in columns)) for feature in features]
        batch = pad_batch(rows, self.layout.pad_token_id, self.pad_to_multiple_of)
        if "label" in features[0]:
            batch["labels"] = torch.tensor([int(feature["label"]) for feature in features], dtype=torch.long)
        return batch

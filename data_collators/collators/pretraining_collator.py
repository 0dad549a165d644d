"""Batching pairs and triplets for structure-aware continued pre-training (MLM + a sentence-level binary task).

Examples are ``{"text_a", "text_b"[, "text_c"], "label"}``: a pair (SSP, SP, PSD; Di Liello et al., 2022) or a triplet
(SDC, DPC, DSLC; Di Liello et al., 2023) and 1 when it is positive (e.g. a and b come from the same paragraph). Each
example is laid out with the tokenizer's own special tokens (:class:`SegmentLayout`: ``[CLS] a [SEP] b [SEP] c [SEP]``,
``<s> a </s></s> b </s></s> c </s>``), truncated longest-first, then the batch is masked dynamically by transformers'
``DataCollatorForLanguageModeling.torch_mask_tokens`` (15% of the tokens, 80% [MASK] / 10% random / 10% kept,
optionally whole words); special tokens and padding are never selected.

Output: ``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels`` (MLM targets, -100 elsewhere) and
``sentence_labels``: the arguments of the ``*ForSSPPretraining`` models.

Example:
    >>> collator = PretrainingCollator(tokenizer, max_length=default_max_length("ssp"))  # doctest: +SKIP
    >>> train = tokenize_pretraining(pairs, tokenizer)  # optional: tokenize once with datasets.map  # doctest: +SKIP
    >>> Trainer(model=model, data_collator=collator, train_dataset=train, ...)  # doctest: +SKIP
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DataCollatorForLanguageModeling

from as2hub.data_collators.objectives.structure_objectives import resolve_objective
from as2hub.modeling.segment_layout import SegmentLayout, longest_first_lengths, pad_batch

TEXT_COLUMNS = ("text_a", "text_b", "text_c")
TOKEN_COLUMNS = ("tokens_a", "tokens_b", "tokens_c")
OFFSET_COLUMNS = ("offsets_a", "offsets_b", "offsets_c")
SENTENCE_LABEL_NAME = "sentence_labels"


def default_max_length(objective) -> int:
    """Default ``max_length`` of a pre-training objective (``ssp``, ``sp``, ``psd``, ``sdc``, ``dpc``, ``dslc``, the
    mixes ``all`` and ``all_pairs``, and their ``mlm_`` ablations): the papers' 128 tokens, 256 for SP and PSD
    (``Objective.default_max_length``).

    >>> default_max_length("SP"), default_max_length("ssp"), default_max_length("dpc"), default_max_length("all_pairs")
    (256, 128, 128, 128)
    """
    resolved = resolve_objective(objective)
    if resolved.default_max_length is None:
        raise ValueError(f"objective {resolved.name!r} has no sentence-pair length: its slot layout sets the length")
    return resolved.default_max_length


def tokenize_pretraining(dataset, tokenizer, with_offsets: bool = False, num_proc: int | None = None):
    """Add ``tokens_a``, ``tokens_b``, ``tokens_c`` (ids without special tokens) to a ``datasets.Dataset``.

    ``with_offsets=True`` also stores character offsets (``offsets_*``), which whole-word masking needs. A missing or
    empty ``text_c`` column gives empty ``tokens_c``: the example stays a pair.
    """

    def encode(batch):
        size = len(batch[TEXT_COLUMNS[0]])
        out = {}
        for text_column, token_column, offset_column in zip(TEXT_COLUMNS, TOKEN_COLUMNS, OFFSET_COLUMNS):
            texts = [text or "" for text in (batch.get(text_column) or [""] * size)]
            encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=with_offsets)
            out[token_column] = encoded["input_ids"]
            if with_offsets:
                out[offset_column] = [[list(pair) for pair in row] for row in encoded["offset_mapping"]]
        return out

    return dataset.map(encode, batched=True, num_proc=num_proc, desc="Tokenizing")


@dataclass
class PretrainingCollator:
    """Collate pair/triplet examples into masked-LM inputs with segment ids and a sentence-level label.

    Args:
        tokenizer: the model's tokenizer; needs a mask and a pad token.
        max_length: total length after longest-first truncation (see :func:`default_max_length`).
        mlm_probability: fraction of (non-special, non-padding) tokens selected for MLM; 0 disables masking (no
            ``labels`` in the batch).
        whole_word_mask: select whole words (transformers' implementation: needs offsets, so texts or
            ``tokenize_pretraining(..., with_offsets=True)``; it replaces every selected token by [MASK]).
        num_token_types: rows of the model's token-type table; segment ids are clamped below it (1 keeps RoBERTa's
            single-segment design). Defaults to one id per segment.
        pad_to_multiple_of: pad each batch to a multiple of this.
        mask_replace_prob, random_replace_prob: the 80/10/10 split of selected tokens ([MASK] / random / kept).
        seed: seed of the masking generator (None: torch's global RNG).
        label_name: key of the sentence-level label in the batch.
    """

    tokenizer: object
    max_length: int = 128
    mlm_probability: float = 0.15
    whole_word_mask: bool = False
    num_token_types: int | None = None
    pad_to_multiple_of: int | None = 8
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    seed: int | None = None
    label_name: str = SENTENCE_LABEL_NAME
    layout: SegmentLayout = field(init=False)
    masker: DataCollatorForLanguageModeling | None = field(init=False)

    def __post_init__(self):
        self.layout = SegmentLayout.from_tokenizer(self.tokenizer)
        self.layout.check_max_length(self.max_length, 2)
        self.masker = None
        if self.mlm_probability > 0:
            # transformers' masking (80/10/10, whole words, seeded generator) is reused as is; only the layout is ours.
            self.masker = DataCollatorForLanguageModeling(
                tokenizer=self.tokenizer,
                mlm=True,
                whole_word_mask=self.whole_word_mask,
                mlm_probability=self.mlm_probability,
                mask_replace_prob=self.mask_replace_prob,
                random_replace_prob=self.random_replace_prob,
                seed=self.seed,
            )

    def encode(self, segments: list, offsets: list | None = None):
        """Lay out one example: (input_ids, token_type_ids, special_tokens_mask, offsets or None).

        ``segments`` are texts or lists of token ids (2 or 3 of them); ``offsets`` the character offsets of each
        segment's tokens (computed here for texts when whole-word masking needs them).
        """
        need_offsets = self.whole_word_mask
        token_segments, offset_segments = [], []
        for index, segment in enumerate(segments):
            if isinstance(segment, str):
                encoded = self.tokenizer(segment, add_special_tokens=False, return_offsets_mapping=need_offsets)
                token_segments.append(encoded["input_ids"])
                offset_segments.append(encoded["offset_mapping"] if need_offsets else None)
            else:
                token_segments.append(list(segment))
                offset_segments.append(offsets[index] if offsets is not None else None)
        if len(token_segments) == 3:
            self.layout.check_max_length(self.max_length, 3)
        input_ids, token_type_ids = self.layout.build(token_segments, self.max_length, self.num_token_types)

        # Which positions are special and, for whole words, each kept token's (start, end), shifted per segment so
        # that a segment never continues the previous segment's last word.
        budget = self.max_length - self.layout.num_special_tokens(len(token_segments))
        lengths = longest_first_lengths([len(s) for s in token_segments], budget)
        special = [1] * len(self.layout.prefix)
        spans = [(0, 0)] * len(self.layout.prefix)
        base = 0
        for index, length in enumerate(lengths):
            closing = self.layout.suffix if index == len(lengths) - 1 else self.layout.middle
            special += [0] * length + [1] * len(closing)
            if need_offsets:
                if offset_segments[index] is None:
                    raise ValueError(
                        "whole_word_mask needs character offsets: pass texts, or token ids with offsets "
                        "(tokenize_pretraining(..., with_offsets=True))"
                    )
                segment_spans = [(start + base, end + base) for start, end in offset_segments[index][:length]]
                spans += segment_spans + [(0, 0)] * len(closing)
                base = (segment_spans[-1][1] if segment_spans else base) + 2
        return input_ids, token_type_ids, special, (spans if need_offsets else None)

    def _example_segments(self, feature: dict):
        if TOKEN_COLUMNS[0] in feature:
            segments = [feature.get(column) for column in TOKEN_COLUMNS]
            offsets = [feature.get(column) for column in OFFSET_COLUMNS] if OFFSET_COLUMNS[0] in feature else None
        else:
            segments, offsets = [feature.get(column) for column in TEXT_COLUMNS], None
        # A missing or empty third segment means a pair.
        if segments[2] is None or len(segments[2]) == 0:
            segments, offsets = segments[:2], (offsets[:2] if offsets is not None else None)
        return segments, offsets

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        encoded = [self.encode(*self._example_segments(feature)) for feature in features]
        batch = pad_batch(
            [(ids, types) for ids, types, _, _ in encoded], self.layout.pad_token_id, self.pad_to_multiple_of
        )
        if self.masker is not None:
            batch_size, length = batch["input_ids"].shape
            special = torch.ones((batch_size, length), dtype=torch.long)  # padding counts as special: never masked
            offsets = np.zeros((batch_size, length, 2), dtype=np.int64) if self.whole_word_mask else None
            for row, (_, _, row_special, row_spans) in enumerate(encoded):
                special[row, : len(row_special)] = torch.tensor(row_special, dtype=torch.long)
                if offsets is not None:
                    offsets[row, : len(row_spans)] = np.asarray(row_spans, dtype=np.int64).reshape(-1, 2)
            if self.masker.seed is not None and self.masker.generator is None:
                self.masker.create_rng()
            batch["input_ids"], batch["labels"] = self.masker.torch_mask_tokens(
                batch["input_ids"], special_tokens_mask=special, offset_mapping=offsets
            )
        if "label" in features[0]:
            batch[self.label_name] = torch.tensor([int(feature["label"]) for feature in features], dtype=torch.long)
        return batch

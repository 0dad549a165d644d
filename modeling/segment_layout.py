"""Special-token layout of a tokenizer, extended from pairs to any number of segments.

transformers 5 tokenizers no longer expose ``build_inputs_with_special_tokens``, so the layout is read off a real pair
encoding: ``prefix a middle b suffix`` (BERT: ``[CLS] a [SEP] b [SEP]``, RoBERTa: ``<s> a </s></s> b </s>``). Three
segments become ``prefix a middle b middle c suffix``, which is the layout the papers use for (question, candidate,
context) and for the (a, b, c) pre-training triplets.

Example:
    >>> layout = SegmentLayout.from_tokenizer(tokenizer)  # doctest: +SKIP
    >>> ids, types = layout.build([q_ids, s_ids, c_ids], max_length=128)  # doctest: +SKIP
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SegmentLayout:
    prefix: tuple[int, ...]
    middle: tuple[int, ...]
    suffix: tuple[int, ...]
    pad_token_id: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SegmentLayout":
        encoded = tokenizer("a", "b", add_special_tokens=True, return_special_tokens_mask=True)
        ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
        runs, current = [], []  # special-token runs between content runs
        for token_id, is_special in zip(ids, special):
            if is_special:
                current.append(token_id)
            else:
                if not runs or current:
                    runs.append(tuple(current))
                current = []
        runs.append(tuple(current))
        if len(runs) != 3:
            raise ValueError(f"cannot read a pair layout from {type(tokenizer).__name__}: {ids} / {special}")
        if tokenizer.pad_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no pad token; set tokenizer.pad_token first")
        return cls(prefix=runs[0], middle=runs[1], suffix=runs[2], pad_token_id=tokenizer.pad_token_id)

    def num_special_tokens(self, num_segments: int) -> int:
        return len(self.prefix) + len(self.middle) * (num_segments - 1) + len(self.suffix)

    def check_max_length(self, max_length: int, num_segments: int) -> None:
        """Raise if ``max_length`` cannot hold the special tokens plus one token per segment."""
        needed = self.num_special_tokens(num_segments) + num_segments
        if max_length < needed:
            raise ValueError(
                f"max_length={max_length} is too small: {num_segments} segments need "
                f"{self.num_special_tokens(num_segments)} special tokens plus at least one token each ({needed})"
            )

    def build(
        self, segments: list[list[int]], max_length: int, num_token_types: int | None = None
    ) -> tuple[list[int], list[int]]:
        """Truncate longest-first to ``max_length``, add special tokens, return (input_ids, token_type_ids).

        Segment ``i`` covers its tokens and the separators that close it (the first segment also owns the prefix);
        ids are clamped to ``num_token_types - 1`` so a one-row RoBERTa table gets zeros everywhere. An empty last
        segment (a candidate with no context) is left out rather than written as back-to-back separators, which a
        model reading segments off the separators could not tell apart from one separator run.
        """
        while len(segments) > 2 and not segments[-1]:
            segments = segments[:-1]
        budget = max_length - self.num_special_tokens(len(segments))
        lengths = longest_first_lengths([len(s) for s in segments], budget)
        input_ids = list(self.prefix)
        token_type_ids = [0] * len(self.prefix)
        last = len(segments) - 1
        top = last if num_token_types is None else num_token_types - 1
        for index, (segment, length) in enumerate(zip(segments, lengths)):
            closing = self.suffix if index == last else self.middle
            input_ids.extend(segment[:length])
            input_ids.extend(closing)
            token_type_ids.extend([min(index, top)] * (length + len(closing)))
        return input_ids, token_type_ids


def longest_first_lengths(lengths: list[int], budget: int) -> list[int]:
    """Lengths after removing tokens one at a time from the longest segment until the total fits ``budget``.

    Computed in closed form (water-filling) rather than token by token. Segments cut to the common cap share the
    leftover tokens longest-original first (the later segment on a tie), which for pairs is exactly what the
    ``tokenizers`` library does.

    >>> longest_first_lengths([5, 40, 30], 30)
    [5, 13, 12]
    """
    if sum(lengths) <= budget:
        return list(lengths)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    result = list(lengths)
    remaining = budget
    for rank, index in enumerate(order):
        still_open = len(order) - rank
        if lengths[index] * still_open <= remaining:
            remaining -= lengths[index]
            continue
        # Every segment from here on is cut to a common cap; `order` sorts them by (length, index), and the leftover
        # tokens go to the last ones: the longest originals, the later segment on a tie.
        capped = order[rank:]
        cap, extra = divmod(remaining, still_open)
        for position, capped_index in enumerate(capped):
            result[capped_index] = cap + (1 if position >= still_open - extra else 0)
        break
    return result


def padded_length(length: int, multiple: int | None) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (unchanged for ``None``): the width :func:`pad_batch` pads
    a batch to, and what the ranker's batching cost model counts (``as2hub.inference.batching``)."""
    return -(-length // multiple) * multiple if multiple else length


def pad_batch(
    rows: list[tuple[list[int], list[int]]], pad_token_id: int, pad_to_multiple_of: int | None = 8
) -> dict[str, torch.Tensor]:
    """Pad (input_ids, token_type_ids) rows to the longest row, rounded up to ``pad_to_multiple_of``."""
    longest = padded_length(max(len(ids) for ids, _ in rows), pad_to_multiple_of)
    input_ids = torch.full((len(rows), longest), pad_token_id, dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), longest), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for row, (ids, types) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        token_type_ids[row, : len(types)] = torch.tensor(types, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}

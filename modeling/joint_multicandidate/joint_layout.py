"""The fixed slot layout of the joint multi-candidate models (Di Liello et al., NAACL 2022, section 3.2).

A question (or claim) and up to k candidates are laid out in k+1 slots of L tokens each::

    slot 0               slot 1               ...  slot k
    <s> q </s> <pad>...  <s> c1 </s> <pad>...      <s> ck </s> <pad>...      (RoBERTa)
    [CLS] q [SEP] [PAD]  [CLS] c1 [SEP] [PAD]      [CLS] ck [SEP] [PAD]      (BERT, ELECTRA)

Slot i starts at i·L; every slot is the tokenizer's own single-sequence encoding of its text, truncated to fit, then
padded to L. Token type ids are the slot index (0..k). A missing candidate (fewer than k) leaves an *empty slot*: all
padding, attention mask 0, so nothing attends to it and its label is ignored.

This file ships with the model (remote code): the pipeline builds its inputs with it, and so do as2hub's collators,
so training and inference see the same layout.

Example:
    >>> layout = SlotLayout.from_tokenizer(tokenizer, num_candidates=5, slot_length=64)  # doctest: +SKIP
    >>> batch = layout.batch([layout.encode_texts(tokenizer, question, candidates)])  # doctest: +SKIP
    >>> batch["input_ids"].shape  # doctest: +SKIP
    torch.Size([1, 384])
"""

from dataclasses import dataclass

import torch

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SlotLayout:
    """Special tokens of a tokenizer's single-sequence encoding, and the slot geometry (k, L)."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    pad_token_id: int
    num_candidates: int
    slot_length: int

    @classmethod
    def from_tokenizer(cls, tokenizer, num_candidates: int, slot_length: int) -> "SlotLayout":
        """Read ``prefix x suffix`` off a real encoding (``<s> x </s>``, ``[CLS] x [SEP]``) and check (k, L)."""
        if isinstance(num_candidates, bool) or not isinstance(num_candidates, int) or num_candidates < 1:
            raise ValueError(f"num_candidates (k) must be an integer >= 1, got {num_candidates!r}")
        if tokenizer.pad_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no pad token; set tokenizer.pad_token first")
        encoded = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
        ids, special = encoded["input_ids"], encoded["special_tokens_mask"]
        first_text = special.index(0) if 0 in special else len(ids)
        last_text = len(special) - 1 - special[::-1].index(0) if 0 in special else len(ids) - 1
        prefix, suffix = tuple(ids[:first_text]), tuple(ids[last_text + 1 :])
        layout = cls(prefix, suffix, tokenizer.pad_token_id, num_candidates, slot_length)
        needed = len(prefix) + len(suffix) + 1
        if isinstance(slot_length, bool) or not isinstance(slot_length, int) or slot_length < needed:
            raise ValueError(
                f"slot_length={slot_length!r} is shorter than the special tokens: a slot holds "
                f"{len(prefix) + len(suffix)} special tokens ({type(tokenizer).__name__}) plus at least one token of "
                f"text, so slot_length must be >= {needed}"
            )
        return layout

    @property
    def sequence_length(self) -> int:
        return (self.num_candidates + 1) * self.slot_length

    @property
    def content_length(self) -> int:
        """Tokens of text that fit in one slot."""
        return self.slot_length - len(self.prefix) - len(self.suffix)

    def slot(self, token_ids: list[int]) -> list[int]:
        """One slot without padding: ``prefix + token_ids[:content_length] + suffix``."""
        return [*self.prefix, *token_ids[: self.content_length], *self.suffix]

    def build(self, query_ids: list[int], candidate_ids: list[list[int]]) -> dict[str, list[int]]:
        """One input of (k+1)·L tokens: ``input_ids``, ``attention_mask``, ``token_type_ids``, ``special_tokens_mask``
        (1 on special tokens and padding: what MLM must never select) and ``slot_mask`` (k entries, 1 for a filled
        candidate slot)."""
        if len(candidate_ids) > self.num_candidates:
            raise ValueError(
                f"{len(candidate_ids)} candidates do not fit in {self.num_candidates} slots; group them by "
                f"{self.num_candidates} first"
            )
        L = self.slot_length
        input_ids: list[int] = []
        attention_mask: list[int] = []
        special: list[int] = []
        for index in range(self.num_candidates + 1):
            tokens = query_ids if index == 0 else (candidate_ids[index - 1] if index <= len(candidate_ids) else None)
            if tokens is None:
                input_ids += [self.pad_token_id] * L
                attention_mask += [0] * L
                special += [1] * L
                continue
            ids = self.slot(tokens)
            padding = L - len(ids)
            input_ids += ids + [self.pad_token_id] * padding
            attention_mask += [1] * len(ids) + [0] * padding
            text = len(ids) - len(self.prefix) - len(self.suffix)
            special += [1] * len(self.prefix) + [0] * text + [1] * (len(self.suffix) + padding)
        slot_mask = [1] * len(candidate_ids) + [0] * (self.num_candidates - len(candidate_ids))
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": slot_token_type_ids(self.num_candidates, L),
            "special_tokens_mask": special,
            "slot_mask": slot_mask,
        }

    def encode_texts(self, tokenizer, query: str, candidates: list[str]) -> dict[str, list[int]]:
        """:meth:`build` from texts (each distinct text tokenized once, without special tokens)."""
        unique = list(dict.fromkeys([query, *candidates]))
        ids = dict(zip(unique, tokenizer(unique, add_special_tokens=False)["input_ids"]))
        return self.build(ids[query], [ids[text] for text in candidates])

    def batch(self, rows: list[dict[str, list[int]]], keys=("input_ids", "attention_mask", "token_type_ids")):
        """Stack rows of :meth:`build` into ``torch.long`` tensors (every row already has (k+1)·L tokens)."""
        return {key: torch.tensor([row[key] for row in rows], dtype=torch.long) for key in keys}


def slot_token_type_ids(num_candidates: int, slot_length: int) -> list[int]:
    """Token type i on every token of slot i: ``[0]*L + [1]*L + ... + [k]*L``."""
    return [index for index in range(num_candidates + 1) for _ in range(slot_length)]


def group(items: list, size: int) -> list[list]:
    """Consecutive groups of ``size`` (the last one may be shorter): how ``all`` grouping fills the slots."""
    return [items[start : start + size] for start in range(0, len(items), size)]

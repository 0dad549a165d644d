"""Encoding and collating HotpotQA-style records for :class:`~as2hub.modeling.LongformerWithQEContrastive`.

2. **Encode** (:class:`HotpotQAEncoder`): the input of Caciularu et al. (NAACL 2022), appendix B.2::

       <s> [q] question [/q] <doc-s> <t> title </t> <sent> s1 </sent> <sent> s2 </sent> </doc-s> ... </s>

   with the markers of :func:`add_marker_tokens`; truncation to ``max_length`` keeps whole sentences with their markers
   (the first sentence that does not fit ends the input) and reports what it dropped; the positions of the question
   marker, every ``<sent>`` and every ``<t>`` marker; the labels of the supporting sentences and paragraphs; the
   token positions of every occurrence of the answer in the supporting paragraphs.
3. **Collate** (:class:`HotpotQACollator`): pads a batch and adds ``attention_mask``, the ``global_attention_mask``
   (first token, question tokens with their markers, ``<t>`` and ``<sent>`` markers) and the ``span_mask``.

Example:
    >>> encoder = HotpotQAEncoder.from_config(tokenizer, model.config, max_length=4096)  # doctest: +SKIP
    >>> features, decode_infos, stats = encoder.encode_dataset(read_hotpotqa("dev.json"))  # doctest: +SKIP
    >>> batch = HotpotQACollator(tokenizer)(list(features)[:2])  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import datasets
import numpy as np
import torch

from as2hub.data_collators.readers.hotpotqa import (
    MIN_LENGTH,
    TRUNCATED_EVIDENCE_POLICIES,
    HotpotQAData,
    HotpotQAError,
    SkipExample,
    find_answer,
)
from as2hub.modeling.longformer_qe.configuration_longformer_qe import DEFAULT_ANSWER_TYPES
from as2hub.modeling.longformer_qe.modeling_longformer_qe import infer_marker_inputs

from .hotpotqa_markers import marker_token_ids

logger = logging.getLogger(__name__)


@dataclass
class EncodingStats:
    """What encoding did to a dataset: examples kept, skipped (per reason), and what truncation dropped."""

    examples: int = 0
    skipped: collections.Counter = field(default_factory=collections.Counter)
    truncated_examples: int = 0
    dropped_sentences: int = 0
    dropped_paragraphs: int = 0
    truncated_question_tokens: int = 0
    examples_with_truncated_evidence: int = 0
    longest_input: int = 0

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "skipped"}
        return {**out, "skipped": dict(self.skipped)}


@dataclass
class DecodeInfo:
    """What turns token positions and sentence indices back into text and (title, sent_id) pairs."""

    id: str
    pieces: list[str]  # the text of every title / sentence in the input
    token_piece: np.ndarray  # (length,) index into pieces, -1 outside titles and sentences
    token_start: np.ndarray  # (length,) character offsets in the piece
    token_end: np.ndarray
    sentence_keys: list[tuple[str, int]]  # (title, sent_id) of every <sent> marker in order
    sentence_paragraph: list[int]  # paragraph (order in the input) of every sentence
    paragraph_titles: list[str]

    def span_text(self, start: int, end: int) -> str:
        """Text of tokens ``start..end`` (one title or sentence; empty when they lie in different pieces)."""
        if not (0 <= start <= end < len(self.token_piece)):
            return ""
        piece = int(self.token_piece[start])
        if piece < 0 or int(self.token_piece[end]) != piece:
            return ""
        return self.pieces[piece][int(self.token_start[start]) : int(self.token_end[end])].strip()


def _char_to_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """First token ending after ``start`` and last token starting before ``end`` (offsets relative to the piece)."""
    first = next((t for t, (_, e) in enumerate(offsets) if e > start), None)
    last = next(
        (t for t in range(len(offsets) - 1, -1, -1) if offsets[t][0] < end and offsets[t][1] > offsets[t][0]), None
    )
    if first is None or last is None or first > last:
        return None
    return first, last


class HotpotQAEncoder:
    """Builds model inputs from validated records (see the module docstring for the layout).

    Args:
        tokenizer: a fast tokenizer with the markers (:func:`add_marker_tokens`).
        max_length: tokens per input, special tokens and markers included.
        answer_types: the model's answer-type classes (``config.answer_types``).
        question_types, question_type_key: the model's question types and the record field that names them.
        max_question_length: question tokens kept (the rest is cut and counted).
        truncated_evidence: an example whose supporting facts (or every answer occurrence) truncation would drop:
            ``"error"`` (:class:`HotpotQAError` naming the example), ``"skip"`` (logged and counted) or ``"keep"``
            (kept with the visible evidence only, as evaluation wants: the dropped facts count as misses).
        skip_invalid: skip (log and count) examples of an unknown question or answer type, or whose text contains a
            marker string, instead of raising.
    """

    def __init__(
        self,
        tokenizer,
        max_length: int,
        *,
        answer_types: Iterable[str] = DEFAULT_ANSWER_TYPES,
        question_types: Iterable[str] | None = None,
        question_type_key: str = "answer_type",
        max_question_length: int = 64,
        truncated_evidence: str = "error",
        skip_invalid: bool = False,
    ):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("HotpotQAEncoder needs a fast tokenizer (character offsets)")
        if truncated_evidence not in TRUNCATED_EVIDENCE_POLICIES:
            raise ValueError(
                f"truncated_evidence must be one of {TRUNCATED_EVIDENCE_POLICIES}, got {truncated_evidence!r}"
            )
        self.tokenizer = tokenizer
        self.markers = marker_token_ids(tokenizer)
        self.cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        self.sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        if self.cls_id is None or self.sep_id is None:
            raise ValueError("the tokenizer needs a cls (or bos) and a sep (or eos) token")
        self.answer_types = list(answer_types)
        self.question_types = list(question_types) if question_types is not None else list(self.answer_types)
        self.question_type_key = question_type_key
        self.max_question_length = max_question_length
        if max_length < MIN_LENGTH:
            raise ValueError(f"max_length={max_length} cannot hold the markers of one sentence (needs >= {MIN_LENGTH})")
        self.max_length = max_length
        self.truncated_evidence = truncated_evidence
        self.skip_invalid = skip_invalid
        self._marker_set = set(self.markers.values())

    @classmethod
    def from_config(cls, tokenizer, config, max_length: int | None = None, **kwargs) -> HotpotQAEncoder:
        """An encoder for a :class:`~as2hub.modeling.LongformerQEConfig` (types, key; ``max_length`` defaults to the
        model's positions)."""
        if max_length is None:
            max_length = config.max_position_embeddings - (config.pad_token_id or 0) - 1
        return cls(
            tokenizer,
            max_length,
            answer_types=config.answer_types,
            question_types=config.question_types,
            question_type_key=config.question_type_key,
            **kwargs,
        )

    def _fail(self, reason: str, message: str, fatal: bool = False):
        if self.skip_invalid and not fatal:
            raise SkipExample(reason, message)
        hint = "" if fatal else " (skip such examples with skip_invalid=True)"
        raise HotpotQAError(message + hint)

    def encode(self, record: dict, stats: EncodingStats | None = None) -> tuple[dict, DecodeInfo]:
        """One validated record -> (features, decode info). Raises :class:`HotpotQAError` or ``SkipExample``."""
        stats = stats if stats is not None else EncodingStats()
        example = f"example {record['id']!r}"
        answer_type = record["answer_type"]
        question_type = record["answer_type"] if self.question_type_key == "answer_type" else record["type"]
        if question_type not in self.question_types:
            self._fail(
                "unknown_question_type",
                f"{example}: unknown question type {question_type!r} (field {self.question_type_key!r}); the model "
                f"knows {self.question_types}",
            )
        if answer_type != "none" and answer_type not in self.answer_types:
            self._fail(
                "unknown_answer_type", f"{example}: answer type {answer_type!r} is not one of {self.answer_types}"
            )
        titles = record["context"]["title"]
        paragraphs = record["context"]["sentences"]
        facts = set(zip(record["supporting_facts"]["title"], record["supporting_facts"]["sent_id"]))
        fact_titles = {t for t, _ in facts}

        texts = [record["question"]] + list(titles) + [s for p in paragraphs for s in p]
        row_of: dict[tuple[int, int], int] = {(p, -1): 1 + p for p in range(len(titles))}  # (paragraph, sentence)
        for p, sentences in enumerate(paragraphs):
            first_row = 1 + len(titles) + sum(len(q) for q in paragraphs[:p])
            row_of.update({(p, j): first_row + j for j in range(len(sentences))})
        encoded = self.tokenizer([" " + text for text in texts], add_special_tokens=False, return_offsets_mapping=True)
        token_ids = encoded["input_ids"]
        offsets = [[(max(s - 1, 0), max(e - 1, 0)) for s, e in piece] for piece in encoded["offset_mapping"]]
        for k, ids in enumerate(token_ids):
            if self._marker_set.intersection(ids):
                self._fail("marker_in_text", f"{example}: text {texts[k]!r:.80} contains a marker token string")

        # The question never takes the room of the markers of one paragraph with one (empty) sentence.
        question = token_ids[0][: min(self.max_question_length, self.max_length - MIN_LENGTH)]
        stats.truncated_question_tokens += len(token_ids[0]) - len(question)
        m = self.markers
        input_ids = [self.cls_id, m["question_start"], *question, m["question_end"]]
        budget = self.max_length - 1  # the final separator
        pieces: list[str] = []
        piece_spans: list[tuple[int, int, int]] = []  # (piece, first token, token count) placed in the input
        sentence_index, sentence_labels, sentence_keys, sentence_paragraph = [], [], [], []
        paragraph_index, paragraph_labels, paragraph_titles = [], [], []
        piece_of: dict[tuple[int, int], int] = {}  # (paragraph, sentence or -1 for the title) -> piece index
        kept_sentences = 0
        stopped = False
        cursor = 1 + len(titles)  # index in texts of the first sentence of the current paragraph
        for p, (title, sentences) in enumerate(zip(titles, paragraphs)):
            title_ids = token_ids[1 + p]
            header = 2 + len(title_ids) + 1
            first_unit = 2 + len(token_ids[cursor]) if sentences else 0
            if stopped or len(input_ids) + header + first_unit + 1 > budget:
                stopped = True
                cursor += len(sentences)
                continue
            paragraph_index.append(len(input_ids) + 1)
            paragraph_labels.append(int(title in fact_titles))
            paragraph_titles.append(title)
            input_ids += [m["document_start"], m["title_start"]]
            piece_of[(p, -1)] = len(pieces)
            piece_spans.append((len(pieces), len(input_ids), len(title_ids)))
            pieces.append(title)
            input_ids += [*title_ids, m["title_end"]]
            for j, sentence in enumerate(sentences):
                ids = token_ids[cursor + j]
                if stopped or len(input_ids) + 2 + len(ids) + 1 > budget:
                    stopped = True
                    continue
                sentence_index.append(len(input_ids))
                sentence_labels.append(int((title, j) in facts))
                sentence_keys.append((title, j))
                sentence_paragraph.append(len(paragraph_index) - 1)
                input_ids.append(m["sentence_start"])
                piece_of[(p, j)] = len(pieces)
                piece_spans.append((len(pieces), len(input_ids), len(ids)))
                pieces.append(sentence)
                input_ids += [*ids, m["sentence_end"]]
                kept_sentences += 1
            input_ids.append(m["document_end"])
            cursor += len(sentences)
        input_ids.append(self.sep_id)

        total_sentences = sum(len(p) for p in paragraphs)
        dropped_sentences = total_sentences - kept_sentences
        dropped_paragraphs = len(titles) - len(paragraph_index)
        visible = set(sentence_keys)
        lost_facts = sorted(fact for fact in facts if fact not in visible)

        start_positions, end_positions = [], []
        lost_answer = False
        if answer_type == "span":
            support = fact_titles or set(titles)
            for p, (title, sentences) in enumerate(zip(titles, paragraphs)):
                if title not in support:
                    continue
                for j, text in [(-1, title), *enumerate(sentences)]:
                    spans = find_answer(text, record["answer"])
                    if not spans:
                        continue
                    if (p, j) not in piece_of:
                        continue
                    piece = piece_of[(p, j)]
                    _, first, count = piece_spans[piece]
                    local = offsets[row_of[(p, j)]]
                    for start, end in spans:
                        tokens = _char_to_tokens(local[:count], start, end)
                        if tokens is not None:
                            start_positions.append(first + tokens[0])
                            end_positions.append(first + tokens[1])
            lost_answer = not start_positions
        if lost_facts or lost_answer:
            what = []
            if lost_facts:
                what.append(f"supporting facts {[list(f) for f in lost_facts]}")
            if lost_answer:
                what.append(f"every occurrence of the answer {record['answer']!r}")
            message = (
                f"{example}: max_length={self.max_length} keeps {kept_sentences} of {total_sentences} sentences, so "
                f"{' and '.join(what)} would be truncated away"
            )
            if self.truncated_evidence == "error":
                raise HotpotQAError(message + " (raise max_length, or pass truncated_evidence='skip' or 'keep')")
            if self.truncated_evidence == "skip":
                raise SkipExample("truncated_evidence", message)
            stats.examples_with_truncated_evidence += 1

        stats.truncated_examples += int(dropped_sentences > 0 or dropped_paragraphs > 0)
        stats.dropped_sentences += dropped_sentences
        stats.dropped_paragraphs += dropped_paragraphs
        stats.longest_input = max(stats.longest_input, len(input_ids))
        features = {
            "id": record["id"],
            "input_ids": input_ids,
            "question_index": 1,
            "sentence_index": sentence_index,
            "paragraph_index": paragraph_index,
            "sentence_labels": sentence_labels,
            "paragraph_labels": paragraph_labels,
            "start_positions": start_positions,
            "end_positions": end_positions,
            "answer_type_labels": self.answer_types.index(answer_type) if answer_type != "none" else -100,
            "question_type": self.question_types.index(question_type),
            "num_dropped_sentences": dropped_sentences,
        }
        length = len(input_ids)
        token_piece = np.full(length, -1, dtype=np.int32)
        token_start = np.zeros(length, dtype=np.int32)
        token_end = np.zeros(length, dtype=np.int32)
        offset_rows = {piece: offsets[row_of[key]] for key, piece in piece_of.items()}
        for piece, first, count in piece_spans:
            if count:
                token_piece[first : first + count] = piece
                spans = np.asarray(offset_rows[piece][:count], dtype=np.int32).reshape(-1, 2)
                token_start[first : first + count] = spans[:, 0]
                token_end[first : first + count] = spans[:, 1]
        info = DecodeInfo(
            id=record["id"],
            pieces=pieces,
            token_piece=token_piece,
            token_start=token_start,
            token_end=token_end,
            sentence_keys=sentence_keys,
            sentence_paragraph=sentence_paragraph,
            paragraph_titles=paragraph_titles,
        )
        return features, info

    def encode_dataset(
        self, data: HotpotQAData | datasets.Dataset, description: str | None = None
    ) -> tuple[datasets.Dataset, list[DecodeInfo], EncodingStats]:
        """Encode every record; returns (features dataset, decode infos in the same order, stats). Problems raise
        :class:`HotpotQAError` naming the source and example id, or are skipped and counted (see the class doc)."""
        dataset = data.dataset if isinstance(data, HotpotQAData) else data
        source = description or (data.source if isinstance(data, HotpotQAData) else "dataset")
        stats = EncodingStats()
        rows, infos = [], []
        for record in dataset:
            try:
                features, info = self.encode(record, stats)
            except SkipExample as problem:
                stats.skipped[problem.reason] += 1
                logger.warning("%s: skipping %s", source, problem)
                continue
            except HotpotQAError as problem:
                raise HotpotQAError(f"{source}: {problem}") from None
            rows.append(features)
            infos.append(info)
        if not rows:
            raise HotpotQAError(f"{source}: every example was skipped ({dict(stats.skipped)})")
        stats.examples = len(rows)
        logger.info("%s encoded (max_length %d): %s", source, self.max_length, stats.as_dict())
        return datasets.Dataset.from_list(rows), infos, stats


# --------------------------------------------------------------------------------------------------------------------
# Collating


class HotpotQACollator:
    """Pads encoded examples into a batch for :class:`~as2hub.modeling.LongformerWithQEContrastive`.

    Adds ``attention_mask``, the ``global_attention_mask`` and ``span_mask`` (derived from the markers exactly as the
    model derives them), ``sentence_mask`` / ``paragraph_mask`` for the padded index tensors, and the labels
    (``sentence_labels`` / ``paragraph_labels`` padded with -100, ``start_positions`` / ``end_positions`` padded with
    -1) when the features have them. ``pad_to_multiple_of`` (e.g. the attention window) saves Longformer's own padding.
    """

    def __init__(self, tokenizer, pad_to_multiple_of: int | None = None, with_labels: bool = True):
        self.pad_token_id = tokenizer.pad_token_id
        self.markers = marker_token_ids(tokenizer)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.with_labels = with_labels

    @staticmethod
    def _pad(rows: list[list[int]], value: int, min_width: int = 0) -> torch.Tensor:
        width = max([len(row) for row in rows] + [min_width])
        out = torch.full((len(rows), width), value, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
        return out

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        input_ids = self._pad([f["input_ids"] for f in features], self.pad_token_id)
        attention_mask = self._pad([[1] * len(f["input_ids"]) for f in features], 0)
        if self.pad_to_multiple_of:
            extra = -input_ids.shape[1] % self.pad_to_multiple_of
            input_ids = torch.nn.functional.pad(input_ids, (0, extra), value=self.pad_token_id)
            attention_mask = torch.nn.functional.pad(attention_mask, (0, extra), value=0)
        inferred = infer_marker_inputs(input_ids, self.markers, attention_mask)
        sentence_index = self._pad([f["sentence_index"] for f in features], 0)
        paragraph_index = self._pad([f["paragraph_index"] for f in features], 0)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "global_attention_mask": inferred["global_attention_mask"],
            "span_mask": inferred["span_mask"],
            "question_index": torch.tensor([f["question_index"] for f in features], dtype=torch.long),
            "sentence_index": sentence_index,
            "sentence_mask": self._pad([[1] * len(f["sentence_index"]) for f in features], 0).bool(),
            "paragraph_index": paragraph_index,
            "paragraph_mask": self._pad([[1] * len(f["paragraph_index"]) for f in features], 0).bool(),
            "question_type": torch.tensor([f["question_type"] for f in features], dtype=torch.long),
        }
        if self.with_labels and "sentence_labels" in features[0]:
            batch["sentence_labels"] = self._pad([f["sentence_labels"] for f in features], -100)
            batch["paragraph_labels"] = self._pad([f["paragraph_labels"] for f in features], -100)
            batch["start_positions"] = self._pad([f["start_positions"] for f in features], -1, min_width=1)
            batch["end_positions"] = self._pad([f["end_positions"] for f in features], -1, min_width=1)
            batch["answer_type_labels"] = torch.tensor([f["answer_type_labels"] for f in features], dtype=torch.long)
        return batch


__all__ = [
    "DecodeInfo",
    "EncodingStats",
    "HotpotQACollator",
    "HotpotQAEncoder",
]

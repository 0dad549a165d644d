"""Data for as2hub: readers, tokenization and collators."""

from .as2_collator import ContextualAS2Collator, tokenize_as2
from .as2_data import AS2_COLUMNS, AS2_FEATURES, AS2Data, AS2DataError, load_as2_data, question_id_for, read_wikiqa
from .pretraining_collator import PretrainingCollator, default_max_length, tokenize_pretraining
from .segment_layout import SegmentLayout, longest_first_lengths, pad_batch
from .tokenizer_training import train_tokenizer

__all__ = [
    "AS2Data",
    "AS2DataError",
    "AS2_COLUMNS",
    "AS2_FEATURES",
    "ContextualAS2Collator",
    "PretrainingCollator",
    "default_max_length",
    "tokenize_pretraining",
    "SegmentLayout",
    "load_as2_data",
    "longest_first_lengths",
    "pad_batch",
    "question_id_for",
    "read_wikiqa",
    "tokenize_as2",
    "train_tokenizer",
]

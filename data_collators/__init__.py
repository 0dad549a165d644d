"""Data for as2hub: AS2 readers and collators, and the corpus -> structure objectives -> MLM pipeline of pre-training.

Three groups: ``readers/`` (files, corpora, WikiQA, HotpotQA, fact verification -> canonical rows), ``objectives/``
(the structure objectives' definitions, their examples, streamed or materialised, and the stream's exact resume) and
``collators/`` (examples -> batches, and the tokenizers). ``from as2hub.data_collators import X`` is the public path of
every name below; the modules' old paths, from before the groups, warn until 0.2.0 (``deprecated_paths.py``).
"""

import sys as _sys

from as2hub.modeling.segment_layout import SegmentLayout, longest_first_lengths, pad_batch

from . import deprecated_paths as _deprecated_paths
from .collators.as2_collator import ContextualAS2Collator, tokenize_as2
from .collators.hotpotqa_encoding import HotpotQACollator, HotpotQAEncoder
from .collators.hotpotqa_markers import add_marker_tokens
from .collators.joint_collator import JointCollator
from .collators.pretraining_collator import PretrainingCollator, default_max_length, tokenize_pretraining
from .collators.tokenizer_training import train_tokenizer
from .objectives.pretraining_examples import (
    StructurePretrainingIterableDataset,
    example_features,
    generate_pretraining_dataset,
)
from .objectives.structure_objectives import (
    IGNORE_LABEL,
    JOINT_OBJECTIVES,
    OBJECTIVES,
    PAIR_OBJECTIVES,
    TRIPLET_OBJECTIVES,
    Objective,
    derive_seed,
    generate_examples,
    get_objective,
    is_joint_objective,
    is_triplet_objective,
    resolve_objective,
)
from .readers.as2_data import (
    AS2_COLUMNS,
    AS2_FEATURES,
    AS2Data,
    AS2DataError,
    load_as2_data,
    question_id_for,
    read_wikiqa,
)
from .readers.corpus import (
    DOCUMENT_FEATURES,
    CorpusConfig,
    CorpusError,
    CorpusStats,
    EmptyCorpusError,
    default_corpus,
    documents_from_dataset,
    iter_documents,
    load_documents,
    split_document,
)
from .readers.fv_data import FEVER_LABELS, FactVerificationDataError, FVData, load_fv_data
from .readers.hotpotqa import HotpotQAData, HotpotQAError, read_hotpotqa
from .readers.joint_data import GROUPINGS, ScoreColumn, group_candidates
from .readers.qe_tasks import wikiqa_distractor
from .readers.sentence_splitter import get_sentence_tokenizer, install_punkt_tab, split_sentences

__all__ = [
    "Objective",
    "resolve_objective",
    "AS2Data",
    "AS2DataError",
    "AS2_COLUMNS",
    "AS2_FEATURES",
    "ContextualAS2Collator",
    "CorpusConfig",
    "CorpusError",
    "CorpusStats",
    "DOCUMENT_FEATURES",
    "EmptyCorpusError",
    "HotpotQACollator",
    "HotpotQAData",
    "HotpotQAEncoder",
    "HotpotQAError",
    "IGNORE_LABEL",
    "OBJECTIVES",
    "PAIR_OBJECTIVES",
    "PretrainingCollator",
    "SegmentLayout",
    "StructurePretrainingIterableDataset",
    "TRIPLET_OBJECTIVES",
    "add_marker_tokens",
    "default_corpus",
    "default_max_length",
    "derive_seed",
    "documents_from_dataset",
    "example_features",
    "generate_examples",
    "generate_pretraining_dataset",
    "get_objective",
    "get_sentence_tokenizer",
    "install_punkt_tab",
    "is_triplet_objective",
    "iter_documents",
    "load_as2_data",
    "load_documents",
    "longest_first_lengths",
    "pad_batch",
    "question_id_for",
    "read_hotpotqa",
    "read_wikiqa",
    "split_document",
    "split_sentences",
    "tokenize_as2",
    "tokenize_pretraining",
    "train_tokenizer",
    "FEVER_LABELS",
    "FVData",
    "FactVerificationDataError",
    "GROUPINGS",
    "JOINT_OBJECTIVES",
    "JointCollator",
    "ScoreColumn",
    "group_candidates",
    "is_joint_objective",
    "load_fv_data",
    "wikiqa_distractor",
]

_deprecated_paths.install(_sys.modules[__name__])

"""The tiny model and corpus-trained tokenizer that the scripts use when no checkpoint is given.

No pretrained weights are reachable offline, so the default runs build a small RoBERTa from scratch with a byte-level
BPE trained on the embedded corpus (Python's own docs); it trains in minutes on two CPU cores.
"""

import logging

from as2hub.data_collators.corpus import iter_documents
from as2hub.data_collators.tokenizer_training import train_tokenizer

logger = logging.getLogger(__name__)

TINY_ROBERTA = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 512,
    "max_position_embeddings": 514,
}


def embedded_tokenizer(style: str = "roberta", vocab_size: int = 8000):
    """A tokenizer trained on the embedded corpus (a few seconds)."""
    return train_corpus_tokenizer(iter_documents(), style, vocab_size)


def train_corpus_tokenizer(documents, style: str = "roberta", vocab_size: int = 8000):
    """A tokenizer trained on documents (rows with ``paragraphs``: lists of sentences)."""
    texts = (" ".join(" ".join(paragraph) for paragraph in doc["paragraphs"]) for doc in documents)
    logger.info("training a %s tokenizer (vocab %d) on the corpus", style, vocab_size)
    return train_tokenizer(texts, style=style, vocab_size=vocab_size)

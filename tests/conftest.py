"""Shared fixtures: tokenizers trained on Python's own docs and tiny stock checkpoints (nothing comes from the Hub)."""

from pathlib import Path
from pydoc_data.topics import topics

import pytest
import torch
from helpers import BACKBONES, TINY

from as2hub.data_collators import train_tokenizer


@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory):
    """{"roberta": byte-level BPE, "bert": WordPiece}, trained on the embedded corpus and saved."""
    texts = list(topics.values())[:40]
    out = {}
    for style in ("roberta", "bert"):
        tokenizer = train_tokenizer(texts, style=style, vocab_size=600)
        tokenizer.save_pretrained(tmp_path_factory.mktemp(f"tok-{style}"))
        out[style] = tokenizer
    return out


@pytest.fixture(scope="session")
def stock_checkpoint(tmp_path_factory, tokenizers):
    """Factory: folder with a tiny *stock* RobertaModel / ElectraModel / BertModel and its tokenizer."""
    cache = {}

    def make(backbone: str) -> Path:
        if backbone not in cache:
            style, config_class, model_class, type_rows = BACKBONES[backbone]
            tokenizer = tokenizers[style]
            extra = {"embedding_size": 16} if backbone == "electra" else {}
            config = config_class(
                vocab_size=len(tokenizer),
                type_vocab_size=type_rows,
                max_position_embeddings=136,
                pad_token_id=tokenizer.pad_token_id,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
                **TINY,
                **extra,
            )
            torch.manual_seed(0)
            folder = tmp_path_factory.mktemp(f"stock-{backbone}")
            model_class(config).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            cache[backbone] = folder
        return cache[backbone]

    return make

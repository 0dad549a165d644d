"""Constants shared by the tests (importable thanks to `pythonpath = ["tests"]` in pyproject)."""

import os
from pathlib import Path

import pytest
from transformers import BertConfig, BertModel, ElectraConfig, ElectraModel, RobertaConfig, RobertaModel

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
WIKIQA_DIR = Path(os.environ.get("AS2HUB_WIKIQA_DIR", SHARED / "data" / "wikiqa"))
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}

# backbone -> (tokenizer style, stock config class, stock model class, stock type-table size)
BACKBONES = {
    "roberta": ("roberta", RobertaConfig, RobertaModel, 1),
    "electra": ("bert", ElectraConfig, ElectraModel, 2),
    "bert": ("bert", BertConfig, BertModel, 2),
}


def needs_wikiqa():
    return pytest.mark.skipif(not WIKIQA_DIR.is_dir(), reason=f"WikiQA corpus not found at {WIKIQA_DIR}")

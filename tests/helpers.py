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


# The first lines of every fresh-process script of the tests: as2hub cannot be imported there, so what runs is what a
# user without as2hub gets (the Hub folder's own code, torch, transformers).
BLOCK_AS2HUB = """import importlib.abc, sys
class BlockAs2hub(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "as2hub":
            raise ModuleNotFoundError(f"as2hub is blocked in this process: {name}")
sys.meta_path.insert(0, BlockAs2hub())
"""

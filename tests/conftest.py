"""Shared fixtures: tokenizers trained on Python's own docs and tiny stock checkpoints (nothing comes from the Hub)."""

import os
from pathlib import Path
from pydoc_data.topics import topics

import pytest
import torch
from helpers import BACKBONES, TEST_THREADS, TINY

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


# ``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``). The tests that start a Ray
# cluster share one worker (one cluster at a time), and the longest tests are handed out first so that neither worker
# is left with a long test at the end. Plain ``pytest`` (one process) runs them in the same order.
RAY_MODULES = ("test_serve.py", "test_batch_scoring.py")
LONGEST_FIRST = (
    "test_default_run_lowers_mlm_loss_and_learns_the_sentence_task",
    "test_joint_minilm_learns_which_candidate_matches_the_question",
    "test_every_family_loads_by_repo_id_in_a_fresh_process_with_the_same_outputs",
    "test_main_job_command_runs_on_the_embedded_default",
    "test_two_gloo_processes_split_the_stream_and_only_rank_0_writes",
)


if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: one thread each (and in the processes the tests start), not two threads fighting
    # for a core that the other worker holds.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(TEST_THREADS)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in RAY_MODULES:
            item.add_marker(pytest.mark.xdist_group("ray"))
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(
        key=lambda item: rank.get(getattr(item, "originalname", item.name), len(rank))
    )  # stable: the rest keep their order

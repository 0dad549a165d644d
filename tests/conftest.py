"""Shared fixtures: fixed test tokenizers (tests/data) and tiny stock checkpoints (nothing comes from the Hub)."""

import os
from pathlib import Path

import pytest
import torch
from helpers import BACKBONES, TEST_THREADS, TINY, long_lane
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from as2hub.data_collators.collators.tokenizer_training import BERT_SPECIALS, ROBERTA_SPECIALS

# The test tokenizers, written once by ``train_tokenizer(list(pydoc_data.topics.topics.values())[:40], style,
# vocab_size=600)`` (tokenizers 0.23.3) and frozen here. Not trained per run: the WordPiece trainer breaks ties in a
# different order in each process (three runs gave three vocabularies), so the tiny models' ids, hence their scores
# and the bf16 / int8 rounding errors the backend tests bound, changed from run to run.
TOKENIZER_FILES = Path(__file__).resolve().parent / "data"


def fixed_tokenizer(style: str) -> PreTrainedTokenizerFast:
    """The frozen ``style`` tokenizer, wrapped as ``train_tokenizer`` wraps a trained one."""
    backend = Tokenizer.from_file(str(TOKENIZER_FILES / f"tokenizer-{style}.json"))
    if style == "roberta":
        specials = {**ROBERTA_SPECIALS, "bos_token": "<s>", "eos_token": "</s>"}
        input_names = ["input_ids", "attention_mask"]
    else:
        specials = BERT_SPECIALS
        input_names = ["input_ids", "token_type_ids", "attention_mask"]
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_input_names=input_names, **specials)


@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory):
    """{"roberta": byte-level BPE, "bert": WordPiece}: the fixed vocabularies of tests/data, saved."""
    out = {}
    for style in ("roberta", "bert"):
        tokenizer = fixed_tokenizer(style)
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


# ``make test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadgroup``). Under loadgroup an ungrouped
# test is a unit of its own and may go to either worker, so a module's module-scoped fixture would be built once per
# worker, and again whenever another module's test runs in between (seen: test_publish_hub's published models built 3
# times, 250 s, and test_serve's service twice, 245 s). So every module with a module-scoped fixture is one group, run
# whole by one worker; the tests that start a Ray cluster share one group (one cluster at a time). The longest units
# are handed out first (a group by its name, a test by its name), so that neither worker is left with a long one at
# the end (``--no-loadscope-reorder``: xdist would otherwise hand out the groups with the most tests first). Plain
# ``pytest`` (one process) runs them in the same order. The hook runs first (``tryfirst``): xdist turns the marks into
# groups in its own hook, and the marks must be there by then; pytest 9.2 breaks that step (pytest-xdist#1386), hence
# the test extra's pytest < 9.2, and ``tests/test_test_lanes.py`` checks that a group runs on one worker.
RAY_MODULES = ("test_serve.py", "test_batch_scoring.py")
LONGEST_FIRST = (
    "test_default_run_lowers_mlm_loss_and_learns_the_sentence_task",
    "ray",
    "test_publish_hub.py",
    "test_joint_minilm_learns_which_candidate_matches_the_question",
    "test_main_job_command_runs_on_the_embedded_default",
    "test_publish_families.py",
    "test_two_gloo_processes_split_the_stream_and_only_rank_0_writes",
)


@pytest.fixture
def data_dependent_shapes():
    """The dynamo settings ``SSPTrainer`` sets for ``--torch_compile``, for this test only (the compiled pre-training
    tests and the GPU lane's varlen tests)."""
    from as2hub.training.trainers import allow_data_dependent_shapes  # here: every pytest process loads this file

    names = ("capture_dynamic_output_shape_ops", "capture_scalar_outputs")
    saved = {name: getattr(torch._dynamo.config, name) for name in names}
    torch._dynamo.reset()
    allow_data_dependent_shapes()
    yield
    for name, value in saved.items():
        setattr(torch._dynamo.config, name, value)
    torch._dynamo.reset()


def has_module_fixture(module) -> bool:
    return any(
        getattr(getattr(value, "_fixture_function_marker", None), "scope", None) == "module"
        for value in vars(module).values()
    )


def unit_of(item) -> str | None:
    """The xdist group ``item`` runs in: "ray", its module's file name, or None (a unit of its own)."""
    if item.path.name in RAY_MODULES:
        return "ray"
    module = getattr(item, "module", None)
    return item.path.name if module is not None and has_module_fixture(module) else None


if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: one thread each (and in the processes the tests start), not two threads fighting
    # for a core that the other worker holds.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(TEST_THREADS)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the xdist_group marks into the nodeids' @group
def pytest_collection_modifyitems(config, items):
    units = {}
    for item in items:
        units[item.nodeid] = unit_of(item)
        if units[item.nodeid]:
            item.add_marker(pytest.mark.xdist_group(units[item.nodeid]))
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}

    def order(item) -> int:
        return rank.get(units[item.nodeid] or getattr(item, "originalname", item.name), len(rank))

    items.sort(key=order)  # stable: a group's tests, and the rest, keep their order


def pytest_terminal_summary(terminalreporter, config):
    """``make test`` (``-m "not long"``, what CI runs) names the long lane it left out and how to run it: nothing is
    left out silently."""
    if "not long" not in (config.getoption("markexpr") or ""):
        return
    terminalreporter.section("long lane: left out of this run")
    for nodeid in long_lane():
        terminalreporter.write_line(nodeid)
    terminalreporter.write_line(
        "`make test-long` (or `pytest -m long`) runs them: about 15 minutes on one core (AVX2 EPYC), the learning "
        "checks in seconds on a GPU"
    )

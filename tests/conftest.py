"""Shared fixtures: fixed test tokenizers (tests/data) and tiny stock checkpoints (nothing comes from the Hub)."""

import collections
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch
from helpers import BACKBONES, MARKED_LONG, TEST_THREADS, TINY, long_lane
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
# whole by one worker; the tests that start a Ray cluster share one group (one cluster at a time). The units are handed
# out longest first, by the seconds ``tests/durations.json`` measured (a group: the sum of its tests; a test it does not
# list: ``UNKNOWN_SECONDS``), so that the run ends on short tests and neither worker waits long for the other
# (``--no-loadscope-reorder``: xdist would otherwise hand out the groups with the most tests first). Before the table,
# only the seven longest were named and the rest ran in file order: a run ended with one worker idle for 66 s while
# the other still had compiled-ranker tests of 15-17 s. Plain ``pytest`` (one process) runs them in the same order.
# The hook runs first (``tryfirst``): xdist turns the marks into groups in its own hook, and the marks must be there
# by then; pytest 9.2 breaks that step (pytest-xdist#1386), hence the test extra's pytest < 9.2, and
# ``tests/test_test_lanes.py`` checks that a group runs on one worker. ``pytest --store-durations PATH`` writes a new
# table from a run (with xdist too: the controller gets every report).
RAY_MODULES = ("test_serve.py", "test_batch_scoring.py")
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_SECONDS = 0.5  # the table lists tests of 1 s and more; a new test is assumed short until measured
STORED_MIN_SECONDS = 1.0


def measured_seconds() -> dict[str, float]:
    """{node id (without xdist's ``@group``): setup + call + teardown seconds} of the committed table."""
    return json.loads(DURATIONS.read_text())["seconds"]


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
    config.stash[MARKED_LONG] = sorted(item.nodeid for item in items if item.get_closest_marker("long"))
    units = {}
    for item in items:
        units[item.nodeid] = unit_of(item)
        if units[item.nodeid]:
            item.add_marker(pytest.mark.xdist_group(units[item.nodeid]))
    items.sort(key=longest_units_first(items, units, measured_seconds()))  # stable: a group's tests keep their order


def longest_units_first(items, units: dict, seconds: dict):
    """Sort key: minus the estimated seconds of the item's unit (its group, or the test alone)."""
    totals = collections.Counter()
    for item in items:
        totals[units[item.nodeid] or item.nodeid] += seconds.get(item.nodeid, UNKNOWN_SECONDS)
    return lambda item: -totals[units[item.nodeid] or item.nodeid]


def pytest_addoption(parser):
    parser.addoption(
        "--store-durations",
        metavar="PATH",
        help="write each test's setup + call + teardown seconds (those of at least 1 s) to PATH, in the format of "
        "tests/durations.json, whose order conftest.py hands the tests out in",
    )


_run_seconds = collections.Counter()
_worker_seconds = collections.Counter()
_STARTED = pytest.StashKey[float]()
VECTOR_FLAGS = {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"}


def pytest_runtest_logreport(report):
    _run_seconds[report.nodeid.split("@")[0]] += report.duration
    node = getattr(report, "node", None)  # under xdist, on the controller: the worker that ran it
    _worker_seconds[node.gateway.id if node is not None else "main"] += report.duration


def pytest_sessionstart(session):
    session.config.stash[_STARTED] = time.monotonic()


def pytest_sessionfinish(session):
    path = session.config.getoption("store_durations")
    if not path or hasattr(session.config, "workerinput"):  # the controller (or a single process) writes it
        return
    from as2hub.inference.backends import cpu_features

    cpu = cpu_features()
    minutes, seconds = divmod(round(time.monotonic() - session.config.stash[_STARTED]), 60)
    table = {
        "measured": f"pytest {' '.join(session.config.invocation_params.args)}, "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {cpu.model} ({' '.join(sorted(cpu.flags & VECTOR_FLAGS))}), "
        f"{os.cpu_count()} cores: {minutes} min {seconds:02d} s",
        "worker_seconds": {worker: round(value) for worker, value in sorted(_worker_seconds.items())},
        "seconds": {
            node: round(value, 1) for node, value in sorted(_run_seconds.items()) if value >= STORED_MIN_SECONDS
        },
    }
    Path(path).write_text(json.dumps(table, indent=1) + "\n")


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

"""The serving layer's contracts: one backend options type, the ScoringModel protocol every backend meets, the
cascade called from JointRanker (not copied), and the commands staying thin."""

import ast
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from as2hub.inference.backends import ScoringModel
from as2hub.inference.joint_ranking import JointRanker
from as2hub.inference.ranking import Ranker
from as2hub.modeling import CONTEXTUAL_MODELS, JointMultiCandidateModel
from as2hub.serving.options import RankerOptions, ScoreConfig, ServeConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "options, expected",
    [
        (RankerOptions("m"), {"backend": "torch"}),
        (RankerOptions("m", threads=2), {"backend": "torch"}),  # torch: torch.set_num_threads instead
        (RankerOptions("m", backend="onnx", quantize="int8", threads=2), {"backend": "onnx", "quantize": "int8",
                                                                          "num_threads": 2}),
        (RankerOptions("m", backend="auto", threads=3), {"backend": "auto", "num_threads": 3}),
    ],
)  # fmt: skip
def test_one_options_type_gives_the_loaders_keyword_arguments(options, expected):
    assert options.backend_options() == expected
    for config_class in (ServeConfig, ScoreConfig):  # the service's and the batch scorer's options are the same type
        assert config_class(**vars(options)).backend_options() == expected


def test_torch_and_onnx_models_provide_what_a_scoring_backend_must(stock_checkpoint):
    source = stock_checkpoint("bert")
    model = CONTEXTUAL_MODELS["bert"][1].from_pretrained(source, contextual=False)
    assert isinstance(model, ScoringModel)
    assert Ranker(model, AutoTokenizer.from_pretrained(source)).backend == "torch"
    assert not isinstance(object(), ScoringModel)
    from as2hub.inference.onnx_runtime import OnnxRankerModel

    assert all(hasattr(OnnxRankerModel, name) for name in ("eval", "logits_to_scores", "device", "__call__"))


def test_the_cascade_is_joint_rankers_rerank(stock_checkpoint):
    """``JointRanker.rank`` with a pairwise stage is ``rerank`` on the pairwise scores: one implementation."""
    source = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    joint = JointMultiCandidateModel.from_pretrained(source, num_candidates=2, slot_length=16, head="AE_k")
    pairwise = Ranker(CONTEXTUAL_MODELS["bert"][1].from_pretrained(source, contextual=False), tokenizer)
    ranker = JointRanker(joint, tokenizer, pairwise=pairwise)
    question, texts = "who wrote hamlet?", ["Hamlet is a play.", "Shakespeare wrote it.", "It is set in Denmark."]
    scores = pairwise.score_pairs([question] * 3, texts).tolist()
    expected = [(r.index, r.score, r.stage) for r in ranker.rank(question, texts)]
    assert ranker.rerank(question, texts, scores) == expected
    source_text = (ROOT / "serving" / "scorer.py").read_text()
    assert "cascade_order" not in source_text and "top_k" not in source_text


def longest_function(path: Path) -> int:
    tree = ast.parse(path.read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return max(n.end_lineno - n.lineno + 1 for n in functions)


@pytest.mark.parametrize("command", ["serve.py", "score.py"])
def test_the_serving_commands_stay_thin(command):
    """The commands parse, check and call the serving layer: no long function defines the service or the engine."""
    assert longest_function(ROOT / "run_scripts" / command) <= 80


# --------------------------------------------------------------------------------------------------------------------
# One home per option: the commands' flags are the options' fields; ranges are checked where the options are made

BACKENDS = ("auto", "torch", "torch-bf16", "torch-int8", "onnx", "onnx-int8", "cuda-fp16", "cuda-bf16")
# (default, choices) of every flag that is an option of the ranker (both commands), written out here: a default or a
# choice written again in a command, or changed in one place only, fails
RANKER_FLAGS = {
    "backend": ("torch", BACKENDS),
    "quantize": (None, ("int8",)),
    "threads": (None, None),
    "max_length": (None, None),  # None: the model's trained max length
    "batch_size": (None, None),
    "torch_compile": (False, None),  # a switch (--torch_compile, no value)
    "unpadded": (False, None),  # a switch (--unpadded)
}
SERVE_FLAGS = {
    **RANKER_FLAGS,
    "pairwise": (None, None),
    "max_texts": (1000, None),
    "max_batch_size": (32, None),
    "batch_wait_ms": (5.0, None),
    "max_request_bytes": (2_000_000, None),
    "cascade_drop": (None, None),
    "exact_top_margin": (None, None),
    "max_ongoing_requests": (32, None),
    "max_queued_requests": (32, None),
    "retry_after_s": (1.0, None),
    "overload_status": (429, (429, 503)),
}
SCORE_FLAGS = {
    **RANKER_FLAGS,
    "question_column": ("question", None),
    "candidate_column": ("candidate", None),
    "context_column": ("context", None),
    "keep_columns": ((), None),
}


def option_actions(parser) -> dict:
    return {action.dest: action for action in parser._actions if action.option_strings}


@pytest.mark.parametrize(
    "command, options_class, expected, own",
    [
        ("serve", ServeConfig, SERVE_FLAGS, {"help", "replicas", "host", "port", "address"}),
        ("score", ScoreConfig, SCORE_FLAGS, {"help", "output_dir", "workers", "engine", "rows_per_shard", "overwrite",
                                             "address"}),
    ],
)  # fmt: skip
def test_the_commands_flags_are_the_options_fields(command, options_class, expected, own):
    """Every option flag of ``as2hub-serve`` / ``as2hub-score`` is a field of its options class, with the field's
    default and choices (``--backend``: the backend names, so a typo fails while parsing); the other flags are the
    command's own (where and how to run); no command writes an option's flag by hand."""
    from dataclasses import MISSING, fields

    from as2hub.run_scripts import score, serve

    actions = option_actions({"serve": serve, "score": score}[command].build_parser())
    assert set(actions) == set(expected) | own
    got = {name: (actions[name].default, tuple(actions[name].choices) if actions[name].choices else None)
           for name in expected}  # fmt: skip
    assert got == expected
    by_field = {item.name: item for item in fields(options_class)}
    for name, (default, _) in expected.items():
        assert by_field[name].default == default and by_field[name].default is not MISSING
    source = (ROOT / "run_scripts" / f"{command}.py").read_text()
    for name in expected:
        assert f'"--{name}"' not in source, f"{command}.py writes --{name} by hand: it is {options_class.__name__}'s"
    assert not re.search(r"(?<![-\w])256\b", source), f"{command}.py writes a max length (256) of its own"


PACKAGE_FOLDERS = (
    "data_collators",
    "hub_cards",
    "inference",
    "metrics",
    "modeling",
    "run_scripts",
    "serving",
    "training",
)


def test_the_default_max_length_is_written_once():
    """256 tokens, the ranking inputs' default max length, is ``modeling/folders.py``'s ``DEFAULT_MAX_LENGTH`` only
    (a pre-training objective's own ``default_max_length`` is another fact, of its definition)."""
    assigned = re.compile(r"(\w*max_length)\s*(?::[^=\n]*)?=\s*256\b|DEFAULT_MAX_LENGTH\s*=")
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for folder in PACKAGE_FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for match in assigned.finditer(path.read_text())
        if match.group(1) != "default_max_length"
    ]
    assert found == ["modeling/folders.py: DEFAULT_MAX_LENGTH ="]


@pytest.mark.parametrize(
    "options_class, values, message",
    [
        (RankerOptions, {"backend": "troch"}, "--backend must be one of auto, torch,"),
        (RankerOptions, {"quantize": "int4"}, "--quantize must be one of int8"),
        (RankerOptions, {"threads": 0}, "--threads must be at least 1, got 0"),
        (RankerOptions, {"max_length": 0}, "--max_length must be at least 1, got 0"),
        (RankerOptions, {"backend": "onnx-int8", "torch_compile": True}, "--torch_compile applies to the torch backends"),
        (RankerOptions, {"backend": "onnx", "unpadded": True}, "--unpadded applies to the torch backends, not --backend onnx"),
        (ScoreConfig, {"batch_size": 0}, "--batch_size must be at least 1, got 0"),
        (ServeConfig, {"cascade_drop": 1.0}, "--cascade_drop is the fraction of candidates dropped at each head, in [0, 1)"),
        (ServeConfig, {"cascade_drop": -0.1}, "in [0, 1); got -0.1"),
        (ServeConfig, {"max_texts": 0}, "--max_texts must be at least 1, got 0"),
        (ServeConfig, {"max_batch_size": 0}, "--max_batch_size must be at least 1, got 0"),
        (ServeConfig, {"batch_wait_ms": -1.0}, "--batch_wait_ms must be at least 0, got -1.0"),
        (ServeConfig, {"overload_status": 500}, "--overload_status must be 429 or 503, got 500"),
        (ServeConfig, {"max_queued_requests": 0}, "or -1 (no limit), got 0"),
        (ServeConfig, {"retry_after_s": -1.0}, ">= 0, got -1.0"),
        (ServeConfig, {"exact_top_margin": -0.5}, "--exact_top_margin must be a number of logits >= 0"),
        (ServeConfig, {"exact_top_margin": float("nan")}, "(0.025 for torch-int8 on MiniLM, ExactTop says why), got nan"),
        (ScoreConfig, {"keep_columns": ("qid", "score")}, "--keep_columns score: the output has its own 'score'"),
    ],
)  # fmt: skip
def test_each_options_range_is_checked_where_the_options_are_made(options_class, values, message):
    from as2hub.modeling.errors import ArgumentError

    with pytest.raises(ArgumentError, match=re.escape(message)):
        options_class(model="m", **values)
    assert ServeConfig(model="m", cascade_drop=0.0, max_queued_requests=-1).cascade_drop == 0.0


def test_argument_error_has_one_class_in_the_lowest_layer():
    import as2hub.run_scripts.arguments
    import as2hub.training
    import as2hub.training.checks
    from as2hub.modeling.errors import ArgumentError

    assert as2hub.training.ArgumentError is ArgumentError
    assert as2hub.training.checks.ArgumentError is ArgumentError
    assert as2hub.run_scripts.arguments.ArgumentError is ArgumentError
    for path in (ROOT / "serving").glob("*.py"):  # the serving layer no longer imports the training layer
        assert "as2hub.training" not in path.read_text(), path.name


def test_a_folders_trained_max_length_is_the_ranking_default(stock_checkpoint, tmp_path):
    """``config.as2hub_max_length`` (written by ``run_as2.py``) is the max length of ranking the folder when none is
    given: Ranker, the service's and the batch scorer's options; without it, 256; a given one wins."""
    from as2hub.modeling.folders import record_max_length

    source = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = CONTEXTUAL_MODELS["bert"][1].from_pretrained(source, contextual=False)
    plain, trained = tmp_path / "plain", tmp_path / "trained"
    model.save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    record_max_length(model.config, 40)
    model.save_pretrained(trained)
    tokenizer.save_pretrained(trained)
    assert Ranker.from_pretrained(trained).max_length == 40
    assert Ranker.from_pretrained(plain).max_length == 256
    assert Ranker.from_pretrained(trained, max_length=24).max_length == 24
    for options_class in (ServeConfig, ScoreConfig):
        assert options_class(model=str(trained)).load_ranker().max_length == 40
        assert options_class(model=str(trained), max_length=24).load_ranker().max_length == 24
        assert options_class(model=str(plain)).load_ranker().max_length == 256


@pytest.mark.parametrize("switch", ["torch_compile", "unpadded"])
def test_ranker_switches_are_flags_that_reach_the_ranker(monkeypatch, switch):
    """``--torch_compile`` and ``--unpadded`` are flags without a value (off unless given) and the ranker is loaded
    with them."""
    import argparse

    from as2hub.inference.ranking import Ranker
    from as2hub.serving.options import add_flags, from_flags

    parser = argparse.ArgumentParser()
    add_flags(parser, ServeConfig)
    assert getattr(from_flags(ServeConfig, parser.parse_args([]), model="m"), switch) is False
    config = from_flags(ServeConfig, parser.parse_args([f"--{switch}", "--backend", "torch-bf16"]), model="m")
    calls = []
    monkeypatch.setattr(Ranker, "from_pretrained", classmethod(lambda cls, path, **kw: calls.append((path, kw))))
    config.load_ranker()
    assert calls == [("m", {"max_length": None, "batch_size": None, "backend": "torch-bf16", switch: True})]
    RankerOptions("m").load_ranker()
    assert switch not in calls[-1][1]


def test_exact_top_margin_reaches_a_pairwise_ranker_and_is_refused_for_a_joint_model(monkeypatch):
    """``--exact_top_margin`` loads the service's ranker with ``exact_top_margin`` (the rerank answers come from
    ``Ranker.rank_many``, where it acts); a joint model has no such option: a clear error, not an ignored flag."""
    from as2hub.inference.ranking import Ranker
    from as2hub.modeling.errors import ArgumentError
    from as2hub.serving import scorer

    calls = []

    def fake(cls, path, **kw):
        calls.append((path, kw))
        return type("R", (), {"contextual": False})()

    monkeypatch.setattr(Ranker, "from_pretrained", classmethod(fake))
    monkeypatch.setattr(scorer, "is_joint_folder", lambda path: False)
    monkeypatch.setattr(scorer.RerankScorer, "_no_cascade", lambda self: None)  # the fake ranker has no model
    scorer.RerankScorer(ServeConfig(model="m", backend="torch-int8", exact_top_margin=0.025))
    assert calls[-1] == ("m", {"max_length": None, "batch_size": None, "backend": "torch-int8",
                               "exact_top_margin": 0.025})  # fmt: skip
    scorer.RerankScorer(ServeConfig(model="m"))
    assert calls[-1][1]["exact_top_margin"] is None  # off: Ranker.from_pretrained's own default
    monkeypatch.setattr(scorer, "is_joint_folder", lambda path: True)
    with pytest.raises(ArgumentError, match="--exact_top_margin applies to pairwise and contextual rankers; m is a "):
        scorer.RerankScorer(ServeConfig(model="m", exact_top_margin=0.1))


def test_a_retry_after_a_replica_death_that_meets_full_replicas_waits_their_retry_after_once():
    """The ingress's retry (``Reranker.call``) where the surviving replicas are full for a moment: sent once more after
    their Retry-After, then 503; a 503 for no replica left is not waited on."""
    import asyncio
    import time
    from types import SimpleNamespace

    from ray.exceptions import ActorDiedError

    from as2hub.serving.http import Reranker, Unavailable

    def ingress(outcomes):
        calls = []

        async def call_once(method, args):
            calls.append(time.monotonic())
            outcome = outcomes[len(calls) - 1]
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        reranker = Reranker.func_or_class.__new__(Reranker.func_or_class)
        reranker.retried = dict.fromkeys(("retried", "recovered", "unavailable", "overloaded"), 0)
        reranker.config, reranker.call_once = SimpleNamespace(retry_after_s=3.0), call_once
        return reranker, calls

    full = Unavailable(503, "overloaded: queue full", 0.2, "Overloaded")  # Retry-After: 1 (whole seconds, rounded up)
    reranker, calls = ingress([ActorDiedError(), full, "scores"])
    assert asyncio.run(reranker.call("rank", "query")) == "scores"
    assert len(calls) == 3 and calls[2] - calls[1] >= 0.9
    assert reranker.retried == {"retried": 1, "recovered": 1, "unavailable": 0, "overloaded": 0}
    reranker, calls = ingress([ActorDiedError(), full, full])
    with pytest.raises(Unavailable, match="its scoring replica died and no other could take the request") as refused:
        asyncio.run(reranker.call("rank", "query"))
    assert refused.value.status_code == 503 and refused.value.headers["Retry-After"] == "3" and len(calls) == 3
    reranker, calls = ingress([ActorDiedError(), Unavailable(503, "no scoring replica: gone", 3.0)])
    with pytest.raises(Unavailable, match="no scoring replica: gone"):
        asyncio.run(reranker.call("rank", "query"))
    assert len(calls) == 2  # no replica left: nothing to wait for


def test_the_ingress_imports_no_torch_transformers_or_model_code():
    """The ingress replica (``serving/http.py``'s ``Reranker``, no model) is a process of its own, and Ray imports
    that module to start it: it must load without torch, Transformers or the ranker layers. Measured on the AVX2 EPYC
    (2026-12-02): 2.7 s and 181 MB, against 10.4 s and 502 MB while it imported them. What it exchanges with the
    scoring replicas is ``serving/messages.py``'s."""
    import subprocess
    import sys

    pytest.importorskip("ray.serve", reason='the service needs the serve extra: pip install "as2hub[serve]"')
    heavy = ("torch", "transformers", "as2hub.modeling", "as2hub.inference.ranking", "as2hub.serving.scorer")
    code = f"import sys, as2hub.serving.http; print([name for name in {heavy!r} if name in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"

"""The serving layer's contracts: one backend options type, the ScoringModel protocol every backend meets, the
cascade called from JointRanker (not copied), and the commands staying thin."""

import ast
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

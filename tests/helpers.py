"""Constants and small helpers shared by the tests (importable thanks to `pythonpath = ["tests"]` in pyproject)."""

import ast
import contextlib
import importlib.util
import logging
import os
from pathlib import Path

import pytest
import torch
import transformers
from transformers import BertConfig, BertModel, ElectraConfig, ElectraModel, RobertaConfig, RobertaModel

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
WIKIQA_DIR = Path(os.environ.get("AS2HUB_WIKIQA_DIR", SHARED / "data" / "wikiqa"))
# torch threads for a test that trains for minutes: both cores in one process, one per worker under pytest-xdist
# (``make test`` runs two workers).
TEST_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}

# backbone -> (tokenizer style, stock config class, stock model class, stock type-table size)
BACKBONES = {
    "roberta": ("roberta", RobertaConfig, RobertaModel, 1),
    "electra": ("bert", ElectraConfig, ElectraModel, 2),
    "bert": ("bert", BertConfig, BertModel, 2),
}


TESTS = Path(__file__).resolve().parent


# The node ids the session collected with the ``long`` mark, before ``-m``/``-k`` deselect (``conftest.py`` stores them
# for ``test_test_lanes.py``; here, not in conftest.py, which a test importing it would load a second time).
MARKED_LONG = pytest.StashKey[list]()


def long_lane() -> list[str]:
    """The node ids (``tests/<file>::<test>``) of the tests marked ``@pytest.mark.long``, read from the source by
    ``ast`` (the xdist controller that prints the summary collects nothing itself)."""

    def is_long(decorator) -> bool:
        return ast.unparse(decorator) in ("pytest.mark.long", "mark.long")

    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(is_long(d) for d in node.decorator_list):
                found.append(f"tests/{path.name}::{node.name}")
    return found


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

HAS_ONNX = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason='the onnx extra is not installed: pip install "as2hub[onnx]"')


def spread(model, score, seed):
    """Move every weight off its init and rescale the head's last linear layer so that the logits ``score(model)``
    produces spread around 0 (scores around 0.5): a test where every score is 0.99 could not fail. ``score`` may
    produce no logits (e.g. a head the caller does not score): then only the weights move."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        last = [module for module in model.classifier.modules() if isinstance(module, torch.nn.Linear)][-1]
        captured = []
        handle = last.register_forward_hook(lambda module, args, output: captured.append(output.reshape(-1)))
        score(model)
        handle.remove()
        if captured:
            logits = torch.cat(captured)
            scale = 2.0 / logits.std()
            last.weight.mul_(scale)
            last.bias.mul_(scale).sub_(logits.mean() * scale)
    return model


def redraw_weights(model, std: float, seed: int) -> None:
    """Every weight matrix drawn anew from normal(0, ``std``), every other parameter but the layer norms zeroed: scores
    that depend on the input as a trained model's do (``test_backends.spread_tiny_ranker``)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.ndim == 2:
                parameter.normal_(0.0, std)
            elif "LayerNorm" not in name:
                parameter.zero_()


@contextlib.contextmanager
def transformers_messages():
    """The messages transformers logs inside the block at WARNING and above (its verbosity set to WARNING meanwhile),
    whatever stream its own handler writes to (pytest's capture does not see that stream reliably)."""
    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())
    library = transformers.logging.get_logger("transformers")
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    library.addHandler(handler)
    try:
        yield messages
    finally:
        library.removeHandler(handler)
        transformers.logging.set_verbosity(previous)

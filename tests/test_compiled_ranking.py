"""``Ranker`` on a ``torch.compile``'d model (``torch_compile=True``, :mod:`as2hub.inference.compiled`).

What is checked, and against what:
- the graphs are built once: after the warm-up, questions of other sizes and lengths, with and without the cascade,
  compile nothing more (dynamo's ``CompileCounter`` counts the frames it compiles; the first-token last layer installs
  the same patched forward on every call, else every call would recompile);
- the compiled passes give the eager model's scores: exactly where dynamo's graph runs the same operators
  (``CompileCounter`` runs them eagerly), within float rounding with inductor's fused kernels (the bound below, fp32);
- the cascade's layers (which head scored each candidate) are the eager cascade's;
- the errors: an ONNX backend refuses ``torch_compile``, a non-torch model is refused, a compiler that fails at the
  warm-up is reported as such.
"""

import pytest
import torch
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model
from torch._dynamo.testing import CompileCounter
from torch._inductor.utils import run_and_get_code

from as2hub.inference.compiled import CompiledRankerModel, TorchCompileError
from as2hub.inference.ranking import Ranker
from as2hub.modeling.first_token import first_token_last_layer, last_bert_layer

# Questions of other sizes and lengths than the warm-up's (1 and 2 candidates): 10, 3 and 1 candidates.
QUESTIONS = [
    (QUESTION, CANDIDATES),
    ("what is a tuple?", CANDIDATES[5:8]),
    ("and the print function, what does it write to, and in which encoding by default?", CANDIDATES[-1:]),
]

# Inductor's fused fp32 kernels against eager PyTorch on the tiny models (head logits rescaled to std 2, which
# amplifies rounding): scores (probabilities) within this. Measured at most 2.1e-5 on the AMX Xeon (2026-11-28); a
# wrong mask or a missing layer moves scores by 1e-2 or more.
INDUCTOR_FP32_ABS = 1e-4


def rank_all(ranker, drop=None, contextual=False):
    out = []
    for question, candidates in QUESTIONS:
        contexts = CONTEXTS[: len(candidates)] if contextual else None
        out.append([(c.index, c.score, c.layer) for c in ranker.rank(question, candidates, contexts, drop)])
    return out


def side_by_side(ranker, eager, drops=(None,), contextual=False):
    """Per drop and question, in candidate order: (the ranker's (index, layer) pairs, eager's, the ranker's scores,
    eager's scores)."""
    for drop in drops:
        for got, want in zip(rank_all(ranker, drop, contextual), rank_all(eager, drop, contextual)):
            got, want = sorted(got), sorted(want)
            yield (
                [(i, layer) for i, _, layer in got],
                [(i, layer) for i, _, layer in want],
                torch.tensor([score for _, score, _ in got]),
                torch.tensor([score for _, score, _ in want]),
            )


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


HAS_CUDA = torch.cuda.is_available()
NO_CUDA = "GPU lane: needs CUDA (torch.cuda.is_available() is False on this machine); run `pytest -m gpu` there"


def assert_compiles_once_and_scores_as_eager(model, tokenizer, **ranker_options):
    """Dynamo's graphs (``CompileCounter``: the eager operators, so the same scores) after the warm-up: questions of
    other sizes and lengths, with and without the cascade, build no graph and score as the eager ranker does."""
    eager = Ranker(model, tokenizer, **ranker_options)
    counter = CompileCounter()
    compiled = CompiledRankerModel(model, backend=counter)
    ranker = Ranker(compiled, tokenizer, **ranker_options)
    compiled.warm_up(ranker)
    frames = counter.frame_count
    assert frames >= 1
    for got_layers, want_layers, got, want in side_by_side(ranker, eager, (None, 0.5, 0.3)):
        assert got_layers == want_layers
        assert torch.allclose(got, want, atol=1e-6)
    assert counter.frame_count == frames, "a question of another size or length compiled again"


@pytest.mark.parametrize("backbone, dtype", [("roberta", "fp32"), ("bert", "bf16")])
def test_compiled_ranker_compiles_once_and_scores_as_eager(tokenizers, backbone, dtype):
    """fp32 and the ``torch-bf16`` backend's bf16 model (a BERT fp32 ranker's cascade: the two-ranker test below)."""
    model, tokenizer = cascade_model(tokenizers, backbone, contextual=False)
    assert_compiles_once_and_scores_as_eager(
        model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]), tokenizer
    )


def test_first_token_block_installs_the_same_forward_each_time(tokenizers):
    model, _ = cascade_model(tokenizers, "bert", contextual=False)
    layer = last_bert_layer(model)
    with first_token_last_layer(model):
        first = layer.forward
    assert "forward" not in layer.__dict__  # the block restores the class's forward
    with first_token_last_layer(model):
        assert layer.forward is first


@pytest.mark.slow
def test_from_pretrained_torch_compile_inductor(tokenizers, tmp_path):
    """The checkpoint path: a saved contextual folder, ``torch_compile=True``, inductor (C++ kernels: about a minute;
    the cascade's compiled stages are checked above with dynamo's graphs, each inductor graph adds to the time); the
    weights frozen in the generated code. Two layers: inductor's time grows with the graph (the four-layer model took
    65 s of CI's 2 cores, 2026-12-01)."""
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=True, layers=(), depth=2)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    eager = Ranker.from_pretrained(str(tmp_path), backend="torch")
    ranker, codes = run_and_get_code(Ranker.from_pretrained, str(tmp_path), backend="torch", torch_compile=True)
    assert isinstance(ranker.model, CompiledRankerModel) and ranker.backend == "torch"
    # frozen weights: the graphs read them as constants (prepacked once), not as inputs reordered on every call
    assert codes and all("_frozen_param" in code for code in codes), [code[:300] for code in codes]
    for got_layers, want_layers, got, want in side_by_side(ranker, eager, contextual=True):
        assert got_layers == want_layers
        assert (got - want).abs().max() <= INDUCTOR_FP32_ABS


def test_onnx_backend_refuses_torch_compile(tmp_path):
    with pytest.raises(ValueError, match="torch_compile=True applies to the torch backends"):
        Ranker.from_pretrained(str(tmp_path), backend="onnx-int8", torch_compile=True)


def test_compiled_model_needs_a_torch_model():
    with pytest.raises(TypeError, match="torch_compile needs a torch model"):
        CompiledRankerModel(object())


def test_a_compiler_that_fails_is_reported(tokenizers):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)

    def broken(graph, example_inputs):
        raise RuntimeError("no compiler here")

    compiled = CompiledRankerModel(model, backend=broken)
    with pytest.raises(TorchCompileError, match="C\\+\\+ compiler"):
        compiled.warm_up(Ranker(compiled, tokenizer))


def test_auto_backend_with_torch_compile_compiles_the_torch_pick(tokenizers, tmp_path, monkeypatch):
    """``backend="auto"`` on a folder without an ONNX export picks a torch backend, which ``torch_compile`` compiles
    (here with dynamo's eager backend: the wiring, not inductor, is under test)."""
    from functools import partialmethod

    monkeypatch.setattr(CompiledRankerModel, "__init__", partialmethod(CompiledRankerModel.__init__, backend="eager"))
    model, tokenizer = cascade_model(tokenizers, "roberta", contextual=False, layers=())
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ranker = Ranker.from_pretrained(str(tmp_path), backend="auto", torch_compile=True)
    assert isinstance(ranker.model, CompiledRankerModel) and ranker.backend.startswith("torch")
    eager = Ranker(ranker.model.module, tokenizer)
    for _, _, got, want in side_by_side(ranker, eager):
        assert torch.allclose(got, want, atol=1e-6)


# cuda-fp16 compiled by inductor (triton kernels) against the eager cuda-fp16 model: scores within this (fp16 rounds
# each fused kernel's output; a wrong mask or layer moves scores by 1e-2 or more).
CUDA_FP16_ABS = 2e-3


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_compiled_ranker_on_cuda_fp16(tokenizers):
    """The GPU path: ``cuda-fp16`` compiled by inductor, with the cascade; no graph built after the warm-up."""
    import torch._dynamo.utils as dynamo_utils

    model, tokenizer = cascade_model(tokenizers, "bert", contextual=False)
    model = model.to(device="cuda", dtype=torch.float16)
    eager = Ranker(model, tokenizer)
    compiled = CompiledRankerModel(model)
    ranker = Ranker(compiled, tokenizer)
    compiled.warm_up(ranker)
    graphs = dynamo_utils.counters["stats"]["unique_graphs"]
    for got_layers, want_layers, got, want in side_by_side(ranker, eager, (None, 0.5)):
        assert got_layers == want_layers
        assert (got - want).abs().max() <= CUDA_FP16_ABS
    assert dynamo_utils.counters["stats"]["unique_graphs"] == graphs


@pytest.mark.parametrize("unpadded", [pytest.param(False, marks=pytest.mark.slow), True])
def test_each_compiled_ranker_in_a_process_builds_its_own_graphs_without_breaks(tokenizers, unpadded):
    """Two compiled rankers (two models' frozen weights) in one process: each builds as many graphs as the first, all
    in its warm-up (questions of other sizes and lengths, with and without the cascade, build nothing more), none runs
    eagerly because another used up dynamo's recompile budget (kept per code object: before each ranker had wrappers
    of its own, three unpadded rankers built 10, 6 and 2 graphs), and no stage breaks its graph (the final head's
    outputs were a ``SimpleNamespace``, which dynamo cannot build: a break in every final stage). The padded cascade
    (slow: about 40 s) the same. Two-layer models with one cascade head keep it short."""
    from torch._dynamo.utils import counters

    counters.clear()
    frames = []
    for seed in range(2):
        model, tokenizer = cascade_model(tokenizers, "bert", contextual=False, layers=(1,), depth=2, seed=seed)
        eager = Ranker(model, tokenizer, unpadded=unpadded)
        counter = CompileCounter()
        compiled = CompiledRankerModel(model, backend=counter)
        ranker = Ranker(compiled, tokenizer, unpadded=unpadded)
        compiled.warm_up(ranker)
        frames.append(counter.frame_count)
        for got_layers, want_layers, got, want in side_by_side(ranker, eager, (None, 0.5, 0.3)):
            assert got_layers == want_layers
            assert torch.allclose(got, want, atol=1e-6)
        assert counter.frame_count == frames[-1], "a question of another size or length compiled again"
    assert frames[0] >= 4 and frames == [frames[0]] * 2, frames
    assert not counters["graph_break"], dict(counters["graph_break"])

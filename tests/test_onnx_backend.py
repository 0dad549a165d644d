"""ONNX Runtime backend: export -> load -> the torch scores, int8, a graph that loads with onnxruntime alone, bad input."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BACKBONES, BLOCK_AS2HUB, needs_onnx
from transformers import AutoTokenizer

from as2hub.inference.onnx_export import export_onnx
from as2hub.inference.onnx_runtime import OnnxRankerModel, StaleOnnxExportError
from as2hub.inference.ranking import Ranker, context_text_pair
from as2hub.modeling import CONTEXTUAL_MODELS
from as2hub.modeling.folders import GRAPH_FILES, NotAnAS2hubRankerError
from as2hub.modeling.scores import probability_of_correct
from as2hub.run_scripts import export_onnx as export_script

# Largest |int8 score - fp32 score| on the tiny spread models of this file (per-token scales, 7-bit weights). Measured
# 2026-11-28 on the AMD EPYC (AVX2): at most 0.0179 over the 6 models of the test below (score spreads 0.087-0.243).
# With 7-bit weights the integer sums cannot saturate, so VNNI and AMX CPUs compute the same integers: one bound for
# every CPU kind. (8-bit weights: 0.0099 on the AMX Xeon, 2026-11-26, but 0.030-0.072 on the AVX2 EPYC, which saturates.)
INT8_TOLERANCE = 0.025
QUESTION = "What is a generator?"
CANDIDATES = [
    "A function that yields values lazily, one at a time.",
    "It is a kind of loop.",
    "Generators are iterators built by yield.",
    "No.",
    "The module reference describes the import statement and how modules are found.",
]
CONTEXTS = [
    "Iterators are objects. They have a next method.",
    "Loops repeat a block of code.",
    "",
    "Prose around it.",
    "Modules are objects. Packages are modules with a path.",
]


def perturbed(model, tokenizer, seed=1):
    """Move every weight off its init (the context's token-type row most), then set the head's scale and offset so
    the scores of this file's examples spread around 0.5: a test where every score is 0.99 could not fail."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
        model.base_model.embeddings.token_type_embeddings.weight[-1].add_(0.5)
        head = model.classifier if isinstance(model.classifier, torch.nn.Linear) else model.classifier.out_proj
        captured = []
        handle = head.register_forward_hook(lambda module, args, output: captured.append(output.view(-1)))
        score_all(Ranker(model, tokenizer))
        handle.remove()
        logits = torch.cat(captured)
        scale = 2.0 / logits.std()
        head.weight.mul_(scale)
        head.bias.mul_(scale).sub_(logits.mean() * scale)
    return model


@pytest.fixture(scope="module")
def ranker_folder(stock_checkpoint, tmp_path_factory):
    """Factory: (backbone, contextual) -> a saved as2hub ranker folder (tiny, perturbed), exported once."""
    cache = {}

    def make(backbone: str, contextual: bool = True, export: str | None = "int8"):
        key = (backbone, contextual, export)
        if key not in cache:
            source = stock_checkpoint(backbone)
            tokenizer = AutoTokenizer.from_pretrained(source)
            torch.manual_seed(0)  # the grown token-type row: the same model whatever ran before
            model = CONTEXTUAL_MODELS[backbone][1].from_pretrained(
                source, contextual=contextual, sep_token_id=tokenizer.sep_token_id
            )
            folder = tmp_path_factory.mktemp(f"{backbone}-{'ctx' if contextual else 'pair'}")
            perturbed(model, tokenizer).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            if export:
                export_onnx(folder, quantize=None if export == "fp32" else export)
            cache[key] = folder
        return cache[key]

    return make


def score_all(ranker, contexts=CONTEXTS):
    return ranker.score_pairs([QUESTION] * len(CANDIDATES), CANDIDATES, contexts if ranker.contextual else None)


@needs_onnx
@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_onnx_scores_equal_torch(ranker_folder, backbone, contextual):
    folder = ranker_folder(backbone, contextual)
    torch_ranker = Ranker.from_pretrained(folder, batch_size=2)
    onnx_ranker = Ranker.from_pretrained(folder, backend="onnx", batch_size=2, num_threads=1)
    int8_ranker = Ranker.from_pretrained(folder, backend="onnx", quantize="int8", batch_size=2)
    assert onnx_ranker.model.session.get_session_options().intra_op_num_threads == 1
    assert onnx_ranker.pad_to_multiple_of is None and torch_ranker.pad_to_multiple_of == 8
    expected = score_all(torch_ranker)
    assert expected.max() - expected.min() > 0.2, f"degenerate check: the scores do not spread: {expected}"
    assert (score_all(onnx_ranker) - expected).abs().max().item() <= 1e-4
    int8 = score_all(int8_ranker)  # how close int8 is, on a random tiny model, is tested below
    assert int8.shape == expected.shape and not torch.equal(int8, expected)
    if contextual:  # the context changes the scores, in the graph as in torch
        without = score_all(onnx_ranker, contexts=[""] * len(CANDIDATES))
        assert (without - score_all(onnx_ranker)).abs().max().item() > 1e-3


@needs_onnx
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_graph_keeps_the_segment_logic_for_tokenizer_inputs(ranker_folder, backbone):
    """Pair encodings from the tokenizer (BERT-style: ids 0/1; RoBERTa-style: none, so zeros) score as in torch,
    as CrossEncoder and pipelines send them: the context still gets segment 2."""
    folder = ranker_folder(backbone, True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    torch_model = Ranker.from_pretrained(folder).model
    session = OnnxRankerModel.from_pretrained(folder).session
    pairs = [context_text_pair(tokenizer, s, c) if c else s for s, c in zip(CANDIDATES, CONTEXTS)]
    batch = tokenizer([QUESTION] * len(pairs), pairs, padding=True, return_tensors="pt")
    assert ("token_type_ids" in batch) == (backbone != "roberta")
    with torch.no_grad():
        expected = torch_model(**batch).logits.numpy()
    feed = {key: value.numpy() for key, value in batch.items()}
    if backbone == "roberta":
        feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
    else:
        assert feed["token_type_ids"].max() == 1  # tokenizer pair ids, not the three segments
    got = probability_of_correct(session.run(None, feed)[0], torch_model.config)
    torch.testing.assert_close(got, probability_of_correct(expected, torch_model.config), atol=1e-4, rtol=0)


@needs_onnx
@pytest.mark.parametrize("contextual", [True, False], ids=["contextual", "pairwise"])
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_int8_graph_is_quantized_and_its_scores_stay_close(stock_checkpoint, tmp_path, backbone, contextual):
    """On a tiny model whose weights (std 0.2) make its scores spread over 0.08-0.24 on 20 pairs, the int8 scores stay
    within INT8_TOLERANCE of fp32 and within 20% of the spread (measured 2026-11-28, AMD EPYC AVX2, 7-bit weights:
    at most 0.0179, 4-11% of the spread): a graph that scored a constant, or the wrong rows, would be off by the spread.
    The WikiQA MAP change of a fine-tuned MiniLM is measured by the benchmark (inference/BACKENDS.md)."""
    from test_backends import spread_tiny_ranker

    folder = spread_tiny_ranker(stock_checkpoint, tmp_path, backbone, contextual, std=0.2)
    questions = [QUESTION, "Who wrote the import docs?", "what is a loop", "Where are modules found?"]
    q = [question for question in questions for _ in CANDIDATES]
    c = CANDIDATES * len(questions)
    x = CONTEXTS * len(questions) if contextual else None
    expected = Ranker.from_pretrained(folder).score_pairs(q, c, x)
    spread = (expected.max() - expected.min()).item()
    assert spread > 0.05, f"degenerate check: the scores do not spread ({spread:.4f})"
    got = Ranker.from_pretrained(folder, backend="onnx-int8", num_threads=1).score_pairs(q, c, x)
    error = (got - expected).abs().max().item()
    assert 0 < error <= min(INT8_TOLERANCE, 0.2 * spread), (error, spread)


@needs_onnx
@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_int8_graph_quantizes_every_weight_matmul_with_per_token_scales(ranker_folder, backbone):
    """Every weight MatMul is int8 (``MatMulIntegerToFloat`` after the per-token quantization); no activation is
    quantized with one scale for the whole tensor (``DynamicQuantizeLinear``: one scale per batch)."""
    import onnx

    folder = ranker_folder(backbone, True)
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    graph = onnx.load(str(folder / "onnx" / GRAPH_FILES["int8"])).graph
    weights = {initializer.name for initializer in graph.initializer}
    operators = [node.op_type for node in graph.node]
    assert [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in weights] == []
    assert "DynamicQuantizeLinear" not in operators and "DynamicQuantizeMatMul" not in operators
    # per layer: query, key, value, attention output, feed-forward in and out; then the head's dense and out_proj;
    # ELECTRA also projects its 16-wide embeddings to the hidden size
    assert operators.count("MatMulIntegerToFloat") == 6 * layers + 2 + (backbone == "electra")
    reduces = [n for n in graph.node if n.op_type == "ReduceMax" and n.name.endswith("_per_token/ReduceMax")]
    assert len(reduces) == operators.count("QuantizeLinear") >= 2 * layers
    assert all(list(next(a for a in n.attribute if a.name == "axes").ints) == [-1] for n in reduces)


@needs_onnx
def test_an_int8_graph_with_one_scale_per_batch_is_stale(ranker_folder, tmp_path):
    """An int8 graph exported by an earlier as2hub (one activation scale per batch) is refused with the command that
    rebuilds it, not used: its scores would depend on the other pairs of the batch."""
    import shutil

    import onnx

    folder = Path(shutil.copytree(ranker_folder("bert", False), tmp_path / "ranker"))
    path = folder / "onnx" / GRAPH_FILES["int8"]
    graph = onnx.load(str(path))
    for prop in graph.metadata_props:
        if prop.key == "as2hub.quantization":
            prop.value = "int8 dynamic, per-channel QInt8 weights; attention and feed-forward output projections fp32"
    onnx.save(graph, str(path))
    with pytest.raises(StaleOnnxExportError, match=r"one activation scale per batch.*--quantize int8"):
        Ranker.from_pretrained(folder, backend="onnx-int8")


@needs_onnx
def test_session_options_and_the_command_line_entry_points(ranker_folder):
    import importlib.metadata

    import onnxruntime

    folder = ranker_folder("roberta", False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    model = OnnxRankerModel(
        folder / "onnx" / "model.onnx", Ranker.from_pretrained(folder).model.config, session_options=options
    )
    ranker = Ranker(model, AutoTokenizer.from_pretrained(folder))
    torch.testing.assert_close(score_all(ranker), score_all(Ranker.from_pretrained(folder)), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="not both"):
        OnnxRankerModel(folder / "onnx" / "model.onnx", model.config, num_threads=2, session_options=options)
    scripts = {entry.name: entry.value for entry in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["as2hub-export-onnx"] == "as2hub.run_scripts.export_onnx:cli"


@needs_onnx
def test_export_writes_where_sentence_transformers_looks_with_a_record(ranker_folder):
    folder = ranker_folder("bert", True)
    graphs = folder / "onnx"
    assert {path.name for path in graphs.iterdir()} == {"model.onnx", "model_qint8_dynamic.onnx", "as2hub_export.json"}
    record = json.loads((graphs / "as2hub_export.json").read_text())
    assert record["config"]["contextual"] is True and record["config"]["type_vocab_size"] == 3
    assert record["graphs"]["fp32"]["max_abs_score_diff_vs_torch"] <= 1e-4
    import onnxruntime

    session = onnxruntime.InferenceSession(str(graphs / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [node.name for node in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [node.name for node in session.get_outputs()] == ["logits"]
    assert all(node.type == "tensor(int64)" for node in session.get_inputs())
    assert session.get_modelmeta().custom_metadata_map["as2hub.weights_sha256"] == record["weights_sha256"]


README = Path(__file__).resolve().parents[1] / "README.md"

FRESH_PROCESS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json
    folder, question, texts, snippet = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    namespace = {"folder": folder, "question": question, "texts": texts}
    exec(snippet, namespace)  # the README's call
    print("SCORES" + json.dumps(namespace["scores"].tolist()))
    """
)


def readme_onnxruntime_snippet() -> str:
    """The README's Python block that scores with onnxruntime alone."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    (snippet,) = [block for block in blocks if "ort.InferenceSession" in block]
    return snippet


@needs_onnx
@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["roberta", "bert"])
def test_exported_folder_scores_with_onnxruntime_alone(ranker_folder, backbone):
    """A fresh process where as2hub cannot be imported: the exported folder scores with onnxruntime and the folder's
    tokenizer, as the README shows, and gives Ranker's scores (contexts carried in the pair, as pipelines do)."""
    folder = ranker_folder(backbone, True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pairs = [context_text_pair(tokenizer, s, c) if c else s for s, c in zip(CANDIDATES, CONTEXTS)]
    expected = score_all(Ranker.from_pretrained(folder)).tolist()
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(folder), QUESTION, json.dumps(pairs), readme_onnxruntime_snippet()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(result.stdout.split("SCORES", 1)[1])
    assert scores == pytest.approx(expected, abs=1e-4)


# ------------------------------------------------------------------------------------------------------------------
# Bad input


@needs_onnx
def test_exporting_what_is_not_an_as2hub_ranker_says_so_and_writes_nothing(stock_checkpoint, tmp_path):
    stock = stock_checkpoint("bert")
    with pytest.raises(NotAnAS2hubRankerError, match=r"config.json: model_type 'bert' is not an as2hub ranker"):
        export_onnx(stock)
    assert not (stock / "onnx").exists()
    with pytest.raises(NotAnAS2hubRankerError, match="no config.json"):
        export_script.main([str(tmp_path)])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):  # argparse: only int8 is offered
        export_script.main([str(tmp_path), "--quantize", "int4"])


def test_onnx_backend_without_the_extra_says_what_to_install(ranker_folder, stock_checkpoint, monkeypatch):
    folder = ranker_folder("roberta", True, export=None)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "as2hub\[onnx\]"'):
        Ranker.from_pretrained(folder, backend="onnx")
    with pytest.raises(ImportError, match=r'pip install "as2hub\[onnx\]"'):
        export_onnx(folder, quantize="int8")
    assert not (folder / "onnx").exists()


@needs_onnx
def test_stale_export_is_refused_with_the_command_to_run(ranker_folder, tmp_path):
    folder = ranker_folder("electra", True, export="int8")
    stale = tmp_path / "stale"
    import shutil

    shutil.copytree(folder, stale)
    ranker = Ranker.from_pretrained(stale)
    perturbed(ranker.model, ranker.tokenizer, seed=2).save_pretrained(stale)  # new weights, old graphs
    for quantize in (None, "int8"):
        with pytest.raises(StaleOnnxExportError, match=rf"stale.*as2hub-export-onnx {stale}"):
            Ranker.from_pretrained(stale, backend="onnx", quantize=quantize)
    # Re-exporting fp32 only drops the int8 graph of the old weights rather than leaving it to be loaded.
    export_script.main([str(stale)])
    assert not (stale / "onnx" / GRAPH_FILES["int8"]).exists()
    scores = score_all(Ranker.from_pretrained(stale, backend="onnx"))
    torch.testing.assert_close(scores, score_all(Ranker.from_pretrained(stale)), atol=1e-4, rtol=0)
    # A config edit that changes the graph (here: the contextual flag) is caught too.
    config = json.loads((stale / "config.json").read_text())
    config["contextual"] = False
    (stale / "config.json").write_text(json.dumps(config))
    with pytest.raises(StaleOnnxExportError, match="contextual"):
        Ranker.from_pretrained(stale, backend="onnx")


@needs_onnx
def test_missing_graph_and_bad_options_are_explained(ranker_folder):
    folder = ranker_folder("bert", False, export="fp32")
    with pytest.raises(FileNotFoundError, match=rf"as2hub-export-onnx {folder} --quantize int8"):
        Ranker.from_pretrained(folder, backend="onnx", quantize="int8")
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'torch'"):
        Ranker.from_pretrained(folder, backend="tensorrt")
    with pytest.raises(ValueError, match="quantize must be None or one of"):
        Ranker.from_pretrained(folder, backend="onnx", quantize="int4")
    with pytest.raises(ValueError, match="options of backend='onnx'"):
        Ranker.from_pretrained(folder, quantize="int8")


@needs_onnx
@pytest.mark.slow
def test_run_as2_exports_after_saving(stock_checkpoint, tmp_path):
    from test_run_as2 import tiny_args

    from as2hub.run_scripts import run_as2

    run_as2.main(tiny_args(tmp_path, stock_checkpoint("bert"), "--export_onnx", "--onnx_quantize", "int8"))
    out = tmp_path / "out"
    assert (out / "onnx" / "model.onnx").is_file() and (out / "onnx" / GRAPH_FILES["int8"]).is_file()
    torch.testing.assert_close(
        score_all(Ranker.from_pretrained(out, backend="onnx")),
        score_all(Ranker.from_pretrained(out)),
        atol=1e-4,
        rtol=0,
    )
    (tmp_path / "other").mkdir()
    with pytest.raises(ValueError, match="--onnx_quantize needs --export_onnx"):  # refused before training
        run_as2.main(tiny_args(tmp_path / "other", stock_checkpoint("bert"), "--onnx_quantize", "int8"))
    assert not (tmp_path / "other" / "out").exists()

"""The top-level README's snippets run as shown, on tiny models saved to tmp folders, and give what it prints.

Every ```python block of README.md has a runner here (a new block fails ``test_every_python_block_has_a_runner``);
the runners replace only the README's folder names and Hub ids by tmp folders (each replaced literal must be in the
block) and provide the inputs a block names but does not define (``folder``, ``question``, ``texts``,
``documents``). A block that shows its output (``# {...}`` under its last line) is compared by shape: the same type,
the same keys, the same strings, a float where it shows a number. The ``python -m as2hub.run_scripts.*`` commands of
the ```bash blocks are parsed by their own scripts; the LoRA command runs on WikiQA where it is present.
"""

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np
import pytest
import torch
from helpers import BLOCK_AS2HUB, needs_onnx, needs_wikiqa, spread
from transformers import AutoTokenizer

from as2hub.inference.joint_ranking import JointRankedCandidate, JointRanker
from as2hub.modeling import CONTEXTUAL_MODELS, JointMultiCandidateModel, LongformerWithQEContrastive

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUESTION = "who wrote hamlet?"
TEXTS = ["Hamlet is a play.", "Shakespeare wrote Hamlet.", "It is set in Denmark."]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def block_starting(first_line: str) -> str:
    (block,) = [block for block in python_blocks() if block.startswith(first_line)]
    return block


def substituted(block: str, replacements: dict[str, str]) -> str:
    """``block`` with each README literal (a quoted folder or Hub id) replaced by a tmp folder; a literal missing
    from the block fails: the README changed and its runner here must follow."""
    for literal, folder in replacements.items():
        assert f'"{literal}"' in block, f"the README block no longer names {literal!r}:\n{block}"
        block = block.replace(f'"{literal}"', repr(str(folder)))
    return block


def run_block(block: str, namespace: dict | None = None):
    """Execute ``block``; returns (the value of its last line when it is an expression, else None, the namespace)."""
    namespace = dict(namespace or {})
    module = ast.parse(block)
    last = module.body[-1]
    if isinstance(last, ast.Expr):
        module.body.pop()
    exec(compile(module, "README block", "exec"), namespace)
    value = (
        eval(compile(ast.Expression(last.value), "README block", "eval"), namespace)
        if isinstance(last, ast.Expr)
        else None
    )
    return value, namespace


def shown_output(block: str):
    """The output a block shows: the ``# <python literal>`` comment lines after its last line of code."""
    lines = block.rstrip().splitlines()
    comments = []
    while lines and lines[-1].startswith("# "):
        comments.insert(0, lines.pop()[2:])
    return ast.literal_eval(" ".join(comments)) if comments else None


def assert_same_shape(got, shown, where="output"):
    """``got`` has the shape of ``shown``: same container types, keys and lengths, equal strings, a float for a number."""
    if isinstance(shown, dict):
        assert isinstance(got, dict), (
            f"{where}: the README shows a dict, the code returns {type(got).__name__}: {got!r}"
        )
        assert set(got) == set(shown), f"{where}: keys {sorted(got)} instead of {sorted(shown)}"
        for key in shown:
            assert_same_shape(got[key], shown[key], f"{where}[{key!r}]")
    elif isinstance(shown, list):
        assert isinstance(got, list), (
            f"{where}: the README shows a list, the code returns {type(got).__name__}: {got!r}"
        )
        assert len(got) == len(shown), f"{where}: {len(got)} items instead of {len(shown)}"
        for index, (item, expected) in enumerate(zip(got, shown)):
            assert_same_shape(item, expected, f"{where}[{index}]")
    elif isinstance(shown, str):
        assert got == shown, f"{where}: {got!r} instead of {shown!r}"
    elif isinstance(shown, float):
        assert isinstance(got, float), f"{where}: {got!r} is not a float"
    else:
        raise AssertionError(f"{where}: no shape rule for the README's {shown!r}")


def test_shape_comparison_tells_a_dict_from_a_list_of_dicts():
    """The check the pipeline block relies on (issue 47: the README showed a list, transformers 5 returns a dict)."""
    assert_same_shape({"label": "correct", "score": 0.5}, {"label": "correct", "score": 0.97})
    with pytest.raises(AssertionError, match="shows a dict"):
        assert_same_shape([{"label": "correct", "score": 0.5}], {"label": "correct", "score": 0.97})
    with pytest.raises(AssertionError, match="shows a list"):
        assert_same_shape({"label": "correct", "score": 0.5}, [{"label": "correct", "score": 0.97}])
    with pytest.raises(AssertionError, match="'wrong' instead of 'correct'"):
        assert_same_shape({"label": "wrong", "score": 0.5}, {"label": "correct", "score": 0.97})
    assert shown_output("x = 1\nx\n# {'a': [1.5, 'b']}\n") == {"a": [1.5, "b"]}
    assert shown_output("x = 1\n") is None


# --------------------------------------------------------------------------------------------------------------------
# Tiny models standing in for the README's folders


@pytest.fixture(scope="module")
def ranker_dir(stock_checkpoint, tmp_path_factory):
    """A tiny contextual BERT ranker (as run_as2 saves one: config with auto_map, remote code, tokenizer), its scores
    spread around 0.5, with its fp32 ONNX graph when the onnx extra is installed."""
    source = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    model = CONTEXTUAL_MODELS["bert"][1].from_pretrained(source, contextual=True, sep_token_id=tokenizer.sep_token_id)

    def score(m):
        m(**tokenizer([QUESTION] * len(TEXTS), TEXTS, padding=True, return_tensors="pt"))

    spread(model.eval(), score, seed=3)
    folder = tmp_path_factory.mktemp("minilm-wikiqa")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def joint_dir(stock_checkpoint, tmp_path_factory):
    source = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    model = JointMultiCandidateModel.from_pretrained(
        source, num_candidates=3, slot_length=16, head="AE_k", pad_token_id=tokenizer.pad_token_id
    )
    folder = tmp_path_factory.mktemp("joint")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------------------------------
# The python blocks

RUNNERS = {  # the first line of each README python block -> the test below that runs it
    "from transformers import pipeline": "test_pipeline_block_returns_the_dict_the_readme_shows",
    "from as2hub.data_collators import generate_examples": "test_generate_examples_block",
    "from as2hub.inference import JointRanker": "test_joint_ranker_block",
    "from as2hub.modeling import LongformerWithQEContrastive": "test_longformer_block",
    "import numpy as np": "test_onnxruntime_block_scores_like_the_torch_model",
}


def test_every_python_block_has_a_runner():
    firsts = [block.splitlines()[0].split("  #")[0].strip() for block in python_blocks()]
    assert len(firsts) == len(set(firsts)) == 5, firsts
    assert sorted(firsts) == sorted(RUNNERS), "a README python block without a runner in this file (or one removed)"
    for name in RUNNERS.values():
        assert callable(globals()[name])


def test_pipeline_block_returns_the_dict_the_readme_shows(ranker_dir):
    block = block_starting("from transformers import pipeline")
    shown = shown_output(block)
    assert shown == {"label": "correct", "score": 0.97}  # what the README prints: one dict for one pair
    value, namespace = run_block(substituted(block, {"outputs/minilm-wikiqa": ranker_dir}))
    assert_same_shape(value, shown, "pipeline(...)(one pair)")
    assert 0.0 < value["score"] < 1.0
    # the README's next sentence: a list of pairs gives a list of dicts
    pair = {"text": QUESTION, "text_pair": TEXTS[1]}
    assert_same_shape(namespace["ranker"]([pair, pair]), [shown, shown], "pipeline(...)(two pairs)")


def test_generate_examples_block():
    block = block_starting("from as2hub.data_collators import generate_examples")
    texts = [text for text in topics.values() if text.count(". ") > 12][:6]
    documents = [[[s.strip() + "." for s in paragraph.split(". ") if s.strip()] for paragraph in text.split("\n\n")]
                 for text in texts]  # fmt: skip
    _, namespace = run_block(block, {"documents": documents})
    examples = namespace["examples"]
    assert isinstance(examples, list) and len(examples) > 10
    assert {example["label"] for example in examples} >= {0, 1}


def test_joint_ranker_block(ranker_dir, joint_dir):
    block = block_starting("from as2hub.inference import JointRanker")
    code = substituted(block, {"outputs/joint": joint_dir, "outputs/minilm-wikiqa": ranker_dir})
    value, namespace = run_block(code)
    assert isinstance(namespace["ranker"], JointRanker) and namespace["ranker"].pairwise is not None
    assert all(isinstance(item, JointRankedCandidate) for item in value)
    assert sorted(item.text for item in value) == sorted(TEXTS)  # the block's three candidates, each once
    assert [item.stage for item in value] == ["joint"] * 3  # k = 3: the whole pairwise top k re-ranked


def test_longformer_block(stock_checkpoint):
    block = block_starting("from as2hub.modeling import LongformerWithQEContrastive")
    _, namespace = run_block(substituted(block, {"sentence-transformers/all-MiniLM-L6-v2": stock_checkpoint("bert")}))
    model = namespace["model"]
    assert isinstance(model, LongformerWithQEContrastive)
    assert model.config.attention_window == [256] * model.config.num_hidden_layers
    assert model.config.max_position_embeddings >= 4096


@needs_onnx
def test_onnxruntime_block_scores_like_the_torch_model(ranker_dir):
    from transformers import AutoModelForSequenceClassification

    from as2hub.inference.onnx_export import export_onnx

    export_onnx(ranker_dir)
    block = block_starting("import numpy as np")
    _, namespace = run_block(block, {"folder": str(ranker_dir), "question": QUESTION, "texts": TEXTS})
    scores = namespace["scores"]
    assert isinstance(scores, np.ndarray) and scores.shape == (3,) and scores.dtype == np.float32
    tokenizer = AutoTokenizer.from_pretrained(ranker_dir)
    model = AutoModelForSequenceClassification.from_pretrained(ranker_dir, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(**tokenizer([QUESTION] * 3, TEXTS, padding=True, return_tensors="pt")).logits
    np.testing.assert_allclose(scores, torch.sigmoid(logits[:, 0]).numpy(), atol=1e-4, rtol=0)
    assert scores.max() - scores.min() > 1e-3  # the texts get different scores: the check compares something


# In a process where as2hub cannot be imported, stdin closed (what a script or a notebook without a terminal has):
# the block runs to the end without the trust_remote_code prompt or transformers' config-class warning.
FRESH_PROCESS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import ast, json
    block, namespace = sys.argv[1], json.loads(sys.argv[2])
    module = ast.parse(block)
    last = module.body.pop() if isinstance(module.body[-1], ast.Expr) else None
    exec(compile(module, "README block", "exec"), namespace)
    if last is not None:
        print("VALUE" + repr(eval(compile(ast.Expression(last.value), "README block", "eval"), namespace)))
    print("DONE")
    """
)
NOISE = ("Do you wish to run the custom code", "to instantiate a model of type", "Traceback")


def run_fresh(block: str, namespace: dict) -> str:
    import json

    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, block, json.dumps(namespace)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    for noise in NOISE:
        assert noise not in output, f"{noise!r} in the output of a README block:\n{output[-3000:]}"
    assert "DONE" in result.stdout
    return result.stdout


@pytest.mark.slow
def test_pipeline_block_without_as2hub_prints_one_dict(ranker_dir):
    block = block_starting("from transformers import pipeline")
    stdout = run_fresh(substituted(block, {"outputs/minilm-wikiqa": ranker_dir}), {})
    value = ast.literal_eval(stdout.split("VALUE", 1)[1].splitlines()[0])
    assert_same_shape(value, shown_output(block), "pipeline(...)(one pair), without as2hub")


@needs_onnx
@pytest.mark.slow
def test_onnxruntime_block_without_as2hub_needs_no_prompt(ranker_dir):
    from as2hub.inference.onnx_export import export_onnx

    if not (ranker_dir / "onnx" / "model.onnx").is_file():
        export_onnx(ranker_dir)
    block = block_starting("import numpy as np") + 'print("SCORES", scores.tolist())\n'
    stdout = run_fresh(block, {"folder": str(ranker_dir), "question": QUESTION, "texts": TEXTS})
    scores = ast.literal_eval(stdout.split("SCORES", 1)[1].splitlines()[0].strip())
    assert len(scores) == 3 and all(0.0 < score < 1.0 for score in scores)


# --------------------------------------------------------------------------------------------------------------------
# The commands of the bash blocks


def readme_commands() -> list[list[str]]:
    """Every ``python -m as2hub.run_scripts.<script> ...`` line of the README's bash blocks, continuation lines
    joined and comments dropped, as ``[script, *argv]``."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = line.split("#")[0].split()
            if len(words) > 2 and words[:2] == ["python", "-m"] and words[2].startswith("as2hub.run_scripts."):
                commands.append([words[2].rsplit(".", 1)[1], *words[3:]])
    return commands


class Parsed(Exception):
    pass


def parsed_arguments(script: str, argv: list[str], monkeypatch) -> tuple:
    """The argument dataclasses ``as2hub.run_scripts.<script>.main(argv)`` parses (unknown flags and bad values raise
    there); the run stops right after parsing."""
    import importlib

    from as2hub.run_scripts.arguments import parse_arguments

    module = importlib.import_module(f"as2hub.run_scripts.{script}")
    parsed = []

    def parse_then_stop(parser, args):
        parsed.append(parse_arguments(parser, args))
        raise Parsed

    monkeypatch.setattr(module, "parse_arguments", parse_then_stop)
    with pytest.raises(Parsed):
        module.main(argv)
    return parsed[0]


def test_readme_commands_parse_with_their_scripts_flags(monkeypatch):
    commands = readme_commands()
    scripts = sorted(script for script, *_ in commands)
    assert scripts == ["run_as2", "run_as2", "run_as2", "run_joint", "run_pretrain", "run_qe_contrastive"], commands
    for script, *argv in commands:
        arguments = parsed_arguments(script, argv, monkeypatch)
        if "--output_dir" in argv:
            training_args = [a for a in arguments if hasattr(a, "output_dir")][0]
            assert training_args.output_dir == argv[argv.index("--output_dir") + 1]


def test_readme_lora_command_asks_for_lora(monkeypatch):
    (argv,) = [argv for script, *argv in readme_commands() if script == "run_as2" and "--use_lora" in argv]
    model_args = parsed_arguments("run_as2", argv, monkeypatch)[0]
    assert model_args.use_lora is True and model_args.lora_r == 8 and model_args.lora_alpha == 16
    assert model_args.model_name_or_path == "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.slow
@pytest.mark.wikiqa
@needs_wikiqa()
def test_readme_lora_command_runs_and_its_folder_loads(stock_checkpoint, tmp_path):
    """The README's LoRA command on WikiQA, the Hub model replaced by a tiny local BERT and the run cut to 2 steps."""
    from as2hub.inference.ranking import Ranker
    from as2hub.modeling.folders import AdapterFolderError
    from as2hub.run_scripts import run_as2

    (argv,) = [argv for script, *argv in readme_commands() if script == "run_as2" and "--use_lora" in argv]
    argv[argv.index("--model_name_or_path") + 1] = str(stock_checkpoint("bert"))
    out = tmp_path / "lora"
    argv[argv.index("--output_dir") + 1] = str(out)
    argv += ["--max_steps", "2", "--max_train_samples", "64", "--max_length", "64"]
    argv += ["--per_device_eval_batch_size", "64"]
    results = run_as2.main(argv)
    assert results["test"]["test_num_questions"] == 237
    assert (out / "config.json").is_file() and (out / "lora_adapter" / "adapter_config.json").is_file()
    ranker = Ranker.from_pretrained(out)
    assert len(ranker.rank(QUESTION, TEXTS)) == 3
    with pytest.raises(AdapterFolderError, match=f"pass {re.escape(str(out))} instead"):
        Ranker.from_pretrained(out / "lora_adapter")

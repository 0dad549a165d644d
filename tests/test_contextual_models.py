"""Contextual AS2 models: loading stock checkpoints, segment ids, heads, remote-code round trip, LoRA, ranking."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import BACKBONES
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from as2hub.data_collators import ContextualAS2Collator
from as2hub.modeling import CONTEXTUAL_MODELS
from as2hub.modeling.contextual_as2.hub_common import infer_token_type_ids
from as2hub.modeling.ranking import Ranker, context_text_pair

EXAMPLES = [
    ("What does the import statement do?", "It finds a module and binds it.", "Modules are objects. They have names."),
    ("When is a finally clause run?", "Always, on the way out of the try.", "Exceptions propagate."),
    ("What is a generator?", "A function that yields values lazily, one at a time.", ""),
]


def load_contextual(folder, backbone, **overrides):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model_class = CONTEXTUAL_MODELS[backbone][1]
    overrides.setdefault("sep_token_id", tokenizer.sep_token_id)
    return model_class.from_pretrained(folder, **overrides).eval(), tokenizer


def batch_for(tokenizer, model, contextual=True, examples=EXAMPLES, labels=(1, 0, 1)):
    collator = ContextualAS2Collator(
        tokenizer, max_length=64, contextual=contextual, num_token_types=model.config.type_vocab_size
    )
    features = [{"question": q, "candidate": s, "context": c, "label": y} for (q, s, c), y in zip(examples, labels)]
    return collator(features)


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("init", ["scratch", "copy"])
def test_stock_checkpoint_grows_token_types_to_three(stock_checkpoint, backbone, init):
    folder = stock_checkpoint(backbone)
    stock = BACKBONES[backbone][2].from_pretrained(folder)
    model, _ = load_contextual(folder, backbone, token_type_init=init)
    old = stock.embeddings.token_type_embeddings.weight
    new = model.base_model.embeddings.token_type_embeddings.weight
    rows = old.shape[0]
    assert new.shape == (3, old.shape[1]) and model.config.type_vocab_size == 3
    torch.testing.assert_close(new[:rows], old)
    if init == "copy":
        torch.testing.assert_close(new[rows:], old[-1].expand(3 - rows, -1))
    else:
        assert not torch.allclose(new[rows:], old[-1].expand(3 - rows, -1))
        assert 0.005 < new[rows:].std().item() < 0.05  # normal(0, initializer_range=0.02)
    # The encoder is the stock one, weight for weight.
    stock_state = stock.state_dict()
    for name, value in model.base_model.state_dict().items():
        if "token_type_embeddings" not in name and name in stock_state:
            torch.testing.assert_close(value, stock_state[name], msg=name)


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_pairwise_keeps_the_backbone_segment_design(stock_checkpoint, backbone):
    model, tokenizer = load_contextual(stock_checkpoint(backbone), backbone, contextual=False)
    assert model.config.type_vocab_size == BACKBONES[backbone][3]
    batch = batch_for(tokenizer, model, contextual=False)
    assert batch["token_type_ids"].max().item() == BACKBONES[backbone][3] - 1
    # A stock tokenizer pair encoding is exactly the collator's pairwise layout.
    q, s, _ = EXAMPLES[0]
    assert batch["input_ids"][0, : batch["attention_mask"][0].sum()].tolist() == tokenizer(q, s)["input_ids"]


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("contextual", [True, False])
def test_segments_inferred_from_separators_equal_explicit_ids(stock_checkpoint, backbone, contextual):
    model, tokenizer = load_contextual(stock_checkpoint(backbone), backbone, contextual=contextual)
    batch = batch_for(tokenizer, model, contextual=contextual)
    inferred = infer_token_type_ids(
        batch["input_ids"], model.config.sep_token_id, model.config.type_vocab_size, batch["attention_mask"]
    )
    assert torch.equal(inferred, batch["token_type_ids"])
    if contextual:  # every example has question, candidate and (possibly empty) context segments
        assert set(batch["token_type_ids"][0].tolist()) == {0, 1, 2}
    explicit = model(**batch).logits
    derived = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(explicit, derived)


def test_single_logit_head_scores_and_loss(stock_checkpoint):
    model, tokenizer = load_contextual(stock_checkpoint("bert"), "bert")
    assert model.config.id2label == {0: "correct"} and model.config.num_labels == 1
    batch = batch_for(tokenizer, model)
    out = model(**batch)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits.view(-1), batch["labels"].float())
    torch.testing.assert_close(out.loss, expected)
    torch.testing.assert_close(model.score(**batch), torch.sigmoid(out.logits.view(-1)))


def test_two_label_head_names_the_positive_class(stock_checkpoint):
    model, tokenizer = load_contextual(stock_checkpoint("roberta"), "roberta", num_labels=2)
    assert model.config.id2label == {0: "incorrect", 1: "correct"}
    batch = batch_for(tokenizer, model)
    out = model(**batch)
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, batch["labels"]))
    torch.testing.assert_close(model.score(**batch), out.logits.softmax(-1)[:, 1])


def test_saved_folder_is_hub_ready(stock_checkpoint, tmp_path):
    model, tokenizer = load_contextual(stock_checkpoint("electra"), "electra")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "contextual_electra"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_contextual_as2.ContextualElectraConfig",
        "AutoModel": "modeling_contextual_as2.ElectraForContextualAS2",
        "AutoModelForSequenceClassification": "modeling_contextual_as2.ElectraForContextualAS2",
    }
    shipped = {p.name for p in tmp_path.glob("*.py")}
    assert shipped == {"configuration_contextual_as2.py", "modeling_contextual_as2.py", "hub_common.py"}
    for source in tmp_path.glob("*.py"):  # remote code imports only torch, transformers and its siblings
        imports = [line for line in source.read_text().splitlines() if line.startswith(("import ", "from "))]
        assert all(
            line.split()[1].split(".")[0] in {"torch", "transformers", "huggingface_hub", ""} for line in imports
        )


FRESH_PROCESS = textwrap.dedent(
    """
    import importlib.abc, json, sys
    class BlockAs2hub(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "as2hub":
                raise ModuleNotFoundError(f"as2hub is blocked in this process: {name}")
    sys.meta_path.insert(0, BlockAs2hub())
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, pipeline
    from sentence_transformers import CrossEncoder
    try:
        import as2hub  # noqa: F401
        raise SystemExit("as2hub must not be importable here")
    except ModuleNotFoundError:
        pass
    cases = json.loads(sys.argv[1])
    report = {}
    for folder in cases:
        batch = torch.load(f"{folder}/batch.pt")
        by_auto = {}
        for auto in (AutoModelForSequenceClassification, AutoModel):
            model = auto.from_pretrained(folder, trust_remote_code=True).eval()
            with torch.no_grad():
                by_auto[auto.__name__] = model(**batch).logits.view(-1).tolist()
            assert "as2hub" not in type(model).__module__, type(model).__module__
        pipe = pipeline("text-classification", model=folder, trust_remote_code=True)
        pipe_out = pipe({"text": "What is a generator?", "text_pair": "A function that yields values lazily, one at a time."})
        ranked = CrossEncoder(folder, trust_remote_code=True).rank("What is a generator?", ["A function.", "Lazily."])
        report[folder] = {"logits": by_auto, "pipeline": pipe_out, "crossencoder": [r["corpus_id"] for r in ranked]}
    print("REPORT" + json.dumps(report))
    """
)


@pytest.mark.slow
def test_round_trip_in_a_fresh_process_without_as2hub(stock_checkpoint, tmp_path):
    expected, folders = {}, []
    for backbone in sorted(BACKBONES):
        model, tokenizer = load_contextual(stock_checkpoint(backbone), backbone)
        torch.manual_seed(1)
        with torch.no_grad():  # move the head off its init so the check is not trivially about zeros
            for parameter in model.parameters():
                parameter.add_(0.02 * torch.randn_like(parameter))
        folder = tmp_path / backbone
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        batch = batch_for(tokenizer, model)
        batch.pop("labels")
        torch.save(batch, folder / "batch.pt")
        with torch.no_grad():
            expected[str(folder)] = model(**batch).logits.view(-1).tolist()
            pair = tokenizer(
                "What is a generator?", "A function that yields values lazily, one at a time.", return_tensors="pt"
            )
            pair.pop("token_type_ids", None)
            expected[str(folder) + ":pipe"] = model.score(**pair).item()
        folders.append(str(folder))
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(folders)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("REPORT", 1)[1])
    for folder in folders:
        for auto_name, logits in report[folder]["logits"].items():
            assert logits == pytest.approx(expected[folder], abs=1e-5), auto_name
        (pipe,) = (
            report[folder]["pipeline"] if isinstance(report[folder]["pipeline"], list) else [report[folder]["pipeline"]]
        )
        assert pipe["label"] == "correct"
        assert pipe["score"] == pytest.approx(expected[folder + ":pipe"], abs=1e-5)
        assert sorted(report[folder]["crossencoder"]) == [0, 1]


def test_auto_classes_resolve_registered_types(stock_checkpoint, tmp_path):
    model, tokenizer = load_contextual(stock_checkpoint("roberta"), "roberta")
    model.save_pretrained(tmp_path)
    for auto in (AutoModel, AutoModelForSequenceClassification):
        assert type(auto.from_pretrained(tmp_path)) is type(model)


@pytest.mark.parametrize("backbone", ["roberta", "bert"])
def test_ranker_matches_one_by_one_scoring(stock_checkpoint, backbone):
    model, tokenizer = load_contextual(stock_checkpoint(backbone), backbone)
    ranker = Ranker(model, tokenizer, batch_size=2)
    question = "What is a generator?"
    candidates = ["A function that yields values lazily.", "No.", "Generators are iterators built by yield.", "x y"]
    contexts = ["Iterators.", "", "Functions can yield.", "Prose around it."]
    ranked = ranker.rank(question, candidates, contexts)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    collator = ContextualAS2Collator(tokenizer, max_length=256, num_token_types=3)
    for item in ranked:  # batching, sorting and padding change nothing
        single = collator([{"question": question, "candidate": item.text, "context": contexts[item.index]}])
        assert model.score(**single).item() == pytest.approx(item.score, abs=1e-5)


def test_context_text_pair_gives_the_contextual_segments(stock_checkpoint):
    model, tokenizer = load_contextual(stock_checkpoint("roberta"), "roberta")
    q, s, c = EXAMPLES[0]
    pair = tokenizer(q, context_text_pair(tokenizer, s, c), return_tensors="pt")
    ranker_score = Ranker(model, tokenizer).score_pairs([q], [s], [c])
    # Tokenization of the joined text may differ by a merge at the boundary; the segments must be the same three.
    types = infer_token_type_ids(pair["input_ids"], model.config.sep_token_id, 3)
    assert set(types[0].tolist()) == {0, 1, 2}
    assert model.score(**pair).item() == pytest.approx(ranker_score.item(), abs=0.05)


def test_lora_trains_head_and_token_types_and_merges(stock_checkpoint, tmp_path):
    from peft import PeftModel

    from as2hub.run_scripts.run_as2 import ModelArguments, add_lora

    model, tokenizer = load_contextual(stock_checkpoint("bert"), "bert")
    peft_model = add_lora(model, ModelArguments(use_lora=True, lora_r=4))
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_A" in name for name in trainable)
    assert any("classifier" in name for name in trainable)
    assert any("token_type_embeddings" in name for name in trainable)
    assert not any("word_embeddings" in name for name in trainable)
    with torch.no_grad():
        for parameter in peft_model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn_like(parameter))
    batch = batch_for(tokenizer, model)
    peft_model.eval()
    with torch.no_grad():
        expected = peft_model(**batch).logits
    peft_model.save_pretrained(tmp_path / "adapter")
    base, _ = load_contextual(stock_checkpoint("bert"), "bert")
    reloaded = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, expected)
        merged = reloaded.merge_and_unload()
        torch.testing.assert_close(merged(**batch).logits, expected, atol=1e-5, rtol=1e-4)

"""Contextual AS2 models: loading stock checkpoints, segment ids, heads, remote-code round trip, LoRA, ranking."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import BACKBONES, BLOCK_AS2HUB
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from as2hub.data_collators import ContextualAS2Collator
from as2hub.inference.ranking import Ranker, context_text_pair
from as2hub.modeling import CONTEXTUAL_MODELS
from as2hub.modeling.contextual_as2.hub_common import infer_token_type_ids

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
        allowed = {"torch", "transformers", "huggingface_hub", ""} | set(sys.stdlib_module_names)
        assert all(line.split()[1].split(".")[0] in allowed for line in imports), source.name


FRESH_PROCESS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json
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
    for folder, pairs in cases.items():
        batch = torch.load(f"{folder}/batch.pt")
        by_auto = {}
        for auto in (AutoModelForSequenceClassification, AutoModel):
            model = auto.from_pretrained(folder, trust_remote_code=True).eval()
            with torch.no_grad():
                by_auto[auto.__name__] = model(**batch).logits.view(-1).tolist()
            assert "as2hub" not in type(model).__module__, type(model).__module__
        pipe = pipeline("text-classification", model=folder, trust_remote_code=True)
        pipe_out = [pipe({"text": q, "text_pair": pair}) for q, pair in pairs]
        pipe_out = [out[0] if isinstance(out, list) else out for out in pipe_out]
        cross = CrossEncoder(folder, trust_remote_code=True)
        predicted = cross.predict([tuple(pair) for pair in pairs]).tolist()
        question = pairs[0][0]
        ranked = cross.rank(question, [pair for q, pair in pairs if q == question])
        report[folder] = {
            "logits": by_auto,
            "pipeline": pipe_out,
            "crossencoder_predict": predicted,
            "crossencoder_rank": [[r["corpus_id"], float(r["score"])] for r in ranked],
        }
    print("REPORT" + json.dumps(report))
    """
)

QUESTION = "What is a generator?"
CANDIDATES = [
    ("A function that yields values lazily, one at a time.", "Iterators are objects. They have a next method."),
    ("It is a kind of loop.", "Loops repeat a block of code."),
    ("Generators are iterators built by yield.", ""),
]


@pytest.mark.slow
def test_round_trip_in_a_fresh_process_without_as2hub(stock_checkpoint, tmp_path):
    """Saved folders load without as2hub; pipeline, CrossEncoder and Ranker give the same scores with contexts.

    BERT-style tokenizers return pair ids (0 question, 1 everything after the first separator) and pipelines and
    CrossEncoder pass them on: the context must still get segment 2, as in Ranker.
    """
    expected, cases = {}, {}
    for backbone in sorted(BACKBONES):
        source = stock_checkpoint(backbone)
        torch.manual_seed(0)  # the new head and token-type rows: the same model whatever ran before
        model, tokenizer = load_contextual(source, backbone)
        torch.manual_seed(1)
        with torch.no_grad():  # move the head and the token-type rows off their init: segments must matter
            for parameter in model.parameters():
                parameter.add_(0.02 * torch.randn_like(parameter))
            model.base_model.embeddings.token_type_embeddings.weight[2].add_(0.5)
            for name, parameter in model.named_parameters():  # spread the scores of a tiny random model
                if name.endswith(("classifier.weight", "out_proj.weight")):
                    parameter.mul_(50)
        folder = tmp_path / backbone
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        batch = batch_for(tokenizer, model)
        batch.pop("labels")
        torch.save(batch, folder / "batch.pt")
        pairs = [[QUESTION, context_text_pair(tokenizer, s, c) if c else s] for s, c in CANDIDATES]
        for (_, text_pair), (s, c) in zip(pairs, CANDIDATES):  # the pair text tokenizes exactly as Ranker lays out
            ranker_ids = Ranker(model, tokenizer).layout.build(
                [tokenizer(t, add_special_tokens=False)["input_ids"] for t in (QUESTION, s, c)], 256
            )[0]
            assert tokenizer(QUESTION, text_pair)["input_ids"] == ranker_ids
        with torch.no_grad():
            expected[str(folder)] = {
                "logits": model(**batch).logits.view(-1).tolist(),
                "scores": Ranker(model, tokenizer)
                .score_pairs([QUESTION] * len(CANDIDATES), *map(list, zip(*CANDIDATES)))
                .tolist(),
            }
        cases[str(folder)] = pairs
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(cases)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("REPORT", 1)[1])
    for folder in cases:
        backbone = folder.rsplit("/", 1)[-1]
        for auto_name, logits in report[folder]["logits"].items():
            assert logits == pytest.approx(expected[folder]["logits"], abs=1e-5), (backbone, auto_name)
        scores = expected[folder]["scores"]
        gaps = [b - a for a, b in zip(sorted(scores), sorted(scores)[1:])]
        assert min(gaps) > 2e-5, "degenerate check: scores closer than the comparison tolerance"
        assert all(out["label"] == "correct" for out in report[folder]["pipeline"])
        pipe_scores = [out["score"] for out in report[folder]["pipeline"]]
        assert pipe_scores == pytest.approx(scores, abs=1e-5), (backbone, "pipeline")
        assert report[folder]["crossencoder_predict"] == pytest.approx(scores, abs=1e-5), (backbone, "predict")
        ranked = report[folder]["crossencoder_rank"]
        assert [index for index, _ in ranked] == sorted(range(len(scores)), key=lambda i: -scores[i]), backbone
        assert [score for _, score in ranked] == pytest.approx(sorted(scores, reverse=True), abs=1e-5), backbone


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

    from as2hub.modeling.lora import add_lora

    model, tokenizer = load_contextual(stock_checkpoint("bert"), "bert")
    peft_model = add_lora(model, r=4)
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


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_tokenizer_pair_ids_give_the_context_its_own_segment(stock_checkpoint, backbone):
    """What pipelines and CrossEncoder send (BERT-style: 0 question, 1 the rest) scores as Ranker does."""
    model, tokenizer = load_contextual(stock_checkpoint(backbone), backbone)
    with torch.no_grad():
        model.base_model.embeddings.token_type_embeddings.weight[2].add_(1.0)  # make segment 2 matter
    q, s, c = EXAMPLES[0]
    encoded = tokenizer(q, context_text_pair(tokenizer, s, c), return_tensors="pt")
    assert ("token_type_ids" in encoded) == (backbone != "roberta")  # the tokenizers behave as the stock ones
    assert model.score(**encoded).item() == pytest.approx(Ranker(model, tokenizer).score_pairs([q], [s], [c]).item())


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_a_stock_config_builds_the_three_row_table(stock_checkpoint, backbone):
    """From scratch (config path): the table the model needs, not the stock config's 1 or 2 rows."""
    config_class, model_class = CONTEXTUAL_MODELS[backbone]
    config = config_class.from_pretrained(stock_checkpoint(backbone))
    assert config.type_vocab_size == BACKBONES[backbone][3]  # the stock size, as loading a checkpoint needs
    for model in (model_class(config), AutoModelForSequenceClassification.from_config(config)):
        assert model.base_model.embeddings.token_type_embeddings.num_embeddings == 3
        assert model.config.type_vocab_size == 3
    pairwise = model_class(config_class.from_pretrained(stock_checkpoint(backbone), contextual=False))
    assert pairwise.config.type_vocab_size == BACKBONES[backbone][3]  # the backbone's own design


def test_scratch_all_draws_the_whole_table_anew(stock_checkpoint):
    stock = BACKBONES["bert"][2].from_pretrained(stock_checkpoint("bert"))
    old = stock.embeddings.token_type_embeddings.weight
    model, _ = load_contextual(stock_checkpoint("bert"), "bert", token_type_init="scratch_all")
    new = model.base_model.embeddings.token_type_embeddings.weight
    assert new.shape[0] == 3
    assert not torch.allclose(new[:2], old, atol=1e-3)
    assert 0.005 < new.std().item() < 0.05
    with pytest.raises(ValueError, match="token_type_init"):
        CONTEXTUAL_MODELS["bert"][0](token_type_init="zeros")

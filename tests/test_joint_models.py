"""Joint multi-candidate models: slot layout, heads, empty slots, permutations, remote code, pipeline, ranking."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import BACKBONES, BLOCK_AS2HUB
from transformers import AutoModel, AutoModelForPreTraining, AutoTokenizer, pipeline

from as2hub.data_collators import JointCollator
from as2hub.inference.joint_ranking import JointRanker, cascade_order
from as2hub.inference.ranking import Ranker
from as2hub.modeling import JointMultiCandidateModel
from as2hub.modeling.joint_multicandidate import (
    BertForJointMultiCandidate,
    JointBertConfig,
    JointRobertaConfig,
    RobertaForJointPretraining,
    SlotLayout,
)

K, L = 3, 16
HEADS = ("IE_1", "AE_1", "IE_k", "AE_k")
QUESTION = "What is a generator?"
CANDIDATES = [
    "A function that yields values lazily.",
    "Generators are iterators built by yield.",
    "Modules are objects.",
    "A tuple is immutable.",
    "The with statement manages resources.",
]
FV_LABELS = {0: "SUPPORTS", 1: "REFUTES", 2: "NOT ENOUGH INFO"}


def load_joint(folder, head="AE_k", **overrides):
    """The paper's joint model (full attention) unless ``first_token_attention`` says otherwise."""
    overrides.setdefault("first_token_attention", "all")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if head in ("IE_1", "AE_1"):
        overrides.setdefault("id2label", FV_LABELS)
        overrides.setdefault("label2id", {v: k for k, v in FV_LABELS.items()})
    model = JointMultiCandidateModel.from_pretrained(
        folder, num_candidates=K, slot_length=L, head=head, pad_token_id=tokenizer.pad_token_id, **overrides
    )
    return model.eval(), tokenizer


def perturb(model, seed=1, scale=0.05):
    """Move every weight off its init, so that equalities are not about zeros or symmetric inits."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return model


def batch_for(tokenizer, features, **kwargs):
    return JointCollator(tokenizer, K, L, **kwargs)(features)


FEATURES = [
    {"question": QUESTION, "candidates": CANDIDATES[:3], "labels": [1, 1, 0]},
    {"question": "What does len return?", "candidates": ["The number of items."], "labels": [1]},
]


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_any_stock_checkpoint_loads_with_k_plus_one_token_types(stock_checkpoint, backbone):
    folder = stock_checkpoint(backbone)
    stock = BACKBONES[backbone][2].from_pretrained(folder)
    model, _ = load_joint(folder)
    assert type(model).__name__.lower().startswith(backbone)
    assert model.config.to_dict()["model_type"] == f"joint_{backbone}" and model.config.type_vocab_size == K + 1
    old = stock.embeddings.token_type_embeddings.weight
    new = model.base_model.embeddings.token_type_embeddings.weight
    assert new.shape == (K + 1, old.shape[1])
    torch.testing.assert_close(new[: old.shape[0]], old)
    stock_state = stock.state_dict()
    for name, value in model.base_model.state_dict().items():
        if "token_type_embeddings" not in name and name in stock_state:
            torch.testing.assert_close(value, stock_state[name], msg=name)


@pytest.mark.parametrize("backbone", ["roberta", "bert"])
def test_slot_layout_starts_slot_i_at_i_times_L(stock_checkpoint, backbone):
    model, tokenizer = load_joint(stock_checkpoint(backbone))
    batch = batch_for(tokenizer, FEATURES)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape == (2, (K + 1) * L)
    first = tokenizer("x")["input_ids"][0]  # <s> / [CLS]
    last = tokenizer("x")["input_ids"][-1]  # </s> / [SEP]
    filled = [[True, True, True, True], [True, True, False, False]]
    for row in range(2):
        for slot in range(K + 1):
            start = slot * L
            tokens = ids[row, start : start + L]
            length = int(mask[row, start : start + L].sum())
            if filled[row][slot]:
                text = FEATURES[row]["question"] if slot == 0 else FEATURES[row]["candidates"][slot - 1]
                expected = tokenizer(text, truncation=True, max_length=L)["input_ids"]
                assert tokens[:length].tolist() == expected and tokens[0] == first and tokens[length - 1] == last
                assert (tokens[length:] == tokenizer.pad_token_id).all()
            else:
                assert length == 0 and (tokens == tokenizer.pad_token_id).all()
    assert batch["token_type_ids"][0].tolist() == [slot for slot in range(K + 1) for _ in range(L)]
    assert batch["labels"].tolist() == [[1, 1, 0], [1, -100, -100]]
    # A long text is cut to fit its slot, special tokens kept.
    layout = SlotLayout.from_tokenizer(tokenizer, K, L)
    long = layout.slot(list(range(100, 200)))
    assert len(long) == L and long[0] == first and long[-1] == last


@pytest.mark.parametrize("positions", ["global", "per_slot"])
def test_derived_token_types_and_positions(stock_checkpoint, positions):
    model, tokenizer = load_joint(stock_checkpoint("roberta"), slot_positions=positions)
    perturb(model)
    batch = batch_for(tokenizer, FEATURES)
    types, position_ids, filled = model.slot_inputs(batch["input_ids"], attention_mask=batch["attention_mask"])
    torch.testing.assert_close(types, batch["token_type_ids"])
    offset = tokenizer.pad_token_id + 1  # RoBERTa numbers positions from padding_idx + 1
    expected = list(range(L)) * (K + 1) if positions == "per_slot" else list(range((K + 1) * L))
    assert position_ids[1].tolist() == [p + offset for p in expected]
    assert filled.tolist() == [[True] * 4, [True, True, False, False]]
    explicit = model(**batch, position_ids=position_ids).logits
    derived = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(explicit, derived)
    with pytest.raises(ValueError, match=r"reads \(k\+1\) x L = 4 x 16 = 64 tokens per input, got 40"):
        model(input_ids=batch["input_ids"][:, :40])


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("head", HEADS)
def test_heads_shapes_and_losses_against_hand_computation(stock_checkpoint, backbone, head):
    model, tokenizer = load_joint(stock_checkpoint(backbone), head=head)
    perturb(model)
    batch = batch_for(tokenizer, FEATURES)
    if head.endswith("_1"):
        batch["labels"] = torch.tensor([2, 0])
    out = model(**batch)
    with torch.no_grad():
        _, positions, _ = model.slot_inputs(batch["input_ids"])
        hidden = model.base_model(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
            position_ids=positions,
        ).last_hidden_state
        slots = model._slot_embeddings(hidden)  # (2, K+1, H)
        if head == "IE_1":
            expected = model._classify(slots[:, 0])
        elif head == "AE_1":  # the mean over filled slots only: row 1 has slots 0 and 1
            means = torch.stack([slots[0].mean(0), slots[1, :2].mean(0)])
            expected = model._classify(means)
        elif head == "IE_k":
            expected = model._classify(slots[:, 1:]).squeeze(-1)
        else:
            expected = model._classify(torch.cat([slots[:, :1].expand(-1, K, -1), slots[:, 1:]], -1)).squeeze(-1)
    if head.endswith("_k"):
        assert out.logits.shape == (2, K)
        valid = batch["labels"] != -100
        torch.testing.assert_close(out.logits[valid], expected[valid])
        assert (out.logits[~valid] == torch.finfo(out.logits.dtype).min).all()  # empty slots rank last
        loss = torch.nn.functional.binary_cross_entropy_with_logits(expected[valid], batch["labels"][valid].float())
        scores = model.score(**batch)
        assert scores.shape == (2, K) and (scores[~valid] == 0).all()
    else:
        assert out.logits.shape == (2, 3)
        torch.testing.assert_close(out.logits, expected)
        loss = torch.nn.functional.cross_entropy(expected, batch["labels"])
    torch.testing.assert_close(out.loss, loss)


@pytest.mark.parametrize("backbone", ["roberta", "electra"])
@pytest.mark.parametrize("head", HEADS)
def test_content_of_an_empty_slot_changes_no_valid_score(stock_checkpoint, backbone, head):
    model, tokenizer = load_joint(stock_checkpoint(backbone), head=head)
    perturb(model)
    batch = batch_for(tokenizer, FEATURES)
    batch.pop("labels")
    before = model(**batch).logits
    changed = {key: value.clone() for key, value in batch.items()}
    torch.manual_seed(3)
    for slot in (2, 3):  # empty slots of row 1, and the padding inside its filled slots
        changed["input_ids"][1, slot * L : (slot + 1) * L] = torch.randint(5, 500, (L,))
    padding = changed["attention_mask"][1] == 0
    changed["input_ids"][1][padding] = torch.randint(5, 500, (int(padding.sum()),))
    after = model(**changed).logits
    assert not torch.equal(changed["input_ids"], batch["input_ids"])
    if head.endswith("_k"):
        torch.testing.assert_close(after[1, :1], before[1, :1])
        torch.testing.assert_close(after[0], before[0])
        # Labels on empty slots never reach the loss.
        labels = torch.tensor([[1, 0, 1], [1, -100, -100]])
        noisy = torch.tensor([[1, 0, 1], [1, 1, 0]])
        torch.testing.assert_close(model(**batch, labels=labels).loss, model(**batch, labels=noisy).loss)
    else:
        torch.testing.assert_close(after, before)
    # ... whereas changing a filled candidate does change the scores (the test can fail).
    changed["input_ids"][0, L + 1 : L + 4] = torch.tensor([7, 8, 9])
    assert not torch.allclose(model(**changed).logits[0], before[0])


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("head", ["IE_k", "AE_k"])
@pytest.mark.parametrize("attention", ["all", "own_slot"])
def test_per_slot_positions_make_candidate_scores_permutation_equivariant(stock_checkpoint, backbone, head, attention):
    # Equal candidate token-type rows ("copy": RoBERTa's only row, BERT/ELECTRA's second-segment row) and positions
    # restarted per slot: a candidate's score depends on its text, not on its slot.
    model, tokenizer = load_joint(
        stock_checkpoint(backbone),
        head=head,
        token_type_init="copy",
        slot_positions="per_slot",
        first_token_attention=attention,
    )
    types = model.base_model.embeddings.token_type_embeddings.weight
    perturb(model)
    with torch.no_grad():
        types[2:] = types[1]
    features = [{"question": QUESTION, "candidates": CANDIDATES[:3]}]
    permuted = [{"question": QUESTION, "candidates": [CANDIDATES[2], CANDIDATES[0], CANDIDATES[1]]}]
    scores = model(**batch_for(tokenizer, features)).logits[0]
    permuted_scores = model(**batch_for(tokenizer, permuted)).logits[0]
    torch.testing.assert_close(permuted_scores, scores[[2, 0, 1]], atol=1e-5, rtol=1e-4)
    # With global positions (the paper's) the slot matters: the same permutation does not permute the scores.
    model.config.slot_positions = "global"
    scores = model(**batch_for(tokenizer, features)).logits[0]
    permuted_scores = model(**batch_for(tokenizer, permuted)).logits[0]
    assert not torch.allclose(permuted_scores, scores[[2, 0, 1]], atol=1e-5, rtol=1e-4)


def test_bad_configurations_are_clear(stock_checkpoint, tokenizers):
    folder = stock_checkpoint("bert")
    with pytest.raises(ValueError, match=r"num_candidates \(k\) must be an integer >= 1, got 0"):
        JointMultiCandidateModel.from_pretrained(folder, num_candidates=0, slot_length=L)
    with pytest.raises(ValueError, match="slot_length=2 is shorter than the special tokens"):
        JointMultiCandidateModel.from_pretrained(folder, num_candidates=K, slot_length=2)
    with pytest.raises(ValueError, match=r"needs 384 positions .* has 136 \(max_position_embeddings=136\).*per_slot"):
        JointMultiCandidateModel.from_pretrained(folder)  # k=5, L=64 do not fit a 136-position checkpoint
    with pytest.raises(ValueError, match="head must be one of"):
        JointMultiCandidateModel.from_pretrained(folder, num_candidates=K, slot_length=L, head="AE_2")
    with pytest.raises(ValueError, match="num_labels must be 1"):
        JointBertConfig(num_candidates=K, slot_length=L, head="IE_k", num_labels=3)
    with pytest.raises(ValueError, match="have roberta, bert, electra backbones"):
        JointMultiCandidateModel.model_class("gpt2")
    with pytest.raises(OSError, match="factory"):
        JointMultiCandidateModel()
    # The tokenizer's own special tokens decide the minimum (BERT, RoBERTa: 2 special tokens + 1 of text).
    with pytest.raises(ValueError, match=r"slot_length must be >= 3"):
        SlotLayout.from_tokenizer(tokenizers["roberta"], 2, 2)
    with pytest.raises(ValueError, match="do not fit in 3 slots"):
        SlotLayout.from_tokenizer(tokenizers["bert"], 3, 8).build([5], [[6]] * 4)


def test_from_config_builds_every_backbone_from_scratch(tokenizers):
    from transformers import ElectraConfig, RobertaConfig

    config = RobertaConfig(vocab_size=len(tokenizers["roberta"]), hidden_size=32, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=37, max_position_embeddings=80)  # fmt: skip
    model = JointMultiCandidateModel.from_config(config, num_candidates=K, slot_length=L, head="IE_k")
    assert type(model).__name__ == "RobertaForJointMultiCandidate" and model.config.type_vocab_size == K + 1
    electra = ElectraConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=37)  # fmt: skip
    pretraining = JointMultiCandidateModel.from_config(electra, pretraining=True, num_candidates=K, slot_length=L)
    assert type(pretraining).__name__ == "ElectraForJointPretraining"
    assert pretraining.get_output_embeddings().weight is pretraining.electra.embeddings.word_embeddings.weight
    with pytest.raises(ValueError, match="MSPP pre-training predicts one label per candidate"):
        RobertaForJointPretraining(JointRobertaConfig(vocab_size=100, head="AE_1", num_candidates=K, slot_length=L))


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_mspp_pretraining_model_and_its_folder_fine_tunes(stock_checkpoint, tmp_path, backbone):
    folder = stock_checkpoint(backbone)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = JointMultiCandidateModel.from_pretrained(
        folder, pretraining=True, num_candidates=K, slot_length=L, head="AE_k", pad_token_id=tokenizer.pad_token_id
    )
    perturb(model)
    model.eval()
    collator = JointCollator(tokenizer, K, L, mlm_probability=0.3, seed=0, label_name="sentence_labels")
    batch = collator([{"text_a": QUESTION, "candidates": CANDIDATES[:3], "labels": [0, 1, 0]}] * 2)
    out = model(**batch)
    torch.testing.assert_close(out.loss, out.mlm_loss + out.cls_loss)
    assert out.cls_logits.shape == (2, K) and out.mlm_logits is None
    _, positions, _ = model.slot_inputs(batch["input_ids"])
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    hidden = model.base_model(**inputs, position_ids=positions)[0]
    masked = batch["labels"] != -100
    assert masked.any() and not (masked & (batch["attention_mask"] == 0)).any()
    logits = model.get_output_embeddings()(
        {"roberta": lambda h: model.lm_head.layer_norm(torch.nn.functional.gelu(model.lm_head.dense(h))),
         "bert": lambda h: model.cls.predictions.transform(h),
         "electra": lambda h: model.generator_predictions(h)}[backbone](hidden)
    )  # fmt: skip
    by_hand = torch.nn.functional.cross_entropy(logits[masked], batch["labels"][masked])
    torch.testing.assert_close(out.mlm_loss, by_hand)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == f"joint_{backbone}" and "custom_pipelines" not in config
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForPreTraining"}
    assert type(AutoModelForPreTraining.from_pretrained(tmp_path)) is type(model)
    fine_tuning, info = JointMultiCandidateModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"], info["missing_keys"]  # encoder AND the MSPP head carry over
    torch.testing.assert_close(fine_tuning.classifier.state_dict(), model.classifier.state_dict())
    fine_tuning.eval()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    torch.testing.assert_close(fine_tuning(**inputs).logits, model(**inputs).cls_logits)


FRESH_PROCESS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json
    import torch
    from transformers import AutoModel, pipeline
    try:
        import as2hub  # noqa: F401
        raise SystemExit("as2hub must not be importable here")
    except ModuleNotFoundError:
        pass
    cases = json.loads(sys.argv[1])
    report = {}
    for folder, inputs in cases.items():
        batch = torch.load(f"{folder}/batch.pt")
        model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
        assert "as2hub" not in type(model).__module__, type(model).__module__
        with torch.no_grad():
            logits = model(**batch).logits.tolist()
        pipe = pipeline(model=folder, trust_remote_code=True)  # the task the folder registers
        report[folder] = {"logits": logits, "class": type(model).__name__, "task": pipe.task, "pipeline": pipe(inputs)}
    print("REPORT" + json.dumps(report))
    """
)


@pytest.mark.slow
def test_round_trip_in_a_fresh_process_without_as2hub_for_every_head(stock_checkpoint, tmp_path):
    expected, cases = {}, {}
    # Every head on the BERT family (MiniLM, the benchmarks' backbone), and one of each kind on RoBERTa and ELECTRA.
    # And the own-slot first-token attention (the run scripts' default) on every backbone.
    combinations = [("bert", head, "all") for head in HEADS] + [("roberta", "AE_k", "all"), ("electra", "AE_1", "all")]
    combinations += [(backbone, "AE_k", "own_slot") for backbone in ("bert", "roberta", "electra")]
    for backbone, head, attention in combinations:
        model, tokenizer = load_joint(stock_checkpoint(backbone), head=head, first_token_attention=attention)
        perturb(model)
        folder = tmp_path / f"{backbone}-{attention}-{head}"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        batch = batch_for(tokenizer, FEATURES)
        batch.pop("labels")
        torch.save(batch, folder / "batch.pt")
        ranking = head.endswith("_k")
        inputs = {"question": QUESTION, "candidates": CANDIDATES} if ranking else {
            "claim": QUESTION, "evidences": CANDIDATES[:2]}  # fmt: skip
        with torch.no_grad():
            if ranking:
                scores = JointRanker(model, tokenizer).score(QUESTION, CANDIDATES)
            else:
                single = batch_for(tokenizer, [{"claim": QUESTION, "evidences": CANDIDATES[:2]}])
                scores = model.score(**single)[0].tolist()
            expected[str(folder)] = (model(**batch).logits, type(model).__name__, scores)
        cases[str(folder)] = inputs
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(cases)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("REPORT", 1)[1])
    for folder, (logits, class_name, scores) in expected.items():
        got = report[folder]
        assert got["class"] == class_name
        torch.testing.assert_close(torch.tensor(got["logits"]), logits, atol=1e-5, rtol=1e-5)
        if folder.endswith("_k"):
            assert got["task"] == "joint-ranking"
            assert [r["index"] for r in got["pipeline"]] == sorted(range(len(scores)), key=lambda i: -scores[i])
            assert [r["score"] for r in got["pipeline"]] == pytest.approx(sorted(scores, reverse=True), abs=1e-5)
            assert {r["candidate"] for r in got["pipeline"]} == set(CANDIDATES)
        else:
            assert got["task"] == "joint-classification"
            assert {r["label"]: r["score"] for r in got["pipeline"]} == pytest.approx(
                {FV_LABELS[i]: s for i, s in enumerate(scores)}, abs=1e-5
            )


def attention_maps(model, batch):
    model.set_attn_implementation("eager")
    with torch.no_grad():
        return model(**batch, output_attentions=True).attentions


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_own_slot_first_tokens_attend_only_to_their_slot_and_the_question(stock_checkpoint, backbone):
    model, tokenizer = load_joint(stock_checkpoint(backbone), first_token_attention="own_slot")
    perturb(model)
    batch = batch_for(tokenizer, FEATURES)
    batch.pop("labels")
    slot = torch.arange((K + 1) * L) // L
    keys = batch["attention_mask"].bool()
    for layer in attention_maps(model, batch):
        for row in range(len(FEATURES)):
            weights = layer[row].sum(0)  # summed over heads: (query, key)
            assert (weights[:, ~keys[row]] == 0).all()  # padding is never attended to
            for query in range((K + 1) * L):  # padded rows too: an empty slot's first token reaches the question only
                reached = weights[query] > 0
                if query % L == 0 and query >= L:  # a candidate's first token: its own slot and the question
                    assert torch.equal(reached, keys[row] & ((slot == slot[query]) | (slot == 0)))
                else:  # every other token: the whole input
                    assert torch.equal(reached, keys[row])
    # The same logits with the default attention kernel (sdpa), and different ones with the paper's full attention.
    with torch.no_grad():
        eager = model(**batch).logits
        model.set_attn_implementation("sdpa")
        own = model(**batch).logits
        torch.testing.assert_close(own, eager, atol=1e-5, rtol=1e-5)
        model.config.first_token_attention = "all"
        full = model(**batch).logits
    assert not torch.allclose(own[0], full[0], atol=1e-4)


def test_own_slot_refuses_kernels_and_masks_it_cannot_serve(stock_checkpoint):
    model, tokenizer = load_joint(stock_checkpoint("bert"), first_token_attention="own_slot")
    batch = batch_for(tokenizer, FEATURES)
    batch.pop("labels")
    square = batch["attention_mask"][:, None, None, :].expand(-1, 1, (K + 1) * L, -1)
    with pytest.raises(ValueError, match=r"takes a \(batch, \(k\+1\)·L\) padding mask .* shape \(2, 1, 64, 64\)"):
        model(**{**batch, "attention_mask": square})
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="'flash_attention_2' attention kernel cannot take"):
        model(**batch)


def test_first_token_attention_has_one_default_and_is_checked(stock_checkpoint, tmp_path):
    config = JointBertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
    assert config.first_token_attention == "own_slot"  # a new joint model
    fresh = JointMultiCandidateModel.from_pretrained(stock_checkpoint("bert"), num_candidates=K, slot_length=L)
    assert fresh.config.first_token_attention == "own_slot"  # a stock checkpoint grown into a joint model
    # A joint folder saved before the field existed loads with the paper's full attention.
    model, tokenizer = load_joint(stock_checkpoint("bert"), first_token_attention="own_slot")
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["first_token_attention"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    legacy = JointMultiCandidateModel.from_pretrained(tmp_path).eval()
    assert legacy.config.first_token_attention == "all"
    with pytest.raises(ValueError, match="first_token_attention must be one of"):
        JointBertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        first_token_attention="local")  # fmt: skip
    with torch.no_grad():  # "all": every first token reaches every slot
        batch = batch_for(tokenizer, FEATURES)
        batch.pop("labels")
        weights = attention_maps(perturb(legacy), batch)[0][0].sum(0)
    assert (weights[L][batch["attention_mask"][0].bool()] > 0).all()


def test_saved_folder_is_hub_ready(stock_checkpoint, tmp_path):
    model, tokenizer = load_joint(stock_checkpoint("electra"), head="IE_1")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "joint_electra" and config["type_vocab_size"] == K + 1
    assert config["auto_map"] == {
        "AutoConfig": "configuration_joint_multicandidate.JointElectraConfig",
        "AutoModel": "modeling_joint_multicandidate.ElectraForJointMultiCandidate",
    }
    assert config["custom_pipelines"] == {
        "joint-classification": {
            "impl": "pipeline_joint_multicandidate.JointRankingPipeline",
            "pt": ["AutoModel"],
            "type": "text",
        }
    }
    shipped = {p.name for p in tmp_path.glob("*.py")}
    assert shipped == {
        "configuration_joint_multicandidate.py",
        "modeling_joint_multicandidate.py",
        "pipeline_joint_multicandidate.py",
        "joint_layout.py",
        "hub_common.py",
        "pretraining_heads.py",
        "unpadding.py",
    }
    assert not (tmp_path / "unpadding.py").is_symlink()
    assert type(AutoModel.from_pretrained(tmp_path)) is type(model)


def test_pipeline_and_ranker_rank_more_than_k_candidates_consistently(stock_checkpoint, tmp_path):
    model, tokenizer = load_joint(stock_checkpoint("bert"), head="AE_k")
    perturb(model)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ranked = JointRanker(model, tokenizer, batch_size=1).rank(QUESTION, CANDIDATES)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    assert sorted(r.index for r in ranked) == list(range(5)) and {r.stage for r in ranked} == {"joint"}
    # Groups of k in input order: candidates 0-2 in one pass, 3-4 in a second one with an empty slot.
    first = model.score(**batch_for(tokenizer, [{"question": QUESTION, "candidates": CANDIDATES[:3]}]))[0]
    second = model.score(**batch_for(tokenizer, [{"question": QUESTION, "candidates": CANDIDATES[3:]}]))[0]
    by_index = {r.index: r.score for r in ranked}
    assert [by_index[i] for i in range(5)] == pytest.approx([*first.tolist(), *second[:2].tolist()], abs=1e-6)
    pipe = pipeline("joint-ranking", model=str(tmp_path), trust_remote_code=True)
    out = pipe({"question": QUESTION, "candidates": CANDIDATES}, top_k=2)
    assert [(o["index"], o["candidate"]) for o in out] == [(r.index, r.text) for r in ranked[:2]]
    assert [o["score"] for o in out] == pytest.approx([r.score for r in ranked[:2]], abs=1e-6)
    for bad, message in (
        ({"question": QUESTION, "candidates": []}, "no candidates"),
        ({"question": QUESTION, "candidates": "not a list"}, "must be a list of strings"),
        ({"question": "", "candidates": CANDIDATES}, "non-empty string"),
    ):
        with pytest.raises(ValueError, match=message):
            pipe(bad)
    with pytest.raises(ValueError, match="no candidates"):
        JointRanker(model, tokenizer).rank(QUESTION, [])


def test_cascade_reranks_the_pairwise_top_k_and_keeps_the_rest(stock_checkpoint):
    from as2hub.modeling import CONTEXTUAL_MODELS

    folder = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    pairwise = perturb(CONTEXTUAL_MODELS["bert"][1].from_pretrained(folder, contextual=False), seed=5, scale=0.3)
    pairwise_ranker = Ranker(pairwise, tokenizer)
    joint, _ = load_joint(folder, head="IE_k")
    perturb(joint, seed=7, scale=0.3)
    cascade = JointRanker(joint, tokenizer, pairwise=pairwise_ranker).rank(QUESTION, CANDIDATES)
    pair_scores = pairwise_ranker.score_pairs([QUESTION] * 5, CANDIDATES).tolist()
    top = sorted(range(5), key=lambda i: -pair_scores[i])[:K]
    joint_scores = JointRanker(joint, tokenizer).score(QUESTION, [CANDIDATES[i] for i in top])
    expected_top = [top[j] for j in sorted(range(K), key=lambda j: -joint_scores[j])]
    assert [r.index for r in cascade[:K]] == expected_top and {r.stage for r in cascade[:K]} == {"joint"}
    rest = sorted(set(range(5)) - set(top), key=lambda i: -pair_scores[i])
    assert [r.index for r in cascade[K:]] == rest and {r.stage for r in cascade[K:]} == {"pairwise"}
    assert [r.score for r in cascade[K:]] == pytest.approx([pair_scores[i] for i in rest], abs=1e-6)
    assert cascade_order([0.9, 0.1, 0.5, 0.7], {0: 0.2, 3: 0.8}) == [
        (3, 0.8, "joint"), (0, 0.2, "joint"), (2, 0.5, "pairwise"), (1, 0.1, "pairwise")]  # fmt: skip
    with pytest.raises(ValueError, match="IE_k or AE_k head"):
        JointRanker(load_joint(folder, head="AE_1")[0], tokenizer)


def test_lora_trains_the_head_and_token_types(stock_checkpoint):
    from as2hub.modeling.lora import add_lora

    model, tokenizer = load_joint(stock_checkpoint("roberta"), head="AE_k")
    peft_model = add_lora(model, r=4)
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_A" in name for name in trainable) and any("classifier" in name for name in trainable)
    assert any("token_type_embeddings" in name for name in trainable)
    batch = batch_for(tokenizer, FEATURES)
    out = peft_model(**batch)
    out.loss.backward()
    assert out.logits.shape == (2, K)


def test_bert_family_reads_every_slot_through_the_pooler(stock_checkpoint):
    model, tokenizer = load_joint(stock_checkpoint("bert"), head="IE_k")
    assert isinstance(model, BertForJointMultiCandidate)
    hidden = torch.randn(2, (K + 1) * L, model.config.hidden_size)
    pooled = model._slot_embeddings(hidden)
    for slot in range(K + 1):
        torch.testing.assert_close(pooled[:, slot], model.bert.pooler(hidden[:, slot * L :]))

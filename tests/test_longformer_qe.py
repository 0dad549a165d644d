"""LongformerWithQEContrastive: the losses against hand computations, padded batches, gradient checkpointing,
checkpoints (Longformer, RoBERTa / BERT converted by from_short_encoder), Hub folder and a fresh-process round trip."""

import copy
import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import BACKBONES, BLOCK_AS2HUB
from qe_records import RECORDS
from transformers import AutoModel, AutoModelForQuestionAnswering, LongformerConfig, LongformerModel

from as2hub.data_collators import HotpotQACollator, HotpotQAEncoder, add_marker_tokens, read_hotpotqa
from as2hub.modeling import LongformerQEConfig, LongformerWithQEContrastive
from as2hub.modeling.longformer_qe import question_evidence_loss

TYPES = ["span", "yes", "no"]


def tiny_config(**overrides):
    values = {
        "vocab_size": 120,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "attention_window": 8,
        "max_position_embeddings": 130,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "qe_dropout": 0.0,
        "qe_temperatures": [0.2, 0.5, 0.9],
        "contrastive_weight": 0.3,
        "qe_projection_dim": 16,
        **overrides,
    }
    return LongformerQEConfig(**values)


def tiny_model(**overrides):
    torch.manual_seed(0)
    model = LongformerWithQEContrastive(tiny_config(**overrides)).eval()
    with torch.no_grad():  # move the heads off their init so nothing is trivially zero
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def hand_batch():
    """Four examples of lengths 20, 16, 24, 20 (padded to 24): several positives, no evidence, an unknown type."""
    torch.manual_seed(1)
    lengths = [20, 16, 24, 20]
    input_ids = torch.randint(5, 120, (4, 24))
    attention_mask = torch.zeros(4, 24, dtype=torch.long)
    for i, n in enumerate(lengths):
        attention_mask[i, :n] = 1
        input_ids[i, n:] = 1  # pad
    sentence_index = torch.tensor([[4, 8, 12, 16, 0], [5, 9, 13, 0, 0], [3, 7, 11, 15, 19], [6, 10, 0, 0, 0]])
    sentence_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]).bool()
    sentence_labels = torch.tensor(
        [[1, 0, 1, 0, -100], [0, 0, 0, -100, -100], [0, 1, 0, 0, 1], [1, 0, -100, -100, -100]]
    )  # example 1 has no evidence
    span_mask = attention_mask.bool().clone()
    span_mask[:, :3] = False
    global_attention_mask = torch.zeros_like(attention_mask)
    global_attention_mask[:, :3] = 1
    global_attention_mask.scatter_(1, sentence_index, 1)
    global_attention_mask *= attention_mask
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "global_attention_mask": global_attention_mask,
        "question_index": torch.tensor([1, 1, 1, 1]),
        "sentence_index": sentence_index,
        "sentence_mask": sentence_mask,
        "paragraph_index": torch.tensor([[3, 11], [4, 0], [2, 14], [5, 0]]),
        "paragraph_mask": torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]]).bool(),
        "span_mask": span_mask,
        "question_type": torch.tensor([0, 1, 2, -100]),  # example 3: unknown type, left out of L_QE
        "sentence_labels": sentence_labels,
        "paragraph_labels": torch.tensor([[1, 0], [0, -100], [1, 1], [0, -100]]),
        "start_positions": torch.tensor([[5, 9, -1], [-1, -1, -1], [-1, -1, -1], [6, -1, -1]]),
        "end_positions": torch.tensor([[6, 10, -1], [-1, -1, -1], [-1, -1, -1], [7, -1, -1]]),
        "answer_type_labels": torch.tensor([0, 1, 2, 0]),
    }


def hand_qe_loss(model, batch) -> float:
    """Eq. 1 of the paper computed example by example with plain floats."""
    config = model.config
    with torch.no_grad():
        hidden = model.longformer(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            global_attention_mask=batch["global_attention_mask"],
        ).last_hidden_state
    temperatures = list(config.qe_temperatures)
    if config.qe_shared_temperature:
        temperatures = [temperatures[0]] * len(temperatures)
    kind = config.qe_similarity

    def cosine(a, b):
        return float(a @ b) / (float(a.norm()) * float(b.norm()))

    def sim(k, s, q):
        p = 0 if config.qe_single_projection else k
        if kind == "cosine":
            return cosine(s, q)
        if kind == "dot":
            return float(s @ q)
        if kind == "bilinear":
            return float(s @ (model.qe.query_projections[p].weight @ q))
        return cosine(model.qe.sentence_projections[p].weight @ s, model.qe.query_projections[p].weight @ q)

    model.qe.requires_grad_(False)  # plain numbers from here on
    type_specific = kind in ("projected_cosine", "bilinear") and not config.qe_single_projection
    losses = []
    for i in range(batch["input_ids"].shape[0]):
        k = int(batch["question_type"][i])
        count = int(batch["sentence_mask"][i].sum())
        labels = batch["sentence_labels"][i, :count].tolist()
        if k < 0 or 1 not in labels:
            continue  # no evidence or unknown type: left out
        q = hidden[i, int(batch["question_index"][i])]
        sentences = [hidden[i, int(batch["sentence_index"][i, j])] for j in range(count)]
        tau = temperatures[k]
        numerator = sum(math.exp(sim(k, s, q) / tau) for s, y in zip(sentences, labels) if y == 1)
        denominator = sum(math.exp(sim(k, s, q) / tau) for s in sentences)
        if config.qe_wrong_type_negatives and type_specific:
            for j in range(len(TYPES)):
                if j != k:
                    denominator += sum(math.exp(sim(j, s, q) / tau) for s, y in zip(sentences, labels) if y == 1)
        losses.append(-math.log(numerator / denominator))
    return sum(losses) / len(losses)


def test_config_defaults_and_validation():
    config = LongformerQEConfig(hidden_size=64, num_attention_heads=2)
    assert config.question_types == config.answer_types == ["span", "yes", "no"]
    assert config.question_type_key == "answer_type" and config.qe_similarity == "projected_cosine"
    assert (config.contrastive_weight, config.qe_temperatures, config.qe_dropout) == (0.2, [0.2, 0.4, 0.6], 0.1)
    assert LongformerQEConfig(hidden_size=64, num_attention_heads=2, question_types=["a", "b"]).qe_temperatures == [
        0.2,
        0.4,
    ]
    assert config.qe_projection_dim == 64 and config.qe_wrong_type_negatives and not config.qe_single_projection
    for bad, message in (
        ({"qe_similarity": "l2"}, "qe_similarity must be one of"),
        ({"qe_temperatures": [0.2, 0.4]}, "2 values for 3 question types"),
        ({"qe_temperatures": [0.2, 0.0, 0.1]}, "must be positive"),
        ({"contrastive_weight": 1.5}, r"must be in \[0, 1\]"),
        ({"question_type_key": "level"}, "question_type_key must be one of"),
        ({"answer_types": ["span", "none"]}, "must not contain 'none'"),
    ):
        with pytest.raises(ValueError, match=message):
            LongformerQEConfig(**bad)


ABLATIONS = {
    "paper": {},
    "no_wrong_type_negatives": {"qe_wrong_type_negatives": False},
    "single_projection": {"qe_single_projection": True},
    "shared_temperature": {"qe_shared_temperature": True},
    "raw_cosine": {"qe_similarity": "cosine"},
    "dot_product": {"qe_similarity": "dot", "qe_temperatures": [20.0, 30.0, 50.0]},
    "bilinear": {"qe_similarity": "bilinear"},
}


def test_default_temperatures_are_per_type_so_the_shared_ablation_changes_the_loss():
    """Under the config's defaults, qe_shared_temperature (table 4's ablation) must change L_QE: the default τ_k differ."""
    losses = {}
    for shared in (False, True):
        config = tiny_config(qe_temperatures=None, qe_shared_temperature=shared)  # the config's default τ
        torch.manual_seed(0)
        model = LongformerWithQEContrastive(config).eval()
        assert model.qe.temperatures().tolist() == pytest.approx([0.2, 0.2, 0.2] if shared else [0.2, 0.4, 0.6])
        losses[shared] = model(**hand_batch()).qe_loss.item()
        assert losses[shared] == pytest.approx(hand_qe_loss(model, hand_batch()), rel=1e-4)
    assert abs(losses[True] - losses[False]) > 1e-3, losses


@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_qe_loss_equals_a_hand_computation(ablation):
    model = tiny_model(**ABLATIONS[ablation])
    batch = hand_batch()
    out = model(**batch)
    assert out.qe_loss.item() == pytest.approx(hand_qe_loss(model, batch), rel=1e-4)
    assert out.loss.item() == pytest.approx(0.7 * out.qa_loss.item() + 0.3 * out.qe_loss.item(), rel=1e-5)
    # The per-sentence similarity under each example's own type is returned.
    assert out.type_similarity.shape == (4, 3, 5) and out.sentence_similarity.shape == (4, 5)
    own = out.type_similarity[0, 0, :4]
    torch.testing.assert_close(out.sentence_similarity[0, :4], own)


def test_wrong_type_negatives_are_the_evidence_under_the_other_projections():
    model = tiny_model()
    batch = hand_batch()
    sim = model(**batch).type_similarity
    with_negatives = question_evidence_loss(
        sim, torch.tensor([0.2, 0.5, 0.9]), batch["question_type"], batch["sentence_labels"], batch["sentence_mask"]
    )
    without = question_evidence_loss(
        sim,
        torch.tensor([0.2, 0.5, 0.9]),
        batch["question_type"],
        batch["sentence_labels"],
        batch["sentence_mask"],
        False,
    )
    assert with_negatives > without  # more terms in every denominator


def test_no_evidence_anywhere_gives_zero_never_nan():
    model = tiny_model()
    batch = hand_batch()
    batch["sentence_labels"] = batch["sentence_labels"].clamp(max=0)
    out = model(**batch)
    assert out.qe_loss.item() == 0.0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_span_loss_over_all_occurrences_and_masked_heads():
    model = tiny_model()
    batch = hand_batch()
    out = model(**batch)
    start = out.start_logits.log_softmax(-1)
    end = out.end_logits.log_softmax(-1)
    # Example 0 has two gold occurrences, example 3 one; examples 1 and 2 (yes / no) have none.
    example0 = -(torch.logsumexp(start[0, [5, 9]], 0) + torch.logsumexp(end[0, [6, 10]], 0)) / 2
    example3 = -(start[3, 6] + end[3, 7]) / 2
    assert out.span_loss.item() == pytest.approx(((example0 + example3) / 2).item(), rel=1e-5)
    assert out.answer_type_loss.item() == pytest.approx(
        torch.nn.functional.cross_entropy(out.answer_type_logits, batch["answer_type_labels"]).item(), rel=1e-5
    )
    keep = batch["sentence_labels"] >= 0
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        out.sentence_logits[keep], batch["sentence_labels"][keep].float()
    )
    assert out.sentence_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert out.qa_loss.item() == pytest.approx(
        (out.span_loss + out.answer_type_loss + out.sentence_loss + out.paragraph_loss).item(), rel=1e-5
    )
    lowest = torch.finfo(out.start_logits.dtype).min
    assert (out.start_logits[~batch["span_mask"]] == lowest).all()  # never a span outside the context


def test_a_padded_batch_gives_each_example_its_own_outputs():
    model = tiny_model()
    batch = hand_batch()
    batch.pop("question_type")
    out = model(**{k: v for k, v in batch.items() if "label" not in k and "positions" not in k})
    for i, n in enumerate([20, 16, 24, 20]):
        single = {k: v[i : i + 1] for k, v in batch.items() if "label" not in k and "positions" not in k}
        single["input_ids"], single["attention_mask"] = single["input_ids"][:, :n], single["attention_mask"][:, :n]
        single["global_attention_mask"], single["span_mask"] = (
            single["global_attention_mask"][:, :n],
            single["span_mask"][:, :n],
        )
        alone = model(**single)
        count = int(batch["sentence_mask"][i].sum())
        torch.testing.assert_close(
            alone.sentence_logits[0, :count], out.sentence_logits[i, :count], atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(alone.start_logits[0], out.start_logits[i, :n], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(
            alone.sentence_similarity[0, :count], out.sentence_similarity[i, :count], atol=1e-5, rtol=1e-4
        )


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    results = []
    for checkpointing in (False, True):
        model = tiny_model().train()
        if checkpointing:
            model.activation_checkpointing_enable()
        out = model(**hand_batch())
        out.loss.backward()
        results.append(
            (
                out.loss.detach(),
                model.qe.query_projections[0].weight.grad.clone(),
                model.longformer.encoder.layer[0].attention.self.query.weight.grad.clone(),
            )
        )
    for plain, checkpointed in zip(*results):
        torch.testing.assert_close(plain, checkpointed)


def test_lambda_zero_skips_the_contrastive_term_in_training():
    model = tiny_model(contrastive_weight=0.0).train()
    out = model(**hand_batch())
    assert out.qe_loss is None and out.sentence_similarity is None
    torch.testing.assert_close(out.loss, out.qa_loss)
    out.loss.backward()
    assert model.qe.query_projections[0].weight.grad is None
    assert model.eval()(**hand_batch()).sentence_similarity is not None  # evaluation still reports it


def test_learnable_temperatures_train_and_survive_save_and_load(tmp_path):
    model = tiny_model(qe_learnable_temperature=True).train()
    model(**hand_batch()).loss.backward()
    assert model.qe.log_temperature.grad.abs().sum() > 0
    with torch.no_grad():
        model.qe.log_temperature.add_(0.1)
    model.save_pretrained(tmp_path)
    loaded = LongformerWithQEContrastive.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.qe.temperatures(), model.qe.temperatures())
    fixed = tiny_model()
    fixed.save_pretrained(tmp_path / "fixed")  # not learnable: from the config, not from the weights
    torch.testing.assert_close(
        LongformerWithQEContrastive.from_pretrained(tmp_path / "fixed").qe.temperatures(), torch.tensor([0.2, 0.5, 0.9])
    )


# ------------------------------------------------------------------------------------------------------------------
# Checkpoints


def test_loads_a_stock_longformer_checkpoint(tmp_path):
    config = LongformerConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        attention_window=8,
        max_position_embeddings=130,
    )
    torch.manual_seed(3)
    stock = LongformerModel(config, add_pooling_layer=False)
    stock.save_pretrained(tmp_path)
    model = LongformerWithQEContrastive.from_pretrained(tmp_path, question_types=["bridge", "comparison"])
    assert model.config.model_type == "longformer_qe" and model.qe.num_types == 2
    model.save_pretrained(tmp_path / "qe")
    assert json.loads((tmp_path / "qe" / "config.json").read_text())["model_type"] == "longformer_qe"
    stock_state = stock.state_dict()
    for name, value in model.longformer.state_dict().items():
        torch.testing.assert_close(value, stock_state[name], msg=name)


@pytest.mark.parametrize("backbone", ["roberta", "bert"])
def test_from_short_encoder_matches_the_short_model(stock_checkpoint, tokenizers, backbone):
    folder = stock_checkpoint(backbone)
    short = BACKBONES[backbone][2].from_pretrained(folder).eval()
    model = LongformerWithQEContrastive.from_short_encoder(folder, max_position_embeddings=400, attention_window=64)
    model.eval()
    tokenizer = tokenizers[BACKBONES[backbone][0]]
    texts = ["What does the import statement do? It finds a module.", "A generator yields values."]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] <= 32  # within half the window: every token sees every other
    batch.pop("token_type_ids", None)
    global_mask = torch.zeros_like(batch["input_ids"])
    global_mask[:, [0, 3, 5]] = 1  # global attention uses the copied query / key / value
    with torch.no_grad():
        expected = short(**batch).last_hidden_state
        local = model.longformer(**batch).last_hidden_state
        with_global = model.longformer(**batch, global_attention_mask=global_mask).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(local[real], expected[real], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(with_global[real], expected[real], atol=1e-5, rtol=1e-4)
    # Positions are tiled from the short table (RoBERTa keeps its offset pad + 1; BERT's rows move up by pad + 1).
    old = short.embeddings.position_embeddings.weight
    new = model.longformer.embeddings.position_embeddings.weight
    offset = model.config.pad_token_id + 1
    source_offset = offset if backbone == "roberta" else 0
    usable = old.shape[0] - source_offset
    assert new.shape[0] == 400 + offset
    for j in (0, 5, usable - 1, usable, usable + 7, 399):
        torch.testing.assert_close(new[offset + j], old[source_offset + j % usable])
    assert model.config.type_vocab_size == short.config.type_vocab_size
    long_ids = torch.randint(5, len(tokenizer), (1, 300))  # longer than the short model's 136 positions
    assert model.longformer(long_ids).last_hidden_state.shape == (1, 300, 32)


def test_saved_folder_is_hub_ready(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "longformer_qe"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_longformer_qe.LongformerQEConfig",
        "AutoModel": "modeling_longformer_qe.LongformerWithQEContrastive",
        "AutoModelForQuestionAnswering": "modeling_longformer_qe.LongformerWithQEContrastive",
    }
    assert {p.name for p in tmp_path.glob("*.py")} == {
        "configuration_longformer_qe.py",
        "modeling_longformer_qe.py",
        "hub_common.py",
    }
    for auto in (AutoModel, AutoModelForQuestionAnswering):
        assert type(auto.from_pretrained(tmp_path)) is LongformerWithQEContrastive


FRESH_PROCESS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json
    import torch
    from transformers import AutoModel, AutoModelForQuestionAnswering, AutoTokenizer
    text = sys.argv[1]
    reports = []
    for folder in sys.argv[2:]:
        batch = torch.load(f"{folder}/batch.pt")
        report = {}
        for auto in (AutoModelForQuestionAnswering, AutoModel):
            model = auto.from_pretrained(folder, trust_remote_code=True).eval()
            assert "as2hub" not in type(model).__module__, type(model).__module__
            with torch.no_grad():
                out = model(**batch)
                plain = model(**AutoTokenizer.from_pretrained(folder)(text, return_tensors="pt"))
            report[auto.__name__] = {
                "loss": out.loss.item(),
                "sentence_logits": out.sentence_logits.tolist(),
                "similarity": out.sentence_similarity.tolist(),
                "start_logits": out.start_logits[0, :12].tolist(),
                "plain_sentence_logits": plain.sentence_logits.tolist(),
            }
        reports.append(report)
    print("REPORT" + json.dumps(reports))
    """
)


STYLES = ("roberta", "bert")
PLAIN_TEXT = "[q] Which city has the tower? [/q] <doc-s> <t> Paris </t> <sent> The tower is in Paris. </sent> </doc-s>"


@pytest.fixture(scope="module")
def reloaded(tokenizers, tmp_path_factory) -> dict:
    """A tiny model with each tokenizer style's markers, saved and reloaded in ONE fresh process without as2hub (a
    process per style spent about 10 s of the suite's time each, mostly importing torch and Transformers):
    ``{style: (the saved model's outputs on a collated batch, on PLAIN_TEXT; the fresh process's report)}``."""
    folders, expected = [], {}
    for style in STYLES:
        tokenizer = copy.deepcopy(tokenizers[style])
        model = tiny_model(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, max_position_embeddings=514)
        add_marker_tokens(tokenizer, model)
        folder = tmp_path_factory.mktemp(f"longformer-{style}")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        features, _, _ = HotpotQAEncoder.from_config(tokenizer, model.config, 512).encode_dataset(
            read_hotpotqa(RECORDS)
        )
        batch = HotpotQACollator(tokenizer, pad_to_multiple_of=8)(list(features))
        torch.save(batch, folder / "batch.pt")
        with torch.no_grad():
            expected[style] = model(**batch), model(**tokenizer(PLAIN_TEXT, return_tensors="pt"))
        folders.append(str(folder))
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, PLAIN_TEXT, *folders], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = json.loads(result.stdout.split("REPORT", 1)[1])
    return {style: (*expected[style], report) for style, report in zip(STYLES, reports)}


@pytest.mark.slow
@pytest.mark.parametrize("style", STYLES)
def test_round_trip_in_a_fresh_process_without_as2hub(reloaded, style):
    out, plain, report = reloaded[style]
    assert plain.sentence_logits.shape == (1, 1)  # the model found the markers in plain text
    assert set(report) == {"AutoModelForQuestionAnswering", "AutoModel"}
    for name, got in report.items():
        assert got["loss"] == pytest.approx(out.loss.item(), abs=1e-5), name
        torch.testing.assert_close(torch.tensor(got["sentence_logits"]), out.sentence_logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.tensor(got["similarity"]), out.sentence_similarity, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.tensor(got["start_logits"]), out.start_logits[0, :12], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            torch.tensor(got["plain_sentence_logits"]), plain.sentence_logits, atol=1e-5, rtol=1e-5
        )

"""Structure-aware pre-training models: losses, tied weights, checkpoints in and out, and Trainer integration."""

import json
import os

import pytest
import torch
from safetensors import safe_open
from transformers import (
    BertModel,
    ElectraConfig,
    ElectraForMaskedLM,
    ElectraForPreTraining,
    ElectraForSequenceClassification,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    Trainer,
    TrainingArguments,
)

from as2hub.modeling.contextual_as2 import BertForContextualAS2, ElectraForContextualAS2, RobertaForContextualAS2
from as2hub.modeling.ssp_pretraining import (
    BertForSSPPretraining,
    ElectraForSSPPretraining,
    RobertaForSSPPretraining,
    SSPBertConfig,
    SSPElectraConfig,
    SSPRobertaConfig,
)

VOCAB = 120
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
ROBERTA = dict(TINY, pad_token_id=1, bos_token_id=0, eos_token_id=2, sep_token_id=2)
BERT = dict(TINY, pad_token_id=0, sep_token_id=3)
ELECTRA = dict(BERT, embedding_size=16)
SEP = {RobertaForSSPPretraining: 2, BertForSSPPretraining: 3, ElectraForSSPPretraining: 3}


def tiny(model_class, **overrides):
    config_class, base = {
        RobertaForSSPPretraining: (SSPRobertaConfig, ROBERTA),
        BertForSSPPretraining: (SSPBertConfig, BERT),
        ElectraForSSPPretraining: (SSPElectraConfig, ELECTRA),
    }[model_class]
    torch.manual_seed(0)
    return model_class(config_class(**{**base, **overrides}))


def make_batch(model_class, batch_size=4, length=16, masked_per_row=2, seed=0):
    """Pairs ``CLS a SEP b SEP`` + padding, ``masked_per_row`` [MASK]ed tokens per row, alternating labels."""
    generator = torch.Generator().manual_seed(seed)
    roberta = model_class is RobertaForSSPPretraining
    sep, cls, pad, mask = SEP[model_class], (0 if roberta else 2), (1 if roberta else 0), 4
    ids = torch.randint(5, VOCAB, (batch_size, length), generator=generator)
    ids[:, 0], ids[:, 6], ids[:, length - 3] = cls, sep, sep
    ids[:, length - 2 :] = pad
    attention = (ids != pad).long()
    types = torch.zeros_like(ids)
    types[:, 7 : length - 2] = 1
    labels = torch.full_like(ids, -100)
    for position in range(1, 1 + masked_per_row):
        labels[:, position + 1] = ids[:, position + 1]
        ids[:, position + 1] = mask
    sentence_labels = torch.arange(batch_size) % 2
    return dict(
        input_ids=ids, attention_mask=attention, token_type_ids=types, labels=labels, sentence_labels=sentence_labels
    )


ALL = [RobertaForSSPPretraining, BertForSSPPretraining, ElectraForSSPPretraining]


@pytest.mark.parametrize("model_class", ALL)
def test_loss_is_weighted_sum(model_class):
    weights = dict(
        mlm_weight=2.0, cls_weight=0.5, **({"rtd_weight": 3.0} if model_class is ElectraForSSPPretraining else {})
    )
    out = tiny(model_class, **weights)(**make_batch(model_class))
    expected = 2.0 * out.mlm_loss + 0.5 * out.cls_loss
    if model_class is ElectraForSSPPretraining:
        expected = expected + 3.0 * out.rtd_loss
    torch.testing.assert_close(out.loss, expected)
    assert out.cls_logits.shape == (4, 1) and out.mlm_logits is None
    # MLM-only ablation: a zero CLS weight, or no sentence labels.
    batch = make_batch(model_class)
    ablated = tiny(model_class, cls_weight=0.0)(**batch)
    expected = ablated.mlm_loss + (50.0 * ablated.rtd_loss if model_class is ElectraForSSPPretraining else 0)
    torch.testing.assert_close(ablated.loss, expected)
    batch.pop("sentence_labels")
    assert tiny(model_class)(**batch).cls_loss is None


@pytest.mark.parametrize("model_class", [RobertaForSSPPretraining, BertForSSPPretraining])
def test_full_mlm_logits_give_the_same_loss(model_class):
    batch = make_batch(model_class)
    sparse = tiny(model_class).eval()(**batch)
    full = tiny(model_class, return_mlm_logits=True).eval()(**batch)
    assert full.mlm_logits.shape == (4, 16, VOCAB)
    torch.testing.assert_close(sparse.mlm_loss, full.mlm_loss)
    torch.testing.assert_close(sparse.loss, full.loss)


@pytest.mark.parametrize("model_class", ALL)
def test_cls_accuracy(model_class):
    model = tiny(model_class).eval()
    batch = make_batch(model_class)
    with torch.no_grad():
        logits = model(**batch).cls_logits.view(-1)
    predictions = (logits > 0).long()
    batch["sentence_labels"] = predictions.clone()
    batch["sentence_labels"][0] = 1 - predictions[0]  # one wrong out of four
    with torch.no_grad():
        assert model(**batch).cls_accuracy.item() == pytest.approx(0.75)


def test_electra_rtd_labels_mark_replacements():
    model = tiny(ElectraForSSPPretraining)
    batch = make_batch(ElectraForSSPPretraining)
    out = model(**batch)
    masked = batch["labels"] != -100
    assert out.rtd_labels[~masked].sum() == 0  # only masked positions can be replaced
    assert out.rtd_logits.shape == batch["input_ids"].shape
    # With a generator that always predicts the original token there is nothing to detect.
    with torch.no_grad():
        model.generator_lm_head.bias.fill_(-1e4)
        model.generator_lm_head.bias[batch["labels"][0, 2]] = 1e4
    out = model(**batch)
    assert out.rtd_labels[0, 2] == 0


@pytest.mark.parametrize("sampling", ["multinomial", "gumbel"])
def test_electra_sampling(sampling):
    model = tiny(ElectraForSSPPretraining, sampling=sampling)
    logits = torch.full((2000, VOCAB), -1e4)
    logits[:, 7] = 0.0
    logits[:1000, 9] = 0.0  # first half: 7 or 9 with equal probability
    samples = model.sample(logits)
    assert set(samples[1000:].tolist()) == {7}
    assert 400 < (samples[:1000] == 9).sum() < 600


def test_electra_one_copy_of_shared_embeddings(tmp_path):
    model = tiny(ElectraForSSPPretraining)
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        shared = getattr(model.electra.embeddings, name).weight
        assert getattr(model.generator.embeddings, name).weight is shared
    assert model.generator_lm_head.weight is model.electra.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert {k for k in keys if k.endswith(("word_embeddings.weight", "position_embeddings.weight"))} == {
        "electra.embeddings.word_embeddings.weight",
        "electra.embeddings.position_embeddings.weight",
    }
    assert "generator.embeddings.token_type_embeddings.weight" not in keys and "generator_lm_head.weight" not in keys
    assert "generator.encoder.layer.0.attention.self.query.weight" in keys
    config = json.loads((tmp_path / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForPreTraining"}
    assert config["generator_config"]["hidden_size"] == 8  # round(4 heads / 3) = 1 head of the same size (8)
    # The helper symlinked into the package is saved as a real file.
    assert not os.path.islink(tmp_path / "hub_common.py")
    assert "def infer_token_type_ids" in (tmp_path / "hub_common.py").read_text()

    reloaded, info = ElectraForSSPPretraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert reloaded.generator.embeddings.word_embeddings.weight is reloaded.electra.embeddings.word_embeddings.weight
    batch = make_batch(ElectraForSSPPretraining)
    model.eval(), reloaded.eval()
    torch.manual_seed(1)
    expected = model(**batch)
    torch.manual_seed(1)
    actual = reloaded(**batch)
    for key in ("loss", "mlm_loss", "rtd_loss", "cls_loss", "rtd_logits", "cls_logits"):
        torch.testing.assert_close(actual[key], expected[key])


def test_electra_export_loads_into_contextual(tmp_path):
    model = tiny(ElectraForSSPPretraining).eval()
    model.export_discriminator(tmp_path)
    contextual, info = ElectraForContextualAS2.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    contextual.eval()
    batch = make_batch(ElectraForSSPPretraining)
    batch.pop("labels"), batch.pop("sentence_labels")
    with torch.no_grad():
        torch.testing.assert_close(contextual(**batch).logits, model(**batch).cls_logits)
    stock, info = ElectraForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and stock.config.num_labels == 1


def test_electra_from_stock_discriminator_and_generator(tmp_path):
    stock = dict(ELECTRA)
    stock.pop("sep_token_id")
    torch.manual_seed(0)
    ElectraForPreTraining(ElectraConfig(**stock)).save_pretrained(tmp_path / "disc")
    generator = ElectraForMaskedLM(ElectraConfig(**{**stock, "hidden_size": 16, "num_attention_heads": 2}))
    generator.save_pretrained(tmp_path / "gen")
    model = ElectraForSSPPretraining.from_discriminator_and_generator(
        tmp_path / "disc", tmp_path / "gen", num_segments=3
    )
    assert model.electra.embeddings.token_type_embeddings.num_embeddings == 3
    assert (
        model.generator.embeddings.token_type_embeddings.weight is model.electra.embeddings.token_type_embeddings.weight
    )
    assert model.config.generator_config.type_vocab_size == 3
    torch.testing.assert_close(
        model.generator.encoder.layer[1].output.dense.weight, generator.electra.encoder.layer[1].output.dense.weight
    )
    model(**make_batch(ElectraForSSPPretraining)).loss.backward()


def test_roberta_checkpoint_loads_into_contextual_and_stock(tmp_path):
    model = tiny(RobertaForSSPPretraining)
    model.save_pretrained(tmp_path)
    ours = model.state_dict()

    contextual, info = RobertaForContextualAS2.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    assert contextual.roberta.embeddings.token_type_embeddings.num_embeddings == 3
    for key, value in contextual.state_dict().items():
        if key == "roberta.embeddings.token_type_embeddings.weight":
            torch.testing.assert_close(value[:2], ours[key])
        else:
            torch.testing.assert_close(value, ours[key], msg=key)

    stock, info = RobertaForSequenceClassification.from_pretrained(tmp_path, num_labels=1, output_loading_info=True)
    assert not info["missing_keys"] and stock.num_labels == 1
    for key, value in stock.state_dict().items():
        torch.testing.assert_close(value, ours[key], msg=key)


def test_bert_checkpoint_loads_into_contextual(tmp_path):
    model = tiny(BertForSSPPretraining, num_segments=3)
    model.save_pretrained(tmp_path)
    contextual, info = BertForContextualAS2.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    for key, value in contextual.state_dict().items():
        torch.testing.assert_close(value, model.state_dict()[key], msg=key)


def test_stock_checkpoints_load_and_grow(tmp_path):
    stock = dict(ROBERTA, type_vocab_size=1)
    stock.pop("sep_token_id")
    torch.manual_seed(0)
    masked_lm = RobertaForMaskedLM(RobertaConfig(**stock))
    masked_lm.save_pretrained(tmp_path / "roberta")
    model, info = RobertaForSSPPretraining.from_pretrained(
        tmp_path / "roberta", num_segments=3, output_loading_info=True
    )
    assert info["missing_keys"] == {k for k in model.state_dict() if k.startswith("classifier.")}
    table = model.roberta.embeddings.token_type_embeddings.weight
    assert table.shape[0] == 3 and model.config.type_vocab_size == 3
    torch.testing.assert_close(table[:1], masked_lm.roberta.embeddings.token_type_embeddings.weight)
    torch.testing.assert_close(model.lm_head.dense.weight, masked_lm.lm_head.dense.weight)
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight

    bert = dict(BERT)
    bert.pop("sep_token_id")
    BertModel(SSPBertConfig(**bert, type_vocab_size=2)).save_pretrained(tmp_path / "bert")
    model = BertForSSPPretraining.from_pretrained(tmp_path / "bert", num_segments=3, token_type_init="copy")
    table = model.bert.embeddings.token_type_embeddings.weight
    assert table.shape[0] == 3
    torch.testing.assert_close(table[2], table[1])  # "copy" init

    electra = dict(ELECTRA)
    electra.pop("sep_token_id")
    ElectraForPreTraining(ElectraConfig(**electra)).save_pretrained(tmp_path / "electra")
    model, info = ElectraForSSPPretraining.from_pretrained(
        tmp_path / "electra", num_segments=3, output_loading_info=True
    )
    assert not any(k.startswith(("electra.", "discriminator_predictions.")) for k in info["missing_keys"])
    assert model.generator.embeddings.token_type_embeddings.weight.shape[0] == 3
    out = model(**{**make_batch(ElectraForSSPPretraining), "token_type_ids": None})  # inferred: 3 segments
    out.loss.backward()
    assert model.electra.embeddings.token_type_embeddings.weight.grad is not None


@pytest.mark.parametrize("model_class", ALL)
def test_trainer_optimizer_has_every_parameter_once(model_class, tmp_path):
    model = tiny(model_class)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, weight_decay=0.01)
    optimizer = Trainer(model=model, args=args).create_optimizer()
    names = {id(p): n for n, p in model.named_parameters()}
    grouped = [id(p) for group in optimizer.param_groups for p in group["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters() if p.requires_grad)
    assert len(grouped) == len(set(grouped))
    decay, no_decay = (group for group in optimizer.param_groups)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    expected = {n for n in names.values() if "bias" in n or "LayerNorm" in n or "layer_norm" in n}
    assert no_decay_names == expected
    assert not any("embeddings.word_embeddings" in n for n in no_decay_names)


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


@pytest.mark.parametrize("model_class", [RobertaForSSPPretraining, BertForSSPPretraining])
def test_gradient_accumulation_matches_big_batch(model_class, tmp_path):
    """One SGD step on batch 8 == batch 4 x 2 accumulation steps (the ``num_items_in_batch`` trap).

    Every row has the same number of masked tokens, so the mean of the two micro-batch means is the big-batch mean;
    a model that let Trainer skip the 1/accumulation scaling would take a step twice as long.
    """
    batch = make_batch(model_class, batch_size=8)
    rows = ListDataset([{k: v[i] for k, v in batch.items()} for i in range(8)])
    results = []
    for per_device, accumulation in ((8, 1), (4, 2)):
        model = tiny(model_class)
        args = TrainingArguments(
            output_dir=str(tmp_path / f"{per_device}"),
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            learning_rate=0.5,
            optim="sgd",
            lr_scheduler_type="constant",
            weight_decay=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows)
        assert trainer.model_accepts_loss_kwargs is False
        trainer.train()
        loss = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
        results.append((loss, {n: p.detach().clone() for n, p in model.named_parameters()}))
    (big_loss, big_params), (acc_loss, acc_params) = results
    assert acc_loss == pytest.approx(big_loss, rel=1e-4)
    initial = dict(tiny(model_class).named_parameters())
    moved = 0
    for name, value in big_params.items():
        torch.testing.assert_close(acc_params[name], value, atol=1e-5, rtol=1e-4, msg=name)
        moved += not torch.equal(value, initial[name])
    assert moved > 10

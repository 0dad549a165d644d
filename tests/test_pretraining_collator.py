"""PretrainingCollator: pair/triplet layout, truncation, and MLM masking statistics (on tiny trained tokenizers)."""

from pydoc_data.topics import topics

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from as2hub.data_collators.collators.pretraining_collator import (
    PretrainingCollator,
    default_max_length,
    tokenize_pretraining,
)


@pytest.fixture(scope="module")
def lines():
    return [line.strip() for text in topics.values() for line in text.splitlines() if len(line.split()) > 4][:400]


@pytest.fixture(scope="module")
def bert_tokenizer(lines):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        lines, trainers.WordPieceTrainer(vocab_size=600, special_tokens=special, show_progress=False)
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


@pytest.fixture(scope="module")
def roberta_tokenizer(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        cls_token="<s>",
        sep_token="</s>",
        mask_token="<mask>",
    )


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tokenizer(request, bert_tokenizer, roberta_tokenizer):
    return bert_tokenizer if request.param == "bert" else roberta_tokenizer


def examples(lines, count, triplets=False):
    out = []
    for i in range(count):
        example = {"text_a": lines[i % len(lines)], "text_b": lines[(i + 7) % len(lines)], "label": i % 2}
        if triplets:
            example["text_c"] = lines[(i + 13) % len(lines)]
        out.append(example)
    return out


def test_default_max_length():
    assert default_max_length("ssp") == 128
    assert default_max_length("SP") == default_max_length("psd") == 256
    assert default_max_length("sdc") == default_max_length("dpc") == default_max_length("dslc") == 128
    with pytest.raises(ValueError):
        default_max_length("nsp")


def test_pair_and_triplet_layout(tokenizer, lines):
    collator = PretrainingCollator(tokenizer, max_length=40, mlm_probability=0.0)
    features = examples(lines, 4) + examples(lines, 4, triplets=True)
    batch = collator(features)
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "sentence_labels"}
    assert batch["input_ids"].shape[1] % 8 == 0
    assert batch["attention_mask"].sum(1).max() <= 40
    assert batch["sentence_labels"].tolist() == [f["label"] for f in features]
    types = batch["token_type_ids"]
    assert types[:4].max() == 1 and types[4:].max() == 2
    # Separators: BERT [SEP]-closed segments, RoBERTa </s></s> between them.
    # Without truncation a pair is exactly the tokenizer's own pair encoding.
    whole = PretrainingCollator(tokenizer, max_length=512, mlm_probability=0.0)(features[:1])
    pair = tokenizer(features[0]["text_a"], features[0]["text_b"])
    assert whole["input_ids"][0][whole["attention_mask"][0].bool()].tolist() == pair["input_ids"]
    assert whole["token_type_ids"][0][whole["attention_mask"][0].bool()].max() == 1
    # A one-row RoBERTa table: every id clamped to 0.
    clamped = PretrainingCollator(tokenizer, max_length=40, mlm_probability=0.0, num_token_types=1)(features)
    assert clamped["token_type_ids"].max() == 0


def test_pretokenized_matches_text(tokenizer, lines):
    datasets = pytest.importorskip("datasets")
    features = examples(lines, 6, triplets=True)
    features[0]["text_c"] = ""  # an empty third text keeps the example a pair
    dataset = tokenize_pretraining(datasets.Dataset.from_list(features), tokenizer, with_offsets=True)
    collator = PretrainingCollator(tokenizer, max_length=48, mlm_probability=0.0)
    from_text = collator(features)
    from_ids = collator([dict(row) for row in dataset])
    for key in from_text:
        assert torch.equal(from_text[key], from_ids[key]), key
    assert from_text["token_type_ids"][0].max() == 1


def masking_run(tokenizer, lines, **kwargs):
    features = examples(lines, 400, triplets=True)
    originals = PretrainingCollator(tokenizer, max_length=64, mlm_probability=0.0)(features)
    masked = PretrainingCollator(tokenizer, max_length=64, seed=0, **kwargs)(features)
    return originals, masked


def test_masking_statistics(tokenizer, lines):
    originals, masked = masking_run(tokenizer, lines)
    ids, labels = originals["input_ids"], masked["labels"]
    special = torch.tensor(
        [tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True) for row in ids.tolist()]
    ).bool()
    special |= originals["attention_mask"] == 0
    selected = labels != -100
    # Special tokens and padding: never selected, never changed.
    assert not selected[special].any()
    assert torch.equal(masked["input_ids"][~selected], ids[~selected])
    # Selected positions: the label is the original token.
    assert torch.equal(labels[selected], ids[selected])
    eligible = (~special).sum().item()
    assert eligible > 10_000
    assert abs(selected.sum().item() / eligible - 0.15) < 0.015
    new = masked["input_ids"][selected]
    is_mask = new == tokenizer.mask_token_id
    unchanged = new == ids[selected]
    random = ~is_mask & ~unchanged
    count = selected.sum().item()
    assert abs(is_mask.sum().item() / count - 0.8) < 0.03
    assert abs(unchanged.sum().item() / count - 0.1) < 0.025  # random draws equal to the original count here
    assert abs(random.sum().item() / count - 0.1) < 0.025
    # Unchanged structure: attention mask and segments come from the layout, not from masking.
    assert torch.equal(masked["attention_mask"], originals["attention_mask"])
    assert torch.equal(masked["token_type_ids"], originals["token_type_ids"])


def test_whole_word_mask(bert_tokenizer, lines):
    with pytest.warns(UserWarning, match="whole word"):
        originals, masked = masking_run(bert_tokenizer, lines, whole_word_mask=True)
    selected = masked["labels"] != -100
    tokens = [bert_tokenizer.convert_ids_to_tokens(row) for row in originals["input_ids"].tolist()]
    continuations = torch.tensor([[t.startswith("##") for t in row] for row in tokens])
    # A word piece is selected exactly when the piece before it is (same word).
    previous = torch.roll(selected, 1, dims=1)
    assert torch.equal(selected[continuations], previous[continuations])
    assert continuations[selected].any() and selected.any()
    assert (masked["input_ids"][selected] == bert_tokenizer.mask_token_id).all()
    fraction_of_words = (selected & ~continuations).sum() / (~continuations & (originals["attention_mask"] == 1)).sum()
    assert 0.08 < fraction_of_words.item() < 0.2


def test_no_masking_and_no_label(tokenizer, lines):
    features = [{"text_a": f["text_a"], "text_b": f["text_b"]} for f in examples(lines, 3)]
    batch = PretrainingCollator(tokenizer, mlm_probability=0.0)(features)
    assert "labels" not in batch and "sentence_labels" not in batch
    batch = PretrainingCollator(tokenizer, seed=1)(features)
    assert "labels" in batch and "sentence_labels" not in batch

"""Segment layout, longest-first truncation and padding of the AS2 collator."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from as2hub.data_collators import ContextualAS2Collator, SegmentLayout, longest_first_lengths, tokenize_as2


def naive_longest_first(lengths, budget):
    """Reference: remove one token at a time from the longest segment; on a tie from the one that was shorter
    before truncation, then from the earlier one."""
    original, lengths = list(lengths), list(lengths)
    while sum(lengths) > budget:
        longest = max(lengths)
        index = min((original[i], i) for i, length in enumerate(lengths) if length == longest)[1]
        lengths[index] -= 1
    return lengths


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=4), st.integers(0, 120))
def test_longest_first_equals_token_by_token_removal(lengths, budget):
    assert longest_first_lengths(lengths, budget) == naive_longest_first(lengths, budget)


@pytest.mark.parametrize("style", ["roberta", "bert"])
def test_layout_read_from_the_tokenizer(tokenizers, style):
    layout = SegmentLayout.from_tokenizer(tokenizers[style])
    tokenizer = tokenizers[style]
    if style == "roberta":
        assert (layout.prefix, layout.middle, layout.suffix) == (
            (tokenizer.cls_token_id,),
            (tokenizer.sep_token_id,) * 2,
            (tokenizer.sep_token_id,),
        )
    else:
        assert (layout.prefix, layout.middle, layout.suffix) == (
            (tokenizer.cls_token_id,),
            (tokenizer.sep_token_id,),
            (tokenizer.sep_token_id,),
        )


@pytest.mark.parametrize("style", ["roberta", "bert"])
@pytest.mark.parametrize("max_length", [20, 33, 40, 41, 47])
@pytest.mark.parametrize("long_question", [True, False])
def test_pairs_truncate_like_the_tokenizer(tokenizers, style, max_length, long_question):
    tokenizer = tokenizers[style]
    short = "What is the difference between a list and a tuple in Python?"
    long = "Lists are mutable sequences, typically used to store collections of homogeneous items. " * 3
    question, candidate = (long, short) if long_question else (short, long)
    collator = ContextualAS2Collator(tokenizer, max_length=max_length, contextual=False)
    ids, types = collator.encode(question, candidate)
    reference = tokenizer(question, candidate, truncation="longest_first", max_length=max_length)
    assert ids == reference["input_ids"]
    if "token_type_ids" in reference:
        assert types == reference["token_type_ids"]


def test_contextual_batch_shapes_segments_and_padding(tokenizers):
    tokenizer = tokenizers["roberta"]
    collator = ContextualAS2Collator(tokenizer, max_length=32)
    features = [
        {"question": "Why?", "candidate": "Because the grammar says so.", "context": "Before. After.", "label": 1},
        {"question": "A much longer question " * 5, "candidate": "Short.", "context": "c " * 50, "label": 0},
    ]
    batch = collator(features)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] <= 32
    assert batch["attention_mask"].sum(1).max().item() == 32  # the long example is cut to max_length
    assert batch["labels"].tolist() == [1, 0]
    for row in range(2):
        length = batch["attention_mask"][row].sum().item()
        ids = batch["input_ids"][row, :length].tolist()
        types = batch["token_type_ids"][row, :length].tolist()
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        assert types == sorted(types) and set(types) == {0, 1, 2}
        assert batch["input_ids"][row, length:].eq(tokenizer.pad_token_id).all()
        assert batch["token_type_ids"][row, length:].eq(0).all()


def test_pretokenized_features_give_the_same_batch(tokenizers):
    import datasets

    tokenizer = tokenizers["bert"]
    rows = {
        "question": ["Who?", "Who?"],
        "candidate": ["Guido wrote Python.", "Nobody."],
        "context": ["", "It was 1991."],
        "label": [1, 0],
    }
    collator = ContextualAS2Collator(tokenizer, max_length=64)
    tokenized = tokenize_as2(datasets.Dataset.from_dict(rows), tokenizer)
    assert tokenized.column_names == ["label", "question_tokens", "candidate_tokens", "context_tokens"]
    from_tokens = collator(list(tokenized))
    from_text = collator([dict(zip(rows, values)) for values in zip(*rows.values())])
    for key in from_text:
        assert from_tokens[key].equal(from_text[key]), key


def test_empty_context_leaves_out_the_context_segment(tokenizers):
    tokenizer = tokenizers["bert"]
    collator = ContextualAS2Collator(tokenizer, max_length=64)
    ids, types = collator.encode("Who?", "Guido.", "")
    assert ids == tokenizer("Who?", "Guido.")["input_ids"] and max(types) == 1


@pytest.mark.parametrize("contextual,too_small", [(True, 8), (False, 5)])
def test_max_length_too_small_for_the_special_tokens(tokenizers, contextual, too_small):
    with pytest.raises(ValueError, match=f"max_length={too_small} is too small"):
        ContextualAS2Collator(tokenizers["roberta"], max_length=too_small, contextual=contextual)
    ContextualAS2Collator(tokenizers["roberta"], max_length=too_small + 1, contextual=contextual)

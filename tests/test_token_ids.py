"""The ranker's tokenization (:class:`as2hub.inference.ranking.TokenIds`): the Rust tokenizer called directly gives the
ids the tokenizer's own call gives, and the call takes over wherever the two could differ."""

import pytest

from as2hub.inference.ranking import TokenIds

TEXTS = [
    "Who wrote Hamlet?",
    "the quick brown fox jumps over the lazy dog",
    "  Spaces   inside and at the ends  ",
    "Numbers 1950, 3.14 and 42%; punctuation -- (brackets) [too]!",
    "Accents: café, naïve, Édith; symbols ™ ² ≠",
    "xqzvw unseenword Zyzzyva",
    "",
]


@pytest.mark.parametrize("style", ["roberta", "bert"])
def test_direct_ids_are_the_tokenizer_call_ids(tokenizers, style):
    tokenizer = tokenizers[style]
    ids = TokenIds(tokenizer)
    assert ids.direct
    want = tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    assert ids(TEXTS) == want
    assert any(len(row) > 3 for row in want)  # the texts are tokenized, not cut short


@pytest.mark.parametrize("style", ["roberta", "bert"])
def test_a_truncation_left_by_an_earlier_call_goes_through_the_tokenizer(tokenizers, style):
    tokenizer = tokenizers[style]
    ids = TokenIds(tokenizer)
    full = tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    tokenizer(TEXTS, truncation=True, max_length=3)  # transformers leaves this setting on the Rust tokenizer
    assert tokenizer.backend_tokenizer.truncation is not None
    assert not ids.direct
    assert ids(TEXTS) == full  # not truncated: the call clears the setting first
    assert tokenizer.backend_tokenizer.truncation is None
    assert ids.direct


class Lowercasing:
    """A tokenizer whose call changes the texts before its Rust tokenizer sees them."""

    def __init__(self, tokenizer):
        self.inner, self.backend_tokenizer = tokenizer, tokenizer.backend_tokenizer

    def __call__(self, texts, **kwargs):
        return self.inner([text.lower() for text in texts], **kwargs)


def test_a_tokenizer_whose_call_differs_keeps_its_call(tokenizers):
    tokenizer = Lowercasing(tokenizers["roberta"])  # byte-level BPE: case matters
    ids = TokenIds(tokenizer)
    assert not ids.direct
    assert ids(TEXTS) == tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    assert ids(["Who"]) != tokenizers["roberta"](["Who"], add_special_tokens=False)["input_ids"]


def test_a_tokenizer_without_a_rust_one_keeps_its_call(tokenizers):
    class Plain:
        def __call__(self, texts, **kwargs):
            return tokenizers["bert"](texts, **kwargs)

    ids = TokenIds(Plain())
    assert not ids.direct
    assert ids(TEXTS) == tokenizers["bert"](TEXTS, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("backbone, contextual", [("bert", True), ("roberta", False)], ids=lambda v: str(v))
def test_the_ranker_ranks_as_with_the_tokenizer_call(stock_checkpoint, tmp_path, backbone, contextual):
    from test_backends import spread_tiny_ranker
    from test_exact_top import rank_all

    from as2hub.inference import Ranker

    folder = spread_tiny_ranker(stock_checkpoint, tmp_path, backbone, contextual, export=False)
    direct = Ranker.from_pretrained(folder)
    called = Ranker.from_pretrained(folder)
    called._token_ids.encode = None  # every text through the tokenizer's call
    assert direct._token_ids.direct and not called._token_ids.direct
    got, want = rank_all(direct, contextual), rank_all(called, contextual)
    assert [[(c.index, c.score) for c in ranked] for ranked in got] == [
        [(c.index, c.score) for c in ranked] for ranked in want
    ]

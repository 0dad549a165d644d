"""Train a small tokenizer on a corpus, for models built from scratch (no pretrained vocabulary is reachable offline).

``style="roberta"`` gives a byte-level BPE with RoBERTa's special tokens and pair layout
(``<s> a </s></s> b </s>``); ``style="bert"`` gives a lower-cased WordPiece with BERT's (``[CLS] a [SEP] b [SEP]``),
which also suits ELECTRA.

Example:
    >>> from pydoc_data.topics import topics
    >>> tokenizer = train_tokenizer(topics.values(), style="roberta", vocab_size=2000)
    >>> tokenizer("a", "b")["input_ids"][0] == tokenizer.cls_token_id
    True
"""

import logging
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from as2hub.data_collators.readers.corpus import iter_documents

logger = logging.getLogger(__name__)

ROBERTA_SPECIALS = {
    "cls_token": "<s>",
    "pad_token": "<pad>",
    "sep_token": "</s>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
}
BERT_SPECIALS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


def train_tokenizer(texts: Iterable[str], style: str = "roberta", vocab_size: int = 8000) -> PreTrainedTokenizerFast:
    """A fast tokenizer trained on ``texts`` (seconds on a few MB); save it with ``save_pretrained``."""
    if style == "roberta":
        specials = ROBERTA_SPECIALS
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(specials.values()),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    elif style == "bert":
        specials = BERT_SPECIALS
        backend = Tokenizer(models.WordPiece(unk_token=specials["unk_token"]))
        backend.normalizer = normalizers.BertNormalizer(lowercase=True)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(specials.values()))
    else:
        raise ValueError(f"unknown tokenizer style {style!r}: use 'roberta' or 'bert'")
    backend.train_from_iterator(texts, trainer)
    cls_id, sep_id = backend.token_to_id(specials["cls_token"]), backend.token_to_id(specials["sep_token"])
    if style == "roberta":
        backend.post_processor = processors.RobertaProcessing(
            (specials["sep_token"], sep_id), (specials["cls_token"], cls_id)
        )
        extra = {"bos_token": specials["cls_token"], "eos_token": specials["sep_token"]}
        input_names = ["input_ids", "attention_mask"]
    else:
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        extra = {}
        input_names = ["input_ids", "token_type_ids", "attention_mask"]
    # Passed to the constructor (not set afterwards) so that it is saved: a reloaded BERT-style tokenizer returns
    # token_type_ids as BERT's own does, and pipelines pass them on.
    return PreTrainedTokenizerFast(tokenizer_object=backend, model_input_names=input_names, **specials, **extra)


def embedded_tokenizer(style: str = "roberta", vocab_size: int = 8000):
    """A tokenizer trained on the embedded corpus (a few seconds)."""
    return train_corpus_tokenizer(iter_documents(), style, vocab_size)


def train_corpus_tokenizer(documents, style: str = "roberta", vocab_size: int = 8000):
    """A tokenizer trained on documents (rows with ``paragraphs``: lists of sentences)."""
    texts = (" ".join(" ".join(paragraph) for paragraph in doc["paragraphs"]) for doc in documents)
    logger.info("training a %s tokenizer (vocab %d) on the corpus", style, vocab_size)
    return train_tokenizer(texts, style=style, vocab_size=vocab_size)

"""Ranking answer candidates with a (contextual) AS2 cross-encoder.

Example:
    >>> from as2hub.modeling.ranking import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker")  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP
    [RankedCandidate(index=1, score=0.93, text='Shakespeare wrote it.'), RankedCandidate(index=0, ...)]

Speed comes from tokenizing every text once in one fast-tokenizer call, sorting pairs by length so each batch pads
little, padding each batch only to its own longest row, and running under ``torch.inference_mode``. On CPU,
``Ranker.from_pretrained(path, backend="onnx", quantize="int8")`` runs the same batches through ONNX Runtime (see
:mod:`as2hub.modeling.onnx_backend`).

With a ``pipeline("text-classification", model=folder, trust_remote_code=True)`` pass the context inside the pair::

    pipe({"text": question, "text_pair": context_text_pair(pipe.tokenizer, candidate, context)})

The model derives the three segments from the separators: RoBERTa tokenizers send no ``token_type_ids``, and the pair
ids of BERT-style tokenizers (1 for the candidate and the context alike) are raised to 2 after the second separator,
so the pipeline, sentence-transformers' ``CrossEncoder`` and :class:`Ranker` give the same scores.
"""

from dataclasses import dataclass

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from as2hub.modeling.segment_layout import SegmentLayout, pad_batch


@dataclass(frozen=True)
class RankedCandidate:
    index: int
    score: float
    text: str


def context_text_pair(tokenizer, candidate: str, context: str) -> str:
    """``text_pair`` that carries a context for pipelines: candidate, the layout's middle separators, context."""
    middle = SegmentLayout.from_tokenizer(tokenizer).middle
    return candidate + "".join(tokenizer.convert_ids_to_tokens(list(middle))) + context


def load_scoring_model(path, auto_class, backend="torch", quantize=None, num_threads=None, trust_remote_code=True):
    """``(model, folder)`` for a ranker: the torch model (``auto_class``) or an ONNX Runtime session standing in for it
    (``backend="onnx"``, :class:`~as2hub.modeling.onnx_backend.OnnxRankerModel`; a Hub id resolves to its download)."""
    if backend == "onnx":
        from .onnx_backend import OnnxRankerModel

        model = OnnxRankerModel.from_pretrained(
            path, quantize=quantize, num_threads=num_threads, trust_remote_code=trust_remote_code
        )
        return model, model.graph_path.parent.parent
    if backend == "torch":
        if quantize is not None or num_threads is not None:
            raise ValueError(
                "quantize and num_threads are options of backend='onnx'; "
                "for torch use torch.set_num_threads (and torch.ao.quantization)"
            )
        return auto_class.from_pretrained(path, trust_remote_code=trust_remote_code), path
    raise ValueError(f"backend must be 'torch' or 'onnx', got {backend!r}")


class Ranker:
    """A model, its tokenizer and the batching that makes scoring fast."""

    def __init__(self, model, tokenizer, max_length: int = 256, batch_size: int = 64):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.layout = SegmentLayout.from_tokenizer(tokenizer)
        # torch pads to a multiple of 8; the ONNX backend pads exactly (it sets this attribute to None)
        self.pad_to_multiple_of = getattr(model, "pad_to_multiple_of", 8)
        self.contextual = bool(getattr(model.config, "contextual", False))
        self.layout.check_max_length(max_length, 3 if self.contextual else 2)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        trust_remote_code: bool = True,
        backend: str = "torch",
        quantize: str | None = None,
        num_threads: int | None = None,
        **kwargs,
    ) -> "Ranker":
        """Load a saved ranker; ``backend="onnx"`` scores with ONNX Runtime (``pip install "as2hub[onnx]"``).

        ``backend="onnx"`` runs ``onnx/model.onnx`` (``quantize="int8"``: ``onnx/model_qint8_dynamic.onnx``) written by
        ``as2hub-export-onnx PATH [--quantize int8]``, with ``num_threads`` intra-op threads (default: one per physical
        core); the graph must come from the folder's current weights. The torch backend uses ``torch.set_num_threads``.
        Other keyword arguments (``max_length``, ``batch_size``) go to :class:`Ranker`.

        Example:
            >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="onnx", quantize="int8", num_threads=1)  # doctest: +SKIP
        """
        model, path = load_scoring_model(
            path, AutoModelForSequenceClassification, backend, quantize, num_threads, trust_remote_code
        )
        return cls(model, AutoTokenizer.from_pretrained(path), **kwargs)

    def _tokens(self, texts: list[str]) -> list[list[int]]:
        unique = list(dict.fromkeys(texts))
        ids = self.tokenizer(unique, add_special_tokens=False)["input_ids"] if unique else []
        lookup = dict(zip(unique, ids))
        return [lookup[text] for text in texts]

    @torch.inference_mode()
    def score_pairs(
        self, questions: list[str], candidates: list[str], contexts: list[str] | None = None
    ) -> torch.Tensor:
        """Probability of "correct" for each (question, candidate[, context]), in input order."""
        if len(questions) != len(candidates) or (contexts is not None and len(contexts) != len(candidates)):
            raise ValueError("questions, candidates and contexts must have the same length")
        segments = [self._tokens(questions), self._tokens(candidates)]
        if self.contextual:
            segments.append(self._tokens(contexts or [""] * len(candidates)))
        num_types = self.model.config.type_vocab_size
        rows = [self.layout.build(list(parts), self.max_length, num_types) for parts in zip(*segments)]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        scores = torch.empty(len(rows))
        device = self.model.device
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            batch = pad_batch([rows[i] for i in chunk], self.layout.pad_token_id, self.pad_to_multiple_of)
            logits = self.model(**{k: v.to(device) for k, v in batch.items()}).logits.float()
            scores[chunk] = self.model.logits_to_scores(logits).cpu()
        return scores

    def rank(self, question: str, candidates: list[str], contexts: list[str] | None = None) -> list[RankedCandidate]:
        """Candidates sorted by score, best first."""
        scores = self.score_pairs([question] * len(candidates), candidates, contexts).tolist()
        ranked = sorted(range(len(candidates)), key=lambda i: -scores[i])
        return [RankedCandidate(i, scores[i], candidates[i]) for i in ranked]


def rank(model, tokenizer, question: str, candidates: list[str], contexts: list[str] | None = None, **kwargs):
    """One-call ranking: ``rank(model, tokenizer, q, candidates, contexts=None)`` -> sorted :class:`RankedCandidate`."""
    return Ranker(model, tokenizer, **kwargs).rank(question, candidates, contexts)

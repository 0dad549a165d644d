"""Ranking answer candidates with a joint multi-candidate model, alone or as the second stage of a cascade.

Alone, the candidates are read k at a time (consecutive groups of k, as the ``all`` grouping evaluates them) and
sorted by the joint probability that each is correct. With a pairwise :class:`~as2hub.inference.ranking.Ranker`, the
pairwise model scores every candidate, and the joint model re-ranks its top k in one pass (Di Liello et al., NAACL
2022, table 2); the other candidates keep the pairwise order below them.

Example:
    >>> from as2hub.inference.joint_ranking import JointRanker
    >>> from as2hub.inference.ranking import Ranker
    >>> joint = JointRanker.from_pretrained("path/to/joint", pairwise=Ranker.from_pretrained("path/to/pairwise"))  # doctest: +SKIP
    >>> joint.rank("who wrote hamlet?", candidates)  # doctest: +SKIP
    [JointRankedCandidate(index=3, score=0.94, text='...', stage='joint'), ..., JointRankedCandidate(..., stage='pairwise')]
"""

from dataclasses import dataclass

import torch
from transformers import AutoModel, AutoTokenizer

from as2hub.inference.ranking import RankedCandidate, Ranker, load_scoring_model
from as2hub.modeling.joint_multicandidate.joint_layout import SlotLayout, group
from as2hub.modeling.scores import probability_of_correct


@dataclass(frozen=True)
class JointRankedCandidate(RankedCandidate):
    """A ranked candidate; ``stage`` says which model placed it (``"joint"`` or, below the top k of a cascade,
    ``"pairwise"``) and whose probability ``score`` is."""

    stage: str = "joint"


def cascade_order(pairwise_scores: list[float], joint_scores: dict[int, float]) -> list[tuple[int, float, str]]:
    """``(index, score, stage)`` in cascade order: the re-ranked top k by joint score, then the rest by pairwise
    score (ties keep the input order). ``joint_scores`` maps the indices of the top k to their joint scores."""
    top = sorted(joint_scores, key=lambda i: -joint_scores[i])
    rest = sorted((i for i in range(len(pairwise_scores)) if i not in joint_scores), key=lambda i: -pairwise_scores[i])
    return [(i, joint_scores[i], "joint") for i in top] + [(i, pairwise_scores[i], "pairwise") for i in rest]


def top_k(scores: list[float], k: int) -> list[int]:
    """Indices of the k highest scores, best first (ties keep the input order)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:k]


class JointRanker:
    """A joint model (``IE_k`` or ``AE_k`` head), its tokenizer, and optionally a pairwise first stage."""

    def __init__(self, model, tokenizer, pairwise: Ranker | None = None, batch_size: int = 16, backend: str = "torch"):
        config = model.config
        if not getattr(config, "candidate_head", False):
            raise ValueError(
                f"ranking needs a joint model with an IE_k or AE_k head (one score per candidate), got "
                f"{type(model).__name__} with head {getattr(config, 'head', None)!r}"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pairwise = pairwise
        self.batch_size = batch_size
        self.backend = backend  # which backend scores the joint stage (``from_pretrained`` passes the one it loaded)
        self.layout = SlotLayout.from_tokenizer(tokenizer, config.num_candidates, config.slot_length)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        pairwise: str | Ranker | None = None,
        trust_remote_code: bool = True,
        backend: str = "torch",
        quantize: str | None = None,
        num_threads: int | None = None,
        **kwargs,
    ):
        """Load a saved joint folder (and a pairwise folder, or a :class:`Ranker`, for the cascade).

        ``backend`` takes the names of :meth:`Ranker.from_pretrained` (``"torch"``, ``"auto"``, ``"torch-bf16"``,
        ``"torch-int8"``, ``"onnx"`` with ``quantize="int8"`` or ``"onnx-int8"``, ``"cuda-fp16"``, ``"cuda-bf16"``); ``"onnx"`` scores
        with the graph written by ``as2hub-export-onnx PATH [--quantize int8]``. A pairwise folder given by path is
        loaded with the same backend options (with ``"auto"``, each stage picks for itself: a stage without an exported
        graph falls back without stopping the other).
        """
        loaded = load_scoring_model(path, AutoModel, backend, quantize, num_threads, trust_remote_code)
        if isinstance(pairwise, str):
            options = {"backend": backend, "quantize": quantize, "num_threads": num_threads}
            pairwise = Ranker.from_pretrained(pairwise, trust_remote_code=trust_remote_code, **options)
        tokenizer = AutoTokenizer.from_pretrained(loaded.folder, trust_remote_code=trust_remote_code)
        return cls(loaded.model, tokenizer, pairwise=pairwise, backend=loaded.backend, **kwargs)

    @torch.inference_mode()
    def score(self, question: str, candidates: list[str]) -> list[float]:
        """Joint probability that each candidate is correct, in input order (groups of k in input order)."""
        if isinstance(candidates, str) or not candidates:
            raise ValueError("no candidates: pass a non-empty list of candidate sentences")
        rows = [
            self.layout.encode_texts(self.tokenizer, question, chunk)
            for chunk in group(candidates, self.layout.num_candidates)
        ]
        scores: list[float] = []
        device = self.model.device
        for start in range(0, len(rows), self.batch_size):
            batch = self.layout.batch(rows[start : start + self.batch_size])
            logits = self.model(**{key: value.to(device) for key, value in batch.items()}).logits.float()
            scores.extend(probability_of_correct(logits, self.model.config).reshape(-1).tolist())
        return scores[: len(candidates)]

    def rank(
        self, question: str, candidates: list[str], contexts: list[str] | None = None
    ) -> list[JointRankedCandidate]:
        """Candidates best first. With a pairwise ranker: its top k re-ranked jointly, then the rest in pairwise
        order (``contexts`` go to a contextual pairwise ranker)."""
        if isinstance(candidates, str) or not candidates:
            raise ValueError("no candidates: pass a non-empty list of candidate sentences")
        if self.pairwise is None:
            order = cascade_order([0.0] * len(candidates), dict(enumerate(self.score(question, candidates))))
        else:
            pairwise = self.pairwise.score_pairs([question] * len(candidates), candidates, contexts).tolist()
            order = self.rerank(question, candidates, pairwise)
        return [JointRankedCandidate(i, score, candidates[i], stage) for i, score, stage in order]

    def rerank(
        self, question: str, candidates: list[str], pairwise_scores: list[float]
    ) -> list[tuple[int, float, str]]:
        """The cascade's second stage: the top k of ``pairwise_scores`` (the first stage's, in input order) scored
        jointly, in :func:`cascade_order` (``(index, score, stage)``). ``rank`` calls it after scoring the pairs; a
        caller that scores the pairs of many questions at once (the service) calls it per question."""
        best = top_k(pairwise_scores, self.layout.num_candidates)
        joint = self.score(question, [candidates[i] for i in best])
        return cascade_order(pairwise_scores, dict(zip(best, joint)))


def rank(model, tokenizer, question: str, candidates: list[str], pairwise: Ranker | None = None, **kwargs):
    """One call: ``rank(joint_model, tokenizer, q, candidates, pairwise=None)`` -> sorted :class:`JointRankedCandidate`."""
    return JointRanker(model, tokenizer, pairwise=pairwise, **kwargs).rank(question, candidates)

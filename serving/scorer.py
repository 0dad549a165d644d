"""What one replica of the service holds: the ranker(s) and the scoring of a batch of requests (no Ray or HTTP here).

>>> scorer = RerankScorer(ServeConfig(model="outputs/minilm-wikiqa"))  # doctest: +SKIP
>>> scorer.rank_each([Query("who wrote hamlet?", ["Hamlet is a play.", "Shakespeare wrote it."])])  # doctest: +SKIP
[[Ranked(index=1, score=0.97, stage=None), Ranked(index=0, score=0.02, stage=None)]]
"""

import json
import logging
import threading
from dataclasses import asdict
from pathlib import Path

from as2hub.modeling.errors import ArgumentError
from as2hub.modeling.registry import family_of
from as2hub.serving.messages import Query, Ranked
from as2hub.serving.options import ServeConfig

logger = logging.getLogger("as2hub.serve")


def is_joint_folder(path: str) -> bool:
    """True when ``path`` holds a joint multi-candidate model (``run_joint.py``), read from its config.json."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return False
    family = family_of(json.loads(config_file.read_text()).get("model_type"))
    return family is not None and family.score == "joint"


class RerankScorer:
    """A loaded ranker and how a batch of requests is scored with it, in as few model calls as possible.

    Pairwise and contextual rankers score every (question, text[, context]) pair of the whole batch in one
    ``Ranker.score_pairs`` call; the cascade does the same for its pairwise stage, then ``JointRanker.rerank`` per
    request on that request's scores; a joint model alone ranks request by request (``JointRanker.rank``).
    """

    def __init__(self, config: ServeConfig):
        from as2hub.inference.joint_ranking import JointRanker

        self.config = config
        config.set_threads()
        self.joint = self.ranker = None
        if is_joint_folder(config.model):
            if config.exact_top_margin is not None:
                raise ArgumentError(
                    f"--exact_top_margin applies to pairwise and contextual rankers; {config.model} is a joint model"
                )
            pairwise = config.load_ranker(config.pairwise) if config.pairwise is not None else None
            self.joint = JointRanker.from_pretrained(config.model, pairwise=pairwise, **config.backend_options())
            first = self.joint.pairwise
            self.kind = "cascade" if first is not None else "joint"
            self.contextual = bool(first is not None and first.contextual)
        else:
            self.ranker = config.load_ranker(exact_top_margin=config.exact_top_margin)
            self.contextual = self.ranker.contextual
            self.kind = "contextual" if self.contextual else "pairwise"
        # what the replica has scored: requests, the scoring calls they were batched into, the largest batch, and
        # the batches that failed and were scored request by request
        self.batching = {"requests": 0, "batches": 0, "largest_batch": 0, "split_batches": 0}
        self._lock = threading.Lock()
        # why a cascade_drop cannot be served (None: it can), asked once of the loaded model; each request's drop is
        # then checked by the ranker alone (inference/cascade.py's check_cascade, once per request)
        self.no_cascade = self._no_cascade()

    def _no_cascade(self) -> str | None:
        from as2hub.inference.cascade import NoCascadeHeadsError, check_cascade_heads

        if self.ranker is None:
            return "cascade_drop needs a pairwise or contextual ranker with cascade heads, not a joint model"
        try:
            check_cascade_heads(self.ranker.model)
        except NoCascadeHeadsError as error:
            return str(error)
        return None

    def info(self) -> dict:
        with self._lock:
            batching = dict(self.batching)
        info = {"kind": self.kind, "contextual": self.contextual, **asdict(self.config), "batching": batching}
        if self.joint is not None:
            info["num_candidates"] = self.joint.layout.num_candidates
        return info

    def rank_many(self, queries: list[Query]) -> list[list[Ranked]]:
        """Every query's texts best first (ties keep the input order), scored together where the model allows."""
        if self.ranker is not None:
            if all(q.cascade_drop is None for q in queries):
                return self._split(queries, self._pairwise_scores(self.ranker, queries))
            return self._cascade(queries)
        if self.joint.pairwise is None:
            return [[Ranked(r.index, r.score, r.stage) for r in self.joint.rank(q.question, q.texts)] for q in queries]
        pairwise = self._per_query(queries, self._pairwise_scores(self.joint.pairwise, queries))
        return [
            [Ranked(*ranked) for ranked in self.joint.rerank(query.question, query.texts, scores)]
            for query, scores in zip(queries, pairwise)
        ]

    @staticmethod
    def _pairwise_scores(ranker, queries: list[Query]) -> list[float]:
        questions = [q.question for q in queries for _ in q.texts]
        texts = [text for q in queries for text in q.texts]
        contexts = None
        if ranker.contextual and any(q.contexts is not None for q in queries):
            contexts = [c for q in queries for c in (q.contexts if q.contexts is not None else [""] * len(q.texts))]
        return ranker.score_pairs(questions, texts, contexts).tolist()

    def check_cascade_drop(self, drop: float | None) -> None:
        """Raise :class:`~as2hub.inference.cascade.NoCascadeHeadsError` (a ValueError) when ``drop`` cannot be served
        (a ``ValueError`` when it is no fraction in [0, 1))."""
        if drop is None:
            return
        from as2hub.inference.cascade import NoCascadeHeadsError, check_drop

        check_drop(drop)
        if self.no_cascade is not None:
            raise NoCascadeHeadsError(self.no_cascade)

    def _cascade(self, queries: list[Query]) -> list[list[Ranked]]:
        """The requests of each ``cascade_drop`` together in one ``Ranker.rank_many`` call (None: the full model)."""
        out: list = [None] * len(queries)
        for drop in dict.fromkeys(q.cascade_drop for q in queries):
            picked = [i for i, q in enumerate(queries) if q.cascade_drop == drop]
            contexts = None
            if self.ranker.contextual and any(queries[i].contexts is not None for i in picked):
                contexts = [queries[i].contexts or [""] * len(queries[i].texts) for i in picked]
            ranked = self.ranker.rank_many(
                [queries[i].question for i in picked], [queries[i].texts for i in picked], contexts, drop
            )
            for i, one in zip(picked, ranked):
                out[i] = [Ranked(r.index, r.score, layer=r.layer if drop is not None else None) for r in one]
        return out

    @staticmethod
    def _per_query(queries: list[Query], scores: list[float]) -> list[list[float]]:
        out, start = [], 0
        for query in queries:
            out.append(scores[start : start + len(query.texts)])
            start += len(query.texts)
        return out

    def _split(self, queries: list[Query], scores: list[float]) -> list[list[Ranked]]:
        ranked = []
        for local in self._per_query(queries, scores):
            order = sorted(range(len(local)), key=lambda i: -local[i])
            ranked.append([Ranked(i, local[i]) for i in order])
        return ranked

    def rank_each(self, queries: list[Query]) -> list:
        """:meth:`rank_many`, and when the batch fails, each query alone: one bad request fails only itself. A
        request that fails gets its exception in its place (never raised: the caller answers it)."""
        with self._lock:
            self.batching["requests"] += len(queries)
            self.batching["batches"] += 1
            self.batching["largest_batch"] = max(self.batching["largest_batch"], len(queries))
        try:
            return self.rank_many(queries)
        except Exception as error:  # noqa: BLE001 - isolate the failing request
            if len(queries) == 1:
                logger.exception("a request failed")
                return [error]
            logger.exception("a batch of %d requests failed: scoring them one by one", len(queries))
        with self._lock:
            self.batching["split_batches"] += 1
        out = []
        for query in queries:
            try:
                out.append(self.rank_many([query])[0])
            except Exception as error:  # noqa: BLE001
                out.append(error)
        return out

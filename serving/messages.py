"""What the service's processes send each other, and the request-body limit's default: the standard library only.

The ingress (:class:`~as2hub.serving.http.Reranker`) builds a :class:`Query` per request and gets back a list of
:class:`Ranked` or a :class:`Refused` from a scoring replica; Ray pickles them by reference, so the ingress process
imports this module and never torch, Transformers or the models (``tests/test_serving_layer.py`` checks it).

>>> Query("who wrote hamlet?", ["Hamlet is a play.", "Shakespeare wrote it."])
Query(question='who wrote hamlet?', texts=['Hamlet is a play.', 'Shakespeare wrote it.'], contexts=None, cascade_drop=None)
>>> round(raw_score(0.5), 6), round(raw_score(1.0), 1)  # the logit, clamped to stay finite
(0.0, 16.1)
"""

import math
from dataclasses import dataclass

DEFAULT_MAX_REQUEST_BYTES = 2_000_000  # text-embeddings-inference's default --payload-limit
RAW_SCORE_EPS = 1e-7  # raw scores are the logit of the probability clamped to [eps, 1 - eps]: about ±16.1


@dataclass
class Query:
    question: str
    texts: list[str]
    contexts: list[str] | None = None  # None: no request gave one (a None item of a request arrives as "")
    cascade_drop: float | None = None  # the layer cascade's drop (None: the full model)


@dataclass(frozen=True)
class Ranked:
    index: int
    score: float
    stage: str | None = None  # "joint" / "pairwise" for joint models, None otherwise
    layer: int | None = None  # with a cascade_drop: the encoder layer whose head scored it (the model's depth: all)


@dataclass
class Refused:
    """A scoring replica's answer to a request it does not score: the status and the one-line message."""

    status: int
    message: str


def raw_score(probability: float) -> float:
    """The logit of a probability, ``log(p / (1 - p))``, clamped to stay finite (JSON has no infinity)."""
    p = min(max(probability, RAW_SCORE_EPS), 1.0 - RAW_SCORE_EPS)
    return math.log(p) - math.log1p(-p)

"""Serve a saved as2hub ranker over HTTP on Ray Serve: TEI's ``POST /rerank`` and Cohere/Jina's ``POST /v1/rerank``.

Usage (``pip install "as2hub[serve]"``)::

    as2hub-serve outputs/minilm-wikiqa                                  # http://127.0.0.1:8000, one replica
    as2hub-serve outputs/minilm-wikiqa --backend onnx --replicas 2 --port 8080
    as2hub-serve outputs/joint --pairwise outputs/pairwise              # the cascade: pairwise, then joint top k
    curl -s localhost:8000/rerank -H 'content-type: application/json' \\
        -d '{"query": "who wrote hamlet?", "texts": ["Hamlet is a tragedy.", "Shakespeare wrote it."]}'

Endpoints (one FastAPI app, Ray Serve's ingress; every replica holds one ranker):

- ``POST /rerank`` (text-embeddings-inference): ``{"query", "texts", "raw_scores": false, "return_text": false,
  "contexts": null}`` -> ``[{"index", "score"(, "text")}]``, best first. ``raw_scores`` gives the logit of the
  probability, ``log(p / (1 - p))`` (a 2-label head: the difference of its two logits), saturating at about ±16.1.
- ``POST /v1/rerank`` (Cohere / Jina): ``{"query", "documents", "top_n": null, "return_documents": false,
  "contexts": null}`` -> ``{"model", "results": [{"index", "relevance_score"(, "document": {"text"})}]}``, best
  first; a document is a string or ``{"text": ..., "context": ...}``; ``model`` in the request is ignored.
- ``GET /health`` -> 200 ``{"status": "ok"}`` once a replica has its model; ``GET /info``: what is served.

Contexts (contextual rankers, Di Liello et al. 2023): ``contexts`` is a list as long as ``texts`` / ``documents``,
each item the text around that candidate in its document, or ``null`` for none (scored with an empty context, as
``Ranker`` does when no context is given). A model that is not contextual answers 422 to a request with contexts.

A joint model (``run_joint.py``) is served alone (its candidates read k at a time, sorted by joint probability) or, with
``--pairwise FOLDER``, as the cascade of :class:`~as2hub.modeling.joint_ranking.JointRanker`: the pairwise ranker
scores every text, the joint model re-ranks its top k; each result also carries ``"stage"`` (``"joint"`` or
``"pairwise"``: whose probability the score is).

Scores are :class:`~as2hub.modeling.ranking.Ranker`'s (``JointRanker``'s) for the same inputs: concurrent requests
are batched by ``@serve.batch`` (up to ``--max_batch_size`` requests, waiting at most ``--batch_wait_ms``) into ONE
``Ranker.score_pairs`` call, and a text longer than the model's ``--max_length`` is truncated, as ``Ranker`` does.
Every error the service answers is ``{"error": "<one line>", "error_type": ...}``: malformed JSON, a missing or
non-string field, a text holding a lone surrogate (``"\\ud800"``: valid JSON, no Unicode text) and an empty ``texts``
answer 422 (``Validation``, naming the field); more texts than ``--max_texts`` or a request body over
``--max_request_bytes`` (default 2,000,000 bytes, TEI's payload limit) 413 (``PayloadTooLarge``); a request whose
scoring fails, alone or in a batch (the batch is then scored request by request), 500 (``Backend``). ``GET /info``
also counts what the replica has batched (``batching``: requests, batches, the largest batch, split batches).

The same command serves on a Ray cluster of several machines: ``--address auto`` on a node of a running cluster
(``ray start --head`` / ``ray start --address HEAD:6379``), every node with ``as2hub[serve]`` installed and the folder
at the same path; replicas go to any node with free CPUs (``--threads`` CPUs each). See run_scripts/SERVING.md.
"""

import argparse
import asyncio
import json
import logging
import math
import os
import signal
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from as2hub.run_scripts.arguments import ArgumentError, run_cli

logger = logging.getLogger("as2hub.serve")

INSTALL_HINT = 'pip install "as2hub[serve]"  (Ray Serve and FastAPI)'
APP_NAME = "as2hub"
DEFAULT_MAX_TEXTS = 1000
DEFAULT_MAX_REQUEST_BYTES = 2_000_000  # text-embeddings-inference's default --payload-limit
RAW_SCORE_EPS = 1e-7  # raw scores are the logit of the probability clamped to [eps, 1 - eps]: about ±16.1


# --------------------------------------------------------------------------------------------------------------------
# What one replica holds: the ranker(s) and the scoring of a batch of requests (no Ray or HTTP here)


@dataclass
class ServeConfig:
    """Everything a replica needs to load its ranker; the same values are shown by ``GET /info``."""

    model: str
    pairwise: str | None = None
    backend: str = "torch"
    quantize: str | None = None
    threads: int | None = None
    max_length: int = 256
    batch_size: int | None = None  # pairs per forward pass; None: 16 on CPU, 64 on a GPU (Ranker's default)
    max_texts: int = DEFAULT_MAX_TEXTS
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # larger request bodies answer 413


@dataclass
class Query:
    question: str
    texts: list[str]
    contexts: list[str] | None = None  # None: no request gave one (a None item of a request arrives as "")


@dataclass(frozen=True)
class Ranked:
    index: int
    score: float
    stage: str | None = None  # "joint" / "pairwise" for joint models, None otherwise


def is_joint_folder(path: str) -> bool:
    """True when ``path`` holds a joint multi-candidate model (``run_joint.py``), read from its config.json."""
    from as2hub.modeling.onnx_backend import JOINT_MODEL_TYPES

    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return False
    return json.loads(config_file.read_text()).get("model_type") in JOINT_MODEL_TYPES


def check_folders(config: ServeConfig) -> None:
    """Name a wrong folder or a contradictory option before Ray starts (a Hub id is left to the loader)."""
    from as2hub.modeling.onnx_backend import check_ranker_folder

    for path in (config.model, config.pairwise):
        if path is None:
            continue
        if Path(path).exists():
            check_ranker_folder(path)
        elif path.startswith(("/", ".", "~")) or path.count("/") != 1:  # not a Hub id (org/name) either
            raise FileNotFoundError(f"{path}: no such model folder")
    if config.pairwise is not None:
        if not is_joint_folder(config.model):
            raise ArgumentError(f"--pairwise is the first stage of a cascade: {config.model} is not a joint model")
        if is_joint_folder(config.pairwise):
            raise ArgumentError(f"--pairwise {config.pairwise} is a joint model: pass a pairwise (run_as2) ranker")
    for name in ("max_texts", "max_batch_size", "max_length", "batch_size", "max_request_bytes"):
        if getattr(config, name) is not None and getattr(config, name) < 1:
            raise ArgumentError(f"--{name} must be at least 1, got {getattr(config, name)}")


def load_options(config: ServeConfig) -> dict:
    """Keyword arguments for ``Ranker.from_pretrained`` / ``JointRanker.from_pretrained``: the backend string is
    passed on as given; ``num_threads`` only for ONNX Runtime backends and ``auto`` (the replica also sets
    ``torch.set_num_threads``, which the torch backends use)."""
    options = {"backend": config.backend}
    if config.quantize is not None:
        options["quantize"] = config.quantize
    if config.threads is not None and (config.backend == "auto" or config.backend.startswith("onnx")):
        options["num_threads"] = config.threads
    return options


class RerankScorer:
    """A loaded ranker and how a batch of requests is scored with it, in as few model calls as possible.

    Pairwise and contextual rankers score every (question, text[, context]) pair of the whole batch in one
    ``Ranker.score_pairs`` call; the cascade does the same for its pairwise stage, then one ``JointRanker.score`` per
    request on that request's top k; a joint model alone ranks request by request (``JointRanker.rank``).
    """

    def __init__(self, config: ServeConfig):
        import torch

        from as2hub.modeling.joint_ranking import JointRanker
        from as2hub.modeling.ranking import Ranker

        self.config = config
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        options = load_options(config)
        self.joint = self.ranker = None
        if is_joint_folder(config.model):
            pairwise = None
            if config.pairwise is not None:
                pairwise = Ranker.from_pretrained(
                    config.pairwise, max_length=config.max_length, batch_size=config.batch_size, **options
                )
            self.joint = JointRanker.from_pretrained(config.model, pairwise=pairwise, **options)
            first = self.joint.pairwise
            self.kind = "cascade" if first is not None else "joint"
            self.contextual = bool(first is not None and first.contextual)
        else:
            self.ranker = Ranker.from_pretrained(
                config.model, max_length=config.max_length, batch_size=config.batch_size, **options
            )
            self.contextual = self.ranker.contextual
            self.kind = "contextual" if self.contextual else "pairwise"
        # what the replica has scored: requests, the scoring calls they were batched into, the largest batch, and
        # the batches that failed and were scored request by request
        self.batching = {"requests": 0, "batches": 0, "largest_batch": 0, "split_batches": 0}
        self._lock = threading.Lock()

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
            return self._split(queries, self._pairwise_scores(self.ranker, queries))
        if self.joint.pairwise is None:
            return [[Ranked(r.index, r.score, r.stage) for r in self.joint.rank(q.question, q.texts)] for q in queries]
        from as2hub.modeling.joint_ranking import cascade_order, top_k

        out = []
        for query, pairwise in zip(
            queries, self._per_query(queries, self._pairwise_scores(self.joint.pairwise, queries))
        ):
            best = top_k(pairwise, self.joint.layout.num_candidates)
            joint = self.joint.score(query.question, [query.texts[i] for i in best])
            out.append([Ranked(i, s, stage) for i, s, stage in cascade_order(pairwise, dict(zip(best, joint)))])
        return out

    @staticmethod
    def _pairwise_scores(ranker, queries: list[Query]) -> list[float]:
        questions = [q.question for q in queries for _ in q.texts]
        texts = [text for q in queries for text in q.texts]
        contexts = None
        if ranker.contextual and any(q.contexts is not None for q in queries):
            contexts = [c for q in queries for c in (q.contexts if q.contexts is not None else [""] * len(q.texts))]
        return ranker.score_pairs(questions, texts, contexts).tolist()

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


def raw_score(probability: float) -> float:
    """The logit of a probability, ``log(p / (1 - p))``, clamped to stay finite (JSON has no infinity)."""
    p = min(max(probability, RAW_SCORE_EPS), 1.0 - RAW_SCORE_EPS)
    return math.log(p) - math.log1p(-p)


def unicode_text(text: str) -> str:
    """A JSON string is any sequence of UTF-16 code units: a lone surrogate (``"\\ud800"``) parses, but is no Unicode
    text and breaks the tokenizer. Refused at validation (422 naming the field)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"a lone surrogate (\\u{ord(text[error.start]):04x} at character {error.start}) is not Unicode text"
        ) from None
    return text


def one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def first_error(errors: list[dict]) -> str:
    """One line from FastAPI's validation errors: where, then what (``body.texts.1: Input should be a valid string``)."""
    parts = []
    for error in errors[:3]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more


# --------------------------------------------------------------------------------------------------------------------
# The Ray Serve deployment (FastAPI ingress); built on demand so that the module imports without the serve extra


def require_serve():
    """Import Ray Serve and FastAPI; an :class:`ArgumentError` (one line on the command line) when they are missing."""
    try:
        import fastapi  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as error:
        raise ArgumentError(f"as2hub-serve needs the `serve` extra: {INSTALL_HINT} ({error})") from error


_DEPLOYMENTS: dict[int, type] = {}
ERROR_TYPES = {404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge", 422: "Validation", 500: "Backend"}


def error_body(status: int, message: str) -> dict:
    """Every error answer of the service: ``{"error": "<one line>", "error_type": ...}``."""
    return {"error": message, "error_type": ERROR_TYPES.get(status, "Error")}


class RequestBodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` answers 413 with the service's JSON error, at once when its
    Content-Length says so, else (a chunked body) as soon as the bytes read pass the limit.

    (FastAPI's and Starlette's own ``max_body_size`` replace any answer to a request whose Content-Length is over the
    limit with a plain-text 413, which is not the documented error shape.)"""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes
        self.limit = f"the limit of {max_bytes} bytes (--max_request_bytes)"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from fastapi import HTTPException
        from fastapi.responses import JSONResponse
        from starlette.datastructures import Headers

        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            message = f"the request body of {length} bytes is over {self.limit}"
            return await JSONResponse(error_body(413, message), status_code=413)(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, f"the request body is over {self.limit}")  # the app's handler answers
            return message

        await self.app(scope, limited_receive, send)


def deployment_class(max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES):
    """The Ray Serve deployment class for a request-body limit (one per limit and process: Serve pickles it by value
    into the replicas, with its FastAPI app and the app's :class:`RequestBodyLimit`)."""
    if max_request_bytes in _DEPLOYMENTS:
        return _DEPLOYMENTS[max_request_bytes]
    require_serve()
    from typing import Annotated

    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr
    from ray import serve
    from starlette.exceptions import HTTPException as StarletteHTTPException

    Text = Annotated[StrictStr, AfterValidator(unicode_text)]

    class TEIRequest(BaseModel):
        model_config = ConfigDict(extra="ignore")
        query: Text
        texts: list[Text] = Field(min_length=1)
        raw_scores: bool = False
        return_text: bool = False
        truncate: bool = True  # TEI's flag: texts are always truncated to the model's max length
        contexts: list[Text | None] | None = None

    class Document(BaseModel):
        model_config = ConfigDict(extra="ignore")
        text: Text
        context: Text | None = None

    class CohereRequest(BaseModel):
        model_config = ConfigDict(extra="ignore")
        query: Text
        documents: list[Text | Document] = Field(min_length=1)
        top_n: int | None = Field(default=None, ge=1)
        return_documents: bool = False
        contexts: list[Text | None] | None = None
        model: str | None = None

    api = FastAPI(title="as2hub reranker", description="TEI /rerank and Cohere/Jina /v1/rerank for as2hub rankers")
    api.add_middleware(RequestBodyLimit, max_bytes=max_request_bytes)

    @api.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError):
        return JSONResponse(status_code=422, content=error_body(422, first_error(error.errors())))

    @api.exception_handler(StarletteHTTPException)  # this app's and Starlette's own (404, 405)
    async def http_error(request: Request, error: StarletteHTTPException):
        return JSONResponse(status_code=error.status_code, content=error_body(error.status_code, str(error.detail)))

    @serve.deployment(name="Reranker")
    @serve.ingress(api)
    class Reranker:
        def __init__(self, config: dict):
            self.config = ServeConfig(**config)
            self.scorer = RerankScorer(self.config)
            self.name = Path(self.config.model).name or self.config.model
            self.rank_batch.set_max_batch_size(self.config.max_batch_size)
            self.rank_batch.set_batch_wait_timeout_s(self.config.batch_wait_ms / 1000.0)
            logger.info("replica %d serves %s (%s)", os.getpid(), self.config.model, self.scorer.kind)

        @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
        async def rank_batch(self, queries: list[Query]) -> list:
            return await asyncio.to_thread(self.scorer.rank_each, queries)

        def query(self, question: str, texts: list[str], contexts: list[str | None] | None) -> Query:
            if len(texts) > self.config.max_texts:
                raise HTTPException(413, f"{len(texts)} texts: this service takes at most {self.config.max_texts}")
            if contexts is not None:
                if not self.scorer.contextual:
                    raise HTTPException(422, f"contexts given, but this {self.scorer.kind} model is not contextual")
                if len(contexts) != len(texts):
                    raise HTTPException(422, f"contexts has {len(contexts)} items for {len(texts)} texts")
                contexts = [context or "" for context in contexts]
            return Query(question, list(texts), contexts)

        async def ranked(self, query: Query) -> list[Ranked]:
            result = await self.rank_batch(query)
            if isinstance(result, Exception):
                raise HTTPException(500, f"scoring failed: {one_line(result)}")
            return result

        @api.get("/health")
        def health(self):
            return {"status": "ok"}

        @api.get("/info")
        def info(self):
            return {"model_id": self.name, **self.scorer.info()}

        @api.post("/rerank")
        async def rerank(self, body: TEIRequest):
            ranked = await self.ranked(self.query(body.query, body.texts, body.contexts))
            out = []
            for r in ranked:
                item = {"index": r.index, "score": raw_score(r.score) if body.raw_scores else r.score}
                if body.return_text:
                    item["text"] = body.texts[r.index]
                if r.stage is not None:
                    item["stage"] = r.stage
                out.append(item)
            return JSONResponse(out)

        @api.post("/v1/rerank")
        async def cohere_rerank(self, body: CohereRequest):
            texts = [d if isinstance(d, str) else d.text for d in body.documents]
            contexts = body.contexts
            if any(not isinstance(d, str) and d.context is not None for d in body.documents):
                if contexts is not None:
                    raise HTTPException(422, "give contexts either in documents or in contexts, not both")
                contexts = [None if isinstance(d, str) else d.context for d in body.documents]
            ranked = await self.ranked(self.query(body.query, texts, contexts))
            results = []
            for r in ranked[: body.top_n]:
                item = {"index": r.index, "relevance_score": r.score}
                if body.return_documents:
                    item["document"] = {"text": texts[r.index]}
                if r.stage is not None:
                    item["stage"] = r.stage
                results.append(item)
            return JSONResponse({"model": self.name, "results": results})

    _DEPLOYMENTS[max_request_bytes] = Reranker
    return Reranker


def build_app(config: ServeConfig, replicas: int = 1):
    """The Serve application for ``serve.run``: ``replicas`` replicas of one ranker, ``config.threads`` CPUs each."""
    threads = config.threads or max(1, (os.cpu_count() or 1) // max(1, replicas))
    config = ServeConfig(**{**asdict(config), "threads": threads})
    deployment = deployment_class(config.max_request_bytes).options(
        num_replicas=replicas,
        ray_actor_options={"num_cpus": threads},
        max_ongoing_requests=max(2 * config.max_batch_size, 8),
        health_check_period_s=5,
        health_check_timeout_s=30,
    )
    return deployment.bind(asdict(config))


# --------------------------------------------------------------------------------------------------------------------
# The command line


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="as2hub-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", metavar="FOLDER", help="a saved as2hub ranker (run_as2.py or run_joint.py output)")
    parser.add_argument("--pairwise", default=None, help="joint model only: a pairwise ranker, the cascade's 1st stage")
    parser.add_argument("--backend", default="torch", help="passed to Ranker.from_pretrained (torch, onnx, ...)")
    parser.add_argument("--quantize", default=None, help="passed to Ranker.from_pretrained (onnx: int8)")
    parser.add_argument("--replicas", type=int, default=1, help="model replicas (each its own process)")
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads (and Ray CPUs) per replica; default: cores / replicas"
    )
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max_length", type=int, default=256, help="longer inputs are truncated, as Ranker does")
    parser.add_argument(
        "--batch_size", type=int, default=None, help="pairs per forward pass (default: 16 on CPU, 64 on a GPU)"
    )
    parser.add_argument("--max_texts", type=int, default=DEFAULT_MAX_TEXTS, help="texts per request (413 above)")
    parser.add_argument("--max_batch_size", type=int, default=32, help="requests batched into one scoring call")
    parser.add_argument("--batch_wait_ms", type=float, default=5.0, help="how long a batch waits to fill")
    parser.add_argument(
        "--max_request_bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help="request bodies above this answer 413 (default: 2,000,000 bytes, as text-embeddings-inference)",
    )
    parser.add_argument(
        "--address", default=None, help="a running Ray cluster (auto, or HOST:6379); default: a local one"
    )
    args = parser.parse_args(argv)
    for name in ("replicas", "port"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def config_from_args(args) -> ServeConfig:
    return ServeConfig(
        model=args.model,
        pairwise=args.pairwise,
        backend=args.backend,
        quantize=args.quantize,
        threads=args.threads,
        max_length=args.max_length,
        batch_size=args.batch_size,
        max_texts=args.max_texts,
        max_batch_size=args.max_batch_size,
        batch_wait_ms=args.batch_wait_ms,
        max_request_bytes=args.max_request_bytes,
    )


def start(
    config: ServeConfig,
    replicas: int = 1,
    host: str = "127.0.0.1",
    port: int = 8000,
    address=None,
    name: str = APP_NAME,
    route_prefix: str = "/",
):
    """Start (or join) Ray, start Serve's HTTP proxy on ``host:port`` and deploy; returns the app's handle once
    every replica has loaded its model."""
    require_serve()
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": host, "port": port})
    return serve.run(build_app(config, replicas), name=name, route_prefix=route_prefix, blocking=False)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    config = config_from_args(args)
    check_folders(config)
    require_serve()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        start(config, args.replicas, args.host, args.port, args.address)
    except RuntimeError as error:  # the replicas could not load the ranker
        cause = replica_error() or str(error)
        stop_serving(args.address)
        raise ArgumentError(f"the ranker did not start in its replicas: {cause}") from error
    url = f"http://{args.host}:{args.port}"
    print(
        f"as2hub-serve: {config.model} on {url} (POST /rerank, POST /v1/rerank, GET /health); Ctrl-C stops", flush=True
    )
    stop.wait()
    print("as2hub-serve: stopping", flush=True)
    stop_serving(args.address)
    return 0


def replica_error() -> str | None:
    """The last line of the failed deployment's message (its replica's exception), or None."""
    from ray import serve

    try:
        deployments = serve.status().applications[APP_NAME].deployments
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return None
    lines = [line.strip() for d in deployments.values() for line in (d.message or "").splitlines() if line.strip()]
    return lines[-1] if lines else None


def stop_serving(address) -> None:
    """A private Ray instance is stopped; on a shared cluster only this application is removed."""
    import ray
    from ray import serve

    if address is None:
        serve.shutdown()
        ray.shutdown()
    else:
        serve.delete(APP_NAME)


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-serve``): user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())

"""The HTTP service: TEI's ``POST /rerank`` and Cohere/Jina's ``POST /v1/rerank`` over a
:class:`~as2hub.serving.scorer.RerankScorer`, on Ray Serve: two deployments, built by :func:`application`.

- :class:`Scorer`: the scoring replicas, each a process holding the ranker, concurrent requests batched by
  ``@serve.batch``. Admission is Ray Serve's own: each replica holds at most ``max_ongoing_requests`` requests, and at
  most ``max_queued_requests`` more wait for a free replica; past that the handle raises ``BackPressureError`` at
  once, carrying the deployment's ``BackpressureConfig`` (status 429 or 503, ``Retry-After``).
- :class:`Reranker`: the ingress, a FastAPI app (no model, no CPU reserved) that checks a request, calls
  :class:`Scorer` through its ``DeploymentHandle`` and answers. A ``BackPressureError`` becomes the service's JSON
  error with ``Retry-After``; a request whose scoring replica died is sent once more through the handle (the router
  has then dropped the dead replica), and when that fails too the answer is 503 with ``Retry-After``; both logged.

Importing this module needs the ``serve`` extra (FastAPI, Ray Serve): ``as2hub-serve`` imports it after checking. It
imports no torch, Transformers or ranker code, so the ingress replica, a process of its own that imports it, needs
2.7 s and 181 MB for it (10.4 s and 502 MB while it imported them; AVX2 EPYC, 2026-12-02); :class:`Scorer` imports
the ranker in its own replica.
A new endpoint is one method of :class:`Reranker` with its ``@api.get`` / ``@api.post`` route (and a request model
here when it takes a body). The request-body limit is the ingress's ``ServeConfig.max_request_bytes``: the ingress is
a process of its own, and :class:`Reranker` sets it when it starts.
"""

import asyncio
import logging
import math
import os
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.config import BackpressureConfig
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError
from ray.serve.handle import DeploymentHandle
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from as2hub.inference.options import check_drop
from as2hub.serving.messages import DEFAULT_MAX_REQUEST_BYTES, Query, Ranked, Refused, raw_score

if TYPE_CHECKING:
    from as2hub.serving.options import ServeConfig

logger = logging.getLogger("as2hub.serve")

ERROR_TYPES = {
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
    422: "Validation",
    429: "Overloaded",
    500: "Backend",
    503: "Unavailable",
}
# the ingress admits far more requests than the scoring replicas hold and queue, so that what is past their bounds is
# answered by the ingress (JSON, Retry-After) rather than queued in front of it by Serve's proxy
INGRESS_MIN_ONGOING = 1000


def error_body(status: int, message: str, error_type: str | None = None) -> dict:
    """Every error answer of the service: ``{"error": "<one line>", "error_type": ...}``."""
    return {"error": message, "error_type": error_type or ERROR_TYPES.get(status, "Error")}


class Unavailable(HTTPException):
    """A request the service cannot take now (overloaded, or no replica left to score it): 429 / 503 with
    ``Retry-After`` in whole seconds, rounded up."""

    def __init__(self, status: int, message: str, retry_after_s: float | None, error_type: str | None = None):
        headers = {"Retry-After": str(max(0, math.ceil(retry_after_s)))} if retry_after_s is not None else None
        super().__init__(status, message, headers=headers)
        self.error_type = error_type


def log_to_the_replica_log() -> None:
    """In a replica: ``as2hub.serve``'s records (INFO and above) go where Ray Serve's own go, the replica's log
    ``logs/serve/replica_<app>_<deployment>_<id>.log`` of the Ray session (with the request id), and its stderr."""
    ours = logging.getLogger("as2hub.serve")
    for handler in logging.getLogger("ray.serve").handlers:
        if handler not in ours.handlers:
            ours.addHandler(handler)
    ours.setLevel(logging.INFO)
    ours.propagate = False


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


class RequestBodyLimit:
    """ASGI middleware: a request body over the limit answers 413 with the service's JSON error, at once when its
    Content-Length says so, else (a chunked body) as soon as the bytes read pass the limit. ``max_bytes`` None: the
    replica's, :attr:`replica_max_bytes` (each replica is a process of its own; :class:`Reranker` sets it when it
    starts: Ray Serve copies the deployment class into the replica by value, so a module-level variable written
    from its methods would be a copy, while this class is imported by name).

    (FastAPI's and Starlette's own ``max_body_size`` replace any answer to a request whose Content-Length is over the
    limit with a plain-text 413, which is not the documented error shape.)"""

    replica_max_bytes = DEFAULT_MAX_REQUEST_BYTES

    def __init__(self, app, max_bytes: int | None = None):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        max_bytes = self.max_bytes if self.max_bytes is not None else RequestBodyLimit.replica_max_bytes
        limit = f"the limit of {max_bytes} bytes (--max_request_bytes)"
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > max_bytes:
            message = f"the request body of {length} bytes is over {limit}"
            return await JSONResponse(error_body(413, message), status_code=413)(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise HTTPException(413, f"the request body is over {limit}")  # the app's handler answers
            return message

        await self.app(scope, limited_receive, send)


def drop_fraction(drop: float | None) -> float | None:
    """A request's ``cascade_drop``: None, or a fraction in [0, 1) (checked by the cascade's own ``check_drop``)."""
    if drop is not None:
        check_drop(drop)
    return drop


Text = Annotated[StrictStr, AfterValidator(unicode_text)]
CascadeDrop = Annotated[float | None, AfterValidator(drop_fraction)]


class TEIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: Text
    texts: list[Text] = Field(min_length=1)
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = True  # TEI's flag: texts are always truncated to the model's max length
    contexts: list[Text | None] | None = None
    cascade_drop: CascadeDrop = None


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
    cascade_drop: CascadeDrop = None


api = FastAPI(title="as2hub reranker", description="TEI /rerank and Cohere/Jina /v1/rerank for as2hub rankers")
api.add_middleware(RequestBodyLimit)


@api.exception_handler(RequestValidationError)
async def validation_error(request: Request, error: RequestValidationError):
    return JSONResponse(status_code=422, content=error_body(422, first_error(error.errors())))


@api.exception_handler(StarletteHTTPException)  # this app's and Starlette's own (404, 405)
async def http_error(request: Request, error: StarletteHTTPException):
    body = error_body(error.status_code, str(error.detail), getattr(error, "error_type", None))
    return JSONResponse(status_code=error.status_code, content=body, headers=getattr(error, "headers", None))


def with_stage(item: dict, ranked: Ranked) -> dict:
    if ranked.stage is not None:
        item["stage"] = ranked.stage
    if ranked.layer is not None:
        item["layer"] = ranked.layer
    return item


@serve.deployment(name="Scorer")
class Scorer:
    """One scoring replica: a :class:`RerankScorer`, concurrent requests batched by ``@serve.batch`` into one scoring
    call. Every answer is a value (the ranking or a :class:`Refused`), never an exception: only a replica that dies
    makes its caller's call fail."""

    def __init__(self, config: dict):
        from as2hub.serving.options import ServeConfig  # the model's process only: the ingress imports no torch
        from as2hub.serving.scorer import RerankScorer

        log_to_the_replica_log()
        self.config = ServeConfig(**config)
        self.scorer = RerankScorer(self.config)
        self.scorer.check_cascade_drop(self.config.cascade_drop)  # a --cascade_drop the model cannot run: no replica
        # a batch never holds more requests than the replica admits
        self.rank_batch.set_max_batch_size(min(self.config.max_batch_size, self.config.max_ongoing_requests))
        self.rank_batch.set_batch_wait_timeout_s(self.config.batch_wait_ms / 1000.0)
        logger.info("scoring replica %d serves %s (%s)", os.getpid(), self.config.model, self.scorer.kind)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def rank_batch(self, queries: list[Query]) -> list:
        return await asyncio.to_thread(self.scorer.rank_each, queries)

    def refusal(self, query: Query) -> Refused | None:
        """Why this model does not score ``query`` (422), or None. The drop's range was checked when the request was
        read (:data:`CascadeDrop`); whether the model has cascade heads was asked once, when the replica started."""
        if query.cascade_drop is not None and self.scorer.no_cascade is not None:
            return Refused(422, f"cascade_drop: {one_line(self.scorer.no_cascade)}")
        if query.contexts is not None and not self.scorer.contextual:
            return Refused(422, f"contexts given, but this {self.scorer.kind} model is not contextual")
        return None

    async def rank(self, query: Query) -> list[Ranked] | Refused:
        refused = self.refusal(query)
        if refused is not None:
            return refused
        result = await self.rank_batch(query)
        if isinstance(result, Exception):
            return Refused(500, f"scoring failed: {one_line(result)}")
        return result

    def info(self) -> dict:
        return {**self.scorer.info(), "replica_pid": os.getpid()}


@serve.deployment(name="Reranker")
@serve.ingress(api)
class Reranker:
    """The ingress: checks a request, has a :class:`Scorer` replica rank it, answers. See the module's docstring."""

    def __init__(self, config: dict, scorer: DeploymentHandle):
        log_to_the_replica_log()
        # ServeConfig's fields as a namespace: checked when the app was built (ServeConfig imports the ranker layers)
        self.config = SimpleNamespace(**config)
        RequestBodyLimit.replica_max_bytes = self.config.max_request_bytes
        self.scorer = scorer
        self.name = Path(self.config.model).name or self.config.model
        self.retried = {"retried": 0, "recovered": 0, "unavailable": 0, "overloaded": 0}

    def query(
        self, question: str, texts: list[str], contexts: list[str | None] | None, cascade_drop: float | None = None
    ) -> Query:
        if cascade_drop is None:
            cascade_drop = self.config.cascade_drop
        if len(texts) > self.config.max_texts:
            raise HTTPException(413, f"{len(texts)} texts: this service takes at most {self.config.max_texts}")
        if contexts is not None:
            if len(contexts) != len(texts):
                raise HTTPException(422, f"contexts has {len(contexts)} items for {len(texts)} texts")
            contexts = [context or "" for context in contexts]
        return Query(question, list(texts), contexts, cascade_drop)

    async def call(self, method: str, *args):
        """``Scorer.<method>(*args)`` through the handle. Past the replicas' bounds: 429 / 503 with Retry-After at
        once. A replica that dies with the call in flight: the call is sent once more (scoring is idempotent; the
        router no longer routes to the dead replica); where the other replicas are full at that moment (the router
        still counts the dead replica's calls for a while), once more after their Retry-After, since the request was
        already taken; then 503 with Retry-After."""
        try:
            return await self.call_once(method, args)
        except (RayActorError, ReplicaUnavailableError) as error:
            self.retried["retried"] += 1
            logger.warning("%s: its scoring replica died mid-request (%s); sent once more", method, one_line(error))
        for attempt in (1, 2):
            try:
                result = await self.call_once(method, args)
            except (RayActorError, ReplicaUnavailableError) as error:
                self.retried["unavailable"] += 1
                logger.error("%s: the retry's scoring replica died too (%s); answered 503", method, one_line(error))
                message = f"no scoring replica could take the request ({type(error).__name__})"
                raise Unavailable(503, message, self.config.retry_after_s) from None
            except Unavailable as error:  # overloaded, or no replica left
                if attempt == 1 and error.error_type == "Overloaded":
                    wait = float((error.headers or {}).get("Retry-After", self.config.retry_after_s))
                    logger.warning(
                        "%s: the retry met full replicas (%s); sent again in %g s", method, error.detail, wait
                    )
                    await asyncio.sleep(wait)
                    continue
                self.retried["unavailable"] += 1
                logger.error("%s: no scoring replica could take the retry (%s); answered 503", method, error.detail)
                message = f"its scoring replica died and no other could take the request: {error.detail}"
                raise Unavailable(503, message, self.config.retry_after_s) from None
            self.retried["recovered"] += 1
            logger.warning("%s: the retry was answered", method)
            return result

    async def call_once(self, method: str, args: tuple):
        try:
            return await getattr(self.scorer, method).remote(*args)
        except BackPressureError as error:
            self.retried["overloaded"] += 1
            message = f"overloaded: {error} Retry after {error.retry_after_s or 0:g} s"
            raise Unavailable(error.status_code, message, error.retry_after_s, "Overloaded") from None
        except DeploymentUnavailableError as error:
            raise Unavailable(503, f"no scoring replica: {error.message}", self.config.retry_after_s) from None
        except RayTaskError as error:  # an exception in the replica (a bug, not the request): the documented 500
            if isinstance(error, RayActorError):
                raise
            raise HTTPException(500, f"scoring failed: {one_line(error.cause or error)}") from None

    async def ranked(self, query: Query) -> list[Ranked]:
        result = await self.call("rank", query)
        if isinstance(result, Refused):
            raise HTTPException(result.status, result.message)
        return result

    @api.get("/health")
    def health(self):
        return {"status": "ok"}

    @api.get("/info")
    async def info(self):
        """What is served (from one scoring replica, with what it has batched) and what the ingress retried."""
        return {"model_id": self.name, **(await self.call("info")), "ingress": dict(self.retried)}

    @api.post("/rerank")
    async def rerank(self, body: TEIRequest):
        ranked = await self.ranked(self.query(body.query, body.texts, body.contexts, body.cascade_drop))
        out = []
        for r in ranked:
            item = {"index": r.index, "score": raw_score(r.score) if body.raw_scores else r.score}
            if body.return_text:
                item["text"] = body.texts[r.index]
            out.append(with_stage(item, r))
        return JSONResponse(out)

    @api.post("/v1/rerank")
    async def cohere_rerank(self, body: CohereRequest):
        texts = [d if isinstance(d, str) else d.text for d in body.documents]
        contexts = body.contexts
        if any(not isinstance(d, str) and d.context is not None for d in body.documents):
            if contexts is not None:
                raise HTTPException(422, "give contexts either in documents or in contexts, not both")
            contexts = [None if isinstance(d, str) else d.context for d in body.documents]
        ranked = await self.ranked(self.query(body.query, texts, contexts, body.cascade_drop))
        results = []
        for r in ranked[: body.top_n]:
            item = {"index": r.index, "relevance_score": r.score}
            if body.return_documents:
                item["document"] = {"text": texts[r.index]}
            results.append(with_stage(item, r))
        return JSONResponse({"model": self.name, "results": results})


def application(config: "ServeConfig", replicas: int = 1):
    """The Serve application: ``replicas`` :class:`Scorer` replicas with ``config.threads`` CPUs each, bounded by
    ``config.max_ongoing_requests`` / ``config.max_queued_requests``, behind one :class:`Reranker` ingress."""
    backpressure = BackpressureConfig(status_code=config.overload_status, retry_after_s=config.retry_after_s)
    scorer = Scorer.options(
        num_replicas=replicas,
        ray_actor_options={"num_cpus": config.threads},
        max_ongoing_requests=config.max_ongoing_requests,
        max_queued_requests=config.max_queued_requests,
        backpressure_config=backpressure,
        health_check_period_s=5,
        health_check_timeout_s=30,
    )
    bounded = replicas * config.max_ongoing_requests + max(config.max_queued_requests, 0)
    ingress_cap = max(INGRESS_MIN_ONGOING, 4 * bounded)
    ingress = Reranker.options(
        num_replicas=1,
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=ingress_cap,
        max_queued_requests=ingress_cap,
        backpressure_config=backpressure,
    )
    return ingress.bind(asdict(config), scorer.bind(asdict(config)))

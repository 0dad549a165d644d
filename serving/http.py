"""The HTTP service: TEI's ``POST /rerank`` and Cohere/Jina's ``POST /v1/rerank`` over a
:class:`~as2hub.serving.scorer.RerankScorer`, a FastAPI app that Ray Serve runs as the ingress of every replica.

Importing this module needs the ``serve`` extra (FastAPI, Ray Serve): ``as2hub-serve`` imports it after checking.
A new endpoint is one method of :class:`Reranker` with its ``@api.get`` / ``@api.post`` route (and a request model
here when it takes a body). The request-body limit is the replica's ``ServeConfig.max_request_bytes``: every replica
is a process of its own, and :class:`Reranker` sets it when it starts.
"""

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr
from ray import serve
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from as2hub.serving.options import DEFAULT_MAX_REQUEST_BYTES, ServeConfig
from as2hub.serving.scorer import Query, Ranked, RerankScorer, raw_score

logger = logging.getLogger("as2hub.serve")

ERROR_TYPES = {404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge", 422: "Validation", 500: "Backend"}


def error_body(status: int, message: str) -> dict:
    """Every error answer of the service: ``{"error": "<one line>", "error_type": ...}``."""
    return {"error": message, "error_type": ERROR_TYPES.get(status, "Error")}


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


Text = Annotated[StrictStr, AfterValidator(unicode_text)]


class TEIRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: Text
    texts: list[Text] = Field(min_length=1)
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = True  # TEI's flag: texts are always truncated to the model's max length
    contexts: list[Text | None] | None = None
    cascade_drop: float | None = Field(default=None, ge=0.0, lt=1.0)


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
    cascade_drop: float | None = Field(default=None, ge=0.0, lt=1.0)


api = FastAPI(title="as2hub reranker", description="TEI /rerank and Cohere/Jina /v1/rerank for as2hub rankers")
api.add_middleware(RequestBodyLimit)


@api.exception_handler(RequestValidationError)
async def validation_error(request: Request, error: RequestValidationError):
    return JSONResponse(status_code=422, content=error_body(422, first_error(error.errors())))


@api.exception_handler(StarletteHTTPException)  # this app's and Starlette's own (404, 405)
async def http_error(request: Request, error: StarletteHTTPException):
    return JSONResponse(status_code=error.status_code, content=error_body(error.status_code, str(error.detail)))


def with_stage(item: dict, ranked: Ranked) -> dict:
    if ranked.stage is not None:
        item["stage"] = ranked.stage
    if ranked.layer is not None:
        item["layer"] = ranked.layer
    return item


@serve.deployment(name="Reranker")
@serve.ingress(api)
class Reranker:
    """One replica: a :class:`RerankScorer`, concurrent requests batched by ``@serve.batch`` into one scoring call."""

    def __init__(self, config: dict):
        self.config = ServeConfig(**config)
        RequestBodyLimit.replica_max_bytes = self.config.max_request_bytes
        self.scorer = RerankScorer(self.config)
        self.name = Path(self.config.model).name or self.config.model
        self.scorer.check_cascade_drop(self.config.cascade_drop)  # a --cascade_drop the model cannot run: no replica
        self.rank_batch.set_max_batch_size(self.config.max_batch_size)
        self.rank_batch.set_batch_wait_timeout_s(self.config.batch_wait_ms / 1000.0)
        logger.info("replica %d serves %s (%s)", os.getpid(), self.config.model, self.scorer.kind)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def rank_batch(self, queries: list[Query]) -> list:
        return await asyncio.to_thread(self.scorer.rank_each, queries)

    def query(
        self, question: str, texts: list[str], contexts: list[str | None] | None, cascade_drop: float | None = None
    ) -> Query:
        if cascade_drop is None:
            cascade_drop = self.config.cascade_drop
        try:
            self.scorer.check_cascade_drop(cascade_drop)
        except ValueError as error:
            raise HTTPException(422, f"cascade_drop: {one_line(error)}") from error
        if len(texts) > self.config.max_texts:
            raise HTTPException(413, f"{len(texts)} texts: this service takes at most {self.config.max_texts}")
        if contexts is not None:
            if not self.scorer.contextual:
                raise HTTPException(422, f"contexts given, but this {self.scorer.kind} model is not contextual")
            if len(contexts) != len(texts):
                raise HTTPException(422, f"contexts has {len(contexts)} items for {len(texts)} texts")
            contexts = [context or "" for context in contexts]
        return Query(question, list(texts), contexts, cascade_drop)

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

"""Serve a saved as2hub ranker over HTTP on Ray Serve: TEI's ``POST /rerank`` and Cohere/Jina's ``POST /v1/rerank``.

Usage (``pip install "as2hub[serve]"``)::

    as2hub-serve outputs/minilm-wikiqa                                  # http://127.0.0.1:8000, one replica
    as2hub-serve outputs/minilm-wikiqa --backend onnx --replicas 2 --port 8080
    as2hub-serve outputs/joint --pairwise outputs/pairwise              # the cascade: pairwise, then joint top k
    curl -s localhost:8000/rerank -H 'content-type: application/json' \\
        -d '{"query": "who wrote hamlet?", "texts": ["Hamlet is a tragedy.", "Shakespeare wrote it."]}'

Endpoints (one FastAPI app, Ray Serve's ingress, which holds no model; each of the ``--replicas`` scoring replicas
holds one ranker):

- ``POST /rerank`` (text-embeddings-inference): ``{"query", "texts", "raw_scores": false, "return_text": false,
  "contexts": null}`` -> ``[{"index", "score"(, "text")}]``, best first. ``raw_scores`` gives the logit of the
  probability, ``log(p / (1 - p))`` (a 2-label head: the difference of its two logits), saturating at about ±16.1.
- ``POST /v1/rerank`` (Cohere / Jina): ``{"query", "documents", "top_n": null, "return_documents": false,
  "contexts": null}`` -> ``{"model", "results": [{"index", "relevance_score"(, "document": {"text"})}]}``, best
  first; a document is a string or ``{"text": ..., "context": ...}``; ``model`` in the request is ignored.
- ``GET /health`` -> 200 ``{"status": "ok"}`` once the replicas have their model; ``GET /info``: what is served
  (from one scoring replica) and what the ingress retried or refused (``ingress``).

Contexts (contextual rankers, Di Liello et al. 2023): ``contexts`` is a list as long as ``texts`` / ``documents``,
each item the text around that candidate in its document, or ``null`` for none (scored with an empty context, as
``Ranker`` does when no context is given). A model that is not contextual answers 422 to a request with contexts.

A joint model (``run_joint.py``) is served alone (its candidates read k at a time, sorted by joint probability) or, with
``--pairwise FOLDER``, as the cascade of :class:`~as2hub.inference.joint_ranking.JointRanker`: the pairwise ranker
scores every text, the joint model re-ranks its top k; each result also carries ``"stage"`` (``"joint"`` or
``"pairwise"``: whose probability the score is).

Scores are :class:`~as2hub.inference.ranking.Ranker`'s (``JointRanker``'s) for the same inputs: concurrent requests
are batched by ``@serve.batch`` (up to ``--max_batch_size`` requests, waiting at most ``--batch_wait_ms``) into ONE
``Ranker.score_pairs`` call, and a text longer than the model's ``--max_length`` is truncated, as ``Ranker`` does.
Every error the service answers is ``{"error": "<one line>", "error_type": ...}``: malformed JSON, a missing or
non-string field, a text holding a lone surrogate (``"\\ud800"``: valid JSON, no Unicode text) and an empty ``texts``
answer 422 (``Validation``, naming the field); more texts than ``--max_texts`` or a request body over
``--max_request_bytes`` (default 2,000,000 bytes, TEI's payload limit) 413 (``PayloadTooLarge``); a request whose
scoring fails, alone or in a batch (the batch is then scored request by request), 500 (``Backend``). ``GET /info``
also counts what the replica has batched (``batching``: requests, batches, the largest batch, split batches).

Overload and failures: a scoring replica holds at most ``--max_ongoing_requests`` requests, and at most
``--max_queued_requests`` more wait for a free replica (Ray Serve's own bounds); a request past both is answered at
once, without queueing, ``--overload_status`` (429, as TEI; or 503) with ``Retry-After: --retry_after_s`` and
``error_type`` ``Overloaded``. A request in flight on a scoring replica that dies is sent once more through Serve's
handle, to another replica (scoring is idempotent); if none can take it, 503 (``Unavailable``) with ``Retry-After``.
Both are logged on ``as2hub.serve`` and counted by ``GET /info`` (``ingress``).

The same command serves on a Ray cluster of several machines: ``--address auto`` on a node of a running cluster
(``ray start --head`` / ``ray start --address HEAD:6379``), every node with ``as2hub[serve]`` installed and the folder
at the same path; replicas go to any node with free CPUs (``--threads`` CPUs each). See run_scripts/SERVING.md.
"""

import argparse
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from as2hub.run_scripts.arguments import ArgumentError, run_cli
from as2hub.serving.options import (
    DEFAULT_MAX_ONGOING_REQUESTS,
    DEFAULT_MAX_QUEUED_REQUESTS,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_TEXTS,
    DEFAULT_OVERLOAD_STATUS,
    DEFAULT_RETRY_AFTER_S,
    OVERLOAD_STATUSES,
    ServeConfig,
)
from as2hub.serving.scorer import Query, Ranked, RerankScorer, is_joint_folder, raw_score

logger = logging.getLogger("as2hub.serve")

INSTALL_HINT = 'pip install "as2hub[serve]"  (Ray Serve and FastAPI)'
APP_NAME = "as2hub"
__all__ = ["Query", "Ranked", "RerankScorer", "ServeConfig", "build_app", "check_folders", "cli", "main", "raw_score"]


def check_folders(config: ServeConfig) -> None:
    """Name a wrong folder or a contradictory option before Ray starts (a Hub id is left to the loader)."""
    from as2hub.modeling.folders import check_ranker_folder

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
    for name in (
        "max_texts",
        "max_batch_size",
        "max_length",
        "batch_size",
        "max_request_bytes",
        "max_ongoing_requests",
    ):
        if getattr(config, name) is not None and getattr(config, name) < 1:
            raise ArgumentError(f"--{name} must be at least 1, got {getattr(config, name)}")
    if config.max_queued_requests < 1 and config.max_queued_requests != -1:
        raise ArgumentError(
            f"--max_queued_requests must be at least 1, or -1 (no limit), got {config.max_queued_requests}"
        )
    if config.overload_status not in OVERLOAD_STATUSES:
        raise ArgumentError(f"--overload_status must be 429 or 503, got {config.overload_status}")
    if not 0 <= config.retry_after_s < float("inf"):
        raise ArgumentError(f"--retry_after_s must be a number of seconds >= 0, got {config.retry_after_s}")
    if config.cascade_drop is not None and Path(config.model, "config.json").is_file():
        if not json.loads(Path(config.model, "config.json").read_text()).get("cascade_layers"):
            raise ArgumentError(
                f"--cascade_drop needs a model with cascade heads: {config.model} has none (train them with "
                "as2hub-train --cascade_layers 2,4, or --cascade_heads_only on this ranker)"
            )


def require_serve():
    """Import Ray Serve and FastAPI; an :class:`ArgumentError` (one line on the command line) when they are missing."""
    try:
        import fastapi  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as error:
        raise ArgumentError(f"as2hub-serve needs the `serve` extra: {INSTALL_HINT} ({error})") from error


def build_app(config: ServeConfig, replicas: int = 1):
    """The Serve application for ``serve.run``: ``replicas`` scoring replicas of one ranker, ``config.threads`` CPUs
    each, behind one ingress (:func:`as2hub.serving.http.application`)."""
    require_serve()
    from as2hub.serving.http import application

    threads = config.threads or max(1, (os.cpu_count() or 1) // max(1, replicas))
    return application(ServeConfig(**{**asdict(config), "threads": threads}), replicas)


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
        "--cascade_drop",
        type=float,
        default=None,
        help="layer cascade: drop this fraction of a request's remaining texts at each cascade head (a model trained "
        "with --cascade_layers); a request's own cascade_drop wins; default: the full model",
    )
    parser.add_argument(
        "--max_ongoing_requests",
        type=int,
        default=DEFAULT_MAX_ONGOING_REQUESTS,
        help="requests one scoring replica holds at once (batched together); default %(default)s, measured in "
        "run_scripts/SERVING.md",
    )
    parser.add_argument(
        "--max_queued_requests",
        type=int,
        default=DEFAULT_MAX_QUEUED_REQUESTS,
        help="requests waiting for a free replica; past them --overload_status with Retry-After at once; -1: no limit; "
        "default %(default)s, measured in run_scripts/SERVING.md",
    )
    parser.add_argument(
        "--overload_status",
        type=int,
        default=DEFAULT_OVERLOAD_STATUS,
        choices=OVERLOAD_STATUSES,
        help="the answer past the queue (429: text-embeddings-inference's; 503)",
    )
    parser.add_argument(
        "--retry_after_s",
        type=float,
        default=DEFAULT_RETRY_AFTER_S,
        help="the Retry-After of a 429 / 503, rounded up to whole seconds",
    )
    parser.add_argument(
        "--address", default=None, help="a running Ray cluster (auto, or HOST:6379); default: a local one"
    )
    args = parser.parse_args(argv)
    if args.cascade_drop is not None and not 0.0 <= args.cascade_drop < 1.0:
        raise ArgumentError(f"--cascade_drop is a fraction in [0, 1), got {args.cascade_drop}")
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
        cascade_drop=args.cascade_drop,
        max_ongoing_requests=args.max_ongoing_requests,
        max_queued_requests=args.max_queued_requests,
        overload_status=args.overload_status,
        retry_after_s=args.retry_after_s,
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

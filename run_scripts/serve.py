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
``Ranker.score_pairs`` call, and a text longer than ``--max_length`` (default: the max length the model was trained
with) is truncated, as ``Ranker`` does.
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
import logging
import signal
import sys
import threading

from as2hub.modeling.errors import ArgumentError
from as2hub.run_scripts.arguments import run_cli
from as2hub.serving.messages import Query, Ranked, raw_score
from as2hub.serving.options import ServeConfig, add_flags, from_flags
from as2hub.serving.scorer import RerankScorer
from as2hub.serving.service import build_app, check_folders, replica_error, require_serve, start, stop_serving

logger = logging.getLogger("as2hub.serve")

__all__ = [
    "ArgumentError",
    "Query",
    "Ranked",
    "RerankScorer",
    "ServeConfig",
    "build_app",
    "build_parser",
    "check_folders",
    "cli",
    "config_from_args",
    "main",
    "parse_args",
    "raw_score",
    "start",
]


def build_parser() -> argparse.ArgumentParser:
    """The flags: the ranker's and the service's options are :class:`ServeConfig`'s fields (``serving/options.py``:
    their defaults, help and choices, ``--backend`` among ``BACKEND_CHOICES``); the rest say where to run."""
    parser = argparse.ArgumentParser(prog="as2hub-serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", metavar="FOLDER", help="a saved as2hub ranker (run_as2.py or run_joint.py output)")
    add_flags(parser, ServeConfig)
    parser.add_argument("--replicas", type=int, default=1, help="model replicas (each its own process)")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--address", default=None, help="a running Ray cluster (auto, or HOST:6379); default: a local one"
    )
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    for name in ("replicas", "port"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def config_from_args(args) -> ServeConfig:
    """The :class:`ServeConfig` of the parsed flags (its ``__post_init__`` checks every option's range)."""
    return from_flags(ServeConfig, args)


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


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-serve``): user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())

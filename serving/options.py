"""The options that load a ranker for serving or scoring: one type, one place that turns them into the keyword
arguments of ``Ranker.from_pretrained`` / ``JointRanker.from_pretrained``."""

from dataclasses import dataclass

DEFAULT_MAX_TEXTS = 1000
DEFAULT_MAX_REQUEST_BYTES = 2_000_000  # text-embeddings-inference's default --payload-limit
# Admission (run_scripts/SERVING.md, "Overload and failures", for how they were measured): requests a scoring replica
# holds at once (its @serve.batch takes them together), and requests waiting for a free slot on any replica; past
# both, a request is answered OVERLOAD_STATUS with Retry-After at once.
DEFAULT_MAX_ONGOING_REQUESTS = 32  # a full @serve.batch (--max_batch_size 32): the best throughput measured
DEFAULT_MAX_QUEUED_REQUESTS = 32  # with one of two replicas dead, 32 clients still wait rather than being refused
DEFAULT_RETRY_AFTER_S = 1.0
OVERLOAD_STATUSES = (429, 503)  # Ray Serve's BackpressureConfig takes these two
DEFAULT_OVERLOAD_STATUS = 429  # text-embeddings-inference's answer past --max-concurrent-requests


@dataclass
class RankerOptions:
    """A ranker folder (or Hub id) and how it is run."""

    model: str
    backend: str = "torch"
    quantize: str | None = None
    threads: int | None = None
    max_length: int = 256
    batch_size: int | None = None  # pairs per forward pass; None: 16 on CPU, 64 on a GPU (Ranker's default)

    def backend_options(self) -> dict:
        """Keyword arguments for ``Ranker.from_pretrained`` / ``JointRanker.from_pretrained``: the backend string is
        passed on as given; ``num_threads`` only for ONNX Runtime backends and ``auto`` (the torch backends use
        ``torch.set_num_threads``, which :meth:`set_threads` calls)."""
        options = {"backend": self.backend}
        if self.quantize is not None:
            options["quantize"] = self.quantize
        if self.threads is not None and (self.backend == "auto" or self.backend.startswith("onnx")):
            options["num_threads"] = self.threads
        return options

    def set_threads(self) -> None:
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)

    def load_ranker(self, path: str | None = None):
        """A :class:`~as2hub.inference.ranking.Ranker` of ``path`` (default: :attr:`model`) with these options."""
        from as2hub.inference.ranking import Ranker

        self.set_threads()
        return Ranker.from_pretrained(
            path or self.model, max_length=self.max_length, batch_size=self.batch_size, **self.backend_options()
        )


@dataclass
class ServeConfig(RankerOptions):
    """Everything a replica needs to load its ranker and answer requests; the same values are shown by ``GET /info``."""

    pairwise: str | None = None  # a joint model's first stage (the cascade)
    max_texts: int = DEFAULT_MAX_TEXTS
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # larger request bodies answer 413
    # the layer cascade's drop for requests that do not say (None: the full model); needs a model with cascade heads
    cascade_drop: float | None = None
    max_ongoing_requests: int = DEFAULT_MAX_ONGOING_REQUESTS  # per scoring replica
    max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS  # waiting for any replica; -1: no limit
    retry_after_s: float = DEFAULT_RETRY_AFTER_S  # the Retry-After of a 429 / 503 (rounded up to whole seconds)
    overload_status: int = DEFAULT_OVERLOAD_STATUS  # past the queue: 429 or 503


@dataclass
class ScoreConfig(RankerOptions):
    """What a batch-scoring worker needs: the ranker and the input's column names."""

    question_column: str = "question"
    candidate_column: str = "candidate"
    context_column: str = "context"
    keep_columns: tuple[str, ...] = ()

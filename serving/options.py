"""The options that load a ranker for serving or scoring: one type per use, and the one home of every option.

Each field is an option of ``as2hub-serve`` / ``as2hub-score``: its default, its help, its type and its choices are
written here once (:func:`option`), and :func:`add_flags` builds the command's flags from them, so a default or a
range is never written twice. Each option's range is checked once, where the option object is made
(``__post_init__``): a wrong value raises :class:`~as2hub.modeling.errors.ArgumentError` naming the flag, whether it
came from the command line or from Python (``score_files(..., batch_size=0)``). :meth:`RankerOptions.load_ranker` is
the one place that turns them into the keyword arguments of ``Ranker.from_pretrained`` /
``JointRanker.from_pretrained``.
"""

import argparse
from dataclasses import dataclass, field, fields

from as2hub.inference.backends import BACKEND_CHOICES
from as2hub.modeling.errors import ArgumentError
from as2hub.modeling.folders import QUANTIZE_CHOICES
from as2hub.serving.messages import DEFAULT_MAX_REQUEST_BYTES

DEFAULT_MAX_TEXTS = 1000
# Admission (run_scripts/SERVING.md, "Overload and failures", for how they were measured): requests a scoring replica
# holds at once (its @serve.batch takes them together), and requests waiting for a free slot on any replica; past
# both, a request is answered OVERLOAD_STATUS with Retry-After at once.
DEFAULT_MAX_ONGOING_REQUESTS = 32  # a full @serve.batch (--max_batch_size 32): the best throughput measured
DEFAULT_MAX_QUEUED_REQUESTS = 32  # with one of two replicas dead, 32 clients still wait rather than being refused
DEFAULT_RETRY_AFTER_S = 1.0
OVERLOAD_STATUSES = (429, 503)  # Ray Serve's BackpressureConfig takes these two
DEFAULT_OVERLOAD_STATUS = 429  # text-embeddings-inference's answer past --max-concurrent-requests
# the batch scorer's own output columns: an input column kept under one of these names is refused
OWN_COLUMNS = {
    "row": "the row number over all inputs",
    "question": "the --question_column's text",
    "candidate": "the --candidate_column's text",
    "context": "the --context_column's text",
    "score": "the ranker's score",
}


def comma_separated(text: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")`` (the flag's form of a tuple option)."""
    return tuple(item for item in text.split(",") if item)


def option(default, help: str, type=str, choices=None, cli: bool = True):
    """A dataclass field that is also a command-line flag ``--<name>``: its default, help, type and choices."""
    return field(default=default, metadata={"help": help, "type": type, "choices": choices, "cli": cli})


def add_flags(parser: argparse.ArgumentParser, options_class) -> None:
    """A ``--<name>`` flag of ``parser`` for every :func:`option` of ``options_class``, from its one definition."""
    for item in fields(options_class):
        meta = item.metadata
        if not meta.get("cli"):
            continue
        if meta["type"] is bool:  # a switch: --<name> turns it on
            parser.add_argument(f"--{item.name}", action="store_true", default=item.default, help=meta["help"])
            continue
        kwargs = {"default": item.default, "help": meta["help"], "type": meta["type"]}
        if meta["choices"] is not None:
            kwargs["choices"] = meta["choices"]
        parser.add_argument(f"--{item.name}", **kwargs)


def from_flags(options_class, args: argparse.Namespace, **values):
    """An ``options_class`` of the parsed flags (the fields ``args`` has), ``values`` on top."""
    names = {item.name for item in fields(options_class)}
    return options_class(**{**{k: v for k, v in vars(args).items() if k in names}, **values})


def at_least(options, minimum, *names: str) -> None:
    for name in names:
        value = getattr(options, name)
        if value is not None and value < minimum:
            raise ArgumentError(f"--{name} must be at least {minimum}, got {value}")


@dataclass
class RankerOptions:
    """A ranker folder (or Hub id) and how it is run."""

    model: str = field(metadata={"cli": False})  # the commands' positional argument
    backend: str = option("torch", "the scoring backend (inference/BACKENDS.md)", choices=BACKEND_CHOICES)
    quantize: str | None = option(None, "onnx: the quantized graph", choices=QUANTIZE_CHOICES)
    threads: int | None = option(
        None, "CPU threads (and Ray CPUs) per replica or worker; default: cores / replicas (or workers)", type=int
    )
    # None: the max length the model was trained with (its config), else modeling/folders.py's DEFAULT_MAX_LENGTH
    max_length: int | None = option(
        None, "longer inputs are truncated, as Ranker does (default: the model's trained max length)", type=int
    )
    # pairs per forward pass; None: Ranker's default (16 on CPU, 64 on a GPU)
    batch_size: int | None = option(None, "pairs per forward pass (default: 16 on CPU, 64 on a GPU)", type=int)
    torch_compile: bool = option(
        False,
        "torch backends: run the ranker's passes through torch.compile (compiled at load, about 30 s per replica; "
        "inference/BACKENDS.md)",
        type=bool,
    )
    unpadded: bool = option(
        False,
        "torch backends: compute the dense layers on the pairs' real tokens only (inference/unpadded.py)",
        type=bool,
    )

    def __post_init__(self):
        if self.backend not in BACKEND_CHOICES:
            raise ArgumentError(f"--backend must be one of {', '.join(BACKEND_CHOICES)}, got {self.backend!r}")
        if self.quantize not in (None, *QUANTIZE_CHOICES):
            raise ArgumentError(f"--quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {self.quantize!r}")
        at_least(self, 1, "threads", "max_length", "batch_size")
        for flag in ("torch_compile", "unpadded"):
            if getattr(self, flag) and (self.backend.startswith("onnx") or self.quantize is not None):
                raise ArgumentError(
                    f"--{flag} applies to the torch backends, not --backend {self.backend}"
                    + (f" --quantize {self.quantize}" if self.quantize else "")
                )

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

    def load_ranker(self, path: str | None = None, **extra):
        """A :class:`~as2hub.inference.ranking.Ranker` of ``path`` (default: :attr:`model`) with these options
        (``max_length`` None: the one the model was trained with); ``extra``: more keyword arguments of
        ``Ranker.from_pretrained`` (those of a command's own options, e.g. ``exact_top_margin``)."""
        from as2hub.inference.ranking import Ranker

        self.set_threads()
        switches = {name: True for name in ("torch_compile", "unpadded") if getattr(self, name)}
        return Ranker.from_pretrained(
            path or self.model,
            max_length=self.max_length,
            batch_size=self.batch_size,
            **self.backend_options(),
            **switches,
            **extra,
        )


@dataclass
class ServeConfig(RankerOptions):
    """Everything a replica needs to load its ranker and answer requests; the same values are shown by ``GET /info``."""

    pairwise: str | None = option(None, "joint model only: a pairwise ranker, the cascade's 1st stage")
    max_texts: int = option(DEFAULT_MAX_TEXTS, "texts per request (413 above)", type=int)
    max_batch_size: int = option(32, "requests batched into one scoring call", type=int)
    batch_wait_ms: float = option(5.0, "how long a batch waits to fill", type=float)
    max_request_bytes: int = option(
        DEFAULT_MAX_REQUEST_BYTES,
        "request bodies above this answer 413 (default: 2,000,000 bytes, as text-embeddings-inference)",
        type=int,
    )  # larger request bodies answer 413
    # the layer cascade's drop for requests that do not say (None: the full model); needs a model with cascade heads
    cascade_drop: float | None = option(
        None,
        "layer cascade: drop this fraction of a request's remaining texts at each cascade head (a model trained "
        "with --cascade_layers); a request's own cascade_drop wins; default: the full model",
        type=float,
    )
    # a quantized backend's near ties at the top scored again in fp32 (Ranker's exact_top_margin); None: off
    exact_top_margin: float | None = option(
        None,
        "backends other than fp32 torch, pairwise and contextual rankers: where a request's two best texts score "
        "within this many logits, score the two again in fp32 so that rounding cannot swap the top answer (0.025 "
        "for torch-int8 on MiniLM; inference/BACKENDS.md); default: off",
        type=float,
    )
    max_ongoing_requests: int = option(
        DEFAULT_MAX_ONGOING_REQUESTS,
        "requests one scoring replica holds at once (batched together); default %(default)s, measured in "
        "run_scripts/SERVING.md",
        type=int,
    )  # per scoring replica
    max_queued_requests: int = option(
        DEFAULT_MAX_QUEUED_REQUESTS,
        "requests waiting for a free replica; past them --overload_status with Retry-After at once; -1: no limit; "
        "default %(default)s, measured in run_scripts/SERVING.md",
        type=int,
    )  # waiting for any replica; -1: no limit
    retry_after_s: float = option(
        DEFAULT_RETRY_AFTER_S, "the Retry-After of a 429 / 503, rounded up to whole seconds", type=float
    )
    overload_status: int = option(
        DEFAULT_OVERLOAD_STATUS,
        "the answer past the queue (429: text-embeddings-inference's; 503)",
        type=int,
        choices=OVERLOAD_STATUSES,
    )

    def __post_init__(self):
        super().__post_init__()
        at_least(self, 1, "max_texts", "max_batch_size", "max_request_bytes", "max_ongoing_requests")
        at_least(self, 0, "batch_wait_ms")
        if self.max_queued_requests < 1 and self.max_queued_requests != -1:
            raise ArgumentError(
                f"--max_queued_requests must be at least 1, or -1 (no limit), got {self.max_queued_requests}"
            )
        if self.overload_status not in OVERLOAD_STATUSES:
            raise ArgumentError(f"--overload_status must be 429 or 503, got {self.overload_status}")
        if not 0 <= self.retry_after_s < float("inf"):
            raise ArgumentError(f"--retry_after_s must be a number of seconds >= 0, got {self.retry_after_s}")
        if self.exact_top_margin is not None:
            from as2hub.inference.ranking import check_exact_top_margin

            try:
                check_exact_top_margin(self.exact_top_margin)
            except ValueError as error:
                raise ArgumentError(f"--{error}") from None
        if self.cascade_drop is not None:
            from as2hub.inference.cascade import check_drop

            try:
                check_drop(self.cascade_drop)
            except ValueError as error:
                raise ArgumentError(f"--{error}") from None


@dataclass
class ScoreConfig(RankerOptions):
    """What a batch-scoring worker needs: the ranker and the input's column names."""

    question_column: str = option("question", "the input's question column")
    candidate_column: str = option("candidate", "the input's candidate column")
    context_column: str = option("context", "the input's context column (optional in the input)")
    keep_columns: tuple[str, ...] = option(
        (), "comma-separated input columns copied to the output", type=comma_separated
    )

    def __post_init__(self):
        super().__post_init__()
        self.keep_columns = tuple(self.keep_columns)
        for column in self.keep_columns:  # it would silently replace the output's own column
            if column in OWN_COLUMNS:
                raise ArgumentError(
                    f"--keep_columns {column}: the output has its own {column!r} column ({OWN_COLUMNS[column]}); "
                    "rename that input column to keep it"
                )

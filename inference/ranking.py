"""Ranking answer candidates with a (contextual) AS2 cross-encoder.

Example:
    >>> from as2hub.inference.ranking import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker")  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP
    [RankedCandidate(index=1, score=0.93, text='Shakespeare wrote it.'), RankedCandidate(index=0, ...)]

Speed comes from tokenizing every text once in one fast-tokenizer call, sorting pairs by length and cutting them into
batches where padding plus a fixed cost per pass costs least (:mod:`as2hub.inference.batching`), padding each batch
only to its own longest row, computing the last layer for the first token only (the one
the head reads, :mod:`as2hub.modeling.first_token`) and running under ``torch.inference_mode``. ``Ranker.from_pretrained(path, backend="auto")`` runs the same batches on the fastest
correct backend for the machine: ONNX Runtime int8 (:mod:`as2hub.inference.onnx_runtime`), torch bf16 where the CPU
has bf16 hardware, fp16/bf16 on a GPU (:mod:`as2hub.inference.backends`, ``inference/BACKENDS.md``).

With a ``pipeline("text-classification", model=folder, trust_remote_code=True)`` pass the context inside the pair::

    pipe({"text": question, "text_pair": context_text_pair(pipe.tokenizer, candidate, context)})

The model derives the three segments from the separators: RoBERTa tokenizers send no ``token_type_ids``, and the pair
ids of BERT-style tokenizers (1 for the candidate and the context alike) are raised to 2 after the second separator,
so the pipeline, sentence-transformers' ``CrossEncoder`` and :class:`Ranker` give the same scores.
"""

import contextlib
import heapq
import logging
import math
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from as2hub.inference import backends, int8
from as2hub.inference.backends import BACKENDS, LoadedModel, ScoringModel, check_runnable, normalize, torch_dtype
from as2hub.inference.batching import (
    call_cost_kind,
    check_call_cost,
    default_call_cost,
    length_batches,
    scoring_threads,
)
from as2hub.inference.cascade import cascade_order, cascade_scores
from as2hub.inference.unpadded import UnpaddedStages, check_unpadded, unpadded_logits
from as2hub.modeling.first_token import first_token_last_layer
from as2hub.modeling.folders import check_model_path, ranking_max_length
from as2hub.modeling.segment_layout import SegmentLayout, pad_batch

logger = logging.getLogger("as2hub.backends")


# Texts a probe tokenizes both ways before the Rust tokenizer is called directly: cases, accents, punctuation, digits,
# spaces at the ends and inside, a symbol and a word no vocabulary holds whole.
TOKEN_PROBE = ["Who wrote Hamlet?", '  Édith Piaf\'s 1950s hits -- "La Vie en rose"  ', "x² ≠ 3.5%", "Zyzzyvas™ qux"]


class TokenIds:
    """The token ids of texts without special tokens, as ``tokenizer(texts, add_special_tokens=False)["input_ids"]``
    gives them, in one call of the Rust tokenizer's ``encode_batch_fast`` (no character offsets) where the tokenizer is
    a fast one and a probe (:data:`TOKEN_PROBE`) gets the same ids both ways; else, and whenever the Rust tokenizer
    holds a truncation or padding setting (transformers sets one there for a call that asks for it, and clears it on
    the next call that does not), through the tokenizer's own call. The direct call skipped transformers' wrapping:
    0.29 against 0.42 ms for a WikiQA question's texts (all-MiniLM-L6-v2's tokenizer, AVX-512 EPYC, 2026-11-30).

        >>> ids = TokenIds(tokenizer)  # doctest: +SKIP
        >>> ids(["Who wrote Hamlet?"]) == tokenizer(["Who wrote Hamlet?"], add_special_tokens=False)["input_ids"]  # doctest: +SKIP
        True
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        self.encode = getattr(self.backend, "encode_batch_fast", None) or getattr(self.backend, "encode_batch", None)
        if self.encode is not None and self._via_tokenizer(TOKEN_PROBE) != self._direct(TOKEN_PROBE):
            logger.info("%s: its Rust tokenizer alone gives other ids than its call; tokenizing through the call",
                        type(tokenizer).__name__)  # fmt: skip
            self.encode = None

    @property
    def direct(self) -> bool:
        """Whether the next call goes to the Rust tokenizer directly."""
        return self.encode is not None and self.backend.truncation is None and self.backend.padding is None

    def _via_tokenizer(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def _direct(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.encode(texts, add_special_tokens=False)]

    def __call__(self, texts: list[str]) -> list[list[int]]:
        return self._direct(texts) if self.direct else self._via_tokenizer(texts)


@dataclass(frozen=True)
class RankedCandidate:
    """One ranked candidate: its position in the input, its score and text, and ``layer``: the encoder depth that
    scored it (the model's depth; with ``cascade_drop``, a cascade head's layer for a candidate dropped there)."""

    index: int
    score: float
    text: str
    layer: int | None = field(default=None, kw_only=True)  # keyword-only: subclasses keep their positional fields


def context_text_pair(tokenizer, candidate: str, context: str) -> str:
    """``text_pair`` that carries a context for pipelines: candidate, the layout's middle separators, context."""
    middle = SegmentLayout.from_tokenizer(tokenizer).middle
    return candidate + "".join(tokenizer.convert_ids_to_tokens(list(middle))) + context


def load_scoring_model(path, auto_class, backend="torch", quantize=None, num_threads=None, trust_remote_code=True):
    """``(model, folder)`` for a ranker: the torch model (``auto_class``) or an ONNX Runtime session standing in for it
    (``backend="onnx"``, :class:`~as2hub.inference.onnx_runtime.OnnxRankerModel`; a Hub id resolves to its download).
    The backend names are those of :mod:`as2hub.inference.backends`; ``.backend`` is the one that runs (with
    ``"auto"``, the one it picked). Returns a :class:`~as2hub.inference.backends.LoadedModel`."""
    check_model_path(path)  # a wrong path: one clear error (modeling/folders.py), not transformers' traceback
    name, quantize = normalize(backend, quantize)
    if name == "auto":
        return _load_auto(path, auto_class, quantize, num_threads, trust_remote_code)
    check_runnable(name)
    loaded = _load(name, path, auto_class, quantize, num_threads, trust_remote_code)
    if name == "torch-bf16" and not backends.cpu_features().bf16_hardware:
        logger.warning(
            "backend 'torch-bf16' on %s: no bf16 hardware (avx512_bf16 / amx_bf16), so bf16 matmuls are emulated "
            "and slower than fp32; backend='auto' picks the fastest backend for this CPU",
            backends.cpu_features().model,
        )
    return loaded


def _load(name, path, auto_class, quantize, num_threads, trust_remote_code):
    engine = BACKENDS[name][0]
    if engine == "onnx":
        from .onnx_runtime import OnnxRankerModel

        model = OnnxRankerModel.from_pretrained(
            path, quantize=quantize, num_threads=num_threads, trust_remote_code=trust_remote_code
        )
        return LoadedModel(model, model.graph_path.parent.parent, {None: "onnx", "int8": "onnx-int8"}[quantize])
    if quantize is not None or num_threads is not None:
        raise ValueError(
            "quantize and num_threads are options of backend='onnx'; "
            "for torch use torch.set_num_threads (and torch.ao.quantization)"
        )
    model = auto_class.from_pretrained(path, trust_remote_code=trust_remote_code)
    if BACKENDS[name][1] == "int8":
        calibration = int8.load_calibration(path)
        try:
            int8.quantize_encoder(model, calibration)
        except ValueError as error:
            if calibration is None:
                raise
            raise ValueError(f"{int8.calibration_path(path)}: {error}; write it again") from error
        if calibration is None:
            logger.info(
                "backend 'torch-int8': %s has no %s, the products are not smoothed (Ranker.calibrate_int8 writes one: "
                "on WikiQA dev it halved the scores' distance from fp32)",
                path,
                int8.CALIBRATION_FILE,
            )
    dtype = torch_dtype(name)
    if engine == "cuda":
        model = model.to(device="cuda", dtype=dtype)
    elif dtype != torch.float32:
        model = model.to(dtype=dtype)
    return LoadedModel(model, path, name)


def _load_auto(path, auto_class, quantize, num_threads, trust_remote_code):
    """The first backend of :func:`~as2hub.inference.backends.auto_order` that loads; one log line says which and why."""
    if quantize is not None:
        raise ValueError("backend='auto' chooses the precision itself: pass quantize with backend='onnx'")
    cpu = backends.cpu_features()
    skipped = []
    for name in backends.auto_order(cpu):
        try:
            check_runnable(name, cpu)
            engine = BACKENDS[name][0]
            threads = num_threads if engine == "onnx" else None
            loaded = _load(name, path, auto_class, BACKENDS[name][1] if engine == "onnx" else None,
                           threads, trust_remote_code)  # fmt: skip
        except backends.not_available_here() as error:  # only "cannot run here"; anything else is raised
            if name == "torch":
                raise
            skipped.append(f"{name}: {_first_line(error)}")
            continue
        if engine == "torch" and num_threads is not None:
            torch.set_num_threads(num_threads)
        if skipped:
            logger.warning(
                "backend='auto' picked %r on %s: skipped %s", name, backends.describe_machine(cpu), "; ".join(skipped)
            )
        else:
            logger.info(
                "backend='auto' picked %r on %s (the first choice for this machine)",
                name,
                backends.describe_machine(cpu),
            )
        return loaded
    raise AssertionError("unreachable: 'torch' is the last choice of auto_order")


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


# Pairs per forward pass when the caller does not say: on the CPU, batches of 16 length-sorted pairs scored MiniLM-L6
# 1.05-1.08x faster than batches of 64 with ONNX int8 and 0.98-1.12x with torch fp32, 1 and 2 threads (WikiQA clean
# test, AMD EPYC AVX2, 2026-11-25, benchmarks/results/ranking_throughput_batch_sweep.json, inference/BACKENDS.md):
# tighter padding and a smaller working set. A GPU wants larger batches.
DEFAULT_BATCH_SIZE = {"cpu": 16, "cuda": 64}


# Pairs per pass of the unpadded pass (``unpadded=True``) on any device: its dense layers compute no padding, so a
# smaller batch saves nothing and costs a call. Per question (WikiQA clean test, 237 questions, 38 with more than 16
# candidates), compiled bf16 unpadded ranked 1.03-1.04x faster with 64 than with 16 (AMX Xeon, 1 thread, 3 repeats
# interleaved per question, 2026-11-29).
UNPADDED_BATCH_SIZE = 64


@dataclass(frozen=True)
class ExactTop:
    """The top answer as the full-precision model orders it (:class:`Ranker`'s ``exact_top``): where a question's two
    best candidates score within ``margin`` logits (``log(p / (1 - p))`` of their scores) of each other, ``reference``
    (an fp32 :class:`Ranker` of the same weights) scores the two again and their scores are its own. A quantized
    backend's scores sit a small distance from fp32's (``torch-int8`` on MiniLM: 0.005 logits on average, the
    difference between two candidates' errors below 0.025 about nine times in ten and below 0.07 in every case on
    WikiQA dev, AVX-512 EPYC, 2026-11-30), so only a near tie can change which candidate comes first; the margin says
    how near a tie is scored again. Its cost: the share of questions with such a tie (0.025 logits: 4 of 122 WikiQA
    dev questions) times an fp32 pass of two pairs."""

    margin: float
    reference: "Ranker"

    def __post_init__(self):
        check_exact_top_margin(self.margin)

    def rescore(self, rows, groups: list[list[int]], scores: list[float], layers: list[int], depth: int) -> int:
        """Replace, in place, the scores of each group's two best candidates (by ``scores``, among those the full
        model scored: ``layers`` equal to ``depth``) with the reference's where they lie within the margin; ``rows``:
        ``(questions, candidates, contexts)`` of every candidate. Returns how many pairs were scored again."""
        chosen = []
        for group in groups:
            full = [i for i in group if layers[i] == depth]
            if len(full) < 2:
                continue
            first, second = heapq.nlargest(2, full, key=scores.__getitem__)
            if _logit(scores[first]) - _logit(scores[second]) < self.margin:
                chosen += [first, second]
        if chosen:
            questions, candidates, contexts = rows
            exact = self.reference.score_pairs(
                [questions[i] for i in chosen],
                [candidates[i] for i in chosen],
                None if contexts is None else [contexts[i] for i in chosen],
            )
            for i, score in zip(chosen, exact.tolist()):
                scores[i] = score
        return len(chosen)


def check_exact_top_margin(margin) -> None:
    """Raise ``ValueError`` unless ``margin`` is a number of logits, at least 0 (``float("inf")``: always)."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or math.isnan(margin) or margin < 0:
        raise ValueError(
            f"exact_top_margin must be a number of logits >= 0 (0.025 for torch-int8 on MiniLM, ExactTop says why), "
            f"got {margin!r}"
        )


def _logit(p: float) -> float:
    """``log(p / (1 - p))`` of a score in [0, 1] (-inf at 0, inf at 1)."""
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return math.log(p) - math.log1p(-p)


def default_batch_size(device, unpadded: bool = False) -> int:
    """:data:`DEFAULT_BATCH_SIZE` for a model's device (16 on CPU, 64 on a GPU); :data:`UNPADDED_BATCH_SIZE` (64) for
    the unpadded pass."""
    if unpadded:
        return UNPADDED_BATCH_SIZE
    return DEFAULT_BATCH_SIZE.get(torch.device(device).type, DEFAULT_BATCH_SIZE["cuda"])


class Ranker:
    """A model, its tokenizer and the batching that makes scoring fast.

    ``batch_size`` is the most pairs per forward pass; ``None`` picks :func:`default_batch_size` for the model's device
    (16 on CPU, 64 on a GPU; 64 with ``unpadded=True``). Which pairs share a pass: the pairs are sorted by length and
    cut into batches by a cost model (:func:`~as2hub.inference.batching.length_batches`): padding costs its tokens, and
    each pass ``call_cost`` tokens more; ``None`` takes the measured default for the device, the kind of backend and
    the scoring threads
    (:data:`~as2hub.inference.batching.DEFAULT_CALL_COST`: 16 tokens on 1 CPU thread, 64 on 2, 256 with bf16 on 1
    thread; full batches on a GPU); ``float("inf")`` gives plain batches of ``batch_size`` sorted pairs. Scores do not
    depend on it beyond float rounding (ONNX int8: within 3e-5, fp32 within 1e-6, on WikiQA; ``torch-int8`` within 6e-8
    with ``unpadded=True`` and 2.2e-3 padded, where attention's rounding over another padded length can move a value
    across a boundary of its token's integers; bf16 within 4.4e-3, its own batch dependence). ``max_length`` (tokens
    per input, longer ones truncated): ``None`` takes the one the model was trained with (its config's
    ``as2hub_max_length``, written by ``run_as2.py``), else ``modeling/folders.py``'s ``DEFAULT_MAX_LENGTH``
    (:func:`~as2hub.modeling.folders.ranking_max_length`).

    ``unpadded=True`` (a torch backend; :mod:`as2hub.inference.unpadded`) computes the encoder's dense layers on the
    pairs' real tokens only, attention in the padded layout: batches are then ``batch_size`` length-sorted pairs (the
    cost model's padding is attention's alone), and the cascade carries each survivor's tokens unpadded. Scores equal
    the padded pass's up to float rounding.

    ``exact_top`` (:class:`ExactTop`; ``from_pretrained(..., exact_top_margin=m)`` builds it): where a question's two
    best candidates score within ``m`` logits of each other, :meth:`rank` and :meth:`rank_many` score the two again
    with the full-precision reference ranker, so that a quantized backend's rounding cannot swap the top answer.
    """

    def __init__(
        self,
        model: ScoringModel,
        tokenizer,
        max_length: int | None = None,
        batch_size: int | None = None,
        backend="torch",
        call_cost: float | None = None,
        unpadded: bool = False,
        exact_top: "ExactTop | None" = None,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = ranking_max_length(model.config, max_length)
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1 (or None for the device's default), got {batch_size}")
        self.batch_size = batch_size or default_batch_size(model.device, unpadded)
        self.layout = SegmentLayout.from_tokenizer(tokenizer)
        self._token_ids = TokenIds(tokenizer)
        # torch pads to a multiple of 8; the ONNX backend pads exactly (it sets this attribute to None)
        self.pad_to_multiple_of = getattr(model, "pad_to_multiple_of", 8)
        self.contextual = bool(getattr(model.config, "contextual", False))
        self.backend = backend  # which backend scores (``from_pretrained`` passes the one it loaded)
        if call_cost is not None:
            check_call_cost(call_cost)
        self._call_cost = None if call_cost is None else float(call_cost)
        self.layout.check_max_length(self.max_length, 3 if self.contextual else 2)
        if unpadded:
            check_unpadded(model)
        self.unpadded = bool(unpadded)
        self.exact_top = exact_top

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        trust_remote_code: bool = True,
        backend: str = "torch",
        quantize: str | None = None,
        num_threads: int | None = None,
        torch_compile: bool = False,
        unpadded: bool = False,
        exact_top_margin: float | None = None,
        **kwargs,
    ) -> "Ranker":
        """Load a saved ranker and the backend that scores with it.

        ``backend``: ``"torch"`` (fp32, the default: the reference scores), ``"auto"`` (the fastest correct backend for
        this machine; what to use when you do not care, see ``inference/BACKENDS.md``), ``"torch-bf16"``,
        ``"torch-int8"`` (int8 encoder products, per-token scales: :mod:`as2hub.inference.int8`), ``"onnx"``
        (``quantize="int8"``, or ``"onnx-int8"``), ``"cuda-fp16"``, ``"cuda-bf16"``
        (:mod:`as2hub.inference.backends`). ``ranker.backend`` says which one runs.

        ``backend="onnx"`` runs ``onnx/model.onnx`` (``quantize="int8"``: ``onnx/model_qint8_dynamic.onnx``) written by
        ``as2hub-export-onnx PATH [--quantize int8]`` (``pip install "as2hub[onnx]"``), with ``num_threads`` intra-op
        threads (default: one per physical core); the graph must come from the folder's current weights. The torch
        backends use ``torch.set_num_threads`` (``backend="auto"`` applies ``num_threads`` to whichever it picks).
        ``"auto"`` never fails where ``"torch"`` works: what cannot run here (no GPU, no extra, no exported graph, a
        stale graph) is skipped, and one log line on ``as2hub.backends`` names the pick and why. A named backend that
        cannot run here raises, saying why and what to install. Other keyword arguments (``max_length``,
        ``batch_size``: default 16 pairs per forward pass on CPU, 64 on a GPU and unpadded) go to :class:`Ranker`.

        ``torch_compile=True`` runs a torch backend's passes (and cascade stages) through ``torch.compile``
        (:mod:`as2hub.inference.compiled`): compiled here, before the first call (MiniLM-L6 on one core: about 30 s,
        70 s with cascade heads). Measured on an AMX Xeon (``inference/BACKENDS.md``, 2026-11-29): one question per call
        1.32x the eager bf16 model (1.28x unpadded), batched over questions 1.2x. An ONNX backend refuses it; with
        ``backend="auto"`` it applies when the pick is a torch backend.

        ``unpadded=True`` skips the padding in the dense layers (:mod:`as2hub.inference.unpadded`; a torch backend, eager
        or compiled): on an AMX Xeon, one WikiQA question per call, bf16 compiled 1.44x the padded pass (eager 1.49x,
        2026-11-29); batched over many questions, where little is padding, slower (``inference/BACKENDS.md``).

        ``exact_top_margin`` (logits; a backend other than fp32 ``"torch"``, on the CPU): an fp32 ranker of the same
        folder is loaded beside this one (same ``torch_compile``, ``unpadded`` and ``max_length``), and where a
        question's two best candidates score within the margin of each other, :meth:`rank` scores the two again with
        it (:class:`ExactTop`), so the top answer is the one fp32 picks. ``None`` (the default): off. With
        ``"torch"`` it does nothing (the scores are fp32's already).

        Example:
            >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="auto", num_threads=2)  # doctest: +SKIP
            >>> ranker.backend  # doctest: +SKIP
            'onnx-int8'
            >>> fast = Ranker.from_pretrained("path/to/ranker", backend="torch-bf16", torch_compile=True)  # doctest: +SKIP
            >>> fast = Ranker.from_pretrained("path/to/ranker", backend="torch-bf16", unpadded=True)  # doctest: +SKIP
            >>> # one question per call on a CPU with VNNI and without AMX, the fastest (inference/BACKENDS.md):
            >>> fast = Ranker.from_pretrained(  # doctest: +SKIP
            ...     "path/to/ranker", backend="torch-int8", unpadded=True, torch_compile=True
            ... )
            >>> # the same, the top answer fp32's wherever int8's two best lie within 0.025 logits:
            >>> exact = Ranker.from_pretrained(  # doctest: +SKIP
            ...     "path/to/ranker", backend="torch-int8", unpadded=True, torch_compile=True, exact_top_margin=0.025
            ... )
        """
        if exact_top_margin is not None:
            check_exact_top_margin(exact_top_margin)
        for flag, value, why in (
            ("torch_compile", torch_compile, "ONNX Runtime optimizes its own graph"),
            ("unpadded", unpadded, "the exported graph computes padded batches"),
        ):
            if value and normalize(backend, quantize)[0] == "onnx":
                raise ValueError(
                    f"{flag}=True applies to the torch backends, not {backend!r} ({why}): use backend='torch', "
                    "'torch-bf16' or a CUDA backend"
                )
        loaded = load_scoring_model(
            path, AutoModelForSequenceClassification, backend, quantize, num_threads, trust_remote_code
        )
        tokenizer = AutoTokenizer.from_pretrained(loaded.folder, trust_remote_code=trust_remote_code)
        model = loaded.model
        if torch_compile and isinstance(model, torch.nn.Module):
            from as2hub.inference.compiled import CompiledRankerModel

            model = CompiledRankerModel(model)
        elif torch_compile:  # backend="auto" picked ONNX Runtime
            logger.info("torch_compile: backend='auto' picked %r, not a torch backend: not compiled", loaded.backend)
        if unpadded and not isinstance(loaded.model, torch.nn.Module):  # backend="auto" picked ONNX Runtime
            logger.info("unpadded: backend='auto' picked %r, not a torch backend: padded batches", loaded.backend)
            unpadded = False
        ranker = cls(model, tokenizer, backend=loaded.backend, unpadded=unpadded, **kwargs)
        if model is not loaded.model:
            model.warm_up(ranker)
        if exact_top_margin is not None and ranker.backend != "torch":
            if ranker.model.device.type != "cpu":
                raise ValueError(
                    f"exact_top_margin scores near ties again with fp32 on the CPU; backend {ranker.backend!r} runs on "
                    f"{ranker.model.device}: leave exact_top_margin unset there"
                )
            reference = cls.from_pretrained(
                path,
                trust_remote_code=trust_remote_code,
                torch_compile=torch_compile and isinstance(loaded.model, torch.nn.Module),
                unpadded=unpadded,
                max_length=ranker.max_length,
            )
            ranker.exact_top = ExactTop(float(exact_top_margin), reference)
        return ranker

    def _tokens(self, texts: list[str]) -> list[list[int]]:
        unique = list(dict.fromkeys(texts))
        lookup = dict(zip(unique, self._token_ids(unique) if unique else []))
        return [lookup[text] for text in texts]

    def _rows(self, questions: list[str], candidates: list[str], contexts: list[str] | None):
        if len(questions) != len(candidates) or (contexts is not None and len(contexts) != len(candidates)):
            raise ValueError("questions, candidates and contexts must have the same length")
        segments = [self._tokens(questions), self._tokens(candidates)]
        if self.contextual:
            segments.append(self._tokens(contexts or [""] * len(candidates)))
        num_types = self.model.config.type_vocab_size
        return [self.layout.build(list(parts), self.max_length, num_types) for parts in zip(*segments)]

    @torch.inference_mode()
    def score_pairs(
        self, questions: list[str], candidates: list[str], contexts: list[str] | None = None
    ) -> torch.Tensor:
        """Probability of "correct" for each (question, candidate[, context]), in input order (the full model)."""
        rows = self._rows(questions, candidates, contexts)
        scores = torch.empty(len(rows))
        device = self.model.device
        multiple = self._passes()[1]
        # the head reads the first token: the last layer computes it alone (the unpadded pass does so itself)
        with contextlib.nullcontext() if self.unpadded else first_token_last_layer(self.model):
            for chunk in self.batches([len(ids) for ids, _ in rows]):
                batch = pad_batch([rows[i] for i in chunk], self.layout.pad_token_id, multiple)
                if self.unpadded:
                    logits = unpadded_logits(self.model, batch)
                else:
                    logits = self.model(**{k: v.to(device) for k, v in batch.items()}).logits
                scores[chunk] = self.model.logits_to_scores(logits.float()).cpu()
        return scores

    @property
    def call_cost(self) -> float:
        """The cost model's tokens per forward pass: the one given, else the default for the model's device, its kind
        of backend and its scoring threads now (:func:`~as2hub.inference.batching.default_call_cost`)."""
        if self._call_cost is not None:
            return self._call_cost
        return default_call_cost(self.model.device.type, scoring_threads(self.model), call_cost_kind(self.model))

    def _passes(self) -> tuple[float, int | None]:
        """``(call_cost, pad_to_multiple_of)`` of this ranker's passes: the cost model's, or with ``unpadded`` (the
        dense layers compute no padding) full length-sorted batches padded to their longest row."""
        return (float("inf"), None) if self.unpadded else (self.call_cost, self.pad_to_multiple_of)

    def batches(self, lengths: list[int]) -> list[list[int]]:
        """Which rows (of these token lengths) share a forward pass: length-sorted batches of at most ``batch_size``
        rows, cut where padding plus ``call_cost`` per pass costs least (:func:`~as2hub.inference.batching.length_batches`);
        with ``unpadded``, where the dense layers compute no padding, full length-sorted batches of ``batch_size``."""
        return length_batches(lengths, self.batch_size, *self._passes())

    def rank(
        self,
        question: str,
        candidates: list[str],
        contexts: list[str] | None = None,
        cascade_drop: float | None = None,
    ) -> list[RankedCandidate]:
        """Candidates sorted by score, best first.

        ``cascade_drop`` (a model with cascade heads, :mod:`as2hub.inference.cascade`): at each head the weakest
        ``cascade_drop`` of the remaining candidates leave; they rank below the survivors, in their head's order, and
        their ``layer`` says which head scored them. ``None`` (the default) scores every candidate with the full model.
        With :attr:`exact_top` the two best (by the full model) are scored again in fp32 where they nearly tie.

        Example:
            >>> ranker.rank("who wrote hamlet?", candidates, cascade_drop=0.4)  # doctest: +SKIP
        """
        return self.rank_many([question], [candidates], None if contexts is None else [contexts], cascade_drop)[0]

    def calibrate_int8(
        self,
        questions: list[str],
        candidates: list[str],
        contexts: list[str] | None = None,
        save_to: str | None = None,
    ) -> dict[str, torch.Tensor]:
        """Record what ``backend="torch-int8"`` needs to smooth its products and round its weights
        (:mod:`as2hub.inference.int8`): each encoder product input's largest magnitude per feature while this fp32
        ranker scores the pairs (``questions`` and ``candidates`` side by side, as :meth:`score_pairs`), and each
        product's int8 weights rounded by GPTQ on those inputs (:func:`~as2hub.inference.int8.calibrate`; about 30 s
        for 600 pairs on MiniLM, one core). ``save_to``: the ranker's folder, where
        :data:`~as2hub.inference.int8.CALIBRATION_FILE` is written (stamped with its weights) and read by every later
        ``Ranker.from_pretrained(folder, backend="torch-int8")`` (by its Hub id too, once the folder is pushed). A few
        hundred pairs like the ones to rank: on WikiQA dev, statistics from 606 training pairs brought the scores' mean
        distance from fp32 from 0.018 to 0.009 (in logits), from 5 unrelated pairs only to 0.015, and with the rotation
        and the GPTQ weights to 0.005 (AVX-512 EPYC, 2026-11-30). Returns the calibration's tensors.

        Example:
            >>> ranker = Ranker.from_pretrained("path/to/ranker")  # doctest: +SKIP
            >>> ranker.calibrate_int8(train_questions, train_candidates, save_to="path/to/ranker")  # doctest: +SKIP
            >>> fast = Ranker.from_pretrained(  # doctest: +SKIP
            ...     "path/to/ranker", backend="torch-int8", unpadded=True, torch_compile=True
            ... )
        """
        if self.backend != "torch" or not isinstance(self.model, torch.nn.Module):  # compiled: not a Module
            raise ValueError(
                f"calibrate_int8 reads the fp32 model's own activations: load the ranker with backend='torch' and "
                f"without torch_compile (this one runs {self.backend!r})"
            )
        if not questions:
            raise ValueError("calibrate_int8 needs at least one (question, candidate) pair")
        calibration = int8.calibrate(self.model, lambda: self.score_pairs(questions, candidates, contexts))
        if save_to is not None:
            int8.save_calibration(save_to, calibration, len(questions))
        return calibration

    def rank_many(
        self,
        questions: list[str],
        candidates: list[list[str]],
        contexts: list[list[str]] | None = None,
        cascade_drop: float | None = None,
    ) -> list[list[RankedCandidate]]:
        """:meth:`rank` for several questions at once (one list of candidates, and of contexts, per question): the
        pairs of every question share the batches, so many short lists rank as fast as one long one."""
        if len(candidates) != len(questions) or (contexts is not None and len(contexts) != len(questions)):
            raise ValueError("questions, candidates and contexts need one entry per question")
        flat_q = [q for q, cands in zip(questions, candidates) for _ in cands]
        flat_c = [c for cands in candidates for c in cands]
        flat_x = None
        if contexts is not None:
            for cands, ctx in zip(candidates, contexts):
                if len(ctx) != len(cands):
                    raise ValueError("each question needs one context per candidate")
            flat_x = [x for ctx in contexts for x in ctx]
        groups = [g for g, cands in enumerate(candidates) for _ in cands]
        if cascade_drop is None:
            scores = self.score_pairs(flat_q, flat_c, flat_x).tolist()
            layers = [self.model.config.num_hidden_layers] * len(scores)
        else:
            call_cost, multiple = self._passes()
            result = cascade_scores(
                self.model,
                self._rows(flat_q, flat_c, flat_x),
                groups,
                cascade_drop,
                self.batch_size,
                self.layout.pad_token_id,
                multiple,
                call_cost=call_cost,
                runner=UnpaddedStages(self.model) if self.unpadded else None,
            )
            scores, layers = result.scores.tolist(), result.layers
        starts = [0]  # each question's pairs: flat rows starts[g] .. starts[g + 1] - 1
        for cands in candidates:
            starts.append(starts[-1] + len(cands))
        members = [list(range(start, end)) for start, end in zip(starts, starts[1:])]
        if self.exact_top is not None:
            self.exact_top.rescore((flat_q, flat_c, flat_x), members, scores, layers,
                                   self.model.config.num_hidden_layers)  # fmt: skip
        return [
            [
                RankedCandidate(i - start, scores[i], flat_c[i], layer=layers[i])
                for i in cascade_order(indices, scores, layers)
            ]
            for start, indices in zip(starts, members)
        ]


def rank(model, tokenizer, question: str, candidates: list[str], contexts: list[str] | None = None, **kwargs):
    """One-call ranking: ``rank(model, tokenizer, q, candidates, contexts=None)`` -> sorted :class:`RankedCandidate`."""
    return Ranker(model, tokenizer, **kwargs).rank(question, candidates, contexts)

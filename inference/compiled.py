"""The torch backends compiled by ``torch.compile`` (inductor): the same batches, fewer and fused kernels per pass.

A ranker scores one question's candidates in a few small forward passes, where eager PyTorch spends a large share of
each pass outside the linear layers (attention, GELU, layer norm, copies and casts: 42% of a bf16 pass on an AMX
Xeon, ``benchmarks/results/profile_question_amx.json``). Compiled, inductor fuses those into the
products' epilogues and a few loops, and with ``freezing`` prepacks the weights for oneDNN once::

    >>> from as2hub.inference import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="torch-bf16", torch_compile=True)  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP

:class:`CompiledRankerModel` stands in for the torch model inside :class:`~as2hub.inference.ranking.Ranker` (fp32,
bf16, CUDA): the full model's pass and, for a model with cascade heads, each cascade stage
(:mod:`as2hub.inference.cascade`) run compiled, with the last layer computed for the first token only as the eager
path does (:mod:`as2hub.modeling.first_token`). Shapes are dynamic (``dynamic=True``): one graph serves every batch
and length, so a service does not recompile per request. :meth:`CompiledRankerModel.warm_up` compiles before the first
request (for MiniLM-L6 on one core about 30 s, 70 s with cascade stages; once per process);
``Ranker.from_pretrained(..., torch_compile=True)`` calls it.

What it costs: the compile time, a C++ compiler on the CPU (inductor builds its kernels with ``g++``), and scores that
differ from the eager model's by floating-point rounding (fused kernels sum in another order; the bounds are in
``tests/test_compiled_ranking.py``). What it gains (``inference/BACKENDS.md``, AMX Xeon, bf16, 1 thread, WikiQA
test questions, 2026-11-29): one question per call 1.32x the eager model, 1.28x with ``unpadded=True`` (378 pairs/s,
1.86x the best CrossEncoder configuration); batched over questions 1.2x.
"""

import contextlib
import functools
import logging
import time

import torch

from as2hub.inference import cpu_ops
from as2hub.inference.cascade import TorchStages, cascade_layers
from as2hub.inference.int8 import Int8Linear
from as2hub.inference.unpadded import embedded_stage, packed_stage
from as2hub.modeling.first_token import first_token_last_layer

logger = logging.getLogger("as2hub.backends")

# inductor's config while a pass compiles on the CPU: ``freezing`` treats the weights as constants (the linear layers'
# prepacked for oneDNN once, not reordered on every call; folded where possible); the module is never trained through
# this wrapper. It is set around the calls (compiles happen inside them), not passed as ``torch.compile(options=...)``:
# inductor reads ``freezing`` from its global config, so the option was ignored (torch 2.13: the graphs kept ``addmm``
# on the weights as inputs, 2026-11-29). On a GPU, where freezing only folds constants, the config is left as it is.
FREEZING = {"freezing": True}
# and for an int8 model (``backend="torch-int8"``, :mod:`as2hub.inference.int8`): inductor otherwise recomputes a long
# pointwise chain (a product's rescaling, bias and GELU) in every loop that reads it, the per-token minimum and maximum
# and then the next product's quantization. Realized once: the feed-forward kernel 0.58 against 1.14 ms (MiniLM-L6,
# 10 WikiQA pairs, AVX-512 EPYC, 1 thread, 2026-11-29).
INT8_INDUCTOR = {"realize_opcount_threshold": 4}
# where the pass's CPU steps load as C++ operators (:mod:`as2hub.inference.cpu_ops`), the wrapper that calls the
# graph's kernels is written in C++ too (inductor's ``cpp_wrapper``): no Python between a question's kernels
CPP_WRAPPER = {"cpp_wrapper": True}


def int8_inductor() -> dict:
    """inductor's config for an int8 model's passes: :data:`INT8_INDUCTOR`, with :data:`CPP_WRAPPER` where the C++
    operators load."""
    return {**INT8_INDUCTOR, **(CPP_WRAPPER if cpu_ops.library() else {})}


@contextlib.contextmanager
def _outside_output_capture():
    """The cascade's stages call encoder layers outside the model's forward, where transformers' output-capturing hooks
    read a ``ContextVar`` that dynamo cannot trace (a graph break in every layer, then recompiles on argument
    patterns). Inside this block the hooks read "no capture" from the collector's compile-time slot instead, as they
    do inside a compiled forward; the slot is restored after. Where transformers has no such collector, nothing
    changes (the stages still run, with graph breaks)."""
    try:
        from transformers.utils.output_capturing import _active_collector as collector

        saved = (collector.compiling, collector.global_var)
    except (ImportError, AttributeError):
        yield
        return
    collector.compiling, collector.global_var = True, None
    try:
        yield
    finally:
        collector.compiling, collector.global_var = saved


def _shape_guards():
    """Keep dynamic sizes that happen to be equal (a length of 32 and a head size of 32) from being taken as one size:
    with dynamo's duck sizing a later length of 33 would recompile, and after ``recompile_limit`` recompiles dynamo falls back
    to eager for good. Applied while a compiled pass runs (compiles happen inside calls)."""
    return torch.fx.experimental._config.patch(use_duck_shape=False)


def frozen_weights(device, extra: dict | None = None) -> contextlib.AbstractContextManager:
    """Inductor's :data:`FREEZING` while a pass on ``device`` runs (and compiles), on the CPU; nothing elsewhere.

    Example (a compiled model's calls, where its graphs are built)::

        >>> compiled = torch.compile(model, dynamic=True)  # doctest: +SKIP
        >>> with frozen_weights(model.device):  # doctest: +SKIP
        ...     logits = compiled(**batch).logits
    """
    if torch.device(device).type != "cpu":
        return contextlib.nullcontext()
    import torch._inductor.config as inductor_config

    return inductor_config.patch({**FREEZING, **(extra or {})})


def _own_code(function):
    """``function`` behind a wrapper whose code object is this call's alone.

    Dynamo keeps compiled graphs, and counts them against ``recompile_limit``, per code object. Compiled directly, every
    :class:`CompiledRankerModel` in a process would share one budget for :func:`~as2hub.inference.unpadded.packed_stage`
    and for its model class's ``forward`` (each model's frozen weights need graphs of their own): the second ranker
    compiled only part of its graphs and the third almost none, the rest ran eagerly (measured with dynamo's counter,
    14, 8 and 2 frames for three identical tiny models, 2026-11-29). Each wrapper starts a frame of its own code, so each
    ranker gets its own graphs and budget."""

    def call(*args, **kwargs):
        return function(*args, **kwargs)

    call.__code__ = call.__code__.replace()  # a new code object (same bytecode): dynamo's cache is per code object
    call.__name__ = call.__qualname__ = f"compiled_{getattr(function, '__name__', type(function).__name__)}"
    return call


class TorchCompileError(RuntimeError):
    """``torch.compile`` could not build this model's graphs on this machine (the message says why and what to do)."""


class CompiledRankerModel:
    """A torch ranker whose passes run through ``torch.compile``: what :class:`~as2hub.inference.ranking.Ranker` uses
    of a scoring model (``config``, ``device``, ``dtype``, ``eval()``, ``model(**batch).logits``,
    ``logits_to_scores``), and the cascade's staged methods when the model has heads.

    ``mode``: ``torch.compile``'s (``None``: inductor's default; ``"max-autotune-no-cudagraphs"`` also benchmarks GEMM
    templates, a longer compile); ``backend``: ``torch.compile``'s compiler (``"inductor"``; the tests pass dynamo's
    ``CompileCounter`` to count graphs). ``module`` is the eager model (its weights are shared, not copied).

    Example:
        >>> compiled = CompiledRankerModel(model)  # doctest: +SKIP
        >>> ranker = Ranker(compiled, tokenizer)  # doctest: +SKIP
        >>> compiled.warm_up(ranker)  # doctest: +SKIP
    """

    def __init__(self, model, mode: str | None = None, backend="inductor"):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"torch_compile needs a torch model, got {type(model).__name__} (the ONNX backends run ONNX Runtime's "
                "own graph optimizations)"
            )
        self.module = model.eval()
        self.config = model.config
        self.device = model.device
        self.dtype = model.dtype
        self.mode = mode
        self.backend = backend
        self._forward = self._compile(model)
        self._stages = {}
        if cascade_layers(model):
            self._stages = {
                name: self._compile(getattr(model, name))
                for name in ("cascade_embed", "cascade_encode", "cascade_head_logits")
            }  # classify_hidden (the pooler and head on one token per row) stays eager: no work to fuse
        # the unpadded pass (Ranker(..., unpadded=True)): compiled on first use, one graph per stage with its head
        self._packed_stage = self._compile(functools.partial(packed_stage, model))
        self._embedded_stage = self._compile(functools.partial(embedded_stage, model))  # its first stage: one call
        self._inductor = int8_inductor() if any(isinstance(m, Int8Linear) for m in model.modules()) else {}

    def _compile(self, function):
        # a cascade stage compiles once per (stage, batch of 1 or more): up to 2 x the stages; room beyond that
        limit = max(8, 4 * (len(cascade_layers(self.module)) + 1))
        return torch.compile(
            _own_code(function), dynamic=True, mode=self.mode, backend=self.backend, recompile_limit=limit
        )

    @contextlib.contextmanager
    def _running(self):
        """What every compiled call runs inside: the shape guards, and on the CPU frozen weights."""
        with _shape_guards(), frozen_weights(self.device, self._inductor):
            yield

    def eval(self):
        return self

    def __call__(self, **inputs):
        with first_token_last_layer(self.module), self._running():  # the head reads the first token, as in eager
            return self._forward(**inputs)

    def logits_to_scores(self, logits: torch.Tensor) -> torch.Tensor:
        return self.module.logits_to_scores(logits)

    # The cascade's staged methods (inference/cascade.py's TorchStages calls them), compiled
    def _stage(self, name, *args, **kwargs):
        with self._running(), _outside_output_capture():
            return self._stages[name](*args, **kwargs)

    def cascade_embed(self, **batch):
        if "cascade_embed" not in self._stages:  # no cascade heads, no padded cascade: eager (a lookup)
            return self.module.cascade_embed(**batch)
        return self._stage("cascade_embed", **batch)

    def packed_stage(self, hidden, index, firsts, pattern, start: int, end: int, head: int, rows_kernel: bool = False):
        """:func:`~as2hub.inference.unpadded.packed_stage` of the model (a stage of the unpadded pass and its head),
        compiled."""
        with self._running(), _outside_output_capture():
            return self._packed_stage(hidden, index, firsts, pattern, start, end, head, rows_kernel)

    def embedded_stage(
        self, batch: dict, positions, index, firsts, pattern, end: int, head: int, rows_kernel: bool = False
    ):
        """:func:`~as2hub.inference.unpadded.embedded_stage` of the model (the unpadded pass's first stage from the
        padded token batch, the embeddings in the same graph), compiled."""
        with self._running(), _outside_output_capture():
            return self._embedded_stage(batch, positions, index, firsts, pattern, end, head, rows_kernel)

    def cascade_encode(self, hidden, attention_mask, start: int, end: int):
        last = end == self.config.num_hidden_layers  # the final stage: its last layer for the first token only
        with first_token_last_layer(self.module) if last else contextlib.nullcontext():
            return self._stage("cascade_encode", hidden, attention_mask, start, end)

    def cascade_head_logits(self, stage: int, hidden):
        return self._stage("cascade_head_logits", stage, hidden)

    def classify_hidden(self, hidden):
        return self.module.classify_hidden(hidden)

    def cascade_stages(self) -> TorchStages:
        """The cascade's stages on the compiled methods (what ``Ranker.rank(..., cascade_drop=...)`` runs; a model
        without heads is refused before, by ``check_cascade_heads``)."""
        return TorchStages(self)

    def warm_up(self, ranker) -> None:
        """Compile now (the first passes compile: for MiniLM-L6 on one AMX Xeon core about 30 s, 70 s with its cascade
        stages) on two short questions of one and eight candidates, so that later calls of any batch and length reuse
        the graphs. A machine where inductor
        cannot build (no C++ compiler) raises :class:`TorchCompileError` saying so."""
        # dynamo specializes a size of 1: every pass (the full model, each cascade stage, each head) is compiled for a
        # batch of one pair and for more: one question of one candidate, one of eight (drop 0.5: stages of 8, 4, 2)
        calls = [("warm up", ["one candidate"]), ("warm up the compiled graphs", [f"candidate {i}" for i in range(8)])]
        start = time.perf_counter()
        try:
            for question, candidates in calls:
                ranker.rank(question, candidates)
                if self._stages:
                    ranker.rank(question, candidates, cascade_drop=0.5)
        except Exception as error:  # noqa: BLE001 - re-raised with what to do
            raise TorchCompileError(
                f"torch.compile could not build the ranker's graphs on this machine ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}): inductor needs a working C++ compiler (g++) "
                "on the CPU, or triton on a GPU; install it, or rank without torch_compile"
            ) from error
        logger.info(
            "torch.compile: %s graphs built in %.0f s (%s, %s)",
            "the ranker's and its cascade stages'" if self._stages else "the ranker's",
            time.perf_counter() - start,
            self.backend if isinstance(self.backend, str) else type(self.backend).__name__,
            self.dtype,
        )

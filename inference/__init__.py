"""as2hub's inference engine: rankers, scoring backends, the layer cascade and the ONNX Runtime backend.

    >>> from as2hub.inference import JointRanker, Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="auto")  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP

Layer 1 (``ARCHITECTURE.md``): it reads saved models through ``as2hub.modeling`` and nothing above; training, serving,
the Hub cards and the commands use it. The modules: ``ranking`` (:class:`Ranker`), ``joint_ranking``
(:class:`JointRanker`), ``backends`` (the backend names, ``auto``, :class:`ScoringModel`), ``cascade`` (the layer
cascade), ``batching`` (which pairs share a forward pass), ``unpadded`` (``unpadded=True``: the dense layers on the
real tokens only), ``compiled`` (``torch_compile=True``), ``onnx_export`` (``as2hub-export-onnx``: the graphs and
their int8 quantization), ``onnx_runtime`` (the ONNX Runtime session, :class:`OnnxRankerModel`), ``onnx_cascade``
(the cascade's stage graphs) and ``options`` (the checks that need no torch, which the service's ingress uses). The
names below import their module on first use. What a saved ranker folder holds (``check_ranker_folder``,
``weights_sha256``, the graph file names) is ``as2hub.modeling.folders``.
"""

import importlib
from typing import TYPE_CHECKING

# Each name is imported from its module on first use (PEP 562), so that a module of this package that needs no torch
# (``options``: the service's ingress checks requests with it) imports without the rankers.
_HOMES = {
    "BACKENDS": "backends",
    "BACKEND_CHOICES": "backends",
    "BackendUnavailableError": "backends",
    "LoadedModel": "backends",
    "ScoringModel": "backends",
    "NoCascadeHeadsError": "cascade",
    "JointRankedCandidate": "joint_ranking",
    "JointRanker": "joint_ranking",
    "export_onnx": "onnx_export",
    "MissingOnnxExportError": "onnx_runtime",
    "OnnxRankerModel": "onnx_runtime",
    "StaleOnnxExportError": "onnx_runtime",
    "ExactTop": "ranking",
    "RankedCandidate": "ranking",
    "Ranker": "ranking",
    "context_text_pair": "ranking",
    "load_scoring_model": "ranking",
    "UnpaddedUnsupportedError": "unpadded",
}

if TYPE_CHECKING:
    from as2hub.inference.backends import (
        BACKEND_CHOICES,
        BACKENDS,
        BackendUnavailableError,
        LoadedModel,
        ScoringModel,
    )
    from as2hub.inference.cascade import NoCascadeHeadsError
    from as2hub.inference.joint_ranking import JointRankedCandidate, JointRanker
    from as2hub.inference.onnx_export import export_onnx
    from as2hub.inference.onnx_runtime import MissingOnnxExportError, OnnxRankerModel, StaleOnnxExportError
    from as2hub.inference.ranking import ExactTop, RankedCandidate, Ranker, context_text_pair, load_scoring_model
    from as2hub.inference.unpadded import UnpaddedUnsupportedError


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "BACKENDS",
    "BACKEND_CHOICES",
    "BackendUnavailableError",
    "ExactTop",
    "JointRankedCandidate",
    "JointRanker",
    "LoadedModel",
    "MissingOnnxExportError",
    "NoCascadeHeadsError",
    "OnnxRankerModel",
    "RankedCandidate",
    "Ranker",
    "ScoringModel",
    "StaleOnnxExportError",
    "UnpaddedUnsupportedError",
    "context_text_pair",
    "export_onnx",
    "load_scoring_model",
]

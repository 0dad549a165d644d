"""as2hub's inference engine: rankers, scoring backends, the layer cascade and the ONNX Runtime backend.

    >>> from as2hub.inference import JointRanker, Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="auto")  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP

Layer 1 (``ARCHITECTURE.md``): it reads saved models through ``as2hub.modeling`` and nothing above; training, serving,
the Hub cards and the commands use it. The modules: ``ranking`` (:class:`Ranker`), ``joint_ranking``
(:class:`JointRanker`), ``backends`` (the backend names, ``auto``, :class:`ScoringModel`), ``cascade`` (the layer
cascade), ``batching`` (which pairs share a forward pass), ``unpadded`` (``unpadded=True``: the dense layers on the
real tokens only), ``compiled`` (``torch_compile=True``), ``onnx_export`` (``as2hub-export-onnx``: the graphs and
their int8 quantization), ``onnx_runtime`` (the ONNX Runtime session, :class:`OnnxRankerModel`) and ``onnx_cascade``
(the cascade's stage graphs). What a saved ranker
folder holds (``check_ranker_folder``, ``weights_sha256``, the graph file names) is ``as2hub.modeling.folders``.
"""

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

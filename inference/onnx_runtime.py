"""The ONNX Runtime backend's session: a ranker's exported graph, scored like the torch model.

``as2hub-export-onnx path/to/ranker --quantize int8`` (:mod:`as2hub.inference.onnx_export`) writes the graphs into
the folder's ``onnx/``; rank with them (``pip install "as2hub[onnx]"``)::

    >>> from as2hub.inference import Ranker
    >>> ranker = Ranker.from_pretrained("path/to/ranker", backend="onnx", quantize="int8", num_threads=2)  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", ["Hamlet is a tragedy.", "Shakespeare wrote it."])  # doctest: +SKIP

:class:`OnnxRankerModel` stands in for the torch model inside ``Ranker`` and ``JointRanker`` (the same batches, the
same ``logits_to_scores``). A cross-encoder graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids``
(int64, dynamic batch and sequence axes), a joint model's graph the fixed slot layout (dynamic batch axis only); both
give ``logits``.

Each graph carries the SHA-256 of the weights it was exported from and the config fields it depends on
(``metadata_props``: :data:`WEIGHTS_KEY`, :data:`CONFIG_KEY`, and for int8 :data:`INT8_DESCRIPTION`), and loading
checks them against the folder (:func:`check_not_stale`): a graph left behind by an older export raises
:class:`StaleOnnxExportError` instead of silently scoring with old weights. This module defines that contract; the
export writes it.

A ranker with cascade heads (``config.cascade_layers``) also has one graph per cascade stage
(:mod:`as2hub.inference.onnx_cascade`); :meth:`OnnxRankerModel.cascade_stages` runs them for
``Ranker.rank(..., cascade_drop=...)`` and refuses missing or stale ones with the command that rewrites them.
"""

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig

from as2hub.inference.cascade import NoCascadeHeadsError
from as2hub.inference.onnx_cascade import CASCADE_KEY, OnnxCascadeStages, stage_ends, stage_graph_file, stage_record
from as2hub.modeling.folders import (
    GRAPH_FILES,
    ONNX_SUBFOLDER,
    QUANTIZE_CHOICES,
    check_model_path,
    weights_sha256,
)
from as2hub.modeling.scores import JOINT_MODEL_TYPES, probability_of_correct

logger = logging.getLogger("as2hub.onnx")

INSTALL_HINT = 'pip install "as2hub[onnx]"  (onnxruntime and onnx)'
# The metadata every as2hub graph carries (written by onnx_export.export_onnx, checked by check_not_stale)
WEIGHTS_KEY = "as2hub.weights_sha256"
CONFIG_KEY = "as2hub.config"


class StaleOnnxExportError(ValueError):
    """An ``onnx/`` graph that was not exported from the folder's current weights or config."""


class MissingOnnxExportError(FileNotFoundError):
    """A saved ranker without the ``onnx/`` graph asked for (``as2hub-export-onnx`` writes it)."""


def require_onnx(*, quantize: bool = False):
    """Import onnxruntime (and ``onnx`` when ``quantize`` or exporting); a clear error when the extra is missing."""
    try:
        import onnxruntime

        if quantize:
            import onnx  # noqa: F401
    except ImportError as error:
        raise ImportError(f"the ONNX backend needs the `onnx` extra: {INSTALL_HINT} ({error})") from error
    return onnxruntime


# --------------------------------------------------------------------------------------------------------------------
# What identifies the config and the quantization a graph was exported with


def graph_config(config) -> dict:
    """The config fields an exported graph depends on (beyond the weights)."""
    fields = {
        "model_type": config.model_type,
        "contextual": bool(getattr(config, "contextual", False)),
        "sep_token_id": getattr(config, "sep_token_id", None),
        "type_vocab_size": config.type_vocab_size,
        "num_labels": config.num_labels,
    }
    if config.model_type in JOINT_MODEL_TYPES:
        fields.update(
            {
                key: getattr(config, key)
                for key in ("head", "num_candidates", "slot_length", "slot_positions", "first_token_attention")
            }
        )
    return fields


# How onnx_export.quantize_int8 quantizes, stamped on every int8 graph. An int8 graph whose metadata has another
# description is stale: the graphs of earlier versions had one activation scale per batch (scores that depend on the
# other pairs of the batch) and two fp32 projections per layer, or 8-bit weights (saturating sums without VNNI).
INT8_DESCRIPTION = (
    "int8 dynamic, per-channel QInt8 weights in 7 bits (reduce_range) for every weight MatMul, per-token activation "
    "scales"
)


# --------------------------------------------------------------------------------------------------------------------
# Loading


@dataclass
class OnnxOutput:
    logits: torch.Tensor


class OnnxRankerModel:
    """An ONNX Runtime session that stands in for the torch model inside :class:`~as2hub.inference.ranking.Ranker`.

    It offers what ``Ranker`` uses: ``config``, ``device``, ``eval()``, ``model(**batch).logits`` and
    ``logits_to_scores``. Threads: ``num_threads`` sets ONNX Runtime's intra-op threads (default: ONNX Runtime's
    choice, one per physical core); inter-op parallelism is off (one graph runs at a time). Pass ``session_options``
    (an ``onnxruntime.SessionOptions``) for full control; ``providers`` defaults to the CPU.

    Example:
        >>> model = OnnxRankerModel.from_pretrained("path/to/ranker", quantize="int8", num_threads=1)  # doctest: +SKIP
        >>> model(**batch).logits  # doctest: +SKIP
    """

    # Exact padding: ONNX Runtime gains nothing from lengths rounded up to 8 (about 10% more tokens on WikiQA).
    pad_to_multiple_of = None
    device = torch.device("cpu")

    def __init__(self, graph_path, config, num_threads: int | None = None, session_options=None, providers=None):
        ort = require_onnx()
        if session_options is None:
            session_options = ort.SessionOptions()
            session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            session_options.inter_op_num_threads = 1
            if num_threads is not None:
                session_options.intra_op_num_threads = num_threads
        elif num_threads is not None:
            raise ValueError("pass num_threads or session_options, not both")
        self.graph_path = Path(graph_path)
        self.config = config
        self.session_options = session_options
        self.providers = providers or ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(graph_path), session_options, providers=self.providers)
        self.input_names = [node.name for node in self.session.get_inputs()]
        # the cascade's stage graphs are loaded on first use (cascade_stages), checked like the main graph when
        # from_pretrained checked it
        self.check_weights = False
        self._cascade: OnnxCascadeStages | None = None

    @classmethod
    def from_pretrained(
        cls,
        path,
        quantize: str | None = None,
        num_threads: int | None = None,
        session_options=None,
        providers=None,
        check_weights: bool = True,
        trust_remote_code: bool = True,
    ) -> "OnnxRankerModel":
        """Load ``onnx/model.onnx`` (or the int8 graph) of a saved ranker, after checking it matches the weights.

        ``check_weights=False`` skips the stale-export check (for a graph made by other tools).
        """
        if quantize not in (None, *QUANTIZE_CHOICES):
            raise ValueError(f"quantize must be None or one of {QUANTIZE_CHOICES}, got {quantize!r}")
        check_model_path(path)
        ort = require_onnx()
        folder = _local_folder(path, quantize)
        graph = folder / ONNX_SUBFOLDER / GRAPH_FILES[quantize]
        if not graph.is_file():
            flag = f" --quantize {quantize}" if quantize else ""
            raise MissingOnnxExportError(
                f"{graph} does not exist: export it first with `as2hub-export-onnx {folder}{flag}`"
            )
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        model = cls(graph, config, num_threads=num_threads, session_options=session_options, providers=providers)
        if check_weights:
            check_not_stale(graph, folder, config, model.session.get_modelmeta().custom_metadata_map, quantize)
        model.check_weights = check_weights
        logger.info("ONNX Runtime %s session on %s (%s threads)", ort.__version__, graph, num_threads or "default")
        return model

    def eval(self):
        return self

    def __call__(self, **inputs) -> OnnxOutput:
        feed = {name: inputs[name].numpy() for name in self.input_names}
        return OnnxOutput(logits=torch.from_numpy(self.session.run(None, feed)[0]))

    def logits_to_scores(self, logits: torch.Tensor) -> torch.Tensor:
        """The probability of "correct", as ``ContextualAS2Mixin.logits_to_scores``."""
        return probability_of_correct(logits, self.config)

    @property
    def quantize(self) -> str | None:
        """The quantization of the graph this session runs (None: fp32, or a graph of another name)."""
        return {name: key for key, name in GRAPH_FILES.items()}.get(self.graph_path.name)

    def cascade_stages(self) -> OnnxCascadeStages:
        """The cascade's stage graphs beside this graph (``onnx/cascade_stage{k}[_qint8_dynamic].onnx``), loaded on
        first use with this session's options: what :func:`~as2hub.inference.cascade.cascade_scores` runs for
        ``Ranker.rank(..., cascade_drop=...)``. Missing or stale stage graphs raise with the command that writes them."""
        if self._cascade is None:
            self._cascade = load_cascade_stages(
                self.graph_path.parent.parent,
                self.config,
                self.quantize,
                session_options=self.session_options,
                providers=self.providers,
                check_weights=self.check_weights,
            )
        return self._cascade


def load_cascade_stages(
    folder, config, quantize: str | None = None, session_options=None, providers=None, check_weights: bool = True
) -> OnnxCascadeStages:
    """Sessions on a ranker folder's cascade stage graphs (:mod:`as2hub.inference.onnx_cascade`).

    :class:`MissingOnnxExportError` when a stage graph is missing (a folder exported before it had cascade heads, or
    by an older as2hub), :class:`StaleOnnxExportError` when one was exported from other weights, config, quantization
    or ``cascade_layers``; both name the ``as2hub-export-onnx`` command that rewrites them. Nothing falls back.
    """
    ort = require_onnx()
    folder = Path(folder)
    ends = stage_ends(config)
    if not ends:
        raise NoCascadeHeadsError(f"{folder}: config.json has no cascade_layers, so there are no cascade stages to run")
    flag = f" --quantize {quantize}" if quantize else ""
    command = f"`as2hub-export-onnx {folder}{flag}`"
    paths = [folder / ONNX_SUBFOLDER / stage_graph_file(stage, quantize) for stage in range(len(ends))]
    missing = [path for path in paths if not path.is_file()]
    if missing:
        raise MissingOnnxExportError(
            f"{missing[0]} does not exist: cascade_drop on the ONNX backend runs one graph per cascade stage (heads "
            f"after layers {ends[:-1]}), and this folder's export has not got them (it was exported before the model "
            f"had cascade heads, or by an older as2hub): export them with {command}"
        )
    if session_options is None:
        session_options = ort.SessionOptions()
        session_options.inter_op_num_threads = 1
    current = weights_sha256(folder) if check_weights else None
    sessions = []
    for stage, path in enumerate(paths):
        session = ort.InferenceSession(str(path), session_options, providers=providers or ["CPUExecutionProvider"])
        metadata = session.get_modelmeta().custom_metadata_map
        if check_weights:
            check_not_stale(path, folder, config, metadata, quantize, current_weights=current)
        if metadata.get(CASCADE_KEY) != stage_record(stage, ends):
            raise StaleOnnxExportError(
                f"{path} is stale: it was exported as cascade stage {metadata.get(CASCADE_KEY)}, the folder's "
                f"config.json has cascade stages ending after layers {ends}: re-export with {command}"
            )
        sessions.append(session)
    logger.info("ONNX Runtime cascade: %d stage graphs (stages end after layers %s)", len(sessions), ends)
    return OnnxCascadeStages(sessions, ends)


def check_not_stale(
    graph: Path, folder: Path, config, metadata: dict, quantize: str | None = None, current_weights=...
) -> None:
    """Raise :class:`StaleOnnxExportError` when ``graph`` was not exported from the folder's weights and config
    (``current_weights``: the folder's :func:`weights_sha256` when already computed)."""
    flag = f" --quantize {quantize}" if quantize else ""
    rerun = f"re-export with `as2hub-export-onnx {folder}{flag}`"
    exported_from = metadata.get(WEIGHTS_KEY)
    if exported_from is None:
        raise StaleOnnxExportError(
            f"{graph} has no as2hub export record (was it made by another tool?): {rerun}, "
            "or pass check_weights=False to use it as it is"
        )
    current = weights_sha256(folder) if current_weights is ... else current_weights
    if current is None:  # e.g. downloaded from the Hub without the torch weights
        logger.info("%s has no weights to check %s against; using the graph as it is", folder, graph.name)
    elif current != exported_from:
        raise StaleOnnxExportError(
            f"{graph} is stale: it was exported from other weights than those in {folder} "
            f"(sha256 {exported_from[:12]}… vs {current[:12]}…): {rerun}"
        )
    if quantize == "int8" and metadata.get("as2hub.quantization") != INT8_DESCRIPTION:
        raise StaleOnnxExportError(
            f"{graph} is stale: it was quantized as {metadata.get('as2hub.quantization')!r}; this version of as2hub "
            f"quantizes as {INT8_DESCRIPTION!r} (older int8 graphs have one activation scale per batch, so their "
            f"scores depend on the other pairs of the batch, or 8-bit weights, whose sums saturate on CPUs without "
            f"VNNI): {rerun}"
        )
    exported_config = json.loads(metadata.get(CONFIG_KEY, "{}"))
    if exported_config.get("model_type") in JOINT_MODEL_TYPES:
        # Graphs exported before the field existed were built with the paper's full attention.
        exported_config.setdefault("first_token_attention", "all")
    if exported_config and exported_config != graph_config(config):
        raise StaleOnnxExportError(
            f"{graph} is stale: exported for config {exported_config}, the folder's config.json now has "
            f"{graph_config(config)}: {rerun}"
        )


def _local_folder(path, quantize: str | None) -> Path:
    """A local folder as is; a Hub id is downloaded without its torch weights (config, tokenizer, code, the graph)."""
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.txt", "*.model", "*.py", f"{ONNX_SUBFOLDER}/{GRAPH_FILES[quantize]}"]
    # the cascade's stage graphs of the same quantization (used only with cascade_drop)
    stages = ["[0-9]", "[0-9][0-9]"] if quantize is None else ["*"]
    patterns += [f"{ONNX_SUBFOLDER}/{stage_graph_file(stage, quantize)}" for stage in stages]
    return Path(snapshot_download(str(path), allow_patterns=patterns))

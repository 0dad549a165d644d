"""What a model path is, checked before loading: one clear exception instead of transformers' tracebacks.

``Ranker.from_pretrained``, ``JointRanker.from_pretrained`` and ``OnnxRankerModel.from_pretrained`` call
:func:`check_model_path` first. A local folder with a ``config.json`` and a Hub model id (``namespace/name`` that is
not a local path) go on to the real loaders; the rest raise, saying what the path is and what to pass instead:

- a folder without ``config.json``: :class:`NotAModelFolderError` (transformers: 21 lines ending "Should have a
  `model_type` key in its config.json");
- a LoRA adapter folder (``adapter_config.json``, no ``config.json``, e.g. a run's ``lora_adapter/``):
  :class:`AdapterFolderError` naming the folder of the merged model, or the base model to merge the adapter into
  (transformers: "Unrecognized configuration class" and a hundred class names, or a size-mismatch report);
- a path that does not exist and is no Hub id (``/...``, ``./...``, more than one ``/``): :class:`ModelNotFoundError`
  (transformers: ``HFValidationError`` about repo ids).

The commands print these as one line (``run_scripts.arguments.user_errors``).

    >>> check_model_path("outputs/demo/ranker/lora_adapter")  # doctest: +SKIP
    AdapterFolderError: outputs/demo/ranker/lora_adapter is a LoRA adapter (adapter_config.json, no config.json) ...

The facts of a saved ranker folder live here too, for every layer that reads one (the inference engine, the service,
batch scoring, the Hub push, the commands): :func:`check_ranker_folder` (is it an as2hub ranker with weights?), its
weight files and their digest :func:`weights_sha256` (what an ONNX graph, a batch-scoring record and a push are tied
to), and where its ONNX graphs go (:data:`ONNX_SUBFOLDER`, :data:`GRAPH_FILES`, :data:`EXPORT_RECORD`).
"""

import hashlib
import json
import os
from pathlib import Path

from transformers import AutoConfig

from as2hub.modeling.registry import FAMILIES

ADAPTER_CONFIG = "adapter_config.json"
SHOWN_SUBFOLDERS = 3

# A ranker folder's ONNX graphs (as2hub-export-onnx writes them, the ONNX backend reads them): quantization -> file
ONNX_SUBFOLDER = "onnx"
GRAPH_FILES = {None: "model.onnx", "int8": "model_qint8_dynamic.onnx"}
EXPORT_RECORD = "as2hub_export.json"
QUANTIZE_CHOICES = tuple(key for key in GRAPH_FILES if key)

# Tokens per ranking input (question, candidate[, context]) when neither the caller nor the folder says: the papers'
# 256. The one place this number is written: training (run_as2.py's --max_length, the AS2 collator), ranking
# (Ranker), the service and batch scoring read it from here.
DEFAULT_MAX_LENGTH = 256
# The config attribute where a training run records the max length it trained with (run_as2.py sets it before
# training, so checkpoints and the saved folder carry it); ranking that folder uses it when no max length is given.
MAX_LENGTH_KEY = "as2hub_max_length"


def record_max_length(config, max_length: int) -> None:
    """Write the max length a model is trained with into its ``config`` (saved with it as ``as2hub_max_length``)."""
    setattr(config, MAX_LENGTH_KEY, int(max_length))


def ranking_max_length(config, max_length: int | None = None) -> int:
    """The max length to rank with: ``max_length`` when given, else the one the model was trained with (its
    config's ``as2hub_max_length``), else :data:`DEFAULT_MAX_LENGTH`."""
    if max_length is not None:
        return max_length
    return getattr(config, MAX_LENGTH_KEY, None) or DEFAULT_MAX_LENGTH


class NotAnAS2hubRankerError(ValueError):
    """A folder that is not a saved as2hub ranker: its config is not one of as2hub's ranker model types, or (the
    subclasses) it holds no model at all."""


class NotAModelFolderError(NotAnAS2hubRankerError):
    """A local folder without ``config.json``: no ``from_pretrained`` can load a model from it."""


class AdapterFolderError(NotAModelFolderError):
    """A LoRA (PEFT) adapter folder: the low-rank weights alone, not a model."""


class ModelNotFoundError(FileNotFoundError):
    """A model path that does not exist locally and cannot be a Hub model id either."""


def is_hub_id(path: str) -> bool:
    """True when ``path`` is a valid Hub repository id (``name`` or ``namespace/name``, Hugging Face's own rule)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError:
        return False
    return True


def check_model_path(path) -> None:
    """Return when ``path`` can be handed to ``from_pretrained`` (a folder with ``config.json``, or a string that is
    not a local path and is a valid Hub id); otherwise raise :class:`AdapterFolderError`,
    :class:`NotAModelFolderError` or :class:`ModelNotFoundError`, one line saying what the path is and what to pass."""
    name = os.fspath(path)
    local = Path(name)
    if local.is_dir():
        if (local / "config.json").is_file():
            return
        if (local / ADAPTER_CONFIG).is_file():
            raise AdapterFolderError(_adapter_message(local))
        raise NotAModelFolderError(_no_config_message(local))
    if local.exists():
        raise NotAModelFolderError(
            f"{name} is a file, not a model folder: pass the folder that holds config.json and the weights "
            "(a training run's --output_dir, or a save_pretrained() folder) or a Hub model id"
        )
    if isinstance(path, str) and is_hub_id(name):
        return  # the Hub loader's business (it says when the repository does not exist)
    raise ModelNotFoundError(
        f"{name}: no such model folder (nor a Hub model id, which is 'name' or 'namespace/name'): pass the folder "
        "of a training run (its --output_dir) or of save_pretrained()"
    )


def _no_config_message(folder: Path) -> str:
    message = f"{folder} is not a saved model folder (no config.json)"
    models = sorted(child for child in folder.iterdir() if child.is_dir() and (child / "config.json").is_file())
    if models:
        shown = ", ".join(str(child) for child in models[:SHOWN_SUBFOLDERS])
        more = f" and {len(models) - SHOWN_SUBFOLDERS} more" if len(models) > SHOWN_SUBFOLDERS else ""
        return f"{message}: it holds model folders, pass one of them: {shown}{more}"
    return (
        f"{message}: pass the output folder of a training run (run_as2, run_joint: its --output_dir) or of "
        "model.save_pretrained(), or a Hub model id"
    )


def _adapter_message(folder: Path) -> str:
    """What an adapter folder is and what to pass instead: as2hub's LoRA runs save the adapter in ``lora_adapter/``
    and the merged model in the run's folder around it (``hub_cards.run_outputs.save_hub_folder``)."""
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError):
        base = None
    message = f"{folder} is a LoRA adapter (adapter_config.json, no config.json), not a model: "
    parent = folder.resolve().parent
    if (parent / "config.json").is_file():
        shown = folder.parent if str(folder.parent) not in ("", ".") else parent
        return message + (
            f"pass {shown} instead, the run's folder, which holds the adapter merged into the model "
            "(a --use_lora run saves both)"
        )
    on_base = f"its base model {base}" if base else "its base model"
    return message + (
        "pass the folder of the merged model (a --use_lora run's --output_dir, beside lora_adapter/), or merge the "
        f"adapter into {on_base} with PEFT (PeftModel.from_pretrained(base, adapter).merge_and_unload()) and pass "
        "the saved result"
    )


# --------------------------------------------------------------------------------------------------------------------
# A saved ranker folder


def weight_files(folder: Path) -> list[Path]:
    """The safetensors file(s) of a saved folder (a sharded checkpoint: the index and its shards), else the .bin."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [index, *(folder / shard for shard in shards)]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return [folder / name]
    return []


def weights_sha256(folder: Path) -> str | None:
    """SHA-256 over the weight files (about 0.2 s for MiniLM's 90 MB); None when the folder has no weights."""
    files = weight_files(folder)
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def ranker_model_types() -> tuple[str, ...]:
    """The model types of as2hub's rankers: those of every family the ONNX backend exports (``Family.onnx_export``)."""
    return tuple(t for family in FAMILIES.values() if family.onnx_export is not None for t in family.model_types)


def check_ranker_folder(folder) -> tuple[Path, object]:
    """(folder, config) of a saved as2hub ranker; :class:`NotAnAS2hubRankerError` naming the file otherwise."""
    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        if not folder.exists():
            raise ModelNotFoundError(f"{folder}: no such model folder")
        check_model_path(folder)  # a file, a LoRA adapter or a folder without config.json: says which
    model_type = json.loads(config_file.read_text()).get("model_type")
    rankers = ranker_model_types()
    if model_type not in rankers:
        raise NotAnAS2hubRankerError(
            f"{config_file}: model_type {model_type!r} is not an as2hub ranker ({', '.join(rankers)}); "
            "fine-tune one with `python -m as2hub.run_scripts.run_as2` or `run_joint` (stock models export with "
            "optimum instead)"
        )
    if not weight_files(folder):
        raise NotAnAS2hubRankerError(f"{folder} has no weights (model.safetensors): nothing to export")
    return folder, AutoConfig.from_pretrained(folder, trust_remote_code=True)

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
"""

import json
import os
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
SHOWN_SUBFOLDERS = 3


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

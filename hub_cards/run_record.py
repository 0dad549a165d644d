"""The run record: what a run script writes beside its model so that the folder can be published later.

:func:`record_run` writes ``as2hub_run.json`` (the family, the run's arguments, its metrics file, and for each
publishable component the Auto class and reference outputs of a fixed small input computed from the trained model in
memory) and the model card built from it. ``as2hub.hub_cards.push`` reads it back (:func:`read_run`) to check and
upload the folder.

Example (what a new family's run script does when it saves its model)::

    record_run(out, "my_family", model, tokenizer, {"model": model_args, "data": data_args, "training": training_args},
               results, "all_results.json", auto_class="AutoModelForSequenceClassification")  # or components=...
"""

import dataclasses
import enum
import json
import logging
from collections.abc import Iterable
from pathlib import Path

import torch

from as2hub.hub_cards import build_model_card
from as2hub.hub_cards.fresh_load_check import summarise_outputs, tokenize
from as2hub.modeling.files import write_json_atomic, write_text_atomic

logger = logging.getLogger("as2hub.publishing")

RUN_RECORD = "as2hub_run.json"
# What a model folder publishes (top level of the folder and of each extra component such as discriminator/).
UPLOADED_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "*.py",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "*.model",
    "chat_template.jinja",
)
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
# A fixed input every published model is checked on: (question or first text, candidate or second text).
REFERENCE_PAIRS = (
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    ("What does len return?", "The built-in len returns the number of items of a container."),
    ("When was the tower built?", "Paris is the capital and largest city of France."),
)
TRAINING_KEYS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "warmup_steps",
    "lr_scheduler_type",
    "weight_decay",
    "max_grad_norm",
    "optim",
    "bf16",
    "fp16",
    "seed",
    "metric_for_best_model",
)
VALIDATION_TIMEOUT = 1800
# Config fields a card may describe (those the model's config has): every family's, e.g. the joint slot layout.
CONFIG_KEYS = (
    "model_type",
    "contextual",
    "num_segments",
    "type_vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_candidates",
    "slot_length",
    "slot_positions",
    "first_token_attention",
    "head",
    "contrastive_weight",
    "qe_similarity",
    "qe_temperatures",
    "question_types",
    "question_type_key",
    "max_position_embeddings",
)


class PublishError(ValueError):
    """A folder, repo id, token or endpoint that cannot be published (raised before anything is uploaded), or an
    upload whose commit failed (nothing was committed: the repository is at its previous revision)."""


# -- at save time: reference outputs, run record, card ---------------------------------------------------------------


def reference_outputs(
    model,
    tokenizer,
    pairs: Iterable[tuple[str, str]] = REFERENCE_PAIRS,
    config_overrides: dict | None = None,
    max_length: int = 64,
    batch: dict | None = None,
) -> dict:
    """Outputs of ``model`` (in eval mode, no gradient) on ``pairs``, as the fresh-process check will compute them.

    ``config_overrides`` are set on the config for this call and passed to ``from_pretrained`` by the check (e.g.
    ``{"return_mlm_logits": True}`` so that the MLM head is compared too). A family whose forward needs more than
    ``tokenizer(text, text_pair)`` gives passes its own small ``batch`` of tensors instead of ``pairs``.
    """
    if batch is not None:
        inputs = {"tensors": {name: value.tolist() for name, value in batch.items()}}
    else:
        pairs = list(pairs)
        inputs = {"text": [a for a, _ in pairs], "text_pair": [b for _, b in pairs], "max_length": max_length}
    overrides = config_overrides or {}
    config = model.config
    saved = {key: getattr(config, key) for key in overrides}
    was_training = model.training
    device = next(model.parameters()).device
    try:
        for key, value in overrides.items():
            setattr(config, key, value)
        model.eval()
        with torch.no_grad():
            outputs = model(**{name: value.to(device) for name, value in tokenize(tokenizer, inputs).items()})
    finally:
        for key, value in saved.items():
            setattr(config, key, value)
        model.train(was_training)
    exact = device.type == "cpu"
    return {
        "inputs": inputs,
        "outputs": summarise_outputs(outputs),
        "device": device.type,
        "atol": 1e-4 if exact else 2e-3,
        "rtol": 1e-4 if exact else 2e-3,
    }


def component(
    path: str,
    model,
    tokenizer,
    auto_class: str,
    *,
    kind: str = "model",
    trust_remote_code: bool = True,
    pairs: Iterable[tuple[str, str]] = REFERENCE_PAIRS,
    config_overrides: dict | None = None,
    batch: dict | None = None,
    **extra,
) -> dict:
    """A publishable part of a run folder (``path`` relative to it) with its reference outputs.

    ``kind`` is ``"model"`` (published at ``path``: ``"."`` for the root, else a subfolder) or ``"adapter"`` (a PEFT
    adapter, published instead of the root with ``--adapter``); ``auto_class`` is how the check loads it.
    """
    return {
        "path": path,
        "kind": kind,
        "auto_class": auto_class,
        "trust_remote_code": trust_remote_code,
        "config_overrides": config_overrides or {},
        "reference": reference_outputs(model, tokenizer, pairs, config_overrides, batch=batch),
        **extra,
    }


def _jsonable(value):
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(getattr(value, "value", value))


def _config_summary(model) -> dict:
    config = model.config
    summary = {key: _jsonable(getattr(config, key)) for key in CONFIG_KEYS if hasattr(config, key)}
    summary["model_type"] = getattr(type(config), "model_type", None) or summary.get("model_type")  # what is saved
    id2label = getattr(config, "id2label", {}) or {}
    summary["num_labels"] = len(id2label)
    summary["labels"] = [id2label[index] for index in sorted(id2label)]
    return summary


def make_run_record(
    family: str,
    model,
    arguments: dict,
    metrics_file: str,
    components: dict,
    extras: dict | None = None,
) -> dict:
    """The run record: ``arguments`` maps "model" / "data" / "training" to the run's argument dataclasses."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    record_arguments, local_paths = {}, []
    for name, args in arguments.items():
        if args is None:
            continue
        if name == "training":
            values = {key: getattr(args, key) for key in TRAINING_KEYS if hasattr(args, key)}
            values["total_train_batch_size"] = (
                args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, args.world_size)
            )
            if getattr(args, "paper_warmup", False):  # run_as2's default: the papers' 1,000 steps, capped at 10%
                values["warmup_steps"] = "1000, at most 10% of the steps"
            if values.get("max_steps", -1) > 0:  # max_steps overrides the number of epochs
                values.pop("num_train_epochs", None)
        else:
            values = dataclasses.asdict(args)
        values = {key: _jsonable(value) for key, value in values.items() if not key.endswith("token")}
        record_arguments[name] = values
        local_paths += [v for v in values.values() if isinstance(v, str) and v and Path(v).exists()]
    model_args = record_arguments.get("model", {})
    return {
        "format": 1,
        "as2hub_version": _version(),
        "family": family,
        "metrics_file": metrics_file,
        "architecture": type(model).__name__,
        "config": _config_summary(model),
        "remote_code": bool(getattr(model.config, "auto_map", None) or hasattr(model, "AUTO_CLASSES")),
        "base_model": model_args.get("model_name_or_path"),
        "local_paths": sorted(set(local_paths)),
        "arguments": record_arguments,
        "components": components,
        "extras": extras or {},
    }


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("as2hub")
    except PackageNotFoundError:
        return None


def write_run_record(output_dir, record: dict, results: dict, model_id: str | None = None) -> None:
    """Write the run record and the model card (built from the record and ``results``) into ``output_dir``.

    ``model_id`` names the model in the card's snippets (default: ``output_dir``, where the folder is loaded from).
    """
    output_dir = Path(output_dir)
    write_json_atomic(output_dir / RUN_RECORD, record)
    card = build_model_card(record, results, model_id=model_id or str(output_dir))
    write_text_atomic(output_dir / "README.md", str(card))


def record_run(
    output_dir,
    family: str,
    model,
    tokenizer,
    arguments: dict,
    results: dict,
    metrics_file: str,
    components: dict | None = None,
    auto_class: str = "AutoModel",
    config_overrides: dict | None = None,
    extras: dict | None = None,
    model_id: str | None = None,
) -> dict:
    """Reference outputs of ``model`` (the root component, unless ``components`` has one), run record and card.

    Call it after the model, its tokenizer and code are saved in ``output_dir``. ``auto_class`` (and
    ``config_overrides``) say how the fresh-process check loads the root. Returns the record.
    """
    components = dict(components or {})
    if "model" not in components:
        components = {
            "model": component(".", model, tokenizer, auto_class, config_overrides=config_overrides),
            **components,
        }
    record = make_run_record(family, model, arguments, metrics_file, components, extras)
    write_run_record(output_dir, record, results, model_id)
    return record


def read_run(folder) -> tuple[dict, dict]:
    """The run record and metrics of ``folder``; a clear error when either is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PublishError(f"{folder} is not a folder")
    record_file = folder / RUN_RECORD
    if not record_file.is_file():
        raise PublishError(
            f"{folder} has no {RUN_RECORD}: it was not written by an as2hub run script (run_as2.py, run_pretrain.py), "
            "which records the run's arguments, metrics file and reference outputs needed to publish it"
        )
    record = json.loads(record_file.read_text())
    metrics_file = folder / record["metrics_file"]
    if not metrics_file.is_file():
        raise PublishError(
            f"{folder}: the run's metrics file {record['metrics_file']} is missing: the model card reports the run's "
            "metrics (or that it was not evaluated) from it; re-run, or restore the file"
        )
    return record, json.loads(metrics_file.read_text())

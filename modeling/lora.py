"""LoRA (PEFT) adapters on an as2hub model, with the modules each family must train fully beside them.

The task heads and the embeddings as2hub grows (contextual and joint token types, QE markers) start untrained, so
they are trained fully (PEFT's ``modules_to_save``) while the encoder gets low-rank adapters::

    from as2hub.modeling.lora import add_lora
    model = add_lora(model, r=8, target_modules=["query", "value"])
    model.print_trainable_parameters()
"""

from __future__ import annotations

import functools
import logging

from as2hub.modeling.registry import family_of, fully_trained_modules

logger = logging.getLogger("as2hub")


def add_lora(
    model,
    r: int = 8,
    alpha: int = 16,
    dropout: float = 0.1,
    target_modules=None,
    modules_to_save=None,
):
    """``model`` wrapped in LoRA adapters (a PEFT model); ``modules_to_save`` defaults to the family's new modules
    (``Family.lora_fully_trained`` in :mod:`~as2hub.modeling.registry`)."""
    from peft import LoraConfig, get_peft_model

    if target_modules is None:  # the family's (registry.Family.lora_target_modules), BERT's names for a stock model
        family = family_of(getattr(model.config, "model_type", None))
        target_modules = family.lora_target_modules if family is not None else ("query", "value")
    lora = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        modules_to_save=list(modules_to_save) if modules_to_save is not None else fully_trained_modules(model),
    )
    model = get_peft_model(model, lora)
    model.print_trainable_parameters()
    _decide_embedding_layers_on_save(model)
    return model


def embedding_layers_to_save(model) -> bool | str:
    """PEFT's ``save_embedding_layers="auto"`` decision for ``model`` (a PEFT model), made without its warning.

    PEFT saves the embedding layers with the adapter when they are LoRA targets or when the vocabulary was resized;
    to see the latter it reads the base model's config with the model's config class
    (``model.config.__class__.from_pretrained(base)``), and an as2hub class reading a stock base (``roberta`` into
    ``contextual_roberta``) makes transformers warn "You are using a model of type ... to instantiate a model of type
    ..." at every checkpoint and at the final save. Here the base's vocabulary size is read from its config as it is:
    ``True`` / ``False`` when it was resized / not; ``"auto"`` (PEFT's own check, which needs no config then) when an
    embedding layer is a target, or when the base's config cannot be read here.
    """
    from peft.utils.other import EMBEDDING_LAYER_NAMES
    from transformers import PretrainedConfig

    peft_config = model.peft_config[model.active_adapter]
    targets = peft_config.target_modules
    if isinstance(targets, str) or any(name in (targets or ()) for name in EMBEDDING_LAYER_NAMES):
        return "auto"
    base, vocab_size = peft_config.base_model_name_or_path, getattr(model.config, "vocab_size", None)
    if not base or vocab_size is None:
        return False  # PEFT's answer too: no base to compare with
    try:
        base_config, _ = PretrainedConfig.get_config_dict(base)
    except (OSError, ValueError):
        return "auto"
    return base_config.get("vocab_size") not in (None, vocab_size)


def _decide_embedding_layers_on_save(model) -> None:
    """``model.save_pretrained`` (the Trainer's checkpoints, the run's ``lora_adapter/``) with
    :func:`embedding_layers_to_save` in place of PEFT's ``"auto"``."""
    save = model.save_pretrained

    @functools.wraps(save)
    def save_pretrained(save_directory, *args, save_embedding_layers="auto", **kwargs):
        if save_embedding_layers == "auto":
            save_embedding_layers = embedding_layers_to_save(model)
        return save(save_directory, *args, save_embedding_layers=save_embedding_layers, **kwargs)

    model.save_pretrained = save_pretrained

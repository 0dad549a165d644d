"""LoRA (PEFT) adapters on an as2hub model, with the modules each family must train fully beside them.

The task heads and the embeddings as2hub grows (contextual and joint token types, QE markers) start untrained, so
they are trained fully (PEFT's ``modules_to_save``) while the encoder gets low-rank adapters::

    from as2hub.modeling.lora import add_lora
    model = add_lora(model, r=8, target_modules=["query", "value"])
    model.print_trainable_parameters()
"""

from __future__ import annotations

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
    return model

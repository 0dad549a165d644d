"""LoRA (PEFT) adapters on an as2hub model, with the modules each family must train fully beside them.

The task heads and the embeddings as2hub grows (contextual and joint token types, QE markers) start untrained, so
they are trained fully (PEFT's ``modules_to_save``) while the encoder gets low-rank adapters::

    from as2hub.modeling.lora import add_lora
    model = add_lora(model, r=8, target_modules=["query", "value"])
    model.print_trainable_parameters()
"""

from __future__ import annotations

import logging

logger = logging.getLogger("as2hub")

# Cross-encoders (contextual and pairwise) and joint models: the head and the grown token-type rows.
DEFAULT_FULLY_TRAINED = ("classifier", "token_type_embeddings")
# Per model type, where the family's new modules are named otherwise.
FULLY_TRAINED = {
    # Longformer QE: the answer / type / sentence / paragraph heads, the QE projections and the new marker embeddings.
    "longformer_qe": ("qa_outputs", "answer_type_head", "sentence_head", "paragraph_head", "qe", "word_embeddings"),
}


def fully_trained_modules(model) -> list[str]:
    """The modules of ``model``'s family trained fully beside the adapters."""
    return list(FULLY_TRAINED.get(getattr(model.config, "model_type", None), DEFAULT_FULLY_TRAINED))


def add_lora(
    model,
    r: int = 8,
    alpha: int = 16,
    dropout: float = 0.1,
    target_modules=("query", "value"),
    modules_to_save=None,
):
    """``model`` wrapped in LoRA adapters (a PEFT model); ``modules_to_save`` defaults to the family's new modules."""
    from peft import LoraConfig, get_peft_model

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

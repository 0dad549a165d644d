"""What the run scripts share: quiet checkpoint loading with a one-line summary, CPU-aware Trainer defaults, logging.

Loading a stock or pre-training checkpoint into an as2hub class is expected to leave some weights unused (the
checkpoint's pre-training head, e.g. ``lm_head.*``) and to initialise others (the new task head, e.g.
``classifier.*``); transformers reports both in a multi-screen LOAD REPORT and warns that the checkpoint's model type
differs from the class's. :func:`load_checkpoint` replaces those expected messages by one line, and still warns when
weights of the encoder itself are missing or unused (a checkpoint of the wrong kind).

Example:
    >>> from as2hub.modeling import RobertaForContextualAS2
    >>> model = load_checkpoint(RobertaForContextualAS2, "outputs/pretrain", contextual=True)  # doctest: +SKIP
    INFO ... loaded outputs/pretrain (ssp_roberta) into RobertaForContextualAS2: new classifier.* (4 tensors); not used
    lm_head.* (5 tensors, the checkpoint's own head)
"""

import contextlib
import logging
import os
from collections import Counter

import torch
import transformers

logger = logging.getLogger("as2hub")


def setup_logging() -> None:
    """INFO logs of as2hub and the scripts; transformers keeps its warnings; progress bars stay."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()


@contextlib.contextmanager
def transformers_quiet(level: int = transformers.logging.ERROR):
    """Temporarily raise transformers' log level (e.g. around a load whose messages are expected)."""
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity(level)
    try:
        yield
    finally:
        transformers.logging.set_verbosity(previous)


def _groups(keys, base_prefix: str) -> str:
    """``lm_head.dense.weight, lm_head.bias`` -> ``lm_head.* (2 tensors)``; encoder keys keep their module name."""
    counts = Counter(".".join(key.split(".")[: 2 if key.startswith(base_prefix) else 1]) for key in keys)
    return ", ".join(
        f"{prefix}.* ({count} tensor{'s' if count > 1 else ''})" for prefix, count in sorted(counts.items())
    )


def load_checkpoint(model_class, source: str, loader=None, **kwargs):
    """``model_class.from_pretrained(source, **kwargs)`` with the expected load messages summarised in one line.

    ``loader`` replaces ``model_class.from_pretrained`` (e.g. ``ElectraForSSPPretraining.from_discriminator_and_generator``
    with its generator bound); it must accept ``output_loading_info=True``. Missing or unused weights inside the
    encoder (``model.base_model_prefix``) are reported as a warning: the checkpoint is not of the backbone the class
    expects.
    """
    source_type = None
    config_file = os.path.join(str(source), "config.json")
    if os.path.isfile(config_file):
        import json

        with open(config_file, encoding="utf-8") as handle:
            source_type = json.load(handle).get("model_type")
    with transformers_quiet():
        model, info = (loader or model_class.from_pretrained)(source, output_loading_info=True, **kwargs)
    prefix = model.base_model_prefix + "."
    missing, unused = sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))
    encoder_missing = [key for key in missing if key.startswith(prefix)]
    encoder_unused = [key for key in unused if key.startswith(prefix) and "pooler" not in key]
    parts = [f"loaded {source} ({source_type or 'model'}) into {type(model).__name__}"]
    if missing:
        parts.append(f"new {_groups(missing, prefix)}")
    if unused:
        parts.append(f"not used {_groups(unused, prefix)} (the checkpoint's own heads)")
    logger.info("; ".join(parts))
    if encoder_missing or encoder_unused:
        logger.warning(
            "%s does not match %s: encoder weights missing %s, unused %s",
            source,
            type(model).__name__,
            encoder_missing[:8],
            encoder_unused[:8],
        )
    return model


def has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    return bool(accelerator.is_available()) if accelerator is not None else torch.cuda.is_available()


class CPUFriendlyArguments:
    """TrainingArguments mixin: no pinned memory without an accelerator (torch warns, and it buys nothing)."""

    def __post_init__(self):
        super().__post_init__()
        if not has_accelerator():
            self.dataloader_pin_memory = False

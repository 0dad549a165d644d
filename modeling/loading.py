"""Loading a checkpoint into an as2hub class quietly, with a one-line summary of what was new and what was unused.

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
import json
import logging
import os
from collections import Counter

import transformers

logger = logging.getLogger("as2hub")


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
        with open(config_file, encoding="utf-8") as handle:
            source_type = json.load(handle).get("model_type")
    with transformers_quiet():
        model, info = (loader or model_class.from_pretrained)(source, output_loading_info=True, **kwargs)
    prefix = model.base_model_prefix + "."
    missing, unused = sorted(info.get("missing_keys", ())), sorted(info.get("unexpected_keys", ()))
    reshaped = sorted(
        entry[0] if isinstance(entry, (tuple, list)) else entry for entry in info.get("mismatched_keys", ())
    )
    encoder_missing = [key for key in missing + reshaped if key.startswith(prefix)]
    encoder_unused = [key for key in unused if key.startswith(prefix) and "pooler" not in key]
    parts = [f"loaded {source} ({source_type or 'model'}) into {type(model).__name__}"]
    if missing:
        parts.append(f"new {_groups(missing, prefix)}")
    if reshaped:
        parts.append(f"re-initialised (shape differs from the checkpoint's) {_groups(reshaped, prefix)}")
    if unused:
        parts.append(f"not used {_groups(unused, prefix)} (the checkpoint's own heads)")
    logger.info("; ".join(parts))
    if encoder_missing or encoder_unused:
        logger.warning(
            "%s does not match %s: encoder weights missing or re-initialised %s, unused %s",
            source,
            type(model).__name__,
            encoder_missing[:8],
            encoder_unused[:8],
        )
    return model

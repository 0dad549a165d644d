"""The checks a training run makes on its arguments before anything is built: the model's config is readable, the
input length fits its position table, a joint slot layout fits it; and the tiny model built when no checkpoint is
given. A failed check raises :class:`ArgumentError`: one line on the command line (run_scripts' ``run_cli``)."""

import logging

from as2hub.modeling.errors import ArgumentError
from as2hub.modeling.loading import transformers_quiet
from as2hub.modeling.registry import position_offset

logger = logging.getLogger("as2hub")

__all__ = ["TINY_ROBERTA", "ArgumentError", "check_max_length", "check_slot_budget", "load_config", "usable_positions"]


def usable_positions(config) -> int | None:
    """Tokens one input can hold: ``max_position_embeddings``, less RoBERTa's pad offset (its positions start at
    ``pad_token_id + 1``: 514 -> 512; ``registry.position_offset``). ``None`` when the config has no absolute
    position table."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    return positions - position_offset(config)


def load_config(source: str, flag: str = "--model_name_or_path"):
    """The model config at ``source`` (a folder or Hub id; as2hub's model types included); a folder or id without a
    usable config raises :class:`ArgumentError`, one line naming ``flag`` and what is missing, not a traceback."""
    from transformers import AutoConfig

    import as2hub.modeling  # noqa: F401  (registers the as2hub model types with AutoConfig)

    try:
        with transformers_quiet():
            return AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ArgumentError(
            f"{flag} {source}: no usable model config ({reason}); pass a folder written by save_pretrained "
            "(config.json with a model_type) or a Hub model id"
        ) from None


def _positions_of(source: str) -> tuple[int | None, int | None]:
    """(usable positions, max_position_embeddings) of the model at ``source``; only its config is read."""
    config = load_config(source)
    return usable_positions(config), getattr(config, "max_position_embeddings", None)


def check_max_length(
    max_length: int | None, source: str | None, default: int | None = None, flag: str = "--max_length"
) -> int | None:
    """The ``--max_length`` to use with the model at ``source`` (a checkpoint or config folder / Hub id; only its
    config is read, no weights).

    A given ``max_length`` longer than the model's positions raises :class:`ArgumentError` saying what to pass; without
    one, ``default`` is used, lowered to the model's positions when they are fewer (logged).
    """
    if max_length is not None and max_length < 2:
        raise ArgumentError(f"{flag} must be at least 2 (special tokens), got {max_length}")
    if source is None:
        return max_length if max_length is not None else default
    available, table = _positions_of(source)
    if max_length is None:
        if default is not None and available is not None and default > available:
            logger.info("%s: %s %d (the model's positions) instead of the default %d", source, flag, available, default)
            return available
        return default
    if available is not None and max_length > available:
        raise ArgumentError(
            f"{flag} {max_length} is longer than {source} can read: its position table holds {available} tokens "
            f"(max_position_embeddings={table}); pass {flag} {available} or less"
        )
    return max_length


def check_slot_budget(
    num_candidates: int, slot_length: int, slot_positions: str, source: str | None, default_positions: int | None = None
) -> None:
    """Joint models read ``k + 1`` slots of ``L`` tokens: with ``global`` positions ``(k + 1) * L`` must fit the
    position table of ``source`` (its config only is read), else :class:`ArgumentError` says what to lower.
    ``default_positions`` is used without a ``source`` (a model built from scratch)."""
    if num_candidates < 1 or slot_length < 1:
        raise ArgumentError(f"--num_candidates and --slot_length must be >= 1, got {num_candidates}, {slot_length}")
    available = default_positions if source is None else _positions_of(source)[0]
    needed = (num_candidates + 1) * slot_length if slot_positions == "global" else slot_length
    if available is not None and needed > available:
        raise ArgumentError(
            f"--num_candidates {num_candidates} with --slot_length {slot_length} needs (k + 1) x L = {needed} "
            f"positions but {source or 'the model'} has {available}: lower --num_candidates to "
            f"{max(available // slot_length - 1, 0)} or --slot_length to {available // (num_candidates + 1)}, "
            "or pass --slot_positions per_slot"
        )


# The tiny model the scripts build when no checkpoint is given: no pretrained weights are reachable offline, so the
# default runs train a small RoBERTa from scratch with a tokenizer trained on the embedded corpus (minutes on 2 cores).
TINY_ROBERTA = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 512,
    "max_position_embeddings": 514,
}

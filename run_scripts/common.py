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
import dataclasses
import logging
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

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


def without_evaluation(training_args) -> None:
    """No validation data: no evaluation, no early stopping, no best-checkpoint selection; the last model is kept."""
    logger.warning("no validation data: no early stopping, the last model is kept")
    training_args.eval_strategy = "no"
    training_args.load_best_model_at_end = False
    if training_args.save_strategy == "best":
        training_args.save_strategy = "epoch"


def has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    return bool(accelerator.is_available()) if accelerator is not None else torch.cuda.is_available()


class CPUFriendlyArguments:
    """TrainingArguments mixin for machines without an accelerator: ``--bf16`` trains in bf16 autocast on the CPU
    (transformers otherwise refuses it unless ``--use_cpu`` is also given; fast where the CPU has bf16 units: AMX,
    ``avx512_bf16``); ``--fp16`` stops with one line saying it needs a CUDA GPU (its loss scaling is a GPU recipe) and
    that ``--bf16`` is the CPU's half precision; no pinned memory (torch warns, and it buys nothing)."""

    def __post_init__(self):
        accelerator = has_accelerator()
        if not accelerator:
            if getattr(self, "fp16", False) or getattr(self, "fp16_full_eval", False):
                raise ValueError(
                    "--fp16 needs a CUDA GPU and torch.cuda.is_available() is False on this machine: drop --fp16, or "
                    "pass --bf16 for half precision on the CPU (bf16 autocast)"
                )
            if getattr(self, "bf16", False) or getattr(self, "bf16_full_eval", False):
                self.use_cpu = True
        super().__post_init__()
        if not accelerator:
            self.dataloader_pin_memory = False


@dataclasses.dataclass
class OverwriteArguments:
    """TrainingArguments mixin: ``--overwrite_output_dir`` (transformers 5 dropped the flag; :func:`check_output_dir`
    reads it)."""

    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Train into an --output_dir that already holds a model: its checkpoint-* folders are removed "
            "before training and the model is replaced when the run ends. Without it such a folder is refused "
            "(unless --resume_from_checkpoint continues it)."
        },
    )


# --------------------------------------------------------------------------------------------------------------------
# User errors: typed in the library, one line and a non-zero exit code on the command line


class ArgumentError(ValueError):
    """Invalid or contradictory command-line arguments; the message says what to change."""


EXIT_USER_ERROR = 2


def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the input or the arguments are wrong" (not a bug): the scripts' :func:`run_cli`
    prints them as one line. Subclasses (``EmptyCorpusError``, ``FactVerificationDataError``, ...) are included."""
    from as2hub.data_collators.as2_data import AS2DataError
    from as2hub.data_collators.corpus import CorpusError
    from as2hub.data_collators.hotpotqa import HotpotQAError
    from as2hub.modeling.onnx_backend import NotAnAS2hubRankerError, StaleOnnxExportError
    from as2hub.run_scripts.publishing import PublishError

    return (
        ArgumentError,
        AS2DataError,
        CorpusError,
        HotpotQAError,
        PublishError,
        NotAnAS2hubRankerError,
        StaleOnnxExportError,
        FileNotFoundError,
        NotADirectoryError,
        IsADirectoryError,
        PermissionError,
    )


def parse_arguments(parser, argv: list[str] | None = None) -> tuple:
    """``parser.parse_args_into_dataclasses(args=argv)`` with a ``ValueError`` of a dataclass's ``__post_init__``
    (TrainingArguments' own checks included) re-raised as :class:`ArgumentError`, so the command line shows it as one
    line, as are unknown flags (``Some specified arguments are not used ...``); a malformed value (``--max_steps x``)
    keeps argparse's usage message and exit code 2."""
    try:
        return parser.parse_args_into_dataclasses(args=argv)
    except ArgumentError:
        raise
    except ValueError as error:
        raise ArgumentError(str(error)) from error


def one_line(error: BaseException) -> str:
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip()) or type(error).__name__
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # printable whatever the message holds


def run_cli(main, argv: list[str] | None = None) -> int:
    """Run a script's ``main(argv)`` for the command line: a user error (:func:`user_errors`) ends with ONE line
    ``error: <message>`` on stderr and exit code 2; any other exception keeps its traceback (a bug to report).

    Example (the scripts' ``cli`` entry points, also the console scripts)::

        def cli(argv=None) -> int:
            return run_cli(main, argv)

        if __name__ == "__main__":
            sys.exit(cli())
    """
    try:
        result = main(sys.argv[1:] if argv is None else argv)
    except user_errors() as error:
        print(f"error: {one_line(error)}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


# --------------------------------------------------------------------------------------------------------------------
# Parse-time checks


MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "adapter_config.json",
    "adapter_model.safetensors",
)


def _checkpoints(folder: Path) -> list[Path]:
    return sorted(path for path in folder.glob("checkpoint-*") if path.is_dir())


def check_output_dir(training_args) -> list[Path]:
    """Refuse to train into an ``--output_dir`` that already holds a model (``config.json``, weights or
    ``checkpoint-*``) unless ``--overwrite_output_dir`` or ``--resume_from_checkpoint`` says what to do with it.

    Call it right after parsing, before any data or model is loaded. Returns the previous run's ``checkpoint-*``
    folders that :func:`remove_stale_checkpoints` deletes just before training when overwriting (``[]`` otherwise),
    so that a run that fails on bad data leaves the old folder untouched.
    """
    output_dir = getattr(training_args, "output_dir", None)
    if not output_dir or not Path(output_dir).is_dir():
        return []
    folder = Path(output_dir)
    checkpoints = _checkpoints(folder)
    found = [name for name in MODEL_FILES if (folder / name).is_file()] + [path.name for path in checkpoints]
    if not found or getattr(training_args, "resume_from_checkpoint", None):
        return []
    if not getattr(training_args, "overwrite_output_dir", False):
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        raise ArgumentError(
            f"--output_dir {folder} already holds a model ({shown}): pass --overwrite_output_dir to replace it, "
            "--resume_from_checkpoint to continue its training, or choose another --output_dir"
        )
    return checkpoints


def remove_stale_checkpoints(checkpoints: list[Path], training_args=None) -> None:
    """Delete the previous run's checkpoints found by :func:`check_output_dir` (on the main process only), so the
    new run's ``checkpoint-*`` are never mixed with the old ones."""
    if not checkpoints or (training_args is not None and not training_args.should_save):
        return
    logger.info("--overwrite_output_dir: removing the previous run's %s", ", ".join(path.name for path in checkpoints))
    for path in checkpoints:
        shutil.rmtree(path, ignore_errors=True)


ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert", "longformer", "longformer_qe")


def usable_positions(config) -> int | None:
    """Tokens one input can hold: ``max_position_embeddings``, less RoBERTa's pad offset (its positions start at
    ``pad_token_id + 1``: 514 -> 512). ``None`` when the config has no absolute position table."""
    from as2hub.modeling import backbone_of

    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    if backbone_of(getattr(config, "model_type", "") or "") in ROBERTA_LIKE:
        pad = getattr(config, "pad_token_id", None)
        positions -= (pad if pad is not None else 1) + 1
    return positions


def _positions_of(source: str) -> tuple[int | None, int | None]:
    """(usable positions, max_position_embeddings) of the model at ``source``; only its config is read."""
    from transformers import AutoConfig

    import as2hub.modeling  # noqa: F401  (registers the as2hub model types with AutoConfig)

    with transformers_quiet():
        config = AutoConfig.from_pretrained(source)
    return usable_positions(config), getattr(config, "max_position_embeddings", None)


FIRST_TOKEN_ATTENTION_HELP = (
    "'own_slot' (as2hub): each candidate's first token, the one the heads read, attends only to its own slot and the "
    "question; 'all': full attention, as the paper (its joint models then need MSPP to tell the candidates apart). "
    "Default: a joint checkpoint's own setting, 'own_slot' for a new joint model."
)


def first_token_attention_field(prefix: str = ""):
    """The ``--first_token_attention`` argument of the joint run scripts (see :func:`first_token_attention`)."""
    return dataclasses.field(
        default=None, metadata={"choices": ["own_slot", "all"], "help": prefix + FIRST_TOKEN_ATTENTION_HELP}
    )


def first_token_attention(requested: str | None, source: str | None) -> str | None:
    """The ``first_token_attention`` a joint run builds its model with: ``requested`` when given; else ``None`` (keep
    the folder's own, the paper's ``"all"`` when it predates the field) for a joint checkpoint or config, so that
    fine-tuning an MSPP folder or resuming keeps what it was trained with; else ``"own_slot"`` (a new joint model)."""
    if requested is not None:
        return requested
    if source is not None:
        from transformers import PreTrainedConfig

        with transformers_quiet():
            model_type = PreTrainedConfig.get_config_dict(source)[0].get("model_type", "")
        if model_type.startswith("joint_"):
            return None
    return "own_slot"


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

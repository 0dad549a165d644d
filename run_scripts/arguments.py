"""What the run scripts share: their argument dataclasses (CPU-aware Trainer defaults, the papers' fine-tuning
schedule, LoRA), one-line errors for bad input, logging, output-folder checks, and the tiny default model.

A command is built from these pieces, as ``run_as2.py`` is::

    parser = HfArgumentParser((ModelArguments, DataArguments, AS2TrainingArguments, HubArguments))
    model_args, data_args, training_args, hub_args = parse_arguments(parser, argv)  # bad input: ArgumentError
    ...
    model = model_args.add_lora(model)  # ModelArguments inherits LoraArguments: --use_lora --lora_r ...

    def cli(argv=None) -> int:
        return run_cli(main, argv)  # user errors: one line and exit code 2, not a traceback
"""

import dataclasses
import logging
import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import TrainingArguments

from as2hub.modeling.folders import DEFAULT_MAX_LENGTH  # noqa: F401  (re-exported: run_as2.py reads it here)
from as2hub.modeling.lora import add_lora
from as2hub.modeling.registry import CONTEXTUAL_AS2
from as2hub.training.checks import (  # noqa: F401  (the commands' argument checks, re-exported where they import them)
    TINY_ROBERTA,
    ArgumentError,
    check_max_length,
    check_slot_budget,
    load_config,
    usable_positions,
)

logger = logging.getLogger("as2hub")


def setup_logging() -> None:
    """INFO logs of as2hub and the scripts; transformers keeps its warnings; progress bars stay."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()


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


EXIT_USER_ERROR = 2


def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean "the input or the arguments are wrong" (not a bug): the scripts' :func:`run_cli`
    prints them as one line. Subclasses (``EmptyCorpusError``, ``FactVerificationDataError``, ...) are included."""
    from as2hub.data_collators.readers.as2_data import AS2DataError
    from as2hub.data_collators.readers.corpus import CorpusError
    from as2hub.data_collators.readers.hotpotqa import HotpotQAError
    from as2hub.hub_cards.run_record import PublishError
    from as2hub.inference.onnx_runtime import StaleOnnxExportError
    from as2hub.modeling.folders import NotAnAS2hubRankerError

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
    end_process_group()
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def end_process_group() -> None:
    """Under ``torchrun``, destroy the process group once ``main`` has returned: left to the interpreter's teardown,
    gloo's worker threads can abort a rank after a finished run ("terminate called without an active exception",
    SIGABRT, and torchrun reports the run failed). Only after success: on an error another rank may still be in a
    collective, and destroying the group would wait on it."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# --------------------------------------------------------------------------------------------------------------------
# Parse-time checks


EXISTING_RUN_FILES = (  # files whose presence means the output folder already holds a trained model
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
    found = [name for name in EXISTING_RUN_FILES if (folder / name).is_file()] + [path.name for path in checkpoints]
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


def remove_run_checkpoints(training_args) -> list[str]:
    """With ``--remove_checkpoints``: delete the run's own ``checkpoint-*`` folders (a copy of the weights and the
    optimizer, scheduler and RNG states) once its final model is saved, so that the output folder holds the model,
    config, tokenizer, remote code, card and results only. Call it on the main process after saving. Returns the
    names removed."""
    if not getattr(training_args, "remove_checkpoints", False):
        return []
    checkpoints = _checkpoints(Path(training_args.output_dir))
    for path in checkpoints:
        shutil.rmtree(path)
    if checkpoints:
        logger.info("--remove_checkpoints: removed %s", ", ".join(path.name for path in checkpoints))
    return [path.name for path in checkpoints]


FIRST_TOKEN_ATTENTION_HELP = (
    "'own_slot' (as2hub): each candidate's first token, the one the heads read, attends only to its own slot and the "
    "question; 'all': full attention, as the paper (its joint models then need MSPP to tell the candidates apart). "
    "Default: the joint config's ('own_slot' for a new joint model; a joint checkpoint keeps its own setting)."
)


def first_token_attention_field(prefix: str = ""):
    """The ``--first_token_attention`` argument of the joint run scripts: None (not given) leaves the default to the
    joint config, its one owner."""
    return dataclasses.field(
        default=None, metadata={"choices": ["own_slot", "all"], "help": prefix + FIRST_TOKEN_ATTENTION_HELP}
    )


@dataclasses.dataclass
class LoraArguments:
    """``--use_lora`` and its settings; a script's ``ModelArguments`` inherits them and calls :meth:`add_lora`.

    The modules trained fully beside the adapters (the new heads, grown embeddings) are the family's
    (``Family.lora_fully_trained`` in ``as2hub.modeling.registry``)."""

    use_lora: bool = dataclasses.field(
        default=False, metadata={"help": "Fine-tune LoRA adapters (PEFT) instead of all weights."}
    )
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.1
    lora_target_modules: str = dataclasses.field(
        default=",".join(CONTEXTUAL_AS2.lora_target_modules), metadata={"help": "Comma-separated module names."}
    )

    def add_lora(self, model):
        """``model`` wrapped in LoRA adapters when ``--use_lora``, else ``model`` unchanged."""
        if not self.use_lora:
            return model
        targets = [name.strip() for name in self.lora_target_modules.split(",") if name.strip()]
        return add_lora(model, r=self.lora_r, alpha=self.lora_alpha, dropout=self.lora_dropout, target_modules=targets)


PAPER_WARMUP_STEPS = 1000
SHORT_RUN_WARMUP_RATIO = 0.1


@dataclass
class AS2TrainingArguments(CPUFriendlyArguments, OverwriteArguments, TrainingArguments):
    """TrainingArguments with the papers' fine-tuning defaults: linear warmup then linear decay (the "triangular"
    schedule) with 1,000 warmup steps, or 10% of the run when it is shorter than 10,000 steps; no weight decay; clip
    1.0; best checkpoint by dev MAP."""

    output_dir: str | None = field(default="outputs/as2")
    eval_strategy: str = field(default="epoch")
    # "best" checkpoints whenever dev MAP improves, whatever --eval_strategy is (epoch or steps).
    save_strategy: str = field(default="best")
    load_best_model_at_end: bool = field(default=True)
    metric_for_best_model: str | None = field(default="map")
    greater_is_better: bool | None = field(default=True)
    save_total_limit: int | None = field(default=2)
    report_to: None | str | list[str] = field(default="none")
    logging_steps: float = field(default=50)
    weight_decay: float = field(default=0.0)
    # The collator reads token columns the model's forward does not name; Trainer must not drop them.
    remove_unused_columns: bool = field(default=False)
    max_grad_norm: float = field(default=1.0)
    remove_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "Once the final model is saved, delete the run's checkpoint-* folders (each a copy of the weights "
            "and the optimizer's state, about 3x the weights): the folder then holds only the model, config, "
            "tokenizer, remote code, card and results. Default: kept, for --resume_from_checkpoint and their "
            "trainer_state.json."
        },
    )
    warmup_steps: float | None = field(
        default=None,
        metadata={
            "help": "Linear warmup steps (>= 1) or ratio (< 1). Default: the papers' 1,000 steps (WikiQA), capped at "
            "10%% of the run for runs shorter than 10,000 steps."
        },
    )

    def __post_init__(self):
        self.paper_warmup = self.warmup_steps is None
        if self.paper_warmup:
            self.warmup_steps = PAPER_WARMUP_STEPS
        super().__post_init__()

    def get_warmup_steps(self, num_training_steps: int) -> int:
        if self.paper_warmup:
            return min(PAPER_WARMUP_STEPS, math.ceil(SHORT_RUN_WARMUP_RATIO * num_training_steps))
        return super().get_warmup_steps(num_training_steps)

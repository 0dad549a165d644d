"""Fine-tune and evaluate a (contextual) AS2 cross-encoder with the HF Trainer.

Any ``TrainingArguments`` flag works. Examples::

    # WikiQA, contextual (question, candidate, previous + next sentence), early stopping on dev MAP
    python -m as2hub.run_scripts.run_as2 --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 \\
        --dataset wikiqa --output_dir outputs/minilm-wikiqa --learning_rate 2e-5 --num_train_epochs 3

    # the paper's pairwise baseline, with LoRA
    python -m as2hub.run_scripts.run_as2 --model_name_or_path FacebookAI/roberta-base --pairwise \\
        --use_lora --lora_r 8 --dataset data/train.jsonl --validation_file data/dev.jsonl --output_dir outputs/lora

The output folder is Hub-ready (config with auto_map, remote code, safetensors, tokenizer, model card) and holds
``all_results.json`` and ``test_predictions.jsonl`` (every test question with its candidates ranked).
``--push_to_hub --hub_model_id namespace/name`` publishes it at the end of the run (``as2hub-push`` does the same for
a finished run; ``--hub_push_adapter`` publishes a LoRA adapter instead of the merged model).
``--export_onnx [--onnx_quantize int8]`` also writes ``onnx/model.onnx`` (and the int8 graph) for fast CPU ranking;
``int8_calibration.safetensors`` (from 512 training pairs, ``--int8_calibration_pairs``) lets
``Ranker.from_pretrained(folder, backend="torch-int8")`` smooth its int8 products.
"""

import logging
import sys
from dataclasses import dataclass, field

from transformers import (
    AutoTokenizer,
    EarlyStoppingCallback,
    HfArgumentParser,
    Trainer,
    set_seed,
)

from as2hub.data_collators import ContextualAS2Collator, tokenize_as2
from as2hub.data_collators.collators.tokenizer_training import embedded_tokenizer
from as2hub.data_collators.readers.as2_splits import load_splits
from as2hub.hub_cards.push import HubArguments, HubPush
from as2hub.hub_cards.run_outputs import save_hub_folder, write_ranked_predictions
from as2hub.metrics import make_compute_metrics
from as2hub.modeling import CONTEXTUAL_MODELS, ContextualRobertaConfig, RobertaForContextualAS2, backbone_of
from as2hub.modeling.files import write_json_atomic
from as2hub.modeling.folders import record_max_length
from as2hub.modeling.loading import load_checkpoint
from as2hub.run_scripts.arguments import (
    DEFAULT_MAX_LENGTH,
    TINY_ROBERTA,
    ArgumentError,
    AS2TrainingArguments,
    LoraArguments,
    check_max_length,
    check_output_dir,
    load_config,
    parse_arguments,
    remove_run_checkpoints,
    remove_stale_checkpoints,
    run_cli,
    setup_logging,
    without_evaluation,
)
from as2hub.training.cascade_heads import check_head_target, train_cascade_heads
from as2hub.training.evaluations import RecordEvaluations, final_dev_metrics

logger = logging.getLogger("as2hub.run_as2")


@dataclass
class ModelArguments(LoraArguments):
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Checkpoint (Hub id or folder) of a RoBERTa, ELECTRA or BERT-family model."}
    )
    config_name: str | None = field(
        default=None,
        metadata={"help": "Config to build a model from scratch (tokenizer: --tokenizer_name, else this folder's)."},
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Defaults to the model's."})
    contextual: bool | None = field(
        default=None,
        metadata={
            "help": "Three segments: question, candidate, context. Default: contextual when the training data has "
            "contexts (a `context` column, or `document_id` + `position`), pairwise otherwise."
        },
    )
    pairwise: bool = field(default=False, metadata={"help": "The paper's baseline: (question, candidate) only."})
    token_type_init: str = field(
        default="scratch",
        metadata={
            "help": "Init of the token-type table when a checkpoint's is grown to 3 rows: 'scratch' (keep the "
            "pretrained rows, draw the new one), 'copy' (new rows copy the last pretrained row) or 'scratch_all' "
            "(draw the whole table anew)."
        },
    )

    cascade_layers: str | None = field(
        default=None,
        metadata={
            "help": "Layer cascade (Soldaini & Moschitti, 2020): a classifier after each of these encoder layers, e.g. "
            "'2,4'; rank with cascade_drop to drop weak candidates early (inference/CASCADE.md)."
        },
    )
    cascade_loss: str = field(
        default="sample",
        metadata={
            "help": "With --cascade_layers: 'sample' (the paper: one classifier's loss per step, drawn uniformly, the "
            "final one included) or 'mean' (every classifier's loss, averaged)."
        },
    )
    cascade_heads_only: bool = field(
        default=False,
        metadata={
            "help": "With --cascade_layers on a fine-tuned ranker: train only the cascade heads, on the first-token "
            "states of the frozen encoder computed once (the full model's scores do not change); a cheap step, e.g. "
            "10 epochs at lr 1e-3 (training/cascade_heads.py)."
        },
    )

    cascade_head_target: str = field(
        default="labels",
        metadata={
            "help": "With --cascade_heads_only, what the heads learn: 'labels' (the rows' labels), 'distill' (the frozen "
            "full model's scores on the same rows: KL from its probability to the head's) or 'both' (weighted by "
            "--cascade_distill_weight); recorded in the run record (training/cascade_heads.py)."
        },
    )
    cascade_distill_weight: float = field(
        default=0.5,
        metadata={"help": "With --cascade_head_target both: the distillation loss's share, in [0, 1]."},
    )

    def cascade_overrides(self) -> dict:
        """Config fields for the cascade flags (none without --cascade_layers)."""
        if not self.cascade_layers:
            return {}
        layers = [int(part) for part in self.cascade_layers.replace(" ", "").split(",") if part]
        return {"cascade_layers": layers, "cascade_loss": "heads" if self.cascade_heads_only else self.cascade_loss}


@dataclass
class DataArguments:
    dataset: str = field(
        default="embedded",
        metadata={
            "help": "'wikiqa' (../shared/data/wikiqa or $AS2HUB_WIKIQA_DIR), 'embedded' (a sentence-selection task "
            "built from Python's own docs, runs anywhere), or a train file (JSONL/CSV/TSV) or `datasets` path."
        },
    )
    validation_file: str | None = None
    test_file: str | None = None
    max_length: int | None = field(
        default=None,
        metadata={
            "help": f"Tokens per (question, candidate, context) input. Default: {DEFAULT_MAX_LENGTH}, or the model's "
            "positions; saved in the model's config (as2hub_max_length), the default when ranking the folder."
        },
    )
    clean_eval: bool = field(
        default=True, metadata={"help": "Drop dev/test questions with only correct or only wrong candidates."}
    )
    early_stopping_patience: int = field(default=5, metadata={"help": "Evaluations without a better dev MAP."})
    max_train_samples: int | None = None
    max_eval_samples: int | None = None


@dataclass
class ExportArguments:
    export_onnx: bool = field(
        default=False,
        metadata={"help": "After saving, write onnx/model.onnx for ONNX Runtime (needs pip install 'as2hub[onnx]')."},
    )
    onnx_quantize: str | None = field(
        default=None, metadata={"help": "With --export_onnx: also write a quantized graph ('int8')."}
    )
    int8_calibration_pairs: int = field(
        default=512,
        metadata={
            "help": "After saving, record from this many training pairs (drawn with --seed) what backend='torch-int8' "
            "needs to smooth its products (int8_calibration.safetensors; Ranker.calibrate_int8); 0: none."
        },
    )

    def __post_init__(self):
        if self.int8_calibration_pairs < 0:
            raise ValueError(f"--int8_calibration_pairs must be 0 or more, got {self.int8_calibration_pairs}")
        if self.onnx_quantize is not None and not self.export_onnx:
            raise ValueError("--onnx_quantize needs --export_onnx")
        if self.export_onnx:  # fail before training, not after
            from as2hub.inference.onnx_runtime import require_onnx
            from as2hub.modeling.folders import QUANTIZE_CHOICES

            if self.onnx_quantize not in (None, *QUANTIZE_CHOICES):
                raise ValueError(f"--onnx_quantize must be one of {QUANTIZE_CHOICES}, got {self.onnx_quantize!r}")
            require_onnx(quantize=True)


def load_model(model_args: ModelArguments, tokenizer, contextual: bool):
    """The contextual class of the checkpoint's backbone, from a checkpoint or (with --config_name) from scratch."""
    source = model_args.model_name_or_path or model_args.config_name
    backbone = backbone_of(load_config(source).model_type)
    if backbone not in CONTEXTUAL_MODELS:
        raise ArgumentError(f"{source}: model type {backbone!r} is not one of {sorted(CONTEXTUAL_MODELS)}")
    config_class, model_class = CONTEXTUAL_MODELS[backbone]
    overrides = {
        "contextual": contextual,
        "token_type_init": model_args.token_type_init,
        "sep_token_id": tokenizer.sep_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **model_args.cascade_overrides(),
    }
    if model_args.model_name_or_path:
        return load_checkpoint(model_class, model_args.model_name_or_path, **overrides)
    # From scratch: a stock config keeps its 1- or 2-row token-type table; the model grows it on construction.
    config = config_class.from_pretrained(model_args.config_name, vocab_size=len(tokenizer), **overrides)
    return model_class(config)


def tiny_default(contextual: bool, overrides: dict | None = None):
    """No checkpoint given: a tiny RoBERTa from scratch with a tokenizer trained on the embedded corpus.

    Contextual: three segment ids; pairwise: none (one row), as the paper's RoBERTa pairwise baseline.
    """
    logger.warning("no --model_name_or_path: training a tiny RoBERTa from scratch (a demo, not a useful ranker)")
    tokenizer = embedded_tokenizer("roberta")
    config = ContextualRobertaConfig(
        vocab_size=len(tokenizer),
        contextual=contextual,
        type_vocab_size=3 if contextual else 1,
        sep_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**TINY_ROBERTA, **(overrides or {})},
    )
    return RobertaForContextualAS2(config), tokenizer


def choose_contextual(model_args: ModelArguments, train) -> bool:
    """Contextual unless asked otherwise or the training data has no context (then pairwise, said at the start)."""
    if model_args.pairwise:
        return False
    has_context = any(train.dataset["context"])
    if model_args.contextual is None:
        if not has_context:
            logger.warning(
                "%s has no context (no `context` column, nor `document_id` + `position`): training the pairwise "
                "model (question, candidate). Pass --contextual true to train a contextual model on empty contexts.",
                train.source,
            )
        return has_context
    if model_args.contextual and not has_context:
        logger.warning(
            "%s has no context (no `context` column, nor `document_id` + `position`): the contextual model is "
            "trained on empty contexts, so its context segment learns nothing; --pairwise is the paper's baseline.",
            train.source,
        )
    return model_args.contextual


def check_arguments(model_args: ModelArguments, data_args: DataArguments) -> None:
    """Contradictions between flags, raised before any data or model is loaded."""
    if model_args.pairwise and model_args.contextual:
        raise ArgumentError("--pairwise and --contextual true contradict each other: pass one of them")
    source = model_args.model_name_or_path or model_args.config_name
    data_args.max_length = check_max_length(data_args.max_length, source, default=DEFAULT_MAX_LENGTH)
    if model_args.cascade_loss not in ("sample", "mean"):
        raise ArgumentError(f"--cascade_loss must be 'sample' or 'mean', got {model_args.cascade_loss!r}")
    if model_args.cascade_layers is not None:
        try:
            layers = model_args.cascade_overrides().get("cascade_layers")
        except ValueError:
            layers = None
        if not layers:
            raise ArgumentError(
                f"--cascade_layers takes layer numbers such as '2,4', got {model_args.cascade_layers!r}"
            )
        if model_args.use_lora:
            raise ArgumentError("--cascade_layers with --use_lora is not supported: train the cascade heads fully")
    if model_args.cascade_heads_only and not (model_args.cascade_layers and model_args.model_name_or_path):
        raise ArgumentError(
            "--cascade_heads_only trains new cascade heads on a fine-tuned ranker: pass --model_name_or_path <ranker> "
            "and --cascade_layers"
        )
    try:
        check_head_target(model_args.cascade_head_target, model_args.cascade_distill_weight)
    except ValueError as error:
        raise ArgumentError(f"--cascade_head_target / --cascade_distill_weight: {error}") from None
    if model_args.cascade_head_target != "labels" and not model_args.cascade_heads_only:
        raise ArgumentError(
            f"--cascade_head_target {model_args.cascade_head_target} distills the full model into new heads on a "
            "fine-tuned ranker: it needs --cascade_heads_only"
        )


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, AS2TrainingArguments, ExportArguments, HubArguments))
    model_args, data_args, training_args, export_args, hub_args = parse_arguments(parser, argv)
    setup_logging()
    check_arguments(model_args, data_args)
    stale_checkpoints = check_output_dir(training_args)
    push = HubPush.from_args(training_args, hub_args)  # --push_to_hub: checked now, one validated push at the end
    set_seed(training_args.seed)

    # Read and validate every split before anything is written.
    splits = load_splits(data_args)
    contextual = choose_contextual(model_args, splits["train"])
    if model_args.model_name_or_path or model_args.config_name:
        tokenizer = AutoTokenizer.from_pretrained(
            model_args.tokenizer_name or model_args.model_name_or_path or model_args.config_name
        )
        model = load_model(model_args, tokenizer, contextual)
    else:
        model, tokenizer = tiny_default(contextual, model_args.cascade_overrides())
    record_max_length(model.config, data_args.max_length)  # saved with the model: the default when ranking it
    collator = ContextualAS2Collator(
        tokenizer, max_length=data_args.max_length, contextual=contextual, num_token_types=model.config.type_vocab_size
    )
    logger.info(
        "model %s (%s, %d token types), train %d / dev %d / test %d rows",
        type(model).__name__,
        "contextual" if contextual else "pairwise",
        model.config.type_vocab_size,
        *(len(splits[name].dataset) if name in splits else 0 for name in ("train", "validation", "test")),
    )
    if model_args.use_lora:
        model = model_args.add_lora(model)

    tokenized = {name: tokenize_as2(split.dataset, tokenizer) for name, split in splits.items()}
    has_dev = "validation" in tokenized
    if not has_dev:
        without_evaluation(training_args)
    evaluations = RecordEvaluations()  # the dev figures of the final weights, without a second pass
    trainer = Trainer(
        model=model,
        args=training_args,
        data_collator=collator,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized.get("validation"),
        compute_metrics=make_compute_metrics(splits["validation"].dataset["question_id"]) if has_dev else None,
        callbacks=[EarlyStoppingCallback(data_args.early_stopping_patience), evaluations] if has_dev else [],
    )
    resume = training_args.resume_from_checkpoint
    remove_stale_checkpoints(stale_checkpoints, training_args)
    if model_args.cascade_heads_only:  # the cheap step: the heads alone, on cached first-token states
        dev_ids = splits["validation"].dataset["question_id"] if has_dev else None
        train_metrics = train_cascade_heads(
            model,
            collator,
            tokenized["train"],
            tokenized.get("validation"),
            dev_ids,
            training_args,
            target=model_args.cascade_head_target,
            distill_weight=model_args.cascade_distill_weight,
        )
    else:
        train_metrics = trainer.train(resume_from_checkpoint=resume).metrics
    trainer.log_metrics("train", train_metrics)

    results = {"train": train_metrics}
    if has_dev:
        results["dev"] = final_dev_metrics(trainer, evaluations)
        trainer.log_metrics("eval", results["dev"])
    if "test" in tokenized:
        test = splits["test"].dataset
        trainer.compute_metrics = make_compute_metrics(test["question_id"])
        prediction = trainer.predict(tokenized["test"], metric_key_prefix="test")
        results["test"] = prediction.metrics
        trainer.log_metrics("test", prediction.metrics)
        write_ranked_predictions(training_args.output_dir, test, prediction.predictions, model)
    if trainer.is_world_process_zero():
        save_hub_folder(
            trainer.model, tokenizer, training_args.output_dir, model_args, data_args, results, training_args
        )
        write_json_atomic(f"{training_args.output_dir}/all_results.json", results)
        remove_run_checkpoints(training_args)
        if export_args.int8_calibration_pairs:
            calibrate_int8(training_args.output_dir, splits["train"].dataset, export_args.int8_calibration_pairs,
                           training_args.seed, contextual)  # fmt: skip
        if export_args.export_onnx:
            from as2hub.inference.onnx_export import export_onnx

            export_onnx(training_args.output_dir, quantize=export_args.onnx_quantize)
        if push:
            push(training_args.output_dir)
    return results


def calibrate_int8(output_dir, train, pairs: int, seed: int, contextual: bool) -> None:
    """Write the saved ranker's int8 calibration (:meth:`~as2hub.inference.ranking.Ranker.calibrate_int8`) from
    ``pairs`` training rows drawn with ``seed`` (all of them where there are fewer)."""
    import random

    from as2hub.inference.int8 import CALIBRATION_FILE
    from as2hub.inference.ranking import Ranker

    rows = sorted(random.Random(seed).sample(range(len(train)), min(pairs, len(train))))
    picked = train.select(rows)
    contexts = list(picked["context"]) if contextual else None
    ranker = Ranker.from_pretrained(output_dir)
    ranker.calibrate_int8(list(picked["question"]), list(picked["candidate"]), contexts, save_to=output_dir)
    logger.info("int8 calibration: %d training pairs -> %s/%s", len(rows), output_dir, CALIBRATION_FILE)


def cli(argv: list[str] | None = None) -> int:
    """The command line (``as2hub-train``): user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())

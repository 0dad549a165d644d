"""Fine-tune and evaluate :class:`~as2hub.modeling.LongformerWithQEContrastive` with the HF Trainer: answer span,
answer type, supporting sentences and paragraphs, plus the question–evidence contrastive loss of Caciularu et al.
(NAACL 2022). Any ``TrainingArguments`` flag works. Examples::

    # no arguments: a tiny Longformer from scratch on the embedded evidence task (Python's docs), a couple of minutes
    python -m as2hub.run_scripts.run_qe_contrastive

    # HotpotQA distractor with a Longformer checkpoint (the paper's setup: lr 1e-4, 5 epochs, 100 warmup steps)
    python -m as2hub.run_scripts.run_qe_contrastive --model_name_or_path allenai/longformer-base-4096 \\
        --dataset hotpot_train_v1.1.json --validation_file hotpot_dev_distractor_v1.json \\
        --contrastive_weight 0.2 --qe_temperatures 0.2,0.4,0.6 --metric_for_best_model joint_f1 \\
        --learning_rate 1e-4 --num_train_epochs 5 --warmup_steps 100 --gradient_checkpointing \\
        --skip_invalid_examples --output_dir outputs/longformer-hotpotqa

    # WikiQA as an evidence task, MiniLM turned into a Longformer; --contrastive_weight 0 is the baseline
    python -m as2hub.run_scripts.run_qe_contrastive --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 \\
        --dataset wikiqa_distractor --max_position_embeddings 4096 --attention_window 256 --output_dir outputs/qe

``--model_name_or_path`` may be a Longformer (or saved ``longformer_qe``) checkpoint, or a RoBERTa / BERT-family one,
converted by ``LongformerWithQEContrastive.from_short_encoder`` (``--max_position_embeddings``, ``--attention_window``).
Every split is read, validated and encoded before anything is written. The output folder is Hub-ready (config with
``auto_map``, remote code, weights, tokenizer with the markers, run record ``as2hub_run.json``, model card; published
at the end of the run with ``--push_to_hub --hub_model_id namespace/name``, or later with ``as2hub-push``) and holds
``all_results.json``, ``trainer_state.json`` (the logged losses), the predictions of the dev and test sets in the
official HotpotQA format (``dev_predictions.json``, ``test_predictions.json``: ``{"answer": {id: text}, "sp": {id:
[[title, sent_id], ...]}}``) and every sentence's scores (``{dev,test}_sentence_scores.jsonl``: gold label,
supporting-fact probability, QE similarity, raw marker cosine).
"""

import logging
import sys
from dataclasses import dataclass, field

import transformers
from transformers import EarlyStoppingCallback, HfArgumentParser, Trainer, TrainingArguments, set_seed

from as2hub.data_collators.collators.hotpotqa_encoding import HotpotQACollator
from as2hub.data_collators.readers.qe_tasks import load_qe_splits
from as2hub.hub_cards.push import HubArguments, HubPush
from as2hub.hub_cards.run_outputs import save_hub_folder, write_qe_outputs
from as2hub.modeling import LongformerQEConfig
from as2hub.modeling.files import write_json_atomic
from as2hub.modeling.registry import LONGFORMER_QE
from as2hub.run_scripts.arguments import (
    ArgumentError,
    CPUFriendlyArguments,
    LoraArguments,
    OverwriteArguments,
    check_max_length,
    check_output_dir,
    load_config,
    parse_arguments,
    remove_stale_checkpoints,
    run_cli,
    without_evaluation,
)
from as2hub.training.qe_finetuning import (  # noqa: F401  (qe_overrides: re-exported)
    LABEL_NAMES,
    TINY_LONGFORMER,
    attention_window,
    build_qe_model,
    encode_splits,
    logits_preprocessor,
    qe_evaluators,
    qe_overrides,
)


@dataclass
class ModelArguments(LoraArguments):
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Longformer / longformer_qe checkpoint, or a RoBERTa / BERT-family one (converted)."},
    )
    config_name: str | None = field(default=None, metadata={"help": "LongformerQEConfig to build from scratch."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Defaults to the model's."})
    max_position_embeddings: int = field(default=4096, metadata={"help": "Tokens a converted short encoder reads."})
    attention_window: int = field(default=512, metadata={"help": "Local window of a converted short encoder."})
    contrastive_weight: float | None = field(
        default=None, metadata={"help": "λ in (1-λ)·L_QA + λ·L_QE (default 0.2; 0 = the baseline)."}
    )
    qe_similarity: str | None = field(
        default=None, metadata={"help": "projected_cosine (Eq. 3, default), bilinear (Eq. 2), cosine or dot."}
    )
    qe_projection_dim: int | None = field(default=None, metadata={"help": "d, d/2, d/4 or d/8 (default d)."})
    qe_temperatures: str | None = field(
        default=None,
        metadata={
            "help": "τ per question type, comma-separated, or one value for every type (default: 0.2, 0.4, 0.6, "
            "... per type, the paper's grid in order; the paper tunes one τ per type)."
        },
    )
    qe_shared_temperature: bool | None = field(default=None, metadata={"help": "Ablation: one τ for all types."})
    qe_learnable_temperature: bool | None = field(default=None, metadata={"help": "Train τ (log space)."})
    qe_single_projection: bool | None = field(default=None, metadata={"help": "Ablation: one W for all types."})
    qe_wrong_type_negatives: bool | None = field(
        default=None, metadata={"help": "Evidence projected with the other types' W as negatives (default True)."}
    )
    question_types: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated question types (default: span,yes,no for HotpotQA files; the question word "
            "for wikiqa_distractor and embedded)."
        },
    )
    question_type_key: str | None = field(
        default=None, metadata={"help": "Record field naming the type: answer_type or type."}
    )
    marker_init: str = field(default="random", metadata={"help": "New marker embeddings: random (paper) or mean."})
    tokenizer_vocab_size: int = field(default=4000, metadata={"help": "Vocab of a tokenizer trained from scratch."})
    # Longformer: the global-attention projections get adapters too.
    lora_target_modules: str = field(
        default=",".join(LONGFORMER_QE.lora_target_modules), metadata={"help": "Comma-separated module names."}
    )


@dataclass
class DataArguments:
    dataset: str = field(
        default="embedded",
        metadata={
            "help": "A HotpotQA-format train file (JSON / JSONL) or `datasets` path, 'wikiqa_distractor' (WikiQA from "
            "../shared/data/wikiqa or $AS2HUB_WIKIQA_DIR as an evidence task), or 'embedded' (Python's docs)."
        },
    )
    validation_file: str | None = None
    test_file: str | None = None
    num_distractors: int | None = field(
        default=None, metadata={"help": "Distractor passages of the built-in tasks (wikiqa_distractor 9, embedded 2)."}
    )
    dataset_seed: int = field(default=0, metadata={"help": "Seed of the distractor sampling."})
    max_length: int | None = field(default=None, metadata={"help": "Tokens per input (default: the model's)."})
    max_question_length: int = 64
    skip_invalid_examples: bool = field(
        default=False,
        metadata={
            "help": "Skip (log and count) examples with bad supporting facts, an answer not in the context, an "
            "unknown question type, instead of stopping."
        },
    )
    truncated_evidence: str = field(
        default="error",
        metadata={
            "help": "Training examples whose evidence max_length would cut: error, skip or keep. Evaluation "
            "always keeps them (the cut evidence counts as missed)."
        },
    )
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    max_test_samples: int | None = None
    early_stopping_patience: int = field(default=3, metadata={"help": "Evaluations without a better dev metric."})
    sp_threshold: float = field(default=0.5, metadata={"help": "Supporting sentence when its probability >= this."})
    sp_top_n_per_paragraph: int | None = field(default=None, metadata={"help": "At most n facts per paragraph."})
    max_answer_length: int = field(default=30, metadata={"help": "Longest answer span, in tokens."})
    n_best: int = field(default=20, metadata={"help": "Top starts × top ends searched for the span."})


@dataclass
class QETrainingArguments(CPUFriendlyArguments, OverwriteArguments, TrainingArguments):
    """TrainingArguments for long-context QA: the paper's learning rate (1e-4, appendix B.2), clip 1.0, best model by
    dev supporting-fact F1 (defined for every dataset; pass ``--metric_for_best_model joint_f1`` for HotpotQA)."""

    output_dir: str | None = field(default="outputs/qe_contrastive")
    eval_strategy: str = field(default="epoch")
    save_strategy: str = field(default="best")
    load_best_model_at_end: bool = field(default=True)
    metric_for_best_model: str | None = field(default="sp_f1")
    greater_is_better: bool | None = field(default=True)
    save_total_limit: int | None = field(default=2)
    report_to: None | str | list[str] = field(default="none")
    logging_steps: float = field(default=10)
    learning_rate: float = field(default=1e-4)
    per_device_train_batch_size: int = field(default=4)
    per_device_eval_batch_size: int = field(default=4)
    # The encoded datasets hold columns the forward does not name (ids, labels lists); the collator reads them.
    remove_unused_columns: bool = field(default=False)
    label_names: list[str] | None = field(default_factory=lambda: list(LABEL_NAMES))
    max_grad_norm: float = field(default=1.0)


def reference_batch(encoded: dict, tokenizer, window: int, size: int = 2) -> dict:
    """The input the published folder is checked on (``as2hub-push``): the first encoded examples of the evaluation
    (else training) data, collated as in training (markers, global attention mask, index tensors), without labels."""
    features = next(encoded[name][0] for name in ("validation", "test", "train") if name in encoded)
    rows = features.select(range(min(size, len(features)))).to_list()
    return HotpotQACollator(tokenizer, pad_to_multiple_of=window, with_labels=False)(rows)


def check_arguments(model_args: ModelArguments, data_args: DataArguments) -> None:
    """Contradictions between flags, raised before any data or model is loaded (only configs are read)."""
    if model_args.config_name and not model_args.model_name_or_path and not model_args.tokenizer_name:
        raise ArgumentError("--config_name needs --tokenizer_name")
    source = model_args.model_name_or_path
    if source:
        if load_config(source).model_type in ("longformer", LongformerQEConfig.model_type):
            check_max_length(data_args.max_length, source)
        elif data_args.max_length is not None and data_args.max_length > model_args.max_position_embeddings:
            raise ArgumentError(
                f"--max_length {data_args.max_length} is longer than the Longformer converted from {source} reads "
                f"(--max_position_embeddings {model_args.max_position_embeddings}): raise --max_position_embeddings "
                "or lower --max_length"
            )
    elif model_args.config_name:
        check_max_length(data_args.max_length, model_args.config_name)
    elif data_args.max_length is not None and data_args.max_length > TINY_LONGFORMER["max_position_embeddings"] - 2:
        raise ArgumentError(
            f"--max_length {data_args.max_length} is longer than the tiny default Longformer reads "
            f"({TINY_LONGFORMER['max_position_embeddings'] - 2} tokens): lower it or pass --model_name_or_path"
        )


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, QETrainingArguments, HubArguments))
    model_args, data_args, training_args, hub_args = parse_arguments(parser, argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity_warning()
    check_arguments(model_args, data_args)
    stale_checkpoints = check_output_dir(training_args)
    push = HubPush.from_args(training_args, hub_args)  # --push_to_hub: checked now, one validated push at the end
    set_seed(training_args.seed)

    # Read, validate and encode every split before anything is written.
    splits = load_qe_splits(data_args)
    model, tokenizer = build_qe_model(model_args, data_args, splits)
    config, window = model.config, attention_window(model.config)
    encoded, max_length = encode_splits(splits, tokenizer, model, data_args)
    model = model_args.add_lora(model)  # unchanged without --use_lora

    has_dev = "validation" in encoded
    if not has_dev:
        without_evaluation(training_args)
    evaluators = qe_evaluators(encoded, splits, config, data_args)
    trainer = Trainer(
        model=model,
        args=training_args,
        data_collator=HotpotQACollator(tokenizer, pad_to_multiple_of=window),
        train_dataset=encoded["train"][0],
        eval_dataset=encoded["validation"][0] if has_dev else None,
        compute_metrics=evaluators.get("validation"),
        preprocess_logits_for_metrics=logits_preprocessor(data_args),
        callbacks=[EarlyStoppingCallback(data_args.early_stopping_patience)] if has_dev else [],
    )
    remove_stale_checkpoints(stale_checkpoints, training_args)
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.log_metrics("train", train_result.metrics)

    results = {
        "train": train_result.metrics,
        "data": {name: {"source": split.source, **split.stats} for name, split in splits.items()},
        "encoding": {name: stats.as_dict() for name, (_, _, stats) in encoded.items()},
    }
    if has_dev:
        results["dev"] = trainer.evaluate()
        trainer.log_metrics("eval", results["dev"])
    if "test" in encoded:
        trainer.compute_metrics = evaluators["test"]
        prediction = trainer.predict(encoded["test"][0], metric_key_prefix="test")
        results["test"] = prediction.metrics
        trainer.log_metrics("test", prediction.metrics)
    if trainer.is_world_process_zero():
        output_dir = training_args.output_dir
        save_hub_folder(
            trainer.model,
            tokenizer,
            output_dir,
            model_args,
            data_args,
            results,
            training_args,
            family="longformer_qe",
            auto_class="AutoModelForQuestionAnswering",
            batch=reference_batch(encoded, tokenizer, window),
            extras={"max_length": max_length, "num_distractors": splits["train"].stats.get("num_distractors")},
        )
        write_qe_outputs(output_dir, evaluators, trainer.state)  # predictions, sentence scores, trainer_state.json
        write_json_atomic(f"{output_dir}/all_results.json", results)
        if push:
            push(output_dir)
    return results


def cli(argv: list[str] | None = None) -> int:
    """The command line: user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())

"""Fine-tune and evaluate a joint multi-candidate model (Di Liello et al., NAACL 2022) with the HF Trainer.

Answer sentence selection from every source ``run_as2.py`` reads (``wikiqa``, ``embedded``, JSONL/CSV/TSV files,
``datasets`` paths), with the candidates of a question grouped into the k slots:

- ``--grouping all`` (the paper's table 1): every candidate, in groups of k (empty slots in the last group);
- ``--grouping top_k`` (table 2, the cascade): the top k of a pairwise model, from a column of the data files
  (``--score_column``) or a saved pairwise ranker (``--pairwise_model``, a ``run_as2.py --pairwise`` folder). In
  evaluation the joint model re-ranks the top k and the other candidates keep the pairwise order below them.

Candidates are shuffled within each training group (seeded) and kept in order in evaluation; the best checkpoint is
selected on dev MAP. Fact verification (``--task fv``) reads JSONL ``{"claim", "evidences": [...], "label"}`` (the
first k evidences) and selects on dev label accuracy. Any ``TrainingArguments`` flag works. Examples::

    python -m as2hub.run_scripts.run_joint    # a tiny joint RoBERTa from scratch on the embedded task (a demo)

    python -m as2hub.run_scripts.run_joint --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 \\
        --dataset wikiqa --head AE_k --output_dir outputs/joint-minilm --learning_rate 2e-5 --num_train_epochs 3

    python -m as2hub.run_scripts.run_joint --model_name_or_path outputs/mspp --dataset wikiqa --grouping top_k \\
        --pairwise_model outputs/pairwise --output_dir outputs/cascade

    python -m as2hub.run_scripts.run_joint --task fv --head AE_1 --model_name_or_path FacebookAI/roberta-base \\
        --dataset fever_train.jsonl --validation_file fever_dev.jsonl --output_dir outputs/fever

The output folder is Hub-ready (config with auto_map and ``custom_pipelines``, remote code, safetensors, tokenizer,
run record ``as2hub_run.json`` and model card), with ``all_results.json`` and ``test_predictions.jsonl`` (AS2: every
test question with its candidates ranked, as ``run_as2.py`` writes them, plus ``stage`` in the cascade; FV: every
claim with its label probabilities). ``--push_to_hub --hub_model_id namespace/name`` publishes it at the end of the run
(``as2hub-push OUTPUT_DIR namespace/name`` does the same for a finished run; ``--hub_push_adapter`` publishes a LoRA
run's adapter instead of the merged model).
"""

import sys
from dataclasses import dataclass, field

from transformers import EarlyStoppingCallback, HfArgumentParser, Trainer, set_seed

from as2hub.data_collators import FEVER_LABELS, GROUPINGS, JointCollator
from as2hub.data_collators.readers.as2_splits import load_splits
from as2hub.hub_cards.push import HubArguments, HubPush
from as2hub.hub_cards.run_outputs import save_hub_folder, write_joint_predictions
from as2hub.hub_cards.run_record import REFERENCE_PAIRS
from as2hub.modeling.files import write_json_atomic
from as2hub.modeling.joint_multicandidate.configuration_joint_multicandidate import CANDIDATE_HEADS, HEADS
from as2hub.run_scripts.arguments import (
    TINY_ROBERTA,
    ArgumentError,
    AS2TrainingArguments,
    LoraArguments,
    check_output_dir,
    check_slot_budget,
    first_token_attention_field,
    parse_arguments,
    remove_run_checkpoints,
    remove_stale_checkpoints,
    run_cli,
    setup_logging,
    without_evaluation,
)
from as2hub.training.evaluations import RecordEvaluations, final_dev_metrics
from as2hub.training.joint_finetuning import (
    group_splits,
    joint_metrics,
    load_fv_splits,
    load_model,
    load_tokenizer,
    pairwise_scores,
)

TASKS = ("as2", "fv")


@dataclass
class JointModelArguments(LoraArguments):
    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "RoBERTa, BERT-family (MiniLM) or ELECTRA checkpoint, or a joint / MSPP pre-trained folder."},
    )
    config_name: str | None = field(
        default=None, metadata={"help": "Config to build a model from scratch (tokenizer: --tokenizer_name)."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Defaults to the model's."})
    head: str | None = field(
        default=None,
        metadata={"help": f"One of {HEADS}. Default: AE_k for AS2, AE_1 for fact verification."},
    )
    num_candidates: int = field(default=5, metadata={"help": "k: candidate slots per input (the paper: 5)."})
    slot_length: int = field(default=64, metadata={"help": "L: tokens per slot (the paper: 64)."})
    slot_positions: str = field(
        default="global", metadata={"help": "'global' (0..(k+1)L-1, the paper) or 'per_slot' (restart per slot)."}
    )
    first_token_attention: str | None = first_token_attention_field()
    token_type_init: str = field(default="scratch", metadata={"help": "Init of the token-type rows grown to k+1."})
    unpadded: bool | None = field(
        default=None,
        metadata={
            "help": "Training steps run the encoder's dense layers on the slots' filled tokens only, their padding and "
            "empty slots left out (true or false; config.unpadded). Same weights, same losses; evaluation and "
            "scoring keep the padded pass. About 3x faster on the CPU (half of a slot is padding: benchmarks/README.md, "
            "'Unpadded MSPP pre-training steps'). Default: the checkpoint's setting (an MSPP folder of run_pretrain.py "
            "keeps the one it was pre-trained with; a stock checkpoint: off)."
        },
    )


@dataclass
class JointDataArguments:
    task: str = field(
        default="as2", metadata={"help": "'as2' (answer sentence selection) or 'fv' (fact verification)."}
    )
    dataset: str = field(
        default="embedded",
        metadata={
            "help": "AS2: 'wikiqa', 'embedded' (built from Python's docs, runs anywhere), or a train file / `datasets` "
            "path. FV: a train JSONL file."
        },
    )
    validation_file: str | None = None
    test_file: str | None = None
    clean_eval: bool = field(
        default=True, metadata={"help": "AS2: drop dev/test questions with only correct or only wrong candidates."}
    )
    grouping: str = field(default="all", metadata={"help": f"AS2 slot grouping: one of {GROUPINGS}."})
    score_column: str | None = field(
        default=None, metadata={"help": "top_k: a column of the data files holding pairwise scores."}
    )
    pairwise_model: str | None = field(
        default=None,
        metadata={"help": "top_k: a saved as2hub ranker (a run_as2.py output folder) that scores every candidate."},
    )
    pairwise_max_length: int | None = field(
        default=None,
        metadata={"help": "top_k: tokens per pair for --pairwise_model (default: its trained max length)."},
    )
    pairwise_batch_size: int = 64
    fv_labels: str = field(
        default=",".join(FEVER_LABELS), metadata={"help": "FV label names, comma-separated, in label-index order."}
    )
    early_stopping_patience: int = field(default=5, metadata={"help": "Evaluations without a better dev metric."})
    max_train_samples: int | None = field(default=None, metadata={"help": "AS2: rows (whole questions); FV: claims."})
    max_eval_samples: int | None = None


@dataclass
class JointTrainingArguments(AS2TrainingArguments):
    """``run_as2.py``'s TrainingArguments (the papers' fine-tuning defaults); the best checkpoint is selected on dev
    MAP (AS2) or dev label accuracy (FV)."""

    output_dir: str | None = field(default="outputs/joint")


# ---------------------------------------------------------------------------------------------------------- checks


def check_arguments(model_args: JointModelArguments, data_args: JointDataArguments) -> None:
    """Argument errors, raised before any data is read or anything is written."""
    if data_args.task not in TASKS:
        raise ArgumentError(f"--task must be one of {TASKS}, got {data_args.task!r}")
    if model_args.head is None:
        model_args.head = "AE_k" if data_args.task == "as2" else "AE_1"
    if model_args.head not in HEADS:
        raise ArgumentError(f"--head must be one of {HEADS}, got {model_args.head!r}")
    ranking = model_args.head in CANDIDATE_HEADS
    if data_args.task == "as2" and not ranking:
        raise ArgumentError(
            f"answer sentence selection ranks candidates: use --head IE_k or AE_k, not {model_args.head}"
        )
    if data_args.task == "fv" and ranking:
        raise ArgumentError(
            f"fact verification predicts one label per claim: use --head IE_1 or AE_1, not {model_args.head}"
        )
    if model_args.num_candidates < 1:
        raise ArgumentError(f"--num_candidates (k) must be >= 1, got {model_args.num_candidates}")
    if data_args.grouping not in GROUPINGS:
        raise ArgumentError(f"--grouping must be one of {GROUPINGS}, got {data_args.grouping!r}")
    if data_args.task == "fv" and data_args.grouping != "all":
        raise ArgumentError("--grouping applies to AS2; fact verification reads the first k evidences of each claim")
    if data_args.score_column and data_args.pairwise_model:
        raise ArgumentError("pass --score_column or --pairwise_model, not both")
    check_slot_budget(
        model_args.num_candidates,
        model_args.slot_length,
        model_args.slot_positions,
        model_args.model_name_or_path or model_args.config_name,
        default_positions=TINY_ROBERTA["max_position_embeddings"] - 2,  # the tiny RoBERTa's pad offset
    )


# ---------------------------------------------------------------------------------------------------------- outputs


def reference_batch(collator: JointCollator, as2: bool) -> dict:
    """The fixed input the published folder is checked on (``as2hub-push``): two questions (claims) in the slot
    layout, one with every slot filled (up to k) and one with a single candidate (empty slots), without labels."""
    texts = [candidate for _, candidate in REFERENCE_PAIRS] * collator.num_candidates
    query, candidates = ("question", "candidates") if as2 else ("claim", "evidences")
    features = [
        {query: REFERENCE_PAIRS[0][0], candidates: texts[: collator.num_candidates]},
        {query: REFERENCE_PAIRS[1][0], candidates: texts[1:2]},
    ]
    batch = collator(features)
    return {name: batch[name] for name in ("input_ids", "attention_mask", "token_type_ids") if name in batch}


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((JointModelArguments, JointDataArguments, JointTrainingArguments, HubArguments))
    model_args, data_args, training_args, hub_args = parse_arguments(parser, argv)
    setup_logging()
    push = HubPush.from_args(training_args, hub_args)  # --push_to_hub: checked now, one validated push at the end
    set_seed(training_args.seed)
    check_arguments(model_args, data_args)
    stale_checkpoints = check_output_dir(training_args)
    as2 = data_args.task == "as2"
    if not as2 and training_args.metric_for_best_model == "map":
        training_args.metric_for_best_model = "accuracy"

    # Read and validate every split, the model and the slot layout before anything is written.
    splits = load_splits(data_args) if as2 else load_fv_splits(data_args)
    label_names = None if as2 else splits["train"].labels
    if as2 and data_args.grouping == "top_k" and not (data_args.score_column or data_args.pairwise_model):
        pairwise_scores(data_args, splits)  # raises: no scores
    tokenizer = load_tokenizer(model_args)
    model = load_model(model_args, tokenizer, label_names)
    collator = JointCollator.for_model(tokenizer, model)
    scores = pairwise_scores(data_args, splits) if as2 else None
    groups = group_splits(splits, model, as2, data_args.grouping, scores, training_args.seed)
    model = model_args.add_lora(model)  # unchanged without --use_lora

    has_dev = "validation" in groups
    if not has_dev:
        without_evaluation(training_args)
    evaluations = RecordEvaluations()  # the dev figures of the final weights, without a second pass
    trainer = Trainer(
        model=model,
        args=training_args,
        data_collator=collator,
        train_dataset=groups["train"],
        eval_dataset=groups.get("validation"),
        compute_metrics=joint_metrics("validation", splits, groups, scores, label_names) if has_dev else None,
        callbacks=[EarlyStoppingCallback(data_args.early_stopping_patience), evaluations] if has_dev else [],
    )
    remove_stale_checkpoints(stale_checkpoints, training_args)
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.log_metrics("train", train_result.metrics)

    results = {"train": train_result.metrics}
    if has_dev:
        results["dev"] = final_dev_metrics(trainer, evaluations)
        trainer.log_metrics("eval", results["dev"])
    if "test" in groups:
        trainer.compute_metrics = joint_metrics("test", splits, groups, scores, label_names)
        prediction = trainer.predict(groups["test"], metric_key_prefix="test")
        results["test"] = prediction.metrics
        trainer.log_metrics("test", prediction.metrics)
        write_joint_predictions(
            training_args.output_dir,
            splits["test"].dataset,
            groups["test"],
            prediction.predictions,
            trainer.model,
            pairwise=scores["test"] if scores else None,
            label_names=label_names,
        )
    if trainer.is_world_process_zero():
        save_hub_folder(
            trainer.model,
            tokenizer,
            training_args.output_dir,
            model_args,
            data_args,
            results,
            training_args,
            family="joint_multicandidate" if as2 else "joint_fact_verification",
            auto_class="AutoModel",
            batch=reference_batch(collator, as2),
        )
        write_json_atomic(f"{training_args.output_dir}/all_results.json", results)
        remove_run_checkpoints(training_args)
        if push:
            push(training_args.output_dir)
    return results


def cli(argv: list[str] | None = None) -> int:
    """The command line: user errors end in one line on stderr and exit code 2."""
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(cli())

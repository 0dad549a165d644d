"""Structure-aware continued pre-training (SSP, SP, PSD and the contextual SDC, DPC, DSLC) with the HF Trainer.

With no arguments it pre-trains a tiny RoBERTa with DSLC on the embedded corpus (Python's own docs), with a byte-level
BPE trained on that corpus, in a few minutes on two CPU cores, and saves a folder that ``run_as2.py`` fine-tunes::

    python -m as2hub.run_scripts.run_pretrain
    python -m as2hub.run_scripts.run_as2 --model_name_or_path outputs/pretrain

Continuing a real checkpoint (any ``TrainingArguments`` flag works)::

    python -m as2hub.run_scripts.run_pretrain --model_type roberta --model_name_or_path FacebookAI/roberta-base \\
        --objective sdc --corpus "data/wiki/*.txt" --max_steps 400000 --learning_rate 1e-4 --warmup_steps 10000 \\
        --per_device_train_batch_size 64 --gradient_accumulation_steps 8 --bf16 --dataloader_num_workers 8

    python -m as2hub.run_scripts.run_pretrain --model_type electra --model_name_or_path google/electra-base-discriminator \\
        --generator_name_or_path google/electra-base-generator --objective dslc --corpus wikipedia --text_field text

Joint multi-candidate models (Di Liello et al., NAACL 2022) pre-train with MLM + MSPP (a sentence and k candidates in
one pass; which candidates come from its paragraph?) and are then fine-tuned by ``run_joint.py``::

    python -m as2hub.run_scripts.run_pretrain --objective mspp --joint_head AE_k --num_candidates 5 --slot_length 64 \
        --model_type bert --model_name_or_path sentence-transformers/all-MiniLM-L6-v2 --corpus "wiki/*.txt"
    python -m as2hub.run_scripts.run_joint --model_name_or_path outputs/pretrain --head AE_k --dataset wikiqa

Examples are generated on the fly by default (fresh negatives every epoch, split across dataloader workers; every rank
takes its slice of each global batch); ``--materialize`` generates them once with ``datasets.map`` (``--save_examples
DIR`` keeps Parquet shards, ``--examples_dir DIR`` streams them back); ``--corpus_streaming`` reads a ``datasets``
corpus with ``streaming=True``. Several processes (run_scripts/README.md, "Scaling out")::

    torchrun --nproc_per_node 8 -m as2hub.run_scripts.run_pretrain --per_device_train_batch_size 64 \
        --gradient_accumulation_steps 8 ...          # 64 x 8 x 8 = 4,096 examples per step, the papers' batch

``--resume_from_checkpoint`` continues a streaming run exactly (``as2hub_stream_state.json`` in each checkpoint, see
:mod:`as2hub.data_collators.objectives.stream_resume`); SIGTERM saves a checkpoint and exits with status 143.
A held-out slice of the documents gives the evaluation set: MLM loss and sentence-level accuracy / AUC.
``--push_to_hub --hub_model_id namespace/name`` publishes the result at the end of the run (or later:
``as2hub-push OUTPUT_DIR namespace/name``); ``run_as2.py --model_name_or_path namespace/name`` fine-tunes it.
"""

import sys
from dataclasses import dataclass, field

# Re-exported for the code that reaches them through this module: AutoTokenizer, configure_streaming, examples_stream.
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments, set_seed  # noqa: F401

from as2hub.data_collators import OBJECTIVES, Objective, resolve_objective
from as2hub.data_collators.objectives.stream_resume import GracefulStop
from as2hub.hub_cards.push import HubArguments, HubPush
from as2hub.hub_cards.run_outputs import save_pretraining_folder
from as2hub.run_scripts.arguments import (
    TINY_ROBERTA,
    ArgumentError,
    CPUFriendlyArguments,
    OverwriteArguments,
    check_max_length,
    check_output_dir,
    check_slot_budget,
    first_token_attention_field,
    parse_arguments,
    remove_stale_checkpoints,
    run_cli,
    setup_logging,
)
from as2hub.training.pretraining_data import (  # noqa: F401
    configure_streaming,
    examples_stream,
    generation_arguments,
    held_out_examples,
    load_corpus,
    load_streaming_corpus,
    pretraining_collator,
    reference_batch,
    split_documents,
    streaming_sample,
    tracks_positions,
    training_examples,
)
from as2hub.training.pretraining_models import build_model, build_tokenizer, default_unpadded
from as2hub.training.resume import enable_exact_resume, interruption, train_or_keep_finished
from as2hub.training.trainers import SSPTrainer


# --help lists each dataclass under its own heading, as2hub's first and the Trainer's ~600 lines last (HfArgumentParser
# reads ``_argument_group_name``).
@dataclass
class PretrainModelArguments:
    _argument_group_name = "model (as2hub)"

    model_type: str = field(default="roberta", metadata={"help": "roberta, electra or bert (MiniLM and friends)."})
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Checkpoint to continue (for ELECTRA: the discriminator)."}
    )
    config_name: str | None = field(default=None, metadata={"help": "Config to pre-train from scratch."})
    tokenizer_name: str | None = None
    generator_name_or_path: str | None = field(default=None, metadata={"help": "ELECTRA generator checkpoint."})
    generator_size_ratio: float = field(default=1 / 3, metadata={"help": "ELECTRA generator size w/o checkpoint."})
    mlm_weight: float = 1.0
    cls_weight: float = 1.0
    rtd_weight: float = 50.0
    token_type_init: str = field(
        default="scratch",
        metadata={
            "help": "Init of the token-type table when a checkpoint's is grown for triplets (3 segments): 'scratch' "
            "(keep the pretrained rows, draw the new one), 'scratch_all' (draw the whole table anew: the paper's "
            "wording) or 'copy' (new rows copy the last pretrained row)."
        },
    )
    tokenizer_vocab_size: int = field(default=4000, metadata={"help": "Vocab of a tokenizer trained from scratch."})
    joint_head: str = field(
        default="AE_k", metadata={"help": "--objective mspp: the joint model's head, IE_k or AE_k (the paper: both)."}
    )
    num_candidates: int = field(default=5, metadata={"help": "--objective mspp: k, candidate slots per input."})
    slot_length: int = field(default=64, metadata={"help": "--objective mspp: L, tokens per slot."})
    slot_positions: str = field(
        default="global", metadata={"help": "--objective mspp: 'global' positions (the paper) or 'per_slot'."}
    )
    first_token_attention: str | None = first_token_attention_field("--objective mspp: ")
    unpadded: bool | None = field(
        default=None,
        metadata={
            "help": "Training steps run the encoder's dense layers (QKV, output projection, feed-forward) on the real "
            "tokens only, padding left out (true or false). Same weights, same losses; saved in the config (config.unpadded); "
            "the held-out evaluation takes it too (the same figures); scoring and export keep the padded pass. "
            "Default: on (faster on the CPU and on an NVIDIA H200: "
            "benchmarks/README.md, 'Unpadded pre-training steps')."
        },
    )


@dataclass
class PretrainDataArguments:
    _argument_group_name = "corpus and objective (as2hub)"

    objective: str = field(default="dslc", metadata={"help": f"One of {', '.join(OBJECTIVES)}."})
    corpus: str | None = field(
        default=None,
        metadata={"help": "Text files (folder/glob), JSONL, or a `datasets` name/path; default: Python's docs."},
    )
    text_field: str = "text"
    paragraph_separator: str = field(default=r"\n[ \t]*\n", metadata={"help": r"Regex; news corpora: '\n'."})
    document_separator: str | None = field(default=None, metadata={"help": "Marker line between documents."})
    min_sentence_chars: int = 20
    min_paragraph_chars: int = 60
    min_document_chars: int = 200
    streaming: bool = field(default=True, metadata={"help": "Generate examples on the fly (fresh every epoch)."})
    materialize: bool = field(default=False, metadata={"help": "Generate once with datasets.map instead."})
    save_examples: str | None = field(default=None, metadata={"help": "With --materialize: save shards here."})
    save_format: str = field(
        default="parquet", metadata={"help": "--save_examples format: 'parquet' (part-*.parquet) or 'arrow'."}
    )
    save_num_shards: int | None = field(
        default=None, metadata={"help": "--save_examples shards (default: --preprocessing_num_workers, or 1)."}
    )
    examples_dir: str | None = field(
        default=None,
        metadata={
            "help": "Train by streaming examples saved by --materialize --save_examples (Parquet or Arrow shards) "
            "instead of generating them; --corpus still gives the held-out documents."
        },
    )
    shuffle_buffer: int = field(default=10_000, metadata={"help": "--examples_dir: shuffle buffer (examples)."})
    corpus_streaming: bool = field(
        default=False,
        metadata={
            "help": "Read --corpus (a `datasets` id, or JSONL / text / Parquet files) with streaming=True: documents "
            "are split and examples generated on the fly, nothing is loaded up front. The first "
            "--validation_documents documents are held out."
        },
    )
    validation_documents: int = field(
        default=200, metadata={"help": "--corpus_streaming: documents held out (from the start of the stream)."}
    )
    documents_per_batch: int = field(default=16, metadata={"help": "Documents per batch (easy negatives)."})
    validation_fraction: float = field(default=0.2, metadata={"help": "Held-out documents for evaluation."})
    eval_passes: int = field(default=10, metadata={"help": "Sampling passes over the held-out documents."})
    max_eval_samples: int | None = field(
        default=None,
        metadata={
            "help": "For quicker evaluations or debugging: keep only the first held-out examples (default: all)."
        },
    )
    max_length: int | None = field(default=None, metadata={"help": "Default: 128 (SSP, triplets), 256 (SP, PSD)."})
    mspp_positives: int = field(default=1, metadata={"help": "MSPP: candidates from the anchor's paragraph (k+)."})
    mspp_hard_negatives: int = field(
        default=2,
        metadata={"help": "MSPP: candidates from other paragraphs of its document (k_hard); k_easy = the rest."},
    )
    mlm_probability: float = 0.15
    whole_word_mask: bool = False
    preprocessing_num_workers: int | None = None
    exact_resume: bool = field(
        default=True,
        metadata={
            "help": "Streaming: track stream positions so that --resume_from_checkpoint continues exactly (and seed "
            "each batch's masking from them); false: Trainer's approximate batch skipping."
        },
    )


@dataclass
class PretrainTrainingArguments(CPUFriendlyArguments, OverwriteArguments, TrainingArguments):
    """TrainingArguments whose defaults run the tiny demo in a few minutes on CPU."""

    _argument_group_name = "training (transformers.TrainingArguments; defaults: the tiny demo on a CPU)"

    output_dir: str | None = field(default="outputs/pretrain")
    max_steps: int = field(default=1500)
    learning_rate: float = field(default=1e-3)
    warmup_steps: float = field(default=0.06)
    weight_decay: float = field(default=0.01)
    per_device_train_batch_size: int = field(default=32)
    per_device_eval_batch_size: int = field(default=64)
    eval_strategy: str = field(default="steps")
    eval_steps: float | None = field(default=250)
    save_steps: float = field(default=500)
    save_total_limit: int | None = field(default=2)
    logging_steps: float = field(default=20)
    report_to: None | str | list[str] = field(default="none")
    # The collator reads text columns the model's forward does not name.
    remove_unused_columns: bool = field(default=False)


def check_arguments(model_args: PretrainModelArguments, data_args: PretrainDataArguments) -> Objective:
    """The resolved ``--objective`` (the one place its string is read: the rest asks the ``Objective``); the input
    length (or, for MSPP, the (k + 1) slots of L tokens) checked against the model's positions. Only configs are
    read."""
    try:
        objective = resolve_objective(data_args.objective)
    except ValueError:
        raise ArgumentError(
            f"unknown --objective {data_args.objective!r}: use one of {', '.join(OBJECTIVES)}"
        ) from None
    source = model_args.model_name_or_path or model_args.config_name
    if objective.joint:  # MSPP inputs are (k + 1) slots of L tokens
        tiny_positions = TINY_ROBERTA["max_position_embeddings"] - 2  # the tiny RoBERTa's pad offset
        check_slot_budget(
            model_args.num_candidates, model_args.slot_length, model_args.slot_positions, source, tiny_positions
        )
    else:
        data_args.max_length = check_max_length(data_args.max_length, source, default=objective.default_max_length)
    return objective


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser(
        (PretrainModelArguments, PretrainDataArguments, HubArguments, PretrainTrainingArguments),
        usage="python -m as2hub.run_scripts.run_pretrain [-h] [--objective OBJECTIVE] [--corpus CORPUS] [FLAG VALUE ...]",
        description=__doc__.split("\n\n")[0] + " as2hub's flags come first; every TrainingArguments flag follows.",
    )
    model_args, data_args, hub_args, training_args = parse_arguments(parser, argv)
    setup_logging()
    push = HubPush.from_args(training_args, hub_args)  # --push_to_hub: checked now, one validated push at the end
    objective = check_arguments(model_args, data_args)
    stale_checkpoints = check_output_dir(training_args)
    set_seed(training_args.seed)

    if data_args.corpus_streaming:
        train_documents, eval_documents = load_streaming_corpus(data_args)
        documents = streaming_sample(train_documents, eval_documents)  # what a new tokenizer is trained on
    else:
        documents = load_corpus(data_args)
        train_documents, eval_documents = split_documents(documents, data_args.validation_fraction, training_args.seed)
    tokenizer = build_tokenizer(model_args, documents)
    model_args.unpadded = default_unpadded(model_args.unpadded, training_args.device)
    model = build_model(model_args, tokenizer, objective)
    collator = pretraining_collator(data_args, tokenizer, model, objective, compiled=training_args.torch_compile)
    generation = generation_arguments(data_args, training_args.seed, model, objective)
    train_dataset, collator, dispatching = training_examples(
        data_args, training_args, train_documents, objective, generation, collator
    )
    eval_dataset = held_out_examples(
        eval_documents, objective, generation, data_args.eval_passes, data_args.max_eval_samples
    )
    if eval_dataset is None:
        training_args.eval_strategy = "no"

    stop = GracefulStop()
    trainer = SSPTrainer(
        model=model,
        args=training_args,
        data_collator=collator,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        callbacks=[stop],
    )
    if tracks_positions(data_args):
        enable_exact_resume(trainer, train_dataset, training_args, dispatching)
    resume = training_args.resume_from_checkpoint
    results = {}
    if eval_dataset is not None and not resume:
        results["before"] = trainer.evaluate(metric_key_prefix="before")
    remove_stale_checkpoints(stale_checkpoints, training_args)
    results["train"] = train_or_keep_finished(trainer, resume, training_args.max_steps)
    interrupted = interruption(stop, trainer, training_args.output_dir)
    if interrupted:
        results["interrupted"] = interrupted
        return results
    if eval_dataset is not None:
        results["eval"] = trainer.evaluate()
        trainer.log_metrics("eval", results["eval"])
    if trainer.is_world_process_zero():
        arguments = {"model": model_args, "data": data_args, "training": training_args}
        batch = reference_batch(collator, train_dataset) if objective.joint else None
        save_pretraining_folder(training_args.output_dir, trainer, model, tokenizer, arguments, results, batch)
        if push:
            push(training_args.output_dir)
    return results


def cli(argv: list[str] | None = None) -> int:
    """The command line: user errors end in one line on stderr and exit code 2; a run stopped by SIGTERM (after
    saving its checkpoint) exits with 143 = 128 + SIGTERM, so a scheduler sees a pre-emption."""
    return run_cli(lambda args: 143 if "interrupted" in main(args) else 0, argv)


if __name__ == "__main__":
    sys.exit(cli())

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
:mod:`as2hub.data_collators.stream_resume`); SIGTERM saves a checkpoint and exits with status 143.
A held-out slice of the documents gives the evaluation set: MLM loss and sentence-level accuracy / AUC.
``--push_to_hub --hub_model_id namespace/name`` publishes the result at the end of the run (or later:
``as2hub-push OUTPUT_DIR namespace/name``); ``run_as2.py --model_name_or_path namespace/name`` fine-tunes it.
"""

import itertools
import json
import logging
import os
import sys
from dataclasses import dataclass, field

import datasets
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments, set_seed

from as2hub.data_collators import (
    OBJECTIVES,
    CorpusConfig,
    CorpusError,
    JointCollator,
    PretrainingCollator,
    StructurePretrainingIterableDataset,
    generate_pretraining_dataset,
    load_documents,
    resolve_objective,
)
from as2hub.data_collators.stream_resume import GracefulStop, PositionTrackingCollator, prepare_exact_resume
from as2hub.data_collators.tokenizer_training import train_corpus_tokenizer
from as2hub.hub_cards.push import HubArguments, HubPush
from as2hub.hub_cards.run_record import component, record_run
from as2hub.modeling.files import staged_folder, write_json_atomic
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
from as2hub.training.pretraining_models import build_model
from as2hub.training.trainers import SSPTrainer

logger = logging.getLogger("as2hub.run_pretrain")

TOKENIZER_STYLE = {"roberta": "roberta", "bert": "bert", "electra": "bert"}


@dataclass
class PretrainModelArguments:
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


@dataclass
class PretrainDataArguments:
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


def corpus_config(data_args: PretrainDataArguments) -> CorpusConfig:
    """The corpus filters and separators of the command line."""
    return CorpusConfig(
        min_sentence_chars=data_args.min_sentence_chars,
        min_paragraph_chars=data_args.min_paragraph_chars,
        min_document_chars=data_args.min_document_chars,
        paragraph_separator=data_args.paragraph_separator,
        document_separator=data_args.document_separator,
        text_field=data_args.text_field,
    )


def load_corpus(data_args: PretrainDataArguments):
    config = corpus_config(data_args)
    source = data_args.corpus
    if source is not None and not _looks_like_files(source):
        source = datasets.load_dataset(source, split="train")
    documents, stats = load_documents(source, config)
    logger.info("corpus: %d documents (%s)", len(documents), stats.summary())
    return documents


_STREAMING_BUILDERS = {".jsonl": "json", ".json": "json", ".txt": "text", ".parquet": "parquet", ".csv": "csv"}


def load_streaming_corpus(data_args: PretrainDataArguments):
    """``--corpus_streaming``: (training documents as a lazy ``datasets.IterableDataset``, held-out documents as a list).

    The held-out documents are the first ``--validation_documents`` of the stream: the same set whatever the number of
    processes or dataloader workers; training skips them.
    """
    from as2hub.data_collators import documents_from_dataset

    source = data_args.corpus
    if source is None:
        raise ValueError("--corpus_streaming needs --corpus (a `datasets` id or JSONL / text / Parquet files)")
    if _looks_like_files(source):
        suffix = next((s for s in _STREAMING_BUILDERS if source.rstrip("*").endswith(s)), None)
        if suffix is None:
            raise ValueError(
                f"--corpus_streaming: cannot tell the format of {source!r} ({', '.join(_STREAMING_BUILDERS)})"
            )
        stream = datasets.load_dataset(_STREAMING_BUILDERS[suffix], data_files=source, split="train", streaming=True)
    else:
        stream = datasets.load_dataset(source, split="train", streaming=True)
    config = corpus_config(data_args)
    documents = documents_from_dataset(stream, config)
    held_out = [row["paragraphs"] for row in itertools.islice(documents, data_args.validation_documents)]
    logger.info("streaming corpus %s: %d held-out documents from the start of the stream", source, len(held_out))
    return documents.skip(len(held_out)), (held_out if len(held_out) >= 2 else None)


def examples_stream(data_args: PretrainDataArguments, seed: int):
    """``--examples_dir``: the saved example shards as a shuffled ``datasets.IterableDataset`` (one shard per file)."""
    from pathlib import Path

    folder = Path(data_args.examples_dir)
    parquet = sorted(str(path) for path in folder.glob("*.parquet"))
    if parquet:
        stream = datasets.load_dataset("parquet", data_files=parquet, split="train", streaming=True)
    elif (folder / "dataset_info.json").exists():
        saved = datasets.load_from_disk(str(folder))
        stream = saved.to_iterable_dataset(num_shards=max(1, len(saved.cache_files)))
    else:
        raise ValueError(f"--examples_dir {folder}: no part-*.parquet files and no saved Arrow dataset")
    logger.info("streaming examples from %s (%d shards)", folder, stream.num_shards)
    return stream.shuffle(seed=seed, buffer_size=data_args.shuffle_buffer)


def _looks_like_files(source: str) -> bool:
    from pathlib import Path

    return any(ch in source for ch in "*?[") or Path(source).exists()


def split_documents(documents, fraction: float, seed: int):
    if fraction <= 0 or len(documents) < 4:
        return documents, None
    held_out = max(2, round(len(documents) * fraction))  # at least two: easy negatives need another document
    split = documents.train_test_split(test_size=held_out, seed=seed)
    return split["train"], split["test"]


def configure_streaming(training_args: TrainingArguments, collator) -> bool:
    """Multi-process streaming: each rank reads its slice of every global batch itself (no dispatching) unless
    ``--accelerator_config '{"dispatch_batches": true}'`` asks for it. Returns whether batches are dispatched.

    Dispatching concatenates the batches of the main process, which fails on batches padded to different lengths:
    with it, batches are padded to ``max_length``.
    """
    config = training_args.accelerator_config
    if config.dispatch_batches is None:
        config.dispatch_batches = False
    dispatching = bool(config.dispatch_batches)
    if dispatching and training_args.world_size > 1 and hasattr(collator, "pad_to_multiple_of"):
        collator.pad_to_multiple_of = collator.max_length
    return dispatching


def mspp_counts(data_args: PretrainDataArguments, num_candidates: int) -> dict[str, int]:
    """Generation arguments of MSPP: k+ positives, k_hard hard negatives, k_easy = k - k+ - k_hard easy ones."""
    positives, hard = data_args.mspp_positives, data_args.mspp_hard_negatives
    easy = num_candidates - positives - hard
    if positives < 1 or hard < 0 or easy < 0:
        raise ArgumentError(
            f"MSPP fills k = {num_candidates} slots with --mspp_positives ({positives}, >= 1) + --mspp_hard_negatives "
            f"({hard}) + easy negatives ({easy}, the rest): every count must be >= 0"
        )
    logger.info("MSPP candidates per example: %d positive, %d hard, %d easy", positives, hard, easy)
    return {"num_positives": positives, "max_hard_negatives": hard, "num_negatives": hard + easy}


def finished_checkpoint_step(checkpoint: str | None, max_steps: int) -> int | None:
    """The global step of ``checkpoint`` when it has already reached ``max_steps`` (> 0), else None."""
    if not checkpoint or max_steps is None or max_steps <= 0:
        return None
    state_file = os.path.join(checkpoint, "trainer_state.json")
    if not os.path.isfile(state_file):
        return None
    with open(state_file, encoding="utf-8") as handle:
        step = json.load(handle).get("global_step", 0)
    return step if step >= max_steps else None


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((PretrainModelArguments, PretrainDataArguments, PretrainTrainingArguments, HubArguments))
    model_args, data_args, training_args, hub_args = parse_arguments(parser, argv)
    setup_logging()
    push = HubPush.from_args(training_args, hub_args)  # --push_to_hub: checked now, one validated push at the end
    try:  # the one place the --objective string is read: the rest asks the resolved Objective
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
    stale_checkpoints = check_output_dir(training_args)
    set_seed(training_args.seed)

    if data_args.corpus_streaming:
        if data_args.materialize:
            raise ValueError("--corpus_streaming generates on the fly: drop --materialize")
        train_documents, eval_documents = load_streaming_corpus(data_args)
        # A tokenizer trained from scratch sees the held-out documents and the first thousand training ones.
        documents = [{"paragraphs": doc} for doc in eval_documents or []] + list(
            itertools.islice(train_documents, 1000)
        )
    else:
        documents = load_corpus(data_args)
        train_documents, eval_documents = split_documents(documents, data_args.validation_fraction, training_args.seed)
    tokenizer_source = model_args.tokenizer_name or model_args.model_name_or_path
    if tokenizer_source:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    else:
        style = TOKENIZER_STYLE[model_args.model_type]
        tokenizer = train_corpus_tokenizer(documents, style, model_args.tokenizer_vocab_size)
    model = build_model(model_args, tokenizer, objective)
    generation = {"seed": training_args.seed, "documents_per_batch": data_args.documents_per_batch}
    if objective.joint:
        if data_args.whole_word_mask:
            raise ArgumentError("--whole_word_mask is not supported with --objective mspp (token-level masking only)")
        collator = JointCollator.for_model(
            tokenizer, model, mlm_probability=data_args.mlm_probability, label_name="sentence_labels"
        )
        generation.update(mspp_counts(data_args, model.config.num_candidates))
    else:
        collator = PretrainingCollator(
            tokenizer,
            max_length=data_args.max_length or objective.default_max_length,
            mlm_probability=data_args.mlm_probability,
            whole_word_mask=data_args.whole_word_mask,
            num_token_types=model.config.type_vocab_size,
        )

    if data_args.materialize:
        train_dataset = generate_pretraining_dataset(
            train_documents,
            objective,
            num_proc=data_args.preprocessing_num_workers,
            keep_provenance=False,
            output_dir=data_args.save_examples,
            output_format=data_args.save_format,
            num_shards=data_args.save_num_shards,
            **generation,
        )
        logger.info("materialised %d training examples", len(train_dataset))
    elif data_args.examples_dir:
        configure_streaming(training_args, collator)
        train_dataset = examples_stream(data_args, training_args.seed)
    else:
        dispatching = configure_streaming(training_args, collator)
        # Every process generates the same stream (rank 0 of 1); accelerate gives each rank its slice of every global
        # batch (IterableDatasetShard), or, when dispatching, rank 0 generates and sends the slices. Positions are
        # tracked for exact resume (and seed the masking of each batch).
        train_dataset = StructurePretrainingIterableDataset(
            train_documents,
            objective,
            keep_provenance=False,
            track_positions=data_args.exact_resume,
            rank=0,
            world_size=1,
            **generation,
        )
        if data_args.exact_resume:
            collator = PositionTrackingCollator(collator, seed=training_args.seed)
    if next(iter(train_dataset), None) is None:  # stops at the first example; a whole epoch only if there is none
        raise CorpusError(
            f"objective {objective.name!r} produced no example from {len(train_documents)} training documents: "
            "its units need longer paragraphs or more of them (DSLC: paragraphs of 3+ sentences; PSD: documents with "
            "2+ paragraphs; MSPP: paragraphs of 2+ sentences; see the corpus filter counts logged above)"
        )
    eval_dataset = None
    if eval_documents is not None:
        # A few sampling passes (other seeds than training) over the held-out documents steady the estimate.
        eval_dataset = datasets.concatenate_datasets(
            [
                generate_pretraining_dataset(
                    eval_documents, objective, keep_provenance=False, **{**generation, "seed": seed}
                )
                for seed in range(training_args.seed + 1, training_args.seed + 1 + data_args.eval_passes)
            ]
        )
        logger.info("held-out: %d examples from %d documents", len(eval_dataset), len(eval_documents))
    else:
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
    resume = training_args.resume_from_checkpoint
    if not data_args.materialize and not data_args.examples_dir and data_args.exact_resume:
        workers = max(1, training_args.dataloader_num_workers)
        per_batch = training_args.per_device_train_batch_size * (1 if dispatching else training_args.world_size)
        trainer.stream_layout = {"num_consumers": workers, "workers_per_rank": workers, "examples_per_batch": per_batch}
        prepare_exact_resume(trainer, train_dataset, resume)
    results = {}
    if eval_dataset is not None and not resume:
        results["before"] = trainer.evaluate(metric_key_prefix="before")
    remove_stale_checkpoints(stale_checkpoints, training_args)
    finished = finished_checkpoint_step(resume, training_args.max_steps)
    if finished is not None:
        # Trainer would run one more step on a stream (it checks max_steps only after a step): keep the checkpoint.
        logger.info(
            "%s is already at step %d of --max_steps %d: nothing to train; its weights become the final model",
            resume,
            finished,
            training_args.max_steps,
        )
        trainer._load_from_checkpoint(resume)
        trainer.state.global_step = finished
        results["train"] = {"global_step": finished, "trained_steps": 0}
    else:
        train_result = trainer.train(resume_from_checkpoint=resume)
        results["train"] = train_result.metrics
    if stop.stopped:
        checkpoint = f"{training_args.output_dir}/checkpoint-{trainer.state.global_step}"
        logger.warning(
            "stopped by a signal after step %d; no final model written. Continue with --resume_from_checkpoint %s",
            trainer.state.global_step,
            checkpoint,
        )
        results["interrupted"] = {"global_step": trainer.state.global_step, "checkpoint": checkpoint}
        return results
    if eval_dataset is not None:
        results["eval"] = trainer.evaluate()
        trainer.log_metrics("eval", results["eval"])
    if trainer.is_world_process_zero():
        out = training_args.output_dir
        # Everything is written to a staging folder and renamed into place: a crash keeps the previous model.
        with staged_folder(out) as staging:
            trainer.save_model(str(staging))
            tokenizer.save_pretrained(staging)
            joint = objective.joint
            components = {}
            if model_args.model_type == "electra" and not joint:
                exported = model.export_discriminator(f"{staging}/discriminator")
                tokenizer.save_pretrained(f"{staging}/discriminator")
                auto = "AutoModelForSequenceClassification"
                components["discriminator"] = component(
                    "discriminator", exported, tokenizer, auto, trust_remote_code=False
                )
            write_json_atomic(f"{staging}/pretrain_results.json", results)
            arguments = {"model": model_args, "data": data_args, "training": training_args}
            overrides = {"return_mlm_logits": True}
            if joint:  # the slot layout is not a tokenizer pair: the reference input is a collated batch of two
                batch = collator(list(itertools.islice(iter(train_dataset), 2)))
                batch = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
                components = {
                    "model": component(
                        ".", model, tokenizer, "AutoModelForPreTraining", config_overrides=overrides, batch=batch
                    )
                }
            record_run(
                staging,
                "ssp_pretraining",
                model,
                tokenizer,
                arguments,
                results,
                "pretrain_results.json",
                components,
                auto_class="AutoModelForPreTraining",
                config_overrides=overrides,
                model_id=str(out),
            )
        if push:
            push(out)
    return results


def cli(argv: list[str] | None = None) -> int:
    """The command line: user errors end in one line on stderr and exit code 2; a run stopped by SIGTERM (after
    saving its checkpoint) exits with 143 = 128 + SIGTERM, so a scheduler sees a pre-emption."""
    return run_cli(lambda args: 143 if "interrupted" in main(args) else 0, argv)


if __name__ == "__main__":
    sys.exit(cli())

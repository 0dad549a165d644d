"""The data of a pre-training run (``run_pretrain.py``): the corpus read whole or streamed, its held-out documents, the
training examples (generated on the fly, materialised with ``datasets.map``, or streamed back from saved shards), the
held-out examples and the collator. ``data_args`` is the command's ``PretrainDataArguments`` (any object with its
fields); the readers and generators themselves are :mod:`as2hub.data_collators`."""

import itertools
import logging
from pathlib import Path

import datasets

from as2hub.data_collators import (
    CorpusConfig,
    CorpusError,
    JointCollator,
    Objective,
    PretrainingCollator,
    StructurePretrainingIterableDataset,
    generate_pretraining_dataset,
    load_documents,
)
from as2hub.data_collators.objectives.stream_resume import PositionTrackingCollator
from as2hub.training.checks import ArgumentError

logger = logging.getLogger("as2hub.run_pretrain")

_STREAMING_BUILDERS = {".jsonl": "json", ".json": "json", ".txt": "text", ".parquet": "parquet", ".csv": "csv"}


def corpus_config(data_args) -> CorpusConfig:
    """The corpus filters and separators of the command line."""
    return CorpusConfig(
        min_sentence_chars=data_args.min_sentence_chars,
        min_paragraph_chars=data_args.min_paragraph_chars,
        min_document_chars=data_args.min_document_chars,
        paragraph_separator=data_args.paragraph_separator,
        document_separator=data_args.document_separator,
        text_field=data_args.text_field,
    )


def _looks_like_files(source: str) -> bool:
    return any(ch in source for ch in "*?[") or Path(source).exists()


def load_corpus(data_args):
    """The documents of ``--corpus`` (files, or a ``datasets`` name / path; default: the embedded corpus)."""
    config = corpus_config(data_args)
    source = data_args.corpus
    if source is not None and not _looks_like_files(source):
        source = datasets.load_dataset(source, split="train")
    documents, stats = load_documents(source, config)
    logger.info("corpus: %d documents (%s)", len(documents), stats.summary())
    return documents


def load_streaming_corpus(data_args):
    """``--corpus_streaming``: (training documents as a lazy ``datasets.IterableDataset``, held-out documents as a list).

    The held-out documents are the first ``--validation_documents`` of the stream: the same set whatever the number of
    processes or dataloader workers; training skips them.
    """
    from as2hub.data_collators import documents_from_dataset

    if data_args.materialize:
        raise ValueError("--corpus_streaming generates on the fly: drop --materialize")
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


def streaming_sample(train_documents, eval_documents) -> list[dict]:
    """What a tokenizer trained from scratch sees of a streamed corpus: the held-out documents and the first thousand
    training ones."""
    return [{"paragraphs": doc} for doc in eval_documents or []] + list(itertools.islice(train_documents, 1000))


def split_documents(documents, fraction: float, seed: int):
    """(training documents, held-out documents or None): a seeded split, at least two held out."""
    if fraction <= 0 or len(documents) < 4:
        return documents, None
    held_out = max(2, round(len(documents) * fraction))  # at least two: easy negatives need another document
    split = documents.train_test_split(test_size=held_out, seed=seed)
    return split["train"], split["test"]


def examples_stream(data_args, seed: int):
    """``--examples_dir``: the saved example shards as a shuffled ``datasets.IterableDataset`` (one shard per file)."""
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


def configure_streaming(training_args, collator) -> bool:
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


def mspp_counts(data_args, num_candidates: int) -> dict[str, int]:
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


def pretraining_collator(data_args, tokenizer, model, objective: Objective, compiled: bool = False):
    """The MLM (+ sentence labels) collator of ``objective``: slot layout for MSPP, token pairs / triplets else.

    ``compiled`` (``--torch_compile``): every batch is padded to ``max_length``, one shape for the compiled step
    instead of one per padded length (the slot layout has one already). The unpadded pass (``--unpadded``) spends no
    dense-layer work on that padding.
    """
    if objective.joint:
        if data_args.whole_word_mask:
            raise ArgumentError("--whole_word_mask is not supported with --objective mspp (token-level masking only)")
        return JointCollator.for_model(
            tokenizer, model, mlm_probability=data_args.mlm_probability, label_name="sentence_labels"
        )
    max_length = data_args.max_length or objective.default_max_length
    return PretrainingCollator(
        tokenizer,
        max_length=max_length,
        mlm_probability=data_args.mlm_probability,
        whole_word_mask=data_args.whole_word_mask,
        num_token_types=model.config.type_vocab_size,
        pad_to_multiple_of=max_length if compiled else 8,
    )


def generation_arguments(data_args, seed: int, model, objective: Objective) -> dict:
    """The example generators' arguments: seed, documents per batch and, for MSPP, the candidate counts."""
    generation = {"seed": seed, "documents_per_batch": data_args.documents_per_batch}
    if objective.joint:
        generation.update(mspp_counts(data_args, model.config.num_candidates))
    return generation


def tracks_positions(data_args) -> bool:
    """Whether the run generates its examples on the fly with exact-resume bookkeeping (stream positions)."""
    return data_args.exact_resume and not data_args.materialize and not data_args.examples_dir


def training_examples(data_args, training_args, train_documents, objective: Objective, generation: dict, collator):
    """(training dataset, collator, whether batches are dispatched): materialised (``--materialize``), streamed from
    saved shards (``--examples_dir``) or generated on the fly; the collator then tracks stream positions for exact
    resume (``--exact_resume``). A corpus that yields no example raises :class:`CorpusError`."""
    dispatching = False
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
    return train_dataset, collator, dispatching


def held_out_examples(eval_documents, objective: Objective, generation: dict, passes: int, limit: int | None = None):
    """The evaluation set: ``passes`` sampling passes (other seeds than training) over the held-out documents, which
    steady the estimate, truncated to the first ``limit`` examples when given (``--max_eval_samples``); None without
    held-out documents."""
    if limit is not None and limit < 1:
        raise ArgumentError(f"--max_eval_samples must be at least 1, got {limit}")
    if eval_documents is None:
        return None
    seed = generation["seed"]
    eval_dataset = datasets.concatenate_datasets(
        [
            generate_pretraining_dataset(
                eval_documents, objective, keep_provenance=False, log_summary=False, **{**generation, "seed": s}
            )
            for s in range(seed + 1, seed + 1 + passes)
        ]
    )
    generated = len(eval_dataset)
    if limit is not None and limit < generated:
        eval_dataset = eval_dataset.select(range(limit))
    logger.info(
        "held-out: %d %s examples from %d documents (%d sampling pass%s%s)",
        len(eval_dataset),
        objective.name,
        len(eval_documents),
        passes,
        "" if passes == 1 else "es",
        f", the first {limit} of {generated}: --max_eval_samples" if len(eval_dataset) < generated else "",
    )
    return eval_dataset


def reference_batch(collator, train_dataset) -> dict:
    """The input a joint (MSPP) model's published folder is checked on: two training examples collated in the slot
    layout (not a tokenizer pair), without labels."""
    batch = collator(list(itertools.islice(iter(train_dataset), 2)))
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}

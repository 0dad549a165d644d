"""Throughput of structure-aware pre-training data generation, tokenization included.

For every objective, on the embedded pydoc corpus (replicated ``--repeat`` times so that process
start-up does not dominate), measures tokenized examples per second per core:

* materialised: ``generate_pretraining_dataset(num_proc=N)`` followed by a batched tokenization
  ``Dataset.map(num_proc=N)`` (N = 1 and 2); per core = examples / wall time / N;
* streaming: iterating ``StructurePretrainingIterableDataset`` in one process with the tokenizer
  as ``batch_transform``.

Tokenizer: a byte-level BPE (vocab 8k) trained with ``tokenizers`` on the same corpus; pairs are
encoded as pairs ``(a, b)``, triplets as the pair ``(a, b)`` plus ``c`` on its own; no padding, no
truncation.  ``TOKENIZERS_PARALLELISM=false`` keeps the tokenizer on one thread so the numbers are
per core.  Writes ``benchmarks/results/data_generation.json``.

    python benchmarks/bench_data_generation.py [--repeat 5] [--objectives ssp,sp,...]
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import datasets  # noqa: E402
from tokenizers import ByteLevelBPETokenizer, Tokenizer  # noqa: E402

from as2hub.data_collators.objectives.pretraining_examples import (  # noqa: E402
    StructurePretrainingIterableDataset,
    generate_pretraining_dataset,
)
from as2hub.data_collators.objectives.structure_objectives import is_triplet_objective  # noqa: E402
from as2hub.data_collators.readers.corpus import default_corpus, load_documents  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "data_generation.json"
DEFAULT_OBJECTIVES = ("ssp", "sp", "psd", "sdc", "dpc", "dslc", "all", "all_pairs", "mlm")


def train_tokenizer(vocab_size: int = 8000) -> Tokenizer:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(default_corpus().values(), vocab_size=vocab_size, min_frequency=2, show_progress=False)
    return Tokenizer.from_str(bpe.to_str())


def tokenize_examples(tokenizer: Tokenizer, text_a: list[str], text_b: list[str], text_c: list[str] | None) -> dict:
    pairs = tokenizer.encode_batch(list(zip(text_a, text_b, strict=True)))
    out = {"input_ids": [e.ids for e in pairs], "token_type_ids": [e.type_ids for e in pairs]}
    if text_c is not None:
        out["context_ids"] = [e.ids for e in tokenizer.encode_batch(text_c)]
    return out


def _tokenize_map(batch: dict, tokenizer: Tokenizer) -> dict:
    return tokenize_examples(tokenizer, batch["text_a"], batch["text_b"], batch.get("text_c"))


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the ``Dataset.map`` workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bench_materialised(documents, objective: str, tokenizer: Tokenizer, num_proc: int) -> dict:
    cpu = _cpu_seconds()
    start = time.perf_counter()
    examples = generate_pretraining_dataset(documents, objective, seed=0, num_proc=num_proc)
    generated = time.perf_counter()
    tokenized = examples.map(
        _tokenize_map,
        batched=True,
        batch_size=1000,
        num_proc=num_proc if num_proc > 1 else None,
        fn_kwargs={"tokenizer": tokenizer},
        remove_columns=examples.column_names,
    )
    end = time.perf_counter()
    cpu = _cpu_seconds() - cpu
    n = len(tokenized)
    tokens = sum(len(ids) for ids in tokenized["input_ids"])
    return {
        "examples": n,
        "seconds": end - start,
        "generation_seconds": generated - start,
        "examples_per_second_per_core": n / (end - start) / num_proc,
        "cpu_seconds": cpu,
        "examples_per_cpu_second": n / cpu,
        "generation_only_per_second_per_core": n / (generated - start) / num_proc,
        "mean_tokens": tokens / max(n, 1),
    }


def bench_streaming(documents, objective: str, tokenizer: Tokenizer) -> dict:
    triplet = is_triplet_objective(objective)

    def transform(examples):
        encoded = tokenize_examples(
            tokenizer,
            [e["text_a"] for e in examples],
            [e["text_b"] for e in examples],
            [e["text_c"] for e in examples] if triplet else None,
        )
        return [{key: encoded[key][i] for key in encoded} | {"label": e["label"]} for i, e in enumerate(examples)]

    dataset = StructurePretrainingIterableDataset(documents, objective, seed=0, batch_transform=transform)
    dataset.set_epoch(1)
    cpu = _cpu_seconds()
    start = time.perf_counter()
    n = sum(1 for _ in dataset)
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu
    return {
        "examples": n,
        "seconds": seconds,
        "examples_per_second_per_core": n / seconds,
        "cpu_seconds": cpu,
        "examples_per_cpu_second": n / cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="replicate the embedded corpus this many times")
    parser.add_argument("--objectives", default=",".join(DEFAULT_OBJECTIVES))
    parser.add_argument("--num-proc", default="1,2")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    datasets.disable_progress_bars()
    datasets.disable_caching()  # measure generation, not cache hits

    base, _ = load_documents()
    # Disk-backed like a real corpus: map workers memory-map the files instead of unpickling the table.
    workdir = tempfile.TemporaryDirectory(prefix="as2hub-bench-")
    datasets.concatenate_datasets([base] * args.repeat).save_to_disk(workdir.name)
    documents = datasets.load_from_disk(workdir.name)
    tokenizer = train_tokenizer()
    procs = [int(p) for p in args.num_proc.split(",")]
    rows = []
    for objective in args.objectives.split(","):
        row = {"objective": objective}
        for p in procs:
            row[f"materialised_num_proc_{p}"] = bench_materialised(documents, objective, tokenizer, p)
        row["streaming"] = bench_streaming(documents, objective, tokenizer)
        rows.append(row)

    print(
        f"documents: {len(documents)} ({args.repeat} x embedded pydoc corpus), cpu_count={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print("tokenized examples per second per core (wall: examples / s / num_proc) and per CPU-second (incl. workers)")
    names = [f"np={p}" for p in procs] + ["stream"]
    print(
        f"{'objective':<10} {'examples':>8} {'tok/ex':>6} | "
        + " ".join(f"{'wall ' + n:>12}" for n in names)
        + " | "
        + " ".join(f"{'cpu ' + n:>11}" for n in names)
    )
    for row in rows:
        runs = [row[f"materialised_num_proc_{p}"] for p in procs] + [row["streaming"]]
        first = runs[0]
        print(
            f"{row['objective']:<10} {first['examples']:>8} {first['mean_tokens']:>6.1f} | "
            + " ".join(f"{r['examples_per_second_per_core']:>12,.0f}" for r in runs)
            + " | "
            + " ".join(f"{r['examples_per_cpu_second']:>11,.0f}" for r in runs)
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "documents": len(documents),
        "repeat": args.repeat,
        "tokenizer": "byte-level BPE, vocab 8000, trained on the embedded corpus",
        "cpu_count": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "python": platform.python_version(),
        "target_examples_per_second_per_core": 2000,
        "results": rows,
    }
    tmp = args.output.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, args.output)
    print(f"wrote {args.output}")
    workdir.cleanup()


if __name__ == "__main__":
    main()

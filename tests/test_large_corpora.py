"""Large corpora: materialised shards written in parallel and atomically, streamed back into training; on-the-fly
generation over a corpus read with ``streaming=True``; a held-out set that does not depend on the launch."""

import json
from pathlib import Path

import datasets
import pytest
import torch

from as2hub.data_collators import generate_pretraining_dataset
from as2hub.run_scripts import run_pretrain

QUICK = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--tokenizer_vocab_size", "400", "--eval_passes",
         "1", "--max_eval_samples", "64", "--eval_steps", "2", "--save_strategy", "no", "--documents_per_batch", "4"]  # fmt: skip


def documents(n=16):
    return [[[f"Doc {d} par {p} sentence {s} has enough words." for s in range(3)] for p in range(3)] for d in range(n)]


def test_parquet_shards_are_written_by_num_proc_workers_into_a_renamed_folder(tmp_path):
    target = tmp_path / "examples"
    target.mkdir()
    (target / "stale.parquet").write_text("an earlier, replaced result")
    examples = generate_pretraining_dataset(
        documents(), "dslc", seed=1, num_proc=2, keep_provenance=False, output_dir=target, output_format="parquet"
    )
    files = sorted(path.name for path in target.iterdir())
    assert files == ["part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    assert [path.name for path in tmp_path.iterdir()] == ["examples"]  # no temporary folder left behind
    reloaded = datasets.load_dataset(
        "parquet", data_files=sorted(map(str, target.glob("*.parquet"))), split="train", streaming=True
    )
    assert [row["text_a"] for row in reloaded] == examples["text_a"]


@pytest.mark.slow
def test_training_streams_saved_shards_back(tmp_path):
    torch.set_num_threads(1)
    shards = tmp_path / "shards"
    run_pretrain.main(
        ["--output_dir", str(tmp_path / "m"), *QUICK, "--materialize", "--save_examples", str(shards),
         "--preprocessing_num_workers", "2", "--max_steps", "1"]
    )  # fmt: skip
    assert len(list(shards.glob("part-*.parquet"))) == 2
    saved = datasets.load_dataset("parquet", data_files=sorted(map(str, shards.glob("*.parquet"))), split="train")
    stream = run_pretrain.examples_stream(run_pretrain.PretrainDataArguments(examples_dir=str(shards)), seed=0)
    assert stream.num_shards == 2
    assert sorted(row["text_a"] for row in stream) == sorted(saved["text_a"])  # shuffled, nothing lost or repeated
    results = run_pretrain.main(["--output_dir", str(tmp_path / "s"), *QUICK, "--examples_dir", str(shards)])
    assert results["train"]["train_loss"] > 0 and (tmp_path / "s" / "model.safetensors").exists()
    with pytest.raises(ValueError, match="no part-"):
        run_pretrain.examples_stream(run_pretrain.PretrainDataArguments(examples_dir=str(tmp_path)), seed=0)


def write_corpus(path: Path, n=40):
    rows = [{"text": "\n\n".join(" ".join(par) for par in doc)} for doc in documents(n)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.slow
def test_streaming_corpus_holds_out_the_first_documents_and_trains_on_the_rest(tmp_path):
    torch.set_num_threads(1)
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus)
    data_args = run_pretrain.PretrainDataArguments(
        corpus=str(corpus), corpus_streaming=True, validation_documents=6, min_document_chars=50
    )
    train, held_out = run_pretrain.load_streaming_corpus(data_args)
    assert isinstance(train, datasets.IterableDataset)
    assert [doc[0][0] for doc in held_out] == [f"Doc {d} par 0 sentence 0 has enough words." for d in range(6)]
    assert [row["paragraphs"][0][0] for row in train][:2] == [
        f"Doc {d} par 0 sentence 0 has enough words." for d in (6, 7)
    ]
    results = run_pretrain.main(
        ["--output_dir", str(tmp_path / "out"), *QUICK, "--corpus", str(corpus), "--corpus_streaming",
         "--validation_documents", "6", "--min_document_chars", "50"]
    )  # fmt: skip
    assert results["eval"]["eval_cls_auc"] == results["eval"]["eval_cls_auc"]  # evaluated (not NaN)

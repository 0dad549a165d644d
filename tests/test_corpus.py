"""Corpus loading, sentence splitting and pre-training data generation (materialised and streaming)."""

from __future__ import annotations

import json
import os
from collections import Counter

import datasets
import pytest
import torch

from as2hub.data_collators.objectives.pretraining_examples import (
    StructurePretrainingIterableDataset,
    generate_pretraining_dataset,
)
from as2hub.data_collators.readers.corpus import (
    CorpusConfig,
    CorpusError,
    CorpusStats,
    EmptyCorpusError,
    documents_from_dataset,
    iter_documents,
    load_documents,
    split_document,
)
from as2hub.data_collators.readers.sentence_splitter import install_punkt_tab, split_sentences

LONG = "This sentence is long enough to be kept by the filter."  # 54 characters


def paragraph(tag: str, n: int = 3) -> str:
    return " ".join(f"Sentence {i} of paragraph {tag} is long enough to keep." for i in range(n))


def document(tag: str, n_paragraphs: int = 3) -> str:
    return "\n\n".join(paragraph(f"{tag}-{p}") for p in range(n_paragraphs))


@pytest.fixture(scope="module")
def pydoc_documents():
    return load_documents()[0]


# --------------------------------------------------------------------------- sentence splitting


def test_punkt_offline_abbreviations(monkeypatch):
    import nltk

    monkeypatch.setattr(nltk, "download", lambda *a, **k: pytest.fail("nltk.download must not be called"))
    text = "Dr. Smith went to Washington. He arrived at 5 p.m. yesterday."
    assert split_sentences(text) == ["Dr. Smith went to Washington.", "He arrived at 5 p.m. yesterday."]


def test_install_punkt_tab_makes_nltk_sent_tokenize_work(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))
    root = install_punkt_tab(root=tmp_path)
    assert sorted(os.listdir(root / "tokenizers" / "punkt_tab" / "english")) == [
        "abbrev_types.txt",
        "collocations.tab",
        "ortho_context.tab",
        "sent_starters.txt",
    ]
    text = "Mr. Jones met Dr. Who at 5 p.m. on Monday. They talked."
    assert (
        nltk.sent_tokenize(text)
        == split_sentences(text)
        == ["Mr. Jones met Dr. Who at 5 p.m. on Monday.", "They talked."]
    )
    assert install_punkt_tab(root=tmp_path) == root  # idempotent


# --------------------------------------------------------------------------- filters


def test_filters_drop_and_count():
    config = CorpusConfig()
    stats = CorpusStats()
    text = (
        f"Too short. {LONG} {LONG}\n\n"  # 1 short sentence dropped, paragraph kept
        "Tiny paragraph here.\n\n"  # 20 chars >= 20 kept as sentence, paragraph < 60 dropped
        f"{LONG} Short one!\n  \n"  # 1 short sentence dropped -> 54 chars < 60 -> paragraph dropped
        f"{LONG} {LONG}"
    )
    doc = split_document(text, config, stats)
    assert doc == [[LONG, LONG], [LONG, LONG]]
    assert stats.dropped_sentences_too_short == 2
    assert stats.dropped_paragraphs_too_short == 2
    assert stats.documents_kept == 1 and stats.paragraphs_kept == 2 and stats.sentences_kept == 4
    # document: 2 * 109 chars >= 200 kept; one paragraph of 109 chars < 200 dropped
    assert split_document(f"{LONG} {LONG}", config, stats) is None
    assert stats.dropped_documents_too_short == 1 and stats.documents_seen == 2
    assert split_document("   ", config, stats) is None and stats.dropped_documents_empty == 1
    # thresholds are configurable
    loose = CorpusConfig(min_sentence_chars=1, min_paragraph_chars=1, min_document_chars=1)
    assert split_document("Hi there. Yo.\n\nOk.", loose) == [["Hi there.", "Yo."], ["Ok."]]
    news = CorpusConfig(paragraph_separator=r"\n")
    assert len(split_document(f"{LONG} {LONG}\n{LONG} {LONG}", news)) == 2
    assert len(split_document(f"{LONG} {LONG}\n{LONG} {LONG}", config)) == 1


def test_empty_corpus_error_says_what_was_dropped():
    with pytest.raises(EmptyCorpusError, match=r"0/3 documents.*3 documents < min_document_chars"):
        load_documents([f"{LONG} {LONG}", "tiny", f"{LONG}\n\n{LONG}"])


def test_embedded_pydoc_corpus(pydoc_documents):
    assert pydoc_documents.features["paragraphs"] == datasets.Sequence(datasets.Sequence(datasets.Value("string")))
    assert len(pydoc_documents) >= 60
    assert sum(len(d) for d in pydoc_documents["paragraphs"]) > 1000
    assert all(len(s) >= 20 for d in pydoc_documents["paragraphs"] for p in d for s in p)
    assert pydoc_documents[0]["doc_id"].startswith("pydoc:")


# --------------------------------------------------------------------------- inputs


def test_text_files_directory_glob_and_marker(tmp_path):
    (tmp_path / "a.txt").write_text(document("a"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text(document("b"))
    docs, stats = load_documents(tmp_path)
    assert len(docs) == 2 and stats.documents_seen == 2
    assert docs[0]["paragraphs"][0][0] == "Sentence 0 of paragraph a-0 is long enough to keep."
    assert len(load_documents(str(tmp_path / "*.txt"))[0]) == 1
    assert len(load_documents(str(tmp_path / "**" / "*.txt"))[0]) == 2
    marked = tmp_path / "marked.txt"
    marked.write_text(f"{document('x')}\n<|endoftext|>\n{document('y')}\n  <|endoftext|>  \n{document('z')}\n")
    docs, _ = load_documents(marked, CorpusConfig(document_separator="<|endoftext|>"))
    assert docs["doc_id"] == [f"{marked}#0", f"{marked}#1", f"{marked}#2"]
    assert [d[0][0].split()[4] for d in docs["paragraphs"]] == ["x-0", "y-0", "z-0"]


def test_jsonl_and_datasets_inputs(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"body": document(t), "id": f"doc-{t}"}) for t in "pq") + "\n")
    docs, _ = load_documents(path, CorpusConfig(text_field="body", id_field="id"))
    assert docs["doc_id"] == ["doc-p", "doc-q"]
    ds = datasets.Dataset.from_dict({"text": [document("r"), "short", document("s")]})
    docs, stats = load_documents(ds)
    assert len(docs) == 2 and stats.dropped_documents_too_short == 1
    assert len(documents_from_dataset(ds)) == 2
    streaming = ds.to_iterable_dataset()
    assert [len(d["paragraphs"]) for d in iter_documents(streaming)] == [3, 3]
    lazy = documents_from_dataset(streaming)
    assert isinstance(lazy, datasets.IterableDataset)
    assert [d["doc_id"] for d in lazy] == ["0", "2"]


def test_bad_inputs(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        load_documents(tmp_path / "missing.txt")
    with pytest.raises(CorpusError, match="no file matches"):
        load_documents(str(tmp_path / "*.nothing"))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9 " * 100)
    with pytest.raises(CorpusError, match="latin1.txt"):
        load_documents(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(CorpusError, match=r"broken.jsonl: line 2"):
        load_documents(broken)
    missing_field = tmp_path / "fields.jsonl"
    missing_field.write_text('{"body": "x"}\n')
    with pytest.raises(CorpusError, match=r"fields.jsonl:1.*'text'"):
        load_documents(missing_field)
    with pytest.raises(CorpusError, match="no text column 'text'"):
        load_documents(datasets.Dataset.from_dict({"body": ["x"]}))
    with pytest.raises(CorpusError, match="pass one split"):
        load_documents(datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["x"]})}))
    with pytest.raises(CorpusError, match="unsupported"):
        load_documents(42)


# --------------------------------------------------------------------------- generation


def test_materialised_identical_across_num_proc(pydoc_documents, tmp_path):
    one = generate_pretraining_dataset(pydoc_documents, "all", seed=3, num_proc=1)
    two = generate_pretraining_dataset(pydoc_documents, "all", seed=3, num_proc=2)
    assert len(one) > 1000
    assert one.to_list() == two.to_list()
    other_seed = generate_pretraining_dataset(pydoc_documents, "all", seed=4, num_proc=1)
    assert other_seed["text_b"] != one["text_b"]
    saved = generate_pretraining_dataset(
        pydoc_documents, "ssp", seed=3, output_dir=tmp_path / "pq", output_format="parquet", num_shards=2
    )
    reloaded = datasets.load_dataset("parquet", data_files=sorted(map(str, (tmp_path / "pq").glob("*.parquet"))))
    assert reloaded["train"]["text_a"] == saved["text_a"]
    generate_pretraining_dataset(pydoc_documents[:20]["paragraphs"], "dpc", output_dir=tmp_path / "arrow")
    assert len(datasets.load_from_disk(str(tmp_path / "arrow"))) > 0


def test_materialised_equals_unshuffled_stream(pydoc_documents):
    docs = pydoc_documents.select(range(30))
    materialised = generate_pretraining_dataset(docs, "sp", seed=5, documents_per_batch=8)
    stream = StructurePretrainingIterableDataset(
        docs, "sp", seed=5, documents_per_batch=8, shuffle_documents=False, shuffle_examples=False
    )
    assert list(stream) == materialised.to_list()


def _key(example: dict) -> tuple:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(example.items()))


def test_iterable_two_workers_no_duplicate_no_missing(pydoc_documents):
    dataset = StructurePretrainingIterableDataset(pydoc_documents, "ssp", seed=11, documents_per_batch=8)
    dataset.set_epoch(2)
    single = list(dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    parallel = list(loader)
    assert Counter(map(_key, parallel)) == Counter(map(_key, single))
    positives = [(ex["batch"], ex["group"]) for ex in single if ex["kind"] == "positive"]
    assert len(set(positives)) == len(positives)
    # every document batch is generated by exactly one consumer and every document is in one batch
    batches = [dict(dataset.document_batches(c, 2)) for c in range(2)]
    assert not set(batches[0]) & set(batches[1])
    assert set(batches[0]) | set(batches[1]) == set(range(dataset.num_document_batches))
    all_docs = [d for part in batches for docs in part.values() for d in docs]
    assert sorted(all_docs) == list(range(len(pydoc_documents)))
    assert {ex["batch"] for ex in parallel} == set(range(dataset.num_document_batches))


def test_iterable_ranks_partition_the_stream(pydoc_documents):
    full = list(StructurePretrainingIterableDataset(pydoc_documents, "dslc", seed=1, rank=0, world_size=1))
    parts = [
        list(StructurePretrainingIterableDataset(pydoc_documents, "dslc", seed=1, rank=r, world_size=3))
        for r in range(3)
    ]
    assert Counter(map(_key, (ex for part in parts for ex in part))) == Counter(map(_key, full))
    assert all(parts) and not {ex["batch"] for ex in parts[0]} & {ex["batch"] for ex in parts[1]}
    with pytest.raises(ValueError, match="rank must be"):
        StructurePretrainingIterableDataset(pydoc_documents, "dslc", rank=3, world_size=3)


def test_iterable_epochs_and_seeds_differ(pydoc_documents):
    dataset = StructurePretrainingIterableDataset(pydoc_documents, "sdc", seed=0)
    epoch0 = list(dataset)
    assert list(dataset) == epoch0  # reproducible
    dataset.set_epoch(1)
    epoch1 = list(dataset)
    negatives = lambda exs: {(ex["text_a"], ex["text_b"]) for ex in exs if ex["label"] == 0}  # noqa: E731
    assert negatives(epoch0) != negatives(epoch1)
    assert len(negatives(epoch0) & negatives(epoch1)) < 0.5 * len(negatives(epoch0))
    other = StructurePretrainingIterableDataset(pydoc_documents, "sdc", seed=1)
    assert negatives(list(other)) != negatives(epoch0)


def test_iterable_source_and_transform(pydoc_documents):
    docs = pydoc_documents.select(range(20))
    stream_source = docs.to_iterable_dataset()
    dataset = StructurePretrainingIterableDataset(
        stream_source,
        "psd",
        documents_per_batch=4,
        rank=1,
        world_size=2,
        keep_provenance=False,
        batch_transform=lambda exs: [(ex["text_a"], ex["text_b"], ex["label"]) for ex in exs],
    )
    items = list(dataset)
    assert items and all(isinstance(item, tuple) and len(item) == 3 for item in items)
    random_access = StructurePretrainingIterableDataset(
        docs, "psd", documents_per_batch=4, rank=1, world_size=2, shuffle_documents=False, keep_provenance=False
    )
    assert [(ex["text_a"], ex["text_b"], ex["label"]) for ex in random_access] == items
    assert set(next(iter(random_access))) == {"text_a", "text_b", "label"}


def test_hf_iterable_source_with_two_workers(pydoc_documents):
    docs = pydoc_documents.select(range(40))
    # PSD has one positive per paragraph of every multi-paragraph document, whatever the seed: the
    # multiset of positive ``text_a`` shows that each document was used exactly once.
    expected = Counter(" ".join(p) for d in docs["paragraphs"] if len(d) > 1 for p in d)
    for num_workers in (0, 2):
        source = docs.to_iterable_dataset(num_shards=4)
        dataset = StructurePretrainingIterableDataset(source, "psd", documents_per_batch=4, rank=0, world_size=1)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers)
        examples = list(loader)
        assert Counter(ex["text_a"] for ex in examples if ex["kind"] == "positive") == expected
        batches = [ex["batch"] for ex in examples if ex["kind"] == "positive"]
        assert len(set(batches)) == 10

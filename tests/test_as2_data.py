"""Tests for as2hub.data_collators.readers.as2_data: WikiQA reader, generic AS2 loader, validation errors."""

import csv
import gzip
import json
import time
from collections import defaultdict
from pathlib import Path

import datasets
import pytest

from as2hub.data_collators.readers.as2_data import (
    AS2_COLUMNS,
    AS2Data,
    AS2DataError,
    load_as2_data,
    question_id_for,
    read_wikiqa,
)

WIKIQA_DIR = Path(__file__).parents[1].parent / "shared" / "data" / "wikiqa"
WIKIQA_HEADER = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel"


@pytest.fixture
def wikiqa_root() -> Path:
    if not (WIKIQA_DIR / "WikiQA-train.tsv.gz").is_file():
        pytest.skip(f"WikiQA corpus not found at {WIKIQA_DIR} (needs ../shared/data/wikiqa next to the project)")
    return WIKIQA_DIR


def _raw_wikiqa_rows(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


# ----------------------------------------------------------------------------------------------------------------------
# WikiQA (real corpus)

RAW_COUNTS = {"train": (20360, 2118, 873), "dev": (2733, 296, 126), "test": (6165, 633, 243)}
CLEAN_COUNTS = {"dev": (122, 1126), "test": (237, 2341)}


@pytest.mark.wikiqa
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_wikiqa_raw_counts(wikiqa_root, split):
    data = read_wikiqa(split, root=wikiqa_root)
    rows, questions, with_positive = RAW_COUNTS[split]
    assert isinstance(data, AS2Data)
    assert data.dataset.column_names == list(AS2_COLUMNS)
    assert len(data.dataset) == rows == data.stats["rows"]
    assert data.stats["questions"] == questions == len(set(data.dataset["question_id"]))
    assert data.stats["questions_with_positive"] == with_positive
    assert data.stats["dropped_questions_clean"] == data.stats["dropped_rows_clean"] == 0
    assert set(data.dataset["label"]) == {0, 1}
    assert data.source.endswith(f"WikiQA-{split}.tsv.gz")


@pytest.mark.wikiqa
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_wikiqa_clean_counts(wikiqa_root, split):
    data = read_wikiqa(split, root=wikiqa_root, clean=True)
    raw_rows, raw_questions, _ = RAW_COUNTS[split]
    if split in CLEAN_COUNTS:
        assert (data.stats["questions"], data.stats["rows"]) == CLEAN_COUNTS[split]
    assert data.stats["dropped_questions_clean"] == raw_questions - data.stats["questions"]
    assert data.stats["dropped_rows_clean"] == raw_rows - data.stats["rows"] == raw_rows - len(data.dataset)
    labels_per_question = defaultdict(set)
    for qid, label in zip(data.dataset["question_id"], data.dataset["label"], strict=True):
        labels_per_question[qid].add(label)
    assert all(labels == {0, 1} for labels in labels_per_question.values())
    assert data.stats["questions_with_positive"] == data.stats["questions"]


@pytest.mark.wikiqa
def test_wikiqa_context_matches_raw_neighbours(wikiqa_root):
    path = wikiqa_root / "WikiQA-test.tsv.gz"
    raw = _raw_wikiqa_rows(path)
    data = read_wikiqa(path)
    assert len(raw) == len(data.dataset)
    # First document with at least 5 sentences, from the raw file, in SentenceID order.
    by_doc = defaultdict(dict)
    for row in raw:
        by_doc[row["DocumentID"]][int(row["SentenceID"].split("-")[1])] = row["Sentence"]
    doc = next(d for d, sentences in by_doc.items() if len(sentences) >= 5)
    sentences = [by_doc[doc][k] for k in range(len(by_doc[doc]))]
    last, middle = len(sentences) - 1, len(sentences) // 2

    contexts = {
        (row["document_id"], row["position"]): (row["candidate"], row["context"])
        for row in data.dataset
        if row["document_id"] == doc
    }
    assert contexts[(doc, 0)] == (sentences[0], sentences[1])  # no previous sentence
    assert contexts[(doc, middle)] == (sentences[middle], sentences[middle - 1] + " " + sentences[middle + 1])
    assert contexts[(doc, last)] == (sentences[last], sentences[last - 1])  # no next sentence


@pytest.mark.wikiqa
def test_wikiqa_first_train_row_and_shared_documents(wikiqa_root):
    data = read_wikiqa("train", root=wikiqa_root)
    first = data.dataset[0]
    assert first["question_id"] == "Q1" and first["document_id"] == "D1" and first["position"] == 0
    assert first["candidate"] == "A partly submerged glacier cave on Perito Moreno Glacier ."
    assert first["context"] == "The ice facade is approximately 60 m high"
    # A document shared by several questions gives the same context to the same sentence in each of them.
    by_key = defaultdict(set)
    questions_of_doc = defaultdict(set)
    for qid, doc, pos, context in zip(
        data.dataset["question_id"],
        data.dataset["document_id"],
        data.dataset["position"],
        data.dataset["context"],
        strict=True,
    ):
        by_key[(doc, pos)].add(context)
        questions_of_doc[doc].add(qid)
    assert any(len(qids) > 1 for qids in questions_of_doc.values())
    assert all(len(contexts) == 1 for contexts in by_key.values())


@pytest.mark.wikiqa
def test_wikiqa_train_loads_fast(wikiqa_root):
    # CPU time, not wall time: on a loaded 2-core machine (the suite beside training runs) the wall time doubled
    # (2.1 s on the AMX Xeon, 2026-11-28) while the work did not
    start = time.process_time()
    data = read_wikiqa("train", root=wikiqa_root)
    elapsed = time.process_time() - start
    assert len(data.dataset) == 20360
    assert elapsed < 2.0, f"loading WikiQA train took {elapsed:.2f} s of CPU time"


@pytest.mark.wikiqa
def test_load_as2_data_dispatches_wikiqa_files(wikiqa_root, monkeypatch):
    data = load_as2_data(wikiqa_root / "WikiQA-dev.tsv.gz", clean=True)
    assert (data.stats["questions"], data.stats["rows"]) == CLEAN_COUNTS["dev"]
    monkeypatch.setenv("AS2HUB_WIKIQA_DIR", str(wikiqa_root))
    assert load_as2_data("wikiqa", split="test", clean=True).stats["questions"] == 237


# ----------------------------------------------------------------------------------------------------------------------
# WikiQA format (synthetic files, no corpus needed)


def _write_wikiqa(path: Path, rows: list[tuple[str, ...]]) -> Path:
    text = "\r\n".join([WIKIQA_HEADER] + ["\t".join(r) for r in rows]) + "\r\n"
    with gzip.open(path, "wt", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


SYNTHETIC_WIKIQA = [
    ("Q1", 'who wrote "x"?', "D1", "X", "D1-0", 'Intro about "x" .', "0"),
    ("Q1", 'who wrote "x"?', "D1", "X", "D1-1", "Alice wrote x .", "1"),
    ("Q1", 'who wrote "x"?', "D1", "X", "D1-2", "It sold well .", "0"),
    ("Q2", "what is y?", "D2", "Y", "D2-0", "Y is a letter .", "0"),
    ("Q3", "when was x written?", "D1", "X", "D1-0", 'Intro about "x" .', "0"),
    ("Q3", "when was x written?", "D1", "X", "D1-1", "Alice wrote x .", "0"),
    ("Q3", "when was x written?", "D1", "X", "D1-2", "It sold well .", "1"),
]


def test_synthetic_wikiqa_split_root_env_and_dispatch(tmp_path, monkeypatch):
    _write_wikiqa(tmp_path / "WikiQA-dev.tsv.gz", SYNTHETIC_WIKIQA)
    data = read_wikiqa("dev", root=tmp_path)
    assert data.dataset["context"] == [
        "Alice wrote x .",
        'Intro about "x" . It sold well .',
        "Alice wrote x .",
        "",
        "Alice wrote x .",
        'Intro about "x" . It sold well .',
        "Alice wrote x .",
    ]
    assert data.dataset["position"] == [0, 1, 2, 0, 0, 1, 2]
    assert data.dataset["question"][0] == 'who wrote "x"?'
    assert data.stats == {
        "rows": 7,
        "questions": 3,
        "questions_with_positive": 2,
        "dropped_questions_clean": 0,
        "dropped_rows_clean": 0,
        "clean": False,
    }
    clean = read_wikiqa("dev", root=tmp_path, clean=True)
    assert clean.stats["dropped_questions_clean"] == 1 and clean.stats["dropped_rows_clean"] == 1
    assert "Q2" not in clean.dataset["question_id"]

    monkeypatch.setenv("AS2HUB_WIKIQA_DIR", str(tmp_path))
    assert read_wikiqa("dev").stats["rows"] == 7
    # Detected by its header whatever its name.
    other = _write_wikiqa(tmp_path / "renamed.tsv.gz", SYNTHETIC_WIKIQA)
    assert load_as2_data(other).dataset["context"] == data.dataset["context"]


def test_wikiqa_missing_split_names_what_was_looked_for(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="WikiQA-test.tsv.gz") as err:
        read_wikiqa("test", root=tmp_path)
    assert str(tmp_path) in str(err.value)
    monkeypatch.setenv("AS2HUB_WIKIQA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="AS2HUB_WIKIQA_DIR"):
        read_wikiqa("train")
    with pytest.raises(FileNotFoundError, match="nope.tsv.gz"):
        read_wikiqa(tmp_path / "nope.tsv.gz")


@pytest.mark.parametrize(
    ("bad_row", "column"),
    [
        (("Q2", "what is y?", "D2", "Y", "D2-0", "Y is a letter .", "2"), "Label"),
        (("Q2", "what is y?", "D2", "Y", "2-0", "Y is a letter .", "0"), "SentenceID"),
        (("Q2", " ", "D2", "Y", "D2-0", "Y is a letter .", "0"), "Question"),
        (("Q2", "what is y?", "D2", "Y", "D2-0", "", "0"), "Sentence"),
    ],
)
def test_synthetic_wikiqa_bad_rows(tmp_path, bad_row, column):
    rows = list(SYNTHETIC_WIKIQA)
    rows[3] = bad_row  # data row 4, line 5 of the file
    path = _write_wikiqa(tmp_path / "WikiQA-bad.tsv.gz", rows)
    with pytest.raises(AS2DataError) as err:
        read_wikiqa(path)
    message = str(err.value)
    assert "WikiQA-bad.tsv.gz" in message and "line 5 (data row 4)" in message and f"'{column}'" in message


# ----------------------------------------------------------------------------------------------------------------------
# Generic files: round trips

DOC_ROWS = [
    {"question_id": "a", "question": "q one?", "candidate": "s0", "label": 0, "document_id": "d1", "position": 0},
    {"question_id": "a", "question": "q one?", "candidate": "s2", "label": 1, "document_id": "d1", "position": 2},
    {"question_id": "a", "question": "q one?", "candidate": "s1", "label": 0, "document_id": "d1", "position": 1},
    {"question_id": "b", "question": "q two?", "candidate": "t0", "label": 1, "document_id": "d2", "position": 0},
]
REBUILT_CONTEXTS = ["s1", "s1", "s0 s2", ""]


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _write_csv(path: Path, records: list[dict], delimiter: str = ",") -> Path:
    fieldnames = list(dict.fromkeys(k for r in records for k in r))
    if delimiter == "\t":  # plain TSV: no quoting at all, as the loader reads it
        lines = ["\t".join(fieldnames)] + ["\t".join(str(r.get(k, "")) for k in fieldnames) for r in records]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(records)
    return path


def _writer(kind):
    return {
        "jsonl": lambda p, r: _write_jsonl(p.with_suffix(".jsonl"), r),
        "csv": lambda p, r: _write_csv(p.with_suffix(".csv"), r),
        "tsv": lambda p, r: _write_csv(p.with_suffix(".tsv"), r, delimiter="\t"),
    }[kind]


@pytest.mark.parametrize("kind", ["jsonl", "csv", "tsv"])
def test_round_trip_context_rebuilt_from_document_and_position(tmp_path, kind):
    path = _writer(kind)(tmp_path / "data", DOC_ROWS)
    data = load_as2_data(path)
    ds = data.dataset
    assert ds.column_names == list(AS2_COLUMNS)
    assert ds["context"] == REBUILT_CONTEXTS
    assert ds["candidate"] == [r["candidate"] for r in DOC_ROWS]
    assert ds["label"] == [0, 1, 0, 1]
    assert ds["position"] == [0, 2, 1, 0]
    assert ds["document_id"] == ["d1", "d1", "d1", "d2"]
    assert ds["question_id"] == ["a", "a", "a", "b"]
    assert data.source == str(path)
    assert data.stats["questions"] == 2 and data.stats["questions_with_positive"] == 2


@pytest.mark.parametrize("kind", ["jsonl", "csv", "tsv"])
def test_round_trip_context_given_wins(tmp_path, kind):
    records = [dict(r, context=f"given {i}, with comma") for i, r in enumerate(DOC_ROWS)]
    data = load_as2_data(_writer(kind)(tmp_path / "data", records))
    assert data.dataset["context"] == [f"given {i}, with comma" for i in range(4)]
    assert data.dataset["position"] == [0, 2, 1, 0]


@pytest.mark.parametrize("kind", ["jsonl", "csv", "tsv"])
def test_round_trip_no_context_no_ids(tmp_path, kind):
    records = [
        {"question": "q one?", "candidate": 'he said "yes"', "label": "1"},
        {"question": "q one?", "candidate": "s1", "label": "0"},
        {"question": "q two?", "candidate": "t0", "label": "0"},
    ]
    data = load_as2_data(_writer(kind)(tmp_path / "data", records), clean=True)
    ds = data.dataset
    assert ds["context"] == ["", ""] and ds["document_id"] == ["", ""] and ds["position"] == [-1, -1]
    assert ds["candidate"] == ['he said "yes"', "s1"]
    assert ds["question_id"] == [question_id_for("q one?")] * 2
    assert data.stats["dropped_questions_clean"] == 1 and data.stats["dropped_rows_clean"] == 1


def test_jsonl_context_list_and_accepted_labels(tmp_path):
    records = [
        {"question": "q?", "candidate": "a", "label": True, "context": ["before", "after"]},
        {"question": "q?", "candidate": "b", "label": False, "context": ["", "only after"]},
        {"question": "q?", "candidate": "c", "label": "1", "context": None},
        {"question": "q?", "candidate": "d", "label": "0", "context": []},
    ]
    data = load_as2_data(_write_jsonl(tmp_path / "x.jsonl", records))
    assert data.dataset["context"] == ["before after", "only after", "", ""]
    assert data.dataset["label"] == [1, 0, 1, 0]


def test_derived_question_ids_are_stable(tmp_path):
    records = [{"question": "q?", "candidate": "a", "label": 1}, {"question": "other?", "candidate": "b", "label": 0}]
    first = load_as2_data(_write_jsonl(tmp_path / "a.jsonl", records)).dataset["question_id"]
    second = load_as2_data(_write_csv(tmp_path / "b.csv", records)).dataset["question_id"]
    assert first == second == [question_id_for("q?"), question_id_for("other?")]
    assert first[0] != first[1]


# ----------------------------------------------------------------------------------------------------------------------
# Generic files: bad input (the bad value is always in data row 2: line 2 of a JSONL file, line 3 of a CSV file)

GOOD = [
    {"question": "q?", "candidate": "a", "label": 1, "document_id": "d", "position": 0, "context": "c"},
    {"question": "q?", "candidate": "b", "label": 0, "document_id": "d", "position": 1, "context": "c"},
    {"question": "q?", "candidate": "e", "label": 0, "document_id": "d", "position": 2, "context": "c"},
]

BAD_VALUES = [
    ("question", ""),
    ("question", "   "),
    ("candidate", "  "),
    ("label", 2),
    ("label", -1),
    ("label", 0.5),
    ("label", "yes"),
    ("position", "x"),
    ("position", 1.5),
    ("position", -3),
]


def _with_bad_value(column, value, drop_context=False):
    records = [dict(r) for r in GOOD]
    records[1][column] = value
    if drop_context:
        for r in records:
            del r["context"]
    return records


@pytest.mark.parametrize(
    ("column", "value"), BAD_VALUES + [("context", 5), ("context", {"a": 1}), ("context", ["a", 3])]
)
def test_jsonl_bad_values_name_file_row_and_column(tmp_path, column, value):
    path = _write_jsonl(tmp_path / "bad.jsonl", _with_bad_value(column, value))
    with pytest.raises(AS2DataError) as err:
        load_as2_data(path)
    message = str(err.value)
    assert str(path) in message and "line 2 (data row 2)" in message and f"'{column}'" in message


@pytest.mark.parametrize(("column", "value"), BAD_VALUES)
@pytest.mark.parametrize("kind", ["csv", "tsv"])
def test_csv_bad_values_name_file_row_and_column(tmp_path, kind, column, value):
    path = _writer(kind)(tmp_path / "bad", _with_bad_value(column, value, drop_context=column == "position"))
    with pytest.raises(AS2DataError) as err:
        load_as2_data(path)
    message = str(err.value)
    assert str(path) in message and "line 3 (data row 2)" in message and f"'{column}'" in message


def test_jsonl_row_numbers_count_blank_lines(tmp_path):
    path = tmp_path / "blank.jsonl"
    lines = [json.dumps(GOOD[0]), "", json.dumps(dict(GOOD[1], label="yes"))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(AS2DataError, match=r"line 3 \(data row 2\), column 'label'"):
        load_as2_data(path)


def test_csv_row_numbers_follow_multiline_fields(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text('question,candidate,label\n"q\nspanning lines?",a,1\nq?,b,7\n', encoding="utf-8")
    with pytest.raises(AS2DataError, match=r"line 4 \(data row 2\), column 'label'"):
        load_as2_data(path)


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_missing_required_column(tmp_path, kind):
    records = [{k: v for k, v in r.items() if k != "label"} for r in GOOD]
    path = _writer(kind)(tmp_path / "nolabel", records)
    with pytest.raises(AS2DataError, match="missing required column") as err:
        load_as2_data(path)
    assert str(path) in str(err.value) and "'label'" in str(err.value)
    assert ("line 1 (header)" if kind == "csv" else "all records") in str(err.value)


def test_json_array_and_gzip_jsonl(tmp_path):
    array = tmp_path / "array.json"
    array.write_text(json.dumps([dict(r) for r in GOOD]), encoding="utf-8")
    assert load_as2_data(array).dataset["context"] == ["c", "c", "c"]
    array.write_text(json.dumps([GOOD[0], dict(GOOD[1], label=-1)]), encoding="utf-8")
    with pytest.raises(AS2DataError, match=r"array.json: record 2 \(index 1\), column 'label'"):
        load_as2_data(array)
    packed = tmp_path / "packed.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({k: v for k, v in r.items() if k != "context"}) + "\n" for r in GOOD)
    assert load_as2_data(packed).dataset["context"] == ["b", "a e", "b"]


def test_jsonl_record_missing_a_required_key(tmp_path):
    records = [dict(r) for r in GOOD]
    del records[2]["candidate"]
    path = _write_jsonl(tmp_path / "partial.jsonl", records)
    with pytest.raises(AS2DataError, match=r"partial.jsonl: line 3 \(data row 3\), column 'candidate'"):
        load_as2_data(path)


def test_conflicting_sentences_at_one_position(tmp_path):
    records = [dict(r) for r in GOOD]
    for r in records:
        del r["context"]
    records[2]["position"] = 0  # same document and position as row 1, different sentence
    with pytest.raises(AS2DataError, match=r"line 3 \(data row 3\).*'candidate'.*position 0"):
        load_as2_data(_write_jsonl(tmp_path / "conflict.jsonl", records))


def test_question_id_reused_for_another_question(tmp_path):
    records = [dict(r, question_id="same") for r in GOOD]
    records[2]["question"] = "another question?"
    with pytest.raises(AS2DataError, match=r"line 3 \(data row 3\), column 'question_id'"):
        load_as2_data(_write_jsonl(tmp_path / "ids.jsonl", records))


def test_empty_and_unknown_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(AS2DataError, match="no data rows"):
        load_as2_data(empty)
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        load_as2_data(tmp_path / "absent.jsonl")
    odd = tmp_path / "data.xyz"
    odd.write_text("question,candidate,label\nq,a,1\n", encoding="utf-8")
    with pytest.raises(AS2DataError, match="unknown file type"):
        load_as2_data(odd)
    assert load_as2_data(odd, delimiter=",").stats["rows"] == 1


# ----------------------------------------------------------------------------------------------------------------------
# datasets inputs


def test_dataset_input():
    ds = datasets.Dataset.from_dict(
        {
            "question": ["q?", "q?", "r?"],
            "candidate": ["a", "b", "c"],
            "label": [1, 0, 0],
            "document_id": ["d", "d", "e"],
            "position": [1, 0, 0],
            "extra": [1, 2, 3],
        }
    )
    data = load_as2_data(ds, clean=True)
    assert data.dataset.column_names == list(AS2_COLUMNS)
    assert data.dataset["context"] == ["b", "a"]
    assert data.stats["rows"] == 2 and data.stats["dropped_questions_clean"] == 1
    assert data.source.startswith("datasets.Dataset")


def test_dataset_input_errors_name_the_row():
    ds = datasets.Dataset.from_dict({"question": ["q?", "q?"], "candidate": ["a", "b"], "label": [1, 2]})
    with pytest.raises(AS2DataError, match=r"datasets.Dataset.*row 2 \(index 1\), column 'label'"):
        load_as2_data(ds)
    with pytest.raises(AS2DataError, match=r"my data: row 2 \(index 1\), column 'label'"):
        load_as2_data(ds, description="my data")
    ds = datasets.Dataset.from_dict({"question": ["q?"], "candidate": ["a"], "label": [1], "context": [7]})
    with pytest.raises(AS2DataError, match=r"row 1 \(index 0\), column 'context'"):
        load_as2_data(ds)


def test_dataset_dict_saved_to_disk_and_load_dataset(tmp_path):
    records = {"question": ["q?", "q?"], "candidate": ["a", "b"], "label": [1, 0], "context": [["x", "y"], ["z"]]}
    saved = tmp_path / "saved"
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict(records)}).save_to_disk(str(saved))
    data = load_as2_data(saved, split="validation")
    assert data.dataset["context"] == ["x y", "z"]
    assert data.source == str(saved)

    jsonl = _write_jsonl(tmp_path / "hub_like.jsonl", [dict(r, label=1) for r in GOOD])
    data = load_as2_data("json", data_files=str(jsonl), cache_dir=str(tmp_path / "cache"))
    assert data.dataset["label"] == [1, 1, 1] and data.stats["questions_with_positive"] == 1
    assert "dataset 'json'" in data.source

"""Property tests: every data reader, fed malformed files, either returns valid records or raises ITS typed error
naming the file and the line/row (and the example id where one exists) -- never another exception, never a hang.

Files are built from mostly valid records with mutations drawn by hypothesis: wrong types, missing fields, empty and
huge strings, lone surrogates, NaN/inf labels, truncated JSON, non-object JSON lines, invalid UTF-8, a BOM.
"""

import csv
import io
import json
import math
import re
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2hub.data_collators import CorpusConfig, CorpusError, load_documents
from as2hub.data_collators.readers.as2_data import AS2_COLUMNS, WIKIQA_COLUMNS, AS2DataError, load_as2_data, read_wikiqa
from as2hub.data_collators.readers.fv_data import FactVerificationDataError, load_fv_data
from as2hub.data_collators.readers.hotpotqa import HotpotQAError, read_hotpotqa
from as2hub.data_collators.readers.joint_data import ScoreColumn

FUZZ = settings(
    max_examples=30,
    deadline=timedelta(seconds=10),  # a hang fails the test instead of stalling CI
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

# Where an error points: a line, a data row, a record, or "path:line" (corpus); file-level problems say what is wrong
# with the whole file instead.
LOCATION = re.compile(r"(line \d+|row \d+|record \d+|:\d+:)")
FILE_LEVEL = (
    "no data rows",
    "empty file",
    "missing required column",
    "no examples",
    "keeps no question",
    "empty corpus",
    "no column",
    "cannot read",
)
HUGE = "x" * 200_000

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
)
texts = st.text(min_size=1, max_size=20) | st.sampled_from(["", "   ", HUGE, "caf\u00e9 \u2028 line", "\ud800"])


def field_value(valid):
    """Mostly a valid value, sometimes anything JSON can hold."""
    return st.one_of(valid, valid, valid, json_values)


@st.composite
def record(draw, fields: dict):
    out = {}
    for name, valid in fields.items():
        if draw(st.integers(0, 9)) == 0:
            continue  # missing field
        out[name] = draw(field_value(valid))
    return out


def json_line(draw, value) -> bytes:
    """One JSON line, possibly corrupted: truncated, not an object, with invalid UTF-8."""
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    kind = draw(st.sampled_from(["ok"] * 8 + ["truncated", "array", "scalar", "bad_utf8"]))
    if kind == "truncated":
        text = text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    elif kind == "array":
        text = json.dumps([value])
    elif kind == "scalar":
        text = json.dumps(draw(json_scalars))
    data = text.encode("utf-8", "surrogatepass")
    if kind == "bad_utf8":
        cut = draw(st.integers(0, len(data)))
        data = data[:cut] + b"\xff\xfe" + data[cut:]
    return data


def with_bom(draw, data: bytes) -> bytes:
    return (b"\xef\xbb\xbf" + data) if draw(st.booleans()) else data


def write(folder: str, name: str, data: bytes) -> Path:
    path = Path(folder) / name
    path.write_bytes(data)
    return path


def check_error(error: Exception, path: Path, example_ids=()) -> None:
    message = str(error)
    assert str(path) in message, message[:300]
    if not any(phrase in message for phrase in FILE_LEVEL):
        assert LOCATION.search(message), message[:300]
    assert "\n" not in message.strip() or len(message) < 2000


def read_or_typed_error(read, path: Path, error_type):
    """``read(path)``; a typed error is checked and gives None; any other exception fails the test."""
    try:
        return read(path)
    except error_type as error:
        check_error(error, path)
        return None


# ---------------------------------------------------------------------------------------------- generic AS2 files

AS2_FIELDS = {
    "question_id": st.text(min_size=1, max_size=4) | st.integers(0, 5),
    "question": st.sampled_from(["who wrote it?", "when was it built?"]) | texts,
    "candidate": texts,
    "label": st.sampled_from([0, 1, "0", "1", True, 1.0, float("nan"), float("inf"), 2, None, "yes"]),
    "context": texts | st.lists(texts, max_size=2),
    "document_id": st.sampled_from(["d1", "d2", 7]),
    "position": st.integers(-2, 5) | st.sampled_from([2**70, 1.5, float("nan"), "3", ""]),
}


def check_as2(data) -> None:
    assert data.dataset.column_names == list(AS2_COLUMNS)
    rows = data.dataset.to_dict()
    assert all(label in (0, 1) for label in rows["label"])
    assert all(isinstance(q, str) and q.strip() for q in rows["question"] + rows["candidate"])


@FUZZ
@given(st.data())
def test_as2_jsonl_reader(data):
    records = data.draw(st.lists(record(AS2_FIELDS), min_size=0, max_size=5))
    lines = [json_line(data.draw, r) for r in records]
    if data.draw(st.booleans()):
        lines.insert(0, b"")  # a blank line is skipped
    payload = with_bom(data.draw, b"\n".join(lines))
    clean = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "data.jsonl", payload)
        result = read_or_typed_error(lambda p: load_as2_data(p, clean=clean), path, AS2DataError)
    if result is not None:
        check_as2(result)


@FUZZ
@given(st.data())
def test_as2_json_array_reader(data):
    records = data.draw(st.lists(record(AS2_FIELDS) | json_scalars, min_size=0, max_size=4))
    text = json.dumps(records, ensure_ascii=data.draw(st.booleans()))
    if data.draw(st.integers(0, 3)) == 0:
        text = text[: data.draw(st.integers(0, len(text)))]
    payload = with_bom(data.draw, text.encode("utf-8", "surrogatepass"))
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "data.json", payload)
        result = read_or_typed_error(load_as2_data, path, AS2DataError)
    if result is not None:
        check_as2(result)


cells = st.sampled_from(["0", "1", "2", "", "nan", "who?", "an answer.", 'a "quoted", cell', "tab\there", "new\nline"])
cells = cells | st.text(max_size=10) | st.just(HUGE)


@FUZZ
@given(st.data(), st.sampled_from(["csv", "tsv"]))
def test_as2_csv_tsv_reader(data, kind):
    names = ["question", "candidate", "label", "context", "document_id", "position", "question_id", "extra"]
    header = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=6))
    rows = data.draw(
        st.lists(st.lists(cells, min_size=len(header) - 1, max_size=len(header) + 1), min_size=0, max_size=5)
    )
    if kind == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows(rows)
        text = buffer.getvalue()
    else:
        text = "\n".join("\t".join(row) for row in [header, *rows]) + "\n"
    payload = text.encode("utf-8", "surrogatepass")
    if data.draw(st.integers(0, 4)) == 0:
        cut = data.draw(st.integers(0, len(payload)))
        payload = payload[:cut] + b"\x80" + payload[cut:]
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, f"data.{kind}", with_bom(data.draw, payload))
        result = read_or_typed_error(lambda p: load_as2_data(p, clean=True), path, AS2DataError)
    if result is not None:
        check_as2(result)


# ---------------------------------------------------------------------------------------------------- WikiQA TSV


@FUZZ
@given(st.data())
def test_wikiqa_reader(data):
    sentence_ids = st.sampled_from(["D1-0", "D1-1", "D2-0", "D1", "x", "", "D1-99999999999999999999"])
    row = st.tuples(
        st.sampled_from(["Q1", "Q2", "", " "]),
        st.sampled_from(["how are glaciers formed?", ""]) | st.text(max_size=5),
        st.sampled_from(["D1", "D2", ""]),
        st.just("Glacier"),
        sentence_ids,
        cells,
        st.sampled_from(["0", "1", "2", "", "nan"]),
    ).map(list)
    rows = data.draw(st.lists(row, max_size=5))
    for fields in rows:  # sometimes a field too many or too few
        if data.draw(st.integers(0, 6)) == 0:
            fields.append("x") if data.draw(st.booleans()) else fields.pop()
    header = list(WIKIQA_COLUMNS) if data.draw(st.integers(0, 6)) else ["QuestionID", "Question"]
    text = "\r\n".join("\t".join(fields) for fields in [header, *rows])
    payload = with_bom(data.draw, text.encode("utf-8", "surrogatepass"))
    if data.draw(st.integers(0, 4)) == 0:
        cut = data.draw(st.integers(0, len(payload)))
        payload = payload[:cut] + b"\xc3\x28" + payload[cut:]
    clean = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "WikiQA-fuzz.tsv", payload)
        result = read_or_typed_error(lambda p: read_wikiqa(p, clean=clean), path, AS2DataError)
    if result is not None:
        check_as2(result)


# ------------------------------------------------------------------------------------------------------- HotpotQA

TITLES = ["Alpha", "Beta"]
HOTPOT_FIELDS = {
    "_id": st.sampled_from(["a1", "a2", "a3", ""]),
    "question": st.sampled_from(["Which came first?", ""]) | texts,
    "answer": st.sampled_from(["yes", "no", "Alpha", "", "not there"]),
    "type": st.sampled_from(["comparison", "bridge"]),
    "supporting_facts": st.lists(st.tuples(st.sampled_from([*TITLES, "Gamma"]), st.integers(-1, 3)).map(list)),
    "context": st.lists(
        st.tuples(
            st.sampled_from(TITLES), st.lists(st.sampled_from(["Alpha is old.", "Beta is new.", "", "Odd \udc80."]))
        ).map(list),
        max_size=3,
    ),
}


@FUZZ
@given(st.data(), st.sampled_from(["json", "jsonl"]), st.booleans())
def test_hotpotqa_reader(data, kind, skip_invalid):
    records = data.draw(st.lists(record(HOTPOT_FIELDS), max_size=4))
    if kind == "jsonl":
        payload = b"\n".join(json_line(data.draw, r) for r in records)
    else:
        text = json.dumps(records)
        if data.draw(st.integers(0, 3)) == 0:
            text = text[: data.draw(st.integers(0, len(text)))]
        payload = text.encode("utf-8", "surrogatepass")
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, f"hotpot.{kind}", with_bom(data.draw, payload))
        try:
            result = read_hotpotqa(path, skip_invalid=skip_invalid)
        except HotpotQAError as error:
            check_error(error, path)
            named = [f", example id {r['_id']!r}" for r in records if isinstance(r, dict) and "_id" in r]
            assert ", example id " not in str(error) or any(name in str(error) for name in named)
            return
    assert len(result.dataset) == result.stats["examples"] >= 1
    assert sum(result.stats["skipped"].values()) == 0 or skip_invalid


# ----------------------------------------------------------------------------------------------- fact verification

FV_FIELDS = {
    "id": st.sampled_from(["c1", "c2", 3, "", True]),
    "claim": st.sampled_from(["The sky is green.", ""]) | texts,
    "evidences": st.lists(texts, max_size=3),
    "label": st.sampled_from(["SUPPORTS", "REFUTES", "NOT ENOUGH INFO", "supports", 0, 2, 5, -1, 1.5, None, "maybe"]),
}


@FUZZ
@given(st.data())
def test_fact_verification_reader(data):
    records = data.draw(st.lists(record(FV_FIELDS), max_size=5))
    payload = with_bom(data.draw, b"\n".join(json_line(data.draw, r) for r in records))
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "claims.jsonl", payload)
        result = read_or_typed_error(load_fv_data, path, FactVerificationDataError)
    if result is not None:
        rows = result.dataset.to_dict()
        assert all(0 <= label < len(result.labels) for label in rows["label"])
        assert all(evidences for evidences in rows["evidences"])


# ------------------------------------------------------------------------------------------ joint top_k score column

SCORE_FIELDS = {
    "question": st.sampled_from(["who?", "when?"]),
    "candidate": st.sampled_from(["a.", "b.", "c."]),
    "label": st.sampled_from([0, 1]),
    "score": st.floats() | st.sampled_from(["0.5", "x", "", "inf", None, True]),
}


@FUZZ
@given(st.data(), st.sampled_from(["jsonl", "csv", "tsv"]))
def test_joint_score_column_reader(data, kind):
    records = data.draw(st.lists(record(SCORE_FIELDS), max_size=5))
    if kind == "jsonl":
        payload = b"\n".join(json_line(data.draw, r) for r in records)
    else:
        buffer = io.StringIO()
        delimiter = "," if kind == "csv" else "\t"
        header = data.draw(st.sampled_from([list(SCORE_FIELDS), ["question", "candidate", "label"]]))
        writer = csv.writer(buffer, delimiter=delimiter)
        writer.writerow(header)
        for r in records:
            row = [str(r.get(name, "")) for name in header]
            if data.draw(st.integers(0, 5)) == 0:
                row = row[:-1]  # a field missing
            writer.writerow(row)
        payload = buffer.getvalue().encode("utf-8", "surrogatepass")
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, f"scores.{kind}", with_bom(data.draw, payload))
        column = read_or_typed_error(lambda p: ScoreColumn(p, "score"), path, AS2DataError)
    if column is not None:
        assert all(math.isfinite(v) for values in column._scores.values() for v in values)


# --------------------------------------------------------------------------------------------------- corpus reader

CORPUS_TEXT = st.sampled_from(
    [
        "Glaciers form where snow accumulates. They move slowly downhill.\n\nIce ages shaped valleys. Moraines remain.",
        "",
        "short",
    ]
)


@pytest.fixture(scope="module")
def sentence_splitter_loaded():
    """Load the sentence splitter once, outside the timed examples."""
    from as2hub.data_collators.readers.sentence_splitter import split_sentences

    split_sentences("One sentence. Another one.", "english")


@FUZZ
@given(st.data(), st.sampled_from(["jsonl", "txt"]))
def test_corpus_reader(sentence_splitter_loaded, data, kind):
    config = CorpusConfig(min_sentence_chars=5, min_paragraph_chars=10, min_document_chars=10)
    if kind == "jsonl":
        fields = {"text": CORPUS_TEXT | json_values, "id": st.sampled_from(["d1", 2, None])}
        records = data.draw(st.lists(record(fields), max_size=4))
        payload = b"\n".join(json_line(data.draw, r) for r in records)
    else:
        payload = data.draw(CORPUS_TEXT).encode()
        if data.draw(st.booleans()):
            cut = data.draw(st.integers(0, len(payload)))
            payload = payload[:cut] + b"\xff" + payload[cut:]
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, f"corpus.{kind}", with_bom(data.draw, payload))
        result = read_or_typed_error(lambda p: load_documents(str(p), config), path, CorpusError)
    if result is not None:
        documents, stats = result
        assert len(documents) == stats.documents_kept >= 1


# ------------------------------------------------------------------------------------------ regressions, explicit


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "tsv"])
def test_invalid_utf8_names_the_file_and_line(tmp_path, suffix):
    good = {
        "jsonl": b'{"question": "q?", "candidate": "a.", "label": 1}',
        "json": b"[",
        "csv": b"question,candidate,label",
    }
    head = good.get(suffix, b"question\tcandidate\tlabel")
    path = tmp_path / f"data.{suffix}"
    path.write_bytes(head + b"\n" + b"\xff\xfe broken\n")
    with pytest.raises(AS2DataError, match=rf"{re.escape(str(path))}: line 2: invalid utf-8"):
        load_as2_data(path)


def test_a_bom_and_u2028_inside_a_json_string_are_accepted(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [
        {"question": "q\u2028?", "candidate": "a.", "label": 1},
        {"question": "q\u2028?", "candidate": "b", "label": 0},
    ]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode())
    assert load_as2_data(path).dataset["question"] == ["q\u2028?", "q\u2028?"]


def test_a_clean_split_without_any_question_says_so(tmp_path):
    path = tmp_path / "dev.jsonl"
    rows = [{"question": "q1?", "candidate": "a.", "label": 1}, {"question": "q2?", "candidate": "b.", "label": 0}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert len(load_as2_data(path)) == 2
    with pytest.raises(AS2DataError, match=r"dev.jsonl: the clean setting keeps no question: none of its 2 questions"):
        load_as2_data(path, clean=True)


def test_lone_surrogates_are_named_by_every_json_reader(tmp_path):
    """``"\\ud800"`` is valid JSON but not storable text: the reader names the record and the field."""
    hotpot = {"_id": "h1", "question": "Which came first?", "answer": "yes", "type": "comparison",
              "supporting_facts": [["Alpha", 0]], "context": [["Alpha", ["Alpha is old \ud800."]]]}  # fmt: skip
    path = tmp_path / "hotpot.jsonl"
    path.write_text(json.dumps(hotpot))
    with pytest.raises(HotpotQAError, match=r"hotpot.jsonl: line 1, example id 'h1': invalid Unicode in key 'context'"):
        read_hotpotqa(path)
    path = tmp_path / "claims.jsonl"
    path.write_text(json.dumps({"claim": "ok", "evidences": ["bad \udc00"], "label": "SUPPORTS"}))
    with pytest.raises(
        FactVerificationDataError, match=r"claims.jsonl: line 1 \(data row 1\): invalid Unicode in key 'ev"
    ):
        load_fv_data(path)
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"text": "bad \ud800"}))
    with pytest.raises(CorpusError, match=r"corpus.jsonl:1: invalid Unicode in key 'text'"):
        load_documents(str(path))
    path = tmp_path / "as2.jsonl"
    path.write_text(json.dumps({"question": "q?", "candidate": "bad \ud800", "label": 1}))
    with pytest.raises(AS2DataError, match=r"as2.jsonl: line 1 \(data row 1\), column 'candidate': invalid Unicode"):
        load_as2_data(path)

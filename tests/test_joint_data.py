"""Data for the joint models: the MSPP sampler (property tests), generation, the collator, grouping, FV files."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2hub.data_collators import (
    FactVerificationDataError,
    JointCollator,
    ScoreColumn,
    StructurePretrainingIterableDataset,
    generate_pretraining_dataset,
    group_candidates,
    load_as2_data,
    load_fv_data,
)
from as2hub.data_collators.objectives.structure_objectives import IGNORE_LABEL, generate_examples, mspp
from as2hub.data_collators.readers.as2_data import AS2DataError


def sentence(d: int, p: int, s: int) -> str:
    return f"d{d}p{p}s{s}."


def decode(text: str) -> tuple[int, int, int]:
    d, rest = text[1:-1].split("p")
    p, s = rest.split("s")
    return int(d), int(p), int(s)


@st.composite
def batches(draw, min_docs: int = 1, max_docs: int = 5):
    docs = []
    for d in range(draw(st.integers(min_docs, max_docs))):
        lengths = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
        docs.append([[sentence(d, p, s) for s in range(n)] for p, n in enumerate(lengths)])
    return docs


COUNTS = st.tuples(st.integers(1, 3), st.integers(0, 3), st.integers(0, 3))  # (k+, k_hard, k_easy)
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(docs=batches(), seed=st.integers(0, 2**32), counts=COUNTS)
def test_mspp_examples_obey_the_definition(docs, seed, counts):
    positives, hard, easy = counts
    examples = mspp(docs, seed, num_positives=positives, max_hard_negatives=hard, num_negatives=hard + easy)
    # One example per paragraph of >= 2 sentences, in document / paragraph order.
    anchors = [(d, i) for d, doc in enumerate(docs) for i, paragraph in enumerate(doc) if len(paragraph) >= 2]
    assert [(ex["a_doc"], ex["a_par"]) for ex in examples] == anchors
    for ex in examples:
        d, i = ex["a_doc"], ex["a_par"]
        assert decode(ex["text_a"]) == (d, i, ex["a_sents"][0])
        decoded = [decode(text) for text in ex["candidates"]]
        assert decoded == list(zip(ex["candidate_docs"], ex["candidate_pars"], ex["candidate_sents"]))
        assert len(ex["labels"]) == len(ex["candidates"]) == len(ex["candidate_kinds"])
        for (cd, cp, cs), kind, label in zip(decoded, ex["candidate_kinds"], ex["labels"]):
            assert label == int(cd == d and cp == i), "label 1 exactly where the sentence is from P"
            if kind == "positive":
                assert (cd, cp) == (d, i) and cs != ex["a_sents"][0], "positives: other sentences of P"
            elif kind == "hard":
                assert cd == d and cp != i, "hard negatives: other paragraphs of the same document"
            else:
                assert kind == "easy" and cd != d, "easy negatives: other documents of the batch"
        own = [(cd, cp, cs) for (cd, cp, cs), kind in zip(decoded, ex["candidate_kinds"]) if kind != "easy"]
        assert len(set(own)) == len(own), "positives and hard negatives are distinct sentences"
        # Counts: each level filled from the next easier one when the document is too small.
        kinds = Counter(ex["candidate_kinds"])
        n = len(docs[d][i])
        other_sentences = sum(len(p) for j, p in enumerate(docs[d]) if j != i)
        assert kinds["positive"] == min(positives, n - 1)
        assert kinds["hard"] == min(hard + positives - kinds["positive"], other_sentences)
        has_other_document = len(docs) > 1
        expected_easy = positives + hard + easy - kinds["positive"] - kinds["hard"] if has_other_document else 0
        assert kinds["easy"] == expected_easy
        assert len(ex["candidates"]) == (positives + hard + easy if has_other_document else len(own))


@settings(max_examples=30, deadline=None)
@given(docs=batches(), seed=st.integers(0, 2**32))
def test_mspp_is_reproducible_from_the_seed_and_shuffles(docs, seed):
    first = mspp(docs, seed)
    assert first == mspp(docs, random.Random(seed)) == generate_examples("mspp", docs, seed)
    ablation = generate_examples("mlm_mspp", docs, seed)
    for structured, mlm_only in zip(first, ablation, strict=True):
        assert mlm_only["labels"] == [IGNORE_LABEL] * len(structured["labels"])
        assert mlm_only["structure_labels"] == structured["labels"]
        assert mlm_only["candidates"] == structured["candidates"]


def test_mspp_defaults_are_the_papers_and_positions_are_shuffled():
    docs = [[[sentence(d, p, s) for s in range(5)] for p in range(4)] for d in range(6)]
    examples = mspp(docs, 0)
    assert all(Counter(ex["candidate_kinds"]) == {"positive": 1, "hard": 2, "easy": 2} for ex in examples)
    slots = Counter(ex["labels"].index(1) for ex in examples)
    assert len(slots) == 5, slots  # the positive is not always in the same slot
    assert mspp(docs, 0) != mspp(docs, 1)
    stats: Counter = Counter()
    mspp([[[sentence(0, 0, 0)]], [[sentence(1, 0, 0), sentence(1, 0, 1)]]], 0, stats=stats)
    assert stats["groups"] == 1 and stats["documents_skipped"] == 1 and stats["paragraphs_skipped"] == 1
    with pytest.raises(ValueError, match="num_positives >= 1"):
        mspp(docs, 0, num_positives=0)


def test_mspp_materialised_equals_streaming_and_is_independent_of_num_proc():
    docs = [[[sentence(d, p, s) for s in range(1 + (d + p) % 4)] for p in range(3)] for d in range(12)]
    one = generate_pretraining_dataset(docs, "mspp", seed=3, documents_per_batch=4)
    two = generate_pretraining_dataset(docs, "mspp", seed=3, documents_per_batch=4, num_proc=2)
    assert one.to_list() == two.to_list() and len(one) > 0
    stream = StructurePretrainingIterableDataset(
        docs, "mspp", seed=3, documents_per_batch=4, shuffle_documents=False, shuffle_examples=False
    )
    streamed = list(stream)
    assert [{k: ex[k] for k in one.column_names} for ex in streamed] == one.to_list()
    bare = generate_pretraining_dataset(docs, "mlm_mspp", seed=3, documents_per_batch=4, keep_provenance=False)
    assert bare.column_names == ["text_a", "candidates", "labels", "structure_labels"]


def test_collator_masks_only_text_tokens_and_carries_slot_labels(tokenizers):
    tokenizer = tokenizers["bert"]
    collator = JointCollator(tokenizer, 3, 12, mlm_probability=0.5, seed=0, label_name="sentence_labels")
    features = [
        {"text_a": "The import statement finds a module.", "candidates": ["Modules are objects.", "A tuple."],
         "labels": [1, 0]},
        {"text_a": "Generators yield values.", "candidates": ["Lazily.", "Iterators.", "Yield."], "labels": [0, 0, 1]},
    ]  # fmt: skip
    batch = collator(features)
    plain = JointCollator(tokenizer, 3, 12)(features)
    assert batch["sentence_labels"].tolist() == [[1, 0, -100], [0, 0, 1]]
    masked = batch["labels"] != -100
    assert masked.sum() > 0
    special = torch.tensor([collator.layout.build(*_ids(tokenizer, f))["special_tokens_mask"] for f in features])
    assert not (masked & special.bool()).any(), "special tokens, padding and empty slots are never masked"
    torch.testing.assert_close(batch["labels"][masked], plain["input_ids"][masked])
    unmasked = ~masked
    torch.testing.assert_close(batch["input_ids"][unmasked], plain["input_ids"][unmasked])
    with pytest.raises(ValueError, match="label_name='sentence_labels'"):
        JointCollator(tokenizer, 3, 12, mlm_probability=0.15)
    with pytest.raises(ValueError, match="slot_length must be >= 3"):
        JointCollator(tokenizer, 3, 2)


def _ids(tokenizer, feature):
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    return encode(feature["text_a"]), [encode(text) for text in feature["candidates"]]


def as2_dataset(tmp_path, rows):
    path = tmp_path / "as2.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ROWS = [
    {"question_id": "q1", "question": "Q one?", "candidate": f"c{i}", "label": int(i == 4), "score": [0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.4][i]}
    for i in range(7)
] + [{"question_id": "q2", "question": "Q two?", "candidate": f"d{i}", "label": int(i == 0), "score": 0.5 - i / 10} for i in range(2)]  # fmt: skip


def test_grouping_all_covers_every_candidate_and_top_k_takes_the_pairwise_best(tmp_path):
    path = as2_dataset(tmp_path, ROWS)
    data = load_as2_data(path).dataset
    groups = group_candidates(data, 3, "all")
    assert groups["rows"] == [[0, 1, 2], [3, 4, 5], [6], [7, 8]]
    assert groups["labels"][1] == [0, 1, 0] and groups["candidates"][2] == ["c6"]
    shuffled = group_candidates(data, 3, "all", shuffle_seed=1)
    assert sorted(r for rows in shuffled["rows"] for r in rows) == list(range(9))
    assert (
        shuffled["rows"] != groups["rows"]
        and shuffled["rows"] == group_candidates(data, 3, "all", shuffle_seed=1)["rows"]
    )
    scores = ScoreColumn(path, "score").scores_for(data, str(path))
    assert scores == [row["score"] for row in ROWS]
    top = group_candidates(data, 3, "top_k", scores)
    assert top["rows"] == [[1, 4, 2], [7, 8]]
    training = group_candidates(data, 3, "top_k", scores, shuffle_seed=0)
    assert [sorted(rows) for rows in training["rows"]] == [[1, 2, 4], [7, 8]]
    with pytest.raises(ValueError, match="top_k grouping needs one pairwise score per row"):
        group_candidates(data, 3, "top_k")


def test_score_column_survives_the_clean_filter_and_names_missing_rows(tmp_path):
    rows = ROWS + [{"question_id": "q3", "question": "All wrong?", "candidate": "e", "label": 0, "score": 0.3}]
    path = as2_dataset(tmp_path, rows)
    clean = load_as2_data(path, clean=True).dataset
    assert ScoreColumn(path, "score").scores_for(clean, "clean") == [row["score"] for row in ROWS]
    rows[3]["score"] = "high"
    with pytest.raises(AS2DataError, match=r"as2\.jsonl: line 4 \(data row 4\), column 'score': expected a number"):
        ScoreColumn(as2_dataset(tmp_path, rows), "score")
    del rows[3]["score"]
    with pytest.raises(AS2DataError, match=r"line 4 \(data row 4\), column 'score': missing score"):
        ScoreColumn(as2_dataset(tmp_path, rows), "score")
    csv_path = tmp_path / "as2.csv"
    csv_path.write_text("question,candidate,label\nQ?,a,1\n")
    with pytest.raises(AS2DataError, match=r"as2\.csv: line 1 \(header\): no column 'score'"):
        ScoreColumn(csv_path, "score")


def write_fv(tmp_path, records, name="fv.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


FV_OK = {"claim": "Hamlet is a comedy.", "evidences": ["Hamlet is a tragedy."], "label": "REFUTES"}


def test_fv_reader_validates_every_line(tmp_path):
    data = load_fv_data(write_fv(tmp_path, [FV_OK, {**FV_OK, "label": "supports", "id": 7}, {**FV_OK, "label": 2}]))
    assert data.dataset["label"] == [1, 0, 2] and data.dataset["claim_id"] == ["line-1", "7", "line-3"]
    assert data.stats["labels"] == {"SUPPORTS": 1, "REFUTES": 1, "NOT ENOUGH INFO": 1}
    cases = [
        ({**FV_OK, "evidences": "Hamlet is a tragedy."}, r", key 'evidences': expected a list of strings, got str"),
        ({**FV_OK, "label": "MAYBE"}, r", key 'label': unknown label 'MAYBE'; expected one of SUPPORTS, REFUTES, NOT ENOUGH INFO"),
        ({**FV_OK, "evidences": []}, r", key 'evidences': no evidences"),
        ({**FV_OK, "evidences": ["ok", 3]}, r", key 'evidences': evidence 1 must be a non-empty string, got int"),
        ({"claim": "x", "label": "REFUTES"}, r", key 'evidences': missing key"),
        ({**FV_OK, "claim": " "}, r", key 'claim': expected a non-empty string"),
        ("{not json", r": invalid JSON"),
    ]  # fmt: skip
    for bad, message in cases:
        with pytest.raises(FactVerificationDataError, match=r"fv\.jsonl: line 2 \(data row 2\)" + message):
            load_fv_data(write_fv(tmp_path, [FV_OK, bad]))
    with pytest.raises(FactVerificationDataError, match="no data rows"):
        load_fv_data(write_fv(tmp_path, [""]))
    assert issubclass(FactVerificationDataError, ValueError)

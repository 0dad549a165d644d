"""HotpotQA-style input: reader (both layouts), bad input, marker tokens, the input builder, truncation, the collator,
and WikiQA as an evidence task."""

import copy
import json

import datasets
import pytest
import torch
from helpers import needs_wikiqa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qe_records import RECORDS

from as2hub.data_collators import (
    HotpotQACollator,
    HotpotQAEncoder,
    HotpotQAError,
    add_marker_tokens,
    read_hotpotqa,
    wikiqa_distractor,
)
from as2hub.data_collators.collators.hotpotqa_markers import marker_token_ids
from as2hub.data_collators.readers.hotpotqa import WIKIQA_QUESTION_TYPES
from as2hub.modeling import LongformerQEConfig, LongformerWithQEContrastive
from as2hub.modeling.longformer_qe import MARKER_TOKENS, infer_marker_inputs


def datasets_layout(record):
    return {
        "id": record["_id"],
        "question": record["question"],
        "answer": record["answer"],
        "type": record["type"],
        "level": record["level"],
        "supporting_facts": {
            "title": [t for t, _ in record["supporting_facts"]],
            "sent_id": [k for _, k in record["supporting_facts"]],
        },
        "context": {
            "title": [t for t, _ in record["context"]],
            "sentences": [s for _, s in record["context"]],
        },
    }


def write_json(path, records, lines=False):
    path.write_text("\n".join(json.dumps(r) for r in records) if lines else json.dumps(records))
    return path


def tiny_model(tokenizer, **overrides):
    config = LongformerQEConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        attention_window=16,
        max_position_embeddings=514,
        pad_token_id=tokenizer.pad_token_id,
        **overrides,
    )
    torch.manual_seed(0)
    return LongformerWithQEContrastive(config)


@pytest.fixture(scope="module")
def marked(tokenizers):
    """{style: (tokenizer with markers, tiny model)}."""
    out = {}
    for style, tokenizer in tokenizers.items():
        tokenizer = copy.deepcopy(tokenizer)
        model = tiny_model(tokenizer)
        add_marker_tokens(tokenizer, model)
        out[style] = (tokenizer, model)
    return out


# ------------------------------------------------------------------------------------------------------------------
# Reader


def test_json_array_jsonl_and_datasets_layout_read_the_same(tmp_path):
    array = read_hotpotqa(write_json(tmp_path / "a.json", RECORDS))
    jsonl = read_hotpotqa(write_json(tmp_path / "a.jsonl", RECORDS, lines=True))
    in_memory = datasets.Dataset.from_list([datasets_layout(r) for r in RECORDS])
    from_dataset = read_hotpotqa(in_memory)
    in_memory.save_to_disk(str(tmp_path / "saved"))
    from_disk = read_hotpotqa(tmp_path / "saved")
    rows = array.dataset.to_list()
    assert rows == jsonl.dataset.to_list() == from_dataset.dataset.to_list() == from_disk.dataset.to_list()
    assert [r["answer_type"] for r in rows] == ["span", "yes", "no"]
    assert rows[0]["supporting_facts"] == {"title": ["Paris", "Eiffel Tower"], "sent_id": [0, 1]}
    assert rows[0]["context"]["sentences"][2] == ["It is a tall iron tower.", "The tower stands in Paris."]
    assert array.stats == {"examples": 3, "answer_types": {"span": 1, "yes": 1, "no": 1}, "skipped": {}}


BAD = {
    "answer_not_found": (lambda r: r.update(answer="Berlin"), "answer 'Berlin' not found"),
    "supporting_fact_missing_title": (
        lambda r: r.update(supporting_facts=[["Rome", 0]]),
        "names a title not in the context",
    ),
    "supporting_fact_missing_sentence": (
        lambda r: r.update(supporting_facts=[["Paris", 5]]),
        "points past the paragraph's 2 sentences",
    ),
}


@pytest.mark.parametrize("reason", sorted(BAD))
def test_bad_records_name_file_record_and_id_or_are_skipped(tmp_path, reason):
    edit, message = BAD[reason]
    records = copy.deepcopy(RECORDS)
    edit(records[0])
    path = write_json(tmp_path / "bad.jsonl", records, lines=True)
    with pytest.raises(HotpotQAError) as error:
        read_hotpotqa(path)
    assert f"{path}: line 1, example id 'q1'" in str(error.value) and message in str(error.value)
    data = read_hotpotqa(path, skip_invalid=True)
    assert data.stats["skipped"] == {reason: 1} and data.dataset["id"] == ["q2", "q3"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.pop("context"), "missing key 'context'"),
        (lambda r: r.update(question=""), "empty question"),
        (lambda r: r.update(context=[["Paris", ["a"]], ["Paris", ["b"]]]), "titles must be unique"),
        (lambda r: r.update(supporting_facts=[["Paris", "0"]]), "sent_id must be an integer"),
        (lambda r: r.update(_id="q2"), "duplicated example id"),
    ],
)
def test_malformed_records_always_raise(tmp_path, edit, message):
    records = copy.deepcopy(RECORDS)
    edit(records[2])
    path = write_json(tmp_path / "bad.json", records)
    with pytest.raises(HotpotQAError, match=message) as error:
        read_hotpotqa(path, skip_invalid=True)
    assert f"{path}: record 3 (index 2)" in str(error.value)


# ------------------------------------------------------------------------------------------------------------------
# Markers


def test_add_marker_tokens_resizes_and_is_idempotent(tokenizers):
    tokenizer = copy.deepcopy(tokenizers["bert"])
    model = tiny_model(tokenizer)
    before = model.get_input_embeddings().weight.detach().clone()
    ids = add_marker_tokens(tokenizer, model)
    assert set(ids) == set(MARKER_TOKENS) and model.config.marker_token_ids == ids
    assert sorted(ids.values()) == list(range(before.shape[0], before.shape[0] + len(MARKER_TOKENS)))
    after = model.get_input_embeddings().weight.detach()
    torch.testing.assert_close(after[: before.shape[0]], before)
    assert 0.005 < after[before.shape[0] :].std().item() < 0.05  # normal(0, 0.02)
    for text, token_id in zip(MARKER_TOKENS.values(), ids.values()):  # one unsplittable token, even lower-cased
        assert tokenizer(f"x {text} y", add_special_tokens=False)["input_ids"].count(token_id) == 1
    assert add_marker_tokens(tokenizer, model) == ids and model.get_input_embeddings().weight.shape == after.shape
    with pytest.raises(ValueError, match="collides with the tokenizer's own special tokens"):
        add_marker_tokens(copy.deepcopy(tokenizers["bert"]), markers={**MARKER_TOKENS, "title_start": "[SEP]"})


# ------------------------------------------------------------------------------------------------------------------
# Builder


@pytest.mark.parametrize("style", ["roberta", "bert"])
def test_layout_indices_labels_and_answer_spans(marked, style):
    tokenizer, model = marked[style]
    data = read_hotpotqa(RECORDS)
    features, infos, stats = HotpotQAEncoder.from_config(tokenizer, model.config, max_length=512).encode_dataset(data)
    assert stats.dropped_sentences == 0 and stats.examples == 3
    m = marker_token_ids(tokenizer)
    first, info = features[0], infos[0]
    ids = first["input_ids"]

    def encode(text):
        return tokenizer(" " + text, add_special_tokens=False)["input_ids"]

    expected = [tokenizer.cls_token_id, m["question_start"], *encode(RECORDS[0]["question"]), m["question_end"]]
    for title, sentences in RECORDS[0]["context"]:
        expected += [m["document_start"], m["title_start"], *encode(title), m["title_end"]]
        for sentence in sentences:
            expected += [m["sentence_start"], *encode(sentence), m["sentence_end"]]
        expected.append(m["document_end"])
    assert ids == expected + [tokenizer.sep_token_id]
    assert ids[first["question_index"]] == m["question_start"]
    assert [ids[i] for i in first["sentence_index"]] == [m["sentence_start"]] * 6
    assert [ids[i] for i in first["paragraph_index"]] == [m["title_start"]] * 3
    assert first["sentence_labels"] == [0, 0, 1, 0, 0, 1]  # (Paris, 0) and (Eiffel Tower, 1)
    assert first["paragraph_labels"] == [0, 1, 1]
    assert info.sentence_keys == [
        ("Lyon", 0),
        ("Lyon", 1),
        ("Paris", 0),
        ("Paris", 1),
        ("Eiffel Tower", 0),
        ("Eiffel Tower", 1),
    ]
    # Every occurrence of "Paris" in the supporting paragraphs (title, two sentences, the tower's second sentence),
    # none in the non-supporting Lyon paragraph.
    spans = list(zip(first["start_positions"], first["end_positions"]))
    assert len(spans) == 4
    assert [info.span_text(s, e) for s, e in spans] == ["Paris"] * 4
    assert all(first["paragraph_index"][1] < s for s, _ in spans)
    # Answer types and question types (the paper's HotpotQA types are the answer types).
    assert [f["answer_type_labels"] for f in features] == [0, 1, 2]
    assert [f["question_type"] for f in features] == [0, 1, 2]
    # The model and the collator find the same markers from input_ids alone.
    batch = HotpotQACollator(tokenizer, pad_to_multiple_of=16)(list(features))
    inferred = infer_marker_inputs(batch["input_ids"], model.config.marker_token_ids, batch["attention_mask"])
    for name in ("sentence_index", "sentence_mask", "paragraph_index", "paragraph_mask", "question_index"):
        torch.testing.assert_close(inferred[name], batch[name].to(inferred[name].dtype), msg=name)
    glob = batch["global_attention_mask"][0]
    question_end = ids.index(m["question_end"])
    assert (
        glob[: question_end + 1].all() and glob[first["sentence_index"]].all() and glob[first["paragraph_index"]].all()
    )
    assert int(glob.sum()) == question_end + 1 + 6 + 3
    span_mask = batch["span_mask"][0]
    assert not span_mask[[i for i, t in enumerate(ids) if t in m.values()]].any()
    assert all(span_mask[s] and span_mask[e] for s, e in spans)
    assert batch["start_positions"].shape == (3, 4) and batch["start_positions"][1].tolist() == [-1] * 4
    assert batch["sentence_labels"][1].tolist()[-1] == -100  # padding of the shorter example


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(max_length=st.integers(min_value=12, max_value=160), style=st.sampled_from(["roberta", "bert"]))
def test_truncation_never_separates_a_marker_from_its_sentence(marked, max_length, style):
    tokenizer, model = marked[style]
    m = marker_token_ids(tokenizer)
    record = read_hotpotqa(RECORDS).dataset[0]
    encoder = HotpotQAEncoder.from_config(tokenizer, model.config, max_length, truncated_evidence="keep")
    features, info = encoder.encode(record)
    ids = features["input_ids"]
    assert len(ids) <= max_length and ids[-1] == tokenizer.sep_token_id
    texts = {(t, j): s for t, sentences in RECORDS[0]["context"] for j, s in enumerate(sentences)}
    for position, key in zip(features["sentence_index"], info.sentence_keys):
        body = tokenizer(" " + texts[key], add_special_tokens=False)["input_ids"]
        assert ids[position : position + len(body) + 2] == [m["sentence_start"], *body, m["sentence_end"]]
    # Markers come in balanced pairs, and every kept paragraph is closed.
    for start, end in (
        ("sentence_start", "sentence_end"),
        ("title_start", "title_end"),
        ("document_start", "document_end"),
    ):
        assert ids.count(m[start]) == ids.count(m[end])
    kept = len(info.sentence_keys)
    assert features["num_dropped_sentences"] == 6 - kept
    assert info.sentence_keys == list(texts)[:kept]  # dropped from the end, in order


def test_truncated_evidence_error_skip_keep(marked):
    tokenizer, model = marked["roberta"]
    data = read_hotpotqa(RECORDS)
    length = len(HotpotQAEncoder.from_config(tokenizer, model.config, 512).encode(data.dataset[0])[0]["input_ids"])
    short = length - 3  # drops the last sentence: (Eiffel Tower, 1), a supporting fact
    with pytest.raises(HotpotQAError, match=r"example 'q1'.*supporting facts \[\['Eiffel Tower', 1\]\]"):
        HotpotQAEncoder.from_config(tokenizer, model.config, short).encode_dataset(data)
    features, _, stats = HotpotQAEncoder.from_config(
        tokenizer, model.config, short, truncated_evidence="skip"
    ).encode_dataset(data)
    assert features["id"] == ["q2", "q3"] and stats.skipped == {"truncated_evidence": 1}
    features, infos, stats = HotpotQAEncoder.from_config(
        tokenizer, model.config, short, truncated_evidence="keep"
    ).encode_dataset(data)
    assert stats.examples_with_truncated_evidence == 1 and stats.dropped_sentences == 1
    assert features[0]["sentence_labels"] == [0, 0, 1, 0, 0] and len(features[0]["start_positions"]) == 3


def test_unknown_question_type_names_the_example(marked):
    tokenizer, model = marked["bert"]
    data = read_hotpotqa(RECORDS)
    encoder = HotpotQAEncoder.from_config(tokenizer, model.config, 512)
    encoder.question_types, encoder.question_type_key = ["bridge"], "type"
    with pytest.raises(HotpotQAError, match=r"example 'q2': unknown question type 'comparison' \(field 'type'\)"):
        encoder.encode_dataset(data)
    encoder.skip_invalid = True
    features, _, stats = encoder.encode_dataset(data)
    assert features["id"] == ["q1"] and stats.skipped == {"unknown_question_type": 2}


# ------------------------------------------------------------------------------------------------------------------
# WikiQA as an evidence task


@needs_wikiqa()
def test_wikiqa_distractor_records():
    from as2hub.data_collators import read_wikiqa

    dev = wikiqa_distractor("dev")
    assert len(dev) == 122 and dev.stats["clean"] is True  # the clean setting
    rows = dev.dataset.to_list()
    assert all(len(r["context"]["title"]) == 10 and r["answer_type"] == "none" for r in rows)
    assert {r["type"] for r in rows} <= set(WIKIQA_QUESTION_TYPES)
    as2 = read_wikiqa("dev", clean=True).dataset
    first = rows[0]
    candidates = [r for r in as2 if r["question_id"] == first["id"]]
    own = first["supporting_facts"]["title"][0]
    own_sentences = first["context"]["sentences"][first["context"]["title"].index(own)]
    assert own_sentences == [r["candidate"] for r in candidates]  # document order
    assert first["supporting_facts"]["sent_id"] == [k for k, r in enumerate(candidates) if r["label"] == 1]
    assert len(set(first["context"]["title"])) == 10
    assert wikiqa_distractor("dev").dataset.to_list() == rows  # seeded
    assert len(wikiqa_distractor("dev", 3, seed=1).dataset[0]["context"]["title"]) == 4

"""Property tests: every structure objective's examples obey its definition."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2hub.data_collators.objectives.structure_objectives import (
    IGNORE_LABEL,
    OBJECTIVES,
    PAIR_OBJECTIVES,
    TRIPLET_OBJECTIVES,
    derive_seed,
    generate_examples,
    get_objective,
    is_triplet_objective,
    ssp,
)

# Per variant: (positive anchor eligible?(doc lengths, i), negative paragraph rule (min sentences, min index), hard?)
POSITIVE_RULE = {
    "ssp": lambda lengths, i: lengths[i] >= 2,
    "sp": lambda lengths, i: lengths[i] >= 2,
    "psd": lambda lengths, i: len(lengths) >= 2,
    "sdc": lambda lengths, i: i > 0 and lengths[i] >= 2,
    "dpc": lambda lengths, i: lengths[i] >= 3,
    "dslc": lambda lengths, i: lengths[i] >= 3,
}
NEGATIVE_RULE = {"ssp": (1, 0), "sp": (2, 0), "psd": (1, 0), "sdc": (1, 1), "dpc": (2, 0), "dslc": (2, 0)}
USES_HARD = {"ssp": True, "sp": True, "psd": False, "sdc": True, "dpc": True, "dslc": True}


def sentence(d: int, p: int, s: int) -> str:
    """A unique, space-free sentence encoding its position, so texts can be decoded."""
    return f"d{d}p{p}s{s}."


@st.composite
def batches(draw, min_docs: int = 1, max_docs: int = 5):
    n_docs = draw(st.integers(min_docs, max_docs))
    docs = []
    for d in range(n_docs):
        lengths = draw(st.lists(st.integers(1, 8), min_size=1, max_size=6))
        docs.append([[sentence(d, p, s) for s in range(n)] for p, n in enumerate(lengths)])
    return docs


def decode(text: str) -> list[tuple[int, int, int]]:
    out = []
    for token in text.split(" "):
        d, rest = token[1:-1].split("p")
        p, s = rest.split("s")
        out.append((int(d), int(p), int(s)))
    return out


def check_part(docs, example, part: str) -> tuple[int, int, list[int]]:
    """The text of ``part`` equals the sentences named by its provenance; returns that provenance."""
    d, p, sents = example[f"{part}_doc"], example[f"{part}_par"], example[f"{part}_sents"]
    assert sents == sorted(set(sents)) and sents, (part, example)
    assert decode(example[f"text_{part}"]) == [(d, p, s) for s in sents]
    assert all(0 <= s < len(docs[d][p]) for s in sents)
    return d, p, sents


def contiguous(sents: list[int]) -> bool:
    return sents == list(range(sents[0], sents[0] + len(sents)))


def check_example(docs, ex, anchor_doc: int, anchor_par: int) -> None:
    variant = ex["objective"].removeprefix("mlm_")
    kind = ex["kind"]
    ad, ap, a = check_part(docs, ex, "a")
    bd, bp, b = check_part(docs, ex, "b")
    assert (ad, ap) == (anchor_doc, anchor_par)
    assert ex["label"] == (1 if kind == "positive" else 0) or ex["label"] == IGNORE_LABEL
    n_b = len(docs[bd][bp])
    # where b comes from
    if kind == "positive":
        assert bd == ad
        assert (bp == ap) == (variant != "psd")
    elif kind == "hard":
        assert bd == ad and bp != ap
    else:
        assert kind == "easy" and bd != ad
    min_len, min_par = NEGATIVE_RULE[variant]
    if kind != "positive":
        assert n_b >= min_len and bp >= min_par
    if variant == "ssp":
        assert contiguous(a) and contiguous(b)
        assert 1 <= len(b) <= 5
        if kind == "positive":
            assert 1 <= len(a) <= 3 and not set(a) & set(b)
    elif variant == "sp":
        assert contiguous(a) and 1 <= len(a) <= 3
        removed = sorted(set(range(n_b)) - set(b))
        assert removed and contiguous(removed) and 1 <= len(removed) <= 3, "B = P minus a 1-3 sentence span"
        if kind == "positive":
            assert removed == a, "B = P_i \\ A"
    elif variant == "psd":
        assert a == list(range(len(docs[ad][ap]))) and b == list(range(n_b)), "whole paragraphs"
        assert kind != "hard"
    else:
        cd, cp, c = check_part(docs, ex, "c")
        assert len(a) == 1 and contiguous(b) and 1 <= len(b) <= 3
        if kind == "positive":
            assert not set(a) & set(b)
        if variant == "sdc":
            assert (cd, cp, c) == (bd, 0, list(range(len(docs[bd][0])))), "c = first paragraph of b's document"
            assert bp > 0
        elif variant == "dpc":
            assert (cd, cp) == (bd, bp)
            expected = set(range(n_b)) - set(b) - (set(a) if kind == "positive" else set())
            assert set(c) == expected and c, "c = P \\ {a, b} (positives) or P \\ {b} (negatives)"
        elif variant == "dslc":
            assert (cd, cp) == (bd, bp)
            assert c == [k for k in (b[0] - 1, b[-1] + 1) if 0 <= k < n_b] and c, "local context of b"
            if kind == "positive":
                assert a[0] not in c


def check_batch(objective: str, docs, examples) -> None:
    base = objective.removeprefix("mlm_") if objective != "mlm" else "all"
    variants = {"all": TRIPLET_OBJECTIVES, "all_pairs": PAIR_OBJECTIVES}.get(base, (base,))
    triplet = is_triplet_objective(objective)
    groups: dict[int, list] = {}
    for ex in examples:
        assert ("text_c" in ex) == triplet
        assert ex["objective"].removeprefix("mlm_") in variants
        if objective.startswith("mlm"):
            assert ex["label"] == IGNORE_LABEL and ex["objective"].startswith("mlm_")
        groups.setdefault(ex["group"], []).append(ex)
    assert sorted(groups) == list(range(len(groups)))
    anchors = []
    for _, group in sorted(groups.items()):
        positive = group[0]
        assert positive["kind"] == "positive"
        assert all(ex["objective"] == positive["objective"] for ex in group)
        assert all(ex["text_a"] == positive["text_a"] for ex in group), "negatives keep a"
        d, i = positive["a_doc"], positive["a_par"]
        anchors.append((d, i))
        variant = positive["objective"].removeprefix("mlm_")
        lengths = [len(p) for p in docs[d]]
        assert POSITIVE_RULE[variant](lengths, i)
        kinds = [ex["kind"] for ex in group[1:]]
        assert kinds == sorted(kinds, key=["hard", "easy"].index), "hard negatives first"
        for ex in group:
            check_example(docs, ex, d, i)
        # exactly as many negatives as the batch allows (4 when possible)
        min_len, min_par = NEGATIVE_RULE[variant]
        own = [j for j, n in enumerate(lengths) if j != i and j >= min_par and n >= min_len]
        n_hard = min(2, len(own)) if USES_HARD[variant] else 0
        has_other = any(
            any(j >= min_par and len(p) >= min_len for j, p in enumerate(doc)) for e, doc in enumerate(docs) if e != d
        )
        assert kinds.count("hard") == n_hard
        assert kinds.count("easy") == (4 - n_hard if has_other else 0)
        assert len({ex["b_par"] for ex in group if ex["kind"] == "hard"}) == n_hard, "distinct hard paragraphs"
    # one positive per eligible anchor paragraph, in document/paragraph order
    expected = [
        (d, i)
        for d, doc in enumerate(docs)
        for i in range(len(doc))
        if any(POSITIVE_RULE[v]([len(p) for p in doc], i) for v in variants)
    ]
    assert anchors == expected


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("objective", [*PAIR_OBJECTIVES, *TRIPLET_OBJECTIVES, "all", "all_pairs", "mlm", "mlm_sp"])
@FAST
@given(docs=batches(), seed=st.integers(0, 2**32))
def test_examples_obey_definition(objective, docs, seed):
    examples = generate_examples(objective, docs, seed)
    check_batch(objective, docs, examples)


@pytest.mark.parametrize("objective", OBJECTIVES)
@settings(max_examples=15, deadline=None)
@given(docs=batches(), seed=st.integers(0, 2**32))
def test_deterministic_for_fixed_seed(objective, docs, seed):
    first = generate_examples(objective, docs, seed)
    assert first == generate_examples(objective, docs, random.Random(seed))
    assert first == get_objective(objective)(docs, seed)


@pytest.mark.parametrize("objective", [*PAIR_OBJECTIVES, *TRIPLET_OBJECTIVES, "all", "all_pairs"])
@settings(max_examples=20, deadline=None)
@given(docs=batches(min_docs=1, max_docs=1), seed=st.integers(0, 2**32))
def test_single_document_batch_terminates(objective, docs, seed):
    examples = generate_examples(objective, docs, seed)
    assert all(ex["kind"] != "easy" for ex in examples)
    assert all(ex["group"] is not None for ex in examples)
    check_batch(objective, docs, examples)


@pytest.mark.parametrize("base", [*PAIR_OBJECTIVES, *TRIPLET_OBJECTIVES, "all", "all_pairs"])
def test_mlm_ablation_keeps_sampling(base):
    docs = [[[sentence(d, p, s) for s in range(2 + (d + p) % 5)] for p in range(4)] for d in range(4)]
    structured = generate_examples(base, docs, 7)
    mlm = generate_examples(f"mlm_{base}", docs, 7)
    assert len(mlm) == len(structured) > 0
    for s, m in zip(structured, mlm, strict=True):
        assert m["label"] == IGNORE_LABEL and m["structure_label"] == s["label"]
        assert {k: v for k, v in m.items() if k not in ("label", "structure_label", "objective")} == {
            k: v for k, v in s.items() if k not in ("label", "objective")
        }


def test_seeds_differ_and_doc_indices():
    docs = [[[sentence(d, p, s) for s in range(6)] for p in range(5)] for d in range(6)]
    assert generate_examples("ssp", docs, 1) != generate_examples("ssp", docs, 2)
    shifted = ssp(docs, 1, doc_indices=[100 + d for d in range(6)])
    assert {ex["a_doc"] for ex in shifted} == set(range(100, 106))
    assert [ex["text_b"] for ex in shifted] == [ex["text_b"] for ex in ssp(docs, 1)]


def test_stats_and_skips():
    docs = [[[sentence(0, 0, 0)]], [[sentence(1, 0, 0), sentence(1, 0, 1)], [sentence(1, 1, 0)]]]
    stats: Counter = Counter()
    examples = generate_examples("dslc", docs, 0, stats=stats)
    assert examples == []
    assert stats["documents_skipped"] == 2 and stats["paragraphs_skipped"] == 3
    assert stats["single_paragraph_documents_skipped"] == 1
    stats = Counter()
    generate_examples("psd", docs, 0, stats=stats)
    # easy negatives are drawn with replacement: 4 each even though the other document has one paragraph
    assert stats["positives"] == 2 and stats["negatives"] == 8 and stats["groups_short_of_negatives"] == 0


def test_unknown_objective_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown objective 'nsp'.*ssp, sp, psd, sdc, dpc, dslc, all"):
        generate_examples("nsp", [], 0)
    with pytest.raises(ValueError, match="valid objectives"):
        get_objective("mlm_nsp")


def test_empty_batch_and_derive_seed():
    assert generate_examples("all", [], 0) == []
    assert derive_seed(1, 2) == derive_seed(1, 2) != derive_seed(2, 1)
    assert 0 <= derive_seed("x") < 2**63

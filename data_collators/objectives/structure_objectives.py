"""Structure-aware pre-training objectives: documents -> labelled examples (pure, seeded functions).

Every objective maps a *batch* of documents (``list`` of documents, each a ``list`` of paragraphs,
each a ``list`` of sentence strings) and a seed / :class:`random.Random` to a list of examples.
The output depends only on the inputs and the seed.  Easy negatives come from the other
documents of the same batch, so batches can be generated independently (in parallel).

Pair objectives (Di Liello et al., 2022, "Pre-training Transformer Models with Sentence-Level
Objectives for Answer Sentence Selection", section 4 and appendix A.1) produce
``{"text_a", "text_b", "label"}``; triplet objectives (Di Liello et al., 2023, "Context-Aware
Transformer Pre-Training for Answer Sentence Selection", section 4 and appendix A.1) produce
``{"text_a", "text_b", "text_c", "label"}``.  Texts are sentences joined with a single space.
Label 1 = positive ("same unit"), 0 = negative.

Sampling common to all objectives:

* one positive per eligible *anchor* paragraph ``P_i`` (documents in order, paragraphs in order);
* for each positive, up to ``max_hard_negatives`` (2) *hard* negatives built from distinct other
  paragraphs ``P_j, j != i`` of the same document, then *easy* negatives built from paragraphs of
  other documents of the batch (document chosen uniformly, then paragraph uniformly; a paragraph
  already used in the group is redrawn up to 3 times, then accepted, so small batches may repeat
  one) until the group has ``num_negatives`` (4) negatives.  PSD uses easy negatives only.
  With a single (eligible) document in the batch there are no easy negatives: the group simply
  has fewer negatives (generation never loops waiting for candidates);
* a negative keeps the anchor's first input (``a``) and replaces the rest.

Provenance columns (for tests and analysis): ``objective`` (variant that produced the example),
``kind`` (``"positive"`` / ``"hard"`` / ``"easy"``), ``group`` (index of the positive within the
batch output; a positive and its negatives share it), and for each input ``x`` in ``a``, ``b``
(and ``c`` for triplets): ``x_doc`` (document index, ``doc_indices[k]`` when given, else the
position in the batch), ``x_par`` (paragraph index) and ``x_sents`` (sentence indices, ascending).

The joint objective ``mspp`` (Multi-Sentences in Paragraph Prediction; Di Liello, Garg, Soldaini, Moschitti,
NAACL 2022, section 3.4) produces one *grouped* example per anchor paragraph for the joint multi-candidate models:
``{"text_a", "candidates", "labels"}`` with ``text_a`` = a sentence s0 of paragraph P, ``candidates`` = k sentences
(``num_positives`` from P, ``max_hard_negatives`` from other paragraphs of the same document, the rest from other
documents of the batch), shuffled, and ``labels[i] = 1`` where candidate i comes from P; see :func:`mspp`.

The MLM-only ablation (Di Liello et al., 2022, table 2: "same data sampling ... but only using the
MLM objective") is exposed as ``mlm_<objective>`` (``mlm`` = ``mlm_all``): exactly the examples of
``<objective>`` for the same seed, with ``label = -100`` (ignored by the loss) and the structural
label kept in ``structure_label``.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BASE_OBJECTIVES",
    "IGNORE_LABEL",
    "OBJECTIVE_DEFINITIONS",
    "ObjectiveDefinition",
    "register_objective",
    "sentence_objective",
    "JOINT_OBJECTIVES",
    "OBJECTIVES",
    "PAIR_OBJECTIVES",
    "TRIPLET_OBJECTIVES",
    "derive_seed",
    "dpc",
    "dslc",
    "generate_examples",
    "get_objective",
    "is_joint_objective",
    "Objective",
    "resolve_objective",
    "DEFAULT_MAX_LENGTHS",
    "is_triplet_objective",
    "mspp",
    "psd",
    "sdc",
    "sp",
    "ssp",
]

Document = list[list[str]]
Example = dict[str, Any]

IGNORE_LABEL = -100
_EASY_RETRIES = 4  # draws per easy negative to find a paragraph not used yet in its group

# Span lengths (inclusive ranges) from the papers' appendices.
SSP_A_SENTENCES = (1, 3)  # 2022, A.1: A in [1, 3]
SSP_B_SENTENCES = (1, 5)  # 2022, A.1: B in [1, 5]
SP_A_SENTENCES = (1, 3)  # 2022, A.1: A in P_i in [1, 3]
TRIPLET_B_SENTENCES = (1, 3)  # 2023, A.1: a = 1 sentence, b in [1, 3]

# MSPP sampling (Di Liello et al., NAACL 2022, section 4.1: k+ = 1, k_hard = 2, k_easy = 2, so k = 5).
MSPP_POSITIVES = 1


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from arbitrary parts (independent of ``PYTHONHASHSEED`` and the process)."""
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


# --------------------------------------------------------------------------- batch index


class _Batch:
    """Documents of one batch plus cached eligibility lists (paragraph indices by minimum length)."""

    __slots__ = ("docs", "ids", "lengths", "_paragraphs", "_others")

    def __init__(self, documents: Sequence[Document], doc_indices: Sequence[int] | None):
        self.docs = documents
        self.ids = list(doc_indices) if doc_indices is not None else list(range(len(documents)))
        if len(self.ids) != len(documents):
            raise ValueError(f"doc_indices has {len(self.ids)} entries for {len(documents)} documents")
        self.lengths = [[len(p) for p in doc] for doc in documents]
        self._paragraphs: dict[tuple[int, int, int], list[int]] = {}
        self._others: dict[tuple[int, int, int], list[int]] = {}

    def paragraphs(self, d: int, min_len: int, min_par: int = 0) -> list[int]:
        """Sorted indices ``j >= min_par`` of paragraphs of document ``d`` with ``>= min_len`` sentences."""
        key = (d, min_len, min_par)
        found = self._paragraphs.get(key)
        if found is None:
            found = [j for j, n in enumerate(self.lengths[d]) if j >= min_par and n >= min_len]
            self._paragraphs[key] = found
        return found

    def other_docs(self, d: int, min_len: int, min_par: int = 0) -> list[int]:
        """Documents ``!= d`` of the batch with at least one eligible paragraph."""
        key = (d, min_len, min_par)
        found = self._others.get(key)
        if found is None:
            found = [e for e in range(len(self.docs)) if e != d and self.paragraphs(e, min_len, min_par)]
            self._others[key] = found
        return found


def _span(rng: random.Random, n: int, bounds: tuple[int, int]) -> tuple[int, int]:
    """A random contiguous span ``[start, end)`` of ``bounds[0]..min(bounds[1], n)`` sentences of ``n``."""
    length = rng.randint(bounds[0], min(bounds[1], n))
    start = rng.randint(0, n - length)
    return start, start + length


def _join(sentences: list[str], start: int, end: int) -> str:
    return " ".join(sentences[start:end])


def _except(sentences: list[str], start: int, end: int) -> str:
    return " ".join(sentences[:start] + sentences[end:])


def _skip(rng: random.Random, m: int, lo: int, width: int) -> int:
    """Uniform index in ``range(m + width)`` outside ``[lo, lo + width)``."""
    k = rng.randrange(m)
    return k + width if k >= lo else k


# --------------------------------------------------------------------------- objective specifications


@dataclass(frozen=True)
class ObjectiveDefinition:
    """One pre-training objective's facts, declared once (by :func:`objective` on its spec class, or
    :func:`register_objective` for a mixture or a grouped objective). The objective tuples, the default lengths, the
    model cards' descriptions and :class:`Objective` all read them."""

    name: str  # lower case, without the ``mlm_`` prefix (every objective gets its ``mlm_`` ablation)
    description: str  # what the sentence head predicts: the model card's words
    paper: str  # where it is defined
    default_max_length: int | None  # the papers' input length in tokens; None: the slot layout sets it (grouped)
    variants: tuple[str, ...]  # the sentence-level specs it samples from: itself, a mixture's, () when grouped
    triplet: bool  # examples with ``text_c`` (three segments)
    grouped: bool = False  # grouped examples for the joint multi-candidate models (MSPP)


OBJECTIVE_DEFINITIONS: dict[str, ObjectiveDefinition] = {}
_SPECS: dict[str, _Spec] = {}
MLM_DESCRIPTION = "masked language modelling only, the ablation without a sentence-level objective"


def register_objective(definition: ObjectiveDefinition) -> ObjectiveDefinition:
    """Make ``definition`` an objective (``generate_examples``, the run script's ``--objective``, its card);
    ``ValueError`` naming the fact when one is missing or contradicts the others."""
    problems = []
    if not definition.name or definition.name != definition.name.lower() or definition.name.startswith("mlm"):
        problems.append("name: lower case, not starting with 'mlm' (the ablations are derived)")
    if definition.name in OBJECTIVE_DEFINITIONS:
        problems.append("name: already registered")
    if not definition.description:
        problems.append("description: empty (the model card would not say what the objective predicts)")
    if not definition.paper:
        problems.append("paper: empty")
    if definition.grouped != (definition.default_max_length is None):
        problems.append("default_max_length: None exactly when the objective is grouped (the slot layout sets it)")
    if definition.grouped == bool(definition.variants):
        problems.append("variants: the sentence-level specs it samples from (none when grouped)")
    unknown = [name for name in definition.variants if name not in _SPECS]
    if unknown:
        problems.append(f"variants: no spec named {', '.join(unknown)}")
    elif {_SPECS[name].triplet for name in definition.variants} - {definition.triplet}:
        problems.append("triplet: differs from its variants'")
    if problems:
        raise ValueError(f"objective {definition.name!r}: " + "; ".join(problems))
    OBJECTIVE_DEFINITIONS[definition.name] = definition
    return definition


def sentence_objective(*, description: str, paper: str, default_max_length: int):
    """Class decorator: registers a sentence-level spec (a :class:`_Spec` subclass) as the objective of its name."""

    def register(spec_class):
        spec = spec_class()
        _SPECS[spec.name] = spec
        register_objective(
            ObjectiveDefinition(
                name=spec.name,
                description=description,
                paper=paper,
                default_max_length=default_max_length,
                variants=(spec.name,),
                triplet=spec.triplet,
            )
        )
        return spec_class

    return register


class _Spec:
    """One objective: positive eligibility, positive builder, negative eligibility and builder."""

    name = ""
    triplet = False
    pos_min_len = 1  # sentences the anchor paragraph needs
    pos_min_par = 0  # smallest anchor paragraph index
    pos_min_paragraphs = 1  # paragraphs the anchor document needs
    neg_min_len = 1  # sentences a negative's paragraph needs
    neg_min_par = 0  # smallest paragraph index a negative may come from
    hard = True  # whether hard negatives are used

    def eligible(self, batch: _Batch, d: int, i: int) -> bool:
        lengths = batch.lengths[d]
        return i >= self.pos_min_par and lengths[i] >= self.pos_min_len and len(lengths) >= self.pos_min_paragraphs

    def positive(self, batch: _Batch, d: int, i: int, rng: random.Random) -> Example:
        raise NotImplementedError

    def negative(self, batch: _Batch, anchor: Example, d: int, j: int, rng: random.Random) -> Example:
        raise NotImplementedError


@sentence_objective(
    description="are two spans from the same paragraph?", paper="Di Liello et al., 2022", default_max_length=128
)
class _SSP(_Spec):
    """Spans in Same Paragraph (Di Liello et al., 2022, section 4; appendix A.1).

    Positive: ``A`` = 1-3 contiguous sentences and ``B`` = 1-5 contiguous sentences of the same
    paragraph ``P_i``, disjoint (either order, possibly adjacent).  Needs ``|P_i| >= 2``; ``B`` is
    shortened when the room left next to ``A`` is smaller than the sampled length.
    Negatives: ``(A, B')`` with ``B'`` a span of 1-5 contiguous sentences of *another paragraph*:
    hard = ``P_j, j != i`` of the same document, easy = a paragraph of another document.
    (Section 4 defines hard negatives as spans "from different paragraphs P_j, j != i in the same
    document"; appendix A.1's "from the same paragraph as A" cannot be meant literally -- that
    would be a positive -- and is read as "from the same document as A".)
    """

    name = "ssp"
    pos_min_len = 2

    def positive(self, batch, d, i, rng):
        sentences = batch.docs[d][i]
        n = len(sentences)
        a0, a1 = _span(rng, n, (SSP_A_SENTENCES[0], min(SSP_A_SENTENCES[1], n - 1)))
        room = max(a0, n - a1)
        length = min(rng.randint(*SSP_B_SENTENCES), room)
        starts_left = max(a0 - length + 1, 0)
        starts_right = max(n - length - a1 + 1, 0)
        k = rng.randrange(starts_left + starts_right)
        b0 = k if k < starts_left else a1 + (k - starts_left)
        return {
            "text_a": _join(sentences, a0, a1),
            "text_b": _join(sentences, b0, b0 + length),
            "label": 1,
            "a_doc": batch.ids[d],
            "a_par": i,
            "a_sents": list(range(a0, a1)),
            "b_doc": batch.ids[d],
            "b_par": i,
            "b_sents": list(range(b0, b0 + length)),
        }

    def negative(self, batch, anchor, d, j, rng):
        sentences = batch.docs[d][j]
        b0, b1 = _span(rng, len(sentences), SSP_B_SENTENCES)
        return {
            "text_a": anchor["text_a"],
            "text_b": _join(sentences, b0, b1),
            "label": 0,
            "a_doc": anchor["a_doc"],
            "a_par": anchor["a_par"],
            "a_sents": anchor["a_sents"],
            "b_doc": batch.ids[d],
            "b_par": j,
            "b_sents": list(range(b0, b1)),
        }


@sentence_objective(
    description="is B the rest of A's paragraph?", paper="Di Liello et al., 2022", default_max_length=256
)
class _SP(_Spec):
    """Span in Paragraph (Di Liello et al., 2022, section 4; appendix A.1).

    Positive: ``A`` = 1-3 contiguous sentences of ``P_i`` and ``B = P_i \\ A`` (needs ``|P_i| >= 2``;
    ``A`` never covers the whole paragraph, so ``B`` is never empty).
    Negatives: ``(A, P_j \\ A')`` where ``A'`` is a random span of 1-3 contiguous sentences removed
    from another paragraph ``P_j`` with ``|P_j| >= 2`` (hard: same document, ``j != i``; easy:
    another document).  Removing ``A'`` ensures that ``B`` is never a whole paragraph, in positives
    or negatives, so the model cannot solve the task by spotting a clipped paragraph.
    """

    name = "sp"
    pos_min_len = 2
    neg_min_len = 2

    def _cut(self, sentences, rng):
        n = len(sentences)
        return _span(rng, n, (SP_A_SENTENCES[0], min(SP_A_SENTENCES[1], n - 1)))

    def positive(self, batch, d, i, rng):
        sentences = batch.docs[d][i]
        a0, a1 = self._cut(sentences, rng)
        return {
            "text_a": _join(sentences, a0, a1),
            "text_b": _except(sentences, a0, a1),
            "label": 1,
            "a_doc": batch.ids[d],
            "a_par": i,
            "a_sents": list(range(a0, a1)),
            "b_doc": batch.ids[d],
            "b_par": i,
            "b_sents": [*range(a0), *range(a1, len(sentences))],
        }

    def negative(self, batch, anchor, d, j, rng):
        sentences = batch.docs[d][j]
        r0, r1 = self._cut(sentences, rng)
        return {
            "text_a": anchor["text_a"],
            "text_b": _except(sentences, r0, r1),
            "label": 0,
            "a_doc": anchor["a_doc"],
            "a_par": anchor["a_par"],
            "a_sents": anchor["a_sents"],
            "b_doc": batch.ids[d],
            "b_par": j,
            "b_sents": [*range(r0), *range(r1, len(sentences))],
        }


@sentence_objective(
    description="are two paragraphs from the same document?", paper="Di Liello et al., 2022", default_max_length=256
)
class _PSD(_Spec):
    """Paragraphs in Same Document (Di Liello et al., 2022, section 4; appendix A.1).

    Positive: ``(P_i, P_j)``, two different paragraphs of one document (``P_j`` uniform over
    ``j != i``; needs a document with >= 2 paragraphs).
    Negatives: ``(P_i, P')`` with ``P'`` a paragraph of another document -- easy negatives only,
    ``num_negatives`` (4) of them ("no analogous concept of hard negatives", section 5.3).
    """

    name = "psd"
    pos_min_paragraphs = 2
    hard = False

    def positive(self, batch, d, i, rng):
        doc = batch.docs[d]
        j = _skip(rng, len(doc) - 1, i, 1)
        return {
            "text_a": " ".join(doc[i]),
            "text_b": " ".join(doc[j]),
            "label": 1,
            "a_doc": batch.ids[d],
            "a_par": i,
            "a_sents": list(range(len(doc[i]))),
            "b_doc": batch.ids[d],
            "b_par": j,
            "b_sents": list(range(len(doc[j]))),
        }

    def negative(self, batch, anchor, d, j, rng):
        sentences = batch.docs[d][j]
        return {
            "text_a": anchor["text_a"],
            "text_b": " ".join(sentences),
            "label": 0,
            "a_doc": anchor["a_doc"],
            "a_par": anchor["a_par"],
            "a_sents": anchor["a_sents"],
            "b_doc": batch.ids[d],
            "b_par": j,
            "b_sents": list(range(len(sentences))),
        }


class _Triplet(_Spec):
    """Shared positive sampling of the contextual SSP variants: ``a`` = 1 sentence, ``b`` = 1-3
    contiguous sentences, both from ``P_i``, disjoint."""

    triplet = True

    def _a_b(self, n: int, rng: random.Random, max_b: int) -> tuple[int, int, int]:
        b0, b1 = _span(rng, n, (TRIPLET_B_SENTENCES[0], min(TRIPLET_B_SENTENCES[1], max_b)))
        a = _skip(rng, n - (b1 - b0), b0, b1 - b0)
        return a, b0, b1

    @staticmethod
    def _example(batch, anchor, text_b, label, d, j, b0, b1, text_c, c_d, c_par, c_sents) -> Example:
        return {
            "text_a": anchor["text_a"],
            "text_b": text_b,
            "text_c": text_c,
            "label": label,
            "a_doc": anchor["a_doc"],
            "a_par": anchor["a_par"],
            "a_sents": anchor["a_sents"],
            "b_doc": batch.ids[d],
            "b_par": j,
            "b_sents": list(range(b0, b1)),
            "c_doc": batch.ids[c_d],
            "c_par": c_par,
            "c_sents": c_sents,
        }


@sentence_objective(
    description="are a and b from the same paragraph, given the document's first paragraph?",
    paper="Di Liello et al., 2023",
    default_max_length=128,
)
class _SDC(_Triplet):
    """SSP with Static Document-level Context (Di Liello et al., 2023, section 4).

    Positive: ``a`` (1 sentence) and ``b`` (1-3 contiguous sentences) disjoint, from one paragraph
    ``P_i`` with ``i > 0`` (needs ``|P_i| >= 2``); ``c = P_0``, the document's first paragraph.
    Negatives: ``b`` (1-3 contiguous sentences) from another paragraph and ``c`` = the first
    paragraph of *b's own* document (the context belongs to the answer candidate, not the
    question): hard = ``P_j, j != i, j > 0`` of the same document (``c = P_0``); easy = a paragraph
    ``P'_k, k > 0`` of another document ``D'`` (``c = P'_0``).  ``b`` never comes from a first
    paragraph, so ``b`` is never part of ``c``.
    """

    name = "sdc"
    pos_min_len = 2
    pos_min_par = 1
    pos_min_paragraphs = 2
    neg_min_par = 1

    def positive(self, batch, d, i, rng):
        doc = batch.docs[d]
        sentences = doc[i]
        a, b0, b1 = self._a_b(len(sentences), rng, len(sentences) - 1)
        anchor = {"text_a": sentences[a], "a_doc": batch.ids[d], "a_par": i, "a_sents": [a]}
        return self._example(
            batch, anchor, _join(sentences, b0, b1), 1, d, i, b0, b1, " ".join(doc[0]), d, 0, list(range(len(doc[0])))
        )

    def negative(self, batch, anchor, d, j, rng):
        doc = batch.docs[d]
        sentences = doc[j]
        b0, b1 = _span(rng, len(sentences), TRIPLET_B_SENTENCES)
        return self._example(
            batch, anchor, _join(sentences, b0, b1), 0, d, j, b0, b1, " ".join(doc[0]), d, 0, list(range(len(doc[0])))
        )


@sentence_objective(
    description="are a and b from the same paragraph, given the rest of that paragraph?",
    paper="Di Liello et al., 2023",
    default_max_length=128,
)
class _DPC(_Triplet):
    """SSP with Dynamic Paragraph-level Context (Di Liello et al., 2023, section 4).

    Positive: ``a`` (1 sentence) and ``b`` (1-3 contiguous sentences) disjoint from ``P_i`` and
    ``c = P_i \\ {a, b}`` (leaving ``a`` and ``b`` in would make the task trivial).
    Negatives: ``b`` from another paragraph ``P_j`` and ``c = P_j \\ {b}`` (b's paragraph minus b):
    hard = ``j != i`` in the same document, easy = a paragraph of another document.
    The context is never empty: positives need ``|P_i| >= 3`` and negatives ``|P_j| >= 2``
    (an empty context only in positives would leak the label).
    """

    name = "dpc"
    pos_min_len = 3
    neg_min_len = 2

    def positive(self, batch, d, i, rng):
        sentences = batch.docs[d][i]
        n = len(sentences)
        a, b0, b1 = self._a_b(n, rng, n - 2)
        c = [k for k in range(n) if k != a and not b0 <= k < b1]
        anchor = {"text_a": sentences[a], "a_doc": batch.ids[d], "a_par": i, "a_sents": [a]}
        return self._example(
            batch, anchor, _join(sentences, b0, b1), 1, d, i, b0, b1, " ".join(sentences[k] for k in c), d, i, c
        )

    def negative(self, batch, anchor, d, j, rng):
        sentences = batch.docs[d][j]
        n = len(sentences)
        b0, b1 = _span(rng, n, (TRIPLET_B_SENTENCES[0], min(TRIPLET_B_SENTENCES[1], n - 1)))
        c = [*range(b0), *range(b1, n)]
        return self._example(
            batch, anchor, _join(sentences, b0, b1), 0, d, j, b0, b1, _except(sentences, b0, b1), d, j, c
        )


@sentence_objective(
    description="are a and b from the same paragraph, given the sentences around b?",
    paper="Di Liello et al., 2023",
    default_max_length=128,
)
class _DSLC(_Triplet):
    """SSP with Dynamic Sentence-level Local Context (Di Liello et al., 2023, section 4).

    ``c`` = the sentence before and the sentence after ``b`` in its paragraph (whichever exist; at
    least one must).  Positive: ``a`` (1 sentence) and ``b`` (1-3 contiguous sentences) from ``P_i``
    with ``a`` neither in ``b`` nor in ``c``; paragraphs too short for that (``|P_i| < 3``) are
    skipped.  Negatives: ``b`` from another paragraph ``P_j`` with ``|P_j| >= 2`` and ``c`` its local
    context in ``P_j``: hard = ``j != i`` in the same document, easy = another document.
    """

    name = "dslc"
    pos_min_len = 3
    neg_min_len = 2

    def positive(self, batch, d, i, rng):
        sentences = batch.docs[d][i]
        n = len(sentences)
        length = rng.randint(TRIPLET_B_SENTENCES[0], min(TRIPLET_B_SENTENCES[1], n - 2))
        if n - length >= 3:
            b0 = rng.randint(0, n - length)
        else:  # only the edge placements leave a sentence for ``a``
            b0 = rng.choice((0, n - length))
        b1 = b0 + length
        lo, hi = max(b0 - 1, 0), min(b1 + 1, n)
        a = _skip(rng, n - (hi - lo), lo, hi - lo)
        c = [k for k in (b0 - 1, b1) if 0 <= k < n]
        anchor = {"text_a": sentences[a], "a_doc": batch.ids[d], "a_par": i, "a_sents": [a]}
        return self._example(
            batch, anchor, _join(sentences, b0, b1), 1, d, i, b0, b1, " ".join(sentences[k] for k in c), d, i, c
        )

    def negative(self, batch, anchor, d, j, rng):
        sentences = batch.docs[d][j]
        n = len(sentences)
        b0, b1 = _span(rng, n, (TRIPLET_B_SENTENCES[0], min(TRIPLET_B_SENTENCES[1], n - 1)))
        c = [k for k in (b0 - 1, b1) if 0 <= k < n]
        return self._example(
            batch, anchor, _join(sentences, b0, b1), 0, d, j, b0, b1, " ".join(sentences[k] for k in c), d, j, c
        )


# The mixes: one sentence head over several objectives' examples, "with the same setting as SSP" (2022, section 5).
register_objective(
    ObjectiveDefinition(
        name="all",
        description="a mix of SDC, DPC and DSLC with one sentence head",
        paper="Di Liello et al., 2023",
        default_max_length=128,
        variants=("sdc", "dpc", "dslc"),
        triplet=True,
    )
)
register_objective(
    ObjectiveDefinition(
        name="all_pairs",
        description="a mix of SSP, SP and PSD with one sentence head",
        paper="Di Liello et al., 2022",
        default_max_length=OBJECTIVE_DEFINITIONS["ssp"].default_max_length,
        variants=("ssp", "sp", "psd"),
        triplet=False,
    )
)


# --------------------------------------------------------------------------- driver


def _generate(
    variants: tuple[_Spec, ...],
    documents: Sequence[Document],
    rng: random.Random,
    doc_indices: Sequence[int] | None,
    num_negatives: int,
    max_hard_negatives: int,
    stats: Counter | None,
) -> list[Example]:
    batch = _Batch(documents, doc_indices)
    out: list[Example] = []
    group = 0
    counts: Counter = Counter()
    single = len(variants) == 1
    for d, lengths in enumerate(batch.lengths):
        doc_groups = 0
        for i in range(len(lengths)):
            if single:
                spec = variants[0]
                if not spec.eligible(batch, d, i):
                    counts["paragraphs_skipped"] += 1
                    continue
            else:
                candidates = [v for v in variants if v.eligible(batch, d, i)]
                if not candidates:
                    counts["paragraphs_skipped"] += 1
                    continue
                spec = candidates[rng.randrange(len(candidates))] if len(candidates) > 1 else candidates[0]
            positive = spec.positive(batch, d, i, rng)
            positive["objective"] = spec.name
            positive["kind"] = "positive"
            positive["group"] = group
            out.append(positive)
            made = 0
            if spec.hard and max_hard_negatives > 0:
                pool = batch.paragraphs(d, spec.neg_min_len, spec.neg_min_par)
                pos = bisect.bisect_left(pool, i)
                has_i = pos < len(pool) and pool[pos] == i
                size = len(pool) - has_i
                for k in rng.sample(range(size), min(max_hard_negatives, size, num_negatives)):
                    j = pool[k + 1] if has_i and k >= pos else pool[k]
                    example = spec.negative(batch, positive, d, j, rng)
                    example["objective"] = spec.name
                    example["kind"] = "hard"
                    example["group"] = group
                    out.append(example)
                    made += 1
            others = batch.other_docs(d, spec.neg_min_len, spec.neg_min_par)
            if others:
                used: set[tuple[int, int]] = set()
                for _ in range(num_negatives - made):
                    # Prefer a paragraph not used yet in this group (bounded retries, so it terminates).
                    for _attempt in range(_EASY_RETRIES):
                        e = others[rng.randrange(len(others))]
                        pool = batch.paragraphs(e, spec.neg_min_len, spec.neg_min_par)
                        j = pool[rng.randrange(len(pool))]
                        if (e, j) not in used:
                            break
                    used.add((e, j))
                    example = spec.negative(batch, positive, e, j, rng)
                    example["objective"] = spec.name
                    example["kind"] = "easy"
                    example["group"] = group
                    out.append(example)
                    made += 1
            if made < num_negatives:
                counts["groups_short_of_negatives"] += 1
            counts["positives"] += 1
            counts["negatives"] += made
            group += 1
            doc_groups += 1
        if not doc_groups:
            counts["documents_skipped"] += 1
            if len(lengths) < 2:
                counts["single_paragraph_documents_skipped"] += 1
    if stats is not None:
        stats.update(counts)
    return out


# --------------------------------------------------------------------------- MSPP (joint models)


def _mspp(
    documents: Sequence[Document],
    rng: random.Random,
    doc_indices: Sequence[int] | None,
    num_positives: int,
    num_hard: int,
    num_easy: int,
    stats: Counter | None,
) -> list[Example]:
    """Multi-Sentences in Paragraph Prediction (Di Liello, Garg, Soldaini, Moschitti, NAACL 2022, section 3.4).

    One example per anchor paragraph ``P`` (documents in order, paragraphs in order) with at least 2 sentences:

    * ``text_a`` = s0, a sentence of ``P`` drawn uniformly;
    * ``num_positives`` (k+ = 1) other sentences of ``P``, drawn without replacement;
    * ``num_hard`` (k_hard = 2) sentences of the *other paragraphs* of the same document, drawn uniformly without
      replacement among all their sentences (hard negatives);
    * ``num_easy`` (k_easy = 2) sentences of *other documents* of the batch (document, then paragraph, then sentence
      uniformly; a sentence already used in the example is redrawn up to 3 times, then accepted);
    * a level that runs short is filled from the next easier one: missing positives (``|P| - 1 < k+``) become hard
      negatives, missing hard negatives (few other paragraphs) become easy ones. With a single document in the
      batch there are no easy negatives and the example has fewer than k candidates (empty slots);
    * the candidates are shuffled; ``labels[i] = 1`` iff candidate i comes from ``P``.

    Provenance: ``a_doc``, ``a_par``, ``a_sents`` (``[s0]``) and, per candidate, ``candidate_docs``,
    ``candidate_pars``, ``candidate_sents`` (sentence index) and ``candidate_kinds``
    (``"positive"`` / ``"hard"`` / ``"easy"``).
    """
    batch = _Batch(documents, doc_indices)
    out: list[Example] = []
    counts: Counter = Counter()
    wanted = num_positives + num_hard + num_easy
    for d, lengths in enumerate(batch.lengths):
        doc_groups = 0
        for i, n in enumerate(lengths):
            if n < 2:
                counts["paragraphs_skipped"] += 1
                continue
            s0 = rng.randrange(n)
            picked: list[tuple[int, int, int, str]] = []  # (document, paragraph, sentence, kind)
            positives = rng.sample(range(n - 1), min(num_positives, n - 1))
            picked += [(d, i, s + (s >= s0), "positive") for s in positives]
            # Hard negatives: uniform over the sentences of the document's other paragraphs.
            pool = sum(lengths) - n
            want = num_hard + num_positives - len(positives)
            for flat in rng.sample(range(pool), min(want, pool)):
                for j, m in enumerate(lengths):
                    if j == i:
                        continue
                    if flat < m:
                        picked.append((d, j, flat, "hard"))
                        break
                    flat -= m
            others = batch.other_docs(d, 1)
            if others:
                used: set[tuple[int, int, int]] = set()
                for _ in range(wanted - len(picked)):
                    for _attempt in range(_EASY_RETRIES):
                        e = others[rng.randrange(len(others))]
                        paragraphs = batch.paragraphs(e, 1)
                        j = paragraphs[rng.randrange(len(paragraphs))]
                        s = rng.randrange(batch.lengths[e][j])
                        if (e, j, s) not in used:
                            break
                    used.add((e, j, s))
                    picked.append((e, j, s, "easy"))
            rng.shuffle(picked)
            if len(picked) < wanted:
                counts["groups_short_of_candidates"] += 1
            for *_, kind in picked:
                counts[f"{kind}_candidates"] += 1
            out.append(
                {
                    "text_a": batch.docs[d][i][s0],
                    "candidates": [batch.docs[e][j][s] for e, j, s, _ in picked],
                    "labels": [int(kind == "positive") for *_, kind in picked],
                    "objective": "mspp",
                    "group": len(out),
                    "a_doc": batch.ids[d],
                    "a_par": i,
                    "a_sents": [s0],
                    "candidate_docs": [batch.ids[e] for e, *_ in picked],
                    "candidate_pars": [j for _, j, _, _ in picked],
                    "candidate_sents": [s for _, _, s, _ in picked],
                    "candidate_kinds": [kind for *_, kind in picked],
                }
            )
            counts["groups"] += 1
            doc_groups += 1
        if not doc_groups:
            counts["documents_skipped"] += 1
    if stats is not None:
        stats.update(counts)
    return out


register_objective(
    ObjectiveDefinition(
        name="mspp",
        description=(
            "which of k candidate sentences, read in one pass with a sentence of a paragraph, come from that "
            "paragraph? (joint multi-candidate model)"
        ),
        paper="Di Liello et al., 2022 (NAACL)",
        default_max_length=None,
        variants=(),
        triplet=False,
        grouped=True,
    )
)

# --------------------------------------------------------------------------- the tables, read from the definitions


def _named(**facts) -> tuple[str, ...]:
    return tuple(
        name
        for name, definition in OBJECTIVE_DEFINITIONS.items()
        if all(getattr(definition, fact) == value for fact, value in facts.items())
    )


_SINGLE = tuple(name for name, definition in OBJECTIVE_DEFINITIONS.items() if definition.variants == (name,))
PAIR_OBJECTIVES = tuple(name for name in _named(triplet=False, grouped=False) if name in _SINGLE)
TRIPLET_OBJECTIVES = tuple(name for name in _named(triplet=True) if name in _SINGLE)
BASE_OBJECTIVES = PAIR_OBJECTIVES + TRIPLET_OBJECTIVES + tuple(n for n in _named(grouped=False) if n not in _SINGLE)
JOINT_OBJECTIVES = _named(grouped=True)  # grouped examples for the joint multi-candidate models
OBJECTIVES = (
    BASE_OBJECTIVES
    + ("mlm",)
    + tuple(f"mlm_{name}" for name in BASE_OBJECTIVES)
    + JOINT_OBJECTIVES
    + tuple(f"mlm_{name}" for name in JOINT_OBJECTIVES)
)
# Default input length per objective (tokens): the papers' settings. SP and PSD read whole paragraphs (2022, A.1:
# 256); the others pair sentences (128); the mixes run "with the same setting as SSP" (2022, section 5).
DEFAULT_MAX_LENGTHS = {name: OBJECTIVE_DEFINITIONS[name].default_max_length for name in BASE_OBJECTIVES}


@dataclass(frozen=True)
class Objective:
    """A pre-training objective resolved once from its name: everything the data, the collator, the model builder
    and the run script ask of it.

        >>> objective = resolve_objective("MLM_DSLC")
        >>> objective.name, objective.base, objective.mlm_only, objective.triplet, objective.joint
        ('mlm_dslc', 'dslc', True, True, False)
        >>> resolve_objective("mspp").joint, resolve_objective("sp").default_max_length
        (True, 256)
    """

    name: str  # canonical (lower case): one of OBJECTIVES
    base: str  # without the ``mlm_`` prefix (``mlm`` is ``mlm_all``)
    mlm_only: bool  # the MLM ablation: the same examples, the structure labels kept aside and not trained

    @property
    def definition(self) -> ObjectiveDefinition:
        return OBJECTIVE_DEFINITIONS[self.base]

    @property
    def variants(self) -> tuple:
        """The sentence-level specs it samples from (empty for MSPP)."""
        return tuple(_SPECS[name] for name in self.definition.variants)

    @property
    def joint(self) -> bool:
        """Grouped examples for the joint multi-candidate models (MSPP)."""
        return self.definition.grouped

    @property
    def triplet(self) -> bool:
        """Examples with ``text_c`` (SDC, DPC, DSLC, ``all``): three segments."""
        return self.definition.triplet

    @property
    def default_max_length(self) -> int | None:
        """The papers' input length for this objective (None for MSPP, whose length is the slot layout's)."""
        return self.definition.default_max_length

    @property
    def description(self) -> str:
        """What it trains the model to predict, in a model card's words (``mlm_*``: the MLM ablation)."""
        if not self.mlm_only:
            return self.definition.description
        if self.name == "mlm":
            return MLM_DESCRIPTION
        return f"{MLM_DESCRIPTION}, on {self.base.upper()}'s examples"

    @property
    def paper(self) -> str | None:
        return None if self.name == "mlm" else self.definition.paper


def resolve_objective(objective: str | Objective) -> Objective:
    """The :class:`Objective` named ``objective`` (case-insensitive; an ``Objective`` is returned as is).
    ``ValueError`` naming the valid objectives otherwise."""
    if isinstance(objective, Objective):
        return objective
    name = objective.lower().strip() if isinstance(objective, str) else objective
    base, mlm = name, False
    if name == "mlm":
        base, mlm = "all", True
    elif isinstance(name, str) and name.startswith("mlm_"):
        base, mlm = name[4:], True
    if base not in OBJECTIVE_DEFINITIONS:
        raise ValueError(f"unknown objective {objective!r}; valid objectives: {', '.join(OBJECTIVES)}")
    return Objective(name=name, base=base, mlm_only=mlm)


def is_triplet_objective(objective: str | Objective) -> bool:
    """Whether ``objective`` produces ``text_c`` (SDC, DPC, DSLC, ``all`` and their ``mlm_`` ablations)."""
    return resolve_objective(objective).triplet


def is_joint_objective(objective: str | Objective) -> bool:
    """Whether ``objective`` produces grouped examples for the joint models (``mspp`` and ``mlm_mspp``)."""
    return resolve_objective(objective).joint


def generate_examples(
    objective: str | Objective,
    documents: Sequence[Document],
    rng: random.Random | int,
    *,
    doc_indices: Sequence[int] | None = None,
    num_negatives: int = 4,
    max_hard_negatives: int = 2,
    num_positives: int = MSPP_POSITIVES,
    stats: Counter | None = None,
) -> list[Example]:
    """Examples of ``objective`` for one batch of documents.

    Args:
        objective: one of :data:`OBJECTIVES` (case-insensitive); ``ValueError`` otherwise.
        documents: the batch; each document is a list of paragraphs, each a list of sentences.
        rng: a :class:`random.Random` (advanced in place) or an integer seed.
        doc_indices: global ids written to the ``*_doc`` provenance columns (default: positions).
        num_negatives: negatives per positive when the batch allows (papers: 4).
        max_hard_negatives: at most this many of them from the anchor's own document (papers: 2;
            ignored by PSD, which only uses easy negatives).
        num_positives: MSPP only: sentences of the anchor's paragraph among the candidates (k+ = 1). MSPP reads
            ``max_hard_negatives`` as k_hard and ``num_negatives - max_hard_negatives`` as k_easy, so the defaults
            give the paper's k = 1 + 2 + 2 = 5 candidates.
        stats: optional counter updated with ``positives``, ``negatives``,
            ``groups_short_of_negatives``, ``paragraphs_skipped`` (not eligible as anchors),
            ``documents_skipped`` (no positive) and ``single_paragraph_documents_skipped``.

    Returns a list of example dicts, each positive followed by its negatives.
    """
    resolved = resolve_objective(objective)
    variants, mlm = resolved.variants, resolved.mlm_only
    if num_negatives < 0 or max_hard_negatives < 0:
        raise ValueError("num_negatives and max_hard_negatives must be >= 0")
    if not isinstance(rng, random.Random):
        rng = random.Random(rng)
    if resolved.joint:
        if num_positives < 1 or max_hard_negatives > num_negatives:
            raise ValueError(
                "mspp needs num_positives >= 1 and max_hard_negatives <= num_negatives (k_easy = num_negatives - "
                f"max_hard_negatives), got {num_positives}, {max_hard_negatives}, {num_negatives}"
            )
        examples = _mspp(
            documents,
            rng,
            doc_indices,
            num_positives,
            max_hard_negatives,
            num_negatives - max_hard_negatives,
            stats,
        )
        if mlm:
            for example in examples:
                example["structure_labels"] = example["labels"]
                example["labels"] = [IGNORE_LABEL] * len(example["labels"])
                example["objective"] = "mlm_mspp"
        return examples
    examples = _generate(variants, documents, rng, doc_indices, num_negatives, max_hard_negatives, stats)
    if mlm:
        for example in examples:
            example["structure_label"] = example["label"]
            example["label"] = IGNORE_LABEL
            example["objective"] = f"mlm_{example['objective']}"
    return examples


def get_objective(objective: str | Objective) -> Callable[..., list[Example]]:
    """``generate_examples`` bound to ``objective`` (validated now): ``fn(documents, rng, **kwargs)``."""
    objective = resolve_objective(objective)

    def objective_fn(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
        return generate_examples(objective, documents, rng, **kwargs)

    objective_fn.__name__ = objective.name
    return objective_fn


def ssp(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """Spans in Same Paragraph; see :class:`_SSP` for the definition of positives and negatives."""
    return generate_examples("ssp", documents, rng, **kwargs)


def sp(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """Span in Paragraph; see :class:`_SP`."""
    return generate_examples("sp", documents, rng, **kwargs)


def psd(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """Paragraphs in Same Document; see :class:`_PSD`."""
    return generate_examples("psd", documents, rng, **kwargs)


def sdc(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """SSP with static document-level context; see :class:`_SDC`."""
    return generate_examples("sdc", documents, rng, **kwargs)


def dpc(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """SSP with dynamic paragraph-level context; see :class:`_DPC`."""
    return generate_examples("dpc", documents, rng, **kwargs)


def dslc(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """SSP with dynamic sentence-level local context; see :class:`_DSLC`."""
    return generate_examples("dslc", documents, rng, **kwargs)


def mspp(documents: Sequence[Document], rng: random.Random | int, **kwargs: Any) -> list[Example]:
    """Multi-Sentences in Paragraph Prediction (grouped examples for the joint models); see :func:`_mspp`."""
    return generate_examples("mspp", documents, rng, **kwargs)


# Put each objective's definition where ``help(ssp)`` shows it.
for _fn, _spec in ((ssp, _SSP), (sp, _SP), (psd, _PSD), (sdc, _SDC), (dpc, _DPC), (dslc, _DSLC), (mspp, _mspp)):
    _fn.__doc__ = _spec.__doc__
del _fn, _spec

"""Each pre-training objective owns its facts (definition, card description, paper, default length, grouped or not),
declared once in ``structure_objectives``; the tables and the model cards read them, and a forgotten fact is an error
at registration, not a card that silently says less."""

import dataclasses

import pytest

from as2hub.data_collators.objectives import structure_objectives as so
from as2hub.data_collators.objectives.structure_objectives import (
    OBJECTIVE_DEFINITIONS,
    OBJECTIVES,
    ObjectiveDefinition,
    generate_examples,
    register_objective,
    resolve_objective,
)
from as2hub.hub_cards.families import _describe_objective


@pytest.mark.parametrize("name", OBJECTIVES)
def test_every_registered_objective_has_a_card_description(name):
    objective = resolve_objective(name)
    card = _describe_objective(name)
    assert card.startswith(f"**{name.upper()}** (") and objective.description in card
    assert "see the papers" not in card
    if name != "mlm":
        assert objective.paper and objective.paper in card


def test_the_tables_are_read_from_the_definitions():
    assert so.PAIR_OBJECTIVES == ("ssp", "sp", "psd")
    assert so.TRIPLET_OBJECTIVES == ("sdc", "dpc", "dslc")
    assert so.BASE_OBJECTIVES == ("ssp", "sp", "psd", "sdc", "dpc", "dslc", "all", "all_pairs")
    assert so.JOINT_OBJECTIVES == ("mspp",)
    assert so.DEFAULT_MAX_LENGTHS == {
        "ssp": 128, "sp": 256, "psd": 256, "sdc": 128, "dpc": 128, "dslc": 128, "all": 128, "all_pairs": 128,
    }  # fmt: skip
    assert set(OBJECTIVE_DEFINITIONS) == set(so.BASE_OBJECTIVES + so.JOINT_OBJECTIVES)
    assert resolve_objective("mlm").base == "all" and resolve_objective("mlm").triplet
    assert resolve_objective("mspp").joint and resolve_objective("mspp").default_max_length is None
    assert [spec.name for spec in resolve_objective("all_pairs").variants] == ["ssp", "sp", "psd"]


def _definition(**changes):
    facts = dataclasses.asdict(OBJECTIVE_DEFINITIONS["ssp"])
    return ObjectiveDefinition(**{**facts, "name": "planted", **changes})


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"description": ""}, "description: empty"),
        ({"paper": ""}, "paper: empty"),
        ({"default_max_length": None}, "default_max_length"),
        ({"grouped": True}, "default_max_length"),
        ({"variants": ("nsp",)}, "variants: no spec named nsp"),
        ({"variants": ()}, "variants"),
        ({"triplet": True}, "triplet: differs"),
        ({"name": "mlm_planted"}, "name"),
        ({"name": "ssp"}, "already registered"),
    ],
)
def test_a_definition_with_a_missing_or_wrong_fact_is_refused_naming_it(changes, message):
    with pytest.raises(ValueError, match=message):
        register_objective(_definition(**changes))
    assert "planted" not in OBJECTIVE_DEFINITIONS


def test_a_definition_without_a_fact_fails_at_declaration():
    facts = dataclasses.asdict(OBJECTIVE_DEFINITIONS["ssp"])
    del facts["description"]
    with pytest.raises(TypeError, match="description"):
        ObjectiveDefinition(**facts)


def test_a_new_objective_is_one_declaration(monkeypatch):
    """A spec class with the decorator is an objective: examples, its MLM ablation and its card description."""
    monkeypatch.setattr(so, "OBJECTIVE_DEFINITIONS", dict(OBJECTIVE_DEFINITIONS))
    monkeypatch.setattr(so, "_SPECS", dict(so._SPECS))

    @so.sentence_objective(description="is B right after A?", paper="a test", default_max_length=64)
    class _Next(type(so._SPECS["ssp"])):
        name = "next_span"

    documents = [[["a b.", "c d.", "e f."], ["g h.", "i j."]], [["k l.", "m n."], ["o p.", "q r."]]]
    assert generate_examples("next_span", documents, rng=0)
    assert resolve_objective("mlm_next_span").default_max_length == 64
    assert _describe_objective("next_span") == "**NEXT_SPAN** (is B right after A?; a test)"

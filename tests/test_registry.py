"""The family registry: every family's facts are declared once, checked on registration, and the library's tables
(first token, ONNX export, scores, LoRA, positions, the run scripts' class lookups) are read from it."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from as2hub.inference.onnx_export import EXPORT_LAYOUTS, EXPORT_SPECS
from as2hub.modeling import CONTEXTUAL_MODELS, JOINT_MODELS, JOINT_PRETRAINING_MODELS, SSP_MODELS, registry
from as2hub.modeling.first_token import FIRST_TOKEN_MODEL_TYPES
from as2hub.modeling.registry import FAMILIES, Family, check_family, family_of, model_types, position_offset
from as2hub.modeling.scores import JOINT_MODEL_TYPES, SCORE_RULES
from as2hub.run_scripts.arguments import usable_positions


def test_the_four_families_are_registered_with_their_model_types():
    assert set(FAMILIES) == {"contextual_as2", "ssp_pretraining", "joint_multicandidate", "longformer_qe"}
    types = [t for family in FAMILIES.values() for t in family.model_types]
    assert len(types) == len(set(types))
    for family in FAMILIES.values():
        check_family(family)
        for model_type in family.model_types:
            assert family_of(model_type) is family
            assert AutoConfig.for_model(model_type).model_type == model_type
    assert family_of("bert") is None


def test_the_library_tables_are_read_from_the_registry():
    assert FIRST_TOKEN_MODEL_TYPES == {"contextual_roberta", "contextual_electra", "contextual_bert"}
    assert set(JOINT_MODEL_TYPES) == {"joint_roberta", "joint_electra", "joint_bert"}
    assert set(EXPORT_SPECS) == set(model_types(onnx_export="cross_encoder")) | set(model_types(onnx_export="joint"))
    assert {EXPORT_SPECS[t] is EXPORT_LAYOUTS[family_of(t).onnx_export] for t in EXPORT_SPECS} == {True}
    assert set(SCORE_RULES) == set(registry.SCORE_RULE_NAMES)
    assert set(EXPORT_LAYOUTS) == set(registry.EXPORT_LAYOUT_NAMES)
    assert CONTEXTUAL_MODELS["bert"] == (
        registry.CONTEXTUAL_AS2.configs["bert"],
        registry.CONTEXTUAL_AS2.model_class("bert", AutoModelForSequenceClassification),
    )
    assert set(SSP_MODELS) == set(JOINT_MODELS) == set(JOINT_PRETRAINING_MODELS) == {"roberta", "electra", "bert"}
    assert JOINT_MODELS["roberta"][1] is not JOINT_PRETRAINING_MODELS["roberta"][1]


def test_no_library_module_writes_a_model_type_of_its_own():
    """A second hand-written table (a set of model types beside the registry) would pass the comparisons above while
    the registry and it agree; it is caught here instead: outside the registry and the families' own remote code, no
    module of the library names a model type. Family names are allowed (``longformer_qe`` is both)."""
    root = Path(registry.__file__).resolve().parent.parent
    remote = {f"modeling/{family}" for family in FAMILIES}
    family_names = set(FAMILIES)
    types = {t for family in FAMILIES.values() for t in family.model_types} - family_names
    assert len(types) == 9  # 3 backbones x contextual, ssp, joint
    found = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root).as_posix()
        top = relative.split("/")[0]
        if top not in (
            "modeling",
            "inference",
            "metrics",
            "training",
            "data_collators",
            "serving",
            "run_scripts",
            "hub_cards",
        ):
            continue
        if relative == "modeling/registry.py" or any(relative.startswith(folder + "/") for folder in remote):
            continue
        text = path.read_text()
        found += [f"{relative}: {t}" for t in sorted(types) if f'"{t}"' in text or f"'{t}'" in text]
    assert found == []


def test_position_offset_and_usable_positions():
    roberta = AutoConfig.for_model("roberta", max_position_embeddings=514, pad_token_id=1)
    assert position_offset(roberta) == 2 and usable_positions(roberta) == 512
    assert position_offset(AutoConfig.for_model("bert")) == 0
    assert usable_positions(AutoConfig.for_model("bert", max_position_embeddings=512)) == 512
    contextual = AutoConfig.for_model("contextual_roberta", pad_token_id=1)
    assert position_offset(contextual) == 2
    assert position_offset(AutoConfig.for_model("contextual_bert")) == 0
    qe = AutoConfig.for_model("longformer_qe", pad_token_id=1, max_position_embeddings=4098)
    assert position_offset(qe) == 2 and usable_positions(qe) == 4096
    assert AutoConfig.for_model("joint_roberta", pad_token_id=1).position_offset == position_offset(
        AutoConfig.for_model("joint_roberta", pad_token_id=1)
    )


def test_lora_facts_come_from_the_family():
    class Model:
        def __init__(self, model_type):
            self.config = type("Config", (), {"model_type": model_type})()

    assert registry.fully_trained_modules(Model("contextual_bert")) == ["classifier", "token_type_embeddings"]
    assert "qe" in registry.fully_trained_modules(Model("longformer_qe"))
    assert registry.fully_trained_modules(Model("bert")) == list(registry.DEFAULT_FULLY_TRAINED)
    assert "query_global" in registry.LONGFORMER_QE.lora_target_modules


def _facts(**changes):
    family = registry.CONTEXTUAL_AS2
    facts = {field.name: getattr(family, field.name) for field in dataclasses.fields(Family)}
    return {**facts, "name": "planted", **changes}


@pytest.mark.parametrize("fact", [field.name for field in dataclasses.fields(Family)])
def test_a_family_declared_without_a_fact_fails_at_declaration(fact):
    facts = _facts()
    del facts[fact]
    with pytest.raises(TypeError, match=fact):
        Family(**facts)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"lora_fully_trained": ()}, "lora_fully_trained"),
        ({"lora_target_modules": ()}, "lora_target_modules"),
        ({"onnx_export": "tflite"}, "onnx_export 'tflite'"),
        ({"score": "margin"}, "score 'margin'"),
        ({"score": None}, "onnx_export without a score rule"),
        ({"positions_after_padding": frozenset({"gpt2"})}, "positions_after_padding: gpt2"),
        ({"configs": {}}, "configs: no backbone"),
        ({"auto_models": {AutoModel: {"roberta": object}}}, r"auto_models\[AutoModel\]: no model class for bert"),
    ],
)
def test_a_family_with_a_wrong_or_empty_fact_is_refused_naming_it(changes, message):
    with pytest.raises(ValueError, match=message):
        registry.register_family(Family(**_facts(**changes)))
    assert "planted" not in FAMILIES


def test_a_model_type_cannot_belong_to_two_families():
    with pytest.raises(ValueError, match="already registered"):
        registry.register_family(Family(**_facts()))
    assert "planted" not in FAMILIES


# A fresh process registers two planted families (new model types, one per exported layout) and then re-imports the
# modules that hold the library's tables: a table generated from the registry takes the planted types in, a
# hand-written one (even one equal to the literals above) does not.
PLANT = """
import importlib, json
from transformers import AutoModel, BertConfig, BertForSequenceClassification, BertModel
from as2hub.modeling import registry

class PlantedRankerConfig(BertConfig):
    model_type = "planted_ranker_bert"

class PlantedRanker(BertForSequenceClassification):
    config_class = PlantedRankerConfig

class PlantedJointConfig(BertConfig):
    model_type = "planted_joint_bert"

class PlantedJoint(BertModel):
    config_class = PlantedJointConfig

facts = dict(lora_target_modules=("query",), lora_fully_trained=("planted_head",), positions_after_padding=frozenset())
registry.register_family(registry.Family(name="planted_ranker", configs={"bert": PlantedRankerConfig},
    auto_models={AutoModel: {"bert": PlantedRanker}}, first_token=True, onnx_export="cross_encoder", score="label",
    **facts))
registry.register_family(registry.Family(name="planted_joint", configs={"bert": PlantedJointConfig},
    auto_models={AutoModel: {"bert": PlantedJoint}}, first_token=False, onnx_export="joint", score="joint", **facts))
from as2hub.modeling import first_token, scores
from as2hub.inference import onnx_export
for module in (first_token, scores, onnx_export):
    importlib.reload(module)
model = type("Model", (), {"config": PlantedRankerConfig()})()
print(json.dumps({
    "first_token": sorted(first_token.FIRST_TOKEN_MODEL_TYPES),
    "joint": sorted(scores.JOINT_MODEL_TYPES),
    "export": {t: [k for k, v in onnx_export.EXPORT_LAYOUTS.items() if v is spec][0]
               for t, spec in onnx_export.EXPORT_SPECS.items()},
    "fully_trained": registry.fully_trained_modules(model),
}))
"""


def test_a_newly_registered_family_enters_every_table_its_facts_put_it_in():
    done = subprocess.run([sys.executable, "-c", PLANT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    tables = json.loads(done.stdout.strip().splitlines()[-1])
    assert tables["first_token"] == sorted(
        ["contextual_roberta", "contextual_electra", "contextual_bert", "planted_ranker_bert"]
    )
    assert tables["joint"] == sorted(["joint_roberta", "joint_electra", "joint_bert", "planted_joint_bert"])
    assert tables["export"] == {
        **dict.fromkeys(["contextual_roberta", "contextual_electra", "contextual_bert"], "cross_encoder"),
        **dict.fromkeys(["joint_roberta", "joint_electra", "joint_bert"], "joint"),
        "planted_ranker_bert": "cross_encoder",
        "planted_joint_bert": "joint",
    }
    assert tables["fully_trained"] == ["planted_head"]

"""Every as2hub model family, declared once: the library reads its facts here, nowhere else.

A family is one remote-code folder (``contextual_as2``, ``ssp_pretraining``, ``joint_multicandidate``,
``longformer_qe``). Its :class:`Family` names the config class of each backbone, the model class each Auto class
loads, the LoRA target modules and the modules trained fully beside the adapters, whether the first-token shortcut
applies (:mod:`~as2hub.modeling.first_token`), how the ONNX backend exports it, which backbones number positions from
``pad_token_id + 1`` (RoBERTa's offset) and the rule turning its logits into scores (:mod:`~as2hub.modeling.scores`).
Every field is required, and :func:`register_family` checks them, so a family missing a fact fails at import, not
later in a run. The remote-code folders never import this module: what goes to the Hub stays torch + transformers.

    >>> from as2hub.modeling.registry import family_of, model_types
    >>> family_of("contextual_roberta").name
    'contextual_as2'
    >>> model_types(score="joint")
    ('joint_roberta', 'joint_electra', 'joint_bert')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
)

from as2hub.modeling import contextual_as2, joint_multicandidate, longformer_qe, ssp_pretraining

# The names a family's ``onnx_export`` and ``score`` may take: onnx_export.EXPORT_LAYOUTS and scores.SCORE_RULES
# implement exactly these (each module checks it on import).
EXPORT_LAYOUT_NAMES = ("cross_encoder", "joint")
SCORE_RULE_NAMES = ("label", "joint")
# Stock model types (not as2hub's) whose positions start at pad_token_id + 1, as RoBERTa's (fairseq's make_positions).
STOCK_POSITIONS_AFTER_PADDING = ("roberta", "xlm-roberta", "camembert", "longformer")
# Modules trained fully beside LoRA adapters when a model is none of the families (a stock cross-encoder).
DEFAULT_FULLY_TRAINED = ("classifier", "token_type_embeddings")


@dataclass(frozen=True)
class Family:
    """The facts of one model family. No field has a default: leaving one out is a ``TypeError`` at declaration."""

    name: str  # the remote-code folder under modeling/
    configs: Mapping[str, type]  # backbone ("roberta", "bert", ...) -> config class
    auto_models: Mapping[type, Mapping[str, type]]  # Auto class -> backbone -> model class it loads
    lora_target_modules: tuple[str, ...]  # the default --lora_target_modules
    lora_fully_trained: tuple[str, ...]  # PEFT's modules_to_save: new heads and grown embeddings
    first_token: bool  # whether the heads read the first token only (the first-token shortcut applies)
    onnx_export: str | None  # one of EXPORT_LAYOUT_NAMES, or None: not exported
    score: str | None  # one of SCORE_RULE_NAMES, or None: not a ranker
    positions_after_padding: frozenset[str]  # backbones numbering positions from pad_token_id + 1

    @property
    def model_types(self) -> tuple[str, ...]:
        return tuple(config.model_type for config in self.configs.values())

    def model_class(self, backbone: str, auto_class: type = AutoModel) -> type:
        return self.auto_models[auto_class][backbone]

    def classes(self, auto_class: type = AutoModel) -> dict[str, tuple[type, type]]:
        """backbone -> (config class, model class) for one Auto class (the run scripts' lookup)."""
        return {backbone: (config, self.auto_models[auto_class][backbone]) for backbone, config in self.configs.items()}


FAMILIES: dict[str, Family] = {}
_BY_MODEL_TYPE: dict[str, Family] = {}


def check_family(family: Family) -> None:
    """ValueError naming the fact when ``family`` lacks one or contradicts itself."""
    problems = []
    if not family.configs:
        problems.append("configs: no backbone")
    if not family.auto_models:
        problems.append("auto_models: no Auto class")
    for auto_class, models in family.auto_models.items():
        missing = sorted(set(family.configs) - set(models))
        if missing:
            problems.append(f"auto_models[{auto_class.__name__}]: no model class for {', '.join(missing)}")
    if not family.lora_target_modules:
        problems.append("lora_target_modules: empty")
    if not family.lora_fully_trained:
        problems.append("lora_fully_trained: empty (the new heads would stay untrained under LoRA)")
    if family.onnx_export not in (None, *EXPORT_LAYOUT_NAMES):
        problems.append(f"onnx_export {family.onnx_export!r}: not one of {EXPORT_LAYOUT_NAMES}")
    if family.score not in (None, *SCORE_RULE_NAMES):
        problems.append(f"score {family.score!r}: not one of {SCORE_RULE_NAMES}")
    if family.onnx_export is not None and family.score is None:
        problems.append("onnx_export without a score rule: an exported graph's logits could not be read")
    if family.first_token and family.score is None:
        problems.append("first_token without a score rule: the shortcut serves ranking only")
    unknown = sorted(family.positions_after_padding - set(family.configs))
    if unknown:
        problems.append(f"positions_after_padding: {', '.join(unknown)} not among the backbones")
    if not isinstance(family.first_token, bool):
        problems.append("first_token: must be True or False")
    if problems:
        raise ValueError(f"model family {family.name!r}: " + "; ".join(problems))


def register_family(family: Family) -> Family:
    """Check ``family``, register its configs and models with the Auto classes and make it known to the library."""
    check_family(family)
    taken = {t: _BY_MODEL_TYPE[t].name for t in family.model_types if _BY_MODEL_TYPE.get(t, family).name != family.name}
    if taken:
        raise ValueError(f"model family {family.name!r}: model types already registered: {taken}")
    for backbone, config_class in family.configs.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        for auto_class, models in family.auto_models.items():
            auto_class.register(config_class, models[backbone], exist_ok=True)
        _BY_MODEL_TYPE[config_class.model_type] = family
    FAMILIES[family.name] = family
    return family


def family_of(model_type_or_config) -> Family | None:
    """The family of a model type (or of a config: its class's model type, else the instance's), None for stock."""
    if isinstance(model_type_or_config, str) or model_type_or_config is None:
        return _BY_MODEL_TYPE.get(model_type_or_config)
    for model_type in (
        getattr(type(model_type_or_config), "model_type", None),
        getattr(model_type_or_config, "model_type", None),
    ):
        if model_type in _BY_MODEL_TYPE:
            return _BY_MODEL_TYPE[model_type]
    return None


def model_types(**facts) -> tuple[str, ...]:
    """The registered model types whose families have every given fact, e.g. ``model_types(first_token=True)``."""
    return tuple(
        model_type
        for family in FAMILIES.values()
        if all(getattr(family, name) == value for name, value in facts.items())
        for model_type in family.model_types
    )


def backbone_of(model_type: str) -> str:
    """``contextual_roberta`` / ``ssp_roberta`` / ``roberta`` -> ``roberta``: the backbone of a model type."""
    family = _BY_MODEL_TYPE.get(model_type)
    if family is not None:
        return next(b for b, config in family.configs.items() if config.model_type == model_type)
    return model_type


def position_offset(config) -> int:
    """Index of position 0 in ``config``'s position table: ``pad_token_id + 1`` for RoBERTa-style backbones, else 0."""
    model_type = getattr(config, "model_type", "") or ""
    family = family_of(model_type)
    after_padding = (
        backbone_of(model_type) in family.positions_after_padding
        if family is not None
        else model_type in STOCK_POSITIONS_AFTER_PADDING
    )
    if not after_padding:
        return 0
    pad = getattr(config, "pad_token_id", None)
    return (pad if pad is not None else 1) + 1


def fully_trained_modules(model) -> list[str]:
    """The modules of ``model``'s family trained fully beside LoRA adapters."""
    family = family_of(getattr(model.config, "model_type", None))
    return list(family.lora_fully_trained if family is not None else DEFAULT_FULLY_TRAINED)


# --------------------------------------------------------------------------------------------------------------------
# The families

# The facts the three BERT-architecture backbones share (RoBERTa's positions start after the padding index).
_BERT_LIKE = {
    "lora_target_modules": ("query", "value"),
    "lora_fully_trained": DEFAULT_FULLY_TRAINED,  # the head and the grown token-type rows
    "positions_after_padding": frozenset({"roberta"}),
}

_BACKBONE_CLASS_NAMES = {"roberta": "Roberta", "electra": "Electra", "bert": "Bert"}


def _by_backbone(module, pattern: str) -> dict[str, type]:
    """backbone -> ``module``'s class named ``pattern`` with the backbone's class name (``"{}ForContextualAS2"``)."""
    return {backbone: getattr(module, pattern.format(name)) for backbone, name in _BACKBONE_CLASS_NAMES.items()}


CONTEXTUAL_AS2 = register_family(
    Family(
        name="contextual_as2",
        configs=_by_backbone(contextual_as2, "Contextual{}Config"),
        auto_models=dict.fromkeys(
            (AutoModel, AutoModelForSequenceClassification), _by_backbone(contextual_as2, "{}ForContextualAS2")
        ),
        first_token=True,
        onnx_export="cross_encoder",
        score="label",
        **_BERT_LIKE,
    )
)

SSP_PRETRAINING = register_family(
    Family(
        name="ssp_pretraining",
        configs=_by_backbone(ssp_pretraining, "SSP{}Config"),
        auto_models=dict.fromkeys(
            (AutoModel, AutoModelForPreTraining), _by_backbone(ssp_pretraining, "{}ForSSPPretraining")
        ),
        first_token=False,
        onnx_export=None,
        score=None,
        **_BERT_LIKE,
    )
)

# Joint multi-candidate models (Di Liello et al., NAACL 2022). AutoModel gives the fine-tuning class,
# AutoModelForPreTraining the MLM + MSPP class. No task Auto class: ``*_k`` heads give one logit per candidate slot of
# one sequence, which is neither sequence classification nor multiple choice; the folder ships its own pipeline.
_JOINT = joint_multicandidate.JOINT_BACKBONES  # backbone -> (config, fine-tuning model, pre-training model)
JOINT_MULTICANDIDATE = register_family(
    Family(
        name="joint_multicandidate",
        configs={backbone: classes[0] for backbone, classes in _JOINT.items()},
        auto_models={
            AutoModel: {backbone: classes[1] for backbone, classes in _JOINT.items()},
            AutoModelForPreTraining: {backbone: classes[2] for backbone, classes in _JOINT.items()},
        },
        first_token=False,  # the heads read every candidate slot's first token
        onnx_export="joint",
        score="joint",
        **_BERT_LIKE,
    )
)

LONGFORMER_QE = register_family(
    Family(
        name="longformer_qe",
        configs={"longformer": longformer_qe.LongformerQEConfig},
        auto_models=dict.fromkeys(
            (AutoModel, AutoModelForQuestionAnswering), {"longformer": longformer_qe.LongformerWithQEContrastive}
        ),
        # Longformer: the global-attention projections get adapters too.
        lora_target_modules=("query", "value", "query_global", "value_global"),
        # The answer / type / sentence / paragraph heads, the QE projections and the new marker embeddings.
        lora_fully_trained=(
            "qa_outputs",
            "answer_type_head",
            "sentence_head",
            "paragraph_head",
            "qe",
            "word_embeddings",
        ),
        first_token=False,
        onnx_export=None,
        score=None,
        positions_after_padding=frozenset({"longformer"}),
    )
)

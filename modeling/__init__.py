"""as2hub models, registered with the Auto classes on import.

    >>> import as2hub.modeling  # registers contextual_*, ssp_*, joint_* (roberta, electra, bert) and longformer_qe
    >>> from transformers import AutoModelForSequenceClassification
    >>> model = AutoModelForSequenceClassification.from_pretrained("path/to/ranker")  # doctest: +SKIP

A saved model does not need as2hub: ``from_pretrained(folder, trust_remote_code=True)`` runs the code saved with it.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
)

from .contextual_as2 import (
    BertForContextualAS2,
    ContextualBertConfig,
    ContextualElectraConfig,
    ContextualRobertaConfig,
    ElectraForContextualAS2,
    RobertaForContextualAS2,
)
from .joint_multicandidate import JOINT_BACKBONES, JointMultiCandidateModel
from .longformer_qe import LongformerQEConfig, LongformerQEOutput, LongformerWithQEContrastive
from .ssp_pretraining import (
    BertForSSPPretraining,
    ElectraForSSPPretraining,
    RobertaForSSPPretraining,
    SSPBertConfig,
    SSPElectraConfig,
    SSPPretrainingOutput,
    SSPRobertaConfig,
)

CONTEXTUAL_MODELS = {
    # backbone model_type -> (config class, model class)
    "roberta": (ContextualRobertaConfig, RobertaForContextualAS2),
    "electra": (ContextualElectraConfig, ElectraForContextualAS2),
    "bert": (ContextualBertConfig, BertForContextualAS2),
}


def backbone_of(model_type: str) -> str:
    """``contextual_roberta`` / ``ssp_roberta`` / ``roberta`` -> ``roberta``: which family a checkpoint belongs to."""
    for prefix in ("contextual_", "ssp_", "joint_"):
        model_type = model_type.removeprefix(prefix)
    return model_type


def _register(config_class, model_class, auto_model_classes=(AutoModel, AutoModelForSequenceClassification)):
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for auto_class in auto_model_classes:
        auto_class.register(config_class, model_class, exist_ok=True)


SSP_MODELS = {
    "roberta": (SSPRobertaConfig, RobertaForSSPPretraining),
    "electra": (SSPElectraConfig, ElectraForSSPPretraining),
    "bert": (SSPBertConfig, BertForSSPPretraining),
}

for _config_class, _model_class in CONTEXTUAL_MODELS.values():
    _register(_config_class, _model_class)
for _config_class, _model_class in SSP_MODELS.values():
    _register(_config_class, _model_class, (AutoModel, AutoModelForPreTraining))
_register(LongformerQEConfig, LongformerWithQEContrastive, (AutoModel, AutoModelForQuestionAnswering))

# Joint multi-candidate models (Di Liello et al., NAACL 2022): backbone -> (config class, model class). AutoModel gives
# the fine-tuning class; AutoModelForPreTraining the MLM + MSPP class (JOINT_PRETRAINING_MODELS). No task Auto class:
# ``*_k`` heads give one logit per candidate slot of one sequence, which is neither sequence classification nor
# multiple choice, and stock pipelines cannot build the slot layout; the folder ships its own pipeline instead.
JOINT_MODELS = {backbone: (config, model) for backbone, (config, model, _) in JOINT_BACKBONES.items()}
JOINT_PRETRAINING_MODELS = {backbone: (config, model) for backbone, (config, _, model) in JOINT_BACKBONES.items()}
for _config_class, _model_class in JOINT_MODELS.values():
    _register(_config_class, _model_class, (AutoModel,))
for _config_class, _model_class in JOINT_PRETRAINING_MODELS.values():
    _register(_config_class, _model_class, (AutoModelForPreTraining,))

__all__ = [
    "BertForContextualAS2",
    "BertForSSPPretraining",
    "CONTEXTUAL_MODELS",
    "ElectraForSSPPretraining",
    "LongformerQEConfig",
    "LongformerQEOutput",
    "LongformerWithQEContrastive",
    "RobertaForSSPPretraining",
    "SSPBertConfig",
    "SSPElectraConfig",
    "SSPPretrainingOutput",
    "SSPRobertaConfig",
    "SSP_MODELS",
    "backbone_of",
    "JOINT_MODELS",
    "JOINT_PRETRAINING_MODELS",
    "JointMultiCandidateModel",
    "ContextualBertConfig",
    "ContextualElectraConfig",
    "ContextualRobertaConfig",
    "ElectraForContextualAS2",
    "RobertaForContextualAS2",
]

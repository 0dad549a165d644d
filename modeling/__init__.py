"""as2hub models, registered with the Auto classes on import.

    >>> import as2hub.modeling  # registers contextual_*, ssp_*, joint_* (roberta, electra, bert) and longformer_qe
    >>> from transformers import AutoModelForSequenceClassification
    >>> model = AutoModelForSequenceClassification.from_pretrained("path/to/ranker")  # doctest: +SKIP

A saved model does not need as2hub: ``from_pretrained(folder, trust_remote_code=True)`` runs the code saved with it.
"""

from transformers import AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

from .contextual_as2 import (
    BertForContextualAS2,
    ContextualBertConfig,
    ContextualElectraConfig,
    ContextualRobertaConfig,
    ElectraForContextualAS2,
    RobertaForContextualAS2,
)
from .joint_multicandidate import JointMultiCandidateModel
from .longformer_qe import LongformerQEConfig, LongformerQEOutput, LongformerWithQEContrastive
from .registry import (
    CONTEXTUAL_AS2,
    FAMILIES,
    JOINT_MULTICANDIDATE,
    SSP_PRETRAINING,
    backbone_of,
    family_of,
)
from .ssp_pretraining import (
    BertForSSPPretraining,
    ElectraForSSPPretraining,
    RobertaForSSPPretraining,
    SSPBertConfig,
    SSPElectraConfig,
    SSPPretrainingOutput,
    SSPRobertaConfig,
)

# The run scripts' lookups, read from the family registry (registry.py registers every family with the Auto classes):
# backbone -> (config class, model class).
CONTEXTUAL_MODELS = CONTEXTUAL_AS2.classes(AutoModelForSequenceClassification)
SSP_MODELS = SSP_PRETRAINING.classes(AutoModelForPreTraining)
JOINT_MODELS = JOINT_MULTICANDIDATE.classes(AutoModel)
JOINT_PRETRAINING_MODELS = JOINT_MULTICANDIDATE.classes(AutoModelForPreTraining)

__all__ = [
    "BertForContextualAS2",
    "BertForSSPPretraining",
    "CONTEXTUAL_MODELS",
    "FAMILIES",
    "family_of",
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

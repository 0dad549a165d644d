"""Structure-aware continued pre-training models. The files of this folder (not this __init__) are the Hub remote code."""

from .configuration_ssp_pretraining import SSPBertConfig, SSPElectraConfig, SSPRobertaConfig
from .modeling_ssp_pretraining import (
    BertForSSPPretraining,
    ElectraForSSPPretraining,
    RobertaForSSPPretraining,
    SSPPretrainingOutput,
)

__all__ = [
    "BertForSSPPretraining",
    "ElectraForSSPPretraining",
    "RobertaForSSPPretraining",
    "SSPBertConfig",
    "SSPElectraConfig",
    "SSPPretrainingOutput",
    "SSPRobertaConfig",
]

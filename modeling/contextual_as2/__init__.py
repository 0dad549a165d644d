"""Contextual AS2 cross-encoders. The files of this folder (not this __init__) are the Hub remote code."""

from .configuration_contextual_as2 import ContextualBertConfig, ContextualElectraConfig, ContextualRobertaConfig
from .modeling_contextual_as2 import BertForContextualAS2, ElectraForContextualAS2, RobertaForContextualAS2

__all__ = [
    "BertForContextualAS2",
    "ContextualBertConfig",
    "ContextualElectraConfig",
    "ContextualRobertaConfig",
    "ElectraForContextualAS2",
    "RobertaForContextualAS2",
]

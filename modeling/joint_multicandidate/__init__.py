"""Joint multi-candidate models. The files of this folder (not this __init__) are the Hub remote code."""

from .configuration_joint_multicandidate import JointBertConfig, JointElectraConfig, JointRobertaConfig
from .joint_layout import SlotLayout
from .modeling_joint_multicandidate import (
    JOINT_BACKBONES,
    BertForJointMultiCandidate,
    BertForJointPretraining,
    ElectraForJointMultiCandidate,
    ElectraForJointPretraining,
    JointMultiCandidateModel,
    JointMultiCandidateOutput,
    RobertaForJointMultiCandidate,
    RobertaForJointPretraining,
    joint_backbone,
)

__all__ = [
    "BertForJointMultiCandidate",
    "BertForJointPretraining",
    "ElectraForJointMultiCandidate",
    "ElectraForJointPretraining",
    "JOINT_BACKBONES",
    "JointBertConfig",
    "JointElectraConfig",
    "JointMultiCandidateModel",
    "JointMultiCandidateOutput",
    "JointRobertaConfig",
    "RobertaForJointMultiCandidate",
    "RobertaForJointPretraining",
    "SlotLayout",
    "joint_backbone",
]

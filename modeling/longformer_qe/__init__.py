"""Long-context QA with a question–evidence contrastive loss. The files of this folder (not this __init__) are the Hub
remote code."""

from .configuration_longformer_qe import MARKER_TOKENS, LongformerQEConfig
from .modeling_longformer_qe import (
    LongformerQEOutput,
    LongformerWithQEContrastive,
    infer_marker_inputs,
    question_evidence_loss,
)

__all__ = [
    "LongformerQEConfig",
    "LongformerQEOutput",
    "LongformerWithQEContrastive",
    "MARKER_TOKENS",
    "infer_marker_inputs",
    "question_evidence_loss",
]

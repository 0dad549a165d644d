"""The probability that a candidate is correct, from a ranker's raw logits: the one rule every scorer outside the
remote code shares (``Ranker``'s ONNX backend, ``JointRanker``, the run scripts' prediction files).

The remote-code models carry the same rule as ``logits_to_scores``; this copy exists because the library must not
import a Hub folder's code to read an exported graph's logits.

    >>> import torch
    >>> from transformers import PretrainedConfig
    >>> config = PretrainedConfig(label2id={"incorrect": 0, "correct": 1})
    >>> probability_of_correct(torch.tensor([[0.0, 0.0]]), config)
    tensor([0.5000])
"""

from __future__ import annotations

import torch

from as2hub.modeling.registry import SCORE_RULE_NAMES, family_of, model_types

# Joint multi-candidate models: one sigmoid per candidate slot for ``*_k`` heads, label probabilities for ``*_1``.
JOINT_MODEL_TYPES = model_types(score="joint")


def is_joint_config(config) -> bool:
    """Whether ``config`` is a joint multi-candidate model's: its class's model type (a joint config grown from a
    stock checkpoint keeps the checkpoint's ``model_type`` on the instance until it is saved) or the instance's."""
    family = family_of(config)
    return family is not None and family.score == "joint"


def label_probability(logits, config) -> torch.Tensor:
    """Sigmoid of a single logit, else the softmax probability of the ``"correct"`` label (the last label when the
    config names none)."""
    if logits.ndim == 1 or logits.shape[-1] == 1:
        return torch.sigmoid(logits.reshape(-1))
    return logits.softmax(-1)[:, config.label2id.get("correct", logits.shape[-1] - 1)]


def joint_probability(logits, config) -> torch.Tensor:
    """Per-candidate sigmoids for ``*_k`` heads (``(batch, k)``), label probabilities for ``*_1`` heads."""
    return torch.sigmoid(logits) if config.candidate_head else logits.softmax(-1)


# A family's ``score`` (registry.Family.score) -> its rule; a stock cross-encoder (no family) scores by ``label``.
SCORE_RULES = {"label": label_probability, "joint": joint_probability}
if set(SCORE_RULES) != set(SCORE_RULE_NAMES):
    raise ImportError(f"scores.SCORE_RULES {sorted(SCORE_RULES)} differ from registry.SCORE_RULE_NAMES")


def probability_of_correct(logits, config) -> torch.Tensor:
    """The family's score rule (:data:`SCORE_RULES`) on ``logits``: sigmoid of a single logit, else the softmax
    probability of the ``"correct"`` label; joint models: per-candidate sigmoids for ``*_k`` heads (``(batch, k)``),
    label probabilities for ``*_1`` heads. Computed in float32 (float64 logits stay float64), whatever the logits'
    dtype."""
    logits = torch.as_tensor(logits)
    logits = logits if logits.dtype == torch.float64 else logits.float()
    family = family_of(config)
    rule = family.score if family is not None and family.score is not None else "label"
    return SCORE_RULES[rule](logits, config)

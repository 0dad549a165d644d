"""Pre-training pieces shared by the SSP models and the joint MSPP models (this file is symlinked into both remote-code
folders and shipped with them): the output dataclass and the MLM loss computed on masked positions only."""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput


@dataclass
class SSPPretrainingOutput(ModelOutput):
    """Output of the ``*ForSSPPretraining`` and ``*ForJointPretraining`` models.

    Args:
        loss: ``mlm_weight * mlm_loss + cls_weight * cls_loss`` (+ ``rtd_weight * rtd_loss`` for ELECTRA), over the
            components whose labels were given.
        mlm_loss: cross-entropy over the masked positions (ELECTRA: the generator's).
        rtd_loss: ELECTRA replaced-token detection, binary cross-entropy over the non-padding tokens.
        cls_loss: sentence-level loss (binary cross-entropy with one logit, cross-entropy with two); for the joint
            models the MSPP loss, binary cross-entropy over the filled candidate slots.
        cls_logits: ``(batch, num_labels)`` logits of the sentence-level head; for the joint models ``(batch, k)``,
            one logit per candidate slot.
        mlm_logits: ``(batch, length, vocab)``; only when ``config.return_mlm_logits``.
        rtd_logits: ELECTRA ``(batch, length)`` logits that a token was replaced.
        rtd_labels: ELECTRA ``(batch, length)`` 1 where the sampled token differs from the original.
        cls_accuracy: fraction of the labelled items (examples; candidate slots for MSPP) predicted correctly.
        rtd_accuracy: ELECTRA accuracy of replaced-token detection over the non-padding tokens.
    """

    loss: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    rtd_loss: torch.FloatTensor | None = None
    cls_loss: torch.FloatTensor | None = None
    cls_logits: torch.FloatTensor | None = None
    mlm_logits: torch.FloatTensor | None = None
    rtd_logits: torch.FloatTensor | None = None
    rtd_labels: torch.LongTensor | None = None
    cls_accuracy: torch.FloatTensor | None = None
    rtd_accuracy: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


def masked_lm_loss(
    hidden_states: torch.Tensor, labels: torch.Tensor, head: nn.Module, vocab_size: int, full_logits: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Cross-entropy over positions whose label is not -100; returns (loss, full logits or None, masked logits).

    Unless ``full_logits``, the head only runs on the masked rows (~15% of the tokens), which avoids materialising a
    ``(batch, length, vocab)`` tensor. A batch without masked tokens gives a zero loss that keeps the graph. The sum
    divided by the count (at least 1) is the mean without a branch on the data, which ``torch.compile`` could not
    trace.
    """
    labels = labels.to(hidden_states.device)
    selected = labels != -100
    logits = head(hidden_states) if full_logits else None
    masked_logits = logits[selected] if full_logits else head(hidden_states[selected])
    total = nn.functional.cross_entropy(masked_logits.view(-1, vocab_size).float(), labels[selected], reduction="sum")
    return total / selected.sum().clamp(min=1), logits, masked_logits


def masked_mean(values: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``active``, 0 where nothing is: no data-dependent shape or branch, so that
    ``torch.compile`` traces it in one graph (the eager forwards select the active items and return None for none).
    """
    weights = active.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1)

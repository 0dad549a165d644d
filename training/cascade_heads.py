"""The cheap step of the layer cascade: train new cascade heads on a fine-tuned ranker whose encoder stays frozen.

A cascade head reads one vector, the first token's hidden state after its layer (``inference/CASCADE.md``). With the
encoder frozen those vectors never change, so they are computed once (one forward pass over the training set, in eval
mode: no dropout, as at ranking time) and the heads train on them for as many epochs as asked, in seconds; the
encoder and the final head are not touched, so the full model's scores stay those of the ranker. This is exact, not
an approximation: a ``Trainer`` run over the frozen model would compute the same vectors every epoch (with dropout on).
Measured on the WikiQA-fine-tuned MiniLM-L6 (2026-11-27, 1 thread, busy AMX Xeon): the features of all 8,672 train and
1,126 dev pairs in 81 s; the ``Trainer`` route took 5.5 min per epoch and its layer-2 head scored a test MAP of 0.536
against the full model's 0.694.

What the heads learn (``target``, ``run_as2.py --cascade_head_target``): ``"labels"`` (the default) the rows' labels,
with the model's own loss; ``"distill"`` the frozen full model's output on the same rows (its logits come from the
forward pass that gives the states, so they cost nothing): the KL divergence from the teacher's probability to the
head's (one logit: Bernoulli; two: softmax), which is 0 when a head gives the teacher's scores; ``"both"``
``(1 - w) x labels + w x distill`` with ``w = distill_weight``. A head that copies the final classifier drops the
candidates the full model would rank lowest, which is what the cascade needs to keep the full model's MAP
(issue 51).

Example (``run_as2.py --cascade_layers 2,4 --cascade_heads_only`` calls it)::

    metrics = train_cascade_heads(model, collator, train_dataset, dev_dataset, dev_question_ids, training_args,
                                  target="distill")
"""

import logging
import math

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from as2hub.metrics import compute_as2_metrics

logger = logging.getLogger("as2hub.cascade_heads")

HEAD_TARGETS = ("labels", "distill", "both")


@torch.inference_mode()
def first_token_states(model, collator, dataset, batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(states, labels, teacher_logits)``: per row, the first token's hidden state after each cascade layer, shape
    ``(rows, heads, hidden)``, computed in eval mode; the rows' labels; and the full model's logits (fp32, the same
    forward pass), shape ``(rows, num_labels)``."""
    layers = list(model.config.cascade_layers)
    was_training = model.training
    model.eval()
    states, labels, teacher = [], [], []
    device = model.device
    try:
        for batch in DataLoader(dataset, batch_size=batch_size, collate_fn=collator):
            labels.append(batch.pop("labels"))
            outputs = model(**{key: value.to(device) for key, value in batch.items()}, output_hidden_states=True)
            states.append(torch.stack([outputs.hidden_states[layer][:, 0] for layer in layers], dim=1).float().cpu())
            teacher.append(outputs.logits.float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(states), torch.cat(labels), torch.cat(teacher)


def head_scores(model, states: torch.Tensor) -> list[np.ndarray]:
    """Each head's logits-derived scores on cached first-token states (eval mode)."""
    out = []
    with torch.no_grad():
        for index, head in enumerate(model.cascade_heads):
            head.eval()
            logits = head(states[:, index, None].to(head.dense.weight.dtype)).float()
            out.append(model.logits_to_scores(logits).cpu().numpy())
    return out


def distill_loss(logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean KL divergence from the teacher's output distribution to the head's: one logit, the Bernoulli of its
    sigmoid (binary cross-entropy against the teacher's probability, less the teacher's entropy); more, the softmax.
    0 exactly when the head's logits are the teacher's (up to a constant for a softmax)."""
    logits, teacher_logits = logits.float(), teacher_logits.float().to(logits.device)
    if logits.shape[-1] == 1:
        logits, teacher_logits = logits.view(-1), teacher_logits.view(-1)
        target = torch.sigmoid(teacher_logits)
        cross = nn.functional.binary_cross_entropy_with_logits(logits, target)
        entropy = nn.functional.binary_cross_entropy_with_logits(teacher_logits, target)
        return cross - entropy
    log_q, log_p = logits.log_softmax(-1), teacher_logits.log_softmax(-1)
    return nn.functional.kl_div(log_q, log_p, log_target=True, reduction="batchmean")


def check_head_target(target: str, distill_weight: float = 0.5) -> None:
    """Raise ``ValueError`` unless ``target`` is one of :data:`HEAD_TARGETS` and ``distill_weight`` in [0, 1]."""
    if target not in HEAD_TARGETS:
        raise ValueError(
            f"cascade head target must be one of {', '.join(HEAD_TARGETS)} (labels: the rows' labels; distill: the "
            f"frozen full model's scores; both: a mix weighted by the distill weight), got {target!r}"
        )
    if not 0.0 <= distill_weight <= 1.0:
        raise ValueError(f"the distill weight is the share of the distillation loss, in [0, 1]; got {distill_weight}")


def head_loss(model, logits, labels, teacher_logits, target: str = "labels", distill_weight: float = 0.5):
    """One head's loss for ``target`` (module docstring)."""
    if target == "labels":
        return model._loss(logits, labels)
    if target == "distill":
        return distill_loss(logits, teacher_logits)
    label_part = model._loss(logits, labels)
    return (1.0 - distill_weight) * label_part + distill_weight * distill_loss(logits, teacher_logits)


def fit_heads(
    model,
    states: torch.Tensor,
    labels: torch.Tensor,
    teacher_logits: torch.Tensor | None,
    training_args,
    target: str = "labels",
    distill_weight: float = 0.5,
) -> list[float]:
    """Train ``model.cascade_heads`` on cached first-token states ``(rows, heads, hidden)`` (the encoder is not run);
    ``teacher_logits`` (the full model's, per row) are needed unless ``target`` is ``"labels"``. Returns each epoch's
    mean training loss."""
    check_head_target(target, distill_weight)
    if target != "labels" and teacher_logits is None:
        raise ValueError(f"cascade head target {target!r} needs the full model's logits")
    heads = model.cascade_heads
    epochs = max(1, math.ceil(training_args.num_train_epochs))
    batch_size = training_args.per_device_train_batch_size
    steps = epochs * math.ceil(len(labels) / batch_size)
    optimizer = torch.optim.AdamW(
        heads.parameters(), lr=training_args.learning_rate, weight_decay=training_args.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / steps))
    generator = torch.Generator().manual_seed(training_args.seed)
    dtype = heads[0].dense.weight.dtype
    epoch_losses = []
    heads.train()
    for epoch in range(epochs):
        total, count = 0.0, 0
        for batch in torch.randperm(len(labels), generator=generator).split(batch_size):
            batch_states = states[batch].to(device=model.device, dtype=dtype)
            batch_labels = labels[batch].to(model.device)
            teacher = None if teacher_logits is None else teacher_logits[batch].to(model.device)
            loss = torch.stack([
                head_loss(model, head(batch_states[:, i, None]), batch_labels, teacher, target, distill_weight)
                for i, head in enumerate(heads)
            ]).mean()  # fmt: skip
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total, count = total + loss.item() * len(batch), count + len(batch)
        epoch_losses.append(total / count)
        logger.info("cascade heads (%s): epoch %d/%d, loss %.4f", target, epoch + 1, epochs, epoch_losses[-1])
    heads.eval()
    return epoch_losses


def train_cascade_heads(
    model,
    collator,
    train_dataset,
    dev_dataset,
    dev_question_ids,
    training_args,
    target: str = "labels",
    distill_weight: float = 0.5,
) -> dict:
    """Train ``model.cascade_heads`` only, on cached first-token states (module docstring), towards ``target``
    (``"labels"``, ``"distill"`` or ``"both"``). Uses the run's ``learning_rate``, ``num_train_epochs`` (rounded up),
    ``per_device_train_batch_size``, ``weight_decay`` and ``seed``; linear decay to 0. Returns the metrics: the
    training loss of the first and last epoch, and each head's dev MAP / MRR / P@1 (``dev_layer{L}_map``, ...) when
    there is a dev set."""
    check_head_target(target, distill_weight)
    heads = model.cascade_heads
    layers = list(model.config.cascade_layers)
    for parameter in model.parameters():
        parameter.requires_grad = False
    for parameter in heads.parameters():
        parameter.requires_grad = True
    eval_batch = training_args.per_device_eval_batch_size
    train_states, train_labels, teacher_logits = first_token_states(model, collator, train_dataset, eval_batch)
    logger.info("cascade heads: first-token states of %d train rows after layers %s", len(train_labels), layers)
    epoch_losses = fit_heads(
        model, train_states, train_labels, teacher_logits, training_args, target=target, distill_weight=distill_weight
    )
    metrics = {"train_loss_first_epoch": epoch_losses[0], "train_loss_last_epoch": epoch_losses[-1]}
    metrics.update({"epochs": len(epoch_losses), "train_rows": len(train_labels)})
    if target == "both":
        metrics["distill_weight"] = distill_weight
    if dev_dataset is not None:
        dev_states, dev_labels, _ = first_token_states(model, collator, dev_dataset, eval_batch)
        for layer, scores in zip(layers, head_scores(model, dev_states)):
            found = compute_as2_metrics(dev_question_ids, scores, dev_labels.tolist(), k_values=(1,))
            metrics.update({f"dev_layer{layer}_{name}": found[name] for name in ("map", "mrr", "p@1")})
        logger.info("cascade heads on dev: %s", {k: round(v, 4) for k, v in metrics.items() if k.startswith("dev_")})
    for parameter in model.parameters():
        parameter.requires_grad = True
    return metrics

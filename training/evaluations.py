"""The dev figures of the model a fine-tuning run ends with, without evaluating that model a second time.

With the fine-tuning defaults (``--eval_strategy epoch``, ``--load_best_model_at_end``), the ``Trainer`` evaluates the
dev set at the end of every epoch and ends with the best checkpoint's weights, whose figures it has therefore already
computed. ``trainer.evaluate()`` after ``train()`` (as the HF ``run_*.py`` scripts do) computes them again: one more
pass over the dev set per run, for the same numbers on CPU (WikiQA's dev set on one core: tens of seconds per run; the
reproduction tables fine-tune hundreds of times). The run scripts use this instead::

    record = RecordEvaluations()
    trainer = Trainer(..., callbacks=[record])
    trainer.train()
    results["dev"] = final_dev_metrics(trainer, record)  # the best (or last) step's figures, or a new evaluation

Only an evaluation run in this process counts: a resumed run whose best checkpoint was evaluated before the resume
(perhaps on another dev file) is evaluated again, as is a run whose last step was not evaluated. ``run_as2`` and
``run_joint`` use it; ``run_qe_contrastive`` does not: its dev evaluation also leaves the dev predictions it writes,
which must be the final model's.
"""

import logging
from pathlib import Path

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class RecordEvaluations(TrainerCallback):
    """Remembers the figures of every dev evaluation the ``Trainer`` runs in this process, by global step."""

    def __init__(self):
        self.by_step: dict[int, dict[str, float]] = {}

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and any(key.startswith("eval_") for key in metrics):
            self.by_step[state.global_step] = dict(metrics)


def final_step(trainer) -> int:
    """The global step whose weights the model holds after ``train()``: the best checkpoint's with
    ``load_best_model_at_end`` (the ``Trainer`` loads it at the end), else the last step."""
    state = trainer.state
    if trainer.args.load_best_model_at_end and state.best_model_checkpoint:
        name = Path(state.best_model_checkpoint).name
        prefix, _, number = name.rpartition("-")
        if prefix == "checkpoint" and number.isdigit():
            return int(number)
    return state.global_step


def final_dev_metrics(trainer, record: RecordEvaluations) -> dict[str, float]:
    """The dev figures of the weights the run ends with: those ``record`` holds for :func:`final_step`, else
    ``trainer.evaluate()``."""
    step = final_step(trainer)
    if step in record.by_step:
        logger.info("dev: the figures of step %d, evaluated during training (not computed again)", step)
        return dict(record.by_step[step])
    return trainer.evaluate()

"""Resuming a pre-training run: exact streaming resume wired into a trainer, a checkpoint already at ``max_steps``
kept as the final model, and the report of a run stopped by SIGTERM. The stream bookkeeping itself
(``as2hub_stream_state.json``, :class:`~as2hub.data_collators.objectives.stream_resume.GracefulStop`) is
:mod:`as2hub.data_collators.objectives.stream_resume`."""

import json
import logging
import os

from as2hub.data_collators.objectives.stream_resume import prepare_exact_resume

logger = logging.getLogger("as2hub.run_pretrain")


def finished_checkpoint_step(checkpoint: str | None, max_steps: int) -> int | None:
    """The global step of ``checkpoint`` when it has already reached ``max_steps`` (> 0), else None."""
    if not checkpoint or max_steps is None or max_steps <= 0:
        return None
    state_file = os.path.join(checkpoint, "trainer_state.json")
    if not os.path.isfile(state_file):
        return None
    with open(state_file, encoding="utf-8") as handle:
        step = json.load(handle).get("global_step", 0)
    return step if step >= max_steps else None


def enable_exact_resume(trainer, train_dataset, training_args, dispatching: bool) -> None:
    """Give ``trainer`` the stream layout (dataloader workers, examples per global batch) it records in every
    checkpoint, and continue exactly from ``--resume_from_checkpoint`` when given."""
    workers = max(1, training_args.dataloader_num_workers)
    per_batch = training_args.per_device_train_batch_size * (1 if dispatching else training_args.world_size)
    trainer.stream_layout = {"num_consumers": workers, "workers_per_rank": workers, "examples_per_batch": per_batch}
    prepare_exact_resume(trainer, train_dataset, training_args.resume_from_checkpoint)


def train_or_keep_finished(trainer, resume: str | None, max_steps: int) -> dict:
    """``trainer.train(resume_from_checkpoint=resume)``'s metrics; a checkpoint already at ``max_steps`` is loaded
    instead (``Trainer`` would run one more step on a stream: it checks ``max_steps`` only after a step)."""
    finished = finished_checkpoint_step(resume, max_steps)
    if finished is None:
        return trainer.train(resume_from_checkpoint=resume).metrics
    logger.info(
        "%s is already at step %d of --max_steps %d: nothing to train; its weights become the final model",
        resume,
        finished,
        max_steps,
    )
    trainer._load_from_checkpoint(resume)
    trainer.state.global_step = finished
    return {"global_step": finished, "trained_steps": 0}


def interruption(stop, trainer, output_dir: str) -> dict | None:
    """None, or when SIGTERM stopped the run (``stop``: its ``GracefulStop``), the step and the checkpoint to resume
    from (logged with the command to continue)."""
    if not stop.stopped:
        return None
    checkpoint = f"{output_dir}/checkpoint-{trainer.state.global_step}"
    logger.warning(
        "stopped by a signal after step %d; no final model written. Continue with --resume_from_checkpoint %s",
        trainer.state.global_step,
        checkpoint,
    )
    return {"global_step": trainer.state.global_step, "checkpoint": checkpoint}

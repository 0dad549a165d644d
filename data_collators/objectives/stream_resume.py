"""Exact resume of streaming pre-training, and a checkpoint on SIGTERM.

``Trainer`` resumes a streaming (iterable) dataset by regenerating and discarding the batches already trained on,
which is not exact for on-the-fly pre-training: the masking of the first batch after resume comes from another RNG
state, the dropout stream shifts by the dataloader's seed draw, and with ``max_steps`` ``Trainer`` restarts its epoch
count at 0, so a run resumed in epoch 2 would replay epoch 0. Here instead:

* :class:`~as2hub.data_collators.StructurePretrainingIterableDataset` tags every example with its stream position
  (``track_positions=True``); :class:`PositionTrackingCollator` turns the tags into a ``stream_position`` tensor and
  seeds the MLM masking of each batch from the positions of its examples (the masks no longer depend on the global
  RNG, so they are the same in a resumed run);
* :class:`StreamStateMixin` (mixed into ``SSPTrainer``) records the last consumed position of every stream consumer
  (dataloader worker) on every rank and, with each checkpoint, writes ``as2hub_stream_state.json`` (gathered over
  ranks; written by rank 0): epoch, per-consumer position, the workers' round-robin turn;
* on ``--resume_from_checkpoint`` :func:`prepare_exact_resume` restarts the dataset right after those positions
  (document batches before them are not even generated), turns ``Trainer``'s own skipping off and restores the RNG
  state of the checkpoint again at the first step, so dropout continues exactly too.

Resuming needs the same number of processes, ``--dataloader_num_workers`` and per-device batch size as the saved
run (the stream is dealt to that layout); a checkpoint without ``as2hub_stream_state.json`` falls back to
``Trainer``'s skipping with a warning. Limit: with several dataloader workers, a checkpoint taken in the last batches
of an epoch, after one worker ran out while others still had batches, resumes with the round robin of full workers
(the order of those last batches may differ; no example is lost or repeated).

:class:`GracefulStop` turns SIGTERM (sent by schedulers before pre-emption, and forwarded by ``torchrun``) into a
checkpoint at the next optimizer step and a clean stop; the run script then logs how to resume.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

import torch
from transformers import TrainerCallback

from as2hub.data_collators.objectives.pretraining_examples import STREAM_POSITION_KEY, stream_state_from_positions
from as2hub.data_collators.objectives.structure_objectives import derive_seed

logger = logging.getLogger("as2hub.stream_resume")

STREAM_STATE_NAME = "as2hub_stream_state.json"
POSITION_FIELD = "stream_position"
STREAM_LOG_ENV = "AS2HUB_STREAM_LOG"
"""Debug hook: with ``AS2HUB_STREAM_LOG=PREFIX`` every rank appends one JSON line per training batch to
``PREFIX.rank<R>.jsonl``: step, stream positions and a digest of the batch's input ids and MLM labels."""


@dataclass
class PositionTrackingCollator:
    """Wrap a collator: examples' stream positions -> ``batch["stream_position"]`` (``[batch, 5]`` int64), and the
    inner collator's MLM masking seeded from them (``derive_seed(seed, "mask", first position)``). Examples without
    positions (the held-out set) go to the inner collator unchanged."""

    collator: Any
    seed: int = 0

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if STREAM_POSITION_KEY not in features[0]:  # e.g. the materialised held-out set
            return self.collator(features)
        positions = [feature[STREAM_POSITION_KEY] for feature in features]
        features = [{k: v for k, v in feature.items() if k != STREAM_POSITION_KEY} for feature in features]
        masker = getattr(self.collator, "masker", None)
        if masker is not None:
            masker.generator = torch.Generator().manual_seed(derive_seed(self.seed, "mask", *positions[0]))
        batch = self.collator(features)
        batch[POSITION_FIELD] = torch.tensor(positions, dtype=torch.long)
        return batch


class StreamStateMixin:
    """``Trainer`` mixin: pop ``stream_position`` from the inputs, remember the last position of each consumer, write
    :data:`STREAM_STATE_NAME` into every checkpoint; re-sync the RNG at the first step after an exact resume."""

    stream_layout: dict[str, int] | None = None  # num_consumers, workers_per_rank, examples_per_batch
    _consumed: dict[int, tuple[int, ...]]
    _rng_resync: str | None = None

    def _record_positions(self, inputs: dict, training: bool = False) -> dict:
        positions = inputs.pop(POSITION_FIELD, None)
        if positions is not None and training and os.environ.get(STREAM_LOG_ENV):
            self._log_batch(positions, inputs)
        if positions is not None:
            consumed = self.__dict__.setdefault("_consumed", {})
            for position in positions.tolist():
                key = position[1]
                if key not in consumed or (position[0], position[4]) > (consumed[key][0], consumed[key][4]):
                    consumed[key] = tuple(position)
        return inputs

    def _log_batch(self, positions: torch.Tensor, inputs: dict) -> None:
        import hashlib

        digest = hashlib.blake2b(digest_size=8)
        for key in ("input_ids", "labels"):
            if key in inputs:
                digest.update(inputs[key].detach().cpu().numpy().tobytes())
        line = {"step": self.state.global_step, "positions": positions.tolist(), "digest": digest.hexdigest()}
        with open(f"{os.environ[STREAM_LOG_ENV]}.rank{self.args.process_index}.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def training_step(self, model, inputs, *args, **kwargs):
        if self._rng_resync is not None:
            # Trainer restored the RNG before creating the dataloader iterator, whose seed draw moved it on.
            self._load_rng_state(self._rng_resync)
            self._rng_resync = None
        return super().training_step(model, self._record_positions(inputs, training=True), *args, **kwargs)

    def stream_state(self) -> dict[str, Any] | None:
        """The resume state of what all ranks consumed so far (a collective call under torch.distributed)."""
        local = list(self.__dict__.get("_consumed", {}).values())
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, local)
            local = [position for part in gathered for position in part]
        if not local or self.stream_layout is None:
            return None
        return stream_state_from_positions(local, **self.stream_layout)

    def _save_rng_state(self, output_dir):
        super()._save_rng_state(output_dir)
        state = self.stream_state()
        if state is not None and self.args.should_save:
            os.makedirs(output_dir, exist_ok=True)
            tmp = os.path.join(output_dir, STREAM_STATE_NAME + ".tmp")
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(state, handle, indent=1)
            os.replace(tmp, os.path.join(output_dir, STREAM_STATE_NAME))


def prepare_exact_resume(trainer, dataset, checkpoint: str | None) -> bool:
    """Point ``dataset`` after the positions saved in ``checkpoint`` and make ``trainer`` continue exactly.

    Returns False (and leaves ``Trainer``'s own batch skipping on) when the checkpoint has no stream state.
    """
    if not checkpoint:
        return False
    path = os.path.join(checkpoint, STREAM_STATE_NAME)
    if not os.path.isfile(path):
        logger.warning(
            "%s has no %s: resuming with Trainer's batch skipping, which regenerates the skipped batches and does "
            "not reproduce the uninterrupted stream exactly",
            checkpoint,
            STREAM_STATE_NAME,
        )
        return False
    with open(path, encoding="utf-8") as handle:
        state = json.load(handle)
    layout = trainer.stream_layout or {}
    saved = {name: state.get(name) for name in layout}
    if saved != layout:
        raise ValueError(
            f"{checkpoint} was saved by a run whose stream layout was {saved} (dataloader workers x per-device batch x "
            f"processes), this run has {layout}: resume exactly with the same --dataloader_num_workers, "
            "--per_device_train_batch_size and number of processes (or delete "
            f"{STREAM_STATE_NAME} to resume approximately)"
        )
    dataset.resume(state)
    trainer.args.ignore_data_skip = True
    trainer._rng_resync = checkpoint
    logger.info(
        "exact resume from %s: epoch %d, %d stream consumers continue after their last consumed example",
        checkpoint,
        state["epoch"],
        len(state["consumers"]),
    )
    return True


class GracefulStop(TrainerCallback):
    """On SIGTERM (or ``signals``): save a checkpoint at the next optimizer step and stop training.

    All ranks stop at the same step (the flag is reduced over ranks at each step end under torch.distributed).
    ``stopped`` tells the run script that training ended early; the previous handler is restored at train end.
    """

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)):
        self.signals = signals
        self.received: int | None = None
        self.stopped = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        self.received = signum

    def on_train_begin(self, args, state, control, **kwargs):
        for signum in self.signals:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: cannot install handlers
                logger.warning("signal handlers need the main thread: %s will not checkpoint", signal.Signals(signum))

    def on_step_end(self, args, state, control, **kwargs):
        flag = self.received is not None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            tensor = torch.tensor([int(flag)], device=args.device)
            torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
            flag = bool(tensor.item())
        if flag and not self.stopped:
            self.stopped = True
            control.should_save = True
            control.should_training_stop = True
            name = signal.Signals(self.received).name if self.received is not None else "a signal on another rank"
            logger.warning("%s received: saving checkpoint-%d and stopping", name, state.global_step)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

"""Exact resume of streaming pre-training and a checkpoint on SIGTERM (``data_collators/objectives/stream_resume.py``)."""

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from as2hub.data_collators.objectives import stream_resume
from as2hub.data_collators.objectives.pretraining_examples import (
    STREAM_POSITION_KEY,
    StructurePretrainingIterableDataset,
    stream_state_from_positions,
)
from as2hub.run_scripts import run_pretrain


def documents(n=20):
    return [
        [[f"Doc {d} par {p} sentence {s} with enough words." for s in range(3)] for p in range(3)] for d in range(n)
    ]


def dataset(**kwargs):
    return StructurePretrainingIterableDataset(
        documents(), "dslc", documents_per_batch=4, seed=5, track_positions=True, **kwargs
    )


def key(example):
    return example[STREAM_POSITION_KEY], example["text_a"], example["text_b"], example["text_c"], example["label"]


@pytest.mark.parametrize("consumed", [1, 7, 40])
def test_resumed_dataset_yields_exactly_the_rest_of_the_stream(consumed):
    full = [key(ex) for ex in dataset()]
    assert len(full) > 40 and [position[4] for position, *_ in full] == list(range(len(full)))
    state = stream_state_from_positions([position for position, *_ in full[:consumed]], num_consumers=1)
    resumed = dataset()
    resumed.resume(state)
    assert [key(ex) for ex in resumed] == full[consumed:]


def test_resume_continues_in_the_saved_epoch_when_trainer_counts_from_zero():
    data = dataset()
    data.set_epoch(0)
    epoch0 = [key(ex) for ex in data]
    data.set_epoch(1)
    epoch1 = [key(ex) for ex in data]
    assert {p[0] for p, *_ in epoch1} == {1} and [k[1:] for k in epoch0] != [k[1:] for k in epoch1]
    state = stream_state_from_positions([p for p, *_ in epoch0 + epoch1[:9]], num_consumers=1)
    assert state["epoch"] == 1
    resumed = dataset()
    resumed.resume(state)
    resumed.set_epoch(0)  # Trainer restarts its epoch count at 0 for a streaming dataset with max_steps
    assert [key(ex) for ex in resumed] == epoch1[9:]
    resumed.set_epoch(1)
    data.set_epoch(2)
    assert [key(ex) for ex in resumed] == [key(ex) for ex in data]


def test_two_workers_resume_with_the_round_robin_turn_and_refuse_another_layout():
    loader = torch.utils.data.DataLoader(dataset(), batch_size=3, num_workers=2, collate_fn=list)
    batches = [[key(ex) for ex in batch] for batch in loader]
    consumed = 5  # worker 0 gave batches 0, 2, 4; worker 1 is due next
    state = stream_state_from_positions(
        [k[0] for batch in batches[:consumed] for k in batch], num_consumers=2, workers_per_rank=2, examples_per_batch=3
    )
    assert state["rotation"] == {"0": 1}
    resumed = dataset()
    resumed.resume(state)
    loader = torch.utils.data.DataLoader(resumed, batch_size=3, num_workers=2, collate_fn=list)
    rest = [[key(ex) for ex in batch] for batch in loader]
    # While both workers have batches left, the resumed stream is the uninterrupted one.
    assert rest[:4] == batches[consumed : consumed + 4]
    other = dataset()
    other.resume(state)
    with pytest.raises(ValueError, match="2 consumers"):
        next(iter(other))


QUICK = ["--max_steps", "6", "--per_device_train_batch_size", "3", "--tokenizer_vocab_size", "400",
         "--eval_passes", "1", "--eval_strategy", "no", "--save_steps", "100", "--logging_steps", "1",
         "--documents_per_batch", "4", "--dataloader_num_workers", "2", "--seed", "7"]  # fmt: skip


def read_log(prefix):
    return [json.loads(line) for line in Path(f"{prefix}.rank0.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_interrupted_and_resumed_run_equals_the_uninterrupted_one(tmp_path, monkeypatch):
    """N + M steps in one go vs N steps, SIGTERM, resume to N + M: same batches (examples and masks), same weights."""
    torch.set_num_threads(1)
    monkeypatch.setenv("AS2HUB_STREAM_LOG", str(tmp_path / "full"))
    run_pretrain.main(["--output_dir", str(tmp_path / "full"), *QUICK])

    def terminate_during_step_3(self, args, state, control, **kwargs):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setenv("AS2HUB_STREAM_LOG", str(tmp_path / "part"))
    with monkeypatch.context() as patch:
        patch.setattr(stream_resume.GracefulStop, "on_step_begin", terminate_during_step_3, raising=False)
        results = run_pretrain.main(["--output_dir", str(tmp_path / "part"), *QUICK])
    assert results["interrupted"]["global_step"] == 3
    checkpoint = tmp_path / "part" / "checkpoint-3"
    assert (checkpoint / "as2hub_stream_state.json").exists() and not (tmp_path / "part" / "model.safetensors").exists()

    monkeypatch.setenv("AS2HUB_STREAM_LOG", str(tmp_path / "resumed"))
    run_pretrain.main(["--output_dir", str(tmp_path / "resumed"), *QUICK, "--resume_from_checkpoint", str(checkpoint)])

    full, part, resumed = (read_log(tmp_path / name) for name in ("full", "part", "resumed"))
    assert [line["step"] for line in full] == list(range(6))
    assert part == full[:3] and resumed == full[3:]
    assert len({line["digest"] for line in full}) == 6  # the digests tell batches apart
    expected, actual = (load_file(tmp_path / name / "model.safetensors") for name in ("full", "resumed"))
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


@pytest.mark.slow
def test_sigterm_to_a_running_script_saves_a_checkpoint_that_resumes(tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "stream"
    args = ["--output_dir", str(out), *QUICK[2:], "--dataloader_num_workers", "0"]
    env = {**os.environ, "AS2HUB_STREAM_LOG": str(log), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "as2hub.run_scripts.run_pretrain", *args, "--max_steps", "100000"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stream = Path(f"{log}.rank0.jsonl")
    deadline = time.monotonic() + 120
    while not (stream.exists() and len(stream.read_text().splitlines()) >= 2):
        assert process.poll() is None and time.monotonic() < deadline, "training did not start"
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    assert "SIGTERM received: saving checkpoint-" in stderr and "--resume_from_checkpoint" in stderr
    assert "Traceback" not in stderr
    (checkpoint,) = out.glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])
    assert not (out / "model.safetensors").exists()  # no final model from an interrupted run
    trained = read_log(log)
    assert [line["step"] for line in trained] == list(range(step))

    resumed_log = tmp_path / "resumed"
    os.environ["AS2HUB_STREAM_LOG"] = str(resumed_log)
    try:
        torch.set_num_threads(1)
        run_pretrain.main([*args, "--max_steps", str(step + 2), "--resume_from_checkpoint", str(checkpoint)])
    finally:
        del os.environ["AS2HUB_STREAM_LOG"]
    resumed = read_log(resumed_log)
    assert [line["step"] for line in resumed] == [step, step + 1]
    indices = [p[4] for line in itertools.chain(trained, resumed) for p in line["positions"]]
    assert indices == list(range(len(indices)))  # the stream continues where it stopped: no gap, no repeat
    assert (out / "model.safetensors").exists()
    with pytest.raises(ValueError, match="--dataloader_num_workers"):  # another layout: refused before training
        run_pretrain.main([*args, "--dataloader_num_workers", "2", "--resume_from_checkpoint", str(checkpoint)])


@pytest.mark.slow
def test_resuming_a_checkpoint_already_at_max_steps_trains_nothing_and_keeps_it(tmp_path):
    """A streaming run resumed from a checkpoint at --max_steps: no extra step (Trainer alone trained one), no new
    checkpoint, and the final model is the checkpoint's weights."""
    torch.set_num_threads(1)
    args = [*QUICK[2:], "--max_steps", "2", "--save_steps", "2", "--dataloader_num_workers", "0"]
    run_pretrain.main(["--output_dir", str(tmp_path / "first"), *args])
    checkpoint = tmp_path / "first" / "checkpoint-2"
    assert checkpoint.is_dir()
    out = tmp_path / "again"
    results = run_pretrain.main(["--output_dir", str(out), *args, "--resume_from_checkpoint", str(checkpoint)])
    assert results["train"] == {"global_step": 2, "trained_steps": 0}
    assert not any(out.glob("checkpoint-*"))
    expected, actual = (load_file(folder / "model.safetensors") for folder in (checkpoint, out))
    assert expected.keys() == actual.keys() and all(torch.equal(expected[k], actual[k]) for k in expected)

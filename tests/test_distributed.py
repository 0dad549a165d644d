"""Multi-process training on CPU (gloo): the stream is split across ranks without loss or overlap, only rank 0 writes.

What really happens under ``torchrun`` (pinned here): ``run_pretrain.py`` does not dispatch batches (accelerate's
default for an iterable dataset) but lets every rank read its own slice: each rank generates the same seeded stream
and accelerate's ``IterableDatasetShard`` hands rank ``r`` examples ``[r * B, (r + 1) * B)`` of every global batch of
``world * B``. The union of the ranks' batches at a step is therefore the single-process batch of ``world * B``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from as2hub.data_collators import StructurePretrainingIterableDataset
from as2hub.run_scripts import run_pretrain

QUICK = ["--max_steps", "3", "--tokenizer_vocab_size", "400", "--eval_passes", "1", "--eval_steps", "3",
         "--save_steps", "3", "--logging_steps", "1", "--documents_per_batch", "4", "--use_cpu"]  # fmt: skip

# Logs every file a process opens for writing under AS2HUB_AUDIT_ROOT to AS2HUB_AUDIT_ROOT/../audit.rank<RANK>.txt.
AUDIT_HOOK = """
import os, sys
_root = os.environ.get("AS2HUB_AUDIT_ROOT")
if _root:
    _log = os.path.join(os.path.dirname(_root), "audit.rank%s.txt" % os.environ.get("RANK", "0"))
    with open(_log, "a") as out:
        out.write("#started\\n")
    def _hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].startswith(_root):
            mode, flags = args[1], args[2] or 0
            if (mode and any(c in mode for c in "wax+")) or flags & (os.O_WRONLY | os.O_RDWR):
                with open(_log, "a") as out:
                    out.write(os.path.relpath(args[0], _root) + "\\n")
        elif event == "os.rename" or event == "os.replace":
            if isinstance(args[1], str) and args[1].startswith(_root):
                with open(_log, "a") as out:
                    out.write(os.path.relpath(args[1], _root) + "\\n")
    sys.addaudithook(_hook)
"""


def documents(n=24):
    return [
        [[f"Document {d} paragraph {p} sentence {s} is long enough." for s in range(3)] for p in range(3)]
        for d in range(n)
    ]


def test_rank_and_worker_sharding_is_a_partition_of_the_single_process_stream():
    docs = documents()

    def positions(**kwargs):
        dataset = StructurePretrainingIterableDataset(docs, "dslc", documents_per_batch=4, seed=3, **kwargs)
        return [(ex["batch"], ex["text_a"], ex["text_b"], ex.get("text_c")) for ex in dataset]

    single = positions()
    ranks = [positions(rank=r, world_size=2) for r in range(2)]
    assert not set(ranks[0]) & set(ranks[1])
    assert sorted(ranks[0] + ranks[1]) == sorted(single) and len(single) == len(set(single))
    assert {b for b, *_ in ranks[0]} == {0, 2, 4} and {b for b, *_ in ranks[1]} == {1, 3, 5}


def test_streaming_does_not_dispatch_unless_asked_and_then_pads_to_max_length(tokenizers):
    from types import SimpleNamespace

    from transformers.trainer_pt_utils import AcceleratorConfig

    from as2hub.data_collators import PretrainingCollator

    def configure(dispatch, world_size):
        args = SimpleNamespace(accelerator_config=AcceleratorConfig(dispatch_batches=dispatch), world_size=world_size)
        collator = PretrainingCollator(tokenizers["roberta"], max_length=64)
        return run_pretrain.configure_streaming(args, collator), args.accelerator_config.dispatch_batches, collator

    assert configure(None, 2)[:2] == (False, False)
    dispatching, _, collator = configure(True, 2)
    assert dispatching and collator.pad_to_multiple_of == 64
    batch = collator([{"text_a": "short", "text_b": "one"}, {"text_a": "a bit longer text", "text_b": "two"}])
    assert batch["input_ids"].shape[1] == 64  # every dispatched batch has the same shape: concatenation works
    assert configure(True, 1)[2].pad_to_multiple_of == 8


def read_stream_log(prefix: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in Path(f"{prefix}.rank{rank}.jsonl").read_text().splitlines()]


def torchrun(module: str, args: list[str], env: dict, timeout=240):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    result = subprocess.run([*command, "-m", module, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.mark.slow
def test_two_gloo_processes_split_the_stream_and_only_rank_0_writes(tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK)
    out = tmp_path / "runs" / "dist"
    (tmp_path / "runs").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]),
        "AS2HUB_STREAM_LOG": str(tmp_path / "dist"),
        "AS2HUB_AUDIT_ROOT": str(out),
        "OMP_NUM_THREADS": "1",
    }
    result = torchrun(
        "as2hub.run_scripts.run_pretrain",
        ["--output_dir", str(out), "--per_device_train_batch_size", "4", *QUICK],
        env,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]

    # The same global batches in one process: 8 examples per step.
    os.environ["AS2HUB_STREAM_LOG"] = str(tmp_path / "single")
    try:
        torch.set_num_threads(1)
        run_pretrain.main(["--output_dir", str(tmp_path / "single"), "--per_device_train_batch_size", "8", *QUICK])
    finally:
        del os.environ["AS2HUB_STREAM_LOG"]
    single = read_stream_log(tmp_path / "single", 0)
    ranks = [read_stream_log(tmp_path / "dist", rank) for rank in range(2)]
    assert [line["step"] for line in single] == [line["step"] for line in ranks[0]] == [0, 1, 2]
    for step in range(3):
        mine = [tuple(p) for p in ranks[0][step]["positions"]]
        theirs = [tuple(p) for p in ranks[1][step]["positions"]]
        assert len(mine) == len(theirs) == 4 and not set(mine) & set(theirs)
        # Rank 0 has the first half of the single-process batch, rank 1 the second: the same examples in order.
        assert mine + theirs == [tuple(p) for p in single[step]["positions"]]

    # The held-out set is the same for 1 and 2 processes, and the 2 ranks score each of its items once between them.
    dist_results = json.loads((out / "pretrain_results.json").read_text())
    single_results = json.loads((tmp_path / "single" / "pretrain_results.json").read_text())
    assert dist_results["before"]["before_cls_items"] == single_results["before"]["before_cls_items"] > 100
    assert dist_results["eval"]["eval_cls_items"] == single_results["eval"]["eval_cls_items"]

    # Only rank 0 writes the output folder (model, card, run record, metrics); rank 1 writes just its RNG state.
    for name in ("README.md", "as2hub_run.json", "pretrain_results.json", "model.safetensors", "config.json"):
        assert (out / name).exists(), name
    written = {
        rank: set((tmp_path / "runs" / f"audit.rank{rank}.txt").read_text().split()) - {"#started"} for rank in range(2)
    }
    assert {"README.md", "as2hub_run.json", "pretrain_results.json"} <= {Path(p).name for p in written[0]}
    assert all(Path(p).name.startswith("rng_state_1") for p in written[1]), written[1]  # torch.save: not audited
    assert (out / "checkpoint-3" / "rng_state_1.pth").exists()
    assert json.loads((out / "checkpoint-3" / "as2hub_stream_state.json").read_text())["num_consumers"] == 1

    # run_as2 fine-tunes the 2-process checkpoint under torchrun too (embedded data, two steps).
    as2_out = tmp_path / "runs" / "as2"
    env["AS2HUB_AUDIT_ROOT"] = str(as2_out)
    torchrun(
        "as2hub.run_scripts.run_as2",
        ["--model_name_or_path", str(out), "--output_dir", str(as2_out), "--max_steps", "2", "--max_length", "48",
         "--max_train_samples", "32", "--max_eval_samples", "32", "--per_device_train_batch_size", "4", "--use_cpu"],
        env,
    )  # fmt: skip
    assert (as2_out / "config.json").exists() and (as2_out / "README.md").exists()


def test_a_command_destroys_its_process_group_after_success_and_leaves_it_after_an_error(tmp_path):
    """Under torchrun a finished run once ended with rank 1 aborted by gloo's threads at interpreter exit ("terminate
    called without an active exception"): ``run_cli`` destroys the process group once ``main`` returned, and not
    after an error (another rank may still be in a collective)."""
    import torch.distributed as dist

    from as2hub.run_scripts.arguments import ArgumentError, run_cli

    def start(name):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / name}", rank=0, world_size=1)

    def ok(argv):
        start("ok")
        dist.barrier()
        return {"done": True}

    assert run_cli(ok, []) == 0
    assert not dist.is_initialized()

    def fails(argv):
        start("fails")
        raise ArgumentError("bad input")

    try:
        assert run_cli(fails, []) == 2
        assert dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

"""The GPU kit's commands agree with the scripts they call (issue 31: the first GPU run lost minutes to a flag the
ranking benchmark no longer had, and to a crash when --systems left out the reference rows), and its carry imports
as2hub on the GPU image (issue 49). CPU only, no network."""

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest
import transformers
import transformers.configuration_utils
from packaging.specifiers import SpecifierSet
from transformers import ElectraConfig

from as2hub.modeling.ssp_pretraining import configuration_ssp_pretraining

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import bench_ranking_throughput  # noqa: E402
import carry_wheels  # noqa: E402


def session_command(part_script: str, marker: str = "") -> list[str]:
    """The arguments run_gpu_session.sh passes to ``part_script`` (shell variables and "$@" dropped): on the first
    line that calls it (and holds ``marker``)."""
    text = (ROOT / "benchmarks" / "gpu" / "run_gpu_session.sh").read_text()
    line = next(line for line in text.splitlines() if part_script in line and "python3" in line and marker in line)
    line = re.sub(r"\\\s*$", "", line)
    words = shlex.split(line.split(part_script, 1)[1], posix=False)
    kept = []
    for word in words:
        if "$" in word:  # a value from the shell ("$OUT/...", "$@"): drop it, and the flag it belongs to
            if kept and kept[-1].startswith("--") and word != '"$@"':
                kept.pop()
            continue
        if word in ("2>&1", "|"):
            break
        kept.append(word)
    return kept


def test_the_ranking_part_passes_only_flags_the_benchmark_accepts():
    args = session_command("bench_ranking_throughput.py")
    assert "--device" not in args
    parsed = bench_ranking_throughput.parse_args([*args, "--results", "/tmp/unused.json"])
    assert parsed.no_wait  # a lent GPU machine is idle: no waiting for a quiet CPU


def test_the_pretrain_speed_part_runs_the_unpadded_and_compiled_systems_and_the_papers_step():
    import bench_gpu_pretrain

    args = session_command("bench_gpu_pretrain.py", marker="--systems")
    parsed = bench_gpu_pretrain.parse_args(args)
    assert parsed.device == "cuda" and parsed.pairs == ["roberta"] and parsed.seq_lengths == [128, 256]
    assert {"as2hub", "stock", "papers_framework", "as2hub_unpadded", "as2hub_unpadded_compiled",
            "as2hub_varlen_compiled"} <= set(parsed.systems)  # fmt: skip
    assert parsed.profile_steps > 0  # where the fastest step's time goes comes back with the figures
    # Before it, the varlen layout's CUDA tests: the -k expression picks the lane's tests of that name.
    text = (ROOT / "benchmarks" / "gpu" / "run_gpu_session.sh").read_text()
    pytest_line = next(line for line in text.splitlines() if "pytest" in line and "-k varlen" in line)
    assert "-m gpu tests/test_gpu.py" in pytest_line
    lane = (ROOT / "tests" / "test_gpu.py").read_text()
    assert len(re.findall(r"@needs_cuda\n(?:@.*\n)*def test_\w*varlen\w*\(", lane)) == 4


def test_a_systems_subset_keeps_the_two_reference_rows():
    parsed = bench_ranking_throughput.parse_args(["--systems", "as2hub cuda-fp16,CrossEncoder cuda bf16"])
    assert parsed.systems == {"as2hub cuda-fp16", "CrossEncoder cuda bf16", "as2hub torch", "CrossEncoder torch"}
    assert bench_ranking_throughput.parse_args([]).systems is None  # no subset: every system


# Issue 49: the GPU image has transformers 5.17, which as2hub could not import (SubConfigSpec came in 5.20), and the
# --minilm carry left the transformers wheel out to fit. The kit now refuses a carry that cannot import as2hub there,
# and as2hub has a fallback for transformers without SubConfigSpec.

SSP_CONFIG_FILE = ROOT / "modeling" / "ssp_pretraining" / "configuration_ssp_pretraining.py"
ELECTRA = {"vocab_size": 120, "hidden_size": 32, "embedding_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 37}  # fmt: skip


def config_module_without_subconfigspec(monkeypatch):
    """configuration_ssp_pretraining.py imported afresh as on a transformers without ``SubConfigSpec`` (< 5.20)."""
    monkeypatch.delattr(transformers.configuration_utils, "SubConfigSpec", raising=False)
    name = "as2hub.modeling.ssp_pretraining._configuration_without_subconfigspec"
    spec = importlib.util.spec_from_file_location(name, SSP_CONFIG_FILE)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("given", ["derived", "dict", "config"])
def test_the_electra_ssp_config_is_the_same_with_and_without_subconfigspec(monkeypatch, tmp_path, given):
    fallback = config_module_without_subconfigspec(monkeypatch)
    assert fallback.SubConfigSpec is None and fallback.SSPElectraConfig.sub_configs == {
        "generator_config": ElectraConfig
    }
    generator = {**ELECTRA, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 20}
    extra = {
        "derived": {},
        "dict": {"generator_config": generator},
        "config": {"generator_config": ElectraConfig(**generator)},
    }
    expected = {"derived": (8, 1, 12), "dict": (16, 2, 20), "config": (16, 2, 20)}[given]  # 1/3 of 4 heads of 8: 1 head
    modules = {"installed": configuration_ssp_pretraining, "fallback": fallback}
    built = {}
    for label, module in modules.items():
        built[label] = module.SSPElectraConfig(**ELECTRA, num_segments=3, **extra[given])
        built[label].save_pretrained(tmp_path / label)
    # Each class loads the other's config.json (the fallback saves the generator's every field, transformers >= 5.20
    # only those off its defaults) into the same config.
    for label, module in modules.items():
        for saved_by in modules:
            again = module.SSPElectraConfig.from_pretrained(tmp_path / saved_by)
            for each in (built[label], again):
                generator = each.generator_config
                assert type(generator) is ElectraConfig
                assert (generator.hidden_size, generator.num_attention_heads, generator.intermediate_size) == expected
                assert generator.type_vocab_size == each.type_vocab_size == 3
            assert comparable(again) == comparable(built["installed"]), (label, saved_by)


def comparable(config) -> dict:
    values = config.to_dict()
    values.pop("auto_map", None)  # named after the module, which is another one for the fallback here
    return values


def test_a_saved_generator_config_loads_into_the_fallback(monkeypatch, tmp_path):
    """A config.json written with SubConfigSpec (transformers >= 5.20, CI) loads on the image's 5.17 path."""
    fallback = config_module_without_subconfigspec(monkeypatch)
    generator = {**ELECTRA, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 20}
    configuration_ssp_pretraining.SSPElectraConfig(**ELECTRA, generator_config=generator).save_pretrained(tmp_path)
    loaded = fallback.SSPElectraConfig.from_pretrained(tmp_path)
    assert type(loaded.generator_config) is ElectraConfig and loaded.generator_config.hidden_size == 16
    assert loaded.generator_config.to_dict() == ElectraConfig(**generator, type_vocab_size=2).to_dict()


def test_the_recorded_image_against_as2hubs_requirements():
    image = carry_wheels.read_image()
    assert image == {"python": "3.12", "transformers": "5.17.0", "huggingface-hub": "1.33.0", "tokenizers": "0.23.2"}
    dependencies = re.search(r"dependencies = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S).group(1)
    requirements = needs(**dict(re.findall(r'"([\w-]+)([^"]*)"', dependencies)))
    assert str(requirements["transformers"]) == ">=5.17"  # the floor the image's 5.17 was tested at (issue 49)
    # The image's transformers and huggingface-hub are enough; its tokenizers is not, so tokenizers always travels.
    assert carry_wheels.falls_short(image, requirements, ("transformers", "huggingface-hub")) == []
    assert carry_wheels.falls_short(image, requirements, ("tokenizers",)) == [
        "tokenizers 0.23.2 falls short of as2hub's tokenizers>=0.23.3"
    ]


MIB = 1 << 20
WHEELS = {  # about the sizes measured on 2026-11-28 (transformers 12.9 MiB, tokenizers 3.2 MiB)
    "as2hub-0.1.0-py3-none-any.whl": 1 * MIB,
    "datasets-5.2.0-py3-none-any.whl": 1 * MIB,
    "tokenizers-0.23.3-cp39-abi3-manylinux_2_17_x86_64.whl": 3 * MIB,
    "transformers-5.24.0-py3-none-any.whl": 12 * MIB,
    "huggingface_hub-2.4.0-py3-none-any.whl": 1 * MIB,
    "httpx2-2.16.2-py3-none-any.whl": MIB // 2,
    "idna-3.11-py3-none-any.whl": MIB // 8,
}
TRANSFORMERS_GROUP = {"transformers-5.24.0-py3-none-any.whl", "huggingface_hub-2.4.0-py3-none-any.whl",
                      "httpx2-2.16.2-py3-none-any.whl", "idna-3.11-py3-none-any.whl"}  # fmt: skip
IMAGE = {"python": "3.12", "transformers": "5.17.0", "huggingface-hub": "1.33.0", "tokenizers": "0.23.2"}


def needs(**floors):
    return {carry_wheels.canonical(name): SpecifierSet(spec) for name, spec in floors.items()}


def plan(other_mib: float, profile: str, image=IMAGE, requirements=None):
    requirements = requirements or needs(transformers=">=5.17", huggingface_hub=">=1.0", tokenizers=">=0.20")
    left = carry_wheels.plan_upgrades(WHEELS, image, requirements, int(other_mib * MIB), 64 * MIB, profile)
    return [name for name, _ in left], dict(left)


def test_the_minilm_profile_carries_no_upgrade_the_image_does_not_need():
    names, reasons = plan(other_mib=3, profile="minilm")  # 3 + 18.6 MiB: it would fit, and is still left out
    assert names[0] == "tokenizers-0.23.3-cp39-abi3-manylinux_2_17_x86_64.whl"  # UPGRADES' order
    assert set(names[1:]) == TRANSFORMERS_GROUP and len(names) == 5
    assert reasons["transformers-5.24.0-py3-none-any.whl"] == (
        "the image's transformers 5.17.0, huggingface-hub 1.33.0 are enough (as2hub needs transformers>=5.17, "
        "huggingface-hub>=1.0); --minilm carries no optional upgrade"
    )


def test_the_default_profile_leaves_upgrades_out_only_to_fit_in_order():
    assert plan(other_mib=40, profile="default")[0] == []  # 40 + 18.6 < 64
    names, reasons = plan(other_mib=47, profile="default")  # 65.6: leaving tokenizers (3 MiB) out is enough
    assert names == ["tokenizers-0.23.3-cp39-abi3-manylinux_2_17_x86_64.whl"]
    assert reasons[names[0]].startswith("over 64 MiB with it (65.6 MiB); the image's tokenizers 0.23.2 is enough")
    names, _ = plan(other_mib=55, profile="default")  # 73.6 - 3 = 70.6: the transformers group goes too
    assert set(names) == {"tokenizers-0.23.3-cp39-abi3-manylinux_2_17_x86_64.whl", *TRANSFORMERS_GROUP}


def test_an_upgrade_the_image_falls_short_of_always_travels():
    older = {**IMAGE, "transformers": "5.10.0"}
    names, _ = plan(other_mib=55, profile="minilm", image=older)
    assert names == ["tokenizers-0.23.3-cp39-abi3-manylinux_2_17_x86_64.whl"]  # the caller then refuses: over 64 MiB
    # as2hub's own floors (pyproject): the image's tokenizers 0.23.2 falls short, so it travels even with --minilm.
    names, _ = plan(other_mib=3, profile="minilm", requirements=needs(transformers=">=5.17", tokenizers=">=0.23.3"))
    assert set(names) == TRANSFORMERS_GROUP


def test_the_requirements_are_read_from_the_carried_as2hub_wheel(tmp_path):
    wheel = tmp_path / "as2hub-0.1.0-py3-none-any.whl"
    metadata = "Metadata-Version: 2.4\nName: as2hub\nVersion: 0.1.0\nRequires-Dist: transformers>=5.17\n"
    metadata += 'Requires-Dist: Huggingface_Hub>=1.0\nRequires-Dist: ruff>=0.6; extra == "test"\n'
    carry_wheels.write_wheel(wheel, {"as2hub-0.1.0.dist-info/METADATA": metadata.encode()}, "as2hub-0.1.0.dist-info")
    assert {name: str(spec) for name, spec in carry_wheels.wheel_requirements(wheel).items()} == {
        "transformers": ">=5.17",
        "huggingface-hub": ">=1.0",
    }


def test_a_carry_that_cannot_import_as2hub_is_refused(tmp_path):
    """The check installs the carried wheels as the device does and imports as2hub: here a stand-in as2hub whose
    import fails as as2hub's did on transformers 5.17 (no image stand-in needed: the failure is the wheel's own)."""
    (tmp_path / "carry" / "wheels").mkdir(parents=True)
    (tmp_path / "image").mkdir()
    files = {
        "as2hub/modeling/__init__.py": b"raise ImportError(\"cannot import name 'SubConfigSpec'\")\n",
        "as2hub-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: as2hub\nVersion: 0.1.0\n",
        "as2hub-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    wheel = tmp_path / "carry" / "wheels" / "as2hub-0.1.0-py3-none-any.whl"
    carry_wheels.write_wheel(wheel, files, "as2hub-0.1.0.dist-info")
    with pytest.raises(SystemExit) as refusal:
        carry_wheels.check_import(tmp_path / "carry", site=tmp_path / "image")
    message = str(refusal.value)
    assert message.startswith("error: the carry cannot import as2hub on the image (python 3.12, transformers 5.17.0,")
    assert message.endswith("ImportError: cannot import name 'SubConfigSpec'") and "\n" not in message


# gpu_learn_lease.sh: the order of its invocations, with a stand-in for run_gpu_session.sh that records each call and
# writes the results JSON a reproduce.py invocation would (the pre-training done or not).
FAKE_PART = r"""#!/usr/bin/env bash
shift  # reproduce
table=$1; shift
echo "$AS2HUB_RUN_TAG|$table|$*|$AS2HUB_GPU_PART_SECONDS" >> "$CALLS"
name=as2_pretraining
[ "$table" = 004 ] && name=joint
echo "{\"pretraining\": {\"ssp\": {\"status\": \"$PRETRAIN_STATUS\"}}}" \
  > "$OUT/reproduce_${name}_${AS2HUB_REPRODUCE_SCALE}_$AS2HUB_RUN_TAG.json"
echo "=== fake $AS2HUB_RUN_TAG"
"""


def run_lease(
    tmp_path,
    status: str,
    group: str = "ssp",
    parallel: str = "2",
    seconds: str = "500",
    printed: list | None = None,
    scale: str = "gpu_learn",
) -> list[list[str]]:
    import subprocess

    tmp_path.mkdir(exist_ok=True)
    part = tmp_path / "part.sh"
    part.write_text(FAKE_PART)
    calls, out = tmp_path / "calls.txt", tmp_path / "out"
    env = {
        "PATH": "/usr/bin:/bin",
        "OUT": str(out),
        "CALLS": str(calls),
        "PRETRAIN_STATUS": status,
        "AS2HUB_LEASE_PART": str(part),
        "AS2HUB_LEASE_SECONDS": seconds,
        "AS2HUB_LEASE_PARALLEL": parallel,
        "AS2HUB_LEASE_SCALE": scale,
    }
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "gpu_learn_lease.sh"), group],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    archive = out / f"{scale}_{group}.tgz"
    assert archive.is_file() and not list(out.glob("*.json")), sorted(p.name for p in out.iterdir())
    if printed is not None:
        printed.extend(done.stdout.splitlines())
    return [line.split("|") for line in calls.read_text().splitlines()]


def test_the_lease_fine_tunes_the_other_seeds_from_the_finished_pre_training(tmp_path):
    calls = {tag: (table, flags, int(seconds)) for tag, table, flags, seconds in run_lease(tmp_path, "done")}
    assert set(calls) == {"base", "pairwise_ssp", "pairwise_ssp_a", "pairwise_ssp_b", "pairwise_mlm", "pairwise_mlm_a",
                          "pairwise_mlm_b"}  # fmt: skip
    assert {table for table, _, _ in calls.values()} == {"001"}
    assert "--systems pairwise --seed_list 42,43,44,45,46" in calls["base"][1]
    for system in ("pairwise_ssp", "pairwise_mlm"):
        assert f"--systems {system} --seed_list 42 " in calls[system][1] + " "
        assert "--state_from" not in calls[system][1]
        for tag, seeds in (("a", "43,45"), ("b", "44,46")):
            flags = calls[f"{system}_{tag}"][1]
            assert f"--systems {system} --seed_list {seeds} " in flags
            assert flags.endswith(f"--state_from {tmp_path}/out/reproduce_as2_pretraining_gpu_learn_{system}.json")
    assert all(0 < seconds <= 500 for _, _, seconds in calls.values())


def test_a_cpu_learn_lease_counts_the_cpu_seeds_as_done(tmp_path):
    # The MSPP group at cpu_learn: mspp_own_slot and joint_mlm have their 5 seeds on the CPU (the pip package's
    # weights, 53aa5117); the GPU starts from the rounded copy. Without --merge_weights every invocation would run
    # those seeds again, and the merge back would put the GPU's records in their place.
    calls = run_lease(tmp_path, "done", group="mspp", scale="cpu_learn")
    assert {tag for tag, *_ in calls} >= {"base", "mspp", "mspp_own_slot", "joint_mlm", "mspp_own_slot_a"}
    assert all("--merge_weights 53aa5117" in flags for _, _, flags, _ in calls)
    assert not any("--merge_weights" in flags for _, _, flags, _ in run_lease(tmp_path / "gpu_learn", "done"))


def test_the_lease_starts_no_fine_tuning_without_its_pre_training(tmp_path):
    calls = run_lease(tmp_path, "partial")
    assert sorted(call[0] for call in calls) == ["base", "pairwise_mlm", "pairwise_ssp"]
    # ... and its last line says which systems are left, so that the next call comes while the machine is warm
    printed = []
    run_lease(tmp_path / "again", "partial", printed=printed)
    assert (
        printed[-1]
        == "NOT FINISHED: pairwise_mlm pairwise_ssp: call the same command again at once, on the warm machine"
    )


def test_the_lease_says_when_the_deadline_leaves_no_time_for_the_later_seeds(tmp_path):
    printed = []
    calls = run_lease(tmp_path, "done", seconds="100", printed=printed)  # under the 120 s a fine-tuning round needs
    assert sorted(call[0] for call in calls) == ["base", "pairwise_mlm", "pairwise_ssp"]
    assert printed[-1].startswith("NOT FINISHED: pairwise_mlm pairwise_ssp: ")
    printed = []
    run_lease(tmp_path / "full", "done", printed=printed)
    assert printed[-1] == "group ssp complete"


def test_the_mspp_group_runs_each_cascade_with_its_pre_training(tmp_path):
    calls = {tag: flags for tag, table, flags, _ in run_lease(tmp_path, "done", "mspp")}
    assert "--systems mspp,cascade --seed_list 42 " in calls["mspp"] + " "
    assert "--systems mspp_own_slot,cascade_mspp_own_slot --seed_list 43,45 " in calls["mspp_own_slot_a"]
    assert "--systems joint_all,joint_own_slot --seed_list 42,43,44,45,46" in calls["base"]


def test_the_lease_runs_each_later_seed_in_its_own_invocation_when_asked(tmp_path):
    calls = {tag: flags for tag, table, flags, _ in run_lease(tmp_path, "done", "dslc", parallel="4")}
    assert sorted(calls) == sorted(
        ["base"]
        + [
            f"{s}{t}"
            for s in ("contextual_dslc", "contextual_dpc", "contextual_mlm")
            for t in ("", "_a", "_b", "_c", "_d")
        ]
    )
    for tag, seed in (("a", 43), ("b", 44), ("c", 45), ("d", 46)):
        assert f"--systems contextual_dpc --seed_list {seed} " in calls[f"contextual_dpc_{tag}"]


def script_commands(text: str) -> dict[str, list[str]]:
    """The run_as2 and bench_cascade.py commands of a shell script's text (continuation lines joined,
    ``${COMMON[@]}`` expanded, shell values replaced by stand-ins, ``"$@"`` dropped): name -> its arguments, in order
    of appearance (``run_as2_0``, ``run_as2_1``, ..., ``bench_cascade``)."""
    common = re.search(r"COMMON=\((.*)\)", text)
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = {}
    for line in joined.splitlines():
        match = re.search(
            r"(?:python3|\"\$PY\") (?:-m as2hub\.run_scripts\.run_as2|benchmarks/bench_cascade\.py) (.*?)(?: 2>&1| [>|] |$)",
            line,
        )
        if not match:
            continue
        words = []
        expanded = match.group(1).replace('"${COMMON[@]}"', " ".join(shlex.split(common.group(1))) if common else "")
        for word in shlex.split(expanded):
            if word == "$@":
                continue
            words.append("/tmp/stand-in" if "$" in word and "MODE" not in word else word.replace("$MODE", "question"))
        name = "bench_cascade" if "bench_cascade" in line else f"run_as2_{len([k for k in commands if 'run_as2' in k])}"
        commands[name] = words
    return commands


def run_as2_parser():
    from transformers import HfArgumentParser

    from as2hub.run_scripts import run_as2

    return HfArgumentParser(
        (run_as2.ModelArguments, run_as2.DataArguments, run_as2.AS2TrainingArguments, run_as2.ExportArguments,
         run_as2.HubArguments)
    )  # fmt: skip


def test_the_ranker_is_fine_tuned_then_its_heads_distilled_with_accepted_flags():
    """Issue 51's timed ranker (build_cascade_ranker.sh, on a CPU or the GPU): the fine-tuning and the heads'
    distillation parse with run_as2's own parser, with the settings of the CPU runs."""
    commands = script_commands((ROOT / "benchmarks" / "build_cascade_ranker.sh").read_text())
    assert set(commands) == {"run_as2_0", "run_as2_1"}
    parser = run_as2_parser()
    finetune = parser.parse_args_into_dataclasses(commands["run_as2_0"])
    heads = parser.parse_args_into_dataclasses(commands["run_as2_1"])
    assert finetune[1].dataset == "wikiqa" and finetune[2].learning_rate == 2e-5 and finetune[2].seed == 45
    assert heads[0].cascade_heads_only and heads[0].cascade_head_target == "distill"
    assert heads[0].cascade_layers == "2,4" or list(heads[0].cascade_layers) == [2, 4]


def test_the_question_part_builds_the_ranker_and_benchmarks_with_accepted_flags():
    """Issue 51's GPU part: the ranker from build_cascade_ranker.sh, and the benchmark runs both CUDA precisions
    compiled and unpadded, with the peers on the GPU."""
    import bench_cascade

    text = (ROOT / "benchmarks" / "gpu" / "run_gpu_session.sh").read_text()
    block = text.split("\n  question)\n", 1)[1].split("\n    ;;\n", 1)[0]
    assert 'bash benchmarks/build_cascade_ranker.sh "$WORK"' in block
    commands = script_commands(block)
    assert set(commands) == {"bench_cascade"}
    bench = bench_cascade.parse_args(commands["bench_cascade"])
    assert bench.backends == ["cuda-fp16", "cuda-bf16"] and bench.torch_compile and bench.mode == "question"
    assert bench.unpadded  # the unpadded pass measured on the GPU too (issue 51)
    assert 1 in bench.peer_batch_sizes and 256 in bench.peer_batch_sizes


def test_the_cpu_run_times_every_backend_compiled_and_unpadded_against_every_peer_batch():
    """run_question_speed.sh (issue 51 on any CPU): the benchmark's flags parse, with every CPU backend, compiled and
    unpadded rows, the dev-chosen drop, the peer at batch 1 to 64, one thread and three repeats."""
    import bench_cascade

    text = (ROOT / "benchmarks" / "run_question_speed.sh").read_text()
    args = script_commands(text)["bench_cascade"]
    args[args.index("--peer_batch_sizes") + 1] = re.search(r"\n  PEERS=(\S+)", text).group(1)  # per question
    bench = bench_cascade.parse_args(args)
    assert bench.peer_batch_sizes == [1, 8, 16, 64] and bench.mode == "question"
    assert bench.backends == ["torch", "torch-bf16", "onnx-int8"] and bench.torch_compile and bench.unpadded
    assert bench.drops == [0.3] and bench.threads == 1 and bench.repeats == 3


STUB_PYTHON = r"""#!/usr/bin/env bash
# A stand-in interpreter: "-c CODE" prints a MiniLM folder; "-m MODULE ... --output_dir DIR" records the call and
# writes DIR/config.json, unless FAIL_AT names this call's number.
if [ "$1" = -c ]; then echo /tmp/minilm; exit 0; fi
n=$(( $(wc -l < "$CALLS" 2>/dev/null || echo 0) + 1 ))
echo "$*" >> "$CALLS"
[ "${FAIL_AT:-0}" = "$n" ] && { echo "boom $n"; exit 3; }
while [ $# -gt 0 ]; do [ "$1" = --output_dir ] && out=$2; shift; done
mkdir -p "$out" && echo '{}' > "$out/config.json"
"""


def build_ranker(tmp_path, fail_at: int = 0):
    import subprocess

    stub = tmp_path / "python"
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "CALLS": str(tmp_path / "calls"), "FAIL_AT": str(fail_at)}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "build_cascade_ranker.sh"), str(tmp_path / "work")],
        env=env, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return done, calls


def test_the_ranker_is_built_once_and_a_failed_step_leaves_no_finished_folder(tmp_path):
    work = tmp_path / "work"
    done, calls = build_ranker(tmp_path, fail_at=2)  # the heads' distillation fails
    assert done.returncode == 1 and "boom 2" in done.stderr
    assert (work / "ranker" / "config.json").is_file() and not (work / "heads").exists()
    assert "--output_dir " + str(work / "ranker.partial") in calls[0] and "--model_name_or_path /tmp/minilm" in calls[0]

    done, calls = build_ranker(tmp_path)  # again: the fine-tuned ranker is kept, only the heads run
    assert done.returncode == 0 and done.stdout.strip() == str(work / "heads")
    assert len(calls) == 3 and "--model_name_or_path " + str(work / "ranker") in calls[2]
    assert (work / "heads" / "config.json").is_file() and not (work / "heads.partial").exists()

    done, calls = build_ranker(tmp_path)  # finished: nothing runs
    assert done.returncode == 0 and done.stdout.strip() == str(work / "heads") and len(calls) == 3

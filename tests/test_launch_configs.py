"""The example launch configs in run_scripts/launch/ parse with accelerate and say what the README promises."""

import json
import re
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import launch_command_parser
from accelerate.utils import DistributedType

LAUNCH = Path(__file__).resolve().parents[1] / "run_scripts" / "launch"
ROOT = LAUNCH.parents[1]
LAUNCH_OPTIONS = {option.lstrip("-") for action in launch_command_parser()._actions for option in action.option_strings}


def per_device_times_accumulation(path: Path) -> int:
    """The example command's per-device batch x accumulation, read from the config's comment."""
    text = path.read_text()
    batch = int(re.search(r"--per_device_train_batch_size (\d+)", text).group(1))
    accumulation = int(re.search(r"--gradient_accumulation_steps (\d+)", text).group(1))
    return batch * accumulation


@pytest.mark.parametrize(
    "name, kind",
    [
        ("accelerate_multi_gpu.yaml", DistributedType.MULTI_GPU),
        ("accelerate_deepspeed_zero2.yaml", DistributedType.DEEPSPEED),
        ("accelerate_fsdp.yaml", DistributedType.FSDP),
    ],
)
def test_accelerate_configs_load_and_give_the_papers_batch(name, kind):
    path = LAUNCH / name
    config = load_config_from_file(str(path))  # raises on keys accelerate does not know
    assert config.distributed_type == kind and config.num_machines == 1 and config.machine_rank == 0
    assert not config.use_cpu
    # per device x devices x accumulation = 4,096 (ACL 2023 App. C, EMNLP 2022 App. B, NAACL 2022 App. B.1).
    assert per_device_times_accumulation(path) * config.num_processes == 4096
    for key in {**config.fsdp_config, **config.deepspeed_config}:
        assert key in LAUNCH_OPTIONS, f"{name}: accelerate launch has no --{key}"


def test_deepspeed_config_is_zero_2_with_everything_else_from_trainer():
    accelerate_config = load_config_from_file(str(LAUNCH / "accelerate_deepspeed_zero2.yaml"))
    json_path = ROOT / accelerate_config.deepspeed_config["deepspeed_config_file"]
    assert json_path == LAUNCH / "deepspeed_zero2.json"
    config = json.loads(json_path.read_text())
    assert config["zero_optimization"]["stage"] == 2
    # Trainer fills every "auto" from its arguments, so the command line stays the one source of truth.
    for key in (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
    ):
        assert config[key] == "auto", key
    assert set(config["optimizer"]["params"].values()) == {"auto"}
    assert config["bf16"]["enabled"] == config["fp16"]["enabled"] == "auto"


def test_fsdp_wraps_a_layer_class_the_pretraining_model_has():
    from as2hub.modeling import SSP_MODELS

    config = load_config_from_file(str(LAUNCH / "accelerate_fsdp.yaml")).fsdp_config
    assert config["fsdp_version"] == 2 and config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    config_class, model_class = SSP_MODELS["roberta"]
    model = model_class(
        config_class(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    )
    layers = [
        module for module in model.modules() if type(module).__name__ == config["fsdp_transformer_layer_cls_to_wrap"]
    ]
    assert len(layers) == 2

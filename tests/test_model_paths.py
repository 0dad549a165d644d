"""Loading a ranker from a wrong path raises one clear exception (issue 47): a folder without config.json, a path that
does not exist, a LoRA adapter folder; a Hub id still goes to the Hub loader (modeling/folders.py)."""

import json

import pytest
import torch
from helpers import needs_onnx, transformers_messages
from safetensors.torch import load_file
from transformers import AutoTokenizer

from as2hub.inference import ranking
from as2hub.inference.joint_ranking import JointRanker
from as2hub.inference.onnx_runtime import OnnxRankerModel
from as2hub.inference.ranking import Ranker
from as2hub.modeling import CONTEXTUAL_MODELS
from as2hub.modeling.folders import (
    AdapterFolderError,
    ModelNotFoundError,
    NotAModelFolderError,
    NotAnAS2hubRankerError,
    check_model_path,
    check_ranker_folder,
)
from as2hub.modeling.lora import add_lora, embedding_layers_to_save
from as2hub.run_scripts.arguments import run_cli, user_errors

LOADERS = {
    "Ranker": Ranker.from_pretrained,
    "Ranker-auto": lambda path: Ranker.from_pretrained(path, backend="auto"),
    "JointRanker": JointRanker.from_pretrained,
    "OnnxRankerModel": OnnxRankerModel.from_pretrained,
}


def contextual_model(stock_checkpoint, backbone="roberta"):
    source = stock_checkpoint(backbone)
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    model = CONTEXTUAL_MODELS[backbone][1].from_pretrained(source, contextual=True, sep_token_id=tokenizer.sep_token_id)
    return model, tokenizer


@pytest.fixture(scope="module")
def run_folder(stock_checkpoint, tmp_path_factory):
    """What a --use_lora run leaves: the merged model in the folder, the adapter alone in lora_adapter/."""
    model, tokenizer = contextual_model(stock_checkpoint)
    folder = tmp_path_factory.mktemp("lora-run")
    peft_model = add_lora(model, r=2)
    peft_model.save_pretrained(folder / "lora_adapter")
    peft_model.merge_and_unload().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_folder_without_config_says_what_to_pass(tmp_path, loader):
    with pytest.raises(NotAModelFolderError) as error:
        LOADERS[loader](tmp_path)
    message = one_line(error)
    assert message.startswith(f"{tmp_path} is not a saved model folder (no config.json): pass the output folder")
    assert "--output_dir" in message and "save_pretrained()" in message
    assert isinstance(error.value, NotAnAS2hubRankerError) and isinstance(error.value, ValueError)
    assert "model_type" not in message  # not transformers' "Should have a `model_type` key in its config.json"


def test_a_folder_that_holds_model_folders_names_them(tmp_path):
    (tmp_path / "ranker").mkdir()
    (tmp_path / "ranker" / "config.json").write_text(json.dumps({"model_type": "contextual_roberta"}))
    (tmp_path / "notes").mkdir()
    with pytest.raises(NotAModelFolderError) as error:
        Ranker.from_pretrained(tmp_path)
    assert one_line(error) == (
        f"{tmp_path} is not a saved model folder (no config.json): it holds model folders, pass one of them: "
        f"{tmp_path / 'ranker'}"
    )


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("kind", ["absolute", "relative", "file"])
def test_a_missing_path_is_named_not_sent_to_the_hub(tmp_path, monkeypatch, loader, kind):
    monkeypatch.chdir(tmp_path)
    path = {"absolute": str(tmp_path / "no" / "ranker"), "relative": "./outputs/ranker", "file": "weights.bin"}[kind]
    if kind == "file":
        (tmp_path / path).write_bytes(b"\0")
        with pytest.raises(NotAModelFolderError) as error:
            LOADERS[loader](path)
        assert one_line(error).startswith(f"{path} is a file, not a model folder: pass the folder that holds config")
        return
    with pytest.raises(ModelNotFoundError) as error:
        LOADERS[loader](path)
    message = one_line(error)
    assert message.startswith(f"{path}: no such model folder (nor a Hub model id")
    assert isinstance(error.value, FileNotFoundError)  # an OSError, as transformers raises for a missing model
    assert "Repo id must be" not in message


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_lora_adapter_folder_points_to_the_merged_model(run_folder, loader):
    adapter = run_folder / "lora_adapter"
    with pytest.raises(AdapterFolderError) as error:
        LOADERS[loader](adapter)
    assert one_line(error) == (
        f"{adapter} is a LoRA adapter (adapter_config.json, no config.json), not a model: pass {run_folder} instead, "
        "the run's folder, which holds the adapter merged into the model (a --use_lora run saves both)"
    )
    assert Ranker.from_pretrained(run_folder).contextual  # what the message names loads


def test_an_adapter_on_its_own_names_its_base_model(run_folder, stock_checkpoint, tmp_path):
    adapter = tmp_path / "downloaded-adapter"
    adapter.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (adapter / name).write_bytes((run_folder / "lora_adapter" / name).read_bytes())
    with pytest.raises(AdapterFolderError) as error:
        Ranker.from_pretrained(adapter)
    message = one_line(error)
    assert message.startswith(f"{adapter} is a LoRA adapter (adapter_config.json, no config.json), not a model: ")
    assert f"merge the adapter into its base model {stock_checkpoint('roberta')} with PEFT" in message


def test_a_hub_id_still_goes_to_the_hub_loader(monkeypatch):
    """A string that is no local path and is a valid repo id reaches the loader unchanged (no network here: the loader
    is replaced by one that records what it was given)."""
    asked = []

    class Loader:
        @staticmethod
        def from_pretrained(path, **kwargs):
            asked.append(path)
            raise OSError("the Hub loader was called")

    monkeypatch.setattr(ranking, "AutoModelForSequenceClassification", Loader)
    for repo_id in ("someone/minilm-wikiqa-as2", "bert-base-uncased"):
        check_model_path(repo_id)  # no error
        with pytest.raises(OSError, match="the Hub loader was called"):
            Ranker.from_pretrained(repo_id)
    assert asked == ["someone/minilm-wikiqa-as2", "bert-base-uncased"]


def test_the_commands_print_the_adapter_message_as_one_line(run_folder, capsys):
    """as2hub-serve / as2hub-score / as2hub-export-onnx check folders with check_ranker_folder: the same errors, which
    run_cli prints as one line."""
    adapter = run_folder / "lora_adapter"
    with pytest.raises(AdapterFolderError):
        check_ranker_folder(adapter)
    assert isinstance(AdapterFolderError("x"), user_errors()) and isinstance(ModelNotFoundError("x"), user_errors())

    def main(argv):
        check_ranker_folder(argv[0])

    assert run_cli(main, [str(adapter)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {adapter} is a LoRA adapter") and f"pass {run_folder} instead" in line


@needs_onnx
def test_export_onnx_on_an_adapter_folder_is_one_line(run_folder, capsys):
    from as2hub.run_scripts import export_onnx

    assert export_onnx.cli([str(run_folder / "lora_adapter")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith(f"error: {run_folder / 'lora_adapter'} is a LoRA adapter"), line


# --------------------------------------------------------------------------------------------------------------------
# LoRA saves without transformers' config-class warning (issue 47: twice per LoRA run)


def test_saving_a_lora_model_does_not_warn_about_the_config_class(stock_checkpoint, tmp_path):
    """PEFT's "were the embeddings resized?" check read the stock base (``roberta``) with as2hub's config class
    (``contextual_roberta``): "You are using a model of type `roberta` to instantiate a model of type
    `contextual_roberta`" at every checkpoint and at the final save. The adapter saved is the same as before: the
    LoRA and fully trained weights, no embedding table (the vocabulary did not change)."""
    model, _ = contextual_model(stock_checkpoint)
    peft_model = add_lora(model, r=2)
    with transformers_messages() as messages:
        peft_model.save_pretrained(tmp_path / "adapter")
    assert not [message for message in messages if "to instantiate a model of type" in message], messages
    keys = set(load_file(tmp_path / "adapter" / "adapter_model.safetensors"))
    assert not any("word_embeddings" in key for key in keys)
    assert any("lora_A" in key for key in keys) and any("token_type_embeddings" in key for key in keys)
    assert embedding_layers_to_save(peft_model) is False


def test_a_resized_vocabulary_still_saves_the_embeddings(stock_checkpoint):
    """PEFT's decision kept: a vocabulary resized since the base (e.g. added tokens) saves the embedding layers."""
    model, tokenizer = contextual_model(stock_checkpoint)
    model.resize_token_embeddings(len(tokenizer) + 8)
    assert embedding_layers_to_save(add_lora(model, r=2)) is True

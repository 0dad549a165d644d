"""Publishing without training: cards from run records, what is uploaded, bad input stops before any upload.

The end-to-end round trips through a local Hub (push, then load by repo id in a fresh process) are in
``test_publish_hub.py``; the fake Hub itself is ``hub_fake.py``.
"""

import json
import shutil

import pytest
from hub_fake import FakeHub
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from as2hub.hub_cards import (
    FAMILIES,
    NOT_EVALUATED,
    Family,
    Metric,
    build_model_card,
    register_family,
)
from as2hub.hub_cards.push import HubArguments, HubPush, plan_upload, push_run_folder
from as2hub.hub_cards.run_outputs import save_hub_folder
from as2hub.hub_cards.run_record import RUN_RECORD, PublishError, make_run_record, read_run, reference_outputs
from as2hub.modeling import BertForContextualAS2, RobertaForSSPPretraining, SSPRobertaConfig
from as2hub.modeling.files import write_json_atomic
from as2hub.run_scripts import push_to_hub, run_as2, run_joint, run_pretrain, run_qe_contrastive

RESULTS = {
    "train": {"train_runtime": 12.5, "epoch": 1.0, "train_loss": 0.61},
    "dev": {"eval_map": 0.6102, "eval_mrr": 0.6311, "eval_p@1": 0.5, "eval_num_questions": 3},
    "test": {"test_map": 0.7034, "test_mrr": 0.7121, "test_p@1": 0.5612, "test_num_questions": 3},
}
MODEL_FILES = {
    "config.json",
    "model.safetensors",
    "configuration_contextual_as2.py",
    "modeling_contextual_as2.py",
    "hub_common.py",
    "tokenizer.json",
    "tokenizer_config.json",
}


def metric_values(card: ModelCard) -> dict:
    return {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results or []}


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as server:
        yield server


@pytest.fixture(scope="module")
def saved_ranker(stock_checkpoint, tmp_path_factory):
    """A contextual ranker saved by run_as2's own save path, with a run's other outputs around it (no training)."""
    stock = stock_checkpoint("bert")
    out = tmp_path_factory.mktemp("ranker") / "out"
    tokenizer = AutoTokenizer.from_pretrained(stock)
    model = BertForContextualAS2.from_pretrained(stock, sep_token_id=tokenizer.sep_token_id)
    model_args = run_as2.ModelArguments(model_name_or_path=str(stock))
    data_args = run_as2.DataArguments(dataset="embedded", max_length=48)
    training_args = run_as2.AS2TrainingArguments(
        output_dir=str(out), max_steps=4, learning_rate=1e-3, hub_token="hf_secret_never_written"
    )
    save_hub_folder(model, tokenizer, out, model_args, data_args, RESULTS, training_args)
    write_json_atomic(out / "all_results.json", RESULTS)
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "optimizer.pt").write_bytes(b"not for the Hub")
    (out / "test_predictions.jsonl").write_text('{"question_id": "q0"}\n')
    (out / "training_args.bin").write_bytes(b"pickled")
    return out


@pytest.fixture
def ranker_copy(saved_ranker, tmp_path):
    return shutil.copytree(saved_ranker, tmp_path / "out")


def test_card_is_built_from_the_run_and_parses_back_with_its_metrics(saved_ranker):
    card = ModelCard.load(saved_ranker / "README.md")
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-ranking"
    assert {"as2hub", "custom_code", "contextual-as2", "answer-sentence-selection"} <= set(data.tags)
    assert metric_values(card) == {
        ("test", "map"): 0.7034,
        ("test", "mrr"): 0.7121,
        ("test", "precision_at_1"): 0.5612,
        ("validation", "map"): 0.6102,
        ("validation", "mrr"): 0.6311,
        ("validation", "precision_at_1"): 0.5,
    }
    assert data.eval_results[0].task_type == "text-ranking"
    assert data.base_model is None  # the run started from a local folder: never named as a Hub base model
    text = card.text
    for section in ("## How to use", "## Training", "## Evaluation", "## Limitations", "## Citation"):
        assert section in text
    assert "http" not in card.content  # no link at all, let alone to a repository that does not exist
    assert "Context-Aware Transformer Pre-Training for Answer Sentence Selection" in text
    assert f'model="{saved_ranker}"' in text and '"[SEP]"' in text  # the folder, the tokenizer's own separator
    assert "| learning rate | `0.001` |" in text and "| 0.7034 |" in text


def test_card_names_hub_datasets_and_base_models_only(saved_ranker):
    record, metrics = read_run(saved_ranker)
    wikiqa = {**record, "base_model": "sentence-transformers/all-MiniLM-L6-v2"}
    wikiqa["arguments"] = {**record["arguments"], "data": {**record["arguments"]["data"], "dataset": "wikiqa"}}
    card = build_model_card(wikiqa, metrics, "me/minilm-wikiqa")
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.data.datasets == ["microsoft/wiki_qa"] and card.data.language == ["en"]
    assert {r.dataset_type for r in card.data.eval_results} == {"microsoft/wiki_qa"}
    assert "Research Data License" in card.text
    adapter = build_model_card(
        record, metrics, "me/lora", variant="adapter", base_model="google-bert/bert-base-uncased"
    )
    assert adapter.data.library_name == "peft" and adapter.data.base_model == "google-bert/bert-base-uncased"
    assert "PeftModel.from_pretrained" in adapter.text and metric_values(adapter) == metric_values(card)


def test_a_run_without_evaluation_says_not_evaluated(saved_ranker):
    record, _ = read_run(saved_ranker)
    card = ModelCard(str(build_model_card(record, {"train": RESULTS["train"]}, "me/ranker")))
    assert card.data.eval_results is None and "model-index" not in card.content
    assert NOT_EVALUATED in card.text


def test_pretraining_card_reports_held_out_auc_and_balanced_accuracy(tmp_path):
    config = SSPRobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=37, num_segments=3)  # fmt: skip
    model = RobertaForSSPPretraining(config)
    parser = run_pretrain.HfArgumentParser((run_pretrain.PretrainModelArguments, run_pretrain.PretrainDataArguments))
    model_args, data_args = parser.parse_args_into_dataclasses(args=["--objective", "sdc"])
    record = make_run_record("ssp_pretraining", model, {"model": model_args, "data": data_args}, "x.json", {})
    metrics = {
        "before": {"before_cls_auc": 0.51, "before_cls_balanced_accuracy": 0.5, "before_mlm_loss": 8.3},
        "eval": {"eval_cls_auc": 0.5812, "eval_cls_balanced_accuracy": 0.5433, "eval_mlm_loss": 6.0},
    }
    card = ModelCard(str(build_model_card(record, metrics, "me/roberta-sdc")))
    assert card.data.pipeline_tag is None and card.data.library_name == "transformers"
    assert {"as2hub", "custom_code", "sdc"} <= set(card.data.tags)
    assert metric_values(card) == {("held_out", "roc_auc"): 0.5812, ("held_out", "balanced_accuracy"): 0.5433}
    assert "| sentence-task AUC | 0.5100 | 0.5812 |" in card.text  # before / after, from the run's metrics
    assert "Pre-training Transformer Models with Sentence-Level Objectives" in card.text
    assert "run_as2 --model_name_or_path me/roberta-sdc" in card.text


def test_a_new_family_plugs_in_with_one_declarative_entry(saved_ranker):
    record, _ = read_run(saved_ranker)
    family = Family(
        name="toy_fact_verification",
        summary=lambda ctx: "A toy fact-verification model.",
        usage=lambda ctx: f'pipeline("joint-ranking", model="{ctx.model_id}", trust_remote_code=True)',
        citations=("diliello2022paragraph",),
        pipeline_tag="text-classification",
        tags=("fact-verification",),
        metrics=(Metric("test", "test_accuracy", "accuracy", "Label accuracy"),),
    )
    register_family(family)
    try:
        card = build_model_card({**record, "family": family.name}, {"test": {"test_accuracy": 0.8125}}, "me/fv")
    finally:
        FAMILIES.pop(family.name)
    assert card.data.pipeline_tag == "text-classification" and "fact-verification" in card.data.tags
    assert metric_values(card) == {("test", "accuracy"): 0.8125}
    assert 'pipeline("joint-ranking", model="me/fv"' in card.text and "Multi-Sentence Inference" in card.text
    with pytest.raises(ValueError, match="unknown BibTeX keys"):
        register_family(Family("x", summary=str, usage=str, citations=("nobody2030",)))


def test_upload_plan_is_the_model_and_nothing_else(saved_ranker):
    record, _ = read_run(saved_ranker)
    files, components = plan_upload(saved_ranker, record)
    assert set(files) == MODEL_FILES  # README.md is the card rebuilt for the repository at push time
    assert [c["name"] for c in components] == ["model"]
    files, _ = plan_upload(saved_ranker, record, include=["all_results.json", "checkpoint-*"])
    assert set(files) == MODEL_FILES | {"all_results.json", "checkpoint-2/optimizer.pt"}
    with pytest.raises(PublishError, match="no LoRA adapter"):
        plan_upload(saved_ranker, record, adapter=True)
    with pytest.raises(PublishError, match="matches nothing"):
        plan_upload(saved_ranker, record, include=["logs/*"])


def _writes(hub, since: int) -> list:
    return [request for request in hub.requests[since:] if request[0] in ("POST", "PUT")]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no_weights", "has no weights"),
        ("bin_weights", r"found \['pytorch_model.bin'\]"),
        ("no_tokenizer", "has no tokenizer"),
        ("no_metrics", "metrics file all_results.json is missing"),
        ("no_record", "has no as2hub_run.json"),
        ("not_a_folder", "is not a folder"),
    ],
)
def test_bad_folders_are_refused_before_anything_is_sent(hub, ranker_copy, case, message):
    folder = ranker_copy
    if case in ("no_weights", "bin_weights"):
        (folder / "model.safetensors").rename(folder / ("pytorch_model.bin" if case == "bin_weights" else "x"))
    elif case == "no_tokenizer":
        (folder / "tokenizer_config.json").unlink()
    elif case == "no_metrics":
        (folder / "all_results.json").unlink()
    elif case == "no_record":
        (folder / RUN_RECORD).unlink()
    elif case == "not_a_folder":
        folder = folder / "nowhere"
    before = len(hub.requests)
    with pytest.raises(PublishError, match=message):
        push_run_folder(folder, "tester/ranker", token=hub.token, endpoint=hub.url)
    assert hub.requests[before:] == []


@pytest.mark.parametrize("repo_id", ["ranker", "tester/sub/ranker", "tester/", "tester/bad--name"])
def test_repo_ids_must_be_namespace_slash_name(hub, saved_ranker, repo_id, capsys):
    before = len(hub.requests)
    code = push_to_hub.main([str(saved_ranker), repo_id, "--token", hub.token, "--endpoint", hub.url])
    assert code == 2 and repo_id in capsys.readouterr().err
    assert hub.requests[before:] == []


def test_token_and_endpoint_problems_stop_before_any_upload(hub, saved_ranker, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("as2hub.hub_cards.push.get_token", lambda: None)
    before = len(hub.requests)
    with pytest.raises(PublishError, match="no Hub token"):
        push_run_folder(saved_ranker, "tester/ranker", endpoint=hub.url)
    with pytest.raises(PublishError, match="refused the token"):
        push_run_folder(saved_ranker, "tester/ranker", token="hf_wrong", endpoint=hub.url)
    assert _writes(hub, before) == []  # only whoami was asked
    with pytest.raises(PublishError, match="cannot reach the Hub at http://127.0.0.1:9"):
        push_run_folder(saved_ranker, "tester/ranker", token=hub.token, endpoint="http://127.0.0.1:9")
    assert push_to_hub.main([str(saved_ranker), "tester/ranker", "--endpoint", hub.url]) == 2
    assert "no Hub token" in capsys.readouterr().err
    assert "tester/ranker" not in hub.repos


def test_push_to_hub_flag_is_checked_before_training_and_turns_the_trainers_pushes_off(hub, monkeypatch, tmp_path):
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub.url)
    make = run_as2.AS2TrainingArguments
    args = make(output_dir=str(tmp_path / "a"), push_to_hub=True, hub_model_id="tester/ranker", hub_token=hub.token)
    push = HubPush.from_args(args, HubArguments(hub_push_adapter=True))
    assert push.repo_id == "tester/ranker" and push.hub_args.hub_push_adapter
    assert args.push_to_hub is False  # the Trainer must not upload its partial folders (every save, save_model)
    assert HubPush.from_args(make(output_dir=str(tmp_path / "b"))) is None
    with pytest.raises(PublishError, match="needs --hub_model_id"):
        HubPush.from_args(make(output_dir=str(tmp_path / "c"), push_to_hub=True, hub_token=hub.token))
    with pytest.raises(PublishError, match="hub_strategy checkpoint is not supported"):
        HubPush.from_args(make(output_dir=str(tmp_path / "d"), push_to_hub=True, hub_strategy="checkpoint"))
    out = tmp_path / "run"
    with pytest.raises(PublishError, match="refused the token"):  # before any data is read or anything written
        run_as2.main(["--output_dir", str(out), "--push_to_hub", "--hub_model_id", "tester/x", "--hub_token", "bad"])
    with pytest.raises(PublishError, match="namespace/name"):
        run_pretrain.main(["--output_dir", str(out), "--push_to_hub", "--hub_model_id", "x", "--hub_token", "t"])
    with pytest.raises(PublishError, match="refused the token"):
        run_joint.main(["--output_dir", str(out), "--push_to_hub", "--hub_model_id", "tester/x", "--hub_token", "bad"])
    with pytest.raises(PublishError, match="namespace/name"):
        run_qe_contrastive.main(["--output_dir", str(out), "--push_to_hub", "--hub_model_id", "x", "--hub_token", "t"])
    assert not out.exists() and "tester/x" not in hub.repos


def test_run_record_holds_no_token_and_the_reference_outputs(saved_ranker):
    record = json.loads((saved_ranker / RUN_RECORD).read_text())
    assert "hf_secret_never_written" not in (saved_ranker / RUN_RECORD).read_text()
    reference = record["components"]["model"]["reference"]
    assert reference["outputs"]["logits"]["shape"] == [3, 1]
    assert record["components"]["model"]["auto_class"] == "AutoModelForSequenceClassification"
    assert record["metrics_file"] == "all_results.json" and record["family"] == "contextual_as2"


def test_an_adapter_needs_its_files_and_a_base_model_on_the_hub(saved_ranker, tmp_path):
    record, _ = read_run(saved_ranker)
    folder = shutil.copytree(saved_ranker, tmp_path / "lora")
    (folder / "lora_adapter").mkdir()
    (folder / "lora_adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "x"}))
    adapter = {**record["components"]["model"], "path": "lora_adapter", "kind": "adapter"}
    lora = {**record, "components": {**record["components"], "adapter": adapter}}
    with pytest.raises(PublishError, match="no adapter_model.safetensors"):
        plan_upload(folder, lora, adapter=True)
    (folder / "lora_adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    with pytest.raises(PublishError, match="used the local folder .* pass the Hub id .* --base_model"):
        plan_upload(folder, lora, adapter=True)
    with pytest.raises(PublishError, match="trained its model from scratch; push the merged model"):
        plan_upload(folder, {**lora, "base_model": None}, adapter=True)
    files, components = plan_upload(folder, lora, adapter=True, base_model="google-bert/bert-base-uncased")
    assert set(files) == (MODEL_FILES - {"model.safetensors"}) | {"adapter_config.json", "adapter_model.safetensors"}
    assert components[0]["base_model"] == "google-bert/bert-base-uncased" and components[0]["kind"] == "adapter"


def test_a_family_can_give_its_reference_input_as_tensors(stock_checkpoint):
    stock = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(stock)
    model = BertForContextualAS2.from_pretrained(stock, sep_token_id=tokenizer.sep_token_id).train()
    by_text = reference_outputs(model, tokenizer)
    batch = dict(
        tokenizer(by_text["inputs"]["text"], by_text["inputs"]["text_pair"], padding=True, return_tensors="pt")
    )
    by_tensors = reference_outputs(model, tokenizer, batch=batch)
    assert set(by_tensors["inputs"]) == {"tensors"} and by_tensors["outputs"] == by_text["outputs"]
    assert model.training is True  # computed in eval mode, left in training mode as it was found


def test_as2hub_push_is_an_installed_command():
    from importlib.metadata import entry_points

    (script,) = [entry for entry in entry_points(group="console_scripts") if entry.name == "as2hub-push"]
    assert script.value == "as2hub.run_scripts.push_to_hub:cli"


def test_a_card_built_from_in_memory_run_objects_names_the_hub_base_and_the_metrics(stock_checkpoint):
    from as2hub.hub_cards import build_model_card
    from as2hub.hub_cards.run_record import make_run_record

    model = BertForContextualAS2.from_pretrained(stock_checkpoint("bert"))
    model_args = run_as2.ModelArguments(model_name_or_path="google-bert/bert-base-uncased")
    arguments = {"model": model_args, "data": run_as2.DataArguments(dataset="wikiqa")}
    record = make_run_record("contextual_as2", model, arguments, "all_results.json", {})
    card = ModelCard(str(build_model_card(record, RESULTS, "path/to/this/folder")))
    assert card.data.base_model == "google-bert/bert-base-uncased" and metric_values(card)[("test", "map")] == 0.7034


def test_an_onnx_export_is_uploaded_with_the_model_unless_it_is_stale(hub, ranker_copy, monkeypatch):
    from as2hub.modeling.folders import weights_sha256

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_DISABLE_XET", True)  # the fake speaks LFS, not Xet

    folder, onnx = ranker_copy, ranker_copy / "onnx"
    onnx.mkdir()
    (onnx / "model.onnx").write_bytes(b"fp32 graph")
    (onnx / "model_qint8_dynamic.onnx").write_bytes(b"int8 graph")
    (onnx / ".staging-x").mkdir()  # an interrupted export's leftovers are not uploaded
    graphs = {"fp32": {"file": "model.onnx"}, "int8": {"file": "model_qint8_dynamic.onnx"}}
    export = {"weights_sha256": weights_sha256(folder), "graphs": graphs}
    (onnx / "as2hub_export.json").write_text(json.dumps(export))
    record, _ = read_run(folder)
    exported = {"onnx/model.onnx", "onnx/model_qint8_dynamic.onnx", "onnx/as2hub_export.json"}
    files, _ = plan_upload(folder, record)
    assert set(files) == MODEL_FILES | exported
    commit = push_run_folder(folder, "tester/ranker-onnx", token=hub.token, endpoint=hub.url, validate=False)
    assert set(hub.head("tester/ranker-onnx").files) == MODEL_FILES | exported | {"README.md", ".gitattributes"}
    assert hub.head("tester/ranker-onnx").files["onnx/model.onnx"] == b"fp32 graph" and commit.oid
    (onnx / "model_qint8_dynamic.onnx").unlink()
    with pytest.raises(PublishError, match=r"lists graphs that are missing: \['model_qint8_dynamic.onnx'\]"):
        plan_upload(folder, record)
    (onnx / "as2hub_export.json").write_text(json.dumps({**export, "weights_sha256": "0" * 64}))
    with pytest.raises(PublishError, match="exported from other weights .* re-run `as2hub-export-onnx"):
        plan_upload(folder, record)
    (onnx / "as2hub_export.json").unlink()  # graphs without an export record are not the exporter's: left out
    assert set(plan_upload(folder, record)[0]) == MODEL_FILES

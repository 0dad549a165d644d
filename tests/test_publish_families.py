"""Publishing the joint (AS2, fact verification, MSPP pre-training) and Longformer families through the run records.

Each family is trained tiny by its run script, which writes ``as2hub_run.json`` and a card built by the family's
registry entry; then pushed to the local Hub (``hub_fake.FakeHub``), by ``--push_to_hub`` or ``push_run_folder``:
the fresh-process check (no as2hub) must load the folder with the family's Auto class and reproduce the reference
outputs of the collated batch saved by the run. A tampered weight file is refused.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import BLOCK_AS2HUB
from hub_fake import FakeHub
from huggingface_hub import HfApi, ModelCard
from safetensors.torch import load_file, save_file
from test_joint_runs import FV_ROWS, QUICK_PRETRAIN, K, fv_args, joint_args
from test_run_as2 import write_jsonl
from test_run_pretrain import write_document
from test_run_qe_contrastive import hotpot_records, write

from as2hub.hub_cards.push import push_run_folder
from as2hub.hub_cards.run_record import RUN_RECORD, PublishError, read_run
from as2hub.run_scripts import run_joint, run_pretrain, run_qe_contrastive

pytestmark = pytest.mark.slow

JOINT_CODE = {
    "configuration_joint_multicandidate.py",
    "modeling_joint_multicandidate.py",
    "pipeline_joint_multicandidate.py",
    "joint_layout.py",
    "pretraining_heads.py",
    "unpadding.py",
    "hub_common.py",
}
AS2_METRICS = {("test", "map"): "test_map", ("test", "mrr"): "test_mrr", ("test", "precision_at_1"): "test_p@1"}
QE_METRICS = {"exact_match": "em", "f1": "f1", "supporting_facts_exact_match": "sp_em",
              "supporting_facts_f1": "sp_f1", "joint_exact_match": "joint_em", "joint_f1": "joint_f1"}  # fmt: skip


# Every Python snippet of a card, run as written in a process where as2hub cannot be imported.
CARD_SNIPPETS = BLOCK_AS2HUB + textwrap.dedent(
    """
    import re
    import torch
    torch.set_num_threads(1)
    blocks = re.findall(r"```python\\n(.*?)```", open(sys.argv[1], encoding="utf-8").read(), re.S)
    for index, block in enumerate(blocks):
        exec(compile(block, f"card snippet {index}", "exec"), {})
    print("SNIPPETS", len(blocks))
    """
)


def run_card_snippets(readme) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, "-c", CARD_SNIPPETS, str(readme)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # No trust_remote_code prompt and no config read with the wrong class (issue 47: a card's tokenizer line stopped
    # at "Do you wish to run the custom code? [y/N]" in a terminal, after "... to instantiate a model of type ``").
    for noise in ("Do you wish to run the custom code", "to instantiate a model of type"):
        assert noise not in result.stdout + result.stderr, (result.stdout + result.stderr)[-4000:]
    return int(result.stdout.rsplit("SNIPPETS", 1)[1])


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as server, pytest.MonkeyPatch.context() as patch:
        patch.setattr("huggingface_hub.constants.HF_HUB_DISABLE_XET", True)
        patch.setattr("huggingface_hub.constants.ENDPOINT", server.url)  # HfApi() of the run scripts' --push_to_hub
        patch.setenv("HF_TOKEN", server.token)
        patch.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        yield server


def push_flags(hub, repo: str) -> list[str]:
    return ["--push_to_hub", "--hub_model_id", repo, "--hub_token", hub.token]


def model_index(card: ModelCard) -> dict:
    return {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results or []}


def check_record_and_card(out, family: str, auto_class: str, expected: dict) -> tuple[dict, ModelCard]:
    """The run record names the family and a tensor reference input; the card parses back with ``expected`` as its
    model-index (``{(split, metric type): value}``, read independently from the metrics file)."""
    record = json.loads((out / RUN_RECORD).read_text())
    assert record["family"] == family
    reference = record["components"]["model"]
    assert reference["auto_class"] == auto_class and set(reference["reference"]["inputs"]) == {"tensors"}
    card = ModelCard.load(out / "README.md")
    assert model_index(card) == expected and expected  # exactly the run's metrics, at least one
    text = card.text
    for section in ("## How to use", "## Training", "## Evaluation", "## Limitations", "## Citation"):
        assert section in text
    assert "http" not in card.content
    return record, card


def load_by_repo_id(hub, repo: str, record: dict, home) -> dict:
    """Load ``repo`` BY ID from the fake Hub in a fresh process (empty HF_HOME, as2hub blocked) with the record's Auto
    class, resolve its auto_map and custom pipelines, and compare the outputs on the record's reference input (the
    same check ``as2hub-push`` runs on the staged folder, here on what the Hub serves)."""
    from as2hub.hub_cards import fresh_load_check

    component = {**record["components"]["model"], "name": repo, "path": repo}
    home.mkdir(parents=True, exist_ok=True)
    spec = home / "spec.json"
    spec.write_text(json.dumps({"components": [component]}))
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf_home"), "HF_TOKEN": hub.token,
           "HF_HUB_DISABLE_XET": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    env.pop("HF_HUB_OFFLINE", None)
    result = subprocess.run(
        [sys.executable, fresh_load_check.__file__, str(spec)], capture_output=True, text=True, timeout=600, env=env
    )
    assert "REPORT" in result.stdout, result.stderr[-3000:]
    (report,) = json.loads(result.stdout.rsplit("REPORT", 1)[1])
    assert report["problems"] == [], report["problems"]
    assert (home / "hf_home").is_dir()  # downloaded into the empty cache, not read from the run folder
    return report


def test_joint_as2_run_pushes_with_its_collated_reference_batch(hub, stock_checkpoint, tmp_path):
    results = run_joint.main(
        joint_args(tmp_path, stock_checkpoint("bert"), "--head", "AE_k", *push_flags(hub, "tester/joint"))
    )
    out = tmp_path / "out"
    metrics = json.loads((out / "all_results.json").read_text())
    assert metrics["test"] == results["test"]
    expected = {key: metrics["test"][name] for key, name in AS2_METRICS.items()}
    expected |= {
        ("validation", t): metrics["dev"][name.replace("test_", "eval_")] for (_, t), name in AS2_METRICS.items()
    }
    record, card = check_record_and_card(out, "joint_multicandidate", "AutoModel", expected)
    tensors = record["components"]["model"]["reference"]["inputs"]["tensors"]
    assert torch.tensor(tensors["input_ids"]).shape == (2, (K + 1) * 16)  # (k+1)·L, the JointCollator layout
    logits = record["components"]["model"]["reference"]["outputs"]["logits"]
    assert logits["shape"] == [2, K]
    assert card.data.pipeline_tag == "text-ranking" and {"as2hub", "custom_code", "joint-as2"} <= set(card.data.tags)
    assert f'pipeline("joint-ranking", model="{out}"' in card.text
    assert run_card_snippets(out / "README.md") == 2  # the pipeline and AutoModel snippets run as written
    assert "Paragraph-based Transformer Pre-training for Multi-Sentence Inference" in card.text
    assert 'attending to its own slot and the question only (`first_token_attention="own_slot"`)' in card.text
    # Pushed once at the end (fresh-process check passed): the model, its code and pipeline, the card for the repo.
    commit = hub.head("tester/joint")
    assert JOINT_CODE | {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(commit.files)
    assert not {name for name in commit.files if name.startswith(("checkpoint-", "all_results", "test_pred"))}
    hub_card = ModelCard(commit.files["README.md"].decode())
    assert model_index(hub_card) == expected and 'model="tester/joint"' in hub_card.text
    report = load_by_repo_id(hub, "tester/joint", record, tmp_path / "fresh")
    assert report["max_abs_diff"] is not None and report["max_abs_diff"] < 1e-4

    # The push refuses a folder whose weights are not those of the trained model.
    tampered = shutil.copytree(out, tmp_path / "tampered", ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = load_file(tampered / "model.safetensors")
    name = next(key for key in weights if key.startswith("classifier.") and key.endswith("weight"))
    weights[name] = weights[name] + 0.5
    save_file(weights, tampered / "model.safetensors", metadata={"format": "pt"})
    before = len(hub.requests)
    with pytest.raises(PublishError, match=r"does not reproduce the trained model:\n- model: output 'logits' differs"):
        push_run_folder(tampered, "tester/tampered", token=hub.token, endpoint=hub.url)
    assert [r for r in hub.requests[before:] if r[0] != "GET"] == [] and "tester/tampered" not in hub.repos


def test_joint_fact_verification_run_pushes_with_label_accuracy(hub, stock_checkpoint, tmp_path):
    dev = write_jsonl(tmp_path / "fv_dev.jsonl", FV_ROWS)
    out = tmp_path / "out"
    run_joint.main([*fv_args(tmp_path, stock_checkpoint("roberta"), dev, out), "--use_lora", "--lora_r", "4"])
    metrics = json.loads((out / "all_results.json").read_text())
    expected = {("test", "accuracy"): metrics["test"]["test_accuracy"]}
    expected[("validation", "accuracy")] = metrics["dev"]["eval_accuracy"]
    record, card = check_record_and_card(out, "joint_fact_verification", "AutoModel", expected)
    assert card.data.pipeline_tag == "text-classification" and "fact-verification" in card.data.tags
    assert "`SUPPORTS`, `REFUTES`, `NOT ENOUGH INFO`" in card.text and "joint-classification" in card.text
    assert "trained fully: `classifier`, `token_type_embeddings`." in card.text  # from the run's PEFT config
    assert run_card_snippets(out / "README.md") == 1
    # A LoRA run keeps its adapter, checked on the same collated batch.
    adapter = record["components"]["adapter"]
    assert adapter["kind"] == "adapter" and (out / "lora_adapter" / "adapter_model.safetensors").exists()
    assert adapter["reference"]["inputs"] == record["components"]["model"]["reference"]["inputs"]
    assert record["components"]["model"]["reference"]["outputs"]["logits"]["shape"] == [2, 3]
    commit = push_run_folder(out, "tester/fv", token=hub.token, endpoint=hub.url)
    assert commit.oid == hub.head("tester/fv").sha
    assert "lora_adapter/adapter_model.safetensors" not in hub.head("tester/fv").files  # the merged model
    # The adapter, on its base model on the Hub: checked in a fresh process on the same batch before the upload.
    api = HfApi(endpoint=hub.url, token=hub.token)
    api.create_repo("tester/tiny-roberta", exist_ok=True)
    api.upload_folder(repo_id="tester/tiny-roberta", folder_path=str(stock_checkpoint("roberta")))
    push_run_folder(
        out, "tester/fv-lora", token=hub.token, endpoint=hub.url, adapter=True, base_model="tester/tiny-roberta"
    )
    files = set(hub.head("tester/fv-lora").files)
    assert {"adapter_model.safetensors", "adapter_config.json", "pipeline_joint_multicandidate.py"} <= files
    assert "model.safetensors" not in files


def test_mspp_pretraining_run_pushes_with_its_collated_reference_batch(hub, stock_checkpoint, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index in range(8):
        write_document(corpus / f"doc{index}.txt", paragraphs=3, sentences_per_paragraph=2 + index % 3)
    out = tmp_path / "pre"
    source = str(stock_checkpoint("roberta"))
    run_pretrain.main(["--objective", "mspp", "--joint_head", "IE_k", "--output_dir", str(out), "--model_type",
                       "roberta", "--model_name_or_path", source, "--corpus", str(corpus), "--documents_per_batch", "4",
                       *QUICK_PRETRAIN, *push_flags(hub, "tester/mspp")])  # fmt: skip
    metrics = json.loads((out / "pretrain_results.json").read_text())["eval"]
    expected = {("held_out", "roc_auc"): metrics["eval_cls_auc"]}
    expected[("held_out", "balanced_accuracy")] = metrics["eval_cls_balanced_accuracy"]
    record, card = check_record_and_card(out, "ssp_pretraining", "AutoModelForPreTraining", expected)
    outputs = record["components"]["model"]["reference"]["outputs"]
    assert outputs["cls_logits"]["shape"] == [2, K] and outputs["mlm_logits"]["shape"][:2] == [2, (K + 1) * 24]
    assert "mspp" in card.data.tags and "run_joint --model_name_or_path" in card.text
    assert "run_as2 --model_name_or_path" not in card.text  # a joint checkpoint is fine-tuned by run_joint
    assert "k = 3 slots from other documents" in card.text
    assert run_card_snippets(out / "README.md") == 1
    assert JOINT_CODE - {"pipeline_joint_multicandidate.py"} <= set(hub.head("tester/mspp").files)


def test_longformer_run_pushes_with_the_hotpotqa_collated_batch(hub, tmp_path):
    train = write(tmp_path / "train.jsonl", hotpot_records())
    out = tmp_path / "out"
    argv = ["--dataset", train, "--validation_file", train, "--test_file", train, "--output_dir", str(out),
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--tokenizer_vocab_size", "300",
            "--disable_tqdm", "True", *push_flags(hub, "tester/longformer")]  # fmt: skip
    results = run_qe_contrastive.main(argv)
    metrics = json.loads((out / "all_results.json").read_text())
    expected = {}
    for section, prefix, split in (("test", "test_", "test"), ("dev", "eval_", "validation")):
        expected |= {(split, kind): metrics[section][prefix + key] for kind, key in QE_METRICS.items()}
    assert metrics["test"]["test_sp_f1"] == results["test"]["test_sp_f1"]
    record, card = check_record_and_card(out, "longformer_qe", "AutoModelForQuestionAnswering", expected)
    tensors = record["components"]["model"]["reference"]["inputs"]["tensors"]
    assert {"input_ids", "attention_mask", "global_attention_mask", "sentence_index", "question_index"} <= set(tensors)
    assert not {"sentence_labels", "start_positions"} & set(tensors)  # inputs only
    global_mask = torch.tensor(tensors["global_attention_mask"])
    assert 0 < global_mask.sum() < torch.tensor(tensors["attention_mask"]).sum()
    assert card.data.pipeline_tag == "question-answering" and "qe-contrastive" in card.data.tags
    assert "λ = 0.2" in card.text and "AutoModelForQuestionAnswering.from_pretrained" in card.text
    assert "Long Context Question Answering via Supervised Contrastive Learning" in card.text
    assert run_card_snippets(out / "README.md") == 1
    files = set(hub.head("tester/longformer").files)
    assert {"configuration_longformer_qe.py", "modeling_longformer_qe.py", "model.safetensors"} <= files
    assert not {name for name in files if name.endswith(("_predictions.json", "_scores.jsonl"))}
    _, hub_metrics = read_run(out)
    assert hub_metrics == metrics
    report = load_by_repo_id(hub, "tester/longformer", record, tmp_path / "fresh")
    assert report["max_abs_diff"] is not None and report["max_abs_diff"] < 1e-4


@pytest.mark.parametrize("numel", [1, 7, 256, 257, 2**24 + 3, 2 * 384 * 30522])
def test_reference_summary_samples_stay_inside_large_outputs(numel):
    """The reference summary of a full-vocabulary output: a float32 linspace of positions rounded its last one past the
    end above 2**24 entries (the MLM logits of an MSPP pre-training of a BERT-vocabulary MiniLM crashed the save)."""
    from as2hub.hub_cards.fresh_load_check import SAMPLES, summarise_outputs

    values = torch.arange(numel, dtype=torch.float64)  # the summary casts to float32: exact below 2**24
    summary = summarise_outputs({"logits": values})["logits"]
    index = summary["index"]
    assert len(index) == min(SAMPLES, numel) == len(set(index))
    assert index[0] == 0 and index[-1] == numel - 1 and index == sorted(index)
    if numel <= 2**24:
        assert summary["values"] == [float(i) for i in index]

"""run_as2.py end to end on tiny models: outputs, LoRA, bad input, the main-job command and WikiQA."""

import json
import subprocess
import sys
import warnings

import pytest
from helpers import WIKIQA_DIR, needs_wikiqa, transformers_messages
from sklearn.metrics import average_precision_score
from transformers import AutoModelForSequenceClassification

from as2hub.data_collators import AS2DataError
from as2hub.inference.int8 import CALIBRATION_FILE, load_calibration
from as2hub.inference.ranking import Ranker
from as2hub.run_scripts import run_as2
from as2hub.serving.options import ScoreConfig, ServeConfig

QUESTIONS = [
    ("What does len return?", ["The number of items.", "A string.", "It raises.", "The length of a sequence."]),
    ("What is a tuple?", ["An immutable sequence.", "A loop.", "A mapping type.", "Nothing."]),
    ("How do you open a file?", ["With open().", "With close().", "You cannot.", "By importing os."]),
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def as2_rows(repeat=1):
    rows = []
    for copy in range(repeat):
        for q, (question, candidates) in enumerate(QUESTIONS):
            for position, candidate in enumerate(candidates):
                rows.append(
                    {
                        "question_id": f"q{copy}-{q}",
                        "question": question,
                        "candidate": candidate,
                        "label": int(position in (0, 3) if q == 0 else position == 0),
                        "document_id": f"d{copy}-{q}",
                        "position": position,
                    }
                )
    return rows


def tiny_args(tmp_path, model, *extra):
    train = write_jsonl(tmp_path / "train.jsonl", as2_rows(repeat=4))
    dev = write_jsonl(tmp_path / "dev.jsonl", as2_rows())
    return [
        "--model_name_or_path", str(model),
        "--dataset", train,
        "--validation_file", dev,
        "--test_file", dev,
        "--output_dir", str(tmp_path / "out"),
        "--max_steps", "4",
        "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-3",
        "--eval_strategy", "steps",
        "--eval_steps", "2",
        "--save_steps", "2",
        "--max_length", "48",
        *extra,
    ]  # fmt: skip


def test_fine_tune_writes_a_hub_ready_folder_and_ranked_predictions(stock_checkpoint, tmp_path):
    results = run_as2.main(tiny_args(tmp_path, stock_checkpoint("bert")))
    out = tmp_path / "out"
    assert results["test"]["test_num_questions"] == 3
    # The reported MAP is the mean average precision of the written rankings, by scikit-learn's implementation.
    written = [json.loads(line) for line in (out / "test_predictions.jsonl").read_text().splitlines()]
    ranked = [([c["label"] for c in line["ranking"]], [c["score"] for c in line["ranking"]]) for line in written]
    assert all(0 < sum(labels) < len(labels) for labels, _ in ranked)  # every question has both kinds
    expected = sum(average_precision_score(labels, scores) for labels, scores in ranked) / len(ranked)
    assert results["test"]["test_map"] == pytest.approx(expected, abs=1e-9)
    saved = json.loads((out / "all_results.json").read_text())
    assert saved["test"]["test_map"] == pytest.approx(results["test"]["test_map"])
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "contextual_bert" and config["type_vocab_size"] == 3
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSequenceClassification"}
    for name in ("model.safetensors", "modeling_contextual_as2.py", "tokenizer.json", "README.md"):
        assert (out / name).exists(), name
    assert not list(out.glob(".staging-*")) and not list(out.glob(".*.json.*"))
    lines = [json.loads(line) for line in (out / "test_predictions.jsonl").read_text().splitlines()]
    assert {line["question_id"] for line in lines} == {"q0-0", "q0-1", "q0-2"}
    for line in lines:
        scores = [c["score"] for c in line["ranking"]]
        assert scores == sorted(scores, reverse=True) and len(scores) == 4
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert model.config.contextual is True
    # the trained --max_length is saved in the config and is the default max length of ranking the folder
    assert config["as2hub_max_length"] == 48
    assert Ranker.from_pretrained(out).max_length == 48
    assert ServeConfig(model=str(out)).load_ranker().max_length == 48
    assert ScoreConfig(model=str(out)).load_ranker().max_length == 48
    assert Ranker.from_pretrained(out, max_length=32).max_length == 32  # a given one wins
    # the int8 calibration of the saved weights, from the training pairs: torch-int8 smooths its products with it
    calibration = load_calibration(out)
    depth = config["num_hidden_layers"]
    assert calibration is not None and len(calibration) == 4 * depth + 6 * depth * 2 + 1  # maxima, GPTQ weights, levels
    layer = Ranker.from_pretrained(out, backend="torch-int8").model.base_model.encoder.layer[0]
    assert layer.attention.self.packed_qkv.smoothed


def test_pairwise_lora_saves_the_adapter_and_a_merged_model(stock_checkpoint, tmp_path):
    with transformers_messages() as messages:
        run_as2.main(tiny_args(tmp_path, stock_checkpoint("roberta"), "--pairwise", "--use_lora", "--lora_r", "4",
                               "--int8_calibration_pairs", "0"))  # fmt: skip
    out = tmp_path / "out"
    assert not (out / CALIBRATION_FILE).exists()
    assert (out / "lora_adapter" / "adapter_config.json").exists()
    # PEFT's save (each checkpoint, then lora_adapter/) no longer reads the stock base with as2hub's config class
    # (issue 47: "You are using a model of type `roberta` to instantiate a model of type `contextual_roberta`")
    assert list(out.glob("checkpoint-*/adapter_model.safetensors"))  # saved by PEFT, and kept by default
    assert not [message for message in messages if "to instantiate a model of type" in message], messages
    config = json.loads((out / "config.json").read_text())
    assert config["contextual"] is False and config["type_vocab_size"] == 1  # RoBERTa's own design
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert not any("lora" in name for name, _ in model.named_parameters())


# What a finished run's folder holds with --remove_checkpoints (issue 47: the demo's 16 MB ranker held a 12 MB
# checkpoint-*): the model, config, tokenizer, remote code, card, run record and results.
RANKER_FILES = {
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "configuration_contextual_as2.py",
    "modeling_contextual_as2.py",
    "hub_common.py",
    "README.md",
    "int8_calibration.safetensors",  # --int8_calibration_pairs (512 by default)
    "as2hub_run.json",
    "all_results.json",
    "test_predictions.jsonl",
}


def test_remove_checkpoints_leaves_only_the_ranker(stock_checkpoint, tmp_path):
    run_as2.main(tiny_args(tmp_path, stock_checkpoint("roberta"), "--remove_checkpoints"))
    out = tmp_path / "out"
    assert {path.name for path in out.iterdir()} == RANKER_FILES
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert model.config.contextual is True


def test_cascade_heads_only_trains_without_torch_warnings(stock_checkpoint, tmp_path):
    """training/cascade_heads.py summed the loss with float() on a tensor that requires grad: torch warned
    "Converting a tensor with requires_grad=True to a scalar" at every step (issue 47)."""
    args = tiny_args(tmp_path, stock_checkpoint("bert"), "--cascade_layers", "1", "--cascade_heads_only")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run_as2.main(args)
    assert results["train"]["epochs"] == 3  # the cheap step ran (tiny_args: 4 steps of 8 rows over 48)
    assert not [w for w in caught if "requires_grad" in str(w.message)], [str(w.message) for w in caught]


def test_bad_input_names_the_file_and_row_and_writes_nothing(stock_checkpoint, tmp_path):
    args = tiny_args(tmp_path, stock_checkpoint("bert"))
    rows = as2_rows()
    rows[5]["label"] = 2
    bad = write_jsonl(tmp_path / "bad_dev.jsonl", rows)
    args[args.index("--validation_file") + 1] = bad
    with pytest.raises(AS2DataError, match=r"bad_dev\.jsonl.*line 6.*label"):
        run_as2.main(args)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_main_job_command_runs_on_the_embedded_default(tmp_path):
    """`make demo` runs this module: pre-train, fine-tune, rank, and end with a table of what was measured."""
    command = [sys.executable, "-m", "as2hub.run_scripts.demo", "--output_dir", str(tmp_path / "demo"),
               "--pretrain_steps", "4", "--finetune_epochs", "0.05", "--eval_passes", "1"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "demo" / "demo_summary.json").read_text())
    assert summary["ranker_test"]["test_num_questions"] == summary["test_questions"] > 20
    assert set(summary["ranking"]) == {"random (expected)", "BM25 (word overlap)", "as2hub ranker"}
    assert summary["ranking"]["as2hub ranker"]["map"] == pytest.approx(summary["ranker_test"]["test_map"])
    assert summary["pretrain_before"]["before_cls_auc"] and summary["pretrain_eval"]["eval_cls_auc"]
    # One sampling pass over the default's held-out documents: 300 examples (10 passes, the default: 3,000).
    assert summary["pretrain_eval"]["eval_cls_items"] == summary["pretrain_before"]["before_cls_items"] == 300
    assert len(summary["examples"]) == 3
    for example in summary["examples"]:
        scores = [item["score"] for item in example["ranking"]]
        assert scores == sorted(scores, reverse=True) and any(item["correct"] for item in example["ranking"])
    table = result.stdout[result.stdout.index("as2hub demo: what was measured") :]
    for line in ("sentence task AUC", "BM25 (word overlap)", "as2hub ranker", "Q: "):
        assert line in table
    # Expected load messages are summarised, not dumped; no pin_memory warning on a CPU.
    for noise in ("LOAD REPORT", "to instantiate a model of type", "pin_memory"):
        assert noise not in result.stderr, noise
    # The ranker folder holds the ranker: no checkpoint-* with the optimizer's state (issue 47).
    assert {path.name for path in (tmp_path / "demo" / "ranker").iterdir()} == RANKER_FILES


@pytest.mark.slow
@pytest.mark.wikiqa
@needs_wikiqa()
def test_run_as2_on_wikiqa_clean_test(stock_checkpoint, tmp_path):
    args = [
        "--model_name_or_path", str(stock_checkpoint("bert")),
        "--dataset", "wikiqa",
        "--output_dir", str(tmp_path / "wikiqa"),
        "--max_steps", "2",
        "--max_train_samples", "200",
        "--per_device_eval_batch_size", "64",
        "--max_length", "64",
    ]  # fmt: skip
    results = run_as2.main(args)
    assert WIKIQA_DIR.is_dir()
    assert results["test"]["test_num_questions"] == 237  # the clean test set
    assert results["dev"]["eval_num_questions"] == 122


@pytest.mark.parametrize("backbone", ["roberta", "bert"])
def test_config_name_from_scratch_builds_three_segments(stock_checkpoint, tmp_path, backbone):
    """--config_name with a stock config (1 or 2 token-type rows) trains a model with three segments."""
    args = tiny_args(tmp_path, stock_checkpoint(backbone))
    args[args.index("--model_name_or_path")] = "--config_name"
    run_as2.main(args)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["type_vocab_size"] == 3 and config["contextual"] is True
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out", trust_remote_code=True)
    assert model.base_model.embeddings.token_type_embeddings.num_embeddings == 3


@pytest.mark.parametrize("contextual", [True, False])
def test_tiny_default_has_the_table_of_its_mode(contextual):
    model, tokenizer = run_as2.tiny_default(contextual)
    rows = model.base_model.embeddings.token_type_embeddings.num_embeddings
    assert rows == model.config.type_vocab_size == (3 if contextual else 1)  # pairwise RoBERTa: no segment ids
    collator = run_as2.ContextualAS2Collator(
        tokenizer, max_length=64, contextual=contextual, num_token_types=model.config.type_vocab_size
    )
    batch = collator([{"question": "What is x?", "candidate": "x is a name.", "context": "Names are bound."}])
    assert batch["token_type_ids"].max().item() == rows - 1


def test_warmup_defaults_to_the_papers_1000_steps_or_a_tenth_of_a_short_run(tmp_path):
    args = run_as2.AS2TrainingArguments(output_dir=str(tmp_path))
    assert args.get_warmup_steps(50_000) == 1000 and args.get_warmup_steps(300) == 30
    assert args.lr_scheduler_type == "linear"  # warmup then linear decay: the papers' triangular schedule
    assert run_as2.AS2TrainingArguments(output_dir=str(tmp_path), warmup_steps=5).get_warmup_steps(300) == 5
    assert run_as2.AS2TrainingArguments(output_dir=str(tmp_path), warmup_steps=0.5).get_warmup_steps(300) == 150
    assert args.dataloader_pin_memory is False  # no accelerator here: nothing to pin for


def test_data_without_context_trains_the_pairwise_model_and_says_so(stock_checkpoint, tmp_path, caplog):
    rows = [{k: v for k, v in row.items() if k not in ("document_id", "position")} for row in as2_rows(repeat=2)]
    args = tiny_args(tmp_path, stock_checkpoint("bert"))
    for flag in ("--dataset", "--validation_file", "--test_file"):
        args[args.index(flag) + 1] = write_jsonl(tmp_path / f"{flag[2:]}.jsonl", rows)
    with caplog.at_level("WARNING"):
        run_as2.main(args)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["contextual"] is False
    assert any("has no context" in record.message and "pairwise" in record.message for record in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING"):
        run_as2.main([*args, "--contextual", "true", "--output_dir", str(tmp_path / "forced")])
    assert json.loads((tmp_path / "forced" / "config.json").read_text())["contextual"] is True
    assert any("trained on empty contexts" in record.message for record in caplog.records)

"""run_as2.py end to end on tiny models: outputs, LoRA, bad input, the main-job command and WikiQA."""

import json
import subprocess
import sys

import pytest
from helpers import WIKIQA_DIR, needs_wikiqa
from transformers import AutoModelForSequenceClassification

from as2hub.data_collators import AS2DataError
from as2hub.run_scripts import run_as2

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
    assert 0.0 < results["test"]["test_map"] <= 1.0
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


def test_pairwise_lora_saves_the_adapter_and_a_merged_model(stock_checkpoint, tmp_path):
    run_as2.main(tiny_args(tmp_path, stock_checkpoint("roberta"), "--pairwise", "--use_lora", "--lora_r", "4"))
    out = tmp_path / "out"
    assert (out / "lora_adapter" / "adapter_config.json").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["contextual"] is False and config["type_vocab_size"] == 1  # RoBERTa's own design
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert not any("lora" in name for name, _ in model.named_parameters())


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
    """`make demo` runs this module: pre-train, fine-tune, rank (here with a handful of steps)."""
    command = [sys.executable, "-m", "as2hub.run_scripts.demo", "--output_dir", str(tmp_path / "demo"),
               "--pretrain_steps", "4", "--finetune_epochs", "0.05"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout[result.stdout.index("\n{\n") :])  # Trainer prints its logs before
    assert summary["ranker_test"]["test_num_questions"] > 20
    assert summary["pipeline_example"]["label"] == "correct"
    ranked = summary["ranking_example"]["ranking"]
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
    assert (tmp_path / "demo" / "ranker" / "config.json").exists()


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

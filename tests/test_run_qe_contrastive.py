"""run_qe_contrastive.py end to end on small HotpotQA-format files written here: the loss falls, the folder is
Hub-ready, predictions are in the official format; bad input stops before anything is written."""

import json
import random

import pytest
import torch
from helpers import needs_wikiqa
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, HfArgumentParser

from as2hub.data_collators import HotpotQAError
from as2hub.data_collators.readers.qe_tasks import load_qe_splits
from as2hub.run_scripts import run_qe_contrastive

PEOPLE = ["Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo"]
CITIES = ["Oslo", "Lima", "Kyoto", "Cairo", "Quito", "Porto", "Dakar", "Perth"]
HOBBIES = ["chess", "sailing", "painting", "running", "poetry", "cooking", "music", "rowing"]


def hotpot_records(seed: int = 0) -> list[dict]:
    """Two-hop questions over person and city paragraphs, with yes / no questions and distractors."""
    rng = random.Random(seed)
    records = []
    for i, (person, city, hobby) in enumerate(zip(PEOPLE, CITIES, HOBBIES)):
        other = PEOPLE[(i + 3) % len(PEOPLE)]
        context = [
            [person, [f"{person} was born in {city}.", f"{person} enjoys {hobby}."]],
            [city, [f"{city} is a city by the sea.", f"{city} has an old harbour."]],
            [other, [f"{other} was born in {CITIES[(i + 3) % 8]}.", f"{other} enjoys {HOBBIES[(i + 3) % 8]}."]],
        ]
        rng.shuffle(context)
        if i % 4 == 3:
            question, answer = f"Does {person} enjoy {hobby}?", "yes"
            facts = [[person, 1]]
        else:
            question, answer = f"Which city by the sea was {person} born in?", city
            facts = [[person, 0], [city, 0]]
        records.append(
            {
                "_id": f"ex{i}",
                "question": question,
                "answer": answer,
                "type": "bridge",
                "level": "easy",
                "supporting_facts": facts,
                "context": context,
            }
        )
    return records


def write(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(path)


@pytest.mark.slow
def test_tiny_model_trains_on_a_hotpotqa_file_and_saves_a_hub_folder(tmp_path):
    train = write(tmp_path / "train.jsonl", hotpot_records())
    out = tmp_path / "out"
    argv = [
        "--dataset", train, "--validation_file", train, "--test_file", train,
        "--output_dir", str(out), "--max_steps", "48", "--learning_rate", "2e-3", "--warmup_steps", "4",
        "--per_device_train_batch_size", "4", "--logging_steps", "1", "--eval_strategy", "steps",
        "--eval_steps", "24", "--save_steps", "24", "--tokenizer_vocab_size", "300", "--seed", "3",
        "--disable_tqdm", "True", "--qe_temperatures", "0.2,0.4,0.6",
    ]  # fmt: skip
    results = run_qe_contrastive.main(argv)

    state = json.loads((out / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 48
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < 0.7 * first, (first, last)
    qe = [entry["eval_qe_map"] for entry in state["log_history"] if "eval_qe_map" in entry]
    assert len(qe) == 3  # two evaluations while training, then the best model's
    # The model has learnt its training questions: decoded answer spans and supporting facts mostly right.
    assert results["dev"]["eval_f1"] >= 0.5 and results["dev"]["eval_sp_f1"] >= 0.5
    answers = json.loads((out / "dev_predictions.json").read_text())["answer"]
    assert sum(answers[f"ex{i}"] == CITIES[i] for i in range(8) if i % 4 != 3) >= 3

    for split, prefix in (("dev", "eval_"), ("test", "test_")):
        assert {"sp_f1", "f1", "joint_f1", "qe_map", "qe_map_span", "qe_raw_cosine_map"} <= {
            k.removeprefix(prefix) for k in results[split]
        }
        prediction = json.loads((out / f"{split}_predictions.json").read_text())
        assert set(prediction) == {"answer", "sp"}
        assert set(prediction["answer"]) == set(prediction["sp"]) == {f"ex{i}" for i in range(8)}
        for facts in prediction["sp"].values():
            assert all(isinstance(t, str) and isinstance(k, int) for t, k in facts)
        scores = [json.loads(line) for line in (out / f"{split}_sentence_scores.jsonl").read_text().splitlines()]
        assert [row["id"] for row in scores] == [f"ex{i}" for i in range(8)]
        assert all(len(row["labels"]) == len(row["qe_similarity"]) == len(row["sentences"]) == 6 for row in scores)
    assert results["encoding"]["train"]["examples"] == 8

    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "longformer_qe" and "AutoModelForQuestionAnswering" in config["auto_map"]
    assert config["qe_temperatures"] == [0.2, 0.4, 0.6] and config["question_types"] == ["span", "yes", "no"]
    card = (out / "README.md").read_text()
    assert "LongformerWithQEContrastive" in card and "λ = 0.2" in card
    assert f"| test | Supporting-fact F1 | {results['test']['test_sp_f1']:.4f} |" in card  # the run's own metrics
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert set(config["marker_token_ids"].values()) <= set(tokenizer.get_added_vocab().values())
    model = AutoModelForQuestionAnswering.from_pretrained(out).eval()
    text = "[q] Which city by the sea was Ada born in? [/q] <doc-s> <t> Ada </t> <sent> Ada was born in Oslo. </sent> </doc-s>"
    with torch.no_grad():
        assert model(**tokenizer(text, return_tensors="pt")).sentence_logits.shape == (1, 1)


@pytest.mark.slow
def test_baseline_from_a_short_encoder_with_lora_and_skipped_examples(tmp_path, stock_checkpoint):
    records = hotpot_records()
    records[1]["answer"] = "Atlantis"  # not in the context: skipped and counted with the flag
    train = write(tmp_path / "train.jsonl", records)
    out = tmp_path / "out"
    argv = [
        "--model_name_or_path", str(stock_checkpoint("bert")), "--max_position_embeddings", "256",
        "--attention_window", "32", "--dataset", train, "--output_dir", str(out), "--max_steps", "2",
        "--contrastive_weight", "0", "--skip_invalid_examples", "--use_lora", "--disable_tqdm", "True",
    ]  # fmt: skip
    results = run_qe_contrastive.main(argv)
    assert results["data"]["train"]["skipped"] == {"answer_not_found": 1}
    assert results["encoding"]["train"]["examples"] == 7
    config = json.loads((out / "config.json").read_text())
    assert config["contrastive_weight"] == 0.0 and config["max_position_embeddings"] == 256 + 1
    adapter = json.loads((out / "lora_adapter" / "adapter_config.json").read_text())
    assert {"qa_outputs", "sentence_head", "qe", "word_embeddings"} <= set(adapter["modules_to_save"])
    assert "lora" not in " ".join(AutoModelForQuestionAnswering.from_pretrained(out).state_dict())


def test_bad_input_stops_before_anything_is_written(tmp_path):
    records = hotpot_records()
    records[5]["supporting_facts"] = [["Nowhere", 0]]
    out = tmp_path / "out"
    with pytest.raises(HotpotQAError, match=r"train.jsonl: line 6, example id 'ex5'.*names a title not in"):
        run_qe_contrastive.main(["--dataset", write(tmp_path / "train.jsonl", records), "--output_dir", str(out)])
    assert not out.exists()
    # Evidence that the model's length would cut away stops the run too, naming the example.
    argv = ["--dataset", write(tmp_path / "ok.jsonl", hotpot_records()), "--output_dir", str(out)]
    with pytest.raises(HotpotQAError, match=r"example 'ex0': max_length=24 .* would be truncated away"):
        run_qe_contrastive.main(argv + ["--max_length", "24", "--tokenizer_vocab_size", "300"])
    with pytest.raises(HotpotQAError, match=r"every example was skipped \(\{'truncated_evidence': 8\}\)"):
        run_qe_contrastive.main(argv + ["--max_length", "24", "--truncated_evidence", "skip"])
    assert not out.exists()


def test_defaults_follow_the_paper_and_the_house_style():
    parser = HfArgumentParser(
        (run_qe_contrastive.ModelArguments, run_qe_contrastive.DataArguments, run_qe_contrastive.QETrainingArguments)
    )
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=[])
    assert training_args.learning_rate == 1e-4 and training_args.max_grad_norm == 1.0
    assert training_args.metric_for_best_model == "sp_f1" and training_args.greater_is_better
    assert data_args.dataset == "embedded" and data_args.early_stopping_patience == 3
    assert run_qe_contrastive.qe_overrides(model_args) == {}  # a checkpoint's own settings are kept
    flags = ["--qe_temperatures", "0.2,0.4,0.6", "--contrastive_weight", "0", "--qe_wrong_type_negatives", "False"]
    model_args = parser.parse_args_into_dataclasses(args=flags)[0]
    assert run_qe_contrastive.qe_overrides(model_args) == {
        "qe_temperatures": [0.2, 0.4, 0.6],
        "contrastive_weight": 0.0,
        "qe_wrong_type_negatives": False,
    }


def test_embedded_evidence_task_records():
    splits = load_qe_splits(run_qe_contrastive.DataArguments())
    assert sorted(splits) == ["test", "train", "validation"]
    data = splits["validation"]
    rows = data.dataset.to_list()
    assert len(rows) == 74 and data.stats["num_distractors"] == 2
    for row in rows:
        assert row["answer_type"] == "none" and len(row["context"]["title"]) == 3
        assert row["supporting_facts"]["title"]  # every question has evidence (clean setting)
        own = row["context"]["title"].index(row["supporting_facts"]["title"][0])
        assert len(row["context"]["sentences"][own]) <= 20


@needs_wikiqa()
def test_wikiqa_distractor_is_a_dataset_choice():
    from as2hub.data_collators.readers.qe_tasks import default_question_types

    args = run_qe_contrastive.DataArguments(dataset="wikiqa_distractor", num_distractors=2, max_train_samples=5)
    splits = load_qe_splits(args)
    assert len(splits["train"]) == 5 and len(splits["validation"]) == 122 and len(splits["test"]) == 237
    assert default_question_types("wikiqa_distractor")[1] == "type"

"""run_joint.py and run_pretrain.py --objective mspp end to end on tiny models: outputs, cascade, FV, bad input."""

import json

import pytest
from helpers import needs_wikiqa
from sklearn.metrics import average_precision_score
from test_run_as2 import as2_rows, write_jsonl
from test_run_pretrain import write_document
from transformers import AutoTokenizer, pipeline

from as2hub.data_collators import AS2DataError, FactVerificationDataError
from as2hub.modeling import CONTEXTUAL_MODELS
from as2hub.run_scripts import run_joint, run_pretrain

K, L = 3, 16


def joint_args(tmp_path, model, *extra, train_rows=None, dev_rows=None):
    train = write_jsonl(tmp_path / "train.jsonl", train_rows or as2_rows(repeat=4))
    dev = write_jsonl(tmp_path / "dev.jsonl", dev_rows or as2_rows())
    return [
        "--model_name_or_path", str(model),
        "--dataset", train,
        "--validation_file", dev,
        "--test_file", dev,
        "--output_dir", str(tmp_path / "out"),
        "--num_candidates", str(K),
        "--slot_length", str(L),
        "--max_steps", "4",
        "--per_device_train_batch_size", "4",
        "--learning_rate", "1e-3",
        "--eval_strategy", "steps",
        "--eval_steps", "2",
        "--save_steps", "2",
        *extra,
    ]  # fmt: skip


def predictions(out):
    return [json.loads(line) for line in (out / "test_predictions.jsonl").read_text().splitlines()]


def test_as2_fine_tuning_writes_a_hub_folder_and_ranked_predictions(stock_checkpoint, tmp_path):
    results = run_joint.main(joint_args(tmp_path, stock_checkpoint("bert"), "--head", "IE_k"))
    out = tmp_path / "out"
    assert results["test"]["test_num_questions"] == 3
    # The reported MAP is the mean average precision of the written rankings, by scikit-learn's implementation.
    lines = predictions(out)
    ranked = [([c["label"] for c in line["ranking"]], [c["score"] for c in line["ranking"]]) for line in lines]
    assert all(0 < sum(labels) < len(labels) for labels, _ in ranked)  # every question has both kinds
    expected = sum(average_precision_score(labels, scores) for labels, scores in ranked) / len(ranked)
    assert results["test"]["test_map"] == pytest.approx(expected, abs=1e-9)
    assert results["dev"]["eval_map"] == pytest.approx(results["test"]["test_map"])  # dev and test are one file
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "joint_bert" and config["head"] == "IE_k" and config["num_candidates"] == K
    assert config["first_token_attention"] == "own_slot"  # the run scripts' default
    assert "joint-ranking" in config["custom_pipelines"]
    for name in ("model.safetensors", "pipeline_joint_multicandidate.py", "tokenizer.json", "README.md"):
        assert (out / name).exists(), name
    assert "joint-ranking" in (out / "README.md").read_text()
    assert json.loads((out / "all_results.json").read_text())["test"]["test_map"] == results["test"]["test_map"]
    lines = predictions(out)
    assert {line["question_id"] for line in lines} == {"q0-0", "q0-1", "q0-2"}
    for line in lines:  # 4 candidates: one group of 3 and one with 2 empty slots, every candidate scored
        scores = [c["score"] for c in line["ranking"]]
        assert len(scores) == 4 and scores == sorted(scores, reverse=True)
    # The saved folder ranks through its own pipeline with the same scores (candidates in file order, k at a time).
    first = [row for row in as2_rows() if row["question_id"] == "q0-0"]
    pipe = pipeline("joint-ranking", model=str(out), trust_remote_code=True)
    ranked = pipe({"question": first[0]["question"], "candidates": [row["candidate"] for row in first]})
    written = next(line for line in lines if line["question_id"] == "q0-0")["ranking"]
    assert [r["candidate"] for r in ranked] == [c["candidate"] for c in written]
    assert [r["score"] for r in ranked] == pytest.approx([c["score"] for c in written], abs=1e-5)


def test_cascade_reranks_the_pairwise_top_k_from_a_score_column(stock_checkpoint, tmp_path):
    rows = as2_rows(repeat=4)
    for index, row in enumerate(rows):
        row["pairwise"] = (index * 7 % 11) / 11  # any fixed pairwise order
    dev = as2_rows()
    for index, row in enumerate(dev):
        row["pairwise"] = (index * 5 % 7) / 7
    args = joint_args(tmp_path, stock_checkpoint("roberta"), "--grouping", "top_k", "--score_column", "pairwise",
                      train_rows=rows, dev_rows=dev)  # fmt: skip
    results = run_joint.main(args)
    assert results["test"]["test_num_questions"] == 3
    by_question = {}
    for row in dev:
        by_question.setdefault(row["question_id"], []).append(row)
    for line in predictions(tmp_path / "out"):
        ranking = line["ranking"]
        pairwise = sorted(by_question[line["question_id"]], key=lambda row: -row["pairwise"])
        assert [c["stage"] for c in ranking] == ["joint"] * K + ["pairwise"] * (len(pairwise) - K)
        assert {c["candidate"] for c in ranking[:K]} == {row["candidate"] for row in pairwise[:K]}
        joint_scores = [c["score"] for c in ranking[:K]]
        assert joint_scores == sorted(joint_scores, reverse=True)
        assert [c["candidate"] for c in ranking[K:]] == [row["candidate"] for row in pairwise[K:]]
        assert [c["score"] for c in ranking[K:]] == [row["pairwise"] for row in pairwise[K:]]


def test_cascade_with_a_pairwise_model_folder(stock_checkpoint, tmp_path):
    folder = stock_checkpoint("bert")
    pairwise = CONTEXTUAL_MODELS["bert"][1].from_pretrained(folder, contextual=False)
    pairwise.save_pretrained(tmp_path / "pairwise")
    AutoTokenizer.from_pretrained(folder).save_pretrained(tmp_path / "pairwise")
    results = run_joint.main(
        joint_args(
            tmp_path,
            folder,
            "--grouping",
            "top_k",
            "--pairwise_model",
            str(tmp_path / "pairwise"),
            "--use_lora",
            "--lora_r",
            "4",
        )  # fmt: skip
    )
    assert results["test"]["test_num_questions"] == 3
    assert (tmp_path / "out" / "lora_adapter" / "adapter_config.json").exists()
    assert all(line["ranking"][0]["stage"] == "joint" for line in predictions(tmp_path / "out"))


def test_bad_input_is_named_before_anything_is_written(stock_checkpoint, tmp_path, capsys):
    model = stock_checkpoint("bert")
    with pytest.raises(AS2DataError, match=r"train\.jsonl: --grouping top_k needs pairwise scores"):
        run_joint.main(joint_args(tmp_path, model, "--grouping", "top_k"))
    rows = as2_rows()
    for row in rows:
        row["pairwise"] = 0.5
    rows[5]["pairwise"] = "n/a"
    with pytest.raises(AS2DataError, match=r"dev\.jsonl: line 6 \(data row 6\), column 'pairwise': expected a number"):
        run_joint.main(joint_args(tmp_path, model, "--grouping", "top_k", "--score_column", "pairwise",
                                  train_rows=[{**r, "pairwise": 0.1} for r in as2_rows(4)], dev_rows=rows))  # fmt: skip
    with pytest.raises(ValueError, match=r"num_candidates \(k\) must be >= 1"):
        run_joint.main(joint_args(tmp_path, model, "--num_candidates", "0"))
    with pytest.raises(ValueError, match="slot_length=2 is shorter than the special tokens"):
        run_joint.main(joint_args(tmp_path, model, "--slot_length", "2"))
    with pytest.raises(ValueError, match="use --head IE_k or AE_k"):
        run_joint.main(joint_args(tmp_path, model, "--head", "IE_1"))
    with pytest.raises(SystemExit):  # argparse names the flag and the choices
        run_joint.main(joint_args(tmp_path, model, "--first_token_attention", "local"))
    assert "--first_token_attention" in (err := capsys.readouterr().err) and "invalid choice: 'local'" in err
    assert not (tmp_path / "out").exists()


FV_ROWS = [
    {"claim": "Lists are mutable.", "evidences": ["A list can be changed in place.", "Tuples are immutable."],
     "label": "SUPPORTS"},
    {"claim": "Tuples are mutable.", "evidences": ["Tuples are immutable.", "Lists are mutable.", "x", "y"],
     "label": "REFUTES"},
    {"claim": "Python was released in 1991.", "evidences": ["Guido wrote Python."], "label": "NOT ENOUGH INFO"},
]  # fmt: skip


def fv_args(tmp_path, model, dev, out):
    train = write_jsonl(tmp_path / "fv_train.jsonl", FV_ROWS * 4)
    return ["--task", "fv", "--head", "IE_1", "--model_name_or_path", str(model), "--dataset", train,
            "--validation_file", dev, "--test_file", dev, "--output_dir", str(out), "--num_candidates", str(K),
            "--slot_length", str(L), "--max_steps", "3", "--learning_rate", "1e-3",
            "--per_device_train_batch_size", "4"]  # fmt: skip


def test_fact_verification_on_a_tiny_file(stock_checkpoint, tmp_path):
    dev = write_jsonl(tmp_path / "fv_dev.jsonl", FV_ROWS)
    results = run_joint.main(fv_args(tmp_path, stock_checkpoint("roberta"), dev, tmp_path / "out"))
    assert 0 <= results["test"]["test_accuracy"] <= 1 and results["test"]["test_num_claims"] == 3
    out = tmp_path / "out"
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "SUPPORTS", "1": "REFUTES", "2": "NOT ENOUGH INFO"}
    assert config["head"] == "IE_1" and "joint-classification" in config["custom_pipelines"]
    lines = predictions(out)
    assert [line["label"] for line in lines] == ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]
    accuracy = sum(line["label"] == line["predicted"] for line in lines) / 3
    assert accuracy == pytest.approx(results["test"]["test_accuracy"])
    pipe = pipeline(model=str(out), trust_remote_code=True)
    assert {r["label"] for r in pipe({"claim": "Lists are mutable.", "evidences": ["Lists change."]})} == set(
        config["id2label"].values()
    )
    for bad, message in (
        ({**FV_ROWS[0], "evidences": "A list can be changed."}, "key 'evidences': expected a list of strings"),
        ({**FV_ROWS[0], "label": "TRUE"}, "key 'label': unknown label 'TRUE'"),
    ):
        bad_dev = write_jsonl(tmp_path / "bad.jsonl", [FV_ROWS[1], bad])
        out_bad = tmp_path / "bad_out"
        with pytest.raises(FactVerificationDataError, match=r"bad\.jsonl: line 2 \(data row 2\), " + message):
            run_joint.main(fv_args(tmp_path, stock_checkpoint("roberta"), bad_dev, out_bad))
        assert not out_bad.exists()


QUICK_PRETRAIN = ["--max_steps", "3", "--eval_steps", "3", "--save_steps", "3", "--per_device_train_batch_size", "4",
                  "--tokenizer_vocab_size", "800", "--eval_passes", "1", "--max_eval_samples", "32",
                  "--logging_steps", "1", "--num_candidates", str(K), "--slot_length", "24"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode", [("roberta", "IE_k", "--streaming"), ("bert", "AE_k", "--materialize")], ids=["streaming", "materialized"]
)
def test_mspp_pretraining_logs_per_slot_metrics_and_feeds_run_joint(stock_checkpoint, tmp_path, mode):
    backbone, head, generation = mode
    out = tmp_path / "pre"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index in range(10):  # small documents: paragraphs of 2-4 sentences
        write_document(corpus / f"doc{index}.txt", paragraphs=3, sentences_per_paragraph=2 + index % 3)
    extra = ["--model_type", backbone, "--model_name_or_path", str(stock_checkpoint(backbone)), "--corpus", str(corpus),
             "--documents_per_batch", "4"]  # fmt: skip
    # The paper's full attention asked for in one mode, the run scripts' default (own_slot) in the other.
    attention = ["--first_token_attention", "all"] if generation == "--streaming" else []
    results = run_pretrain.main(["--objective", "mspp", "--joint_head", head, "--output_dir", str(out), generation,
                                 "--cls_weight", "0.5", *attention, *QUICK_PRETRAIN, *extra])  # fmt: skip
    held_out = results["eval"]
    # Per-slot MSPP metrics: 1 positive + 2 hard negatives per example with k = 3 (single-document groups aside).
    for name in ("eval_mlm_loss", "eval_cls_loss", "eval_cls_accuracy", "eval_cls_auc", "eval_cls_majority_rate"):
        assert name in held_out, name
    assert 0.6 <= held_out["eval_cls_majority_rate"] <= 0.8
    history = json.loads(sorted(out.glob("checkpoint-*/trainer_state.json"))[-1].read_text())["log_history"]
    assert {"mlm_loss", "cls_loss", "cls_accuracy"} <= set(next(log for log in history if "loss" in log))
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == f"joint_{backbone}" and config["head"] == head
    assert config["type_vocab_size"] == K + 1 and config["architectures"][0].endswith("ForJointPretraining")
    assert config["mspp_weight"] == 0.5 and config["mlm_weight"] == 1.0
    expected = "all" if attention else "own_slot"
    assert config["first_token_attention"] == expected
    finetuned = run_joint.main(joint_args(tmp_path, out, "--head", head, "--max_steps", "2"))
    assert finetuned["test"]["test_num_questions"] == 3
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"][0].endswith("ForJointMultiCandidate")
    assert config["first_token_attention"] == expected  # fine-tuning a joint folder keeps its setting
    assert config["unpadded"] is True  # run_pretrain's default pass, kept by the fine-tuning of its folder


@pytest.mark.slow
@pytest.mark.wikiqa
@needs_wikiqa()
def test_run_joint_on_wikiqa_clean_test(stock_checkpoint, tmp_path):
    args = [
        "--model_name_or_path", str(stock_checkpoint("bert")),
        "--dataset", "wikiqa",
        "--output_dir", str(tmp_path / "wikiqa"),
        "--num_candidates", "5",
        "--slot_length", "20",
        "--max_steps", "2",
        "--max_train_samples", "200",
        "--per_device_eval_batch_size", "64",
    ]  # fmt: skip
    results = run_joint.main(args)
    assert results["test"]["test_num_questions"] == 237  # the clean test set, every candidate ranked
    assert results["dev"]["eval_num_questions"] == 122
    lines = predictions(tmp_path / "wikiqa")
    assert sum(len(line["ranking"]) for line in lines) == 2341


@pytest.mark.slow
def test_default_run_trains_a_tiny_joint_roberta_from_scratch(tmp_path):
    # The scratch path of the default run (embedded task, corpus-trained BPE); k and L shrunk to keep the test short.
    results = run_joint.main(["--output_dir", str(tmp_path / "demo"), "--max_steps", "2", "--max_train_samples", "60",
                              "--max_eval_samples", "60", "--num_candidates", "4", "--slot_length", "24"])  # fmt: skip
    assert results["test"]["test_num_questions"] == 61
    config = json.loads((tmp_path / "demo" / "config.json").read_text())
    assert config["model_type"] == "joint_roberta" and config["num_candidates"] == 4 and config["type_vocab_size"] == 5


@pytest.mark.parametrize("flag", ["true", "false", None], ids=["unpadded", "padded", "default"])
def test_run_joint_unpadded_flag_chooses_the_training_pass(stock_checkpoint, tmp_path, monkeypatch, flag):
    """``--unpadded true`` trains through the unpadded pass (every training forward; evaluation stays padded),
    ``false`` and the default (a stock checkpoint: off) through the padded one; the folder records it."""
    from as2hub.modeling.joint_multicandidate import modeling_joint_multicandidate as joint_module

    calls = {"train": 0, "eval": 0}
    encode = joint_module.unpadded_encode

    def counted(base_model, *args, **kwargs):
        calls["train" if base_model.training else "eval"] += 1
        return encode(base_model, *args, **kwargs)

    monkeypatch.setattr(joint_module, "unpadded_encode", counted)
    extra = ["--unpadded", flag] if flag else []
    run_joint.main(joint_args(tmp_path, stock_checkpoint("bert"), "--max_steps", "2", *extra))
    assert calls == {"train": 2 if flag == "true" else 0, "eval": 0}  # 2 steps of one batch (4 groups)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["unpadded"] is (flag == "true")


def test_mspp_pretraining_bad_arguments_stop_before_training(stock_checkpoint, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index in range(4):
        write_document(corpus / f"doc{index}.txt", paragraphs=2, sentences_per_paragraph=3)
    base = ["--objective", "mspp", "--output_dir", str(tmp_path / "pre"), "--corpus", str(corpus), "--model_type",
            "bert", "--model_name_or_path", str(stock_checkpoint("bert")), *QUICK_PRETRAIN]  # fmt: skip
    with pytest.raises(ValueError, match=r"MSPP fills k = 3 slots .* easy negatives \(-1, the rest\)"):
        run_pretrain.main([*base, "--mspp_hard_negatives", "3"])
    with pytest.raises(ValueError, match="--joint_head must be IE_k or AE_k"):
        run_pretrain.main([*base, "--joint_head", "AE_1"])
    with pytest.raises(ValueError, match="--whole_word_mask is not supported"):
        run_pretrain.main([*base, "--whole_word_mask", "True"])
    assert not (tmp_path / "pre").exists()

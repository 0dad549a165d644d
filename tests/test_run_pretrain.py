"""run_pretrain.py end to end: the default run learns, every model type runs, Trainer flags, bad input."""

import json

import pytest
import torch
from helpers import TEST_THREADS

from as2hub.data_collators import CorpusError, EmptyCorpusError
from as2hub.run_scripts import run_as2, run_pretrain
from as2hub.run_scripts.arguments import ArgumentError

QUICK = ["--max_steps", "3", "--eval_steps", "3", "--save_steps", "3", "--per_device_train_batch_size", "8",
         "--tokenizer_vocab_size", "800", "--eval_passes", "1", "--max_eval_samples", "64"]  # fmt: skip


def quick_pretrain(tmp_path, *extra, name="pre"):
    out = tmp_path / name
    results = run_pretrain.main(["--output_dir", str(out), *QUICK, *extra])
    return out, results


@pytest.mark.slow
@pytest.mark.long
def test_default_run_lowers_mlm_loss_and_learns_the_sentence_task(tmp_path):
    """The long lane (``make test-long``; CI's ``make test`` names it and leaves it out): 1,500 steps, 11 minutes on
    one AVX2 core."""
    torch.set_num_threads(TEST_THREADS)
    results = run_pretrain.main(["--output_dir", str(tmp_path / "default"), "--save_strategy", "no"])
    before, after = results["before"], results["eval"]
    assert after["eval_mlm_loss"] < before["before_mlm_loss"] - 1.0
    # Held-out documents, 4 negatives per positive. Plain accuracy is not the test: a tiny model trained from scratch on
    # 61 documents keeps its probabilities under 0.5, so accuracy stays near the majority rate (0.8). The two measures
    # whose chance level is 0.5 whatever the balance must rise above it (measured 2026-11-22: AUC 0.53 -> 0.57, balanced
    # accuracy 0.50 -> 0.54 on 3,000 held-out examples from 15 documents; the run is seeded, so these are reproducible).
    assert after["eval_cls_auc"] > 0.55, after
    assert after["eval_cls_balanced_accuracy"] > 0.52, after
    assert after["eval_cls_auc"] > before["before_cls_auc"] + 0.02


@pytest.mark.parametrize("objective", ["ssp", "sp", "psd", "sdc", "dpc", "all", "mlm"])
def test_each_objective_trains_and_logs_its_components(tmp_path, objective):
    out, results = quick_pretrain(tmp_path, "--objective", objective, "--logging_steps", "1")
    history = json.loads(sorted(out.glob("checkpoint-*/trainer_state.json"))[-1].read_text())["log_history"]
    train_logs = [log for log in history if "loss" in log]
    assert train_logs and "mlm_loss" in train_logs[0]
    assert ("cls_loss" in train_logs[0]) == (objective != "mlm")
    config = json.loads((out / "config.json").read_text())
    assert config["type_vocab_size"] == (3 if objective in ("sdc", "dpc", "all", "mlm") else 1)


@pytest.mark.slow
@pytest.mark.parametrize(
    "objective, extra",
    [("dslc", ["--unpadded", "true"]), ("mspp", ["--num_candidates", "3", "--slot_length", "24"])],
)
def test_unpadded_training_is_saved_in_the_config(tmp_path, objective, extra):
    """``--unpadded true``, or no flag on the CPU (the default there): the training steps take the unpadded pass (the
    joint model: over its slots) and the saved config keeps the flag."""
    out, results = quick_pretrain(tmp_path, "--objective", objective, "--save_strategy", "no", *extra)
    assert json.loads((out / "config.json").read_text())["unpadded"] is True
    assert results["train"]["train_loss"] == pytest.approx(results["train"]["train_loss"])  # finite, not NaN
    assert results["eval"]["eval_mlm_loss"] < 20


@pytest.mark.slow
def test_bf16_without_a_gpu_trains_in_bf16_autocast_on_the_cpu(tmp_path):
    """``--bf16`` on a machine without a GPU (``CPUFriendlyArguments``: transformers alone would ask for
    ``--use_cpu``): the training steps run their linear layers in bf16 autocast, on the unpadded pass (the CPU's
    default), the loss is finite and the saved weights stay fp32."""
    from safetensors.torch import load_file

    dtypes = set()

    def record(module, args, output):
        if isinstance(module, torch.nn.Linear) and module.training and torch.is_tensor(output):
            dtypes.add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        out, results = quick_pretrain(tmp_path, "--bf16", "--save_strategy", "no")
    finally:
        handle.remove()
    assert dtypes == {torch.bfloat16}
    assert json.loads((out / "config.json").read_text())["unpadded"] is True
    assert results["train"]["train_loss"] == pytest.approx(results["train"]["train_loss"])  # finite, not NaN
    assert {tensor.dtype for tensor in load_file(out / "model.safetensors").values()} == {torch.float32}


def test_unpadded_defaults_to_on_when_training_on_the_cpu():
    from as2hub.training.pretraining_models import default_unpadded

    assert default_unpadded(None, torch.device("cpu")) is True
    assert default_unpadded(None, "cuda:0") is True  # measured faster on an H200 (benchmarks/gpu/README.md)
    assert default_unpadded(False, "cpu") is False and default_unpadded(True, "cuda") is True


def test_electra_materialized_exports_a_discriminator_that_run_as2_fine_tunes(tmp_path):
    out, _ = quick_pretrain(tmp_path, "--model_type", "electra", "--materialize", "--objective", "dslc")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "ssp_electra"
    assert (out / "discriminator" / "model.safetensors").exists()
    results = run_as2.main(
        ["--model_name_or_path", str(out / "discriminator"), "--output_dir", str(tmp_path / "as2"),
         "--max_steps", "2", "--max_length", "64", "--max_train_samples", "64", "--max_eval_samples", "64"]
    )  # fmt: skip
    assert json.loads((tmp_path / "as2" / "config.json").read_text())["model_type"] == "contextual_electra"
    assert results["test"]["test_num_questions"] > 0


def test_roberta_checkpoint_is_what_run_as2_fine_tunes(tmp_path):
    out, _ = quick_pretrain(tmp_path)
    results = run_as2.main(
        ["--model_name_or_path", str(out), "--output_dir", str(tmp_path / "as2"), "--max_steps", "2",
         "--max_length", "64", "--max_train_samples", "64", "--max_eval_samples", "64"]
    )  # fmt: skip
    config = json.loads((tmp_path / "as2" / "config.json").read_text())
    assert config["model_type"] == "contextual_roberta" and config["type_vocab_size"] == 3
    assert results["test"]["test_num_questions"] > 0


def test_trainer_flags_and_resume_from_checkpoint(tmp_path):
    flags = ["--gradient_accumulation_steps", "2", "--warmup_steps", "1", "--weight_decay", "0.1",
             "--save_steps", "2", "--max_steps", "2", "--dataloader_num_workers", "1"]  # fmt: skip
    out, _ = quick_pretrain(tmp_path, *flags)
    assert (out / "checkpoint-2").is_dir()
    _, results = quick_pretrain(
        tmp_path, *flags[:-4], "--max_steps", "4", "--resume_from_checkpoint", str(out / "checkpoint-2")
    )
    state = json.loads((tmp_path / "pre" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and results["train"]["epoch"] > 0


def test_bert_twin_pretrains_from_a_stock_checkpoint(stock_checkpoint, tmp_path):
    out, _ = quick_pretrain(tmp_path, "--model_type", "bert", "--model_name_or_path", str(stock_checkpoint("bert")))
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "ssp_bert" and config["type_vocab_size"] == 3  # grown for the DSLC triplets


def test_bad_inputs_are_clear(tmp_path):
    with pytest.raises(ArgumentError, match="unknown --objective 'nsp'"):
        run_pretrain.main(["--objective", "nsp", "--output_dir", str(tmp_path / "x")])
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "a.txt").write_text("Too short.\n\nAlso short.")
    with pytest.raises(EmptyCorpusError, match="min_document_chars"):
        run_pretrain.main(["--corpus", str(tiny), "--output_dir", str(tmp_path / "y")])
    (tiny / "b.txt").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3\x28" * 100)
    with pytest.raises(CorpusError, match="b.txt"):
        run_pretrain.main(["--corpus", str(tiny / "b.txt"), "--output_dir", str(tmp_path / "z")])
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists() and not (tmp_path / "z").exists()


SENTENCE = "The interpreter reads this sentence number {} of paragraph {} and keeps going."


def write_document(path, paragraphs, sentences_per_paragraph):
    text = "\n\n".join(
        " ".join(SENTENCE.format(s, p) for s in range(sentences_per_paragraph)) for p in range(paragraphs)
    )
    path.write_text(text)


def test_a_one_document_corpus_trains_with_fewer_negatives(tmp_path):
    corpus = tmp_path / "one"
    corpus.mkdir()
    write_document(corpus / "doc.txt", paragraphs=3, sentences_per_paragraph=4)
    out, results = quick_pretrain(tmp_path, "--corpus", str(corpus), "--objective", "dslc", "--max_steps", "2")
    assert results["train"]["epoch"] > 0 and (out / "model.safetensors").exists()


def test_a_corpus_without_any_unit_of_the_objective_is_an_error_not_a_loop(tmp_path):
    corpus = tmp_path / "short_paragraphs"
    corpus.mkdir()
    for index in range(3):  # paragraphs of two sentences: DSLC needs three
        write_document(corpus / f"doc{index}.txt", paragraphs=3, sentences_per_paragraph=2)
    with pytest.raises(ValueError, match="produced no example from"):
        quick_pretrain(tmp_path, "--corpus", str(corpus), "--objective", "dslc")


@pytest.fixture
def electra_pair(tmp_path, tokenizers):
    """Tiny stock ELECTRA checkpoints: a discriminator (ElectraForPreTraining) and a generator (ElectraForMaskedLM)."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    tokenizer = tokenizers["bert"]
    common = {
        "vocab_size": len(tokenizer),
        "embedding_size": 16,
        "max_position_embeddings": 136,
        "num_hidden_layers": 2,
    }
    torch.manual_seed(0)
    folders = {}
    for name, model_class, width in (("disc", ElectraForPreTraining, 32), ("gen", ElectraForMaskedLM, 16)):
        config = ElectraConfig(**common, hidden_size=width, num_attention_heads=2, intermediate_size=2 * width)
        folders[name] = tmp_path / name
        model_class(config).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


def test_electra_continues_from_a_stock_generator_checkpoint(tmp_path, electra_pair):
    """The README's ELECTRA command: the generator's weights are the generator checkpoint's."""
    from transformers import ElectraForMaskedLM

    args = ["--model_type", "electra", "--model_name_or_path", str(electra_pair["disc"]),
            "--generator_name_or_path", str(electra_pair["gen"]), "--objective", "sdc"]  # fmt: skip
    model_args = run_pretrain.HfArgumentParser(run_pretrain.PretrainModelArguments).parse_args_into_dataclasses(
        args=args[:6]
    )[0]
    tokenizer = run_pretrain.AutoTokenizer.from_pretrained(electra_pair["disc"])
    model = run_pretrain.build_model(model_args, tokenizer, "sdc")
    generator = ElectraForMaskedLM.from_pretrained(electra_pair["gen"]).state_dict()
    own = model.state_dict()
    for key, value in generator.items():
        if key.startswith("electra.encoder."):
            torch.testing.assert_close(own[key.replace("electra.", "generator.", 1)], value, msg=key)
        elif key.startswith("generator_predictions."):
            torch.testing.assert_close(own[key], value, msg=key)
    assert model.config.generator_config.hidden_size == 16
    assert model.electra.embeddings.token_type_embeddings.num_embeddings == 3
    assert model.generator.embeddings.token_type_embeddings is model.electra.embeddings.token_type_embeddings
    out, _ = quick_pretrain(tmp_path, *args, "--max_steps", "2")
    assert json.loads((out / "config.json").read_text())["generator_config"]["hidden_size"] == 16
    assert (out / "discriminator" / "model.safetensors").exists()


@pytest.mark.parametrize("model_type", ["roberta", "electra"])
def test_config_name_from_scratch_builds_the_triplet_table(stock_checkpoint, tmp_path, model_type):
    out, _ = quick_pretrain(
        tmp_path, "--model_type", model_type, "--config_name", str(stock_checkpoint(model_type)),
        "--tokenizer_name", str(stock_checkpoint(model_type)), "--objective", "dslc", "--max_steps", "1",
    )  # fmt: skip
    config = json.loads((out / "config.json").read_text())
    assert config["type_vocab_size"] == 3
    if model_type == "electra":
        assert config["generator_config"]["type_vocab_size"] == 3


def test_loading_a_pretraining_checkpoint_says_what_is_expected_in_one_line(tmp_path, capfd, caplog):
    out, _ = quick_pretrain(tmp_path)
    capfd.readouterr()
    with caplog.at_level("INFO", logger="as2hub"):
        run_as2.main(
            ["--model_name_or_path", str(out), "--output_dir", str(tmp_path / "as2"), "--max_steps", "1",
             "--max_length", "64", "--max_train_samples", "32", "--max_eval_samples", "32"]
        )  # fmt: skip
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "to instantiate a model of type" not in err
    (line,) = [r.message for r in caplog.records if r.message.startswith(f"loaded {out}")]
    assert "ssp_roberta" in line and "lm_head.*" in line
    assert not [r for r in caplog.records if "does not match" in r.message]


def test_a_run_logs_each_fact_once_and_evaluates_its_last_step_once(tmp_path, caplog):
    # --eval_steps 3 = --max_steps 3: the Trainer evaluates step 3, then the run's final figures are those of step 3.
    with caplog.at_level("INFO", logger="as2hub"):
        out, results = quick_pretrain(tmp_path, "--objective", "ssp", "--eval_passes", "3")
    messages = [r.getMessage() for r in caplog.records]
    repeated = {m for m in messages if messages.count(m) > 1}
    assert not repeated, repeated
    (held_out,) = [m for m in messages if m.startswith("held-out:")]
    assert held_out.startswith("held-out: 64 ssp examples") and "(3 sampling passes, the first 64 of " in held_out
    assert results["before"]["before_cls_items"] == results["eval"]["eval_cls_items"] == 64  # --max_eval_samples
    history = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["log_history"]
    evaluations = [log for log in history if "eval_cls_auc" in log]
    assert [log["step"] for log in evaluations] == [3]
    assert results["eval"]["eval_cls_auc"] == evaluations[0]["eval_cls_auc"]
    assert results["eval"]["eval_mlm_loss"] == evaluations[0]["eval_mlm_loss"]


def test_a_held_out_evaluation_gives_the_same_figures_twice_for_the_same_weights(tmp_path, monkeypatch):
    """... and on the unpadded pass (the folder's flag, on by default on the CPU) the stock pass's figures."""
    import sys

    from transformers import AutoModelForPreTraining, AutoTokenizer, TrainingArguments

    from as2hub.data_collators import PretrainingCollator, resolve_objective
    from as2hub.training.pretraining_data import held_out_examples
    from as2hub.training.trainers import SSPTrainer

    out, _ = quick_pretrain(tmp_path, "--objective", "ssp", "--save_strategy", "no")
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForPreTraining.from_pretrained(out, trust_remote_code=True)
    objective = resolve_objective("ssp")
    documents = [[["First sentence of a paragraph here.", "Its second sentence follows.", "A third one ends it."]] * 2,
                 [["Another document starts.", "It has sentences too.", "Three of them at least."]] * 2] * 4  # fmt: skip
    dataset = held_out_examples(documents, objective, {"seed": 3, "documents_per_batch": 4}, passes=2)
    collator = PretrainingCollator(tokenizer, max_length=64, num_token_types=model.config.type_vocab_size)
    args = TrainingArguments(
        str(tmp_path / "eval"), per_device_eval_batch_size=8, report_to="none", seed=7, remove_unused_columns=False
    )
    trainer = SSPTrainer(model=model, args=args, data_collator=collator, eval_dataset=dataset)
    module = sys.modules[type(model).__module__]
    calls, encode = [], module.unpadded_encode
    monkeypatch.setattr(module, "unpadded_encode", lambda *args, **kwargs: calls.append(1) or encode(*args, **kwargs))
    assert model.config.unpadded is True
    first = trainer.evaluate()
    assert len(calls) == -(-len(dataset) // 8)  # every batch on the unpadded pass
    torch.rand(1000)  # whatever ran in between
    again = trainer.evaluate(eval_dataset=dataset)  # a dataset given: computed again, not the cached figures
    keys = ("eval_mlm_loss", "eval_cls_auc", "eval_cls_loss", "eval_loss")
    assert {k: again[k] for k in keys} == {k: first[k] for k in keys}
    # The masks are drawn: with another seed the MLM loss differs (a constant masking could not fail the test above).
    trainer.args.seed = 8
    other = trainer.evaluate(eval_dataset=dataset)
    assert other["eval_mlm_loss"] != first["eval_mlm_loss"]
    trainer.args.seed, model.config.unpadded = 7, False  # the stock pass, the same masks
    stock = trainer.evaluate(eval_dataset=dataset)
    assert {k: stock[k] for k in keys} == pytest.approx({k: first[k] for k in keys}, rel=1e-5, abs=1e-6)
    assert len(calls) == 3 * -(-len(dataset) // 8)  # not one more


def test_help_lists_as2hubs_flags_before_the_trainers(capsys):
    with pytest.raises(SystemExit):
        run_pretrain.main(["--help"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("usage: python -m as2hub.run_scripts.run_pretrain") and len(lines[0]) < 140
    headings = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert [h.split(" (")[0] for h in headings] == [
        "options:",
        "model",
        "corpus and objective",
        "publishing",
        "training",
    ]
    first = {flag: next(i for i, line in enumerate(lines) if line.lstrip().startswith(flag + " "))
             for flag in ("--objective", "--hub_push_adapter", "--learning_rate")}  # fmt: skip
    assert first["--objective"] < first["--hub_push_adapter"] < first["--learning_rate"]


def test_max_eval_samples_below_one_is_refused_before_any_example_is_made():
    from as2hub.data_collators import resolve_objective
    from as2hub.training.pretraining_data import held_out_examples

    with pytest.raises(ArgumentError, match="--max_eval_samples must be at least 1, got 0"):
        held_out_examples([[["A sentence."]]], resolve_objective("ssp"), {"seed": 0}, passes=1, limit=0)

"""User errors on the command line (one line, exit code 2), parse-time contradictions, refusing to overwrite a model
folder, staged saves that survive a crash, and dev/test splits that the clean setting empties."""

import subprocess
import sys

import pytest
import torch
from test_run_as2 import as2_rows, tiny_args, write_jsonl
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from as2hub.data_collators import AS2DataError
from as2hub.hub_cards import run_outputs
from as2hub.run_scripts import arguments, run_as2, run_joint, run_pretrain, run_qe_contrastive
from as2hub.run_scripts.arguments import ArgumentError, check_output_dir, run_cli


def all_positive_rows():
    return [{"question": f"q{k}?", "candidate": f"answer {k}.", "label": 1} for k in range(3)]


# ------------------------------------------------------------------------------------------ one-line user errors


def test_run_cli_prints_one_line_for_a_user_error_and_keeps_tracebacks_for_bugs(capsys):
    def bad_data(argv):
        raise AS2DataError("dev.jsonl: line 3 (data row 3), column 'label': label must be 0 or 1\n(got 2)")

    assert run_cli(bad_data, []) == 2
    assert (
        capsys.readouterr().err
        == "error: dev.jsonl: line 3 (data row 3), column 'label': label must be 0 or 1 (got 2)\n"
    )

    def missing(argv):
        raise FileNotFoundError("AS2 data file not found: nowhere.jsonl")

    assert run_cli(missing, []) == 2
    assert capsys.readouterr().err == "error: AS2 data file not found: nowhere.jsonl\n"

    def bug(argv):
        raise KeyError("not a user error")

    with pytest.raises(KeyError):
        run_cli(bug, [])
    assert run_cli(lambda argv: {"map": 1.0}, []) == 0


@pytest.mark.parametrize(
    "script", ["run_as2", "run_joint", "run_pretrain", "run_qe_contrastive", "export_onnx", "push_to_hub"]
)
def test_every_command_prints_its_help(script, capsys):
    """``--help`` of every run script and console command exits 0 with the usage and every option's help (a ``%`` in
    a help string once made argparse crash on ``as2hub-train --help``)."""
    import importlib

    module = importlib.import_module(f"as2hub.run_scripts.{script}")
    entry = getattr(module, "cli", module.main)
    with pytest.raises(SystemExit) as exit_info:
        entry(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "--help" in out
    if script in ("run_as2", "run_joint"):
        assert "capped at 10% of the run" in " ".join(out.split())


def test_argument_errors_of_the_dataclasses_are_typed(tmp_path):
    with pytest.raises(ArgumentError, match="--onnx_quantize needs --export_onnx"):
        run_as2.main(["--output_dir", str(tmp_path / "x"), "--onnx_quantize", "int8"])
    with pytest.raises(ArgumentError, match=r"not used by the HfArgumentParser: \['--no_such_flag'"):
        run_as2.main(["--output_dir", str(tmp_path / "x"), "--no_such_flag", "1"])
    with pytest.raises(ArgumentError, match="--pairwise and --contextual true contradict"):
        run_as2.main(["--output_dir", str(tmp_path / "x"), "--pairwise", "--contextual", "true"])
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, args, expected",
    [
        ("run_as2", ["--dataset", "{tmp}/bad.jsonl"], "error: {tmp}/bad.jsonl: line 2 (data row 2), column 'label'"),
        ("export_onnx", ["{tmp}"], "error: {tmp} is not a saved model folder (no config.json)"),
    ],
)
def test_scripts_end_a_user_error_with_one_line_and_exit_code_2(tmp_path, module, args, expected):
    bad = [{"question": "q?", "candidate": "a.", "label": 1}, {"question": "q?", "candidate": "b.", "label": 7}]
    write_jsonl(tmp_path / "bad.jsonl", bad)
    args = [arg.format(tmp=tmp_path) for arg in args]
    if module != "export_onnx":
        args += ["--output_dir", str(tmp_path / "out")]
    result = subprocess.run(
        [sys.executable, "-m", f"as2hub.run_scripts.{module}", *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(expected.format(tmp=tmp_path)), result.stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", [run_as2, run_joint, run_pretrain, run_qe_contrastive])
def test_a_model_folder_without_a_usable_config_is_one_line(tmp_path, script, capsys):
    """A folder with no config.json, or one without a model_type: exit code 2 and one line naming the flag, the
    folder and what is missing (before, run_as2 ended in transformers' ValueError traceback)."""
    empty, typeless = tmp_path / "empty", tmp_path / "typeless"
    empty.mkdir()
    typeless.mkdir()
    (typeless / "config.json").write_text('{"hidden_size": 8}')
    extra = ["--objective", "ssp"] if script is run_pretrain else []
    for folder in (empty, typeless):
        argv = ["--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "out"), *extra]
        assert run_cli(script.main, argv) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
        assert line.startswith(f"error: --model_name_or_path {folder}: no usable model config"), line
        assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ parse-time contradictions


def test_a_max_length_beyond_the_position_table_fails_before_loading(stock_checkpoint, tmp_path, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the data or the model was loaded before the arguments were checked")

    monkeypatch.setattr(run_as2, "load_splits", no_loading)
    monkeypatch.setattr(run_pretrain, "load_corpus", no_loading)
    monkeypatch.setattr(run_qe_contrastive, "load_qe_splits", no_loading)
    roberta, bert = stock_checkpoint("roberta"), stock_checkpoint("bert")  # 136 positions; RoBERTa's offset: 134
    out = ["--output_dir", str(tmp_path / "out")]
    with pytest.raises(ArgumentError, match=r"--max_length 135 is longer than .* holds 134 tokens .* --max_length 134"):
        run_as2.main(["--model_name_or_path", str(roberta), "--max_length", "135", *out])
    with pytest.raises(ArgumentError, match=r"holds 136 tokens"):
        run_as2.main(["--config_name", str(bert), "--max_length", "137", *out])
    with pytest.raises(ArgumentError, match=r"--max_length 200 is longer"):
        run_pretrain.main(["--model_name_or_path", str(bert), "--max_length", "200", *out])
    with pytest.raises(ArgumentError, match=r"--max_length 5000 is longer than the Longformer converted"):
        run_qe_contrastive.main(["--model_name_or_path", str(bert), "--max_length", "5000", *out])
    # Without --max_length the default (256) is lowered to what the model reads.
    assert arguments.check_max_length(None, str(roberta), default=256) == 134
    assert arguments.check_max_length(None, str(bert), default=128) == 128
    assert not (tmp_path / "out").exists()


def test_joint_k_beyond_the_slot_budget_fails_before_loading(stock_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(run_joint, "load_splits", lambda *a: pytest.fail("data loaded before the check"))
    bert = str(stock_checkpoint("bert"))  # 136 positions: (k + 1) x 32 fits for k <= 3
    args = ["--model_name_or_path", bert, "--slot_length", "32", "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ArgumentError, match=r"needs \(k \+ 1\) x L = 160 positions .* lower --num_candidates to 3"):
        run_joint.main([*args, "--num_candidates", "4"])
    with pytest.raises(ArgumentError, match=r"--num_candidates 20 with --slot_length 64 needs .* 1344"):
        run_pretrain.main(["--objective", "mspp", "--num_candidates", "20", "--output_dir", str(tmp_path / "out")])
    arguments.check_slot_budget(4, 32, "per_slot", bert)  # positions restart per slot: fits


# --------------------------------------------------------------------------------- refusing to overwrite a model


class Args:
    def __init__(self, output_dir, overwrite=False, resume=None):
        self.output_dir, self.overwrite_output_dir, self.resume_from_checkpoint = str(output_dir), overwrite, resume
        self.should_save = True


def test_check_output_dir_refuses_a_model_folder_unless_told(tmp_path):
    assert check_output_dir(Args(tmp_path / "new")) == []
    (tmp_path / "logs.txt").write_text("not a model")
    assert check_output_dir(Args(tmp_path)) == []
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ArgumentError, match=r"already holds a model \(config.json, checkpoint-2\): pass --overwrite"):
        check_output_dir(Args(tmp_path))
    assert check_output_dir(Args(tmp_path, resume="checkpoint-2")) == []
    stale = check_output_dir(Args(tmp_path, overwrite=True))
    assert stale == [tmp_path / "checkpoint-2"] and stale[0].exists()  # removed only just before training
    arguments.remove_stale_checkpoints(stale, Args(tmp_path))
    assert not stale[0].exists() and (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_run_as2_twice_into_one_folder_is_refused_then_overwrites_cleanly(stock_checkpoint, tmp_path):
    args = tiny_args(tmp_path, stock_checkpoint("bert"))
    args[args.index("--max_steps") + 1] = "2"
    run_as2.main([*args, "--save_steps", "1", "--eval_steps", "1", "--save_total_limit", "5"])
    out = tmp_path / "out"
    first = sorted(path.name for path in out.glob("checkpoint-*"))
    assert "checkpoint-2" in first
    weights = (out / "model.safetensors").read_bytes()
    with pytest.raises(ArgumentError, match="already holds a model"):
        run_as2.main(args)
    assert (out / "model.safetensors").read_bytes() == weights
    run_as2.main([*args, "--max_steps", "1", "--overwrite_output_dir"])
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-1"]  # no stale checkpoint-2
    assert (out / "model.safetensors").read_bytes() != weights


# ------------------------------------------------------------------------------- staged saves survive a crash


def test_a_crash_while_saving_leaves_the_previous_model_loadable(stock_checkpoint, tmp_path, monkeypatch):
    source = stock_checkpoint("bert")
    tokenizer = AutoTokenizer.from_pretrained(source)
    first = run_as2.load_model(run_as2.ModelArguments(model_name_or_path=str(source)), tokenizer, contextual=True)
    out = tmp_path / "model"
    run_outputs.save_hub_folder(first, tokenizer, out, None, None, {})
    card, record = (out / "README.md").read_text(), (out / "as2hub_run.json").read_text()
    name = next(iter(first.state_dict()))
    expected = first.state_dict()[name].clone()

    second = run_as2.load_model(run_as2.ModelArguments(model_name_or_path=str(source)), tokenizer, contextual=True)
    with torch.no_grad():
        for parameter in second.parameters():
            parameter.add_(1.0)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(tokenizer), "save_pretrained", crash)  # after the new weights are written to staging
    with pytest.raises(OSError, match="disk full"):
        run_outputs.save_hub_folder(second, tokenizer, out, None, None, {})
    assert not list(out.glob(".staging-*"))
    reloaded = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert torch.equal(reloaded.state_dict()[name], expected)
    assert (out / "README.md").read_text() == card and (out / "as2hub_run.json").read_text() == record


# ------------------------------------------------------------------------------ clean split without a question


def test_run_as2_and_run_joint_refuse_a_dev_file_the_clean_setting_empties(stock_checkpoint, tmp_path):
    args = tiny_args(tmp_path, stock_checkpoint("bert"))
    dev = write_jsonl(tmp_path / "all_positive.jsonl", all_positive_rows())
    args[args.index("--validation_file") + 1] = dev
    message = r"all_positive\.jsonl: the clean setting keeps no question: none of its 3 questions \(3 rows\)"
    with pytest.raises(AS2DataError, match=message):
        run_as2.main(args)
    train = write_jsonl(tmp_path / "train.jsonl", as2_rows(repeat=2))
    joint = ["--model_name_or_path", str(stock_checkpoint("bert")), "--dataset", train, "--validation_file", dev]
    joint += ["--num_candidates", "2", "--slot_length", "32"]
    with pytest.raises(AS2DataError, match=message):
        run_joint.main([*joint, "--output_dir", str(tmp_path / "joint")])
    assert not (tmp_path / "out").exists() and not (tmp_path / "joint").exists()

"""The fine-tuning scripts report the dev figures of the weights they end with from the evaluation the ``Trainer`` ran
during training (``as2hub.training.evaluations``), not from a second pass over the dev set: the same figures, one pass
fewer."""

import re
from types import SimpleNamespace

import pytest
import transformers
from test_run_as2 import tiny_args

from as2hub.run_scripts import run_as2
from as2hub.training.evaluations import RecordEvaluations, final_dev_metrics, final_step

TIMINGS = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")


def counted_evaluations(monkeypatch) -> list[int]:
    """Patch ``Trainer.evaluate`` to record the global step of each call (during and after training)."""
    steps, original = [], transformers.Trainer.evaluate

    def evaluate(self, *args, **kwargs):
        steps.append(self.state.global_step)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "evaluate", evaluate)
    return steps


def test_run_as2_reports_the_best_steps_figures_without_a_second_pass(stock_checkpoint, tmp_path, monkeypatch, caplog):
    model = stock_checkpoint("bert")
    for name in ("reused", "again"):
        (tmp_path / name).mkdir()
    steps = counted_evaluations(monkeypatch)
    with caplog.at_level("INFO", logger="as2hub.training.evaluations"):
        reused = run_as2.main(tiny_args(tmp_path / "reused", model))
    assert steps == [2, 4]  # --eval_steps 2 of --max_steps 4, and no third pass after train()
    (message,) = [r.getMessage() for r in caplog.records if r.name == "as2hub.training.evaluations"]
    assert re.fullmatch(r"dev: the figures of step [24], evaluated during training \(not computed again\)", message)

    # The same run, evaluated again after train() as the HF scripts do: the same figures for the same weights.
    steps.clear()
    monkeypatch.setattr(run_as2, "final_dev_metrics", lambda trainer, record: trainer.evaluate())
    again = run_as2.main(tiny_args(tmp_path / "again", model))
    assert steps == [2, 4, 4]
    figures = {key: value for key, value in reused["dev"].items() if key.startswith("eval_") and key not in TIMINGS}
    assert {"eval_loss", "eval_map", "eval_mrr"} <= set(figures)
    for key, value in figures.items():
        assert again["dev"][key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    assert reused["test"]["test_map"] == again["test"]["test_map"]


def trainer(global_step: int, best: str | None, load_best: bool = True) -> SimpleNamespace:
    calls = []
    return SimpleNamespace(
        args=SimpleNamespace(load_best_model_at_end=load_best),
        state=SimpleNamespace(global_step=global_step, best_model_checkpoint=best),
        evaluate=lambda: calls.append(global_step) or {"eval_map": -1.0},
        calls=calls,
    )


def test_the_final_step_is_the_loaded_best_checkpoints_and_an_unrecorded_step_is_evaluated_again():
    record = RecordEvaluations()
    for step, value in ((2, 0.5), (4, 0.4)):
        record.on_evaluate(None, SimpleNamespace(global_step=step), None, metrics={"eval_map": value, "epoch": 1.0})
    record.on_evaluate(None, SimpleNamespace(global_step=6), None, metrics={"test_map": 0.9})  # not a dev evaluation
    assert set(record.by_step) == {2, 4}

    best = trainer(4, "out/checkpoint-2")
    assert final_step(best) == 2 and final_dev_metrics(best, record) == {"eval_map": 0.5, "epoch": 1.0}
    assert best.calls == []
    last = trainer(4, "out/checkpoint-2", load_best=False)  # the last weights are kept
    assert final_step(last) == 4 and final_dev_metrics(last, record)["eval_map"] == 0.4 and last.calls == []
    # A resumed run whose best checkpoint was evaluated before the resume, and a last step never evaluated.
    for unrecorded in (trainer(8, "out/checkpoint-1"), trainer(5, None)):
        assert final_dev_metrics(unrecorded, record) == {"eval_map": -1.0}
        assert unrecorded.calls == [unrecorded.state.global_step]

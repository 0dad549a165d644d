"""Distilled cascade heads (issue 51, item 3): the heads-only step can teach the heads the frozen full model's scores
(``--cascade_head_target distill|both``) instead of the labels.

Expected values are stated from definitions (the KL divergence of two Bernoullis worked by hand, chance agreement of
a random ranking: 1/2 of pairs, 1/10 of top-1s in groups of 10) or computed by another path (the model's own forward
pass, the training loop as it was before the option), never by the function under test.
"""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from test_cascade import CANDIDATES, CONTEXTS, QUESTION, cascade_model

from as2hub.data_collators import ContextualAS2Collator
from as2hub.training.cascade_heads import distill_loss, first_token_states, fit_heads, head_scores


def training_args(**overrides):
    values = {
        "num_train_epochs": 10,
        "per_device_train_batch_size": 32,
        "learning_rate": 1e-2,
        "weight_decay": 0.0,
        "seed": 0,
    }
    return SimpleNamespace(**{**values, **overrides})


def synthetic_rows(hidden: int, rows: int, seed: int, direction: torch.Tensor):
    """States whose teacher is known: every head sees the same vector ``x`` per row, the teacher's logit is
    ``2 x . direction`` (a linear function a head can learn); the labels are coin flips, independent of ``x``."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=generator)
    states = torch.stack([x, x], dim=1)
    teacher = (2.0 * x @ direction).unsqueeze(-1)
    labels = torch.randint(0, 2, (rows,), generator=generator)
    return states, labels, teacher


def fresh_heads(model):
    """New heads as the heads-only step gets them (normal(0, 0.02) weights, zero biases), not the fixture's, whose
    rescaled weights saturate on these states."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.cascade_heads.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 0.02, generator=generator)
                module.bias.zero_()
    return model


def agreement(scores, teacher, group: int = 10) -> tuple[float, float]:
    """Within consecutive groups of ``group`` rows: the share of row pairs ordered as the teacher orders them, and the
    share of groups whose top row is the teacher's top row."""
    concordant = pairs = top = 0
    for start in range(0, len(teacher), group):
        s, t = list(scores[start : start + group]), list(teacher[start : start + group])
        for i in range(len(t)):
            for j in range(i + 1, len(t)):
                pairs += 1
                concordant += (s[i] - s[j]) * (t[i] - t[j]) > 0
        top += max(range(len(s)), key=s.__getitem__) == max(range(len(t)), key=t.__getitem__)
    return concordant / pairs, top / (len(teacher) // group)


def test_distill_loss_is_the_kl_divergence_of_the_teachers_bernoulli():
    # teacher logit 0 (p = 1/2), head logit ln 3 (q = 3/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3) = 0.143841
    got = distill_loss(torch.tensor([[math.log(3.0)]]), torch.tensor([[0.0]])).item()
    assert got == pytest.approx(0.5 * math.log(4.0 / 3.0), abs=1e-6)
    assert got == pytest.approx(0.143841, abs=1e-6)
    # the same head and teacher logits: 0 (at any logit), and the mean over rows
    assert distill_loss(torch.tensor([[1.5], [-4.0]]), torch.tensor([[1.5], [-4.0]])).item() == pytest.approx(
        0, abs=1e-6
    )
    mixed = distill_loss(torch.tensor([[math.log(3.0)], [0.0]]), torch.tensor([[0.0], [0.0]])).item()
    assert mixed == pytest.approx(0.143841 / 2, abs=1e-6)
    # two logits (softmax): teacher (0, 0), head (0, ln 3): the same two distributions, the same KL
    two = distill_loss(torch.tensor([[0.0, math.log(3.0)]]), torch.tensor([[0.0, 0.0]])).item()
    assert two == pytest.approx(0.143841, abs=1e-6)


def test_first_token_states_carry_the_full_models_logits(tokenizers):
    model, tokenizer = cascade_model(tokenizers, "bert", contextual=True)
    collator = ContextualAS2Collator(tokenizer, max_length=64, contextual=True, num_token_types=3)
    features = [
        {
            "question_tokens": tokenizer(QUESTION, add_special_tokens=False)["input_ids"],
            "candidate_tokens": tokenizer(candidate, add_special_tokens=False)["input_ids"],
            "context_tokens": tokenizer(context, add_special_tokens=False)["input_ids"],
            "label": index % 2,
        }
        for index, (candidate, context) in enumerate(zip(CANDIDATES, CONTEXTS))
    ]
    states, labels, teacher = first_token_states(model, collator, features, batch_size=4)
    batch = collator(features)
    batch.pop("labels")
    with torch.no_grad():
        expected = model(**batch).logits
    assert states.shape == (10, 2, model.config.hidden_size) and labels.tolist() == [0, 1] * 5
    assert teacher.shape == (10, 1)
    # other batches and paddings: float rounding, which the rescaled final head amplifies to ~2e-5 (test_cascade.py)
    assert teacher.view(-1).tolist() == pytest.approx(expected.view(-1).tolist(), abs=1e-4)


def test_distilled_heads_learn_the_teachers_ranking_and_their_loss_falls(tokenizers):
    model = fresh_heads(cascade_model(tokenizers, "bert", layers=(1, 3))[0])
    hidden = model.config.hidden_size
    direction = torch.nn.functional.normalize(torch.randn(hidden, generator=torch.Generator().manual_seed(7)), dim=0)
    states, labels, teacher = synthetic_rows(hidden, 640, seed=1, direction=direction)
    held_states, _, held_teacher = synthetic_rows(hidden, 200, seed=2, direction=direction)  # 20 groups of 10
    before = [agreement(scores, held_teacher.view(-1).tolist()) for scores in head_scores(model, held_states)]

    losses = fit_heads(model, states, labels, teacher, training_args(), target="distill")
    assert len(losses) == 10 and losses[-1] < 0.5 * losses[0], losses
    after = [agreement(scores, held_teacher.view(-1).tolist()) for scores in head_scores(model, held_states)]
    # Chance (a ranking unrelated to the teacher's) orders 1/2 of the pairs and finds 1/10 of the top rows; both heads
    # order at least 90% of the held-out pairs as the teacher does and find most of its top rows.
    for pairs, top in after:
        assert pairs >= 0.9 and top >= 0.5, (before, after)
    # The labels are coin flips: heads trained on them learn nothing of the teacher (chance, 1/2 of the pairs).
    model = fresh_heads(cascade_model(tokenizers, "bert", layers=(1, 3))[0])
    fit_heads(model, states, labels, teacher, training_args(), target="labels")
    on_labels = [agreement(scores, held_teacher.view(-1).tolist()) for scores in head_scores(model, held_states)]
    for pairs, _ in on_labels:
        assert 0.3 <= pairs <= 0.7, on_labels


def old_fit(model, states, labels, args):
    """The heads-only loop as it was before ``--cascade_head_target`` (commit 9873728), the reference for the default."""
    heads = model.cascade_heads
    epochs = max(1, math.ceil(args.num_train_epochs))
    steps = epochs * math.ceil(len(labels) / args.per_device_train_batch_size)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / steps))
    generator = torch.Generator().manual_seed(args.seed)
    heads.train()
    losses = []
    for _ in range(epochs):
        total = 0.0
        for batch in torch.randperm(len(labels), generator=generator).split(args.per_device_train_batch_size):
            loss = torch.stack(
                [model._loss(head(states[batch][:, i, None]), labels[batch]) for i, head in enumerate(heads)]
            )
            loss = loss.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(batch)
        losses.append(total / len(labels))
    heads.eval()
    return losses


def test_the_default_target_trains_the_heads_as_before(tokenizers):
    args = training_args(num_train_epochs=3, weight_decay=0.01)
    reference, _ = cascade_model(tokenizers, "roberta", layers=(1, 2))
    hidden = reference.config.hidden_size
    states, labels, teacher = synthetic_rows(hidden, 100, seed=3, direction=torch.ones(hidden) / hidden**0.5)
    expected_losses = old_fit(reference, states, labels, args)
    model, _ = cascade_model(tokenizers, "roberta", layers=(1, 2))
    assert fit_heads(model, states, labels, teacher, args) == pytest.approx(expected_losses, abs=1e-6)
    for got, want in zip(model.cascade_heads.state_dict().values(), reference.cascade_heads.state_dict().values()):
        assert torch.allclose(got, want, atol=1e-6)


def test_run_as2_distills_heads_and_records_the_target(stock_checkpoint, tmp_path):
    from safetensors.torch import load_file
    from test_run_as2 import tiny_args

    from as2hub.run_scripts import run_as2

    (tmp_path / "a").mkdir()
    run_as2.main(tiny_args(tmp_path / "a", stock_checkpoint("bert")))  # a fine-tuned ranker, no heads
    ranker = tmp_path / "a" / "out"
    (tmp_path / "b").mkdir()
    extra = (
        "--cascade_layers",
        "1",
        "--cascade_heads_only",
        "--cascade_head_target",
        "distill",
        "--learning_rate",
        "1e-2",
    )
    results = run_as2.main(tiny_args(tmp_path / "b", ranker, *extra))
    train = results["train"]
    assert train["epochs"] == 3 and train["train_rows"] == 48
    assert train["train_loss_last_epoch"] < train["train_loss_first_epoch"]
    assert 0.0 < train["dev_layer1_map"] <= 1.0
    out = tmp_path / "b" / "out"
    record = json.loads((out / "as2hub_run.json").read_text())["arguments"]["model"]
    assert record["cascade_head_target"] == "distill" and record["cascade_heads_only"] is True
    before, after = load_file(ranker / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(before[key], after[key]) for key in before)  # the ranker itself is untouched
    assert {key for key in after if key not in before} == {
        f"cascade_heads.0.{name}.{kind}" for name in ("dense", "out_proj") for kind in ("weight", "bias")
    }
    # The default run records the labels target.
    (tmp_path / "c").mkdir()
    run_as2.main(tiny_args(tmp_path / "c", ranker, "--cascade_layers", "1", "--cascade_heads_only"))
    record = json.loads((tmp_path / "c" / "out" / "as2hub_run.json").read_text())["arguments"]["model"]
    assert record["cascade_head_target"] == "labels"


def test_run_as2_refuses_a_bad_head_target(stock_checkpoint, tmp_path):
    from test_run_as2 import tiny_args

    from as2hub.run_scripts import run_as2
    from as2hub.run_scripts.arguments import ArgumentError

    model = stock_checkpoint("bert")
    heads_only = ("--cascade_layers", "1", "--cascade_heads_only")
    for extra, message in (
        ([*heads_only, "--cascade_head_target", "teacher"], "must be one of labels, distill, both.*'teacher'"),
        ([*heads_only, "--cascade_head_target", "both", "--cascade_distill_weight", "1.5"], r"in \[0, 1\]; got 1.5"),
        (["--cascade_layers", "1", "--cascade_head_target", "distill"], "needs --cascade_heads_only"),
        (["--cascade_head_target", "both"], "needs --cascade_heads_only"),
    ):
        with pytest.raises(ArgumentError, match=message):
            run_as2.main(tiny_args(tmp_path, model, *extra))
    assert not (tmp_path / "out").exists()

"""What a run leaves behind: test predictions (ranked, in cascade order, fact-verification labels, HotpotQA answers
and supporting facts) and the Hub folder (weights, remote code, run record, card) of a fine-tuning or a pre-training
run, written atomically (``as2hub.modeling.files``)."""

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from as2hub.data_collators.readers.joint_data import questions_in_order
from as2hub.modeling.files import staged_folder, write_json_atomic, write_text_atomic
from as2hub.modeling.scores import probability_of_correct
from as2hub.training.joint_finetuning import cascade_stages, row_scores


def write_ranked_predictions(output_dir, dataset, logits, model, name: str = "test_predictions.jsonl") -> None:
    """One JSON line per question: its candidates sorted by score, with their gold labels."""
    scores = probability_of_correct(np.asarray(logits, dtype=np.float64), model.config).numpy()
    by_question = defaultdict(list)
    for row, score in zip(dataset, scores.tolist()):
        by_question[row["question_id"]].append((score, row))
    lines = []
    for question_id, scored in by_question.items():
        scored.sort(key=lambda item: -item[0])
        lines.append(
            json.dumps(
                {
                    "question_id": question_id,
                    "question": scored[0][1]["question"],
                    "ranking": [{"candidate": r["candidate"], "score": s, "label": r["label"]} for s, r in scored],
                }
            )
        )
    write_text_atomic(Path(output_dir) / name, "\n".join(lines) + "\n")


def save_hub_folder(
    model,
    tokenizer,
    output_dir,
    model_args,
    data_args,
    results,
    training_args=None,
    family: str = "contextual_as2",
    auto_class: str = "AutoModelForSequenceClassification",
    batch: dict | None = None,
    extras: dict | None = None,
    metrics_file: str = "all_results.json",
) -> dict:
    """Save a run's Hub folder: config with auto_map, remote code, safetensors, tokenizer, run record and model card.

    A LoRA (PEFT) model is saved twice: its adapter in ``lora_adapter/`` (with an ``adapter`` component) and merged
    into the weights of the folder. The run record (``as2hub_run.json``, family ``family``) holds the reference outputs
    ``as2hub-push`` checks before uploading, computed on ``batch`` (a small collated batch of tensors, for families
    whose forward needs more than ``tokenizer(text, text_pair)``) or else on (question, candidate[, context]) pairs;
    ``auto_class`` is how the check loads the folder; ``extras`` go into the record for the family's card. Everything
    is written to a staging folder first and then moved in. Returns the record.

        save_hub_folder(model, tokenizer, out, model_args, data_args, results, training_args,
                        family="joint_multicandidate", auto_class="AutoModel", batch=collator(features))
    """
    from as2hub.hub_cards.run_record import REFERENCE_PAIRS, component, record_run
    from as2hub.inference.ranking import context_text_pair

    output_dir = Path(output_dir)
    extras = dict(extras or {})
    pairs = REFERENCE_PAIRS
    if batch is None:  # a cross-encoder: the reference input is tokenizer pairs (with a context when contextual)
        extras.setdefault("context_separator", context_text_pair(tokenizer, "", ""))
        if getattr(model.config, "contextual", False):
            context = "It was first performed around 1600 in London."
            pairs = [(q, context_text_pair(tokenizer, s, context)) for q, s in REFERENCE_PAIRS]
    with staged_folder(output_dir) as staging:
        components = {}
        if hasattr(model, "merge_and_unload"):  # a PEFT model: keep the adapter, ship the merged weights
            model.save_pretrained(staging / "lora_adapter")
            peft_config = next(iter(model.peft_config.values()))
            extras["lora_modules_to_save"] = sorted(peft_config.modules_to_save or [])
            components["adapter"] = component(
                "lora_adapter", model, tokenizer, auto_class, kind="adapter", pairs=pairs, batch=batch
            )
            model = model.merge_and_unload()
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        components = {"model": component(".", model, tokenizer, auto_class, pairs=pairs, batch=batch), **components}
        arguments = {"model": model_args, "data": data_args, "training": training_args}
        record = record_run(
            staging,
            family,
            model,
            tokenizer,
            arguments,
            results,
            metrics_file,
            components,
            extras=extras,
            model_id=str(output_dir),
        )
    return record


def save_pretraining_folder(
    output_dir, trainer, model, tokenizer, arguments: dict, results: dict, joint_batch: dict | None = None
) -> None:
    """Save a pre-training run (``run_pretrain.py``): the model and tokenizer, ``pretrain_results.json``, the run
    record and card (family ``ssp_pretraining``, loaded with ``AutoModelForPreTraining``); an ELECTRA's discriminator
    also in ``discriminator/`` (its own component). ``arguments``: the run's ``{"model", "data", "training"}``
    arguments. A joint (MSPP) model passes ``joint_batch``, the collated batch its reference outputs are computed on
    (the slot layout is not a tokenizer pair). Everything is written to a staging folder and renamed into place: a
    crash keeps the previous model."""
    from as2hub.hub_cards.run_record import component, record_run

    with staged_folder(output_dir) as staging:
        trainer.save_model(str(staging))
        tokenizer.save_pretrained(staging)
        components = {}
        if arguments["model"].model_type == "electra" and joint_batch is None:
            exported = model.export_discriminator(f"{staging}/discriminator")
            tokenizer.save_pretrained(f"{staging}/discriminator")
            auto = "AutoModelForSequenceClassification"
            components["discriminator"] = component("discriminator", exported, tokenizer, auto, trust_remote_code=False)
        write_json_atomic(f"{staging}/pretrain_results.json", results)
        overrides = {"return_mlm_logits": True}
        if joint_batch is not None:
            auto = "AutoModelForPreTraining"
            components = {
                "model": component(".", model, tokenizer, auto, config_overrides=overrides, batch=joint_batch)
            }
        record_run(
            staging,
            "ssp_pretraining",
            model,
            tokenizer,
            arguments,
            results,
            "pretrain_results.json",
            components,
            auto_class="AutoModelForPreTraining",
            config_overrides=overrides,
            model_id=str(output_dir),
        )


def write_cascade_predictions(output_dir, data, joint: np.ndarray, pairwise: list[float]) -> None:
    """Like ``test_predictions.jsonl`` of run_as2, in cascade order, each candidate with the ``stage`` that placed it
    and that stage's probability as ``score``."""
    lines = []
    for question_id, rows in questions_in_order(data["question_id"]).items():
        ranking = [
            {"candidate": data[row]["candidate"], "score": score, "label": data[row]["label"], "stage": stage}
            for row, score, stage in cascade_stages(rows, joint, pairwise)
        ]
        lines.append(
            json.dumps({"question_id": question_id, "question": data[rows[0]]["question"], "ranking": ranking})
        )
    write_text_atomic(Path(output_dir) / "test_predictions.jsonl", "\n".join(lines) + "\n")


def write_fv_predictions(output_dir, data, logits, label_names: tuple[str, ...]) -> None:
    """``test_predictions.jsonl`` of fact verification: every claim with its gold and predicted label and the
    probability of each label."""
    logits = np.asarray(logits[0] if isinstance(logits, (tuple, list)) else logits, dtype=np.float64)
    if logits.shape[-1] == 1:
        probabilities = 1 / (1 + np.exp(-logits))
    else:
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities = shifted / shifted.sum(-1, keepdims=True)
    lines = []
    for row, probs in zip(data, probabilities):
        scores = dict(zip(label_names, probs.tolist()))
        lines.append(
            json.dumps(
                {
                    "claim_id": row["claim_id"],
                    "claim": row["claim"],
                    "label": label_names[row["label"]],
                    "predicted": max(scores, key=scores.get) if len(label_names) == len(scores) else None,
                    "scores": scores,
                }
            )
        )
    write_text_atomic(Path(output_dir) / "test_predictions.jsonl", "\n".join(lines) + "\n")


def write_joint_predictions(output_dir, data, groups, logits, model, pairwise=None, label_names=None) -> None:
    """``test_predictions.jsonl`` of a joint run (``run_joint.py``) from the test set's slot ``logits``: fact
    verification (``label_names`` given), the cascade (``pairwise``: every row's pairwise score), or the joint
    ranking (as ``run_as2.py`` writes it)."""
    if label_names is not None:
        write_fv_predictions(output_dir, data, logits, label_names)
        return
    joint = row_scores(logits, list(groups["rows"]), len(data))
    if pairwise is not None:
        write_cascade_predictions(output_dir, data, joint, pairwise)
    else:
        write_ranked_predictions(output_dir, data, joint, model)


def write_qe_outputs(output_dir, evaluators: dict, trainer_state) -> None:
    """What a long-context QA run (``run_qe_contrastive.py``) leaves beside its model: from each evaluator's last call
    (``validation`` -> ``dev``, ``test``) the predictions in the official HotpotQA format (``{name}_predictions.json``)
    and every sentence's scores (``{name}_sentence_scores.jsonl``); and ``trainer_state.json`` (the logged losses)."""
    for split, name in (("validation", "dev"), ("test", "test")):
        if split in evaluators:
            write_json_atomic(f"{output_dir}/{name}_predictions.json", evaluators[split].predictions)
            lines = "".join(json.dumps(row) + "\n" for row in evaluators[split].sentence_scores)
            write_text_atomic(f"{output_dir}/{name}_sentence_scores.jsonl", lines)
    state = json.dumps(dataclasses.asdict(trainer_state), indent=2, sort_keys=True, default=str)
    write_text_atomic(f"{output_dir}/trainer_state.json", state + "\n")

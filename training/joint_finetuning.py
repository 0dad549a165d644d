"""Fine-tuning a joint multi-candidate model (``run_joint.py``): the fact-verification splits, the pairwise scores of
the ``top_k`` grouping, every split grouped into the k slots, the model and its tokenizer, and the metrics (AS2: MAP /
MRR / P@1 of the joint ranking, or of the cascade; FV: label accuracy and per-label recall). ``model_args`` and
``data_args`` are the command's ``JointModelArguments`` and ``JointDataArguments`` (any objects with their fields).
"""

import logging

import datasets
import numpy as np
from transformers import AutoConfig, AutoTokenizer

from as2hub.data_collators import AS2DataError, ScoreColumn, group_candidates, load_fv_data
from as2hub.data_collators.collators.tokenizer_training import embedded_tokenizer
from as2hub.data_collators.readers.joint_data import questions_in_order
from as2hub.inference.joint_ranking import cascade_order
from as2hub.metrics import compute_as2_metrics
from as2hub.modeling import JointMultiCandidateModel
from as2hub.modeling.joint_multicandidate import JointRobertaConfig
from as2hub.modeling.loading import load_checkpoint
from as2hub.training.checks import TINY_ROBERTA

logger = logging.getLogger("as2hub.run_joint")


# ---------------------------------------------------------------------------------------------------------- data


def load_fv_splits(data_args) -> dict:
    """The fact-verification splits (``--dataset``, ``--validation_file``, ``--test_file``), cut to
    ``--max_train_samples`` / ``--max_eval_samples`` claims."""
    labels = tuple(name.strip() for name in data_args.fv_labels.split(","))
    files = {"train": data_args.dataset, "validation": data_args.validation_file, "test": data_args.test_file}
    splits = {name: load_fv_data(path, labels) for name, path in files.items() if path}
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples}
    for name, limit in limits.items():
        if limit is not None and name in splits:
            split = splits[name]
            split.dataset = split.dataset.select(range(min(limit, len(split.dataset))))
    return splits


def pairwise_scores(data_args, splits: dict) -> dict[str, list[float]] | None:
    """Pairwise score of every row of every split (``top_k`` grouping); None for ``all``."""
    if data_args.grouping != "top_k":
        return None
    if data_args.score_column:
        files = {"train": data_args.dataset, "validation": data_args.validation_file, "test": data_args.test_file}
        return {
            name: ScoreColumn(files[name], data_args.score_column).scores_for(split.dataset, split.source)
            for name, split in splits.items()
        }
    if data_args.pairwise_model:
        from as2hub.inference.ranking import Ranker

        ranker = Ranker.from_pretrained(
            data_args.pairwise_model, max_length=data_args.pairwise_max_length, batch_size=data_args.pairwise_batch_size
        )
        scores = {}
        for name, split in splits.items():
            data = split.dataset
            logger.info("scoring %d %s rows with the pairwise model %s", len(data), name, data_args.pairwise_model)
            contexts = data["context"] if ranker.contextual else None
            scores[name] = ranker.score_pairs(data["question"], data["candidate"], contexts).tolist()
        return scores
    raise AS2DataError(
        f"{splits['train'].source}: --grouping top_k needs pairwise scores: pass --score_column (a column of the data "
        "files) or --pairwise_model (a saved pairwise ranker)"
    )


def fv_groups(split, num_candidates: int) -> datasets.Dataset:
    """Claims with their first k evidences (the count of dropped evidences is logged)."""
    data = split.dataset
    dropped = sum(max(0, len(evidences) - num_candidates) for evidences in data["evidences"])
    if dropped:
        logger.info(
            "%s: %d evidences beyond the first %d of their claim are not read", split.source, dropped, num_candidates
        )
    return data.map(lambda row: {"evidences": row["evidences"][:num_candidates]}, desc="first k evidences")


def group_splits(splits: dict, model, as2: bool, grouping: str, scores: dict | None, seed: int) -> dict:
    """Every split in the model's k slots: AS2 candidates grouped by ``grouping`` (with the pairwise ``scores`` for
    ``top_k``; training groups shuffled with ``seed``), or FV claims with their first k evidences. Logs the layout."""
    k = model.config.num_candidates
    if as2:
        groups = {
            name: group_candidates(
                split.dataset,
                k,
                grouping,
                scores[name] if scores else None,
                shuffle_seed=seed if name == "train" else None,
            )
            for name, split in splits.items()
        }
    else:
        groups = {name: fv_groups(split, k) for name, split in splits.items()}
    logger.info(
        "model %s (head %s, k=%d, L=%d, %d token types); %s",
        type(model).__name__,
        model.config.head,
        k,
        model.config.slot_length,
        model.config.type_vocab_size,
        ", ".join(f"{name}: {len(splits[name].dataset)} rows in {len(group)} inputs" for name, group in groups.items()),
    )
    return groups


# ---------------------------------------------------------------------------------------------------------- model


def load_tokenizer(model_args):
    """The tokenizer of ``--tokenizer_name``, the checkpoint or the config; without either, the embedded RoBERTa one."""
    if model_args.model_name_or_path or model_args.config_name:
        return AutoTokenizer.from_pretrained(
            model_args.tokenizer_name or model_args.model_name_or_path or model_args.config_name
        )
    return embedded_tokenizer("roberta")


def load_model(model_args, tokenizer, label_names: tuple[str, ...] | None):
    """The joint class of the checkpoint's backbone, from a checkpoint, a config (``--config_name``) or, with neither,
    a tiny RoBERTa from scratch."""
    overrides = {
        "num_candidates": model_args.num_candidates,
        "slot_length": model_args.slot_length,
        "head": model_args.head,
        "slot_positions": model_args.slot_positions,
        "token_type_init": model_args.token_type_init,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if model_args.first_token_attention is not None:  # else the joint config's default (or the folder's own)
        overrides["first_token_attention"] = model_args.first_token_attention
    if getattr(model_args, "unpadded", None) is not None:  # else the folder's own (an MSPP folder's pass) or off
        overrides["unpadded"] = bool(model_args.unpadded)
    if label_names is not None:
        overrides["id2label"] = dict(enumerate(label_names))
        overrides["label2id"] = {name: index for index, name in enumerate(label_names)}
    if model_args.model_name_or_path:
        model_class = JointMultiCandidateModel.checkpoint_class(model_args.model_name_or_path)
        return load_checkpoint(model_class, model_args.model_name_or_path, **overrides)
    if model_args.config_name:
        config = AutoConfig.from_pretrained(model_args.config_name)
        return JointMultiCandidateModel.from_config(config, vocab_size=len(tokenizer), **overrides)
    logger.warning("no --model_name_or_path: training a tiny joint RoBERTa from scratch (a demo, not a useful model)")
    config = JointRobertaConfig(vocab_size=len(tokenizer), **TINY_ROBERTA, **overrides)
    return JointMultiCandidateModel.from_config(config)


# ---------------------------------------------------------------------------------------------------------- metrics


def row_scores(logits: np.ndarray, group_rows: list[list[int]], num_rows: int) -> np.ndarray:
    """Per-row joint logits from per-group slot logits ``(groups, k)``; NaN for rows in no group."""
    logits = np.asarray(logits[0] if isinstance(logits, (tuple, list)) else logits, dtype=np.float64)
    scores = np.full(num_rows, np.nan)
    for group, rows in enumerate(group_rows):
        scores[rows] = logits[group, : len(rows)]
    return scores


def ranking_scores(joint: np.ndarray, question_ids: list[str], pairwise: list[float] | None) -> np.ndarray:
    """Scores whose per-question order is the system's ranking: the joint logits (``all``), or for the cascade the
    position in cascade order (top k by joint score, then the rest by pairwise score)."""
    if pairwise is None:
        return joint
    scores = np.empty(len(question_ids))
    for rows in questions_in_order(question_ids).values():
        order = cascade_stages(rows, joint, pairwise)
        for position, (row, _, _) in enumerate(order):
            scores[row] = len(rows) - position
    return scores


def cascade_stages(rows: list[int], joint: np.ndarray, pairwise: list[float]):
    """``(row, score, stage)`` of one question in cascade order (joint probability, or pairwise score below)."""
    local_pairwise = [pairwise[row] for row in rows]
    local_joint = {i: float(1 / (1 + np.exp(-joint[row]))) for i, row in enumerate(rows) if not np.isnan(joint[row])}
    return [(rows[i], score, stage) for i, score, stage in cascade_order(local_pairwise, local_joint)]


def make_as2_metrics(split_data: datasets.Dataset, groups: datasets.Dataset, pairwise: list[float] | None):
    question_ids, labels = list(split_data["question_id"]), np.asarray(split_data["label"])
    group_rows = list(groups["rows"])

    def compute_metrics(eval_prediction) -> dict:
        joint = row_scores(eval_prediction.predictions, group_rows, len(question_ids))
        return compute_as2_metrics(question_ids, ranking_scores(joint, question_ids, pairwise), labels)

    return compute_metrics


def make_fv_metrics(split_data: datasets.Dataset, label_names: tuple[str, ...]):
    gold = np.asarray(split_data["label"])

    def compute_metrics(eval_prediction) -> dict:
        predicted = fv_predictions(eval_prediction.predictions)
        metrics = {"accuracy": float((predicted == gold).mean()), "num_claims": len(gold)}
        for index, name in enumerate(label_names):
            chosen = gold == index
            if chosen.any():
                metrics[f"recall_{name.lower().replace(' ', '_')}"] = float((predicted[chosen] == index).mean())
        return metrics

    return compute_metrics


def joint_metrics(name: str, splits: dict, groups: dict, scores: dict | None, label_names: tuple[str, ...] | None):
    """Trainer ``compute_metrics`` of split ``name``: AS2 (``label_names`` None) or fact verification."""
    if label_names is None:
        return make_as2_metrics(splits[name].dataset, groups[name], scores[name] if scores else None)
    return make_fv_metrics(splits[name].dataset, label_names)


def fv_predictions(logits) -> np.ndarray:
    logits = np.asarray(logits[0] if isinstance(logits, (tuple, list)) else logits)
    return (logits[:, 0] > 0).astype(int) if logits.shape[-1] == 1 else logits.argmax(-1)

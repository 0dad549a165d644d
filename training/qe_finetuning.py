"""Fine-tuning :class:`~as2hub.modeling.LongformerWithQEContrastive` (``run_qe_contrastive.py``): the model and its
tokenizer (a Longformer checkpoint, a converted short encoder, a config, or a tiny one from scratch), the encoded
splits, and the metrics (decoded answers and supporting facts scored with the official HotpotQA metrics, plus the
question–evidence diagnostic). ``model_args`` and ``data_args`` are the command's ``ModelArguments`` and
``DataArguments`` (any objects with their fields).
"""

import functools
import logging

import numpy as np
from transformers import AutoTokenizer

from as2hub.data_collators.collators.hotpotqa_encoding import HotpotQAEncoder
from as2hub.data_collators.collators.hotpotqa_markers import add_marker_tokens
from as2hub.data_collators.collators.tokenizer_training import train_corpus_tokenizer
from as2hub.data_collators.readers.hotpotqa import to_official_gold
from as2hub.data_collators.readers.qe_tasks import default_question_types
from as2hub.metrics.hotpotqa import best_spans, hotpotqa_evaluate, qe_map, select_supporting_facts
from as2hub.modeling import LongformerQEConfig, LongformerWithQEContrastive
from as2hub.training.checks import ArgumentError, load_config

logger = logging.getLogger("as2hub.run_qe_contrastive")

TINY_LONGFORMER = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 256,
    "attention_window": 64,
    "max_position_embeddings": 2048 + 2,
}
LABEL_NAMES = ["sentence_labels", "paragraph_labels", "start_positions", "end_positions", "answer_type_labels"]
# Order of the predictions Trainer gathers: LongformerQEOutput's fields minus the config's keys_to_ignore_at_inference.
PREDICTION_FIELDS = (
    "start_logits",
    "end_logits",
    "answer_type_logits",
    "sentence_logits",
    "paragraph_logits",
    "sentence_similarity",
    "raw_similarity",
)


def qe_overrides(model_args) -> dict:
    """The config fields given on the command line (the others keep the checkpoint's or the default values)."""
    overrides = {
        name: getattr(model_args, name)
        for name in (
            "contrastive_weight",
            "qe_similarity",
            "qe_projection_dim",
            "qe_shared_temperature",
            "qe_learnable_temperature",
            "qe_single_projection",
            "qe_wrong_type_negatives",
            "question_type_key",
        )
        if getattr(model_args, name) is not None
    }
    if model_args.qe_temperatures is not None:
        values = [float(v) for v in model_args.qe_temperatures.split(",") if v.strip()]
        overrides["qe_temperatures"] = values[0] if len(values) == 1 else values
    if model_args.question_types is not None:
        overrides["question_types"] = [t.strip() for t in model_args.question_types.split(",") if t.strip()]
    return overrides


def build_qe_model(model_args, data_args, splits: dict):
    """(model, tokenizer): a checkpoint, a converted short encoder, a config from scratch, or the tiny default."""
    overrides = qe_overrides(model_args)
    types, key = default_question_types(data_args.dataset)
    fresh_heads = {"question_types": types, "question_type_key": key}
    source = model_args.model_name_or_path
    if source:
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or source)
        model_type = load_config(source).model_type
        if model_type == LongformerQEConfig.model_type:
            model = LongformerWithQEContrastive.from_pretrained(source, **overrides)
        elif model_type == "longformer":
            model = LongformerWithQEContrastive.from_pretrained(source, **{**fresh_heads, **overrides})
        else:
            logger.info("converting the %s checkpoint %s to a Longformer", model_type, source)
            model = LongformerWithQEContrastive.from_short_encoder(
                source,
                max_position_embeddings=model_args.max_position_embeddings,
                attention_window=model_args.attention_window,
                **{**fresh_heads, **overrides},
            )
            tokenizer.model_max_length = model_args.max_position_embeddings
    elif model_args.config_name:
        if not model_args.tokenizer_name:
            raise ArgumentError("--config_name needs --tokenizer_name")
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
        config = LongformerQEConfig.from_pretrained(
            model_args.config_name, vocab_size=len(tokenizer), **{**fresh_heads, **overrides}
        )
        model = LongformerWithQEContrastive(config)
    else:
        logger.warning("no --model_name_or_path: training a tiny Longformer from scratch (a demo, not a useful model)")
        documents = (
            {"paragraphs": [[row["question"]], *row["context"]["sentences"], row["context"]["title"]]}
            for row in splits["train"].dataset
        )
        tokenizer = train_corpus_tokenizer(documents, "roberta", model_args.tokenizer_vocab_size)
        config = LongformerQEConfig(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            sep_token_id=tokenizer.sep_token_id,
            **TINY_LONGFORMER,
            **{**fresh_heads, **overrides},
        )
        model = LongformerWithQEContrastive(config)
    add_marker_tokens(tokenizer, model, init=model_args.marker_init)
    return model, tokenizer


def attention_window(config) -> int:
    """The widest local attention window of ``config`` (inputs are padded to a multiple of it)."""
    window = config.attention_window
    return max(window) if isinstance(window, list) else window


def encode_splits(splits: dict, tokenizer, model, data_args) -> tuple[dict, int]:
    """(every split encoded as ``(features, infos, stats)``, the input length used). Training examples whose evidence
    the length would cut follow ``--truncated_evidence``; evaluation keeps them. Logs the model's QE settings."""
    config = model.config
    encoder_kwargs = {
        "max_question_length": data_args.max_question_length,
        "skip_invalid": data_args.skip_invalid_examples,
    }
    encoded = {}
    for name, split in splits.items():
        policy = data_args.truncated_evidence if name == "train" else "keep"
        encoder = HotpotQAEncoder.from_config(
            tokenizer, config, data_args.max_length, truncated_evidence=policy, **encoder_kwargs
        )
        encoded[name] = encoder.encode_dataset(split, description=f"{name} ({split.source})")
    max_length = encoder.max_length
    logger.info(
        "model %s: λ=%s, similarity %s, question types %s (field %r), τ %s; max_length %d",
        type(model).__name__,
        config.contrastive_weight,
        config.qe_similarity,
        config.question_types,
        config.question_type_key,
        config.qe_temperatures,
        max_length,
    )
    return encoded, max_length


def preprocess_logits_for_metrics(logits, labels, n_best: int = 20, max_answer_length: int = 30):
    """Keep what decoding needs: the best span of each row instead of the (batch, length) start / end logits."""
    logits = logits if isinstance(logits, tuple) else (logits,)
    if len(logits) != len(PREDICTION_FIELDS):
        raise ValueError(
            f"expected the model's {len(PREDICTION_FIELDS)} outputs {PREDICTION_FIELDS}, got {len(logits)}"
        )
    outputs = dict(zip(PREDICTION_FIELDS, logits))
    spans = best_spans(outputs.pop("start_logits"), outputs.pop("end_logits"), n_best, max_answer_length)
    return (spans, *outputs.values())


class QEEvaluator:
    """Trainer ``compute_metrics``: decodes answers and supporting facts, scores them with the official HotpotQA
    metrics, and adds the QE diagnostic (mAP of ranking sentences by question–sentence similarity, per type)."""

    def __init__(self, features, infos, gold_dataset, config, data_args):
        self.infos = infos
        self.gold = to_official_gold(gold_dataset)
        self.sentence_labels = features["sentence_labels"]
        self.question_types = [config.question_types[k] for k in features["question_type"]]
        self.answer_types = config.answer_types
        self.with_answers = any(example["answer"].strip() for example in self.gold)
        self.data_args = data_args
        self.predictions: dict = {}
        self.sentence_scores: list[dict] = []

    def __call__(self, eval_pred) -> dict:
        predictions = eval_pred.predictions
        spans, answer_type_logits, sentence_logits, _, similarity, raw_similarity = (np.asarray(p) for p in predictions)
        answers, facts, self.sentence_scores = {}, {}, []
        qe_rows = {"ids": [], "scores": [], "raw": [], "head": [], "labels": [], "types": []}
        for i, info in enumerate(self.infos):
            count = len(info.sentence_keys)
            probabilities = 1.0 / (1.0 + np.exp(-sentence_logits[i, :count].astype(np.float64)))
            chosen = select_supporting_facts(
                probabilities,
                info.sentence_paragraph,
                threshold=self.data_args.sp_threshold,
                top_n_per_paragraph=self.data_args.sp_top_n_per_paragraph,
            )
            facts[info.id] = [list(info.sentence_keys[j]) for j in chosen]
            answer = ""
            if self.with_answers:
                kind = self.answer_types[int(answer_type_logits[i].argmax())]
                answer = kind if kind in ("yes", "no") else info.span_text(int(spans[i, 0]), int(spans[i, 1]))
            answers[info.id] = answer
            qe_rows["ids"] += [info.id] * count
            qe_rows["scores"] += similarity[i, :count].tolist()
            qe_rows["raw"] += raw_similarity[i, :count].tolist()
            qe_rows["head"] += probabilities.tolist()
            qe_rows["labels"] += list(self.sentence_labels[i][:count])
            qe_rows["types"] += [self.question_types[i]] * count
            self.sentence_scores.append(
                {
                    "id": info.id,
                    "question_type": self.question_types[i],
                    "sentences": [list(key) for key in info.sentence_keys],
                    "labels": list(self.sentence_labels[i][:count]),
                    "sp_probability": probabilities.tolist(),
                    "qe_similarity": similarity[i, :count].tolist(),
                    "raw_cosine": raw_similarity[i, :count].tolist(),
                }
            )
        self.predictions = {"answer": answers, "sp": facts}
        metrics = hotpotqa_evaluate(self.predictions, self.gold)
        for name, scores in (("qe", "scores"), ("qe_raw_cosine", "raw"), ("sp_head", "head")):
            diagnostic = qe_map(qe_rows["ids"], qe_rows[scores], qe_rows["labels"], qe_rows["types"])
            metrics.update({f"{name}_{key}": value for key, value in diagnostic.items() if key != "num_questions"})
        return metrics


def qe_evaluators(encoded: dict, splits: dict, config, data_args) -> dict:
    """A :class:`QEEvaluator` for each evaluation split (``validation``, ``test``) there is."""
    return {
        name: QEEvaluator(encoded[name][0], encoded[name][1], splits[name].dataset, config, data_args)
        for name in ("validation", "test")
        if name in encoded
    }


def logits_preprocessor(data_args):
    """Trainer ``preprocess_logits_for_metrics`` with ``--n_best`` and ``--max_answer_length``."""
    return functools.partial(
        preprocess_logits_for_metrics, n_best=data_args.n_best, max_answer_length=data_args.max_answer_length
    )

"""The pre-training models ``run_pretrain.py`` trains: an ``*ForSSPPretraining`` model for the sentence-level
objectives, an ``*ForJointPretraining`` model (MLM + MSPP) for the grouped one, continued from a checkpoint, from a
config, or tiny from scratch; and their tokenizer. ``model_args`` is the command's ``PretrainModelArguments`` (any
object with its fields).
"""

import functools
import logging

from transformers import AutoTokenizer

from as2hub.data_collators import Objective, resolve_objective
from as2hub.data_collators.collators.tokenizer_training import train_corpus_tokenizer
from as2hub.modeling import JOINT_PRETRAINING_MODELS, SSP_MODELS
from as2hub.modeling.loading import load_checkpoint
from as2hub.training.checks import TINY_ROBERTA, ArgumentError, load_config

logger = logging.getLogger("as2hub.run_pretrain")

TOKENIZER_STYLE = {"roberta": "roberta", "bert": "bert", "electra": "bert"}


def build_tokenizer(model_args, documents):
    """The tokenizer of ``--tokenizer_name`` or the checkpoint; without either, one trained on ``documents`` in the
    style of ``--model_type`` (``--tokenizer_vocab_size``)."""
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(source)
    style = TOKENIZER_STYLE[model_args.model_type]
    return train_corpus_tokenizer(documents, style, model_args.tokenizer_vocab_size)


def default_unpadded(requested: bool | None, device) -> bool:
    """``--unpadded`` as given, else on: the unpadded pass computes the same losses and measured faster on every
    device it ran on: MiniLM DSLC steps on the CPU 1.55x (128 tokens) and 2.12x (256) in real tokens/s at one thread
    (``benchmarks/results/unpadded_pretrain_cpu.json``), MiniLM MSPP steps (the joint model's slots) 3.0-3.3x
    (``benchmarks/results/unpadded_mspp_*_cpu.json``), RoBERTa-base bf16 steps on an NVIDIA H200 1.23x and 1.64x
    eager, 1.75x and 2.34x with ``--torch_compile`` (``benchmarks/results/gpu_pretrain_unpadded_h200_*.json``)."""
    if requested is not None:
        return requested
    logger.info("--unpadded not given: on (training on %s)", device)
    return True


def _model_type(source: str) -> str | None:
    return load_config(source).model_type


def build_joint_model(model_args, tokenizer, objective: str | Objective):
    """A ``*ForJointPretraining`` model (MLM + MSPP): continued from a checkpoint, from a config, or tiny from scratch."""
    objective = resolve_objective(objective)
    if model_args.model_type not in JOINT_PRETRAINING_MODELS:
        raise ArgumentError(
            f"--model_type must be one of {sorted(JOINT_PRETRAINING_MODELS)}, got {model_args.model_type!r}"
        )
    if model_args.joint_head not in ("IE_k", "AE_k"):
        raise ArgumentError(
            f"--joint_head must be IE_k or AE_k (one MSPP label per candidate), got {model_args.joint_head!r}"
        )
    if model_args.generator_name_or_path:
        raise ArgumentError(
            "--generator_name_or_path does not apply to --objective mspp: the joint ELECTRA pre-trains an MLM head on "
            "the discriminator (ELECTRA's generator + replaced-token detection is in the SSP models)"
        )
    config_class, model_class = JOINT_PRETRAINING_MODELS[model_args.model_type]
    settings = {
        "num_candidates": model_args.num_candidates,
        "slot_length": model_args.slot_length,
        "head": model_args.joint_head,
        "slot_positions": model_args.slot_positions,
        "token_type_init": model_args.token_type_init,
        "pad_token_id": tokenizer.pad_token_id,
        "mlm_weight": model_args.mlm_weight,
        "mspp_weight": 0.0 if objective.mlm_only else model_args.cls_weight,
        "unpadded": bool(model_args.unpadded),  # None (main() not run): the config default
    }
    if model_args.first_token_attention is not None:  # else the joint config's default (or the folder's own)
        settings["first_token_attention"] = model_args.first_token_attention
    if model_args.model_name_or_path:
        return load_checkpoint(model_class, model_args.model_name_or_path, **settings)
    if model_args.config_name:
        config = config_class.from_pretrained(model_args.config_name, vocab_size=len(tokenizer), **settings)
    else:
        logger.warning("no --model_name_or_path: pre-training a tiny joint %s from scratch", model_args.model_type)
        config = config_class(vocab_size=len(tokenizer), **TINY_ROBERTA, **settings)
    return model_class(config)


def build_model(model_args, tokenizer, objective: str | Objective):
    """A ``*ForSSPPretraining`` model (``*ForJointPretraining`` for MSPP): continued from a checkpoint, from a
    config, or a tiny one from scratch."""
    objective = resolve_objective(objective)
    if objective.joint:
        return build_joint_model(model_args, tokenizer, objective)
    if model_args.model_type not in SSP_MODELS:
        raise ArgumentError(f"--model_type must be one of {sorted(SSP_MODELS)}, got {model_args.model_type!r}")
    config_class, model_class = SSP_MODELS[model_args.model_type]
    # Triplets need three segments; pairs keep the backbone's design (RoBERTa: one segment id, BERT/ELECTRA: two).
    num_segments = 3 if objective.triplet else (1 if model_args.model_type == "roberta" else 2)
    settings = {
        "num_segments": num_segments,
        "token_type_init": model_args.token_type_init,
        "sep_token_id": tokenizer.sep_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "mlm_weight": model_args.mlm_weight,
        "cls_weight": 0.0 if objective.mlm_only else model_args.cls_weight,
        "unpadded": bool(model_args.unpadded),  # None (main() not run): the config default
    }
    if model_args.model_type == "electra":
        settings["rtd_weight"] = model_args.rtd_weight
    if model_args.model_name_or_path:
        loader = None
        if model_args.model_type == "electra" and model_args.generator_name_or_path:
            loader = functools.partial(
                model_class.from_discriminator_and_generator, generator=model_args.generator_name_or_path
            )
        elif (
            model_args.model_type == "electra"
            and _model_type(model_args.model_name_or_path) != SSP_MODELS["electra"][0].model_type
        ):  # not a checkpoint of ours, which carries its generator
            logger.warning(
                "no --generator_name_or_path: the generator is a new random one with %.2g of the discriminator's "
                "width; the papers continue from the released generator",
                model_args.generator_size_ratio,
            )
            settings["generator_size_ratio"] = model_args.generator_size_ratio
        return load_checkpoint(model_class, model_args.model_name_or_path, loader=loader, **settings)
    if model_args.model_type == "electra":
        settings["generator_size_ratio"] = model_args.generator_size_ratio
    if model_args.config_name:
        # A stock config keeps its 1- or 2-row token-type table; the model grows it to num_segments on construction.
        config = config_class.from_pretrained(model_args.config_name, vocab_size=len(tokenizer), **settings)
    else:
        logger.warning("no --model_name_or_path: pre-training a tiny %s from scratch", model_args.model_type)
        config = config_class(vocab_size=len(tokenizer), **TINY_ROBERTA, **settings)
    return model_class(config)

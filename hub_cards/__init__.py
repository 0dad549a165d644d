"""Model cards for saved as2hub models (templates are the ``*.md`` files of this folder)."""

import json
from importlib import resources

CONTEXT_USAGE = (
    "With context (the sentences before and after the candidate), put it in the pair after the separator, or use "
    "`as2hub.modeling.ranking.context_text_pair(tokenizer, candidate, context)`; the model derives the three "
    "segments from the separators."
)


OBJECTIVE_DESCRIPTIONS = {
    "ssp": "are two spans from the same paragraph?",
    "sp": "is B the rest of A's paragraph?",
    "psd": "are two paragraphs from the same document?",
    "sdc": "are a and b from the same paragraph, given the document's first paragraph?",
    "dpc": "are a and b from the same paragraph, given the rest of that paragraph?",
    "dslc": "are a and b from the same paragraph, given the sentences around b?",
    "all": "a mix of SDC, DPC and DSLC",
    "all_pairs": "a mix of SSP, SP and PSD",
}


def _results_block(results: dict) -> str:
    shown = {k: v for k, v in results.items() if k not in ("train", "before")}
    return "```json\n" + json.dumps(shown, indent=2, default=float) + "\n```"


def _template(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


def render_pretraining_card(model, model_args, data_args, results: dict, model_id: str = "path/to/this/folder") -> str:
    objective = data_args.objective.removeprefix("mlm_")
    mlm_only = data_args.objective.startswith("mlm")
    return _template("ssp_pretraining.md").format(
        model_name=model_args.model_name_or_path or f"tiny {model_args.model_type}",
        architecture=type(model).__name__,
        objective=data_args.objective.upper(),
        objective_description=OBJECTIVE_DESCRIPTIONS.get(objective, "see the papers"),
        mlm_description="masked language modelling only (ablation: labels ignored)" if mlm_only else "masked LM",
        corpus=data_args.corpus or "Python's own documentation (pydoc_data.topics)",
        model_id=model_id,
        results=_results_block(results),
    )


def render_model_card(model, model_args, data_args, results: dict, model_id: str = "path/to/this/folder") -> str:
    config = model.config
    contextual = bool(getattr(config, "contextual", False))
    return _template("contextual_as2.md").format(
        model_name=getattr(model_args, "model_name_or_path", None) or "as2hub ranker",
        mode="contextual" if contextual else "pairwise",
        architecture=type(model).__name__,
        base_model=getattr(model_args, "model_name_or_path", None) or getattr(model_args, "config_name", ""),
        model_id=model_id,
        context_note=", given the sentences around the candidate" if contextual else "",
        context_usage=CONTEXT_USAGE if contextual else "",
        dataset=getattr(data_args, "dataset", "?"),
        max_length=getattr(data_args, "max_length", "?"),
        segments="question=0, candidate=1, context=2" if contextual else "the backbone's pair segments",
        results="```json\n"
        + json.dumps({k: v for k, v in results.items() if k != "train"}, indent=2, default=float)
        + "\n```",
    )


def render_longformer_qe_card(
    model, model_args, data_args, results: dict, max_length: int, model_id: str = "path/to/this/folder"
) -> str:
    config = model.config
    return _template("longformer_qe.md").format(
        model_name=getattr(model_args, "model_name_or_path", None) or "as2hub long-context QA model",
        architecture=type(model).__name__,
        base_model=getattr(model_args, "model_name_or_path", None) or "a tiny Longformer trained from scratch",
        contrastive_weight=config.contrastive_weight,
        qe_similarity=config.qe_similarity,
        question_types=", ".join(config.question_types),
        question_type_key=config.question_type_key,
        temperatures=", ".join(f"{t:g}" for t in config.qe_temperatures),
        model_id=model_id,
        dataset=getattr(data_args, "dataset", "?"),
        max_length=max_length,
        results=_results_block(results),
    )

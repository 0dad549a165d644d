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
    "mspp": "which of k sentences, read in one pass with it, come from its paragraph? (joint model)",
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
        finetune_script="run_joint" if objective == "mspp" else "run_as2",
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


def render_joint_card(model, model_args, data_args, results: dict, model_id: str = "path/to/this/folder") -> str:
    """The card of a joint multi-candidate model (``run_joint.py``): ranking (``*_k`` heads) or classification."""
    config = model.config
    ranking = bool(config.candidate_head)
    grouping = getattr(data_args, "grouping", None)
    if not ranking:
        grouping_note = ""
    elif grouping == "top_k":
        grouping_note = " (grouping `top_k`: trained and evaluated on the top k of a pairwise model, the cascade)"
    else:
        grouping_note = " (grouping `all`: every candidate, in groups of k)"
    return _template("joint_multicandidate.md").format(
        model_name=getattr(model_args, "model_name_or_path", None) or "as2hub joint model",
        pipeline_tag="text-ranking" if ranking else "text-classification",
        task_tag="answer-sentence-selection" if ranking else "fact-verification",
        architecture=type(model).__name__,
        base_model=getattr(model_args, "model_name_or_path", None)
        or getattr(model_args, "config_name", None)
        or "tiny, from scratch",
        head=config.head,
        task_description="answer sentence selection (one score per candidate)"
        if ranking
        else "fact verification (one label per claim)",
        query_name="a question" if ranking else "a claim",
        candidate_name="candidate answers" if ranking else "evidence sentences",
        num_candidates=config.num_candidates,
        slot_length=config.slot_length,
        sequence_length=config.sequence_length,
        positions="positions restarted in every slot"
        if config.slot_positions == "per_slot"
        else "positions 0..(k+1)·L−1",
        pipeline_task="joint-ranking" if ranking else "joint-classification",
        model_id=model_id,
        query_key="question" if ranking else "claim",
        query_example='"who wrote hamlet?"' if ranking else '"Hamlet is a comedy."',
        candidate_key="candidates" if ranking else "evidences",
        candidates_example='["Hamlet is a play.", "Shakespeare wrote Hamlet."]'
        if ranking
        else '["Hamlet is a tragedy by Shakespeare."]',
        output_example="[{'candidate': 'Shakespeare wrote Hamlet.', 'score': ..., 'index': 1}, ...]"
        if ranking
        else "[{'label': '" + config.id2label[0] + "', 'score': ...}, ...]",
        usage_note="More than k candidates are read k at a time. To re-rank the top k of a pairwise ranker (the cascade): "
        "`as2hub.modeling.joint_ranking.JointRanker(model, tokenizer, pairwise=Ranker(...)).rank(question, candidates)`."
        if ranking
        else "The first k evidences are read. Labels: "
        + ", ".join(config.id2label[i] for i in sorted(config.id2label))
        + ".",
        dataset=getattr(data_args, "dataset", "?"),
        grouping=grouping_note,
        results=_results_block(results),
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

"""Model cards for saved as2hub models (templates are the ``*.md`` files of this folder)."""

import json
from importlib import resources

CONTEXT_USAGE = (
    "With context (the sentences before and after the candidate), put it in the pair after the separator, or use "
    "`as2hub.modeling.ranking.context_text_pair(tokenizer, candidate, context)`; the model derives the three "
    "segments from the separators."
)


def render_model_card(model, model_args, data_args, results: dict, model_id: str = "path/to/this/folder") -> str:
    config = model.config
    contextual = bool(getattr(config, "contextual", False))
    template = resources.files(__package__).joinpath("contextual_as2.md").read_text()
    return template.format(
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

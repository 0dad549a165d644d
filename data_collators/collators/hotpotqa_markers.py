"""The HotpotQA marker tokens (``[q]``, ``<t>``, ``<sent>``, ...; Caciularu et al., NAACL 2022, appendix B.2): added to
a tokenizer, with the model's embedding table grown to match.

    >>> add_marker_tokens(tokenizer, model, init="random")  # doctest: +SKIP
    >>> marker_token_ids(tokenizer)["sentence"]  # doctest: +SKIP
"""

from __future__ import annotations

import logging

import torch

from as2hub.modeling.longformer_qe.configuration_longformer_qe import MARKER_TOKENS

logger = logging.getLogger(__name__)


def marker_token_ids(tokenizer, markers: dict[str, str] | None = None) -> dict[str, int]:
    """Marker name -> token id in ``tokenizer`` (after :func:`add_marker_tokens`)."""
    markers = markers or MARKER_TOKENS
    added = tokenizer.get_added_vocab()
    missing = [text for text in markers.values() if text not in added]
    if missing:
        raise ValueError(
            f"the tokenizer has no marker tokens {missing}: call add_marker_tokens(tokenizer, model) first"
        )
    return {name: added[text] for name, text in markers.items()}


@torch.no_grad()
def add_marker_tokens(tokenizer, model=None, init: str = "random", markers: dict[str, str] | None = None):
    """Add the input markers (:data:`~as2hub.modeling.longformer_qe.MARKER_TOKENS`) to ``tokenizer`` as special
    tokens and, with ``model``, resize its embeddings and record the ids in ``model.config.marker_token_ids``.

    New rows are drawn from normal(0, initializer_range) (``init="random"``, appendix B.2: "randomly initialized") or
    set to the mean of the existing rows (``init="mean"``). Markers the tokenizer already has keep their rows, so
    calling this on a saved model's tokenizer changes nothing. A marker equal to one of the backbone's own special
    tokens or to an ordinary vocabulary entry is refused. Returns marker name -> id.
    """
    if init not in ("random", "mean"):
        raise ValueError(f"init must be 'random' or 'mean', got {init!r}")
    markers = markers or MARKER_TOKENS
    added = tokenizer.get_added_vocab()
    backbone_specials = set(tokenizer.all_special_tokens)
    new = []
    for text in markers.values():
        if text in backbone_specials:
            raise ValueError(
                f"marker {text!r} collides with the tokenizer's own special tokens {sorted(backbone_specials)}"
            )
        if text in added:
            continue
        if text in tokenizer.get_vocab():
            raise ValueError(f"marker {text!r} is already an ordinary token of the vocabulary: pass other markers=...")
        new.append(text)
    if new:
        tokenizer.add_tokens(new, special_tokens=True)
    ids = marker_token_ids(tokenizer, markers)
    if model is not None:
        old_rows = model.get_input_embeddings().weight.shape[0]
        if len(tokenizer) > old_rows:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            weight = model.get_input_embeddings().weight
            if init == "random":
                weight[old_rows:].normal_(mean=0.0, std=model.config.initializer_range)
            else:
                weight[old_rows:] = weight[:old_rows].mean(dim=0)
        model.config.marker_token_ids = dict(ids)
    return ids


__all__ = [
    "add_marker_tokens",
    "marker_token_ids",
]

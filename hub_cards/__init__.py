"""Model cards and publishing: the layer between the models and the run scripts.

- ``cards``: model cards built from a run's own records (``build_model_card``, one :class:`Family` entry per model
  family, registered in ``families``);
- ``run_record``: the ``as2hub_run.json`` record a run script writes beside its model (``record_run``);
- ``run_outputs``: a run's Hub folder and ranked predictions, written atomically (``save_hub_folder``);
- ``push``: the checked, single-commit upload (``push_run_folder``, ``HubPush``, the ``as2hub-push`` command's core);
- ``fresh_load_check``: the script that loads a staged folder in a fresh process without as2hub before a push.

    >>> from as2hub.hub_cards import build_model_card
    >>> card = build_model_card(record, metrics, model_id="me/minilm-wikiqa")  # doctest: +SKIP
"""

from . import families  # noqa: E402,F401,I001  (registers the families of this package)
from .cards import (
    BIBTEX,
    FAMILIES,
    NOT_EVALUATED,
    CardContext,
    DatasetRef,
    Family,
    Metric,
    build_model_card,
    eval_results,
    get_family,
    register_family,
)

__all__ = [
    "BIBTEX",
    "FAMILIES",
    "NOT_EVALUATED",
    "CardContext",
    "DatasetRef",
    "Family",
    "Metric",
    "build_model_card",
    "eval_results",
    "get_family",
    "register_family",
]

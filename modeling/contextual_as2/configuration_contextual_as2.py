"""Configurations of the contextual AS2 cross-encoders.

Each backbone keeps its stock config fields and adds three:

- ``contextual`` (bool): inputs are (question, candidate, context) with three segment ids (0, 1, 2). When False the
  model is the paper's pairwise baseline and keeps the backbone's original segment design (RoBERTa: one segment id,
  BERT/ELECTRA: two).
- ``token_type_init`` ("scratch" | "copy"): how the rows added when a checkpoint's token-type table is grown to three
  rows are initialised: normal(0, initializer_range) as in Di Liello et al. (2023), or copied from the last pretrained
  row.
- ``sep_token_id``: the separator used to infer segments when ``token_type_ids`` are not passed (pipelines and
  sentence-transformers' CrossEncoder send none).

Two more, optional, for the layer cascade (Soldaini & Moschitti, ACL 2020; ``inference/CASCADE.md``):

- ``cascade_layers`` (list of int, default None): a classifier head after each of these encoder layers (1-based,
  increasing, below ``num_hidden_layers``); ranking with ``cascade_drop`` drops the weakest candidates at each head.
- ``cascade_loss`` ("sample" | "mean" | "heads"): how the heads train. "sample" (the paper's multi-task training)
  back-propagates one uniformly drawn classifier's loss per step, the final one included; "mean" averages them all;
  "heads" trains the cascade heads alone (the final head's loss is left out: the cheap step on an already fine-tuned
  ranker, with the encoder frozen, so the full model's scores stay as they were).

The default head has a single logit whose label is ``"correct"``, so ``pipeline("text-classification")`` returns the
probability that a candidate is correct and ``CrossEncoder.rank`` works as is. ``num_labels=2`` gives the two-way
softmax head of the paper; both are trained with cross-entropy.

Example:
    >>> from transformers import AutoConfig
    >>> config = ContextualBertConfig.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> config.contextual, config.id2label  # doctest: +SKIP
    (True, {0: 'correct'})
"""

from huggingface_hub.dataclasses import strict
from transformers import BertConfig, ElectraConfig, RobertaConfig

from .hub_common import check_cascade, check_token_type_init_and_name_labels

NUM_CONTEXTUAL_SEGMENTS = 3


@strict
class ContextualRobertaConfig(RobertaConfig):
    """`RobertaConfig` for :class:`RobertaForContextualAS2` (model type ``contextual_roberta``)."""

    model_type = "contextual_roberta"

    contextual: bool = True
    token_type_init: str = "scratch"
    sep_token_id: int | None = 2
    type_vocab_size: int = NUM_CONTEXTUAL_SEGMENTS
    cascade_layers: list[int] | None = None
    cascade_loss: str = "sample"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        check_token_type_init_and_name_labels(self, kwargs)
        check_cascade(self)


@strict
class ContextualElectraConfig(ElectraConfig):
    """`ElectraConfig` for :class:`ElectraForContextualAS2` (model type ``contextual_electra``)."""

    model_type = "contextual_electra"

    contextual: bool = True
    token_type_init: str = "scratch"
    sep_token_id: int | None = 102
    type_vocab_size: int = NUM_CONTEXTUAL_SEGMENTS
    cascade_layers: list[int] | None = None
    cascade_loss: str = "sample"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        check_token_type_init_and_name_labels(self, kwargs)
        check_cascade(self)


@strict
class ContextualBertConfig(BertConfig):
    """`BertConfig` for :class:`BertForContextualAS2` (model type ``contextual_bert``): any BERT/MiniLM checkpoint."""

    model_type = "contextual_bert"

    contextual: bool = True
    token_type_init: str = "scratch"
    sep_token_id: int | None = 102
    type_vocab_size: int = NUM_CONTEXTUAL_SEGMENTS
    cascade_layers: list[int] | None = None
    cascade_loss: str = "sample"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        check_token_type_init_and_name_labels(self, kwargs)
        check_cascade(self)

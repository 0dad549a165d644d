"""Configuration of :class:`LongformerWithQEContrastive` (model type ``longformer_qe``).

A stock ``LongformerConfig`` plus the heads and the question–evidence (QE) contrastive term of Caciularu, Dagan,
Goldberger, Cohan, *Long Context Question Answering via Supervised Contrastive Learning* (NAACL 2022):

- ``answer_types``: classes of the answer-type head on the first token (HotpotQA: ``span``, ``yes``, ``no``). Records
  whose answer type is ``none`` (no answer at all, e.g. the WikiQA evidence task) are left out of that head and of the
  span loss.
- ``question_types`` / ``question_type_key``: the question types k of §3.2, each with its own projections W_k^S, W_k^Q
  and temperature τ_k, and which record field names an example's type: ``"answer_type"`` (the paper's HotpotQA setup:
  yes / no / span, table 1) or ``"type"`` (the record's own ``type`` field, e.g. HotpotQA's bridge / comparison).
- ``contrastive_weight`` λ: ``loss = (1 - λ) · L_QA + λ · L_QE`` (§3.1); ``0`` is the paper's baseline.
- ``qe_similarity``: ``"projected_cosine"`` (Eq. 3, the paper's method), ``"bilinear"`` (Eq. 2, s^T W_k q),
  ``"cosine"`` or ``"dot"`` on the raw marker states (table 4's ablations).
- ``qe_projection_dim``: output size of the non-square projections (appendix C searched d, d/2, d/4, d/8; ``None``
  = d, the hidden size); ``qe_dropout`` (0.1 in appendix C) is applied to the projected vectors.
- ``qe_temperatures``: τ_k per question type (a single number is used for every type). The paper tunes one τ_k per
  type over {0.2, 0.4, 0.6, 0.8, 1.0} (appendix C) and finds one shared τ worse (table 4, -0.4 joint F1), but publishes
  no tuned values; the default gives each type its own τ, the grid's values in order (``span`` 0.2, ``yes`` 0.4,
  ``no`` 0.6; :data:`TEMPERATURE_GRID`), so that the per-type setting is what runs unless asked otherwise and the
  shared-τ ablation is a real change. Tune them per dataset as the paper did. ``qe_shared_temperature`` (the table 4
  ablation: the first type's τ for every type; or pass one number) and ``qe_learnable_temperature`` (τ trained, in log
  space, from the configured values).
- ``qe_single_projection`` (ablation: W_k = W) and ``qe_wrong_type_negatives`` (the evidence projected with the other
  types' matrices counts as extra negatives, §3.2; table 4's last row turns it off).
- ``span_loss_weight``, ``answer_type_loss_weight``, ``sentence_loss_weight``, ``paragraph_loss_weight``: L_QA is their
  weighted sum.
- ``marker_token_ids``: the ids of the input markers (``[q]``, ``<t>``, ``<sent>``, ...; see :data:`MARKER_TOKENS`),
  written when the markers are added to a tokenizer. With them the model finds the question, sentence and paragraph
  markers, the global attention and the answer-span positions in plain ``input_ids``.

Example:
    >>> config = LongformerQEConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
    ...                             attention_window=16)
    >>> config.question_types, config.qe_temperatures, config.qe_projection_dim
    (['span', 'yes', 'no'], [0.2, 0.4, 0.6], 32)
    >>> LongformerQEConfig(hidden_size=32, num_attention_heads=2, qe_temperatures=0.2).qe_temperatures  # one τ
    [0.2, 0.2, 0.2]
"""

from huggingface_hub.dataclasses import strict
from transformers import LongformerConfig

MARKER_TOKENS: dict[str, str] = {
    "question_start": "[q]",
    "question_end": "[/q]",
    "document_start": "<doc-s>",
    "document_end": "</doc-s>",
    "title_start": "<t>",
    "title_end": "</t>",
    "sentence_start": "<sent>",
    "sentence_end": "</sent>",
}
"""Marker name -> token text. The paper's appendix B.2 writes ``<s>``/``</s>`` for sentences; those are RoBERTa's own
special tokens, so sentences use ``<sent>``/``</sent>`` here."""

DEFAULT_ANSWER_TYPES = ("span", "yes", "no")
QE_SIMILARITIES = ("projected_cosine", "bilinear", "cosine", "dot")
QUESTION_TYPE_KEYS = ("answer_type", "type")
TEMPERATURE_GRID = (0.2, 0.4, 0.6, 0.8, 1.0)
"""The paper's τ search grid (appendix C); the default τ_k of question type k is ``TEMPERATURE_GRID[k % 5]``."""


def default_temperatures(num_types: int) -> list[float]:
    """One τ per question type, the grid's values in order: distinct for up to five types."""
    return [TEMPERATURE_GRID[k % len(TEMPERATURE_GRID)] for k in range(num_types)]


@strict
class LongformerQEConfig(LongformerConfig):
    """`LongformerConfig` for :class:`LongformerWithQEContrastive` (see the module docstring for the added fields)."""

    model_type = "longformer_qe"
    # Loss terms and encoder extras are not predictions: Trainer must not gather them at evaluation.
    keys_to_ignore_at_inference = [
        "qa_loss",
        "qe_loss",
        "span_loss",
        "answer_type_loss",
        "sentence_loss",
        "paragraph_loss",
        "type_similarity",
        "hidden_states",
        "attentions",
        "global_attentions",
    ]

    answer_types: list[str] | None = None
    question_types: list[str] | None = None
    question_type_key: str = "answer_type"
    contrastive_weight: float = 0.2
    qe_similarity: str = "projected_cosine"
    qe_projection_dim: int | None = None
    qe_dropout: float = 0.1
    qe_temperatures: list[float] | float | None = None
    qe_shared_temperature: bool = False
    qe_learnable_temperature: bool = False
    qe_single_projection: bool = False
    qe_wrong_type_negatives: bool = True
    span_loss_weight: float = 1.0
    answer_type_loss_weight: float = 1.0
    sentence_loss_weight: float = 1.0
    paragraph_loss_weight: float = 1.0
    marker_token_ids: dict[str, int] | None = None

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # A stock Longformer config.json loaded into this class must not keep reporting "longformer".
        self.model_type = type(self).model_type
        if self.answer_types is None:
            self.answer_types = list(DEFAULT_ANSWER_TYPES)
        if self.question_types is None:
            self.question_types = list(self.answer_types)
        self.answer_types, self.question_types = list(self.answer_types), list(self.question_types)
        for name in ("answer_types", "question_types"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{name} must be a non-empty list of distinct names, got {values}")
        if "none" in self.answer_types:
            raise ValueError("answer_types must not contain 'none': records without an answer skip that head")
        if self.question_type_key not in QUESTION_TYPE_KEYS:
            raise ValueError(f"question_type_key must be one of {QUESTION_TYPE_KEYS}, got {self.question_type_key!r}")
        if self.qe_similarity not in QE_SIMILARITIES:
            raise ValueError(f"qe_similarity must be one of {QE_SIMILARITIES}, got {self.qe_similarity!r}")
        if not 0.0 <= self.contrastive_weight <= 1.0:
            raise ValueError(f"contrastive_weight (λ) must be in [0, 1], got {self.contrastive_weight}")
        if self.qe_projection_dim is None:
            self.qe_projection_dim = self.hidden_size
        if self.qe_projection_dim <= 0:
            raise ValueError(f"qe_projection_dim must be positive, got {self.qe_projection_dim}")
        temperatures = self.qe_temperatures
        if temperatures is None:
            temperatures = default_temperatures(len(self.question_types))
        if isinstance(temperatures, int | float):
            temperatures = [float(temperatures)] * len(self.question_types)
        temperatures = [float(t) for t in temperatures]
        if len(temperatures) != len(self.question_types):
            raise ValueError(
                f"qe_temperatures has {len(temperatures)} values for {len(self.question_types)} question types "
                f"{self.question_types}: give one per type (or a single number)"
            )
        if any(t <= 0 for t in temperatures):
            raise ValueError(f"qe_temperatures must be positive, got {temperatures}")
        self.qe_temperatures = temperatures
        if self.marker_token_ids is not None:
            unknown = set(self.marker_token_ids) - set(MARKER_TOKENS)
            if unknown:
                raise ValueError(
                    f"marker_token_ids has unknown markers {sorted(unknown)}; known: {list(MARKER_TOKENS)}"
                )

    @property
    def num_question_types(self) -> int:
        return len(self.question_types)

"""Configurations of the structure-aware continued pre-training models (MLM/RTD + a sentence-level binary task).

Each backbone keeps its stock config fields and adds:

- ``num_segments`` (int): segment ids the inputs use: 2 for pair objectives (SSP, SP, PSD of Di Liello et al., 2022),
  3 for the triplet objectives (a, b, c) of Di Liello et al. (2023). A loaded checkpoint whose token-type table has
  fewer rows is grown to ``num_segments`` rows; a model built from scratch gets ``type_vocab_size = num_segments``.
- ``token_type_init`` ("scratch" | "copy"): how grown rows are initialised (as in the contextual AS2 models).
- ``sep_token_id``: separator used to infer segments when ``token_type_ids`` are not passed.
- ``mlm_weight`` / ``cls_weight`` (and ``rtd_weight`` for ELECTRA): the total loss is their weighted sum.
  Papers: 1.0 MLM + 1.0 CLS for RoBERTa/BERT; 1.0 MLM + 50.0 RTD + 1.0 CLS for ELECTRA. ``cls_weight=0`` (or no
  ``sentence_labels``) is the MLM-only ablation.
- ``return_mlm_logits`` (bool): return the full ``(batch, length, vocab)`` MLM logits. Off by default: the LM head then
  only runs on masked positions, which saves most of the activation memory of pre-training.
- ``unpadded`` (bool): training forwards run the encoder's dense layers on the real tokens only, padding left out
  (``unpadding.py``; ELECTRA's generator too). The weights and the losses are those of the padded pass; evaluation,
  export and scoring keep the padded pass unless a forward asks with ``unpadded=True`` (``SSPTrainer``'s held-out
  evaluation does when the flag is on). Off by default in the config; ``run_pretrain.py`` turns it on (faster on
  the CPU and on an H200; ``--unpadded true|false`` chooses).

The sentence-level head has a single logit labelled ``"correct"`` (binary cross-entropy), the head of the contextual
AS2 models, so it loads into them (and into stock ``*ForSequenceClassification`` with ``num_labels=1``).

Example:
    >>> config = SSPRobertaConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    ...                           intermediate_size=37, num_segments=3)
    >>> config.type_vocab_size, config.num_labels, config.id2label
    (3, 1, {0: 'correct'})
    >>> electra = SSPElectraConfig(hidden_size=768, embedding_size=768, num_attention_heads=12, intermediate_size=3072)
    >>> electra.generator_config.hidden_size, electra.generator_config.intermediate_size  # 1/3 of the discriminator
    (256, 1024)
"""

from huggingface_hub.dataclasses import strict
from transformers import BertConfig, ElectraConfig, RobertaConfig

try:
    from transformers.configuration_utils import SubConfigSpec
except ImportError:  # transformers < 5.20 (the GPU image has 5.17): sub-configs are a key -> class table
    SubConfigSpec = None

from .hub_common import check_token_type_init_and_name_labels

SAMPLING_METHODS = ("multinomial", "gumbel")
# Fields of an ELECTRA discriminator config that the generator copies unchanged when it is built from a size ratio.
_GENERATOR_SHARED_FIELDS = (
    "vocab_size",
    "embedding_size",
    "num_hidden_layers",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "pad_token_id",
)


def _ssp_post_init(config, kwargs):
    """Shared validation, table size and label defaults; called after the stock post-init."""
    if config.num_segments not in (1, 2, 3):
        raise ValueError(f"num_segments must be 1, 2 or 3, got {config.num_segments}")
    if config.type_vocab_size is None:
        # Built from scratch: one row per segment. A loaded config keeps its size; the model grows it after loading.
        config.type_vocab_size = config.num_segments
    check_token_type_init_and_name_labels(config, kwargs)


@strict
class SSPRobertaConfig(RobertaConfig):
    """`RobertaConfig` for :class:`RobertaForSSPPretraining` (model type ``ssp_roberta``)."""

    model_type = "ssp_roberta"

    num_segments: int = 2
    token_type_init: str = "scratch"
    sep_token_id: int | None = 2
    type_vocab_size: int | None = None
    mlm_weight: float = 1.0
    cls_weight: float = 1.0
    return_mlm_logits: bool = False
    unpadded: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        _ssp_post_init(self, kwargs)


@strict
class SSPBertConfig(BertConfig):
    """`BertConfig` for :class:`BertForSSPPretraining` (model type ``ssp_bert``): BERT, MiniLM, ... checkpoints."""

    model_type = "ssp_bert"

    num_segments: int = 2
    token_type_init: str = "scratch"
    sep_token_id: int | None = 102
    type_vocab_size: int | None = None
    mlm_weight: float = 1.0
    cls_weight: float = 1.0
    return_mlm_logits: bool = False
    unpadded: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        _ssp_post_init(self, kwargs)


@strict
class SSPElectraConfig(ElectraConfig):
    """`ElectraConfig` of the discriminator for :class:`ElectraForSSPPretraining` (model type ``ssp_electra``).

    The generator's config is the sub-config ``generator_config`` (an ``ElectraConfig``, saved nested in
    ``config.json``). When it is not given it is derived from the discriminator: same embeddings and depth, with
    ``generator_size_ratio`` of its hidden size, attention heads and feed-forward size (1/3: ELECTRA-Base's 256-wide
    generator for a 768-wide discriminator). Generator and discriminator share the word, position and token-type
    embeddings, so ``generator_config.embedding_size`` must equal ``embedding_size``.

    ``sampling`` picks how replacements are drawn from the generator at masked positions (without gradient):
    ``"multinomial"`` (``torch.multinomial``) or ``"gumbel"`` (Gumbel-max, as the original implementation), both at
    ``generator_temperature``.
    """

    model_type = "ssp_electra"
    if SubConfigSpec is not None:
        # transformers builds an ElectraConfig from a dict (config.json) before __post_init__; None stays None.
        sub_configs_defaults = {"generator_config": SubConfigSpec(config_class=ElectraConfig, optional=True)}
    else:
        # Older transformers only name the sub-config's class; __post_init__ below builds it from a dict.
        sub_configs = {"generator_config": ElectraConfig}

    num_segments: int = 2
    token_type_init: str = "scratch"
    sep_token_id: int | None = 102
    type_vocab_size: int | None = None
    mlm_weight: float = 1.0
    rtd_weight: float = 50.0
    cls_weight: float = 1.0
    return_mlm_logits: bool = False
    unpadded: bool = False
    generator_config: dict | ElectraConfig | None = None
    generator_size_ratio: float = 1 / 3
    sampling: str = "multinomial"
    generator_temperature: float = 1.0

    def __post_init__(self, **kwargs):
        if SubConfigSpec is None and isinstance(self.generator_config, dict):
            # A dict from config.json; built before the stock post-init, which walks the sub-configs.
            self.generator_config = ElectraConfig(**self.generator_config)
        super().__post_init__(**kwargs)
        _ssp_post_init(self, kwargs)
        if self.sampling not in SAMPLING_METHODS:
            raise ValueError(f"sampling must be one of {SAMPLING_METHODS}, got {self.sampling!r}")
        if self.generator_config is None:
            self.generator_config = self.derive_generator_config()
        if self.generator_config.embedding_size != self.embedding_size:
            raise ValueError(
                "the generator shares the discriminator's embeddings: generator_config.embedding_size "
                f"({self.generator_config.embedding_size}) must equal embedding_size ({self.embedding_size})"
            )
        # The shared tables have one size: the generator follows the discriminator.
        self.generator_config.type_vocab_size = self.type_vocab_size

    def derive_generator_config(self) -> ElectraConfig:
        """A generator config with ``generator_size_ratio`` of the discriminator's width (heads keep their size)."""
        ratio = self.generator_size_ratio
        if not 0 < ratio <= 1:
            raise ValueError(f"generator_size_ratio must be in (0, 1], got {ratio}")
        head_size = self.hidden_size // self.num_attention_heads
        num_heads = max(1, round(self.num_attention_heads * ratio))
        return ElectraConfig(
            **{name: getattr(self, name) for name in _GENERATOR_SHARED_FIELDS},
            hidden_size=num_heads * head_size,
            num_attention_heads=num_heads,
            intermediate_size=max(1, round(self.intermediate_size * ratio)),
        )

    def discriminator_config(self) -> ElectraConfig:
        """A stock ``ElectraConfig`` of the discriminator (with the sentence-level labels), for export."""
        own_fields = {
            "num_segments",
            "token_type_init",
            "mlm_weight",
            "rtd_weight",
            "cls_weight",
            "return_mlm_logits",
            "unpadded",
            "generator_config",
            "generator_size_ratio",
            "sampling",
            "generator_temperature",
            "auto_map",
            "model_type",
            "architectures",
            "transformers_version",
        }
        values = {key: value for key, value in self.to_dict().items() if key not in own_fields}
        config = ElectraConfig(**values)
        config.architectures = ["ElectraForSequenceClassification"]
        return config

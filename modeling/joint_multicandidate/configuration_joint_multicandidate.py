"""Configurations of the joint multi-candidate models (Di Liello, Garg, Soldaini, Moschitti, NAACL 2022, section 3.2).

Each backbone keeps its stock config fields and adds:

- ``num_candidates`` (k, default 5) and ``slot_length`` (L, default 64): the input is k+1 slots of L tokens, slot 0
  the question (or claim), slots 1..k the candidates (or evidences): (k+1)·L = 384 tokens by default.
- ``head``: ``"IE_1"`` (first token of slot 0) or ``"AE_1"`` (mean of the k+1 slot embeddings) give ``num_labels``
  logits per input (fact verification); ``"IE_k"`` (a shared head on each candidate's first token) or ``"AE_k"`` (a
  shared head on ``[E_0; E_i]``) give one logit per candidate (answer sentence selection, MSPP) (section 3.3).
- ``slot_positions``: ``"global"`` numbers the positions 0..(k+1)·L-1 as the paper does (section 3.2);
  ``"per_slot"`` restarts them at every slot, so that a candidate's representation does not depend on its slot
  position (with equal candidate token-type rows, permuting the candidates then permutes their scores).
- ``first_token_attention``: ``"all"`` lets every token attend to the whole input, as the paper does; ``"own_slot"``
  (as2hub) lets the first token of each candidate slot, the one the heads read, attend only to its own slot and to the
  question slot, while every other token still attends to the whole input, so candidates still inform each other
  through their tokens. Why: in a pretrained encoder the k+1 first tokens attend mostly to one another and come out
  the same (cosine 1.0000 between slots for all-MiniLM-L6-v2), so with ``"all"`` the heads start with one score for
  every candidate and the model needs MSPP or many epochs to tell them apart (the paper's "convergence issues",
  section 4.3). With ``"own_slot"`` each first token starts as a pairwise cross-encoder's ``[CLS]`` would
  (``benchmarks/bench_joint_learnability.py``). The default is ``"own_slot"`` for a new joint model (this config is
  the one owner of the default: the run scripts pass the flag only when it is given); a joint folder saved before
  the field existed keeps its behaviour, the paper's ``"all"``. Pass ``first_token_attention="all"`` for the paper.
  The evidence behind the default (as2hub's ``benchmarks/results/REPRODUCE.md``, table 004 at ``cpu_learn``):
  all-MiniLM-L6-v2 fine-tuned as an ``AE_k`` joint model on the whole WikiQA train set, 2 epochs, no MSPP, reached
  clean-test MAP 0.658 ± 0.013 with ``"own_slot"`` and 0.453 ± 0.078 with ``"all"`` over 8 seeds (+0.205, 95%
  interval over seeds and questions [+0.146, +0.269]; ``"all"`` ranked at chance, 0.386, in 3 of the 8 seeds); the
  pairwise cross-encoder with the same recipe reached 0.693 ± 0.005. The default stays only while ``"own_slot"`` is at
  least as good as ``"all"`` within the interval: it is, by far.
- ``token_type_init`` ("scratch" | "copy" | ...): how the rows added when a checkpoint's token-type table is grown to
  k+1 rows (slot i has token type i) are initialised (see ``hub_common.grow_token_type_embeddings``).
- ``mlm_weight`` / ``mspp_weight``: weights of the two losses of MLM + MSPP pre-training (1:1 in the paper, appendix
  B.1); only the ``*ForJointPretraining`` models read them.
- ``unpadded`` (bool): training forwards run the encoder's dense layers on the filled tokens only, the padding of
  every slot and the empty slots left out (``unpadding.py``); attention keeps the slot layout and its pattern. Same
  weights, same losses as the padded pass; evaluation, export and scoring keep the padded pass unless a forward
  asks with ``unpadded=True`` (``SSPTrainer``'s held-out evaluation does when the flag is on). Off by default in
  the config; ``run_pretrain.py --objective mspp`` turns it on (``--unpadded false`` keeps the padded pass).

``*_k`` heads have one logit per candidate labelled ``"correct"`` (binary cross-entropy); ``*_1`` heads keep the
config's ``id2label`` (e.g. ``{0: "SUPPORTS", 1: "REFUTES", 2: "NOT ENOUGH INFO"}``).

Example:
    >>> config = JointRobertaConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    ...                             intermediate_size=37, num_candidates=3, slot_length=16, head="IE_k")
    >>> config.type_vocab_size, config.sequence_length, config.id2label
    (4, 64, {0: 'correct'})
"""

from huggingface_hub.dataclasses import strict
from transformers import BertConfig, ElectraConfig, RobertaConfig

from .hub_common import POSITIVE_LABEL, TOKEN_TYPE_INITS

HEADS = ("IE_1", "AE_1", "IE_k", "AE_k")
CANDIDATE_HEADS = ("IE_k", "AE_k")
SLOT_POSITIONS = ("global", "per_slot")
FIRST_TOKEN_ATTENTION = ("all", "own_slot")
LEGACY_FIRST_TOKEN_ATTENTION = "all"  # joint folders saved before the field existed
# Every slot holds at least a first special token, one token of text and a closing special token.
MIN_SLOT_LENGTH = 3


def check_joint_config(config, positions: bool = True) -> None:
    """Raise ValueError when the joint fields are invalid.

    The configs check their own fields; the models, when they are built, also check that (k+1)·L positions fit the
    position table (``positions=True``), so that a stock checkpoint's config loads with any k and L.
    """
    if config.token_type_init not in TOKEN_TYPE_INITS:
        raise ValueError(f"token_type_init must be one of {TOKEN_TYPE_INITS}, got {config.token_type_init!r}")
    if config.head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {config.head!r}")
    if config.slot_positions not in SLOT_POSITIONS:
        raise ValueError(f"slot_positions must be one of {SLOT_POSITIONS}, got {config.slot_positions!r}")
    if config.first_token_attention not in FIRST_TOKEN_ATTENTION:
        raise ValueError(
            f"first_token_attention must be one of {FIRST_TOKEN_ATTENTION}, got {config.first_token_attention!r}"
        )
    if (
        isinstance(config.num_candidates, bool)
        or not isinstance(config.num_candidates, int)
        or config.num_candidates < 1
    ):
        raise ValueError(f"num_candidates (k) must be an integer >= 1, got {config.num_candidates!r}")
    if isinstance(config.slot_length, bool) or not isinstance(config.slot_length, int):
        raise ValueError(f"slot_length (L) must be an integer, got {config.slot_length!r}")
    if config.slot_length < MIN_SLOT_LENGTH:
        raise ValueError(
            f"slot_length={config.slot_length} is shorter than the special tokens: every slot needs a first and a "
            f"closing special token plus at least one token of text ({MIN_SLOT_LENGTH})"
        )
    if not positions:
        return
    needed = config.sequence_length if config.slot_positions == "global" else config.slot_length
    available = config.max_position_embeddings - config.position_offset
    if needed > available:
        raise ValueError(
            f"(num_candidates + 1) x slot_length = {config.num_candidates + 1} x {config.slot_length} needs "
            f"{needed} positions ({config.slot_positions} positions) but the model has {available} "
            f"(max_position_embeddings={config.max_position_embeddings}); lower num_candidates or slot_length, or "
            "use slot_positions='per_slot' (positions restart at every slot)"
        )


def _joint_post_init(config, kwargs: dict) -> None:
    """Validation and defaults shared by the three backbones (called after the stock post-init)."""
    check_joint_config(config, positions=False)
    if config.type_vocab_size is None:
        # Built from scratch: one row per slot. A loaded config keeps its size; the model grows the table.
        config.type_vocab_size = config.num_candidates + 1
    if config.head in CANDIDATE_HEADS:
        requested = kwargs.get("num_labels")
        if requested not in (None, 1):
            raise ValueError(
                f"head {config.head!r} gives one logit per candidate (binary cross-entropy): num_labels must be 1, "
                f"got {requested}"
            )
        config.id2label = {0: POSITIVE_LABEL}
        config.label2id = {POSITIVE_LABEL: 0}


class _JointFields:
    """Properties shared by the three configs."""

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """As transformers', except that keyword arguments naming config fields (``num_candidates=3``, ...) are
        given to the constructor rather than set afterwards, so that they are validated together."""
        fields = getattr(cls, "__dataclass_fields__", {})
        config_dict = {**config_dict, **{key: kwargs.pop(key) for key in list(kwargs) if key in fields}}
        if str(config_dict.get("model_type", "")).startswith("joint_"):
            # A joint folder saved before the field existed was built with the paper's full attention.
            config_dict.setdefault("first_token_attention", LEGACY_FIRST_TOKEN_ATTENTION)
        return super().from_dict(config_dict, **kwargs)

    @property
    def sequence_length(self) -> int:
        """(k+1)·L, the length of every input."""
        return (self.num_candidates + 1) * self.slot_length

    @property
    def candidate_head(self) -> bool:
        """Whether the head gives one logit per candidate (``IE_k`` / ``AE_k``)."""
        return self.head in CANDIDATE_HEADS

    @property
    def position_offset(self) -> int:
        """Index of position 0 in the position table (RoBERTa reserves the first pad_token_id + 1 rows)."""
        return 0


@strict
class JointRobertaConfig(_JointFields, RobertaConfig):
    """`RobertaConfig` for :class:`RobertaForJointMultiCandidate` (model type ``joint_roberta``)."""

    model_type = "joint_roberta"

    num_candidates: int = 5
    slot_length: int = 64
    head: str = "AE_k"
    slot_positions: str = "global"
    first_token_attention: str = "own_slot"
    token_type_init: str = "scratch"
    type_vocab_size: int | None = None
    mlm_weight: float = 1.0
    mspp_weight: float = 1.0
    return_mlm_logits: bool = False
    unpadded: bool = False

    @property
    def position_offset(self) -> int:
        # RoBERTa numbers positions from padding_idx + 1 (fairseq's make_positions).
        return (self.pad_token_id if self.pad_token_id is not None else 1) + 1

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        _joint_post_init(self, kwargs)


@strict
class JointElectraConfig(_JointFields, ElectraConfig):
    """`ElectraConfig` for :class:`ElectraForJointMultiCandidate` (model type ``joint_electra``)."""

    model_type = "joint_electra"

    num_candidates: int = 5
    slot_length: int = 64
    head: str = "AE_k"
    slot_positions: str = "global"
    first_token_attention: str = "own_slot"
    token_type_init: str = "scratch"
    type_vocab_size: int | None = None
    mlm_weight: float = 1.0
    mspp_weight: float = 1.0
    return_mlm_logits: bool = False
    unpadded: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        _joint_post_init(self, kwargs)


@strict
class JointBertConfig(_JointFields, BertConfig):
    """`BertConfig` for :class:`BertForJointMultiCandidate` (model type ``joint_bert``): BERT, MiniLM, ... checkpoints."""

    model_type = "joint_bert"

    num_candidates: int = 5
    slot_length: int = 64
    head: str = "AE_k"
    slot_positions: str = "global"
    first_token_attention: str = "own_slot"
    token_type_init: str = "scratch"
    type_vocab_size: int | None = None
    mlm_weight: float = 1.0
    mspp_weight: float = 1.0
    return_mlm_logits: bool = False
    unpadded: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        _joint_post_init(self, kwargs)

"""Joint multi-candidate models: a question (or claim) and k candidates read in ONE transformer pass.

Di Liello, Garg, Soldaini, Moschitti, "Paragraph-based Transformer Pre-training for Multi-Sentence Inference",
NAACL 2022. The input is k+1 slots of L tokens (section 3.2; see ``joint_layout.py``): slot 0 is the question or
claim, slots 1..k the candidates, each ``<s> x </s>`` (the backbone's own CLS/SEP) padded or truncated to L; token type
ids 0..k (the checkpoint's table grown to k+1 rows) and positions 0..(k+1)·L-1, or restarted per slot. Both are derived
here when they are not passed (pipelines pass none). E_i is the output of the first token of slot i (for BERT-family
backbones through the pretrained pooler, as BertForSequenceClassification reads [CLS]). With
``first_token_attention="own_slot"`` (as2hub's run scripts' default; the paper's is ``"all"``) the first token of each
candidate slot attends only to its own slot and the question slot (see the config's docstring). Heads (section 3.3):

- ``IE_1``: a classifier on E_0; ``AE_1``: a classifier on the mean of E_0..E_k (over the filled slots): one label per
  input, ``logits`` of shape ``(batch, num_labels)`` (fact verification);
- ``IE_k``: a classifier shared by the candidates on E_i; ``AE_k``: on ``[E_0; E_i]``: one logit per candidate,
  ``logits`` of shape ``(batch, k)`` (answer sentence selection, MSPP pre-training).

A question with fewer than k candidates leaves empty slots (attention mask 0): nothing attends to them, their logits
are set to the dtype's minimum (so they rank last), and they never enter the loss, whatever their labels.

Parameter names are the stock ones (``roberta.*`` / ``bert.*`` / ``electra.*``, ``classifier.*``), so any RoBERTa,
BERT/MiniLM or ELECTRA checkpoint loads, and an MSPP pre-trained folder (``*ForJointPretraining``, which adds the
stock MLM head) loads into the fine-tuning class. Heads whose shape differs from the checkpoint's (``AE_k`` reads
2·hidden features, ``*_k`` has one output) are initialised anew: ``from_pretrained`` defaults to
``ignore_mismatched_sizes=True`` and transformers lists them.

This folder is the model's remote code (torch, transformers and its siblings only): a saved model loads anywhere with
``AutoModel.from_pretrained(folder, trust_remote_code=True)``, and ``pipeline("joint-ranking", model=folder,
trust_remote_code=True)`` (``"joint-classification"`` for ``*_1`` heads) runs the pipeline saved with it.

Example:
    >>> model = JointMultiCandidateModel.from_pretrained(  # doctest: +SKIP
    ...     "sentence-transformers/all-MiniLM-L6-v2", num_candidates=5, slot_length=64, head="AE_k")
    >>> type(model).__name__  # doctest: +SKIP
    'BertForJointMultiCandidate'
    >>> model(**batch).logits.shape  # batch from as2hub.data_collators.JointCollator  # doctest: +SKIP
    torch.Size([8, 5])
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers.activations import get_activation
from transformers.modeling_outputs import ModelOutput
from transformers.models.bert.modeling_bert import BertModel, BertOnlyMLMHead, BertPreTrainedModel
from transformers.models.electra.modeling_electra import (
    ElectraGeneratorPredictions,
    ElectraModel,
    ElectraPreTrainedModel,
)
from transformers.models.roberta.modeling_roberta import RobertaLMHead, RobertaModel, RobertaPreTrainedModel

from .configuration_joint_multicandidate import (
    CANDIDATE_HEADS,
    HEADS,
    JointBertConfig,
    JointElectraConfig,
    JointRobertaConfig,
    check_joint_config,
)
from .hub_common import TokenTypeGrowthMixin
from .joint_layout import IGNORE_INDEX

# Imported so that the pipeline file is saved with the model (transformers ships a model file's relative imports);
# ``config.custom_pipelines`` points at it.
from .pipeline_joint_multicandidate import JointRankingPipeline
from .pretraining_heads import SSPPretrainingOutput, masked_lm_loss, masked_mean
from .unpadding import unpadded_encode, wants_unpadded

PIPELINE_TASKS = {True: "joint-ranking", False: "joint-classification"}  # keyed by config.candidate_head


@dataclass
class JointMultiCandidateOutput(ModelOutput):
    """Output of the ``*ForJointMultiCandidate`` models.

    Args:
        loss: binary cross-entropy over the filled candidate slots whose label is not -100 (``*_k`` heads), or the
            classification loss of the input (``*_1``: cross-entropy, binary with one label).
        logits: ``(batch, k)``, one logit per candidate (``*_k``; empty slots hold the dtype's minimum), or
            ``(batch, num_labels)`` (``*_1``).
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


class SlotClassificationHead(nn.Module):
    """``dropout -> dense -> activation -> dropout -> out_proj`` on the last dimension.

    The structure and parameter names of RobertaClassificationHead / ElectraClassificationHead, applied to slot
    embeddings (``(..., in_features)``) instead of the first token of the sequence.
    """

    def __init__(self, in_features: int, hidden_size: int, num_outputs: int, dropout: float, activation: str):
        super().__init__()
        self.dense = nn.Linear(in_features, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.activation = get_activation(activation)
        self.out_proj = nn.Linear(hidden_size, num_outputs)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.dropout(features)
        x = self.activation(self.dense(x))
        return self.out_proj(self.dropout(x))


def _classifier_dropout(config) -> float:
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


# Attention kernels that take an additive (batch, 1, T, T) mask (flash attention reads only padding masks).
OWN_SLOT_ATTENTION_KERNELS = ("eager", "sdpa", "flex_attention")


class JointMultiCandidateMixin(TokenTypeGrowthMixin):
    """What the backbones share: slot token types and positions, slot embeddings, the four heads, losses, saving.

    Subclasses build the encoder (``self.<base_model_prefix>``) and ``self.classifier`` and implement
    ``_slot_embeddings(last_hidden_state) -> (batch, k+1, hidden)`` and ``_classify(features) -> logits``.
    """

    AUTO_CLASSES = ("AutoModel",)

    # Our losses are means over their own items: Trainer must scale them for gradient accumulation itself.
    accepts_loss_kwargs = False

    def target_token_types(self) -> int:
        """One token type per slot: k+1 rows."""
        return self.config.num_candidates + 1

    def _head_in_features(self) -> int:
        return 2 * self.config.hidden_size if self.config.head == "AE_k" else self.config.hidden_size

    def _head_outputs(self) -> int:
        return 1 if self.config.candidate_head else self.config.num_labels

    # ------------------------------------------------------------------ inputs

    def slot_inputs(
        self, input_ids=None, inputs_embeds=None, attention_mask=None, token_type_ids=None, position_ids=None
    ):
        """``(token_type_ids, position_ids, filled)``: the ones given, else derived from the fixed layout.

        ``filled`` is ``(batch, k+1)``, True where the slot's first token is attended to. Raises ``ValueError`` when
        the sequence length is not (k+1)·L.
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None:
            raise ValueError("pass input_ids or inputs_embeds")
        if attention_mask is not None and attention_mask.dim() != 2:
            raise ValueError(
                "the joint model takes a (batch, (k+1)·L) padding mask and builds its own attention pattern; got an "
                f"attention_mask of shape {tuple(attention_mask.shape)}"
            )
        batch, length = reference.shape[:2]
        config = self.config
        k, L = config.num_candidates, config.slot_length
        if length != config.sequence_length:
            raise ValueError(
                f"the joint model reads (k+1) x L = {k + 1} x {L} = {config.sequence_length} tokens per input, got "
                f"{length}: build inputs with the model's slot layout (as2hub's JointCollator, the joint-ranking "
                "pipeline, or joint_layout.SlotLayout)"
            )
        device = reference.device
        if token_type_ids is None:
            token_type_ids = torch.arange(k + 1, device=device).repeat_interleave(L).expand(batch, -1)
        if position_ids is None:
            if config.slot_positions == "per_slot":
                positions = torch.arange(L, device=device).repeat(k + 1)
            else:
                positions = torch.arange(config.sequence_length, device=device)
            position_ids = (positions + config.position_offset).expand(batch, -1)
        if attention_mask is None:
            filled = torch.ones(batch, k + 1, dtype=torch.bool, device=device)
        else:
            filled = attention_mask[:, ::L].to(device) > 0
        return token_type_ids, position_ids, filled

    def slot_attention_pattern(self, attention_mask: torch.Tensor | None, batch: int, device) -> torch.Tensor:
        """The boolean ``(batch, 1, T, T)`` pattern of ``first_token_attention="own_slot"`` (T = (k+1)·L), True where a
        query may attend to a key.

        Query rows of the first token of candidate slots 1..k keep only the keys of their own slot and of the question
        slot; every other row keeps every key. Padded keys (``attention_mask`` 0) are masked in every row.
        """
        config = self.config
        index = torch.arange(config.sequence_length, device=device)
        slot = index // config.slot_length
        candidate_first = (index % config.slot_length == 0) & (slot > 0)
        allowed = ~candidate_first[:, None] | (slot[:, None] == slot[None, :]) | (slot[None, :] == 0)
        if attention_mask is None:
            keys = torch.ones(batch, config.sequence_length, dtype=torch.bool, device=device)
        else:
            keys = attention_mask.to(device) > 0
        return allowed[None, None] & keys[:, None, None, :]

    def slot_attention_mask(self, attention_mask: torch.Tensor | None, batch: int, device) -> torch.Tensor:
        """:meth:`slot_attention_pattern` as the additive ``(batch, 1, T, T)`` mask the stock attention kernels take."""
        allowed = self.slot_attention_pattern(attention_mask, batch, device)
        return torch.zeros(allowed.shape, dtype=self.dtype, device=device).masked_fill(
            ~allowed, torch.finfo(self.dtype).min
        )

    def _encode(self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs):
        token_type_ids, position_ids, filled = self.slot_inputs(
            input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids
        )
        if wants_unpadded(self, attention_mask, kwargs):
            # The dense layers on the filled tokens only; attention keeps the slot layout and its pattern.
            reference = input_ids if input_ids is not None else inputs_embeds
            pattern = None
            if self.config.first_token_attention == "own_slot":
                pattern = self.slot_attention_pattern(attention_mask, reference.shape[0], reference.device)
            outputs = unpadded_encode(
                self.base_model, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pattern
            )
            return outputs, self._slot_embeddings(outputs.last_hidden_state), filled
        if self.config.first_token_attention == "own_slot":
            implementation = getattr(self.config, "_attn_implementation", None) or "eager"
            if implementation not in OWN_SLOT_ATTENTION_KERNELS:
                raise ValueError(
                    f"first_token_attention='own_slot' builds a (batch, 1, T, T) attention mask, which the "
                    f"{implementation!r} attention kernel cannot take: load the model with attn_implementation in "
                    f"{OWN_SLOT_ATTENTION_KERNELS}"
                )
            reference = input_ids if input_ids is not None else inputs_embeds
            attention_mask = self.slot_attention_mask(attention_mask, reference.shape[0], reference.device)
        outputs = self.base_model(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        return outputs, self._slot_embeddings(outputs.last_hidden_state), filled

    # ------------------------------------------------------------------ heads and losses

    def head_logits(self, slot_embeddings: torch.Tensor, filled: torch.Tensor) -> torch.Tensor:
        """Logits of ``config.head`` from the slot embeddings ``(batch, k+1, hidden)`` and the filled slots."""
        head = self.config.head
        if head == "IE_1":
            features = slot_embeddings[:, 0]
        elif head == "AE_1":
            weights = filled.unsqueeze(-1).to(slot_embeddings.dtype)
            features = (slot_embeddings * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        elif head == "IE_k":
            features = slot_embeddings[:, 1:]
        elif head == "AE_k":
            k = slot_embeddings.shape[1] - 1
            features = torch.cat([slot_embeddings[:, :1].expand(-1, k, -1), slot_embeddings[:, 1:]], dim=-1)
        else:
            raise ValueError(f"unknown head {head!r}: use one of {HEADS}")
        logits = self._classify(features)
        if head in CANDIDATE_HEADS:
            logits = logits.squeeze(-1).masked_fill(~filled[:, 1:], torch.finfo(logits.dtype).min)
        return logits

    def candidate_loss(self, logits: torch.Tensor, labels: torch.Tensor, filled: torch.Tensor):
        """(loss, accuracy) over filled candidate slots whose label is not -100; (None, None) when there is none.

        Binary cross-entropy on the per-candidate logits ``(batch, k)``; labels ``(batch, k)`` in {0, 1, -100}.
        """
        labels = labels.to(logits.device)
        if labels.shape != logits.shape:
            raise ValueError(
                f"labels of a {self.config.head} head have one entry per candidate slot, shape {tuple(logits.shape)}; "
                f"got {tuple(labels.shape)}"
            )
        active = (labels != IGNORE_INDEX) & filled[:, 1:].to(labels.device)
        if torch.compiler.is_compiling():  # one graph: no branch on the data (a batch with no label gives 0)
            values, targets = logits.float().masked_fill(~active, 0.0), labels.clamp(min=0).float()
            losses = nn.functional.binary_cross_entropy_with_logits(values, targets, reduction="none")
            correct = ((values > 0).float() == targets).float()
            return masked_mean(losses, active), masked_mean(correct, active).detach()
        if not active.any():
            return None, None
        selected, targets = logits[active].float(), labels[active].float()
        loss = nn.functional.binary_cross_entropy_with_logits(selected, targets)
        accuracy = ((selected > 0).float() == targets).float().mean().detach()
        return loss, accuracy

    def input_loss(self, logits: torch.Tensor, labels: torch.Tensor):
        """(loss, accuracy) of ``*_1`` heads: cross-entropy over the labels, binary with a single label; -100 ignored."""
        labels = labels.to(logits.device).view(-1).long()
        active = labels != IGNORE_INDEX
        if not active.any():
            return None, None
        logits, labels = logits[active], labels[active]
        if logits.shape[-1] == 1:
            loss = nn.functional.binary_cross_entropy_with_logits(logits.view(-1).float(), labels.float())
            predictions = (logits.view(-1) > 0).long()
        else:
            loss = nn.functional.cross_entropy(logits.float(), labels)
            predictions = logits.argmax(-1)
        return loss, (predictions == labels).float().mean().detach()

    # ------------------------------------------------------------------ scores

    @torch.inference_mode()
    def score(self, **inputs) -> torch.Tensor:
        """Probabilities: ``(batch, k)`` that each candidate is correct (0 for empty slots) for ``*_k`` heads,
        ``(batch, num_labels)`` label probabilities for ``*_1`` heads."""
        inputs.pop("labels", None)
        return self.logits_to_scores(self(**inputs).logits.float())

    def logits_to_scores(self, logits: torch.Tensor) -> torch.Tensor:
        if self.config.candidate_head or logits.shape[-1] == 1:
            return torch.sigmoid(logits)
        return logits.softmax(-1)

    # ------------------------------------------------------------------ loading and saving

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Any checkpoint of the backbone (stock, SSP, contextual or joint); see the module docstring.

        Heads whose shape differs from the checkpoint's are initialised anew (``ignore_mismatched_sizes=True``
        unless you pass it), and the token-type table is grown to k+1 rows.
        """
        kwargs.setdefault("ignore_mismatched_sizes", True)
        return super().from_pretrained(*args, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Saves with a complete ``auto_map`` and the custom pipeline registered in ``config.custom_pipelines``
        (pre-training folders register none: their outputs are losses, not rankings)."""
        if isinstance(self, JointPretrainingForward):
            if hasattr(self.config, "custom_pipelines"):
                del self.config.custom_pipelines
            return super().save_pretrained(save_directory, *args, **kwargs)
        task = PIPELINE_TASKS[self.config.candidate_head]
        self.config.custom_pipelines = {
            task: {
                "impl": f"{JointRankingPipeline.__module__.rsplit('.', 1)[-1]}.{JointRankingPipeline.__name__}",
                "pt": ["AutoModel"],
                "type": "text",
            }
        }
        return super().save_pretrained(save_directory, *args, **kwargs)


class JointMultiCandidateForward:
    """``forward`` of the fine-tuning classes (MSPP pre-training classes have their own)."""

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> JointMultiCandidateOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, (k+1) * L)`):
            k+1 slots of L tokens (``joint_layout.SlotLayout``).
        token_type_ids, position_ids (*optional*):
            Derived from the layout when omitted: slot i has token type i; positions per ``config.slot_positions``.
        labels (*optional*):
            ``*_k`` heads: `(batch_size, k)`, 1 for a correct candidate, 0 otherwise, -100 to ignore (empty slots
            are ignored whatever their label). ``*_1`` heads: `(batch_size,)` label indices.
        """
        return_dict = kwargs.pop("return_dict", None)
        outputs, slot_embeddings, filled = self._encode(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs
        )
        logits = self.head_logits(slot_embeddings, filled)
        loss = None
        if labels is not None:
            if self.config.candidate_head:
                loss, _ = self.candidate_loss(logits, labels, filled)
                if loss is None:  # nothing to learn from in this batch: a zero that keeps the graph
                    loss = logits.masked_fill(~filled[:, 1:], 0.0).sum() * 0.0
            else:
                loss, _ = self.input_loss(logits, labels)
        output = JointMultiCandidateOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output.to_tuple() if return_dict is False else output


class JointPretrainingForward:
    """MLM + MSPP (Multi-Sentences in Paragraph Prediction, section 3.4): ``mlm_weight·MLM + mspp_weight·MSPP``.

    The MSPP head is the model's ``IE_k`` or ``AE_k`` head; the MLM head runs on the masked positions only.
    """

    def _check_pretraining_head(self):
        if not self.config.candidate_head:
            raise ValueError(
                f"MSPP pre-training predicts one label per candidate: use head IE_k or AE_k, not {self.config.head}"
            )

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sentence_labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SSPPretrainingOutput:
        r"""
        labels: MLM targets ``(batch, (k+1)·L)``, -100 where no prediction is made.
        sentence_labels: ``(batch, k)``, 1 where candidate i comes from the paragraph of slot 0's sentence, 0
            otherwise, -100 for empty slots (or the MLM-only ablation).
        unpadded: True runs the dense layers on the real tokens only in evaluation too (``unpadding.wants_unpadded``).
        """
        outputs, slot_embeddings, filled = self._encode(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs
        )
        hidden = outputs.last_hidden_state
        cls_logits = self.head_logits(slot_embeddings, filled)
        mlm_loss = mlm_logits = cls_loss = cls_accuracy = None
        if labels is not None:
            mlm_loss, mlm_logits, _ = masked_lm_loss(
                hidden, labels, self._mlm_head, self.config.vocab_size, self.config.return_mlm_logits
            )
        elif self.config.return_mlm_logits:
            mlm_logits = self._mlm_head(hidden)
        # Compiled, the MLM-only ablation (mspp_weight 0) computes no MSPP loss, as eager mode does with its -100 labels.
        ablated = torch.compiler.is_compiling() and self.config.mspp_weight == 0
        if sentence_labels is not None and not ablated:
            cls_loss, cls_accuracy = self.candidate_loss(cls_logits, sentence_labels, filled)
        total = None
        for weight, loss in ((self.config.mlm_weight, mlm_loss), (self.config.mspp_weight, cls_loss)):
            if loss is not None and weight != 0:
                total = weight * loss if total is None else total + weight * loss
        return SSPPretrainingOutput(
            loss=total,
            mlm_loss=mlm_loss,
            cls_loss=cls_loss,
            cls_logits=cls_logits,
            mlm_logits=mlm_logits,
            cls_accuracy=cls_accuracy,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# ---------------------------------------------------------------------------------------------------- RoBERTa


class _RobertaJoint(JointMultiCandidateMixin):
    def _build(self, config):
        check_joint_config(config)
        self.roberta = RobertaModel(config, add_pooling_layer=False)
        self.classifier = SlotClassificationHead(
            self._head_in_features(), config.hidden_size, self._head_outputs(), _classifier_dropout(config), "tanh"
        )

    def _slot_embeddings(self, hidden):
        return hidden[:, :: self.config.slot_length]

    def _classify(self, features):
        return self.classifier(features)


class RobertaForJointMultiCandidate(JointMultiCandidateForward, _RobertaJoint, RobertaPreTrainedModel):
    """Joint RoBERTa (the paper's backbone) over ``<s> q </s>`` + k × ``<s> c </s>`` slots; loads any RoBERTa checkpoint."""

    config_class = JointRobertaConfig

    def __init__(self, config: JointRobertaConfig):
        super().__init__(config)
        self._build(config)
        self.post_init()


class RobertaForJointPretraining(JointPretrainingForward, _RobertaJoint, RobertaPreTrainedModel):
    """Joint RoBERTa with the stock MLM head (``lm_head``, tied) for MLM + MSPP; loads RobertaForMaskedLM checkpoints."""

    config_class = JointRobertaConfig
    AUTO_CLASSES = ("AutoModel", "AutoModelForPreTraining")
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: JointRobertaConfig):
        super().__init__(config)
        self._check_pretraining_head()
        self._build(config)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def _mlm_head(self, hidden):
        return self.lm_head(hidden)


# ---------------------------------------------------------------------------------------------------- BERT family


class _BertJoint(JointMultiCandidateMixin):
    def _build(self, config):
        check_joint_config(config)
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(self._head_in_features(), self._head_outputs())

    def _slot_embeddings(self, hidden):
        # Every slot's [CLS] goes through the pretrained pooler, as BertForSequenceClassification reads its [CLS].
        first = hidden[:, :: self.config.slot_length]
        batch, slots, size = first.shape
        return self.bert.pooler(first.reshape(batch * slots, 1, size)).view(batch, slots, size)

    def _classify(self, features):
        return self.classifier(self.dropout(features))


class BertForJointMultiCandidate(JointMultiCandidateForward, _BertJoint, BertPreTrainedModel):
    """Joint BERT-family model (BERT, MiniLM, ...) over ``[CLS] q [SEP]`` + k × ``[CLS] c [SEP]`` slots."""

    config_class = JointBertConfig

    def __init__(self, config: JointBertConfig):
        super().__init__(config)
        self._build(config)
        self.post_init()


class BertForJointPretraining(JointPretrainingForward, _BertJoint, BertPreTrainedModel):
    """Joint BERT-family model with the stock MLM head (``cls.predictions``, tied) for MLM + MSPP."""

    config_class = JointBertConfig
    AUTO_CLASSES = ("AutoModel", "AutoModelForPreTraining")
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: JointBertConfig):
        super().__init__(config)
        self._check_pretraining_head()
        self._build(config)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def _mlm_head(self, hidden):
        return self.cls(hidden)


# ---------------------------------------------------------------------------------------------------- ELECTRA


class _ElectraJoint(JointMultiCandidateMixin):
    def _build(self, config):
        check_joint_config(config)
        self.electra = ElectraModel(config)
        self.classifier = SlotClassificationHead(
            self._head_in_features(), config.hidden_size, self._head_outputs(), _classifier_dropout(config), "gelu"
        )

    def _slot_embeddings(self, hidden):
        return hidden[:, :: self.config.slot_length]

    def _classify(self, features):
        return self.classifier(features)


class ElectraForJointMultiCandidate(JointMultiCandidateForward, _ElectraJoint, ElectraPreTrainedModel):
    """Joint ELECTRA discriminator over ``[CLS] q [SEP]`` + k × ``[CLS] c [SEP]`` slots."""

    config_class = JointElectraConfig

    def __init__(self, config: JointElectraConfig):
        super().__init__(config)
        self._build(config)
        self.post_init()


class ElectraForJointPretraining(JointPretrainingForward, _ElectraJoint, ElectraPreTrainedModel):
    """Joint ELECTRA with an MLM head on the discriminator, named and tied as in ElectraForMaskedLM.

    This is MLM + MSPP on the discriminator, not ELECTRA's generator + replaced-token detection (which the SSP models
    implement): a discriminator checkpoint has no MLM head, so it starts fresh, as it does for MiniLM.
    """

    config_class = JointElectraConfig
    AUTO_CLASSES = ("AutoModel", "AutoModelForPreTraining")
    _tied_weights_keys = {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"}

    def __init__(self, config: JointElectraConfig):
        super().__init__(config)
        self._check_pretraining_head()
        self._build(config)
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = nn.Linear(config.embedding_size, config.vocab_size)
        self.post_init()

    def get_output_embeddings(self):
        return self.generator_lm_head

    def set_output_embeddings(self, new_embeddings):
        self.generator_lm_head = new_embeddings

    def _mlm_head(self, hidden):
        return self.generator_lm_head(self.generator_predictions(hidden))


# ---------------------------------------------------------------------------------------------------- entry point

# backbone -> (config class, fine-tuning class, MSPP pre-training class)
JOINT_BACKBONES = {
    "roberta": (JointRobertaConfig, RobertaForJointMultiCandidate, RobertaForJointPretraining),
    "bert": (JointBertConfig, BertForJointMultiCandidate, BertForJointPretraining),
    "electra": (JointElectraConfig, ElectraForJointMultiCandidate, ElectraForJointPretraining),
}
_HUB_KWARGS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")


def joint_backbone(model_type: str) -> str:
    """``joint_bert`` / ``contextual_bert`` / ``ssp_bert`` / ``bert`` -> ``bert``; ValueError for other backbones."""
    backbone = model_type
    for prefix in ("joint_", "contextual_", "ssp_"):
        backbone = backbone.removeprefix(prefix)
    if backbone not in JOINT_BACKBONES:
        raise ValueError(
            f"model type {model_type!r}: the joint multi-candidate models have {', '.join(JOINT_BACKBONES)} backbones "
            "(BERT covers MiniLM and other BERT-architecture checkpoints)"
        )
    return backbone


class JointMultiCandidateModel:
    """Loads the joint model of a checkpoint's backbone: RoBERTa, BERT-family (MiniLM) or ELECTRA.

    Like an Auto class it is not instantiated: ``from_pretrained`` reads the checkpoint's ``model_type`` (a stock
    ``roberta`` / ``bert`` / ``electra`` checkpoint, or an as2hub ``joint_*`` / ``ssp_*`` / ``contextual_*`` folder)
    and returns an instance of :class:`RobertaForJointMultiCandidate`, :class:`BertForJointMultiCandidate` or
    :class:`ElectraForJointMultiCandidate`; keyword arguments are config fields or loading arguments.

    Example:
        >>> model = JointMultiCandidateModel.from_pretrained(  # doctest: +SKIP
        ...     "FacebookAI/roberta-base", num_candidates=5, slot_length=64, head="AE_k")
        >>> pretraining = JointMultiCandidateModel.from_pretrained("roberta-base", pretraining=True)  # doctest: +SKIP
        >>> scratch = JointMultiCandidateModel.from_config(BertConfig(...), head="IE_k")  # doctest: +SKIP
    """

    def __init__(self, *args, **kwargs):
        raise OSError(
            "JointMultiCandidateModel is a factory: use JointMultiCandidateModel.from_pretrained(checkpoint, ...) or "
            "JointMultiCandidateModel.from_config(config)"
        )

    @staticmethod
    def model_class(model_type: str, pretraining: bool = False):
        """The class for a checkpoint's ``model_type`` (the MLM + MSPP class with ``pretraining=True``)."""
        return JOINT_BACKBONES[joint_backbone(model_type)][2 if pretraining else 1]

    @classmethod
    def checkpoint_class(cls, pretrained_model_name_or_path, pretraining: bool = False, **kwargs):
        """The class :meth:`from_pretrained` would instantiate for a checkpoint (read from its config)."""
        config = kwargs.get("config")
        if isinstance(config, PreTrainedConfig):
            model_type = config.model_type
        else:
            hub_kwargs = {key: kwargs[key] for key in _HUB_KWARGS if key in kwargs}
            config_dict, _ = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
            model_type = config_dict.get("model_type", "")
        return cls.model_class(model_type, pretraining)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, pretraining: bool = False, **kwargs):
        model_class = cls.checkpoint_class(pretrained_model_name_or_path, pretraining, **kwargs)
        return model_class.from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_config(cls, config: PreTrainedConfig, pretraining: bool = False, **overrides):
        """A randomly initialised joint model; a stock config (``RobertaConfig``, ...) is converted, ``overrides``
        set config fields (``num_candidates``, ``slot_length``, ``head``, ...)."""
        backbone = joint_backbone(config.model_type)
        config_class = JOINT_BACKBONES[backbone][0]
        if not isinstance(config, config_class) or overrides:
            values = {key: value for key, value in config.to_dict().items() if key not in ("model_type", "auto_map")}
            config = config_class.from_dict({**values, **overrides})
        model = cls.model_class(backbone, pretraining)(config)
        if model.config.type_vocab_size < model.target_token_types():  # a stock config's 1 or 2 rows
            model.grow_token_types()
        return model


for _config_class, _model_class, _pretraining_class in JOINT_BACKBONES.values():
    _model_class.register_for_auto_class("AutoModel")
    _pretraining_class.register_for_auto_class("AutoModelForPreTraining")
    _config_class.register_for_auto_class()

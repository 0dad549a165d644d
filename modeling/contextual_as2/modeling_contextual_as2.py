"""Contextual answer sentence selection cross-encoders (Di Liello, Garg, Moschitti, ACL 2023).

A question q, a candidate answer sentence s and its context c (the sentences before and after s in its document) are
read as one sequence with three segment ids (q = 0, s = 1, c = 2); the first token's representation is classified as
"correct" or not. Parameter names are those of the stock ``*ForSequenceClassification`` classes, so any RoBERTa,
ELECTRA or BERT/MiniLM checkpoint loads; a token-type table with fewer than three rows is grown on load.

This folder is the model's remote code: it imports only torch, transformers and its siblings, so a saved model loads
anywhere with ``trust_remote_code=True``.

Example:
    >>> from transformers import AutoModelForSequenceClassification, AutoTokenizer
    >>> model = BertForContextualAS2.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> # ... fine-tune, then model.save_pretrained("ranker") ...
    >>> model = AutoModelForSequenceClassification.from_pretrained("ranker", trust_remote_code=True)  # doctest: +SKIP
    >>> model.score(**batch)  # probability that each candidate is correct  # doctest: +SKIP
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutputWithPooling, SequenceClassifierOutput
from transformers.models.bert.modeling_bert import BertModel, BertPreTrainedModel
from transformers.models.electra.modeling_electra import (
    ElectraClassificationHead,
    ElectraModel,
    ElectraPreTrainedModel,
)
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaModel,
    RobertaPreTrainedModel,
)

from .configuration_contextual_as2 import (
    NUM_CONTEXTUAL_SEGMENTS,
    ContextualBertConfig,
    ContextualElectraConfig,
    ContextualRobertaConfig,
)
from .hub_common import POSITIVE_LABEL, TokenTypeGrowthMixin, infer_token_type_ids


@dataclass
class ContextualAS2Output(SequenceClassifierOutput):
    """``SequenceClassifierOutput`` plus ``cascade_logits``: one tensor per cascade head (``config.cascade_layers``),
    set in training and when ``output_cascade_logits=True`` is passed."""

    cascade_logits: tuple[torch.Tensor, ...] | None = None


class CascadeHead(nn.Module):
    """A classifier after an intermediate layer (Soldaini & Moschitti, 2020): dense + tanh on the first token, then the
    final head's number of labels, so ``logits_to_scores`` reads it the same way."""

    def __init__(self, config):
        super().__init__()
        dropout = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(dropout if dropout is not None else config.hidden_dropout_prob)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        first = self.dropout(hidden_states[:, 0])
        return self.out_proj(self.dropout(torch.tanh(self.dense(first))))


class ContextualAS2Mixin(TokenTypeGrowthMixin):
    """What the three backbones share: segment inference, the loss, `score`, table growth and a complete auto_map.

    Subclasses build ``self.<base_model_prefix>`` and implement ``_classify(encoder_outputs) -> logits``.
    """

    AUTO_CLASSES = ("AutoModel", "AutoModelForSequenceClassification")

    # Our loss is a mean over the batch: Trainer must scale it for gradient accumulation itself.
    accepts_loss_kwargs = False

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> ContextualAS2Output:
        r"""
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            0 = question, 1 = candidate, 2 = context. When omitted they are derived from the separator tokens.
            A contextual model also derives them when they are given and keeps, token by token, the larger of the
            two: tokenizers write at most two segments (BERT-style tokenizers, hence pipelines and CrossEncoder,
            pass 0 for the question and 1 for the whole pair, context included), and the separators give the
            context its own id 2. Ids from the as2hub collators already equal the derived ones.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            1 if the candidate is a correct answer, else 0. Cross-entropy (binary with a single logit).
        output_cascade_logits (`bool`, *optional*):
            With ``config.cascade_layers``: also return each cascade head's logits (always in training, where the loss
            follows ``config.cascade_loss``).
        """
        return_dict = kwargs.pop("return_dict", None)
        token_type_ids = self._segment_ids(input_ids, attention_mask, token_type_ids)
        heads = self.cascade_heads
        asked = kwargs.pop("output_cascade_logits", False)
        want_cascade = heads is not None and (asked or self.training)
        want_hidden = bool(kwargs.get("output_hidden_states") or self.config.output_hidden_states)
        if want_cascade:
            kwargs["output_hidden_states"] = True
        outputs = self.base_model(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self._classify(outputs)
        cascade_logits = None
        if want_cascade:  # hidden_states[k] is the output of layer k (0: the embeddings)
            cascade_logits = tuple(
                head(outputs.hidden_states[layer]) for head, layer in zip(heads, self.config.cascade_layers)
            )
        loss = self._training_loss(logits, cascade_logits, labels) if labels is not None else None
        output = ContextualAS2Output(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states if want_hidden else None,
            attentions=outputs.attentions,
            cascade_logits=cascade_logits,
        )
        return output.to_tuple() if return_dict is False else output

    def _segment_ids(self, input_ids, attention_mask, token_type_ids):
        if input_ids is not None and (token_type_ids is None or self.config.contextual):
            derived = infer_token_type_ids(
                input_ids, self.config.sep_token_id, self.config.type_vocab_size, attention_mask
            )
            token_type_ids = derived if token_type_ids is None else torch.maximum(token_type_ids, derived)
        return token_type_ids

    def _init_cascade_heads(self) -> None:
        layers = self.config.cascade_layers or ()
        self.cascade_heads = nn.ModuleList(CascadeHead(self.config) for _ in layers) if layers else None

    def _training_loss(self, logits, cascade_logits, labels):
        """The final head's loss; in training with cascade heads, per ``config.cascade_loss``: one classifier drawn
        uniformly per step (the paper's multi-task training), the mean of all, or the cascade heads' mean alone."""
        if cascade_logits is None or not self.training:
            return self._loss(logits, labels)
        mode = self.config.cascade_loss
        if mode == "heads":
            return torch.stack([self._loss(head, labels) for head in cascade_logits]).mean()
        every = (*cascade_logits, logits)
        if mode == "mean":
            return torch.stack([self._loss(head, labels) for head in every]).mean()
        drawn = int(torch.randint(len(every), ()))
        return self._loss(every[drawn], labels)

    # Staged inference for the layer cascade: the ranker embeds once, runs the encoder in slices between heads, reads
    # a head's logits, and carries the survivors' hidden states on (``as2hub.inference.cascade``).
    def cascade_embed(self, input_ids, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """The encoder's input: embeddings (and ELECTRA's projection) of a batch, as the full forward computes them."""
        token_type_ids = self._segment_ids(input_ids, attention_mask, token_type_ids)
        base = self.base_model
        hidden = base.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        project = getattr(base, "embeddings_project", None)
        return project(hidden) if project is not None else hidden

    def cascade_encode(self, hidden: torch.Tensor, attention_mask: torch.Tensor, start: int, end: int):
        """Encoder layers ``start`` .. ``end - 1`` (0-based) on ``hidden``; ``attention_mask`` is the 0/1 padding mask."""
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        for layer in self.base_model.encoder.layer[start:end]:
            hidden = layer(hidden, mask)
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return hidden

    def cascade_head_logits(self, index: int, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of cascade head ``index`` (after layer ``config.cascade_layers[index]``) on that layer's output."""
        return self.cascade_heads[index](hidden)

    def classify_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final head's logits on the last layer's output (what ``forward`` returns as ``logits``). The outputs are a
        transformers ``ModelOutput``, which ``torch.compile`` traces (a ``SimpleNamespace`` broke the compiled ranker's
        graph here: each final stage ran as three compiled calls)."""
        pooler = getattr(self.base_model, "pooler", None)
        pooled = pooler(hidden) if pooler is not None else None
        return self._classify(BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooled))

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = labels.to(logits.device).view(-1)
        if logits.shape[-1] == 1:
            positive = self.config.label2id.get(POSITIVE_LABEL, 0)
            target = labels.float() if positive == 0 else 1.0 - labels.float()
            return nn.functional.binary_cross_entropy_with_logits(logits.view(-1), target)
        return nn.functional.cross_entropy(logits, labels.long())

    @torch.inference_mode()
    def score(self, **inputs) -> torch.Tensor:
        """Probability that each candidate is correct, shape ``(batch_size,)``; what ranking sorts by."""
        inputs.pop("labels", None)
        logits = self(**inputs).logits.float()
        return self.logits_to_scores(logits)

    def logits_to_scores(self, logits: torch.Tensor) -> torch.Tensor:
        positive = self.config.label2id.get(POSITIVE_LABEL, logits.shape[-1] - 1)
        if logits.shape[-1] == 1:
            return torch.sigmoid(logits.view(-1))
        return logits.softmax(-1)[:, positive]

    def target_token_types(self) -> int:
        """Three rows for (question, candidate, context); a pairwise model keeps the backbone's own table."""
        return NUM_CONTEXTUAL_SEGMENTS if self.config.contextual else self.config.type_vocab_size


class RobertaForContextualAS2(ContextualAS2Mixin, RobertaPreTrainedModel):
    """RoBERTa cross-encoder over ``<s> q </s></s> s </s></s> c </s>``; loads any RoBERTa checkpoint."""

    config_class = ContextualRobertaConfig

    def __init__(self, config: ContextualRobertaConfig):
        super().__init__(config)
        self.roberta = RobertaModel(config, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self._init_cascade_heads()
        self.post_init()

    def _classify(self, outputs):
        return self.classifier(outputs.last_hidden_state)


class ElectraForContextualAS2(ContextualAS2Mixin, ElectraPreTrainedModel):
    """ELECTRA discriminator cross-encoder over ``[CLS] q [SEP] s [SEP] c [SEP]``; loads any ELECTRA checkpoint."""

    config_class = ContextualElectraConfig

    def __init__(self, config: ContextualElectraConfig):
        super().__init__(config)
        self.electra = ElectraModel(config)
        self.classifier = ElectraClassificationHead(config)
        self._init_cascade_heads()
        self.post_init()

    def _classify(self, outputs):
        return self.classifier(outputs.last_hidden_state)


class BertForContextualAS2(ContextualAS2Mixin, BertPreTrainedModel):
    """BERT-family (BERT, MiniLM, ...) cross-encoder over ``[CLS] q [SEP] s [SEP] c [SEP]``; pooled [CLS] head."""

    config_class = ContextualBertConfig

    def __init__(self, config: ContextualBertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self._init_cascade_heads()
        self.post_init()

    def _classify(self, outputs):
        return self.classifier(self.dropout(outputs.pooler_output))


for _model_class in (RobertaForContextualAS2, ElectraForContextualAS2, BertForContextualAS2):
    _model_class.register_for_auto_class("AutoModelForSequenceClassification")
    _model_class.config_class.register_for_auto_class()

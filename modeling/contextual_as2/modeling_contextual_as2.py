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

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
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
    ) -> SequenceClassifierOutput:
        r"""
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            0 = question, 1 = candidate, 2 = context. When omitted they are derived from the separator tokens.
            A contextual model also derives them when they are given and keeps, token by token, the larger of the
            two: tokenizers write at most two segments (BERT-style tokenizers, hence pipelines and CrossEncoder,
            pass 0 for the question and 1 for the whole pair, context included), and the separators give the
            context its own id 2. Ids from the as2hub collators already equal the derived ones.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            1 if the candidate is a correct answer, else 0. Cross-entropy (binary with a single logit).
        """
        return_dict = kwargs.pop("return_dict", None)
        if input_ids is not None and (token_type_ids is None or self.config.contextual):
            derived = infer_token_type_ids(
                input_ids, self.config.sep_token_id, self.config.type_vocab_size, attention_mask
            )
            token_type_ids = derived if token_type_ids is None else torch.maximum(token_type_ids, derived)
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
        loss = self._loss(logits, labels) if labels is not None else None
        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
        return output.to_tuple() if return_dict is False else output

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
        self.post_init()

    def _classify(self, outputs):
        return self.classifier(self.dropout(outputs.pooler_output))


for _model_class in (RobertaForContextualAS2, ElectraForContextualAS2, BertForContextualAS2):
    _model_class.register_for_auto_class("AutoModelForSequenceClassification")
    _model_class.config_class.register_for_auto_class()

"""Structure-aware continued pre-training: MLM (RoBERTa/BERT) or MLM + replaced-token detection (ELECTRA), plus a
binary sentence-level task on the first token (Di Liello et al., 2022: SSP, SP, PSD on pairs; Di Liello et al., 2023:
SDC, DPC, DSLC on (a, b, c) triplets with three segment ids).

Parameter names are the stock ones, so a pre-trained model goes straight into fine-tuning:

- the encoder is ``roberta.*`` / ``bert.*`` / ``electra.*`` (the discriminator);
- the MLM head is ``lm_head.*`` (RobertaForMaskedLM) / ``cls.predictions.*`` (BertForMaskedLM), tied to the word
  embeddings, so a masked-LM checkpoint's head loads;
- the sentence-level head is ``classifier.*`` with one logit labelled ``"correct"`` (binary cross-entropy), named and
  shaped as in the stock ``*ForSequenceClassification`` and the contextual AS2 models, so it loads into both;
- ELECTRA's generator is ``generator.*`` / ``generator_predictions.*`` / ``generator_lm_head.*``; it shares the
  discriminator's word, position and token-type embeddings (declared as tied weights: the checkpoint holds one copy).

This folder is Hub remote code: it imports only torch, transformers and its siblings.

Example:
    >>> from transformers import AutoTokenizer, Trainer
    >>> model = RobertaForSSPPretraining.from_pretrained("FacebookAI/roberta-base", num_segments=3)  # doctest: +SKIP
    >>> collator = PretrainingCollator(tokenizer, max_length=128)  # as2hub.data_collators  # doctest: +SKIP
    >>> Trainer(model=model, data_collator=collator, train_dataset=triplets, args=args).train()  # doctest: +SKIP
    >>> model.save_pretrained("roberta-sdc")  # doctest: +SKIP
    >>> RobertaForContextualAS2.from_pretrained("roberta-sdc")  # encoder and head load  # doctest: +SKIP
    >>> electra = ElectraForSSPPretraining.from_pretrained("google/electra-base-discriminator")  # doctest: +SKIP
    >>> electra.export_discriminator("electra-sdc")  # then ElectraForContextualAS2.from_pretrained("electra-sdc")
"""

import torch
from torch import nn
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForSequenceClassification
from transformers.models.bert.modeling_bert import BertModel, BertOnlyMLMHead, BertPreTrainedModel
from transformers.models.electra.modeling_electra import (
    ElectraClassificationHead,
    ElectraDiscriminatorPredictions,
    ElectraGeneratorPredictions,
    ElectraModel,
    ElectraPreTrainedModel,
)
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaLMHead,
    RobertaModel,
    RobertaPreTrainedModel,
)

from .configuration_ssp_pretraining import SSPBertConfig, SSPElectraConfig, SSPRobertaConfig
from .hub_common import TokenTypeGrowthMixin, infer_token_type_ids
from .pretraining_heads import SSPPretrainingOutput, masked_lm_loss, masked_mean
from .unpadding import unpadded_batch, unpadded_encode, wants_unpadded


class SSPPretrainingMixin(TokenTypeGrowthMixin):
    """What the backbones share: segment inference, the sentence-level loss, table growth and a complete auto_map."""

    AUTO_CLASSES = ("AutoModel", "AutoModelForPreTraining")

    # Every loss is a mean over its own items: Trainer must scale it for gradient accumulation itself.
    accepts_loss_kwargs = False

    def _encoder_outputs(
        self,
        encoder,
        input_ids,
        attention_mask,
        token_type_ids,
        position_ids,
        inputs_embeds=None,
        plan=None,
        **kwargs,
    ):
        """``encoder``'s outputs: the unpadded pass (:func:`wants_unpadded`) or the stock one."""
        if wants_unpadded(self, attention_mask, kwargs):
            return unpadded_encode(
                encoder, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, plan=plan
            )
        return encoder(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )

    def _token_type_ids(self, input_ids, token_type_ids, attention_mask):
        if token_type_ids is None and input_ids is not None:
            token_type_ids = infer_token_type_ids(
                input_ids, self.config.sep_token_id, self.config.type_vocab_size, attention_mask
            )
        return token_type_ids

    def _sentence_loss(self, logits: torch.Tensor, sentence_labels: torch.Tensor):
        """(loss, accuracy): binary cross-entropy with one logit (1 = positive), cross-entropy with two.

        Labels of -100 are ignored (the MLM-only ablation keeps the sampling but not the label); (None, None) when
        the whole batch is ignored.
        """
        labels = sentence_labels.to(logits.device).view(-1).long()
        active = labels != -100
        if torch.compiler.is_compiling():  # one graph: no branch on the data (a batch with no label gives 0)
            return self._compiled_sentence_loss(logits, labels, active)
        if not active.any():
            return None, None
        logits, labels = logits[active], labels[active]
        if logits.shape[-1] == 1:
            loss = nn.functional.binary_cross_entropy_with_logits(logits.view(-1).float(), labels.float())
            predictions = (logits.view(-1) > 0).long()
        else:
            loss = nn.functional.cross_entropy(logits.float(), labels)
            predictions = logits.argmax(-1)
        accuracy = (predictions == labels).float().mean().detach()
        return loss, accuracy

    def _compiled_sentence_loss(self, logits, labels, active):
        """:meth:`_sentence_loss` as masked means over every item (``torch.compile``)."""
        if self.config.cls_weight == 0:  # the MLM-only ablation: no sentence loss, as in eager mode
            return None, None
        targets = labels.clamp(min=0)
        if logits.shape[-1] == 1:
            values = logits.view(-1).float()
            losses = nn.functional.binary_cross_entropy_with_logits(values, targets.float(), reduction="none")
            predictions = (values > 0).long()
        else:
            losses = nn.functional.cross_entropy(logits.float(), targets, reduction="none")
            predictions = logits.argmax(-1)
        correct = (predictions == labels).float()
        return masked_mean(losses, active), masked_mean(correct, active).detach()

    def _weighted_sum(self, **components) -> torch.Tensor | None:
        """``sum(config.<name>_weight * loss)`` over the given losses; None when none was computed."""
        total = None
        for name, loss in components.items():
            weight = getattr(self.config, f"{name}_weight")
            if loss is None or weight == 0:
                continue
            total = weight * loss if total is None else total + weight * loss
        return total

    def _mlm_and_sentence_outputs(
        self, hidden, cls_logits, mlm_head, labels, sentence_labels, outputs
    ) -> SSPPretrainingOutput:
        mlm_loss = mlm_logits = cls_loss = cls_accuracy = None
        if labels is not None:
            mlm_loss, mlm_logits, _ = masked_lm_loss(
                hidden, labels, mlm_head, self.config.vocab_size, self.config.return_mlm_logits
            )
        elif self.config.return_mlm_logits:
            mlm_logits = mlm_head(hidden)
        if sentence_labels is not None:
            cls_loss, cls_accuracy = self._sentence_loss(cls_logits, sentence_labels)
        return SSPPretrainingOutput(
            loss=self._weighted_sum(mlm=mlm_loss, cls=cls_loss),
            mlm_loss=mlm_loss,
            cls_loss=cls_loss,
            cls_logits=cls_logits,
            mlm_logits=mlm_logits,
            cls_accuracy=cls_accuracy,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def target_token_types(self) -> int:
        """One row per segment of the objective (``config.num_segments``): 3 for triplets."""
        return self.config.num_segments


class RobertaForSSPPretraining(SSPPretrainingMixin, RobertaPreTrainedModel):
    """RoBERTa with an MLM head and a sentence-level head on ``<s>``; loss = w_mlm * MLM + w_cls * CLS.

    Loads RobertaModel / RobertaForMaskedLM checkpoints (``lm_head`` included); the result loads into
    :class:`RobertaForContextualAS2` and stock ``RobertaForSequenceClassification(num_labels=1)``.

    Example:
        >>> model = RobertaForSSPPretraining.from_pretrained("FacebookAI/roberta-base")  # doctest: +SKIP
        >>> out = model(**batch)  # batch from PretrainingCollator: labels (MLM) and sentence_labels  # doctest: +SKIP
        >>> out.loss, out.mlm_loss, out.cls_loss, out.cls_accuracy  # doctest: +SKIP
    """

    config_class = SSPRobertaConfig
    # As stock RobertaForMaskedLM: the decoder is the word-embedding matrix (when config.tie_word_embeddings).
    _tied_weights_keys = {
        "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def __init__(self, config: SSPRobertaConfig):
        super().__init__(config)
        self.roberta = RobertaModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

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
        token_type_ids: segment ids (0, 1[, 2]); inferred from the separators when omitted.
        labels: MLM targets ``(batch, length)``, -100 where no prediction is made.
        sentence_labels: ``(batch,)`` 1 for a positive pair/triplet (e.g. same paragraph), 0 otherwise.
        unpadded: True runs the dense layers on the real tokens only in evaluation too (``unpadding.wants_unpadded``).
        """
        token_type_ids = self._token_type_ids(input_ids, token_type_ids, attention_mask)
        outputs = self._encoder_outputs(
            self.roberta, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs
        )
        hidden = outputs.last_hidden_state
        return self._mlm_and_sentence_outputs(
            hidden, self.classifier(hidden), self.lm_head, labels, sentence_labels, outputs
        )


class BertForSSPPretraining(SSPPretrainingMixin, BertPreTrainedModel):
    """BERT-family (BERT, MiniLM, ...) with an MLM head and a sentence-level head on the pooled [CLS].

    ``cls.predictions`` is named as in BertForMaskedLM/BertForPreTraining (a checkpoint's MLM head loads when present);
    ``dropout`` + ``classifier`` as in BertForSequenceClassification / :class:`BertForContextualAS2`.

    Example:
        >>> model = BertForSSPPretraining.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
        >>> # ... continued pre-training, save_pretrained("minilm-ssp"), then
        >>> BertForContextualAS2.from_pretrained("minilm-ssp")  # doctest: +SKIP
    """

    config_class = SSPBertConfig
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: SSPBertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertOnlyMLMHead(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

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
        r"""Same arguments as :meth:`RobertaForSSPPretraining.forward`."""
        token_type_ids = self._token_type_ids(input_ids, token_type_ids, attention_mask)
        outputs = self._encoder_outputs(
            self.bert, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs
        )
        cls_logits = self.classifier(self.dropout(outputs.pooler_output))
        return self._mlm_and_sentence_outputs(
            outputs.last_hidden_state, cls_logits, self.cls, labels, sentence_labels, outputs
        )


class ElectraForSSPPretraining(SSPPretrainingMixin, ElectraPreTrainedModel):
    """ELECTRA generator + discriminator; loss = w_mlm * MLM (generator) + w_rtd * RTD + w_cls * CLS (discriminator).

    At the masked positions (``labels != -100``) replacements are sampled from the generator without gradient; the
    discriminator (``electra.*``, ``discriminator_predictions`` as in ElectraForPreTraining) detects, over the
    non-padding tokens, which tokens differ from the original, and classifies the pair/triplet with ``classifier``
    (as ElectraForSequenceClassification). Word, position and token-type embeddings are shared between the two
    networks, and the generator's output layer is tied to the word embeddings (``tie_word_embeddings``).

    Example:
        >>> model = ElectraForSSPPretraining.from_pretrained("google/electra-base-discriminator")  # doctest: +SKIP
        >>> model = ElectraForSSPPretraining.from_discriminator_and_generator(  # doctest: +SKIP
        ...     "google/electra-base-discriminator", "google/electra-base-generator", num_segments=3)
        >>> # ... continued pre-training ...
        >>> model.export_discriminator("electra-sdc")  # doctest: +SKIP
        >>> ElectraForContextualAS2.from_pretrained("electra-sdc")  # doctest: +SKIP
    """

    config_class = SSPElectraConfig
    _shared_embeddings = {
        f"generator.embeddings.{name}.weight": f"electra.embeddings.{name}.weight"
        for name in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    }
    _lm_head_tie = {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"}
    # All four are declared here because `save_pretrained` reads the class attribute to decide which alias of a shared
    # tensor to drop; which ones are actually tied is decided by `get_expanded_tied_weights_keys` below.
    _tied_weights_keys = {**_shared_embeddings, **_lm_head_tie}

    def __init__(self, config: SSPElectraConfig):
        super().__init__(config)
        self.electra = ElectraModel(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.classifier = ElectraClassificationHead(config)
        generator_config = config.generator_config
        self.generator = ElectraModel(generator_config)
        self.generator_predictions = ElectraGeneratorPredictions(generator_config)
        self.generator_lm_head = nn.Linear(generator_config.embedding_size, config.vocab_size)
        self.post_init()

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """Embedding sharing is part of the architecture (always tied); the generator's output layer follows
        ``config.tie_word_embeddings``. (transformers gates the whole ``_tied_weights_keys`` on that flag.)"""
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        tied = dict(self._shared_embeddings)
        if self.config.tie_word_embeddings:
            tied.update(self._lm_head_tie)
        return tied

    def get_output_embeddings(self):
        return self.generator_lm_head

    def set_output_embeddings(self, new_embeddings):
        self.generator_lm_head = new_embeddings

    def grow_token_types(self, num_token_types: int | None = None) -> None:
        super().grow_token_types(num_token_types)
        # The generator reads the same (now larger) table.
        self.generator.embeddings.token_type_embeddings = self.electra.embeddings.token_type_embeddings
        self.config.generator_config.type_vocab_size = self.config.type_vocab_size
        self.tie_weights()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sentence_labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SSPPretrainingOutput:
        r"""
        input_ids: the masked inputs (from PretrainingCollator); the generator fills the masked positions.
        labels: original tokens at the masked positions, -100 elsewhere. Without them there is no MLM/RTD.
        sentence_labels: ``(batch,)`` 1 for a positive pair/triplet, 0 otherwise.
        unpadded: True runs the dense layers on the real tokens only in evaluation too (``unpadding.wants_unpadded``).
        """
        token_type_ids = self._token_type_ids(input_ids, token_type_ids, attention_mask)
        mlm_loss = mlm_logits = rtd_labels = None
        discriminator_inputs = input_ids
        # The unpadded pass: where the tokens are, found once for the generator and the discriminator.
        unpadded = wants_unpadded(self, attention_mask, kwargs)
        passes = {"plan": unpadded_batch(attention_mask) if unpadded else None, "unpadded": unpadded}
        if labels is not None:
            labels = labels.to(input_ids.device)
            generator_hidden = self._encoder_outputs(
                self.generator, input_ids, attention_mask, token_type_ids, position_ids, **passes
            ).last_hidden_state
            mlm_loss, mlm_logits, masked_logits = masked_lm_loss(
                generator_hidden, labels, self._generator_head, self.config.vocab_size, self.config.return_mlm_logits
            )
            masked = labels != -100
            discriminator_inputs = input_ids.clone()
            discriminator_inputs[masked] = self.sample(masked_logits.detach())
            original = torch.where(masked, labels, input_ids)
            rtd_labels = (discriminator_inputs != original).long()
        outputs = self._encoder_outputs(
            self.electra, discriminator_inputs, attention_mask, token_type_ids, position_ids, **passes, **kwargs
        )
        hidden = outputs.last_hidden_state
        rtd_logits = self.discriminator_predictions(hidden)
        cls_logits = self.classifier(hidden)
        rtd_loss = rtd_accuracy = cls_loss = cls_accuracy = None
        if rtd_labels is not None:
            active = attention_mask.bool() if attention_mask is not None else torch.ones_like(rtd_labels, dtype=bool)
            active_logits, active_labels = rtd_logits[active].float(), rtd_labels[active].float()
            rtd_loss = nn.functional.binary_cross_entropy_with_logits(active_logits, active_labels)
            rtd_accuracy = ((active_logits > 0).float() == active_labels).float().mean().detach()
        if sentence_labels is not None:
            cls_loss, cls_accuracy = self._sentence_loss(cls_logits, sentence_labels)
        return SSPPretrainingOutput(
            loss=self._weighted_sum(mlm=mlm_loss, rtd=rtd_loss, cls=cls_loss),
            mlm_loss=mlm_loss,
            rtd_loss=rtd_loss,
            cls_loss=cls_loss,
            cls_logits=cls_logits,
            mlm_logits=mlm_logits,
            rtd_logits=rtd_logits,
            rtd_labels=rtd_labels,
            cls_accuracy=cls_accuracy,
            rtd_accuracy=rtd_accuracy,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def _generator_head(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.generator_lm_head(self.generator_predictions(hidden_states))

    @torch.no_grad()
    def sample(self, logits: torch.Tensor) -> torch.Tensor:
        """Draw one token per row of ``logits`` (``config.sampling`` at ``config.generator_temperature``)."""
        logits = logits.float() / self.config.generator_temperature
        if not torch.compiler.is_compiling() and logits.shape[0] == 0:  # (multinomial draws none from 0 rows too)
            return logits.new_zeros(0, dtype=torch.long)
        if self.config.sampling == "gumbel":
            uniform = torch.rand_like(logits).clamp_(1e-9, 1.0 - 1e-9)
            return (logits - torch.log(-torch.log(uniform))).argmax(-1)
        return torch.multinomial(logits.softmax(-1), 1).squeeze(-1)

    def export_discriminator(self, save_directory, **kwargs) -> ElectraForSequenceClassification:
        """Save the discriminator and its sentence-level head as a stock ``ElectraForSequenceClassification``.

        The folder (config + weights ``electra.*`` and ``classifier.*``) loads into
        :class:`ElectraForContextualAS2`, ``ElectraForSequenceClassification`` and ``ElectraModel`` without missing
        encoder weights. The generator and the RTD head are left out: save the whole model to resume pre-training.
        Returns the exported model.
        """
        exported = ElectraForSequenceClassification(self.config.discriminator_config())
        state = {
            key: value
            for key, value in self.state_dict().items()
            if key.startswith(("electra.", "classifier.")) and key in exported.state_dict()
        }
        missing, unexpected = exported.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise RuntimeError(f"discriminator export mismatch: missing {missing}, unexpected {unexpected}")
        exported.save_pretrained(save_directory, **kwargs)
        return exported

    def load_generator(self, generator, **kwargs) -> None:
        """Copy a stock generator (``ElectraForMaskedLM`` instance or checkpoint path) into ``generator.*``.

        Its encoder, prediction head and output bias are copied; the embeddings stay shared with the discriminator
        (ELECTRA trains them shared, so released generator/discriminator pairs hold the same tables). The generator
        must match ``config.generator_config`` in size: see :meth:`from_discriminator_and_generator`.
        """
        if not isinstance(generator, ElectraForMaskedLM):
            generator = ElectraForMaskedLM.from_pretrained(generator, **kwargs)
        shared = {key.split(".", 1)[1] for key in self._shared_embeddings}
        state = {}
        for key, value in generator.state_dict().items():
            if key.startswith("electra."):
                inner = key.split(".", 1)[1]
                if inner not in shared:
                    state[f"generator.{inner}"] = value
            elif key.startswith("generator_predictions.") or key == "generator_lm_head.bias":
                state[key] = value
            elif key == "generator_lm_head.weight" and not self.config.tie_word_embeddings:
                state[key] = value
        own = self.state_dict()
        for key, value in state.items():
            if key not in own or own[key].shape != value.shape:
                raise ValueError(f"generator weight {key} {tuple(value.shape)} does not fit this model's generator")
        with torch.no_grad():
            for key, value in state.items():
                own[key].copy_(value)

    @classmethod
    def from_discriminator_and_generator(cls, discriminator, generator, num_segments: int = 2, **kwargs):
        """Build from a stock discriminator checkpoint (``ElectraForPreTraining``) and a stock generator checkpoint
        (``ElectraForMaskedLM``), e.g. ``google/electra-base-discriminator`` + ``google/electra-base-generator``.

        ``kwargs`` holds config fields (``rtd_weight``, ``token_type_init``, ``sep_token_id``, ...) and loading
        arguments of ``from_pretrained`` (``revision``, ``dtype``, ...); the generator's weights are the generator
        checkpoint's (its encoder, prediction head and output bias), its embeddings the discriminator's (shared).
        """
        config = kwargs.pop("config", None)
        if config is None:
            config, kwargs = cls.config_class.from_pretrained(
                discriminator, num_segments=num_segments, return_unused_kwargs=True, **kwargs
            )
        generator_config = ElectraConfig.from_pretrained(generator)
        if generator_config.embedding_size != config.embedding_size:
            raise ValueError(
                f"{generator} (embedding_size {generator_config.embedding_size}) cannot share the embeddings of "
                f"{discriminator} (embedding_size {config.embedding_size}): pick the generator released with it"
            )
        generator_config.type_vocab_size = config.type_vocab_size
        config.generator_config = generator_config
        loaded = cls.from_pretrained(discriminator, config=config, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.load_generator(generator)
        return loaded


for _model_class in (RobertaForSSPPretraining, BertForSSPPretraining, ElectraForSSPPretraining):
    _model_class.register_for_auto_class("AutoModelForPreTraining")
    _model_class.config_class.register_for_auto_class()

"""Long-context QA with supporting evidence and a question–evidence contrastive loss (Caciularu, Dagan, Goldberger,
Cohan, *Long Context Question Answering via Supervised Contrastive Learning*, NAACL 2022).

Input (appendix B.2)::

    <s> [q] question [/q] <doc-s> <t> title </t> <sent> s1 </sent> <sent> s2 </sent> </doc-s> <doc-s> ... </s>

with global attention on the first token, the question tokens (markers included), the title-start markers ``<t>``
and the sentence markers ``<sent>``. A ``LongformerModel`` encodes it; the heads are

- answer start / end over the context tokens, trained over *every* gold occurrence of the answer
  (``-log Σ_{i ∈ gold} p(i)`` for the start and for the end);
- answer type (``config.answer_types``, HotpotQA: span / yes / no) on the first token;
- supporting sentence (binary, on the ``<sent>`` markers) and supporting paragraph (binary, on the ``<t>`` markers);
- the QE contrastive term (§3): with q the ``[q]`` state, s the ``<sent>`` states and k the example's question type,
  ``s_k = W_k^S s``, ``q_k = W_k^Q q`` (dropout 0.1), ``sim = cos(s_k, q_k)`` and

      L_QE_i = -log Σ_{s+ ∈ evidence} exp(sim(s+, q)/τ_k) / Σ_{s ∈ all} exp(sim(s, q)/τ_k)         (Eq. 1)

  where "all" also holds the evidence projected with the other types' matrices (§3.2's extra negatives, at τ_k;
  only the evidence, as in the authors' released code); averaged over the examples that have evidence in the input
  (the others are left out: never NaN). q is the ``[q]`` marker's state (the released code takes the first token).

``loss = (1 - λ) · L_QA + λ · L_QE`` with L_QA the weighted sum of the four head losses (§3.1).

This folder is the model's remote code: it imports only torch, transformers and its siblings, so a saved model loads
anywhere with ``trust_remote_code=True``; its tokenizer carries the markers and ``config.marker_token_ids`` lets the
model find them in plain ``input_ids``.

Example:
    >>> model = LongformerWithQEContrastive.from_short_encoder(  # doctest: +SKIP
    ...     "sentence-transformers/all-MiniLM-L6-v2", max_position_embeddings=4096, attention_window=256)
    >>> model = LongformerWithQEContrastive.from_pretrained("allenai/longformer-base-4096")  # doctest: +SKIP
    >>> out = model(**batch)  # batch from as2hub.data_collators.HotpotQACollator  # doctest: +SKIP
    >>> out.loss, out.qe_loss, out.sentence_logits, out.sentence_similarity  # doctest: +SKIP
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import ModelOutput
from transformers.models.longformer.modeling_longformer import LongformerModel, LongformerPreTrainedModel

from .configuration_longformer_qe import LongformerQEConfig
from .hub_common import TokenTypeGrowthMixin


@dataclass
class LongformerQEOutput(ModelOutput):
    """Output of :class:`LongformerWithQEContrastive`.

    Args:
        loss: ``(1 - λ) · qa_loss + λ · qe_loss`` (λ = ``config.contrastive_weight``), over the terms whose labels
            were given.
        qa_loss: weighted sum of ``span_loss``, ``answer_type_loss``, ``sentence_loss`` and ``paragraph_loss``.
        qe_loss: the question–evidence contrastive loss (Eq. 1), averaged over the examples with evidence.
        span_loss: mean of the start and end losses, each ``-log Σ_{gold occurrences} p``, over span examples.
        answer_type_loss, sentence_loss, paragraph_loss: cross-entropy / binary cross-entropy of those heads.
        start_logits, end_logits: ``(batch, length)``; positions outside the context (``span_mask``) are set to the
            dtype's minimum.
        answer_type_logits: ``(batch, len(config.answer_types))``.
        sentence_logits: ``(batch, max_sentences)`` (padding sentences: the dtype's minimum).
        paragraph_logits: ``(batch, max_paragraphs)``.
        sentence_similarity: ``(batch, max_sentences)`` question–sentence similarity under the example's question
            type (``question_type``; without it, the type predicted by the answer-type head when the question types
            are answer types, else the first type). Not computed while training with λ = 0.
        type_similarity: ``(batch, num_question_types, max_sentences)``: the similarity under every type.
        raw_similarity: ``(batch, max_sentences)`` cosine of the raw ``[q]`` and ``<sent>`` states (the diagnostic of
            the paper's table 1 for a model trained without L_QE).
    """

    loss: torch.FloatTensor | None = None
    qa_loss: torch.FloatTensor | None = None
    qe_loss: torch.FloatTensor | None = None
    span_loss: torch.FloatTensor | None = None
    answer_type_loss: torch.FloatTensor | None = None
    sentence_loss: torch.FloatTensor | None = None
    paragraph_loss: torch.FloatTensor | None = None
    start_logits: torch.FloatTensor | None = None
    end_logits: torch.FloatTensor | None = None
    answer_type_logits: torch.FloatTensor | None = None
    sentence_logits: torch.FloatTensor | None = None
    paragraph_logits: torch.FloatTensor | None = None
    sentence_similarity: torch.FloatTensor | None = None
    type_similarity: torch.FloatTensor | None = None
    raw_similarity: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    global_attentions: tuple[torch.FloatTensor, ...] | None = None


# ------------------------------------------------------------------------------------------------------------------
# Marker positions


def marker_positions(is_marker: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(batch, length)`` bool -> (positions ``(batch, M)`` padded with 0, mask ``(batch, M)``), in input order.

    Example:
        >>> marker_positions(torch.tensor([[0, 1, 0, 1], [1, 0, 0, 0]]).bool())
        (tensor([[1, 3],
                [0, 0]]), tensor([[ True,  True],
                [ True, False]]))
    """
    counts = is_marker.sum(dim=1)
    width = int(counts.max()) if counts.numel() else 0
    # A stable sort of "not a marker" puts the marker positions first, in order.
    order = torch.sort((~is_marker).to(torch.int8), dim=1, stable=True).indices[:, :width]
    mask = torch.arange(width, device=is_marker.device)[None, :] < counts[:, None]
    return order * mask, mask


def _inside(starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Tokens strictly between a start marker and its end marker (the markers themselves excluded)."""
    depth = starts.long().cumsum(dim=1) - ends.long().cumsum(dim=1)
    return (depth > 0) & ~starts


def infer_marker_inputs(
    input_ids: torch.Tensor, marker_token_ids: dict[str, int], attention_mask: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """What the collator computes, derived from the marker tokens of ``input_ids``.

    Returns ``question_index`` (first ``[q]``; 0 when absent), ``sentence_index`` / ``sentence_mask`` (``<sent>``),
    ``paragraph_index`` / ``paragraph_mask`` (``<t>``), ``global_attention_mask`` (first token, ``[q]`` ... ``[/q]``,
    ``<t>``, ``<sent>``) and ``span_mask`` (tokens inside titles and sentences: where answers may start and end).
    """
    ids = {name: marker_token_ids[name] for name in marker_token_ids}
    is_ = {name: input_ids == token for name, token in ids.items()}
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    question_start, question_end = is_["question_start"], is_["question_end"]
    in_question = _inside(question_start, question_end) | question_start | question_end
    global_mask = in_question | is_["title_start"] | is_["sentence_start"]
    global_mask[:, 0] = True
    span_mask = _inside(is_["sentence_start"], is_["sentence_end"]) | _inside(is_["title_start"], is_["title_end"])
    sentence_index, sentence_mask = marker_positions(is_["sentence_start"] & valid)
    paragraph_index, paragraph_mask = marker_positions(is_["title_start"] & valid)
    return {
        "question_index": question_start.long().argmax(dim=1),
        "sentence_index": sentence_index,
        "sentence_mask": sentence_mask,
        "paragraph_index": paragraph_index,
        "paragraph_mask": paragraph_mask,
        "global_attention_mask": (global_mask & valid).long(),
        "span_mask": span_mask & valid,
    }


def gather_positions(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``hidden`` ``(batch, length, d)``, ``index`` ``(batch, M)`` -> ``(batch, M, d)``."""
    return hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))


# ------------------------------------------------------------------------------------------------------------------
# Heads


class LongformerQEHead(nn.Module):
    """dense -> tanh -> dropout -> linear, as Longformer's classification head."""

    def __init__(self, config, num_outputs: int):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(hidden)))))


class QuestionEvidenceSimilarity(nn.Module):
    """sim_k(s, q) for every question type k (§3): Eq. 3 (``projected_cosine``), Eq. 2 (``bilinear``) or the raw
    ``cosine`` / ``dot`` of table 4, with the per-type temperatures τ_k."""

    def __init__(self, config: LongformerQEConfig):
        super().__init__()
        self.kind = config.qe_similarity
        num_types = config.num_question_types
        num_projections = 1 if config.qe_single_projection else num_types
        d, out = config.hidden_size, config.qe_projection_dim
        if self.kind == "projected_cosine":
            self.query_projections = nn.ModuleList(nn.Linear(d, out, bias=False) for _ in range(num_projections))
            self.sentence_projections = nn.ModuleList(nn.Linear(d, out, bias=False) for _ in range(num_projections))
        elif self.kind == "bilinear":
            self.query_projections = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(num_projections))
        self.dropout = nn.Dropout(config.qe_dropout)
        self.num_types = num_types
        # Raw similarities and one shared projection give every type the same scores.
        self.type_independent = self.kind in ("cosine", "dot") or num_projections == 1
        log_temperature = self.initial_log_temperature(config)
        if config.qe_learnable_temperature:
            self.log_temperature = nn.Parameter(log_temperature)
        else:  # from the config, never saved (set again by the model's _init_weights after loading)
            self.register_buffer("log_temperature", log_temperature, persistent=False)

    @staticmethod
    def initial_log_temperature(config: LongformerQEConfig) -> torch.Tensor:
        temperatures = torch.tensor(config.qe_temperatures, dtype=torch.float32)
        return (temperatures[:1] if config.qe_shared_temperature else temperatures).log()

    def temperatures(self) -> torch.Tensor:
        """τ_k for every type, shape ``(num_types,)``."""
        return self.log_temperature.exp().expand(self.num_types)

    def forward(self, question: torch.Tensor, sentences: torch.Tensor) -> torch.Tensor:
        """``question`` ``(batch, d)``, ``sentences`` ``(batch, S, d)`` -> ``(batch, num_types, S)``."""
        if self.kind in ("cosine", "dot"):
            if self.kind == "cosine":
                sim = nn.functional.cosine_similarity(sentences, question.unsqueeze(1), dim=-1, eps=1e-8)
            else:
                sim = (sentences * question.unsqueeze(1)).sum(-1)
            return sim.unsqueeze(1).expand(-1, self.num_types, -1)
        per_projection = []
        for k, query_projection in enumerate(self.query_projections):
            q_k = self.dropout(query_projection(question))
            if self.kind == "projected_cosine":
                s_k = self.dropout(self.sentence_projections[k](sentences))
                per_projection.append(nn.functional.cosine_similarity(s_k, q_k.unsqueeze(1), dim=-1, eps=1e-8))
            else:  # bilinear: s^T W_k q
                per_projection.append((sentences * q_k.unsqueeze(1)).sum(-1))
        sim = torch.stack(per_projection, dim=1)
        return sim.expand(-1, self.num_types, -1) if sim.shape[1] == 1 else sim


def question_evidence_loss(
    type_similarity: torch.Tensor,
    temperatures: torch.Tensor,
    question_type: torch.Tensor,
    sentence_labels: torch.Tensor,
    sentence_mask: torch.Tensor,
    wrong_type_negatives: bool = True,
) -> torch.Tensor:
    """L_QE (Eq. 1) averaged over the examples that have evidence and a known question type (-100 = unknown).

    Args:
        type_similarity: ``(batch, K, S)`` sim_k(s, q) for every type k.
        temperatures: ``(K,)`` τ_k.
        question_type: ``(batch,)`` k of each example.
        sentence_labels: ``(batch, S)`` 1 = evidence, 0 = not, -100 = padding.
        sentence_mask: ``(batch, S)`` real sentences.
        wrong_type_negatives: add sim_j(s+, q)/τ_k for every evidence s+ and every type j != k to the denominator.

    Returns a scalar; 0 (connected to the graph) when no example has evidence.
    """
    batch, num_types, _ = type_similarity.shape
    known = question_type >= 0
    k = question_type.clamp(min=0)
    tau = temperatures.to(type_similarity.dtype)[k]  # (batch,)
    scaled = type_similarity / tau[:, None, None]
    valid = sentence_mask.bool() & (sentence_labels >= 0)
    evidence = valid & (sentence_labels == 1)
    own = scaled.gather(1, k.view(batch, 1, 1).expand(-1, 1, scaled.shape[-1])).squeeze(1)  # (batch, S)
    minus_inf = torch.finfo(scaled.dtype).min
    denominator = [own.masked_fill(~valid, minus_inf)]
    if wrong_type_negatives and num_types > 1:
        other_type = torch.arange(num_types, device=k.device)[None, :, None] != k[:, None, None]
        extra = scaled.masked_fill(~(other_type & evidence[:, None, :]), minus_inf)
        denominator.append(extra.flatten(1))
    log_denominator = torch.cat(denominator, dim=1).logsumexp(dim=1)
    log_numerator = own.masked_fill(~evidence, minus_inf).logsumexp(dim=1)
    used = known & evidence.any(dim=1)
    if not used.any():
        return type_similarity.sum() * 0.0
    return (log_denominator - log_numerator)[used].mean()


def fill_lowest(logits: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """``logits`` with the ``masked`` positions at the lowest value of *their own* dtype: under bf16/fp16 autocast the
    heads return half-precision logits while the encoder's states stay fp32, and fp32's minimum overflows them."""
    return logits.masked_fill(masked, torch.finfo(logits.dtype).min)


def all_occurrences_loss(logits: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example ``-log Σ_{i ∈ positions} softmax(logits)[i]`` (positions padded with -1) and which rows count."""
    log_probs = logits.float().log_softmax(dim=-1)
    gold = positions >= 0
    picked = log_probs.gather(1, positions.clamp(min=0)).masked_fill(~gold, float("-inf"))
    has_gold = gold.any(dim=1)
    return -picked.logsumexp(dim=1).masked_fill(~has_gold, 0.0), has_gold


def _masked_bce(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    keep = mask.bool() & (labels >= 0)
    if not keep.any():
        return logits.sum() * 0.0
    return nn.functional.binary_cross_entropy_with_logits(logits[keep].float(), labels[keep].float())


# ------------------------------------------------------------------------------------------------------------------
# The model


class LongformerWithQEContrastive(TokenTypeGrowthMixin, LongformerPreTrainedModel):
    """Longformer for HotpotQA-style QA with supporting evidence and the QE contrastive loss (see the module doc).

    Loads any Longformer checkpoint (the encoder is ``longformer.*`` and the span head ``qa_outputs``, as in
    ``LongformerForQuestionAnswering``), or a RoBERTa / BERT-family one through :meth:`from_short_encoder`.
    """

    config_class = LongformerQEConfig
    AUTO_CLASSES = ("AutoModel", "AutoModelForQuestionAnswering")
    # Every loss is a mean over its own items: Trainer must scale it for gradient accumulation itself.
    accepts_loss_kwargs = False

    def __init__(self, config: LongformerQEConfig):
        super().__init__(config)
        self.longformer = LongformerModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.answer_type_head = LongformerQEHead(config, len(config.answer_types))
        self.sentence_head = LongformerQEHead(config, 1)
        self.paragraph_head = LongformerQEHead(config, 1)
        self.qe = QuestionEvidenceSimilarity(config)
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, QuestionEvidenceSimilarity):
            init.copy_(module.log_temperature, module.initial_log_temperature(self.config))

    def target_token_types(self) -> int:
        """The backbone's own token-type table is kept (only one segment is used)."""
        return self.config.type_vocab_size

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        question_index: torch.Tensor | None = None,
        sentence_index: torch.Tensor | None = None,
        sentence_mask: torch.Tensor | None = None,
        paragraph_index: torch.Tensor | None = None,
        paragraph_mask: torch.Tensor | None = None,
        span_mask: torch.Tensor | None = None,
        question_type: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        answer_type_labels: torch.Tensor | None = None,
        sentence_labels: torch.Tensor | None = None,
        paragraph_labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> LongformerQEOutput | tuple:
        r"""
        global_attention_mask, question_index, sentence_index, sentence_mask, paragraph_index, paragraph_mask,
        span_mask: where the markers are (see ``infer_marker_inputs``). Those not given are derived from
            ``input_ids`` with ``config.marker_token_ids``.
        question_type (`(batch,)`): index into ``config.question_types``; -100 = unknown (left out of L_QE).
        start_positions, end_positions (`(batch, A)`): every gold occurrence of the answer, padded with -1 (or
            `(batch,)` for one occurrence).
        answer_type_labels (`(batch,)`): index into ``config.answer_types``; -100 = no answer (type "none").
        sentence_labels, paragraph_labels (`(batch, S)`, `(batch, P)`): 1 supporting, 0 not, -100 padding.
        """
        needed = {
            "global_attention_mask": global_attention_mask,
            "question_index": question_index,
            "sentence_index": sentence_index,
            "sentence_mask": sentence_mask,
            "paragraph_index": paragraph_index,
            "paragraph_mask": paragraph_mask,
            "span_mask": span_mask,
        }
        if any(value is None for value in needed.values()):
            if input_ids is None or not self.config.marker_token_ids:
                missing = sorted(name for name, value in needed.items() if value is None)
                raise ValueError(
                    f"pass {', '.join(missing)} (as2hub's HotpotQACollator does), or input_ids with the marker tokens "
                    "and a config whose marker_token_ids are set (add_marker_tokens does it)"
                )
            inferred = infer_marker_inputs(input_ids, self.config.marker_token_ids, attention_mask)
            needed = {name: value if value is not None else inferred[name] for name, value in needed.items()}
        outputs = self.longformer(
            input_ids,
            attention_mask=attention_mask,
            global_attention_mask=needed["global_attention_mask"],
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = outputs.last_hidden_state
        batch = hidden.shape[0]

        start_logits, end_logits = self.qa_outputs(hidden).unbind(dim=-1)
        outside = ~needed["span_mask"].bool()
        start_logits = fill_lowest(start_logits, outside)
        end_logits = fill_lowest(end_logits, outside)
        answer_type_logits = self.answer_type_head(hidden[:, 0])

        sentence_mask = needed["sentence_mask"].bool()
        paragraph_mask = needed["paragraph_mask"].bool()
        sentences = gather_positions(hidden, needed["sentence_index"])
        paragraphs = gather_positions(hidden, needed["paragraph_index"])
        question = hidden[torch.arange(batch, device=hidden.device), needed["question_index"]]
        sentence_logits = fill_lowest(self.sentence_head(sentences).squeeze(-1), ~sentence_mask)
        paragraph_logits = fill_lowest(self.paragraph_head(paragraphs).squeeze(-1), ~paragraph_mask)

        weight = self.config.contrastive_weight
        type_similarity = sentence_similarity = raw_similarity = None
        if weight > 0 or not self.training:
            type_similarity = self.qe(question, sentences)
            selected = question_type if question_type is not None else self._predicted_question_type(answer_type_logits)
            selected = selected.clamp(min=0).view(batch, 1, 1).expand(-1, 1, type_similarity.shape[-1])
            sentence_similarity = fill_lowest(type_similarity.gather(1, selected).squeeze(1), ~sentence_mask)
            if not self.training:
                raw = nn.functional.cosine_similarity(sentences, question.unsqueeze(1), dim=-1, eps=1e-8)
                raw_similarity = fill_lowest(raw, ~sentence_mask)

        losses = {}
        if start_positions is not None and end_positions is not None:
            starts = start_positions.view(batch, -1).to(hidden.device)
            ends = end_positions.view(batch, -1).to(hidden.device)
            start_loss, has_span = all_occurrences_loss(start_logits, starts)
            end_loss, _ = all_occurrences_loss(end_logits, ends)
            rows = has_span.float()
            losses["span_loss"] = ((start_loss + end_loss) / 2 * rows).sum() / rows.sum().clamp(min=1.0)
        if answer_type_labels is not None:
            labels = answer_type_labels.view(-1).to(hidden.device)
            keep = labels >= 0
            losses["answer_type_loss"] = (
                nn.functional.cross_entropy(answer_type_logits[keep].float(), labels[keep])
                if keep.any()
                else answer_type_logits.sum() * 0.0
            )
        if sentence_labels is not None:
            losses["sentence_loss"] = _masked_bce(sentence_logits, sentence_labels.to(hidden.device), sentence_mask)
        if paragraph_labels is not None:
            losses["paragraph_loss"] = _masked_bce(paragraph_logits, paragraph_labels.to(hidden.device), paragraph_mask)
        qa_loss = None
        if losses:
            weights = {
                "span_loss": self.config.span_loss_weight,
                "answer_type_loss": self.config.answer_type_loss_weight,
                "sentence_loss": self.config.sentence_loss_weight,
                "paragraph_loss": self.config.paragraph_loss_weight,
            }
            qa_loss = sum(weights[name] * value for name, value in losses.items())
        qe_loss = None
        if type_similarity is not None and sentence_labels is not None and question_type is not None:
            qe_loss = question_evidence_loss(
                type_similarity,
                self.qe.temperatures(),
                question_type.view(-1).to(hidden.device),
                sentence_labels.to(hidden.device),
                sentence_mask,
                wrong_type_negatives=self.config.qe_wrong_type_negatives and not self.qe.type_independent,
            )
        loss = None
        if qa_loss is not None:
            loss = (1.0 - weight) * qa_loss
            if qe_loss is not None and weight > 0:
                loss = loss + weight * qe_loss

        output = LongformerQEOutput(
            loss=loss,
            qa_loss=qa_loss,
            qe_loss=qe_loss,
            **losses,
            start_logits=start_logits,
            end_logits=end_logits,
            answer_type_logits=answer_type_logits,
            sentence_logits=sentence_logits,
            paragraph_logits=paragraph_logits,
            sentence_similarity=sentence_similarity,
            type_similarity=type_similarity,
            raw_similarity=raw_similarity,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            global_attentions=outputs.global_attentions,
        )
        return output.to_tuple() if return_dict is False else output

    def _predicted_question_type(self, answer_type_logits: torch.Tensor) -> torch.Tensor:
        """Without gold types: the answer-type head's prediction when question types are answer types, else type 0."""
        config = self.config
        if config.question_type_key == "answer_type":
            lookup = [config.question_types.index(t) if t in config.question_types else 0 for t in config.answer_types]
            lookup = torch.tensor(lookup, device=answer_type_logits.device)
            return lookup[answer_type_logits.argmax(dim=-1)]
        return torch.zeros(answer_type_logits.shape[0], dtype=torch.long, device=answer_type_logits.device)

    # --------------------------------------------------------------------------------------------------------------
    # Short encoders -> Longformer

    @classmethod
    def from_short_encoder(
        cls,
        pretrained_model_name_or_path,
        max_position_embeddings: int = 4096,
        attention_window: int | list[int] = 512,
        loading_kwargs: dict | None = None,
        **config_kwargs,
    ) -> "LongformerWithQEContrastive":
        """A Longformer made from a RoBERTa-style or BERT-family (BERT, MiniLM, ...) checkpoint, by the recipe of
        Beltagy et al. (2020): copy the encoder, tile the position embeddings up to ``max_position_embeddings`` tokens,
        and initialise the global query / key / value projections as copies of the local ones. The heads are new.

        ``max_position_embeddings`` counts the tokens the model reads. Longformer numbers positions from
        ``pad_token_id + 1`` (RoBERTa's convention), so the table gets ``pad_token_id + 1`` more rows: RoBERTa's rows
        keep their meaning, and BERT's position j (counted from 0) moves to row ``pad_token_id + 1 + j``. BERT's
        2-row token-type table is kept as it is (only segment 0 is used), the pooler is dropped.

        On an input no longer than half the attention window, the encoder gives the short model's hidden states.

        Args:
            pretrained_model_name_or_path: a checkpoint ``AutoModel`` loads (also as2hub's contextual / SSP folders).
            max_position_embeddings: longest input, in tokens.
            attention_window: Longformer's local window (even; one value or one per layer).
            loading_kwargs: passed to ``AutoModel.from_pretrained`` (``revision``, ``trust_remote_code``, ...).
            **config_kwargs: fields of :class:`LongformerQEConfig` (``contrastive_weight``, ``question_types``, ...).
        """
        from transformers import AutoModel

        short = AutoModel.from_pretrained(pretrained_model_name_or_path, **(loading_kwargs or {}))
        encoder = short.base_model
        short_config = encoder.config
        embeddings = getattr(encoder, "embeddings", None)
        if (
            embeddings is None
            or not hasattr(embeddings, "position_embeddings")
            or hasattr(encoder, "embeddings_project")
        ):
            raise ValueError(
                f"{pretrained_model_name_or_path}: {type(encoder).__name__} is not a RoBERTa-style or BERT-family "
                "encoder (word + absolute position + token-type embeddings of the hidden size)"
            )
        if getattr(short_config, "position_embedding_type", "absolute") not in (None, "absolute"):
            raise ValueError(f"{pretrained_model_name_or_path}: only absolute position embeddings can be tiled")
        if short_config.pad_token_id is None:
            raise ValueError(f"{pretrained_model_name_or_path}: the config has no pad_token_id")
        roberta_style = hasattr(embeddings, "padding_idx")  # RobertaEmbeddings number positions from pad + 1
        offset = short_config.pad_token_id + 1
        source_offset = offset if roberta_style else 0
        old_table = embeddings.position_embeddings.weight.detach()
        usable = old_table.shape[0] - source_offset
        config = cls.config_class(
            vocab_size=short_config.vocab_size,
            hidden_size=short_config.hidden_size,
            num_hidden_layers=short_config.num_hidden_layers,
            num_attention_heads=short_config.num_attention_heads,
            intermediate_size=short_config.intermediate_size,
            hidden_act=short_config.hidden_act,
            hidden_dropout_prob=short_config.hidden_dropout_prob,
            attention_probs_dropout_prob=short_config.attention_probs_dropout_prob,
            type_vocab_size=short_config.type_vocab_size,
            initializer_range=short_config.initializer_range,
            layer_norm_eps=short_config.layer_norm_eps,
            pad_token_id=short_config.pad_token_id,
            bos_token_id=short_config.bos_token_id,
            eos_token_id=short_config.eos_token_id,
            sep_token_id=getattr(short_config, "sep_token_id", None),
            max_position_embeddings=max_position_embeddings + offset,
            attention_window=attention_window,
            **config_kwargs,
        )
        model = cls(config)
        state = {k: v for k, v in encoder.state_dict().items() if not k.startswith("pooler.")}
        state.pop("embeddings.position_ids", None)
        state.pop("embeddings.token_type_ids", None)
        table = torch.zeros(config.max_position_embeddings, old_table.shape[1], dtype=old_table.dtype)
        if roberta_style:
            table[:offset] = old_table[:offset]
        for start in range(offset, table.shape[0], usable):
            rows = min(usable, table.shape[0] - start)
            table[start : start + rows] = old_table[source_offset : source_offset + rows]
        state["embeddings.position_embeddings.weight"] = table
        for layer in range(config.num_hidden_layers):
            prefix = f"encoder.layer.{layer}.attention.self."
            for name in ("query", "key", "value"):
                for part in ("weight", "bias"):
                    state[f"{prefix}{name}_global.{part}"] = state[f"{prefix}{name}.{part}"].clone()
        model.longformer.load_state_dict(state, strict=True)
        model.config.name_or_path = str(pretrained_model_name_or_path)
        return model


LongformerWithQEContrastive.register_for_auto_class("AutoModelForQuestionAnswering")
LongformerQEConfig.register_for_auto_class()

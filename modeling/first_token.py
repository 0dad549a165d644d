"""Score with the last encoder layer computed for the first token only: the same logits, about 1/7 less work.

A cross-encoder's head reads one vector, the first token's output of the last layer (BERT's pooler, the RoBERTa and
ELECTRA classification heads, all ``[:, 0]``). In that last layer every token still serves as a key and a value, but
only the first token needs a query, an attention output, a feed-forward pass and its layer norms. For MiniLM-L6 that
is 5/6 of the last layer's matrix products (the keys and values remain), about 14% of the model's arithmetic, with
the same result up to floating-point rounding.

:func:`first_token_last_layer` switches this on for the duration of a ``with`` block, for models whose head reads the
first token only (:data:`FIRST_TOKEN_MODEL_TYPES`: as2hub's contextual RoBERTa, ELECTRA and BERT rankers) and whose
last layer has the BERT layout (``attention.self.query/key/value``, ``attention.output``, ``feed_forward_chunk``).
Everything else runs unchanged. The :class:`~as2hub.inference.ranking.Ranker` scores inside it, and the ONNX export
traces inside it (and checks the graph against the full model's logits); the shipped remote code, the pipelines and
training are untouched. Inside the block ``last_hidden_state`` has sequence length 1: use it for logits only.

Example:
    >>> from as2hub.modeling.first_token import first_token_last_layer
    >>> with first_token_last_layer(model):  # doctest: +SKIP
    ...     logits = model(**batch).logits  # the logits of model(**batch), a seventh cheaper for a 6-layer model
"""

import contextlib
import functools

import torch

from as2hub.modeling.registry import model_types

# Heads that read only the first token of the last hidden state: the families registered with ``first_token=True``.
FIRST_TOKEN_MODEL_TYPES = frozenset(model_types(first_token=True))


def last_bert_layer(model):
    """The model's last encoder layer when it has the BERT layout and a first-token head, else None.

    The head is the class's: ``type(model).config_class.model_type``, not the config instance's ``model_type`` (a joint
    model built in memory from a contextual folder keeps the contextual config, and its heads read the slot tokens)."""
    class_type = getattr(getattr(type(model), "config_class", None), "model_type", None)
    if class_type not in FIRST_TOKEN_MODEL_TYPES:
        return None
    layers = getattr(getattr(getattr(model, "base_model", None), "encoder", None), "layer", None)
    if not layers:
        return None
    layer = layers[-1]
    attention = getattr(layer, "attention", None)
    parts = (
        getattr(attention, "self", None),
        getattr(attention, "output", None),
        getattr(layer, "feed_forward_chunk", None),
    )
    if any(part is None for part in parts) or not all(
        hasattr(attention.self, name) for name in ("query", "key", "value", "attention_head_size")
    ):
        return None
    return layer


def _first_token_forward(layer, hidden_states, attention_mask=None, *args, **kwargs):
    """The layer's output for the first position: its query attends to every key and value (same mask, same scale)."""
    attention = layer.attention.self
    batch = hidden_states.shape[0]
    first = hidden_states[:, :1]

    def heads(states):
        return states.view(batch, states.shape[1], -1, attention.attention_head_size).transpose(1, 2)

    mask = attention_mask
    if mask is not None:
        if mask.dim() == 2:  # (batch, length) of 0/1
            mask = mask[:, None, None, :].bool()
        else:  # (batch, 1, queries, length), additive or boolean: the first query's row
            mask = mask[:, :, :1, :]
    context = torch.nn.functional.scaled_dot_product_attention(
        heads(attention.query(first)),
        heads(attention.key(hidden_states)),
        heads(attention.value(hidden_states)),
        attn_mask=mask,
        dropout_p=attention.dropout.p if attention.training else 0.0,
        scale=getattr(attention, "scaling", None),
    )
    context = context.transpose(1, 2).reshape(batch, 1, -1)
    return layer.feed_forward_chunk(layer.attention.output(context, first))


@contextlib.contextmanager
def first_token_last_layer(model):
    """Within the block, the model's last layer computes the first token only (see the module docstring); yields
    whether it applies to this model (False: the model runs unchanged)."""
    layer = last_bert_layer(model)
    if layer is None:
        yield False
        return
    if "forward" in layer.__dict__:  # inside another block (nested, or scoring in another thread): that block owns it
        yield True
        return
    # one partial per layer, kept on it: every block installs the same object, so a torch.compile'd caller
    # (inference/compiled.py) keeps its guards on ``layer.forward`` and does not recompile on each call
    patched = layer.__dict__.get("_as2hub_first_token_forward")
    if patched is None:
        patched = layer._as2hub_first_token_forward = functools.partial(_first_token_forward, layer)
    layer.forward = patched
    try:
        yield True
    finally:
        layer.__dict__.pop("forward", None)

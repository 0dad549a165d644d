"""What every as2hub remote-code folder shares (this file is symlinked into each one, and shipped with it).

Segment ids for (question, candidate, context) inputs and (a, b, c) pre-training triplets, growing a checkpoint's
token-type table, naming the positive class, and a complete ``auto_map`` on save.

Layouts (one segment per text, separators belong to the segment they close, as BERT's tokenizer does for pairs)::

    RoBERTa  <s> q </s></s> s </s></s> c </s>      segments 0 0 0 0 1 1 1 2 2
    BERT     [CLS] q [SEP] s [SEP] c [SEP]          segments 0 0 0 1 1 2 2

so segments can always be recovered from the separator positions: the segment of a token is the number of separator
runs that end before it. Padding gets segment 0, like tokenizers pad ``token_type_ids``.
"""

import contextlib
import contextvars

import torch
from torch import nn

POSITIVE_LABEL = "correct"
# "scratch": keep the pretrained rows, draw the new ones; "copy": new rows copy the last pretrained row;
# "scratch_all": draw the whole grown table anew (the literal reading of Di Liello et al., 2023, appendix C).
TOKEN_TYPE_INITS = ("scratch", "copy", "scratch_all")

# Set while ``from_pretrained`` builds a model: the checkpoint's table is loaded at its own size, then grown.
_LOADING_CHECKPOINT = contextvars.ContextVar("as2hub_loading_checkpoint", default=False)


def infer_token_type_ids(
    input_ids: torch.Tensor,
    sep_token_id: int,
    num_token_types: int,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Segment ids derived from separator runs, clamped to ``num_token_types - 1``.

    Clamping keeps each backbone's own design when the table is smaller than three rows: a RoBERTa pairwise model
    (one row) gets all zeros, a BERT/ELECTRA pairwise model gets 0 for the question and 1 for the candidate.

    Example:
        >>> ids = torch.tensor([[101, 7, 102, 8, 9, 102, 5, 102, 0]])
        >>> infer_token_type_ids(ids, sep_token_id=102, num_token_types=3, attention_mask=(ids != 0).long())
        tensor([[0, 0, 0, 1, 1, 1, 2, 2, 0]])
    """
    is_sep = input_ids == sep_token_id
    next_is_sep = torch.zeros_like(is_sep)
    next_is_sep[:, :-1] = is_sep[:, 1:]
    run_ends = (is_sep & ~next_is_sep).long()
    # Exclusive cumulative sum: a separator run counts for the tokens after it, not for itself.
    segments = run_ends.cumsum(dim=1) - run_ends
    segments = segments.clamp_(max=num_token_types - 1)
    if attention_mask is not None:
        segments = segments * attention_mask.to(segments.dtype)
    return segments


@torch.no_grad()
def grow_token_type_embeddings(
    embeddings: nn.Embedding, new_size: int, init: str, initializer_range: float
) -> nn.Embedding:
    """Return a token-type table with ``new_size`` rows.

    ``init="scratch"`` keeps the pretrained rows and draws the new ones from normal(0, initializer_range);
    ``init="copy"`` keeps them and copies the last pretrained row into each new one (for RoBERTa, the only row; for
    BERT/ELECTRA, the second-segment row), which starts the context segment close to what the backbone has seen;
    ``init="scratch_all"`` draws every row anew ("we initialize the sentence embeddings layers ... from scratch, and
    extend them to an input size of 3", Di Liello et al., 2023, appendix C).
    """
    old_size, dim = embeddings.weight.shape
    if new_size <= old_size:
        return embeddings
    if init not in TOKEN_TYPE_INITS:
        raise ValueError(f"unknown token_type_init {init!r}: use one of {TOKEN_TYPE_INITS}")
    grown = nn.Embedding(new_size, dim, device=embeddings.weight.device, dtype=embeddings.weight.dtype)
    grown.weight[:old_size] = embeddings.weight
    if init == "scratch_all":
        grown.weight.normal_(mean=0.0, std=initializer_range)
    elif init == "scratch":
        grown.weight[old_size:].normal_(mean=0.0, std=initializer_range)
    else:
        grown.weight[old_size:] = embeddings.weight[-1]
    return grown


def check_token_type_init_and_name_labels(config, kwargs: dict) -> None:
    """Config post-init shared by every as2hub config: validate ``token_type_init``, name the positive class.

    A stock or freshly built config gets a single logit labelled ``"correct"`` (``num_labels=2`` gives
    ``{0: "incorrect", 1: "correct"}``), so pipelines and ``score`` know which output means "correct".
    """
    if config.token_type_init not in TOKEN_TYPE_INITS:
        raise ValueError(f"token_type_init must be one of {TOKEN_TYPE_INITS}, got {config.token_type_init!r}")
    labels = list(config.id2label.values()) if config.id2label else []
    if POSITIVE_LABEL in labels:
        return
    generic_names = all(label.startswith("LABEL_") for label in labels)
    num_labels = kwargs.get("num_labels") or (1 if generic_names else len(labels))
    if num_labels == 1:
        config.id2label = {0: POSITIVE_LABEL}
    elif num_labels == 2:
        config.id2label = {0: "incorrect", 1: POSITIVE_LABEL}
    else:
        raise ValueError(f"as2hub heads have 1 or 2 labels, got num_labels={num_labels}")
    config.label2id = {label: i for i, label in config.id2label.items()}


CASCADE_LOSSES = ("sample", "mean", "heads")


def check_cascade(config) -> None:
    """Validate ``cascade_layers`` (increasing encoder layers, 1-based, below the last) and ``cascade_loss``."""
    layers = getattr(config, "cascade_layers", None)
    if getattr(config, "cascade_loss", "sample") not in CASCADE_LOSSES:
        raise ValueError(f"cascade_loss must be one of {CASCADE_LOSSES}, got {config.cascade_loss!r}")
    if not layers:
        config.cascade_layers = None
        return
    layers = [int(layer) for layer in layers]
    depth = config.num_hidden_layers
    if layers != sorted(set(layers)) or layers[0] < 1 or layers[-1] >= depth:
        raise ValueError(
            f"cascade_layers must be increasing layer numbers from 1 to {depth - 1} (the model's last layer, "
            f"{depth}, is the full model's head), got {layers}"
        )
    config.cascade_layers = layers


class TokenTypeGrowthMixin:
    """Gives the token-type table the rows the model needs on every construction path, and saves a complete
    ``auto_map``.

    - ``from_pretrained(checkpoint)``: the checkpoint's table is loaded at its own size (a 1-row RoBERTa or 2-row
      BERT/ELECTRA table does not mismatch), then grown to ``target_token_types()``;
    - ``Model(config)`` / ``AutoModel.from_config(config)`` (from scratch, e.g. a stock config): the table is built,
      then grown, so a stock config's 1 or 2 rows never silently collapse the segments.

    Subclasses set ``AUTO_CLASSES`` (the Auto classes besides AutoConfig that load them) and implement
    ``target_token_types()``: how many rows the table must have.
    """

    AUTO_CLASSES: tuple[str, ...] = ()

    def target_token_types(self) -> int:
        raise NotImplementedError

    def grow_token_types(self, num_token_types: int | None = None) -> None:
        """Grow the token-type table to ``num_token_types`` rows (default: ``target_token_types()``)."""
        embeddings = self.base_model.embeddings
        embeddings.token_type_embeddings = grow_token_type_embeddings(
            embeddings.token_type_embeddings,
            num_token_types or self.target_token_types(),
            self.config.token_type_init,
            self.config.initializer_range,
        )
        self.config.type_vocab_size = embeddings.token_type_embeddings.num_embeddings

    def post_init(self):
        super().post_init()
        if not _LOADING_CHECKPOINT.get() and self.config.type_vocab_size < self.target_token_types():
            self.grow_token_types()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Load a checkpoint with its own table size, then grow the table to ``target_token_types()``."""
        with _loading_checkpoint():
            loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True
        if model.config.type_vocab_size < model.target_token_types():
            model.grow_token_types()
        align_cpu_weights(model)
        return loaded

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers only writes the class being saved into auto_map; list every Auto class this model serves.
        module = type(self).__module__.rsplit(".", 1)[-1]
        config_module = type(self.config).__module__.rsplit(".", 1)[-1]
        self.config.auto_map = {
            "AutoConfig": f"{config_module}.{type(self.config).__name__}",
            **{auto: f"{module}.{type(self).__name__}" for auto in self.AUTO_CLASSES},
        }
        return super().save_pretrained(save_directory, *args, **kwargs)


# Bytes: what PyTorch's CPU allocator guarantees, and what the CPU GEMM kernels' fast paths expect of a weight.
CPU_ALIGNMENT = 64


@torch.no_grad()
def align_cpu_weights(model: nn.Module) -> int:
    """Move every CPU weight whose data is not ``CPU_ALIGNMENT``-byte aligned into memory of PyTorch's own; returns
    how many moved.

    ``from_pretrained`` leaves weights inside the memory-mapped safetensors file, at the file's offsets (8-byte
    aligned at best). The CPU matrix kernels take another path for such data, which sums in another order, so a
    reloaded model's logits differed from the saved model's (by 6e-5 on logits of ~4 for a tiny ELECTRA on an AVX2
    EPYC; issue 47). In aligned memory a reload computes exactly what the saved model did, at the same thread count.
    Tied weights stay tied: the same ``Parameter`` gets the new memory. Example::

        >>> model = nn.Linear(3, 2)
        >>> model.weight.data = torch.zeros(7)[1:7].view(2, 3)  # 4 bytes past an aligned start
        >>> align_cpu_weights(model), model.weight.data_ptr() % CPU_ALIGNMENT
        (1, 0)
    """
    moved = 0
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.device.type == "cpu" and tensor.is_floating_point() and tensor.data_ptr() % CPU_ALIGNMENT:
            tensor.data = tensor.data.clone(memory_format=torch.contiguous_format)
            moved += 1
    return moved


@contextlib.contextmanager
def _loading_checkpoint():
    token = _LOADING_CHECKPOINT.set(True)
    try:
        yield
    finally:
        _LOADING_CHECKPOINT.reset(token)

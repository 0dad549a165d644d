"""Ranking with the layer cascade: drop the weakest candidates of each question after early layers.

The Cascade Transformer (Soldaini & Moschitti, ACL 2020) puts a classifier after some encoder layers. When ranking a
question's candidates, each classifier scores the candidates still in play and drops the lowest-scoring fraction
``drop`` of them; the survivors go on from the hidden states already computed, so the dropped candidates cost only the
layers they went through. With heads after layers 2 and 4 of a 6-layer model and ``drop=0.4``, the encoder runs
(2 + 2 x 0.6 + 2 x 0.36) / 6 = 0.65 of the full work (the paper: 37% less computation at almost the same accuracy).

A model gets heads with ``cascade_layers`` in its config (``run_as2.py --cascade_layers 2,4``, or the cheap step on a
fine-tuned ranker: ``--cascade_heads_only``; ``inference/CASCADE.md``). :func:`cascade_scores` runs the stages for
any number of questions at once: each stage batches the survivors of every question (length-sorted, padded to the
batch's longest row), and the drop is decided per question.

The order a :class:`~as2hub.inference.ranking.Ranker` returns: the candidates that reached the last layer by the full
model's score, then those dropped at the last head by that head's score, and so on back to the first head. A score is
comparable only with the scores of its own stage, which is why ``RankedCandidate.layer`` says which stage gave it.

Example:
    >>> ranker = Ranker.from_pretrained("path/to/cascade-ranker")  # doctest: +SKIP
    >>> ranker.rank("who wrote hamlet?", candidates, cascade_drop=0.4)  # doctest: +SKIP
    [RankedCandidate(index=3, score=0.97, text='...', layer=6), ..., RankedCandidate(index=7, ..., layer=2)]
"""

from dataclasses import dataclass

import torch

from as2hub.inference.batching import length_batches
from as2hub.inference.options import check_drop  # its home is torch-free (the service ingress checks with it)
from as2hub.modeling.first_token import first_token_last_layer
from as2hub.modeling.segment_layout import pad_batch, padded_length


class NoCascadeHeadsError(ValueError):
    """``cascade_drop`` was asked of a model without cascade heads (or of a backend that cannot run stages)."""


@dataclass
class CascadeResult:
    """Per row: the score of the last stage it reached and that stage's layer; the stage layers in order."""

    scores: torch.Tensor
    layers: list[int]
    stages: list[int]


def cascade_layers(model_or_config) -> list[int]:
    """The layers after which a model (or its config: a folder's, read before loading) has a cascade head (empty when
    it has none). The one place that asks whether a model has cascade heads."""
    config = getattr(model_or_config, "config", model_or_config)
    return list(getattr(config, "cascade_layers", None) or [])


def check_cascade(model, drop: float) -> None:
    """Raise :class:`NoCascadeHeadsError` unless ``model`` can rank with ``drop`` (a fraction in [0, 1))."""
    check_drop(drop)
    check_cascade_heads(model)


def check_cascade_heads(model) -> None:
    """Raise :class:`NoCascadeHeadsError` unless ``model`` has cascade heads and its backend can run the stages."""
    if not cascade_layers(model):
        raise NoCascadeHeadsError(
            "cascade_drop needs a model with cascade heads (config.cascade_layers); train them with "
            "`as2hub-train --cascade_layers 2,4` or add them to a fine-tuned ranker with `--cascade_heads_only` "
            "(inference/CASCADE.md)"
        )
    if not (hasattr(model, "cascade_encode") or hasattr(model, "cascade_stages")):
        raise NoCascadeHeadsError(
            f"{type(model).__name__} cannot run the cascade's stages: use backend 'torch', 'torch-bf16', 'onnx', "
            "'onnx-int8' or a CUDA backend (inference/CASCADE.md)"
        )


def kept(num_candidates: int, drop: float) -> int:
    """How many of ``num_candidates`` survive a head: ``drop`` of them (rounded down) leave, at least one stays."""
    return max(1, num_candidates - int(drop * num_candidates))


def _pad_hidden(states: list[torch.Tensor], multiple: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One stage's survivors, ``(length, hidden)`` each, as a zero-padded batch and its 0/1 mask (one ``pad_sequence``
    call, not a copy per row: about 0.15 ms less per stage for ten rows, 1 thread, AMX Xeon)."""
    lengths = torch.tensor([state.shape[0] for state in states])
    longest = padded_length(int(lengths.max()), multiple)
    hidden = torch.nn.utils.rnn.pad_sequence(states, batch_first=True)
    if hidden.shape[1] < longest:
        hidden = torch.nn.functional.pad(hidden, (0, 0, 0, longest - hidden.shape[1]))
    mask = (torch.arange(longest) < lengths[:, None]).long().to(hidden.device)
    return hidden, mask


class TorchStages:
    """The cascade's stages on a torch model (fp32, bf16, CUDA): what :func:`cascade_scores` asks of a backend.

    ``run(stage, batch=None, hidden=None, attention_mask=None) -> (hidden, logits)``: stage 0 takes a padded token
    batch, a later stage the hidden states the previous stage returned (re-padded) and their 0/1 mask; each returns
    its last layer's hidden states (``None`` for the last stage, whose last layer computes the first token only) and
    its head's logits. Another backend (the ONNX stage graphs) provides the same method.
    """

    def __init__(self, model):
        self.model = model
        self.stages = [*cascade_layers(model), model.config.num_hidden_layers]
        self.device = model.device

    def run(self, stage: int, batch=None, hidden=None, attention_mask=None):
        model = self.model
        start = self.stages[stage - 1] if stage else 0
        end = self.stages[stage]
        if stage == 0:
            batch = {key: value.to(self.device) for key, value in batch.items()}
            attention_mask = batch["attention_mask"]
            hidden = model.cascade_embed(**batch)
        if stage == len(self.stages) - 1:
            with first_token_last_layer(model):  # the final head reads the first token only
                hidden = model.cascade_encode(hidden, attention_mask, start, end)
                return None, model.classify_hidden(hidden)
        hidden = model.cascade_encode(hidden, attention_mask, start, end)
        return hidden, model.cascade_head_logits(stage, hidden)


def stage_runner(model):
    """The object that runs ``model``'s cascade stages: the model's own (``cascade_stages()``, e.g. an ONNX backend)
    or :class:`TorchStages`."""
    own = getattr(model, "cascade_stages", None)
    return own() if callable(own) else TorchStages(model)


@torch.inference_mode()
def cascade_scores(
    model,
    rows: list[tuple[list[int], list[int]]],
    groups: list[int],
    drop: float,
    batch_size: int,
    pad_token_id: int,
    pad_to_multiple_of: int | None = 8,
    call_cost: float = float("inf"),
    runner=None,
) -> CascadeResult:
    """Score ``rows`` (``(input_ids, token_type_ids)`` built by the ranker's layout) through the cascade.

    ``groups[i]`` is row ``i``'s question: at each head, ``drop`` of each question's remaining rows (rounded down,
    at least one stays) leave with that head's score. Returns every row's score and the layer that gave it. Each
    stage cuts its survivors into batches of at most ``batch_size`` rows by their lengths and ``call_cost``
    (:func:`~as2hub.inference.batching.length_batches`; the default, infinite, gives full length-sorted batches).
    ``runner`` runs the stages (default :func:`stage_runner`; the ranker's ``unpadded=True`` passes
    :class:`~as2hub.inference.unpadded.UnpaddedStages`, whose ``packed`` stages take and return each row's states
    without padding).
    """
    check_cascade(model, drop)
    runner = runner or stage_runner(model)
    packed = getattr(runner, "packed", False)
    stages = runner.stages
    scores = torch.empty(len(rows))
    layers = [0] * len(rows)
    hidden: dict[int, torch.Tensor] = {}
    alive = list(range(len(rows)))
    for stage, end in enumerate(stages):
        last = stage == len(stages) - 1
        stage_scores = {}
        cuts = length_batches([len(rows[i][0]) for i in alive], batch_size, call_cost, pad_to_multiple_of)
        for chunk in [[alive[k] for k in cut] for cut in cuts]:
            if stage == 0:
                batch = pad_batch([rows[i] for i in chunk], pad_token_id, pad_to_multiple_of)
                lengths = batch["attention_mask"].sum(dim=1).tolist()
                states, logits = runner.run(0, batch=batch)
            elif packed:  # each row's states as they are: (its length, hidden)
                states, logits = runner.run(stage, hidden=[hidden.pop(i) for i in chunk])
            else:
                states, mask = _pad_hidden([hidden.pop(i) for i in chunk], pad_to_multiple_of)
                lengths = mask.sum(dim=1).tolist()
                states, logits = runner.run(stage, hidden=states, attention_mask=mask)
            if not last:
                for row, i in enumerate(chunk):
                    hidden[i] = states[row] if packed else states[row, : lengths[row]]
            logits = torch.as_tensor(logits).float()
            for i, value in zip(chunk, model.logits_to_scores(logits).cpu().tolist()):
                stage_scores[i] = value
        for i, value in stage_scores.items():
            scores[i] = value
            layers[i] = end
        if last:
            break
        alive = _survivors(alive, groups, stage_scores, drop)
        survivors = set(alive)
        for i in [i for i in hidden if i not in survivors]:  # the dropped rows' states are not needed again
            del hidden[i]
    return CascadeResult(scores=scores, layers=layers, stages=stages)


def _survivors(alive: list[int], groups: list[int], stage_scores: dict[int, float], drop: float) -> list[int]:
    by_group: dict[int, list[int]] = {}
    for i in alive:
        by_group.setdefault(groups[i], []).append(i)
    survivors = []
    for members in by_group.values():
        best_first = sorted(members, key=lambda i: (-stage_scores[i], i))
        survivors.extend(best_first[: kept(len(members), drop)])
    return sorted(survivors)


def cascade_order(indices: list[int], scores: list[float], layers: list[int]) -> list[int]:
    """``indices`` best first: by the layer that scored them (deeper first), then by score, then by input order."""
    return sorted(indices, key=lambda i: (-layers[i], -scores[i], i))

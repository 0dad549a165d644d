"""The layer cascade on ONNX Runtime: one graph per cascade stage, exported next to the ranker's own graph.

A ranker with cascade heads (``config.cascade_layers``, :mod:`as2hub.inference.cascade`) ranks with ``cascade_drop``
by running its encoder in stages: the layers up to the first head, then from there to the next head, and so on, the
weakest candidates leaving at each head. ``as2hub-export-onnx`` writes one graph per stage beside ``onnx/model.onnx``
(:func:`stage_graph_file`), fp32 and, with ``--quantize int8``, int8 with the main graph's per-token quantization:

============  ===========================================  ================================================
stage         inputs                                       outputs
============  ===========================================  ================================================
0             ``input_ids``, ``attention_mask``,           ``stage_hidden_states`` (float32, batch x length
              ``token_type_ids`` (int64)                   x hidden) after the first head's layer, ``logits``
middle        ``hidden_states`` (float32), ``attention``   ``stage_hidden_states`` after this head's layer,
              ``_mask`` (int64, 0/1)                       ``logits`` of this head
last          ``hidden_states``, ``attention_mask``        ``logits`` of the final head (its last layer is
                                                           computed for the first token only)
============  ===========================================  ================================================

Batch and sequence axes are dynamic. The graphs trace the model's staged methods (``cascade_embed``,
``cascade_encode``, ``cascade_head_logits``, ``classify_hidden``) through :class:`CascadeStageModule`; the export
(:func:`as2hub.inference.onnx_export.export_onnx`) checks each against the torch staged path
(:func:`torch_stage_cases`) and stamps it with the main graph's metadata plus :data:`CASCADE_KEY` (the stage and the
stage layer ends), so a stage graph of other weights, of another quantization or of other ``cascade_layers`` is
refused as stale. :class:`OnnxCascadeStages` runs the sessions for :func:`~as2hub.inference.cascade.cascade_scores`
(``OnnxRankerModel.cascade_stages()``). This module needs neither onnx nor onnxruntime: the ONNX backend imports it.
"""

import contextlib
import json
from dataclasses import dataclass

import numpy as np
import torch

from as2hub.inference.cascade import TorchStages
from as2hub.modeling.first_token import first_token_last_layer

CASCADE_KEY = "as2hub.cascade"  # metadata: {"stage": k, "stages": [layer ends]}
STAGE_GLOB = "cascade_stage*.onnx"
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
HIDDEN_INPUTS = ("hidden_states", "attention_mask")
HIDDEN_OUTPUT = "stage_hidden_states"
_TOKEN_AXES = {0: "batch", 1: "sequence"}


def stage_graph_file(stage: int, quantize: str | None = None) -> str:
    """``cascade_stage{k}.onnx`` (fp32) or ``cascade_stage{k}_qint8_dynamic.onnx`` (int8), in the ``onnx/`` folder."""
    return f"cascade_stage{stage}.onnx" if quantize is None else f"cascade_stage{stage}_q{quantize}_dynamic.onnx"


def stage_ends(config) -> list[int]:
    """The layer after which each stage ends: the cascade heads' layers, then the model's depth ([] without heads)."""
    layers = list(getattr(config, "cascade_layers", None) or [])
    return [*layers, config.num_hidden_layers] if layers else []


def stage_record(stage: int, ends: list[int]) -> str:
    """The :data:`CASCADE_KEY` metadata value of stage ``stage`` of a model whose stages end at ``ends``."""
    return json.dumps({"stage": stage, "stages": list(ends)}, sort_keys=True)


@dataclass(frozen=True)
class StageIO:
    """A stage graph's input and output names and dynamic axes."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic_axes: dict


def stage_io(stage: int, num_stages: int) -> StageIO:
    inputs = TOKEN_INPUTS if stage == 0 else HIDDEN_INPUTS
    last = stage == num_stages - 1
    outputs = ("logits",) if last else (HIDDEN_OUTPUT, "logits")
    axes = {name: _TOKEN_AXES for name in (*inputs, *outputs) if name != "logits"}
    return StageIO(inputs, outputs, {**axes, "logits": {0: "batch"}})


class CascadeStageModule(torch.nn.Module):
    """Stage ``stage`` of ``model``'s cascade with positional inputs, as the tracer wants (see the module docstring).
    Trace the last stage inside :func:`~as2hub.modeling.first_token.first_token_last_layer`, as ``TorchStages`` runs
    it."""

    def __init__(self, model, stage: int):
        super().__init__()
        self.model = model
        self.stage = stage
        self.ends = stage_ends(model.config)

    def forward(self, *inputs):
        model, stage = self.model, self.stage
        if stage == 0:
            input_ids, attention_mask, token_type_ids = inputs
            hidden = model.cascade_embed(input_ids, attention_mask, token_type_ids)
        else:
            hidden, attention_mask = inputs
        start = self.ends[stage - 1] if stage else 0
        hidden = model.cascade_encode(hidden, attention_mask, start, self.ends[stage])
        if stage == len(self.ends) - 1:
            return model.classify_hidden(hidden)
        return hidden, model.cascade_head_logits(stage, hidden)


@dataclass
class StageCase:
    """One batch of one stage: the graph's inputs and what the torch staged path returns for them."""

    inputs: dict[str, torch.Tensor]
    hidden: torch.Tensor | None  # None for the last stage
    logits: torch.Tensor


def torch_stage_cases(model, batches: list[dict[str, torch.Tensor]]) -> list[list[StageCase]]:
    """Per stage, per batch: the inputs and outputs of the torch staged path (:class:`~as2hub.inference.cascade.
    TorchStages`), each later stage fed the previous stage's hidden states of the same batch (padding included)."""
    runner = TorchStages(model)
    cases: list[list[StageCase]] = [[] for _ in runner.stages]
    with torch.no_grad():  # not inference_mode: the inputs are traced by the exporter
        for batch in batches:
            hidden, mask = None, batch["attention_mask"]
            for stage in range(len(runner.stages)):
                if stage == 0:
                    inputs = {name: batch[name] for name in TOKEN_INPUTS}
                    out, logits = runner.run(0, batch=inputs)
                else:
                    inputs = {"hidden_states": hidden, "attention_mask": mask}
                    out, logits = runner.run(stage, hidden=hidden, attention_mask=mask)
                cases[stage].append(StageCase(inputs, out, logits.float()))
                hidden = out
    return cases


def trace_context(model, stage: int):
    """What the last stage is traced in: the first-token last layer (a no-op context for the other stages)."""
    if stage == len(stage_ends(model.config)) - 1:
        return first_token_last_layer(model)
    return contextlib.nullcontext(False)


class OnnxCascadeStages:
    """The cascade's stages on ONNX Runtime sessions (one per stage graph): what
    :func:`~as2hub.inference.cascade.cascade_scores` asks of a backend (``.stages`` and ``.run``).

    ``run(stage, batch=None, hidden=None, attention_mask=None) -> (hidden, logits)`` as torch tensors: stage 0 takes
    the padded token batch, a later stage the previous stage's hidden states (float32) re-padded with their 0/1 mask;
    the last stage returns ``None`` for the hidden states.
    """

    def __init__(self, sessions, stages: list[int]):
        if len(sessions) != len(stages):
            raise ValueError(f"{len(stages)} cascade stages need as many sessions, got {len(sessions)}")
        self.sessions = list(sessions)
        self.stages = list(stages)
        self.device = torch.device("cpu")

    def run(self, stage: int, batch=None, hidden=None, attention_mask=None):
        session = self.sessions[stage]
        if stage == 0:
            feed = {name: _int64(batch[name]) for name in TOKEN_INPUTS}
        else:
            feed = {
                "hidden_states": np.ascontiguousarray(hidden.detach().to(torch.float32).cpu().numpy()),
                "attention_mask": _int64(attention_mask),
            }
        outputs = session.run(None, feed)
        if stage == len(self.stages) - 1:
            return None, torch.from_numpy(outputs[0])
        return torch.from_numpy(outputs[0]), torch.from_numpy(outputs[1])


def _int64(tensor) -> np.ndarray:
    return np.ascontiguousarray(torch.as_tensor(tensor).cpu().numpy().astype(np.int64, copy=False))

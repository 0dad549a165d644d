"""The pipeline saved with every joint multi-candidate model (``config.custom_pipelines``).

``*_k`` heads (answer sentence selection) register the task ``"joint-ranking"``: the candidates are read k at a time
(consecutive groups of k, the last one with empty slots), in one forward pass, and returned sorted by the probability
that they are correct::

    >>> from transformers import pipeline
    >>> ranker = pipeline("joint-ranking", model="path/to/folder", trust_remote_code=True)  # doctest: +SKIP
    >>> ranker({"question": "who wrote hamlet?", "candidates": ["Hamlet is a play.", "Shakespeare wrote it."]})
    [{'candidate': 'Shakespeare wrote it.', 'score': 0.91, 'index': 1}, {'candidate': 'Hamlet is a play.', ...}]

``*_1`` heads (fact verification) register ``"joint-classification"``: a claim and up to k evidences (the first k are
read) give label probabilities, best first::

    >>> verifier = pipeline("joint-classification", model="path/to/folder", trust_remote_code=True)  # doctest: +SKIP
    >>> verifier({"claim": "Hamlet is a comedy.", "evidences": ["Hamlet is a tragedy by Shakespeare."]})
    [{'label': 'REFUTES', 'score': 0.8}, {'label': 'SUPPORTS', 'score': 0.1}, ...]

``"question"``/``"claim"`` and ``"candidates"``/``"evidences"`` are interchangeable keys. Without a task name,
``pipeline(model=folder, trust_remote_code=True)`` picks the one the folder registers. Pass one input at a time or a
list (``batch_size`` 1: the groups of one input already share a forward pass).
"""

import torch
from transformers import Pipeline

from .joint_layout import SlotLayout, group

QUERY_KEYS = ("question", "claim")
CANDIDATE_KEYS = ("candidates", "evidences")


def _field(inputs: dict, keys: tuple[str, ...]):
    for key in keys:
        if key in inputs:
            return inputs[key]
    raise ValueError(f"the input needs one of the keys {keys}; got {sorted(inputs)}")


class JointRankingPipeline(Pipeline):
    """Ranks candidates (``*_k`` heads) or classifies a claim with its evidences (``*_1`` heads)."""

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, top_k=None, **kwargs):
        postprocess = {"top_k": top_k} if top_k is not None else {}
        return {}, {}, postprocess

    def _layout(self) -> SlotLayout:
        if getattr(self, "_slot_layout", None) is None:
            config = self.model.config
            self._slot_layout = SlotLayout.from_tokenizer(self.tokenizer, config.num_candidates, config.slot_length)
        return self._slot_layout

    def preprocess(self, inputs):
        if not isinstance(inputs, dict):
            raise ValueError(
                'pass {"question": str, "candidates": [str, ...]} (or {"claim": str, "evidences": [str, ...]}), got '
                f"{type(inputs).__name__}"
            )
        query, candidates = _field(inputs, QUERY_KEYS), _field(inputs, CANDIDATE_KEYS)
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"the question/claim must be a non-empty string, got {query!r:.80}")
        if isinstance(candidates, str) or not isinstance(candidates, (list, tuple)):
            raise ValueError(f"candidates/evidences must be a list of strings, got {type(candidates).__name__}")
        if not candidates:
            raise ValueError("no candidates: pass at least one candidate/evidence sentence")
        for index, candidate in enumerate(candidates):
            if not isinstance(candidate, str) or not candidate.strip():
                raise ValueError(f"candidate {index} must be a non-empty string, got {candidate!r:.80}")
        layout = self._layout()
        candidates = list(candidates)
        if self.model.config.candidate_head:
            groups = group(candidates, layout.num_candidates)
        else:
            groups = [candidates[: layout.num_candidates]]
        rows = [layout.encode_texts(self.tokenizer, query, chunk) for chunk in groups]
        model_inputs = layout.batch(rows)
        model_inputs["candidates"] = candidates
        return model_inputs

    def _forward(self, model_inputs):
        candidates = model_inputs.pop("candidates")
        logits = self.model(**model_inputs).logits
        return {"logits": logits, "candidates": candidates}

    def postprocess(self, model_outputs, top_k=None):
        logits = model_outputs["logits"].float()
        candidates = model_outputs["candidates"]
        if self.model.config.candidate_head:
            scores = torch.sigmoid(logits).reshape(-1)[: len(candidates)].tolist()
            ranked = sorted(range(len(candidates)), key=lambda i: -scores[i])
            result = [{"candidate": candidates[i], "score": scores[i], "index": i} for i in ranked]
        else:
            row = logits[0]
            if row.shape[-1] == 1:
                probabilities = [float(torch.sigmoid(row[0]))]
            else:
                probabilities = row.softmax(-1).tolist()
            labels = self.model.config.id2label
            order = sorted(range(len(probabilities)), key=lambda i: -probabilities[i])
            result = [{"label": labels[i], "score": probabilities[i]} for i in order]
        return result[:top_k] if top_k is not None else result

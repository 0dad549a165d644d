"""Batching grouped examples for the joint multi-candidate models: a question (or claim) and up to k candidates.

Each example becomes k+1 slots of L tokens with the model's own layout (``joint_layout.SlotLayout``, shipped with the
model, so training and the pipeline build identical inputs): ``input_ids``, ``attention_mask``, ``token_type_ids``
(slot index), and labels:

- per candidate (``labels``: a list, AS2 and MSPP): ``(batch, k)``, -100 on empty slots;
- per input (``label``: an int, fact verification): ``(batch,)``.

With ``mlm_probability > 0`` (MLM + MSPP pre-training) the batch is masked by transformers'
``DataCollatorForLanguageModeling.torch_mask_tokens`` (15%, 80/10/10), as :class:`PretrainingCollator` does; special
tokens, padding and empty slots are never selected. The MLM targets go to ``labels`` and the per-candidate labels to
``label_name`` (``"sentence_labels"``, the argument of the ``*ForJointPretraining`` models).

Feature keys: the query is ``question``, ``claim``, ``text_a`` (MSPP) or ``query``; the candidates ``candidates`` or
``evidences`` (texts).

Example:
    >>> collator = JointCollator(tokenizer, num_candidates=5, slot_length=64)  # doctest: +SKIP
    >>> batch = collator([{"question": "who wrote hamlet?", "candidates": ["Shakespeare.", "A play."],
    ...                    "labels": [1, 0]}])  # doctest: +SKIP
    >>> batch["input_ids"].shape, batch["labels"].tolist()  # doctest: +SKIP
    (torch.Size([1, 384]), [[1, 0, -100, -100, -100]])
"""

from dataclasses import dataclass, field

import torch
from transformers import DataCollatorForLanguageModeling

from as2hub.modeling.joint_multicandidate.joint_layout import IGNORE_INDEX, SlotLayout

QUERY_KEYS = ("question", "claim", "text_a", "query")
CANDIDATE_KEYS = ("candidates", "evidences")


def _first_key(feature: dict, keys: tuple[str, ...]) -> str:
    for key in keys:
        if key in feature:
            return key
    raise KeyError(f"a joint example needs one of the keys {keys}; got {sorted(feature)}")


@dataclass
class JointCollator:
    """Collate grouped examples into joint-model inputs.

    Args:
        tokenizer: the model's tokenizer (its single-sequence special tokens frame every slot).
        num_candidates: k, candidate slots per input (the model's ``config.num_candidates``).
        slot_length: L, tokens per slot (``config.slot_length``); must hold the special tokens plus one token.
        mlm_probability: 0 (fine-tuning) or the MLM masking rate (pre-training).
        mask_replace_prob, random_replace_prob: the 80/10/10 split of selected tokens.
        seed: seed of the masking generator (None: torch's global RNG).
        label_name: key of the candidate / input labels in the batch (``"labels"`` for fine-tuning,
            ``"sentence_labels"`` for MLM + MSPP pre-training).
    """

    tokenizer: object
    num_candidates: int = 5
    slot_length: int = 64
    mlm_probability: float = 0.0
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    seed: int | None = None
    label_name: str = "labels"
    layout: SlotLayout = field(init=False)
    masker: DataCollatorForLanguageModeling | None = field(init=False)

    def __post_init__(self):
        self.layout = SlotLayout.from_tokenizer(self.tokenizer, self.num_candidates, self.slot_length)
        self.masker = None
        if self.mlm_probability > 0:
            if self.label_name == "labels":
                raise ValueError("with MLM the batch's 'labels' are the MLM targets: pass label_name='sentence_labels'")
            self.masker = DataCollatorForLanguageModeling(
                tokenizer=self.tokenizer,
                mlm=True,
                mlm_probability=self.mlm_probability,
                mask_replace_prob=self.mask_replace_prob,
                random_replace_prob=self.random_replace_prob,
                seed=self.seed,
            )

    @classmethod
    def for_model(cls, tokenizer, model, **kwargs) -> "JointCollator":
        """A collator with the model's k and L."""
        return cls(tokenizer, model.config.num_candidates, model.config.slot_length, **kwargs)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        query_key, candidate_key = _first_key(features[0], QUERY_KEYS), _first_key(features[0], CANDIDATE_KEYS)
        texts = [feature[query_key] for feature in features]
        for feature in features:
            texts.extend(feature[candidate_key])
        unique = list(dict.fromkeys(texts))
        ids = dict(zip(unique, self.tokenizer(unique, add_special_tokens=False)["input_ids"]))
        rows = [
            self.layout.build(ids[feature[query_key]], [ids[text] for text in feature[candidate_key]])
            for feature in features
        ]
        batch = self.layout.batch(rows)
        k = self.num_candidates
        if "labels" in features[0] and features[0]["labels"] is not None:
            labels = torch.full((len(features), k), IGNORE_INDEX, dtype=torch.long)
            for row, feature in enumerate(features):
                values = list(feature["labels"])
                if len(values) != len(feature[candidate_key]):
                    raise ValueError(f"{len(values)} labels for {len(feature[candidate_key])} candidates")
                labels[row, : len(values)] = torch.tensor(values, dtype=torch.long)
            batch[self.label_name] = labels
        elif "label" in features[0]:
            batch[self.label_name] = torch.tensor([int(feature["label"]) for feature in features], dtype=torch.long)
        if self.masker is not None:
            special = self.layout.batch(rows, keys=("special_tokens_mask",))["special_tokens_mask"]
            if self.masker.seed is not None and self.masker.generator is None:
                self.masker.create_rng()
            batch["input_ids"], batch["labels"] = self.masker.torch_mask_tokens(
                batch["input_ids"], special_tokens_mask=special
            )
        return batch

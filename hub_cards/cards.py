"""Model cards built from a run's own records with huggingface_hub's ``ModelCard`` / ``ModelCardData`` / ``EvalResult``.

A run script leaves two records in its output folder: the run record ``as2hub_run.json`` (family, arguments, data
sources, base model, what to validate before a push; see ``as2hub.hub_cards.push``) and its metrics JSON
(``all_results.json``, ``pretrain_results.json``). :func:`build_model_card` turns them into a card:

- front matter the Hub indexes: ``library_name: transformers`` (``peft`` for a LoRA adapter), ``pipeline_tag``, tags
  (``as2hub``, ``custom_code``, the family's and the objective's), ``license`` (only when given), ``datasets`` and
  ``base_model`` (Hub ids only: a local folder is never named), ``language`` (when the data says it), and a
  ``model-index`` with one ``EvalResult`` per metric the run measured;
- a body: what the model is, how to use it, training data / objective / hyper-parameters, the evaluation table (or
  "Not evaluated"), limitations, license, and the BibTeX of the paper(s).

Nothing is invented: a metric that is not in the metrics file is not reported and there is no link to a repository
that does not exist.

    >>> from huggingface_hub import ModelCard
    >>> card = build_model_card(record, metrics, model_id="me/minilm-wikiqa")  # doctest: +SKIP
    >>> ModelCard(str(card)).data.eval_results[0].metric_value  # doctest: +SKIP
    0.686

A new family plugs in with one declarative :class:`Family` entry (see ``families.py``)::

    register_family(Family(
        name="my_ranker",                                 # the run record's "family"
        summary=lambda ctx: "A ... answer sentence selection model ...",
        pipeline_tag="text-ranking",
        tags=("answer-sentence-selection",),
        task=("text-ranking", "Answer Sentence Selection"),
        metrics=(Metric("test", "test_map", "map", "MAP"), Metric("test", "test_mrr", "mrr", "MRR")),
        usage=lambda ctx: f'pipeline("joint-ranking", model="{ctx.model_id}", trust_remote_code=True)',
        citations=("diliello2022paragraph",),
    ))

The registered families (``families.py``): ``contextual_as2``, ``ssp_pretraining`` (MSPP runs included),
``joint_multicandidate``, ``joint_fact_verification`` and ``longformer_qe``.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .citations import BIBTEX

NOT_EVALUATED = "Not evaluated"


@dataclass(frozen=True)
class Metric:
    """One metric of the metrics file, reported as an ``EvalResult``.

    ``results`` is the section of the metrics file (``"test"``, ``"dev"``, ``"eval"``), ``key`` the entry inside it
    (``"test_map"``), ``type`` / ``name`` the model-index metric type and its pretty name, ``split`` the dataset split
    it was measured on.
    """

    results: str
    key: str
    type: str
    name: str
    split: str = "test"


@dataclass(frozen=True)
class DatasetRef:
    """The data a metric was measured on: ``type`` (a Hub dataset id when there is one) and a readable ``name``."""

    type: str
    name: str
    hub_id: str | None = None


@dataclass
class CardContext:
    """What a family's card functions read: the run record, its metrics and where the card will live."""

    record: dict
    metrics: dict
    model_id: str
    variant: str = "model"  # "model", or "adapter" for a LoRA adapter repository
    base_model: str | None = None  # Hub id of the base model (None: trained from scratch or from a local folder)
    license: str | None = None

    @property
    def model_args(self) -> dict:
        return self.record.get("arguments", {}).get("model", {})

    @property
    def data_args(self) -> dict:
        return self.record.get("arguments", {}).get("data", {})

    @property
    def training_args(self) -> dict:
        return self.record.get("arguments", {}).get("training", {})

    @property
    def config(self) -> dict:
        return self.record.get("config", {})

    @property
    def extras(self) -> dict:
        return self.record.get("extras", {})

    def is_local(self, value) -> bool:
        """True when ``value`` (a data or model argument) named a local file or folder when the run was saved."""
        return value is not None and str(value) in self.record.get("local_paths", [])

    def hub_id(self, value) -> str | None:
        """``value`` if it names something on the Hub (``namespace/name`` and not a local path), else None."""
        if value is None or self.is_local(value):
            return None
        value = str(value)
        return value if value.count("/") == 1 and not value.startswith((".", "/", "~")) else None


def _no_text(ctx: CardContext) -> str:
    return ""


def _no_list(ctx: CardContext) -> list:
    return []


def _default_dataset(ctx: CardContext, split: str) -> DatasetRef:
    source = ctx.data_args.get("dataset") or ctx.data_args.get("corpus") or "unknown"
    hub = ctx.hub_id(source)
    return DatasetRef(hub or Path(str(source)).name, Path(str(source)).name, hub)


@dataclass(frozen=True)
class Family:
    """A model family's card entry. Only ``name``, ``summary``, ``usage`` and ``citations`` are required.

    Functions take a :class:`CardContext`. ``summary``: what the model is (markdown paragraph); ``usage``: how to use
    it (markdown with code, ``ctx.model_id`` is the repository or folder); ``adapter_usage``: the same for a LoRA
    adapter repository; ``training``: bullets on objective and data; ``dataset(ctx, split)``: what a metric was
    measured on; ``datasets`` / ``language``: front-matter lists; ``objective_tag``: the objective as a tag;
    ``limitations``: markdown bullets; ``evaluation_notes``: more of the run's measurements, under the table.
    """

    name: str
    summary: Callable[[CardContext], str]
    usage: Callable[[CardContext], str]
    citations: tuple[str, ...]
    pipeline_tag: str | None = None
    tags: tuple[str, ...] = ()
    task: tuple[str, str] = ("text-classification", "Text Classification")
    metrics: tuple[Metric, ...] = ()
    adapter_usage: Callable[[CardContext], str] | None = None
    training: Callable[[CardContext], list[str]] = _no_list
    dataset: Callable[[CardContext, str], DatasetRef] = _default_dataset
    datasets: Callable[[CardContext], list[str]] = _no_list
    language: Callable[[CardContext], list[str]] = _no_list
    objective_tag: Callable[[CardContext], str | None] = lambda ctx: None
    limitations: Callable[[CardContext], str] = _no_text
    evaluation_notes: Callable[[CardContext], str] = _no_text


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Make ``family`` the card entry of run records whose ``"family"`` is ``family.name``."""
    unknown = [key for key in family.citations if key not in BIBTEX]
    if unknown:
        raise ValueError(f"family {family.name!r} cites unknown BibTeX keys {unknown}: add them to citations.BIBTEX")
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise KeyError(f"no model card entry for family {name!r}: known {sorted(FAMILIES)} (register_family)")
    return FAMILIES[name]


def eval_results(ctx: CardContext, family: Family | None = None) -> list[EvalResult]:
    """One ``EvalResult`` per metric of ``family.metrics`` found in the metrics file (the others are left out)."""
    family = family or get_family(ctx.record["family"])
    results = []
    for metric in family.metrics:
        value = ctx.metrics.get(metric.results, {}).get(metric.key)
        if value is None:
            continue
        dataset = family.dataset(ctx, metric.split)
        results.append(
            EvalResult(
                task_type=family.task[0],
                task_name=family.task[1],
                dataset_type=dataset.type,
                dataset_name=dataset.name,
                dataset_split=metric.split,
                metric_type=metric.type,
                metric_name=metric.name,
                metric_value=float(value),
            )
        )
    return results


TRAINING_LABELS = {
    "learning_rate": "learning rate",
    "num_train_epochs": "epochs (maximum)",
    "max_steps": "steps (maximum)",
    "per_device_train_batch_size": "batch size per device",
    "gradient_accumulation_steps": "gradient accumulation steps",
    "total_train_batch_size": "total batch size",
    "warmup_steps": "warmup steps (or ratio)",
    "lr_scheduler_type": "learning-rate schedule",
    "weight_decay": "weight decay",
    "max_grad_norm": "gradient clipping (max norm)",
    "optim": "optimizer",
    "bf16": "bf16",
    "fp16": "fp16",
    "seed": "seed",
    "metric_for_best_model": "checkpoint selection metric",
}


def _hyperparameter_table(ctx: CardContext) -> str:
    rows = []
    for key, label in TRAINING_LABELS.items():
        value = ctx.training_args.get(key)
        if value is None or (key == "max_steps" and value in (-1, 0)) or (key in ("bf16", "fp16") and not value):
            continue
        rows.append(f"| {label} | `{value}` |")
    train = ctx.metrics.get("train", {})
    if "epoch" in train:
        rows.append(f"| epochs run | `{train['epoch']:.3g}` |")
    if "train_runtime" in train:
        rows.append(f"| training time | `{train['train_runtime']:.3g} s` |")
    if not rows:
        return ""
    return "| hyper-parameter | value |\n|---|---|\n" + "\n".join(rows)


def _evaluation_section(ctx: CardContext, results: list[EvalResult]) -> str:
    if not results:
        return (
            f"**{NOT_EVALUATED}.** The run that produced this model measured no held-out metric (no evaluation data "
            "was given), so this card reports none."
        )
    lines = ["| data | split | metric | value |", "|---|---|---|---|"]
    for result in results:
        lines.append(
            f"| {result.dataset_name} | {result.dataset_split} | {result.metric_name} | {result.metric_value:.4f} |"
        )
    return "Measured by the training run (values from its metrics file, also in this card's `model-index`):\n\n" + (
        "\n".join(lines)
    )


def _license_section(ctx: CardContext) -> str:
    code = "The model code in this repository (`*.py`) is part of as2hub (Apache-2.0)."
    if ctx.license:
        return f"{code} The weights are released under `{ctx.license}`."
    return (
        f"{code} No license was declared for the weights: they derive from the base model and the training data, "
        "whose licenses apply."
    )


def _generic_adapter_usage(ctx: CardContext) -> str:
    return f"""This repository holds a LoRA adapter (PEFT) for `{ctx.base_model}`, with the model code and config it
plugs into:

```python
from peft import PeftModel
from transformers import AutoConfig
from transformers.dynamic_module_utils import get_class_from_dynamic_module

config = AutoConfig.from_pretrained("{ctx.model_id}", trust_remote_code=True)
model_class = get_class_from_dynamic_module(config.auto_map["AutoModel"], "{ctx.model_id}")
base = model_class.from_pretrained("{ctx.base_model}", config=config, ignore_mismatched_sizes=True)
model = PeftModel.from_pretrained(base, "{ctx.model_id}")
```"""


def build_model_card(
    record: dict,
    metrics: dict,
    model_id: str,
    variant: str = "model",
    base_model: str | None = None,
    license: str | None = None,
) -> ModelCard:
    """The card of a run's folder (``variant="model"``) or of its LoRA adapter (``variant="adapter"``).

    ``model_id`` is where the card will live (``namespace/name`` on the Hub, or the folder): it names the model in
    the usage snippets and the model-index. ``base_model`` overrides the run's base model (a Hub id; a local folder
    is never named). ``license`` is a Hub license id; without one the card says none was declared.
    """
    family = get_family(record["family"])
    lora = bool(record.get("arguments", {}).get("model", {}).get("use_lora"))
    ctx = CardContext(record, metrics, model_id, variant, None, license)
    ctx.base_model = base_model or ctx.hub_id(record.get("base_model"))
    results = eval_results(ctx, family)
    adapter = variant == "adapter"
    tags = ["as2hub", *family.tags]
    if record.get("remote_code", True):
        tags.append("custom_code")
    objective = family.objective_tag(ctx)
    if objective:
        tags.append(objective)
    if lora:
        tags += ["lora", "peft"] if adapter else ["lora"]
    data = ModelCardData(
        library_name="peft" if adapter else "transformers",
        pipeline_tag=family.pipeline_tag,
        tags=tags,
        license=license,
        datasets=family.datasets(ctx) or None,
        base_model=ctx.base_model,
        language=family.language(ctx) or None,
        model_name=model_id.rsplit("/", 1)[-1],
        eval_results=results or None,
    )
    usage = (family.adapter_usage or _generic_adapter_usage)(ctx) if adapter else family.usage(ctx)
    base = f"`{ctx.base_model}`" if ctx.base_model else _base_description(record)
    training = [f"Base model: {base}.", *family.training(ctx)]
    if lora:
        args = ctx.model_args
        trained = ctx.extras.get("lora_modules_to_save")  # recorded from the run's PEFT config
        trained = (
            "the classifier and token-type embeddings"
            if trained is None
            else ", ".join(f"`{name}`" for name in trained) or "nothing else"
        )
        training.append(
            f"LoRA (PEFT): r={args.get('lora_r')}, alpha={args.get('lora_alpha')}, dropout={args.get('lora_dropout')}, "
            f"on `{args.get('lora_target_modules')}`; trained fully: {trained}. "
            + ("This repository holds the adapter." if adapter else "This repository holds the merged weights.")
        )
    table = _hyperparameter_table(ctx)
    sections = [
        f"# {model_id.rsplit('/', 1)[-1]}",
        family.summary(ctx),
        "## How to use",
        usage,
        "## Training",
        "\n".join(f"- {line}" for line in training) + (f"\n\n{table}" if table else ""),
        "## Evaluation",
        _evaluation_section(ctx, results),
        family.evaluation_notes(ctx),
        "## Limitations",
        family.limitations(ctx)
        or "- Evaluated only on the data named above; check it on yours before relying on its scores.",
        "## License",
        _license_section(ctx),
        "## Citation",
        "```bibtex\n" + "\n\n".join(BIBTEX[key] for key in family.citations) + "\n```",
        f"Trained and published with as2hub {record.get('as2hub_version', '')}".rstrip() + ".",
    ]
    body = "\n\n".join(section for section in sections if section) + "\n"
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def _base_description(record: dict) -> str:
    source = record.get("base_model")
    if source:
        return f"a local checkpoint (`{Path(str(source)).name}`, not on the Hub)"
    return "none: trained from scratch (random initialisation)"

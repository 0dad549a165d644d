"""Card entries of the families built by this package's run scripts: contextual AS2 and SSP pre-training."""

from pathlib import Path

from . import CardContext, DatasetRef, Family, Metric, register_family

WIKIQA_HUB_ID = "microsoft/wiki_qa"
EMBEDDED_AS2 = DatasetRef(
    "as2hub-embedded-python-docs", "Sentence selection over Python's documentation (as2hub's embedded task)"
)
EMBEDDED_CORPUS = "Python's own documentation (`pydoc_data.topics`, embedded in as2hub)"

OBJECTIVE_DESCRIPTIONS = {  # objective -> (what the sentence head predicts, the paper)
    "ssp": ("are two spans from the same paragraph?", "Di Liello et al., 2022"),
    "sp": ("is B the rest of A's paragraph?", "Di Liello et al., 2022"),
    "psd": ("are two paragraphs from the same document?", "Di Liello et al., 2022"),
    "sdc": ("are a and b from the same paragraph, given the document's first paragraph?", "Di Liello et al., 2023"),
    "dpc": ("are a and b from the same paragraph, given the rest of that paragraph?", "Di Liello et al., 2023"),
    "dslc": ("are a and b from the same paragraph, given the sentences around b?", "Di Liello et al., 2023"),
    "all": ("a mix of SDC, DPC and DSLC with one sentence head", "Di Liello et al., 2023"),
    "all_pairs": ("a mix of SSP, SP and PSD with one sentence head", "Di Liello et al., 2022"),
    "mspp": (
        "which of k candidate sentences, read in one pass with a sentence of a paragraph, come from that paragraph? "
        "(joint multi-candidate model)",
        "Di Liello et al., 2022 (NAACL)",
    ),
    "mlm": ("masked language modelling only, the ablation without a sentence-level objective", None),
}


def _describe_objective(objective: str) -> str:
    question, paper = OBJECTIVE_DESCRIPTIONS.get(objective, ("see the papers", None))
    return f"**{objective.upper()}** ({question}" + (f"; {paper})" if paper else ")")


def _file_dataset(ctx: CardContext, source) -> DatasetRef:
    hub = ctx.hub_id(source)
    name = Path(str(source)).name
    return DatasetRef(hub or name, hub or name, hub)


# -- contextual AS2 -------------------------------------------------------------------------------------------------


def _as2_dataset(ctx: CardContext, split: str) -> DatasetRef:
    data = ctx.data_args
    dataset = data.get("dataset", "embedded")
    if dataset == "wikiqa":
        clean = " (clean: questions with both a correct and a wrong candidate)" if data.get("clean_eval", True) else ""
        return DatasetRef(WIKIQA_HUB_ID, f"WikiQA{clean}", WIKIQA_HUB_ID)
    if dataset == "embedded":
        return EMBEDDED_AS2
    file = {"test": data.get("test_file"), "validation": data.get("validation_file")}.get(split)
    return _file_dataset(ctx, file or dataset)


def _as2_datasets(ctx: CardContext) -> list[str]:
    data = ctx.data_args
    if data.get("dataset") == "wikiqa":
        return [WIKIQA_HUB_ID]
    sources = [data.get(key) for key in ("dataset", "validation_file", "test_file")]
    return list(dict.fromkeys(hub for hub in map(ctx.hub_id, sources) if hub))


def _english_if_known(ctx: CardContext) -> list[str]:
    return ["en"] if ctx.data_args.get("dataset") in ("wikiqa", "embedded") else []


def _contextual(ctx: CardContext) -> bool:
    return bool(ctx.config.get("contextual"))


def _as2_summary(ctx: CardContext) -> str:
    architecture = ctx.record.get("architecture", "a cross-encoder")
    if _contextual(ctx):
        what = (
            "a **contextual** answer sentence selection (AS2) cross-encoder: it reads a question, a candidate "
            "answer sentence and the candidate's context (the sentences around it in its document) as one sequence "
            "with three segment ids (question 0, candidate 1, context 2), as in Di Liello, Garg and Moschitti "
            "(ACL 2023)"
        )
    else:
        what = (
            "a **pairwise** answer sentence selection (AS2) cross-encoder: it reads a question and a candidate "
            "answer sentence (the paper's baseline without context)"
        )
    return (
        f"`{architecture}`, {what}. Its single output logit, labelled `correct`, gives the probability that the "
        "candidate answers the question; rank a question's candidates by it."
    )


def _as2_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    sep = ctx.extras.get("context_separator", "[SEP]")
    pipe = f'''```python
from transformers import pipeline

ranker = pipeline("text-classification", model="{model_id}", trust_remote_code=True)
question = "Who wrote Hamlet?"'''
    if _contextual(ctx):
        pipe += f'''
candidate, context = "It was written around 1600.", "Hamlet is a tragedy. Its author is William Shakespeare."
# The context follows the candidate after the separator "{sep}"; the model gives it segment 2.
ranker({{"text": question, "text_pair": candidate + "{sep}" + context}})
# {{'label': 'correct', 'score': ...}}: probability that the candidate answers the question
```'''
    else:
        pipe += """
ranker({"text": question, "text_pair": "Hamlet was written by William Shakespeare."})
# {'label': 'correct', 'score': ...}: probability that the candidate answers the question
```"""
    return f"""The model code ships with the weights: load it with `trust_remote_code=True` (as2hub is not needed).

{pipe}

Rank candidates with sentence-transformers' `CrossEncoder` (pairs; for contexts, build `text_pair` as above):

```python
from sentence_transformers import CrossEncoder

ranker = CrossEncoder("{model_id}", trust_remote_code=True)
ranker.rank("Who wrote Hamlet?", ["Hamlet was written by William Shakespeare.", "Paris is in France."])
```

Or the model itself (`AutoModel` works too):

```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{model_id}")
model = AutoModelForSequenceClassification.from_pretrained("{model_id}", trust_remote_code=True)
batch = tokenizer(["Who wrote Hamlet?"], ["Hamlet was written by William Shakespeare."], return_tensors="pt")
model(**batch).logits.sigmoid()  # probability of "correct"
```

Fine-tune it further with PEFT/LoRA (the head and the segment embeddings trained fully, as as2hub does):

```python
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForSequenceClassification

model = AutoModelForSequenceClassification.from_pretrained("{model_id}", trust_remote_code=True)
lora = LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"],
                  modules_to_save=["classifier", "token_type_embeddings"])
model = get_peft_model(model, lora)  # then train it with the Trainer on tokenized (question, candidate) pairs
```

or, with as2hub installed, with its fine-tuning script (early stopping on dev MAP, contexts, LoRA):

```bash
python -m as2hub.run_scripts.run_as2 --model_name_or_path {model_id} --dataset data/train.jsonl \\
    --validation_file data/dev.jsonl --output_dir ranker [--use_lora]
```"""


def _as2_adapter_usage(ctx: CardContext) -> str:
    model_id, base = ctx.model_id, ctx.base_model
    return f"""This repository holds a LoRA adapter (PEFT) for `{base}` together with the model code and config it plugs
into (the classifier and the token-type embeddings are stored whole in the adapter). as2hub is not needed:

```python
from peft import PeftModel
from transformers import AutoConfig, AutoTokenizer, pipeline
from transformers.dynamic_module_utils import get_class_from_dynamic_module

config = AutoConfig.from_pretrained("{model_id}", trust_remote_code=True)
model_class = get_class_from_dynamic_module(config.auto_map["AutoModelForSequenceClassification"], "{model_id}")
base = model_class.from_pretrained("{base}", config=config, ignore_mismatched_sizes=True)  # head: from the adapter
model = PeftModel.from_pretrained(base, "{model_id}").eval()
tokenizer = AutoTokenizer.from_pretrained("{model_id}")
ranker = pipeline("text-classification", model=model, tokenizer=tokenizer)
ranker({{"text": "Who wrote Hamlet?", "text_pair": "Hamlet was written by William Shakespeare."}})
```

`model.merge_and_unload()` gives a plain model with the adapter folded in."""


def _as2_training(ctx: CardContext) -> list[str]:
    data, model = ctx.data_args, ctx.model_args
    dataset = data.get("dataset", "embedded")
    if dataset == "wikiqa":
        source = "WikiQA (Yang, Yih and Meek, 2015; Microsoft Research Data License: research use) train split"
    elif dataset == "embedded":
        source = "as2hub's embedded sentence-selection task built from Python's documentation (a demo task)"
    else:
        source = f"`{_file_dataset(ctx, dataset).name}`"
    lines = [
        "Objective: binary cross-entropy on (question, candidate"
        + (", context) triples" if _contextual(ctx) else ") pairs")
        + "; the best checkpoint by validation MAP is kept, with early stopping after "
        f"{data.get('early_stopping_patience', 5)} evaluations without improvement.",
        f"Training data: {source}; max length {data.get('max_length')} tokens.",
    ]
    if _contextual(ctx):
        lines.append(
            "Context: the previous and next sentence of each candidate; the grown token-type rows were initialised "
            f"with `{model.get('token_type_init', 'scratch')}`."
        )
    return lines


def _as2_limitations(ctx: CardContext) -> str:
    lines = [
        "- A re-ranker: it scores candidates you retrieved; it does not retrieve or generate answers.",
        "- Scores are calibrated only to the training data's label balance; compare them within a question.",
        "- Inputs longer than the training max length are truncated (the context first when it is the longest).",
    ]
    if _contextual(ctx):
        lines.append("- Without a context (an empty third segment) it sees inputs unlike its training data.")
    if ctx.data_args.get("dataset") == "embedded":
        lines.append("- Trained on a small demo task from Python's documentation: not a useful general ranker.")
    if not ctx.record.get("base_model"):
        lines.append("- Trained from scratch (no pre-trained encoder): expect weak language understanding.")
    return "\n".join(lines)


register_family(
    Family(
        name="contextual_as2",
        summary=_as2_summary,
        usage=_as2_usage,
        adapter_usage=_as2_adapter_usage,
        citations=("diliello2023context",),
        pipeline_tag="text-ranking",
        tags=("answer-sentence-selection", "cross-encoder", "reranker"),
        task=("text-ranking", "Answer Sentence Selection"),
        metrics=(
            Metric("test", "test_map", "map", "MAP", "test"),
            Metric("test", "test_mrr", "mrr", "MRR", "test"),
            Metric("test", "test_p@1", "precision_at_1", "P@1", "test"),
            Metric("dev", "eval_map", "map", "MAP", "validation"),
            Metric("dev", "eval_mrr", "mrr", "MRR", "validation"),
            Metric("dev", "eval_p@1", "precision_at_1", "P@1", "validation"),
        ),
        training=_as2_training,
        dataset=_as2_dataset,
        datasets=_as2_datasets,
        language=_english_if_known,
        objective_tag=lambda ctx: "contextual-as2" if _contextual(ctx) else "pairwise-as2",
        limitations=_as2_limitations,
    )
)


# -- structure-aware continued pre-training -------------------------------------------------------------------------


def _objective(ctx: CardContext) -> str:
    return ctx.data_args.get("objective", "dslc")


def _corpus(ctx: CardContext) -> str:
    corpus = ctx.data_args.get("corpus")
    if corpus is None:
        return EMBEDDED_CORPUS
    hub = ctx.hub_id(corpus)
    return f"`{hub}`" if hub else f"`{Path(str(corpus)).name}`"


def _pretraining_dataset(ctx: CardContext, split: str) -> DatasetRef:
    corpus = ctx.data_args.get("corpus")
    fraction = ctx.data_args.get("validation_fraction", 0.2)
    if corpus is None:
        base = DatasetRef("as2hub-embedded-python-docs", "Python's documentation")
    else:
        base = _file_dataset(ctx, corpus)
    return DatasetRef(base.type, f"{base.name}: held-out documents ({fraction:.0%}, unseen in training)", base.hub_id)


def _pretraining_summary(ctx: CardContext) -> str:
    objective = _objective(ctx)
    electra = "discriminator" in ctx.record.get("components", {})
    heads = "an ELECTRA generator (MLM) and discriminator (replaced-token detection)" if electra else "a masked-LM head"
    return (
        f"`{ctx.record.get('architecture', 'an encoder')}`: an encoder continued-pre-trained with structure-aware "
        f"sentence-level objectives for answer sentence selection, with {heads} and a sentence-level head. "
        f"Objective: {_describe_objective(objective)}. It is a "
        "checkpoint to fine-tune (for contextual or pairwise AS2), not a ranker by itself."
    )


def _pretraining_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    electra = "discriminator" in ctx.record.get("components", {})
    discriminator = (
        f"""

The discriminator alone, with its sentence head, is in `discriminator/` as a stock `ElectraForSequenceClassification`
(no remote code):

```python
from transformers import AutoModelForSequenceClassification

model = AutoModelForSequenceClassification.from_pretrained("{model_id}", subfolder="discriminator")
```"""
        if electra
        else ""
    )
    return f"""Fine-tune it for (contextual) answer sentence selection with as2hub installed: the encoder and the
sentence head load into the AS2 cross-encoder (the token-type table is grown for the context segment if needed):

```bash
python -m as2hub.run_scripts.run_as2 --model_name_or_path {model_id} --dataset wikiqa --output_dir ranker
```

Load it as it is (the model code ships with the weights, as2hub is not needed), e.g. to continue pre-training or to
read its sentence-level score for a pair (the first output, `cls_logits`):

```python
from transformers import AutoModelForPreTraining, AutoTokenizer, pipeline

model = AutoModelForPreTraining.from_pretrained("{model_id}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{model_id}")
out = model(**tokenizer("A first sentence.", "A second sentence.", return_tensors="pt"))
out.cls_logits  # > 0: the two spans look like they come from the same paragraph

features = pipeline("feature-extraction", model="{model_id}", trust_remote_code=True)
features("A first sentence.")  # the first output: the sentence-head logit
```{discriminator}"""


def _pretraining_training(ctx: CardContext) -> list[str]:
    data, model = ctx.data_args, ctx.model_args
    objective = _objective(ctx)
    weights = f"loss = {model.get('mlm_weight', 1.0)}·MLM + {model.get('cls_weight', 1.0)}·sentence"
    if model.get("model_type") == "electra":
        weights = (
            f"loss = {model.get('mlm_weight', 1.0)}·MLM (generator) + {model.get('rtd_weight', 50.0)}·RTD + "
            f"{model.get('cls_weight', 1.0)}·sentence"
        )
    if objective == "mlm":
        weights = "masked language modelling only (no sentence loss)"
    return [
        f"Objective: {_describe_objective(objective)}; {weights}; up to 2 hard and 4 easy negatives per positive.",
        f"Corpus: {_corpus(ctx)}; filters: sentences under {data.get('min_sentence_chars')} characters, "
        f"paragraphs under {data.get('min_paragraph_chars')}, documents under {data.get('min_document_chars')} "
        f"dropped; {data.get('validation_fraction', 0):.0%} of the documents held out for evaluation.",
        f"Examples: {'materialised once' if data.get('materialize') else 'generated on the fly (fresh every epoch)'}"
        f", max length {data.get('max_length') or 'the objective default'}, MLM probability "
        f"{data.get('mlm_probability')}.",
    ]


def _pretraining_evaluation_notes(ctx: CardContext) -> str:
    before, after = ctx.metrics.get("before", {}), ctx.metrics.get("eval", {})
    rows = []
    for key, name in (("cls_auc", "sentence-task AUC"), ("cls_balanced_accuracy", "balanced accuracy"),
                      ("cls_accuracy", "accuracy"), ("mlm_loss", "MLM loss")):  # fmt: skip
        if f"before_{key}" in before and f"eval_{key}" in after:
            rows.append(f"| {name} | {before[f'before_{key}']:.4f} | {after[f'eval_{key}']:.4f} |")
    if not rows:
        return ""
    return (
        "On the held-out documents, before and after this run's training:\n\n| measure | before | after |\n|---|---|---|\n"
        + ("\n".join(rows))
    )


def _pretraining_limitations(ctx: CardContext) -> str:
    lines = [
        "- A pre-training checkpoint: its sentence head scores paragraph structure, not answers; fine-tune it before "
        "ranking answers.",
        "- Held-out AUC and balanced accuracy (chance level 0.5) measure the sentence task on unseen documents of the "
        "same corpus, not downstream AS2 accuracy.",
    ]
    if not ctx.record.get("base_model"):
        lines.append("- Pre-trained from scratch on a small corpus: a demonstration, not a general-purpose encoder.")
    return "\n".join(lines)


register_family(
    Family(
        name="ssp_pretraining",
        summary=_pretraining_summary,
        usage=_pretraining_usage,
        citations=("diliello2022sentence", "diliello2023context"),
        pipeline_tag=None,
        tags=("answer-sentence-selection", "continued-pretraining", "sentence-level-objectives"),
        task=("text-classification", "Sentence-level structure prediction (held-out documents)"),
        metrics=(
            Metric("eval", "eval_cls_auc", "roc_auc", "Sentence-task AUC", "held_out"),
            Metric(
                "eval", "eval_cls_balanced_accuracy", "balanced_accuracy", "Sentence-task balanced accuracy", "held_out"
            ),
        ),
        training=_pretraining_training,
        dataset=_pretraining_dataset,
        datasets=lambda ctx: [hub] if (hub := ctx.hub_id(ctx.data_args.get("corpus"))) else [],
        language=lambda ctx: ["en"] if ctx.data_args.get("corpus") is None else [],
        objective_tag=_objective,
        limitations=_pretraining_limitations,
        evaluation_notes=_pretraining_evaluation_notes,
    )
)

"""Card entries of the families built by this package's run scripts: contextual AS2 (``run_as2.py``), SSP and MSPP
pre-training (``run_pretrain.py``), joint multi-candidate AS2 and fact verification (``run_joint.py``) and Longformer
QA with the question–evidence contrastive loss (``run_qe_contrastive.py``). The joint and Longformer cards read the
model's settings (slot layout, head, λ, τ, question types) from the run record's ``config`` summary."""

from pathlib import Path

from as2hub.data_collators.objectives.structure_objectives import resolve_objective

from .cards import CardContext, DatasetRef, Family, Metric, register_family

WIKIQA_HUB_ID = "microsoft/wiki_qa"
EMBEDDED_AS2 = DatasetRef(
    "as2hub-embedded-python-docs", "Sentence selection over Python's documentation (as2hub's embedded task)"
)
EMBEDDED_CORPUS = "Python's own documentation (`pydoc_data.topics`, embedded in as2hub)"


def _describe_objective(objective: str) -> str:
    """``**DSLC** (what its sentence head predicts; the paper)``, from the objective's own definition
    (``structure_objectives.ObjectiveDefinition``)."""
    try:
        resolved = resolve_objective(objective)
    except ValueError:  # a record of another version's objective: its name only
        return f"**{str(objective).upper()}**"
    paper = resolved.paper
    return f"**{resolved.name.upper()}** ({resolved.description}" + (f"; {paper})" if paper else ")")


def _file_dataset(ctx: CardContext, source) -> DatasetRef:
    hub = ctx.hub_id(source)
    name = Path(str(source)).name
    return DatasetRef(hub or name, hub or name, hub)


# What every AS2 ranker's run measures (run_as2, run_joint): MAP / MRR / P@1 on the test and dev splits.
AS2_RANKING_METRICS = (
    Metric("test", "test_map", "map", "MAP", "test"),
    Metric("test", "test_mrr", "mrr", "MRR", "test"),
    Metric("test", "test_p@1", "precision_at_1", "P@1", "test"),
    Metric("dev", "eval_map", "map", "MAP", "validation"),
    Metric("dev", "eval_mrr", "mrr", "MRR", "validation"),
    Metric("dev", "eval_p@1", "precision_at_1", "P@1", "validation"),
)


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

tokenizer = AutoTokenizer.from_pretrained("{model_id}", trust_remote_code=True)
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
tokenizer = AutoTokenizer.from_pretrained("{model_id}", trust_remote_code=True)
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
        metrics=AS2_RANKING_METRICS,
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


def _joint_pretraining(ctx: CardContext) -> bool:
    """MSPP (or its MLM-only ablation): a joint multi-candidate model over k + 1 slots, not a pair encoder."""
    return _objective(ctx).endswith("mspp")


def _pretraining_summary(ctx: CardContext) -> str:
    objective = _objective(ctx)
    if _joint_pretraining(ctx):
        return (
            f"`{ctx.record.get('architecture', 'a joint encoder')}`: a **joint multi-candidate** encoder (Di Liello, "
            "Garg, Soldaini and Moschitti, NAACL 2022) pre-trained with a masked-LM head and the MSPP head "
            f"({_joint_layout(ctx)}). Objective: {_describe_objective(objective)}. It is a checkpoint to fine-tune "
            "with as2hub's `run_joint.py` (joint AS2 or fact verification), not a ranker by itself."
        )
    electra = "discriminator" in ctx.record.get("components", {})
    heads = "an ELECTRA generator (MLM) and discriminator (replaced-token detection)" if electra else "a masked-LM head"
    return (
        f"`{ctx.record.get('architecture', 'an encoder')}`: an encoder continued-pre-trained with structure-aware "
        f"sentence-level objectives for answer sentence selection, with {heads} and a sentence-level head. "
        f"Objective: {_describe_objective(objective)}. It is a "
        "checkpoint to fine-tune (for contextual or pairwise AS2), not a ranker by itself."
    )


def _joint_pretraining_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    head = ctx.config.get("head", "AE_k")
    return f"""Fine-tune it for joint answer sentence selection (or fact verification, `--task fv --head AE_1`) with
as2hub installed: the encoder and the MSPP head load into the joint ranker:

```bash
python -m as2hub.run_scripts.run_joint --model_name_or_path {model_id} --head {head} --dataset wikiqa --output_dir joint
```

Load it as it is (the model code ships with the weights, as2hub is not needed), e.g. to continue pre-training; its
input is the slot layout above (`joint_layout.SlotLayout`, shipped in this repository), and `cls_logits` holds one
MSPP logit per candidate slot:

```python
from transformers import AutoModelForPreTraining

model = AutoModelForPreTraining.from_pretrained("{model_id}", trust_remote_code=True)
model.config.num_candidates, model.config.slot_length, model.config.head
```"""


def _pretraining_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    if _joint_pretraining(ctx):
        return _joint_pretraining_usage(ctx)
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
tokenizer = AutoTokenizer.from_pretrained("{model_id}", trust_remote_code=True)
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
    if objective.startswith("mlm"):
        weights = "masked language modelling only (no sentence loss)"
    if _joint_pretraining(ctx):
        k = ctx.config.get("num_candidates")
        positives, hard = data.get("mspp_positives"), data.get("mspp_hard_negatives")
        weights = weights.replace("sentence", "MSPP")
        negatives = (
            f"{positives} candidate(s) from the anchor's paragraph, {hard} from other paragraphs of its document and "
            f"the rest of the k = {k} slots from other documents (shuffled); input: {_joint_layout(ctx)}"
        )
    else:
        negatives = "up to 2 hard and 4 easy negatives per positive"
    return [
        f"Objective: {_describe_objective(objective)}; {weights}; {negatives}.",
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


# -- joint multi-candidate models: answer sentence selection (*_k heads) and fact verification (*_1 heads) ----------


def _joint_layout(ctx: CardContext) -> str:
    config = ctx.config
    k, length = config.get("num_candidates"), config.get("slot_length")
    positions = (
        "positions restarted in every slot"
        if config.get("slot_positions") == "per_slot"
        else "positions 0..(k+1)·L−1 (the paper)"
    )
    attention = (
        "each candidate's first token attending to its own slot and the question only (`first_token_attention="
        '"own_slot"`)'
        if config.get("first_token_attention") == "own_slot"
        else "full attention (the paper)"
    )
    return (
        f"k + 1 = {k + 1 if k else '?'} slots of L = {length} tokens ({(k + 1) * length if k and length else '?'} "
        f"tokens), slot i with token type i, {positions}, {attention}; head `{config.get('head')}`"
    )


def _joint_summary(ctx: CardContext) -> str:
    architecture = ctx.record.get("architecture", "a joint multi-candidate model")
    k = ctx.config.get("num_candidates")
    return (
        f"`{architecture}`, a **joint multi-candidate** answer sentence selection (AS2) model (Di Liello, Garg, Soldaini "
        f"and Moschitti, NAACL 2022): it reads a question and k = {k} candidate answer sentences in ONE transformer "
        f"pass ({_joint_layout(ctx)}), so the candidates can support each other, and gives one logit per candidate: "
        "the probability that it answers the question."
    )


def _joint_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    return f"""The model code and its pipeline ship with the weights: load them with `trust_remote_code=True` (as2hub
is not needed).

```python
from transformers import pipeline

ranker = pipeline("joint-ranking", model="{model_id}", trust_remote_code=True)
candidates = ["Hamlet is a tragedy.", "Shakespeare wrote Hamlet around 1600.", "Paris is the capital of France."]
ranker({{"question": "Who wrote Hamlet?", "candidates": candidates}})
# [{{'candidate': ..., 'score': ..., 'index': ...}}, ...]: the candidates sorted by the probability of being correct
```

More than k candidates are read k at a time (consecutive groups, the last one with empty slots). The model itself
(`AutoModel`) takes the slot layout that the pipeline builds (`joint_layout.SlotLayout`, shipped in this repository):

```python
from transformers import AutoModel

model = AutoModel.from_pretrained("{model_id}", trust_remote_code=True)
model.config.num_candidates, model.config.slot_length, model.config.head
```

With as2hub installed, `as2hub.inference.joint_ranking.JointRanker(model, tokenizer, pairwise=Ranker(...))` re-ranks
the top k of a pairwise ranker (the paper's cascade), and `run_joint.py` fine-tunes it further:

```bash
python -m as2hub.run_scripts.run_joint --model_name_or_path {model_id} --dataset data/train.jsonl \\
    --validation_file data/dev.jsonl --output_dir joint [--use_lora]
```"""


def _joint_training(ctx: CardContext) -> list[str]:
    data = ctx.data_args
    dataset = data.get("dataset", "embedded")
    if dataset == "wikiqa":
        source = "WikiQA (Yang, Yih and Meek, 2015; Microsoft Research Data License: research use) train split"
    elif dataset == "embedded":
        source = "as2hub's embedded sentence-selection task built from Python's documentation (a demo task)"
    else:
        source = f"`{_file_dataset(ctx, dataset).name}`"
    if data.get("grouping") == "top_k":
        grouping = (
            "grouping `top_k` (the paper's cascade): the top k candidates of a pairwise ranker ("
            + (f"score column `{data.get('score_column')}`" if data.get("score_column") else "a pairwise model")
            + "); in evaluation the joint model re-ranks them and the other candidates keep the pairwise order"
        )
    else:
        grouping = "grouping `all`: every candidate of a question, in groups of k (empty slots in the last group)"
    return [
        "Objective: binary cross-entropy on every filled candidate slot (empty slots are masked and never in the loss "
        "or the metrics); candidates shuffled within each training group; the best checkpoint by validation MAP is "
        f"kept, with early stopping after {data.get('early_stopping_patience', 5)} evaluations without improvement.",
        f"Training data: {source}; {grouping}.",
        f"Input: {_joint_layout(ctx)}; token-type rows grown to k + 1 initialised with "
        f"`{ctx.model_args.get('token_type_init', 'scratch')}`.",
    ]


def _joint_limitations(ctx: CardContext) -> str:
    lines = [
        "- A re-ranker: it scores candidates you retrieved; it does not retrieve or generate answers.",
        f"- Each candidate is truncated to its slot ({ctx.extras.get('joint', {}).get('slot_length')} tokens with its "
        "special tokens) and the question too.",
        "- A candidate's score depends on the other candidates read in its group of k: compare scores within a "
        "question, not across questions.",
    ]
    if ctx.data_args.get("dataset") == "embedded":
        lines.append("- Trained on a small demo task from Python's documentation: not a useful general ranker.")
    if not ctx.record.get("base_model"):
        lines.append("- Trained from scratch (no pre-trained encoder): expect weak language understanding.")
    return "\n".join(lines)


def _joint_objective(ctx: CardContext) -> str:
    return "joint-cascade" if ctx.data_args.get("grouping") == "top_k" else "joint-as2"


register_family(
    Family(
        name="joint_multicandidate",
        summary=_joint_summary,
        usage=_joint_usage,
        citations=("diliello2022paragraph",),
        pipeline_tag="text-ranking",
        tags=("answer-sentence-selection", "joint-multi-candidate", "reranker"),
        task=("text-ranking", "Answer Sentence Selection"),
        metrics=AS2_RANKING_METRICS,
        training=_joint_training,
        dataset=_as2_dataset,
        datasets=_as2_datasets,
        language=_english_if_known,
        objective_tag=_joint_objective,
        limitations=_joint_limitations,
    )
)


def _fv_labels(ctx: CardContext) -> list[str]:
    return list(ctx.config.get("labels") or [])


def _fv_summary(ctx: CardContext) -> str:
    architecture = ctx.record.get("architecture", "a joint multi-candidate model")
    labels = ", ".join(f"`{label}`" for label in _fv_labels(ctx))
    return (
        f"`{architecture}`, a **joint multi-candidate fact verification** model (Di Liello, Garg, Soldaini and "
        "Moschitti, NAACL 2022): it reads a claim and up to k evidence sentences in ONE transformer pass "
        f"({_joint_layout(ctx)}) and predicts one label for the claim ({labels})."
    )


def _fv_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    return f"""The model code and its pipeline ship with the weights: load them with `trust_remote_code=True` (as2hub
is not needed).

```python
from transformers import pipeline

verifier = pipeline("joint-classification", model="{model_id}", trust_remote_code=True)
verifier({{"claim": "Hamlet is a comedy.", "evidences": ["Hamlet is a tragedy by William Shakespeare."]}})
# [{{'label': ..., 'score': ...}}, ...]: label probabilities, best first
```

The first k evidences of a claim are read (k = {ctx.config.get("num_candidates")}). With as2hub
installed, `run_joint.py --task fv` fine-tunes it further:

```bash
python -m as2hub.run_scripts.run_joint --task fv --model_name_or_path {model_id} --dataset train.jsonl \\
    --validation_file dev.jsonl --output_dir fv [--use_lora]
```"""


def _fv_dataset(ctx: CardContext, split: str) -> DatasetRef:
    data = ctx.data_args
    file = {"test": data.get("test_file"), "validation": data.get("validation_file")}.get(split)
    return _file_dataset(ctx, file or data.get("dataset", "unknown"))


def _fv_training(ctx: CardContext) -> list[str]:
    data = ctx.data_args
    labels = ", ".join(f"`{label}`" for label in _fv_labels(ctx))
    return [
        "Objective: cross-entropy over the claim's label (" + labels + "); the best checkpoint by validation label "
        f"accuracy is kept, with early stopping after {data.get('early_stopping_patience', 5)} evaluations without "
        "improvement.",
        f"Training data: `{_file_dataset(ctx, data.get('dataset')).name}` (JSONL `{{claim, evidences, label}}`; the "
        "first k evidences of each claim).",
        f"Input: {_joint_layout(ctx)}.",
    ]


register_family(
    Family(
        name="joint_fact_verification",
        summary=_fv_summary,
        usage=_fv_usage,
        citations=("diliello2022paragraph",),
        pipeline_tag="text-classification",
        tags=("fact-verification", "joint-multi-candidate"),
        task=("text-classification", "Fact Verification"),
        metrics=(
            Metric("test", "test_accuracy", "accuracy", "Label accuracy", "test"),
            Metric("dev", "eval_accuracy", "accuracy", "Label accuracy", "validation"),
        ),
        training=_fv_training,
        dataset=_fv_dataset,
        datasets=lambda ctx: list(
            dict.fromkeys(
                hub
                for key in ("dataset", "validation_file", "test_file")
                if (hub := ctx.hub_id(ctx.data_args.get(key)))
            )
        ),
        objective_tag=lambda ctx: "fact-verification",
        limitations=lambda ctx: "\n".join(
            [
                "- It verifies a claim against the evidence you give it; it does not retrieve evidence.",
                "- Evidence beyond the first k sentences, and text beyond a slot's length, is not read.",
                "- Labels are those of the training data; a claim unlike it may get any label with high confidence.",
            ]
        ),
    )
)


# -- Longformer with question-evidence contrastive learning ---------------------------------------------------------


def _qe_source(ctx: CardContext) -> str:
    return ctx.data_args.get("dataset", "embedded")


def _qe_dataset(ctx: CardContext, split: str) -> DatasetRef:
    data = ctx.data_args
    source = _qe_source(ctx)
    distractors = ctx.extras.get("num_distractors")
    if source == "wikiqa_distractor":
        return DatasetRef(
            WIKIQA_HUB_ID,
            f"WikiQA as an evidence task (own passage + {distractors} distractor passages)",
            WIKIQA_HUB_ID,
        )
    if source == "embedded":
        return DatasetRef("as2hub-embedded-python-docs", "Evidence selection over Python's documentation (embedded)")
    file = {"test": data.get("test_file"), "validation": data.get("validation_file")}.get(split)
    return _file_dataset(ctx, file or source)


def _qe_summary(ctx: CardContext) -> str:
    architecture = ctx.record.get("architecture", "a Longformer")
    qe = ctx.config
    weight = qe.get("contrastive_weight")
    contrastive = (
        f"trained with the question–evidence contrastive loss (λ = {weight}, similarity `{qe.get('qe_similarity')}`, "
        f"question types {qe.get('question_types')} from the record field `{qe.get('question_type_key')}`, "
        f"temperatures {qe.get('qe_temperatures')})"
        if weight
        else "trained without the contrastive term (λ = 0, the paper's baseline)"
    )
    return (
        f"`{architecture}`, a long-context question answering model (Caciularu, Dagan, Goldberger and Cohan, NAACL "
        "2022) on a Longformer encoder: from a question and many paragraphs it extracts the answer span (or yes / no) "
        f"and the supporting sentences and paragraphs, {contrastive}."
    )


def _qe_usage(ctx: CardContext) -> str:
    model_id = ctx.model_id
    return f"""The model code ships with the weights: load it with `trust_remote_code=True` (as2hub is not needed).
The input marks the question, titles and sentences with the marker tokens of the tokenizer (`[q] [/q] <doc-s>
</doc-s> <t> </t> <sent> </sent>`); the model finds them and sets the global attention itself.

```python
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{model_id}", trust_remote_code=True)
model = AutoModelForQuestionAnswering.from_pretrained("{model_id}", trust_remote_code=True)
text = "[q] Which city has the tower? [/q] <doc-s> <t> Paris </t> <sent> The tower is in Paris. </sent> </doc-s>"
out = model(**tokenizer(text, return_tensors="pt"))
out.start_logits, out.end_logits, out.answer_type_logits  # the answer span and its type
out.sentence_logits, out.sentence_similarity  # supporting-sentence logits and question-sentence similarity
```

With as2hub installed, `HotpotQAEncoder` / `HotpotQACollator` (`as2hub.data_collators`) build such inputs
from HotpotQA-format records, and `run_qe_contrastive.py` fine-tunes it further:

```bash
python -m as2hub.run_scripts.run_qe_contrastive --model_name_or_path {model_id} --dataset hotpot_train.json \\
    --validation_file hotpot_dev_distractor.json --output_dir qe [--use_lora]
```"""


def _qe_training(ctx: CardContext) -> list[str]:
    data = ctx.data_args
    source = _qe_source(ctx)
    if source == "wikiqa_distractor":
        what = "WikiQA (research licence) as an evidence task: a question's own passage plus distractor passages"
    elif source == "embedded":
        what = "as2hub's embedded evidence task built from Python's documentation (a demo task)"
    else:
        what = f"`{_file_dataset(ctx, source).name}` (HotpotQA format)"
    qe = ctx.config
    return [
        f"Objective: (1 − λ)·L_QA + λ·L_QE with λ = {qe.get('contrastive_weight')}; L_QA: answer start/end over every "
        "gold occurrence, answer type, supporting sentence and paragraph; L_QE: the supervised question–evidence "
        "contrastive loss (section 3 of the paper).",
        f"Training data: {what}; max length {ctx.extras.get('max_length')} tokens (whole sentences dropped from the "
        f"end when an input is longer; training examples whose evidence would be cut: `{data.get('truncated_evidence')}`).",
        f"Supporting facts selected with threshold {data.get('sp_threshold')}"
        + (
            f", at most {data.get('sp_top_n_per_paragraph')} per paragraph"
            if data.get("sp_top_n_per_paragraph")
            else ""
        )
        + f"; answer spans up to {data.get('max_answer_length')} tokens.",
    ]


def _qe_evaluation_notes(ctx: CardContext) -> str:
    rows = []
    for section, prefix in (("dev", "eval_"), ("test", "test_")):
        values = ctx.metrics.get(section, {})
        if f"{prefix}qe_map" in values:
            rows.append(f"| {section} | {values[f'{prefix}qe_map']:.4f} |")
    if not rows:
        return ""
    return (
        "The paper's diagnostic, mean average precision of ranking each question's sentences by the question–evidence "
        "similarity:\n\n| split | QE mAP |\n|---|---|\n" + "\n".join(rows)
    )


QE_METRICS = (
    ("em", "exact_match", "Answer EM"),
    ("f1", "f1", "Answer F1"),
    ("sp_em", "supporting_facts_exact_match", "Supporting-fact EM"),
    ("sp_f1", "supporting_facts_f1", "Supporting-fact F1"),
    ("joint_em", "joint_exact_match", "Joint EM"),
    ("joint_f1", "joint_f1", "Joint F1"),
)

register_family(
    Family(
        name="longformer_qe",
        summary=_qe_summary,
        usage=_qe_usage,
        citations=("caciularu2022long",),
        pipeline_tag="question-answering",
        tags=("long-context-qa", "supporting-facts", "contrastive-learning", "longformer"),
        task=("question-answering", "Multi-hop question answering with supporting facts"),
        metrics=tuple(
            Metric(section, f"{prefix}{key}", kind, name, split)
            for section, prefix, split in (("test", "test_", "test"), ("dev", "eval_", "validation"))
            for key, kind, name in QE_METRICS
        ),
        training=_qe_training,
        dataset=_qe_dataset,
        datasets=lambda ctx: (
            [WIKIQA_HUB_ID]
            if _qe_source(ctx) == "wikiqa_distractor"
            else list(
                dict.fromkeys(
                    hub
                    for key in ("dataset", "validation_file", "test_file")
                    if (hub := ctx.hub_id(ctx.data_args.get(key)))
                )
            )
        ),
        language=lambda ctx: ["en"] if _qe_source(ctx) in ("wikiqa_distractor", "embedded") else [],
        objective_tag=lambda ctx: "qe-contrastive" if ctx.config.get("contrastive_weight") else "qa-baseline",
        limitations=lambda ctx: "\n".join(
            [
                "- Reads at most its maximum length; evidence beyond it is dropped whole sentence by whole sentence "
                "(and counts as missed).",
                "- Needs the marker format above: raw text without markers gets no supporting-sentence scores.",
                "- Answer metrics are reported only for data with answers (an evidence task without answer spans "
                "reports supporting-fact metrics only).",
            ]
        ),
        evaluation_notes=_qe_evaluation_notes,
    )
)

"""Round trips through a local Hub (``hub_fake.FakeHub`` on 127.0.0.1, started and stopped here).

Every family is trained tiny and pushed (``as2hub-push`` and the run scripts' ``--push_to_hub``), then loaded by repo
id in a fresh process with an empty ``HF_HOME``, ``HF_ENDPOINT`` set, offline switches unset and as2hub blocked, with
the Auto classes and with ``pipeline(..., trust_remote_code=True)``: the outputs must equal the saved folders' outputs.
The pre-training checkpoint is fine-tuned by ``run_as2.py --model_name_or_path <repo id>``, whose ``--push_to_hub``
makes a second revision of the ranker repository; the first revision must still load.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers import BLOCK_AS2HUB
from hub_fake import FakeHub
from huggingface_hub import HfApi, ModelCard
from safetensors.torch import load_file, save_file
from test_run_as2 import tiny_args
from transformers import AutoModelForPreTraining, AutoModelForSequenceClassification, AutoTokenizer

import as2hub.modeling  # noqa: F401  (registers the as2hub classes: the "before the push" outputs)
from as2hub.hub_cards.push import push_run_folder, validate_in_fresh_process
from as2hub.hub_cards.run_record import PublishError, read_run
from as2hub.inference.ranking import context_text_pair
from as2hub.run_scripts import push_to_hub, run_as2, run_pretrain

pytestmark = pytest.mark.slow

QUESTION = "What does len return?"
CANDIDATES = [
    ("The number of items of a container.", "Call it on any sized object. It is a built-in."),
    ("A string with the repr of the object.", "Strings are sequences."),
    ("It raises TypeError for an iterator.", ""),
]
SINGLE_TEXTS = ["The interpreter reads this sentence.", "Modules are objects with names."]
HIDDEN_VALUES = 96
QUICK_PRETRAIN = ["--max_steps", "2", "--eval_steps", "2", "--save_steps", "2", "--per_device_train_batch_size", "8",
                  "--eval_passes", "1", "--max_eval_samples", "64", "--objective", "dslc", "--learning_rate", "0.05", "--warmup_steps", "0"]  # fmt: skip


def fresh_env(hub, home) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.endswith(("_OFFLINE", "HF_HOME"))}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(home),
        HF_TOKEN=hub.token,  # the fake's token (private repos); a real one never reaches it
        HF_HUB_DISABLE_XET="1",  # the fake speaks LFS, not Xet
        NO_PROXY="127.0.0.1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
    )
    return env


@pytest.fixture(scope="module")
def hub():
    with FakeHub() as server, pytest.MonkeyPatch.context() as patch:
        patch.setattr("huggingface_hub.constants.HF_HUB_DISABLE_XET", True)
        patch.setattr("huggingface_hub.constants.ENDPOINT", server.url)  # HfApi() of the run scripts' --push_to_hub
        patch.setenv("HF_TOKEN", server.token)
        patch.setenv("OMP_NUM_THREADS", "1")  # the fresh-process checks share the machine with the tests
        yield server


def pairs_for(tokenizer) -> list[list[str]]:
    return [[QUESTION, context_text_pair(tokenizer, s, c) if c else s] for s, c in CANDIDATES]


def ranker_outputs(folder) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    pairs = pairs_for(tokenizer)
    with torch.no_grad():
        batch = tokenizer(*map(list, zip(*pairs)), padding=True, return_tensors="pt")
        logits = model(**batch).logits.view(-1)
    return {"pairs": pairs, "logits": logits.tolist(), "scores": logits.sigmoid().tolist()}


def pretrain_outputs(folder) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForPreTraining.from_pretrained(folder).eval()
    pairs = pairs_for(tokenizer)
    with torch.no_grad():
        batch = tokenizer(*map(list, zip(*pairs)), padding=True, return_tensors="pt")
        out = model(**batch, output_hidden_states=True)
        single = [model(**tokenizer(text, return_tensors="pt")).cls_logits.view(-1).item() for text in SINGLE_TEXTS]
    return {
        "pairs": pairs,
        "cls_logits": out.cls_logits.view(-1).tolist(),
        "hidden": out.hidden_states[-1].reshape(-1)[:HIDDEN_VALUES].tolist(),  # the encoder, token by token
        "single_texts": SINGLE_TEXTS,
        "single": single,
    }


@pytest.fixture(scope="module")
def published(hub, stock_checkpoint, tmp_path_factory):
    """Train every family tiny and publish it; returns local folders, expected outputs and revisions."""
    torch.set_num_threads(1)
    api = HfApi(endpoint=hub.url, token=hub.token)
    stock = stock_checkpoint("bert")
    api.create_repo("tester/tiny-bert")
    api.upload_folder(repo_id="tester/tiny-bert", folder_path=str(stock))  # the LoRA run's base, on the Hub too
    work = tmp_path_factory.mktemp("published")
    cli = ["--endpoint", hub.url, "--token", hub.token]

    # Contextual AS2 with LoRA: the merged model to tester/ranker (first revision), the adapter to tester/ranker-lora.
    lora_dir = work / "lora"
    lora_dir.mkdir()
    run_as2.main(
        [*tiny_args(lora_dir, stock, "--use_lora", "--lora_r", "4"), "--learning_rate", "0.05", "--warmup_steps", "0"]
    )
    lora = lora_dir / "out"
    assert push_to_hub.main([str(lora), "tester/ranker", "--include", "all_results.json", *cli]) == 0
    first = hub.head("tester/ranker").sha
    adapter_args = ["--adapter", "--base_model", "tester/tiny-bert", "--license", "apache-2.0"]
    assert push_to_hub.main([str(lora), "tester/ranker-lora", *adapter_args, *cli]) == 0

    # SSP pre-training: RoBERTa through run_pretrain's --push_to_hub, ELECTRA (with discriminator/) through the CLI.
    roberta, electra = work / "ssp-roberta", work / "ssp-electra"
    source = str(stock_checkpoint("roberta"))
    run_pretrain.main(["--output_dir", str(roberta), "--config_name", source, "--tokenizer_name", source,
                       *QUICK_PRETRAIN, "--push_to_hub", "--hub_model_id", "tester/ssp-roberta",
                       "--hub_token", hub.token])  # fmt: skip
    source = str(stock_checkpoint("electra"))
    run_pretrain.main(["--output_dir", str(electra), "--model_type", "electra", "--config_name", source,
                       "--tokenizer_name", source, *QUICK_PRETRAIN])  # fmt: skip
    # The command line as a user types it: endpoint and token from HF_ENDPOINT and HF_TOKEN.
    command = [sys.executable, "-m", "as2hub.run_scripts.push_to_hub", str(electra), "tester/ssp-electra",
               "--private", "--revision", "v1", "--commit_message", "ELECTRA DSLC, 2 steps"]  # fmt: skip
    result = subprocess.run(command, env=fresh_env(hub, work / "home-push"), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip() == f"{hub.url}/tester/ssp-electra/commit/{hub.head('tester/ssp-electra', 'v1').sha}"

    # The pre-training checkpoint fine-tuned by repo id, pushed by --push_to_hub: second revision of tester/ranker.
    second = work / "ranker-v2"
    second.mkdir()
    args = tiny_args(second, "tester/ssp-roberta", "--learning_rate", "0.05", "--warmup_steps", "0", "--push_to_hub",
                     "--hub_model_id", "tester/ranker", "--hub_token", hub.token)  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "as2hub.run_scripts.run_as2", *args],
        env=fresh_env(hub, work / "home-run-as2"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return {
        "lora": lora,
        "first": first,
        "roberta": roberta,
        "electra": electra,
        "second": second / "out",
        "expected": {
            "ranker@first": ranker_outputs(lora),
            "ranker@main": ranker_outputs(second / "out"),
            "ssp-roberta": pretrain_outputs(roberta),
            "ssp-electra": pretrain_outputs(electra),
            "discriminator": ranker_outputs(electra / "discriminator"),
        },
    }


FRESH_HUB_LOAD = BLOCK_AS2HUB + textwrap.dedent(
    """
    import json, re
    import torch
    from huggingface_hub import hf_hub_download
    from peft import PeftModel
    from transformers import (AutoConfig, AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification,
                              AutoTokenizer, pipeline)
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    torch.set_num_threads(1)

    def batch(tokenizer, pairs):
        return tokenizer(*map(list, zip(*pairs)), padding=True, return_tensors="pt")

    def pipe_scores(pipe, pairs):
        out = [pipe({"text": q, "text_pair": p}) for q, p in pairs]
        return [(o[0] if isinstance(o, list) else o)["score"] for o in out]

    report = {}
    for case in json.loads(sys.argv[1]):
        repo, rev, kind, pairs = case["repo"], case.get("revision"), case["kind"], case["pairs"]
        got = {}
        with torch.no_grad():
            if kind == "ranker":
                tokenizer = AutoTokenizer.from_pretrained(repo, revision=rev)
                for auto in (AutoModelForSequenceClassification, AutoModel):
                    model = auto.from_pretrained(repo, revision=rev, trust_remote_code=True).eval()
                    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
                    got[auto.__name__] = model(**batch(tokenizer, pairs)).logits.view(-1).tolist()
                ranker = pipeline("text-classification", model=repo, revision=rev, trust_remote_code=True)
                got["pipeline"] = pipe_scores(ranker, pairs)
            elif kind == "adapter":  # the adapter card's recipe, word for word
                config = AutoConfig.from_pretrained(repo, trust_remote_code=True)
                model_class = get_class_from_dynamic_module(config.auto_map["AutoModelForSequenceClassification"], repo)
                base = model_class.from_pretrained(case["base"], config=config, ignore_mismatched_sizes=True)
                model = PeftModel.from_pretrained(base, repo).eval()
                tokenizer = AutoTokenizer.from_pretrained(repo)
                got["PeftModel"] = model(**batch(tokenizer, pairs)).logits.view(-1).tolist()
                got["pipeline"] = pipe_scores(pipeline("text-classification", model=model, tokenizer=tokenizer), pairs)
            elif kind == "pretrain":
                tokenizer = AutoTokenizer.from_pretrained(repo, revision=rev)
                model = AutoModelForPreTraining.from_pretrained(repo, revision=rev, trust_remote_code=True).eval()
                assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
                out = model(**batch(tokenizer, pairs), output_hidden_states=True)
                got["cls_logits"] = out.cls_logits.view(-1).tolist()
                got["hidden"] = out.hidden_states[-1].reshape(-1)[: case["hidden_values"]].tolist()
                features = pipeline("feature-extraction", model=repo, revision=rev, trust_remote_code=True)
                got["pipeline"] = [features(text)[0][0] for text in case["single_texts"]]
            elif kind == "card":  # every Python snippet of the card on the Hub runs as written
                text = open(hf_hub_download(repo, "README.md", revision=rev), encoding="utf-8").read()
                blocks = re.findall(r"```python\\n(.*?)```", text, re.S)
                for index, block in enumerate(blocks):
                    exec(compile(block, f"{repo} card, snippet {index}", "exec"), {})
                got["snippets"] = len(blocks)
            elif kind == "discriminator":  # a stock ElectraForSequenceClassification: no remote code
                tokenizer = AutoTokenizer.from_pretrained(repo, revision=rev, subfolder="discriminator")
                model = AutoModelForSequenceClassification.from_pretrained(repo, revision=rev, subfolder="discriminator")
                got["logits"] = model.eval()(**batch(tokenizer, pairs)).logits.view(-1).tolist()
                classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, function_to_apply="none")
                got["pipeline"] = pipe_scores(classifier, pairs)
        report[case["name"]] = got
    print("REPORT" + json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def hub_load(hub, published, tmp_path_factory):
    """Everything loaded by repo id in ONE fresh process (empty HF_HOME, no as2hub)."""
    expected = published["expected"]
    cases = [
        {"name": "ranker@first", "repo": "tester/ranker", "revision": published["first"], "kind": "ranker"},
        {"name": "ranker@main", "repo": "tester/ranker", "kind": "ranker"},
        {"name": "ranker-lora", "repo": "tester/ranker-lora", "kind": "adapter", "base": "tester/tiny-bert"},
        {"name": "ssp-roberta", "repo": "tester/ssp-roberta", "kind": "pretrain"},
        {"name": "ssp-electra", "repo": "tester/ssp-electra", "revision": "v1", "kind": "pretrain"},
        {"name": "discriminator", "repo": "tester/ssp-electra", "revision": "v1", "kind": "discriminator"},
    ]
    cases += [{"name": f"card:{repo}", "repo": repo, "kind": "card", "pairs": []}
              for repo in ("tester/ranker", "tester/ranker-lora", "tester/ssp-roberta")]  # fmt: skip
    for case in cases[3:5]:
        case.update(single_texts=SINGLE_TEXTS, hidden_values=HIDDEN_VALUES)
    for case in cases[:6]:
        source = "ranker@first" if case["name"] == "ranker-lora" else case["name"]
        case["pairs"] = expected[source]["pairs"]
    home = tmp_path_factory.mktemp("empty-hf-home")
    result = subprocess.run(
        [sys.executable, "-c", FRESH_HUB_LOAD, json.dumps(cases)],
        env=fresh_env(hub, home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.split("REPORT", 1)[1])


def test_every_family_loads_by_repo_id_in_a_fresh_process_with_the_same_outputs(published, hub_load):
    expected = published["expected"]
    for name in ("ranker@first", "ranker@main"):
        for auto in ("AutoModelForSequenceClassification", "AutoModel"):
            assert hub_load[name][auto] == pytest.approx(expected[name]["logits"], abs=1e-5), (name, auto)
        assert hub_load[name]["pipeline"] == pytest.approx(expected[name]["scores"], abs=1e-5), name
    # The adapter on its base, as the card says: the merged model's outputs (merging is exact up to rounding).
    assert hub_load["ranker-lora"]["PeftModel"] == pytest.approx(expected["ranker@first"]["logits"], abs=1e-4)
    assert hub_load["ranker-lora"]["pipeline"] == pytest.approx(expected["ranker@first"]["scores"], abs=1e-4)
    for name in ("ssp-roberta", "ssp-electra"):
        assert hub_load[name]["cls_logits"] == pytest.approx(expected[name]["cls_logits"], abs=1e-5), name
        assert hub_load[name]["hidden"] == pytest.approx(expected[name]["hidden"], abs=1e-5), name
        assert hub_load[name]["pipeline"] == pytest.approx(expected[name]["single"], abs=1e-5), name
    snippets = {name: hub_load[f"card:tester/{name}"]["snippets"] for name in ("ranker", "ranker-lora", "ssp-roberta")}
    assert snippets == {"ranker": 4, "ranker-lora": 1, "ssp-roberta": 1}  # each ran without error
    assert hub_load["discriminator"]["logits"] == pytest.approx(expected["discriminator"]["logits"], abs=1e-5)
    assert hub_load["discriminator"]["pipeline"] == pytest.approx(expected["discriminator"]["logits"], abs=1e-5)
    for name in ("ranker@first", "ranker@main"):  # the checks above can fail: the candidates' scores differ
        values = sorted(expected[name]["logits"])
        assert min(b - a for a, b in zip(values, values[1:])) > 1e-4, (name, "degenerate check: equal scores")
    for name in ("ssp-roberta", "ssp-electra"):  # ... and the encoder's outputs are not constant
        assert torch.tensor(expected[name]["hidden"]).std() > 0.1, (name, "degenerate check: constant outputs")


def test_second_push_is_a_new_revision_and_the_old_one_still_loads(hub, published, hub_load):
    history = hub.history("tester/ranker")
    assert [commit.sha for commit in history[:2]][1] == published["first"] and len(history) == 3  # + initial
    first, second = hub.head("tester/ranker", published["first"]), history[0]
    assert "all_results.json" in first.files and "all_results.json" not in second.files  # asked for once only
    assert json.loads(first.files["config.json"])["model_type"] == "contextual_bert"
    assert json.loads(second.files["config.json"])["model_type"] == "contextual_roberta"
    # Both revisions loaded above with their own outputs, which differ.
    assert hub_load["ranker@first"]["pipeline"] != pytest.approx(hub_load["ranker@main"]["pipeline"], abs=1e-3)


def test_the_pretraining_checkpoint_on_the_hub_is_what_run_as2_fine_tunes(published):
    record, _ = read_run(published["second"])
    assert record["base_model"] == "tester/ssp-roberta" and record["local_paths"] == sorted(record["local_paths"])
    assert record["config"]["model_type"] == "contextual_roberta" and record["config"]["type_vocab_size"] == 3
    card = ModelCard.load(published["second"] / "README.md")
    assert card.data.base_model == "tester/ssp-roberta"  # a Hub id: named in the card


def test_each_revision_holds_exactly_the_validated_folder(hub, published):  # published: the pushes it reads
    code = {"configuration_contextual_as2.py", "modeling_contextual_as2.py", "hub_common.py"}
    tokenizer = {"tokenizer.json", "tokenizer_config.json"}
    common = {".gitattributes", "README.md", "config.json", *tokenizer}
    assert set(hub.head("tester/ranker").files) == common | code | {"model.safetensors", "int8_calibration.safetensors"}
    assert set(hub.head("tester/ranker-lora").files) == common | code | {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    ssp = common | {
        "model.safetensors",
        "configuration_ssp_pretraining.py",
        "modeling_ssp_pretraining.py",
        "pretraining_heads.py",  # the sibling modules shared with the joint family
        "unpadding.py",
    }
    assert set(hub.head("tester/ssp-roberta").files) == ssp | {"hub_common.py"}
    discriminator = {f"discriminator/{name}" for name in ("config.json", "model.safetensors", *tokenizer)}
    assert set(hub.head("tester/ssp-electra", "v1").files) == ssp | {"hub_common.py"} | discriminator
    for repo in ("tester/ranker", "tester/ranker-lora", "tester/ssp-roberta"):
        commit = hub.head(repo)
        assert commit.lfs == {name for name in commit.files if name.endswith(".safetensors")}, repo  # LFS uploads
    adapter_config = json.loads(hub.head("tester/ranker-lora").files["adapter_config.json"])
    assert adapter_config["base_model_name_or_path"] == "tester/tiny-bert"


def test_cards_on_the_hub_parse_back_with_the_runs_metrics(hub, published):
    cards = {repo: ModelCard(hub.head(repo, rev).files["README.md"].decode()) for repo, rev in (
        ("tester/ranker", "main"), ("tester/ranker-lora", "main"), ("tester/ssp-roberta", "main"),
        ("tester/ssp-electra", "v1"))}  # fmt: skip
    _, lora_metrics = read_run(published["lora"])
    _, second_metrics = read_run(published["second"])
    for repo, metrics in (("tester/ranker", second_metrics), ("tester/ranker-lora", lora_metrics)):
        values = {(r.dataset_split, r.metric_type): r.metric_value for r in cards[repo].data.eval_results}
        assert values[("test", "map")] == metrics["test"]["test_map"], repo
        assert values[("validation", "mrr")] == metrics["dev"]["eval_mrr"], repo
        assert f'model="{repo}"' in cards[repo].text or f'"{repo}"' in cards[repo].text
    lora_card = cards["tester/ranker-lora"].data
    assert lora_card.library_name == "peft" and lora_card.base_model == "tester/tiny-bert"
    assert lora_card.license == "apache-2.0"
    for repo, folder in (("tester/ssp-roberta", "roberta"), ("tester/ssp-electra", "electra")):
        _, metrics = read_run(published[folder])
        values = {r.metric_type: r.metric_value for r in cards[repo].data.eval_results}
        assert values == {"roc_auc": metrics["eval"]["eval_cls_auc"],
                          "balanced_accuracy": metrics["eval"]["eval_cls_balanced_accuracy"]}  # fmt: skip
        assert f"run_as2 --model_name_or_path {repo}" in cards[repo].text


def test_private_branch_and_commit_message(hub, published):  # published: the pushes it reads
    repo = hub.repos["tester/ssp-electra"]
    assert repo.private and set(repo.refs) == {"main", "v1"}
    assert set(hub.head("tester/ssp-electra").files) == {".gitattributes"}  # main untouched
    assert hub.head("tester/ssp-electra", "v1").summary == "ELECTRA DSLC, 2 steps"
    with pytest.raises(Exception, match="Repository Not Found|RepoNotFound|404"):
        HfApi(endpoint=hub.url, token=False).repo_info("tester/ssp-electra")


def test_create_pr_leaves_the_branch_alone(hub, published):
    main = hub.head("tester/ranker").sha
    commit = push_run_folder(
        published["roberta"], "tester/ranker", token=hub.token, endpoint=hub.url, create_pr=True, validate=False
    )  # fmt: skip  (validated by the earlier push)
    assert commit.pr_url.endswith("/discussions/1") and hub.head("tester/ranker").sha == main
    assert "modeling_ssp_pretraining.py" in hub.head("tester/ranker", "refs/pr/1").files


def test_an_interrupted_upload_leaves_the_remote_at_its_previous_revision(hub, published):
    head = hub.head("tester/ssp-roberta")
    blobs = {oid for repo, oid in hub.lfs_objects if repo == "tester/ssp-roberta"}
    hub.fail_next_commit = True
    with pytest.raises(PublishError, match="stays at its previous revision"):
        push_run_folder(published["electra"], "tester/ssp-roberta", token=hub.token, endpoint=hub.url, validate=False)
    assert {oid for repo, oid in hub.lfs_objects if repo == "tester/ssp-roberta"} > blobs  # weights went up ...
    assert hub.head("tester/ssp-roberta") is head  # ... but no commit: the repository did not move


def test_a_folder_that_does_not_load_or_differs_from_the_run_is_refused(hub, published, tmp_path):
    drifted = shutil.copytree(published["lora"], tmp_path / "drifted", ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = load_file(drifted / "model.safetensors")
    name = next(key for key in weights if key.startswith("classifier.weight"))
    weights[name] = weights[name] + 0.5
    save_file(weights, drifted / "model.safetensors", metadata={"format": "pt"})
    before = len(hub.requests)
    with pytest.raises(PublishError, match=r"does not reproduce the trained model:\n- model: output 'logits' differs"):
        push_run_folder(drifted, "tester/drifted", token=hub.token, endpoint=hub.url)
    assert [r for r in hub.requests[before:] if r[0] != "GET"] == [] and "tester/drifted" not in hub.repos
    broken = shutil.copytree(drifted, tmp_path / "broken")
    shutil.copy(published["lora"] / "model.safetensors", broken / "model.safetensors")
    with (broken / "modeling_contextual_as2.py").open("a") as handle:
        handle.write("\nraise ImportError('broken on purpose')\n")
    record, _ = read_run(broken)
    component = {**record["components"]["model"], "name": "model"}
    with pytest.raises(PublishError, match="model: does not load: ImportError: broken on purpose"):
        validate_in_fresh_process(broken, [component])

"""Publishing a run's output folder to the Hub: run records, reference outputs, a validated single-commit upload.

A run script calls :func:`~as2hub.hub_cards.run_record.record_run` when it saves its model (the run record
``as2hub_run.json`` and the model card). Neither the record nor the run's other files (``checkpoint-*/``,
predictions, logs) are uploaded.

:func:`push_run_folder` (the ``as2hub-push`` command, and ``--push_to_hub`` of the run scripts) then:

1. checks everything it can locally: the repo id (``namespace/name``), the run record and its metrics file, weights
   (safetensors), config, tokenizer and model code, a token; then the endpoint and the token (``whoami``);
2. stages exactly what will be uploaded (hard links) with the card rebuilt for the repository, and loads it in a fresh
   process where as2hub cannot be imported (``fresh_load_check.py``): it must load with every ``auto_map`` entry, miss
   no weight, and reproduce the reference outputs;
3. creates the repository (and branch), and uploads the staged folder as ONE commit whose parent is the revision it
   read: the new revision holds exactly the staged files (plus ``.gitattributes``), earlier revisions stay loadable,
   and a failed or interrupted upload leaves the remote at its previous revision.

Example::

    as2hub-push outputs/minilm-wikiqa me/minilm-wikiqa-as2 --private
    python -m as2hub.run_scripts.run_as2 ... --push_to_hub --hub_model_id me/minilm-wikiqa-as2

A new family's run script hooks in as ``run_as2.py`` and ``run_pretrain.py`` do, and registers its card entry with
``as2hub.hub_cards.register_family``::

    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments, HubArguments))
    model_args, data_args, training_args, hub_args = parser.parse_args_into_dataclasses()
    push = HubPush.from_args(training_args, hub_args)  # None without --push_to_hub; checks repo id, token, endpoint
    ...  # train, save model + tokenizer (+ code) in out, write the metrics file
    record_run(out, "my_family", model, tokenizer, {"model": model_args, "data": data_args, "training": training_args},
               results, "all_results.json", auto_class="AutoModelForSequenceClassification")  # or components=...
    if push:
        push(out)

A family whose forward needs more than ``tokenizer(text, text_pair)`` records a small collated batch as its reference
input: ``run_joint.py`` (the JointCollator slot layout) and ``run_qe_contrastive.py`` (the HotpotQA collator's marker
input with its global attention mask) call ``save_hub_folder(..., family=..., auto_class=..., batch=...)``, which also
keeps a LoRA run's adapter (``lora_adapter/``, checked on the same batch) before merging it.
"""

import dataclasses
import fnmatch
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, ModelCard, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from as2hub.hub_cards import CardContext, build_model_card, eval_results, get_family
from as2hub.hub_cards.run_record import (
    ADAPTER_FILES,
    RUN_RECORD,
    UPLOADED_MODEL_FILES,
    VALIDATION_TIMEOUT,
    WEIGHT_FILES,
    PublishError,
    read_run,
)

logger = logging.getLogger("as2hub.publishing")


@dataclasses.dataclass
class HubArguments:
    """Publishing options of the run scripts, next to the Trainer's own ``--push_to_hub``, ``--hub_model_id``,
    ``--hub_token``, ``--hub_private_repo`` and ``--hub_revision``."""

    _argument_group_name = "publishing (as2hub)"
    hub_push_adapter: bool = dataclasses.field(
        default=False,
        metadata={"help": "LoRA runs: push the adapter (PEFT, base model named) instead of the merged model."},
    )
    hub_base_model: str | None = dataclasses.field(
        default=None,
        metadata={"help": "Hub id of the LoRA base model, when --model_name_or_path was a local folder."},
    )
    hub_license: str | None = dataclasses.field(
        default=None, metadata={"help": "License of the weights (a Hub license id, e.g. apache-2.0) for the card."}
    )


# -- at push time ---------------------------------------------------------------------------------------------------


def check_repo_id(repo_id) -> str:
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise PublishError(f"repo id {repo_id!r} is not of the form namespace/name (e.g. my-user/minilm-wikiqa-as2)")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise PublishError(f"repo id {repo_id!r} is not valid on the Hub: {error}") from None
    return repo_id


def resolve_token(token: str | None) -> str:
    token = token or get_token()
    if not token:
        raise PublishError(
            "no Hub token: log in with `hf auth login`, set HF_TOKEN, or pass --token (as2hub-push) / --hub_token "
            "(run scripts); it needs write access to the repository's namespace"
        )
    return token


def check_access(api: HfApi) -> dict:
    """``whoami``: the endpoint answers and the token is valid (a clear error otherwise)."""
    try:
        return api.whoami()
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", None)
        if status == 401:
            raise PublishError(f"the Hub at {api.endpoint} refused the token (401): check it or log in again") from None
        raise PublishError(f"the Hub at {api.endpoint} answered {status} to whoami: {error}") from None
    except OSError as error:  # connection refused, DNS, timeouts (httpx errors are OSErrors too)
        raise PublishError(f"cannot reach the Hub at {api.endpoint}: {type(error).__name__}: {error}") from None
    except Exception as error:
        if "connect" in type(error).__name__.lower() or "timeout" in type(error).__name__.lower():
            raise PublishError(f"cannot reach the Hub at {api.endpoint}: {type(error).__name__}: {error}") from None
        raise


def _matching(folder: Path, patterns) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in patterns))


def _check_model_folder(folder: Path, component: dict, where: str, weights: bool = True) -> list[Path]:
    files = _matching(folder, UPLOADED_MODEL_FILES)
    names = {p.name for p in files}
    if not weights:
        files = [p for p in files if not p.name.endswith(".safetensors") and p.name != "model.safetensors.index.json"]
    elif not any(name in names for name in WEIGHT_FILES):
        others = sorted(p.name for p in folder.glob("pytorch_model*.bin")) if folder.is_dir() else []
        hint = f" (found {others}: re-save with safetensors)" if others else ""
        raise PublishError(f"{where} has no weights: no model.safetensors or model.safetensors.index.json{hint}")
    if weights and "model.safetensors.index.json" in names:
        shards = set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values())
        missing = sorted(shard for shard in shards if shard not in names)
        if missing:
            raise PublishError(f"{where}: weight shards listed in model.safetensors.index.json are missing: {missing}")
    if "config.json" not in names:
        raise PublishError(f"{where} has no config.json")
    if "tokenizer_config.json" not in names:
        raise PublishError(f"{where} has no tokenizer (tokenizer_config.json): save the tokenizer with the model")
    if component.get("trust_remote_code", True):
        auto_map = json.loads((folder / "config.json").read_text()).get("auto_map") or {}
        if not auto_map:
            raise PublishError(f"{where}/config.json has no auto_map: the model code would not load from the Hub")
        modules = {reference.split("--")[-1].rsplit(".", 1)[0] for reference in auto_map.values()}
        missing = sorted(f"{module}.py" for module in modules if f"{module}.py" not in names)
        if missing:
            raise PublishError(f"{where}: model code named in config.json auto_map is missing: {missing}")
    return files


def plan_upload(
    folder, record: dict, adapter: bool = False, include: Iterable[str] = (), base_model: str | None = None
) -> tuple[dict[str, Path], list[dict]]:
    """``({path_in_repo: local file}, components to validate)`` for publishing ``folder``.

    The model variant publishes the root component and every other non-adapter component (e.g. ``discriminator/``)
    in its subfolder; the adapter variant publishes the LoRA adapter with the root's config, code and tokenizer
    (no full weights). ``include`` adds files or folders of the run (globs relative to ``folder``).
    """
    folder = Path(folder)
    components = record.get("components", {})
    files: dict[str, Path] = {}
    to_validate = []
    if adapter:
        if "adapter" not in components:
            raise PublishError(f"{folder}: this run has no LoRA adapter (it was not trained with --use_lora)")
        spec = components["adapter"]
        adapter_dir = folder / spec["path"]
        present = {p.name: p for p in _matching(adapter_dir, ADAPTER_FILES)}
        missing = [name for name in ADAPTER_FILES if name not in present]
        if missing:
            raise PublishError(f"{adapter_dir} has no {' or '.join(missing)}: the adapter's weights are missing")
        base = base_model or _hub_base(record)
        if base is None:
            source = record.get("base_model")
            raise PublishError(
                "the adapter's base model must be on the Hub for others to load it: "
                + (
                    f"the run used the local folder {source}: pass the Hub id of the same checkpoint with "
                    "--base_model (as2hub-push) / --hub_base_model (run scripts)"
                    if source
                    else "this run trained its model from scratch; push the merged model instead"
                )
            )
        for path in _check_model_folder(folder, spec, str(folder), weights=False):
            files[path.name] = path
        files.update(present)
        to_validate.append({**spec, "name": "adapter", "path": ".", "base_model": base})
    else:
        for name, spec in components.items():
            if spec.get("kind", "model") != "model":
                continue
            where = folder / spec["path"]
            for path in _check_model_folder(where, spec, str(where)):
                files[str(Path(spec["path"]) / path.name)] = path
            to_validate.append({**spec, "name": name})
        if not to_validate:
            raise PublishError(f"{folder}: the run record lists no model to publish")
        files.update(_onnx_files(folder))
    for pattern in include:
        matches = sorted(folder.glob(pattern))
        if not matches:
            raise PublishError(f"--include {pattern!r} matches nothing in {folder}")
        for match in matches:
            for path in [match] if match.is_file() else sorted(p for p in match.rglob("*") if p.is_file()):
                files[path.relative_to(folder).as_posix()] = path
    files.pop(RUN_RECORD, None)
    files = {name.removeprefix("./"): path for name, path in files.items()}
    return files, to_validate


def _onnx_files(folder: Path) -> dict[str, Path]:
    """An ONNX export of the model (``as2hub-export-onnx``: ``onnx/*.onnx`` + ``onnx/as2hub_export.json``), where
    sentence-transformers and as2hub's ``Ranker(backend="onnx")`` look for it; refused when it was exported from other
    weights than the folder's."""
    from as2hub.modeling.folders import EXPORT_RECORD, ONNX_SUBFOLDER, weights_sha256

    record_path = folder / ONNX_SUBFOLDER / EXPORT_RECORD
    if not record_path.is_file():
        return {}
    export = json.loads(record_path.read_text())
    if export.get("weights_sha256") != weights_sha256(folder):
        raise PublishError(
            f"{record_path.parent} was exported from other weights than {folder}'s (the model changed after the "
            f"export): re-run `as2hub-export-onnx {folder}` or remove {record_path.parent}"
        )
    graphs = [record_path.parent / graph["file"] for graph in export.get("graphs", {}).values()]
    missing = [graph.name for graph in graphs if not graph.is_file()]
    if missing or not graphs:
        raise PublishError(f"{record_path} lists graphs that are missing: {missing or 'none listed'}")
    return {f"{ONNX_SUBFOLDER}/{path.name}": path for path in [*graphs, record_path]}


def _hub_base(record: dict) -> str | None:
    ctx = CardContext(record, {}, "")
    return ctx.hub_id(record.get("base_model"))


def build_card_for(record: dict, metrics: dict, repo_id: str, adapter: bool, base_model, license) -> str:
    """The card for ``repo_id``, checked to parse back (``ModelCard``) with the run's metrics in its model-index."""
    variant = "adapter" if adapter else "model"
    card = build_model_card(record, metrics, repo_id, variant=variant, base_model=base_model, license=license)
    text = str(card)
    parsed = ModelCard(text).data
    expected = eval_results(CardContext(record, metrics, repo_id), get_family(record["family"]))
    got = parsed.eval_results or []
    if [(r.metric_type, r.metric_value) for r in got] != [(r.metric_type, r.metric_value) for r in expected]:
        raise PublishError("the model card's model-index does not hold the run's metrics (card builder bug)")
    return text


def _stage(files: dict[str, Path], stage: Path) -> None:
    for name, source in files.items():
        target = stage / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


# Run a script with neither the working directory nor the script's folder on sys.path (``python -I`` would also drop
# PYTHONPATH and the user site-packages, where a user's transformers may live).
_RUN_WITHOUT_LOCAL_PATHS = (
    "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def validate_in_fresh_process(
    folder, components: list[dict], env: dict | None = None, timeout: float = VALIDATION_TIMEOUT
) -> list[dict]:
    """Run ``fresh_load_check.py`` on ``folder`` (staged) in a new interpreter without as2hub; raise if it fails."""
    folder = Path(folder)
    spec = {"components": [{**c, "path": str(folder / c["path"])} for c in components]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(spec, handle)
    try:
        script = Path(__file__).with_name("fresh_load_check.py")
        result = subprocess.run(
            [sys.executable, "-c", _RUN_WITHOUT_LOCAL_PATHS, str(script), handle.name],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    finally:
        os.unlink(handle.name)
    if "REPORT" not in result.stdout:
        raise PublishError(f"the fresh-process load check crashed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    report = json.loads(result.stdout.rsplit("REPORT", 1)[1])
    problems = [f"{entry['component']}: {problem}" for entry in report for problem in entry["problems"]]
    if problems:
        raise PublishError(
            "refusing to publish: the folder, loaded in a fresh process without as2hub, does not reproduce the "
            "trained model:\n- " + "\n- ".join(problems)
        )
    for entry in report:
        logger.info(
            "fresh-process check of %s: outputs match (max |diff| %.2g)", entry["component"], entry["max_abs_diff"]
        )
    return report


def push_run_folder(
    output_dir,
    repo_id: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    create_pr: bool = False,
    adapter: bool = False,
    base_model: str | None = None,
    license: str | None = None,
    include: Iterable[str] = (),
    validate: bool = True,
):
    """Publish a run's output folder as one commit of ``repo_id``; returns the ``CommitInfo``.

    Every check (repo id, run record and metrics, weights, config, tokenizer, code, token, endpoint, fresh-process load
    and outputs) runs before the first byte is uploaded; see the module docstring. ``endpoint`` defaults to
    ``HF_ENDPOINT``; ``revision`` is a branch (created from main if needed); ``create_pr`` opens a pull request
    instead of committing to the branch.
    """
    folder = Path(output_dir)
    check_repo_id(repo_id)
    record, metrics = read_run(folder)
    files, components = plan_upload(folder, record, adapter, include, base_model)
    base = next((c["base_model"] for c in components if c.get("base_model")), None)
    card = build_card_for(record, metrics, repo_id, adapter, base or base_model, license)
    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    user = check_access(api)
    logger.info("publishing %s to %s/%s as %s", folder, api.endpoint, repo_id, user.get("name"))
    stage = Path(tempfile.mkdtemp(dir=folder, prefix=".push-"))
    try:
        _stage(files, stage)
        (stage / "README.md").write_text(card)
        if adapter:
            adapter_config = json.loads((stage / "adapter_config.json").read_text())
            adapter_config["base_model_name_or_path"] = base
            (stage / "adapter_config.json").unlink()  # a hard link: do not rewrite the run's own file
            (stage / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
        if validate:
            child_env = {"HF_ENDPOINT": api.endpoint, "HF_TOKEN": api.token} if adapter else {}
            validate_in_fresh_process(stage, components, env=child_env)
        uploaded = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
        return _commit(api, repo_id, stage, uploaded, private, revision, create_pr, commit_message, record, adapter)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _commit(api, repo_id, stage, uploaded, private, revision, create_pr, message, record, adapter):
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision and revision != "main" and not revision.startswith("refs/"):
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        parent = api.repo_info(repo_id, revision=revision).sha
        remote = api.list_repo_files(repo_id, revision=revision)
    except HfHubHTTPError as error:
        raise PublishError(f"cannot prepare {repo_id} on {api.endpoint}: {error}") from None
    keep = {".gitattributes", *uploaded}
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(stage / name)) for name in uploaded]
    operations += [CommitOperationDelete(path_in_repo=name) for name in remote if name not in keep]
    what = "LoRA adapter" if adapter else "model"
    message = message or f"Upload {record['family'].replace('_', ' ')} {what} (as2hub)"
    description = (
        f"{len(uploaded)} files; loaded in a fresh process without as2hub and checked against the run's reference "
        "outputs before upload."
    )
    try:
        commit = api.create_commit(
            repo_id,
            operations,
            commit_message=message,
            commit_description=description,
            revision=revision,
            create_pr=create_pr,
            parent_commit=parent,
        )
    except HfHubHTTPError as error:
        raise PublishError(
            f"the upload to {repo_id} failed ({error}); the repository stays at its previous revision {parent[:12]} "
            "(one commit per push: nothing was committed)"
        ) from None
    logger.info("pushed %s: %s", repo_id, commit.pr_url or commit.commit_url)
    return commit


class HubPush:
    """The run scripts' ``--push_to_hub``, routed to :func:`push_run_folder` once the run's folder is complete.

    ``HubPush.from_args(training_args, hub_args)`` checks the repo id, token and endpoint BEFORE training, and turns
    the Trainer's own pushes off (it would upload partial folders: every save, and ``save_model`` uploads the whole
    output directory). Returns None when ``--push_to_hub`` is not set. Call the object with the output folder.
    """

    def __init__(self, repo_id: str, token: str, hub_args: HubArguments, private=None, revision=None):
        self.repo_id, self.token, self.hub_args = repo_id, token, hub_args
        self.private, self.revision = private, revision

    @classmethod
    def from_args(cls, training_args, hub_args: HubArguments | None = None) -> "HubPush | None":
        if not training_args.push_to_hub:
            return None
        strategy = str(getattr(training_args.hub_strategy, "value", training_args.hub_strategy))
        if strategy in ("checkpoint", "all_checkpoints"):
            raise PublishError(
                f"--hub_strategy {strategy} is not supported: as2hub pushes the final, validated folder once; to also "
                "upload checkpoints, run `as2hub-push OUTPUT_DIR REPO_ID --include 'checkpoint-*'` after training"
            )
        if training_args.hub_model_id is None:
            raise PublishError("--push_to_hub needs --hub_model_id namespace/name (the repository to publish to)")
        check_repo_id(training_args.hub_model_id)
        token = resolve_token(training_args.hub_token)
        check_access(HfApi(token=token))
        training_args.push_to_hub = False  # the Trainer must not push partial folders: we push once, at the end
        logger.info(
            "the final model will be pushed to %s after training (one validated commit)", training_args.hub_model_id
        )
        return cls(
            training_args.hub_model_id,
            token,
            hub_args or HubArguments(),
            private=training_args.hub_private_repo,
            revision=training_args.hub_revision,
        )

    def __call__(self, output_dir):
        return push_run_folder(
            output_dir,
            self.repo_id,
            token=self.token,
            private=self.private,
            revision=self.revision,
            adapter=self.hub_args.hub_push_adapter,
            base_model=self.hub_args.hub_base_model,
            license=self.hub_args.hub_license,
        )

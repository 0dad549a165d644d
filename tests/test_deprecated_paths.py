"""The old import paths of issue 50's moves (the inference engine from ``modeling/`` to ``inference/``; ``data_collators/``'s
modules into its groups) keep working for one release: each deprecated shim (``test_import_layers.DEPRECATED_SHIMS``)
and each old data_collators path (``test_import_layers.MOVED_MODULES``) resolves every name it had to the very object
at the new path, with a DeprecationWarning that names the new path and points at the caller's line. as2hub's own code
uses none of them (``test_import_layers`` checks the imports by ``ast``; here: importing every module, and the dotted
paths in code and docs), and they go when the version reaches ``deprecation.REMOVED_IN``."""

import ast
import importlib
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import warnings

import pytest
from packaging.version import Version
from test_import_layers import DEPRECATED_SHIMS, LAYERS, MOVED_MODULES, ROOT, module_name

from as2hub.modeling import deprecation

# What the old modules defined. The five that moved whole define exactly what their new module defines; onnx_backend
# (split into onnx_export, onnx_runtime and the folder facts) is listed from its last version, with the four names
# its importers took from it that it had itself imported (from modeling.folders and modeling.scores).
ONNX_BACKEND_NAMES = (
    "logger", "ONNX_SUBFOLDER", "GRAPH_FILES", "EXPORT_RECORD", "QUANTIZE_CHOICES", "DEFAULT_OPSET", "EXPORT_ATOL",
    "INSTALL_HINT", "AS2HUB_MODEL_TYPES", "WEIGHTS_KEY", "CONFIG_KEY", "StaleOnnxExportError", "MissingOnnxExportError",
    "require_onnx", "weight_files", "weights_sha256", "graph_config", "ExportSpec", "cross_encoder_batches",
    "CROSS_ENCODER_SPEC", "joint_batches", "JOINT_SPEC", "EXPORT_LAYOUTS", "EXPORT_SPECS", "check_ranker_folder",
    "INT8_DESCRIPTION", "quantize_int8", "per_token_activation_scales", "export_onnx", "OnnxOutput", "OnnxRankerModel",
    "load_cascade_stages", "check_not_stale",
    "NotAnAS2hubRankerError", "ModelNotFoundError", "check_model_path", "JOINT_MODEL_TYPES",
)  # fmt: skip
# Where onnx_backend's names live now (the folder facts and the scores stay in layer 0).
ONNX_BACKEND_HOMES = (
    "as2hub.modeling.folders",
    "as2hub.modeling.scores",
    "as2hub.inference.onnx_runtime",
    "as2hub.inference.onnx_export",
)
# Every old path is one of these (a shim file of modeling/, or a module object of data_collators/deprecated_paths.py).
OLD_PATHS = {**{old: shims[-1] for old, shims in DEPRECATED_SHIMS.items()}, **MOVED_MODULES}
MESSAGE = re.compile(r"(?P<old>[\w.]+)\.(?P<name>\w+) moved to (?P<new>[\w.]+)\.(?P=name): import it from there")


def old_names(old: str) -> list[tuple[str, str]]:
    """(name, the module it must now come from; "" for one of ONNX_BACKEND_HOMES) for every public name ``old`` had."""
    if old == "as2hub.modeling.onnx_backend":
        return [(name, "") for name in ONNX_BACKEND_NAMES]
    new = OLD_PATHS[old]
    return [(name, new) for name in defined_names(importlib.util.find_spec(new).origin)]


def defined_names(path) -> list[str]:
    """The public names a module's source defines at its top level (not those it imports)."""
    names = []
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def test_the_shims_are_the_old_modules_of_the_moved_code():
    assert sorted(DEPRECATED_SHIMS) == sorted(
        f"as2hub.modeling.{name}"
        for name in ("ranking", "joint_ranking", "backends", "cascade", "onnx_cascade", "onnx_backend")
    )
    for old, allowed in DEPRECATED_SHIMS.items():
        if old != "as2hub.modeling.onnx_backend":
            assert allowed == ("as2hub.inference", old.replace(".modeling.", ".inference."))


def test_the_old_data_collators_paths_are_its_modules_before_the_groups():
    """Every module data_collators/ had before readers/, objectives/ and collators/, one old path each; only
    pretraining_data.py changed its name (training/pretraining_data.py is the one module of that name now)."""
    before = (
        "as2_collator", "as2_data", "as2_splits", "corpus", "fv_data", "hotpotqa", "hotpotqa_encoding",
        "hotpotqa_markers", "joint_collator", "joint_data", "pretraining_collator", "pretraining_data", "qe_tasks",
        "sentence_splitter", "stream_resume", "structure_objectives", "text_files", "tokenizer_training",
    )  # fmt: skip
    assert sorted(MOVED_MODULES) == [f"as2hub.data_collators.{name}" for name in before]
    for old, new in MOVED_MODULES.items():
        group, name = new.split(".")[2:]
        assert group in ("readers", "objectives", "collators")
        assert name == old.rpartition(".")[2] or (old, new) == (
            "as2hub.data_collators.pretraining_data",
            "as2hub.data_collators.objectives.pretraining_examples",
        )
    # The package's own folders only: a build/ tree or an installed copy in a venv inside the checkout is not the package.
    named = (path for layer in LAYERS for path in (ROOT / layer).rglob("pretraining_data.py"))
    assert sorted(path.relative_to(ROOT).as_posix() for path in named) == ["training/pretraining_data.py"]


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_every_old_name_warns_naming_its_new_path_and_is_the_same_object(old):
    shim = importlib.import_module(old)
    names = old_names(old)
    assert len(names) >= 2  # the source parsed (as2_collator defines two public names)
    for name, expected_home in names:
        with pytest.warns(DeprecationWarning) as record:
            value = getattr(shim, name)
        assert len(record) == 1, (name, [str(w.message) for w in record])
        match = MESSAGE.match(str(record[0].message))
        assert match and match["old"] == old and match["name"] == name, str(record[0].message)
        assert f"goes in as2hub {deprecation.REMOVED_IN}" in str(record[0].message)
        home = match["new"]
        assert home == (expected_home or home) and home in (expected_home or ONNX_BACKEND_HOMES), (name, home)
        assert getattr(importlib.import_module(home), name) is value, name


def test_the_warning_points_at_the_line_that_used_the_old_path_and_names_the_package_export():
    code = compile("x = 1\nfrom as2hub.modeling.ranking import Ranker\n", "user_code.py", "exec")
    with pytest.warns(DeprecationWarning) as record:
        exec(code, {})
    assert [(w.filename, w.lineno) for w in record] == [("user_code.py", 2)]
    assert "(or `from as2hub.inference import Ranker`)" in str(record[0].message)
    with pytest.warns(DeprecationWarning, match="onnx_backend.weights_sha256 moved to as2hub.modeling.folders") as rec:
        exec(compile("import as2hub.modeling.onnx_backend as old\nold.weights_sha256\n", "user.py", "exec"), {})
    assert (rec[0].filename, rec[0].lineno) == ("user.py", 2) and "from as2hub.inference" not in str(rec[0].message)


def test_an_old_data_collators_path_imports_every_way_and_warns_at_the_callers_line():
    code = "x = 1\nfrom as2hub.data_collators.corpus import load_documents\n"
    with pytest.warns(DeprecationWarning) as record:
        exec(compile(code, "user_code.py", "exec"), {})
    assert [(w.filename, w.lineno) for w in record] == [("user_code.py", 2)]
    assert str(record[0].message).startswith(
        "as2hub.data_collators.corpus.load_documents moved to as2hub.data_collators.readers.corpus.load_documents: "
        "import it from there (or `from as2hub.data_collators import load_documents`)"
    )
    from as2hub.data_collators.objectives import pretraining_examples, stream_resume

    namespace = {}
    code = (
        "import as2hub.data_collators.pretraining_data as old\n"
        "from as2hub.data_collators import stream_resume\n"
        "key = old.STREAM_POSITION_KEY\n"
        "stop = stream_resume.GracefulStop\n"
    )
    with pytest.warns(DeprecationWarning) as record:
        exec(compile(code, "user.py", "exec"), namespace)
    assert [(w.filename, w.lineno) for w in record] == [("user.py", 3), ("user.py", 4)]
    assert namespace["key"] is pretraining_examples.STREAM_POSITION_KEY
    assert namespace["stop"] is stream_resume.GracefulStop
    old = importlib.import_module("as2hub.data_collators.structure_objectives")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no_such_name"):
            old.no_such_name  # noqa: B018
        assert not hasattr(old, "__path__") and not hasattr(old, "__file__")
    assert "generate_examples" in dir(old)


def test_a_name_the_old_module_never_had_is_an_attribute_error_without_a_warning():
    shim = importlib.import_module("as2hub.modeling.ranking")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="as2hub.modeling.ranking.*no_such_name"):
            shim.no_such_name  # noqa: B018
        assert not hasattr(shim, "__path__")  # a module, not a package: dunder names are not forwarded
    assert "Ranker" in dir(shim)
    namespace = {}
    with pytest.warns(DeprecationWarning):
        exec("from as2hub.modeling.cascade import *", namespace)
    from as2hub.inference import cascade

    assert namespace["check_cascade"] is cascade.check_cascade


@pytest.mark.slow
def test_importing_every_as2hub_module_uses_no_deprecated_path(tmp_path):
    """In a fresh process (nothing imported yet), every module of the package imports with as2hub's deprecation
    warnings as errors; a module whose optional extra is missing is skipped."""
    modules = sorted(
        module_name(path)
        for layer in LAYERS
        for path in (ROOT / layer).rglob("*.py")
        if "__pycache__" not in path.parts
    )
    script = f"""
import importlib, json, warnings
warnings.filterwarnings("error", message=r"as2hub\\.", category=DeprecationWarning)
skipped, failed = [], []
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        (failed if (error.name or "").startswith("as2hub") else skipped).append(f"{{name}}: {{error}}")
    except Exception as error:
        failed.append(f"{{name}}: {{type(error).__name__}}: {{error}}")
print(json.dumps({{"skipped": skipped, "failed": failed}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["failed"] == []
    assert len(outcome["skipped"]) < len(modules) // 2, outcome["skipped"]


# Files that name the old paths on purpose: the shims, their helper, these tests, and measured records.
NAMES_OLD_PATHS = {
    "modeling/deprecation.py",
    "data_collators/deprecated_paths.py",
    "tests/test_import_layers.py",
    "tests/test_deprecated_paths.py",
}
SUFFIXES = {".py", ".md", ".sh", ".txt", ".toml", ".cfg"}


def test_no_code_or_doc_names_a_deprecated_path():
    """Docstrings, command help, code run in subprocesses, READMEs and docs: the new paths only."""
    # dotted paths, and data_collators/'s old file paths (data_collators/corpus.py)
    files_before = [f"data_collators/{old.rpartition('.')[2]}.py" for old in MOVED_MODULES]
    pattern = re.compile("|".join([*(re.escape(old) + r"\b" for old in OLD_PATHS), *map(re.escape, files_before)]))
    shims = {importlib.util.find_spec(old).origin for old in DEPRECATED_SHIMS}
    folders = [path for path in sorted(ROOT.iterdir()) if path.is_dir() and not path.name.startswith(".")]
    files = [*ROOT.glob("*.md"), *(path for folder in folders for path in folder.rglob("*") if path.suffix in SUFFIXES)]
    found = []
    for path in sorted(files):
        relative = path.relative_to(ROOT).as_posix()
        skipped = relative.startswith(("benchmarks/results/", "build/", "outputs/")) or "egg-info" in relative
        if skipped or str(path) in shims or relative in NAMES_OLD_PATHS:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert found == []


def test_the_shims_go_in_the_release_named_for_it():
    version = importlib.metadata.version("as2hub")
    assert Version(version) < Version(deprecation.REMOVED_IN), (
        f"as2hub {version} reached {deprecation.REMOVED_IN}: delete the deprecated shims (DEPRECATED_SHIMS in "
        "tests/test_import_layers.py), modeling/deprecation.py and tests/test_deprecated_paths.py"
    )

"""What `pip install .` puts in site-packages: one `as2hub` namespace, and remote-code folders that stand alone."""

import ast
import importlib.metadata
import sys
from pathlib import Path

import pytest

import as2hub.modeling


def test_only_the_as2hub_namespace_is_installed():
    files = importlib.metadata.files("as2hub")
    if any(file.name.startswith("__editable__") for file in files):
        pytest.skip("editable install (pip install -e .): run `make test` for the installed layout")
    top_levels = {file.parts[0] for file in files if file.suffix == ".py"}
    assert top_levels == {"as2hub"}, top_levels


ALLOWED = {"torch", "transformers", "huggingface_hub", *sys.stdlib_module_names}


@pytest.mark.parametrize("folder", ["contextual_as2", "ssp_pretraining", "joint_multicandidate", "longformer_qe"])
def test_remote_code_folders_import_only_torch_transformers_and_siblings(folder):
    root = Path(as2hub.modeling.__file__).parent / folder
    if not root.is_dir():
        pytest.skip(f"{folder} is not part of this build")
    siblings = {path.stem for path in root.glob("*.py")}
    for source in root.glob("*.py"):
        if source.name == "__init__.py":
            continue  # the package's own entry point, not shipped to the Hub
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                assert node.module in siblings, (source.name, node.module)
            elif isinstance(node, ast.ImportFrom):
                assert node.module.split(".")[0] in ALLOWED, (source.name, node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in ALLOWED, (source.name, alias.name)

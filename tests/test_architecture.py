"""ARCHITECTURE.md's "checked" steps: what a newcomer could forget when adding a family, a backend or an endpoint,
and what would otherwise fail late or silently. (Objectives: tests/test_objective_registry.py.)"""

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from as2hub.hub_cards.cards import get_family
from as2hub.inference import backends, ranking
from as2hub.modeling.registry import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
HAS_SERVE = all(importlib.util.find_spec(name) is not None for name in ("ray", "fastapi"))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_model_family_has_a_card_entry_and_is_in_the_layer_contract(family):
    import test_import_layers

    assert get_family(family).name == family  # hub_cards/families.py
    assert family in test_import_layers.REMOTE_CODE
    assert (ROOT / "modeling" / family).is_dir()
    packages = (ROOT / "pyproject.toml").read_text()
    assert f'"as2hub.modeling.{family}"' in packages


# The shared files of the remote-code folders: one source each, a symlink in every other folder that uses it.
SHARED = {
    "hub_common.py": "contextual_as2",
    "pretraining_heads.py": "ssp_pretraining",
    "unpadding.py": "ssp_pretraining",
}


def test_every_shared_remote_code_file_is_a_link_to_its_one_source():
    uses = {}
    for family in sorted(FAMILIES):
        for name, source in SHARED.items():
            path = ROOT / "modeling" / family / name
            if family == source:
                assert path.is_file() and not path.is_symlink(), path
            elif path.exists() or path.is_symlink():
                assert path.is_symlink() and path.resolve() == (ROOT / "modeling" / source / name).resolve(), path
                uses.setdefault(name, []).append(family)
    assert uses == {
        "hub_common.py": ["joint_multicandidate", "longformer_qe", "ssp_pretraining"],
        "pretraining_heads.py": ["joint_multicandidate"],
        "unpadding.py": ["joint_multicandidate"],
    }


def _engines_loaded() -> set[str]:
    """The engines ``ranking._load`` builds: the string constants it compares ``engine`` with (``else``: torch)."""
    tree = ast.parse(Path(ranking.__file__).read_text())
    load = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_load")
    compared = {
        c.value
        for n in ast.walk(load)
        if isinstance(n, ast.Compare) and getattr(n.left, "id", None) == "engine"
        for c in n.comparators
        if isinstance(c, ast.Constant)
    }
    return compared | {"torch"}


@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_every_backend_is_documented_and_built(name):
    assert re.search(rf"^``{re.escape(name)}``\s", backends.__doc__, re.MULTILINE), (
        f"{name}: not in the docstring table"
    )
    engine, _ = backends.BACKENDS[name]
    assert engine in _engines_loaded(), f"{name}: engine {engine!r} is not built by ranking._load"


@pytest.mark.skipif(not HAS_SERVE, reason='the serve extra is not installed: pip install "as2hub[serve]"')
def test_every_endpoint_is_in_the_commands_help():
    from as2hub.run_scripts import serve
    from as2hub.serving.http import api

    routes = [(method.upper(), path) for path, methods in api.openapi()["paths"].items() for method in methods]
    assert {path for _, path in routes} >= {"/rerank", "/v1/rerank", "/health", "/info"}
    for method, path in routes:
        assert f"``{method} {path}``" in serve.__doc__, f"{method} {path} is not in as2hub-serve's docstring"


def test_architecture_md_names_files_that_exist_and_the_contracts_layers():
    import test_import_layers

    text = (ROOT / "ARCHITECTURE.md").read_text()
    paths = set(re.findall(r"`([\w.]+/[\w./]+\.(?:py|toml|md)|[\w.]+\.(?:toml|md))`", text))
    assert paths and [path for path in sorted(paths) if not (ROOT / path).is_file()] == []
    for folder, layer in test_import_layers.LAYERS.items():
        assert re.search(rf"^  {folder}/ .* layer {layer}\b", text, re.MULTILINE), f"{folder}: layer {layer}"


DOCS = ("ARCHITECTURE.md", "README.md", ".ci", "benchmarks", "hub_cards", "inference", "modeling", "run_scripts")


def table_rows_off_their_header(text: str) -> list[tuple[int, int, int]]:
    """``(line, cells, header's cells)`` of every Markdown table row whose cell count is not its header's: an
    unescaped ``|`` inside a cell (GitHub splits on it, code spans included) or a column added to some rows only."""
    found, header = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line)) - 1
        if header is None:
            header = cells
        elif cells != header:
            found.append((number, cells, header))
    return found


def test_table_check_finds_a_stray_column_and_a_bare_bar():
    table = (
        "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 | 5 |\n| mean of \\|x\\| | 6 |\n| largest |x| | 7 |\n\n| c |\n|---|"
    )
    assert table_rows_off_their_header(table) == [(4, 3, 2), (6, 4, 2)]


def test_every_markdown_table_row_has_its_headers_columns():
    # Seen: a per-seed column pasted into another system's table, and |score change| splitting a row in two.
    files = [ROOT / name for name in DOCS if (ROOT / name).is_file()]
    files += [path for name in DOCS if (ROOT / name).is_dir() for path in sorted((ROOT / name).rglob("*.md"))]
    assert len(files) >= 10
    off = {str(path.relative_to(ROOT)): table_rows_off_their_header(path.read_text()) for path in files}
    assert {name: rows for name, rows in off.items() if rows} == {}

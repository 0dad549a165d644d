"""The import contract: as2hub's layers import downward only, and nothing imports in a circle.

    modeling (remote-code folders, family registry, layouts, scores)      layer 0
    inference (rankers, backends, the cascade, ONNX export and runtime)   layer 1 (independent of each other)
    metrics, data_collators (readers, collators, example generation)      layer 1
    training (Trainer subclasses, argument checks, model builders)        layer 2
    hub_cards (cards, run record, run outputs, Hub push)                  layer 3 (independent of each other)
    serving (the scorer, the HTTP app, the batch-scoring engine)          layer 3
    run_scripts (the commands and their argument dataclasses)             layer 4

A module may import from its own layer's package and from lower layers, never from a higher layer or (in layer 1)
from the other package of its layer; no two as2hub modules import each other in a cycle, even lazily inside a
function; the remote-code folders never import the family registry (nor anything of as2hub outside their folder);
the commands are leaves (no ``run_*`` module imports another); the remote-code folders (what goes to the
Hub) import only the standard library, torch, transformers, huggingface_hub, safetensors, numpy and their siblings.

One named exemption: the deprecated shims (:data:`DEPRECATED_SHIMS`, old paths of the names that moved to
``inference/``) import their new homes, upward, and nothing else upward; no other module, test or benchmark imports a
shim, nor an old path of ``data_collators/``'s modules (:data:`MOVED_MODULES`, from before its groups; no files, no
upward import). ``tests/test_deprecated_paths.py`` checks that each warns and resolves to the new object.

Read from the source with ``ast`` (every ``import``, at module level or inside functions), so a lazy import counts.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {
    "modeling": 0,
    "inference": 1,
    "metrics": 1,
    "data_collators": 1,
    "training": 2,
    "hub_cards": 3,
    "serving": 3,
    "run_scripts": 4,
}
# The deprecated shims (modeling/deprecation.py): old module -> the upward modules it may import, and only these. Each
# goes in as2hub 0.2.0 (deprecation.REMOVED_IN), and with it its line here.
DEPRECATED_SHIMS = {
    "as2hub.modeling.ranking": ("as2hub.inference", "as2hub.inference.ranking"),
    "as2hub.modeling.joint_ranking": ("as2hub.inference", "as2hub.inference.joint_ranking"),
    "as2hub.modeling.backends": ("as2hub.inference", "as2hub.inference.backends"),
    "as2hub.modeling.cascade": ("as2hub.inference", "as2hub.inference.cascade"),
    "as2hub.modeling.onnx_cascade": ("as2hub.inference", "as2hub.inference.onnx_cascade"),
    "as2hub.modeling.onnx_backend": (
        "as2hub.inference",
        "as2hub.inference.onnx_export",
        "as2hub.inference.onnx_runtime",
    ),
}


def _moved_modules() -> dict[str, str]:
    """``data_collators/deprecated_paths.py``'s ``MOVED_MODULES`` (old path -> new home), read by ``ast`` so that this
    contract imports nothing of as2hub."""
    tree = ast.parse((ROOT / "data_collators" / "deprecated_paths.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [target.id for target in node.targets] == ["MOVED_MODULES"]:
            return ast.literal_eval(node.value)
    raise AssertionError("data_collators/deprecated_paths.py defines no MOVED_MODULES")


# The old paths of data_collators/'s modules (until 0.2.0): module objects that warn, without files.
MOVED_MODULES = _moved_modules()
REMOTE_CODE = ("contextual_as2", "ssp_pretraining", "joint_multicandidate", "longformer_qe")
REMOTE_CODE_ALLOWED = {"torch", "transformers", "huggingface_hub", "safetensors", "numpy"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["as2hub", *parts])


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            # `from pkg import sub` may name a submodule: count it as an import of pkg.sub when that is a file
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                found.append((node.lineno, candidate if resolve(candidate) or candidate in MOVED_MODULES else module))
    return found


def resolve(module: str) -> Path | None:
    parts = module.split(".")
    if parts[0] != "as2hub" or len(parts) < 2:
        return None
    base = ROOT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def source_files(root: Path = ROOT) -> list[Path]:
    return sorted(path for layer in LAYERS for path in (root / layer).rglob("*.py"))


def layer_violations(files) -> list[str]:
    problems = []
    for path in files:
        source = module_name(path).split(".")[1]
        exempt = DEPRECATED_SHIMS.get(module_name(path), ())
        for line, module in imports_of(path):
            parts = module.split(".")
            if parts[0] != "as2hub" or len(parts) < 2 or parts[1] not in LAYERS or module in exempt:
                continue
            target = parts[1]
            where = f"{path.relative_to(ROOT)}:{line}"
            if LAYERS[target] > LAYERS[source]:
                problems.append(f"{where} imports {module}: {target} is above {source}")
            elif LAYERS[target] == LAYERS[source] and target != source:
                problems.append(f"{where} imports {module}: {target} and {source} are one layer, independent")
            command = target == "run_scripts" and len(parts) > 2 and parts[2].startswith("run_")
            if command and path.stem.startswith("run_") and parts[2] != path.stem:
                problems.append(f"{where} imports {module}: a command imports another command")
    return problems


def deprecated_uses(files) -> list[str]:
    """Every import of a deprecated shim (or an old data_collators path) outside the shims themselves."""
    problems = []
    old_paths = [*DEPRECATED_SHIMS, *MOVED_MODULES]
    for path in files:
        if module_name(path) in DEPRECATED_SHIMS:
            continue
        for line, module in imports_of(path):
            if any(module == shim or module.startswith(shim + ".") for shim in old_paths):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}, a deprecated path")
    return problems


def import_graph(files) -> dict[str, set[str]]:
    graph = {}
    for path in files:
        name = module_name(path)
        targets = set()
        for _, module in imports_of(path):
            target = resolve(module)
            if target is not None and target != path:
                targets.add(module_name(target))
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_import_runs_down_the_layers():
    assert layer_violations(source_files()) == []


def test_only_the_named_shims_import_upward_and_nothing_imports_a_shim():
    """The exemption is exactly DEPRECATED_SHIMS: each is a file of modeling/, and no module of the package, test or
    benchmark uses a deprecated path (lazy imports included)."""
    for shim in DEPRECATED_SHIMS:
        path = resolve(shim)
        assert path is not None and path.parent == ROOT / "modeling", shim
    groups = {ROOT / "data_collators" / group for group in ("readers", "objectives", "collators")}
    for old, new in MOVED_MODULES.items():
        assert resolve(old) is None and old.count(".") == 2, old  # no file: nothing to import upward
        assert resolve(new) is not None and resolve(new).parent in groups, new
    files = [*source_files(), *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    assert deprecated_uses(files) == []


def test_no_as2hub_modules_import_each_other_in_a_cycle():
    graph = import_graph(source_files())
    # package __init__ files that re-export their submodules are not cycles of behaviour: drop package -> child edges
    graph = {
        name: {target for target in targets if not target.startswith(name + ".")} for name, targets in graph.items()
    }
    assert cycles(graph) == []


@pytest.mark.parametrize("family", REMOTE_CODE)
def test_the_remote_code_imports_only_torch_transformers_and_its_siblings(family):
    folder = ROOT / "modeling" / family
    problems = []
    for path in sorted(folder.glob("*.py")):
        for line, module in imports_of(path):
            top = module.split(".")[0]
            sibling = module.startswith(f"as2hub.modeling.{family}.")
            if sibling or top in REMOTE_CODE_ALLOWED or top in sys.stdlib_module_names:
                continue
            problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert problems == []


def test_the_contract_catches_an_upward_import_and_a_cycle(tmp_path, monkeypatch):
    """The checks themselves: a planted upward import and a planted two-module cycle are both reported."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
        (tmp_path / layer / "__init__.py").write_text("")
    (tmp_path / "modeling" / "ranking.py").write_text("from as2hub.run_scripts.run_as2 import main\n")
    (tmp_path / "run_scripts" / "run_as2.py").write_text("from as2hub.modeling import ranking\n")
    (tmp_path / "run_scripts" / "run_joint.py").write_text("def f():\n    from as2hub.run_scripts import run_as2\n")
    (tmp_path / "metrics" / "ranking.py").write_text("from as2hub.data_collators import x\n")
    (tmp_path / "modeling" / "backends.py").write_text(
        "def __getattr__(name):\n    from as2hub.inference import backends\n"
    )
    (tmp_path / "training" / "joint.py").write_text("from as2hub.modeling.backends import BACKENDS\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    files = source_files(tmp_path)
    problems = layer_violations(files)
    # a shim imports its listed new home (not a violation), and nothing else upward (modeling/ranking.py above)
    assert not any("modeling/backends.py" in p for p in problems)
    assert deprecated_uses(files) == [
        "run_scripts/run_as2.py:1 imports as2hub.modeling.ranking, a deprecated path",
        "training/joint.py:1 imports as2hub.modeling.backends, a deprecated path",
    ]
    assert any(
        "modeling/ranking.py:1 imports as2hub.run_scripts.run_as2: run_scripts is above modeling" in p for p in problems
    )
    assert any("run_joint.py:2" in p and "a command imports another command" in p for p in problems)
    assert any("metrics/ranking.py:1" in p and "one layer, independent" in p for p in problems)
    assert cycles(import_graph(files)) == [["as2hub.modeling.ranking", "as2hub.run_scripts.run_as2"]]

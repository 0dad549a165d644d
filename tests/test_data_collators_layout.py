"""``data_collators/`` in three groups (issue 50): ``readers/``, ``objectives/`` and ``collators/``. The public names
did not move: ``from as2hub.data_collators import X`` gives, for every name the package exported before the groups,
the very object its new home defines."""

import ast
import importlib

import pytest
from test_import_layers import ROOT

import as2hub.data_collators

# as2hub.data_collators.__all__ before the groups, in its order: pinned, so that a name cannot silently leave.
ALL = (
    "Objective", "resolve_objective", "AS2Data", "AS2DataError", "AS2_COLUMNS", "AS2_FEATURES",
    "ContextualAS2Collator", "CorpusConfig", "CorpusError", "CorpusStats", "DOCUMENT_FEATURES", "EmptyCorpusError",
    "HotpotQACollator", "HotpotQAData", "HotpotQAEncoder", "HotpotQAError", "IGNORE_LABEL", "OBJECTIVES",
    "PAIR_OBJECTIVES", "PretrainingCollator", "SegmentLayout", "StructurePretrainingIterableDataset",
    "TRIPLET_OBJECTIVES", "add_marker_tokens", "default_corpus", "default_max_length", "derive_seed",
    "documents_from_dataset", "example_features", "generate_examples", "generate_pretraining_dataset",
    "get_objective", "get_sentence_tokenizer", "install_punkt_tab", "is_triplet_objective", "iter_documents",
    "load_as2_data", "load_documents", "longest_first_lengths", "pad_batch", "question_id_for", "read_hotpotqa",
    "read_wikiqa", "split_document", "split_sentences", "tokenize_as2", "tokenize_pretraining", "train_tokenizer",
    "FEVER_LABELS", "FVData", "FactVerificationDataError", "GROUPINGS", "JOINT_OBJECTIVES", "JointCollator",
    "ScoreColumn", "group_candidates", "is_joint_objective", "load_fv_data", "wikiqa_distractor",
)  # fmt: skip
# The module that defines each name now (the segment layouts were always layer 0's, re-exported here).
HOMES = {
    "as2hub.modeling.segment_layout": ("SegmentLayout", "longest_first_lengths", "pad_batch"),
    "as2hub.data_collators.readers.as2_data": (
        "AS2Data", "AS2DataError", "AS2_COLUMNS", "AS2_FEATURES", "load_as2_data", "question_id_for", "read_wikiqa",
    ),
    "as2hub.data_collators.readers.corpus": (
        "CorpusConfig", "CorpusError", "CorpusStats", "DOCUMENT_FEATURES", "EmptyCorpusError", "default_corpus",
        "documents_from_dataset", "iter_documents", "load_documents", "split_document",
    ),
    "as2hub.data_collators.readers.fv_data": ("FEVER_LABELS", "FVData", "FactVerificationDataError", "load_fv_data"),
    "as2hub.data_collators.readers.hotpotqa": ("HotpotQAData", "HotpotQAError", "read_hotpotqa"),
    "as2hub.data_collators.readers.joint_data": ("GROUPINGS", "ScoreColumn", "group_candidates"),
    "as2hub.data_collators.readers.qe_tasks": ("wikiqa_distractor",),
    "as2hub.data_collators.readers.sentence_splitter": ("get_sentence_tokenizer", "install_punkt_tab", "split_sentences"),
    "as2hub.data_collators.objectives.structure_objectives": (
        "Objective", "resolve_objective", "IGNORE_LABEL", "OBJECTIVES", "PAIR_OBJECTIVES", "TRIPLET_OBJECTIVES",
        "JOINT_OBJECTIVES", "derive_seed", "generate_examples", "get_objective", "is_triplet_objective",
        "is_joint_objective",
    ),
    "as2hub.data_collators.objectives.pretraining_examples": (
        "StructurePretrainingIterableDataset", "example_features", "generate_pretraining_dataset",
    ),
    "as2hub.data_collators.collators.as2_collator": ("ContextualAS2Collator", "tokenize_as2"),
    "as2hub.data_collators.collators.joint_collator": ("JointCollator",),
    "as2hub.data_collators.collators.pretraining_collator": (
        "PretrainingCollator", "default_max_length", "tokenize_pretraining",
    ),
    "as2hub.data_collators.collators.hotpotqa_encoding": ("HotpotQACollator", "HotpotQAEncoder"),
    "as2hub.data_collators.collators.hotpotqa_markers": ("add_marker_tokens",),
    "as2hub.data_collators.collators.tokenizer_training": ("train_tokenizer",),
}  # fmt: skip
HOME_OF = {name: home for home, names in HOMES.items() for name in names}
GROUPS = ("readers", "objectives", "collators")


def test_the_public_names_are_those_of_before_the_groups():
    assert list(as2hub.data_collators.__all__) == list(ALL)
    assert sorted(HOME_OF) == sorted(ALL) and sum(map(len, HOMES.values())) == len(ALL)


@pytest.mark.parametrize("name", ALL)
def test_every_public_name_imports_from_the_package_and_is_the_object_its_new_home_defines(name):
    namespace = {}
    exec(f"from as2hub.data_collators import {name}", namespace)
    home = importlib.import_module(HOME_OF[name])
    assert namespace[name] is getattr(home, name)
    assert name in defined_names(home.__file__), f"{HOME_OF[name]} imports {name}, it does not define it"
    if isinstance(namespace[name], type) or callable(namespace[name]) and hasattr(namespace[name], "__module__"):
        assert namespace[name].__module__ == HOME_OF[name], name


def defined_names(path) -> set[str]:
    names = set()
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_folder_is_three_groups_and_its_package_files():
    """No module lies loose beside the groups: data_collators/ holds the package's __init__.py, the table of the old
    paths (until 0.2.0) and readers/, objectives/, collators/, each a package of modules."""
    folder = ROOT / "data_collators"
    loose = sorted(path.name for path in folder.glob("*.py"))
    assert loose == ["__init__.py", "deprecated_paths.py"]
    assert sorted(path.name for path in folder.iterdir() if path.is_dir() and path.name != "__pycache__") == sorted(
        GROUPS
    )
    for group in GROUPS:
        assert (folder / group / "__init__.py").is_file()
        assert not [path for path in (folder / group).iterdir() if path.is_dir() and path.name != "__pycache__"]
    homes = {home.rsplit(".", 1)[0] for home in HOMES if home.startswith("as2hub.data_collators.")}
    assert homes == {f"as2hub.data_collators.{group}" for group in GROUPS}
    # every group is a package setuptools installs (pyproject lists its packages one by one)
    pyproject = (ROOT / "pyproject.toml").read_text()
    for group in GROUPS:
        assert f'"as2hub.data_collators.{group}",' in pyproject
        importlib.import_module(f"as2hub.data_collators.{group}")

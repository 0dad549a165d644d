"""The old module paths of ``data_collators/``, before its modules moved into the groups ``readers/``,
``objectives/`` and ``collators/`` (issue 50), kept until as2hub 0.2.0.

``as2hub.data_collators`` puts one module object per old path in ``sys.modules``
(:func:`as2hub.modeling.deprecation.moved_module`), so ``from as2hub.data_collators.corpus import iter_raw_documents``
still works and returns the very object of ``as2hub.data_collators.readers.corpus``, with a ``DeprecationWarning``
naming the new path. There are no files at the old paths: ``pretraining_data.py`` is ``training/``'s module alone (the
example generation is ``objectives/pretraining_examples.py``). The names the package exports
(``from as2hub.data_collators import X``) never moved. In 0.2.0 delete this module and its call in ``__init__.py``.
"""

import sys
from types import ModuleType

from as2hub.modeling import deprecation

# old module -> its new home; as2hub's own code, tests and benchmarks use the new paths only
# (tests/test_import_layers.py reads this table by ``ast``, tests/test_deprecated_paths.py checks every name).
MOVED_MODULES = {
    "as2hub.data_collators.as2_data": "as2hub.data_collators.readers.as2_data",
    "as2hub.data_collators.as2_splits": "as2hub.data_collators.readers.as2_splits",
    "as2hub.data_collators.corpus": "as2hub.data_collators.readers.corpus",
    "as2hub.data_collators.fv_data": "as2hub.data_collators.readers.fv_data",
    "as2hub.data_collators.hotpotqa": "as2hub.data_collators.readers.hotpotqa",
    "as2hub.data_collators.joint_data": "as2hub.data_collators.readers.joint_data",
    "as2hub.data_collators.qe_tasks": "as2hub.data_collators.readers.qe_tasks",
    "as2hub.data_collators.sentence_splitter": "as2hub.data_collators.readers.sentence_splitter",
    "as2hub.data_collators.text_files": "as2hub.data_collators.readers.text_files",
    "as2hub.data_collators.structure_objectives": "as2hub.data_collators.objectives.structure_objectives",
    "as2hub.data_collators.pretraining_data": "as2hub.data_collators.objectives.pretraining_examples",
    "as2hub.data_collators.stream_resume": "as2hub.data_collators.objectives.stream_resume",
    "as2hub.data_collators.as2_collator": "as2hub.data_collators.collators.as2_collator",
    "as2hub.data_collators.joint_collator": "as2hub.data_collators.collators.joint_collator",
    "as2hub.data_collators.pretraining_collator": "as2hub.data_collators.collators.pretraining_collator",
    "as2hub.data_collators.hotpotqa_encoding": "as2hub.data_collators.collators.hotpotqa_encoding",
    "as2hub.data_collators.hotpotqa_markers": "as2hub.data_collators.collators.hotpotqa_markers",
    "as2hub.data_collators.tokenizer_training": "as2hub.data_collators.collators.tokenizer_training",
}


def install(package: ModuleType) -> None:
    """Register the old paths (in ``sys.modules`` and as attributes of ``package``, as an imported submodule is)."""
    for old, new in MOVED_MODULES.items():
        module = sys.modules.get(old)
        if module is None:
            module = sys.modules[old] = deprecation.moved_module(old, new, public=package)
        setattr(package, old.rpartition(".")[2], module)

"""Old import paths of names that moved, kept for one release with a ``DeprecationWarning`` naming the new path.

The inference engine left ``modeling/`` for ``inference/`` (issue 50): ``as2hub.modeling.ranking`` and its siblings
are shims now, each a module ``__getattr__`` (PEP 562) that imports the name from its new home, warns once per call
site and returns the very same object::

    >>> from as2hub.modeling.ranking import Ranker  # doctest: +SKIP
    DeprecationWarning: as2hub.modeling.ranking.Ranker moved to as2hub.inference.ranking.Ranker: import it from there
    (or `from as2hub.inference import Ranker`); the old path goes in as2hub 0.2.0

The shims are listed in ``tests/test_import_layers.py`` (``DEPRECATED_SHIMS``, the only modules allowed to import
upward) and go, with this module, in :data:`REMOVED_IN` (``tests/test_deprecated_paths.py`` fails from that version on).

``data_collators/``'s modules moved into its groups (``readers/``, ``objectives/``, ``collators/``; issue 50) within
their own package: their old paths have no file (one of them, ``pretraining_data.py``, would name a second module so),
but a module object of :func:`moved_module` that ``as2hub.data_collators`` puts in ``sys.modules``
(``data_collators/deprecated_paths.py``), with the same warning per name.
"""

import importlib
import importlib.machinery
import warnings
from types import ModuleType

REMOVED_IN = "0.2.0"


def moved_attribute(old_module: str, name: str, *homes: ModuleType, public: ModuleType | None = None):
    """``name`` from the first of ``homes`` that has it, with a DeprecationWarning pointing at the caller's line (and
    naming ``public``, the package, when it exports the same object); ``AttributeError`` (no warning) when none has
    it. ``__all__`` is the homes' public names (so ``import *`` gets them, each with its warning); other dunder names
    are never forwarded."""
    if name == "__all__":
        return moved_dir(*homes)
    if not (name.startswith("__") and name.endswith("__")):
        for home in homes:
            if hasattr(home, name):
                value = getattr(home, name)
                also = ""
                if public is not None and getattr(public, name, None) is value:
                    also = f" (or `from {public.__name__} import {name}`)"
                warnings.warn(
                    f"{old_module}.{name} moved to {home.__name__}.{name}: import it from there{also}; the old path "
                    f"goes in as2hub {REMOVED_IN}",
                    DeprecationWarning,
                    stacklevel=3,  # this function, the shim's __getattr__, the line that used the old path
                )
                return value
    raise AttributeError(f"module {old_module!r} has no attribute {name!r}")


def moved_dir(*homes: ModuleType) -> list[str]:
    """What ``dir()`` shows for a shim: the public names of its new homes."""
    return sorted({name for home in homes for name in dir(home) if not name.startswith("_")})


def moved_module(old_module: str, new_module: str, public: ModuleType | None = None) -> ModuleType:
    """A module object for the old path of a module that moved whole, without a file at the old path: each of its
    names resolves, with :func:`moved_attribute`'s warning, to the object of ``new_module`` (imported when first
    used). The package of ``old_module`` puts it in ``sys.modules`` (and on itself), so that ``import old_module`` and
    ``from old_module import name`` keep working."""
    package, _, _ = old_module.rpartition(".")
    module = ModuleType(
        old_module,
        f"Deprecated: moved to {new_module}. Every name still resolves here, to the same object, with a "
        f"DeprecationWarning naming its new path; this path goes in as2hub {REMOVED_IN}.",
    )
    module.__package__ = package
    module.__spec__ = importlib.machinery.ModuleSpec(old_module, None)

    def __getattr__(name):
        return moved_attribute(old_module, name, importlib.import_module(new_module), public=public)

    def __dir__():
        return moved_dir(importlib.import_module(new_module))

    module.__getattr__ = __getattr__
    module.__dir__ = __dir__
    return module

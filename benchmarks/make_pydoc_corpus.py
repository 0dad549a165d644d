"""Turn Debian's ``python3.11-doc`` (the CPython documentation's reStructuredText sources) into a multi-paragraph
pre-training corpus for ``run_pretrain.py`` (``--corpus FILE.jsonl.gz``) and ``benchmarks/reproduce.py``.

No Wikipedia dump is reachable offline; the Python documentation is the multi-paragraph English prose every Debian /
Ubuntu machine can install (``apt-get install -y python3.11-doc``, ~12 MB of ``.rst.txt`` sources under
``/usr/share/doc/python3.11/html/_sources``). Each source file is cut into documents at its two top heading levels
(a library module's sections are about a Wikipedia article's size); a document is its prose paragraphs, blank-line
separated, as the corpus reader expects. Dropped: code (literal blocks after ``::``, ``code-block``, ``doctest``,
``>>>`` sessions, grammar productions), tables, labels, index entries, comments, headings and directive signatures;
kept: paragraphs, lists, definition lists and the bodies of the description directives (``function``, ``class``,
``method``, ``note``, ``versionchanged``, ...), with inline markup reduced to its text (``:func:`~os.path.join```
-> ``join``). ``whatsnew/changelog`` (one-line bug-fix entries) is left out.

Usage::

    apt-get install -y python3.11-doc
    python benchmarks/make_pydoc_corpus.py          # -> outputs/corpus/python3.11-doc.jsonl.gz (+ .stats.json)
    python benchmarks/make_pydoc_corpus.py --source DIR --output FILE.jsonl.gz

Writes one JSON object per line, ``{"id", "title", "text"}`` (gzip), and ``<output>.stats.json``: files, documents,
paragraphs, bytes, and what the corpus reader keeps with the papers' filters (documents / paragraphs / sentences,
paragraphs of 3+ sentences, documents of 2+ paragraphs).
"""

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = Path("/usr/share/doc/python3.11/html/_sources")
DEFAULT_OUTPUT = REPO / "outputs" / "corpus" / "python3.11-doc.jsonl.gz"
INSTALL_HINT = "apt-get install -y python3.11-doc (Debian/Ubuntu)"
EXCLUDED = ("whatsnew/changelog.rst.txt",)

# Directives whose indented body is prose (kept); every other directive's body is dropped.
PROSE_DIRECTIVES = {
    "function", "method", "class", "attribute", "data", "exception", "decorator", "decoratormethod", "classmethod",
    "staticmethod", "abstractmethod", "coroutinefunction", "coroutinemethod", "awaitablefunction", "describe",
    "object", "opcode", "cmdoption", "option", "envvar", "pdbcommand", "c:function", "c:member", "c:type", "c:var",
    "c:macro", "c:struct", "c:data", "note", "warning", "seealso", "important", "caution", "attention", "tip", "hint",
    "impl-detail", "topic", "sidebar", "only", "glossary", "epigraph", "admonition", "versionadded",
    "versionchanged", "deprecated", "deprecated-removed", "availability",
}  # fmt: skip
# Of those, the ones whose argument is prose too (admonition text; the version directives' "3.2" becomes a sentence).
VERSION_WORDS = {
    "versionadded": "New in version {}.",
    "versionchanged": "Changed in version {}:",
    "deprecated": "Deprecated since version {}:",
    "deprecated-removed": "Deprecated since version {}, will be removed in version {}:",
}
INLINE_ARGUMENT = {"note", "warning", "important", "caution", "attention", "tip", "hint", "seealso", "impl-detail"}
TEXT_BODY = {"topic", "sidebar", "only", "glossary", "epigraph", "admonition", "availability"}

_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^\.\.\s+([\w:-]+)::\s*(.*)$")
_OPTION = re.compile(r"^:[\w-]+:(\s|$)")
_TABLE = re.compile(r"^(\+[-=+]+\+|=+( +=+)+)\s*$")
_ROLE = re.compile(r":[\w:-]+:`([^`]*)`")
_TARGET = re.compile(r"^(.*?)\s*<[^<>]*>$", re.S)
_LINK = re.compile(r"`([^`<]*?)\s*(<[^`]*>)?`__?")
_LITERAL = re.compile(r"``(.+?)``")
_FOOTNOTE = re.compile(r"\s*\[(#\w*|\d+|\*)\]_")
_EMPHASIS = re.compile(r"(?<![\w*])\*\*?([^*\s](?:[^*]*[^*\s])?)\*\*?(?![\w*])")
_SUBSTITUTION = re.compile(r"\|([\w -]+)\|_?")
_FIELD = re.compile(r"^:[\w -]+:(\s|$)")
_BULLET = re.compile(r"^\s*([*+-]|#\.|\d+\.|\(\d+\))\s+")


def _role_text(match: re.Match) -> str:
    text = match.group(1)
    target = _TARGET.match(text)
    if target and target.group(1):
        return target.group(1)
    text = text.lstrip("!")
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return text


def inline_text(text: str) -> str:
    """Inline reStructuredText reduced to plain text."""
    text = _ROLE.sub(_role_text, text)
    text = _LITERAL.sub(r"\1", text)
    text = _LINK.sub(lambda m: m.group(1) or (m.group(2) or "").strip("<>"), text)
    text = _FOOTNOTE.sub("", text)
    text = _EMPHASIS.sub(r"\1", text)
    text = _SUBSTITUTION.sub(r"\1", text)
    text = text.replace("\\ ", "").replace("\\", "")
    return " ".join(text.split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Index after the lines (from ``start``) that are blank or indented more than ``indent``."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    return end


def _dedent(lines: list[str]) -> list[str]:
    width = min((_indent(line) for line in lines if line.strip()), default=0)
    return [line[width:] if line.strip() else "" for line in lines]


def parse_rst(lines: list[str], styles: list | None = None) -> list[tuple]:
    """``[("heading", level, text) | ("paragraph", text)]`` of reStructuredText lines (see the module docstring).

    ``styles`` collects heading adornments in order of appearance (their index is the level), shared with the
    directive bodies parsed recursively."""
    styles = [] if styles is None else styles
    blocks: list[tuple] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            i += 1
            continue
        indent = _indent(line)
        # Headings: overline + title + underline, or title + underline.
        if _ADORNMENT.match(stripped) and i + 2 < n and lines[i + 1].strip() and _ADORNMENT.match(lines[i + 2].strip()):
            style = ("over", stripped[0])
            styles.append(style) if style not in styles else None
            blocks.append(("heading", styles.index(style), inline_text(lines[i + 1].strip())))
            i += 3
            continue
        if i + 1 < n and _ADORNMENT.match(lines[i + 1].strip()) and not _ADORNMENT.match(stripped):
            if len(lines[i + 1].strip()) >= len(stripped) - 1 and _indent(lines[i + 1]) == indent:
                style = ("under", lines[i + 1].strip()[0])
                styles.append(style) if style not in styles else None
                blocks.append(("heading", styles.index(style), inline_text(stripped)))
                i += 2
                continue
        # Explicit markup: directives, comments, labels, footnotes.
        if stripped.startswith(".."):
            end = _block_end(lines, i + 1, indent)
            directive = _DIRECTIVE.match(stripped)
            if directive and directive.group(1) in PROSE_DIRECTIVES:
                blocks += _directive_blocks(directive.group(1), directive.group(2), lines[i + 1 : end], styles)
            i = end
            continue
        if _TABLE.match(stripped) or stripped.startswith(">>>"):
            while i < n and lines[i].strip():
                i += 1
            continue
        if _ADORNMENT.match(stripped):  # a transition line
            i += 1
            continue
        # A paragraph (a list or a definition list included): the following non-blank lines; list items become
        # sentences of it.
        start, items = i, [[]]
        while i < n and lines[i].strip() and not (i > start and lines[i].strip().startswith(".. ")):
            if i > start and _BULLET.match(lines[i]):
                items.append([])
            items[-1].append(lines[i].strip())
            i += 1
        if _FIELD.match(items[0][0]):  # a field list (":Author: ...", ":Release: ..."): metadata, not prose
            continue
        parts = [_BULLET.sub("", " ".join(item)).strip() for item in items]
        if len(parts) > 1:
            parts = [part if part.endswith((".", ":", ";", "!", "?")) else part + "." for part in parts if part]
        text = " ".join(parts)
        if text.endswith("::"):  # a literal block follows: drop it ("x::" -> "x:", "x ::" -> "x", "::" -> "")
            i = _block_end(lines, i, indent)
            head = text[:-2]
            text = "" if not head.strip() else head.rstrip() if head.endswith(" ") else head + ":"
        if text.strip():
            cleaned = inline_text(text)
            if cleaned:
                blocks.append(("paragraph", cleaned))
    return blocks


def _directive_blocks(name: str, argument: str, body: list[str], styles: list) -> list[tuple]:
    body = _dedent(body)
    if name not in INLINE_ARGUMENT and name not in VERSION_WORDS and name not in TEXT_BODY:
        # A signature directive: its head (continued signature lines, options) runs to the first blank line.
        while body and body[0].strip():
            body = body[1:]
    while body and (not body[0].strip() or _OPTION.match(body[0].strip())):
        body = body[1:]
    inner = parse_rst(body, styles)
    lead = ""
    if name in VERSION_WORDS:  # ".. versionchanged:: 3.5 The full ..." / ".. deprecated-removed:: 3.6 3.12"
        words = VERSION_WORDS[name]
        parts = argument.split(None, words.count("{}"))
        versions, rest = parts[: words.count("{}")], parts[words.count("{}") :]
        versions += ["?"] * (words.count("{}") - len(versions))
        lead = f"{words.format(*versions)} {inline_text(' '.join(rest))}".strip()
    elif name in INLINE_ARGUMENT and argument:
        lead = inline_text(argument)
    if lead:
        if inner and inner[0][0] == "paragraph":
            inner[0] = ("paragraph", f"{lead} {inner[0][1]}")
        else:
            inner.insert(0, ("paragraph", lead))
    return [block for block in inner if block[0] == "paragraph"] if name != "only" else inner


def documents_of(path: Path, relative: str) -> list[dict]:
    """The documents of one source file: split at its two top heading levels."""
    lines = path.read_text(encoding="utf-8", errors="replace").expandtabs(8).splitlines()
    blocks = parse_rst(lines)
    documents, title, paragraphs = [], relative, []

    def flush():
        if paragraphs:
            documents.append({"id": f"{relative}#{len(documents)}", "title": title, "text": "\n\n".join(paragraphs)})

    for block in blocks:
        if block[0] == "heading" and block[1] < 2:
            flush()
            title, paragraphs = f"{relative}: {block[2]}", []
        elif block[0] == "paragraph":
            paragraphs.append(block[1])
    flush()
    return documents


def package_version(name: str = "python3.11-doc") -> str | None:
    try:
        done = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


def corpus_statistics(path: Path) -> dict:
    """What the corpus reader keeps with the papers' filters (Punkt sentences; 20 / 60 / 200 characters)."""
    from as2hub.data_collators import load_documents

    documents, stats = load_documents(str(path))
    paragraphs = [p for doc in documents["paragraphs"] for p in doc]
    return {
        **stats.as_dict(),
        "paragraphs_with_3_or_more_sentences": sum(len(p) >= 3 for p in paragraphs),
        "documents_with_2_or_more_paragraphs": sum(len(doc) >= 2 for doc in documents["paragraphs"]),
        "mean_sentences_per_paragraph": sum(map(len, paragraphs)) / max(len(paragraphs), 1),
        "mean_paragraphs_per_document": len(paragraphs) / max(len(documents), 1),
    }


def build(source: Path, output: Path, with_statistics: bool = True) -> dict:
    files = sorted(p for p in source.rglob("*.rst.txt") if p.relative_to(source).as_posix() not in EXCLUDED)
    if not files:
        raise FileNotFoundError(f"no *.rst.txt under {source}: install the sources with {INSTALL_HINT}")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    documents = paragraphs = characters = 0
    with gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for path in files:
            for document in documents_of(path, path.relative_to(source).as_posix()):
                handle.write(json.dumps(document, ensure_ascii=False) + "\n")
                documents += 1
                paragraphs += document["text"].count("\n\n") + 1
                characters += len(document["text"])
    os.replace(tmp, output)
    stats = {
        "source": str(source),
        "package": "python3.11-doc",
        "package_version": package_version(),
        "excluded": list(EXCLUDED),
        "output": str(output),
        "files": len(files),
        "source_bytes": sum(p.stat().st_size for p in files),
        "documents_written": documents,
        "paragraphs_written": paragraphs,
        "text_characters": characters,
        "output_bytes_gzip": output.stat().st_size,
    }
    if with_statistics:
        stats["reader"] = corpus_statistics(output)
    stats_path = output.with_name(output.name.removesuffix(".gz").removesuffix(".jsonl") + ".stats.json")
    stats_path.write_text(json.dumps(stats, indent=2) + "\n")
    stats["stats_file"] = str(stats_path)
    return stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the _sources folder of the HTML docs")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSONL (gzip) to write")
    parser.add_argument("--no_statistics", action="store_true", help="skip the corpus reader's counts (faster)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        print(f"error: {args.source} not found: install the Python documentation with {INSTALL_HINT}", file=sys.stderr)
        return 2
    try:
        stats = build(args.source, args.output, not args.no_statistics)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

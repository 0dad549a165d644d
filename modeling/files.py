"""Writing files so that nothing is ever half-written: a temporary file (or folder) first, then an atomic rename.

write_json_atomic("outputs/run/all_results.json", {"eval_map": 0.81})
with staged_folder("outputs/run") as staging:
    model.save_pretrained(staging)
"""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path


def write_json_atomic(path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=float) + "\n")


def write_text_atomic(path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)  # NamedTemporaryFile creates 0600; results are meant to be shared
    os.replace(handle.name, path)


# Moved last, so that the folder never pairs a new config.json with the previous run's weights mid-move.
_LAST = ("config.json",)


def _move_into(staging: Path, output_dir: Path) -> None:
    """Rename every item of ``staging`` into ``output_dir`` (replacing what is there), ``config.json`` last."""
    for item in sorted(staging.iterdir(), key=lambda path: path.name in _LAST):
        target = output_dir / item.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(item, target)


@contextlib.contextmanager
def staged_folder(output_dir):
    """Write a model folder's files into a hidden staging folder inside ``output_dir``; they replace the folder's
    files only when the block ends without an error (a crash or an exception while saving leaves the previous model
    intact and the staging folder removed).

    Example::

        with staged_folder("outputs/run") as staging:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output_dir, prefix=".staging-"))
    try:
        yield staging
        _move_into(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

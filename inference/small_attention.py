"""Attention within short rows on the CPU, in one C call per layer: the unpadded ranking pass's kernel.

One question per call, a ranker's pairs are short (WikiQA: 38 tokens on average), and PyTorch's CPU attention costs
about 12 us per (pair, head) at that length whatever the work (about 1 us): one question's attention took as long as
all its linear layers (``inference/BACKENDS.md``). ``small_attention.c`` computes every pair and head of a packed
``(tokens, 3 * hidden)`` query/key/value matrix in one call, in fp32 vectors (bf16 in and out where the pass is bf16).
:mod:`as2hub.inference.unpadded` uses it on the CPU with one torch thread (a service ranking one question per call;
with more threads PyTorch's kernel runs each call's heads in parallel and stays), see ``unpadded.ROW_ATTENTION``.

The C file is compiled once per machine, with the C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) and
``-O3 -march=native``, into ``$AS2HUB_KERNEL_CACHE`` (default ``~/.cache/as2hub/kernels``), under a name that hashes
the source, the compiler, the flags and the CPU (a library built for one CPU is never loaded on another); the build
writes a temporary file and renames it, so a crash or a concurrent build never leaves a partial library. Without a
compiler, or when the build fails, :func:`library` logs why once and returns ``None``, and the pass keeps PyTorch's
kernel.

Example:
    >>> import torch
    >>> from as2hub.inference import small_attention
    >>> qkv = torch.randn(7, 3 * 64)  # two pairs of 3 and 4 tokens, 2 heads of 32
    >>> out = small_attention.attend_rows(qkv, [3, 4], heads=2, scale=32**-0.5)  # doctest: +SKIP
    >>> out.shape  # doctest: +SKIP
    torch.Size([7, 64])
"""

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

from as2hub.inference.backends import cpu_features

logger = logging.getLogger("as2hub.backends")

SOURCE = Path(__file__).with_name("small_attention.c")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared")
DTYPES = {torch.float32: "as2hub_attend_f32", torch.bfloat16: "as2hub_attend_bf16"}
# the C function's argument types: q, q_stride, k, v, kv_stride, out, out_stride, lengths, pairs, heads, head_size,
# scale, first_only
_ARGTYPES = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
_ARGTYPES += [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_float]
_ARGTYPES += [ctypes.c_int]


class SmallAttentionError(RuntimeError):
    """The kernel was asked for (``unpadded.ROW_ATTENTION = "kernel"``) and cannot run here; the message says why."""


def cache_dir() -> Path:
    """Where built kernels are kept: ``$AS2HUB_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/as2hub/kernels`` (default
    ``~/.cache``)."""
    if os.environ.get("AS2HUB_KERNEL_CACHE"):
        return Path(os.environ["AS2HUB_KERNEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "as2hub" / "kernels"


def compiler(variable: str = "CC", names: tuple[str, ...] = ("cc", "gcc", "clang")) -> str | None:
    """The C compiler: ``$CC`` (as given: a missing one is reported, not replaced), else ``cc``, ``gcc`` or
    ``clang`` on the ``PATH``; another kind by its variable and names (:func:`~as2hub.inference.cpu_ops.cxx_compiler`)."""
    if os.environ.get(variable):
        return os.environ[variable]
    return next((path for name in names if (path := shutil.which(name))), None)


def _compiler_version(cc: str) -> str:
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "unknown"


def build(
    cc: str | None = None,
    directory: Path | None = None,
    flags: tuple[str, ...] = FLAGS,
    source: Path = SOURCE,
    link: tuple[str, ...] = (),
) -> Path:
    """Compile ``small_attention.c`` (or another of as2hub's C files, ``source``: :mod:`as2hub.inference.int8`'s; or
    its C++ one, :mod:`as2hub.inference.cpu_ops`') for this machine, or return the library already built: its path.
    ``flags``: the compiler's (default :data:`FLAGS`; e.g. ``-march=x86-64-v3`` for AVX2 only); ``link``: what follows
    the source on the command line (libraries, linker options). Raises :class:`SmallAttentionError` naming the compiler
    and its message when there is none or it fails."""
    cc = cc or compiler()
    if not cc:
        raise SmallAttentionError("no C compiler found (set $CC, or install cc, gcc or clang)")
    code = Path(source).read_bytes()
    cpu = cpu_features()
    key = hashlib.sha256(
        b"\0".join(
            [code, cc.encode(), _compiler_version(cc).encode(), " ".join(flags).encode(), cpu.model.encode()]
            + [" ".join(sorted(cpu.flags)).encode()]
            + ([" ".join(link).encode()] if link else [])
        )
    ).hexdigest()[:16]
    directory = Path(directory or cache_dir())
    target = directory / f"{Path(source).stem}_{key}.so"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{Path(source).stem}_", suffix=".so", dir=directory)
    os.close(handle)
    try:
        done = subprocess.run(
            [cc, *flags, "-o", partial, str(source), *link], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.SubprocessError) as error:
        os.unlink(partial)
        raise SmallAttentionError(f"the C compiler {cc!r} could not run: {error}") from error
    if done.returncode != 0:
        os.unlink(partial)
        message = (done.stderr or done.stdout).strip().splitlines()
        raise SmallAttentionError(
            f"the C compiler {cc!r} failed on {Path(source).name} (exit {done.returncode}): {' | '.join(message[-3:])}"
        )
    os.replace(partial, target)
    logger.info("built %s with %s", target, cc)
    return target


def load(path: Path) -> ctypes.CDLL:
    """A built library, loaded, its entry points typed."""
    lib = ctypes.CDLL(str(path))
    for name in DTYPES.values():
        function = getattr(lib, name)
        function.restype, function.argtypes = ctypes.c_int, _ARGTYPES
    return lib


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The built kernel, loaded (once per process); ``None``, with a warning saying why, where it cannot be built or
    loaded."""
    try:
        return load(build())
    except (SmallAttentionError, OSError) as error:
        logger.warning("small_attention: unavailable, the unpadded pass keeps PyTorch's attention kernel (%s)", error)
        return None


def supports(tensor: torch.Tensor, head_size: int) -> bool:
    """The kernel computes this input: a CPU fp32 or bf16 matrix whose rows are contiguous, heads of a size that is a
    multiple of 16."""
    return (
        tensor.device.type == "cpu"
        and tensor.dtype in DTYPES
        and tensor.dim() == 2
        and tensor.stride(1) == 1
        and head_size % 16 == 0
    )


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    lengths: torch.Tensor,
    heads: int,
    scale: float,
    first_only: bool = False,
    lib: ctypes.CDLL | None = None,
) -> torch.Tensor:
    """Attention within each row of packed pairs (``lengths``: an int64 tensor of the pairs' token counts, the pairs one
    after the other): ``key`` and ``value`` ``(tokens, heads * head_size)`` (views with contiguous rows, e.g. slices of
    one projection), ``query`` the same, or with ``first_only`` one row per pair (its first token's query). Returns the
    context, ``(tokens, hidden)`` (zero at rows past the pairs' tokens), or
    ``(pairs, hidden)`` with ``first_only``. ``lib``: a :func:`load`-ed build (default :func:`library`). Raises
    :class:`SmallAttentionError` where the kernel is unavailable."""
    lib = lib or library()
    if lib is None:
        raise SmallAttentionError("the small_attention kernel is unavailable here (the log says why)")
    width = key.shape[1]
    if (
        not all(supports(t, width // heads) for t in (query, key, value))
        or len({query.dtype, key.dtype, value.dtype}) > 1
    ):
        raise SmallAttentionError(
            f"small_attention computes CPU fp32 or bf16 rows with heads of a multiple of 16 (got {query.dtype}, "
            f"head size {width // heads} on {query.device})"
        )
    if key.stride(0) != value.stride(0):
        raise SmallAttentionError("keys and values must share their row stride (slices of one projection)")
    lengths = lengths.to(device="cpu", dtype=torch.int64).contiguous()
    out = query.new_empty(lengths.numel() if first_only else query.shape[0], width)
    if not first_only:  # the packed matrix's extra rows: the kernel writes the pairs' tokens only
        out[int(lengths.sum()) :].zero_()
    status = getattr(lib, DTYPES[query.dtype])(
        query.data_ptr(),
        query.stride(0),
        key.data_ptr(),
        value.data_ptr(),
        key.stride(0),
        out.data_ptr(),
        out.stride(0),
        lengths.data_ptr(),
        lengths.numel(),
        heads,
        width // heads,
        scale,
        int(first_only),
    )
    if status:
        raise SmallAttentionError(f"small_attention failed ({'out of memory' if status == 1 else f'status {status}'})")
    return out


def attend_rows(qkv: torch.Tensor, lengths, heads: int, scale: float) -> torch.Tensor:
    """:func:`attend` on one ``(tokens, 3 * hidden)`` projection (queries, keys, values side by side, as the unpadded
    pass computes them), every token's query: ``(tokens, hidden)``, zero past the pairs' tokens."""
    width = qkv.shape[1] // 3
    lengths = torch.as_tensor(lengths, dtype=torch.int64)
    return attend(qkv[:, :width], qkv[:, width : 2 * width], qkv[:, 2 * width :], lengths, heads, scale)

"""The CPU steps of the torch-int8 unpadded pass as C++ operators (``as2hub_cpu::...``): no Python between the steps.

The pass's steps between its int8 products (:func:`~as2hub.inference.int8.quantize_rows`,
:func:`~as2hub.inference.int8.gelu_requantize`, :func:`~as2hub.inference.int8.rescale_norm`) and its attention
(:func:`~as2hub.inference.unpadded.rowwise_attention`, :func:`~as2hub.inference.unpadded.first_token_attention`) are
Python custom operators that call C kernels through ctypes. ``cpu_ops.cpp`` wraps the same kernels as C++ operators of
the same names in the ``as2hub_cpu`` namespace, built once per machine with the C++ compiler against this torch (about
25 s; cached beside the C kernels, :func:`~as2hub.inference.small_attention.cache_dir`). Where they load, the pass
calls them instead (:func:`step`), and a compiled pass (``Ranker.from_pretrained(..., backend="torch-int8",
unpadded=True, torch_compile=True)``) writes its wrapper in C++ (inductor's ``cpp_wrapper``): a question's scoring
then runs no Python between its kernels. Measured on the AVX-512 EPYC (1 thread, 80 WikiQA dev questions, best of 5
passes, two interleaved pairs, 2026-11-30; inference/BACKENDS.md): 30.7-31.3 ms a question against 33.8-34.7 with the
Python operators (``AS2HUB_CPU_OPS=0``).

Each C++ operator computes what its Python operator computes where that one takes the C kernel (one torch thread,
fp32 rows, heads of a multiple of 16) and hands any other call to the Python operator, so the results are the
kernels' bit for bit. Where there is no C++ compiler, or the build fails, the pass keeps the Python operators (a
warning says why); ``AS2HUB_CPU_OPS=0`` keeps them too.

    >>> from as2hub.inference import cpu_ops
    >>> cpu_ops.library()  # doctest: +SKIP
    True
    >>> cpu_ops.step("gelu_requantize", int8.gelu_requantize)  # doctest: +SKIP
    <OpOverload(op='as2hub_cpu.gelu_requantize', overload='default')>
"""

import logging
import os
from pathlib import Path

import torch

from as2hub.inference import small_attention

logger = logging.getLogger("as2hub.backends")

SOURCE = Path(__file__).with_name("cpu_ops.cpp")
NAMESPACE = "as2hub_cpu"
# the operators' schemas: those of the Python operators of the same names (as2hub::...)
SCHEMAS = {
    "quantize_rows": "(Tensor rows, Tensor? smooth=None, int rotate=0) -> (Tensor, Tensor, Tensor)",
    "gelu_requantize": "(Tensor total, Tensor scale, Tensor zero, Tensor weight_sum, Tensor weight_scale, Tensor bias, "
    "Tensor? smooth=None, int rotate=0) -> (Tensor, Tensor, Tensor)",
    "rescale_norm": "(Tensor total, Tensor scale, Tensor zero, Tensor weight_sum, Tensor weight_scale, Tensor bias, "
    "Tensor residual, Tensor norm_weight, Tensor norm_bias, float eps, Tensor? smooth=None, int rotate=0) "
    "-> (Tensor, Tensor, Tensor, Tensor)",
    "rowwise_attention": "(Tensor qkv, Tensor pattern, int heads, float scale) -> Tensor",
    "first_token_attention": "(Tensor query, Tensor keys_values, Tensor index, Tensor pattern, int heads, float scale) "
    "-> Tensor",
}
_LIBRARY = torch.library.Library(NAMESPACE, "DEF")
for _name, _schema in SCHEMAS.items():
    _LIBRARY.define(_name + _schema)


def register_fake(name: str, shapes) -> None:
    """The output shapes of ``as2hub_cpu::<name>`` for compiled passes: ``shapes``, the Python operator's own."""
    torch.library.register_fake(f"{NAMESPACE}::{name}", shapes, lib=_LIBRARY)


def cxx_compiler() -> str | None:
    """The C++ compiler: ``$CXX`` (as given), else ``c++``, ``g++`` or ``clang++`` on the ``PATH``."""
    return small_attention.compiler("CXX", ("c++", "g++", "clang++"))


def build(directory: Path | None = None) -> Path:
    """``cpu_ops.cpp`` compiled for this machine and this torch, linked with the C kernels
    (:func:`~as2hub.inference.small_attention.build`, each once): the library's path. Raises
    :class:`~as2hub.inference.small_attention.SmallAttentionError` where a compiler is missing or fails."""
    from torch.utils import cpp_extension

    cxx = cxx_compiler()
    if not cxx:
        raise small_attention.SmallAttentionError("no C++ compiler found (set $CXX, or install c++, g++ or clang++)")
    kernels = [
        small_attention.build(directory=directory, source=source)
        for source in (Path(__file__).with_name("int8_rows.c"), small_attention.SOURCE)
    ]
    torch_lib = Path(torch.__file__).parent / "lib"
    flags = (
        *small_attention.FLAGS,
        "-std=c++17",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DAS2HUB_TORCH={torch.__version__}",  # the headers' version: part of the cache key
        *(f"-I{path}" for path in cpp_extension.include_paths()),
    )
    link = (*map(str, kernels), f"-L{torch_lib}", "-lc10", "-ltorch_cpu", "-ltorch", f"-Wl,-rpath,{torch_lib}")
    return small_attention.build(cc=cxx, directory=directory, flags=flags, source=SOURCE, link=link)


_LOADED: bool | None = None  # library()'s answer, once known: a plain global, so that compiled passes read it


def library() -> bool:
    """Whether the C++ operators are built and loaded in this process (decided once, at the first call: before a pass
    is compiled, :class:`~as2hub.inference.compiled.CompiledRankerModel` asks); ``False``, with a warning saying why,
    where they cannot be, or where ``AS2HUB_CPU_OPS=0``."""
    global _LOADED
    if _LOADED is None:
        _LOADED = _load()
    return _LOADED


def forget() -> None:
    """Decide :func:`library` again at its next call (a library already loaded stays loaded)."""
    global _LOADED
    _LOADED = None


def _load() -> bool:
    if os.environ.get("AS2HUB_CPU_OPS", "1") == "0":
        return False
    try:
        torch.ops.load_library(str(build()))
    except (small_attention.SmallAttentionError, OSError, RuntimeError) as error:
        logger.warning("cpu_ops: unavailable, torch-int8 keeps its Python operators (%s)", error)
        return False
    return True


def step(name: str, python_op, tensor: torch.Tensor | None = None):
    """The C++ operator ``as2hub_cpu::<name>`` where the C++ operators load here (and ``tensor``, the step's input
    where given, is on the CPU: they have CPU kernels only), else ``python_op`` (the pass's Python operator of that
    name, e.g. :func:`~as2hub.inference.int8.gelu_requantize`). Either computes the same; the caller decides whether
    the kernel path applies at all (``python_op`` where its settings say "torch")."""
    if (tensor is not None and tensor.device.type != "cpu") or not library():
        return python_op
    return getattr(getattr(torch.ops, NAMESPACE), name).default

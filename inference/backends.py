"""Which scoring backend a ranker runs on: the machine's CPU features and GPU, the installed extras, and
``backend="auto"``, the choice of the fastest correct one.

Backends (the names :meth:`~as2hub.inference.ranking.Ranker.from_pretrained` and
:meth:`~as2hub.inference.joint_ranking.JointRanker.from_pretrained` take):

============== ======================================================= ================================================
name           what runs                                               needs
============== ======================================================= ================================================
``torch``      the torch model, fp32 (the reference scores)            nothing
``torch-bf16`` the torch model with bfloat16 weights                   bf16 hardware to be fast (``avx512_bf16`` or
                                                                       ``amx_bf16``); elsewhere it runs, emulated, slowly
``torch-int8`` the torch model with int8 encoder products: 7-bit       nothing (a CPU backend; fast with VNNI / AMX,
               weights per channel, activations per token             best with ``unpadded=True, torch_compile=True``)
               (:mod:`~as2hub.inference.int8`)
``onnx``       ONNX Runtime on ``onnx/model.onnx`` (fp32);             ``pip install "as2hub[onnx]"`` and
               ``quantize="int8"``: ``onnx/model_qint8_dynamic.onnx``  ``as2hub-export-onnx PATH [--quantize int8]``
``onnx-int8``  the same as ``backend="onnx", quantize="int8"``:        as ``onnx``
               per-token activation scales, batch-invariant scores
``cuda-fp16``  the torch model on the GPU, float16 weights             a CUDA build of torch and a GPU
``cuda-bf16``  the torch model on the GPU, bfloat16 weights            as ``cuda-fp16``, and a GPU with bf16
                                                                       (Ampere or newer)
``auto``       the first of :func:`auto_order` this machine can run    nothing (falls back to ``torch``)
============== ======================================================= ================================================

ONNX Runtime's int8 kernels (MLAS) pick the CPU's integer dot-product instructions themselves: ``vpmaddubsw`` on AVX2,
VNNI (``avx512_vnni`` / ``avx_vnni``) and AMX (``amx_int8``) where present, so one int8 graph serves every x86 CPU (its
weights use 7 bits, so that ``vpmaddubsw``'s int16 sums cannot saturate: ``onnx_export.quantize_int8``).

``auto`` skips a candidate only for the expected reasons it cannot run here (:data:`NOT_AVAILABLE_HERE`: no GPU or
no native bf16 on it, the ``onnx`` extra not installed, no exported graph, a graph exported from other weights or by
an older as2hub) and then logs a WARNING naming each reason; the pick is logged in one line on the
``as2hub.backends`` logger (INFO when it is the first choice). Any other failure of a fast path (a corrupt graph, a
runtime error, CUDA out of memory) is raised, not hidden behind a silent fall-back to another precision. An
explicitly named backend that cannot run raises :class:`BackendUnavailableError` (or ``ImportError`` for a missing
extra), saying why and what to install or run.

    >>> from as2hub.inference.backends import CpuFeatures, auto_order
    >>> auto_order(CpuFeatures("AMD EPYC", frozenset({"avx2", "fma"})), cuda=False)
    ('onnx-int8', 'onnx', 'torch')
    >>> auto_order(CpuFeatures("Intel Xeon", frozenset({"avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"})), cuda=False)
    ('onnx-int8', 'onnx', 'torch')
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, runtime_checkable

logger = logging.getLogger("as2hub.backends")

# name -> (engine, precision); engine "torch" runs the torch model, "onnx" an ONNX Runtime session.
BACKENDS = {
    "torch": ("torch", "fp32"),
    "torch-bf16": ("torch", "bf16"),
    "torch-int8": ("torch", "int8"),  # fp32 model, int8 encoder products, per-token scales (inference/int8.py)
    "onnx": ("onnx", None),  # fp32, or int8 with quantize="int8" (the historical spelling)
    "onnx-int8": ("onnx", "int8"),  # per-token activation scales: batch-invariant scores
    "cuda-fp16": ("cuda", "fp16"),
    "cuda-bf16": ("cuda", "bf16"),
}
BACKEND_CHOICES = ("auto", *BACKENDS)

# The CPU flags (as /proc/cpuinfo spells them) that decide the choice, recorded with every benchmark figure.
RELEVANT_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
)

INSTALL = {
    "onnx": 'pip install "as2hub[onnx]"  (onnxruntime and onnx)',
    "cuda": "a CUDA build of torch (https://pytorch.org/get-started/locally/) on a machine with an NVIDIA GPU",
}


class BackendUnavailableError(RuntimeError):
    """An explicitly requested backend that this machine cannot run (the message says why and what to do)."""


@runtime_checkable
class ScoringModel(Protocol):
    """What a scoring backend provides to :class:`~as2hub.inference.ranking.Ranker` and
    :class:`~as2hub.inference.joint_ranking.JointRanker`: a torch model (``PreTrainedModel``) has it, and so has
    :class:`~as2hub.inference.onnx_runtime.OnnxRankerModel`. A new backend is a class with these members and a row of
    :data:`BACKENDS`. ``pad_to_multiple_of`` is optional (torch pads to 8; ``None`` pads exactly)."""

    config: Any  # the ranker's PretrainedConfig: type_vocab_size, contextual, label2id, the joint slot layout
    device: Any  # torch.device the inputs go to

    def eval(self) -> ScoringModel: ...

    def __call__(self, **inputs) -> Any:  # an output with ``.logits``
        ...

    def logits_to_scores(self, logits) -> Any:  # logits -> the probability that each candidate is correct
        ...


class LoadedModel(NamedTuple):
    """A ranker's scoring model, the folder its tokenizer is read from, and the backend name that runs it."""

    model: ScoringModel
    folder: Any
    backend: str


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's model name and its instruction-set flags (``/proc/cpuinfo``; empty where it cannot be read)."""

    model: str
    flags: frozenset

    @property
    def bf16_hardware(self) -> bool:
        """bf16 dot products in hardware: AVX512-BF16 or AMX-BF16 (else bf16 matmuls are emulated in fp32)."""
        return bool(self.flags & {"avx512_bf16", "amx_bf16"})

    @property
    def int8_dot_product(self) -> str | None:
        """The fastest int8 dot-product instructions: ``"amx"``, ``"vnni"``, ``"avx2"`` (``vpmaddubsw``) or None."""
        if "amx_int8" in self.flags:
            return "amx"
        if self.flags & {"avx512_vnni", "avx_vnni"}:
            return "vnni"
        if "avx2" in self.flags:
            return "avx2"
        return None

    def relevant_flags(self) -> list[str]:
        return [flag for flag in RELEVANT_FLAGS if flag in self.flags]

    def describe(self) -> str:
        return f"{self.model} [{' '.join(self.relevant_flags()) or 'no AVX2/AVX-512/AMX flags'}]"


def parse_cpuinfo(text: str) -> CpuFeatures:
    """:class:`CpuFeatures` from the text of ``/proc/cpuinfo`` (the first processor's model name and flags)."""
    model, flags = "unknown", frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return CpuFeatures(model, flags)


@lru_cache(maxsize=1)
def cpu_features() -> CpuFeatures:
    """This machine's CPU (cached). Outside Linux the flags are unknown (empty): ``auto`` then stays off bf16."""
    try:
        with open("/proc/cpuinfo") as handle:
            return parse_cpuinfo(handle.read())
    except OSError:
        return CpuFeatures(platform.processor() or platform.machine() or "unknown", frozenset())


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def onnx_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def cuda_bf16_native() -> bool:
    """The GPU computes bf16 natively (Ampere or newer): a T4 or V100 only emulates it, slowly."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def auto_order(
    cpu: CpuFeatures | None = None, cuda: bool | None = None, cuda_bf16: bool | None = None
) -> tuple[str, ...]:
    """The backends ``auto`` tries, fastest first, for a machine.

    GPU: bf16 where the GPU computes it natively (``cuda_bf16``; default :func:`cuda_bf16_native`), else fp16.

    CPU: only backends whose scores do not depend on the batch (a request's scores must not move with the traffic it
    is batched with): int8 with per-token activation scales (ONNX Runtime, whose kernels use VNNI / AMX where
    present), then fp32 ONNX, then torch fp32. ``torch-bf16`` is never picked: it was faster than int8 on an AMX Xeon
    (1.3-1.5x, 2026-11-26, ``inference/BACKENDS.md``) but its scores move with the batch (bf16 rounds every partial sum,
    and padding changes the reductions); ask for it by name where that trade is wanted.
    """
    del cpu  # the CPU order is the same on every flag set since 2026-11-26 (kept: callers pass it)
    cuda = cuda_available() if cuda is None else cuda
    order: list[str] = []
    if cuda:
        cuda_bf16 = cuda_bf16_native() if cuda_bf16 is None else cuda_bf16
        order += ["cuda-bf16", "cuda-fp16"] if cuda_bf16 else ["cuda-fp16"]
    order += ["onnx-int8", "onnx", "torch"]
    return tuple(order)


def normalize(backend: str, quantize: str | None) -> tuple[str, str | None]:
    """``(name, quantize)`` with the historical spelling ``("onnx", "int8")`` and ``"onnx-int8"`` made one."""
    if backend not in BACKEND_CHOICES:
        raise ValueError(f"backend must be one of {', '.join(repr(b) for b in BACKEND_CHOICES)}, got {backend!r}")
    if BACKENDS.get(backend, (None, None))[0] == "onnx" and backend != "onnx":
        precision = BACKENDS[backend][1]
        if quantize not in (None, precision):
            raise ValueError(f"backend={backend!r} is {precision}; got quantize={quantize!r}")
        return "onnx", precision
    return backend, quantize


def not_available_here() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "this backend cannot run on this machine or folder" (``auto`` falls back on these
    alone, with a WARNING): no GPU / no native bf16 (:class:`BackendUnavailableError`), the ``onnx`` extra missing
    (``ImportError``), no exported graph (:class:`~as2hub.inference.onnx_runtime.MissingOnnxExportError`), a graph from
    other weights or an older as2hub (:class:`~as2hub.inference.onnx_runtime.StaleOnnxExportError`)."""
    from .onnx_runtime import MissingOnnxExportError, StaleOnnxExportError

    return (BackendUnavailableError, ImportError, MissingOnnxExportError, StaleOnnxExportError)


def check_runnable(name: str, cpu: CpuFeatures | None = None) -> None:
    """Raise :class:`BackendUnavailableError` / ``ImportError`` when backend ``name`` cannot run on this machine."""
    engine, precision = BACKENDS[name]
    if engine == "onnx" and not onnx_available():
        raise ImportError(f"backend {name!r} needs the `onnx` extra, which is not installed: {INSTALL['onnx']}")
    if engine == "cuda":
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise BackendUnavailableError(
                f"backend {name!r} needs a CUDA GPU, and torch.cuda.is_available() is False here (torch "
                f"{torch.__version__}, {build}); install {INSTALL['cuda']}, or use backend='auto' (picks the "
                "fastest CPU backend) or 'torch'"
            )
        if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
            raise BackendUnavailableError(
                f"backend {name!r}: {torch.cuda.get_device_name()} does not compute bfloat16 natively (it needs "
                "Ampere or newer; older GPUs only emulate it, slowly); use backend='cuda-fp16'"
            )


def torch_dtype(name: str):
    import torch

    # torch-int8 keeps an fp32 model: only its encoder's products run on integers (inference/int8.py)
    dtypes = {"fp32": torch.float32, "int8": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    return dtypes[BACKENDS[name][1] or "fp32"]


def describe_machine(cpu: CpuFeatures | None = None) -> str:
    cpu = cpu or cpu_features()
    gpu = ""
    if cuda_available():
        import torch

        gpu = f", GPU {torch.cuda.get_device_name()}"
    return f"CPU {cpu.describe()}{gpu}"

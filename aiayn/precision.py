"""Precision: how numbers are computed, one concept with one validated type (``config.Precision``).

    fp32   everything in 32-bit floats
    bf16   bfloat16 matrix products (fast on recent GPUs, and on CPUs with AVX512-BF16 or AMX where a probe
           measures them faster than fp32: cpu_has_fast_bf16)
    fp16   float16 matrix products (CUDA only; training needs a gradient scaler)
    int8   int8 linear layers, dynamically quantized (CPU inference only; see quantize.py)
    auto   bf16 where the hardware runs it fast, else fp32 (fp16 on CUDA GPUs without bf16)

Training and inference apply it differently, for good reasons:

- training (and validation during training) keeps fp32 master weights and runs the forward pass under
  :func:`autocast` — matrix products in bf16/fp16, LayerNorm, softmax and the loss in fp32;
- inference converts the weights once (:func:`for_inference`): no fp32 copy, no per-call casts.

Any other value is refused with a ``ValueError`` naming it and listing the valid ones.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from typing import TYPE_CHECKING, Any, TypeVar

from .config import PRECISIONS
from .runtime import cpu_flags

if TYPE_CHECKING:          # (imported where used: choosing a precision for CTranslate2 needs no PyTorch)
    import torch

M = TypeVar("M", bound="torch.nn.Module")
TRAINING = ("fp32", "bf16", "fp16")                 # what autocast accepts
HALF = ("bf16", "fp16")                             # the precisions of a torch dtype of their own (dtype)


def dtype(precision: str) -> torch.dtype:
    """The torch dtype of a half precision (bf16, fp16)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def check(precision: str) -> str:
    """``precision`` if it is one of :data:`config.PRECISIONS`, else a clear ``ValueError``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    return precision


def cpu_has_bf16_instructions() -> bool:
    """True when the CPU lists native bf16 matrix instructions (AVX512-BF16 or AMX-BF16)."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


# bf16 counts as fast on a CPU when its matrix products run at least this many times fp32's rate. Where the
# instructions do their work, bf16 ran 2.5x fp32 (a 2-core AMD EPYC with AVX-512 BF16: ~380 against ~150 GFLOP/s);
# on a 2-core Intel Xeon VM that lists AVX-512 BF16 (AMX hidden) oneDNN ran it at 0.54x, and training in bf16 at
# 0.61x (benchmarks/NOTEBOOK.md, benchmarks/results/bf16-probe/bf16-probe-20261127.txt). The flags alone do not tell
# the two apart.
FAST_BF16 = 1.3


def bf16_speedup() -> float:
    """bf16's matrix-product rate over fp32's on this CPU, with this process's threads: (512 x 512) . (512 x 1024),
    the best of 5 runs each, alternating (about 50 ms)."""
    import time

    import torch

    a, b = torch.randn(512, 512), torch.randn(512, 1024)
    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    with torch.no_grad():
        pairs = {t: (a.to(t), b.to(t)) for t in best}
        for x, y in pairs.values():
            x @ y                                        # warm: oneDNN builds its kernel for the shape once
        for _ in range(5):
            for t, (x, y) in pairs.items():
                start = time.perf_counter()
                x @ y
                best[t] = min(best[t], time.perf_counter() - start)
    return best[torch.float32] / best[torch.bfloat16]


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """True when this CPU runs bf16 matrix products fast: it has the instructions (:func:`cpu_has_bf16_instructions`)
    and a probe measures bf16 at :data:`FAST_BF16` x fp32 or more (:func:`bf16_speedup`, once per process).
    ``AIAYN_CPU_BF16=fast`` or ``slow`` decides without measuring (a pinned choice, for runs that must match)."""
    pinned = os.environ.get("AIAYN_CPU_BF16", "").strip().lower()
    if pinned in ("fast", "slow"):
        return pinned == "fast"
    if pinned:
        raise ValueError(f"AIAYN_CPU_BF16={pinned!r}: expected fast or slow (or unset: measured)")
    return cpu_has_bf16_instructions() and bf16_speedup() >= FAST_BF16


def resolve(precision: str, device: torch.device | Any) -> str:
    """The concrete precision for ``device``: ``auto`` becomes bf16 where the hardware runs it fast (CUDA with
    bf16, CPUs with AVX512-BF16/AMX that measure it faster than fp32), fp16 on older CUDA GPUs, else fp32. Impossible
    choices are errors."""
    check(precision)
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("precision=fp16 needs a CUDA GPU (it relies on a gradient scaler); use bf16 or fp32 here")
    if precision == "int8" and device.type != "cpu":
        raise ValueError("precision=int8 (dynamic quantization) runs on CPUs only; use bf16 or fp16 on GPUs")
    if precision == "bf16" and device.type == "cpu" and not cpu_has_fast_bf16():
        if cpu_has_bf16_instructions():
            warnings.warn("precision=bf16 on a CPU whose bf16 matrix products measure no faster than fp32's (it "
                          "lists AVX512-BF16 or AMX, but its kernels do not gain from them here); use precision=fp32 "
                          "(or auto, which picks it), or precision=int8 to translate", stacklevel=2)
        else:
            warnings.warn("precision=bf16 on a CPU without native bf16 (AVX512-BF16 or AMX): PyTorch emulates its "
                          "matrix products, about 100x slower than fp32 here; use precision=fp32 (or auto, which "
                          "picks it), or precision=int8 to translate", stacklevel=2)
    if precision != "auto":
        return precision
    if device.type == "cuda":
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu" and cpu_has_fast_bf16():
        return "bf16"
    return "fp32"


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[None]:
    """Mixed precision for a forward pass over fp32 weights: matmuls in bf16/fp16, sensitive ops in fp32."""
    if precision not in TRAINING:
        raise ValueError(f"autocast precision={precision!r}: expected one of {', '.join(TRAINING)} "
                         "(resolve 'auto' first; int8 is applied to the weights, see for_inference)")
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=dtype(precision))


def for_inference(model: M, precision: str) -> M:
    """``model`` ready to translate in ``precision`` (a concrete one, see :func:`resolve`): converted in place
    to bf16/fp16, or a copy with int8 linear layers (:func:`quantize.int8`); fp32 leaves it as it is."""
    check(precision)
    if precision == "auto":
        raise ValueError("for_inference(precision='auto'): resolve it for the device first (precision.resolve)")
    if precision in HALF:
        return model.to(dtype(precision))
    if precision == "int8":
        from .quantize import int8

        return int8(model)
    return model

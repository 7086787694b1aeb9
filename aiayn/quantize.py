"""int8 inference: every ``nn.Linear`` of a module dynamically quantized (CPU).

Weights are stored as int8 with one scale per tensor; each call quantizes its input to 8 bits on the fly and runs
an int8 matrix product (fbgemm). Without AVX512-VNNI the input gets a 7-bit range (``reduce_range``, as ``torch.ao``
always does on x86): fbgemm's AVX2 kernels add pairs of 8-bit products in 16 bits, which full-range inputs can
overflow. With VNNI the products are added in 32 bits, so the full range is safe and closer to fp32
(:func:`full_range`). What it does to BLEU and speed is measured in the README (Results) and docs/performance.md.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

import torch
from torch import nn

from .runtime import cpu_flags

M = TypeVar("M", bound=nn.Module)


def full_range() -> bool:
    """True when fbgemm can take 8-bit inputs at their full range here: the CPU has AVX512-VNNI (its int8 products
    accumulate in 32 bits). Measured on a 2-core Xeon with it, test_2016_flickr at beam 4: 876 of 1,000 lines as fp32
    translates them against 816 with the 7-bit range, BLEU 36.83 against 36.95 (fp32 36.85), at the same speed
    within the VM's noise (0.95-1.06x; benchmarks/results/int8/int8-range-20261127.txt)."""
    return "avx512_vnni" in cpu_flags()


class Int8Linear(nn.Module):
    """A dynamically quantized linear layer called straight through its kernel (same kernel and output as
    ``torch.ao``'s module, without its per-call Python overhead; benchmarks/NOTEBOOK.md). ``relu``: max(0, .) of the
    output computed by the kernel itself (fbgemm's ``linear_relu_dynamic``: the same numbers, one pass fewer)."""

    def __init__(self, quantized: nn.Module, packed: object, relu: bool = False, reduce_range: bool = True) -> None:
        super().__init__()
        # torch.ao's module, outside the module tree: torch.jit.trace scripts every submodule of what it traces, and
        # torch.ao's took half of a decoder layer's trace (58 -> 28 ms, int8, the demo model; model.TracedSteps)
        self._ao = (quantized,)
        self.packed = packed
        self.relu, self.reduce_range = relu, reduce_range
        # the kernel's C++ entry: the operator's Python wrapper first looks through the arguments for stand-ins of the
        # packed weights that only export makes (FakeScriptObject), ~5 us a call, 17 calls a decoding step. (Nor can
        # torch.compile trace these layers: decode.compile refuses int8, translate.Translator.)
        self.kernel = (torch.ops.quantized.linear_relu_dynamic if relu else torch.ops.quantized.linear_dynamic).default._op

    @property
    def quantized(self) -> nn.Module:
        """torch.ao's dynamically quantized Linear whose packed weights this layer calls (the same output)."""
        return self._ao[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.packed, self.reduce_range)

    def extra_repr(self) -> str:
        q = self.quantized
        return (f"in_features={q.in_features}, out_features={q.out_features}, relu={self.relu}, "
                f"reduce_range={self.reduce_range}")

    def packed_bytes(self) -> int:
        """The bytes of its int8 weight and fp32 bias (they are not parameters, so a model's size must ask)."""
        w, b = self.quantized.weight(), self.quantized.bias()  # type: ignore[operator]
        return w.numel() * w.element_size() + (0 if b is None else b.numel() * b.element_size())


def int8(module: M) -> M:
    """A copy of ``module`` (any ``nn.Module``, on the CPU) whose ``nn.Linear`` layers compute in int8."""
    if any(p.device.type != "cpu" for p in module.parameters()):
        raise ValueError("int8 (dynamic quantization) runs on CPUs only; use bf16 or fp16 on GPUs")
    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:
        raise ValueError(f"precision=int8 uses torch.ao.quantization.quantize_dynamic, which PyTorch "
                         f"{torch.__version__} does not have; use precision=fp32 or bf16") from None
    with warnings.catch_warnings():   # torch.ao's eager quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8)   # a copy
    _call_kernels_directly(quantized, reduce_range=not full_range())
    _fuse_relu(quantized)
    return quantized


def _fuse_relu(module: nn.Module) -> None:
    """Each feed-forward network's ReLU (§3.3, Eq. 2) into its first int8 layer (``Int8Linear(relu=True)``): the same
    output, without a pass over the (rows, d_ff) activations (1.17x that layer at 280 rows, 1.49x at 6,000)."""
    from .model import FeedForward

    for ffn in module.modules():
        if isinstance(ffn, FeedForward) and ffn.act is torch.relu and isinstance(ffn.w1, Int8Linear):
            ffn.register_module("w1", Int8Linear(ffn.w1.quantized, ffn.w1.packed, relu=True,
                                                 reduce_range=ffn.w1.reduce_range))
            ffn.act = nn.Identity()


def _call_kernels_directly(module: nn.Module, reduce_range: bool = True) -> None:
    """Replace each ``torch.ao`` dynamic int8 Linear by an :class:`Int8Linear` around the same packed weights
    (left as they are where a PyTorch version stores them differently), with inputs at a 7-bit range or, where
    ``reduce_range`` is false, the full 8 bits."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            packed = getattr(getattr(child, "_packed_params", None), "_packed_params", None)
            if packed is not None and getattr(child, "version", 0) >= 4 and child._packed_params.dtype == torch.qint8:
                setattr(parent, name, Int8Linear(child, packed, reduce_range=reduce_range))


def weight_bytes(model: nn.Module) -> int:
    """The bytes of a model's weights and buffers as loaded (int8 layers count their packed weights)."""
    tensors = [*model.parameters(), *model.buffers()]
    packed = sum(m.packed_bytes() for m in model.modules() if isinstance(m, Int8Linear))
    return sum(t.numel() * t.element_size() for t in tensors) + packed

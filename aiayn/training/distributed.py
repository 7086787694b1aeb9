"""Data parallelism under ``torchrun``: which process this is, and the few collective operations training needs.

torchrun starts one process per device and sets RANK, WORLD_SIZE and LOCAL_RANK. Each process takes
disjoint batches (batches.TokenBatchSampler), gradients are averaged by DistributedDataParallel, and rank 0
alone writes the run directory. Outside torchrun everything here is a no-op for a world of one.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Distributed:
        env = os.environ
        return cls(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))

    @property
    def main(self) -> bool:
        """Rank 0: the process that writes the run directory and the logs."""
        return self.rank == 0

    def setup(self, device: torch.device) -> torch.device:
        """Join the process group (NCCL on GPUs, gloo on CPUs); returns this process's device."""
        if self.world == 1:
            return device
        if device.type == "cuda":
            device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return device

    def wrap(self, module: nn.Module, device: torch.device) -> nn.Module:
        """``module`` wrapped in DistributedDataParallel (gradients averaged across processes), or as it is."""
        if self.world == 1:
            return module
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)

    def no_sync(self, module: nn.Module, sync: bool) -> contextlib.AbstractContextManager[None]:
        """Skip DDP's gradient exchange for this backward pass unless ``sync`` (gradient accumulation)."""
        if sync or self.world == 1:
            return contextlib.nullcontext()
        return module.no_sync()  # type: ignore[operator]

    def sum(self, n: int, device: torch.device) -> int:
        """``n`` summed over all processes."""
        if self.world == 1:
            return n
        t = torch.tensor([n], dtype=torch.long, device=device)
        dist.all_reduce(t)
        return int(t)

    def sum_floats(self, values: list[float], device: torch.device) -> list[float]:
        """Each of ``values`` summed over all processes (one collective)."""
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    def from_main(self, x: float, device: torch.device) -> float:
        """Rank 0's value of ``x``, on every process."""
        if self.world == 1:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.broadcast(t, 0)
        return float(t)

    def gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every process's ``t`` (same shape and type everywhere), in rank order."""
        if self.world == 1:
            return [t]
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t.contiguous())
        return out

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        """Wait for every process, then leave the process group. A process that exits with its group still open can
        have its peer's connection close under gloo's threads at interpreter shutdown, which aborts it (SIGABRT)."""
        if self.world > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

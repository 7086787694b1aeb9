"""Optimizer and learning rate (paper §5.3).

Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, and the rate

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

which grows linearly for the first ``warmup`` steps and then decays with the inverse square root
of the step. ``step`` counts optimizer updates from 1; at step 0 (before any update) the rate is 0,
never a division by zero.

Not in the paper: ``cooldown`` brings the rate linearly down to 0 over the last fraction of a run of
known length (a step, epoch or time budget). On a fixed budget the model then ends at a low-noise point
instead of mid-descent, which is what checkpoint averaging otherwise approximates.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .config import TrainConfig


def noam_lr(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The §5.3 rate for update number ``step`` (1-based); 0.0 at step 0; no warmup when ``warmup`` is 0."""
    if step <= 0:
        return 0.0
    ramp = step * warmup ** -1.5 if warmup > 0 else float("inf")
    return factor * d_model ** -0.5 * min(step ** -0.5, ramp)


def cooldown_factor(progress: float, cooldown: float) -> float:
    """Multiplier on the rate at ``progress`` in [0, 1] of the run: 1 until the last ``cooldown`` fraction,
    then linearly down to 0 at the end. ``cooldown`` 0 = no cooldown (always 1)."""
    if cooldown <= 0:
        return 1.0
    return min(1.0, max(0.0, (1.0 - progress) / cooldown))


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """Adam(beta1, beta2, eps) of §5.3, the fused multi-tensor kernel where PyTorch has one for the device."""
    params = list(params)
    fused = device.type in ("cpu", "cuda")
    return torch.optim.Adam(
        params, lr=0.0, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, fused=fused or None,
    )

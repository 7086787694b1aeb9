"""Checkpoints: safetensors + JSON, written atomically; resume; averaging of the last N (paper §6.1).

A checkpoint is a directory:

    model.safetensors       the weights (tied matrices stored once); never pickled
    checkpoint.json         step, epoch, metrics at save time
    optimizer.safetensors   Adam moments and step counts            (training checkpoints only)
    trainer.json            data position, schedule, early-stopping state, Adam hyperparameters
    rng.safetensors         CPU and CUDA random-number-generator states, of every process of a data-parallel run

It is written with :func:`atomic.atomic_dir`, so a crash (even kill -9) leaves either the previous
checkpoint or the new one, never a mix. Loading cannot run code. Where checkpoints live inside a run
directory is rundir.py's business.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .atomic import atomic_dir

if TYPE_CHECKING:          # (imported where used: finding a run's checkpoints needs no PyTorch)
    import torch

MODEL, META, OPTIM = "model.safetensors", "checkpoint.json", "optimizer.safetensors"
TRAINER, RNG = "trainer.json", "rng.safetensors"


def is_checkpoint(path: Path) -> bool:
    return (path / MODEL).is_file() and (path / META).is_file()


def parameter_count(path: Path) -> int:
    """The model's parameters, counted from the shapes in checkpoint ``path``'s weights file (tied weights are stored
    once, as the model holds them once), without loading them or PyTorch."""
    import math

    from safetensors import safe_open

    with safe_open(str(path / MODEL), "np") as f:
        return sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys())


def rng_state() -> dict[str, torch.Tensor]:
    """This process's random-number-generator states: the CPU's and, with CUDA, the current device's."""
    import torch

    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def save(
    path: str | Path, model: torch.nn.Module, meta: dict[str, Any], optimizer: torch.optim.Optimizer | None = None,
    trainer_state: dict[str, Any] | None = None, rng: list[dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write a checkpoint directory atomically. With ``optimizer``, also everything needed to resume; ``rng``:
    the generator states of every process (rank order), default this process's."""
    from safetensors.torch import save_file, save_model

    with atomic_dir(path) as tmp:
        save_model(model, str(tmp / MODEL))
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        if optimizer is not None:
            state = optimizer.state_dict()
            tensors = {f"{i}.{k}": v.contiguous() for i, s in state["state"].items() for k, v in s.items()}
            save_file(tensors, str(tmp / OPTIM))
            ranks = rng or [rng_state()]
            save_file({f"{k}.rank{r}": v for r, s in enumerate(ranks) for k, v in s.items()}, str(tmp / RNG))
            (tmp / TRAINER).write_text(json.dumps({**(trainer_state or {}), "param_groups": state["param_groups"]},
                                                  indent=2) + "\n")
    return Path(path)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (truncated, damaged, of another model): the message names it."""


def _damaged(file: Path, e: BaseException) -> CheckpointError:
    return CheckpointError(f"{file}: cannot be read ({type(e).__name__}: {str(e).strip()[:200]}); the file is "
                           "truncated or damaged: restore it, or use another checkpoint of the run")


def _json(file: Path) -> dict[str, Any]:
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _damaged(file, e) from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{file}: expected a JSON object, found {type(value).__name__}")
    return value


def _tensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for bad headers and sizes
        raise _damaged(file, e) from None


def load_weights(model: torch.nn.Module, path: str | Path) -> dict[str, Any]:
    """Load a checkpoint's weights into ``model`` (strict); returns its checkpoint.json. A damaged file, or
    weights of another shape than ``model``'s, raise :class:`CheckpointError` naming the file."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    p = Path(path)
    if not is_checkpoint(p):
        raise FileNotFoundError(f"{p} is not a checkpoint (expected {MODEL} and {META})")
    meta = _json(p / META)
    own = model.state_dict()
    try:                                  # the shapes from the header alone: nothing is read twice
        with safe_open(str(p / MODEL), "pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for bad headers
        raise _damaged(p / MODEL, e) from None
    for name, shape in shapes.items():
        if name in own and tuple(own[name].shape) != shape:
            raise CheckpointError(f"{p / MODEL}: {name} has shape {shape}, but the model described by config.json "
                                  f"needs {tuple(own[name].shape)}; the weights belong to another model")
    try:
        missing, unexpected = load_model(model, str(p / MODEL), strict=False)
    except Exception as e:  # noqa: BLE001 - as above
        raise _damaged(p / MODEL, e) from None
    if missing or unexpected:
        raise CheckpointError(f"{p / MODEL} does not fit this model: missing {sorted(missing)[:5]}, "
                              f"unexpected {sorted(unexpected)[:5]}")
    return meta


def load_training_state(path: str | Path, optimizer: torch.optim.Optimizer, rank: int = 0) -> dict[str, Any]:
    """Restore the optimizer and this process's (``rank``) RNG states of a training checkpoint; returns its trainer
    state."""
    import torch

    p = Path(path)
    trainer = _json(p / TRAINER)
    tensors = _tensors(p / OPTIM)
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = value
    try:
        optimizer.load_state_dict({"state": state, "param_groups": trainer.pop("param_groups")})
    except (KeyError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{p / OPTIM}: the optimizer state does not fit this model ({e})") from None
    rng = _tensors(p / RNG)
    if f"cpu.rank{rank}" in rng:
        torch.set_rng_state(rng[f"cpu.rank{rank}"])
        if torch.cuda.is_available() and f"cuda.rank{rank}" in rng:
            torch.cuda.set_rng_state(rng[f"cuda.rank{rank}"])
    elif "cpu" in rng:                  # written before per-process states (one state for every process)
        torch.set_rng_state(rng["cpu"])
        if torch.cuda.is_available():
            cuda = [rng[k] for k in sorted(k for k in rng if k.startswith("cuda"))]
            if cuda:
                torch.cuda.set_rng_state_all(cuda)
    else:
        raise CheckpointError(f"{p / RNG}: no random-number-generator state for process {rank}")
    return trainer


def average(paths: list[Path], out: str | Path, meta: dict[str, Any]) -> Path:
    """Write to ``out`` a checkpoint whose weights are the element-wise mean of ``paths`` (paper §6.1 averages
    the last 5 checkpoints of base models, the last 20 of big ones). Means are accumulated in float64."""
    import torch
    from safetensors.torch import load_file, save_file

    if not paths:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for p in paths:
        tensors = load_file(str(Path(p) / MODEL))
        if total and set(tensors) != set(total):
            raise ValueError(f"{p} holds different tensors from {paths[0]}; only checkpoints of one run can be averaged")
        for k, v in tensors.items():
            if k in total and total[k].shape != v.shape:
                raise ValueError(f"{p}: {k} has shape {tuple(v.shape)}, expected {tuple(total[k].shape)}")
            total[k] = total.get(k, torch.zeros(v.shape, dtype=torch.float64)) + v.double()
            dtypes[k] = v.dtype
    with atomic_dir(out) as tmp:
        save_file({k: (v / len(paths)).to(dtypes[k]).contiguous() for k, v in total.items()}, str(tmp / MODEL))
        (tmp / META).write_text(json.dumps({**meta, "averaged": [str(p) for p in paths]}, indent=2) + "\n")
    return Path(out)

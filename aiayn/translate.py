"""Translator: text in, text out, N lines in -> N lines out, always in order.

Lines are encoded with the run's SentencePiece model, sorted by length and cut into batches of
about ``batch_tokens`` source tokens (so padding stays small), decoded with beam search (or greedy
or sampling), and put back in input order. Empty or whitespace-only lines give empty lines;
lines longer than the model accepts are truncated with one warning on stderr.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from . import checkpoint
from .config import DecodeConfig, RunConfig
from .model import Transformer
from .runtime import (
    autocast,
    eval_mode,
    keep_freed_memory,
    map_in_threads,
    resolve_device,
    resolve_precision,
    resolve_workers,
)
from .search import Hypothesis, beam_search, greedy, sample
from .tokenizer import Tokenizer

log = logging.getLogger(__name__)

CHECKPOINT_PREFERENCE = ("averaged", "best", "last")


def find_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(run dir, checkpoint dir) for a run dir (averaged/ > best/ > last/ > newest step) or a checkpoint in one."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such run directory or checkpoint")
    if checkpoint.is_checkpoint(p):
        run = next((d for d in (p.parent, p.parent.parent) if (d / "config.json").is_file()), None)
        if run is None:
            raise FileNotFoundError(f"{p} is a checkpoint, but no config.json was found in its run directory")
        return run, p
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{p} is not a run directory (no config.json) or a checkpoint")
    for name in CHECKPOINT_PREFERENCE:
        if checkpoint.is_checkpoint(p / name):
            return p, p / name
    steps = sorted((d for d in (p / "checkpoints").glob("step_*") if checkpoint.is_checkpoint(d)),
                   key=lambda d: int(d.name.split("_")[1]))
    if not steps:
        raise FileNotFoundError(f"{p} has no checkpoint yet (train first)")
    return p, steps[-1]


def _batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices sorted by length, cut so that (count x longest) <= batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) + 1) * max(lengths[i], 1) > batch_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def translate_ids(
    model: Transformer, src_ids: Sequence[Sequence[int]], decode: DecodeConfig, device: torch.device,
    precision: str = "fp32", generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """Decode each source id sequence (no EOS). Returns ``decode.nbest`` hypotheses per input, in input order."""
    cfg = model.cfg
    limit = cfg.max_positions - 1
    if any(len(s) > limit for s in src_ids):
        log.warning("some inputs are longer than the model's %d source tokens and were truncated", limit)
    seqs = [list(s[:limit]) + [cfg.eos_id] for s in src_ids]
    args = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, min_len=decode.min_len)

    def run(batch: list[int]) -> list[list[Hypothesis]]:
        S = max(len(seqs[i]) for i in batch)
        src = torch.full((len(batch), S), cfg.pad_id, dtype=torch.long)
        for row, i in enumerate(batch):
            src[row, : len(seqs[i])] = torch.tensor(seqs[i])
        src = src.to(device)
        with autocast(device, precision):   # thread-local: entered by the thread that decodes
            if decode.sampling:
                return [[h] for h in sample(model, src, decode.temperature, decode.top_k, decode.top_p,
                                            generator=generator, **args)]  # type: ignore[arg-type]
            if decode.beam == 1:
                return [[h] for h in greedy(model, src, **args)]  # type: ignore[arg-type]
            return beam_search(model, src, decode.beam, decode.lenpen, nbest=decode.nbest, **args)  # type: ignore[arg-type]

    batches = _batches([len(s) for s in seqs], max(1, decode.batch_tokens // max(1, decode.beam)))
    # sampling stays on one thread: the order of its random draws would otherwise depend on thread timing
    workers = 1 if decode.sampling else resolve_workers(decode.workers, device)
    results: list[list[Hypothesis]] = [[] for _ in seqs]
    with eval_mode(model):
        for batch, hyps in zip(batches, map_in_threads(run, batches, workers), strict=True):
            for i, h in zip(batch, hyps, strict=True):
                results[i] = h
    return results


def reduce_precision(model: Transformer, precision: str) -> Transformer:
    """``model`` for inference in ``precision``: converted in place to bf16/fp16, or a copy with int8
    dynamically quantized linear layers (CPU); fp32 leaves it as it is."""
    if precision in ("bf16", "fp16"):
        return model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    if precision == "int8":
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("precision=int8 (dynamic quantization) runs on CPUs only; use bf16 or fp16 on GPUs")
        import warnings

        try:
            from torch.ao.quantization import quantize_dynamic
        except ImportError:
            raise ValueError(f"precision=int8 uses torch.ao.quantization.quantize_dynamic, which PyTorch "
                             f"{torch.__version__} does not have; use precision=fp32 or bf16") from None
        with warnings.catch_warnings():   # torch.ao's eager quantization is deprecated in favour of torchao
            warnings.simplefilter("ignore")
            quantized = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        _lean_int8_calls(quantized)
        return quantized
    if precision != "fp32":
        raise ValueError(f"precision={precision!r}: expected fp32, bf16, fp16, int8 or auto")
    return model


class Int8Linear(torch.nn.Module):
    """A dynamically quantized linear layer called straight through its kernel.

    ``torch.ao``'s module reaches the kernel through several Python attribute lookups, an operator looked
    up by name with keyword arguments and a no-op dtype conversion: ~14 us per call, 19 calls per decoding
    step of the small model (measured: whole beam-4 search 1.03x faster without them). Same kernel,
    same result: int8 weights, activations quantized per call with 7-bit range (``reduce_range``, as
    ``torch.ao`` does on x86).
    """

    def __init__(self, quantized: torch.nn.Module, packed: object) -> None:
        super().__init__()
        self.quantized = quantized    # kept for its repr and state_dict
        self.packed = packed
        self.kernel = torch.ops.quantized.linear_dynamic.default

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.packed, True)


def _lean_int8_calls(model: torch.nn.Module) -> None:
    """Replace each ``torch.ao`` dynamic int8 Linear by an :class:`Int8Linear` around the same packed weights
    (left as they are where a PyTorch version stores them differently)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            packed = getattr(getattr(child, "_packed_params", None), "_packed_params", None)
            if packed is not None and getattr(child, "version", 0) >= 4 and child._packed_params.dtype == torch.qint8:
                setattr(parent, name, Int8Linear(child, packed))


class Translator:
    """A trained model with its tokenizer and decoding settings: ``translate(lines) -> lines``."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, decode: DecodeConfig | None = None,
                 device: str | torch.device = "auto", precision: str = "fp32") -> None:
        """``precision``: fp32; bf16 or fp16 (weights and activations in that type, log-probabilities in fp32);
        int8 (dynamically quantized linear layers, CPU); auto (bf16 where the hardware is fast at it)."""
        keep_freed_memory()
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.model = reduce_precision(model.to(self.device).eval(), self.precision)
        self.tokenizer = tokenizer
        self.decode = decode or DecodeConfig()

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32") -> Translator:
        """From a run dir (its averaged/, best/ or last/ checkpoint) or a checkpoint dir inside one."""
        run, ckpt = find_checkpoint(path)
        cfg = RunConfig.load(run / "config.json")
        model = Transformer(cfg.model)
        checkpoint.load_weights(model, ckpt)
        log.debug("loaded %s", ckpt)
        return cls(model, Tokenizer(run / "spm.model"), cfg.decode, device, precision)

    def settings(self, **overrides: object) -> DecodeConfig:
        """The decoding settings with some fields overridden (None values are ignored)."""
        return dataclasses.replace(self.decode, **{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]

    def translate_hypotheses(self, lines: Sequence[str], **overrides: object) -> list[list[Hypothesis]]:
        decode = self.settings(**overrides)
        blank = [not line.strip() for line in lines]
        todo = [i for i, b in enumerate(blank) if not b]
        ids = self.tokenizer.encode([lines[i] for i in todo])
        hyps = translate_ids(self.model, ids, decode, self.device)
        # a blank line translates to a blank line: nbest empty hypotheses, so n-best output stays rectangular
        out: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] * max(1, decode.nbest) for _ in lines]
        for i, h in zip(todo, hyps, strict=True):
            out[i] = h
        return out

    def translate(self, lines: Sequence[str], **overrides: Any) -> list[str]:
        """One translation per input line, in order. Overrides: ``beam`` (1 = greedy), ``lenpen``, any
        other :class:`DecodeConfig` field."""
        hyps = self.translate_hypotheses(lines, **{**overrides, "nbest": 1})
        return self.detokenize([h[0].tokens for h in hyps])

    def detokenize(self, token_lists: list[list[int]]) -> list[str]:
        # a translation is one line: no newline may come out of the decoder
        return [t.replace("\n", " ").replace("\r", " ") for t in self.tokenizer.decode(token_lists)]

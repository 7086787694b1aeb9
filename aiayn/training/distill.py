"""Sequence-level knowledge distillation (Kim & Rush, 2016): a teacher's translations of the training sources become
the targets a student learns from, so that a small, fast student (a deep encoder and a shallow decoder, say) learns
what the teacher would say instead of the harder task of matching every reference.

``distill(teacher, data, out)`` translates every training source line of the data dir ``data`` with the run
``teacher`` (its beam, int8 where the CPU has no fast bf16, all cores) and writes the data dir ``out``: the teacher's
tokenizer, the teacher's outputs as the training targets, the validation and test splits with their real references.

- Work is cut into shards of ``shard_lines`` lines, each written to ``OUT.work/`` when done (atomically): a killed
  run started again skips the finished shards, losing at most the shard each process was translating.
- Under torchrun each process translates its own shards (shard i goes to rank i mod world); rank 0 assembles the
  data dir once all are done. The result is identical to one process's: a shard's translation does not depend on who
  makes it.
- Memory stays bounded: the sources are read and the outputs written shard by shard, and the data dir is built by
  ``prepare.prepare``, which streams.
- Options (:class:`DistillOptions`): keep the original pairs beside the distilled ones; drop distilled pairs whose
  length ratio or mean token log-probability is an outlier.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import check, setting
from ..data.datadir import DataDir, DataError, Source
from ..data.prepare import PrepareOptions, prepare
from ..engines.torch import TorchEngine
from ..precision import cpu_has_fast_bf16
from ..rundir import RunDir
from ..runtime import resolve_device
from .distributed import Distributed

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class DistillOptions:
    """How the distilled training split is made (each an ``aiayn distill`` flag)."""

    shard_lines: int = setting(5000, "lines per shard: the unit of work a process takes, and the most a kill loses",
                               ge=1)
    keep_original: bool = setting(False, "also keep the original pairs beside the distilled ones")
    max_ratio: float = setting(0.0, "drop a distilled pair whose output has more than this x its source's tokens, or "
                               "less than 1/this (0: keep all; prepare's own length filters apply as ever)", ge=0)
    min_logprob: float = setting(0.0, "drop a distilled pair whose mean log-probability per token is below this (a "
                                 "negative number; 0: keep all)", le=0)

    def __post_init__(self) -> None:
        check(self)
        if 0 < self.max_ratio < 1:
            raise ValueError(f"DistillOptions.max_ratio={self.max_ratio}: expected 0 (off) or a ratio >= 1")
        if self.min_logprob > 0:
            raise ValueError(f"DistillOptions.min_logprob={self.min_logprob}: expected 0 (off) or a negative number")


def teacher_precision(device: str = "auto") -> str:
    """The teacher's precision when none is given: int8 on a CPU without fast bf16 (AVX2: fp32 and int8 are the fast
    paths there), else auto (bf16 where the hardware is fast at it)."""
    return "int8" if resolve_device(device).type == "cpu" and not cpu_has_fast_bf16() else "auto"


def distill(teacher: str | Path, data: str | Path, out: str | Path, opts: DistillOptions | None = None,
            force: bool = False, **decode: Any) -> Path:
    """Write the distilled data dir ``out`` (see the module's docstring); ``decode``: any DecodeConfig field for the
    teacher (its run's settings otherwise; precision: :func:`teacher_precision`). Returns ``out``."""
    opts = opts or DistillOptions()
    out, d = Path(out), DataDir(data)
    decode.setdefault("precision", teacher_precision(decode.get("device") or "auto"))
    translator = TorchEngine.load(teacher, **decode)
    dist = Distributed.from_env()
    dist.setup(translator.device)
    work = out.parent / f"{out.name}.work"
    src, _ = d.split("train")
    shards = math.ceil(len(src) / opts.shard_lines)
    _claim(work, _settings(teacher, d, translator, opts), force and dist.main, dist)
    mine = [i for i in range(shards) if i % dist.world == dist.rank and not _shard(work, i).is_file()]
    _translate_shards(translator, d, work, mine, opts.shard_lines, shards, show=dist.main)
    dist.barrier()
    if dist.main:
        _assemble(teacher, d, work, out, shards, opts, translator)
        shutil.rmtree(work)
    dist.close()
    return out


def _settings(teacher: str | Path, d: DataDir, t: TorchEngine, opts: DistillOptions) -> dict[str, Any]:
    """What the shards in a work dir depend on: a work dir made with other settings is not resumed."""
    checkpoint = RunDir.locate(teacher)[1]
    weights = {f.name: [f.stat().st_size, f.stat().st_mtime] for f in sorted(checkpoint.iterdir()) if f.is_file()}
    return {"teacher": str(checkpoint.resolve()), "weights": weights, "data": d.hash,
            "decode": dataclasses.asdict(t.decode), "shard_lines": opts.shard_lines}


def _claim(work: Path, settings: dict[str, Any], force: bool, dist: Distributed) -> None:
    """Start ``work`` or resume it: refuse a work dir left by a run with other settings (unless ``force``)."""
    marker = work / "settings.json"
    if dist.main:
        if force:
            shutil.rmtree(work, ignore_errors=True)
        if marker.is_file() and json.loads(marker.read_text()) != settings:
            raise DataError(f"{work} holds the shards of a distillation with other settings (teacher, data, decoding "
                            "or shard size); remove it, or pass --force to start again")
        work.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(settings, indent=2) + "\n")
        done = sum(1 for _ in work.glob("shard-*.jsonl"))
        if done:
            log.info("resuming %s: %d shard(s) already translated", work, done)
    dist.barrier()


def _shard(work: Path, i: int) -> Path:
    return work / f"shard-{i:06d}.jsonl"


def _translate_shards(t: TorchEngine, d: DataDir, work: Path, todo: list[int], size: int, shards: int,
                      show: bool) -> None:
    """Translate shards ``todo`` of the training sources, each into its file (source, output, mean log-prob)."""
    from tqdm import tqdm

    src, _ = d.split("train")
    vocab = d.vocab()
    lines = sum(min(size, len(src) - i * size) for i in todo)
    with tqdm(total=lines, unit=" lines", disable=not show, desc="distilling", dynamic_ncols=True) as bar:
        for i in todo:
            ids = [src[j].tolist() for j in range(i * size, min((i + 1) * size, len(src)))]
            text = vocab.src.decode(ids)
            hyps = [h[0] for h in t.translate_hypotheses(text, nbest=1)]
            outputs = t.detokenize([h.tokens for h in hyps])
            rows = [{"src": s, "out": o, "lp": round(h.logprob / (len(h.tokens) + 1), 4), "n": len(h.tokens),
                     "ns": len(x)} for s, o, h, x in zip(text, outputs, hyps, ids, strict=True)]
            tmp = _shard(work, i).with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
            os.replace(tmp, _shard(work, i))                          # a shard file is whole or absent
            bar.update(len(ids))
    log.info("translated %d lines in %d shard(s) (of %d)", lines, len(todo), shards)


def _dropped_because(row: dict[str, Any], opts: DistillOptions) -> str | None:
    """Why a distilled pair is dropped (None: kept)."""
    if not row["out"].strip():
        return "empty"
    if opts.max_ratio and max(row["n"], 1) > opts.max_ratio * max(row["ns"], 1) or \
            opts.max_ratio and max(row["ns"], 1) > opts.max_ratio * max(row["n"], 1):
        return "ratio"
    if opts.min_logprob and row["lp"] < opts.min_logprob:
        return "logprob"
    return None


def _assemble(teacher: str | Path, d: DataDir, work: Path, out: Path, shards: int, opts: DistillOptions,
              t: TorchEngine) -> None:
    """The shards (and the original pairs, if kept) as text, then ``prepare`` with the teacher's tokenizer."""
    src_lang, tgt_lang = d.src, d.tgt
    text = work / "text"
    text.mkdir(exist_ok=True)
    dropped = {"empty": 0, "ratio": 0, "logprob": 0}
    kept = 0
    with open(text / f"train.{src_lang}", "w", encoding="utf-8") as fs, \
            open(text / f"train.{tgt_lang}", "w", encoding="utf-8") as ft:
        for i in range(shards):
            for line in _shard(work, i).read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                reason = _dropped_because(row, opts)
                if reason:
                    dropped[reason] += 1
                    continue
                fs.write(_one_line(row["src"]) + "\n")
                ft.write(_one_line(row["out"]) + "\n")
                kept += 1
        if not kept:
            raise DataError(f"all {sum(dropped.values())} distilled pairs were dropped by the filters ({dropped}); "
                            f"loosen --max-ratio / --min-logprob (the shards stay in {work})")
        original = _write_original(d, fs, ft) if opts.keep_original else 0
    sources = {"train": Source(text / f"train.{src_lang}", text / f"train.{tgt_lang}")}
    for split in ("valid", "test"):
        if d.has_split(split):
            sources[split] = Source(d.raw(split, "src"), d.raw(split, "tgt"))
    vocab = RunDir.locate(teacher)[0].vocab()                          # the teacher's tokenizer, the student's too
    files = (str(vocab.src_file),) if vocab.joint else (str(vocab.src_file), str(vocab.tgt_file))
    note = {"teacher": str(teacher), "decode": dataclasses.asdict(t.decode), "data": str(d.path), "distilled": kept,
            "dropped": dropped, "original_pairs": original, **dataclasses.asdict(opts)}
    prepare(sources, out, PrepareOptions(src=src_lang, tgt=tgt_lang, tokenizers=files), force=True,
            extra={"distilled": note})
    log.info("distilled %d pairs (dropped: %s)%s into %s", kept, ", ".join(f"{k} {v}" for k, v in dropped.items()),
             f", with {original} original pairs" if original else "", out)


def _write_original(d: DataDir, fs: Any, ft: Any) -> int:
    """The data dir's own training pairs, as text, after the distilled ones."""
    vocab = d.vocab()
    src, tgt = d.split("train")
    for start in range(0, len(src), 10_000):
        stop = min(start + 10_000, len(src))
        for s, t in zip(vocab.src.decode([src[j].tolist() for j in range(start, stop)]),
                        vocab.tgt.decode([tgt[j].tolist() for j in range(start, stop)]), strict=True):
            fs.write(_one_line(s) + "\n")
            ft.write(_one_line(t) + "\n")
    return len(src)


def _one_line(text: str) -> str:
    return text.replace("\n", " ").replace("\r", " ")
